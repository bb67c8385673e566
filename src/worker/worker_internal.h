/*
 * Private to src/worker: one worker rank's state and the pieces of its loop.
 *   worker.c          the loop, rank 0's messages, plans (hand back, re-split)
 *   worker_rollout.c  the rollout-instance role
 *   worker_train.c    the training role: core and hybrid replicas, their gradient
 *                     reductions (data-parallel communicator and hybrid lane), joins
 *   weight_sync.c     shard-matched weight syncs (root replica -> rollout ranks),
 *                     with sync_blocks.c and sync_relay.c (sync_internal.h)
 *
 * Training step, as every replica sees it (phases of struct wk_train):
 *   COMPUTE   the device computes the rank's share (emulated: until `until`)
 *   REDUCE    gradient and figures summed over the core replicas (dp communicator)
 *   DELAY     emulated reduction time on top of the real one
 *   HYBRIDS   root replica: the lent replicas' gradients arrive on the lane, then the
 *             hybrid sum is broadcast over dp to the other core replicas (HSUM)
 *   TOTAL     a lent replica waits for its partner's total
 * then every replica takes the same optimizer step on the same total; the root
 * replica sends the total to its lent replicas, the training root reports to rank 0.
 */
#ifndef LIBRA_WORKER_INTERNAL_H
#define LIBRA_WORKER_INTERNAL_H

#include <mpi.h>
#include <stddef.h>

#include "libra/comms.h"
#include "libra/device.h"
#include "libra/outbox.h"
#include "libra/plan.h"
#include "libra/wire.h"
#include "libra/worker.h"

enum wk_phase { WK_IDLE = 0, WK_COMPUTE, WK_REDUCE, WK_DELAY, WK_HYBRIDS, WK_HSUM, WK_TOTAL };

struct wk_train {
    int phase;               /* enum wk_phase */
    int step, n_replicas;
    int hybrids_expected;    /* root replica: lent gradients this rank collects */
    int hybrids_left;
    int any_hybrids;         /* lent replicas take part in this step */
    int hybrids_identical;   /* root replica: every lent gradient of this step came from
                                weights equal to this rank's (struct lane_hdr) */
    int lent_identical;      /* lent replica: its weights matched its partner's after
                                the last total it applied, or it joined since */
    double t0, until;        /* wall times: share started, emulated phase ends */
    double compute_s, comm_s;
    double fwd_s, bwd_s;     /* of compute_s: the device's forward and backward */
    double opt_s;            /* the optimizer step (train_apply) */
    int had_share;           /* the step in flight computed a share here (its phases are
                                reported with TAG_TRAIN_TIMES) */
    MPI_Request req[2];
    float *hsum;             /* (n_grad) root replica: the lent replicas' gradient sum */
    double hstats[DEV_STAT_COUNT];
    size_t n_hsum;
    struct wire_buf msg;     /* lane receive scratch */
    float *handover;         /* a new core rank's state, received before the re-split */
    size_t n_handover;
    int handover_version;
};

/* A lent (hybrid) rank fetching the weights and optimizer state from its partner. */
struct wk_join {
    int active;              /* a join is under way (snapshot or READY pending) */
    int epoch;               /* the plan epoch that lent the rank (its READY says so) */
    int have_snapshot;       /* received and restored */
    double ready_at;         /* wall time READY may go (emulated fetch time) */
    MPI_Request req;
    size_t n;
    int version;             /* the snapshot's version (header) */
};

/* A block a receiver passes on (sync_relay.c) to member dest -- the next receiver of
 * its chain, or the head of a chain it feeds -- once its own receive, request req, has
 * completed: from `at` with type t (own: made for the pass-on, else the receive's). */
struct wk_fwd {
    int req, dest;
    void *at;
    MPI_Datatype t;
    long long bytes;
    int own;
};

/* One destination's pass-ons fwd[cur .. end), in order; cur: the next to go. */
struct wk_seg {
    int cur, end;
};

struct wk_sync {
    int active, version, sync_id;
    MPI_Request *req;        /* (n_req) */
    MPI_Datatype *types;     /* (n_req) */
    int n_req, cap_req;
    int receiving;           /* this rank is a receiver (a rollout rank) */
    float *send_copy;        /* a sender's copy of its slices while the sends run, when
                              * some receiver takes float32 */
    uint16_t *send16;        /* ... rounded to bf16, when some receiver takes bf16 */
    int send16_ours;         /* send16 was allocated here (else it is the device's) */
    uint16_t *recv16;        /* a bf16 receiver's landing buffer: the staging buffer's
                              * layout from stage_lo on, widened into it at the end */
    size_t cap_recv16;
    float *stage_lo;         /* the lowest address of the staging slices */
    struct dev_slice *rslices; /* (n_rslices) a bf16 receiver's staging slices */
    int n_rslices;
    int direct16;            /* this bf16 receiver's slices land in the device's bf16
                              * buffer (device stage_bf16): no recv16, no widening */
    int gpu;                 /* this sync's bf16 runs go GPU to GPU (device gsync_*) */
    int gpu_wait;            /* a receiver waits for its instance to take them */
    struct dev_gmsg *run;    /* (n_run) this rank's GPU runs of the sync */
    int n_run, cap_run;
    struct wk_fwd *fwd;      /* (n_fwd) a relaying receiver's blocks to pass on */
    int n_fwd, cap_fwd, fwd_done;
    struct wk_seg *seg;      /* (n_seg) fwd by destination */
    int n_seg, cap_seg;
    int no_relay;            /* every receiver from the senders (bench-sync's comparison) */
    long long bytes_in, bytes_out;
    long long chunk;         /* a message's rows: one band of this many bytes (piece_walk) */
    long long max_msg;       /* the largest message this rank posted in the sync, bytes */
    uint64_t *hash;          /* train.verify_syncs: the fingerprint parts in flight */
    int n_hash;              /* a receiver's: one from each sender */
};

struct worker {
    const struct libra_config *cfg;
    const struct device_ops *ops;
    struct device *dev;
    int rank, world;
    struct plan plan;
    struct comms comms;
    struct outbox ob;
    struct wire_buf msg, pack;
    struct dev_inst *inst;   /* the rollout instance this rank belongs to */
    int inst_leader;
    struct wk_train tr;
    struct wk_join join;
    /* liveness (run.heartbeat_s, run.unresponsive_s) */
    double ctl_last;         /* wall time of the last message from rank 0 */
    double hb_last;          /* wall time of the last heartbeat sent */
    struct wire_heartbeat hb;
    struct wk_sync sync;
    int stop;
};

/* worker.c: the pieces of worker_run, for tests that drive a worker by hand. */
void worker_init(struct worker *w, const struct libra_config *cfg, const struct cost_model *cm,
                 const struct workload *wl, int rank, int world, int start_version);
/* Applies a plan as TAG_PLAN does (collective over the world: comms_rebuild). */
void worker_apply_plan(struct worker *w, const struct plan *next);
void worker_free(struct worker *w);

/* worker_rollout.c */
void wr_open(struct worker *w);
void wr_on_turn_req(struct worker *w, const void *msg, size_t len);
int wr_progress(struct worker *w);
/* Before the communicators are rebuilt for next (NULL: shutdown): an instance that
 * does not survive hands its turns back and closes; every instance quiesces. */
void wr_before_plan(struct worker *w, const struct plan *next);
double wr_next_wake(const struct worker *w);

/* worker_train.c */
void wt_on_batch(struct worker *w, const void *msg, size_t len);
int wt_progress(struct worker *w);
/* Completes the rank's part of the step in flight (before a plan or the next batch). */
void wt_settle(struct worker *w);
/* Around a re-split: the hybrid lane's traffic of the ending epoch is drained
 * (before) and joins start (after). */
void wt_before_plan(struct worker *w, const struct plan *next);
/* At the run's end: the step settled, and a lent rank takes every total of the steps
 * done (steps, from rank 0's SHUTDOWN), so its partner's sends complete. */
void wt_before_shutdown(struct worker *w, int steps);
void wt_after_plan(struct worker *w, const struct plan *old);
int wt_join_progress(struct worker *w);
double wt_next_wake(const struct worker *w);
void wt_free(struct worker *w);

/* weight_sync.c */
void ws_on_sync(struct worker *w, const struct wire_sync *s);
int ws_progress(struct worker *w);
void ws_free(struct worker *w);
/* sync_blocks.c: the slices of a TP-t rank of index i for use (enum dev_slice_use),
 * allocated (*n of them; the device's count, no cap). */
struct dev_slice *ws_slices(struct worker *w, int t, int i, int use, int *n);

#endif
