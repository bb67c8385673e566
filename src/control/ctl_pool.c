/*
 * The elastic hybrid pool, rank 0's side (struct ctl_pool in controller.h;
 * reference/planner.md §3 with the §6.9-6.11 fixes; docs/planner.md).
 *
 * Lending: the pool controller (pool_ctl.h) says how many whole training replicas
 * (train tp x pp ranks each) to borrow; this file picks which base-plan instances
 * become hybrid ranks (smallest TP first, the last such instance first, each holding
 * a whole number of replicas), and the live plan is plan_lend(base, lend). The
 * re-split keeps the core training communicator (plan_train_same): only the
 * rollout, sync and hybrid-lane communicators change. A dissolved instance hands its
 * in-flight turns back to rank 0 as in any re-split; nothing is lost.
 *
 * Joining is non-blocking: a newly lent rank fetches the weights and its optimizer
 * shard in the background and sends TAG_HYBRID_READY. Until every rank of a replica
 * is ready the replica gets no share of any batch: the core keeps stepping and
 * the batch is split over the replicas that are there, each share normalised by the
 * whole batch's tokens, so the gradient is the same mean whoever takes part
 * (§6.10). A join not ready after plan.pool_join_timeout_s is rolled back to rollout;
 * a READY from a join that was released or rolled back (an older epoch) is stale and
 * ignored.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_internal.h"
#include "libra/log.h"
#include "libra/pool_ctl.h"

void ctl_pool_init(struct controller *c)
{
    struct ctl_pool *p = &c->pool;
    memset(p, 0, sizeof *p);
    p->lend = xcalloc((size_t)c->world + 1, sizeof *p->lend);
    p->ready = xcalloc((size_t)c->world, sizeof *p->ready);
    p->lent_epoch = xmalloc((size_t)c->world * sizeof *p->lent_epoch);
    p->join_t0 = xcalloc((size_t)c->world, sizeof *p->join_t0);
    for (int r = 0; r < c->world; r++) p->lent_epoch[r] = -1;
}

void ctl_pool_free(struct controller *c)
{
    struct ctl_pool *p = &c->pool;
    free(p->lend);
    free(p->ready);
    free(p->lent_epoch);
    free(p->join_t0);
}

static double now_rel(const struct controller *c) { return ctl_now(c); }

static void pool_event(struct controller *c, enum metrics_event_kind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void pool_event(struct controller *c, enum metrics_event_kind kind, const char *fmt, ...)
{
    char detail[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    if (metrics_event(c->m, now_rel(c), c->step, kind, detail))
        FATAL("metrics: cannot record a pool event");
    LOG_I("pool: %s", detail);
}

void ctl_pool_on_plan(struct controller *c, const struct plan *old)
{
    struct ctl_pool *p = &c->pool;
    p->joining = 0;
    for (int r = 1; r < c->world; r++) {
        int was = old && old->ranks[r].role == ROLE_HYBRID;
        int is = c->plan.ranks[r].role == ROLE_HYBRID;
        if (is && !was) {
            p->ready[r] = 0;
            p->lent_epoch[r] = c->plan.epoch;
            p->join_t0[r] = now_rel(c);
        } else if (!is) {
            p->ready[r] = 0;
            p->lent_epoch[r] = -1;
        }
        p->joining += is && !p->ready[r];
    }
}

void ctl_pool_on_ready(struct controller *c, const struct wire_hybrid_ready *m)
{
    struct ctl_pool *p = &c->pool;
    int r = m->rank;
    if (r < 1 || r >= c->world) FATAL("HYBRID_READY names rank %d of %d", r, c->world);
    if (c->plan.ranks[r].role != ROLE_HYBRID || p->lent_epoch[r] != m->epoch) {
        p->stale_ready++;
        pool_event(c, EV_POOL_STALE_READY, "rank %d: ready for the join of epoch %d, which was "
                   "released or rolled back; ignored", r, m->epoch);
        return;
    }
    p->ready[r] = 1;
    p->joining--;
    pool_event(c, EV_POOL_READY, "rank %d joined training after %.3f s (epoch %d)", r,
               now_rel(c) - p->join_t0[r], m->epoch);
}

int ctl_replicas(const struct controller *c, int *ranks, int *n_hybrid)
{
    const struct plan *pl = &c->plan;
    int size = plan_replica_size(pl), n_core = pl->n_train / size, n = 0;
    if (pl->colocated) { /* every rollout rank trains too, in rank order */
        for (int r = 1; r < pl->world; r++)
            if (pl->ranks[r].role == ROLE_ROLLOUT) ranks[n++] = r;
        *n_hybrid = 0;
        return n / size;
    }
    for (int r = 1; r < pl->world; r++)
        if (pl->ranks[r].role == ROLE_TRAIN) ranks[pl->ranks[r].index] = r;
    n = n_core;
    /* lent ranks in index order; a replica counts once all its ranks are ready */
    int *hyb = xmalloc(((size_t)pl->n_hybrid + 1) * sizeof *hyb);
    for (int r = 1; r < pl->world; r++)
        if (pl->ranks[r].role == ROLE_HYBRID) hyb[pl->ranks[r].index] = r;
    int k = 0;
    for (int h = 0; h + size <= pl->n_hybrid; h += size) {
        int all = 1;
        for (int j = 0; j < size; j++) all &= c->pool.ready[hyb[h + j]];
        if (!all) continue;
        for (int j = 0; j < size; j++) ranks[(n + k) * size + j] = hyb[h + j];
        k++;
    }
    free(hyb);
    *n_hybrid = k;
    return n + k;
}

/* Replicas lent now (ready or joining) and how many of them are ready. */
static void lent_replicas(const struct controller *c, int *lent, int *ready)
{
    int size = plan_replica_size(&c->plan), nr = 0;
    for (int r = 1; r < c->world; r++) nr += c->plan.ranks[r].role == ROLE_HYBRID && c->pool.ready[r];
    *lent = c->plan.n_hybrid / size;
    *ready = nr / size;
}

int ctl_pool_check_timeouts(struct controller *c)
{
    struct ctl_pool *p = &c->pool;
    if (p->joining <= 0) return 0;
    double limit = c->cfg->plan.pool_join_timeout_s / c->cfg->device.time_scale;
    int any = 0;
    for (int r = 1; r < c->world; r++) {
        if (c->plan.ranks[r].role != ROLE_HYBRID || p->ready[r]) continue;
        if (now_rel(c) - p->join_t0[r] <= limit) continue;
        int inst = c->base.ranks[r].instance;
        if (inst < 0 || !p->lend[inst]) continue;
        p->lend[inst] = 0;
        p->timeouts++;
        any = 1;
        pool_event(c, EV_POOL_JOIN_TIMEOUT, "rank %d (instance %d of the base plan): not ready "
                   "after %.0f emulated s; back to rollout", r, inst, c->cfg->plan.pool_join_timeout_s);
    }
    if (any) {
        p->pending = 1;
        snprintf(p->why, sizeof p->why, "pool:join_timeout");
    }
    return any;
}

/* Rollout GPUs the pool never lends: plan.pool_min_rollout, and at least one. (The
 * planner's plan.min_rollout bounds its base plans, not the pool: lending is how
 * GPUs the planner keeps for rollout help training between planning passes.) */
static int pool_reserve(const struct controller *c)
{
    int a = c->cfg->plan.pool_min_rollout;
    return a > 1 ? a : 1;
}

/* Lends (delta > 0) or releases (delta < 0) whole replicas by choosing base-plan
 * instances; returns the replicas actually changed. Lending stays within delta
 * replicas, except that when no instance is that small one instance of at most
 * `most` replicas is lent. */
static int change_lend(struct controller *c, int delta, int most)
{
    const struct plan *b = &c->base;
    int size = plan_replica_size(b), done = 0;
    if (delta > 0) {
        int limit = delta;
    again:;
        /* smallest TP first, the last instance of a TP first (the front of the
         * rollout region keeps the large instances); never more replicas than
         * asked, never the last instance, never below the rollout reserve */
        int live = c->plan.n_instances, gpus = c->plan.n_rollout_ranks;
        int reserve = pool_reserve(c);
        for (int tp = 1; tp <= 8 && done < delta; tp *= 2)
            for (int i = b->n_instances - 1; i >= 0 && done < delta; i--) {
                if (c->pool.lend[i] || b->inst[i].tp != tp || tp % size) continue;
                if (done + tp / size > limit || live <= 1 || gpus - tp < reserve) continue;
                c->pool.lend[i] = 1;
                done += tp / size;
                live--;
                gpus -= tp;
                if (limit > delta) return done; /* the one larger instance */
            }
        if (done == 0 && most > limit) { /* once: limit becomes most */
            limit = most;
            goto again;
        }
        return done;
    }
    /* release joining instances first, then the most recently lent (largest index) */
    for (int pass = 0; pass < 2 && done < -delta; pass++)
        for (int i = b->n_instances - 1; i >= 0 && done < -delta; i--) {
            if (!c->pool.lend[i]) continue;
            int leader = b->inst[i].leader;
            if (pass == 0 && c->pool.ready[leader]) continue;
            c->pool.lend[i] = 0;
            done += b->inst[i].tp / size;
        }
    return done;
}

/* Measurements are smoothed (EMA, weight POOL_EMA for the newest step) and the pool
 * changes by at most a quarter of its capacity (at least one replica) per decision,
 * with a step between changes for the new split to show in the measurements: one
 * step's noise must not swing the whole pool (the reference's bang-bang, §6.9). */
#define POOL_EMA 0.5

void ctl_pool_decide(struct controller *c, double train_s, double rollout_s, double pressure)
{
    struct ctl_pool *p = &c->pool;
    if (train_s > 0) p->ema_train = p->ema_train > 0 ? POOL_EMA * train_s + (1 - POOL_EMA) * p->ema_train : train_s;
    if (rollout_s > 0)
        p->ema_rollout = p->ema_rollout > 0 ? POOL_EMA * rollout_s + (1 - POOL_EMA) * p->ema_rollout : rollout_s;
    if (!c->cfg->plan.pool || c->epoch_pending || p->pending) return;
    if (p->last_change_step > 0 && c->step - p->last_change_step < 2 &&
        pressure < c->cfg->plan.pool_release_pressure)
        return;
    train_s = p->ema_train;
    rollout_s = p->ema_rollout;
    int lent, ready;
    lent_replicas(c, &lent, &ready);
    struct pool_config pc = {c->cfg->plan.pool_join_ratio, c->cfg->plan.pool_release_ratio,
                             c->cfg->plan.pool_release_pressure, pool_reserve(c)};
    struct pool_input in = {.rollout_gpus = c->plan.n_rollout_ranks,
                            .replica_size = plan_replica_size(&c->plan),
                            .dp = c->plan.n_train / plan_replica_size(&c->plan),
                            .active = ready,
                            .joining = lent - ready,
                            .train_s = train_s,
                            .rollout_s = rollout_s,
                            .pressure = pressure};
    struct pool_decision d;
    pool_decide(&pc, &in, &d);
    if (d.desired == d.current) return;
    int step_max = d.capacity / 4 > 1 ? d.capacity / 4 : 1, delta = d.desired - d.current;
    if (d.reason != POOL_PROTECT_ROLLOUT) delta = delta > step_max ? step_max : delta < -step_max ? -step_max : delta;
    int changed = change_lend(c, delta, d.desired - d.current);
    if (changed == 0) return;
    p->last_change_step = c->step;
    if (d.desired > d.current) p->joins += changed;
    else p->releases += changed;
    p->pending = 1;
    snprintf(p->why, sizeof p->why, "pool:%s", pool_reason_name(d.reason));
    pool_event(c, d.desired > d.current ? EV_POOL_LEND : EV_POOL_RELEASE,
               "%s %d replica(s) (%d -> %d wanted, capacity %d): train %.1f s vs rollout %.1f s "
               "per step, pressure %.2f (%s)",
               d.desired > d.current ? "lend" : "release", changed, d.current, d.desired,
               d.capacity, train_s, rollout_s, pressure, pool_reason_name(d.reason));
}
