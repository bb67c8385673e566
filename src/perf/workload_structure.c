/*
 * The structure of a workload preset, measured from trajectories it generates
 * (include/libra/workload.h, struct wl_structure): what docs/emulation.md sets beside
 * the figures published for production agentic RL rollouts.
 *
 *   icc         one-way ANOVA intra-class correlation of log(total tokens) over
 *               GRPO groups of m samples: (MSB - MSW) / (MSB + (m - 1) MSW). 0 when
 *               the samples of a prompt are independent, 1 when they are equal.
 *   tail_share  the groups are cut into batches of 512 trajectories in launch order;
 *               each trajectory alone takes WL_TPOT_S per generated token plus its
 *               tool seconds; per batch, (T_max - T_90) / T_max, T_90 the time by
 *               which 90 % of the batch has finished: the share of a synchronous
 *               rollout spent waiting for its last 10 % (Seer's "tail requests").
 *   p99_p50     of the total tokens (prompt + generated + tool payloads).
 */
#include "libra/log.h"
#include "libra/workload.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TAIL_BATCH 512

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Order statistic at quantile q of sorted v[0..n) (nearest rank). */
static double at_quantile(const double *v, int n, double q)
{
    int i = (int)ceil(q * n) - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

static double icc_of(const double *x, int n_groups, int m)
{
    if (n_groups < 2 || m < 2) return 0;
    double grand = 0;
    for (int i = 0; i < n_groups * m; i++) grand += x[i];
    grand /= (double)n_groups * m;
    double ssb = 0, ssw = 0;
    for (int g = 0; g < n_groups; g++) {
        double mean = 0;
        for (int j = 0; j < m; j++) mean += x[g * m + j];
        mean /= m;
        ssb += m * (mean - grand) * (mean - grand);
        for (int j = 0; j < m; j++) ssw += (x[g * m + j] - mean) * (x[g * m + j] - mean);
    }
    double msb = ssb / (n_groups - 1), msw = ssw / ((double)n_groups * (m - 1));
    double den = msb + (m - 1) * msw;
    return den > 0 ? (msb - msw) / den : 0;
}

static double tail_share_of(const double *lat, int n)
{
    int batches = n / TAIL_BATCH;
    if (batches == 0) return 0;
    double *b = xmalloc(TAIL_BATCH * sizeof *b), sum = 0;
    for (int k = 0; k < batches; k++) {
        memcpy(b, lat + (size_t)k * TAIL_BATCH, TAIL_BATCH * sizeof *b);
        qsort(b, TAIL_BATCH, sizeof *b, cmp_double);
        double tmax = b[TAIL_BATCH - 1], t90 = at_quantile(b, TAIL_BATCH, 0.9);
        sum += tmax > 0 ? (tmax - t90) / tmax : 0;
    }
    free(b);
    return sum / batches;
}

void workload_structure(const struct workload *wl, uint64_t seed, int n_groups, int group_size,
                        int step, struct wl_structure *out)
{
    memset(out, 0, sizeof *out);
    int n = n_groups * group_size;
    if (n_groups < 1 || group_size < 1) return;
    double *logt = xmalloc((size_t)n * sizeof *logt);
    double *tot = xmalloc((size_t)n * sizeof *tot);
    double *lat = xmalloc((size_t)n * sizeof *lat);
    double turns = 0;
    for (int g = 0; g < n_groups; g++)
        for (int j = 0; j < group_size; j++) {
            int i = g * group_size + j;
            struct wl_traj_summary r;
            workload_run(wl, seed, i, g, step, &r);
            tot[i] = (double)r.prompt + r.gen + r.payload;
            logt[i] = log(tot[i]);
            lat[i] = r.gen * WL_TPOT_S + r.tool_s;
            turns += r.turns;
        }
    out->icc = icc_of(logt, n_groups, group_size);
    out->tail_share = tail_share_of(lat, n);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += tot[i];
    out->mean_tokens = sum / n;
    out->mean_turns = turns / n;
    qsort(tot, (size_t)n, sizeof *tot, cmp_double);
    out->p99_p50 = at_quantile(tot, n, 0.99) / at_quantile(tot, n, 0.5);
    free(logt);
    free(tot);
    free(lat);
}
