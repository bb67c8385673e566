/*
 * The watchdog thread (include/libra/watchdog.h): it fires once when the loop stops
 * ticking, never while the loop ticks well inside the limit, follows the longest gap
 * between ticks when automatic, and stops at once. The expiry function here records
 * instead of ending the process. Waits are bounded (a watchdog that never fires fails
 * the test after 10 s, it does not hang it); no figure here is a timing measurement.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "libra/watchdog.h"
#include "testutil.h"

static atomic_int fired;
static char fired_phase[64];
static double fired_stuck, fired_limit;

static void on_expiry(double stuck_s, double limit_s, const char *phase, void *ctx)
{
    (void)ctx;
    fired_stuck = stuck_s;
    fired_limit = limit_s;
    snprintf(fired_phase, sizeof fired_phase, "%s", phase);
    atomic_fetch_add(&fired, 1);
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* A loop that stops ticking is reported once, with its last phase. */
static void test_fires_when_stuck(void)
{
    atomic_store(&fired, 0);
    CU_ASSERT_EQUAL_FATAL(watchdog_start(0.2, 600, on_expiry, NULL), 0);
    watchdog_tick("a blocking call");
    for (int i = 0; i < 1000 && !atomic_load(&fired); i++) sleep_s(0.01);
    sleep_s(0.3); /* a second expiry would come by now */
    CU_ASSERT_EQUAL(atomic_load(&fired), 1);
    CU_ASSERT_STRING_EQUAL(fired_phase, "a blocking call");
    CU_ASSERT(fired_stuck > 0.2 && fired_limit == 0.2);
    watchdog_stop();
}

/* Ticks well inside the limit: no expiry; a second start while running is refused. */
static void test_quiet_while_ticking(void)
{
    atomic_store(&fired, 0);
    CU_ASSERT_EQUAL_FATAL(watchdog_start(2.0, 600, on_expiry, NULL), 0);
    CU_ASSERT_EQUAL(watchdog_start(2.0, 600, on_expiry, NULL), -1);
    for (int i = 0; i < 50; i++) {
        watchdog_tick("the loop");
        sleep_s(0.02);
    }
    watchdog_stop();
    CU_ASSERT_EQUAL(atomic_load(&fired), 0);
}

/* Automatic: the floor, then WATCHDOG_GAPS times the longest gap between ticks. */
static void test_automatic_limit(void)
{
    atomic_store(&fired, 0);
    CU_ASSERT_EQUAL_FATAL(watchdog_start(0, 0.5, on_expiry, NULL), 0);
    watchdog_tick("start");
    CU_ASSERT(watchdog_limit() >= 0.5 && watchdog_limit() < 0.6);
    sleep_s(0.1);
    watchdog_tick("after a 0.1 s gap");
    CU_ASSERT(watchdog_limit() >= WATCHDOG_GAPS * 0.1);
    watchdog_stop();
    CU_ASSERT_EQUAL(atomic_load(&fired), 0);
}

/* Without a watchdog, ticks and stops are no-ops. */
static void test_idle(void)
{
    watchdog_tick("nothing runs");
    watchdog_stop();
    CU_ASSERT_EQUAL(atomic_load(&fired), 0);
}

int main(void)
{
    static const struct test_case cases[] = {
        {"fires once when the loop is stuck", test_fires_when_stuck},
        {"quiet while the loop ticks", test_quiet_while_ticking},
        {"automatic limit follows the longest gap", test_automatic_limit},
        {"no watchdog: no-ops", test_idle},
        {NULL, NULL}};
    static const struct test_suite suites[] = {{"watchdog", cases}, {NULL, NULL}};
    return test_main(suites);
}
