/*
 * Rank 0's event loop: launch, dispatch, collect, batch, step (controller.h).
 * Planning epochs and weight syncs are in epoch.c.
 */
#define _POSIX_C_SOURCE 200809L
#include "ctl_internal.h"

#include <math.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "libra/mpi_wait.h"
#include "libra/stop_signal.h"

static double now_s(const struct controller *c) { return ctl_now(c); }

double ctl_now(const struct controller *c)
{
    return c->tr ? c->tr->now(c->tr->ctx) : wall_time() - c->t0;
}

double ctl_cpu_clock(const struct controller *c) { return c->tr ? 0.0 : wall_time(); }

void ctl_send(struct controller *c, const void *buf, size_t len, int dest, int tag)
{
    if (c->tr)
        c->tr->send(c->tr->ctx, c, buf, len, dest, tag);
    else
        outbox_send(&c->ob, buf, len, dest, tag, MPI_COMM_WORLD);
}

static int instance_index(const struct controller *c, int leader)
{
    for (int i = 0; i < c->plan.n_instances; i++)
        if (c->inst[i].leader == leader) return i;
    return -1;
}

/* ---- trajectories ---- */

struct traj *ctl_traj(struct controller *c, int64_t id)
{
    if (id >= CTL_EVAL_ID0 && c->real && id - CTL_EVAL_ID0 < c->rl.ev.n)
        return &c->rl.ev.t[id - CTL_EVAL_ID0];
    if (id < 0 || (size_t)id >= c->tt.n_traj) return NULL;
    return &c->tt.t[id];
}

static void finish_traj(struct controller *c, struct traj *t)
{
    if (c->real) {
        t->reward = ctl_real_score(c, t);
    } else {
        struct wl_traj_state st = {.traj_id = t->id,
                                   .prompt_id = t->prompt_id,
                                   .turn = t->turn,
                                   .ctx_tokens = t->ctx_tokens,
                                   .n_failures = t->n_failures,
                                   .last_failed = t->last_failed,
                                   .last_large = t->last_large,
                                   .step = t->step_start};
        t->reward = workload_reward(c->wl, c->cfg->run.seed, &st);
    }
    if (t->version_start < 0) t->version_start = c->rollout_version;
    if (t->version_end < 0) t->version_end = t->version_start;
    sched_finish(&c->sched, t->id, t->gen_tokens, t->id < CTL_EVAL_ID0);
    if (t->id >= CTL_EVAL_ID0) {
        ctl_eval_finished_traj(c, t);
        return;
    }
    tt_finish(&c->tt, t->id, now_s(c));
    c->finished_in_step++;
    struct traj_sample smp = {t->prompt_tokens, t->gen_tokens, t->tool_tokens, t->turn + 1,
                              t->tool_s};
    planner_record(&c->planner, &smp);
}

/* A training trajectory's turn is done (final, or ended by a tool call): its /turns row. */
static void record_turn(struct controller *c, const struct traj *t, const struct wire_turn_result *r,
                        int gen)
{
    if (t->id >= CTL_EVAL_ID0) return;
    struct metrics_turn_row row = {.traj_id = t->id,
                                   .turn = r->turn,
                                   .gen_tokens = gen,
                                   .final = r->final != 0,
                                   .status = r->final ? TOOL_NONE : r->tool_status,
                                   .payload_tokens = r->final ? 0 : (c->real ? r->n_payload : r->payload_tokens),
                                   .tool_latency_s = r->final ? 0 : r->tool_latency_s,
                                   .wall_s = now_s(c)};
    if (!r->final && r->tool >= 0 && r->tool < WL_MAX_TOOLS && c->tool_names[r->tool])
        snprintf(row.tool, sizeof row.tool, "%s", c->tool_names[r->tool]);
    if (metrics_turn(c->m, &row)) FATAL("metrics: cannot write the /turns row of trajectory %lld", (long long)t->id);
}

static int turn_budget(const struct controller *c, const struct traj *t)
{
    int left = c->cfg->rollout.max_tokens - t->ctx_tokens;
    int b = c->cfg->rollout.max_tokens_per_turn;
    if (c->real) b -= t->resume_generated; /* a resumed turn continues its budget */
    return left < b ? left : b;
}

static void launch_groups(struct controller *c)
{
    const struct libra_config *cfg = c->cfg;
    int64_t cap = (int64_t)(c->rollout_version + cfg->train.max_staleness + 1) * c->groups_per_batch;
    int64_t max_inflight = cfg->rollout.max_inflight_groups;
    while ((int64_t)c->tt.n_group + c->groups_before < cap &&
           (max_inflight <= 0 || tt_groups_in_flight(&c->tt) < max_inflight)) {
        if (c->real) {
            int64_t pid = ctl_real_next_prompt(c);
            int64_t g = tt_launch_group(&c->tt, pid, 0, c->step, c->rollout_version, now_s(c));
            ctl_real_launch(c, g);
            continue;
        }
        int64_t pid = c->next_prompt++;
        int ptok = workload_prompt_tokens(c->wl, cfg->run.seed, pid);
        if (ptok > cfg->rollout.max_tokens - 1) ptok = cfg->rollout.max_tokens - 1;
        tt_launch_group(&c->tt, pid, ptok, c->step, c->rollout_version, now_s(c));
    }
}

static void hold_turn(struct controller *c, int64_t id)
{
    if (c->n_held == c->cap_held) {
        c->cap_held = c->cap_held ? 2 * c->cap_held : 64;
        c->held = xrealloc(c->held, c->cap_held * sizeof *c->held);
    }
    c->held[c->n_held++] = id;
}

/* Routes one turn; returns 0 if the scheduler holds it (it is asked again later). */
static int dispatch_one(struct controller *c, struct traj *t)
{
    int budget = turn_budget(c, t);
    if (budget <= 0) {
        finish_traj(c, t);
        return 1;
    }
    int eval = t->id >= CTL_EVAL_ID0;
    struct sched_turn st = {.traj_id = t->id,
                            .prompt_id = t->prompt_id,
                            .turn = t->turn,
                            .ctx_tokens = t->ctx_tokens,
                            .gen_tokens = t->gen_tokens,
                            .budget = budget,
                            .prev = t->leader >= 0 ? instance_index(c, t->leader) : -1,
                            .sample = eval ? 0 : (int)(t->id - c->tt.g[t->group_id].first_traj),
                            .n_samples = eval ? 1 : c->tt.n_samples,
                            .eval = eval};
    struct sched_decision d;
    double t0 = ctl_cpu_clock(c), now = now_s(c);
    sched_route(&c->sched, &st, c->inst, c->plan.n_instances, now, &d);
    c->acc.sched_s += ctl_cpu_clock(c) - t0;
    c->acc.sched_n++;
    if (d.instance < 0) return 0;
    int i = d.instance;
    struct sched_instance *in = &c->inst[i];
    if (t->leader >= 0 && t->leader != in->leader) {
        t->migrations++;
        c->stats.migrations++;
    }
    struct wire_turn_req req = {.traj_id = t->id,
                                .prompt_id = t->prompt_id,
                                .turn = t->turn,
                                .ctx_tokens = t->ctx_tokens,
                                .budget = budget,
                                .resume_generated = t->resume_generated,
                                .n_failures = t->n_failures,
                                .last_failed = t->last_failed,
                                .last_large = t->last_large,
                                .step_start = t->step_start,
                                .est_remaining = d.est_remaining};
    const int32_t *ids = NULL;
    if (c->real) {
        struct traj_tokens *tk = ctl_real_tokens(c, t->id);
        ids = tk->ids;
        req.n_tokens = tk->n;
        req.rng_key = ctl_real_rng_key(c, t);
        req.flags = t->id >= CTL_EVAL_ID0 ? WIRE_TURN_GREEDY : 0;
    }
    struct wire_buf *b = &c->out_batch[i];
    if (b->len == 0) wire_batch_begin(b, 0);
    wire_batch_add_turn_req(b, &req, ids);
    t->dispatched_load = t->ctx_tokens + budget;
    in->load += t->dispatched_load;
    if (in->n_turns++ == 0) ctl_trace_busy(c, i, now);
    t->leader = in->leader;
    t->state = TS_RUNNING;
    c->stats.dispatches++;
    return 1;
}

/* Routes every queued turn (held ones first, oldest first), then sends one batch per
 * instance. A held turn keeps its trajectory TS_QUEUED. */
static void dispatch_queued(struct controller *c)
{
    size_t n_old = c->n_held;
    c->n_held = 0;
    for (size_t k = 0; k < n_old; k++) {
        int64_t hid = c->held[k];
        if (!dispatch_one(c, ctl_traj(c, hid))) c->held[c->n_held++] = hid;
    }
    int64_t id;
    while (tt_queue_pop(&c->tt, &id))
        if (!dispatch_one(c, ctl_traj(c, id))) hold_turn(c, id);
    for (int i = 0; i < c->plan.n_instances; i++) {
        struct wire_buf *b = &c->out_batch[i];
        if (b->len == 0) continue;
        ctl_send(c, b->data, b->len, c->inst[i].leader, TAG_TURN_REQ);
        wire_buf_reset(b);
    }
}

/* Applies one turn result (or a handed-back partial turn) to its trajectory. */
static void on_turn_result(struct controller *c, const struct wire_turn_result *r,
                           const struct wire_turn_arrays *a)
{
    struct traj *t = ctl_traj(c, r->traj_id);
    if (!t)
        FATAL("turn result for unknown trajectory %lld from rank %d", (long long)r->traj_id,
              r->leader);
    if (t->state != TS_RUNNING || t->leader != r->leader || t->turn != r->turn)
        FATAL("unexpected turn result: trajectory %lld turn %d from rank %d (expected turn %d "
              "on rank %d, state %d)",
              (long long)t->id, r->turn, r->leader, t->turn, t->leader, t->state);
    int i = instance_index(c, r->leader);
    double now = now_s(c);
    ctl_trace_turn(c, i, r, now);
    if (i >= 0) {
        c->inst[i].load -= t->dispatched_load;
        if (--c->inst[i].n_turns == 0) ctl_trace_idle(c, i, now);
        if (r->inst_queued >= 0) {
            c->inst[i].queued = r->inst_queued;
            c->inst[i].running = r->inst_running;
            c->inst[i].kv_frac = r->inst_kv_frac;
        }
    }
    c->acc.rollout_busy_rank_s += r->busy_rank_s;
    c->stats.results++;
    if (t->version_start < 0 && r->gen_tokens > 0 && r->version_first >= 0)
        t->version_start = r->version_first;
    if (c->real) {
        /* The tokens join the trajectory as they come, partial turns included. */
        ctl_real_on_turn(c, t, r, a);
        if (r->partial) {
            t->resume_generated += r->gen_tokens;
            t->gen_tokens += r->gen_tokens;
            t->ctx_tokens += r->gen_tokens;
            if (r->gen_tokens > 0) t->version_end = r->version_last;
            tt_queue_push_front(&c->tt, t->id);
            t->state = TS_QUEUED;
            return;
        }
        t->gen_tokens += r->gen_tokens;
        t->ctx_tokens += r->gen_tokens;
        record_turn(c, t, r, t->resume_generated + r->gen_tokens);
        t->resume_generated = 0;
        if (r->gen_tokens > 0) t->version_end = r->version_last;
        if (r->final) {
            finish_traj(c, t);
            return;
        }
        t->tool_tokens += r->n_payload;
        t->ctx_tokens += r->n_payload;
        sched_tool_return(&c->sched, t->id, r->tool, r->tool_status, r->n_payload, t->gen_tokens);
        t->last_failed = r->tool_status == TOOL_FAILURE || r->tool_status == TOOL_TIMEOUT;
        t->n_failures += t->last_failed;
        t->last_large = 0;
        t->turn++;
        if (t->turn >= c->cfg->rollout.max_turns || t->ctx_tokens >= c->cfg->rollout.max_tokens) {
            finish_traj(c, t);
        } else {
            tt_queue_push(&c->tt, t->id);
            t->state = TS_QUEUED;
        }
        return;
    }
    if (r->partial) {
        t->resume_generated = r->gen_tokens;
        tt_queue_push_front(&c->tt, t->id);
        return;
    }
    t->gen_tokens += r->gen_tokens;
    t->ctx_tokens += r->gen_tokens;
    record_turn(c, t, r, r->gen_tokens);
    t->resume_generated = 0;
    t->version_end = r->version_last;
    if (r->final) {
        finish_traj(c, t);
        return;
    }
    t->tool_tokens += r->payload_tokens;
    t->ctx_tokens += r->payload_tokens;
    t->tool_s += r->tool_latency_s;
    sched_tool_return(&c->sched, t->id, r->tool, r->tool_status, r->payload_tokens, t->gen_tokens);
    t->last_failed = r->tool_status == TOOL_FAILURE || r->tool_status == TOOL_TIMEOUT;
    t->n_failures += t->last_failed;
    t->last_large = r->payload_tokens >= c->wl->large_payload;
    t->turn++;
    if (t->turn >= c->cfg->rollout.max_turns || t->ctx_tokens >= c->cfg->rollout.max_tokens)
        finish_traj(c, t);
    else
        tt_queue_push(&c->tt, t->id);
}

/* ---- training ---- */

struct batch_item {
    struct wire_train_item item;
    const struct traj_tokens *tok; /* device cpu: the sequence, else NULL */
    int replica;
};

static int cmp_tokens_desc(const void *a, const void *b)
{
    const struct batch_item *x = a, *y = b;
    if (x->item.tokens != y->item.tokens) return y->item.tokens - x->item.tokens;
    return x->item.traj_id < y->item.traj_id ? -1 : 1;
}

static void write_traj_row(struct controller *c, const struct traj *t, int fate)
{
    struct metrics_traj_row row = {
        t->id, t->prompt_id, t->group_id, fate == TRAJ_TRAINED ? t->step_consumed : -1, fate,
        t->version_start, t->version_end, t->prompt_tokens, t->gen_tokens, t->tool_tokens,
        t->turn + (t->state >= TS_DONE ? 1 : 0), t->n_failures, t->migrations, t->reward,
        t->t_start, t->t_end};
    if (metrics_traj(c->m, &row)) FATAL("metrics: cannot append trajectory %lld", (long long)t->id);
}

/* Token-balanced split (longest first onto the least-loaded replica) and send; every
 * rank of a replica (train tp x pp) gets the replica's share. */
static void send_batch(struct controller *c, struct batch_item *items, int n_items)
{
    int *ranks = xmalloc((size_t)c->world * sizeof *ranks);
    int n_hyb = 0, size = plan_replica_size(&c->plan);
    int n_rep = ctl_replicas(c, ranks, &n_hyb);
    c->batch.n_replicas = n_rep;
    c->batch.n_hybrid_replicas = n_hyb;
    int64_t *load = xcalloc((size_t)n_rep, sizeof *load);
    int64_t total = 0, total_gen = 0;
    qsort(items, (size_t)n_items, sizeof *items, cmp_tokens_desc);
    for (int i = 0; i < n_items; i++) {
        int best = 0;
        for (int k = 1; k < n_rep; k++)
            if (load[k] < load[best]) best = k;
        items[i].replica = best;
        load[best] += items[i].item.tokens;
        total += items[i].item.tokens;
        total_gen += items[i].item.gen_tokens;
    }
    for (int k = 0; k < n_rep; k++) {
        struct wire_train_batch h = {c->step + 1, c->version, 0, n_rep, size, n_hyb * size,
                                     total, total_gen};
        for (int i = 0; i < n_items; i++) h.n_items += items[i].replica == k;
        wire_train_batch_begin(&c->pack, &h);
        for (int i = 0; i < n_items; i++)
            if (items[i].replica == k) {
                const struct traj_tokens *tk = items[i].tok;
                wire_train_batch_add(&c->pack, &items[i].item, tk ? tk->ids : NULL,
                                     tk ? tk->logp : NULL, tk ? tk->mask : NULL);
            }
        for (int j = 0; j < size; j++)
            ctl_send(c, c->pack.data, c->pack.len, ranks[k * size + j], TAG_TRAIN_BATCH);
    }
    free(load);
    free(ranks);
}

/* Turns in flight or waiting for an instance (evaluation episodes included). */
static int rollout_active(const struct controller *c)
{
    if (c->tt.q_len > 0 || c->n_held > 0 || (c->real && c->rl.ev.active > 0)) return 1;
    for (int i = 0; i < c->plan.n_instances; i++)
        if (c->inst[i].n_turns > 0) return 1;
    return 0;
}

static void try_train(struct controller *c)
{
    if (c->train_inflight || c->epoch_pending || c->pool.pending || c->step >= c->cfg->run.steps)
        return;
    if (c->real && c->rl.ckpt_inflight) return;
    /* Colocated: the rollout ranks train, and a rank's rollout model decodes with the
     * weights its optimizer step changes, so the step waits until no turn is in flight
     * (on-policy, nothing of the step's version is: an evaluation may be). */
    if (c->plan.colocated && rollout_active(c)) return;
    /* A batch that could not be formed stays impossible until a group completes or
     * the version moves (new launches only add constraints): skip the retry. */
    int64_t completed = (int64_t)c->tt.n_buffered + c->tt.groups_trained;
    if (completed == c->select_failed_completed && c->version == c->select_failed_version) return;
    int n = tt_select_batch(&c->tt, c->groups_per_batch, c->version, c->cfg->train.max_staleness,
                            c->batch_groups);
    if (n == 0) {
        c->select_failed_completed = completed;
        c->select_failed_version = c->version;
        return;
    }
    int n_items = n * c->tt.n_samples;
    struct batch_item *items = xmalloc((size_t)n_items * sizeof *items);
    double *adv = NULL;
    if (c->real) {
        adv = xmalloc((size_t)n_items * sizeof *adv);
        ctl_real_advantages(c, c->batch_groups, n, adv);
    }
    double rsum = 0, rsq = 0, ssum = 0, tok = 0, tok_sq = 0, tok_max = 0;
    int k = 0, smax = 0;
    int64_t gen = 0, tool = 0;
    tt_mark_trained(&c->tt, c->batch_groups, n, c->step + 1);
    for (int g = 0; g < n; g++) {
        const struct group *grp = &c->tt.g[c->batch_groups[g]];
        for (int s = 0; s < grp->n; s++, k++) {
            struct traj *t = &c->tt.t[grp->first_traj + s];
            items[k].item = (struct wire_train_item){
                .traj_id = t->id,
                .tokens = t->prompt_tokens + t->gen_tokens + t->tool_tokens,
                .gen_tokens = t->gen_tokens};
            items[k].tok = NULL;
            if (c->real) {
                items[k].tok = ctl_real_tokens(c, t->id);
                items[k].item.has_data = 1;
                items[k].item.advantage = adv[k];
                items[k].item.tokens = items[k].tok->n;
            }
            int stale = c->version - t->version_start;
            if (stale > c->cfg->train.max_staleness)
                FATAL("staleness bound broken: trajectory %lld started at version %d, training at "
                      "%d (bound %d)",
                      (long long)t->id, t->version_start, c->version, c->cfg->train.max_staleness);
            ssum += stale;
            if (stale > smax) smax = stale;
            rsum += t->reward;
            rsq += t->reward * t->reward;
            gen += t->gen_tokens;
            tool += t->tool_tokens;
            double len = items[k].item.tokens;
            tok += len;
            tok_sq += len * len;
            tok_max = fmax(tok_max, len);
            write_traj_row(c, t, TRAJ_TRAINED);
        }
    }
    ctl_real_samples(c, c->batch_groups, n, c->step + 1);
    c->batch.n_traj = n_items;
    c->batch.tokens_gen = gen;
    c->batch.tokens_tool = tool;
    c->batch.reward_mean = rsum / n_items;
    c->batch.reward_std = sqrt(fmax(0.0, rsq / n_items - (rsum / n_items) * (rsum / n_items)));
    c->batch.staleness_mean = ssum / n_items;
    c->batch.staleness_max = smax;
    c->batch.tokens = tok;
    c->batch.sum_len_sq = tok_sq;
    c->batch.max_len = tok_max;
    c->batch.sent_at = now_s(c);
    c->batch.waited_s = c->batch.sent_at - c->train_idle_since;
    send_batch(c, items, n_items);
    free(items);
    free(adv);
    c->train_inflight = 1;
}

/* A step the training ranks did not apply: its loss or gradient norm was not finite.
 * train.on_nonfinite = stop ends the run here (the weights and the last checkpoint are
 * those of the step before); skip records it and goes on. */
static void on_nonfinite(struct controller *c, const struct wire_train_done *d)
{
    char what[400];
    char bad[sizeof d->bad_tensor + 1];
    memcpy(bad, d->bad_tensor, sizeof d->bad_tensor);
    bad[sizeof d->bad_tensor] = '\0';
    snprintf(what, sizeof what,
             "step %d: loss %g, gradient norm %g (training replica rooted at rank %d%s%s): "
             "the update was not applied", d->step, d->loss, d->grad_norm,
             plan_train_root(&c->plan), bad[0] ? "; first non-finite gradient: " : "", bad);
    if (metrics_event(c->m, ctl_now(c), d->step, EV_NONFINITE, what))
        FATAL("metrics: cannot record an event");
    if (strcmp(c->cfg->train.on_nonfinite, "skip") == 0) {
        c->stats.nonfinite_skipped++;
        LOG_W("%s; batch skipped (train.on_nonfinite = \"skip\", %d so far)", what,
              c->stats.nonfinite_skipped);
        return;
    }
    LOG_E("%s; the run stops (train.on_nonfinite = \"stop\"; \"skip\" drops such batches "
          "instead)", what);
    c->failed = 1; /* the step is recorded; nothing after it is started */
}

static void on_train_done(struct controller *c, const struct wire_train_done *d)
{
    if (!c->train_inflight || d->step != c->step + 1)
        FATAL("unexpected TRAIN_DONE for step %d (controller at step %d, in flight %d)", d->step,
              c->step, c->train_inflight);
    if (d->nonfinite) on_nonfinite(c, d);
    c->train_inflight = 0;
    double now = now_s(c);
    c->train_idle_since = now; /* /steps train_s and the planner's measure end here */
    c->step++;
    c->version++; /* one version per optimizer step */
    double step_s = now - c->acc.t_start;
    ctl_live_step(c, step_s);
    const struct ctl_batch *b = &c->batch;
    int n_rep = c->plan.n_train + c->batch.n_hybrid_replicas * plan_replica_size(&c->plan);
    double rollout_busy =
        step_s > 0 && c->plan.n_rollout_ranks > 0
            ? c->acc.rollout_busy_rank_s / (c->plan.n_rollout_ranks * step_s)
            : 0;
    struct metrics_step_row row = {
        .step = c->step,
        .wall_s = now,
        .step_s = step_s,
        .version = c->version,
        .n_traj = b->n_traj,
        .tokens_gen = b->tokens_gen,
        .tokens_tool = b->tokens_tool,
        .reward_mean = b->reward_mean,
        .reward_std = b->reward_std,
        .staleness_mean = b->staleness_mean,
        .staleness_max = b->staleness_max,
        .rollout_busy_frac = rollout_busy,
        .train_busy_frac = step_s > 0 ? d->busy_rank_s / (n_rep * step_s) : 0,
        .n_rollout_ranks = c->plan.n_rollout_ranks,
        .n_train_ranks = c->plan.n_train,
        .n_hybrid_ranks = c->batch.n_hybrid_replicas * plan_replica_size(&c->plan)};
    row.grad_norm = d->grad_norm;
    ctl_trace_step_end(c, d, &row, now);
    if (c->real) ctl_real_step_row(c, d, &row, now);
    sched_step_end(&c->sched, c->step);
    ctl_sched_step_rows(c, now);
    if (metrics_step(c->m, &row) || metrics_flush(c->m)) FATAL("metrics: cannot write step %d", c->step);
    c->stats.traj_trained += b->n_traj;
    c->stats.tokens_gen_trained += b->tokens_gen;
    c->stats.tokens_tool_trained += b->tokens_tool;
    c->stats.reward_sum += b->reward_mean * b->n_traj;
    c->acc.rollout_busy_rank_s = 0;
    c->acc.t_start = now;
    int last = c->step >= c->cfg->run.steps;
    if (c->step % c->cfg->train.sync_interval == 0 && !last) c->sync_wanted = c->version;
    if (c->planner.grp) {
        if (!last) ctl_plan_after_step(c, step_s, rollout_busy);
    } else if (c->step % c->cfg->plan.interval == 0 && !last) {
        c->epoch_pending = 1;
    }
    c->finished_in_step = 0;
    if (c->real) {
        int ckpt = c->cfg->run.checkpoint_interval;
        if (ckpt > 0 && c->step % ckpt == 0) ctl_ckpt_start(c);
        int ev = c->cfg->eval.interval;
        if (c->cfg->eval.size > 0 && (last || (ev > 0 && c->step % ev == 0))) {
            c->sync_wanted = c->version; /* evaluate the newest weights */
            ctl_eval_request(c);
        }
    }
}

/* A batch of turn results (TAG_TURN_RESULT) or a handback (TAG_HANDBACK). */
static void on_result_batch(struct controller *c, const void *msg, size_t len, int source,
                            int handback)
{
    struct wire_reader rd;
    struct wire_turn_result r;
    int n = wire_reader_init(&rd, msg, len), got = n < 0 ? -1 : 1;
    struct wire_turn_arrays a;
    while (got == 1 && (got = wire_next_turn_result(&rd, &r, &a)) == 1) on_turn_result(c, &r, &a);
    if (got < 0)
        FATAL("malformed %s (%zu bytes) from rank %d", handback ? "handback" : "turn results", len,
              source);
    if (!handback) return;
    c->stats.handed_back += n;
    if (c->handbacks_pending <= 0) FATAL("unexpected handback from rank %d", source);
    c->handbacks_pending--;
}

void ctl_deliver(struct controller *c, int tag, int source, const void *data, size_t len)
{
    switch (tag) {
    case TAG_TURN_RESULT: on_result_batch(c, data, len, source, 0); break;
    case TAG_HANDBACK: on_result_batch(c, data, len, source, 1); break;
    case TAG_TRAIN_DONE: {
        struct wire_train_done d;
        if (len != sizeof d) FATAL("malformed TRAIN_DONE from rank %d", source);
        memcpy(&d, data, sizeof d);
        on_train_done(c, &d);
        break;
    }
    case TAG_TRAIN_TIMES: {
        struct wire_train_times m;
        if (len != sizeof m) FATAL("malformed TRAIN_TIMES from rank %d", source);
        memcpy(&m, data, sizeof m);
        if (m.rank != source) FATAL("TRAIN_TIMES from rank %d names rank %d", source, m.rank);
        ctl_trace_train_times(c, &m, now_s(c));
        break;
    }
    case TAG_CKPT_DONE: {
        struct wire_ckpt_done d;
        if (len != sizeof d) FATAL("malformed CKPT_DONE from rank %d", source);
        memcpy(&d, data, sizeof d);
        ctl_ckpt_on_done(c, &d);
        break;
    }
    case TAG_HYBRID_READY: {
        struct wire_hybrid_ready d;
        if (len != sizeof d) FATAL("malformed HYBRID_READY from rank %d", source);
        memcpy(&d, data, sizeof d);
        if (d.rank != source) FATAL("HYBRID_READY from rank %d names rank %d", source, d.rank);
        ctl_pool_on_ready(c, &d);
        break;
    }
    case TAG_SYNC_DONE: {
        struct wire_sync_done d;
        if (len != sizeof d) FATAL("malformed SYNC_DONE from rank %d", source);
        memcpy(&d, data, sizeof d);
        ctl_on_sync_done(c, &d, source);
        break;
    }
    default: FATAL("unexpected message tag %d (%s) from rank %d", tag, wire_tag_name(tag), source);
    }
}

/* Handles every message waiting now; returns how many. */
int ctl_poll(struct controller *c)
{
    if (c->tr) return c->tr->poll(c->tr->ctx, c);
    int n = 0;
    for (;;) {
        int flag = 0;
        MPI_Status st;
        MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
        if (!flag) break;
        wire_recv(&c->msg, &st, MPI_COMM_WORLD);
        if (!ctl_live_seen(c, st.MPI_SOURCE, st.MPI_TAG, c->msg.data, c->msg.len))
            ctl_deliver(c, st.MPI_TAG, st.MPI_SOURCE, c->msg.data, c->msg.len);
        n++;
    }
    outbox_progress(&c->ob);
    return n;
}

/* ---- progress and summary ---- */

static void fmt_duration(double s, char *buf, size_t len)
{
    if (!isfinite(s) || s < 0) {
        snprintf(buf, len, "--");
        return;
    }
    int t = (int)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, len, "%dh%02dm", t / 3600, t / 60 % 60);
    else
        snprintf(buf, len, "%dm%02ds", t / 60, t % 60);
}

/* Every run.progress_interval_s wall seconds (also under the simulator, whose clock
 * runs far faster); rates are per second of the run's own clock. */
static void print_progress(struct controller *c, int force)
{
    double wall = wall_time() - c->t0, now = now_s(c);
    if (!force && wall - c->last_progress < c->cfg->run.progress_interval_s) return;
    c->last_progress = wall;
    char eta[32];
    double per_step = c->step > 0 ? now / c->step : NAN;
    fmt_duration(per_step * (c->cfg->run.steps - c->step), eta, sizeof eta);
    if (c->real) {
        printf("step %d/%d | %.1f traj/s | %.0f gen tok/s | reward %.3f | success %.2f | tool calls "
               "%.2f | eval %.3f | stale %.2f | ETA %s\n",
               c->step, c->cfg->run.steps, now > 0 ? c->stats.traj_trained / now : 0,
               now > 0 ? c->stats.tokens_gen_trained / now : 0, c->batch.reward_mean,
               c->rl.batch.success_rate,
               c->batch.n_traj ? (double)(c->rl.batch.tool_calls[0] + c->rl.batch.tool_calls[1]) /
                                     c->batch.n_traj
                               : 0,
               c->rl.ev.last_accuracy, c->batch.staleness_mean, eta);
        fflush(stdout);
        return;
    }
    printf("step %d/%d | %.1f traj/s | %.0f gen tok/s | reward %.3f | stale %.2f | roll %d train %d "
           "hyb %d | queue %zu | ETA %s\n",
           c->step, c->cfg->run.steps, now > 0 ? c->stats.traj_trained / now : 0,
           now > 0 ? c->stats.tokens_gen_trained / now : 0, c->batch.reward_mean,
           c->batch.staleness_mean, c->plan.n_rollout_ranks, c->plan.n_train, c->plan.n_hybrid,
           c->tt.q_len, eta);
    fflush(stdout);
}

/* CPU seconds rank 0 has used: its dispatch capacity is dispatches per CPU second,
 * a figure that holds even when the ranks share oversubscribed cores. */
static double controller_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return NAN;
    return (double)ru.ru_utime.tv_sec + 1e-6 * ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * ru.ru_stime.tv_usec;
}

static void print_summary(struct controller *c)
{
    double wall = now_s(c);
    double cpu = controller_cpu_s();
    printf("\nlibra: %d steps in %.1f s | %lld trajectories trained (%.2f traj/s, %.0f generated + %.0f tool-return tokens/s) | "
           "mean reward %.3f\n",
           c->step, wall, (long long)c->stats.traj_trained,
           wall > 0 ? c->stats.traj_trained / wall : 0,
           wall > 0 ? c->stats.tokens_gen_trained / wall : 0,
           wall > 0 ? c->stats.tokens_tool_trained / wall : 0,
           c->stats.traj_trained ? c->stats.reward_sum / c->stats.traj_trained : 0);
    printf("libra: %lld turns dispatched, %lld migrations, %d re-splits (mean %.1f ms, max %.1f "
           "ms), %lld turns handed back\n",
           (long long)c->stats.dispatches, (long long)c->stats.migrations, c->stats.n_resplits,
           c->stats.n_resplits ? 1e3 * c->stats.resplit_s_sum / c->stats.n_resplits : 0,
           1e3 * c->stats.resplit_s_max, (long long)c->stats.handed_back);
    printf("libra: controller: %.0f turn dispatches/s over the run, %.0f per CPU-second of rank 0 "
           "(%.1f CPU-s)\n",
           wall > 0 ? c->stats.dispatches / wall : 0, cpu > 0 ? c->stats.dispatches / cpu : 0, cpu);
    if (c->real) {
        const struct ctl_eval *ev = &c->rl.ev;
        if (c->stats.nonfinite_skipped > 0)
            printf("libra: %d steps skipped: loss or gradient not finite (train.on_nonfinite = "
                   "\"skip\")\n", c->stats.nonfinite_skipped);
        if (c->stats.ckpt_failed > 0 && c->rl.ckpt_good > 0)
            printf("libra: %d checkpoint%s not written (run.checkpoint_on_error = \"warn\"; "
                   "see the \"error\" events): the newest complete one is of step %d\n",
                   c->stats.ckpt_failed, c->stats.ckpt_failed == 1 ? "" : "s", c->rl.ckpt_good);
        else if (c->stats.ckpt_failed > 0)
            printf("libra: %d checkpoint%s not written (run.checkpoint_on_error = \"warn\"; "
                   "see the \"error\" events): this run wrote none\n", c->stats.ckpt_failed,
                   c->stats.ckpt_failed == 1 ? "" : "s");
        if (ev->n_runs > 0)
            printf("libra: held-out greedy accuracy: %.3f at the start -> %.3f at the end "
                   "(%+.3f, %d problems)\n",
                   ev->first_accuracy, ev->last_accuracy, ev->last_accuracy - ev->first_accuracy,
                   ev->n);
        if (c->rl.time_to_target_s >= 0)
            printf("libra: reward reached run.target_reward = %.3f after %.1f s\n",
                   c->cfg->run.target_reward, c->rl.time_to_target_s);
        else
            printf("libra: reward never reached run.target_reward = %.3f\n",
                   c->cfg->run.target_reward);
    }
    printf("libra: metrics in %s\n", metrics_path(c->m));
    fflush(stdout);
}

/* ---- shutdown ---- */

static void shutdown_workers(struct controller *c)
{
    c->stopping = 1;
    int32_t steps = c->step; /* the optimizer steps done: lent ranks take their totals */
    for (int r = 1; r < c->world; r++)
        ctl_send(c, &steps, sizeof steps, r, TAG_SHUTDOWN);
    ctl_wait_handbacks(c, c->plan.n_instances);
    /* Whatever was not trained is recorded: buffered (complete group) or in flight. */
    for (size_t i = 0; i < c->tt.n_traj; i++) {
        struct traj *t = &c->tt.t[i];
        if (t->state == TS_TRAINED) continue;
        write_traj_row(c, t, t->state == TS_BUFFERED ? TRAJ_BUFFERED : TRAJ_IN_FLIGHT);
    }
    if (!c->tr) outbox_drain(&c->ob);
}

static void write_run_attrs(struct controller *c)
{
    const struct libra_config *cfg = c->cfg;
    int rc = metrics_attr_int(c->m, "steps_requested", cfg->run.steps) |
             metrics_attr_int(c->m, "max_staleness", cfg->train.max_staleness) |
             metrics_attr_int(c->m, "n_traj_started", (int64_t)c->tt.n_traj) |
             metrics_attr_int(c->m, "turns_dispatched", c->stats.dispatches) |
             metrics_attr_int(c->m, "migrations", c->stats.migrations) |
             metrics_attr_double(c->m, "wall_s", now_s(c)) |
             metrics_attr_double(c->m, "time_scale", cfg->device.time_scale);
    if (!c->tr) rc |= metrics_attr_double(c->m, "controller_cpu_s", controller_cpu_s());
    if (c->real) {
        const struct ctl_eval *ev = &c->rl.ev;
        rc |= metrics_attr_int(c->m, "nonfinite_skipped", c->stats.nonfinite_skipped) |
              metrics_attr_int(c->m, "checkpoints_failed", c->stats.ckpt_failed);
        if (ev->n_runs > 0)
            rc |= metrics_attr_double(c->m, "eval_accuracy_first", ev->first_accuracy) |
                  metrics_attr_double(c->m, "eval_accuracy_final", ev->last_accuracy);
        if (c->rl.time_to_target_s >= 0)
            rc |= metrics_attr_double(c->m, "time_to_target_reward", c->rl.time_to_target_s);
    }
    if (rc) FATAL("metrics: cannot write run attributes");
}

/* ---- the loop ---- */

static void controller_init(struct controller *c, const struct libra_config *cfg,
                            const struct cost_model *cm, const struct workload *wl,
                            const struct device_info *dev, struct metrics *m, int world,
                            const struct ctl_transport *tr)
{
    memset(c, 0, sizeof *c);
    c->dev = *dev;
    c->tr = tr;
    c->cfg = cfg;
    c->cm = cm;
    c->wl = wl;
    c->m = m;
    c->world = world;
    c->t0 = wall_time();
    c->groups_per_batch = cfg->train.batch_size / cfg->rollout.n_samples;
    c->batch_groups = xmalloc((size_t)c->groups_per_batch * sizeof *c->batch_groups);
    c->sync_wanted = -1;
    c->select_failed_completed = -1;
    c->real = dev->has_model;
    comms_init(&c->comms);
    plan_init(&c->plan, world);
    plan_init(&c->base, world);
    plan_init(&c->next_base, world);
    planner_init(&c->planner, cfg, &c->dev.cm, wl, world); /* the device's cost model */
    ctl_pool_init(c);
    outbox_init(&c->ob);
    tt_init(&c->tt, cfg->rollout.n_samples);
    ctl_sched_init(c);
    ctl_live_init(c);
}

static void controller_free(struct controller *c)
{
    ctl_live_free(c);
    ctl_trace_free(c);
    outbox_free(&c->ob);
    comms_free(&c->comms);
    plan_free(&c->plan);
    plan_free(&c->base);
    plan_free(&c->next_base);
    planner_free(&c->planner);
    ctl_pool_free(c);
    sched_free(&c->sched);
    free(c->held);
    tt_free(&c->tt);
    wire_buf_free(&c->msg);
    wire_buf_free(&c->pack);
    for (int i = 0; i < c->n_out_batch; i++) wire_buf_free(&c->out_batch[i]);
    free(c->out_batch);
    free(c->inst);
    free(c->batch_groups);
}

/* Epoch 0: the static / scripted plan, or the planner's preflight plan. */
static void first_epoch(struct controller *c)
{
    char err[512];
    if (planner_next(&c->planner, 0, c->step, &c->base, err, sizeof err))
        FATAL("planner: %s", err);
    ctl_apply_plan(c, &c->base, c->base.reason);
}

/* Work that must finish before shutdown: a step, a sync, a pool join (its ranks are
 * fetching state from their partners), an evaluation, a checkpoint. */
static int busy_tail(const struct controller *c)
{
    if (c->train_inflight || c->sync_acks_pending || c->pool.joining > 0) return 1;
    return c->real && (c->rl.ev.active || c->rl.ev.wanted_version >= 0 || c->rl.ckpt_inflight);
}

void ctl_open(struct controller *c, const struct libra_config *cfg, const struct cost_model *cm,
              const struct workload *wl, const struct device_info *dev, struct metrics *m,
              int world, const struct ctl_transport *tr, const struct ckpt_state *resume,
              int resume_step)
{
    controller_init(c, cfg, cm, wl, dev, m, world, tr);
    if (c->real) ctl_real_init(c, resume, resume_step);
    first_epoch(c);
    c->acc.t_start = 0;
    if (c->real && cfg->eval.size > 0) ctl_eval_request(c);
}

int ctl_running(const struct controller *c)
{
    if (c->failed) return busy_tail(c);
    if (c->stop_sig) return !c->stop_ckpt || busy_tail(c);
    return c->step < c->cfg->run.steps || busy_tail(c);
}

int ctl_stopped_by(const struct controller *c) { return c->stop_sig; }

/* A signal asked for a stop: no new groups, no new step; once the step in flight is
 * done, a checkpoint of the state (in-flight trajectories included) if the run keeps
 * checkpoints. ctl_running then waits for the work already started. */
static void check_stop(struct controller *c)
{
    if (!c->stop_sig && stop_signal_requested()) {
        c->stop_sig = stop_signal_requested();
        char what[160];
        snprintf(what, sizeof what, "stop requested by signal %d after step %d: finishing the "
                 "work in flight%s", c->stop_sig, c->step,
                 c->real && c->cfg->run.checkpoint_interval > 0 ? ", then a checkpoint" : "");
        LOG_W("%s", what);
        if (metrics_event(c->m, ctl_now(c), c->step, EV_CANCEL, what))
            FATAL("metrics: cannot record an event");
        c->stop_ckpt = !(c->real && c->cfg->run.checkpoint_interval > 0 && c->step > 0);
    }
    /* (colocated: nor while a turn is in flight -- a TP instance's ranks are also its
     * replica's, whose checkpoint gathers over the communicator the decoder uses) */
    if (c->stop_sig && !c->stop_ckpt && !c->train_inflight && !c->rl.ckpt_inflight &&
        !(c->plan.colocated && rollout_active(c))) {
        c->stop_ckpt = 1;
        if (c->rl.ckpt_last != c->step) ctl_ckpt_start(c); /* else the periodic one is it */
    }
}

int ctl_iterate(struct controller *c)
{
    const struct libra_config *cfg = c->cfg;
    int work = ctl_poll(c);
    work |= ctl_pool_check_timeouts(c);
    ctl_live_check(c);
    check_stop(c);
    if ((c->epoch_pending || c->pool.pending) && !c->train_inflight && c->sync_acks_pending == 0) {
        ctl_next_epoch(c);
        work = 1;
    }
    if (!c->epoch_pending && !c->pool.pending) {
        if (c->sync_wanted > c->rollout_version && c->sync_acks_pending == 0) {
            ctl_start_sync(c, c->sync_wanted);
            work = 1;
        }
        if (c->real) ctl_eval_progress(c);
        if (c->step < cfg->run.steps && !c->stop_sig && !c->failed) {
            size_t before = c->tt.n_traj;
            launch_groups(c);
            work |= c->tt.n_traj != before;
        }
        /* colocated: no turn goes out while its ranks train or take the new weights */
        if (!c->plan.colocated || (!c->train_inflight && c->sync_acks_pending == 0)) {
            work |= c->tt.q_len > 0;
            dispatch_queued(c);
        }
        if (c->step < cfg->run.steps && !c->stop_sig && !c->failed) {
            int inflight = c->train_inflight;
            try_train(c);
            work |= c->train_inflight != inflight;
        }
    }
    print_progress(c, 0);
    return work;
}

void ctl_close(struct controller *c)
{
    print_progress(c, 1);
    shutdown_workers(c);
    ctl_trace_finish(c, now_s(c));
    ctl_sched_finish_run(c);
    write_run_attrs(c);
    print_summary(c);
    if (c->real) ctl_real_free(c);
    controller_free(c);
}

struct controller *ctl_create(const struct libra_config *cfg, const struct cost_model *cm,
                              const struct workload *wl, const struct device_info *dev,
                              struct metrics *m, int world, const struct ctl_transport *tr,
                              const struct ckpt_state *resume, int resume_step)
{
    struct controller *c = xmalloc(sizeof *c);
    ctl_open(c, cfg, cm, wl, dev, m, world, tr, resume, resume_step);
    return c;
}

void ctl_destroy(struct controller *c) { free(c); }

void ctl_status(const struct controller *c, struct ctl_status *out)
{
    *out = (struct ctl_status){.step = c->step,
                               .n_traj = c->tt.n_traj,
                               .queued = c->tt.q_len,
                               .held = c->n_held,
                               .train_inflight = c->train_inflight,
                               .solve_s_sum = c->stats.solve_s_sum,
                               .n_solves = c->stats.n_solves};
}

int controller_run(const struct libra_config *cfg, const struct cost_model *cm,
                   const struct workload *wl, const struct device_info *dev, struct metrics *m,
                   int world, const struct ckpt_state *resume, int resume_step)
{
    struct controller *c = ctl_create(cfg, cm, wl, dev, m, world, NULL, resume, resume_step);
    struct backoff b;
    backoff_reset(&b);
    while (ctl_running(c)) {
        if (ctl_iterate(c))
            backoff_reset(&b);
        else
            backoff_sleep(&b);
    }
    int stopped = ctl_stopped_by(c), failed = c->failed;
    ctl_close(c);
    ctl_destroy(c);
    return failed ? LIBRA_EXIT_FAILED : stopped ? LIBRA_EXIT_CANCELLED : 0;
}
