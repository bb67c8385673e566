/*
 * The launchers of the elementwise and row kernels (include/libra/cuda_api.h) and the
 * report of a device-side error; the kernels are in cuda_kernels.cuh.
 */
#include "cuda_internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>

#include "cuda_kernels.cuh"

extern "C" int cu_embed_gather(float *x, const uint16_t *embed, const int32_t *tokens, int N,
                               int C, int V)
{
    if (N <= 0) return 0;
    CU_CHECK(cu_launch_overlapped(embed_gather_k, dim3((unsigned)N), dim3(128), x, embed, tokens,
                                  C, V));
    return 0;
}

extern "C" int cu_embed_scatter_add(float *dembed, const float *dx, const int32_t *tokens,
                                    int N, int C, int V)
{
    if (N <= 0) return 0;
    embed_scatter_add_k<<<N, 128, 0, cu_stream()>>>(dembed, dx, tokens, C, V);
    CU_LAUNCHED("embed_scatter_add");
    return 0;
}

static int rmsnorm_launch(float *y, uint16_t *y16, const float *x, const uint16_t *w, int N,
                          int C, float eps)
{
    if (N <= 0) return 0;
    rmsnorm_fwd_k<<<N, ROW_THREADS, 0, cu_stream()>>>(y, y16, x, w, C, eps);
    CU_LAUNCHED("rmsnorm_fwd");
    return 0;
}

extern "C" int cu_rmsnorm_fwd(float *y, const float *x, const uint16_t *w, int N, int C,
                              float eps)
{
    return rmsnorm_launch(y, NULL, x, w, N, C, eps);
}

extern "C" int cu_rmsnorm_fwd16(uint16_t *y16, const float *x, const uint16_t *w, int N, int C,
                                float eps)
{
    return rmsnorm_launch(NULL, y16, x, w, N, C, eps);
}

extern "C" int cu_rmsnorm_bwd(float *dx, uint16_t *dx16, float *dw, const float *dy,
                              const float *x, const float *w, float *rstd, int N, int C,
                              float eps)
{
    if (N <= 0) return 0;
    rmsnorm_bwd_dx_k<<<N, ROW_THREADS, 0, cu_stream()>>>(dx, dx16, dy, x, w, rstd, C, eps);
    CU_LAUNCHED("rmsnorm_bwd (dx)");
    if (dw) {
        /* dw (C) += sum over rows of dy * x r (cuda_colsum.cu) */
        if (cu_column_sums(dw, dy, x, rstd, N, C)) return -1;
    }
    return 0;
}

static int rope_launch(float *x, const int32_t *pos, int N, int n_heads, int D,
                       const float *rope, float sign)
{
    long long n = (long long)N * n_heads * (D / 2);
    if (n <= 0) return 0;
    rope_k<<<EW_BLOCKS(n), EW_THREADS, 0, cu_stream()>>>(x, pos, N, n_heads, D, rope, sign);
    CU_LAUNCHED("rope");
    return 0;
}

extern "C" int cu_rope_fwd(float *x, const int32_t *pos, int N, int n_heads, int D,
                           const float *rope)
{
    return rope_launch(x, pos, N, n_heads, D, rope, 1.0f);
}

extern "C" int cu_rope_bwd(float *dx, const int32_t *pos, int N, int n_heads, int D,
                           const float *rope)
{
    return rope_launch(dx, pos, N, n_heads, D, rope, -1.0f);
}

/* The rows (N x n_heads) of qk_norm_rope's kernels, or -1 for a head size they do
 * not take (D odd or above ROW_THREADS) or more rows than the column sums count. */
static long long qk_rows(const char *what, int N, int n_heads, int D)
{
    long long rows = (long long)N * n_heads;
    if (rows > 0 && (D < 2 || D % 2 || D > ROW_THREADS || rows > INT_MAX)) {
        cu_fail(what, cudaSuccess, __FILE__, __LINE__);
        return -1;
    }
    return rows;
}

#define QK_GRID(rows) ((unsigned)(((rows) + ROW_WARPS - 1) / ROW_WARPS))

extern "C" int cu_qk_norm_rope_fwd(float *y, const float *x, const uint16_t *w,
                                   const int32_t *pos, const float *rope, int N, int n_heads,
                                   int D, float eps)
{
    long long rows = qk_rows("qk_norm_rope_fwd: head_dim odd or above 256", N, n_heads, D);
    if (rows <= 0) return (int)rows;
    qk_norm_rope_k<<<QK_GRID(rows), ROW_THREADS, 0, cu_stream()>>>(y, x, w, pos, rope, rows,
                                                                  n_heads, D, eps);
    CU_LAUNCHED("qk_norm_rope_fwd");
    return 0;
}

extern "C" int cu_qk_norm_rope_bwd(float *dx, float *dw, float *dy, const float *x,
                                   const float *w, float *rstd, const int32_t *pos,
                                   const float *rope, int N, int n_heads, int D, float eps)
{
    long long rows = qk_rows("qk_norm_rope_bwd: head_dim odd or above 256", N, n_heads, D);
    if (rows <= 0) return (int)rows;
    qk_norm_rope_bwd_k<<<QK_GRID(rows), ROW_THREADS, 0, cu_stream()>>>(dx, dy, x, w, rstd, pos,
                                                                      rope, rows, n_heads, D,
                                                                      eps);
    CU_LAUNCHED("qk_norm_rope_bwd");
    if (dw && cu_column_sums(dw, dy, x, rstd, (int)rows, D)) return -1;
    return 0;
}

static int swiglu_fwd_launch(float *y, uint16_t *y16, float *sig, const float *g,
                             const float *u, int64_t n)
{
    if (n <= 0) return 0;
    swiglu_fwd_k<<<EW_BLOCKS(n), EW_THREADS, 0, cu_stream()>>>(y, y16, sig, g, u, n);
    CU_LAUNCHED("swiglu_fwd");
    return 0;
}

extern "C" int cu_swiglu_fwd(float *y, float *sig, const float *g, const float *u, int64_t n)
{
    return swiglu_fwd_launch(y, NULL, sig, g, u, n);
}

extern "C" int cu_swiglu_fwd16(uint16_t *y16, float *sig, const float *g, const float *u,
                               int64_t n)
{
    return swiglu_fwd_launch(NULL, y16, sig, g, u, n);
}

static int swiglu_bwd_launch(float *dg, float *du, uint16_t *dg16, uint16_t *du16,
                             const float *dy, const float *g, const float *u, const float *sig,
                             int64_t n)
{
    if (n <= 0) return 0;
    swiglu_bwd_k<<<EW_BLOCKS(n), EW_THREADS, 0, cu_stream()>>>(dg, du, dg16, du16, dy, g, u,
                                                              sig, n);
    CU_LAUNCHED("swiglu_bwd");
    return 0;
}

extern "C" int cu_swiglu_bwd(float *dg, float *du, const float *dy, const float *g,
                             const float *u, const float *sig, int64_t n)
{
    return swiglu_bwd_launch(dg, du, NULL, NULL, dy, g, u, sig, n);
}

extern "C" int cu_swiglu_bwd16(uint16_t *dg16, uint16_t *du16, const float *dy, const float *g,
                               const float *u, const float *sig, int64_t n)
{
    return swiglu_bwd_launch(NULL, NULL, dg16, du16, dy, g, u, sig, n);
}

extern "C" int cu_f32_to_bf16(uint16_t *y, const float *x, int64_t n)
{
    if (n <= 0) return 0;
    f32_to_bf16_k<<<EW_BLOCKS(n), EW_THREADS, 0, cu_stream()>>>(y, x, n);
    CU_LAUNCHED("f32_to_bf16");
    return 0;
}

/* ---- device-side errors ---- */
int cu_device_error_check(void)
{
    int err = 0;
    long long value = 0;
    CU_CHECK(cudaMemcpyFromSymbol(&err, cu_dev_error, sizeof err));
    if (!err) return 0;
    CU_CHECK(cudaMemcpyFromSymbol(&value, cu_dev_value, sizeof value));
    int zero = 0;
    CU_CHECK(cudaMemcpyToSymbol(cu_dev_error, &zero, sizeof zero));
    char what[96];
    snprintf(what, sizeof what, "embedding: token %lld outside the vocabulary", value);
    return cu_fail(what, cudaSuccess, __FILE__, __LINE__);
}
