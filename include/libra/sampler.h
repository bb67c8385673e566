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

#include <stddef.h>
#include <stdint.h>

struct rng; /* include/libra/rng.h */

/* "sampler": the purpose component of the RNG stream key (seed, traj, position, this);
 * the CUDA sampler keys its draws the same way (include/libra/rng_core.h). */
#define SAMPLER_PURPOSE 0x73616d706c6572ULL

struct sampler_config {
    float temperature; /* 0 = greedy */
    float top_p;       /* (0, 1]; 1 = off */
    int top_k;         /* 0 = off */
    uint64_t seed;
};

/* Samples from logits (V); scratch holds at least 2 * V floats. */
int32_t sampler_sample(const struct sampler_config *c, const float *logits, int V,
                       int64_t traj_id, int64_t position, float *logprob, float *scratch);

struct tfm_tp; /* include/libra/tfm_tp.h */

/* sampler_sample over vocabulary-parallel logits (collective): this rank holds the
 * columns [tp->v0, tp->v1) of the full logits (V = tp->full.vocab_size) as
 * local_logits (v1 - v0), e.g. a row of tfm_decoder_step's local logits. Every rank of
 * the group calls it with the same (c, traj_id, position) and gets the SAME global
 * token id and behaviour log-prob (over the full vocabulary), and the token is the one
 * sampler_sample gives on the full logits (same key, same rules: greedy argmax with
 * ties to the lowest id; inverse CDF in id order; top-k; top-p; top-k then top-p),
 * except where the ranks' partial sums, added in rank order instead of id order, round
 * across a sampling boundary (a measure-zero coincidence; greedy and top-k pick
 * exactly). The full vocabulary is never gathered. Cost, in all-reduces over tp->comm
 * (f64; t the degree), besides O(v1 - v0) local work:
 *   greedy           one sum of 3t (each rank's max, argmax and sum of exp)
 *   temperature      a max of 1, a sum of 2t (each rank's sums), a sum of 2 (the token
 *                    and its log-prob, from the rank whose range holds u * total)
 *   top-k (+ top-p)  a max of 1, a sum of t + 2 sum_r min(k, Vl_r) (each rank's top-k
 *                    candidates as (id, logit), then the single-rank selection on them)
 *   top-p alone      a max of 1, a sum of 2t, a sum of t (survivor counts), a sum of 2N
 *                    for the N survivors of the single-rank cutoff p >= (1 - top_p) /
 *                    (V - 1) * sum (up to V for a flat distribution); if rounding leaves
 *                    the survivors short of top_p, one more sum of 2V (all ids), as
 *                    sampler_sample then sorts all V.
 * scratch: sampler_tp_scratch_floats(c, tp) floats (at most 2 (v1 - v0) + 6V + 6t + 1),
 * 8-byte aligned (from malloc): part of it holds doubles. t == 1: sampler_sample
 * (scratch 2V), bitwise. */
int32_t sampler_sample_tp(const struct sampler_config *c, const struct tfm_tp *tp,
                          const float *local_logits, int64_t traj_id, int64_t position,
                          float *logprob, float *scratch);
size_t sampler_tp_scratch_floats(const struct sampler_config *c, const struct tfm_tp *tp);

/* The steps of sampler_sample_tp's greedy and plain-temperature modes, for a device
 * that runs a rank's part itself and exchanges the slots (the GPU decoder batches them
 * over its rows: include/libra/gpu_decode.h). A rank holds Vl logits x, the columns
 * from v0; slots are every rank's entries in rank order, exchanged by a sum
 * all-reduce of a vector where each rank filled its own slot and left zeros elsewhere.
 *   greedy       sampler_tp_greedy_stats into slot r (3 doubles: max, the global id of
 *                its first maximum, sum exp(x - max)); exchange; sampler_tp_greedy_pick
 *   temperature  m = the max all-reduce of sampler_tp_local_max (of x / T);
 *                sampler_tp_sums: p_i = (float)exp(x_i / T - m) into p and (their sum,
 *                the sum of exp in double) into slot r (2 doubles); exchange;
 *                sampler_tp_owner: the rank whose share of the cumulative sum holds the
 *                draw (u uniform in (0, 1), drawn as sampler_sample draws it); that
 *                rank's sampler_tp_scan gives its local id, the log-prob
 *                x_id / T - m - log(total_exact); it announces both (a sum of 2). */
void sampler_tp_greedy_stats(const float *x, int Vl, int v0, double *slot);
int32_t sampler_tp_greedy_pick(const double *slots, int t, float *logprob);
double sampler_tp_local_max(const float *x, int Vl, double T);
void sampler_tp_sums(const float *x, int Vl, double T, double m, float *p, double *slot);
struct sampler_tp_draw {
    double u;           /* the draw times the total */
    double own_start;   /* where the owner's share of the cumulative sum starts */
    double total_exact; /* the sum of exp over the vocabulary (the log-prob's) */
};
int sampler_tp_owner(const double *slots, int t, double u, struct sampler_tp_draw *d);
int sampler_tp_scan(const float *p, int Vl, const struct sampler_tp_draw *d);
/* Top-k (then top-p) with 0 < k < V: with m as above, rank r's share is its
 * min(k, Vl) most probable ids (p_i = (float)exp(x_i / T - m), ties to the lower id)
 * in id order; sampler_tp_top_k_slot gives that count, and the offset *off of rank r's
 * entries among the *n of all ranks. The exchanged vector is (t + 2n) doubles: each
 * rank's sum of exp(x / T - m) in double at [r], then each candidate's (global id,
 * x_i / T - m) at t + 2 (off + j). sampler_tp_top_k_entries fills rank `slot`'s part
 * of a zeroed row (kr its count; scratch 2 Vl floats); sampler_tp_top_k_pick draws
 * from the exchanged row as sampler_sample_tp does (the first uniform of rng r;
 * scratch 2n floats). */
int sampler_tp_top_k_slot(const struct tfm_tp *tp, int k, int r, int *off, int *n);
void sampler_tp_top_k_entries(const float *x, int Vl, int v0, double T, double m, int kr,
                              int off, int slot, int slots, double *row, float *scratch);
int32_t sampler_tp_top_k_pick(const struct sampler_config *c, const double *slots, int t, int n,
                              struct rng *r, float *logprob, float *scratch);

#endif
