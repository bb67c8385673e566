/*
 * The whole CPU transformer (tfm.c, tfm_forward.c, tfm_backward.c) on tiny configs of
 * each family: llama (untied, MHA), llama with GQA, qwen2 (q/k/v biases, GQA),
 * qwen3 (per-head q/k norm, tied embeddings, K = 1), llama with yarn rope scaling (its
 * attention factor scales cos and sin, so the rotation is no longer orthogonal).
 *
 *  - parameters: count = sum over the Hugging Face tensor table, names, carving;
 *  - forward against a plain double-precision reference written from the
 *    architecture description (independent of cpu/ops.c);
 *  - packing invariance: a sequence's log-probs and gradient do not depend on what
 *    else is packed with it; logit chunking does not change results (within 2e-6 on
 *    log-probs, 1e-5 relative on gradients: only OpenBLAS's rounding for different
 *    row counts and chunked sums differ);
 *  - gradients of J = -sum w_t logprob_t by central finite differences of J on a
 *    sample of entries of EVERY tensor, on a packed batch of 3 sequences with some
 *    targets -1 and non-uniform weights (one of them 0);
 *  - the entropy term J = -sum e_t H_t alone (all w_t = 0) and mixed with the
 *    weights, also over several logit chunks: the same finite differences, with J
 *    formed from tfm_forward's log-probs and entropies (e_t counts only where
 *    target >= 0: a large e_t on a prompt row must change nothing).
 *
 * Finite-difference tolerance: parameters are O(0.3) floats. J is summed in double,
 * but each log-prob carries float rounding from two layers, so J has ~1e-6 of noise:
 * ~1e-6 / (2h) on a difference quotient. Truncation is h^2/6 |J'''|, and J''' is large
 * through the norms of an 8-wide model (at h = 1e-2 it reached 2.5% of an embedding
 * entry's gradient). h = 3e-3 balances the two (~2e-4 noise, ~2e-4 relative
 * truncation); |fd - analytic| <= 5e-4 + 3e-3 |analytic| then holds with a margin of
 * 3x or more (the run prints the worst error / tolerance per config), while a wrong
 * term is off by O(|analytic|).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/model/rope.h"
#include "../src/model/tfm_state.h"
#include "libra/rng.h"
#include "libra/tfm.h"
#include "testutil.h"

#define FD_H 3e-3
#define FD_ATOL 5e-4
#define FD_RTOL 3e-3
#define MAX_TENSORS 256

static struct tfm_config base_config(void)
{
    return (struct tfm_config){.family = TFM_LLAMA, .vocab_size = 13, .hidden_size = 8,
                               .n_layers = 2, .n_heads = 2, .n_kv_heads = 2, .head_dim = 4,
                               .intermediate_size = 12, .max_position_embeddings = 64,
                               .rms_norm_eps = 1e-6f, .rope_theta = 10000.0f};
}

static struct tfm_config cfg_llama(void) { return base_config(); }

static struct tfm_config cfg_llama_gqa(void)
{
    struct tfm_config c = base_config();
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 2;
    return c;
}

static struct tfm_config cfg_qwen2(void)
{
    struct tfm_config c = base_config();
    c.family = TFM_QWEN2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.attention_bias = 1;
    c.rope_theta = 1000000.0f;
    return c;
}

static struct tfm_config cfg_qwen3(void)
{
    struct tfm_config c = base_config();
    c.family = TFM_QWEN3;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.head_dim = 6; /* head_dim * H != hidden_size, as in real qwen3 models */
    c.qk_norm = 1;
    c.tie_word_embeddings = 1;
    return c;
}

/* yarn with an original context of 4 positions: pair 0 keeps its frequency, pair 1 is
 * interpolated (/ 4), cos and sin scaled by 0.1 ln 4 + 1. */
static struct tfm_config cfg_yarn(void)
{
    struct tfm_config c = base_config();
    c.rope_type = TFM_ROPE_YARN;
    c.rope_factor = 4;
    c.rope_original_max_pos = 4;
    return c;
}

/* Random parameters, with norm weights and biases moved off 1 and 0 so that every
 * tensor's gradient is exercised at a generic point. */
static void init_params(struct tfm_params *p, const struct tfm_config *c, uint64_t seed)
{
    tfm_params_alloc(p, c);
    tfm_params_init_random(p, c, seed, 0.3f);
    struct rng r;
    rng_init(&r, seed, 99, 0, 0);
    for (size_t i = 0; i < p->n; i++) p->mem[i] += (float)(0.1 * rng_normal(&r));
}

/* A packed batch of 3 sequences (5, 3, 6 tokens), some targets -1, non-uniform weights. */
#define BT 14
struct batch_data {
    int seq_len[3];
    int32_t tokens[BT], targets[BT];
    float weights[BT];
    float ent_w[BT]; /* entropy weights e_t (used when a test sets b.entropy_weights) */
    struct tfm_batch b;
};

static void make_batch(struct batch_data *d, int V, float temperature, int use_weights)
{
    static const int len[3] = {5, 3, 6};
    struct rng r;
    rng_init(&r, 7, 0, 0, 0);
    memcpy(d->seq_len, len, sizeof len);
    for (int t = 0; t < BT; t++) {
        d->tokens[t] = (int32_t)rng_below(&r, (uint64_t)V);
        d->targets[t] = (int32_t)rng_below(&r, (uint64_t)V);
        d->weights[t] = (float)(0.2 + 0.15 * (t % 5));
    }
    d->targets[0] = -1; /* prompt tokens of the first sequence */
    d->targets[1] = -1;
    d->targets[6] = -1; /* last of the second sequence */
    d->weights[0] = 5.0f; /* ignored: no target */
    d->weights[9] = 0.0f; /* a target with weight 0 */
    for (int t = 0; t < BT; t++) d->ent_w[t] = (float)(0.1 + 0.12 * (t % 4));
    d->ent_w[1] = 4.0f;  /* ignored: no target */
    d->ent_w[12] = 0.0f; /* a target with no entropy weight */
    d->b = (struct tfm_batch){.n_seq = 3, .seq_len = d->seq_len, .tokens = d->tokens,
                              .targets = d->targets,
                              .weights = use_weights ? d->weights : NULL,
                              .temperature = temperature};
}

/* ---------------------------------------------------------------- reference */

/* y (n, out) = x (n, in) W^T (+ b), double. */
static void ref_linear(double *y, const double *x, const float *w, const float *b, int n,
                       int in, int out)
{
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) {
            double s = b ? b[o] : 0;
            for (int j = 0; j < in; j++) s += x[i * in + j] * w[(size_t)o * in + j];
            y[i * out + o] = s;
        }
}

static void ref_rmsnorm(double *y, const double *x, const float *w, int n, int C, double eps)
{
    for (int i = 0; i < n; i++) {
        double ss = 0;
        for (int j = 0; j < C; j++) ss += x[i * C + j] * x[i * C + j];
        double r = 1 / sqrt(ss / C + eps);
        for (int j = 0; j < C; j++) y[i * C + j] = x[i * C + j] * r * w[j];
    }
}

/* HF apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, cos/sin = a cat(f, f),
 * f = position * w_i; w and a from rope_inv_freq (the frequencies themselves are
 * checked against Hugging Face's in test_rope.c). */
static void ref_rope(double *x, int n, int nh, const struct tfm_config *c)
{
    int D = c->head_dim;
    double tmp[64];
    float w[32];
    double a = rope_inv_freq(w, c);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < nh; h++) {
            double *xh = x + ((size_t)t * nh + h) * D;
            for (int i = 0; i < D; i++) {
                double f = t * (double)w[i % (D / 2)];
                double rot = i < D / 2 ? -xh[i + D / 2] : xh[i - D / 2];
                tmp[i] = a * (xh[i] * cos(f) + rot * sin(f));
            }
            memcpy(xh, tmp, (size_t)D * sizeof(double));
        }
}

/* Log-probs of one sequence (n tokens) at temperature, straight from the description. */
static void ref_forward(const struct tfm_config *c, const struct tfm_params *p,
                        const int32_t *tok, const int32_t *tgt, int n, double temp, double *lp)
{
    int C = c->hidden_size, H = c->n_heads, K = c->n_kv_heads, D = c->head_dim;
    int F = c->intermediate_size, V = c->vocab_size, HD = H * D, KD = K * D;
    double *x = calloc((size_t)n * C, 8), *h = calloc((size_t)n * C, 8);
    double *q = calloc((size_t)n * HD, 8), *k = calloc((size_t)n * KD, 8);
    double *v = calloc((size_t)n * KD, 8), *att = calloc((size_t)n * HD, 8);
    double *o = calloc((size_t)n * C, 8), *g = calloc((size_t)n * F, 8);
    double *u = calloc((size_t)n * F, 8), *lg = calloc((size_t)V, 8);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < C; j++) x[t * C + j] = p->embed[(size_t)tok[t] * C + j];
    for (int l = 0; l < c->n_layers; l++) {
        struct tfm_layer w = tfm_layer_view(c, p, l);
        ref_rmsnorm(h, x, w.ln1, n, C, c->rms_norm_eps);
        ref_linear(q, h, w.wq, w.bq, n, C, HD);
        ref_linear(k, h, w.wk, w.bk, n, C, KD);
        ref_linear(v, h, w.wv, w.bv, n, C, KD);
        if (c->qk_norm) {
            ref_rmsnorm(q, q, w.q_norm, n * H, D, c->rms_norm_eps);
            ref_rmsnorm(k, k, w.k_norm, n * K, D, c->rms_norm_eps);
        }
        ref_rope(q, n, H, c);
        ref_rope(k, n, K, c);
        for (int t = 0; t < n; t++)
            for (int hh = 0; hh < H; hh++) {
                int kh = hh / (H / K);
                double s[BT], mx = -1e300, sum = 0;
                for (int j = 0; j <= t; j++) {
                    s[j] = 0;
                    for (int d = 0; d < D; d++)
                        s[j] += q[t * HD + hh * D + d] * k[j * KD + kh * D + d];
                    s[j] /= sqrt((double)D);
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j <= t; j++) sum += (s[j] = exp(s[j] - mx));
                for (int d = 0; d < D; d++) {
                    double a = 0;
                    for (int j = 0; j <= t; j++) a += s[j] / sum * v[j * KD + kh * D + d];
                    att[t * HD + hh * D + d] = a;
                }
            }
        ref_linear(o, att, w.wo, NULL, n, HD, C);
        for (int i = 0; i < n * C; i++) x[i] += o[i];
        ref_rmsnorm(h, x, w.ln2, n, C, c->rms_norm_eps);
        ref_linear(g, h, w.w_gate, NULL, n, C, F);
        ref_linear(u, h, w.w_up, NULL, n, C, F);
        for (int i = 0; i < n * F; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
        ref_linear(o, g, w.w_down, NULL, n, F, C);
        for (int i = 0; i < n * C; i++) x[i] += o[i];
    }
    ref_rmsnorm(h, x, p->ln_f, n, C, c->rms_norm_eps);
    for (int t = 0; t < n; t++) {
        ref_linear(lg, h + t * C, p->lm_head, NULL, 1, C, V);
        double mx = -1e300, sum = 0;
        for (int j = 0; j < V; j++) mx = fmax(mx, lg[j] / temp);
        for (int j = 0; j < V; j++) sum += exp(lg[j] / temp - mx);
        lp[t] = tgt[t] < 0 ? 0 : lg[tgt[t]] / temp - mx - log(sum);
    }
    free(x), free(h), free(q), free(k), free(v), free(att), free(o), free(g), free(u), free(lg);
}

/* ---------------------------------------------------------------- tests */

static struct tfm_config (*const configs[])(void) = {cfg_llama, cfg_llama_gqa, cfg_qwen2,
                                                     cfg_qwen3, cfg_yarn};
static const char *const config_names[] = {"llama", "llama-gqa", "qwen2", "qwen3", "yarn"};
#define N_CONFIGS 5

static void test_param_table(void)
{
    for (int ci = 0; ci < N_CONFIGS; ci++) {
        struct tfm_config c = configs[ci]();
        char err[200];
        CU_ASSERT_EQUAL_FATAL(tfm_config_check(&c, err, sizeof err), 0);
        struct tfm_params p;
        tfm_params_alloc(&p, &c);
        struct tfm_tensor t[MAX_TENSORS];
        int n = tfm_tensors(&c, &p, t, MAX_TENSORS);
        CU_ASSERT_EQUAL(tfm_tensors(&c, &p, NULL, 0), n); /* sizing call */
        size_t sum = 0;
        for (int i = 0; i < n; i++) {
            size_t sz = (size_t)t[i].dims[0] * (size_t)(t[i].ndim == 2 ? t[i].dims[1] : 1);
            /* each tensor starts where the previous one of the table ended, or lies in
             * a later family: every tensor is inside the block */
            CU_ASSERT(t[i].data >= p.mem && t[i].data + sz <= p.mem + p.n);
            sum += sz;
        }
        CU_ASSERT_EQUAL(sum, tfm_param_count(&c));
        CU_ASSERT_EQUAL(p.n, tfm_param_count(&c));
        CU_ASSERT_STRING_EQUAL(t[0].name, "model.embed_tokens.weight");
        CU_ASSERT_STRING_EQUAL(t[1].name, "model.layers.0.input_layernorm.weight");
        CU_ASSERT_STRING_EQUAL(t[2].name, "model.layers.0.self_attn.q_proj.weight");
        CU_ASSERT_EQUAL(t[2].dims[0], c.n_heads * c.head_dim);
        CU_ASSERT_EQUAL(t[2].dims[1], c.hidden_size);
        CU_ASSERT_EQUAL(c.tie_word_embeddings ? 1 : 0, p.lm_head == p.embed);
        CU_ASSERT_STRING_EQUAL(t[n - 1].name,
                               c.tie_word_embeddings ? "model.norm.weight" : "lm_head.weight");
        CU_ASSERT_EQUAL(p.bq != NULL, c.attention_bias);
        CU_ASSERT_EQUAL(p.q_norm != NULL, c.qk_norm);
        int per_layer = 9 + 3 * c.attention_bias + 2 * c.qk_norm;
        CU_ASSERT_EQUAL(n, 2 + c.n_layers * per_layer + !c.tie_word_embeddings);
        if (c.qk_norm)
            CU_ASSERT_STRING_EQUAL(t[5].name, "model.layers.0.self_attn.q_norm.weight");
        if (c.attention_bias)
            CU_ASSERT_STRING_EQUAL(t[3].name, "model.layers.0.self_attn.q_proj.bias");
        /* names are distinct and the tensors do not overlap (sorted by address) */
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++) {
                CU_ASSERT(strcmp(t[i].name, t[j].name) != 0);
                size_t si = (size_t)t[i].dims[0] * (t[i].ndim == 2 ? t[i].dims[1] : 1);
                size_t sj = (size_t)t[j].dims[0] * (t[j].ndim == 2 ? t[j].dims[1] : 1);
                CU_ASSERT(t[i].data + si <= t[j].data || t[j].data + sj <= t[i].data);
            }
        /* init: norms 1, biases 0, matrices random and reproducible */
        tfm_params_init_random(&p, &c, 5, 0.02f);
        CU_ASSERT_EQUAL(p.ln1[0], 1.0f);
        if (p.bq) CU_ASSERT_EQUAL(p.bq[0], 0.0f);
        CU_ASSERT(p.wq[0] != 0.0f && fabsf(p.wq[0]) < 0.2f);
        struct tfm_params p2;
        tfm_params_alloc(&p2, &c);
        tfm_params_init_random(&p2, &c, 5, 0.02f);
        CU_ASSERT_EQUAL(memcmp(p.mem, p2.mem, p.n * sizeof(float)), 0);
        tfm_params_free(&p2);
        tfm_params_free(&p);
    }
    struct tfm_config bad = cfg_llama();
    char err[200];
    bad.n_kv_heads = 3;
    CU_ASSERT_EQUAL(tfm_config_check(&bad, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "num_key_value_heads") != NULL);
    bad = cfg_llama();
    bad.head_dim = 5;
    CU_ASSERT_EQUAL(tfm_config_check(&bad, err, sizeof err), -1);
}

/* Forward against the double reference, sequence by sequence; entropy and logits
 * outputs consistent with the log-probs. */
static void test_forward_reference(void)
{
    for (int ci = 0; ci < N_CONFIGS; ci++) {
        struct tfm_config c = configs[ci]();
        struct tfm_params p;
        init_params(&p, &c, 11 + ci);
        struct batch_data d;
        make_batch(&d, c.vocab_size, 0.8f, 1);
        struct tfm_state *s = tfm_state_create(&c, BT);
        float lp[BT], ent[BT], *logits = malloc(sizeof(float) * BT * c.vocab_size);
        double sum = tfm_forward(&c, &p, s, &d.b, lp, ent, logits);
        double ref[BT], want_sum = 0, worst = 0;
        int t0 = 0;
        for (int i = 0; i < 3; i++) {
            ref_forward(&c, &p, d.tokens + t0, d.targets + t0, d.seq_len[i], 0.8, ref + t0);
            t0 += d.seq_len[i];
        }
        for (int t = 0; t < BT; t++) {
            worst = test_worse(worst, fabs(lp[t] - ref[t]));
            CU_ASSERT_DOUBLE_EQUAL(lp[t], ref[t], 1e-5);
            if (d.targets[t] >= 0) want_sum += d.weights[t] * ref[t];
            /* logits out: log-prob and entropy recomputed from them */
            const float *z = logits + (size_t)t * c.vocab_size;
            double mx = -1e300, se = 0, h = 0;
            for (int j = 0; j < c.vocab_size; j++) mx = fmax(mx, z[j] / 0.8);
            for (int j = 0; j < c.vocab_size; j++) se += exp(z[j] / 0.8 - mx);
            for (int j = 0; j < c.vocab_size; j++) {
                double l = z[j] / 0.8 - mx - log(se);
                h -= exp(l) * l;
            }
            if (d.targets[t] >= 0)
                CU_ASSERT_DOUBLE_EQUAL(lp[t], z[d.targets[t]] / 0.8 - mx - log(se), 1e-5);
            CU_ASSERT_DOUBLE_EQUAL(ent[t], h, 1e-5);
        }
        printf("\n  %-10s max |logprob - double reference| %.2e", config_names[ci], worst);
        CU_ASSERT_DOUBLE_EQUAL(sum, want_sum, 1e-5);
        free(logits);
        tfm_state_free(s);
        tfm_params_free(&p);
    }
}

/* Packing: each sequence alone gives the same log-probs and (summed) gradients as the
 * packed batch; chunking the logits changes nothing. */
static void test_packing_invariance(void)
{
    for (int ci = 0; ci < N_CONFIGS; ci++) {
        struct tfm_config c = configs[ci]();
        struct tfm_params p, g, gs;
        init_params(&p, &c, 21 + ci);
        tfm_params_alloc(&g, &c);
        tfm_params_alloc(&gs, &c);
        struct batch_data d;
        make_batch(&d, c.vocab_size, 1.0f, 1);
        struct tfm_state *s = tfm_state_create(&c, BT);
        float lp[BT], lp1[BT];
        double J = tfm_backward(&c, &p, s, &d.b, &g);
        double sum = tfm_forward(&c, &p, s, &d.b, lp, NULL, NULL);
        CU_ASSERT_DOUBLE_EQUAL(J, -sum, 1e-6);
        double Js = 0;
        int t0 = 0;
        for (int i = 0; i < 3; i++) {
            struct tfm_batch one = {1, &d.seq_len[i], d.tokens + t0, d.targets + t0,
                                    d.weights + t0, 1.0f, NULL};
            tfm_forward(&c, &p, s, &one, lp1 + t0, NULL, NULL);
            Js += tfm_backward(&c, &p, s, &one, &gs);
            t0 += d.seq_len[i];
        }
        double worst = 0, gworst = 0;
        for (int t = 0; t < BT; t++) worst = test_worse(worst, fabs(lp[t] - lp1[t]));
        for (size_t i = 0; i < g.n; i++)
            gworst = test_worse(gworst, fabs(g.mem[i] - gs.mem[i]) / fmax(1.0, fabs(g.mem[i])));
        printf("\n  %-10s packed vs alone: log-prob %.1e, gradient %.1e", config_names[ci],
               worst, gworst);
        CU_ASSERT(worst <= 2e-6);
        CU_ASSERT(gworst <= 1e-5);
        CU_ASSERT_DOUBLE_EQUAL(Js, J, 1e-5);

        /* logit chunks of 1 and 3 rows: same log-probs and gradients */
        for (int chunk = 1; chunk <= 3; chunk += 2) {
            tfm_state_set_logit_chunk(s, chunk);
            memset(gs.mem, 0, gs.n * sizeof(float));
            double Jc = tfm_backward(&c, &p, s, &d.b, &gs);
            tfm_forward(&c, &p, s, &d.b, lp1, NULL, NULL);
            CU_ASSERT_DOUBLE_EQUAL(Jc, J, 1e-6);
            double cw = 0;
            for (int t = 0; t < BT; t++) cw = test_worse(cw, fabs(lp[t] - lp1[t]));
            for (size_t i = 0; i < g.n; i++)
                cw = test_worse(cw, fabs(g.mem[i] - gs.mem[i]) / fmax(1.0, fabs(g.mem[i])));
            CU_ASSERT(cw <= 1e-5); /* lm_head's dW sums chunk by chunk: rounding only */
        }
        /* a batch that does not use the whole state, and the gradient adds */
        memcpy(gs.mem, g.mem, g.n * sizeof(float));
        tfm_backward(&c, &p, s, &d.b, &gs);
        CU_ASSERT_DOUBLE_EQUAL(gs.mem[g.n / 2], 2 * g.mem[g.n / 2], 1e-6);
        tfm_state_free(s);
        tfm_params_free(&gs);
        tfm_params_free(&g);
        tfm_params_free(&p);
    }
}

/* Entries of one tensor to check: a few random ones, plus (for embeddings, whose rows
 * get gradient only from the tokens present) entries of rows that are used. */
static int pick_entries(size_t *idx, const struct tfm_tensor *t, const struct batch_data *d,
                        struct rng *r)
{
    size_t cols = t->ndim == 2 ? (size_t)t->dims[1] : 1, n = (size_t)t->dims[0] * cols;
    int k = 0;
    for (; k < 4; k++) idx[k] = rng_below(r, n);
    if (strcmp(t->name, "model.embed_tokens.weight") == 0)
        for (int j = 0; j < 4; j++)
            idx[k++] = (size_t)d->tokens[2 + 3 * j] * cols + rng_below(r, cols);
    return k;
}

/* J = -sum w_t lp_t - sum_{target >= 0} e_t H_t, from tfm_forward's outputs. */
static double objective(const struct tfm_config *c, const struct tfm_params *p,
                        struct tfm_state *s, const struct tfm_batch *b)
{
    float ent[BT];
    double J = -tfm_forward(c, p, s, b, NULL, b->entropy_weights ? ent : NULL, NULL);
    if (b->entropy_weights)
        for (int t = 0; t < BT; t++)
            if (b->targets[t] >= 0) J -= (double)b->entropy_weights[t] * ent[t];
    return J;
}

/* Which terms of J a gradient check covers. */
enum grad_terms { TERMS_LOGPROB = 0, TERMS_ENTROPY = 1, TERMS_MIXED = 2 };

static void grad_check_config(int ci, int use_weights, float temperature, int terms,
                              int logit_chunk)
{
    struct tfm_config c = configs[ci]();
    struct tfm_params p, g;
    init_params(&p, &c, 31 + ci);
    tfm_params_alloc(&g, &c);
    struct batch_data d;
    make_batch(&d, c.vocab_size, temperature, use_weights);
    if (terms != TERMS_LOGPROB) d.b.entropy_weights = d.ent_w;
    if (terms == TERMS_ENTROPY) {
        memset(d.weights, 0, sizeof d.weights); /* no log-prob term at all */
        d.b.weights = d.weights;
    }
    struct tfm_state *s = tfm_state_create(&c, BT + 3);
    if (logit_chunk > 0) tfm_state_set_logit_chunk(s, logit_chunk);
    double J = tfm_backward(&c, &p, s, &d.b, &g);
    CU_ASSERT_DOUBLE_EQUAL(J, objective(&c, &p, s, &d.b), 1e-6);

    struct tfm_tensor tp[MAX_TENSORS], tg[MAX_TENSORS];
    int n = tfm_tensors(&c, &p, tp, MAX_TENSORS);
    CU_ASSERT_EQUAL_FATAL(tfm_tensors(&c, &g, tg, MAX_TENSORS), n);
    struct rng r;
    rng_init(&r, 41, (uint64_t)ci, 0, 0);
    double worst_all = 0;
    int bad = 0, checked = 0;
    for (int i = 0; i < n; i++) {
        size_t idx[8];
        int m = pick_entries(idx, &tp[i], &d, &r);
        double worst = 0;
        for (int j = 0; j < m; j++) {
            float *x = tp[i].data + idx[j], v = *x;
            float xp = (float)(v + FD_H), xm = (float)(v - FD_H);
            *x = xp;
            double Jp = objective(&c, &p, s, &d.b);
            *x = xm;
            double Jm = objective(&c, &p, s, &d.b);
            *x = v;
            double fd = (Jp - Jm) / ((double)xp - (double)xm);
            double an = tg[i].data[idx[j]], err = fabs(fd - an);
            double tol = FD_ATOL + FD_RTOL * fabs(an);
            worst = fmax(worst, err / tol);
            checked++;
            if (err > tol && bad++ < 10)
                printf("\n    %s[%zu]: analytic %.6g, finite difference %.6g", tp[i].name, idx[j],
                       an, fd);
        }
        worst_all = fmax(worst_all, worst);
    }
    static const char *const term_names[] = {"-w lp", "-e H", "-w lp - e H"};
    printf("\n  %-10s %s, %s, T=%.1f, chunk %d: %d entries of %d tensors, worst error / "
           "tolerance %.3f",
           config_names[ci], term_names[terms], use_weights ? "weights" : "no weights",
           (double)temperature, logit_chunk, checked, n, worst_all);
    CU_ASSERT_EQUAL(bad, 0);
    tfm_state_free(s);
    tfm_params_free(&g);
    tfm_params_free(&p);
}

/* Empty sequences inside a batch and an empty batch. */
/* Recompute mode (long sequences) gives bitwise the gradients of keep mode, with
 * far less activation memory. */
static void test_recompute_mode(void)
{
    for (int ci = 0; ci < N_CONFIGS; ci++) {
        struct tfm_config c = configs[ci]();
        struct tfm_params p, g_keep, g_re;
        init_params(&p, &c, 41 + ci);
        tfm_params_alloc(&g_keep, &c);
        tfm_params_alloc(&g_re, &c);
        struct batch_data d;
        make_batch(&d, c.vocab_size, 0.9f, 1);
        struct tfm_state *keep = tfm_state_create_opts(&c, BT, 0);
        struct tfm_state *re = tfm_state_create_opts(&c, BT, 1);
        CU_ASSERT_EQUAL(tfm_state_recomputes(keep), 0);
        CU_ASSERT_EQUAL(tfm_state_recomputes(re), 1);
        CU_ASSERT(tfm_state_bytes(re) < tfm_state_bytes(keep));
        double J1 = tfm_backward(&c, &p, keep, &d.b, &g_keep);
        double J2 = tfm_backward(&c, &p, re, &d.b, &g_re);
        CU_ASSERT(J1 == J2);
        CU_ASSERT_EQUAL(memcmp(g_keep.mem, g_re.mem, g_keep.n * sizeof(float)), 0);
        tfm_state_free(keep);
        tfm_state_free(re);
        tfm_params_free(&g_keep);
        tfm_params_free(&g_re);
        tfm_params_free(&p);
    }
}

static void test_empty(void)
{
    struct tfm_config c = cfg_qwen3();
    struct tfm_params p, g;
    init_params(&p, &c, 51);
    tfm_params_alloc(&g, &c);
    struct batch_data d;
    make_batch(&d, c.vocab_size, 1.0f, 1);
    struct tfm_state *s = tfm_state_create(&c, BT);
    float lp[BT], lp2[BT];
    tfm_forward(&c, &p, s, &d.b, lp, NULL, NULL);
    int len4[4] = {5, 0, 3, 6};
    struct tfm_batch b4 = d.b;
    b4.n_seq = 4;
    b4.seq_len = len4;
    tfm_forward(&c, &p, s, &b4, lp2, NULL, NULL);
    CU_ASSERT_EQUAL(memcmp(lp, lp2, sizeof lp), 0);
    struct tfm_batch b0 = {0, NULL, NULL, NULL, NULL, 1.0f, NULL};
    CU_ASSERT_EQUAL(tfm_forward(&c, &p, s, &b0, NULL, NULL, NULL), 0.0);
    CU_ASSERT_EQUAL(tfm_backward(&c, &p, s, &b0, &g), 0.0);
    for (size_t i = 0; i < g.n; i++) CU_ASSERT_EQUAL_FATAL(g.mem[i], 0.0f);
    tfm_state_free(s);
    tfm_state_free(NULL);
    tfm_params_free(&g);
    tfm_params_free(&p);
}

static void test_grad_llama(void) { grad_check_config(0, 1, 1.0f, TERMS_LOGPROB, 0); }
static void test_grad_llama_gqa(void) { grad_check_config(1, 0, 0.7f, TERMS_LOGPROB, 0); }
static void test_grad_qwen2(void) { grad_check_config(2, 1, 1.3f, TERMS_LOGPROB, 0); }
static void test_grad_qwen3(void) { grad_check_config(3, 1, 0.9f, TERMS_LOGPROB, 0); }
static void test_grad_yarn(void) { grad_check_config(4, 1, 1.1f, TERMS_LOGPROB, 0); }
static void test_grad_entropy(void)
{
    grad_check_config(0, 1, 1.0f, TERMS_ENTROPY, 0);
    grad_check_config(2, 1, 0.7f, TERMS_ENTROPY, 0);
}
static void test_grad_mixed(void)
{
    grad_check_config(1, 0, 1.3f, TERMS_MIXED, 0);
    grad_check_config(3, 1, 0.9f, TERMS_MIXED, 3);
}

int main(void)
{
    static const struct test_case cases[] = {
        {"parameters: count = tensor table, names, carving, init", test_param_table},
        {"forward = double reference (all families)", test_forward_reference},
        {"packing and logit chunking do not change results", test_packing_invariance},
        {"empty sequences and an empty batch", test_empty},
        {"recompute mode: same gradients bitwise, less memory", test_recompute_mode},
        {"gradient by finite differences: llama", test_grad_llama},
        {"gradient by finite differences: llama GQA, no weights", test_grad_llama_gqa},
        {"gradient by finite differences: qwen2 (biases)", test_grad_qwen2},
        {"gradient by finite differences: qwen3 (qk norm, tied)", test_grad_qwen3},
        {"gradient by finite differences: llama, yarn rope scaling", test_grad_yarn},
        {"gradient by finite differences: entropy term alone", test_grad_entropy},
        {"gradient by finite differences: log-prob + entropy terms", test_grad_mixed},
        {NULL, NULL}};
    static const struct test_suite suites[] = {{"tfm model", cases}, {NULL, NULL}};
    return test_main(suites);
}
