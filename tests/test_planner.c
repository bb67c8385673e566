/*
 * The planner's integration pieces: length profiles (history resampling, start-up
 * profile from the workload), plans with a training shape and lent instances
 * (plan_lend, plan_train_same, the wire form), the preflight plan of plan.mode = grp
 * and its error when nothing fits, and the search with the real cost model against
 * the brute force.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/config.h"
#include "libra/driver.h"
#include "libra/len_profile.h"
#include "libra/plan.h"
#include "libra/plan_cost.h"
#include "libra/plan_search.h"
#include "libra/log.h"
#include "libra/planner.h"
#include "planner/plan_ahead.h"
#include "planner/plan_layouts.h"
#include "testutil.h"

/* ---- length profiles ---- */

static void test_history_resample(void)
{
    struct len_history h;
    lh_init(&h, 100);
    for (int i = 0; i < 250; i++) { /* the ring keeps the last 100: totals 150..249 */
        struct traj_sample s = {.prompt = i, .gen = 0, .tool = 0, .turns = 1};
        lh_add(&h, &s);
    }
    CU_ASSERT_EQUAL(h.n, 100);
    CU_ASSERT_EQUAL(h.total, 250);
    struct len_profile p;
    lp_init(&p);
    CU_ASSERT_EQUAL(lp_from_history(&p, &h, 5), 0);
    CU_ASSERT_EQUAL(p.n, 5);
    /* ranks round(i 99 / 4) = 0, 25, 50, 74, 99 of the sorted ring */
    const int want[5] = {150, 175, 200, 224, 249};
    for (int i = 0; i < 5; i++) CU_ASSERT_EQUAL(p.s[i].prompt, want[i]);
    CU_ASSERT_EQUAL(lp_max_tokens(&p), 249);
    double tok, sq;
    lp_token_sums(&p, &tok, &sq);
    CU_ASSERT_CLOSE(tok, 150 + 175 + 200 + 224 + 249, 1e-12);
    CU_ASSERT_EQUAL(lp_from_history(&p, &h, 1), 0); /* one sample: the longest */
    CU_ASSERT_EQUAL(p.s[0].prompt, 249);
    struct len_history empty;
    lh_init(&empty, 4);
    CU_ASSERT_EQUAL(lp_from_history(&p, &empty, 3), -1);
    lh_free(&empty);
    lp_free(&p);
    lh_free(&h);
}

static void load_inputs(const char *name, const char *text, struct libra_config *cfg,
                        struct job_inputs *in)
{
    char err[512];
    const char *path = test_write_file("planner", name, text);
    int rc = config_load(path, cfg, err, sizeof err);
    if (rc) fprintf(stderr, "config: %s\n", err);
    CU_ASSERT_FATAL(rc == 0);
    rc = driver_load_inputs(cfg, in, err, sizeof err);
    if (rc) fprintf(stderr, "inputs: %s\n", err);
    CU_ASSERT_FATAL(rc == 0);
}

#define GRP_CFG_HEAD                                                                         \
    "run = { steps = 10; seed = 3; };\n"                                                     \
    "device = { type = \"emu\"; hardware = \"hardware/a800.cfg\"; };\n"
#define GRP_CFG_TAIL                                                                             \
    "rollout = { n_samples = 8; max_turns = 12; max_tokens_per_turn = 4096; max_tokens = "     \
    "32768; };\n"                                                                              \
    "train = { batch_size = 64; max_staleness = 1; };\n"                                        \
    "plan = { mode = \"grp\"; interval = 5; };\n"                                               \
    "env = { name = \"emu\"; };\n"                                                              \
    "workload = { preset = \"workloads/r2e-gym.cfg\"; };\n"
static const char *grp_cfg = GRP_CFG_HEAD "model = { profile = \"models/qwen3-14b.cfg\"; };\n" GRP_CFG_TAIL;

static void test_workload_profile(void)
{
    struct libra_config cfg;
    struct job_inputs in;
    load_inputs("wl", grp_cfg, &cfg, &in);
    struct len_profile a, b;
    lp_init(&a);
    lp_init(&b);
    struct rollout_config ro = {.n_samples = 8, .max_turns = 12, .max_tokens_per_turn = 4096,
                                .max_tokens = 32768};
    lp_from_workload(&a, &in.wl, &ro, 7, 0, 0, 200);
    lp_from_workload(&b, &in.wl, &ro, 7, 0, 0, 200);
    CU_ASSERT_EQUAL(a.n, 200);
    CU_ASSERT(memcmp(a.s, b.s, 200 * sizeof *a.s) == 0); /* deterministic */
    int64_t longest = 0;
    for (int i = 0; i < a.n; i++) {
        CU_ASSERT(a.s[i].turns >= 1 && a.s[i].turns <= 12);
        CU_ASSERT(a.s[i].prompt > 0);
        CU_ASSERT(a.s[i].tool_s >= 0);
        if (traj_sample_tokens(&a.s[i]) > longest) longest = traj_sample_tokens(&a.s[i]);
    }
    /* a long tail: the longest is far above the median of ~1700 tokens */
    CU_ASSERT(longest > 8000);
    /* GRPO groups of n_samples share their prompt (and its length) */
    for (int i = 0; i < a.n; i++) CU_ASSERT_EQUAL(a.s[i].prompt, a.s[i - i % 8].prompt);
    int differ = 0;
    for (int g = 8; g < a.n; g += 8) differ += a.s[g].prompt != a.s[0].prompt;
    CU_ASSERT(differ > 0);
    /* the next trajectories are other draws (the oracle's step k takes ids from k x
     * batch on; it once drew ids 0 .. batch - 1 at every step) */
    lp_from_workload(&b, &in.wl, &ro, 7, 0, 200, 200);
    CU_ASSERT(memcmp(a.s, b.s, 200 * sizeof *a.s) != 0);
    /* tighter caps hold */
    struct rollout_config tight = {.n_samples = 8, .max_turns = 2, .max_tokens_per_turn = 300,
                                   .max_tokens = 2000};
    lp_from_workload(&b, &in.wl, &tight, 7, 0, 0, 200);
    for (int i = 0; i < b.n; i++) {
        CU_ASSERT(b.s[i].turns <= 2);
        CU_ASSERT(b.s[i].gen <= 2 * 300);
        CU_ASSERT(b.s[i].prompt + b.s[i].gen <= 2000 + 0);
    }
    lp_free(&a);
    lp_free(&b);
}

/* ---- plans ---- */

static void test_plan_lend(void)
{
    struct plan_spec spec = {.n_train = 4, .n_tp = 4, .rollout_tp = {2, 1, 4, 1}};
    struct plan base, live;
    char err[256];
    plan_init(&base, 13);
    plan_init(&live, 13);
    CU_ASSERT_FATAL(plan_build(&spec, 13, 0, 0, "t", &base, err, sizeof err) == 0);
    CU_ASSERT_EQUAL(base.train_tp, 1);
    CU_ASSERT_EQUAL(plan_replica_size(&base), 1);
    /* instances largest first: [4 @1, 2 @5, 1 @7, 1 @8]; lend the TP2 and the last TP1 */
    int lend[4] = {0, 1, 0, 1};
    plan_lend(&base, lend, &live);
    CU_ASSERT_EQUAL(live.n_instances, 2);
    CU_ASSERT_EQUAL(live.n_hybrid, 3);
    CU_ASSERT_EQUAL(live.n_rollout_ranks, 5);
    CU_ASSERT_EQUAL(live.inst[0].leader, 1);
    CU_ASSERT_EQUAL(live.inst[1].leader, 7);
    CU_ASSERT_EQUAL(live.ranks[7].instance, 1);
    CU_ASSERT_EQUAL(live.ranks[5].role, ROLE_HYBRID);
    CU_ASSERT_EQUAL(live.ranks[5].index, 0);
    CU_ASSERT_EQUAL(live.ranks[6].index, 1);
    CU_ASSERT_EQUAL(live.ranks[8].index, 2);
    /* surviving instances keep their KV: same leader and TP */
    CU_ASSERT(plan_instance_survives(&base, &live, 1));
    CU_ASSERT(plan_instance_survives(&base, &live, 7));
    CU_ASSERT(!plan_instance_survives(&base, &live, 5));
    /* the core training group is the same: its communicator is kept */
    CU_ASSERT(plan_train_same(&base, &live));
    struct plan other;
    plan_init(&other, 13);
    spec.n_train = 3;
    CU_ASSERT_FATAL(plan_build(&spec, 13, 1, 0, "t", &other, err, sizeof err) == 0);
    CU_ASSERT(!plan_train_same(&base, &other));
    /* the training shape travels with the plan */
    spec = (struct plan_spec){.n_train = 4, .n_tp = 1, .rollout_tp = {8}, .train_tp = 2, .micro = 4};
    CU_ASSERT_FATAL(plan_build(&spec, 13, 2, 5, "shape", &other, err, sizeof err) == 0);
    size_t n = plan_packed_size(&other);
    char *buf = malloc(n);
    plan_pack(&other, buf);
    struct plan back;
    plan_init(&back, 13);
    CU_ASSERT_FATAL(plan_unpack(buf, n, &back) == 0);
    CU_ASSERT_EQUAL(back.train_tp, 2);
    CU_ASSERT_EQUAL(back.train_pp, 1);
    CU_ASSERT_EQUAL(back.micro, 4);
    CU_ASSERT_EQUAL(plan_replica_size(&back), 2);
    CU_ASSERT(!plan_train_same(&base, &back));
    free(buf);
    plan_free(&back);
    plan_free(&other);
    plan_free(&live);
    plan_free(&base);
}

/* ---- preflight ---- */

static void test_preflight(void)
{
    struct libra_config cfg;
    struct job_inputs in;
    load_inputs("grp", grp_cfg, &cfg, &in);
    struct planner pl;
    planner_init(&pl, &cfg, &in.cm, &in.wl, 49);
    struct plan p;
    plan_init(&p, 49);
    char err[512];
    int rc = planner_next(&pl, 0, 0, &p, err, sizeof err);
    if (rc) fprintf(stderr, "preflight: %s\n", err);
    CU_ASSERT_FATAL(rc == 0);
    CU_ASSERT_EQUAL(p.n_train + p.n_rollout_ranks + p.n_idle, 48);
    CU_ASSERT(p.n_train >= 1 && p.n_rollout_ranks >= 1);
    CU_ASSERT_STRING_EQUAL(p.reason, "preflight");
    /* 14B with 16 B/param of state needs several GPUs to fit */
    CU_ASSERT(p.n_train >= 4);
    CU_ASSERT(pl.have_cur);
    /* only epoch 0 is planned ahead of time */
    CU_ASSERT_EQUAL(planner_next(&pl, 1, 5, &p, err, sizeof err), -1);
    planner_free(&pl);

    /* 2 GPUs: one trains 14B alone, which does not fit; the message says why */
    planner_init(&pl, &cfg, &in.cm, &in.wl, 3);
    CU_ASSERT_EQUAL(planner_next(&pl, 0, 0, &p, err, sizeof err), -1);
    fprintf(stderr, "(expected) %s\n", err);
    CU_ASSERT(strstr(err, "no feasible plan for 2 GPUs") != NULL);
    CU_ASSERT(strstr(err, "memory") != NULL || strstr(err, "GB") != NULL);
    planner_free(&pl);
    plan_free(&p);
}

/* The length mix decides the rollout layout: a batch with a long tail gets one large
 * instance for the tail and smaller ones for the bulk (a heterogeneous plan); several
 * long ones, which would slow each other down sharing one batch (each step reads the
 * others' KV caches), get a TP-8 instance each; the same bulk without the tail gets
 * no TP-8 instance at all. 48 A800s, Qwen3-14B, 512 trajectories, the real cost
 * model. */
static int plan_for(const struct planner *pl, int n_long, struct plan_choice *ch)
{
    struct len_profile p;
    lp_init(&p);
    p.s = xcalloc(512, sizeof *p.s);
    p.n = 512;
    p.overlap = 2;
    for (int i = 0; i < p.n; i++)
        p.s[i] = (struct traj_sample){.prompt = 500, .gen = i < n_long ? 30000 : 300, .turns = 1};
    int rc = planner_search(pl, &p, 48, 0, ch);
    lp_free(&p);
    return rc;
}

static void test_heterogeneous_plan(void)
{
    struct libra_config cfg;
    struct job_inputs in;
    load_inputs("het", grp_cfg, &cfg, &in);
    struct planner pl;
    planner_init(&pl, &cfg, &in.cm, &in.wl, 49);
    struct plan_choice tail, tails, flat;
    CU_ASSERT_FATAL(plan_for(&pl, 1, &tail) == 0);
    CU_ASSERT_FATAL(plan_for(&pl, 3, &tails) == 0);
    CU_ASSERT_FATAL(plan_for(&pl, 0, &flat) == 0);
    int small_tail = 0, small_flat = 0;
    for (int k = 0; k < PC_N_TP; k++) {
        if (pc_tp_of(k) < 8) small_tail += tail.counts[k];
        if (pc_tp_of(k) < 8) small_flat += flat.counts[k];
    }
    int k8 = 0;
    while (pc_tp_of(k8) != 8) k8++;
    /* the tail: one TP-8 instance (batch-1 decode of 30,000 tokens is what binds),
     * and smaller instances for the 511 short ones (300 tokens each) */
    CU_ASSERT_EQUAL(tail.counts[k8], 1);
    CU_ASSERT(small_tail >= 2);
    CU_ASSERT(tail.step_s >= 30000 * cost_decode_step_s(&in.cm, 8, 1, 500) / 2);
    /* three long ones: a TP-8 instance each */
    CU_ASSERT_EQUAL(tails.counts[k8], 3);
    /* no tail: throughput binds, and no TP-8 instance is worth its all-reduces */
    CU_ASSERT_EQUAL(flat.counts[k8], 0);
    CU_ASSERT(small_flat >= 2);
    planner_free(&pl);
}

/* The rollout calibration under the coupling: a step that waits for its longest
 * trajectory alternates with one that finds its batch complete (measured rollout
 * 170 s, then 10 s). It is fitted to the mean over the pipeline's cycle (two steps at
 * staleness 1), so the scale holds still; fitted step by step it swung by a factor of
 * several and once steered the planner onto 52 rollout GPUs of 512. No planning in
 * between (triggers held off), so the live plan stays the preflight's. */
static void test_cycle_calibration(void)
{
    struct libra_config cfg;
    struct job_inputs in;
    load_inputs("cycle", GRP_CFG_HEAD "model = { profile = \"models/qwen3-14b.cfg\"; };\n"
                "rollout = { n_samples = 8; max_turns = 12; max_tokens_per_turn = 4096; "
                "max_tokens = 32768; };\n"
                "train = { batch_size = 64; max_staleness = 1; };\n"
                "plan = { mode = \"grp\"; interval = 1000000; imbalance = 1000000.0; "
                "queue_pressure = 1000000.0; active_pressure = 1000000.0; "
                "rejected_delta = 1000000000; };\n"
                "env = { name = \"emu\"; };\n"
                "workload = { preset = \"workloads/r2e-gym.cfg\"; };\n",
                &cfg, &in);
    struct planner pl;
    planner_init(&pl, &cfg, &in.cm, &in.wl, 49);
    struct plan cur, next;
    plan_init(&cur, 49);
    plan_init(&next, 49);
    char err[512];
    CU_ASSERT_FATAL(planner_next(&pl, 0, 0, &cur, err, sizeof err) == 0);
    struct len_profile lp;
    lp_init(&lp);
    lp_from_workload(&lp, &in.wl, &cfg.rollout, 5, 0, 0, 64);
    for (int i = 0; i < lp.n; i++) planner_record(&pl, &lp.s[i]);
    double tok, sq;
    lp_token_sums(&lp, &tok, &sq);
    double lo = INFINITY, hi = 0;
    for (int step = 1; step <= 12; step++) {
        struct planner_inputs pin = {.rt = {.train_s = 10, .rollout_s = step % 2 ? 170 : 10},
                                     .batch_tokens = tok,
                                     .batch_sum_len_sq = sq,
                                     .batch_max_len = (double)lp_max_tokens(&lp),
                                     .live = &cur};
        struct planner_pass ps;
        CU_ASSERT_EQUAL(planner_step(&pl, step, 1, &cur, &pin, &next, &ps), 0);
        if (step >= 4) {
            lo = fmin(lo, ps.scale_rollout);
            hi = fmax(hi, ps.scale_rollout);
        }
    }
    CU_ASSERT(lo > 0 && hi < 1.2 * lo);
    lp_free(&lp);
    plan_free(&cur);
    plan_free(&next);
    planner_free(&pl);
}

/* ---- the search with the real cost model ---- */

struct real_ctx {
    const struct cost_model *cm;
    const struct len_profile *lp;
    double tok, sq, max_len;
    int max_tp;
};

static double real_train(void *arg, const struct train_shape *s, char *why, size_t n)
{
    struct real_ctx *c = arg;
    struct train_est e;
    double t = pc_train_step(c->cm, s, 0, c->lp->n, c->tok, c->sq, c->max_len, &e);
    if (e.oom) snprintf(why, n, "needs %.1f GB", e.mem_bytes / 1e9);
    return t;
}

static double real_rollout(void *arg, const int counts[PC_N_TP], char *why, size_t n)
{
    struct real_ctx *c = arg;
    struct rollout_est e;
    double t = pc_rollout(c->cm, counts, c->lp, &e);
    if (!isfinite(t)) snprintf(why, n, "oom %d", e.oom);
    return t;
}

static double real_lb(void *arg, int g)
{
    struct real_ctx *c = arg;
    return pc_rollout_lower_bound(c->cm, g, c->max_tp, c->lp);
}

/* The pipeline's coupling at overlap 2: the longest chain, then the training. */
static double real_coupled(void *arg, const int counts[PC_N_TP], double train_s)
{
    struct real_ctx *c = arg;
    struct rollout_est e;
    double t = pc_rollout(c->cm, counts, c->lp, &e);
    return isfinite(t) ? e.chain_s + train_s / 2 : INFINITY;
}

static double real_coupled_lb(void *arg, double train_s)
{
    struct real_ctx *c = arg;
    struct pc_rollout_prep *p = pc_rollout_prepare(c->cm, c->lp);
    double chain = pc_chain_lower_bound_prepared(p, c->max_tp);
    pc_rollout_prep_free(p);
    return chain + train_s / 2;
}

/* Model m (Qwen3-4B, Qwen3-14B) in a grp configuration and a batch of the given
 * size drawn with seed, at overlap 2; the caller frees lp. */
static void real_setup(int m, uint64_t seed, int batch, struct libra_config *cfg,
                       struct job_inputs *in, struct len_profile *lp, struct real_ctx *ctx)
{
    const char *models[] = {"models/qwen3-4b.cfg", "models/qwen3-14b.cfg"};
    char text[2048];
    snprintf(text, sizeof text, GRP_CFG_HEAD "model = { profile = \"%s\"; };\n" GRP_CFG_TAIL,
             models[m]);
    load_inputs("real", text, cfg, in);
    lp_init(lp);
    struct rollout_config ro = {.n_samples = 8, .max_turns = 12, .max_tokens_per_turn = 4096,
                                .max_tokens = 32768};
    lp_from_workload(lp, &in->wl, &ro, seed, 0, 0, batch);
    *ctx = (struct real_ctx){&in->cm, lp, 0, 0, (double)lp_max_tokens(lp), 8};
    lp_token_sums(lp, &ctx->tok, &ctx->sq);
    lp->overlap = 2;
}

static void test_search_real_vs_brute(void)
{
    struct libra_config cfg;
    struct job_inputs in;
    for (int m = 0; m < 2; m++) {
        struct len_profile lp;
        struct real_ctx ctx;
        real_setup(m, 11, 32, &cfg, &in, &lp, &ctx);
        struct plan_eval ev = {&ctx, real_train, real_rollout, real_lb, NULL, NULL, NULL};
        struct plan_eval evc = {&ctx, real_train, real_rollout, real_lb, real_coupled, NULL, NULL};
        struct plan_eval evb = {&ctx, real_train, real_rollout, real_lb, real_coupled,
                                real_coupled_lb, NULL};
        for (int n = 6; n <= 16; n += 5) {
            struct plan_limits lim = {.n_gpus = n, .gpus_per_node = 8, .min_rollout_tp = 1,
                                      .max_rollout_tp = 8, .max_train_tp = 2, .max_train_pp = 1,
                                      .max_micro = 4, .min_train = 1, .min_rollout = 1,
                                      .granularity = 1, .batch = 32, .max_layouts = 100000};
            struct plan_choice a, b;
            int ra = plan_search(&lim, &ev, &a), rb = plan_search_brute(&lim, &ev, &b);
            CU_ASSERT_EQUAL(ra, rb);
            if (ra || rb) continue;
            CU_ASSERT_EQUAL(a.step_s, b.step_s);
            CU_ASSERT_EQUAL(a.n_train, b.n_train);
            CU_ASSERT(memcmp(a.counts, b.counts, sizeof a.counts) == 0);
            CU_ASSERT(a.n_rollout_evals <= b.n_rollout_evals);
            /* coupled: the search takes the coupling on each GPU count's best layout,
             * the brute force on every layout -- the same here, or within 1 % */
            struct plan_choice ac, bc;
            CU_ASSERT_EQUAL_FATAL(plan_search(&lim, &evc, &ac), 0);
            CU_ASSERT_EQUAL_FATAL(plan_search_brute(&lim, &evc, &bc), 0);
            CU_ASSERT(ac.step_s >= bc.step_s && ac.step_s <= 1.01 * bc.step_s);
            CU_ASSERT_DOUBLE_EQUAL(ac.step_s, fmax(fmax(ac.train_s, ac.rollout_s), ac.coupled_s), 0);
            CU_ASSERT(ac.coupled_s > 0 && b.coupled_s == 0);
            /* the coupling only adds to a step: never faster than without it */
            CU_ASSERT(bc.step_s >= b.step_s);
            /* its lower bound prunes without changing the result */
            struct plan_choice ab;
            CU_ASSERT_EQUAL_FATAL(plan_search(&lim, &evb, &ab), 0);
            CU_ASSERT_EQUAL(ab.step_s, ac.step_s);
            CU_ASSERT(memcmp(ab.counts, ac.counts, sizeof ab.counts) == 0);
            CU_ASSERT(ab.n_rollout_evals <= ac.n_rollout_evals);
        }
        lp_free(&lp);
    }
}

/* Two searches found bitwise the same plan, times and training evaluations. */
static int same_plan(const struct plan_choice *a, const struct plan_choice *b)
{
    const double va[] = {a->step_s, a->train_s, a->rollout_s, a->coupled_s};
    const double vb[] = {b->step_s, b->train_s, b->rollout_s, b->coupled_s};
    return memcmp(va, vb, sizeof va) == 0 && memcmp(a->counts, b->counts, sizeof a->counts) == 0 &&
           memcmp(&a->train, &b->train, sizeof a->train) == 0 && a->n_train == b->n_train &&
           a->n_train_evals == b->n_train_evals;
}

/* rollout_s with the placement's early cutoff (plan_eval.rollout_cut_s). */
static double real_rollout_cut(void *arg, const int counts[PC_N_TP], double cutoff, char *why,
                               size_t n)
{
    struct real_ctx *c = arg;
    struct rollout_est e;
    struct pc_rollout_prep *p = pc_rollout_prepare(c->cm, c->lp);
    double t = pc_rollout_prepared_cutoff(p, counts, cutoff, &e);
    pc_rollout_prep_free(p);
    if (!isfinite(t)) snprintf(why, n, "oom %d", e.oom);
    return t;
}

/* The search with the early cutoff finds bitwise the same plan as without it, exact
 * enumeration and grid + local moves (small max_layouts), tolerant and exact, with
 * and without the coupling; with the coupling the evaluator calls are the same too,
 * without it the final pick may evaluate a cut-off layout again in full. */
static void test_search_cutoff_unchanged(void)
{
    struct libra_config cfg;
    struct job_inputs in;
    int compared = 0;
    for (int m = 0; m < 2; m++) {
        struct len_profile lp;
        struct real_ctx ctx;
        real_setup(m, 13 + (uint64_t)m, 48, &cfg, &in, &lp, &ctx);
        const struct plan_eval evs[] = {
            {&ctx, real_train, real_rollout, real_lb, NULL, NULL, NULL},
            {&ctx, real_train, real_rollout, real_lb, real_coupled, real_coupled_lb, NULL}};
        for (int e = 0; e < 2; e++)
            for (int n = 6; n <= 66; n += 20)
                for (int grid = 0; grid < 2; grid++)
                    for (int tol = 0; tol < 2; tol++) {
                        struct plan_limits lim = {
                            .n_gpus = n, .gpus_per_node = 8, .min_rollout_tp = 1,
                            .max_rollout_tp = 8, .max_train_tp = 2, .max_train_pp = 1,
                            .max_micro = 4, .min_train = 1, .min_rollout = 1, .granularity = 1,
                            .batch = 48, .max_layouts = grid ? 6 : 100000,
                            .tolerance = tol ? 0.005 : 0};
                        struct plan_eval cut = evs[e];
                        cut.rollout_cut_s = real_rollout_cut;
                        struct plan_choice a, b;
                        int ra = plan_search(&lim, &evs[e], &a), rb = plan_search(&lim, &cut, &b);
                        CU_ASSERT_EQUAL(ra, rb);
                        if (ra || rb) continue;
                        CU_ASSERT(same_plan(&a, &b));
                        CU_ASSERT_EQUAL(a.approx, b.approx);
                        if (e == 1) {
                            CU_ASSERT_EQUAL(a.n_rollout_evals, b.n_rollout_evals);
                        } else {
                            CU_ASSERT(b.n_rollout_evals >= a.n_rollout_evals);
                        }
                        if (a.step_s != b.step_s)
                            fprintf(stderr, "\n  %d GPUs, grid %d, tol %d, coupled %d: %.17g, %.17g\n",
                                    n, grid, tol, e, a.step_s, b.step_s);
                        compared++;
                    }
        lp_free(&lp);
    }
    CU_ASSERT(compared >= 40);
}

/* The planner's way of calling the cost model: one prepared profile, shared (const)
 * by every call, from any thread. */
static double prep_rollout(void *arg, const int counts[PC_N_TP], char *why, size_t n)
{
    (void)why; (void)n;
    return pc_rollout_prepared(arg, counts, NULL);
}

static double prep_rollout_cut(void *arg, const int counts[PC_N_TP], double cutoff, char *why,
                               size_t n)
{
    (void)why; (void)n;
    return pc_rollout_prepared_cutoff(arg, counts, cutoff, NULL);
}

/* Worker threads (src/planner/plan_ahead.h) making layout sets from one shared
 * prepared profile at once make the sets made here (drained: every wanted set is
 * made by a worker, whatever the scheduling; run under helgrind for the races). */
static void test_ahead_shared_prep(void)
{
    struct libra_config cfg;
    struct job_inputs in;
    struct len_profile lp;
    struct real_ctx ctx;
    real_setup(1, 17, 256, &cfg, &in, &lp, &ctx);
    struct pc_rollout_prep *prep = pc_rollout_prepare(&in.cm, &lp);
    struct plan_eval ev = {prep, NULL, prep_rollout, NULL, NULL, NULL, prep_rollout_cut};
    struct plan_ahead *a = plan_ahead_start(3, 256, 0, PC_N_TP - 1, 6, &ev);
    CU_ASSERT_FATAL(a != NULL);
    const int want[] = {64, 128, 192, 256};
    plan_ahead_want(a, want, 3, NULL);
    plan_ahead_drain(a);
    plan_ahead_want(a, want + 3, 1, NULL);
    plan_ahead_drain(a);
    for (int i = 0; i < 4; i++) {
        int64_t n = 0, n_ref = 0;
        struct layout_set *got = plan_ahead_take(a, want[i], &n), ref;
        CU_ASSERT_FATAL(got != NULL);
        plan_layouts_eval(&ref, want[i], 0, PC_N_TP - 1, 6, &ev, NULL, &n_ref);
        CU_ASSERT_EQUAL(got->best_s, ref.best_s);
        const struct layout_val *pg = plan_layouts_pick(got, got->best_s);
        const struct layout_val *pr = plan_layouts_pick(&ref, ref.best_s);
        CU_ASSERT_FATAL(pg != NULL && pr != NULL);
        CU_ASSERT(memcmp(pg->counts, pr->counts, sizeof pg->counts) == 0);
        CU_ASSERT_EQUAL(pg->s, pr->s);
        plan_layouts_free(&ref);
        plan_layouts_free(got);
        free(got);
    }
    int64_t n = 0;
    plan_ahead_stop(a, &n);
    CU_ASSERT_EQUAL(n, 0);
    pc_rollout_prep_free(prep);
    lp_free(&lp);
}

/* plan.solve_threads: the real cost model is safe to call from several threads, and
 * the planner's plan is the same for any number of them (test_plan_search checks the
 * search's path on synthetic evaluators). A drawn R2E-like batch of 512 (above the
 * size at which the search starts threads) on 48, 160 and 512 GPUs. */
static void test_search_threads(void)
{
    struct libra_config cfg;
    struct job_inputs in;
    load_inputs("thr", grp_cfg, &cfg, &in);
    cfg.train.batch_size = 512;
    struct planner pl;
    planner_init(&pl, &cfg, &in.cm, &in.wl, 513);
    struct len_profile lp;
    lp_init(&lp);
    lp_from_workload(&lp, &in.wl, &cfg.rollout, 11, 0, 0, cfg.train.batch_size);
    lp.overlap = 2;
    const int gpus[] = {48, 160, 512};
    for (int g = 0; g < 3; g++) {
        struct plan_choice one, many;
        cfg.plan.solve_threads = 1;
        CU_ASSERT_EQUAL_FATAL(planner_search(&pl, &lp, gpus[g], 0, &one), 0);
        cfg.plan.solve_threads = 3;
        CU_ASSERT_EQUAL_FATAL(planner_search(&pl, &lp, gpus[g], 0, &many), 0);
        CU_ASSERT(same_plan(&one, &many));
        CU_ASSERT_EQUAL(one.pruned_bound, many.pruned_bound);
    }
    lp_free(&lp);
    planner_free(&pl);
}

static const struct test_case profile_cases[] = {
    {"history ring resamples quantiles", test_history_resample},
    {"start-up profile from the workload", test_workload_profile},
    {NULL, NULL}};
static const struct test_case plan_cases[] = {
    {"lent instances, kept core, shape on the wire", test_plan_lend},
    {NULL, NULL}};
static const struct test_case planner_cases[] = {
    {"preflight plan and the infeasible message", test_preflight},
    {"search with the real cost model = brute force", test_search_real_vs_brute},
    {"the early cutoff leaves the search's plan unchanged", test_search_cutoff_unchanged},
    {"the same plan with solve threads", test_search_threads},
    {"worker threads share the prepared profile", test_ahead_shared_prep},
    {"a long tail gets a heterogeneous plan", test_heterogeneous_plan},
    {"rollout calibration over the pipeline's cycle", test_cycle_calibration},
    {NULL, NULL}};
static const struct test_suite suites[] = {{"len_profile", profile_cases},
                                           {"plan_lend", plan_cases},
                                           {"planner", planner_cases},
                                           {NULL, NULL}};

int main(void) { return test_main(suites); }
