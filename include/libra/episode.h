/*
 * Whole episodes in one process, no MPI: the model answers problems of an
 * environment turn by turn, with the tool run inline. Used by `libra sft` to measure
 * the greedy accuracy of the model it trains, by `libra eval`, and by tests; the
 * distributed job runs the same turns through the rollout engine instead.
 * Decoding is batched over problems (tfm_decoder slots).
 */
#ifndef LIBRA_EPISODE_H
#define LIBRA_EPISODE_H

#include <stdint.h>

#include "libra/env.h"
#include "libra/sampler.h"
#include "libra/tfm.h"

struct episode_config {
    int max_turns;
    int max_tokens_per_turn;
    int max_tokens;        /* context per episode */
    struct sampler_config sampling; /* temperature 0 = greedy */
    int batch;             /* problems decoded together */
};

struct episode_stats {
    int n, correct;
    double reward_sum;
    int64_t gen_tokens, tool_calls, tool_failures;
    int answered;          /* episodes that produced an <answer> */
};

/* Runs problems first .. first + n - 1 of split; fills st. If transcripts != NULL,
 * the first n_transcripts episodes are printed there as text. */
void episode_run(const struct env *e, const struct tfm_config *mc, const struct tfm_params *p,
                 const struct episode_config *ec, int split, int64_t first, int n,
                 struct episode_stats *st, void *transcripts_FILE, int n_transcripts);

#endif
