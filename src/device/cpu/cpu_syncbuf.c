/*
 * The sync buffer (device cuda, a rank that only serves rollouts; rollout.sync_buffer):
 * a second bf16 copy of the shard on the GPU, in the model's layout, into which a
 * weight sync's values travel on the module's side stream while the instance decodes
 * on the kernels' stream -- a GPU-to-GPU sync's runs (cpu_gsync.c) or a bf16 sync's
 * page-locked landing buffer (cpu_stage16.c). Both are issued at a safe point; the
 * safe points after it poll the side stream's mark, and at the first at which every
 * rank of the instance has its values (the MIN of cpu_tp_model.c's WEIGHTS) each
 * copies the buffer into its model within HBM. Decoding waits for that copy only,
 * not for the transfer: a network's or PCIe's time for the shard.
 *
 * It costs one shard of GPU memory, taken with the instance's GPU model before the
 * KV pool sizes itself from what is free; without it (rollout.sync_buffer 0, or no
 * memory for it: a warning) syncs go into the model at the safe point as before.
 * A sync buffer is only written while its content is not wanted: a new sync that
 * supersedes staged weights, a model freed, a trainer made on the rank first wait for
 * what is on its way and forget it (cpu_syncbuf_drop).
 */
#include "cpu_internal.h"
#include "libra/gpu_model.h"
#include "libra/log.h"

void cpu_syncbuf_make(struct device *d)
{
    struct cpu_syncbuf *b = &d->sb;
    size_t n = d->sh.p.n;
    if (!d->gpu || d->tr || !d->a.cfg->rollout.sync_buffer) return;
    cpu_syncbuf_free(d);
    if (d->gpu->alloc((void **)&b->w, n * sizeof *b->w)) {
        LOG_W("rank %d: no GPU memory for the sync buffer (%.2f GB): weight syncs go into "
              "the model at a safe point, decoding waiting for them: %s", d->a.rank,
              n * sizeof *b->w / 1e9, d->gpu->last_error());
        b->w = NULL;
        return;
    }
    b->n = n;
    LOG_D("rank %d: a sync buffer of %.2f GB on the GPU", d->a.rank, n * sizeof *b->w / 1e9);
}

void cpu_syncbuf_free(struct device *d)
{
    struct cpu_syncbuf *b = &d->sb;
    cpu_syncbuf_drop(d);
    if (b->w && d->gpu->free(b->w)) FATAL("CUDA: free: %s", d->gpu->last_error());
    b->w = NULL;
    b->n = 0;
}

int cpu_syncbuf_fits(const struct device *d)
{
    return d->sb.w && d->sb.n == d->sh.p.n && !d->sb.issued;
}

void cpu_syncbuf_begin(struct device *d) { gpu_side_begin(d->gpu); }

void cpu_syncbuf_end(struct device *d)
{
    gpu_side_end(d->gpu);
    d->sb.issued = 1;
}

void cpu_syncbuf_from_host(struct device *d, const uint16_t *w16)
{
    cpu_syncbuf_begin(d);
    if (d->gpu->to_device_async(d->sb.w, w16, d->sb.n * sizeof *w16))
        FATAL("CUDA: weights into the sync buffer: %s", d->gpu->last_error());
    cpu_syncbuf_end(d);
}

int cpu_syncbuf_arrived(struct device *d)
{
    if (!d->sb.issued) FATAL("rank %d: the sync buffer polled with nothing on its way (a bug)",
                             d->a.rank);
    int done = d->gpu->side_done();
    if (done < 0) FATAL("CUDA: the sync buffer's stream: %s", d->gpu->last_error());
    return done;
}

void cpu_syncbuf_take(struct device *d, struct gpu_model *gm)
{
    struct cpu_syncbuf *b = &d->sb;
    const struct cuda_api *api = d->gpu;
    if (!b->issued || b->n != gm->at.n)
        FATAL("rank %d: the sync buffer taken in with nothing in it (a bug)", d->a.rank);
    if (api->side_join() || api->copy(gm->w, b->w, b->n * sizeof *b->w))
        FATAL("CUDA: the sync buffer into the model: %s", api->last_error());
    gpu_model_refresh_biases(gm); /* qwen2's q/k/v biases: their float32 copies */
    b->issued = 0;
    d->last_install = DEV_INSTALL_BUFFERED;
}

void cpu_syncbuf_drop(struct device *d)
{
    if (!d->sb.issued) return;
    gpu_side_wait(d->gpu);
    d->sb.issued = 0;
}
