/*
 * Tests of the workload model (src/emu/workload.c): presets load, draws are pure
 * functions of their keys, sample moments match the analytic ones (the prompt
 * length's clamped lognormal mean; the expected number of turns from a dynamic
 * program over the (turn, last_failed, last_large) Markov chain, written here and
 * not in the library), failures and large payloads raise the continue rate, drift
 * lengthens generations, the shipped presets have a long tail (p99/p50 in [6, 16]),
 * and broken preset files give file:line: key: messages.
 *
 * Statistical tolerances are 4 standard errors of the sample mean (the standard
 * error from the analytic variance where we have it); the runs are deterministic
 * (fixed seeds), so a pass is reproducible, and 4 SE says the agreement is not luck.
 */
#define _POSIX_C_SOURCE 200809L /* fmemopen */
#include "libra/workload.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEED 12345u

static void load(const char *name, struct workload *wl)
{
    char path[256], err[1024];
    snprintf(path, sizeof path, "inputs/workloads/%s.cfg", name);
    int rc = workload_load(test_path(path), wl, err, sizeof err);
    if (rc != 0) fprintf(stderr, "%s\n", err);
    CU_ASSERT_FATAL(rc == 0);
}

static double phi(double x)
{
    return 0.5 * erfc(-x / sqrt(2.0));
}

/* One trajectory run with the library's own turn and advance functions. */
struct traj {
    int prompt, turns, total;
};

static void run_traj(const struct workload *wl, uint64_t seed, int64_t id, int64_t prompt_id, int step,
                     struct traj *out)
{
    struct wl_traj_state st = {.traj_id = id, .prompt_id = prompt_id, .step = step};
    struct wl_turn t;
    out->prompt = workload_prompt_tokens(wl, seed, prompt_id);
    st.ctx_tokens = out->prompt;
    do {
        workload_turn(wl, seed, &st, &t);
        workload_advance(wl, &st, &t);
    } while (!t.final);
    out->turns = st.turn;
    out->total = st.ctx_tokens;
}

/* ---- presets ---- */

static void test_presets_load(void)
{
    static const struct {
        const char *name;
        int max_turns, n_tools;
        double fail_lo, fail_hi; /* share of calls that fail or time out */
    } want[] = {
        {"r2e-gym", 12, 3, 0.2, 0.3},
        {"search-r1", 5, 1, 0.02, 0.15},
        {"dapo-math", 2, 1, 0.3, 0.8},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        struct workload wl;
        load(want[i].name, &wl);
        CU_ASSERT_STRING_EQUAL(wl.name, want[i].name);
        CU_ASSERT_EQUAL(wl.max_turns, want[i].max_turns);
        CU_ASSERT_EQUAL(wl.n_tools, want[i].n_tools);
        double w = 0, f = 0;
        for (int k = 0; k < wl.n_tools; k++) {
            w += wl.tools[k].weight;
            f += wl.tools[k].weight * (wl.tools[k].p_fail + wl.tools[k].p_timeout);
        }
        CU_ASSERT(f / w >= want[i].fail_lo && f / w <= want[i].fail_hi);
    }
}

/* ---- determinism ---- */

static void state_for(int64_t id, int turn, struct wl_traj_state *st)
{
    memset(st, 0, sizeof *st);
    st->traj_id = id;
    st->turn = turn;
    st->last_failed = (int)(id % 2);
    st->last_large = id % 3 == 0;
    st->n_failures = (int)(id % 4);
    st->step = (int)(id % 50);
}

static int same_turn(const struct wl_turn *a, const struct wl_turn *b)
{
    return a->gen_tokens == b->gen_tokens && a->final == b->final && a->tool == b->tool &&
           a->status == b->status && a->payload_tokens == b->payload_tokens &&
           a->tool_latency_s == b->tool_latency_s;
}

static void test_determinism(void)
{
    enum { NID = 200, NT = 8 };
    static struct wl_turn fwd[NID][NT];
    struct workload wl;
    struct wl_traj_state st;
    struct wl_turn t;
    load("r2e-gym", &wl);
    for (int i = 0; i < NID; i++)
        for (int k = 0; k < NT; k++) {
            state_for(i, k, &st);
            workload_turn(&wl, SEED, &st, &fwd[i][k]);
        }
    /* Another order (turn-major, ids reversed), with other trajectories drawn in
     * between, gives the same turns. */
    int same = 1, differs_seed = 0;
    for (int k = NT - 1; k >= 0; k--)
        for (int i = NID - 1; i >= 0; i--) {
            state_for(i + 1000, k, &st);
            workload_turn(&wl, SEED, &st, &t);
            state_for(i, k, &st);
            workload_turn(&wl, SEED, &st, &t);
            same &= same_turn(&t, &fwd[i][k]);
            workload_turn(&wl, SEED + 1, &st, &t);
            differs_seed |= t.gen_tokens != fwd[i][k].gen_tokens;
        }
    CU_ASSERT(same);
    CU_ASSERT(differs_seed);
    /* Prompts and rewards are keyed the same way. */
    int p7 = workload_prompt_tokens(&wl, SEED, 7);
    for (int i = 0; i < 100; i++) (void)workload_prompt_tokens(&wl, SEED, i);
    CU_ASSERT_EQUAL(workload_prompt_tokens(&wl, SEED, 7), p7);
    state_for(42, 3, &st);
    double r = workload_reward(&wl, SEED, &st);
    CU_ASSERT(r == 0.0 || r == 1.0);
    CU_ASSERT_EQUAL(workload_reward(&wl, SEED, &st), r);
    /* The generated length does not depend on the tool state, only on the step. */
    state_for(5, 2, &st);
    workload_turn(&wl, SEED, &st, &t);
    st.last_failed = !st.last_failed;
    struct wl_turn u;
    workload_turn(&wl, SEED, &st, &u);
    CU_ASSERT_EQUAL(t.gen_tokens, u.gen_tokens);
}

/* ---- prompt lengths ---- */

/* E[clamp(X, a, b)] for X ~ LN(mu, sigma):
 * a P(X < a) + b P(X > b) + e^(mu + sigma^2/2) [Phi(beta - sigma) - Phi(alpha - sigma)],
 * alpha = (ln a - mu) / sigma, beta = (ln b - mu) / sigma. */
static double clamped_lognormal_mean(double mu, double sigma, double a, double b)
{
    double al = (log(a) - mu) / sigma, be = (log(b) - mu) / sigma;
    return a * phi(al) + b * (1 - phi(be)) + exp(mu + sigma * sigma / 2) * (phi(be - sigma) - phi(al - sigma));
}

static void check_prompt_mean(const struct workload *wl, int n)
{
    double sum = 0, sum2 = 0;
    for (int i = 0; i < n; i++) {
        double x = workload_prompt_tokens(wl, SEED, i);
        sum += x;
        sum2 += x * x;
    }
    double mean = sum / n, sd = sqrt(sum2 / n - mean * mean);
    double want = clamped_lognormal_mean(log(wl->prompt_median), wl->prompt_sigma, wl->prompt_min, wl->prompt_max);
    /* 4 SE, plus 0.5 for rounding to whole tokens (unbiased in the bulk, at most 0.5). */
    double tol = 4 * sd / sqrt(n) + 0.5;
    if (fabs(mean - want) > tol) fprintf(stderr, "\n  %s: mean %g want %g tol %g\n", wl->name, mean, want, tol);
    CU_ASSERT(fabs(mean - want) <= tol);
}

static void test_prompt_mean(void)
{
    struct workload wl;
    load("r2e-gym", &wl);
    check_prompt_mean(&wl, 200000);
    /* Wide sigma, no clamping in practice: the plain lognormal mean. */
    wl.prompt_sigma = 1.0;
    wl.prompt_min = 1;
    wl.prompt_max = 100000000;
    check_prompt_mean(&wl, 200000);
    CU_ASSERT_CLOSE(clamped_lognormal_mean(log(450), 1.0, 1, 1e8), 450 * exp(0.5), 1e-6);
    /* Heavy clamping: most draws pinned at the bounds. */
    wl.prompt_sigma = 2.0;
    wl.prompt_min = 300;
    wl.prompt_max = 700;
    check_prompt_mean(&wl, 100000);
}

/* ---- turn count: dynamic program over the Markov chain ---- */

/* P(round(X) >= L) for the payload X ~ LN(mu, sigma) clamped to [1, max]. */
static double p_large(double mu, double sigma, int max, int L)
{
    if (L > max) return 0;
    if (L <= 1) return 1;
    if (sigma == 0) return exp(mu) >= L - 0.5;
    return 1 - phi((log(L - 0.5) - mu) / sigma);
}

/* q[f][l]: probability that a tool call leaves (last_failed f, last_large l). The
 * documented model: failures return ~payload_median / 10, timeouts 8 tokens. */
static void tool_outcomes(const struct workload *wl, double q[2][2])
{
    double w = 0;
    memset(q, 0, 4 * sizeof(double));
    for (int i = 0; i < wl->n_tools; i++) w += wl->tools[i].weight;
    for (int i = 0; i < wl->n_tools; i++) {
        const struct wl_tool *t = &wl->tools[i];
        double pi = t->weight / w, ps = 1 - t->p_fail - t->p_timeout;
        double lf = p_large(log(fmax(1, t->payload_median / 10)), t->payload_sigma, t->payload_max, wl->large_payload);
        double lt = (t->payload_max < 8 ? t->payload_max : 8) >= wl->large_payload;
        double ls = p_large(log(t->payload_median), t->payload_sigma, t->payload_max, wl->large_payload);
        q[1][1] += pi * (t->p_fail * lf + t->p_timeout * lt);
        q[1][0] += pi * (t->p_fail * (1 - lf) + t->p_timeout * (1 - lt));
        q[0][1] += pi * ps * ls;
        q[0][0] += pi * ps * (1 - ls);
    }
}

/* dz: the prompt's difficulty term, difficulty_continue z. */
static double p_cont(const struct workload *wl, int k, int f, int l, int step, double dz)
{
    if (k >= wl->max_turns - 1) return 0;
    if (k < wl->min_turns - 1) return 1;
    int s = step < wl->drift_max_steps ? step : wl->drift_max_steps;
    double p = wl->p_continue + wl->drift_continue_per_step * s + f * wl->p_continue_fail_bonus +
               l * wl->p_continue_large_bonus + dz;
    return p < 0 ? 0 : p > 0.98 ? 0.98 : p;
}

/* E[T] and E[T^2] of the number of turns for one prompt difficulty term dz:
 * V1(k,f,l) = 1 + c E[V1(k+1, .)], V2(k,f,l) = E[T^2] = 1 + c (2 E[V1(k+1, .)] +
 * E[V2(k+1, .)]), c = p_cont(k, f, l). */
static void turn_moments(const struct workload *wl, int step, double dz, double *m1, double *m2)
{
    double q[2][2], v1[2][2] = {{0}}, v2[2][2] = {{0}};
    tool_outcomes(wl, q);
    for (int k = wl->max_turns - 1; k >= 0; k--) {
        double e1 = 0, e2 = 0, n1[2][2], n2[2][2];
        for (int f = 0; f < 2; f++)
            for (int l = 0; l < 2; l++) {
                e1 += q[f][l] * v1[f][l];
                e2 += q[f][l] * v2[f][l];
            }
        for (int f = 0; f < 2; f++)
            for (int l = 0; l < 2; l++) {
                double c = p_cont(wl, k, f, l, step, dz);
                n1[f][l] = 1 + c * e1;
                n2[f][l] = 1 + c * (2 * e1 + e2);
            }
        memcpy(v1, n1, sizeof v1);
        memcpy(v2, n2, sizeof v2);
    }
    *m1 = v1[0][0];
    *m2 = v2[0][0];
}

/* E[T] and Var[T] over prompts: the moments integrated over z ~ N(0, 1) (midpoint
 * rule on [-8, 8]; exact for difficulty_continue = 0). */
static void expected_turns(const struct workload *wl, int step, double *mean, double *var)
{
    double m1 = 0, m2 = 0, wsum = 0;
    for (int i = 0; i < 1600; i++) {
        double z = -8 + (i + 0.5) * 0.01, w = exp(-0.5 * z * z), a, b;
        turn_moments(wl, step, wl->difficulty_continue * z, &a, &b);
        m1 += w * a;
        m2 += w * b;
        wsum += w;
    }
    *mean = m1 / wsum;
    *var = m2 / wsum - *mean * *mean;
}

static void check_turns(const char *name, int step)
{
    enum { N = 100000 };
    struct workload wl;
    struct traj tr;
    load(name, &wl);
    double sum = 0, want, var;
    for (int i = 0; i < N; i++) {
        run_traj(&wl, SEED, i, i, step, &tr); /* own prompts: independent samples */
        sum += tr.turns;
    }
    expected_turns(&wl, step, &want, &var);
    double tol = 4 * sqrt(var / N);
    if (fabs(sum / N - want) > tol)
        fprintf(stderr, "\n  %s step %d: mean turns %g, DP %g, tol %g\n", name, step, sum / N, want, tol);
    CU_ASSERT(fabs(sum / N - want) <= tol);
    CU_ASSERT(var > 0);
}

static void test_expected_turns(void)
{
    check_turns("r2e-gym", 0);
    check_turns("r2e-gym", 200);
    check_turns("search-r1", 0);
    check_turns("search-r1", 1000);
    check_turns("dapo-math", 0);
}

/* ---- causal structure ---- */

static void test_failure_raises_continue(void)
{
    enum { N = 50000 };
    struct workload wl;
    load("r2e-gym", &wl);
    wl.difficulty_continue = 0; /* else the buckets mix prompts of every difficulty */
    long n[2][2] = {{0}}, c[2][2] = {{0}};
    double rem_sum[2] = {0}, rem_n[2] = {0};
    for (int i = 0; i < N; i++) {
        struct wl_traj_state st = {.traj_id = i};
        struct wl_turn t;
        int fail_at[16], nt = 0;
        do {
            int f = st.last_failed, l = st.last_large, k = st.turn;
            workload_turn(&wl, SEED, &st, &t);
            if (k >= wl.min_turns - 1 && k < wl.max_turns - 1) {
                n[f][l]++;
                c[f][l] += !t.final;
            }
            if (!t.final) fail_at[nt++] = t.status != TOOL_SUCCESS;
            workload_advance(&wl, &st, &t);
        } while (!t.final);
        /* Turns that follow each tool return, split by its outcome. */
        for (int j = 0; j < nt; j++) {
            rem_sum[fail_at[j]] += st.turn - (j + 1);
            rem_n[fail_at[j]]++;
        }
    }
    /* Each bucket's empirical continue rate matches its p within 4 SE. */
    for (int f = 0; f < 2; f++)
        for (int l = 0; l < 2; l++) {
            double p = p_cont(&wl, 1, f, l, 0, 0), rate = (double)c[f][l] / (double)n[f][l];
            CU_ASSERT(n[f][l] > (f && l ? 100 : 1000)); /* failed AND large is rare: errors are short */
            CU_ASSERT(fabs(rate - p) <= 4 * sqrt(p * (1 - p) / (double)n[f][l]));
        }
    double r_ok = (double)c[0][0] / (double)n[0][0], r_fail = (double)c[1][0] / (double)n[1][0];
    CU_ASSERT(r_fail > r_ok + 0.3);
    CU_ASSERT((double)c[0][1] / (double)n[0][1] > r_ok + 0.2);
    /* A failure predicts more remaining turns than a success. */
    /* A failure predicts more remaining turns than a success (2.53 vs 2.06). */
    CU_ASSERT(rem_sum[1] / rem_n[1] > rem_sum[0] / rem_n[0] + 0.3);
}

static void test_drift(void)
{
    enum { N = 20000 };
    struct workload wl;
    load("r2e-gym", &wl);
    int S = wl.drift_max_steps, monotone = 1, stops = 1;
    double s0 = 0, s1 = 0;
    for (int i = 0; i < N; i++) {
        struct wl_traj_state a = {.traj_id = i, .turn = i % 4}, b = a, c = a;
        struct wl_turn ta, tb, tc;
        b.step = S;
        c.step = 3 * S;
        workload_turn(&wl, SEED, &a, &ta);
        workload_turn(&wl, SEED, &b, &tb);
        workload_turn(&wl, SEED, &c, &tc);
        monotone &= tb.gen_tokens >= ta.gen_tokens; /* same normal draw, larger median */
        stops &= tc.gen_tokens == tb.gen_tokens;   /* drift ends at drift_max_steps */
        s0 += ta.gen_tokens;
        s1 += tb.gen_tokens;
    }
    double g = pow(1 + wl.drift_gen_per_step, S);
    CU_ASSERT(monotone);
    CU_ASSERT(stops);
    /* Clamping at gen_max keeps the ratio of means a little below g. */
    CU_ASSERT(s1 / s0 > 1 + 0.7 * (g - 1) && s1 / s0 <= g * 1.001);
    /* More turns later in training too (drift_continue_per_step > 0). */
    double m0, m1, v;
    expected_turns(&wl, 0, &m0, &v);
    expected_turns(&wl, S, &m1, &v);
    CU_ASSERT(m1 > m0);
}

static void test_reward(void)
{
    enum { N = 100000 };
    struct workload wl;
    load("r2e-gym", &wl);
    struct wl_traj_state st = {.step = 100, .n_failures = 2};
    double p0 = wl.reward_base + wl.reward_per_step * 100 - wl.reward_per_failure * 2, sum = 0;
    /* Every trajectory its own prompt: P(reward) = E_z clamp(p0 - difficulty_reward z). */
    double p = 0, wsum = 0;
    for (int i = 0; i < 1600; i++) {
        double z = -8 + (i + 0.5) * 0.01, w = exp(-0.5 * z * z);
        double pz = p0 - wl.difficulty_reward * z;
        p += w * (pz < 0 ? 0 : pz > 1 ? 1 : pz);
        wsum += w;
    }
    p /= wsum;
    for (int i = 0; i < N; i++) {
        st.traj_id = i;
        st.prompt_id = i;
        sum += workload_reward(&wl, SEED, &st);
    }
    CU_ASSERT(fabs(sum / N - p) <= 4 * sqrt(p * (1 - p) / N));
    /* One hard and one easy prompt: the difficulty moves the rate by -dr z. */
    for (int64_t pid = 0, done = 0; pid < 1000 && done < 2; pid++) {
        double z = workload_difficulty(SEED, pid);
        if (fabs(z) < 1.5) continue;
        double pz = p0 - wl.difficulty_reward * z, s2 = 0;
        for (int i = 0; i < N; i++) {
            st.traj_id = i;
            st.prompt_id = pid;
            s2 += workload_reward(&wl, SEED, &st);
        }
        CU_ASSERT(fabs(s2 / N - pz) <= 4 * sqrt(pz * (1 - pz) / N));
        done++;
    }
    st.n_failures = 1000; /* clamped at 0 */
    for (int i = 0; i < 1000; i++) {
        st.traj_id = i;
        CU_ASSERT_EQUAL(workload_reward(&wl, SEED, &st), 0.0);
    }
}

/* ---- group structure and history ---- */

/* The properties docs/emulation.md sets beside the published figures, measured from
 * generated trajectories (2,000 groups of 8, seed 1): the samples of a prompt are
 * alike (intra-group correlation of log length), the tail is long (p99/p50 and the
 * share of a batch's time after 90 % finished), lengths drift up with the step; and
 * with the difficulty switched off the correlation vanishes (only the shared prompt
 * length is left), so it comes from the model, not from the measurement. */
static void test_group_structure(void)
{
    static const struct {
        const char *name;
        double icc_lo, icc_hi, ratio_lo, ratio_hi, tail_lo;
    } want[] = {
        {"r2e-gym", 0.3, 0.6, 6, 16, 0.4},
        {"search-r1", 0.3, 0.6, 3, 10, 0.3},
        {"dapo-math", 0.3, 0.6, 6, 16, 0.4},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        struct workload wl;
        struct wl_structure a, b, c;
        load(want[i].name, &wl);
        workload_structure(&wl, 1, 2000, 8, 0, &a);
        workload_structure(&wl, 1, 2000, 8, wl.drift_max_steps, &b);
        int ok = a.icc >= want[i].icc_lo && a.icc <= want[i].icc_hi && a.p99_p50 >= want[i].ratio_lo &&
                 a.p99_p50 <= want[i].ratio_hi && a.tail_share >= want[i].tail_lo && a.tail_share < 1;
        if (!ok)
            fprintf(stderr, "\n  %s: icc %.3f p99/p50 %.2f tail %.3f\n", want[i].name, a.icc, a.p99_p50,
                    a.tail_share);
        CU_ASSERT(ok);
        CU_ASSERT(b.mean_tokens > 1.2 * a.mean_tokens); /* drift */
        wl.difficulty_gen_sigma = wl.difficulty_continue = 0;
        workload_structure(&wl, 1, 2000, 8, 0, &c);
        CU_ASSERT(c.icc < 0.1);
        CU_ASSERT(c.icc < a.icc - 0.2);
    }
}

/* History: every failure so far multiplies the next turns' generation median by
 * 1 + gen_per_failure, on the same draw (so the effect is exact before the cap). */
static void test_failure_history(void)
{
    struct workload wl;
    load("r2e-gym", &wl);
    double g = 1 + wl.gen_per_failure;
    int n_exact = 0, monotone = 1;
    for (int i = 0; i < 5000; i++) {
        struct wl_traj_state a = {.traj_id = i, .prompt_id = i / 8, .turn = 1}, b = a;
        struct wl_turn ta, tb;
        b.n_failures = 2;
        workload_turn(&wl, SEED, &a, &ta);
        workload_turn(&wl, SEED, &b, &tb);
        monotone &= tb.gen_tokens >= ta.gen_tokens;
        if (tb.gen_tokens < wl.gen_max && ta.gen_tokens >= 50)
            n_exact += fabs(tb.gen_tokens / (double)ta.gen_tokens - g * g) < 0.02 * g * g;
        else
            n_exact++;
    }
    CU_ASSERT(monotone);
    CU_ASSERT_EQUAL(n_exact, 5000);
}

/* ---- long tail and describe ---- */

static int cmp_int(const void *a, const void *b)
{
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

static double quantile(const int *v, int n, double q)
{
    double pos = q * (n - 1);
    int i = (int)pos;
    return i >= n - 1 ? v[n - 1] : v[i] + (pos - i) * (v[i + 1] - v[i]);
}

/* p99 / p50 of total trajectory tokens over n trajectories at step 0, seed 1
 * (the numbers quoted in the preset files), and the same from describe's output. */
static void check_tail(const char *name)
{
    enum { N = 20000 };
    static int tot[N];
    struct workload wl;
    struct traj tr;
    load(name, &wl);
    for (int i = 0; i < N; i++) {
        run_traj(&wl, 1, i, i / 4, 0, &tr); /* describe's groups of 4 */
        tot[i] = tr.total;
    }
    qsort(tot, N, sizeof tot[0], cmp_int);
    double ratio = quantile(tot, N, 0.99) / quantile(tot, N, 0.5);
    if (ratio < 6 || ratio > 16) fprintf(stderr, "\n  %s: p99/p50 %g\n", name, ratio);
    CU_ASSERT(ratio >= 6 && ratio <= 16);

    static char buf[1 << 14];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    CU_ASSERT_FATAL(f != NULL);
    workload_describe(&wl, 1, N, 0, f);
    fclose(f);
    const char *line = strstr(buf, "p99 / p50");
    double printed = 0;
    CU_ASSERT_FATAL(line != NULL);
    CU_ASSERT(sscanf(line + strlen("p99 / p50"), "%lf", &printed) == 1);
    CU_ASSERT(fabs(printed - ratio) <= 0.006);
    for (int k = 0; k < wl.n_tools; k++) CU_ASSERT(strstr(buf, wl.tools[k].name) != NULL);
    CU_ASSERT(strstr(buf, "step 0") != NULL);
}

static void test_long_tail(void)
{
    check_tail("r2e-gym");
    check_tail("dapo-math");
}

/* ---- broken files ---- */

#define TOOL_A "{ name = \"a\"; weight = 1.0; payload_median = 100.0; payload_sigma = 0.5; payload_max = 2000; " \
               "latency_median_s = 1.0; latency_sigma = 0.5; p_fail = 0.2; p_timeout = 0.1; timeout_s = 10.0; }"

static const char wl_ok[] =
    "workload = {\n"                       /*  1 */
    "  name = \"w\";\n"                    /*  2 */
    "  prompt_median = 100.0;\n"           /*  3 */
    "  prompt_sigma = 0.5;\n"              /*  4 */
    "  prompt_min = 10;\n"                 /*  5 */
    "  prompt_max = 1000;\n"               /*  6 */
    "  gen_median = 200.0;\n"              /*  7 */
    "  gen_sigma = 0.8;\n"                 /*  8 */
    "  gen_max = 4000;\n"                  /*  9 */
    "  min_turns = 1;\n"                   /* 10 */
    "  max_turns = 5;\n"                   /* 11 */
    "  p_continue = 0.5;\n"                /* 12 */
    "  p_continue_fail_bonus = 0.3;\n"     /* 13 */
    "  p_continue_large_bonus = 0.1;\n"    /* 14 */
    "  large_payload = 500;\n"             /* 15 */
    "  tools = ( " TOOL_A " );\n"          /* 16 */
    "  drift_gen_per_step = 0.01;\n"       /* 17 */
    "  drift_continue_per_step = 0.001;\n" /* 18 */
    "  drift_max_steps = 100;\n"           /* 19 */
    "  reward_base = 0.3;\n"               /* 20 */
    "  reward_per_step = 0.002;\n"         /* 21 */
    "  reward_per_failure = 0.1;\n"        /* 22 */
    "  difficulty_gen_sigma = 0.3;\n"      /* 23 */
    "  difficulty_continue = 0.05;\n"      /* 24 */
    "  difficulty_reward = 0.1;\n"         /* 25 */
    "  gen_per_failure = 0.2;\n"           /* 26 */
    "};\n";

static const struct {
    const char *key, *repl, *want;
} bad_cases[] = {
    {NULL, "  gen_mean = 3.0;\n", "27: gen_mean: unknown key (known keys: name, prompt_median"},
    {"p_continue", "", ":1: p_continue: missing (every key is required"},
    {"p_continue", "  p_continue = 1.5;\n", "12: p_continue: 1.5 is out of range, must be in [0, 1]"},
    {"max_turns", "  max_turns = 2.5;\n", "11: max_turns: 2.5 must be an integer"},
    {"prompt_max", "  prompt_max = 5;\n", "6: prompt_max: 5 is below prompt_min 10"},
    {"prompt_median", "  prompt_median = 5000.0;\n", "3: prompt_median: 5000 lies outside [prompt_min 10, prompt_max 1000]"},
    {"min_turns", "  min_turns = 6;\n", "10: min_turns: 6 exceeds max_turns 5"},
    {"name", "  name = \"\";\n", "2: name: \"\" must have 1 to 31 characters"},
    {"tools", "  tools = { name = \"a\"; };\n", "16: tools: is a group, expected a list"},
    {"tools", "  tools = ( );\n", "16: tools: empty, but max_turns = 5 needs a tool"},
    {"tools", "  tools = ( 3 );\n", "16: tools[0]: is an integer, expected a group"},
    {"tools", "  tools = ( { name = \"a\"; fail_rate = 0.1; } );\n", "16: tools[0].fail_rate: unknown key"},
    {"tools", "  tools = ( { name = \"a\"; weight = 1.0; } );\n", "16: tools[0].payload_median: missing"},
    {"tools", "  tools = ( " TOOL_A ",\n    " TOOL_A " );\n", "17: tools[1].name: \"a\" is also the name of tools[0]"},
    {"tools",
     "  tools = ( { name = \"a\"; weight = 1.0; payload_median = 100.0; payload_sigma = 0.5; payload_max = 2000; "
     "latency_median_s = 1.0; latency_sigma = 0.5; p_fail = 0.7; p_timeout = 0.5; timeout_s = 10.0; } );\n",
     "16: tools[0].p_timeout: p_fail 0.7 + p_timeout 0.5 exceeds 1"},
    {"tools",
     "  tools = ( { name = \"a\"; weight = 1.0; payload_median = 100.0; payload_sigma = 0.5; payload_max = 2000; "
     "latency_median_s = 20.0; latency_sigma = 0.5; p_fail = 0.2; p_timeout = 0.1; timeout_s = 10.0; } );\n",
     "16: tools[0].latency_median_s: 20 s exceeds timeout_s 10 s"},
    {"tools",
     "  tools = ( { name = \"a\"; weight = 0.0; payload_median = 100.0; payload_sigma = 0.5; payload_max = 2000; "
     "latency_median_s = 1.0; latency_sigma = 0.5; p_fail = 0.2; p_timeout = 0.1; timeout_s = 10.0; } );\n",
     "16: tools[0].weight: 0 is out of range, must be in (0, 1e+09]"},
    {"drift_gen_per_step", "  drift_gen_per_step = 2.0;\n", "17: drift_gen_per_step: 2 is out of range"},
    {"reward_base", "  reward_base = \"high\";\n", "20: reward_base: is a string, expected a number"},
    {"reward_base", "  reward_base = ;\n", "20: cannot parse: syntax error"},
    {"difficulty_gen_sigma", "  difficulty_gen_sigma = -0.1;\n", "23: difficulty_gen_sigma: -0.1 is out of range"},
    {"gen_per_failure", "", ":1: gen_per_failure: missing (every key is required"},
};

static void test_bad_files(void)
{
    char text[8192], err[1024], name[32];
    struct workload wl;
    CU_ASSERT_FATAL(workload_load(test_write_file("workloads", "ok", wl_ok), &wl, err, sizeof err) == 0);
    CU_ASSERT_EQUAL(wl.n_tools, 1);
    CU_ASSERT_DOUBLE_EQUAL(wl.tools[0].p_timeout, 0.1, 0);
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        test_edit_config(text, sizeof text, wl_ok, bad_cases[i].key, bad_cases[i].repl);
        snprintf(name, sizeof name, "bad%zu", i);
        const char *path = test_write_file("workloads", name, text);
        CU_ASSERT(workload_load(path, &wl, err, sizeof err) == -1);
        int ok = strncmp(err, path, strlen(path)) == 0 && strstr(err, bad_cases[i].want) != NULL;
        if (!ok) fprintf(stderr, "\n  case %zu: want \"%s\"\n  got  \"%s\"\n", i, bad_cases[i].want, err);
        CU_ASSERT(ok);
    }
    /* Nine tools: one more than WL_MAX_TOOLS. */
    char tools[4096] = "  tools = ( ";
    for (int i = 0; i <= WL_MAX_TOOLS; i++) {
        char one[512];
        snprintf(one, sizeof one, "%s{ name = \"t%d\"; weight = 1.0; payload_median = 1.0; payload_sigma = 0.0; "
                 "payload_max = 1; latency_median_s = 1.0; latency_sigma = 0.0; p_fail = 0.0; p_timeout = 0.0; "
                 "timeout_s = 1.0; }", i ? ", " : "", i);
        strncat(tools, one, sizeof tools - strlen(tools) - 1);
    }
    strncat(tools, " );\n", sizeof tools - strlen(tools) - 1);
    test_edit_config(text, sizeof text, wl_ok, "tools", tools);
    CU_ASSERT(workload_load(test_write_file("workloads", "ninetools", text), &wl, err, sizeof err) == -1);
    CU_ASSERT(strstr(err, "16: tools: 9 tools, at most 8 are supported") != NULL);
    CU_ASSERT(workload_load("/nonexistent/w.cfg", &wl, err, sizeof err) == -1);
    CU_ASSERT_STRING_EQUAL(err, "/nonexistent/w.cfg: cannot read: No such file or directory");
    CU_ASSERT(workload_load(test_path("inputs/models/qwen3-4b.cfg"), &wl, err, sizeof err) == -1);
    CU_ASSERT(strstr(err, ": model: unknown top-level setting") != NULL);
}

static const struct test_case cases[] = {
    {"presets load", test_presets_load},
    {"draws are pure functions of their keys", test_determinism},
    {"prompt mean = clamped lognormal mean", test_prompt_mean},
    {"mean turns = Markov-chain DP", test_expected_turns},
    {"failures and large payloads raise the continue rate", test_failure_raises_continue},
    {"drift lengthens generations", test_drift},
    {"reward probability", test_reward},
    {"groups are alike, tails are long, lengths drift (measured)", test_group_structure},
    {"each failure lengthens the turns after it", test_failure_history},
    {"presets have a long tail; describe agrees", test_long_tail},
    {"broken files give file:line: key: messages", test_bad_files},
    {NULL, NULL},
};

int main(void)
{
    static const struct test_suite suites[] = {{"workload", cases}, {NULL, NULL}};
    return test_main(suites);
}
