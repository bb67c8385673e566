/* Rank 0's trajectory and group book-keeping (include/libra/traj_table.h). */
#include "libra/traj_table.h"

#include <stdlib.h>
#include <string.h>

#include "libra/log.h"

void tt_init(struct traj_table *tt, int n_samples)
{
    memset(tt, 0, sizeof *tt);
    tt->n_samples = n_samples;
}

void tt_free(struct traj_table *tt)
{
    free(tt->t);
    free(tt->g);
    free(tt->queue);
    free(tt->buffered);
    memset(tt, 0, sizeof *tt);
}

int64_t tt_launch_group(struct traj_table *tt, int64_t prompt_id, int prompt_tokens, int step,
                        int launch_version, double now)
{
    XGROW(tt->g, tt->cap_group, tt->n_group + 1);
    XGROW(tt->t, tt->cap_traj, tt->n_traj + (size_t)tt->n_samples);
    int64_t gid = (int64_t)tt->n_group++;
    struct group *g = &tt->g[gid];
    *g = (struct group){gid, prompt_id, (int64_t)tt->n_traj, tt->n_samples, 0, 0, launch_version};
    for (int s = 0; s < tt->n_samples; s++) {
        int64_t id = (int64_t)tt->n_traj++;
        struct traj *t = &tt->t[id];
        memset(t, 0, sizeof *t);
        t->id = id;
        t->prompt_id = prompt_id;
        t->group_id = gid;
        t->state = TS_QUEUED;
        t->ctx_tokens = t->prompt_tokens = prompt_tokens;
        t->leader = -1;
        t->step_start = step;
        t->version_start = -1;
        t->version_end = -1;
        t->step_consumed = -1;
        t->t_start = now;
        t->t_end = -1;
        tt_queue_push(tt, id);
    }
    return gid;
}

static void queue_grow(struct traj_table *tt)
{
    if (tt->q_len < tt->q_cap) return;
    size_t cap = tt->q_cap ? 2 * tt->q_cap : 256;
    int64_t *q = xmalloc(cap * sizeof *q);
    for (size_t i = 0; i < tt->q_len; i++) q[i] = tt->queue[(tt->q_head + i) % tt->q_cap];
    free(tt->queue);
    tt->queue = q;
    tt->q_cap = cap;
    tt->q_head = 0;
}

void tt_queue_push(struct traj_table *tt, int64_t traj_id)
{
    queue_grow(tt);
    tt->queue[(tt->q_head + tt->q_len++) % tt->q_cap] = traj_id;
    if ((size_t)traj_id < tt->n_traj) tt->t[traj_id].state = TS_QUEUED;
}

void tt_queue_push_front(struct traj_table *tt, int64_t traj_id)
{
    queue_grow(tt);
    tt->q_head = (tt->q_head + tt->q_cap - 1) % tt->q_cap;
    tt->queue[tt->q_head] = traj_id;
    tt->q_len++;
    if ((size_t)traj_id < tt->n_traj) tt->t[traj_id].state = TS_QUEUED;
}

int tt_queue_pop(struct traj_table *tt, int64_t *traj_id)
{
    if (tt->q_len == 0) return 0;
    *traj_id = tt->queue[tt->q_head];
    tt->q_head = (tt->q_head + 1) % tt->q_cap;
    tt->q_len--;
    return 1;
}

int tt_finish(struct traj_table *tt, int64_t traj_id, double now)
{
    struct traj *t = &tt->t[traj_id];
    struct group *g = &tt->g[t->group_id];
    t->state = TS_DONE;
    t->t_end = now;
    if (++g->n_done < g->n) return 0;
    for (int s = 0; s < g->n; s++) tt->t[g->first_traj + s].state = TS_BUFFERED;
    XGROW(tt->buffered, tt->cap_buffered, tt->n_buffered + 1);
    tt->buffered[tt->n_buffered++] = g->id;
    return 1;
}

struct version_id {
    int version;
    int64_t id;
};

static int cmp_version_id(const void *a, const void *b)
{
    const struct version_id *x = a, *y = b;
    if (x->version != y->version) return x->version < y->version ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

static int in_list(const int64_t *ids, int n, int64_t id)
{
    for (int i = 0; i < n; i++)
        if (ids[i] == id) return 1;
    return 0;
}

/* After training `chosen` at version v, can the later steps still train every
 * remaining group in time?  For each u: untrained groups with L <= u must number at
 * most max(0, u + S - v) * want. */
static int leaves_feasible(const struct traj_table *tt, const int64_t *chosen, int n, int v, int S,
                           int want)
{
    /* Count the remaining untrained groups per launch version, then accumulate. */
    int lo = v + 1, hi = -1;
    for (size_t i = (size_t)tt->groups_trained; i < tt->n_group; i++) {
        const struct group *g = &tt->g[i];
        if (g->trained || in_list(chosen, n, g->id)) continue;
        if (g->launch_version < lo) lo = g->launch_version;
        if (g->launch_version > hi) hi = g->launch_version;
    }
    if (hi < 0) return 1;
    int64_t *count = xcalloc((size_t)(hi - lo + 1), sizeof *count);
    for (size_t i = (size_t)tt->groups_trained; i < tt->n_group; i++) {
        const struct group *g = &tt->g[i];
        if (!g->trained && !in_list(chosen, n, g->id)) count[g->launch_version - lo]++;
    }
    int ok = 1;
    int64_t below = 0;
    for (int u = lo; u <= hi && ok; u++) {
        below += count[u - lo];
        int64_t room = u + S - v > 0 ? (int64_t)(u + S - v) * want : 0;
        ok = below <= room;
    }
    free(count);
    return ok;
}

int tt_select_batch(struct traj_table *tt, int want, int v, int max_staleness, int64_t *out)
{
    if ((int)tt->n_buffered < want) return 0;
    struct version_id *c = xmalloc(tt->n_buffered * sizeof *c);
    for (size_t i = 0; i < tt->n_buffered; i++) {
        int64_t gid = tt->buffered[i];
        c[i] = (struct version_id){tt->g[gid].launch_version, gid};
    }
    qsort(c, tt->n_buffered, sizeof *c, cmp_version_id);
    int n = 0;
    for (size_t i = 0; i < tt->n_buffered && n < want; i++)
        if (v - c[i].version <= max_staleness) out[n++] = c[i].id;
    free(c);
    if (n < want || !leaves_feasible(tt, out, n, v, max_staleness, want)) return 0;
    return n;
}

void tt_mark_trained(struct traj_table *tt, const int64_t *groups, int n, int step)
{
    for (int i = 0; i < n; i++) {
        struct group *g = &tt->g[groups[i]];
        g->trained = 1;
        for (int s = 0; s < g->n; s++) {
            struct traj *t = &tt->t[g->first_traj + s];
            t->state = TS_TRAINED;
            t->step_consumed = step;
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < tt->n_buffered; i++)
        if (!tt->g[tt->buffered[i]].trained) tt->buffered[k++] = tt->buffered[i];
    tt->n_buffered = k;
    /* groups_trained: the prefix of group ids that are all trained (scan start). */
    while ((size_t)tt->groups_trained < tt->n_group && tt->g[tt->groups_trained].trained)
        tt->groups_trained++;
}

int64_t tt_groups_in_flight(const struct traj_table *tt)
{
    int64_t n = 0;
    for (size_t i = (size_t)tt->groups_trained; i < tt->n_group; i++)
        if (tt->g[i].n_done < tt->g[i].n) n++;
    return n;
}
