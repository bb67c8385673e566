/*
 * Private to src/model/: the candidate machinery of the token sampler (sampler.c),
 * shared by the single-rank sampler and the vocabulary-parallel one (sampler_tp.c), so
 * that both rank, truncate and draw with the same code.
 *
 * p (n): unnormalised probabilities indexed by candidate index; c: lists of candidate
 * indices stored as floats (exact below 2^24). Rank order: more probable first, equal
 * probabilities by the lower index (= the lower token id when indices follow ids).
 */
#ifndef LIBRA_MODEL_SAMPLER_INTERNAL_H
#define LIBRA_MODEL_SAMPLER_INTERNAL_H

#include <stdint.h>

#include "libra/rng.h"
#include "libra/sampler.h" /* SAMPLER_PURPOSE */

/* Orders c[0, n) best first (heap sort). */
void sampler_sort(const float *p, float *c, int n);
/* The k best of the indices 0..V-1, ordered best first, in c[0, k) (k <= V). */
void sampler_select_top_k(const float *p, float *c, int V, int k);
/* Smallest prefix of the sorted c[0, n) whose mass reaches target: its length, or 0
 * when the whole list falls short. *mass gets the prefix mass. */
int sampler_nucleus(const float *p, const float *c, int n, double target, double *mass);
/* Inverse CDF over the candidates c[0, n) (mass their total): one uniform draw of r;
 * returns the chosen index. */
int32_t sampler_draw(const float *p, const float *c, int n, double mass, struct rng *r);

#endif
