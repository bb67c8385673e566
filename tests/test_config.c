/*
 * Tests of the configuration subsystem (include/libra/config.h): defaults, the
 * files in tests/configs/good/ and the example inputs/emu-*.cfg and cuda-*.cfg,
 * the round trip through config_to_string, path resolution, config_check_world,
 * docs/config.md against the generated reference, the corpus of broken files in
 * tests/configs/bad/ (each names, on its first line, a substring of the message
 * it must produce: "# expect: <substring>"), and the scheduler's keys: bucket
 * lists, the keys each sched.type uses, with exact file:line messages; the inputs
 * directory (include/libra/inputs.h) and the libra.cfg(5) man page.
 *
 * Profiles named by relative path resolve through $LIBRA_INPUTS, which main sets
 * to the source tree's inputs/ unless the caller already set it.
 */
#define _XOPEN_SOURCE 700 /* realpath, open_memstream, setenv */
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "libra/config.h"
#include "libra/inputs.h"
#include "config/config_schema.h"
#include "testutil.h"

static char err[4096];

/* ---- helpers ------------------------------------------------------------------ */

/* dir/rel into out (PATH_MAX bytes). */
static void join(char *out, const char *dir, const char *rel)
{
    if (snprintf(out, PATH_MAX, "%s/%s", dir, rel) >= PATH_MAX) CU_FAIL("path too long");
}

/* The whole file, NUL-terminated (caller frees), or NULL. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (buf) buf[len] = '\0';
    return buf;
}

static int spit(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int rc = fputs(text, f) < 0;
    return fclose(f) != 0 || rc ? -1 : 0;
}

static const char *scratch(void)
{
    static char dir[1024];
    if (!dir[0]) snprintf(dir, sizeof dir, "%s", test_scratch_dir("config"));
    return dir;
}

/* Loads a file that must load; prints the message if it does not. */
static int load_ok(const char *path, struct libra_config *cfg)
{
    int rc = config_load(path, cfg, err, sizeof err);
    if (rc != 0) printf("\n    config_load(%s): %s\n", path, err);
    return rc;
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

#define SAME(f) CU_ASSERT(a->f == b->f)
#define SAME_STR(f) CU_ASSERT_STRING_EQUAL(a->f, b->f)

static void assert_same_spec(const struct plan_spec *a, const struct plan_spec *b)
{
    SAME(n_train);
    SAME(n_hybrid);
    SAME(n_tp);
    for (int i = 0; i < a->n_tp && i < CFG_MAX_TP; i++) SAME(rollout_tp[i]);
}

/* Key by key over the schema table (every key, now and later); source and the
 * plans' line numbers are where, not what. */
static void assert_same_config(const struct libra_config *a, const struct libra_config *b)
{
    for (const struct cfg_key *k = cfg_schema; k->section; k++) {
        if (k->flags & CFG_SPEC || k->type == CFG_SCHEDULE) continue;
        const char *x = (const char *)a + k->offset, *y = (const char *)b + k->offset;
        int same = k->type == CFG_STRING || k->type == CFG_NAME || k->type == CFG_ENUM ||
                           k->type == CFG_PATH
                       ? strcmp(x, y) == 0
                       : memcmp(x, y, k->size) == 0;
        if (!same) printf("\n    %s.%s differs after the round trip\n", k->section, k->key);
        CU_ASSERT(same);
    }
    assert_same_spec(&a->plan.fixed, &b->plan.fixed);
    SAME(plan.n_schedule);
    for (int i = 0; i < a->plan.n_schedule && i < CFG_MAX_SCHEDULE; i++)
        assert_same_spec(&a->plan.schedule[i], &b->plan.schedule[i]);
    SAME(sched.n_buckets); /* the bucket array itself is a row (memcmp above) */
}

/* Bucket i of c is name / tp[0..n_tp) / max_tokens. */
static void assert_bucket(const struct sched_config *c, int i, const char *name, int n_tp,
                          const int *tp, int max_tokens)
{
    CU_ASSERT_FATAL(i < c->n_buckets);
    const struct sched_bucket_spec *b = &c->buckets[i];
    CU_ASSERT_STRING_EQUAL(b->name, name);
    CU_ASSERT_EQUAL_FATAL(b->n_tp, n_tp);
    for (int j = 0; j < n_tp; j++) CU_ASSERT_EQUAL(b->tp[j], tp[j]);
    for (int j = n_tp; j < 4; j++) CU_ASSERT_EQUAL(b->tp[j], 0);
    CU_ASSERT_EQUAL(b->max_tokens, max_tokens);
}

static void assert_tp(const struct plan_spec *p, int n_train, int n_hybrid, int n_tp,
                      const int *tp)
{
    CU_ASSERT_EQUAL(p->n_train, n_train);
    CU_ASSERT_EQUAL(p->n_hybrid, n_hybrid);
    CU_ASSERT_EQUAL_FATAL(p->n_tp, n_tp);
    for (int i = 0; i < n_tp; i++) CU_ASSERT_EQUAL(p->rollout_tp[i], tp[i]);
}

static void make_file(const char *dir, const char *rel);
static void real(const char *dir, const char *rel, char *out);

/* ---- defaults and good files --------------------------------------------------- */

static void test_defaults(void)
{
    struct libra_config c;
    config_defaults(&c);
    CU_ASSERT_STRING_EQUAL(c.source, "");
    CU_ASSERT_STRING_EQUAL(c.run.name, "libra");
    CU_ASSERT_EQUAL(c.run.steps, 20);
    CU_ASSERT(c.run.seed == 1);
    CU_ASSERT_STRING_EQUAL(c.run.log_level, "info");
    CU_ASSERT(c.run.progress_interval_s == 2.0);
    CU_ASSERT_STRING_EQUAL(c.device.type, "emu");
    CU_ASSERT_STRING_EQUAL(c.device.hardware, "hardware/a800.cfg");
    CU_ASSERT(c.device.time_scale == 1.0);
    CU_ASSERT(c.device.decode_bw_util == 0.85);
    CU_ASSERT(c.device.prefill_mfu == 0.55);
    CU_ASSERT(c.device.train_mfu == 0.40);
    CU_ASSERT(c.device.gpu_memory_utilization == 0.90);
    CU_ASSERT(c.device.kv_frag_rate == 0.04);
    CU_ASSERT(c.device.act_workspace_gb == 1.0);
    CU_ASSERT_STRING_EQUAL(c.model.profile, "models/qwen3-14b.cfg");
    CU_ASSERT_EQUAL(c.rollout.n_samples, 4);
    CU_ASSERT_EQUAL(c.rollout.max_turns, 12);
    CU_ASSERT_EQUAL(c.rollout.max_tokens_per_turn, 4096);
    CU_ASSERT_EQUAL(c.rollout.max_tokens, 32768);
    CU_ASSERT_EQUAL(c.rollout.max_inflight_groups, 0);
    CU_ASSERT_EQUAL(c.train.batch_size, 32);
    CU_ASSERT_EQUAL(c.train.max_staleness, 1);
    CU_ASSERT_EQUAL(c.train.sync_interval, 1);
    CU_ASSERT_STRING_EQUAL(c.plan.mode, "static");
    CU_ASSERT_EQUAL(c.plan.interval, 5);
    assert_tp(&c.plan.fixed, 4, 0, 4, (const int[]){1, 1, 1, 1});
    CU_ASSERT_EQUAL(c.plan.fixed.line, 0);
    CU_ASSERT_EQUAL(c.plan.n_schedule, 0);
    const struct sched_config *s = &c.sched;
    CU_ASSERT_STRING_EQUAL(s->type, "cmlfq");
    CU_ASSERT_STRING_EQUAL(s->balance, "kv");
    for (int i = 0; i < 4; i++) CU_ASSERT(s->weights[i] == 1.0);
    CU_ASSERT(s->max_load == 0.3);
    CU_ASSERT_EQUAL(s->fallback, 1);
    CU_ASSERT_EQUAL(s->affinity, 1);
    CU_ASSERT_EQUAL_FATAL(s->n_buckets, 3);
    assert_bucket(s, 0, "short", 1, (const int[]){1}, 500);
    assert_bucket(s, 1, "medium", 1, (const int[]){2}, 1000);
    assert_bucket(s, 2, "long", 2, (const int[]){4, 8}, 30000);
    for (int i = 3; i < CFG_MAX_BUCKETS; i++) CU_ASSERT_EQUAL(s->buckets[i].name[0], '\0');
    CU_ASSERT_STRING_EQUAL(s->default_bucket, "");
    CU_ASSERT_EQUAL(s->payload_small, 500);
    CU_ASSERT_EQUAL(s->payload_large, 5000);
    CU_ASSERT_EQUAL(s->window, 200);
    CU_ASSERT_EQUAL(s->min_samples, 8);
    CU_ASSERT(s->shrink == 4.0);
    CU_ASSERT(s->hysteresis == 0.25);
    CU_ASSERT_EQUAL(s->max_migrations, 2);
    CU_ASSERT_EQUAL(s->rebuild_interval, 50);
    CU_ASSERT_EQUAL(s->max_recent, 5000);
    CU_ASSERT_STRING_EQUAL(s->tree_in, "");
    CU_ASSERT_STRING_EQUAL(s->instance_queue, "mlfq");
    CU_ASSERT_EQUAL(s->queue_levels, 4);
    CU_ASSERT_EQUAL(s->queue_base_tokens, 1024);
    CU_ASSERT(s->queue_age_s == 30.0);
    CU_ASSERT(s->scout_timeout_s == 60.0);
    CU_ASSERT_EQUAL(s->history_ttl, 5);
    CU_ASSERT_STRING_EQUAL(c.env.name, "emu");
    CU_ASSERT_STRING_EQUAL(c.workload.preset, "workloads/r2e-gym.cfg");
    CU_ASSERT_STRING_EQUAL(c.output.dir, "runs");
    CU_ASSERT_STRING_EQUAL(c.output.file, "");
    CU_ASSERT_EQUAL(plan_spec_workers(&c.plan.fixed), 8);
}

/* An (almost) empty file gives the defaults, with the profile paths resolved. */
static void test_good_minimal(void)
{
    const char *path = test_path("tests/configs/good/minimal.cfg");
    struct libra_config c, d;
    CU_ASSERT_EQUAL_FATAL(load_ok(path, &c), 0);
    CU_ASSERT_STRING_EQUAL(c.source, path);
    CU_ASSERT(c.device.hardware[0] == '/' && ends_with(c.device.hardware, "/hardware/a800.cfg"));
    CU_ASSERT(c.model.profile[0] == '/' && ends_with(c.model.profile, "/models/qwen3-14b.cfg"));
    CU_ASSERT(c.workload.preset[0] == '/' &&
              ends_with(c.workload.preset, "/workloads/r2e-gym.cfg"));
    CU_ASSERT_EQUAL(c.plan.fixed.line, 4); /* the plan group */
    config_defaults(&d);
    memcpy(d.device.hardware, c.device.hardware, sizeof d.device.hardware);
    memcpy(d.model.profile, c.model.profile, sizeof d.model.profile);
    memcpy(d.workload.preset, c.workload.preset, sizeof d.workload.preset);
    assert_same_config(&c, &d);
}

static void test_good_static_full(void)
{
    struct libra_config c;
    CU_ASSERT_EQUAL_FATAL(load_ok(test_path("tests/configs/good/static-full.cfg"), &c), 0);
    CU_ASSERT_STRING_EQUAL(c.run.name, "full_static.v2-run");
    CU_ASSERT_EQUAL(c.run.steps, 1000);
    CU_ASSERT(c.run.seed == 5000000000ULL);
    CU_ASSERT_STRING_EQUAL(c.run.log_level, "debug");
    CU_ASSERT(c.run.progress_interval_s == 1.0);
    CU_ASSERT_STRING_EQUAL(c.device.type, "cuda");
    CU_ASSERT(ends_with(c.device.hardware, "/hardware/h100.cfg"));
    CU_ASSERT(c.device.time_scale == 250.0);
    CU_ASSERT(c.device.decode_bw_util == 0.7);
    CU_ASSERT(c.device.prefill_mfu == 0.5);
    CU_ASSERT(c.device.train_mfu == 0.35);
    CU_ASSERT(c.device.gpu_memory_utilization == 0.8);
    CU_ASSERT(c.device.kv_frag_rate == 0.0);
    CU_ASSERT(c.device.act_workspace_gb == 2.5);
    CU_ASSERT(ends_with(c.model.profile, "/models/qwen3-4b.cfg"));
    CU_ASSERT_EQUAL(c.rollout.n_samples, 8);
    CU_ASSERT_EQUAL(c.rollout.max_turns, 20);
    CU_ASSERT_EQUAL(c.rollout.max_tokens_per_turn, 8192);
    CU_ASSERT_EQUAL(c.rollout.max_tokens, 65536);
    CU_ASSERT_EQUAL(c.rollout.max_inflight_groups, 12);
    CU_ASSERT_EQUAL(c.train.batch_size, 64);
    CU_ASSERT_EQUAL(c.train.max_staleness, 3);
    CU_ASSERT_EQUAL(c.train.sync_interval, 2);
    CU_ASSERT_STRING_EQUAL(c.plan.mode, "static");
    CU_ASSERT_EQUAL(c.plan.interval, 10);
    assert_tp(&c.plan.fixed, 8, 2, 5, (const int[]){8, 4, 2, 1, 1});
    CU_ASSERT_EQUAL(c.plan.fixed.line, 38); /* plan.n_train, the first plan key given */
    CU_ASSERT_EQUAL(c.plan.n_schedule, 0);
    CU_ASSERT_STRING_EQUAL(c.sched.type, "load_balance");
    CU_ASSERT_STRING_EQUAL(c.sched.balance, "weighted");
    CU_ASSERT(c.sched.weights[0] == 1.0 && c.sched.weights[1] == 2.5);
    CU_ASSERT(c.sched.weights[2] == 4.0 && c.sched.weights[3] == 9.75);
    CU_ASSERT(c.sched.max_load == 0.8);
    CU_ASSERT_EQUAL(c.sched.fallback, 0);
    CU_ASSERT_EQUAL(c.sched.affinity, 0);
    CU_ASSERT_STRING_EQUAL(c.sched.instance_queue, "fifo");
    CU_ASSERT_EQUAL(c.sched.n_buckets, 3); /* unused by load_balance: the defaults */
    CU_ASSERT(ends_with(c.workload.preset, "/workloads/search-r1.cfg"));
    CU_ASSERT_STRING_EQUAL(c.output.dir, "/tmp/libra-runs");
    CU_ASSERT_STRING_EQUAL(c.output.file, "out/metrics.h5");
}

static void test_good_schedule(void)
{
    struct libra_config c;
    CU_ASSERT_EQUAL_FATAL(load_ok(test_path("tests/configs/good/schedule.cfg"), &c), 0);
    CU_ASSERT_STRING_EQUAL(c.plan.mode, "schedule");
    CU_ASSERT_EQUAL(c.plan.interval, 2);
    CU_ASSERT_EQUAL_FATAL(c.plan.n_schedule, 3);
    assert_tp(&c.plan.schedule[0], 4, 0, 3, (const int[]){2, 1, 1});
    assert_tp(&c.plan.schedule[1], 2, 1, 3, (const int[]){2, 2, 1});
    assert_tp(&c.plan.schedule[2], 2, 0, 3, (const int[]){8, 1, 1});
    CU_ASSERT_EQUAL(c.plan.schedule[0].line, 9);
    CU_ASSERT_EQUAL(c.plan.schedule[2].line, 11);
    CU_ASSERT_EQUAL(plan_spec_workers(&c.plan.schedule[1]), 8);
    CU_ASSERT_EQUAL(plan_spec_workers(&c.plan.schedule[2]), 12);
}

/* A custom bucket list and every C-MLFQ key set. */
static void test_good_sched_cmlfq(void)
{
    struct libra_config c;
    CU_ASSERT_EQUAL_FATAL(load_ok(test_path("tests/configs/good/sched-cmlfq.cfg"), &c), 0);
    const struct sched_config *s = &c.sched;
    CU_ASSERT_STRING_EQUAL(s->type, "cmlfq");
    CU_ASSERT_STRING_EQUAL(s->balance, "connections");
    CU_ASSERT(s->max_load == 0.0);
    CU_ASSERT_EQUAL(s->fallback, 0);
    CU_ASSERT_EQUAL(s->affinity, 1);
    CU_ASSERT_EQUAL_FATAL(s->n_buckets, 4);
    assert_bucket(s, 0, "tiny", 1, (const int[]){1}, 1000);
    assert_bucket(s, 1, "short", 2, (const int[]){1, 2}, 4000);
    assert_bucket(s, 2, "mid-2", 3, (const int[]){2, 4, 1}, 16000);
    assert_bucket(s, 3, "long_8", 4, (const int[]){8, 4, 2, 1}, 1000000000);
    for (int i = 4; i < CFG_MAX_BUCKETS; i++) CU_ASSERT_EQUAL(s->buckets[i].n_tp, 0);
    CU_ASSERT_STRING_EQUAL(s->default_bucket, "short");
    CU_ASSERT_EQUAL(s->payload_small, 200);
    CU_ASSERT_EQUAL(s->payload_large, 200);
    CU_ASSERT_EQUAL(s->window, 100000);
    CU_ASSERT_EQUAL(s->min_samples, 3);
    CU_ASSERT(s->shrink == 0.0);
    CU_ASSERT(s->hysteresis == 1.5);
    CU_ASSERT_EQUAL(s->max_migrations, 0);
    CU_ASSERT_EQUAL(s->rebuild_interval, 0);
    CU_ASSERT_EQUAL(s->max_recent, 10);
    CU_ASSERT_STRING_EQUAL(s->tree_in, "");
    CU_ASSERT_STRING_EQUAL(s->instance_queue, "mlfq");
    CU_ASSERT_EQUAL(s->queue_levels, 8);
    CU_ASSERT_EQUAL(s->queue_base_tokens, 512);
    CU_ASSERT(s->queue_age_s == 0.0);
    CU_ASSERT(s->scout_timeout_s == 60.0); /* la_mlfq keys keep their defaults */
    CU_ASSERT_EQUAL(s->history_ttl, 5);
}

/* The other types with the keys they use; tree_in names a file and is resolved. */
static void test_good_sched_types(void)
{
    struct libra_config c;
    const char *path = test_write_file("config", "sched-la-mlfq",
                                       "sched = {\n"
                                       "  type = \"la_mlfq\";\n"
                                       "  buckets = ( { name = \"all\"; tp = [2, 1]; "
                                       "max_tokens = 5; } );\n"
                                       "  scout_timeout_s = 0.5;\n"
                                       "  history_ttl = 0;\n"
                                       "  instance_queue = \"fifo\";\n"
                                       "};\n");
    CU_ASSERT_EQUAL_FATAL(load_ok(path, &c), 0);
    CU_ASSERT_STRING_EQUAL(c.sched.type, "la_mlfq");
    CU_ASSERT_EQUAL_FATAL(c.sched.n_buckets, 1);
    assert_bucket(&c.sched, 0, "all", 2, (const int[]){2, 1}, 5);
    CU_ASSERT(c.sched.scout_timeout_s == 0.5);
    CU_ASSERT_EQUAL(c.sched.history_ttl, 0);
    CU_ASSERT_STRING_EQUAL(c.sched.instance_queue, "fifo");

    path = test_write_file("config", "sched-length-aware",
                           "sched = { type = \"length_aware\"; affinity = 0; balance = "
                           "\"round_robin\"; queue_levels = 1; };\n");
    CU_ASSERT_EQUAL_FATAL(load_ok(path, &c), 0);
    CU_ASSERT_STRING_EQUAL(c.sched.type, "length_aware");
    CU_ASSERT_EQUAL(c.sched.affinity, 0);
    CU_ASSERT_STRING_EQUAL(c.sched.balance, "round_robin");
    CU_ASSERT_EQUAL(c.sched.queue_levels, 1);
    CU_ASSERT_EQUAL(c.sched.n_buckets, 3);

    char dir[PATH_MAX], want[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/tree", scratch());
    make_file(dir, "start.tree");
    path = test_write_file("config", "sched-tree-in",
                           "sched = { default_bucket = \"long\"; tree_in = "
                           "\"tree/start.tree\"; };\n");
    CU_ASSERT_EQUAL_FATAL(load_ok(path, &c), 0);
    real(dir, "start.tree", want);
    CU_ASSERT_STRING_EQUAL(c.sched.tree_in, want);
    CU_ASSERT_STRING_EQUAL(c.sched.default_bucket, "long");
}

static void test_good_bounds(void)
{
    struct libra_config c;
    CU_ASSERT_EQUAL_FATAL(load_ok(test_path("tests/configs/good/bounds.cfg"), &c), 0);
    CU_ASSERT_EQUAL(c.run.steps, 10000000);
    CU_ASSERT(c.run.seed == 0);
    CU_ASSERT(c.run.progress_interval_s == 0.05);
    CU_ASSERT(c.device.time_scale == 1e9);
    CU_ASSERT(c.device.decode_bw_util == 1.0);
    CU_ASSERT(c.device.act_workspace_gb == 64.0);
    CU_ASSERT_EQUAL(c.rollout.max_turns, 256);
    CU_ASSERT_EQUAL(c.rollout.max_tokens, 16);
    CU_ASSERT_EQUAL(c.train.batch_size, 1);
    assert_tp(&c.plan.fixed, 1, 0, 1, (const int[]){8});
    CU_ASSERT_STRING_EQUAL(c.output.file, "");
}

/* The example configs load and fit the world size they are written for. */
static void test_examples(void)
{
    static const struct {
        const char *path;
        int world;
    } ex[] = {
        {"inputs/emu-quick.cfg", 9},
        {"inputs/emu-r2e-48gpu.cfg", 49},
        {"inputs/emu-search-16gpu.cfg", 17},
    };
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
        struct libra_config c;
        CU_ASSERT_EQUAL_FATAL(load_ok(test_path(ex[i].path), &c), 0);
        CU_ASSERT_EQUAL(config_check_world(&c, ex[i].world, err, sizeof err), 0);
        CU_ASSERT_EQUAL(config_check_world(&c, ex[i].world - 1, err, sizeof err), -1);
    }
    struct libra_config q;
    CU_ASSERT_EQUAL_FATAL(load_ok(test_path("inputs/emu-quick.cfg"), &q), 0);
    CU_ASSERT_STRING_EQUAL(q.run.name, "emu-quick");
    CU_ASSERT_EQUAL(q.run.steps, 40);
    CU_ASSERT(q.device.time_scale == 40.0);
    CU_ASSERT_EQUAL(q.train.batch_size, 16);
    CU_ASSERT_EQUAL_FATAL(q.plan.n_schedule, 4);
    for (int i = 0; i < 4; i++) CU_ASSERT_EQUAL(plan_spec_workers(&q.plan.schedule[i]), 8);
    assert_tp(&q.plan.schedule[1], 2, 1, 3, (const int[]){2, 2, 1});
    struct libra_config r;
    CU_ASSERT_EQUAL_FATAL(load_ok(test_path("inputs/emu-r2e-48gpu.cfg"), &r), 0);
    assert_tp(&r.plan.fixed, 24, 0, 11, (const int[]){4, 4, 4, 2, 2, 2, 2, 1, 1, 1, 1});
    CU_ASSERT_EQUAL(r.train.batch_size, 64);
    CU_ASSERT_EQUAL(r.rollout.n_samples, 8);
}

/* The CUDA examples name a Hugging Face directory the user supplies
 * (models/Qwen3-1.7B, resolved beside the config, then in the inputs directory): each
 * loads from a copy beside a stand-in directory of that name, keeps to what device
 * cuda runs today (TP 1 everywhere, a static or scheduled plan, no entropy term) and
 * uses exactly the workers of the world size it is written for (a real device's
 * spare rank is refused at the start of a run). */
static void test_cuda_examples(void)
{
    static const struct {
        const char *name;
        int world;
    } ex[] = {
        {"cuda-qwen3-8gpu.cfg", 9},
        {"cuda-qwen3-48gpu.cfg", 49},
    };
    char dir[PATH_MAX], model[PATH_MAX];
    join(dir, scratch(), "cuda");
    make_file(dir, "models/Qwen3-1.7B/config.json");
    real(dir, "models/Qwen3-1.7B", model);
    for (size_t i = 0; i < sizeof ex / sizeof ex[0]; i++) {
        char src[PATH_MAX], copy[PATH_MAX];
        snprintf(src, sizeof src, "inputs/%s", ex[i].name);
        join(copy, dir, ex[i].name);
        char *text = slurp(test_path(src));
        CU_ASSERT_PTR_NOT_NULL_FATAL(text);
        CU_ASSERT_EQUAL_FATAL(spit(copy, text), 0);
        free(text);
        struct libra_config c;
        CU_ASSERT_EQUAL_FATAL(load_ok(copy, &c), 0);
        CU_ASSERT_STRING_EQUAL(c.device.type, "cuda");
        CU_ASSERT_STRING_EQUAL(c.model.checkpoint, model);
        CU_ASSERT(c.train.entropy_coef == 0.0);
        int sched = strcmp(c.plan.mode, "schedule") == 0;
        CU_ASSERT(sched || strcmp(c.plan.mode, "static") == 0);
        int n = sched ? c.plan.n_schedule : 1;
        for (int k = 0; k < n; k++) {
            const struct plan_spec *p = sched ? &c.plan.schedule[k] : &c.plan.fixed;
            CU_ASSERT(p->train_tp <= 1);
            for (int j = 0; j < p->n_tp; j++) CU_ASSERT_EQUAL(p->rollout_tp[j], 1);
            CU_ASSERT_EQUAL(plan_spec_workers(p), ex[i].world - 1);
        }
        CU_ASSERT_EQUAL(config_check_world(&c, ex[i].world, err, sizeof err), 0);
        CU_ASSERT_EQUAL(config_check_world(&c, ex[i].world - 1, err, sizeof err), -1);
    }
}

/* ---- printing ------------------------------------------------------------------ */

/* Load, print, load the print: the same configuration. */
static void round_trip(const char *path)
{
    static int serial;
    struct libra_config a, b;
    CU_ASSERT_EQUAL_FATAL(load_ok(path, &a), 0);
    char *text = config_to_string(&a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    char out[PATH_MAX];
    snprintf(out, sizeof out, "%s/round-trip-%d.cfg", scratch(), serial++);
    CU_ASSERT_EQUAL_FATAL(spit(out, text), 0);
    int rc = load_ok(out, &b);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc == 0) assert_same_config(&a, &b);
    free(text);
}

static void test_round_trip(void)
{
    static const char *files[] = {
        "tests/configs/good/minimal.cfg",  "tests/configs/good/static-full.cfg",
        "tests/configs/good/schedule.cfg", "tests/configs/good/bounds.cfg",
        "inputs/emu-quick.cfg",            "inputs/emu-r2e-48gpu.cfg",
        "inputs/emu-search-16gpu.cfg",     "tests/configs/good/sched-cmlfq.cfg",
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) round_trip(test_path(files[i]));
    /* every sched.type, with the keys it uses (tree_in printed resolved) */
    static const char *sched[] = {
        "sched = { type = \"la_mlfq\"; scout_timeout_s = 0.25; history_ttl = 9; buckets = ( "
        "{ name = \"a\"; tp = [8]; max_tokens = 7; }, { name = \"b\"; tp = [1, 4]; "
        "max_tokens = 8; } ); };\n",
        "sched = { type = \"length_aware\"; affinity = 0; instance_queue = \"fifo\"; };\n",
        "sched = { type = \"load_balance\"; balance = \"weighted\"; weight_tp8 = 0.01; };\n",
        "sched = { tree_in = \"tree/start.tree\"; default_bucket = \"medium\"; queue_age_s = "
        "1e-3; };\n",
    };
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/tree", scratch());
    make_file(dir, "start.tree");
    for (size_t i = 0; i < sizeof sched / sizeof sched[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "sched-round-trip-%zu", i);
        round_trip(test_write_file("config", name, sched[i]));
    }
    /* strings that need escaping survive */
    char path[PATH_MAX];
    join(path, scratch(), "escapes.cfg");
    CU_ASSERT_EQUAL_FATAL(spit(path, "output = { dir = \"a \\\"b\\\\c\\td\\x01\"; };\n"), 0);
    struct libra_config c;
    CU_ASSERT_EQUAL_FATAL(load_ok(path, &c), 0);
    CU_ASSERT_STRING_EQUAL(c.output.dir, "a \"b\\c\td\x01");
    round_trip(path);
}

/* Every assignment line of a printed configuration carries a comment; frees text. */
static void assert_commented(char *text)
{
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        if (line[0] != '#' && strchr(line, '=') && !ends_with(line, "{"))
            CU_ASSERT_PTR_NOT_NULL(strchr(line, '#'));
    free(text);
}

/* Every key is printed (inside its section) and every assignment is commented;
 * keys the configuration does not use are comments, the bucket list one group a
 * line. */
static void test_to_string_keys(void)
{
    static const char *keys[] = {
        "run.name", "run.steps", "run.seed", "run.log_level", "run.progress_interval_s",
        "device.type", "device.hardware", "device.time_scale", "device.decode_bw_util",
        "device.prefill_mfu", "device.train_mfu", "device.gpu_memory_utilization",
        "device.kv_frag_rate", "device.act_workspace_gb", "model.profile",
        "rollout.n_samples", "rollout.max_turns", "rollout.max_tokens_per_turn",
        "rollout.max_tokens", "rollout.max_inflight_groups", "train.batch_size",
        "train.max_staleness", "train.sync_interval", "plan.mode", "plan.interval",
        "plan.n_train", "plan.n_hybrid", "plan.rollout_tp", "sched.type", "sched.balance",
        "sched.weight_tp1", "sched.weight_tp8", "sched.max_load", "sched.fallback",
        "sched.affinity", "sched.instance_queue", "env.name",
        "workload.preset", "output.dir", "output.file",
    };
    struct libra_config c;
    CU_ASSERT_EQUAL_FATAL(load_ok(test_path("tests/configs/good/static-full.cfg"), &c), 0);
    char *text = config_to_string(&c);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char sec[32], pat[64];
        const char *dot = strchr(keys[i], '.');
        snprintf(sec, sizeof sec, "\n%.*s = {\n", (int)(dot - keys[i]), keys[i]);
        snprintf(pat, sizeof pat, "\n  %s = ", dot + 1);
        const char *s = strstr(text, sec), *k = s ? strstr(s, pat) : NULL;
        const char *end = s ? strstr(s, "\n};") : NULL;
        CU_ASSERT(k && end && k < end);
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "seed = 5000000000L;"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "progress_interval_s = 1.0;"));
    /* keys load_balance / fifo do not use are comments (loading them would fail) */
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\n  # buckets: not used with type = \"load_balance\"\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\n  # scout_timeout_s: not used with type = "
                                        "\"load_balance\"\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\n  # queue_levels: not used with instance_queue = "
                                        "\"fifo\"\n"));
    CU_ASSERT_PTR_NULL(strstr(text, "\n  window = "));
    assert_commented(text);
    /* the bucket list, one group per line */
    CU_ASSERT_EQUAL_FATAL(load_ok(test_path("tests/configs/good/sched-cmlfq.cfg"), &c), 0);
    text = config_to_string(&c);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\n  buckets = (  "));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\n    { name = \"tiny\"; tp = [1]; max_tokens = 1000; },"
                                        "  # bucket 0\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\n    { name = \"long_8\"; tp = [8, 4, 2, 1]; max_tokens "
                                        "= 1000000000; }  # bucket 3\n  );\n"));
    CU_ASSERT_PTR_NULL(strstr(text, "\n  weight_tp1 = ")); /* balance = "connections" */
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\n  # weight_tp1: not used with balance = "
                                        "\"connections\"\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\n  default_bucket = \"short\";"));
    assert_commented(text);
}

/* docs/config.md is exactly what config_write_reference writes today. */
static void test_reference_in_step(void)
{
    char *fresh = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&fresh, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mem);
    config_write_reference(mem);
    fclose(mem);
    char *committed = slurp(test_path("docs/config.md"));
    int same = committed && strcmp(committed, fresh) == 0;
    if (!same) {
        char out[PATH_MAX];
        snprintf(out, sizeof out, "%s/config.md", scratch());
        spit(out, fresh);
        printf("\n    docs/config.md is out of date: diff %s %s, then regenerate it with "
               "src/libra --config-reference > docs/config.md\n", test_path("docs/config.md"), out);
    }
    CU_ASSERT(same);
    CU_ASSERT_PTR_NOT_NULL(strstr(fresh, "| `train.batch_size` | int | `32` | 1 .. 1000000 |"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fresh, "LIBRA_INPUTS"));
    free(committed);
    free(fresh);
}

/* libra.cfg(5): the Markdown's content as roff, no Markdown left in it. */
static void test_reference_man(void)
{
    char *man = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&man, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mem);
    config_write_reference_man(mem, "9.9", "/pkg/data");
    fclose(mem);
    CU_ASSERT_PTR_NOT_NULL(strstr(man, ".TH LIBRA.CFG 5 \"\" \"libra 9.9\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(man, "\n.SH NAME\nlibra.cfg \\- "));
    CU_ASSERT_PTR_NOT_NULL(strstr(man, "\n.TP\n\\fBtrain.batch_size\\fR\n\\fItype\\fR: int; "
                                       "\\fIdefault\\fR: \\fB32\\fR; \\fIrange / allowed\\fR: 1 .. "
                                       "1000000\n.br\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(man, ".SS \"The plan and plan.schedule\"\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(man, ".nf\nplan = {\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(man, "\n.I /pkg/data\n"));
    CU_ASSERT_PTR_NULL(strstr(man, "`"));
    CU_ASSERT_PTR_NULL(strstr(man, "&lt;"));
    CU_ASSERT_PTR_NULL(strstr(man, "|---"));
    CU_ASSERT_PTR_NULL(strstr(man, "<!--"));
    for (const char *l = man; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (*l == '.' && !isalpha((unsigned char)l[1]) && l[1] != '\\') {
            printf("\n    a text line starts with '.': %.40s\n", l);
            CU_FAIL("a line of text would be read as a request");
        }
    free(man);
}

/* ---- world size ---------------------------------------------------------------- */

static void test_check_world(void)
{
    const char *path = test_path("tests/configs/good/schedule.cfg");
    struct libra_config c;
    char want[2048];
    CU_ASSERT_EQUAL_FATAL(load_ok(path, &c), 0);
    CU_ASSERT_EQUAL(config_check_world(&c, 13, err, sizeof err), 0);
    CU_ASSERT_EQUAL(config_check_world(&c, 9, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s:11: plan.schedule[2]: needs 12 workers (n_train 2 + "
             "n_hybrid 0 + rollout_tp 8+1+1) but the job has 8 (world size 9; rank 0 is the "
             "controller) (start at least 13 ranks or shrink the plan)", path);
    CU_ASSERT_STRING_EQUAL(err, want);
    CU_ASSERT_EQUAL(config_check_world(&c, 8, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, ":9: plan.schedule[0]: needs 8 workers"));
    CU_ASSERT_EQUAL(config_check_world(&c, 1, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "world size 1: libra needs rank 0 (the controller) and "
                                       "at least one worker (start at least 13 ranks)"));

    path = test_path("tests/configs/good/static-full.cfg");
    CU_ASSERT_EQUAL_FATAL(load_ok(path, &c), 0);
    CU_ASSERT_EQUAL(config_check_world(&c, 27, err, sizeof err), 0);
    CU_ASSERT_EQUAL(config_check_world(&c, 26, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s:38: plan: needs 26 workers (n_train 8 + n_hybrid 2 + "
             "rollout_tp 8+4+2+1+1) but the job has 25 (world size 26; rank 0 is the "
             "controller) (start at least 27 ranks or shrink the plan)", path);
    CU_ASSERT_STRING_EQUAL(err, want);

    config_defaults(&c); /* no file: no location in the message */
    CU_ASSERT_EQUAL(config_check_world(&c, 9, err, sizeof err), 0);
    CU_ASSERT_EQUAL(config_check_world(&c, 4, err, sizeof err), -1);
    CU_ASSERT_EQUAL(strncmp(err, "plan: needs 8 workers (n_train 4 + n_hybrid 0 + rollout_tp "
                                 "1+1+1+1) but the job has 3", 78), 0);
}

/* ---- paths ----------------------------------------------------------------------- */

static void make_file(const char *dir, const char *rel)
{
    char path[PATH_MAX], sub[PATH_MAX];
    join(path, dir, rel);
    snprintf(sub, sizeof sub, "%s", path);
    for (char *p = sub + 1; (p = strchr(p, '/')); p++) { /* mkdir -p */
        *p = '\0';
        mkdir(sub, 0755);
        *p = '/';
    }
    CU_ASSERT_EQUAL(spit(path, "# placeholder\n"), 0);
}

static void real(const char *dir, const char *rel, char *out)
{
    char path[PATH_MAX];
    join(path, dir, rel);
    if (!realpath(path, out)) snprintf(out, PATH_MAX, "(missing)");
}

/* The config's own directory first, then $LIBRA_INPUTS, then LIBRA_SRCDIR/inputs. */
static void test_path_resolution(void)
{
    char conf[PATH_MAX], inputs[PATH_MAX], cfgfile[PATH_MAX], want[PATH_MAX];
    char *saved = getenv("LIBRA_INPUTS") ? strdup(getenv("LIBRA_INPUTS")) : NULL;
    snprintf(conf, sizeof conf, "%s/paths/conf", scratch());
    snprintf(inputs, sizeof inputs, "%s/paths/inputs", scratch());
    make_file(conf, "hardware/local.cfg");
    make_file(inputs, "hardware/local.cfg");
    make_file(inputs, "hardware/a800.cfg");
    make_file(inputs, "models/qwen3-14b.cfg");
    make_file(inputs, "workloads/r2e-gym.cfg");
    setenv("LIBRA_INPUTS", inputs, 1);
    struct libra_config c;

    join(cfgfile, conf, "local.cfg");
    spit(cfgfile, "device = { hardware = \"hardware/local.cfg\"; };\n");
    CU_ASSERT_EQUAL(load_ok(cfgfile, &c), 0);
    real(conf, "hardware/local.cfg", want);
    CU_ASSERT_STRING_EQUAL(c.device.hardware, want);
    real(inputs, "models/qwen3-14b.cfg", want);
    CU_ASSERT_STRING_EQUAL(c.model.profile, want);

    join(cfgfile, conf, "absolute.cfg");
    real(inputs, "hardware/a800.cfg", want);
    char text[2 * PATH_MAX];
    snprintf(text, sizeof text, "device = { hardware = \"%s\"; };\n", want);
    spit(cfgfile, text);
    CU_ASSERT_EQUAL(load_ok(cfgfile, &c), 0);
    CU_ASSERT_STRING_EQUAL(c.device.hardware, want);

    join(cfgfile, conf, "missing.cfg");
    spit(cfgfile, "device = { hardware = \"hardware/zz.cfg\"; };\n");
    CU_ASSERT_EQUAL(config_load(cfgfile, &c, err, sizeof err), -1);
    char tried[3 * PATH_MAX + 160];
    snprintf(tried, sizeof tried, "%s:1: device.hardware: file \"hardware/zz.cfg\" not found "
             "(tried %s/hardware/zz.cfg and %s/hardware/zz.cfg)", cfgfile, conf, inputs);
    CU_ASSERT_EQUAL(strncmp(err, tried, strlen(tried)), 0);

    /* @include is relative to the including file, and so are paths in the part. */
    join(cfgfile, conf, "part.cfg");
    spit(cfgfile, "run = { steps = 7; };\ndevice = { hardware = \"hardware/local.cfg\"; };\n");
    join(cfgfile, conf, "include.cfg");
    spit(cfgfile, "@include \"part.cfg\"\ntrain = { batch_size = 8; };\n");
    CU_ASSERT_EQUAL(load_ok(cfgfile, &c), 0);
    CU_ASSERT_EQUAL(c.run.steps, 7);
    real(conf, "hardware/local.cfg", want);
    CU_ASSERT_STRING_EQUAL(c.device.hardware, want);

    /* No $LIBRA_INPUTS: the inputs of the source tree this was built from. */
    unsetenv("LIBRA_INPUTS");
    join(cfgfile, conf, "fallback.cfg");
    spit(cfgfile, "device = { hardware = \"hardware/a800.cfg\"; };\n");
    int rc = config_load(cfgfile, &c, err, sizeof err);
    real(LIBRA_SRCDIR "/inputs", "hardware/a800.cfg", want);
    if (want[0] == '/') {
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT_STRING_EQUAL(c.device.hardware, want);
    } else {
        CU_ASSERT_PTR_NOT_NULL(strstr(err, LIBRA_SRCDIR "/inputs/hardware/a800.cfg"));
    }
    if (saved) setenv("LIBRA_INPUTS", saved, 1);
    free(saved);
}

/* ---- the inputs directory (include/libra/inputs.h) ------------------------------- */

static void test_inputs_relpath(void)
{
    static const char *const cases[][3] = {
        {"/usr/local/bin", "/usr/local/share/libra", "../share/libra"},
        {"/opt/x/bin/", "/opt//x/./bin/data", "data"},
        {"/a/b", "/a/b/", "."},
        {"/", "/usr/share/libra", "usr/share/libra"},
        {"/p/libexec/bin", "/q", "../../../q"},
    };
    char out[PATH_MAX];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CU_ASSERT_EQUAL(inputs_relpath(cases[i][0], cases[i][1], out, sizeof out), 0);
        CU_ASSERT_STRING_EQUAL(out, cases[i][2]);
    }
    CU_ASSERT_EQUAL(inputs_relpath("usr/bin", "/usr/share", out, sizeof out), -1);
    CU_ASSERT_EQUAL(inputs_relpath("/usr/bin", "/usr/../share", out, sizeof out), -1);
    CU_ASSERT_EQUAL(inputs_relpath("/a/b/c", "/d", out, 6), -1); /* "../../../d" */
}

/* $LIBRA_INPUTS; else the installed inputs beside the program's directory (a staged
 * prefix here); else the source tree's. */
static void test_inputs_dir(void)
{
    char prefix[PATH_MAX], bin[PATH_MAX], data[PATH_MAX], rel[PATH_MAX], out[PATH_MAX];
    char want[PATH_MAX];
    CU_ASSERT_EQUAL(inputs_dir_for("/some/where", "/usr/bin", out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, "/some/where");
    CU_ASSERT_EQUAL(inputs_dir_for("/some/where", NULL, out, 5), -1);

    CU_ASSERT_EQUAL_FATAL(inputs_relpath(LIBRA_BINDIR, LIBRA_PKGDATADIR, rel, sizeof rel), 0);
    snprintf(prefix, sizeof prefix, "%s/inputs-dir/stage", scratch());
    join(bin, prefix, "bin");
    make_file(bin, "libra");
    join(data, bin, rel);
    make_file(data, "hardware/a800.cfg");
    CU_ASSERT_EQUAL(inputs_dir_for("", bin, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(realpath(data, want));
    CU_ASSERT_STRING_EQUAL(out, want);

    /* a program outside an installed tree (the build tree): the source tree's */
    snprintf(bin, sizeof bin, "%s/inputs-dir/build/src", scratch());
    make_file(bin, "libra");
    CU_ASSERT_EQUAL(inputs_dir_for(NULL, bin, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, LIBRA_SRCDIR "/inputs");
    CU_ASSERT_EQUAL(inputs_dir_for(NULL, NULL, out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, LIBRA_SRCDIR "/inputs");
}

/* A config named on the command line by a relative name that is not in the working
 * directory: the inputs directory's file of that name, and the paths it names. */
static void test_inputs_find(void)
{
    char inputs[PATH_MAX], file[PATH_MAX], want[PATH_MAX], out[PATH_MAX];
    char *saved = getenv("LIBRA_INPUTS") ? strdup(getenv("LIBRA_INPUTS")) : NULL;
    snprintf(inputs, sizeof inputs, "%s/inputs-find", scratch());
    make_file(inputs, "hardware/a800.cfg");
    make_file(inputs, "models/qwen3-14b.cfg");
    make_file(inputs, "workloads/r2e-gym.cfg");
    join(file, inputs, "find-example.cfg");
    spit(file, "device = { hardware = \"hardware/a800.cfg\"; };\n");
    setenv("LIBRA_INPUTS", inputs, 1);

    CU_ASSERT_EQUAL(inputs_find("find-example.cfg", out, sizeof out), 0);
    CU_ASSERT_STRING_EQUAL(out, file);
    CU_ASSERT_EQUAL(inputs_find(file, out, sizeof out), -1);        /* absolute */
    CU_ASSERT_EQUAL(inputs_find("no-such.cfg", out, sizeof out), -1); /* nowhere */
    CU_ASSERT_EQUAL(inputs_find("find-example.cfg", out, 8), -1);   /* too long */
    struct libra_config c;
    CU_ASSERT_EQUAL(load_ok("find-example.cfg", &c), 0);
    CU_ASSERT_STRING_EQUAL(c.source, file);
    real(inputs, "hardware/a800.cfg", want);
    CU_ASSERT_STRING_EQUAL(c.device.hardware, want);

    if (saved) setenv("LIBRA_INPUTS", saved, 1);
    else unsetenv("LIBRA_INPUTS");
    free(saved);
}

/* ---- errors ------------------------------------------------------------------------ */

static void test_unreadable(void)
{
    struct libra_config c;
    char want[PATH_MAX + 64];
    const char *path = test_path("tests/configs/no-such-file.cfg");
    CU_ASSERT_EQUAL(config_load(path, &c, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: cannot read: No such file or directory (", path);
    CU_ASSERT_EQUAL(strncmp(err, want, strlen(want)), 0);
    path = test_path("tests/configs");
    CU_ASSERT_EQUAL(config_load(path, &c, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: cannot read: Is a directory (", path);
    CU_ASSERT_EQUAL(strncmp(err, want, strlen(want)), 0);
    /* err may be absent: still -1 */
    CU_ASSERT_EQUAL(config_load(path, &c, NULL, 0), -1);
}

/* "file:NN: " with the file as the caller named it. */
static int has_location(const char *msg, const char *path)
{
    size_t n = strlen(path);
    if (strncmp(msg, path, n) != 0 || msg[n] != ':' || !isdigit((unsigned char)msg[n + 1]))
        return 0;
    const char *p = msg + n + 1;
    while (isdigit((unsigned char)*p)) p++;
    return p[0] == ':' && p[1] == ' ';
}

/* One broken file: load fails, leaves the struct alone, and gives one message that
 * is located, contains the expected text and ends with a hint. */
static int check_bad_file(const char *path)
{
    char *text = slurp(path);
    if (!text || strncmp(text, "# expect: ", 10) != 0) {
        printf("\n    %s: first line must be '# expect: <substring>'\n", path);
        free(text);
        return 0;
    }
    char expect[1024];
    snprintf(expect, sizeof expect, "%.*s", (int)strcspn(text + 10, "\n"), text + 10);
    free(text);
    struct libra_config c, before;
    config_defaults(&c);
    before = c;
    err[0] = '\0';
    int rc = config_load(path, &c, err, sizeof err);
    size_t len = strlen(err);
    int ok = rc == -1 && strstr(err, expect) && has_location(err, path) && !strchr(err, '\n') &&
             len > 0 && err[len - 1] == ')' && memcmp(&c, &before, sizeof c) == 0;
    if (!ok) printf("\n    %s\n      expected: %s\n      got (rc %d): %s\n", path, expect, rc, err);
    return ok;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_bad_corpus(void)
{
    const char *dir = test_path("tests/configs/bad");
    DIR *d = opendir(dir);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    char *names[512];
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 512;)
        if (ends_with(e->d_name, ".cfg")) names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof names[0], cmp_names);
    CU_ASSERT(n >= 20);
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        CU_ASSERT(check_bad_file(path));
        free(names[i]);
    }
}

/* A short err buffer truncates; it is never overrun. */
static void test_short_err(void)
{
    struct libra_config c;
    char small[16];
    memset(small, 'x', sizeof small);
    CU_ASSERT_EQUAL(config_load(test_path("tests/configs/bad/unknown-key.cfg"), &c, small, 12), -1);
    CU_ASSERT_EQUAL(strlen(small), 11);
    CU_ASSERT_EQUAL(small[12], 'x');
}

/* config_where names the file:line a key was set at -- in an @included file too --
 * and the config file alone for a default; config_locate prefixes messages with it. */
static void test_where(void)
{
    size_t rows = 0;
    for (const struct cfg_key *k = cfg_schema; k->section; k++) rows++;
    CU_ASSERT(rows <= CFG_MAX_KEYS);
    char inc[PATH_MAX];
    snprintf(inc, sizeof inc, "%s", test_write_file("config", "where-inc", "\n\ntrain = { lr = 1e-4; };\n"));
    const char *inc_name = strrchr(inc, '/') + 1;
    char text[1024], want[PATH_MAX + 16], got[CFG_PATH_MAX + 16];
    snprintf(text, sizeof text, "# where\nrun = {\n  steps = 7;\n};\n@include \"%s\"\n"
             "rollout = { max_tokens = 4096; };\n", inc_name);
    const char *path = test_write_file("config", "where", text);
    struct libra_config *c = calloc(1, sizeof *c);
    int rc = config_load(path, c, err, sizeof err);
    if (rc) printf("\n    %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    snprintf(want, sizeof want, "%s:3", path);
    CU_ASSERT_STRING_EQUAL(config_where(c, "run.steps", got, sizeof got), want);
    snprintf(want, sizeof want, "%s:6", path);
    CU_ASSERT_STRING_EQUAL(config_where(c, "rollout.max_tokens", got, sizeof got), want);
    snprintf(want, sizeof want, "%s:3", inc);
    CU_ASSERT_STRING_EQUAL(config_where(c, "train.lr", got, sizeof got), want);
    CU_ASSERT_STRING_EQUAL(config_where(c, "rollout.slots", got, sizeof got), path);
    CU_ASSERT_STRING_EQUAL(config_where(c, "no.such_key", got, sizeof got), path);
    CU_ASSERT_STRING_EQUAL(config_where(c, "", got, sizeof got), path);
    CU_ASSERT(config_key_set(c, "run.steps") && config_key_set(c, "train.lr"));
    CU_ASSERT(!config_key_set(c, "rollout.slots") && !config_key_set(c, "no.such_key"));
    char msg[2048] = "rollout.max_tokens: 4096 is too long";
    config_locate(c, msg, sizeof msg);
    snprintf(want, sizeof want, "%s:6: rollout.max_tokens: 4096 is too long", path);
    CU_ASSERT_STRING_EQUAL(msg, want);
    snprintf(msg, sizeof msg, "no key: here");
    config_locate(c, msg, sizeof msg);
    snprintf(want, sizeof want, "%s: no key: here", path);
    CU_ASSERT_STRING_EQUAL(msg, want);
    free(c);
}

/* ---- the scheduler's keys --------------------------------------------------------- */

/* text as a config file must fail with "<file>:<line>: <msg>" (msg the whole rest
 * of the message, or with prefix_only its start) and leave the struct alone. */
static void expect_error_at(const char *text, int line, const char *msg, int prefix_only)
{
    static int serial;
    char name[32], want[2048];
    snprintf(name, sizeof name, "sched-bad-%d", serial++);
    const char *path = test_write_file("config", name, text);
    snprintf(want, sizeof want, "%s:%d: %s", path, line, msg);
    struct libra_config c, before;
    config_defaults(&c);
    before = c;
    int rc = config_load(path, &c, err, sizeof err);
    int same = prefix_only ? strncmp(err, want, strlen(want)) == 0 : strcmp(err, want) == 0;
    int ok = rc == -1 && same && memcmp(&c, &before, sizeof c) == 0;
    if (!ok) printf("\n    %s\n      expected: %s\n      got (rc %d): %s\n", path, want, rc, err);
    CU_ASSERT(ok);
}

static void expect_error(const char *text, int line, const char *msg)
{
    expect_error_at(text, line, msg, 0);
}

#define SCHED_BUCKETS(groups) "sched = {\n  buckets = (\n" groups "  );\n};\n"

static void test_bad_buckets(void)
{
    /* thresholds not strictly ascending: both buckets named */
    expect_error(SCHED_BUCKETS("    { name = \"medium\"; tp = [2]; max_tokens = 12000; },\n"
                               "    { name = \"short\"; tp = [1]; max_tokens = 4000; }\n"),
                 4, "sched.buckets[1].max_tokens: 4000 (bucket \"short\") is not above 12000, "
                    "the max_tokens of sched.buckets[0] (bucket \"medium\") (list the buckets "
                    "in strictly ascending max_tokens)");
    expect_error(SCHED_BUCKETS("    { name = \"a\"; tp = [1]; max_tokens = 100; },\n"
                               "    { name = \"b\"; tp = [2]; max_tokens = 200; },\n"
                               "    { name = \"c\"; tp = [4]; max_tokens = 200; }\n"),
                 5, "sched.buckets[2].max_tokens: 200 (bucket \"c\") is not above 200, the "
                    "max_tokens of sched.buckets[1] (bucket \"b\") (list the buckets in "
                    "strictly ascending max_tokens)");
    /* duplicate names */
    expect_error(SCHED_BUCKETS("    { name = \"short\"; tp = [1]; max_tokens = 100; },\n"
                               "    { name = \"long\"; tp = [2]; max_tokens = 200; },\n"
                               "    { name = \"short\"; tp = [4]; max_tokens = 300; }\n"),
                 5, "sched.buckets[2].name: \"short\" is also the name of sched.buckets[0] "
                    "(give each bucket its own name)");
    /* TP degrees: not a degree, repeated, too many, none, not an array */
    expect_error(SCHED_BUCKETS("    { name = \"a\"; tp = [1, 3]; max_tokens = 10; }\n"), 3,
                 "sched.buckets[0].tp[1]: 3 is not a TP degree (use 1, 2, 4, 8)");
    expect_error(SCHED_BUCKETS("    { name = \"a\"; tp = [1]; max_tokens = 10; },\n"
                               "    { name = \"b\"; tp = [4, 8, 4]; max_tokens = 20; }\n"),
                 4, "sched.buckets[1].tp[2]: 4 repeats tp[0] (list each TP degree once, in "
                    "order of preference)");
    expect_error(SCHED_BUCKETS("    { name = \"a\"; tp = [1, 2, 4, 8, 1]; max_tokens = 10; }\n"),
                 3, "sched.buckets[0].tp: has 5 entries, at most 4 (list each of 1, 2, 4, 8 at "
                    "most once)");
    expect_error(SCHED_BUCKETS("    { name = \"a\"; tp = []; max_tokens = 10; }\n"), 3,
                 "sched.buckets[0].tp: is empty (a bucket needs at least one TP degree, e.g. "
                 "tp = [1];)");
    expect_error(SCHED_BUCKETS("    { name = \"a\"; tp = 2; max_tokens = 10; }\n"), 3,
                 "sched.buckets[0].tp: expected an array of TP degrees, got an integer (write "
                 "e.g. tp = [4, 8];)");
    /* the list: empty, too long, not a list, an entry not a group */
    expect_error("sched = {\n  buckets = ();\n};\n", 2,
                 "sched.buckets: is empty (give at least one bucket, e.g. ( { name = \"short\"; "
                 "tp = [1]; max_tokens = 4000; } ))");
    expect_error("sched = {\n  buckets = [];\n};\n", 2,
                 "sched.buckets: is empty (give at least one bucket, e.g. ( { name = \"short\"; "
                 "tp = [1]; max_tokens = 4000; } ))");
    char nine[1024] = "sched = { buckets = (";
    for (int i = 0; i < 9; i++)
        snprintf(nine + strlen(nine), sizeof nine - strlen(nine),
                 "%s{ name = \"b%d\"; tp = [1]; max_tokens = %d; }", i ? ", " : " ", i, i + 1);
    strcat(nine, " ); };\n");
    expect_error(nine, 1, "sched.buckets: has 9 buckets, at most 8 (merge neighbouring buckets)");
    expect_error("sched = { buckets = { name = \"a\"; }; };\n", 1,
                 "sched.buckets: expected a list of groups, got a group (write buckets = ( { "
                 "name = \"short\"; tp = [1]; max_tokens = 4000; }, ... );)");
    expect_error(SCHED_BUCKETS("    { name = \"a\"; tp = [1]; max_tokens = 10; },\n    5\n"), 4,
                 "sched.buckets[1]: expected a group, got an integer (write { name = \"short\"; "
                 "tp = [1]; max_tokens = 4000; })");
    /* keys inside a group: unknown (near and far), missing, bad values */
    expect_error(SCHED_BUCKETS("    { name = \"a\"; tp = [1];\n      max_token = 10; }\n"), 4,
                 "sched.buckets[0].max_token: unknown key (did you mean 'max_tokens'?)");
    expect_error(SCHED_BUCKETS("    { name = \"a\"; tp = [1]; max_tokens = 10; size = 3; }\n"), 3,
                 "sched.buckets[0].size: unknown key (a bucket takes name, tp, max_tokens)");
    expect_error(SCHED_BUCKETS("    { name = \"a\"; tp = [1]; max_tokens = 10; },\n"
                               "    { name = \"b\"; max_tokens = 20; }\n"),
                 4, "sched.buckets[1].tp: missing (every bucket needs name, tp and max_tokens, "
                    "e.g. { name = \"short\"; tp = [1]; max_tokens = 4000; })");
    expect_error(SCHED_BUCKETS("    { name = \"a\"; tp = [1]; max_tokens = 0; }\n"), 3,
                 "sched.buckets[0].max_tokens: 0 is out of range (allowed 1 .. 1000000000)");
    expect_error(SCHED_BUCKETS("    { name = \"a\"; tp = [1]; max_tokens = 1.5; }\n"), 3,
                 "sched.buckets[0].max_tokens: expected an integer, got a float (1.5) (write a "
                 "whole number without a decimal point)");
    expect_error(SCHED_BUCKETS("    { name = \"\"; tp = [1]; max_tokens = 10; }\n"), 3,
                 "sched.buckets[0].name: must not be empty (give 1 to 31 characters)");
    expect_error(SCHED_BUCKETS("    { name = \"abcdefghijklmnopqrstuvwxyz012345\"; tp = [1]; "
                               "max_tokens = 10; }\n"),
                 3, "sched.buckets[0].name: is too long: 32 characters (at most 31)");
    expect_error(SCHED_BUCKETS("    { name = \"a b\"; tp = [1]; max_tokens = 10; }\n"), 3,
                 "sched.buckets[0].name: \"a b\" has a character outside [A-Za-z0-9_.-] (' ' at "
                 "position 2) (the name goes into file names; use letters, digits, '_', '.' or "
                 "'-')");
}

/* train.colocate: the CPU, CUDA and emulated devices, static on-policy plans whose
 * n_train is their rollout GPUs; on the CPU and CUDA devices every instance a replica. */
#define COLOCATE(device, train, plan)                                                      \
    "device = { type = \"" device "\"; };\nenv = { name = \"calc\"; };\n"                 \
    "train = { " train " };\nplan = { " plan " };\n"
static void test_colocate(void)
{
    static const char *const good[] = {
        COLOCATE("cpu", "max_staleness = 0; colocate = 1;", "n_train = 3; rollout_tp = [1, 1, 1];"),
        COLOCATE("cpu", "max_staleness = 0; colocate = 1;",
                 "n_train = 4; train_tp = 2; rollout_tp = [2, 2];"),
        COLOCATE("cuda", "max_staleness = 0; colocate = 1;", "n_train = 2; rollout_tp = [1, 1];"),
        "device = { type = \"emu\"; };\ntrain = { max_staleness = 0; colocate = 1; };\n"
        "plan = { n_train = 4; rollout_tp = [2, 1, 1]; };\n"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "colocate-%zu", i);
        struct libra_config c;
        CU_ASSERT_EQUAL_FATAL(load_ok(test_write_file("config", name, good[i]), &c), 0);
        CU_ASSERT_EQUAL(c.train.colocate, 1);
        CU_ASSERT_EQUAL(c.plan.fixed.colocate, 1);
        CU_ASSERT_EQUAL(plan_spec_workers(&c.plan.fixed), c.plan.fixed.n_train);
    }
    expect_error(COLOCATE("cpu", "max_staleness = 0; colocate = 1;",
                          "n_train = 3; rollout_tp = [2, 1];"), 3,
                 "train.colocate: on device \"cpu\" a rank trains on the shard it serves with: "
                 "every plan.rollout_tp entry must equal plan.train_tp = 1 (rollout_tp has 2)");
    expect_error(COLOCATE("cuda", "max_staleness = 0; colocate = 1;",
                          "n_train = 3; rollout_tp = [1, 2];"), 3,
                 "train.colocate: on device \"cuda\" a rank trains on the shard it serves with: "
                 "every plan.rollout_tp entry must equal plan.train_tp = 1 (rollout_tp has 2)");
    /* a schedule that changes the training replicas' TP re-cuts the state on a real
     * device, and lends no rank there */
    expect_error("device = { type = \"cpu\"; };\nenv = { name = \"calc\"; };\n"
                 "plan = { mode = \"schedule\"; schedule = ( { n_train = 2; rollout_tp = [1, 1]; },\n"
                 "  { n_train = 2; train_tp = 2; n_hybrid = 0; rollout_tp = [1, 1]; },\n"
                 "  { n_train = 2; n_hybrid = 1; rollout_tp = [1]; } ); };\n", 3,
                 "plan.schedule: entry 2 lends 1 ranks (n_hybrid) in a schedule whose training "
                 "replicas change their TP degree (entries 0 and 1): on device \"cpu\" a lent "
                 "rank takes its partner's shard as it is; keep train_tp or drop n_hybrid");
    {
        static const char *const ok[] = {
            "device = { type = \"cpu\"; };\nenv = { name = \"calc\"; };\n"
            "plan = { mode = \"schedule\"; schedule = ( { n_train = 2; rollout_tp = [1]; }, "
            "{ n_train = 2; train_tp = 2; rollout_tp = [1]; } ); };\n",
            "plan = { mode = \"schedule\"; schedule = ( { n_train = 2; rollout_tp = [1]; }, "
            "{ n_train = 2; train_tp = 2; n_hybrid = 2; rollout_tp = [1]; } ); };\n"};
        for (int k = 0; k < 2; k++) {
            char name[32];
            snprintf(name, sizeof name, "sched-tp-%d", k);
            struct libra_config c;
            CU_ASSERT_EQUAL(load_ok(test_write_file("config", name, ok[k]), &c), 0);
        }
    }
    expect_error(COLOCATE("cpu", "colocate = 1;", "n_train = 2; rollout_tp = [1, 1];"), 3,
                 "train.colocate: is on-policy: set train.max_staleness = 0 (it is 1)");
    expect_error(COLOCATE("cpu", "max_staleness = 0; colocate = 1;",
                          "n_train = 1; rollout_tp = [1, 1];"), 3,
                 "train.colocate: every GPU both serves and trains: set plan.n_train = 2 (the "
                 "GPUs of plan.rollout_tp) and no plan.n_hybrid (n_train is 1)");
}
#undef COLOCATE

static void test_bad_sched_rules(void)
{
    /* default_bucket must name a bucket (the defaults, or the file's list) */
    expect_error("sched = {\n  type = \"cmlfq\";\n  default_bucket = \"huge\";\n};\n", 3,
                 "sched.default_bucket: \"huge\" names no bucket (use \"short\", \"medium\" or "
                 "\"long\", or \"\" to let the tree place first turns)");
    expect_error("sched = {\n  default_bucket = \"long\";\n"
                 "  buckets = ( { name = \"x\"; tp = [1]; max_tokens = 9; } );\n};\n", 2,
                 "sched.default_bucket: \"long\" names no bucket (use \"x\", or \"\" to let the "
                 "tree place first turns)");
    /* payload classes in order */
    expect_error("sched = {\n  payload_small = 600;\n  payload_large = 599;\n};\n", 3,
                 "sched.payload_large: 599 is below sched.payload_small = 600 (a large tool "
                 "return is at least as long as a small one: raise payload_large or lower "
                 "payload_small)");
    expect_error("sched = {\n  payload_small = 6000;\n};\n", 2,
                 "sched.payload_small: 6000 is above sched.payload_large = 5000 (a small tool "
                 "return is at most as long as a large one: lower payload_small or raise "
                 "payload_large)");
    /* keys the chosen type, balance or instance queue does not use */
    expect_error("sched = {\n  scout_timeout_s = 10;\n};\n", 2,
                 "sched.scout_timeout_s: only used with sched.type = \"la_mlfq\" (this run uses "
                 "\"cmlfq\"; remove it)");
    expect_error("sched = {\n  type = \"la_mlfq\";\n  window = -5;\n};\n", 3,
                 "sched.window: only used with sched.type = \"cmlfq\" (this run uses "
                 "\"la_mlfq\"; remove it)");
    expect_error("sched = { weight_tp4 = 2.0; };\n", 1,
                 "sched.weight_tp4: only used with sched.balance = \"weighted\" (this run uses "
                 "\"kv\"; remove it)");
    expect_error("sched = {\n  affinity = 0;\n};\n", 2,
                 "sched.affinity: only used with sched.type = \"load_balance\" or "
                 "\"length_aware\" (this run uses \"cmlfq\"; remove it)");
    expect_error("sched = {\n  type = \"load_balance\";\n"
                 "  buckets = ( { name = \"x\"; tp = [1]; max_tokens = 9; } );\n};\n", 3,
                 "sched.buckets: only used with sched.type = \"cmlfq\", \"length_aware\" or "
                 "\"la_mlfq\" (this run uses \"load_balance\"; remove it)");
    expect_error("sched = {\n  instance_queue = \"fifo\";\n  queue_age_s = 5;\n};\n", 3,
                 "sched.queue_age_s: only used with sched.instance_queue = \"mlfq\" (this run "
                 "uses \"fifo\"; remove it)");
    /* values */
    expect_error("sched = { type = \"fcfs\"; };\n", 1,
                 "sched.type: \"fcfs\" is not allowed (use one of cmlfq, load_balance, "
                 "length_aware, la_mlfq)");
    expect_error("sched = { balance = \"weighted\";\n  weight_tp1 = 0; };\n", 2,
                 "sched.weight_tp1: 0.0 is out of range (allowed 0.01 .. 1000000.0)");
    expect_error("sched = { fallback = 2; };\n", 1,
                 "sched.fallback: 2 is out of range (allowed 0 .. 1)");
    expect_error_at("sched = { tree_in = \"no/such.tree\"; };\n", 1,
                    "sched.tree_in: file \"no/such.tree\" not found (tried ", 1);
}

/* The schema's `when` rows: the deciding key is an enum of the same section that
 * comes earlier in the table (the loader reads it first), and allows every value
 * the row names. */
static void test_when_rows(void)
{
    int n = 0;
    for (const struct cfg_key *k = cfg_schema; k->section; k++) {
        if (!k->when) continue;
        n++;
        const struct cfg_key *w = cfg_schema_find(k->section, k->when);
        CU_ASSERT_PTR_NOT_NULL_FATAL(w);
        CU_ASSERT_EQUAL(w->type, CFG_ENUM);
        CU_ASSERT(w < k);
        CU_ASSERT_PTR_NOT_NULL_FATAL(k->when_in);
        char vals[256];
        snprintf(vals, sizeof vals, "%s", k->when_in);
        for (char *v = strtok(vals, ", "); v; v = strtok(NULL, ", "))
            CU_ASSERT(cfg_allowed_has(w, v));
    }
    CU_ASSERT_EQUAL(n, 53);
    /* the default buckets satisfy the rules a file must meet */
    CU_ASSERT(cfg_n_default_buckets >= 1 && cfg_n_default_buckets <= CFG_MAX_BUCKETS);
    for (int i = 1; i < cfg_n_default_buckets; i++)
        CU_ASSERT(cfg_default_buckets[i].max_tokens > cfg_default_buckets[i - 1].max_tokens);
}

/* What a resume may not change: the identity lists it; two configs differing in
 * train.batch_size and env.name differ in exactly those keys, with both values. */
static void test_identity(void)
{
    struct libra_config a, b;
    config_defaults(&a);
    config_defaults(&b);
    char ia[4096], ib[4096], diff[2048];
    CU_ASSERT_FATAL(config_identity(&a, ia, sizeof ia) > 0);
    CU_ASSERT_FATAL(config_identity(&b, ib, sizeof ib) > 0);
    CU_ASSERT_STRING_EQUAL(ia, ib);
    CU_ASSERT_EQUAL(config_identity_diff(ia, ib, diff, sizeof diff), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(ia, "train.batch_size = "));
    CU_ASSERT_PTR_NOT_NULL(strstr(ia, "rollout.n_samples = "));
    CU_ASSERT_PTR_NOT_NULL(strstr(ia, "run.seed = "));
    b.train.batch_size = a.train.batch_size * 2;
    snprintf(b.env.name, sizeof b.env.name, "calc");
    b.train.lr = a.train.lr * 10; /* may change: not in the identity */
    CU_ASSERT_FATAL(config_identity(&b, ib, sizeof ib) > 0);
    CU_ASSERT_EQUAL(config_identity_diff(ia, ib, diff, sizeof diff), 2);
    char want[128];
    snprintf(want, sizeof want, "train.batch_size: \"%d\" (checkpoint) vs \"%d\" (now)",
             a.train.batch_size, b.train.batch_size);
    CU_ASSERT_PTR_NOT_NULL(strstr(diff, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(diff, "env.name: \"emu\" (checkpoint) vs \"calc\" (now)"));
    CU_ASSERT_EQUAL(config_identity(&a, ia, 16), 0); /* too small a buffer */
}

static const struct test_case load_cases[] = {
    {"defaults", test_defaults},
    {"good/minimal", test_good_minimal},
    {"good/static-full", test_good_static_full},
    {"good/schedule", test_good_schedule},
    {"good/bounds", test_good_bounds},
    {"good/sched-cmlfq", test_good_sched_cmlfq},
    {"sched types", test_good_sched_types},
    {"inputs/emu-*.cfg", test_examples},
    {"inputs/cuda-*.cfg", test_cuda_examples},
    {"path resolution", test_path_resolution},
    {"inputs_relpath", test_inputs_relpath},
    {"inputs_dir", test_inputs_dir},
    {"inputs_find and a config named on the command line", test_inputs_find},
    {NULL, NULL},
};

static const struct test_case print_cases[] = {
    {"round trip", test_round_trip},
    {"every key printed and commented", test_to_string_keys},
    {"docs/config.md in step", test_reference_in_step},
    {"libra.cfg(5)", test_reference_man},
    {"the identity a resume keeps, and its differences", test_identity},
    {NULL, NULL},
};

static const struct test_case world_cases[] = {
    {"check_world", test_check_world},
    {NULL, NULL},
};

static const struct test_case error_cases[] = {
    {"unreadable file", test_unreadable},
    {"bad corpus", test_bad_corpus},
    {"short err buffer", test_short_err},
    {"file:line of a key (config_where)", test_where},
    {"sched.buckets errors", test_bad_buckets},
    {"sched cross-key rules", test_bad_sched_rules},
    {"train.colocate: devices and plans", test_colocate},
    {"sched when rows", test_when_rows},
    {NULL, NULL},
};

static const struct test_suite suites[] = {
    {"config load", load_cases},
    {"config print", print_cases},
    {"config world", world_cases},
    {"config errors", error_cases},
    {NULL, NULL},
};

int main(void)
{
    setenv("LIBRA_INPUTS", test_path("inputs"), 0);
    return test_main(suites);
}
