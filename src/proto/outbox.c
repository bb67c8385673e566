/* Owned-buffer non-blocking sends (include/libra/outbox.h). */
#include "libra/outbox.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "libra/mpi_wait.h"

void outbox_init(struct outbox *o) { memset(o, 0, sizeof *o); }

void outbox_send(struct outbox *o, const void *data, size_t len, int dest, int tag, MPI_Comm comm)
{
    if (len > (size_t)INT32_MAX) FATAL("message of %zu bytes to rank %d is too large", len, dest);
    if (o->n == o->cap) {
        if (outbox_progress(o) == o->cap) {
            o->cap = o->cap ? 2 * o->cap : 64;
            o->req = xrealloc(o->req, (size_t)o->cap * sizeof *o->req);
            o->buf = xrealloc(o->buf, (size_t)o->cap * sizeof *o->buf);
        }
    }
    char *b = xmalloc(len);
    memcpy(b, data, len);
    o->buf[o->n] = b;
    MPI_CHECK(MPI_Isend(b, (int)len, MPI_BYTE, dest, tag, comm, &o->req[o->n]));
    o->n++;
}

int outbox_progress(struct outbox *o)
{
    int k = 0;
    for (int i = 0; i < o->n; i++) {
        int done = 0;
        MPI_CHECK(MPI_Test(&o->req[i], &done, MPI_STATUS_IGNORE));
        if (done) {
            free(o->buf[i]);
            continue;
        }
        o->req[k] = o->req[i];
        o->buf[k] = o->buf[i];
        k++;
    }
    o->n = k;
    return k;
}

void outbox_drain(struct outbox *o)
{
    mpi_waitall_backoff(o->n, o->req);
    outbox_progress(o);
}

void outbox_free(struct outbox *o)
{
    for (int i = 0; i < o->n; i++) free(o->buf[i]);
    free(o->req);
    free(o->buf);
    memset(o, 0, sizeof *o);
}
