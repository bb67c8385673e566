/*
 * Tests of the experiment report (exp_report.h) and its command line
 * (`libra-sim --report`, cmd_sim_report). Metrics files are written with the real
 * writer (metrics.h) for two workloads and the policies sync-colocated,
 * static-async, libra and oracle (/steps rows only), with numbers chosen so that
 * every figure is known exactly: rates over the last wall_s (and per emulated second
 * when the file has a time_scale), step-time-weighted idle fractions (different from
 * the unweighted mean), the p99 latency of trained trajectories only (untrained ones
 * are far slower, so including them would show). results.md is checked row by row
 * in its fixed formats ("%.3f" traj/s, "%.1f" tokens/s, "%.2fx" ratios, "%.0f%%" of
 * oracle, "%.3f" idle, "%.2f" p99, "--" when absent); the charts are checked to be
 * PNG files with their SVG and CSV beside them (two CSVs byte for byte). Error
 * cases: a missing file, a file that is not HDF5, a run with no /steps rows, a
 * /steps table without a needed column, a run given twice, bad command-line
 * arguments.
 */
#define _POSIX_C_SOURCE 200809L
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libra/exp_report.h"
#include "libra/metrics.h"
#include "testutil.h"

/* Declared in libra/driver.h once the command is wired into libra-sim. */
#include "libra/driver.h"

static char g_dir[512];

/* /steps row: end, duration, trajectories, generated tokens, busy fractions, roles. */
static struct metrics_step_row srow(int step, double wall, double dt, int n, long tok,
                                    double rbusy, double tbusy, int nr, int nt, int nh)
{
    return (struct metrics_step_row){.step = step, .wall_s = wall, .step_s = dt, .version = step,
                                     .n_traj = n, .tokens_gen = tok, .rollout_busy_frac = rbusy,
                                     .train_busy_frac = tbusy, .n_rollout_ranks = nr,
                                     .n_train_ranks = nt, .n_hybrid_ranks = nh};
}

static struct metrics_traj_row trow(int64_t id, int step, int fate, int gen, double t0,
                                    double t1)
{
    return (struct metrics_traj_row){.traj_id = id, .step_consumed = step, .fate = fate,
                                     .gen_tokens = gen, .t_start = t0, .t_end = t1};
}

/* Writes <g_dir>/<name>.h5 into path; time_scale 0: no such attribute. */
static void write_run(char *path, size_t n, const char *name, const struct metrics_step_row *s,
                      int ns, const struct metrics_traj_row *t, int nt, double time_scale)
{
    char err[1024];
    snprintf(path, n, "%s/%s.h5", g_dir, name);
    struct metrics *m = metrics_open(path, "test", 5, "emu", err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    for (int i = 0; i < ns; i++) CU_ASSERT_EQUAL(metrics_step(m, &s[i]), 0);
    for (int i = 0; i < nt; i++) CU_ASSERT_EQUAL(metrics_traj(m, &t[i]), 0);
    if (time_scale > 0) CU_ASSERT_EQUAL(metrics_attr_double(m, "time_scale", time_scale), 0);
    CU_ASSERT_EQUAL_FATAL(metrics_close(m, "complete"), 0);
}

enum { R2E_SYNC, R2E_ASYNC, R2E_LIBRA, R2E_ORACLE, MATH_ASYNC, MATH_LIBRA, N_RUNS };
static char g_path[N_RUNS][640];
static const struct exp_run *runs(void)
{
    static struct exp_run r[N_RUNS];
    static const char *const wl[N_RUNS] = {"r2e", "r2e", "r2e", "r2e", "math", "math"};
    static const char *const pol[N_RUNS] = {"sync-colocated", "static-async", "libra",
                                            "oracle",         "static-async", "libra"};
    for (int i = 0; i < N_RUNS; i++)
        r[i] = (struct exp_run){.workload = wl[i], .policy = pol[i], .path = g_path[i]};
    return r;
}

/* The fixture files, written once per process. */
static void make_fixtures(void)
{
    if (g_dir[0]) return;
    const char *d = test_scratch_dir("exp_report");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    snprintf(g_dir, sizeof g_dir, "%s", d);
    static struct metrics_traj_row t[160];

    /* r2e sync-colocated: 64 trajectories in 100 s, every latency 10 s. */
    struct metrics_step_row s[2] = {srow(1, 50, 50, 32, 3200, 0.5, 0.5, 4, 4, 0),
                                    srow(2, 100, 50, 32, 3200, 0.5, 0.5, 4, 4, 0)};
    for (int i = 0; i < 64; i++) t[i] = trow(i, 1 + i / 32, 0, 50, i, i + 10.0);
    write_run(g_path[R2E_SYNC], sizeof g_path[0], "r2e-sync", s, 2, t, 64, 0);

    /* r2e static-async: 96 in 100 s. */
    s[0] = srow(1, 40, 40, 48, 4800, 1, 1, 3, 1, 0);
    s[1] = srow(2, 100, 60, 48, 4800, 1, 1, 3, 1, 0);
    for (int i = 0; i < 96; i++) t[i] = trow(i, 1 + i / 48, 0, 60, 0, 5);
    write_run(g_path[R2E_ASYNC], sizeof g_path[0], "r2e-async", s, 2, t, 96, 0);

    /* r2e libra: 128 in 100 s; busy (0.5, 1) over 40 s then (1, 0.5) over 60 s: idle
     * 0.2 and 0.3 weighted (0.25 both unweighted). Trained latencies 0 .. 127 s; five
     * buffered ones of 1000 s and two in flight must not count. */
    s[0] = srow(1, 40, 40, 64, 6000, 0.5, 1.0, 3, 1, 0);
    s[1] = srow(2, 100, 60, 64, 6800, 1.0, 0.5, 2, 1, 1);
    int n = 0;
    for (int i = 0; i < 128; i++, n++) t[n] = trow(n, 1 + i / 64, 0, 100 + i, 0.5, 0.5 + i);
    for (int i = 0; i < 5; i++, n++) t[n] = trow(n, -1, 1, 500, 0, 1000);
    for (int i = 0; i < 2; i++, n++) t[n] = trow(n, -1, 2, 500, 0, -1);
    write_run(g_path[R2E_LIBRA], sizeof g_path[0], "r2e-libra", s, 2, t, n, 0);

    /* r2e oracle: 160 in 100 s, no trajectories. */
    s[0] = srow(1, 50, 50, 80, 8000, 1, 1, 3, 1, 0);
    s[1] = srow(2, 100, 50, 80, 8000, 1, 1, 3, 1, 0);
    write_run(g_path[R2E_ORACLE], sizeof g_path[0], "r2e-oracle", s, 2, NULL, 0, 0);

    /* math static-async: 10 in 20 s. */
    s[0] = srow(1, 20, 20, 10, 1000, 0.75, 0.25, 2, 2, 0);
    for (int i = 0; i < 10; i++) t[i] = trow(i, 1, 0, 70, 0, 1);
    write_run(g_path[MATH_ASYNC], sizeof g_path[0], "math-async", s, 1, t, 10, 0);

    /* math libra, time_scale 2: 40 in 10 wall s = 20 emulated s -> 2 traj/s; the
     * latencies of 3 wall s are 6 emulated s. */
    s[0] = srow(1, 10, 10, 40, 4000, 1, 1, 2, 2, 0);
    for (int i = 0; i < 40; i++) t[i] = trow(i, 1, 0, 80, 1, 4);
    write_run(g_path[MATH_LIBRA], sizeof g_path[0], "math-libra", s, 1, t, 40, 2.0);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static int is_png(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char b[8] = {0};
    size_t n = fread(b, 1, 8, f);
    fclose(f);
    static const unsigned char sig[8] = {137, 'P', 'N', 'G', '\r', '\n', 26, '\n'};
    return n == 8 && memcmp(b, sig, 8) == 0;
}

static int exists(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0;
}

static void test_figures(void)
{
    make_fixtures();
    struct exp_figures f;
    char err[1024];
    CU_ASSERT_EQUAL_FATAL(exp_read_figures(g_path[R2E_LIBRA], &f, err, sizeof err), 0);
    CU_ASSERT_CLOSE(f.traj_per_s, 1.28, 1e-12);
    CU_ASSERT_CLOSE(f.tokens_per_s, 128.0, 1e-12);
    CU_ASSERT_CLOSE(f.rollout_idle, 0.2, 1e-12);
    CU_ASSERT_CLOSE(f.train_idle, 0.3, 1e-12);
    CU_ASSERT_CLOSE(f.p99_latency_s, 125.73, 1e-9); /* 0.99 x 127 = 125.73 */
    CU_ASSERT_EQUAL(f.steps, 2);

    CU_ASSERT_EQUAL_FATAL(exp_read_figures(g_path[R2E_ORACLE], &f, err, sizeof err), 0);
    CU_ASSERT_CLOSE(f.traj_per_s, 1.6, 1e-12);
    CU_ASSERT(isnan(f.p99_latency_s));

    CU_ASSERT_EQUAL_FATAL(exp_read_figures(g_path[MATH_LIBRA], &f, err, sizeof err), 0);
    CU_ASSERT_CLOSE(f.traj_per_s, 2.0, 1e-12);
    CU_ASSERT_CLOSE(f.tokens_per_s, 200.0, 1e-12);
    CU_ASSERT_CLOSE(f.p99_latency_s, 6.0, 1e-12);
    CU_ASSERT_EQUAL(f.steps, 1);
}

static void test_report(void)
{
    make_fixtures();
    char dir[700], err[1024];
    snprintf(dir, sizeof dir, "%s/out/report", g_dir); /* two levels to create */
    CU_ASSERT_EQUAL_FATAL(exp_report(dir, "Suite | one", runs(), N_RUNS, err, sizeof err), 0);
    char path[800];
    snprintf(path, sizeof path, "%s/results.md", dir);
    const char *md = slurp(path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(md);
    CU_ASSERT(strncmp(md, "# Suite \\| one\n", 15) == 0);
    const char *r2e = strstr(md, "## r2e\n"), *math = strstr(md, "## math\n");
    CU_ASSERT_FATAL(r2e && math && r2e < math);
    static const char *const r2e_rows[] = {
        "| sync-colocated | 0.640 | 64.0 | 1.00x | 0.67x | 40% | 0.500 | 0.500 | 10.00 | 2 |\n",
        "| static-async | 0.960 | 96.0 | 1.50x | 1.00x | 60% | 0.000 | 0.000 | 5.00 | 2 |\n",
        "| libra | 1.280 | 128.0 | 2.00x | 1.33x | 80% | 0.200 | 0.300 | 125.73 | 2 |\n",
        "| oracle | 1.600 | 160.0 | 2.50x | 1.67x | 100% | 0.000 | 0.000 | -- | 2 |\n"};
    for (int i = 0; i < 4; i++) {
        const char *row = strstr(r2e, r2e_rows[i]);
        CU_ASSERT(row != NULL && row < math);
        if (!row) fprintf(stderr, "missing row: %s", r2e_rows[i]);
    }
    /* math has no sync-colocated and no oracle run: "--". */
    static const char *const math_rows[] = {
        "| static-async | 0.500 | 50.0 | -- | 1.00x | -- | 0.250 | 0.750 | 1.00 | 1 |\n",
        "| libra | 2.000 | 200.0 | -- | 4.00x | -- | 0.000 | 0.000 | 6.00 | 1 |\n"};
    for (int i = 0; i < 2; i++) {
        CU_ASSERT(strstr(math, math_rows[i]) != NULL);
        if (!strstr(math, math_rows[i])) fprintf(stderr, "missing row: %s", math_rows[i]);
    }
    CU_ASSERT(strstr(md, "(throughput.png)") != NULL);
    CU_ASSERT(strstr(md, "(allocation-r2e.png)") != NULL);
    CU_ASSERT(strstr(md, "(drift-math.png)") != NULL);
    CU_ASSERT(strstr(md, g_path[R2E_ORACLE]) != NULL); /* the runs' files are listed */
    static const char *const pngs[] = {"throughput.png", "allocation-r2e.png", "drift-r2e.png",
                                       "allocation-math.png", "drift-math.png"};
    for (int i = 0; i < 5; i++) CU_ASSERT(is_png(dir, pngs[i]));
    /* Beside every chart its SVG and its data; the data of two checked exactly. */
    CU_ASSERT(exists(dir, "throughput.svg") && exists(dir, "drift-math.svg"));
    CU_ASSERT(exists(dir, "drift-r2e.csv") && exists(dir, "allocation-math.csv"));
    CU_ASSERT(strstr(md, "[data (CSV)](allocation-r2e.csv)") != NULL);
    snprintf(path, sizeof path, "%s/throughput.csv", dir);
    const char *csv = slurp(path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(csv);
    CU_ASSERT_STRING_EQUAL(csv, "workload,policy,throughput (trajectories / emulated s)\n"
                                "r2e,sync-colocated,0.64\nr2e,static-async,0.96\n"
                                "r2e,libra,1.28\nr2e,oracle,1.6\n"
                                "math,sync-colocated,\nmath,static-async,0.5\n"
                                "math,libra,2\nmath,oracle,\n");
    snprintf(path, sizeof path, "%s/allocation-r2e.csv", dir);
    csv = slurp(path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(csv);
    CU_ASSERT_STRING_EQUAL(csv, "role,time (emulated s),GPUs\n"
                                "rollout,0,3\nrollout,40,3\nrollout,40,2\nrollout,100,2\n"
                                "training,0,1\ntraining,40,1\ntraining,40,1\ntraining,100,1\n"
                                "hybrid (lent to training),0,0\nhybrid (lent to training),40,0\n"
                                "hybrid (lent to training),40,1\nhybrid (lent to training),100,1\n");
    CU_ASSERT(!exists(dir, "results.md.tmp"));
    CU_ASSERT(!exists(dir, "throughput.png.tmp"));
}

/* A run on several seeds: each cell the mean with [min, max], ratios per seed. The
 * sync-colocated "seeds" are the 0.640 and 0.960 traj/s files, libra's the 1.280 and
 * 1.600 ones: per-seed ratios 2.00 and 1.67. A run with another number of files is
 * refused. */
static void test_seeds(void)
{
    make_fixtures();
    char sync2[1300], libra2[1300], dir[700], err[2048];
    snprintf(sync2, sizeof sync2, "%s,%s", g_path[R2E_SYNC], g_path[R2E_ASYNC]);
    snprintf(libra2, sizeof libra2, "%s,%s", g_path[R2E_LIBRA], g_path[R2E_ORACLE]);
    struct exp_run r[2] = {{"r2e", "sync-colocated", sync2}, {"r2e", "libra", libra2}};
    snprintf(dir, sizeof dir, "%s/seeds", g_dir);
    CU_ASSERT_EQUAL_FATAL(exp_report(dir, "t", r, 2, err, sizeof err), 0);
    char path[800];
    snprintf(path, sizeof path, "%s/results.md", dir);
    const char *md = slurp(path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(md);
    CU_ASSERT(strstr(md, "repeated on 2 seeds") != NULL);
    static const char *const rows[] = {
        "| sync-colocated | 0.800 [0.640, 0.960] | 80.0 [64.0, 96.0] | 1.00x [1.00, 1.00] | -- | -- |",
        "| libra | 1.440 [1.280, 1.600] | 144.0 [128.0, 160.0] | 1.83x [1.67, 2.00] | -- | -- |"};
    for (int i = 0; i < 2; i++) {
        CU_ASSERT(strstr(md, rows[i]) != NULL);
        if (!strstr(md, rows[i])) fprintf(stderr, "missing row: %s\n%s", rows[i], md);
    }
    struct exp_run bad[2] = {{"r2e", "sync-colocated", sync2}, {"r2e", "libra", g_path[R2E_LIBRA]}};
    snprintf(dir, sizeof dir, "%s/seeds-bad", g_dir);
    CU_ASSERT_EQUAL(exp_report(dir, "t", bad, 2, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "r2e/libra has 1 files, run r2e/sync-colocated 2") != NULL);
    CU_ASSERT(!exists(dir, "results.md"));
}

/* Without a libra run the drift chart falls back to the first run with trajectories
 * (not the oracle) and there is no allocation chart. */
static void test_report_fallbacks(void)
{
    make_fixtures();
    struct exp_run r[2] = {{"r2e", "oracle", g_path[R2E_ORACLE]},
                           {"r2e", "static-async", g_path[R2E_ASYNC]}};
    char dir[700], err[1024];
    snprintf(dir, sizeof dir, "%s/fallback", g_dir);
    CU_ASSERT_EQUAL_FATAL(exp_report(dir, NULL, r, 2, err, sizeof err), 0);
    CU_ASSERT(is_png(dir, "drift-r2e.png"));
    CU_ASSERT(!exists(dir, "allocation-r2e.png"));
    char path[800];
    snprintf(path, sizeof path, "%s/results.md", dir);
    const char *md = slurp(path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(md);
    CU_ASSERT(strstr(md, "| static-async | 0.960 | 96.0 | -- | 1.00x | 60% |") != NULL);
    CU_ASSERT(strstr(md, "![generated length by step, static-async](drift-r2e.png)") != NULL);
}

static void test_errors(void)
{
    make_fixtures();
    struct exp_figures f;
    char err[2048], path[800], dir[700];

    /* A missing file: the report names it and writes nothing. */
    snprintf(path, sizeof path, "%s/no-such-run.h5", g_dir);
    CU_ASSERT_EQUAL(exp_read_figures(path, &f, err, sizeof err), -1);
    CU_ASSERT(strstr(err, path) != NULL);
    struct exp_run r[2] = {{"r2e", "libra", g_path[R2E_LIBRA]}, {"r2e", "oracle", path}};
    snprintf(dir, sizeof dir, "%s/failed", g_dir);
    CU_ASSERT_EQUAL(exp_report(dir, "t", r, 2, err, sizeof err), -1);
    CU_ASSERT(strstr(err, path) != NULL);
    CU_ASSERT(!exists(dir, "results.md"));

    /* Not an HDF5 file. */
    snprintf(path, sizeof path, "%s/garbage.h5", g_dir);
    FILE *g = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    fputs("not hdf5\n", g);
    fclose(g);
    CU_ASSERT_EQUAL(exp_read_figures(path, &f, err, sizeof err), -1);
    CU_ASSERT(strstr(err, path) != NULL);

    /* A run that finished no step. */
    struct metrics_traj_row t = trow(0, -1, 2, 5, 0, -1);
    write_run(path, sizeof path, "no-steps", NULL, 0, &t, 1, 0);
    CU_ASSERT_EQUAL(exp_read_figures(path, &f, err, sizeof err), -1);
    CU_ASSERT(strstr(err, path) != NULL && strstr(err, "no rows") != NULL);

    /* A /steps table without the wall_s column. */
    snprintf(path, sizeof path, "%s/no-wall.h5", g_dir);
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CU_ASSERT_FATAL(file >= 0);
    hid_t ty = H5Tcreate(H5T_COMPOUND, sizeof(int32_t));
    H5Tinsert(ty, "step", 0, H5T_NATIVE_INT32);
    hsize_t dims = 1;
    hid_t sp = H5Screate_simple(1, &dims, NULL);
    hid_t ds = H5Dcreate2(file, "steps", ty, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int32_t one = 1;
    CU_ASSERT(ds >= 0 && H5Dwrite(ds, ty, H5S_ALL, H5S_ALL, H5P_DEFAULT, &one) >= 0);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Tclose(ty);
    H5Fclose(file);
    CU_ASSERT_EQUAL(exp_read_figures(path, &f, err, sizeof err), -1);
    CU_ASSERT(strstr(err, path) != NULL && strstr(err, "wall_s") != NULL);

    /* One workload/policy twice; no runs at all. */
    struct exp_run twice[2] = {{"r2e", "libra", g_path[R2E_LIBRA]},
                               {"r2e", "libra", g_path[R2E_SYNC]}};
    CU_ASSERT_EQUAL(exp_report(dir, "t", twice, 2, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "twice") != NULL);
    CU_ASSERT_EQUAL(exp_report(dir, "t", twice, 0, err, sizeof err), -1);
    CU_ASSERT(!exists(dir, "results.md"));
}

static void test_cli(void)
{
    make_fixtures();
    char dir[700], a_sync[800], a_libra[800], bad[800], missing[800];
    snprintf(dir, sizeof dir, "%s/cli", g_dir);
    snprintf(a_sync, sizeof a_sync, "r2e/sync-colocated=%s", g_path[R2E_SYNC]);
    snprintf(a_libra, sizeof a_libra, "r2e/libra=%s", g_path[R2E_LIBRA]);
    snprintf(bad, sizeof bad, "r2e=%s", g_path[R2E_LIBRA]);
    snprintf(missing, sizeof missing, "r2e/oracle=%s/none.h5", g_dir);
    char *too_few[] = {"--report", dir, "title"};
    CU_ASSERT_EQUAL(cmd_sim_report(3, too_few), 2);
    char *no_policy[] = {"--report", dir, "title", a_sync, bad};
    CU_ASSERT_EQUAL(cmd_sim_report(5, no_policy), 2);
    char *empty_file[] = {"--report", dir, "title", "r2e/libra="};
    CU_ASSERT_EQUAL(cmd_sim_report(4, empty_file), 2);
    char *unreadable[] = {"--report", dir, "title", a_sync, missing};
    CU_ASSERT_EQUAL(cmd_sim_report(5, unreadable), 1);
    CU_ASSERT(!exists(dir, "results.md"));
    char *good[] = {"--report", dir, "title", a_sync, a_libra};
    CU_ASSERT_EQUAL(cmd_sim_report(5, good), 0);
    CU_ASSERT(exists(dir, "results.md"));
    CU_ASSERT(is_png(dir, "allocation-r2e.png"));
    CU_ASSERT_STRING_EQUAL(good[3], a_sync); /* argv left as it was */
}

static const struct test_case cases[] = {
    {"figures: rates, weighted idle, trained-only p99, time_scale", test_figures},
    {"report: results.md rows, ratios, --, charts", test_report},
    {"report: drift fallback, no allocation without libra", test_report_fallbacks},
        {"several seeds: mean [min, max], ratios per seed", test_seeds},
    {"errors: missing, not HDF5, no steps, no column, duplicate", test_errors},
    {"command line: usage, errors, success", test_cli},
    {NULL, NULL}};

static const struct test_suite suites[] = {{"exp_report", cases}, {NULL, NULL}};

int main(void) { return test_main(suites); }
