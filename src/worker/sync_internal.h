/*
 * Private to the weight sync of src/worker:
 *   sync_blocks.c   the geometry: a place's blocks (device slices), their overlaps and
 *                   the MPI types that pick an overlap out of a block
 *   sync_relay.c    who receives from whom -- relay chains, and the chains that feed
 *                   other places' chains -- and the passing on of landed blocks
 *   sync_verify.c   train.verify_syncs: each receiver's weights checked against its
 *                   senders' (fingerprints)
 *   weight_sync.c   the sync itself: senders, receivers, GPU runs, completion
 * Member indices (q) are ranks of the sync communicator: the root replica's senders
 * first (q < n_send), then the receivers in rank order.
 */
#ifndef LIBRA_SYNC_INTERNAL_H
#define LIBRA_SYNC_INTERNAL_H

#include "worker_internal.h"

#define TAG_SYNC_DATA 301 /* on the sync communicator */

/* ---- sync_blocks.c ---- */

/* The blocks of one place (TP degree t, index i). */
struct side {
    int t, i;
    int n;                    /* slices */
    struct dev_slice *s;
    /* with side_index: s[order[j]] for j in [first[x], first[x + 1]) are tensor x's, in
     * slice order (n_tensor: the largest tensor number + 1) */
    int *order, *first, n_tensor;
};

/* A rectangle of one tensor, in the whole tensor's rows and columns. */
struct overlap {
    int64_t r0, nr, c0, nc;
};

/* A band's bytes (piece_walk); LIBRA_TEST_SYNC_CHUNK sets it in tests. */
#define SYNC_CHUNK_BYTES (64LL << 20)

int sync_same_block(const struct dev_slice *a, const struct dev_slice *b);
/* The committed type that picks overlap o out of slice s's contiguous block of elem
 * values (the caller frees it). */
MPI_Datatype sync_block_type(const struct dev_slice *s, const struct overlap *o,
                             MPI_Datatype elem);

void side_get(struct worker *w, struct side *sd, int t, int i, int use);
/* Indexes sd's slices by tensor (a stable counting sort). */
void side_index(struct side *sd);
/* The slice of indexed sd that holds block b whole, -1 if none. */
int side_holder(const struct side *sd, const struct dev_slice *b);
void side_free(struct side *sd);

/* What sender k sends into slice s, piece by piece in the order every side walks them
 * (senders indexed): the overlaps of s with the blocks of k's that k sends (no earlier
 * sender holds the same block: replicated tensors and KV heads go once), each cut in
 * bands -- rows [n R, (n + 1) R) of the whole tensor, R = max(1, chunk / (full_cols x
 * esize)) -- so a relay passes a large block on a band at a time, and every side cuts
 * a tensor's rows at the same places whatever columns it holds (a feed's piece lies in
 * one band of its feeder's). b is the block's index in senders[k], sb the block, band
 * and pc the piece. Walk it with
 *   for (piece_walk_begin(&pw, ...); piece_walk_next(&pw);) ... */
struct piece_walk {
    const struct side *senders;
    const struct dev_slice *s;
    int k, j, j1;
    long long esize, chunk;
    struct overlap o;
    int64_t R, band_end;
    int b;
    const struct dev_slice *sb;
    int64_t band;
    struct overlap pc;
};
void piece_walk_begin(struct piece_walk *pw, const struct side *senders, int k,
                      const struct dev_slice *s, long long esize, long long chunk);
int piece_walk_next(struct piece_walk *pw);

/* ---- weight_sync.c ---- */

/* Whether the syncs to rank r carry bf16 (weight_sync.c's top). */
int ws_wire_bf16(const struct worker *w, int r);
/* Request r of the sync, with the type to free when it ends (MPI_DATATYPE_NULL: none). */
void ws_add_req(struct wk_sync *y, MPI_Request r, MPI_Datatype t);

/* ---- sync_relay.c ---- */

/* Who each member receives from and passes on to (member indices; -1: none). */
struct relay_map {
    int *from;   /* (n_mem) a receiver's source: its chain's previous member, or for a
                    chain's head the feeding chain's last member; -1: the senders */
    int *next;   /* (n_mem) the next member of its chain */
    int *feeder; /* (n_mem) a head fed by another place's chain: that chain's last
                    member (from), else -1 */
    int *head;   /* (n_mem) a receiver's chain's head */
    struct side *geo; /* (n_mem) a head's place, indexed (geometry); else empty */
};

/* The map of the sync over members[0 .. n_mem) (senders first, n_send of them). */
void relay_map_build(struct worker *w, const int *members, int n_send, int n_mem,
                     struct relay_map *rm);
/* The slice of receiver q's feeder's place that holds block b (q a fed head). */
const struct dev_slice *relay_feeder_slice(const struct relay_map *rm, int q,
                                           const struct dev_slice *b);
void relay_map_free(struct relay_map *rm, int n_mem);

/* A receiver's receives, by its own slices: entries [start[j], start[j + 1]) are slice
 * j's, each band `band` of sender k's block b, by request req (of struct wk_sync). */
struct recv_log {
    int *start, n_slices, upto;
    int *k, *b, *req;
    int64_t *band;
    int n, cap;
};
void recv_log_init(struct recv_log *lg, int n_slices);
/* In slice order; recv_log_end after the last. */
void recv_log_add(struct recv_log *lg, int j, int k, int b, int64_t band, int req);
void recv_log_end(struct recv_log *lg);
void recv_log_free(struct recv_log *lg);

/* The block landed by request req, at `at` with type t, to be passed on to member
 * dest (own: t is the pass-on's, freed with it; else the receive's). */
void relay_add_fwd(struct wk_sync *y, int req, int dest, void *at, MPI_Datatype t,
                   long long bytes, int own);

/* What this chain's last member (me, a receiver whose own slices mine -- indexed --
 * land at land[j], logged in lg) passes on to the heads it feeds: each head's blocks,
 * cut out of the received ones, in the order the head posts its receives. */
struct relay_feed {
    const int *members;
    int n_send, n_mem, me;
    const struct relay_map *rm;
    const struct side *senders, *mine;
    void *const *land;
    const struct recv_log *lg;
    MPI_Datatype elem;
    long long esize;
};
void relay_add_feeds(struct worker *w, const struct relay_feed *f);

/* Passes on the blocks that have landed, per destination in the order listed; 1 if it
 * passed any on. */
int relay_progress(struct worker *w);

/* ---- sync_verify.c ---- */

/* The two ends of a sync, as ws_on_sync sees them: a sender's bf16 copy of its
 * blocks at copy16 + off16[b] (NULL: GPU runs, read from the device). */
struct verify_ends {
    const int *members;
    int n_send, n_mem;
    const struct side *senders;
    int me_send;
    const uint16_t *copy16;
    const size_t *off16;
};
/* With train.verify_syncs: a sender sends each receiver its part of the receiver's
 * fingerprint, a receiver posts their receives (requests of the sync). */
void verify_post(struct worker *w, const struct verify_ends *e);
/* A receiver whose sync has completed (gpu: its GPU model took the runs): its
 * fingerprint against the senders' parts; a mismatch ends the job. */
void verify_check(struct worker *w, int gpu);

#endif
