/*
 * C-MLFQ's causal prefix tree (include/libra/ptree.h): the forest of per-prompt
 * trees plus the global tree, per-node sample windows and their statistics, the
 * shrunk estimates the scheduler asks for, merging of rank trees and the shape.
 * Persistence lives in ptree_io.c.
 *
 * Layout: every node of both trees sits in one growable array (t->node) and refers
 * to others by index; a node's children form a first_child / next_sibling list
 * (new children go first). Node indices only grow, so a parent always has a lower
 * index than its children (ptree_io.c writes in index order on that account).
 *
 * Sample ring of a node (window w, cap <= w): while n < w the samples sit at
 * [0, n) oldest first and head == n; once n == w (then cap == w) the oldest is at
 * head and each insert overwrites it. In both cases the k-th oldest sample is at
 * (head - n + k) mod cap. mean, p90 and mean_pos are recomputed (sorting a copy of
 * the window) whenever a node's window changes; lookups and estimates only read
 * them: they walk the child lists, never sort and never allocate.
 *
 * Not thread-safe.
 */
#include "ptree_internal.h"

#include "libra/log.h"
#include "libra/tool_state.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PTREE_MAX_WINDOW (1 << 20) /* sample windows beyond this are a config error */
#define MAP_MIN_CAP 64             /* power of two */
#define NODE_MIN_CAP 64

/* ---- prompt map: prompt_id -> root index; map_val -1 marks an empty slot, so any
 * int64 (PTREE_GLOBAL included) could be a key, but PTREE_GLOBAL never is one. ---- */

static size_t map_hash(int64_t key, size_t cap)
{
    uint64_t z = (uint64_t)key + 0x9e3779b97f4a7c15ULL; /* splitmix64 finaliser */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (size_t)z & (cap - 1);
}

static int32_t map_find(const struct ptree *t, int64_t key)
{
    if (key == PTREE_GLOBAL || t->map_cap == 0) return -1;
    size_t mask = t->map_cap - 1;
    for (size_t h = map_hash(key, t->map_cap);; h = (h + 1) & mask) {
        if (t->map_val[h] < 0) return -1;
        if (t->map_key[h] == key) return t->map_val[h];
    }
}

static void map_alloc(struct ptree *t, size_t cap)
{
    t->map_cap = cap;
    t->map_key = xcalloc(cap, sizeof *t->map_key);
    t->map_val = xmalloc(cap * sizeof *t->map_val);
    for (size_t i = 0; i < cap; i++) t->map_val[i] = -1;
}

/* Slot of key (empty slot if absent). The table is never full (load <= 70%). */
static size_t map_slot(const struct ptree *t, int64_t key)
{
    size_t mask = t->map_cap - 1, h = map_hash(key, t->map_cap);
    while (t->map_val[h] >= 0 && t->map_key[h] != key) h = (h + 1) & mask;
    return h;
}

/* Adds a key that is not in the map yet. */
static void map_put(struct ptree *t, int64_t key, int32_t val)
{
    assert(key != PTREE_GLOBAL && val >= 0);
    if ((t->n_prompts + 1) * 10 > t->map_cap * 7) {
        int64_t *old_key = t->map_key;
        int32_t *old_val = t->map_val;
        size_t old_cap = t->map_cap;
        map_alloc(t, old_cap * 2);
        for (size_t i = 0; i < old_cap; i++)
            if (old_val[i] >= 0) {
                size_t h = map_slot(t, old_key[i]);
                t->map_key[h] = old_key[i];
                t->map_val[h] = old_val[i];
            }
        free(old_key);
        free(old_val);
    }
    size_t h = map_slot(t, key);
    assert(t->map_val[h] < 0);
    t->map_key[h] = key;
    t->map_val[h] = val;
    t->n_prompts++;
}

/* ---- nodes ---- */

/* Appends an empty node and links it as the first child of parent (-1: a root). */
static int32_t node_new(struct ptree *t, int64_t prompt_id, int32_t state, int32_t parent)
{
    if (t->n_node == INT32_MAX) FATAL("ptree: more than %d nodes", INT32_MAX);
    if (t->n_node == t->cap_node) {
        size_t cap = (size_t)t->cap_node;
        XGROW(t->node, cap, (size_t)t->n_node + 1);
        t->cap_node = cap > INT32_MAX ? INT32_MAX : (int32_t)cap;
    }
    int32_t i = t->n_node++;
    struct ptree_node *nd = &t->node[i];
    memset(nd, 0, sizeof *nd);
    nd->prompt_id = prompt_id;
    nd->state = state;
    nd->parent = parent;
    nd->first_child = -1;
    nd->next_sibling = -1;
    if (parent >= 0) {
        struct ptree_node *p = &t->node[parent];
        nd->depth = p->depth + 1;
        nd->next_sibling = p->first_child;
        p->first_child = i;
    }
    return i;
}

/* The child of node i reached by state, -1 if none. */
static int32_t node_child(const struct ptree *t, int32_t i, int32_t state)
{
    for (int32_t c = t->node[i].first_child; c >= 0; c = t->node[c].next_sibling)
        if (t->node[c].state == state) return c;
    return -1;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* numpy.percentile(v, q, method="linear") of the sorted v[0..n-1], n >= 1. */
static double sorted_percentile(const float *v, int n, double q)
{
    double h = q / 100.0 * (n - 1);
    int lo = (int)floor(h);
    int hi = lo + 1 < n ? lo + 1 : n - 1;
    return v[lo] + (h - lo) * ((double)v[hi] - v[lo]);
}

/* Recomputes mean, p90 and mean_pos over the node's window. */
static void node_stats(struct ptree_node *nd)
{
    if (nd->n == 0) {
        nd->mean = nd->p90 = nd->mean_pos = 0.0;
        return;
    }
    float local[256];
    float *v = nd->n <= 256 ? local : xmalloc((size_t)nd->n * sizeof *v);
    double srem = 0.0, spos = 0.0;
    for (int k = 0; k < nd->n; k++) {
        v[k] = nd->rem[k];
        srem += nd->rem[k];
        spos += nd->pos[k];
    }
    qsort(v, (size_t)nd->n, sizeof *v, cmp_float);
    nd->mean = srem / nd->n;
    nd->mean_pos = spos / nd->n;
    nd->p90 = sorted_percentile(v, nd->n, 90.0);
    if (v != local) free(v);
}

/* Ring index of the k-th oldest sample (0 <= k < n). */
static int ring_at(const struct ptree_node *nd, int k)
{
    return (int)(((int64_t)nd->head - nd->n + k + nd->cap) % nd->cap);
}

/* Appends one sample to the ring (window w), without recomputing the statistics. */
static void ring_push(struct ptree_node *nd, int w, float rem, float pos)
{
    if (nd->n < w) {
        if (nd->n == nd->cap) {
            int cap = nd->cap < 4 ? 4 : nd->cap * 2;
            if (cap > w) cap = w;
            nd->rem = xrealloc(nd->rem, (size_t)cap * sizeof *nd->rem);
            nd->pos = xrealloc(nd->pos, (size_t)cap * sizeof *nd->pos);
            nd->cap = cap;
        }
        nd->rem[nd->n] = rem;
        nd->pos[nd->n] = pos;
        nd->n++;
        nd->head = nd->n % w;
    } else {
        nd->rem[nd->head] = rem;
        nd->pos[nd->head] = pos;
        nd->head = (nd->head + 1) % w;
    }
}

static void node_add(struct ptree *t, int32_t i, float rem, float pos)
{
    struct ptree_node *nd = &t->node[i];
    ring_push(nd, t->cfg.window, rem, pos);
    nd->visits++;
    node_stats(nd);
}

/* ---- lifetime ---- */

int ptree_init(struct ptree *t, const struct ptree_config *cfg, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    if (cfg->window < 1 || cfg->window > PTREE_MAX_WINDOW) {
        snprintf(err, errlen, "sched.window = %d: must be in [1, %d] (samples per tree node)",
                 cfg->window, PTREE_MAX_WINDOW);
        return -1;
    }
    if (cfg->min_samples < 1) {
        snprintf(err, errlen,
                 "sched.min_samples = %d: must be >= 1 (samples before an estimate is trusted)",
                 cfg->min_samples);
        return -1;
    }
    if (!(cfg->shrink >= 0.0) || !isfinite(cfg->shrink)) {
        snprintf(err, errlen,
                 "sched.shrink = %g: must be finite and >= 0 (pseudo-count of the prior; 0 "
                 "= raw statistics)", cfg->shrink);
        return -1;
    }
    t->cfg = *cfg;
    t->cap_node = NODE_MIN_CAP;
    t->node = xmalloc((size_t)t->cap_node * sizeof *t->node);
    map_alloc(t, MAP_MIN_CAP);
    t->global_root = node_new(t, PTREE_GLOBAL, -1, -1);
    return 0;
}

static void free_rings(struct ptree *t)
{
    for (int32_t i = 0; i < t->n_node; i++) {
        free(t->node[i].rem);
        free(t->node[i].pos);
    }
}

void ptree_free(struct ptree *t)
{
    if (!t) return;
    free_rings(t);
    free(t->node);
    free(t->map_key);
    free(t->map_val);
    memset(t, 0, sizeof *t);
}

void ptree_clear(struct ptree *t)
{
    free_rings(t);
    t->n_node = 0;
    for (size_t i = 0; i < t->map_cap; i++) t->map_val[i] = -1;
    t->n_prompts = 0;
    t->insertions = 0;
    t->global_root = node_new(t, PTREE_GLOBAL, -1, -1);
}

/* ---- insert ---- */

static void insert_path(struct ptree *t, int32_t root, int64_t prompt_id, const int32_t *states,
                        const int32_t *pos, int n, int32_t total)
{
    node_add(t, root, (float)total, 0.0f);
    int32_t cur = root;
    for (int i = 0; i < n; i++) {
        int32_t c = node_child(t, cur, states[i]);
        if (c < 0) c = node_new(t, prompt_id, states[i], cur);
        int32_t rem = total - pos[i] > 0 ? total - pos[i] : 0;
        node_add(t, c, (float)rem, (float)pos[i]);
        cur = c;
    }
}

void ptree_insert(struct ptree *t, int64_t prompt_id, const int32_t *states, const int32_t *pos,
                  int n, int32_t total)
{
    /* The caller's contract (sched records what tool_state_code returned and the
     * decode positions it counted): a break here would poison the tree and its file. */
    if (n < 0 || total < 0)
        FATAL("ptree_insert: n = %d, total = %d: both must be >= 0", n, total);
    for (int i = 0; i < n; i++)
        if (states[i] < 0 || states[i] >= TOOL_STATE_MAX_CODE || pos[i] < 0)
            FATAL("ptree_insert: tool return %d has state %d (valid: [0, %d)) and position "
                  "%d (valid: >= 0); was a tool_state_code() error left unchecked?",
                  i, states[i], TOOL_STATE_MAX_CODE, pos[i]);
    if (prompt_id != PTREE_GLOBAL) {
        int32_t root = map_find(t, prompt_id);
        if (root < 0) {
            root = node_new(t, prompt_id, -1, -1);
            map_put(t, prompt_id, root);
        }
        insert_path(t, root, prompt_id, states, pos, n, total);
    }
    insert_path(t, t->global_root, PTREE_GLOBAL, states, pos, n, total);
    t->insertions++;
}

/* ---- lookups and estimates ---- */

const struct ptree_node *ptree_lookup(const struct ptree *t, int64_t prompt_id,
                                      const int32_t *states, int n)
{
    int32_t cur = prompt_id == PTREE_GLOBAL ? t->global_root : map_find(t, prompt_id);
    for (int i = 0; i < n && cur >= 0; i++) cur = node_child(t, cur, states[i]);
    return cur >= 0 ? &t->node[cur] : NULL;
}

/* A running estimate along a walk: the shrunk (mean, p90) of the current node;
 * valid = 0 while it is undefined (an empty node without a defined prior). */
struct est {
    double mean, p90;
    int valid;
};

/* The node's estimate given its prior: (n raw + K prior) / (n + K). */
static struct est shrink(const struct ptree *t, const struct ptree_node *nd, struct est prior)
{
    double n = nd->n, k = t->cfg.shrink;
    if (!prior.valid || (k == 0.0 && n > 0)) return (struct est){nd->mean, nd->p90, nd->n > 0};
    if (n == 0) return prior;
    return (struct est){(n * nd->mean + k * prior.mean) / (n + k),
                        (n * nd->p90 + k * prior.p90) / (n + k), 1};
}

/* A parent's estimate moved down to child: the progress between them is made. */
static struct est moved(struct est parent, const struct ptree_node *p,
                        const struct ptree_node *child)
{
    double d = child->mean_pos - p->mean_pos;
    parent.mean = fmax(0.0, parent.mean - d);
    parent.p90 = fmax(0.0, parent.p90 - d);
    return parent;
}

int ptree_estimate_remaining(const struct ptree *t, int64_t prompt_id, const int32_t *states,
                             const int32_t *pos, int n, struct ptree_estimate *e)
{
    if (n < 1) return 0;
    const struct ptree_node *N = t->node;
    /* global walk: node g, estimate ge, depth gd (deepest match) */
    int32_t g = t->global_root;
    struct est ge = {N[g].mean, N[g].p90, N[g].n > 0};
    int gd = 0;
    /* prompt walk: node p, estimate pe, depth pd, support ps */
    int32_t p = map_find(t, prompt_id);
    struct est pe = {0, 0, 0};
    int pd = -1;
    double ps = 0;
    if (p >= 0) {
        pe = shrink(t, &N[p], ge);
        pd = 0;
    }
    for (int d = 1; d <= n; d++) {
        int32_t gc = gd == d - 1 ? node_child(t, g, states[d - 1]) : -1;
        if (gc >= 0) {
            ge = shrink(t, &N[gc], moved(ge, &N[g], &N[gc]));
            g = gc;
            gd = d;
        }
        int32_t pc = pd == d - 1 ? node_child(t, p, states[d - 1]) : -1;
        if (pc >= 0) {
            struct est prior = gc >= 0 ? ge : moved(pe, &N[p], &N[pc]);
            pe = shrink(t, &N[pc], prior);
            ps = N[pc].n + (gc >= 0 ? N[gc].n : 0);
            p = pc;
            pd = d;
        }
        if (gc < 0 && pc < 0) break;
    }
    struct est use;
    double support;
    int depth, from_prompt;
    if (pd >= 1 && pd >= gd) {
        use = pe, support = ps, depth = pd, from_prompt = 1;
    } else if (gd >= 1) {
        use = ge, support = N[g].n, depth = gd, from_prompt = 0;
    } else {
        return 0; /* the roots hold totals, never a remaining length */
    }
    if (!use.valid) return 0;
    double progress = fmax(0.0, (double)pos[n - 1] - pos[depth - 1]);
    e->depth = depth;
    e->from_prompt = from_prompt;
    e->mean = fmax(0.0, use.mean - progress);
    e->p90 = fmax(0.0, use.p90 - progress);
    e->support = support;
    e->trusted = support >= t->cfg.min_samples;
    return 1;
}

int ptree_estimate_total(const struct ptree *t, int64_t prompt_id, struct ptree_estimate *e)
{
    const struct ptree_node *g = &t->node[t->global_root];
    struct est ge = {g->mean, g->p90, g->n > 0}, use = ge;
    double support = g->n;
    int from_prompt = 0;
    int32_t p = map_find(t, prompt_id);
    if (p >= 0) {
        use = shrink(t, &t->node[p], ge);
        support = t->node[p].n + g->n;
        from_prompt = 1;
    }
    if (!use.valid) return 0;
    e->depth = 0;
    e->from_prompt = from_prompt;
    e->mean = use.mean;
    e->p90 = use.p90;
    e->support = support;
    e->trusted = support >= t->cfg.min_samples;
    return 1;
}

void ptree_shape(const struct ptree *t, struct ptree_shape *s)
{
    memset(s, 0, sizeof *s);
    for (int32_t i = 0; i < t->n_node; i++) {
        const struct ptree_node *nd = &t->node[i];
        s->nodes++;
        if (nd->prompt_id == PTREE_GLOBAL) s->global_nodes++;
        if (nd->first_child < 0) s->leaves++;
        if (nd->depth > s->max_depth) s->max_depth = nd->depth;
    }
    s->prompts = (int64_t)t->n_prompts;
    s->insertions = t->insertions;
}

/* ---- merge ---- */

/*
 * Replaces a's window by the newest samples of a and b in proportion to their
 * visits (a's share rounded up), any share one side cannot fill going to the other,
 * at most w in all; the two are interleaved in the new ring so that later evictions
 * take from both alike. Visits add; statistics are recomputed.
 */
static void node_combine(struct ptree_node *a, const struct ptree_node *b, int w)
{
    int na = a->n, nb = b->n;
    double va = (double)a->visits, vb = (double)b->visits;
    double share = va + vb > 0 ? va / (va + vb) : (na + nb > 0 ? (double)na / (na + nb) : 0.5);
    int qa = (int)ceil(w * share);
    int ka = na < qa ? na : qa;
    int kb = nb < w - ka ? nb : w - ka;
    int more = w - ka - kb;
    ka += na - ka < more ? na - ka : more;
    int k = ka + kb;
    a->visits += b->visits;
    if (k == 0) return;
    float *rem = xmalloc((size_t)k * sizeof *rem), *pos = xmalloc((size_t)k * sizeof *pos);
    int ia = 0, ib = 0;
    for (int j = 0; j < k; j++) {
        int take_a = ib >= kb || (ia < ka && (int64_t)ia * kb <= (int64_t)ib * ka);
        const struct ptree_node *s = take_a ? a : b;
        int r = take_a ? ring_at(a, na - ka + ia++) : ring_at(b, nb - kb + ib++);
        rem[j] = s->rem[r];
        pos[j] = s->pos[r];
    }
    free(a->rem);
    free(a->pos);
    a->rem = rem;
    a->pos = pos;
    a->cap = a->n = k;
    a->head = k % w;
    node_stats(a);
}

void ptree_merge(struct ptree *dst, const struct ptree *src)
{
    assert(dst != src);
    int32_t *to = xmalloc((size_t)(src->n_node > 0 ? src->n_node : 1) * sizeof *to);
    /* src's parents precede their children, so to[parent] is set before it is read */
    for (int32_t i = 0; i < src->n_node; i++) {
        const struct ptree_node *s = &src->node[i];
        int32_t d;
        if (s->parent >= 0) {
            d = node_child(dst, to[s->parent], s->state);
            if (d < 0) d = node_new(dst, s->prompt_id, s->state, to[s->parent]);
        } else if (s->prompt_id == PTREE_GLOBAL) {
            d = dst->global_root;
        } else {
            d = map_find(dst, s->prompt_id);
            if (d < 0) {
                d = node_new(dst, s->prompt_id, -1, -1);
                map_put(dst, s->prompt_id, d);
            }
        }
        to[i] = d;
        node_combine(&dst->node[d], s, dst->cfg.window);
    }
    dst->insertions += src->insertions;
    free(to);
}

/* ---- for ptree_io.c (ptree_internal.h): building a tree from validated rows ---- */

/*
 * Adds a node (parent: an index in t, or -1 for a root) with the given window
 * (oldest first; only the newest t->cfg.window are kept). A global root fills the
 * existing one. Returns the index, or -1 if the node would duplicate a root or a
 * sibling.
 */
int32_t ptree_io_add_node(struct ptree *t, int64_t prompt_id, int32_t state, int32_t parent,
                          int64_t visits, const float *rem, const float *pos, int n)
{
    int32_t i;
    if (parent >= 0) {
        if (node_child(t, parent, state) >= 0) return -1;
        i = node_new(t, prompt_id, state, parent);
    } else if (prompt_id == PTREE_GLOBAL) {
        i = t->global_root;
        if (t->node[i].visits > 0 || t->node[i].n > 0) return -1;
    } else {
        if (map_find(t, prompt_id) >= 0) return -1;
        i = node_new(t, prompt_id, -1, -1);
        map_put(t, prompt_id, i);
    }
    struct ptree_node *nd = &t->node[i];
    int skip = n > t->cfg.window ? n - t->cfg.window : 0;
    for (int k = skip; k < n; k++) ring_push(nd, t->cfg.window, rem[k], pos[k]);
    nd->visits = visits;
    node_stats(nd);
    return i;
}
