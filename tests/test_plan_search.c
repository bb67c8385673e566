/*
 * The planner's search (src/planner/plan_search.c, plan_layouts.c) with synthetic
 * evaluators: layout counts against hand counts and an independent count; the
 * branch-and-bound search against the brute force on every small case (2..24 GPUs,
 * six limit sets, evaluators that are smooth, noisy and non-monotone, quantised into
 * ties, with training OOM regions and rollout KV limits, with and without a rollout
 * lower bound), field by field and with exact doubles; pruning; alignment and idle
 * GPUs; the reason given when nothing is feasible; grid mode against the exact
 * optimum of a smooth evaluator (within GRID_FACTOR); the same search with threads.
 */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/plan_search.h"
#include "planner/plan_ahead.h"
#include "planner/plan_layouts.h"
#include "testutil.h"

/* Grid mode (max_layouts 5) stays within this factor of the exact step time of the
 * smooth evaluator at 24..48 GPUs. */
#define GRID_FACTOR 1.02

/* ---- synthetic evaluators ---- */

enum { SM_SMOOTH, SM_NOISY, SM_TIES, SM_OOM, SM_N_MODES };

struct synth {
    int mode;
    int batch;
    double train_work;   /* seconds of one step on one GPU */
    double mem_state;    /* GB of weights + optimizer per replica (sharded by tp pp, dp) */
    double mem_act;      /* GB of activations per micro sequence, sharded by tp */
    double mem_limit;    /* GB per GPU */
    int min_train_tp;    /* training shapes with a smaller tp do not fit */
    double roll_work;    /* seconds of decode on one TP-1 instance */
    double tail;         /* the longest sample's decode on TP 1 */
    int min_kv_tp;       /* a layout needs an instance of at least this TP */
    int use_lb;
};

static double hash01(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (double)(x >> 11) * 0x1p-53;
}

static double quantise(double t) { return ceil(t / 0.25) * 0.25; }

static double synth_train(void *ctx, const struct train_shape *s, char *why, size_t n)
{
    const struct synth *y = ctx;
    int r = s->tp * s->pp, gpus = r * s->dp;
    double mem = y->mem_state / r * (0.25 + 0.75 / s->dp) + y->mem_act * s->micro / s->tp;
    if (y->mode == SM_OOM && (s->dp == 1 || (s->micro >= 4 && r < 4))) mem += y->mem_limit;
    if (mem > y->mem_limit || s->tp < y->min_train_tp) {
        snprintf(why, n, "needs %.1f GB per GPU of %.1f", mem, y->mem_limit);
        return INFINITY;
    }
    double compute = y->train_work / gpus * (1 + 0.08 * log2(s->tp) + 0.2 / s->micro);
    double n_micro = (double)y->batch / (s->dp * s->micro);
    double bubble = compute * (s->pp - 1) / (n_micro + s->pp - 1);
    double dp_comm = 0.3 * (s->dp - 1) / s->dp;
    double t = compute + bubble + dp_comm;
    if (y->mode == SM_NOISY)
        t *= 1 + 0.3 * hash01((uint64_t)s->tp * 1000003u + (uint64_t)s->pp * 7919u +
                              (uint64_t)s->dp * 131u + (uint64_t)s->micro);
    if (y->mode == SM_TIES) t = quantise(t);
    return t;
}

static double synth_rollout(void *ctx, const int counts[PC_N_TP], char *why, size_t n)
{
    const struct synth *y = ctx;
    double thr = 0;
    int max_tp = 0, inst = 0;
    for (int k = 0; k < PC_N_TP; k++) {
        if (counts[k] == 0) continue;
        thr += counts[k] * pow(pc_tp_of(k), 0.8);
        max_tp = pc_tp_of(k);
        inst += counts[k];
    }
    if (max_tp < y->min_kv_tp) {
        snprintf(why, n, "a 32768-token sample fits no instance (largest TP %d)", max_tp);
        return INFINITY;
    }
    double t = fmax(y->roll_work / thr, y->tail / pow(max_tp, 0.6)) + 0.01 * inst;
    if (y->mode == SM_NOISY) {
        uint64_t key = 0;
        for (int k = 0; k < PC_N_TP; k++) key = key * 1000003u + (uint64_t)counts[k];
        t *= 1 + 0.4 * hash01(key); /* non-monotone in every direction */
    }
    if (y->mode == SM_TIES) t = quantise(t);
    return t;
}

/* Per-GPU instance throughput is at most 1 (TP 1), and every term only adds. */
static double synth_lb(void *ctx, int gpus)
{
    const struct synth *y = ctx;
    double lb = y->roll_work / gpus;
    return y->mode == SM_TIES ? quantise(lb) : lb;
}

static struct synth synth_default(int mode, int batch)
{
    return (struct synth){.mode = mode, .batch = batch, .train_work = 40, .mem_state = 60,
                          .mem_act = 6, .mem_limit = 40, .min_train_tp = 1, .roll_work = 30,
                          .tail = 6, .min_kv_tp = 2, .use_lb = 1};
}

static struct plan_eval synth_eval(struct synth *y)
{
    return (struct plan_eval){y, synth_train, synth_rollout, y->use_lb ? synth_lb : NULL, NULL, NULL,
                              NULL};
}

static struct plan_limits limits_default(int n_gpus)
{
    return (struct plan_limits){.n_gpus = n_gpus, .gpus_per_node = 8, .min_rollout_tp = 1,
                                .max_rollout_tp = 8, .max_train_tp = 8, .max_train_pp = 4,
                                .max_micro = 8, .min_train = 1, .min_rollout = 1,
                                .granularity = 1, .batch = 16, .max_layouts = 1000000};
}

/* ---- layout counts ---- */

/* Independent count: nested loops over the four classes. */
static int64_t count_loops(int n, int min_tp, int max_tp)
{
    int64_t total = 0;
    int lim[PC_N_TP];
    for (int k = 0; k < PC_N_TP; k++)
        lim[k] = pc_tp_of(k) >= min_tp && pc_tp_of(k) <= max_tp ? n / pc_tp_of(k) : 0;
    for (int a = 0; a <= lim[3]; a++)
        for (int b = 0; b <= lim[2]; b++)
            for (int c = 0; c <= lim[1]; c++)
                for (int d = 0; d <= lim[0]; d++)
                    total += 8 * a + 4 * b + 2 * c + d == n;
    return total;
}

static void test_count_layouts(void)
{
    /* 8 GPUs over {1,2,4,8}: 8 | 4+4 | 4+2+2 | 4+2+1+1 | 4+1x4 | 2x4 | 2x3+1x2 |
     * 2x2+1x4 | 2+1x6 | 1x8 -> 10. */
    CU_ASSERT_EQUAL(plan_count_layouts(8, 1, 8), 10);
    CU_ASSERT_EQUAL(plan_count_layouts(8, 4, 8), 2);   /* 8 | 4+4 */
    CU_ASSERT_EQUAL(plan_count_layouts(8, 2, 2), 1);
    CU_ASSERT_EQUAL(plan_count_layouts(6, 4, 8), 0);   /* 6 is no sum of 4s and 8s */
    CU_ASSERT_EQUAL(plan_count_layouts(12, 3, 8), 2);  /* classes 4, 8: 4x3 | 8+4 */
    CU_ASSERT_EQUAL(plan_count_layouts(5, 16, 32), 0); /* no class of 1..8 allowed */
    CU_ASSERT_EQUAL(plan_count_layouts(0, 1, 8), 1);   /* the empty layout */
    CU_ASSERT_EQUAL(plan_count_layouts(-4, 1, 8), 0);
    for (int n = 0; n <= 64; n++)
        for (int lo = 1; lo <= 8; lo *= 2)
            for (int hi = lo; hi <= 8; hi *= 2)
                CU_ASSERT_EQUAL(plan_count_layouts(n, lo, hi), count_loops(n, lo, hi));
    /* 4096 GPUs: a coin-change table. */
    static int64_t ways[4097];
    memset(ways, 0, sizeof ways);
    ways[0] = 1;
    for (int k = 0; k < PC_N_TP; k++)
        for (int g = pc_tp_of(k); g <= 4096; g++) ways[g] += ways[g - pc_tp_of(k)];
    CU_ASSERT_EQUAL(plan_count_layouts(4096, 1, 8), ways[4096]);
    CU_ASSERT_EQUAL(plan_count_layouts(INT_MAX, 1, 8), INT64_MAX);
    int64_t big = plan_count_layouts(INT_MAX - 1, 2, 8); /* three classes: ~x^2 / 16 */
    CU_ASSERT(big > 70000000000000000ll && big < 75000000000000000ll);
    CU_ASSERT_EQUAL(plan_count_layouts(INT_MAX, 2, 8), 0);
}

/* ---- search against brute force ---- */

static int same_choice(const struct plan_choice *a, const struct plan_choice *b)
{
    return a->n_train == b->n_train && a->train.tp == b->train.tp && a->train.pp == b->train.pp &&
           a->train.dp == b->train.dp && a->train.micro == b->train.micro &&
           memcmp(a->counts, b->counts, sizeof a->counts) == 0 && a->n_rollout == b->n_rollout &&
           a->n_idle == b->n_idle && a->train_s == b->train_s && a->rollout_s == b->rollout_s &&
           a->step_s == b->step_s && strcmp(a->why, b->why) == 0;
}

/* Invariants of any returned choice. */
static int consistent(const struct plan_limits *l, const struct plan_choice *c)
{
    int gpus = 0;
    for (int k = 0; k < PC_N_TP; k++) gpus += c->counts[k] * pc_tp_of(k);
    int r = c->train.tp * c->train.pp;
    return gpus == c->n_rollout && c->n_rollout >= 1 && c->n_rollout >= l->min_rollout &&
           c->n_train == r * c->train.dp && c->n_rollout % r == 0 &&
           c->n_train + c->n_rollout + c->n_idle == l->n_gpus && c->n_idle >= 0 &&
           c->n_train % l->granularity == 0 && c->n_train >= l->min_train &&
           c->train.dp <= l->batch && c->train.micro * c->train.dp <= l->batch &&
           c->step_s == fmax(c->train_s, c->rollout_s) && c->approx == 0;
}

/* Six limit sets over n GPUs. */
static struct plan_limits limits_variant(int v, int n)
{
    struct plan_limits l = limits_default(n);
    switch (v) {
    case 1:
        l.min_rollout_tp = 2; l.max_train_tp = 4; l.max_train_pp = 2; l.max_micro = 4;
        l.granularity = 2; l.batch = 8; l.min_rollout = 4;
        break;
    case 2:
        l.gpus_per_node = 4; l.batch = 4; l.min_train = 3;
        break;
    case 3:
        l.min_rollout_tp = 4; l.max_rollout_tp = 4; l.granularity = 4;
        break;
    case 4:
        l.batch = 1; l.max_train_pp = 8;
        break;
    case 5:
        l.max_rollout_tp = 2; l.max_train_tp = 2; l.min_train = 0; l.batch = 64;
        break;
    default:
        break;
    }
    return l;
}

static void test_search_matches_brute(void)
{
    int n_cases = 0, n_feasible = 0, n_pruned = 0, n_fewer = 0, mismatches = 0;
    for (int mode = 0; mode < SM_N_MODES; mode++)
        for (int use_lb = 0; use_lb <= 1; use_lb++)
            for (int v = 0; v < 6; v++)
                for (int n = 2; n <= 24; n++) {
                    struct plan_limits l = limits_variant(v, n);
                    struct synth y = synth_default(mode, l.batch);
                    y.use_lb = use_lb;
                    if (v == 5) y.min_kv_tp = 1;
                    struct plan_eval ev = synth_eval(&y);
                    struct plan_choice a, b;
                    int ra = plan_search(&l, &ev, &a), rb = plan_search_brute(&l, &ev, &b);
                    n_cases++;
                    int ok = ra == rb && same_choice(&a, &b) && (ra != 0 || consistent(&l, &a));
                    if (!ok && mismatches++ < 5)
                        fprintf(stderr,
                                "mode %d lb %d variant %d n %d: search %d (%d: tp %d pp %d dp %d "
                                "micro %d, %d %d %d %d, %.17g) '%s', brute %d (%d: tp %d pp %d dp %d "
                                "micro %d, %d %d %d %d, %.17g) '%s'\n",
                                mode, use_lb, v, n, ra, a.n_train, a.train.tp, a.train.pp, a.train.dp,
                                a.train.micro, a.counts[0], a.counts[1], a.counts[2], a.counts[3],
                                a.step_s, a.why, rb, b.n_train, b.train.tp, b.train.pp, b.train.dp,
                                b.train.micro, b.counts[0], b.counts[1], b.counts[2], b.counts[3],
                                b.step_s, b.why);
                    CU_ASSERT(ok);
                    CU_ASSERT(a.n_train_evals <= b.n_train_evals);
                    CU_ASSERT(a.n_rollout_evals <= b.n_rollout_evals);
                    CU_ASSERT(a.pruned_oom <= b.pruned_oom); /* a subset is trained */
                    CU_ASSERT_EQUAL(b.pruned_bound, 0);
                    n_feasible += ra == 0;
                    n_pruned += a.pruned_bound > 0;
                    n_fewer += a.n_rollout_evals < b.n_rollout_evals;
                }
    /* The cases must exercise both outcomes and the pruning. */
    CU_ASSERT(n_feasible > n_cases / 2);
    CU_ASSERT(n_feasible < n_cases);
    CU_ASSERT(n_pruned > n_cases / 4);
    CU_ASSERT(n_fewer > n_cases / 4);
}

/* Equal step times everywhere: the tie-breaks alone decide. Training is faster with
 * tp 2 (which leaves an even rollout count) and rollout faster on TP-1 instances
 * alone when the count is odd (tp 1, one training GPU), but neither beats the other
 * stage's 1 s, so the first pair in tie order must win, not the fastest stage. */
static double flat_train(void *ctx, const struct train_shape *s, char *why, size_t n)
{
    (void)ctx; (void)why; (void)n;
    return s->tp == 2 ? 0.5 : s->micro == 1 ? 1.5 : 1.0;
}

static double flat_rollout(void *ctx, const int counts[PC_N_TP], char *why, size_t n)
{
    (void)ctx; (void)why; (void)n;
    int gpus = 0;
    for (int k = 0; k < PC_N_TP; k++) gpus += counts[k] * pc_tp_of(k);
    return gpus % 2 == 1 && counts[1] + counts[2] + counts[3] == 0 ? 0.5 : 1.0;
}

static void test_ties(void)
{
    struct plan_eval ev = {NULL, flat_train, flat_rollout, NULL, NULL, NULL, NULL};
    struct plan_limits l = limits_default(16);
    struct plan_choice a, b;
    /* Fewest training GPUs: 1 (tp 1, micro 2 since micro 1 takes 1.5 s); 15 rollout
     * GPUs, most TP-8 first: 8 + 4 + 2 + 1. */
    CU_ASSERT_EQUAL_FATAL(plan_search(&l, &ev, &a), 0);
    CU_ASSERT_EQUAL(a.n_train, 1);
    CU_ASSERT_EQUAL(a.train.micro, 2);
    CU_ASSERT_EQUAL(a.step_s, 1.0);
    CU_ASSERT(memcmp(a.counts, ((int[PC_N_TP]){1, 1, 1, 1}), sizeof a.counts) == 0);
    CU_ASSERT_EQUAL(plan_search_brute(&l, &ev, &b), 0);
    CU_ASSERT(same_choice(&a, &b));
    /* 8 training GPUs: tp 1 pp 1 dp 8 before tp 2 (faster) and pp 2; micro 2 since
     * micro 1 is slower than the step; 8 rollout GPUs: one TP-8 instance. */
    l.min_train = 8;
    l.granularity = 8;
    CU_ASSERT_EQUAL_FATAL(plan_search(&l, &ev, &a), 0);
    CU_ASSERT(a.n_train == 8 && a.train.tp == 1 && a.train.pp == 1 && a.train.dp == 8);
    CU_ASSERT_EQUAL(a.train.micro, 2);
    CU_ASSERT(memcmp(a.counts, ((int[PC_N_TP]){0, 0, 0, 1}), sizeof a.counts) == 0);
    CU_ASSERT_EQUAL(plan_search_brute(&l, &ev, &b), 0);
    CU_ASSERT(same_choice(&a, &b));
    /* Every group ties, so everything after the first is pruned at equality. */
    CU_ASSERT(a.pruned_bound > 0);
}

/* ---- alignment ---- */

static void test_alignment(void)
{
    /* 11 GPUs, training of 4 (granularity 4, min_rollout 6 rules out 8), tp 1 does
     * not fit: tp 2 dp 2 leaves 7 GPUs, rounded to 6 for TP-2 replicas, 1 idle. */
    struct plan_limits l = limits_default(11);
    l.granularity = 4;
    l.min_rollout = 6;
    struct synth y = synth_default(SM_SMOOTH, l.batch);
    y.min_train_tp = 2;
    y.min_kv_tp = 1;
    struct plan_eval ev = synth_eval(&y);
    struct plan_choice a, b;
    CU_ASSERT_EQUAL_FATAL(plan_search(&l, &ev, &a), 0);
    CU_ASSERT_EQUAL(a.n_train, 4);
    CU_ASSERT_EQUAL(a.train.tp, 2);
    CU_ASSERT_EQUAL(a.train.dp, 2);
    CU_ASSERT_EQUAL(a.n_rollout, 6);
    CU_ASSERT_EQUAL(a.n_idle, 1);
    CU_ASSERT(consistent(&l, &a));
    CU_ASSERT_EQUAL(plan_search_brute(&l, &ev, &b), 0);
    CU_ASSERT(same_choice(&a, &b));

    /* Rollout TP 4 only: 11 - 2 = 9 rounds to 8, one idle GPU. */
    l = limits_default(11);
    l.min_rollout_tp = 4;
    l.max_rollout_tp = 4;
    l.min_train = 2;
    l.granularity = 2;
    l.max_train_tp = 1;
    l.max_train_pp = 1;
    y = synth_default(SM_SMOOTH, l.batch);
    y.train_work = 1; /* rollout bound: the fewest training GPUs win */
    y.min_kv_tp = 1;
    y.mem_limit = 1000;
    ev = synth_eval(&y);
    CU_ASSERT_EQUAL_FATAL(plan_search(&l, &ev, &a), 0);
    CU_ASSERT_EQUAL(a.n_train, 2);
    CU_ASSERT_EQUAL(a.n_rollout, 8);
    CU_ASSERT_EQUAL(a.counts[2], 2);
    CU_ASSERT_EQUAL(a.n_idle, 1);
    CU_ASSERT(consistent(&l, &a));
}

/* ---- infeasible ---- */

static void test_infeasible(void)
{
    struct synth y = synth_default(SM_SMOOTH, 16);
    struct plan_eval ev = synth_eval(&y);
    struct plan_choice a, b;

    struct plan_limits l = limits_default(48);
    l.min_train = 40;
    l.min_rollout = 16;
    CU_ASSERT_EQUAL(plan_search(&l, &ev, &a), -1);
    CU_ASSERT_STRING_EQUAL(a.why, "limits leave no candidate: min_train 40 + min_rollout 16 > 48 GPUs");
    CU_ASSERT_EQUAL(a.n_train_evals + a.n_rollout_evals, 0);

    l = limits_default(48);
    l.min_rollout_tp = 16;
    CU_ASSERT_EQUAL(plan_search(&l, &ev, &a), -1);
    CU_ASSERT(strstr(a.why, "no rollout TP") != NULL);

    l = limits_default(48);
    l.gpus_per_node = 6;
    CU_ASSERT_EQUAL(plan_search(&l, &ev, &a), -1);
    CU_ASSERT(strstr(a.why, "gpus_per_node 6 is not a power of two") != NULL);
    l = limits_default(0);
    CU_ASSERT_EQUAL(plan_search_brute(&l, &ev, &a), -1);
    CU_ASSERT(strstr(a.why, "n_gpus 0") != NULL);

    /* Nothing fits in memory: the report names the least memory-hungry shape tried
     * and the evaluator's reason. tp 8 pp 4 (32 GPUs) is no candidate: its 8 rollout
     * GPUs round down to 0 at alignment 32; tp 8 pp 2 dp 1 leaves 24 -> 16. */
    l = limits_default(40);
    y.mem_limit = 0.5;
    CU_ASSERT_EQUAL(plan_search(&l, &ev, &a), -1);
    CU_ASSERT(strncmp(a.why, "no training shape fits in memory (tp 8 pp 2 dp 1 micro 1: needs ", 64) == 0);
    CU_ASSERT_EQUAL(plan_search_brute(&l, &ev, &b), -1);
    CU_ASSERT_STRING_EQUAL(a.why, b.why);
    CU_ASSERT_EQUAL(a.pruned_oom, a.n_train_evals);

    /* No layout holds the longest sample: named at the most rollout GPUs of a shape
     * that fits (1 training GPU does not fit in memory; tp 2 on 2 leaves 38). */
    y = synth_default(SM_SMOOTH, 16);
    y.min_kv_tp = 16;
    CU_ASSERT_EQUAL(plan_search(&l, &ev, &a), -1);
    CU_ASSERT_STRING_EQUAL(a.why, "no rollout layout is feasible for 38 GPUs: a 32768-token sample "
                                  "fits no instance (largest TP 8)");
    CU_ASSERT_EQUAL(plan_search_brute(&l, &ev, &b), -1);
    CU_ASSERT_STRING_EQUAL(a.why, b.why);
}

/* ---- tolerance ---- */

/* With a tolerance e the plan is within 1 + e of the brute force's optimum, never
 * better than it, and the search does no more work than the exact one. A rollout
 * that is flat in the GPU count (tail-bound, as large clusters are) just above its
 * lower bound shows the point: the exact search must try every rollout count, a
 * tolerance above the gap stops after the first. */
static double tail_rollout(void *ctx, const int counts[PC_N_TP], char *why, size_t n)
{
    (void)ctx; (void)why; (void)n;
    int gpus = 0;
    for (int k = 0; k < PC_N_TP; k++) gpus += counts[k] * pc_tp_of(k);
    return 10.0 + 0.01 * hash01((uint64_t)gpus); /* 10 .. 10.01, in no order */
}

static double tail_lb(void *ctx, int gpus)
{
    (void)ctx; (void)gpus;
    return 10.0;
}

static double fast_train(void *ctx, const struct train_shape *s, char *why, size_t n)
{
    (void)ctx; (void)why; (void)n;
    return 8.0 / (s->tp * s->pp * s->dp) + 0.01 * s->micro;
}

static void test_tolerance(void)
{
    int n_cases = 0, n_fewer = 0;
    for (int mode = 0; mode < SM_N_MODES; mode++)
        for (int v = 0; v < 6; v++)
            for (int n = 2; n <= 24; n += 2) {
                struct plan_limits l = limits_variant(v, n);
                struct synth y = synth_default(mode, l.batch);
                if (v == 5) y.min_kv_tp = 1;
                struct plan_eval ev = synth_eval(&y);
                struct plan_choice exact, loose, brute;
                int re = plan_search(&l, &ev, &exact);
                CU_ASSERT_EQUAL(plan_search_brute(&l, &ev, &brute), re);
                l.tolerance = 0.05;
                CU_ASSERT_EQUAL_FATAL(plan_search(&l, &ev, &loose), re);
                if (re != 0) continue;
                n_cases++;
                CU_ASSERT(loose.step_s >= brute.step_s);
                CU_ASSERT(loose.step_s <= 1.05 * brute.step_s);
                CU_ASSERT(consistent(&l, &loose));
                CU_ASSERT(loose.n_rollout_evals <= exact.n_rollout_evals);
                CU_ASSERT(loose.n_train_evals <= exact.n_train_evals);
                n_fewer += loose.n_rollout_evals < exact.n_rollout_evals;
            }
    CU_ASSERT(n_cases > 100);
    CU_ASSERT(n_fewer > 0);

    struct plan_eval ev = {NULL, fast_train, tail_rollout, tail_lb, NULL, NULL, NULL};
    struct plan_limits l = limits_default(256);
    l.granularity = 8;
    l.max_layouts = 300; /* the config's default: grid + local moves per rollout count */
    struct plan_choice exact, loose;
    CU_ASSERT_EQUAL_FATAL(plan_search(&l, &ev, &exact), 0);
    l.tolerance = 0.002; /* above the 0.1 % band */
    CU_ASSERT_EQUAL_FATAL(plan_search(&l, &ev, &loose), 0);
    CU_ASSERT(loose.step_s <= 1.002 * exact.step_s);
    CU_ASSERT(exact.n_rollout_evals > 20 * loose.n_rollout_evals);

    /* Out of range: refused with the value. */
    l.tolerance = 1.0;
    CU_ASSERT_EQUAL(plan_search(&l, &ev, &loose), -1);
    CU_ASSERT_STRING_EQUAL(loose.why, "invalid limits: tolerance 1 is outside [0, 1)");
    l.tolerance = NAN;
    CU_ASSERT_EQUAL(plan_search(&l, &ev, &loose), -1);
    CU_ASSERT(strstr(loose.why, "tolerance nan") != NULL);
}

/* ---- grid mode ---- */

static void test_grid(void)
{
    for (int n = 24; n <= 48; n += 8) {
        struct plan_limits l = limits_default(n);
        l.batch = 64;
        struct synth y = synth_default(SM_SMOOTH, l.batch);
        y.min_kv_tp = 1;
        struct plan_eval ev = synth_eval(&y);
        struct plan_choice exact, grid;
        CU_ASSERT_EQUAL_FATAL(plan_search(&l, &ev, &exact), 0);
        CU_ASSERT_EQUAL(exact.approx, 0);
        l.max_layouts = 5;
        CU_ASSERT_EQUAL_FATAL(plan_search(&l, &ev, &grid), 0);
        CU_ASSERT_EQUAL(grid.approx, 1);
        grid.approx = 0;
        CU_ASSERT(consistent(&l, &grid));
        CU_ASSERT(grid.step_s >= exact.step_s);
        CU_ASSERT(grid.step_s <= GRID_FACTOR * exact.step_s);
        CU_ASSERT(grid.n_rollout_evals < exact.n_rollout_evals);
        char why[64];
        CU_ASSERT_EQUAL(synth_rollout(&y, grid.counts, why, sizeof why), grid.rollout_s);
    }
}

/* synth_rollout with a cutoff, as the real one: above the cutoff it may return any
 * bound in (cutoff, value]. */
static double synth_rollout_cut(void *ctx, const int counts[PC_N_TP], double cutoff, char *why,
                                size_t n)
{
    double s = synth_rollout(ctx, counts, why, n);
    return s > cutoff && s < INFINITY ? cutoff + 0.5 * (s - cutoff) : s;
}

/* A set's values and choices do not depend on the grid hint (which only orders the
 * evaluation, and so what the cutoffs cut), whether it is absent, empty, left by
 * another GPU count or a poor point. */
static void test_grid_order(void)
{
    for (int mode = SM_SMOOTH; mode <= SM_NOISY; mode++) {
        struct synth y = synth_default(mode, 64);
        y.min_kv_tp = 1;
        struct plan_eval ev = synth_eval(&y);
        ev.rollout_cut_s = synth_rollout_cut;
        for (int gpus = 40; gpus <= 200; gpus += 32) {
            struct layout_set ref, got;
            int64_t n_ref = 0, n_got = 0;
            plan_layouts_eval(&ref, gpus, 0, PC_N_TP - 1, 5, &ev, NULL, &n_ref);
            CU_ASSERT_FATAL(ref.approx && ref.best_s < INFINITY);
            const struct layout_val *ref_pick = plan_layouts_pick(&ref, ref.best_s);
            struct grid_hint other = {0}, poor = {0};
            plan_layouts_eval(&got, gpus + 8, 0, PC_N_TP - 1, 5, &ev, &other, &n_got);
            plan_layouts_free(&got);
            CU_ASSERT(other.units > 0);
            poor = other;
            memset(poor.u, 0, sizeof poor.u);
            poor.u[0] = poor.units; /* every unit on TP 1 */
            struct grid_hint empty = {0};
            struct grid_hint *hints[] = {&empty, &other, &poor};
            for (int h = 0; h < 3; h++) {
                plan_layouts_eval(&got, gpus, 0, PC_N_TP - 1, 5, &ev, hints[h], &n_got);
                CU_ASSERT_EQUAL(got.best_s, ref.best_s);
                const struct layout_val *pick = plan_layouts_pick(&got, got.best_s);
                CU_ASSERT_FATAL(pick != NULL);
                CU_ASSERT_EQUAL(memcmp(pick->counts, ref_pick->counts, sizeof pick->counts), 0);
                CU_ASSERT_EQUAL(pick->s, ref_pick->s);
                /* what both evaluated in full agrees */
                for (size_t i = 0; i < got.n; i++)
                    for (size_t j = 0; j < ref.n; j++)
                        if (!got.v[i].cut && !ref.v[j].cut &&
                            memcmp(got.v[i].counts, ref.v[j].counts, sizeof got.v[i].counts) == 0)
                            CU_ASSERT_EQUAL(got.v[i].s, ref.v[j].s);
                plan_layouts_free(&got);
            }
            plan_layouts_free(&ref);
        }
    }
}

/* ---- threads ---- */

/* Two sets of one count agree in everything a search reads. */
static void same_set(const struct layout_set *a, const struct layout_set *b)
{
    CU_ASSERT_EQUAL(a->best_s, b->best_s);
    CU_ASSERT_EQUAL(a->approx, b->approx);
    const struct layout_val *pa = plan_layouts_pick(a, a->best_s), *pb = plan_layouts_pick(b, b->best_s);
    CU_ASSERT_FATAL(pa != NULL && pb != NULL);
    CU_ASSERT_EQUAL(memcmp(pa->counts, pb->counts, sizeof pa->counts), 0);
    CU_ASSERT_EQUAL(pa->s, pb->s);
}

/* The workers (plan_ahead.h): sets they make equal the ones made here, whatever the
 * hint; a count never wanted is left to the caller; what nobody took is freed at the
 * stop with its evaluator calls counted. Drained, so nothing depends on scheduling. */
static void test_ahead(void)
{
    for (int grid = 0; grid <= 1; grid++) {
        int ml = grid ? 5 : 1000000;
        struct synth y = synth_default(SM_NOISY, 64);
        y.min_kv_tp = 1;
        struct plan_eval ev = synth_eval(&y);
        ev.rollout_cut_s = synth_rollout_cut;
        struct grid_hint hint = {0};
        struct layout_set scratch;
        int64_t calls = 0;
        plan_layouts_eval(&scratch, 56, 0, PC_N_TP - 1, ml, &ev, &hint, &calls); /* a hint */
        plan_layouts_free(&scratch);
        struct plan_ahead *a = plan_ahead_start(3, 200, 0, PC_N_TP - 1, ml, &ev);
        CU_ASSERT_FATAL(a != NULL);
        const int want[] = {40, 72, 104};
        plan_ahead_want(a, want, 3, &hint);
        plan_ahead_drain(a);
        for (int i = 0; i < 3; i++) {
            int64_t n = 0, n_ref = 0;
            struct layout_set *got = plan_ahead_take(a, want[i], &n);
            CU_ASSERT_FATAL(got != NULL);
            struct layout_set ref;
            plan_layouts_eval(&ref, want[i], 0, PC_N_TP - 1, ml, &ev, NULL, &n_ref);
            same_set(got, &ref);
            CU_ASSERT(n > 0);
            plan_layouts_free(&ref);
            plan_layouts_free(got);
            free(got);
        }
        int64_t n = 0;
        CU_ASSERT_PTR_NULL(plan_ahead_take(a, 136, &n)); /* never wanted */
        CU_ASSERT_EQUAL(n, 0);
        /* made, never taken: the stop counts their calls (the workers walk the grids
         * from the hint they were given, so the calls are those of that hint) */
        const int left[] = {168, 200};
        plan_ahead_want(a, left, 2, &hint);
        plan_ahead_drain(a);
        int64_t expect = 0;
        for (int i = 0; i < 2; i++) {
            struct grid_hint h = hint;
            plan_layouts_eval(&scratch, left[i], 0, PC_N_TP - 1, ml, &ev, &h, &expect);
            plan_layouts_free(&scratch);
        }
        n = 0;
        plan_ahead_stop(a, &n);
        CU_ASSERT_EQUAL(n, expect);
        CU_ASSERT(expect > 0);
    }
    CU_ASSERT_PTR_NULL(plan_ahead_start(1, 64, 0, PC_N_TP - 1, 5, NULL)); /* no workers */
}

/* Every field a thread count may not change: all of the choice, and the search's
 * training-side work and pruning (the other threads only make rollout sets). */
static int same_search(const struct plan_choice *a, const struct plan_choice *b)
{
    return same_choice(a, b) && a->approx == b->approx && a->coupled_s == b->coupled_s &&
           a->n_train_evals == b->n_train_evals && a->pruned_oom == b->pruned_oom &&
           a->pruned_bound == b->pruned_bound;
}

/* Threads evaluate the rollout GPU counts the search is about to need ahead of it;
 * the plan and the search's path are those of one thread, exact or with a
 * tolerance, in exact and in grid mode (the batch is above the size at which the
 * search starts threads). The rollout evaluator calls may differ: sets made ahead
 * and never needed, and grids walked from another hint, so cut at other points.
 * Which sets the workers make depends on how the threads are scheduled; test_ahead
 * makes them make some. */
static void test_threads(void)
{
    int mismatches = 0;
    for (int mode = 0; mode < SM_N_MODES; mode++)
        for (int v = 0; v < 6; v++)
            for (int n = 2; n <= 64; n += n < 24 ? 2 : 20)
                for (int grid = 0; grid <= 1; grid++)
                    for (int tol = 0; tol <= 1; tol++) {
                        struct plan_limits l = limits_variant(v, n);
                        l.batch = 512;
                        l.max_layouts = grid ? 5 : 1000000;
                        l.tolerance = tol ? 0.05 : 0;
                        struct synth y = synth_default(mode, l.batch);
                        if (v == 5) y.min_kv_tp = 1;
                        struct plan_eval ev = synth_eval(&y);
                        ev.rollout_cut_s = synth_rollout_cut;
                        struct plan_choice one, many;
                        int r1 = plan_search(&l, &ev, &one);
                        for (int t = 2; t <= 5; t += 3) {
                            l.threads = t;
                            int rt = plan_search(&l, &ev, &many);
                            int ok = rt == r1 && same_search(&one, &many);
                            if (!ok && mismatches++ < 5)
                                fprintf(stderr, "threads %d mode %d variant %d n %d grid %d tol %d: "
                                        "%d vs %d, step %.17g vs %.17g\n", t, mode, v, n, grid,
                                        tol, rt, r1, many.step_s, one.step_s);
                            CU_ASSERT(ok);
                        }
                        l.threads = 0;
                    }

    /* Flat, tail-bound rollout at 256 GPUs: every count is evaluated (exact), or a
     * handful (tolerance); the same plan with threads. */
    struct plan_eval ev = {NULL, fast_train, tail_rollout, tail_lb, NULL, NULL, NULL};
    struct plan_limits l = limits_default(256);
    l.granularity = 8;
    l.max_layouts = 300;
    l.batch = 512;
    for (int tol = 0; tol <= 1; tol++) {
        l.tolerance = tol ? 0.002 : 0;
        struct plan_choice one, many;
        l.threads = 1;
        CU_ASSERT_EQUAL_FATAL(plan_search(&l, &ev, &one), 0);
        l.threads = 3;
        CU_ASSERT_EQUAL_FATAL(plan_search(&l, &ev, &many), 0);
        CU_ASSERT(same_search(&one, &many));
    }
}

int main(void)
{
    static const struct test_case cases[] = {
        {"count_layouts", test_count_layouts},
        {"search_matches_brute", test_search_matches_brute},
        {"ties", test_ties},
        {"alignment", test_alignment},
        {"infeasible", test_infeasible},
        {"grid", test_grid},
        {"grid_order", test_grid_order},
        {"tolerance", test_tolerance},
        {"ahead", test_ahead},
        {"threads", test_threads},
        {NULL, NULL},
    };
    static const struct test_suite suites[] = {{"plan_search", cases}, {NULL, NULL}};
    return test_main(suites);
}
