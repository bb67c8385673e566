/*
 * The experiment suite's report (exp_report.h): reads every run's metrics file
 * (exp_load: its figures and the columns the charts need), draws the charts
 * (exp_charts.c) and writes results.md, last and atomically (temp file, fsync,
 * rename), so a results.md in the directory means the whole report was written.
 *
 * Number formats in results.md (fixed; tests and tools match them):
 *   trajectories/s "%.3f", tokens/s "%.1f", ratios "%.2fx" (of trajectories/s),
 *   fraction of the oracle "%.0f%%", idle fractions "%.3f", p99 latency (emulated s)
 *   "%.2f", steps "%d"; "--" for anything absent or not a finite number (a missing
 *   baseline or oracle, a baseline with no throughput, the oracle's latency).
 * Names (workloads, policies, titles) are written with '|' escaped and control
 * characters blanked, so a name cannot break a table. Chart file names use the
 * workload with every byte outside [A-Za-z0-9._-] replaced by '_'; two workloads
 * that map to one file name are an error, as is one workload/policy given twice.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libra/exp_report.h"
#include "libra/h5try.h"
#include "libra/h5util.h"
#include "libra/log.h"
#include "libra/rollout_sim.h"
#include "report/exp_internal.h"

#define SYNC_POLICY "sync-colocated"
#define ASYNC_POLICY "static-async"
#define ORACLE_POLICY "oracle"
#define LIBRA_POLICY "libra"

/* ---- reading one run ---- */

/* Reads columns cols[0 .. n_cols-1] of table into v[] (all of one length, *rows). */
static int read_columns(hid_t file, const char *path, const char *table,
                        const char *const *cols, int n_cols, double **v, size_t *rows,
                        char *err, size_t errlen)
{
    for (int i = 0; i < n_cols; i++) {
        char e[256];
        size_t m;
        if (h5_read_column_f64(file, table, cols[i], &v[i], &m, e, sizeof e)) {
            snprintf(err, errlen, "%s: %s (is it a metrics file of libra or libra-sim?)", path, e);
            return -1;
        }
        if (i > 0 && m != *rows) {
            snprintf(err, errlen, "%s: /%s column %s has %zu rows, column %s %zu", path, table,
                     cols[i], m, cols[0], *rows);
            return -1;
        }
        *rows = m;
    }
    return 0;
}

static int cmp_traj(const void *a, const void *b)
{
    const struct exp_traj *x = a, *y = b;
    if (x->step != y->step) return (x->step > y->step) - (x->step < y->step);
    return (x->gen > y->gen) - (x->gen < y->gen);
}

/* Step-time-weighted mean of frac (S); NaN when the steps took no time. */
static double weighted_mean(const double *frac, const double *step_s, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += frac[i] * step_s[i];
        den += step_s[i];
    }
    return den > 0 ? num / den : NAN;
}

int exp_load(const char *path, struct exp_data *d, char *err, size_t errlen)
{
    enum { S_WALL, S_STEP, S_NTRAJ, S_TOK, S_RBUSY, S_TBUSY, S_NROLL, S_NTRAIN, S_NHYB, S_COLS };
    static const char *const step_cols[S_COLS] = {
        "wall_s",          "step_s",          "n_traj",        "tokens_gen",    "rollout_busy_frac",
        "train_busy_frac", "n_rollout_ranks", "n_train_ranks", "n_hybrid_ranks"};
    enum { T_STEP, T_FATE, T_GEN, T_START, T_END, T_COLS };
    static const char *const traj_cols[T_COLS] = {"step_consumed", "fate", "gen_tokens", "t_start",
                                                  "t_end"};
    double *sv[S_COLS] = {0}, *tv[T_COLS] = {0}, *lat = NULL;
    size_t ns = 0, nt = 0, n_lat = 0;
    double ts = 1, wall, traj = 0, tok = 0;
    htri_t has_traj;
    hid_t file = H5I_INVALID_HID;
    int rc = -1;
    struct stat st;
    struct h5quiet q;

    memset(d, 0, sizeof *d);
    if (!path || !*path) {
        snprintf(err, errlen, "empty metrics file path");
        return -1;
    }
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s: %s (did the run write its metrics file there?)", path,
                 strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file (expected a run's metrics file)", path);
        return -1;
    }
    h5_quiet_begin(&q);
    H5TRY(file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT));
    if (read_columns(file, path, "steps", step_cols, S_COLS, sv, &ns, err, errlen)) goto fail;
    if (ns == 0) {
        snprintf(err, errlen, "%s: /steps has no rows (the run finished no step)", path);
        goto fail;
    }
    if (h5_read_attr_f64(file, "time_scale", &ts) != 0) ts = 1;
    if (!(isfinite(ts) && ts > 0)) {
        snprintf(err, errlen, "%s: root attribute time_scale is %g; expected > 0", path, ts);
        goto fail;
    }
    wall = sv[S_WALL][ns - 1];
    if (!(isfinite(wall) && wall > 0)) {
        snprintf(err, errlen, "%s: the last /steps row's wall_s is %g; expected > 0", path, wall);
        goto fail;
    }
    for (size_t i = 0; i < ns; i++) traj += sv[S_NTRAJ][i], tok += sv[S_TOK][i];
    d->fig = (struct exp_figures){
        .traj_per_s = traj / (wall * ts),
        .tokens_per_s = tok / (wall * ts),
        .rollout_idle = 1.0 - weighted_mean(sv[S_RBUSY], sv[S_STEP], ns),
        .train_idle = 1.0 - weighted_mean(sv[S_TBUSY], sv[S_STEP], ns),
        .p99_latency_s = NAN,
        .steps = ns > (size_t)INT32_MAX ? INT32_MAX : (int)ns,
    };

    /* The oracle's files have an empty (or no) /trajectories: no latency, no drift. */
    H5TRY(has_traj = H5Lexists(file, "trajectories", H5P_DEFAULT));
    if (has_traj > 0 &&
        read_columns(file, path, "trajectories", traj_cols, T_COLS, tv, &nt, err, errlen))
        goto fail;
    d->trained = xmalloc((nt ? nt : 1) * sizeof *d->trained);
    lat = xmalloc((nt ? nt : 1) * sizeof *lat);
    for (size_t i = 0; i < nt; i++) {
        double s = tv[T_STEP][i], t0 = tv[T_START][i], t1 = tv[T_END][i];
        if (tv[T_FATE][i] != 0 || !(s >= 0)) continue; /* not trained */
        if (isfinite(s) && isfinite(tv[T_GEN][i]))
            d->trained[d->n_trained++] = (struct exp_traj){.step = s, .gen = tv[T_GEN][i]};
        if (isfinite(t0) && isfinite(t1) && t1 >= 0 && t1 >= t0) lat[n_lat++] = (t1 - t0) * ts;
    }
    if (n_lat) d->fig.p99_latency_s = rsim_percentile(lat, (int64_t)n_lat, 0.99);
    qsort(d->trained, (size_t)d->n_trained, sizeof *d->trained, cmp_traj);

    /* The step columns become the charts' (emulated seconds). */
    for (size_t i = 0; i < ns; i++) {
        sv[S_STEP][i] = (sv[S_WALL][i] - sv[S_STEP][i]) * ts;
        sv[S_WALL][i] *= ts;
    }
    d->time_scale = ts;
    d->n_steps = (int64_t)ns;
    d->t_begin = sv[S_STEP], d->t_end = sv[S_WALL];
    d->n_rollout = sv[S_NROLL], d->n_train = sv[S_NTRAIN], d->n_hybrid = sv[S_NHYB];
    sv[S_STEP] = sv[S_WALL] = sv[S_NROLL] = sv[S_NTRAIN] = sv[S_NHYB] = NULL;
    H5CLOSE(file, H5Fclose);
    rc = 0;
fail:
    close_id(&file, H5Fclose);
    h5_quiet_end(&q);
    for (int i = 0; i < S_COLS; i++) free(sv[i]);
    for (int i = 0; i < T_COLS; i++) free(tv[i]);
    free(lat);
    if (rc) exp_data_free(d);
    return rc;
}

void exp_data_free(struct exp_data *d)
{
    if (!d) return;
    free(d->t_begin);
    free(d->t_end);
    free(d->n_rollout);
    free(d->n_train);
    free(d->n_hybrid);
    free(d->trained);
    memset(d, 0, sizeof *d);
}

int exp_read_figures(const char *path, struct exp_figures *f, char *err, size_t errlen)
{
    struct exp_data d;
    if (exp_load(path, &d, err, errlen)) return -1;
    *f = d.fig;
    exp_data_free(&d);
    return 0;
}

/* ---- the report ---- */

struct report {
    const struct exp_run *runs;
    int n;
    int n_rep;                  /* files per run: seeds (the same for every run) */
    struct exp_data **data;     /* (n) x (n_rep): run i's repeat k is data[i][k] */
    const char **wl, **pol;     /* distinct workloads / policies, in order of first use */
    int n_wl, n_pol;
    char **file_wl;             /* (n_wl) workload names as used in chart file names */
    int *alloc_run, *drift_run; /* (n_wl) run drawn in allocation / drift chart, or -1 */
};

static int find_run(const struct report *r, const char *workload, const char *policy)
{
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->runs[i].workload, workload) == 0 && strcmp(r->runs[i].policy, policy) == 0)
            return i;
    return -1;
}

static int add_name(const char **list, int *n, const char *name)
{
    for (int i = 0; i < *n; i++)
        if (strcmp(list[i], name) == 0) return i;
    list[*n] = name;
    return (*n)++;
}

/* xmalloc'ed "dir/name" (one '/' between them). */
static char *join_path(const char *dir, const char *name)
{
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/') dl--;
    size_t nl = strlen(name);
    char *p = xmalloc(dl + nl + 2);
    memcpy(p, dir, dl);
    p[dl] = '/';
    memcpy(p + dl + 1, name, nl + 1);
    return p;
}

static char *file_safe(const char *name)
{
    char *s = xstrdup(name);
    for (char *c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '_' || *c == '-'))
            *c = '_';
    return s;
}

/* mkdir -p dir; 0 or -1 with a message. */
static int make_dirs(const char *dir, char *err, size_t errlen)
{
    char *path = xstrdup(dir);
    int rc = 0;
    for (char *p = path + 1;; p++) {
        char c = *p;
        if (c != '/' && c != '\0') continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "%s: cannot create the report directory: %s", path,
                     strerror(errno));
            rc = -1;
            break;
        }
        *p = c;
        if (c == '\0') break;
    }
    struct stat st;
    if (rc == 0 && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))) {
        snprintf(err, errlen, "%s: not a directory", dir);
        rc = -1;
    }
    free(path);
    return rc;
}

/* Writes s as one Markdown table cell / heading text: '|' escaped, controls blanked. */
static void md_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '|') fputs("\\|", f);
        else fputc(c < 0x20 || c == 0x7f ? ' ' : c, f);
    }
}

static const char *num(char *buf, size_t n, const char *fmt, double v)
{
    if (!isfinite(v)) return "--";
    snprintf(buf, n, fmt, v);
    return buf;
}

void exp_spread(const double *v, int n, double *mean, double *lo, double *hi)
{
    *mean = 0;
    *lo = *hi = v[0];
    for (int k = 0; k < n; k++) {
        *mean += v[k] / n;
        *lo = fmin(*lo, v[k]);
        *hi = fmax(*hi, v[k]);
        if (!isfinite(v[k])) *mean = NAN;
    }
}

/* A figure over the repeats: "fmt" of the one value, or "fmt [lo, hi]" of the mean
 * and range (lo and hi in fmt without its suffix: "%.2fx" -> "[%.2f, %.2f]"). */
static const char *cell(char *buf, size_t n, const char *fmt, const double *v, int reps)
{
    double m, lo, hi;
    exp_spread(v, reps, &m, &lo, &hi);
    if (!isfinite(m)) return "--";
    if (reps == 1) return num(buf, n, fmt, m);
    char bare[16];
    snprintf(bare, sizeof bare, "%s", fmt);
    size_t l = strlen(bare);
    while (l > 0 && bare[l - 1] != 'f') bare[--l] = '\0'; /* "%.2fx" -> "%.2f" */
    char f3[64];
    snprintf(f3, sizeof f3, "%s [%s, %s]", fmt, bare, bare);
    snprintf(buf, n, f3, m, lo, hi);
    return buf;
}

/* Run i's repeats' traj/s over base's (the same seed), as "%.2fx" or "%.0f%%"
 * (percent) with the range over seeds; "--" when base is absent or a base rate is
 * not > 0. */
static const char *ratio(char *buf, size_t n, const struct report *r, int i, int base, int percent)
{
    if (base < 0) return "--";
    double v[EXP_MAX_SEEDS];
    for (int k = 0; k < r->n_rep; k++) {
        double b = r->data[base][k].fig.traj_per_s, x = r->data[i][k].fig.traj_per_s;
        if (!(isfinite(b) && b > 0)) return "--";
        v[k] = percent ? 100.0 * x / b : x / b;
    }
    return cell(buf, n, percent ? "%.0f%%" : "%.2fx", v, r->n_rep);
}

/* One figure of run i over its repeats. */
enum fig_field { F_TRAJ, F_TOK, F_RIDLE, F_TIDLE, F_P99 };
static const char *fig_cell(char *buf, size_t n, const struct report *r, int i, enum fig_field f,
                            const char *fmt)
{
    double v[EXP_MAX_SEEDS];
    for (int k = 0; k < r->n_rep; k++) {
        const struct exp_figures *g = &r->data[i][k].fig;
        v[k] = f == F_TRAJ    ? g->traj_per_s
               : f == F_TOK   ? g->tokens_per_s
               : f == F_RIDLE ? g->rollout_idle
               : f == F_TIDLE ? g->train_idle
                              : g->p99_latency_s;
    }
    return cell(buf, n, fmt, v, r->n_rep);
}

/* The end of a chart's image link (after "![alt"): the PNG, then its SVG and data. */
static void md_chart(FILE *f, const char *prefix, const char *name)
{
    fprintf(f, "](%s%s.png)\n\n[SVG](%s%s.svg), [data (CSV)](%s%s.csv)\n", prefix, name,
            prefix, name, prefix, name);
}

static void md_workload(FILE *f, const struct report *r, int w)
{
    const char *wl = r->wl[w];
    int sync = find_run(r, wl, SYNC_POLICY), async = find_run(r, wl, ASYNC_POLICY),
        oracle = find_run(r, wl, ORACLE_POLICY);
    fputs("## ", f);
    md_text(f, wl);
    fputs("\n\n| policy | trajectories/s | tokens/s | vs " SYNC_POLICY " | vs " ASYNC_POLICY
          " | of oracle | rollout idle | training idle | p99 latency (s) | steps |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
          f);
    for (int p = 0; p < r->n_pol; p++) {
        int i = find_run(r, wl, r->pol[p]);
        if (i < 0) continue;
        char b[8][96];
        fputs("| ", f);
        md_text(f, r->pol[p]);
        fprintf(f, " | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n",
                fig_cell(b[0], 96, r, i, F_TRAJ, "%.3f"), fig_cell(b[1], 96, r, i, F_TOK, "%.1f"),
                ratio(b[2], 96, r, i, sync, 0), ratio(b[3], 96, r, i, async, 0),
                ratio(b[4], 96, r, i, oracle, 1), fig_cell(b[5], 96, r, i, F_RIDLE, "%.3f"),
                fig_cell(b[6], 96, r, i, F_TIDLE, "%.3f"), fig_cell(b[7], 96, r, i, F_P99, "%.2f"),
                r->data[i][0].fig.steps);
    }
    if (r->alloc_run[w] >= 0) {
        fputs("\n![GPUs per role, libra", f);
        md_chart(f, "allocation-", r->file_wl[w]);
    }
    if (r->drift_run[w] >= 0) {
        fputs("\n![generated length by step, ", f);
        md_text(f, r->runs[r->drift_run[w]].policy);
        md_chart(f, "drift-", r->file_wl[w]);
    }
    fputc('\n', f);
}

static void md_report(FILE *f, const struct report *r, const char *title)
{
    fputs("# ", f);
    md_text(f, title && *title ? title : "Experiment results");
    fputs("\n\nRates are per emulated second: trained trajectories and generated tokens over "
          "the run's last step end (wall_s times the run's time_scale). Ratios compare "
          "trajectories/s with the same workload's " SYNC_POLICY " and " ASYNC_POLICY
          " runs; \"of oracle\" is trajectories/s as a share of the oracle's bound. Idle: 1 - "
          "the step-time-weighted busy fraction of the role's GPUs. p99 latency: t_end - "
          "t_start of the trained trajectories, emulated seconds. \"--\": not available.\n\n",
          f);
    if (r->n_rep > 1)
        fprintf(f, "Every run was repeated on %d seeds (the k-th file of each run is seed k): "
                "each cell is the mean over the seeds and [min, max]; a ratio is taken per "
                "seed, then summarised. Charts: means (throughput), the first seed (the "
                "others).\n\n", r->n_rep);
    fputs("![trajectories per second", f);
    md_chart(f, "throughput", "");
    fputc('\n', f);
    for (int w = 0; w < r->n_wl; w++) md_workload(f, r, w);
    fputs("## Runs\n\n| workload | policy | metrics file |\n|---|---|---|\n", f);
    for (int i = 0; i < r->n; i++) {
        fputs("| ", f);
        md_text(f, r->runs[i].workload);
        fputs(" | ", f);
        md_text(f, r->runs[i].policy);
        fputs(" | ", f);
        md_text(f, r->runs[i].path);
        fputs(" |\n", f);
    }
}

/* results.md to "<path>.tmp", fsync'ed, renamed over path. */
static int write_results(const char *path, const struct report *r, const char *title, char *err,
                         size_t errlen)
{
    char *tmp = xmalloc(strlen(path) + 5);
    sprintf(tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    md_report(f, r, title);
    const char *step = NULL;
    if (ferror(f)) step = "write";
    else if (fflush(f) != 0) step = "flush";
    else if (fsync(fileno(f)) != 0) step = "fsync";
    int saved = errno;
    if (fclose(f) != 0 && !step) step = "close", saved = errno;
    if (!step && rename(tmp, path) != 0) step = "rename", saved = errno;
    if (step) {
        snprintf(err, errlen, "%s: %s failed: %s", tmp, step, strerror(saved));
        unlink(tmp);
    }
    free(tmp);
    return step ? -1 : 0;
}

/* Distinct names, duplicate runs, file-name collisions, and which run each chart draws. */
static int plan_report(struct report *r, char *err, size_t errlen)
{
    for (int i = 0; i < r->n; i++) {
        if (find_run(r, r->runs[i].workload, r->runs[i].policy) != i) {
            snprintf(err, errlen, "run %s/%s is given twice (%s and %s)", r->runs[i].workload,
                     r->runs[i].policy,
                     r->runs[find_run(r, r->runs[i].workload, r->runs[i].policy)].path,
                     r->runs[i].path);
            return -1;
        }
        add_name(r->wl, &r->n_wl, r->runs[i].workload);
        add_name(r->pol, &r->n_pol, r->runs[i].policy);
    }
    for (int w = 0; w < r->n_wl; w++) {
        r->file_wl[w] = file_safe(r->wl[w]);
        for (int v = 0; v < w; v++)
            if (strcmp(r->file_wl[v], r->file_wl[w]) == 0) {
                snprintf(err, errlen, "workloads '%s' and '%s' give the same chart file name "
                         "(%s); rename one", r->wl[v], r->wl[w], r->file_wl[w]);
                return -1;
            }
        r->alloc_run[w] = find_run(r, r->wl[w], LIBRA_POLICY);
        r->drift_run[w] = -1;
        if (r->alloc_run[w] >= 0 && r->data[r->alloc_run[w]][0].n_trained > 0)
            r->drift_run[w] = r->alloc_run[w];
        for (int i = 0; i < r->n && r->drift_run[w] < 0; i++)
            if (strcmp(r->runs[i].workload, r->wl[w]) == 0 && r->data[i][0].n_trained > 0)
                r->drift_run[w] = i;
    }
    return 0;
}

static int draw_charts(const char *dir, const struct report *r, char *err, size_t errlen)
{
    double *tps = xmalloc((size_t)r->n_wl * (size_t)r->n_pol * sizeof *tps);
    for (int w = 0; w < r->n_wl; w++)
        for (int p = 0; p < r->n_pol; p++) {
            int i = find_run(r, r->wl[w], r->pol[p]);
            double m = NAN, lo, hi, v[EXP_MAX_SEEDS];
            for (int k = 0; i >= 0 && k < r->n_rep; k++) v[k] = r->data[i][k].fig.traj_per_s;
            if (i >= 0) exp_spread(v, r->n_rep, &m, &lo, &hi);
            tps[w * r->n_pol + p] = m;
        }
    char *base = join_path(dir, "throughput");
    int rc = exp_chart_throughput(base, r->wl, r->n_wl, r->pol, r->n_pol, tps, r->n_rep, err,
                                  errlen);
    free(base);
    free(tps);
    for (int w = 0; w < r->n_wl && rc == 0; w++) {
        char *name = xmalloc(strlen(r->file_wl[w]) + 32);
        if (r->alloc_run[w] >= 0) {
            sprintf(name, "allocation-%s", r->file_wl[w]);
            base = join_path(dir, name);
            rc = exp_chart_allocation(base, r->wl[w], &r->data[r->alloc_run[w]][0], r->n_rep,
                                      err, errlen);
            free(base);
        }
        if (rc == 0 && r->drift_run[w] >= 0) {
            sprintf(name, "drift-%s", r->file_wl[w]);
            base = join_path(dir, name);
            rc = exp_chart_drift(base, r->wl[w], r->runs[r->drift_run[w]].policy,
                                 &r->data[r->drift_run[w]][0], r->n_rep, err, errlen);
            free(base);
        }
        free(name);
    }
    return rc;
}

int exp_report(const char *dir, const char *title, const struct exp_run *runs, int n, char *err,
               size_t errlen)
{
    if (!dir || !*dir || !runs || n <= 0) {
        snprintf(err, errlen, "exp_report: %s", !dir || !*dir ? "no output directory" : "no runs");
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (!runs[i].workload || !*runs[i].workload || !runs[i].policy || !*runs[i].policy ||
            !runs[i].path || !*runs[i].path) {
            snprintf(err, errlen, "exp_report: run %d lacks a workload, policy or file", i + 1);
            return -1;
        }
    struct report r = {.runs = runs, .n = n};
    int rc_load = 0, *n_loaded = xcalloc((size_t)n, sizeof *n_loaded);
    r.data = xcalloc((size_t)n, sizeof *r.data);
    r.wl = xcalloc((size_t)n, sizeof *r.wl);
    r.pol = xcalloc((size_t)n, sizeof *r.pol);
    r.file_wl = xcalloc((size_t)n, sizeof *r.file_wl);
    r.alloc_run = xcalloc((size_t)n, sizeof *r.alloc_run);
    r.drift_run = xcalloc((size_t)n, sizeof *r.drift_run);
    char *md = NULL;
    int rc = -1;
    for (int i = 0; i < n && rc_load == 0; i++) {
        char *paths = xstrdup(runs[i].path), *save = NULL;
        int k = 0;
        r.data[i] = xcalloc(EXP_MAX_SEEDS, sizeof **r.data);
        for (char *p = strtok_r(paths, ",", &save); p && rc_load == 0; p = strtok_r(NULL, ",", &save)) {
            if (k == EXP_MAX_SEEDS) {
                snprintf(err, errlen, "run %s/%s: more than %d files (seeds)", runs[i].workload,
                         runs[i].policy, EXP_MAX_SEEDS);
                rc_load = -1;
            } else if (exp_load(p, &r.data[i][k], err, errlen)) {
                rc_load = -1;
            } else {
                k++;
            }
        }
        free(paths);
        n_loaded[i] = k;
        if (rc_load == 0 && k == 0) {
            snprintf(err, errlen, "run %s/%s: no metrics file in '%s'", runs[i].workload,
                     runs[i].policy, runs[i].path);
            rc_load = -1;
        }
        if (rc_load == 0 && i > 0 && k != n_loaded[0]) {
            snprintf(err, errlen, "run %s/%s has %d files, run %s/%s %d: every run needs one file "
                     "per seed", runs[i].workload, runs[i].policy, k, runs[0].workload,
                     runs[0].policy, n_loaded[0]);
            rc_load = -1;
        }
    }
    if (rc_load) goto fail;
    r.n_rep = n_loaded[0];
    if (plan_report(&r, err, errlen) || make_dirs(dir, err, errlen) ||
        draw_charts(dir, &r, err, errlen))
        goto fail;
    md = join_path(dir, "results.md");
    if (write_results(md, &r, title, err, errlen)) goto fail;
    rc = 0;
fail:
    free(md);
    for (int i = 0; i < n; i++) {
        for (int k = 0; r.data[i] && k < n_loaded[i]; k++) exp_data_free(&r.data[i][k]);
        free(r.data[i]);
        free(r.file_wl[i]);
    }
    free(n_loaded);
    free(r.drift_run);
    free(r.alloc_run);
    free(r.file_wl);
    free(r.pol);
    free(r.wl);
    free(r.data);
    return rc;
}
