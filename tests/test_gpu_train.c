/*
 * The training path on the GPU (include/libra/gpu_train.h) against the CPU's
 * (tfm_forward, tfm_backward, adamw_step) on the same bf16-rounded weights, for the
 * three model families, on a packed batch of two sequences with weighted and unscored
 * tokens, with attention on the tensor cores (the default) and on the float32 kernels:
 *   log-probs      within 0.2 nats of the CPU's, token by token;
 *   the objective  J within 1e-2 relative;
 *   gradients      cosine similarity >= 0.999 with the CPU's over the whole block, and
 *                  the largest difference within 0.1 of the largest gradient.
 * The matrix products take bf16 activations and output gradients, the tensor-core
 * attention bf16 probabilities too; measured on an H100: log-probs 3.5e-2 to 8.2e-2
 * nats apart (the logits' bf16 differences, as in test_gpu_decode), J 1.3e-4 to
 * 8.1e-4, cosine 0.99942 to 0.99996, largest gradient difference 8.7e-3 to 4.9e-2
 * (docs/cuda.md; the largest, qwen2 with tensor-core attention, is why that bound is
 * 0.1). A wrong term of the backward gives a cosine far from 1;
 *   training       20 AdamW steps on one batch (the objective falls from about 6.7 to
 *                  nearly 0 on the CPU): the GPU's falls too, within 5 % of the starting
 *                  objective of the CPU's at every step;
 *   the trainer    a CPU trainer (include/libra/trainer.h) running on the GPU engine:
 *                  a GRPO step, each side's behaviour log-probs its own engine's:
 *                  the same loss, gradients and updates to the bf16 effect (cosine
 *                  >= 0.999; the largest update difference within 0.1, measured
 *                  4.7e-2 with tensor-core attention, 1.9e-2 with float32);
 *   AdamW          on the GPU engine against the host's, and a join of its state
 *                  (test_engine_step);
 *   recomputation  the backward recomputing each layer's internals gives what keeping
 *                  them gives (test_recompute);
 *   the entropy    J and the gradient with entropy weights against the CPU's, and the
 *                  term's own part (with minus without): J and the part of J within
 *                  1e-2 relative, gradient cosine >= 0.998 (measured on the host
 *                  module 0.99884 to 0.99993: the entropy's gradient reaches every
 *                  logit, so the bf16 operands' rounding weighs more), the term's part
 *                  >= 0.99 (measured 0.9979 to 0.9996; -1 if its sign were wrong)
 *                  (test_entropy).
 * Without the CUDA module or a GPU it says which and runs on the host module
 * (include/libra/cuda_host.h): the engine's training chain, tested.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/adamw.h"
#include "libra/gpu_train.h"
#include "libra/hash.h"
#include "libra/safetensors.h"
#include "libra/trainer.h"
#include "testutil.h"

static const struct cuda_api *api;

enum { SEQ0 = 13, SEQ1 = 20, T = SEQ0 + SEQ1 };

static struct tfm_config model_of(int family)
{
    struct tfm_config c = {.family = family, .vocab_size = 211, .hidden_size = 96,
                           .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 24,
                           .intermediate_size = 160, .max_position_embeddings = 256,
                           .rms_norm_eps = 1e-6f, .rope_theta = 10000.0f,
                           .tie_word_embeddings = family != TFM_LLAMA,
                           .attention_bias = family == TFM_QWEN2, .qk_norm = family == TFM_QWEN3};
    return c;
}

struct batch_data {
    int seq_len[2];
    int32_t tokens[T], targets[T];
    float weights[T];
    struct tfm_batch b;
};

/* Two sequences; targets the next token, the last of each unscored, some weights
 * negative (GRPO advantages). */
static void batch_of(struct batch_data *d, int V)
{
    d->seq_len[0] = SEQ0;
    d->seq_len[1] = SEQ1;
    for (int t = 0; t < T; t++) d->tokens[t] = (int32_t)((t * 53 + 7) % V);
    for (int t = 0; t < T; t++) {
        int last = t == SEQ0 - 1 || t == T - 1;
        d->targets[t] = last ? -1 : d->tokens[t + 1];
        d->weights[t] = (t % 3 == 0 ? -0.5f : 1.0f) / (float)T;
    }
    d->b = (struct tfm_batch){2, d->seq_len, d->tokens, d->targets, d->weights, 1.0f, NULL};
}

static const struct adamw_config adam = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.01f, 1.0f,
                                         LR_CONSTANT, 0, 100, 0.1f};

static struct gpu_trainer *trainer(const struct tfm_config *c, const struct tfm_params *p,
                                   int max_tokens)
{
    char err[512];
    struct gpu_trainer *t = gpu_trainer_create(api, c, p, max_tokens, &adam, err, sizeof err);
    if (!t) fprintf(stderr, "\n%s\n", err);
    CU_ASSERT_FATAL(t != NULL);
    return t;
}

static void test_gradients(void)
{
    const char *names[] = {"llama", "qwen2", "qwen3"};
    for (int f = TFM_LLAMA; f <= TFM_QWEN3; f++) {
        struct tfm_config c = model_of(f);
        struct tfm_params p, g_cpu, g_gpu;
        test_bf16_params(&p, &c, 70 + (uint64_t)f);
        tfm_params_alloc(&g_cpu, &c);
        tfm_params_alloc(&g_gpu, &c);
        struct batch_data d;
        batch_of(&d, c.vocab_size);
        struct tfm_state *s = tfm_state_create(&c, T);
        float lp_cpu[T], lp_gpu[T];
        tfm_forward(&c, &p, s, &d.b, lp_cpu, NULL, NULL);
        double J_cpu = tfm_backward(&c, &p, s, &d.b, &g_cpu);
        for (int flash = 1; flash >= 0; flash--) { /* tensor-core and float32 attention */
            struct gpu_trainer *t = trainer(&c, &p, T);
            CU_ASSERT_EQUAL(gpu_trainer_set_flash(t, flash), 1); /* on by default (D 24) */
            gpu_trainer_forward(t, &d.b, lp_gpu, NULL);
            double J_gpu = gpu_trainer_backward(t, &d.b);
            gpu_trainer_grads(t, &g_gpu);
            double lp_err = 0;
            for (int i = 0; i < T; i++) lp_err = test_worse(lp_err, fabs((double)lp_gpu[i] - lp_cpu[i]));
            double cosine = test_cosine(g_gpu.mem, g_cpu.mem, p.n);
            double g_err = test_rel_err(g_gpu.mem, g_cpu.mem, p.n);
            double J_err = fabs(J_gpu - J_cpu) / fabs(J_cpu);
            printf("[%s, %s attention: log-probs %.1e, J %.1e, gradient cosine %.6f, largest "
                   "difference %.1e] ", names[f], flash ? "tensor-core" : "float32", lp_err,
                   J_err, cosine, g_err);
            CU_ASSERT(lp_err <= 0.2);
            CU_ASSERT(J_err <= 1e-2);
            CU_ASSERT(cosine >= 0.999);
            CU_ASSERT(g_err <= 0.1);
            /* zero_grad empties the block */
            gpu_trainer_zero_grad(t);
            gpu_trainer_grads(t, &g_gpu);
            double sq = 0;
            for (size_t i = 0; i < p.n; i++) sq += (double)g_gpu.mem[i] * g_gpu.mem[i];
            CU_ASSERT(sq == 0.0);
            gpu_trainer_free(t);
        }
        tfm_state_free(s);
        tfm_params_free(&p);
        tfm_params_free(&g_cpu);
        tfm_params_free(&g_gpu);
    }
}

/* The entropy term (tfm_batch.entropy_weights): J and the gradient with it against the
 * CPU's, and the term's own part of the gradient (with minus without) against the
 * CPU's part, so a missing or wrong term fails even where it is small beside the rest. */
static void test_entropy(void)
{
    for (int f = TFM_LLAMA; f <= TFM_QWEN3; f++) {
        struct tfm_config c = model_of(f);
        struct tfm_params p, gc0, gc1, gg0, gg1;
        test_bf16_params(&p, &c, 80 + (uint64_t)f);
        struct tfm_params *gs[] = {&gc0, &gc1, &gg0, &gg1};
        for (int i = 0; i < 4; i++) tfm_params_alloc(gs[i], &c);
        struct batch_data d;
        batch_of(&d, c.vocab_size);
        float ew[T];
        for (int t = 0; t < T; t++) ew[t] = t % 4 == 1 ? 0.0f : (t % 2 ? 0.8f : 0.3f) / (float)T;
        struct tfm_batch be = d.b;
        be.entropy_weights = ew;
        struct tfm_batch b0 = be;
        b0.entropy_weights = NULL;
        struct tfm_state *s = tfm_state_create(&c, T);
        double Jc0 = tfm_backward(&c, &p, s, &b0, &gc0);
        double Jc1 = tfm_backward(&c, &p, s, &be, &gc1);
        struct gpu_trainer *t = trainer(&c, &p, T);
        double Jg0 = gpu_trainer_backward(t, &b0);
        gpu_trainer_grads(t, &gg0);
        gpu_trainer_zero_grad(t);
        double Jg1 = gpu_trainer_backward(t, &be);
        gpu_trainer_grads(t, &gg1);
        for (size_t i = 0; i < p.n; i++) { /* the entropy term's part */
            gc0.mem[i] = gc1.mem[i] - gc0.mem[i];
            gg0.mem[i] = gg1.mem[i] - gg0.mem[i];
        }
        double cos = test_cosine(gg1.mem, gc1.mem, p.n);
        double cos_term = test_cosine(gg0.mem, gc0.mem, p.n);
        double J_err = fabs(Jg1 - Jc1) / fabs(Jc1);
        double term_err = fabs((Jg1 - Jg0) - (Jc1 - Jc0)) / fabs(Jc1 - Jc0);
        printf("[%s: J %.1e, entropy part of J %.1e, gradient cosine %.6f, the entropy "
               "term's %.6f] ", c.family == TFM_LLAMA ? "llama" : c.family == TFM_QWEN2 ? "qwen2"
               : "qwen3", J_err, term_err, cos, cos_term);
        CU_ASSERT(Jc1 != Jc0);
        CU_ASSERT(J_err <= 1e-2);
        CU_ASSERT(term_err <= 1e-2);
        CU_ASSERT(cos >= 0.998);
        CU_ASSERT(cos_term >= 0.99);
        gpu_trainer_free(t);
        tfm_state_free(s);
        tfm_params_free(&p);
        for (int i = 0; i < 4; i++) tfm_params_free(gs[i]);
    }
}

static void test_training(void)
{
    enum { STEPS = 20 };
    struct tfm_config c = model_of(TFM_QWEN3);
    struct tfm_params p, g, back;
    test_bf16_params(&p, &c, 91);
    tfm_params_alloc(&g, &c);
    tfm_params_alloc(&back, &c);
    struct batch_data d;
    batch_of(&d, c.vocab_size);
    for (int t = 0; t < T; t++) d.weights[t] = 1.0f / T; /* plain likelihood: it must fall */
    struct gpu_trainer *t = trainer(&c, &p, T);
    gpu_trainer_params(t, &back);
    CU_ASSERT(memcmp(back.mem, p.mem, p.n * sizeof(float)) == 0);
    struct tfm_state *s = tfm_state_create(&c, T);
    struct adamw o;
    adamw_init(&o, &adam, p.n);
    double J0_cpu = 0, J0_gpu = 0, worst = 0, J_cpu = 0, J_gpu = 0;
    for (int k = 0; k < STEPS; k++) {
        memset(g.mem, 0, g.n * sizeof(float));
        J_cpu = tfm_backward(&c, &p, s, &d.b, &g);
        adamw_step(&o, p.mem, g.mem);
        gpu_trainer_zero_grad(t);
        J_gpu = gpu_trainer_backward(t, &d.b);
        gpu_trainer_step(t);
        if (k == 0) J0_cpu = J_cpu, J0_gpu = J_gpu;
        worst = test_worse(worst, fabs(J_gpu - J_cpu) / J0_cpu);
    }
    printf("[J %.4f -> %.4f on the CPU, %.4f -> %.4f on the GPU; at most %.1e of J0 apart] ",
           J0_cpu, J_cpu, J0_gpu, J_gpu, worst);
    CU_ASSERT(J_cpu < 0.5 * J0_cpu);
    CU_ASSERT(J_gpu < 0.5 * J0_gpu);
    CU_ASSERT(worst <= 0.05);
    adamw_free(&o);
    tfm_state_free(s);
    gpu_trainer_free(t);
    tfm_params_free(&p);
    tfm_params_free(&g);
    tfm_params_free(&back);
}

/* Behaviour log-probs of the packed ids (sequences at[] / len[]) under the engine's
 * own forward, the batch packed as the trainer packs it (inputs ids[0..n-2], targets
 * ids[1..n-1] of each sequence: the same shapes, so the same bits): position at + k + 1
 * gets the log-prob of ids[at + k + 1]; the first of each sequence 0. gpu NULL: the
 * CPU forward. */
static void behaviour_of(const struct tfm_config *c, const struct tfm_params *p,
                         struct gpu_trainer *gpu, const int32_t *ids, const int *len,
                         int n_seq, float *behav)
{
    int T = 0, n_in[8];
    CU_ASSERT_FATAL(n_seq <= 8);
    for (int q = 0; q < n_seq; q++) T += n_in[q] = len[q] - 1;
    int32_t *in = malloc((size_t)T * sizeof *in), *tgt = malloc((size_t)T * sizeof *tgt);
    float *lp = malloc((size_t)T * sizeof *lp);
    for (int q = 0, at = 0, o = 0; q < n_seq; at += len[q], q++)
        for (int k = 0; k < n_in[q]; k++, o++) in[o] = ids[at + k], tgt[o] = ids[at + k + 1];
    struct tfm_batch b = {n_seq, n_in, in, tgt, NULL, 1.0f, NULL};
    if (gpu) {
        gpu_trainer_forward(gpu, &b, lp, NULL);
    } else {
        struct tfm_state *st = tfm_state_create(c, T);
        tfm_forward(c, p, st, &b, lp, NULL, NULL);
        tfm_state_free(st);
    }
    for (int q = 0, at = 0, o = 0; q < n_seq; at += len[q], q++) {
        behav[at] = 0.0f;
        for (int k = 0; k < n_in[q]; k++, o++) behav[at + k + 1] = lp[o];
    }
    free(in), free(tgt), free(lp);
}

/* A CPU trainer with the GPU as its train_engine against a plain CPU trainer, one
 * GRPO step. Each trainer's behaviour log-probs are its own engine's, so every
 * importance ratio is exactly 1 on both and the GRPO weights are the same: then the
 * losses agree to rounding, and a log-prob fed back at the wrong position would move
 * them; the gradients agree to the bf16 effect (test_gradients' cosine); and the
 * updates -- AdamW with eps 1, which makes the first step proportional to the gradient
 * instead of its sign -- agree as the gradients do. (With behaviour log-probs from one
 * engine only, the other's ratios are off 1 by its log-prob differences, up to 0.1
 * nats: an H100 measured a loss 15 % apart and a cosine of 0.9985 that way.) */
/* After a step on the GPU engine the weights stay there: the host copy is still the
 * start's until trainer_fetch_params; the fingerprint computed on the GPU, the bf16 and
 * float32 slices read from it (trainer_read_params, as a weight sync's sender does)
 * agree with the weights fetched. */
static void check_weights_on_engine(struct trainer *t, const struct tfm_params *start)
{
    size_t n = t->p.n, off = n / 3, len = n / 4;
    CU_ASSERT(t->params_on_engine);
    CU_ASSERT(memcmp(t->p.mem, start->mem, n * sizeof(float)) == 0);
    uint64_t h = trainer_params_hash(t);
    float *f32 = malloc(len * sizeof *f32);
    uint16_t *b16 = malloc(len * sizeof *b16);
    trainer_read_params(t, off, len, f32, b16);
    trainer_fetch_params(t);
    CU_ASSERT(!t->params_on_engine);
    CU_ASSERT(memcmp(t->p.mem, start->mem, n * sizeof(float)) != 0);
    CU_ASSERT_EQUAL(h, weights_sum_hash(t->p.mem, n));
    CU_ASSERT_EQUAL(h, trainer_params_hash(t)); /* now on the host */
    CU_ASSERT(memcmp(f32, t->p.mem + off, len * sizeof *f32) == 0);
    int bf16_exact = 1;
    for (size_t i = 0; i < len; i++) bf16_exact &= b16[i] == st_f32_to_bf16(t->p.mem[off + i]);
    CU_ASSERT(bf16_exact);
    free(f32);
    free(b16);
}

static void test_trainer_engine(void)
{
    enum { N0 = 17, N1 = 26 };
    struct tfm_config c = model_of(TFM_QWEN2);
    struct tfm_params p0, p1, start;
    test_bf16_params(&p0, &c, 93);
    tfm_params_alloc(&p1, &c);
    tfm_params_alloc(&start, &c);
    memcpy(p1.mem, p0.mem, p0.n * sizeof(float));
    memcpy(start.mem, p0.mem, p0.n * sizeof(float));
    int32_t ids[N0 + N1];
    uint8_t mask[N0 + N1];
    float behav_c[N0 + N1], behav_g[N0 + N1];
    for (int i = 0; i < N0 + N1; i++) {
        ids[i] = (int32_t)((i * 31 + 3) % c.vocab_size);
        mask[i] = (i % N0) > 4; /* the first tokens of each are the prompt */
    }
    static const struct adamw_config linear_adam = {1e-2f, 0.9f, 0.95f, 1.0f, 0.0f, 1.0f,
                                                    LR_CONSTANT, 0, 100, 0.1f};
    struct gpu_trainer *t = trainer(&c, &p1, 64);
    const int len[2] = {N0, N1};
    behaviour_of(&c, &p0, NULL, ids, len, 2, behav_c);
    behaviour_of(&c, &p1, t, ids, len, 2, behav_g);
    struct train_seq sc_seqs[2] = {{N0, ids, mask, behav_c, 1.0},
                                   {N1, ids + N0, mask + N0, behav_c + N0, -0.7}};
    struct train_seq sg_seqs[2] = {{N0, ids, mask, behav_g, 1.0},
                                   {N1, ids + N0, mask + N0, behav_g + N0, -0.7}};
    struct grpo_config gc = {0.2, 0.28, 2.0, 0.0, 0.0, 1e-6, 0.9};
    struct trainer cpu, gpu;
    trainer_init(&cpu, &c, &p0, &linear_adam, NULL, 0, &gc, 64);
    trainer_init(&gpu, &c, &p1, &linear_adam, NULL, 0, &gc, 64);
    struct train_engine eng = gpu_trainer_engine(t);
    trainer_set_engine(&gpu, &eng);
    struct grpo_stats sc = {0}, sg = {0};
    trainer_grads(&cpu, sc_seqs, 2, N0 + N1, &sc);
    trainer_grads(&gpu, sg_seqs, 2, N0 + N1, &sg);
    CU_ASSERT(sc.tokens == sg.tokens);
    CU_ASSERT(sg.clipped == 0.0 && sc.clipped == 0.0);
    double g_cos = test_cosine(cpu.g.mem, trainer_host_grads(&gpu), cpu.g.n);
    trainer_apply(&cpu);
    trainer_apply(&gpu);
    check_weights_on_engine(&gpu, &start);
    for (size_t i = 0; i < start.n; i++) { /* the updates */
        cpu.p.mem[i] -= start.mem[i];
        gpu.p.mem[i] -= start.mem[i];
    }
    double u_cos = test_cosine(cpu.p.mem, gpu.p.mem, start.n);
    double u_err = test_rel_err(gpu.p.mem, cpu.p.mem, start.n);
    printf("[a GRPO step: loss %.6f vs %.6f, gradient cosine %.6f, update cosine %.6f, largest "
           "update difference %.1e] ", sg.loss, sc.loss, g_cos, u_cos, u_err);
    CU_ASSERT(fabs(sc.loss - sg.loss) <= 1e-4 * fabs(sc.loss) + 1e-6);
    CU_ASSERT(g_cos >= 0.999);
    CU_ASSERT(u_cos >= 0.999);
    CU_ASSERT(u_err <= 0.1);
    trainer_free(&cpu);
    trainer_free(&gpu);
    gpu_trainer_free(t);
    tfm_params_free(&start);
}

/* Recomputation (LIBRA_GPU_RECOMPUTE=1): the same kernels on the same inputs, so the
 * same log-probs, J and gradients as keeping every layer's internals (bounds 1e-6,
 * measured: the same bits on the host module), for each family and attention, with
 * less memory held. */
static void test_recompute(void)
{
    for (int f = TFM_LLAMA; f <= TFM_QWEN3; f++) {
        struct tfm_config c = model_of(f);
        c.n_layers = 3;
        struct tfm_params p, g0, g1;
        test_bf16_params(&p, &c, 90 + (uint64_t)f);
        tfm_params_alloc(&g0, &c);
        tfm_params_alloc(&g1, &c);
        struct batch_data d;
        batch_of(&d, c.vocab_size);
        for (int flash = 1; flash >= 0; flash--) {
            setenv("LIBRA_GPU_RECOMPUTE", "0", 1);
            struct gpu_trainer *keep = trainer(&c, &p, T);
            setenv("LIBRA_GPU_RECOMPUTE", "1", 1);
            struct gpu_trainer *rec = trainer(&c, &p, T);
            unsetenv("LIBRA_GPU_RECOMPUTE");
            CU_ASSERT(!gpu_trainer_recomputes(keep) && gpu_trainer_recomputes(rec));
            CU_ASSERT(gpu_trainer_bytes(rec) < gpu_trainer_bytes(keep));
            gpu_trainer_set_flash(keep, flash);
            gpu_trainer_set_flash(rec, flash);
            float lp0[T], lp1[T];
            gpu_trainer_forward(keep, &d.b, lp0, NULL);
            gpu_trainer_forward(rec, &d.b, lp1, NULL);
            double J0 = gpu_trainer_backward(keep, &d.b), J1 = gpu_trainer_backward(rec, &d.b);
            gpu_trainer_grads(keep, &g0);
            gpu_trainer_grads(rec, &g1);
            double lp_err = 0;
            for (int i = 0; i < T; i++) lp_err = test_worse(lp_err, fabs((double)lp1[i] - lp0[i]));
            double g_err = test_rel_err(g1.mem, g0.mem, p.n);
            int same = memcmp(g0.mem, g1.mem, p.n * sizeof(float)) == 0 && J0 == J1;
            printf("[family %d, %s: log-probs %.1e, J %.1e, gradients %.1e%s] ", f,
                   flash ? "tensor-core" : "float32", lp_err, fabs(J1 - J0), g_err,
                   same ? ", the same bits" : "");
            CU_ASSERT(lp_err <= 1e-6);
            CU_ASSERT(fabs(J1 - J0) <= 1e-6 * fabs(J0));
            CU_ASSERT(g_err <= 1e-6);
            gpu_trainer_free(keep);
            gpu_trainer_free(rec);
        }
        tfm_params_free(&p);
        tfm_params_free(&g0);
        tfm_params_free(&g1);
    }
}

/* Two trainers on GPU engines of the same weights, GRPO steps on the same sequences:
 * one takes AdamW on the host (the engine's step cleared), the other on the GPU
 * (gpu_trainer_apply, the moments kept there). The first step's gradients are the same,
 * so its updates agree to float32 rounding: parameters and fetched moments within 1e-5
 * of the largest, the updates' cosine >= 0.99999. Later steps start from weights a
 * rounding apart, whose bf16 copies may differ in a last bit, so their gradients differ
 * a little and AdamW magnifies that where v is small (an H100 measured parameters 9e-3
 * apart after 3 steps): there only the cosine of the whole updates is held, >= 0.9999
 * (a wrong update would move it far from 1). Then a third trainer takes the GPU
 * trainer's state as a joining rank does (weights, fetched moments, step count;
 * trainer_params_changed) and both step once more: the same bits (a moment left
 * behind on the GPU would change them). */
static void test_engine_step(void)
{
    enum { N0 = 15, N1 = 22, STEPS = 3 };
    struct tfm_config c = model_of(TFM_QWEN3);
    struct tfm_params p[3], start;
    test_bf16_params(&p[0], &c, 41);
    tfm_params_alloc(&start, &c);
    memcpy(start.mem, p[0].mem, p[0].n * sizeof(float));
    for (int k = 1; k < 3; k++) {
        tfm_params_alloc(&p[k], &c);
        memcpy(p[k].mem, p[0].mem, p[0].n * sizeof(float));
    }
    int32_t ids[N0 + N1];
    uint8_t mask[N0 + N1];
    float behav[N0 + N1];
    for (int i = 0; i < N0 + N1; i++) {
        ids[i] = (int32_t)((i * 37 + 5) % c.vocab_size);
        mask[i] = (i % N0) > 3;
    }
    struct gpu_trainer *g[3];
    struct train_engine eng[3];
    struct trainer tr[3];
    struct grpo_config gc = {0.2, 0.28, 2.0, 0.0, 0.0, 1e-6, 0.9};
    for (int k = 0; k < 3; k++) {
        g[k] = trainer(&c, &p[k], 64);
        eng[k] = gpu_trainer_engine(g[k]);
        trainer_init(&tr[k], &c, &p[k], &adam, NULL, 0, &gc, 64);
    }
    eng[0].step = NULL; /* trainer 0: AdamW on the host */
    eng[0].get_moments = NULL;
    eng[0].set_moments = NULL;
    eng[0].grad_sq = NULL;
    for (int k = 0; k < 2; k++) trainer_set_engine(&tr[k], &eng[k]);
    const int len[2] = {N0, N1};
    behaviour_of(&c, &start, g[0], ids, len, 2, behav);
    struct train_seq seqs[2] = {{N0, ids, mask, behav, 1.0}, {N1, ids + N0, mask + N0, behav + N0, -0.6}};
    float *u[2];
    for (int k = 0; k < 2; k++) u[k] = malloc(start.n * sizeof *u[k]);
    for (int s = 0; s < STEPS; s++) {
        for (int k = 0; k < 2; k++) {
            struct grpo_stats st = {0};
            trainer_grads(&tr[k], seqs, 2, N0 + N1, &st);
            trainer_apply(&tr[k]);
        }
        CU_ASSERT(!tr[0].params_on_engine && tr[1].params_on_engine);
        if (s != 0 && s != STEPS - 1) continue;
        trainer_fetch_params(&tr[1]);
        double p_err = test_rel_err(tr[1].p.mem, tr[0].p.mem, start.n);
        trainer_fetch_moments(&tr[1]);
        double m_err = test_rel_err(tr[1].opt.m, tr[0].opt.m, start.n);
        double v_err = test_rel_err(tr[1].opt.v, tr[0].opt.v, start.n);
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < start.n; i++) u[k][i] = tr[k].p.mem[i] - start.mem[i];
        double u_cos = test_cosine(u[0], u[1], start.n);
        printf("[%d step%s, AdamW on the GPU vs the host: parameters %.1e, moments %.1e / "
               "%.1e, update cosine %.8f] ", s + 1, s ? "s" : "", p_err, m_err, v_err, u_cos);
        if (s == 0) {
            CU_ASSERT(p_err <= 1e-5 && m_err <= 1e-5 && v_err <= 1e-5);
            CU_ASSERT(u_cos >= 0.99999);
        } else {
            CU_ASSERT(u_cos >= 0.9999);
        }
    }
    free(u[0]), free(u[1]);
    CU_ASSERT(tr[0].opt.step == STEPS && tr[1].opt.step == STEPS);
    /* the join: trainer 2 takes trainer 1's state */
    trainer_fetch_params(&tr[1]);
    memcpy(tr[2].p.mem, tr[1].p.mem, start.n * sizeof(float));
    memcpy(tr[2].opt.m, tr[1].opt.m, start.n * sizeof(float));
    memcpy(tr[2].opt.v, tr[1].opt.v, start.n * sizeof(float));
    tr[2].opt.step = tr[1].opt.step;
    trainer_set_engine(&tr[2], &eng[2]);
    for (int k = 1; k < 3; k++) {
        struct grpo_stats st = {0};
        trainer_grads(&tr[k], seqs, 2, N0 + N1, &st);
        trainer_apply(&tr[k]);
        trainer_fetch_moments(&tr[k]);
        trainer_fetch_params(&tr[k]);
    }
    CU_ASSERT(memcmp(tr[1].p.mem, tr[2].p.mem, start.n * sizeof(float)) == 0);
    CU_ASSERT(memcmp(tr[1].opt.m, tr[2].opt.m, start.n * sizeof(float)) == 0);
    CU_ASSERT(memcmp(tr[1].opt.v, tr[2].opt.v, start.n * sizeof(float)) == 0);
    for (int k = 0; k < 3; k++) {
        trainer_free(&tr[k]);
        gpu_trainer_free(g[k]);
    }
    tfm_params_free(&start); /* p[]: the trainers' */
}

int main(void)
{
    api = test_cuda_or_skip("test_gpu_train");
    static const struct test_case cases[] = {
        {"log-probs, objective and gradients vs the CPU, llama / qwen2 / qwen3", test_gradients},
        {"the entropy term: J and gradients vs the CPU, llama / qwen2 / qwen3", test_entropy},
        {"20 AdamW steps: the objective falls with the CPU's", test_training},
        {"recomputed activations: the same log-probs and gradients", test_recompute},
        {"a CPU trainer on the GPU engine: a GRPO step", test_trainer_engine},
        {"AdamW on the GPU engine: as on the host, and a join takes its state", test_engine_step},
        {NULL, NULL},
    };
    static const struct test_suite suites[] = {
        {"gpu training path", cases},
        {NULL, NULL},
    };
    return test_main(suites);
}
