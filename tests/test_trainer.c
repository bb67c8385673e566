/*
 * The GRPO trainer (src/train/trainer.c) on a tiny random Llama-style model and five
 * sequences (prompt tokens with mask 0, then model-generated ones):
 *  - one step with advantage +1 on one sequence and -1 on another raises the first's
 *    log-prob and lowers the second's; the stats of an on-policy step;
 *  - trainer_grads = central finite differences of the GRPO loss, written here
 *    independently from tfm_forward's log-probs and entropies (behaviour log-probs off
 *    the policy, truncated IS weights, k3 KL to a reference moved off the initial
 *    parameters, entropy bonus), at temperature 1 and 0.8;
 *  - data parallelism: two trainers over halves of the sequences sum to one over all;
 *  - packing: gradients do not depend on max_tokens (nor on sequences of < 2 ids);
 *  - a batch of zero advantages without KL or entropy gives a zero gradient.
 *
 * Tolerances. Finite differences: as tests/test_tfm_grad.c (h = 3e-3 on O(0.3)
 * parameters), scaled to a loss divided by norm_tokens = 20: |fd - g| <= 3e-5 +
 * 3e-3 |g|; the run prints the worst error / tolerance. Replica sums and packing:
 * only OpenBLAS's rounding for different row counts differs, 1e-5 of the largest
 * gradient entry.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/rng.h"
#include "libra/trainer.h"
#include "testutil.h"

#define N_SEQ 5
#define MAX_N 12
#define MAX_TENSORS 64

static struct tfm_config model_config(void)
{
    return (struct tfm_config){.family = TFM_LLAMA, .vocab_size = 13, .hidden_size = 8,
                               .n_layers = 2, .n_heads = 2, .n_kv_heads = 2, .head_dim = 4,
                               .intermediate_size = 12, .max_position_embeddings = 64,
                               .rms_norm_eps = 1e-6f, .rope_theta = 10000.0f};
}

static struct adamw_config opt_config(void)
{
    return (struct adamw_config){.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                 .weight_decay = 0.0f, .clip_norm = 0.0f,
                                 .schedule = LR_CONSTANT};
}

static struct grpo_config grpo_config(double kl, double ent)
{
    return (struct grpo_config){.clip_low = 0.2, .clip_high = 0.28, .is_cap = 1.5,
                                .kl_coef = kl, .entropy_coef = ent, .adv_eps = 1e-6,
                                .baseline_decay = 0.9};
}

/* Parameters: random, norms moved off 1 so every tensor is generic. */
static void init_params(struct tfm_params *p, const struct tfm_config *c, uint64_t seed)
{
    tfm_params_alloc(p, c);
    tfm_params_init_random(p, c, seed, 0.3f);
    struct rng r;
    rng_init(&r, seed, 7, 0, 0);
    for (size_t i = 0; i < p->n; i++) p->mem[i] += (float)(0.1 * rng_normal(&r));
}

struct seq_data {
    int32_t ids[N_SEQ][MAX_N];
    uint8_t mask[N_SEQ][MAX_N];
    float behav[N_SEQ][MAX_N];
    struct train_seq s[N_SEQ];
    double norm_tokens; /* mask = 1 tokens at t > 0, all sequences */
};

/* Log-probs of ids[1..n-1] of one sequence at temperature temp (out[0] = 0), and
 * the entropies of the distributions predicting them (ent may be NULL). */
static void seq_logp(const struct tfm_config *c, const struct tfm_params *p, int n,
                     const int32_t *ids, float temp, double *out, double *ent)
{
    struct tfm_state *s = tfm_state_create(c, MAX_N);
    int m = n - 1;
    struct tfm_batch b = {.n_seq = 1, .seq_len = &m, .tokens = ids, .targets = ids + 1,
                          .temperature = temp};
    float lp[MAX_N], h[MAX_N];
    tfm_forward(c, p, s, &b, lp, h, NULL);
    out[0] = 0;
    if (ent) ent[0] = 0;
    for (int k = 0; k < m; k++) {
        out[k + 1] = lp[k];
        if (ent) ent[k + 1] = h[k];
    }
    tfm_state_free(s);
}

/* Five sequences of 9, 7, 12, 1 (nothing to score) and 8 ids; the first 3 (prompt)
 * have mask 0, one generated token in the middle of the third too (a tool output).
 * Behaviour log-probs: the model's own at temperature temp, plus noise of std
 * behav_noise (0 = exactly on-policy). */
static void make_seqs(struct seq_data *d, const struct tfm_config *c, const struct tfm_params *p,
                      float temp, double behav_noise)
{
    static const int len[N_SEQ] = {9, 7, 12, 1, 8};
    static const double adv[N_SEQ] = {0.9, -1.1, 0.4, 2.0, -0.6};
    struct rng r;
    rng_init(&r, 11, 0, 0, 0);
    memset(d, 0, sizeof *d);
    for (int i = 0; i < N_SEQ; i++) {
        double lp[MAX_N];
        for (int k = 0; k < len[i]; k++) {
            d->ids[i][k] = (int32_t)rng_below(&r, (uint64_t)c->vocab_size);
            d->mask[i][k] = k >= 3;
        }
        if (i == 2) d->mask[i][6] = 0;
        seq_logp(c, p, len[i], d->ids[i], temp, lp, NULL);
        for (int k = 0; k < len[i]; k++) {
            d->behav[i][k] = d->mask[i][k] ? (float)(lp[k] + behav_noise * rng_normal(&r)) : NAN;
            if (k > 0 && d->mask[i][k]) d->norm_tokens += 1;
        }
        d->s[i] = (struct train_seq){.n = len[i], .ids = d->ids[i], .mask = d->mask[i],
                                     .logp_behav = d->behav[i], .advantage = adv[i]};
    }
}

/* A trainer on a copy of p (the trainer takes ownership of its parameters). */
static void trainer_on_copy(struct trainer *t, const struct tfm_config *c,
                            const struct tfm_params *p, const struct grpo_config *gc,
                            int max_tokens)
{
    struct tfm_params q;
    tfm_params_alloc(&q, c);
    memcpy(q.mem, p->mem, p->n * sizeof(float));
    struct adamw_config oc = opt_config();
    trainer_init(t, c, &q, &oc, NULL, 0, gc, max_tokens);
    CU_ASSERT_PTR_NULL(q.mem); /* ownership passed */
}

/* Sum of the masked log-probs of sequence i under p. */
static double masked_logp(const struct tfm_config *c, const struct tfm_params *p,
                          const struct seq_data *d, int i)
{
    double lp[MAX_N], sum = 0;
    seq_logp(c, p, d->s[i].n, d->ids[i], 1.0f, lp, NULL);
    for (int k = 1; k < d->s[i].n; k++)
        if (d->mask[i][k]) sum += lp[k];
    return sum;
}

/* (a) one step moves the log-probs the way the advantages say. */
/* Two on-policy sequences of the seeded model, advantages +1 and -1. */
static void two_seqs(struct tfm_config *c, struct tfm_params *p, struct seq_data *d,
                     struct train_seq two[2])
{
    *c = model_config();
    init_params(p, c, 1);
    make_seqs(d, c, p, 1.0f, 0.0);
    two[0] = d->s[0];
    two[1] = d->s[1];
    two[0].advantage = 1.0;
    two[1].advantage = -1.0;
}

static void test_one_step(void)
{
    struct tfm_config c;
    struct tfm_params p;
    struct seq_data d;
    struct train_seq two[2];
    two_seqs(&c, &p, &d, two);
    double norm = 0;
    for (int i = 0; i < 2; i++)
        for (int k = 1; k < two[i].n; k++) norm += two[i].mask[k];

    struct grpo_config gc = grpo_config(0, 0);
    struct trainer t;
    trainer_on_copy(&t, &c, &p, &gc, 32);
    double before0 = masked_logp(&c, &t.p, &d, 0), before1 = masked_logp(&c, &t.p, &d, 1);
    struct grpo_stats st = {0};
    trainer_grads(&t, two, 2, norm, &st);
    /* on-policy: rho = w_is = 1, nothing clipped or truncated;
     * pg_loss = -sum A / norm over the tokens */
    double m0 = 0, m1 = 0;
    for (int k = 1; k < two[0].n; k++) m0 += two[0].mask[k];
    for (int k = 1; k < two[1].n; k++) m1 += two[1].mask[k];
    CU_ASSERT_EQUAL(st.tokens, norm);
    CU_ASSERT_EQUAL(st.clipped, 0.0);
    CU_ASSERT_EQUAL(st.is_truncated, 0.0);
    CU_ASSERT_DOUBLE_EQUAL(st.ratio_behav, norm, 1e-4);
    CU_ASSERT_DOUBLE_EQUAL(st.pg_loss, -(m0 - m1) / norm, 1e-4);
    CU_ASSERT_DOUBLE_EQUAL(st.loss, st.pg_loss, 1e-12);
    CU_ASSERT(st.entropy > 0); /* reported even without an entropy bonus */
    CU_ASSERT_EQUAL(st.kl, 0.0);

    double ss = 0;
    for (size_t i = 0; i < t.g.n; i++) ss += (double)t.g.mem[i] * t.g.mem[i];
    double gnorm = trainer_apply(&t);
    CU_ASSERT_DOUBLE_EQUAL(gnorm, sqrt(ss), 1e-6 * sqrt(ss));
    CU_ASSERT(gnorm > 0);
    CU_ASSERT_EQUAL(t.opt.step, 1);
    double after0 = masked_logp(&c, &t.p, &d, 0), after1 = masked_logp(&c, &t.p, &d, 1);
    printf("\n  A = +1: sum log-prob %.4f -> %.4f;  A = -1: %.4f -> %.4f", before0, after0,
           before1, after1);
    CU_ASSERT(after0 > before0 + 1e-3);
    CU_ASSERT(after1 < before1 - 1e-3);
    trainer_free(&t);
    trainer_free(&t); /* a freed trainer frees again as a no-op */
    tfm_params_free(&p);
}

/* The GRPO loss of grpo.h written out: logp and H from tfm_forward under p, logp_prox
 * the log-probs under the parameters the gradient is taken at (fixed), logp_ref under
 * the reference. */
static double grpo_loss(const struct tfm_config *c, const struct tfm_params *p,
                        const struct tfm_params *ref, const struct seq_data *d,
                        double prox[N_SEQ][MAX_N], const struct grpo_config *gc, float temp)
{
    double L = 0;
    for (int i = 0; i < N_SEQ; i++) {
        int n = d->s[i].n;
        if (n < 2) continue;
        double lp[MAX_N], h[MAX_N], lr[MAX_N];
        seq_logp(c, p, n, d->ids[i], temp, lp, h);
        seq_logp(c, ref, n, d->ids[i], temp, lr, NULL);
        double A = d->s[i].advantage;
        for (int k = 1; k < n; k++) {
            if (!d->mask[i][k]) continue;
            double w_is = fmin(exp(prox[i][k] - d->behav[i][k]), gc->is_cap);
            double rho = exp(lp[k] - prox[i][k]);
            double rho_c = fmin(fmax(rho, 1 - gc->clip_low), 1 + gc->clip_high);
            double pg = w_is * fmax(-A * rho, -A * rho_c);
            double x = lr[k] - lp[k], kl = exp(x) - x - 1;
            L += (pg + gc->kl_coef * kl - gc->entropy_coef * h[k]) / d->norm_tokens;
        }
    }
    return L;
}

/* (b) trainer_grads = finite differences of the loss on entries of every tensor. */
static void grad_check(float temp)
{
    struct tfm_config c = model_config();
    struct tfm_params p;
    init_params(&p, &c, 2);
    struct seq_data d;
    make_seqs(&d, &c, &p, temp, 0.3);
    struct grpo_config gc = grpo_config(0.05, 0.02);
    struct trainer t;
    trainer_on_copy(&t, &c, &p, &gc, 32);
    t.temperature = temp;
    CU_ASSERT_EQUAL_FATAL(t.have_ref, 1);
    struct rng r;
    rng_init(&r, 5, 0, 0, 0);
    for (size_t i = 0; i < t.ref.n; i++) t.ref.mem[i] += (float)(0.05 * rng_normal(&r));

    double prox[N_SEQ][MAX_N];
    for (int i = 0; i < N_SEQ; i++) seq_logp(&c, &p, d.s[i].n, d.ids[i], temp, prox[i], NULL);
    struct grpo_stats st = {0};
    trainer_grads(&t, d.s, N_SEQ, d.norm_tokens, &st);
    double L0 = grpo_loss(&c, &p, &t.ref, &d, prox, &gc, temp);
    CU_ASSERT_DOUBLE_EQUAL(st.loss, L0, 1e-6);
    CU_ASSERT_EQUAL(st.tokens, d.norm_tokens);
    CU_ASSERT(st.is_truncated > 0); /* the noise pushed some ratios past is_cap */
    CU_ASSERT(st.kl > 0);

    struct tfm_tensor tp[MAX_TENSORS], tg[MAX_TENSORS];
    int n = tfm_tensors(&c, &p, tp, MAX_TENSORS);
    CU_ASSERT_EQUAL_FATAL(tfm_tensors(&c, &t.g, tg, MAX_TENSORS), n);
    double worst = 0, gmax = 0;
    int bad = 0, checked = 0;
    for (int i = 0; i < n; i++) {
        size_t cols = tp[i].ndim == 2 ? (size_t)tp[i].dims[1] : 1;
        size_t sz = (size_t)tp[i].dims[0] * cols;
        for (int j = 0; j < 3; j++) {
            size_t idx = rng_below(&r, sz);
            if (j == 0 && strcmp(tp[i].name, "model.embed_tokens.weight") == 0)
                idx = (size_t)d.ids[0][2] * cols + rng_below(&r, cols); /* a used row */
            float *x = tp[i].data + idx, v = *x, xp = v + 3e-3f, xm = v - 3e-3f;
            *x = xp;
            double Lp = grpo_loss(&c, &p, &t.ref, &d, prox, &gc, temp);
            *x = xm;
            double Lm = grpo_loss(&c, &p, &t.ref, &d, prox, &gc, temp);
            *x = v;
            double fd = (Lp - Lm) / ((double)xp - (double)xm), an = tg[i].data[idx];
            double tol = 3e-5 + 3e-3 * fabs(an), err = fabs(fd - an);
            worst = fmax(worst, err / tol);
            gmax = fmax(gmax, fabs(an));
            checked++;
            if (err > tol && bad++ < 10)
                printf("\n    %s[%zu]: trainer %.6g, finite difference %.6g", tp[i].name, idx,
                       an, fd);
        }
    }
    printf("\n  T = %.1f: %d entries, largest |g| %.2e, worst error / tolerance %.3f",
           (double)temp, checked, gmax, worst);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(gmax > 1e-2); /* the check is not vacuous */
    trainer_free(&t);
    tfm_params_free(&p);
}

static void test_grad_t1(void) { grad_check(1.0f); }
static void test_grad_t08(void) { grad_check(0.8f); }

/* max |a - b| / max |b| */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = test_worse(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

static void stats_equal(const struct grpo_stats *a, const struct grpo_stats *b)
{
    CU_ASSERT_DOUBLE_EQUAL(a->loss, b->loss, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(a->pg_loss, b->pg_loss, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(a->kl, b->kl, 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(a->entropy, b->entropy, 1e-4);
    CU_ASSERT_EQUAL(a->clipped, b->clipped);
    CU_ASSERT_EQUAL(a->is_truncated, b->is_truncated);
    CU_ASSERT_DOUBLE_EQUAL(a->ratio_behav, b->ratio_behav, 1e-5);
    CU_ASSERT_EQUAL(a->tokens, b->tokens);
}

/* (c) two replicas over halves sum to one over all; (d) max_tokens does not matter. */
static void test_replicas_and_packing(void)
{
    struct tfm_config c = model_config();
    struct tfm_params p;
    init_params(&p, &c, 3);
    struct seq_data d;
    make_seqs(&d, &c, &p, 1.0f, 0.3);
    struct grpo_config gc = grpo_config(0.05, 0.02);

    struct trainer all, r0, r1;
    trainer_on_copy(&all, &c, &p, &gc, 64);
    trainer_on_copy(&r0, &c, &p, &gc, 64);
    trainer_on_copy(&r1, &c, &p, &gc, 64);
    struct grpo_stats s_all = {0}, s_rep = {0};
    trainer_grads(&all, d.s, N_SEQ, d.norm_tokens, &s_all);
    trainer_grads(&r0, d.s, 2, d.norm_tokens, &s_rep);
    trainer_grads(&r1, d.s + 2, N_SEQ - 2, d.norm_tokens, &s_rep);
    for (size_t i = 0; i < r0.g.n; i++) r0.g.mem[i] += r1.g.mem[i];
    double rep = rel_diff(r0.g.mem, all.g.mem, all.g.n);
    CU_ASSERT(rep <= 1e-5);
    stats_equal(&s_rep, &s_all);

    /* packing: batches of <= 12 tokens (the longest sequence has 12 ids, 11 scored),
     * 16, and 64 (all in one) */
    static const int caps[] = {12, 16};
    double pack = 0;
    for (int k = 0; k < 2; k++) {
        struct trainer tk;
        trainer_on_copy(&tk, &c, &p, &gc, caps[k]);
        struct grpo_stats sk = {0};
        trainer_grads(&tk, d.s, N_SEQ, d.norm_tokens, &sk);
        pack = fmax(pack, rel_diff(tk.g.mem, all.g.mem, all.g.n));
        stats_equal(&sk, &s_all);
        /* trainer_grads zeroes the gradient first: a second call gives the same */
        struct grpo_stats sk2 = {0};
        float g0 = tk.g.mem[tk.g.n / 3];
        trainer_grads(&tk, d.s, N_SEQ, d.norm_tokens, &sk2);
        CU_ASSERT_EQUAL(tk.g.mem[tk.g.n / 3], g0);
        trainer_free(&tk);
    }
    CU_ASSERT(pack <= 1e-5);
    printf("\n  replicas summed vs one: %.1e; max_tokens 12 / 16 vs 64: %.1e (of max |g|)", rep,
           pack);
    trainer_free(&r1);
    trainer_free(&r0);
    trainer_free(&all);
    tfm_params_free(&p);
}

/* Zero advantages, no KL, no entropy: nothing to learn, a zero gradient (the backward
 * is skipped), the stats still count the tokens. A resumed optimizer is taken over. */
static void test_zero_advantage_and_resume(void)
{
    struct tfm_config c = model_config();
    struct tfm_params p;
    init_params(&p, &c, 4);
    struct seq_data d;
    make_seqs(&d, &c, &p, 1.0f, 0.1);
    for (int i = 0; i < N_SEQ; i++) d.s[i].advantage = 0;
    struct grpo_config gc = grpo_config(0, 0);
    struct adamw_config oc = opt_config();
    struct adamw opt;
    adamw_init(&opt, &oc, p.n);
    opt.step = 7;
    opt.m[0] = 0.25f;
    struct tfm_params q;
    tfm_params_alloc(&q, &c);
    memcpy(q.mem, p.mem, p.n * sizeof(float));
    struct trainer t;
    trainer_init(&t, &c, &q, &oc, &opt, 1, &gc, 16);
    CU_ASSERT_PTR_NULL(opt.m);
    CU_ASSERT_EQUAL(t.opt.step, 7);
    CU_ASSERT_EQUAL(t.opt.m[0], 0.25f);
    CU_ASSERT_EQUAL(t.have_ref, 0);
    t.g.mem[5] = 1.0f; /* stale: must be zeroed */
    struct grpo_stats st = {0};
    trainer_grads(&t, d.s, N_SEQ, d.norm_tokens, &st);
    for (size_t i = 0; i < t.g.n; i++) CU_ASSERT_EQUAL_FATAL(t.g.mem[i], 0.0f);
    CU_ASSERT_EQUAL(st.tokens, d.norm_tokens);
    CU_ASSERT_EQUAL(st.loss, 0.0);
    CU_ASSERT_EQUAL(st.clipped, 0.0);
    trainer_grads(&t, NULL, 0, 0, &st); /* an empty share */
    trainer_free(&t);
    tfm_params_free(&p);
}

/* A gradient with a NaN or an infinity is never applied: parameters, moments and the
 * step count stay; the first tensor holding it is named; a finite one then applies. */
static void test_nonfinite_not_applied(void)
{
    struct tfm_config c;
    struct tfm_params p;
    struct seq_data d;
    struct train_seq two[2];
    two_seqs(&c, &p, &d, two);
    struct grpo_config gc = grpo_config(0, 0);
    struct trainer t;
    trainer_on_copy(&t, &c, &p, &gc, 32);
    char name[96];
    const float bad[2] = {NAN, -INFINITY};
    for (int k = 0; k < 2; k++) {
        struct grpo_stats st = {0};
        trainer_grads(&t, two, 2, 10.0, &st);
        CU_ASSERT_EQUAL(trainer_nonfinite_grad(&t, name, sizeof name), 0);
        struct tfm_tensor ts[64];
        int nt = tfm_tensors(&c, &t.g, ts, 64);
        CU_ASSERT_FATAL(nt > 3 && nt <= 64);
        ts[3].data[1] = bad[k];
        float *p0 = malloc(t.p.n * sizeof *p0), *m0 = malloc(t.p.n * sizeof *m0);
        memcpy(p0, t.p.mem, t.p.n * sizeof *p0);
        memcpy(m0, t.opt.m, t.p.n * sizeof *m0);
        int applied = 1;
        double norm = trainer_apply_guarded(&t, 0, &applied);
        CU_ASSERT(!isfinite(norm));
        CU_ASSERT_EQUAL(applied, 0);
        CU_ASSERT_EQUAL(t.opt.step, 0);
        CU_ASSERT(memcmp(p0, t.p.mem, t.p.n * sizeof *p0) == 0);
        CU_ASSERT(memcmp(m0, t.opt.m, t.p.n * sizeof *m0) == 0);
        CU_ASSERT_EQUAL(trainer_nonfinite_grad(&t, name, sizeof name), 1);
        CU_ASSERT_STRING_EQUAL(name, ts[3].name);
        free(p0);
        free(m0);
    }
    /* a finite gradient with skip set (the caller's loss was not finite): not applied */
    struct grpo_stats st = {0};
    trainer_grads(&t, two, 2, 10.0, &st);
    int applied = 1;
    CU_ASSERT(isfinite(trainer_apply_guarded(&t, 1, &applied)));
    CU_ASSERT_EQUAL(applied, 0);
    CU_ASSERT_EQUAL(t.opt.step, 0);
    trainer_grads(&t, two, 2, 10.0, &st);
    CU_ASSERT(isfinite(trainer_apply_guarded(&t, 0, &applied)));
    CU_ASSERT_EQUAL(applied, 1);
    CU_ASSERT_EQUAL(t.opt.step, 1);
    trainer_free(&t);
    tfm_params_free(&p);
}

int main(void)
{
    static const struct test_case cases[] = {
        {"one step: A > 0 raises, A < 0 lowers the log-prob", test_one_step},
        {"gradient = finite differences of the GRPO loss, T = 1", test_grad_t1},
        {"gradient = finite differences of the GRPO loss, T = 0.8", test_grad_t08},
        {"replicas sum to one trainer; packing does not matter", test_replicas_and_packing},
        {"zero advantages: zero gradient; resumed optimizer", test_zero_advantage_and_resume},
        {"a NaN / inf gradient is not applied and its tensor is named",
         test_nonfinite_not_applied},
        {NULL, NULL}};
    static const struct test_suite suites[] = {{"trainer", cases}, {NULL, NULL}};
    return test_main(suites);
}
