/*
 * CUDA thread blocks on CPU threads, for kernels written in the C subset of CUDA
 * (shared memory, __syncthreads, atomicAdd of unsigned and float, atomicCAS of int,
 * __shfl_xor_sync of floats): a test
 * includes the kernel's file after this header and runs it with emu_launch. Each
 * block runs on `threads` POSIX threads, one per CUDA thread, that meet at a barrier
 * wherever the kernel calls __syncthreads; a warp's 32 threads meet at the warp's own
 * barrier for a shuffle. The threads are made once a launch and run the blocks one
 * after another (the grid's x, then y) together, so a kernel's __shared__ variables
 * (static here) belong to the running block. A kernel
 * whose threads reach different numbers of barriers hangs here, as it would be
 * undefined on the GPU; `#pragma unroll` is ignored. Header only, for one test file,
 * which defines _POSIX_C_SOURCE >= 200112L (barriers) before its first include. It
 * compiles as C11 and as C++ (the tensor-core kernels' test, with atomicMin of int).
 */
#ifndef LIBRA_TESTS_CUDA_BLOCK_EMU_H
#define LIBRA_TESTS_CUDA_BLOCK_EMU_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define __global__
#define __device__
#define __shared__ static

#pragma GCC diagnostic ignored "-Wunknown-pragmas" /* the kernels' #pragma unroll */

#define EMU_MAX_THREADS 1024

#ifdef __cplusplus
#define EMU_THREAD_LOCAL thread_local
#else
#define EMU_THREAD_LOCAL _Thread_local
#endif

struct emu_dim {
    unsigned x, y;
};
static EMU_THREAD_LOCAL struct emu_dim threadIdx, blockIdx;
static struct emu_dim blockDim, gridDim;
static pthread_barrier_t emu_barrier, emu_warp_barrier[EMU_MAX_THREADS / 32];
static float emu_shfl[EMU_MAX_THREADS];

static inline void __syncthreads(void) { pthread_barrier_wait(&emu_barrier); }
/* The value of lane (this lane ^ o) of the warp (every lane of it calls). */
static inline float __shfl_xor_sync(unsigned mask, float v, int o)
{
    (void)mask;
    unsigned t = threadIdx.x;
    pthread_barrier_t *w = &emu_warp_barrier[t / 32];
    emu_shfl[t] = v;
    pthread_barrier_wait(w);
    float r = emu_shfl[(t & ~31u) | ((t & 31u) ^ (unsigned)o)];
    pthread_barrier_wait(w);
    return r;
}
static inline unsigned emu_atomic_add_u32(unsigned *p, unsigned v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
static inline float emu_atomic_add_f32(float *p, float v)
{
    float old, sum;
    __atomic_load(p, &old, __ATOMIC_SEQ_CST);
    do sum = old + v;
    while (!__atomic_compare_exchange(p, &old, &sum, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return old;
}
#ifdef __cplusplus
static inline unsigned atomicAdd(unsigned *p, unsigned v) { return emu_atomic_add_u32(p, v); }
static inline float atomicAdd(float *p, float v) { return emu_atomic_add_f32(p, v); }
static inline int atomicMin(int *p, int v)
{
    int old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (v < old && !__atomic_compare_exchange_n(p, &old, v, 0, __ATOMIC_SEQ_CST,
                                                   __ATOMIC_SEQ_CST)) {
    }
    return old;
}
#else
#define atomicAdd(p, v)                                                                      \
    _Generic((p), unsigned *: emu_atomic_add_u32, float *: emu_atomic_add_f32)(p, v)
#endif
static inline int atomicCAS(int *p, int compare, int val)
{
    __atomic_compare_exchange_n(p, &compare, val, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
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

struct emu_thread {
    unsigned thread;
    void (*body)(void *);
    void *arg;
};
static pthread_barrier_t emu_block_end;

/* One CUDA thread index through every block of the grid, in order; the block-end
 * barrier keeps a block's shared memory its own until every thread has left it. */
static void *emu_thread_main(void *p)
{
    const struct emu_thread *t = (const struct emu_thread *)p;
    threadIdx.x = t->thread;
    threadIdx.y = 0;
    for (unsigned by = 0; by < gridDim.y; by++)
        for (unsigned bx = 0; bx < gridDim.x; bx++) {
            blockIdx.x = bx;
            blockIdx.y = by;
            t->body(t->arg);
            pthread_barrier_wait(&emu_block_end);
        }
    return NULL;
}

/* body(arg) as a grid of gx x gy blocks of `threads` threads (body calls the kernel);
 * the threads are made once a launch and walk the blocks together. */
static void emu_launch_2d(unsigned gx, unsigned gy, unsigned threads, void (*body)(void *),
                          void *arg)
{
    pthread_t *th = (pthread_t *)malloc(threads * sizeof *th);
    struct emu_thread *t = (struct emu_thread *)malloc(threads * sizeof *t);
    if (!th || !t || threads > EMU_MAX_THREADS) {
        fprintf(stderr, "emu_launch: out of memory, or %u threads a block\n", threads);
        abort();
    }
    blockDim.x = threads;
    blockDim.y = 1;
    gridDim.x = gx;
    gridDim.y = gy;
    if (pthread_barrier_init(&emu_barrier, NULL, threads) ||
        pthread_barrier_init(&emu_block_end, NULL, threads))
        abort();
    for (unsigned w = 0; w * 32 < threads; w++) {
        unsigned n = threads - w * 32 < 32 ? threads - w * 32 : 32;
        if (pthread_barrier_init(&emu_warp_barrier[w], NULL, n)) abort();
    }
    for (unsigned i = 0; i < threads; i++) {
        t[i].thread = i;
        t[i].body = body;
        t[i].arg = arg;
        if (pthread_create(&th[i], NULL, emu_thread_main, &t[i])) {
            fprintf(stderr, "emu_launch: pthread_create failed\n");
            abort();
        }
    }
    for (unsigned i = 0; i < threads; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&emu_barrier);
    pthread_barrier_destroy(&emu_block_end);
    for (unsigned w = 0; w * 32 < threads; w++) pthread_barrier_destroy(&emu_warp_barrier[w]);
    free(th);
    free(t);
}

static void emu_launch(unsigned grid, unsigned threads, void (*body)(void *), void *arg)
{
    emu_launch_2d(grid, 1, threads, body, arg);
}

#endif
