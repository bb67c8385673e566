/*
 * The host module's devices, memory, errors and CUDA graphs (include/libra/cuda_host.h).
 * One device, 0. Its memory is host memory (aligned as cudaMalloc aligns) drawn from a
 * budget -- LIBRA_CUDA_HOST_MEM bytes, default 4 GiB -- that mem_info reports and
 * alloc enforces, so the engine's sizing against the free memory runs as on a GPU; a
 * new block is filled with NaNs, so that a read of memory never written shows in the
 * results (valgrind then sees it as defined: use the results, not memcheck, for that).
 * Copies and kernels run at once, in the calling thread, on either stream (the side
 * stream keeps only its protocol: below); sync reports what a kernel found (a token
 * outside the vocabulary), as the CUDA module's does.
 * Graphs: between graph_begin and graph_end a thread's kernels are recorded -- the
 * kernel and a copy of its arguments -- not run; a memory call in between is refused
 * and invalidates the recording (CUDA forbids it in a stream capture); graph_launch
 * runs the recorded calls in order. last_error and the recording are per thread; the
 * memory budget and the pending kernel error are per process, under one lock.
 */
#define _POSIX_C_SOURCE 200809L
#include "cuda_host_internal.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"

#define HOST_MEM_DEFAULT ((size_t)4 << 30)
#define HOST_ALIGN 256 /* cudaMalloc's alignment */

struct block { /* a live block of alloc: kept apart, so the block has no neighbours of
                  ours for an overrun to hit unseen (valgrind and ASan see its ends) */
    void *p;
    size_t bytes;
};

struct ch_call {
    ch_kernel run;
    void *args; /* xmalloc'd copy */
};

struct ch_graph {
    struct ch_call *calls;
    size_t n, cap;
    const char *broken; /* the refused call that invalidated the recording, or NULL */
};

static _Thread_local char last_err[512];
static _Thread_local struct ch_graph *recording; /* this thread's open graph_begin */

/* The device's state, one per process (as a GPU's is), under its lock. */
static pthread_once_t once = PTHREAD_ONCE_INIT; /* reads LIBRA_CUDA_HOST_MEM */
static struct {
    pthread_mutex_t lock;
    size_t budget, used;   /* bytes: the budget, what alloc has handed out */
    struct block *blocks;  /* the live blocks */
    size_t n_blocks, cap_blocks;
    void **hosts;          /* the live blocks of host_alloc */
    size_t n_hosts, cap_hosts;
    char bad_env[256];     /* why LIBRA_CUDA_HOST_MEM was refused, or "" */
    int token_raised;      /* a kernel saw a token outside the vocabulary */
    long long token_value; /* the first one */
} dev = {.lock = PTHREAD_MUTEX_INITIALIZER};

int ch_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(last_err, sizeof last_err, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof last_err)
        snprintf(last_err + n, sizeof last_err - (size_t)n, " (host module, %s:%d)", file, line);
    return -1;
}

const char *ch_last_error(void) { return last_err[0] ? last_err : "no error"; }

/* ---------------------------------------------------------------- devices */

static void budget_init(void)
{
    dev.budget = HOST_MEM_DEFAULT;
    const char *env = getenv("LIBRA_CUDA_HOST_MEM");
    if (!env || !*env) return;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(env, &end, 10);
    if (!isdigit((unsigned char)env[0]) || errno || *end || v == 0 || v > SIZE_MAX / 2)
        snprintf(dev.bad_env, sizeof dev.bad_env, "LIBRA_CUDA_HOST_MEM=\"%.64s\" is not a "
                 "byte count: give a positive whole number of bytes (8589934592 for 8 GiB), "
                 "or unset it for 4 GiB", env);
    else
        dev.budget = (size_t)v;
}

/* 0 when the budget is usable, else -1 saying why (for `what`). */
static int budget_ready(const char *what)
{
    pthread_once(&once, budget_init);
    return dev.bad_env[0] ? CH_FAIL("%s: %s", what, dev.bad_env) : 0;
}

int ch_device_count(void) { return budget_ready("device_count") ? -1 : 1; }

int ch_device_describe(int i, char *out, size_t cap)
{
    if (budget_ready("device_describe")) return -1;
    if (i != 0) return CH_FAIL("device_describe: device %d: the host stand-in has one, 0", i);
    snprintf(out, cap, "device 0: host stand-in of the CUDA module (CPU references; not a GPU), "
             "%.1f GiB of host memory", (double)dev.budget / (double)((size_t)1 << 30));
    return 0;
}

int ch_set_device(int i)
{
    if (budget_ready("set_device")) return -1;
    return i == 0 ? 0 : CH_FAIL("set_device(%d): the host stand-in has one device, 0", i);
}

void ch_versions(int *cuda_runtime, int *nccl)
{
    *cuda_runtime = 0;
    *nccl = 0;
}

/* ---------------------------------------------------------------- memory */

int ch_forbid_in_graph(const char *what)
{
    if (!recording) return 0;
    if (!recording->broken) recording->broken = what;
    return CH_FAIL("%s: not allowed while a CUDA graph is being recorded (a stream capture "
                   "forbids it; the recording is invalidated)", what);
}

int ch_alloc(void **p, size_t bytes)
{
    *p = NULL;
    if (ch_forbid_in_graph("alloc") || budget_ready("alloc")) return -1;
    size_t n = bytes ? bytes : 1; /* as the CUDA module asks cudaMalloc */
    void *block = NULL;
    if (posix_memalign(&block, HOST_ALIGN, n) != 0)
        return CH_FAIL("alloc of %zu bytes: the host has no memory for it", bytes);
    pthread_mutex_lock(&dev.lock);
    size_t free_b = dev.budget - dev.used;
    if (n <= free_b) {
        if (dev.n_blocks == dev.cap_blocks) {
            dev.cap_blocks = dev.cap_blocks ? 2 * dev.cap_blocks : 64;
            dev.blocks = xrealloc(dev.blocks, dev.cap_blocks * sizeof *dev.blocks);
        }
        dev.blocks[dev.n_blocks++] = (struct block){block, n};
        dev.used += n;
    }
    pthread_mutex_unlock(&dev.lock);
    if (n > free_b) {
        free(block);
        return CH_FAIL("alloc of %zu bytes: out of memory (%zu of %zu free; LIBRA_CUDA_HOST_MEM "
                       "sets the budget)", bytes, free_b, dev.budget);
    }
    memset(block, 0xff, n); /* NaNs: cudaMalloc does not zero; a read of unwritten memory shows */
    *p = block;
    return 0;
}

/* Page-locked memory here is plain host memory, listed so that host_free refuses a
 * pointer host_alloc did not return (as cudaFreeHost does). */
int ch_host_alloc(void **p, size_t bytes)
{
    *p = NULL;
    if (ch_forbid_in_graph("host_alloc")) return -1;
    void *block = NULL;
    if (posix_memalign(&block, HOST_ALIGN, bytes ? bytes : 1) != 0)
        return CH_FAIL("host_alloc of %zu bytes: the host has no memory for it", bytes);
    pthread_mutex_lock(&dev.lock);
    if (dev.n_hosts == dev.cap_hosts) {
        dev.cap_hosts = dev.cap_hosts ? 2 * dev.cap_hosts : 8;
        dev.hosts = xrealloc(dev.hosts, dev.cap_hosts * sizeof *dev.hosts);
    }
    dev.hosts[dev.n_hosts++] = block;
    pthread_mutex_unlock(&dev.lock);
    *p = block;
    return 0;
}

int ch_host_free(void *p)
{
    if (!p) return 0;
    if (ch_forbid_in_graph("host_free")) return -1;
    pthread_mutex_lock(&dev.lock);
    size_t i = dev.n_hosts;
    while (i > 0 && dev.hosts[i - 1] != p) i--;
    if (i > 0) dev.hosts[i - 1] = dev.hosts[--dev.n_hosts];
    if (dev.n_hosts == 0) { /* nothing live: the table goes too */
        free(dev.hosts);
        dev.hosts = NULL;
        dev.cap_hosts = 0;
    }
    pthread_mutex_unlock(&dev.lock);
    if (i == 0) return CH_FAIL("host_free(%p): not a pointer host_alloc returned", p);
    free(p);
    return 0;
}

int ch_free(void *p)
{
    if (!p) return 0;
    if (ch_forbid_in_graph("free")) return -1;
    pthread_mutex_lock(&dev.lock);
    size_t i = dev.n_blocks;
    while (i > 0 && dev.blocks[i - 1].p != p) i--;
    if (i > 0) {
        dev.used -= dev.blocks[i - 1].bytes;
        dev.blocks[i - 1] = dev.blocks[--dev.n_blocks];
    }
    if (dev.n_blocks == 0) { /* nothing live: the table goes too (leak checkers see none) */
        free(dev.blocks);
        dev.blocks = NULL;
        dev.cap_blocks = 0;
    }
    pthread_mutex_unlock(&dev.lock);
    if (i == 0) return CH_FAIL("free(%p): not a pointer alloc returned, or freed already", p);
    free(p);
    return 0;
}

static void side_read(const void *p, size_t bytes); /* the side stream, below */

int ch_to_device(void *dst, const void *src, size_t bytes)
{
    if (ch_forbid_in_graph("to_device") || ch_side_check_write(dst, bytes, "to_device"))
        return -1;
    if (bytes) memcpy(dst, src, bytes);
    return 0;
}

int ch_to_host(void *dst, const void *src, size_t bytes)
{
    if (ch_forbid_in_graph("to_host")) return -1;
    side_read(src, bytes);
    if (bytes) memcpy(dst, src, bytes);
    return 0;
}

int ch_copy(void *dst, const void *src, size_t bytes)
{
    if (ch_forbid_in_graph("copy") || ch_side_check_write(dst, bytes, "copy")) return -1;
    side_read(src, bytes);
    if (bytes) memmove(dst, src, bytes);
    return 0;
}

int ch_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
              size_t height)
{
    if (ch_forbid_in_graph("copy2d")) return -1;
    if (width > dpitch || width > spitch)
        return CH_FAIL("copy2d: rows of %zu bytes, %zu and %zu apart", width, dpitch, spitch);
    if (!width || !height) return 0;
    if (ch_side_check_write(dst, (height - 1) * dpitch + width, "copy2d")) return -1;
    side_read(src, (height - 1) * spitch + width);
    for (size_t r = 0; r < height; r++)
        memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    return 0;
}

int ch_zero(void *p, size_t bytes)
{
    if (ch_forbid_in_graph("zero") || ch_side_check_write(p, bytes, "zero")) return -1;
    if (bytes) memset(p, 0, bytes);
    return 0;
}

int ch_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    if (ch_forbid_in_graph("mem_info") || budget_ready("mem_info")) return -1;
    pthread_mutex_lock(&dev.lock);
    *free_bytes = dev.budget - dev.used;
    *total_bytes = dev.budget;
    pthread_mutex_unlock(&dev.lock);
    return 0;
}

void ch_raise_bad_token(long long token)
{
    pthread_mutex_lock(&dev.lock);
    if (!dev.token_raised) dev.token_value = token;
    dev.token_raised = 1;
    pthread_mutex_unlock(&dev.lock);
}

int ch_sync(void)
{
    if (ch_forbid_in_graph("sync")) return -1;
    pthread_mutex_lock(&dev.lock);
    int raised = dev.token_raised;
    long long value = dev.token_value;
    dev.token_raised = 0;
    pthread_mutex_unlock(&dev.lock);
    return raised ? CH_FAIL("sync: embedding: token %lld outside the vocabulary", value) : 0;
}

/* ---------------------------------------------------------------- the side stream */

/* Everything runs at once here, so the side stream is the calling thread too; what
 * the stand-in keeps is the protocol. The first side_done after a mark says "not yet"
 * (a transfer still on its way: the caller's path for that runs in every test), later
 * ones "done"; side_join before side_done has said "done" since the last mark is
 * refused -- the weight syncs join only what every rank has seen land. And the memory
 * the side stream's copies read (a sender's weights, a relay's runs) is lent to it
 * until a side_done says "done": a copy, zero or bf16 conversion on the kernels'
 * stream that writes into it before then is refused (on a GPU it could overwrite
 * values still being sent). */
static _Thread_local struct {
    int on, marked, queried, done;
    struct { const char *p; size_t n; } *reads; /* lent: read by side work not seen done */
    size_t n_reads, cap_reads;
} side;

static void side_read(const void *p, size_t bytes)
{
    if (!side.on || !bytes) return;
    if (side.n_reads == side.cap_reads) {
        side.cap_reads = side.cap_reads ? 2 * side.cap_reads : 64;
        side.reads = realloc(side.reads, side.cap_reads * sizeof *side.reads);
        if (!side.reads) abort();
    }
    side.reads[side.n_reads].p = p;
    side.reads[side.n_reads++].n = bytes;
}

int ch_side_check_write(const void *p, size_t bytes, const char *what)
{
    if (side.on || !bytes) return 0;
    const char *a = p;
    for (size_t k = 0; k < side.n_reads; k++)
        if (a < side.reads[k].p + side.reads[k].n && side.reads[k].p < a + bytes)
            return CH_FAIL("%s on the kernels' stream writes memory the side stream's work "
                           "still reads (wait for its mark first)", what);
    return 0;
}

int ch_side_stream(int on)
{
    if (ch_forbid_in_graph("side_stream")) return -1;
    side.on = on != 0;
    return 0;
}

int ch_side_mark(void)
{
    if (ch_forbid_in_graph("side_mark")) return -1;
    side.marked = 1;
    side.queried = 0;
    side.done = 0;
    return 0;
}

int ch_side_done(void)
{
    if (ch_forbid_in_graph("side_done")) return -1;
    if (!side.marked) return CH_FAIL("side_done: no side_mark before it");
    side.done = side.queried++ > 0;
    if (side.done) { /* what it read is free again */
        free(side.reads);
        side.reads = NULL;
        side.n_reads = side.cap_reads = 0;
    }
    return side.done;
}

int ch_side_join(void)
{
    if (ch_forbid_in_graph("side_join")) return -1;
    if (!side.marked || !side.done)
        return CH_FAIL("side_join: the side stream's mark was not reported done first");
    return 0;
}

/* ---------------------------------------------------------------- graphs */

int ch_launch(ch_kernel run, const void *args, size_t size)
{
    struct ch_graph *g = recording;
    if (!g) return run(args);
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 64;
        g->calls = xrealloc(g->calls, g->cap * sizeof *g->calls);
    }
    void *copy = xmalloc(size);
    memcpy(copy, args, size);
    g->calls[g->n++] = (struct ch_call){run, copy};
    return 0;
}

int ch_graph_begin(void)
{
    if (recording) return CH_FAIL("graph_begin: this thread is recording a graph already");
    recording = xcalloc(1, sizeof *recording);
    return 0;
}

int ch_graph_free(void *graph)
{
    struct ch_graph *g = graph;
    if (!g) return 0;
    for (size_t i = 0; i < g->n; i++) free(g->calls[i].args);
    free(g->calls);
    free(g);
    return 0;
}

int ch_graph_end(void **graph)
{
    *graph = NULL;
    struct ch_graph *g = recording;
    if (!g) return CH_FAIL("graph_end: no graph_begin on this thread");
    recording = NULL;
    if (g->broken) {
        const char *why = g->broken;
        ch_graph_free(g);
        return CH_FAIL("graph_end: the recording was invalidated by a call of %s during it", why);
    }
    *graph = g;
    return 0;
}

int ch_graph_launch(void *graph)
{
    const struct ch_graph *g = graph;
    if (!g) return CH_FAIL("graph_launch: no graph (NULL)");
    if (recording) return CH_FAIL("graph_launch: inside a graph recording");
    for (size_t i = 0; i < g->n; i++)
        if (g->calls[i].run(g->calls[i].args)) return -1;
    return 0;
}
