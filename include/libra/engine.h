/*
 * The emulated rollout instance: continuous batching on a TP-t instance in emulated
 * (virtual) time, with costs from the cost model and tokens from the workload model.
 *
 * Sequences queue, are admitted while their KV tokens fit the instance's capacity
 * (prefill charged for the part of the context not in the instance's prefix cache),
 * decode together (one step costs cost_decode_step_s(t, B, A)), and finish their
 * turn after the workload's number of tokens. A non-final turn then waits for its
 * tool (latency from the workload; tools run beside decode, never blocking it), and
 * the turn result is emitted. A finished turn's context stays in an LRU prefix cache
 * so the trajectory's next turn on this instance prefills only the new tokens;
 * migration to another instance costs a full re-prefill.
 *
 * Time is virtual and driven by the caller: engine_advance(e, v) runs the instance
 * up to virtual time v. Decode is advanced in macro-steps (all running sequences
 * gain k tokens at once, k bounded by the next completion or event), so emulating a
 * 30K-token trajectory costs a handful of iterations, not 30K. The worker maps
 * virtual time to wall time with device.time_scale.
 *
 * Queue discipline (cfg.queue, include/libra/iqueue.h):
 *   fifo  queued sequences are admitted in arrival order; when KV runs out the newest
 *         running sequence is preempted (vLLM's FCFS; the reference's behaviour);
 *   mlfq  queued sequences are admitted in iq_compare order: level (from
 *         req.est_remaining and the tokens generated, aged by the virtual seconds
 *         since the sequence last entered the queue), then arrival; preemption takes
 *         the running sequence of the highest level (aging does not count while
 *         running), the newest among equals.
 *   In both, admission stops at the first sequence in that order whose KV does not
 *   fit (head of line): a large high-priority sequence is not starved by smaller ones
 *   slipping past it.
 */
#ifndef LIBRA_ENGINE_H
#define LIBRA_ENGINE_H

#include <stdint.h>

#include "libra/cost.h"
#include "libra/iqueue.h"
#include "libra/wire.h"
#include "libra/workload.h"

enum eng_seq_state { SEQ_QUEUED = 0, SEQ_RUNNING = 1, SEQ_TOOL = 2 };

struct eng_seq {
    struct wire_turn_req req;
    struct wl_turn turn;  /* the workload's turn (gen_tokens clipped to the budget) */
    int state;            /* enum eng_seq_state */
    int generated;        /* tokens of this turn so far */
    int prefill;          /* context tokens still to prefill on admission */
    int version_first;    /* policy version of the first token generated here (-1: none) */
    double tool_done_v;   /* virtual time the tool returns (SEQ_TOOL) */
    double arrival_v;     /* virtual time of engine_submit (orders equal levels) */
    double queued_v;      /* virtual time it last entered the queue (submit or
                             preemption): aging counts from here. The level's
                             estimate is req.est_remaining (-1 unknown) */
};

struct eng_cache_entry {
    int64_t traj_id;
    int tokens;      /* cached prefix length */
    uint64_t used;   /* LRU stamp */
};

struct engine_config {
    int tp;
    int leader;             /* world rank reported in results */
    int max_turns;          /* rollout.max_turns */
    int max_tokens;         /* rollout.max_tokens */
    int max_batch;          /* sequences decoded together at most */
    uint64_t seed;          /* run.seed */
    struct iqueue_config queue; /* admission order and preemption choice */
};

/* One queued sequence while an mlfq admission round orders the queue. */
struct eng_qent {
    int idx;         /* into engine.seq */
    int level;
    double arrival_v;
};

struct engine {
    struct engine_config cfg;
    const struct cost_model *cm;
    const struct workload *wl;
    double capacity;        /* KV tokens the instance holds */
    double vnow;            /* virtual seconds */
    double blocked_until;   /* no decode before this (weight swap) */
    int version;            /* policy version of the weights; -1 = none yet */
    double busy_v;          /* busy virtual seconds since engine_take_busy */
    struct eng_seq *seq;    /* (n_seq) in arrival order */
    int n_seq, cap_seq;
    struct eng_cache_entry *cache; /* (n_cache) */
    int n_cache, cap_cache;
    uint64_t clock;         /* LRU counter */
    struct eng_qent *order; /* (cap_order) scratch of admit_mlfq */
    int cap_order;
    double resident;        /* KV tokens of running sequences */
    double cached;          /* KV tokens held by the prefix cache */
    int64_t stat_prefill_tokens, stat_decode_tokens, stat_preemptions;
    /* Admissions: every one, and those that waited in the queue first (admitted
     * later than they were queued); the virtual seconds waited; the context tokens
     * found in the prefix cache (the rest is stat_prefill_tokens). */
    int64_t stat_admissions, stat_waited, stat_cache_hit_tokens;
    double stat_wait_s;
};

void engine_init(struct engine *e, const struct engine_config *cfg, const struct cost_model *cm,
                 const struct workload *wl);
void engine_free(struct engine *e);
void engine_submit(struct engine *e, const struct wire_turn_req *req);
/* Runs the instance up to virtual time v; finished turns are appended to out
 * (growable, *n_out / *cap_out). Returns the number appended. */
int engine_advance(struct engine *e, double v, struct wire_turn_result **out, int *n_out,
                   int *cap_out);
/* Virtual time of the next thing that can happen without new input; INFINITY if idle. */
double engine_next_event(const struct engine *e);
/* Everything in flight as results: tool-waiting turns as complete results (tool
 * latency cut short), the others as partial (partial = 1, gen_tokens so far). The
 * engine is empty afterwards. */
int engine_handback(struct engine *e, struct wire_turn_result **out, int *n_out, int *cap_out);
/* New weights of version v arrive; decode pauses for pause_v virtual seconds. */
void engine_set_version(struct engine *e, int version, double pause_v);
/* Busy rank-seconds (virtual) since the last call. */
double engine_take_busy(struct engine *e);
int engine_in_flight(const struct engine *e);
/* The instance's load for the router: sequences queued for admission, sequences
 * running (decoding; tool-waiting ones are neither), and resident / capacity -- the
 * KV of running sequences only: the prefix cache is evictable and not counted. */
void engine_queue_stats(const struct engine *e, int *queued, int *running, double *kv_frac);

#endif
