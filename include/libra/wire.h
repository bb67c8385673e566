/*
 * Every message tag and wire struct of the control plane, in one place.
 *
 * Turns travel in batches (struct wire_batch_hdr, then count items): one message per
 * instance per controller loop iteration, not one per turn, which is what lets rank 0
 * sustain its dispatch rate when many ranks share few cores.
 *
 * Messages are fixed headers followed by variable arrays, sent as MPI_BYTE between
 * ranks of one job (one architecture, one compiler: the layouts below have no
 * implicit padding and are checked by static asserts). They carry token ids and
 * counts, never text. In the emulated backend a turn carries counts only
 * (n_tokens = 0): the tokens themselves are synthetic and never materialised.
 *
 * Who sends what:
 *   rank 0 -> rollout leader   TAG_TURN_REQ       a batch of turns (one per trajectory)
 *   rollout leader -> rank 0   TAG_TURN_RESULT    a batch of finished turns and tool returns
 *   rollout leader -> rank 0   TAG_HANDBACK       a batch: in-flight turns of a dissolved
 *                                                 instance (partial or awaiting rank 0)
 *   rank 0 -> every worker     TAG_PLAN           the next epoch's plan (then all split)
 *   rank 0 -> sync members     TAG_SYNC           send / receive the weights of version v
 *                                                 now (shard-matched, worker weight_sync.c)
 *   sync member -> rank 0      TAG_SYNC_DONE      weights of version v received/sent
 *   rank 0 -> train, hybrid    TAG_TRAIN_BATCH    this rank's share of a step's batch
 *   train root -> rank 0       TAG_TRAIN_DONE     the optimizer step is done
 *   train, hybrid -> rank 0    TAG_TRAIN_TIMES    this rank's phases of a step it had a share
 *                                                 of (forward, backward, reduction, optimizer)
 *   hybrid -> train root       TAG_HYBRID_GRAD    (on the hybrid lane) a lent replica's gradient
 *   rank 0 -> every worker     TAG_SHUTDOWN       finish: hand back and exit the loop (int32:
 *                                                 the steps done; lent ranks take their totals)
 *   rank 0 -> train root       TAG_CKPT           write the model + optimizer into a directory
 *   train root -> rank 0       TAG_CKPT_DONE      done (or the error)
 *   lent rank -> rank 0        TAG_HYBRID_READY   joined: weights and optimizer shard fetched
 *   old root replica -> a new  TAG_TRAIN_STATE    at a re-split that adds training ranks: the
 *     core training rank                          weights and optimizer state (worker to
 *                                                 worker, while both apply the plan)
 *   worker <-> rank 0          TAG_HEARTBEAT      alive (run.heartbeat_s; liveness)
 *
 * The cpu device carries the real data: a turn request the trajectory's whole
 * context, a turn result the generated ids with their behaviour log-probs and policy
 * versions plus the tool payload ids, a training item the sequence with its loss mask
 * and behaviour log-probs.
 */
#ifndef LIBRA_WIRE_H
#define LIBRA_WIRE_H

#include <stddef.h>
#include <mpi.h>
#include <stdint.h>

enum wire_tag {
    TAG_TURN_REQ = 101,
    TAG_TURN_RESULT = 102,
    TAG_HANDBACK = 103,
    TAG_PLAN = 104,
    TAG_SYNC = 105,
    TAG_SYNC_DONE = 106,
    TAG_TRAIN_BATCH = 107,
    TAG_TRAIN_DONE = 108,
    TAG_HYBRID_GRAD = 109,
    TAG_SHUTDOWN = 110,
    TAG_CKPT = 111,
    TAG_CKPT_DONE = 112,
    TAG_HYBRID_READY = 113,
    TAG_TRAIN_STATE = 114,
    TAG_HEARTBEAT = 115,
    TAG_TRAIN_TIMES = 116,
};

/* TAG_HEARTBEAT: a worker tells rank 0 every run.heartbeat_s that it is alive (and on
 * which host); rank 0 sends workers an empty one at the same period. */
struct wire_heartbeat {
    char host[64];
};

enum wire_turn_flags { WIRE_TURN_GREEDY = 1 /* evaluation: decode greedily */ };

const char *wire_tag_name(int tag);

/* One turn to generate. Followed by n_tokens int32 token ids: the context the
 * instance does not already hold (ctx_tokens - n_tokens are expected cached). */
struct wire_turn_req {
    int64_t traj_id;
    int64_t prompt_id;
    int64_t rng_key;          /* sampling stream of the trajectory (cpu) */
    int32_t turn;             /* 0-based turn index */
    int32_t ctx_tokens;       /* context length before this turn */
    int32_t budget;           /* tokens this turn may generate at most */
    int32_t resume_generated; /* tokens of this turn generated before a hand-back */
    int32_t n_failures;       /* failed / timed-out tool returns so far */
    int32_t last_failed;      /* last tool return failed or timed out */
    int32_t last_large;       /* last tool payload was large */
    int32_t step_start;       /* training step when the trajectory started (drift) */
    int32_t n_tokens;         /* token ids that follow */
    int32_t flags;            /* enum wire_turn_flags */
    int32_t est_remaining;    /* router's estimate of the trajectory's remaining decode
                                 tokens (orders the instance queue); -1 unknown */
    int32_t pad_;             /* zero */
};

/* A finished (or handed-back) turn. Followed by n_tokens int32 ids, n_tokens float
 * behaviour log-probs, n_tokens int32 policy versions, then n_payload int32 ids of
 * the tool return (cpu; in emulation payload_tokens is a count and n_payload 0). */
struct wire_turn_result {
    int64_t traj_id;
    int32_t turn;
    int32_t leader;           /* world rank of the instance that ran it */
    int32_t gen_tokens;       /* tokens of this turn generated (incl. resumed ones) */
    int32_t version_first;    /* policy version of the turn's first new token */
    int32_t version_last;     /* policy version of its last token */
    int32_t final;            /* trajectory ends after this turn */
    int32_t partial;          /* handed back mid-turn: resume from gen_tokens */
    int32_t tool;             /* tool index, -1 if none */
    int32_t tool_status;      /* enum tool_status */
    int32_t payload_tokens;   /* tool-return tokens to append */
    double tool_latency_s;    /* emulated seconds the tool took */
    double busy_rank_s;       /* instance busy rank-seconds since the last report */
    int32_t n_tokens;         /* token ids (and log-probs, versions) that follow */
    int32_t n_payload;        /* tool-return ids that follow them */
    /* The instance's state when the batch was packed (first result of a batch only;
     * -1 / negative elsewhere): turns waiting for admission, turns running, and the
     * fraction of its KV capacity in use. */
    int32_t inst_queued, inst_running;
    double inst_kv_frac;
};

/* Head of a batch message: count items follow (turn requests or turn results). */
struct wire_batch_hdr {
    int32_t count;
    int32_t sender; /* world rank that packed it */
};

struct wire_sync {
    int32_t version;
    int32_t sync_id;
};

struct wire_sync_done {
    int32_t version;
    int32_t sync_id;
    int64_t bytes;   /* weight bytes this rank received (rollout) or sent (root replica) */
};

/* One trajectory of a training share; with has_data (cpu) followed by tokens int32
 * ids, tokens float behaviour log-probs and tokens uint8 loss-mask bytes padded to a
 * multiple of 8. */
struct wire_train_item {
    int64_t traj_id;
    int32_t tokens;      /* prompt + generated + tool tokens */
    int32_t gen_tokens;  /* tokens with loss mask 1 */
    double advantage;
    int32_t has_data;
    int32_t pad_;
};

/* A training rank's share of one step; followed by n_items items (above). */
struct wire_train_batch {
    int32_t step;          /* the step being computed (1-based) */
    int32_t version;       /* policy version the batch is trained at */
    int32_t n_items;
    int32_t n_replicas;    /* data-parallel replicas taking part (core + active lent) */
    int32_t replica_size;  /* ranks per replica (train tp x pp); each holds the share */
    int32_t hybrid_ranks;  /* lent ranks whose gradients the root collects this step */
    int64_t global_tokens; /* tokens in the whole batch (loss normalisation) */
    int64_t global_gen_tokens;
};

struct wire_train_done {
    int32_t step;
    int32_t n_replicas;
    double compute_s;      /* slowest replica's compute, wall seconds */
    double comm_s;         /* the root's end of compute -> optimizer step: gradient
                              reduction and the lent gradients, wall seconds */
    double busy_rank_s;    /* compute rank-seconds over all replicas */
    double fwd_s, bwd_s;   /* the root's forward and backward wall seconds (part of compute_s;
                              emulated: the cost model's compute split 1 : 2 by FLOPs) */
    double opt_s;          /* the root's optimizer step, wall seconds */
    double grad_norm;      /* norm of the reduced gradient */
    /* cpu: the GRPO objective over the whole batch (struct grpo_stats, reduced) */
    double loss, pg_loss, kl, entropy, clipped, is_truncated, ratio_behav, tokens;
    int32_t params_identical; /* cpu: every replica's parameters hash the same */
    int32_t nonfinite;        /* the loss or the gradient norm was NaN / infinite: the step
                                 was not applied (weights as before) */
    char bad_tensor[96];      /* then: the first tensor whose gradient is not finite, or
                                 "" (only the loss) */
};

/* One training rank's phases of step `step`, sent when its optimizer step is done:
 * forward and backward (its share), then everything up to the optimizer step (the
 * gradient reduction, the lent gradients, a lent replica's wait for its total), then
 * the optimizer step. No clock is shared between ranks: rank 0 places the share's
 * start age_s before the message arrived (message latency shifts it later). */
struct wire_train_times {
    int32_t step;
    int32_t rank;
    int32_t hybrid;        /* 1: a lent replica's rank */
    int32_t replica;       /* data-parallel index of its replica (lent: after the core's) */
    double fwd_s, bwd_s;   /* of compute_s */
    double compute_s;      /* its share (emulated: until the modelled time passed) */
    double reduce_s;       /* end of compute -> optimizer step */
    double opt_s;
    double age_s;          /* start of the share -> this message sent */
};

/* rank 0 -> train root: write model.h5 (weights + optimizer) into dir. */
struct wire_ckpt {
    int32_t step;
    int32_t version;
    char dir[1024];
};

struct wire_ckpt_done {
    int32_t step;
    int32_t ok;
    char error[512];
};

/* The head of a hybrid's gradient message; followed by the gradient doubles. */
struct wire_hybrid_grad {
    int32_t step;
    int32_t n;
    double compute_s;
};

/* A lent rank has fetched what it needs; epoch = the plan epoch that lent it, so a
 * READY from a join that was cancelled or rolled back is recognised as stale. */
struct wire_hybrid_ready {
    int32_t epoch;
    int32_t rank;
};

/* A growable byte buffer for packing variable-length messages. */
struct wire_buf {
    char *data;
    size_t len, cap;
};

void wire_buf_reset(struct wire_buf *b);
void wire_buf_put(struct wire_buf *b, const void *p, size_t n);
void wire_buf_free(struct wire_buf *b);
/* Receives the message st describes (already probed on comm) into b, grown to fit. */
void wire_recv(struct wire_buf *b, const MPI_Status *st, MPI_Comm comm);

/* Batches: begin (writes the header), add items, then send b->data, b->len. */
void wire_batch_begin(struct wire_buf *b, int32_t sender);
void wire_batch_add_turn_req(struct wire_buf *b, const struct wire_turn_req *h,
                             const int32_t *tokens);
/* tokens, logprobs, versions: h->n_tokens each; payload: h->n_payload. */
void wire_batch_add_turn_result(struct wire_buf *b, const struct wire_turn_result *h,
                                const int32_t *tokens, const float *logprobs,
                                const int32_t *versions, const int32_t *payload);
int32_t wire_batch_count(const struct wire_buf *b);

/* Reading a batch: every item is validated against the bytes left; the returned
 * array pointers point into the message. */
struct wire_reader {
    const char *p;
    size_t left;
    int32_t remaining;
    int32_t sender;
};

/* Returns the item count, or -1 if the header is malformed. */
int wire_reader_init(struct wire_reader *r, const void *msg, size_t len);
/* 1: an item was read; 0: the batch is done (and had no trailing bytes); -1: malformed. */
int wire_next_turn_req(struct wire_reader *r, struct wire_turn_req *h, const int32_t **tokens);
/* The turn result's arrays, pointing into the message (see wire_turn_result). */
struct wire_turn_arrays {
    const int32_t *tokens;
    const float *logprobs;
    const int32_t *versions;
    const int32_t *payload;
};
int wire_next_turn_result(struct wire_reader *r, struct wire_turn_result *h,
                          struct wire_turn_arrays *a);

/* Training shares: the header, then items added one by one (ids, logp, mask NULL
 * unless it->has_data). */
void wire_train_batch_begin(struct wire_buf *b, const struct wire_train_batch *h);
void wire_train_batch_add(struct wire_buf *b, const struct wire_train_item *it,
                          const int32_t *ids, const float *logp, const uint8_t *mask);
/* Reads the header (0, or -1 if malformed) and sets up r for the items. */
int wire_train_batch_read(struct wire_reader *r, const void *msg, size_t len,
                          struct wire_train_batch *h);
/* 1: an item (arrays point into the message, NULL without data); 0: done; -1: malformed. */
int wire_next_train_item(struct wire_reader *r, struct wire_train_item *it, const int32_t **ids,
                         const float **logp, const uint8_t **mask);

#endif
