/*
 * The GPU groups of a rank on device cuda (cpu_internal.h): its shard's TP group
 * (cpu_gpu_comm), the ranks of it that hold the same replicated kv head
 * (cpu_gpu_comm_kv) and the training replicas' data-parallel group (cpu_gpu_comm_dp).
 * NCCL when every rank of the group drives a GPU of its own, else host-staged over the
 * group's MPI communicator (several ranks sharing a GPU, where NCCL refuses to run, or
 * LIBRA_NCCL=0 in the environment). Cached by kind and membership -- the group's world
 * ranks -- so a re-split that keeps a group hands back the same communicator and pays
 * no NCCL init; the ranks of a group agree on a hit (a MIN all-reduce) before trusting
 * it, since each rank's cache has seen other groups. A host-staged group refers to the
 * device's struct cpu_comm of its kind (sh.comm, dp), which is bound to the epoch's
 * communicator of the same members before the group is used.
 */
#define _DEFAULT_SOURCE /* gethostname */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_internal.h"
#include "libra/gpu_comm.h"
#include "libra/hash.h"
#include "libra/log.h"

/* The world ranks of comm's members, in comm's rank order (n <= CPU_GPU_GROUP_MAX). */
static int world_ranks(MPI_Comm comm, int *out)
{
    MPI_Group g, w;
    int n;
    MPI_CHECK(MPI_Comm_group(comm, &g));
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &w));
    MPI_CHECK(MPI_Group_size(g, &n));
    if (n > CPU_GPU_GROUP_MAX) FATAL("a GPU group of %d ranks (at most %d)", n, CPU_GPU_GROUP_MAX);
    int in[CPU_GPU_GROUP_MAX];
    for (int i = 0; i < n; i++) in[i] = i;
    MPI_CHECK(MPI_Group_translate_ranks(g, n, in, w, out));
    MPI_CHECK(MPI_Group_free(&g));
    MPI_CHECK(MPI_Group_free(&w));
    return n;
}

/* Whether every rank of the group drives a different GPU: each contributes a key of
 * its host name and GPU index in its slot (a sum all-reduce of zeros elsewhere). */
static int distinct_gpus(const struct device *d, const struct tfm_comm *tc)
{
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0) return 0;
    int32_t key[CPU_GPU_GROUP_MAX] = {0};
    key[tc->rank] = (int32_t)(fnv1a_bytes(host, strlen(host)) ^ (uint64_t)d->gpu_index * 0x9e3779b9u);
    tc->allreduce_i32(tc->ctx, key, (size_t)tc->size, TFM_RED_SUM);
    for (int i = 0; i < tc->size; i++)
        for (int j = 0; j < i; j++)
            if (key[i] == key[j]) return 0;
    return 1;
}

static struct gpu_comm *make(struct device *d, const struct tfm_comm *tc, int kind)
{
    const char *env = getenv("LIBRA_NCCL");
    int want = !(env && strcmp(env, "0") == 0);
    if (want && distinct_gpus(d, tc)) {
        char err[512];
        struct gpu_comm *gc = gpu_comm_nccl(d->gpu, tc, err, sizeof err);
        if (gc) return gc;
        if (tc->rank == 0)
            LOG_W("device cuda: %s all-reduces host-staged: %s",
                  kind == CPU_GPU_TP   ? "TP group"
                  : kind == CPU_GPU_KV ? "kv group"
                  : kind == CPU_GPU_DP ? "data-parallel gradient"
                                       : "weight sync",
                  err);
    }
    return gpu_comm_host_staged(d->gpu, tc);
}

/* The group of kind over c (bound to comm), from the cache or made (collective). */
static struct gpu_comm *group_of(struct device *d, int kind, struct cpu_comm *c)
{
    const struct tfm_comm *tc = &c->tc;
    int world[CPU_GPU_GROUP_MAX], n = world_ranks(c->comm, world), hit = -1;
    for (int k = 0; k < d->n_gcache && hit < 0; k++)
        if (d->gcache[k].kind == kind && d->gcache[k].n == n &&
            memcmp(d->gcache[k].world, world, (size_t)n * sizeof *world) == 0)
            hit = k;
    int32_t all = hit >= 0;
    tc->allreduce_i32(tc->ctx, &all, 1, TFM_RED_MIN);
    if (all) return d->gcache[hit].gc;
    if (hit >= 0) { /* another rank had forgotten it: all make a new one */
        gpu_comm_free(d->gcache[hit].gc);
        d->gcache[hit] = d->gcache[--d->n_gcache];
    }
    if (d->n_gcache == CPU_GPU_CACHE) { /* full: drop the oldest */
        gpu_comm_free(d->gcache[0].gc);
        memmove(d->gcache, d->gcache + 1, (size_t)(d->n_gcache - 1) * sizeof *d->gcache);
        d->n_gcache--;
    }
    struct cpu_gpu_group *s = &d->gcache[d->n_gcache++];
    s->kind = kind;
    s->n = n;
    memcpy(s->world, world, (size_t)n * sizeof *world);
    s->gc = make(d, tc, kind);
    return s->gc;
}

struct gpu_comm *cpu_gpu_comm(struct device *d)
{
    if (d->sh.t <= 1 || !d->gpu) return NULL;
    return group_of(d, CPU_GPU_TP, &d->sh.comm);
}

struct gpu_comm *cpu_gpu_comm_kv(struct device *d)
{
    if (d->sh.t <= 1 || !d->gpu || d->sh.kv.comm == MPI_COMM_NULL) return NULL;
    return group_of(d, CPU_GPU_KV, &d->sh.kv);
}

struct gpu_comm *cpu_gpu_comm_dp(struct device *d, MPI_Comm dp)
{
    int size;
    MPI_CHECK(MPI_Comm_size(dp, &size));
    if (!d->gpu || size > CPU_GPU_GROUP_MAX) return NULL;
    cpu_comm_bind(&d->dp, dp);
    return group_of(d, CPU_GPU_DP, &d->dp);
}

struct gpu_comm *cpu_gpu_comm_sync(struct device *d, struct cpu_comm *c)
{
    return group_of(d, CPU_GPU_SYNC, c);
}

void cpu_gpu_comm_free_all(struct device *d)
{
    for (int k = 0; k < d->n_gcache; k++) gpu_comm_free(d->gcache[k].gc);
    d->n_gcache = 0;
}
