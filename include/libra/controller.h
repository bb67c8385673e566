/*
 * Rank 0: the controller. It does no model math. It owns the trajectory book, the
 * scheduler, the planner, the policy version, the metrics file, and the event loop
 * that ties them together (DESIGN §2):
 *
 *   launch groups (bounded by the staleness cap) -> dispatch turns to rollout
 *   instances -> collect turn results and tool returns -> assemble groups -> send
 *   token-balanced batch shares to the training replicas -> on TRAIN_DONE bump the
 *   version, write the step row, start a weight sync every sync_interval steps and
 *   a new planning epoch every plan.interval steps.
 *
 * The loop never spins: with nothing to do it sleeps with back-off.
 */
#ifndef LIBRA_CONTROLLER_H
#define LIBRA_CONTROLLER_H

#include <stddef.h>

#include "libra/checkpoint.h"
#include "libra/config.h"
#include "libra/cost.h"
#include "libra/device.h"
#include "libra/metrics.h"
#include "libra/workload.h"

struct controller; /* private to src/control (ctl_internal.h) */

/* How rank 0 reaches its workers. NULL (the job): MPI point-to-point through the
 * outbox, communicators re-split with MPI_Comm_split, wall-clock time. The simulator
 * (libra-sim, src/sim/job_sim.c) supplies its own: messages go to simulated ranks in
 * one process, and the clock is virtual. */
struct ctl_transport {
    void *ctx;
    /* A message for rank dest; buf may be reused when it returns. */
    void (*send)(void *ctx, struct controller *c, const void *buf, size_t len, int dest, int tag);
    /* Hands every message due now to ctl_deliver; returns how many. */
    int (*poll)(void *ctx, struct controller *c);
    /* Seconds since the run started, in the unit the metrics use (wall seconds; the
     * simulator: emulated seconds / device.time_scale, what the job would take). */
    double (*now)(void *ctx);
};

/* Runs the whole job on rank 0; returns the process exit code. dev: what the
 * workers' device reports (device_ops.describe). resume: the state of the checkpoint
 * to continue from (a device with a model), or NULL. */
int controller_run(const struct libra_config *cfg, const struct cost_model *cm,
                   const struct workload *wl, const struct device_info *dev, struct metrics *m,
                   int world, const struct ckpt_state *resume, int resume_step);

/* The loop in pieces, for the job (controller_run) and the simulator: ctl_create
 * initialises and applies the first plan; ctl_iterate does one pass (messages, pool
 * timeouts, a pending epoch, a weight sync, launch, dispatch, a training step) and
 * returns nonzero if it did anything; ctl_running says whether the run goes on;
 * ctl_close shuts the workers down, writes the run's last rows; ctl_destroy frees. */
struct controller *ctl_create(const struct libra_config *cfg, const struct cost_model *cm,
                              const struct workload *wl, const struct device_info *dev,
                              struct metrics *m, int world, const struct ctl_transport *tr,
                              const struct ckpt_state *resume, int resume_step);
int ctl_iterate(struct controller *c);
int ctl_running(const struct controller *c);
/* The signal that stopped the run early (include/libra/stop_signal.h), or 0. */
int ctl_stopped_by(const struct controller *c);
void ctl_close(struct controller *c);
void ctl_destroy(struct controller *c);
/* One message from rank source (what the transport received). */
void ctl_deliver(struct controller *c, int tag, int source, const void *data, size_t len);

/* What a driver of the loop may read: the step in progress and the trajectory book. */
struct ctl_status {
    int step;                  /* optimizer steps done */
    size_t n_traj, queued, held;
    int train_inflight;
    double solve_s_sum;        /* planner search seconds */
    int n_solves;
};
void ctl_status(const struct controller *c, struct ctl_status *out);

#endif
