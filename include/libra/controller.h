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

#include <stdint.h>

#include "libra/comms.h"
#include "libra/config.h"
#include "libra/cost.h"
#include "libra/metrics.h"
#include "libra/outbox.h"
#include "libra/plan.h"
#include "libra/planner.h"
#include "libra/sched.h"
#include "libra/traj_table.h"
#include "libra/wire.h"
#include "libra/workload.h"

struct ctl_step_acc {        /* accumulated since the last step row */
    double rollout_busy_rank_s;
    double t_start;
};

struct ctl_batch {           /* the step in flight, for its /steps row */
    int n_traj;
    int64_t tokens_gen, tokens_tool;
    double reward_mean, reward_std, staleness_mean;
    int staleness_max;
};

struct ctl_stats {           /* whole-run figures for the summary */
    int64_t dispatches, results, handed_back, migrations;
    int n_resplits;
    double resplit_s_sum, resplit_s_max;
    int64_t traj_trained, tokens_trained;
    double reward_sum;
};

struct controller {
    const struct libra_config *cfg;
    const struct cost_model *cm;
    const struct workload *wl;
    struct metrics *m;
    int world;
    double t0;                 /* wall_time() at start */

    struct comms comms;
    struct plan plan;
    struct planner planner;
    struct sched sched;
    struct sched_instance *inst; /* (plan.n_instances) */
    struct outbox ob;
    struct wire_buf msg;       /* receive buffer */
    struct wire_buf pack;      /* packing scratch */
    struct wire_buf *out_batch; /* (n_out_batch >= plan.n_instances) turn batch per instance */
    int n_out_batch;
    struct traj_table tt;

    int step, version;         /* optimizer steps done; version == step */
    int rollout_version;       /* version every rollout rank holds */
    int groups_per_batch;
    int64_t next_prompt;

    int train_inflight;        /* a step was sent, TRAIN_DONE not yet back */
    int64_t *batch_groups;     /* (groups_per_batch) groups of the step in flight */
    struct ctl_batch batch;
    int sync_acks_pending;     /* SYNC_DONE messages still expected */
    int sync_version_pending;  /* version being synced */
    int sync_id;
    int sync_wanted;           /* version the rollout ranks should get next, -1 none */
    int epoch_pending;         /* re-plan at the next quiet point */
    int handbacks_pending;     /* HANDBACK messages still expected (re-split / shutdown) */
    int stopping;

    struct ctl_step_acc acc;
    struct ctl_stats stats;
    double last_progress;
};

/* Runs the whole job on rank 0; returns the process exit code. */
int controller_run(const struct libra_config *cfg, const struct cost_model *cm,
                   const struct workload *wl, struct metrics *m, int world);

/* epoch.c: planning epochs and weight syncs (called from the loop). */
void ctl_apply_plan(struct controller *c, const struct plan *next, const char *why);
void ctl_start_sync(struct controller *c, int version);
void ctl_on_sync_done(struct controller *c, const struct wire_sync_done *d);
/* Shared by controller.c and epoch.c. */
int ctl_poll(struct controller *c);
/* Serves messages until `expected` TAG_HANDBACK messages have arrived. */
void ctl_wait_handbacks(struct controller *c, int expected);
void ctl_rebuild_instances(struct controller *c, const struct plan *old);

#endif
