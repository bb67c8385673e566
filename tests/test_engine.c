/* The emulated rollout instance: timing against the cost model, independence from
 * how time is sliced, hand-back and resume, prefix cache, weights, KV capacity. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libra/cost.h"
#include "libra/engine.h"
#include "libra/profile.h"
#include "libra/workload.h"
#include "testutil.h"

static struct cost_model g_cm;
static struct workload g_fixed; /* no randomness in lengths */
static struct workload g_r2e;

static void load_models(void)
{
    char err[512];
    if (profile_load_hw(test_path("inputs/hardware/a800.cfg"), &g_cm.hw, err, sizeof err) ||
        profile_load_model(test_path("inputs/models/qwen3-4b.cfg"), &g_cm.model, err, sizeof err) ||
        workload_load(test_path("inputs/workloads/r2e-gym.cfg"), &g_r2e, err, sizeof err)) {
        fprintf(stderr, "test_engine: %s\n", err);
        exit(2);
    }
    g_cm.p = (struct cost_params){0.85, 0.55, 0.4, 0.9, 0.04, 1e9, 16};
    g_fixed = g_r2e;
    g_fixed.gen_median = 500;
    g_fixed.gen_sigma = 0;
    g_fixed.drift_gen_per_step = 0;
}

static struct engine_config ecfg(int tp, int max_turns)
{
    return (struct engine_config){tp, 3, max_turns, 1 << 20, 256, 7};
}

static struct wire_turn_req req(int64_t id, int turn, int ctx)
{
    return (struct wire_turn_req){.traj_id = id, .prompt_id = id / 4, .turn = turn,
                                  .ctx_tokens = ctx, .budget = 100000};
}

struct results {
    struct wire_turn_result *r;
    int n, cap;
};

static void test_single_sequence_timing(void)
{
    struct engine e;
    struct engine_config c = ecfg(2, 1);
    engine_init(&e, &c, &g_cm, &g_fixed);
    engine_set_version(&e, 0, 0);
    struct wire_turn_req q = req(1, 0, 1000);
    engine_submit(&e, &q);
    struct results out = {0};
    int gen = e.seq[0].turn.gen_tokens;
    CU_ASSERT_EQUAL(gen, 500);
    double want = cost_prefill_s(&g_cm, 2, 1000, 0) + gen * cost_decode_step_s(&g_cm, 2, 1, 1000 + gen / 2.0);
    engine_advance(&e, want * 0.99, &out.r, &out.n, &out.cap);
    CU_ASSERT_EQUAL(out.n, 0);
    engine_advance(&e, want * 1.0001, &out.r, &out.n, &out.cap);
    CU_ASSERT_EQUAL_FATAL(out.n, 1);
    CU_ASSERT_EQUAL(out.r[0].gen_tokens, 500);
    CU_ASSERT_EQUAL(out.r[0].final, 1); /* max_turns = 1 */
    CU_ASSERT_EQUAL(out.r[0].leader, 3);
    CU_ASSERT_EQUAL(out.r[0].version_first, 0);
    CU_ASSERT_CLOSE(e.vnow, want * 1.0001, 1e-9); /* idle time passes to v */
    double busy = engine_take_busy(&e);
    CU_ASSERT_CLOSE(busy, 2 * want, 1e-9); /* TP 2: rank-seconds */
    CU_ASSERT_EQUAL(engine_in_flight(&e), 0);
    CU_ASSERT(isinf(engine_next_event(&e)));
    free(out.r);
    engine_free(&e);
}

static int cmp_result(const void *a, const void *b)
{
    const struct wire_turn_result *x = a, *y = b;
    return x->traj_id < y->traj_id ? -1 : (x->traj_id > y->traj_id);
}

/* Runs 16 trajectories' first turns to the end, advancing in `slices` steps. */
static void run_sliced(int slices, struct results *out)
{
    struct engine e;
    struct engine_config c = ecfg(1, 12);
    engine_init(&e, &c, &g_cm, &g_r2e);
    engine_set_version(&e, 5, 0);
    for (int i = 0; i < 16; i++) {
        struct wire_turn_req q = req(100 + i, 0, 500 + 100 * i);
        engine_submit(&e, &q);
    }
    double end = 1e5;
    for (int s = 1; s <= slices; s++) engine_advance(&e, end * s / slices, &out->r, &out->n, &out->cap);
    qsort(out->r, (size_t)out->n, sizeof *out->r, cmp_result);
    engine_free(&e);
}

static void test_slicing_independence(void)
{
    struct results a = {0}, b = {0};
    run_sliced(1, &a);
    run_sliced(5000, &b);
    CU_ASSERT_EQUAL_FATAL(a.n, 16);
    CU_ASSERT_EQUAL_FATAL(b.n, 16);
    for (int i = 0; i < 16; i++) {
        CU_ASSERT_EQUAL(a.r[i].traj_id, b.r[i].traj_id);
        CU_ASSERT_EQUAL(a.r[i].gen_tokens, b.r[i].gen_tokens);
        CU_ASSERT_EQUAL(a.r[i].final, b.r[i].final);
        CU_ASSERT_EQUAL(a.r[i].tool, b.r[i].tool);
        CU_ASSERT_EQUAL(a.r[i].payload_tokens, b.r[i].payload_tokens);
        CU_ASSERT_EQUAL(a.r[i].version_last, 5);
    }
    free(a.r);
    free(b.r);
}

static void test_handback_and_resume(void)
{
    struct engine e, f;
    struct engine_config c = ecfg(1, 1);
    engine_init(&e, &c, &g_cm, &g_fixed);
    engine_set_version(&e, 0, 0);
    for (int i = 0; i < 3; i++) {
        struct wire_turn_req q = req(i, 0, 2000);
        engine_submit(&e, &q);
    }
    struct results out = {0};
    double t_prefill = 3 * cost_prefill_s(&g_cm, 1, 2000, 0);
    engine_advance(&e, t_prefill + 100 * cost_decode_step_s(&g_cm, 1, 3, 6300), &out.r, &out.n, &out.cap);
    CU_ASSERT_EQUAL(out.n, 0);
    engine_handback(&e, &out.r, &out.n, &out.cap);
    CU_ASSERT_EQUAL_FATAL(out.n, 3);
    CU_ASSERT_EQUAL(engine_in_flight(&e), 0);
    engine_init(&f, &c, &g_cm, &g_fixed);
    engine_set_version(&f, 1, 0);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(out.r[i].partial, 1);
        CU_ASSERT(out.r[i].gen_tokens > 50 && out.r[i].gen_tokens < 500);
        struct wire_turn_req q = req(out.r[i].traj_id, 0, 2000);
        q.resume_generated = out.r[i].gen_tokens;
        engine_submit(&f, &q);
        CU_ASSERT_EQUAL(f.seq[i].prefill, 2000 + out.r[i].gen_tokens); /* no cache: re-prefill */
    }
    struct results done = {0};
    engine_advance(&f, 1e6, &done.r, &done.n, &done.cap);
    CU_ASSERT_EQUAL_FATAL(done.n, 3);
    for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL(done.r[i].gen_tokens, 500);
    free(out.r);
    free(done.r);
    engine_free(&e);
    engine_free(&f);
}

static void test_prefix_cache(void)
{
    struct engine e;
    struct engine_config c = ecfg(1, 12);
    engine_init(&e, &c, &g_cm, &g_fixed);
    engine_set_version(&e, 0, 0);
    struct wire_turn_req q = req(1, 0, 1000);
    engine_submit(&e, &q);
    struct results out = {0};
    engine_advance(&e, 1e6, &out.r, &out.n, &out.cap);
    CU_ASSERT_EQUAL_FATAL(out.n, 1);
    CU_ASSERT_EQUAL(e.stat_prefill_tokens, 1000);
    if (out.r[0].final) { /* the workload ended it: nothing more to check */
        free(out.r);
        engine_free(&e);
        return;
    }
    int ctx = 1000 + out.r[0].gen_tokens + out.r[0].payload_tokens;
    q = req(1, 1, ctx);
    engine_submit(&e, &q);
    /* only the tool return is new to this instance */
    CU_ASSERT_EQUAL(e.seq[0].prefill, out.r[0].payload_tokens);
    free(out.r);
    engine_free(&e);
}

static void test_waits_for_weights(void)
{
    struct engine e;
    struct engine_config c = ecfg(1, 1);
    engine_init(&e, &c, &g_cm, &g_fixed);
    struct wire_turn_req q = req(1, 0, 100);
    engine_submit(&e, &q);
    struct results out = {0};
    engine_advance(&e, 1e4, &out.r, &out.n, &out.cap);
    CU_ASSERT_EQUAL(out.n, 0); /* version -1: no weights, no decode */
    CU_ASSERT_EQUAL(e.seq[0].generated, 0);
    engine_set_version(&e, 3, 50.0);
    CU_ASSERT_CLOSE(engine_next_event(&e), 1e4 + 50.0, 1e-12);
    engine_advance(&e, 1e4 + 49.0, &out.r, &out.n, &out.cap);
    CU_ASSERT_EQUAL(e.seq[0].generated, 0); /* still swapping weights */
    engine_advance(&e, 2e4, &out.r, &out.n, &out.cap);
    CU_ASSERT_EQUAL_FATAL(out.n, 1);
    CU_ASSERT_EQUAL(out.r[0].version_first, 3);
    free(out.r);
    engine_free(&e);
}

static void test_capacity_bounds_batch(void)
{
    struct engine e;
    struct engine_config c = ecfg(1, 1);
    engine_init(&e, &c, &g_cm, &g_fixed);
    e.capacity = 5000; /* room for about four 1000-token contexts */
    engine_set_version(&e, 0, 0);
    for (int i = 0; i < 10; i++) {
        struct wire_turn_req q = req(i, 0, 1000);
        engine_submit(&e, &q);
    }
    struct results out = {0};
    double v = 0;
    int max_running = 0;
    while (out.n < 10 && v < 1e5) {
        v += 0.05;
        engine_advance(&e, v, &out.r, &out.n, &out.cap);
        int running = 0;
        for (int i = 0; i < e.n_seq; i++) running += e.seq[i].state == SEQ_RUNNING;
        if (running > max_running) max_running = running;
        CU_ASSERT(e.resident <= e.capacity + 1e-9);
    }
    CU_ASSERT_EQUAL(out.n, 10);
    CU_ASSERT(max_running >= 2 && max_running <= 4);
    free(out.r);
    engine_free(&e);
}

int main(void)
{
    load_models();
    static const struct test_case cases[] = {
        {"one sequence: prefill + decode from the cost model", test_single_sequence_timing},
        {"results do not depend on time slicing", test_slicing_independence},
        {"hand-back mid-turn and resume elsewhere", test_handback_and_resume},
        {"prefix cache: next turn prefills only new tokens", test_prefix_cache},
        {"no decode before weights; swap pause", test_waits_for_weights},
        {"KV capacity bounds the running batch", test_capacity_bounds_batch},
        {NULL, NULL}};
    static const struct test_suite suites[] = {{"engine", cases}, {NULL, NULL}};
    return test_main(suites);
}
