/*
 * Tests of the configuration subsystem (include/libra/config.h): defaults, the
 * files in tests/configs/good/ and the example inputs/emu-*.cfg, the round trip
 * through config_to_string, path resolution, config_check_world, docs/config.md
 * against the generated reference, and the corpus of broken files in
 * tests/configs/bad/ (each names, on its first line, a substring of the message
 * it must produce: "# expect: <substring>").
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
}

static void assert_tp(const struct plan_spec *p, int n_train, int n_hybrid, int n_tp,
                      const int *tp)
{
    CU_ASSERT_EQUAL(p->n_train, n_train);
    CU_ASSERT_EQUAL(p->n_hybrid, n_hybrid);
    CU_ASSERT_EQUAL_FATAL(p->n_tp, n_tp);
    for (int i = 0; i < n_tp; i++) CU_ASSERT_EQUAL(p->rollout_tp[i], tp[i]);
}

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
    CU_ASSERT_STRING_EQUAL(c.sched.policy, "least_loaded");
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
        "inputs/emu-search-16gpu.cfg",
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) round_trip(test_path(files[i]));
    /* strings that need escaping survive */
    char path[PATH_MAX];
    join(path, scratch(), "escapes.cfg");
    CU_ASSERT_EQUAL_FATAL(spit(path, "output = { dir = \"a \\\"b\\\\c\\td\\x01\"; };\n"), 0);
    struct libra_config c;
    CU_ASSERT_EQUAL_FATAL(load_ok(path, &c), 0);
    CU_ASSERT_STRING_EQUAL(c.output.dir, "a \"b\\c\td\x01");
    round_trip(path);
}

/* Every key is printed (inside its section) and every assignment is commented. */
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
        "plan.n_train", "plan.n_hybrid", "plan.rollout_tp", "sched.policy", "env.name",
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
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        if (line[0] != '#' && strchr(line, '=') && !ends_with(line, "{"))
            CU_ASSERT_PTR_NOT_NULL(strchr(line, '#'));
    free(text);
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

static const struct test_case load_cases[] = {
    {"defaults", test_defaults},
    {"good/minimal", test_good_minimal},
    {"good/static-full", test_good_static_full},
    {"good/schedule", test_good_schedule},
    {"good/bounds", test_good_bounds},
    {"inputs/emu-*.cfg", test_examples},
    {"path resolution", test_path_resolution},
    {NULL, NULL},
};

static const struct test_case print_cases[] = {
    {"round trip", test_round_trip},
    {"every key printed and commented", test_to_string_keys},
    {"docs/config.md in step", test_reference_in_step},
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
