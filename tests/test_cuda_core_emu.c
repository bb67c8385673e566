/*
 * The CUDA module's elementwise, row and optimizer kernels (src/device/cuda/
 * cuda_kernels.cuh, cuda_colsum.cuh, cuda_optim.cuh) compiled as C11 and run on CPU
 * threads (tests/cuda_block_emu.h), against the CPU references of cpu_ops.h, adamw.h
 * and the safetensors bf16 conversion:
 *   embed_gather       the rows widened from bf16 exactly; -1 gives zeros; a token
 *                      outside the vocabulary raises the device error with its value
 *   embed_scatter_add  embed_backward's sums (rows sharing a token: atomics), 1e-6
 *   rmsnorm_fwd        rmsnorm_forward, 2e-6 of the largest; its bf16 form
 *                      (rmsnorm_fwd16) the float32 form's values rounded, bit for bit
 *   rmsnorm_bwd + the column sums   rmsnorm_backward's dx and dw (2 row chunks), 1e-5;
 *                      dx's bf16 copy its values rounded, bit for bit
 *   rope               rope_forward / rope_backward, 1e-6
 *   qk_norm_rope / _bwd  (a warp per row) rmsnorm_fwd then rope's bits, and rope's
 *                      backward then rmsnorm_bwd's into zeros, bit for bit, with the
 *                      same r kept; D 16, 80 and 256, rows not a multiple of the 8 a
 *                      block; against rmsnorm_forward + rope_forward, 2e-6
 *   swiglu_fwd / _bwd  swiglu_forward / swiglu_backward, 1e-6
 *   swiglu_fwd16 / _bwd16  their results rounded by st_f32_to_bf16, bit for bit; the
 *                      bf16 outputs written over what was there; _bwd16 without sig
 *                      (formed again) the same bits
 *   f32_to_bf16        st_f32_to_bf16 bit for bit, NaN and infinities included
 *   sum_squares        the double sum, 1e-12 relative (more elements than the grid's
 *                      threads)
 *   adamw              adamw_update_elems, clipped and not: 1e-6 of the largest; its
 *                      bf16 copy of the new weights st_f32_to_bf16's, bit for bit
 *   sum_hash           weights_sum_hash's bits (more elements than the grid's threads)
 * The kernels' own code, where there is no GPU; test_cuda runs them on the GPU.
 */

#include <math.h>

#include "cuda_block_emu.h"
#include "../src/model/rope.h"
#include "libra/adamw.h"
#include "libra/cpu_ops.h"
#include "libra/cuda_api.h"
#include "libra/hash.h"
#include "libra/safetensors.h"
#include "testutil.h"

#include "../src/device/cuda/cuda_device.cuh"
#include "../src/device/cuda/cuda_colsum.cuh"
#include "../src/device/cuda/cuda_kernels.cuh"
#include "../src/device/cuda/cuda_optim.cuh"

#define EW 256 /* the elementwise kernels' block (cuda_internal.h's EW_THREADS) */
#define EW_GRID(n) ((unsigned)(((n) + EW - 1) / EW))

enum { N = 9, C = 70, V = 11, H = 3, D = 16, NPOS = 32 };

/* Every kernel's arguments by name, and which one runs. */
struct call {
    int kind;
    float *y, *dx, *rstd, *dw, *part, *sig, *m, *v;
    double *dpart, *out;
    unsigned long long *hpart, *hout;
    uint16_t *y16, *z16;
    const float *x, *dy, *w, *rope, *g, *u;
    const uint16_t *w16;
    const int32_t *tok, *pos;
    int n, c, nb, chunks, heads, dim;
    float sign;
    struct cuda_adamw adam;
};
enum { GATHER, SCATTER, NORM, NORM_BWD, COLSUM, COLSUM_FIN, ROPE, QK, QK_BWD, SWI, SWI_BWD,
       SWI16, SWI_BWD16, BF16, SSQ, SSQ_FIN, HASH, HASH_FIN, ADAM };

static void run(void *p)
{
    const struct call *a = p;
    switch (a->kind) {
    case GATHER: embed_gather_k(a->y, a->w16, a->tok, a->c, V); break;
    case SCATTER: embed_scatter_add_k(a->y, a->x, a->tok, a->c, V); break;
    case NORM: rmsnorm_fwd_k(a->y, a->y16, a->x, a->w16, a->c, 1e-6f); break;
    case NORM_BWD:
        rmsnorm_bwd_dx_k(a->dx, a->y16, a->dy, a->x, a->w, a->rstd, a->c, 1e-6f);
        break;
    case COLSUM: colsum_part_k(a->part, a->dy, a->x, a->rstd, a->n, a->c); break;
    case COLSUM_FIN: colsum_final_k(a->dw, a->part, a->chunks, a->c); break;
    case ROPE: rope_k(a->y, a->pos, a->n, a->heads, a->dim, a->rope, a->sign); break;
    case QK:
        qk_norm_rope_k(a->y, a->x, a->w16, a->pos, a->rope, (long long)a->n * a->heads, a->heads,
                       a->dim, 1e-6f);
        break;
    case QK_BWD:
        qk_norm_rope_bwd_k(a->dx, a->y, a->x, a->w, a->rstd, a->pos, a->rope,
                           (long long)a->n * a->heads, a->heads, a->dim, 1e-6f);
        break;
    case SWI: swiglu_fwd_k(a->y, NULL, a->sig, a->g, a->u, a->n); break;
    case SWI_BWD: swiglu_bwd_k(a->dx, a->dw, NULL, NULL, a->dy, a->g, a->u, a->sig, a->n); break;
    case SWI16: swiglu_fwd_k(NULL, a->y16, a->sig, a->g, a->u, a->n); break;
    case SWI_BWD16:
        swiglu_bwd_k(NULL, NULL, a->y16, a->z16, a->dy, a->g, a->u, a->sig, a->n);
        break;
    case BF16: f32_to_bf16_k(a->y16, a->x, a->n); break;
    case SSQ: sum_squares_k(a->dpart, a->x, a->n); break;
    case SSQ_FIN: sum_parts_k(a->out, a->dpart, a->nb); break;
    case HASH: sum_hash_k(a->hpart, a->x, a->n); break;
    case HASH_FIN: sum_hash_parts_k(a->hout, a->hpart, a->nb); break;
    default: adamw_k(a->y, a->m, a->v, a->y16, a->g, a->n, a->adam); break;
    }
}

static void launch(struct call *c, unsigned grid, unsigned threads)
{
    emu_launch(grid, threads, run, c);
}

static void test_embedding(void)
{
    float e[V * C], ew[V * C], x[N * C], de[V * C], de_ref[V * C];
    uint16_t e16[V * C];
    int32_t tok[N] = {3, 0, 10, -1, 3, 7, 3, 10, 1};
    test_fill_uniform(e, V * C, 1, 2.0f);
    for (int i = 0; i < V * C; i++) ew[i] = st_bf16_to_f32(e16[i] = st_f32_to_bf16(e[i]));
    for (int i = 0; i < N * C; i++) x[i] = NAN; /* every row is written */
    struct call c = {.kind = GATHER, .y = x, .w16 = e16, .tok = tok, .c = C};
    launch(&c, N, 128);
    int exact = 1;
    for (int r = 0; r < N; r++)
        for (int j = 0; j < C; j++)
            exact &= x[r * C + j] == (tok[r] < 0 ? 0.0f : ew[tok[r] * C + j]);
    CU_ASSERT(exact);
    CU_ASSERT_EQUAL(cu_dev_error, 0);
    /* the scatter: every row but the -1 one into its token's row */
    test_fill_uniform(x, N * C, 2, 1.0f);
    test_fill_uniform(de, V * C, 3, 0.1f);
    memcpy(de_ref, de, sizeof de);
    int32_t tk[N];
    memcpy(tk, tok, sizeof tk);
    tk[3] = 5; /* embed_backward takes no -1: row 3 goes to token 5 in both */
    embed_backward(de_ref, x, tk, N, C);
    c = (struct call){.kind = SCATTER, .y = de, .x = x, .tok = tk, .c = C};
    launch(&c, N, 128);
    test_expect_close("scatter", de, de_ref, V * C, 1e-6);
    tk[4] = V; /* outside: the device error, with the token */
    c.tok = tk;
    launch(&c, N, 128);
    CU_ASSERT_EQUAL(cu_dev_error, 1);
    CU_ASSERT_EQUAL(cu_dev_value, V);
    cu_dev_error = 0;
}

static void test_rmsnorm(void)
{
    enum { NB = 300 }; /* rows: 2 chunks of the column sums, the second short */
    float *x = malloc(sizeof(float) * NB * C), *y = malloc(sizeof(float) * NB * C);
    float *ref = malloc(sizeof(float) * NB * C), *dy = malloc(sizeof(float) * NB * C);
    float *dx = malloc(sizeof(float) * NB * C), *dx_ref = malloc(sizeof(float) * NB * C);
    float w[C], w16f[C], dw[C], dw_ref[C], rstd[NB];
    uint16_t w16[C];
    int chunks = (NB + CS_ROWS - 1) / CS_ROWS;
    float *part = malloc(sizeof(float) * chunks * C);
    test_fill_uniform(x, (size_t)NB * C, 4, 3.0f);
    test_fill_uniform(dy, (size_t)NB * C, 5, 1.0f);
    test_fill_uniform(w, C, 6, 1.5f);
    for (int j = 0; j < C; j++) w16f[j] = st_bf16_to_f32(w16[j] = st_f32_to_bf16(w[j]));
    rmsnorm_forward(ref, x, w16f, NB, C, 1e-6f);
    struct call c = {.kind = NORM, .y = y, .x = x, .w16 = w16, .c = C};
    launch(&c, NB, ROW_THREADS);
    test_expect_close("forward", y, ref, (size_t)NB * C, 2e-6);
    uint16_t *y16 = malloc(sizeof(uint16_t) * NB * C), *want16 = malloc(sizeof(uint16_t) * NB * C);
    st_f32_to_bf16_n(y, want16, (size_t)NB * C);
    for (int i = 0; i < NB * C; i++) y16[i] = 0x7fc1; /* written over */
    c = (struct call){.kind = NORM, .y16 = y16, .x = x, .w16 = w16, .c = C};
    launch(&c, NB, ROW_THREADS);
    CU_ASSERT(memcmp(y16, want16, sizeof(uint16_t) * NB * C) == 0); /* rmsnorm_fwd16 */
    free(y16), free(want16);
    test_fill_uniform(dx, (size_t)NB * C, 7, 0.1f);
    memcpy(dx_ref, dx, sizeof(float) * NB * C);
    test_fill_uniform(dw, C, 8, 0.1f);
    memcpy(dw_ref, dw, sizeof dw);
    rmsnorm_backward(dx_ref, dw_ref, dy, x, w, NB, C, 1e-6f);
    uint16_t *dx16 = malloc(sizeof(uint16_t) * NB * C), *dx16w = malloc(sizeof(uint16_t) * NB * C);
    c = (struct call){.kind = NORM_BWD, .dx = dx, .y16 = dx16, .dy = dy, .x = x, .w = w,
                      .rstd = rstd, .c = C};
    launch(&c, NB, ROW_THREADS);
    test_expect_close("backward dx", dx, dx_ref, (size_t)NB * C, 1e-5);
    st_f32_to_bf16_n(dx, dx16w, (size_t)NB * C); /* the bf16 copy: the new dx rounded */
    CU_ASSERT(memcmp(dx16, dx16w, sizeof(uint16_t) * NB * C) == 0);
    free(dx16), free(dx16w);
    c = (struct call){.kind = COLSUM, .part = part, .dy = dy, .x = x, .rstd = rstd, .n = NB,
                      .c = C};
    emu_launch_2d((unsigned)chunks, (C + CS_COLS - 1) / CS_COLS, CS_COLS * CS_LANES, run, &c);
    c = (struct call){.kind = COLSUM_FIN, .dw = dw, .part = part, .chunks = chunks, .c = C};
    launch(&c, EW_GRID(C), EW);
    test_expect_close("backward dw", dw, dw_ref, C, 1e-5);
    free(x), free(y), free(ref), free(dy), free(dx), free(dx_ref), free(part);
}

static void test_rope(void)
{
    struct tfm_config cfg = {.family = TFM_LLAMA, .vocab_size = V, .hidden_size = H * D,
                             .n_layers = 1, .n_heads = H, .n_kv_heads = H, .head_dim = D,
                             .intermediate_size = 8, .max_position_embeddings = NPOS,
                             .rms_norm_eps = 1e-6f, .rope_theta = 1e4f};
    float rope[NPOS * D], x[N * H * D], ref[N * H * D];
    int32_t pos[N];
    int ipos[N];
    rope_table(rope, NPOS, &cfg);
    for (int r = 0; r < N; r++) ipos[r] = pos[r] = (r * 7) % NPOS;
    for (int sign = 1; sign >= -1; sign -= 2) {
        test_fill_uniform(x, N * H * D, 9, 2.0f);
        memcpy(ref, x, sizeof x);
        if (sign > 0) rope_forward(ref, ipos, N, H, D, rope);
        else rope_backward(ref, ipos, N, H, D, rope);
        struct call c = {.kind = ROPE, .y = x, .pos = pos, .rope = rope, .n = N, .heads = H,
                         .dim = D, .sign = (float)sign};
        launch(&c, EW_GRID(N * H * (D / 2)), EW);
        test_expect_close(sign > 0 ? "forward" : "backward", x, ref, N * H * D, 1e-6);
    }
}

/* The rows (N x heads) of dimension dim through qk_norm_rope_k and _bwd_k against the
 * separate kernels. */
static void qk_case(int heads, int dim, uint64_t seed)
{
    struct tfm_config cfg = {.family = TFM_QWEN3, .vocab_size = V, .hidden_size = heads * dim,
                             .n_layers = 1, .n_heads = heads, .n_kv_heads = heads,
                             .head_dim = dim, .intermediate_size = 8,
                             .max_position_embeddings = NPOS, .rms_norm_eps = 1e-6f,
                             .rope_theta = 1e6f};
    int rows = N * heads;
    size_t n = (size_t)rows * dim;
    float *rope = malloc(sizeof(float) * NPOS * dim), *x = malloc(sizeof(float) * n);
    float *y = malloc(sizeof(float) * n), *want = malloc(sizeof(float) * n);
    float *dy = malloc(sizeof(float) * n), *dyw = malloc(sizeof(float) * n);
    float *dx = malloc(sizeof(float) * n), *dxw = malloc(sizeof(float) * n);
    float *w = malloc(sizeof(float) * dim), *wf = malloc(sizeof(float) * dim);
    float *rstd = malloc(sizeof(float) * rows), *rstdw = malloc(sizeof(float) * rows);
    uint16_t *w16 = malloc(sizeof(uint16_t) * dim);
    int32_t pos[N];
    int ipos[N];
    rope_table(rope, NPOS, &cfg);
    for (int r = 0; r < N; r++) ipos[r] = pos[r] = (r * 5 + 3) % NPOS;
    test_fill_uniform(x, n, seed, 3.0f);
    test_fill_uniform(w, dim, seed + 1, 1.5f);
    for (int j = 0; j < dim; j++) wf[j] = st_bf16_to_f32(w16[j] = st_f32_to_bf16(w[j]));
    x[dim + 1] = 0.0f; /* a zero among the squares */

    /* forward: the norm's kernel, then the rotation's, against the fused one */
    struct call c = {.kind = NORM, .y = want, .x = x, .w16 = w16, .c = dim};
    launch(&c, (unsigned)rows, ROW_THREADS);
    c = (struct call){.kind = ROPE, .y = want, .pos = pos, .rope = rope, .n = N, .heads = heads,
                      .dim = dim, .sign = 1.0f};
    launch(&c, EW_GRID(rows * (dim / 2)), EW);
    for (size_t i = 0; i < n; i++) y[i] = NAN; /* every value written */
    c = (struct call){.kind = QK, .y = y, .x = x, .w16 = w16, .pos = pos, .rope = rope, .n = N,
                      .heads = heads, .dim = dim};
    launch(&c, (unsigned)((rows + 7) / 8), ROW_THREADS);
    CU_ASSERT(memcmp(y, want, sizeof(float) * n) == 0);
    float *ref = malloc(sizeof(float) * n);
    rmsnorm_forward(ref, x, wf, rows, dim, 1e-6f);
    rope_forward(ref, ipos, N, heads, dim, rope);
    test_expect_close("qk_norm_rope", y, ref, n, 2e-6);

    /* backward: the rotation back, then the norm's dx into zeros */
    test_fill_uniform(dy, n, seed + 2, 1.0f);
    memcpy(dyw, dy, sizeof(float) * n);
    c = (struct call){.kind = ROPE, .y = dyw, .pos = pos, .rope = rope, .n = N, .heads = heads,
                      .dim = dim, .sign = -1.0f};
    launch(&c, EW_GRID(rows * (dim / 2)), EW);
    memset(dxw, 0, sizeof(float) * n);
    c = (struct call){.kind = NORM_BWD, .dx = dxw, .dy = dyw, .x = x, .w = w, .rstd = rstdw,
                      .c = dim};
    launch(&c, (unsigned)rows, ROW_THREADS);
    for (size_t i = 0; i < n; i++) dx[i] = NAN; /* written, not added to */
    c = (struct call){.kind = QK_BWD, .dx = dx, .y = dy, .x = x, .w = w, .rstd = rstd,
                      .pos = pos, .rope = rope, .n = N, .heads = heads, .dim = dim};
    launch(&c, (unsigned)((rows + 7) / 8), ROW_THREADS);
    CU_ASSERT(memcmp(dy, dyw, sizeof(float) * n) == 0); /* rotated back in place */
    CU_ASSERT(memcmp(dx, dxw, sizeof(float) * n) == 0);
    CU_ASSERT(memcmp(rstd, rstdw, sizeof(float) * rows) == 0);
    free(rope), free(x), free(y), free(want), free(dy), free(dyw), free(dx), free(dxw);
    free(w), free(wf), free(rstd), free(rstdw), free(w16), free(ref);
}

static void test_qk_norm_rope(void)
{
    qk_case(3, 16, 30);  /* 27 rows: the last block's warps 3 .. 7 have none */
    qk_case(2, 80, 40);  /* lanes 0 .. 7 rotate two pairs */
    qk_case(1, 256, 50); /* every lane's 8 values */
}

static void test_swiglu(void)
{
    enum { M = 1000 };
    float g[M], u[M], y[M], sig[M], ref[M], sref[M], dy[M], dg[M], du[M], dgr[M], dur[M];
    test_fill_uniform(g, M, 10, 6.0f);
    test_fill_uniform(u, M, 11, 2.0f);
    test_fill_uniform(dy, M, 12, 1.0f);
    test_fill_uniform(dg, M, 13, 0.1f);
    test_fill_uniform(du, M, 14, 0.1f);
    memcpy(dgr, dg, sizeof dg);
    memcpy(dur, du, sizeof du);
    swiglu_forward(ref, sref, g, u, M);
    swiglu_backward(dgr, dur, dy, g, u, sref, M);
    struct call c = {.kind = SWI, .y = y, .sig = sig, .g = g, .u = u, .n = M};
    launch(&c, EW_GRID(M), EW);
    test_expect_close("forward", y, ref, M, 1e-6);
    test_expect_close("sig", sig, sref, M, 1e-6);
    c = (struct call){.kind = SWI_BWD, .dx = dg, .dw = du, .dy = dy, .g = g, .u = u, .sig = sref,
                      .n = M};
    launch(&c, EW_GRID(M), EW);
    test_expect_close("backward dg", dg, dgr, M, 1e-6);
    test_expect_close("backward du", du, dur, M, 1e-6);

    /* the bf16 forms: the same values rounded, over junk */
    uint16_t y16[M], z16[M], want[M];
    for (int i = 0; i < M; i++) y16[i] = z16[i] = 0x7fc1; /* a NaN */
    c = (struct call){.kind = SWI16, .y16 = y16, .sig = sig, .g = g, .u = u, .n = M};
    launch(&c, EW_GRID(M), EW);
    st_f32_to_bf16_n(ref, want, M);
    CU_ASSERT(memcmp(y16, want, sizeof want) == 0);
    float zg[M] = {0}, zu[M] = {0};
    swiglu_backward(zg, zu, dy, g, u, sref, M);
    c = (struct call){.kind = SWI_BWD16, .y16 = y16, .z16 = z16, .dy = dy, .g = g, .u = u,
                      .sig = sref, .n = M};
    launch(&c, EW_GRID(M), EW);
    st_f32_to_bf16_n(zg, want, M);
    CU_ASSERT(memcmp(y16, want, sizeof want) == 0);
    st_f32_to_bf16_n(zu, want, M);
    CU_ASSERT(memcmp(z16, want, sizeof want) == 0);
    /* without sig: the sigmoid formed again, the same bits */
    for (int i = 0; i < M; i++) y16[i] = z16[i] = 0x7fc1;
    c.sig = NULL;
    launch(&c, EW_GRID(M), EW);
    CU_ASSERT(memcmp(z16, want, sizeof want) == 0);
    st_f32_to_bf16_n(zg, want, M);
    CU_ASSERT(memcmp(y16, want, sizeof want) == 0);
}

static void test_bf16(void)
{
    enum { M = 777 };
    float x[M];
    uint16_t y[M];
    test_fill_uniform(x, M, 15, 1e3f);
    x[0] = NAN, x[1] = INFINITY, x[2] = -INFINITY, x[3] = 0.0f, x[4] = -0.0f;
    x[5] = 1.00390625f; /* ties: 1 + 2^-8 rounds down to even (1), */
    x[7] = 1.01171875f; /* 1 + 3 2^-8 up to even (1 + 2^-6) */
    x[6] = 3.4e38f;      /* rounds up to infinity */
    struct call c = {.kind = BF16, .y16 = y, .x = x, .n = M};
    launch(&c, EW_GRID(M), EW);
    int same = 1;
    for (int i = 0; i < M; i++) same &= y[i] == st_f32_to_bf16(x[i]);
    CU_ASSERT(same);
}

static void test_optimizer(void)
{
    enum { M = 300000, NBLK = 64, MA = 5000 }; /* more elements than the grid's threads */
    float *x = malloc(sizeof(float) * M), *p = malloc(sizeof(float) * M);
    float *m = malloc(sizeof(float) * M), *v = malloc(sizeof(float) * M);
    float *pr = malloc(sizeof(float) * M), *mr = malloc(sizeof(float) * M);
    float *vr = malloc(sizeof(float) * M);
    double dpart[NBLK], out = 0, ref = 0;
    test_fill_uniform(x, M, 16, 2.0f);
    for (int i = 0; i < M; i++) ref += (double)x[i] * x[i];
    int nb = NBLK;
    struct call c = {.kind = SSQ, .dpart = dpart, .x = x, .n = M};
    launch(&c, (unsigned)nb, SS_THREADS);
    c = (struct call){.kind = SSQ_FIN, .out = &out, .dpart = dpart, .nb = nb};
    launch(&c, 1, SS_THREADS);
    printf("[sum of squares %.1e] ", fabs(out - ref) / ref);
    CU_ASSERT(fabs(out - ref) <= 1e-12 * ref);
    unsigned long long hpart[NBLK], hout = 0;
    c = (struct call){.kind = HASH, .hpart = hpart, .x = x, .n = M};
    launch(&c, (unsigned)nb, SS_THREADS);
    c = (struct call){.kind = HASH_FIN, .hout = &hout, .hpart = hpart, .nb = nb};
    launch(&c, 1, SS_THREADS);
    CU_ASSERT_EQUAL(hout, weights_sum_hash(x, M));
    struct adamw_config ac = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, LR_COSINE, 2, 10, 0.1f};
    for (int clipped = 0; clipped < 2; clipped++) {
        test_fill_uniform(p, M, 17, 0.5f);
        test_fill_uniform(m, M, 18, 0.01f);
        for (int i = 0; i < M; i++) v[i] = fabsf(m[i]) * 1e-3f;
        memcpy(pr, p, sizeof(float) * M);
        memcpy(mr, m, sizeof(float) * M);
        memcpy(vr, v, sizeof(float) * M);
        struct adamw_scalars s;
        adamw_scalars_of(&ac, 3, &s);
        float clip = clipped ? 0.37f : 1.0f;
        adamw_update_elems(pr, mr, vr, x, MA, &s, clip);
        uint16_t *w16 = clipped ? malloc(sizeof(uint16_t) * M) : NULL, *want = NULL;
        c = (struct call){.kind = ADAM, .y = p, .m = m, .v = v, .y16 = w16, .g = x, .n = MA,
                          .adam = {s.decay, s.step_size, s.bc2_sqrt, s.beta2, s.w1, s.w2,
                                   s.eps, clip}};
        launch(&c, EW_GRID(MA), EW);
        test_expect_close(clipped ? "adamw, clipped" : "adamw", p, pr, M, 1e-6);
        if (w16) { /* the bf16 copy: the new weights rounded, bit for bit */
            want = malloc(sizeof(uint16_t) * MA);
            st_f32_to_bf16_n(p, want, MA);
            CU_ASSERT(memcmp(w16, want, sizeof(uint16_t) * MA) == 0);
        }
        free(w16), free(want);
        test_expect_close("m", m, mr, M, 1e-6);
        test_expect_close("v", v, vr, M, 1e-6);
    }
    free(x), free(p), free(m), free(v), free(pr), free(mr), free(vr);
}

int main(void)
{
    static const struct test_case tc[] = {
        {"embed_gather, embed_scatter_add and the bad-token error", test_embedding},
        {"rmsnorm_fwd, rmsnorm_bwd and the column sums", test_rmsnorm},
        {"rope forward and backward", test_rope},
        {"qk_norm_rope (a warp per row) against rmsnorm and rope, both ways", test_qk_norm_rope},
        {"swiglu forward and backward, float32 and bf16 outputs", test_swiglu},
        {"f32_to_bf16, NaN, infinities and ties", test_bf16},
        {"sum_squares, the weights' sum hash and adamw", test_optimizer},
        {NULL, NULL}};
    static const struct test_suite suites[] = {
        {"the CUDA elementwise, row and optimizer kernels on CPU threads", tc}, {NULL, NULL}};
    return test_main(suites);
}
