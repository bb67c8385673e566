/*
 * Stopping a run on a signal (include/libra/stop_signal.h). The handler only stores
 * the signal number in a sig_atomic_t (async-signal-safe); a second signal restores
 * the default action and raises it again, so the process ends as that signal says.
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/stop_signal.h"

#include <signal.h>
#include <stddef.h>

static volatile sig_atomic_t requested;

static void on_signal(int sig)
{
    if (requested) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    requested = sig;
}

int stop_signal_install(void)
{
    const int sigs[] = {SIGTERM, SIGINT, SIGUSR1};
    struct sigaction sa;
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    int rc = 0;
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (sigaction(sigs[i], &sa, NULL) != 0) rc = -1;
    sa.sa_handler = SIG_IGN;
    if (sigaction(SIGXFSZ, &sa, NULL) != 0) rc = -1;
    return rc;
}

int stop_signal_requested(void) { return (int)requested; }
