/* The emulated rollout instance: timing against the cost model, independence from
 * how time is sliced, hand-back and resume, prefix cache, weights, KV capacity; and
 * the instance queue (iqueue.h): mlfq admits short work first where fifo does not,
 * aging admits a long turn behind a stream of short ones, and a turn without an
 * estimate is demoted as it generates and so preempted before a fresh short turn. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libra/cost.h"
#include "libra/engine.h"
#include "libra/iqueue.h"
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
    g_fixed.difficulty_gen_sigma = 0; /* every turn exactly 500 tokens */
    g_fixed.gen_per_failure = 0;
}

static struct engine_config ecfg(int tp, int max_turns)
{
    return (struct engine_config){tp, 3, max_turns, 1 << 20, 256, 7, {0, 1, 1024, 0}};
}

/* ecfg with the multi-level queue (4 levels from base tokens, aging age_s). */
static struct engine_config ecfg_mlfq(int tp, int max_turns, int base, double age_s)
{
    struct engine_config c = ecfg(tp, max_turns);
    c.queue = (struct iqueue_config){.mlfq = 1, .n_levels = 4, .base_tokens = base, .age_s = age_s};
    return c;
}

static struct wire_turn_req req(int64_t id, int turn, int ctx)
{
    return (struct wire_turn_req){.traj_id = id, .prompt_id = id / 4, .turn = turn,
                                  .ctx_tokens = ctx, .budget = 100000, .est_remaining = -1};
}

static struct wire_turn_req req_est(int64_t id, int ctx, int est_remaining)
{
    struct wire_turn_req q = req(id, 0, ctx);
    q.est_remaining = est_remaining;
    return q;
}

/* The sequence of trajectory id in the engine, NULL if it has left. */
static const struct eng_seq *find_seq(const struct engine *e, int64_t id)
{
    for (int i = 0; i < e->n_seq; i++)
        if (e->seq[i].req.traj_id == id) return &e->seq[i];
    return NULL;
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

/* ---- the instance queue ---- */

/* KV full of long work (X); then a long-estimate turn L and a short-estimate turn S
 * queue, in that order, and only one of them fits at a time. Returns the trajectory
 * admitted first (the second to finish, after X). */
static int64_t first_after_long_work(const struct engine_config *c)
{
    struct engine e;
    engine_init(&e, c, &g_cm, &g_fixed);
    e.capacity = 5000;
    engine_set_version(&e, 0, 0);
    struct wire_turn_req x = req_est(1, 4000, -1), l = req_est(2, 3000, 20000),
                         s = req_est(3, 3000, 100);
    engine_submit(&e, &x);
    struct results out = {0};
    engine_advance(&e, 0.5, &out.r, &out.n, &out.cap);
    CU_ASSERT_EQUAL(find_seq(&e, 1)->state, SEQ_RUNNING);
    engine_submit(&e, &l);
    engine_submit(&e, &s);
    int queued, running;
    double kv;
    engine_queue_stats(&e, &queued, &running, &kv);
    CU_ASSERT_EQUAL(queued, 2);
    CU_ASSERT_EQUAL(running, 1);
    CU_ASSERT(kv > 0.8 && kv <= 1.0);
    engine_advance(&e, 1e5, &out.r, &out.n, &out.cap);
    CU_ASSERT_EQUAL_FATAL(out.n, 3);
    CU_ASSERT_EQUAL(out.r[0].traj_id, 1);
    CU_ASSERT_EQUAL(e.stat_preemptions, 0);
    int64_t first = out.r[1].traj_id;
    free(out.r);
    engine_free(&e);
    return first;
}

static void test_mlfq_short_first(void)
{
    struct engine_config fifo = ecfg(1, 1), mlfq = ecfg_mlfq(1, 1, 1024, 0);
    CU_ASSERT_EQUAL(first_after_long_work(&fifo), 2); /* arrival order: L */
    CU_ASSERT_EQUAL(first_after_long_work(&mlfq), 3); /* level 0 before level 3: S */
}

/* A long-estimate turn L queued behind a stream of short ones (room for one turn at a
 * time; at least two short ones always wait). Returns the virtual time at which L
 * was admitted, or -1 if it was not by the horizon; *n_short: short turns finished. */
static double long_behind_stream(const struct engine_config *c, double horizon, int *n_short)
{
    struct engine e;
    engine_init(&e, c, &g_cm, &g_fixed);
    e.capacity = 5000;
    engine_set_version(&e, 0, 0);
    struct wire_turn_req s1 = req_est(100, 3000, 100), l = req_est(1, 3000, 1000000);
    engine_submit(&e, &s1);
    engine_submit(&e, &l);
    int64_t next_id = 101;
    struct results out = {0};
    double admitted = -1;
    for (double v = 0; v <= horizon && admitted < 0; v += 0.25) {
        int shorts = 0;
        for (int i = 0; i < e.n_seq; i++)
            shorts += e.seq[i].state == SEQ_QUEUED && e.seq[i].req.traj_id >= 100;
        for (; shorts < 2; shorts++) {
            struct wire_turn_req s = req_est(next_id++, 3000, 100);
            engine_submit(&e, &s);
        }
        engine_advance(&e, v, &out.r, &out.n, &out.cap);
        const struct eng_seq *ls = find_seq(&e, 1);
        if (!ls || ls->state != SEQ_QUEUED) admitted = v;
    }
    *n_short = 0;
    for (int i = 0; i < out.n; i++) *n_short += out.r[i].traj_id >= 100;
    free(out.r);
    engine_free(&e);
    return admitted;
}

static void test_mlfq_aging(void)
{
    /* Without aging, level 3 never runs while level-0 work waits; with 5 s per level
     * it is level 0 after 15 s and then goes first by arrival (a short turn runs
     * about 2.5 s here). FIFO serves it second, at once. */
    struct engine_config starve = ecfg_mlfq(1, 1, 1024, 0), aged = ecfg_mlfq(1, 1, 1024, 5.0),
                         fifo = ecfg(1, 1);
    int n_short;
    CU_ASSERT_EQUAL(long_behind_stream(&starve, 100, &n_short), -1);
    CU_ASSERT(n_short > 20); /* the short ones kept coming and were served */
    double t = long_behind_stream(&aged, 100, &n_short);
    CU_ASSERT(t >= 15 && t < 30);
    CU_ASSERT(n_short >= 5);
    double f = long_behind_stream(&fifo, 100, &n_short);
    CU_ASSERT(f >= 0 && f < 15);
    CU_ASSERT(n_short <= 1);
}

/* A tool-free turn A without an estimate runs alone until it has generated about 300
 * tokens; then a fresh short-estimate turn B is admitted with room for only about 50
 * more tokens each. Returns the trajectory preempted first (0 if none). */
static int64_t first_preempted(const struct engine_config *c)
{
    struct engine e;
    engine_init(&e, c, &g_cm, &g_fixed);
    engine_set_version(&e, 0, 0);
    struct wire_turn_req a = req_est(1, 1000, -1), b = req_est(2, 1000, 50);
    engine_submit(&e, &a);
    struct results out = {0};
    double v = 0;
    const struct eng_seq *sa = find_seq(&e, 1);
    CU_ASSERT_EQUAL(iq_level(&c->queue, sa->req.est_remaining, sa->generated, 0), 0);
    while (sa->generated < 300 && v < 100) {
        v += 0.01;
        engine_advance(&e, v, &out.r, &out.n, &out.cap);
    }
    CU_ASSERT_FATAL(sa->generated >= 300 && sa->generated < 350);
    if (c->queue.mlfq) /* demoted: 300 tokens > base 100 */
        CU_ASSERT(iq_level(&c->queue, sa->req.est_remaining, sa->generated, 0) >= 1);
    e.capacity = e.resident + 1000 + 100; /* B fits with 100 tokens of headroom */
    engine_submit(&e, &b);
    while (e.stat_preemptions == 0 && v < 100) {
        v += 0.01;
        engine_advance(&e, v, &out.r, &out.n, &out.cap);
    }
    CU_ASSERT_EQUAL(out.n, 0);
    int64_t victim = 0;
    for (int i = 0; i < e.n_seq; i++)
        if (e.seq[i].state == SEQ_QUEUED) victim = e.seq[i].req.traj_id;
    CU_ASSERT_EQUAL(e.stat_preemptions, 1);
    free(out.r);
    engine_free(&e);
    return victim;
}

static void test_mlfq_demotion_preempts(void)
{
    struct engine_config fifo = ecfg(1, 1), mlfq = ecfg_mlfq(1, 1, 100, 0);
    CU_ASSERT_EQUAL(first_preempted(&fifo), 2); /* the newest */
    CU_ASSERT_EQUAL(first_preempted(&mlfq), 1); /* the demoted one */
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
        {"mlfq admits the short turn first; fifo the older", test_mlfq_short_first},
        {"mlfq aging admits a long turn behind short ones", test_mlfq_aging},
        {"mlfq preempts a demoted no-estimate turn first", test_mlfq_demotion_preempts},
        {NULL, NULL}};
    static const struct test_suite suites[] = {{"engine", cases}, {NULL, NULL}};
    return test_main(suites);
}
