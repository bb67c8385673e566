/*
 * A Plan: the role of every rank for one planning epoch, and the communicator
 * colors that follow from it.
 *
 * Placement (plan_build): worker slots are ranks 1..world-1. Rollout instances come
 * first, largest TP first, each on consecutive ranks -- so an instance of TP t
 * starts at a slot that is a multiple of t and never straddles a node whose GPU
 * count is a multiple of 8. Then the hybrid (lent) ranks, then the training ranks
 * (DP index in rank order; the first is the training root), then idle ranks.
 *
 * Communicators (plan_colors, built by comms_rebuild with MPI_Comm_split on world):
 *   role        all ranks of the same role (rollout | train | hybrid)
 *   instance    the ranks of one rollout instance (its TP group)
 *   replica     train / hybrid: the ranks of one replica (its TP group, index /
 *               replica size)
 *   dp          train / hybrid: the ranks of one TP index across the role's replicas
 *               (index % replica size): the data-parallel reduction of a gradient
 *               shard
 *   sync        the root replica (the first train_tp x train_pp training ranks, in
 *               index order) and every rollout rank: weight syncs
 *   hybrid lane the root replica and the hybrid ranks: lent gradients, totals and
 *               joins, kept apart so the core training communicator is never touched
 * Member order of sync and hybrid lane (their comm ranks): plan_members.
 *
 * Colocated plans (train.colocate): no rank has ROLE_TRAIN; every rollout rank is also
 * a training rank, its training index its place among the rollout ranks in rank order
 * (plan_train_index), so replica and dp are split from the rollout role, the root
 * replica is the first train_tp x train_pp rollout ranks and the training root is the
 * first instance's leader. Their weight syncs are local (worker/weight_sync.c).
 */
#ifndef LIBRA_PLAN_H
#define LIBRA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "libra/config.h"

enum role { ROLE_CONTROLLER = 0, ROLE_ROLLOUT = 1, ROLE_TRAIN = 2, ROLE_HYBRID = 3, ROLE_IDLE = 4 };

struct rank_assign {
    int32_t role;     /* enum role */
    int32_t instance; /* rollout: instance index; else -1 */
    int32_t tp;       /* rollout: TP degree of the instance; else 0 */
    int32_t index;    /* rollout: rank within instance; train/hybrid: DP index; else 0 */
};

struct instance_desc {
    int32_t leader; /* world rank of the instance's first rank */
    int32_t tp;
};

struct plan {
    int32_t epoch, step, world;
    int32_t n_train, n_hybrid, n_rollout_ranks, n_instances, n_idle;
    int32_t train_tp, train_pp, micro; /* training shape: a replica is tp x pp ranks */
    int32_t colocated;  /* train.colocate: the rollout ranks are also the n_train training
                           ranks (no rank has ROLE_TRAIN) */
    char reason[64];
    struct rank_assign *ranks;  /* (world) */
    struct instance_desc *inst; /* (n_instances) */
};

struct plan_colors {
    int role, instance, replica, dp, sync, hybrid_lane; /* MPI_UNDEFINED: not a member */
    int key;                               /* ordering key inside sync / hybrid lane */
};

void plan_init(struct plan *p, int world);
void plan_free(struct plan *p);
void plan_copy(struct plan *dst, const struct plan *src);
/* Builds the plan of spec on world ranks; -1 with a message if it does not fit. */
int plan_build(const struct plan_spec *spec, int world, int epoch, int step, const char *reason,
               struct plan *out, char *err, size_t errlen);
void plan_colors(const struct plan *p, int rank, struct plan_colors *c);
/* Derives out from base by lending the instances with lend[i] != 0 (i indexes
 * base->inst) to training: their ranks become hybrid ranks, in rank order, the other
 * instances keep their leader, TP and ranks (so they survive the re-split with their
 * KV caches) and are renumbered in order. Every lent instance's TP must be a multiple
 * of the replica size train_tp x train_pp. */
void plan_lend(const struct plan *base, const int *lend, struct plan *out);
/* Ranks per training replica (train_tp x train_pp, at least 1). */
int plan_replica_size(const struct plan *p);
/* 1 if both plans have the same training ranks, indices and shape: the core training
 * communicator is then kept across the re-split (a hybrid join or release). */
int plan_train_same(const struct plan *a, const struct plan *b);
/* 1 if both plans give every rank the same role, instance and index, and train with the
 * same replica shape (TP, PP, micro-batch) and colocation. A plan that differs only in
 * the shape is re-split (every instance survives it) so that the workers take the new
 * shape: kept as the same plan, the planner believed it applied while the workers
 * trained with the old one. */
int plan_same_roles(const struct plan *a, const struct plan *b);
/* World rank of the training root (DP index 0), -1 if none. */
int plan_train_root(const struct plan *p);
/* Training index of rank: a training or hybrid rank's DP index; in a colocated plan a
 * rollout rank's place among the rollout ranks in rank order; -1 if it does not train.
 * Its replica is index / plan_replica_size, its rank in the replica index % size. */
int plan_train_index(const struct plan *p, int rank);
/* 1 if rank trains in p (plan_train_index >= 0). */
int plan_trains(const struct plan *p, int rank);
/* 1 if rank is one of the root replica's ranks (training index < replica size; a
 * hybrid rank never is). */
int plan_in_root_replica(const struct plan *p, int rank);
/* World ranks of the sync (lane = 0) or hybrid-lane (lane = 1) communicator in comm
 * rank order: the root replica by index, then the rollout (hybrid) ranks ascending.
 * out holds world entries; returns the count. */
int plan_members(const struct plan *p, int lane, int *out);
/* Index in p of the instance led by leader with the same TP as in old; -1 if gone. */
int plan_find_instance(const struct plan *p, int leader, int tp);
/* 1 if rank's instance in old exists unchanged (same leader, same TP) in new. */
int plan_instance_survives(const struct plan *old, const struct plan *new_plan, int rank);
/* "4,2,2,1" */
void plan_format_tp(const struct plan *p, char *buf, size_t len);
const char *role_name(int role);

/* Wire form: a header then world rank_assign entries and n_instances instance_desc. */
size_t plan_packed_size(const struct plan *p);
void plan_pack(const struct plan *p, void *buf);
int plan_unpack(const void *buf, size_t len, struct plan *p);

#endif
