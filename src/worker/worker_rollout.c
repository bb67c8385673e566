/*
 * The rollout-instance role: every rank of an instance holds the device's engine for
 * it; the leader takes rank 0's turn requests, runs the engine and reports finished
 * turns as result batches (with the instance's busy time and queue state on the
 * first result); the other members serve the leader's collectives. An instance that
 * a plan dissolves, or the run's end, hands its in-flight turns back to rank 0 in one
 * TAG_HANDBACK batch (sent even when empty: rank 0 counts them).
 */
#include <math.h>

#include "libra/log.h"
#include "worker_internal.h"

static int is_leader(const struct worker *w)
{
    const struct rank_assign *a = &w->plan.ranks[w->rank];
    return a->role == ROLE_ROLLOUT && a->index == 0;
}

void wr_open(struct worker *w)
{
    if (w->plan.ranks[w->rank].role != ROLE_ROLLOUT || w->inst) return;
    w->inst_leader = is_leader(w);
    w->inst = w->ops->inst_open(w->dev, w->inst_leader);
}

void wr_on_turn_req(struct worker *w, const void *msg, size_t len)
{
    struct wire_reader rd;
    struct wire_turn_req req;
    const int32_t *tokens;
    if (!w->inst || !w->inst_leader)
        FATAL("turn requests reached rank %d, which leads no rollout instance (role %s)", w->rank,
              role_name(w->plan.ranks[w->rank].role));
    int got = wire_reader_init(&rd, msg, len) < 0 ? -1 : 1;
    while (got == 1 && (got = wire_next_turn_req(&rd, &req, &tokens)) == 1)
        w->ops->inst_submit(w->inst, &req, tokens);
    if (got < 0) FATAL("malformed turn requests (%zu bytes) from rank 0", len);
}

int wr_progress(struct worker *w)
{
    if (!w->inst) return 0;
    int n = 0;
    int work = w->ops->inst_progress(w->inst, &w->pack, &n);
    if (n > 0) outbox_send(&w->ob, w->pack.data, w->pack.len, 0, TAG_TURN_RESULT, MPI_COMM_WORLD);
    return work || n > 0;
}

double wr_next_wake(const struct worker *w)
{
    return w->inst ? w->ops->inst_next_wake(w->inst) : INFINITY;
}

void wr_before_plan(struct worker *w, const struct plan *next)
{
    if (!w->inst) return;
    int survives = next && plan_instance_survives(&w->plan, next, w->rank);
    if (!survives && w->inst_leader) {
        w->ops->inst_handback(w->inst, &w->pack);
        outbox_send(&w->ob, w->pack.data, w->pack.len, 0, TAG_HANDBACK, MPI_COMM_WORLD);
    }
    w->ops->inst_quiesce(w->inst);
    if (survives) return;
    w->ops->inst_close(w->inst);
    w->inst = NULL;
}
