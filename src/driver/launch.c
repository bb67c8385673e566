/*
 * How the job's ranks were started, looked at before MPI_Init (include/libra/driver.h).
 *
 * Open MPI joins a Slurm step started by srun only through PMIx: the Open MPI of
 * Debian and Ubuntu (built without --with-pmi) and every 5.x have no PMI-1/PMI-2
 * client. Under `srun --mpi=pmi2` (or none) each task's MPI_Init fails with a page
 * of Open MPI's text per task; libra says once, on task 0, what to use instead. An
 * MPI with a PMI-2 client (MPICH, an Open MPI 4 built --with-pmi) is not refused.
 *
 * Oversubscription: mpirun tells its ranks to yield the CPU while they poll for a
 * message (OMPI_MCA_mpi_yield_when_idle=1) when it starts more of them than a node
 * has cores; srun does not, so each blocked rank spins through its time slice inside
 * MPI_Comm_split and the collectives while the rank it waits for queues for a core
 * (49 ranks on 2 cores: re-splits of seconds instead of milliseconds). libra sets it
 * itself under srun when a node runs more of the step's tasks than it has CPUs.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libra/driver.h"

/* A positive whole number from the environment, else 0. */
static long env_count(const char *name)
{
    const char *v = getenv(name);
    char *end;
    if (!v || !*v) return 0;
    long n = strtol(v, &end, 10);
    return *end == '\0' && n > 0 ? n : 0;
}

/* The most tasks on one node of the step: SLURM_STEP_TASKS_PER_NODE is "49", or
 * "2(x3),1" (2 tasks on each of 3 nodes, then 1); 0 unknown. */
static long most_tasks_per_node(void)
{
    const char *s = getenv("SLURM_STEP_TASKS_PER_NODE");
    long most = 0;
    while (s && *s) {
        char *end;
        long n = strtol(s, &end, 10);
        if (end == s) return 0;
        if (n > most) most = n;
        s = end;
        if (*s == '(') s = strchr(s, ')') ? strchr(s, ')') + 1 : "";
        if (*s == ',') s++;
    }
    return most;
}

/* srun started this process (not mpirun, whose ranks also see Slurm's variables
 * when it runs inside an allocation: they have Open MPI's own). */
static int srun_direct(void)
{
    return getenv("SLURM_STEP_ID") && !getenv("OMPI_COMM_WORLD_SIZE");
}

int driver_launch_check(char *err, size_t errlen)
{
#ifdef OPEN_MPI
    long tasks = env_count("SLURM_STEP_NUM_TASKS");
    if (!srun_direct() || tasks < 2 || getenv("PMIX_RANK")) return 0;
    const char *type = getenv("SLURM_MPI_TYPE");
    snprintf(err, errlen,
             "srun started these %ld tasks with --mpi=%s, but Open MPI joins a Slurm step "
             "only through PMIx: each task would start alone. Use `srun --mpi=pmix` (the job "
             "scripts: leave LIBRA_SRUN_MPI unset or set it to pmix; `srun --mpi=list` shows "
             "this Slurm's plugins) or start the ranks with mpirun",
             tasks, type && *type ? type : getenv("PMI_FD") ? "pmi2" : "none");
    return -1;
#else
    (void)err;
    (void)errlen;
    return 0;
#endif
}

int driver_launch_tune(int *tasks, int *cpus)
{
    *tasks = *cpus = 0;
#ifdef OPEN_MPI
    if (!srun_direct() || getenv("OMPI_MCA_mpi_yield_when_idle")) return 0;
    long most = most_tasks_per_node(), online = sysconf(_SC_NPROCESSORS_ONLN);
    long alloc = env_count("SLURM_CPUS_ON_NODE"); /* what the job may use, if less */
    long have = alloc > 0 && alloc < online ? alloc : online;
    if (most <= 0 || have <= 0 || most <= have) return 0;
    if (setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0) != 0) return 0;
    *tasks = (int)most;
    *cpus = (int)have;
    return 1;
#else
    return 0;
#endif
}
