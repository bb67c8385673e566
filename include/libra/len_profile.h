/*
 * A length profile: the trajectories of one training batch, as the planner's cost
 * model sees them (what each costs in tokens, turns and tool time). The planner
 * normalises both stages to one batch (fixes reference/planner.md §6.2, which
 * compared the rollout of the whole history with the training of one batch): the
 * profile always holds batch_size samples, drawn from the recent history of finished
 * trajectories, or at start-up from the workload model.
 *
 * The history is a ring of the most recent finished trajectories (rank 0 only);
 * lp_from_history resamples it deterministically to n samples: the history sorted by
 * total tokens, sample i taken at rank round(i (H - 1) / (n - 1)) -- every quantile
 * represented, the longest trajectory always in.
 */
#ifndef LIBRA_LEN_PROFILE_H
#define LIBRA_LEN_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "libra/config.h"
#include "libra/workload.h"

struct traj_sample {
    int32_t prompt; /* prompt tokens */
    int32_t gen;    /* generated tokens, all turns */
    int32_t tool;   /* tool-return tokens, all turns (prefilled at each following turn) */
    int32_t turns;  /* model turns (>= 1) */
    double tool_s;  /* tool latency summed over the turns, seconds */
};

/* Total context of a finished trajectory: prompt + gen + tool. */
static inline int64_t traj_sample_tokens(const struct traj_sample *s)
{
    return (int64_t)s->prompt + s->gen + s->tool;
}

struct len_profile {
    int n;                 /* samples */
    struct traj_sample *s; /* (n) */
    /* Batches the pipeline overlaps (1 = one batch at a time; the planner sets
     * max_staleness + 1): a trajectory may take that many step intervals, so the
     * rollout model spreads each trajectory's own decode and tool time over it. */
    double overlap;
    /* 1: the rollout model leaves out what a trajectory waits for while other samples
     * share its instance's batch (their KV reads in every decode step): an optimistic
     * cost, for a bound (libra-sim --oracle). 0 (the planner's): counted. */
    int contention_free;
};

/* The ring of finished trajectories. */
struct len_history {
    int cap, n, next;      /* capacity, filled, next slot */
    int64_t total;         /* ever added */
    struct traj_sample *s; /* (cap) */
};

void lh_init(struct len_history *h, int cap);
void lh_free(struct len_history *h);
void lh_add(struct len_history *h, const struct traj_sample *s);

void lp_init(struct len_profile *p);
void lp_free(struct len_profile *p);
/* n samples from the history (above); -1 if the history is empty. */
int lp_from_history(struct len_profile *p, const struct len_history *h, int n);
/* n trajectories simulated from the workload model at training step `step`,
 * numbered as the controller numbers them: ids first, first + 1, ..., in GRPO groups
 * of ro->n_samples that share a prompt (prompt id = id / n_samples: the group's
 * latent difficulty); deterministic in seed; each capped at ro->max_turns turns,
 * ro->max_tokens_per_turn per turn and ro->max_tokens of context as the controller
 * caps them. */
void lp_from_workload(struct len_profile *p, const struct workload *wl,
                      const struct rollout_config *ro, uint64_t seed, int step, int64_t first,
                      int n);
/* Sum of tokens and of squared total lengths (the training cost model's inputs). */
void lp_token_sums(const struct len_profile *p, double *tokens, double *sum_len_sq);
/* Longest total context of a sample. */
int64_t lp_max_tokens(const struct len_profile *p);

#endif
