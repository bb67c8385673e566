/* Per-epoch communicators from MPI_Comm_split (include/libra/comms.h). */
#include "libra/comms.h"

#include <stdlib.h>

#include "libra/log.h"

void comms_init(struct comms *c)
{
    c->role = c->instance = c->replica = c->dp = c->sync = c->hybrid_lane = MPI_COMM_NULL;
}

static void free_one(MPI_Comm *comm)
{
    if (*comm != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(comm));
    *comm = MPI_COMM_NULL;
}

void comms_free(struct comms *c)
{
    free_one(&c->role);
    free_one(&c->instance);
    free_one(&c->replica);
    free_one(&c->dp);
    free_one(&c->sync);
    free_one(&c->hybrid_lane);
}

/* The sync (lane = 0) or hybrid-lane (lane = 1) communicator of exactly its members
 * in plan_members order, built with MPI_Comm_create_group: collective over those
 * ranks only, so ranks outside it (rank 0, most of the job) do not take part and are
 * not waited for. */
static void create_member_comm(const struct plan *p, int world_rank, int lane, MPI_Comm *out)
{
    struct plan_colors mine;
    plan_colors(p, world_rank, &mine);
    if ((lane ? mine.hybrid_lane : mine.sync) != 0) return;
    int *members = xmalloc((size_t)p->world * sizeof *members);
    int n = plan_members(p, lane, members);
    MPI_Group world_group, group;
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
    MPI_CHECK(MPI_Group_incl(world_group, n, members, &group));
    MPI_CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, group, lane ? 2 : 1, out));
    MPI_CHECK(MPI_Group_free(&group));
    MPI_CHECK(MPI_Group_free(&world_group));
    free(members);
}

int comms_rebuild(struct comms *c, const struct plan *old, const struct plan *p, int world_rank)
{
    struct plan_colors col;
    plan_colors(p, world_rank, &col);
    /* The core training communicators survive a re-split that leaves the training
     * group as it was (a hybrid join or release): its ranks keep them and take part
     * in the world split with no color. */
    int keep = old && plan_train_same(old, p) && col.role == ROLE_TRAIN && c->role != MPI_COMM_NULL;
    MPI_Comm kept[3] = {c->role, c->replica, c->dp};
    if (keep) c->role = c->replica = c->dp = MPI_COMM_NULL;
    comms_free(c);
    /* The one collective over the whole job: every rank learns its role comm. */
    MPI_Comm fresh = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, keep ? MPI_UNDEFINED : col.role, world_rank, &fresh));
    if (keep) {
        c->role = kept[0];
        c->replica = kept[1];
        c->dp = kept[2];
    } else {
        c->role = fresh;
    }
    /* Instances split the rollout role comm; replicas and data-parallel groups the
     * train or hybrid role comm (a colocated plan's: the rollout role comm); the other
     * roles are not involved. */
    if (col.role == ROLE_ROLLOUT)
        MPI_CHECK(MPI_Comm_split(c->role, col.instance, world_rank, &c->instance));
    if ((col.role == ROLE_TRAIN && !keep) || col.role == ROLE_HYBRID ||
        (col.role == ROLE_ROLLOUT && p->colocated)) {
        MPI_CHECK(MPI_Comm_split(c->role, col.replica, world_rank, &c->replica));
        MPI_CHECK(MPI_Comm_split(c->role, col.dp, world_rank, &c->dp));
    }
    /* The root replica is in both member comms; everyone creates sync first. */
    create_member_comm(p, world_rank, 0, &c->sync);
    create_member_comm(p, world_rank, 1, &c->hybrid_lane);
    return keep;
}
