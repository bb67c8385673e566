/*
 * Waiting without spinning. Open MPI's blocking calls busy-poll, which starves a
 * 49-rank emulated run on 2 cores; every wait in libra goes through these helpers,
 * which test and then sleep with exponential back-off (up to BACKOFF_MAX_S).
 */
#ifndef LIBRA_MPI_WAIT_H
#define LIBRA_MPI_WAIT_H

#include <mpi.h>

#define BACKOFF_MIN_S 2e-6
#define BACKOFF_MAX_S 1e-3

struct backoff {
    double sleep_s;
};

void backoff_reset(struct backoff *b);
/* Sleeps the current interval and doubles it (capped). */
void backoff_sleep(struct backoff *b);
/* Sleeps for s seconds (no-op for s <= 0). */
void sleep_seconds(double s);
void mpi_wait_backoff(MPI_Request *req, MPI_Status *status);
void mpi_waitall_backoff(int n, MPI_Request *reqs);
/* Probes (source, tag) on comm until a message is there; fills status. */
void mpi_probe_backoff(int source, int tag, MPI_Comm comm, MPI_Status *status);

#endif
