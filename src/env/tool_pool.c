/*
 * The tool thread pool of a rollout rank (include/libra/tool_pool.h).
 *
 * One mutex guards a growable array of job slots; workers sleep on a condition
 * variable until a job is queued. A slot's life:
 *
 *   QUEUED --worker picks it--> RUNNING --tool returns--> DONE --poll--> free
 *     |                           |
 *     | deadline passes, poll     | deadline passes, poll reports TOOL_TIMEOUT,
 *     v                           v or tool_pool_cancel
 *   free (reported as timeout)  ORPHAN --tool returns--> free (result dropped)
 *
 * Contract details:
 *  - A job's deadline is its submit time + timeout_s (wall_time(), monotonic). A
 *    result that arrives after the deadline is replaced by the timeout result, so
 *    whether a job timed out does not depend on when the caller polls. A timeout
 *    result has tool -1 (the pool cannot know which tool the call named), status
 *    TOOL_TIMEOUT, text "error: timeout" and latency_s = timeout_s.
 *  - Workers take queued jobs oldest first and skip ones already past their deadline
 *    (poll reports those); poll returns jobs ordered by completion time (finish time,
 *    or the deadline for a timeout), ties by submission order.
 *  - Tags need not be unique; tool_pool_cancel forgets the oldest job with the tag.
 *  - tool_pool_free drops queued jobs, waits for running tools to return, joins.
 *  - Slots are addressed by index, never by pointer, across unlocks: the array may
 *    move when it grows, and a slot stays taken (RUNNING / ORPHAN) while a worker runs
 *    its tool, so the index stays valid.
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/tool_pool.h"

#include "libra/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define PT_CHECK(call)                                                                   \
    do {                                                                                 \
        int pt_check_rc_ = (call);                                                       \
        if (pt_check_rc_ != 0) FATAL("%s failed: %s", #call, strerror(pt_check_rc_));  \
    } while (0)

enum job_state { JOB_FREE = 0, JOB_QUEUED, JOB_RUNNING, JOB_DONE, JOB_ORPHAN };

struct tool_job {
    int state;                    /* enum job_state */
    int64_t tag;
    uint64_t seq;                 /* submission order */
    double submit, deadline, done_at;
    char call[ENV_CALL_MAX + 2];  /* at most ENV_CALL_MAX + 1 bytes and a NUL */
    size_t len;
    struct env_tool_result res;   /* JOB_DONE */
};

struct tool_pool {
    pthread_mutex_t mu;
    pthread_cond_t work;          /* a job was queued, or stop was set */
    pthread_t *threads;
    int n_threads;
    double timeout_s;
    tool_fn fn;
    void *ctx;
    int stop;
    uint64_t next_seq;
    struct tool_job *jobs;        /* (cap) slots, JOB_FREE ones reusable */
    size_t cap;
    int pending;                  /* QUEUED + RUNNING + DONE */
};

static void set_timeout_result(struct env_tool_result *r)
{
    memset(r, 0, sizeof *r);
    r->tool = -1;
    r->status = TOOL_TIMEOUT;
    r->len = (int)strlen("error: timeout");
    memcpy(r->text, "error: timeout", (size_t)r->len + 1);
}

/* The oldest queued job a worker may start, or -1. Called with the mutex held. */
static long next_runnable(const struct tool_pool *p, double now)
{
    long best = -1;
    for (size_t i = 0; i < p->cap; i++) {
        const struct tool_job *j = &p->jobs[i];
        if (j->state == JOB_QUEUED && now < j->deadline &&
            (best < 0 || j->seq < p->jobs[best].seq))
            best = (long)i;
    }
    return best;
}

static void *worker_main(void *arg)
{
    struct tool_pool *p = arg;
    char call[ENV_CALL_MAX + 2];
    struct env_tool_result res;

    PT_CHECK(pthread_mutex_lock(&p->mu));
    for (;;) {
        long k = -1;
        while (!p->stop && (k = next_runnable(p, wall_time())) < 0)
            PT_CHECK(pthread_cond_wait(&p->work, &p->mu));
        if (p->stop) break;
        struct tool_job *j = &p->jobs[k];
        j->state = JOB_RUNNING;
        memcpy(call, j->call, j->len + 1);
        size_t len = j->len;
        double deadline = j->deadline;
        PT_CHECK(pthread_mutex_unlock(&p->mu));

        memset(&res, 0, sizeof res);
        res.tool = -1;
        p->fn(p->ctx, call, len, deadline, &res);
        double now = wall_time();

        PT_CHECK(pthread_mutex_lock(&p->mu));
        j = &p->jobs[k]; /* the array may have moved */
        if (j->state == JOB_ORPHAN) {
            j->state = JOB_FREE; /* reported as a timeout, or cancelled: drop */
            continue;
        }
        j->state = JOB_DONE;
        j->done_at = now;
        if (now > j->deadline) {
            set_timeout_result(&j->res);
            j->done_at = j->deadline;
        } else {
            j->res = res;
            if (j->res.len < 0) j->res.len = 0;
            if (j->res.len >= (int)sizeof j->res.text) j->res.len = (int)sizeof j->res.text - 1;
            j->res.text[j->res.len] = '\0';
        }
    }
    PT_CHECK(pthread_mutex_unlock(&p->mu));
    return NULL;
}

struct tool_pool *tool_pool_create(int n_threads, double timeout_s, tool_fn fn, void *ctx)
{
    if (n_threads < 1 || !(timeout_s > 0) || !fn)
        FATAL("tool_pool_create: n_threads = %d (>= 1), timeout_s = %g (> 0), fn %s",
              n_threads, timeout_s, fn ? "set" : "NULL (required)");
    struct tool_pool *p = xcalloc(1, sizeof *p);
    p->n_threads = n_threads;
    p->timeout_s = timeout_s;
    p->fn = fn;
    p->ctx = ctx;
    PT_CHECK(pthread_mutex_init(&p->mu, NULL));
    PT_CHECK(pthread_cond_init(&p->work, NULL));
    p->threads = xcalloc((size_t)n_threads, sizeof *p->threads);
    for (int i = 0; i < n_threads; i++)
        PT_CHECK(pthread_create(&p->threads[i], NULL, worker_main, p));
    return p;
}

void tool_pool_free(struct tool_pool *p)
{
    if (!p) return;
    PT_CHECK(pthread_mutex_lock(&p->mu));
    p->stop = 1;
    PT_CHECK(pthread_cond_broadcast(&p->work));
    PT_CHECK(pthread_mutex_unlock(&p->mu));
    for (int i = 0; i < p->n_threads; i++) PT_CHECK(pthread_join(p->threads[i], NULL));
    PT_CHECK(pthread_cond_destroy(&p->work));
    PT_CHECK(pthread_mutex_destroy(&p->mu));
    free(p->threads);
    free(p->jobs);
    free(p);
}

void tool_pool_submit(struct tool_pool *p, int64_t tag, const char *call, size_t len)
{
    size_t keep = len > ENV_CALL_MAX ? ENV_CALL_MAX + 1 : len;
    double now = wall_time();
    PT_CHECK(pthread_mutex_lock(&p->mu));
    size_t k = 0;
    while (k < p->cap && p->jobs[k].state != JOB_FREE) k++;
    if (k == p->cap) {
        size_t old = p->cap;
        XGROW(p->jobs, p->cap, old + 1);
        memset(p->jobs + old, 0, (p->cap - old) * sizeof *p->jobs);
    }
    struct tool_job *j = &p->jobs[k];
    memset(j, 0, sizeof *j);
    j->state = JOB_QUEUED;
    j->tag = tag;
    j->seq = p->next_seq++;
    j->submit = now;
    j->deadline = now + p->timeout_s;
    if (keep > 0) memcpy(j->call, call, keep);
    j->call[keep] = '\0';
    j->len = keep;
    p->pending++;
    PT_CHECK(pthread_cond_signal(&p->work));
    PT_CHECK(pthread_mutex_unlock(&p->mu));
}

struct ready { size_t slot; double at; uint64_t seq; };

static int cmp_ready(const void *a, const void *b)
{
    const struct ready *x = a, *y = b;
    if (x->at != y->at) return x->at < y->at ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int tool_pool_poll(struct tool_pool *p, struct tool_job_done *out, int max)
{
    if (max <= 0) return 0;
    PT_CHECK(pthread_mutex_lock(&p->mu));
    double now = wall_time();
    struct ready *ready = NULL;
    size_t n = 0;
    for (size_t i = 0; i < p->cap; i++) {
        const struct tool_job *j = &p->jobs[i];
        int done = j->state == JOB_DONE;
        int late = (j->state == JOB_QUEUED || j->state == JOB_RUNNING) && now >= j->deadline;
        if (!done && !late) continue;
        if (!ready) ready = xmalloc(p->cap * sizeof *ready);
        ready[n++] = (struct ready){i, done ? j->done_at : j->deadline, j->seq};
    }
    if (n > 1) qsort(ready, n, sizeof *ready, cmp_ready);
    int got = 0;
    for (size_t r = 0; r < n && got < max; r++) {
        struct tool_job *j = &p->jobs[ready[r].slot];
        struct tool_job_done *d = &out[got++];
        d->tag = j->tag;
        if (j->state == JOB_DONE) {
            d->latency_s = j->done_at - j->submit;
            d->res = j->res;
            j->state = JOB_FREE;
        } else {
            d->latency_s = j->deadline - j->submit;
            set_timeout_result(&d->res);
            j->state = j->state == JOB_RUNNING ? JOB_ORPHAN : JOB_FREE;
        }
        p->pending--;
    }
    PT_CHECK(pthread_mutex_unlock(&p->mu));
    free(ready);
    return got;
}

int tool_pool_pending(const struct tool_pool *p)
{
    /* The pool is never const itself (it comes from tool_pool_create): locking it
     * here does not change what the caller sees. */
    struct tool_pool *q = (struct tool_pool *)p;
    PT_CHECK(pthread_mutex_lock(&q->mu));
    int n = q->pending;
    PT_CHECK(pthread_mutex_unlock(&q->mu));
    return n;
}

int tool_pool_cancel(struct tool_pool *p, int64_t tag)
{
    PT_CHECK(pthread_mutex_lock(&p->mu));
    long best = -1;
    for (size_t i = 0; i < p->cap; i++) {
        const struct tool_job *j = &p->jobs[i];
        if ((j->state == JOB_QUEUED || j->state == JOB_RUNNING || j->state == JOB_DONE) &&
            j->tag == tag && (best < 0 || j->seq < p->jobs[best].seq))
            best = (long)i;
    }
    if (best >= 0) {
        struct tool_job *j = &p->jobs[best];
        j->state = j->state == JOB_RUNNING ? JOB_ORPHAN : JOB_FREE;
        p->pending--;
    }
    PT_CHECK(pthread_mutex_unlock(&p->mu));
    return best >= 0;
}
