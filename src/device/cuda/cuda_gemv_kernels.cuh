/*
 * Small-batch matrix products for decode steps (gemv in include/libra/cuda_api.h).
 *
 * At one to a few rows a linear layer is a matrix-vector product: it reads every
 * weight once and does two flops per weight, so its time is the weights' bytes over
 * the memory bandwidth -- if enough loads are in flight. cuBLASLt's kernels at N = 1
 * took 6.5-8.5 us for 2-12 MB matrices (docs/cuda.md), and the activations needed a
 * separate bf16 conversion each. Here one launch does the conversion, up to three
 * matrices of the same input (q, k and v; gate and up), the bias and the SwiGLU.
 *
 * One warp per output row: its lanes read the row in 16-byte pieces (8 bf16), four
 * pieces each per tile before any arithmetic, and multiply them with the block's
 * copy of x, staged per tile of GEMV_TK columns in shared memory already rounded to
 * bf16 -- the value f32_to_bf16 gives, so the product is linear_fwd's on the same
 * operands. Each lane sums its pieces in column order in float32, then the warp adds
 * the lanes' sums in a fixed butterfly: the result of a row does not depend on N or on
 * the other rows, so a batched step gives the bits of one row at a time.
 * With swiglu a warp computes the gate's and the up projection's row together and
 * writes (g sig) u with sig = 1 / (1 + exp(-g)), swiglu_fwd's expression. With norm
 * every block first sums each row's squares the way rmsnorm_fwd does (its threads and
 * tree; a row of a few thousand values, read again by every block) and stages
 * (x r) w: the bits rmsnorm_fwd would have written, without its launch.
 * The kernel only, in C++ with nothing but CUDA's vector types and intrinsics, so
 * tests/test_cuda_gemv_emu.cc can run it on CPU threads; cuda_gemv.cu launches it.
 * GEMV_PREFETCH=1 (a build's variant) keeps the next tile's weights loading while a
 * tile is used: the same products in the same order. A block's first tile of weights
 * is loaded before grid_wait (cuda_device.cuh): under an overlapped launch it streams
 * in while the kernel before is still running.
 */
#ifndef LIBRA_CUDA_GEMV_KERNELS_CUH
#define LIBRA_CUDA_GEMV_KERNELS_CUH

#define GEMV_WARPS 8    /* warps (output rows) of a block: ROW_THREADS threads */
#define GEMV_TK 1024    /* columns of x staged per tile */
#define GEMV_PIECES 4   /* 8-column pieces a lane reads per row and tile */
#ifndef GEMV_PREFETCH   /* 1: a tile's weights are loaded while the one before is used */
#define GEMV_PREFETCH 0
#endif
static_assert(GEMV_WARPS * 32 == ROW_THREADS, "a gemv block sums a row as rmsnorm_fwd does");

/* The sum of 8 products, in column order, added to acc. */
__device__ static inline float dot8(float acc, const float *w, const uint4 xv)
{
    float x[8];
    bf16x8_to_f32(xv, x);
#pragma unroll
    for (int i = 0; i < 8; i++) acc = fmaf(w[i], x[i], acc);
    return acc;
}

/* Stages columns [t0, t0 + GEMV_TK) of x's NR rows into xs as bf16 (zeros past in),
 * normalised first when norm: (x r) w, rmsnorm_fwd's expression. */
template <int NR>
__device__ static inline void stage_x(uint16_t *xs, const float *x, int in, int t0,
                                      const uint16_t *norm, const float *rstd)
{
    for (int e = threadIdx.x * 4; e < NR * GEMV_TK; e += GEMV_WARPS * 32 * 4) {
        int n = e / GEMV_TK, col = e % GEMV_TK;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (t0 + col < in) v = *(const float4 *)(x + (size_t)n * in + t0 + col);
        if (norm && t0 + col < in) {
            const uint16_t *w = norm + t0 + col;
            float r = rstd[n];
            v.x = (v.x * r) * bf16_to_f32(w[0]);
            v.y = (v.y * r) * bf16_to_f32(w[1]);
            v.z = (v.z * r) * bf16_to_f32(w[2]);
            v.w = (v.w * r) * bf16_to_f32(w[3]);
        }
        uint2 p;
        p.x = (uint32_t)f32_to_bf16_rne(v.x) | ((uint32_t)f32_to_bf16_rne(v.y) << 16);
        p.y = (uint32_t)f32_to_bf16_rne(v.z) | ((uint32_t)f32_to_bf16_rne(v.w) << 16);
        *(uint2 *)(xs + (size_t)n * GEMV_TK + col) = p;
    }
}

/* Loads a lane's GEMV_PIECES pieces of row w of a tile (zeros past the tile's end). */
__device__ static inline void load_row(uint4 *p, const uint16_t *w, int lane, int tn)
{
#pragma unroll
    for (int k = 0; k < GEMV_PIECES; k++) {
        int j = (lane + 32 * k) * 8;
        p[k] = j < tn ? __ldg((const uint4 *)(w + j)) : make_uint4(0, 0, 0, 0);
    }
}

/* acc[n] += the tile's products of the row's pieces p with x row n. */
template <int NR>
__device__ static inline void row_tile(float *acc, const uint4 *p, const uint16_t *xs, int lane,
                                       int tn)
{
#pragma unroll
    for (int k = 0; k < GEMV_PIECES; k++) {
        int j = (lane + 32 * k) * 8;
        if (j >= tn) break;
        float w[8];
        bf16x8_to_f32(p[k], w);
#pragma unroll
        for (int n = 0; n < NR; n++)
            acc[n] = dot8(acc[n], w, *(const uint4 *)(xs + (size_t)n * GEMV_TK + j));
    }
}

__device__ static inline float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Field f of matrix i, picked without indexing the parameter struct (which would copy
 * it to local memory). */
#define MAT(g, i, f) ((i) == 0 ? (g).m[0].f : (i) == 1 ? (g).m[1].f : (g).m[2].f)

template <int NR, int SWIGLU>
__global__ static void __launch_bounds__(GEMV_WARPS * 32) gemv_k(struct cuda_gemv g, int rows)
{
    __shared__ __align__(16) uint16_t xs[NR * GEMV_TK];
    __shared__ float part[ROW_THREADS], rstd[NR];
    grid_release();
    int lane = threadIdx.x & 31, row = blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    int live = row < rows, r = row, i = 0;
    if (r >= g.m[0].out && g.n_mats > 1) r -= g.m[0].out, i = 1;
    if (i == 1 && r >= g.m[1].out && g.n_mats > 2) r -= g.m[1].out, i = 2;
    const uint16_t *w0 = MAT(g, i, w) + (size_t)r * g.in;
    const uint16_t *w1 = SWIGLU ? g.m[1].w + (size_t)r * g.in : w0;
    /* the first tile's weights load before anything an earlier kernel writes is read:
     * under an overlapped launch, while that kernel still runs */
    uint4 p0[GEMV_PIECES], p1[GEMV_PIECES];
    if (live) {
        load_row(p0, w0, lane, min(GEMV_TK, g.in));
        if (SWIGLU) load_row(p1, w1, lane, min(GEMV_TK, g.in));
    }
    grid_wait();
    if (g.norm) { /* each row's 1 / rms, summed as rmsnorm_fwd sums (a block is a row's) */
        for (int n = 0; n < NR; n++) {
            const float *xr = g.x + (size_t)n * g.in;
            float s = 0.0f;
            for (int j = threadIdx.x; j < g.in; j += ROW_THREADS) s += xr[j] * xr[j];
            float rr = 1.0f / sqrtf(block_sum(s, part) / (float)g.in + g.eps);
            if (threadIdx.x == 0) rstd[n] = rr;
        }
        __syncthreads();
    }
    float a0[NR], a1[NR];
#pragma unroll
    for (int n = 0; n < NR; n++) a0[n] = 0.0f, a1[n] = 0.0f;
#if GEMV_PREFETCH
    uint4 q0[GEMV_PIECES], q1[GEMV_PIECES]; /* the next tile's pieces, loading meanwhile */
#endif
    for (int t0 = 0; t0 < g.in; t0 += GEMV_TK) {
        int tn = min(GEMV_TK, g.in - t0);
#if GEMV_PREFETCH
        int t1 = t0 + GEMV_TK;
        if (live && t1 < g.in) {
            load_row(q0, w0 + t1, lane, min(GEMV_TK, g.in - t1));
            if (SWIGLU) load_row(q1, w1 + t1, lane, min(GEMV_TK, g.in - t1));
        }
#else
        if (live && t0 > 0) { /* the weights' loads first: they overlap the staging of x */
            load_row(p0, w0 + t0, lane, tn);
            if (SWIGLU) load_row(p1, w1 + t0, lane, tn);
        }
#endif
        __syncthreads(); /* the last tile's xs is read by every warp */
        stage_x<NR>(xs, g.x, g.in, t0, g.norm, rstd);
        __syncthreads();
        if (live) {
            row_tile<NR>(a0, p0, xs, lane, tn);
            if (SWIGLU) row_tile<NR>(a1, p1, xs, lane, tn);
        }
#if GEMV_PREFETCH
#pragma unroll
        for (int k = 0; k < GEMV_PIECES; k++) {
            p0[k] = q0[k];
            if (SWIGLU) p1[k] = q1[k];
        }
#endif
    }
    if (!live) return;
#pragma unroll
    for (int n = 0; n < NR; n++) {
        float v = warp_sum(a0[n]);
        if (SWIGLU) {
            float u = warp_sum(a1[n]);
            if (lane == 0) {
                float sig = 1.0f / (1.0f + expf(-v));
                g.m[0].y[(size_t)n * g.m[0].out + r] = (v * sig) * u;
            }
            continue;
        }
        if (lane != 0) continue;
        const float *b = MAT(g, i, b);
        if (b) v += b[r];
        float *y = MAT(g, i, y) + (size_t)n * MAT(g, i, out) + r;
        *y = g.accumulate ? *y + v : v;
    }
}

#endif
