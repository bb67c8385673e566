/*
 * The GPU all-reduces of a TP group (include/libra/gpu_comm.h). Host-staged: device ->
 * host buffer, the group's tfm_comm all-reduce, host buffer -> device; the module's
 * copies are synchronous and ordered after the kernels queued before them, so the data
 * read is what those kernels wrote, and the kernels queued after see the sum. NCCL:
 * the module's nccl_allreduce on its stream.
 */
#include "libra/gpu_comm.h"

#include <stdlib.h>
#include <string.h>

#include "libra/gpu_model.h"
#include "libra/errmsg.h"
#include "libra/log.h"

struct staged {
    struct gpu_comm gc; /* first member: the struct's address */
    const struct cuda_api *api;
    const struct tfm_comm *tc;
    void *buf;
    size_t cap; /* bytes */
};

/* x (bytes, device) into the host buffer, grown as needed. */
static void *stage_in(struct staged *s, const void *x, size_t bytes)
{
    if (bytes > s->cap) {
        free(s->buf);
        s->buf = xmalloc(bytes);
        s->cap = bytes;
    }
    GPU_CHECK(s->api, s->api->to_host(s->buf, x, bytes));
    return s->buf;
}

static void staged_f32(void *ctx, float *x, size_t n, enum tfm_red_op op)
{
    struct staged *s = ctx;
    if (n == 0) return;
    s->tc->allreduce_f32(s->tc->ctx, stage_in(s, x, n * sizeof *x), n, op);
    GPU_CHECK(s->api, s->api->to_device(x, s->buf, n * sizeof *x));
}

static void staged_f64(void *ctx, double *x, size_t n, enum tfm_red_op op)
{
    struct staged *s = ctx;
    if (n == 0) return;
    s->tc->allreduce_f64(s->tc->ctx, stage_in(s, x, n * sizeof *x), n, op);
    GPU_CHECK(s->api, s->api->to_device(x, s->buf, n * sizeof *x));
}

static void staged_release(void *ctx)
{
    struct staged *s = ctx;
    free(s->buf);
    free(s);
}

struct gpu_comm *gpu_comm_host_staged(const struct cuda_api *api, const struct tfm_comm *tc)
{
    struct staged *s = xcalloc(1, sizeof *s);
    s->api = api;
    s->tc = tc;
    s->gc = (struct gpu_comm){tc->rank, tc->size, s, staged_f32, staged_f64, 0, staged_release,
                              NULL};
    return &s->gc;
}

/* ---- NCCL ---- */

struct nccl_group {
    struct gpu_comm gc; /* first member */
    const struct cuda_api *api;
    void *comm;
};

static int red_of(enum tfm_red_op op)
{
    return op == TFM_RED_MAX ? CUDA_RED_MAX : op == TFM_RED_MIN ? CUDA_RED_MIN : CUDA_RED_SUM;
}

static void nccl_f32(void *ctx, float *x, size_t n, enum tfm_red_op op)
{
    struct nccl_group *g = ctx;
    if (n) GPU_CHECK(g->api, g->api->nccl_allreduce(g->comm, x, n, 0, red_of(op)));
}

static void nccl_f64(void *ctx, double *x, size_t n, enum tfm_red_op op)
{
    struct nccl_group *g = ctx;
    if (n) GPU_CHECK(g->api, g->api->nccl_allreduce(g->comm, x, n, 1, red_of(op)));
}

static void nccl_release(void *ctx)
{
    struct nccl_group *g = ctx;
    GPU_CHECK(g->api, g->api->nccl_free(g->comm));
    free(g);
}

struct gpu_comm *gpu_comm_nccl(const struct cuda_api *api, const struct tfm_comm *tc, char *err,
                               size_t errlen)
{
    if (!api->nccl_id || !api->nccl_init || !api->nccl_allreduce || !api->nccl_free) {
        errmsg_set(err, errlen, "this CUDA module has no NCCL");
        return NULL;
    }
    int32_t id[CUDA_NCCL_ID_BYTES / 4], bad = 0;
    memset(id, 0, sizeof id);
    if (tc->rank == 0 && api->nccl_id(id, sizeof id)) {
        bad = 1;
        errmsg_set(err, errlen, "NCCL unique id: %s", api->last_error());
    }
    tc->allreduce_i32(tc->ctx, &bad, 1, TFM_RED_MAX); /* every rank learns of a failure */
    if (bad) {
        if (tc->rank != 0) errmsg_set(err, errlen, "NCCL unique id failed on the group's rank 0");
        return NULL;
    }
    /* x + 0 is exact: every rank gets rank 0's bytes */
    tc->allreduce_i32(tc->ctx, id, sizeof id / sizeof id[0], TFM_RED_SUM);
    struct nccl_group *g = xcalloc(1, sizeof *g);
    g->api = api;
    GPU_CHECK(api, api->nccl_init(&g->comm, id, tc->size, tc->rank));
    g->gc = (struct gpu_comm){tc->rank, tc->size, g, nccl_f32, nccl_f64, 1, nccl_release,
                              g->comm};
    return &g->gc;
}

void gpu_comm_free(struct gpu_comm *c)
{
    if (c) c->release(c->ctx);
}
