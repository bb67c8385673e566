/*
 * Token sampling over vocabulary-parallel logits (sampler_sample_tp, contract and cost
 * in include/libra/sampler.h): each rank of a TP group holds the logit columns
 * [v0, v1); the ranks exchange a few numbers per rank (sums, maxima, a handful of
 * candidates) with f64 all-reduces and all reach the token sampler_sample picks on the
 * full row.
 *
 * Glossary: V vocabulary, t ranks, Vl = v1 - v0 this rank's columns, T temperature,
 * m the global max of logits / T, p_i = (float)exp(logits_i / T - m).
 *
 * Why the tokens agree: every rank forms p_i with the GLOBAL m, so p_i has the bits
 * sampler_sample gives it; candidates travel as (id, z_i = logits_i / T - m) in double
 * and the receiver re-forms p_i = (float)exp(z_i), the same bits again. Candidate lists
 * concatenated in rank order are in id order, so the shared selection code
 * (sampler_internal.h) breaks ties by id as sampler_sample does. The only difference:
 * totals are the ranks' partial sums added in rank order (sampler_sample adds in id
 * order), which moves a boundary of the inverse CDF by an ulp.
 *
 * Exchanges use one vector with a slot per rank: rank r fills its slot, the others
 * leave zeros, and a sum all-reduce hands everybody every slot (x + 0 is exact). The
 * all-reduce must give every rank the same bits (tfm_tp.h), so that all ranks choose
 * alike.
 *
 * Limits: one row per call (a step of n slots costs n calls' all-reduces); V <= 2^24.
 */
#include "libra/sampler.h"

#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "libra/rng.h"
#include "libra/tfm_tp.h"
#include "sampler_internal.h"

/* First vocabulary row of rank r (tfm_tp_init's balanced split); r = t gives V. */
static int row0(const struct tfm_tp *tp, int r)
{
    return (int)((int64_t)r * tp->full.vocab_size / tp->t);
}

/* Rank r's number of top-k candidates: min(k, its rows). */
static int topk_slot(const struct tfm_tp *tp, int k, int r)
{
    int vl = row0(tp, r + 1) - row0(tp, r);
    return k < vl ? k : vl;
}

static void sum_f64(const struct tfm_tp *tp, double *x, size_t n)
{
    tp->comm->allreduce_f64(tp->comm->ctx, x, n, TFM_RED_SUM);
}

/* The scratch of one call: p (Vl) and cand (Vl) floats, the exchange vector xb (nx
 * doubles, 8-byte aligned), and the merged candidates' cp and ci (nc floats each). */
struct tp_scratch {
    float *p, *cand;
    double *xb;
    float *cp, *ci;
};

/* Doubles of the exchange vector and merged candidates of a config. */
static void scratch_sizes(const struct sampler_config *c, const struct tfm_tp *tp, size_t *nx,
                          size_t *nc)
{
    int V = tp->full.vocab_size, t = tp->t;
    *nx = 3 * (size_t)t;
    *nc = 0;
    if (!(c->temperature > 0)) return;
    if (c->top_k > 0 && c->top_k < V) {
        for (int r = 0; r < t; r++) *nc += (size_t)topk_slot(tp, c->top_k, r);
        *nx = (size_t)t + 2 * *nc;
    } else if (c->top_p < 1.0f) {
        /* up to V entries (id, z), then the t survivor counts */
        *nc = (size_t)V;
        *nx = 2 * (size_t)V + (size_t)t;
    }
}

size_t sampler_tp_scratch_floats(const struct sampler_config *c, const struct tfm_tp *tp)
{
    if (tp->t == 1) return 2 * (size_t)tp->full.vocab_size;
    size_t nx, nc;
    scratch_sizes(c, tp, &nx, &nc);
    /* + 1: room to align the doubles */
    return 2 * (size_t)(tp->v1 - tp->v0) + 1 + 2 * nx + 2 * nc;
}

static struct tp_scratch carve(const struct sampler_config *c, const struct tfm_tp *tp,
                               float *scratch)
{
    size_t nx, nc, Vl = (size_t)(tp->v1 - tp->v0);
    scratch_sizes(c, tp, &nx, &nc);
    struct tp_scratch s = {.p = scratch, .cand = scratch + Vl};
    float *x = scratch + 2 * Vl;
    if ((uintptr_t)x % sizeof(double)) x++;
    assert((uintptr_t)x % sizeof(double) == 0); /* scratch itself 4-byte aligned */
    s.xb = (double *)(void *)x;
    s.cp = (float *)(void *)(s.xb + nx);
    s.ci = s.cp + nc;
    return s;
}

/* ---- the per-rank steps (include/libra/sampler.h), also a GPU decoder's ---- */

void sampler_tp_greedy_stats(const float *x, int Vl, int v0, double *slot)
{
    int best = 0;
    for (int i = 1; i < Vl; i++)
        if (x[i] > x[best]) best = i;
    double m = x[best], s = 0;
    if (m > -INFINITY)
        for (int i = 0; i < Vl; i++) s += exp((double)x[i] - m);
    slot[0] = m;
    slot[1] = v0 + best;
    slot[2] = s;
}

int32_t sampler_tp_greedy_pick(const double *slots, int t, float *logprob)
{
    int win = 0; /* the first rank holding the global max has the lowest id among them */
    for (int r = 1; r < t; r++)
        if (slots[3 * r] > slots[3 * win]) win = r;
    double m = slots[3 * win], s = 0;
    for (int r = 0; r < t; r++)
        if (slots[3 * r + 2] > 0) s += slots[3 * r + 2] * exp(slots[3 * r] - m);
    if (logprob) *logprob = (float)-log(s);
    return (int32_t)slots[3 * win + 1];
}

double sampler_tp_local_max(const float *x, int Vl, double T)
{
    double m = -INFINITY;
    for (int i = 0; i < Vl; i++) {
        double z = (double)x[i] / T;
        if (z > m) m = z;
    }
    return m;
}

void sampler_tp_sums(const float *x, int Vl, double T, double m, float *p, double *slot)
{
    double sum = 0, sum_exact = 0;
    for (int i = 0; i < Vl; i++) {
        double e = exp((double)x[i] / T - m);
        p[i] = (float)e;
        sum_exact += e;
        sum += p[i];
    }
    slot[0] = sum;
    slot[1] = sum_exact;
}

int sampler_tp_owner(const double *slots, int t, double u, struct sampler_tp_draw *d)
{
    double total = 0, start = 0;
    d->total_exact = 0;
    for (int q = 0; q < t; q++) {
        total += slots[2 * q];
        d->total_exact += slots[2 * q + 1];
    }
    d->u = u * total;
    /* the last rank with mass whose range starts at or below u (the first rank with
     * mass if rounding puts u below everything) */
    int owner = -1;
    d->own_start = 0;
    for (int q = 0; q < t; q++) {
        if (slots[2 * q] > 0 && (start <= d->u || owner < 0)) {
            owner = q;
            d->own_start = start;
        }
        start += slots[2 * q];
    }
    return owner;
}

int sampler_tp_scan(const float *p, int Vl, const struct sampler_tp_draw *d)
{
    int tok = -1;
    double cum = d->own_start;
    for (int i = 0; i < Vl && tok < 0; i++) {
        cum += p[i];
        if (d->u < cum) tok = i;
    }
    for (int i = Vl - 1; tok < 0; i--) /* rounding: the last id that has mass */
        if (p[i] > 0 || i == 0) tok = i;
    return tok;
}

/* Greedy: each rank's (max, argmax, sum exp(x - max)) in its slot of 3. */
static int32_t greedy_tp(const struct tfm_tp *tp, const float *x, float *logprob, double *xb)
{
    memset(xb, 0, 3 * (size_t)tp->t * sizeof *xb);
    sampler_tp_greedy_stats(x, tp->v1 - tp->v0, tp->v0, xb + 3 * tp->rank);
    sum_f64(tp, xb, 3 * (size_t)tp->t);
    return sampler_tp_greedy_pick(xb, tp->t, logprob);
}

/* This rank's p_i = exp(z_i - m) into s->p; every rank's sums of them (of the float
 * p_i and of exp in double) exchanged in slots of 2 of s->xb, in rank order; *total
 * and *total_exact their sums over the ranks. */
static void rank_sums(const struct tfm_tp *tp, const float *x, double T, double m,
                      struct tp_scratch *s, double *total, double *total_exact)
{
    int t = tp->t;
    double *xb = s->xb;
    memset(xb, 0, 2 * (size_t)t * sizeof *xb);
    sampler_tp_sums(x, tp->v1 - tp->v0, T, m, s->p, xb + 2 * tp->rank);
    sum_f64(tp, xb, 2 * (size_t)t);
    *total = *total_exact = 0;
    for (int q = 0; q < t; q++) {
        *total += xb[2 * q];
        *total_exact += xb[2 * q + 1];
    }
}

/* Plain temperature: the ranks' sums in slots of 2, then the rank whose range of the
 * cumulative sum holds u * total scans its ids and announces (id, log-prob). */
static int32_t temperature_tp(const struct tfm_tp *tp, const float *x, double T, double m,
                              struct rng *r, float *logprob, struct tp_scratch *s)
{
    int Vl = tp->v1 - tp->v0, t = tp->t;
    memset(s->xb, 0, 2 * (size_t)t * sizeof *s->xb);
    sampler_tp_sums(x, Vl, T, m, s->p, s->xb + 2 * tp->rank);
    sum_f64(tp, s->xb, 2 * (size_t)t);
    struct sampler_tp_draw d;
    int owner = sampler_tp_owner(s->xb, t, rng_uniform(r), &d);
    double res[2] = {0, 0};
    if (tp->rank == owner) {
        int tok = sampler_tp_scan(s->p, Vl, &d);
        res[0] = tp->v0 + tok;
        res[1] = (double)x[tok] / T - m - log(d.total_exact);
    }
    sum_f64(tp, res, 2);
    if (logprob) *logprob = (float)res[1];
    return (int32_t)res[0];
}

static int cmp_float_id(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Top-k (then top-p): each rank's top-k candidates as (id, z) after a slot of
 * sum_exact per rank; the merged list (id order) goes through sampler_sample's
 * selection. */
static int32_t top_k_tp(const struct sampler_config *c, const struct tfm_tp *tp,
                        const float *x, double T, double m, struct rng *r, float *logprob,
                        struct tp_scratch *s)
{
    int t = tp->t, off, n, kr = sampler_tp_top_k_slot(tp, c->top_k, tp->rank, &off, &n);
    double *xb = s->xb; /* (t) sums, then (n) (id, z) */
    memset(xb, 0, ((size_t)t + 2 * (size_t)n) * sizeof *xb);
    sampler_tp_top_k_entries(x, tp->v1 - tp->v0, tp->v0, T, m, kr, off, tp->rank, t, xb, s->p);
    sum_f64(tp, xb, (size_t)t + 2 * (size_t)n);
    return sampler_tp_top_k_pick(c, xb, t, n, r, logprob, s->cp);
}

void sampler_tp_top_k_entries(const float *x, int Vl, int v0, double T, double m, int kr,
                              int off, int slot, int slots, double *row, float *scratch)
{
    float *p = scratch, *cand = scratch + Vl;
    double sum_exact = 0;
    for (int i = 0; i < Vl; i++) {
        double e = exp((double)x[i] / T - m);
        p[i] = (float)e;
        sum_exact += e;
    }
    sampler_select_top_k(p, cand, Vl, kr);
    qsort(cand, (size_t)kr, sizeof *cand, cmp_float_id); /* id order */
    row[slot] = sum_exact;
    for (int j = 0; j < kr; j++) {
        int i = (int)cand[j];
        row[slots + 2 * (off + j)] = v0 + i;
        row[slots + 2 * (off + j) + 1] = (double)x[i] / T - m;
    }
}

int sampler_tp_top_k_slot(const struct tfm_tp *tp, int k, int r, int *off, int *n)
{
    *off = *n = 0;
    for (int q = 0; q < tp->t; q++) {
        if (q == r) *off = *n;
        *n += topk_slot(tp, k, q);
    }
    return topk_slot(tp, k, r);
}

int32_t sampler_tp_top_k_pick(const struct sampler_config *c, const double *slots, int t, int n,
                              struct rng *r, float *logprob, float *scratch)
{
    const double *ent = slots + t;
    float *cp = scratch, *ci = scratch + n;
    int k = c->top_k;
    double total_exact = 0;
    for (int q = 0; q < t; q++) total_exact += slots[q];
    for (int j = 0; j < n; j++) cp[j] = (float)exp(ent[2 * j + 1]);
    /* sampler_sample's top-k branch, on the merged candidates */
    sampler_select_top_k(cp, ci, n, k);
    int nn = k;
    double mass = 0;
    if (c->top_p < 1.0f) {
        double mk = 0;
        for (int j = 0; j < k; j++) mk += cp[(int)ci[j]];
        int np = sampler_nucleus(cp, ci, k, (double)c->top_p * mk, &mass);
        if (np > 0) nn = np; /* else (rounding): the whole top-k */
    } else {
        for (int j = 0; j < k; j++) mass += cp[(int)ci[j]];
    }
    int j = sampler_draw(cp, ci, nn, mass, r);
    if (logprob) *logprob = (float)(ent[2 * j + 1] - log(total_exact));
    return (int32_t)ent[2 * j];
}

/* Exchanges the (id, z) of this rank's ids i with p_i >= cutoff (all ids when cutoff
 * < 0), count_r of them, given everybody's counts in counts (t); fills cp with the
 * merged p and ci with 0..n-1 sorted best first. Returns n; ent (2n) the entries. */
static int exchange_sorted(const struct tfm_tp *tp, const float *x, double T, double m,
                           double cutoff, const double *counts, struct tp_scratch *s,
                           double **ent_out)
{
    int Vl = tp->v1 - tp->v0, n = 0, off = 0;
    for (int q = 0; q < tp->t; q++) {
        if (q == tp->rank) off = n;
        n += (int)counts[q];
    }
    double *ent = s->xb; /* 2n <= 2V doubles: short of the counts */
    memset(ent, 0, 2 * (size_t)n * sizeof *ent);
    for (int i = 0, j = off; i < Vl; i++) {
        if (cutoff >= 0 && !(s->p[i] >= cutoff)) continue;
        ent[2 * j] = tp->v0 + i;
        ent[2 * j + 1] = (double)x[i] / T - m;
        j++;
    }
    sum_f64(tp, ent, 2 * (size_t)n);
    for (int j = 0; j < n; j++) {
        s->cp[j] = (float)exp(ent[2 * j + 1]);
        s->ci[j] = (float)j;
    }
    sampler_sort(s->cp, s->ci, n);
    *ent_out = ent;
    return n;
}

/* Top-p alone: the ranks' sums (slots of 2), the survivor counts (slots of 1), the
 * survivors (id, z) at offsets from the counts; the single-rank nucleus on them. */
static int32_t top_p_tp(const struct sampler_config *c, const struct tfm_tp *tp,
                        const float *x, double T, double m, struct rng *r, float *logprob,
                        struct tp_scratch *s)
{
    int Vl = tp->v1 - tp->v0, t = tp->t, V = tp->full.vocab_size;
    double *xb = s->xb, total, total_exact;
    rank_sums(tp, x, T, m, s, &total, &total_exact);
    double target = (double)c->top_p * total;
    double cutoff = (1.0 - (double)c->top_p) / (V - 1) * total; /* V >= t >= 2 */
    int cnt = 0;
    for (int i = 0; i < Vl; i++) cnt += s->p[i] >= cutoff;
    /* the counts in slots of 1, after the 2V doubles the entries may fill */
    double *cts = xb + 2 * (size_t)V;
    memset(cts, 0, (size_t)t * sizeof *cts);
    cts[tp->rank] = cnt;
    sum_f64(tp, cts, (size_t)t);
    double *ent, mass = 0;
    int n = 0, np = 0;
    long long N = 0;
    for (int q = 0; q < t; q++) N += (long long)cts[q];
    if (N > 0) {
        n = exchange_sorted(tp, x, T, m, cutoff, cts, s, &ent);
        np = sampler_nucleus(s->cp, s->ci, n, target, &mass);
    }
    if (np == 0) { /* survivors short of top_p through rounding: all ids */
        for (int q = 0; q < t; q++) cts[q] = row0(tp, q + 1) - row0(tp, q);
        n = exchange_sorted(tp, x, T, m, -1.0, cts, s, &ent);
        np = sampler_nucleus(s->cp, s->ci, n, target, &mass);
    }
    if (np > 0) n = np; /* else: top_p within rounding of 1, keep all */
    int j = sampler_draw(s->cp, s->ci, n, mass, r);
    if (logprob) *logprob = (float)(ent[2 * j + 1] - log(total_exact));
    return (int32_t)ent[2 * j];
}

int32_t sampler_sample_tp(const struct sampler_config *c, const struct tfm_tp *tp,
                          const float *local_logits, int64_t traj_id, int64_t position,
                          float *logprob, float *scratch)
{
    int V = tp->full.vocab_size, Vl = tp->v1 - tp->v0;
    if (tp->t == 1)
        return sampler_sample(c, local_logits, V, traj_id, position, logprob, scratch);
    assert(V > 0 && V <= (1 << 24) && Vl > 0);
    struct tp_scratch s = carve(c, tp, scratch);
    if (!(c->temperature > 0)) return greedy_tp(tp, local_logits, logprob, s.xb);

    const double T = c->temperature;
    double m = sampler_tp_local_max(local_logits, Vl, T);
    tp->comm->allreduce_f64(tp->comm->ctx, &m, 1, TFM_RED_MAX);
    struct rng r;
    rng_init(&r, c->seed, (uint64_t)traj_id, (uint64_t)position, SAMPLER_PURPOSE);
    if (c->top_k > 0 && c->top_k < V)
        return top_k_tp(c, tp, local_logits, T, m, &r, logprob, &s);
    if (c->top_p < 1.0f) return top_p_tp(c, tp, local_logits, T, m, &r, logprob, &s);
    return temperature_tp(tp, local_logits, T, m, &r, logprob, &s);
}
