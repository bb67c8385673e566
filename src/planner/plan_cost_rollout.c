/*
 * The planner's rollout cost (include/libra/plan_cost.h): the makespan of one batch
 * (a struct len_profile) on a layout of TP-1/2/4/8 vLLM-like instances, and a lower
 * bound of it over every layout of n GPUs. docs/planner.md "Cost model" derives it.
 *
 * Glossary: t TP degree; N_t KV capacity of a TP-t instance (tokens); c̄ mean context
 * of the batch, mean(prompt + (gen + tool) / 2); B̄_t steady running batch;
 * thr_t decode tokens/s of one instance; per sample s: p prompt, g generated, r
 * tool-return tokens, n turns, tau tool seconds, c_s = p + (g + r) / 2 its mid context.
 *
 * Per sample and class:  pf_t(s) = prefill(p, 0) + k prefill(r / k, c_s), k = max(1, n-1)
 *                        w_t(s)  = g / thr_t + pf_t(s)         (its share of the work)
 *                        tl_t(s) = (g step_t(B=1, c_s) + tau) / o   (alone: decode +
 *                                  tools, spread over the profile's overlap o >= 1)
 *                        kv_t(s) = g (step_t(1, c_s) - step_t(1, 0))  (its KV reads)
 * Per instance i of TP t holding S_i, s* its sample of the largest tl:
 *     loaded_i   = max tl_t(s) + sum kv_t(s) - kv_t(s*) / o   (the longest chain waits
 *                  for the KV reads of the samples sharing its batch)
 *     makespan_i = max(sum g / thr_t, loaded_i) + sum pf_t(s).
 *
 * Instances are numbered TP8 first, then TP4, TP2, TP1 (as plans place them). The
 * samples go longest first (by total tokens; equal ones by content, so the result does
 * not depend on the profile's order) onto the instance where they would finish
 * earliest, estimated as max(load_i + w_t(s), tl_t(s) + pf_t(s)) (load_i = sum of w
 * placed so far), among those whose KV capacity holds the sample's whole context.
 * The estimate is increasing in load_i and the same for every instance of a class
 * otherwise, so each class keeps a tournament tree on (load, index) (load_tree.h) and
 * only its root (the least-loaded instance, the lowest index among equal loads)
 * competes; equal estimates across classes go to the lowest index.
 * O(n log n + n log I) per call.
 */
#include "libra/log.h"
#include "libra/plan_cost.h"
#include "load_tree.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>

/* vLLM's default max_num_seqs (the reference's max_queue_limit). */
#define PC_MAX_RUNNING 256
/* The lower bound is scaled by 1 - this, so that summing the same terms in another
 * order never lifts it above pc_rollout by a rounding error. */
#define PC_LB_SLACK 1e-12

/* One sample as the model reads it: fields clamped to sane values (the profile comes
 * from observed trajectories; a negative or non-finite field must not break the
 * ordering or give negative times). */
struct sample_view {
    double tokens, prompt, gen, tool, tool_s, ctx_mid;
    double overlap; /* the profile's overlap (>= 1): the tail is spread over it */
    int turns;
    int idx; /* position in the profile: the last tie-break */
};

/* One TP class: its capacity and steady decode throughput. */
struct tp_class {
    int t;
    double cap; /* N_t, tokens */
    double thr; /* decode tokens/s of one instance */
};

/* One instance's running sums (its load, sum w_t(s), lives in its class's load_tree). */
struct inst {
    double gen;     /* sum g */
    double tail;    /* max tl_t(s) */
    double kv;      /* sum kv_t(s) */
    double tail_kv; /* kv_t of the sample whose tl_t is tail */
    double prefill; /* sum pf_t(s) */
};

/* fmax for the placement's operands, which are never NaN: inline, where fmax is a
 * library call (it must handle NaN) in the hottest loop of the planner. */
static inline double max2(double a, double b) { return a > b ? a : b; }

static double clamp_count(int32_t v) { return v > 0 ? (double)v : 0.0; }

static void view_of(const struct traj_sample *s, int idx, struct sample_view *v)
{
    v->prompt = clamp_count(s->prompt);
    v->gen = clamp_count(s->gen);
    v->tool = clamp_count(s->tool);
    v->tokens = v->prompt + v->gen + v->tool;
    v->tool_s = isfinite(s->tool_s) && s->tool_s > 0 ? s->tool_s : 0;
    v->turns = s->turns > 1 ? s->turns : 1;
    v->ctx_mid = v->prompt + (v->gen + v->tool) / 2.0;
    v->idx = idx;
}

/* Longest first; equal totals by content (so equal samples are interchangeable),
 * then by position. */
static int cmp_view(const void *pa, const void *pb)
{
    const struct sample_view *a = pa, *b = pb;
    const double ka[] = {a->tokens, a->gen, a->prompt, a->tool, a->turns, a->tool_s};
    const double kb[] = {b->tokens, b->gen, b->prompt, b->tool, b->turns, b->tool_s};
    for (int i = 0; i < 6; i++)
        if (ka[i] != kb[i]) return ka[i] > kb[i] ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* The batch's views and its mean mid context c̄; n = 0 gives NULL. */
static struct sample_view *views_of(const struct len_profile *lp, int n, double *mean_ctx)
{
    *mean_ctx = 0;
    if (n <= 0) return NULL;
    struct sample_view *v = xmalloc((size_t)n * sizeof *v);
    double sum = 0;
    for (int i = 0; i < n; i++) {
        view_of(&lp->s[i], i, &v[i]);
        v[i].overlap = isfinite(lp->overlap) && lp->overlap > 1 ? lp->overlap : 1;
        sum += v[i].ctx_mid;
    }
    *mean_ctx = sum / n;
    return v;
}

/* B̄_t = clamp(floor(N_t / c̄), 1, 256); thr_t = B̄ / step_t(B̄, B̄ c̄). */
static void class_of(const struct cost_model *c, int k, double mean_ctx, struct tp_class *tc)
{
    tc->t = pc_tp_of(k);
    tc->cap = cost_kv_capacity_tokens(c, tc->t);
    double b = mean_ctx > 0 ? floor(tc->cap / mean_ctx) : 1;
    int B = (int)fmin(PC_MAX_RUNNING, fmax(1.0, b));
    tc->thr = B / cost_decode_step_s(c, tc->t, B, B * mean_ctx);
}

/* pf_t(s): the prompt, then the tool returns, prefilled at the turns that follow them
 * (one prefill call per following turn, at the sample's mid context). */
static double sample_prefill_s(const struct cost_model *c, int t, const struct sample_view *v)
{
    double pf = cost_prefill_s(c, t, v->prompt, 0);
    if (v->tool > 0) {
        double calls = v->turns > 1 ? v->turns - 1.0 : 1.0;
        pf += calls * cost_prefill_s(c, t, v->tool / calls, v->ctx_mid);
    }
    return pf;
}

/* tl_t(s): the sample decoding alone (batch 1) plus its tool waits, over the
 * profile's overlap (in a pipeline with that many batches in flight a trajectory may
 * span that many step intervals). */
static double sample_tail_s(const struct cost_model *c, int t, const struct sample_view *v)
{
    return (v->gen * cost_decode_step_s(c, t, 1, v->ctx_mid) + v->tool_s) / v->overlap;
}

/* kv_t(s): what the sample's KV cache adds to the decode steps of the instance it
 * shares, g (step_t(1, c_s) - step_t(1, 0)): each of its g steps reads its context
 * once more, and every other sequence in the batch waits for that read. */
static double sample_kv_s(const struct cost_model *c, int t, const struct sample_view *v)
{
    double d = cost_decode_step_s(c, t, 1, v->ctx_mid) - cost_decode_step_s(c, t, 1, 0);
    return d > 0 ? v->gen * d : 0;
}

/* An instance's loaded tail: its longest chain plus the KV reads of the samples that
 * share its batch, kv_i - kv* / o (kv* the chain's own sample's, already in its tl; over
 * the o step intervals the chain spans, the instance serves o batches' samples, the
 * chain's own once). Never below the tail; grows as samples are added. */
static inline double loaded_tail(const struct inst *y, double overlap)
{
    return y->tail + (y->kv - y->tail_kv / overlap);
}

/* What a profile costs on each class, computed once (pc_rollout_prepare): the
 * samples longest first and, per sample and class, pf, tl, kv and w. */
struct pc_rollout_prep {
    int n;
    double overlap;              /* the profile's (>= 1) */
    struct sample_view *v;       /* (n) sorted longest first */
    struct tp_class tc[PC_N_TP];
    double *pf, *tl, *kv, *w;    /* (n, PC_N_TP) */
    double *tlpf;                /* (n, PC_N_TP) tl + pf: the placement key's floor */
    /* the lower bound's terms for the classes 0 .. m-1 (index m - 1) */
    double lb_work[PC_N_TP], lb_tail[PC_N_TP];
    double lb_chain[PC_N_TP]; /* max_s min_t (tl_t(s) + (1 - 1/o) kv_t(s)): a floor of
                                 rollout_est.chain_s */
    int lb_oom[PC_N_TP];
};

struct pc_rollout_prep *pc_rollout_prepare(const struct cost_model *c, const struct len_profile *lp)
{
    struct pc_rollout_prep *p = xcalloc(1, sizeof *p);
    p->n = lp->n > 0 ? lp->n : 0;
    double mean_ctx;
    p->v = views_of(lp, p->n, &mean_ctx);
    if (p->n > 0) qsort(p->v, (size_t)p->n, sizeof *p->v, cmp_view);
    for (int k = 0; k < PC_N_TP; k++) class_of(c, k, mean_ctx, &p->tc[k]);
    size_t cells = (size_t)(p->n > 0 ? p->n : 1) * PC_N_TP;
    p->pf = xmalloc(cells * sizeof *p->pf);
    p->tl = xmalloc(cells * sizeof *p->tl);
    p->kv = xmalloc(cells * sizeof *p->kv);
    p->w = xmalloc(cells * sizeof *p->w);
    p->overlap = p->n > 0 ? p->v[0].overlap : 1;
    p->tlpf = xmalloc(cells * sizeof *p->tlpf);
    for (int j = 0; j < p->n; j++)
        for (int k = 0; k < PC_N_TP; k++) {
            size_t x = (size_t)j * PC_N_TP + (size_t)k;
            p->pf[x] = sample_prefill_s(c, p->tc[k].t, &p->v[j]);
            p->tl[x] = sample_tail_s(c, p->tc[k].t, &p->v[j]);
            p->kv[x] = lp->contention_free ? 0 : sample_kv_s(c, p->tc[k].t, &p->v[j]);
            p->w[x] = p->v[j].gen / p->tc[k].thr + p->pf[x];
            p->tlpf[x] = p->tl[x] + p->pf[x];
        }
    /* Lower bound, see pc_rollout_lower_bound: for each prefix of classes 0 .. m-1 */
    for (int m = 1; m <= PC_N_TP; m++) {
        double work = 0, tail = 0, chain = 0;
        int oom = 0;
        for (int j = 0; j < p->n && !oom; j++) {
            double w_min = INFINITY, tl_min = INFINITY, ch_min = INFINITY;
            for (int k = 0; k < m; k++) {
                const struct tp_class *tc = &p->tc[k];
                if (tc->cap <= 0 || p->v[j].tokens > tc->cap) continue;
                size_t x = (size_t)j * PC_N_TP + (size_t)k;
                /* the instance holding the sample: its loaded tail is at least this
                 * sample's tl plus (1 - 1 / o) of its own KV reads (loaded_tail) */
                double own = p->tl[x] + p->kv[x] * (1.0 - 1.0 / p->overlap);
                w_min = fmin(w_min, tc->t * p->w[x]);
                tl_min = fmin(tl_min, own + p->pf[x]);
                ch_min = fmin(ch_min, own);
            }
            if (isinf(w_min)) oom = 1;
            work += w_min;
            tail = fmax(tail, tl_min);
            chain = fmax(chain, ch_min);
        }
        p->lb_work[m - 1] = work;
        p->lb_tail[m - 1] = tail;
        p->lb_chain[m - 1] = chain;
        p->lb_oom[m - 1] = oom;
    }
    return p;
}

void pc_rollout_prep_free(struct pc_rollout_prep *p)
{
    if (!p) return;
    free(p->v);
    free(p->pf);
    free(p->tl);
    free(p->kv);
    free(p->w);
    free(p->tlpf);
    free(p);
}

double pc_rollout_prepared(const struct pc_rollout_prep *p, const int counts[PC_N_TP],
                           struct rollout_est *out)
{
    return pc_rollout_prepared_cutoff(p, counts, INFINITY, out);
}

/* The cutoff: every instance's makespan, max(gen / thr, tail) + prefill, only grows
 * as samples are added (sums and maxima of non-negative terms, and rounding is
 * monotone), so once the instance that just took a sample is above the cutoff, the
 * final makespan is too, bitwise; the placement stops there. (A second floor, the
 * GPU-seconds placed plus the cheapest GPU-seconds of the samples left over the GPU
 * count, never stopped a placement earlier on the benchmark's batches: the greedy
 * keeps the loads balanced, and the layouts the moves reject lose on their tails
 * or their slowest instance, not on total work.) */
double pc_rollout_prepared_cutoff(const struct pc_rollout_prep *p, const int counts[PC_N_TP],
                                  double cutoff, struct rollout_est *out)
{
    struct rollout_est local;
    if (!out) out = &local;
    *out = (struct rollout_est){.makespan_s = INFINITY, .binding = -1};

    /* Instance numbering: class k's instances are base[k] .. base[k] + counts[k] - 1. */
    int base[PC_N_TP], n_inst = 0;
    for (int k = PC_N_TP - 1; k >= 0; k--) {
        assert(counts[k] >= 0);
        base[k] = n_inst;
        n_inst += counts[k];
    }
    if (n_inst == 0) return INFINITY;

    int n = p->n;
    const struct sample_view *v = p->v;
    const struct tp_class *tc = p->tc;

    /* An instance whose weights leave no KV room cannot serve at all. Otherwise,
     * longest first: if the first (largest) sample fits some instance, every sample
     * fits at least that one. */
    double top = n > 0 ? v[0].tokens : 0, cap = 0;
    int dead = 0;
    for (int k = 0; k < PC_N_TP; k++) {
        if (counts[k] == 0) continue;
        dead |= tc[k].cap <= 0;
        cap = fmax(cap, tc[k].cap);
    }
    if (dead || top > cap) {
        out->oom = 1;
        out->oom_tokens = (int64_t)top;
        return INFINITY;
    }

    struct inst *in = xcalloc((size_t)n_inst, sizeof *in);
    struct load_tree tree[PC_N_TP];
    size_t n_nodes = 0;
    for (int k = 0; k < PC_N_TP; k++) n_nodes += counts[k] ? load_tree_nodes(counts[k]) : 0;
    struct load_node *nodes = xmalloc(n_nodes * sizeof *nodes), *next = nodes;
    for (int k = 0; k < PC_N_TP; k++) {
        if (counts[k] == 0) continue;
        load_tree_init(&tree[k], next, counts[k], base[k]);
        next += load_tree_nodes(counts[k]);
    }

    for (int j = 0; j < n; j++) {
        int best_k = -1, best_i = -1;
        double best_key = INFINITY, best_load = 0;
        const double *w = p->w + (size_t)j * PC_N_TP, *tlpf = p->tlpf + (size_t)j * PC_N_TP;
        for (int k = PC_N_TP - 1; k >= 0; k--) {
            if (counts[k] == 0 || v[j].tokens > tc[k].cap) continue;
            double load;
            int i = load_tree_min(&tree[k], &load); /* the class's least-loaded instance */
            double key = max2(load + w[k], tlpf[k]);
            if (best_i < 0 || key < best_key || (key == best_key && i < best_i)) {
                best_k = k;
                best_i = i;
                best_key = key;
                best_load = load;
            }
        }
        assert(best_i >= 0);
        size_t x = (size_t)j * PC_N_TP + (size_t)best_k;
        struct inst *y = &in[best_i];
        y->gen += v[j].gen;
        y->prefill += p->pf[x];
        y->kv += p->kv[x];
        if (p->tl[x] > y->tail) {
            y->tail = p->tl[x];
            y->tail_kv = p->kv[x];
        }
        load_tree_raise_min(&tree[best_k], base[best_k], best_load + w[best_k]);
        double partial = max2(y->gen / tc[best_k].thr, loaded_tail(y, p->overlap)) + y->prefill;
        if (partial > cutoff) {
            *out = (struct rollout_est){.makespan_s = partial, .binding = best_i, .cut = 1};
            free(nodes);
            free(in);
            return partial;
        }
    }

    double worst = -1, chain = 0;
    for (int k = PC_N_TP - 1; k >= 0; k--) {
        for (int i = base[k]; i < base[k] + counts[k]; i++) {
            double thru = in[i].gen / tc[k].thr, tail = loaded_tail(&in[i], p->overlap);
            double ms = fmax(thru, tail) + in[i].prefill;
            chain = fmax(chain, tail);
            if (ms > worst) {
                worst = ms;
                *out = (struct rollout_est){.makespan_s = ms, .thru_s = thru, .tail_s = tail,
                                            .prefill_s = in[i].prefill, .binding = i};
            }
        }
    }
    out->chain_s = chain;
    free(nodes);
    free(in);
    return out->makespan_s;
}

double pc_rollout(const struct cost_model *c, const int counts[PC_N_TP], const struct len_profile *lp,
                  struct rollout_est *out)
{
    struct pc_rollout_prep *p = pc_rollout_prepare(c, lp);
    double t = pc_rollout_prepared(p, counts, out);
    pc_rollout_prep_free(p);
    return t;
}

/* Every instance's makespan is at least its sum of w_t(s) (= thru + prefill) and at
 * least tl_t(s) + pf_t(s) for each of its samples. Summing the first over instances
 * weighted by their t GPUs: max_i W_i / t_i >= sum W_i / sum t_i >= sum_s
 * min_t t w_t(s) / n_gpus. The second gives max_s min_t (tl_t(s) + pf_t(s)). Both
 * minima run over the classes a layout of n_gpus GPUs may hold whose capacity holds
 * the sample (a layout holding a class with no KV room at all is OOM anyway); a
 * sample no such class holds makes every layout OOM. */
double pc_rollout_lower_bound_prepared(const struct pc_rollout_prep *p, int n_gpus, int max_tp)
{
    if (n_gpus < 1 || max_tp < 1) return INFINITY;
    if (p->n == 0) return 0;
    int m = 0;
    for (int k = 0; k < PC_N_TP && pc_tp_of(k) <= max_tp && pc_tp_of(k) <= n_gpus; k++) m = k + 1;
    if (m == 0 || p->lb_oom[m - 1]) return INFINITY;
    return fmax(p->lb_work[m - 1] / n_gpus, p->lb_tail[m - 1]) * (1.0 - PC_LB_SLACK);
}

double pc_chain_lower_bound_prepared(const struct pc_rollout_prep *p, int max_tp)
{
    if (p->n == 0) return 0;
    int m = 0;
    for (int k = 0; k < PC_N_TP && pc_tp_of(k) <= max_tp; k++) m = k + 1;
    if (m == 0 || p->lb_oom[m - 1]) return INFINITY;
    return p->lb_chain[m - 1] * (1.0 - PC_LB_SLACK);
}

double pc_rollout_lower_bound(const struct cost_model *c, int n_gpus, int max_tp, const struct len_profile *lp)
{
    struct pc_rollout_prep *p = pc_rollout_prepare(c, lp);
    double t = pc_rollout_lower_bound_prepared(p, n_gpus, max_tp);
    pc_rollout_prep_free(p);
    return t;
}
