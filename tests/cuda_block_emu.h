/*
 * CUDA thread blocks on the CPU, for kernels written in the C subset of CUDA (shared
 * memory, __syncthreads, __syncwarp, atomicAdd of unsigned and float, atomicCAS of int,
 * __shfl_xor_sync of floats): a test includes the kernel's file after this header and
 * runs it with emu_launch. Each CUDA thread of a block is a fiber (ucontext) with a
 * stack of its own, all on the calling thread: a thread runs until it reaches a
 * barrier -- __syncthreads, or its warp's for __syncwarp or a shuffle -- then the first
 * ready thread in the block's order runs, and the last to arrive releases the others.
 * So a block runs the same way each time, the first warp runs as far ahead as it can,
 * and a missing barrier shows: the first thread runs ahead through the place the
 * barrier should be, reading shared memory the others have not written yet (or
 * writing what they have still to read). LIBRA_EMU_ORDER picks the order: forward,
 * reverse (the highest thread first), or unset, every other block backwards
 * (emu_next_launch). The blocks run one after another (the grid's x, then y), so a
 * kernel's __shared__ variables (static here, 0xff bytes at each block's start) belong
 * to the running block. A kernel whose threads reach different barriers aborts with a message, as it
 * would be undefined on the GPU; `#pragma unroll` is ignored. Header only, for one test
 * file; it compiles as C11 and as C++ (the tensor-core kernels' test, with atomicMin of
 * int). AddressSanitizer is told of each switch of stacks (it still warns once that
 * it does not fully support swapcontext), valgrind of the stacks. Under
 * ThreadSanitizer (the *_race builds, tests/emu_race.sh) each CUDA thread is a fiber
 * of its own whose switches order nothing; each barrier orders what its threads did
 * before it ahead of what they do after, a block's start and end order it against the
 * launching thread, and atomics are relaxed, as CUDA's are: so two threads of a block
 * that touch one location, one of them writing, with no barrier between, are reported
 * as a data race, whichever ran first (a lost update included, which the orders above
 * cannot show). The blocks of a launch are ordered one after another there too, so a
 * race between blocks is not reported.
 * (It ran a POSIX thread per CUDA thread until the barriers' futex waits took some
 * 50 s of system time for the gemv's test on 2 cores.)
 */
#ifndef LIBRA_TESTS_CUDA_BLOCK_EMU_H
#define LIBRA_TESTS_CUDA_BLOCK_EMU_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(__SANITIZE_THREAD__)
#define EMU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define EMU_TSAN 1
#endif
#endif
#ifdef EMU_TSAN
#include <sanitizer/tsan_interface.h>
/* The emulator's own code (its scheduler, barriers, shuffles and votes), which the
 * fibers share, is not instrumented: ThreadSanitizer sees the kernel's accesses only,
 * ordered by the barriers it is told of. */
#define EMU_SCHED __attribute__((no_sanitize_thread, noinline))
#define EMU_SCHED_INLINE static __attribute__((no_sanitize_thread, noinline, unused))
#else
#define EMU_SCHED
#define EMU_SCHED_INLINE static inline
#endif
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define EMU_VALGRIND 1
#endif
#endif

#define __global__
#define __device__
#define __forceinline__ inline
/* A kernel's __shared__ variables: statics in a section of their own, which
 * emu_launch_2d fills with 0xff bytes (float and double NaNs, int -1) before each block,
 * as a GPU block finds another's leftovers: a kernel that reads shared memory its block
 * has not written gets them. */
#define __shared__ static __attribute__((section("emu_shared")))
extern unsigned char __start_emu_shared[] __attribute__((weak));
extern unsigned char __stop_emu_shared[] __attribute__((weak));

#pragma GCC diagnostic ignored "-Wunknown-pragmas" /* the kernels' #pragma unroll */

#define EMU_MAX_THREADS 1024
#define EMU_STACK_BYTES (256 * 1024) /* a CUDA thread's stack (its registers' arrays) */

struct emu_dim {
    unsigned x, y;
};
static struct emu_dim emu_tid;          /* the running thread's, set at each switch */
static struct emu_dim blockIdx, blockDim, gridDim;
#ifdef EMU_TSAN
/* The kernel reads its threadIdx through a call the race detector does not see (the
 * scheduler rewrites it at every switch). */
EMU_SCHED_INLINE struct emu_dim emu_tid_get(void) { return emu_tid; }
#define threadIdx (emu_tid_get())
#else
#define threadIdx emu_tid
#endif
static float emu_shfl[EMU_MAX_THREADS];
static int emu_vote[EMU_MAX_THREADS];

/* A barrier of `need` threads from `first` on; under ThreadSanitizer, its passes are
 * numbered (gen), and the threads of one pass release and acquire sync[gen % 2]. */
struct emu_bar {
    unsigned first, need, arrived, gen;
    char sync[2];
};
enum { EMU_READY, EMU_WAITING, EMU_DONE };
struct emu_fiber {
    ucontext_t ctx;
    char *stack; /* EMU_STACK_BYTES, made at its first use and kept */
    int state;
    const struct emu_bar *at; /* the barrier it waits at */
    void *asan_fake;          /* AddressSanitizer's fake stack while switched out */
    void *tsan;               /* ThreadSanitizer's fiber, made at its first use and kept */
};
static struct emu_fiber emu_fib[EMU_MAX_THREADS];
static ucontext_t emu_main;    /* the launching thread's context: the scheduler */
static unsigned emu_cur;       /* the running fiber */
static struct emu_bar emu_block_bar, emu_warp_bar[EMU_MAX_THREADS / 32];
static void (*emu_body)(void *);
static void *emu_body_arg;
#ifdef EMU_ASAN
static const void *emu_main_bottom; /* the scheduler's stack, for AddressSanitizer */
static size_t emu_main_size;
#endif
#ifdef EMU_TSAN
static void *emu_tsan_main; /* the scheduler's ThreadSanitizer context */
/* A block's start (the launching thread's writes before it) and its threads' ends (all
 * they did, before the launching thread reads the results or starts the next block). */
static char emu_tsan_start, emu_tsan_end;
#endif

/* From the running fiber back to the scheduler (dying: it will not be resumed). */
static EMU_SCHED void emu_yield(int dying)
{
    struct emu_fiber *f = &emu_fib[emu_cur];
#ifdef EMU_TSAN
    __tsan_switch_to_fiber(emu_tsan_main, __tsan_switch_to_fiber_no_sync);
#endif
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(dying ? NULL : &f->asan_fake, emu_main_bottom, emu_main_size);
#else
    (void)dying;
#endif
    if (swapcontext(&f->ctx, &emu_main)) abort();
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(f->asan_fake, &emu_main_bottom, &emu_main_size);
#endif
}

/* The running thread arrives at b: the last to arrive makes the others ready and goes
 * on; the others wait for the scheduler to resume them. Under ThreadSanitizer each
 * thread releases what it did before the barrier and acquires what the others did. */
static EMU_SCHED void emu_bar_wait(struct emu_bar *b)
{
#ifdef EMU_TSAN
    char *sync = &b->sync[b->gen & 1];
    __tsan_release(sync);
#endif
    if (++b->arrived == b->need) {
        b->arrived = 0;
        b->gen++;
        for (unsigned i = b->first; i < b->first + b->need; i++)
            if (emu_fib[i].state == EMU_WAITING && emu_fib[i].at == b) emu_fib[i].state = EMU_READY;
    } else {
        emu_fib[emu_cur].state = EMU_WAITING;
        emu_fib[emu_cur].at = b;
        emu_yield(0);
    }
#ifdef EMU_TSAN
    __tsan_acquire(sync);
#endif
}

static inline void __syncthreads(void) { emu_bar_wait(&emu_block_bar); }
/* The running thread's warp meets (every lane of it calls). */
static inline void emu_warp_wait(void) { emu_bar_wait(&emu_warp_bar[emu_tid.x / 32]); }
/* The warp's lanes meet: the shared memory one wrote before is seen by the others. */
static inline void __syncwarp(unsigned mask)
{
    (void)mask;
    emu_warp_wait();
}
/* The value of lane (this lane ^ o) of the warp (every lane of it calls). */
EMU_SCHED_INLINE float __shfl_xor_sync(unsigned mask, float v, int o)
{
    (void)mask;
    unsigned t = emu_tid.x;
    emu_shfl[t] = v;
    emu_warp_wait();
    float r = emu_shfl[(t & ~31u) | ((t & 31u) ^ (unsigned)o)];
    emu_warp_wait();
    return r;
}
/* Whether pred is nonzero in any lane of the warp (every lane of it calls). */
EMU_SCHED_INLINE int __any_sync(unsigned mask, int pred)
{
    (void)mask;
    unsigned t = emu_tid.x, w = t & ~31u;
    emu_vote[t] = pred != 0;
    emu_warp_wait();
    int any = 0;
    for (unsigned l = 0; l < 32; l++) any |= emu_vote[w + l];
    emu_warp_wait();
    return any;
}
/* CUDA's atomics order nothing but themselves: relaxed, so that ThreadSanitizer does
 * not take one thread's atomic for a barrier with the next. */
static inline unsigned emu_atomic_add_u32(unsigned *p, unsigned v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
static inline float emu_atomic_add_f32(float *p, float v)
{
    float old, sum;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    do sum = old + v;
    while (!__atomic_compare_exchange(p, &old, &sum, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return old;
}
#ifdef __cplusplus
static inline unsigned atomicAdd(unsigned *p, unsigned v) { return emu_atomic_add_u32(p, v); }
static inline float atomicAdd(float *p, float v) { return emu_atomic_add_f32(p, v); }
static inline int atomicMin(int *p, int v)
{
    int old = __atomic_load_n(p, __ATOMIC_RELAXED);
    while (v < old && !__atomic_compare_exchange_n(p, &old, v, 0, __ATOMIC_RELAXED,
                                                   __ATOMIC_RELAXED)) {
    }
    return old;
}
#else
#define atomicAdd(p, v)                                                                      \
    _Generic((p), unsigned *: emu_atomic_add_u32, float *: emu_atomic_add_f32)(p, v)
#endif
static inline int atomicCAS(int *p, int compare, int val)
{
    __atomic_compare_exchange_n(p, &compare, val, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return compare; /* the old value */
}
static inline unsigned __float_as_uint(float f)
{
    unsigned u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline float __uint_as_float(unsigned u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
#ifndef __cplusplus
/* CUDA's vector of four unsigned ints, for a C kernel's 16-byte loads (the C++ tests
 * take cuda_emu_cxx.h's), 16-byte aligned as on the GPU: UBSan's alignment check then
 * catches a misaligned load, which the GPU would fault on */
typedef struct __attribute__((aligned(16))) {
    unsigned x, y, z, w;
} uint4;
#endif
#ifdef __cplusplus
/* the int form (its bits through the float exchange) */
static inline int __shfl_xor_sync(unsigned mask, int v, int o)
{
    return (int)__float_as_uint(__shfl_xor_sync(mask, __uint_as_float((unsigned)v), o));
}
#endif

static EMU_SCHED void emu_fiber_main(void)
{
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(NULL, &emu_main_bottom, &emu_main_size);
#endif
#ifdef EMU_TSAN
    __tsan_acquire(&emu_tsan_start);
#endif
    emu_body(emu_body_arg);
#ifdef EMU_TSAN
    __tsan_release(&emu_tsan_end);
#endif
    emu_fib[emu_cur].state = EMU_DONE;
    emu_yield(1);
}

/* Fiber i set to run the kernel from its start (its own function: getcontext returns
 * twice, so no caller's loop may share its frame). */
__attribute__((noinline)) static EMU_SCHED void emu_fiber_start(unsigned i)
{
    struct emu_fiber *f = &emu_fib[i];
#ifdef EMU_TSAN
    if (!f->tsan) f->tsan = __tsan_create_fiber(0);
#endif
    if (!f->stack) {
        f->stack = (char *)malloc(EMU_STACK_BYTES);
        if (!f->stack) {
            fprintf(stderr, "emu_launch: out of memory for the threads' stacks\n");
            abort();
        }
#ifdef EMU_VALGRIND
        VALGRIND_STACK_REGISTER(f->stack, f->stack + EMU_STACK_BYTES);
#endif
    }
    if (getcontext(&f->ctx)) abort();
    f->ctx.uc_stack.ss_sp = f->stack;
    f->ctx.uc_stack.ss_size = EMU_STACK_BYTES;
    f->ctx.uc_link = NULL; /* a fiber ends by emu_yield(1), never by returning */
    makecontext(&f->ctx, emu_fiber_main, 0);
    f->state = EMU_READY;
}

/* Runs fiber i until it waits or ends (apart from emu_run_block's loop: nothing of a
 * frame that calls swapcontext may change between its returns). */
__attribute__((noinline)) static EMU_SCHED void emu_resume(unsigned i)
{
    struct emu_fiber *f = &emu_fib[i];
    emu_cur = i;
    emu_tid.x = i;
    emu_tid.y = 0;
#ifdef EMU_TSAN
    __tsan_switch_to_fiber(f->tsan, __tsan_switch_to_fiber_no_sync);
#endif
#ifdef EMU_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, f->stack, EMU_STACK_BYTES);
#endif
    if (swapcontext(&emu_main, &f->ctx)) abort();
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
}

/* The order of a block's threads: every other block runs them backwards (the highest
 * first), and every other launch shifts which ones and runs its blocks backwards too
 * (the last first), so a missing barrier shows whichever side of it the reader is on --
 * forwards, a thread that reads what a higher one writes runs ahead of the write;
 * backwards, one that reads what a lower one writes does -- in any launch of two
 * blocks or more, and in every other one of a single block. LIBRA_EMU_ORDER=forward
 * or =reverse fixes the order (to tell which one a failure needs). */
static int emu_fixed = -1; /* -1: not read yet, 0: alternate, 1: forward, 2: reverse */
static int emu_launch_odd; /* alternate: this launch's parity */
static int emu_reverse;    /* the running block's threads backwards */

/* A test's choice from the environment: 0 if `name` is unset or empty, 1 if it is
 * `one`, 2 if `two`; anything else aborts with the choices. */
static int emu_env_choice(const char *name, const char *one, const char *two)
{
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    if (!strcmp(v, one)) return 1;
    if (!strcmp(v, two)) return 2;
    fprintf(stderr, "%s=%s: %s or %s (unset: alternate)\n", name, v, one, two);
    abort();
}

static void emu_next_launch(void)
{
    if (emu_fixed < 0) emu_fixed = emu_env_choice("LIBRA_EMU_ORDER", "forward", "reverse");
    emu_launch_odd = !emu_launch_odd;
}

/* The n-th of `count` in the given direction. */
static inline unsigned emu_nth(unsigned n, unsigned count, int backwards)
{
    return backwards ? count - 1 - n : n;
}

/* Runs block (bx, by) of `threads` fibers to its end, always resuming the first ready
 * thread in the block's order: so the first warp runs through everything up to a
 * __syncthreads before the next warp starts, as far ahead of the others as a GPU could
 * let it get. */
static EMU_SCHED void emu_run_block(unsigned threads)
{
#ifdef EMU_TSAN
    emu_tsan_main = __tsan_get_current_fiber();
    __tsan_release(&emu_tsan_start);
#endif
    for (unsigned i = 0; i < threads; i++) emu_fiber_start(i);
    for (unsigned done = 0; done < threads;) {
        int ran = 0;
        for (unsigned n = 0; n < threads; n++) {
            unsigned i = emu_nth(n, threads, emu_reverse);
            struct emu_fiber *f = &emu_fib[i];
            if (f->state != EMU_READY) continue;
            emu_resume(i);
            ran = 1;
            done += f->state == EMU_DONE;
            break; /* the first ready thread again: its warp runs as far ahead as it can */
        }
        if (!ran) {
            fprintf(stderr, "emu_launch: block (%u, %u): its threads wait at different barriers "
                    "(undefined on a GPU)\n", blockIdx.x, blockIdx.y);
            abort();
        }
    }
#ifdef EMU_TSAN
    __tsan_acquire(&emu_tsan_end);
#endif
}

/* The kernels' __shared__ section, 0xff bytes (none if no kernel declares any). */
static void emu_shared_fresh(void)
{
    unsigned char *a = __start_emu_shared, *b = __stop_emu_shared;
    if (a && b > a) memset(a, 0xff, (size_t)(b - a));
}

/* Called before each block's first thread runs, if set (a test's fresh shared memory). */
static void (*emu_block_start)(void);

/* body(arg) as a grid of gx x gy blocks of `threads` threads (body calls the kernel),
 * the blocks one after another. */
static void emu_launch_2d(unsigned gx, unsigned gy, unsigned threads, void (*body)(void *),
                          void *arg)
{
    if (threads == 0 || threads > EMU_MAX_THREADS) {
        fprintf(stderr, "emu_launch: %u threads a block (1 .. %d)\n", threads, EMU_MAX_THREADS);
        abort();
    }
    blockDim.x = threads;
    blockDim.y = 1;
    gridDim.x = gx;
    gridDim.y = gy;
    emu_body = body;
    emu_body_arg = arg;
    emu_block_bar = (struct emu_bar){0, threads, 0, 0, {0, 0}};
    for (unsigned w = 0; w * 32 < threads; w++)
        emu_warp_bar[w] = (struct emu_bar){w * 32, threads - w * 32 < 32 ? threads - w * 32 : 32,
                                           0, 0, {0, 0}};
    emu_next_launch();
    int back = emu_fixed == 2 || (emu_fixed == 0 && emu_launch_odd);
    for (unsigned by = 0; by < gy; by++)
        for (unsigned bx = 0; bx < gx; bx++) {
            blockIdx.x = emu_nth(bx, gx, back);
            blockIdx.y = emu_nth(by, gy, back);
            emu_reverse = emu_fixed == 0 ? (int)((bx + by + emu_launch_odd) & 1) : back;
            emu_shared_fresh();
            if (emu_block_start) emu_block_start();
            emu_run_block(threads);
        }
}

static void emu_launch(unsigned grid, unsigned threads, void (*body)(void *), void *arg)
{
    emu_launch_2d(grid, 1, threads, body, arg);
}

#endif
