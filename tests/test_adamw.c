/*
 * AdamW (src/model/adamw.c) against values computed by hand from torch.optim.AdamW's
 * update rule and clip_grad_norm_, three steps with weight decay and clipping; the
 * learning-rate schedule at its corners. Values are float32 arithmetic against double
 * hand values, hence tolerances of 1e-6 (parameters O(1)).
 */
#include <math.h>
#include <string.h>

#include "libra/adamw.h"
#include "testutil.h"

#define M_PI_LOCAL 3.14159265358979323846

static struct adamw_config base(void)
{
    return (struct adamw_config){.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f,
                                 .weight_decay = 0.1f, .clip_norm = 1.0f,
                                 .schedule = LR_CONSTANT, .warmup_steps = 0, .total_steps = 0,
                                 .min_lr_ratio = 0.0f};
}

/*
 * p0 = (1, -2), lr 0.1, betas (0.9, 0.99), wd 0.1, clip 1.
 * step 1: g = (3, 4), |g| = 5 > 1: g *= 1 / (5 + 1e-6) -> (0.6, 0.8).
 *         p *= 1 - 0.01 -> (0.99, -1.98); m = 0.1 g, v = 0.01 g^2; m_hat = g,
 *         sqrt(v_hat) = |g|, so p -= 0.1 sign(g) -> (0.89, -2.08).
 * step 2: g = (0.1, -0.2), |g| = 0.2236 (no clip). p0: 0.89 * 0.99 = 0.8811;
 *         m = 0.9 * 0.06 + 0.01 = 0.064; v = 0.99 * 0.0036 + 0.01 * 0.01 = 0.003664;
 *         m_hat = 0.064 / 0.19 = 0.336842; sqrt(v_hat) = sqrt(0.003664 / 0.0199) =
 *         0.429093; p = 0.8811 - 0.1 * 0.336842 / 0.429093 = 0.802599.
 * step 3: g = (-0.5, 0.5), |g| = 0.7071 (no clip): same rule -> (0.788399, -2.149468).
 */
static void test_three_steps(void)
{
    struct adamw_config c = base();
    struct adamw o;
    adamw_init(&o, &c, 2);
    float p[2] = {1.0f, -2.0f};
    float g1[2] = {3, 4}, g2[2] = {0.1f, -0.2f}, g3[2] = {-0.5f, 0.5f};

    double n1 = adamw_step(&o, p, g1);
    CU_ASSERT_DOUBLE_EQUAL(n1, 5.0, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(g1[0], 0.6, 1e-6); /* clipped in place */
    CU_ASSERT_DOUBLE_EQUAL(g1[1], 0.8, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(p[0], 0.89, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(p[1], -2.08, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(o.m[0], 0.06, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(o.v[1], 0.0064, 1e-8);

    double n2 = adamw_step(&o, p, g2);
    CU_ASSERT_DOUBLE_EQUAL(n2, 0.2236068, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(g2[0], 0.1, 1e-8); /* under the clip: untouched */
    CU_ASSERT_DOUBLE_EQUAL(p[0], 0.802599003, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(p[1], -2.106240853, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(o.m[0], 0.064, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(o.v[0], 0.003664, 1e-8);

    adamw_step(&o, p, g3);
    CU_ASSERT_DOUBLE_EQUAL(p[0], 0.788398644, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(p[1], -2.149467809, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(o.m[1], 0.096799987, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(o.v[1], 0.00916863749, 1e-8);
    CU_ASSERT_EQUAL(o.step, 3);
    adamw_free(&o);
    adamw_free(&o); /* freeing twice is harmless */
}

/* No clipping when clip_norm <= 0; no decay when weight_decay = 0. */
static void test_no_clip_no_decay(void)
{
    struct adamw_config c = base();
    c.clip_norm = 0;
    c.weight_decay = 0;
    struct adamw o;
    adamw_init(&o, &c, 1);
    float p = 1.0f, g = 30.0f;
    CU_ASSERT_DOUBLE_EQUAL(adamw_step(&o, &p, &g), 30.0, 1e-6);
    CU_ASSERT_EQUAL(g, 30.0f);
    CU_ASSERT_DOUBLE_EQUAL(p, 0.9, 1e-6); /* first step moves by lr exactly */
    adamw_free(&o);
}

static void test_schedule(void)
{
    struct adamw_config c = base();
    c.lr = 1.0f;
    CU_ASSERT_DOUBLE_EQUAL(adamw_lr(&c, 1), 1.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(adamw_lr(&c, 12345), 1.0, 0);
    c.schedule = LR_COSINE;
    c.warmup_steps = 10;
    c.total_steps = 110;
    c.min_lr_ratio = 0.1f;
    CU_ASSERT_DOUBLE_EQUAL(adamw_lr(&c, 1), 0.1, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(adamw_lr(&c, 5), 0.5, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(adamw_lr(&c, 10), 1.0, 1e-7);
    /* halfway through the decay: 0.1 + 0.9 * (1 + cos(pi / 2)) / 2 */
    CU_ASSERT_DOUBLE_EQUAL(adamw_lr(&c, 60), 0.55, 1e-6);
    /* a quarter: 0.1 + 0.9 * (1 + cos(pi / 4)) / 2 */
    CU_ASSERT_DOUBLE_EQUAL(adamw_lr(&c, 35), 0.1 + 0.45 * (1 + sqrt(0.5)), 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(adamw_lr(&c, 110), 0.1, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(adamw_lr(&c, 500), 0.1, 1e-7); /* stays at the floor */
    c.warmup_steps = 0;
    CU_ASSERT_DOUBLE_EQUAL(adamw_lr(&c, 1), 0.1 + 0.45 * (1 + cos(M_PI_LOCAL / 110)), 1e-6);

    /* adamw_step follows the schedule: step 1 of a 4-step warm-up moves by lr / 4 */
    c = base();
    c.schedule = LR_COSINE;
    c.warmup_steps = 4;
    c.total_steps = 10;
    c.weight_decay = 0;
    struct adamw o;
    adamw_init(&o, &c, 1);
    float p = 0.0f, g = -0.3f;
    adamw_step(&o, &p, &g);
    CU_ASSERT_DOUBLE_EQUAL(p, 0.025, 1e-7);
    adamw_free(&o);
}

int main(void)
{
    static const struct test_case cases[] = {
        {"three steps with decay and clipping = hand values", test_three_steps},
        {"no clipping, no decay", test_no_clip_no_decay},
        {"schedule: constant, warm-up, cosine, floor", test_schedule},
        {NULL, NULL}};
    static const struct test_suite suites[] = {{"adamw", cases}, {NULL, NULL}};
    return test_main(suites);
}
