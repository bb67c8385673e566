/*
 * C-MLFQ, the routing policy (include/libra/sched.h; reference cmlfq.md §1 with the
 * §6 fixes). The causal prefix tree is ptree.c; the instance queue is iqueue.c.
 *
 * First turn: sched.default_bucket if set; else informed placement -- the prompt's
 * history (its root's total decode length, shrunk toward the global root) when
 * trusted, and the input length: bucket_for(max(history mean, input tokens)).
 *
 * Later turns are sticky. At a tool-return boundary (a new tool return since the
 * last decision) the tree estimates the remaining decode tokens; when the buckets of
 * mean and p90 agree on a bucket other than the current one, the trajectory may
 * move. Without a trusted node, the token count is the fallback signal: a trajectory
 * that has generated more than its bucket's threshold is promoted to
 * bucket_for(generated) (heavy tails: the expected remaining work grows with the
 * work done). With no bucket change due, a trajectory that sits on an instance
 * outside its bucket's TP degrees (placed there by the fallback chain while its
 * bucket was full) may go back to its bucket (remaining work: the estimate, else
 * the larger of the bucket's floor and the tokens generated so far); before, such a
 * trajectory stayed on the fallback instance to its end -- under load the long
 * ones finished on TP-1 instances and set the makespan. A move happens only when
 *     remaining x (decode time per token at the source - at the target)
 *         > (1 + sched.hysteresis) x re-prefill time of the context at the target,
 * with per-token times from the cost model at each instance's current batch and KV
 * load, and only sched.max_migrations times per trajectory. A target bucket that
 * lists the current instance's TP relabels the trajectory without moving it (same-TP
 * buckets never bounce a trajectory and lose its prefix cache).
 *
 * Learning: every finished trajectory (evaluation excluded), with or without tool
 * calls, goes into the tree (roots need totals for informed placement) and into a
 * ring of the sched.max_recent newest. Every sched.rebuild_interval steps the tree
 * is rebuilt from that ring -- once the ring is full, so a tree loaded from
 * sched.tree_in survives until the run has as much evidence of its own (reference
 * §6.12). Persistence is the caller's (checkpoints, end of run), never per
 * trajectory (reference §6.11).
 */
#include "sched_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"

struct recent {          /* a finished trajectory, as inserted */
    int64_t prompt_id;
    int32_t total, n;
    int32_t *states, *pos; /* (n) */
};

struct cmlfq {
    struct ptree tree;
    struct recent *ring; /* (cfg.max_recent) */
    int head, count;
    int default_bucket;  /* -1: informed */
};

static struct cmlfq *priv(const struct sched *s) { return s->priv; }

const struct ptree *sched_cmlfq_tree(const struct sched *s) { return &priv(s)->tree; }

static int cmlfq_init(struct sched *s, char *err, size_t errlen)
{
    if (!rates_valid(&s->rates)) {
        snprintf(err, errlen, "sched.type = \"cmlfq\" needs the device's rates to price "
                 "migrations (none were given)");
        return -1;
    }
    struct cmlfq *c = xcalloc(1, sizeof *c);
    s->priv = c;
    struct ptree_config pc = {s->cfg.window, s->cfg.min_samples, s->cfg.shrink};
    if (ptree_init(&c->tree, &pc, err, errlen)) return -1;
    if (s->cfg.max_recent < 1) {
        snprintf(err, errlen, "sched.max_recent: %d (need >= 1)", s->cfg.max_recent);
        return -1;
    }
    c->ring = xcalloc((size_t)s->cfg.max_recent, sizeof *c->ring);
    c->default_bucket = -1;
    if (s->cfg.default_bucket[0]) {
        c->default_bucket = sched_bucket_index(s, s->cfg.default_bucket);
        if (c->default_bucket < 0) {
            snprintf(err, errlen, "sched.default_bucket: no bucket named '%s'",
                     s->cfg.default_bucket);
            return -1;
        }
    }
    if (s->cfg.tree_in[0]) {
        char why[768];
        if (ptree_load(&c->tree, s->cfg.tree_in, &s->ts, why, sizeof why)) {
            snprintf(err, errlen, "sched.tree_in: %s", why);
            return -1;
        }
    }
    return 0;
}

static void cmlfq_free(struct sched *s)
{
    struct cmlfq *c = priv(s);
    if (!c) return;
    ptree_free(&c->tree);
    if (c->ring)
        for (int i = 0; i < s->cfg.max_recent; i++) {
            free(c->ring[i].states);
            free(c->ring[i].pos);
        }
    free(c->ring);
    free(c);
    s->priv = NULL;
}

static int32_t clamp_tokens(double x) { return x < 0 ? 0 : x > 1e9 ? 1000000000 : (int32_t)(x + 0.5); }

/* First turn. */
static void place(struct sched *s, const struct sched_turn *t, struct sched_traj *tr,
                  const struct sched_instance *inst, int n, struct sched_decision *d)
{
    struct cmlfq *c = priv(s);
    struct ptree_estimate e;
    int known = ptree_estimate_total(&c->tree, t->prompt_id, &e) && e.trusted;
    if (known) d->est_remaining = clamp_tokens(e.mean);
    if (c->default_bucket >= 0) {
        tr->bucket = c->default_bucket;
        d->reason = SCHED_R_INITIAL;
    } else {
        double work = known && e.mean > t->ctx_tokens ? e.mean : t->ctx_tokens;
        tr->bucket = sched_bucket_for(s, work);
        d->reason = known ? SCHED_R_INFORMED : SCHED_R_INITIAL;
    }
    d->instance = sched_route_bucket(s, tr->bucket, inst, n, &d->via);
}

/* Per-token decode time of instance i if it took one more sequence of ctx tokens. */
static double token_time(const struct sched *s, const struct sched_instance *in, double ctx)
{
    return s->rates.decode_step_s(&s->rates, in->tp, in->n_turns + 1, in->load + ctx);
}

static void log_change(struct sched *s, const struct sched_turn *t, struct sched_traj *tr, int to,
                       int to_bucket, int why, double rem, double saving, double cost)
{
    /* A refusal is logged once per wanted bucket, not at every tool return. */
    if (why == SCHED_MIG_DECLINED_COST || why == SCHED_MIG_DECLINED_LIMIT) {
        if (tr->role == to_bucket + 1) return;
        tr->role = to_bucket + 1;
    }
    struct sched_migration m = {t->traj_id, t->turn, t->prev, to, tr->bucket, to_bucket, why,
                                rem, saving, cost};
    sched_log_migration(s, &m);
}

/* A tool-return boundary: maybe move to bucket target (remaining work rem). */
static void consider_move(struct sched *s, const struct sched_turn *t, struct sched_traj *tr,
                          const struct sched_instance *inst, int n, int target, int why,
                          double rem, struct sched_decision *d)
{
    const struct sched_instance *src = &inst[t->prev];
    if (sched_bucket_has_tp(s, target, src->tp)) {
        log_change(s, t, tr, t->prev, target, SCHED_MIG_SAME_TP, rem, 0, 0);
        tr->bucket = target;
        return;
    }
    if (tr->migrations >= s->cfg.max_migrations) {
        log_change(s, t, tr, t->prev, target, SCHED_MIG_DECLINED_LIMIT, rem, 0, 0);
        return;
    }
    int via;
    int dst = sched_route_bucket(s, target, inst, n, &via);
    if (why == SCHED_MIG_RETURN && via != SCHED_VIA_PREFERRED) return; /* still full */
    if (dst == t->prev || inst[dst].tp == src->tp) {
        /* The target bucket's instances are busy and the chain fell back to this TP
         * class: staying is the same speed without the re-prefill. */
        log_change(s, t, tr, t->prev, target, SCHED_MIG_SAME_TP, rem, 0, 0);
        tr->bucket = target;
        return;
    }
    double ctx = t->ctx_tokens;
    double saving = rem * (token_time(s, src, ctx) - token_time(s, &inst[dst], ctx));
    double cost = s->rates.prefill_s(&s->rates, inst[dst].tp, ctx, 0);
    if (saving <= (1 + s->cfg.hysteresis) * cost) {
        log_change(s, t, tr, t->prev, target, SCHED_MIG_DECLINED_COST, rem, saving, cost);
        return;
    }
    log_change(s, t, tr, dst, target, why, rem, saving, cost);
    tr->bucket = target;
    tr->migrations++;
    tr->role = 0;
    d->instance = dst;
    d->via = via;
    d->reason = SCHED_R_MIGRATE;
}

/* The least remaining work that puts a trajectory in bucket b: the bucket below's
 * threshold (0 for the first). */
static double bucket_floor(const struct sched *s, int b)
{
    return b > 0 ? s->bucket[b - 1].max_tokens : 0;
}

static void boundary(struct sched *s, const struct sched_turn *t, struct sched_traj *tr,
                     const struct sched_instance *inst, int n, struct sched_decision *d)
{
    struct cmlfq *c = priv(s);
    struct ptree_estimate e;
    /* Placed outside its bucket's TP degrees (its bucket was full: fallback or
     * global); with no bucket change due, it may go back. */
    int displaced = !sched_bucket_has_tp(s, tr->bucket, inst[t->prev].tp);
    if (tr->n_ret > 0 &&
        ptree_estimate_remaining(&c->tree, tr->prompt_id, tr->states, tr->pos, tr->n_ret, &e) &&
        e.trusted) {
        d->est_remaining = clamp_tokens(e.mean);
        int bm = sched_bucket_for(s, e.mean), bp = sched_bucket_for(s, e.p90);
        if (bm == bp && bm != tr->bucket)
            consider_move(s, t, tr, inst, n, bm, SCHED_MIG_CAUSAL, e.mean, d);
        else if (displaced)
            consider_move(s, t, tr, inst, n, tr->bucket, SCHED_MIG_RETURN, e.mean, d);
        return;
    }
    /* Fallback signal: the token count only ever promotes. */
    int bt = sched_bucket_for(s, t->gen_tokens);
    if (t->gen_tokens > s->bucket[tr->bucket].max_tokens && bt > tr->bucket)
        consider_move(s, t, tr, inst, n, bt, SCHED_MIG_TOKENS, t->gen_tokens, d);
    else if (displaced) /* no estimate: at least its bucket's floor, at least what it did */
        consider_move(s, t, tr, inst, n, tr->bucket, SCHED_MIG_RETURN,
                      fmax(bucket_floor(s, tr->bucket), t->gen_tokens), d);
}

static void cmlfq_route(struct sched *s, const struct sched_turn *t, struct sched_traj *tr,
                        const struct sched_instance *inst, int n, struct sched_decision *d)
{
    if (tr->bucket < 0) {
        place(s, t, tr, inst, n, d);
    } else if (t->prev < 0 || t->prev >= n) {
        /* Its instance is gone: back to its bucket (the context is re-prefilled
         * wherever it goes). */
        d->instance = sched_route_bucket(s, tr->bucket, inst, n, &d->via);
        d->reason = SCHED_R_REROUTE;
    } else {
        d->instance = t->prev;
        d->reason = SCHED_R_STICKY;
        if (tr->n_ret > tr->decided) boundary(s, t, tr, inst, n, d);
    }
    tr->decided = tr->n_ret;
    d->bucket = tr->bucket;
}

static void cmlfq_finish(struct sched *s, struct sched_traj *tr, int gen_tokens, int learn)
{
    if (!learn) return;
    struct cmlfq *c = priv(s);
    ptree_insert(&c->tree, tr->prompt_id, tr->states, tr->pos, tr->n_ret, gen_tokens);
    struct recent *r = &c->ring[c->head];
    r->prompt_id = tr->prompt_id;
    r->total = gen_tokens;
    r->n = tr->n_ret;
    r->states = xrealloc(r->states, (size_t)(tr->n_ret ? tr->n_ret : 1) * sizeof *r->states);
    r->pos = xrealloc(r->pos, (size_t)(tr->n_ret ? tr->n_ret : 1) * sizeof *r->pos);
    if (tr->n_ret) {
        memcpy(r->states, tr->states, (size_t)tr->n_ret * sizeof *r->states);
        memcpy(r->pos, tr->pos, (size_t)tr->n_ret * sizeof *r->pos);
    }
    c->head = (c->head + 1) % s->cfg.max_recent;
    if (c->count < s->cfg.max_recent) c->count++;
}

static void cmlfq_step_end(struct sched *s, int step)
{
    struct cmlfq *c = priv(s);
    int every = s->cfg.rebuild_interval;
    if (every <= 0 || step <= 0 || step % every != 0 || c->count < s->cfg.max_recent) return;
    ptree_clear(&c->tree);
    for (int k = 0; k < c->count; k++) { /* oldest first: the windows keep the newest */
        const struct recent *r = &c->ring[(c->head + k) % s->cfg.max_recent];
        ptree_insert(&c->tree, r->prompt_id, r->states, r->pos, r->n, r->total);
    }
    LOG_D("cmlfq: tree rebuilt from the %d newest trajectories at step %d", c->count, step);
}

const struct sched_ops sched_cmlfq_ops = {"cmlfq", cmlfq_init, cmlfq_free, cmlfq_route,
                                          cmlfq_finish, cmlfq_step_end};
