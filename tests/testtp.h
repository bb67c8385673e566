/*
 * For the MPI tests of tensor parallelism (test_tp_mpi, test_gpu_tp_mpi): a TP group of
 * degree t carved out of MPI_COMM_WORLD as the CPU device builds one (its MPI
 * communicators, the kv sub-group when the model has fewer kv heads than t, the
 * struct tfm_tp), a check that every rank of a group holds the same bytes, and main's
 * MPI set-up for a suite run on 4 ranks.
 */
#ifndef LIBRA_TESTTP_H
#define LIBRA_TESTTP_H

#include <stddef.h>
#include <stdint.h>

#include "device/cpu/cpu_internal.h"
#include "testutil.h"

struct test_tp_group {
    struct cpu_comm comm, kv;
    struct tfm_tp tp;
    int t, i;
};

/* The group of degree t of world rank `rank`: ranks [rank / t * t, ... + t). */
void test_tp_group_open(struct test_tp_group *g, const struct tfm_config *c, int t, int rank);
void test_tp_group_close(struct test_tp_group *g);
/* test_tp_group_open, then a random model c keyed by seed (test_random_params, or
 * test_bf16_params when bf16) into full and this rank's shard of it into part. */
void test_tp_model_open(struct test_tp_group *g, const struct tfm_config *c, int t,
                        uint64_t seed, int bf16, struct tfm_params *full,
                        struct tfm_params *part);
/* Whether every rank of the group holds the same n bytes at x (collective). */
int test_tp_same_on_group(const struct test_tp_group *g, const void *x, size_t n);
/* MPI_Init, a world of exactly 4 ranks (else a message and 2), setup() (may be NULL)
 * on every rank, the suites on every rank (test_main_all_ranks), MPI_Finalize: the
 * worst exit code of all ranks. */
int test_tp_main(int *argc, char ***argv, const char *name, void (*setup)(void),
                 const struct test_suite *suites);
extern int test_tp_rank; /* this rank in MPI_COMM_WORLD, after test_tp_main's MPI_Init */

#endif
