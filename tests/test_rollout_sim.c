/*
 * Tests of the rollout-cluster simulator (rollout_sim.h) on a small heterogeneous
 * cluster (TP 1, 1, 2, 4) with the r2e-gym workload and the A800 / Qwen3-14B
 * profiles: the same config gives identical results twice, for every policy, and a
 * different seed does not; every trajectory launched finishes, with the controller's
 * limits respected and every instance's load given back; decode tokens the engines
 * report equal the trajectories' gen_tokens (token conservation); stopping at a
 * finite time leaves work in flight that then completes; la_mlfq's held turns are
 * asked again until they run; bad configs are refused.
 * No timing assertions: everything is virtual time.
 */
#include "libra/rollout_sim.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "libra/profile.h"

static struct cost_model g_cm;
static struct workload g_wl;
static struct libra_config g_cfg;

static void load_inputs(void)
{
    static int loaded;
    if (loaded) return;
    char err[512];
    memset(&g_cm, 0, sizeof g_cm);
    config_defaults(&g_cfg);
    CU_ASSERT_FATAL(profile_load_hw(test_path("inputs/hardware/a800.cfg"), &g_cm.hw, err,
                                    sizeof err) == 0);
    CU_ASSERT_FATAL(profile_load_model(test_path("inputs/models/qwen3-14b.cfg"), &g_cm.model, err,
                                       sizeof err) == 0);
    CU_ASSERT_FATAL(workload_load(test_path("inputs/workloads/r2e-gym.cfg"), &g_wl, err,
                                  sizeof err) == 0);
    const struct device_config *d = &g_cfg.device;
    g_cm.p = (struct cost_params){d->decode_bw_util, d->prefill_mfu, d->train_mfu,
                                  d->gpu_memory_utilization, d->kv_frag_rate,
                                  d->act_workspace_gb * 1e9, 16.0};
    g_cfg.rollout.n_samples = 4;
    loaded = 1;
}

/* A 4-instance cluster under policy type; sc receives the sched config it points to. */
static struct rsim_config small_config(const char *type, uint64_t seed, struct sched_config *sc)
{
    load_inputs();
    *sc = g_cfg.sched;
    snprintf(sc->type, sizeof sc->type, "%s", type);
    struct rsim_config c = {.cm = &g_cm, .wl = &g_wl, .sched = sc, .rollout = &g_cfg.rollout,
                            .n_inst = 4, .tp = {1, 1, 2, 4}, .seed = seed};
    return c;
}

static const struct rsim_sync_config g_sync = {.groups_per_step = 6, .steps = 3, .warmup_steps = 1};

static void same_rows(const struct rsim_step_result *a, const struct rsim_step_result *b, int n)
{
    for (int k = 0; k < n; k++) {
        CU_ASSERT_EQUAL(a[k].makespan_s, b[k].makespan_s);
        CU_ASSERT_EQUAL(a[k].trajectories, b[k].trajectories);
        CU_ASSERT_EQUAL(a[k].decode_tokens, b[k].decode_tokens);
        CU_ASSERT_EQUAL(a[k].tool_tokens, b[k].tool_tokens);
        CU_ASSERT_EQUAL(a[k].turns, b[k].turns);
        CU_ASSERT_EQUAL(a[k].p50_latency_s, b[k].p50_latency_s);
        CU_ASSERT_EQUAL(a[k].p99_latency_s, b[k].p99_latency_s);
        CU_ASSERT_EQUAL(a[k].migrations, b[k].migrations);
        CU_ASSERT_EQUAL(a[k].prefill_tokens, b[k].prefill_tokens);
        CU_ASSERT_EQUAL(a[k].preemptions, b[k].preemptions);
        CU_ASSERT_EQUAL(a[k].busy_frac, b[k].busy_frac);
        CU_ASSERT(memcmp(&a[k].sched, &b[k].sched, sizeof a[k].sched) == 0);
    }
}

static void test_deterministic(void)
{
    static const char *types[] = {"cmlfq", "load_balance", "length_aware", "la_mlfq"};
    for (size_t p = 0; p < sizeof types / sizeof types[0]; p++) {
        struct sched_config sc;
        struct rsim_config c = small_config(types[p], 7, &sc);
        struct rsim_step_result a[3], b[3];
        struct rsim_totals ta, tb;
        char err[512];
        CU_ASSERT_EQUAL_FATAL(rsim_run_sync(&c, &g_sync, a, &ta, err, sizeof err), 0);
        CU_ASSERT_EQUAL_FATAL(rsim_run_sync(&c, &g_sync, b, &tb, err, sizeof err), 0);
        same_rows(a, b, 3);
        for (int k = 0; k < 3; k++) /* synchronous: a step's engines decode only its tokens */
            CU_ASSERT_EQUAL(a[k].decode_by_tp[0] + a[k].decode_by_tp[1] + a[k].decode_by_tp[2] +
                                a[k].decode_by_tp[3], a[k].decode_tokens);
        CU_ASSERT_EQUAL(ta.tokens_per_s, tb.tokens_per_s);
        CU_ASSERT_EQUAL(ta.p99_latency_s, tb.p99_latency_s);
        CU_ASSERT_EQUAL(ta.sim.iterations, tb.sim.iterations);
        CU_ASSERT_EQUAL(ta.steps, 2);
        CU_ASSERT_EQUAL(ta.trajectories, 2 * 6 * 4);
        CU_ASSERT(ta.decode_tokens > 0 && ta.mean_makespan_s > 0);
        CU_ASSERT(ta.busy_frac > 0 && ta.busy_frac <= 1.0 + 1e-9);
        CU_ASSERT(ta.p50_latency_s <= ta.p99_latency_s);
        CU_ASSERT(ta.p99_latency_s <= a[1].makespan_s + a[2].makespan_s);
        if (strcmp(types[p], "cmlfq") == 0) CU_ASSERT(ta.tree_nodes > 1);
        /* another seed draws other trajectories */
        c.seed = 8;
        struct rsim_totals tc;
        CU_ASSERT_EQUAL_FATAL(rsim_run_sync(&c, &g_sync, NULL, &tc, err, sizeof err), 0);
        CU_ASSERT(tc.decode_tokens != ta.decode_tokens);
    }
}

/* Launches groups, runs to the end, and checks every trajectory and instance. */
static void run_and_check(const char *type, int groups, int max_turns, int max_tokens)
{
    struct sched_config sc;
    struct rsim_config c = small_config(type, 3, &sc);
    struct rollout_config ro = g_cfg.rollout;
    ro.max_turns = max_turns;
    ro.max_tokens = max_tokens;
    if (ro.max_tokens_per_turn > max_tokens) ro.max_tokens_per_turn = max_tokens;
    c.rollout = &ro;
    struct rsim r;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(rsim_init(&r, &c, err, sizeof err), 0);
    for (int g = 0; g < groups; g++) rsim_launch_group(&r, 0);
    CU_ASSERT_EQUAL(r.in_flight, (int64_t)groups * ro.n_samples);
    CU_ASSERT_EQUAL(rsim_run_until(&r, INFINITY, err, sizeof err), 0);
    CU_ASSERT_EQUAL(r.in_flight, 0);
    CU_ASSERT_EQUAL(r.q_len, 0u);
    const int64_t *ids;
    int64_t n_done = rsim_take_finished(&r, &ids);
    CU_ASSERT_EQUAL(n_done, (int64_t)r.n_traj);
    CU_ASSERT_EQUAL(r.stats.finished, r.stats.launched);
    int64_t gen = 0;
    unsigned char *seen = xcalloc(r.n_traj, 1);
    for (int64_t k = 0; k < n_done; k++) {
        CU_ASSERT_FATAL(ids[k] >= 0 && (size_t)ids[k] < r.n_traj);
        CU_ASSERT(!seen[ids[k]]);
        seen[ids[k]] = 1;
    }
    free(seen);
    for (size_t j = 0; j < r.n_traj; j++) {
        const struct rsim_traj *t = &r.traj[j];
        CU_ASSERT_EQUAL(t->state, RSIM_DONE);
        CU_ASSERT(t->t_finish >= t->t_launch && t->t_finish <= r.now);
        CU_ASSERT(t->turn < max_turns);
        /* decode stays within the budget; the last tool payload may overshoot (the
         * controller appends it, then finishes the trajectory) */
        CU_ASSERT(t->prompt_tokens + t->gen_tokens <= max_tokens);
        CU_ASSERT(t->gen_tokens >= 1);
        CU_ASSERT_EQUAL(t->ctx_tokens, t->prompt_tokens + t->gen_tokens + t->tool_tokens);
        CU_ASSERT(t->inst >= 0 && t->inst < c.n_inst);
        gen += t->gen_tokens;
    }
    /* token conservation: every decoded token belongs to exactly one trajectory */
    CU_ASSERT_EQUAL(rsim_decode_tokens(&r), gen);
    for (int i = 0; i < c.n_inst; i++) {
        CU_ASSERT_EQUAL(r.inst[i].n_turns, 0);
        CU_ASSERT(fabs(r.inst[i].load) < 1e-6);
        CU_ASSERT_EQUAL(engine_in_flight(&r.eng[i]), 0);
    }
    CU_ASSERT_EQUAL(r.stats.results, r.stats.dispatches);
    /* la_mlfq holds a group's siblings until its scout reports: the hold path ran */
    if (strcmp(type, "la_mlfq") == 0) CU_ASSERT(r.stats.holds > 0);
    rsim_free(&r);
}

/* The loaded regime: more sequences than the instances' batches hold, so turns wait
 * in the instance queues and the queue's discipline decides who runs; the engines'
 * admission counters add up; fifo and mlfq order the same work differently. */
static void test_loaded_regime(void)
{
    struct rsim_totals t[2];
    static const char *queues[2] = {"fifo", "mlfq"};
    static const struct rsim_sync_config sync = {.groups_per_step = 12, .steps = 3,
                                                 .warmup_steps = 1};
    for (int q = 0; q < 2; q++) {
        struct sched_config sc;
        struct rsim_config c = small_config("cmlfq", 5, &sc);
        snprintf(sc.instance_queue, sizeof sc.instance_queue, "%s", queues[q]);
        c.max_batch = 3; /* 4 instances x 3 sequences for 48 trajectories a step */
        struct rsim_step_result rows[3];
        char err[512];
        CU_ASSERT_EQUAL_FATAL(rsim_run_sync(&c, &sync, rows, &t[q], err, sizeof err), 0);
        for (int k = 0; k < 3; k++) {
            /* every turn admitted once, and once more after each preemption */
            CU_ASSERT_EQUAL(rows[k].admissions, rows[k].turns + rows[k].preemptions);
            CU_ASSERT(rows[k].waited > 0 && rows[k].waited <= rows[k].admissions);
            CU_ASSERT(rows[k].queue_wait_s > 0);
            /* later turns on the same instance find their context cached */
            CU_ASSERT(rows[k].cache_hit_tokens > 0);
        }
        CU_ASSERT_EQUAL(t[q].admissions, rows[1].admissions + rows[2].admissions);
        CU_ASSERT_EQUAL(t[q].waited, rows[1].waited + rows[2].waited);
        CU_ASSERT_EQUAL(t[q].cache_hit_tokens, rows[1].cache_hit_tokens + rows[2].cache_hit_tokens);
        CU_ASSERT_EQUAL(t[q].prefill_tokens, rows[1].prefill_tokens + rows[2].prefill_tokens);
        /* the queue held work for a good part of the admissions */
        CU_ASSERT(2 * t[q].waited > t[q].admissions);
    }
    /* the same trajectories (same seed) ... */
    CU_ASSERT_EQUAL(t[0].trajectories, t[1].trajectories);
    /* ... run in another order: the discipline engaged */
    CU_ASSERT(t[0].queue_wait_s != t[1].queue_wait_s);
    CU_ASSERT(t[0].p50_latency_s != t[1].p50_latency_s);
}

static void test_all_finish(void)
{
    run_and_check("cmlfq", 8, 12, 32768);
    run_and_check("load_balance", 8, 12, 32768);
    run_and_check("length_aware", 8, 12, 32768);
    run_and_check("la_mlfq", 8, 12, 32768);
    /* tight limits: turn and context caps end trajectories early */
    run_and_check("cmlfq", 8, 2, 1500);
    run_and_check("la_mlfq", 8, 3, 2000);
}

static void test_run_until(void)
{
    struct sched_config sc;
    struct rsim_config c = small_config("load_balance", 5, &sc);
    struct rsim r;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(rsim_init(&r, &c, err, sizeof err), 0);
    for (int g = 0; g < 8; g++) rsim_launch_group(&r, 0);
    CU_ASSERT_EQUAL(rsim_run_until(&r, 1.0, err, sizeof err), 0);
    CU_ASSERT_EQUAL(r.now, 1.0);
    CU_ASSERT(r.in_flight > 0);
    CU_ASSERT_EQUAL(rsim_run_until(&r, INFINITY, err, sizeof err), 0);
    CU_ASSERT_EQUAL(r.in_flight, 0);
    CU_ASSERT(r.now > 1.0);
    /* idle: a finite horizon moves the clock there */
    double t = r.now + 5;
    CU_ASSERT_EQUAL(rsim_run_until(&r, t, err, sizeof err), 0);
    CU_ASSERT_EQUAL(r.now, t);
    rsim_free(&r);
}

static void test_bad_config(void)
{
    struct sched_config sc;
    struct rsim r;
    char err[512] = "";
    struct rsim_config c = small_config("cmlfq", 1, &sc);
    c.tp[2] = 3;
    CU_ASSERT_EQUAL(rsim_init(&r, &c, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "TP 3") != NULL);
    c = small_config("cmlfq", 1, &sc);
    c.n_inst = 0;
    CU_ASSERT_EQUAL(rsim_init(&r, &c, err, sizeof err), -1);
    c = small_config("no_such_policy", 1, &sc);
    CU_ASSERT_EQUAL(rsim_init(&r, &c, err, sizeof err), -1);
    CU_ASSERT(err[0] != '\0');
    c = small_config("cmlfq", 1, &sc);
    struct rsim_sync_config s = g_sync;
    s.warmup_steps = s.steps;
    struct rsim_totals tot;
    CU_ASSERT_EQUAL(rsim_run_sync(&c, &s, NULL, &tot, err, sizeof err), -1);
    rsim_free(NULL);
}

static void test_percentile(void)
{
    double v[] = {5, 1, 4, 2, 3};
    CU_ASSERT_DOUBLE_EQUAL(rsim_percentile(v, 5, 0.5), 3.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(rsim_percentile(v, 5, 0.9), 4.6, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(rsim_percentile(v, 5, 1.0), 5.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(rsim_percentile(v, 0, 0.5), 0.0, 1e-12);
}

static const struct test_case cases[] = {
    {"deterministic", test_deterministic},
    {"all_finish_conservation", test_all_finish},
    {"loaded_regime_queue_engages", test_loaded_regime},
    {"run_until", test_run_until},
    {"bad_config", test_bad_config},
    {"percentile", test_percentile},
    {NULL, NULL},
};

int main(void)
{
    static const struct test_suite suites[] = {{"rollout_sim", cases}, {NULL, NULL}};
    return test_main(suites);
}
