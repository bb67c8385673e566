/*
 * The launcher of gemv (include/libra/cuda_api.h): its checks, the grid, the kernel's
 * instantiation for N rows. The kernel and its design: cuda_gemv_kernels.cuh.
 */
#include "cuda_internal.h"

#include "libra/cuda_api.h"

#include "cuda_gemv_kernels.cuh"

template <int SWIGLU>
static cudaError_t launch(const struct cuda_gemv &g, int rows)
{
    unsigned blocks = (unsigned)((rows + GEMV_WARPS - 1) / GEMV_WARPS);
    dim3 grid(blocks), block(GEMV_WARPS * 32);
    switch (g.N) {
    case 1: return cu_launch_overlapped(gemv_k<1, SWIGLU>, grid, block, g, rows);
    case 2: return cu_launch_overlapped(gemv_k<2, SWIGLU>, grid, block, g, rows);
    case 3: return cu_launch_overlapped(gemv_k<3, SWIGLU>, grid, block, g, rows);
    case 4: return cu_launch_overlapped(gemv_k<4, SWIGLU>, grid, block, g, rows);
    case 5: return cu_launch_overlapped(gemv_k<5, SWIGLU>, grid, block, g, rows);
    case 6: return cu_launch_overlapped(gemv_k<6, SWIGLU>, grid, block, g, rows);
    case 7: return cu_launch_overlapped(gemv_k<7, SWIGLU>, grid, block, g, rows);
    default: return cu_launch_overlapped(gemv_k<8, SWIGLU>, grid, block, g, rows);
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
    CU_CHECK(g->swiglu ? launch<1>(*g, (int)rows) : launch<0>(*g, (int)rows));
    return 0;
}
