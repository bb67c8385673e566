/*
 * The forward kernels of the CUDA engine so far (include/libra/cuda_api.h), each the GPU form
 * of a CPU reference in src/model/cpu/ops.c; tests/test_cuda.c compares them.
 * Deliberately plain: one thread per element, or one block per row with a
 * shared-memory tree reduction in float32 -- correctness first, tuned later against
 * the roofline. bf16 is the upper 16 bits of a float32 (widening is exact).
 *
 * The kernels, in the C subset of CUDA (tests/test_cuda_core_emu.c compiles this file
 * as C11 and runs them on CPU threads against the CPU references); their launchers
 * and the device-error check are in cuda_kernels.cu.
 */
#ifndef LIBRA_CUDA_KERNELS_CUH
#define LIBRA_CUDA_KERNELS_CUH

__device__ int cu_dev_error;       /* 0, or 1: a token outside the vocabulary was seen */
__device__ long long cu_dev_value; /* the first such token */

/* Raised by a kernel that meets a token outside [0, V). */
__device__ static void cu_raise_bad_token(long long t)
{
    if (atomicCAS(&cu_dev_error, 0, 1) == 0) cu_dev_value = t;
}

/* ---- embedding: one block per row; token -1 is a row another rank's vocabulary shard
 * holds (zero here, nothing to add); any other token outside [0, V) is an error ---- */
__global__ static void embed_gather_k(float *x, const uint16_t *embed, const int32_t *tokens,
                                      int C, int V)
{
    grid_release();
    grid_wait();
    int r = blockIdx.x;
    int32_t t = tokens[r];
    float *xr = x + (size_t)r * C;
    if (t == -1) {
        for (int j = threadIdx.x; j < C; j += blockDim.x) xr[j] = 0.0f;
        return;
    }
    if (t < 0 || t >= V) {
        if (threadIdx.x == 0) cu_raise_bad_token(t);
        return;
    }
    const uint16_t *e = embed + (size_t)t * C;
    for (int j = threadIdx.x; j < C; j += blockDim.x) xr[j] = bf16_to_f32(e[j]);
}

/* dembed rows tokens[r] += dx[r]: one block per row, atomic adds (rows sharing a token
 * add in any order). */
__global__ static void embed_scatter_add_k(float *dembed, const float *dx,
                                           const int32_t *tokens, int C, int V)
{
    int r = blockIdx.x;
    int32_t t = tokens[r];
    if (t == -1) return;
    if (t < 0 || t >= V) {
        if (threadIdx.x == 0) cu_raise_bad_token(t);
        return;
    }
    float *de = dembed + (size_t)t * C;
    const float *dxr = dx + (size_t)r * C;
    for (int j = threadIdx.x; j < C; j += blockDim.x) atomicAdd(&de[j], dxr[j]);
}

/* ---- RMSNorm: one block per row, sum of squares reduced in float32 ---- */
/* y, or with y16 (y NULL) the same values rounded to bf16. */
__global__ static void rmsnorm_fwd_k(float *y, uint16_t *y16, const float *x, const uint16_t *w,
                                     int C, float eps)
{
    __shared__ float part[ROW_THREADS];
    size_t o = (size_t)blockIdx.x * C;
    const float *xr = x + o;
    float s = 0.0f;
    for (int j = threadIdx.x; j < C; j += blockDim.x) s += xr[j] * xr[j];
    float r = 1.0f / sqrtf(block_sum(s, part) / (float)C + eps);
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        float v = (xr[j] * r) * bf16_to_f32(w[j]);
        if (y16)
            y16[o + j] = f32_to_bf16_rne(v);
        else
            y[o + j] = v;
    }
}

/* Backward, dx: xhat = x r, g = dy w:  dx += r (g - xhat mean(g xhat)), and with dx16
 * the new dx rounded to bf16 there too (the next product's operand); the row's r is
 * kept in rstd for the dw kernel. One block per row. */
__global__ static void rmsnorm_bwd_dx_k(float *dx, uint16_t *dx16, const float *dy,
                                        const float *x, const float *w, float *rstd, int C,
                                        float eps)
{
    __shared__ float part[ROW_THREADS];
    size_t o = (size_t)blockIdx.x * C;
    float ss = 0.0f, d = 0.0f;
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        ss += x[o + j] * x[o + j];
        d += dy[o + j] * w[j] * x[o + j];
    }
    float r = 1.0f / sqrtf(block_sum(ss, part) / (float)C + eps);
    float m = block_sum(d, part) * r / (float)C;
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    if (!dx) return;
    for (int j = threadIdx.x; j < C; j += blockDim.x) {
        float v = dx[o + j] + r * (dy[o + j] * w[j] - x[o + j] * r * m);
        dx[o + j] = v;
        if (dx16) dx16[o + j] = f32_to_bf16_rne(v);
    }
}

/* ---- rotary (rotate-half): one thread per (row, head, pair); sign -1 rotates back
 * (the backward: the rotation is orthogonal) ---- */
__global__ static void rope_k(float *x, const int32_t *pos, int N, int n_heads, int D,
                              const float *rope, float sign)
{
    int half = D / 2;
    long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= (long long)N * n_heads * half) return;
    int i = (int)(k % half);
    long long rh = k / half; /* row * n_heads + head */
    int r = (int)(rh / n_heads);
    float *xh = x + rh * D;
    const float *cs = rope + (size_t)pos[r] * D;
    rope_pair(cs, i, half, sign, xh[i], xh[half + i], &xh[i], &xh[half + i]);
}

/* ---- qwen3's q/k norm and the rotation (the training path): a warp per (row, head)
 * of D <= ROW_THREADS values, ROW_WARPS rows a block, with warp_row_sum's copy of
 * block_sum's tree -- rmsnorm_fwd_k's and rmsnorm_bwd_dx_k's sums and expressions,
 * rope_k's rotation, so the bits of the separate kernels, without their barriers (a
 * 128-value row had a 256-thread block and 10 of them, 20 backward) or a second pass over the
 * rows ---- */
#define ROW_WARPS (ROW_THREADS / 32)

/* y = rope_fwd(rmsnorm_fwd(x, w)) for rows (row, head) of D; pos per row. */
__global__ static void qk_norm_rope_k(float *y, const float *x, const uint16_t *w,
                                      const int32_t *pos, const float *rope, long long rows,
                                      int n_heads, int D, float eps)
{
    __shared__ float ys[ROW_WARPS][ROW_THREADS];
    int wp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, half = D / 2;
    long long row = (long long)blockIdx.x * ROW_WARPS + wp;
    if (row >= rows) return; /* the whole warp */
    const float *xr = x + row * D;
    float xv[ROW_WARP_VALS], v[ROW_WARP_VALS];
#pragma unroll
    for (int i = 0; i < ROW_WARP_VALS; i++) {
        int j = lane + 32 * i;
        xv[i] = j < D ? xr[j] : 0.0f;
        v[i] = 0.0f;
        v[i] += xv[i] * xv[i];
    }
    float r = 1.0f / sqrtf(warp_row_sum(v) / (float)D + eps);
    float *yw = ys[wp];
#pragma unroll
    for (int i = 0; i < ROW_WARP_VALS; i++) {
        int j = lane + 32 * i;
        if (j < D) yw[j] = (xv[i] * r) * bf16_to_f32(w[j]);
    }
    __syncwarp(0xffffffffu);
    const float *cs = rope + (size_t)pos[row / n_heads] * D;
    float *yr = y + row * D;
    for (int i = lane; i < half; i += 32)
        rope_pair(cs, i, half, 1.0f, yw[i], yw[half + i], &yr[i], &yr[half + i]);
}

/* Its backward: dy rotated back in place (rope_bwd's; the column sums of the norm's
 * weight gradient read it), then rmsnorm_bwd_dx_k's dx WRITTEN -- 0 + its term, the
 * bits it adds to zeros -- and the row's r into rstd. */
__global__ static void qk_norm_rope_bwd_k(float *dx, float *dy, const float *x, const float *w,
                                          float *rstd, const int32_t *pos, const float *rope,
                                          long long rows, int n_heads, int D, float eps)
{
    __shared__ float gs[ROW_WARPS][ROW_THREADS];
    int wp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, half = D / 2;
    long long row = (long long)blockIdx.x * ROW_WARPS + wp;
    if (row >= rows) return;
    float *dyr = dy + row * D, *gw = gs[wp];
    const float *xr = x + row * D, *cs = rope + (size_t)pos[row / n_heads] * D;
    for (int i = lane; i < half; i += 32) {
        float y0, y1;
        rope_pair(cs, i, half, -1.0f, dyr[i], dyr[half + i], &y0, &y1);
        dyr[i] = gw[i] = y0;
        dyr[half + i] = gw[half + i] = y1;
    }
    __syncwarp(0xffffffffu);
    float xv[ROW_WARP_VALS], gv[ROW_WARP_VALS], wv[ROW_WARP_VALS];
    float ss[ROW_WARP_VALS], d[ROW_WARP_VALS];
#pragma unroll
    for (int i = 0; i < ROW_WARP_VALS; i++) {
        int j = lane + 32 * i;
        xv[i] = j < D ? xr[j] : 0.0f;
        gv[i] = j < D ? gw[j] : 0.0f;
        wv[i] = j < D ? w[j] : 0.0f;
        ss[i] = 0.0f;
        ss[i] += xv[i] * xv[i];
        d[i] = 0.0f;
        d[i] += gv[i] * wv[i] * xv[i];
    }
    float r = 1.0f / sqrtf(warp_row_sum(ss) / (float)D + eps);
    float m = warp_row_sum(d) * r / (float)D;
    if (lane == 0) rstd[row] = r;
    float *dxr = dx + row * D;
#pragma unroll
    for (int i = 0; i < ROW_WARP_VALS; i++) {
        int j = lane + 32 * i;
        if (j < D) {
            float t = 0.0f;
            t += r * (gv[i] * wv[i] - xv[i] * r * m);
            dxr[j] = t;
        }
    }
}

/* ---- SwiGLU and bf16 conversion: one thread per element ---- */
/* y = (g sig) u, or with y16 (y NULL) that rounded to bf16 (the down projection's
 * operand); sig written too unless NULL. */
__global__ static void swiglu_fwd_k(float *y, uint16_t *y16, float *sig_out, const float *g,
                                    const float *u, int64_t n)
{
    int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    float sig = 1.0f / (1.0f + expf(-g[k]));
    if (sig_out) sig_out[k] = sig;
    float v = (g[k] * sig) * u[k];
    if (y16)
        y16[k] = f32_to_bf16_rne(v);
    else
        y[k] = v;
}

/* dg += dy u sig (1 + g (1 - sig)); du += dy (g sig), as swiglu_backward; with dg16 /
 * du16 (dg, du NULL) those terms added to zeros and rounded to bf16, written: the gate
 * and up projections' backward operands. sig NULL: formed again from g (swiglu_fwd_k's
 * expression, its bits), so the training path keeps no sigmoid. */
__global__ static void swiglu_bwd_k(float *dg, float *du, uint16_t *dg16, uint16_t *du16,
                                    const float *dy, const float *g, const float *u,
                                    const float *sig, int64_t n)
{
    int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    float sg = sig ? sig[k] : 1.0f / (1.0f + expf(-g[k]));
    float tg = dy[k] * u[k] * sg * (1.0f + g[k] * (1.0f - sg));
    float tu = dy[k] * (g[k] * sg);
    if (dg) dg[k] += tg;
    if (du) du[k] += tu;
    if (dg16) dg16[k] = f32_to_bf16_rne(0.0f + tg);
    if (du16) du16[k] = f32_to_bf16_rne(0.0f + tu);
}

__global__ static void f32_to_bf16_k(uint16_t *y, const float *x, int64_t n)
{
    int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) y[k] = f32_to_bf16_rne(x[k]);
}

#endif
