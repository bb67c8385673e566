/*
 * `mpirun -np N libra --bench-sync CONFIG`: shard-matched weight syncs against a full
 * broadcast for the configuration's static plan (worker_bench_sync, src/worker). Every
 * rank reads the configuration itself (a benchmark on one machine).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "libra/config.h"
#include "libra/driver.h"
#include "libra/log.h"
#include "libra/worker.h"

int cmd_bench_sync(int argc, char **argv)
{
    if (argc < 1) FATAL_INPUT("usage: mpirun -np N libra --bench-sync CONFIG");
    int rank = 0, world = 1;
    MPI_CHECK(MPI_Init(NULL, NULL));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    log_set_rank(rank);
    struct libra_config *cfg = xcalloc(1, sizeof *cfg);
    char err[1024];
    if (config_load(argv[0], cfg, err, sizeof err) || config_check_world(cfg, world, err, sizeof err))
        FATAL_INPUT("%s", err);
    if (cfg->plan.mode[0] != 's' || cfg->device.type[0] != 'c')
        FATAL_INPUT("%s: --bench-sync needs device.type = \"cpu\" and a static plan", argv[0]);
    int rc = worker_bench_sync(cfg, rank, world);
    free(cfg);
    MPI_CHECK(MPI_Finalize());
    return rc;
}
