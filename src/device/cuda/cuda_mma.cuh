/*
 * The warp-level primitives of the tensor-core attention (cuda_flash_kernels.cuh), the
 * only inline PTX of the module: mma.sync m16n8k16 (bf16 operands, float32
 * accumulators), ldmatrix (x4 with transposition; x4 and x2 without), cp.async of 16
 * and 8 bytes (zero-filled when not valid) with its commit and wait, the kernels' dynamic
 * shared memory, and two conversions the softmax needs once a score: a float32 pair
 * to bf16x2 and 2^x, one instruction each.
 * tests/test_cuda_flash_emu.cc defines LIBRA_CUDA_MMA_CUH and its own forms of these
 * (the same fragments, on CPU threads), then includes the kernels.
 */
#ifndef LIBRA_CUDA_MMA_CUH
#define LIBRA_CUDA_MMA_CUH

/* c += a b for this lane's fragments (the layouts in cuda_flash_kernels.cuh). */
__device__ static inline void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* cp.async: 16 bytes from global to shared memory, zero-filled when !valid. */
__device__ static inline void cp16(uint16_t *dst, const uint16_t *src, int valid)
{
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(valid ? 16 : 0));
}
/* cp.async of 8 bytes (through the level-1 cache: .ca, the only form below 16 bytes),
 * zero-filled when !valid. */
__device__ static inline void cp8(uint16_t *dst, const uint16_t *src, int valid)
{
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(d), "l"(src),
                 "r"(valid ? 8 : 0));
}
__device__ static inline void cp_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
/* Waits until at most n of this thread's committed copies are still in flight. */
template <int n>
__device__ static inline void cp_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(n));
}

/* The four 8 x 8 bf16 matrices whose rows start at the addresses of lanes 0-7, 8-15,
 * 16-23 and 24-31 (p: this lane's row, 16 bytes of shared memory), each transposed:
 * b[m] holds matrix m's elements (2 (lane % 4), lane / 4) and (2 (lane % 4) + 1,
 * lane / 4). */
__device__ static inline void ldsm_x4_trans(uint32_t b[4], const uint16_t *p)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                 : "r"(a));
}

/* Without transposition: matrix m's rows from lanes 8m .. 8m + 7 (x4: four matrices,
 * x2: two, from lanes 0-15); b[m] holds its elements (lane / 4, 2 (lane % 4)) and
 * (lane / 4, 2 (lane % 4) + 1) -- an mma B fragment of a (n, k) row-major tile. */
__device__ static inline void ldsm_x4(uint32_t b[4], const uint16_t *p)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                 : "r"(a));
}
__device__ static inline void ldsm_x2(uint32_t b[2], const uint16_t *p)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(b[0]), "=r"(b[1])
                 : "r"(a));
}

/* lo and hi rounded to bf16, round to nearest even (NaN stays a NaN), lo in the low
 * half: cvt.rn.bf16x2.f32, the bits of f32_to_bf16_rne for every number. */
__device__ static inline uint32_t bf16x2_rne(float lo, float hi)
{
    uint32_t d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

/* 2^x by the special-function unit (ex2.approx.ftz.f32): exp2f's value wherever that is
 * a normal number (exp2f is this instruction plus a rescaling for x < -126), and zero
 * below 2^-126, where exp2f's result is subnormal. */
__device__ static inline float exp2_ftz(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* A kernel's dynamic shared memory, 16-byte aligned, as bytes named `name`. */
#define MMA_DYN_SMEM(name) extern __shared__ __align__(16) unsigned char name[]

#endif
