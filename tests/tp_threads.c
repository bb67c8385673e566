/*
 * Thread-backed communicators for the tensor-parallel tests (tp_threads.h): a
 * barrier-based all-reduce that combines the ranks' buffers in rank order, so the
 * result is deterministic and bitwise the same on every rank.
 */
#define _POSIX_C_SOURCE 200809L

#include "tp_threads.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"

struct tp_rank_ctx {
    struct tp_group *g;
    int rank;
};

struct tp_group {
    int size;
    pthread_barrier_t bar;
    void *buf[TP_MAX];               /* each rank's posted buffer during an all-reduce */
    struct tp_rank_ctx ctx[TP_MAX];
};

struct tp_group *tp_group_create(int size)
{
    if (size < 1 || size > TP_MAX) FATAL("tp_group_create: size %d outside [1, %d]", size, TP_MAX);
    struct tp_group *g = xcalloc(1, sizeof *g);
    g->size = size;
    if (pthread_barrier_init(&g->bar, NULL, (unsigned)size) != 0)
        FATAL("tp_group_create: pthread_barrier_init failed");
    for (int r = 0; r < size; r++) g->ctx[r] = (struct tp_rank_ctx){g, r};
    return g;
}

void tp_group_free(struct tp_group *g)
{
    if (!g) return;
    pthread_barrier_destroy(&g->bar);
    free(g);
}

/* One all-reduce of n elements of type TYPE: post, wait, combine in rank order into a
 * private buffer, wait (everyone has read every buffer), write back. */
#define ALLREDUCE(NAME, TYPE)                                                          \
    static void NAME(void *ctx, TYPE *x, size_t n, enum tfm_red_op op)                 \
    {                                                                                  \
        struct tp_rank_ctx *cx = ctx;                                                  \
        struct tp_group *g = cx->g;                                                    \
        g->buf[cx->rank] = x;                                                          \
        pthread_barrier_wait(&g->bar);                                                 \
        TYPE *tmp = xmalloc((n ? n : 1) * sizeof *tmp);                                \
        for (size_t i = 0; i < n; i++) {                                               \
            TYPE acc = ((const TYPE *)g->buf[0])[i];                                   \
            for (int r = 1; r < g->size; r++) {                                        \
                TYPE v = ((const TYPE *)g->buf[r])[i];                                 \
                if (op == TFM_RED_SUM)                                                 \
                    acc = acc + v;                                                     \
                else if (op == TFM_RED_MAX)                                            \
                    acc = v > acc ? v : acc;                                           \
                else                                                                   \
                    acc = v < acc ? v : acc;                                           \
            }                                                                          \
            tmp[i] = acc;                                                              \
        }                                                                              \
        pthread_barrier_wait(&g->bar);                                                 \
        memcpy(x, tmp, n * sizeof *tmp);                                               \
        free(tmp);                                                                     \
    }
ALLREDUCE(allreduce_f32, float)
ALLREDUCE(allreduce_f64, double)
ALLREDUCE(allreduce_i32, int32_t)
#undef ALLREDUCE

struct tfm_comm tp_group_comm(struct tp_group *g, int rank)
{
    return (struct tfm_comm){.rank = rank, .size = g->size, .ctx = &g->ctx[rank],
                             .allreduce_f32 = allreduce_f32, .allreduce_f64 = allreduce_f64,
                             .allreduce_i32 = allreduce_i32};
}

void tp_world_init(struct tp_world *w, int t, int n_kv_heads)
{
    memset(w, 0, sizeof *w);
    w->t = t;
    w->K = n_kv_heads;
    if (t == 1) return;
    w->group = tp_group_create(t);
    for (int r = 0; r < t; r++) w->comm[r] = tp_group_comm(w->group, r);
    if (n_kv_heads < t) {
        int per = t / n_kv_heads;
        for (int g = 0; g < n_kv_heads; g++) w->kv_group[g] = tp_group_create(per);
        for (int r = 0; r < t; r++) w->kv_comm[r] = tp_group_comm(w->kv_group[r / per], r % per);
    }
}

void tp_world_free(struct tp_world *w)
{
    tp_group_free(w->group);
    for (int g = 0; g < TP_MAX; g++) tp_group_free(w->kv_group[g]);
    memset(w, 0, sizeof *w);
}

void tp_world_tp(struct tp_world *w, struct tfm_tp *tp, const struct tfm_config *c, int rank)
{
    if (w->t == 1) {
        tfm_tp_init(tp, c, 1, 0, NULL, NULL);
        return;
    }
    tfm_tp_init(tp, c, w->t, rank, &w->comm[rank], w->K < w->t ? &w->kv_comm[rank] : NULL);
}

struct tp_thread_arg {
    int rank;
    void (*fn)(int rank, void *arg);
    void *arg;
};

static void *thread_main(void *p)
{
    struct tp_thread_arg *a = p;
    a->fn(a->rank, a->arg);
    return NULL;
}

void tp_run(int t, void (*fn)(int rank, void *arg), void *arg)
{
    pthread_t th[TP_MAX];
    struct tp_thread_arg a[TP_MAX];
    if (t < 1 || t > TP_MAX) FATAL("tp_run: %d threads outside [1, %d]", t, TP_MAX);
    for (int r = 0; r < t; r++) {
        a[r] = (struct tp_thread_arg){r, fn, arg};
        if (pthread_create(&th[r], NULL, thread_main, &a[r]) != 0)
            FATAL("tp_run: pthread_create failed for rank %d", r);
    }
    for (int r = 0; r < t; r++) pthread_join(th[r], NULL);
}
