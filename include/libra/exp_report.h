/*
 * The experiment suite's report (tools/experiments): reads the metrics files of a
 * set of runs -- libra-sim or libra runs of several policies on several workloads,
 * plus the oracle's bound (libra-sim --oracle, whose file holds /steps rows only) --
 * and writes, into a directory:
 *
 *   results.md      one Markdown table per workload, one row per policy:
 *                   trajectories/s, generated tokens/s, ratio to "sync-colocated" and
 *                   to "static-async" (the same workload's runs of those names; "--"
 *                   when absent), fraction of the oracle reached (run named "oracle";
 *                   "--" when absent), GPU idle fraction of rollout and of training
 *                   (1 - the step-time-weighted mean of rollout_busy_frac /
 *                   train_busy_frac), p99 trajectory latency (t_end - t_start of the
 *                   trained trajectories, numpy-style linear percentile, emulated s),
 *                   steps; then the charts and a list of the runs' files. Formats:
 *                   "%.3f" traj/s, "%.1f" tokens/s, "%.2fx" ratios (of traj/s),
 *                   "%.0f%%" of oracle, "%.3f" idle, "%.2f" p99, "--" for anything
 *                   absent or not finite;
 *   throughput.*    grouped bars: trajectories/s per workload (groups) and policy,
 *                   each bar's value on it;
 *   allocation-<workload>.*  the "libra" run's GPUs per role (n_rollout_ranks,
 *                   n_train_ranks, n_hybrid_ranks) against time (each step from
 *                   wall_s - step_s to wall_s, emulated s), the last values labelled;
 *                   only for workloads with a "libra" run;
 *   drift-<workload>.*  the length distribution per step of the "libra" run (else
 *                   the first run of that workload with trained trajectories; none:
 *                   no chart): mean, p50 and p90 of the trained trajectories'
 *                   gen_tokens against the step that trained them.
 * Every chart is three files (include/libra/plot.h): NAME.png, NAME.svg and NAME.csv
 * (the plotted data under a header of the axis labels with units); results.md shows
 * the PNG and links the other two.
 * In file names the workload's bytes outside [A-Za-z0-9._-] become '_'. results.md
 * is written last (temp file, fsync, rename): present means the report is whole.
 *
 * Rates: trained trajectories (sum of /steps n_traj) and tokens_gen over the run's
 * last /steps wall_s times the run's time scale (root attribute "time_scale" when
 * present, else 1; wall_s x time_scale = emulated seconds), so they are per emulated
 * second; latencies and chart times are scaled the same way. The oracle's rows count
 * the same way. Files that are missing, unreadable, or lack a column give a clear
 * error naming the file (never a crash); a run with no steps, a last wall_s <= 0, or
 * one workload/policy given twice is an error.
 */
#ifndef LIBRA_EXP_REPORT_H
#define LIBRA_EXP_REPORT_H

#include <stddef.h>

/* Most seeds a run may be repeated on. */
#define EXP_MAX_SEEDS 16

struct exp_run {
    const char *workload; /* e.g. "r2e" */
    const char *policy;   /* e.g. "libra", "sync-colocated", "oracle" */
    const char *path;     /* its metrics file, or several separated by ',' (one per seed:
                           * the k-th file of every run is seed k; every run must have
                           * the same number). Then each results.md cell is the mean
                           * over the seeds with [min, max], and a ratio is taken per
                           * seed before it is summarised. */
};

/* Figures of one run (what a results.md row shows). */
struct exp_figures {
    double traj_per_s, tokens_per_s;
    double rollout_idle, train_idle;
    double p99_latency_s;     /* NaN for the oracle (no trajectories) */
    int steps;
};

/* Mean, min and max of v[0..n) (n >= 1); the mean is NaN when a value is not finite. */
void exp_spread(const double *v, int n, double *mean, double *lo, double *hi);
/* Reads one run's figures; 0, or -1 with err. */
int exp_read_figures(const char *path, struct exp_figures *f, char *err, size_t errlen);
/* Writes results.md and the charts into dir (created if missing). title heads
 * results.md. 0, or -1 with err. */
int exp_report(const char *dir, const char *title, const struct exp_run *runs, int n, char *err,
               size_t errlen);

#endif
