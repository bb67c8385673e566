/*
 * The optimizer's kernels (include/libra/cuda_api.h): the sum of squares behind the
 * global gradient norm, and the fused AdamW element update with the per-step scalars
 * of include/libra/adamw.h (adamw_scalars_of), so CPU and GPU do the same arithmetic.
 */
#include "cuda_internal.h"

#include "libra/cuda_api.h"

#define SS_THREADS 256

/* Per block: the sum of squares in double, into part[blockIdx.x]. */
__global__ static void sum_squares_k(double *part, const float *x, int64_t n)
{
    __shared__ double sh[SS_THREADS];
    double s = 0.0;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x)
        s += (double)x[k] * x[k];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int h = SS_THREADS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h) sh[threadIdx.x] += sh[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}

/* One block: the nb partial sums, in a fixed order, into *out. */
__global__ static void sum_parts_k(double *out, const double *part, int nb)
{
    __shared__ double sh[SS_THREADS];
    double s = 0.0;
    for (int k = (int)threadIdx.x; k < nb; k += SS_THREADS) s += part[k];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int h = SS_THREADS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h) sh[threadIdx.x] += sh[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = sh[0];
}

/* The partial sums' scratch, made once (cu_scratch_grow: the sum of squares is never
 * called inside a graph recording). A cudaMalloc and cudaFree per call -- a device
 * synchronisation each -- cost a TP shard's gradient norm one of each per slice. */
#define SS_MAX_BLOCKS 1024
static void *ss_part;
static size_t ss_bytes;

/* Deterministic: no atomics, the same grid for the same n, so the same bits every call
 * (training replicas clip by this norm and must stay identical). */
extern "C" int cu_sum_squares(double *out, const float *x, int64_t n)
{
    if (n <= 0) {
        *out = 0.0;
        return 0;
    }
    if (cu_scratch_grow(&ss_part, &ss_bytes, (SS_MAX_BLOCKS + 1) * sizeof(double))) return -1;
    double *part = (double *)ss_part;
    int64_t blocks = (n + SS_THREADS - 1) / SS_THREADS;
    int nb = (int)(blocks < SS_MAX_BLOCKS ? blocks : SS_MAX_BLOCKS);
    sum_squares_k<<<(unsigned)nb, SS_THREADS, 0, cu_stream()>>>(part + 1, x, n);
    sum_parts_k<<<1, SS_THREADS, 0, cu_stream()>>>(part, part + 1, nb);
    CU_LAUNCHED("sum_squares");
    CU_CHECK(cudaMemcpy(out, part, sizeof *out, cudaMemcpyDeviceToHost));
    return 0;
}

__global__ static void adamw_k(float *p, float *m, float *v, const float *grads, int64_t n,
                               struct cuda_adamw s)
{
    int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    float g = s.clip != 1.0f ? grads[k] * s.clip : grads[k];
    float pk = p[k] * s.decay;
    float mk = m[k] + s.w1 * (g - m[k]);
    float vk = v[k] * s.beta2 + s.w2 * g * g;
    float denom = sqrtf(vk) / s.bc2_sqrt + s.eps;
    m[k] = mk;
    v[k] = vk;
    p[k] = pk - s.step_size * mk / denom;
}

extern "C" int cu_adamw_update(float *params, float *m, float *v, const float *grads,
                               int64_t n, const struct cuda_adamw *s)
{
    if (n <= 0) return 0;
    adamw_k<<<EW_BLOCKS(n), EW_THREADS, 0, cu_stream()>>>(params, m, v, grads, n, *s);
    CU_LAUNCHED("adamw_update");
    return 0;
}
