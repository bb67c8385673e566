/*
 * The global resource planner's side of rank 0's loop (plan.mode = grp), and the
 * choice of what a quiet point applies (docs/planner.md).
 *
 * At the end of every step rank 0 measures, in emulated seconds:
 *   train_s    the step's training time, from sending the batch to TRAIN_DONE;
 *   rollout_s  the time the rollout side needs for one batch: the step time when
 *              the trainer waited for the batch, else the rate at which batches
 *              completed times the rollout ranks' busy fraction
 *              (measured_rollout_s);
 *   pressures  turns waiting for an instance / the turns the launch cap allows,
 *              and groups in flight / the launch cap (reference §2.5, whose
 *              denominators are the queue and concurrency limits), and the routes
 *              that found every preferred
 *              instance full (the "rejected" count).
 * It hands them to planner_step (calibration, trigger, search, gate), writes the
 * /planner row, and, when no new plan is coming, lets the pool decide.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_internal.h"
#include "libra/log.h"
#include "libra/pool_ctl.h"

static void write_planner_row(struct controller *c, const struct planner_pass *ps, int applied)
{
    struct metrics_planner_row row = {
        .step = ps->step,
        .wall_s = ctl_now(c),
        .applied = applied,
        .cur_train_s = ps->cur_train_s,
        .cur_rollout_s = ps->cur_rollout_s,
        .cur_step_s = ps->cur_step_s,
        .meas_train_s = ps->meas_train_s,
        .meas_rollout_s = ps->meas_rollout_s,
        .scale_train = ps->scale_train,
        .scale_rollout = ps->scale_rollout,
        .gain_s = ps->gain_s,
        .transition_s = ps->transition_s,
        .net_s = ps->net_s,
        .horizon = ps->horizon,
        .solve_s = c->tr ? 0.0 : ps->solve_s, /* the simulator's files are machine-free */
        .history = ps->history};
    row.trigger = (int32_t)ps->trigger;
    row.verdict = -1;
    if (ps->searched) {
        const struct plan_choice *ch = &ps->cand;
        row.verdict = (int32_t)ps->verdict;
        row.cand_train = ch->n_train;
        row.cand_tp = ch->train.tp;
        row.cand_pp = ch->train.pp;
        row.cand_micro = ch->train.micro;
        row.cand_idle = ch->n_idle;
        row.cand_train_s = ch->train_s;
        row.cand_rollout_s = ch->rollout_s;
        row.cand_step_s = ch->step_s;
        row.evaluations = ch->n_train_evals + ch->n_rollout_evals;
        size_t off = 0;
        for (int k = PC_N_TP - 1; k >= 0; k--)
            if (ch->counts[k] && off < sizeof row.cand_rollout_tp)
                off += (size_t)snprintf(row.cand_rollout_tp + off, sizeof row.cand_rollout_tp - off,
                                        "%s%dx%d", off ? "," : "", pc_tp_of(k), ch->counts[k]);
    } else {
        row.cand_train_s = row.cand_rollout_s = row.cand_step_s = NAN;
        row.cur_train_s = row.cur_rollout_s = row.cur_step_s = NAN;
    }
    if (metrics_planner(c->m, &row)) FATAL("metrics: cannot write the planner row of step %d", ps->step);
}

/* Wall seconds the rollout side needs per batch. When the trainer sat idle waiting
 * for this step's batch for more than a quarter of its own training time while the
 * rollout ranks were busy at least half the step, rollout was the bottleneck and the
 * step time is its time. Otherwise the rate at which batches completed, scaled by
 * how busy the rollout ranks were: a side that idles (throttled by the staleness cap,
 * or waiting for a weight sync) is not a slow one. 0 when nothing finished. */
static double measured_rollout_s(const struct controller *c, double step_s, double busy)
{
    double train = c->train_idle_since - c->batch.sent_at; /* this step's training */
    if (c->batch.waited_s > 0.25 * train && busy >= 0.5) return step_s;
    if (c->finished_in_step <= 0) return 0;
    double per_batch = step_s * c->cfg->train.batch_size / (double)c->finished_in_step;
    return fmin(step_s, per_batch * fmin(1.0, busy));
}

void ctl_plan_after_step(struct controller *c, double step_s, double rollout_busy_frac)
{
    const struct libra_config *cfg = c->cfg;
    double ts = cfg->device.time_scale;
    double *kv = xcalloc((size_t)c->world, sizeof *kv);
    double waiting = (double)c->tt.q_len;
    for (int i = 0; i < c->plan.n_instances; i++) {
        kv[c->plan.inst[i].leader] = c->inst[i].load;
        if (c->inst[i].queued > 0) waiting += c->inst[i].queued;
    }
    double cap_groups = (double)(cfg->train.max_staleness + 1) * c->groups_per_batch;
    if (cfg->rollout.max_inflight_groups > 0 && cfg->rollout.max_inflight_groups < cap_groups)
        cap_groups = cfg->rollout.max_inflight_groups;
    struct planner_inputs in = {
        .rt = {.queue_pressure = waiting / fmax(1.0, cap_groups * cfg->rollout.n_samples),
               .active_pressure = (double)tt_groups_in_flight(&c->tt) / fmax(1.0, cap_groups),
               .rejected = c->sched.stats.via[SCHED_VIA_GLOBAL],
               /* batch sent -> TRAIN_DONE, not -> now: rank 0's own bookkeeping since
                  (the metrics rows and their flush) is no training time */
               .train_s = (c->train_idle_since - c->batch.sent_at) * ts,
               .rollout_s = measured_rollout_s(c, step_s, rollout_busy_frac) * ts},
        .n_hybrid_active = c->batch.n_hybrid_replicas,
        .batch_tokens = c->batch.tokens,
        .batch_sum_len_sq = c->batch.sum_len_sq,
        .batch_max_len = c->batch.max_len,
        .kv_by_leader = kv,
        .live = &c->plan};
    struct planner_pass ps;
    int apply = planner_step(&c->planner, c->step, c->plan.epoch + 1, &c->base, &in,
                             &c->next_base, &ps);
    write_planner_row(c, &ps, apply);
    if (ps.searched) {
        c->stats.solve_s_sum += ps.solve_s;
        c->stats.n_solves++;
    }
    free(kv);
    if (apply) {
        c->epoch_pending = 1;
        char detail[256];
        snprintf(detail, sizeof detail,
                 "step %d (%s): %d train (tp %d pp %d micro %d), %d rollout, %d idle; "
                 "predicted %.1f -> %.1f s/step, transition %.1f s over %d steps",
                 c->step, plan_trigger_name(ps.trigger), ps.cand.n_train, ps.cand.train.tp,
                 ps.cand.train.pp, ps.cand.train.micro, ps.cand.n_rollout, ps.cand.n_idle,
                 ps.cur_step_s, ps.cand.step_s, ps.transition_s, ps.horizon);
        if (metrics_event(c->m, ctl_now(c), c->step, EV_PLANNER, detail))
            FATAL("metrics: cannot record a planner decision");
        return;
    }
    ctl_pool_decide(c, in.rt.train_s, in.rt.rollout_s,
                    pool_pressure(in.rt.queue_pressure, in.rt.active_pressure, rollout_busy_frac));
}

void ctl_next_epoch(struct controller *c)
{
    int epoch = c->plan.epoch + 1;
    if (c->epoch_pending) {
        if (!c->planner.grp) {
            char err[512];
            if (planner_next(&c->planner, epoch, c->step, &c->next_base, err, sizeof err))
                FATAL("planner: epoch %d: %s", epoch, err);
        }
        c->next_base.epoch = epoch;
        c->next_base.step = c->step;
        plan_copy(&c->base, &c->next_base);
        memset(c->pool.lend, 0, (size_t)(c->world + 1) * sizeof *c->pool.lend);
        c->pool.pending = 0;
        ctl_apply_plan(c, &c->base, c->base.reason);
        return;
    }
    struct plan live;
    plan_init(&live, c->world);
    plan_lend(&c->base, c->pool.lend, &live);
    live.epoch = epoch;
    live.step = c->step;
    snprintf(live.reason, sizeof live.reason, "%s", c->pool.why);
    c->pool.pending = 0;
    ctl_apply_plan(c, &live, live.reason);
    plan_free(&live);
}
