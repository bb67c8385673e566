/*
 * A thread-backed struct tfm_comm for single-process tests of tensor parallelism:
 * the ranks of a group are threads; an all-reduce posts each rank's buffer, waits on a
 * barrier, and every rank combines all buffers in rank order (so every rank gets the
 * same bits, as the model requires of an all-reduce), waits again, and writes its
 * result. Also: the TP and kv-head groups of a TP-t model, and running a function on
 * t threads.
 *
 * Limits: at most TP_MAX ranks; a temporary buffer per all-reduce (test speeds).
 * CUnit is not thread-safe: rank functions record results, the main thread asserts.
 */
#ifndef LIBRA_TESTS_TP_THREADS_H
#define LIBRA_TESTS_TP_THREADS_H

#include "libra/tfm_tp.h"

#define TP_MAX 8

struct tp_group;
/* A group of size ranks (threads), and its free. */
struct tp_group *tp_group_create(int size);
void tp_group_free(struct tp_group *g);
/* Rank `rank`'s view of the group (valid while the group lives). */
struct tfm_comm tp_group_comm(struct tp_group *g, int rank);

/* The communicators of a TP-t model with K kv heads: the TP group, and when K < t the
 * K groups of t/K ranks that share a kv head ([g t/K, (g+1) t/K)). */
struct tp_world {
    int t, K;
    struct tp_group *group;
    struct tp_group *kv_group[TP_MAX];
    struct tfm_comm comm[TP_MAX], kv_comm[TP_MAX];
};
void tp_world_init(struct tp_world *w, int t, int n_kv_heads);
void tp_world_free(struct tp_world *w);
/* tfm_tp_init of rank `rank` of model c over w (t == 1: no communicators). */
void tp_world_tp(struct tp_world *w, struct tfm_tp *tp, const struct tfm_config *c, int rank);

/* Runs fn(rank, arg) for rank 0..t-1 on t threads and joins them. */
void tp_run(int t, void (*fn)(int rank, void *arg), void *arg);

#endif
