/*
 * The launchers of the optimizer's kernels (include/libra/cuda_api.h); the kernels are
 * in cuda_optim.cuh.
 */
#include "cuda_internal.h"

#include "libra/cuda_api.h"
#include "libra/hash_core.h"

#include "cuda_optim.cuh"

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

/* The sum fingerprint: integer sums, so any grid gives the same bits. */
extern "C" int cu_weights_hash(uint64_t *out, const float *x, int64_t n)
{
    if (n <= 0) {
        *out = 0;
        return 0;
    }
    if (cu_scratch_grow(&ss_part, &ss_bytes, (SS_MAX_BLOCKS + 1) * sizeof(double))) return -1;
    unsigned long long *part = (unsigned long long *)ss_part;
    int64_t blocks = (n + SS_THREADS - 1) / SS_THREADS;
    int nb = (int)(blocks < SS_MAX_BLOCKS ? blocks : SS_MAX_BLOCKS);
    sum_hash_k<<<(unsigned)nb, SS_THREADS, 0, cu_stream()>>>(part + 1, x, n);
    sum_hash_parts_k<<<1, SS_THREADS, 0, cu_stream()>>>(part, part + 1, nb);
    CU_LAUNCHED("weights_hash");
    unsigned long long h;
    CU_CHECK(cudaMemcpy(&h, part, sizeof h, cudaMemcpyDeviceToHost));
    *out = (uint64_t)h;
    return 0;
}

extern "C" int cu_adamw_update(float *params, float *m, float *v, uint16_t *w16,
                               const float *grads, int64_t n, const struct cuda_adamw *s)
{
    if (n <= 0) return 0;
    adamw_k<<<EW_BLOCKS(n), EW_THREADS, 0, cu_stream()>>>(params, m, v, w16, grads, n, *s);
    CU_LAUNCHED("adamw_update");
    return 0;
}
