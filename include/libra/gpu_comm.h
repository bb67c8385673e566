/*
 * The collectives of the GPU engine's tensor parallelism: all-reduces (sum, max) of
 * float32 and float64 data in GPU memory over the ranks of a TP group (a rollout instance, a training
 * replica). The engine (gpu_decode.h, gpu_train.h) calls it through this table and
 * does not know how it is carried.
 *
 * The host-staged form (gpu_comm_host_staged) copies the data to the host, all-reduces
 * it over the group's struct tfm_comm (MPI in the device layer), and copies it back:
 * it runs wherever MPI does -- several ranks sharing one GPU included, where NCCL
 * refuses -- at the cost of two PCIe copies per all-reduce. It cannot be recorded in a
 * CUDA graph (graph_safe 0), so an engine with a host-staged group launches its
 * kernels one by one.
 *
 * The NCCL form (gpu_comm_nccl) runs the all-reduces on the module's stream, in order
 * with the kernels and recordable in CUDA graphs (graph_safe 1); it needs a GPU of its
 * own for every rank of the group.
 *
 * Contract: every rank of the group calls an all-reduce with the same n, in the same
 * order, and every rank gets the same bits (the tfm_comm's guarantee), so values the
 * ranks hold replicated (the residual stream) stay identical.
 */
#ifndef LIBRA_GPU_COMM_H
#define LIBRA_GPU_COMM_H

#include <stddef.h>

#include "libra/cuda_api.h"
#include "libra/tfm_tp.h"

struct gpu_comm {
    int rank, size;
    void *ctx;
    /* In place: x (n values, device) becomes the group's elementwise sum / max / min.
     * The kernels queued before it have run when it reads x. Failures end the job
     * (FATAL). */
    void (*allreduce_f32)(void *ctx, float *x, size_t n, enum tfm_red_op op);
    void (*allreduce_f64)(void *ctx, double *x, size_t n, enum tfm_red_op op);
    int graph_safe; /* 1: may be called while a CUDA graph is being recorded */
    void (*release)(void *ctx); /* gpu_comm_free's work */
    void *nccl;     /* the NCCL communicator (the module's nccl_send / nccl_recv take it),
                       NULL for a host-staged group */
};

/* A host-staged group over tc (which must outlive it): api's copies and tc's
 * all-reduce, through a host buffer grown to the largest n seen. */
struct gpu_comm *gpu_comm_host_staged(const struct cuda_api *api, const struct tfm_comm *tc);
/* A NCCL group of tc's ranks (collective over tc: rank 0 makes the unique id, an i32
 * sum all-reduce over tc hands it to the others). NULL + message, on every rank, when
 * the module has no NCCL or no id could be made; a failed NCCL init ends the job. */
struct gpu_comm *gpu_comm_nccl(const struct cuda_api *api, const struct tfm_comm *tc, char *err,
                               size_t errlen);
void gpu_comm_free(struct gpu_comm *c); /* NULL is a no-op */

#endif
