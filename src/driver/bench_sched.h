/*
 * The scheduler benchmark's parts (bench_sched.c: throughput and latency;
 * bench_sched_sweep.c: the threshold sweep). Internal to src/driver.
 */
#ifndef LIBRA_DRIVER_BENCH_SCHED_H
#define LIBRA_DRIVER_BENCH_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "libra/config.h"
#include "libra/driver.h"
#include "libra/rollout_sim.h"

#define BENCH_MAX_SEEDS 16

struct bench_opts {
    char workload[64];
    int steps, warmup, groups, samples;
    uint64_t seed;
    uint64_t seeds[BENCH_MAX_SEEDS]; /* --seeds: several seeds, summarised */
    int n_seeds;
    double tick_s;
    int latency;
    int sweep;       /* --sweep: cmlfq's thresholds and max_load over a grid */
    int decisions;   /* --latency: decisions timed */
    int tree_nodes;  /* --latency: tree size to grow first */
};

/* The config every row starts from: defaults, A800 + Qwen3-14B, the workload preset,
 * o's seed and samples. 0, or -1 with the reason printed. */
int bench_sched_inputs(const struct bench_opts *o, struct libra_config *cfg,
                       struct job_inputs *in);
/* One simulation: n_inst instances of TP tp[], scheduler sc, o's steps and groups,
 * on seed. 0, or -1 with err. */
int bench_sched_run(const struct bench_opts *o, uint64_t seed, const struct job_inputs *in,
                    const struct libra_config *cfg, const struct sched_config *sc, int n_inst,
                    const int *tp, struct rsim_totals *tot, char *err, size_t errlen);
/* --sweep. 0, or 1 after an error. */
int bench_sched_sweep(const struct bench_opts *o);

#endif
