/*
 * Tests of the token sampler: greedy (ties, log-prob), determinism per (seed,
 * trajectory, position) and independence from other calls, empirical frequencies
 * against softmax(logits / T) (chi-square bound, seeded), top-k and top-p never
 * leaving their sets, and the behaviour log-prob against a direct double computation.
 * Scratch buffers are exactly 2V floats so the sanitizers see any overrun.
 */
#include "libra/rng.h"
#include "libra/sampler.h"
#include "testutil.h"
#include "top_p_short_row.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* log softmax(logits / T)[tok] over all V, in double. */
static double ref_logprob(const float *logits, int V, double T, int tok)
{
    double m = -INFINITY, s = 0;
    for (int i = 0; i < V; i++) m = fmax(m, logits[i] / T);
    for (int i = 0; i < V; i++) s += exp(logits[i] / T - m);
    return logits[tok] / T - m - log(s);
}

static void ref_probs(const float *logits, int V, double T, double *q)
{
    for (int i = 0; i < V; i++) q[i] = exp(ref_logprob(logits, V, T, i));
}

/* Ids ordered most probable first (ties to the lower id). */
static const float *g_sort_logits;
static int cmp_rank(const void *a, const void *b)
{
    int i = *(const int *)a, j = *(const int *)b;
    float x = g_sort_logits[i], y = g_sort_logits[j];
    if (x != y) return x > y ? -1 : 1;
    return i - j;
}
static void ranked(const float *logits, int V, int *order)
{
    for (int i = 0; i < V; i++) order[i] = i;
    g_sort_logits = logits;
    qsort(order, (size_t)V, sizeof *order, cmp_rank);
}

static void random_logits(struct rng *r, float *l, int V, double scale)
{
    for (int i = 0; i < V; i++) l[i] = (float)(scale * rng_normal(r));
}

static void test_greedy(void)
{
    enum { V = 6 };
    const float logits[V] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 2.0f};
    float scratch[2 * V], lp = 0;
    struct sampler_config c = {0.0f, 1.0f, 0, 7};
    for (int pos = 0; pos < 10; pos++) {
        c.seed = (uint64_t)pos * 77;
        CU_ASSERT_EQUAL(sampler_sample(&c, logits, V, pos, pos, &lp, scratch), 1);
        CU_ASSERT(fabs(lp - ref_logprob(logits, V, 1.0, 1)) < 1e-6);
    }
    /* top-k / top-p do not change greedy; NULL logprob is allowed. */
    c.top_k = 2;
    c.top_p = 0.3f;
    CU_ASSERT_EQUAL(sampler_sample(&c, logits, V, 0, 0, NULL, scratch), 1);
    /* Large logits: stable. */
    const float big[3] = {1000.0f, 999.0f, -1000.0f};
    CU_ASSERT_EQUAL(sampler_sample(&c, big, 3, 0, 0, &lp, scratch), 0);
    CU_ASSERT(fabs(lp - (-log(1.0 + exp(-1.0)))) < 1e-6);
}

static void test_determinism(void)
{
    enum { V = 64, N = 500 };
    float logits[V], scratch[2 * V], lp1, lp2;
    struct rng r;
    rng_init(&r, 1, 2, 3, 4);
    random_logits(&r, logits, V, 1.0);
    struct sampler_config c = {1.0f, 1.0f, 0, 99};
    int32_t first[N];
    int distinct = 0;
    for (int pos = 0; pos < N; pos++) {
        first[pos] = sampler_sample(&c, logits, V, 5, pos, &lp1, scratch);
        distinct += pos > 0 && first[pos] != first[pos - 1];
    }
    CU_ASSERT(distinct > N / 2); /* positions are different streams */
    /* Same answers in reverse order, with unrelated calls in between. */
    for (int pos = N - 1; pos >= 0; pos--) {
        (void)sampler_sample(&c, logits, V, 6, pos, NULL, scratch);
        (void)sampler_sample(&c, logits, V, 5, pos + 1, NULL, scratch);
        CU_ASSERT_EQUAL(sampler_sample(&c, logits, V, 5, pos, &lp2, scratch), first[pos]);
    }
    /* Another trajectory or seed gives a different sequence. */
    int same_traj = 0, same_seed = 0;
    for (int pos = 0; pos < N; pos++) {
        same_traj += sampler_sample(&c, logits, V, 6, pos, NULL, scratch) == first[pos];
        struct sampler_config c2 = c;
        c2.seed = 100;
        same_seed += sampler_sample(&c2, logits, V, 5, pos, NULL, scratch) == first[pos];
    }
    CU_ASSERT(same_traj < N / 2);
    CU_ASSERT(same_seed < N / 2);
    /* The same for top-k / top-p paths. */
    c.top_k = 10;
    c.top_p = 0.8f;
    int32_t a = sampler_sample(&c, logits, V, 9, 3, NULL, scratch);
    for (int i = 0; i < 20; i++) {
        (void)sampler_sample(&c, logits, V, 9, 4 + i, NULL, scratch);
        CU_ASSERT_EQUAL(sampler_sample(&c, logits, V, 9, 3, NULL, scratch), a);
    }
}

/* Pearson chi-square of counts against expected probabilities q (zero-q cells must
 * have zero counts). */
static double chi_square(const long *count, const double *q, int V, long n, int *bad)
{
    double x2 = 0;
    *bad = 0;
    for (int i = 0; i < V; i++) {
        if (q[i] == 0) {
            *bad += count[i] != 0;
            continue;
        }
        double e = q[i] * (double)n;
        x2 += (count[i] - e) * (count[i] - e) / e;
    }
    return x2;
}

/* 200k draws on V = 8. With 7 degrees of freedom P(X2 > 40) ~ 1e-6; the draws are
 * seeded, so the outcome is fixed -- the bound catches a wrong distribution (a
 * missing temperature, an off-by-one CDF moves X2 into the thousands). */
static void test_frequencies(void)
{
    enum { V = 8 };
    const long N = 200000;
    const float logits[V] = {1.0f, 0.5f, -0.3f, 2.0f, 0.0f, -1.5f, 1.2f, 0.7f};
    const float temps[] = {1.0f, 0.6f, 2.5f};
    float scratch[2 * V];
    for (size_t t = 0; t < sizeof temps / sizeof temps[0]; t++) {
        struct sampler_config c = {temps[t], 1.0f, 0, 2024 + t};
        long count[V] = {0};
        for (long k = 0; k < N; k++) count[sampler_sample(&c, logits, V, 3, k, NULL, scratch)]++;
        double q[V];
        ref_probs(logits, V, temps[t], q);
        int bad;
        double x2 = chi_square(count, q, V, N, &bad);
        CU_ASSERT(bad == 0);
        CU_ASSERT(x2 < 40.0);
        if (x2 >= 40.0) fprintf(stderr, "T=%g chi-square %g\n", temps[t], x2);
    }

    /* top-k = 3 at T = 0.8: the renormalised top-3 distribution. Ids by logit:
     * 3 (2.0), 6 (1.2), 0 (1.0), 7, 1, 4, 2, 5. */
    {
        struct sampler_config c = {0.8f, 1.0f, 3, 11};
        long count[V] = {0};
        for (long k = 0; k < N; k++) count[sampler_sample(&c, logits, V, 4, k, NULL, scratch)]++;
        double q[V], s = 0;
        ref_probs(logits, V, 0.8, q);
        for (int i = 0; i < V; i++) {
            if (i != 3 && i != 6 && i != 0) q[i] = 0;
            s += q[i];
        }
        for (int i = 0; i < V; i++) q[i] /= s;
        int bad;
        double x2 = chi_square(count, q, V, N, &bad);
        CU_ASSERT(bad == 0);
        CU_ASSERT(x2 < 30.0); /* 2 degrees of freedom */
    }
    /* top-p = 0.7 at T = 1: the nucleus from the sorted cumulative mass. */
    {
        struct sampler_config c = {1.0f, 0.7f, 0, 12};
        double q[V];
        ref_probs(logits, V, 1.0, q);
        int order[V];
        ranked(logits, V, order);
        double cum = 0, s = 0;
        int keep[V] = {0}, nk = 0;
        for (int j = 0; j < V && cum < 0.7; j++) {
            cum += q[order[j]];
            keep[order[j]] = 1;
            nk++;
        }
        CU_ASSERT(nk >= 2 && nk < V); /* the case is not trivial */
        for (int i = 0; i < V; i++) {
            if (!keep[i]) q[i] = 0;
            s += q[i];
        }
        for (int i = 0; i < V; i++) q[i] /= s;
        long count[V] = {0};
        for (long k = 0; k < N; k++) count[sampler_sample(&c, logits, V, 5, k, NULL, scratch)]++;
        int bad;
        double x2 = chi_square(count, q, V, N, &bad);
        CU_ASSERT(bad == 0);
        CU_ASSERT(x2 < 35.0);
    }
}

static void test_top_k_bounds(void)
{
    enum { V = 50 };
    float logits[V], scratch[2 * V];
    int order[V];
    struct rng r;
    rng_init(&r, 5, 0, 0, 0);
    for (int trial = 0; trial < 200; trial++) {
        random_logits(&r, logits, V, 2.0);
        if (trial % 4 == 0) /* ties at the boundary: lower ids win */
            for (int i = 0; i < V; i += 3) logits[i] = 0.25f;
        ranked(logits, V, order);
        int k = 1 + (int)rng_below(&r, 8);
        int in[V] = {0};
        for (int j = 0; j < k; j++) in[order[j]] = 1;
        struct sampler_config c = {1.0f + (float)rng_uniform(&r), 1.0f, k, (uint64_t)trial};
        for (int pos = 0; pos < 100; pos++) {
            float lp;
            int32_t t = sampler_sample(&c, logits, V, trial, pos, &lp, scratch);
            CU_ASSERT_FATAL(t >= 0 && t < V);
            CU_ASSERT_FATAL(in[t]);
            CU_ASSERT(fabs(lp - ref_logprob(logits, V, c.temperature, t)) < 1e-5);
        }
    }
    /* k = 1 is greedy (with the temperature's log-prob); k >= V is off. */
    random_logits(&r, logits, V, 1.0);
    ranked(logits, V, order);
    struct sampler_config c1 = {0.9f, 1.0f, 1, 3};
    for (int pos = 0; pos < 50; pos++)
        CU_ASSERT_EQUAL(sampler_sample(&c1, logits, V, 1, pos, NULL, scratch), order[0]);
    struct sampler_config ca = {0.9f, 1.0f, V + 5, 3}, cb = {0.9f, 1.0f, 0, 3};
    for (int pos = 0; pos < 50; pos++)
        CU_ASSERT_EQUAL(sampler_sample(&ca, logits, V, 1, pos, NULL, scratch),
                        sampler_sample(&cb, logits, V, 1, pos, NULL, scratch));
}

/* The nucleus by definition, in double: ranked prefix until the mass reaches p. */
static int ref_nucleus(const float *logits, int V, double T, double top_p, int k, int *in)
{
    int order[4096];
    double q[4096], mass = 0, cum = 0;
    ranked(logits, V, order);
    ref_probs(logits, V, T, q);
    int n = k > 0 && k < V ? k : V;
    for (int j = 0; j < n; j++) mass += q[order[j]];
    memset(in, 0, sizeof(int) * (size_t)V);
    int j = 0;
    do {
        cum += q[order[j]];
        in[order[j]] = 1;
        j++;
    } while (j < n && cum < top_p * mass);
    return j;
}

static void test_top_p_bounds(void)
{
    enum { V = 200 };
    float logits[V], scratch[2 * V];
    int in[V];
    struct rng r;
    rng_init(&r, 6, 0, 0, 0);
    for (int trial = 0; trial < 300; trial++) {
        random_logits(&r, logits, V, 0.5 + 3.0 * rng_uniform(&r));
        double top_p = 0.05 + 0.94 * rng_uniform(&r);
        int k = trial % 3 == 0 ? 5 + (int)rng_below(&r, 20) : 0;
        struct sampler_config c = {0.5f + (float)rng_uniform(&r), (float)top_p, k,
                                   (uint64_t)trial};
        int n = ref_nucleus(logits, V, c.temperature, c.top_p, k, in);
        int seen = 0;
        for (int pos = 0; pos < 100; pos++) {
            float lp;
            int32_t t = sampler_sample(&c, logits, V, trial, pos, &lp, scratch);
            CU_ASSERT_FATAL(t >= 0 && t < V);
            CU_ASSERT_FATAL(in[t]);
            seen |= t != sampler_sample(&c, logits, V, trial, 0, NULL, scratch);
            CU_ASSERT(fabs(lp - ref_logprob(logits, V, c.temperature, t)) < 1e-5);
        }
        if (n > 3) CU_ASSERT(seen); /* not collapsed to one token */
    }
    /* Always at least one token: tiny top_p is the argmax. */
    random_logits(&r, logits, V, 1.0);
    int order[V];
    ranked(logits, V, order);
    const float tiny[] = {1e-9f, 0.0f, -1.0f};
    for (int i = 0; i < 3; i++) {
        struct sampler_config c = {1.0f, tiny[i], 0, 1};
        for (int pos = 0; pos < 20; pos++)
            CU_ASSERT_EQUAL(sampler_sample(&c, logits, V, 0, pos, NULL, scratch), order[0]);
    }
    /* A peaked distribution: the nucleus at 0.9 is the single dominant token. */
    for (int i = 0; i < V; i++) logits[i] = 0.0f;
    logits[17] = 20.0f;
    struct sampler_config cp = {1.0f, 0.9f, 0, 2};
    for (int pos = 0; pos < 100; pos++)
        CU_ASSERT_EQUAL(sampler_sample(&cp, logits, V, 0, pos, NULL, scratch), 17);
}

/* Survivors short of top_p through rounding (tests/top_p_short_row.h): the nucleus is
 * redone over all ids -- the candidates come back as every id, most probable first
 * (the scratch's [V, 2V) holds them; NaN-filled before, so a nucleus taken from the
 * one survivor leaves them NaN) -- and the token is drawn from {0, 1}. */
static void test_top_p_short(void)
{
    enum { V = SHORT_ROW_V };
    static float x[V], scratch[2 * V];
    short_row_fill(x);
    CU_ASSERT_FATAL(short_row_is_short());
    for (int pos = 0; pos < 4; pos++) {
        for (int i = 0; i < 2 * V; i++) scratch[i] = NAN;
        float lp;
        int32_t t = sampler_sample(&short_row_config, x, V, 3, pos, &lp, scratch);
        CU_ASSERT(t == 0 || t == 1);
        CU_ASSERT(fabs(lp - ref_logprob(x, V, short_row_config.temperature, t)) < 1e-5);
        CU_ASSERT(short_row_all_ids(scratch + V, 1));
    }
}

static void test_logprob_values(void)
{
    /* A Qwen-sized vocabulary with -inf entries (masked) and large magnitudes. */
    const int V = 151936;
    float *logits = malloc(sizeof(float) * (size_t)V);
    float *scratch = malloc(sizeof(float) * 2 * (size_t)V);
    CU_ASSERT_FATAL(logits && scratch);
    struct rng r;
    rng_init(&r, 8, 0, 0, 0);
    random_logits(&r, logits, V, 3.0);
    for (int i = 0; i < V; i += 7) logits[i] = -INFINITY;
    logits[1000] = 60.0f;
    logits[2001] = 58.5f;
    const struct sampler_config cs[] = {
        {1.0f, 1.0f, 0, 1}, {0.7f, 1.0f, 0, 2}, {1.3f, 0.95f, 0, 3},
        {1.0f, 1.0f, 40, 4}, {0.9f, 0.9f, 50, 5}, {0.0f, 1.0f, 0, 6},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        for (int pos = 0; pos < 5; pos++) {
            float lp;
            int32_t t = sampler_sample(&cs[k], logits, V, 42, pos, &lp, scratch);
            CU_ASSERT_FATAL(t >= 0 && t < V);
            CU_ASSERT(isfinite(logits[t]));
            double T = cs[k].temperature > 0 ? cs[k].temperature : 1.0;
            double want = ref_logprob(logits, V, T, t);
            CU_ASSERT(fabs(lp - want) <= 1e-6 * fmax(1.0, fabs(want)));
        }
    }
    /* A flat distribution: every token's log-prob is -log V. */
    for (int i = 0; i < V; i++) logits[i] = 3.0f;
    struct sampler_config c = {0.5f, 1.0f, 0, 9};
    float lp;
    (void)sampler_sample(&c, logits, V, 1, 1, &lp, scratch);
    CU_ASSERT(fabs(lp + log((double)V)) < 1e-5);
    free(scratch);
    free(logits);
}

int main(void)
{
    static const struct test_case cases[] = {
        {"greedy: argmax, ties to the lowest id, log-prob at T=1", test_greedy},
        {"same (seed, traj, position) -> same token, whatever else runs", test_determinism},
        {"frequencies match softmax(logits/T), top-k, top-p (chi-square)", test_frequencies},
        {"top-k never leaves the k best (ties included)", test_top_k_bounds},
        {"top-p never leaves the nucleus; at least one token", test_top_p_bounds},
        {"top-p survivors short through rounding: the nucleus over all ids", test_top_p_short},
        {"behaviour log-prob = direct double computation (V=151936)", test_logprob_values},
        {NULL, NULL},
    };
    static const struct test_suite suites[] = {
        {"sampler", cases},
        {NULL, NULL},
    };
    return test_main(suites);
}
