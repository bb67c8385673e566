/*
 * The emulated rollout instance (include/libra/engine.h): continuous batching in
 * virtual time. Glossary: B = running sequences, A = resident KV tokens (whole
 * instance), k = tokens every running sequence gains in one macro-step.
 *
 * With queue.mlfq = 0 the admission and preemption loops are the FIFO ones, step for
 * step; mlfq orders the queue with iq_compare only in rounds where the smallest
 * queued sequence fits (else nothing can be admitted and no sort is paid).
 */
#include "libra/engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"

void engine_init(struct engine *e, const struct engine_config *cfg, const struct cost_model *cm,
                 const struct workload *wl)
{
    memset(e, 0, sizeof *e);
    e->cfg = *cfg;
    e->cm = cm;
    e->wl = wl;
    e->capacity = cost_kv_capacity_tokens(cm, cfg->tp);
    e->version = -1;
}

void engine_free(struct engine *e)
{
    if (!e) return;
    free(e->seq);
    free(e->cache);
    free(e->order);
    e->seq = NULL;
    e->cache = NULL;
    e->order = NULL;
    e->cap_order = 0;
    e->n_seq = e->n_cache = 0;
}

/* ---- prefix cache (LRU) ---- */

static int cache_find(const struct engine *e, int64_t traj_id)
{
    for (int i = 0; i < e->n_cache; i++)
        if (e->cache[i].traj_id == traj_id) return i;
    return -1;
}

static void cache_remove(struct engine *e, int i)
{
    e->cached -= e->cache[i].tokens;
    e->cache[i] = e->cache[--e->n_cache];
}

static void cache_put(struct engine *e, int64_t traj_id, int tokens)
{
    int i = cache_find(e, traj_id);
    if (i >= 0) cache_remove(e, i);
    if (e->n_cache == e->cap_cache) {
        e->cap_cache = e->cap_cache ? 2 * e->cap_cache : 64;
        e->cache = xrealloc(e->cache, (size_t)e->cap_cache * sizeof *e->cache);
    }
    e->cache[e->n_cache++] = (struct eng_cache_entry){traj_id, tokens, ++e->clock};
    e->cached += tokens;
}

/* Evicts least recently used entries until resident + cached + need fits. */
static void cache_make_room(struct engine *e, double need)
{
    while (e->n_cache > 0 && e->resident + e->cached + need > e->capacity) {
        int lru = 0;
        for (int i = 1; i < e->n_cache; i++)
            if (e->cache[i].used < e->cache[lru].used) lru = i;
        cache_remove(e, lru);
    }
}

/* ---- sequences ---- */

void engine_submit(struct engine *e, const struct wire_turn_req *req)
{
    if (e->n_seq == e->cap_seq) {
        e->cap_seq = e->cap_seq ? 2 * e->cap_seq : 64;
        e->seq = xrealloc(e->seq, (size_t)e->cap_seq * sizeof *e->seq);
    }
    struct eng_seq *s = &e->seq[e->n_seq++];
    memset(s, 0, sizeof *s);
    s->req = *req;
    struct wl_traj_state st = {.traj_id = req->traj_id,
                               .prompt_id = req->prompt_id,
                               .turn = req->turn,
                               .ctx_tokens = req->ctx_tokens,
                               .n_failures = req->n_failures,
                               .last_failed = req->last_failed,
                               .last_large = req->last_large,
                               .step = req->step_start};
    workload_turn(e->wl, e->cfg.seed, &st, &s->turn);
    /* A turn cut by its budget never closes its tool call: the trajectory ends. */
    if (s->turn.gen_tokens >= req->budget) {
        s->turn.gen_tokens = req->budget;
        s->turn.final = 1;
    }
    if (req->turn + 1 >= e->cfg.max_turns || req->ctx_tokens + s->turn.gen_tokens >= e->cfg.max_tokens)
        s->turn.final = 1;
    if (s->turn.final) {
        s->turn.tool = -1;
        s->turn.status = TOOL_NONE;
        s->turn.payload_tokens = 0;
        s->turn.tool_latency_s = 0;
    }
    s->generated = req->resume_generated < s->turn.gen_tokens ? req->resume_generated
                                                               : s->turn.gen_tokens;
    int ctx = req->ctx_tokens + s->generated;
    int ci = cache_find(e, req->traj_id);
    int hit = ci >= 0 ? e->cache[ci].tokens : 0;
    if (hit > ctx) hit = 0; /* a cache entry longer than the context is not a prefix */
    s->prefill = ctx - hit;
    s->version_first = -1;
    s->state = SEQ_QUEUED;
    s->arrival_v = s->queued_v = e->vnow;
}

static void seq_remove(struct engine *e, int i)
{
    memmove(&e->seq[i], &e->seq[i + 1], (size_t)(e->n_seq - i - 1) * sizeof *e->seq);
    e->n_seq--;
}

static void emit(struct wire_turn_result **out, int *n_out, int *cap_out,
                 const struct wire_turn_result *r)
{
    if (*n_out == *cap_out) {
        *cap_out = *cap_out ? 2 * *cap_out : 64;
        *out = xrealloc(*out, (size_t)*cap_out * sizeof **out);
    }
    (*out)[(*n_out)++] = *r;
}

static void seq_result(const struct engine *e, const struct eng_seq *s, int partial,
                       struct wire_turn_result *r)
{
    memset(r, 0, sizeof *r);
    r->traj_id = s->req.traj_id;
    r->turn = s->req.turn;
    r->leader = e->cfg.leader;
    r->gen_tokens = s->generated;
    r->version_first = s->version_first;
    r->version_last = e->version;
    r->partial = partial;
    if (partial) {
        r->tool = -1;
        return;
    }
    r->final = s->turn.final;
    r->tool = s->turn.tool;
    r->tool_status = s->turn.status;
    r->payload_tokens = s->turn.payload_tokens;
    r->tool_latency_s = s->turn.tool_latency_s;
}

static int seq_tokens(const struct eng_seq *s) { return s->req.ctx_tokens + s->generated; }

/* Whether s may be admitted now: with a decode step's headroom for every running
 * sequence, so a preempted sequence is not readmitted at once; an empty instance
 * admits even an oversized sequence, so nothing waits forever. */
static int admit_fits(const struct engine *e, const struct eng_seq *s, int n_running)
{
    double need = seq_tokens(s) + 1;
    return n_running == 0 || e->resident + need + n_running + 1 <= e->capacity;
}

/* Makes s resident (evicting cache entries for it); returns its prefill seconds. */
static double admit_one(struct engine *e, struct eng_seq *s, int *n_running)
{
    int ci = cache_find(e, s->req.traj_id);
    if (ci >= 0) cache_remove(e, ci);
    cache_make_room(e, seq_tokens(s) + 1);
    double t = cost_prefill_s(e->cm, e->cfg.tp, s->prefill, seq_tokens(s) - s->prefill);
    e->stat_prefill_tokens += s->prefill;
    e->stat_cache_hit_tokens += seq_tokens(s) - s->prefill;
    e->stat_admissions++;
    if (e->vnow > s->queued_v) {
        e->stat_waited++;
        e->stat_wait_s += e->vnow - s->queued_v;
    }
    s->prefill = 0;
    s->state = SEQ_RUNNING;
    e->resident += seq_tokens(s);
    (*n_running)++;
    return t;
}

/* FIFO: admits queued sequences in arrival order while they fit. */
static double admit_fifo(struct engine *e, int *n_running)
{
    double t = 0;
    for (int i = 0; i < e->n_seq; i++) {
        struct eng_seq *s = &e->seq[i];
        if (s->state != SEQ_QUEUED) continue;
        if (*n_running >= e->cfg.max_batch) break;
        if (!admit_fits(e, s, *n_running)) break;
        t += admit_one(e, s, n_running);
    }
    return t;
}

static int qent_cmp(const void *a, const void *b)
{
    const struct eng_qent *x = a, *y = b;
    int c = iq_compare(x->level, x->arrival_v, y->level, y->arrival_v);
    return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

/* MLFQ: admits queued sequences in iq_compare order while they fit (head of line). */
static double admit_mlfq(struct engine *e, int *n_running)
{
    if (*n_running >= e->cfg.max_batch) return 0;
    int n = 0, smallest = -1;
    for (int i = 0; i < e->n_seq; i++) {
        if (e->seq[i].state != SEQ_QUEUED) continue;
        n++;
        if (smallest < 0 || seq_tokens(&e->seq[i]) < seq_tokens(&e->seq[smallest])) smallest = i;
    }
    if (n == 0 || !admit_fits(e, &e->seq[smallest], *n_running)) return 0;
    if (n > e->cap_order) {
        e->cap_order = n > 2 * e->cap_order ? n : 2 * e->cap_order;
        e->order = xrealloc(e->order, (size_t)e->cap_order * sizeof *e->order);
    }
    n = 0;
    for (int i = 0; i < e->n_seq; i++) {
        const struct eng_seq *s = &e->seq[i];
        if (s->state != SEQ_QUEUED) continue;
        int level = iq_level(&e->cfg.queue, s->req.est_remaining, s->generated,
                             e->vnow - s->queued_v);
        e->order[n++] = (struct eng_qent){i, level, s->arrival_v};
    }
    qsort(e->order, (size_t)n, sizeof *e->order, qent_cmp);
    double t = 0;
    for (int k = 0; k < n; k++) {
        struct eng_seq *s = &e->seq[e->order[k].idx];
        if (*n_running >= e->cfg.max_batch) break;
        if (!admit_fits(e, s, *n_running)) break;
        t += admit_one(e, s, n_running);
    }
    return t;
}

/* Admits what the queue discipline allows; returns prefill seconds. */
static double admit(struct engine *e, int *n_running)
{
    return e->cfg.queue.mlfq ? admit_mlfq(e, n_running) : admit_fifo(e, n_running);
}

/* Moves a running sequence back to the queue (recompute on readmission): the newest
 * among those of the highest level (FIFO: every level is 0, so the newest). */
static void preempt_one(struct engine *e)
{
    int victim = -1, victim_level = -1;
    for (int i = e->n_seq - 1; i >= 0; i--) {
        const struct eng_seq *s = &e->seq[i];
        if (s->state != SEQ_RUNNING) continue;
        if (!e->cfg.queue.mlfq) {
            victim = i;
            break;
        }
        int level = iq_level(&e->cfg.queue, s->req.est_remaining, s->generated, 0);
        if (level > victim_level) {
            victim = i;
            victim_level = level;
        }
    }
    if (victim < 0) return;
    struct eng_seq *s = &e->seq[victim];
    e->resident -= seq_tokens(s);
    s->prefill = seq_tokens(s);
    s->state = SEQ_QUEUED;
    s->queued_v = e->vnow;
    e->stat_preemptions++;
}

static double next_tool_done(const struct engine *e)
{
    double t = INFINITY;
    for (int i = 0; i < e->n_seq; i++)
        if (e->seq[i].state == SEQ_TOOL && e->seq[i].tool_done_v < t) t = e->seq[i].tool_done_v;
    return t;
}

/* Emits tool-waiting turns whose tool has returned by vnow. */
static int emit_tools(struct engine *e, struct wire_turn_result **out, int *n_out, int *cap_out)
{
    int n = 0;
    for (int i = 0; i < e->n_seq;) {
        struct eng_seq *s = &e->seq[i];
        if (s->state == SEQ_TOOL && s->tool_done_v <= e->vnow) {
            struct wire_turn_result r;
            seq_result(e, s, 0, &r);
            emit(out, n_out, cap_out, &r);
            seq_remove(e, i);
            n++;
        } else {
            i++;
        }
    }
    return n;
}

/* Ends the turns of running sequences that reached their token count. */
static int finish_turns(struct engine *e, struct wire_turn_result **out, int *n_out, int *cap_out)
{
    int n = 0;
    for (int i = 0; i < e->n_seq;) {
        struct eng_seq *s = &e->seq[i];
        if (s->state != SEQ_RUNNING || s->generated < s->turn.gen_tokens) {
            i++;
            continue;
        }
        e->resident -= seq_tokens(s);
        cache_put(e, s->req.traj_id, seq_tokens(s));
        if (s->turn.final || s->turn.tool_latency_s <= 0) {
            struct wire_turn_result r;
            seq_result(e, s, 0, &r);
            emit(out, n_out, cap_out, &r);
            seq_remove(e, i);
            n++;
            continue;
        }
        s->state = SEQ_TOOL;
        s->tool_done_v = e->vnow + s->turn.tool_latency_s;
        i++;
    }
    return n;
}

static int count_state(const struct engine *e, int state, int *min_left)
{
    int n = 0;
    if (min_left) *min_left = INT32_MAX;
    for (int i = 0; i < e->n_seq; i++) {
        if (e->seq[i].state != state) continue;
        n++;
        int left = e->seq[i].turn.gen_tokens - e->seq[i].generated;
        if (min_left && left < *min_left) *min_left = left;
    }
    return n;
}

static double decode_cost(const struct engine *e, int n_running, int k)
{
    return cost_decode_step_s(e->cm, e->cfg.tp, n_running, e->resident + n_running * k / 2.0);
}

/* One macro-step of decode; returns 0 if not even one token fits before v (the
 * caller's n_running is stale after a preemption; it only bounds k). */
static int decode_step(struct engine *e, double v, int n_running, int min_left)
{
    /* Every running sequence needs a free KV slot per step: preempt (preempt_one's
     * choice) until they all have one (a lone sequence always runs). */
    while (n_running > 1 && e->capacity - e->resident < n_running) {
        preempt_one(e);
        n_running--;
    }
    int k = min_left > 0 ? min_left : 1;
    double room = e->capacity - e->resident;
    if ((double)n_running * k > room) k = room >= n_running ? (int)floor(room / n_running) : 1;
    /* Per-token cost at the macro-step's mean KV size (exact: decode time is linear in
     * A), recomputed whenever k shrinks to end at the next tool return or at v. */
    double step = decode_cost(e, n_running, k);
    double tool = next_tool_done(e);
    if (tool < e->vnow + k * step) {
        int kt = (int)floor((tool - e->vnow) / step);
        k = kt > 1 ? kt : 1;
        step = decode_cost(e, n_running, k);
    }
    if (e->vnow + k * step > v) {
        k = (int)floor((v - e->vnow) / step);
        if (k <= 0) return 0;
        step = decode_cost(e, n_running, k);
    }
    for (int i = 0; i < e->n_seq; i++) {
        struct eng_seq *s = &e->seq[i];
        if (s->state != SEQ_RUNNING) continue;
        if (s->version_first < 0) s->version_first = e->version;
        s->generated += k;
    }
    e->resident += (double)n_running * k;
    e->vnow += k * step;
    e->busy_v += k * step;
    e->stat_decode_tokens += (int64_t)n_running * k;
    return 1;
}

int engine_advance(struct engine *e, double v, struct wire_turn_result **out, int *n_out,
                   int *cap_out)
{
    int n = 0;
    for (int guard = 0; guard < 1000000; guard++) {
        n += emit_tools(e, out, n_out, cap_out);
        int can_decode = e->version >= 0 && e->vnow >= e->blocked_until;
        int min_left;
        int n_running = count_state(e, SEQ_RUNNING, &min_left);
        if (can_decode) {
            double t = admit(e, &n_running);
            if (t > 0) {
                e->vnow += t;
                e->busy_v += t;
                continue;
            }
            count_state(e, SEQ_RUNNING, &min_left);
        }
        if (can_decode && n_running > 0) {
            if (!decode_step(e, v, n_running, min_left)) break;
            n += finish_turns(e, out, n_out, cap_out);
            continue;
        }
        /* Nothing to decode: virtual time passes to the next tool return or unblock. */
        double next = next_tool_done(e);
        if (!can_decode && e->version >= 0 && e->blocked_until < next) next = e->blocked_until;
        if (next > v) {
            if (e->vnow < v) e->vnow = v;
            break;
        }
        if (e->vnow < next) e->vnow = next;
        if (next == INFINITY) break;
    }
    return n;
}

double engine_next_event(const struct engine *e)
{
    double t = next_tool_done(e);
    if (e->version < 0) return t;
    double start = e->vnow > e->blocked_until ? e->vnow : e->blocked_until;
    int min_left;
    int running = count_state(e, SEQ_RUNNING, &min_left);
    int queued = count_state(e, SEQ_QUEUED, NULL);
    if (running > 0) {
        double step = cost_decode_step_s(e->cm, e->cfg.tp, running, e->resident + running);
        if (start + step < t) t = start + step;
    } else if (queued > 0 && start < t) {
        t = start;
    }
    return t;
}

int engine_handback(struct engine *e, struct wire_turn_result **out, int *n_out, int *cap_out)
{
    int n = e->n_seq;
    for (int i = 0; i < e->n_seq; i++) {
        struct wire_turn_result r;
        seq_result(e, &e->seq[i], e->seq[i].state != SEQ_TOOL, &r);
        emit(out, n_out, cap_out, &r);
    }
    e->n_seq = 0;
    e->n_cache = 0;
    e->resident = e->cached = 0;
    return n;
}

void engine_set_version(struct engine *e, int version, double pause_v)
{
    if (version == e->version) return;
    e->version = version;
    double from = e->vnow > e->blocked_until ? e->vnow : e->blocked_until;
    e->blocked_until = from + pause_v;
}

double engine_take_busy(struct engine *e)
{
    double b = e->busy_v * e->cfg.tp;
    e->busy_v = 0;
    return b;
}

int engine_in_flight(const struct engine *e) { return e->n_seq; }

void engine_queue_stats(const struct engine *e, int *queued, int *running, double *kv_frac)
{
    *queued = count_state(e, SEQ_QUEUED, NULL);
    *running = count_state(e, SEQ_RUNNING, NULL);
    *kv_frac = e->capacity > 0 ? e->resident / e->capacity : 0.0;
}
