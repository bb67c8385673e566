/*
 * The planner (include/libra/planner.h): static and scripted plans, and the global
 * resource planner (plan.mode = "grp") that ties the cost model (plan_cost.h), the
 * search (plan_search.h), the calibration (calib.h), the triggers and the gate
 * (plan_policy.h) together. docs/planner.md describes the whole loop.
 *
 * Every time here is emulated seconds per training step. The evaluators the search
 * calls return calibrated times: scale_train x pc_train_step, and
 * scale_rollout x (pc_rollout + the weight-sync stall the rollout ranks take per
 * step), both for one batch drawn from the length profile.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "libra/planner.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "libra/log.h"
#include "libra/plan_cost.h"

void planner_init(struct planner *pl, const struct libra_config *cfg, const struct cost_model *cm,
                  const struct workload *wl, int world)
{
    memset(pl, 0, sizeof *pl);
    pl->cfg = cfg;
    pl->cm = cm;
    pl->wl = wl;
    pl->world = world;
    pl->grp = strcmp(cfg->plan.mode, "grp") == 0;
    if (!pl->grp) return;
    const struct plan_config *p = &cfg->plan;
    lh_init(&pl->hist, p->history);
    lp_init(&pl->startup);
    lp_init(&pl->prof);
    struct calib_config cc = {p->calib_alpha, p->calib_alpha_fast, p->calib_window, p->calib_sigma,
                              0.05, 20.0};
    calib_init(&pl->cal, &cc);
    trigger_init(&pl->trig);
}

void planner_free(struct planner *pl)
{
    if (!pl->grp) return;
    lh_free(&pl->hist);
    lp_free(&pl->startup);
    lp_free(&pl->prof);
}

void planner_record(struct planner *pl, const struct traj_sample *s)
{
    if (pl->grp) lh_add(&pl->hist, s);
}

/* ---- the evaluators ---- */

struct eval_ctx {
    const struct planner *pl;
    const struct len_profile *prof;
    double tokens, sum_sq, max_len;
    double scale_train, scale_rollout, sync_s;
    struct pc_rollout_prep *prep; /* the profile's rollout costs, computed once */
};

static double eval_train(void *arg, const struct train_shape *s, char *why, size_t n)
{
    const struct eval_ctx *e = arg;
    struct train_est est;
    double t = pc_train_step(e->pl->cm, s, 0, e->prof->n, e->tokens, e->sum_sq, e->max_len, &est);
    if (est.oom)
        snprintf(why, n, "needs %.1f GB per GPU of %.1f GB", est.mem_bytes / 1e9,
                 est.mem_limit / 1e9);
    return isfinite(t) ? e->scale_train * t : INFINITY;
}

/* The calibrated rollout time of a raw makespan t, with the reason when infinite. */
static double rollout_scaled(const struct eval_ctx *e, double t, const struct rollout_est *est,
                             char *why, size_t n)
{
    if (est->oom)
        snprintf(why, n, "a %lld-token trajectory fits no instance's KV cache",
                 (long long)est->oom_tokens);
    else if (!isfinite(t))
        snprintf(why, n, "no rollout instance");
    return isfinite(t) ? e->scale_rollout * (t + e->sync_s) : INFINITY;
}

static double eval_rollout(void *arg, const int counts[PC_N_TP], char *why, size_t n)
{
    const struct eval_ctx *e = arg;
    struct rollout_est est;
    double t = pc_rollout_prepared(e->prep, counts, &est);
    return rollout_scaled(e, t, &est, why, n);
}

/* eval_rollout with a cutoff (plan_eval.rollout_cut_s). The cutoff is on the
 * calibrated time, the placement's on the raw one: the raw cutoff is lifted by a
 * relative 1e-9 so that a raw partial makespan above it is, after scaling and adding
 * the sync, above the calibrated cutoff whatever the rounding (which is ~1e-16). */
static double eval_rollout_cut(void *arg, const int counts[PC_N_TP], double cutoff, char *why,
                               size_t n)
{
    const struct eval_ctx *e = arg;
    double raw = cutoff / e->scale_rollout - e->sync_s;
    if (!(e->scale_rollout > 0) || !isfinite(raw)) return eval_rollout(arg, counts, why, n);
    raw += 1e-9 * (fabs(raw) + e->sync_s);
    struct rollout_est est;
    double t = pc_rollout_prepared_cutoff(e->prep, counts, raw, &est);
    return rollout_scaled(e, t, &est, why, n); /* a cut t is finite, > raw: > cutoff */
}

/* The pipeline's coupling (plan_search.h): a step's batch was launched when the
 * training o - 1 steps earlier ended, so over o steps the longest trajectory's own
 * chain, the weight sync and the training run one after another. The rollout side's
 * part, chain + sync / o (raw cost model), and the overlap o. */
static double chain_raw(const struct eval_ctx *e, const int counts[PC_N_TP], double *o)
{
    *o = isfinite(e->prof->overlap) && e->prof->overlap > 1 ? e->prof->overlap : 1;
    struct rollout_est est;
    double t = pc_rollout_prepared(e->prep, counts, &est);
    return isfinite(t) ? est.chain_s + e->sync_s / *o : INFINITY;
}

/* The rollout part scaled by the rollout calibration (fitted to it: calibrate), the
 * training time as given (already calibrated). */
static double eval_coupled(void *arg, const int counts[PC_N_TP], double train_s)
{
    const struct eval_ctx *e = arg;
    double o, c = chain_raw(e, counts, &o);
    return e->scale_rollout * c + train_s / o;
}

static double eval_coupled_lb(void *arg, double train_s)
{
    const struct eval_ctx *e = arg;
    double o = isfinite(e->prof->overlap) && e->prof->overlap > 1 ? e->prof->overlap : 1;
    double chain = pc_chain_lower_bound_prepared(e->prep, e->pl->cfg->plan.max_rollout_tp);
    return e->scale_rollout * (chain + e->sync_s / o) + train_s / o;
}

static double eval_rollout_lb(void *arg, int n_gpus)
{
    const struct eval_ctx *e = arg;
    int max_tp = e->pl->cfg->plan.max_rollout_tp;
    return e->scale_rollout * (pc_rollout_lower_bound_prepared(e->prep, n_gpus, max_tp) + e->sync_s);
}

static void eval_setup(const struct planner *pl, const struct len_profile *prof, int calibrated,
                       struct eval_ctx *e)
{
    *e = (struct eval_ctx){.pl = pl, .prof = prof, .scale_train = 1, .scale_rollout = 1};
    lp_token_sums(prof, &e->tokens, &e->sum_sq);
    e->max_len = (double)lp_max_tokens(prof);
    e->sync_s = cost_weight_sync_s(pl->cm) / pl->cfg->train.sync_interval;
    if (calibrated) {
        e->scale_train = calib_scale(&pl->cal, CALIB_TRAIN);
        e->scale_rollout = calib_scale(&pl->cal, CALIB_ROLLOUT);
    }
    e->prep = pc_rollout_prepare(pl->cm, prof);
}

static void eval_done(struct eval_ctx *e)
{
    pc_rollout_prep_free(e->prep);
    e->prep = NULL;
}

/* plan.solve_threads, or for 0 the CPUs this process may run on (its affinity mask:
 * an MPI launcher that binds rank 0 to one core gets one thread), at most 8. */
static int solve_threads(int configured)
{
    if (configured > 0) return configured;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    int n = CPU_COUNT(&set);
    return n < 1 ? 1 : n > 8 ? 8 : n;
}

static void limits_from_config(const struct planner *pl, struct plan_limits *lim)
{
    const struct plan_config *p = &pl->cfg->plan;
    int gpn = pl->cm->hw.gpus_per_node > 0 ? pl->cm->hw.gpus_per_node : 8;
    *lim = (struct plan_limits){.n_gpus = pl->world - 1,
                                .gpus_per_node = gpn,
                                .min_rollout_tp = p->min_rollout_tp,
                                .max_rollout_tp = p->max_rollout_tp,
                                .max_train_tp = p->max_train_tp,
                                .max_train_pp = p->max_train_pp,
                                .max_micro = p->max_micro,
                                .min_train = p->min_train,
                                .min_rollout = p->min_rollout,
                                .granularity = p->granularity,
                                .batch = pl->cfg->train.batch_size,
                                .max_layouts = p->max_layouts,
                                .tolerance = p->solve_tolerance,
                                .threads = solve_threads(p->solve_threads)};
}

/* The plan of a search result, placed by plan_build (rollout instances largest
 * first, then training, then the idle remainder). */
static int plan_of_choice(const struct planner *pl, const struct plan_choice *ch, int epoch,
                          int step, const char *reason, struct plan *out, char *err, size_t errlen)
{
    struct plan_spec spec = {.n_train = ch->n_train,
                             .train_tp = ch->train.tp,
                             .train_pp = ch->train.pp,
                             .micro = ch->train.micro};
    for (int k = PC_N_TP - 1; k >= 0; k--)
        for (int i = 0; i < ch->counts[k]; i++) {
            if (spec.n_tp == CFG_MAX_TP) {
                snprintf(err, errlen, "the plan has more than %d rollout instances (the most a "
                                      "plan holds); raise plan.min_rollout_tp", CFG_MAX_TP);
                return -1;
            }
            spec.rollout_tp[spec.n_tp++] = pc_tp_of(k);
        }
    return plan_build(&spec, pl->world, epoch, step, reason, out, err, errlen);
}

/* Instance counts per TP class of plan p's rollout instances (lent ones excluded). */
static void live_counts(const struct plan *p, int counts[PC_N_TP])
{
    memset(counts, 0, PC_N_TP * sizeof *counts);
    for (int i = 0; i < p->n_instances; i++)
        for (int k = 0; k < PC_N_TP; k++)
            if (pc_tp_of(k) == p->inst[i].tp) counts[k]++;
}

/* The choice describing plan p (its base layout, no lent instances). */
static void choice_of_plan(const struct plan *p, struct plan_choice *ch)
{
    memset(ch, 0, sizeof *ch);
    ch->n_train = p->n_train;
    int r = plan_replica_size(p);
    ch->train = (struct train_shape){p->train_tp, p->train_pp, p->n_train / r, p->micro};
    live_counts(p, ch->counts);
    ch->n_rollout = p->n_rollout_ranks;
    ch->n_idle = p->n_idle;
}

static int same_choice(const struct plan_choice *a, const struct plan_choice *b)
{
    return a->n_train == b->n_train && a->train.tp == b->train.tp && a->train.pp == b->train.pp &&
           a->train.micro == b->train.micro && memcmp(a->counts, b->counts, sizeof a->counts) == 0;
}

int planner_search(const struct planner *pl, const struct len_profile *prof, int n_gpus,
                   int calibrated, struct plan_choice *out)
{
    struct plan_limits lim;
    limits_from_config(pl, &lim);
    lim.n_gpus = n_gpus;
    struct eval_ctx e;
    eval_setup(pl, prof, calibrated, &e);
    struct plan_eval ev = {&e, eval_train, eval_rollout, eval_rollout_lb, eval_coupled,
                           eval_coupled_lb, eval_rollout_cut};
    int rc = plan_search(&lim, &ev, out);
    eval_done(&e);
    return rc;
}

static int preflight(struct planner *pl, int step, struct plan *out, char *err, size_t errlen)
{
    const struct libra_config *cfg = pl->cfg;
    /* the start-up profile: 4 batches simulated from the workload at step 0, resampled
     * to one batch like the history is */
    int n = 4 * cfg->train.batch_size;
    struct len_history tmp;
    lh_init(&tmp, n);
    lp_from_workload(&pl->startup, pl->wl, &cfg->rollout, cfg->run.seed ^ 0x7072656674ULL, 0, 0,
                     n);
    for (int i = 0; i < pl->startup.n; i++) lh_add(&tmp, &pl->startup.s[i]);
    lp_from_history(&pl->startup, &tmp, cfg->train.batch_size);
    lh_free(&tmp);
    pl->startup.overlap = cfg->train.max_staleness + 1;

    struct plan_choice ch;
    if (planner_search(pl, &pl->startup, pl->world - 1, 0, &ch)) {
        snprintf(err, errlen, "no feasible plan for %d GPUs: %s", pl->world - 1, ch.why);
        return -1;
    }
    char reason[64];
    snprintf(reason, sizeof reason, "preflight");
    if (plan_of_choice(pl, &ch, 0, step, reason, out, err, errlen)) return -1;
    pl->cur = ch;
    pl->have_cur = 1;
    pl->trig.last_plan_step = step;
    return 0;
}

int planner_next(struct planner *pl, int epoch, int step, struct plan *out, char *err,
                 size_t errlen)
{
    const struct plan_config *c = &pl->cfg->plan;
    if (pl->grp) {
        if (epoch == 0) return preflight(pl, step, out, err, errlen);
        snprintf(err, errlen, "plan.mode = \"grp\" plans at the end of steps (planner_step)");
        return -1;
    }
    char reason[64];
    const struct plan_spec *spec = &c->fixed;
    if (strcmp(c->mode, "schedule") == 0) {
        int i = epoch % c->n_schedule;
        spec = &c->schedule[i];
        snprintf(reason, sizeof reason, "schedule[%d]", i);
    } else {
        snprintf(reason, sizeof reason, "static");
    }
    return plan_build(spec, pl->world, epoch, step, reason, out, err, errlen);
}

/* ---- the pass at the end of a step ---- */

static void calibrate(struct planner *pl, const struct plan *live, const struct planner_inputs *in,
                      struct eval_ctx *raw)
{
    if (!pl->have_cur) return;
    const struct runtime_metrics *m = &in->rt;
    if (m->train_s > 0 && in->batch_tokens > 0) {
        struct train_est est;
        int r = plan_replica_size(live);
        struct train_shape s = {live->train_tp, live->train_pp, live->n_train / r, live->micro};
        double pred = pc_train_step(pl->cm, &s, in->n_hybrid_active, pl->cfg->train.batch_size,
                                    in->batch_tokens, in->batch_sum_len_sq, in->batch_max_len, &est);
        calib_update(&pl->cal, CALIB_TRAIN, pred, m->train_s);
    }
    if (m->rollout_s > 0) {
        int counts[PC_N_TP];
        live_counts(live, counts);
        struct rollout_est est;
        double pred = pc_rollout_prepared(raw->prep, counts, &est) + raw->sync_s;
        /* The cycle: the mean of the last o measurements on this live plan. */
        int key[PC_N_TP + 2];
        memcpy(key, counts, PC_N_TP * sizeof *key);
        key[PC_N_TP] = live->n_train;
        key[PC_N_TP + 1] = live->n_hybrid;
        if (memcmp(key, pl->meas_plan, sizeof key) != 0) {
            memcpy(pl->meas_plan, key, sizeof key);
            pl->n_meas = 0;
        }
        pl->meas_roll[pl->n_meas % PLANNER_CYCLE] = m->rollout_s;
        pl->meas_train[pl->n_meas % PLANNER_CYCLE] = m->train_s > 0 ? m->train_s : 0;
        pl->n_meas++;
        double o, chain = chain_raw(raw, counts, &o);
        int k = (int)fmin(PLANNER_CYCLE, ceil(o));
        if (pl->n_meas < k) return; /* not a whole cycle on this plan yet */
        double roll = 0, train = 0;
        for (int i = 0; i < k; i++) {
            int at = (pl->n_meas - 1 - i) % PLANNER_CYCLE;
            roll += pl->meas_roll[at] / k;
            train += pl->meas_train[at] / k;
        }
        /* When the coupling binds (plan_search.h), the cycle's rollout time is the
         * chain plus the training that ran: the rollout scale is fitted to the chain
         * part, the training part taken off the measurement. */
        double tr = train / o;
        if (chain + tr > pred && roll > tr)
            calib_update(&pl->cal, CALIB_ROLLOUT, chain, roll - tr);
        else
            calib_update(&pl->cal, CALIB_ROLLOUT, pred, roll);
    }
}

/* The transition from plan a to plan b: who needs weights, what KV is lost. */
static void transition_of(const struct planner *pl, const struct plan *a, const struct plan *b,
                          const double *kv_by_leader, struct transition *t)
{
    *t = (struct transition){.dp_after = b->n_train / plan_replica_size(b),
                             .rollout_gpus_after = b->n_rollout_ranks,
                             .resplit_s = pl->cfg->plan.resplit_s};
    for (int r = 1; r < a->world; r++) {
        int ra = a->ranks[r].role, rb = b->ranks[r].role;
        if (rb == ROLE_ROLLOUT && !plan_instance_survives(a, b, r) && ra != ROLE_ROLLOUT)
            t->to_rollout++;
        if (rb == ROLE_TRAIN && ra != ROLE_TRAIN) t->to_train++;
    }
    for (int i = 0; i < a->n_instances; i++)
        if (plan_find_instance(b, a->inst[i].leader, a->inst[i].tp) < 0 && kv_by_leader)
            t->kv_lost_tokens += kv_by_leader[a->inst[i].leader];
}

int planner_step(struct planner *pl, int step, int epoch, const struct plan *cur,
                 const struct planner_inputs *in, struct plan *out, struct planner_pass *pass)
{
    const struct libra_config *cfg = pl->cfg;
    memset(pass, 0, sizeof *pass);
    pass->step = step;
    pass->meas_train_s = in->rt.train_s;
    pass->meas_rollout_s = in->rt.rollout_s;
    pass->history = pl->hist.n;

    int use_hist = pl->hist.n >= cfg->plan.min_history;
    if (use_hist) lp_from_history(&pl->prof, &pl->hist, cfg->train.batch_size);
    pl->prof.overlap = cfg->train.max_staleness + 1;
    const struct len_profile *prof = use_hist ? &pl->prof : &pl->startup;
    struct eval_ctx raw;
    eval_setup(pl, prof, 0, &raw);
    calibrate(pl, in->live ? in->live : cur, in, &raw);
    eval_done(&raw);
    pass->scale_train = calib_scale(&pl->cal, CALIB_TRAIN);
    pass->scale_rollout = calib_scale(&pl->cal, CALIB_ROLLOUT);

    struct trigger_config tc = {cfg->plan.interval,       cfg->plan.warmup,
                                cfg->plan.cooldown,       cfg->plan.min_history,
                                cfg->plan.queue_pressure, cfg->plan.active_pressure,
                                cfg->plan.rejected_delta, cfg->plan.imbalance};
    pass->trigger = plan_trigger(&tc, &pl->trig, step, pl->hist.n, &in->rt);
    pass->verdict = GATE_NO_GAIN;
    if (!plan_trigger_fires(pass->trigger)) return 0;

    struct eval_ctx e;
    eval_setup(pl, prof, 1, &e);
    double t0 = wall_time();
    int rc = planner_search(pl, prof, pl->world - 1, 1, &pass->cand);
    pass->solve_s = wall_time() - t0;
    pass->searched = 1;
    struct plan_choice now;
    choice_of_plan(cur, &now);
    char why[128];
    pass->cur_train_s = eval_train(&e, &now.train, why, sizeof why);
    pass->cur_rollout_s = eval_rollout(&e, now.counts, why, sizeof why);
    pass->cur_step_s = fmax(fmax(pass->cur_train_s, pass->cur_rollout_s),
                            eval_coupled(&e, now.counts, pass->cur_train_s));
    eval_done(&e);
    if (rc) {
        LOG_W("planner: step %d: no feasible candidate (%s); keeping the plan", step,
              pass->cand.why);
        return 0;
    }
    pass->horizon = cfg->plan.interval;
    if (cfg->run.steps - step < pass->horizon) pass->horizon = cfg->run.steps - step;

    char reason[64], err[256];
    snprintf(reason, sizeof reason, "grp:%s", plan_trigger_name(pass->trigger));
    int same = same_choice(&pass->cand, &now);
    if (!same) {
        if (plan_of_choice(pl, &pass->cand, epoch, step, reason, out, err, sizeof err)) {
            LOG_W("planner: step %d: %s; keeping the plan", step, err);
            return 0;
        }
        struct transition t;
        transition_of(pl, cur, out, in->kv_by_leader, &t);
        pass->transition_s = pc_transition_s(pl->cm, &t);
    }
    struct gate_result g;
    pass->verdict = plan_gate(pass->cur_step_s, pass->cand.step_s, pass->horizon,
                              pass->transition_s, cfg->plan.min_gain_ratio, same, &g);
    pass->gain_s = g.gain_s;
    pass->net_s = g.net_s;
    if (pass->verdict != GATE_APPLY) return 0;
    pl->cur = pass->cand;
    return 1;
}
