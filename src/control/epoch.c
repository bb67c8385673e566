/*
 * Rank 0's side of planning epochs and weight syncs.
 *
 * Re-split protocol (ctl_apply_plan), run only at a quiet point (no training step
 * and no weight sync in flight):
 *   1. rank 0 sends TAG_PLAN to every worker;
 *   2. the leader of every rollout instance that does not survive (same leader and
 *      TP in the new plan) hands its in-flight turns back in one TAG_HANDBACK --
 *      sent non-blocking, before the split, so it cannot deadlock against it;
 *   3. every rank, rank 0 included, rebuilds its communicators (MPI_Comm_split);
 *   4. rank 0 collects the expected handbacks (serving other messages meanwhile),
 *      requeues the handed-back turns at the front of the queue, and starts a
 *      weight sync so ranks that became rollout ranks get the current weights.
 * Surviving instances keep their in-flight work and KV caches; nothing waits for a
 * long trajectory to finish and nothing is dropped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_internal.h"
#include "libra/log.h"
#include "libra/mpi_wait.h"
#include "libra/watchdog.h"

/* One /events row per rank whose role, instance or TP changed. */
static void record_role_changes(struct controller *c, const struct plan *old, double now)
{
    for (int r = 1; r < c->world; r++) {
        const struct rank_assign *a = &old->ranks[r], *b = &c->plan.ranks[r];
        if (a->role == b->role && a->tp == b->tp && a->index == b->index &&
            (a->role != ROLE_ROLLOUT || plan_instance_survives(old, &c->plan, r)))
            continue;
        char detail[128];
        snprintf(detail, sizeof detail, "rank %d: %s (tp %d, index %d) -> %s (tp %d, index %d)", r,
                 role_name(a->role), a->tp, a->index, role_name(b->role), b->tp, b->index);
        if (metrics_event(c->m, now, c->step, EV_ROLE_CHANGE, detail))
            FATAL("metrics: cannot record a role change");
    }
}

void ctl_rebuild_instances(struct controller *c, const struct plan *old)
{
    struct sched_instance *next = xcalloc((size_t)c->plan.n_instances + 1, sizeof *next);
    for (int i = 0; i < c->plan.n_instances; i++) {
        const struct instance_desc *d = &c->plan.inst[i];
        next[i] = (struct sched_instance){.leader = d->leader,
                                          .tp = d->tp,
                                          .capacity = c->dev.rates.kv_capacity_tokens(&c->dev.rates, d->tp),
                                          .queued = -1,
                                          .running = -1,
                                          .kv_frac = -1};
        int j = old ? plan_find_instance(old, d->leader, d->tp) : -1;
        if (j >= 0 && c->inst) {
            next[i].load = c->inst[j].load;
            next[i].n_turns = c->inst[j].n_turns;
            next[i].queued = c->inst[j].queued;
            next[i].running = c->inst[j].running;
            next[i].kv_frac = c->inst[j].kv_frac;
        }
    }
    free(c->inst);
    c->inst = next;
    ctl_trace_instances(c, ctl_now(c));
    if (c->n_out_batch < c->plan.n_instances) {
        c->out_batch = xrealloc(c->out_batch, (size_t)c->plan.n_instances * sizeof *c->out_batch);
        memset(c->out_batch + c->n_out_batch, 0,
               (size_t)(c->plan.n_instances - c->n_out_batch) * sizeof *c->out_batch);
        c->n_out_batch = c->plan.n_instances;
    }
}

void ctl_wait_handbacks(struct controller *c, int expected)
{
    struct backoff b;
    backoff_reset(&b);
    c->handbacks_pending = expected;
    while (c->handbacks_pending > 0) {
        ctl_live_check(c); /* a worker that stopped before it handed back is named */
        if (ctl_poll(c))
            backoff_reset(&b);
        else
            backoff_sleep(&b);
    }
}

static int count_dissolved(const struct plan *old, const struct plan *next)
{
    int n = 0;
    for (int i = 0; i < old->n_instances; i++)
        n += plan_find_instance(next, old->inst[i].leader, old->inst[i].tp) < 0;
    return n;
}

static struct metrics_plan_row plan_row(const struct controller *c, double now, double dt)
{
    const struct plan *p = &c->plan;
    struct metrics_plan_row row = {.epoch = p->epoch,
                                   .step = c->step,
                                   .wall_s = now,
                                   .n_train = p->n_train,
                                   .n_rollout = p->n_rollout_ranks,
                                   .n_hybrid = p->n_hybrid,
                                   .resplit_s = dt,
                                   .train_tp = p->train_tp,
                                   .train_pp = p->train_pp,
                                   .micro = p->micro,
                                   .n_idle = p->n_idle};
    plan_format_tp(p, row.rollout_tp, sizeof row.rollout_tp);
    return row;
}

/* A new epoch whose plan equals the current one: nothing re-split, and no /plans row
 * (that table records changes; the epoch number still advances, and the planner's own
 * decisions are in /planner). */
static void keep_plan(struct controller *c, const struct plan *next, const char *why)
{
    (void)why;
    c->plan.epoch = next->epoch;
    c->plan.step = next->step;
    c->epoch_pending = 0;
}

void ctl_apply_plan(struct controller *c, const struct plan *next, const char *why)
{
    if (c->plan.n_instances > 0 && plan_same_roles(&c->plan, next)) {
        keep_plan(c, next, why);
        return;
    }
    double t0 = ctl_cpu_clock(c), t_begin = ctl_now(c);
    int64_t handed = c->stats.handed_back;
    int first = c->plan.n_instances == 0 && c->plan.n_train == 0;
    struct plan old;
    plan_init(&old, c->world);
    plan_copy(&old, &c->plan);

    /* The workers read plan.step as the optimizer steps done: lent ranks drain the
     * totals of those steps before the re-split. */
    struct plan sent;
    plan_init(&sent, c->world);
    plan_copy(&sent, next);
    sent.step = c->step;
    size_t len = plan_packed_size(&sent);
    char *buf = xmalloc(len);
    plan_pack(&sent, buf);
    plan_free(&sent);
    for (int r = 1; r < c->world; r++) ctl_send(c, buf, len, r, TAG_PLAN);
    free(buf);

    if (!c->tr) {
        watchdog_tick("a re-split (MPI_Comm_split of the world)");
        comms_rebuild(&c->comms, first ? NULL : &old, next, 0);
    }
    ctl_wait_handbacks(c, first ? 0 : count_dissolved(&old, next));
    plan_copy(&c->plan, next);
    ctl_rebuild_instances(c, first ? NULL : &old);
    ctl_pool_on_plan(c, first ? NULL : &old);
    int core_kept = !first && plan_train_same(&old, next);
    double dt = ctl_cpu_clock(c) - t0;
    if (!first) {
        c->stats.n_resplits++;
        c->stats.resplit_s_sum += dt;
        if (dt > c->stats.resplit_s_max) c->stats.resplit_s_max = dt;
    }

    double now = ctl_now(c);
    struct metrics_plan_row row = plan_row(c, now, dt);
    snprintf(row.reason, sizeof row.reason, "%s", why);
    row.handed_back = (int32_t)(c->stats.handed_back - handed);
    char detail[256], shape[48] = "";
    if (c->plan.train_tp > 1 || c->plan.train_pp > 1)
        snprintf(shape, sizeof shape, " (replicas of TP %d x PP %d)",
                 c->plan.train_tp > 0 ? c->plan.train_tp : 1,
                 c->plan.train_pp > 0 ? c->plan.train_pp : 1);
    snprintf(detail, sizeof detail,
             "epoch %d: train %d%s, hybrid %d, rollout tp [%s], idle %d (%s); %.2f ms, %d turns "
             "handed back%s",
             c->plan.epoch, c->plan.n_train, shape, c->plan.n_hybrid, row.rollout_tp,
             c->plan.n_idle, why, 1e3 * dt, row.handed_back,
             core_kept ? "; core training communicator kept" : "");
    if (metrics_plan(c->m, &row) ||
        metrics_event(c->m, now, c->step, first ? EV_PLAN : EV_RESPLIT, detail))
        FATAL("metrics: cannot record plan of epoch %d", c->plan.epoch);
    if (!first) record_role_changes(c, &old, now);
    ctl_trace_resplit(c, t_begin, now, dt, row.handed_back);
    if (metrics_flush(c->m)) FATAL("metrics: cannot flush the plan of epoch %d", c->plan.epoch);
    LOG_I("%s", detail);
    plan_free(&old);
    c->epoch_pending = 0;
    /* New rollout ranks need the current weights before they decode. */
    ctl_start_sync(c, c->version);
}

void ctl_start_sync(struct controller *c, int version)
{
    struct wire_sync s = {version, ++c->sync_id};
    /* every member of the sync communicator: the root replica and the rollout ranks */
    int *members = xmalloc((size_t)c->world * sizeof *members);
    int n = plan_members(&c->plan, 0, members);
    ctl_trace_sync_start(c, ctl_now(c));
    for (int k = 0; k < n; k++) ctl_send(c, &s, sizeof s, members[k], TAG_SYNC);
    free(members);
    c->sync_acks_pending = n;
    c->sync_version_pending = version;
    c->sync_bytes_max = c->sync_bytes_sum = 0;
}

void ctl_on_sync_done(struct controller *c, const struct wire_sync_done *d, int source)
{
    if (c->sync_acks_pending <= 0 || d->sync_id != c->sync_id)
        FATAL("unexpected SYNC_DONE (sync %d, version %d; expected sync %d)", d->sync_id,
              d->version, c->sync_id);
    if (!plan_in_root_replica(&c->plan, source)) { /* a receiver's count */
        c->sync_bytes_sum += d->bytes;
        if (d->bytes > c->sync_bytes_max) c->sync_bytes_max = d->bytes;
    }
    int last = --c->sync_acks_pending == 0;
    ctl_trace_sync_done(c, source, d->bytes, last, c->sync_bytes_sum, ctl_now(c));
    if (!last) return;
    c->rollout_version = c->sync_version_pending;
    c->stats.sync_bytes += c->sync_bytes_sum;
    char detail[192];
    snprintf(detail, sizeof detail,
             "weights of version %d on %d rollout ranks; %lld bytes received, at most %lld by "
             "one rank", c->rollout_version, c->plan.n_rollout_ranks,
             (long long)c->sync_bytes_sum, (long long)c->sync_bytes_max);
    if (metrics_event(c->m, ctl_now(c), c->step, EV_WEIGHT_SYNC, detail))
        FATAL("metrics: cannot record weight sync");
}
