/*
 * Tensor parallelism of the CPU transformer (include/libra/tfm_tp.h) against the
 * single-rank model, with the ranks of a TP group as threads (tp_threads.h: an
 * all-reduce that sums in rank order, so every rank gets the same bits).
 *
 * Models: llama-shaped (untied; H = 8, K = 2: K == t at t = 2, K < t at t = 4, the kv
 * heads replicated), qwen2-shaped (biases, untied; K = 4: K > t at t = 2, K == t at
 * t = 4) and qwen3-shaped (qk norm, tied, H*D != C; H = 4, K = 2: one q head a rank at
 * t = 4). V = 301 so the vocabulary split is uneven.
 *
 *  - t == 1 is bitwise the single-rank code (forward, backward, decode, sampling);
 *  - tfm_forward_tp log-probs and entropies at t = 2, 4 = tfm_forward's within 1e-5
 *    relative, bitwise the same on every rank, also over several logit chunks;
 *  - shard / unshard round trip is exact; the slices tile every tensor (replicated
 *    ones t or t/K times, everything else once; primary copies exactly once);
 *  - decode + sampling (greedy, temperature, top-k, top-p, both) on 3 slots for 40
 *    steps: the same tokens as t = 1, log-probs within 1e-5;
 *  - one AdamW training step (tfm_backward_tp, tfm_tp_reduce_grads, tfm_tp_grad_sq,
 *    adamw_step_norm) = tfm_backward + adamw_step within 1e-5 relative, with clipping
 *    active and with an entropy-weighted objective in some cases; recompute mode gives
 *    bitwise keep mode's gradients;
 *  - sampler_sample_tp = sampler_sample on random logits over many keys (ties, -inf
 *    ranges, k larger than a rank's slice): same tokens, log-probs within 1e-6;
 *  - tfm_tp_check's messages.
 * OpenBLAS runs on one thread (it is called from several threads at once).
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/model/tfm_state.h" /* tfm_state_set_logit_chunk */
#include "libra/adamw.h"
#include "libra/rng.h"
#include "libra/sampler.h"
#include "libra/tfm.h"
#include "libra/tfm_decode.h"
#include "libra/tfm_tp.h"
#include "testutil.h"
#include "tp_threads.h"

#define TINY(fam, V, H, K, D, F, theta, tie, bias, qkn)                                       \
    .family = fam, .vocab_size = V, .hidden_size = 32, .n_layers = 2, .n_heads = H,           \
    .n_kv_heads = K, .head_dim = D, .intermediate_size = F, .max_position_embeddings = 512,   \
    .rms_norm_eps = 1e-6f, .rope_theta = theta, .tie_word_embeddings = tie,                   \
    .attention_bias = bias, .qk_norm = qkn
static const struct tfm_config cfgs[] = {
    /* llama: untied, GQA H = 8, K = 2; Llama 3.1 rope scaling (every shard reads it) */
    {TINY(TFM_LLAMA, 301, 8, 2, 8, 48, 1e4f, 0, 0, 0), .rope_type = TFM_ROPE_LLAMA3,
     .rope_factor = 8, .rope_low_freq_factor = 1, .rope_high_freq_factor = 4,
     .rope_original_max_pos = 16},
    /* qwen2: biases, untied, K = 4 */
    {TINY(TFM_QWEN2, 301, 8, 4, 8, 40, 1e6f, 0, 1, 0)},
    /* qwen3: qk norm, tied, H*D != C, H = 4, K = 2 */
    {TINY(TFM_QWEN3, 301, 4, 2, 12, 48, 1e4f, 1, 0, 1)},
};
static const char *const cfg_names[] = {"llama", "qwen2", "qwen3"};
#define N_CFG 3

static double rel_err(double a, double b) { return fabs(a - b) / fmax(1.0, fabs(b)); }

/* ---------------------------------------------------------------- batch */

#define BT 14
struct batch_data {
    int seq_len[3];
    int32_t tokens[BT], targets[BT];
    float weights[BT], ent_w[BT];
    struct tfm_batch b;
};

/* 3 sequences (5, 3, 6), some targets -1, non-uniform weights; entropy weights if
 * with_entropy. */
static void make_batch(struct batch_data *d, int V, float temperature, int with_entropy)
{
    static const int len[3] = {5, 3, 6};
    struct rng r;
    rng_init(&r, 3, 1, 0, 0);
    memcpy(d->seq_len, len, sizeof len);
    for (int t = 0; t < BT; t++) {
        d->tokens[t] = (int32_t)rng_below(&r, (uint64_t)V);
        d->targets[t] = (int32_t)rng_below(&r, (uint64_t)V);
        d->weights[t] = (float)(0.1 + 0.07 * (t % 5));
        d->ent_w[t] = (float)(0.05 + 0.03 * (t % 3));
    }
    d->targets[0] = d->targets[1] = d->targets[7] = -1;
    d->targets[13] = V - 1; /* the last rank's last row */
    d->tokens[2] = 0;
    d->weights[10] = 0.0f;
    d->b = (struct tfm_batch){.n_seq = 3, .seq_len = d->seq_len, .tokens = d->tokens,
                              .targets = d->targets, .weights = d->weights,
                              .temperature = temperature,
                              .entropy_weights = with_entropy ? d->ent_w : NULL};
}

/* ---------------------------------------------------------------- forward */

struct fwd_job {
    const struct tfm_config *c;
    const struct tfm_params *full;
    struct tp_world *w;
    const struct tfm_batch *b;
    int chunk; /* logit chunk rows, 0 = default */
    float lp[TP_MAX][BT], ent[TP_MAX][BT];
    double sum[TP_MAX];
};

static void fwd_rank(int rank, void *arg)
{
    struct fwd_job *j = arg;
    struct tfm_tp tp;
    tp_world_tp(j->w, &tp, j->c, rank);
    struct tfm_params pl;
    tfm_params_alloc(&pl, &tp.local);
    tfm_tp_shard(&tp, j->full, &pl);
    struct tfm_state *s = tfm_state_create_tp(&tp, BT);
    if (j->chunk) tfm_state_set_logit_chunk(s, j->chunk);
    j->sum[rank] = tfm_forward_tp(&tp, &pl, s, j->b, j->lp[rank], j->ent[rank]);
    tfm_state_free(s);
    tfm_params_free(&pl);
}

static void test_forward(void)
{
    for (int k = 0; k < N_CFG; k++) {
        const struct tfm_config *c = &cfgs[k];
        struct tfm_params p;
        test_random_params(&p, c, 10 + (uint64_t)k);
        struct batch_data d;
        make_batch(&d, c->vocab_size, 0.8f, 0);
        float lp1[BT], ent1[BT];
        struct tfm_state *s = tfm_state_create(c, BT);
        double sum1 = tfm_forward(c, &p, s, &d.b, lp1, ent1, NULL);
        tfm_state_free(s);

        static struct fwd_job j;
        for (int t = 1; t <= 4; t *= 2)
            for (int chunk = 0; chunk <= 3; chunk += 3) {
                struct tp_world w;
                tp_world_init(&w, t, c->n_kv_heads);
                memset(&j, 0, sizeof j);
                j = (struct fwd_job){.c = c, .full = &p, .w = &w, .b = &d.b, .chunk = chunk};
                tp_run(t, fwd_rank, &j);
                double worst = 0;
                for (int r = 0; r < t; r++) {
                    for (int i = 0; i < BT; i++) {
                        worst = fmax(worst, rel_err(j.lp[r][i], lp1[i]));
                        worst = fmax(worst, rel_err(j.ent[r][i], ent1[i]));
                    }
                    CU_ASSERT(rel_err(j.sum[r], sum1) <= 1e-5);
                    /* every rank: the same bits */
                    CU_ASSERT_EQUAL(memcmp(j.lp[r], j.lp[0], sizeof j.lp[0]), 0);
                    CU_ASSERT_EQUAL(memcmp(j.ent[r], j.ent[0], sizeof j.ent[0]), 0);
                    CU_ASSERT(j.sum[r] == j.sum[0]);
                }
                CU_ASSERT(worst <= 1e-5);
                if (t == 1 && chunk == 0) { /* the single-rank code, bitwise */
                    CU_ASSERT_EQUAL(memcmp(j.lp[0], lp1, sizeof lp1), 0);
                    CU_ASSERT_EQUAL(memcmp(j.ent[0], ent1, sizeof ent1), 0);
                    CU_ASSERT(j.sum[0] == sum1);
                }
                printf("\n  %-6s t=%d chunk %d: max rel |TP - single| log-prob/entropy %.1e",
                       cfg_names[k], t, chunk, worst);
                tp_world_free(&w);
            }
        tfm_params_free(&p);
    }
}

/* ---------------------------------------------------------------- slices */

/* Expected copies of an element of the named tensor across the t ranks. */
static int expected_replicas(const struct tfm_config *c, int t, const char *name)
{
    if (strstr(name, "norm")) return t; /* layernorms, model.norm, q_norm, k_norm */
    if ((strstr(name, "k_proj") || strstr(name, "v_proj")) && c->n_kv_heads < t)
        return t / c->n_kv_heads;
    return 1;
}

static void test_shard_tiling(void)
{
    for (int k = 0; k < N_CFG; k++) {
        const struct tfm_config *c = &cfgs[k];
        struct tfm_params full, out;
        test_random_params(&full, c, 20 + (uint64_t)k);
        tfm_params_alloc(&out, c);
        int nt = tfm_tensors(c, &full, NULL, 0);
        struct tfm_tensor *ft = malloc((size_t)nt * sizeof *ft);
        tfm_tensors(c, &full, ft, nt);
        for (int t = 1; t <= 8; t *= 2) {
            char err[200];
            if (tfm_tp_check(c, t, err, sizeof err) != 0) continue; /* qwen3: H = 4 < 8 */
            struct tp_world w;
            tp_world_init(&w, t, c->n_kv_heads);
            int *count = calloc(full.n, sizeof *count), *prim = calloc(full.n, sizeof *prim);
            memset(out.mem, 0, out.n * sizeof(float));
            int bad_value = 0, bad_local = 0;
            for (int r = 0; r < t; r++) {
                struct tfm_tp tp;
                tp_world_tp(&w, &tp, c, r);
                struct tfm_params pl;
                tfm_params_alloc(&pl, &tp.local);
                tfm_tp_shard(&tp, &full, &pl);
                int ns = tfm_tp_slices(&tp, &pl, NULL, 0);
                CU_ASSERT_EQUAL(ns, nt);
                struct tfm_slice *sl = malloc((size_t)ns * sizeof *sl);
                tfm_tp_slices(&tp, &pl, sl, ns);
                int *lcount = calloc(pl.n, sizeof *lcount);
                for (int i = 0; i < ns; i++) {
                    const struct tfm_slice *s = &sl[i];
                    const struct tfm_tensor *T = &ft[s->tensor];
                    CU_ASSERT_STRING_EQUAL(s->name, T->name);
                    CU_ASSERT_EQUAL(s->full_rows, T->dims[0]);
                    CU_ASSERT_EQUAL(s->full_cols, T->ndim == 2 ? T->dims[1] : 1);
                    CU_ASSERT_EQUAL(s->replicas, expected_replicas(c, t, s->name));
                    CU_ASSERT(s->r0 >= 0 && s->r0 + s->nr <= s->full_rows);
                    CU_ASSERT(s->c0 >= 0 && s->c0 + s->nc <= s->full_cols);
                    for (int64_t a = 0; a < s->nr; a++)
                        for (int64_t b = 0; b < s->nc; b++) {
                            size_t off = (size_t)(T->data - full.mem) +
                                         (size_t)((s->r0 + a) * s->full_cols + s->c0 + b);
                            count[off]++;
                            prim[off] += s->primary;
                            const float *lv = s->local + a * s->nc + b;
                            bad_value += *lv != full.mem[off];
                            if (lv >= pl.mem && lv < pl.mem + pl.n)
                                lcount[lv - pl.mem]++;
                            else
                                bad_local++;
                        }
                }
                for (size_t i = 0; i < pl.n; i++) bad_local += lcount[i] != 1;
                tfm_tp_unshard(&tp, &pl, &out);
                free(lcount);
                free(sl);
                tfm_params_free(&pl);
            }
            CU_ASSERT_EQUAL(bad_value, 0);
            CU_ASSERT_EQUAL(bad_local, 0);
            /* every element: covered replicas times, its primary copy once */
            int bad_count = 0;
            for (int i = 0; i < nt; i++) {
                size_t n = (size_t)ft[i].dims[0] * (ft[i].ndim == 2 ? (size_t)ft[i].dims[1] : 1);
                size_t off = (size_t)(ft[i].data - full.mem);
                int want = expected_replicas(c, t, ft[i].name);
                for (size_t e = 0; e < n; e++)
                    bad_count += count[off + e] != want || prim[off + e] != 1;
            }
            CU_ASSERT_EQUAL(bad_count, 0);
            CU_ASSERT_EQUAL(memcmp(out.mem, full.mem, full.n * sizeof(float)), 0);
            free(count);
            free(prim);
            tp_world_free(&w);
        }
        free(ft);
        tfm_params_free(&out);
        tfm_params_free(&full);
    }
}

/* ---------------------------------------------------------------- decode */

enum { N_SLOTS = 3, N_STEPS = 40, N_MODES = 5 };
static const struct sampler_config modes[N_MODES] = {
    {0.0f, 1.0f, 0, 5},   /* greedy */
    {0.8f, 1.0f, 0, 6},   /* temperature */
    {1.0f, 1.0f, 5, 7},   /* top-k */
    {1.0f, 0.9f, 0, 8},   /* top-p */
    {0.9f, 0.8f, 20, 9},  /* top-k then top-p */
};
static const int prompt_len[N_SLOTS] = {7, 12, 4};

/* Tokens and log-probs of one decode run: [slot][step]. */
struct decode_out {
    int32_t tok[N_SLOTS][N_STEPS];
    float lp[N_SLOTS][N_STEPS];
};

static void prompt(int32_t *t, int n, int V, int slot)
{
    struct rng r;
    rng_init(&r, 77, (uint64_t)slot, 0, 0);
    for (int i = 0; i < n; i++) t[i] = (int32_t)rng_below(&r, (uint64_t)V);
}

/* The decode loop of one rank (tp NULL: the single-rank decoder on p). */
static void decode_run(const struct tfm_tp *tp, const struct tfm_config *c,
                       const struct tfm_params *p, const struct sampler_config *sc,
                       struct decode_out *o)
{
    int V = c->vocab_size, Vl = tp ? tp->v1 - tp->v0 : V;
    struct tfm_decoder *d = tp ? tfm_decoder_create_tp(tp, p, N_SLOTS, 64, 5)
                               : tfm_decoder_create(c, p, N_SLOTS, 64, 5);
    size_t ns = tp ? sampler_tp_scratch_floats(sc, tp) : 2 * (size_t)V;
    float *logits = malloc((size_t)N_SLOTS * Vl * sizeof *logits);
    float *scratch = malloc(ns * sizeof *scratch);
    int32_t pr[16], next[N_SLOTS];
    int slots[N_SLOTS] = {0, 1, 2};
    for (int s = 0; s < N_SLOTS; s++) {
        prompt(pr, prompt_len[s], V, s);
        tfm_decoder_prefill(d, s, pr, prompt_len[s], logits + (size_t)s * Vl);
    }
    for (int i = 0; i < N_STEPS; i++) {
        for (int s = 0; s < N_SLOTS; s++) {
            const float *row = logits + (size_t)s * Vl;
            int64_t traj = 100 + s, pos = prompt_len[s] + i;
            next[s] = tp ? sampler_sample_tp(sc, tp, row, traj, pos, &o->lp[s][i], scratch)
                         : sampler_sample(sc, row, V, traj, pos, &o->lp[s][i], scratch);
            o->tok[s][i] = next[s];
        }
        if (i + 1 < N_STEPS) tfm_decoder_step(d, slots, next, N_SLOTS, logits);
    }
    free(scratch);
    free(logits);
    tfm_decoder_free(d);
}

struct dec_job {
    const struct tfm_config *c;
    const struct tfm_params *full;
    struct tp_world *w;
    const struct sampler_config *sc;
    struct decode_out out[TP_MAX];
};

static void dec_rank(int rank, void *arg)
{
    struct dec_job *j = arg;
    struct tfm_tp tp;
    tp_world_tp(j->w, &tp, j->c, rank);
    struct tfm_params pl;
    tfm_params_alloc(&pl, &tp.local);
    tfm_tp_shard(&tp, j->full, &pl);
    decode_run(&tp, j->c, &pl, j->sc, &j->out[rank]);
    tfm_params_free(&pl);
}

static void test_decode(void)
{
    static struct dec_job j;
    static struct decode_out ref;
    for (int k = 0; k < N_CFG; k++) {
        const struct tfm_config *c = &cfgs[k];
        struct tfm_params p;
        test_random_params(&p, c, 30 + (uint64_t)k);
        double worst_all = 0;
        for (int m = 0; m < N_MODES; m++) {
            decode_run(NULL, c, &p, &modes[m], &ref);
            for (int t = 1; t <= 4; t *= 2) {
                struct tp_world w;
                tp_world_init(&w, t, c->n_kv_heads);
                j = (struct dec_job){.c = c, .full = &p, .w = &w, .sc = &modes[m]};
                tp_run(t, dec_rank, &j);
                int bad_tok = 0;
                double worst = 0;
                for (int r = 0; r < t; r++) {
                    bad_tok += memcmp(j.out[r].tok, ref.tok, sizeof ref.tok) != 0;
                    for (int s = 0; s < N_SLOTS; s++)
                        for (int i = 0; i < N_STEPS; i++)
                            worst = test_worse(worst, fabs(j.out[r].lp[s][i] - ref.lp[s][i]));
                    CU_ASSERT_EQUAL(memcmp(j.out[r].lp, j.out[0].lp, sizeof ref.lp), 0);
                }
                CU_ASSERT_EQUAL(bad_tok, 0);
                CU_ASSERT(worst <= 1e-5);
                worst_all = fmax(worst_all, worst);
                if (t == 1) CU_ASSERT_EQUAL(memcmp(&j.out[0], &ref, sizeof ref), 0);
                if (bad_tok || worst > 1e-5)
                    printf("\n  %s mode %d t=%d: %d ranks differ in tokens, worst log-prob %.1e",
                           cfg_names[k], m, t, bad_tok, worst);
                tp_world_free(&w);
            }
        }
        printf("\n  %-6s %d modes x %d slots x %d steps, t = 2, 4: max |log-prob - single| %.1e",
               cfg_names[k], N_MODES, N_SLOTS, N_STEPS, worst_all);
        tfm_params_free(&p);
    }
}

/* ---------------------------------------------------------------- training step */

struct train_case {
    int cfg, t;
    float clip;       /* 0: no clipping */
    int with_entropy; /* entropy-weighted objective */
};

struct train_job {
    const struct tfm_config *c;
    const struct tfm_params *full;
    struct tp_world *w;
    const struct tfm_batch *b;
    const struct adamw_config *oc;
    struct tfm_params p[TP_MAX], g[TP_MAX], g_re[TP_MAX]; /* local blocks, kept for the main thread */
    double J[TP_MAX], norm[TP_MAX];
};

static void train_rank(int rank, void *arg)
{
    struct train_job *j = arg;
    struct tfm_tp tp;
    tp_world_tp(j->w, &tp, j->c, rank);
    struct tfm_params *p = &j->p[rank], *g = &j->g[rank], *gr = &j->g_re[rank];
    tfm_params_alloc(p, &tp.local);
    tfm_params_alloc(g, &tp.local);
    tfm_params_alloc(gr, &tp.local);
    tfm_tp_shard(&tp, j->full, p);
    struct tfm_state *s = tfm_state_create_tp(&tp, BT);
    j->J[rank] = tfm_backward_tp(&tp, p, s, j->b, g);
    tfm_state_free(s);
    /* recompute mode: the same gradients, bit for bit */
    s = tfm_state_create_tp_opts(&tp, BT, 1);
    tfm_backward_tp(&tp, p, s, j->b, gr);
    tfm_state_free(s);
    tfm_tp_reduce_grads(&tp, g);
    tfm_tp_reduce_grads(&tp, gr);
    double norm = sqrt(tfm_tp_grad_sq(&tp, g));
    struct tfm_params g_copy;
    tfm_params_alloc(&g_copy, &tp.local);
    memcpy(g_copy.mem, g->mem, g->n * sizeof(float));
    struct adamw o;
    adamw_init(&o, j->oc, p->n);
    j->norm[rank] = adamw_step_norm(&o, p->mem, g_copy.mem, norm);
    adamw_free(&o);
    tfm_params_free(&g_copy);
}

static void train_check(const struct train_case *tc)
{
    const struct tfm_config *c = &cfgs[tc->cfg];
    int t = tc->t;
    struct tfm_params p1, g1, gunclipped, full_out;
    test_random_params(&p1, c, 40 + (uint64_t)tc->cfg);
    struct tfm_params p0;
    tfm_params_alloc(&p0, c);
    memcpy(p0.mem, p1.mem, p1.n * sizeof(float));
    tfm_params_alloc(&g1, c);
    tfm_params_alloc(&gunclipped, c);
    tfm_params_alloc(&full_out, c);
    struct batch_data d;
    make_batch(&d, c->vocab_size, 0.9f, tc->with_entropy);
    /* eps large enough that a step is a smooth function of the gradient: with eps ~ 0
     * a gradient that is 0 up to rounding would move its parameter by +-lr */
    struct adamw_config oc = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-3f,
                              .weight_decay = 0.1f, .clip_norm = tc->clip};
    struct tfm_state *s = tfm_state_create(c, BT);
    double J1 = tfm_backward(c, &p1, s, &d.b, &g1);
    tfm_state_free(s);
    memcpy(gunclipped.mem, g1.mem, g1.n * sizeof(float));
    struct adamw o;
    adamw_init(&o, &oc, p1.n);
    double norm1 = adamw_step(&o, p1.mem, g1.mem);
    adamw_free(&o);
    if (tc->clip > 0) CU_ASSERT(norm1 > 2 * tc->clip); /* clipping is active */

    static struct train_job j;
    struct tp_world w;
    tp_world_init(&w, t, c->n_kv_heads);
    memset(&j, 0, sizeof j);
    j.c = c;
    j.full = &p0;
    j.w = &w;
    j.b = &d.b;
    j.oc = &oc;
    tp_run(t, train_rank, &j);

    double worst_g = 0, worst_p = 0;
    int bad_re = 0, bad_repl = 0;
    struct tfm_tp tp0;
    tp_world_tp(&w, &tp0, c, 0);
    /* gradients (reduced) and parameters, unsharded */
    for (int r = 0; r < t; r++) {
        struct tfm_tp tp;
        tp_world_tp(&w, &tp, c, r);
        tfm_tp_unshard(&tp, &j.g[r], &full_out);
        bad_re += memcmp(j.g[r].mem, j.g_re[r].mem, j.g[r].n * sizeof(float)) != 0;
        CU_ASSERT(rel_err(j.J[r], J1) <= 1e-5);
        CU_ASSERT(rel_err(j.norm[r], norm1) <= 1e-5);
        CU_ASSERT(j.norm[r] == j.norm[0]);
        /* replicated gradients: the same bits on every rank that holds them */
        size_t L = (size_t)c->n_layers, C = (size_t)c->hidden_size, D = (size_t)c->head_dim;
        bad_repl += memcmp(j.g[r].ln1, j.g[0].ln1, L * C * sizeof(float)) != 0;
        bad_repl += memcmp(j.g[r].ln2, j.g[0].ln2, L * C * sizeof(float)) != 0;
        bad_repl += memcmp(j.g[r].ln_f, j.g[0].ln_f, C * sizeof(float)) != 0;
        if (c->qk_norm) bad_repl += memcmp(j.g[r].q_norm, j.g[0].q_norm, 2 * L * D * sizeof(float)) != 0;
        if (c->n_kv_heads < t) {
            int first = r - r % (t / c->n_kv_heads);
            size_t kvn = (size_t)(j.g[r].wv - j.g[r].wk) * 2;
            bad_repl += memcmp(j.g[r].wk, j.g[first].wk, kvn * sizeof(float)) != 0;
        }
    }
    for (size_t i = 0; i < g1.n; i++)
        worst_g = fmax(worst_g, rel_err(full_out.mem[i], gunclipped.mem[i]));
    for (int r = 0; r < t; r++) {
        struct tfm_tp tp;
        tp_world_tp(&w, &tp, c, r);
        tfm_tp_unshard(&tp, &j.p[r], &full_out);
    }
    for (size_t i = 0; i < p1.n; i++) worst_p = fmax(worst_p, rel_err(full_out.mem[i], p1.mem[i]));
    printf("\n  %-6s t=%d clip %.2f%s: norm %.4f, max rel err gradient %.1e, parameters %.1e",
           cfg_names[tc->cfg], t, (double)tc->clip, tc->with_entropy ? " +entropy" : "", norm1,
           worst_g, worst_p);
    CU_ASSERT(worst_g <= 1e-5);
    CU_ASSERT(worst_p <= 1e-5);
    CU_ASSERT_EQUAL(bad_re, 0);
    CU_ASSERT_EQUAL(bad_repl, 0);
    /* the step moved the parameters (the comparison is not vacuous) */
    double moved = 0;
    for (size_t i = 0; i < p1.n; i++) moved = test_worse(moved, fabs(p1.mem[i] - p0.mem[i]));
    CU_ASSERT(moved > 1e-3);
    for (int r = 0; r < t; r++) {
        tfm_params_free(&j.p[r]);
        tfm_params_free(&j.g[r]);
        tfm_params_free(&j.g_re[r]);
    }
    tp_world_free(&w);
    tfm_params_free(&full_out);
    tfm_params_free(&gunclipped);
    tfm_params_free(&g1);
    tfm_params_free(&p0);
    tfm_params_free(&p1);
}

static void test_train_step(void)
{
    static const struct train_case cases[] = {
        {0, 2, 0.0f, 0},  /* llama, K == t */
        {0, 4, 0.0f, 1},  /* llama, K < t (replicated kv heads), entropy term */
        {1, 2, 0.05f, 0}, /* qwen2, K > t, biases, clipping */
        {1, 4, 0.0f, 1},  /* qwen2, K == t, entropy term */
        {2, 2, 0.05f, 1}, /* qwen3, qk norm, tied, clipping and entropy */
        {2, 4, 0.05f, 0}, /* qwen3, one q head a rank, K < t, clipping */
        {2, 1, 0.05f, 1}, /* t == 1 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) train_check(&cases[i]);
}

/* t == 1: tfm_backward_tp and the decoder are the single-rank code, bitwise. */
static void test_t1_bitwise(void)
{
    const struct tfm_config *c = &cfgs[2];
    struct tfm_params p, g1, g2;
    test_random_params(&p, c, 50);
    tfm_params_alloc(&g1, c);
    tfm_params_alloc(&g2, c);
    struct batch_data d;
    make_batch(&d, c->vocab_size, 1.1f, 1);
    struct tfm_tp tp;
    tfm_tp_init(&tp, c, 1, 0, NULL, NULL);
    CU_ASSERT_EQUAL(memcmp(&tp.local, c, sizeof *c), 0);
    CU_ASSERT(tp.v0 == 0 && tp.v1 == c->vocab_size && tp.kv_head0 == 0 && tp.q_head0 == 0);
    struct tfm_state *s1 = tfm_state_create(c, BT), *s2 = tfm_state_create_tp(&tp, BT);
    double J1 = tfm_backward(c, &p, s1, &d.b, &g1);
    double J2 = tfm_backward_tp(&tp, &p, s2, &d.b, &g2);
    CU_ASSERT(J1 == J2);
    CU_ASSERT_EQUAL(memcmp(g1.mem, g2.mem, g1.n * sizeof(float)), 0);
    tfm_tp_reduce_grads(&tp, &g2); /* no-op */
    CU_ASSERT_EQUAL(memcmp(g1.mem, g2.mem, g1.n * sizeof(float)), 0);
    double ss = 0;
    for (size_t i = 0; i < g1.n; i++) ss += (double)g1.mem[i] * g1.mem[i];
    CU_ASSERT(rel_err(tfm_tp_grad_sq(&tp, &g2), ss) <= 1e-12);
    /* adamw_step_norm with adamw_step's own norm: the same step, bitwise */
    struct adamw_config oc = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f,
                              .weight_decay = 0.1f, .clip_norm = 0.01f};
    struct adamw o1, o2;
    adamw_init(&o1, &oc, p.n);
    adamw_init(&o2, &oc, p.n);
    struct tfm_params q1, q2;
    tfm_params_alloc(&q1, c);
    tfm_params_alloc(&q2, c);
    memcpy(q1.mem, p.mem, p.n * sizeof(float));
    memcpy(q2.mem, p.mem, p.n * sizeof(float));
    double n1 = adamw_step(&o1, q1.mem, g1.mem);
    CU_ASSERT(n1 > 0.01); /* clipping active */
    CU_ASSERT(adamw_step_norm(&o2, q2.mem, g2.mem, sqrt(ss)) == sqrt(ss));
    CU_ASSERT(n1 == sqrt(ss));
    CU_ASSERT_EQUAL(memcmp(q1.mem, q2.mem, p.n * sizeof(float)), 0);
    CU_ASSERT_EQUAL(memcmp(o1.m, o2.m, 2 * p.n * sizeof(float)), 0);
    adamw_free(&o1);
    adamw_free(&o2);
    tfm_params_free(&q1);
    tfm_params_free(&q2);
    tfm_state_free(s1);
    tfm_state_free(s2);
    tfm_params_free(&g2);
    tfm_params_free(&g1);
    tfm_params_free(&p);
}

/* ---------------------------------------------------------------- sampler */

#define S_KEYS 30
#define S_MODES 10
#define S_KINDS 4
static const struct sampler_config s_modes[S_MODES] = {
    {0.0f, 1.0f, 0, 1},   {0.7f, 1.0f, 0, 2},  {1.3f, 1.0f, 0, 3},   {1.0f, 1.0f, 1, 4},
    {1.0f, 1.0f, 3, 5},   {0.8f, 1.0f, 90, 6}, {1.0f, 0.5f, 0, 7},   {1.0f, 0.95f, 0, 8},
    {1.0f, 0.99f, 0, 12}, {0.9f, 0.7f, 40, 9},
};

/* Logits of key `key` and kind: 0 random normal, 1 peaked, 2 ties of the max across
 * ranks and many equal values, 3 -inf over whole ranges (a rank may hold only -inf). */
static void s_logits(float *x, int V, int kind, int key)
{
    struct rng r;
    rng_init(&r, 5, (uint64_t)key, (uint64_t)kind, (uint64_t)V);
    for (int i = 0; i < V; i++) x[i] = (float)(2.0 * rng_normal(&r));
    if (kind == 1)
        for (int i = 0; i < V; i++) x[i] *= 4.0f;
    if (kind == 2) {
        for (int i = 0; i < V; i++) x[i] = (float)rng_below(&r, 4);
        x[V / 2] = x[V - 1] = x[V / 3] = 4.0f; /* the max three times */
    }
    if (kind == 3)
        for (int i = 0; i < V; i++)
            if (i < V / 2 || i % 3 == 0) x[i] = -INFINITY;
}

struct samp_job {
    int V;
    struct tp_world *w;
    struct tfm_config c;
    const float *logits; /* (S_KINDS * S_KEYS, V) */
    int32_t tok[TP_MAX][S_MODES][S_KINDS * S_KEYS];
    float lp[TP_MAX][S_MODES][S_KINDS * S_KEYS];
};

static void samp_rank(int rank, void *arg)
{
    struct samp_job *j = arg;
    struct tfm_tp tp;
    tp_world_tp(j->w, &tp, &j->c, rank);
    for (int m = 0; m < S_MODES; m++) {
        size_t ns = sampler_tp_scratch_floats(&s_modes[m], &tp);
        float *scratch = malloc(ns * sizeof *scratch);
        for (int q = 0; q < S_KINDS * S_KEYS; q++)
            j->tok[rank][m][q] =
                sampler_sample_tp(&s_modes[m], &tp, j->logits + (size_t)q * j->V + tp.v0, q,
                                  3 * q + m, &j->lp[rank][m][q], scratch);
        free(scratch);
    }
}

static void test_sampler_tp(void)
{
    static const int Vs[] = {9, 301, 1000};
    static struct samp_job j;
    for (size_t vi = 0; vi < sizeof Vs / sizeof Vs[0]; vi++) {
        int V = Vs[vi], nq = S_KINDS * S_KEYS;
        float *logits = malloc((size_t)nq * V * sizeof *logits);
        float *scratch = malloc(2 * (size_t)V * sizeof *scratch);
        for (int q = 0; q < nq; q++) s_logits(logits + (size_t)q * V, V, q / S_KEYS, q);
        for (int t = 1; t <= 8; t *= 2) {
            struct tfm_config c = {.family = TFM_LLAMA, .vocab_size = V, .hidden_size = 4,
                                   .n_layers = 1, .n_heads = 8, .n_kv_heads = 8, .head_dim = 2,
                                   .intermediate_size = 8, .max_position_embeddings = 16,
                                   .rms_norm_eps = 1e-6f, .rope_theta = 1e4f};
            struct tp_world w;
            tp_world_init(&w, t, c.n_kv_heads);
            memset(&j, 0, sizeof j);
            j.V = V;
            j.w = &w;
            j.c = c;
            j.logits = logits;
            tp_run(t, samp_rank, &j);
            int bad_tok = 0, bad_rank = 0;
            double worst = 0;
            for (int m = 0; m < S_MODES; m++)
                for (int q = 0; q < nq; q++) {
                    float lp;
                    int32_t tok = sampler_sample(&s_modes[m], logits + (size_t)q * V, V, q,
                                                 3 * q + m, &lp, scratch);
                    for (int r = 0; r < t; r++) {
                        bad_rank += j.tok[r][m][q] != j.tok[0][m][q] ||
                                    memcmp(&j.lp[r][m][q], &j.lp[0][m][q], sizeof lp) != 0;
                        if (t == 1)
                            bad_tok += memcmp(&j.lp[r][m][q], &lp, sizeof lp) != 0;
                    }
                    if (j.tok[0][m][q] != tok) {
                        if (bad_tok++ < 5)
                            printf("\n    V %d t %d mode %d key %d: %d vs %d", V, t, m, q,
                                   j.tok[0][m][q], tok);
                    } else {
                        worst = fmax(worst, rel_err(j.lp[0][m][q], lp));
                    }
                }
            CU_ASSERT_EQUAL(bad_tok, 0);
            CU_ASSERT_EQUAL(bad_rank, 0);
            CU_ASSERT(worst <= 1e-6);
            printf("\n  V %4d t=%d: %d samples, %d differ, max rel log-prob err %.1e", V, t,
                   S_MODES * nq, bad_tok, worst);
            tp_world_free(&w);
        }
        free(scratch);
        free(logits);
    }
}

/* ---------------------------------------------------------------- checks */

static void test_check(void)
{
    char err[256];
    struct tfm_config c = cfgs[0]; /* H 8, K 2, F 48, V 301 */
    for (int t = 1; t <= 8; t *= 2) CU_ASSERT_EQUAL(tfm_tp_check(&c, t, err, sizeof err), 0);
    CU_ASSERT_EQUAL(tfm_tp_check(&c, 3, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "tensor parallel degree 3 must be a power of two") != NULL);
    CU_ASSERT_EQUAL(tfm_tp_check(&c, 0, err, sizeof err), -1);
    c.n_heads = 6;
    c.n_kv_heads = 6;
    CU_ASSERT_EQUAL(tfm_tp_check(&c, 4, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "tensor parallel degree 4 does not divide num_attention_heads = 6");
    c.n_kv_heads = 3;
    CU_ASSERT_EQUAL(tfm_tp_check(&c, 2, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "num_key_value_heads = 3") != NULL);
    c = cfgs[0];
    c.intermediate_size = 50;
    CU_ASSERT_EQUAL(tfm_tp_check(&c, 4, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "tensor parallel degree 4 does not divide intermediate_size = 50");
    c = cfgs[0];
    c.vocab_size = 5;
    CU_ASSERT_EQUAL(tfm_tp_check(&c, 8, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "exceeds vocab_size = 5") != NULL);
    c = cfgs[0];
    c.head_dim = 5; /* the model itself is invalid: tfm_config_check's message */
    CU_ASSERT_EQUAL(tfm_tp_check(&c, 2, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "head_dim") != NULL);
    /* shard shapes */
    struct tp_world w;
    tp_world_init(&w, 4, 2);
    struct tfm_tp tp;
    tp_world_tp(&w, &tp, &cfgs[0], 3);
    CU_ASSERT(tp.local.n_heads == 2 && tp.local.n_kv_heads == 1 && tp.kv_head0 == 1);
    CU_ASSERT(tp.q_head0 == 6 && tp.local.intermediate_size == 12);
    CU_ASSERT(tp.v0 == 225 && tp.v1 == 301 && tp.local.vocab_size == 76);
    CU_ASSERT(tp.kv_comm != NULL && tp.kv_comm->size == 2 && tp.kv_comm->rank == 1);
    /* the sampler's scratch stays within the bound sampler.h states */
    for (int m = 0; m < S_MODES; m++)
        CU_ASSERT(sampler_tp_scratch_floats(&s_modes[m], &tp) <= 2 * 76 + 6 * 301 + 6 * 4 + 1);
    tp_world_free(&w);
}

int main(void)
{
    openblas_set_num_threads(1);
    static const struct test_case cases[] = {
        {"tfm_tp_check messages and shard shapes", test_check},
        {"shard / unshard round trip; slices tile every tensor", test_shard_tiling},
        {"t = 1: backward, reduce, norm, AdamW are the single-rank code", test_t1_bitwise},
        {"forward TP 1/2/4 = single rank (log-probs, entropies)", test_forward},
        {"sampler_sample_tp = sampler_sample", test_sampler_tp},
        {"decode + sampling TP 1/2/4 = single rank (40 steps, 3 slots)", test_decode},
        {"one AdamW step TP 2/4 = single rank", test_train_step},
        {NULL, NULL}};
    static const struct test_suite suites[] = {{"tensor parallel", cases}, {NULL, NULL}};
    return test_main(suites);
}
