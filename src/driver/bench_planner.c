/*
 * `libra bench-planner-solve CONFIG` (also spelled --bench-planner-solve): the global
 * resource planner's solve time
 * (not a timed test; it only prints). For each GPU count (48, 512, 4096 by default)
 * it builds the batch's length profile from CONFIG's workload (the training batch
 * scaled with the GPU count, batch x G / 48, so every size plans the same load per
 * GPU), then times planner_search -- the whole search with the real cost model --
 * `repeat` times with CLOCK_MONOTONIC (one thread unless --threads says otherwise:
 * plan.solve_threads), and prints the median, the
 * cost-model calls, the plan it found and its modelled step time; with --exact, the
 * same search at plan.solve_tolerance = 0 once more, so the step times show what the
 * tolerance gave up. CONFIG must have plan.mode = "grp".
 * Training GPU counts step by CONFIG's plan.granularity up to 64 GPUs and by whole
 * nodes (hardware gpus_per_node) beyond, as a cluster allocates training.
 *
 * `libra bench-planner-report LABEL=FILE[,FILE...] ...` (also --bench-planner-report):
 * the throughput table of
 * tools/bench-planner from the runs' metrics files: trajectories and tokens per
 * emulated second over the run's steps (sum of n_traj / sum of step_s), their ratios
 * to the first label, and the idle fraction of all worker GPUs, of the rollout ranks
 * and of the training ranks (1 - busy rank-seconds / rank-seconds). Repeats of one
 * label report their median.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libra/cli.h"
#include "libra/driver.h"
#include "libra/h5util.h"
#include "libra/log.h"
#include "libra/planner.h"

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void layout_text(const struct plan_choice *ch, char *buf, size_t n)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int k = PC_N_TP - 1; k >= 0; k--)
        if (ch->counts[k] && off < n)
            off += (size_t)snprintf(buf + off, n - off, "%sTP%d x %d", off ? " + " : "",
                                    pc_tp_of(k), ch->counts[k]);
}

/* One table row: the search on gpus GPUs at the configured tolerance, repeat times. */
static void solve_row(const struct libra_config *cfg, const struct job_inputs *in, int gpus,
                      int repeat)
{
    struct planner pl;
    planner_init(&pl, cfg, &in->cm, &in->wl, gpus + 1);
    struct len_profile prof;
    lp_init(&prof);
    lp_from_workload(&prof, &in->wl, &cfg->rollout, cfg->run.seed, 0, 0, cfg->train.batch_size);
    prof.overlap = cfg->train.max_staleness + 1;
    double *t = xmalloc((size_t)repeat * sizeof *t);
    struct plan_choice ch;
    int rc = 0;
    for (int r = 0; r < repeat; r++) {
        double t0 = mono_s();
        rc = planner_search(&pl, &prof, gpus, 0, &ch);
        t[r] = mono_s() - t0;
    }
    qsort(t, (size_t)repeat, sizeof *t, cmp_double);
    char lay[256];
    layout_text(&ch, lay, sizeof lay);
    printf("| %d | %d | %d | %g | %.2f | %.2f | %lld |", gpus, cfg->train.batch_size,
           cfg->plan.granularity, cfg->plan.solve_tolerance, 1e3 * t[repeat / 2], 1e3 * t[0],
           (long long)(ch.n_train_evals + ch.n_rollout_evals));
    if (rc)
        printf(" - | - | infeasible: %s |\n", ch.why);
    else
        printf(" %s | %.3f | train %d (tp %d, pp %d, dp %d, micro %d); rollout %s; idle %d |\n",
               ch.approx ? "yes" : "no", ch.step_s, ch.n_train, ch.train.tp, ch.train.pp,
               ch.train.dp, ch.train.micro, lay, ch.n_idle);
    fflush(stdout);
    free(t);
    lp_free(&prof);
    planner_free(&pl);
}

static const struct option solve_opts[] = {
    {"gpus", required_argument, NULL, 'g'},
    {"repeat", required_argument, NULL, 'r'},
    {"exact", no_argument, NULL, 'e'},
    {"threads", required_argument, NULL, 't'},
    {0}};
static const struct cli_cmd solve_cmd = {
    "libra bench-planner-solve",
    "libra bench-planner-solve CONFIG [--gpus N[,N...]] [--repeat R] [--exact] [--threads T]",
    "The planner's solve time at several GPU counts. CONFIG: a plan.mode =\n"
    "\"grp\" configuration (e.g. inputs/bench/planner-48gpu.cfg).\n"
    "  --gpus N[,N...]  GPU counts, 2 .. 1048576, at most 8 (default 48,512,4096)\n"
    "  --repeat R       searches timed per count, 1 .. 1000 (default 5)\n"
    "  --exact          after each row, the same search at plan.solve_tolerance = 0 (once)\n"
    "  --threads T      plan.solve_threads for the searches, 0 .. 16 (0: the CPUs this\n"
    "                   process may run on, at most 8; default 1, one core)\n",
    solve_opts, "CONFIG", 1, 1, 0};

int cmd_bench_planner_solve(int argc, char **argv)
{
    int gpus[8] = {48, 512, 4096}, n_gpus = 3, repeat = 5, exact = 0, threads = 1, ch;
    struct cli cli;
    cli_begin(&cli, &solve_cmd, argc, argv);
    while ((ch = cli_next(&cli)) > 0) {
        if (ch == 'e') exact = 1;
        else if (ch == 't' ? cli_int(&cli, 0, 16, &threads)
                 : ch == 'r' ? cli_int(&cli, 1, 1000, &repeat)
                           : (n_gpus = cli_int_list(&cli, 2, 1 << 20, gpus, 8)) < 0)
            return cli.rc;
    }
    if (ch == CLI_EXIT) return cli.rc;
    const char *path = cli.args[0];
    struct libra_config *cfg = xmalloc(sizeof *cfg);
    struct job_inputs in;
    char err[1024];
    if (config_load(path, cfg, err, sizeof err) || driver_load_inputs(cfg, &in, err, sizeof err)) {
        fprintf(stderr, "libra: %s\n", err);
        free(cfg);
        return 1;
    }
    if (strcmp(cfg->plan.mode, "grp") != 0) {
        fprintf(stderr, "libra: %s: plan.mode must be \"grp\" for --bench-planner-solve\n", path);
        free(cfg);
        return 1;
    }
    cfg->plan.solve_threads = threads;
    char thr[64] = "one thread";
    if (threads == 0) snprintf(thr, sizeof thr, "threads: the CPUs it may use, <= 8");
    else if (threads > 1) snprintf(thr, sizeof thr, "%d threads", threads);
    printf("planner solve time: %s, %s on %s, workload %s, %d repeats, %s\n\n", path,
           in.cm.model.name, in.cm.hw.name, in.wl.name, repeat, thr);
    printf("| GPUs | batch | granularity | tolerance | median solve (ms) | min (ms) | cost-model calls "
           "| approx | step (s) | plan |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|:-:|---:|---|\n");
    int batch0 = cfg->train.batch_size, gran0 = cfg->plan.granularity;
    double tol0 = cfg->plan.solve_tolerance;
    for (int g = 0; g < n_gpus; g++) {
        int batch = (int)((long long)batch0 * gpus[g] / 48);
        cfg->train.batch_size = batch < batch0 ? batch0 : batch;
        if (gpus[g] > 64 && in.cm.hw.gpus_per_node > gran0)
            cfg->plan.granularity = in.cm.hw.gpus_per_node;
        solve_row(cfg, &in, gpus[g], repeat);
        if (exact && tol0 > 0) {
            cfg->plan.solve_tolerance = 0;
            solve_row(cfg, &in, gpus[g], 1);
            cfg->plan.solve_tolerance = tol0;
        }
        cfg->plan.granularity = gran0;
    }
    free(cfg);
    return 0;
}

/* ---- `libra --bench-planner-report LABEL=FILE[,FILE...] ...` ---- */

/* One run's figures from its metrics file. Throughputs are per emulated second
 * (the /steps step_s sum times the run's time_scale is not needed: ratios between
 * runs of one time_scale are what the report prints). */
struct run_figs {
    double traj_s, tok_s, idle, roll_idle, train_idle, steps;
};

static int run_figures(const char *path, struct run_figs *f, char *err, size_t errlen)
{
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) {
        snprintf(err, errlen, "%s: not a readable HDF5 file", path);
        return -1;
    }
    static const char *const cols[] = {"step_s",          "n_traj",           "tokens_gen",
                                       "tokens_tool",     "rollout_busy_frac", "train_busy_frac",
                                       "n_rollout_ranks", "n_train_ranks",    "n_hybrid_ranks"};
    enum { N_COLS = 9 };
    double *v[N_COLS] = {0};
    size_t n = 0, m;
    double world = 0;
    int rc = 0;
    for (int i = 0; i < N_COLS && rc == 0; i++) {
        char e[256];
        rc = h5_read_column_f64(file, "steps", cols[i], &v[i], &m, e, sizeof e);
        if (rc) snprintf(err, errlen, "%s: %s", path, e);
        n = m;
    }
    if (rc == 0 && h5_read_attr_f64(file, "world_size", &world)) {
        snprintf(err, errlen, "%s: no world_size attribute", path);
        rc = -1;
    }
    if (rc == 0 && n == 0) {
        snprintf(err, errlen, "%s: no steps", path);
        rc = -1;
    }
    if (rc == 0) {
        double t = 0, traj = 0, tok = 0, busy = 0, rb = 0, rt = 0, tb = 0, tt = 0;
        for (size_t i = 0; i < n; i++) {
            double dt = v[0][i], nr = v[6][i], nt = v[7][i] + v[8][i];
            t += dt;
            traj += v[1][i];
            tok += v[2][i] + v[3][i];
            rb += v[4][i] * nr * dt;
            rt += nr * dt;
            tb += v[5][i] * nt * dt;
            tt += nt * dt;
        }
        busy = rb + tb;
        *f = (struct run_figs){.traj_s = traj / t,
                               .tok_s = tok / t,
                               .idle = 1.0 - busy / ((world - 1) * t),
                               .roll_idle = rt > 0 ? 1.0 - rb / rt : 0,
                               .train_idle = tt > 0 ? 1.0 - tb / tt : 0,
                               .steps = (double)n};
    }
    for (int i = 0; i < N_COLS; i++) free(v[i]);
    H5Fclose(file);
    return rc;
}

static double median_of(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static const struct cli_cmd report_cmd = {
    "libra bench-planner-report", "libra bench-planner-report LABEL=FILE[,FILE...] ...",
    "The throughput table of tools/bench-planner from the runs' metrics files (Markdown):\n"
    "the first label is the baseline of the ratios; several files of one label (repeats,\n"
    "at most 16) report their median.\n",
    NULL, "LABEL=FILE[,FILE...] ...", 1, -1, 0};

int cmd_bench_planner_report(int argc, char **argv)
{
    struct cli cli;
    if (cli_operands(&cli, &report_cmd, argc, argv) == CLI_EXIT) return cli.rc;
    for (int a = 0; a < cli.nargs; a++) {
        const char *eq = strchr(cli.args[a], '=');
        if (!eq || eq == cli.args[a] || strspn(eq + 1, ",") == strlen(eq + 1))
            return cli_error(&cli, "'%s' is not LABEL=FILE[,FILE...]", cli.args[a]);
    }
    const char *first = cli.args[0];
    printf("| run | repeats | trajectories / wall s | vs %.*s | tokens / wall s | vs | GPU idle | "
           "rollout idle | training idle |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
           (int)strcspn(first, "="), first);
    double base_traj = 0, base_tok = 0;
    for (int a = 0; a < cli.nargs; a++) {
        char *label = xstrdup(cli.args[a]), *eq = strchr(label, '=');
        *eq = '\0';
        double tr[16], tk[16], id[16], ri[16], ti[16];
        int n = 0;
        for (char *p = strtok(eq + 1, ","); p && n < 16; p = strtok(NULL, ",")) {
            struct run_figs f = {0};
            char err[1200];
            if (run_figures(p, &f, err, sizeof err)) {
                fprintf(stderr, "libra: %s\n", err);
                free(label);
                return 1;
            }
            tr[n] = f.traj_s, tk[n] = f.tok_s, id[n] = f.idle, ri[n] = f.roll_idle,
            ti[n] = f.train_idle, n++;
        }
        double mt = median_of(tr, n), mk = median_of(tk, n);
        if (a == 0) base_traj = mt, base_tok = mk;
        printf("| %s | %d | %.4f | %.2f | %.0f | %.2f | %.2f | %.2f | %.2f |\n", label, n, mt,
               mt / base_traj, mk, mk / base_tok, median_of(id, n), median_of(ri, n), median_of(ti, n));
        free(label);
    }
    return 0;
}
