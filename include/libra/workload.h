/*
 * The workload model of the emulated backend: what an agentic RL rollout looks like
 * in tokens and tool returns, without a model. Per trajectory: a prompt length; per
 * turn a number of generated tokens (heavy-tailed) and, unless the turn is final, a
 * tool call with a type, payload tokens, latency and status (success, failure,
 * timeout). Causal structure: a failed or timed-out tool return, or a large payload,
 * raises the probability that more turns follow -- the signal C-MLFQ exploits -- and
 * every failure so far lengthens the turns after it. Group structure: a per-prompt
 * latent difficulty, shared by the samples of a GRPO group, scales their lengths,
 * turn counts and rewards together, so a prompt's first finished samples predict
 * the others (as production RL rollouts show).
 * Distributions drift with the training step (lengths grow or shrink, success
 * improves) so a fixed resource split goes stale. Rewards come from a simple model:
 * success probability falls with tool failures and rises with the step.
 *
 * Every draw is a pure function of (seed, trajectory id, turn, purpose), so any rank
 * computes the same turn for the same trajectory (STYLE 10).
 *
 * Presets live in inputs/workloads/<name>.cfg (libconfig, section "workload").
 */
#ifndef LIBRA_WORKLOAD_H
#define LIBRA_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "libra/tool_status.h"

struct wl_trace;

#define WL_MAX_TOOLS 8


struct wl_tool {
    char name[32];
    double weight;         /* relative frequency among tool calls */
    double payload_median; /* tokens returned, lognormal median */
    double payload_sigma;  /* lognormal sigma of the payload */
    int payload_max;       /* payload cap in tokens */
    double latency_median_s;
    double latency_sigma;
    double p_fail;         /* probability the call fails */
    double p_timeout;      /* probability the call times out */
    double timeout_s;      /* latency of a timed-out call */
};

struct workload {
    char name[32];
    /* prompt tokens: lognormal(median, sigma) clamped to [min, max] */
    double prompt_median, prompt_sigma;
    int prompt_min, prompt_max;
    /* generated tokens per turn: lognormal(median, sigma) clamped to [1, max] */
    double gen_median, gen_sigma;
    int gen_max;
    /* turn structure: after a non-final turn... */
    int min_turns, max_turns;
    double p_continue;           /* base probability that another turn follows */
    double p_continue_fail_bonus;  /* added after a failed / timed-out tool */
    double p_continue_large_bonus; /* added after a payload >= large_payload */
    int large_payload;           /* tokens that make a payload "large" */
    int n_tools;
    struct wl_tool tools[WL_MAX_TOOLS];
    /* drift per training step (multiplicative on medians, additive on p) */
    double drift_gen_per_step;   /* e.g. 0.01: median generation grows 1 % a step */
    double drift_continue_per_step;
    int drift_max_steps;         /* drift stops after this many steps */
    /* reward: P(reward = 1) = clamp(base + per_step * step - per_failure * failures
     *                                 - difficulty_reward * z) */
    double reward_base, reward_per_step, reward_per_failure;
    /* Per-prompt latent difficulty z ~ N(0, 1), shared by every sample of a GRPO group:
     * the generation median is multiplied by exp(difficulty_gen_sigma z) and
     * difficulty_continue z is added to p_continue, so a prompt's samples have
     * similar lengths and turn counts, and harder prompts earn less reward. */
    double difficulty_gen_sigma, difficulty_continue, difficulty_reward;
    /* History: every failed or timed-out tool return so far multiplies the generation
     * median of the turns after it by 1 + gen_per_failure (the agent reasons longer
     * after errors, and more so after repeated ones). */
    double gen_per_failure;
    /* A recorded trace replayed instead of the draws above (workload.trace; NULL: the
     * model). Not part of the preset file; the preset still gives large_payload and
     * the tools' names. */
    const struct wl_trace *trace;
};

/* State of one trajectory as the controller tracks it (what a turn depends on). */
struct wl_traj_state {
    int64_t traj_id;
    int64_t prompt_id; /* its GRPO group's prompt: the latent difficulty's key */
    int turn;        /* 0-based index of the turn about to be generated */
    int ctx_tokens;  /* context before this turn (prompt + previous turns + tools) */
    int n_failures;  /* failed or timed-out tool returns so far */
    int last_failed; /* last tool return failed or timed out */
    int last_large;  /* last tool payload was large */
    int step;        /* training step at which the trajectory started (drift) */
};

struct wl_turn {
    int gen_tokens;         /* tokens the policy generates this turn */
    int final;              /* 1: the trajectory ends after this turn (no tool call) */
    int tool;               /* index into tools[], -1 when final */
    enum tool_status status;
    int payload_tokens;     /* tool-return tokens appended to the context */
    double tool_latency_s;  /* emulated seconds the tool takes */
};

int workload_load(const char *path, struct workload *wl, char *err, size_t errlen);
/* Prompt length of trajectory group prompt_id (shared by the group's samples). */
int workload_prompt_tokens(const struct workload *wl, uint64_t seed, int64_t prompt_id);
/* Latent difficulty z ~ N(0, 1) of prompt prompt_id (shared by its group). */
double workload_difficulty(uint64_t seed, int64_t prompt_id);
/* The next turn of a trajectory. max_turns / budgets of the rollout config are
 * applied by the caller (a turn at the turn limit is forced final). */
void workload_turn(const struct workload *wl, uint64_t seed, const struct wl_traj_state *st,
                   struct wl_turn *out);
/* Folds a non-final turn into the state for the next one: turn + 1, context grows by
 * the generated and payload tokens, failure and large-payload flags from the tool
 * return. The one place that defines what the next turn depends on. */
void workload_advance(const struct workload *wl, struct wl_traj_state *st, const struct wl_turn *t);
/* Reward of a finished trajectory: 0 or 1. */
double workload_reward(const struct workload *wl, uint64_t seed, const struct wl_traj_state *st);
/* One trajectory run to its end (budgets of the rollout config not applied). */
struct wl_traj_summary {
    int prompt, gen, payload, turns, failures;
    double tool_s;      /* seconds spent in tools */
    double reward;
};
void workload_run(const struct workload *wl, uint64_t seed, int64_t traj_id, int64_t prompt_id,
                  int step, struct wl_traj_summary *out);

/* The structure production rollouts show, measured from generated trajectories
 * (src/perf/workload_structure.c; docs/emulation.md has the published figures):
 * n_groups GRPO groups of group_size samples at one step. */
struct wl_structure {
    double icc;          /* intra-group correlation of log(total tokens), one-way ANOVA */
    double p99_p50;      /* of the total tokens */
    double tail_share;   /* mean over batches of 512 trajectories of the share of the
                          * batch's rollout time after 90 % of it finished (each
                          * trajectory alone: WL_TPOT_S a generated token + its tools) */
    double mean_tokens;  /* mean total tokens */
    double mean_turns;
};
#define WL_TPOT_S 0.03   /* seconds per generated token of a trajectory decoding alone */
void workload_structure(const struct workload *wl, uint64_t seed, int n_groups, int group_size,
                        int step, struct wl_structure *out);

/* Draws n trajectories at the given step and prints their statistics (mean, p50,
 * p90, p99 of total length, turns, tool mix). */
void workload_describe(const struct workload *wl, uint64_t seed, int n, int step, FILE *out);

#endif
