/*
 * Token sampling on the GPU (include/libra/cuda_api.h): the launcher of the sampling
 * kernel, one block of SAMP_THREADS threads per row. The kernel and what it computes
 * are in cuda_sampler_kernel.cuh.
 */
#include "cuda_internal.h"

#include <math.h>

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
