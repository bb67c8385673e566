/*
 * Between ptree.c (the tree) and ptree_io.c (its HDF5 file): how a loader builds a
 * tree node by node from rows it has already validated.
 */
#ifndef LIBRA_PTREE_INTERNAL_H
#define LIBRA_PTREE_INTERNAL_H

#include "libra/ptree.h"

/* Adds a node (parent: an index in t, or -1 for a root) with the given window
 * (oldest first; only the newest t->cfg.window are kept). A global root fills the
 * existing one. Returns the index, or -1 if the node would duplicate a root or a
 * sibling. */
int32_t ptree_io_add_node(struct ptree *t, int64_t prompt_id, int32_t state, int32_t parent,
                          int64_t visits, const float *rem, const float *pos, int n);

#endif
