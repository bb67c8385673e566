/*
 * The rollout-cluster simulator's event loop (include/libra/rollout_sim.h): the
 * controller's trajectory bookkeeping (launch, dispatch, result) over emulated
 * engines in virtual time. Mirrors src/control/controller.c's emulated path; a
 * change to what the controller folds into a trajectory belongs in both.
 */
#include "libra/rollout_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libra/iqueue.h"
#include "libra/log.h"

/* ---- setup ---- */

static int check_config(const struct rsim_config *c, char *err, size_t errlen)
{
    if (!c->cm || !c->wl || !c->sched || !c->rollout) {
        snprintf(err, errlen, "rollout_sim: cost model, workload, sched and rollout configs are "
                              "all required");
        return -1;
    }
    const struct rollout_config *ro = c->rollout;
    if (ro->n_samples < 1 || ro->max_turns < 1 || ro->max_tokens_per_turn < 1 ||
        ro->max_tokens < 2) {
        snprintf(err, errlen, "rollout_sim: rollout n_samples %d, max_turns %d, "
                              "max_tokens_per_turn %d, max_tokens %d (need >= 1, 1, 1, 2)",
                 ro->n_samples, ro->max_turns, ro->max_tokens_per_turn, ro->max_tokens);
        return -1;
    }
    if (c->n_inst < 1 || c->n_inst > CFG_MAX_TP) {
        snprintf(err, errlen, "rollout_sim: %d instances (need 1 .. %d)", c->n_inst, CFG_MAX_TP);
        return -1;
    }
    for (int i = 0; i < c->n_inst; i++) {
        int tp = c->tp[i];
        if (tp != 1 && tp != 2 && tp != 4 && tp != 8) {
            snprintf(err, errlen, "rollout_sim: instance %d has TP %d (need 1, 2, 4 or 8)", i, tp);
            return -1;
        }
        if (cost_kv_capacity_tokens(c->cm, tp) <= 0) {
            snprintf(err, errlen, "rollout_sim: instance %d: model %s does not fit TP %d on %s "
                                  "(no KV capacity left; use a larger TP)",
                     i, c->cm->model.name, tp, c->cm->hw.name);
            return -1;
        }
    }
    if (c->max_batch < 0 || !(c->tick_s >= 0) || !isfinite(c->tick_s)) {
        snprintf(err, errlen, "rollout_sim: max_batch %d, tick_s %g (need >= 0, finite >= 0)",
                 c->max_batch, c->tick_s);
        return -1;
    }
    return 0;
}

int rsim_init(struct rsim *r, const struct rsim_config *c, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (check_config(c, err, errlen)) return -1;
    r->cfg = *c;
    if (r->cfg.max_batch == 0) r->cfg.max_batch = RSIM_DEFAULT_MAX_BATCH;
    if (r->cfg.tick_s == 0) r->cfg.tick_s = RSIM_DEFAULT_TICK_S;
    for (int k = 0; k < c->wl->n_tools; k++) r->tool_names[k] = c->wl->tools[k].name;
    cost_rates(c->cm, &r->rates);
    if (sched_init(&r->sched, c->sched, &r->rates, r->tool_names, c->wl->n_tools, err, errlen))
        return -1;
    int n = c->n_inst;
    r->eng = xcalloc((size_t)n, sizeof *r->eng);
    r->inst = xcalloc((size_t)n, sizeof *r->inst);
    r->next_ev = xcalloc((size_t)n, sizeof *r->next_ev);
    r->dirty = xcalloc((size_t)n, sizeof *r->dirty);
    struct engine_config ec = {.max_turns = c->rollout->max_turns,
                               .max_tokens = c->rollout->max_tokens,
                               .max_batch = r->cfg.max_batch,
                               .seed = c->seed};
    iq_config_from_sched(&ec.queue, c->sched);
    for (int i = 0; i < n; i++) {
        ec.tp = c->tp[i];
        ec.leader = i; /* results name their instance by index */
        engine_init(&r->eng[i], &ec, c->cm, c->wl);
        engine_set_version(&r->eng[i], 0, 0);
        r->inst[i] = (struct sched_instance){.leader = i,
                                             .tp = c->tp[i],
                                             .capacity = r->eng[i].capacity,
                                             .queued = -1,
                                             .running = -1,
                                             .kv_frac = -1};
        r->dirty[i] = 1;
    }
    return 0;
}

void rsim_free(struct rsim *r)
{
    if (!r) return;
    if (r->eng)
        for (int i = 0; i < r->cfg.n_inst; i++) engine_free(&r->eng[i]);
    if (r->eng) sched_free(&r->sched);
    free(r->eng);
    free(r->inst);
    free(r->next_ev);
    free(r->dirty);
    free(r->traj);
    free(r->queue);
    free(r->batch);
    free(r->held);
    free(r->done);
    free(r->res);
    memset(r, 0, sizeof *r);
}

/* ---- trajectories ---- */

static void queue_push(struct rsim *r, int64_t id)
{
    XGROW(r->queue, r->q_cap, r->q_len + 1);
    r->queue[r->q_len++] = id;
}

static void finish_traj(struct rsim *r, struct rsim_traj *t)
{
    sched_finish(&r->sched, t->id, t->gen_tokens, 1);
    t->state = RSIM_DONE;
    t->t_finish = r->now;
    r->in_flight--;
    r->stats.finished++;
    XGROW(r->done, r->cap_done, r->n_done + 1);
    r->done[r->n_done++] = t->id;
}

int64_t rsim_launch_group(struct rsim *r, int step)
{
    const struct rollout_config *ro = r->cfg.rollout;
    int64_t pid = r->next_prompt++;
    int ptok = workload_prompt_tokens(r->cfg.wl, r->cfg.seed, pid);
    if (ptok > ro->max_tokens - 1) ptok = ro->max_tokens - 1;
    int64_t g = r->n_group++;
    XGROW(r->traj, r->cap_traj, r->n_traj + (size_t)ro->n_samples);
    for (int s = 0; s < ro->n_samples; s++) {
        int64_t id = (int64_t)r->n_traj++;
        r->traj[id] = (struct rsim_traj){.id = id,
                                         .prompt_id = pid,
                                         .group = g,
                                         .sample = s,
                                         .step = step,
                                         .state = RSIM_QUEUED,
                                         .prompt_tokens = ptok,
                                         .ctx_tokens = ptok,
                                         .inst = -1,
                                         .t_launch = r->now,
                                         .t_finish = -1};
        queue_push(r, id);
        r->in_flight++;
        r->stats.launched++;
    }
    return g;
}

/* ---- results ---- */

/* The instance's report, as the first result of a batch carries it. */
static void report(struct rsim *r, int i)
{
    struct sched_instance *in = &r->inst[i];
    engine_queue_stats(&r->eng[i], &in->queued, &in->running, &in->kv_frac);
}

static void apply_result(struct rsim *r, int i, const struct wire_turn_result *res)
{
    struct rsim_traj *t = res->traj_id >= 0 && (size_t)res->traj_id < r->n_traj
                              ? &r->traj[res->traj_id] : NULL;
    if (!t || t->state != RSIM_RUNNING || t->inst != i || t->turn != res->turn)
        FATAL("rollout_sim: unexpected turn result: trajectory %lld turn %d from instance %d",
              (long long)res->traj_id, res->turn, i);
    if (res->partial)
        FATAL("rollout_sim: partial turn result for trajectory %lld (hand-backs are not "
              "simulated)", (long long)t->id);
    struct sched_instance *in = &r->inst[i];
    in->load -= t->dispatched_load;
    in->n_turns--;
    r->stats.results++;
    t->gen_tokens += res->gen_tokens;
    t->ctx_tokens += res->gen_tokens;
    if (res->final) {
        finish_traj(r, t);
        return;
    }
    t->tool_tokens += res->payload_tokens;
    t->ctx_tokens += res->payload_tokens;
    t->last_failed = res->tool_status == TOOL_FAILURE || res->tool_status == TOOL_TIMEOUT;
    t->n_failures += t->last_failed;
    t->last_large = res->payload_tokens >= r->cfg.wl->large_payload;
    sched_tool_return(&r->sched, t->id, res->tool, res->tool_status, res->payload_tokens,
                      t->gen_tokens);
    t->turn++;
    const struct rollout_config *ro = r->cfg.rollout;
    if (t->turn >= ro->max_turns || t->ctx_tokens >= ro->max_tokens) {
        finish_traj(r, t);
        return;
    }
    t->state = RSIM_QUEUED;
    queue_push(r, t->id);
}

/* Runs engine i up to v and applies what it emitted (in its order). */
static void advance_engine(struct rsim *r, int i, double v)
{
    r->n_res = 0;
    int n = engine_advance(&r->eng[i], v, &r->res, &r->n_res, &r->cap_res);
    r->dirty[i] = 1;
    if (n == 0) return;
    report(r, i);
    for (int k = 0; k < r->n_res; k++) apply_result(r, i, &r->res[k]);
}

/* ---- dispatch ---- */

/* Routes one queued turn; returns 1 if the scheduler holds it. */
static int dispatch(struct rsim *r, struct rsim_traj *t)
{
    const struct rollout_config *ro = r->cfg.rollout;
    int left = ro->max_tokens - t->ctx_tokens;
    int budget = left < ro->max_tokens_per_turn ? left : ro->max_tokens_per_turn;
    if (budget <= 0) {
        finish_traj(r, t);
        return 0;
    }
    struct sched_turn st = {.traj_id = t->id,
                            .prompt_id = t->prompt_id,
                            .turn = t->turn,
                            .ctx_tokens = t->ctx_tokens,
                            .gen_tokens = t->gen_tokens,
                            .budget = budget,
                            .prev = t->inst,
                            .sample = t->sample,
                            .n_samples = ro->n_samples,
                            .eval = 0};
    struct sched_decision d;
    sched_route(&r->sched, &st, r->inst, r->cfg.n_inst, r->now, &d);
    if (d.instance < 0) {
        t->held = 1;
        r->stats.holds++;
        return 1;
    }
    if (d.instance >= r->cfg.n_inst)
        FATAL("rollout_sim: scheduler chose instance %d of %d for trajectory %lld", d.instance,
              r->cfg.n_inst, (long long)t->id);
    int i = d.instance;
    if (t->inst >= 0 && t->inst != i) {
        t->migrations++;
        r->stats.migrations++;
    }
    struct wire_turn_req req = {.traj_id = t->id,
                                .prompt_id = t->prompt_id,
                                .turn = t->turn,
                                .ctx_tokens = t->ctx_tokens,
                                .budget = budget,
                                .n_failures = t->n_failures,
                                .last_failed = t->last_failed,
                                .last_large = t->last_large,
                                .step_start = t->step,
                                .est_remaining = d.est_remaining};
    t->held = 0;
    t->state = RSIM_RUNNING;
    t->inst = i;
    t->dispatched_load = t->ctx_tokens + budget;
    r->inst[i].load += t->dispatched_load;
    r->inst[i].n_turns++;
    r->stats.dispatches++;
    /* The turn arrives at now: bring the engine there first (what it emits on the
     * way is applied; its trajectories queue behind this round). */
    advance_engine(r, i, r->now);
    engine_submit(&r->eng[i], &req);
    return 0;
}

/* Routes every queued turn at r->now, the turns queued meanwhile included; a held
 * turn is asked once per stop and stays queued, in front, in its order. Returns the
 * number held. */
static int route_queued(struct rsim *r)
{
    size_t n_held = 0;
    while (r->q_len > 0) {
        /* Take the queue as this pass's batch: dispatching may queue more turns. */
        XGROW(r->batch, r->b_cap, r->q_len);
        size_t n = r->q_len;
        memcpy(r->batch, r->queue, n * sizeof *r->batch);
        r->q_len = 0;
        for (size_t k = 0; k < n; k++) {
            struct rsim_traj *t = &r->traj[r->batch[k]];
            if (dispatch(r, t)) {
                XGROW(r->held, r->h_cap, n_held + 1);
                r->held[n_held++] = t->id;
            }
        }
    }
    if (n_held > 0) {
        XGROW(r->queue, r->q_cap, n_held);
        memcpy(r->queue, r->held, n_held * sizeof *r->queue);
    }
    r->q_len = n_held;
    return (int)n_held;
}

/* ---- the loop ---- */

int rsim_run_until(struct rsim *r, double until, char *err, size_t errlen)
{
    int n = r->cfg.n_inst;
    double tick = r->cfg.tick_s;
    for (;;) {
        int held = route_queued(r);
        if (r->in_flight == 0) {
            if (isfinite(until) && r->now < until) r->now = until;
            return 0;
        }
        if (r->now >= until) return 0;
        double first = INFINITY;
        for (int i = 0; i < n; i++) {
            if (r->dirty[i]) r->next_ev[i] = engine_next_event(&r->eng[i]);
            r->dirty[i] = 0;
            if (r->next_ev[i] < first) first = r->next_ev[i];
        }
        /* At least one tick on (progress, and engines decode in macro-steps between
         * stops); exactly one while the scheduler holds turns, so it is asked again. */
        double v = first > r->now + tick ? first : r->now + tick;
        if (held > 0) v = r->now + tick;
        if (v > until) v = until;
        if (!isfinite(v)) {
            snprintf(err, errlen, "rollout_sim: stalled at %.6f s: %lld trajectories in flight, "
                                  "%zu queued, but no instance has anything to do",
                     r->now, (long long)r->in_flight, r->q_len);
            return -1;
        }
        r->now = v;
        r->stats.iterations++;
        for (int i = 0; i < n; i++)
            if (r->next_ev[i] <= v) advance_engine(r, i, v);
    }
}

int64_t rsim_take_finished(struct rsim *r, const int64_t **ids)
{
    *ids = r->done;
    int64_t n = (int64_t)r->n_done;
    r->n_done = 0;
    return n;
}

int64_t rsim_decode_tokens(const struct rsim *r)
{
    int64_t n = 0;
    for (int i = 0; i < r->cfg.n_inst; i++) n += r->eng[i].stat_decode_tokens;
    return n;
}
