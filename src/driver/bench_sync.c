/*
 * `mpirun -np N libra bench-sync CONFIG` (also --bench-sync): shard-matched weight
 * syncs (relayed, and point to point) against a full broadcast for the configuration's
 * static plan (worker_bench_sync, src/worker). Every
 * rank reads the configuration itself (a benchmark on one machine).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "libra/cli.h"
#include "libra/config.h"
#include "libra/driver.h"
#include "libra/log.h"
#include "libra/worker.h"

static const struct cli_cmd bench_sync_cmd = {
    "libra bench-sync", "mpirun -np N libra bench-sync CONFIG",
    "Times the weight syncs of CONFIG's static plan (device.type = \"cpu\"): shard-matched,\n"
    "relayed down a chain of each place's receivers and point to point, against a full\n"
    "broadcast; bytes received and sent by the busiest rank. Every rank reads CONFIG.\n",
    NULL, "CONFIG", 1, 1, 0};

int cmd_bench_sync(int argc, char **argv)
{
    struct cli cli;
    if (cli_operands(&cli, &bench_sync_cmd, argc, argv) == CLI_EXIT) return cli.rc;
    const char *path = cli.args[0];
    int rank = 0, world = 1;
    MPI_CHECK(MPI_Init(NULL, NULL));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    log_set_rank(rank);
    struct libra_config *cfg = xcalloc(1, sizeof *cfg);
    char err[1024];
    if (config_load(path, cfg, err, sizeof err) || config_check_world(cfg, world, err, sizeof err))
        FATAL_INPUT("%s", err);
    if (cfg->plan.mode[0] != 's' || cfg->device.type[0] != 'c')
        FATAL_INPUT("%s: --bench-sync needs device.type = \"cpu\" and a static plan", path);
    int rc = worker_bench_sync(cfg, rank, world);
    free(cfg);
    MPI_CHECK(MPI_Finalize());
    return rc;
}
