/*
 * The CPU rollout engine's slots (rollout_cpu_internal.h): admission of queued turns
 * into decoder slots with prefix reuse, the batched decode step, sampling, and the
 * ends of turns (stop tokens, budgets, tool calls on the pool and their returns).
 *
 * A turn is admitted into its trajectory's IDLE slot (only the ids after the longest
 * common prefix with the cache are prefilled: normally the last generated token and
 * the tool payload), else a FREE slot, else the least recently used IDLE slot.
 * Waiting turns are taken in arrival order (fifo) or, under mlfq, in iq_compare order
 * (the queue is reordered in place, stably, before each round that can admit).
 *
 * Sampling: token k of a trajectory (k = its absolute position) is drawn with key
 * (rc.seed, rng_key, k), so a trajectory's tokens do not depend on its batch, its
 * slot, or the instance that runs it. Nothing here allocates.
 */
#include <stdio.h>
#include <string.h>

#include "libra/env.h"
#include "libra/iqueue.h"
#include "libra/log.h"
#include "libra/tool_status.h"
#include "rollout_cpu_internal.h"

/* ---- turn endings ---- */

void rcpu_slot_release(struct rollout_cpu *r, int s)
{
    struct rc_slot *sl = &r->slots[s];
    sl->state = SLOT_FREE;
    sl->owner = -1;
    sl->n_ids = 0;
    sl->t = NULL;
    r->model.ops->truncate(r->model.m, s, 0);
}

static void finish_final(struct rollout_cpu *r, int s)
{
    struct rc_turn *t = r->slots[s].t;
    t->final = 1;
    rcpu_list_push(&r->done, t);
    rcpu_slot_release(r, s);
}

static int tool_of_env(const struct env *e)
{
    if (e->p.kind == ENV_KIND_CALC) return ENV_TOOL_CALC;
    if (e->p.kind == ENV_KIND_SEARCH) return ENV_TOOL_SEARCH;
    return -1;
}

/* The turn in slot s ended at a tool call that returned res: report it; the slot
 * stays cached for the trajectory's next turn. */
static void finish_tool(struct rollout_cpu *r, int s, const struct env_tool_result *res,
                        double latency_s)
{
    struct rc_slot *sl = &r->slots[s];
    struct rc_turn *t = sl->t;
    t->tool = res->tool >= 0 ? res->tool : tool_of_env(r->env); /* a pool timeout has -1 */
    t->tool_status = res->status;
    t->tool_latency_s = latency_s;
    t->n_payload = env_payload_tokens(r->env, res, t->payload, RC_PAYLOAD_CAP);
    rcpu_list_push(&r->done, t);
    sl->state = SLOT_IDLE;
    sl->t = NULL;
    sl->last_use = ++r->clock;
}

/* The turn in slot s ended with a tool call (the format says so) on a turn that may
 * call a tool. */
static void start_tool(struct rollout_cpu *r, int s)
{
    struct rc_slot *sl = &r->slots[s];
    struct rc_turn *t = sl->t;
    char call[ENV_CALL_MAX + 1];
    size_t len; /* the call's byte count: it may hold NULs, so not strlen(call) */
    if (env_extract_call(r->env, t->ids, t->n_gen, call, sizeof call, &len) < 0) {
        struct env_tool_result res = {.tool = tool_of_env(r->env), .status = TOOL_FAILURE};
        res.len = snprintf(res.text, sizeof res.text, "error: malformed tool call");
        finish_tool(r, s, &res, 0.0);
        return;
    }
    tool_pool_submit(r->pool, t->in.traj_id, call, len);
    sl->state = SLOT_TOOL;
}

/* How the next token of the turn in slot s is drawn. */
static struct rollout_sample sample_of(const struct rollout_cpu *r, int s)
{
    const struct rc_turn *t = r->slots[s].t;
    return (struct rollout_sample){{t->in.greedy ? 0.0f : r->rc.temperature, r->rc.top_p,
                                    r->rc.top_k, r->rc.seed},
                                   t->in.rng_key, (int64_t)t->in.n_ctx + t->n_gen};
}

/* Records the sampled next token of the turn in slot s and handles a stop. */
static void take_next(struct rollout_cpu *r, int s, int32_t tok, float lp)
{
    struct rc_turn *t = r->slots[s].t;
    t->ids[t->n_gen] = tok;
    t->logp[t->n_gen] = lp;
    t->ver[t->n_gen] = r->version;
    t->n_gen++;
    r->tokens++;
    const struct vocab *v = r->env->vocab;
    if (v->ends_turn(v->ctx, tok)) {
        if (t->in.turn + 1 < r->rc.max_turns && v->turn_calls(v->ctx, t->ids, t->n_gen))
            start_tool(r, s);
        else
            finish_final(r, s);
    } else if (t->n_gen >= t->budget) {
        finish_final(r, s);
    }
}

/* The slot for a turn of trajectory traj: its own cached slot, else a free one, else
 * an idle one -- least recently used first, and a slot that a queued turn will reuse
 * only when no other is idle; -1 if every slot is busy. */
static int pick_slot(const struct rollout_cpu *r, int64_t traj)
{
    int free_slot = -1, victim = -1;
    for (int s = 0; s < r->rc.n_slots; s++) {
        const struct rc_slot *sl = &r->slots[s];
        if (sl->state == SLOT_IDLE && sl->owner == traj) return s;
        if (sl->state == SLOT_FREE && free_slot < 0) free_slot = s;
        if (sl->state != SLOT_IDLE) continue;
        const struct rc_slot *v = victim >= 0 ? &r->slots[victim] : NULL;
        if (!v || sl->wanted < v->wanted || (sl->wanted == v->wanted && sl->last_use < v->last_use))
            victim = s;
    }
    return free_slot >= 0 ? free_slot : victim;
}

/* Puts turn t into slot s: keeps the cached KV of the longest common prefix (at most
 * n_ctx - 1 tokens: the last context token is prefilled for its logits), prefills the
 * rest and samples the turn's first token. */
static void admit(struct rollout_cpu *r, struct rc_turn *t, int s)
{
    struct rc_slot *sl = &r->slots[s];
    int n_ctx = t->in.n_ctx, keep = 0;
    if (sl->owner == t->in.traj_id) {
        int kv = r->model.ops->len(r->model.m, s);
        while (keep < kv && keep < n_ctx - 1 && sl->ids[keep] == t->ctx[keep]) keep++;
    }
    r->model.ops->truncate(r->model.m, s, keep);
    memcpy(sl->ids, t->ctx, (size_t)n_ctx * sizeof *sl->ids);
    sl->n_ids = n_ctx;
    sl->owner = t->in.traj_id;
    sl->state = SLOT_DECODING;
    sl->t = t;
    sl->last_use = ++r->clock;
    struct rollout_sample smp = sample_of(r, s);
    int32_t tok;
    float lp;
    if (r->model.ops->prefill(r->model.m, s, t->ctx + keep, n_ctx - keep, &smp, &tok, &lp))
        FATAL("rollout_cpu: slot %d cannot hold the %d context tokens of trajectory %lld",
              s, n_ctx, (long long)t->in.traj_id);
    take_next(r, s, tok, lp);
}

/* Reorders the queue by iq_compare (level, then arrival) with a stable insertion sort
 * (queues are short; nothing allocates), if a slot could take a turn at all. */
static void order_queue(struct rollout_cpu *r)
{
    int open = 0;
    for (int s = 0; s < r->rc.n_slots && !open; s++)
        open = r->slots[s].state == SLOT_FREE || r->slots[s].state == SLOT_IDLE;
    if (!open || r->queue.n < 2) return;
    double now = wall_time();
    struct rc_turn **q = r->queue.t;
    for (int k = 0; k < r->queue.n; k++)
        q[k]->level = iq_level(&r->rc.queue, q[k]->in.est_remaining, 0, now - q[k]->arrival_s);
    for (int k = 1; k < r->queue.n; k++) {
        struct rc_turn *t = q[k];
        int j = k;
        while (j > 0 &&
               iq_compare(t->level, t->arrival_s, q[j - 1]->level, q[j - 1]->arrival_s) < 0) {
            q[j] = q[j - 1];
            j--;
        }
        q[j] = t;
    }
}

/* Admits queued turns in queue order (fifo, or mlfq after order_queue) while slots
 * are available; returns how many. */
int rcpu_admit_queued(struct rollout_cpu *r)
{
    if (r->queue.n == 0) return 0;
    if (r->rc.queue.mlfq) order_queue(r);
    for (int s = 0; s < r->rc.n_slots; s++) r->slots[s].wanted = 0;
    for (int k = 0; k < r->queue.n; k++)
        for (int s = 0; s < r->rc.n_slots; s++)
            if (r->slots[s].state == SLOT_IDLE && r->slots[s].owner == r->queue.t[k]->in.traj_id)
                r->slots[s].wanted = 1;
    int k = 0;
    for (; k < r->queue.n; k++) {
        int s = pick_slot(r, r->queue.t[k]->in.traj_id);
        if (s < 0) break;
        admit(r, r->queue.t[k], s);
    }
    if (k > 0) {
        memmove(r->queue.t, r->queue.t + k, (size_t)(r->queue.n - k) * sizeof *r->queue.t);
        r->queue.n -= k;
    }
    return k;
}

/* ---- the iteration ---- */

/* Reports every tool call the pool has finished; returns how many. */
int rcpu_collect_tools(struct rollout_cpu *r)
{
    int total = 0, n;
    while ((n = tool_pool_poll(r->pool, r->jobs, r->rc.n_slots)) > 0) {
        for (int j = 0; j < n; j++) {
            int s = 0;
            while (s < r->rc.n_slots &&
                   !(r->slots[s].state == SLOT_TOOL && r->slots[s].owner == r->jobs[j].tag))
                s++;
            if (s == r->rc.n_slots)
                FATAL("rollout_cpu: a tool result for trajectory %lld, which waits for none",
                      (long long)r->jobs[j].tag);
            finish_tool(r, s, &r->jobs[j].res, r->jobs[j].latency_s);
        }
        total += n;
    }
    return total;
}

/* One batched decode step over every decoding slot; returns the slots advanced. */
int rcpu_decode_once(struct rollout_cpu *r)
{
    int n = 0;
    for (int s = 0; s < r->rc.n_slots; s++) {
        struct rc_slot *sl = &r->slots[s];
        if (sl->state != SLOT_DECODING) continue;
        int kv = r->model.ops->len(r->model.m, s);
        if (kv < sl->n_ids && /* dropped by a weight swap: rebuild with the new weights */
            r->model.ops->prefill(r->model.m, s, sl->ids + kv, sl->n_ids - kv, NULL, NULL, NULL))
            FATAL("rollout_cpu: slot %d cannot hold its %d ids", s, sl->n_ids);
        r->batch_slots[n] = s;
        r->batch_tokens[n] = sl->t->ids[sl->t->n_gen - 1];
        r->batch_sample[n] = sample_of(r, s);
        n++;
    }
    if (n == 0) return 0;
    if (r->model.ops->step(r->model.m, r->batch_slots, r->batch_tokens, n, r->batch_sample,
                           r->batch_next, r->batch_lp))
        FATAL("rollout_cpu: a decoding slot is full (capacity %d)", r->rc.slot_capacity);
    for (int i = 0; i < n; i++) {
        struct rc_slot *sl = &r->slots[r->batch_slots[i]];
        sl->ids[sl->n_ids++] = r->batch_tokens[i];
        take_next(r, r->batch_slots[i], r->batch_next[i], r->batch_lp[i]);
    }
    return n;
}

