/*
 * The device seam: everything a worker rank asks of the device it drives, as one
 * table of operations (in the spirit of the Linux VFS file_operations or ggml's
 * backend interface). The worker side (src/worker/) is written once per role against
 * it and never learns which device runs; the controller sees only struct
 * device_info. A device is a folder under src/device/ and one line in the table of
 * src/device/device.c.
 *
 *   emu   src/device/emu/   an emulated GPU: tokens and tool returns from the
 *                           workload model, time from the cost model (scaled)
 *   cpu   src/device/cpu/   the real transformer on OpenBLAS, tensor parallel over
 *                           MPI inside an instance or a training replica
 *   cuda  src/device/cpu/ + src/device/gpu/   the cpu device's host side with the
 *                           decoder and the trainer's forwards, backwards and AdamW
 *                           updates on the rank's GPU (the CUDA module, loaded at
 *                           run time); TP as on the cpu device
 *
 * What the operations cover, by role (every rank calls device_epoch first with the
 * communicators of the plan in force):
 *   rollout instance  every rank of an instance holds one engine; the leader is fed
 *                     turns by rank 0 and reports results, the other members take
 *                     part in its collectives (a TP group). A real device's engine
 *                     prefills, decodes batches of slots, admits and evicts KV and
 *                     samples; the emulated one runs its event engine.
 *   training replica  the rank's share of a step: log-probs of a packed batch,
 *                     backward (into a gradient buffer the worker reduces over the
 *                     data-parallel communicator and the hybrid lane), optimizer step.
 *   weights           the slices of the model a rank holds for any (TP degree, index)
 *                     -- so a weight sync can send each rank exactly its shard --
 *                     staged receives swapped in between decode iterations, and the
 *                     state a lent (hybrid) rank fetches when it joins.
 * Collectives run on communicators the worker hands over (instance, replica,
 * data-parallel); the device never builds job-wide communicators itself.
 *
 * Errors: a device operation that cannot go on calls FATAL (the job ends with one
 * message); operations that return a status say so.
 */
#ifndef LIBRA_DEVICE_H
#define LIBRA_DEVICE_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "libra/config.h"
#include "libra/cost.h"
#include "libra/plan.h"
#include "libra/rates.h"
#include "libra/wire.h"
#include "libra/workload.h"

/* What the rest of the job learns about a device (rank 0 included). */
struct device_info {
    char name[16];
    int has_model;        /* token ids, behaviour log-probs, env rewards, checkpoints;
                             0: turns and rewards come from the workload model */
    int vocab_size;       /* has_model: the ids the model emits are in [0, vocab_size) */
    int64_t n_params;     /* has_model: the model's parameters (checkpoint size) */
    double train_rank_bytes;   /* has_model: memory of a TP-1 training rank (estimate: */
    double rollout_rank_bytes; /* weights, gradients, AdamW, activations / weights, KV) */
    unsigned tp_mask;     /* bit t: rollout instances of TP degree t supported */
    unsigned train_tp_mask; /* bit t: training replicas of TP degree t supported */
    struct rates rates;   /* rollout costs for the router */
    /* The cost model the global resource planner plans with: the configured one for
     * the emulated device, this host measured at start-up for the CPU device. */
    struct cost_model cm;
};

/* What a device is opened with on a worker rank. */
struct device_args {
    const struct libra_config *cfg;
    const struct cost_model *cm;  /* the configured cost model (emu: time) */
    const struct workload *wl;    /* the workload model (emu: tokens) */
    int rank, world;
    int start_version;            /* policy version of the weights every rank starts from */
    double t0;                    /* wall time the worker started (emulated clocks) */
};

/* The communicators and place of a rank in one planning epoch. A rollout rank of a
 * colocated plan (plan->colocated) is also a training replica's rank: it is given its
 * rollout place, trains on the weights it serves with, and is sent a training share
 * only while its instance has no turn in flight (rank 0 sees to it). */
struct device_epoch {
    const struct plan *plan;   /* the plan in force (valid until the next epoch) */
    int role;                  /* enum role (plan.h) */
    int tp, index;             /* rollout: the instance's TP and the rank within it;
                                  train/hybrid: the replica's TP and the rank within it */
    MPI_Comm instance;         /* rollout: the instance's ranks (TP group) */
    MPI_Comm replica;          /* train/hybrid, colocated rollout: the replica's ranks */
    int kept;                  /* rollout: the rank's instance survives from the last epoch */
    MPI_Comm sync;             /* the weight syncs' members (MPI_COMM_NULL: not one) */
};

/* One run of a GPU-to-GPU weight sync (gsync_send / gsync_recv): a block of rows x cols
 * values of this rank's slices whose first value is at `at` (a pointer into a
 * DEV_SLICES_SEND slice's data for a sender, a DEV_SLICES_STAGE slice's for a
 * receiver) and whose rows start `pitch` values apart (pitch = cols, or one row:
 * contiguous), to or from rank `peer` of the sync communicator. The runs of one `group`
 * go as one NCCL group; groups are numbered in one order for the whole sync. A
 * receiver's run with `next` >= 0 is passed on, once received, to that rank of the
 * sync communicator (the next receiver of its relay chain, which lists the same run),
 * as a group of its own after the group's receives. A receiver's run with `feed` 1 is
 * one it sends: a block of what it received in earlier groups, fed to `peer`, the head
 * of another place's chain (a group holds feeds only, or receives only). */
struct dev_gmsg {
    int peer, group;
    const float *at;
    size_t rows, cols, pitch;
    int next;
    int feed;
};

static inline int dev_gmsg_strided(const struct dev_gmsg *m)
{
    return m->rows > 1 && m->pitch != m->cols;
}

/* One block of a model tensor a rank holds: rows [r0, r0 + nr) x cols [c0, c0 + nc)
 * of the full (full_rows x full_cols) tensor number `tensor` (Hugging Face order),
 * stored row-major and contiguous at `data` (NULL when only the geometry is asked). */
struct dev_slice {
    int tensor;
    int64_t full_rows, full_cols;
    int64_t r0, nr, c0, nc;
    float *data;
};

enum dev_slice_use {
    DEV_SLICES_GEOMETRY = 0, /* shapes only (any TP degree and index) */
    DEV_SLICES_SEND = 1,     /* this rank's live weights (a sync sender; with the device's
                                read_slices, data give their layout and read_slices
                                their values) */
    DEV_SLICES_STAGE = 2,    /* this rank's staging buffer (a sync receiver) */
};

/* The step's figures a training rank contributes (stats_buffer), summed over every
 * replica by the worker. */
enum dev_stat {
    DEV_STAT_LOSS, DEV_STAT_PG_LOSS, DEV_STAT_KL, DEV_STAT_ENTROPY, DEV_STAT_CLIPPED,
    DEV_STAT_IS_TRUNCATED, DEV_STAT_RATIO_BEHAV, DEV_STAT_TOKENS,
    DEV_STAT_BUSY_S,     /* compute seconds (filled by the worker) */
    DEV_STAT_FWD_S,      /* this rank's forward and backward wall seconds of its share */
    DEV_STAT_BWD_S,      /* (train_compute; the worker reads them before the reduction) */
    DEV_STAT_COUNT
};

/* How weights went into a rank's model (last_install). */
enum dev_install {
    DEV_INSTALL_NONE = 0,     /* none swapped in yet, or no GPU */
    DEV_INSTALL_STRAIGHT = 1, /* into the GPU model at the safe point */
    DEV_INSTALL_BUFFERED = 2, /* through the sync buffer, filled while decoding went on */
};

/* How a sender issued its last GPU-to-GPU sync (last_send). */
enum dev_send {
    DEV_SEND_NONE = 0,   /* none yet */
    DEV_SEND_BESIDE = 1, /* on the side stream, beside the next training step */
    DEV_SEND_INLINE = 2, /* on the kernels' stream: the next step waits for it */
};

struct device;      /* a device's state on one worker rank */
struct dev_inst;    /* a rollout instance's engine on one of its ranks */

struct device_ops {
    const char *name;
    /* The device's description without opening it (rank 0 and the simulator call
     * it): capabilities and rates. 0, or -1 with a message. */
    int (*describe)(const struct libra_config *cfg, const struct cost_model *cm,
                    struct device_info *out, char *err, size_t errlen);
    struct device *(*open)(const struct device_args *a);
    void (*close)(struct device *d);
    /* The plan changed this rank's place (role, TP, index, communicators). */
    void (*epoch)(struct device *d, const struct device_epoch *e);

    /* ---- rollout instance (see the role's contract above) ---- */
    struct dev_inst *(*inst_open)(struct device *d, int leader);
    /* Leader: one turn request of rank 0 (ctx: the tokens that come with it). */
    void (*inst_submit)(struct dev_inst *in, const struct wire_turn_req *req,
                        const int32_t *ctx);
    /* One iteration. Leader: finished turns are packed into pack as one result batch
     * (wire_batch_begin ... add), their count returned through *n_done. Members: serve
     * the leader's collectives. Returns 1 if anything happened. */
    int (*inst_progress)(struct dev_inst *in, struct wire_buf *pack, int *n_done);
    /* Leader: everything in flight as one result batch (partial turns included); the
     * engine is empty afterwards. Every rank then calls inst_close. */
    void (*inst_handback)(struct dev_inst *in, struct wire_buf *pack);
    /* Before the instance's communicator is rebuilt (every plan): the leader ends its
     * stream of collectives, members serve it to the end. */
    void (*inst_quiesce)(struct dev_inst *in);
    void (*inst_close)(struct dev_inst *in);
    /* Wall time of the instance's next emulated event (INFINITY: none, or real). */
    double (*inst_next_wake)(const struct dev_inst *in);

    /* ---- training replica ---- */
    /* The rank's gradient shard, reduced by the worker (floats; a device that keeps it
     * elsewhere copies it here when asked), and the step's figures (doubles, summed
     * over replicas). */
    float *(*grad_buffer)(struct device *d, size_t *n);
    double *(*stats_buffer)(struct device *d, size_t *n);
    /* This rank's share of a step (msg: its TAG_TRAIN_BATCH message) into the
     * buffers. Returns the wall seconds until the result counts as ready (emulated
     * compute; 0 for a real device, whose work is done on return). */
    double (*train_compute)(struct device *d, const void *msg, size_t len);
    /* Optional (NULL: the worker sums grad_buffer over dp). The rank's gradient summed
     * over dp -- the core replicas' data-parallel communicator; every member calls it
     * at the same point of the step -- where the device keeps it (on its GPU): 1 when
     * done (grad_buffer then reads the sum if asked), 0 when the worker must sum
     * grad_buffer (the same answer on every member). */
    int (*grad_reduce)(struct device *d, MPI_Comm dp);
    /* Emulated wall seconds the data-parallel reduction takes on top of the real one
     * (0 for a real device). */
    double (*train_reduce_extra_s)(struct device *d, int n_replicas);
    /* The reduced gradient and figures are in the buffers: the optimizer step (the
     * weights become version `step`). Fills done's figures (not step / n_replicas). */
    void (*train_apply)(struct device *d, int step, struct wire_train_done *done);
    /* The state a lent rank fetches to join (weights + optimizer) as one float
     * buffer: the partner's to send (snapshot taken now), the joiner's to receive
     * into; restore installs it as version `version`. */
    float *(*join_buffer)(struct device *d, int sending, size_t *n);
    void (*join_restore)(struct device *d, int version);
    /* Emulated wall seconds a join's fetch takes on top of the real transfer. */
    double (*join_extra_s)(struct device *d, int dp);
    /* Optional (NULL: a training state does not depend on the shard, and is handed over
     * as it is). A plan that changes the training replicas' TP degree: every rank of
     * the old root replica calls state_whole(d, 1) together before the re-split
     * (collective over that replica); its rank 0 then holds the whole model's training
     * state (1 returned; 0 elsewhere), state_cut gives it cut to the shard (t, i) in
     * join_buffer's layout (valid until the next call), and state_whole(d, 0) drops it. */
    int (*state_whole)(struct device *d, int keep);
    float *(*state_cut)(struct device *d, int t, int i, size_t *n);

    /* ---- weights ---- */
    /* Slices of a rank of TP degree t, index i (see enum dev_slice_use); the count
     * (like snprintf: only the first max are written; out may be NULL when max is 0). */
    int (*slices)(struct device *d, int t, int i, int use, struct dev_slice *out, int max);
    /* Optional (NULL: DEV_SLICES_SEND's data hold the values): the values of this rank's
     * live slices s[0 .. n) (DEV_SLICES_SEND's), wherever the device keeps them, to the
     * host: float32 to f32 + off[m] and rounded to bf16 (st_f32_to_bf16) to b16 + off[m]
     * for slice m, each unless NULL. */
    void (*read_slices)(struct device *d, const struct dev_slice *s, int n, const size_t *off,
                        float *f32, uint16_t *b16);
    /* Optional (NULL: the worker allocates it): a buffer of n bf16 for a sync sender's
     * copy of its slices, the device's (page-locked where it can), the same one while n
     * does not grow; valid until the next call. */
    uint16_t *(*send_bf16)(struct device *d, size_t n);
    /* The staging buffer holds the complete weights of version v for this rank's
     * shard: they are swapped in at the next safe point (never mid-iteration). */
    void (*weights_staged)(struct device *d, int version);
    /* Optional (NULL: nothing staged outlives a sync): a sync is about to write the
     * staging buffer, so weights staged there and not yet swapped in are forgotten --
     * the safe point must not install a buffer the new sync is half way through. */
    void (*weights_unstage)(struct device *d);
    /* Optional (NULL: bf16 syncs are widened into the staging buffer): where a bf16
     * sync's value for the staging buffer's element `at` lands (at: within a
     * DEV_SLICES_STAGE slice; the same offsets for every slice), or NULL if this rank
     * takes bf16 weights only through that buffer. A sync that landed there ends with
     * weights_staged_bf16 instead of weights_staged. */
    uint16_t *(*stage_bf16)(struct device *d, const float *at);
    void (*weights_staged_bf16)(struct device *d, int version);
    /* 1: a rank that only serves rollouts decodes bf16 weights (rounded to nearest
     * even from the float32 ones), so the weight syncs to it carry bf16 -- half the
     * bytes, the same weights decoded. Its float32 copy then holds those rounded
     * values, which is all its engine reads; a rank that trains again takes the
     * training state from the replicas, never from that copy. */
    int sync_bf16;
    /* Optional (NULL: every sync goes through MPI): bf16 syncs from GPU to GPU. The
     * epoch (collective over its sync communicator) decides, the same on every member,
     * whether this epoch's syncs to the ranks that only serve rollouts may (gsync_on 1):
     * NCCL where every member drives a GPU of its own. Then:
     *   gsync_send   a sender's runs, from the bf16 copy of its weights on its GPU,
     *                issued now, beside its later kernels (the next optimizer step's
     *                update waits for them before it overwrites that copy);
     *   gsync_recv   a receiver's runs of version `version`, issued at the instance's
     *                next safe point (every rank of the instance together): into its
     *                sync buffer (last_install) while decoding goes on, taken in at the
     *                first safe point at which every rank of the instance has them; or
     *                straight into its GPU model. That safe point swaps the version in;
     *   gsync_landed a receiver: 1 once it has.
     * The runs of one pair of ranks are listed in the same order on both sides, and
     * each side's groups in the sync's order; a strided run is a group of its own
     * (packed into, or unpacked from, a buffer on the GPU). */
    int (*gsync_on)(const struct device *d);
    void (*gsync_send)(struct device *d, const struct dev_gmsg *m, int n);
    void (*gsync_recv)(struct device *d, const struct dev_gmsg *m, int n, int version);
    int (*gsync_landed)(const struct device *d);
    /* The policy version of the weights this rank holds (-1: none yet). */
    int (*version)(const struct device *d);
    /* Optional: how the last weights swapped in went into the rank's model
     * (DEV_INSTALL_*): device cuda's rollout ranks take a sync through their sync
     * buffer -- a second copy on the GPU, filled while decoding goes on
     * (rollout.sync_buffer) -- where they have one. */
    int (*last_install)(const struct device *d);
    /* Optional: how this rank sent its last GPU-to-GPU sync (DEV_SEND_*): beside the
     * next step on the side stream, or inline with train.sync_side_stream = 0. */
    int (*last_send)(const struct device *d);
    /* A fingerprint of the weights (replicas compare theirs after every step). */
    uint64_t (*weights_hash)(const struct device *d);
    /* Training root: the weights and optimizer state as a model file in dir. 0, or -1
     * with a message (the emulated device has nothing to save). */
    int (*save)(struct device *d, const char *dir, char *err, size_t errlen);
};

/* The device named name (device.type), NULL if this build has none. */
const struct device_ops *device_find(const char *name);
/* "emu, cpu": the devices of this build (for messages). */
const char *device_names(void);

#endif
