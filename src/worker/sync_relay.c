/*
 * Relays of a weight sync (sync_internal.h): who receives from whom, and the passing
 * on of blocks as they land.
 *
 * Chains. The receivers of one place (TP degree and index: the same slices) and wire
 * type want the same bytes in the same layout: they form a chain in rank order
 * (mostly within a node), and each member passes every block on to the next one as
 * soon as it has landed.
 *
 * Feeds. A place whose every slice lies inside a slice of another place of a smaller
 * TP degree (a TP-2 place inside the TP-1 one, a TP-4 place inside a TP-2 one: the
 * shards of the powers of two nest) needs no byte from the senders: the last member
 * of that other place's chain cuts each of its blocks out of the blocks it received
 * and feeds them to the chain's head, in the order the head posts its receives. Of
 * the places that cover a head, the one of the largest TP degree feeds it (ties: the
 * lowest index), so a chain's last member sends about its own shard's bytes. The
 * senders then feed only the places no other place covers -- those of the smallest
 * TP degree -- so each sender's link carries its part of the model once, whatever the
 * rollout layout: the pipelined broadcast the planner's cost model assumes
 * (cost_weight_sync_s), plus one band's time per hop (piece_walk: 64 MiB at most).
 * A feed needs the same wire type on both sides; GPU runs (weight_sync.c's gpu_runs)
 * feed as MPI does.
 *
 * Deadlock (MPI; GPU runs: gpu_runs and src/device/cpu/cpu_gsync.c): every receiver
 * posts all its receives when the sync starts; a pass-on waits only for its own
 * receive; and a place is fed only by one of a smaller TP degree, so no cycle.
 */
#include <stdlib.h>

#include "libra/log.h"
#include "sync_internal.h"

/* Receivers q1, q2 (member indices) of one place and wire type. */
static int same_place(const struct worker *w, const int *members, int q1, int q2)
{
    const struct rank_assign *a = &w->plan.ranks[members[q1]], *b = &w->plan.ranks[members[q2]];
    return a->tp == b->tp && a->index == b->index &&
           ws_wire_bf16(w, members[q1]) == ws_wire_bf16(w, members[q2]);
}

/* Every slice of place h lies inside a slice of (indexed) place g. */
static int covers(const struct side *g, const struct side *h)
{
    for (int m = 0; m < h->n; m++)
        if (side_holder(g, &h->s[m]) < 0) return 0;
    return 1;
}

static int *minus_ones(int n)
{
    int *a = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *a);
    for (int i = 0; i < n; i++) a[i] = -1;
    return a;
}

/* The heads that another place's chain feeds (feeder, from): see the top. */
static void find_feeds(struct worker *w, const int *members, int n_send, int n_mem,
                       struct relay_map *rm)
{
    const struct plan *p = &w->plan;
    for (int a = n_send; a < n_mem; a++) {
        if (rm->head[a] != a) continue;
        const struct rank_assign *ra = &p->ranks[members[a]];
        int best = -1;
        for (int g = n_send; g < n_mem; g++) {
            if (rm->head[g] != g) continue;
            const struct rank_assign *rg = &p->ranks[members[g]];
            if (rg->tp >= ra->tp || ws_wire_bf16(w, members[g]) != ws_wire_bf16(w, members[a]))
                continue;
            if (best >= 0) {
                const struct rank_assign *rb = &p->ranks[members[best]];
                if (rg->tp < rb->tp || (rg->tp == rb->tp && rg->index > rb->index)) continue;
            }
            if (covers(&rm->geo[g], &rm->geo[a])) best = g;
        }
        if (best < 0) continue;
        int tail = best;
        while (rm->next[tail] >= 0) tail = rm->next[tail];
        rm->feeder[a] = tail;
    }
    for (int a = n_send; a < n_mem; a++)
        if (rm->feeder[a] >= 0) rm->from[a] = rm->feeder[a];
}

void relay_map_build(struct worker *w, const int *members, int n_send, int n_mem,
                     struct relay_map *rm)
{
    const struct plan *p = &w->plan;
    rm->from = minus_ones(n_mem);
    rm->next = minus_ones(n_mem);
    rm->feeder = minus_ones(n_mem);
    rm->head = minus_ones(n_mem);
    rm->geo = xcalloc((size_t)(n_mem > 0 ? n_mem : 1), sizeof *rm->geo);
    for (int q = n_send; q < n_mem; q++) {
        if (rm->head[q] < 0) rm->head[q] = q;
        if (w->sync.no_relay) continue; /* every receiver from the senders */
        for (int j = q + 1; j < n_mem; j++)
            if (same_place(w, members, q, j)) {
                rm->next[q] = j;
                rm->from[j] = q;
                rm->head[j] = rm->head[q];
                break;
            }
    }
    if (w->sync.no_relay) return;
    for (int q = n_send; q < n_mem; q++) {
        if (rm->head[q] != q) continue;
        const struct rank_assign *a = &p->ranks[members[q]];
        side_get(w, &rm->geo[q], a->tp, a->index, DEV_SLICES_GEOMETRY);
        side_index(&rm->geo[q]);
    }
    find_feeds(w, members, n_send, n_mem, rm);
}

const struct dev_slice *relay_feeder_slice(const struct relay_map *rm, int q,
                                           const struct dev_slice *b)
{
    const struct side *g = &rm->geo[rm->head[rm->feeder[q]]];
    int j = side_holder(g, b);
    if (j < 0) FATAL("weight sync: a place fed by one that does not cover it (a bug)");
    return &g->s[j];
}

void relay_map_free(struct relay_map *rm, int n_mem)
{
    for (int q = 0; q < n_mem; q++) side_free(&rm->geo[q]);
    free(rm->geo);
    free(rm->from);
    free(rm->next);
    free(rm->feeder);
    free(rm->head);
}

void recv_log_init(struct recv_log *lg, int n_slices)
{
    *lg = (struct recv_log){.n_slices = n_slices};
    lg->start = xcalloc((size_t)n_slices + 1, sizeof *lg->start);
}

/* Entries come slice by slice, in slice order: start[x] is set for x <= upto. */
void recv_log_add(struct recv_log *lg, int j, int k, int b, int64_t band, int req)
{
    while (lg->upto < j) lg->start[++lg->upto] = lg->n;
    if (lg->n == lg->cap) {
        lg->cap = lg->cap ? 2 * lg->cap : 64;
        lg->k = xrealloc(lg->k, (size_t)lg->cap * sizeof *lg->k);
        lg->b = xrealloc(lg->b, (size_t)lg->cap * sizeof *lg->b);
        lg->band = xrealloc(lg->band, (size_t)lg->cap * sizeof *lg->band);
        lg->req = xrealloc(lg->req, (size_t)lg->cap * sizeof *lg->req);
    }
    lg->k[lg->n] = k;
    lg->b[lg->n] = b;
    lg->band[lg->n] = band;
    lg->req[lg->n++] = req;
}

void recv_log_end(struct recv_log *lg)
{
    while (lg->upto < lg->n_slices) lg->start[++lg->upto] = lg->n;
}

void recv_log_free(struct recv_log *lg)
{
    free(lg->start);
    free(lg->k);
    free(lg->b);
    free(lg->band);
    free(lg->req);
}

void relay_add_fwd(struct wk_sync *y, int req, int dest, void *at, MPI_Datatype t,
                   long long bytes, int own)
{
    if (y->n_fwd == y->cap_fwd) {
        y->cap_fwd = y->cap_fwd ? 2 * y->cap_fwd : 64;
        y->fwd = xrealloc(y->fwd, (size_t)y->cap_fwd * sizeof *y->fwd);
    }
    /* a destination's pass-ons in one run: the order its receives were posted in */
    if (y->n_seg == 0 || y->fwd[y->n_fwd - 1].dest != dest) {
        if (y->n_seg == y->cap_seg) {
            y->cap_seg = y->cap_seg ? 2 * y->cap_seg : 8;
            y->seg = xrealloc(y->seg, (size_t)y->cap_seg * sizeof *y->seg);
        }
        y->seg[y->n_seg++] = (struct wk_seg){y->n_fwd, y->n_fwd};
    }
    y->fwd[y->n_fwd++] = (struct wk_fwd){req, dest, at, t, bytes, own};
    y->seg[y->n_seg - 1].end = y->n_fwd;
}

/* The request of lg's receive of band `band` of sender k's block b into slice j. */
static int logged(const struct recv_log *lg, int j, int k, int b, int64_t band)
{
    for (int e = lg->start[j]; e < lg->start[j + 1]; e++)
        if (lg->k[e] == k && lg->b[e] == b && lg->band[e] == band) return lg->req[e];
    return -1;
}

void relay_add_feeds(struct worker *w, const struct relay_feed *f)
{
    for (int h = f->n_send; h < f->n_mem; h++) {
        if (f->rm->feeder[h] != f->me) continue;
        const struct side *rcv = &f->rm->geo[h];
        /* the head's walk (weight_sync.c): its slices, the senders, their blocks */
        for (int m = 0; m < rcv->n; m++) {
            int j = side_holder(f->mine, &rcv->s[m]);
            if (j < 0)
                FATAL("weight sync: rank %d feeds a place it does not cover (a bug)", w->rank);
            for (int k = 0; k < f->n_send; k++) {
                struct piece_walk pw;
                for (piece_walk_begin(&pw, f->senders, k, &rcv->s[m], f->esize, w->sync.chunk);
                     piece_walk_next(&pw);) {
                    int req = logged(f->lg, j, k, pw.b, pw.band);
                    if (req < 0)
                        FATAL("weight sync: rank %d feeds a block it does not receive (a bug)",
                              w->rank);
                    MPI_Datatype t = sync_block_type(&f->mine->s[j], &pw.pc, f->elem);
                    relay_add_fwd(&w->sync, req, h, f->land[j], t,
                                  (long long)(pw.pc.nr * pw.pc.nc) * f->esize, 1);
                }
            }
        }
    }
}

int relay_progress(struct worker *w)
{
    struct wk_sync *y = &w->sync;
    int moved = 0;
    for (int s = 0; s < y->n_seg; s++) {
        struct wk_seg *g = &y->seg[s];
        while (g->cur < g->end) {
            struct wk_fwd *f = &y->fwd[g->cur];
            int landed = 0;
            MPI_CHECK(MPI_Test(&y->req[f->req], &landed, MPI_STATUS_IGNORE));
            if (!landed) break;
            MPI_Request r;
            MPI_CHECK(MPI_Isend(f->at, 1, f->t, f->dest, TAG_SYNC_DATA, w->comms.sync, &r));
            ws_add_req(y, r, f->own ? f->t : MPI_DATATYPE_NULL); /* else the receive's type */
            y->bytes_out += f->bytes;
            y->fwd_done++;
            g->cur++;
            moved = 1;
        }
    }
    return moved;
}
