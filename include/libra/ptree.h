/*
 * C-MLFQ's causal prefix tree (reference cmlfq.md §1.3, with the §6.3/§6.4 fixes).
 *
 * A forest: one tree per prompt plus one global tree that receives every
 * trajectory. A node is reached by a sequence of tool-return states (tool_state.h)
 * from its root; it keeps the last `window` samples of
 *   rem = decode tokens the trajectory generated after that tool return, and
 *   pos = decode tokens it had generated when the tool returned,
 * so mean and p90 are over ONE window (reference: mean over all time, p90 over the
 * last 200). A root's samples are whole trajectories at pos 0: rem = total decode
 * tokens. Remaining work counts decode tokens only (tool-return tokens are prefill,
 * reference §6.5).
 *
 * Estimates (never from a single sample unless min_samples says so):
 *  - shrinkage: a node's estimate is (n * raw + K * prior) / (n + K), K = shrink,
 *    applied to mean and p90 alike, where the prior of
 *      a prompt-tree node = the estimate of the global node on the same path (when it
 *        exists), else that of its prompt-tree parent;
 *      a global node      = the estimate of its parent;
 *    and "the estimate of the parent" is moved to this depth by subtracting the
 *    progress between them: parent_est - (mean_pos(node) - mean_pos(parent)),
 *    floored at 0. A root's estimate is its raw statistic (prompt root: shrunk toward
 *    the global root).
 *  - remaining (ptree_estimate_remaining): walk the prompt tree and the global tree
 *    along the states; use the deeper match (the prompt tree on a tie; its shrinkage
 *    already weighs in the global node by support). Depth 0 (a root: total-length
 *    statistics) is never used as a remaining length: no match below the roots means
 *    "not found". The progress made since the matched depth d is subtracted:
 *    pos[n-1] - pos[d-1]. support = n of the node used, plus that of its global
 *    counterpart when the prompt node was used; trusted = support >= min_samples.
 *  - total (ptree_estimate_total): the prompt root, shrunk toward the global root;
 *    used for a trajectory's initial placement (progress 0).
 *
 * Memory: nodes live in one growable array and refer to each other by index; a
 * node's sample ring grows on demand up to `window`. Not thread-safe.
 */
#ifndef LIBRA_PTREE_H
#define LIBRA_PTREE_H

#include <stddef.h>
#include <stdint.h>

#define PTREE_GLOBAL INT64_MIN /* prompt_id of the global tree */

struct ptree_config {
    int window;       /* samples a node keeps (1 .. 2^20); reference 200 */
    int min_samples;  /* support an estimate needs to be trusted (>= 1) */
    double shrink;    /* K, pseudo-count of the prior (>= 0; 0 = raw statistics) */
};

struct ptree_node {
    int64_t prompt_id;     /* PTREE_GLOBAL in the global tree */
    int32_t state;         /* state code of the edge into it; -1 for a root */
    int32_t depth;         /* 0 for a root */
    int32_t parent;        /* index; -1 for a root */
    int32_t first_child;   /* index; -1 none */
    int32_t next_sibling;  /* index; -1 none */
    int32_t n;             /* samples in the window (<= window) */
    int32_t head;          /* ring position of the next write */
    int32_t cap;           /* samples allocated (<= window) */
    int64_t visits;        /* insertions through this node, all time */
    float *rem;            /* (cap) ring: remaining decode tokens */
    float *pos;            /* (cap) ring: decode tokens generated so far */
    double mean, p90;      /* of rem over the window (p90: linear interpolation, numpy) */
    double mean_pos;       /* of pos over the window */
};

struct ptree {
    struct ptree_config cfg;
    struct ptree_node *node;  /* (n_node) */
    int32_t n_node, cap_node;
    int32_t global_root;      /* index of the global root (always exists) */
    /* prompt_id -> index of the prompt's root: open addressing, linear probing */
    int64_t *map_key;         /* (map_cap) */
    int32_t *map_val;         /* (map_cap); -1 empty */
    size_t map_cap, n_prompts;
    int64_t insertions;       /* trajectories inserted */
};

struct ptree_estimate {
    int depth;       /* depth of the node used (0: a root, for totals) */
    int from_prompt; /* 1: the prompt tree's node, 0: the global tree's */
    double mean;     /* estimated remaining (or total) decode tokens, shrunk, progress off */
    double p90;
    double support;  /* samples behind it */
    int trusted;     /* support >= min_samples */
};

struct ptree_shape {
    int64_t nodes;       /* all nodes, both trees, roots included */
    int64_t global_nodes;
    int64_t prompts;
    int64_t leaves;      /* nodes without children, roots included */
    int32_t max_depth;
    int64_t insertions;
};

/* 0, or -1 with err set if the config is out of range. */
int ptree_init(struct ptree *t, const struct ptree_config *cfg, char *err, size_t errlen);
void ptree_free(struct ptree *t);
/* Drops every node (the global root is recreated, empty) and the insertion count. */
void ptree_clear(struct ptree *t);
/* Records a finished trajectory that had n tool returns: states[i] and pos[i] (decode
 * tokens generated when return i arrived; non-decreasing), total decode tokens. The
 * root gets (rem = total, pos = 0); the node of return i gets
 * (rem = max(0, total - pos[i]), pos = pos[i]). Into the prompt tree and the global
 * tree (prompt_id PTREE_GLOBAL: the global tree only). n == 0 records the roots only.
 * A state outside [0, TOOL_STATE_MAX_CODE) or a negative position or total is a
 * caller bug and ends the job (FATAL). */
void ptree_insert(struct ptree *t, int64_t prompt_id, const int32_t *states, const int32_t *pos,
                  int n, int32_t total);
/* The node at exactly this path (n = 0: the root), or NULL if the prompt (or a step)
 * is unknown. prompt_id PTREE_GLOBAL walks the global tree. */
const struct ptree_node *ptree_lookup(const struct ptree *t, int64_t prompt_id,
                                      const int32_t *states, int n);
/* Remaining decode tokens of a trajectory after its n >= 1 tool returns (see the top
 * of this file). Returns 1 and fills e, or 0 if no node below the roots matches. */
int ptree_estimate_remaining(const struct ptree *t, int64_t prompt_id, const int32_t *states,
                             const int32_t *pos, int n, struct ptree_estimate *e);
/* Total decode tokens of a new trajectory of this prompt. Returns 1, or 0 if neither
 * the prompt root nor the global root has a sample. */
int ptree_estimate_total(const struct ptree *t, int64_t prompt_id, struct ptree_estimate *e);
void ptree_shape(const struct ptree *t, struct ptree_shape *s);
/* Adds src into dst: per node, visits add; the windows are combined keeping the
 * newest samples of each in proportion to their visit counts (so neither side's
 * evidence is dropped wholesale), statistics recomputed; nodes only in src are
 * copied. Insertion counts add. Trees with different windows are allowed (dst's
 * window applies). dst and src must be different trees. */
void ptree_merge(struct ptree *dst, const struct ptree *src);

/* ---- persistence (ptree_io.c): an HDF5 group, self-describing ----
 * Group `name` under loc: dataset "nodes" (one row per node: prompt_id, state,
 * depth, parent, visits, n, mean, p90, mean_pos, key "<tool>:<size>:<status>" or
 * "root"), datasets "rem" and "pos" (every node's window, oldest first, node after
 * node), attributes format = "libra-ptree", version, window, insertions,
 * payload_small, payload_large. */
struct tool_state_config;
/* loc is an HDF5 hid_t (file or group) passed as int64_t so this header needs no
 * hdf5.h. */
int ptree_write_h5(const struct ptree *t, int64_t loc, const char *name,
                   const struct tool_state_config *ts, const char *const *tool_names,
                   int n_tools, char *err, size_t errlen);
/* Writes path atomically (temp file, fsync, rename) with the group at "/tree". */
int ptree_save(const struct ptree *t, const char *path, const struct tool_state_config *ts,
               const char *const *tool_names, int n_tools, char *err, size_t errlen);
/* Reads "/tree" of path into t (initialised): on success t's contents are replaced,
 * on failure t is left as it was. Every index, count and value is validated; a damaged file gives -1 and a message, never a crash. A file
 * whose payload thresholds differ from ts is refused (its states mean other sizes).
 * Windows longer than t's keep their newest samples. */
int ptree_load(struct ptree *t, const char *path, const struct tool_state_config *ts,
               char *err, size_t errlen);

#endif
