/*
 * Private to src/rollout: the state of the CPU rollout engine (rollout_cpu.h), shared
 * by rollout_cpu.c (the public calls, turn records, results, weights, handback) and
 * rollout_slots.c (admission into decoder slots, the batched decode step, sampling,
 * turn endings, tool returns).
 *
 * Glossary: V vocabulary, S rc.n_slots decoder slots, N rc.slot_capacity tokens per
 * slot.
 *
 * A turn record (struct rc_turn) lives in exactly one place: the queue (waiting for
 * a slot; arrival order under fifo, the last admission round's order under mlfq), a
 * slot (decoding, or waiting for its tool), the done list (finished, not yet taken),
 * the taken list (handed out by rollout_cpu_take, recycled at the next engine call)
 * or the free list. Records and their buffers are reused, so the decode
 * path allocates nothing.
 *
 * A slot remembers the ids its KV cache holds or is to hold (ids[0, n_ids)); the
 * model's own length of the slot (model.ops->len) may be shorter after a weight
 * swap, and the missing part is re-prefilled before the slot is next used. While a
 * turn decodes, ids = context + every generated token but the last; the last sampled
 * token is the next decode input. A slot is
 *   FREE      no owner, nothing cached;
 *   IDLE      cached for trajectory `owner` (its last turn ended at a tool call);
 *   DECODING  a turn generates in it;
 *   TOOL      its turn ended at </tool_call> and the call runs on the tool pool.
 */
#ifndef LIBRA_ROLLOUT_CPU_INTERNAL_H
#define LIBRA_ROLLOUT_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "libra/rollout_cpu.h"
#include "libra/rollout_model.h"
#include "libra/tool_pool.h"

#define RC_PAYLOAD_CAP (ENV_PAYLOAD_MAX + 2) /* <tool_result> + bytes + </tool_result> */

enum slot_state { SLOT_FREE = 0, SLOT_IDLE, SLOT_DECODING, SLOT_TOOL };

struct rc_turn {
    struct rollout_turn_in in; /* in.ctx points at ctx */
    int32_t *ctx;              /* (in.n_ctx) */
    size_t ctx_cap;
    int budget;                /* in.budget clamped to the slot capacity */
    int n_gen;
    int32_t *ids;              /* (budget) generated ids */
    float *logp;               /* (budget) */
    int32_t *ver;              /* (budget) */
    size_t gen_cap;
    int final, partial, tool, tool_status;
    double tool_latency_s;
    double arrival_s;          /* wall_time() at submission (mlfq order and aging) */
    int level;                 /* mlfq level in the current admission round */
    int n_payload;
    int32_t *payload;          /* (RC_PAYLOAD_CAP) */
    struct rc_turn *next_free;
};

struct rc_slot {
    int state;          /* enum slot_state */
    int64_t owner;      /* trajectory id, -1 when FREE */
    int32_t *ids;       /* (N) ids the KV cache holds or is to hold */
    int n_ids;
    uint64_t last_use;  /* engine clock of the last admission or tool return */
    int wanted;         /* IDLE and a queued turn of its owner waits (admission only) */
    struct rc_turn *t;  /* DECODING / TOOL: the turn */
};

/* A growable list of turn records. */
struct rc_list {
    struct rc_turn **t;
    size_t cap;
    int n;
};

struct rollout_cpu {
    struct rollout_cpu_config rc;
    const struct env *env;
    struct rollout_model model;  /* what decodes (rollout_model.h) */
    struct rollout_model *owned; /* the local model rollout_cpu_create made, else NULL */
    int version;                 /* of the model's weights; -1: none yet (nothing decodes) */
    int V;
    struct tool_pool *pool;
    struct rc_slot *slots;       /* (S) */
    int32_t *slot_ids;           /* (S, N) the slots' id lists */
    int *batch_slots;            /* (S) */
    int32_t *batch_tokens;       /* (S) */
    struct rollout_sample *batch_sample; /* (S) */
    int32_t *batch_next;         /* (S) the sampled tokens */
    float *batch_lp;             /* (S) their behaviour log-probs */
    struct tool_job_done *jobs;  /* (S) tool results of one poll */
    struct rc_list queue, done, taken;
    struct rollout_turn_out *outs;
    size_t outs_cap;
    struct rc_turn *free_turns;
    uint64_t clock;
    int64_t tokens;
    double busy_s;
};

/* rollout_cpu.c */
void rcpu_list_push(struct rc_list *l, struct rc_turn *t);

/* rollout_slots.c */
/* Empties slot s (no owner, no cache). */
void rcpu_slot_release(struct rollout_cpu *r, int s);
/* Reports every tool call the pool has finished; returns how many. */
int rcpu_collect_tools(struct rollout_cpu *r);
/* Admits queued turns while slots are available, in arrival order (fifo) or
 * iq_compare order (mlfq); returns how many. */
int rcpu_admit_queued(struct rollout_cpu *r);
/* One batched decode step over every decoding slot; returns the slots advanced. */
int rcpu_decode_once(struct rollout_cpu *r);

#endif
