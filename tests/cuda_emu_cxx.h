/*
 * What the module's C++ kernels (the tensor-core attention, the gemv) use of CUDA
 * beyond tests/cuda_block_emu.h, for their tests on CPU threads: the vector types and
 * their make_ functions, __ldg, min, and __launch_bounds__ / __align__. A test includes
 * cuda_block_emu.h, then this, then the kernels' header.
 */
#ifndef LIBRA_TESTS_CUDA_EMU_CXX_H
#define LIBRA_TESTS_CUDA_EMU_CXX_H

#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

/* aligned as CUDA's are, so that UBSan's alignment check catches a misaligned vector
 * access, which the GPU would fault on */
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w)
{
    return uint4{x, y, z, w};
}
template <typename T>
static inline T __ldg(const T *p)
{
    return *p;
}
static inline int min(int a, int b) { return a < b ? a : b; }

#endif
