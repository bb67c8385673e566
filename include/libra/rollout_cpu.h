/*
 * The rollout engine of the CPU device: continuous batching of multi-turn
 * trajectories on the real transformer (tfm_decoder), with tools on a thread pool.
 *
 * A turn arrives with its trajectory's whole context (token ids). The engine keeps
 * one decode slot per trajectory it has seen recently: when the slot's cached ids are
 * a prefix of the new context only the rest is prefilled (the tool payload, usually),
 * else the least recently used idle slot is taken and the context prefilled. Each
 * iteration (rollout_cpu_step): admit waiting turns into free slots, one batched
 * decode step over every decoding slot, sample (sampler.h; key = the turn's rng_key),
 * and collect finished tool calls. A turn ends at
 *   </tool_call>  -> the call runs on the tool pool; the turn is reported when the
 *                    tool returns, with the payload ids (env_payload_tokens); on the
 *                    last allowed turn (turn + 1 == max_turns) it is final instead;
 *   </answer>, <|eos|>           -> final;
 *   its budget or the slot's capacity -> final (truncated).
 * Every generated token records its behaviour log-prob and the policy version that
 * produced it. rollout_cpu_set_weights swaps the parameters between iterations: the
 * caches built with the old weights are dropped and rebuilt by prefill (running turns
 * continue; nothing is drained or discarded).
 *
 * Admission order (rc.queue, include/libra/iqueue.h): fifo admits waiting turns in
 * arrival order; mlfq orders them by iq_compare -- level from the turn's
 * est_remaining, aged by the wall seconds it has waited, then arrival. Aging makes
 * the mlfq order depend on timing, but sampling is keyed by (seed, rng_key,
 * position), so the order changes only latency, never a trajectory's tokens. There
 * is no preemption: a decoding turn keeps its slot until it ends.
 */
#ifndef LIBRA_ROLLOUT_CPU_H
#define LIBRA_ROLLOUT_CPU_H

#include <stdint.h>

#include "libra/env.h"
#include "libra/iqueue.h"
#include "libra/rollout_model.h"
#include "libra/sampler.h"
#include "libra/tfm.h"

struct rollout_cpu_config {
    int n_slots;         /* sequences decoded together at most */
    int slot_capacity;   /* context tokens per slot (>= rollout.max_tokens) */
    int prefill_chunk;
    int max_turns;
    float temperature, top_p; /* sampling of non-greedy turns */
    int top_k;
    uint64_t seed;
    int tool_threads;
    double tool_timeout_s;
    struct iqueue_config queue; /* admission order of waiting turns (zero: fifo) */
};

struct rollout_turn_in {
    int64_t traj_id;
    int64_t rng_key;     /* sampler stream: tokens are keyed by (seed, rng_key, position) */
    int turn;
    int budget;          /* tokens this turn may generate */
    int greedy;          /* evaluation: temperature 0 */
    int n_ctx;
    const int32_t *ctx;  /* the whole context so far (copied) */
    int est_remaining;   /* router's estimate of the remaining decode tokens; -1 unknown
                            (orders the queue under mlfq only) */
};

struct rollout_turn_out {
    int64_t traj_id;
    int turn;
    int final;           /* the trajectory ends with this turn */
    int partial;         /* handed back before the turn finished */
    int n_gen;
    int32_t *ids;        /* (n_gen) generated ids, the stop token included */
    float *logp;         /* (n_gen) behaviour log-probs */
    int32_t *versions;   /* (n_gen) policy version of each token */
    int tool;            /* enum env_tool_id, -1 none */
    int tool_status;     /* enum tool_status */
    double tool_latency_s;
    int n_payload;
    int32_t *payload;    /* (n_payload) tool-result ids to append */
};

struct rollout_cpu;

/* The engine on the whole model of this rank (a local rollout_model over a copy of
 * params); env must outlive the engine. */
struct rollout_cpu *rollout_cpu_create(const struct tfm_config *mc, const float *params,
                                       int version, const struct env *env,
                                       const struct rollout_cpu_config *rc);
/* The engine on a model someone else owns (a device's tensor-parallel instance):
 * model must outlive the engine. version -1: no weights yet -- turns queue, nothing
 * is admitted or decoded until rollout_cpu_weights_changed. */
struct rollout_cpu *rollout_cpu_create_on(const struct rollout_model *model, int version,
                                          const struct env *env,
                                          const struct rollout_cpu_config *rc);
void rollout_cpu_free(struct rollout_cpu *r);
/* Queues a turn (FATAL if the trajectory already has one in the engine). */
void rollout_cpu_submit(struct rollout_cpu *r, const struct rollout_turn_in *in);
/* One iteration; returns 1 if anything happened (tokens, admissions, tool returns). */
int rollout_cpu_step(struct rollout_cpu *r);
/* Finished turns since the last call: *out points at n results owned by the engine,
 * valid until the next call to any rollout_cpu function. */
int rollout_cpu_take(struct rollout_cpu *r, const struct rollout_turn_out **out);
/* Turns queued, decoding or waiting for a tool. */
int rollout_cpu_busy(const struct rollout_cpu *r);
/* New parameters (copied) of version v, used from the next iteration on (engines of
 * rollout_cpu_create only). */
void rollout_cpu_set_weights(struct rollout_cpu *r, const float *params, int version);
/* The model behind the engine now holds the weights of version v: every cache is
 * dropped (rebuilt by prefill at the slots' next use). */
void rollout_cpu_weights_changed(struct rollout_cpu *r, int version);
/* Hands back every unfinished turn: turns waiting for a tool are completed first
 * (bounded by the tool timeout); queued and decoding ones come back with partial = 1
 * and the tokens generated so far. Results via rollout_cpu_take. */
void rollout_cpu_handback(struct rollout_cpu *r);
/* The instance's load for the router: turns queued for a slot, turns decoding, and
 * the fraction of slots holding a turn (decoding or waiting for its tool; idle
 * cached slots are reusable and not counted). Reads only: results of the last
 * rollout_cpu_take stay valid. */
void rollout_cpu_queue_stats(const struct rollout_cpu *r, int *queued, int *running,
                             double *kv_frac);
/* Decoded tokens and busy seconds since the last call (metrics). */
void rollout_cpu_take_counters(struct rollout_cpu *r, int64_t *tokens, double *busy_s);

#endif
