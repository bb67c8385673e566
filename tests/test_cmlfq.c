/*
 * C-MLFQ routing (src/sched/cmlfq.c) through the public scheduler interface: the
 * reference's scheduler behaviours with its numbers (reference cmlfq.md §4
 * "Scheduler" and "Integration": buckets short [1]/5000 and long [2]/50000, instance 0
 * TP1 and instance 1 TP2, min_samples 1 and no shrinkage to match it), then one test
 * per fix we owe (§6) that the reference behaviour would fail.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/config.h"
#include "libra/cost.h"
#include "libra/profile.h"
#include "libra/sched.h"
#include "libra/workload.h"
#include "testutil.h"

static struct cost_model g_cm;
static struct rates g_rates; /* the cost model as the router sees it */
static const char *const g_tools[] = {"search", "code"};

static void load_cost_model(void)
{
    char err[512];
    if (profile_load_hw(test_path("inputs/hardware/a800.cfg"), &g_cm.hw, err, sizeof err) ||
        profile_load_model(test_path("inputs/models/qwen3-14b.cfg"), &g_cm.model, err, sizeof err)) {
        fprintf(stderr, "test_cmlfq: %s\n", err);
        exit(2);
    }
    g_cm.p = (struct cost_params){0.85, 0.55, 0.4, 0.9, 0.04, 1e9, 16};
    cost_rates(&g_cm, &g_rates);
}

static void add_bucket(struct sched_config *c, const char *name, int tp0, int tp1, int max_tokens)
{
    struct sched_bucket_spec *b = &c->buckets[c->n_buckets++];
    snprintf(b->name, sizeof b->name, "%s", name);
    b->tp[b->n_tp++] = tp0;
    if (tp1) b->tp[b->n_tp++] = tp1;
    b->max_tokens = max_tokens;
}

/* The reference setup (§4 Scheduler). */
static struct sched_config ref_config(void)
{
    struct sched_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.type, sizeof c.type, "cmlfq");
    snprintf(c.balance, sizeof c.balance, "kv");
    for (int i = 0; i < 4; i++) c.weights[i] = 1;
    c.max_load = 0;
    c.fallback = 1;
    add_bucket(&c, "short", 1, 0, 5000);
    add_bucket(&c, "long", 2, 0, 50000);
    c.payload_small = 500;
    c.payload_large = 5000;
    c.window = 200;
    c.min_samples = 1;
    c.shrink = 0;
    c.hysteresis = 0.25;
    c.max_migrations = 2;
    c.rebuild_interval = 50;
    c.max_recent = 5000;
    snprintf(c.default_bucket, sizeof c.default_bucket, "short"); /* the reference's placement */
    return c;
}

static struct sched_instance g_inst[3];
static int g_n;

static void instances(int n, const int *tp)
{
    g_n = n;
    for (int i = 0; i < n; i++)
        g_inst[i] = (struct sched_instance){.leader = i + 1, .tp = tp[i],
                                            .capacity = cost_kv_capacity_tokens(&g_cm, tp[i]),
                                            .queued = -1, .running = -1, .kv_frac = -1};
}

static void init(struct sched *s, const struct sched_config *c)
{
    char err[512];
    int rc = sched_init(s, c, &g_rates, g_tools, 2, err, sizeof err);
    if (rc) fprintf(stderr, "sched_init: %s\n", err);
    CU_ASSERT_FATAL(rc == 0);
}

static struct sched_decision route(struct sched *s, int64_t id, int64_t prompt, int turn, int ctx,
                                   int gen, int prev)
{
    struct sched_turn t = {.traj_id = id, .prompt_id = prompt, .turn = turn, .ctx_tokens = ctx,
                           .gen_tokens = gen, .budget = 4096, .prev = prev, .n_samples = 1};
    struct sched_decision d;
    sched_route(s, &t, g_inst, g_n, 0, &d);
    return d;
}

/* Plants the history: trajectory id of prompt with one tool return (tool 0, payload
 * tokens, success) at position pos, total decode tokens. */
static void plant(struct sched *s, int64_t id, int64_t prompt, int payload, int pos, int total)
{
    route(s, id, prompt, 0, 100, 0, -1);
    sched_tool_return(s, id, 0, TOOL_SUCCESS, payload, pos);
    sched_finish(s, id, total, 1);
}

static const int tp_ref[] = {1, 2};

static void test_initial_placement(void)
{
    struct sched s;
    struct sched_config c = ref_config();
    instances(2, tp_ref);
    init(&s, &c);
    struct sched_decision d = route(&s, 1, 7, 0, 300, 0, -1);
    CU_ASSERT_EQUAL(d.bucket, 0); /* short */
    CU_ASSERT_EQUAL(g_inst[d.instance].tp, 1);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_INITIAL);
    CU_ASSERT_EQUAL(d.via, SCHED_VIA_PREFERRED);
    sched_free(&s);
}

/* §4: a node with 30000 remaining behind a large successful return moves the
 * trajectory to long (TP2), also for an unseen prompt (global tree); the same
 * trajectory id keeps being routed (sticky afterwards). */
static void test_migrates_on_causal_signal(void)
{
    struct sched s;
    struct sched_config c = ref_config();
    instances(2, tp_ref);
    init(&s, &c);
    plant(&s, 100, 7, 6000, 1000, 31000);
    for (int64_t prompt = 7; prompt <= 8; prompt++) { /* 8: unseen, via the global tree */
        int64_t id = prompt * 10;
        struct sched_decision d = route(&s, id, prompt, 0, 300, 0, -1);
        CU_ASSERT_EQUAL(d.instance, 0);
        sched_tool_return(&s, id, 0, TOOL_SUCCESS, 6000, 1000);
        d = route(&s, id, prompt, 1, 7300, 1000, 0);
        CU_ASSERT_EQUAL(d.reason, SCHED_R_MIGRATE);
        CU_ASSERT_EQUAL(d.bucket, 1);
        CU_ASSERT_EQUAL(d.instance, 1);
        CU_ASSERT_EQUAL(d.est_remaining, 30000);
        d = route(&s, id, prompt, 2, 9000, 1200, 1); /* no new tool return: sticky */
        CU_ASSERT_EQUAL(d.reason, SCHED_R_STICKY);
        CU_ASSERT_EQUAL(d.instance, 1);
    }
    const struct sched_migration *m;
    int n = sched_take_migrations(&s, &m);
    CU_ASSERT_EQUAL(n, 2);
    if (n == 2) {
        CU_ASSERT_EQUAL(m[0].why, SCHED_MIG_CAUSAL);
        CU_ASSERT_EQUAL(m[0].from_bucket, 0);
        CU_ASSERT_EQUAL(m[0].to_bucket, 1);
        CU_ASSERT(m[0].saving_s > m[0].cost_s);
    }
    sched_free(&s);
}

/* §4: 3000 remaining after a small return: already in its bucket, no move. */
static void test_no_move_when_short(void)
{
    struct sched s;
    struct sched_config c = ref_config();
    instances(2, tp_ref);
    init(&s, &c);
    plant(&s, 100, 7, 100, 1000, 4000);
    route(&s, 1, 7, 0, 300, 0, -1);
    sched_tool_return(&s, 1, 0, TOOL_SUCCESS, 100, 1000);
    struct sched_decision d = route(&s, 1, 7, 1, 1400, 1000, 0);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_STICKY);
    CU_ASSERT_EQUAL(d.instance, 0);
    CU_ASSERT_EQUAL(d.est_remaining, 3000);
    const struct sched_migration *m;
    CU_ASSERT_EQUAL(sched_take_migrations(&s, &m), 0);
    sched_free(&s);
}

/* §4: mean 3000 / p90 30000 disagree: stay put. */
static void test_mean_p90_disagree(void)
{
    struct sched s;
    struct sched_config c = ref_config();
    instances(2, tp_ref);
    init(&s, &c);
    /* Nine trajectories with 0 remaining and one with 30000: mean 3000, p90 3000 ...
     * so use 8 x 0 and 2 x 15000 (mean 3000, p90 15000 -> long): disagree. */
    for (int k = 0; k < 10; k++) plant(&s, 100 + k, 7, 100, 1000, k < 8 ? 1000 : 16000);
    const int32_t st[1] = {0 * 9 + 0 * 3 + 0}; /* search:small:success */
    const struct ptree_node *node = ptree_lookup(sched_tree(&s), 7, st, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(node);
    CU_ASSERT_DOUBLE_EQUAL(node->mean, 3000, 1e-9);
    CU_ASSERT(node->p90 > 5000);
    route(&s, 1, 7, 0, 300, 0, -1);
    sched_tool_return(&s, 1, 0, TOOL_SUCCESS, 100, 1000);
    struct sched_decision d = route(&s, 1, 7, 1, 1400, 1000, 0);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_STICKY);
    CU_ASSERT_EQUAL(d.bucket, 0);
    sched_free(&s);
}

/* §4 Integration: tool returns at 120 and 700, finished at 1000, store remaining
 * samples [880] and [300]; the trajectory is then forgotten. */
static void test_finish_records_remaining(void)
{
    struct sched s;
    struct sched_config c = ref_config();
    instances(2, tp_ref);
    init(&s, &c);
    route(&s, 1, 7, 0, 300, 0, -1);
    sched_tool_return(&s, 1, 0, TOOL_SUCCESS, 100, 120);
    route(&s, 1, 7, 1, 600, 120, 0);
    sched_tool_return(&s, 1, 1, TOOL_FAILURE, 100, 700);
    route(&s, 1, 7, 2, 1300, 700, 0);
    CU_ASSERT_EQUAL(s.n_traj, 1);
    sched_finish(&s, 1, 1000, 1);
    CU_ASSERT_EQUAL(s.n_traj, 0);
    const int32_t st[2] = {0, 1 * 9 + 0 * 3 + 1}; /* search:small:success, code:small:failure */
    const struct ptree_node *a = ptree_lookup(sched_tree(&s), 7, st, 1);
    const struct ptree_node *b = ptree_lookup(sched_tree(&s), 7, st, 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(a->n, 1);
    CU_ASSERT_DOUBLE_EQUAL(a->mean, 880, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(b->mean, 300, 1e-9);
    struct sched_stats st_;
    sched_take_step(&s, &st_);
    CU_ASSERT_EQUAL(st_.tool_returns, 2);
    CU_ASSERT_EQUAL(st_.finished, 1);
    CU_ASSERT_EQUAL(st_.learned, 1);
    sched_free(&s);
}

/* §6.17: evaluation episodes are routed but never learned from. */
static void test_eval_not_learned(void)
{
    struct sched s;
    struct sched_config c = ref_config();
    instances(2, tp_ref);
    init(&s, &c);
    struct sched_turn t = {.traj_id = 5, .prompt_id = 7, .ctx_tokens = 100, .budget = 10,
                           .prev = -1, .n_samples = 1, .eval = 1};
    struct sched_decision d;
    sched_route(&s, &t, g_inst, g_n, 0, &d);
    CU_ASSERT(d.instance >= 0);
    sched_tool_return(&s, 5, 0, TOOL_SUCCESS, 10, 50);
    sched_finish(&s, 5, 100, 1);
    struct ptree_shape sh;
    ptree_shape(sched_tree(&s), &sh);
    CU_ASSERT_EQUAL(sh.insertions, 0);
    sched_free(&s);
}

/* Fix §6.6: a move must pay for itself. Remaining 200 tokens do not repay re-prefilling
 * a 30000-token context; the reference would have moved. */
static void test_migration_must_pay(void)
{
    struct sched s;
    struct sched_config c = ref_config();
    c.buckets[0].max_tokens = 100;
    instances(2, tp_ref);
    init(&s, &c);
    plant(&s, 100, 7, 6000, 1000, 1200); /* 200 remaining -> bucket long */
    route(&s, 1, 7, 0, 300, 0, -1);
    sched_tool_return(&s, 1, 0, TOOL_SUCCESS, 6000, 1000);
    struct sched_decision d = route(&s, 1, 7, 1, 30000, 1000, 0);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_STICKY);
    CU_ASSERT_EQUAL(d.instance, 0);
    const struct sched_migration *m;
    int n = sched_take_migrations(&s, &m);
    CU_ASSERT_EQUAL_FATAL(n, 1);
    CU_ASSERT_EQUAL(m[0].why, SCHED_MIG_DECLINED_COST);
    CU_ASSERT(m[0].saving_s > 0);
    CU_ASSERT(m[0].saving_s <= 1.25 * m[0].cost_s);
    CU_ASSERT_CLOSE(m[0].cost_s, cost_prefill_s(&g_cm, 2, 30000, 0), 1e-12);
    struct sched_stats st;
    sched_take_step(&s, &st);
    CU_ASSERT_EQUAL(st.declined, 1);
    CU_ASSERT_EQUAL(st.migrations, 0);
    sched_free(&s);
}

/* Fix §6.6: buckets sharing a TP degree relabel, never hop (reference r2e config:
 * short and medium both TP2). */
static void test_same_tp_buckets_do_not_bounce(void)
{
    struct sched s;
    struct sched_config c = ref_config();
    c.n_buckets = 0;
    add_bucket(&c, "short", 2, 0, 3000);
    add_bucket(&c, "medium", 2, 0, 6000);
    add_bucket(&c, "long", 4, 0, 32768);
    const int tp[] = {2, 2, 4};
    instances(3, tp);
    init(&s, &c);
    plant(&s, 100, 7, 100, 1000, 6000); /* 5000 remaining: medium */
    struct sched_decision d = route(&s, 1, 7, 0, 300, 0, -1);
    int first = d.instance;
    CU_ASSERT_EQUAL(g_inst[first].tp, 2);
    g_inst[first].n_turns = 5; /* the other TP2 instance is now less loaded */
    g_inst[first].load = 50000;
    sched_tool_return(&s, 1, 0, TOOL_SUCCESS, 100, 1000);
    d = route(&s, 1, 7, 1, 1400, 1000, first);
    CU_ASSERT_EQUAL(d.instance, first);
    CU_ASSERT_EQUAL(d.bucket, 1);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_STICKY);
    const struct sched_migration *m;
    CU_ASSERT_EQUAL_FATAL(sched_take_migrations(&s, &m), 1);
    CU_ASSERT_EQUAL(m[0].why, SCHED_MIG_SAME_TP);
    sched_free(&s);
}

/* Fix §6.6: at most max_migrations moves per trajectory (no ping-pong). */
static void test_migration_limit(void)
{
    struct sched s;
    struct sched_config c = ref_config();
    c.max_migrations = 0;
    instances(2, tp_ref);
    init(&s, &c);
    plant(&s, 100, 7, 6000, 1000, 31000);
    route(&s, 1, 7, 0, 300, 0, -1);
    sched_tool_return(&s, 1, 0, TOOL_SUCCESS, 6000, 1000);
    struct sched_decision d = route(&s, 1, 7, 1, 7300, 1000, 0);
    CU_ASSERT_EQUAL(d.instance, 0);
    const struct sched_migration *m;
    CU_ASSERT_EQUAL_FATAL(sched_take_migrations(&s, &m), 1);
    CU_ASSERT_EQUAL(m[0].why, SCHED_MIG_DECLINED_LIMIT);
    sched_free(&s);
}

/* Fix §6.3: one sample does not move a trajectory when min_samples asks for more. */
static void test_min_samples(void)
{
    struct sched s;
    struct sched_config c = ref_config();
    c.min_samples = 3;
    instances(2, tp_ref);
    init(&s, &c);
    plant(&s, 100, 7, 6000, 1000, 31000);
    route(&s, 1, 7, 0, 300, 0, -1);
    sched_tool_return(&s, 1, 0, TOOL_SUCCESS, 6000, 1000);
    struct sched_decision d = route(&s, 1, 7, 1, 7300, 1000, 0);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_STICKY);
    CU_ASSERT_EQUAL(d.est_remaining, -1);
    plant(&s, 101, 7, 6000, 1000, 31000);
    plant(&s, 102, 7, 6000, 1000, 31000);
    route(&s, 2, 7, 0, 300, 0, -1);
    sched_tool_return(&s, 2, 0, TOOL_SUCCESS, 6000, 1000);
    d = route(&s, 2, 7, 1, 7300, 1000, 0);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_MIGRATE);
    sched_free(&s);
}

/* Fix §6.2: informed initial placement from the prompt's history and the input length;
 * the default bucket exists. */
static void test_informed_placement(void)
{
    struct sched s;
    struct sched_config c = ref_config();
    c.default_bucket[0] = '\0';
    instances(2, tp_ref);
    init(&s, &c);
    plant(&s, 100, 7, 100, 1000, 20000);
    struct sched_decision d = route(&s, 1, 7, 0, 300, 0, -1);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_INFORMED);
    CU_ASSERT_EQUAL(d.bucket, 1);
    CU_ASSERT_EQUAL(d.instance, 1);
    CU_ASSERT_EQUAL(d.est_remaining, 20000);
    d = route(&s, 2, 99, 0, 8000, 0, -1); /* no history; input past short's threshold */
    CU_ASSERT_EQUAL(d.bucket, 1);
    /* The global root knows the total too: a new prompt is informed by every prompt. */
    CU_ASSERT_EQUAL(d.reason, SCHED_R_INFORMED);
    sched_free(&s);

    snprintf(c.default_bucket, sizeof c.default_bucket, "short");
    init(&s, &c);
    plant(&s, 100, 7, 100, 1000, 20000);
    d = route(&s, 1, 7, 0, 300, 0, -1);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_INITIAL);
    CU_ASSERT_EQUAL(d.bucket, 0);
    sched_free(&s);

    snprintf(c.default_bucket, sizeof c.default_bucket, "nonesuch");
    char err[256];
    CU_ASSERT_EQUAL(sched_init(&s, &c, &g_rates, g_tools, 2, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "nonesuch"));
}

/* Fix §6.1: without a trusted node the token count promotes a trajectory that has
 * outgrown its bucket (the reference never moves it). */
static void test_token_count_promotion(void)
{
    struct sched s;
    struct sched_config c = ref_config();
    instances(2, tp_ref);
    init(&s, &c);
    route(&s, 1, 7, 0, 300, 0, -1);
    sched_tool_return(&s, 1, 0, TOOL_SUCCESS, 100, 9000); /* no history at all */
    struct sched_decision d = route(&s, 1, 7, 1, 9400, 9000, 0);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_MIGRATE);
    CU_ASSERT_EQUAL(d.bucket, 1);
    const struct sched_migration *m;
    CU_ASSERT_EQUAL_FATAL(sched_take_migrations(&s, &m), 1);
    CU_ASSERT_EQUAL(m[0].why, SCHED_MIG_TOKENS);
    sched_free(&s);
}

/* A trajectory whose bucket was full when it was placed goes back to its bucket at a
 * tool return once there is room, and only then (before, it stayed on the fallback
 * instance to its end). Bucket long (TP2) is full at placement: the fallback chain
 * puts the trajectory on TP1. */
static void test_return_from_fallback(void)
{
    struct sched s;
    struct sched_config c = ref_config();
    c.max_load = 0.5;
    snprintf(c.default_bucket, sizeof c.default_bucket, "long");
    instances(2, tp_ref);
    g_inst[1].load = 0.9 * g_inst[1].capacity;
    init(&s, &c);
    struct sched_decision d = route(&s, 1, 7, 0, 1000, 0, -1);
    CU_ASSERT_EQUAL(d.bucket, 1);
    CU_ASSERT_EQUAL(d.instance, 0);
    CU_ASSERT_EQUAL(d.via, SCHED_VIA_FALLBACK);
    /* still full at the first tool return: it stays, nothing logged */
    sched_tool_return(&s, 1, 0, TOOL_SUCCESS, 100, 200);
    d = route(&s, 1, 7, 1, 1300, 200, 0);
    CU_ASSERT_EQUAL(d.instance, 0);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_STICKY);
    const struct sched_migration *m;
    CU_ASSERT_EQUAL(sched_take_migrations(&s, &m), 0);
    /* room at the next one: back to TP2, remaining work at least the bucket's floor */
    g_inst[1].load = 0;
    sched_tool_return(&s, 1, 0, TOOL_SUCCESS, 100, 400);
    d = route(&s, 1, 7, 2, 1600, 400, 0);
    CU_ASSERT_EQUAL(d.instance, 1);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_MIGRATE);
    CU_ASSERT_EQUAL(d.bucket, 1);
    CU_ASSERT_EQUAL_FATAL(sched_take_migrations(&s, &m), 1);
    CU_ASSERT_EQUAL(m[0].why, SCHED_MIG_RETURN);
    CU_ASSERT_EQUAL(m[0].from_instance, 0);
    CU_ASSERT_EQUAL(m[0].to_instance, 1);
    CU_ASSERT_DOUBLE_EQUAL(m[0].est_remaining, 5000, 1e-9);
    CU_ASSERT(m[0].saving_s > m[0].cost_s);
    CU_ASSERT_EQUAL(s.stats.migrations, 1);
    /* home now: the next tool return keeps it there */
    sched_tool_return(&s, 1, 0, TOOL_SUCCESS, 100, 600);
    d = route(&s, 1, 7, 3, 1900, 600, 1);
    CU_ASSERT_EQUAL(d.instance, 1);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_STICKY);
    sched_free(&s);
}

/* Fix §6.14: every decision counts once; preferred + fallback + global = decisions,
 * so a success rate can never pass 100 %. */
static void test_stats_consistent(void)
{
    struct sched s;
    struct sched_config c = ref_config();
    instances(2, tp_ref);
    init(&s, &c);
    plant(&s, 100, 7, 6000, 1000, 31000);
    route(&s, 1, 7, 0, 300, 0, -1);
    sched_tool_return(&s, 1, 0, TOOL_SUCCESS, 6000, 1000);
    route(&s, 1, 7, 1, 7300, 1000, 0); /* a migration */
    struct sched_stats st;
    sched_take_step(&s, &st);
    int64_t routes = 0, via = 0;
    for (int r = 0; r < SCHED_R_COUNT; r++) routes += st.routes[r];
    for (int v = 0; v < SCHED_VIA_COUNT; v++) via += st.via[v];
    CU_ASSERT_EQUAL(routes, 3);
    CU_ASSERT_EQUAL(via, 3);
    CU_ASSERT_EQUAL(st.migrations, 1);
    sched_take_step(&s, &st);
    CU_ASSERT_EQUAL(st.routes[SCHED_R_INITIAL], 0); /* reset after taking */
    sched_free(&s);
}

/* Rebuild from recent trajectories only once the ring holds max_recent of them (a
 * loaded tree survives until then; reference §6.12). */
static void test_rebuild(void)
{
    struct sched s;
    struct sched_config c = ref_config();
    c.rebuild_interval = 1;
    c.max_recent = 3;
    instances(2, tp_ref);
    init(&s, &c);
    for (int k = 0; k < 2; k++) plant(&s, 100 + k, k, 100, 10, 100);
    sched_step_end(&s, 1);
    struct ptree_shape sh;
    ptree_shape(sched_tree(&s), &sh);
    CU_ASSERT_EQUAL(sh.insertions, 2); /* not rebuilt: the ring is not full */
    for (int k = 2; k < 5; k++) plant(&s, 100 + k, k, 100, 10, 100);
    sched_step_end(&s, 2);
    ptree_shape(sched_tree(&s), &sh);
    CU_ASSERT_EQUAL(sh.insertions, 3);
    CU_ASSERT_EQUAL(sh.prompts, 3); /* prompts 2, 3, 4: the newest three */
    sched_free(&s);
}

/* A handed-back trajectory (previous instance gone) returns to its bucket. */
static void test_reroute(void)
{
    struct sched s;
    struct sched_config c = ref_config();
    instances(2, tp_ref);
    init(&s, &c);
    route(&s, 1, 7, 0, 300, 0, -1);
    struct sched_decision d = route(&s, 1, 7, 0, 300, 0, -1);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_REROUTE);
    CU_ASSERT_EQUAL(d.bucket, 0);
    CU_ASSERT_EQUAL(d.instance, 0);
    sched_free(&s);
}

static void test_unknown_type(void)
{
    struct sched s;
    struct sched_config c = ref_config();
    snprintf(c.type, sizeof c.type, "fifo");
    char err[256];
    CU_ASSERT_EQUAL(sched_init(&s, &c, &g_rates, g_tools, 2, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "load_balance"));
}

static const struct test_case cases[] = {
    {"reference: initial placement in the shortest bucket", test_initial_placement},
    {"reference: causal signal moves to long (prompt and global tree)", test_migrates_on_causal_signal},
    {"reference: 3000 remaining stays", test_no_move_when_short},
    {"reference: mean and p90 disagree -> stay", test_mean_p90_disagree},
    {"reference: finish records remaining [880] and [300]", test_finish_records_remaining},
    {"fix: evaluation is not learned", test_eval_not_learned},
    {"fix: a migration must beat the re-prefill cost", test_migration_must_pay},
    {"fix: same-TP buckets relabel, never hop", test_same_tp_buckets_do_not_bounce},
    {"fix: per-trajectory migration limit", test_migration_limit},
    {"fix: minimum support before a move", test_min_samples},
    {"fix: informed initial placement and default bucket", test_informed_placement},
    {"fix: token-count promotion without a trusted node", test_token_count_promotion},
    {"fix: counters are consistent", test_stats_consistent},
    {"displaced by a full bucket, back when it has room", test_return_from_fallback},
    {"rebuild waits for a full ring of recent trajectories", test_rebuild},
    {"handed-back trajectory returns to its bucket", test_reroute},
    {"unknown policy lists the available ones", test_unknown_type},
    {NULL, NULL},
};

int main(void)
{
    load_cost_model();
    const struct test_suite suites[] = {{"cmlfq", cases}, {NULL, NULL}};
    return test_main(suites);
}
