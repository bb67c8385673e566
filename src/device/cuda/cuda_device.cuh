/*
 * Device helpers shared by the CUDA module's kernels (src/device/cuda/): bf16
 * conversions and the row-reduction block's tree reductions. Written in the C subset of CUDA,
 * like the kernel files (*_kernels.cuh, cuda_sampler_kernel.cuh) that use them, so the
 * tests can compile them as C11 and run them on CPU threads (tests/cuda_block_emu.h).
 */
#ifndef LIBRA_CUDA_DEVICE_CUH
#define LIBRA_CUDA_DEVICE_CUH

/* bf16 (the upper half of a float32) to float32, exactly. */
__device__ static inline float bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* x[0..7] as float32 from 8 packed bf16 (a 16-byte load), exactly. */
__device__ static inline void bf16x8_to_f32(uint4 v, float *x)
{
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        x[2 * i] = __uint_as_float(u[i] << 16);
        x[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}

/* float32 to bf16, round to nearest even; NaN stays a (quiet) NaN. */
__device__ static inline uint16_t f32_to_bf16_rne(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Programmatic dependent launch (sm_90 on), for the kernels of a decode step, which
 * cu_launch_overlapped launches with it when the module's overlap is on: such a kernel
 * may start while the kernel before it in the stream is still running. grid_wait()
 * returns once the earlier kernels have finished and their writes are visible: before
 * it a kernel may only read what no kernel of the step writes (the weights), and every
 * block must reach it. grid_release() lets the next kernel start now (its blocks take
 * the SMs' free slots and load their weights). Both do nothing below sm_90, in a
 * launch without the attribute and on CPU threads. */
__device__ static inline void grid_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ static inline void grid_release(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

/* Pair i of a head's rotate-half rotation: (a, b) = (x_i, x_{i + half}) turned by the
 * angle of rope table row cs (cos | sin), sign -1 the way back, into *y0, *y1 --
 * rope_fwd / rope_bwd's arithmetic, which the kernels that fuse the rotation share. */
__device__ static inline void rope_pair(const float *cs, int i, int half, float sign, float a,
                                        float b, float *y0, float *y1)
{
    float c = cs[i], s = sign * cs[half + i];
    *y0 = a * c - b * s;
    *y1 = b * c + a * s;
}

/* Threads of a row-reduction block (a power of two), and the block's reductions of
 * every thread's v in a fixed tree (every thread gets the result; part: ROW_THREADS
 * values of shared memory, reused by the next call): block_sum of floats, block_max_f32,
 * block_sum_f64, block_max_f64. rmsnorm_fwd and the kernels that fuse it sum this
 * way, so their normalisations are the same bits. */
#define ROW_THREADS 256
#define BLOCK_ADD(a, b) (a) += (b)
#define BLOCK_MAX(a, b)                                                                      \
    do {                                                                                     \
        if ((b) > (a)) (a) = (b);                                                            \
    } while (0)
#define BLOCK_REDUCTION(name, T, STEP)                                                       \
    __device__ static inline T name(T v, T *part)                                            \
    {                                                                                        \
        part[threadIdx.x] = v;                                                               \
        __syncthreads();                                                                     \
        for (int k = ROW_THREADS / 2; k > 0; k /= 2) {                                       \
            if ((int)threadIdx.x < k) STEP(part[threadIdx.x], part[threadIdx.x + k]);        \
            __syncthreads();                                                                 \
        }                                                                                    \
        T r = part[0];                                                                       \
        __syncthreads();                                                                     \
        return r;                                                                            \
    }
BLOCK_REDUCTION(block_sum, float, BLOCK_ADD)
BLOCK_REDUCTION(block_max_f32, float, BLOCK_MAX)
BLOCK_REDUCTION(block_sum_f64, double, BLOCK_ADD)
BLOCK_REDUCTION(block_max_f64, double, BLOCK_MAX)

/* block_sum's tree for a row one warp holds: lane l has in v[i] what thread l + 32 i of
 * a ROW_THREADS block would have passed to block_sum. The first steps add v[i + k] to
 * v[i] (the block's steps 128, 64, 32), the shuffles the rest; since a + b == b + a,
 * every lane gets block_sum's bits, with no barrier. v is consumed. */
#define ROW_WARP_VALS (ROW_THREADS / 32)
__device__ static inline float warp_row_sum(float *v)
{
#pragma unroll
    for (int k = ROW_WARP_VALS / 2; k > 0; k /= 2)
#pragma unroll
        for (int i = 0; i < k; i++) v[i] += v[i + k];
    float s = v[0];
#pragma unroll
    for (int m = 16; m > 0; m /= 2) s += __shfl_xor_sync(0xffffffffu, s, m);
    return s;
}

#endif
