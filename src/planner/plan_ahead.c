/*
 * Rollout sets made ahead by worker threads (plan_ahead.h).
 *
 * State per rollout GPU count, under one mutex: none, queued (named by the search's
 * last plan_ahead_want, not started), being made, made (waiting to be taken), taken.
 * A worker takes the most wanted queued count, makes its set with the mutex released
 * and publishes it (condition `done`); plan_ahead_want replaces the queue, so a count
 * the search stopped expecting is never started. The search's own thread never
 * waits for a queued job: plan_ahead_take drops it and the caller makes the set
 * itself, so the search is never slower for a job the workers have not reached; and
 * while it waits for a set being made it makes the next queued one itself, so no
 * thread idles while there is wanted work (the search and one worker would otherwise
 * take turns: the search waits for the count the worker is making, and the worker
 * for the search to name the next).
 */
#include "plan_ahead.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"

enum { A_NONE, A_QUEUED, A_MAKING, A_MADE, A_TAKEN };

struct plan_ahead {
    pthread_mutex_t mu;
    pthread_cond_t work;         /* a job queued, or stop */
    pthread_cond_t done;         /* a set made */
    pthread_t th[PLAN_MAX_THREADS];
    int n_th;
    int n_gpus, klo, khi, max_layouts;
    const struct plan_eval *ev;
    unsigned char *state;        /* (n_gpus + 1) A_* */
    struct layout_set **made;    /* (n_gpus + 1) made, not taken */
    int64_t *evals;              /* (n_gpus + 1) evaluator calls of each made set */
    int queue[PLAN_MAX_THREADS + 1]; /* queued counts, most wanted first */
    int n_queue;
    int n_making;                /* sets being made */
    struct grid_hint hint;       /* where the queued jobs' grids start */
    int stop;
};

#define PT_CHECK(call)                                                                 \
    do {                                                                               \
        int pt_rc_ = (call);                                                           \
        if (pt_rc_ != 0) FATAL("plan_ahead: %s: %s", #call, strerror(pt_rc_));         \
    } while (0)

/* Makes the most wanted queued set (called and returning with the mutex held). */
static void make_next(struct plan_ahead *a)
{
    int g = a->queue[0];
    memmove(a->queue, a->queue + 1, (size_t)--a->n_queue * sizeof *a->queue);
    a->state[g] = A_MAKING;
    a->n_making++;
    struct grid_hint hint = a->hint;
    PT_CHECK(pthread_mutex_unlock(&a->mu));
    struct layout_set *ls = xmalloc(sizeof *ls);
    int64_t n = 0;
    plan_layouts_eval(ls, g, a->klo, a->khi, a->max_layouts, a->ev, &hint, &n);
    PT_CHECK(pthread_mutex_lock(&a->mu));
    a->made[g] = ls;
    a->evals[g] = n;
    a->state[g] = A_MADE;
    a->n_making--;
    PT_CHECK(pthread_cond_broadcast(&a->done));
}

static void *worker(void *arg)
{
    struct plan_ahead *a = arg;
    PT_CHECK(pthread_mutex_lock(&a->mu));
    for (;;) {
        while (a->n_queue == 0 && !a->stop) PT_CHECK(pthread_cond_wait(&a->work, &a->mu));
        if (a->stop) break;
        make_next(a);
    }
    PT_CHECK(pthread_mutex_unlock(&a->mu));
    return NULL;
}

struct plan_ahead *plan_ahead_start(int threads, int n_gpus, int klo, int khi, int max_layouts,
                                    const struct plan_eval *ev)
{
    if (threads > PLAN_MAX_THREADS) threads = PLAN_MAX_THREADS;
    if (threads < 2) return NULL;
    struct plan_ahead *a = xcalloc(1, sizeof *a);
    PT_CHECK(pthread_mutex_init(&a->mu, NULL));
    PT_CHECK(pthread_cond_init(&a->work, NULL));
    PT_CHECK(pthread_cond_init(&a->done, NULL));
    a->n_gpus = n_gpus;
    a->klo = klo;
    a->khi = khi;
    a->max_layouts = max_layouts;
    a->ev = ev;
    a->state = xcalloc((size_t)n_gpus + 1, sizeof *a->state);
    a->made = xcalloc((size_t)n_gpus + 1, sizeof *a->made);
    a->evals = xcalloc((size_t)n_gpus + 1, sizeof *a->evals);
    for (int i = 0; i < threads - 1; i++)
        if (pthread_create(&a->th[a->n_th], NULL, worker, a) == 0) a->n_th++;
    if (a->n_th == 0) { /* none started: the search goes on alone */
        int64_t none = 0;
        plan_ahead_stop(a, &none);
        return NULL;
    }
    return a;
}

void plan_ahead_want(struct plan_ahead *a, const int *gpus, int n, const struct grid_hint *hint)
{
    PT_CHECK(pthread_mutex_lock(&a->mu));
    for (int q = 0; q < a->n_queue; q++) a->state[a->queue[q]] = A_NONE;
    a->n_queue = 0;
    for (int i = 0; i < n && a->n_queue <= a->n_th; i++) /* a job for each, and the caller */
        if (a->state[gpus[i]] == A_NONE) {
            a->state[gpus[i]] = A_QUEUED;
            a->queue[a->n_queue++] = gpus[i];
        }
    if (hint) a->hint = *hint;
    if (a->n_queue > 0) PT_CHECK(pthread_cond_broadcast(&a->work));
    PT_CHECK(pthread_mutex_unlock(&a->mu));
}

struct layout_set *plan_ahead_take(struct plan_ahead *a, int gpus, int64_t *n_evals)
{
    struct layout_set *ls = NULL;
    PT_CHECK(pthread_mutex_lock(&a->mu));
    if (a->state[gpus] == A_QUEUED) { /* not started: the caller is as quick */
        int q = 0;
        while (a->queue[q] != gpus) q++;
        memmove(a->queue + q, a->queue + q + 1, (size_t)(--a->n_queue - q) * sizeof *a->queue);
        a->state[gpus] = A_NONE;
    }
    while (a->state[gpus] == A_MAKING) { /* being made: help with the next meanwhile */
        if (a->n_queue > 0)
            make_next(a);
        else
            PT_CHECK(pthread_cond_wait(&a->done, &a->mu));
    }
    if (a->state[gpus] == A_MADE) {
        ls = a->made[gpus];
        a->made[gpus] = NULL;
        *n_evals += a->evals[gpus];
        a->state[gpus] = A_TAKEN;
    }
    PT_CHECK(pthread_mutex_unlock(&a->mu));
    return ls;
}

void plan_ahead_drain(struct plan_ahead *a)
{
    PT_CHECK(pthread_mutex_lock(&a->mu));
    while (a->n_queue > 0 || a->n_making > 0) PT_CHECK(pthread_cond_wait(&a->done, &a->mu));
    PT_CHECK(pthread_mutex_unlock(&a->mu));
}

void plan_ahead_stop(struct plan_ahead *a, int64_t *n_evals)
{
    if (a == NULL) return;
    PT_CHECK(pthread_mutex_lock(&a->mu));
    a->stop = 1;
    a->n_queue = 0;
    PT_CHECK(pthread_cond_broadcast(&a->work));
    PT_CHECK(pthread_mutex_unlock(&a->mu));
    for (int i = 0; i < a->n_th; i++) PT_CHECK(pthread_join(a->th[i], NULL));
    /* the workers are gone: what they made and nobody took */
    for (int g = 0; g <= a->n_gpus; g++)
        if (a->state[g] == A_MADE) {
            *n_evals += a->evals[g];
            plan_layouts_free(a->made[g]);
            free(a->made[g]);
        }
    free(a->state);
    free(a->made);
    free(a->evals);
    PT_CHECK(pthread_cond_destroy(&a->work));
    PT_CHECK(pthread_cond_destroy(&a->done));
    PT_CHECK(pthread_mutex_destroy(&a->mu));
    free(a);
}
