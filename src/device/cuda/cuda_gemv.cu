/*
 * The launcher of gemv (include/libra/cuda_api.h): its checks, the grid, the kernel's
 * instantiation for N rows. The kernel and its design: cuda_gemv_kernels.cuh.
 */
#include "cuda_internal.h"

#include "libra/cuda_api.h"

#include "cuda_gemv_kernels.cuh"

template <int SWIGLU>
static void launch(const struct cuda_gemv &g, int rows)
{
    unsigned blocks = (unsigned)((rows + GEMV_WARPS - 1) / GEMV_WARPS);
    dim3 grid(blocks), block(GEMV_WARPS * 32);
    cudaStream_t s = cu_stream();
    switch (g.N) {
    case 1: gemv_k<1, SWIGLU><<<grid, block, 0, s>>>(g, rows); break;
    case 2: gemv_k<2, SWIGLU><<<grid, block, 0, s>>>(g, rows); break;
    case 3: gemv_k<3, SWIGLU><<<grid, block, 0, s>>>(g, rows); break;
    case 4: gemv_k<4, SWIGLU><<<grid, block, 0, s>>>(g, rows); break;
    case 5: gemv_k<5, SWIGLU><<<grid, block, 0, s>>>(g, rows); break;
    case 6: gemv_k<6, SWIGLU><<<grid, block, 0, s>>>(g, rows); break;
    case 7: gemv_k<7, SWIGLU><<<grid, block, 0, s>>>(g, rows); break;
    default: gemv_k<8, SWIGLU><<<grid, block, 0, s>>>(g, rows); break;
    }
}

static int refuse(const char *why)
{
    char msg[160];
    snprintf(msg, sizeof msg, "gemv: %s", why);
    return cu_fail(msg, cudaSuccess, __FILE__, __LINE__);
}

extern "C" int cu_gemv(const struct cuda_gemv *g)
{
    const char *why = cuda_gemv_refusal(g); /* the preconditions the host module checks too */
    if (why) return refuse(why);
    long long rows = 0;
    for (int i = 0; i < g->n_mats; i++) rows += g->m[i].out;
    if (g->swiglu) rows = g->m[0].out;
    if (g->swiglu)
        launch<1>(*g, (int)rows);
    else
        launch<0>(*g, (int)rows);
    CU_LAUNCHED("gemv");
    return 0;
}
