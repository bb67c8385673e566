/*
 * Stopping a run on a signal: SIGTERM, SIGINT and SIGUSR1 (what Slurm's
 * `--signal=B:USR1@SECONDS` and scancel send, what mpirun and srun forward) ask the
 * run to stop at its next consistent point -- rank 0 stops dispatching, finishes the
 * step in flight, writes a checkpoint (device cpu / cuda with checkpoints on), closes
 * the metrics file with status "cancelled" and the job exits with LIBRA_EXIT_CANCELLED.
 * A second signal ends the process at once (the signal's default action).
 * Installed on every rank; the workers only note it (rank 0 tells them when to end).
 * SIGXFSZ is ignored: a write beyond a file-size limit (ulimit -f, some quota
 * systems) then fails with EFBIG and is reported as the error it is -- a checkpoint
 * not written (run.checkpoint_on_error) -- instead of killing the rank.
 */
#ifndef LIBRA_STOP_SIGNAL_H
#define LIBRA_STOP_SIGNAL_H

#include "libra/exit_codes.h" /* LIBRA_EXIT_CANCELLED */

/* Installs the handlers (sigaction) and ignores SIGXFSZ. 0, or -1 if the system
 * refused one. */
int stop_signal_install(void);
/* The signal that asked for a stop (SIGTERM, SIGINT, SIGUSR1), or 0. */
int stop_signal_requested(void);

#endif
