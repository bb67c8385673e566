/*
 * Private to src/control: rank 0's state and the pieces of its loop (the public face
 * is include/libra/controller.h). See that header for what the controller does.
 */
#ifndef LIBRA_CTL_INTERNAL_H
#define LIBRA_CTL_INTERNAL_H

#include "libra/controller.h"
#include <stdint.h>

#include "libra/checkpoint.h"
#include "libra/comms.h"
#include "libra/config.h"
#include "libra/cost.h"
#include "libra/env.h"
#include "libra/grpo.h"
#include "libra/metrics.h"
#include "libra/outbox.h"
#include "libra/plan.h"
#include "libra/planner.h"
#include "libra/sched.h"
#include "libra/traj_table.h"
#include "libra/traj_tokens.h"
#include "libra/wire.h"
#include "libra/workload.h"

struct ctl_step_acc {        /* accumulated since the last step row */
    double rollout_busy_rank_s;
    double t_start;
    double sched_s;            /* wall seconds in sched_route */
    int64_t sched_n;           /* routing decisions */
    /* the timing breakdown (ctl_trace.c) */
    int32_t tool_n, n_syncs;
    double tool_s, sync_s, resplit_s, ckpt_s;
    int64_t sync_bytes;
    double idle_rank_s;        /* rollout rank-seconds with no turn in flight */
    double rollout_rank_s;     /* rollout rank-seconds of the step (plans change mid-step) */
    double mark;               /* rank-seconds are counted up to here */
};

/* One rollout instance of the live plan, as the spans see it (ctl_trace.c; parallel to
 * controller.inst). A span is pending until it cannot grow any more. */
struct ctl_inst_trace {
    int leader, tp;
    int busy;                  /* turns in flight */
    double idle_since;         /* when it last went idle (counted up to here) */
    double dec_start, dec_end; /* the pending decode span; dec_start < 0: none */
    int64_t dec_turns;
    double tool_start, tool_end; /* the pending tool span; tool_start < 0: none */
    int64_t tool_n;
    int dec_rows, tool_rows;   /* spans written this step */
};

struct ctl_trace {
    struct ctl_inst_trace *inst; /* (n_inst) */
    int n_inst;
    double sync_t0;            /* the sync in flight started */
    double ckpt_t0;            /* the checkpoint in flight started */
    int ckpt_root;             /* the training root it was sent to */
};

struct ctl_batch {           /* the step in flight, for its /steps row */
    int n_traj;
    int64_t tokens_gen, tokens_tool;
    double tokens, sum_len_sq, max_len; /* whole sequences (the planner's calibration) */
    int n_replicas, n_hybrid_replicas;  /* replicas it was split over */
    double sent_at;                     /* wall seconds since the start, when sent */
    double waited_s;                    /* the trainer sat idle for it, wall seconds */
    double reward_mean, reward_std, staleness_mean;
    int staleness_max;
};

/* device cpu: per-step figures of the batch in flight (for its /steps row) */
struct ctl_real_batch {
    double success_rate, gen_tokens_mean, turns_mean;
    int32_t tool_calls[ENV_N_TOOLS], tool_failures[ENV_N_TOOLS];
    int32_t zero_var_groups;
};

/* Trajectory ids at and above this are evaluation episodes (struct ctl_eval). */
#define CTL_EVAL_ID0 ((int64_t)1 << 40)

/* One greedy evaluation pass over the held-out problems 0 .. n-1. */
struct ctl_eval {
    int wanted_version;       /* launch once the rollout ranks hold it; -1 none */
    int active;               /* episodes in flight */
    int step, version;        /* when launched */
    int n, n_done, n_runs;
    struct traj *t;           /* (n) */
    struct traj_tokens *tok;  /* (n) */
    double first_accuracy, last_accuracy;
};

/* Everything rank 0 needs for the real model (device cpu). */
struct ctl_real {
    const struct vocab *vocab; /* the model's tokenizer and format (model_vocab_open) */
    char identity[4096];       /* config_identity of the run's first segment (checkpoints) */
    char *config;              /* config_flat of this segment (checkpoints), or NULL */
    struct env env;
    struct grpo_config gc;
    struct grpo_baseline bl;
    struct traj_tokens *tok;  /* per trajectory id (grown with the book) */
    size_t cap_tok;
    struct ctl_real_batch batch;
    struct ctl_eval ev;
    /* resume: prompts launched again first, then the cursor continues */
    int64_t *relaunch;
    int64_t n_relaunch, next_relaunch;
    int64_t *trained;         /* prompt ids trained, in order (checkpoint audit) */
    int64_t n_trained;
    size_t cap_trained;
    /* time_to_target_reward: mean reward of the last CTL_REWARD_WINDOW steps */
    double reward_win[8];
    int reward_win_n;
    double time_to_target_s;  /* < 0: not reached */
    double elapsed_before_s;  /* training seconds of the run(s) before a resume */
    /* checkpoints */
    int ckpt_inflight;        /* step being written, 0 none */
    int ckpt_last;            /* step of the last checkpoint started, 0 none */
    int ckpt_good;            /* step of the newest checkpoint this run committed, 0 none */
    char ckpt_root[CFG_PATH_MAX];
    int resumed_from;         /* step resumed from, -1 fresh */
};
#define CTL_REWARD_WINDOW 5

/* The elastic hybrid pool's side of rank 0 (ctl_pool.c). A lent instance's ranks
 * become hybrid ranks of the live plan; each fetches the weights and its optimizer
 * shard in the background and says TAG_HYBRID_READY; until then it gets no share of
 * any batch and the core trains on without it. */
struct ctl_pool {
    int *lend;               /* (base.n_instances) 1: lent to training */
    int *ready;              /* (world) a lent rank has fetched */
    int *lent_epoch;         /* (world) plan epoch that lent it, -1 not lent */
    double *join_t0;         /* (world) wall seconds the join started */
    int pending;             /* a lend / release waits for a quiet point */
    int joining;             /* lent ranks not ready yet (the timeout scan skips 0) */
    char why[64];            /* its reason */
    int64_t joins, releases, timeouts, stale_ready;
    double ema_train, ema_rollout; /* smoothed measurements the controller decides on */
    int last_change_step;          /* step of the last lend / release */
};

struct ctl_stats {           /* whole-run figures for the summary */
    int64_t dispatches, results, handed_back, migrations;
    int n_resplits;
    double resplit_s_sum, resplit_s_max;
    int64_t traj_trained, tokens_gen_trained, tokens_tool_trained; /* generated / tool-return */
    double reward_sum;
    double solve_s_sum;        /* planner search wall seconds (not in metrics under a transport) */
    int n_solves;
    int64_t sync_bytes;        /* weight bytes the rollout ranks received in all */
    int nonfinite_skipped;     /* steps not applied: loss or gradient not finite (skip) */
    int ckpt_failed;           /* checkpoints not written (run.checkpoint_on_error = warn) */
};

/* Liveness (ctl_live.c): when each worker was last heard from, and what it said. */
struct ctl_live {
    double *last;              /* (world) wall time of the last message from each rank */
    int *tag;                  /* (world) that message's tag; 0 none yet */
    char (*host)[64];          /* (world) host names from the heartbeats */
    double sent;               /* wall time of the last heartbeats to the workers */
    double step_max;           /* longest step seen, s (the automatic limit) */
};

struct controller {
    const struct libra_config *cfg;
    const struct cost_model *cm;
    const struct workload *wl;
    struct metrics *m;
    int world;
    double t0;                 /* wall_time() at start */
    const struct ctl_transport *tr; /* NULL: MPI */

    struct comms comms;
    struct plan plan;          /* the live plan: base + lent instances */
    struct plan base;          /* the planner's plan of this epoch */
    struct plan next_base;     /* grp: the plan to apply at the next quiet point */
    struct planner planner;
    struct ctl_pool pool;
    int64_t finished_in_step;  /* training trajectories finished since the last step */
    double train_idle_since;   /* wall seconds since the start the trainer went idle */
    struct sched sched;
    struct sched_instance *inst; /* (plan.n_instances) */
    const char *tool_names[WL_MAX_TOOLS]; /* names of the tool indices turn results carry */
    int64_t *held;             /* (n_held) turns the scheduler asked to hold (la_mlfq) */
    size_t n_held, cap_held;
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
    int64_t groups_before;     /* groups trained before a resume (the launch cap counts them) */

    int train_inflight;        /* a step was sent, TRAIN_DONE not yet back */
    int64_t select_failed_completed; /* completed groups at the last batch that could not */
    int select_failed_version;       /* be formed, and the version then (-1: none) */
    int64_t *batch_groups;     /* (groups_per_batch) groups of the step in flight */
    struct ctl_batch batch;
    int sync_acks_pending;     /* SYNC_DONE messages still expected */
    int sync_version_pending;  /* version being synced */
    int sync_id;
    int64_t sync_bytes_sum, sync_bytes_max; /* the sync in flight: bytes the rollout ranks
                                               received, in all and by one rank at most */
    int sync_wanted;           /* version the rollout ranks should get next, -1 none */
    int epoch_pending;         /* re-plan at the next quiet point */
    int stop_sig;              /* a signal asked the run to stop (stop_signal.h), else 0 */
    int failed;                /* the run must end as failed once the work in flight is
                                  done (train.on_nonfinite = stop); no new steps */
    struct ctl_live live;
    int stop_ckpt;             /* the stop's checkpoint was started (or is not needed) */
    int handbacks_pending;     /* HANDBACK messages still expected (re-split / shutdown) */
    int stopping;

    struct ctl_step_acc acc;
    struct ctl_trace trace;
    struct ctl_stats stats;
    double last_progress;

    struct device_info dev;    /* what the workers' device reports (rates for the router) */
    int real;                  /* dev.has_model: real tokens, env rewards, GRPO */
    struct ctl_real rl;
};

/* Sends through the transport. */
void ctl_send(struct controller *c, const void *buf, size_t len, int dest, int tag);
/* The run's clock (struct ctl_transport.now), and a wall clock for rank 0's own CPU
 * work (routing decisions, re-splits) that reads 0 under a transport, so simulated
 * metrics do not depend on the machine. */
double ctl_now(const struct controller *c);
double ctl_cpu_clock(const struct controller *c);

/* epoch.c: planning epochs and weight syncs (called from the loop). */
void ctl_apply_plan(struct controller *c, const struct plan *next, const char *why);
void ctl_start_sync(struct controller *c, int version);
void ctl_on_sync_done(struct controller *c, const struct wire_sync_done *d, int source);
/* Shared by controller.c and epoch.c. */
int ctl_poll(struct controller *c);
/* Serves messages until `expected` TAG_HANDBACK messages have arrived. */
void ctl_wait_handbacks(struct controller *c, int expected);
void ctl_rebuild_instances(struct controller *c, const struct plan *old);
/* The trajectory (training or evaluation) with this id. */
struct traj *ctl_traj(struct controller *c, int64_t id);

/* ctl_plan.c: the global resource planner's side of the loop (plan.mode = grp):
 * measurements at the end of every step, the planning pass, its /planner row. */
void ctl_plan_after_step(struct controller *c, double step_s, double rollout_busy_frac);
/* Applies what waits for a quiet point: a new epoch's base plan (the planner's, or the
 * static / scripted one), else the pool's lend / release on top of the base plan. */
void ctl_next_epoch(struct controller *c);
/* ctl_pool.c */
void ctl_pool_init(struct controller *c);
void ctl_pool_free(struct controller *c);
/* After a plan took effect: starts the joins of newly lent ranks, forgets released ones. */
void ctl_pool_on_plan(struct controller *c, const struct plan *old);
void ctl_pool_on_ready(struct controller *c, const struct wire_hybrid_ready *r);
/* Rolls back joins that ran past plan.pool_join_timeout_s; returns 1 if any did. */
int ctl_pool_check_timeouts(struct controller *c);
/* The pool controller's decision at the end of a step (grp with plan.pool = 1). */
void ctl_pool_decide(struct controller *c, double train_s, double rollout_s, double pressure);
/* Training replicas in DP order: core replicas, then lent replicas whose ranks are all
 * ready. ranks (world) receives replica k's ranks at ranks[k * size .. + size);
 * returns the replica count, *n_hybrid the lent ones. */
int ctl_replicas(const struct controller *c, int *ranks, int *n_hybrid);

/* ctl_real.c: the real model's side of rank 0 (device cpu). */
void ctl_real_init(struct controller *c, const struct ckpt_state *resume, int resume_step);
void ctl_real_free(struct controller *c);
int64_t ctl_real_next_prompt(struct controller *c);
void ctl_real_launch(struct controller *c, int64_t group_id);
struct traj_tokens *ctl_real_tokens(struct controller *c, int64_t traj_id);
/* ctl_samples.c: /samples rows of the step's trained trajectories when it is due. */
void ctl_real_samples(struct controller *c, const int64_t *groups, int n_groups, int step);
/* Sampling stream of a trajectory: (prompt, sample), the same in every run segment. */
int64_t ctl_real_rng_key(const struct controller *c, const struct traj *t);
void ctl_real_on_turn(struct controller *c, struct traj *t, const struct wire_turn_result *r,
                      const struct wire_turn_arrays *a);
double ctl_real_score(struct controller *c, struct traj *t);
/* Advantages of the step's groups; fills the batch figures. adv is indexed like the
 * items (group-major, n_samples per group). */
void ctl_real_advantages(struct controller *c, const int64_t *groups, int n, double *adv);
void ctl_real_step_row(struct controller *c, const struct wire_train_done *d,
                       struct metrics_step_row *row, double now);
/* Evaluation: schedule one at the current version; launch / finish. */
void ctl_eval_request(struct controller *c);
void ctl_eval_progress(struct controller *c);
void ctl_eval_finished_traj(struct controller *c, struct traj *t);
/* ctl_sched.c: the scheduler's side of the loop -- per-step /sched, /instances and
 * /migrations rows, the prefix tree at the end of the run and in checkpoints. */
void ctl_sched_init(struct controller *c);
void ctl_sched_step_rows(struct controller *c, double now);
void ctl_sched_finish_run(struct controller *c);
/* Writes dir/tree.h5 (cmlfq; a no-op for the other policies). */
int ctl_sched_save_tree(const struct controller *c, const char *dir, char *err, size_t errlen);
/* Checkpoints. */
void ctl_ckpt_start(struct controller *c);
/* ctl_trace.c: the /spans rows and the /steps timing breakdown. Times are rank 0's
 * clock (ctl_now). */
void ctl_trace_free(struct controller *c);
/* Instance i (index in c->inst) got its first turn in flight / its last came back. */
void ctl_trace_busy(struct controller *c, int i, double now);
void ctl_trace_idle(struct controller *c, int i, double now);
/* A finished (not handed-back) turn of instance i; a tool call it returned with. */
void ctl_trace_turn(struct controller *c, int i, const struct wire_turn_result *r, double now);
/* c->inst was rebuilt for a new plan: the old instances' spans end, the new begin. */
void ctl_trace_instances(struct controller *c, double now);
/* A plan was applied from t0 to now (rank 0's clock); dt its /plans resplit_s. */
void ctl_trace_resplit(struct controller *c, double t0, double now, double dt, int handed_back);
void ctl_trace_sync_start(struct controller *c, double now);
/* A sync member's SYNC_DONE; last: the sync is complete (bytes: the receivers' sum). */
void ctl_trace_sync_done(struct controller *c, int rank, int64_t bytes, int last,
                         int64_t bytes_sum, double now);
void ctl_trace_ckpt_start(struct controller *c, double now);
void ctl_trace_ckpt_done(struct controller *c, int step, int ok, double now);
void ctl_trace_train_times(struct controller *c, const struct wire_train_times *m, double now);
/* The end of a step: fills row's breakdown (step_s, the batch's times and the device's
 * figures already in it), closes the step's pending spans, starts the next. */
void ctl_trace_step_end(struct controller *c, const struct wire_train_done *d,
                        struct metrics_step_row *row, double now);
/* The run's end: the last pending spans. */
void ctl_trace_finish(struct controller *c, double now);

/* ctl_live.c */
void ctl_live_init(struct controller *c);
void ctl_live_free(struct controller *c);
/* A message from source: it is alive. 1 if it was a heartbeat (consumed here). */
int ctl_live_seen(struct controller *c, int source, int tag, const void *data, size_t len);
/* A step took step_s: the automatic limit grows with the longest. */
void ctl_live_step(struct controller *c, double step_s);
/* Once per run.heartbeat_s: heartbeats to the workers, then the job ends if a worker
 * has been silent longer than the limit. */
void ctl_live_check(struct controller *c);
void ctl_ckpt_on_done(struct controller *c, const struct wire_ckpt_done *d);

/* ctl_open's work, on a controller the caller allocated (ctl_create). */
void ctl_open(struct controller *c, const struct libra_config *cfg, const struct cost_model *cm,
              const struct workload *wl, const struct device_info *dev, struct metrics *m,
              int world, const struct ctl_transport *tr, const struct ckpt_state *resume,
              int resume_step);

#endif
