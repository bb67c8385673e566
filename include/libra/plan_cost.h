/*
 * The planner's cost model: what a candidate plan costs per training step, built on
 * the per-GPU primitives of include/libra/cost.h (decode step, prefill, KV capacity,
 * training FLOPs, all-reduce, weight sync). Reference: reference/planner.md §1, with
 * the fixes of its §6:
 *   §6.1  per GPU and correct in TP (the primitives already are);
 *   §6.2  the rollout is evaluated on one batch (struct len_profile), like training;
 *   §6.3  rollout makespan is tail-aware: an instance takes at least its longest
 *         trajectory's small-batch decode time plus its tool latency and per-turn
 *         re-prefill; tool-return tokens are prefilled; every instance a trajectory
 *         lands on is checked for KV memory, not only the largest;
 *   §6.4  training time from FLOPs at an MFU with TP/PP/DP communication, memory
 *         with real optimizer state (cost_params.optimizer_bytes_per_param, 16 B by
 *         default) sharded over DP as a distributed optimizer shards it;
 *   §6.5  transitions (re-split, weight transfer to joining ranks, KV lost by
 *         dissolved instances) and joins are modelled, not one constant.
 * Every function is pure: same inputs, same result.
 */
#ifndef LIBRA_PLAN_COST_H
#define LIBRA_PLAN_COST_H

#include <stddef.h>
#include <stdint.h>

#include "libra/cost.h"
#include "libra/len_profile.h"

/* TP degree of rollout class k (0..PC_N_TP-1): 1, 2, 4, 8. */
#define PC_N_TP 4
static inline int pc_tp_of(int k) { return 1 << k; }

/* ---- training ---- */

/* One training configuration: tp x pp GPUs per replica, dp replicas, micro-batch of
 * `micro` sequences; ranks used = tp pp dp. */
struct train_shape {
    int tp, pp, dp, micro;
};

struct train_est {
    double step_s;        /* total: compute + tp_comm + pp_bubble + dp_comm */
    double compute_s;     /* FLOPs of the slowest replica's share / (peak mfu), over tp pp */
    double tp_comm_s;     /* TP all-reduces of activations (2 per layer fwd, 2 bwd) */
    double pp_bubble_s;   /* 1F1B pipeline fill and drain, plus stage-boundary sends */
    double dp_comm_s;     /* gradient all-reduce over dp (and over dp + hybrids) */
    double mem_bytes;     /* peak per GPU */
    double mem_limit;     /* bytes per GPU available (capacity x (1 - frag) - margin) */
    int oom;              /* mem_bytes > mem_limit */
};

/* One step on n_seqs sequences of `tokens` tokens in total (sum of squared lengths
 * sum_len_sq, longest max_len), split evenly over dp replicas plus n_hybrid extra
 * replicas of the same shape. Fills out; returns out->step_s, or INFINITY when the
 * shape does not fit in memory (out->oom set, out->mem_bytes what it would need). */
double pc_train_step(const struct cost_model *c, const struct train_shape *s, int n_hybrid,
                     int n_seqs, double tokens, double sum_len_sq, double max_len,
                     struct train_est *out);

/* Bytes of the fp32 log-prob recompute of `batch` sequences of S tokens with the
 * vocabulary sharded over tp: batch (S - 1) ceil(V / tp) 4 x 1.5 (reference §4:
 * Qwen3-14B, S = 32768, TP 8 -> 3.73 GB). */
double pc_logits_bytes(const struct model_profile *m, int batch, int S, int tp);

/* ---- rollout ---- */

struct rollout_est {
    double makespan_s;    /* T_rollout of the batch: the slowest instance */
    double thru_s;        /* that instance's throughput-bound time */
    double tail_s;        /* that instance's loaded tail (its longest chain plus the KV
                             reads of the samples sharing its batch) */
    double prefill_s;     /* that instance's prefill (prompts, tool returns, re-prefill) */
    double chain_s;       /* the largest loaded tail of any instance: the longest
                             trajectory's chain over the overlap */
    int binding;          /* index of the slowest instance (0-based over the layout) */
    int oom;              /* some sample fits no instance's KV capacity */
    int64_t oom_tokens;   /* that sample's context */
    int cut;              /* pc_rollout_prepared_cutoff stopped early: makespan_s is a
                             partial makespan above the cutoff, the other fields unset */
};

/* The batch lp rolled out on counts[k] instances of TP pc_tp_of(k). Placement as in
 * the reference (longest first onto the instance that would finish it earliest, ties
 * to the lowest index), but only onto instances whose KV capacity holds the sample's
 * whole context; each instance's makespan is
 *     max(throughput bound, tail bound) + prefill
 * (docs/planner.md gives the terms). Returns out->makespan_s, INFINITY on OOM or when
 * the layout has no instance. */
double pc_rollout(const struct cost_model *c, const int counts[PC_N_TP],
                  const struct len_profile *lp, struct rollout_est *out);
/* A lower bound of pc_rollout over every layout of n_gpus GPUs with TP in
 * [1, max_tp]: the batch's decode work at the best per-GPU throughput of any
 * allowed TP, divided by n_gpus. Cheap; lets the search skip GPU counts. */
double pc_rollout_lower_bound(const struct cost_model *c, int n_gpus, int max_tp,
                              const struct len_profile *lp);

/* The same two functions with the profile's per-sample, per-class costs computed
 * once (the search calls them thousands of times on one profile); the results are
 * bitwise those of pc_rollout / pc_rollout_lower_bound, which wrap them. */
struct pc_rollout_prep;
struct pc_rollout_prep *pc_rollout_prepare(const struct cost_model *c, const struct len_profile *lp);
void pc_rollout_prep_free(struct pc_rollout_prep *p);
double pc_rollout_prepared(const struct pc_rollout_prep *p, const int counts[PC_N_TP],
                           struct rollout_est *out);
/* pc_rollout_prepared that stops the placement as soon as some instance's partial
 * makespan exceeds cutoff (it only grows as samples are placed): then out->cut = 1 and
 * it returns that partial makespan, a value > cutoff and <= the full result. Otherwise
 * (the full result is <= cutoff, or INFINITY) it returns bitwise what
 * pc_rollout_prepared returns, with out->cut = 0. */
double pc_rollout_prepared_cutoff(const struct pc_rollout_prep *p, const int counts[PC_N_TP],
                                  double cutoff, struct rollout_est *out);
double pc_rollout_lower_bound_prepared(const struct pc_rollout_prep *p, int n_gpus, int max_tp);
/* A floor of rollout_est.chain_s over every layout of classes up to max_tp: the longest
 * of the samples' own chains, each on its fastest class (max_s min_t tl_t(s));
 * INFINITY when a sample fits no class. */
double pc_chain_lower_bound_prepared(const struct pc_rollout_prep *p, int max_tp);

/* ---- transitions ---- */

struct transition {
    int to_rollout;        /* ranks that become rollout ranks (need the weights) */
    int to_train;          /* ranks that join the core training group (weights + state) */
    int to_hybrid;         /* ranks lent to training (weights + optimizer shard) */
    int dp_after;          /* core DP after the change (optimizer shard = 1 / dp) */
    double kv_lost_tokens; /* KV tokens resident in instances that are dissolved */
    int rollout_gpus_after;
    double resplit_s;      /* fixed cost of broadcasting the plan and re-splitting */
};

/* Seconds of step time a transition costs: resplit_s + the weight (and state)
 * transfers, which run in parallel over the joiners (the slowest kind counts) + the
 * re-prefill of the lost KV spread over the rollout GPUs after the change. */
double pc_transition_s(const struct cost_model *c, const struct transition *t);
/* What a lent replica fetches before it may contribute: the current weights and its
 * optimizer shard (1 / (dp + 1) of the state), over the inter-node network. */
double pc_join_fetch_s(const struct cost_model *c, int dp_core);

#endif
