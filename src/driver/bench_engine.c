/*
 * `libra bench-engine [SIZE...]` (also --bench-engine): throughput of the CPU transformer engine.
 *
 * First it measures this machine's single-precision GEMM peak (the best of several
 * 2048^3 cblas_sgemm calls through the same BLAS and threads the engine uses: OpenBLAS's
 * thread count, OPENBLAS_NUM_THREADS or one per core -- the engine runs its large
 * products on all of them; see "BLAS thread policy" in src/model/cpu/ops.c), then for
 * each model size (tiny ~1M, small ~10M, 100m ~113M parameters; byte-level
 * vocabulary) it times:
 *   - training: tfm_backward (forward + backward) on a packed batch of 4 x 256
 *     tokens, best of 2 after a warm-up; model FLOPs = 3 x forward FLOPs (the usual
 *     MFU convention: any recompute would not count as useful work -- the engine
 *     does none, it keeps every layer's activations);
 *   - prefill: 256-token contexts into 4 decode slots (best of 3);
 *   - decode: 32 one-token steps at batch 1, 8 and 64 after a 64-token prompt (best of
 *     3, each from the prompt again);
 * and prints tokens/s, GFLOP/s and the fraction of the measured GEMM peak, plus the
 * memory the engine holds (parameters, gradients, activations, KV caches).
 * Forward FLOPs per token: 2 x (matrix parameters, lm_head included) + attention
 * 4 x L x H x D x (mean context).
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/cli.h"
#include "libra/driver.h"
#include "libra/log.h"
#include "libra/rng.h"
#include "libra/tfm.h"
#include "libra/tfm_decode.h"
#include "libra/tokenizer.h"

struct bench_size {
    const char *name;
    struct tfm_config c;
    int by_name_only; /* 1: not in a run of every size (real checkpoints' shapes) */
};

static const struct bench_size sizes[] = {
    {"tiny", {.family = TFM_QWEN3, .vocab_size = TOK_VOCAB_SIZE, .hidden_size = 128,
      .n_layers = 4, .n_heads = 4, .n_kv_heads = 2, .head_dim = 32, .intermediate_size = 384,
      .max_position_embeddings = 4096, .rms_norm_eps = 1e-6f, .rope_theta = 1e6f,
      .tie_word_embeddings = 1, .attention_bias = 0, .qk_norm = 1}, 0},
    {"small", {.family = TFM_QWEN3, .vocab_size = TOK_VOCAB_SIZE, .hidden_size = 384,
      .n_layers = 6, .n_heads = 6, .n_kv_heads = 2, .head_dim = 64, .intermediate_size = 1024,
      .max_position_embeddings = 4096, .rms_norm_eps = 1e-6f, .rope_theta = 1e6f,
      .tie_word_embeddings = 1, .attention_bias = 0, .qk_norm = 1}, 0},
    {"100m", {.family = TFM_LLAMA, .vocab_size = TOK_VOCAB_SIZE, .hidden_size = 768,
      .n_layers = 12, .n_heads = 12, .n_kv_heads = 12, .head_dim = 64, .intermediate_size = 3072,
      .max_position_embeddings = 4096, .rms_norm_eps = 1e-6f, .rope_theta = 1e4f,
      .tie_word_embeddings = 0, .attention_bias = 0, .qk_norm = 0}, 0},
    /* The shapes of real checkpoints (config.json of Qwen/Qwen3-0.6B, Qwen/Qwen3-4B,
     * meta-llama/Llama-3.1-8B; rope_scaling left out): GPU benchmarks and memory. */
    {"qwen3-0.6b", {.family = TFM_QWEN3, .vocab_size = 151936, .hidden_size = 1024,
      .n_layers = 28, .n_heads = 16, .n_kv_heads = 8, .head_dim = 128, .intermediate_size = 3072,
      .max_position_embeddings = 40960, .rms_norm_eps = 1e-6f, .rope_theta = 1e6f,
      .tie_word_embeddings = 1, .attention_bias = 0, .qk_norm = 1}, 1},
    {"qwen3-4b", {.family = TFM_QWEN3, .vocab_size = 151936, .hidden_size = 2560,
      .n_layers = 36, .n_heads = 32, .n_kv_heads = 8, .head_dim = 128, .intermediate_size = 9728,
      .max_position_embeddings = 40960, .rms_norm_eps = 1e-6f, .rope_theta = 1e6f,
      .tie_word_embeddings = 1, .attention_bias = 0, .qk_norm = 1}, 1},
    {"llama3-8b", {.family = TFM_LLAMA, .vocab_size = 128256, .hidden_size = 4096,
      .n_layers = 32, .n_heads = 32, .n_kv_heads = 8, .head_dim = 128, .intermediate_size = 14336,
      .max_position_embeddings = 131072, .rms_norm_eps = 1e-5f, .rope_theta = 5e5f,
      .tie_word_embeddings = 0, .attention_bias = 0, .qk_norm = 0}, 1},
};

const struct tfm_config *bench_model_shape(const char *name)
{
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (strcmp(sizes[i].name, name) == 0) return &sizes[i].c;
    return NULL;
}

static double gemm_peak_gflops(void)
{
    const int n = 2048;
    float *a = xmalloc((size_t)n * n * sizeof *a), *b = xmalloc((size_t)n * n * sizeof *b);
    float *c = xmalloc((size_t)n * n * sizeof *c);
    for (size_t i = 0; i < (size_t)n * n; i++) a[i] = b[i] = (float)((i % 17) - 8) * 0.01f;
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = wall_time();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double dt = wall_time() - t0;
        double gf = 2.0 * n * (double)n * n / dt / 1e9;
        if (gf > best) best = gf;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

/* Forward FLOPs of one token at mean attention context ctx. */
static double forward_flops_per_token(const struct tfm_config *c, double ctx)
{
    double C = c->hidden_size, HD = (double)c->n_heads * c->head_dim;
    double KD = (double)c->n_kv_heads * c->head_dim, F = c->intermediate_size;
    double per_layer = 2.0 * (C * HD + 2 * C * KD + HD * C + 3 * C * F);
    double attn = 4.0 * c->n_heads * c->head_dim * ctx;
    return c->n_layers * (per_layer + attn) + 2.0 * c->vocab_size * C;
}

static void random_tokens(int32_t *t, int n, uint64_t key)
{
    struct rng r;
    rng_init(&r, 1234, key, 0, 0);
    for (int i = 0; i < n; i++) t[i] = (int32_t)rng_below(&r, 256);
}

static void print_row(const char *what, double tok_s, double gflops, double peak)
{
    printf("  %-22s %12.1f tok/s %10.2f GFLOP/s %7.1f %% of peak\n", what, tok_s, gflops,
           100.0 * gflops / peak);
}

static void bench_train(const struct tfm_config *c, const struct tfm_params *p, double peak,
                        size_t *act_bytes)
{
    enum { S = 4, LEN = 256, T = S * LEN };
    int seq_len[S] = {LEN, LEN, LEN, LEN};
    int32_t *tok = xmalloc(T * sizeof *tok), *tgt = xmalloc(T * sizeof *tgt);
    random_tokens(tok, T, 1);
    for (int i = 0; i < T; i++) tgt[i] = (i + 1) % LEN ? tok[i + 1] : -1;
    struct tfm_batch b = {S, seq_len, tok, tgt, NULL, 1.0f, NULL};
    struct tfm_state *s = tfm_state_create(c, T);
    struct tfm_params g;
    tfm_params_alloc(&g, c);
    tfm_backward(c, p, s, &b, &g); /* warm-up */
    double best = INFINITY;
    for (int rep = 0; rep < 2; rep++) {
        memset(g.mem, 0, g.n * sizeof *g.mem);
        double t0 = wall_time();
        tfm_backward(c, p, s, &b, &g);
        double dt = wall_time() - t0;
        if (dt < best) best = dt;
    }
    double flops = 3.0 * forward_flops_per_token(c, (LEN + 1) / 2.0) * T;
    print_row("training (4 x 256)", T / best, flops / best / 1e9, peak);
    *act_bytes = tfm_state_bytes(s);
    tfm_params_free(&g);
    tfm_state_free(s);
    free(tok);
    free(tgt);
}

static void bench_decode(const struct tfm_config *c, const struct tfm_params *p, double peak,
                         size_t *kv_bytes)
{
    enum { SLOTS = 64, PROMPT = 64, STEPS = 32, PREFILL = 256, REPS = 3 };
    struct tfm_decoder *d = tfm_decoder_create(c, p, SLOTS, PREFILL + STEPS + 8, 64);
    int32_t *tok = xmalloc(PREFILL * sizeof *tok);
    float *logits = xmalloc((size_t)SLOTS * c->vocab_size * sizeof *logits);
    random_tokens(tok, PREFILL, 2);
    /* every repetition redoes the same work from the same cache lengths; best of REPS */
    double best = INFINITY;
    for (int rep = 0; rep < REPS; rep++) {
        double t0 = wall_time();
        for (int s = 0; s < 4; s++) {
            tfm_decoder_truncate(d, s, 0);
            tfm_decoder_prefill(d, s, tok, PREFILL, logits);
        }
        double dt = wall_time() - t0;
        if (dt < best) best = dt;
    }
    print_row("prefill (4 x 256)", 4.0 * PREFILL / best,
              forward_flops_per_token(c, (PREFILL + 1) / 2.0) * 4 * PREFILL / best / 1e9, peak);
    static const int batches[] = {1, 8, 64};
    for (int k = 0; k < 3; k++) {
        int n = batches[k];
        int slots[SLOTS];
        int32_t next[SLOTS];
        for (int s = 0; s < n; s++) {
            tfm_decoder_truncate(d, s, 0);
            tfm_decoder_prefill(d, s, tok, PROMPT, NULL);
            slots[s] = s;
            next[s] = tok[s % PROMPT];
        }
        best = INFINITY;
        for (int rep = 0; rep < REPS; rep++) {
            for (int s = 0; s < n; s++) tfm_decoder_truncate(d, s, PROMPT); /* keep the prompt */
            double t0 = wall_time();
            for (int step = 0; step < STEPS; step++) tfm_decoder_step(d, slots, next, n, logits);
            double dt = wall_time() - t0;
            if (dt < best) best = dt;
        }
        char what[32];
        snprintf(what, sizeof what, "decode batch %d", n);
        double ctx = PROMPT + STEPS / 2.0;
        print_row(what, (double)n * STEPS / best,
                  forward_flops_per_token(c, ctx) * n * STEPS / best / 1e9, peak);
    }
    *kv_bytes = tfm_decoder_bytes(d);
    free(tok);
    free(logits);
    tfm_decoder_free(d);
}

static const struct cli_cmd bench_engine_cmd = {
    "libra bench-engine", "libra bench-engine [SIZE ...]",
    "Throughput of the CPU transformer engine (training, prefill, decode) against this\n"
    "machine's measured SGEMM peak. SIZE: tiny, small, 100m (default: the three), or a\n"
    "real checkpoint's shape: qwen3-0.6b, qwen3-4b, llama3-8b.\n",
    NULL, NULL, 0, -1, 0};

int cmd_bench_engine(int argc, char **argv)
{
    struct cli cli;
    if (cli_operands(&cli, &bench_engine_cmd, argc, argv) == CLI_EXIT) return cli.rc;
    for (int a = 0; a < cli.nargs; a++)
        if (!bench_model_shape(cli.args[a]))
            return cli_error(&cli, "no model size '%s' (tiny, small, 100m, qwen3-0.6b, qwen3-4b, "
                                   "llama3-8b)", cli.args[a]);
    double peak = gemm_peak_gflops();
    printf("libra bench-engine: sgemm peak %.1f GFLOP/s (2048^3, best of 5, %d BLAS threads)\n",
           peak, openblas_get_num_threads());
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int wanted = cli.nargs == 0 && !sizes[i].by_name_only;
        for (int a = 0; a < cli.nargs; a++) wanted |= strcmp(cli.args[a], sizes[i].name) == 0;
        if (!wanted) continue;
        const struct tfm_config *c = &sizes[i].c;
        struct tfm_params p;
        tfm_params_alloc(&p, c);
        tfm_params_init_random(&p, c, 1, 0.02f);
        printf("%s: %.2fM parameters (C %d, L %d, H %d, K %d, D %d, F %d, V %d)\n", sizes[i].name,
               (double)tfm_param_count(c) / 1e6, c->hidden_size, c->n_layers, c->n_heads,
               c->n_kv_heads, c->head_dim, c->intermediate_size, c->vocab_size);
        size_t act = 0, kv = 0;
        bench_train(c, &p, peak, &act);
        bench_decode(c, &p, peak, &kv);
        double param_mb = 4.0 * tfm_param_count(c) / 1e6;
        printf("  memory: parameters %.1f MB, gradients %.1f MB, AdamW %.1f MB, activations "
               "%.1f MB, decoder (64 slots) %.1f MB\n",
               param_mb, param_mb, 2 * param_mb, act / 1e6, kv / 1e6);
        tfm_params_free(&p);
    }
    return 0;
}
