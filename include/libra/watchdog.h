/*
 * A rank's watchdog: a thread that ends the job when the rank's own loop has not
 * ticked for too long. The liveness checks of rank 0 (src/control/ctl_live.c) and of
 * the workers (src/worker/worker.c) run in their loops; a rank blocked in a call that
 * never returns -- a collective whose peer was stopped, a driver call that hangs, a
 * re-split's MPI_Comm_split -- runs neither, and only a second thread can end the job.
 *
 * The limit is the rank's: run.unresponsive_s when set, else the larger of a floor and
 * WATCHDOG_GAPS times the longest gap between ticks seen so far (a CPU training step
 * may legitimately hold the loop for minutes). On expiry the thread calls the expiry
 * function once, which is expected not to return (it ends the job through FATAL_CODE;
 * MPI_Abort from this thread is outside MPI_THREAD_FUNNELED's promise, but Open MPI's
 * abort sends one message to its daemon and exits, and the alternative is a job that
 * hangs until its time limit).
 */
#ifndef LIBRA_WATCHDOG_H
#define LIBRA_WATCHDOG_H

#define WATCHDOG_GAPS 10.0
#define WATCHDOG_FLOOR_S 600.0 /* the automatic limit's floor, rank 0's and the workers' */

/* stuck_s: seconds since the last tick; phase: what the last tick said. */
typedef void (*watchdog_expiry_fn)(double stuck_s, double limit_s, const char *phase, void *ctx);

/* Starts the thread: limit_s > 0 a fixed limit, else automatic with floor_s. 0, or -1
 * if the thread could not be made. One watchdog per process. */
int watchdog_start(double limit_s, double floor_s, watchdog_expiry_fn fn, void *ctx);
/* From the rank's loop: alive, and now in phase (a string with static storage). */
void watchdog_tick(const char *phase);
/* The limit in force now (for messages). */
double watchdog_limit(void);
/* Stops and joins the thread (no-op if none). */
void watchdog_stop(void);

#endif
