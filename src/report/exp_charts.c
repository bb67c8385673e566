/*
 * The experiment report's charts (exp_report.h), drawn with plot.h (each one PNG,
 * SVG and the plotted data as CSV, named by a base path):
 *   throughput   grouped bars of trajectories per emulated second, one group per
 *                workload, one bar per policy, its value on it (a policy a workload
 *                lacks: "n/a");
 *   allocation   the GPUs of each role (rollout, training, hybrid lent to training)
 *                against time: each /steps row is a flat segment from the step's
 *                start (wall_s - step_s) to its end (wall_s), so a re-split shows as
 *                a jump at the step boundary;
 *   drift        the generated-length distribution per training step: mean, p50
 *                and p90 (numpy-linear percentiles) of the trained trajectories'
 *                gen_tokens, one point per step that trained any.
 * The data comes from exp_load (exp_report.c); nothing here reads files.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "libra/plot.h"
#include "libra/rollout_sim.h"
#include "report/exp_internal.h"

/* ", first of N seeds" for the title of a chart of one run's first seed; empty for
 * one seed. */
static void first_seed_note(char *buf, size_t n, int n_seeds)
{
    if (n_seeds > 1) snprintf(buf, n, ", first of %d seeds", n_seeds);
    else buf[0] = '\0';
}

int exp_chart_throughput(const char *base, const char *const *workloads, int n_wl,
                         const char *const *policies, int n_pol, const double *traj_per_s,
                         int n_seeds, char *err, size_t errlen)
{
    char title[160] = "Trained trajectories per emulated second";
    if (n_seeds > 1)
        snprintf(title, sizeof title, "Trained trajectories per emulated second (mean of %d "
                 "seeds)", n_seeds);
    struct plot_labels lb = {.title = title, .xlabel = "workload",
                             .ylabel = "throughput (trajectories / emulated s)",
                             .series_name = "policy"};
    return plot_bars(base, &lb, workloads, n_wl, policies, n_pol, traj_per_s, err, errlen);
}

int exp_chart_allocation(const char *base, const char *workload, const struct exp_data *d,
                         int n_seeds, char *err, size_t errlen)
{
    int64_t s = d->n_steps;
    if (s <= 0 || s > (int64_t)(1 << 29)) {
        snprintf(err, errlen, "%s: %lld steps cannot be drawn", base, (long long)s);
        return -1;
    }
    /* x: (2S) begin/end pairs; y: (3, 2S) one row per role. */
    double *x = xmalloc((size_t)(2 * s) * sizeof *x);
    double *y = xmalloc((size_t)(6 * s) * sizeof *y);
    const double *role[3] = {d->n_rollout, d->n_train, d->n_hybrid};
    for (int64_t i = 0; i < s; i++) {
        x[2 * i] = d->t_begin[i];
        x[2 * i + 1] = d->t_end[i];
        for (int r = 0; r < 3; r++) y[r * 2 * s + 2 * i] = y[r * 2 * s + 2 * i + 1] = role[r][i];
    }
    static const char *const labels[3] = {"rollout", "training", "hybrid (lent to training)"};
    struct plot_series ser[3];
    for (int r = 0; r < 3; r++)
        ser[r] = (struct plot_series){.label = labels[r], .x = x, .y = y + r * 2 * s,
                                      .n = (int)(2 * s)};
    char title[200], note[48];
    first_seed_note(note, sizeof note, n_seeds);
    snprintf(title, sizeof title, "%s: GPUs per role over the run (libra%s)", workload, note);
    struct plot_labels lb = {.title = title, .xlabel = "time (emulated s)",
                             .ylabel = "GPUs", .series_name = "role"};
    int rc = plot_lines(base, &lb, ser, 3, 1, err, errlen);
    free(y);
    free(x);
    return rc;
}

int exp_chart_drift(const char *base, const char *workload, const char *policy,
                    const struct exp_data *d, int n_seeds, char *err, size_t errlen)
{
    int64_t t = d->n_trained;
    if (t <= 0 || t > (int64_t)(1 << 29)) {
        snprintf(err, errlen, "%s: %lld trained trajectories cannot be drawn", base, (long long)t);
        return -1;
    }
    /* One point per distinct step; d->trained is sorted by step, so steps are runs. */
    double *x = xmalloc((size_t)t * sizeof *x);
    double *y = xmalloc((size_t)(3 * t) * sizeof *y); /* (3, T): mean, p50, p90 */
    double *gen = xmalloc((size_t)t * sizeof *gen);
    int n = 0;
    for (int64_t i = 0; i < t;) {
        int64_t j = i;
        double sum = 0;
        while (j < t && d->trained[j].step == d->trained[i].step) {
            gen[j - i] = d->trained[j].gen;
            sum += gen[j - i];
            j++;
        }
        x[n] = d->trained[i].step;
        y[n] = sum / (double)(j - i);
        y[t + n] = rsim_percentile(gen, j - i, 0.5);
        y[2 * t + n] = rsim_percentile(gen, j - i, 0.9);
        n++;
        i = j;
    }
    static const char *const labels[3] = {"mean", "p50 (median)", "p90"};
    struct plot_series ser[3];
    for (int k = 0; k < 3; k++)
        ser[k] = (struct plot_series){.label = labels[k], .x = x, .y = y + k * t, .n = n};
    char title[240], note[48];
    first_seed_note(note, sizeof note, n_seeds);
    snprintf(title, sizeof title, "%s: generated length of the trained trajectories (%s%s)",
             workload, policy, note);
    struct plot_labels lb = {.title = title, .xlabel = "training step",
                             .ylabel = "generated tokens per trajectory (tokens)",
                             .series_name = "statistic"};
    int rc = plot_lines(base, &lb, ser, 3, 1, err, errlen);
    free(gen);
    free(y);
    free(x);
    return rc;
}
