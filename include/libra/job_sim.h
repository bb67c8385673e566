/*
 * libra-sim's engine: the whole job in virtual time, in one process (DESIGN §10).
 *
 * Rank 0 is the real controller (controller.h: the same launch, dispatch,
 * scheduler, staleness-bounded batches, step rows, planner, elastic pool and metrics
 * code as `libra`), driven through a struct ctl_transport whose messages go to
 * simulated ranks instead of MPI:
 *   rollout leaders   the emulated engine (engine.h), advanced in virtual time;
 *   training ranks    the emulated worker's timing (worker.h: wt_read_share,
 *                     wt_share_compute_s, wt_reduce_s): the step ends when the core
 *                     replicas' slowest share plus the gradient reduction, and every
 *                     lent replica's share, are done;
 *   weight syncs      every engine pauses decode for cost_weight_sync_s;
 *   plans             dissolved instances hand their turns back, new ones start
 *                     without weights until the sync that follows every plan;
 *   pool joins        a lent rank is ready pc_join_fetch_s after its plan.
 *
 * Time. The loop runs the controller until it has nothing to do at the current
 * instant, then moves the clock to the next event: an engine's next decode
 * macro-step, tool return or admission (engine_next_event), a training step's end, a
 * join's end -- at least tick_s on when only engines are due (a controller that
 * polls that often; results are then applied in instance order), at most tick_s on
 * while the scheduler holds turns. The controller's clock reads emulated seconds /
 * device.time_scale, the wall seconds the MPI job would show, so both write the
 * same metrics in the same units.
 *
 * Determinism: nothing depends on the machine. The metrics file of a config and
 * world size is bitwise the same on every run (wall-clock measurements of rank 0's
 * own work -- routing decisions, re-splits, planner searches -- are recorded as 0).
 */
#ifndef LIBRA_JOB_SIM_H
#define LIBRA_JOB_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "libra/config.h"
#include "libra/cost.h"
#include "libra/metrics.h"
#include "libra/workload.h"

#define JOB_SIM_DEFAULT_TICK_S 0.01 /* emulated seconds */

struct job_sim_config {
    const struct libra_config *cfg; /* device.type emu */
    const struct cost_model *cm;
    const struct workload *wl;
    int world;                      /* ranks the job would have: 1 controller + GPUs */
    double tick_s;                  /* controller reaction time, emulated s; 0 = default */
};

struct job_sim_stats {
    int64_t events;          /* messages to and from rank 0 + engine advances + timers */
    int64_t messages_in, messages_out, engine_advances, timers;
    int64_t stops;           /* clock moves */
    double virtual_s;        /* emulated seconds simulated */
    double planner_solve_s;  /* wall seconds in planner searches */
    int planner_solves;
};

/* Runs the job, writing m. 0, or -1 with err when the simulation cannot progress
 * (a bug: something in flight and nothing due). */
int job_sim_run(const struct job_sim_config *c, struct metrics *m, struct job_sim_stats *st,
                char *err, size_t errlen);

#endif

/* ---- the oracle (libra-sim --oracle) ----
 * A clairvoyant bound, not a policy: for every step k it knows the batch in advance
 * -- batch_size trajectories the workload model draws at drift step k (lengths, turns,
 * tool outcomes and latencies) -- and takes the best split of all world - 1 GPUs for
 * exactly that batch (the planner's search over every training shape and rollout
 * layout, the cost model uncalibrated, no transition cost, the pipeline overlap of
 * max_staleness + 1): ideal routing to buckets and an ideal split per step, free.
 * Writes one /steps row per step (step_s the bound's step time, n_traj, tokens, the
 * split in n_rollout_ranks / n_train_ranks, busy fractions of the model) in the same
 * units as a run (seconds / device.time_scale). 0, or -1 with err when no split fits. */
int job_sim_oracle(const struct job_sim_config *c, struct metrics *m, char *err, size_t errlen);
