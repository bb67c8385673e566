/*
 * The instance queue discipline (include/libra/iqueue.h): levels from the router's
 * estimate and the thresholds base * 4^l, demotion of a turn without an estimate as
 * it generates, aging (one level per age_s waited, floor 0), FIFO (always level 0,
 * arrival order), the service order, and the mapping from the sched section.
 */
#include <math.h>
#include <string.h>

#include "libra/config.h"
#include "libra/iqueue.h"
#include "testutil.h"

static const struct iqueue_config mlfq4 = {.mlfq = 1, .n_levels = 4, .base_tokens = 1024,
                                           .age_s = 0};

static void test_levels_from_estimate(void)
{
    /* thresholds 1024, 4096, 16384: work in (0, 1024] -> 0, (1024, 4096] -> 1, ... */
    CU_ASSERT_EQUAL(iq_level(&mlfq4, 0, 0, 0), 0);
    CU_ASSERT_EQUAL(iq_level(&mlfq4, 1024, 0, 0), 0);
    CU_ASSERT_EQUAL(iq_level(&mlfq4, 1025, 0, 0), 1);
    CU_ASSERT_EQUAL(iq_level(&mlfq4, 4096, 0, 0), 1);
    CU_ASSERT_EQUAL(iq_level(&mlfq4, 4097, 0, 0), 2);
    CU_ASSERT_EQUAL(iq_level(&mlfq4, 16384, 0, 0), 2);
    CU_ASSERT_EQUAL(iq_level(&mlfq4, 16385, 0, 0), 3);
    CU_ASSERT_EQUAL(iq_level(&mlfq4, 2000000000, 0, 0), 3); /* the last level is open */
    /* the estimate counts down as the turn generates: 5000 left at dispatch, 2000 done */
    CU_ASSERT_EQUAL(iq_level(&mlfq4, 5000, 2000, 0), 1);
    CU_ASSERT_EQUAL(iq_level(&mlfq4, 5000, 4500, 0), 0);
    CU_ASSERT_EQUAL(iq_level(&mlfq4, 5000, 9000, 0), 2); /* overran: its 9000 tokens count */
    /* more levels, smaller base */
    struct iqueue_config c = {.mlfq = 1, .n_levels = 8, .base_tokens = 10};
    CU_ASSERT_EQUAL(iq_level(&c, 10 * 4 * 4 * 4 + 1, 0, 0), 4);
    CU_ASSERT_EQUAL(iq_level(&c, 2000000000, 0, 0), 7);
}

static void test_demotion_without_estimate(void)
{
    /* A tool-free turn (no estimate) starts at the top and sinks as it generates. */
    CU_ASSERT_EQUAL(iq_level(&mlfq4, -1, 0, 0), 0);
    CU_ASSERT_EQUAL(iq_level(&mlfq4, -1, 1024, 0), 0);
    CU_ASSERT_EQUAL(iq_level(&mlfq4, -1, 1025, 0), 1);
    CU_ASSERT_EQUAL(iq_level(&mlfq4, -1, 5000, 0), 2);
    CU_ASSERT_EQUAL(iq_level(&mlfq4, -1, 20000, 0), 3);
    int prev = 0;
    for (int g = 0; g <= 40000; g += 97) { /* monotone in the tokens generated */
        int l = iq_level(&mlfq4, -1, g, 0);
        CU_ASSERT(l >= prev && l <= 3);
        prev = l;
    }
}

static void test_aging(void)
{
    struct iqueue_config c = mlfq4;
    c.age_s = 30;
    CU_ASSERT_EQUAL(iq_level(&c, 20000, 0, 0), 3);
    CU_ASSERT_EQUAL(iq_level(&c, 20000, 0, 29.9), 3);
    CU_ASSERT_EQUAL(iq_level(&c, 20000, 0, 30), 2);
    CU_ASSERT_EQUAL(iq_level(&c, 20000, 0, 61), 1);
    CU_ASSERT_EQUAL(iq_level(&c, 20000, 0, 90), 0);
    CU_ASSERT_EQUAL(iq_level(&c, 20000, 0, 1e9), 0); /* floor at 0 */
    CU_ASSERT_EQUAL(iq_level(&c, 100, 0, 1e9), 0);
    CU_ASSERT_EQUAL(iq_level(&c, 20000, 0, -5), 3); /* a clock step back lifts nothing */
    CU_ASSERT_EQUAL(iq_level(&c, 20000, 0, NAN), 3);
    CU_ASSERT_EQUAL(iq_level(&mlfq4, 20000, 0, 1e9), 3); /* age_s = 0: no aging */
}

static void test_fifo_and_degenerate(void)
{
    struct iqueue_config fifo = {.mlfq = 0, .n_levels = 4, .base_tokens = 1024, .age_s = 30};
    CU_ASSERT_EQUAL(iq_level(&fifo, 1 << 30, 0, 0), 0);
    CU_ASSERT_EQUAL(iq_level(&fifo, -1, 1 << 30, 0), 0);
    /* the config's zero defaults (until the keys exist): one level, never a crash */
    struct iqueue_config zero = {.mlfq = 1};
    CU_ASSERT_EQUAL(iq_level(&zero, 1 << 30, 0, 0), 0);
    CU_ASSERT_EQUAL(iq_level(&zero, -1, 1 << 30, 1e9), 0);
    struct iqueue_config many = {.mlfq = 1, .n_levels = 1000, .base_tokens = 0};
    CU_ASSERT_EQUAL(iq_level(&many, 2000000000, 0, 0), IQ_MAX_LEVELS - 1);
    CU_ASSERT_EQUAL(iq_level(&many, 1, 0, 0), 0);
    CU_ASSERT_EQUAL(iq_level(&many, 2, 0, 0), 1); /* base below 1 is taken as 1 */
}

static void test_compare(void)
{
    CU_ASSERT(iq_compare(0, 5.0, 1, 1.0) < 0); /* lower level first, whatever the arrival */
    CU_ASSERT(iq_compare(2, 1.0, 1, 5.0) > 0);
    CU_ASSERT(iq_compare(1, 1.0, 1, 2.0) < 0); /* then earlier arrival */
    CU_ASSERT(iq_compare(1, 3.0, 1, 2.0) > 0);
    CU_ASSERT_EQUAL(iq_compare(1, 2.0, 1, 2.0), 0);
    /* FIFO: every level is 0, so the order is arrival */
    struct iqueue_config fifo = {0};
    int la = iq_level(&fifo, 100000, 0, 0), lb = iq_level(&fifo, 10, 0, 0);
    CU_ASSERT(iq_compare(la, 1.0, lb, 2.0) < 0);
    CU_ASSERT(iq_compare(lb, 2.0, la, 1.0) > 0);
}

static void test_from_sched(void)
{
    struct sched_config s;
    memset(&s, 0, sizeof s);
    struct iqueue_config q;
    iq_config_from_sched(&q, &s); /* keys not set yet: fifo */
    CU_ASSERT_EQUAL(q.mlfq, 0);
    strcpy(s.instance_queue, "mlfq");
    s.queue_levels = 4;
    s.queue_base_tokens = 1024;
    s.queue_age_s = 30;
    iq_config_from_sched(&q, &s);
    CU_ASSERT_EQUAL(q.mlfq, 1);
    CU_ASSERT_EQUAL(q.n_levels, 4);
    CU_ASSERT_EQUAL(q.base_tokens, 1024);
    CU_ASSERT_EQUAL(q.age_s, 30);
    strcpy(s.instance_queue, "fifo");
    iq_config_from_sched(&q, &s);
    CU_ASSERT_EQUAL(q.mlfq, 0);
    CU_ASSERT_EQUAL(q.n_levels, 4);
}

int main(void)
{
    static const struct test_case cases[] = {
        {"levels from the estimate and thresholds", test_levels_from_estimate},
        {"no estimate: demoted as tokens grow", test_demotion_without_estimate},
        {"aging lifts a level per age_s, floor 0", test_aging},
        {"fifo and degenerate configs: level 0", test_fifo_and_degenerate},
        {"service order", test_compare},
        {"config from the sched section", test_from_sched},
        {NULL, NULL}};
    static const struct test_suite suites[] = {{"iqueue", cases}, {NULL, NULL}};
    return test_main(suites);
}
