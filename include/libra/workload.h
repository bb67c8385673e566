/*
 * The workload model of the emulated backend: what an agentic RL rollout looks like
 * in tokens and tool returns, without a model. Per trajectory: a prompt length; per
 * turn a number of generated tokens (heavy-tailed) and, unless the turn is final, a
 * tool call with a type, payload tokens, latency and status (success, failure,
 * timeout). Causal structure: a failed or timed-out tool return, or a large payload,
 * raises the probability that more turns follow -- the signal C-MLFQ exploits.
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
    /* reward: P(reward = 1) = clamp(base + per_step * step - per_failure * failures) */
    double reward_base, reward_per_step, reward_per_failure;
};

/* State of one trajectory as the controller tracks it (what a turn depends on). */
struct wl_traj_state {
    int64_t traj_id;
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
/* Draws n trajectories at the given step and prints their statistics (mean, p50,
 * p90, p99 of total length, turns, tool mix). */
void workload_describe(const struct workload *wl, uint64_t seed, int n, int step, FILE *out);

#endif
