/*
 * Leveled, rank-aware logging and the fatal-error path.
 *
 * Every message carries "[rank N]". A fatal error prints one message, flushes and
 * calls MPI_Abort(MPI_COMM_WORLD) so the whole job ends (STYLE 5); before MPI is
 * up (or after it is down) it exits the process instead. The *_CHECK macros wrap
 * foreign calls and report file, line and the library's own error string.
 */
#ifndef LIBRA_LOG_H
#define LIBRA_LOG_H

#include <stddef.h>
#include <stdio.h>

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

/* Set once at start; rank is -1 until MPI is initialised. */
void log_set_rank(int rank);
void log_set_level(enum log_level level);
int log_rank(void);
enum log_level log_get_level(void);
/* Parses "error" | "warn" | "info" | "debug"; returns -1 on anything else. */
int log_parse_level(const char *name);

void log_msg(enum log_level level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
_Noreturn void log_fatal(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Bad user input (config, paths, job size): the message already says where in the
 * input; no source location is added. Ends the job like FATAL. */
_Noreturn void log_fatal_input(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define LOG_E(...) log_msg(LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)
#define LOG_W(...) log_msg(LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define LOG_I(...) log_msg(LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define LOG_D(...) log_msg(LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)
#define FATAL(...) log_fatal(__FILE__, __LINE__, __VA_ARGS__)
/* FATAL with the job's exit status code (include/libra/exit_codes.h) instead of 1. */
_Noreturn void log_fatal_code(int code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define FATAL_CODE(code, ...) log_fatal_code((code), __FILE__, __LINE__, __VA_ARGS__)
#define FATAL_INPUT(...) log_fatal_input(__VA_ARGS__)

/* Called once, with the message, just before a fatal error ends the job (rank 0
 * uses it to record the error in the metrics file and mark it "failed"). */
void log_set_fatal_hook(void (*hook)(void *ctx, const char *msg), void *ctx);

/* MPI: aborts the job with the MPI error string. */
void mpi_check_fail(int rc, const char *call, const char *file, int line);
#define MPI_CHECK(call)                                                   \
    do {                                                                  \
        int mpi_check_rc_ = (call);                                       \
        if (mpi_check_rc_ != 0) mpi_check_fail(mpi_check_rc_, #call, __FILE__, __LINE__); \
    } while (0)

/* Allocation: never returns NULL (aborts with the size that failed). */
void *xmalloc_at(size_t n, const char *file, int line);
void *xcalloc_at(size_t count, size_t size, const char *file, int line);
void *xrealloc_at(void *p, size_t n, const char *file, int line);
char *xstrdup_at(const char *s, const char *file, int line);
#define xmalloc(n) xmalloc_at((n), __FILE__, __LINE__)
#define xcalloc(c, s) xcalloc_at((c), (s), __FILE__, __LINE__)
#define xrealloc(p, n) xrealloc_at((p), (n), __FILE__, __LINE__)
#define xstrdup(s) xstrdup_at((s), __FILE__, __LINE__)

/* Grows *buf (element size elem) so it holds at least need elements. */
void xgrow_at(void **buf, size_t *cap, size_t need, size_t elem, const char *file, int line);
#define XGROW(buf, cap, need) \
    xgrow_at((void **)&(buf), &(cap), (need), sizeof(*(buf)), __FILE__, __LINE__)

/* Wall-clock seconds from a monotonic clock. */
double wall_time(void);

#endif
