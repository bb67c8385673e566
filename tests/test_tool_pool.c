/*
 * Tests of the tool thread pool: results come back with their tags and texts; many
 * jobs over 2 threads each come back exactly once; completion order on one thread;
 * poll's max; over-long calls are passed as ENV_CALL_MAX + 1 bytes; a job past its
 * deadline is reported TOOL_TIMEOUT and its late result dropped; a queued job past
 * its deadline is reported without running; cancel (queued, running, unknown tag);
 * free with running and queued jobs; the pending count.
 *
 * The test tool reads its call: "echo TEXT" returns TEXT, "sleep MS" sleeps MS
 * milliseconds (ignoring the deadline, like a misbehaving tool) and returns "slept",
 * "wait" blocks until the test opens a gate (so a tool outlives its deadline for as
 * long as the test needs, whatever the machine's speed). Statuses and counts are
 * asserted, never timings: waits poll until a condition holds, with a generous safety
 * limit that fails the test instead of hanging.
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/log.h"
#include "libra/tool_pool.h"
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAIT_LIMIT_S 20.0 /* a wait longer than this fails the test (never expected) */

struct tool_stats {
    atomic_int started, finished;
    atomic_int gate; /* "wait" calls block until the test sets it */
};

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static void test_tool(void *ctx, const char *call, size_t len, double deadline,
                      struct env_tool_result *out)
{
    struct tool_stats *st = ctx;
    (void)deadline;
    atomic_fetch_add(&st->started, 1);
    out->tool = ENV_TOOL_CALC;
    out->status = TOOL_SUCCESS;
    if (len >= 5 && memcmp(call, "echo ", 5) == 0) {
        memcpy(out->text, call + 5, len - 5);
        out->len = (int)(len - 5);
    } else if (len >= 6 && memcmp(call, "sleep ", 6) == 0) {
        sleep_ms(atol(call + 6));
        out->len = snprintf(out->text, sizeof out->text, "slept");
    } else if (len == 4 && memcmp(call, "wait", 4) == 0) {
        while (!atomic_load(&st->gate)) sleep_ms(1);
        out->len = snprintf(out->text, sizeof out->text, "waited");
    } else {
        out->status = TOOL_FAILURE;
        out->len = snprintf(out->text, sizeof out->text, "error: unknown call (%zu bytes)", len);
    }
    atomic_fetch_add(&st->finished, 1);
}

/* Polls until n results arrived (into out), failing the test after WAIT_LIMIT_S. */
static int poll_until(struct tool_pool *p, struct tool_job_done *out, int n)
{
    int got = 0;
    double t0 = wall_time();
    while (got < n && wall_time() - t0 < WAIT_LIMIT_S) {
        got += tool_pool_poll(p, out + got, n - got);
        if (got < n) sleep_ms(1);
    }
    CU_ASSERT_EQUAL(got, n);
    return got;
}

static void wait_finished(struct tool_stats *st, int n)
{
    double t0 = wall_time();
    while (atomic_load(&st->finished) < n && wall_time() - t0 < WAIT_LIMIT_S) sleep_ms(1);
    CU_ASSERT_EQUAL(atomic_load(&st->finished), n);
}

static void submit_str(struct tool_pool *p, int64_t tag, const char *s)
{
    tool_pool_submit(p, tag, s, strlen(s));
}

static void test_echo_tags(void)
{
    struct tool_stats st = {0, 0, 0};
    struct tool_pool *p = tool_pool_create(1, 30.0, test_tool, &st);
    struct tool_job_done d[4];
    CU_ASSERT_EQUAL(tool_pool_poll(p, d, 4), 0);
    submit_str(p, 7, "echo seven");
    submit_str(p, -3, "echo minus three");
    submit_str(p, 7, "bogus");
    CU_ASSERT_EQUAL(tool_pool_pending(p), 3);
    poll_until(p, d, 3);
    /* One thread: completion order is submission order. */
    CU_ASSERT_EQUAL(d[0].tag, 7);
    CU_ASSERT_EQUAL(d[0].res.status, TOOL_SUCCESS);
    CU_ASSERT_EQUAL(d[0].res.tool, ENV_TOOL_CALC);
    CU_ASSERT_EQUAL(d[0].res.len, 5);
    CU_ASSERT_STRING_EQUAL(d[0].res.text, "seven");
    CU_ASSERT_EQUAL(d[1].tag, -3);
    CU_ASSERT_STRING_EQUAL(d[1].res.text, "minus three");
    CU_ASSERT_EQUAL(d[2].tag, 7);
    CU_ASSERT_EQUAL(d[2].res.status, TOOL_FAILURE);
    for (int i = 0; i < 3; i++) CU_ASSERT(d[i].latency_s >= 0);
    CU_ASSERT_EQUAL(tool_pool_pending(p), 0);
    CU_ASSERT_EQUAL(tool_pool_poll(p, d, 4), 0);
    tool_pool_free(p);
}

static void test_many_jobs_two_threads(void)
{
    enum { N = 200 };
    struct tool_stats st = {0, 0, 0};
    struct tool_pool *p = tool_pool_create(2, 30.0, test_tool, &st);
    static struct tool_job_done d[N];
    int seen[N] = {0};
    char call[32];
    for (int i = 0; i < N; i++) {
        snprintf(call, sizeof call, "echo %d", i * 3);
        submit_str(p, i, call);
    }
    /* Poll in small batches while the workers run: max is respected. */
    int got = 0;
    double t0 = wall_time();
    while (got < N && wall_time() - t0 < WAIT_LIMIT_S) {
        int k = tool_pool_poll(p, d + got, 7);
        CU_ASSERT(k >= 0 && k <= 7);
        got += k;
        CU_ASSERT_EQUAL(tool_pool_pending(p), N - got);
    }
    CU_ASSERT_EQUAL_FATAL(got, N);
    for (int i = 0; i < N; i++) {
        CU_ASSERT_FATAL(d[i].tag >= 0 && d[i].tag < N);
        seen[d[i].tag]++;
        snprintf(call, sizeof call, "%d", (int)d[i].tag * 3);
        CU_ASSERT_STRING_EQUAL(d[i].res.text, call);
        CU_ASSERT_EQUAL(d[i].res.status, TOOL_SUCCESS);
    }
    for (int i = 0; i < N; i++) CU_ASSERT_EQUAL(seen[i], 1);
    CU_ASSERT_EQUAL(atomic_load(&st.finished), N);
    tool_pool_free(p);
}

static void test_long_call_truncated(void)
{
    struct tool_stats st = {0, 0, 0};
    struct tool_pool *p = tool_pool_create(1, 30.0, test_tool, &st);
    char big[ENV_CALL_MAX + 50];
    memset(big, 'x', sizeof big);
    memcpy(big, "echo ", 5);
    struct tool_job_done d[3];
    tool_pool_submit(p, 1, big, sizeof big);       /* longer than ENV_CALL_MAX */
    tool_pool_submit(p, 2, big, ENV_CALL_MAX);     /* exactly ENV_CALL_MAX: kept */
    tool_pool_submit(p, 3, NULL, 0);               /* empty call */
    poll_until(p, d, 3);
    CU_ASSERT_EQUAL(d[0].res.len, ENV_CALL_MAX + 1 - 5);
    CU_ASSERT_EQUAL(d[1].res.len, ENV_CALL_MAX - 5);
    CU_ASSERT_EQUAL(d[2].res.status, TOOL_FAILURE);
    CU_ASSERT_STRING_EQUAL(d[2].res.text, "error: unknown call (0 bytes)");
    tool_pool_free(p);
}

static void wait_started(struct tool_stats *st, int n)
{
    double t0 = wall_time();
    while (atomic_load(&st->started) < n && wall_time() - t0 < WAIT_LIMIT_S) sleep_ms(1);
    CU_ASSERT_FATAL(atomic_load(&st->started) >= n);
}

static void test_timeout_and_late_result(void)
{
    struct tool_stats st = {0, 0, 0};
    struct tool_pool *p = tool_pool_create(1, 0.25, test_tool, &st);
    struct tool_job_done d[2];
    submit_str(p, 42, "wait");
    wait_started(&st, 1);
    /* The running job passes its deadline: reported without waiting for the tool. */
    poll_until(p, d, 1);
    CU_ASSERT_EQUAL(d[0].tag, 42);
    CU_ASSERT_EQUAL(d[0].res.status, TOOL_TIMEOUT);
    CU_ASSERT_EQUAL(d[0].res.tool, -1);
    CU_ASSERT_STRING_EQUAL(d[0].res.text, "error: timeout");
    CU_ASSERT_EQUAL(d[0].res.len, (int)strlen("error: timeout"));
    CU_ASSERT_EQUAL(tool_pool_pending(p), 0);
    CU_ASSERT_EQUAL(atomic_load(&st.finished), 0);
    /* The late result is dropped once the tool returns. */
    atomic_store(&st.gate, 1);
    wait_finished(&st, 1);
    CU_ASSERT_EQUAL(tool_pool_poll(p, d, 2), 0);
    CU_ASSERT_EQUAL(tool_pool_pending(p), 0);
    /* The thread is free again and serves the next job. */
    submit_str(p, 43, "echo after");
    poll_until(p, d, 1);
    CU_ASSERT_EQUAL(d[0].tag, 43);
    CU_ASSERT_EQUAL(d[0].res.status, TOOL_SUCCESS);
    CU_ASSERT_STRING_EQUAL(d[0].res.text, "after");
    tool_pool_free(p);

    /* A job queued behind a blocked one passes its deadline without ever running. */
    struct tool_stats st2 = {0, 0, 0};
    p = tool_pool_create(1, 0.25, test_tool, &st2);
    submit_str(p, 1, "wait");
    wait_started(&st2, 1);
    double queued_at = wall_time();
    submit_str(p, 2, "echo never");
    /* Free the thread only after job 2's deadline (without polling): the worker must
     * not start a job that is already late. */
    while (wall_time() < queued_at + 0.25 + 0.05) sleep_ms(1);
    atomic_store(&st2.gate, 1);
    wait_finished(&st2, 1);
    sleep_ms(20); /* room for a wrong worker to start job 2 */
    poll_until(p, d, 2);
    CU_ASSERT_EQUAL(d[0].tag, 1); /* completion order: deadline order */
    CU_ASSERT_EQUAL(d[1].tag, 2);
    CU_ASSERT_EQUAL(d[0].res.status, TOOL_TIMEOUT);
    CU_ASSERT_EQUAL(d[1].res.status, TOOL_TIMEOUT);
    CU_ASSERT_STRING_EQUAL(d[1].res.text, "error: timeout");
    CU_ASSERT_EQUAL(tool_pool_poll(p, d, 2), 0);
    tool_pool_free(p);
    CU_ASSERT_EQUAL(atomic_load(&st2.started), 1); /* the queued job never ran */
}

static void test_cancel(void)
{
    struct tool_stats st = {0, 0, 0};
    struct tool_pool *p = tool_pool_create(1, 30.0, test_tool, &st);
    struct tool_job_done d[4];
    submit_str(p, 1, "wait");
    wait_started(&st, 1); /* job 1 blocks the only thread: the others stay queued */
    submit_str(p, 2, "echo two");
    submit_str(p, 3, "echo three");
    CU_ASSERT_EQUAL(tool_pool_pending(p), 3);
    CU_ASSERT_EQUAL(tool_pool_cancel(p, 2), 1);  /* queued */
    CU_ASSERT_EQUAL(tool_pool_cancel(p, 2), 0);  /* already gone */
    CU_ASSERT_EQUAL(tool_pool_cancel(p, 99), 0); /* never submitted */
    CU_ASSERT_EQUAL(tool_pool_cancel(p, 1), 1);  /* running: its result will be dropped */
    CU_ASSERT_EQUAL(tool_pool_pending(p), 1);
    atomic_store(&st.gate, 1);
    poll_until(p, d, 1);
    CU_ASSERT_EQUAL(d[0].tag, 3);
    CU_ASSERT_STRING_EQUAL(d[0].res.text, "three");
    wait_finished(&st, 2);
    CU_ASSERT_EQUAL(tool_pool_poll(p, d, 4), 0);
    CU_ASSERT_EQUAL(atomic_load(&st.started), 2); /* job 2 never ran */

    /* A finished, not yet polled job can be cancelled too. */
    submit_str(p, 4, "echo four");
    wait_finished(&st, 3);
    CU_ASSERT_EQUAL(tool_pool_pending(p), 1);
    CU_ASSERT_EQUAL(tool_pool_cancel(p, 4), 1);
    CU_ASSERT_EQUAL(tool_pool_pending(p), 0);
    CU_ASSERT_EQUAL(tool_pool_poll(p, d, 4), 0);
    tool_pool_free(p);
}

static void test_free_with_running_jobs(void)
{
    struct tool_stats st = {0, 0, 0};
    struct tool_pool *p = tool_pool_create(2, 30.0, test_tool, &st);
    for (int i = 0; i < 6; i++) submit_str(p, i, "sleep 50");
    wait_started(&st, 2);
    tool_pool_free(p); /* running tools return first; queued ones are dropped */
    CU_ASSERT(atomic_load(&st.started) >= 2);
    CU_ASSERT_EQUAL(atomic_load(&st.finished), atomic_load(&st.started));
    tool_pool_free(NULL);
}

static void test_slot_reuse(void)
{
    /* Rounds of submit / poll reuse slots; tags and texts never get mixed up. */
    struct tool_stats st = {0, 0, 0};
    struct tool_pool *p = tool_pool_create(2, 30.0, test_tool, &st);
    struct tool_job_done d[40];
    char call[32], want[32];
    for (int round = 0; round < 20; round++) {
        int n = 1 + round % 5 * 8;
        for (int i = 0; i < n; i++) {
            snprintf(call, sizeof call, "echo r%d-%d", round, i);
            submit_str(p, round * 100 + i, call);
        }
        poll_until(p, d, n);
        for (int i = 0; i < n; i++) {
            snprintf(want, sizeof want, "r%d-%d", round, (int)(d[i].tag - round * 100));
            CU_ASSERT_STRING_EQUAL(d[i].res.text, want);
        }
        CU_ASSERT_EQUAL(tool_pool_pending(p), 0);
    }
    tool_pool_free(p);
}

int main(void)
{
    static const struct test_case cases[] = {
        {"results come back with tags, in completion order", test_echo_tags},
        {"200 jobs over 2 threads, each once, poll max respected", test_many_jobs_two_threads},
        {"over-long calls passed as ENV_CALL_MAX + 1 bytes", test_long_call_truncated},
        {"deadline: TOOL_TIMEOUT at once, late result dropped", test_timeout_and_late_result},
        {"cancel queued, running, finished and unknown jobs", test_cancel},
        {"free waits for running tools", test_free_with_running_jobs},
        {"slots are reused without mixing results", test_slot_reuse},
        {NULL, NULL},
    };
    static const struct test_suite suites[] = {
        {"tool_pool", cases},
        {NULL, NULL},
    };
    return test_main(suites);
}
