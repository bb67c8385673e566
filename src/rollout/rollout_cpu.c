/*
 * The CPU rollout engine (include/libra/rollout_cpu.h): its lifetime, turn
 * submission, results, weight swaps, handback and counters. The slots and the decode
 * loop are in rollout_slots.c; the shared state and its invariants in
 * rollout_cpu_internal.h.
 *
 * Contract details beyond the header:
 *  - A turn whose context leaves no room in a slot (n_ctx >= slot_capacity), or whose
 *    budget is <= 0, is final at once with 0 tokens; a budget that does not fit is
 *    clamped to slot_capacity - n_ctx (the turn then ends as truncated, final).
 *  - A context id outside [0, V), an empty context, or a second turn of a trajectory
 *    already in the engine is a caller bug: FATAL.
 *  - rollout_cpu_busy may be called between take and the use of its results; every
 *    other call recycles the storage of the last take.
 *  - Handback keeps the IDLE slots' caches (a handed-back trajectory that returns can
 *    still reuse them); the slots of handed-back turns become FREE.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include "libra/rollout_cpu.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libra/log.h"
#include "libra/tool_status.h"
#include "rollout_cpu_internal.h"

/* ---- turn records and lists ---- */

static struct rc_turn *turn_get(struct rollout_cpu *r)
{
    struct rc_turn *t = r->free_turns;
    if (t) {
        r->free_turns = t->next_free;
    } else {
        t = xcalloc(1, sizeof *t);
        t->payload = xmalloc(RC_PAYLOAD_CAP * sizeof *t->payload);
    }
    t->next_free = NULL;
    t->n_gen = t->n_payload = 0;
    t->final = t->partial = 0;
    t->tool = -1;
    t->tool_status = TOOL_NONE;
    t->tool_latency_s = 0;
    return t;
}

static void turn_free(struct rc_turn *t)
{
    free(t->ctx);
    free(t->ids);
    free(t->logp);
    free(t->ver);
    free(t->payload);
    free(t);
}

void rcpu_list_push(struct rc_list *l, struct rc_turn *t)
{
    XGROW(l->t, l->cap, (size_t)l->n + 1);
    l->t[l->n++] = t;
}

/* The results handed out by the last rollout_cpu_take expire at the next call. */
static void recycle_taken(struct rollout_cpu *r)
{
    for (int i = 0; i < r->taken.n; i++) {
        r->taken.t[i]->next_free = r->free_turns;
        r->free_turns = r->taken.t[i];
    }
    r->taken.n = 0;
}

/* ---- lifecycle ---- */

static void run_tool(void *ctx, const char *call, size_t len, double deadline,
                     struct env_tool_result *out)
{
    const struct rollout_cpu *r = ctx; /* only r->env is read (immutable, thread-safe) */
    env_tool(r->env, call, len, deadline, out);
}

static void check_config(const struct tfm_config *mc, const struct env *env,
                         const struct rollout_cpu_config *rc)
{
    if (mc->vocab_size < env->vocab->size)
        FATAL("rollout_cpu_create: the model's vocabulary (%d ids) is smaller than its "
              "tokenizer's (%s, %d ids)", mc->vocab_size, env->vocab->name,
              (int)env->vocab->size);
    if (rc->n_slots < 1 || rc->slot_capacity < 2 || rc->prefill_chunk < 1 || rc->max_turns < 1 ||
        rc->tool_threads < 1 || !(rc->tool_timeout_s > 0))
        FATAL("rollout_cpu_create: n_slots %d, slot_capacity %d, prefill_chunk %d, max_turns %d, "
              "tool_threads %d, tool_timeout_s %g: each must be positive (capacity >= 2)",
              rc->n_slots, rc->slot_capacity, rc->prefill_chunk, rc->max_turns, rc->tool_threads,
              rc->tool_timeout_s);
    if (!(rc->temperature >= 0) || !(rc->top_p > 0 && rc->top_p <= 1))
        FATAL("rollout_cpu_create: temperature %g must be >= 0 and top_p %g in (0, 1]",
              (double)rc->temperature, (double)rc->top_p);
}

struct rollout_cpu *rollout_cpu_create_on(const struct rollout_model *model, int version,
                                          const struct env *env,
                                          const struct rollout_cpu_config *rc)
{
    struct tfm_config mc = {.vocab_size = model->vocab_size};
    check_config(&mc, env, rc);
    struct rollout_cpu *r = xcalloc(1, sizeof *r);
    r->rc = *rc;
    r->env = env;
    r->version = version;
    r->V = model->vocab_size;
    r->model = *model;
    r->pool = tool_pool_create(rc->tool_threads, rc->tool_timeout_s, run_tool, r);
    size_t S = (size_t)rc->n_slots, N = (size_t)rc->slot_capacity;
    r->slots = xcalloc(S, sizeof *r->slots);
    r->slot_ids = xmalloc(S * N * sizeof *r->slot_ids);
    for (size_t s = 0; s < S; s++) {
        r->slots[s].owner = -1;
        r->slots[s].ids = r->slot_ids + s * N;
    }
    r->batch_slots = xmalloc(S * sizeof *r->batch_slots);
    r->batch_tokens = xmalloc(S * sizeof *r->batch_tokens);
    r->batch_sample = xmalloc(S * sizeof *r->batch_sample);
    r->batch_next = xmalloc(S * sizeof *r->batch_next);
    r->batch_lp = xmalloc(S * sizeof *r->batch_lp);
    r->jobs = xmalloc(S * sizeof *r->jobs);
    return r;
}

struct rollout_cpu *rollout_cpu_create(const struct tfm_config *mc, const float *params,
                                       int version, const struct env *env,
                                       const struct rollout_cpu_config *rc)
{
    check_config(mc, env, rc);
    struct rollout_model *m = rollout_model_local_create(mc, params, rc->n_slots,
                                                         rc->slot_capacity, rc->prefill_chunk);
    struct rollout_cpu *r = rollout_cpu_create_on(m, version, env, rc);
    r->owned = m;
    return r;
}

void rollout_cpu_free(struct rollout_cpu *r)
{
    if (!r) return;
    tool_pool_free(r->pool); /* first: its threads read r->env through r */
    for (int s = 0; s < r->rc.n_slots; s++)
        if (r->slots[s].t) turn_free(r->slots[s].t);
    struct rc_list *lists[] = {&r->queue, &r->done, &r->taken};
    for (size_t k = 0; k < sizeof lists / sizeof lists[0]; k++) {
        for (int i = 0; i < lists[k]->n; i++) turn_free(lists[k]->t[i]);
        free(lists[k]->t);
    }
    while (r->free_turns) {
        struct rc_turn *t = r->free_turns;
        r->free_turns = t->next_free;
        turn_free(t);
    }
    free(r->outs);
    free(r->jobs);
    free(r->batch_lp);
    free(r->batch_next);
    free(r->batch_sample);
    free(r->batch_tokens);
    free(r->batch_slots);
    free(r->slot_ids);
    free(r->slots);
    rollout_model_local_free(r->owned);
    free(r);
}

/* ---- submission and the iteration ---- */

void rollout_cpu_submit(struct rollout_cpu *r, const struct rollout_turn_in *in)
{
    recycle_taken(r);
    if (in->n_ctx < 1 || !in->ctx)
        FATAL("rollout_cpu_submit: trajectory %lld turn %d has an empty context",
              (long long)in->traj_id, in->turn);
    for (int i = 0; i < in->n_ctx; i++)
        if (in->ctx[i] < 0 || in->ctx[i] >= r->V)
            FATAL("rollout_cpu_submit: trajectory %lld: context id %d at %d outside [0, %d)",
                  (long long)in->traj_id, in->ctx[i], i, r->V);
    for (int i = 0; i < r->queue.n; i++)
        if (r->queue.t[i]->in.traj_id == in->traj_id)
            FATAL("rollout_cpu_submit: trajectory %lld already has a queued turn",
                  (long long)in->traj_id);
    for (int s = 0; s < r->rc.n_slots; s++)
        if (r->slots[s].t && r->slots[s].t->in.traj_id == in->traj_id)
            FATAL("rollout_cpu_submit: trajectory %lld already has a running turn",
                  (long long)in->traj_id);

    struct rc_turn *t = turn_get(r);
    t->in = *in;
    XGROW(t->ctx, t->ctx_cap, (size_t)in->n_ctx);
    memcpy(t->ctx, in->ctx, (size_t)in->n_ctx * sizeof *t->ctx);
    t->in.ctx = t->ctx;
    t->arrival_s = wall_time();
    t->level = 0;
    int room = r->rc.slot_capacity - in->n_ctx; /* context + generated ids must fit */
    t->budget = in->budget < room ? in->budget : room;
    if (t->budget <= 0) { /* nothing can be generated: the trajectory ends here */
        t->budget = 0;
        t->final = 1;
        rcpu_list_push(&r->done, t);
        return;
    }
    if ((size_t)t->budget > t->gen_cap) {
        t->gen_cap = (size_t)t->budget;
        t->ids = xrealloc(t->ids, t->gen_cap * sizeof *t->ids);
        t->logp = xrealloc(t->logp, t->gen_cap * sizeof *t->logp);
        t->ver = xrealloc(t->ver, t->gen_cap * sizeof *t->ver);
    }
    rcpu_list_push(&r->queue, t);
}

int rollout_cpu_step(struct rollout_cpu *r)
{
    recycle_taken(r);
    double t0 = wall_time();
    int did = rcpu_collect_tools(r);
    if (r->version >= 0) { /* no weights yet (a re-sharded instance): turns wait */
        did += rcpu_admit_queued(r);
        did += rcpu_decode_once(r);
    }
    if (did) r->busy_s += wall_time() - t0;
    return did > 0;
}

/* ---- results, weights, handback ---- */

int rollout_cpu_take(struct rollout_cpu *r, const struct rollout_turn_out **out)
{
    recycle_taken(r);
    int n = r->done.n;
    XGROW(r->outs, r->outs_cap, (size_t)(n > 0 ? n : 1));
    for (int i = 0; i < n; i++) {
        const struct rc_turn *t = r->done.t[i];
        r->outs[i] = (struct rollout_turn_out){
            .traj_id = t->in.traj_id, .turn = t->in.turn, .final = t->final,
            .partial = t->partial, .n_gen = t->n_gen, .ids = t->ids, .logp = t->logp,
            .versions = t->ver, .tool = t->tool, .tool_status = t->tool_status,
            .tool_latency_s = t->tool_latency_s, .n_payload = t->n_payload,
            .payload = t->payload};
    }
    struct rc_list swap = r->taken; /* done becomes taken (empty after recycle_taken) */
    r->taken = r->done;
    r->done = swap;
    *out = r->outs;
    return n;
}

int rollout_cpu_busy(const struct rollout_cpu *r)
{
    int n = r->queue.n;
    for (int s = 0; s < r->rc.n_slots; s++) n += r->slots[s].t != NULL;
    return n;
}

void rollout_cpu_queue_stats(const struct rollout_cpu *r, int *queued, int *running,
                             double *kv_frac)
{
    int decoding = 0, held = 0;
    for (int s = 0; s < r->rc.n_slots; s++) {
        decoding += r->slots[s].state == SLOT_DECODING;
        held += r->slots[s].state == SLOT_DECODING || r->slots[s].state == SLOT_TOOL;
    }
    *queued = r->queue.n;
    *running = decoding;
    *kv_frac = (double)held / r->rc.n_slots;
}

void rollout_cpu_set_weights(struct rollout_cpu *r, const float *params, int version)
{
    if (!r->owned) FATAL("rollout_cpu_set_weights: the engine's model is not its own");
    rollout_model_local_set_weights(r->owned, params);
    rollout_cpu_weights_changed(r, version);
}

void rollout_cpu_weights_changed(struct rollout_cpu *r, int version)
{
    recycle_taken(r);
    r->version = version;
    /* Every cache was built with the old weights; the id lists stay, so the next use
     * of a slot prefills them again (rcpu_decode_once, admit). */
    for (int s = 0; s < r->rc.n_slots; s++)
        if (r->model.ops->len(r->model.m, s) > 0) r->model.ops->truncate(r->model.m, s, 0);
}

void rollout_cpu_handback(struct rollout_cpu *r)
{
    recycle_taken(r);
    for (;;) { /* tool calls first: the pool returns each by its deadline */
        int waiting = 0;
        for (int s = 0; s < r->rc.n_slots; s++) waiting += r->slots[s].state == SLOT_TOOL;
        if (!waiting) break;
        if (rcpu_collect_tools(r) == 0) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    for (int s = 0; s < r->rc.n_slots; s++) {
        if (r->slots[s].state != SLOT_DECODING) continue;
        r->slots[s].t->partial = 1;
        rcpu_list_push(&r->done, r->slots[s].t);
        rcpu_slot_release(r, s);
    }
    for (int i = 0; i < r->queue.n; i++) {
        r->queue.t[i]->partial = 1;
        rcpu_list_push(&r->done, r->queue.t[i]);
    }
    r->queue.n = 0;
}

void rollout_cpu_take_counters(struct rollout_cpu *r, int64_t *tokens, double *busy_s)
{
    recycle_taken(r);
    *tokens = r->tokens;
    *busy_s = r->busy_s;
    r->tokens = 0;
    r->busy_s = 0;
}

