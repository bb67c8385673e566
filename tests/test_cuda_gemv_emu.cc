/*
 * The decode path's small-batch product (src/device/cuda/cuda_gemv_kernels.cuh: gemv)
 * compiled as C++ and run on CPU threads (tests/cuda_block_emu.h, cuda_emu_cxx.h),
 * against linear_forward on the bf16-rounded operands, with test_cuda's bounds (1e-5
 * of the largest):
 *   up to 3 matrices of one input, with and without biases; N 1, 3 and 8 rows; in 96,
 *   1024 and 2568 (a last tile shorter than the others); accumulate; SwiGLU of gate
 *   and up (swiglu_forward of the two products); the RMSNorm folded in (rmsnorm_forward,
 *   then the products)
 *   a row alone gives the same bits as in a batch (the sums do not depend on N)
 * With GEMV_PREFETCH as built (make check builds it once with the default and once
 * with -DGEMV_PREFETCH=1: the next tile's weights loading during a tile).
 */

#include <math.h>

#include "cuda_block_emu.h"
#include "cuda_emu_cxx.h"
extern "C" {
#include "libra/cpu_ops.h"
#include "libra/cuda_api.h"
#include "libra/safetensors.h"
#include "testutil.h"
}

#include "../src/device/cuda/cuda_device.cuh"
#include "../src/device/cuda/cuda_gemv_kernels.cuh"

struct call {
    struct cuda_gemv g;
    int rows;
};

template <int SWIGLU>
static void run_n(const call *c)
{
    switch (c->g.N) {
    case 1: gemv_k<1, SWIGLU>(c->g, c->rows); break;
    case 2: gemv_k<2, SWIGLU>(c->g, c->rows); break;
    case 3: gemv_k<3, SWIGLU>(c->g, c->rows); break;
    default: gemv_k<8, SWIGLU>(c->g, c->rows); break;
    }
}

static void body(void *p)
{
    const call *c = (const call *)p;
    if (c->g.swiglu)
        run_n<1>(c);
    else
        run_n<0>(c);
}

/* gemv as cu_gemv launches it: a warp an output row, GEMV_WARPS rows a block. */
static void gemv(const struct cuda_gemv *g)
{
    CU_ASSERT_PTR_NULL(cuda_gemv_refusal(g));
    call c = {*g, 0};
    for (int i = 0; i < g->n_mats; i++) c.rows += g->m[i].out;
    if (g->swiglu) c.rows = g->m[0].out;
    emu_launch((unsigned)((c.rows + GEMV_WARPS - 1) / GEMV_WARPS), GEMV_WARPS * 32, body, &c);
}

static float *alloc16(size_t n) /* 16-byte aligned, as the kernel's vector loads want */
{
    void *p = NULL;
    if (posix_memalign(&p, 16, n * sizeof(float) + 16)) abort();
    return (float *)p;
}

static void bf16_round(float *x, uint16_t *x16, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint16_t h = st_f32_to_bf16(x[i]);
        if (x16) x16[i] = h;
        x[i] = st_bf16_to_f32(h);
    }
}

static void test_products(void)
{
    static const int shapes[][4] = {/* in, out_0, out_1, out_2 */
                                    {1024, 256, 64, 64}, {96, 48, 24, 24}, {2568, 40, 0, 0}};
    static const int Ns[] = {1, 3, 8};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++) {
            int in = shapes[c][0], N = Ns[ni], nm = shapes[c][2] ? 3 : 1;
            const int outs[3] = {shapes[c][1], shapes[c][2], shapes[c][3]};
            size_t nx = (size_t)N * in;
            float *x = alloc16(nx), *xr = alloc16(nx), *w[3] = {}, *b[3] = {}, *ref[3] = {};
            uint16_t *w16[3] = {};
            test_fill_uniform(x, nx, 10 + c * 10 + ni, 2.0f);
            memcpy(xr, x, nx * sizeof *x);
            bf16_round(xr, NULL, nx);
            struct cuda_gemv g = {};
            g.x = x, g.N = N, g.in = in, g.n_mats = nm;
            for (int i = 0; i < nm; i++) {
                size_t nw = (size_t)outs[i] * in;
                w[i] = alloc16(nw), b[i] = alloc16((size_t)outs[i]);
                ref[i] = alloc16((size_t)N * outs[i]);
                w16[i] = (uint16_t *)alloc16(nw); /* its 16 bytes past the end: NaNs, which */
                for (size_t k = nw; k < nw + 8; k++) /* a read past a row's end would add */
                    w16[i][k] = 0x7fc1;
                test_fill_uniform(w[i], nw, 20 + c * 10 + (size_t)i, 0.1f);
                test_fill_uniform(b[i], (size_t)outs[i], 30 + (size_t)i, 0.1f);
                bf16_round(w[i], w16[i], nw);
                linear_forward(ref[i], xr, w[i], i == 2 ? NULL : b[i], N, in, outs[i]);
                g.m[i].w = w16[i], g.m[i].b = i == 2 ? NULL : b[i];
                g.m[i].y = alloc16((size_t)N * outs[i]), g.m[i].out = outs[i];
            }
            gemv(&g);
            char what[80];
            for (int i = 0; i < nm; i++) {
                snprintf(what, sizeof what, "N %d in %d out %d", N, in, outs[i]);
                test_expect_close(what, g.m[i].y, ref[i], (size_t)N * outs[i], 1e-5);
            }
            /* the last row alone: the same bits */
            struct cuda_gemv g1 = g;
            g1.N = 1, g1.x = x + (size_t)(N - 1) * in;
            float *keep = alloc16((size_t)N * outs[0]);
            memcpy(keep, g.m[0].y, (size_t)N * outs[0] * sizeof *keep);
            gemv(&g1);
            CU_ASSERT(memcmp(g.m[0].y, keep + (size_t)(N - 1) * outs[0],
                             (size_t)outs[0] * sizeof *keep) == 0);
            /* accumulate over the whole result: y += x W^T */
            memcpy(g.m[0].y, keep, (size_t)N * outs[0] * sizeof *keep);
            struct cuda_gemv ga = g;
            ga.n_mats = 1, ga.accumulate = 1, ga.m[0].b = NULL;
            gemv(&ga);
            size_t ny0 = (size_t)N * outs[0];
            for (size_t k = 0; k < ny0; k++) ref[0][k] = 2.0f * ref[0][k] - b[0][k % (size_t)outs[0]];
            test_expect_close("accumulate", g.m[0].y, ref[0], ny0, 1e-5);
            /* SwiGLU: gate the first matrix, up the first again */
            struct cuda_gemv gs = g;
            gs.n_mats = 2, gs.swiglu = 1, gs.m[0].b = NULL, gs.m[1] = g.m[0], gs.m[1].b = NULL;
            gs.m[1].y = NULL;
            float *gate = alloc16(ny0), *sw = alloc16(ny0);
            linear_forward(gate, xr, w[0], NULL, N, in, outs[0]);
            swiglu_forward(sw, NULL, gate, gate, (int64_t)ny0);
            gemv(&gs);
            test_expect_close("swiglu", g.m[0].y, sw, ny0, 1e-5);
            /* the RMSNorm folded in: rmsnorm_forward, rounded, then the products */
            float *ln = alloc16((size_t)in), *xn = alloc16(nx);
            uint16_t *ln16 = (uint16_t *)alloc16((size_t)in);
            test_fill_uniform(ln, (size_t)in, 40 + c, 1.0f);
            bf16_round(ln, ln16, (size_t)in);
            rmsnorm_forward(xn, x, ln, N, in, 1e-6f);
            bf16_round(xn, NULL, nx);
            linear_forward(ref[0], xn, w[0], b[0], N, in, outs[0]);
            struct cuda_gemv gn = g;
            gn.n_mats = 1, gn.norm = ln16, gn.eps = 1e-6f;
            gemv(&gn);
            test_expect_close("norm", g.m[0].y, ref[0], ny0, 1e-5);
            free(gate), free(sw), free(ln), free(xn), free(ln16), free(keep);
            for (int i = 0; i < nm; i++) free(w[i]), free(b[i]), free(ref[i]), free(w16[i]), free(g.m[i].y);
            free(x), free(xr);
        }
}

int main(void)
{
    printf("GEMV_PREFETCH %d\n", GEMV_PREFETCH);
    static const struct test_case tc[] = {
        {"gemv vs linear_forward: matrices, biases, accumulate, SwiGLU, the norm; a row "
         "alone the same bits",
         test_products},
        {NULL, NULL}};
    static const struct test_suite suites[] = {
        {"the CUDA gemv on CPU threads", tc}, {NULL, NULL}};
    return test_main(suites);
}
