/*
 * The CUDA device module's kernels against their CPU references (src/model/cpu/ops.c,
 * the safetensors bf16 conversion), with the tolerances of docs/cuda.md:
 *   embed_gather   exact (a bf16 widening; zero rows for tokens of -1)
 *   f32_to_bf16    exact (round to nearest even, NaN kept)
 *   rope_fwd       1e-6 of the row's largest value (fused multiply-adds)
 *   swiglu_fwd     1e-6 relative (expf of the device vs the host's)
 *   swiglu_fwd16, swiglu_bwd16   bf16 outputs within one ulp of the rounded reference,
 *                  at most 1 % not bitwise equal
 *   rmsnorm_fwd    2e-6 relative (float32 tree reduction vs the host's order);
 *                  rmsnorm_fwd16 exactly its values rounded (the same kernel)
 *   embed_scatter_add, rmsnorm_bwd, rope_bwd, swiglu_bwd, adamw_update   1e-5 relative
 *                  (rmsnorm_bwd's bf16 copy of the new dx: its values rounded, bit for bit)
 *                  (atomic and reduction order, fused multiply-adds)
 *   linear_fwd, linear_bwd, bias_bwd   1e-5 of the largest (bf16 operands, float32
 *                  accumulation); linear_fwd_res 1e-6 of accumulating in place
 *   attn_fwd, attn_bwd, decode_attn   1e-5 of the largest (online softmax in float32;
 *                  the backward recomputes the probabilities; decode_attn on a bf16 pool,
 *                  against attn_forward on its widened values)
 *   qk_norm_rope_fwd / _bwd   within 1e-6 (forward, dy rotated back) and 1e-5 (dx,
 *                  dw) of the largest of the kernels they fuse
 *   kv_append, decode_qkv   k and v rounded to bf16 in the pool: exact against
 *                  st_f32_to_bf16; the fused decode_qkv within one bf16 ulp of the
 *                  separate kernels (at most 1 % of the values not bitwise equal)
 *   flash_fwd, flash_bwd   1e-2 and 2e-2 of the largest on bf16 inputs (the tensor
 *                  cores take the probabilities and dS as bf16); lse 1e-4
 *   prefill_attn   1e-2 of the largest on bf16 inputs, paged keys
 *   logsoftmax_fwd 2e-6 of the largest (double sums in another order); _bwd 1e-6;
 *                  the row statistics: max exact, log-sum 1e-9; _bwd from them its
 *                  bits without them
 *   sample         the same tokens as sampler_sample (greedy, T, top-k, top-p);
 *                  log-probs 1e-5 of the largest; on top-p survivors short through
 *                  rounding, the nucleus redone over every id, as sampler_sample does
 *   vocab_greedy_stats, vocab_sample_max / _sums / _pick / _topk   rows split over 3 ranks'
 *                  columns, combined as the group's all-reduces would: sampler_sample's
 *                  tokens on the whole rows; log-probs 1e-5
 *   sum_squares    1e-12 relative (double accumulation in another order)
 *   weights_hash   weights_sum_hash's bits (integer sums); one changed bit and two
 *                  swapped elements change it
 *   vocab_max, vocab_sums, vocab_logsoftmax_bwd   rows split over 3 ranks' columns,
 *                  combined as the group's all-reduces would: 1e-4 (log-probs and
 *                  entropies, absolute) and 1e-5 of the largest (backward) against the
 *                  whole rows' logsoftmax_forward / _backward
 *   entropy_bwd, vocab_entropy_bwd   1e-6 of the largest against entropy_backward
 *                  (whole rows of 151,936 ids; 3 ranks' columns from the whole rows'
 *                  statistics); H 1e-9 absolute (double sums in another order)
 * and a device-side error (a token outside the vocabulary) reported by sync.
 *
 * Without the module (a build without --with-cuda) or without a usable GPU the test
 * says why and runs on the host module (include/libra/cuda_host.h): the CPU references
 * against themselves, and the module's refusals, device errors and graphs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/model/rope.h"
#include "libra/adamw.h"
#include "libra/cpu_ops.h"
#include "libra/cuda_host.h"
#include "libra/cuda_module.h"
#include "libra/hash.h"
#include "libra/rng.h"
#include "libra/safetensors.h"
#include "libra/sampler.h"
#include "testutil.h"
#include "top_p_short_row.h"

static const struct cuda_api *api;

#define CU_OK(call)                                                                          \
    do {                                                                                     \
        if ((call) != 0) {                                                                   \
            fprintf(stderr, "\n%s:%d: %s: %s\n", __FILE__, __LINE__, #call, api->last_error()); \
            CU_FAIL_FATAL(#call);                                                            \
        }                                                                                    \
    } while (0)

static void *dev_copy(const void *host, size_t bytes)
{
    void *d = NULL;
    CU_OK(api->alloc(&d, bytes));
    if (host) CU_OK(api->to_device(d, host, bytes));
    return d;
}

static void fill_normal(float *x, size_t n, uint64_t seed, float scale)
{
    struct rng r;
    rng_init(&r, seed, 0, 0, 0);
    for (size_t i = 0; i < n; i++) x[i] = scale * (float)rng_normal(&r);
}

static void test_embed_gather(void)
{
    enum { V = 1000, C = 96, N = 37 };
    float *embed = malloc(sizeof(float) * V * C), *ref = malloc(sizeof(float) * N * C);
    float *got = malloc(sizeof(float) * N * C);
    uint16_t *e16 = malloc(sizeof(uint16_t) * V * C);
    int32_t tok[N];
    fill_normal(embed, (size_t)V * C, 1, 0.5f);
    for (size_t i = 0; i < (size_t)V * C; i++) {
        e16[i] = st_f32_to_bf16(embed[i]);
        embed[i] = st_bf16_to_f32(e16[i]);
    }
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 7919) % V);
    tok[3] = V - 1;
    embed_forward(ref, embed, tok, N, C);
    void *d_e = dev_copy(e16, sizeof(uint16_t) * V * C), *d_t = dev_copy(tok, sizeof tok);
    void *d_x = dev_copy(NULL, sizeof(float) * N * C);
    CU_OK(api->embed_gather(d_x, d_e, d_t, N, C, V));
    CU_OK(api->sync());
    CU_OK(api->to_host(got, d_x, sizeof(float) * N * C));
    CU_ASSERT_EQUAL(memcmp(got, ref, sizeof(float) * N * C), 0);
    /* tokens of -1 get zero rows (another rank's part of a vocabulary-parallel
     * embedding), and no error */
    tok[5] = -1, tok[6] = -1;
    memset(ref + 5 * C, 0, sizeof(float) * 2 * C);
    CU_OK(api->to_device(d_t, tok, sizeof tok));
    CU_OK(api->embed_gather(d_x, d_e, d_t, N, C, V));
    CU_OK(api->sync());
    CU_OK(api->to_host(got, d_x, sizeof(float) * N * C));
    CU_ASSERT_EQUAL(memcmp(got, ref, sizeof(float) * N * C), 0);
    /* any other token outside the vocabulary: reported by the next sync, once */
    tok[5] = V;
    CU_OK(api->to_device(d_t, tok, sizeof tok));
    CU_OK(api->embed_gather(d_x, d_e, d_t, N, C, V));
    CU_ASSERT_EQUAL(api->sync(), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(api->last_error(), "token 1000 outside the vocabulary"));
    CU_OK(api->sync());
    /* and in the backward, where -1 adds nothing */
    void *d_de = dev_copy(NULL, sizeof(float) * V * C);
    CU_OK(api->zero(d_de, sizeof(float) * V * C));
    CU_OK(api->embed_scatter_add(d_de, d_x, d_t, N, C, V));
    CU_ASSERT_EQUAL(api->sync(), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(api->last_error(), "token 1000 outside the vocabulary"));
    CU_OK(api->sync()); /* reported once */
    api->free(d_de);
    api->free(d_e);
    api->free(d_t);
    api->free(d_x);
    free(embed);
    free(ref);
    free(got);
    free(e16);
}

static void test_f32_to_bf16(void)
{
    enum { N = 4099 };
    float x[N];
    uint16_t got[N], ref[N];
    fill_normal(x, N, 2, 3.0f);
    x[0] = 0.0f, x[1] = -0.0f, x[2] = INFINITY, x[3] = -INFINITY, x[4] = NAN;
    x[5] = 1e-40f; /* subnormal */
    x[6] = 3.3895314e38f; /* rounds up to infinity */
    for (int i = 0; i < N; i++) ref[i] = st_f32_to_bf16(x[i]);
    void *d_x = dev_copy(x, sizeof x), *d_y = dev_copy(NULL, sizeof got);
    CU_OK(api->f32_to_bf16(d_y, d_x, N));
    CU_OK(api->sync());
    CU_OK(api->to_host(got, d_y, sizeof got));
    int same = 1;
    for (int i = 0; i < N; i++)
        if (i == 4) same &= (got[i] & 0x7f80) == 0x7f80 && (got[i] & 0x7f) != 0; /* a NaN */
        else same &= got[i] == ref[i];
    CU_ASSERT(same);
    api->free(d_x);
    api->free(d_y);
}

static void test_rmsnorm(void)
{
    static const int shapes[][2] = {{5, 64}, {33, 1024}, {7, 4099}, {128, 128}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int N = shapes[k][0], C = shapes[k][1];
        size_t n = (size_t)N * C;
        float *x = malloc(n * sizeof *x), *ref = malloc(n * sizeof *ref), *got = malloc(n * sizeof *got);
        float *w = malloc((size_t)C * sizeof *w);
        uint16_t *w16 = malloc((size_t)C * sizeof *w16);
        fill_normal(x, n, 3 + k, 2.0f);
        fill_normal(w, (size_t)C, 30 + k, 1.0f);
        for (int j = 0; j < C; j++) {
            w16[j] = st_f32_to_bf16(w[j]);
            w[j] = st_bf16_to_f32(w16[j]);
        }
        rmsnorm_forward(ref, x, w, N, C, 1e-6f);
        void *d_x = dev_copy(x, n * sizeof *x), *d_w = dev_copy(w16, (size_t)C * sizeof *w16);
        void *d_y = dev_copy(NULL, n * sizeof *x);
        CU_OK(api->rmsnorm_fwd(d_y, d_x, d_w, N, C, 1e-6f));
        CU_OK(api->sync());
        CU_OK(api->to_host(got, d_y, n * sizeof *got));
        double e = test_rel_err(got, ref, n);
        CU_ASSERT(e <= 2e-6);
        if (e > 2e-6) fprintf(stderr, "\nrmsnorm %dx%d: %.3g\n", N, C, e);
        /* rmsnorm_fwd16: the same values rounded, exactly */
        uint16_t *got16 = malloc(n * 2), *want16 = malloc(n * 2);
        st_f32_to_bf16_n(got, want16, n);
        for (size_t i = 0; i < n; i++) got16[i] = 0x7fc1; /* written over */
        void *d_16 = dev_copy(got16, n * 2);
        CU_OK(api->rmsnorm_fwd16(d_16, d_x, d_w, N, C, 1e-6f));
        CU_OK(api->sync());
        CU_OK(api->to_host(got16, d_16, n * 2));
        CU_ASSERT(memcmp(got16, want16, n * 2) == 0);
        api->free(d_16);
        free(got16), free(want16);
        api->free(d_x);
        api->free(d_w);
        api->free(d_y);
        free(x), free(ref), free(got), free(w), free(w16);
    }
}

static void test_rope(void)
{
    enum { N = 19, H = 6, D = 64, NPOS = 512 };
    struct tfm_config c = {.family = TFM_QWEN3, .vocab_size = 16, .hidden_size = 64,
                           .n_layers = 1, .n_heads = H, .n_kv_heads = H, .head_dim = D,
                           .intermediate_size = 8, .max_position_embeddings = NPOS,
                           .rms_norm_eps = 1e-6f, .rope_theta = 1e6f};
    float *table = malloc(sizeof(float) * NPOS * D);
    rope_table(table, NPOS, &c);
    float x[N * H * D], ref[N * H * D], got[N * H * D];
    int32_t pos[N];
    fill_normal(x, sizeof x / sizeof x[0], 4, 1.0f);
    for (int i = 0; i < N; i++) pos[i] = (i * 37) % NPOS;
    pos[0] = NPOS - 1;
    memcpy(ref, x, sizeof x);
    rope_forward(ref, pos, N, H, D, table);
    void *d_x = dev_copy(x, sizeof x), *d_p = dev_copy(pos, sizeof pos);
    void *d_t = dev_copy(table, sizeof(float) * NPOS * D);
    CU_OK(api->rope_fwd(d_x, d_p, N, H, D, d_t));
    CU_OK(api->sync());
    CU_OK(api->to_host(got, d_x, sizeof got));
    CU_ASSERT(test_rel_err(got, ref, sizeof x / sizeof x[0]) <= 1e-6);
    api->free(d_x);
    api->free(d_p);
    api->free(d_t);
    free(table);
}

static void test_swiglu(void)
{
    enum { N = 10007 };
    static float g[N], u[N], ref[N], got[N];
    fill_normal(g, N, 5, 4.0f);
    fill_normal(u, N, 6, 1.0f);
    swiglu_forward(ref, NULL, g, u, N);
    void *d_g = dev_copy(g, sizeof g), *d_u = dev_copy(u, sizeof u), *d_y = dev_copy(NULL, sizeof g);
    CU_OK(api->swiglu_fwd(d_y, NULL, d_g, d_u, N));
    CU_OK(api->sync());
    CU_OK(api->to_host(got, d_y, sizeof got));
    double e = 0;
    for (int i = 0; i < N; i++) e = test_worse(e, fabs((double)got[i] - ref[i]) / fmax(1e-6, fabs(ref[i])));
    CU_ASSERT(e <= 1e-6);
    api->free(d_g);
    api->free(d_u);
    api->free(d_y);
}

/* Checks got against ref (max |diff| / max |ref| <= tol), naming what on failure. */
static void expect_close(const char *what, const float *got, const float *ref, size_t n,
                         double tol)
{
    double e = test_rel_err(got, ref, n);
    CU_ASSERT(e <= tol);
    if (e > tol) fprintf(stderr, "\n%s: %.3g > %.3g\n", what, e, tol);
}

static void test_backward(void)
{
    enum { N = 23, C = 320, V = 50, H = 5, D = 64, NPOS = 64 };
    size_t n = (size_t)N * C;
    float *x = malloc(n * sizeof *x), *dy = malloc(n * sizeof *dy), *w = malloc(C * sizeof *w);
    float *dx = malloc(n * sizeof *dx), *ref_dx = malloc(n * sizeof *dx), *got = malloc(n * sizeof *got);
    float dw[C], ref_dw[C], de[V * C], ref_de[V * C];
    int32_t tok[N];
    fill_normal(x, n, 7, 1.5f);
    fill_normal(dy, n, 8, 1.0f);
    fill_normal(w, C, 9, 1.0f);
    fill_normal(dx, n, 10, 0.1f); /* the kernels accumulate into what is there */
    fill_normal(dw, C, 11, 0.1f);
    memcpy(ref_dx, dx, n * sizeof *dx);
    memcpy(ref_dw, dw, sizeof dw);
    rmsnorm_backward(ref_dx, ref_dw, dy, x, w, N, C, 1e-6f);
    void *d_x = dev_copy(x, n * sizeof *x), *d_dy = dev_copy(dy, n * sizeof *dy);
    void *d_w = dev_copy(w, C * sizeof *w), *d_dx = dev_copy(dx, n * sizeof *dx);
    void *d_dw = dev_copy(dw, sizeof dw), *d_r = dev_copy(NULL, N * sizeof(float));
    uint16_t *dx16 = malloc(n * sizeof *dx16), *want16 = malloc(n * sizeof *want16);
    void *d_16 = dev_copy(NULL, n * sizeof *dx16);
    CU_OK(api->rmsnorm_bwd(d_dx, d_16, d_dw, d_dy, d_x, d_w, d_r, N, C, 1e-6f));
    CU_OK(api->sync());
    CU_OK(api->to_host(got, d_dx, n * sizeof *got));
    expect_close("rmsnorm_bwd dx", got, ref_dx, n, 1e-5);
    CU_OK(api->to_host(dx16, d_16, n * sizeof *dx16)); /* the new dx, rounded: its bits */
    st_f32_to_bf16_n(got, want16, n);
    CU_ASSERT(memcmp(dx16, want16, n * sizeof *dx16) == 0);
    api->free(d_16), free(dx16), free(want16);
    CU_OK(api->to_host(got, d_dw, sizeof dw));
    expect_close("rmsnorm_bwd dw", got, ref_dw, C, 1e-5);

    /* embedding scatter-add, tokens repeated */
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 3) % 7);
    fill_normal(de, (size_t)V * C, 12, 0.1f);
    memcpy(ref_de, de, sizeof de);
    embed_backward(ref_de, dy, tok, N, C);
    void *d_de = dev_copy(de, sizeof de), *d_t = dev_copy(tok, sizeof tok);
    CU_OK(api->embed_scatter_add(d_de, d_dy, d_t, N, C, V));
    CU_OK(api->sync());
    float *got_de = malloc(sizeof de);
    CU_OK(api->to_host(got_de, d_de, sizeof de));
    expect_close("embed_scatter_add", got_de, ref_de, (size_t)V * C, 1e-5);

    /* rotary backward: the transpose rotation */
    struct tfm_config c = {.family = TFM_LLAMA, .vocab_size = 16, .hidden_size = 64, .n_layers = 1,
                           .n_heads = H, .n_kv_heads = H, .head_dim = D,
                           .intermediate_size = 8, .max_position_embeddings = NPOS,
                           .rms_norm_eps = 1e-6f, .rope_theta = 1e4f};
    float table[NPOS * D];
    rope_table(table, NPOS, &c);
    int32_t pos[N];
    for (int i = 0; i < N; i++) pos[i] = (i * 5) % NPOS;
    size_t nr = (size_t)N * H * D;
    float *r = malloc(nr * sizeof *r), *ref_r = malloc(nr * sizeof *r), *got_r = malloc(nr * sizeof *r);
    fill_normal(r, nr, 13, 1.0f);
    memcpy(ref_r, r, nr * sizeof *r);
    rope_backward(ref_r, pos, N, H, D, table);
    void *d_rr = dev_copy(r, nr * sizeof *r), *d_p = dev_copy(pos, sizeof pos);
    void *d_tab = dev_copy(table, sizeof table);
    CU_OK(api->rope_bwd(d_rr, d_p, N, H, D, d_tab));
    CU_OK(api->sync());
    CU_OK(api->to_host(got_r, d_rr, nr * sizeof *r));
    expect_close("rope_bwd", got_r, ref_r, nr, 1e-6);

    /* SwiGLU: the sig of the forward, then the backward */
    float *sig = malloc(n * sizeof *sig), *y = malloc(n * sizeof *y), *dg = malloc(n * sizeof *dg);
    float *du = malloc(n * sizeof *du), *ref_dg = malloc(n * sizeof *dg), *ref_du = malloc(n * sizeof *du);
    const float *u = dy; /* g = x, u = dy: any two arrays */
    swiglu_forward(y, sig, x, u, (int64_t)n);
    fill_normal(dg, n, 14, 0.1f);
    fill_normal(du, n, 15, 0.1f);
    memcpy(ref_dg, dg, n * sizeof *dg);
    memcpy(ref_du, du, n * sizeof *du);
    swiglu_backward(ref_dg, ref_du, dy, x, u, sig, (int64_t)n);
    void *d_sig = dev_copy(NULL, n * sizeof *sig), *d_y = dev_copy(NULL, n * sizeof *y);
    void *d_u = dev_copy(u, n * sizeof *u), *d_dg = dev_copy(dg, n * sizeof *dg);
    void *d_du = dev_copy(du, n * sizeof *du);
    CU_OK(api->swiglu_fwd(d_y, d_sig, d_x, d_u, (int64_t)n));
    CU_OK(api->to_host(got, d_sig, n * sizeof *got));
    expect_close("swiglu_fwd sig", got, sig, n, 1e-6);
    CU_OK(api->to_device(d_sig, sig, n * sizeof *sig)); /* the backward from the same sig */
    CU_OK(api->swiglu_bwd(d_dg, d_du, d_dy, d_x, d_u, d_sig, (int64_t)n));
    CU_OK(api->sync());
    CU_OK(api->to_host(got, d_dg, n * sizeof *got));
    expect_close("swiglu_bwd dg", got, ref_dg, n, 1e-5);
    CU_OK(api->to_host(got, d_du, n * sizeof *got));
    expect_close("swiglu_bwd du", got, ref_du, n, 1e-5);

    void *bufs[] = {d_x, d_dy, d_w, d_dx, d_dw, d_r, d_de, d_t, d_rr, d_p, d_tab,
                    d_sig, d_y, d_u, d_dg, d_du};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) api->free(bufs[k]);
    free(x), free(dy), free(w), free(dx), free(ref_dx), free(got), free(got_de);
    free(r), free(ref_r), free(got_r), free(sig), free(y), free(dg), free(du), free(ref_dg);
    free(ref_du);
}

/* The cuBLASLt GEMM against linear_forward on the same bf16-rounded operands, with and
 * without accumulation, and the bias add. */
static void test_linear(void)
{
    static const int shapes[][3] = {{37, 64, 96}, {1, 1024, 3072}, {128, 256, 256}, {5, 80, 48}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int N = shapes[c][0], in = shapes[c][1], out = shapes[c][2];
        size_t nx = (size_t)N * in, nw = (size_t)out * in, ny = (size_t)N * out;
        float *x = malloc(nx * sizeof *x), *w = malloc(nw * sizeof *w), *b = malloc(out * sizeof *b);
        float *ref = malloc(ny * sizeof *ref), *got = malloc(ny * sizeof *got);
        uint16_t *x16 = malloc(nx * sizeof *x16), *w16 = malloc(nw * sizeof *w16);
        fill_normal(x, nx, 50 + c, 1.0f);
        fill_normal(w, nw, 60 + c, 0.05f);
        fill_normal(b, (size_t)out, 70 + c, 0.1f);
        for (size_t i = 0; i < nx; i++) x[i] = st_bf16_to_f32(x16[i] = st_f32_to_bf16(x[i]));
        for (size_t i = 0; i < nw; i++) w[i] = st_bf16_to_f32(w16[i] = st_f32_to_bf16(w[i]));
        linear_forward(ref, x, w, b, N, in, out);
        void *d_x = dev_copy(x16, nx * sizeof *x16), *d_w = dev_copy(w16, nw * sizeof *w16);
        void *d_b = dev_copy(b, (size_t)out * sizeof *b), *d_y = dev_copy(NULL, ny * sizeof *got);
        CU_OK(api->linear_fwd(d_y, d_x, d_w, N, in, out, 0));
        CU_OK(api->add_bias(d_y, d_b, N, out));
        CU_OK(api->sync());
        CU_OK(api->to_host(got, d_y, ny * sizeof *got));
        char what[64];
        snprintf(what, sizeof what, "linear_fwd N %d in %d out %d", N, in, out);
        expect_close(what, got, ref, ny, 1e-5);
        /* accumulate: y += x W^T once more gives 2 x W^T + b */
        CU_OK(api->linear_fwd(d_y, d_x, d_w, N, in, out, 1));
        CU_OK(api->sync());
        CU_OK(api->to_host(got, d_y, ny * sizeof *got));
        for (size_t i = 0; i < ny; i++) ref[i] = 2.0f * ref[i] - b[i % (size_t)out];
        expect_close("linear_fwd accumulate", got, ref, ny, 1e-5);
        /* linear_fwd_res into another matrix against accumulating into y in place (the
         * same algorithm: 1e-6 of the largest), y left as it was */
        void *d_z = dev_copy(NULL, ny * sizeof *got);
        CU_OK(api->linear_fwd_res(d_z, d_y, d_x, d_w, N, in, out));
        CU_OK(api->sync());
        float *kept = malloc(ny * sizeof *kept);
        CU_OK(api->to_host(kept, d_y, ny * sizeof *kept));
        CU_ASSERT(memcmp(kept, got, ny * sizeof *got) == 0);
        CU_OK(api->linear_fwd(d_y, d_x, d_w, N, in, out, 1));
        CU_OK(api->sync());
        CU_OK(api->to_host(got, d_z, ny * sizeof *got));
        CU_OK(api->to_host(ref, d_y, ny * sizeof *ref));
        expect_close("linear_fwd_res", got, ref, ny, 1e-6);
        free(kept);
        void *bufs[] = {d_x, d_w, d_b, d_y, d_z};
        for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) api->free(bufs[k]);
        free(x), free(w), free(b), free(ref), free(got), free(x16), free(w16);
    }
}

/* gemv against linear_forward on the bf16-rounded operands (x is float32 on the device
 * and rounded as it is read): three matrices of one input with biases, one
 * accumulating, the gate / up pair with swiglu_forward, a last tile shorter than the
 * rest (in 2568), every N from 1 to CUDA_GEMV_MAX_ROWS; a row's result equals the
 * same row computed alone (N = 1), bit for bit; what it cannot do it refuses. */
static void test_gemv(void)
{
    enum { MAXN = CUDA_GEMV_MAX_ROWS };
    static const int shapes[][4] = {/* in, out_0, out_1, out_2 */
                                    {1024, 2048, 512, 512}, {96, 48, 24, 24}, {2568, 80, 0, 0}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int in = shapes[c][0], nm = shapes[c][2] ? 3 : 1, outs[3] = {shapes[c][1], shapes[c][2],
                                                                    shapes[c][3]};
        for (int N = 1; N <= MAXN; N += (N < 3 ? 1 : 5)) { /* 1, 2, 3, 8 */
            size_t nx = (size_t)N * in;
            float *x = malloc(nx * sizeof *x), *xr = malloc(nx * sizeof *xr);
            fill_normal(x, nx, 140 + c * 10 + (size_t)N, 1.0f);
            for (size_t i = 0; i < nx; i++) xr[i] = st_bf16_to_f32(st_f32_to_bf16(x[i]));
            void *d_x = dev_copy(x, nx * sizeof *x);
            struct cuda_gemv g = {.x = d_x, .N = N, .in = in, .n_mats = nm};
            float *ref[3] = {0}, *w[3] = {0}, *b[3] = {0};
            for (int i = 0; i < nm; i++) {
                size_t nw = (size_t)outs[i] * in, ny = (size_t)N * outs[i];
                uint16_t *w16 = malloc(nw * sizeof *w16);
                w[i] = malloc(nw * sizeof *w[i]), b[i] = malloc((size_t)outs[i] * sizeof *b[i]);
                ref[i] = malloc(ny * sizeof *ref[i]);
                fill_normal(w[i], nw, 150 + c * 10 + (size_t)i, 0.05f);
                fill_normal(b[i], (size_t)outs[i], 160 + (size_t)i, 0.1f);
                for (size_t k = 0; k < nw; k++) w[i][k] = st_bf16_to_f32(w16[k] = st_f32_to_bf16(w[i][k]));
                linear_forward(ref[i], xr, w[i], i == 2 ? NULL : b[i], N, in, outs[i]);
                g.m[i].w = dev_copy(w16, nw * sizeof *w16);
                g.m[i].b = i == 2 ? NULL : dev_copy(b[i], (size_t)outs[i] * sizeof *b[i]);
                g.m[i].y = dev_copy(NULL, ny * sizeof(float));
                g.m[i].out = outs[i];
                free(w16);
            }
            CU_OK(api->gemv(&g));
            CU_OK(api->sync());
            float *got_all[3] = {0};
            for (int i = 0; i < nm; i++) {
                size_t ny = (size_t)N * outs[i];
                got_all[i] = malloc(ny * sizeof *got_all[i]);
                CU_OK(api->to_host(got_all[i], g.m[i].y, ny * sizeof *got_all[i]));
                char what[80];
                snprintf(what, sizeof what, "gemv N %d in %d out %d", N, in, outs[i]);
                expect_close(what, got_all[i], ref[i], ny, 1e-5);
            }
            /* the last row alone gives the same bits (written over row 0) */
            struct cuda_gemv g1 = g;
            g1.N = 1, g1.x = (const float *)d_x + (size_t)(N - 1) * in;
            CU_OK(api->gemv(&g1));
            CU_OK(api->sync());
            for (int i = 0; i < nm; i++) {
                float *one = malloc((size_t)outs[i] * sizeof *one);
                CU_OK(api->to_host(one, g.m[i].y, (size_t)outs[i] * sizeof *one));
                CU_ASSERT(memcmp(one, got_all[i] + (size_t)(N - 1) * outs[i],
                                 (size_t)outs[i] * sizeof *one) == 0);
                free(one), free(got_all[i]);
            }
            /* accumulate: y += x W^T (no bias) over the first matrix's result */
            struct cuda_gemv ga = g;
            ga.n_mats = 1, ga.accumulate = 1, ga.m[0].b = NULL;
            CU_OK(api->gemv(&g));
            CU_OK(api->gemv(&ga));
            CU_OK(api->sync());
            size_t ny0 = (size_t)N * outs[0];
            float *got = malloc(ny0 * sizeof *got);
            CU_OK(api->to_host(got, g.m[0].y, ny0 * sizeof *got));
            for (size_t k = 0; k < ny0; k++) ref[0][k] = 2.0f * ref[0][k] - b[0][k % (size_t)outs[0]];
            expect_close("gemv accumulate", got, ref[0], ny0, 1e-5);
            /* swiglu: gate and up of the same out (the first matrix twice, the second's
             * weights as up when there is one of the same shape, else the first) */
            struct cuda_gemv gs = g;
            gs.n_mats = 2, gs.swiglu = 1, gs.m[0].b = NULL, gs.m[1] = g.m[0], gs.m[1].b = NULL;
            gs.m[1].y = NULL;
            float *gate = malloc(ny0 * sizeof *gate), *sw = malloc(ny0 * sizeof *sw);
            linear_forward(gate, xr, w[0], NULL, N, in, outs[0]);
            swiglu_forward(sw, NULL, gate, gate, (int64_t)ny0);
            CU_OK(api->gemv(&gs));
            CU_OK(api->sync());
            CU_OK(api->to_host(got, g.m[0].y, ny0 * sizeof *got));
            expect_close("gemv swiglu", got, sw, ny0, 1e-5);
            free(gate), free(sw), free(got);
            for (int i = 0; i < nm; i++) {
                api->free((void *)g.m[i].w), api->free((void *)g.m[i].b), api->free(g.m[i].y);
                free(w[i]), free(b[i]), free(ref[i]);
            }
            api->free(d_x);
            free(x), free(xr);
        }
    }
    /* refusals: too many rows, in not a multiple of 8, misaligned x, swiglu of one */
    void *d = dev_copy(NULL, 4096);
    struct cuda_gemv bad = {.x = d, .N = MAXN + 1, .in = 16, .n_mats = 1};
    bad.m[0].w = d, bad.m[0].y = (float *)d + 512, bad.m[0].out = 4;
    CU_ASSERT(api->gemv(&bad) == -1);
    bad.N = 1, bad.in = 12;
    CU_ASSERT(api->gemv(&bad) == -1);
    CU_ASSERT(strstr(api->last_error(), "multiple of 8") != NULL);
    bad.in = 16, bad.x = (const float *)d + 1;
    CU_ASSERT(api->gemv(&bad) == -1);
    bad.x = d, bad.swiglu = 1;
    CU_ASSERT(api->gemv(&bad) == -1);
    bad.swiglu = 0;
    CU_ASSERT(api->gemv(&bad) == 0);
    CU_OK(api->sync());
    api->free(d);
}

/* gemv with the RMSNorm folded in gives the bits of rmsnorm_fwd then gemv, at N 1, 2
 * and 5 and over widths of one tile and of several. */
static void test_gemv_norm(void)
{
    static const int shapes[][2] = {{1024, 3072}, {2568, 80}}; /* in, out */
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int in = shapes[c][0], out = shapes[c][1];
        for (int N = 1; N <= 5; N += N < 2 ? 1 : 3) {
            size_t nx = (size_t)N * in, nw = (size_t)out * in, ny = (size_t)N * out;
            float *x = malloc(nx * sizeof *x), *w = malloc(nw * sizeof *w), *ln = malloc(in * sizeof *ln);
            uint16_t *w16 = malloc(nw * sizeof *w16), *ln16 = malloc(in * sizeof *ln16);
            float *fused = malloc(ny * sizeof *fused), *plain = malloc(ny * sizeof *plain);
            fill_normal(x, nx, 170 + c, 2.0f);
            fill_normal(w, nw, 171 + c, 0.05f);
            fill_normal(ln, (size_t)in, 172 + c, 1.0f);
            for (size_t i = 0; i < nw; i++) w16[i] = st_f32_to_bf16(w[i]);
            for (int i = 0; i < in; i++) ln16[i] = st_f32_to_bf16(ln[i]);
            void *d_x = dev_copy(x, nx * sizeof *x), *d_h = dev_copy(NULL, nx * sizeof *x);
            void *d_w = dev_copy(w16, nw * sizeof *w16), *d_ln = dev_copy(ln16, in * sizeof *ln16);
            void *d_y = dev_copy(NULL, ny * sizeof *fused);
            struct cuda_gemv g = {.x = d_x, .N = N, .in = in, .n_mats = 1, .norm = d_ln, .eps = 1e-6f};
            g.m[0].y = d_y, g.m[0].w = d_w, g.m[0].out = out;
            CU_OK(api->gemv(&g));
            CU_OK(api->sync());
            CU_OK(api->to_host(fused, d_y, ny * sizeof *fused));
            CU_OK(api->rmsnorm_fwd(d_h, d_x, d_ln, N, in, 1e-6f));
            g.x = d_h, g.norm = NULL;
            CU_OK(api->gemv(&g));
            CU_OK(api->sync());
            CU_OK(api->to_host(plain, d_y, ny * sizeof *plain));
            CU_ASSERT(memcmp(fused, plain, ny * sizeof *fused) == 0);
            void *bufs[] = {d_x, d_h, d_w, d_ln, d_y};
            for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) api->free(bufs[k]);
            free(x), free(w), free(ln), free(w16), free(ln16), free(fused), free(plain);
        }
    }
}

/* Overlapped launches (launch_overlap): a chain of gemvs, each reading the one before's
 * output (norm folded in) and adding into the buffer that one read, gives the bits of
 * plain launches. A gemv that read its input, or wrote its output, before its
 * grid_wait would race with the kernel before it on a GPU that overlaps (compute
 * capability 9.0 on); elsewhere launch_overlap(1) says 0 and both runs are plain. */
static void test_gemv_overlap(void)
{
    enum { IN = 1024, N = 2, LINKS = 8 };
    size_t nx = (size_t)N * IN, nw = (size_t)IN * IN;
    float *x = malloc(nx * sizeof *x), *w = malloc(nw * sizeof *w), *got[2];
    uint16_t *w16 = malloc(nw * sizeof *w16), ln16[IN];
    fill_normal(x, nx, 180, 1.0f);
    fill_normal(w, nw, 181, 0.03f);
    for (size_t i = 0; i < nw; i++) w16[i] = st_f32_to_bf16(w[i]);
    for (int i = 0; i < IN; i++) ln16[i] = st_f32_to_bf16(1.0f + 0.01f * (float)(i % 7));
    void *d_w = dev_copy(w16, nw * sizeof *w16), *d_ln = dev_copy(ln16, sizeof ln16);
    void *buf[2] = {dev_copy(NULL, nx * sizeof *x), dev_copy(NULL, nx * sizeof *x)};
    int on = 0;
    for (int run = 0; run < 2; run++) {
        int r = api->launch_overlap(run);
        CU_ASSERT(run ? r == 0 || r == 1 : r == 0);
        on |= run && r == 1;
        CU_OK(api->to_device(buf[0], x, nx * sizeof *x));
        CU_OK(api->zero(buf[1], nx * sizeof *x));
        for (int k = 0; k < LINKS; k++) { /* buf[k % 2] -> buf[(k + 1) % 2], added to */
            struct cuda_gemv g = {.x = buf[k % 2], .N = N, .in = IN, .n_mats = 1,
                                  .accumulate = 1, .norm = k % 3 ? d_ln : NULL, .eps = 1e-6f};
            g.m[0].w = d_w, g.m[0].y = buf[(k + 1) % 2], g.m[0].out = IN;
            CU_OK(api->gemv(&g));
        }
        CU_OK(api->sync());
        got[run] = malloc(nx * sizeof *got[run]);
        CU_OK(api->to_host(got[run], buf[LINKS % 2], nx * sizeof *got[run]));
    }
    CU_ASSERT(api->launch_overlap(0) == 0);
    printf("[overlapped launches %s] ", on ? "on" : "not on this GPU");
    double big = 0;
    for (size_t i = 0; i < nx; i++) big = fmax(big, fabs(got[0][i]));
    CU_ASSERT(big > 0 && isfinite(big));
    CU_ASSERT(memcmp(got[0], got[1], nx * sizeof *got[0]) == 0);
    void *bufs[] = {d_w, d_ln, buf[0], buf[1]};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) api->free(bufs[k]);
    free(x), free(w), free(w16), free(got[0]), free(got[1]);
}

/* The bf16 values of two pools agree: at most one unit in the last place apart (a
 * float32 input 1e-6 apart may round either way at a midpoint), and at most 1 % not
 * bitwise equal. */
static void expect_bf16_pools(const char *what, const uint16_t *got, const uint16_t *ref, size_t n)
{
    size_t differ = 0, far = 0;
    for (size_t i = 0; i < n; i++) {
        if (got[i] == ref[i]) continue;
        differ++;
        int d = (int)got[i] - (int)ref[i];
        far += (got[i] ^ ref[i]) >> 15 || d > 1 || d < -1; /* sign, or beyond one ulp */
    }
    CU_ASSERT_EQUAL(far, 0);
    CU_ASSERT(differ <= n / 100);
    if (far || differ > n / 100)
        fprintf(stderr, "\n%s: %zu of %zu values differ, %zu by more than one ulp\n", what,
                differ, n, far);
}

/* swiglu_fwd16 / swiglu_bwd16: swiglu_forward's y and swiglu_backward's terms (added
 * to zeros) rounded to bf16, as expect_bf16_pools; the forward's sig as swiglu_fwd's
 * (1e-6); the bf16 outputs are written over what was there. */
static void test_swiglu16(void)
{
    const size_t n = 40000;
    float *g = malloc(n * sizeof *g), *u = malloc(n * sizeof *u), *dy = malloc(n * sizeof *dy);
    float *y = malloc(n * sizeof *y), *sig = malloc(n * sizeof *sig), *got = malloc(n * sizeof *got);
    float *dg = calloc(n, sizeof *dg), *du = calloc(n, sizeof *du);
    uint16_t *ref16 = malloc(n * 2), *got16 = malloc(n * 2), *junk = malloc(n * 2);
    fill_normal(g, n, 140, 3.0f);
    fill_normal(u, n, 141, 1.0f);
    fill_normal(dy, n, 142, 1.0f);
    for (size_t i = 0; i < n; i++) junk[i] = (uint16_t)(0x3f80 + i % 64); /* 1.0 and up */
    swiglu_forward(y, sig, g, u, (int64_t)n);
    swiglu_backward(dg, du, dy, g, u, sig, (int64_t)n);
    void *d_g = dev_copy(g, n * sizeof *g), *d_u = dev_copy(u, n * sizeof *u);
    void *d_dy = dev_copy(dy, n * sizeof *dy), *d_sig = dev_copy(NULL, n * sizeof *sig);
    void *d_y = dev_copy(junk, n * 2), *d_dg = dev_copy(junk, n * 2), *d_du = dev_copy(junk, n * 2);
    CU_OK(api->swiglu_fwd16(d_y, d_sig, d_g, d_u, (int64_t)n));
    CU_OK(api->sync());
    CU_OK(api->to_host(got16, d_y, n * 2));
    st_f32_to_bf16_n(y, ref16, n);
    expect_bf16_pools("swiglu_fwd16", got16, ref16, n);
    CU_OK(api->to_host(got, d_sig, n * sizeof *got));
    expect_close("swiglu_fwd16 sig", got, sig, n, 1e-6);
    CU_OK(api->to_device(d_sig, sig, n * sizeof *sig)); /* the backward from the same sig */
    CU_OK(api->swiglu_bwd16(d_dg, d_du, d_dy, d_g, d_u, d_sig, (int64_t)n));
    CU_OK(api->sync());
    CU_OK(api->to_host(got16, d_dg, n * 2));
    st_f32_to_bf16_n(dg, ref16, n);
    expect_bf16_pools("swiglu_bwd16 dg", got16, ref16, n);
    CU_OK(api->to_host(got16, d_du, n * 2));
    st_f32_to_bf16_n(du, ref16, n);
    expect_bf16_pools("swiglu_bwd16 du", got16, ref16, n);
    CU_OK(api->to_device(d_du, junk, n * 2)); /* without sig: formed again from g */
    CU_OK(api->swiglu_bwd16(d_dg, d_du, d_dy, d_g, d_u, NULL, (int64_t)n));
    CU_OK(api->sync());
    CU_OK(api->to_host(got16, d_du, n * 2));
    expect_bf16_pools("swiglu_bwd16 du, sig formed again", got16, ref16, n);
    void *bufs[] = {d_g, d_u, d_dy, d_sig, d_y, d_dg, d_du};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) api->free(bufs[k]);
    free(g), free(u), free(dy), free(y), free(sig), free(got), free(dg), free(du), free(ref16);
    free(got16), free(junk);
}

/* qk_norm_rope_fwd / _bwd against the kernels they fuse, on the device: y against
 * rmsnorm_fwd then rope_fwd, and backward dy (rotated back in place) against rope_bwd's,
 * dx (written over junk) against rmsnorm_bwd's into zeros, dw against its dw -- 1e-6,
 * 1e-6, 1e-5 and 1e-5 of the largest (fused multiply-adds may be placed otherwise);
 * D 128 and 80 over rows not a multiple of a block's 8; an odd D refused. */
static void qk_case(int N, int H, int D, uint64_t seed)
{
    enum { NPOS = 64 };
    struct tfm_config c = {.family = TFM_QWEN3, .vocab_size = 16, .hidden_size = H * D,
                           .n_layers = 1, .n_heads = H, .n_kv_heads = H, .head_dim = D,
                           .intermediate_size = 8, .max_position_embeddings = NPOS,
                           .rms_norm_eps = 1e-6f, .rope_theta = 1e6f};
    size_t n = (size_t)N * H * D;
    float *rope = malloc(sizeof(float) * NPOS * D), *x = malloc(n * sizeof *x);
    float *dy = malloc(n * sizeof *dy), *got = malloc(n * sizeof *got);
    float *ref = malloc(n * sizeof *ref), *w = malloc(D * sizeof *w);
    uint16_t *w16 = malloc(D * sizeof *w16);
    int32_t *pos = malloc(N * sizeof *pos);
    rope_table(rope, NPOS, &c);
    for (int i = 0; i < N; i++) pos[i] = (i * 7 + 2) % NPOS;
    fill_normal(x, n, seed, 1.5f);
    fill_normal(dy, n, seed + 1, 1.0f);
    fill_normal(w, D, seed + 2, 1.0f);
    for (int i = 0; i < D; i++) w16[i] = st_f32_to_bf16(w[i]);
    void *d_x = dev_copy(x, n * sizeof *x), *d_w16 = dev_copy(w16, D * sizeof *w16);
    void *d_w = dev_copy(w, D * sizeof *w), *d_rope = dev_copy(rope, sizeof(float) * NPOS * D);
    void *d_pos = dev_copy(pos, N * sizeof *pos), *d_y[2], *d_dy[2], *d_dx[2], *d_dw[2];
    void *d_r = dev_copy(NULL, (size_t)N * H * sizeof(float));
    for (int k = 0; k < 2; k++) {
        d_y[k] = dev_copy(NULL, n * sizeof(float));
        d_dy[k] = dev_copy(dy, n * sizeof *dy);
        d_dx[k] = dev_copy(x, n * sizeof *x); /* junk: [0] written, [1] zeroed below */
        d_dw[k] = dev_copy(w, D * sizeof *w);
    }
    CU_OK(api->qk_norm_rope_fwd(d_y[0], d_x, d_w16, d_pos, d_rope, N, H, D, 1e-6f));
    CU_OK(api->rmsnorm_fwd(d_y[1], d_x, d_w16, N * H, D, 1e-6f));
    CU_OK(api->rope_fwd(d_y[1], d_pos, N, H, D, d_rope));
    CU_OK(api->qk_norm_rope_bwd(d_dx[0], d_dw[0], d_dy[0], d_x, d_w, d_r, d_pos, d_rope, N, H,
                                D, 1e-6f));
    CU_OK(api->rope_bwd(d_dy[1], d_pos, N, H, D, d_rope));
    CU_OK(api->zero(d_dx[1], n * sizeof(float)));
    CU_OK(api->rmsnorm_bwd(d_dx[1], NULL, d_dw[1], d_dy[1], d_x, d_w, d_r, N * H, D, 1e-6f));
    CU_OK(api->sync());
    const char *what[4] = {"qk_norm_rope_fwd", "qk_norm_rope_bwd dy", "qk_norm_rope_bwd dx",
                           "qk_norm_rope_bwd dw"};
    void **bufs[4] = {d_y, d_dy, d_dx, d_dw};
    double tol[4] = {1e-6, 1e-6, 1e-5, 1e-5};
    for (int b = 0; b < 4; b++) {
        size_t m = b == 3 ? (size_t)D : n;
        CU_OK(api->to_host(got, bufs[b][0], m * sizeof *got));
        CU_OK(api->to_host(ref, bufs[b][1], m * sizeof *ref));
        expect_close(what[b], got, ref, m, tol[b]);
    }
    for (int k = 0; k < 2; k++) api->free(d_y[k]), api->free(d_dy[k]), api->free(d_dx[k]), api->free(d_dw[k]);
    void *rest[] = {d_x, d_w16, d_w, d_rope, d_pos, d_r};
    for (size_t k = 0; k < sizeof rest / sizeof rest[0]; k++) api->free(rest[k]);
    free(rope), free(x), free(dy), free(got), free(ref), free(w), free(w16), free(pos);
}

static void test_qk_norm_rope(void)
{
    qk_case(37, 3, 128, 150);
    qk_case(5, 2, 80, 160);
    float *junk = NULL; /* refused before any memory is touched */
    CU_ASSERT_EQUAL(api->qk_norm_rope_fwd(junk, junk, NULL, NULL, NULL, 4, 2, 63, 1e-6f), -1);
    CU_ASSERT(strstr(api->last_error(), "odd") != NULL);
    CU_ASSERT_EQUAL(api->qk_norm_rope_bwd(junk, NULL, junk, junk, junk, junk, NULL, NULL, 4, 2,
                                          258, 1e-6f),
                    -1);
}

/* decode_qkv against the kernels it fuses (rmsnorm_fwd per head, rope_fwd, kv_append),
 * with and without the q/k norms: q within 1e-6 of the largest, the bf16 pools'
 * rows as expect_bf16_pools. */
static void test_decode_qkv(void)
{
    enum { B = 3, H = 8, K = 2, D = 128, P = 16, NBLK = 6, MAXB = 3, NPOS = 64 };
    const int32_t len[B] = {5, 17, 33}, pos[B] = {4, 16, 32};
    const int32_t table[B][MAXB] = {{0, 5, 5}, {1, 2, 5}, {3, 4, 5}}; /* new: 0, 2, 5 */
    struct tfm_config c = {.family = TFM_QWEN3, .vocab_size = 16, .hidden_size = 64,
                           .n_layers = 1, .n_heads = H, .n_kv_heads = K, .head_dim = D,
                           .intermediate_size = 8, .max_position_embeddings = NPOS,
                           .rms_norm_eps = 1e-6f, .rope_theta = 1e6f};
    float *rope = malloc(sizeof(float) * NPOS * D);
    rope_table(rope, NPOS, &c);
    size_t nq = (size_t)B * H * D, nk = (size_t)B * K * D, pool = (size_t)NBLK * P * K * D;
    float *ql = malloc(nq * sizeof *ql), *kl = malloc(nk * sizeof *kl), *v = malloc(nk * sizeof *v);
    float qn[D], kn[D];
    uint16_t qn16[D], kn16[D];
    fill_normal(ql, nq, 180, 1.5f);
    fill_normal(kl, nk, 181, 1.5f);
    fill_normal(v, nk, 182, 1.0f);
    fill_normal(qn, D, 183, 1.0f);
    fill_normal(kn, D, 184, 1.0f);
    for (int i = 0; i < D; i++) qn16[i] = st_f32_to_bf16(qn[i]), kn16[i] = st_f32_to_bf16(kn[i]);
    void *d_ql = dev_copy(ql, nq * sizeof *ql), *d_kl = dev_copy(kl, nk * sizeof *kl);
    void *d_v = dev_copy(v, nk * sizeof *v), *d_qn = dev_copy(qn16, sizeof qn16);
    void *d_kn = dev_copy(kn16, sizeof kn16), *d_rope = dev_copy(rope, sizeof(float) * NPOS * D);
    void *d_pos = dev_copy(pos, sizeof pos), *d_len = dev_copy(len, sizeof len);
    void *d_tab = dev_copy(table, sizeof table);
    void *d_q[2], *d_kp[2], *d_vp[2], *d_qt = dev_copy(NULL, nq * sizeof(float));
    void *d_kt = dev_copy(NULL, nk * sizeof(float));
    float *got = malloc(nq * sizeof *got), *ref = malloc(nq * sizeof *ref);
    uint16_t *got16 = malloc(pool * sizeof *got16), *ref16 = malloc(pool * sizeof *ref16);
    for (int norm = 0; norm < 2; norm++) {
        for (int k = 0; k < 2; k++) {
            d_q[k] = dev_copy(NULL, nq * sizeof(float));
            d_kp[k] = dev_copy(NULL, pool * sizeof(uint16_t));
            d_vp[k] = dev_copy(NULL, pool * sizeof(uint16_t));
            CU_OK(api->zero(d_kp[k], pool * sizeof(uint16_t)));
            CU_OK(api->zero(d_vp[k], pool * sizeof(uint16_t)));
        }
        CU_OK(api->decode_qkv(d_q[0], d_kp[0], d_vp[0], d_ql, d_kl, d_v, norm ? d_qn : NULL,
                              norm ? d_kn : NULL, 1e-6f, d_pos, d_rope, d_tab,
                              MAXB, d_len, B, H, K, D, P));
        if (norm) {
            CU_OK(api->rmsnorm_fwd(d_q[1], d_ql, d_qn, B * H, D, 1e-6f));
            CU_OK(api->rmsnorm_fwd(d_kt, d_kl, d_kn, B * K, D, 1e-6f));
        } else {
            CU_OK(api->copy(d_q[1], d_ql, nq * sizeof(float)));
            CU_OK(api->copy(d_kt, d_kl, nk * sizeof(float)));
        }
        CU_OK(api->rope_fwd(d_q[1], d_pos, B, H, D, d_rope));
        CU_OK(api->rope_fwd(d_kt, d_pos, B, K, D, d_rope));
        CU_OK(api->kv_append(d_kp[1], d_vp[1], d_kt, d_v, d_tab, MAXB, d_len, B, K, D, P));
        CU_OK(api->sync());
        CU_OK(api->to_host(got, d_q[0], nq * sizeof *got));
        CU_OK(api->to_host(ref, d_q[1], nq * sizeof *ref));
        expect_close("decode_qkv q", got, ref, nq, 1e-6);
        const char *what[2] = {"decode_qkv k pool", "decode_qkv v pool"};
        void **pools[2] = {d_kp, d_vp};
        for (int b = 0; b < 2; b++) {
            CU_OK(api->to_host(got16, pools[b][0], pool * sizeof *got16));
            CU_OK(api->to_host(ref16, pools[b][1], pool * sizeof *ref16));
            expect_bf16_pools(what[b], got16, ref16, pool);
        }
        /* the new rows hold k and v rounded to bf16: row 16 of block 2 is sequence 1's */
        CU_OK(api->to_host(ref16, d_vp[0], pool * sizeof *ref16));
        size_t at = ((size_t)2 * P + 0) * K * D;
        for (int j = 0; j < K * D; j++)
            CU_ASSERT_EQUAL(ref16[at + (size_t)j], st_f32_to_bf16(v[(size_t)1 * K * D + (size_t)j]));
        for (int k = 0; k < 2; k++) api->free(d_q[k]), api->free(d_kp[k]), api->free(d_vp[k]);
    }
    void *rest[] = {d_ql, d_kl, d_v, d_qn, d_kn, d_rope, d_pos, d_len, d_tab, d_qt, d_kt};
    for (size_t k = 0; k < sizeof rest / sizeof rest[0]; k++) api->free(rest[k]);
    free(rope), free(ql), free(kl), free(v), free(got), free(ref), free(got16), free(ref16);
}

/* The backward GEMMs and the bias gradient against linear_backward: dw and db
 * accumulating, dx accumulating or written (the last shape) over what was there. */
static void test_linear_backward(void)
{
    static const int shapes[][3] = {{37, 64, 96}, {130, 256, 80}, {1, 48, 1024}, {19, 40, 72}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int N = shapes[c][0], in = shapes[c][1], out = shapes[c][2], acc = c < 3;
        size_t nx = (size_t)N * in, nw = (size_t)out * in, ny = (size_t)N * out;
        float *x = malloc(nx * sizeof *x), *w = malloc(nw * sizeof *w), *dy = malloc(ny * sizeof *dy);
        float *dx = malloc(nx * sizeof *dx), *dw = malloc(nw * sizeof *dw), *db = malloc(out * sizeof *db);
        float *got = malloc((nx > nw ? nx : nw) * sizeof *got);
        uint16_t *x16 = malloc(nx * 2), *w16 = malloc(nw * 2), *dy16 = malloc(ny * 2);
        fill_normal(x, nx, 80 + c, 1.0f);
        fill_normal(w, nw, 90 + c, 0.05f);
        fill_normal(dy, ny, 100 + c, 1.0f);
        for (size_t i = 0; i < nx; i++) x[i] = st_bf16_to_f32(x16[i] = st_f32_to_bf16(x[i]));
        for (size_t i = 0; i < nw; i++) w[i] = st_bf16_to_f32(w16[i] = st_f32_to_bf16(w[i]));
        for (size_t i = 0; i < ny; i++) dy[i] = st_bf16_to_f32(dy16[i] = st_f32_to_bf16(dy[i]));
        fill_normal(dx, nx, 110 + c, 0.1f); /* accumulated into */
        fill_normal(dw, nw, 120 + c, 0.1f);
        fill_normal(db, (size_t)out, 130 + c, 0.1f);
        void *d_dx = dev_copy(dx, nx * sizeof *dx), *d_dw = dev_copy(dw, nw * sizeof *dw);
        void *d_db = dev_copy(db, (size_t)out * sizeof *db), *d_dyf = dev_copy(dy, ny * sizeof *dy);
        void *d_x = dev_copy(x16, nx * 2), *d_w = dev_copy(w16, nw * 2), *d_dy = dev_copy(dy16, ny * 2);
        if (!acc) memset(dx, 0, nx * sizeof *dx); /* the device's dx keeps its old values */
        linear_backward(dx, dw, db, dy, x, w, N, in, out);
        CU_OK(api->linear_bwd(d_dx, d_dw, d_dy, d_x, d_w, N, in, out, acc));
        CU_OK(api->bias_bwd(d_db, d_dyf, N, out));
        CU_OK(api->sync());
        char what[64];
        CU_OK(api->to_host(got, d_dx, nx * sizeof *got));
        snprintf(what, sizeof what, "linear_bwd dx%s N %d in %d out %d", acc ? " +=" : " =", N,
                 in, out);
        expect_close(what, got, dx, nx, 1e-5);
        CU_OK(api->to_host(got, d_dw, nw * sizeof *got));
        snprintf(what, sizeof what, "linear_bwd dw N %d in %d out %d", N, in, out);
        expect_close(what, got, dw, nw, 1e-5);
        CU_OK(api->to_host(got, d_db, (size_t)out * sizeof *got));
        expect_close("bias_bwd", got, db, (size_t)out, 1e-5);
        void *bufs[] = {d_dx, d_dw, d_db, d_dyf, d_x, d_w, d_dy};
        for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) api->free(bufs[k]);
        free(x), free(w), free(dy), free(dx), free(dw), free(db), free(got), free(x16), free(w16);
        free(dy16);
    }
}

/* Causal GQA attention against attn_forward: a prefill (every row), a decode-like
 * single row at the end, head dimensions that are and are not multiples of 32. */
static void test_attention(void)
{
    static const struct { int nq, nk, H, K, D; } cases[] = {
        {37, 37, 8, 2, 64}, {1, 50, 4, 4, 128}, {13, 13, 6, 3, 80}, {9, 9, 2, 1, 256},
        {300, 300, 4, 2, 128}, /* longer */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int nq = cases[c].nq, nk = cases[c].nk, H = cases[c].H, K = cases[c].K, D = cases[c].D;
        size_t nqe = (size_t)nq * H * D, nke = (size_t)nk * K * D;
        float *q = malloc(nqe * sizeof *q), *k = malloc(nke * sizeof *k), *v = malloc(nke * sizeof *v);
        float *ref = malloc(nqe * sizeof *ref), *got = malloc(nqe * sizeof *got);
        float *scratch = malloc(attn_scratch_floats(nq, nk, H, K, D) * sizeof *scratch);
        int32_t *pos = malloc((size_t)nq * sizeof *pos);
        int *ipos = malloc((size_t)nq * sizeof *ipos);
        fill_normal(q, nqe, 20 + c, 1.0f);
        fill_normal(k, nke, 30 + c, 1.0f);
        fill_normal(v, nke, 40 + c, 1.0f);
        for (int i = 0; i < nq; i++) pos[i] = ipos[i] = nk - nq + i;
        attn_forward(ref, q, k, v, ipos, nq, nk, H, K, D, scratch);
        void *d_q = dev_copy(q, nqe * sizeof *q), *d_k = dev_copy(k, nke * sizeof *k);
        void *d_v = dev_copy(v, nke * sizeof *v), *d_o = dev_copy(NULL, nqe * sizeof *got);
        void *d_p = dev_copy(pos, (size_t)nq * sizeof *pos);
        CU_OK(api->attn_fwd(d_o, d_q, d_k, d_v, d_p, nq, nk, H, K, D));
        CU_OK(api->sync());
        CU_OK(api->to_host(got, d_o, nqe * sizeof *got));
        char what[64];
        snprintf(what, sizeof what, "attn_fwd nq %d nk %d H %d K %d D %d", nq, nk, H, K, D);
        expect_close(what, got, ref, nqe, 1e-5);
        void *bufs[] = {d_q, d_k, d_v, d_o, d_p};
        for (size_t b = 0; b < sizeof bufs / sizeof bufs[0]; b++) api->free(bufs[b]);
        free(q), free(k), free(v), free(ref), free(got), free(scratch), free(pos), free(ipos);
    }
    /* a head dimension past the kernel's limit is refused with a message */
    CU_ASSERT_EQUAL(api->attn_fwd(NULL, NULL, NULL, NULL, NULL, 1, 1, 1, 1, 512), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(api->last_error(), "head_dim 512"));
}

/* rmsnorm_bwd's weight gradient and bias_bwd over many rows: the column sums are cut
 * into chunks of rows (the last one short) and the chunks added in order; columns that
 * do not fill a block. The same result twice (deterministic). */
static void test_column_sums(void)
{
    enum { N = 1000, C = 100 };
    size_t n = (size_t)N * C;
    float *x = malloc(n * sizeof *x), *dy = malloc(n * sizeof *dy), *w = malloc(C * sizeof *w);
    float *dx = malloc(n * sizeof *dx), dw[C], ref_dw[C], got[C], again[C], db[C];
    fill_normal(x, n, 190, 1.0f);
    fill_normal(dy, n, 191, 1.0f);
    fill_normal(w, C, 192, 1.0f);
    fill_normal(dw, C, 193, 0.1f);
    memcpy(ref_dw, dw, sizeof dw);
    memset(dx, 0, n * sizeof *dx);
    rmsnorm_backward(dx, ref_dw, dy, x, w, N, C, 1e-6f);
    void *d_x = dev_copy(x, n * sizeof *x), *d_dy = dev_copy(dy, n * sizeof *dy);
    void *d_w = dev_copy(w, C * sizeof *w), *d_dx = dev_copy(NULL, n * sizeof *dx);
    void *d_r = dev_copy(NULL, N * sizeof(float));
    for (int rep = 0; rep < 2; rep++) {
        void *d_dw = dev_copy(dw, sizeof dw);
        CU_OK(api->zero(d_dx, n * sizeof *dx));
        CU_OK(api->rmsnorm_bwd(d_dx, NULL, d_dw, d_dy, d_x, d_w, d_r, N, C, 1e-6f));
        CU_OK(api->sync());
        CU_OK(api->to_host(rep ? again : got, d_dw, sizeof dw));
        api->free(d_dw);
    }
    expect_close("rmsnorm_bwd dw over 1000 rows", got, ref_dw, C, 1e-5);
    CU_ASSERT(memcmp(got, again, sizeof got) == 0);
    for (int j = 0; j < C; j++) { /* bias: the plain column sums, accumulated */
        double sum = 0.5;
        for (int i = 0; i < N; i++) sum += dy[(size_t)i * C + j];
        ref_dw[j] = (float)sum;
        db[j] = 0.5f;
    }
    void *d_db = dev_copy(db, sizeof db);
    CU_OK(api->bias_bwd(d_db, d_dy, N, C));
    CU_OK(api->sync());
    CU_OK(api->to_host(got, d_db, sizeof got));
    expect_close("bias_bwd over 1000 rows", got, ref_dw, C, 1e-5);
    void *bufs[] = {d_x, d_dy, d_w, d_dx, d_r, d_db};
    for (size_t b = 0; b < sizeof bufs / sizeof bufs[0]; b++) api->free(bufs[b]);
    free(x), free(dy), free(w), free(dx);
}

/* flash_fwd and flash_bwd (tensor cores) against attn_forward / attn_backward on
 * bf16-rounded q, k, v and dout, so what is left is the kernels' own rounding of the
 * probabilities (and of dS) to bf16: a causal prefill, a single row after a prefix,
 * head dimensions that are not multiples of 16 (zero-padded), rows that cross tiles,
 * a wide group, and positions in no order. Each case's error is printed for
 * docs/cuda.md. */
static float bf16r(float x) { return st_bf16_to_f32(st_f32_to_bf16(x)); }

static void fill_bf16(float *x, size_t n, uint64_t seed)
{
    fill_normal(x, n, seed, 1.0f);
    for (size_t i = 0; i < n; i++) x[i] = bf16r(x[i]);
}

static void report_close(const char *what, const float *got, const float *ref, size_t n,
                         double tol)
{
    double e = test_rel_err(got, ref, n);
    printf("flash: %-46s %.3g of the largest (bound %.0e)\n", what, e, tol);
    expect_close(what, got, ref, n, tol);
}

static void test_flash_attention(void)
{
    static const struct { int nq, nk, H, K, D, shuffled; } cases[] = {
        {37, 37, 8, 2, 64, 0},    {1, 50, 4, 4, 128, 0},   {13, 13, 6, 3, 80, 0},
        {70, 70, 4, 2, 24, 0},    {300, 300, 4, 2, 128, 0}, {5, 50, 4, 4, 128, 0},
        {40, 40, 64, 1, 128, 0},  {129, 200, 2, 1, 128, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int nq = cases[c].nq, nk = cases[c].nk, H = cases[c].H, K = cases[c].K, D = cases[c].D;
        size_t nqe = (size_t)nq * H * D, nke = (size_t)nk * K * D, nr = (size_t)nq * H;
        float *q = malloc(nqe * sizeof *q), *k = malloc(nke * sizeof *k), *v = malloc(nke * sizeof *v);
        float *dout = malloc(nqe * sizeof *dout), *ref = malloc(nqe * sizeof *ref);
        float *got = malloc(nqe * sizeof *got), *lse = malloc(nr * sizeof *lse);
        float *got_lse = malloc(nr * sizeof *lse);
        float *dq = malloc(nqe * sizeof *dq), *dk = malloc(nke * sizeof *dk), *dv = malloc(nke * sizeof *dv);
        float *got_k = malloc(nke * sizeof *got_k), *got_v = malloc(nke * sizeof *got_v);
        float *scratch = malloc(attn_scratch_floats(nq, nk, H, K, D) * sizeof *scratch);
        int32_t *pos = malloc((size_t)nq * sizeof *pos);
        int *ipos = malloc((size_t)nq * sizeof *ipos);
        fill_bf16(q, nqe, 120 + c);
        fill_bf16(k, nke, 130 + c);
        fill_bf16(v, nke, 140 + c);
        fill_bf16(dout, nqe, 150 + c);
        fill_normal(dq, nqe, 160 + c, 0.1f); /* junk, written over */
        fill_normal(dk, nke, 170 + c, 0.1f);
        fill_normal(dv, nke, 180 + c, 0.1f);
        for (int i = 0; i < nq; i++)
            pos[i] = ipos[i] = cases[c].shuffled ? (int)(((long)i * 37 + 11) % nk) : nk - nq + i;
        test_attn_lse(lse, q, k, ipos, nq, H, K, D);
        attn_forward(ref, q, k, v, ipos, nq, nk, H, K, D, scratch);
        void *d_q = dev_copy(q, nqe * sizeof *q), *d_k = dev_copy(k, nke * sizeof *k);
        void *d_v = dev_copy(v, nke * sizeof *v), *d_o = dev_copy(NULL, nqe * sizeof *got);
        void *d_l = dev_copy(NULL, nr * sizeof *lse), *d_p = dev_copy(pos, (size_t)nq * sizeof *pos);
        void *d_do = dev_copy(dout, nqe * sizeof *dout), *d_dq = dev_copy(dq, nqe * sizeof *dq);
        void *d_dk = dev_copy(dk, nke * sizeof *dk), *d_dv = dev_copy(dv, nke * sizeof *dv);
        void *d_dl = dev_copy(NULL, nr * sizeof(float));
        int32_t qs[2] = {0, nq}, ks[2] = {0, nk};
        void *d_qs = dev_copy(qs, sizeof qs), *d_ks = dev_copy(ks, sizeof ks);
        struct cuda_seqs sq = {.q_start = d_qs, .k_start = d_ks, .n = 1, .nq = nq, .nk = nk,
                               .max_q = nq, .max_k = nk};
        CU_OK(api->flash_fwd(d_o, d_l, d_q, d_k, d_v, d_p, &sq, H, K, D));
        CU_OK(api->sync());
        CU_OK(api->to_host(got, d_o, nqe * sizeof *got));
        CU_OK(api->to_host(got_lse, d_l, nr * sizeof *lse));
        char what[80];
        snprintf(what, sizeof what, "fwd nq %d nk %d H %d K %d D %d%s", nq, nk, H, K, D,
                 cases[c].shuffled ? " (pos unordered)" : "");
        report_close(what, got, ref, nqe, 1e-2);
        snprintf(what, sizeof what, "lse nq %d nk %d H %d K %d D %d", nq, nk, H, K, D);
        report_close(what, got_lse, lse, nr, 1e-4);

        memset(dq, 0, nqe * sizeof *dq); /* the reference's: added to zeros */
        memset(dk, 0, nke * sizeof *dk);
        memset(dv, 0, nke * sizeof *dv);
        attn_backward(dq, dk, dv, dout, q, k, v, ipos, nq, nk, H, K, D, scratch);
        CU_OK(api->flash_bwd(d_dq, d_dk, d_dv, d_do, d_q, d_k, d_v, d_o, d_l, d_p, &sq, H, K, D,
                             d_dl));
        CU_OK(api->sync());
        CU_OK(api->to_host(got, d_dq, nqe * sizeof *got));
        CU_OK(api->to_host(got_k, d_dk, nke * sizeof *got_k));
        CU_OK(api->to_host(got_v, d_dv, nke * sizeof *got_v));
        snprintf(what, sizeof what, "bwd dq nq %d nk %d H %d K %d D %d", nq, nk, H, K, D);
        report_close(what, got, dq, nqe, 2e-2);
        snprintf(what, sizeof what, "bwd dk nq %d nk %d H %d K %d D %d", nq, nk, H, K, D);
        report_close(what, got_k, dk, nke, 2e-2);
        snprintf(what, sizeof what, "bwd dv nq %d nk %d H %d K %d D %d", nq, nk, H, K, D);
        report_close(what, got_v, dv, nke, 2e-2);
        void *bufs[] = {d_q, d_k, d_v, d_o, d_l, d_p, d_do, d_dq, d_dk, d_dv, d_dl, d_qs, d_ks};
        for (size_t b = 0; b < sizeof bufs / sizeof bufs[0]; b++) api->free(bufs[b]);
        float *hb[] = {q, k, v, dout, ref, got, lse, got_lse, dq, dk, dv, got_k, got_v, scratch};
        for (size_t b = 0; b < sizeof hb / sizeof hb[0]; b++) free(hb[b]);
        free(pos), free(ipos);
    }
    /* head dimensions the tiles do not take are refused with a message */
    struct cuda_seqs one = {.n = 0};
    CU_ASSERT_EQUAL(api->flash_fwd(NULL, NULL, NULL, NULL, NULL, NULL, &one, 1, 1, 130), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(api->last_error(), "head_dim 130"));
    CU_ASSERT_EQUAL(api->flash_bwd(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                   &one, 1, 1, 66, NULL), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(api->last_error(), "head_dim 66"));
    /* and batches whose sizes do not hold together: the kernels would trust them */
    struct cuda_seqs bad[] = {
        {.n = 0, .nq = 5},                                /* rows without a sequence */
        {.n = 1, .nq = 4, .nk = 4, .max_q = 4, .max_k = 4}, /* no offsets */
        {.q_start = (int32_t *)8, .k_start = (int32_t *)8, .n = 1, .nq = 4, .nk = 4,
         .max_q = 5, .max_k = 4},                         /* longer than all of it */
    };
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        CU_ASSERT_EQUAL(api->flash_fwd(NULL, NULL, NULL, NULL, NULL, NULL, &bad[b], 2, 1, 64), -1);
        CU_ASSERT_PTR_NOT_NULL(strstr(api->last_error(), "do not hold together"));
        CU_ASSERT_EQUAL(api->flash_bwd(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                       &bad[b], 2, 1, 64, NULL), -1);
    }
    CU_ASSERT_EQUAL(api->flash_fwd(NULL, NULL, NULL, NULL, NULL, NULL, NULL, 2, 1, 64), -1);
    CU_ASSERT_EQUAL(api->flash_fwd(NULL, NULL, NULL, NULL, NULL, NULL, &one, 2, 1, 64), 0);
}

/* One launch over a packed batch of sequences -- of other lengths, rows after a prefix,
 * an empty one, positions in no order -- gives each sequence exactly what a launch of
 * that sequence alone gives (the same blocks do the same arithmetic, wherever in the
 * grid they fall), the gradients written over what was there. */
static void test_flash_packed(void)
{
    enum { S = 6, H = 4, K = 2, D = 64, HD = H * D, KD = K * D };
    static const int seq_q[S] = {37, 5, 1, 0, 130, 29}, seq_k[S] = {37, 50, 1, 0, 130, 40};
    int32_t qs[S + 1] = {0}, ks[S + 1] = {0};
    for (int s = 0; s < S; s++) {
        qs[s + 1] = qs[s] + seq_q[s];
        ks[s + 1] = ks[s] + seq_k[s];
    }
    int nq = qs[S], nk = ks[S];
    size_t nqe = (size_t)nq * HD, nke = (size_t)nk * KD, nr = (size_t)nq * H;
    float *q = malloc(nqe * sizeof *q), *k = malloc(nke * sizeof *k), *v = malloc(nke * sizeof *v);
    float *dout = malloc(nqe * sizeof *dout), *g0 = malloc((nqe + 2 * nke) * sizeof *g0);
    int32_t *pos = malloc((size_t)nq * sizeof *pos);
    fill_bf16(q, nqe, 201);
    fill_bf16(k, nke, 202);
    fill_bf16(v, nke, 203);
    fill_bf16(dout, nqe, 204);
    fill_normal(g0, nqe + 2 * nke, 205, 0.1f);
    for (int s = 0; s < S; s++)
        for (int i = 0; i < seq_q[s]; i++)
            pos[qs[s] + i] = s == S - 1 ? (int)(((long)i * 37 + 11) % seq_k[s])
                                        : seq_k[s] - seq_q[s] + i;
    void *d_q = dev_copy(q, nqe * 4), *d_k = dev_copy(k, nke * 4), *d_v = dev_copy(v, nke * 4);
    void *d_do = dev_copy(dout, nqe * 4), *d_p = dev_copy(pos, (size_t)nq * 4);
    void *d_qs = dev_copy(qs, sizeof qs), *d_ks = dev_copy(ks, sizeof ks);
    float *out[2], *lse[2], *grads[2]; /* [0] packed, [1] a sequence a launch */
    for (int w = 0; w < 2; w++) {
        float *d_o = dev_copy(NULL, nqe * 4), *d_l = dev_copy(NULL, nr * 4);
        float *d_dl = dev_copy(NULL, nr * 4), *d_g = dev_copy(g0, (nqe + 2 * nke) * 4);
        float *d_dq = d_g, *d_dk = d_g + nqe, *d_dv = d_dk + nke;
        for (int s = 0; s < (w ? S : 1); s++) {
            int32_t one_q[2] = {0, seq_q[s]}, one_k[2] = {0, seq_k[s]};
            void *d_1q = dev_copy(one_q, sizeof one_q), *d_1k = dev_copy(one_k, sizeof one_k);
            struct cuda_seqs all = {.q_start = d_qs, .k_start = d_ks, .n = S, .nq = nq,
                                    .nk = nk, .max_q = 130, .max_k = 130};
            struct cuda_seqs alone = {.q_start = d_1q, .k_start = d_1k, .n = 1, .nq = seq_q[s],
                                      .nk = seq_k[s], .max_q = seq_q[s], .max_k = seq_k[s]};
            const struct cuda_seqs *sq = w ? &alone : &all;
            size_t qo = w ? (size_t)qs[s] : 0, ko = w ? (size_t)ks[s] : 0;
            CU_OK(api->flash_fwd(d_o + qo * HD, d_l + qo * H, (float *)d_q + qo * HD,
                                 (float *)d_k + ko * KD, (float *)d_v + ko * KD,
                                 (int32_t *)d_p + qo, sq, H, K, D));
            CU_OK(api->flash_bwd(d_dq + qo * HD, d_dk + ko * KD, d_dv + ko * KD,
                                 (float *)d_do + qo * HD, (float *)d_q + qo * HD,
                                 (float *)d_k + ko * KD, (float *)d_v + ko * KD, d_o + qo * HD,
                                 d_l + qo * H, (int32_t *)d_p + qo, sq, H, K, D, d_dl + qo * H));
            CU_OK(api->sync());
            api->free(d_1q), api->free(d_1k);
        }
        out[w] = malloc(nqe * 4), lse[w] = malloc(nr * 4), grads[w] = malloc((nqe + 2 * nke) * 4);
        CU_OK(api->to_host(out[w], d_o, nqe * 4));
        CU_OK(api->to_host(lse[w], d_l, nr * 4));
        CU_OK(api->to_host(grads[w], d_g, (nqe + 2 * nke) * 4));
        api->free(d_o), api->free(d_l), api->free(d_dl), api->free(d_g);
    }
    CU_ASSERT(memcmp(out[0], out[1], nqe * 4) == 0);
    CU_ASSERT(memcmp(lse[0], lse[1], nr * 4) == 0);
    CU_ASSERT(memcmp(grads[0], grads[1], (nqe + 2 * nke) * 4) == 0);
    /* and the packed launch is right, not only consistent: the last sequence's output */
    int s = S - 1, *ipos = malloc((size_t)seq_q[s] * sizeof *ipos);
    for (int i = 0; i < seq_q[s]; i++) ipos[i] = pos[qs[s] + i];
    float *ref = malloc((size_t)seq_q[s] * HD * sizeof *ref);
    float *scratch = malloc(attn_scratch_floats(seq_q[s], seq_k[s], H, K, D) * sizeof *scratch);
    attn_forward(ref, q + (size_t)qs[s] * HD, k + (size_t)ks[s] * KD, v + (size_t)ks[s] * KD,
                 ipos, seq_q[s], seq_k[s], H, K, D, scratch);
    report_close("packed batch, its last sequence", out[0] + (size_t)qs[s] * HD, ref,
                 (size_t)seq_q[s] * HD, 1e-2);
    void *bufs[] = {d_q, d_k, d_v, d_do, d_p, d_qs, d_ks};
    for (size_t b = 0; b < sizeof bufs / sizeof bufs[0]; b++) api->free(bufs[b]);
    for (int w = 0; w < 2; w++) free(out[w]), free(lse[w]), free(grads[w]);
    free(q), free(k), free(v), free(dout), free(g0), free(pos), free(ipos), free(ref), free(scratch);
}

/* prefill_attn: the rows of one sequence against its keys in a paged pool whose blocks
 * lie in no order, against attn_forward on the gathered keys (bf16-rounded inputs):
 * a whole prompt and a chunk after a prefix, a padded head dimension. */
static void test_prefill_attention(void)
{
    enum { P = 16, NB = 40 };
    static const struct { int nq, nk, H, K, D; } cases[] = {
        {100, 100, 8, 2, 64}, {37, 300, 4, 2, 128}, {64, 64, 6, 3, 80}, {9, 9, 2, 1, 24},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int nq = cases[c].nq, nk = cases[c].nk, H = cases[c].H, K = cases[c].K, D = cases[c].D;
        int KD = K * D, nblk = (nk + P - 1) / P;
        size_t nqe = (size_t)nq * H * D, nke = (size_t)nk * KD, pool_n = (size_t)NB * P * KD;
        float *q = malloc(nqe * sizeof *q), *k = malloc(nke * sizeof *k), *v = malloc(nke * sizeof *v);
        uint16_t *kp = calloc(pool_n, sizeof *kp), *vp = calloc(pool_n, sizeof *vp);
        float *ref = malloc(nqe * sizeof *ref), *got = malloc(nqe * sizeof *got);
        float *scratch = malloc(attn_scratch_floats(nq, nk, H, K, D) * sizeof *scratch);
        int32_t table[NB], *pos = malloc((size_t)nq * sizeof *pos);
        int *ipos = malloc((size_t)nq * sizeof *ipos);
        fill_bf16(q, nqe, 200 + c);
        fill_bf16(k, nke, 210 + c);
        fill_bf16(v, nke, 220 + c);
        for (int b = 0; b < nblk; b++) table[b] = (b * 7 + 3) % NB; /* 7 is prime to 40 */
        for (int j = 0; j < nk; j++) {
            size_t row = (size_t)table[j / P] * P + (size_t)(j % P);
            for (int e = 0; e < KD; e++) { /* bf16 values: exact in the pool */
                kp[row * KD + (size_t)e] = st_f32_to_bf16(k[(size_t)j * KD + (size_t)e]);
                vp[row * KD + (size_t)e] = st_f32_to_bf16(v[(size_t)j * KD + (size_t)e]);
            }
        }
        for (int i = 0; i < nq; i++) pos[i] = ipos[i] = nk - nq + i;
        attn_forward(ref, q, k, v, ipos, nq, nk, H, K, D, scratch);
        void *d_q = dev_copy(q, nqe * sizeof *q), *d_kp = dev_copy(kp, pool_n * sizeof *kp);
        void *d_vp = dev_copy(vp, pool_n * sizeof *vp), *d_o = dev_copy(NULL, nqe * sizeof *got);
        void *d_t = dev_copy(table, sizeof table), *d_p = dev_copy(pos, (size_t)nq * sizeof *pos);
        CU_OK(api->prefill_attn(d_o, d_q, d_kp, d_vp, d_t, d_p, nq, H, K, D, P));
        CU_OK(api->sync());
        CU_OK(api->to_host(got, d_o, nqe * sizeof *got));
        char what[80];
        snprintf(what, sizeof what, "prefill nq %d nk %d H %d K %d D %d", nq, nk, H, K, D);
        report_close(what, got, ref, nqe, 1e-2);
        void *bufs[] = {d_q, d_kp, d_vp, d_o, d_t, d_p};
        for (size_t b = 0; b < sizeof bufs / sizeof bufs[0]; b++) api->free(bufs[b]);
        float *hb[] = {q, k, v, ref, got, scratch};
        for (size_t b = 0; b < sizeof hb / sizeof hb[0]; b++) free(hb[b]);
        free(kp), free(vp), free(pos), free(ipos);
    }
    CU_ASSERT_EQUAL(api->prefill_attn(NULL, NULL, NULL, NULL, NULL, NULL, 1, 1, 1, 136, 16), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(api->last_error(), "head_dim 136"));
}

/* Decode over a paged KV cache: three sequences, two sharing their prefix blocks;
 * kv_append writes each one's new token, decode_attn equals attn_forward on the
 * sequence's gathered rows. */
/* attn_bwd against attn_backward: accumulating into non-zero gradients, causal rows
 * that see a prefix of the keys (nq < nk) or all of their own sequence, GQA. */
static void test_attention_backward(void)
{
    static const struct { int nq, nk, H, K, D; } cases[] = {
        {37, 37, 8, 2, 64}, {5, 50, 4, 4, 128}, {13, 13, 6, 3, 80}, {9, 9, 2, 1, 256},
        {300, 300, 4, 2, 128}, {40, 40, 64, 1, 128}, /* longer; a wide group */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int nq = cases[c].nq, nk = cases[c].nk, H = cases[c].H, K = cases[c].K, D = cases[c].D;
        size_t nqe = (size_t)nq * H * D, nke = (size_t)nk * K * D;
        float *q = malloc(nqe * sizeof *q), *k = malloc(nke * sizeof *k), *v = malloc(nke * sizeof *v);
        float *dout = malloc(nqe * sizeof *dout);
        float *dq = malloc(nqe * sizeof *dq), *dk = malloc(nke * sizeof *dk), *dv = malloc(nke * sizeof *dv);
        float *got_q = malloc(nqe * sizeof *got_q), *got_k = malloc(nke * sizeof *got_k);
        float *got_v = malloc(nke * sizeof *got_v);
        float *scratch = malloc(attn_scratch_floats(nq, nk, H, K, D) * sizeof *scratch);
        int32_t *pos = malloc((size_t)nq * sizeof *pos);
        int *ipos = malloc((size_t)nq * sizeof *ipos);
        fill_normal(q, nqe, 50 + c, 1.0f);
        fill_normal(k, nke, 60 + c, 1.0f);
        fill_normal(v, nke, 70 + c, 1.0f);
        fill_normal(dout, nqe, 80 + c, 1.0f);
        fill_normal(dq, nqe, 90 + c, 0.1f); /* the gradients accumulate */
        fill_normal(dk, nke, 100 + c, 0.1f);
        fill_normal(dv, nke, 110 + c, 0.1f);
        for (int i = 0; i < nq; i++) pos[i] = ipos[i] = nk - nq + i;
        void *d_q = dev_copy(q, nqe * sizeof *q), *d_k = dev_copy(k, nke * sizeof *k);
        void *d_v = dev_copy(v, nke * sizeof *v), *d_do = dev_copy(dout, nqe * sizeof *dout);
        void *d_dq = dev_copy(dq, nqe * sizeof *dq), *d_dk = dev_copy(dk, nke * sizeof *dk);
        void *d_dv = dev_copy(dv, nke * sizeof *dv), *d_p = dev_copy(pos, (size_t)nq * sizeof *pos);
        void *d_st = dev_copy(NULL, 2 * (size_t)nq * H * sizeof(float));
        attn_backward(dq, dk, dv, dout, q, k, v, ipos, nq, nk, H, K, D, scratch);
        CU_OK(api->attn_bwd(d_dq, d_dk, d_dv, d_do, d_q, d_k, d_v, d_p, nq, nk, H, K, D, d_st));
        CU_OK(api->sync());
        CU_OK(api->to_host(got_q, d_dq, nqe * sizeof *got_q));
        CU_OK(api->to_host(got_k, d_dk, nke * sizeof *got_k));
        CU_OK(api->to_host(got_v, d_dv, nke * sizeof *got_v));
        char what[80];
        snprintf(what, sizeof what, "attn_bwd dq nq %d nk %d H %d K %d D %d", nq, nk, H, K, D);
        expect_close(what, got_q, dq, nqe, 1e-5);
        snprintf(what, sizeof what, "attn_bwd dk nq %d nk %d H %d K %d D %d", nq, nk, H, K, D);
        expect_close(what, got_k, dk, nke, 1e-5);
        snprintf(what, sizeof what, "attn_bwd dv nq %d nk %d H %d K %d D %d", nq, nk, H, K, D);
        expect_close(what, got_v, dv, nke, 1e-5);
        void *bufs[] = {d_q, d_k, d_v, d_do, d_dq, d_dk, d_dv, d_p, d_st};
        for (size_t b = 0; b < sizeof bufs / sizeof bufs[0]; b++) api->free(bufs[b]);
        float *hb[] = {q, k, v, dout, dq, dk, dv, got_q, got_k, got_v, scratch};
        for (size_t b = 0; b < sizeof hb / sizeof hb[0]; b++) free(hb[b]);
        free(pos), free(ipos);
    }
}

static void test_decode_attention(void)
{
    enum { B = 3, P = 16, H = 8, K = 2, D = 64, KD = K * D, NBLK = 8, MAXB = 4 };
    const int len[B] = {37, 37, 5};
    /* blocks: 0, 1 shared by sequences 0 and 1; 5 / 2 their own third; 6 for seq 2 */
    const int32_t table[B][MAXB] = {{0, 1, 5, 7}, {0, 1, 2, 7}, {6, 7, 7, 7}};
    size_t pool_n = (size_t)NBLK * P * KD;
    float *kp = malloc(pool_n * sizeof *kp), *vp = malloc(pool_n * sizeof *vp);
    uint16_t *kp16 = malloc(pool_n * sizeof *kp16), *vp16 = malloc(pool_n * sizeof *vp16);
    float q[B * H * D], kn[B * KD], vn[B * KD], ref[B * H * D], got[B * H * D];
    fill_bf16(kp, pool_n, 140); /* the pool's bf16 values */
    fill_bf16(vp, pool_n, 141);
    for (size_t i = 0; i < pool_n; i++) kp16[i] = st_f32_to_bf16(kp[i]), vp16[i] = st_f32_to_bf16(vp[i]);
    fill_normal(q, B * H * D, 142, 1.0f);
    fill_normal(kn, B * KD, 143, 1.0f);
    fill_normal(vn, B * KD, 144, 1.0f);
    void *d_k = dev_copy(kp16, pool_n * sizeof *kp16), *d_v = dev_copy(vp16, pool_n * sizeof *vp16);
    void *d_q = dev_copy(q, sizeof q), *d_kn = dev_copy(kn, sizeof kn), *d_vn = dev_copy(vn, sizeof vn);
    void *d_tab = dev_copy(table, sizeof table), *d_len = dev_copy(len, sizeof len);
    void *d_o = dev_copy(NULL, sizeof got);
    CU_OK(api->kv_append(d_k, d_v, d_kn, d_vn, d_tab, MAXB, d_len, B, K, D, P));
    CU_OK(api->decode_attn(d_o, d_q, d_k, d_v, d_tab, MAXB, d_len, B, H, K, D, P));
    CU_OK(api->sync());
    CU_OK(api->to_host(got, d_o, sizeof got));
    /* the host's view: the new rows written the same way (rounded to bf16), then each
     * sequence gathered */
    for (int s = 0; s < B; s++) {
        int j = len[s] - 1;
        size_t row = (size_t)table[s][j / P] * P + (size_t)(j % P);
        for (int e = 0; e < KD; e++) {
            kp[row * KD + (size_t)e] = bf16r(kn[s * KD + e]);
            vp[row * KD + (size_t)e] = bf16r(vn[s * KD + e]);
        }
    }
    for (int s = 0; s < B; s++) {
        float *kc = malloc((size_t)len[s] * KD * sizeof *kc), *vc = malloc((size_t)len[s] * KD * sizeof *vc);
        for (int j = 0; j < len[s]; j++) {
            size_t row = (size_t)table[s][j / P] * P + (size_t)(j % P);
            memcpy(kc + (size_t)j * KD, kp + row * KD, KD * sizeof *kc);
            memcpy(vc + (size_t)j * KD, vp + row * KD, KD * sizeof *vc);
        }
        int qpos = len[s] - 1;
        float *scratch = malloc(attn_scratch_floats(1, len[s], H, K, D) * sizeof *scratch);
        attn_forward(ref + (size_t)s * H * D, q + (size_t)s * H * D, kc, vc, &qpos, 1, len[s], H,
                     K, D, scratch);
        free(kc), free(vc), free(scratch);
    }
    expect_close("decode_attn (paged, shared prefix)", got, ref, B * H * D, 1e-5);
    /* the same rows REP times over: enough blocks that the keys are not split between
     * them (3 rows alone are split, into more parts than sequence 2 has keys) */
    enum { REP = 100 };
    size_t nr = (size_t)REP * B;
    float *q_rep = malloc(nr * H * D * sizeof *q_rep), *got_rep = malloc(nr * H * D * sizeof *got_rep);
    int32_t *tab_rep = malloc(nr * MAXB * sizeof *tab_rep), *len_rep = malloc(nr * sizeof *len_rep);
    for (size_t r = 0; r < nr; r++) {
        memcpy(q_rep + r * H * D, q + (r % B) * H * D, H * D * sizeof *q_rep);
        memcpy(tab_rep + r * MAXB, table[r % B], MAXB * sizeof *tab_rep);
        len_rep[r] = len[r % B];
    }
    void *d_qr = dev_copy(q_rep, nr * H * D * sizeof *q_rep), *d_or = dev_copy(NULL, nr * H * D * sizeof *got_rep);
    void *d_tr = dev_copy(tab_rep, nr * MAXB * sizeof *tab_rep), *d_lr = dev_copy(len_rep, nr * sizeof *len_rep);
    CU_OK(api->decode_attn(d_or, d_qr, d_k, d_v, d_tr, MAXB, d_lr, (int)nr, H, K, D, P));
    CU_OK(api->sync());
    CU_OK(api->to_host(got_rep, d_or, nr * H * D * sizeof *got_rep));
    double worst = 0;
    for (size_t r = 0; r < nr; r++)
        worst = fmax(worst, test_rel_err(got_rep + r * H * D, ref + (r % B) * H * D, H * D));
    CU_ASSERT(worst <= 1e-5);
    api->free(d_qr), api->free(d_or), api->free(d_tr), api->free(d_lr);
    free(q_rep), free(got_rep), free(tab_rep), free(len_rep);
    void *bufs[] = {d_k, d_v, d_q, d_kn, d_vn, d_tab, d_len, d_o};
    for (size_t b = 0; b < sizeof bufs / sizeof bufs[0]; b++) api->free(bufs[b]);
    free(kp), free(vp), free(kp16), free(vp16);
}

/* The log-softmax over a full-size vocabulary at a temperature, and its backward,
 * accumulating in float32 and written in bf16 (over old values: as expect_bf16_pools
 * against logsoftmax_backward's terms rounded); the forward's row statistics against
 * logsoftmax_row_stats (max exact, log-sum 1e-9), and the bf16 backward that reads them
 * the bits of the one that forms them again; statistics without their pair refused. */
static void test_logsoftmax(void)
{
    enum { N = 6, V = 151936 };
    size_t n = (size_t)N * V;
    float *logits = malloc(n * sizeof *logits), *dl = malloc(n * sizeof *dl);
    float *ref_dl = malloc(n * sizeof *dl), *got_dl = malloc(n * sizeof *dl);
    int32_t tg[N] = {0, V - 1, -1, 12345, 7, 151000};
    float lp[N], ent[N], ref_lp[N], ref_ent[N], dlp[N] = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, 0.25f};
    fill_normal(logits, n, 18, 3.0f);
    fill_normal(dl, n, 19, 1e-3f);
    memcpy(ref_dl, dl, n * sizeof *dl);
    logsoftmax_forward(ref_lp, ref_ent, logits, tg, N, V, 0.8f);
    logsoftmax_backward(ref_dl, dlp, logits, tg, N, V, 0.8f);
    void *d_x = dev_copy(logits, n * sizeof *logits), *d_t = dev_copy(tg, sizeof tg);
    void *d_lp = dev_copy(NULL, sizeof lp), *d_e = dev_copy(NULL, sizeof ent);
    void *d_dl = dev_copy(dl, n * sizeof *dl), *d_dlp = dev_copy(dlp, sizeof dlp);
    void *d_mx = dev_copy(NULL, N * sizeof(float)), *d_ls = dev_copy(NULL, N * sizeof(double));
    CU_OK(api->logsoftmax_fwd(d_lp, d_e, d_mx, d_ls, d_x, d_t, N, V, 0.8f));
    CU_OK(api->logsoftmax_bwd(d_dl, NULL, d_dlp, d_x, d_t, NULL, NULL, N, V, 0.8f));
    CU_OK(api->sync());
    CU_OK(api->to_host(lp, d_lp, sizeof lp));
    CU_OK(api->to_host(ent, d_e, sizeof ent));
    CU_OK(api->to_host(got_dl, d_dl, n * sizeof *dl));
    expect_close("logsoftmax_fwd logprob", lp, ref_lp, N, 2e-6);
    expect_close("logsoftmax_fwd entropy", ent, ref_ent, N, 2e-6);
    CU_ASSERT_EQUAL(lp[2], 0.0f); /* no target */
    expect_close("logsoftmax_bwd", got_dl, ref_dl, n, 1e-6);
    uint16_t *got16 = malloc(n * 2), *ref16 = malloc(n * 2);
    for (size_t i = 0; i < n; i++) got16[i] = (uint16_t)(0x3f80 + i % 7); /* old values */
    void *d_16 = dev_copy(got16, n * 2);
    memset(ref_dl, 0, n * sizeof *ref_dl);
    logsoftmax_backward(ref_dl, dlp, logits, tg, N, V, 0.8f);
    st_f32_to_bf16_n(ref_dl, ref16, n);
    CU_OK(api->logsoftmax_bwd(NULL, d_16, d_dlp, d_x, d_t, NULL, NULL, N, V, 0.8f));
    CU_OK(api->sync());
    CU_OK(api->to_host(got16, d_16, n * 2));
    expect_bf16_pools("logsoftmax_bwd bf16", got16, ref16, n);
    float mx[N], ref_mx;
    double ls[N], ref_ls;
    CU_OK(api->to_host(mx, d_mx, sizeof mx));
    CU_OK(api->to_host(ls, d_ls, sizeof ls));
    for (int i = 0; i < N; i++) {
        logsoftmax_row_stats(logits + (size_t)i * V, V, 0.8f, &ref_mx, &ref_ls);
        CU_ASSERT_EQUAL(mx[i], ref_mx);
        CU_ASSERT(fabs(ls[i] - ref_ls) <= 1e-9 * fabs(ref_ls));
    }
    uint16_t *again = malloc(n * 2);
    CU_OK(api->logsoftmax_bwd(NULL, d_16, d_dlp, d_x, d_t, d_mx, d_ls, N, V, 0.8f));
    CU_OK(api->sync());
    CU_OK(api->to_host(again, d_16, n * 2));
    CU_ASSERT(memcmp(again, got16, n * 2) == 0);
    CU_ASSERT_EQUAL(api->logsoftmax_bwd(NULL, d_16, d_dlp, d_x, d_t, d_mx, NULL, N, V, 0.8f), -1);
    CU_ASSERT(strstr(api->last_error(), "mx and lsum") != NULL);
    free(again);
    void *bufs[] = {d_x, d_t, d_lp, d_e, d_dl, d_dlp, d_16, d_mx, d_ls};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) api->free(bufs[k]);
    free(logits), free(dl), free(ref_dl), free(got_dl), free(got16), free(ref16);
}

/* The entropy term's backward over a full-size vocabulary (whole rows), and over 3
 * ranks' columns from the whole rows' statistics, against entropy_backward. */
static void test_entropy(void)
{
    enum { N = 5, V = 151936, S = 3 };
    const float temp = 0.8f;
    size_t n = (size_t)N * V;
    float *x = malloc(n * sizeof *x), *d0 = malloc(n * sizeof *x);
    float *ref = malloc(n * sizeof *x), *got = malloc(n * sizeof *x), *vgot = malloc(n * sizeof *x);
    float ew[N] = {0.5f, 0.0f, -0.25f, 1.0f, 0.125f}, lp[N], ent[N];
    int32_t tg[N] = {3, 4, 5, 6, 7};
    double H_ref[N], H[N];
    fill_normal(x, n, 21, 3.0f);
    fill_normal(d0, n, 22, 1e-3f);
    memcpy(ref, d0, n * sizeof *x);
    entropy_backward(ref, H_ref, ew, x, N, V, temp);
    logsoftmax_forward(lp, ent, x, tg, N, V, temp);
    void *d_x = dev_copy(x, n * sizeof *x), *d_d = dev_copy(d0, n * sizeof *x);
    void *d_ew = dev_copy(ew, sizeof ew), *d_H = dev_copy(NULL, sizeof H);
    CU_OK(api->entropy_bwd(d_d, d_H, d_ew, d_x, N, V, temp));
    CU_OK(api->to_host(got, d_d, n * sizeof *x));
    CU_OK(api->to_host(H, d_H, sizeof H));
    double h_err = 0, h_fwd = 0;
    for (int i = 0; i < N; i++) {
        h_err = test_worse(h_err, fabs(H[i] - H_ref[i]));
        if (ew[i] != 0.0f) h_fwd = test_worse(h_fwd, fabs(H[i] - ent[i]));
    }
    printf("[H %.1e, vs the forward's entropies %.1e] ", h_err, h_fwd);
    CU_ASSERT(h_err <= 1e-9);
    CU_ASSERT(h_fwd <= 1e-4);
    CU_ASSERT_EQUAL(H[1], 0.0); /* no weight: no term */
    expect_close("entropy_bwd", got, ref, n, 1e-6);
    /* the whole rows' statistics, then each rank's columns */
    float mx[N];
    double lsum[N];
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * V;
        mx[i] = -INFINITY;
        for (int j = 0; j < V; j++) mx[i] = fmaxf(mx[i], xi[j] / temp);
        double sum = 0;
        for (int j = 0; j < V; j++) sum += exp((double)(xi[j] / temp - mx[i]));
        lsum[i] = log(sum);
    }
    void *d_mx = dev_copy(mx, sizeof mx), *d_lsum = dev_copy(lsum, sizeof lsum);
    CU_OK(api->to_device(d_H, H_ref, sizeof H_ref));
    for (int r = 0; r < S; r++) {
        int c0 = r * V / S, Vl = (r + 1) * V / S - c0;
        float *xs = malloc(sizeof(float) * N * Vl), *ds = malloc(sizeof(float) * N * Vl);
        for (int i = 0; i < N; i++) {
            memcpy(xs + (size_t)i * Vl, x + (size_t)i * V + c0, sizeof(float) * Vl);
            memcpy(ds + (size_t)i * Vl, d0 + (size_t)i * V + c0, sizeof(float) * Vl);
        }
        void *d_xs = dev_copy(xs, sizeof(float) * N * Vl), *d_ds = dev_copy(ds, sizeof(float) * N * Vl);
        CU_OK(api->vocab_entropy_bwd(d_ds, d_ew, d_xs, d_mx, d_lsum, d_H, N, Vl, temp));
        CU_OK(api->to_host(ds, d_ds, sizeof(float) * N * Vl));
        for (int i = 0; i < N; i++)
            memcpy(vgot + (size_t)i * V + c0, ds + (size_t)i * Vl, sizeof(float) * Vl);
        api->free(d_xs);
        api->free(d_ds);
        free(xs);
        free(ds);
    }
    expect_close("vocab_entropy_bwd", vgot, ref, n, 1e-6);
    void *bufs[] = {d_x, d_d, d_ew, d_H, d_mx, d_lsum};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) api->free(bufs[k]);
    free(x), free(d0), free(ref), free(got), free(vgot);
}

/* The vocabulary-parallel log-softmax: rows split over 3 "ranks" (column ranges), each
 * shard's vocab_max / vocab_sums on the GPU, combined here as the group's all-reduces
 * would, against logsoftmax_forward / logsoftmax_backward on the whole rows. */
static void test_vocab_parallel(void)
{
    enum { N = 9, V = 1001, S = 3 };
    const float temp = 0.7f;
    float *x = malloc(sizeof(float) * N * V), *dref = calloc((size_t)N * V, sizeof(float));
    float *dgot = malloc(sizeof(float) * N * V), lp_ref[N], ent_ref[N], dlp[N];
    uint16_t *dgot16 = malloc(2 * (size_t)N * V), *dref16 = malloc(2 * (size_t)N * V);
    int32_t tgt[N];
    fill_normal(x, (size_t)N * V, 77, 3.0f);
    for (int i = 0; i < N; i++) {
        tgt[i] = i == 4 ? -1 : (int32_t)((i * 389) % V);
        dlp[i] = i == 2 || tgt[i] < 0 ? 0.0f : 0.25f * (float)(i + 1); /* the trainer's rule */
    }
    logsoftmax_forward(lp_ref, ent_ref, x, tgt, N, V, temp);
    logsoftmax_backward(dref, dlp, x, tgt, N, V, temp);
    float mx[N];
    double sums[3 * N] = {0}, lsum[N];
    for (int i = 0; i < N; i++) mx[i] = -INFINITY;
    int v0[S + 1];
    for (int r = 0; r <= S; r++) v0[r] = r * V / S;
    void *d_mx = dev_copy(NULL, sizeof mx), *d_sums = dev_copy(NULL, sizeof sums);
    void *d_lsum = dev_copy(NULL, sizeof lsum), *d_dlp = dev_copy(dlp, sizeof dlp);
    for (int pass = 0; pass < 3; pass++)
        for (int r = 0; r < S; r++) {
            int Vl = v0[r + 1] - v0[r];
            float *xs = malloc(sizeof(float) * N * Vl);
            int32_t ts[N];
            for (int i = 0; i < N; i++) {
                memcpy(xs + (size_t)i * Vl, x + (size_t)i * V + v0[r], sizeof(float) * Vl);
                int g = tgt[i] - v0[r];
                ts[i] = tgt[i] >= 0 && g >= 0 && g < Vl ? g : -1;
            }
            void *d_x = dev_copy(xs, sizeof(float) * N * Vl), *d_t = dev_copy(ts, sizeof ts);
            if (pass == 0) { /* the max all-reduce */
                float m[N];
                CU_OK(api->vocab_max(d_mx, d_x, N, Vl, temp));
                CU_OK(api->to_host(m, d_mx, sizeof m));
                for (int i = 0; i < N; i++) mx[i] = fmaxf(mx[i], m[i]);
            } else if (pass == 1) { /* the sum all-reduce */
                double s[3 * N];
                CU_OK(api->to_device(d_mx, mx, sizeof mx));
                CU_OK(api->vocab_sums(d_sums, d_x, d_mx, d_t, N, Vl, temp));
                CU_OK(api->to_host(s, d_sums, sizeof s));
                for (int k = 0; k < 3 * N; k++) sums[k] += s[k];
            } else { /* each shard's columns of the backward */
                float *ds = calloc((size_t)N * Vl, sizeof(float));
                uint16_t *h16 = malloc((size_t)N * Vl * 2);
                for (int k = 0; k < N * Vl; k++) h16[k] = 0x3f80; /* old values */
                void *d_d = dev_copy(ds, sizeof(float) * N * Vl);
                void *d_16 = dev_copy(h16, (size_t)N * Vl * 2);
                CU_OK(api->vocab_logsoftmax_bwd(d_d, NULL, d_dlp, d_x, d_t, d_mx, d_lsum, N, Vl,
                                                temp));
                CU_OK(api->vocab_logsoftmax_bwd(NULL, d_16, d_dlp, d_x, d_t, d_mx, d_lsum, N, Vl,
                                                temp));
                CU_OK(api->to_host(ds, d_d, sizeof(float) * N * Vl));
                CU_OK(api->to_host(h16, d_16, (size_t)N * Vl * 2));
                for (int i = 0; i < N; i++) {
                    memcpy(dgot + (size_t)i * V + v0[r], ds + (size_t)i * Vl, sizeof(float) * Vl);
                    memcpy(dgot16 + (size_t)i * V + v0[r], h16 + (size_t)i * Vl, 2 * (size_t)Vl);
                }
                api->free(d_d), api->free(d_16);
                free(ds), free(h16);
            }
            api->free(d_x);
            api->free(d_t);
            free(xs);
            if (pass == 1 && r == S - 1) { /* the host's part: tp_logsoftmax_forward's */
                double worst = 0;
                for (int i = 0; i < N; i++) {
                    lsum[i] = log(sums[3 * i]);
                    float lp = tgt[i] < 0 ? 0.0f : (float)(sums[3 * i + 2] - lsum[i]);
                    float ent = (float)(lsum[i] - sums[3 * i + 1] / sums[3 * i]);
                    worst = test_worse(worst, fabs(lp - lp_ref[i]) + fabs(ent - ent_ref[i]));
                }
                printf("[log-probs and entropies %.1e] ", worst);
                CU_ASSERT(worst <= 1e-4);
                CU_OK(api->to_device(d_lsum, lsum, sizeof lsum));
            }
        }
    double err = test_rel_err(dgot, dref, (size_t)N * V);
    printf("[backward %.1e of the largest] ", err);
    CU_ASSERT(err <= 1e-5);
    st_f32_to_bf16_n(dref, dref16, (size_t)N * V); /* the bf16 form: those terms, rounded */
    expect_bf16_pools("vocab_logsoftmax_bwd bf16", dgot16, dref16, (size_t)N * V);
    free(dgot16), free(dref16);
    api->free(d_mx);
    api->free(d_sums);
    api->free(d_lsum);
    api->free(d_dlp);
    free(x);
    free(dref);
    free(dgot);
}

/* The GPU sampler makes sampler_sample's decisions: the same tokens for the same
 * (seed, trajectory, position, logits) under every setting -- greedy, temperature,
 * top-k, top-p, both -- on 64 rows of 151,936 ids of which four are made to reach the
 * selection's corners (the cases of test_cuda_sampler_emu, which runs the kernel's code
 * on CPU threads): a flat row (every id survives top-p's cutoff: the sort over all
 * V, ties ordered by id), logits in steps of 0.5 (ties across the k-th place), 20
 * finite ids among -inf ones (top-k takes 30 ids of p = 0, by id), ten ids tied on
 * top. */
static void test_sampler(void)
{
    enum { B = 64, V = 151936 };
    size_t n = (size_t)B * V;
    float *logits = malloc(n * sizeof *logits), *scratch = malloc(2 * (size_t)V * sizeof *scratch);
    int64_t traj[B], pos[B];
    fill_normal(logits, n, 150, 2.0f);
    for (int i = 0; i < V; i++) {
        logits[i] = 0.25f;                                                  /* flat */
        logits[V + i] = 0.5f * roundf(2.0f * logits[V + i]);                /* ties */
        logits[2 * (size_t)V + i] = i % 7597 == 3 ? logits[2 * (size_t)V + i] : -INFINITY;
        if (i % 15000 == 11) logits[3 * (size_t)V + i] = 9.0f;             /* ten on top */
    }
    for (int b = 0; b < B; b++) traj[b] = 1000 + 7 * b, pos[b] = 3 * b + 11;
    void *d_x = dev_copy(logits, n * sizeof *logits);
    void *d_s = dev_copy(NULL, CUDA_SAMPLE_SCRATCH * n * sizeof(float));
    void *d_tr = dev_copy(traj, sizeof traj), *d_po = dev_copy(pos, sizeof pos);
    void *d_tok = dev_copy(NULL, B * sizeof(int32_t)), *d_lp = dev_copy(NULL, B * sizeof(float));
    static const struct sampler_config cases[] = {
        {0.0f, 1.0f, 0, 42},  {0.7f, 1.0f, 0, 42},  {1.0f, 1.0f, 0, 42},   {1.0f, 1.0f, 1, 42},
        {0.7f, 1.0f, 50, 42}, {1.0f, 1.0f, 1000, 9}, {1.0f, 0.9f, 0, 42},   {0.7f, 0.5f, 0, 9},
        {1.0f, 0.999f, 0, 42}, {1.0f, 0.8f, 50, 42}, {2.0f, 0.95f, 200, 9}, {1.0f, 0.01f, 0, 5},
        {1.0f, 0.3f, 3, 6},    {1.0f, 1.0f, V - 1, 4},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const struct sampler_config *sc = &cases[c];
        int32_t tok[B];
        float lp[B], ref_lp[B];
        int same = 0;
        CU_OK(api->sample(d_tok, d_lp, d_x, B, V, d_tr, d_po, sc->temperature, sc->top_k,
                          sc->top_p, sc->seed, d_s));
        CU_OK(api->sync());
        CU_OK(api->to_host(tok, d_tok, sizeof tok));
        CU_OK(api->to_host(lp, d_lp, sizeof lp));
        for (int b = 0; b < B; b++) {
            int32_t want = sampler_sample(sc, logits + (size_t)b * V, V, traj[b], pos[b],
                                          &ref_lp[b], scratch);
            same += tok[b] == want;
            if (tok[b] != want)
                fprintf(stderr, "\nT %g top-k %d top-p %g row %d: token %d, sampler_sample %d\n",
                        (double)sc->temperature, sc->top_k, (double)sc->top_p, b, tok[b], want);
        }
        CU_ASSERT(same == B);
        expect_close("sample log-probs", lp, ref_lp, B, 1e-5);
    }
    void *bufs[] = {d_x, d_s, d_tr, d_po, d_tok, d_lp};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) api->free(bufs[k]);
    free(logits), free(scratch);
}

/* The row of tests/top_p_short_row.h, twice: the GPU sampler redoes top-p's nucleus
 * over all ids, as sampler_sample does -- every id comes back in order in the
 * candidates (int32 on the GPU, floats in the host stand-in's sampler_sample), where
 * the scratch held -1 or NaN -- and draws sampler_sample's tokens. */
static void test_sampler_short(void)
{
    enum { B = 2, V = SHORT_ROW_V };
    const int gpu = api != cuda_host_api();
    const struct sampler_config *sc = &short_row_config;
    size_t scratch_n = CUDA_SAMPLE_SCRATCH * (size_t)B * V;
    float x[B * V], *scratch = malloc(scratch_n * sizeof *scratch), ref_scratch[2 * V];
    int64_t traj[B] = {5, 6}, pos[B] = {40, 41};
    short_row_fill(x);
    memcpy(x + V, x, V * sizeof *x);
    memset(scratch, 0xff, scratch_n * sizeof *scratch);
    void *d_x = dev_copy(x, sizeof x), *d_s = dev_copy(scratch, scratch_n * sizeof *scratch);
    void *d_tr = dev_copy(traj, sizeof traj), *d_po = dev_copy(pos, sizeof pos);
    void *d_tok = dev_copy(NULL, sizeof(int32_t) * B), *d_lp = dev_copy(NULL, sizeof(float) * B);
    int32_t tok[B];
    float lp[B], ref_lp[B];
    CU_OK(api->sample(d_tok, d_lp, d_x, B, V, d_tr, d_po, sc->temperature, sc->top_k, sc->top_p,
                      sc->seed, d_s));
    CU_OK(api->sync());
    CU_OK(api->to_host(tok, d_tok, sizeof tok));
    CU_OK(api->to_host(lp, d_lp, sizeof lp));
    CU_OK(api->to_host(scratch, d_s, scratch_n * sizeof *scratch));
    for (int b = 0; b < B; b++) {
        CU_ASSERT(short_row_all_ids(scratch + (size_t)b * CUDA_SAMPLE_SCRATCH * V + V, !gpu));
        CU_ASSERT_EQUAL(tok[b], sampler_sample(sc, x, V, traj[b], pos[b], &ref_lp[b], ref_scratch));
    }
    expect_close("sample log-probs (short row)", lp, ref_lp, B, 1e-5);
    void *bufs[] = {d_x, d_s, d_tr, d_po, d_tok, d_lp};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) api->free(bufs[k]);
    free(scratch);
}

/* The vocabulary-parallel sampler's kernels: rows split over 3 "ranks" (column
 * ranges), each rank's vocab_greedy_stats, or vocab_sample_max / _sums / _pick, or
 * vocab_sample_max / _topk, the slots summed (and the max taken) here as the group's
 * all-reduces would, the plans made with sampler_tp_owner, the top-k candidates
 * merged by sampler_tp_top_k_pick: the tokens of sampler_sample on the whole rows,
 * the log-probs within 1e-5, greedy, at T = 1 and 0.7, and top-k 20 with top-p 0.9. */
static void test_vocab_sampler(void)
{
    enum { B = 6, V = 151936, S = 3 };
    float *x = malloc((size_t)B * V * sizeof *x), *ref_s = malloc(2 * (size_t)V * sizeof *ref_s);
    fill_normal(x, (size_t)B * V, 151, 2.0f);
    for (int i = 0; i < V; i++) {
        x[i] = 0.25f;                                           /* flat */
        if (i % 7597 != 3 || i > V / 2) x[(size_t)V + i] = -INFINITY; /* a rank of -inf */
    }
    static const struct sampler_config cases[] = {{0, 1, 0, 42}, {1, 1, 0, 42}, {0.7f, 1, 0, 9}};
    int v0[S + 1];
    for (int r = 0; r <= S; r++) v0[r] = r * V / S;
    void *d_x[S], *d_p[S];
    for (int r = 0; r < S; r++) {
        int Vl = v0[r + 1] - v0[r];
        float *xs = malloc((size_t)B * Vl * sizeof *xs);
        for (int b = 0; b < B; b++)
            memcpy(xs + (size_t)b * Vl, x + (size_t)b * V + v0[r], Vl * sizeof *xs);
        d_x[r] = dev_copy(xs, (size_t)B * Vl * sizeof *xs);
        d_p[r] = dev_copy(NULL, (size_t)B * Vl * sizeof(float));
        free(xs);
    }
    void *d_xb = dev_copy(NULL, B * 3 * S * sizeof(double)), *d_mx = dev_copy(NULL, B * sizeof(double));
    void *d_plan = dev_copy(NULL, B * 4 * sizeof(double)), *d_res = dev_copy(NULL, B * 2 * sizeof(double));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const struct sampler_config *sc = &cases[c];
        const float T = sc->temperature;
        double slots[B * 3 * S] = {0}, got[B * 3 * S], mx[B], m[B], plan[B * 4], res[B * 2] = {0};
        int w = T > 0 ? 2 : 3, same = 1;
        float lp[B];
        int32_t tok[B];
        for (int b = 0; b < B; b++) mx[b] = -INFINITY;
        for (int r = 0; T > 0 && r < S; r++) { /* the max all-reduce */
            CU_OK(api->vocab_sample_max(d_mx, d_x[r], B, v0[r + 1] - v0[r], T));
            CU_OK(api->to_host(m, d_mx, sizeof m));
            for (int b = 0; b < B; b++) mx[b] = fmax(mx[b], m[b]);
        }
        CU_OK(api->to_device(d_mx, mx, sizeof mx));
        for (int r = 0; r < S; r++) { /* the slots' sum all-reduce */
            int Vl = v0[r + 1] - v0[r];
            if (T > 0) CU_OK(api->vocab_sample_sums(d_xb, d_p[r], d_x[r], d_mx, B, Vl, T, r, S));
            else CU_OK(api->vocab_greedy_stats(d_xb, d_x[r], B, Vl, v0[r], r, S));
            CU_OK(api->to_host(got, d_xb, (size_t)B * w * S * sizeof *got));
            for (int q = 0; q < B * w * S; q++) slots[q] += got[q];
        }
        for (int b = 0; T > 0 && b < B; b++) {
            struct rng g;
            struct sampler_tp_draw d;
            rng_init(&g, sc->seed, 1000 + 7 * b, 3 * b + 11, SAMPLER_PURPOSE);
            double *pl = plan + 4 * b; /* the owner here; 1 or 0 for each rank below */
            pl[0] = sampler_tp_owner(slots + b * 2 * S, S, rng_uniform(&g), &d);
            pl[1] = d.u, pl[2] = d.own_start, pl[3] = d.total_exact;
        }
        for (int r = 0; T > 0 && r < S; r++) { /* the owners' (id, log-prob): a sum */
            double pr[B * 4], rr[B * 2];
            memcpy(pr, plan, sizeof pr);
            for (int b = 0; b < B; b++) pr[4 * b] = plan[4 * b] == r;
            CU_OK(api->to_device(d_plan, pr, sizeof pr));
            CU_OK(api->vocab_sample_pick(d_res, d_x[r], d_p[r], d_plan, d_mx, B,
                                         v0[r + 1] - v0[r], v0[r], T));
            CU_OK(api->to_host(rr, d_res, sizeof rr));
            for (int q = 0; q < B * 2; q++) res[q] += rr[q];
        }
        for (int b = 0; b < B; b++) {
            float ref_lp;
            tok[b] = T > 0 ? (int32_t)res[2 * b] : sampler_tp_greedy_pick(slots + b * 3 * S, S, &lp[b]);
            if (T > 0) lp[b] = (float)res[2 * b + 1];
            int32_t want = sampler_sample(sc, x + (size_t)b * V, V, 1000 + 7 * b, 3 * b + 11,
                                          &ref_lp, ref_s);
            same &= tok[b] == want && fabsf(lp[b] - ref_lp) <= 1e-5f * fmaxf(1.0f, fabsf(ref_lp));
        }
        CU_ASSERT(same);
    }
    /* top-k 20 then top-p 0.9: each rank's max and candidates, merged on the host */
    const struct sampler_config tk = {0.8f, 0.9f, 20, 11};
    int kr[S], off[S], nc = 0;
    for (int r = 0; r < S; r++) kr[r] = tk.top_k, off[r] = nc, nc += kr[r];
    int w = S + 2 * nc;
    double *rows = calloc((size_t)B * w, sizeof *rows), *got = malloc((size_t)B * w * sizeof *got);
    double mx[B], m[B];
    float *pick = malloc(2 * (size_t)nc * sizeof *pick);
    void *d_rows = dev_copy(NULL, (size_t)B * w * sizeof *rows);
    void *d_scr = dev_copy(NULL, 2 * (size_t)B * V * sizeof(float));
    for (int b = 0; b < B; b++) mx[b] = -INFINITY;
    for (int r = 0; r < S; r++) {
        CU_OK(api->vocab_sample_max(d_mx, d_x[r], B, v0[r + 1] - v0[r], tk.temperature));
        CU_OK(api->to_host(m, d_mx, sizeof m));
        for (int b = 0; b < B; b++) mx[b] = fmax(mx[b], m[b]);
    }
    CU_OK(api->to_device(d_mx, mx, sizeof mx));
    for (int r = 0; r < S; r++) {
        CU_OK(api->vocab_sample_topk(d_rows, d_scr, d_x[r], d_mx, B, v0[r + 1] - v0[r], v0[r],
                                     tk.temperature, kr[r], off[r], nc, r, S));
        CU_OK(api->to_host(got, d_rows, (size_t)B * w * sizeof *got));
        for (int q = 0; q < B * w; q++) rows[q] += got[q];
    }
    int same = 1;
    for (int b = 0; b < B; b++) {
        struct rng g;
        float lp, ref_lp;
        rng_init(&g, tk.seed, 1000 + 7 * b, 3 * b + 11, SAMPLER_PURPOSE);
        int32_t tok = sampler_tp_top_k_pick(&tk, rows + (size_t)b * w, S, nc, &g, &lp, pick);
        int32_t want = sampler_sample(&tk, x + (size_t)b * V, V, 1000 + 7 * b, 3 * b + 11, &ref_lp,
                                      ref_s);
        same &= tok == want && fabsf(lp - ref_lp) <= 1e-5f * fmaxf(1.0f, fabsf(ref_lp));
    }
    CU_ASSERT(same);
    api->free(d_rows), api->free(d_scr);
    free(rows), free(got), free(pick);
    for (int r = 0; r < S; r++) api->free(d_x[r]), api->free(d_p[r]);
    void *bufs[] = {d_xb, d_mx, d_plan, d_res};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) api->free(bufs[k]);
    free(x), free(ref_s);
}

/* The global norm's sum of squares, and AdamW steps against adamw_step (the last one
 * also writing the bf16 copy: the new weights rounded, bit for bit). */
static void test_optimizer(void)
{
    enum { N = 5003 };
    static float p[N], g[N], p_ref[N], got[N];
    fill_normal(p, N, 16, 0.5f);
    fill_normal(g, N, 17, 2.0f);
    double ref_ss = 0;
    for (int i = 0; i < N; i++) ref_ss += (double)g[i] * g[i];
    void *d_g = dev_copy(g, sizeof g);
    double ss = 0;
    CU_OK(api->sum_squares(&ss, d_g, N));
    CU_ASSERT(fabs(ss - ref_ss) <= 1e-12 * ref_ss);

    struct adamw_config ac = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, LR_COSINE, 2, 10, 0.1f};
    struct adamw o;
    adamw_init(&o, &ac, N);
    memcpy(p_ref, p, sizeof p);
    void *d_p = dev_copy(p, sizeof p), *d_m = dev_copy(NULL, sizeof p), *d_v = dev_copy(NULL, sizeof p);
    void *d_w = dev_copy(NULL, N * sizeof(uint16_t));
    static const float zeros[N];
    CU_OK(api->to_device(d_m, zeros, sizeof zeros));
    CU_OK(api->to_device(d_v, zeros, sizeof zeros));
    for (int step = 1; step <= 3; step++) {
        float g_ref[N];
        memcpy(g_ref, g, sizeof g);
        double norm = adamw_step(&o, p_ref, g_ref); /* clips g_ref in place */
        struct adamw_scalars s;
        adamw_scalars_of(&ac, step, &s);
        double coef = ac.clip_norm / (norm + 1e-6);
        struct cuda_adamw cs = {s.decay, s.step_size, s.bc2_sqrt, s.beta2, s.w1, s.w2, s.eps,
                                coef < 1.0 ? (float)coef : 1.0f};
        CU_OK(api->adamw_update(d_p, d_m, d_v, step == 3 ? d_w : NULL, d_g, N, &cs));
    }
    CU_OK(api->sync());
    CU_OK(api->to_host(got, d_p, sizeof got));
    expect_close("adamw_update (3 steps)", got, p_ref, N, 1e-5);
    uint16_t w16[N], want[N]; /* the last step's bf16 copy: its weights rounded */
    CU_OK(api->to_host(w16, d_w, sizeof w16));
    st_f32_to_bf16_n(got, want, N);
    CU_ASSERT(memcmp(w16, want, sizeof want) == 0);
    adamw_free(&o);
    api->free(d_g), api->free(d_p), api->free(d_m), api->free(d_v), api->free(d_w);
}

/* The replicas' fingerprint of weights on the GPU: more elements than the grid's
 * threads, an offset start, nothing; a flipped low bit and a swap must show. */
static void test_weights_hash(void)
{
    enum { N = 300007 };
    float *x = malloc(N * sizeof *x);
    fill_normal(x, N, 18, 0.02f);
    float *d_x = dev_copy(x, N * sizeof *x);
    uint64_t h = 0, h1 = 0, h0 = 1;
    CU_OK(api->weights_hash(&h, d_x, N));
    CU_ASSERT_EQUAL(h, weights_sum_hash(x, N));
    CU_OK(api->weights_hash(&h1, d_x + 1, N - 1));
    CU_ASSERT_EQUAL(h1, weights_sum_hash(x + 1, N - 1));
    CU_ASSERT_NOT_EQUAL(h1, h);
    CU_OK(api->weights_hash(&h0, d_x, 0));
    CU_ASSERT_EQUAL(h0, 0);
    /* one bit of one element */
    uint32_t b;
    memcpy(&b, &x[N - 7], sizeof b);
    b ^= 1u;
    memcpy(&x[N - 7], &b, sizeof b);
    CU_OK(api->to_device(d_x + N - 7, &x[N - 7], sizeof *x));
    CU_OK(api->weights_hash(&h1, d_x, N));
    CU_ASSERT_NOT_EQUAL(h1, h);
    CU_ASSERT_EQUAL(h1, weights_sum_hash(x, N));
    /* two elements swapped: the same multiset of values, other places */
    float a = x[5];
    x[5] = x[77777];
    x[77777] = a;
    CU_ASSERT(x[5] != x[77777]);
    CU_OK(api->to_device(d_x, x, N * sizeof *x));
    uint64_t h2 = 0;
    CU_OK(api->weights_hash(&h2, d_x, N));
    CU_ASSERT_NOT_EQUAL(h2, h1);
    CU_ASSERT_EQUAL(h2, weights_sum_hash(x, N));
    api->free(d_x);
    free(x);
}

/* Page-locked host memory (the bf16 weight syncs' landing buffers): copies to the GPU
 * and back through it; on the host module, host_free refuses a device pointer and a
 * second free. */
static void test_host_alloc(void)
{
    enum { N = 4099 };
    uint16_t *h = NULL, *back = malloc(N * sizeof *back);
    CU_OK(api->host_alloc((void **)&h, N * sizeof *h));
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    for (int i = 0; i < N; i++) h[i] = (uint16_t)(i * 7919u);
    void *d = dev_copy(h, N * sizeof *h);
    CU_OK(api->to_host(back, d, N * sizeof *back));
    CU_OK(api->sync());
    CU_ASSERT(memcmp(back, h, N * sizeof *h) == 0);
    CU_OK(api->host_free(h));
    CU_OK(api->host_free(NULL));
    if (api == cuda_host_api()) {
        CU_ASSERT(api->host_free(d) != 0);
        CU_ASSERT(api->host_free(h) != 0);
    }
    api->free(d);
    free(back);
}

/* copy2d (a weight sync's strided runs): columns [5, 5 + 37) of a 19 x 100 bf16 block
 * packed into a contiguous buffer, and unpacked into a zeroed block -- each value where
 * the host's loop puts it, nothing else written; on the host module, rows wider than
 * their pitch are refused. */
static void test_copy2d(void)
{
    enum { R = 19, P = 100, C0 = 5, W = 37 };
    uint16_t h[R * P], packed[R * W], back[R * P], want[R * P];
    for (int i = 0; i < R * P; i++) h[i] = (uint16_t)(i * 40503u + 1);
    uint16_t *d = dev_copy(h, sizeof h), *pk = NULL, *un = NULL;
    CU_OK(api->alloc((void **)&pk, sizeof packed));
    CU_OK(api->alloc((void **)&un, sizeof back));
    CU_OK(api->zero(un, sizeof back));
    CU_OK(api->copy2d(pk, W * 2, d + C0, P * 2, W * 2, R));
    CU_OK(api->copy2d(un + C0, P * 2, pk, W * 2, W * 2, R));
    CU_OK(api->to_host(packed, pk, sizeof packed));
    CU_OK(api->to_host(back, un, sizeof back));
    CU_OK(api->sync());
    memset(want, 0, sizeof want);
    int bad = 0;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < W; c++) {
            bad += packed[r * W + c] != h[r * P + C0 + c];
            want[r * P + C0 + c] = h[r * P + C0 + c];
        }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(memcmp(back, want, sizeof want) == 0);
    if (api == cuda_host_api()) CU_ASSERT(api->copy2d(pk, W * 2, d, W, W * 2, R) != 0);
    api->free(un);
    api->free(pk);
    api->free(d);
}

/* The side stream (a weight sync that lands while the kernels' stream decodes): 32 MiB
 * copied there, and a column block packed and unpacked there; the mark polled until it
 * is done (at once it may not be: a "not yet" must leave no error behind for the next
 * kernel's launch check); after side_join a copy on the kernels' stream sees the side
 * stream's data. The host module says "not yet" at the first query after a mark and
 * refuses, before "done", a join and a write into memory the side stream reads. */
static void test_side_stream(void)
{
    const size_t n = (size_t)16 << 20; /* bf16 values: 32 MiB */
    uint16_t *h = malloc(n * sizeof *h), *back = malloc(n * sizeof *back);
    for (size_t i = 0; i < n; i++) h[i] = (uint16_t)(i * 40503u + 7);
    uint16_t *a = dev_copy(h, n * sizeof *h), *b = NULL, *c = NULL;
    CU_OK(api->alloc((void **)&b, n * sizeof *b));
    CU_OK(api->alloc((void **)&c, n * sizeof *c));
    CU_OK(api->zero(b, n * sizeof *b));
    CU_OK(api->sync());
    CU_OK(api->side_stream(1));
    CU_OK(api->copy(b, a, n * sizeof *b));
    /* rows 0..99 of 1,000: b's columns [10, 310) from a's [20, 320) */
    CU_OK(api->copy2d(b + 10, 1000 * 2, a + 20, 1000 * 2, 300 * 2, 100));
    CU_OK(api->side_stream(0));
    CU_OK(api->side_mark());
    int first = api->side_done(), done = first;
    CU_ASSERT(first == 0 || first == 1);
    if (api == cuda_host_api()) {
        CU_ASSERT_EQUAL(first, 0);
        CU_ASSERT(api->side_join() != 0); /* before "done" */
        CU_ASSERT(api->zero(a + 5, 2) != 0); /* a, which the side stream reads, written */
    }
    float x[4] = {1, 2, 3, 4}, *dx = dev_copy(x, sizeof x);
    uint16_t *dy = NULL;
    CU_OK(api->alloc((void **)&dy, 4 * sizeof *dy));
    CU_OK(api->f32_to_bf16(dy, dx, 4)); /* a launch right after a "not yet" */
    for (long spins = 0; done == 0 && spins < 100000000L; spins++) done = api->side_done();
    CU_ASSERT_EQUAL(done, 1);
    CU_OK(api->side_join());
    CU_OK(api->copy(c, b, n * sizeof *c));
    CU_OK(api->to_host(back, c, n * sizeof *back));
    CU_OK(api->sync());
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        size_t r = i / 1000, col = i % 1000;
        uint16_t want = r < 100 && col >= 10 && col < 310 ? h[r * 1000 + col + 10] : h[i];
        bad += back[i] != want;
    }
    CU_ASSERT_EQUAL(bad, 0);
    api->free(dy);
    api->free(dx);
    api->free(c);
    api->free(b);
    api->free(a);
    free(back);
    free(h);
}

/* The host module itself (include/libra/cuda_host.h), whichever module the rest of
 * this suite runs on: its memory budget and alignment, a graph recorded (its kernels
 * not run until launched, and then on what the memory holds at launch) and replayed, a
 * memory call while recording refused and the recording invalidated, a refused kernel
 * that leaves the recording usable, and a free of a pointer alloc did not return. */
static void test_host_module(void)
{
    enum { N = 256 };
    const struct cuda_api *h = cuda_host_api();
    size_t free0 = 0, free1 = 0, total = 0;
    CU_ASSERT_FATAL(h->mem_info(&free0, &total) == 0 && free0 <= total);
    void *p = NULL, *big = (void *)1;
    CU_ASSERT(h->alloc(&big, free0 + 1) == -1 && big == NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(h->last_error(), "out of memory"));
    CU_ASSERT_FATAL(h->alloc(&p, 2 * N * sizeof(float)) == 0);
    CU_ASSERT(((uintptr_t)p & 255) == 0); /* cudaMalloc's alignment */
    CU_ASSERT(h->mem_info(&free1, &total) == 0 && free1 == free0 - 2 * N * sizeof(float));
    float *x = p, *y = x + N, hx[N], got[N], want[N];
    for (int i = 0; i < N; i++) hx[i] = 0.01f * (float)(i - N / 2);
    CU_ASSERT(h->to_device(x, hx, sizeof hx) == 0 && h->zero(y, N * sizeof(float)) == 0);
    /* y = swiglu(x, x) + x, recorded: nothing runs yet */
    void *g = NULL, *bad = (void *)1;
    CU_ASSERT_FATAL(h->graph_begin() == 0);
    CU_ASSERT(h->graph_begin() == -1); /* one recording per thread */
    CU_ASSERT(h->swiglu_fwd(y, NULL, x, x, N) == 0 && h->add_bias(y, x, 1, N) == 0);
    CU_ASSERT(h->graph_end(&g) == 0 && g != NULL);
    CU_ASSERT(h->to_host(got, y, sizeof got) == 0);
    int zero = 1;
    for (int i = 0; i < N; i++) zero &= got[i] == 0.0f;
    CU_ASSERT(zero);
    /* launched twice on new inputs: the kernels read the memory as it is then */
    for (int i = 0; i < N; i++) hx[i] *= -2.0f;
    CU_ASSERT(h->to_device(x, hx, sizeof hx) == 0);
    swiglu_forward(want, NULL, hx, hx, N);
    for (int i = 0; i < N; i++) want[i] += hx[i];
    CU_ASSERT(h->graph_launch(g) == 0 && h->graph_launch(g) == 0);
    CU_ASSERT(h->to_host(got, y, sizeof got) == 0 && memcmp(got, want, sizeof got) == 0);
    /* a memory call while recording: refused, and the recording with it */
    CU_ASSERT_FATAL(h->graph_begin() == 0);
    CU_ASSERT(h->zero(y, N * sizeof(float)) == -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(h->last_error(), "zero: not allowed while a CUDA graph"));
    CU_ASSERT(h->graph_end(&bad) == -1 && bad == NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(h->last_error(), "invalidated by a call of zero"));
    /* a refused kernel (gemv's in of 12) while recording: -1 at the call, nothing kept */
    struct cuda_gemv gv = {.x = x, .N = 1, .in = 12, .n_mats = 1};
    gv.m[0].w = p, gv.m[0].y = y, gv.m[0].out = 4;
    CU_ASSERT_FATAL(h->graph_begin() == 0);
    CU_ASSERT(h->gemv(&gv) == -1);
    CU_ASSERT(h->graph_end(&bad) == 0 && bad != NULL && h->graph_launch(bad) == 0);
    CU_ASSERT(h->graph_free(bad) == 0 && h->graph_free(g) == 0 && h->graph_free(NULL) == 0);
    CU_ASSERT(h->graph_launch(NULL) == -1);
    CU_ASSERT(h->free(x + 1) == -1); /* not what alloc returned */
    CU_ASSERT(h->free(p) == 0 && h->free(NULL) == 0);
    CU_ASSERT(h->mem_info(&free1, &total) == 0 && free1 == free0);
}

int main(void)
{
    api = test_cuda_or_skip("test_cuda");
    static const struct test_case cases[] = {
        {"embed_gather: bf16 rows widened exactly, zero rows outside the vocabulary; "
         "embed_scatter_add's bad token reported", test_embed_gather},
        {"f32_to_bf16: round to nearest even, specials", test_f32_to_bf16},
        {"rmsnorm_fwd vs rmsnorm_forward (2e-6); rmsnorm_fwd16 its bits rounded", test_rmsnorm},
        {"rope_fwd vs rope_forward (1e-6)", test_rope},
        {"swiglu_fwd vs swiglu_forward (1e-6)", test_swiglu},
        {"backward: rmsnorm, embedding scatter-add, rope, swiglu (1e-5)", test_backward},
        {"swiglu_fwd16 / swiglu_bwd16: bf16 outputs within one ulp", test_swiglu16},
        {"cuBLASLt linear (bf16 in, f32 out) vs linear_forward (1e-5); the residual form",
         test_linear},
        {"cuBLASLt linear backward (dx, dw) and the bias gradient (1e-5)",
         test_linear_backward},
        {"gemv: small-batch products, q/k/v and gate/up in one launch (1e-5)", test_gemv},
        {"gemv with the RMSNorm folded in: rmsnorm_fwd's bits", test_gemv_norm},
        {"gemv launched overlapped: a chain of dependent gemvs gives the plain bits",
         test_gemv_overlap},
        {"qk_norm_rope_fwd / _bwd: the q/k norm and rotary in one pass, both ways",
         test_qk_norm_rope},
        {"decode_qkv: q/k norm, rotary and KV append in one launch (1e-6)", test_decode_qkv},
        {"causal GQA attention vs attn_forward (1e-5)", test_attention},
        {"attention backward vs attn_backward (1e-5)", test_attention_backward},
        {"tensor-core attention vs attn_forward/backward (1e-2, 2e-2)", test_flash_attention},
        {"tensor-core attention: a packed batch = each sequence alone", test_flash_packed},
        {"column sums over row chunks: rmsnorm_bwd dw, bias_bwd (1e-5)", test_column_sums},
        {"tensor-core prefill attention over a paged pool vs attn_forward (1e-2)",
         test_prefill_attention},
        {"paged-KV decode attention, shared prefix blocks (1e-5)", test_decode_attention},
        {"log-softmax over 151936 ids at T = 0.8, and its backward", test_logsoftmax},
        {"the vocabulary-parallel log-softmax over 3 ranks' columns, and its backward",
         test_vocab_parallel},
        {"the entropy term's backward, whole rows and 3 ranks' columns (1e-6)", test_entropy},
        {"sampler: sampler_sample's tokens, greedy, T, top-k, top-p, both", test_sampler},
        {"sampler: top-p survivors short through rounding, the nucleus over all ids",
         test_sampler_short},
        {"vocabulary-parallel sampler over 3 ranks' columns: sampler_sample's tokens",
         test_vocab_sampler},
        {"optimizer: sum of squares, AdamW steps vs adamw_step", test_optimizer},
        {"weights_hash: weights_sum_hash's bits; a bit and a swap change it",
         test_weights_hash},
        {"host_alloc: page-locked memory to the GPU and back; host_free's refusals",
         test_host_alloc},
        {"copy2d: a column block packed and unpacked", test_copy2d},
        {"the side stream: copies there, its mark polled, joined", test_side_stream},
        {"the host module: memory budget, graphs recorded and replayed, refusals",
         test_host_module},
        {NULL, NULL},
    };
    static const struct test_suite suites[] = {
        {"cuda kernels", cases},
        {NULL, NULL},
    };
    return test_main(suites);
}
