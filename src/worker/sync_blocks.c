/*
 * The geometry of a weight sync (sync_internal.h): a place's blocks as the device
 * lists them (struct dev_slice: a rectangle of one tensor, stored contiguously), the
 * overlap of two blocks, the walk over the pieces a sender sends into a slice (each
 * one band of an overlap), and the MPI subarray type that picks a piece out of a
 * block's contiguous storage -- so a message goes from any sender's layout straight
 * into any receiver's, whatever TP degrees the two sides have.
 */
#include <stdlib.h>

#include "libra/log.h"
#include "sync_internal.h"

static int sync_overlap(const struct dev_slice *a, const struct dev_slice *b, struct overlap *o)
{
    if (a->tensor != b->tensor) return 0;
    int64_t r0 = a->r0 > b->r0 ? a->r0 : b->r0, c0 = a->c0 > b->c0 ? a->c0 : b->c0;
    int64_t r1 = a->r0 + a->nr < b->r0 + b->nr ? a->r0 + a->nr : b->r0 + b->nr;
    int64_t c1 = a->c0 + a->nc < b->c0 + b->nc ? a->c0 + a->nc : b->c0 + b->nc;
    if (r1 <= r0 || c1 <= c0) return 0;
    *o = (struct overlap){r0, r1 - r0, c0, c1 - c0};
    return 1;
}

static int64_t sync_band_rows(const struct dev_slice *s, long long esize, long long chunk)
{
    long long row = (long long)s->full_cols * esize;
    return row > 0 && chunk / row > 1 ? (int64_t)(chunk / row) : 1;
}

static void sync_bands(const struct overlap *o, int64_t R, int64_t *k0, int64_t *k1)
{
    *k0 = o->r0 / R;
    *k1 = (o->r0 + o->nr + R - 1) / R;
}

static struct overlap sync_band_piece(const struct overlap *o, int64_t R, int64_t k)
{
    int64_t r0 = k * R > o->r0 ? k * R : o->r0;
    int64_t r1 = (k + 1) * R < o->r0 + o->nr ? (k + 1) * R : o->r0 + o->nr;
    return (struct overlap){r0, r1 - r0, o->c0, o->nc};
}

int sync_same_block(const struct dev_slice *a, const struct dev_slice *b)
{
    return a->tensor == b->tensor && a->r0 == b->r0 && a->nr == b->nr && a->c0 == b->c0 &&
           a->nc == b->nc;
}

/* Block `in` lies inside block `out` (the same tensor). */
static int sync_within(const struct dev_slice *in, const struct dev_slice *out)
{
    return in->tensor == out->tensor && in->r0 >= out->r0 &&
           in->r0 + in->nr <= out->r0 + out->nr && in->c0 >= out->c0 &&
           in->c0 + in->nc <= out->c0 + out->nc;
}

MPI_Datatype sync_block_type(const struct dev_slice *s, const struct overlap *o,
                             MPI_Datatype elem)
{
    if (s->nr > 0x7fffffff || s->nc > 0x7fffffff)
        FATAL("weight sync: a slice of %lld x %lld exceeds one MPI count", (long long)s->nr,
              (long long)s->nc);
    int sizes[2] = {(int)s->nr, (int)s->nc}, sub[2] = {(int)o->nr, (int)o->nc};
    int starts[2] = {(int)(o->r0 - s->r0), (int)(o->c0 - s->c0)};
    MPI_Datatype t;
    MPI_CHECK(MPI_Type_create_subarray(2, sizes, sub, starts, MPI_ORDER_C, elem, &t));
    MPI_CHECK(MPI_Type_commit(&t));
    return t;
}

struct dev_slice *ws_slices(struct worker *w, int t, int i, int use, int *n)
{
    *n = w->ops->slices(w->dev, t, i, use, NULL, 0); /* how many */
    struct dev_slice *s = xmalloc((size_t)(*n > 0 ? *n : 1) * sizeof *s);
    w->ops->slices(w->dev, t, i, use, s, *n);
    return s;
}

void side_get(struct worker *w, struct side *sd, int t, int i, int use)
{
    sd->t = t;
    sd->i = i;
    sd->s = ws_slices(w, t, i, use, &sd->n);
    sd->order = sd->first = NULL;
    sd->n_tensor = 0;
}

/* The blocks a slice of another side can overlap are its tensor's only, in the order
 * the walk lists them. */
void side_index(struct side *sd)
{
    for (int m = 0; m < sd->n; m++)
        if (sd->s[m].tensor + 1 > sd->n_tensor) sd->n_tensor = sd->s[m].tensor + 1;
    sd->first = xcalloc((size_t)sd->n_tensor + 1, sizeof *sd->first);
    sd->order = xmalloc((size_t)(sd->n ? sd->n : 1) * sizeof *sd->order);
    for (int m = 0; m < sd->n; m++) sd->first[sd->s[m].tensor + 1]++;
    for (int x = 0; x < sd->n_tensor; x++) sd->first[x + 1] += sd->first[x];
    for (int m = 0; m < sd->n; m++) sd->order[sd->first[sd->s[m].tensor]++] = m;
    for (int x = sd->n_tensor; x > 0; x--) sd->first[x] = sd->first[x - 1]; /* back */
    sd->first[0] = 0;
}

static void side_tensor_range(const struct side *sd, int x, int *j0, int *j1)
{
    *j0 = *j1 = 0;
    if (x < 0 || x >= sd->n_tensor) return;
    *j0 = sd->first[x];
    *j1 = sd->first[x + 1];
}

int side_holder(const struct side *sd, const struct dev_slice *b)
{
    int j0, j1;
    side_tensor_range(sd, b->tensor, &j0, &j1);
    for (int j = j0; j < j1; j++)
        if (sync_within(b, &sd->s[sd->order[j]])) return sd->order[j];
    return -1;
}

void side_free(struct side *sd)
{
    free(sd->s);
    free(sd->order);
    free(sd->first);
}

/* Sender k's block b is sent: no earlier sender holds the same block. */
static int side_first_holder(const struct side *senders, int k, const struct dev_slice *b)
{
    for (int q = 0; q < k; q++) {
        int j0, j1;
        side_tensor_range(&senders[q], b->tensor, &j0, &j1);
        for (int j = j0; j < j1; j++)
            if (sync_same_block(&senders[q].s[senders[q].order[j]], b)) return 0;
    }
    return 1;
}

void piece_walk_begin(struct piece_walk *pw, const struct side *senders, int k,
                      const struct dev_slice *s, long long esize, long long chunk)
{
    *pw = (struct piece_walk){.senders = senders, .s = s, .k = k, .esize = esize, .chunk = chunk};
    side_tensor_range(&senders[k], s->tensor, &pw->j, &pw->j1);
    pw->j--;              /* before the first block */
    pw->band = pw->band_end = 0; /* no band left of it */
}

int piece_walk_next(struct piece_walk *pw)
{
    while (pw->band + 1 >= pw->band_end) { /* the next block with a piece */
        const struct side *sd = &pw->senders[pw->k];
        if (++pw->j >= pw->j1) return 0;
        pw->b = sd->order[pw->j];
        pw->sb = &sd->s[pw->b];
        if (!sync_overlap(pw->s, pw->sb, &pw->o) || !side_first_holder(pw->senders, pw->k, pw->sb))
            continue;
        pw->R = sync_band_rows(pw->sb, pw->esize, pw->chunk);
        sync_bands(&pw->o, pw->R, &pw->band, &pw->band_end);
        pw->pc = sync_band_piece(&pw->o, pw->R, pw->band);
        return 1;
    }
    pw->pc = sync_band_piece(&pw->o, pw->R, ++pw->band);
    return 1;
}

