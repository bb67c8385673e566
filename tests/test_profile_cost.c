/*
 * Tests of the hardware / model profiles and the cost model (src/emu/profile.c,
 * src/emu/cost.c): the shipped profiles load with their datasheet / config.json
 * numbers, broken files give file:line: key: messages, and the cost formulas match
 * hand-computed values and the TP scaling the reference got wrong (planner.md §6.1).
 * Broken files are written at run time into a scratch directory, one per case.
 */
#define _POSIX_C_SOURCE 200809L /* fmemopen */
#include "libra/cost.h"
#include "libra/profile.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>


/* ---- profiles ---- */

static void test_hardware_numbers(void)
{
    static const struct {
        const char *file;
        double flops, bw, cap, nvlink, net;
    } want[] = {
        {"a800", 312e12, 2.039e12, 80e9, 200e9, 25e9},
        {"a100", 312e12, 2.039e12, 80e9, 300e9, 25e9},
        {"h100", 989e12, 3.35e12, 80e9, 450e9, 50e9},
        {"h200", 989e12, 4.8e12, 141e9, 450e9, 50e9},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        struct hw_profile hw;
        char path[128], err[1024];
        snprintf(path, sizeof path, "inputs/hardware/%s.cfg", want[i].file);
        CU_ASSERT_FATAL(profile_load_hw(test_path(path), &hw, err, sizeof err) == 0);
        CU_ASSERT_DOUBLE_EQUAL(hw.flops_peak, want[i].flops, 1);
        CU_ASSERT_DOUBLE_EQUAL(hw.mem_bw, want[i].bw, 1);
        CU_ASSERT_DOUBLE_EQUAL(hw.mem_capacity, want[i].cap, 1);
        CU_ASSERT_DOUBLE_EQUAL(hw.bw_intra_node, want[i].nvlink, 1);
        CU_ASSERT_DOUBLE_EQUAL(hw.bw_inter_node, want[i].net, 1);
        CU_ASSERT_EQUAL(hw.gpus_per_node, 8);
        CU_ASSERT(hw.latency_intra_s > 0 && hw.latency_intra_s < 1e-4);
        CU_ASSERT(strncmp(hw.name, want[i].file, 4) == 0);
    }
}

static void test_model_numbers(void)
{
    static const struct {
        const char *file;
        double p, pa;
        int layers, hidden, heads, kv, inter, experts, active;
    } want[] = {
        {"qwen3-4b", 4.022468096e9, 4.022468096e9, 36, 2560, 32, 8, 9728, 0, 0},
        {"qwen3-14b", 14.7683072e9, 14.7683072e9, 40, 5120, 40, 8, 17408, 0, 0},
        {"qwen3-30b-a3b", 30.532122624e9, 3.353032704e9, 48, 2048, 32, 4, 768, 128, 8},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        struct model_profile m;
        char path[128], err[1024];
        snprintf(path, sizeof path, "inputs/models/%s.cfg", want[i].file);
        CU_ASSERT_FATAL(profile_load_model(test_path(path), &m, err, sizeof err) == 0);
        CU_ASSERT_STRING_EQUAL(m.name, want[i].file);
        CU_ASSERT_DOUBLE_EQUAL(m.n_params, want[i].p, 1);
        CU_ASSERT_DOUBLE_EQUAL(m.n_active_params, want[i].pa, 1);
        CU_ASSERT_EQUAL(m.n_layers, want[i].layers);
        CU_ASSERT_EQUAL(m.hidden, want[i].hidden);
        CU_ASSERT_EQUAL(m.n_heads, want[i].heads);
        CU_ASSERT_EQUAL(m.n_kv_heads, want[i].kv);
        CU_ASSERT_EQUAL(m.head_dim, 128); /* all three: the reference's 80 and 64 were wrong */
        CU_ASSERT_EQUAL(m.vocab, 151936);
        CU_ASSERT_EQUAL(m.intermediate, want[i].inter);
        CU_ASSERT_EQUAL(m.n_experts, want[i].experts);
        CU_ASSERT_EQUAL(m.n_active_experts, want[i].active);
        CU_ASSERT_EQUAL(m.dtype_bytes, 2);
    }
}

static void test_print(void)
{
    struct cost_model c;
    test_cost_model(&c, "h200", "qwen3-30b-a3b");
    char buf[4096];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    CU_ASSERT_FATAL(f != NULL);
    profile_print_hw(&c.hw, f);
    profile_print_model(&c.model, f);
    fclose(f);
    CU_ASSERT(strstr(buf, "h200-141gb-sxm") != NULL);
    CU_ASSERT(strstr(buf, "n_active_experts") != NULL);
}

/* ---- broken profiles ---- */

static const char hw_ok[] =
    "hardware = {\n"
    "  name = \"x\";\n"
    "  flops_peak = 312e12;\n"
    "  mem_bw = 2.0e12;\n"
    "  mem_capacity = 80e9;\n"
    "  bw_intra_node = 300e9;\n"
    "  bw_inter_node = 25e9;\n"
    "  gpus_per_node = 8;\n"
    "  latency_intra_s = 5e-6;\n"
    "  latency_inter_s = 1e-5;\n"
    "};\n";

static const char model_ok[] =
    "model = {\n"
    "  name = \"m\";\n"
    "  family = \"qwen3\";\n"
    "  n_params = 14.7683072e9;\n"
    "  n_active_params = 14.7683072e9;\n"
    "  n_layers = 40;\n"
    "  hidden = 5120;\n"
    "  n_heads = 40;\n"
    "  n_kv_heads = 8;\n"
    "  head_dim = 128;\n"
    "  vocab = 151936;\n"
    "  intermediate = 17408;\n"
    "  n_experts = 0;\n"
    "  n_active_experts = 0;\n"
    "  dtype_bytes = 2;\n"
    "};\n";

struct bad_case {
    int model;         /* 0: hardware file, 1: model file */
    const char *key;   /* line to replace (NULL: append repl) */
    const char *repl;  /* replacement line(s) */
    const char *want;  /* expected substring of the message, after "path:" */
};

static const struct bad_case bad_cases[] = {
    {0, NULL, "  flops = 1e12;\n", "11: flops: unknown key (known keys: name, flops_peak"},
    {0, "mem_bw", "", "1: mem_bw: missing (every key is required"},
    {0, "gpus_per_node", "  gpus_per_node = \"8\";\n", "8: gpus_per_node: is a string, expected a number"},
    {0, "gpus_per_node", "  gpus_per_node = 65;\n", "8: gpus_per_node: 65 is out of range, must be in [1, 64]"},
    {0, "gpus_per_node", "  gpus_per_node = 8.0;\n", "8: gpus_per_node: 8 must be an integer"},
    {0, "mem_bw", "  mem_bw = 0;\n", "4: mem_bw: 0 is out of range, must be in (1e+09"},
    {0, "mem_capacity", "  mem_capacity = 80;\n", "5: mem_capacity: 80 is out of range"},
    {0, "bw_inter_node", "  bw_inter_node = 400e9;\n", "7: bw_inter_node: 4e+11 B/s exceeds bw_intra_node"},
    {0, "name", "  name = \"a-name-that-is-far-too-long-for-the-field\";\n", "2: name: \"a-name-that"},
    {0, "name", "  name = 3;\n", "2: name: is an integer, expected a string"},
    {0, "latency_inter_s", "  latency_inter_s = = 1e-5;\n", "10: cannot parse: syntax error (libconfig syntax"},
    {1, "n_kv_heads", "  n_kv_heads = 6;\n", "9: n_kv_heads: 6 does not divide n_heads = 40"},
    {1, "dtype_bytes", "  dtype_bytes = 3;\n", "15: dtype_bytes: 3 is not a weight type"},
    {1, "dtype_bytes", "  dtype_bytes = 8;\n", "15: dtype_bytes: 8 is out of range, must be in [1, 4]"},
    {1, "n_active_params", "  n_active_params = 20e9;\n", "5: n_active_params: 2e+10 exceeds n_params"},
    {1, "n_active_params", "  n_active_params = 3e9;\n", "5: n_active_params: 3e+09 differs from n_params"},
    {1, "n_experts", "  n_experts = 8;\n", "13: n_experts: family qwen3 is dense"},
    {1, "family", "  family = \"gpt\";\n", "3: family: \"gpt\" is not supported"},
    {1, "n_params", "  n_params = 14.77e8;\n", "4: n_params: 1.477e+09 is implausible for these shapes"},
    {1, NULL, "  tie_word_embeddings = true;\n", "16: tie_word_embeddings: unknown key"},
};

static const char moe_ok[] =
    "model = {\n"
    "  name = \"moe\";\n"
    "  family = \"qwen3_moe\";\n"
    "  n_params = 30.532122624e9;\n"
    "  n_active_params = 3.353032704e9;\n"
    "  n_layers = 48;\n"
    "  hidden = 2048;\n"
    "  n_heads = 32;\n"
    "  n_kv_heads = 4;\n"
    "  head_dim = 128;\n"
    "  vocab = 151936;\n"
    "  intermediate = 768;\n"
    "  n_experts = 128;\n"
    "  n_active_experts = 8;\n"
    "  dtype_bytes = 2;\n"
    "};\n";

static const struct bad_case moe_cases[] = {
    {1, "n_active_experts", "  n_active_experts = 130;\n", "14: n_active_experts: 130 must be in [1, n_experts = 128]"},
    {1, "n_active_experts", "  n_active_experts = 0;\n", "14: n_active_experts: 0 must be in [1, n_experts = 128]"},
    {1, "n_experts", "  n_experts = 1;\n", "13: n_experts: 1: a qwen3_moe model has at least 2"},
    {1, "n_active_params", "  n_active_params = 33.5e9;\n", "exceeds n_params"},
    {1, "n_active_params", "  n_active_params = 0.3e9;\n", "5: n_active_params: 3e+08 is implausible"},
};

static void check_case(const char *base, const struct bad_case *c, int idx)
{
    char text[4096], err[1024], name[32];
    test_edit_config(text, sizeof text, base, c->key, c->repl);
    snprintf(name, sizeof name, "bad%d-%d", c->model, idx);
    const char *path = test_write_file("profiles", name, text);
    union {
        struct hw_profile hw;
        struct model_profile m;
    } u;
    int rc = c->model ? profile_load_model(path, &u.m, err, sizeof err) : profile_load_hw(path, &u.hw, err, sizeof err);
    CU_ASSERT(rc == -1);
    int ok = strncmp(err, path, strlen(path)) == 0 && strstr(err, c->want) != NULL;
    if (!ok) fprintf(stderr, "\n  case %d: want \"%s\"\n  got  \"%s\"\n", idx, c->want, err);
    CU_ASSERT(ok);
}

static void test_bad_profiles(void)
{
    char err[1024];
    struct hw_profile hw;
    struct model_profile m;
    /* The unedited bases load, so each case fails for its own edit only. */
    CU_ASSERT_FATAL(profile_load_hw(test_write_file("profiles", "hw_ok", hw_ok), &hw, err, sizeof err) == 0);
    CU_ASSERT_FATAL(profile_load_model(test_write_file("profiles", "model_ok", model_ok), &m, err, sizeof err) == 0);
    CU_ASSERT_FATAL(profile_load_model(test_write_file("profiles", "moe_ok", moe_ok), &m, err, sizeof err) == 0);
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++)
        check_case(bad_cases[i].model ? model_ok : hw_ok, &bad_cases[i], (int)i);
    for (size_t i = 0; i < sizeof moe_cases / sizeof moe_cases[0]; i++)
        check_case(moe_ok, &moe_cases[i], 100 + (int)i);
}

static void test_bad_files(void)
{
    char err[1024];
    struct hw_profile hw;
    struct model_profile m;
    CU_ASSERT(profile_load_hw("/nonexistent/a800.cfg", &hw, err, sizeof err) == -1);
    CU_ASSERT_STRING_EQUAL(err, "/nonexistent/a800.cfg: cannot read: No such file or directory");
    /* A model file given where a hardware file is expected. */
    CU_ASSERT(profile_load_hw(test_path("inputs/models/qwen3-4b.cfg"), &hw, err, sizeof err) == -1);
    CU_ASSERT(strstr(err, ": model: unknown top-level setting (this file holds one group: hardware") != NULL);
    CU_ASSERT(profile_load_model(test_write_file("profiles", "empty", "# nothing\n"), &m, err, sizeof err) == -1);
    CU_ASSERT(strstr(err, ":1: model: missing group") != NULL);
    CU_ASSERT(profile_load_model(test_write_file("profiles", "notgroup", "model = 3;\n"), &m, err, sizeof err) == -1);
    CU_ASSERT(strstr(err, ":1: model: is an integer, expected a group") != NULL);
}

/* ---- cost model ---- */

static void test_kv_bytes(void)
{
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-14b");
    CU_ASSERT_DOUBLE_EQUAL(cost_kv_bytes_per_token(&c, 1), 163840, 0);
    CU_ASSERT_DOUBLE_EQUAL(cost_kv_bytes_per_token(&c, 2), 81920, 0);
    CU_ASSERT_DOUBLE_EQUAL(cost_kv_bytes_per_token(&c, 4), 40960, 0);
    CU_ASSERT_DOUBLE_EQUAL(cost_kv_bytes_per_token(&c, 8), 20480, 0);
    /* 30B-A3B has 4 KV heads: at t = 8 each GPU still holds one head (replicated). */
    test_cost_model(&c, "a100", "qwen3-30b-a3b");
    CU_ASSERT_DOUBLE_EQUAL(cost_kv_bytes_per_token(&c, 1), 2.0 * 48 * 4 * 128 * 2, 0);
    CU_ASSERT_DOUBLE_EQUAL(cost_kv_bytes_per_token(&c, 4), 2.0 * 48 * 1 * 128 * 2, 0);
    CU_ASSERT_DOUBLE_EQUAL(cost_kv_bytes_per_token(&c, 8), 2.0 * 48 * 1 * 128 * 2, 0);
}

static void test_capacity(void)
{
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-14b");
    /* Hand value: pool = 80e9 x 0.9 - 14.7683072e9 x 2 / t - 1e9 per GPU. */
    for (int t = 1; t <= 8; t *= 2) {
        double pool = 72e9 - 29.5366144e9 / t - 1e9;
        double want = floor(pool / (163840.0 / t) * 0.96);
        CU_ASSERT_DOUBLE_EQUAL(cost_kv_capacity_tokens(&c, t), want, 0);
    }
    /* Roughly linear in t (the weight shard shrinks too, so a bit more than t);
     * the reference gave 0.30M -> 1.54M (5.1x) because it counted t twice. */
    double r14 = cost_kv_capacity_tokens(&c, 2) / cost_kv_capacity_tokens(&c, 1);
    CU_ASSERT(r14 > 2.0 && r14 < 3.0);
    CU_ASSERT(cost_kv_capacity_tokens(&c, 8) / cost_kv_capacity_tokens(&c, 1) < 16); /* reference: 95x */
    /* For a model small against HBM the ratio is close to 2. */
    test_cost_model(&c, "a100", "qwen3-4b");
    double r4 = cost_kv_capacity_tokens(&c, 2) / cost_kv_capacity_tokens(&c, 1);
    CU_ASSERT(r4 >= 1.9 && r4 <= 2.3);
    /* Weights that do not fit leave no KV capacity. */
    test_cost_model(&c, "a100", "qwen3-30b-a3b");
    c.hw.mem_capacity = 40e9;
    CU_ASSERT_DOUBLE_EQUAL(cost_kv_capacity_tokens(&c, 1), 0, 0);
    CU_ASSERT(cost_kv_capacity_tokens(&c, 2) > 0);
}

static void test_decode(void)
{
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-14b");
    /* Hand value at t = 1, B = 1, A = 1000: memory-bound, no TP communication. */
    double bytes = 14.7683072e9 * 2 + 1000 * 163840.0;
    CU_ASSERT_CLOSE(cost_decode_step_s(&c, 1, 1, 1000), bytes / (2.039e12 * 0.85), 1e-12);
    /* Small batch scales ~1/t (the reference's double division gave 1/t^2). */
    double r = cost_decode_step_s(&c, 8, 1, 1000) / cost_decode_step_s(&c, 1, 1, 1000);
    CU_ASSERT(r >= 1.0 / 8 && r <= 1.0 / 4);
    /* t = 8 hand value: shard + KV share + 80 all-reduces of 10240 B. */
    double ar = 2 * 40 * (2.0 * 7 / 8 * 5120 * 2 / 300e9 + 5e-6);
    double want8 = (14.7683072e9 * 2 / 8 + 1000 * 20480.0) / (2.039e12 * 0.85) + ar;
    CU_ASSERT_CLOSE(cost_decode_step_s(&c, 8, 1, 1000), want8, 1e-12);
    /* Large batch becomes compute-bound: 512 x 2 P FLOPs exceed the weight read. */
    double comp = (2.0 * 14.7683072e9 * 512 + 4.0 * 40 * 40 * 128 * 1e5) / (312e12 * 0.55);
    CU_ASSERT_CLOSE(cost_decode_step_s(&c, 1, 512, 1e5), comp, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(cost_decode_step_s(&c, 1, 0, 0), 0, 0);
}

static void test_decode_moe(void)
{
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-30b-a3b");
    double bw = 2.039e12 * 0.85;
    /* One token touches 8 experts: the active parameters. */
    CU_ASSERT_CLOSE(cost_decode_step_s(&c, 1, 1, 0), 3.353032704e9 * 2 / bw, 1e-9);
    /* 512 tokens touch all 128 experts (expected miss (120/128)^512 ~ 5e-15). */
    CU_ASSERT_CLOSE(cost_decode_step_s(&c, 1, 512, 0), 30.532122624e9 * 2 / bw, 1e-6);
    /* 16 tokens: 128 (1 - (120/128)^16) ~ 82 experts, between the two. */
    double pe = 3.0 * 2048 * 768 * 48 * 2;
    double touched = 128 * (1 - pow(120.0 / 128, 16));
    double want = (3.353032704e9 * 2 + (touched - 8) * pe) / bw;
    CU_ASSERT_CLOSE(cost_decode_step_s(&c, 1, 16, 0), want, 1e-9);
    CU_ASSERT(touched > 80 && touched < 84);
}

static void test_prefill(void)
{
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-14b");
    double flops = 2 * 14.7683072e9 * 4096 + 4.0 * 40 * 40 * 128 * 4096 * (8192 + 2048);
    CU_ASSERT_CLOSE(cost_prefill_s(&c, 1, 4096, 8192), flops / (312e12 * 0.55), 1e-12);
    double ar = 2 * 40 * (2.0 * 3 / 4 * 4096 * 5120 * 2 / 300e9 + 5e-6);
    CU_ASSERT_CLOSE(cost_prefill_s(&c, 4, 4096, 8192), flops / (4 * 312e12 * 0.55) + ar, 1e-12);
    /* A short re-prefill is bounded below by reading the weights once. */
    CU_ASSERT(cost_prefill_s(&c, 1, 10, 1000) >= 14.7683072e9 * 2 / (2.039e12 * 0.85));
    CU_ASSERT_DOUBLE_EQUAL(cost_prefill_s(&c, 1, 0, 1000), 0, 0);
}

static void test_train(void)
{
    struct cost_model c;
    test_cost_model(&c, "h100", "qwen3-14b");
    /* 10 sequences of 10,000 tokens. */
    double flops = 6 * 14.7683072e9 * 1e5 + 12.0 * 40 * 40 * 128 * 1e9 / 2;
    CU_ASSERT_CLOSE(cost_train_compute_s(&c, 1e5, 1e9), flops / (989e12 * 0.4), 1e-12);
    CU_ASSERT_CLOSE(flops, 8.86098432e15 + 1.2288e15, 1e-9);
    /* Gradient all-reduce: 0 alone, ring over the network otherwise. */
    CU_ASSERT_DOUBLE_EQUAL(cost_grad_allreduce_s(&c, 1), 0, 0);
    double want4 = 2.0 * 3 / 4 * 29.5366144e9 / 50e9 + 6 * 1e-5;
    CU_ASSERT_CLOSE(cost_grad_allreduce_s(&c, 4), want4, 1e-12);
    /* Weight sync: one message time over the per-GPU NIC. */
    CU_ASSERT_CLOSE(cost_weight_sync_s(&c), 29.5366144e9 / 50e9 + 1e-5, 1e-12);
    test_cost_model(&c, "a800", "qwen3-14b");
    CU_ASSERT_CLOSE(cost_weight_sync_s(&c), 29.5366144e9 / 25e9 + 1e-5, 1e-12);
}

static void test_train_memory(void)
{
    struct cost_model c;
    test_cost_model(&c, "a100", "qwen3-14b");
    double p = 14.7683072e9;
    double act = cost_train_memory_bytes(&c, 1, 1000) - cost_train_memory_bytes(&c, 1, 0);
    /* 16 B/param unsharded, 4 + 12/dp sharded, plus the workspace. */
    CU_ASSERT_CLOSE(cost_train_memory_bytes(&c, 1, 0), 16 * p + 1e9, 1e-12);
    CU_ASSERT_CLOSE(cost_train_memory_bytes(&c, 8, 0), 4 * p + 12 * p / 8 + 1e9, 1e-12);
    /* Activations: L h b checkpoints + one layer's working set + fp32 logits, per token. */
    double per_tok = 40 * 5120 * 2.0 + 2 * 2.0 * (4 * 5120 + 2 * 40 * 128 + 2 * 8 * 128 + 3 * 17408) + 4.0 * 151936;
    CU_ASSERT_CLOSE(act, 1000 * per_tok, 1e-9);
    /* The 14B model's optimizer state alone overflows one 80 GB GPU; Qwen3-4B at
     * dp 8 with 8k tokens fits. */
    CU_ASSERT(cost_train_memory_bytes(&c, 1, 0) > 80e9);
    test_cost_model(&c, "a100", "qwen3-4b");
    CU_ASSERT(cost_train_memory_bytes(&c, 8, 8192) < 80e9);
}

static void test_monotone(void)
{
    static const char *models[] = {"qwen3-4b", "qwen3-14b", "qwen3-30b-a3b"};
    for (int i = 0; i < 3; i++) {
        struct cost_model c;
        test_cost_model(&c, "h100", models[i]);
        for (int t = 1; t < 8; t *= 2) {
            CU_ASSERT(cost_kv_bytes_per_token(&c, 2 * t) <= cost_kv_bytes_per_token(&c, t));
            CU_ASSERT(cost_kv_capacity_tokens(&c, 2 * t) > cost_kv_capacity_tokens(&c, t));
            CU_ASSERT(cost_decode_step_s(&c, 2 * t, 8, 8000) < cost_decode_step_s(&c, t, 8, 8000));
            CU_ASSERT(cost_prefill_s(&c, 2 * t, 4096, 0) < cost_prefill_s(&c, t, 4096, 0));
        }
        for (int B = 1; B < 512; B *= 2) {
            CU_ASSERT(cost_decode_step_s(&c, 2, 2 * B, 1000.0 * B) > cost_decode_step_s(&c, 2, B, 1000.0 * B));
            CU_ASSERT(cost_decode_step_s(&c, 2, B, 2000.0 * B) >= cost_decode_step_s(&c, 2, B, 1000.0 * B));
        }
        for (double n = 16; n < 1e5; n *= 4) {
            CU_ASSERT(cost_prefill_s(&c, 1, 4 * n, 0) > cost_prefill_s(&c, 1, n, 0));
            CU_ASSERT(cost_prefill_s(&c, 1, n, 4 * n) >= cost_prefill_s(&c, 1, n, n));
            CU_ASSERT(cost_train_compute_s(&c, 4 * n, 4 * n * n) > cost_train_compute_s(&c, n, n * n));
            CU_ASSERT(cost_train_memory_bytes(&c, 2, 4 * n) > cost_train_memory_bytes(&c, 2, n));
        }
        for (int dp = 1; dp < 64; dp *= 2) {
            CU_ASSERT(cost_grad_allreduce_s(&c, 2 * dp) > cost_grad_allreduce_s(&c, dp));
            CU_ASSERT(cost_train_memory_bytes(&c, 2 * dp, 1000) < cost_train_memory_bytes(&c, dp, 1000));
        }
    }
}

static const struct test_case profile_cases[] = {
    {"hardware profiles carry datasheet numbers", test_hardware_numbers},
    {"model profiles carry config.json numbers", test_model_numbers},
    {"profiles print", test_print},
    {"broken profiles give file:line: key: messages", test_bad_profiles},
    {"missing / misplaced files", test_bad_files},
    {NULL, NULL},
};

static const struct test_case cost_cases[] = {
    {"kv bytes per token per GPU", test_kv_bytes},
    {"kv capacity is per GPU and ~linear in t", test_capacity},
    {"decode step (dense)", test_decode},
    {"decode step (MoE experts touched)", test_decode_moe},
    {"prefill", test_prefill},
    {"training compute, all-reduce, weight sync", test_train},
    {"training memory", test_train_memory},
    {"monotonicity", test_monotone},
    {NULL, NULL},
};

int main(void)
{
    static const struct test_suite suites[] = {
        {"profile", profile_cases},
        {"cost", cost_cases},
        {NULL, NULL},
    };
    return test_main(suites);
}
