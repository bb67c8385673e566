/*
 * The rollout placement's tournament tree (load_tree.h): sizing and the initial
 * state, every instance at load 0 (so each node's winner is its lowest index).
 */
#include "load_tree.h"

#include <limits.h>
#include <math.h>

size_t load_tree_nodes(int n)
{
    size_t leaves = 1;
    while (leaves < (size_t)(n > 1 ? n : 1)) leaves *= 2;
    return 2 * leaves;
}

void load_tree_init(struct load_tree *t, struct load_node *node, int n, int first)
{
    t->leaves = load_tree_nodes(n) / 2;
    t->node = node;
    for (size_t i = 0; i < t->leaves; i++)
        node[t->leaves + i] = (int)i < n ? (struct load_node){load_tree_key(0.0), first + (int)i}
                                         : (struct load_node){load_tree_key(INFINITY), INT_MAX};
    /* the left child always wins: its loads are no larger and its indices smaller */
    for (size_t i = t->leaves - 1; i >= 1; i--) node[i] = node[2 * i];
    node[0] = (struct load_node){load_tree_key(INFINITY), INT_MAX}; /* unused */
}
