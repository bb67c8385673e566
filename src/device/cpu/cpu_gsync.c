/*
 * Weight syncs from GPU to GPU (device cuda; device_ops.gsync_*, include/libra/device.h).
 *
 * A bf16 sync to the ranks that only serve rollouts otherwise goes sender GPU -> page-
 * locked host buffer -> MPI -> receiver's page-locked buffer -> receiver GPU at the
 * safe point (cpu_stage16.c): two PCIe crossings and the MPI transport in between.
 * Where every member of the epoch's sync group drives a GPU of its own, NCCL moves the
 * runs from the sender's GPU (the training engine's bf16 copy of its weights, which
 * the decoders' rounding makes bit for bit what they decode) into the receiver's GPU
 * model directly: over NVLink within a node, over the network's GPU path between
 * nodes.
 *
 * Runs. The worker lists them (weight_sync.c, gpu_runs): blocks of rows x cols values
 * in each side's layout, numbered into groups in one order for the whole sync. A run
 * strided on this side (a column slice of the block it comes from or goes to: the two
 * sides cut the tensor differently) is packed into a GPU buffer before its send, or
 * unpacked from one after its receive (the module's copy2d); it is a group of its own,
 * so one buffer of the largest such run serves them all in turn, on the stream.
 *
 * Relays. The receivers of one place form a chain (src/worker/sync_relay.c): a member
 * other than the head receives its runs from the one before it, and a member with a
 * next passes each group on from the same GPU memory (the model's weights; a strided
 * run from the pack buffer, before its unpack), a contiguous group in one NCCL group
 * with its receiving of the next, so both directions of its links work at once (a
 * member's k-th step pairs with the previous member's k+1-th and the next one's
 * k-1-th: a wavefront down the chain, no cycle). A place nested in one of a
 * smaller TP degree is fed by that place's last member: feed runs, which it sends from
 * the weights it received in earlier groups (packed first where strided on its side).
 * So the sender's GPU sends its part of the model once, whatever the rollout layout.
 *
 * When. A sender issues its sends as soon as the sync starts, on the module's side
 * stream, and lends the trainer's bf16 copy to them: the next step's forward and
 * backward run meanwhile on the kernels' stream, and its update waits for the sends
 * before it writes that copy (gpu_trainer_lend_weights16), so the weights they read
 * are the step's. A receiver keeps its runs until its instance's next safe point
 * (every rank of the instance together, cpu_tp_model.c's WEIGHTS), and issues them
 * there -- so the host-side order of every rank's NCCL calls is what it was when
 * they went straight into the model, which the deadlock argument above rests on.
 *  - With a sync buffer (rollout.sync_buffer: a second bf16 copy of the shard, made
 *    with the instance's model before the KV pool; cpu_syncbuf.c), on the module's
 *    side stream into the buffer, a mark after them; decoding goes on on the kernels'
 *    stream. At each later safe point every rank polls its mark and the instance
 *    agrees (MIN); at the first at which all have them, each joins the side stream
 *    and copies the buffer into the model's weights: decoding waits for a copy
 *    within HBM, not the transfer. Only a sync that covers the whole shard goes
 *    there (the copy takes all of it).
 *  - Without one, straight into the GPU model's weights on the kernels' stream: the
 *    next decode step's kernels wait for them, on a relay also for passing the runs
 *    on, and as a NCCL send waits for its receive, until the later members of the
 *    chain have reached their safe points (one decode step at most each, all at once).
 * Either way the KV caches are dropped, as any swap does. The sender's side stream
 * waits until the receivers get to their safe points (one decode step at most), and
 * SYNC_DONE leaves a receiver only once the runs are in its model, so the controller
 * never starts the next sync before every receive of this one is done.
 *
 * The host copies then lag the GPU (sh.p_lags 2): held16 is refreshed from the GPU
 * model when something reads the shard's weights (cpu_stage16_catch_up) and before
 * the model is freed (cpu_tp_model.c).
 *
 * Mode, decided by the epoch for all members together: NCCL when the cached GPU group
 * of the sync's members has a NCCL communicator (every member a GPU of its own, NCCL
 * in the module, LIBRA_NCCL not 0); else off (the MPI path) -- except under
 * LIBRA_TEST_SYNC_GPU=host, where the same runs are carried host-staged over MPI
 * (device to host, MPI, host to device, each side blocking until its runs are done),
 * which lets tests on one GPU, or on the module's host stand-in, run every step of
 * this path but the NCCL calls. A rank back from a loan has given its trainer up
 * (cpu_train_retire) before this is decided, so its weights are the shard's, which
 * the GPU path keeps up to date.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "libra/gpu_comm.h"
#include "libra/gpu_model.h"
#include "libra/gpu_train.h"
#include "libra/log.h"

#define TAG_GSYNC 302 /* on the sync communicator (host-staged runs) */

void cpu_gsync_epoch(struct device *d, const struct device_epoch *e)
{
    struct cpu_gsync *g = &d->gs;
    g->mode = CPU_GSYNC_OFF;
    g->nccl = NULL;
    /* a colocated plan's syncs move nothing between ranks: no group to make */
    if (!d->gpu || e->sync == MPI_COMM_NULL || e->plan->colocated) return;
    int size;
    MPI_CHECK(MPI_Comm_size(e->sync, &size));
    if (size > CPU_GPU_GROUP_MAX) return; /* the same on every member */
    cpu_comm_bind(&g->comm, e->sync);
    if (e->role == ROLE_ROLLOUT && d->tr)
        FATAL("rank %d serves rollouts with a trainer of its own in a plan that does not "
              "colocate (a bug)", d->a.rank);
    struct gpu_comm *gc = cpu_gpu_comm_sync(d, &g->comm);
    const char *env = getenv("LIBRA_TEST_SYNC_GPU");
    if (gc->nccl && d->gpu->nccl_send && d->gpu->nccl_recv && d->gpu->nccl_group) {
        g->mode = CPU_GSYNC_NCCL;
        g->nccl = gc->nccl;
    } else if (env && strcmp(env, "host") == 0) {
        g->mode = CPU_GSYNC_HOST;
    }
    if (g->mode != CPU_GSYNC_OFF && g->comm.tc.rank == 0)
        LOG_I("epoch %d: bf16 weight syncs GPU to GPU (%s)", e->plan->epoch,
              g->mode == CPU_GSYNC_NCCL ? "NCCL" : "host-staged over MPI: LIBRA_TEST_SYNC_GPU=host");
}

int cpu_gsync_on(const struct device *d) { return d->gs.mode != CPU_GSYNC_OFF; }

int cpu_gsync_landed(const struct device *d) { return d->gs.landed; }

static size_t run_n(const struct dev_gmsg *m) { return m->rows * m->cols; }

/* Runs m[0 .. n) between their contiguous device buffers dev[k] and their peers, in
 * one direction. */
struct leg {
    const struct dev_gmsg *m;
    int n;
    uint16_t *const *dev;
};

static const struct leg no_leg = {NULL, 0, NULL};

/* Host-staged runs (tests): the sends of `out` and the receives of `in`, blocking
 * until all of them are done. */
static void host_staged(struct device *d, struct leg out, struct leg in)
{
    const struct cuda_api *api = d->gpu;
    size_t sent = 0, total;
    int n = out.n + in.n;
    for (int k = 0; k < out.n; k++) sent += run_n(&out.m[k]);
    total = sent;
    for (int k = 0; k < in.n; k++) total += run_n(&in.m[k]);
    uint16_t *h = xmalloc((total ? total : 1) * sizeof *h);
    MPI_Request *req = xmalloc((size_t)(n ? n : 1) * sizeof *req);
    size_t at = 0;
    for (int k = 0; k < n; k++) {
        int send = k < out.n;
        const struct dev_gmsg *m = send ? &out.m[k] : &in.m[k - out.n];
        size_t len = run_n(m);
        if (len > INT_MAX) FATAL("weight sync: a run of %zu values exceeds one MPI count", len);
        if (send) {
            if (api->to_host(h + at, out.dev[k], len * sizeof *h))
                FATAL("CUDA: a weight sync's run to the host: %s", api->last_error());
            MPI_CHECK(MPI_Isend(h + at, (int)len, MPI_UINT16_T, m->peer, TAG_GSYNC,
                                d->gs.comm.comm, &req[k]));
        } else {
            MPI_CHECK(MPI_Irecv(h + at, (int)len, MPI_UINT16_T, m->peer, TAG_GSYNC,
                                d->gs.comm.comm, &req[k]));
        }
        at += len;
    }
    MPI_CHECK(MPI_Waitall(n, req, MPI_STATUSES_IGNORE));
    at = sent; /* the receives, after the sends */
    for (int k = 0; k < in.n; k++) {
        if (api->to_device(in.dev[k], h + at, run_n(&in.m[k]) * sizeof *h))
            FATAL("CUDA: a weight sync's run to the GPU: %s", api->last_error());
        at += run_n(&in.m[k]);
    }
    free(req);
    free(h);
}

/* One step: the sends of `out` and the receives of `in` (either may be empty) as one
 * NCCL group -- a relay's passing on of one group with its receiving of the next, so
 * both directions of its links work at once -- or host-staged. */
static void carry(struct device *d, struct leg out, struct leg in)
{
    const struct cuda_api *api = d->gpu;
    if (out.n + in.n == 0) return;
    if (d->gs.mode == CPU_GSYNC_HOST) {
        host_staged(d, out, in);
        return;
    }
    if (api->nccl_group(1)) FATAL("NCCL: a weight sync's group: %s", api->last_error());
    for (int k = 0; k < out.n; k++)
        if (api->nccl_send(d->gs.nccl, out.dev[k], run_n(&out.m[k]) * sizeof(uint16_t),
                           out.m[k].peer))
            FATAL("NCCL: a weight sync's send: %s", api->last_error());
    for (int k = 0; k < in.n; k++)
        if (api->nccl_recv(d->gs.nccl, in.dev[k], run_n(&in.m[k]) * sizeof(uint16_t),
                           in.m[k].peer))
            FATAL("NCCL: a weight sync's receive: %s", api->last_error());
    if (api->nccl_group(0)) FATAL("NCCL: a weight sync's group: %s", api->last_error());
}

/* The GPU buffer a strided run is packed into or unpacked from, grown (before any run
 * is issued: freeing one in use would wait for the peers) to the largest of m. */
static uint16_t *strided_buffer(struct device *d, const struct dev_gmsg *m, int n)
{
    struct cpu_gsync *g = &d->gs;
    size_t most = 0;
    for (int k = 0; k < n; k++)
        if (dev_gmsg_strided(&m[k]) && run_n(&m[k]) > most) most = run_n(&m[k]);
    if (most > g->cap_pack) {
        if (d->gpu->free(g->pack)) FATAL("CUDA: free: %s", d->gpu->last_error());
        g->pack = NULL;
        g->cap_pack = 0;
        if (d->gpu->alloc((void **)&g->pack, most * sizeof *g->pack))
            FATAL("rank %d: no GPU memory for a weight sync's strided runs (%.1f MB): %s",
                  d->a.rank, most * sizeof *g->pack / 1e6, d->gpu->last_error());
        g->cap_pack = most;
    }
    return g->pack;
}

/* A strided run between its place in a bf16 block (at, rows `pitch` apart) and the
 * contiguous buffer buf. */
static void strided_copy(struct device *d, const struct dev_gmsg *m, uint16_t *at, uint16_t *buf,
                         int pack)
{
    size_t row = m->cols * sizeof *buf, pitch = m->pitch * sizeof *buf;
    int rc = pack ? d->gpu->copy2d(buf, row, at, pitch, row, m->rows)
                  : d->gpu->copy2d(at, pitch, buf, row, row, m->rows);
    if (rc) FATAL("CUDA: a weight sync's strided run: %s", d->gpu->last_error());
}

/* A relay's pass-ons: runs received into their device buffers, listed again with the
 * next receiver of their chain as peer (it lists the same runs, in the same groups);
 * fwd[sent .. n) are still to go. */
struct pass_ons {
    struct dev_gmsg *fwd;
    uint16_t **from;
    int n, sent;
};

/* Group m[0 .. n)'s runs that go on (next >= 0), from dev[k], queued. */
static void queue_pass_ons(struct pass_ons *po, const struct dev_gmsg *m, int n,
                           uint16_t *const *dev)
{
    for (int k = 0; k < n; k++)
        if (m[k].next >= 0) {
            po->fwd[po->n] = m[k];
            po->fwd[po->n].peer = m[k].next;
            po->from[po->n++] = dev[k];
        }
}

/* The queued pass-ons, as a leg (taken: sent by the step that carries it). */
static struct leg take_pass_ons(struct pass_ons *po)
{
    struct leg l = {po->fwd + po->sent, po->n - po->sent, po->from + po->sent};
    po->sent = po->n;
    return l;
}

/* Runs m[0 .. n), whose first values are at[k] in a bf16 block on the GPU, group by
 * group, on the module's stream: a strided run (a group of its own) packed into the
 * pack buffer before its send or unpacked from it after its receive, its pass-on (a
 * relay's) in between, alone; a group of contiguous runs received together with the
 * previous group's pass-ons, so a relay receives one group while it passes the last
 * on. A sender's runs are all sends (sender 1); a receiver's are receives, or feeds,
 * which it sends, a group at a time. The pack buffer is reused only once its run is
 * done (stream order). */
static void by_groups(struct device *d, const struct dev_gmsg *m, int n, uint16_t **at, int sender)
{
    uint16_t *buf = strided_buffer(d, m, n);
    uint16_t **dev = xmalloc((size_t)(n ? n : 1) * sizeof *dev);
    struct pass_ons po = {xmalloc((size_t)(n ? n : 1) * sizeof *po.fwd),
                          xmalloc((size_t)(n ? n : 1) * sizeof *po.from), 0, 0};
    for (int k0 = 0, k1; k0 < n; k0 = k1) {
        for (k1 = k0 + 1; k1 < n && m[k1].group == m[k0].group;) k1++;
        int send = sender || m[k0].feed, strided = 0;
        for (int k = k0; k < k1; k++) {
            if (m[k].feed != m[k0].feed)
                FATAL("rank %d: a weight sync's group mixes feeds and receives (a bug)",
                      d->a.rank);
            strided |= dev_gmsg_strided(&m[k]);
            dev[k] = dev_gmsg_strided(&m[k]) ? buf : at[k];
        }
        struct leg group = {m + k0, k1 - k0, dev + k0};
        if (send) {
            carry(d, take_pass_ons(&po), no_leg);
            for (int k = k0; k < k1; k++)
                if (dev_gmsg_strided(&m[k])) strided_copy(d, &m[k], at[k], buf, 1);
            carry(d, group, no_leg);
        } else if (strided) {
            carry(d, take_pass_ons(&po), no_leg);
            carry(d, no_leg, group);
            queue_pass_ons(&po, m + k0, k1 - k0, dev + k0);
            carry(d, take_pass_ons(&po), no_leg); /* before the unpack reuses buf */
            for (int k = k0; k < k1; k++)
                if (dev_gmsg_strided(&m[k])) strided_copy(d, &m[k], at[k], buf, 0);
        } else {
            carry(d, take_pass_ons(&po), group);
            queue_pass_ons(&po, m + k0, k1 - k0, dev + k0);
        }
    }
    carry(d, take_pass_ons(&po), no_leg);
    free(po.fwd);
    free(po.from);
    free(dev);
}

/* Whether run m lies within n values from base. */
static int inside(const struct dev_gmsg *m, const float *base, size_t n)
{
    if (m->rows == 0) return 1;
    if (m->at < base) return 0;
    size_t first = (size_t)(m->at - base), span = (m->rows - 1) * m->pitch + m->cols;
    return first <= n && span <= n - first;
}

void cpu_gsync_send(struct device *d, const struct dev_gmsg *m, int n)
{
    if (d->gs.mode == CPU_GSYNC_OFF) FATAL("rank %d: a GPU weight sync in an epoch without one (a bug)", d->a.rank);
    /* the runs' offsets in the live weights' layout, taken before the trainer (if it is
     * made now) takes those weights over */
    const struct tfm_params *live = cpu_live_layout(d);
    size_t *off = xmalloc((size_t)(n ? n : 1) * sizeof *off);
    for (int k = 0; k < n; k++) {
        if (!inside(&m[k], live->mem, live->n))
            FATAL("rank %d: a weight sync's run outside its weights (a bug)", d->a.rank);
        off[k] = (size_t)(m[k].at - live->mem);
    }
    cpu_train_prepare(d); /* the GPU trainer, whose bf16 copy the runs come from */
    uint16_t *w = (uint16_t *)gpu_trainer_weights16(d->gtr); /* only read */
    uint16_t **at = xmalloc((size_t)(n ? n : 1) * sizeof *at);
    for (int k = 0; k < n; k++) at[k] = w + off[k];
    free(off);
    /* on the side stream, so the next step's forward and backward run meanwhile; its
     * update waits for them before it writes the copy they read. Inline
     * (train.sync_side_stream 0), the next step's kernels queue behind them. */
    int beside = d->a.cfg->train.sync_side_stream;
    if (beside) gpu_side_begin(d->gpu);
    by_groups(d, m, n, at, 1);
    if (beside) {
        gpu_side_end(d->gpu);
        gpu_trainer_lend_weights16(d->gtr);
    }
    d->last_send = beside ? DEV_SEND_BESIDE : DEV_SEND_INLINE;
    free(at);
}

void cpu_gsync_recv(struct device *d, const struct dev_gmsg *m, int n, int version)
{
    struct cpu_gsync *g = &d->gs;
    struct cpu_shard *sh = &d->sh;
    if (g->mode == CPU_GSYNC_OFF || !d->inst || d->tr)
        FATAL("rank %d: a GPU weight sync to a rank without an instance of its own or in an "
              "epoch without GPU syncs (a bug)", d->a.rank);
    if (n > g->cap_run) {
        g->cap_run = n;
        g->run = xrealloc(g->run, (size_t)n * sizeof *g->run);
    }
    size_t received = 0;
    for (int k = 0; k < n; k++) {
        if (!inside(&m[k], sh->stage, sh->p.n))
            FATAL("rank %d: a weight sync's run outside the staging buffer (a bug)", d->a.rank);
        if (!m[k].feed) received += run_n(&m[k]);
    }
    memcpy(g->run, m, (size_t)n * sizeof *m);
    g->n_run = n;
    g->pending = 1;
    g->landed = 0;
    /* through the buffer only when it becomes the whole shard: the runs are disjoint,
     * so they cover it when their values add up to it */
    g->buffered = cpu_syncbuf_fits(d) && received == sh->p.n;
    d->staged_version = version; /* swapped in by the instance (every rank together) */
    sh->staged16 = 0;
}

/* Where run k's first value goes in a bf16 block of the shard's layout at base. */
static uint16_t **run_places(struct device *d, uint16_t *base)
{
    struct cpu_gsync *g = &d->gs;
    uint16_t **at = xmalloc((size_t)(g->n_run ? g->n_run : 1) * sizeof *at);
    for (int k = 0; k < g->n_run; k++) at[k] = base + (g->run[k].at - d->sh.stage);
    return at;
}

int cpu_gsync_arrived(struct device *d)
{
    struct cpu_gsync *g = &d->gs;
    if (!g->pending || !g->buffered) return 1;
    if (!d->sb.issued) {
        uint16_t **at = run_places(d, d->sb.w);
        cpu_syncbuf_begin(d);
        by_groups(d, g->run, g->n_run, at, 0);
        cpu_syncbuf_end(d);
        free(at);
    }
    return cpu_syncbuf_arrived(d);
}

int cpu_gsync_post(struct device *d, struct gpu_model *gm)
{
    struct cpu_gsync *g = &d->gs;
    if (!g->pending) return 0;
    if (g->buffered) { /* every rank of the instance has seen its runs arrive */
        cpu_syncbuf_take(d, gm);
    } else {
        uint16_t **at = run_places(d, gm->w);
        by_groups(d, g->run, g->n_run, at, 0);
        free(at);
        gpu_model_refresh_biases(gm); /* qwen2's q/k/v biases: their float32 copies */
        d->last_install = DEV_INSTALL_STRAIGHT;
    }
    g->pending = 0;
    g->landed = 1;
    d->sh.p_lags = 2;
    return 1;
}

void cpu_gsync_free(struct device *d)
{
    if (d->gs.pack && d->gpu->free(d->gs.pack)) FATAL("CUDA: free: %s", d->gpu->last_error());
    d->gs.pack = NULL;
    d->gs.cap_pack = 0;
    free(d->gs.run);
    d->gs.run = NULL;
    d->gs.n_run = d->gs.cap_run = 0;
}
