/*
 * The least-loaded instance of one rollout class (internal to src/planner): a
 * tournament (winner) tree over the class's instances keyed by (load, index), the
 * priority queue of the rollout cost model's placement (plan_cost_rollout.c).
 *
 * Every internal node holds the smaller (load, index) pair of its two children, so
 * the root is the least-loaded instance, the lowest index among equal loads -- the
 * same instance any correct priority queue on that total order gives. Raising one
 * leaf's load replays its path to the root: log2(leaves) steps of one comparison
 * with the sibling each, the same path length every time and the winner selected
 * without a branch (a binary heap's sift-down compares two children per level and
 * branches unpredictably on which one; at 4,096 GPUs it was most of the planner's
 * solve time).
 *
 * Loads are stored as the bits of the double: for non-negative doubles (and
 * INFINITY) the unsigned order of the bits is the numeric order, and integer
 * selects compile to conditional moves. Limits: loads are >= 0 and not NaN (the
 * placement's loads are sums of non-negative finite seconds); -0.0 is stored as
 * +0.0. Padding leaves hold (INFINITY, INT_MAX), so a real instance always beats one.
 */
#ifndef LIBRA_LOAD_TREE_H
#define LIBRA_LOAD_TREE_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct load_node {
    uint64_t key; /* the load's bits */
    int idx;      /* the instance's index in the whole layout */
};

struct load_tree {
    size_t leaves;          /* a power of two >= the instances */
    struct load_node *node; /* (2 leaves): node[1] the root, node[leaves + i] instance i */
};

/* Nodes a tree of n instances needs (the caller carves every class's tree out of
 * one allocation). */
size_t load_tree_nodes(int n);
/* A tree of n >= 1 instances numbered first, first + 1, ..., all at load 0, over
 * node (load_tree_nodes(n) nodes). */
void load_tree_init(struct load_tree *t, struct load_node *node, int n, int first);

static inline uint64_t load_tree_key(double load)
{
    assert(load >= 0);
    load += 0.0; /* -0.0 -> +0.0 */
    uint64_t k;
    memcpy(&k, &load, sizeof k);
    return k;
}

/* The least-loaded instance (the lowest index among equal loads) and its load. */
static inline int load_tree_min(const struct load_tree *t, double *load)
{
    memcpy(load, &t->node[1].key, sizeof *load);
    return t->node[1].idx;
}

/* Sets the least-loaded instance's load to `load` (>= its old load) and replays its
 * path; `first` is the tree's first index. */
static inline void load_tree_raise_min(struct load_tree *t, int first, double load)
{
    struct load_node *nd = t->node;
    uint64_t ck = load_tree_key(load);
    int ci = nd[1].idx;
    size_t pos = t->leaves + (size_t)(ci - first);
    nd[pos].key = ck;
    while (pos > 1) {
        const struct load_node *sib = &nd[pos ^ 1];
        uint64_t sk = sib->key;
        int si = sib->idx;
        /* all ones where the sibling wins; masks, as compilers turn ?: into branches */
        uint64_t m = -(uint64_t)((sk < ck) | ((sk == ck) & (si < ci)));
        ck = (sk & m) | (ck & ~m);
        ci = (int)(((uint32_t)si & (uint32_t)m) | ((uint32_t)ci & ~(uint32_t)m));
        pos >>= 1;
        nd[pos].key = ck;
        nd[pos].idx = ci;
    }
}

#endif
