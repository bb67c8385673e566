/*
 * Token sampling on the GPU (include/libra/cuda_api.h): the launchers of the sampling
 * kernels -- whole rows, and a TP rank's vocabulary-parallel columns --, one block of
 * SAMP_THREADS threads per row. The kernels and what they compute are in
 * cuda_sampler_kernel.cuh.
 */
#include "cuda_internal.h"

#include <math.h>

#include "libra/cuda_api.h"
#include "libra/rng_core.h"
#include "libra/sampler.h"

#include "cuda_sampler_kernel.cuh"

extern "C" int cu_sample(int32_t *tok, float *logprob, const float *logits, int B, int V,
                         const int64_t *traj, const int64_t *pos, float temperature, int top_k,
                         float top_p, uint64_t seed, float *scratch)
{
    if (B <= 0) return 0;
    sample_k<<<B, SAMP_THREADS, 0, cu_stream()>>>(tok, logprob, logits, V, traj, pos,
                                                  temperature, top_k, top_p, seed, scratch);
    CU_LAUNCHED("sample");
    return 0;
}

extern "C" int cu_vocab_greedy_stats(double *xb, const float *logits, int B, int Vl, int v0,
                                     int slot, int slots)
{
    if (B <= 0) return 0;
    vocab_greedy_k<<<B, SAMP_THREADS, 0, cu_stream()>>>(xb, logits, Vl, v0, slot, slots);
    CU_LAUNCHED("vocab_greedy_stats");
    return 0;
}

extern "C" int cu_vocab_sample_max(double *mx, const float *logits, int B, int Vl,
                                   float temperature)
{
    if (B <= 0) return 0;
    vocab_sample_max_k<<<B, SAMP_THREADS, 0, cu_stream()>>>(mx, logits, Vl, temperature);
    CU_LAUNCHED("vocab_sample_max");
    return 0;
}

extern "C" int cu_vocab_sample_sums(double *xb, float *p, const float *logits, const double *mx,
                                    int B, int Vl, float temperature, int slot, int slots)
{
    if (B <= 0) return 0;
    vocab_sample_sums_k<<<B, SAMP_THREADS, 0, cu_stream()>>>(xb, p, logits, mx, Vl, temperature,
                                                             slot, slots);
    CU_LAUNCHED("vocab_sample_sums");
    return 0;
}

extern "C" int cu_vocab_sample_topk(double *xb, float *scratch, const float *logits,
                                    const double *mx, int B, int Vl, int v0, float temperature,
                                    int kr, int off, int n, int slot, int slots)
{
    if (B <= 0) return 0;
    vocab_sample_topk_k<<<B, SAMP_THREADS, 0, cu_stream()>>>(xb, scratch, logits, mx, Vl, v0,
                                                             temperature, kr, off, n, slot,
                                                             slots);
    CU_LAUNCHED("vocab_sample_topk");
    return 0;
}

extern "C" int cu_vocab_sample_pick(double *res, const float *logits, const float *p,
                                    const double *plan, const double *mx, int B, int Vl, int v0,
                                    float temperature)
{
    if (B <= 0) return 0;
    vocab_sample_pick_k<<<B, SAMP_THREADS, 0, cu_stream()>>>(res, logits, p, plan, mx, Vl, v0,
                                                             temperature);
    CU_LAUNCHED("vocab_sample_pick");
    return 0;
}
