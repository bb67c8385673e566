/* Per-epoch communicators from MPI_Comm_split (include/libra/comms.h). */
#include "libra/comms.h"

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

void comms_rebuild(struct comms *c, const struct plan *p, int world_rank)
{
    comms_free(c);
    struct plan_colors col;
    plan_colors(p, world_rank, &col);
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, col.role, world_rank, &c->role));
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, col.instance, world_rank, &c->instance));
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, col.sync, col.key, &c->sync));
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, col.hybrid_lane, col.key, &c->hybrid_lane));
}
