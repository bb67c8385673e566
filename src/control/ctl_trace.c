/*
 * Rank 0's record of what every rank was doing: the /spans rows (docs/metrics.md) and
 * the timing breakdown of each /steps row. Everything is on rank 0's clock (ctl_now),
 * from what rank 0 already sees (dispatches, turn results, plans, syncs, checkpoints)
 * plus the training ranks' TAG_TRAIN_TIMES.
 *
 * Rows stay few whatever the decode rate:
 *   decode  one span per busy period of a rollout instance (turns in flight, rank 0's
 *           view), drawn on each of its ranks; a period that starts within
 *           SPAN_MERGE_S of the previous one's end continues it, a period still open
 *           at a step's end is cut there, and past SPAN_MAX_PER_STEP spans of an
 *           instance in a step the rest of the step merges into the last one;
 *   tool    the tool calls an instance returned, each from (its return - its latency)
 *           to its return, merged the same way (calls overlap: a span covers them);
 * so a step has at most 2 x SPAN_MAX_PER_STEP rows per instance for rollout, plus
 * four per training rank, one per sync member, one per rank at a re-split and two per
 * checkpoint.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_internal.h"
#include "libra/log.h"

#define SPAN_MERGE_S 0.002
#define SPAN_MAX_PER_STEP 16

static void put_span(struct controller *c, int rank, int kind, int step, double t0, double t1,
                     int64_t count, const char *detail)
{
    struct metrics_span_row row = {.rank = rank,
                                   .kind = kind,
                                   .step = step,
                                   .t_start = t0,
                                   .t_end = t1 > t0 ? t1 : t0,
                                   .count = count};
    snprintf(row.detail, sizeof row.detail, "%s", detail ? detail : "");
    if (metrics_span(c->m, &row))
        FATAL("metrics: cannot record a %s span", metrics_enum_name(MV_SPAN, kind));
}

/* The step a span belongs to: the one in progress. */
static int cur_step(const struct controller *c) { return c->step + 1; }

static void put_decode(struct controller *c, struct ctl_inst_trace *it, int step, double t1)
{
    char detail[METRICS_SPAN_DETAIL_LEN];
    snprintf(detail, sizeof detail, "instance led by %d, tp %d", it->leader, it->tp);
    for (int r = it->leader; r < it->leader + it->tp; r++)
        put_span(c, r, SPAN_DECODE, step, it->dec_start, t1, it->dec_turns, detail);
    it->dec_rows++;
    it->dec_turns = 0;
}

static void put_tool(struct controller *c, struct ctl_inst_trace *it, int step)
{
    put_span(c, it->leader, SPAN_TOOL, step, it->tool_start, it->tool_end, it->tool_n,
             "tool calls returned");
    it->tool_rows++;
    it->tool_start = -1;
    it->tool_n = 0;
}

/* Idle rank-seconds up to now (instances) and the rollout rank-seconds of the step. */
static void count_idle(struct controller *c, double now)
{
    struct ctl_trace *tr = &c->trace;
    double ranks = 0;
    for (int i = 0; i < tr->n_inst; i++) {
        struct ctl_inst_trace *it = &tr->inst[i];
        ranks += it->tp;
        if (!it->busy && now > it->idle_since) c->acc.idle_rank_s += it->tp * (now - it->idle_since);
        it->idle_since = now;
    }
    if (now > c->acc.mark) c->acc.rollout_rank_s += ranks * (now - c->acc.mark);
    c->acc.mark = now;
}

void ctl_trace_busy(struct controller *c, int i, double now)
{
    if (i < 0 || i >= c->trace.n_inst) return;
    struct ctl_inst_trace *it = &c->trace.inst[i];
    if (it->busy) return;
    if (now > it->idle_since) c->acc.idle_rank_s += it->tp * (now - it->idle_since);
    it->idle_since = now;
    it->busy = 1;
    if (it->dec_start >= 0 &&
        (now - it->dec_end < SPAN_MERGE_S || it->dec_rows >= SPAN_MAX_PER_STEP - 1))
        return; /* the pending span goes on */
    if (it->dec_start >= 0) put_decode(c, it, cur_step(c), it->dec_end);
    it->dec_start = now;
}

void ctl_trace_idle(struct controller *c, int i, double now)
{
    if (i < 0 || i >= c->trace.n_inst) return;
    struct ctl_inst_trace *it = &c->trace.inst[i];
    if (!it->busy) return;
    it->busy = 0;
    it->idle_since = now;
    it->dec_end = now;
}

void ctl_trace_turn(struct controller *c, int i, const struct wire_turn_result *r, double now)
{
    if (r->partial) return;
    struct ctl_inst_trace *it = i >= 0 && i < c->trace.n_inst ? &c->trace.inst[i] : NULL;
    if (it) it->dec_turns++;
    if (r->final || r->tool < 0) return;
    /* the emulated device reports emulated seconds; the real one wall seconds */
    double lat = r->tool_latency_s > 0 ? r->tool_latency_s : 0;
    c->acc.tool_n++;
    c->acc.tool_s += lat;
    if (!it) return;
    double a = now - (c->real ? lat : lat / c->cfg->device.time_scale);
    if (it->tool_start >= 0 &&
        (a <= it->tool_end + SPAN_MERGE_S || it->tool_rows >= SPAN_MAX_PER_STEP - 1)) {
        it->tool_start = fmin(it->tool_start, a);
        it->tool_end = fmax(it->tool_end, now);
        it->tool_n++;
        return;
    }
    if (it->tool_start >= 0) put_tool(c, it, cur_step(c));
    it->tool_start = a;
    it->tool_end = now;
    it->tool_n = 1;
}

/* Ends every pending span of the current instances at now (step: theirs); busy ones
 * go on from now when keep is set. */
static void close_instances(struct controller *c, int step, double now, int keep)
{
    for (int i = 0; i < c->trace.n_inst; i++) {
        struct ctl_inst_trace *it = &c->trace.inst[i];
        if (it->dec_start >= 0) {
            put_decode(c, it, step, it->busy ? now : it->dec_end);
            it->dec_start = it->busy && keep ? now : -1;
        }
        if (it->tool_start >= 0) put_tool(c, it, step);
        it->dec_rows = it->tool_rows = 0;
    }
}

void ctl_trace_instances(struct controller *c, double now)
{
    struct ctl_trace *tr = &c->trace;
    count_idle(c, now);
    close_instances(c, cur_step(c), now, 0);
    free(tr->inst);
    tr->n_inst = c->plan.n_instances;
    tr->inst = xcalloc((size_t)tr->n_inst + 1, sizeof *tr->inst);
    for (int i = 0; i < tr->n_inst; i++) {
        struct ctl_inst_trace *it = &tr->inst[i];
        it->leader = c->inst[i].leader;
        it->tp = c->inst[i].tp;
        it->busy = c->inst[i].n_turns > 0;
        it->idle_since = now;
        it->dec_start = it->busy ? now : -1;
        it->tool_start = -1;
    }
}

void ctl_trace_resplit(struct controller *c, double t0, double now, double dt, int handed_back)
{
    char detail[METRICS_SPAN_DETAIL_LEN];
    snprintf(detail, sizeof detail, "epoch %d: %.48s", c->plan.epoch, c->plan.reason);
    for (int r = 0; r < c->world; r++)
        put_span(c, r, SPAN_RESPLIT, cur_step(c), t0, now, r == 0 ? handed_back : 0, detail);
    c->acc.resplit_s += dt;
}

void ctl_trace_sync_start(struct controller *c, double now) { c->trace.sync_t0 = now; }

void ctl_trace_sync_done(struct controller *c, int rank, int64_t bytes, int last,
                         int64_t bytes_sum, double now)
{
    char detail[METRICS_SPAN_DETAIL_LEN];
    snprintf(detail, sizeof detail, "version %d%s", c->sync_version_pending,
             plan_in_root_replica(&c->plan, rank) ? ", sent" : "");
    put_span(c, rank, SPAN_WEIGHT_SYNC, cur_step(c), c->trace.sync_t0, now, bytes, detail);
    if (!last) return;
    c->acc.n_syncs++;
    c->acc.sync_s += now - c->trace.sync_t0;
    c->acc.sync_bytes += bytes_sum;
}

void ctl_trace_ckpt_start(struct controller *c, double now)
{
    c->trace.ckpt_t0 = now;
    c->trace.ckpt_root = plan_train_root(&c->plan);
}

void ctl_trace_ckpt_done(struct controller *c, int step, int ok, double now)
{
    char detail[METRICS_SPAN_DETAIL_LEN];
    snprintf(detail, sizeof detail, "step %d%s", step, ok ? "" : " (not written)");
    put_span(c, 0, SPAN_CHECKPOINT, cur_step(c), c->trace.ckpt_t0, now, 0, detail);
    if (c->trace.ckpt_root > 0)
        put_span(c, c->trace.ckpt_root, SPAN_CHECKPOINT, cur_step(c), c->trace.ckpt_t0, now, 0,
                 detail);
    c->acc.ckpt_s += now - c->trace.ckpt_t0;
}

void ctl_trace_train_times(struct controller *c, const struct wire_train_times *m, double now)
{
    if (m->rank < 1 || m->rank >= c->world || !(m->age_s >= 0) || !(m->compute_s >= 0))
        FATAL("malformed TRAIN_TIMES (rank %d, age %g s)", m->rank, m->age_s);
    char detail[METRICS_SPAN_DETAIL_LEN];
    snprintf(detail, sizeof detail, "%s replica %d", m->hybrid ? "lent" : "core", m->replica);
    double t0 = now - m->age_s, tc = t0 + m->compute_s, ta = tc + m->reduce_s;
    put_span(c, m->rank, SPAN_TRAIN_FWD, m->step, t0, t0 + m->fwd_s, 0, detail);
    put_span(c, m->rank, SPAN_TRAIN_BWD, m->step, t0 + m->fwd_s, t0 + m->fwd_s + m->bwd_s, 0,
             detail);
    put_span(c, m->rank, SPAN_TRAIN_REDUCE, m->step, tc, ta, 0, detail);
    put_span(c, m->rank, SPAN_TRAIN_OPT, m->step, ta, fmin(ta + m->opt_s, now), 0, detail);
}

void ctl_trace_step_end(struct controller *c, const struct wire_train_done *d,
                        struct metrics_step_row *row, double now)
{
    struct ctl_step_acc *a = &c->acc;
    double sent = c->batch.sent_at;
    row->rollout_wait_s = sent - a->t_start;
    row->train_s = now - sent;
    row->train_fwd_s = d->fwd_s;
    row->train_bwd_s = d->bwd_s;
    row->train_reduce_s = d->comm_s;
    row->train_opt_s = d->opt_s;
    row->gen_s = c->plan.n_rollout_ranks > 0 ? a->rollout_busy_rank_s / c->plan.n_rollout_ranks : 0;
    row->tool_calls_n = a->tool_n;
    row->tool_s = a->tool_s;
    row->n_syncs = a->n_syncs;
    row->sync_s = a->sync_s;
    row->sync_bytes = a->sync_bytes;
    row->resplit_s = a->resplit_s;
    row->ckpt_s = a->ckpt_s;
    count_idle(c, now);
    row->rollout_idle_frac = a->rollout_rank_s > 0 ? fmin(1.0, a->idle_rank_s / a->rollout_rank_s) : 0;
    row->train_idle_frac = row->step_s > 0 ? row->rollout_wait_s / row->step_s : 0;
    close_instances(c, row->step, now, 1);
    a->tool_n = a->n_syncs = 0;
    a->tool_s = a->sync_s = a->resplit_s = a->ckpt_s = 0;
    a->sync_bytes = 0;
    a->idle_rank_s = a->rollout_rank_s = 0;
}

void ctl_trace_finish(struct controller *c, double now)
{
    count_idle(c, now);
    close_instances(c, cur_step(c), now, 0);
}

void ctl_trace_free(struct controller *c)
{
    free(c->trace.inst);
    c->trace.inst = NULL;
    c->trace.n_inst = 0;
}
