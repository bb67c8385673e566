/*
 * Internals shared by the experiment report's two files: exp_report.c reads a run's
 * metrics file into a struct exp_data (its figures plus the columns the charts need)
 * and writes results.md; exp_charts.c draws the charts from exp_data (each chart is
 * BASE.png, BASE.svg and BASE.csv, include/libra/plot.h).
 *
 * Glossary: S = the run's /steps rows, T = its trained trajectories (fate 0,
 * step_consumed >= 0). Times are the file's seconds times the run's time_scale
 * (root attribute "time_scale", else 1): emulated seconds.
 */
#ifndef LIBRA_REPORT_EXP_INTERNAL_H
#define LIBRA_REPORT_EXP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "libra/exp_report.h"

/* One trained trajectory, as the drift chart needs it. */
struct exp_traj {
    double step;     /* step_consumed */
    double gen;      /* gen_tokens */
};

struct exp_data {
    struct exp_figures fig;
    double time_scale;
    int64_t n_steps;                        /* S */
    double *t_begin, *t_end;                /* (S) start and end of each step, emulated s */
    double *n_rollout, *n_train, *n_hybrid; /* (S) GPUs per role during each step */
    int64_t n_trained;                      /* T */
    struct exp_traj *trained;               /* (T) sorted by step, then gen */
};

/* Reads the run's metrics file at path; 0, or -1 with err naming the file (d then
 * holds nothing to free, but exp_data_free is still safe). */
int exp_load(const char *path, struct exp_data *d, char *err, size_t errlen);
void exp_data_free(struct exp_data *d);

/* throughput.*: grouped bars, groups = workloads (n_wl), series = policies (n_pol);
 * traj_per_s[w * n_pol + p] (the mean over n_seeds seeds), NaN where workload w has no
 * run of policy p. The titles of all three charts say how many seeds there were. */
int exp_chart_throughput(const char *base, const char *const *workloads, int n_wl,
                         const char *const *policies, int n_pol, const double *traj_per_s,
                         int n_seeds, char *err, size_t errlen);
/* allocation-<workload>.*: GPUs per role against time, one flat segment per step. */
int exp_chart_allocation(const char *base, const char *workload, const struct exp_data *d,
                         int n_seeds, char *err, size_t errlen);
/* drift-<workload>.*: mean, p50, p90 of gen_tokens per training step of d (which
 * must have n_trained > 0), drawn from run `policy`. */
int exp_chart_drift(const char *base, const char *workload, const char *policy,
                    const struct exp_data *d, int n_seeds, char *err, size_t errlen);

#endif
