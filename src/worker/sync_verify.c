/*
 * train.verify_syncs: every weight sync checked end to end (sync_internal.h).
 *
 * Each receiver's fingerprint of what it holds after the sync -- its staging buffer,
 * or on a GPU-to-GPU sync the weights its GPU model installed -- against the one the
 * senders compute from what they hold for its place. The fingerprint is the sum
 * fingerprint of hash_core.h over the elements of the place, each element's term
 * keyed by its place in the whole tensor (tensor, row, column), so it does not depend
 * on who holds which block: each sender sums the elements of its blocks that it sends
 * (the first holder of a replicated block) within the receiver's slices, and sends the
 * partial sum to the receiver, which adds them. The values are what the wire carries:
 * float32 bits, or bf16 bits for a bf16 receiver. Relays, feeds, bands and GPU runs
 * are all between the two ends, so a block landed in the wrong place, a stale one, or
 * one missing, ends the job with both fingerprints. The cost: a pass over each
 * member's shard of every sync (on device cuda a read of a GPU receiver's weights),
 * and one 8-byte message from every sender to every receiver.
 */
#include <stdlib.h>
#include <string.h>

#include "libra/hash_core.h"
#include "libra/log.h"
#include "libra/safetensors.h"
#include "sync_internal.h"

#define TAG_SYNC_HASH 303 /* on the sync communicator */

/* The sum over overlap o of block s, whose values are at f32 (float32 bits) or b16
 * (bf16 bits; f32 NULL), stored as s is (rows of s->nc). */
static uint64_t block_sum(const struct dev_slice *s, const struct overlap *o, const float *f32,
                          const uint16_t *b16)
{
    uint64_t h = 0;
    for (int64_t r = o->r0; r < o->r0 + o->nr; r++) {
        size_t at = (size_t)((r - s->r0) * s->nc + (o->c0 - s->c0));
        uint64_t k = ((uint64_t)s->tensor << 44) + (uint64_t)r * (uint64_t)s->full_cols +
                     (uint64_t)o->c0;
        for (int64_t c = 0; c < o->nc; c++) {
            uint32_t bits;
            if (f32) memcpy(&bits, &f32[at + (size_t)c], sizeof bits);
            else bits = b16[at + (size_t)c];
            h += weights_sum_hash_term(bits, k + (uint64_t)c);
        }
    }
    return h;
}

/* A sender's part of receiver q's fingerprint: its blocks (values v32[b] or v16[b])
 * within q's slices. */
static uint64_t partial(struct worker *w, const struct side *senders, int me,
                        const struct rank_assign *a, const float *const *v32,
                        const uint16_t *const *v16)
{
    struct side rcv;
    side_get(w, &rcv, a->tp, a->index, DEV_SLICES_GEOMETRY);
    uint64_t h = 0;
    for (int m = 0; m < rcv.n; m++) {
        struct piece_walk pw;
        /* the sum does not depend on the bands */
        for (piece_walk_begin(&pw, senders, me, &rcv.s[m], 2, w->sync.chunk); piece_walk_next(&pw);)
            h += block_sum(pw.sb, &pw.pc, v32 ? v32[pw.b] : NULL, v16 ? v16[pw.b] : NULL);
    }
    side_free(&rcv);
    return h;
}

void verify_post(struct worker *w, const struct verify_ends *e)
{
    struct wk_sync *y = &w->sync;
    y->n_hash = 0;
    if (!w->cfg->train.verify_syncs) return;
    y->hash = xrealloc(y->hash, (size_t)(e->n_mem > 0 ? e->n_mem : 1) * sizeof *y->hash);
    if (e->me_send < 0) { /* a receiver: one part from every sender */
        for (int k = 0; k < e->n_send; k++) {
            MPI_Request r;
            MPI_CHECK(MPI_Irecv(&y->hash[k], 1, MPI_UINT64_T, k, TAG_SYNC_HASH, w->comms.sync, &r));
            ws_add_req(y, r, MPI_DATATYPE_NULL);
        }
        y->n_hash = e->n_send;
        return;
    }
    const struct side *mine = &e->senders[e->me_send];
    const float **v32 = xmalloc((size_t)(mine->n ? mine->n : 1) * sizeof *v32);
    const uint16_t **v16 = xmalloc((size_t)(mine->n ? mine->n : 1) * sizeof *v16);
    uint16_t *read16 = NULL;
    for (int q = e->n_send; q < e->n_mem; q++) {
        const struct rank_assign *a = &w->plan.ranks[e->members[q]];
        int b16 = ws_wire_bf16(w, e->members[q]);
        if (b16 && !e->copy16 && !read16) { /* GPU runs: no host copy was made */
            size_t *off = xmalloc((size_t)(mine->n ? mine->n : 1) * sizeof *off), n = 0;
            for (int b = 0; b < mine->n; b++) {
                off[b] = n;
                n += (size_t)(mine->s[b].nr * mine->s[b].nc);
            }
            read16 = xmalloc((n ? n : 1) * sizeof *read16);
            if (!w->ops->read_slices)
                FATAL("train.verify_syncs: rank %d cannot read its bf16 weights (a bug)", w->rank);
            w->ops->read_slices(w->dev, mine->s, mine->n, off, NULL, read16);
            for (int b = 0; b < mine->n; b++) v16[b] = read16 + off[b];
            free(off);
        }
        for (int b = 0; b < mine->n; b++) {
            v32[b] = mine->s[b].data;
            if (b16 && e->copy16) v16[b] = e->copy16 + e->off16[b];
        }
        int same = -1; /* a receiver of the same place and wire before it: the same part */
        for (int q2 = e->n_send; q2 < q && same < 0; q2++) {
            const struct rank_assign *a2 = &w->plan.ranks[e->members[q2]];
            if (a2->tp == a->tp && a2->index == a->index &&
                ws_wire_bf16(w, e->members[q2]) == b16)
                same = q2;
        }
        y->hash[q] = same >= 0 ? y->hash[same]
                               : partial(w, e->senders, e->me_send, a, b16 ? NULL : v32,
                                         b16 ? v16 : NULL);
        MPI_Request r;
        MPI_CHECK(MPI_Isend(&y->hash[q], 1, MPI_UINT64_T, q, TAG_SYNC_HASH, w->comms.sync, &r));
        ws_add_req(y, r, MPI_DATATYPE_NULL);
    }
    free(read16);
    free(v16);
    free(v32);
}

void verify_check(struct worker *w, int gpu)
{
    struct wk_sync *y = &w->sync;
    if (!w->cfg->train.verify_syncs || !y->receiving || w->plan.colocated) return;
    const struct rank_assign *a = &w->plan.ranks[w->rank];
    int b16 = ws_wire_bf16(w, w->rank), n;
    /* what landed: the GPU model's weights (read back), else the staging buffer's */
    struct dev_slice *s =
        ws_slices(w, a->tp, a->index, gpu ? DEV_SLICES_SEND : DEV_SLICES_STAGE, &n);
    uint16_t *read16 = NULL;
    size_t *off = xmalloc((size_t)(n ? n : 1) * sizeof *off), total = 0;
    for (int m = 0; m < n; m++) {
        off[m] = total;
        total += (size_t)(s[m].nr * s[m].nc);
    }
    if (gpu) {
        read16 = xmalloc((total ? total : 1) * sizeof *read16);
        w->ops->read_slices(w->dev, s, n, off, NULL, read16);
    }
    uint64_t have = 0, want = 0;
    for (int m = 0; m < n; m++) {
        struct overlap all = {s[m].r0, s[m].nr, s[m].c0, s[m].nc};
        if (gpu) {
            have += block_sum(&s[m], &all, NULL, read16 + off[m]);
        } else if (b16 && y->direct16) {
            have += block_sum(&s[m], &all, NULL, w->ops->stage_bf16(w->dev, s[m].data));
        } else if (b16) { /* widened from bf16, so rounding gives the bf16 back exactly */
            size_t len = (size_t)(s[m].nr * s[m].nc);
            uint16_t *t = xmalloc((len ? len : 1) * sizeof *t);
            for (size_t i = 0; i < len; i++) t[i] = st_f32_to_bf16(s[m].data[i]);
            have += block_sum(&s[m], &all, NULL, t);
            free(t);
        } else {
            have += block_sum(&s[m], &all, s[m].data, NULL);
        }
    }
    for (int k = 0; k < y->n_hash; k++) want += y->hash[k];
    if (have != want)
        FATAL("train.verify_syncs: weight sync %d (version %d): rank %d (rollout TP %d, index %d) "
              "holds weights of fingerprint %016llx, its senders' %016llx: the sync delivered "
              "other values than they sent", y->sync_id, y->version, w->rank, a->tp, a->index,
              (unsigned long long)have, (unsigned long long)want);
    free(read16);
    free(off);
    free(s);
}
