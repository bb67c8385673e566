/*
 * bf16 weight syncs straight to a rollout rank's GPU (device cuda): a rank that only
 * serves rollouts decodes bf16 weights, and the syncs to it carry bf16
 * (src/worker/weight_sync.c). They land here, in land16 -- the staging buffer's layout,
 * 2 bytes a parameter -- and at the instance's next safe point go to the GPU model's
 * bf16 block as they are -- or, with a sync buffer (cpu_syncbuf.c), start there on
 * their way into it while decoding goes on, and go into the model with one copy on
 * the GPU at a later safe point: half the bytes of a float32 install across PCIe, and
 * neither the widening into the float32 stage nor its copy into the shard's float32
 * weights on the way (each a pass over the whole shard on one host core).
 *
 * Both buffers are page-locked (the module's host_alloc), so that the install copies at
 * the link's rate rather than through the driver's staging of pageable memory; pageable
 * if the module cannot lock that much (a warning says so). So is a sender's bf16 copy
 * of its slices (send_bf16), which the GPU fills, kept from one sync to the next
 * instead of allocated, touched and freed every time.
 *
 * The float32 weights sh.p then lag: held16 keeps the bf16 weights installed last
 * (land16 and held16 swap at the install), and whoever reads sh.p widens them first
 * (cpu_stage16_catch_up, from cpu_live_params and before a trainer takes the shard
 * over) -- the same float32 values the widening on the way produced, read only when
 * something needs them.
 *
 * At start-up such a rank reads its shard of a Hugging Face checkpoint the same way
 * (cpu_stage16_read_hf): its slices as bf16 into held16 -- a bf16 checkpoint's bytes as
 * they are, 2 bytes a parameter of host memory -- and its instance's GPU model is made
 * from them (cpu_stage16_held); sh.p lags from the start and is not even touched
 * unless something reads it.
 */
#include <stdlib.h>

#include "cpu_internal.h"
#include "libra/gpu_model.h"
#include "libra/hf_model.h"
#include "libra/log.h"
#include "libra/safetensors.h"

/* k buffers of bytes each, page-locked if the module can lock them all (returns the
 * module), else pageable (NULL, with a warning naming what for). */
static const struct cuda_api *buffers_alloc(struct device *d, void **b, int k, size_t bytes,
                                            const char *what)
{
    int got = 0;
    while (got < k && d->gpu->host_alloc(&b[got], bytes) == 0) got++;
    if (got == k) return d->gpu;
    LOG_W("rank %d: no page-locked host memory for %s (%d x %.2f GB: %s); pageable memory "
          "instead, its copies run at the driver's staging rate", d->a.rank, what, k,
          bytes / 1e9, d->gpu->last_error());
    while (got > 0) d->gpu->host_free(b[--got]);
    for (int i = 0; i < k; i++) b[i] = xmalloc(bytes);
    return NULL;
}

static void buffers_free(const struct cuda_api *pinned, void **b, int k)
{
    for (int i = 0; i < k; i++) {
        if (!pinned)
            free(b[i]);
        else if (pinned->host_free(b[i]))
            FATAL("CUDA: host_free: %s", pinned->last_error());
        b[i] = NULL;
    }
}

/* land16 and held16, if the shard has none yet. */
static void pair_alloc(struct device *d)
{
    struct cpu_shard *sh = &d->sh;
    if (sh->land16) return;
    void *b[2];
    sh->pinned = buffers_alloc(d, b, 2, sh->p.n * sizeof *sh->land16,
                               "the shard's bf16 weights (landing and installed)");
    sh->land16 = b[0];
    sh->held16 = b[1];
}

uint16_t *cpu_stage_bf16(struct device *d, const float *at)
{
    struct cpu_shard *sh = &d->sh;
    if (!d->gpu || d->tr || !sh->stage) return NULL; /* a trainer's copy takes float32 */
    if (at < sh->stage || at >= sh->stage + sh->p.n)
        FATAL("rank %d: a bf16 sync's slice outside the staging buffer (a bug)", d->a.rank);
    pair_alloc(d);
    return sh->land16 + (at - sh->stage);
}

int cpu_stage16_read_hf(struct device *d, const char *dir)
{
    struct cpu_shard *sh = &d->sh;
    const struct device_epoch *e = &d->ep;
    if (!d->gpu || d->tr || !e->plan || e->role != ROLE_ROLLOUT || e->plan->colocated) return 0;
    pair_alloc(d);
    char err[1024]; /* only this shard's bytes are read */
    if (hf_load_slices_bf16(dir, &sh->tp, &sh->p, sh->held16, err, sizeof err))
        FATAL("model.checkpoint: %s", err);
    sh->p_lags = 1;
    LOG_I("rank %d: shard (TP %d, %d) read as bf16 for the GPU (%.2f GB)", d->a.rank, sh->t,
          sh->i, sh->p.n * sizeof *sh->held16 / 1e9);
    return 1;
}

const uint16_t *cpu_stage16_held(const struct device *d)
{
    return !d->tr && d->sh.p_lags == 1 ? d->sh.held16 : NULL;
}

void cpu_stage16_staged(struct device *d) { d->sh.staged16 = 1; }

int cpu_stage16_arrived(struct device *d)
{
    if (!d->sb.issued) {
        if (!cpu_syncbuf_fits(d)) return 1; /* the install copies them */
        cpu_syncbuf_from_host(d, d->sh.land16);
    }
    return cpu_syncbuf_arrived(d);
}

/* train.verify_syncs: the GPU model holds exactly the weights held16 says it does
 * (the sync's own check compared land16 with what the senders sent; this one covers
 * the way to the GPU -- the sync buffer's, or the copy's). */
static void verify_install(struct device *d, const struct gpu_model *m)
{
    struct cpu_shard *sh = &d->sh;
    uint16_t *got = xmalloc((sh->p.n ? sh->p.n : 1) * sizeof *got);
    if (d->gpu->to_host(got, m->w, sh->p.n * sizeof *got))
        FATAL("CUDA: the GPU model's weights to the host: %s", d->gpu->last_error());
    size_t bad = 0;
    for (size_t k = 0; k < sh->p.n; k++) bad += got[k] != sh->held16[k];
    free(got);
    if (bad)
        FATAL("train.verify_syncs: rank %d's GPU model differs from the weights of version %d "
              "it installed in %zu of %zu values (%s)", d->a.rank, d->version, bad, sh->p.n,
              d->last_install == DEV_INSTALL_BUFFERED ? "through the sync buffer" : "copied");
}

void cpu_stage16_install(struct device *d, struct gpu_model *m)
{
    struct cpu_shard *sh = &d->sh;
    if (d->sb.issued) {
        cpu_syncbuf_take(d, m);
    } else {
        gpu_model_set_weights_bf16(m, sh->land16);
        d->last_install = DEV_INSTALL_STRAIGHT;
    }
    uint16_t *t = sh->held16;
    sh->held16 = sh->land16;
    sh->land16 = t;
    sh->staged16 = 0;
    sh->p_lags = 1;
    if (d->a.cfg->train.verify_syncs) verify_install(d, m);
}

void cpu_stage16_take(struct device *d)
{
    struct cpu_shard *sh = &d->sh;
    struct tfm_params *p = cpu_live_layout(d); /* all of it overwritten */
    st_bf16_to_f32_n(sh->land16, p->mem, p->n);
    sh->staged16 = 0;
    sh->p_lags = 0;
}

void cpu_stage16_fetch(struct device *d)
{
    struct cpu_shard *sh = &d->sh;
    if (sh->p_lags != 2) return;
    if (!d->gs.gm)
        FATAL("rank %d: the shard's weights are on a GPU model that is gone (a bug)", d->a.rank);
    pair_alloc(d);
    if (d->gpu->to_host(sh->held16, d->gs.gm->w, sh->p.n * sizeof *sh->held16))
        FATAL("CUDA: the GPU model's weights to the host: %s", d->gpu->last_error());
    sh->p_lags = 1;
}

void cpu_stage16_catch_up(struct device *d)
{
    struct cpu_shard *sh = &d->sh;
    cpu_stage16_fetch(d); /* a GPU-to-GPU sync's weights are on the GPU alone */
    if (!sh->p_lags) return;
    st_bf16_to_f32_n(sh->held16, sh->p.mem, sh->p.n);
    sh->p_lags = 0;
}

void cpu_stage16_free(struct cpu_shard *sh)
{
    if (sh->land16) {
        void *b[2] = {sh->land16, sh->held16};
        buffers_free(sh->pinned, b, 2);
    }
    sh->land16 = sh->held16 = NULL;
    sh->pinned = NULL;
    sh->staged16 = sh->p_lags = 0;
}

uint16_t *cpu_send_bf16(struct device *d, size_t n)
{
    if (!d->gpu) return NULL;
    if (n > d->n_send16) {
        cpu_send16_free(d);
        void *b;
        d->send16_pinned = buffers_alloc(d, &b, 1, n * sizeof *d->send16,
                                         "a weight sync sender's bf16 copy");
        d->send16 = b;
        d->n_send16 = n;
    }
    return d->send16;
}

void cpu_send16_free(struct device *d)
{
    if (d->send16) {
        void *b = d->send16;
        buffers_free(d->send16_pinned, &b, 1);
    }
    d->send16 = NULL;
    d->n_send16 = 0;
    d->send16_pinned = NULL;
}
