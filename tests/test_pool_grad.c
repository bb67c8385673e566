/*
 * The elastic hybrid pool's gradient weighting, on the real CPU model and GRPO trainer
 * (include/libra/trainer.h). A step's batch is split over the active replicas (core
 * data-parallel ones plus hybrids whose join has completed; a hybrid still joining gets
 * no share); each replica calls trainer_grads with norm_tokens = the model-generated
 * tokens of the WHOLE batch, the gradients are summed (MPI in production, float arrays
 * here), and every active replica applies the sum. Claims checked:
 *  - the parameters after the same data do not depend on how many replicas took part:
 *    one replica over three steps = 2 core, then 2 core + 1 hybrid, then 2 core + 1
 *    hybrid with a second hybrid joining (the effective learning rate does not change
 *    when a hybrid joins or leaves);
 *  - the reference's rule (per-replica means, mean over core + sum(hybrid) / DP, i.e.
 *    hybrids weighted (DP + H) / DP) gives a different step, by far more than the
 *    tolerance, so the first test can fail;
 *  - the reference's documented example in plain arrays.
 *
 * Tolerances. Gradients: only OpenBLAS's rounding for other row counts and the
 * summation order differ (float32, about 1e-7 relative), checked at 1e-5 of the
 * largest gradient entry as tests/test_trainer.c. Parameters: AdamW's update
 * lr m_hat / (sqrt(v_hat) + eps) changes by at most about lr / eps times a gradient
 * change, so eps = 1e-3 here (gradient entries are O(1e-3 .. 1e-1)) bounds that
 * amplification to 10 (1e-5 of 1e-2-sized gradients after three steps is a few 1e-6),
 * and keeps AdamW from being invariant to the gradient's scale, so a wrong weighting
 * shows in the parameters. Parameters must match within 2e-5 + 1e-5 |p|; the updates
 * themselves are O(lr = 1e-2). Replicas of one run apply the same summed gradient to
 * the same parameters: they must be bitwise equal.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "libra/rng.h"
#include "libra/trainer.h"
#include "testutil.h"

#define N_STEPS 3
#define N_SEQ 8
#define MAX_N 24
#define MAX_REP 4

#define GRAD_REL 1e-5  /* of the largest gradient entry */
#define PARAM_ABS 2e-5
#define PARAM_REL 1e-5

enum rep_role { CORE = 0, HYBRID = 1, JOINING = 2 };

static struct tfm_config model_config(void)
{
    return (struct tfm_config){.family = TFM_LLAMA, .vocab_size = 32, .hidden_size = 16,
                               .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 4,
                               .intermediate_size = 32, .max_position_embeddings = 64,
                               .rms_norm_eps = 1e-6f, .rope_theta = 10000.0f};
}

static struct adamw_config opt_config(void)
{
    return (struct adamw_config){.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-3f,
                                 .weight_decay = 0.01f, .clip_norm = 0.0f,
                                 .schedule = LR_CONSTANT};
}

static struct grpo_config grpo_config(void)
{
    return (struct grpo_config){.clip_low = 0.2, .clip_high = 0.28, .is_cap = 2.0,
                                .kl_coef = 0.0, .entropy_coef = 0.01, .adv_eps = 1e-6,
                                .baseline_decay = 0.9};
}

/* One step's batch: N_SEQ sequences with loss masks, behaviour log-probs, advantages. */
struct batch {
    int32_t ids[N_SEQ][MAX_N];
    uint8_t mask[N_SEQ][MAX_N];
    float behav[N_SEQ][MAX_N];
    struct train_seq s[N_SEQ];
    double norm_tokens; /* mask = 1 tokens at t > 0 over the whole batch */
};

/* Model-generated tokens the trainer scores in seqs[0..n) (mask[t] = 1, t > 0). */
static double gen_tokens(const struct train_seq *seqs, int n)
{
    double k = 0;
    for (int i = 0; i < n; i++)
        for (int t = 1; t < seqs[i].n; t++) k += seqs[i].mask[t];
    return k;
}

/* Log-probs of ids[1..n-1] under p (out[0] = 0). */
static void seq_logp(const struct tfm_config *c, const struct tfm_params *p, int n,
                     const int32_t *ids, double *out)
{
    struct tfm_state *s = tfm_state_create(c, MAX_N);
    int m = n - 1;
    struct tfm_batch b = {.n_seq = 1, .seq_len = &m, .tokens = ids, .targets = ids + 1,
                          .temperature = 1.0f};
    float lp[MAX_N];
    tfm_forward(c, p, s, &b, lp, NULL, NULL);
    out[0] = 0;
    for (int k = 0; k < m; k++) out[k + 1] = (double)lp[k];
    tfm_state_free(s);
}

/* Step `step`'s batch, keyed by (step, sequence): lengths 8..24, a prompt of 2..4
 * tokens (mask 0), in some sequences a tool output of 3 tokens (mask 0) in the middle;
 * behaviour log-probs = the initial model's plus noise of std 0.2 (off-policy: IS
 * weights vary, some are truncated); advantages of both signs. */
static void make_batch(struct batch *b, const struct tfm_config *c, const struct tfm_params *p0,
                       int step)
{
    memset(b, 0, sizeof *b);
    for (int i = 0; i < N_SEQ; i++) {
        struct rng r;
        rng_init(&r, 2024, (uint64_t)step, (uint64_t)i, 0);
        int n = 8 + (int)rng_below(&r, MAX_N - 8 + 1), prompt = 2 + (int)rng_below(&r, 3);
        int tool = (i % 3 == 1) ? prompt + 2 + (int)rng_below(&r, (uint64_t)(n - prompt - 5)) : -1;
        for (int k = 0; k < n; k++) {
            b->ids[i][k] = (int32_t)rng_below(&r, (uint64_t)c->vocab_size);
            b->mask[i][k] = k >= prompt && !(tool >= 0 && k >= tool && k < tool + 3);
        }
        double lp[MAX_N];
        seq_logp(c, p0, n, b->ids[i], lp);
        for (int k = 0; k < n; k++)
            b->behav[i][k] = b->mask[i][k] ? (float)(lp[k] + 0.2 * rng_normal(&r)) : NAN;
        double adv = (i % 2 ? -1.0 : 1.0) * (0.3 + rng_uniform(&r));
        b->s[i] = (struct train_seq){.n = n, .ids = b->ids[i], .mask = b->mask[i],
                                     .logp_behav = b->behav[i], .advantage = adv};
    }
    b->norm_tokens = gen_tokens(b->s, N_SEQ);
}

/* A trainer on a copy of p with a fresh optimizer. */
static void trainer_on_copy(struct trainer *t, const struct tfm_config *c,
                            const struct tfm_params *p)
{
    struct tfm_params q;
    tfm_params_alloc(&q, c);
    memcpy(q.mem, p->mem, p->n * sizeof(float));
    struct adamw_config oc = opt_config();
    struct grpo_config gc = grpo_config();
    trainer_init(t, c, &q, &oc, NULL, 0, &gc, MAX_N);
}

/* A trainer holding src's parameters and optimizer state: what a hybrid has once its
 * join (fetching the weights and its optimizer shard) has completed. */
static void trainer_clone(struct trainer *dst, const struct trainer *src)
{
    struct tfm_params q;
    tfm_params_alloc(&q, &src->mc);
    memcpy(q.mem, src->p.mem, src->p.n * sizeof(float));
    struct adamw o;
    adamw_init(&o, &src->opt.c, src->opt.n);
    memcpy(o.m, src->opt.m, src->opt.n * sizeof(float));
    memcpy(o.v, src->opt.v, src->opt.n * sizeof(float));
    o.step = src->opt.step;
    trainer_init(dst, &src->mc, &q, &src->opt.c, &o, 1, &src->gc, src->max_tokens);
}

/* Contiguous split of n sequences over n_active replicas: share r is
 * [first(r), first(r + 1)), first(r) = r n / n_active. */
static int share_first(int r, int n, int n_active) { return r * n / n_active; }

/* max |a - b| / max |b| (or max |a - b| when b = 0) */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = test_worse(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

/* Entries of p that differ from q by more than PARAM_ABS + PARAM_REL |q|; the
 * largest difference in *worst. */
static size_t params_off(const float *p, const float *q, size_t n, double *worst)
{
    size_t bad = 0;
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)p[i] - q[i]);
        *worst = fmax(*worst, d);
        if (d > PARAM_ABS + PARAM_REL * fabs((double)q[i])) bad++;
    }
    return bad;
}

/* One step over the replicas rep[0..n_rep) with roles role[]: the batch is split over
 * the active ones (CORE, HYBRID), a JOINING one gets no share and takes no part in
 * the sum or the update. The summed gradient goes to gsum (n floats) and into every
 * active replica's t->g before its trainer_apply; the norms they return go to norms[]
 * (0 for a joining replica). Returns the summed stats. */
static struct grpo_stats replicas_step(struct trainer *rep, const int *role, int n_rep,
                                       const struct batch *b, float *gsum, double *norms)
{
    int active[MAX_REP], n_active = 0;
    for (int r = 0; r < n_rep; r++)
        if (role[r] != JOINING) active[n_active++] = r;
    size_t n = rep[0].g.n;
    memset(gsum, 0, n * sizeof *gsum);
    struct grpo_stats st = {0};
    for (int k = 0; k < n_active; k++) {
        struct trainer *t = &rep[active[k]];
        int lo = share_first(k, N_SEQ, n_active), hi = share_first(k + 1, N_SEQ, n_active);
        trainer_grads(t, b->s + lo, hi - lo, b->norm_tokens, &st);
        for (size_t i = 0; i < n; i++) gsum[i] += t->g.mem[i];
    }
    for (int r = 0; r < n_rep; r++) {
        norms[r] = 0;
        if (role[r] == JOINING) continue;
        memcpy(rep[r].g.mem, gsum, n * sizeof *gsum);
        norms[r] = trainer_apply(&rep[r]);
    }
    return st;
}

/* Run B's layout per step: 2 core; 2 core + 1 hybrid (joined before the step);
 * 2 core + 1 hybrid + 1 hybrid still joining. */
static const int layout_n[N_STEPS] = {2, 3, 4};
static const int layout_role[N_STEPS][MAX_REP] = {
    {CORE, CORE}, {CORE, CORE, HYBRID}, {CORE, CORE, HYBRID, JOINING}};

/* 1: one replica over every sequence = the elastic pool's replicas, step by step. */
static void test_hybrid_joins_mid_run(void)
{
    struct tfm_config c = model_config();
    struct tfm_params p0;
    tfm_params_alloc(&p0, &c);
    tfm_params_init_random(&p0, &c, 5, 0.3f);
    struct batch *bt = xmalloc(N_STEPS * sizeof *bt);
    for (int s = 0; s < N_STEPS; s++) make_batch(&bt[s], &c, &p0, s);

    struct trainer a, rep[MAX_REP];
    trainer_on_copy(&a, &c, &p0);
    trainer_on_copy(&rep[0], &c, &p0);
    trainer_on_copy(&rep[1], &c, &p0);
    size_t n = a.p.n;
    float *gsum = xmalloc(n * sizeof *gsum);
    int n_made = 2;
    double gmax = 0;
    for (int s = 0; s < N_STEPS; s++) {
        /* joins: a hybrid holding the core's weights and optimizer state */
        for (; n_made < layout_n[s]; n_made++) trainer_clone(&rep[n_made], &rep[0]);

        struct grpo_stats sa = {0};
        trainer_grads(&a, bt[s].s, N_SEQ, bt[s].norm_tokens, &sa);
        float *ga = xmalloc(n * sizeof *ga);
        memcpy(ga, a.g.mem, n * sizeof *ga);
        double norm_a = trainer_apply(&a);

        double norms[MAX_REP];
        struct grpo_stats sb =
            replicas_step(rep, layout_role[s], layout_n[s], &bt[s], gsum, norms);
        int n_active = 0;
        for (int r = 0; r < layout_n[s]; r++) n_active += layout_role[s][r] != JOINING;
        double gd = rel_diff(gsum, ga, n);
        for (size_t i = 0; i < n; i++) gmax = fmax(gmax, fabs((double)ga[i]));
        printf("\n  step %d (%d replicas, %d active, %.0f tokens): gradient rel diff %.1e, "
               "norm %.6f vs %.6f", s + 1, layout_n[s], n_active,
               bt[s].norm_tokens, gd, norm_a, norms[0]);
        CU_ASSERT(gd <= GRAD_REL);
        CU_ASSERT_EQUAL(sb.tokens, bt[s].norm_tokens);
        CU_ASSERT_EQUAL(sa.tokens, bt[s].norm_tokens);
        CU_ASSERT_DOUBLE_EQUAL(sb.loss, sa.loss, 1e-6);
        CU_ASSERT(norm_a > 0);
        for (int r = 0; r < layout_n[s]; r++) {
            if (layout_role[s][r] == JOINING) continue;
            CU_ASSERT(fabs(norms[r] - norm_a) <= GRAD_REL * norm_a);
            CU_ASSERT_EQUAL(norms[r], norms[0]);
            CU_ASSERT_EQUAL(rep[r].opt.step, s + 1);
            /* same summed gradient on the same parameters: bitwise equal */
            CU_ASSERT(memcmp(rep[r].p.mem, rep[0].p.mem, n * sizeof(float)) == 0);
        }
        free(ga);
    }
    CU_ASSERT(gmax > 1e-2); /* the gradients are not vacuous */

    /* the joining hybrid took no share: an empty share adds an exact zero and no
     * tokens (whole-batch normalisation: an empty replica cannot dilute the sum) */
    struct grpo_stats sj = {0};
    trainer_grads(&rep[3], NULL, 0, bt[2].norm_tokens, &sj);
    for (size_t i = 0; i < n; i++) CU_ASSERT_EQUAL_FATAL(rep[3].g.mem[i], 0.0f);
    CU_ASSERT_EQUAL(sj.tokens, 0.0);
    CU_ASSERT_EQUAL(rep[3].opt.step, 2); /* its state is what it fetched */

    double worst, moved;
    size_t bad = params_off(rep[0].p.mem, a.p.mem, n, &worst);
    params_off(a.p.mem, p0.mem, n, &moved);
    printf("\n  after %d steps: parameters moved up to %.2e, A vs B differ up to %.2e "
           "(%zu entries past the tolerance)", N_STEPS, moved, worst, bad);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(moved > 1e-2); /* three updates of lr = 1e-2 */

    free(gsum);
    for (int r = 0; r < n_made; r++) trainer_free(&rep[r]);
    trainer_free(&a);
    free(bt);
    tfm_params_free(&p0);
}

/* The correct combination of per-replica MEAN gradients g_r (each normalised by its
 * own share's tokens n_r): sum over active replicas of n_r g_r / sum n_r, i.e. every
 * token of the batch weighted alike whoever scored it. */
static void combine_correct(const float *const *g, const double *tokens, const int *active,
                            int n_rep, size_t n, float *out)
{
    double total = 0;
    for (int r = 0; r < n_rep; r++)
        if (active[r]) total += tokens[r];
    for (size_t i = 0; i < n; i++) {
        double s = 0;
        for (int r = 0; r < n_rep; r++)
            if (active[r]) s += tokens[r] * g[r][i];
        out[i] = total > 0 ? (float)(s / total) : 0.0f;
    }
}

/* The reference's combination: mean over the dp core replicas + the active hybrids'
 * sum / dp (hybrids at weight (dp + H) / dp of the total). */
static void combine_reference(const float *const *g, const int *role, int n_rep, size_t n,
                              float *out)
{
    int dp = 0;
    for (int r = 0; r < n_rep; r++) dp += role[r] == CORE;
    for (size_t i = 0; i < n; i++) {
        double core = 0, hyb = 0;
        for (int r = 0; r < n_rep; r++) {
            if (role[r] == CORE) core += g[r][i];
            if (role[r] == HYBRID) hyb += g[r][i];
        }
        out[i] = (float)(core / dp + hyb / dp);
    }
}

/* 2: step 2 (2 core + 1 hybrid) under the reference's rule, built from per-replica
 * gradients, differs from the single replica's step; the correct combination of the
 * same per-replica gradients does not. */
static void test_reference_weighting_differs(void)
{
    struct tfm_config c = model_config();
    struct tfm_params p0;
    tfm_params_alloc(&p0, &c);
    tfm_params_init_random(&p0, &c, 5, 0.3f);
    struct batch *bt = xmalloc(2 * sizeof *bt);
    make_batch(&bt[0], &c, &p0, 0);
    make_batch(&bt[1], &c, &p0, 1);

    struct trainer a;
    trainer_on_copy(&a, &c, &p0);
    struct grpo_stats st = {0};
    trainer_grads(&a, bt[0].s, N_SEQ, bt[0].norm_tokens, &st);
    trainer_apply(&a);
    size_t n = a.p.n;

    /* step 2's replicas, all at the state after step 1 */
    enum { N_REP = 3 };
    const int *role = layout_role[1];
    struct trainer rep[N_REP], ref_apply, cor_apply;
    for (int r = 0; r < N_REP; r++) trainer_clone(&rep[r], &a);
    trainer_clone(&ref_apply, &a);
    trainer_clone(&cor_apply, &a);

    /* per-replica mean gradients: each normalised by its own share's tokens */
    float *g[N_REP];
    double tokens[N_REP];
    int active[N_REP];
    for (int r = 0; r < N_REP; r++) {
        int lo = share_first(r, N_SEQ, N_REP), hi = share_first(r + 1, N_SEQ, N_REP);
        tokens[r] = gen_tokens(bt[1].s + lo, hi - lo);
        active[r] = 1;
        trainer_grads(&rep[r], bt[1].s + lo, hi - lo, tokens[r], &st);
        g[r] = xmalloc(n * sizeof *g[r]);
        memcpy(g[r], rep[r].g.mem, n * sizeof *g[r]);
    }
    CU_ASSERT(tokens[0] != tokens[1] || tokens[1] != tokens[2]); /* uneven shares */

    trainer_grads(&a, bt[1].s, N_SEQ, bt[1].norm_tokens, &st); /* the right gradient */
    combine_correct((const float *const *)g, tokens, active, N_REP, n, cor_apply.g.mem);
    combine_reference((const float *const *)g, role, N_REP, n, ref_apply.g.mem);
    double d_cor = rel_diff(cor_apply.g.mem, a.g.mem, n);
    double d_ref = rel_diff(ref_apply.g.mem, a.g.mem, n);

    printf("\n  shares of %.0f / %.0f / %.0f tokens; gradient vs one replica: correct %.1e, "
           "reference %.2f (of max |g|)", tokens[0], tokens[1], tokens[2], d_cor, d_ref);
    CU_ASSERT(d_cor <= GRAD_REL);
    CU_ASSERT(d_ref > 1000 * GRAD_REL);

    /* and after AdamW: the correct step lands on the single replica's parameters, the
     * reference's does not */
    trainer_apply(&a);
    trainer_apply(&cor_apply);
    trainer_apply(&ref_apply);
    double w_cor, w_ref;
    CU_ASSERT_EQUAL(params_off(cor_apply.p.mem, a.p.mem, n, &w_cor), 0);
    size_t off = params_off(ref_apply.p.mem, a.p.mem, n, &w_ref);
    printf("\n  parameters after step 2 vs one replica: correct %.1e, reference %.1e "
           "(%zu entries past the tolerance)", w_cor, w_ref, off);
    CU_ASSERT(off > n / 10);
    CU_ASSERT(w_ref > 100 * PARAM_ABS);

    for (int r = 0; r < N_REP; r++) {
        free(g[r]);
        trainer_free(&rep[r]);
    }
    trainer_free(&cor_apply);
    trainer_free(&ref_apply);
    trainer_free(&a);
    free(bt);
    tfm_params_free(&p0);
}

/* 3: the reference's documented example: core [1,3], [5,7], hybrid [2,4]. */
static void test_reference_example(void)
{
    static const float g0[2] = {1, 3}, g1[2] = {5, 7}, g2[2] = {2, 4};
    const float *g[3] = {g0, g1, g2};
    static const double tokens[3] = {10, 10, 10};
    static const int role_joined[3] = {CORE, CORE, HYBRID};
    static const int role_joining[3] = {CORE, CORE, JOINING};
    static const int all[3] = {1, 1, 1}, core_only[3] = {1, 1, 0};
    float out[2];

    combine_reference(g, role_joined, 3, 2, out); /* [3,5] + [2,4] / 2 */
    CU_ASSERT_DOUBLE_EQUAL(out[0], 4.0, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(out[1], 7.0, 1e-6);
    combine_reference(g, role_joining, 3, 2, out);
    CU_ASSERT_DOUBLE_EQUAL(out[0], 3.0, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(out[1], 5.0, 1e-6);

    combine_correct(g, tokens, all, 3, 2, out); /* the mean of three equal shares */
    CU_ASSERT_DOUBLE_EQUAL(out[0], 8.0 / 3.0, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(out[1], 14.0 / 3.0, 1e-6);
    combine_correct(g, tokens, core_only, 3, 2, out); /* hybrid still joining */
    CU_ASSERT_DOUBLE_EQUAL(out[0], 3.0, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(out[1], 5.0, 1e-6);

    /* uneven shares weigh by tokens: 30 tokens of [1,3] and 10 of [5,7] */
    static const double uneven[3] = {30, 10, 0};
    combine_correct(g, uneven, core_only, 3, 2, out);
    CU_ASSERT_DOUBLE_EQUAL(out[0], 2.0, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(out[1], 4.0, 1e-6);
}

int main(void)
{
    static const struct test_case cases[] = {
        {"hybrid joins mid-run: parameters as with one replica", test_hybrid_joins_mid_run},
        {"reference weighting would differ", test_reference_weighting_differs},
        {"reference's documented example", test_reference_example},
        {NULL, NULL}};
    static const struct test_suite suites[] = {{"pool_grad", cases}, {NULL, NULL}};
    return test_main(suites);
}
