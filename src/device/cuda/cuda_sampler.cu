/*
 * Token sampling on the GPU (include/libra/cuda_api.h): greedy and plain temperature
 * sampling with the decisions of sampler_sample (src/model/sampler.c) -- the same
 * stream key (seed, trajectory, position, SAMPLER_PURPOSE) and the same uniform draw
 * through include/libra/rng_core.h, the same p_i = (float)exp(logit / T - max) in
 * double, and the inverse CDF in id order in double -- with one difference in the
 * order of the additions: the normaliser is the sum of 256 chunk sums (each in id
 * order, the chunks in id order) where the CPU adds all V in one run. The token is
 * sampler_sample's except where that rounds u * sum across a sampling boundary (a
 * measure-zero coincidence, as for sampler_sample_tp's per-rank sums), and a last-bit
 * difference of the device's double exp from the host's could do the same. Greedy
 * picks exactly. top-k / top-p are not here yet.
 * One block per row; scratch (B, V) floats holds the p_i.
 */
#include "cuda_internal.h"

#include <math.h>

#include "libra/rng_core.h"
#include "libra/sampler.h"

#define SAMP_THREADS 256

__global__ static void sample_k(int32_t *tok, float *logprob, const float *logits, int V,
                                const int64_t *traj, const int64_t *pos, float temperature,
                                uint64_t seed, float *scratch)
{
    __shared__ double dpart[SAMP_THREADS];
    __shared__ int ipart[SAMP_THREADS];
    __shared__ double csum[SAMP_THREADS];
    int r = blockIdx.x;
    const float *x = logits + (size_t)r * V;
    float *p = scratch + (size_t)r * V;
    if (!(temperature > 0.0f)) { /* greedy: argmax, ties to the lowest id */
        int best = -1;
        for (int i = threadIdx.x; i < V; i += blockDim.x)
            if (best < 0 || x[i] > x[best]) best = i;
        ipart[threadIdx.x] = best;
        __syncthreads();
        for (int k = SAMP_THREADS / 2; k > 0; k /= 2) {
            if ((int)threadIdx.x < k) {
                int a = ipart[threadIdx.x], b = ipart[threadIdx.x + k];
                if (a < 0 || (b >= 0 && (x[b] > x[a] || (x[b] == x[a] && b < a))))
                    ipart[threadIdx.x] = b;
            }
            __syncthreads();
        }
        int t = ipart[0];
        double m = x[t], s = 0.0;
        for (int i = threadIdx.x; i < V; i += blockDim.x) s += exp((double)x[i] - m);
        dpart[threadIdx.x] = s;
        __syncthreads();
        for (int k = SAMP_THREADS / 2; k > 0; k /= 2) {
            if ((int)threadIdx.x < k) dpart[threadIdx.x] += dpart[threadIdx.x + k];
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            tok[r] = t;
            if (logprob) logprob[r] = (float)-log(dpart[0]);
        }
        return;
    }
    const double T = temperature;
    double m = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        double z = (double)x[i] / T;
        if (z > m) m = z;
    }
    dpart[threadIdx.x] = m;
    __syncthreads();
    for (int k = SAMP_THREADS / 2; k > 0; k /= 2) {
        if ((int)threadIdx.x < k && dpart[threadIdx.x + k] > dpart[threadIdx.x])
            dpart[threadIdx.x] = dpart[threadIdx.x + k];
        __syncthreads();
    }
    m = dpart[0];
    __syncthreads();
    /* Thread j owns the ids [j c, (j + 1) c): it forms their p_i and sums them in id
     * order; thread 0 then adds the chunk sums in chunk order and walks the chunk where
     * the draw lands. */
    int c = (V + SAMP_THREADS - 1) / SAMP_THREADS;
    int lo = (int)threadIdx.x * c, hi = lo + c < V ? lo + c : V;
    double se = 0.0, cs = 0.0;
    for (int i = lo; i < hi; i++) {
        double e = exp((double)x[i] / T - m);
        float pi = (float)e;
        p[i] = pi;
        se += e;
        cs += pi;
    }
    dpart[threadIdx.x] = se;
    csum[threadIdx.x] = cs;
    __syncthreads();
    for (int k = SAMP_THREADS / 2; k > 0; k /= 2) {
        if ((int)threadIdx.x < k) dpart[threadIdx.x] += dpart[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x != 0) return;
    double sum_exact = dpart[0], sum = 0.0;
    for (int j = 0; j < SAMP_THREADS; j++) sum += csum[j];
    uint64_t key = rng_core_key(seed, (uint64_t)traj[r], (uint64_t)pos[r], SAMPLER_PURPOSE);
    double u = rng_core_uniform(key, 0) * sum, cum = 0.0;
    int j = 0;
    while (j < SAMP_THREADS - 1 && !(u < cum + csum[j])) cum += csum[j++];
    int t = -1;
    for (int i = j * c; i < V && t < 0; i++) { /* on past the chunk if rounding says so */
        cum += p[i];
        if (u < cum) t = i;
    }
    for (int i = V - 1; t < 0; i--) /* rounding: the last id that has mass */
        if (p[i] > 0 || i == 0) t = i;
    tok[r] = t;
    if (logprob) logprob[r] = (float)((double)x[t] / T - m - log(sum_exact));
}

extern "C" int cu_sample(int32_t *tok, float *logprob, const float *logits, int B, int V,
                         const int64_t *traj, const int64_t *pos, float temperature,
                         uint64_t seed, float *scratch)
{
    if (B <= 0) return 0;
    sample_k<<<B, SAMP_THREADS, 0, cu_stream()>>>(tok, logprob, logits, V, traj, pos,
                                                  temperature, seed, scratch);
    CU_LAUNCHED("sample");
    return 0;
}
