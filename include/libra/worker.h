/*
 * Ranks 1..N-1: the workers. One loop serves whatever role the current plan gives
 * the rank (rollout instance member or leader, training replica, hybrid replica,
 * idle) and follows rank 0's messages: turns, plans, weight syncs, training batches,
 * checkpoints and shutdown. The roles are written once, against the device seam
 * (include/libra/device.h): the worker does not know which device it drives.
 */
#ifndef LIBRA_WORKER_H
#define LIBRA_WORKER_H

#include "libra/config.h"
#include "libra/cost.h"
#include "libra/workload.h"

/* Runs a worker rank until shutdown; returns the process exit code. start_version:
 * the policy version of the weights every rank starts from (0, or a checkpoint's). */
int worker_run(const struct libra_config *cfg, const struct cost_model *cm,
               const struct workload *wl, int rank, int world, int start_version);

/* `libra --bench-sync` (worker_bench.c): every rank of the job calls it with the same
 * configuration (device cpu, a static plan); rank 0 prints the table. */
int worker_bench_sync(const struct libra_config *cfg, int rank, int world);

#endif
