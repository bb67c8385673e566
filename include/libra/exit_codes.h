/*
 * The exit statuses of a libra job (the man page and README list them):
 *   0 complete; 1 failed (a fatal error, the metrics file reads "failed");
 *   2 a usage error (a command's options); 3 stopped by a signal (include/libra/
 *   stop_signal.h; the metrics file reads "cancelled"); 4 a rank stopped responding
 *   (run.unresponsive_s; the metrics file reads "failed" and names the rank).
 */
#ifndef LIBRA_EXIT_CODES_H
#define LIBRA_EXIT_CODES_H

#define LIBRA_EXIT_FAILED 1
#define LIBRA_EXIT_USAGE 2
#define LIBRA_EXIT_CANCELLED 3
#define LIBRA_EXIT_UNRESPONSIVE 4

#endif
