/*
 * Tests of the planner's policies: the cost-model calibrator (EMA, change points,
 * clamping, ignored input), the planning triggers (order, warmup, cooldown, history,
 * the consumed rejected baseline), the amortised apply gate and the elastic pool
 * controller. The reference's numbers (planner.md §2.6, §2.7, §5) are checked where
 * our contract keeps them; where the fixes (§6.5, §6.9) change the answer, the test
 * says what the reference did and asserts ours.
 */
#include "libra/calib.h"
#include "libra/plan_policy.h"
#include "libra/pool_ctl.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

/* ---- calibration ---------------------------------------------------------- */

static const struct calib_config calib_ref = {0.1, 0.8, 20, 3.0, 0.05, 20.0};

static void test_calib_constant(void)
{
    struct calib c;
    calib_init(&c, &calib_ref);
    CU_ASSERT_DOUBLE_EQUAL(calib_scale(&c, CALIB_TRAIN), 1.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(calib_scale(&c, CALIB_ROLLOUT), 1.0, 0);
    for (int i = 0; i < 30; i++) CU_ASSERT_EQUAL(calib_update(&c, CALIB_TRAIN, 1.5, 3.0), 1);
    CU_ASSERT_DOUBLE_EQUAL(calib_scale(&c, CALIB_TRAIN), 2.0, 1e-12);
    CU_ASSERT_EQUAL(c.t[CALIB_TRAIN].n, 30);
    CU_ASSERT_EQUAL(c.t[CALIB_TRAIN].resets, 0);
    CU_ASSERT_DOUBLE_EQUAL(c.t[CALIB_TRAIN].last_pred, 1.5, 0);
    CU_ASSERT_DOUBLE_EQUAL(c.t[CALIB_TRAIN].last_meas, 3.0, 0);
    /* The terms are independent. */
    CU_ASSERT_DOUBLE_EQUAL(calib_scale(&c, CALIB_ROLLOUT), 1.0, 0);
    CU_ASSERT_EQUAL(c.t[CALIB_ROLLOUT].n, 0);
}

static void test_calib_change_point(void)
{
    struct calib c;
    calib_init(&c, &calib_ref);
    for (int i = 0; i < 10; i++) CU_ASSERT_EQUAL(calib_update(&c, CALIB_ROLLOUT, 4.0, 4.0), 1);
    CU_ASSERT_DOUBLE_EQUAL(calib_scale(&c, CALIB_ROLLOUT), 1.0, 1e-12);
    /* 1 -> 3: a change point; alpha_fast gives 0.2 + 0.8 * 3 = 2.6. */
    CU_ASSERT_EQUAL(calib_update(&c, CALIB_ROLLOUT, 4.0, 12.0), 2);
    CU_ASSERT_EQUAL(c.t[CALIB_ROLLOUT].resets, 1);
    CU_ASSERT_DOUBLE_EQUAL(calib_scale(&c, CALIB_ROLLOUT), 2.6, 1e-12);
    CU_ASSERT_EQUAL(c.t[CALIB_ROLLOUT].ring_n, 1); /* the new regime's own window */
    /* The new regime has < 3 ratios: still fast, 0.2 * 2.6 + 0.8 * 3 = 2.92. */
    CU_ASSERT_EQUAL(calib_update(&c, CALIB_ROLLOUT, 4.0, 12.0), 1);
    CU_ASSERT_DOUBLE_EQUAL(calib_scale(&c, CALIB_ROLLOUT), 2.92, 1e-12);
    CU_ASSERT(fabs(calib_scale(&c, CALIB_ROLLOUT) - 3.0) <= 0.1 * 3.0);
    for (int i = 0; i < 20; i++) CU_ASSERT_EQUAL(calib_update(&c, CALIB_ROLLOUT, 4.0, 12.0), 1);
    CU_ASSERT_EQUAL(c.t[CALIB_ROLLOUT].resets, 1);
    CU_ASSERT_DOUBLE_EQUAL(calib_scale(&c, CALIB_ROLLOUT), 3.0, 5e-3); /* 3 - 0.016 * 0.9^19 */
    /* And back down. */
    CU_ASSERT_EQUAL(calib_update(&c, CALIB_ROLLOUT, 4.0, 4.0), 2);
    CU_ASSERT_EQUAL(c.t[CALIB_ROLLOUT].resets, 2);
    CU_ASSERT(calib_scale(&c, CALIB_ROLLOUT) < 1.5);
}

/* alpha 0.1 alone (the change-point test disabled): the same step takes ~19 updates. */
static void test_calib_slow_without_change_point(void)
{
    struct calib_config cfg = calib_ref;
    cfg.sigma = 1e12;
    struct calib c;
    calib_init(&c, &cfg);
    for (int i = 0; i < 10; i++) calib_update(&c, CALIB_TRAIN, 1.0, 1.0);
    CU_ASSERT_EQUAL(calib_update(&c, CALIB_TRAIN, 1.0, 3.0), 1);
    CU_ASSERT_EQUAL(calib_update(&c, CALIB_TRAIN, 1.0, 3.0), 1);
    CU_ASSERT_DOUBLE_EQUAL(calib_scale(&c, CALIB_TRAIN), 1.38, 1e-12); /* 3 - 2 * 0.9^2 */
    int n = 2;
    while (fabs(calib_scale(&c, CALIB_TRAIN) - 3.0) > 0.3 && n < 100) {
        calib_update(&c, CALIB_TRAIN, 1.0, 3.0);
        n++;
    }
    CU_ASSERT_EQUAL(n, 19); /* 2 * 0.9^n <= 0.3 */
    CU_ASSERT_EQUAL(c.t[CALIB_TRAIN].resets, 0);
}

static void test_calib_noise_is_not_a_change(void)
{
    struct calib c;
    calib_init(&c, &calib_ref);
    for (int i = 0; i < 100; i++) {
        CU_ASSERT_EQUAL(calib_update(&c, CALIB_TRAIN, 10.0, i % 2 ? 10.5 : 9.5), 1);
        if (i > 0) CU_ASSERT(fabs(calib_scale(&c, CALIB_TRAIN) - 1.0) <= 0.05 + 1e-12);
    }
    CU_ASSERT_EQUAL(c.t[CALIB_TRAIN].resets, 0);
    /* An outlier well beyond 3 sigma (std 0.05) is one. */
    CU_ASSERT_EQUAL(calib_update(&c, CALIB_TRAIN, 10.0, 13.0), 2);
}

static void test_calib_ignored_and_clamped(void)
{
    struct calib c;
    calib_init(&c, &calib_ref);
    const double bad[][2] = {{0, 1},        {1, 0},         {-1, 1},       {1, -2},
                             {NAN, 1},      {1, NAN},       {INFINITY, 1}, {1, INFINITY},
                             {1e-320, 1e300}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CU_ASSERT_EQUAL(calib_update(&c, CALIB_TRAIN, bad[i][0], bad[i][1]), 0);
    CU_ASSERT_EQUAL(calib_update(&c, (enum calib_term)7, 1, 1), 0);
    CU_ASSERT_EQUAL(calib_update(&c, (enum calib_term)-1, 1, 1), 0);
    CU_ASSERT_EQUAL(c.t[CALIB_TRAIN].n, 0);
    CU_ASSERT_DOUBLE_EQUAL(calib_scale(&c, CALIB_TRAIN), 1.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(calib_scale(&c, (enum calib_term)7), 1.0, 0);
    /* Clamping to [0.05, 20]. */
    CU_ASSERT_EQUAL(calib_update(&c, CALIB_TRAIN, 1.0, 100.0), 1);
    CU_ASSERT_DOUBLE_EQUAL(calib_scale(&c, CALIB_TRAIN), 20.0, 0);
    CU_ASSERT_EQUAL(calib_update(&c, CALIB_ROLLOUT, 1000.0, 1.0), 1);
    CU_ASSERT_DOUBLE_EQUAL(calib_scale(&c, CALIB_ROLLOUT), 0.05, 0);
    CU_ASSERT_STRING_EQUAL(calib_term_name(CALIB_TRAIN), "train");
    CU_ASSERT_STRING_EQUAL(calib_term_name(CALIB_ROLLOUT), "rollout");
    CU_ASSERT_STRING_EQUAL(calib_term_name((enum calib_term)9), "unknown");
}

/* Out-of-range windows are clamped; a long run stays inside the ring. */
static void test_calib_window_clamp(void)
{
    struct calib_config cfg = calib_ref;
    struct calib c;
    cfg.window = 1000;
    calib_init(&c, &cfg);
    CU_ASSERT_EQUAL(c.cfg.window, CALIB_WINDOW_MAX);
    for (int i = 0; i < 300; i++) calib_update(&c, CALIB_TRAIN, 1.0, 1.0 + 0.01 * (i % 7));
    CU_ASSERT_EQUAL(c.t[CALIB_TRAIN].ring_n, CALIB_WINDOW_MAX);
    cfg.window = 0;
    calib_init(&c, &cfg);
    CU_ASSERT_EQUAL(c.cfg.window, 3);
    for (int i = 0; i < 10; i++) calib_update(&c, CALIB_TRAIN, 1.0, 1.0);
    CU_ASSERT_EQUAL(c.t[CALIB_TRAIN].ring_n, 3);
    CU_ASSERT_EQUAL(calib_update(&c, CALIB_TRAIN, 1.0, 2.0), 2);
}

/* ---- triggers ------------------------------------------------------------- */

/* The reference's defaults (§2.4). */
static const struct trigger_config trig_ref = {10, 1, 1, 8, 0.75, 0.85, 8, 1.25};

static void test_trigger_warmup_history_cooldown(void)
{
    struct trigger_config cfg = trig_ref;
    cfg.warmup = 2;
    cfg.cooldown = 3;
    struct trigger_state s;
    trigger_init(&s);
    CU_ASSERT_EQUAL(s.last_plan_step, -1);
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 0, 100, NULL), PT_WARMUP); /* 0 % 10 == 0 */
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 1, 100, NULL), PT_WARMUP);
    CU_ASSERT_EQUAL(s.last_plan_step, -1);
    /* No cooldown before the first plan, although 2 - (-1) < 3. */
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 2, 100, NULL), PT_SKIP);
    /* A firing trigger without enough history is downgraded and does not count. */
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 10, 7, NULL), PT_INSUFFICIENT_HISTORY);
    CU_ASSERT_EQUAL(s.last_plan_step, -1);
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 10, 8, NULL), PT_INTERVAL);
    CU_ASSERT_EQUAL(s.last_plan_step, 10);
    /* Cooldown 3: steps 11, 12 are blocked even under pressure; 13 fires. */
    struct runtime_metrics m = {1.0, 0, 0, 0, 0};
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 11, 100, &m), PT_COOLDOWN);
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 12, 100, &m), PT_COOLDOWN);
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 13, 100, &m), PT_QUEUE_PRESSURE);
    CU_ASSERT_EQUAL(s.last_plan_step, 13);
    /* Skips do not move the last plan step. */
    m.queue_pressure = 0;
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 17, 100, &m), PT_SKIP);
    CU_ASSERT_EQUAL(s.last_plan_step, 13);
}

/* §5: queue pressure 16/24 >= 0.5 triggers between intervals. */
static void test_trigger_queue_pressure(void)
{
    struct trigger_config cfg = trig_ref;
    cfg.queue_threshold = 0.5;
    cfg.min_history = 0;
    struct trigger_state s;
    trigger_init(&s);
    struct runtime_metrics m = {16.0 / 24.0, 0, 0, 10, 10};
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 3, 0, &m), PT_QUEUE_PRESSURE);
    CU_ASSERT_STRING_EQUAL(plan_trigger_name(PT_QUEUE_PRESSURE), "queue_pressure");
    m.queue_pressure = 11.0 / 24.0;
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 4, 0, &m), PT_SKIP);
    /* At the reference's 0.75 it would not fire. */
    m.queue_pressure = 16.0 / 24.0;
    CU_ASSERT_EQUAL(plan_trigger(&trig_ref, &s, 5, 100, &m), PT_SKIP);
}

/* §5: a rejected delta fires once and the next step gives interval_skip. */
static void test_trigger_rejected_once(void)
{
    struct trigger_state s;
    trigger_init(&s);
    struct runtime_metrics m = {0, 0, 0, 10, 10};
    CU_ASSERT_EQUAL(plan_trigger(&trig_ref, &s, 1, 100, &m), PT_SKIP);
    m.rejected = 8;
    CU_ASSERT_EQUAL(plan_trigger(&trig_ref, &s, 2, 100, &m), PT_REJECTED_DELTA);
    CU_ASSERT_EQUAL(s.rejected_seen, 8);
    enum plan_trigger_kind k = plan_trigger(&trig_ref, &s, 3, 100, &m);
    CU_ASSERT_EQUAL(k, PT_SKIP);
    CU_ASSERT_STRING_EQUAL(plan_trigger_name(k), "interval_skip");
    m.rejected = 15; /* +7 */
    CU_ASSERT_EQUAL(plan_trigger(&trig_ref, &s, 4, 100, &m), PT_SKIP);
    m.rejected = 23; /* +8 from the last evaluation */
    CU_ASSERT_EQUAL(plan_trigger(&trig_ref, &s, 5, 100, &m), PT_REJECTED_DELTA);
    /* A burst seen during warmup or cooldown is consumed there. */
    struct trigger_config cfg = trig_ref;
    cfg.cooldown = 2;
    m.rejected = 40;
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 6, 100, &m), PT_COOLDOWN);
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 7, 100, &m), PT_SKIP);
    /* A counter that went back (a restart) resets the baseline; extreme values are safe. */
    m.rejected = 0;
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 9, 100, &m), PT_SKIP);
    m.rejected = INT64_MAX;
    s.rejected_seen = INT64_MIN;
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 11, 100, &m), PT_REJECTED_DELTA);
}

static void test_trigger_order_and_kinds(void)
{
    struct trigger_config cfg = trig_ref;
    cfg.min_history = 0;
    struct trigger_state s;
    trigger_init(&s);
    /* Everything holds: the interval wins on an interval step, queue pressure off it. */
    struct runtime_metrics m = {0.9, 0.9, 100, 10, 100};
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 20, 0, &m), PT_INTERVAL);
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 21, 0, &m), PT_QUEUE_PRESSURE);
    m.queue_pressure = 0.5;
    m.rejected = 200;
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 22, 0, &m), PT_ACTIVE_PRESSURE);
    m.active_pressure = 0.5;
    m.rejected = 300;
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 23, 0, &m), PT_REJECTED_DELTA);
    /* Imbalance: rollout / train >= 1.25. */
    m.rollout_s = 12.5;
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 24, 0, &m), PT_IMBALANCE);
    m.rollout_s = 12.0;
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 25, 0, &m), PT_SKIP);
    m.train_s = 0;
    m.rollout_s = 50;
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 26, 0, &m), PT_SKIP);
    /* NaN metrics never fire. */
    struct runtime_metrics nan_m = {NAN, NAN, 300, NAN, NAN};
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 27, 0, &nan_m), PT_SKIP);
    /* No metrics: only the interval. */
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 28, 0, NULL), PT_SKIP);
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 30, 0, NULL), PT_INTERVAL);
    /* interval 0 counts as 1. */
    cfg.interval = 0;
    CU_ASSERT_EQUAL(plan_trigger(&cfg, &s, 31, 0, NULL), PT_INTERVAL);

    for (int k = 0; k < PT_N_KINDS; k++)
        CU_ASSERT_EQUAL(plan_trigger_fires((enum plan_trigger_kind)k), k >= PT_INTERVAL);
    CU_ASSERT_FALSE(plan_trigger_fires(PT_N_KINDS));
    const char *names[PT_N_KINDS] = {"warmup",
                                     "cooldown",
                                     "interval_skip",
                                     "insufficient_history",
                                     "interval",
                                     "queue_pressure",
                                     "active_rollout_pressure",
                                     "rejected_rollout_delta",
                                     "rollout_train_imbalance"};
    for (int k = 0; k < PT_N_KINDS; k++)
        CU_ASSERT_STRING_EQUAL(plan_trigger_name((enum plan_trigger_kind)k), names[k]);
    CU_ASSERT_STRING_EQUAL(plan_trigger_name(PT_N_KINDS), "unknown");
}

/* ---- apply gate ----------------------------------------------------------- */

static void test_gate_reference_examples(void)
{
    struct gate_result r;
    /* 100 -> 90 at 15 s: the reference (horizon 1) rejects, net -5. */
    CU_ASSERT_EQUAL(plan_gate(100, 90, 1, 15, 0.05, 0, &r), GATE_NOT_AMORTISED);
    CU_ASSERT_DOUBLE_EQUAL(r.gain_s, 10, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(r.net_s, -5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(r.ratio, 0.1, 1e-12);
    /* Over a 5-step horizon it gains 50 s for 15 s. */
    CU_ASSERT_EQUAL(plan_gate(100, 90, 5, 15, 0.05, 0, &r), GATE_APPLY);
    CU_ASSERT_DOUBLE_EQUAL(r.net_s, 35, 1e-12);
    /* 100 -> 80: net +5, ratio 20 % -> apply (also at horizon 1). */
    CU_ASSERT_EQUAL(plan_gate(100, 80, 1, 15, 0.05, 0, &r), GATE_APPLY);
    CU_ASSERT_DOUBLE_EQUAL(r.net_s, 5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(r.ratio, 0.2, 1e-12);
    /* Production: 21.34 -> 9.85 s at 120 s cost. gain 11.49 s/step: the reference
     * (horizon 1) says gain_below_threshold; at the production interval 10 it is
     * still 114.9 < 120; it pays off from horizon 11 (126.39 - 120). */
    CU_ASSERT_EQUAL(plan_gate(21.34, 9.85, 1, 120, 0.05, 0, &r), GATE_NOT_AMORTISED);
    CU_ASSERT_EQUAL(plan_gate(21.34, 9.85, 10, 120, 0.05, 0, &r), GATE_NOT_AMORTISED);
    CU_ASSERT_DOUBLE_EQUAL(r.net_s, -5.1, 1e-9);
    CU_ASSERT_EQUAL(plan_gate(21.34, 9.85, 11, 120, 0.05, 0, &r), GATE_APPLY);
    CU_ASSERT_DOUBLE_EQUAL(r.net_s, 6.39, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(r.ratio, 11.49 / 21.34, 1e-12);
}

static void test_gate_verdicts(void)
{
    struct gate_result r;
    /* Below 5 %: rejected even though it amortises easily. */
    CU_ASSERT_EQUAL(plan_gate(100, 96, 100, 15, 0.05, 0, &r), GATE_BELOW_RATIO);
    CU_ASSERT(r.net_s > 0);
    CU_ASSERT_EQUAL(plan_gate(100, 95, 100, 15, 0.05, 0, &r), GATE_APPLY);
    /* Same plan first, whatever the times. */
    CU_ASSERT_EQUAL(plan_gate(100, 50, 10, 0, 0.05, 1, &r), GATE_SAME_PLAN);
    /* No gain. */
    CU_ASSERT_EQUAL(plan_gate(100, 100, 10, 0, 0.0, 0, &r), GATE_NO_GAIN);
    CU_ASSERT_EQUAL(plan_gate(100, 110, 10, 0, 0.0, 0, &r), GATE_NO_GAIN);
    CU_ASSERT_EQUAL(plan_gate(100, INFINITY, 10, 0, 0.0, 0, &r), GATE_NO_GAIN);
    CU_ASSERT_EQUAL(plan_gate(100, NAN, 10, 0, 0.0, 0, &r), GATE_NO_GAIN);
    CU_ASSERT_EQUAL(plan_gate(NAN, 10, 10, 0, 0.0, 0, &r), GATE_NO_GAIN);
    CU_ASSERT_EQUAL(plan_gate(100, -5, 10, 0, 0.0, 0, &r), GATE_NO_GAIN);
    /* The current plan does not fit: any finite candidate is a whole gain. */
    CU_ASSERT_EQUAL(plan_gate(INFINITY, 10, 1, 120, 0.05, 0, &r), GATE_APPLY);
    CU_ASSERT_DOUBLE_EQUAL(r.ratio, 1.0, 0);
    /* horizon < 1 counts as 1; a negative or NaN cost as 0. */
    CU_ASSERT_EQUAL(plan_gate(100, 90, 0, 15, 0.05, 0, &r), GATE_NOT_AMORTISED);
    CU_ASSERT_DOUBLE_EQUAL(r.net_s, -5, 1e-12);
    CU_ASSERT_EQUAL(plan_gate(100, 90, -3, -15, 0.05, 0, &r), GATE_APPLY);
    CU_ASSERT_DOUBLE_EQUAL(r.net_s, 10, 1e-12);
    CU_ASSERT_EQUAL(plan_gate(100, 90, 1, NAN, 0.05, 0, NULL), GATE_APPLY);
    /* net exactly 0 is not amortised. */
    CU_ASSERT_EQUAL(plan_gate(100, 90, 3, 30, 0.05, 0, &r), GATE_NOT_AMORTISED);

    CU_ASSERT_STRING_EQUAL(plan_gate_name(GATE_APPLY), "apply");
    CU_ASSERT_STRING_EQUAL(plan_gate_name(GATE_SAME_PLAN), "same_plan");
    CU_ASSERT_STRING_EQUAL(plan_gate_name(GATE_NO_GAIN), "no_gain");
    CU_ASSERT_STRING_EQUAL(plan_gate_name(GATE_BELOW_RATIO), "gain_below_ratio");
    CU_ASSERT_STRING_EQUAL(plan_gate_name(GATE_NOT_AMORTISED), "not_amortised");
    CU_ASSERT_STRING_EQUAL(plan_gate_name((enum gate_verdict)42), "unknown");
}

/* ---- elastic pool --------------------------------------------------------- */

static const struct pool_config pool_ref = {1.15, 0.90, 0.80, 0};

static struct pool_decision decide(const struct pool_config *cfg, int rollout_gpus,
                                   int replica_size, int dp, int active, int joining,
                                   double train_s, double rollout_s, double pressure)
{
    struct pool_input in = {rollout_gpus, replica_size, dp, active, joining,
                            train_s, rollout_s, pressure};
    struct pool_decision d;
    memset(&d, 0xff, sizeof d);
    pool_decide(cfg, &in, &d);
    return d;
}

/* §5 training-bound: 20 s vs 5 s, 2 rollout GPUs, TP1, min_rollout 0. */
static void test_pool_training_bound(void)
{
    /* The reference joins all capacity (desired 2 = capacity 2), lending every
     * rollout GPU. Here k = 2 would leave no rollout GPU (infeasible): with dp 1,
     * T(0) = 20, T(1) = max(20/2, 5*2/1) = 10, so it lends 1. */
    struct pool_decision d = decide(&pool_ref, 2, 1, 1, 0, 0, 20, 5, 0.1);
    CU_ASSERT_EQUAL(d.capacity, 2);
    CU_ASSERT_EQUAL(d.current, 0);
    CU_ASSERT_EQUAL(d.desired, 1);
    CU_ASSERT_EQUAL(d.reason, POOL_TRAINING_BOTTLENECK);
    /* The same numbers with 2 spare GPUs above a reserve of 2 and dp 2: T(1) =
     * max(40/3, 20/3) = 13.3, T(2) = max(10, 10) = 10 -> desired 2 = capacity 2. */
    struct pool_config cfg = pool_ref;
    cfg.min_rollout_gpus = 2;
    d = decide(&cfg, 4, 1, 2, 0, 0, 20, 5, 0.1);
    CU_ASSERT_EQUAL(d.capacity, 2);
    CU_ASSERT_EQUAL(d.desired, 2);
    CU_ASSERT_EQUAL(d.reason, POOL_TRAINING_BOTTLENECK);
    /* Ties go to the smaller k: with dp 1, T(1) = max(10, 6.67) = T(2) = max(6.67, 10). */
    d = decide(&cfg, 4, 1, 1, 0, 0, 20, 5, 0.1);
    CU_ASSERT_EQUAL(d.desired, 1);
    /* Already lent replicas are kept: k >= current. */
    d = decide(&cfg, 4, 1, 1, 2, 0, 1.2, 1.0, 0.1);
    CU_ASSERT_EQUAL(d.desired, 2);
    CU_ASSERT_EQUAL(d.reason, POOL_TRAINING_BOTTLENECK);
}

/* §5 replica counting: 24 rollout GPUs - 4 reserved, replica size 4 -> capacity 5. */
static void test_pool_replica_counting(void)
{
    struct pool_config cfg = pool_ref;
    cfg.min_rollout_gpus = 4;
    /* Strongly training-bound (100 s vs 1 s, dp 1): T(5) = max(16.7, 24/4 = 6) is
     * the best, all 5 replicas, as in the reference. */
    struct pool_decision d = decide(&cfg, 24, 4, 1, 0, 0, 100, 1, 0.0);
    CU_ASSERT_EQUAL(d.capacity, 5);
    CU_ASSERT_EQUAL(d.desired, 5);
    /* 20 s vs 5 s: T(1) = max(10, 6), T(2) = max(6.67, 7.5), T(3) = max(5, 10): the
     * proportional controller lends 2 where the reference would borrow all 5. */
    d = decide(&cfg, 24, 4, 1, 0, 0, 20, 5, 0.0);
    CU_ASSERT_EQUAL(d.capacity, 5);
    CU_ASSERT_EQUAL(d.desired, 2);
    /* Incomplete replicas do not count: 23 - 4 = 19 GPUs -> 4. */
    d = decide(&cfg, 23, 4, 1, 0, 0, 20, 5, 0.0);
    CU_ASSERT_EQUAL(d.capacity, 4);
}

/* §5 rollout-bound (2 s vs 20 s) -> release to 0; a joining replica counts. */
static void test_pool_rollout_bound(void)
{
    /* 2 lent of 4 (G = 2 now): T(0) = max(2*3/1, 20*2/4) = 10 < T(1) < T(2). */
    struct pool_decision d = decide(&pool_ref, 2, 1, 1, 2, 0, 2, 20, 0.1);
    CU_ASSERT_EQUAL(d.current, 2);
    CU_ASSERT_EQUAL(d.desired, 0);
    CU_ASSERT_EQUAL(d.reason, POOL_ROLLOUT_BOTTLENECK);
    /* active 0, joining 1: current 1, released. */
    d = decide(&pool_ref, 3, 1, 1, 0, 1, 2, 20, 0.1);
    CU_ASSERT_EQUAL(d.current, 1);
    CU_ASSERT_EQUAL(d.desired, 0);
    CU_ASSERT_EQUAL(d.reason, POOL_ROLLOUT_BOTTLENECK);
    /* Mildly rollout-bound: releasing one of 4 is enough (8 core replicas, 8 rollout
     * GPUs, ratio 0.8): T(4) = 10, T(3) = max(8*12/11, 10*8/9) = 8.89, T(2) = 9.6. */
    d = decide(&pool_ref, 8, 1, 8, 4, 0, 8, 10, 0.1);
    CU_ASSERT_EQUAL(d.desired, 3);
}

static void test_pool_other_rules(void)
{
    /* Pressure 0.85 >= 0.80: protect the rollout side, whatever the ratio. */
    struct pool_decision d = decide(&pool_ref, 8, 1, 1, 3, 0, 20, 5, 0.85);
    CU_ASSERT_EQUAL(d.desired, 0);
    CU_ASSERT_EQUAL(d.reason, POOL_PROTECT_ROLLOUT);
    /* No complete replica: 3 GPUs, replica size 4; also replica size 0 and a reserve
     * larger than the rollout side. */
    d = decide(&pool_ref, 3, 4, 1, 0, 0, 20, 5, 0.9);
    CU_ASSERT_EQUAL(d.capacity, 0);
    CU_ASSERT_EQUAL(d.desired, 0);
    CU_ASSERT_EQUAL(d.reason, POOL_NO_CAPACITY);
    d = decide(&pool_ref, 8, 0, 1, 0, 0, 20, 5, 0);
    CU_ASSERT_EQUAL(d.reason, POOL_NO_CAPACITY);
    struct pool_config cfg = pool_ref;
    cfg.min_rollout_gpus = 16;
    d = decide(&cfg, 8, 1, 1, 2, 0, 20, 5, 0);
    CU_ASSERT_EQUAL(d.reason, POOL_NO_CAPACITY);
    CU_ASSERT_EQUAL(d.desired, 0);
    /* Between the ratios: hold. 1.0 and the thresholds' neighbours. */
    d = decide(&pool_ref, 8, 1, 1, 3, 0, 10, 10, 0);
    CU_ASSERT_EQUAL(d.desired, 3);
    CU_ASSERT_EQUAL(d.reason, POOL_HOLD);
    d = decide(&pool_ref, 8, 1, 1, 3, 0, 11.4, 10, 0);
    CU_ASSERT_EQUAL(d.reason, POOL_HOLD);
    d = decide(&pool_ref, 8, 1, 1, 3, 0, 11.6, 10, 0);
    CU_ASSERT_EQUAL(d.reason, POOL_TRAINING_BOTTLENECK);
    d = decide(&pool_ref, 8, 1, 1, 3, 0, 9.1, 10, 0);
    CU_ASSERT_EQUAL(d.reason, POOL_HOLD);
    d = decide(&pool_ref, 8, 1, 1, 3, 0, 8.9, 10, 0);
    CU_ASSERT_EQUAL(d.reason, POOL_ROLLOUT_BOTTLENECK);
    /* Capacity counts what is lent: 3 lent + 2 still serving = 5, so a pool that
     * has lent most of the side does not oscillate (holds at a balanced ratio). */
    d = decide(&pool_ref, 2, 1, 1, 3, 0, 10, 10, 0);
    CU_ASSERT_EQUAL(d.current, 3);
    CU_ASSERT_EQUAL(d.capacity, 5);
    CU_ASSERT_EQUAL(d.desired, 3);
    /* training-bound: T(4) = max(50 x 4/5, 1 x 2/1) = 40 < T(3) = 50; k = 5 leaves no
     * rollout GPU */
    d = decide(&pool_ref, 2, 1, 1, 3, 0, 50, 1, 0);
    CU_ASSERT_EQUAL(d.desired, 4);
    CU_ASSERT_EQUAL(d.reason, POOL_TRAINING_BOTTLENECK);
    /* the serving side fell below the reserve: what is lent goes back */
    struct pool_config res = pool_ref;
    res.min_rollout_gpus = 4;
    d = decide(&res, 2, 1, 1, 3, 0, 50, 1, 0);
    CU_ASSERT_EQUAL(d.capacity, 1);
    CU_ASSERT_EQUAL(d.desired, 1);
    /* No measurements yet (or nonsense): hold. */
    d = decide(&pool_ref, 8, 1, 1, 2, 0, 0, 5, 0);
    CU_ASSERT_EQUAL(d.desired, 2);
    CU_ASSERT_EQUAL(d.reason, POOL_HOLD);
    d = decide(&pool_ref, 8, 1, 1, 2, 0, NAN, INFINITY, NAN);
    CU_ASSERT_EQUAL(d.desired, 2);
    CU_ASSERT_EQUAL(d.reason, POOL_HOLD);
    /* Negative counts read as 0; dp 0 with nothing lent cannot release below 0. */
    d = decide(&pool_ref, 8, 1, -4, -1, -1, 2, 20, 0);
    CU_ASSERT_EQUAL(d.current, 0);
    CU_ASSERT_EQUAL(d.desired, 0);

    CU_ASSERT_STRING_EQUAL(pool_reason_name(POOL_NO_CAPACITY), "no_complete_replica_capacity");
    CU_ASSERT_STRING_EQUAL(pool_reason_name(POOL_PROTECT_ROLLOUT), "protect_rollout_capacity");
    CU_ASSERT_STRING_EQUAL(pool_reason_name(POOL_TRAINING_BOTTLENECK), "training_bottleneck");
    CU_ASSERT_STRING_EQUAL(pool_reason_name(POOL_ROLLOUT_BOTTLENECK), "rollout_bottleneck");
    CU_ASSERT_STRING_EQUAL(pool_reason_name(POOL_HOLD), "hysteresis_hold");
    CU_ASSERT_STRING_EQUAL(pool_reason_name(POOL_N_REASONS), "unknown");
}

static const struct test_case calib_cases[] = {
    {"constant ratio converges", test_calib_constant},
    {"step change is a change point", test_calib_change_point},
    {"alpha 0.1 alone is slow", test_calib_slow_without_change_point},
    {"stationary noise is no change", test_calib_noise_is_not_a_change},
    {"ignored input and clamping", test_calib_ignored_and_clamped},
    {"window clamp", test_calib_window_clamp},
    {NULL, NULL},
};

static const struct test_case trigger_cases[] = {
    {"warmup, history, cooldown", test_trigger_warmup_history_cooldown},
    {"queue pressure between intervals", test_trigger_queue_pressure},
    {"rejected delta fires once", test_trigger_rejected_once},
    {"order and kinds", test_trigger_order_and_kinds},
    {NULL, NULL},
};

static const struct test_case gate_cases[] = {
    {"reference examples", test_gate_reference_examples},
    {"verdicts", test_gate_verdicts},
    {NULL, NULL},
};

/* A staleness cap full of stragglers on idle rollout GPUs is not pressure: the
 * reference's max(queue, active) said 1.0 and protected the side (never lent); the
 * busy-scaled signal lets the training bottleneck rule lend the idle GPUs. */
static void test_pool_starved_rollout(void)
{
    CU_ASSERT_DOUBLE_EQUAL(pool_pressure(0.05, 1.0, 0.3), 0.3, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(pool_pressure(0.9, 1.0, 0.3), 0.9, 1e-12); /* a real queue */
    CU_ASSERT_DOUBLE_EQUAL(pool_pressure(0.0, 1.0, 1.0), 1.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(pool_pressure(0.0, 1.0, 2.0), 1.0, 1e-12);  /* clamped */
    CU_ASSERT_DOUBLE_EQUAL(pool_pressure(0.0, 1.0, -1.0), 0.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(pool_pressure(0.0, 0.9, NAN), 0.9, 1e-12);  /* unmeasured */
    /* Training 20 s vs rollout 5 s a step, the cap full, rollout GPUs 30 % busy. */
    struct pool_decision d = decide(&pool_ref, 8, 1, 1, 0, 0, 20, 5, fmax(0.05, 1.0));
    CU_ASSERT_EQUAL(d.reason, POOL_PROTECT_ROLLOUT);
    CU_ASSERT_EQUAL(d.desired, 0);
    d = decide(&pool_ref, 8, 1, 1, 0, 0, 20, 5, pool_pressure(0.05, 1.0, 0.3));
    CU_ASSERT_EQUAL(d.reason, POOL_TRAINING_BOTTLENECK);
    CU_ASSERT(d.desired > 0);
}

static const struct test_case pool_cases[] = {
    {"a starved rollout side lends", test_pool_starved_rollout},
    {"training bound", test_pool_training_bound},
    {"replica counting", test_pool_replica_counting},
    {"rollout bound", test_pool_rollout_bound},
    {"other rules", test_pool_other_rules},
    {NULL, NULL},
};

static const struct test_suite suites[] = {
    {"calib", calib_cases},
    {"plan_trigger", trigger_cases},
    {"plan_gate", gate_cases},
    {"pool_ctl", pool_cases},
    {NULL, NULL},
};

int main(void) { return test_main(suites); }
