/*
 * NCCL for the GPU engine's TP groups (include/libra/cuda_api.h, nccl_*): a group's
 * communicator from a unique id the caller distributes, and in-place all-reduces on
 * the module's stream, so they run in order with the kernels around them and a CUDA
 * graph being recorded holds them. Weight syncs' sends and receives (byte buffers,
 * grouped) run on the same stream. A NCCL failure returns -1 with ncclGetErrorString
 * and ncclGetLastError's detail.
 */
#include "cuda_internal.h"

#include <nccl.h>
#include <stdio.h>
#include <string.h>

#include "libra/cuda_api.h"

static int nccl_fail(const char *what, ncclResult_t r, const char *file, int line)
{
    char msg[400];
    const char *detail = ncclGetLastError(NULL);
    snprintf(msg, sizeof msg, "%s: %s%s%s", what, ncclGetErrorString(r),
             detail && *detail ? ": " : "", detail ? detail : "");
    return cu_fail(msg, cudaSuccess, file, line);
}

#define NCCL_CHECK(call)                                                                     \
    do {                                                                                     \
        ncclResult_t nc_r_ = (call);                                                         \
        if (nc_r_ != ncclSuccess) return nccl_fail(#call, nc_r_, __FILE__, __LINE__);        \
    } while (0)

extern "C" int cu_nccl_id(void *id, size_t cap)
{
    if (cap < sizeof(ncclUniqueId))
        return cu_fail("nccl_id: the buffer is smaller than a ncclUniqueId", cudaSuccess,
                       __FILE__, __LINE__);
    ncclUniqueId u;
    NCCL_CHECK(ncclGetUniqueId(&u));
    memcpy(id, &u, sizeof u);
    return 0;
}

extern "C" int cu_nccl_init(void **comm, const void *id, int nranks, int rank)
{
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclComm_t c;
    NCCL_CHECK(ncclCommInitRank(&c, nranks, u, rank));
    *comm = c;
    return 0;
}

extern "C" int cu_nccl_allreduce(void *comm, void *x, size_t n, int f64, int op)
{
    ncclRedOp_t o = op == CUDA_RED_MAX ? ncclMax : op == CUDA_RED_MIN ? ncclMin : ncclSum;
    NCCL_CHECK(ncclAllReduce(x, x, n, f64 ? ncclFloat64 : ncclFloat32, o, (ncclComm_t)comm,
                             cu_stream()));
    return 0;
}

extern "C" int cu_nccl_free(void *comm)
{
    if (comm) NCCL_CHECK(ncclCommDestroy((ncclComm_t)comm));
    return 0;
}

extern "C" int cu_nccl_send(void *comm, const void *buf, size_t bytes, int peer)
{
    NCCL_CHECK(ncclSend(buf, bytes, ncclUint8, peer, (ncclComm_t)comm, cu_stream()));
    return 0;
}

extern "C" int cu_nccl_recv(void *comm, void *buf, size_t bytes, int peer)
{
    NCCL_CHECK(ncclRecv(buf, bytes, ncclUint8, peer, (ncclComm_t)comm, cu_stream()));
    return 0;
}

extern "C" int cu_nccl_group(int begin)
{
    if (begin)
        NCCL_CHECK(ncclGroupStart());
    else
        NCCL_CHECK(ncclGroupEnd());
    return 0;
}
