/*
 * The memory a run needs on rank 0's node, estimated from the device's per-rank
 * figures (device_info.train_rank_bytes / rollout_rank_bytes) and the configured plans,
 * checked before any work starts (include/libra/driver.h).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libra/driver.h"

/* Bytes the workers of one plan need: its training ranks (core and lent) and its
 * rollout ranks, each holding 1/t of a TP-t group's share. A colocated plan's n_train
 * ranks are its rollout ranks, counted twice: each holds the training state and the
 * rollout engine (an estimate that errs high by the one weight copy they share). */
static double plan_bytes(const struct plan_spec *p, const struct device_info *dev)
{
    int rollout = 0;
    for (int i = 0; i < p->n_tp; i++) rollout += p->rollout_tp[i];
    return (p->n_train + p->n_hybrid) * dev->train_rank_bytes + rollout * dev->rollout_rank_bytes;
}

/* The workers' bytes in the most demanding epoch: a fixed plan, the largest schedule
 * entry; under the planner any worker may train. */
static double workers_bytes(const struct libra_config *cfg, const struct device_info *dev,
                            int world)
{
    const struct plan_config *pc = &cfg->plan;
    if (strcmp(pc->mode, "static") == 0) return plan_bytes(&pc->fixed, dev);
    if (strcmp(pc->mode, "schedule") == 0) {
        double worst = 0;
        for (int i = 0; i < pc->n_schedule; i++) {
            double b = plan_bytes(&pc->schedule[i], dev);
            worst = b > worst ? b : worst;
        }
        return worst;
    }
    double per = dev->train_rank_bytes > dev->rollout_rank_bytes ? dev->train_rank_bytes
                                                                 : dev->rollout_rank_bytes;
    return (world - 1) * per;
}

int driver_slurm_tasks_on_node(const char *spec, int node)
{
    if (!spec || node < 0) return 0;
    const char *s = spec;
    while (*s) {
        char *end;
        long n = strtol(s, &end, 10), rep = 1;
        if (end == s || n < 1 || n > INT_MAX) return 0;
        s = end;
        if (s[0] == '(' && s[1] == 'x') {
            rep = strtol(s + 2, &end, 10);
            if (end == s + 2 || rep < 1 || *end != ')') return 0;
            s = end + 1;
        }
        if (node < rep) return (int)n;
        node -= (int)rep;
        if (*s == ',') s++;
        else if (*s) return 0;
    }
    return 0;
}

/* Ranks on this node: the launcher's count (mpirun's; srun's step layout for this
 * node, which srun --mpi=pmix gives without the others; the job's --ntasks-per-node),
 * else all of them. */
static int local_ranks(int world)
{
    const char *node = getenv("SLURM_NODEID");
    int counts[4] = {
        getenv("OMPI_COMM_WORLD_LOCAL_SIZE") ? atoi(getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) : 0,
        getenv("MPI_LOCALNRANKS") ? atoi(getenv("MPI_LOCALNRANKS")) : 0,
        driver_slurm_tasks_on_node(getenv("SLURM_STEP_TASKS_PER_NODE"), node ? atoi(node) : 0),
        getenv("SLURM_NTASKS_PER_NODE") ? atoi(getenv("SLURM_NTASKS_PER_NODE")) : 0};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (counts[i] > 0 && counts[i] <= world) return counts[i];
    return world;
}

int driver_check_memory(const struct libra_config *cfg, const struct device_info *dev,
                        int world, double *need_gb, double *have_gb, char *err, size_t errlen)
{
    *need_gb = *have_gb = 0;
    if (!dev->has_model || dev->train_rank_bytes <= 0) return 0;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return 0; /* unknown: not checked */
    /* rank 0 times the engine on zeroed weights of the model's shape */
    double rank0 = dev->rollout_rank_bytes;
    double total = rank0 + workers_bytes(cfg, dev, world);
    int local = local_ranks(world);
    double need = total * local / world, have = (double)pages * (double)page;
    *need_gb = need / 1e9;
    *have_gb = have / 1e9;
    if (need <= have) return 0;
    snprintf(err, errlen, "%s: rollout.slots: the %d ranks on this node need about %.1f GB (a "
             "training rank %.2f GB: weights, gradients, AdamW and activations; a rollout rank "
             "%.2f GB: weights and KV caches of rollout.slots x rollout.max_tokens) but the "
             "node has %.1f GB: spread the ranks over more nodes, shard with TP, or lower "
             "rollout.slots / rollout.max_tokens", CONFIG_WHERE(cfg, "rollout.slots"), local,
             need / 1e9, dev->train_rank_bytes / 1e9, dev->rollout_rank_bytes / 1e9,
             have / 1e9);
    return -1;
}
