/*
 * Token sampling: greedy (temperature 0), or temperature with optional top-k and
 * top-p (nucleus). Randomness is counter-based and keyed by (seed, trajectory id,
 * position), so a trajectory's tokens do not depend on which sequences share its
 * batch or which rank runs it (STYLE 10).
 *
 * The behaviour log-prob returned with each token is log softmax(logits / T) at the
 * sampled token over the FULL vocabulary (T = 1 for greedy) -- the quantity the
 * training path computes -- not the renormalised top-k/top-p distribution.
 */
#ifndef LIBRA_SAMPLER_H
#define LIBRA_SAMPLER_H

#include <stdint.h>

struct sampler_config {
    float temperature; /* 0 = greedy */
    float top_p;       /* (0, 1]; 1 = off */
    int top_k;         /* 0 = off */
    uint64_t seed;
};

/* Samples from logits (V); scratch holds at least 2 * V floats. */
int32_t sampler_sample(const struct sampler_config *c, const float *logits, int V,
                       int64_t traj_id, int64_t position, float *logprob, float *scratch);

#endif
