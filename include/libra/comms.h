/*
 * The communicators of one planning epoch, rebuilt from a plan. Every rank, rank 0
 * included, calls comms_rebuild with the same plan: one MPI_Comm_split of
 * MPI_COMM_WORLD by role (the only job-wide collective), the instance comms split
 * from the rollout role comm, and the sync and hybrid-lane comms made with
 * MPI_Comm_create_group by their members only -- so a re-split costs one world
 * collective, not four. A communicator a rank is not part of is MPI_COMM_NULL. See
 * plan.h for what each one is for.
 */
#ifndef LIBRA_COMMS_H
#define LIBRA_COMMS_H

#include <mpi.h>

#include "libra/plan.h"

struct comms {
    MPI_Comm role;        /* same role */
    MPI_Comm instance;    /* the rollout instance (TP group) */
    MPI_Comm replica;     /* train / hybrid / colocated rollout: the replica (TP group) */
    MPI_Comm dp;          /* the same ranks: one TP index across the replicas */
    MPI_Comm sync;        /* root replica + all rollout ranks (plan_members order) */
    MPI_Comm hybrid_lane; /* root replica + hybrid ranks (plan_members order) */
};

void comms_init(struct comms *c);
/* old: the plan the communicators were built for (NULL the first time). Returns 1
 * when this rank kept its core training communicators (plan_train_same). */
int comms_rebuild(struct comms *c, const struct plan *old, const struct plan *p, int world_rank);
void comms_free(struct comms *c);

#endif
