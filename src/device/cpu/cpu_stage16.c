/*
 * bf16 weight syncs straight to a rollout rank's GPU (device cuda): a rank that only
 * serves rollouts decodes bf16 weights, and the syncs to it carry bf16
 * (src/worker/weight_sync.c). They land here, in land16 -- the staging buffer's layout,
 * 2 bytes a parameter -- and at the instance's next safe point go to the GPU model's
 * bf16 block as they are: half the bytes of a float32 install across PCIe, and neither
 * the widening into the float32 stage nor its copy into the shard's float32 weights on
 * the way (each a pass over the whole shard on one host core).
 *
 * Both buffers are page-locked (the module's host_alloc), so that the install copies at
 * the link's rate rather than through the driver's staging of pageable memory; pageable
 * if the module cannot lock that much (a warning says so).
 *
 * The float32 weights sh.p then lag: held16 keeps the bf16 weights installed last
 * (land16 and held16 swap at the install), and whoever reads sh.p widens them first
 * (cpu_stage16_catch_up, from cpu_live_params and before a trainer takes the shard
 * over) -- the same float32 values the widening on the way produced, read only when
 * something needs them.
 */
#include <stdlib.h>

#include "cpu_internal.h"
#include "libra/gpu_model.h"
#include "libra/log.h"
#include "libra/safetensors.h"

static void widen(float *to, const uint16_t *from, size_t n)
{
    for (size_t k = 0; k < n; k++) to[k] = st_bf16_to_f32(from[k]);
}

/* land16 and held16, page-locked if the module can, else pageable (both alike). */
static void buffers_alloc(struct device *d)
{
    struct cpu_shard *sh = &d->sh;
    size_t bytes = sh->p.n * sizeof *sh->land16;
    void *a = NULL, *b = NULL;
    if (d->gpu->host_alloc(&a, bytes) == 0 && d->gpu->host_alloc(&b, bytes) == 0) {
        sh->land16 = a;
        sh->held16 = b;
        sh->pinned = d->gpu;
        return;
    }
    LOG_W("rank %d: no page-locked host memory for the bf16 weight syncs (2 x %.2f GB: %s); "
          "pageable memory instead, installs copy at the driver's staging rate",
          d->a.rank, bytes / 1e9, d->gpu->last_error());
    if (a) d->gpu->host_free(a);
    sh->land16 = xmalloc(bytes);
    sh->held16 = xmalloc(bytes);
    sh->pinned = NULL;
}

uint16_t *cpu_stage_bf16(struct device *d, const float *at)
{
    struct cpu_shard *sh = &d->sh;
    if (!d->gpu || d->tr || !sh->stage) return NULL; /* a trainer's copy takes float32 */
    if (at < sh->stage || at >= sh->stage + sh->p.n)
        FATAL("rank %d: a bf16 sync's slice outside the staging buffer (a bug)", d->a.rank);
    if (!sh->land16) buffers_alloc(d);
    return sh->land16 + (at - sh->stage);
}

void cpu_stage16_staged(struct device *d) { d->sh.staged16 = 1; }

void cpu_stage16_install(struct device *d, struct gpu_model *m)
{
    struct cpu_shard *sh = &d->sh;
    gpu_model_set_weights_bf16(m, sh->land16);
    uint16_t *t = sh->held16;
    sh->held16 = sh->land16;
    sh->land16 = t;
    sh->staged16 = 0;
    sh->p_lags = 1;
}

void cpu_stage16_take(struct device *d)
{
    struct cpu_shard *sh = &d->sh;
    struct tfm_params *p = cpu_live_layout(d); /* all of it overwritten */
    widen(p->mem, sh->land16, p->n);
    sh->staged16 = 0;
    sh->p_lags = 0;
}

void cpu_stage16_catch_up(struct device *d)
{
    struct cpu_shard *sh = &d->sh;
    if (!sh->p_lags) return;
    widen(sh->p.mem, sh->held16, sh->p.n);
    sh->p_lags = 0;
}

void cpu_stage16_free(struct cpu_shard *sh)
{
    if (sh->pinned) {
        if (sh->pinned->host_free(sh->land16) || sh->pinned->host_free(sh->held16))
            FATAL("CUDA: host_free: %s", sh->pinned->last_error());
    } else {
        free(sh->land16);
        free(sh->held16);
    }
    sh->land16 = sh->held16 = NULL;
    sh->pinned = NULL;
    sh->staged16 = sh->p_lags = 0;
}
