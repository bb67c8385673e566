/*
 * Tests of training checkpoints: state.h5 round trips (random groups of random
 * trajectories, zero-length everything), states that save refuses, state files that
 * load refuses (each names its dataset or attribute; truncated, overwritten, empty
 * and missing files), and the directory protocol: begin / commit / list / prune with
 * keep, reruns of a step, stale .tmp directories, missing or wrong marks, damaged
 * state or model files making ckpt_load_latest fall back to an older checkpoint, and
 * roots that cannot be created. model.h5 is a tiny real model written by tfm_save.
 * Run under ASan once to check that failed loads leave nothing allocated.
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/adamw.h"
#include "libra/checkpoint.h"
#include "libra/h5sum.h"
#include "libra/rng.h"
#include "libra/tfm_io.h"
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char err[4096];

/* A fresh directory <scratch>/name (removed first if a previous test left it). */
static const char *scratch(const char *name)
{
    static char buf[8][PATH_MAX];
    static int next;
    const char *dir = test_scratch_dir("checkpoint");
    CU_ASSERT_FATAL(dir != NULL);
    char *out = buf[next++ % 8];
    snprintf(out, sizeof buf[0], "%s/%s", dir, name);
    return out;
}

/* snprintf into a PATH_MAX buffer, failing the test if the path does not fit. */
__attribute__((format(printf, 2, 3))) static void pathf(char *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, PATH_MAX, fmt, ap);
    va_end(ap);
    CU_ASSERT_FATAL(n >= 0 && n < PATH_MAX);
}

static int is_zero(const void *x, size_t n)
{
    const unsigned char *b = x;
    for (size_t i = 0; i < n; i++)
        if (b[i]) return 0;
    return 1;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    CU_ASSERT_FATAL(f != NULL);
    if (n) CU_ASSERT_FATAL(fwrite(data, 1, n, f) == n);
    CU_ASSERT_FATAL(fclose(f) == 0);
}

/* ---- states ---- */

static uint64_t below(struct rng *r, uint64_t n) { return rng_below(r, n); }

/* A random trajectory of n tokens (n may be 0), allocated like ckpt_state_load does. */
static void make_traj(struct ckpt_traj *t, struct rng *r, int n)
{
    memset(t, 0, sizeof *t);
    t->n_tokens = n;
    t->prompt_tokens = n ? (int32_t)below(r, (uint64_t)n + 1) : 0;
    t->version_start = (int32_t)below(r, 50);
    t->version_end = t->version_start + (int32_t)below(r, 3);
    t->turns = (int32_t)below(r, 5);
    t->tool_calls = (int32_t)below(r, 4);
    t->tool_failures = t->tool_calls ? (int32_t)below(r, (uint64_t)t->tool_calls + 1) : 0;
    t->correct = (int32_t)below(r, 2);
    t->reward = rng_normal(r);
    if (!n) return;
    t->ids = malloc(sizeof *t->ids * (size_t)n);
    t->mask = malloc(sizeof *t->mask * (size_t)n);
    t->logp = malloc(sizeof *t->logp * (size_t)n);
    t->versions = malloc(sizeof *t->versions * (size_t)n);
    for (int i = 0; i < n; i++) {
        int gen = i >= t->prompt_tokens && below(r, 4) != 0;
        t->ids[i] = (int32_t)below(r, 151000);
        t->mask[i] = (uint8_t)gen;
        t->logp[i] = gen ? (float)-rng_exponential(r, 1.0) : 0.0f;
        t->versions[i] = gen ? t->version_start : -1;
    }
}

/* A random state; with empty, no groups, no relaunch, nothing trained. */
static void make_state(struct ckpt_state *s, uint64_t seed, int empty)
{
    struct rng r;
    rng_init(&r, seed, 7, 7, 7);
    memset(s, 0, sizeof *s);
    s->step = (int32_t)below(&r, 1000);
    s->version = s->step + 1;
    s->seed = rng_u64(&r);
    s->next_prompt = (int64_t)below(&r, 1u << 30) + ((int64_t)1 << 33);
    s->baseline = rng_normal(&r);
    s->baseline_set = 1;
    s->elapsed_s = 1234.5 * rng_uniform(&r);
    s->reward_ma = rng_uniform(&r);
    s->reward_ma_n = 17;
    s->time_to_target_s = -1;
    if (empty) return;
    s->n_relaunch = (int64_t)below(&r, 5) + 1;
    s->relaunch = malloc(sizeof *s->relaunch * (size_t)s->n_relaunch);
    for (int64_t i = 0; i < s->n_relaunch; i++) s->relaunch[i] = (int64_t)below(&r, 1u << 31);
    s->n_trained = (int64_t)below(&r, 40) + 1;
    s->trained = malloc(sizeof *s->trained * (size_t)s->n_trained);
    for (int64_t i = 0; i < s->n_trained; i++) s->trained[i] = i * 3 + 1;
    s->n_groups = (int64_t)below(&r, 4) + 2;
    s->groups = calloc((size_t)s->n_groups, sizeof *s->groups);
    for (int64_t g = 0; g < s->n_groups; g++) {
        struct ckpt_group *gr = &s->groups[g];
        gr->prompt_id = (int64_t)below(&r, 1u << 20);
        gr->launch_version = (int32_t)below(&r, 40);
        gr->n = g == 1 ? 0 : (int32_t)below(&r, 5) + 1; /* group 1 is empty */
        gr->t = gr->n ? calloc((size_t)gr->n, sizeof *gr->t) : NULL;
        for (int k = 0; k < gr->n; k++)
            make_traj(&gr->t[k], &r, k == 0 ? 0 : (int)below(&r, 60) + 1);
    }
}

static int arrays_equal(const void *a, const void *b, size_t n)
{
    return n == 0 || memcmp(a, b, n) == 0;
}

/* Field by field, bitwise (floats included). */
static int states_equal(const struct ckpt_state *a, const struct ckpt_state *b)
{
    if (a->step != b->step || a->version != b->version || a->seed != b->seed ||
        a->next_prompt != b->next_prompt || memcmp(&a->baseline, &b->baseline, 8) ||
        a->baseline_set != b->baseline_set || memcmp(&a->elapsed_s, &b->elapsed_s, 8) ||
        memcmp(&a->reward_ma, &b->reward_ma, 8) || a->reward_ma_n != b->reward_ma_n ||
        memcmp(&a->time_to_target_s, &b->time_to_target_s, 8) ||
        a->n_relaunch != b->n_relaunch || a->n_trained != b->n_trained ||
        a->n_groups != b->n_groups || strcmp(a->identity, b->identity) != 0 ||
        !a->config != !b->config || (a->config && strcmp(a->config, b->config) != 0))
        return 0;
    if (!arrays_equal(a->relaunch, b->relaunch, sizeof(int64_t) * (size_t)a->n_relaunch) ||
        !arrays_equal(a->trained, b->trained, sizeof(int64_t) * (size_t)a->n_trained))
        return 0;
    for (int64_t g = 0; g < a->n_groups; g++) {
        const struct ckpt_group *x = &a->groups[g], *y = &b->groups[g];
        if (x->prompt_id != y->prompt_id || x->launch_version != y->launch_version ||
            x->n != y->n)
            return 0;
        for (int k = 0; k < x->n; k++) {
            const struct ckpt_traj *p = &x->t[k], *q = &y->t[k];
            size_t n = (size_t)p->n_tokens;
            if (p->n_tokens != q->n_tokens || p->prompt_tokens != q->prompt_tokens ||
                p->version_start != q->version_start || p->version_end != q->version_end ||
                p->turns != q->turns || p->tool_calls != q->tool_calls ||
                p->tool_failures != q->tool_failures || p->correct != q->correct ||
                memcmp(&p->reward, &q->reward, 8) || !arrays_equal(p->ids, q->ids, 4 * n) ||
                !arrays_equal(p->mask, q->mask, n) || !arrays_equal(p->logp, q->logp, 4 * n) ||
                !arrays_equal(p->versions, q->versions, 4 * n))
                return 0;
            if (n == 0 && (q->ids || q->mask || q->logp || q->versions)) return 0;
        }
    }
    return 1;
}

static int count_matching(const char *dir, const char *part)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, part) != NULL;
    closedir(d);
    return n;
}

static void test_state_roundtrip(void)
{
    const char *dir = scratch("roundtrip");
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0 || errno == EEXIST);
    char path[PATH_MAX];
    pathf(path, "%s/state.h5", dir);
    for (uint64_t seed = 1; seed <= 6; seed++) {
        struct ckpt_state a, b;
        make_state(&a, seed, seed == 6);
        if (seed % 2) { /* the segment's configuration, and none (older files) */
            a.config = malloc(20000);
            for (int i = 0; i < 400; i++) sprintf(a.config + 40 * i, "section.key%-5d = %-20d\n", i, i);
            snprintf(a.identity, sizeof a.identity, "run.seed = %llu\n", (unsigned long long)seed);
        }
        err[0] = '\0';
        CU_ASSERT_EQUAL_FATAL(ckpt_state_save(path, &a, err, sizeof err), 0);
        /* Saved twice: the second replaces the first atomically. */
        CU_ASSERT_EQUAL_FATAL(ckpt_state_save(path, &a, err, sizeof err), 0);
        memset(&b, 0x5a, sizeof b);
        CU_ASSERT_EQUAL_FATAL(ckpt_state_load(path, &b, err, sizeof err), 0);
        if (!states_equal(&a, &b)) fprintf(stderr, "\n  seed %llu differs\n",
                                           (unsigned long long)seed);
        CU_ASSERT(states_equal(&a, &b));
        if (seed == 6) {
            CU_ASSERT(b.n_groups == 0 && b.groups == NULL && b.n_trained == 0 &&
                      b.trained == NULL && b.n_relaunch == 0 && b.relaunch == NULL);
        } else {
            CU_ASSERT(b.groups[1].n == 0 && b.groups[1].t == NULL);
            CU_ASSERT(b.groups[0].t[0].n_tokens == 0 && b.groups[0].t[0].ids == NULL);
        }
        /* Plain HDF5 reads the file despite the trailer. */
        hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        CU_ASSERT_FATAL(f >= 0);
        int64_t step = -1, fmt = -1;
        hid_t at = H5Aopen(f, "step", H5P_DEFAULT);
        CU_ASSERT(at >= 0 && H5Aread(at, H5T_NATIVE_INT64, &step) >= 0);
        H5Aclose(at);
        at = H5Aopen(f, "libra_checkpoint_format", H5P_DEFAULT);
        CU_ASSERT(at >= 0 && H5Aread(at, H5T_NATIVE_INT64, &fmt) >= 0);
        H5Aclose(at);
        CU_ASSERT(step == a.step && fmt == CKPT_FORMAT_VERSION);
        hid_t d = H5Dopen2(f, "/traj/ids", H5P_DEFAULT), sp = H5Dget_space(d);
        int64_t ntok = 0;
        for (int64_t g = 0; g < a.n_groups; g++)
            for (int k = 0; k < a.groups[g].n; k++) ntok += a.groups[g].t[k].n_tokens;
        CU_ASSERT_EQUAL(H5Sget_simple_extent_npoints(sp), ntok);
        H5Sclose(sp);
        H5Dclose(d);
        H5Fclose(f);
        ckpt_state_free(&a);
        ckpt_state_free(&b);
        CU_ASSERT(is_zero(&b, sizeof b));
    }
    CU_ASSERT_EQUAL(count_matching(dir, ".tmp-"), 0);
    ckpt_state_free(NULL);
}

/* Saving a state that would not load fails, names the field and writes nothing. */
static void expect_save_fails(struct ckpt_state *s, const char *want)
{
    const char *dir = scratch("badsave");
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0 || errno == EEXIST);
    char path[PATH_MAX];
    pathf(path, "%s/state.h5", dir);
    err[0] = '\0';
    CU_ASSERT_EQUAL(ckpt_state_save(path, s, err, sizeof err), -1);
    CU_ASSERT(!exists(path));
    CU_ASSERT_EQUAL(count_matching(dir, ".tmp-"), 0);
    if (!strstr(err, want)) {
        CU_FAIL("message");
        fprintf(stderr, "\n  expected \"%s\" in: %s\n", want, err);
    }
}

static void test_state_save_rejects(void)
{
    struct ckpt_state s;
    make_state(&s, 11, 0);
    struct ckpt_traj *t = &s.groups[0].t[1];
    CU_ASSERT_FATAL(t->n_tokens > 0);
    uint8_t m = t->mask[0];
    t->mask[0] = 2;
    expect_save_fails(&s, "/traj/mask");
    t->mask[0] = m;
    int32_t pt = t->prompt_tokens;
    t->prompt_tokens = t->n_tokens + 1;
    expect_save_fails(&s, "/traj/prompt_tokens");
    t->prompt_tokens = pt;
    double r = t->reward;
    t->reward = NAN;
    expect_save_fails(&s, "/traj/reward");
    t->reward = r;
    int32_t n = s.groups[0].n;
    s.groups[0].n = -1;
    expect_save_fails(&s, "/groups/n");
    s.groups[0].n = n;
    s.trained[0] = -3;
    expect_save_fails(&s, "/trained");
    s.trained[0] = 0;
    ckpt_state_free(&s);
}

/* ---- files that must not load ---- */

/* Loads path expecting failure with want in the message and nothing left allocated. */
static void expect_load_fails(const char *path, const char *want)
{
    struct ckpt_state s;
    memset(&s, 0x5a, sizeof s);
    err[0] = '\0';
    CU_ASSERT_EQUAL(ckpt_state_load(path, &s, err, sizeof err), -1);
    CU_ASSERT(is_zero(&s, sizeof s));
    CU_ASSERT(strstr(err, path) != NULL);
    if (want && !strstr(err, want)) {
        CU_FAIL("message");
        fprintf(stderr, "\n  expected \"%s\" in: %s\n", want, err);
    }
}

/* The trailer ckpt_state_save appends (src/io/ckpt_state.c), computed independently:
 * "LIBRACK1", image length, hash of the image (8-byte little-endian words through
 * rng_mix, the last one zero-padded, then the length mixed in). */
static void reseal(const char *path)
{
    struct stat st;
    CU_ASSERT_FATAL(stat(path, &st) == 0);
    size_t size = (size_t)st.st_size;
    unsigned char *b = malloc(size + 32);
    FILE *f = fopen(path, "rb");
    CU_ASSERT_FATAL(f && fread(b, 1, size, f) == size);
    fclose(f);
    uint64_t len = size;
    /* Strip an old trailer if HDF5 left it (it normally truncates to its own end). */
    if (size >= 24 && memcmp(b + size - 24, "LIBRACK1", 8) == 0) len = size - 24;
    uint64_t h = 0x6c69627261636b70ULL;
    for (uint64_t i = 0; i < len; i += 8) {
        uint64_t w = 0;
        for (int k = 7; k >= 0; k--) w = w << 8 | (i + (uint64_t)k < len ? b[i + k] : 0);
        h = rng_mix(h ^ w);
    }
    h = rng_mix(h ^ len);
    unsigned char *t = b + len;
    memcpy(t, "LIBRACK1", 8);
    for (int k = 0; k < 8; k++) t[8 + k] = (unsigned char)(len >> (8 * k));
    for (int k = 0; k < 8; k++) t[16 + k] = (unsigned char)(h >> (8 * k));
    write_bytes(path, b, len + 24);
    free(b);
}

static hid_t open_rw(const char *path)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    return f;
}

/* Overwrites element i of a 1-D dataset with value (of mtype); with resum, the
 * dataset's checksum is made to match (a writer that got the value wrong but is
 * consistent), so that the loader's own checks of meaning are what is tested. */
static void poke_sum(const char *path, const char *dset, hsize_t i, hid_t mtype,
                     const void *value, int resum)
{
    hid_t f = open_rw(path), d = H5Dopen2(f, dset, H5P_DEFAULT);
    CU_ASSERT_FATAL(d >= 0);
    hid_t fs = H5Dget_space(d);
    hsize_t one = 1, n = 0;
    hid_t ms = H5Screate_simple(1, &one, NULL);
    CU_ASSERT_FATAL(H5Sselect_hyperslab(fs, H5S_SELECT_SET, &i, NULL, &one, NULL) >= 0);
    CU_ASSERT_FATAL(H5Dwrite(d, mtype, ms, fs, H5P_DEFAULT, value) >= 0);
    if (resum) {
        H5Sget_simple_extent_dims(fs, &n, NULL);
        size_t bytes = (size_t)n * H5Tget_size(mtype);
        void *all = malloc(bytes);
        CU_ASSERT_FATAL(H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, all) >= 0);
        CU_ASSERT_FATAL(H5Adelete(d, H5SUM_ATTR) >= 0);
        CU_ASSERT_FATAL(h5sum_put(d, all, bytes, path, err, sizeof err) == 0);
        free(all);
    }
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(d);
    CU_ASSERT_FATAL(H5Fclose(f) >= 0);
    reseal(path);
}

static void poke(const char *path, const char *dset, hsize_t i, hid_t mtype, const void *value)
{
    poke_sum(path, dset, i, mtype, value, 1);
}

static void set_root_attr_i64(const char *path, const char *name, int64_t v)
{
    hid_t f = open_rw(path), a = H5Aopen(f, name, H5P_DEFAULT);
    CU_ASSERT_FATAL(a >= 0);
    CU_ASSERT_FATAL(H5Awrite(a, H5T_NATIVE_INT64, &v) >= 0);
    H5Aclose(a);
    CU_ASSERT_FATAL(H5Fclose(f) >= 0);
    reseal(path);
}

static void test_state_load_rejects(void)
{
    const char *dir = scratch("badload");
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0 || errno == EEXIST);
    char path[PATH_MAX];
    pathf(path, "%s/state.h5", dir);
    struct ckpt_state s;
    make_state(&s, 21, 0);
    /* Find a trajectory with tokens and its row / first token in the flat tables. */
    int64_t row = 0, tok = 0, g0 = -1;
    int k0 = -1;
    for (int64_t g = 0; g < s.n_groups && g0 < 0; g++)
        for (int k = 0; k < s.groups[g].n; k++, row++) {
            if (s.groups[g].t[k].n_tokens > 1) {
                g0 = g;
                k0 = k;
                break;
            }
            tok += s.groups[g].t[k].n_tokens;
        }
    CU_ASSERT_FATAL(g0 >= 0);
    const struct ckpt_traj *t = &s.groups[g0].t[k0];
    CU_ASSERT_EQUAL_FATAL(ckpt_state_save(path, &s, err, sizeof err), 0);
    struct stat st;
    CU_ASSERT_FATAL(stat(path, &st) == 0);
    size_t size = (size_t)st.st_size;
    unsigned char *good = malloc(size);
    FILE *f = fopen(path, "rb");
    CU_ASSERT_FATAL(f && fread(good, 1, size, f) == size);
    fclose(f);

    uint8_t bad_mask = 7;
    poke(path, "/traj/mask", (hsize_t)tok, H5T_NATIVE_UINT8, &bad_mask);
    expect_load_fails(path, "/traj/mask");

    write_bytes(path, good, size);
    int32_t n = s.groups[0].n + 1;
    poke(path, "/groups/n", 0, H5T_NATIVE_INT32, &n);
    expect_load_fails(path, "/groups/n");

    write_bytes(path, good, size);
    int32_t big = t->n_tokens + 1;
    poke(path, "/traj/prompt_tokens", (hsize_t)row, H5T_NATIVE_INT32, &big);
    expect_load_fails(path, "/traj/prompt_tokens");

    write_bytes(path, good, size);
    int32_t huge = (1 << 24) + 1;
    poke(path, "/traj/n_tokens", (hsize_t)row, H5T_NATIVE_INT32, &huge);
    expect_load_fails(path, "/traj/n_tokens");

    write_bytes(path, good, size);
    int32_t minus = -5;
    poke(path, "/traj/tool_calls", (hsize_t)row, H5T_NATIVE_INT32, &minus);
    expect_load_fails(path, "/traj/turns, tool_calls, tool_failures");

    write_bytes(path, good, size);
    float lp = NAN;
    poke(path, "/traj/logp", (hsize_t)tok + 1, H5T_NATIVE_FLOAT, &lp);
    expect_load_fails(path, "/traj/logp");

    /* A changed value under a valid trailer but the old dataset checksum (a file
     * edited and re-sealed by a tool that knows the trailer but not the checksums) */
    write_bytes(path, good, size);
    poke_sum(path, "/traj/reward", (hsize_t)row, H5T_NATIVE_DOUBLE, &(double){0.123456789}, 0);
    expect_load_fails(path, "/traj/reward: checksum mismatch");

    /* Any change the trailer does not vouch for: one bit anywhere, one byte less, an
     * HDF5 rewrite (which drops the trailer). */
    write_bytes(path, good, size);
    hid_t h = open_rw(path);
    H5Fclose(h);
    expect_load_fails(path, "trailer");
    unsigned char *changed = malloc(size);
    const size_t at[] = {0, 100, size / 3, size / 2, size - 25, size - 1};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        memcpy(changed, good, size);
        changed[at[i]] ^= 0x10;
        write_bytes(path, changed, size);
        /* The last byte is the trailer's own hash: a mismatch too. */
        expect_load_fails(path, "does not match its trailer");
    }
    free(changed);
    write_bytes(path, good, size - 1);
    expect_load_fails(path, "trailer");

    write_bytes(path, good, size);
    set_root_attr_i64(path, "libra_checkpoint_format", CKPT_FORMAT_VERSION + 1);
    expect_load_fails(path, "libra_checkpoint_format");

    write_bytes(path, good, size);
    set_root_attr_i64(path, "baseline_set", 2);
    expect_load_fails(path, "baseline_set");

    write_bytes(path, good, size);
    h = open_rw(path);
    CU_ASSERT(H5Ldelete(h, "/traj/versions", H5P_DEFAULT) >= 0);
    H5Fclose(h);
    reseal(path);
    expect_load_fails(path, "/traj/versions");

    write_bytes(path, good, size);
    h = open_rw(path);
    CU_ASSERT(H5Adelete(h, "seed") >= 0);
    H5Fclose(h);
    reseal(path);
    expect_load_fails(path, "seed");

    /* A dataset of the wrong type: /trained as float64. */
    write_bytes(path, good, size);
    h = open_rw(path);
    CU_ASSERT(H5Ldelete(h, "/trained", H5P_DEFAULT) >= 0);
    hsize_t d1 = 3;
    hid_t sp = H5Screate_simple(1, &d1, NULL);
    hid_t ds = H5Dcreate2(h, "/trained", H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT,
                          H5P_DEFAULT);
    CU_ASSERT(ds >= 0);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Fclose(h);
    reseal(path);
    expect_load_fails(path, "/trained");

    /* Truncated, overwritten with random bytes (whole and in part), empty, missing. */
    write_bytes(path, good, size / 2);
    expect_load_fails(path, NULL);
    struct rng r;
    rng_init(&r, 5, 5, 5, 5);
    unsigned char *junk = malloc(size);
    for (size_t i = 0; i < size; i++) junk[i] = (unsigned char)rng_u64(&r);
    write_bytes(path, junk, size);
    expect_load_fails(path, "trailer");
    for (int trial = 0; trial < 4; trial++) {
        memcpy(junk, good, size);
        size_t from = (size_t)rng_below(&r, size - 64);
        for (size_t i = from; i < from + 64; i++) junk[i] = (unsigned char)rng_u64(&r);
        write_bytes(path, junk, size);
        expect_load_fails(path, NULL);
    }
    /* Junk with a valid trailer gets as far as HDF5, which refuses it. */
    write_bytes(path, junk, size / 2);
    reseal(path);
    expect_load_fails(path, "H5Fopen");
    write_bytes(path, "", 0);
    expect_load_fails(path, NULL);
    unlink(path);
    expect_load_fails(path, "No such file");

    free(junk);
    free(good);
    ckpt_state_free(&s);
}

/* ---- checkpoint directories ---- */

static struct tfm_config tiny_config(void)
{
    struct tfm_config c = {
        .family = TFM_LLAMA,
        .vocab_size = 16,
        .hidden_size = 8,
        .n_layers = 1,
        .n_heads = 2,
        .n_kv_heads = 1,
        .head_dim = 4,
        .intermediate_size = 16,
        .max_position_embeddings = 32,
        .rms_norm_eps = 1e-5f,
        .rope_theta = 10000.0f,
    };
    return c;
}

/* A full checkpoint of step: state (seeded by step) and, with model, model.h5 (the
 * weights and the AdamW moments, as the training root writes it; model 2: weights
 * only, a damaged checkpoint). */
static void write_ckpt(const char *root, int step, int keep, int model)
{
    char dir[PATH_MAX], path[PATH_MAX + 16];
    CU_ASSERT_EQUAL_FATAL(ckpt_begin(root, step, err, sizeof err), 0);
    ckpt_dir_path(root, step, 1, dir, sizeof dir);
    struct ckpt_state s;
    make_state(&s, (uint64_t)step, 0);
    s.step = step;
    pathf(path, "%s/state.h5", dir);
    CU_ASSERT_EQUAL_FATAL(ckpt_state_save(path, &s, err, sizeof err), 0);
    ckpt_state_free(&s);
    if (model) {
        struct tfm_config c = tiny_config();
        struct tfm_params p;
        tfm_params_alloc(&p, &c);
        tfm_params_init_random(&p, &c, (uint64_t)step, 0.02f);
        struct adamw opt;
        struct adamw_config oc = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
        adamw_init(&opt, &oc, p.n);
        opt.step = step;
        pathf(path, "%s/model.h5", dir);
        CU_ASSERT_EQUAL_FATAL(tfm_save(path, &c, &p, model == 2 ? NULL : &opt, err, sizeof err), 0);
        adamw_free(&opt);
        tfm_params_free(&p);
    }
    err[0] = '\0';
    int rc = ckpt_commit(root, step, step + 1, keep, err, sizeof err);
    if (rc) fprintf(stderr, "\n  commit: %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
}

static int list_is(const char *root, const int *want, int n)
{
    int got[16];
    int k = ckpt_list(root, got, 16);
    if (k != n) return 0;
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) return 0;
    return 1;
}

static void file_in(char *out, const char *root, int step, int tmp, const char *name)
{
    char dir[PATH_MAX];
    ckpt_dir_path(root, step, tmp, dir, sizeof dir);
    pathf(out, "%s/%s", dir, name);
}

static void test_dir_path(void)
{
    char out[64];
    ckpt_dir_path("/r", 120, 0, out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "/r/step-00000120");
    ckpt_dir_path("/r", 7, 1, out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "/r/step-00000007.tmp");
}

static void test_commit_list_prune(void)
{
    char root[PATH_MAX], path[PATH_MAX], text[128];
    pathf(root, "%s/a/b/ckpt", scratch("prune")); /* mkdir -p */
    CU_ASSERT_EQUAL(ckpt_list(root, NULL, 0), 0); /* no root yet */
    write_ckpt(root, 10, 2, 0);
    write_ckpt(root, 20, 2, 0);
    CU_ASSERT(list_is(root, (int[]){20, 10}, 2));
    write_ckpt(root, 30, 2, 0);
    CU_ASSERT(list_is(root, (int[]){30, 20}, 2));
    ckpt_dir_path(root, 10, 0, path, sizeof path);
    CU_ASSERT(!exists(path));
    CU_ASSERT(count_matching(root, ".tmp") == 0);

    /* The mark's exact content. */
    file_in(path, root, 30, 0, "COMPLETE");
    FILE *f = fopen(path, "r");
    CU_ASSERT_FATAL(f != NULL);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    CU_ASSERT_STRING_EQUAL(text, "libra checkpoint\nstep 30\nversion 31\n");

    /* A rerun of step 20 replaces it; a stale file of the old one does not survive. */
    file_in(path, root, 20, 0, "stale.bin");
    write_bytes(path, "x", 1);
    write_ckpt(root, 20, 2, 0);
    CU_ASSERT(list_is(root, (int[]){30, 20}, 2));
    CU_ASSERT(!exists(path));

    /* keep 1 while committing an older step: the newest stays, the new one too. */
    write_ckpt(root, 5, 1, 0);
    CU_ASSERT(list_is(root, (int[]){30, 5}, 2));
    int one[1];
    CU_ASSERT_EQUAL(ckpt_list(root, one, 1), 1);
    CU_ASSERT_EQUAL(one[0], 30);

    /* Steps beyond 8 digits keep their canonical name. */
    write_ckpt(root, 123456789, 3, 0);
    CU_ASSERT(list_is(root, (int[]){123456789, 30, 5}, 3));

    /* Commit without begin; bad keep. */
    CU_ASSERT_EQUAL(ckpt_commit(root, 77, 1, 2, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "step-00000077.tmp") != NULL);
    CU_ASSERT_EQUAL(ckpt_commit(root, 30, 1, 0, err, sizeof err), -1);
    CU_ASSERT(list_is(root, (int[]){123456789, 30, 5}, 3));
}

static void test_begin_removes_stale_tmp(void)
{
    char root[PATH_MAX], path[PATH_MAX];
    pathf(root, "%s", scratch("stale"));
    CU_ASSERT_EQUAL_FATAL(ckpt_begin(root, 50, err, sizeof err), 0);
    file_in(path, root, 50, 1, "state.h5");
    write_bytes(path, "half", 4);
    file_in(path, root, 50, 1, "model.h5.tmp-1");
    write_bytes(path, "half", 4);
    CU_ASSERT_EQUAL(ckpt_begin(root, 50, err, sizeof err), 0);
    ckpt_dir_path(root, 50, 1, path, sizeof path);
    CU_ASSERT(exists(path));
    CU_ASSERT_EQUAL(count_matching(path, "h5"), 0);
    /* A subdirectory makes commit (and removal) refuse, with the name. */
    file_in(path, root, 50, 1, "sub");
    CU_ASSERT_FATAL(mkdir(path, 0755) == 0);
    CU_ASSERT_EQUAL(ckpt_commit(root, 50, 1, 1, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "sub") != NULL);
    CU_ASSERT_EQUAL(ckpt_begin(root, 50, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "sub") != NULL);
    CU_ASSERT_EQUAL(rmdir(path), 0);
    CU_ASSERT_EQUAL(ckpt_begin(root, 50, err, sizeof err), 0);
}

static void test_incomplete_skipped(void)
{
    char root[PATH_MAX], path[PATH_MAX];
    pathf(root, "%s", scratch("incomplete"));
    write_ckpt(root, 10, 5, 1);
    write_ckpt(root, 20, 5, 1);
    /* 30: no mark. 40: a .tmp only. 50: mark of another step. 60: malformed mark.
     * 70: a plain file. Odd names are ignored. */
    write_ckpt(root, 30, 5, 1);
    file_in(path, root, 30, 0, "COMPLETE");
    CU_ASSERT_FATAL(unlink(path) == 0);
    CU_ASSERT_EQUAL(ckpt_begin(root, 40, err, sizeof err), 0);
    write_ckpt(root, 50, 5, 1);
    file_in(path, root, 50, 0, "COMPLETE");
    write_bytes(path, "libra checkpoint\nstep 49\nversion 51\n", 36);
    write_ckpt(root, 60, 5, 1);
    file_in(path, root, 60, 0, "COMPLETE");
    write_bytes(path, "libra checkpoint\nstep 60\nversion 61", 35); /* no final newline */
    ckpt_dir_path(root, 70, 0, path, sizeof path);
    write_bytes(path, "x", 1);
    pathf(path, "%s/step-80", root);
    CU_ASSERT_FATAL(mkdir(path, 0755) == 0);
    pathf(path, "%s/step-000000090", root);
    CU_ASSERT_FATAL(mkdir(path, 0755) == 0);
    CU_ASSERT(list_is(root, (int[]){20, 10}, 2));

    struct ckpt_state s;
    char model[PATH_MAX];
    int step = ckpt_load_latest(root, &s, model, sizeof model, err, sizeof err);
    CU_ASSERT_EQUAL(step, 20);
    CU_ASSERT_EQUAL(s.step, 20);
    ckpt_state_free(&s);
    /* Pruning leaves incomplete directories alone. */
    write_ckpt(root, 25, 1, 1);
    CU_ASSERT(list_is(root, (int[]){25}, 1));
    ckpt_dir_path(root, 30, 0, path, sizeof path);
    CU_ASSERT(exists(path));
}

/* Replaces step's state.h5 by a damaged one, per how. */
static void damage_state(const char *root, int step, int how)
{
    char path[PATH_MAX];
    file_in(path, root, step, 0, "state.h5");
    struct stat st;
    CU_ASSERT_FATAL(stat(path, &st) == 0);
    size_t size = (size_t)st.st_size;
    unsigned char *buf = malloc(size);
    FILE *f = fopen(path, "rb");
    CU_ASSERT_FATAL(f && fread(buf, 1, size, f) == size);
    fclose(f);
    struct rng r;
    rng_init(&r, 9, (uint64_t)how, 0, 0);
    if (how == 0) {
        write_bytes(path, buf, size / 2); /* truncated to half */
    } else if (how == 1) {
        for (size_t i = 0; i < size; i++) buf[i] = (unsigned char)rng_u64(&r);
        write_bytes(path, buf, size); /* random bytes */
    } else if (how == 2) {
        write_bytes(path, "", 0); /* empty */
    } else {
        for (size_t i = size / 2; i < size / 2 + 256 && i < size; i++)
            buf[i] = (unsigned char)rng_u64(&r);
        write_bytes(path, buf, size); /* random bytes over part of it */
    }
    free(buf);
}

static void expect_latest(const char *root, int want)
{
    struct ckpt_state s;
    char model[PATH_MAX];
    memset(&s, 0x5a, sizeof s);
    err[0] = '\0';
    int step = ckpt_load_latest(root, &s, model, sizeof model, err, sizeof err);
    CU_ASSERT_EQUAL(step, want);
    if (want < 0) {
        CU_ASSERT(is_zero(&s, sizeof s));
        CU_ASSERT(strstr(err, "no complete checkpoint in") != NULL);
        CU_ASSERT(strstr(err, root) != NULL);
        return;
    }
    if (step != want) {
        fprintf(stderr, "\n  got %d (%s)\n", step, err);
        ckpt_state_free(&s);
        return;
    }
    struct ckpt_state ref;
    make_state(&ref, (uint64_t)want, 0);
    ref.step = want;
    CU_ASSERT(states_equal(&s, &ref));
    ckpt_state_free(&ref);
    ckpt_state_free(&s);
    /* The model path is the checkpoint's and tfm_load reads it. */
    char expect[PATH_MAX];
    file_in(expect, root, want, 0, "model.h5");
    CU_ASSERT_STRING_EQUAL(model, expect);
    struct tfm_config c;
    struct tfm_params p;
    CU_ASSERT_EQUAL(tfm_load(model, &c, &p, NULL, err, sizeof err), 0);
    struct tfm_config t = tiny_config();
    CU_ASSERT(c.vocab_size == t.vocab_size && c.hidden_size == t.hidden_size);
    tfm_params_free(&p);
}

static void test_load_latest_fallback(void)
{
    char root[PATH_MAX], path[PATH_MAX];
    pathf(root, "%s", scratch("fallback"));
    expect_latest(root, -1); /* no root */
    CU_ASSERT_FATAL(mkdir(root, 0755) == 0);
    expect_latest(root, -1); /* empty root */
    write_ckpt(root, 10, 3, 1);
    write_ckpt(root, 20, 3, 1);
    expect_latest(root, 20);
    for (int how = 0; how < 4; how++) {
        damage_state(root, 20, how);
        expect_latest(root, 10);
        write_ckpt(root, 20, 3, 1);
        expect_latest(root, 20);
    }
    /* model.h5 missing, not HDF5, HDF5 without libra_format_version. */
    file_in(path, root, 20, 0, "model.h5");
    CU_ASSERT_FATAL(unlink(path) == 0);
    expect_latest(root, 10);
    write_bytes(path, "not a model", 11);
    expect_latest(root, 10);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    H5Fclose(f);
    expect_latest(root, 10);
    /* model.h5 without the AdamW moments: the optimizer is never optional */
    write_ckpt(root, 20, 3, 2);
    expect_latest(root, 10);
    write_ckpt(root, 20, 3, 1);
    expect_latest(root, 20);
    /* A state.h5 of another step in 20's directory. */
    char other[PATH_MAX];
    file_in(path, root, 20, 0, "state.h5");
    file_in(other, root, 10, 0, "state.h5");
    struct ckpt_state s;
    CU_ASSERT_EQUAL_FATAL(ckpt_state_load(other, &s, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(ckpt_state_save(path, &s, err, sizeof err), 0);
    ckpt_state_free(&s);
    expect_latest(root, 10);
    /* Both damaged: none. */
    damage_state(root, 10, 2);
    expect_latest(root, -1);
    CU_ASSERT(strstr(err, "2 damaged") != NULL);
    /* A model path buffer too small is an error, not a crash. */
    write_ckpt(root, 30, 3, 1);
    char tiny[8];
    CU_ASSERT_EQUAL(ckpt_load_latest(root, &s, tiny, sizeof tiny, err, sizeof err), -1);
    CU_ASSERT(is_zero(&s, sizeof s));
    CU_ASSERT(strstr(err, "does not fit") != NULL);
}

static void test_unwritable_root(void)
{
    char root[PATH_MAX], file[PATH_MAX];
    pathf(file, "%s", scratch("afile"));
    write_bytes(file, "x", 1);
    pathf(root, "%s/ckpt", file); /* a regular file as a parent */
    err[0] = '\0';
    CU_ASSERT_EQUAL(ckpt_begin(root, 1, err, sizeof err), -1);
    CU_ASSERT(strstr(err, file) != NULL);
    CU_ASSERT(strstr(err, "Not a directory") != NULL || strstr(err, "not a directory"));
    CU_ASSERT_EQUAL(ckpt_list(root, NULL, 0), -1);
    struct ckpt_state s;
    char model[64];
    CU_ASSERT_EQUAL(ckpt_load_latest(root, &s, model, sizeof model, err, sizeof err), -1);
    CU_ASSERT(strstr(err, root) != NULL);
    /* The root itself a file. */
    CU_ASSERT_EQUAL(ckpt_begin(file, 1, err, sizeof err), -1);
    CU_ASSERT(strstr(err, file) != NULL);
    /* Permissions (not as root, which ignores them). */
    if (geteuid() != 0) {
        char ro[PATH_MAX];
        pathf(ro, "%s", scratch("readonly"));
        CU_ASSERT_FATAL(mkdir(ro, 0500) == 0);
        pathf(root, "%s/ckpt", ro);
        CU_ASSERT_EQUAL(ckpt_begin(root, 1, err, sizeof err), -1);
        CU_ASSERT(strstr(err, "Permission denied") != NULL);
        chmod(ro, 0755);
    }
    CU_ASSERT_EQUAL(ckpt_begin("", 1, err, sizeof err), -1);
}

/* Every HDF5 object the modules opened was closed again (files, datasets, groups,
 * attributes, types), on the failure paths too. */
static void test_no_open_ids(void)
{
    CU_ASSERT_EQUAL(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0);
}

static const struct test_case state_cases[] = {
    {"round trip (random groups, zero-length)", test_state_roundtrip},
    {"save refuses invalid states", test_state_save_rejects},
    {"load refuses damaged files", test_state_load_rejects},
    {NULL, NULL},
};

/* The free-space check at start: room for one checkpoint, or a message with both
 * figures; the estimate is the float32 weights and moments plus the state margin. */
static void test_space_check(void)
{
    const char *dir = scratch("space");
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0 || errno == EEXIST);
    CU_ASSERT_EQUAL(ckpt_estimate_bytes(1000), 12000 + ((uint64_t)64 << 20));
    CU_ASSERT_EQUAL(ckpt_estimate_bytes(-5), (uint64_t)64 << 20);
    CU_ASSERT_EQUAL(ckpt_check_space(dir, 1, err, sizeof err), 0);
    CU_ASSERT_EQUAL(ckpt_check_space(dir, (uint64_t)1 << 62, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "GB free; one checkpoint of this model needs about"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, dir));
    char missing[PATH_MAX];
    pathf(missing, "%s/no/such/dir", dir);
    CU_ASSERT_EQUAL(ckpt_check_space(missing, 1, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cannot read the free space"));
}

static const struct test_case dir_cases[] = {
    {"directory names", test_dir_path},
    {"commit, list, prune, rerun", test_commit_list_prune},
    {"begin removes a stale .tmp", test_begin_removes_stale_tmp},
    {"incomplete checkpoints skipped", test_incomplete_skipped},
    {"load_latest falls back", test_load_latest_fallback},
    {"unwritable root", test_unwritable_root},
    {"no HDF5 object left open", test_no_open_ids},
    {"free space for one checkpoint", test_space_check},
    {NULL, NULL},
};

static const struct test_suite suites[] = {
    {"checkpoint state", state_cases},
    {"checkpoint directories", dir_cases},
    {NULL, NULL},
};

int main(void) { return test_main(suites); }
