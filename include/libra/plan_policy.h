/*
 * When the planner runs and whether its answer is applied
 * (reference/planner.md §2.4 and §2.6, with the §6.5 fix).
 *
 * plan_trigger: checked in this order (first match wins):
 *   step < warmup                           -> PT_WARMUP (no plan)
 *   step - last_plan_step < cooldown        -> PT_COOLDOWN (no plan)
 *   step % interval == 0                    -> PT_INTERVAL
 *   queue_pressure >= queue_threshold       -> PT_QUEUE_PRESSURE
 *   active_pressure >= active_threshold     -> PT_ACTIVE_PRESSURE
 *   rejected - rejected_seen >= rejected_delta -> PT_REJECTED_DELTA
 *   train_s > 0 and rollout_s / train_s >= imbalance -> PT_IMBALANCE
 *   otherwise                               -> PT_SKIP (no plan)
 * and a firing trigger with history < min_history becomes PT_INSUFFICIENT_HISTORY.
 * The rejected-count baseline is consumed by every evaluation (so one burst fires
 * once). The thresholds are the reference's defaults.
 *
 * plan_gate: a new plan pays off over the horizon it will run, H steps (until the
 * next planning point, or the end of the run):
 *     net = (T_cur - T_new) H - C_transition
 * and is applied only if net > 0 and (T_cur - T_new) / T_cur >= min_gain_ratio. The
 * reference compared a per-step gain with a one-off cost (100 -> 90 s/step at 15 s
 * cost was rejected; over a 5-step horizon it gains 50 s for 15 s).
 */
#ifndef LIBRA_PLAN_POLICY_H
#define LIBRA_PLAN_POLICY_H

#include <stdint.h>

enum plan_trigger_kind {
    PT_WARMUP = 0,
    PT_COOLDOWN,
    PT_SKIP,
    PT_INSUFFICIENT_HISTORY,
    PT_INTERVAL,
    PT_QUEUE_PRESSURE,
    PT_ACTIVE_PRESSURE,
    PT_REJECTED_DELTA,
    PT_IMBALANCE,
    PT_N_KINDS
};

struct trigger_config {
    int interval, warmup, cooldown, min_history;
    double queue_threshold;  /* 0.75 */
    double active_threshold; /* 0.85 */
    int rejected_delta;      /* 8 */
    double imbalance;        /* 1.25 */
};

/* What the controller measured over the last step. */
struct runtime_metrics {
    double queue_pressure;   /* turns waiting / max turns in flight */
    double active_pressure;  /* trajectories in flight / the launch cap */
    int64_t rejected;        /* cumulative routes that found no instance with room */
    double train_s;          /* last step's training time (0 = none yet) */
    double rollout_s;        /* time to produce one batch at the last step's rate */
};

struct trigger_state {
    int last_plan_step;      /* -1 before the first plan */
    int64_t rejected_seen;
};

void trigger_init(struct trigger_state *s);
/* The trigger at `step` with `history` finished trajectories; m may be NULL. Sets
 * last_plan_step when the result plans (plan_trigger_fires). */
enum plan_trigger_kind plan_trigger(const struct trigger_config *cfg, struct trigger_state *s,
                                    int step, int history, const struct runtime_metrics *m);
/* PT_INTERVAL .. PT_IMBALANCE */
int plan_trigger_fires(enum plan_trigger_kind k);
const char *plan_trigger_name(enum plan_trigger_kind k);

enum gate_verdict { GATE_APPLY = 0, GATE_SAME_PLAN, GATE_NO_GAIN, GATE_BELOW_RATIO, GATE_NOT_AMORTISED };

struct gate_result {
    enum gate_verdict verdict;
    double gain_s;       /* per step: t_cur - t_new */
    double net_s;        /* gain_s x horizon - transition_s */
    double ratio;        /* gain_s / t_cur */
};

/* same: the candidate equals the current plan. */
enum gate_verdict plan_gate(double t_cur, double t_new, int horizon, double transition_s,
                            double min_gain_ratio, int same, struct gate_result *out);
const char *plan_gate_name(enum gate_verdict v);

#endif
