/*
 * The GPU decode engine (include/libra/gpu_decode.h) on bf16-rounded weights, for the
 * three model families (llama, qwen2 with q/k/v biases, qwen3 with q/k norm):
 *   logits of a chunked prefill (its attention on the tensor cores, the default, and
 *          in float32) and of decode steps against a CPU forward that rounds
 *          the activations to bf16 where the GPU does (the inputs of every matrix
 *          product, and the tensor-core attention's operands and probabilities;
 *          src/model/cpu/ops.c kernels otherwise): within EMULATED_TOL of the
 *          largest logit. Measured on an H200: 3.6e-3 (llama), 5.6e-3 (qwen2), 4.6e-3
 *          (qwen3), against 3.0e-2, 3.9e-2, 1.1e-2 from the float32 decoder: float32
 *          sums in other orders and the device's expf / rsqrtf move values across bf16
 *          rounding boundaries, and each such flip is a 2^-9 change the next layers
 *          carry. A wrong head, position or cache row gives errors of order 1;
 *   the same logits against the CPU decoder (float32 activations): the bf16 effect,
 *          printed with the figure above and bounded by BF16_EFFECT_BOUND only as a
 *          sanity check (docs/cuda.md records the measured figures);
 *   a batched step of slots of different lengths equals one slot at a time (1e-3:
 *          other matrix-product shapes, so other bf16 roundings);
 *   fork: a slot forked from another computes what a fresh prefill of the same
 *          context computes, its write into the shared partial block leaves the
 *          source's cache untouched (copy on write), and every block comes back;
 *   the forward as recorded CUDA graphs gives the same bits as launched kernel by kernel;
 *   decode steps through gemv and through cuBLASLt agree (EMULATED_TOL);
 *   greedy decoding of the shipped calc model follows the CPU decoder's tokens until
 *          a choice the CPU's own logits hold as a near tie;
 *   a full pool: -1 and nothing added;
 *   sampling on the GPU picks sampler_sample's tokens from the same logits (greedy,
 *   temperature, top-k, top-p, both).
 * Without the CUDA module or a GPU it says which and runs on the host module
 * (include/libra/cuda_host.h): the engine's bookkeeping, forks and graphs, tested.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/model/tfm_state.h"
#include "libra/cpu_ops.h"
#include "libra/cuda_module.h"
#include "libra/gpu_decode.h"
#include "libra/model_load.h"
#include "libra/safetensors.h"
#include "libra/sampler.h"
#include "libra/tfm_decode.h"
#include "libra/tokenizer.h"
#include "testutil.h"

#define EMULATED_TOL 1e-2
#define BF16_EFFECT_BOUND 0.1

static const struct cuda_api *api;

static struct tfm_config model_of(int family)
{
    struct tfm_config c = {.family = family, .vocab_size = 301, .hidden_size = 128,
                           .n_layers = 3, .n_heads = 4, .n_kv_heads = 2, .head_dim = 32,
                           .intermediate_size = 320, .max_position_embeddings = 512,
                           .rms_norm_eps = 1e-6f, .rope_theta = 10000.0f,
                           .tie_word_embeddings = family != TFM_LLAMA,
                           .attention_bias = family == TFM_QWEN2, .qk_norm = family == TFM_QWEN3};
    return c;
}

static struct gpu_model *upload(const struct tfm_config *c, const struct tfm_params *p)
{
    char err[512];
    struct gpu_model *m = gpu_model_upload(api, c, p, err, sizeof err);
    if (!m) fprintf(stderr, "\n%s\n", err);
    CU_ASSERT_FATAL(m != NULL);
    return m;
}

static struct gpu_decoder *decoder(const struct gpu_model *m, int slots, int cap, int chunk,
                                   size_t kv_bytes)
{
    char err[512];
    struct gpu_decoder *d = gpu_decoder_create(m, slots, cap, chunk, kv_bytes, err, sizeof err);
    if (!d) fprintf(stderr, "\n%s\n", err);
    CU_ASSERT_FATAL(d != NULL);
    return d;
}

static void tokens_of(int32_t *t, int n, int V, int salt)
{
    for (int i = 0; i < n; i++) t[i] = (int32_t)((i * 37 + salt * 11 + 5) % V);
}

static void round_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = st_bf16_to_f32(st_f32_to_bf16(x[i]));
}

/* The tensor-core prefill attention's arithmetic (prefill_attn, cuda_flash.cu) for
 * rows 0 .. n - 1 of a causal sequence: q, k and v rounded to bf16, the scaled scores in
 * float (log2 units), keys in tiles of FLASH_TILE with a running maximum per row, each
 * probability rounded to bf16 where it meets v while the row's sum takes it unrounded. */
#define FLASH_TILE 64
static void flash_emulated(float *out, const float *q, const float *k, const float *v, int n,
                           int H, int K, int D)
{
    float scale2 = 1.4426950408889634f / sqrtf((float)D), *acc = malloc((size_t)D * sizeof *acc);
    float *qb = malloc((size_t)D * sizeof *qb), x[FLASH_TILE];
    for (int i = 0; i < n; i++)
        for (int h = 0; h < H; h++) {
            const float *qi = q + ((size_t)i * H + h) * D;
            for (int d = 0; d < D; d++) qb[d] = st_bf16_to_f32(st_f32_to_bf16(qi[d]));
            memset(acc, 0, (size_t)D * sizeof *acc);
            float m = -INFINITY, l = 0.0f;
            for (int j0 = 0; j0 <= i; j0 += FLASH_TILE) {
                float tmax = -INFINITY;
                for (int j = j0; j < j0 + FLASH_TILE; j++) {
                    x[j - j0] = -INFINITY;
                    if (j > i) continue;
                    const float *kj = k + ((size_t)j * K + h / (H / K)) * D;
                    float dot = 0.0f;
                    for (int d = 0; d < D; d++) dot += qb[d] * st_bf16_to_f32(st_f32_to_bf16(kj[d]));
                    x[j - j0] = dot * scale2;
                    tmax = fmaxf(tmax, x[j - j0]);
                }
                float mn = fmaxf(m, tmax), keep = exp2f(m - mn);
                l *= keep;
                for (int d = 0; d < D; d++) acc[d] *= keep;
                for (int j = j0; j < j0 + FLASH_TILE && j <= i; j++) {
                    float pj = exp2f(x[j - j0] - mn), pb = st_bf16_to_f32(st_f32_to_bf16(pj));
                    const float *vj = v + ((size_t)j * K + h / (H / K)) * D;
                    l += pj;
                    for (int d = 0; d < D; d++) acc[d] += pb * st_bf16_to_f32(st_f32_to_bf16(vj[d]));
                }
                m = mn;
            }
            float *oi = out + ((size_t)i * H + h) * D;
            for (int d = 0; d < D; d++) oi[d] = acc[d] / l;
        }
    free(acc);
    free(qb);
}

/* logits (T, V) of every position of tok, with the GPU engine's bf16 roundings (the
 * matrix products' operands, the KV cache's keys and values); the
 * attention of rows 0 .. flash_rows - 1 (a prefill whose chunks take prefill_attn) as
 * flash_emulated computes it. */
static void emulated_forward(const struct tfm_config *c, const struct tfm_params *p,
                             const int32_t *tok, int T, int flash_rows, float *logits)
{
    int C = c->hidden_size, H = c->n_heads, K = c->n_kv_heads, D = c->head_dim;
    int F = c->intermediate_size, HD = H * D, KD = K * D;
    size_t Tz = (size_t)T;
    float *x = malloc(Tz * C * sizeof *x), *h = malloc(Tz * C * sizeof *h);
    float *tmp = malloc(Tz * C * sizeof *tmp), *q = malloc(Tz * HD * sizeof *q);
    float *qlin = malloc(Tz * HD * sizeof *qlin), *att = malloc(Tz * HD * sizeof *att);
    float *k = malloc(Tz * KD * sizeof *k), *klin = malloc(Tz * KD * sizeof *klin);
    float *v = malloc(Tz * KD * sizeof *v), *gate = malloc(Tz * F * sizeof *gate);
    float *up = malloc(Tz * F * sizeof *up), *act = malloc(Tz * F * sizeof *act);
    float *rope = malloc(Tz * D * sizeof *rope);
    float *scratch = malloc(attn_scratch_floats(T, T, H, K, D) * sizeof *scratch);
    int *pos = malloc(Tz * sizeof *pos);
    for (int t = 0; t < T; t++) pos[t] = t;
    rope_table(rope, T, c);
    embed_forward(x, p->embed, tok, T, C);
    for (int l = 0; l < c->n_layers; l++) {
        struct tfm_layer w = tfm_layer_view(c, p, l);
        rmsnorm_forward(h, x, w.ln1, T, C, c->rms_norm_eps);
        round_bf16(h, Tz * C);
        float *qp = c->qk_norm ? qlin : q, *kp = c->qk_norm ? klin : k;
        linear_forward(qp, h, w.wq, w.bq, T, C, HD);
        linear_forward(kp, h, w.wk, w.bk, T, C, KD);
        linear_forward(v, h, w.wv, w.bv, T, C, KD);
        if (c->qk_norm) {
            rmsnorm_forward(q, qlin, w.q_norm, T * H, D, c->rms_norm_eps);
            rmsnorm_forward(k, klin, w.k_norm, T * K, D, c->rms_norm_eps);
        }
        rope_forward(q, pos, T, H, D, rope);
        rope_forward(k, pos, T, K, D, rope);
        round_bf16(k, Tz * KD); /* the KV cache holds bf16 */
        round_bf16(v, Tz * KD);
        attn_forward(att, q, k, v, pos, T, T, H, K, D, scratch);
        flash_emulated(att, q, k, v, flash_rows, H, K, D);
        round_bf16(att, Tz * HD);
        linear_forward(tmp, att, w.wo, NULL, T, HD, C);
        for (size_t i = 0; i < Tz * C; i++) x[i] += tmp[i];
        rmsnorm_forward(h, x, w.ln2, T, C, c->rms_norm_eps);
        round_bf16(h, Tz * C);
        linear_forward(gate, h, w.w_gate, NULL, T, C, F);
        linear_forward(up, h, w.w_up, NULL, T, C, F);
        swiglu_forward(act, NULL, gate, up, (int64_t)T * F);
        round_bf16(act, Tz * F);
        linear_forward(tmp, act, w.w_down, NULL, T, F, C);
        for (size_t i = 0; i < Tz * C; i++) x[i] += tmp[i];
    }
    rmsnorm_forward(h, x, p->ln_f, T, C, c->rms_norm_eps);
    round_bf16(h, Tz * C);
    linear_forward(logits, h, p->lm_head, NULL, T, C, c->vocab_size);
    float *bufs[] = {x, h, tmp, q, qlin, att, k, klin, v, gate, up, act, rope, scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(pos);
}

static void test_parity(void)
{
    enum { PROMPT = 45, STEPS = 6, CAP = 64, T = PROMPT + STEPS };
    const char *names[] = {"llama", "qwen2", "qwen3"};
    for (int f = TFM_LLAMA; f <= TFM_QWEN3; f++) {
        struct tfm_config c = model_of(f);
        struct tfm_params p;
        test_bf16_params(&p, &c, 40 + (uint64_t)f);
        int V = c.vocab_size;
        int32_t tok[T];
        tokens_of(tok, T, V, f);
        float *emu = malloc((size_t)T * V * sizeof *emu), *ref = malloc((size_t)V * sizeof *ref);
        float *got = malloc((size_t)V * sizeof *got);
        struct gpu_model *m = upload(&c, &p);
        for (int flash = 1; flash >= 0; flash--) { /* prefill attention: tensor cores, float32 */
            /* the prompt's chunks (16, 16, 13 rows) all take prefill_attn when it is on */
            emulated_forward(&c, &p, tok, T, flash ? PROMPT : 0, emu);
            struct tfm_decoder *cd = tfm_decoder_create(&c, &p, 1, CAP, 64);
            struct gpu_decoder *gd = decoder(m, 1, CAP, 16, 0); /* 3 chunks of the prompt */
            CU_ASSERT_EQUAL(gpu_decoder_set_flash(gd, flash), 1); /* on by default (D 32) */
            CU_ASSERT(tfm_decoder_prefill(cd, 0, tok, PROMPT, ref) == 0);
            CU_ASSERT(gpu_decoder_prefill(gd, 0, tok, PROMPT, got) == 0);
            double e_emu = test_rel_err(got, emu + (size_t)(PROMPT - 1) * V, (size_t)V);
            double e_f32 = test_rel_err(got, ref, (size_t)V);
            for (int s = 0; s < STEPS; s++) {
                int slot = 0;
                CU_ASSERT(tfm_decoder_step(cd, &slot, &tok[PROMPT + s], 1, ref) == 0);
                CU_ASSERT(gpu_decoder_step(gd, &slot, &tok[PROMPT + s], 1, got) == 0);
                if (PROMPT + s + 1 < T)
                    e_emu = fmax(e_emu,
                                 test_rel_err(got, emu + (size_t)(PROMPT + s) * V, (size_t)V));
                e_f32 = fmax(e_f32, test_rel_err(got, ref, (size_t)V));
            }
            CU_ASSERT(gpu_decoder_len(gd, 0) == T);
            printf("[%s, %s prefill attention: %.1e of the largest logit from the bf16-emulating "
                   "CPU forward, %.1e from the float32 CPU decoder] ", names[f],
                   flash ? "tensor-core" : "float32", e_emu, e_f32);
            CU_ASSERT(e_emu <= EMULATED_TOL);
            CU_ASSERT(e_f32 <= BF16_EFFECT_BOUND);
            gpu_decoder_free(gd);
            tfm_decoder_free(cd);
        }
        gpu_model_free(m);
        tfm_params_free(&p);
        free(emu);
        free(ref);
        free(got);
    }
}

/* A batched step of slots of different lengths equals one slot at a time, on each
 * path of the matrix products (gemv for every row count here, and cuBLASLt): the
 * paths are compared with each other in test_gemv_path. */
static void test_batched_step(void)
{
    enum { S = 5, CAP = 96 };
    struct tfm_config c = model_of(TFM_QWEN3);
    struct tfm_params p;
    test_bf16_params(&p, &c, 7);
    int V = c.vocab_size;
    struct gpu_model *m = upload(&c, &p);
    float *a = malloc((size_t)S * V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
    for (int path = 0; path < 2; path++) {
        struct gpu_decoder *one = decoder(m, S, CAP, 32, 0), *all = decoder(m, S, CAP, 32, 0);
        int rows = path ? CUDA_GEMV_MAX_ROWS : 0;
        CU_ASSERT(gpu_decoder_set_gemv(one, rows) == rows && gpu_decoder_set_gemv(all, rows) == rows);
        int32_t tok[CAP];
        int slots[S];
        int32_t next[S];
        for (int s = 0; s < S; s++) {
            int n = 3 + 13 * s; /* different lengths, some mid-block */
            tokens_of(tok, n, V, s);
            CU_ASSERT(gpu_decoder_prefill(one, s, tok, n, NULL) == 0);
            CU_ASSERT(gpu_decoder_prefill(all, s, tok, n, NULL) == 0);
            slots[s] = S - 1 - s; /* any order */
            next[s] = (int32_t)(100 + s);
        }
        for (int step = 0; step < 3; step++) {
            CU_ASSERT(gpu_decoder_step(all, slots, next, S, a) == 0);
            double worst = 0;
            for (int i = 0; i < S; i++) {
                CU_ASSERT(gpu_decoder_step(one, &slots[i], &next[i], 1, b) == 0);
                worst = fmax(worst, test_rel_err(a + (size_t)i * V, b, (size_t)V));
            }
            CU_ASSERT(worst <= 1e-3);
            if (worst > 1e-3)
                fprintf(stderr, "\n%s: batched step %d: %.3g\n", path ? "gemv" : "cuBLASLt", step,
                        worst);
        }
        gpu_decoder_free(one);
        gpu_decoder_free(all);
    }
    gpu_model_free(m);
    tfm_params_free(&p);
    free(a);
    free(b);
}

static void test_fork(void)
{
    enum { CTX = 37, CAP = 80 }; /* 37 = two full blocks and a partial one */
    struct tfm_config c = model_of(TFM_QWEN2);
    struct tfm_params p;
    test_bf16_params(&p, &c, 9);
    int V = c.vocab_size;
    struct gpu_model *m = upload(&c, &p);
    struct gpu_decoder *d = decoder(m, 3, CAP, 16, 0);
    int32_t tok[CTX];
    tokens_of(tok, CTX, V, 3);
    float *src_ref = malloc((size_t)V * sizeof(float)), *got = malloc((size_t)V * sizeof(float));
    float *fresh = malloc((size_t)V * sizeof(float));
    int free0, total;
    gpu_decoder_blocks(d, &free0, &total);
    /* slot 2: the reference, a prefill of the context of its own, then a decode step of
     * token 7 -- the forked slot's path, so the logits agree to rounding (a prefill of
     * token 7 would take the prefill attention instead, 5e-3 apart on a GPU) */
    int slot = 2;
    int32_t t7 = 7, t9 = 9;
    CU_ASSERT(gpu_decoder_prefill(d, 2, tok, CTX, NULL) == 0);
    CU_ASSERT(gpu_decoder_step(d, &slot, &t7, 1, fresh) == 0);
    CU_ASSERT(gpu_decoder_prefill(d, 0, tok, CTX, NULL) == 0);
    int free1, free2, free3;
    gpu_decoder_blocks(d, &free1, &total);
    gpu_decoder_fork(d, 1, 0);
    gpu_decoder_blocks(d, &free2, &total);
    CU_ASSERT(free2 == free1); /* shared, not copied */
    CU_ASSERT(gpu_decoder_len(d, 1) == CTX);
    slot = 1;
    CU_ASSERT(gpu_decoder_step(d, &slot, &t7, 1, got) == 0);
    gpu_decoder_blocks(d, &free3, &total);
    CU_ASSERT(free3 == free2 - 1); /* the partial block copied before the write */
    double fork_err = test_rel_err(got, fresh, (size_t)V);
    printf("[forked step vs its own context: %.1e] ", fork_err);
    CU_ASSERT(fork_err <= 1e-6);
    /* the source writes its own token 9 into its (now private) partial block; slot 2
     * stepped with 9 after truncating back gives the same logits */
    slot = 0;
    CU_ASSERT(gpu_decoder_step(d, &slot, &t9, 1, src_ref) == 0);
    gpu_decoder_truncate(d, 2, CTX);
    slot = 2;
    CU_ASSERT(gpu_decoder_step(d, &slot, &t9, 1, got) == 0);
    CU_ASSERT(test_rel_err(got, src_ref, (size_t)V) <= 1e-6);
    for (int s = 0; s < 3; s++) gpu_decoder_truncate(d, s, 0);
    gpu_decoder_blocks(d, &free3, &total);
    CU_ASSERT(free3 == free0 && free0 == total);
    gpu_decoder_free(d);
    gpu_model_free(m);
    tfm_params_free(&p);
    free(src_ref);
    free(got);
    free(fresh);
}

/* CUDA graphs replay the kernels they recorded, and overlapped launches only start a
 * kernel early, before it waits for the one ahead: four decoders -- kernel by kernel,
 * graphs, each with overlapped launches -- give the same bits, on steps of 3 rows
 * (cuBLASLt) and of 1 (gemv, which loads weights before its wait). A kernel that read
 * an earlier kernel's output before grid_wait would see it unfinished on a GPU of
 * compute capability 9.0 on; elsewhere overlapped launches are refused (set_overlap
 * 0) and the check is the graphs' alone. */
static void test_graphs(void)
{
    enum { S = 3, CAP = 40, N = 4 };
    struct tfm_config c = model_of(TFM_QWEN2);
    struct tfm_params p;
    test_bf16_params(&p, &c, 21);
    int V = c.vocab_size;
    struct gpu_model *m = upload(&c, &p);
    struct gpu_decoder *d[N];
    float *out[N];
    int overlap = 0;
    for (int k = 0; k < N; k++) {
        d[k] = decoder(m, S, CAP, 8, 0);
        CU_ASSERT_EQUAL(gpu_decoder_set_graphs(d[k], k & 1), k & 1);
        overlap = gpu_decoder_set_overlap(d[k], k >> 1);
        CU_ASSERT(k < 2 ? overlap == 0 : overlap == 0 || overlap == 1);
        out[k] = malloc((size_t)S * V * sizeof(float));
    }
    printf("[overlapped launches %s] ", overlap ? "on" : "not on this GPU");
    int32_t tok[20];
    int slots[S] = {2, 0, 1};
    int32_t next[S] = {3, 4, 5};
    int same = 1;
    for (int k = 0; k < N; k++) {
        for (int s = 0; s < S; s++) {
            tokens_of(tok, 11 + 3 * s, V, s); /* 2 chunks, the last of 3..7 rows */
            CU_ASSERT(gpu_decoder_prefill(d[k], s, tok, 11 + 3 * s, NULL) == 0);
        }
    }
    for (int step = 0; step < 6; step++) { /* the graphs are recorded at steps 0 and 1 */
        int R = step % 2 ? 1 : S;
        for (int k = 0; k < N; k++) CU_ASSERT(gpu_decoder_step(d[k], slots, next, R, out[k]) == 0);
        for (int k = 1; k < N; k++)
            same &= memcmp(out[0], out[k], (size_t)R * V * sizeof(float)) == 0;
    }
    CU_ASSERT(same);
    for (int k = 0; k < N; k++) {
        gpu_decoder_free(d[k]);
        free(out[k]);
    }
    gpu_model_free(m);
    tfm_params_free(&p);
}

/* Decode steps through gemv and through cuBLASLt: the same operands, sums in other
 * orders, so some activations round to the neighbouring bf16 value and the later
 * layers carry it (an H100 measured 1.8e-3 of the largest logit; bound EMULATED_TOL,
 * against differences of order 1 from a wrong row or matrix). */
static void test_gemv_path(void)
{
    enum { S = 3, CAP = 40 };
    struct tfm_config c = model_of(TFM_QWEN2);
    struct tfm_params p;
    test_bf16_params(&p, &c, 23);
    int V = c.vocab_size;
    struct gpu_model *m = upload(&c, &p);
    struct gpu_decoder *d[2] = {decoder(m, S, CAP, 8, 0), decoder(m, S, CAP, 8, 0)};
    CU_ASSERT(gpu_decoder_set_gemv(d[0], S) == S); /* the test model's shapes suit it */
    CU_ASSERT(gpu_decoder_set_gemv(d[1], 0) == 0);
    float *out[2] = {malloc((size_t)S * V * sizeof(float)), malloc((size_t)S * V * sizeof(float))};
    int32_t tok[20];
    int slots[S] = {1, 2, 0};
    int32_t next[S] = {7, 8, 9};
    double worst = 0;
    for (int k = 0; k < 2; k++)
        for (int s = 0; s < S; s++) {
            tokens_of(tok, 9 + 4 * s, V, s);
            CU_ASSERT(gpu_decoder_prefill(d[k], s, tok, 9 + 4 * s, NULL) == 0);
        }
    for (int step = 0; step < 3; step++) {
        for (int k = 0; k < 2; k++) CU_ASSERT(gpu_decoder_step(d[k], slots, next, S, out[k]) == 0);
        worst = fmax(worst, test_rel_err(out[0], out[1], (size_t)S * V));
    }
    printf("[gemv vs cuBLASLt: %.1e of the largest logit] ", worst);
    CU_ASSERT(worst <= EMULATED_TOL);
    for (int k = 0; k < 2; k++) {
        gpu_decoder_free(d[k]);
        free(out[k]);
    }
    gpu_model_free(m);
    tfm_params_free(&p);
}

/* argmax of x (n), the first of equals. */
static int32_t argmax(const float *x, int n)
{
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Greedy decoding of the shipped calc model (a trained model, whose choices are mostly
 * confident) on the GPU against the float32 CPU decoder: GREEDY_NEW tokens from each
 * prompt, each device continuing from its own choices. Where the two first choose
 * differently, the CPU's logits must hold a near tie there: the GPU's token within
 * BF16_EFFECT_BOUND of the largest logit of the CPU's best (the bf16 activations move
 * logits that much; a wrong row, position or weight moves them by their whole size);
 * the prompt then stops. The tokens each prompt matched are printed (docs/cuda.md). */
#define GREEDY_NEW 48
static void test_greedy_calc(void)
{
    const char *src = getenv("top_srcdir");
    char path[4096], err[1024];
    snprintf(path, sizeof path, "%s/inputs/models/calc-base.h5", src ? src : ".");
    struct tfm_config c;
    struct tfm_params p;
    if (model_load(path, &c, &p, NULL, NULL, err, sizeof err)) {
        fprintf(stderr, "\n%s\n", err);
        CU_FAIL_FATAL("the calc model");
    }
    static const char *prompts[] = {"<|bos|>7+5=", "<|bos|>12*3=", "<|bos|>(4+9)*2=",
                                    "<|bos|>100-37=", "<|bos|>8*8+1="};
    const struct vocab *v = tok_byte_vocab();
    int V = c.vocab_size, n_prompts = (int)(sizeof prompts / sizeof prompts[0]);
    float *lc = malloc((size_t)V * sizeof *lc), *lg = malloc((size_t)V * sizeof *lg);
    struct gpu_model *m = upload(&c, &p);
    printf("[tokens matched of %d:", GREEDY_NEW);
    for (int k = 0; k < n_prompts; k++) {
        int32_t prompt[64];
        int n = (int)v->encode_markup(v->ctx, prompts[k], strlen(prompts[k]), prompt, 64);
        CU_ASSERT_FATAL(n > 0 && n < 64);
        struct tfm_decoder *cpu = tfm_decoder_create(&c, &p, 1, n + GREEDY_NEW + 1, 64);
        struct gpu_decoder *gpu = decoder(m, 1, n + GREEDY_NEW + 1, 64, 0);
        CU_ASSERT_FATAL(tfm_decoder_prefill(cpu, 0, prompt, n, lc) == 0);
        CU_ASSERT_FATAL(gpu_decoder_prefill(gpu, 0, prompt, n, lg) == 0);
        int matched = 0, slot = 0;
        for (; matched < GREEDY_NEW; matched++) {
            int32_t tc = argmax(lc, V), tg = argmax(lg, V);
            if (tc != tg) {
                double top = 0;
                for (int i = 0; i < V; i++) top = fmax(top, fabs((double)lc[i]));
                double gap = (double)lc[tc] - lc[tg];
                if (gap > BF16_EFFECT_BOUND * top)
                    fprintf(stderr, "\n%s: token %d: the CPU's %d leads the GPU's %d by %.3g "
                            "(largest logit %.3g)\n", prompts[k], matched, tc, tg, gap, top);
                CU_ASSERT(gap <= BF16_EFFECT_BOUND * top);
                break;
            }
            CU_ASSERT_FATAL(tfm_decoder_step(cpu, &slot, &tc, 1, lc) == 0);
            CU_ASSERT_FATAL(gpu_decoder_step(gpu, &slot, &tg, 1, lg) == 0);
        }
        printf(" %d", matched);
        tfm_decoder_free(cpu);
        gpu_decoder_free(gpu);
    }
    printf("] ");
    gpu_model_free(m);
    tfm_params_free(&p);
    free(lc);
    free(lg);
}

/* A weight install rounds on the GPU exactly as st_f32_to_bf16 does on the host, over
 * more than one staging chunk (a model of 4.3M parameters). */
static void test_upload(void)
{
    struct tfm_config c = model_of(TFM_LLAMA);
    c.vocab_size = 16411; /* an embedding and head of 2.1M each: several chunks */
    struct tfm_params p;
    test_random_params(&p, &c, 29);
    struct gpu_model *m = upload(&c, &p);
    uint16_t *got = malloc(p.n * sizeof *got);
    GPU_CHECK(api, api->to_host(got, m->w, p.n * sizeof *got));
    size_t bad = 0;
    for (size_t i = 0; i < p.n; i++) bad += got[i] != st_f32_to_bf16(p.mem[i]);
    CU_ASSERT(bad == 0);
    printf("[%zu parameters] ", p.n);
    free(got);
    gpu_model_free(m);
    tfm_params_free(&p);
}

/* A bf16 install (a bf16 weight sync's, gpu_model_set_weights_bf16) gives the model
 * exactly what a float32 install of the widened values gives: the bf16 block and the
 * q/k/v biases' float32 copies (qwen2), bit for bit. So does a model made from bf16
 * weights (gpu_model_upload_bf16); and a block written on the GPU gets its biases'
 * copies from gpu_model_refresh_biases. */
static void test_upload_bf16(void)
{
    struct tfm_config c = model_of(TFM_QWEN2);
    struct tfm_params p, q;
    test_random_params(&p, &c, 31);
    tfm_params_alloc(&q, &c);
    uint16_t *w16 = malloc(p.n * sizeof *w16);
    for (size_t i = 0; i < p.n; i++) q.mem[i] = st_bf16_to_f32(w16[i] = st_f32_to_bf16(p.mem[i]));
    struct gpu_model *a = upload(&c, &p), *b = upload(&c, &p);
    gpu_model_set_weights(a, &q);
    gpu_model_set_weights_bf16(b, w16);
    uint16_t *wa = malloc(p.n * sizeof *wa), *wb = malloc(p.n * sizeof *wb);
    GPU_CHECK(api, api->to_host(wa, a->w, p.n * sizeof *wa));
    GPU_CHECK(api, api->to_host(wb, b->w, p.n * sizeof *wb));
    CU_ASSERT(memcmp(wa, wb, p.n * sizeof *wa) == 0);
    CU_ASSERT(memcmp(wb, w16, p.n * sizeof *wb) == 0);
    size_t nb = (size_t)c.n_layers * (c.n_heads + 2 * c.n_kv_heads) * c.head_dim;
    float *ba = malloc(nb * sizeof *ba), *bb = malloc(nb * sizeof *bb);
    GPU_CHECK(api, api->to_host(ba, a->bq, nb * sizeof *ba)); /* bq | bk | bv, one block */
    GPU_CHECK(api, api->to_host(bb, b->bq, nb * sizeof *bb));
    CU_ASSERT(memcmp(ba, bb, nb * sizeof *ba) == 0);
    CU_ASSERT(memcmp(bb, q.bq, (size_t)c.n_layers * c.n_heads * c.head_dim * sizeof *bb) == 0);
    /* a model made from bf16 weights (a rank's start-up read of a bf16 checkpoint) */
    char err[256];
    struct gpu_model *u = gpu_model_upload_bf16(api, &c, w16, err, sizeof err);
    CU_ASSERT_FATAL(u != NULL);
    GPU_CHECK(api, api->to_host(wb, u->w, p.n * sizeof *wb));
    GPU_CHECK(api, api->to_host(bb, u->bq, nb * sizeof *bb));
    CU_ASSERT(memcmp(wa, wb, p.n * sizeof *wa) == 0);
    CU_ASSERT(memcmp(ba, bb, nb * sizeof *ba) == 0);
    /* its bf16 block written on the GPU (a GPU-to-GPU sync's receives): the biases'
     * float32 copies follow it after gpu_model_refresh_biases */
    for (size_t i = 0; i < p.n; i++) w16[i] ^= 0x0100; /* other values, same exponents */
    GPU_CHECK(api, api->to_device(u->w, w16, p.n * sizeof *w16));
    gpu_model_refresh_biases(u);
    GPU_CHECK(api, api->to_host(bb, u->bq, nb * sizeof *bb));
    size_t off_b[3] = {u->at.bq, u->at.bk, u->at.bv}, at = 0, bad = 0;
    size_t len_b[3] = {(size_t)c.n_layers * c.n_heads * c.head_dim,
                       (size_t)c.n_layers * c.n_kv_heads * c.head_dim,
                       (size_t)c.n_layers * c.n_kv_heads * c.head_dim};
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < len_b[t]; i++, at++) bad += bb[at] != st_bf16_to_f32(w16[off_b[t] + i]);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(memcmp(ba, bb, nb * sizeof *ba) != 0);
    gpu_model_free(u);
    free(ba), free(bb), free(wa), free(wb), free(w16);
    gpu_model_free(a);
    gpu_model_free(b);
    tfm_params_free(&p);
    tfm_params_free(&q);
}

static void test_pool_full(void)
{
    enum { CAP = 48 };
    struct tfm_config c = model_of(TFM_LLAMA);
    struct tfm_params p;
    test_bf16_params(&p, &c, 11);
    struct gpu_model *m = upload(&c, &p);
    size_t block = /* keys and values of every layer, bf16 */
        2 * (size_t)c.n_layers * GPU_KV_BLOCK * c.n_kv_heads * c.head_dim * sizeof(uint16_t);
    struct gpu_decoder *d = decoder(m, 2, CAP, 16, 4 * block); /* one slot's 3 blocks + 1 */
    int32_t tok[CAP];
    tokens_of(tok, CAP, c.vocab_size, 1);
    CU_ASSERT(gpu_decoder_prefill(d, 0, tok, 40, NULL) == 0);  /* 3 blocks */
    CU_ASSERT(gpu_decoder_prefill(d, 1, tok, 20, NULL) == -1); /* needs 2, 1 free */
    CU_ASSERT(gpu_decoder_len(d, 1) == 0);
    CU_ASSERT(gpu_decoder_prefill(d, 1, tok, 16, NULL) == 0);  /* exactly the last one */
    int slots[2] = {0, 1};
    int32_t nt[2] = {1, 2};
    CU_ASSERT(gpu_decoder_step(d, slots, nt, 2, NULL) == -1);  /* slot 1 needs a 5th block */
    CU_ASSERT(gpu_decoder_len(d, 0) == 40 && gpu_decoder_len(d, 1) == 16);
    CU_ASSERT(gpu_decoder_prefill(d, 0, tok, CAP - 39, NULL) == -1); /* past the capacity */
    gpu_decoder_free(d);
    gpu_model_free(m);
    tfm_params_free(&p);
}

static void test_sample(void)
{
    enum { S = 4, CAP = 32 };
    struct tfm_config c = model_of(TFM_QWEN3);
    struct tfm_params p;
    test_bf16_params(&p, &c, 13);
    int V = c.vocab_size;
    struct gpu_model *m = upload(&c, &p);
    struct gpu_decoder *d = decoder(m, S, CAP, 16, 0);
    int32_t tok[8];
    int slots[S];
    int32_t next[S], got[S];
    int64_t traj[S], pos[S];
    float *logits = malloc((size_t)S * V * sizeof *logits), lp[S];
    float *scratch = malloc(2 * (size_t)V * sizeof *scratch);
    for (int s = 0; s < S; s++) {
        tokens_of(tok, 8, V, s);
        CU_ASSERT(gpu_decoder_prefill(d, s, tok, 8, NULL) == 0);
        slots[s] = s;
        next[s] = (int32_t)(s + 1);
        traj[s] = 1000 + s;
        pos[s] = 9;
    }
    CU_ASSERT(gpu_decoder_step(d, slots, next, S, logits) == 0);
    static const struct sampler_config cases[] = {
        {0.0f, 1.0f, 0, 77}, {1.0f, 1.0f, 0, 77}, {1.0f, 1.0f, 5, 77}, {1.0f, 0.7f, 0, 77},
        {0.8f, 0.6f, 40, 78}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        gpu_decoder_sample(d, S, &cases[k], traj, pos, got, lp);
        for (int s = 0; s < S; s++) {
            float want_lp;
            int32_t want = sampler_sample(&cases[k], logits + (size_t)s * V, V,
                                          (uint64_t)traj[s], (uint64_t)pos[s], &want_lp, scratch);
            CU_ASSERT(got[s] == want);
            CU_ASSERT(fabsf(lp[s] - want_lp) <= 1e-5f * fmaxf(1.0f, fabsf(want_lp)));
        }
    }
    gpu_decoder_free(d);
    gpu_model_free(m);
    tfm_params_free(&p);
    free(logits);
    free(scratch);
}

int main(void)
{
    api = test_cuda_or_skip("test_gpu_decode");
    static const struct test_case cases[] = {
        {"prefill (3 chunks) and steps vs CPU forwards, llama / qwen2 / qwen3", test_parity},
        {"a batched step of 5 slots equals one slot at a time", test_batched_step},
        {"fork shares blocks, copies on write, gives every block back", test_fork},
        {"CUDA graphs and overlapped launches give the bits of launching kernel by kernel",
         test_graphs},
        {"decode steps through gemv agree with cuBLASLt", test_gemv_path},
        {"greedy decoding of the calc model: the CPU's tokens up to a near tie",
         test_greedy_calc},
        {"a weight install rounds as st_f32_to_bf16, bit for bit", test_upload},
        {"a bf16 install = a float32 install of the widened weights, biases too",
         test_upload_bf16},
        {"a full pool or slot: -1, nothing added", test_pool_full},
        {"GPU sampling picks sampler_sample's tokens (greedy, T, top-k, top-p)", test_sample},
        {NULL, NULL},
    };
    static const struct test_suite suites[] = {
        {"gpu decode engine", cases},
        {NULL, NULL},
    };
    return test_main(suites);
}
