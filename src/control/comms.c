/* Per-epoch communicators from MPI_Comm_split (include/libra/comms.h). */
#include "libra/comms.h"

#include <stdlib.h>

#include "libra/log.h"

void comms_init(struct comms *c)
{
    c->role = c->instance = c->sync = c->hybrid_lane = MPI_COMM_NULL;
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
    free_one(&c->sync);
    free_one(&c->hybrid_lane);
}

/* A communicator of exactly the ranks with color 0, ordered by key, built with
 * MPI_Comm_create_group: collective over those ranks only, so ranks outside it
 * (rank 0, most of the job) do not take part and are not waited for. */
static void create_member_comm(const struct plan *p, int world_rank, int sync, MPI_Comm *out)
{
    int *members = xmalloc((size_t)p->world * sizeof *members);
    int n = 0, root = plan_train_root(p);
    if (root >= 0) members[n++] = root;
    for (int r = 1; r < p->world; r++) {
        struct plan_colors c;
        plan_colors(p, r, &c);
        int color = sync ? c.sync : c.hybrid_lane;
        if (color == 0 && r != root) members[n++] = r;
    }
    struct plan_colors mine;
    plan_colors(p, world_rank, &mine);
    if ((sync ? mine.sync : mine.hybrid_lane) == 0) {
        MPI_Group world_group, group;
        MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
        MPI_CHECK(MPI_Group_incl(world_group, n, members, &group));
        MPI_CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, group, sync ? 1 : 2, out));
        MPI_CHECK(MPI_Group_free(&group));
        MPI_CHECK(MPI_Group_free(&world_group));
    }
    free(members);
}

int comms_rebuild(struct comms *c, const struct plan *old, const struct plan *p, int world_rank)
{
    struct plan_colors col;
    plan_colors(p, world_rank, &col);
    /* The core training communicator survives a re-split that leaves the training
     * group as it was (a hybrid join or release): its ranks keep their comm and take
     * part in the world split with no color. */
    int keep = old && plan_train_same(old, p) && col.role == ROLE_TRAIN && c->role != MPI_COMM_NULL;
    MPI_Comm kept = c->role;
    if (keep) c->role = MPI_COMM_NULL;
    comms_free(c);
    /* The one collective over the whole job: every rank learns its role comm. */
    MPI_Comm fresh = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, keep ? MPI_UNDEFINED : col.role, world_rank, &fresh));
    c->role = keep ? kept : fresh;
    /* Instances split the rollout role comm; the other roles are not involved. */
    if (col.role == ROLE_ROLLOUT)
        MPI_CHECK(MPI_Comm_split(c->role, col.instance, world_rank, &c->instance));
    /* The training root is in both member comms; everyone creates sync first. */
    create_member_comm(p, world_rank, 1, &c->sync);
    create_member_comm(p, world_rank, 0, &c->hybrid_lane);
    return keep;
}
