/*
 * CUDA thread blocks on CPU threads, for kernels written in the C subset of CUDA
 * (shared memory, __syncthreads, atomicAdd; no warp intrinsics): a test defines the
 * kernel's arguments, includes the kernel's file after this header and runs it with
 * emu_launch. Each block runs on `threads` POSIX threads, one per CUDA thread, that
 * meet at a barrier wherever the kernel calls __syncthreads; blocks run one after
 * another, so a kernel's __shared__ variables (static here) belong to the running
 * block. A kernel whose threads reach different numbers of barriers hangs here as it
 * would be undefined on the GPU. Header only, for one test file, which defines
 * _POSIX_C_SOURCE >= 200112L (barriers) before its first include.
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

struct emu_dim {
    unsigned x;
};
static _Thread_local struct emu_dim threadIdx, blockIdx;
static struct emu_dim blockDim;
static pthread_barrier_t emu_barrier;

static inline void __syncthreads(void) { pthread_barrier_wait(&emu_barrier); }
static inline unsigned atomicAdd(unsigned *p, unsigned v)
{
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
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
    unsigned block, thread;
    void (*body)(void *);
    void *arg;
};

static void *emu_thread_main(void *p)
{
    const struct emu_thread *t = p;
    blockIdx.x = t->block;
    threadIdx.x = t->thread;
    t->body(t->arg);
    return NULL;
}

/* body(arg) as `grid` blocks of `threads` threads (body calls the kernel). */
static void emu_launch(unsigned grid, unsigned threads, void (*body)(void *), void *arg)
{
    pthread_t *th = malloc(threads * sizeof *th);
    struct emu_thread *t = malloc(threads * sizeof *t);
    if (!th || !t) {
        fprintf(stderr, "emu_launch: out of memory\n");
        abort();
    }
    blockDim.x = threads;
    for (unsigned b = 0; b < grid; b++) {
        if (pthread_barrier_init(&emu_barrier, NULL, threads)) abort();
        for (unsigned i = 0; i < threads; i++) {
            t[i] = (struct emu_thread){b, i, body, arg};
            if (pthread_create(&th[i], NULL, emu_thread_main, &t[i])) {
                fprintf(stderr, "emu_launch: pthread_create failed\n");
                abort();
            }
        }
        for (unsigned i = 0; i < threads; i++) pthread_join(th[i], NULL);
        pthread_barrier_destroy(&emu_barrier);
    }
    free(th);
    free(t);
}

#endif
