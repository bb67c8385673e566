/*
 * The run's metrics file: one HDF5 file written by rank 0 only (STYLE 14), with a
 * fixed schema of appendable tables (chunked, unlimited compound datasets), one row
 * appended per step / trajectory / event / plan, and units stored as attributes of
 * every column. metrics_flush() after every step makes a killed run leave a readable
 * file; the root attribute "status" reads "running" until metrics_close() sets
 * "complete" or "failed", so a truncated run never looks complete.
 *
 * Tables (see docs/metrics.md): /steps, /trajectories, /events, /plans, /eval, the
 * scheduler's /sched, /migrations, /instances, and the per-rank phase spans /spans. Root attributes: config, libra_version,
 * world_size, device_type, status, and any added with metrics_attr_*. Other writers
 * (the scheduler's /tree group) add their own groups through metrics_write_with().
 *
 * This header does not include the scheduler's (io does not depend on the scheduler):
 * the scheduler's enums reach it as plain fixed-size arrays whose sizes are the
 * METRICS_SCHED_* constants below; the code that fills a row from struct sched_stats
 * must _Static_assert that they equal SCHED_R_COUNT and SCHED_VIA_COUNT. The columns
 * that take one of a fixed set of values are HDF5 enums (metrics_enums.h).
 */
#ifndef LIBRA_METRICS_H
#define LIBRA_METRICS_H

#include "libra/metrics_enums.h"

#include <stddef.h>
#include <stdint.h>

struct metrics_step_row {
    int32_t step;            /* optimizer step just finished (1-based) */
    double wall_s;           /* seconds since the run started */
    double step_s;           /* wall seconds this step took */
    int32_t version;         /* policy version after the step */
    int32_t n_traj;          /* trajectories trained on */
    int64_t tokens_gen;      /* generated tokens in the batch */
    int64_t tokens_tool;     /* tool-return tokens in the batch */
    double reward_mean, reward_std;
    double staleness_mean;   /* version at training - version at start */
    int32_t staleness_max;
    double rollout_busy_frac; /* busy rank-seconds of rollout ranks / (ranks x step_s) */
    double train_busy_frac;
    int32_t n_rollout_ranks, n_train_ranks, n_hybrid_ranks;
    /* real model (device cpu); 0 / NaN-free zeros under emulation */
    double success_rate;     /* trajectories whose answer was correct */
    double gen_tokens_mean;  /* generated tokens per trajectory */
    double turns_mean;
    int32_t tool_calls[2];   /* per tool (enum env_tool_id: calc, search) in the batch */
    int32_t tool_failures[2];/* failed or timed-out calls per tool */
    int32_t zero_var_groups; /* groups whose rewards were all equal (no signal) */
    double loss, pg_loss;    /* the GRPO objective, whole batch */
    double kl, entropy;      /* per generated token */
    double clip_frac;        /* generated tokens whose gradient the PPO clip removed */
    double is_trunc_frac;    /* generated tokens whose behaviour weight hit is_cap */
    double grad_norm;
    double lr;
    int32_t params_identical; /* 1: every training replica holds identical parameters */
    /* timing breakdown (schema 6), wall seconds unless stated */
    double rollout_wait_s;   /* the trainer waited for this step's batch: previous step's end
                                -> batch sent (rollout_wait_s + train_s = step_s) */
    double train_s;          /* batch sent -> TRAIN_DONE received, rank 0's clock */
    double train_fwd_s, train_bwd_s; /* the training root's forward, backward (of train_s) */
    double train_reduce_s;   /* the root's gradient reduction incl. lent gradients */
    double train_opt_s;      /* the root's optimizer step */
    double gen_s;            /* rollout busy rank-seconds reported in the step / rollout ranks */
    int32_t tool_calls_n;    /* tool calls returned to rank 0 during the step */
    double tool_s;           /* their latencies summed (emulated seconds on emu; they overlap) */
    int32_t n_syncs;         /* weight syncs finished during the step */
    double sync_s;           /* their durations summed: start -> last SYNC_DONE */
    int64_t sync_bytes;      /* weight bytes the rollout ranks received in them */
    double resplit_s;        /* re-splits applied during the step (/plans resplit_s), summed */
    double ckpt_s;           /* checkpoints finished during the step: start -> committed */
    double rollout_idle_frac; /* rollout rank-seconds whose instance had no turn in flight /
                                 rollout rank-seconds of the step */
    double train_idle_frac;  /* rollout_wait_s / step_s: the training ranks had no batch */
};

/* /spans: what a rank was doing, from t_start to t_end (rank 0's clock). */
enum metrics_span_kind {
    SPAN_DECODE = 0,      /* a rollout instance had turns in flight (one row per rank) */
    SPAN_TOOL = 1,        /* tool calls returned by an instance (its leader) */
    SPAN_TRAIN_FWD = 2,   /* a training rank's forward */
    SPAN_TRAIN_BWD = 3,   /* its backward */
    SPAN_TRAIN_REDUCE = 4, /* gradient reduction (and lent gradients / a lent rank's wait) */
    SPAN_TRAIN_OPT = 5,   /* the optimizer step */
    SPAN_WEIGHT_SYNC = 6, /* a sync member: sync start -> its SYNC_DONE */
    SPAN_RESPLIT = 7,     /* a plan applied (every rank: the split is collective) */
    SPAN_CHECKPOINT = 8,  /* rank 0 and the training root: checkpoint start -> done */
    SPAN_KIND_COUNT
};
/* Its names: metrics_enum_name(MV_SPAN, kind) (metrics_enums.h). */

#define METRICS_SPAN_DETAIL_LEN 64

struct metrics_span_row {
    int32_t rank;            /* world rank */
    int32_t kind;            /* enum metrics_span_kind (MV_SPAN) */
    int32_t step;            /* the step in progress (last finished + 1) */
    double t_start, t_end;   /* seconds since the run started */
    int64_t count;           /* turns (decode), tool calls (tool), bytes (weight_sync),
                                turns handed back (resplit), 0 otherwise */
    char detail[METRICS_SPAN_DETAIL_LEN];
};

/* One greedy evaluation on the held-out set (device cpu). */
struct metrics_eval_row {
    int32_t step;            /* optimizer steps done when it was launched */
    int32_t version;         /* policy version it ran at */
    double wall_s;           /* when it finished, seconds since the run started */
    int32_t n;               /* problems */
    double accuracy;         /* correct answers / n */
    double reward_mean;
    double answered_frac;    /* episodes that gave an <answer> */
    double tool_calls_mean;  /* tool calls per episode */
    double gen_tokens_mean;
};

enum traj_fate { TRAJ_TRAINED = 0, TRAJ_BUFFERED = 1, TRAJ_IN_FLIGHT = 2 };

struct metrics_traj_row {
    int64_t traj_id;
    int64_t prompt_id;
    int64_t group_id;
    int32_t step_consumed;  /* step that trained on it; -1 if not trained */
    int32_t fate;           /* enum traj_fate (MV_FATE) */
    int32_t version_start, version_end;
    int32_t prompt_tokens, gen_tokens, tool_tokens;
    int32_t turns, tool_failures, migrations;
    double reward;
    double t_start, t_end;  /* wall seconds since the run started; t_end -1 if unfinished */
};

struct metrics_plan_row {
    int32_t epoch, step;
    double wall_s;
    int32_t n_train, n_rollout, n_hybrid;
    char rollout_tp[128];   /* e.g. "4,2,2,1" */
    char reason[64];
    double resplit_s;       /* plan broadcast + splits + hand-back, wall seconds */
    int32_t handed_back;    /* in-flight turns returned to rank 0 */
    int32_t train_tp, train_pp, micro, n_idle; /* training shape; GPUs left unused */
};

/* One planning pass of the global resource planner (plan.mode = grp), applied or
 * not: what triggered it, the best candidate, predicted (calibrated) vs measured
 * times, the gate's verdict. Times are emulated seconds per step. */
struct metrics_planner_row {
    int32_t step;
    double wall_s;
    int32_t trigger;        /* enum plan_trigger_kind (MV_TRIGGER) */
    int32_t verdict;        /* enum gate_verdict (MV_VERDICT); -1 when no search ran */
    int32_t applied;        /* 1: it became the next epoch's plan */
    int32_t cand_train, cand_tp, cand_pp, cand_micro, cand_idle;
    char cand_rollout_tp[128];
    double cand_train_s, cand_rollout_s, cand_step_s; /* predicted, calibrated */
    double cur_train_s, cur_rollout_s, cur_step_s;    /* the plan in force, predicted */
    double meas_train_s, meas_rollout_s;              /* measured over the last step */
    double scale_train, scale_rollout;                /* calibration */
    double gain_s, transition_s, net_s;
    int32_t horizon;
    int64_t evaluations;    /* cost-model calls of the search */
    double solve_s;         /* wall seconds of the search */
    int32_t history;        /* finished trajectories the profile came from */
};

/* Sizes of the scheduler's arrays in struct metrics_sched_row. */
#define METRICS_SCHED_N_ROUTES 10 /* = SCHED_R_COUNT, indexed by enum sched_reason */
#define METRICS_SCHED_N_VIA 3     /* = SCHED_VIA_COUNT, indexed by enum sched_via */
#define METRICS_BUCKET_LEN 32     /* bucket names, NUL included (longer ones truncated) */

/* The scheduler's counters of one optimizer step (struct sched_stats since the last
 * sched_take_step) and the state of cmlfq's prefix tree at its end. */
struct metrics_sched_row {
    int32_t step;            /* optimizer step just finished */
    double wall_s;
    int64_t routes[METRICS_SCHED_N_ROUTES]; /* decisions by enum sched_reason (holds excluded) */
    int64_t via[METRICS_SCHED_N_VIA];       /* decisions by enum sched_via */
    int64_t holds;           /* decisions that held a turn */
    int64_t migrations;      /* turns moved to another bucket's instance */
    int64_t declined;        /* bucket changes refused (cost or limit) */
    int64_t tool_returns;
    int64_t finished;        /* trajectories finished */
    int64_t learned;         /* of them, recorded in the tree / history */
    int64_t tree_nodes, tree_prompts, tree_leaves; /* cmlfq's tree; 0 for other policies */
    int32_t tree_depth;      /* deepest node (root = 0) */
    double decide_us_mean;   /* mean wall time of one routing decision, microseconds */
};

/* One finished turn of a trajectory (what a trace replays: docs/emulation.md §4.5). */
struct metrics_turn_row {
    int64_t traj_id;
    int32_t turn;            /* 0-based */
    int32_t gen_tokens;      /* generated this turn */
    int32_t final;           /* the trajectory ended with it (no tool call) */
    char tool[24];           /* the tool it called, "" when final */
    int32_t status;          /* enum tool_status of the return (MV_STATUS); 0 when final */
    int32_t payload_tokens;  /* tool-return tokens appended */
    double tool_latency_s;   /* seconds the tool took (emulated seconds on emu) */
    double wall_s;           /* when rank 0 received it, seconds since the run started */
};

/* One bucket change, taken or declined (struct sched_migration, with names). */
struct metrics_migration_row {
    double wall_s;
    int32_t step;            /* optimizer step in progress (last finished + 1) */
    int64_t traj_id;
    int32_t turn;
    int32_t from_instance, to_instance; /* to = from when not moved */
    int32_t from_tp, to_tp;
    char from_bucket[METRICS_BUCKET_LEN], to_bucket[METRICS_BUCKET_LEN];
    int32_t why;             /* enum sched_mig_why (MV_MIG_WHY) */
    double est_remaining;    /* decode tokens */
    double saving_s, cost_s; /* cmlfq's economics; 0 otherwise */
};

/* One rollout instance at the end of one optimizer step. */
struct metrics_instance_row {
    int32_t step;
    double wall_s;
    int32_t instance;        /* index in the current plan */
    int32_t leader;          /* world rank of its leader */
    int32_t tp;
    char bucket[METRICS_BUCKET_LEN];
    int32_t queued, running; /* the instance's own last report; -1 before any */
    int32_t turns_in_flight; /* rank 0's view: dispatched, not yet returned */
    double kv_frac;          /* the instance's last report; -1 before any */
    double load_frac;        /* rank 0's view: KV tokens in flight / KV capacity */
};

struct metrics;

/* Creates path (fails if it cannot be created; never truncates an existing file). */
struct metrics *metrics_open(const char *path, const char *config_text, int world_size,
                             const char *device_type, char *err, size_t errlen);
/* The same with the root attribute "created" given (the simulator's files say
 * "simulated": the same run gives the same bytes). */
struct metrics *metrics_open_as(const char *path, const char *config_text, int world_size,
                                const char *device_type, const char *created, char *err,
                                size_t errlen);
int metrics_step(struct metrics *m, const struct metrics_step_row *row);
int metrics_traj(struct metrics *m, const struct metrics_traj_row *row);
int metrics_event(struct metrics *m, double wall_s, int32_t step, enum metrics_event_kind kind,
                  const char *detail);
int metrics_plan(struct metrics *m, const struct metrics_plan_row *row);
int metrics_planner(struct metrics *m, const struct metrics_planner_row *row);
int metrics_eval(struct metrics *m, const struct metrics_eval_row *row);
int metrics_sched(struct metrics *m, const struct metrics_sched_row *row);
int metrics_migration(struct metrics *m, const struct metrics_migration_row *row);
int metrics_turn(struct metrics *m, const struct metrics_turn_row *row);
int metrics_instance(struct metrics *m, const struct metrics_instance_row *row);
int metrics_span(struct metrics *m, const struct metrics_span_row *row);
int metrics_attr_double(struct metrics *m, const char *name, double value);
int metrics_attr_int(struct metrics *m, const char *name, int64_t value);
int metrics_attr_string(struct metrics *m, const char *name, const char *value);
/* Writes buffered rows and flushes the file to disk. */
int metrics_flush(struct metrics *m);
/*
 * Lets another module write its own objects into the file (the scheduler's /tree):
 * writes the buffered rows, then calls fn(file, arg, err, errlen) with the open file's
 * hid_t (as int64_t), with HDF5's automatic error printing off, then flushes the file.
 * fn returns 0, or nonzero with a message in err; it must close every object it opens
 * and must not touch the tables. Returns fn's result (logged with err when nonzero),
 * or -1 (logged) if the rows could not be written (fn not called) or the flush after
 * fn failed; -1 for NULL m or fn.
 */
int metrics_write_with(struct metrics *m,
                       int (*fn)(int64_t file, void *arg, char *err, size_t errlen), void *arg);
/* metrics_samples.c: one trained trajectory as text in /samples (made on the first call):
 * the prompt and everything after it (the turns, tool calls and tool returns, special
 * tokens spelled out) as variable-length UTF-8 strings. 0, or -1 (logged). */
struct metrics_sample_row {
    int32_t step;        /* the optimizer step that trained it */
    int64_t traj_id;
    int64_t group_id;    /* its GRPO group */
    double reward;
    int32_t correct;     /* 1 if its answer was right */
    int32_t turns;       /* model turns */
    int32_t tool_calls;
    const char *prompt;  /* the prompt as the model saw it */
    const char *completion; /* the rest: generated turns and tool returns */
};
int metrics_sample(struct metrics *m, const struct metrics_sample_row *row);

/* metrics_config.c: the resolved configuration as /config/<section> groups, one
 * attribute per key typed from its value (int64, float64, int64 list, string); flat is
 * config_flat's "section.key = value" lines. 0, or -1 (logged) on an error. */
int metrics_config_group(struct metrics *m, const char *flat);
/* Sets status ("complete" or "failed"), flushes and closes; NULL is a no-op. */
int metrics_close(struct metrics *m, const char *status);
const char *metrics_path(const struct metrics *m);

#endif
