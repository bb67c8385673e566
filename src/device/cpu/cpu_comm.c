/*
 * The model layer's collectives (struct tfm_comm, include/libra/tfm_tp.h) over an MPI
 * communicator: a TP instance's or replica's ranks. Blocking MPI_Allreduce: every
 * caller is inside the same collective call of the model on every rank of the group
 * (a decode step, a training batch), so nothing else can be waited for meanwhile.
 *
 * Identical bits on every rank: TP groups have 1, 2, 4 or 8 ranks, where Open MPI's
 * sum algorithms (recursive doubling, ring) combine in an order that gives every rank
 * the same result (float addition is commutative); the replicated values (residual
 * stream, norms, sampled tokens) thus stay identical across the group.
 */
#include "cpu_internal.h"
#include "libra/log.h"

#include <stdlib.h>

static MPI_Op op_of(enum tfm_red_op op)
{
    return op == TFM_RED_MAX ? MPI_MAX : op == TFM_RED_MIN ? MPI_MIN : MPI_SUM;
}

static void reduce(void *ctx, void *x, size_t n, MPI_Datatype t, enum tfm_red_op op)
{
    const struct cpu_comm *c = ctx;
    if (n > 0x7fffffff) FATAL("TP all-reduce of %zu elements exceeds one MPI count", n);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, x, (int)n, t, op_of(op), c->comm));
}

static void red_f32(void *ctx, float *x, size_t n, enum tfm_red_op op) { reduce(ctx, x, n, MPI_FLOAT, op); }
static void red_f64(void *ctx, double *x, size_t n, enum tfm_red_op op) { reduce(ctx, x, n, MPI_DOUBLE, op); }
static void red_i32(void *ctx, int32_t *x, size_t n, enum tfm_red_op op) { reduce(ctx, x, n, MPI_INT32_T, op); }

void cpu_comm_bind(struct cpu_comm *c, MPI_Comm comm)
{
    c->comm = comm;
    int rank = 0, size = 1;
    if (comm != MPI_COMM_NULL) {
        MPI_CHECK(MPI_Comm_rank(comm, &rank));
        MPI_CHECK(MPI_Comm_size(comm, &size));
    }
    c->tc = (struct tfm_comm){rank, size, c, red_f32, red_f64, red_i32};
}

void cpu_comm_free_owned(struct cpu_comm *c)
{
    if (c->owned && c->comm != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&c->comm));
    c->comm = MPI_COMM_NULL;
    c->owned = 0;
}

struct tfm_comm *device_cpu_comm_create(MPI_Comm comm)
{
    struct cpu_comm *c = xcalloc(1, sizeof *c);
    cpu_comm_bind(c, comm);
    return &c->tc; /* first member: the struct's address */
}

void device_cpu_comm_free(struct tfm_comm *c) { free(c); }
