/*
 * Token sampling (include/libra/sampler.h).
 *
 * Glossary: V vocabulary size, T temperature, p_i = exp(logits_i / T - max) the
 * unnormalised probabilities.
 *
 * Contract and choices:
 *  - temperature <= 0 is greedy: the argmax, ties to the lowest id; its log-prob is
 *    log softmax(logits)[argmax] (T = 1). Greedy draws no random numbers.
 *  - Otherwise one uniform draw from the stream rng_init(seed, traj_id, position,
 *    SAMPLER_PURPOSE) picks the token by inverse CDF, so the same (seed, trajectory,
 *    position, logits, settings) always gives the same token, whatever else is sampled.
 *  - top-k keeps the k most probable tokens (ties to the lower id). top-p keeps the
 *    smallest set of most probable tokens whose probability mass >= top_p (at least
 *    one). With both, top-p applies to the distribution renormalised over the top-k
 *    (Hugging Face's TopK then TopP warpers, vLLM's order). top_p >= 1 and
 *    top_k <= 0 (or >= V) are off.
 *  - The returned log-prob is log softmax(logits / T) at the token over the FULL
 *    vocabulary, computed in double with the max subtracted -- never the truncated,
 *    renormalised distribution actually sampled from (see the header).
 *  - Logits must contain at least one finite value; -inf entries are never sampled.
 *
 * Cost: plain temperature sampling is O(V). top-k is O(V log k). top-p alone first
 * drops tokens with p < (1 - top_p) / (V - 1) -- those can never be in the nucleus,
 * since together they hold less than 1 - top_p -- and sorts the survivors; if rounding
 * ever makes the survivors fall short of top_p it redoes the sort over all V, so the
 * result is exactly the definition.
 *
 * scratch (2V floats): [0, V) the p_i, [V, 2V) candidate ids stored as floats (exact
 * for V <= 2^24; floats rather than int32 so any float buffer is valid scratch).
 *
 * The candidate helpers (sampler_sort, sampler_select_top_k, sampler_nucleus,
 * sampler_draw; contracts in sampler_internal.h) are shared with sampler_tp.c, the
 * vocabulary-parallel sampler, so both select with the same code.
 */
#include "libra/sampler.h"

#include "libra/rng.h"
#include "sampler_internal.h"

#include <assert.h>
#include <math.h>
#include <stddef.h>

/* a ranks strictly before b: more probable, or as probable with a lower id. */
static int ranks_before(const float *p, int a, int b)
{
    return p[a] > p[b] || (p[a] == p[b] && a < b);
}

/* Heap over c[0, n) with the LAST-ranked element at the root. */
static void sift_down(const float *p, float *c, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && ranks_before(p, (int)c[w], (int)c[l])) w = l;
        if (r < n && ranks_before(p, (int)c[w], (int)c[r])) w = r;
        if (w == i) return;
        float t = c[i];
        c[i] = c[w];
        c[w] = t;
        i = w;
    }
}

static void heapify(const float *p, float *c, int n)
{
    for (int i = n / 2 - 1; i >= 0; i--) sift_down(p, c, n, i);
}

/* Heap sort of a heap: leaves c[0, n) ordered best first. */
static void sort_heap(const float *p, float *c, int n)
{
    for (int end = n - 1; end > 0; end--) {
        float t = c[0];
        c[0] = c[end];
        c[end] = t;
        sift_down(p, c, end, 0);
    }
}

void sampler_sort(const float *p, float *c, int n)
{
    heapify(p, c, n);
    sort_heap(p, c, n);
}

void sampler_select_top_k(const float *p, float *c, int V, int k)
{
    for (int i = 0; i < k; i++) c[i] = (float)i;
    heapify(p, c, k);
    for (int i = k; i < V; i++) {
        if (ranks_before(p, i, (int)c[0])) {
            c[0] = (float)i;
            sift_down(p, c, k, 0);
        }
    }
    sort_heap(p, c, k);
}

int sampler_nucleus(const float *p, const float *c, int n, double target, double *mass)
{
    double cum = 0;
    for (int j = 0; j < n; j++) {
        cum += p[(int)c[j]];
        if (cum >= target) {
            *mass = cum;
            return j + 1;
        }
    }
    *mass = cum;
    return 0;
}

int32_t sampler_draw(const float *p, const float *c, int n, double mass, struct rng *r)
{
    double u = rng_uniform(r) * mass, cum = 0;
    for (int j = 0; j < n; j++) {
        cum += p[(int)c[j]];
        if (u < cum) return (int32_t)c[j];
    }
    for (int j = n - 1; j > 0; j--) /* rounding: the last candidate that has mass */
        if (p[(int)c[j]] > 0) return (int32_t)c[j];
    return (int32_t)c[0];
}

static int32_t sample_greedy(const float *logits, int V, float *logprob)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    double m = logits[best], s = 0;
    for (int i = 0; i < V; i++) s += exp((double)logits[i] - m);
    if (logprob) *logprob = (float)-log(s);
    return best;
}

int32_t sampler_sample(const struct sampler_config *c, const float *logits, int V,
                       int64_t traj_id, int64_t position, float *logprob, float *scratch)
{
    assert(V > 0 && V <= (1 << 24));
    if (!(c->temperature > 0)) return sample_greedy(logits, V, logprob);

    const double T = c->temperature;
    float *p = scratch, *cand = scratch + V;
    double m = -INFINITY;
    for (int i = 0; i < V; i++) {
        double z = (double)logits[i] / T;
        if (z > m) m = z;
    }
    double sum_exact = 0, sum = 0; /* of exp in double / of the float p_i sampled from */
    for (int i = 0; i < V; i++) {
        double e = exp((double)logits[i] / T - m);
        p[i] = (float)e;
        sum_exact += e;
        sum += p[i];
    }

    struct rng r;
    rng_init(&r, c->seed, (uint64_t)traj_id, (uint64_t)position, SAMPLER_PURPOSE);
    const int use_k = c->top_k > 0 && c->top_k < V;
    const int use_p = c->top_p < 1.0f;
    int32_t tok;
    if (!use_k && !use_p) {
        /* Inverse CDF over all ids in id order; no candidate list needed. */
        double u = rng_uniform(&r) * sum, cum = 0;
        tok = -1;
        for (int i = 0; i < V && tok < 0; i++) {
            cum += p[i];
            if (u < cum) tok = i;
        }
        for (int i = V - 1; tok < 0; i--) /* rounding: the last id that has mass */
            if (p[i] > 0 || i == 0) tok = i;
    } else {
        int n;
        double mass = 0;
        if (use_k) {
            n = c->top_k;
            sampler_select_top_k(p, cand, V, n);
            if (use_p) {
                double mk = 0;
                for (int j = 0; j < n; j++) mk += p[(int)cand[j]];
                int np = sampler_nucleus(p, cand, n, (double)c->top_p * mk, &mass);
                if (np > 0) n = np; /* else (rounding): the whole top-k */
            } else {
                for (int j = 0; j < n; j++) mass += p[(int)cand[j]];
            }
        } else {
            double target = (double)c->top_p * sum;
            double cutoff = V > 1 ? (1.0 - (double)c->top_p) / (V - 1) * sum : 0;
            n = 0;
            for (int i = 0; i < V; i++)
                if (p[i] >= cutoff) cand[n++] = (float)i;
            int np = 0;
            if (n > 0) {
                sampler_sort(p, cand, n);
                np = sampler_nucleus(p, cand, n, target, &mass);
            }
            if (np == 0) { /* survivors short of top_p through rounding: all ids */
                for (int i = 0; i < V; i++) cand[i] = (float)i;
                n = V;
                sampler_sort(p, cand, n);
                np = sampler_nucleus(p, cand, n, target, &mass);
            }
            if (np > 0) n = np; /* else: top_p within rounding of 1, keep all */
        }
        tok = sampler_draw(p, cand, n, mass, &r);
    }
    if (logprob) *logprob = (float)((double)logits[tok] / T - m - log(sum_exact));
    return tok;
}
