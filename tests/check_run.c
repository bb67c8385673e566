/*
 * check_run: asserts that a finished run's metrics file (docs/metrics.md) is
 * self-consistent; used by the multi-rank integration tests.
 *
 *   check_run FILE.h5 [--min-steps N] [--min-plans K] [--expect-moves] [--expect-handback]
 *             [--sched] [--expect-tree] [--expect-status STATUS] [--aborted]
 *
 * --expect-status: the root attribute status the file must carry (default
 * "complete"; "cancelled" for a run stopped by a signal, "failed" for one that
 * stopped itself, e.g. on a non-finite step: both may end before the steps requested).
 * --aborted: a run a fatal error ended (exit 1): status "failed", an "error" event,
 * and the end-of-run attributes and untrained-trajectory rows not required -- what
 * was written before the error must read back whole.
 * The timing breakdown of /steps (files of schema 6 on) is checked against what holds
 * by construction (check_breakdown).
 * --sched checks the scheduler's tables (/sched, /migrations, /instances);
 * --expect-tree also wants the C-MLFQ prefix tree in /tree.
 *
 * Every property is one small function; each failed check prints
 *   check_run: FAIL: <what> (<expected> vs <found>)
 * (at most MAX_REPORTS lines per property, then a count), and the program ends with
 *   check_run: OK: <summary>     exit 0
 * or exit 1 if anything failed, 2 on a usage error. Needs HDF5, log.c and libra's
 * column reader (h5util.c), which reads enum columns as codes or names.
 *
 * Columns are read one at a time through a one-member compound memory type, so HDF5
 * converts by column name and the checker does not depend on the writer's struct layout.
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/log.h"
#include "libra/h5util.h" /* h5_read_column: the one libra reader the checker uses */
#include "libra/metrics.h" /* enum traj_fate and the enumerations' names */

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
#define TP_WIDTH 129   /* /plans rollout_tp is 128 wide in the file; one more for safety */
#define KIND_WIDTH 33  /* /events kind is 32 wide */

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
        printf("check_run: FAIL: %s (%s vs %s)\n", what, expected, found);
}

static void prop_fail_i(struct prop *p, const char *what, int64_t expected, int64_t found)
{
    char e[32], f[32];
    snprintf(e, sizeof e, "%" PRId64, expected);
    snprintf(f, sizeof f, "%" PRId64, found);
    prop_fail(p, what, e, f);
}

static void prop_end(const struct prop *p)
{
    if (p->failures > MAX_REPORTS)
        printf("check_run: FAIL: %s: %d more failures not shown (0 vs %d)\n", p->name,
               p->failures - MAX_REPORTS, p->failures - MAX_REPORTS);
}

/* ---- what the file holds ---- */

struct table_i64 {
    size_t n;
    int64_t *v;
};

struct run {
    const char *path;
    hid_t file;
    char status[64];
    bool has_status;
    int64_t steps_requested, max_staleness, n_traj_started;
    bool has_steps_requested, has_max_staleness, has_n_traj_started;

    bool has_steps; /* every /steps column below was read */
    size_t nsteps;
    int64_t *step, *version, *staleness_max, *n_traj;

    bool has_traj;
    size_t ntraj;
    int64_t *traj_id, *fate, *step_consumed, *version_start, *version_end;

    bool has_plans;
    size_t nplans;
    int64_t *epoch, *n_train, *n_rollout, *n_hybrid, *handed_back;
    char *rollout_tp; /* (nplans, TP_WIDTH) */

    bool has_events;
    size_t nevents;
    char *kind; /* (nevents, KIND_WIDTH) */
};

struct options {
    const char *path;
    long min_steps, min_plans;
    bool expect_moves;
    bool expect_handback;
    bool sched, expect_tree;
    long min_replans;         /* /plans rows chosen by the planner or the pool */
    const char *expect_event[8]; /* /events kinds that must appear (--expect-event, repeatable) */
    int n_expect_event;
    bool planner;             /* /planner: a row per step, applied rows = grp plans */
    const char *expect_status; /* the root attribute status (--expect-status; "complete") */
    bool aborted;             /* --aborted: ended by a fatal error */
};

/* ---- reading ---- */

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
 * Reads column col of table into *out (n rows, elem bytes each) through a memory
 * compound type with that one member. Prints a FAIL and returns -1 if the table or
 * column is missing or unreadable.
 */
static int read_column(hid_t file, const char *table, const char *col, hid_t member, size_t elem,
                       void **out, size_t *n)
{
    struct prop p = {"read", 0};
    char what[256];
    hid_t d = H5I_INVALID_HID, ft = H5I_INVALID_HID, sp = H5I_INVALID_HID;
    *out = NULL;
    *n = 0;
    if (H5Lexists(file, table, H5P_DEFAULT) <= 0) {
        snprintf(what, sizeof what, "table /%s exists", table);
        prop_fail(&p, what, "present", "missing");
        return -1;
    }
    snprintf(what, sizeof what, "/%s column %s readable", table, col);
    if ((d = H5Dopen2(file, table, H5P_DEFAULT)) < 0 || (ft = H5Dget_type(d)) < 0 ||
        H5Tget_class(ft) != H5T_COMPOUND) {
        prop_fail(&p, what, "compound dataset", "not one");
        goto fail;
    }
    if (H5Tget_member_index(ft, col) < 0) {
        snprintf(what, sizeof what, "/%s has column %s", table, col);
        prop_fail(&p, what, "present", "missing");
        goto fail;
    }
    hssize_t rows;
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

static int read_i64(hid_t file, const char *table, const char *col, int64_t **out, size_t *n)
{
    return read_column(file, table, col, H5T_NATIVE_INT64, sizeof(int64_t), (void **)out, n);
}

static int read_str(hid_t file, const char *table, const char *col, size_t width, char **out,
                    size_t *n)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, width);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    int rc = read_column(file, table, col, t, width, (void **)out, n);
    H5Tclose(t);
    return rc;
}

/* Reads several int64 columns of one table; all must have the same row count. */
static bool read_table(hid_t file, const char *table, const char *const *cols, int64_t **const *dst,
                       int ncols, size_t *nrows)
{
    bool ok = true;
    *nrows = 0;
    if (H5Lexists(file, table, H5P_DEFAULT) <= 0) { /* one FAIL for the table, not per column */
        size_t n;
        void *none;
        read_column(file, table, cols[0], H5T_NATIVE_INT64, sizeof(int64_t), &none, &n);
        return false;
    }
    for (int i = 0; i < ncols; i++) {
        size_t n;
        if (read_i64(file, table, cols[i], dst[i], &n) != 0) {
            ok = false;
            continue;
        }
        *nrows = n;
    }
    return ok;
}

static int run_load(struct run *r, const char *path)
{
    memset(r, 0, sizeof *r);
    r->path = path;
    r->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (r->file < 0) {
        struct prop p = {"open", 0};
        char what[1200];
        snprintf(what, sizeof what, "metrics file %s opens read-only", path);
        prop_fail(&p, what, "an HDF5 file",
                  access(path, R_OK) != 0 ? strerror(errno) : "not an HDF5 file");
        return -1;
    }
    r->has_status = read_attr_str(r->file, "status", r->status, sizeof r->status);
    r->has_steps_requested = read_attr_i64(r->file, "steps_requested", &r->steps_requested);
    r->has_max_staleness = read_attr_i64(r->file, "max_staleness", &r->max_staleness);
    r->has_n_traj_started = read_attr_i64(r->file, "n_traj_started", &r->n_traj_started);

    static const char *const step_cols[] = {"step", "version", "staleness_max", "n_traj"};
    int64_t **step_dst[] = {&r->step, &r->version, &r->staleness_max, &r->n_traj};
    r->has_steps = read_table(r->file, "steps", step_cols, step_dst, 4, &r->nsteps);

    static const char *const traj_cols[] = {"traj_id", "fate", "step_consumed", "version_start",
                                            "version_end"};
    int64_t **traj_dst[] = {&r->traj_id, &r->fate, &r->step_consumed, &r->version_start,
                            &r->version_end};
    r->has_traj = read_table(r->file, "trajectories", traj_cols, traj_dst, 5, &r->ntraj);

    static const char *const plan_cols[] = {"epoch", "n_train", "n_rollout", "n_hybrid",
                                            "handed_back"};
    int64_t **plan_dst[] = {&r->epoch, &r->n_train, &r->n_rollout, &r->n_hybrid,
                            &r->handed_back};
    r->has_plans = read_table(r->file, "plans", plan_cols, plan_dst, 5, &r->nplans);
    size_t n;
    if (r->has_plans &&
        read_str(r->file, "plans", "rollout_tp", TP_WIDTH, &r->rollout_tp, &n) != 0)
        r->has_plans = false;

    r->has_events = read_str(r->file, "events", "kind", KIND_WIDTH, &r->kind, &r->nevents) == 0;
    return 0;
}

static void run_free(struct run *r)
{
    int64_t *cols[] = {r->step, r->version, r->staleness_max, r->n_traj, r->traj_id, r->fate,
                       r->step_consumed, r->version_start, r->version_end, r->epoch, r->n_train,
                       r->n_rollout, r->n_hybrid, r->handed_back};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) free(cols[i]);
    free(r->rollout_tp);
    free(r->kind);
    if (r->file >= 0) H5Fclose(r->file);
}

/* ---- properties ---- */

static void check_status(const struct run *r, const char *want)
{
    struct prop p = {"status", 0};
    char quoted[80];
    snprintf(quoted, sizeof quoted, "\"%.60s\"", want ? want : "complete");
    if (!r->has_status)
        prop_fail(&p, "root attribute status", quoted, "missing");
    else if (strcmp(r->status, want ? want : "complete") != 0)
        prop_fail(&p, "root attribute status", quoted, r->status);
}

static void check_run_attrs(const struct run *r)
{
    struct prop p = {"attributes", 0};
    if (!r->has_steps_requested)
        prop_fail(&p, "root attribute steps_requested (int)", "present", "missing");
    if (!r->has_max_staleness)
        prop_fail(&p, "root attribute max_staleness (int)", "present", "missing");
    if (!r->has_n_traj_started)
        prop_fail(&p, "root attribute n_traj_started (int)", "present", "missing");
}

static void check_step_count(const struct run *r, const struct options *o)
{
    struct prop p = {"step count", 0};
    if (!r->has_steps) return;
    /* a cancelled run, or one that stopped itself as failed, ends early: at most the
     * steps requested */
    int cancelled = r->has_status &&
                    (strcmp(r->status, "cancelled") == 0 || strcmp(r->status, "failed") == 0);
    if (r->has_steps_requested && !cancelled && (int64_t)r->nsteps != r->steps_requested)
        prop_fail_i(&p, "/steps rows == steps_requested", r->steps_requested,
                    (int64_t)r->nsteps);
    if (r->has_steps_requested && cancelled && (int64_t)r->nsteps > r->steps_requested)
        prop_fail_i(&p, "/steps rows <= steps_requested (ended early)", r->steps_requested,
                    (int64_t)r->nsteps);
    if ((long)r->nsteps < o->min_steps)
        prop_fail_i(&p, "/steps rows >= --min-steps", o->min_steps, (int64_t)r->nsteps);
}

static void check_step_numbers(const struct run *r)
{
    struct prop p = {"step numbers", 0};
    char what[96];
    for (size_t i = 0; r->has_steps && i < r->nsteps; i++) {
        if (r->step[i] == (int64_t)i + 1) continue;
        snprintf(what, sizeof what, "/steps row %zu: step", i);
        prop_fail_i(&p, what, (int64_t)i + 1, r->step[i]);
    }
    prop_end(&p);
}

static void check_versions(const struct run *r)
{
    struct prop p = {"versions", 0};
    char what[96];
    for (size_t i = 1; r->has_steps && i < r->nsteps; i++) {
        if (r->version[i] == r->version[i - 1] + 1) continue;
        snprintf(what, sizeof what, "/steps row %zu: version = previous + 1", i);
        prop_fail_i(&p, what, r->version[i - 1] + 1, r->version[i]);
    }
    prop_end(&p);
}

static void check_step_staleness(const struct run *r)
{
    struct prop p = {"step staleness", 0};
    char what[96], e[32], f[32];
    if (!r->has_steps || !r->has_max_staleness) return;
    for (size_t i = 0; i < r->nsteps; i++) {
        if (r->staleness_max[i] <= r->max_staleness) continue;
        snprintf(what, sizeof what, "/steps row %zu: staleness_max <= max_staleness", i);
        snprintf(e, sizeof e, "<= %" PRId64, r->max_staleness);
        snprintf(f, sizeof f, "%" PRId64, r->staleness_max[i]);
        prop_fail(&p, what, e, f);
    }
    prop_end(&p);
}

static void check_step_ntraj(const struct run *r)
{
    struct prop p = {"step n_traj", 0};
    char what[96], f[32];
    for (size_t i = 0; r->has_steps && i < r->nsteps; i++) {
        if (r->n_traj[i] > 0) continue;
        snprintf(what, sizeof what, "/steps row %zu: n_traj > 0", i);
        snprintf(f, sizeof f, "%" PRId64, r->n_traj[i]);
        prop_fail(&p, what, "> 0", f);
    }
    prop_end(&p);
}

/* traj_id is exactly {0 .. n_traj_started-1}: nothing lost, nothing twice. */
static void check_traj_ids(const struct run *r)
{
    struct prop p = {"trajectory ids", 0};
    char what[96];
    if (!r->has_traj || !r->has_n_traj_started) return;
    if ((int64_t)r->ntraj != r->n_traj_started)
        prop_fail_i(&p, "/trajectories rows == n_traj_started", r->n_traj_started,
                    (int64_t)r->ntraj);
    int64_t n = r->n_traj_started > 0 ? r->n_traj_started : 0;
    unsigned char *seen = xcalloc((size_t)n + 1, 1);
    for (size_t i = 0; i < r->ntraj; i++) {
        int64_t id = r->traj_id[i];
        if (id < 0 || id >= n) {
            snprintf(what, sizeof what, "/trajectories row %zu: traj_id in [0, %" PRId64 ")", i, n);
            prop_fail_i(&p, what, n - 1, id);
        } else if (seen[id]++) {
            snprintf(what, sizeof what, "/trajectories row %zu: traj_id %" PRId64
                     " unique (occurrences)", i, id);
            prop_fail_i(&p, what, 1, seen[id]);
        }
    }
    for (int64_t id = 0; id < n; id++) {
        if (seen[id]) continue;
        snprintf(what, sizeof what, "traj_id %" PRId64 " present in /trajectories (lost)", id);
        prop_fail(&p, what, "present", "missing");
    }
    free(seen);
    prop_end(&p);
}

static void check_traj_fates(const struct run *r)
{
    struct prop p = {"trajectory fate", 0};
    char what[96], f[32];
    for (size_t i = 0; r->has_traj && i < r->ntraj; i++) {
        if (r->fate[i] >= 0 && r->fate[i] <= 2) continue;
        snprintf(what, sizeof what, "/trajectories row %zu: fate", i);
        snprintf(f, sizeof f, "%" PRId64, r->fate[i]);
        prop_fail(&p, what, "0, 1 or 2", f);
    }
    prop_end(&p);
}

/* Trained rows: consumed by a real step, within the staleness bound, causal versions. */
static void check_trained_rows(const struct run *r)
{
    struct prop p = {"trained rows", 0};
    char what[128], e[48], f[32];
    if (!r->has_traj) return;
    int64_t nsteps = r->has_steps ? (int64_t)r->nsteps : 0;
    for (size_t i = 0; i < r->ntraj; i++) {
        if (r->fate[i] != TRAJ_TRAINED) continue;
        int64_t k = r->step_consumed[i], vs = r->version_start[i], ve = r->version_end[i];
        if (k < 1 || k > nsteps) {
            snprintf(what, sizeof what, "/trajectories row %zu (trained): step_consumed", i);
            snprintf(e, sizeof e, "1..%" PRId64, nsteps);
            snprintf(f, sizeof f, "%" PRId64, k);
            prop_fail(&p, what, e, f);
            continue;
        }
        /* The policy version before step k is k-1. */
        if (r->has_max_staleness && (k - 1) - vs > r->max_staleness) {
            snprintf(what, sizeof what,
                     "/trajectories row %zu: staleness (step_consumed-1) - version_start", i);
            snprintf(e, sizeof e, "<= %" PRId64, r->max_staleness);
            snprintf(f, sizeof f, "%" PRId64, (k - 1) - vs);
            prop_fail(&p, what, e, f);
        }
        if (vs > k - 1) {
            snprintf(what, sizeof what,
                     "/trajectories row %zu: version_start <= step_consumed-1 (causality)", i);
            prop_fail_i(&p, what, k - 1, vs);
        }
        if (ve < vs) {
            snprintf(what, sizeof what, "/trajectories row %zu: version_end >= version_start", i);
            snprintf(e, sizeof e, ">= %" PRId64, vs);
            snprintf(f, sizeof f, "%" PRId64, ve);
            prop_fail(&p, what, e, f);
        }
    }
    prop_end(&p);
}

static void check_untrained_rows(const struct run *r)
{
    struct prop p = {"untrained rows", 0};
    char what[96];
    for (size_t i = 0; r->has_traj && i < r->ntraj; i++) {
        if (r->fate[i] == TRAJ_TRAINED || r->step_consumed[i] == -1) continue;
        snprintf(what, sizeof what, "/trajectories row %zu (fate %" PRId64 "): step_consumed",
                 i, r->fate[i]);
        prop_fail_i(&p, what, -1, r->step_consumed[i]);
    }
    prop_end(&p);
}

/* Trained rows agree with /steps n_traj, in total and step by step. */
static void check_trained_counts(const struct run *r)
{
    struct prop p = {"trained counts", 0};
    char what[96];
    if (!r->has_traj || !r->has_steps) return;
    int64_t *per_step = xcalloc(r->nsteps + 1, sizeof *per_step);
    int64_t trained = 0, expected = 0;
    for (size_t i = 0; i < r->ntraj; i++) {
        if (r->fate[i] != TRAJ_TRAINED) continue;
        trained++;
        int64_t k = r->step_consumed[i];
        if (k >= 1 && k <= (int64_t)r->nsteps) per_step[k - 1]++;
    }
    for (size_t i = 0; i < r->nsteps; i++) expected += r->n_traj[i];
    if (trained != expected)
        prop_fail_i(&p, "trained /trajectories rows == sum of /steps n_traj", expected, trained);
    for (size_t i = 0; i < r->nsteps; i++) {
        if (per_step[i] == r->n_traj[i]) continue;
        snprintf(what, sizeof what, "trained rows with step_consumed == %zu == /steps n_traj",
                 i + 1);
        prop_fail_i(&p, what, r->n_traj[i], per_step[i]);
    }
    free(per_step);
    prop_end(&p);
}

static void check_plans(const struct run *r, const struct options *o)
{
    struct prop p = {"plans", 0};
    char what[96];
    if (!r->has_plans) return;
    if ((long)r->nplans < o->min_plans)
        prop_fail_i(&p, "/plans rows >= --min-plans", o->min_plans, (int64_t)r->nplans);
    /* a row per plan change: epoch 0 first, then rising (an epoch that kept its plan
     * has no row) */
    for (size_t i = 0; i < r->nplans; i++) {
        int64_t least = i == 0 ? 0 : r->epoch[i - 1] + 1;
        if (i == 0 ? r->epoch[0] == 0 : r->epoch[i] >= least) continue;
        snprintf(what, sizeof what, "/plans row %zu: epoch (%s)", i,
                 i == 0 ? "the initial plan's" : "at least the row before's + 1");
        prop_fail_i(&p, what, least, r->epoch[i]);
    }
    prop_end(&p);
}

static size_t count_moves(const struct run *r)
{
    size_t moves = 0;
    for (size_t i = 1; r->has_plans && i < r->nplans; i++)
        if (r->n_train[i] != r->n_train[i - 1] || r->n_rollout[i] != r->n_rollout[i - 1] ||
            r->n_hybrid[i] != r->n_hybrid[i - 1] ||
            strcmp(r->rollout_tp + i * TP_WIDTH, r->rollout_tp + (i - 1) * TP_WIDTH) != 0)
            moves++;
    return moves;
}

static void check_moves(const struct run *r, const struct options *o)
{
    struct prop p = {"moves", 0};
    if (!o->expect_moves || !r->has_plans) return;
    if (count_moves(r) == 0)
        prop_fail(&p, "--expect-moves: consecutive plans differ in (n_train, n_rollout, "
                      "n_hybrid, rollout_tp)", ">= 1 move", "0");
}

static void check_handback(const struct run *r, const struct options *o)
{
    struct prop p = {"handback", 0};
    if (!o->expect_handback || !r->has_plans) return;
    int64_t n = 0;
    for (size_t i = 0; i < r->nplans; i++) n += r->handed_back[i];
    if (n == 0)
        prop_fail(&p, "--expect-handback: in-flight turns handed back at a re-split",
                  ">= 1 turn", "0");
}

static size_t count_kind(const struct run *r, const char *kind)
{
    size_t n = 0;
    for (size_t i = 0; r->has_events && i < r->nevents; i++)
        if (strcmp(r->kind + i * KIND_WIDTH, kind) == 0) n++;
    return n;
}


#define REASON_WIDTH 65 /* /plans reason is 64 wide */

static void check_resplit_events(const struct run *r)
{
    struct prop p = {"resplit events", 0};
    if (!r->has_events || !r->has_plans || r->nplans <= 1) return;
    /* every /plans row after the first is a change of plan, re-split */
    size_t resplits = count_kind(r, "resplit");
    if (resplits != r->nplans - 1)
        prop_fail_i(&p, "/events \"resplit\" rows == /plans rows - 1 (one per change)",
                    (int64_t)r->nplans - 1, (int64_t)resplits);
}

/* ---- the timing breakdown of /steps (schema 6 on) ---- */

enum {
    B_STEP_S, B_WAIT, B_TRAIN, B_FWD, B_BWD, B_REDUCE, B_OPT, B_GEN, B_TOOL_N, B_TOOL_S,
    B_NSYNC, B_SYNC_S, B_SYNC_BYTES, B_RESPLIT, B_CKPT, B_RIDLE, B_TIDLE, B_COLS
};

/* What holds by construction (docs/metrics.md): every term is finite and >= 0;
 * rollout_wait_s + train_s = step_s (the step is the wait for the batch, then its
 * training, on rank 0's clock); the root's forward + backward + reduction + optimizer
 * happen between rank 0 sending the batch and receiving TRAIN_DONE, so they sum to at
 * most train_s; the idle fractions are fractions; a step without a sync or a tool call
 * has no sync or tool time; the syncs counted never outnumber the weight_sync events,
 * and the re-split seconds are those of /plans. Not checked: gen_s <= step_s (busy
 * time is reported when a batch of results is packed, possibly in a later step). */
static void check_breakdown(const struct run *r)
{
    static const char *const cols[B_COLS] = {
        "step_s", "rollout_wait_s", "train_s", "train_fwd_s", "train_bwd_s", "train_reduce_s",
        "train_opt_s", "gen_s", "tool_calls_n", "tool_s", "n_syncs", "sync_s", "sync_bytes",
        "resplit_s", "ckpt_s", "rollout_idle_frac", "train_idle_frac"};
    struct prop p = {"timing breakdown", 0};
    int64_t schema = 0;
    if (!r->has_steps || !read_attr_i64(r->file, "schema_version", &schema) || schema < 6) return;
    double *v[B_COLS] = {0}, *plan_resplit = NULL;
    size_t n = 0, m = 0;
    for (int c = 0; c < B_COLS; c++)
        if (read_column(r->file, "steps", cols[c], H5T_NATIVE_DOUBLE, sizeof(double),
                        (void **)&v[c], &n) != 0)
            goto done;
    double syncs = 0, resplit = 0, plans_resplit = 0;
    char what[160], a[48], b[48];
    for (size_t i = 0; i < n; i++) {
        for (int c = 0; c < B_COLS; c++)
            if (!(v[c][i] >= 0) || !isfinite(v[c][i])) {
                snprintf(what, sizeof what, "/steps %s of step %zu finite and >= 0", cols[c], i + 1);
                snprintf(b, sizeof b, "%g", v[c][i]);
                prop_fail(&p, what, ">= 0", b);
            }
        double step = v[B_STEP_S][i], tol = 1e-9 * (1 + step);
        if (!(fabs(v[B_WAIT][i] + v[B_TRAIN][i] - step) <= tol)) { /* a NaN fails too */
            snprintf(what, sizeof what, "/steps rollout_wait_s + train_s == step_s (step %zu)", i + 1);
            snprintf(a, sizeof a, "%.9g", step);
            snprintf(b, sizeof b, "%.9g", v[B_WAIT][i] + v[B_TRAIN][i]);
            prop_fail(&p, what, a, b);
        }
        double parts = v[B_FWD][i] + v[B_BWD][i] + v[B_REDUCE][i] + v[B_OPT][i];
        if (parts > v[B_TRAIN][i] * (1 + 1e-6) + 1e-6) {
            snprintf(what, sizeof what, "/steps train_fwd_s + train_bwd_s + train_reduce_s + "
                     "train_opt_s <= train_s (step %zu)", i + 1);
            snprintf(a, sizeof a, "<= %.9g", v[B_TRAIN][i]);
            snprintf(b, sizeof b, "%.9g", parts);
            prop_fail(&p, what, a, b);
        }
        for (int c = B_RIDLE; c <= B_TIDLE; c++)
            if (v[c][i] > 1) {
                snprintf(what, sizeof what, "/steps %s <= 1 (step %zu)", cols[c], i + 1);
                snprintf(b, sizeof b, "%g", v[c][i]);
                prop_fail(&p, what, "<= 1", b);
            }
        if (v[B_NSYNC][i] == 0 && (v[B_SYNC_S][i] != 0 || v[B_SYNC_BYTES][i] != 0))
            prop_fail_i(&p, "/steps sync_s and sync_bytes are 0 when n_syncs is 0", 0, (int64_t)i + 1);
        if (v[B_TOOL_N][i] == 0 && v[B_TOOL_S][i] != 0)
            prop_fail_i(&p, "/steps tool_s is 0 when tool_calls_n is 0", 0, (int64_t)i + 1);
        syncs += v[B_NSYNC][i];
        resplit += v[B_RESPLIT][i];
    }
    if (syncs > (double)count_kind(r, "weight_sync"))
        prop_fail_i(&p, "/steps n_syncs summed <= \"weight_sync\" events",
                    (int64_t)count_kind(r, "weight_sync"), (int64_t)syncs);
    if (r->has_plans && read_column(r->file, "plans", "resplit_s", H5T_NATIVE_DOUBLE,
                                    sizeof(double), (void **)&plan_resplit, &m) == 0) {
        for (size_t i = 0; i < m; i++) plans_resplit += plan_resplit[i];
        if (resplit > plans_resplit * (1 + 1e-9) + 1e-12) {
            snprintf(a, sizeof a, "<= %.9g", plans_resplit);
            snprintf(b, sizeof b, "%.9g", resplit);
            prop_fail(&p, "/steps resplit_s summed <= /plans resplit_s summed", a, b);
        }
    }
done:
    for (int c = 0; c < B_COLS; c++) free(v[c]);
    free(plan_resplit);
    prop_end(&p);
}

/* ---- the scheduler's tables (--sched) ---- */

static const char *const route_cols[] = {"route_initial", "route_informed", "route_sticky",
                                         "route_migrate", "route_reroute", "route_per_turn",
                                         "route_history", "route_scout", "route_scout_follow",
                                         "route_scout_timeout"};
static const char *const via_cols[] = {"via_preferred", "via_fallback", "via_global"};
#define N_ROUTE_COLS (sizeof route_cols / sizeof route_cols[0])
#define N_VIA_COLS (sizeof via_cols / sizeof via_cols[0])

static int64_t sum_columns(hid_t file, const char *const *cols, size_t ncols, size_t nrows,
                           int64_t *per_row)
{
    int64_t total = 0;
    for (size_t c = 0; c < ncols; c++) {
        int64_t *v = NULL;
        size_t n = 0;
        if (read_i64(file, "sched", cols[c], &v, &n) == 0)
            for (size_t i = 0; i < n && i < nrows; i++) per_row[i] += v[i], total += v[i];
        free(v);
    }
    return total;
}

/* One /sched row per step; every decision counted once by reason and once by route
 * kind; never more decisions than turns dispatched; every accepted /migrations row
 * counted in its step's migrations and really moving between TP classes; /instances
 * occupancy in range. */
static void check_sched(const struct run *r, const struct options *o)
{
    if (!o->sched) return;
    struct prop p = {"scheduler", 0};
    int64_t *step = NULL, *mig = NULL;
    size_t n = 0, nm = 0;
    if (read_i64(r->file, "sched", "step", &step, &n) != 0 ||
        read_i64(r->file, "sched", "migrations", &mig, &nm) != 0) {
        free(step);
        free(mig);
        g_failed++;
        return;
    }
    if (n != r->nsteps) prop_fail_i(&p, "/sched rows == /steps rows", (int64_t)r->nsteps, (int64_t)n);
    for (size_t i = 0; i < n && i < r->nsteps; i++)
        if (step[i] != r->step[i]) prop_fail_i(&p, "/sched step == /steps step", r->step[i], step[i]);
    int64_t *by_reason = xcalloc(n + 1, sizeof *by_reason), *by_via = xcalloc(n + 1, sizeof *by_via);
    int64_t total = sum_columns(r->file, route_cols, N_ROUTE_COLS, n, by_reason);
    sum_columns(r->file, via_cols, N_VIA_COLS, n, by_via);
    for (size_t i = 0; i < n; i++)
        if (by_reason[i] != by_via[i])
            prop_fail_i(&p, "decisions by reason == decisions by route kind", by_reason[i], by_via[i]);
    int64_t dispatched;
    if (read_attr_i64(r->file, "turns_dispatched", &dispatched) && total > dispatched)
        prop_fail_i(&p, "routing decisions <= turns dispatched", dispatched, total);
    if (total <= 0) prop_fail_i(&p, "routing decisions recorded", 1, total);

    /* /migrations: accepted moves per step equal the /sched count. */
    int64_t *mstep = NULL, *from_tp = NULL, *to_tp = NULL;
    char *why = NULL;
    size_t nmr = 0, k;
    if (read_i64(r->file, "migrations", "step", &mstep, &nmr) == 0 &&
        read_i64(r->file, "migrations", "from_tp", &from_tp, &k) == 0 &&
        read_i64(r->file, "migrations", "to_tp", &to_tp, &k) == 0 &&
        read_str(r->file, "migrations", "why", 25, &why, &k) == 0) {
        int64_t *accepted = xcalloc(n + 1, sizeof *accepted);
        for (size_t j = 0; j < nmr; j++) {
            const char *w = why + 25 * j;
            int moved = !strcmp(w, "causal") || !strcmp(w, "tokens") || !strcmp(w, "threshold") ||
                        !strcmp(w, "return");
            int known = moved || !strcmp(w, "declined_cost") || !strcmp(w, "declined_limit") ||
                        !strcmp(w, "same_tp");
            if (!known) prop_fail(&p, "/migrations why is a known reason", "causal..return", w);
            if (!moved) continue;
            if (from_tp[j] == to_tp[j] && strcmp(w, "threshold") != 0)
                prop_fail_i(&p, "a cmlfq move changes TP class", -1, from_tp[j]);
            for (size_t i = 0; i < n; i++)
                if (step[i] == mstep[j]) accepted[i]++;
        }
        for (size_t i = 0; i < n && i < nm; i++)
            if (accepted[i] != mig[i])
                prop_fail_i(&p, "accepted /migrations rows == /sched migrations", mig[i], accepted[i]);
        free(accepted);
    } else {
        g_failed++;
    }
    free(mstep);
    free(from_tp);
    free(to_tp);
    free(why);

    int64_t *istep = NULL;
    size_t ni = 0;
    if (read_i64(r->file, "instances", "step", &istep, &ni) == 0) {
        if (ni < n) prop_fail_i(&p, "/instances rows >= steps", (int64_t)n, (int64_t)ni);
    } else {
        g_failed++;
    }
    free(istep);

    if (o->expect_tree) {
        char fmt[32] = "";
        hid_t g = H5Lexists(r->file, "tree", H5P_DEFAULT) > 0 ? H5Gopen2(r->file, "tree", H5P_DEFAULT)
                                                                : H5I_INVALID_HID;
        if (g < 0) {
            prop_fail(&p, "--expect-tree: group /tree", "present", "missing");
        } else {
            if (!read_attr_str(g, "format", fmt, sizeof fmt) || strcmp(fmt, "libra-ptree") != 0)
                prop_fail(&p, "/tree format attribute", "libra-ptree", fmt);
            int64_t ins = 0;
            if (!read_attr_i64(g, "insertions", &ins) || ins <= 0)
                prop_fail_i(&p, "/tree insertions > 0", 1, ins);
            H5Gclose(g);
        }
    }
    free(by_reason);
    free(by_via);
    free(step);
    free(mig);
}

/* ---- the global resource planner (--planner, --min-replans, --expect-event) ---- */

/* The training time the planner measured is the step's training (/steps train_s: batch
 * sent -> TRAIN_DONE) in emulated seconds, not more: rank 0's own work after TRAIN_DONE
 * (writing and flushing the step's rows) is no training. */
static void check_planner_train_time(const struct run *r)
{
    struct prop p = {"planner train time", 0};
    double *meas = NULL, *train = NULL, ts = 0;
    size_t k = 0, n = 0;
    if (h5_read_attr_f64(r->file, "time_scale", &ts) != 0 || !(ts > 0)) {
        prop_fail(&p, "root attribute time_scale", "> 0", "missing");
        return;
    }
    if (read_column(r->file, "planner", "meas_train_s", H5T_NATIVE_DOUBLE, sizeof(double),
                    (void **)&meas, &k) == 0 &&
        read_column(r->file, "steps", "train_s", H5T_NATIVE_DOUBLE, sizeof(double),
                    (void **)&train, &n) == 0) {
        for (size_t i = 0; i < k && i < n; i++) {
            double want = train[i] * ts;
            if (fabs(meas[i] - want) <= 1e-9 * fmax(1.0, fabs(want))) continue;
            char e[64], f[64];
            snprintf(e, sizeof e, "%.6f", want);
            snprintf(f, sizeof f, "%.6f (step %zu)", meas[i], i + 1);
            prop_fail(&p, "/planner meas_train_s == /steps train_s x time_scale", e, f);
        }
    }
    free(meas);
    free(train);
}


static void check_planner(const struct run *r, const struct options *o)
{
    struct prop p = {"planner", 0};
    for (int e = 0; e < o->n_expect_event; e++)
        if (count_kind(r, o->expect_event[e]) == 0) {
            char what[160];
            snprintf(what, sizeof what, "/events has a \"%s\" row (--expect-event)",
                     o->expect_event[e]);
            prop_fail(&p, what, ">= 1", "0");
        }
    if (!o->planner && o->min_replans == 0) return;
    char *reason = NULL;
    int64_t *pstep = NULL;
    size_t n = 0, m = 0;
    if (read_str(r->file, "plans", "reason", REASON_WIDTH, &reason, &n) != 0 ||
        read_i64(r->file, "plans", "step", &pstep, &m) != 0 || m != n)
        goto done;
    long replans = 0, grp_plans = 0;
    for (size_t i = 0; i < n; i++) {
        const char *why = reason + i * REASON_WIDTH;
        int grp = strncmp(why, "grp:", 4) == 0, pool = strncmp(why, "pool:", 5) == 0;
        replans += grp || pool;
        grp_plans += grp;
    }
    if (replans < o->min_replans)
        prop_fail_i(&p, "/plans rows by the planner or the pool >= --min-replans", o->min_replans,
                    replans);
    if (o->planner) {
        int64_t *step = NULL, *applied = NULL;
        size_t k = 0, k2 = 0;
        if (read_i64(r->file, "planner", "step", &step, &k) == 0 &&
            read_i64(r->file, "planner", "applied", &applied, &k2) == 0 && k == k2) {
            /* one pass per finished step but the last */
            if (r->nsteps > 0 && (int64_t)k != (int64_t)r->nsteps - 1)
                prop_fail_i(&p, "/planner rows == steps - 1", (int64_t)r->nsteps - 1, (int64_t)k);
            long n_applied = 0;
            for (size_t i = 0; i < k; i++) {
                if (step[i] != (int64_t)i + 1) prop_fail_i(&p, "/planner step == row + 1", (int64_t)i + 1, step[i]);
                if (!applied[i]) continue;
                n_applied++;
                /* the plan it chose took effect at a later quiet point */
                int found = 0;
                for (size_t j = 0; j < n && !found; j++)
                    found = strncmp(reason + j * REASON_WIDTH, "grp:", 4) == 0 && pstep[j] >= step[i];
                if (!found) prop_fail_i(&p, "an applied /planner row has a later grp: /plans row", step[i], -1);
            }
            if (n_applied != grp_plans)
                prop_fail_i(&p, "applied /planner rows == grp: /plans rows", grp_plans, n_applied);
        }
        free(step);
        free(applied);
        check_planner_train_time(r);
    }
done:
    free(reason);
    free(pstep);
}

/* ---- main ---- */

static void usage(FILE *f)
{
    fprintf(f, "usage: check_run FILE.h5 [--min-steps N] [--min-plans K] [--expect-moves] "
               "[--expect-handback] [--sched] [--expect-tree] [--planner] [--min-replans N] "
               "[--expect-event KIND] [--expect-status STATUS] [--aborted]\n");
}

static int parse_long(const char *flag, const char *s, long *out)
{
    char *end;
    if (!s) {
        fprintf(stderr, "check_run: %s needs a number\n", flag);
        return -1;
    }
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 0) {
        fprintf(stderr, "check_run: %s: '%s' is not a non-negative integer\n", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--min-steps") == 0) {
            if (parse_long(a, i + 1 < argc ? argv[++i] : NULL, &o->min_steps)) return -1;
        } else if (strcmp(a, "--min-plans") == 0) {
            if (parse_long(a, i + 1 < argc ? argv[++i] : NULL, &o->min_plans)) return -1;
        } else if (strcmp(a, "--expect-moves") == 0) {
            o->expect_moves = true;
        } else if (strcmp(a, "--expect-handback") == 0) {
            o->expect_handback = true;
        } else if (strcmp(a, "--sched") == 0) {
            o->sched = true;
        } else if (strcmp(a, "--expect-tree") == 0) {
            o->sched = o->expect_tree = true;
        } else if (strcmp(a, "--planner") == 0) {
            o->planner = true;
        } else if (strcmp(a, "--min-replans") == 0) {
            if (parse_long(a, i + 1 < argc ? argv[++i] : NULL, &o->min_replans)) return -1;
        } else if (strcmp(a, "--expect-event") == 0) {
            if (i + 1 >= argc || o->n_expect_event == 8) {
                fprintf(stderr, "check_run: --expect-event needs a kind (8 at most)\n");
                return -1;
            }
            o->expect_event[o->n_expect_event++] = argv[++i];
        } else if (strcmp(a, "--expect-status") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "check_run: --expect-status needs a status\n");
                return -1;
            }
            o->expect_status = argv[++i];
        } else if (strcmp(a, "--aborted") == 0) {
            o->aborted = true;
            o->expect_status = "failed";
            if (o->n_expect_event < 8) o->expect_event[o->n_expect_event++] = "error";
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (a[0] == '-' || o->path) {
            fprintf(stderr, "check_run: unexpected argument '%s'\n", a);
            return -1;
        } else {
            o->path = a;
        }
    }
    if (!o->path) {
        fprintf(stderr, "check_run: no metrics file given\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct options o;
    if (parse_args(argc, argv, &o) != 0) {
        usage(stderr);
        return 2;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* failures are reported as FAIL lines */
    struct run r;
    if (run_load(&r, o.path) != 0) {
        run_free(&r);
        return 1;
    }
    check_status(&r, o.expect_status);
    if (!o.aborted) check_run_attrs(&r);
    check_step_count(&r, &o);
    check_step_numbers(&r);
    check_versions(&r);
    check_step_staleness(&r);
    check_step_ntraj(&r);
    check_traj_ids(&r);
    check_traj_fates(&r);
    check_trained_rows(&r);
    check_untrained_rows(&r);
    check_trained_counts(&r);
    check_plans(&r, &o);
    check_moves(&r, &o);
    check_handback(&r, &o);
    check_resplit_events(&r);
    check_breakdown(&r);
    check_sched(&r, &o);
    check_planner(&r, &o);

    if (g_failed == 0) {
        size_t trained = 0;
        for (size_t i = 0; i < r.ntraj; i++) trained += r.fate[i] == TRAJ_TRAINED;
        printf("check_run: OK: %s: %zu steps, %zu trajectories (%zu trained, %zu buffered or in "
               "flight), %zu plans (%zu moves), %zu events (%zu resplit)\n",
               o.path, r.nsteps, r.ntraj, trained, r.ntraj - trained, r.nplans, count_moves(&r),
               r.nevents, count_kind(&r, "resplit"));
    } else {
        printf("check_run: %d failed checks in %s\n", g_failed, o.path);
    }
    run_free(&r);
    return g_failed ? 1 : 0;
}
