/*
 * The watchdog thread (include/libra/watchdog.h). The rank's loop stores the time of
 * its last tick and a phase name in atomics; the thread wakes a few times a limit,
 * compares, and calls the expiry function once. The longest gap between ticks is
 * measured by the ticking thread itself, so the automatic limit follows what the
 * rank's loop really does (a long training step raises it).
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/watchdog.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <time.h>

static struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* watchdog_stop wakes the thread at once */
    int running;
    double fixed_s, floor_s;
    watchdog_expiry_fn fn;
    void *ctx;
    _Atomic long long last_us;   /* monotonic time of the last tick */
    _Atomic long long gap_max_us; /* longest gap between two ticks */
    _Atomic(const char *) phase;
    atomic_int stop;
} g;

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

double watchdog_limit(void)
{
    if (g.fixed_s > 0) return g.fixed_s;
    double gaps = WATCHDOG_GAPS * 1e-6 * (double)atomic_load(&g.gap_max_us);
    return gaps > g.floor_s ? gaps : g.floor_s;
}

void watchdog_tick(const char *phase)
{
    if (!g.running) return;
    long long t = now_us(), gap = t - atomic_load(&g.last_us);
    if (gap > atomic_load(&g.gap_max_us)) atomic_store(&g.gap_max_us, gap);
    atomic_store(&g.last_us, t);
    atomic_store(&g.phase, phase);
}

/* Sleeps up to s seconds, or until watchdog_stop. */
static void nap(double s)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = ts.tv_nsec + (long long)(s * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&g.mu);
    if (!atomic_load(&g.stop)) pthread_cond_timedwait(&g.wake, &g.mu, &ts);
    pthread_mutex_unlock(&g.mu);
}

static void *watch(void *arg)
{
    (void)arg;
    while (!atomic_load(&g.stop)) {
        double limit = watchdog_limit();
        nap(limit / 8 < 1.0 ? limit / 8 : 1.0);
        double stuck = 1e-6 * (double)(now_us() - atomic_load(&g.last_us));
        if (!atomic_load(&g.stop) && stuck > watchdog_limit()) {
            g.fn(stuck, watchdog_limit(), atomic_load(&g.phase), g.ctx);
            break; /* the expiry function normally ends the process */
        }
    }
    return NULL;
}

int watchdog_start(double limit_s, double floor_s, watchdog_expiry_fn fn, void *ctx)
{
    if (g.running) return -1;
    g.fixed_s = limit_s;
    g.floor_s = floor_s;
    g.fn = fn;
    g.ctx = ctx;
    atomic_store(&g.last_us, now_us());
    atomic_store(&g.gap_max_us, 0);
    atomic_store(&g.phase, "start");
    atomic_store(&g.stop, 0);
    pthread_condattr_t ca;
    if (pthread_mutex_init(&g.mu, NULL) != 0) return -1;
    if (pthread_condattr_init(&ca) != 0 || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&g.wake, &ca) != 0) {
        pthread_mutex_destroy(&g.mu);
        return -1;
    }
    pthread_condattr_destroy(&ca);
    if (pthread_create(&g.thread, NULL, watch, NULL) != 0) {
        pthread_cond_destroy(&g.wake);
        pthread_mutex_destroy(&g.mu);
        return -1;
    }
    g.running = 1;
    return 0;
}

void watchdog_stop(void)
{
    if (!g.running) return;
    pthread_mutex_lock(&g.mu);
    atomic_store(&g.stop, 1);
    pthread_cond_signal(&g.wake);
    pthread_mutex_unlock(&g.mu);
    pthread_join(g.thread, NULL);
    pthread_cond_destroy(&g.wake);
    pthread_mutex_destroy(&g.mu);
    g.running = 0;
}
