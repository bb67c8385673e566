/*
 * The planner: rank 0 asks it for the plan of every planning epoch.
 *
 *   plan.mode = "static"    one fixed plan;
 *   plan.mode = "schedule"  epoch e uses plan.schedule[e mod n] (scripted tests);
 *   plan.mode = "grp"       the global resource planner (docs/planner.md): a
 *                           preflight plan before step 0 from a start-up length
 *                           profile sampled from the workload, then, at the end of
 *                           every step, triggers -> search -> calibrated cost model
 *                           -> transition gate.
 *
 * The planner decides the base plan (training group, rollout instances, idle GPUs);
 * the elastic hybrid pool (ctl_pool.c) lends base-plan instances to training on top
 * of it between planning passes.
 */
#ifndef LIBRA_PLANNER_H
#define LIBRA_PLANNER_H

#include <stddef.h>

#include "libra/calib.h"
#include "libra/config.h"
#include "libra/len_profile.h"
#include "libra/plan.h"
#include "libra/plan_policy.h"
#include "libra/plan_search.h"
#include "libra/workload.h"

/* One planning pass (grp), as /planner records it. Times are emulated seconds per
 * step, calibrated (the raw model time x the term's scale). */
struct planner_pass {
    int step;
    enum plan_trigger_kind trigger;
    enum gate_verdict verdict;
    int searched;               /* the search ran (the trigger fired) */
    struct plan_choice cand;    /* the best candidate (valid when searched) */
    double cur_train_s, cur_rollout_s, cur_step_s; /* the current plan, predicted */
    double meas_train_s, meas_rollout_s;           /* measured over the last step */
    double scale_train, scale_rollout;             /* calibration after this step */
    double gain_s, transition_s, net_s;
    int horizon;                /* steps the candidate would run */
    double solve_s;             /* wall seconds of the search */
    int history;                /* finished trajectories in the profile's source */
};

struct planner {
    const struct libra_config *cfg;
    const struct cost_model *cm;
    const struct workload *wl;
    int world, grp;
    struct len_history hist;    /* finished trajectories (grp) */
    struct len_profile startup; /* the preflight profile, used until the history is enough */
    struct len_profile prof;    /* the profile of the current pass */
    struct calib cal;
    struct trigger_state trig;
    struct plan_choice cur;     /* the shape of the base plan in force */
    int have_cur;
    /* The measured rollout and training times since the live plan last changed, the
     * newest PLANNER_CYCLE of them: under the coupling a step's time alternates over
     * the pipeline's overlap (one step waits for the longest trajectory, the next
     * finds its batch complete), so the rollout calibration compares the model with
     * their mean over a whole cycle, not with one step. */
#define PLANNER_CYCLE 8
    double meas_roll[PLANNER_CYCLE], meas_train[PLANNER_CYCLE];
    int n_meas;
    int meas_plan[PC_N_TP + 2]; /* the live plan they were measured on */
};

void planner_init(struct planner *pl, const struct libra_config *cfg, const struct cost_model *cm,
                  const struct workload *wl, int world);
void planner_free(struct planner *pl);
/* static / schedule: the plan of epoch (starting at step). grp: only epoch 0, the
 * preflight plan; a plan that fits nowhere is an error naming the binding constraint.
 * 0, or -1 with a message. */
int planner_next(struct planner *pl, int epoch, int step, struct plan *out, char *err,
                 size_t errlen);
/* The search over n_gpus worker GPUs for the batch prof with the configured limits,
 * the cost model's times scaled by the calibration when calibrated (0 or -1 as
 * plan_search). Also what `libra --bench-planner` times. */
int planner_search(const struct planner *pl, const struct len_profile *prof, int n_gpus,
                   int calibrated, struct plan_choice *out);
/* grp: a finished trajectory for the history. */
void planner_record(struct planner *pl, const struct traj_sample *s);

/* What the controller measured and knows at the end of a step (grp). */
struct planner_inputs {
    struct runtime_metrics rt;  /* train_s / rollout_s: measured, emulated seconds */
    int n_hybrid_active;        /* lent replicas that contributed to the step */
    double batch_tokens, batch_sum_len_sq, batch_max_len; /* the step's batch */
    const double *kv_by_leader; /* (world) KV tokens resident in the instance each rank leads */
    const struct plan *live;    /* the plan serving now (base + lent instances); NULL = base */
};

/* grp, at the end of step `step` (1-based, steps done). Calibrates, runs the trigger
 * and, if it fires, the search and the gate. Returns 1 with *out the new base plan
 * (epoch, step and reason filled) when it should be applied, else 0. pass is always
 * filled. cur is the base plan in force. */
int planner_step(struct planner *pl, int step, int epoch, const struct plan *cur,
                 const struct planner_inputs *in, struct plan *out, struct planner_pass *pass);

#endif
