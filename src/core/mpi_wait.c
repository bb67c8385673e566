/* Non-spinning MPI waits (see include/libra/mpi_wait.h). */
#define _POSIX_C_SOURCE 200809L
#include "libra/mpi_wait.h"

#include <time.h>

#include "libra/log.h"

void backoff_reset(struct backoff *b) { b->sleep_s = BACKOFF_MIN_S; }

void sleep_seconds(double s)
{
    if (s <= 0) return;
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    nanosleep(&ts, NULL);
}

void backoff_sleep(struct backoff *b)
{
    if (b->sleep_s < BACKOFF_MIN_S) b->sleep_s = BACKOFF_MIN_S;
    sleep_seconds(b->sleep_s);
    b->sleep_s *= 2;
    if (b->sleep_s > BACKOFF_MAX_S) b->sleep_s = BACKOFF_MAX_S;
}

void mpi_wait_backoff(MPI_Request *req, MPI_Status *status)
{
    struct backoff b;
    backoff_reset(&b);
    for (;;) {
        int done = 0;
        MPI_CHECK(MPI_Test(req, &done, status ? status : MPI_STATUS_IGNORE));
        if (done) return;
        backoff_sleep(&b);
    }
}

void mpi_waitall_backoff(int n, MPI_Request *reqs)
{
    struct backoff b;
    backoff_reset(&b);
    for (;;) {
        int done = 0;
        MPI_CHECK(MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE));
        if (done) return;
        backoff_sleep(&b);
    }
}

void mpi_probe_backoff(int source, int tag, MPI_Comm comm, MPI_Status *status)
{
    struct backoff b;
    backoff_reset(&b);
    for (;;) {
        int flag = 0;
        MPI_CHECK(MPI_Iprobe(source, tag, comm, &flag, status));
        if (flag) return;
        backoff_sleep(&b);
    }
}
