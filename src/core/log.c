/*
 * Logging, fatal errors and checked allocation (see include/libra/log.h).
 * State is two process-wide settings fixed at start (rank, level); nothing else.
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/log.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_rank = -1;
static enum log_level g_level = LOG_INFO;
static void (*g_fatal_hook)(void *, const char *);
static void *g_fatal_ctx;

void log_set_fatal_hook(void (*hook)(void *ctx, const char *msg), void *ctx)
{
    g_fatal_hook = hook;
    g_fatal_ctx = ctx;
}

void log_set_rank(int rank) { g_rank = rank; }
void log_set_level(enum log_level level) { g_level = level; }
int log_rank(void) { return g_rank; }
enum log_level log_get_level(void) { return g_level; }

int log_parse_level(const char *name)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (name && strcmp(name, names[i]) == 0) return i;
    return -1;
}

/* Errors and warnings go to stderr, information to stdout (in order with the
 * progress lines). One fprintf per message so ranks do not interleave mid-line. */
static void vlog(FILE *out, const char *tag, const char *file, int line, const char *fmt,
                 va_list ap)
{
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (g_level >= LOG_DEBUG)
        fprintf(out, "[rank %d] %s%s (%s:%d)\n", g_rank, tag, msg, file, line);
    else
        fprintf(out, "[rank %d] %s%s\n", g_rank, tag, msg);
    if (out == stdout) fflush(stdout);
}

void log_msg(enum log_level level, const char *file, int line, const char *fmt, ...)
{
    if (level > g_level) return;
    static const char *tags[] = {"error: ", "warning: ", "", "debug: "};
    va_list ap;
    va_start(ap, fmt);
    vlog(level <= LOG_WARN ? stderr : stdout, tags[level], file, line, fmt, ap);
    va_end(ap);
}

/* Prints the one fatal line, then ends the whole job (or the process before MPI). */
static _Noreturn void die(const char *msg, const char *file, int line, int code)
{
    if (file)
        fprintf(stderr, "[rank %d] fatal: %s (%s:%d)\n", g_rank, msg, file, line);
    else
        fprintf(stderr, "[rank %d] fatal: %s\n", g_rank, msg);
    fflush(stderr);
    fflush(stdout);
    void (*hook)(void *, const char *) = g_fatal_hook;
    g_fatal_hook = NULL; /* a fatal error inside the hook must not recurse */
    if (hook) hook(g_fatal_ctx, msg);
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

_Noreturn void log_fatal(const char *file, int line, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    die(msg, file, line, 1);
}

_Noreturn void log_fatal_code(int code, const char *file, int line, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    die(msg, file, line, code);
}

_Noreturn void log_fatal_input(const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    die(msg, NULL, 0, 1);
}

void mpi_check_fail(int rc, const char *call, const char *file, int line)
{
    char err[MPI_MAX_ERROR_STRING] = "unknown MPI error";
    int len = 0;
    MPI_Error_string(rc, err, &len);
    log_fatal(file, line, "MPI call failed: %s: %s", call, err);
}

void *xmalloc_at(size_t n, const char *file, int line)
{
    void *p = malloc(n ? n : 1);
    if (!p) log_fatal(file, line, "out of memory allocating %zu bytes", n);
    return p;
}

void *xcalloc_at(size_t count, size_t size, const char *file, int line)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) log_fatal(file, line, "out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *xrealloc_at(void *p, size_t n, const char *file, int line)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) log_fatal(file, line, "out of memory reallocating to %zu bytes", n);
    return q;
}

char *xstrdup_at(const char *s, const char *file, int line)
{
    size_t n = strlen(s) + 1;
    char *p = xmalloc_at(n, file, line);
    memcpy(p, s, n);
    return p;
}

void xgrow_at(void **buf, size_t *cap, size_t need, size_t elem, const char *file, int line)
{
    if (need <= *cap) return;
    size_t n = *cap ? *cap : 16;
    while (n < need) n *= 2;
    *buf = xrealloc_at(*buf, n * elem, file, line);
    *cap = n;
}

double wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
