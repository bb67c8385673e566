/*
 * Weight syncs, shard-matched: each rollout rank receives exactly the slices of the
 * model its place needs (its instance's TP degree and its index in it), from the
 * root replica's rank(s) that hold them, and nothing else -- not the whole model
 * broadcast to everyone (the reference's defect, reference/planner.md §6). In flight
 * trajectories keep decoding meanwhile: a receiver's slices land in the device's
 * staging buffer and are swapped in at the next safe point (device weights_staged).
 * A sync that starts before the last one was swapped in supersedes it
 * (weights_unstage): that safe point must not install a buffer half overwritten.
 *
 * Who sends what: for every pair (sender s of the root replica, receiver r) and every
 * tensor, the overlap of s's block and r's block (device slices, any TP degree on
 * either side) goes as one message whose MPI subarray types pick the overlap out of
 * each side's contiguous block. A block held identically by several senders
 * (replicated tensors, replicated KV heads) is sent by the first of them only. Both
 * sides enumerate the pairs in the same order (receiver's slices, then sender's
 * slices), so the messages of one pair match in order on one tag.
 *
 * Relays (sync_relay.c): the receivers of one place (TP degree and index: the same
 * slices) and wire type want the same bytes, in the same layout, so they form a chain
 * in rank order whose members pass every block on to the next as soon as it has
 * landed; and a place nested in a place of a smaller TP degree (a TP-2 shard inside
 * the TP-1 one) is fed by the last member of that place's chain, which cuts the
 * blocks out of the ones it received. The senders then send only the places of the
 * smallest TP degree, so a sender's egress is its part of the model once, however many
 * instances of whatever TP degrees there are, and a sync costs about one model's time
 * on one link plus one band's per hop -- the pipelined broadcast the planner's cost
 * model assumes (cost_weight_sync_s).
 *
 * Bands (piece_walk): every message carries one band of rows of its tensor, 64 MiB
 * at most, cut at the same rows on every side, so a relay passes a large block on
 * (an embedding of a GB and more) a band at a time instead of after all of it landed,
 * and GPU runs go in groups of one band's bytes at most.
 *
 * The senders copy their slices first: the next optimizer step may start before the
 * sends complete. They copy them through the device's read_slices where it has one
 * (device cuda: a trainer's weights stay on its GPU, which sends the slices' bf16
 * copy across PCIe, half the float32 bytes and no rounding pass on the host), into the
 * device's send_bf16 buffer where it offers one (page-locked, kept between syncs). Bytes
 * moved are counted per rank and reported with SYNC_DONE.
 *
 * bf16 on the wire (device_ops.sync_bf16): a rank that only serves rollouts on such a
 * device decodes bf16 weights, so its blocks travel rounded to bf16 (nearest even, as
 * the engine rounds them: the weights it decodes are bit for bit the same) -- half the
 * bytes. The sender's copy is bf16 too (a float32 one only when some receiver takes
 * float32); the receiver lands them where its device asks (stage_bf16: device cuda
 * sends them to the GPU as they are), else in a bf16 buffer of its staging buffer's
 * layout, widened into it when the last has arrived.
 * Every other receiver (a lent or colocated rank, whose copy is a training replica's)
 * takes float32. LIBRA_TEST_SYNC_F32 in every rank's environment (tests) keeps
 * float32 for all.
 *
 * GPU to GPU (device gsync_*: device cuda, NCCL over the sync's members): when the
 * device's epoch allows it, the bf16 blocks go as runs from the sender's GPU to the
 * receiver's GPU model instead (gpu_runs; relayed and fed as over MPI) -- the sender
 * issues them at once, the receiver at its instance's next safe point (into its sync
 * buffer, taken in at a later one), and its SYNC_DONE waits until they are in the
 * model (gpu_wait).
 *
 * A colocated plan's sync moves nothing between ranks: every rollout rank is a training
 * replica holding the step's weights (the replicas compare hashes after every step), so
 * each copies its own live slices into its staging buffer, and the swap at the next
 * safe point is that of any sync (caches dropped, tokens stamped with the new version).
 */
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "libra/safetensors.h"
#include "sync_internal.h"

/* Whether the syncs to rank r carry bf16 (see the top). */
int ws_wire_bf16(const struct worker *w, int r)
{
    if (!w->ops->sync_bf16 || w->plan.colocated || getenv("LIBRA_TEST_SYNC_F32")) return 0;
    return w->plan.ranks[r].role == ROLE_ROLLOUT;
}

/* Whether this sync's bf16 blocks go from GPU to GPU (device gsync_*): the device's
 * epoch allows it (the same answer on every member). */
static int gpu_on(const struct worker *w)
{
    return w->ops->gsync_on && w->ops->gsync_on(w->dev) && !getenv("LIBRA_TEST_SYNC_F32");
}

/* The run of overlap o in block s stored at data, to or from peer, in group g (a
 * receiver's passed on to next, -1 none; feed: a receiver's fed to peer). */
static void add_run(struct wk_sync *y, int peer, int g, const struct dev_slice *s,
                    const float *data, const struct overlap *o, int next, int feed)
{
    if (y->n_run == y->cap_run) {
        y->cap_run = y->cap_run ? 2 * y->cap_run : 64;
        y->run = xrealloc(y->run, (size_t)y->cap_run * sizeof *y->run);
    }
    const float *at = data + (o->r0 - s->r0) * s->nc + (o->c0 - s->c0);
    y->run[y->n_run++] = (struct dev_gmsg){peer, g, at, (size_t)o->nr, (size_t)o->nc,
                                           (size_t)s->nc, next, feed};
}

/* The bf16 receivers (member indices) in the order a GPU sync walks them: by TP degree,
 * then member index -- a feeding place before the places it feeds. */
static int gpu_walk_order(const struct worker *w, const int *members, int n_send, int n_mem,
                          int *order)
{
    int n = 0;
    for (int q = n_send; q < n_mem; q++)
        if (ws_wire_bf16(w, members[q])) order[n++] = q;
    for (int i = 1; i < n; i++) /* insertion sort: stable, a few dozen receivers */
        for (int j = i; j > 0 && w->plan.ranks[members[order[j - 1]]].tp >
                                     w->plan.ranks[members[order[j]]].tp;
             j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    return n;
}

/* A GPU sync's runs: every (receiver, slice, sender, block) overlap to a bf16 receiver,
 * in one order every member walks alike (gpu_walk_order), numbered into groups -- a run
 * strided on either side (packed or unpacked on the GPU) a group of its own, the
 * contiguous runs between two such one group of one chunk's bytes at most (each run
 * one band), and a fed head's runs start a group --
 * and this rank's own collected into y->run (as receiver, as the feeder of a fed head,
 * or as sender me_send, whose blocks start at live[b]). A relay chain's head takes its
 * runs from the senders or from its feeder (the last member of a place that covers
 * its own, sync_relay.c), each other member from the one before it, which passes each
 * group on after receiving it. Each group waits only for the groups before it on the
 * ranks it involves (a chain's member for its own receive of the same group before it
 * passes it on; a feeder's receives precede its feeds, its place being walked first),
 * so the sync cannot deadlock. */
static void gpu_runs(struct worker *w, struct wk_sync *y, const struct side *senders, int n_send,
                     const int *members, int n_mem, const struct relay_map *rm, int me_send,
                     const float *const *live)
{
    const struct plan *p = &w->plan;
    int *order = xmalloc((size_t)(n_mem > 0 ? n_mem : 1) * sizeof *order);
    int n_order = gpu_walk_order(w, members, n_send, n_mem, order);
    /* this rank's own staged slices, where it feeds a head: the feeds' sources */
    int me = -1, feeds = 0;
    for (int q = n_send; q < n_mem; q++) me = members[q] == w->rank ? q : me;
    for (int q = n_send; me >= 0 && q < n_mem; q++)
        feeds |= rm->feeder[q] == me && ws_wire_bf16(w, members[q]);
    struct side own = {0};
    if (feeds) {
        const struct rank_assign *a = &p->ranks[w->rank];
        side_get(w, &own, a->tp, a->index, DEV_SLICES_STAGE);
        side_index(&own);
    }
    int g = 0, open = 0; /* the group number; a group of contiguous runs is open */
    long long in_group = 0; /* its bytes: a group holds one chunk at most, or one run */
    for (int x = 0; x < n_order; x++) {
        int q = order[x], mine = q == me, fed = rm->feeder[q] >= 0;
        int prev = rm->from[q], next = mine ? rm->next[q] : -1;
        int feeding = fed && rm->feeder[q] == me;
        if (fed) open = 0; /* never in a group with its feeder's receives */
        struct side rcv;
        side_get(w, &rcv, p->ranks[members[q]].tp, p->ranks[members[q]].index,
                 mine ? DEV_SLICES_STAGE : DEV_SLICES_GEOMETRY);
        for (int m = 0; m < rcv.n; m++) {
            /* a fed head's runs come out of its feeder's slice fs */
            const struct dev_slice *fs = fed ? relay_feeder_slice(rm, q, &rcv.s[m]) : NULL;
            for (int k = 0; k < n_send; k++) {
                struct piece_walk pw;
                for (piece_walk_begin(&pw, senders, k, &rcv.s[m], 2, y->chunk);
                     piece_walk_next(&pw);) {
                    const struct overlap *pc = &pw.pc;
                    long long other = fed ? fs->nc : pw.sb->nc; /* the source side's row */
                    int strided = (pc->nc != rcv.s[m].nc || pc->nc != other) && pc->nr > 1;
                    long long bytes = (long long)(pc->nr * pc->nc) * 2;
                    if (strided || !open || in_group + bytes > y->chunk) {
                        g++;
                        in_group = 0;
                    }
                    open = !strided;
                    in_group += bytes;
                    if (mine) {
                        add_run(y, prev >= 0 ? prev : k, g, &rcv.s[m], rcv.s[m].data, pc, next, 0);
                        y->bytes_in += bytes;
                        y->bytes_out += next >= 0 ? bytes : 0;
                    } else if (feeding) {
                        const struct dev_slice *src = &own.s[side_holder(&own, &rcv.s[m])];
                        add_run(y, q, g, src, src->data, pc, -1, 1);
                        y->bytes_out += bytes;
                    } else if (k == me_send && prev < 0) {
                        add_run(y, q, g, pw.sb, live[pw.b], pc, -1, 0);
                        y->bytes_out += bytes;
                    } else {
                        continue;
                    }
                    y->max_msg = bytes > y->max_msg ? bytes : y->max_msg;
                }
            }
        }
        side_free(&rcv);
    }
    side_free(&own);
    free(order);
}


void ws_add_req(struct wk_sync *y, MPI_Request r, MPI_Datatype t)
{
    if (y->n_req == y->cap_req) {
        y->cap_req = y->cap_req ? 2 * y->cap_req : 64;
        y->req = xrealloc(y->req, (size_t)y->cap_req * sizeof *y->req);
        y->types = xrealloc(y->types, (size_t)y->cap_req * sizeof *y->types);
    }
    y->req[y->n_req] = r;
    y->types[y->n_req++] = t;
}

/* The copies of this sender's slices its sends read (the weights may change before the
 * sends end), each made only if some receiver takes it: float32 in *copy (the slices
 * then point into it), rounded to bf16 in *copy16 at the offsets off[m] (me->n) -- the
 * device's buffer where it offers one (*ours16 = 0), else allocated here. */
static void snapshot(struct worker *w, struct side *me, int want32, int want16, float **copy,
                     uint16_t **copy16, size_t **off, int *ours16)
{
    size_t total = 0;
    *off = xmalloc((size_t)(me->n ? me->n : 1) * sizeof **off);
    for (int m = 0; m < me->n; m++) {
        (*off)[m] = total;
        total += (size_t)(me->s[m].nr * me->s[m].nc);
    }
    *copy = want32 ? xmalloc((total ? total : 1) * sizeof **copy) : NULL;
    *copy16 = NULL;
    *ours16 = 0;
    if (want16 && w->ops->send_bf16) *copy16 = w->ops->send_bf16(w->dev, total ? total : 1);
    if (want16 && !*copy16) {
        *copy16 = xmalloc((total ? total : 1) * sizeof **copy16);
        *ours16 = 1;
    }
    if (w->ops->read_slices) {
        w->ops->read_slices(w->dev, me->s, me->n, *off, *copy, *copy16);
        for (int m = 0; *copy && m < me->n; m++) me->s[m].data = *copy + (*off)[m];
        return;
    }
    for (int m = 0; m < me->n; m++) {
        size_t len = (size_t)(me->s[m].nr * me->s[m].nc);
        if (*copy16) st_f32_to_bf16_n(me->s[m].data, *copy16 + (*off)[m], len);
        if (!*copy) continue;
        memcpy(*copy + (*off)[m], me->s[m].data, len * sizeof **copy);
        me->s[m].data = *copy + (*off)[m];
    }
}

/* A bf16 receiver's landing buffer for its staging slices rcv (kept for the widening). */
static void recv16_prepare(struct wk_sync *y, const struct side *rcv)
{
    float *lo = NULL, *hi = NULL;
    for (int m = 0; m < rcv->n; m++) {
        float *a = rcv->s[m].data, *b = a + rcv->s[m].nr * rcv->s[m].nc;
        if (!lo || a < lo) lo = a;
        if (!hi || b > hi) hi = b;
    }
    size_t n = lo ? (size_t)(hi - lo) : 0;
    if (n > y->cap_recv16) {
        free(y->recv16);
        y->recv16 = xmalloc(n * sizeof *y->recv16);
        y->cap_recv16 = n;
    }
    y->stage_lo = lo;
    y->rslices = xrealloc(y->rslices, (size_t)(rcv->n ? rcv->n : 1) * sizeof *y->rslices);
    memcpy(y->rslices, rcv->s, (size_t)rcv->n * sizeof *rcv->s);
    y->n_rslices = rcv->n;
}

/* The bf16 blocks received, widened into the staging slices. */
static void recv16_widen(struct wk_sync *y)
{
    for (int m = 0; m < y->n_rslices; m++) {
        const struct dev_slice *s = &y->rslices[m];
        const uint16_t *src = y->recv16 + (s->data - y->stage_lo);
        st_bf16_to_f32_n(src, s->data, (size_t)(s->nr * s->nc));
    }
    y->n_rslices = 0;
}

/* Colocated: this rank's live weights become its staged rollout weights (the shard of
 * its rollout place, which is the one it trains). */
static void stage_own(struct worker *w)
{
    const struct rank_assign *a = &w->plan.ranks[w->rank];
    struct side live, stage;
    side_get(w, &live, a->tp, a->index, DEV_SLICES_SEND);
    side_get(w, &stage, a->tp, a->index, DEV_SLICES_STAGE);
    if (live.n != stage.n)
        FATAL("colocated weight sync: rank %d's live weights are %d slices, its staging "
              "buffer %d", w->rank, live.n, stage.n);
    for (int m = 0; m < live.n; m++) {
        if (!sync_same_block(&live.s[m], &stage.s[m]))
            FATAL("colocated weight sync: rank %d's slice %d of tensor %d differs from its "
                  "staging slice (tensor %d)", w->rank, m, live.s[m].tensor, stage.s[m].tensor);
        size_t len = (size_t)(live.s[m].nr * live.s[m].nc), zero = 0;
        if (w->ops->read_slices)
            w->ops->read_slices(w->dev, &live.s[m], 1, &zero, stage.s[m].data, NULL);
        else if (stage.s[m].data != live.s[m].data)
            memcpy(stage.s[m].data, live.s[m].data, len * sizeof *live.s[m].data);
    }
    side_free(&live);
    side_free(&stage);
    w->sync.receiving = 1;
}

/* Receiver f->me's receives (from its source in the relay map, else from the senders
 * that hold each block), each logged, its landed blocks passed on to the next member
 * of its chain as they land, and cut for the heads it feeds (sync_relay.c). */
static void post_receives(struct worker *w, struct relay_feed *f, const struct rank_assign *a,
                          int b16)
{
    struct wk_sync *y = &w->sync;
    int prev = f->rm->from[f->me], next = f->rm->next[f->me], feeds = 0;
    for (int h = f->n_send; h < f->n_mem; h++) feeds |= f->rm->feeder[h] == f->me;
    struct side rcv;
    side_get(w, &rcv, a->tp, a->index, DEV_SLICES_STAGE);
    if (b16)
        y->direct16 = rcv.n > 0 && w->ops->stage_bf16 && w->ops->stage_bf16(w->dev, rcv.s[0].data);
    if (b16 && !y->direct16) recv16_prepare(y, &rcv);
    void **land = xmalloc((size_t)(rcv.n ? rcv.n : 1) * sizeof *land);
    struct recv_log lg;
    recv_log_init(&lg, rcv.n);
    for (int m = 0; m < rcv.n; m++) {
        land[m] = !b16        ? (void *)rcv.s[m].data
                  : y->direct16 ? (void *)w->ops->stage_bf16(w->dev, rcv.s[m].data)
                              : (void *)(y->recv16 + (rcv.s[m].data - y->stage_lo));
        for (int k = 0; k < f->n_send; k++) {
            struct piece_walk pw;
            for (piece_walk_begin(&pw, f->senders, k, &rcv.s[m], f->esize, y->chunk);
                 piece_walk_next(&pw);) {
                MPI_Request r;
                long long bytes = (long long)(pw.pc.nr * pw.pc.nc) * f->esize;
                MPI_Datatype t = sync_block_type(&rcv.s[m], &pw.pc, f->elem);
                MPI_CHECK(MPI_Irecv(land[m], 1, t, prev >= 0 ? prev : k, TAG_SYNC_DATA,
                                    w->comms.sync, &r));
                ws_add_req(y, r, t);
                recv_log_add(&lg, m, k, pw.b, pw.band, y->n_req - 1);
                y->bytes_in += bytes;
                y->max_msg = bytes > y->max_msg ? bytes : y->max_msg;
                if (next >= 0) relay_add_fwd(y, y->n_req - 1, next, land[m], t, bytes, 0);
            }
        }
    }
    recv_log_end(&lg);
    if (feeds) {
        side_index(&rcv);
        f->mine = &rcv;
        f->land = land;
        f->lg = &lg;
        relay_add_feeds(w, f);
    }
    recv_log_free(&lg);
    free(land);
    side_free(&rcv);
}

void ws_on_sync(struct worker *w, const struct wire_sync *msg)
{
    struct wk_sync *y = &w->sync;
    if (y->active) FATAL("weight sync %d requested while sync %d is in flight", msg->sync_id, y->sync_id);
    if (w->comms.sync == MPI_COMM_NULL)
        FATAL("weight sync reached rank %d, which is not in the sync communicator", w->rank);
    y->version = msg->version;
    y->sync_id = msg->sync_id;
    y->active = 1;
    y->n_req = 0;
    y->n_fwd = y->fwd_done = y->n_seg = 0;
    y->bytes_in = y->bytes_out = y->max_msg = 0;
    const char *chunk = getenv("LIBRA_TEST_SYNC_CHUNK");
    y->chunk = chunk && atoll(chunk) > 0 ? atoll(chunk) : SYNC_CHUNK_BYTES;
    y->direct16 = 0;
    const struct plan *p = &w->plan;
    if (p->colocated) { /* ws_progress completes it: no requests */
        stage_own(w);
        return;
    }
    int *members = xmalloc((size_t)w->world * sizeof *members);
    int n_mem = plan_members(p, 0, members);
    int size = plan_replica_size(p), train_tp = p->train_tp > 0 ? p->train_tp : 1;
    int n_send = 0;
    while (n_send < n_mem && plan_in_root_replica(p, members[n_send])) n_send++;
    /* the senders' blocks (geometry; this rank's own with data if it sends) */
    struct side *senders = xcalloc((size_t)n_send + 1, sizeof *senders);
    int me_send = -1;
    for (int k = 0; k < n_send; k++) {
        int mine = members[k] == w->rank;
        /* a replica is tp x pp ranks; the weights are split over its TP ranks */
        side_get(w, &senders[k], train_tp, (k % size) % train_tp,
                 mine ? DEV_SLICES_SEND : DEV_SLICES_GEOMETRY);
        side_index(&senders[k]);
        if (mine) me_send = k;
    }
    float *copy = NULL;
    uint16_t *copy16 = NULL;
    size_t *off16 = NULL;
    int any16 = 0, any32 = 0;
    y->gpu = gpu_on(w);
    for (int q = n_send; q < n_mem; q++) {
        int b16 = ws_wire_bf16(w, members[q]);
        any16 |= b16 && !y->gpu;
        any32 |= !b16;
    }
    /* a GPU run starts in the live weights' layout (the snapshot below moves data) */
    const float **live = NULL;
    if (me_send >= 0 && y->gpu) {
        live = xmalloc((size_t)(senders[me_send].n ? senders[me_send].n : 1) * sizeof *live);
        for (int b = 0; b < senders[me_send].n; b++) live[b] = senders[me_send].s[b].data;
    }
    y->n_run = 0;
    struct relay_map rm;
    relay_map_build(w, members, n_send, n_mem, &rm);
    if (y->gpu) gpu_runs(w, y, senders, n_send, members, n_mem, &rm, me_send, live);
    int ours16 = 0;
    if (me_send >= 0)
        snapshot(w, &senders[me_send], any32, any16, &copy, &copy16, &off16, &ours16);
    y->receiving = me_send < 0;
    if (y->receiving && w->ops->weights_unstage) w->ops->weights_unstage(w->dev);
    y->n_rslices = 0;
    for (int q = n_send; q < n_mem; q++) {
        const struct rank_assign *a = &p->ranks[members[q]];
        int mine = members[q] == w->rank;
        if (!mine && me_send < 0) continue; /* a receiver deals with its own blocks only */
        int b16 = ws_wire_bf16(w, members[q]);
        if (b16 && y->gpu) continue; /* its runs are gpu_runs' */
        if (mine) {
            struct relay_feed f = {members, n_send, n_mem, q, &rm, senders, NULL, NULL, NULL,
                                   b16 ? MPI_UINT16_T : MPI_FLOAT,
                                   b16 ? (long long)sizeof(uint16_t) : (long long)sizeof(float)};
            post_receives(w, &f, a, b16);
            continue;
        }
        if (rm.from[q] >= 0) continue; /* a sender feeds the heads no other chain feeds */
        struct side rcv;
        side_get(w, &rcv, a->tp, a->index, DEV_SLICES_GEOMETRY);
        MPI_Datatype elem = b16 ? MPI_UINT16_T : MPI_FLOAT;
        long long esize = b16 ? (long long)sizeof(uint16_t) : (long long)sizeof(float);
        for (int m = 0; m < rcv.n; m++) {
            struct piece_walk pw;
            for (piece_walk_begin(&pw, senders, me_send, &rcv.s[m], esize, y->chunk);
                 piece_walk_next(&pw);) {
                const void *from = b16 ? (const void *)(copy16 + off16[pw.b])
                                       : (const void *)pw.sb->data;
                MPI_Request r;
                MPI_Datatype t = sync_block_type(pw.sb, &pw.pc, elem);
                MPI_CHECK(MPI_Isend(from, 1, t, q, TAG_SYNC_DATA, w->comms.sync, &r));
                ws_add_req(y, r, t);
                long long bytes = (long long)(pw.pc.nr * pw.pc.nc) * esize;
                y->bytes_out += bytes;
                y->max_msg = bytes > y->max_msg ? bytes : y->max_msg;
            }
        }
        side_free(&rcv);
    }
    verify_post(w, &(struct verify_ends){members, n_send, n_mem, senders, me_send, copy16, off16});
    if (y->n_run && me_send >= 0) w->ops->gsync_send(w->dev, y->run, y->n_run);
    if (y->n_run && me_send < 0) w->ops->gsync_recv(w->dev, y->run, y->n_run, y->version);
    y->gpu_wait = y->n_run && me_send < 0; /* SYNC_DONE once the safe point took them */
    free(live);
    relay_map_free(&rm, n_mem);
    for (int k = 0; k < n_send; k++) side_free(&senders[k]);
    free(senders);
    free(members);
    free(off16);
    free(y->send_copy);
    if (y->send16_ours) free(y->send16);
    y->send_copy = copy;
    y->send16 = copy16;
    y->send16_ours = ours16;
}

int ws_progress(struct worker *w)
{
    struct wk_sync *y = &w->sync;
    if (!y->active) return 0;
    int moved = relay_progress(w), done = 0;
    MPI_CHECK(MPI_Testall(y->n_req, y->req, &done, MPI_STATUSES_IGNORE));
    if (!done || y->fwd_done < y->n_fwd || (y->gpu_wait && !w->ops->gsync_landed(w->dev)))
        return moved;
    for (int i = 0; i < y->n_req; i++)
        if (y->types[i] != MPI_DATATYPE_NULL) MPI_CHECK(MPI_Type_free(&y->types[i]));
    y->n_req = 0;
    y->active = 0;
    if (y->n_rslices) recv16_widen(y);
    verify_check(w, y->gpu_wait);
    if (y->gpu_wait)
        y->gpu_wait = 0; /* the instance swapped the version in */
    else if (y->receiving && y->direct16)
        w->ops->weights_staged_bf16(w->dev, y->version);
    else if (y->receiving)
        w->ops->weights_staged(w->dev, y->version);
    free(y->send_copy);
    if (y->send16_ours) free(y->send16);
    y->send_copy = NULL;
    y->send16 = NULL;
    /* a receiver's bytes received, a sender's sent (a relay's passing on is neither) */
    struct wire_sync_done d = {y->version, y->sync_id, y->receiving ? y->bytes_in : y->bytes_out};
    outbox_send(&w->ob, &d, sizeof d, 0, TAG_SYNC_DONE, MPI_COMM_WORLD);
    return 1;
}

void ws_free(struct worker *w)
{
    free(w->sync.req);
    free(w->sync.types);
    free(w->sync.send_copy);
    if (w->sync.send16_ours) free(w->sync.send16);
    free(w->sync.recv16);
    free(w->sync.rslices);
    free(w->sync.run);
    free(w->sync.fwd);
    free(w->sync.seg);
    free(w->sync.hash);
}
