/*
 * The run's metrics file: one HDF5 file written by rank 0 only (STYLE 14), with a
 * fixed schema of appendable tables (chunked, unlimited compound datasets), one row
 * appended per step / trajectory / event / plan, and units stored as attributes of
 * every column. metrics_flush() after every step makes a killed run leave a readable
 * file; the root attribute "status" reads "running" until metrics_close() sets
 * "complete" or "failed", so a truncated run never looks complete.
 *
 * Tables (see docs/metrics.md): /steps, /trajectories, /events, /plans, /eval.
 * Root attributes: config, libra_version, world_size, device_type, status, and any
 * added with metrics_attr_*.
 */
#ifndef LIBRA_METRICS_H
#define LIBRA_METRICS_H

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
    int32_t fate;           /* enum traj_fate */
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
};

struct metrics;

/* Creates path (fails if it cannot be created; never truncates an existing file). */
struct metrics *metrics_open(const char *path, const char *config_text, int world_size,
                             const char *device_type, char *err, size_t errlen);
int metrics_step(struct metrics *m, const struct metrics_step_row *row);
int metrics_traj(struct metrics *m, const struct metrics_traj_row *row);
int metrics_event(struct metrics *m, double wall_s, int32_t step, const char *kind,
                  const char *detail);
int metrics_plan(struct metrics *m, const struct metrics_plan_row *row);
int metrics_eval(struct metrics *m, const struct metrics_eval_row *row);
int metrics_attr_double(struct metrics *m, const char *name, double value);
int metrics_attr_int(struct metrics *m, const char *name, int64_t value);
int metrics_attr_string(struct metrics *m, const char *name, const char *value);
/* Writes buffered rows and flushes the file to disk. */
int metrics_flush(struct metrics *m);
/* Sets status ("complete" or "failed"), flushes and closes; NULL is a no-op. */
int metrics_close(struct metrics *m, const char *status);
const char *metrics_path(const struct metrics *m);

#endif
