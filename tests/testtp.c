/* The TP-group helpers of the MPI tests (testtp.h). */
#include "testtp.h"

#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "libra/hash.h"
#include "libra/log.h"

int test_tp_rank;

void test_tp_group_open(struct test_tp_group *g, const struct tfm_config *c, int t, int rank)
{
    memset(g, 0, sizeof *g);
    g->t = t;
    g->i = rank % t;
    MPI_Comm comm;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, rank / t, rank, &comm));
    cpu_comm_bind(&g->comm, comm);
    g->comm.owned = 1;
    cpu_comm_bind(&g->kv, MPI_COMM_NULL);
    if (c->n_kv_heads < t) {
        int share = t / c->n_kv_heads;
        MPI_Comm kv;
        MPI_CHECK(MPI_Comm_split(comm, g->i / share, g->i, &kv));
        cpu_comm_bind(&g->kv, kv);
        g->kv.owned = 1;
    }
    tfm_tp_init(&g->tp, c, t, g->i, &g->comm.tc, g->kv.comm != MPI_COMM_NULL ? &g->kv.tc : NULL);
}

void test_tp_model_open(struct test_tp_group *g, const struct tfm_config *c, int t,
                        uint64_t seed, int bf16, struct tfm_params *full,
                        struct tfm_params *part)
{
    test_tp_group_open(g, c, t, test_tp_rank);
    if (bf16) test_bf16_params(full, c, seed);
    else test_random_params(full, c, seed);
    tfm_params_alloc(part, &g->tp.local);
    tfm_tp_shard(&g->tp, full, part);
}

void test_tp_group_close(struct test_tp_group *g)
{
    cpu_comm_free_owned(&g->kv);
    cpu_comm_free_owned(&g->comm);
}

int test_tp_same_on_group(const struct test_tp_group *g, const void *x, size_t n)
{
    uint64_t h = fnv1a_bytes(x, n), lo, hi;
    MPI_CHECK(MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, g->comm.comm));
    MPI_CHECK(MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, g->comm.comm));
    return lo == hi;
}

int test_tp_main(int *argc, char ***argv, const char *name, void (*setup)(void),
                 const struct test_suite *suites)
{
    int world;
    MPI_CHECK(MPI_Init(argc, argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &test_tp_rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    if (world != 4) {
        if (test_tp_rank == 0) fprintf(stderr, "%s: run with mpirun -np 4 (got %d)\n", name, world);
        MPI_Finalize();
        return 2;
    }
    if (setup) setup();
    int worst = test_main_all_ranks(suites);
    MPI_CHECK(MPI_Finalize());
    return worst;
}
