/*
 * sched.type = load_balance (reference cmlfq.md §2.3): every instance is a
 * candidate for every turn, whatever its TP degree. The choice follows
 * sched.balance with rotating ties (route.c); instances at or above sched.max_load
 * are skipped unless all are, and then the least loaded of all takes the turn (via
 * "global"). With sched.affinity a trajectory stays on the instance that holds its
 * KV cache unless that one is more than SCHED_STICKY_MARGIN more loaded than the
 * choice. No buckets: decisions carry bucket -1 and no remaining-length estimate.
 * Fixes against the reference: sched.weights are honoured (balance = weighted).
 */
#include "sched_internal.h"

static void lb_route(struct sched *s, const struct sched_turn *t, struct sched_traj *tr,
                     const struct sched_instance *inst, int n, struct sched_decision *d)
{
    (void)tr;
    d->bucket = -1;
    d->est_remaining = -1;
    d->via = SCHED_VIA_PREFERRED;
    int i = sched_pick(s, inst, n, 0, 1);
    if (i < 0) {
        i = sched_pick(s, inst, n, 0, 0);
        d->via = SCHED_VIA_GLOBAL;
    }
    if (s->cfg.affinity && t->prev >= 0 && sched_keep_prev(s, t->prev, i, inst, n)) {
        d->instance = t->prev;
        d->reason = SCHED_R_STICKY;
        d->via = SCHED_VIA_PREFERRED;
        return;
    }
    d->instance = i;
    d->reason = t->turn == 0 ? SCHED_R_INITIAL : t->prev < 0 ? SCHED_R_REROUTE : SCHED_R_PER_TURN;
}

const struct sched_ops sched_load_balance_ops = {
    .name = "load_balance",
    .route = lb_route,
};
