/*
 * The scheduler's interface (include/libra/sched.h): policy selection, the table of
 * live trajectories with their tool-return history, and the counters. Where a turn
 * goes is the policy's business (cmlfq.c, load_balance.c, length_aware.c,
 * la_mlfq.c); the shared routing chain is route.c.
 *
 * Live trajectories are kept in an open-addressing table (linear probing, backward-
 * shift deletion) keyed by trajectory id, so evaluation ids far beyond the book
 * cost nothing extra.
 */
#include "sched_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "libra/metrics_enums.h"

const char *const sched_reason_names[SCHED_R_COUNT] = {
    "initial", "informed", "sticky", "migrate", "reroute",
    "per_turn", "history", "scout", "scout_follow", "scout_timeout"};
const char *const sched_via_names[SCHED_VIA_COUNT] = {"preferred", "fallback", "global"};
_Static_assert(SCHED_MIG_COUNT == METRICS_N_MIG_WHY,
               "enum sched_mig_why's names are the metrics file's (metrics_enums.c)");

static const struct sched_ops *const policies[] = {&sched_cmlfq_ops, &sched_load_balance_ops,
                                                   &sched_length_aware_ops, &sched_la_mlfq_ops};
#define N_POLICIES (sizeof policies / sizeof policies[0])

/* ---- live trajectories ---- */

static size_t slot_of(int64_t id, size_t cap)
{
    uint64_t x = (uint64_t)id + 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return (size_t)(x ^ (x >> 31)) & (cap - 1);
}

static void traj_table_alloc(struct sched *s, size_t cap)
{
    s->traj = xmalloc(cap * sizeof *s->traj);
    for (size_t i = 0; i < cap; i++) s->traj[i].id = SCHED_TRAJ_EMPTY;
    s->traj_cap = cap;
}

static struct sched_traj *traj_find(const struct sched *s, int64_t id)
{
    for (size_t i = slot_of(id, s->traj_cap);; i = (i + 1) & (s->traj_cap - 1)) {
        if (s->traj[i].id == id) return &s->traj[i];
        if (s->traj[i].id == SCHED_TRAJ_EMPTY) return NULL;
    }
}

static struct sched_traj *traj_insert_slot(struct sched *s, int64_t id)
{
    size_t i = slot_of(id, s->traj_cap);
    while (s->traj[i].id != SCHED_TRAJ_EMPTY) i = (i + 1) & (s->traj_cap - 1);
    return &s->traj[i];
}

static void traj_grow(struct sched *s)
{
    struct sched_traj *old = s->traj;
    size_t old_cap = s->traj_cap;
    traj_table_alloc(s, 2 * old_cap);
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].id != SCHED_TRAJ_EMPTY) *traj_insert_slot(s, old[i].id) = old[i];
    free(old);
}

static struct sched_traj *traj_get(struct sched *s, const struct sched_turn *t)
{
    struct sched_traj *tr = traj_find(s, t->traj_id);
    if (tr) return tr;
    if (10 * (s->n_traj + 1) > 7 * s->traj_cap) traj_grow(s);
    tr = traj_insert_slot(s, t->traj_id);
    memset(tr, 0, sizeof *tr);
    tr->id = t->traj_id;
    tr->prompt_id = t->prompt_id;
    tr->bucket = -1;
    tr->eval = t->eval;
    tr->held_since = -1;
    s->n_traj++;
    return tr;
}

/* Backward-shift deletion keeps every probe chain intact without tombstones. */
static void traj_remove(struct sched *s, struct sched_traj *tr)
{
    free(tr->states);
    free(tr->pos);
    size_t mask = s->traj_cap - 1, hole = (size_t)(tr - s->traj);
    s->traj[hole].id = SCHED_TRAJ_EMPTY;
    for (size_t j = (hole + 1) & mask; s->traj[j].id != SCHED_TRAJ_EMPTY; j = (j + 1) & mask) {
        size_t home = slot_of(s->traj[j].id, s->traj_cap);
        /* j may move to the hole if its home is not cyclically in (hole, j]. */
        int stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (stays) continue;
        s->traj[hole] = s->traj[j];
        s->traj[j].id = SCHED_TRAJ_EMPTY;
        hole = j;
    }
    s->n_traj--;
}

/* ---- interface ---- */

int sched_init(struct sched *s, const struct sched_config *cfg, const struct rates *rates,
               const char *const *tool_names, int n_tools, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    if (rates) s->rates = *rates;
    s->tool_names = tool_names;
    s->n_tools = n_tools;
    for (size_t i = 0; i < N_POLICIES && !s->ops; i++)
        if (strcmp(cfg->type, policies[i]->name) == 0) s->ops = policies[i];
    if (!s->ops) {
        snprintf(err, errlen,
                 "sched.type: unknown policy '%s' (available: cmlfq, load_balance, length_aware, "
                 "la_mlfq)", cfg->type);
        return -1;
    }
    s->ts = (struct tool_state_config){cfg->payload_small, cfg->payload_large};
    if (tool_state_config_check(&s->ts, err, errlen)) return -1;
    if (cfg->n_buckets < 1 || cfg->n_buckets > CFG_MAX_BUCKETS) {
        snprintf(err, errlen, "sched.buckets: %d buckets (need 1 .. %d)", cfg->n_buckets,
                 CFG_MAX_BUCKETS);
        return -1;
    }
    s->n_bucket = cfg->n_buckets;
    for (int b = 0; b < s->n_bucket; b++) {
        const struct sched_bucket_spec *bs = &cfg->buckets[b];
        struct sched_bucket *k = &s->bucket[b];
        snprintf(k->name, sizeof k->name, "%s", bs->name);
        k->n_tp = bs->n_tp;
        memcpy(k->tp, bs->tp, sizeof k->tp);
        k->max_tokens = bs->max_tokens;
    }
    traj_table_alloc(s, 1024);
    s->cur_step = 0;
    if (s->ops->init && s->ops->init(s, err, errlen)) {
        sched_free(s);
        return -1;
    }
    return 0;
}

void sched_free(struct sched *s)
{
    if (!s || !s->traj) return;
    if (s->ops && s->ops->free) s->ops->free(s);
    for (size_t i = 0; i < s->traj_cap; i++)
        if (s->traj[i].id != SCHED_TRAJ_EMPTY) {
            free(s->traj[i].states);
            free(s->traj[i].pos);
        }
    free(s->traj);
    free(s->mig);
    s->traj = NULL;
    s->mig = NULL;
    s->n_traj = s->traj_cap = 0;
    s->n_mig = s->cap_mig = 0;
}

void sched_route(struct sched *s, const struct sched_turn *t, const struct sched_instance *inst,
                 int n, double now, struct sched_decision *d)
{
    s->now = now;
    struct sched_traj *tr = traj_get(s, t);
    *d = (struct sched_decision){.instance = -1, .reason = SCHED_R_INITIAL, .via = SCHED_VIA_PREFERRED,
                                 .bucket = -1, .est_remaining = -1};
    s->ops->route(s, t, tr, inst, n, d);
    if (d->instance < 0) {
        s->stats.holds++;
        s->step.holds++;
        return;
    }
    if (d->instance >= n) FATAL("sched %s: routed to instance %d of %d", s->ops->name, d->instance, n);
    s->stats.routes[d->reason]++;
    s->step.routes[d->reason]++;
    s->stats.via[d->via]++;
    s->step.via[d->via]++;
}

void sched_tool_return(struct sched *s, int64_t traj_id, int tool, int status, int payload_tokens,
                       int gen_tokens)
{
    struct sched_traj *tr = traj_find(s, traj_id);
    if (!tr) return;
    s->stats.tool_returns++;
    s->step.tool_returns++;
    int code = tool_state_code(&s->ts, tool, payload_tokens, status);
    if (code < 0) return; /* a tool outside the alphabet: no causal signal */
    if (tr->n_ret == tr->cap_ret) {
        tr->cap_ret = tr->cap_ret ? 2 * tr->cap_ret : 8;
        tr->states = xrealloc(tr->states, (size_t)tr->cap_ret * sizeof *tr->states);
        tr->pos = xrealloc(tr->pos, (size_t)tr->cap_ret * sizeof *tr->pos);
    }
    /* Positions never decrease (a handed-back turn does not rewind). */
    int last = tr->n_ret ? tr->pos[tr->n_ret - 1] : 0;
    tr->states[tr->n_ret] = code;
    tr->pos[tr->n_ret] = gen_tokens > last ? gen_tokens : last;
    tr->n_ret++;
}

void sched_finish(struct sched *s, int64_t traj_id, int gen_tokens, int learn)
{
    struct sched_traj *tr = traj_find(s, traj_id);
    if (!tr) return;
    learn = learn && !tr->eval;
    s->stats.finished++;
    s->step.finished++;
    if (learn) {
        s->stats.learned++;
        s->step.learned++;
    }
    if (s->ops->finish) s->ops->finish(s, tr, gen_tokens, learn);
    traj_remove(s, tr);
}

void sched_step_end(struct sched *s, int step)
{
    s->cur_step = step;
    if (s->ops->step_end) s->ops->step_end(s, step);
}

void sched_take_step(struct sched *s, struct sched_stats *out)
{
    *out = s->step;
    memset(&s->step, 0, sizeof s->step);
}

int sched_take_migrations(struct sched *s, const struct sched_migration **out)
{
    int n = s->n_mig;
    *out = s->mig;
    s->n_mig = 0;
    return n;
}

const struct ptree *sched_tree(const struct sched *s)
{
    return s->ops == &sched_cmlfq_ops ? sched_cmlfq_tree(s) : NULL;
}

int sched_bucket_index(const struct sched *s, const char *name)
{
    for (int b = 0; b < s->n_bucket; b++)
        if (strcmp(s->bucket[b].name, name) == 0) return b;
    return -1;
}
