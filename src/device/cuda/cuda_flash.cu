/*
 * Causal grouped-query attention of one sequence on the tensor cores, for the
 * training path (include/libra/cuda_api.h: flash_fwd, flash_bwd): the same function
 * as attn_fwd / attn_bwd (cuda_attention.cu, attn_forward / attn_backward of
 * src/model/cpu/ops.c), computed the FlashAttention-2 way.
 *
 * Forward: a block takes FL_ROWS query rows of one head, a warp 16 of them; the keys
 * come in tiles of FL_KEYS through shared memory (float32 rounded to bf16 as they are
 * staged); S = Q K^T and O += P V are mma.sync m16n8k16 products (bf16 operands,
 * float32 accumulation) whose accumulators never leave the registers; the softmax is
 * online (running max and sum per row, the accumulator rescaled), so no score matrix
 * exists at any length. It writes O and, for the backward, each row's log-sum-exp.
 * Backward, by recomputation from that log-sum-exp, deterministic (no atomics):
 *   flash_delta_k  delta_i = dO_i . O_i, one warp per (row, head), float32;
 *   flash_dq_k     per 16 query rows: P = exp(scale Q K^T - lse), dP = dO V^T,
 *                  dS = P (dP - delta), dq += scale dS K, keys in tiles of FL_BKEYS;
 *   flash_dkv_k    per 16 keys of a kv head: the same P^T and dS^T over the query
 *                  rows of every head of the group, in tiles of FL_BROWS,
 *                  dv += P^T dO, dk += scale dS^T Q.
 * Rounding: Q, K, V, dO, P and dS enter the products as bf16 (round to nearest even),
 * all sums are float32 -- the precision of the matrix products elsewhere on the GPU.
 *
 * Fragments of mma.m16n8k16 (g = lane / 4, t = lane % 4; two bf16 per register, the
 * lower index in the low half): A (16 x 16, row major) a0 = (g, 2t..), a1 = (g+8, 2t..),
 * a2 = (g, 2t+8..), a3 = (g+8, 2t+8..); B (16 x 8, k x n) b0 = (k 2t.., n g),
 * b1 = (k 2t+8.., n g); C (16 x 8) c0, c1 = (g, 2t), (g, 2t+1), c2, c3 = row g+8.
 * Every tile is staged in shared memory as (row, d) bf16 rows padded by 8 (so the 8 g's
 * of a read fall in different banks). A B operand whose k runs along those rows (Q K^T,
 * dO V^T, K Q^T, V dO^T) is read as 32-bit words; one whose k runs down them (P V,
 * dS K, P^T dO, dS^T Q) with ldmatrix's transposing load.
 * Head dimensions: D % 4 == 0 (float4 loads) and D <= 128, computed as DP = D rounded
 * up to 16 with zero columns (cuda_flash_supports).
 */
#include "cuda_internal.h"

#include <math.h>

#include "libra/cuda_api.h"

#define FL_WARPS 4
#define FL_THREADS (32 * FL_WARPS)
#define FL_ROWS (16 * FL_WARPS) /* query rows of a forward / dq block */
#define FL_KEYS 64              /* keys per tile, forward */
#define FL_BKEYS 32             /* keys per tile, dq pass */
#define FL_BROWS 32             /* query rows per tile, dk/dv pass */
#define FL_LOG2E 1.4426950408889634f

__device__ static inline uint32_t pack2(float lo, float hi)
{
    return (uint32_t)f32_to_bf16_rne(lo) | ((uint32_t)f32_to_bf16_rne(hi) << 16);
}

__device__ static inline uint32_t word(const uint16_t *p) { return *(const uint32_t *)p; }

__device__ static inline void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Stages rows r0 .. r0 + n - 1 of a (rows, ld) float32 matrix, columns c0 .. c0 + D - 1
 * (zero past D and past `rows`), as bf16 rows of DP + 8 into shared memory. */
template <int DP>
__device__ static void stage(uint16_t *sm, const float *x, size_t ld, int c0, int r0, int n,
                             int rows, int D)
{
    for (int e = threadIdx.x; e < n * (DP / 4); e += FL_THREADS) {
        int r = e / (DP / 4), c = (e % (DP / 4)) * 4;
        float4 f = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r0 + r < rows && c < D) f = *(const float4 *)(x + (size_t)(r0 + r) * ld + c0 + c);
        uint32_t *w = (uint32_t *)(sm + r * (DP + 8) + c);
        w[0] = pack2(f.x, f.y);
        w[1] = pack2(f.z, f.w);
    }
}

/* The B fragments of two n-tiles (columns n0 .. n0 + 15) over k rows k0 .. k0 + 15 of
 * a (row, column) bf16 tile of row stride RS, where the product's k runs down the
 * tile's rows (P V, dS K, P^T dO, dS^T Q): ldmatrix with transposition; b[0], b[1] of
 * the first n-tile, b[2], b[3] of the second. */
template <int RS>
__device__ static inline void load_bt(uint32_t b[4], const uint16_t *tile, int k0, int n0)
{
    int lane = threadIdx.x & 31;
    const uint16_t *p = tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * RS + n0 + (lane >> 4) * 8;
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                 : "r"(a));
}

/* The A fragment of columns 16 kk .. 16 kk + 15 of a 16-row accumulator (c[n]: the
 * n-tiles of 8 columns), rounded to bf16: P or dS feeds the next product from the
 * registers. */
__device__ static inline void acc_to_a(uint32_t a[4], const float (*c)[4], int kk)
{
    a[0] = pack2(c[2 * kk][0], c[2 * kk][1]);
    a[1] = pack2(c[2 * kk][2], c[2 * kk][3]);
    a[2] = pack2(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[3] = pack2(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

/* acc[n] += a x (rows k0 .. k0 + 15 of a bf16 tile of row stride RS), for the NO
 * n-tiles of its columns. */
template <int NO, int RS>
__device__ static inline void mma_rows(float (*acc)[4], const uint32_t a[4], const uint16_t *tile,
                                       int k0)
{
#pragma unroll
    for (int n = 0; n < NO; n += 2) {
        uint32_t b[4];
        load_bt<RS>(b, tile, k0, 8 * n);
        mma16816(acc[n], a, b[0], b[1]);
        mma16816(acc[n + 1], a, b[2], b[3]);
    }
}

/* The A fragments of 16 rows (ra = row0 + g, rb = ra + 8) of a float32 matrix, columns
 * c0 .. c0 + DP - 1 (zero past D and past `rows`), rounded to bf16. */
template <int DP>
__device__ static void load_a(uint32_t a[DP / 16][4], const float *x, size_t ld, int c0, int ra,
                              int rows, int D)
{
    int t = threadIdx.x & 3;
#pragma unroll
    for (int kk = 0; kk < DP / 16; kk++) {
#pragma unroll
        for (int half = 0; half < 2; half++) {
            int c = 16 * kk + 2 * t + 8 * half;
#pragma unroll
            for (int r = 0; r < 2; r++) {
                int row = ra + 8 * r;
                float2 f = make_float2(0.0f, 0.0f);
                if (row < rows && c < D) f = *(const float2 *)(x + (size_t)row * ld + c0 + c);
                a[kk][2 * half + r] = pack2(f.x, f.y);
            }
        }
    }
}

/* The highest q_pos of rows r0 .. r0 + n - 1 (below nq), for the whole block. */
__device__ static int block_max_pos(const int32_t *q_pos, int r0, int n, int nq)
{
    __shared__ int s_max;
    if (threadIdx.x == 0) {
        int m = 0;
        for (int r = r0; r < r0 + n && r < nq; r++) m = q_pos[r] > m ? q_pos[r] : m;
        s_max = m;
    }
    __syncthreads();
    int m = s_max;
    __syncthreads();
    return m;
}

/* ---- forward ---- */
template <int DP>
__global__ static void __launch_bounds__(FL_THREADS)
    flash_fwd_k(float *out, float *lse, const float *q, const float *k, const float *v,
                const int32_t *q_pos, int nq, int nk, int H, int K, int D, float scale2)
{
    constexpr int NK = DP / 16, NO = DP / 8, NS = FL_KEYS / 8;
    __shared__ __align__(16) uint16_t ks[FL_KEYS * (DP + 8)];
    __shared__ __align__(16) uint16_t vs[FL_KEYS * (DP + 8)];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int h = blockIdx.y, kvh = h / (H / K);
    int r0 = blockIdx.x * FL_ROWS, ra = r0 + 16 * warp + g, rb = ra + 8;
    /* rows past nq attend key 0 only (finite, never stored) */
    int pa = ra < nq ? q_pos[ra] : 0, pb = rb < nq ? q_pos[rb] : 0;
    int last = block_max_pos(q_pos, r0, FL_ROWS, nq);
    size_t ldq = (size_t)H * D, ldk = (size_t)K * D;
    uint32_t qa[NK][4];
    load_a<DP>(qa, q, ldq, h * D, ra, nq, D);
    float o[NO][4];
#pragma unroll
    for (int n = 0; n < NO; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f; /* l: this thread's part */

    for (int j0 = 0; j0 <= last; j0 += FL_KEYS) {
        __syncthreads(); /* the previous tile is read */
        stage<DP>(ks, k, ldk, kvh * D, j0, FL_KEYS, nk, D);
        stage<DP>(vs, v, ldk, kvh * D, j0, FL_KEYS, nk, D);
        __syncthreads();
        float s[NS][4];
#pragma unroll
        for (int n = 0; n < NS; n++) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            const uint16_t *kr = ks + (8 * n + g) * (DP + 8) + 2 * t;
#pragma unroll
            for (int kk = 0; kk < NK; kk++) mma16816(s[n], qa[kk], word(kr + 16 * kk), word(kr + 16 * kk + 8));
        }
        float ta = -INFINITY, tb = -INFINITY;
#pragma unroll
        for (int n = 0; n < NS; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int key = j0 + 8 * n + 2 * t + (i & 1);
                float x = key <= (i < 2 ? pa : pb) ? s[n][i] * scale2 : -INFINITY;
                s[n][i] = x;
                if (i < 2) ta = fmaxf(ta, x);
                else tb = fmaxf(tb, x);
            }
        for (int off = 1; off < 4; off *= 2) {
            ta = fmaxf(ta, __shfl_xor_sync(0xffffffffu, ta, off));
            tb = fmaxf(tb, __shfl_xor_sync(0xffffffffu, tb, off));
        }
        /* key j0 <= pos for every row once j0 = 0 has been seen: the maxima are finite */
        float na = fmaxf(ma, ta), nb = fmaxf(mb, tb);
        float ka = exp2f(ma - na), kb = exp2f(mb - nb);
        ma = na;
        mb = nb;
        la *= ka;
        lb *= kb;
#pragma unroll
        for (int n = 0; n < NO; n++) {
            o[n][0] *= ka;
            o[n][1] *= ka;
            o[n][2] *= kb;
            o[n][3] *= kb;
        }
#pragma unroll
        for (int n = 0; n < NS; n++) {
            s[n][0] = exp2f(s[n][0] - ma);
            s[n][1] = exp2f(s[n][1] - ma);
            s[n][2] = exp2f(s[n][2] - mb);
            s[n][3] = exp2f(s[n][3] - mb);
            la += s[n][0] + s[n][1];
            lb += s[n][2] + s[n][3];
        }
#pragma unroll
        for (int kk = 0; kk < FL_KEYS / 16; kk++) {
            uint32_t pa4[4];
            acc_to_a(pa4, s, kk);
            mma_rows<NO, DP + 8>(o, pa4, vs, 16 * kk);
        }
    }
    for (int off = 1; off < 4; off *= 2) {
        la += __shfl_xor_sync(0xffffffffu, la, off);
        lb += __shfl_xor_sync(0xffffffffu, lb, off);
    }
#pragma unroll
    for (int n = 0; n < NO; n++) {
        int c = 8 * n + 2 * t;
        if (c >= D) continue;
        if (ra < nq)
            *(float2 *)(out + (size_t)ra * ldq + h * D + c) = make_float2(o[n][0] / la, o[n][1] / la);
        if (rb < nq)
            *(float2 *)(out + (size_t)rb * ldq + h * D + c) = make_float2(o[n][2] / lb, o[n][3] / lb);
    }
    if (lse && t == 0) { /* natural log: lse = ln(2^m l) */
        if (ra < nq) lse[(size_t)ra * H + h] = ma / FL_LOG2E + logf(la);
        if (rb < nq) lse[(size_t)rb * H + h] = mb / FL_LOG2E + logf(lb);
    }
}

/* ---- backward ---- */
__global__ static void flash_delta_k(float *delta, const float *dout, const float *o, int nq,
                                     int H, int D)
{
    int lane = threadIdx.x & 31;
    long long task = (long long)blockIdx.x * FL_WARPS + (threadIdx.x >> 5);
    if (task >= (long long)nq * H) return; /* the whole warp */
    const float *a = dout + (size_t)task * D, *b = o + (size_t)task * D;
    float s = 0.0f;
    for (int d = lane; d < D; d += 32) s += a[d] * b[d];
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) delta[task] = s;
}

template <int DP>
__global__ static void __launch_bounds__(FL_THREADS)
    flash_dq_k(float *dq, const float *dout, const float *q, const float *k, const float *v,
               const float *lse, const float *delta, const int32_t *q_pos, int nq, int nk,
               int H, int K, int D, float scale)
{
    constexpr int NK = DP / 16, NO = DP / 8, NS = FL_BKEYS / 8;
    __shared__ __align__(16) uint16_t ks[FL_BKEYS * (DP + 8)];
    __shared__ __align__(16) uint16_t vs[FL_BKEYS * (DP + 8)];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int h = blockIdx.y, kvh = h / (H / K);
    int r0 = blockIdx.x * FL_ROWS, ra = r0 + 16 * warp + g, rb = ra + 8;
    int pa = ra < nq ? q_pos[ra] : -1, pb = rb < nq ? q_pos[rb] : -1; /* -1: no key */
    float scale2 = scale * FL_LOG2E;
    float lsa = ra < nq ? lse[(size_t)ra * H + h] * FL_LOG2E : 0.0f;
    float lsb = rb < nq ? lse[(size_t)rb * H + h] * FL_LOG2E : 0.0f;
    float dla = ra < nq ? delta[(size_t)ra * H + h] : 0.0f;
    float dlb = rb < nq ? delta[(size_t)rb * H + h] : 0.0f;
    int last = block_max_pos(q_pos, r0, FL_ROWS, nq);
    size_t ldq = (size_t)H * D, ldk = (size_t)K * D;
    uint32_t qa[NK][4], da[NK][4];
    load_a<DP>(qa, q, ldq, h * D, ra, nq, D);
    load_a<DP>(da, dout, ldq, h * D, ra, nq, D);
    float acc[NO][4];
#pragma unroll
    for (int n = 0; n < NO; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

    for (int j0 = 0; j0 <= last; j0 += FL_BKEYS) {
        __syncthreads();
        stage<DP>(ks, k, ldk, kvh * D, j0, FL_BKEYS, nk, D);
        stage<DP>(vs, v, ldk, kvh * D, j0, FL_BKEYS, nk, D);
        __syncthreads();
        float s[NS][4], dp[NS][4];
#pragma unroll
        for (int n = 0; n < NS; n++) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.0f;
            const uint16_t *kr = ks + (8 * n + g) * (DP + 8) + 2 * t;
            const uint16_t *vr = vs + (8 * n + g) * (DP + 8) + 2 * t;
#pragma unroll
            for (int kk = 0; kk < NK; kk++) {
                mma16816(s[n], qa[kk], word(kr + 16 * kk), word(kr + 16 * kk + 8));
                mma16816(dp[n], da[kk], word(vr + 16 * kk), word(vr + 16 * kk + 8));
            }
#pragma unroll
            for (int i = 0; i < 4; i++) { /* s becomes dS */
                int key = j0 + 8 * n + 2 * t + (i & 1);
                float p = key <= (i < 2 ? pa : pb) ? exp2f(s[n][i] * scale2 - (i < 2 ? lsa : lsb)) : 0.0f;
                s[n][i] = p * (dp[n][i] - (i < 2 ? dla : dlb));
            }
        }
#pragma unroll
        for (int kk = 0; kk < FL_BKEYS / 16; kk++) {
            uint32_t a4[4];
            acc_to_a(a4, s, kk);
            mma_rows<NO, DP + 8>(acc, a4, ks, 16 * kk);
        }
    }
#pragma unroll
    for (int n = 0; n < NO; n++) {
        int c = 8 * n + 2 * t;
        if (c >= D) continue;
        if (ra < nq) {
            float2 *p = (float2 *)(dq + (size_t)ra * ldq + h * D + c);
            float2 x = *p;
            *p = make_float2(x.x + scale * acc[n][0], x.y + scale * acc[n][1]);
        }
        if (rb < nq) {
            float2 *p = (float2 *)(dq + (size_t)rb * ldq + h * D + c);
            float2 x = *p;
            *p = make_float2(x.x + scale * acc[n][2], x.y + scale * acc[n][3]);
        }
    }
}

/* dk/dv: shared memory (dynamic): K and V of the block's FL_ROWS keys, then for each
 * query tile Q and dO, all as (row, d) bf16 rows, and the tile's positions, lse (log2
 * units) and delta. */
template <int DP>
static size_t dkv_smem(void)
{
    return sizeof(uint16_t) * (2 * FL_ROWS * (DP + 8) + 2 * FL_BROWS * (DP + 8)) +
           FL_BROWS * (sizeof(int) + 2 * sizeof(float));
}

template <int DP>
__global__ static void __launch_bounds__(FL_THREADS)
    flash_dkv_k(float *dk, float *dv, const float *dout, const float *q, const float *k,
                const float *v, const float *lse, const float *delta, const int32_t *q_pos,
                int nq, int nk, int H, int K, int D, float scale)
{
    constexpr int NK = DP / 16, NO = DP / 8, NS = FL_BROWS / 8, RS = DP + 8;
    extern __shared__ __align__(16) unsigned char fl_smem[];
    uint16_t *ks = (uint16_t *)fl_smem, *vs = ks + FL_ROWS * RS;
    uint16_t *qs = vs + FL_ROWS * RS, *dos = qs + FL_BROWS * RS;
    int *s_pos = (int *)(dos + FL_BROWS * RS);
    float *s_lse = (float *)(s_pos + FL_BROWS), *s_dl = s_lse + FL_BROWS;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int kvh = blockIdx.y, rep = H / K;
    int j0 = blockIdx.x * FL_ROWS, ka = j0 + 16 * warp + g, kb = ka + 8; /* this thread's keys */
    float scale2 = scale * FL_LOG2E;
    size_t ldq = (size_t)H * D, ldk = (size_t)K * D;
    stage<DP>(ks, k, ldk, kvh * D, j0, FL_ROWS, nk, D);
    stage<DP>(vs, v, ldk, kvh * D, j0, FL_ROWS, nk, D);
    float dka[NO][4], dva[NO][4];
#pragma unroll
    for (int n = 0; n < NO; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) dka[n][i] = dva[n][i] = 0.0f;
    const uint16_t *kw = ks + (16 * warp + g) * RS + 2 * t, *vw = vs + (16 * warp + g) * RS + 2 * t;

    for (int r = 0; r < rep; r++) {
        int h = kvh * rep + r;
        for (int i0 = 0; i0 < nq; i0 += FL_BROWS) {
            int i = i0 + (int)threadIdx.x;
            int pos = threadIdx.x < FL_BROWS && i < nq ? q_pos[i] : -1;
            /* a barrier too: the previous tile is read */
            if (!__syncthreads_or(pos >= j0)) continue; /* every row before the block's keys */
            if (threadIdx.x < FL_BROWS) {
                s_pos[threadIdx.x] = pos;
                s_lse[threadIdx.x] = i < nq ? lse[(size_t)i * H + h] * FL_LOG2E : 0.0f;
                s_dl[threadIdx.x] = i < nq ? delta[(size_t)i * H + h] : 0.0f;
            }
            stage<DP>(qs, q, ldq, h * D, i0, FL_BROWS, nq, D);
            stage<DP>(dos, dout, ldq, h * D, i0, FL_BROWS, nq, D);
            __syncthreads();
            float s[NS][4], dp[NS][4]; /* (keys ka/kb, rows 8n + 2t ..) */
#pragma unroll
            for (int n = 0; n < NS; n++) {
                s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
                dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.0f;
                const uint16_t *qr = qs + (8 * n + g) * RS + 2 * t;
                const uint16_t *dr = dos + (8 * n + g) * RS + 2 * t;
#pragma unroll
                for (int kk = 0; kk < NK; kk++) {
                    uint32_t kfr[4] = {word(kw + 16 * kk), word(kw + 8 * RS + 16 * kk),
                                       word(kw + 16 * kk + 8), word(kw + 8 * RS + 16 * kk + 8)};
                    uint32_t vfr[4] = {word(vw + 16 * kk), word(vw + 8 * RS + 16 * kk),
                                       word(vw + 16 * kk + 8), word(vw + 8 * RS + 16 * kk + 8)};
                    mma16816(s[n], kfr, word(qr + 16 * kk), word(qr + 16 * kk + 8));
                    mma16816(dp[n], vfr, word(dr + 16 * kk), word(dr + 16 * kk + 8));
                }
#pragma unroll
                for (int e = 0; e < 4; e++) { /* s becomes P^T, dp becomes dS^T */
                    int row = 8 * n + 2 * t + (e & 1), key = e < 2 ? ka : kb;
                    float p = key <= s_pos[row] ? exp2f(s[n][e] * scale2 - s_lse[row]) : 0.0f;
                    s[n][e] = p;
                    dp[n][e] = p * (dp[n][e] - s_dl[row]);
                }
            }
#pragma unroll
            for (int kk = 0; kk < FL_BROWS / 16; kk++) {
                uint32_t pa4[4], ds4[4];
                acc_to_a(pa4, s, kk);
                acc_to_a(ds4, dp, kk);
                mma_rows<NO, RS>(dva, pa4, dos, 16 * kk);
                mma_rows<NO, RS>(dka, ds4, qs, 16 * kk);
            }
        }
    }
#pragma unroll
    for (int n = 0; n < NO; n++) {
        int c = 8 * n + 2 * t;
        if (c >= D) continue;
        for (int half = 0; half < 2; half++) {
            int key = half ? kb : ka;
            if (key >= nk) continue;
            float2 *pk = (float2 *)(dk + (size_t)key * ldk + kvh * D + c);
            float2 *pv = (float2 *)(dv + (size_t)key * ldk + kvh * D + c);
            float2 x = *pk, y = *pv;
            *pk = make_float2(x.x + scale * dka[n][2 * half], x.y + scale * dka[n][2 * half + 1]);
            *pv = make_float2(y.x + dva[n][2 * half], y.y + dva[n][2 * half + 1]);
        }
    }
}

/* ---- launchers ---- */
static int flash_check(const char *what, int H, int K, int D)
{
    if (cuda_flash_supports(D) && K > 0 && H % K == 0) return 0;
    char msg[128];
    snprintf(msg, sizeof msg, "%s: head_dim %d (a multiple of 4, at most 128), heads %d, kv heads %d",
             what, D, H, K);
    return cu_fail(msg, cudaSuccess, __FILE__, __LINE__);
}

template <int DP>
static int fwd_launch(float *out, float *lse, const float *q, const float *k, const float *v,
                      const int32_t *q_pos, int nq, int nk, int H, int K, int D)
{
    dim3 grid((unsigned)((nq + FL_ROWS - 1) / FL_ROWS), (unsigned)H);
    flash_fwd_k<DP><<<grid, FL_THREADS, 0, cu_stream()>>>(out, lse, q, k, v, q_pos, nq, nk, H, K,
                                                         D, FL_LOG2E / sqrtf((float)D));
    CU_LAUNCHED("flash_fwd");
    return 0;
}

template <int DP>
static int bwd_launch(float *dq, float *dk, float *dv, const float *dout, const float *q,
                      const float *k, const float *v, const float *lse, const float *delta,
                      const int32_t *q_pos, int nq, int nk, int H, int K, int D)
{
    static int attr_set; /* the dk/dv kernel's shared memory limit, raised once */
    size_t smem = dkv_smem<DP>();
    if (!attr_set) {
        CU_CHECK(cudaFuncSetAttribute(flash_dkv_k<DP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)smem));
        attr_set = 1;
    }
    float scale = 1.0f / sqrtf((float)D);
    dim3 gq((unsigned)((nq + FL_ROWS - 1) / FL_ROWS), (unsigned)H);
    flash_dq_k<DP><<<gq, FL_THREADS, 0, cu_stream()>>>(dq, dout, q, k, v, lse, delta, q_pos, nq,
                                                      nk, H, K, D, scale);
    CU_LAUNCHED("flash_bwd dq");
    dim3 gk((unsigned)((nk + FL_ROWS - 1) / FL_ROWS), (unsigned)K);
    flash_dkv_k<DP><<<gk, FL_THREADS, smem, cu_stream()>>>(dk, dv, dout, q, k, v, lse, delta,
                                                           q_pos, nq, nk, H, K, D, scale);
    CU_LAUNCHED("flash_bwd dk dv");
    return 0;
}

/* DP = D rounded up to 16: one instantiation per multiple of 16 up to 128. */
#define FL_BY_DP(D, fn, ...)                                                                 \
    switch (((D) + 15) / 16) {                                                               \
    case 1: return fn<16>(__VA_ARGS__);                                                      \
    case 2: return fn<32>(__VA_ARGS__);                                                      \
    case 3: return fn<48>(__VA_ARGS__);                                                      \
    case 4: return fn<64>(__VA_ARGS__);                                                      \
    case 5: return fn<80>(__VA_ARGS__);                                                      \
    case 6: return fn<96>(__VA_ARGS__);                                                      \
    case 7: return fn<112>(__VA_ARGS__);                                                     \
    default: return fn<128>(__VA_ARGS__);                                                    \
    }

extern "C" int cu_flash_fwd(float *out, float *lse, const float *q, const float *k,
                            const float *v, const int32_t *q_pos, int nq, int nk, int H, int K,
                            int D)
{
    if (nq <= 0) return 0;
    if (flash_check("flash_fwd", H, K, D)) return -1;
    FL_BY_DP(D, fwd_launch, out, lse, q, k, v, q_pos, nq, nk, H, K, D)
}

extern "C" int cu_flash_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                            const float *k, const float *v, const float *out, const float *lse,
                            const int32_t *q_pos, int nq, int nk, int H, int K, int D,
                            float *delta)
{
    if (nq <= 0 || nk <= 0) return 0;
    if (flash_check("flash_bwd", H, K, D)) return -1;
    long long rows = (long long)nq * H;
    flash_delta_k<<<(unsigned)((rows + FL_WARPS - 1) / FL_WARPS), FL_THREADS, 0, cu_stream()>>>(
        delta, dout, out, nq, H, D);
    CU_LAUNCHED("flash_bwd delta");
    FL_BY_DP(D, bwd_launch, dq, dk, dv, dout, q, k, v, lse, delta, q_pos, nq, nk, H, K, D)
}
