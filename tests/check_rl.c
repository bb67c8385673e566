/*
 * check_rl: checks the metrics files of real-model RL runs (device cpu; the layout
 * is docs/metrics.md) for the properties of the multi-rank RL tests.
 *
 *   check_rl FILE.h5 [--max-staleness S] [--reward-mean V TOL] [--min-migrations N]
 *                    [--accuracy-rises] [--min-hybrid-steps N] [--colocated]
 *       One finished run: status "complete"; /steps numbered 1 .. steps_requested;
 *       params_identical == 1 on every step (the training replicas agree);
 *       staleness_max <= S on every step and (step_consumed - 1) - version_start
 *       in [0, S] for every trained trajectory (S defaults to the file's
 *       max_staleness attribute). Prints the mean over steps of reward_mean; with
 *       --reward-mean it must be within TOL of V. --min-migrations: /migrations holds
 *       at least N moves between buckets (from_bucket != to_bucket). --accuracy-rises:
 *       the last /eval row's accuracy is above the first's. --min-hybrid-steps:
 *       at least N steps trained with lent replicas (n_hybrid_ranks > 0). --colocated
 *       (train.colocate): the rollout ranks trained -- every /steps row has
 *       n_train_ranks == n_rollout_ranks > 0 and no hybrid ranks, every /plans row
 *       n_train == n_rollout and no worker besides the rollout, hybrid and idle ones
 *       (world_size - 1 of them), and the ranks with training spans in /spans are
 *       exactly the ranks with decode spans.
 *
 *   check_rl --compare-models A.h5 B.h5 [--rel-tol R] [--moments M]
 *       Two model files (libra's HDF5 model format: checkpoints' model.h5) hold the
 *       same parameters within R relative (default 1e-4); with --moments, the same
 *       AdamW step count and moments m and v, each within M of its largest value.
 *
 *   check_rl --compare A.h5 B.h5 [--rel-tol R] [--rows N]
 *       Two finished runs ("complete") of one configuration agree: per step, the
 *       batch figures that come from sampled tokens (n_traj, reward_mean, reward_std,
 *       success_rate, tokens_gen, tokens_tool, calc_calls, calc_failures,
 *       zero_var_groups) are identical; the
 *       training figures (loss, pg_loss, entropy, grad_norm) agree within R
 *       relative (default 1e-4); /eval accuracy is identical row by row. --rows N:
 *       the first N steps only, and not /eval (runs whose weights agree to the last
 *       bits only, where a token sampled near a tie may later flip).
 *
 *   check_rl --resume-check STATE.h5 RESUMED.h5 [--expect-carry] [--killed FIRST.h5]
 *       A resumed run continued the checkpoint whose state.h5 is STATE: the resumed
 *       file is "complete", its resumed_from_step is the checkpoint's step, its
 *       /steps run from that step + 1 to steps_requested, and no prompt was skipped
 *       or repeated: every prompt id 0 .. max is exactly one GRPO group, either
 *       trained before the checkpoint (STATE's /trained) or a group of the resumed
 *       file (trained, buffered or in flight). The resumed segment's steps and
 *       trained rows also pass the checks of the first form (replicas identical,
 *       staleness within the file's max_staleness). --expect-carry: the checkpoint
 *       holds groups not trained yet (buffered, or in flight and launched again),
 *       so that carrying them over is exercised. --killed names the first run's
 *       file: whether it still opens is reported, never failed on (a SIGKILL may
 *       land mid-write; nothing the resume needs lives in it).
 *
 * Each failed check prints
 *   check_rl: FAIL: <what> (<expected> vs <found>)
 * (MAX_REPORTS lines per property at most, then a count), and the program ends with
 *   check_rl: OK: <summary>     exit 0
 * or exit 1 if anything failed, 2 on a usage error.
 *
 * Columns are read one at a time through a one-member compound memory type, so HDF5
 * converts by column name and the checker does not depend on the writer's struct layout.
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/checkpoint.h"
#include "libra/h5util.h"
#include "libra/log.h"
#include "libra/metrics.h" /* enum traj_fate */
#include "libra/tfm_io.h"

#include <errno.h>
#include <hdf5.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_REPORTS 10

static int g_failed; /* failed checks, all properties */

/* One property being checked: counts its failures so a bad table prints 10 lines, not 10^5. */
struct prop {
    const char *name;
    int failures;
};

static void prop_fail(struct prop *p, const char *what, const char *expected, const char *found)
{
    p->failures++;
    g_failed++;
    if (p->failures <= MAX_REPORTS)
        printf("check_rl: FAIL: %s (%s vs %s)\n", what, expected, found);
}

static void prop_fail_i(struct prop *p, const char *what, int64_t expected, int64_t found)
{
    char e[32], f[32];
    snprintf(e, sizeof e, "%" PRId64, expected);
    snprintf(f, sizeof f, "%" PRId64, found);
    prop_fail(p, what, e, f);
}

static void prop_fail_g(struct prop *p, const char *what, double expected, double found)
{
    char e[40], f[40];
    snprintf(e, sizeof e, "%.17g", expected);
    snprintf(f, sizeof f, "%.17g", found);
    prop_fail(p, what, e, f);
}

static void prop_end(const struct prop *p)
{
    if (p->failures > MAX_REPORTS)
        printf("check_rl: FAIL: %s: %d more failures not shown (0 vs %d)\n", p->name,
               p->failures - MAX_REPORTS, p->failures - MAX_REPORTS);
}

/* ---- reading ---- */

static hid_t open_file(const char *path)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        struct prop p = {"open", 0};
        char what[1200];
        snprintf(what, sizeof what, "metrics file %s opens read-only", path);
        prop_fail(&p, what, "an HDF5 file",
                  access(path, R_OK) != 0 ? strerror(errno) : "not an HDF5 file");
    }
    return f;
}

/* Reads a scalar integer root attribute (any integer type in the file). */
static bool read_attr_i64(hid_t file, const char *name, int64_t *out)
{
    if (H5Aexists(file, name) <= 0) return false;
    hid_t a = H5Aopen(file, name, H5P_DEFAULT);
    if (a < 0) return false;
    hid_t t = H5Aget_type(a);
    bool ok = t >= 0 && H5Tget_class(t) == H5T_INTEGER &&
              H5Aread(a, H5T_NATIVE_INT64, out) >= 0;
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    return ok;
}

/* Reads a scalar string root attribute, fixed or variable length. */
static bool read_attr_str(hid_t file, const char *name, char *out, size_t n)
{
    bool ok = false;
    if (H5Aexists(file, name) <= 0) return false;
    hid_t a = H5Aopen(file, name, H5P_DEFAULT);
    if (a < 0) return false;
    hid_t ft = H5Aget_type(a), mt = H5I_INVALID_HID;
    if (ft < 0 || H5Tget_class(ft) != H5T_STRING) goto done;
    mt = H5Tcopy(H5T_C_S1);
    H5Tset_cset(mt, H5Tget_cset(ft));
    if (H5Tis_variable_str(ft) > 0) {
        char *s = NULL;
        H5Tset_size(mt, H5T_VARIABLE);
        if (H5Aread(a, mt, &s) >= 0 && s) {
            snprintf(out, n, "%s", s);
            H5free_memory(s);
            ok = true;
        }
    } else {
        size_t w = H5Tget_size(ft) + 1;
        char *s = xcalloc(w, 1);
        H5Tset_size(mt, w);
        H5Tset_strpad(mt, H5T_STR_NULLTERM);
        if (H5Aread(a, mt, s) >= 0) {
            snprintf(out, n, "%s", s);
            ok = true;
        }
        free(s);
    }
done:
    if (mt >= 0) H5Tclose(mt);
    if (ft >= 0) H5Tclose(ft);
    H5Aclose(a);
    return ok;
}

/*
 * Reads column col of /table into *out (n rows of elem bytes) through a memory
 * compound type with that one member. Prints a FAIL (naming path) and returns -1 if
 * the table or column is missing or unreadable; *out is then NULL.
 */
static int read_column(hid_t file, const char *path, const char *table, const char *col,
                       hid_t member, size_t elem, void **out, size_t *n)
{
    struct prop p = {"read", 0};
    char what[1200];
    hid_t d = H5I_INVALID_HID, ft = H5I_INVALID_HID, sp = H5I_INVALID_HID;
    hssize_t rows = 0;
    *out = NULL;
    *n = 0;
    snprintf(what, sizeof what, "%s: /%s column %s readable", path, table, col);
    if (H5Lexists(file, table, H5P_DEFAULT) <= 0) {
        prop_fail(&p, what, "present", "no such table");
        return -1;
    }
    if ((d = H5Dopen2(file, table, H5P_DEFAULT)) < 0 || (ft = H5Dget_type(d)) < 0 ||
        H5Tget_class(ft) != H5T_COMPOUND) {
        prop_fail(&p, what, "compound dataset", "not one");
        goto fail;
    }
    if (H5Tget_member_index(ft, col) < 0) {
        prop_fail(&p, what, "present", "no such column");
        goto fail;
    }
    if ((sp = H5Dget_space(d)) < 0 || H5Sget_simple_extent_ndims(sp) != 1 ||
        (rows = H5Sget_simple_extent_npoints(sp)) < 0) {
        prop_fail(&p, what, "1-D", "other shape");
        goto fail;
    }
    char err[512]; /* h5_read_column: HDF5's conversions, and enum columns as codes or names */
    if (h5_read_column(file, table, col, member, elem, out, n, err, sizeof err)) {
        prop_fail(&p, what, "readable", err);
        goto fail;
    }
    H5Sclose(sp);
    H5Tclose(ft);
    H5Dclose(d);
    return 0;
fail:
    if (sp >= 0) H5Sclose(sp);
    if (ft >= 0) H5Tclose(ft);
    if (d >= 0) H5Dclose(d);
    return -1;
}

/* One column of a table, as int64 or as double; NULL v = missing (a FAIL was printed). */
struct col {
    size_t n;
    int64_t *i;
    double *f;
};

static struct col col_i64(hid_t file, const char *path, const char *table, const char *name)
{
    struct col c = {0, NULL, NULL};
    read_column(file, path, table, name, H5T_NATIVE_INT64, sizeof(int64_t), (void **)&c.i, &c.n);
    return c;
}

static struct col col_f64(hid_t file, const char *path, const char *table, const char *name)
{
    struct col c = {0, NULL, NULL};
    read_column(file, path, table, name, H5T_NATIVE_DOUBLE, sizeof(double), (void **)&c.f, &c.n);
    return c;
}

static void col_free(struct col *c)
{
    free(c->i);
    free(c->f);
    memset(c, 0, sizeof *c);
}

/* Rows in /table, or -1 if it is missing (no FAIL printed). */
static int64_t table_rows(hid_t file, const char *table)
{
    if (H5Lexists(file, table, H5P_DEFAULT) <= 0) return -1;
    hid_t d = H5Dopen2(file, table, H5P_DEFAULT);
    if (d < 0) return -1;
    hid_t sp = H5Dget_space(d);
    hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    if (sp >= 0) H5Sclose(sp);
    H5Dclose(d);
    return n;
}

/* ---- checks shared by the modes ---- */

static void check_status(hid_t file, const char *path)
{
    struct prop p = {"status", 0};
    char status[64], what[1100];
    snprintf(what, sizeof what, "%s: root attribute status", path);
    if (!read_attr_str(file, "status", status, sizeof status))
        prop_fail(&p, what, "\"complete\"", "missing");
    else if (strcmp(status, "complete") != 0)
        prop_fail(&p, what, "\"complete\"", status);
}

/* /steps numbered first .. last, one row each, version == step (a version per step). */
static void check_step_range(hid_t file, const char *path, int64_t first, int64_t last)
{
    struct prop p = {"step numbers", 0};
    char what[1200];
    struct col step = col_i64(file, path, "steps", "step");
    struct col version = col_i64(file, path, "steps", "version");
    if (step.i) {
        int64_t want = last >= first ? last - first + 1 : 0;
        if ((int64_t)step.n != want) {
            snprintf(what, sizeof what, "%s: /steps rows (steps %" PRId64 " .. %" PRId64 ")",
                     path, first, last);
            prop_fail_i(&p, what, want, (int64_t)step.n);
        }
        for (size_t r = 0; r < step.n; r++) {
            if (step.i[r] == first + (int64_t)r) continue;
            snprintf(what, sizeof what, "%s: /steps row %zu: step", path, r);
            prop_fail_i(&p, what, first + (int64_t)r, step.i[r]);
        }
    }
    for (size_t r = 0; version.i && step.i && r < version.n && r < step.n; r++) {
        if (version.i[r] == step.i[r]) continue;
        snprintf(what, sizeof what, "%s: /steps row %zu: version == step", path, r);
        prop_fail_i(&p, what, step.i[r], version.i[r]);
    }
    col_free(&step);
    col_free(&version);
    prop_end(&p);
}

/* ---- mode 1: one run ---- */

struct run_opts {
    const char *path;
    long max_staleness; /* -1: the file's max_staleness attribute */
    bool want_reward;
    double reward, reward_tol;
    long min_migrations; /* -1: not checked */
    long min_hybrid_steps; /* -1: not checked */
    bool accuracy_rises;
    bool colocated;
};

/* A count that must reach a minimum. */
static void at_least(struct prop *p, const char *path, const char *name, long n, long min)
{
    if (n >= min) return;
    char what[1200], e[32], f[32];
    snprintf(what, sizeof what, "%s: %s", path, name);
    snprintf(e, sizeof e, ">= %ld", min);
    snprintf(f, sizeof f, "%ld", n);
    prop_fail(p, what, e, f);
}

/* Moves between buckets in /migrations: rows whose from_bucket and to_bucket differ
 * and whose why is not a refusal (declined_cost, declined_limit). -1 if unreadable. */
static long count_bucket_moves(hid_t file)
{
    enum { W = 64 };
    static const char *const names[3] = {"from_bucket", "to_bucket", "why"};
    if (H5Lexists(file, "migrations", H5P_DEFAULT) <= 0) return 0;
    char *col[3] = {NULL, NULL, NULL}, err[512];
    size_t rows[3] = {0, 0, 0};
    hid_t st = H5Tcopy(H5T_C_S1);
    long n = st >= 0 && H5Tset_size(st, W) >= 0 ? 0 : -1;
    for (int k = 0; n == 0 && k < 3; k++)
        if (h5_read_column(file, "migrations", names[k], st, W, (void **)&col[k], &rows[k], err,
                           sizeof err) ||
            rows[k] != rows[0])
            n = -1;
    for (size_t r = 0; n >= 0 && r < rows[0]; r++)
        n += strcmp(col[0] + r * W, col[1] + r * W) != 0 &&
             strncmp(col[2] + r * W, "declined", 8) != 0;
    for (int k = 0; k < 3; k++) free(col[k]);
    if (st >= 0) H5Tclose(st);
    return n;
}

static void check_params_identical(hid_t file, const char *path)
{
    struct prop p = {"params_identical", 0};
    char what[1100];
    struct col c = col_i64(file, path, "steps", "params_identical");
    struct col step = col_i64(file, path, "steps", "step");
    for (size_t r = 0; c.i && step.i && r < c.n; r++) {
        if (c.i[r] == 1) continue;
        snprintf(what, sizeof what, "%s: step %" PRId64 ": params_identical (replicas agree)",
                 path, step.i[r]);
        prop_fail_i(&p, what, 1, c.i[r]);
    }
    col_free(&c);
    col_free(&step);
    prop_end(&p);
}

/* Returns the largest staleness_max seen (-1 if none could be read). */
static int64_t check_staleness(hid_t file, const char *path, int64_t bound)
{
    struct prop p = {"staleness", 0};
    char what[1200], e[40], f[40];
    snprintf(e, sizeof e, "<= %" PRId64, bound);
    struct col smax = col_i64(file, path, "steps", "staleness_max");
    int64_t seen = -1;
    for (size_t r = 0; smax.i && r < smax.n; r++) {
        if (smax.i[r] > seen) seen = smax.i[r];
        if (smax.i[r] <= bound) continue;
        snprintf(what, sizeof what, "%s: /steps row %zu: staleness_max", path, r);
        snprintf(f, sizeof f, "%" PRId64, smax.i[r]);
        prop_fail(&p, what, e, f);
    }
    col_free(&smax);
    /* The controller trains at version = steps done = step_consumed - 1. */
    struct col fate = col_i64(file, path, "trajectories", "fate");
    struct col sc = col_i64(file, path, "trajectories", "step_consumed");
    struct col vs = col_i64(file, path, "trajectories", "version_start");
    struct col id = col_i64(file, path, "trajectories", "traj_id");
    size_t trained = 0;
    for (size_t r = 0; fate.i && sc.i && vs.i && id.i && r < fate.n; r++) {
        if (fate.i[r] != TRAJ_TRAINED) continue;
        trained++;
        int64_t stale = (sc.i[r] - 1) - vs.i[r];
        if (stale >= 0 && stale <= bound) continue;
        snprintf(what, sizeof what, "%s: trajectory %" PRId64 ": (step_consumed %" PRId64
                 " - 1) - version_start %" PRId64, path, id.i[r], sc.i[r], vs.i[r]);
        snprintf(e, sizeof e, "0 .. %" PRId64, bound);
        snprintf(f, sizeof f, "%" PRId64, stale);
        prop_fail(&p, what, e, f);
    }
    if (fate.i && trained == 0) {
        snprintf(what, sizeof what, "%s: trained rows in /trajectories", path);
        prop_fail(&p, what, "> 0", "0");
    }
    col_free(&fate);
    col_free(&sc);
    col_free(&vs);
    col_free(&id);
    prop_end(&p);
    return seen;
}

/* Mean over steps of reward_mean; NAN if unreadable or empty. */
static double mean_reward(hid_t file, const char *path)
{
    struct col c = col_f64(file, path, "steps", "reward_mean");
    double s = 0;
    for (size_t r = 0; r < c.n; r++) s += c.f[r];
    double m = c.f && c.n ? s / (double)c.n : NAN;
    col_free(&c);
    return m;
}

/* --colocated: no rank trained but the rollout ranks (see the header). */
static void check_colocated(hid_t file, const char *path)
{
    struct prop p = {"colocated", 0};
    char what[1200], e[64], f[64];
    struct col nt = col_i64(file, path, "steps", "n_train_ranks");
    struct col nr = col_i64(file, path, "steps", "n_rollout_ranks");
    struct col nh = col_i64(file, path, "steps", "n_hybrid_ranks");
    for (size_t r = 0; nt.i && nr.i && nh.i && r < nt.n; r++) {
        if (nr.i[r] > 0 && nt.i[r] == nr.i[r] && nh.i[r] == 0) continue;
        snprintf(what, sizeof what, "%s: /steps row %zu: n_train_ranks, n_hybrid_ranks", path, r);
        snprintf(e, sizeof e, "%" PRId64 ", 0 (n_rollout_ranks)", nr.i[r]);
        snprintf(f, sizeof f, "%" PRId64 ", %" PRId64, nt.i[r], nh.i[r]);
        prop_fail(&p, what, e, f);
    }
    col_free(&nt);
    col_free(&nr);
    col_free(&nh);
    int64_t world = 0;
    if (!read_attr_i64(file, "world_size", &world)) {
        snprintf(what, sizeof what, "%s: root attribute world_size", path);
        prop_fail(&p, what, "present", "missing");
    }
    struct col pt = col_i64(file, path, "plans", "n_train");
    struct col pr = col_i64(file, path, "plans", "n_rollout");
    struct col ph = col_i64(file, path, "plans", "n_hybrid");
    struct col pi = col_i64(file, path, "plans", "n_idle");
    if (pt.i && pt.n == 0) {
        snprintf(what, sizeof what, "%s: /plans rows", path);
        prop_fail(&p, what, "> 0", "0");
    }
    for (size_t r = 0; world > 0 && pt.i && pr.i && ph.i && pi.i && r < pt.n; r++) {
        if (pt.i[r] == pr.i[r] && pr.i[r] + ph.i[r] + pi.i[r] == world - 1) continue;
        snprintf(what, sizeof what, "%s: /plans row %zu: n_train and rollout + hybrid + idle "
                 "ranks", path, r);
        snprintf(e, sizeof e, "%" PRId64 " and %" PRId64, pr.i[r], world - 1);
        snprintf(f, sizeof f, "%" PRId64 " and %" PRId64, pt.i[r], pr.i[r] + ph.i[r] + pi.i[r]);
        prop_fail(&p, what, e, f);
    }
    col_free(&pt);
    col_free(&pr);
    col_free(&ph);
    col_free(&pi);
    /* per rank: 1 decoded, 2 trained (bits) */
    struct col rank = col_i64(file, path, "spans", "rank");
    struct col kind = col_i64(file, path, "spans", "kind");
    unsigned char *did = NULL;
    if (world > 0 && rank.i && kind.i) {
        did = xcalloc((size_t)world, 1);
        for (size_t r = 0; r < rank.n; r++) {
            if (rank.i[r] < 0 || rank.i[r] >= world) continue;
            if (kind.i[r] == SPAN_DECODE) did[rank.i[r]] |= 1;
            if (kind.i[r] >= SPAN_TRAIN_FWD && kind.i[r] <= SPAN_TRAIN_OPT) did[rank.i[r]] |= 2;
        }
        int decoded = 0;
        for (int64_t r = 0; r < world; r++) {
            decoded += (did[r] & 1) != 0;
            if (did[r] == 0 || did[r] == 3) continue;
            snprintf(what, sizeof what, "%s: /spans of rank %" PRId64 ": decode and training",
                     path, r);
            prop_fail(&p, what, "both", did[r] == 1 ? "decode only" : "training only");
        }
        if (decoded == 0) {
            snprintf(what, sizeof what, "%s: ranks with decode spans", path);
            prop_fail(&p, what, "> 0", "0");
        }
    }
    free(did);
    col_free(&rank);
    col_free(&kind);
    prop_end(&p);
    if (p.failures == 0)
        printf("check_rl: %s: colocated: the rollout ranks trained, no other rank did\n", path);
}

static void run_check(const struct run_opts *o)
{
    hid_t f = open_file(o->path);
    if (f < 0) return;
    struct prop p = {"run", 0};
    char what[1200];
    int64_t steps = 0, bound = o->max_staleness;
    bool has_steps = read_attr_i64(f, "steps_requested", &steps);
    if (!has_steps) {
        snprintf(what, sizeof what, "%s: root attribute steps_requested", o->path);
        prop_fail(&p, what, "present", "missing");
    }
    if (bound < 0 && !read_attr_i64(f, "max_staleness", &bound)) {
        snprintf(what, sizeof what, "%s: root attribute max_staleness", o->path);
        prop_fail(&p, what, "present", "missing");
        bound = 0;
    }
    check_status(f, o->path);
    if (has_steps) check_step_range(f, o->path, 1, steps);
    check_params_identical(f, o->path);
    int64_t seen = check_staleness(f, o->path, bound);
    double m = mean_reward(f, o->path);
    printf("check_rl: %s: mean over steps of reward_mean = %.6f\n", o->path, m);
    if (o->want_reward && !(fabs(m - o->reward) <= o->reward_tol)) {
        char e[64], fd[40];
        snprintf(what, sizeof what, "%s: mean over steps of reward_mean (recorded value)",
                 o->path);
        snprintf(e, sizeof e, "%.4f +- %.4f", o->reward, o->reward_tol);
        snprintf(fd, sizeof fd, "%.6f", m);
        prop_fail(&p, what, e, fd);
    }
    if (o->min_migrations >= 0) {
        long moves = count_bucket_moves(f);
        printf("check_rl: %s: %ld moves between buckets in /migrations\n", o->path, moves);
        at_least(&p, o->path, "moves between buckets in /migrations", moves, o->min_migrations);
    }
    if (o->min_hybrid_steps >= 0) {
        struct col h = col_i64(f, o->path, "steps", "n_hybrid_ranks");
        long n = 0;
        for (size_t r = 0; h.i && r < h.n; r++) n += h.i[r] > 0;
        printf("check_rl: %s: %ld steps trained with lent (hybrid) replicas\n", o->path, n);
        at_least(&p, o->path, "/steps rows with n_hybrid_ranks > 0", n, o->min_hybrid_steps);
        col_free(&h);
    }
    if (o->colocated) check_colocated(f, o->path);
    if (o->accuracy_rises) {
        struct col acc = col_f64(f, o->path, "eval", "accuracy");
        double first = acc.f && acc.n ? acc.f[0] : NAN, last = acc.f && acc.n ? acc.f[acc.n - 1] : NAN;
        printf("check_rl: %s: held-out accuracy %.3f -> %.3f over %zu evaluations\n", o->path,
               first, last, acc.n);
        if (!(acc.n >= 2 && last > first)) {
            char e[64], fd[64];
            snprintf(what, sizeof what, "%s: /eval accuracy, last row vs first", o->path);
            snprintf(e, sizeof e, "> %.3f", first);
            snprintf(fd, sizeof fd, "%.3f (%zu rows)", last, acc.n);
            prop_fail(&p, what, e, fd);
        }
        col_free(&acc);
    }
    if (g_failed == 0)
        printf("check_rl: OK: %s: %" PRId64 " steps, replicas identical, staleness_max up to %"
               PRId64 " (bound %" PRId64 ")\n", o->path, steps, seen, bound);
    H5Fclose(f);
}

/* ---- mode 2: two runs of one configuration ---- */

/* Columns equal bit for bit: they come from sampled tokens and rewards alone. */
static const char *const exact_i64[] = {"n_traj", "tokens_gen", "tokens_tool", "calc_calls",
                                        "calc_failures", "zero_var_groups"};
static const char *const exact_f64[] = {"reward_mean", "reward_std", "success_rate"};
/* Columns of the optimizer step: float sums whose order may differ (see compare_near). */
static const char *const near_f64[] = {"loss", "pg_loss", "entropy", "grad_norm"};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* --rows: the /steps rows compared (0: all), and so whether /eval is. */
static size_t g_rows;

static size_t rows_of(size_t nx, size_t ny)
{
    size_t n = nx < ny ? nx : ny;
    return g_rows && g_rows < n ? g_rows : n;
}

static void compare_exact(hid_t fa, const char *a, hid_t fb, const char *b)
{
    char what[1400];
    for (size_t k = 0; k < NELEM(exact_i64); k++) {
        struct prop p = {exact_i64[k], 0};
        struct col x = col_i64(fa, a, "steps", exact_i64[k]);
        struct col y = col_i64(fb, b, "steps", exact_i64[k]);
        for (size_t r = 0; x.i && y.i && r < rows_of(x.n, y.n); r++) {
            if (x.i[r] == y.i[r]) continue;
            snprintf(what, sizeof what, "/steps row %zu: %s identical in both runs", r,
                     exact_i64[k]);
            prop_fail_i(&p, what, x.i[r], y.i[r]);
        }
        col_free(&x);
        col_free(&y);
        prop_end(&p);
    }
    for (size_t k = 0; k < NELEM(exact_f64); k++) {
        struct prop p = {exact_f64[k], 0};
        struct col x = col_f64(fa, a, "steps", exact_f64[k]);
        struct col y = col_f64(fb, b, "steps", exact_f64[k]);
        for (size_t r = 0; x.f && y.f && r < rows_of(x.n, y.n); r++) {
            if (x.f[r] == y.f[r]) continue;
            snprintf(what, sizeof what, "/steps row %zu: %s identical in both runs", r,
                     exact_f64[k]);
            prop_fail_g(&p, what, x.f[r], y.f[r]);
        }
        col_free(&x);
        col_free(&y);
        prop_end(&p);
    }
}

/*
 * The optimizer's figures may differ in the last bits between two runs: the rollout
 * engine decodes whichever sequences are active together, and which those are
 * depends on when tool results come back, so the behaviour log-probs (one input of
 * the loss) carry batch-dependent rounding. rel_tol bounds that.
 */
static void compare_near(hid_t fa, const char *a, hid_t fb, const char *b, double rel_tol)
{
    char what[1400];
    for (size_t k = 0; k < NELEM(near_f64); k++) {
        struct prop p = {near_f64[k], 0};
        struct col x = col_f64(fa, a, "steps", near_f64[k]);
        struct col y = col_f64(fb, b, "steps", near_f64[k]);
        for (size_t r = 0; x.f && y.f && r < rows_of(x.n, y.n); r++) {
            double scale = fmax(fabs(x.f[r]), fabs(y.f[r]));
            if (fabs(x.f[r] - y.f[r]) <= rel_tol * scale) continue;
            snprintf(what, sizeof what, "/steps row %zu: %s equal within %g relative", r,
                     near_f64[k], rel_tol);
            prop_fail_g(&p, what, x.f[r], y.f[r]);
        }
        col_free(&x);
        col_free(&y);
        prop_end(&p);
    }
}

static void compare_eval(hid_t fa, const char *a, hid_t fb, const char *b)
{
    struct prop p = {"eval", 0};
    char what[1400];
    struct col x = col_f64(fa, a, "eval", "accuracy"), y = col_f64(fb, b, "eval", "accuracy");
    if (x.f && y.f && x.n != y.n)
        prop_fail_i(&p, "/eval rows equal in both runs", (int64_t)x.n, (int64_t)y.n);
    if (x.f && x.n == 0) prop_fail(&p, "/eval rows", "> 0", "0");
    for (size_t r = 0; x.f && y.f && r < x.n && r < y.n; r++) {
        if (x.f[r] == y.f[r]) continue;
        snprintf(what, sizeof what, "/eval row %zu: accuracy identical in both runs", r);
        prop_fail_g(&p, what, x.f[r], y.f[r]);
    }
    col_free(&x);
    col_free(&y);
    prop_end(&p);
}

static void compare_runs(const char *a, const char *b, double rel_tol)
{
    hid_t fa = open_file(a), fb = open_file(b);
    if (fa >= 0 && fb >= 0) {
        struct prop p = {"rows", 0};
        int64_t na = table_rows(fa, "steps"), nb = table_rows(fb, "steps");
        if (na != nb) prop_fail_i(&p, "/steps rows equal in both runs", na, nb);
        if (na <= 0) prop_fail_i(&p, "/steps rows of the first run (> 0)", 1, na);
        check_status(fa, a);
        check_status(fb, b);
        compare_exact(fa, a, fb, b);
        compare_near(fa, a, fb, b, rel_tol);
        if (!g_rows) compare_eval(fa, a, fb, b);
        if (g_failed == 0 && g_rows)
            printf("check_rl: OK: %s and %s agree on the first %zu of %" PRId64 " steps "
                   "(rollout figures exactly, training figures within %g)\n", a, b,
                   rows_of((size_t)na, (size_t)nb), na, rel_tol);
        else if (g_failed == 0)
            printf("check_rl: OK: %s and %s agree on %" PRId64 " steps (rollout figures and "
                   "eval exactly, training figures within %g)\n", a, b, na, rel_tol);
    }
    if (fa >= 0) H5Fclose(fa);
    if (fb >= 0) H5Fclose(fb);
}

/* ---- mode 3: a resumed run continues its checkpoint ---- */

/* The resumed file's GRPO groups: its /trajectories rows deduplicated by group_id. */
struct groups {
    int64_t n;
    int64_t *prompt; /* (n) prompt id; -1: no row names this group id */
    int8_t *trained; /* (n) 1 if its rows were trained */
    size_t n_trained, n_untrained;
};

static void groups_free(struct groups *g)
{
    free(g->prompt);
    free(g->trained);
}

/* Reads the groups; rows of one group must agree on prompt and on whether they were
 * trained, trained rows must be consumed by a step in first .. last. Group ids are
 * dense from 0, so none is >= the row count (which bounds what is allocated). */
static void groups_read(struct groups *g, hid_t f, const char *path, int64_t first, int64_t last)
{
    struct prop p = {"resumed rows", 0};
    char what[1300], e[64], fd[64];
    memset(g, 0, sizeof *g);
    struct col pid = col_i64(f, path, "trajectories", "prompt_id");
    struct col gid = col_i64(f, path, "trajectories", "group_id");
    struct col fate = col_i64(f, path, "trajectories", "fate");
    struct col sc = col_i64(f, path, "trajectories", "step_consumed");
    if (!pid.i || !gid.i || !fate.i || !sc.i) goto done;
    if (pid.n == 0) {
        snprintf(what, sizeof what, "%s: /trajectories rows", path);
        prop_fail(&p, what, "> 0", "0");
    }
    g->n = (int64_t)pid.n;
    g->prompt = xmalloc((pid.n + 1) * sizeof *g->prompt);
    g->trained = xcalloc(pid.n + 1, 1);
    for (int64_t k = 0; k < g->n; k++) g->prompt[k] = -1;
    for (size_t r = 0; r < pid.n; r++) {
        int64_t k = gid.i[r];
        int trained = fate.i[r] == TRAJ_TRAINED;
        if (k < 0 || k >= g->n || pid.i[r] < 0) {
            snprintf(what, sizeof what, "%s: /trajectories row %zu: group_id in [0, rows), "
                     "prompt_id >= 0", path, r);
            snprintf(e, sizeof e, "< %" PRId64 ", >= 0", g->n);
            snprintf(fd, sizeof fd, "%" PRId64 ", %" PRId64, k, pid.i[r]);
            prop_fail(&p, what, e, fd);
            continue;
        }
        if (trained && (sc.i[r] < first || sc.i[r] > last)) {
            snprintf(what, sizeof what, "%s: /trajectories row %zu (trained): step_consumed "
                     "after the checkpoint", path, r);
            snprintf(e, sizeof e, "%" PRId64 " .. %" PRId64, first, last);
            snprintf(fd, sizeof fd, "%" PRId64, sc.i[r]);
            prop_fail(&p, what, e, fd);
        }
        if (g->prompt[k] < 0) {
            g->prompt[k] = pid.i[r];
            g->trained[k] = (int8_t)trained;
            *(trained ? &g->n_trained : &g->n_untrained) += 1;
        } else if (g->prompt[k] != pid.i[r] || g->trained[k] != trained) {
            snprintf(what, sizeof what, "%s: /trajectories row %zu: group %" PRId64
                     " has one prompt and one fate class (prompt, trained)", path, r, k);
            snprintf(e, sizeof e, "%" PRId64 ", %d", g->prompt[k], g->trained[k]);
            snprintf(fd, sizeof fd, "%" PRId64 ", %d", pid.i[r], trained);
            prop_fail(&p, what, e, fd);
        }
    }
done:
    col_free(&pid);
    col_free(&gid);
    col_free(&fate);
    col_free(&sc);
    prop_end(&p);
}

/*
 * No prompt skipped or repeated: with N groups in all (trained before the
 * checkpoint + groups of the resumed file), every prompt id 0 .. N-1 is exactly one
 * of them. An id >= N means some smaller id was skipped.
 */
static void check_prompts(const struct ckpt_state *s, const char *state_path,
                          const struct groups *g)
{
    struct prop p = {"prompts", 0};
    char what[1200], f[160];
    int64_t n = s->n_trained + (int64_t)(g->n_trained + g->n_untrained);
    /* per prompt id: trained before, trained after, buffered or in flight at the end */
    int32_t(*seen)[3] = xcalloc((size_t)n + 1, sizeof *seen);
    for (int64_t i = 0; i < s->n_trained; i++) {
        int64_t id = s->trained[i];
        if (id >= 0 && id < n) {
            seen[id][0]++;
            continue;
        }
        snprintf(what, sizeof what, "%s: /trained[%" PRId64 "]: prompt id in [0, groups)",
                 state_path, i);
        prop_fail_i(&p, what, n - 1, id);
    }
    for (int64_t k = 0; k < g->n; k++) {
        int64_t id = g->prompt[k];
        if (id < 0) continue; /* no such group id */
        if (id < n) {
            seen[id][g->trained[k] ? 1 : 2]++;
            continue;
        }
        snprintf(what, sizeof what, "resumed group %" PRId64 ": prompt id in [0, groups)", k);
        prop_fail_i(&p, what, n - 1, id);
    }
    for (int64_t id = 0; id < n; id++) {
        int32_t c = seen[id][0] + seen[id][1] + seen[id][2];
        if (c == 1) continue;
        snprintf(what, sizeof what, "prompt %" PRId64 " is exactly one group (%s)", id,
                 c == 0 ? "skipped" : "repeated");
        snprintf(f, sizeof f, "%d: %d trained before the checkpoint, %d trained after, %d "
                 "buffered or in flight", c, seen[id][0], seen[id][1], seen[id][2]);
        prop_fail(&p, what, "1", f);
    }
    if (n == 0) prop_fail(&p, "groups accounted for", "> 0", "0");
    free(seen);
    prop_end(&p);
}

static void killed_report(const char *path)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        printf("check_rl: note: the killed run's file %s does not open (%s); not required\n",
               path, access(path, R_OK) != 0 ? strerror(errno) : "damaged by the kill");
        return;
    }
    char status[64] = "(none)";
    read_attr_str(f, "status", status, sizeof status);
    int64_t n = table_rows(f, "steps");
    printf("check_rl: note: the killed run's file %s opens: status \"%s\", %" PRId64
           " /steps rows\n", path, status, n);
    H5Fclose(f);
}

static void resume_check(const char *state_path, const char *path, bool expect_carry,
                         const char *killed)
{
    struct prop p = {"resume", 0};
    char err[1024], what[1300];
    struct ckpt_state s;
    if (ckpt_state_load(state_path, &s, err, sizeof err) != 0) {
        snprintf(what, sizeof what, "checkpoint state %s loads", state_path);
        prop_fail(&p, what, "loaded", err);
        return;
    }
    if (killed) killed_report(killed);
    if (expect_carry && s.n_groups + s.n_relaunch == 0) {
        snprintf(what, sizeof what, "%s: groups carried over (buffered + in flight)", state_path);
        prop_fail(&p, what, "> 0", "0");
    }
    hid_t f = open_file(path);
    if (f < 0) {
        ckpt_state_free(&s);
        return;
    }
    int64_t steps = 0, from = -1;
    bool has_steps = read_attr_i64(f, "steps_requested", &steps);
    if (!has_steps) {
        snprintf(what, sizeof what, "%s: root attribute steps_requested", path);
        prop_fail(&p, what, "present", "missing");
    }
    snprintf(what, sizeof what, "%s: root attribute resumed_from_step == the checkpoint's step",
             path);
    if (!read_attr_i64(f, "resumed_from_step", &from))
        prop_fail(&p, what, "present", "missing");
    else if (from != s.step)
        prop_fail_i(&p, what, s.step, from);
    if (has_steps && s.step >= steps)
        prop_fail_i(&p, "the checkpoint precedes the last step (something left to resume)",
                    steps - 1, s.step);
    check_status(f, path);
    if (has_steps) check_step_range(f, path, (int64_t)s.step + 1, steps);
    check_params_identical(f, path);
    int64_t bound;
    if (read_attr_i64(f, "max_staleness", &bound)) check_staleness(f, path, bound);

    if (s.n_trained == 0) {
        snprintf(what, sizeof what, "%s: /trained (prompts trained before the checkpoint)",
                 state_path);
        prop_fail(&p, what, "> 0", "0");
    }
    struct groups g;
    groups_read(&g, f, path, (int64_t)s.step + 1, has_steps ? steps : INT64_MAX);
    check_prompts(&s, state_path, &g);
    if (g_failed == 0)
        printf("check_rl: OK: %s resumed from step %d to %" PRId64 ": prompts 0 .. %" PRId64
               " each exactly one group (%" PRId64 " trained before the checkpoint, which "
               "carried %" PRId64 " buffered and %" PRId64 " in flight; %zu trained after, %zu "
               "buffered or in flight at the end)\n", path, s.step, steps,
               s.n_trained + (int64_t)(g.n_trained + g.n_untrained) - 1, s.n_trained,
               s.n_groups, s.n_relaunch, g.n_trained, g.n_untrained);
    groups_free(&g);
    H5Fclose(f);
    ckpt_state_free(&s);
}

/* ---- main ---- */

static void usage(FILE *f)
{
    fprintf(f, "usage: check_rl FILE.h5 [--max-staleness S] [--reward-mean V TOL] "
               "[--min-migrations N] [--accuracy-rises] [--min-hybrid-steps N] "
               "[--colocated]\n"
               "       check_rl --compare-models A.h5 B.h5 [--rel-tol R] [--moments M]\n"
               "       check_rl --compare A.h5 B.h5 [--rel-tol R] [--rows N]\n"
               "       check_rl --resume-check STATE.h5 RESUMED.h5 [--expect-carry] "
               "[--killed FIRST.h5]\n");
}

static int parse_double(const char *flag, const char *s, double *out)
{
    char *end;
    if (!s) {
        fprintf(stderr, "check_rl: %s needs a number\n", flag);
        return -1;
    }
    errno = 0;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || errno || !isfinite(v)) {
        fprintf(stderr, "check_rl: %s: '%s' is not a number\n", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* ---- mode 4: two model files hold the same parameters ---- */

/* The largest |x - y| over the largest |x| (0 when both are all zero; infinite where
 * one holds a NaN, which fmax would pass over). */
static double rel_to_largest(const float *x, const float *y, size_t n)
{
    double d = 0, big = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)x[i] - y[i]);
        d = isnan(e) && !(isnan(x[i]) && isnan(y[i])) ? INFINITY : fmax(d, e);
        big = fmax(big, fabs((double)x[i]));
    }
    return big > 0 ? d / big : d;
}

/* AdamW's state of two models: the same step count, m and v within tol of their
 * largest values (moments near zero make an element-wise relative test meaningless). */
static void compare_moments(struct prop *p, const char *a, const char *b, const struct adamw *oa,
                            const struct adamw *ob, double tol)
{
    char what[1200], e[48], f[48];
    if (oa->n != ob->n || oa->step != ob->step || oa->n == 0) {
        snprintf(what, sizeof what, "%s vs %s: optimizer state (moments, steps)", a, b);
        snprintf(e, sizeof e, "%zu, %lld", oa->n, (long long)oa->step);
        snprintf(f, sizeof f, "%zu, %lld", ob->n, (long long)ob->step);
        prop_fail(p, what, e, f);
        return;
    }
    const float *x[2] = {oa->m, oa->v}, *y[2] = {ob->m, ob->v};
    const char *name[2] = {"m", "v"};
    for (int k = 0; k < 2; k++) {
        double r = rel_to_largest(x[k], y[k], oa->n);
        printf("check_rl: %s vs %s: AdamW %s (step %lld) within %.3g of its largest value\n", a,
               b, name[k], (long long)oa->step, r);
        if (r <= tol) continue;
        snprintf(what, sizeof what, "%s vs %s: AdamW %s, difference over its largest value", a,
                 b, name[k]);
        snprintf(e, sizeof e, "<= %g", tol);
        snprintf(f, sizeof f, "%.3g", r);
        prop_fail(p, what, e, f);
    }
}

static void compare_models(const char *a, const char *b, double rel_tol, double moments_tol)
{
    struct prop p = {"models", 0};
    struct tfm_config ca, cb;
    struct tfm_params pa, pb;
    struct adamw oa, ob;
    char err[512], what[1200];
    if (tfm_load(a, &ca, &pa, &oa, err, sizeof err)) {
        snprintf(what, sizeof what, "%s loads", a);
        prop_fail(&p, what, "a model file", err);
        return;
    }
    if (tfm_load(b, &cb, &pb, &ob, err, sizeof err)) {
        snprintf(what, sizeof what, "%s loads", b);
        prop_fail(&p, what, "a model file", err);
        return;
    }
    if (pa.n != pb.n) {
        char e[32], f[32];
        snprintf(what, sizeof what, "%s and %s: parameter count", a, b);
        snprintf(e, sizeof e, "%zu", pa.n);
        snprintf(f, sizeof f, "%zu", pb.n);
        prop_fail(&p, what, e, f);
    } else {
        double worst = 0;
        size_t at = 0;
        for (size_t i = 0; i < pa.n; i++) {
            double d = fabs((double)pa.mem[i] - pb.mem[i]) / fmax(1.0, fabs((double)pa.mem[i]));
            if (d > worst) worst = d, at = i;
        }
        printf("check_rl: %s vs %s: %zu parameters, largest relative difference %.3g (at %zu)\n",
               a, b, pa.n, worst, at);
        if (!(worst <= rel_tol)) {
            char e[32], f[32];
            snprintf(what, sizeof what, "%s vs %s: largest relative parameter difference", a, b);
            snprintf(e, sizeof e, "<= %g", rel_tol);
            snprintf(f, sizeof f, "%.3g", worst);
            prop_fail(&p, what, e, f);
        }
    }
    if (moments_tol >= 0) compare_moments(&p, a, b, &oa, &ob, moments_tol);
    tfm_params_free(&pa);
    tfm_params_free(&pb);
    adamw_free(&oa);
    adamw_free(&ob);
    prop_end(&p);
    if (g_failed == 0)
        printf("check_rl: OK: %s and %s hold the same parameters%s\n", a, b,
               moments_tol >= 0 ? " and optimizer state" : "");
}

enum mode { MODE_RUN, MODE_COMPARE, MODE_RESUME, MODE_MODELS };

struct args {
    enum mode mode;
    const char *files[2];
    int n_files;
    struct run_opts run;
    double rel_tol;
    double moments_tol; /* --moments; < 0: not compared */
    long rows;          /* --rows; 0: all */
    const char *killed;
    bool expect_carry;
};

static int parse_args(int argc, char **argv, struct args *a)
{
    memset(a, 0, sizeof *a);
    a->run.max_staleness = -1;
    a->run.min_migrations = -1;
    a->run.min_hybrid_steps = -1;
    a->rel_tol = 1e-4;
    a->moments_tol = -1;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        double v;
        if (strcmp(s, "--compare") == 0 || strcmp(s, "--resume-check") == 0 ||
            strcmp(s, "--compare-models") == 0) {
            if (a->mode != MODE_RUN || a->n_files) {
                fprintf(stderr, "check_rl: %s must come first, once\n", s);
                return -1;
            }
            a->mode = strcmp(s, "--compare-models") == 0 ? MODE_MODELS
                      : s[2] == 'c'                      ? MODE_COMPARE
                                                         : MODE_RESUME;
        } else if (strcmp(s, "--max-staleness") == 0) {
            if (parse_double(s, next, &v) || v < 0 || v != floor(v)) return -1;
            a->run.max_staleness = (long)v;
            i++;
        } else if (strcmp(s, "--reward-mean") == 0) {
            if (parse_double(s, next, &a->run.reward) ||
                parse_double(s, i + 2 < argc ? argv[i + 2] : NULL, &a->run.reward_tol))
                return -1;
            a->run.want_reward = true;
            i += 2;
        } else if (strcmp(s, "--min-migrations") == 0) {
            if (parse_double(s, next, &v) || v < 0 || v != floor(v)) return -1;
            a->run.min_migrations = (long)v;
            i++;
        } else if (strcmp(s, "--min-hybrid-steps") == 0) {
            if (parse_double(s, next, &v) || v < 0 || v != floor(v)) return -1;
            a->run.min_hybrid_steps = (long)v;
            i++;
        } else if (strcmp(s, "--accuracy-rises") == 0) {
            a->run.accuracy_rises = true;
        } else if (strcmp(s, "--colocated") == 0) {
            a->run.colocated = true;
        } else if (strcmp(s, "--rel-tol") == 0) {
            if (parse_double(s, next, &a->rel_tol) || a->rel_tol < 0) return -1;
            i++;
        } else if (strcmp(s, "--moments") == 0) {
            if (parse_double(s, next, &a->moments_tol) || a->moments_tol < 0) return -1;
            i++;
        } else if (strcmp(s, "--rows") == 0) {
            if (parse_double(s, next, &v) || v < 1 || v != floor(v)) return -1;
            a->rows = (long)v;
            i++;
        } else if (strcmp(s, "--expect-carry") == 0) {
            a->expect_carry = true;
        } else if (strcmp(s, "--killed") == 0) {
            if (!next) {
                fprintf(stderr, "check_rl: --killed needs a file\n");
                return -1;
            }
            a->killed = argv[++i];
        } else if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (s[0] == '-' || a->n_files == 2) {
            fprintf(stderr, "check_rl: unexpected argument '%s'\n", s);
            return -1;
        } else {
            a->files[a->n_files++] = s;
        }
    }
    int want = a->mode == MODE_RUN ? 1 : 2;
    if (a->n_files != want) {
        fprintf(stderr, "check_rl: %d file(s) given, this mode takes %d\n", a->n_files, want);
        return -1;
    }
    bool run_flags = a->run.max_staleness >= 0 || a->run.want_reward ||
                     a->run.min_migrations >= 0 || a->run.accuracy_rises ||
                     a->run.min_hybrid_steps >= 0 || a->run.colocated;
    if ((a->mode != MODE_RUN && run_flags) ||
        (a->mode != MODE_COMPARE && a->mode != MODE_MODELS && a->rel_tol != 1e-4) ||
        (a->mode != MODE_MODELS && a->moments_tol >= 0) || (a->mode != MODE_COMPARE && a->rows) ||
        (a->mode != MODE_RESUME && (a->killed || a->expect_carry))) {
        fprintf(stderr, "check_rl: an option does not belong to this mode\n");
        return -1;
    }
    a->run.path = a->files[0];
    return 0;
}

int main(int argc, char **argv)
{
    struct args a;
    if (parse_args(argc, argv, &a) != 0) {
        usage(stderr);
        return 2;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* failures are reported as FAIL lines */
    switch (a.mode) {
    case MODE_RUN: run_check(&a.run); break;
    case MODE_COMPARE:
        g_rows = (size_t)a.rows;
        compare_runs(a.files[0], a.files[1], a.rel_tol);
        break;
    case MODE_MODELS: compare_models(a.files[0], a.files[1], a.rel_tol, a.moments_tol); break;
    case MODE_RESUME: resume_check(a.files[0], a.files[1], a.expect_carry, a.killed); break;
    }
    if (g_failed) printf("check_rl: %d failed checks\n", g_failed);
    return g_failed ? 1 : 0;
}
