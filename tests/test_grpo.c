/*
 * GRPO advantages and per-token weights (src/train/grpo.c) against hand-computed
 * values: group normalisation with the unbiased std, zero-variance groups, the
 * running baseline of singleton groups, the std floor; the PPO clip on both sides for
 * both signs of A (gradient on / off exactly as grpo.h says), the truncated
 * behaviour importance weight, masked tokens, k3 KL value and derivative, entropy
 * weights, token normalisation and the stats. Finally w_t = -dL/dlogp_t by central
 * finite differences of the loss the stats report, for random tokens away from the
 * clip boundaries (float inputs, double loss: differences of 1e-3 agree to ~1e-6).
 */
#include <math.h>
#include <string.h>

#include "libra/grpo.h"
#include "libra/rng.h"
#include "testutil.h"

static struct grpo_config base(void)
{
    return (struct grpo_config){.clip_low = 0.2, .clip_high = 0.28, .is_cap = 2.0,
                                .kl_coef = 0.0, .entropy_coef = 0.0, .adv_eps = 1e-6,
                                .baseline_decay = 0.9};
}

/* ---------------------------------------------------------------- advantages */

static void test_group_advantages(void)
{
    struct grpo_config c = base();
    struct grpo_baseline bl = {0, 0};
    /* mean 0.5, unbiased var = 4 * 0.25 / 3, std = 0.577350: A = +-0.5 / (std + 1e-6) */
    double r[4] = {1, 0, 0, 1}, a[4];
    CU_ASSERT_EQUAL(grpo_advantages(&c, r, 4, &bl, a), 0);
    double want = 0.5 / (sqrt(1.0 / 3.0) + 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(want, 0.866024, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(a[0], want, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(a[1], -want, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(a[2], -want, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(a[3], want, 1e-12);
    CU_ASSERT_EQUAL(bl.set, 0); /* groups leave the singleton baseline alone */

    /* {3, 1, 2}: mean 2, std 1 -> (1, -1, 0) / (1 + 1e-6) */
    double r3[3] = {3, 1, 2}, a3[3];
    CU_ASSERT_EQUAL(grpo_advantages(&c, r3, 3, &bl, a3), 0);
    CU_ASSERT_DOUBLE_EQUAL(a3[0], 1 / (1 + 1e-6), 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(a3[1], -1 / (1 + 1e-6), 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(a3[2], 0, 1e-12);

    /* the std floor: {0, 1}, std = 0.707107, eps 0.5 -> +-0.5 / 1.207107 */
    c.adv_eps = 0.5;
    double r2[2] = {0, 1}, a2[2];
    CU_ASSERT_EQUAL(grpo_advantages(&c, r2, 2, &bl, a2), 0);
    CU_ASSERT_DOUBLE_EQUAL(a2[0], -0.5 / (sqrt(0.5) + 0.5), 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(a2[1], 0.414214, 1e-6);

    /* an empty group writes nothing */
    CU_ASSERT_EQUAL(grpo_advantages(&c, r2, 0, &bl, a2), 0);
}

static void test_zero_variance(void)
{
    struct grpo_config c = base();
    struct grpo_baseline bl = {0, 0};
    double r[3] = {0.3, 0.3, 0.3}, a[3] = {7, 7, 7};
    CU_ASSERT_EQUAL(grpo_advantages(&c, r, 3, &bl, a), 1);
    for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL(a[i], 0.0);
    /* std 7e-7 <= eps 1e-6: still zero-variance */
    double r2[2] = {1, 1 + 1e-6}, a2[2] = {7, 7};
    CU_ASSERT_EQUAL(grpo_advantages(&c, r2, 2, &bl, a2), 1);
    CU_ASSERT_EQUAL(a2[0], 0.0);
    CU_ASSERT_EQUAL(a2[1], 0.0);
    /* std 1.4e-6 > eps: normalised, |A| = 0.707107 * 1.41e-6 / 2.41e-6 */
    double r3[2] = {1, 1 + 2e-6}, a3[2];
    CU_ASSERT_EQUAL(grpo_advantages(&c, r3, 2, &bl, a3), 0);
    double s = sqrt(2.0) * 1e-6;
    CU_ASSERT_DOUBLE_EQUAL(a3[1], 1e-6 / (s + 1e-6), 1e-6);
    CU_ASSERT(a3[0] < 0 && a3[1] > 0);
}

static void test_singleton_baseline(void)
{
    struct grpo_config c = base(); /* decay 0.9 */
    struct grpo_baseline bl = {0, 0};
    double r, a;
    r = 1.0; /* first: A = 0, b = 1 */
    CU_ASSERT_EQUAL(grpo_advantages(&c, &r, 1, &bl, &a), 0);
    CU_ASSERT_EQUAL(a, 0.0);
    CU_ASSERT_EQUAL(bl.set, 1);
    CU_ASSERT_DOUBLE_EQUAL(bl.value, 1.0, 1e-15);
    r = 0.0; /* A = 0 - 1 = -1, b = 0.9 */
    grpo_advantages(&c, &r, 1, &bl, &a);
    CU_ASSERT_DOUBLE_EQUAL(a, -1.0, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(bl.value, 0.9, 1e-15);
    r = 2.0; /* A = 2 - 0.9 = 1.1, b = 0.81 + 0.2 = 1.01 */
    grpo_advantages(&c, &r, 1, &bl, &a);
    CU_ASSERT_DOUBLE_EQUAL(a, 1.1, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(bl.value, 1.01, 1e-15);
    /* all-positive rewards (R2E): the advantage is never the raw reward */
    r = 1.01;
    grpo_advantages(&c, &r, 1, &bl, &a);
    CU_ASSERT_DOUBLE_EQUAL(a, 0.0, 1e-15);
}

/* ---------------------------------------------------------------- token weights */

/* One model-generated token with logp - logp_prox = lr and logp_prox - logp_behav =
 * lb; returns w, stats added into st. */
static float one_token(const struct grpo_config *c, double lr, double lb, double A,
                       double norm, struct grpo_stats *st)
{
    float logp = (float)lr, prox = 0.0f, behav = (float)-lb, w = -99.0f;
    uint8_t m = 1;
    grpo_token_weights(c, 1, &logp, &prox, &behav, NULL, NULL, A, &m, norm, &w, NULL, st);
    return w;
}

/* Clip: rho = 1.1 inside [0.8, 1.28], 1.5 above, 0.5 below, for A = +1 and -1.
 * w = A w_is rho / norm where the gradient flows, else 0. */
static void test_clip(void)
{
    struct grpo_config c = base();
    struct {
        double rho, A, w, pg;
        int clipped;
    } cases[] = {
        {1.1, +1, 1.1, -1.1, 0},   /* inside */
        {1.5, +1, 0.0, -1.28, 1},  /* above 1 + clip_high, A > 0: clipped */
        {0.5, +1, 0.5, -0.5, 0},   /* below 1 - clip_low, A > 0: unclipped branch is max */
        {1.1, -1, -1.1, 1.1, 0},   /* inside */
        {1.5, -1, -1.5, 1.5, 0},   /* above, A < 0: unclipped branch is max */
        {0.5, -1, 0.0, 0.8, 1},    /* below, A < 0: clipped */
        {1.25, 2, 2.5, -2.5, 0},   /* just under 1 + clip_high */
        {0.82, -0.5, -0.41, 0.41, 0}, /* just over 1 - clip_low */
        {1.3, 0, 0.0, 0.0, 0},     /* A = 0: no gradient, nothing removed */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct grpo_stats st = {0};
        float w = one_token(&c, log(cases[i].rho), 0.0, cases[i].A, 1.0, &st);
        CU_ASSERT_DOUBLE_EQUAL(w, cases[i].w, 1e-6);
        CU_ASSERT_DOUBLE_EQUAL(st.pg_loss, cases[i].pg, 1e-6);
        CU_ASSERT_DOUBLE_EQUAL(st.loss, cases[i].pg, 1e-6);
        CU_ASSERT_EQUAL(st.clipped, cases[i].clipped);
        CU_ASSERT_EQUAL(st.tokens, 1.0);
        CU_ASSERT_EQUAL(st.is_truncated, 0.0);
        CU_ASSERT_DOUBLE_EQUAL(st.ratio_behav, 1.0, 1e-12);
    }
    /* an asymmetric range: clip_low 0.1 moves the lower edge to 0.9 */
    c.clip_low = 0.1;
    struct grpo_stats st = {0};
    CU_ASSERT_EQUAL(one_token(&c, log(0.85), 0, -1, 1, &st), 0.0f);
    CU_ASSERT_EQUAL(st.clipped, 1.0);
    /* a log-ratio past the clamp: finite loss, no gradient even where the unclipped
     * branch would be the max */
    memset(&st, 0, sizeof st);
    float w = one_token(&c, 30.0, 0, -1, 1, &st);
    CU_ASSERT_EQUAL(w, 0.0f);
    CU_ASSERT_EQUAL(st.clipped, 1.0);
    CU_ASSERT_DOUBLE_EQUAL(st.pg_loss, exp(20.0), 1e-6 * exp(20.0));
}

static void test_importance_weight(void)
{
    struct grpo_config c = base(); /* is_cap 2 */
    struct grpo_stats st = {0};
    /* ratio 3 > cap: w_is = 2, w = A w_is rho = 0.5 * 2 * 1.1 */
    float w = one_token(&c, log(1.1), log(3.0), 0.5, 1, &st);
    CU_ASSERT_DOUBLE_EQUAL(w, 1.1, 1e-6);
    CU_ASSERT_EQUAL(st.is_truncated, 1.0);
    CU_ASSERT_DOUBLE_EQUAL(st.ratio_behav, 3.0, 1e-6); /* untruncated */
    CU_ASSERT_DOUBLE_EQUAL(st.pg_loss, -1.1, 1e-6);
    /* ratio 1.5 < cap: not truncated */
    memset(&st, 0, sizeof st);
    w = one_token(&c, log(1.1), log(1.5), 0.5, 1, &st);
    CU_ASSERT_DOUBLE_EQUAL(w, 0.5 * 1.5 * 1.1, 1e-6);
    CU_ASSERT_EQUAL(st.is_truncated, 0.0);
    CU_ASSERT_DOUBLE_EQUAL(st.ratio_behav, 1.5, 1e-6);
    /* ratio 0.4 (behaviour more likely than prox): w_is = 0.4, A < 0 */
    memset(&st, 0, sizeof st);
    w = one_token(&c, log(0.9), log(0.4), -2, 1, &st);
    CU_ASSERT_DOUBLE_EQUAL(w, -2 * 0.4 * 0.9, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(st.pg_loss, 2 * 0.4 * 0.9, 1e-6);
    /* the clip acts on rho, not on w_is: ratio 3, rho 1.5, A > 0 -> clipped, pg uses 1.28 */
    memset(&st, 0, sizeof st);
    w = one_token(&c, log(1.5), log(3.0), 1, 1, &st);
    CU_ASSERT_EQUAL(w, 0.0f);
    CU_ASSERT_DOUBLE_EQUAL(st.pg_loss, -2 * 1.28, 1e-6);
    CU_ASSERT_EQUAL(st.clipped, 1.0);
    CU_ASSERT_EQUAL(st.is_truncated, 1.0);
}

/* Masked tokens: zero weights whatever their inputs (even NaN), no stats; KL k3;
 * entropy weights; normalisation. */
static void test_mask_kl_entropy_norm(void)
{
    struct grpo_config c = base();
    c.kl_coef = 0.1;
    c.entropy_coef = 0.01;
    float nan = (float)NAN;
    /* token 0: masked with NaN inputs; token 1: A-term inside the clip plus KL and
     * entropy; token 2: masked */
    float logp[3] = {nan, (float)log(1.1), 5}, prox[3] = {nan, 0, 0}, behav[3] = {nan, 0, 0};
    float ref[3] = {nan, (float)(log(1.1) + 0.3), 0}, ent[3] = {nan, 2.0f, 1.0f};
    uint8_t m[3] = {0, 1, 0};
    float w[3] = {9, 9, 9}, e[3] = {9, 9, 9};
    struct grpo_stats st = {0};
    double norm = 4, A = 0.5;
    grpo_token_weights(&c, 3, logp, prox, behav, ref, ent, A, m, norm, w, e, &st);
    /* d = ref - logp = 0.3: kl = e^0.3 - 1.3, dkl = 1 - e^0.3 */
    double d = (double)ref[1] - logp[1], kl = exp(d) - d - 1, dkl = 1 - exp(d);
    CU_ASSERT_DOUBLE_EQUAL(kl, 0.0498588, 1e-7);
    double dpg = -A * 1.1;
    CU_ASSERT_EQUAL(w[0], 0.0f);
    CU_ASSERT_EQUAL(w[2], 0.0f);
    CU_ASSERT_EQUAL(e[0], 0.0f);
    CU_ASSERT_EQUAL(e[2], 0.0f);
    CU_ASSERT_DOUBLE_EQUAL(w[1], -(dpg + 0.1 * dkl) / norm, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(w[1], (0.55 + 0.0349859) / 4, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(e[1], 0.01 / 4, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(st.kl, kl, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(st.entropy, 2.0, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(st.pg_loss, -0.55 / 4, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(st.loss, (-0.55 + 0.1 * kl - 0.01 * 2.0) / 4, 1e-7);
    CU_ASSERT_EQUAL(st.tokens, 1.0);
    CU_ASSERT(isfinite(st.ratio_behav));

    /* stats add up across calls; without ref and entropy those terms are off */
    grpo_token_weights(&c, 3, logp, prox, behav, NULL, NULL, A, m, norm, w, NULL, &st);
    CU_ASSERT_DOUBLE_EQUAL(w[1], 0.55 / 4, 1e-7);
    CU_ASSERT_EQUAL(st.tokens, 2.0);
    CU_ASSERT_DOUBLE_EQUAL(st.kl, kl, 1e-7);        /* unchanged */
    CU_ASSERT_DOUBLE_EQUAL(st.entropy, 2.0, 1e-7);  /* unchanged */
    CU_ASSERT_DOUBLE_EQUAL(st.pg_loss, -1.1 / 4, 1e-7);

    /* KL only (A = 0): logp below ref pushes it up (w > 0), above pushes it down */
    struct grpo_stats s2 = {0};
    float lp2[2] = {-1.0f, -1.0f}, ref2[2] = {-0.5f, -1.5f};
    uint8_t m2[2] = {1, 1};
    float w2[2];
    grpo_token_weights(&c, 2, lp2, lp2, lp2, ref2, NULL, 0.0, m2, 1.0, w2, NULL, &s2);
    CU_ASSERT_DOUBLE_EQUAL(w2[0], -0.1 * (1 - exp(0.5)), 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(w2[1], -0.1 * (1 - exp(-0.5)), 1e-7);
    CU_ASSERT(w2[0] > 0 && w2[1] < 0);
    CU_ASSERT_DOUBLE_EQUAL(s2.kl, (exp(0.5) - 1.5) + (exp(-0.5) - 0.5), 1e-7);
}

/* w_t = -dL/dlogp_t by central differences of st.loss over random tokens: rho and
 * w_is on either side of their kinks but at least 0.05 (in log) away from them. */
static void test_weights_are_gradient(void)
{
    enum { N = 40 };
    struct grpo_config c = base();
    c.kl_coef = 0.07;
    c.entropy_coef = 0.03;
    c.is_cap = 1.6;
    struct rng r;
    rng_init(&r, 3, 0, 0, 0);
    float logp[N], prox[N], behav[N], ref[N], ent[N], w[N], e[N];
    uint8_t m[N];
    static const double lr_choices[] = {-0.6, -0.35, -0.15, 0.0, 0.1, 0.18, 0.35, 0.7};
    for (int t = 0; t < N; t++) {
        prox[t] = (float)(-3 * rng_uniform(&r));
        double lr = lr_choices[rng_below(&r, 8)] + 0.02 * (rng_uniform(&r) - 0.5);
        logp[t] = (float)(prox[t] + lr);
        behav[t] = (float)(prox[t] - 0.8 * (rng_uniform(&r) - 0.5)); /* ratio 0.67..1.5 */
        if (t % 7 == 0) behav[t] = prox[t] - 1.0f;                   /* ratio e > cap */
        ref[t] = (float)(logp[t] + 0.6 * (rng_uniform(&r) - 0.5));
        ent[t] = (float)(3 * rng_uniform(&r));
        m[t] = t % 5 != 3;
    }
    double norm = 33, A = 1.3;
    for (int pass = 0; pass < 2; pass++, A = -0.7) {
        struct grpo_stats st = {0};
        grpo_token_weights(&c, N, logp, prox, behav, ref, ent, A, m, norm, w, e, &st);
        CU_ASSERT(st.clipped > 0); /* both regimes are exercised */
        CU_ASSERT(st.clipped < st.tokens);
        CU_ASSERT(st.is_truncated > 0);
        double worst = 0;
        for (int t = 0; t < N; t++) {
            float v = logp[t], xp = v + 1e-3f, xm = v - 1e-3f;
            struct grpo_stats sp = {0}, sm = {0};
            float ws[N];
            logp[t] = xp;
            grpo_token_weights(&c, N, logp, prox, behav, ref, ent, A, m, norm, ws, NULL, &sp);
            logp[t] = xm;
            grpo_token_weights(&c, N, logp, prox, behav, ref, ent, A, m, norm, ws, NULL, &sm);
            logp[t] = v;
            double fd = (sp.loss - sm.loss) / ((double)xp - (double)xm);
            worst = test_worse(worst, fabs(-fd - w[t]));
            CU_ASSERT_DOUBLE_EQUAL(-fd, w[t], 1e-6);
            CU_ASSERT_DOUBLE_EQUAL(e[t], m[t] ? 0.03 / norm : 0.0, 1e-9);
        }
        printf("\n  A = %+.1f: %g of %g tokens clipped, %g truncated; max |w + dL/dlogp| %.1e",
               A, st.clipped, st.tokens, st.is_truncated, worst);
    }
}

int main(void)
{
    static const struct test_case cases[] = {
        {"group advantages: unbiased std, eps floor", test_group_advantages},
        {"zero-variance groups: counted, all-zero advantages", test_zero_variance},
        {"singleton groups: running baseline", test_singleton_baseline},
        {"PPO clip: both sides, both signs of A", test_clip},
        {"behaviour importance weight: truncation at is_cap", test_importance_weight},
        {"mask, k3 KL, entropy weights, token normalisation", test_mask_kl_entropy_norm},
        {"w_t = -dL/dlogp_t by finite differences", test_weights_are_gradient},
        {NULL, NULL}};
    static const struct test_suite suites[] = {{"grpo", cases}, {NULL, NULL}};
    return test_main(suites);
}
