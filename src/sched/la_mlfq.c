/*
 * sched.type = la_mlfq (reference cmlfq.md §2.2): a scout per prompt group, a
 * history of observed lengths per prompt, and threshold demotion.
 *
 *  First turn:  a prompt whose recorded length is at most sched.history_ttl steps
 *               old goes to the bucket of that length (reason history). Otherwise,
 *               in a group (n_samples > 1), the first trajectory routed becomes the
 *               group's scout and starts in the first bucket (scout); its siblings
 *               are held (instance -1) while the scout runs, then follow the bucket
 *               the scout moved to or finished in (scout_follow); a sibling held
 *               sched.scout_timeout_s seconds starts in the first bucket
 *               (scout_timeout). A lone trajectory starts in the first bucket.
 *  Later turns: sticky, unless the trajectory's generated tokens passed its
 *               bucket's max_tokens: it then moves to the bucket that holds its
 *               length so far (threshold demotion) and the turn is re-routed there.
 *  Finish:      the prompt's history records the bucket of the observed length.
 *  Step end:    history entries older than the ttl and finished scouts older than
 *               the ttl are dropped.
 *
 * Fixes against the reference:
 *  - Demotion really re-routes the turn (the reference only relabelled the
 *    request, and nothing called it); it goes straight to the bucket that holds the
 *    length so far rather than one bucket at a time. When the new bucket prefers
 *    the TP the trajectory already runs on (or the chain picks the same instance),
 *    it is relabelled and stays (logged as same_tp): re-prefilling elsewhere would
 *    gain nothing (§6.6).
 *  - The scout is identified by its trajectory id, not by (prompt, instance), so a
 *    sibling on the same instance is never mistaken for it (§6.14, §6.16).
 *  - History records the bucket of the observed length, not the routed category.
 *  - Running scouts survive the step end (the reference reset every scout each
 *    epoch, stranding held siblings until their timeout), and holding is a routing
 *    decision the controller re-asks, so there is no race between "pending" and
 *    registering a waiter.
 *  - Every trajectory, not only scouts, is checked for demotion.
 *
 * Limits: a scout whose trajectory never finishes keeps its siblings waiting only
 * until their timeout; its record stays until a finish names it.
 */
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "sched_internal.h"

enum scout_status { SCOUT_RUNNING = 0, SCOUT_MIGRATED, SCOUT_COMPLETED };

/* One prompt's entry: in the history table (bucket, step recorded) or in the scout
 * table (scout trajectory, status, its bucket, step it completed). */
struct lam_entry {
    int64_t prompt;
    int used;
    int bucket;
    int step;
    int64_t scout;
    int status;
};

/* prompt_id -> entry: open addressing, linear probing, load factor <= 1/2. */
struct lam_map {
    struct lam_entry *e; /* (cap), cap a power of two or 0 */
    size_t cap, n;
};

struct lam_state {
    struct lam_map history, scouts;
};

static size_t slot_of(int64_t key, size_t cap)
{
    uint64_t z = (uint64_t)key + 0x9e3779b97f4a7c15ull; /* splitmix64 finaliser */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (size_t)(z ^ (z >> 31)) & (cap - 1);
}

static struct lam_entry *map_find(const struct lam_map *m, int64_t key)
{
    if (m->cap == 0) return NULL;
    for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (!m->e[i].used) return NULL;
        if (m->e[i].prompt == key) return &m->e[i];
    }
}

/* Places e in a table known to have room and not to hold e->prompt. */
static void map_place(struct lam_entry *tab, size_t cap, const struct lam_entry *e)
{
    size_t i = slot_of(e->prompt, cap);
    while (tab[i].used) i = (i + 1) & (cap - 1);
    tab[i] = *e;
}

/* Rebuilds m into a table of cap slots with the entries keep() accepts. */
static void map_rebuild(struct lam_map *m, size_t cap,
                        int (*keep)(const struct lam_entry *, int, int), int step, int ttl)
{
    struct lam_entry *tab = xcalloc(cap, sizeof *tab);
    size_t n = 0;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->e[i].used || (keep && !keep(&m->e[i], step, ttl))) continue;
        map_place(tab, cap, &m->e[i]);
        n++;
    }
    free(m->e);
    m->e = tab;
    m->cap = cap;
    m->n = n;
}

/* The entry for key, created zeroed (but for the key) when absent. Pointers into
 * the map stay valid until the next map_put or map_rebuild. */
static struct lam_entry *map_put(struct lam_map *m, int64_t key)
{
    struct lam_entry *e = map_find(m, key);
    if (e) return e;
    if (2 * (m->n + 1) > m->cap) map_rebuild(m, m->cap ? 2 * m->cap : 64, NULL, 0, 0);
    struct lam_entry fresh = {.prompt = key, .used = 1};
    map_place(m->e, m->cap, &fresh);
    m->n++;
    return map_find(m, key);
}

static void map_free(struct lam_map *m)
{
    free(m->e);
    memset(m, 0, sizeof *m);
}

static int history_keep(const struct lam_entry *e, int step, int ttl)
{
    return step - e->step <= ttl;
}

static int scout_keep(const struct lam_entry *e, int step, int ttl)
{
    return e->status != SCOUT_COMPLETED || step - e->step <= ttl;
}

static int lam_init(struct sched *s, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    s->priv = xcalloc(1, sizeof(struct lam_state));
    return 0;
}

static void lam_free(struct sched *s)
{
    struct lam_state *st = s->priv;
    if (!st) return;
    map_free(&st->history);
    map_free(&st->scouts);
    free(st);
    s->priv = NULL;
}

static void route_to(struct sched *s, int b, int reason, struct sched_traj *tr,
                     const struct sched_instance *inst, int n, struct sched_decision *d)
{
    d->instance = sched_route_bucket(s, b, inst, n, &d->via);
    d->reason = reason;
    d->bucket = b;
    tr->bucket = b;
}

static void hold(struct sched_decision *d)
{
    d->instance = -1;
    d->reason = SCHED_R_SCOUT_FOLLOW;
    d->via = SCHED_VIA_PREFERRED;
    d->bucket = -1;
}

static void first_turn(struct sched *s, struct lam_state *st, const struct sched_turn *t,
                       struct sched_traj *tr, const struct sched_instance *inst, int n,
                       struct sched_decision *d)
{
    const struct lam_entry *h = map_find(&st->history, t->prompt_id);
    if (h && s->cur_step - h->step <= s->cfg.history_ttl && h->bucket < s->n_bucket) {
        route_to(s, h->bucket, SCHED_R_HISTORY, tr, inst, n, d);
        return;
    }
    if (t->n_samples <= 1) {
        route_to(s, 0, SCHED_R_INITIAL, tr, inst, n, d);
        return;
    }
    struct lam_entry *sc = map_find(&st->scouts, t->prompt_id);
    if (!sc) {
        sc = map_put(&st->scouts, t->prompt_id);
        sc->scout = t->traj_id;
        sc->status = SCOUT_RUNNING;
        sc->bucket = 0;
        sc->step = s->cur_step;
        tr->role = 1;
        route_to(s, 0, SCHED_R_SCOUT, tr, inst, n, d);
        return;
    }
    if (sc->status != SCOUT_RUNNING) {
        route_to(s, sc->bucket, SCHED_R_SCOUT_FOLLOW, tr, inst, n, d);
        return;
    }
    if (sc->scout == t->traj_id) { /* the scout asks again before its first decision */
        tr->role = 1;
        route_to(s, sc->bucket, SCHED_R_SCOUT, tr, inst, n, d);
        return;
    }
    if (tr->held_since < 0) tr->held_since = s->now;
    if (s->now - tr->held_since >= s->cfg.scout_timeout_s)
        route_to(s, 0, SCHED_R_SCOUT_TIMEOUT, tr, inst, n, d);
    else
        hold(d);
}

/* Generated tokens passed the bucket's threshold: move to the bucket holding them. */
static void demote(struct sched *s, struct lam_state *st, const struct sched_turn *t,
                   struct sched_traj *tr, const struct sched_instance *inst, int n,
                   struct sched_decision *d)
{
    int from = tr->bucket, to = sched_bucket_for(s, t->gen_tokens);
    int prev = t->prev >= 0 && t->prev < n ? t->prev : -1;
    struct sched_migration m = {.traj_id = t->traj_id, .turn = t->turn, .from_instance = prev,
                                .from_bucket = from, .to_bucket = to, .est_remaining = -1};
    if (prev >= 0 && sched_bucket_has_tp(s, to, inst[prev].tp)) {
        d->instance = prev;
        d->via = SCHED_VIA_PREFERRED;
    } else {
        d->instance = sched_route_bucket(s, to, inst, n, &d->via);
    }
    d->bucket = to;
    tr->bucket = to;
    m.to_instance = d->instance;
    if (d->instance == prev) {
        m.why = SCHED_MIG_SAME_TP;
        d->reason = SCHED_R_STICKY;
    } else {
        m.why = SCHED_MIG_THRESHOLD;
        d->reason = SCHED_R_MIGRATE;
        tr->migrations++;
    }
    sched_log_migration(s, &m);
    struct lam_entry *sc = tr->role == 1 ? map_find(&st->scouts, tr->prompt_id) : NULL;
    if (sc && sc->scout == tr->id && sc->status != SCOUT_COMPLETED) {
        sc->status = SCOUT_MIGRATED; /* releases the held siblings to its new bucket */
        sc->bucket = to;
    }
}

static void lam_route(struct sched *s, const struct sched_turn *t, struct sched_traj *tr,
                      const struct sched_instance *inst, int n, struct sched_decision *d)
{
    struct lam_state *st = s->priv;
    d->est_remaining = -1;
    if (tr->bucket < 0 || tr->bucket >= s->n_bucket) {
        first_turn(s, st, t, tr, inst, n, d);
        return;
    }
    if (tr->bucket < s->n_bucket - 1 && t->gen_tokens > s->bucket[tr->bucket].max_tokens) {
        demote(s, st, t, tr, inst, n, d);
        return;
    }
    if (t->prev < 0 || t->prev >= n) {
        route_to(s, tr->bucket, SCHED_R_REROUTE, tr, inst, n, d);
        return;
    }
    d->instance = t->prev;
    d->reason = SCHED_R_STICKY;
    d->via = SCHED_VIA_PREFERRED;
    d->bucket = tr->bucket;
}

static void lam_finish(struct sched *s, struct sched_traj *tr, int gen_tokens, int learn)
{
    struct lam_state *st = s->priv;
    int observed = sched_bucket_for(s, gen_tokens);
    if (learn) {
        struct lam_entry *h = map_put(&st->history, tr->prompt_id);
        h->bucket = observed;
        h->step = s->cur_step;
    }
    struct lam_entry *sc = tr->role == 1 ? map_find(&st->scouts, tr->prompt_id) : NULL;
    if (sc && sc->scout == tr->id) {
        sc->status = SCOUT_COMPLETED;
        sc->bucket = observed;
        sc->step = s->cur_step;
    }
}

static void lam_step_end(struct sched *s, int step)
{
    struct lam_state *st = s->priv;
    int ttl = s->cfg.history_ttl;
    if (st->history.cap) map_rebuild(&st->history, st->history.cap, history_keep, step, ttl);
    if (st->scouts.cap) map_rebuild(&st->scouts, st->scouts.cap, scout_keep, step, ttl);
}

const struct sched_ops sched_la_mlfq_ops = {
    .name = "la_mlfq",
    .init = lam_init,
    .free = lam_free,
    .route = lam_route,
    .finish = lam_finish,
    .step_end = lam_step_end,
};
