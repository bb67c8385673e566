/*
 * Non-blocking sends with owned buffers. A rank never blocks in MPI_Send: a large
 * (rendezvous) send to a rank that is itself inside a collective would deadlock, and
 * a blocked rank cannot serve its own queue. outbox_send copies the message,
 * starts MPI_Isend and keeps the buffer until the send completes.
 */
#ifndef LIBRA_OUTBOX_H
#define LIBRA_OUTBOX_H

#include <mpi.h>
#include <stddef.h>

struct outbox {
    MPI_Request *req; /* (n) */
    char **buf;       /* (n) */
    int n, cap;
};

void outbox_init(struct outbox *o);
void outbox_send(struct outbox *o, const void *data, size_t len, int dest, int tag, MPI_Comm comm);
/* Reclaims completed sends; returns how many are still pending. */
int outbox_progress(struct outbox *o);
/* Waits (without spinning) until every send completed. */
void outbox_drain(struct outbox *o);
void outbox_free(struct outbox *o);

#endif
