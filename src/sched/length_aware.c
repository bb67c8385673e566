/*
 * sched.type = length_aware (reference cmlfq.md §2.1): every turn is routed on its
 * own by the length of its context so far -- the first bucket whose max_tokens
 * holds ctx_tokens, else the last -- through the bucket chain of route.c
 * (preferred TPs, the nearest other buckets' TPs, the least loaded anywhere). With
 * sched.affinity a trajectory stays on its previous instance when that instance's
 * TP is one the turn's bucket prefers and its load is within SCHED_STICKY_MARGIN
 * of the choice. No remaining-length estimate (est_remaining -1).
 * Fixes against the reference: ties rotate instead of always taking the first
 * instance (§6.9); fallback is nearest-size first without repeats (§6.8); each
 * scheduler owns its bucket rules (§6.16: the reference shared mutable defaults).
 */
#include "sched_internal.h"

static void length_route(struct sched *s, const struct sched_turn *t, struct sched_traj *tr,
                         const struct sched_instance *inst, int n, struct sched_decision *d)
{
    int b = sched_bucket_for(s, t->ctx_tokens);
    int via;
    int i = sched_route_bucket(s, b, inst, n, &via);
    tr->bucket = b;
    d->bucket = b;
    d->est_remaining = -1;
    if (s->cfg.affinity && t->prev >= 0 && t->prev < n &&
        sched_bucket_has_tp(s, b, inst[t->prev].tp) && sched_keep_prev(s, t->prev, i, inst, n)) {
        d->instance = t->prev;
        d->reason = SCHED_R_STICKY;
        d->via = SCHED_VIA_PREFERRED;
        return;
    }
    d->instance = i;
    d->via = via;
    d->reason = t->turn == 0 ? SCHED_R_INITIAL : t->prev < 0 ? SCHED_R_REROUTE : SCHED_R_PER_TURN;
}

const struct sched_ops sched_length_aware_ops = {
    .name = "length_aware",
    .route = length_route,
};
