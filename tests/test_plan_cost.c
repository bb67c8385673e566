/*
 * Tests of the planner's cost model (src/planner/plan_cost_*.c): the reference's
 * worked example (planner.md §1.2) recomputed with the corrected per-GPU formulas,
 * training time and memory (§6.4: size-dependent, real optimizer state, the OOM the
 * reference test expects but does not get), the tail-aware, per-instance
 * memory-checked rollout (§6.3), its lower bound against random layouts, its
 * placement against a direct scan written here from the documented formulas, its
 * early cutoff, the placement's tournament tree, and transitions (§6.5). Length
 * profiles are built by hand here.
 */
#include "libra/plan_cost.h"
#include "libra/profile.h"
#include "planner/load_tree.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* A profile of n copies of one sample (caller frees p->s). */
static void profile_fill(struct len_profile *p, int n, struct traj_sample s)
{
    p->n = n;
    p->overlap = 1;
    p->contention_free = 0;
    p->s = calloc((size_t)n, sizeof *p->s);
    CU_ASSERT_FATAL(p->s != NULL);
    for (int i = 0; i < n; i++) p->s[i] = s;
}

/* Deterministic test randomness (splitmix64). */
static uint64_t rnd_next(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int rnd_int(uint64_t *x, int lo, int hi) { return lo + (int)(rnd_next(x) % (uint64_t)(hi - lo + 1)); }

/* ---- worked example of reference §1.2, corrected ---- */

static void test_worked_example(void)
{
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-14b");
    const double P = 14.7683072e9, bw = 2.039e12 * 0.85;
    static const double kv[] = {163840, 81920, 40960, 20480};
    /* Corrected per-GPU capacity: (80e9 x 0.9 - 2P / t - 1e9) / kv(t) x 0.96. The
     * reference (whole-instance pool over per-GPU kv) had 0.30M, 1.54M, 6.8M, 28.6M. */
    static const double cap[] = {242949, 658965, 1490996, 3155058};
    /* Decode step, one sequence with 32768 resident tokens: (2P / t + 32768 kv(t)) /
     * (bw u) + TP all-reduces. The reference (divided by t twice): 19.6, 5.3, 1.63,
     * 0.71 ms. */
    static const double dec_ms[] = {20.1398, 10.4726, 5.4391, 2.9223};
    for (int k = 0; k < PC_N_TP; k++) {
        int t = pc_tp_of(k);
        CU_ASSERT_DOUBLE_EQUAL(cost_kv_bytes_per_token(&c, t), kv[k], 0);
        CU_ASSERT_DOUBLE_EQUAL(cost_kv_capacity_tokens(&c, t), cap[k], 1);
        double ar = t > 1 ? 2 * 40 * (2.0 * (t - 1) / t * 5120 * 2 / 300e9 + 5e-6) : 0;
        double want = (2 * P / t + 32768 * kv[k]) / bw + ar;
        double got = cost_decode_step_s(&c, t, 1, 32768);
        CU_ASSERT_CLOSE(got, want, 1e-12);
        CU_ASSERT_CLOSE(got * 1e3, dec_ms[k], 1e-4);
    }
    /* Capacity grows a little faster than t (the weight shard shrinks), never like t^2. */
    for (int k = 0; k + 1 < PC_N_TP; k++) {
        double r = cap[k + 1] / cap[k];
        CU_ASSERT(r > 2.0 && r < 4.0);
    }
    CU_ASSERT(cap[3] / cap[0] < 16); /* reference: 95x */
    /* Decode time falls about 1/t, not 1/t^2: 8x more GPUs buy < 8x. */
    double r = cost_decode_step_s(&c, 1, 1, 32768) / cost_decode_step_s(&c, 8, 1, 32768);
    CU_ASSERT(r > 4 && r < 8); /* reference: 27.6x */
}

/* ---- training ---- */

static void test_logits_bytes(void)
{
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-14b");
    /* Reference §4: 18992 x 32767 x 4 x 1.5 ~ 3.73 GB. */
    CU_ASSERT_DOUBLE_EQUAL(pc_logits_bytes(&c.model, 1, 32768, 8), 18992.0 * 32767 * 6, 0);
    CU_ASSERT_CLOSE(pc_logits_bytes(&c.model, 1, 32768, 8), 3.7339e9, 1e-4);
    /* Reference memory test: local vocab 250, 2 x 1023 x 250 x 4 x 1.5. */
    struct model_profile m = c.model;
    m.vocab = 500;
    CU_ASSERT_DOUBLE_EQUAL(pc_logits_bytes(&m, 2, 1024, 2), 3069000, 0);
    /* ceil(V / tp); batch >= 1, S >= 1. */
    m.vocab = 501;
    CU_ASSERT_DOUBLE_EQUAL(pc_logits_bytes(&m, 1, 3, 2), 2 * 251 * 6, 0);
    CU_ASSERT_DOUBLE_EQUAL(pc_logits_bytes(&m, 0, 3, 2), 2 * 251 * 6, 0);
    CU_ASSERT_DOUBLE_EQUAL(pc_logits_bytes(&m, 4, 0, 2), 0, 0);
}

/* 32 sequences of 20,000 tokens: the reference's §1.3 example batch. */
#define B32 32, 32 * 20000.0, 32 * 4e8, 20000.0

static void test_train_hand_value(void)
{
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-14b");
    const double P = 14.7683072e9;
    struct train_shape s = {.tp = 8, .pp = 1, .dp = 4, .micro = 1};
    struct train_est e;
    double step = pc_train_step(&c, &s, 0, B32, &e);
    /* Each replica: 8 sequences, 160,000 tokens, on 8 GPUs. */
    double compute = (6 * P * 160000 + 12.0 * 40 * 40 * 128 * 8 * 4e8 / 2) / (312e12 * 0.4) / 8;
    CU_ASSERT_CLOSE(e.compute_s, compute, 1e-12);
    /* 4 all-reduces per layer of the tokens' activations, 8 micro-batches of latency. */
    double tp = 4 * 40 * (2.0 * 7 / 8 * 160000 * 5120 * 2 / 300e9 + 8 * 5e-6);
    CU_ASSERT_CLOSE(e.tp_comm_s, tp, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(e.pp_bubble_s, 0, 0);
    /* Each GPU reduces its 1/8 gradient shard over 4 replicas. */
    double dp = 2.0 * 3 / 4 * (2 * P / 8) / 25e9 + 6 * 1e-5;
    CU_ASSERT_CLOSE(e.dp_comm_s, dp, 1e-12);
    CU_ASSERT_CLOSE(step, compute + tp + dp, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(e.step_s, step, 0);
    /* Memory: 4 B/param over 8 GPUs, 12 B/param over 8 x 4, 20,000 tokens of
     * checkpoints (40 h b) and of one layer (q, k, v, attention, MLP sharded), logits. */
    double layer = 2 * 2.0 * (4 * 5120 + (2 * 40 * 128 + 3 * 17408) / 8.0 + 2 * 1 * 128);
    double mem = 4 * P / 8 + 12 * P / 32 + 20000 * (40 * 5120 * 2.0 + layer) + 18992.0 * 19999 * 6 + 1e9;
    CU_ASSERT_CLOSE(e.mem_bytes, mem, 1e-12);
    CU_ASSERT_CLOSE(e.mem_limit, 80e9 * 0.92 - 2e9, 1e-12);
    CU_ASSERT_EQUAL(e.oom, 0);
    /* NULL out is allowed. */
    CU_ASSERT_DOUBLE_EQUAL(pc_train_step(&c, &s, 0, B32, NULL), step, 0);
}

static void test_train_model_size(void)
{
    /* §6.4: the reference's training time ignored the model's size. */
    struct cost_model small, big;
    test_cost_model(&small, "h100", "qwen3-4b");
    test_cost_model(&big, "h100", "qwen3-14b");
    struct train_shape s = {.tp = 8, .pp = 1, .dp = 2, .micro = 1};
    struct train_est es, eb;
    double ts = pc_train_step(&small, &s, 0, B32, &es);
    double tb = pc_train_step(&big, &s, 0, B32, &eb);
    CU_ASSERT(isfinite(ts) && isfinite(tb));
    CU_ASSERT(tb > 2 * ts);
    CU_ASSERT(eb.compute_s > 2.5 * es.compute_s);
    CU_ASSERT(eb.mem_bytes > es.mem_bytes);
}

static void test_train_oom_small_gpu(void)
{
    /* The reference test that fails at HEAD: a 1e8-parameter model on a 2 GB GPU must
     * be OOM. The reference estimated 1.41 GB (Adam at 2 B/param); 16 B/param alone
     * is 1.6 GB, and with activations and workspace it exceeds even the margin-free
     * 0.92 x 2 GB. */
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-4b");
    c.hw.mem_capacity = 2e9;
    c.model = (struct model_profile){.name = "tiny", .family = "qwen3", .n_params = 1e8, .n_active_params = 1e8,
                                     .n_layers = 12, .hidden = 768, .n_heads = 12, .n_kv_heads = 12,
                                     .head_dim = 64, .vocab = 32000, .intermediate = 3072, .dtype_bytes = 2};
    struct train_shape s = {.tp = 1, .pp = 1, .dp = 1, .micro = 1};
    struct train_est e;
    double step = pc_train_step(&c, &s, 0, 8, 8 * 1024.0, 8 * 1024.0 * 1024, 1024, &e);
    CU_ASSERT(isinf(step));
    CU_ASSERT(isinf(e.step_s));
    CU_ASSERT_EQUAL(e.oom, 1);
    CU_ASSERT(e.mem_bytes > 16 * 1e8);
    CU_ASSERT(e.mem_bytes > 0.92 * 2e9);
    CU_ASSERT(e.compute_s > 0); /* the parts stay filled for diagnosis */
}

static void test_train_fit(void)
{
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-14b");
    struct train_est e;
    struct train_shape s = {.tp = 8, .pp = 1, .dp = 4, .micro = 1};
    CU_ASSERT(isfinite(pc_train_step(&c, &s, 0, B32, &e)));
    CU_ASSERT(e.mem_bytes < 40e9 && e.oom == 0);
    /* One GPU holds 16 B x 14.8 B params = 236 GB of state alone. */
    s = (struct train_shape){.tp = 1, .pp = 1, .dp = 1, .micro = 1};
    CU_ASSERT(isinf(pc_train_step(&c, &s, 0, B32, &e)));
    CU_ASSERT(e.oom == 1 && e.mem_bytes > 16 * 14.7e9);
    /* A longer max_len raises activation and logits memory. */
    s = (struct train_shape){.tp = 8, .pp = 1, .dp = 4, .micro = 1};
    struct train_est e20k, e60k;
    pc_train_step(&c, &s, 0, B32, &e20k);
    pc_train_step(&c, &s, 0, 32, 32 * 20000.0, 32 * 4e8, 60000, &e60k);
    CU_ASSERT(e60k.mem_bytes > e20k.mem_bytes);
}

static void test_train_scaling(void)
{
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-14b");
    struct train_est prev, e;
    struct train_shape s = {.tp = 8, .pp = 1, .dp = 1, .micro = 1};
    pc_train_step(&c, &s, 0, B32, &prev);
    for (int dp = 2; dp <= 8; dp *= 2) {
        s.dp = dp;
        double step = pc_train_step(&c, &s, 0, B32, &e);
        CU_ASSERT(e.compute_s < prev.compute_s);
        CU_ASSERT(step < prev.step_s);
        CU_ASSERT(e.dp_comm_s > prev.dp_comm_s);
        CU_ASSERT(e.mem_bytes < prev.mem_bytes); /* optimizer shard */
        prev = e;
    }
    /* Hybrid replicas share the batch and the all-reduce, not the optimizer state. */
    s.dp = 2;
    struct train_est core, hyb;
    pc_train_step(&c, &s, 0, B32, &core);
    pc_train_step(&c, &s, 2, B32, &hyb);
    CU_ASSERT_CLOSE(hyb.compute_s, core.compute_s / 2, 1e-12);
    CU_ASSERT(hyb.dp_comm_s > core.dp_comm_s);
    CU_ASSERT_DOUBLE_EQUAL(hyb.mem_bytes, core.mem_bytes, 0);
    /* The slowest replica's share: 32 sequences over 3 replicas -> 11. */
    s.dp = 3;
    pc_train_step(&c, &s, 0, B32, &e);
    CU_ASSERT_CLOSE(e.compute_s, cost_train_compute_s(&c, 11 * 20000.0, 11 * 4e8) / 8, 1e-12);
}

static void test_train_pipeline(void)
{
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-14b");
    struct train_est flat, pipe, pipe_few;
    struct train_shape s = {.tp = 4, .pp = 1, .dp = 2, .micro = 1};
    pc_train_step(&c, &s, 0, B32, &flat);
    s.pp = 2;
    pc_train_step(&c, &s, 0, B32, &pipe);
    /* Same GPUs per stage-layer: compute halves per GPU; the bubble is
     * (pp - 1) / n_micro of the stage's work plus the boundary sends. */
    CU_ASSERT_CLOSE(pipe.compute_s, flat.compute_s / 2, 1e-12);
    double sends = 2.0 * (16 + 1) * (20000.0 * 5120 * 2 / 25e9 + 1e-5);
    CU_ASSERT_CLOSE(pipe.pp_bubble_s, (pipe.compute_s + pipe.tp_comm_s) / 16 + sends, 1e-12);
    CU_ASSERT(pipe.mem_bytes < flat.mem_bytes);
    /* Bigger micro-batches: fewer of them, a larger bubble fraction. */
    s.micro = 8;
    pc_train_step(&c, &s, 0, B32, &pipe_few);
    CU_ASSERT(pipe_few.pp_bubble_s > pipe.pp_bubble_s);
    CU_ASSERT(pipe_few.mem_bytes > pipe.mem_bytes);
}

/* ---- rollout ---- */

static void test_rollout_hand_value(void)
{
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-14b");
    struct len_profile lp;
    profile_fill(&lp, 1, (struct traj_sample){.prompt = 1000, .gen = 3000, .tool = 400, .turns = 3, .tool_s = 7.5});
    int counts[PC_N_TP] = {1, 0, 0, 0};
    struct rollout_est r;
    double ms = pc_rollout(&c, counts, &lp, &r);
    /* Mid context 1000 + 3400 / 2 = 2700; steady batch min(256, N_1 / 2700) = 89. */
    double ctx = 2700, N = cost_kv_capacity_tokens(&c, 1);
    int B = (int)floor(N / ctx);
    CU_ASSERT_EQUAL(B, 89);
    double thr = B / cost_decode_step_s(&c, 1, B, B * ctx);
    double pf = cost_prefill_s(&c, 1, 1000, 0) + 2 * cost_prefill_s(&c, 1, 200, ctx);
    double tail = 3000 * cost_decode_step_s(&c, 1, 1, ctx) + 7.5;
    CU_ASSERT_CLOSE(r.thru_s, 3000 / thr, 1e-12);
    CU_ASSERT_CLOSE(r.tail_s, tail, 1e-12);
    CU_ASSERT_CLOSE(r.prefill_s, pf, 1e-12);
    CU_ASSERT_CLOSE(ms, fmax(3000 / thr, tail) + pf, 1e-12);
    CU_ASSERT(r.tail_s > r.thru_s); /* one sample: the tail binds */
    CU_ASSERT_EQUAL(r.binding, 0);
    CU_ASSERT_EQUAL(r.oom, 0);
    /* Empty layout: infinite; empty batch: free. */
    int none[PC_N_TP] = {0, 0, 0, 0};
    CU_ASSERT(isinf(pc_rollout(&c, none, &lp, &r)) && r.binding == -1 && r.oom == 0);
    struct len_profile empty = {0, NULL, 1, 0};
    CU_ASSERT_DOUBLE_EQUAL(pc_rollout(&c, counts, &empty, &r), 0, 0);
    CU_ASSERT_EQUAL(r.binding, 0);
    CU_ASSERT_DOUBLE_EQUAL(pc_rollout(&c, counts, &lp, NULL), ms, 0);
    free(lp.s);
}

static void test_rollout_tail(void)
{
    /* §6.3: one long trajectory with slow tools bounds the makespan however many
     * instances there are; the reference's sum(gen) / B̄ would shrink with them. */
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-14b");
    struct len_profile lp;
    profile_fill(&lp, 129, (struct traj_sample){.prompt = 500, .gen = 1500, .tool = 0, .turns = 1, .tool_s = 0});
    lp.s[77] = (struct traj_sample){.prompt = 500, .gen = 30000, .tool = 2000, .turns = 10, .tool_s = 300};
    double ctx = 500 + 32000 / 2.0;
    double tail = 30000 * cost_decode_step_s(&c, 2, 1, ctx) + 300;
    /* a short sample's KV reads, which the long one waits for when they share a batch */
    double kv_short = 1500 * (cost_decode_step_s(&c, 2, 1, 500 + 750) - cost_decode_step_s(&c, 2, 1, 0));
    double prev = INFINITY;
    for (int n = 4; n <= 64; n *= 4) {
        int counts[PC_N_TP] = {0, n, 0, 0};
        struct rollout_est r;
        double ms = pc_rollout(&c, counts, &lp, &r);
        CU_ASSERT(ms >= tail);
        CU_ASSERT(ms <= prev);
        /* the long one's chain, loaded by the short ones placed beside it */
        double k = (r.tail_s - tail) / kv_short;
        CU_ASSERT(r.tail_s >= tail && fabs(k - round(k)) < 1e-6 && k <= 128);
        CU_ASSERT_EQUAL(r.binding, 0); /* longest first: the long one on instance 0 */
        if (n == 64) CU_ASSERT_CLOSE(r.tail_s, tail, 1e-12); /* alone on its instance */
        prev = ms;
    }
    /* One instance holds all: the chain waits for all 128 short ones' KV reads. */
    int one[PC_N_TP] = {0, 1, 0, 0};
    struct rollout_est r1;
    pc_rollout(&c, one, &lp, &r1);
    CU_ASSERT_CLOSE(r1.tail_s, tail + 128 * kv_short, 1e-12);
    /* With 64 instances the long trajectory's own chain is (almost) all of it. */
    CU_ASSERT(prev < 1.05 * tail);
    /* Faster small-batch decode shortens the tail: one TP8 instance takes it. */
    int mixed[PC_N_TP] = {0, 60, 0, 1};
    double tail8 = 30000 * cost_decode_step_s(&c, 8, 1, ctx) + 300;
    double ms8 = pc_rollout(&c, mixed, &lp, NULL);
    CU_ASSERT(ms8 >= tail8 && ms8 < 1.05 * tail8);
    CU_ASSERT(ms8 < 0.75 * prev);
    /* A pipeline overlapping two batches spreads a trajectory's own chain over two
     * step intervals: the tail term halves (and the lower bound follows it). */
    lp.overlap = 2;
    int many[PC_N_TP] = {0, 64, 0, 0};
    struct rollout_est r2;
    pc_rollout(&c, many, &lp, &r2);
    /* alone on its instance, which serves two batches: their long ones share it */
    double kv_long = 30000 * (cost_decode_step_s(&c, 2, 1, ctx) - cost_decode_step_s(&c, 2, 1, 0));
    CU_ASSERT_CLOSE(r2.tail_s, tail / 2 + kv_long / 2, 1e-12);
    CU_ASSERT(pc_rollout_lower_bound(&c, 128, 2, &lp) <= r2.makespan_s);
    free(lp.s);

    /* Placement sees tails too: one TP8 instance (index 0) and one TP1. Work alone
     * (the reference's criterion) would hand the TP1 instance a short sample early,
     * whose batch-1 decode there (4000 x ~18 ms) outlasts everything on the TP8
     * instance; the estimate max(load + w, tail + prefill) keeps them all on TP8. */
    profile_fill(&lp, 21, (struct traj_sample){.prompt = 500, .gen = 4000, .turns = 1});
    lp.s[0].gen = 20000;
    int pair[PC_N_TP] = {1, 0, 0, 1};
    struct rollout_est r;
    double ms = pc_rollout(&c, pair, &lp, &r);
    double short_tail1 = 4000 * cost_decode_step_s(&c, 1, 1, 500 + 2000);
    CU_ASSERT_EQUAL(r.binding, 0);
    CU_ASSERT(ms < short_tail1);
    double kv4000 = 4000 * (cost_decode_step_s(&c, 8, 1, 500 + 2000) - cost_decode_step_s(&c, 8, 1, 0));
    CU_ASSERT_CLOSE(r.tail_s, 20000 * cost_decode_step_s(&c, 8, 1, 500 + 10000) + 20 * kv4000,
                    1e-12);
    free(lp.s);
}

/* The worked example of docs/planner.md ("Rollout"): 256 samples (prompt 1,024, gen
 * 2,000 .. 10,000 evenly, 500 tool tokens over 3 turns, 5 s of tools) and one of 30,000
 * generated tokens on 32 A100s, Qwen3-14B, as 4 x TP8, 8 x TP4, 16 x TP2 and 32 x TP1:
 * contention-free (len_profile.contention_free, the oracle's cost) and as the planner
 * counts it (the KV reads of a batch's other samples in the long one's chain). */
static void test_rollout_worked_example(void)
{
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-14b");
    struct len_profile lp;
    profile_fill(&lp, 257, (struct traj_sample){.prompt = 1024, .tool = 500, .turns = 3, .tool_s = 5});
    for (int i = 0; i < 256; i++) lp.s[i].gen = 2000 + 8000 * i / 255;
    lp.s[256].gen = 30000;
    static const double want_free[4] = {89.5, 158.8, 297.8, 564.1};
    double prev = 0;
    for (int k = 3; k >= 0; k--) {
        int counts[PC_N_TP] = {0};
        counts[k] = 32 / pc_tp_of(k);
        lp.contention_free = 1;
        double free_s = pc_rollout(&c, counts, &lp, NULL);
        lp.contention_free = 0;
        double ms = pc_rollout(&c, counts, &lp, NULL);
        printf("[%d x TP%d: %.1f s contention-free, %.1f s] ", counts[k], pc_tp_of(k), free_s, ms);
        CU_ASSERT(fabs(free_s - want_free[3 - k]) < 0.05);
        CU_ASSERT(ms >= free_s && ms > prev); /* smaller instances: slower still */
        prev = ms;
    }
    free(lp.s);
}

static void test_rollout_instance_memory(void)
{
    /* §6.3: each sample is checked against the instance it lands on. N_1 = 242,949
     * and N_2 = 658,965 tokens on A100 for Qwen3-14B. */
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-14b");
    struct len_profile big, fits, small_batch;
    profile_fill(&big, 4, (struct traj_sample){.prompt = 150000, .gen = 150000, .turns = 1});
    profile_fill(&fits, 4, (struct traj_sample){.prompt = 150000, .gen = 50000, .turns = 1});
    profile_fill(&small_batch, 4, (struct traj_sample){.prompt = 2000, .gen = 2000, .turns = 1});
    int mixed[PC_N_TP] = {8, 1, 0, 0}, tp2[PC_N_TP] = {0, 1, 0, 0}, tp1[PC_N_TP] = {8, 0, 0, 0};
    struct rollout_est rm, r2, r1;
    /* Too big for TP1: all four on the TP2 instance (index 0), as if alone -- without
     * the check the fourth would go to a TP1 instance, whose tail (5,700 s) is below
     * the TP2 instance's load by then (~7,000 s). */
    double ms = pc_rollout(&c, mixed, &big, &rm);
    CU_ASSERT(isfinite(ms));
    CU_ASSERT_DOUBLE_EQUAL(ms, pc_rollout(&c, tp2, &big, &r2), 0);
    CU_ASSERT_EQUAL(rm.binding, 0);
    CU_ASSERT_DOUBLE_EQUAL(rm.thru_s, r2.thru_s, 0);
    /* Control: samples that fit TP1 do spread onto the TP1 instances. */
    CU_ASSERT(pc_rollout(&c, mixed, &fits, NULL) < pc_rollout(&c, tp2, &fits, NULL));
    /* TP1 only: OOM, with the sample's context. */
    CU_ASSERT(isinf(pc_rollout(&c, tp1, &big, &r1)));
    CU_ASSERT_EQUAL(r1.oom, 1);
    CU_ASSERT_EQUAL(r1.oom_tokens, 300000);
    CU_ASSERT(isfinite(pc_rollout(&c, tp1, &fits, NULL)));
    /* An instance whose weights leave no KV room makes the layout infeasible. */
    struct cost_model small = c;
    small.hw.mem_capacity = 30e9; /* 27e9 usable - 29.5e9 of weights at TP1 */
    CU_ASSERT(cost_kv_capacity_tokens(&small, 1) == 0 && cost_kv_capacity_tokens(&small, 2) > 0);
    int with_dead[PC_N_TP] = {1, 1, 0, 0}, alive[PC_N_TP] = {0, 1, 0, 0};
    CU_ASSERT(isinf(pc_rollout(&small, with_dead, &small_batch, &r1)) && r1.oom == 1);
    CU_ASSERT(isfinite(pc_rollout(&small, alive, &small_batch, NULL)));
    free(big.s);
    free(fits.s);
    free(small_batch.s);
}

static int same_est(const struct rollout_est *a, const struct rollout_est *b)
{
    return a->makespan_s == b->makespan_s && a->thru_s == b->thru_s && a->tail_s == b->tail_s &&
           a->prefill_s == b->prefill_s && a->binding == b->binding && a->oom == b->oom;
}

static void test_rollout_order_and_ties(void)
{
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-14b");
    struct len_profile lp;
    int four[PC_N_TP] = {4, 0, 0, 0};
    struct rollout_est r, r5;
    /* Four equal samples on four equal instances: one each, all equal; the binding
     * instance is the lowest index. A fifth doubles instance 0. */
    profile_fill(&lp, 4, (struct traj_sample){.prompt = 300, .gen = 4000, .turns = 1});
    pc_rollout(&c, four, &lp, &r);
    CU_ASSERT_EQUAL(r.binding, 0);
    free(lp.s);
    profile_fill(&lp, 5, (struct traj_sample){.prompt = 300, .gen = 4000, .turns = 1});
    pc_rollout(&c, four, &lp, &r5);
    CU_ASSERT_EQUAL(r5.binding, 0);
    CU_ASSERT(r5.prefill_s > r.prefill_s);
    free(lp.s);
    /* Longest first: the profile's order does not matter, equal-length samples of
     * different shape included. */
    uint64_t seed = 7;
    profile_fill(&lp, 40, (struct traj_sample){0});
    for (int i = 0; i < lp.n; i++) {
        int total = 1000 * rnd_int(&seed, 1, 8);
        int prompt = 100 * rnd_int(&seed, 1, 5);
        int tool = 100 * rnd_int(&seed, 0, 3);
        lp.s[i] = (struct traj_sample){.prompt = prompt, .gen = total - prompt - tool, .tool = tool,
                                       .turns = 1 + tool / 100, .tool_s = 0.5 * rnd_int(&seed, 0, 4)};
    }
    int layout[PC_N_TP] = {3, 2, 1, 0};
    struct rollout_est a, b;
    pc_rollout(&c, layout, &lp, &a);
    for (int rep = 0; rep < 5; rep++) {
        for (int i = lp.n - 1; i > 0; i--) {
            int j = rnd_int(&seed, 0, i);
            struct traj_sample tmp = lp.s[i];
            lp.s[i] = lp.s[j];
            lp.s[j] = tmp;
        }
        pc_rollout(&c, layout, &lp, &b);
        CU_ASSERT(same_est(&a, &b));
    }
    free(lp.s);
    /* Longest first onto the earliest finish: the long one alone on instance 0, the
     * short ones on instance 1 while it is not later than instance 0. */
    profile_fill(&lp, 4, (struct traj_sample){.prompt = 100, .gen = 500, .turns = 1});
    lp.s[3] = (struct traj_sample){.prompt = 100, .gen = 20000, .turns = 1};
    int two[PC_N_TP] = {2, 0, 0, 0};
    struct len_profile alone = {1, &lp.s[3], 1, 0};
    int one[PC_N_TP] = {1, 0, 0, 0};
    pc_rollout(&c, two, &lp, &r);
    CU_ASSERT_EQUAL(r.binding, 0);
    CU_ASSERT_DOUBLE_EQUAL(r.tail_s, 20000 * cost_decode_step_s(&c, 1, 1, 100 + 10000), 0);
    CU_ASSERT(r.makespan_s <= pc_rollout(&c, one, &alone, NULL) * (1 + 1e-12));
    free(lp.s);
}

/* A random batch: lengths spread over two orders of magnitude, a few long ones. */
static void random_profile(struct len_profile *lp, uint64_t *seed, int n)
{
    profile_fill(lp, n, (struct traj_sample){0});
    for (int i = 0; i < n; i++) {
        int longer = rnd_int(seed, 0, 9) == 0;
        int turns = rnd_int(seed, 1, 6);
        lp->s[i] = (struct traj_sample){.prompt = rnd_int(seed, 50, 3000),
                                        .gen = rnd_int(seed, 10, longer ? 60000 : 4000),
                                        .tool = turns > 1 ? rnd_int(seed, 0, 3000) : 0,
                                        .turns = turns,
                                        .tool_s = turns > 1 ? 0.01 * rnd_int(seed, 0, 2000) : 0};
    }
}

static void test_rollout_lower_bound(void)
{
    static const char *models[] = {"qwen3-4b", "qwen3-14b", "qwen3-30b-a3b"};
    static const char *hws[] = {"a100", "h100", "h200"};
    uint64_t seed = 12345;
    int checked = 0;
    for (int trial = 0; trial < 240; trial++) {
        struct cost_model c;
        test_cost_model(&c, hws[trial % 3], models[(trial / 3) % 3]);
        struct len_profile lp;
        random_profile(&lp, &seed, rnd_int(&seed, 1, 48));
        int max_k = rnd_int(&seed, 0, PC_N_TP - 1);
        int counts[PC_N_TP] = {0, 0, 0, 0}, gpus = 0;
        int n_inst = rnd_int(&seed, 1, 12);
        for (int i = 0; i < n_inst; i++) {
            int k = rnd_int(&seed, 0, max_k);
            counts[k]++;
            gpus += pc_tp_of(k);
        }
        int n_gpus = gpus + rnd_int(&seed, 0, 3); /* layouts may leave GPUs idle */
        double lb = pc_rollout_lower_bound(&c, n_gpus, pc_tp_of(max_k), &lp);
        struct rollout_est est;
        double ms = pc_rollout(&c, counts, &lp, &est);
        if (!(lb <= ms))
            fprintf(stderr, "\n  trial %d: lower bound %.9g > makespan %.9g\n", trial, lb, ms);
        CU_ASSERT(lb <= ms);
        /* the chain's floor holds for every layout of those classes, and the chain
         * (the largest tail) is part of the makespan */
        struct pc_rollout_prep *prep = pc_rollout_prepare(&c, &lp);
        double chain_lb = pc_chain_lower_bound_prepared(prep, pc_tp_of(max_k));
        pc_rollout_prep_free(prep);
        if (isfinite(ms)) {
            CU_ASSERT(chain_lb <= est.chain_s && chain_lb > 0);
            CU_ASSERT(est.chain_s <= ms);
        }
        CU_ASSERT(lb > 0);
        checked += isfinite(ms);
        free(lp.s);
    }
    CU_ASSERT(checked > 200); /* most layouts are feasible, so the bound was tested */
    /* The bound is not vacuous: one TP8 instance on 8 GPUs, many equal samples. */
    struct cost_model c;
    test_cost_model(&c, "h100", "qwen3-14b");
    struct len_profile lp;
    profile_fill(&lp, 512, (struct traj_sample){.prompt = 1000, .gen = 2000, .turns = 1});
    int tp8[PC_N_TP] = {0, 0, 0, 1};
    double ms = pc_rollout(&c, tp8, &lp, NULL), lb = pc_rollout_lower_bound(&c, 8, 8, &lp);
    CU_ASSERT(lb <= ms && lb > 0.75 * ms); /* 24.4 s against 29.4 s */
    /* equal samples on one class: the chain floor is one sample's own chain, and the
     * chain adds the KV reads of the 511 that share its batch */
    struct rollout_est e8;
    pc_rollout(&c, tp8, &lp, &e8);
    struct pc_rollout_prep *p8 = pc_rollout_prepare(&c, &lp);
    double own = 2000 * cost_decode_step_s(&c, 8, 1, 2000);
    double kv1 = 2000 * (cost_decode_step_s(&c, 8, 1, 2000) - cost_decode_step_s(&c, 8, 1, 0));
    CU_ASSERT_DOUBLE_EQUAL(pc_chain_lower_bound_prepared(p8, 8), own, 1e-9 * own);
    CU_ASSERT_DOUBLE_EQUAL(e8.chain_s, own + 511 * kv1, 1e-9 * e8.chain_s);
    pc_rollout_prep_free(p8);
    /* Infeasible for every layout: a sample larger than any allowed instance holds
     * (N_4 = 1.49M, N_8 = 3.16M tokens). */
    lp.s[0].gen = 2000000;
    CU_ASSERT(isinf(pc_rollout_lower_bound(&c, 16, 4, &lp)));
    CU_ASSERT(isfinite(pc_rollout_lower_bound(&c, 16, 8, &lp)));
    /* A TP8 instance needs 8 GPUs. */
    CU_ASSERT(isinf(pc_rollout_lower_bound(&c, 4, 8, &lp)));
    CU_ASSERT(isinf(pc_rollout_lower_bound(&c, 0, 8, &lp)));
    struct len_profile empty = {0, NULL, 1, 0};
    CU_ASSERT_DOUBLE_EQUAL(pc_rollout_lower_bound(&c, 8, 8, &empty), 0, 0);
    free(lp.s);
}

/* ---- the placement against a direct scan ---- */

/* The rollout model of docs/planner.md written out plainly: per-sample costs from the
 * cost.h primitives, samples longest first (equal totals by content), each scanned
 * over every instance: per class the least-loaded one (lowest index on equal loads),
 * across classes the smallest estimate (lowest index on ties). O(n I). Fills the
 * makespan, binding instance and chain. */
struct ref_sample {
    double tokens, prompt, gen, tool, tool_s, mid;
    int turns;
};

static int ref_cmp(const void *pa, const void *pb)
{
    const struct ref_sample *a = pa, *b = pb;
    const double ka[] = {a->tokens, a->gen, a->prompt, a->tool, a->turns, a->tool_s};
    const double kb[] = {b->tokens, b->gen, b->prompt, b->tool, b->turns, b->tool_s};
    for (int i = 0; i < 6; i++)
        if (ka[i] != kb[i]) return ka[i] > kb[i] ? -1 : 1;
    return 0;
}

static double ref_rollout(const struct cost_model *c, const int counts[PC_N_TP],
                          const struct len_profile *lp, int *binding, double *chain_s)
{
    int n = lp->n, n_inst = 0, base[PC_N_TP];
    for (int k = PC_N_TP - 1; k >= 0; k--) {
        base[k] = n_inst;
        n_inst += counts[k];
    }
    struct ref_sample *v = calloc((size_t)n, sizeof *v);
    double *load = calloc((size_t)n_inst, sizeof *load), *gen = calloc((size_t)n_inst, sizeof *gen);
    double *tail = calloc((size_t)n_inst, sizeof *tail), *pre = calloc((size_t)n_inst, sizeof *pre);
    double *kv = calloc((size_t)n_inst, sizeof *kv), *tkv = calloc((size_t)n_inst, sizeof *tkv);
    CU_ASSERT_FATAL(v && load && gen && tail && pre && kv && tkv);
    double sum = 0, o = lp->overlap > 1 ? lp->overlap : 1;
    for (int i = 0; i < n; i++) {
        const struct traj_sample *s = &lp->s[i];
        v[i] = (struct ref_sample){.prompt = s->prompt, .gen = s->gen, .tool = s->tool,
                                   .tool_s = s->tool_s, .turns = s->turns > 1 ? s->turns : 1};
        v[i].tokens = v[i].prompt + v[i].gen + v[i].tool;
        v[i].mid = v[i].prompt + (v[i].gen + v[i].tool) / 2.0;
        sum += v[i].mid;
    }
    double mean = sum / n, cap[PC_N_TP], thr[PC_N_TP];
    for (int k = 0; k < PC_N_TP; k++) {
        int t = pc_tp_of(k);
        cap[k] = cost_kv_capacity_tokens(c, t);
        int B = (int)fmin(256, fmax(1.0, floor(cap[k] / mean)));
        thr[k] = B / cost_decode_step_s(c, t, B, B * mean);
    }
    qsort(v, (size_t)n, sizeof *v, ref_cmp);
    for (int j = 0; j < n; j++) {
        int bi = -1, bk = -1;
        double bkey = INFINITY, bw = 0, bpf = 0, btl = 0, bkv = 0;
        for (int k = PC_N_TP - 1; k >= 0; k--) {
            if (counts[k] == 0 || v[j].tokens > cap[k]) continue;
            int t = pc_tp_of(k), i = base[k];
            for (int x = base[k] + 1; x < base[k] + counts[k]; x++)
                if (load[x] < load[i]) i = x;
            double pf = cost_prefill_s(c, t, v[j].prompt, 0);
            if (v[j].tool > 0) {
                double calls = v[j].turns > 1 ? v[j].turns - 1.0 : 1.0;
                pf += calls * cost_prefill_s(c, t, v[j].tool / calls, v[j].mid);
            }
            double tl = (v[j].gen * cost_decode_step_s(c, t, 1, v[j].mid) + v[j].tool_s) / o;
            double w = v[j].gen / thr[k] + pf;
            double kvs = v[j].gen * (cost_decode_step_s(c, t, 1, v[j].mid) -
                                     cost_decode_step_s(c, t, 1, 0));
            double key = fmax(load[i] + w, tl + pf);
            if (bi < 0 || key < bkey || (key == bkey && i < bi)) {
                bi = i;
                bk = k;
                bkey = key;
                bw = w;
                bpf = pf;
                btl = tl;
                bkv = kvs > 0 ? kvs : 0;
            }
        }
        CU_ASSERT_FATAL(bi >= 0);
        (void)bk;
        load[bi] += bw;
        gen[bi] += v[j].gen;
        pre[bi] += bpf;
        kv[bi] += bkv;
        if (btl > tail[bi]) tail[bi] = btl, tkv[bi] = bkv;
    }
    double worst = -1;
    *chain_s = 0;
    for (int k = PC_N_TP - 1; k >= 0; k--)
        for (int i = base[k]; i < base[k] + counts[k]; i++) {
            double loaded = tail[i] + kv[i] - tkv[i] / o; /* the batch's KV reads */
            double ms = fmax(gen[i] / thr[k], loaded) + pre[i];
            *chain_s = fmax(*chain_s, loaded);
            if (ms > worst) {
                worst = ms;
                *binding = i;
            }
        }
    free(v);
    free(load);
    free(gen);
    free(tail);
    free(pre);
    free(kv);
    free(tkv);
    return worst;
}

static void test_rollout_direct_scan(void)
{
    /* Random batches with many repeated samples (so equal loads and equal estimates,
     * the tie-breaks, are common) on random layouts of every class mix, up to 300
     * instances of a class (the tree's padding and depth vary). */
    static const char *models[] = {"qwen3-4b", "qwen3-14b"};
    uint64_t seed = 2024;
    int compared = 0;
    for (int trial = 0; trial < 60; trial++) {
        struct cost_model c;
        test_cost_model(&c, trial % 2 ? "h100" : "a100", models[(trial / 2) % 2]);
        struct len_profile lp;
        int distinct = rnd_int(&seed, 1, 12), n = rnd_int(&seed, 1, 400);
        struct len_profile kinds;
        random_profile(&kinds, &seed, distinct);
        profile_fill(&lp, n, (struct traj_sample){0});
        lp.overlap = 1 + trial % 3;
        for (int i = 0; i < n; i++) lp.s[i] = kinds.s[rnd_int(&seed, 0, distinct - 1)];
        free(kinds.s);
        int counts[PC_N_TP];
        for (int k = 0; k < PC_N_TP; k++)
            counts[k] = rnd_int(&seed, 0, 3) == 0 ? 0 : rnd_int(&seed, 1, trial % 4 == 0 ? 300 : 9);
        if (counts[0] + counts[1] + counts[2] + counts[3] == 0) counts[3] = 1;
        struct rollout_est est;
        double ms = pc_rollout(&c, counts, &lp, &est);
        if (!isfinite(ms)) { /* a sample fits no instance: nothing placed */
            free(lp.s);
            continue;
        }
        int binding = -1;
        double chain, ref = ref_rollout(&c, counts, &lp, &binding, &chain);
        if (!(fabs(ms - ref) <= 1e-9 * ref) || est.binding != binding)
            fprintf(stderr, "\n  trial %d: makespan %.12g (instance %d), direct scan %.12g (%d)\n",
                    trial, ms, est.binding, ref, binding);
        CU_ASSERT_DOUBLE_EQUAL(ms, ref, 1e-9 * ref);
        CU_ASSERT_DOUBLE_EQUAL(est.chain_s, chain, 1e-9 * chain);
        CU_ASSERT_EQUAL(est.binding, binding);
        compared++;
        free(lp.s);
    }
    CU_ASSERT(compared > 40);
}

/* The cutoff evaluator on random layouts and cutoffs around the full makespan (below,
 * equal, just above, far off): either it returns bitwise the full result (which is then
 * <= the cutoff, or infinite) with cut = 0, or it says cut only when the full result
 * is above the cutoff, returning a value in (cutoff, full]. If this fails, the
 * search's local moves may drop a layout that would have won. */
static void test_rollout_cutoff(void)
{
    static const char *models[] = {"qwen3-4b", "qwen3-14b", "qwen3-30b-a3b"};
    uint64_t seed = 777;
    int exact = 0, cut = 0;
    for (int trial = 0; trial < 200; trial++) {
        struct cost_model c;
        test_cost_model(&c, trial % 2 ? "h100" : "a100", models[(trial / 2) % 3]);
        struct len_profile lp;
        random_profile(&lp, &seed, rnd_int(&seed, 1, 300));
        lp.overlap = 1 + trial % 3;
        int counts[PC_N_TP];
        for (int k = 0; k < PC_N_TP; k++)
            counts[k] = rnd_int(&seed, 0, 2) == 0 ? 0 : rnd_int(&seed, 1, trial % 5 == 0 ? 120 : 8);
        struct pc_rollout_prep *prep = pc_rollout_prepare(&c, &lp);
        struct rollout_est full;
        double ms = pc_rollout_prepared(prep, counts, &full);
        double base = isfinite(ms) ? ms : 100.0;
        const double cutoffs[] = {base, nextafter(base, INFINITY), nextafter(base, 0),
                                  base * 0.999, base * 0.5, base * 0.01, 0, base * 1.5, INFINITY};
        for (size_t i = 0; i < sizeof cutoffs / sizeof cutoffs[0]; i++) {
            struct rollout_est e;
            double v = pc_rollout_prepared_cutoff(prep, counts, cutoffs[i], &e);
            if (e.cut) {
                CU_ASSERT(v > cutoffs[i] && v <= ms);
                CU_ASSERT(ms > cutoffs[i]);
                cut++;
            } else {
                /* not cut: bitwise the full result, every field */
                CU_ASSERT(memcmp(&v, &ms, sizeof v) == 0);
                const double got[] = {e.makespan_s, e.thru_s, e.tail_s, e.prefill_s, e.chain_s};
                const double want[] = {full.makespan_s, full.thru_s, full.tail_s, full.prefill_s,
                                       full.chain_s};
                CU_ASSERT(memcmp(got, want, sizeof got) == 0);
                CU_ASSERT(e.binding == full.binding && e.oom == full.oom && e.cut == 0);
                CU_ASSERT(!(ms > cutoffs[i]) || isinf(ms));
                exact++;
            }
        }
        pc_rollout_prep_free(prep);
        free(lp.s);
    }
    CU_ASSERT(exact > 400 && cut > 400);
}

/* The tournament tree's root is the (load, index) minimum after every raise, equal
 * loads included, for sizes that are and are not powers of two. */
static void test_load_tree(void)
{
    uint64_t seed = 5;
    for (int n = 1; n <= 70; n++) {
        struct load_node *nodes = calloc(load_tree_nodes(n), sizeof *nodes);
        double *load = calloc((size_t)n, sizeof *load);
        CU_ASSERT_FATAL(nodes && load);
        int first = 3 * n; /* trees of later classes start at a later index */
        struct load_tree t;
        load_tree_init(&t, nodes, n, first);
        for (int step = 0; step < 400; step++) {
            int want = 0;
            for (int i = 1; i < n; i++)
                if (load[i] < load[want]) want = i;
            double got_load;
            int got = load_tree_min(&t, &got_load);
            CU_ASSERT_EQUAL(got, first + want);
            CU_ASSERT_EQUAL(got_load, load[want]);
            if (got != first + want) break;
            /* small integer steps: many loads tie */
            load[want] += rnd_int(&seed, 0, 3);
            load_tree_raise_min(&t, first, load[want]);
        }
        free(nodes);
        free(load);
    }
}

static void test_rollout_large(void)
{
    /* The search's size: 1000 samples on 1000 instances, all classes. */
    struct cost_model c;
    test_cost_model(&c, "h100", "qwen3-4b");
    uint64_t seed = 99;
    struct len_profile lp;
    random_profile(&lp, &seed, 1000);
    int counts[PC_N_TP] = {400, 300, 200, 100};
    struct rollout_est r;
    double ms = pc_rollout(&c, counts, &lp, &r);
    CU_ASSERT(isfinite(ms) && ms > 0);
    CU_ASSERT(r.binding >= 0 && r.binding < 1000);
    CU_ASSERT(ms >= pc_rollout_lower_bound(&c, 400 + 600 + 800 + 800, 8, &lp));
    free(lp.s);
}

/* ---- transitions ---- */

static void test_transition(void)
{
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-14b");
    const double P = 14.7683072e9;
    struct transition t = {.dp_after = 4, .rollout_gpus_after = 16, .resplit_s = 0.25};
    CU_ASSERT_DOUBLE_EQUAL(pc_transition_s(&c, &t), 0.25, 0);
    /* Weights to new rollout ranks: one broadcast. */
    t.to_rollout = 8;
    CU_ASSERT_CLOSE(pc_transition_s(&c, &t), 0.25 + cost_weight_sync_s(&c), 1e-12);
    /* New core training ranks: weights + 1/dp of the fp32 state, the slowest wins. */
    t.to_train = 8;
    double train = (2 * P + 12 * P / 4) / 25e9 + 1e-5;
    CU_ASSERT_CLOSE(pc_transition_s(&c, &t), 0.25 + train, 1e-12);
    t.to_rollout = t.to_train = 0;
    t.to_hybrid = 8;
    CU_ASSERT_CLOSE(pc_transition_s(&c, &t), 0.25 + pc_join_fetch_s(&c, 4), 1e-12);
    /* Lent replica: weights + 1/(dp + 1) of the state. */
    CU_ASSERT_CLOSE(pc_join_fetch_s(&c, 4), (2 * P + 12 * P / 5) / 25e9 + 1e-5, 1e-12);
    CU_ASSERT(pc_join_fetch_s(&c, 8) < pc_join_fetch_s(&c, 4));
    CU_ASSERT_DOUBLE_EQUAL(pc_join_fetch_s(&c, 0), pc_join_fetch_s(&c, 1), 0);
    /* Lost KV: re-prefilled over the rollout GPUs, increasing in the tokens. */
    t.to_hybrid = 0;
    double prev = pc_transition_s(&c, &t);
    for (double kv = 1000; kv < 1e7; kv *= 3) {
        t.kv_lost_tokens = kv;
        double cost = pc_transition_s(&c, &t);
        CU_ASSERT(cost > prev);
        prev = cost;
    }
    t.kv_lost_tokens = 4096;
    CU_ASSERT_CLOSE(pc_transition_s(&c, &t), 0.25 + cost_prefill_s(&c, 1, 4096, 0) / 16, 1e-12);
    t.kv_lost_tokens = 8192 * 10;
    CU_ASSERT_CLOSE(pc_transition_s(&c, &t), 0.25 + 10 * cost_prefill_s(&c, 1, 8192, 0) / 16, 1e-12);
    double sixteen = pc_transition_s(&c, &t);
    t.rollout_gpus_after = 32;
    CU_ASSERT(pc_transition_s(&c, &t) < sixteen);
    t.rollout_gpus_after = 0; /* no rollout GPU left: one GPU's worth, not a division by 0 */
    CU_ASSERT(isfinite(pc_transition_s(&c, &t)));
}

static const struct test_case worked_cases[] = {
    {"reference §1.2 recomputed per GPU", test_worked_example},
    {NULL, NULL},
};

static const struct test_case train_cases[] = {
    {"log-prob logits bytes", test_logits_bytes},
    {"hand value: 14B TP8 DP4", test_train_hand_value},
    {"larger model is slower (§6.4)", test_train_model_size},
    {"1e8 params on 2 GB is OOM", test_train_oom_small_gpu},
    {"14B fits at TP8 DP4, not on one GPU", test_train_fit},
    {"DP and hybrid scaling", test_train_scaling},
    {"pipeline bubble and sends", test_train_pipeline},
    {NULL, NULL},
};

static const struct test_case rollout_cases[] = {
    {"hand value: one sample, one instance", test_rollout_hand_value},
    {"tail-aware makespan (§6.3)", test_rollout_tail},
    {"the worked example: TP classes, with and without the batch's KV reads", test_rollout_worked_example},
    {"per-instance KV memory check", test_rollout_instance_memory},
    {"longest first, ties, order independence", test_rollout_order_and_ties},
    {"lower bound holds on random layouts", test_rollout_lower_bound},
    {"placement equals a direct scan, repeats included", test_rollout_direct_scan},
    {"cutoff: the full value, or above the cutoff", test_rollout_cutoff},
    {"tournament tree gives the least-loaded instance", test_load_tree},
    {"1000 samples on 1000 instances", test_rollout_large},
    {NULL, NULL},
};

static const struct test_case transition_cases[] = {
    {"transition and join costs", test_transition},
    {NULL, NULL},
};

int main(void)
{
    static const struct test_suite suites[] = {
        {"plan_cost_worked", worked_cases},
        {"plan_cost_train", train_cases},
        {"plan_cost_rollout", rollout_cases},
        {"plan_cost_transition", transition_cases},
        {NULL, NULL},
    };
    return test_main(suites);
}
