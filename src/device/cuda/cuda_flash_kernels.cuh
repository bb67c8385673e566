/*
 * Causal grouped-query attention of one sequence on the tensor cores, for the
 * training path (include/libra/cuda_api.h: flash_fwd, flash_bwd): the same function
 * as attn_fwd / attn_bwd (cuda_attention.cu, attn_forward / attn_backward of
 * src/model/cpu/ops.c), computed the FlashAttention-2 way.
 *
 * The float32 inputs are first rounded to bf16 copies in the module's scratch, each
 * head's row padded with zeros to DP = D rounded up to 16 (to_bf16_pad_k), so the tiles
 * move by cp.async, 16 bytes at a time, straight into shared memory, the next tile's
 * copy in flight while the current one is computed (two buffers).
 * Forward: a block takes FL_ROWS query rows of one head, a warp 16 of them; keys come
 * in tiles of FL_KEYS; S = Q K^T and O += P V are mma.sync m16n8k16 products (bf16
 * operands, float32 accumulation) whose accumulators never leave the registers; the
 * softmax is online (running max and sum per row, the accumulator rescaled), so no
 * score matrix exists at any length. It writes O and, for the backward, each row's
 * log-sum-exp.
 * Backward, by recomputation from that log-sum-exp, deterministic (no atomics):
 *   flash_delta_k  delta_i = dO_i . O_i, one warp per (row, head), float32;
 *   flash_dq_k     per 16 query rows: P = exp(scale Q K^T - lse), dP = dO V^T,
 *                  dS = P (dP - delta), dq = scale dS K, keys in tiles of FL_BKEYS;
 *   flash_dkv_k    per 16 keys of a kv head: the same P^T and dS^T over the query
 *                  rows of every head of the group, in tiles of FL_BROWS,
 *                  dv = P^T dO, dk = scale dS^T Q. Each block writes its rows (keys)
 *                  once, every one of them: the gradients are written, not added.
 * Prefill (prefill_attn): the forward's tiles for the rows of one sequence against its
 * keys in the decoder's paged bf16 KV pool, staged through the block table
 * (flash_paged_k; nothing allocated, so it can be recorded in a CUDA graph).
 * A launch takes a packed batch of sequences (struct fl_seqs: each its own rows and
 * keys, its key j at its first key row + j). Block b does tile rank b / n of sequence
 * b % n, where rank 0 is a sequence's tile with the most work -- the forward's and dq's
 * last rows, the dk/dv pass's first keys -- so the longest blocks of the whole batch
 * start first and the short ones fill in behind them; a block past its sequence's tiles
 * ends at once.
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
 * Head dimensions: D % 4 == 0 and D <= 128 (cuda_flash_supports).
 * The kernels only (device code in C++ with the primitives of cuda_mma.cuh), so
 * tests/test_cuda_flash_emu.cc can run them on CPU threads; cuda_flash.cu launches them.
 */
#ifndef LIBRA_CUDA_FLASH_KERNELS_CUH
#define LIBRA_CUDA_FLASH_KERNELS_CUH

#include "cuda_mma.cuh"

#ifndef FL_WARPS /* a build may try another (-DFL_WARPS=8); every kernel follows it */
#define FL_WARPS 4
#endif
#ifndef FL_LDSM /* 1: the fragments read from shared memory by ldmatrix (mma_keys,
                   dkv_scores); 0: as 32-bit words, four times the instructions */
#define FL_LDSM 1
#endif
#ifndef FL_FWD_MIN_BLOCKS /* forward blocks an SM the compiler must leave room for: a
                             build may try 3 (12 warps an SM at 168 registers, a few
                             spilled, where 2 blocks of 175 fit as built) */
#define FL_FWD_MIN_BLOCKS 1
#endif
#if FL_FWD_MIN_BLOCKS > 1
#define FL_FWD_BOUNDS __launch_bounds__(FL_THREADS, FL_FWD_MIN_BLOCKS)
#else /* not (FL_THREADS, 1): that lets ptxas take 219 registers where it takes 175 */
#define FL_FWD_BOUNDS __launch_bounds__(FL_THREADS)
#endif
#define FL_THREADS (32 * FL_WARPS)
#define FL_ROWS (16 * FL_WARPS) /* query rows of a forward / dq block */
#define FL_KEYS 64              /* keys per tile, forward */
#define FL_BKEYS 32             /* keys per tile, dq pass */
#define FL_BROWS 32             /* query rows per tile, dk/dv pass */
#define FL_LOG2E 1.4426950408889634f

__device__ static inline uint32_t pack2(float lo, float hi) { return bf16x2_rne(lo, hi); }

__device__ static inline uint32_t word(const uint16_t *p) { return *(const uint32_t *)p; }

/* A packed batch: sequence s is q rows q_start[s] .. q_start[s + 1] - 1 against k rows
 * k_start[s] .. k_start[s + 1] - 1 (n + 1 entries each, in device memory). */
struct fl_seqs {
    const int32_t *q_start, *k_start;
    int n;
};

/* Block b's sequence: its first q and k rows, its rows and keys, and the block's tile
 * rank (0: the sequence's tile with the most work). */
struct fl_seq {
    int q0, nq, k0, nk, rank;
};

__device__ static inline struct fl_seq fl_seq_of(struct fl_seqs sq, unsigned b)
{
    int s = (int)(b % (unsigned)sq.n);
    struct fl_seq x;
    x.q0 = sq.q_start[s];
    x.nq = sq.q_start[s + 1] - x.q0;
    x.k0 = sq.k_start[s];
    x.nk = sq.k_start[s + 1] - x.k0;
    x.rank = (int)(b / (unsigned)sq.n);
    return x;
}

/* Starts copying rows r0 .. r0 + N - 1 (zero past `rows`) of a bf16 matrix of row
 * stride ld whose DP columns start at x, into shared memory rows of DP + 8. N is a
 * constant, so the loop unrolls; when a row's 16-byte pieces divide the block's threads
 * (DP 128, 64, ...), a thread copies the same column of every STEP-th row and a copy is
 * a pointer step, a compare and the cp.async. */
template <int DP, int N>
__device__ static void stage(uint16_t *sm, const uint16_t *x, size_t ld, int r0, int rows)
{
    constexpr int PER_ROW = DP / 8, TOTAL = N * PER_ROW;
    if constexpr (FL_THREADS % PER_ROW == 0) {
        constexpr int STEP = FL_THREADS / PER_ROW;
        int r = (int)threadIdx.x / PER_ROW, c = ((int)threadIdx.x % PER_ROW) * 8;
        const uint16_t *src = x + (size_t)(r0 + r) * ld + c;
        uint16_t *dst = sm + r * (DP + 8) + c;
        if (r0 + N <= rows) { /* every row there (all but a sequence's last tile) */
#pragma unroll
            for (int i = 0; i < N; i += STEP) {
                if (N % STEP == 0 || r + i < N) cp16(dst + i * (DP + 8), src, 1);
                src += (size_t)STEP * ld;
            }
            return;
        }
#pragma unroll
        for (int i = 0; i < N; i += STEP) {
            if (N % STEP == 0 || r + i < N) {
                int ok = r0 + r + i < rows;
                cp16(dst + i * (DP + 8), ok ? src : x, ok);
            }
            src += (size_t)STEP * ld;
        }
    } else {
#pragma unroll
        for (int e0 = 0; e0 < TOTAL; e0 += FL_THREADS) {
            int e = e0 + (int)threadIdx.x;
            if (TOTAL % FL_THREADS == 0 || e < TOTAL) {
                int r = e / PER_ROW, c = (e % PER_ROW) * 8, ok = r0 + r < rows;
                cp16(sm + r * (DP + 8) + c, x + (size_t)(ok ? r0 + r : 0) * ld + c, ok);
            }
        }
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
    int row = k0 + (lane & 7) + ((lane >> 3) & 1) * 8, col = n0 + (lane >> 4) * 8;
    ldsm_x4_trans(b, tile + row * RS + col);
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

/* The A fragments of 16 rows (ra = row0 + g, rb = ra + 8) of a bf16 matrix of row
 * stride ld whose DP columns start at x (zero past `rows`). */
template <int DP>
__device__ static void load_a(uint32_t a[DP / 16][4], const uint16_t *x, size_t ld, int ra,
                              int rows)
{
    int t = threadIdx.x & 3;
#pragma unroll
    for (int kk = 0; kk < DP / 16; kk++)
#pragma unroll
        for (int half = 0; half < 2; half++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                int row = ra + 8 * r;
                a[kk][2 * half + r] =
                    row < rows ? word(x + (size_t)row * ld + 16 * kk + 2 * t + 8 * half) : 0u;
            }
}

/* c[n] = A B^T over the DP / 16 k-steps (a[kk]: A's fragments) for the NS n-tiles of a
 * tile of keys: n-tile n's 8 rows of B^T are the (key, d) bf16 rows 8n .. 8n + 7 of a
 * tile of row stride DP + 8 (Q K^T, dO V^T). The loop over k-steps is the outer one, so
 * consecutive products go to different accumulators (a chain of products into one
 * accumulator waits for each); each still sums its k-steps in order.
 * FL_LDSM: ldmatrix, two k-steps' fragments an instruction; else two 32-bit loads a
 * k-step. The same products in the same order either way (the same bits). */
template <int DP, int NS>
__device__ static inline void mma_keys(float (*c)[4], const uint32_t (*a)[4], const uint16_t *tile)
{
    constexpr int NK = DP / 16, RS = DP + 8;
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int n = 0; n < NS; n++) c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.0f;
#if FL_LDSM
    /* lanes 8m .. 8m + 7 address matrix m: rows 8n .., columns 8m from a k-step pair */
    const uint16_t *p = tile + (lane & 7) * RS + 8 * (lane >> 3);
#pragma unroll
    for (int kk = 0; kk + 1 < NK; kk += 2) {
        uint32_t hi[NS][2]; /* the second k-step's fragments, for the second sweep */
#pragma unroll
        for (int n = 0; n < NS; n++) {
            uint32_t b[4];
            ldsm_x4(b, p + 8 * n * RS + 16 * kk);
            mma16816(c[n], a[kk], b[0], b[1]);
            hi[n][0] = b[2];
            hi[n][1] = b[3];
        }
#pragma unroll
        for (int n = 0; n < NS; n++) mma16816(c[n], a[kk + 1], hi[n][0], hi[n][1]);
    }
    if (NK & 1)
#pragma unroll
        for (int n = 0; n < NS; n++) {
            uint32_t b[2];
            ldsm_x2(b, p + 8 * n * RS + 16 * (NK - 1));
            mma16816(c[n], a[NK - 1], b[0], b[1]);
        }
#else
    const uint16_t *r = tile + (lane >> 2) * RS + 2 * (lane & 3);
#pragma unroll
    for (int kk = 0; kk < NK; kk++)
#pragma unroll
        for (int n = 0; n < NS; n++)
            mma16816(c[n], a[kk], word(r + 8 * n * RS + 16 * kk),
                     word(r + 8 * n * RS + 16 * kk + 8));
#endif
}

/* The highest q_pos of rows r0 .. r0 + n - 1 (below nq), for the whole block: warp 0's
 * lanes read n / 32 of them each and take the maximum by shuffles. */
__device__ static int block_max_pos(const int32_t *q_pos, int r0, int n, int nq)
{
    __shared__ int s_max;
    if (threadIdx.x < 32) {
        int m = 0;
        for (int r = r0 + (int)threadIdx.x; r < r0 + n && r < nq; r += 32)
            m = q_pos[r] > m ? q_pos[r] : m;
        for (int off = 16; off > 0; off /= 2) {
            int o = __shfl_xor_sync(0xffffffffu, m, off);
            m = o > m ? o : m;
        }
        if (threadIdx.x == 0) s_max = m;
    }
    __syncthreads();
    int m = s_max;
    __syncthreads();
    return m;
}

/* Double-buffered tiles of KEYS keys: kv_first starts tile 0's copy into buffer 0;
 * kv_ready, at iteration `it`, starts tile it + 1's copy into the other buffer (when
 * there is one), waits for tile it and syncs the block. The caller syncs again after
 * computing, before the next kv_ready refills that buffer. kv(kdst, vdst, j0) starts
 * the copies of keys j0 .. j0 + KEYS - 1 of K and of V: dense_kv from a packed batch's
 * rows, paged_kv (below) from the decoder's pool. */
template <int DP, int KEYS>
struct dense_kv {
    const uint16_t *kh, *vh; /* the kv head's first column */
    size_t ldk;
    int nk;
    __device__ void operator()(uint16_t *kd, uint16_t *vd, int j0) const
    {
        stage<DP, KEYS>(kd, kh, ldk, j0, nk);
        stage<DP, KEYS>(vd, vh, ldk, j0, nk);
    }
};

template <int DP, int KEYS, class KV>
__device__ static void kv_first(uint16_t *kbuf, uint16_t *vbuf, const KV &kv)
{
    kv(kbuf, vbuf, 0);
    cp_commit();
}

template <int DP, int KEYS, class KV>
__device__ static void kv_ready(uint16_t *kbuf, uint16_t *vbuf, const KV &kv, int it, int tiles)
{
    if (it + 1 < tiles) {
        size_t nb = (size_t)((it + 1) & 1) * KEYS * (DP + 8);
        kv(kbuf + nb, vbuf + nb, (it + 1) * KEYS);
        cp_commit();
        cp_wait<1>();
    } else {
        cp_wait<0>();
    }
    __syncthreads();
}

/* ---- forward ---- */
/* A thread's online-softmax state for its two rows (ra, rb): running maxima (log2
 * units) and its part of the running sums. */
struct row_state {
    float ma, mb, la, lb;
};

/* One tile of FL_KEYS keys (from j0) for the warp's 16 rows: S = Q K^T from the staged
 * K rows, masked by the rows' positions (pa, pb) when MASK (a tile some key of which
 * lies past some row's position; the others need none), the online softmax, O += P V.
 * The maxima are taken of the raw scores (scale2 > 0 keeps their order) and kept
 * scaled, so that each probability is one fused multiply-add and one exp2. */
template <int DP, bool MASK>
__device__ static inline void fwd_tile(float (*o)[4], const uint32_t (*qa)[4], const uint16_t *ks,
                                       const uint16_t *vs, int j0, int pa, int pb, float scale2,
                                       struct row_state &st)
{
    constexpr int NO = DP / 8, NS = FL_KEYS / 8, RS = DP + 8;
    int t = threadIdx.x & 3;
    float s[NS][4];
    mma_keys<DP, NS>(s, qa, ks);
    float ta = -INFINITY, tb = -INFINITY;
#pragma unroll
    for (int n = 0; n < NS; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (MASK && j0 + 8 * n + 2 * t + (i & 1) > (i < 2 ? pa : pb)) s[n][i] = -INFINITY;
            if (i < 2) ta = fmaxf(ta, s[n][i]);
            else tb = fmaxf(tb, s[n][i]);
        }
    for (int off = 1; off < 4; off *= 2) {
        ta = fmaxf(ta, __shfl_xor_sync(0xffffffffu, ta, off));
        tb = fmaxf(tb, __shfl_xor_sync(0xffffffffu, tb, off));
    }
    /* key 0 <= pos for every row, and tile 0 comes first: the maxima are finite */
    float na = fmaxf(st.ma, ta * scale2), nb = fmaxf(st.mb, tb * scale2);
    /* the accumulator rescaled only if some row's maximum rose (else by 2^0 = 1): the
     * same bits, and 66 multiplications fewer on every tile past a warp's maxima */
    if (__any_sync(0xffffffffu, na != st.ma || nb != st.mb)) {
        float ka = exp2_ftz(st.ma - na), kb = exp2_ftz(st.mb - nb);
        st.la *= ka;
        st.lb *= kb;
#pragma unroll
        for (int n = 0; n < NO; n++) {
            o[n][0] *= ka;
            o[n][1] *= ka;
            o[n][2] *= kb;
            o[n][3] *= kb;
        }
    }
    st.ma = na;
    st.mb = nb;
#pragma unroll
    for (int n = 0; n < NS; n++) {
        s[n][0] = exp2_ftz(fmaf(s[n][0], scale2, -na));
        s[n][1] = exp2_ftz(fmaf(s[n][1], scale2, -na));
        s[n][2] = exp2_ftz(fmaf(s[n][2], scale2, -nb));
        s[n][3] = exp2_ftz(fmaf(s[n][3], scale2, -nb));
        st.la += s[n][0] + s[n][1];
        st.lb += s[n][2] + s[n][3];
    }
#pragma unroll
    for (int kk = 0; kk < FL_KEYS / 16; kk++) {
        uint32_t pa4[4];
        acc_to_a(pa4, s, kk);
        mma_rows<NO, RS>(o, pa4, vs, 16 * kk);
    }
}

/* The lowest position of the warp's rows (each thread's pa, pb): a tile of keys j0 ..
 * j0 + n - 1 needs no mask when j0 + n - 1 <= it. */
__device__ static inline int warp_min_pos(int pa, int pb)
{
    int m = pa < pb ? pa : pb;
    for (int off = 1; off < 32; off *= 2) {
        int o = __shfl_xor_sync(0xffffffffu, m, off);
        m = o < m ? o : m;
    }
    return m;
}

/* fwd_tile with the mask only where some key of the tile passes some row's position */
template <int DP>
__device__ static inline void fwd_tile_at(float (*o)[4], const uint32_t (*qa)[4],
                                          const uint16_t *ks, const uint16_t *vs, int j0, int pa,
                                          int pb, int pmin, float scale2, struct row_state &st)
{
    if (j0 + FL_KEYS - 1 <= pmin)
        fwd_tile<DP, false>(o, qa, ks, vs, j0, pa, pb, scale2, st);
    else
        fwd_tile<DP, true>(o, qa, ks, vs, j0, pa, pb, scale2, st);
}

/* O / l of the thread's rows into out (nq, H*D) float32, and their log-sum-exps. */
template <int DP>
__device__ static inline void fwd_store(float *out, float *lse, float (*o)[4], struct row_state st,
                                        int ra, int rb, int nq, int h, int H, int D)
{
    constexpr int NO = DP / 8;
    int t = threadIdx.x & 3;
    for (int off = 1; off < 4; off *= 2) {
        st.la += __shfl_xor_sync(0xffffffffu, st.la, off);
        st.lb += __shfl_xor_sync(0xffffffffu, st.lb, off);
    }
    size_t ldo = (size_t)H * D;
#pragma unroll
    for (int n = 0; n < NO; n++) {
        int c = 8 * n + 2 * t;
        if (c >= D) continue;
        if (ra < nq)
            *(float2 *)(out + (size_t)ra * ldo + h * D + c) =
                make_float2(o[n][0] / st.la, o[n][1] / st.la);
        if (rb < nq)
            *(float2 *)(out + (size_t)rb * ldo + h * D + c) =
                make_float2(o[n][2] / st.lb, o[n][3] / st.lb);
    }
    if (lse && t == 0) { /* natural log: lse = ln(2^m l) */
        if (ra < nq) lse[(size_t)ra * H + h] = st.ma / FL_LOG2E + logf(st.la);
        if (rb < nq) lse[(size_t)rb * H + h] = st.mb / FL_LOG2E + logf(st.lb);
    }
}

template <int DP>
static size_t fwd_smem(void)
{
    return sizeof(uint16_t) * 4 * FL_KEYS * (DP + 8); /* K and V, two buffers */
}

template <int DP>
__global__ static void FL_FWD_BOUNDS
    flash_fwd_k(float *out, float *lse, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                const int32_t *q_pos, struct fl_seqs sq, int H, int K, int D, float scale2)
{
    constexpr int NK = DP / 16, NO = DP / 8, RS = DP + 8;
    struct fl_seq x = fl_seq_of(sq, blockIdx.x);
    int nq = x.nq, nk = x.nk, row_tiles = (nq + FL_ROWS - 1) / FL_ROWS;
    if (x.rank >= row_tiles) return;
    out += (size_t)x.q0 * H * D;
    if (lse) lse += (size_t)x.q0 * H;
    q += (size_t)x.q0 * H * DP;
    q_pos += x.q0;
    k += (size_t)x.k0 * K * DP;
    v += (size_t)x.k0 * K * DP;
    MMA_DYN_SMEM(fl_smem);
    uint16_t *kbuf = (uint16_t *)fl_smem, *vbuf = kbuf + 2 * FL_KEYS * RS;
    int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
    int h = blockIdx.y, kvh = h / (H / K);
    int r0 = (row_tiles - 1 - x.rank) * FL_ROWS, ra = r0 + 16 * warp + g, rb = ra + 8;
    /* rows past nq attend key 0 only (finite, never stored) */
    int pa = ra < nq ? q_pos[ra] : 0, pb = rb < nq ? q_pos[rb] : 0;
    int pmin = warp_min_pos(pa, pb);
    int last = block_max_pos(q_pos, r0, FL_ROWS, nq), tiles = last / FL_KEYS + 1;
    size_t ldq = (size_t)H * DP, ldk = (size_t)K * DP;
    const uint16_t *kh = k + (size_t)kvh * DP, *vh = v + (size_t)kvh * DP;
    const dense_kv<DP, FL_KEYS> kv = {kh, vh, ldk, nk};
    kv_first<DP, FL_KEYS>(kbuf, vbuf, kv);
    uint32_t qa[NK][4];
    load_a<DP>(qa, q + (size_t)h * DP, ldq, ra, nq);
    float o[NO][4];
#pragma unroll
    for (int n = 0; n < NO; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    struct row_state st = {-INFINITY, -INFINITY, 0.0f, 0.0f};

    for (int it = 0; it < tiles; it++) {
        kv_ready<DP, FL_KEYS>(kbuf, vbuf, kv, it, tiles);
        fwd_tile_at<DP>(o, qa, kbuf + (it & 1) * FL_KEYS * RS, vbuf + (it & 1) * FL_KEYS * RS,
                        it * FL_KEYS, pa, pb, pmin, scale2, st);
        __syncthreads(); /* this buffer is refilled by the next iteration */
    }
    fwd_store<DP>(out, lse, o, st, ra, rb, nq, h, H, D);
}

/* ---- prefill over a paged KV cache ---- */
/* Starts copying keys j0 .. j0 + FL_KEYS - 1 (zero past last) of kv head kvh from a
 * bf16 pool of blocks of P tokens -- key j at pool row table[j / P] P + j % P, (row K +
 * kvh) D -- into bf16 rows of DP + 8, four values (8 bytes; D is a multiple of 4) a
 * cp.async. When a row's pieces divide the block's threads (DP 128, 64, 32, 16), a
 * thread copies the same column of every STEP-th key and steps through the block table
 * (one division a tile, not one a copy). */
template <int DP>
__device__ static void stage_paged(uint16_t *sm, const uint16_t *pool, const int32_t *table,
                                   int kvh, int K, int D, int P, int j0, int last)
{
    constexpr int PER_ROW = DP / 4;
    if constexpr (FL_THREADS % PER_ROW == 0) {
        constexpr int STEP = FL_THREADS / PER_ROW;
        int r = (int)threadIdx.x / PER_ROW, c = ((int)threadIdx.x % PER_ROW) * 4;
        int j = j0 + r, blk = j / P, in = j % P; /* key j is entry `in` of block blk */
#pragma unroll
        for (int i = 0; i < FL_KEYS; i += STEP) {
            int ok = j + i <= last && c < D;
            const uint16_t *src = pool;
            if (ok) src += (((size_t)table[blk] * P + (size_t)in) * K + kvh) * D + c;
            cp8(sm + (r + i) * (DP + 8) + c, src, ok);
            for (in += STEP; in >= P; in -= P) blk++;
        }
    } else {
        for (int e = threadIdx.x; e < FL_KEYS * PER_ROW; e += FL_THREADS) {
            int r = e / PER_ROW, c = (e % PER_ROW) * 4, j = j0 + r, ok = j <= last && c < D;
            const uint16_t *src = pool;
            if (ok) src += (((size_t)table[j / P] * P + (size_t)(j % P)) * K + kvh) * D + c;
            cp8(sm + r * (DP + 8) + c, src, ok);
        }
    }
}

/* kv_first / kv_ready's copies from a paged pool (stage_paged) for keys up to last. */
template <int DP>
struct paged_kv {
    const uint16_t *k_pool, *v_pool;
    const int32_t *table;
    int kvh, K, D, P, last;
    __device__ void operator()(uint16_t *kd, uint16_t *vd, int j0) const
    {
        stage_paged<DP>(kd, k_pool, table, kvh, K, D, P, j0, last);
        stage_paged<DP>(vd, v_pool, table, kvh, K, D, P, j0, last);
    }
};

/* The A fragments of 16 rows (ra, rb = ra + 8) of a float32 matrix of row stride ld
 * whose D columns start at x (zero past D and past `rows`), rounded to bf16. */
template <int DP>
__device__ static void load_a_f32(uint32_t a[DP / 16][4], const float *x, size_t ld, int ra,
                                  int rows, int D)
{
    int t = threadIdx.x & 3;
#pragma unroll
    for (int kk = 0; kk < DP / 16; kk++)
#pragma unroll
        for (int half = 0; half < 2; half++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                int row = ra + 8 * r, c = 16 * kk + 2 * t + 8 * half;
                float2 f = make_float2(0.0f, 0.0f);
                if (row < rows && c < D) f = *(const float2 *)(x + (size_t)row * ld + c);
                a[kk][2 * half + r] = pack2(f.x, f.y);
            }
}

/* The rows of one sequence (a prefill chunk) against that sequence's keys 0 .. q_pos[i]
 * in the pool: flash_fwd_k's tiles, staged from the bf16 pool through the block table
 * by cp.async, the next tile's copy in flight while a tile is computed (two buffers).
 * Two blocks an SM asked for: left to itself ptxas holds the kernel to 168 registers
 * and spills. */
template <int DP>
static size_t paged_smem(void)
{
    return sizeof(uint16_t) * 4 * FL_KEYS * (DP + 8); /* K and V, two buffers */
}

template <int DP>
__global__ static void __launch_bounds__(FL_THREADS, 2)
    flash_paged_k(float *out, const float *q, const uint16_t *k_pool, const uint16_t *v_pool,
                  const int32_t *table, const int32_t *q_pos, int nq, int H, int K, int D, int P,
                  float scale2)
{
    constexpr int NK = DP / 16, NO = DP / 8, RS = DP + 8;
    MMA_DYN_SMEM(fl_smem);
    uint16_t *kbuf = (uint16_t *)fl_smem, *vbuf = kbuf + 2 * FL_KEYS * RS;
    int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
    int h = blockIdx.y, kvh = h / (H / K);
    int r0 = (gridDim.x - 1 - blockIdx.x) * FL_ROWS, ra = r0 + 16 * warp + g, rb = ra + 8;
    int pa = ra < nq ? q_pos[ra] : 0, pb = rb < nq ? q_pos[rb] : 0;
    int pmin = warp_min_pos(pa, pb);
    int last = block_max_pos(q_pos, r0, FL_ROWS, nq), tiles = last / FL_KEYS + 1;
    const paged_kv<DP> kv = {k_pool, v_pool, table, kvh, K, D, P, last};
    kv_first<DP, FL_KEYS>(kbuf, vbuf, kv);
    uint32_t qa[NK][4];
    load_a_f32<DP>(qa, q + (size_t)h * D, (size_t)H * D, ra, nq, D);
    float o[NO][4];
#pragma unroll
    for (int n = 0; n < NO; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    struct row_state st = {-INFINITY, -INFINITY, 0.0f, 0.0f};
    for (int it = 0; it < tiles; it++) {
        kv_ready<DP, FL_KEYS>(kbuf, vbuf, kv, it, tiles);
        fwd_tile_at<DP>(o, qa, kbuf + (it & 1) * FL_KEYS * RS, vbuf + (it & 1) * FL_KEYS * RS,
                        it * FL_KEYS, pa, pb, pmin, scale2, st);
        __syncthreads(); /* this buffer is refilled by the next iteration */
    }
    fwd_store<DP>(out, NULL, o, st, ra, rb, nq, h, H, D);
}

/* ---- backward ---- */
/* The backward passes' inputs moved to the block's sequence: its rows of dO and Q (bf16,
 * DP columns), lse, delta and positions, its keys of K and V. */
template <int DP>
__device__ static inline void seq_inputs(const struct fl_seq &x, int H, int K,
                                         const uint16_t *&dout, const uint16_t *&q,
                                         const float *&lse, const float *&delta,
                                         const int32_t *&q_pos, const uint16_t *&k,
                                         const uint16_t *&v)
{
    dout += (size_t)x.q0 * H * DP;
    q += (size_t)x.q0 * H * DP;
    lse += (size_t)x.q0 * H;
    delta += (size_t)x.q0 * H;
    q_pos += x.q0;
    k += (size_t)x.k0 * K * DP;
    v += (size_t)x.k0 * K * DP;
}

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
static size_t dq_smem(void)
{
    return sizeof(uint16_t) * 4 * FL_BKEYS * (DP + 8); /* K and V, two buffers */
}

/* The dq pass's rows (each thread's two): positions (-1 past the sequence), lse in log2
 * units, delta. */
struct dq_rows {
    int pa, pb;
    float lsa, lsb, dla, dlb;
};

/* One tile of FL_BKEYS keys (from j0) for the warp's 16 rows: P = exp2(scale2 Q K^T -
 * lse) (masked by the rows' positions when MASK), dP = dO V^T, dS = P (dP - delta),
 * acc += dS K. */
template <int DP, bool MASK>
__device__ static inline void dq_tile(float (*acc)[4], const uint32_t (*qa)[4],
                                      const uint32_t (*da)[4], const uint16_t *ks,
                                      const uint16_t *vs, int j0, const struct dq_rows &rw,
                                      float scale2)
{
    constexpr int NO = DP / 8, NS = FL_BKEYS / 8, RS = DP + 8;
    int t = threadIdx.x & 3;
    float s[NS][4], dp[NS][4];
    mma_keys<DP, NS>(s, qa, ks);
    mma_keys<DP, NS>(dp, da, vs);
#pragma unroll
    for (int n = 0; n < NS; n++) {
#pragma unroll
        for (int i = 0; i < 4; i++) { /* s becomes dS */
            float p = exp2_ftz(fmaf(s[n][i], scale2, -(i < 2 ? rw.lsa : rw.lsb)));
            if (MASK && j0 + 8 * n + 2 * t + (i & 1) > (i < 2 ? rw.pa : rw.pb)) p = 0.0f;
            s[n][i] = p * (dp[n][i] - (i < 2 ? rw.dla : rw.dlb));
        }
    }
#pragma unroll
    for (int kk = 0; kk < FL_BKEYS / 16; kk++) {
        uint32_t a4[4];
        acc_to_a(a4, s, kk);
        mma_rows<NO, RS>(acc, a4, ks, 16 * kk);
    }
}

template <int DP>
__global__ static void __launch_bounds__(FL_THREADS)
    flash_dq_k(float *dq, const uint16_t *dout, const uint16_t *q, const uint16_t *k,
               const uint16_t *v, const float *lse, const float *delta, const int32_t *q_pos,
               struct fl_seqs sq, int H, int K, int D, float scale)
{
    constexpr int NK = DP / 16, NO = DP / 8, RS = DP + 8;
    struct fl_seq x = fl_seq_of(sq, blockIdx.x);
    int nq = x.nq, nk = x.nk, row_tiles = (nq + FL_ROWS - 1) / FL_ROWS;
    if (x.rank >= row_tiles) return;
    dq += (size_t)x.q0 * H * D;
    seq_inputs<DP>(x, H, K, dout, q, lse, delta, q_pos, k, v);
    MMA_DYN_SMEM(fl_smem);
    uint16_t *kbuf = (uint16_t *)fl_smem, *vbuf = kbuf + 2 * FL_BKEYS * RS;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int h = blockIdx.y, kvh = h / (H / K);
    int r0 = (row_tiles - 1 - x.rank) * FL_ROWS, ra = r0 + 16 * warp + g, rb = ra + 8;
    struct dq_rows rw;
    rw.pa = ra < nq ? q_pos[ra] : -1; /* -1: no key */
    rw.pb = rb < nq ? q_pos[rb] : -1;
    rw.lsa = ra < nq ? lse[(size_t)ra * H + h] * FL_LOG2E : 0.0f;
    rw.lsb = rb < nq ? lse[(size_t)rb * H + h] * FL_LOG2E : 0.0f;
    rw.dla = ra < nq ? delta[(size_t)ra * H + h] : 0.0f;
    rw.dlb = rb < nq ? delta[(size_t)rb * H + h] : 0.0f;
    int pmin = warp_min_pos(rw.pa, rw.pb);
    float scale2 = scale * FL_LOG2E;
    int last = block_max_pos(q_pos, r0, FL_ROWS, nq), tiles = last / FL_BKEYS + 1;
    size_t ldq = (size_t)H * DP, ldk = (size_t)K * DP;
    const uint16_t *kh = k + (size_t)kvh * DP, *vh = v + (size_t)kvh * DP;
    const dense_kv<DP, FL_BKEYS> kv = {kh, vh, ldk, nk};
    kv_first<DP, FL_BKEYS>(kbuf, vbuf, kv);
    uint32_t qa[NK][4], da[NK][4];
    load_a<DP>(qa, q + (size_t)h * DP, ldq, ra, nq);
    load_a<DP>(da, dout + (size_t)h * DP, ldq, ra, nq);
    float acc[NO][4];
#pragma unroll
    for (int n = 0; n < NO; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

    for (int it = 0; it < tiles; it++) {
        int j0 = it * FL_BKEYS;
        kv_ready<DP, FL_BKEYS>(kbuf, vbuf, kv, it, tiles);
        const uint16_t *ks = kbuf + (it & 1) * FL_BKEYS * RS, *vs = vbuf + (it & 1) * FL_BKEYS * RS;
        if (j0 + FL_BKEYS - 1 <= pmin)
            dq_tile<DP, false>(acc, qa, da, ks, vs, j0, rw, scale2);
        else
            dq_tile<DP, true>(acc, qa, da, ks, vs, j0, rw, scale2);
        __syncthreads(); /* this buffer is refilled by the next iteration */
    }
    size_t ldo = (size_t)H * D;
#pragma unroll
    for (int n = 0; n < NO; n++) {
        int c = 8 * n + 2 * t;
        if (c >= D) continue;
        if (ra < nq)
            *(float2 *)(dq + (size_t)ra * ldo + h * D + c) =
                make_float2(scale * acc[n][0], scale * acc[n][1]);
        if (rb < nq)
            *(float2 *)(dq + (size_t)rb * ldo + h * D + c) =
                make_float2(scale * acc[n][2], scale * acc[n][3]);
    }
}

/* dk/dv: shared memory (dynamic): K and V of the block's FL_ROWS keys, then two
 * buffers of a query tile's Q and dO, all as (row, d) bf16 rows, and per buffer the
 * tile's positions, lse (log2 units) and delta, and the lowest of its positions. */
template <int DP>
static size_t dkv_smem(void)
{
    return sizeof(uint16_t) * (2 * FL_ROWS * (DP + 8) + 4 * FL_BROWS * (DP + 8)) +
           2 * FL_BROWS * (sizeof(int) + 2 * sizeof(float)) + 2 * sizeof(int);
}

/* The first query row at or after which some row attends key j0 (nq if none): the
 * dk/dv block starts its query tiles there (rows before it see none of its keys). */
__device__ static int first_row_seeing(const int32_t *q_pos, int nq, int j0)
{
    __shared__ int s_first;
    if (threadIdx.x == 0) s_first = nq;
    __syncthreads();
    for (int i = threadIdx.x; i < nq; i += FL_THREADS)
        if (q_pos[i] >= j0) {
            atomicMin(&s_first, i);
            break;
        }
    __syncthreads();
    int f = s_first;
    __syncthreads();
    return f;
}

/* The dk/dv pass's scores of a query tile for the warp's 16 keys: s = K Q^T and dp =
 * V dO^T (n-tile n: the tile's rows 8n .. 8n + 7), each summed over the k-steps in
 * order. The keys' A fragments are the same for every n-tile, so both forms load them
 * once a k-step: FL_LDSM by ldmatrix (and the rows' B fragments too), else as 32-bit
 * words. The same products in the same order either way. */
template <int DP>
__device__ static inline void dkv_scores(float (*s)[4], float (*dp)[4], const uint16_t *ks,
                                         const uint16_t *vs, const uint16_t *qs,
                                         const uint16_t *dos)
{
    constexpr int NK = DP / 16, NS = FL_BROWS / 8, RS = DP + 8;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int n = 0; n < NS; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
#if FL_LDSM
    /* A: lanes 0-7 rows 0-7, 8-15 rows 8-15 (k 0-7), 16-31 the same rows at k 8-15;
     * B: lanes 0-7 the n-tile's rows at k 0-7, 8-15 at k 8-15 */
    int ar = 16 * warp + (lane & 7) + ((lane >> 3) & 1) * 8, ac = (lane >> 4) * 8;
    const uint16_t *ka = ks + ar * RS + ac, *va = vs + ar * RS + ac;
    int br = lane & 7, bc = ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int kk = 0; kk < NK; kk++) {
        uint32_t kfr[4], vfr[4];
        ldsm_x4(kfr, ka + 16 * kk);
        ldsm_x4(vfr, va + 16 * kk);
#pragma unroll
        for (int n = 0; n < NS; n++) {
            uint32_t qb[2], db[2];
            ldsm_x2(qb, qs + (8 * n + br) * RS + 16 * kk + bc);
            ldsm_x2(db, dos + (8 * n + br) * RS + 16 * kk + bc);
            mma16816(s[n], kfr, qb[0], qb[1]);
            mma16816(dp[n], vfr, db[0], db[1]);
        }
    }
#else
    /* a k-step's key and value fragments loaded once for all the n-tiles (the compiler
     * does not merge the loads across the mma asm) */
    int g = lane >> 2, t = lane & 3;
    const uint16_t *kw = ks + (16 * warp + g) * RS + 2 * t, *vw = vs + (16 * warp + g) * RS + 2 * t;
#pragma unroll
    for (int kk = 0; kk < NK; kk++) {
        uint32_t kfr[4] = {word(kw + 16 * kk), word(kw + 8 * RS + 16 * kk),
                           word(kw + 16 * kk + 8), word(kw + 8 * RS + 16 * kk + 8)};
        uint32_t vfr[4] = {word(vw + 16 * kk), word(vw + 8 * RS + 16 * kk),
                           word(vw + 16 * kk + 8), word(vw + 8 * RS + 16 * kk + 8)};
#pragma unroll
        for (int n = 0; n < NS; n++) {
            const uint16_t *qr = qs + (8 * n + g) * RS + 2 * t + 16 * kk;
            const uint16_t *dr = dos + (8 * n + g) * RS + 2 * t + 16 * kk;
            mma16816(s[n], kfr, word(qr), word(qr + 8));
            mma16816(dp[n], vfr, word(dr), word(dr + 8));
        }
    }
#endif
}

/* One query tile for the warp's 16 keys (ka, kb: this thread's): P^T = exp2(scale2 K Q^T
 * - lse) (masked by the rows' positions s_pos when MASK), dS^T = P^T (V dO^T - delta),
 * dva += P^T dO, dka += dS^T Q. */
template <int DP, bool MASK>
__device__ static inline void dkv_tile(float (*dka)[4], float (*dva)[4], const uint16_t *ks,
                                       const uint16_t *vs, const uint16_t *qs,
                                       const uint16_t *dos, const int *s_pos, const float *s_lse,
                                       const float *s_dl, int ka, int kb, float scale2)
{
    constexpr int NO = DP / 8, NS = FL_BROWS / 8, RS = DP + 8;
    int t = threadIdx.x & 3;
    float s[NS][4], dp[NS][4]; /* (keys ka/kb, rows 8n + 2t ..) */
    dkv_scores<DP>(s, dp, ks, vs, qs, dos);
#pragma unroll
    for (int n = 0; n < NS; n++) {
#pragma unroll
        for (int e = 0; e < 4; e++) { /* s becomes P^T, dp becomes dS^T */
            int row = 8 * n + 2 * t + (e & 1);
            float p = exp2_ftz(fmaf(s[n][e], scale2, -s_lse[row]));
            if (MASK && (e < 2 ? ka : kb) > s_pos[row]) p = 0.0f;
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

template <int DP>
__global__ static void __launch_bounds__(FL_THREADS)
    flash_dkv_k(float *dk, float *dv, const uint16_t *dout, const uint16_t *q, const uint16_t *k,
                const uint16_t *v, const float *lse, const float *delta, const int32_t *q_pos,
                struct fl_seqs sq, int H, int K, int D, float scale)
{
    constexpr int NO = DP / 8, RS = DP + 8;
    static_assert(FL_BROWS == 32, "a query tile's rows are staged by warp 0's lanes");
    struct fl_seq x = fl_seq_of(sq, blockIdx.x);
    int nq = x.nq, nk = x.nk, j0 = x.rank * FL_ROWS; /* the block's first key */
    if (j0 >= nk) return;
    dk += (size_t)x.k0 * K * D;
    dv += (size_t)x.k0 * K * D;
    seq_inputs<DP>(x, H, K, dout, q, lse, delta, q_pos, k, v);
    MMA_DYN_SMEM(fl_smem);
    uint16_t *ks = (uint16_t *)fl_smem, *vs = ks + FL_ROWS * RS;
    uint16_t *qbuf = vs + FL_ROWS * RS, *dbuf = qbuf + 2 * FL_BROWS * RS;
    int *pbuf = (int *)(dbuf + 2 * FL_BROWS * RS);
    float *lbuf = (float *)(pbuf + 2 * FL_BROWS), *dlbuf = lbuf + 2 * FL_BROWS;
    int *pmbuf = (int *)(dlbuf + 2 * FL_BROWS);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int kvh = blockIdx.y, rep = H / K;
    int ka = j0 + 16 * warp + g, kb = ka + 8; /* this thread's keys */
    float scale2 = scale * FL_LOG2E;
    size_t ldq = (size_t)H * DP, ldk = (size_t)K * DP;
    /* query tiles: for each head of the group, rows i_lo, i_lo + FL_BROWS, .. < nq */
    int i_lo = first_row_seeing(q_pos, nq, j0) / FL_BROWS * FL_BROWS;
    int per_head = (nq - i_lo + FL_BROWS - 1) / FL_BROWS, tiles = rep * per_head;
    stage<DP, FL_ROWS>(ks, k + (size_t)kvh * DP, ldk, j0, nk);
    stage<DP, FL_ROWS>(vs, v + (size_t)kvh * DP, ldk, j0, nk);
    cp_commit(); /* done before tile 0 is computed (at most tile 1 still in flight) */
    float dka[NO][4], dva[NO][4];
#pragma unroll
    for (int n = 0; n < NO; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) dka[n][i] = dva[n][i] = 0.0f;

    for (int it = 0; it <= tiles; it++) {
        /* iteration it starts the copy of tile it and computes tile it - 1 */
        if (it < tiles) {
            int b = it & 1, h = kvh * rep + it / per_head, i0 = i_lo + (it % per_head) * FL_BROWS;
            stage<DP, FL_BROWS>(qbuf + b * FL_BROWS * RS, q + (size_t)h * DP, ldq, i0, nq);
            stage<DP, FL_BROWS>(dbuf + b * FL_BROWS * RS, dout + (size_t)h * DP, ldq, i0, nq);
            cp_commit();
            if (threadIdx.x < FL_BROWS) { /* warp 0, every lane */
                int i = i0 + (int)threadIdx.x, in = i < nq, pos = in ? q_pos[i] : -1;
                pbuf[b * FL_BROWS + threadIdx.x] = pos; /* -1: no key */
                lbuf[b * FL_BROWS + threadIdx.x] = in ? lse[(size_t)i * H + h] * FL_LOG2E : 0.0f;
                dlbuf[b * FL_BROWS + threadIdx.x] = in ? delta[(size_t)i * H + h] : 0.0f;
                pos = warp_min_pos(pos, pos);
                if (threadIdx.x == 0) pmbuf[b] = pos;
            }
        }
        if (it == 0) continue;
        if (it < tiles) cp_wait<1>();
        else cp_wait<0>();
        __syncthreads();
        int b = (it - 1) & 1;
        const uint16_t *qs = qbuf + b * FL_BROWS * RS, *dos = dbuf + b * FL_BROWS * RS;
        const int *s_pos = pbuf + b * FL_BROWS;
        const float *s_lse = lbuf + b * FL_BROWS, *s_dl = dlbuf + b * FL_BROWS;
        if (j0 + 16 * warp + 15 <= pmbuf[b])
            dkv_tile<DP, false>(dka, dva, ks, vs, qs, dos, s_pos, s_lse, s_dl, ka, kb, scale2);
        else
            dkv_tile<DP, true>(dka, dva, ks, vs, qs, dos, s_pos, s_lse, s_dl, ka, kb, scale2);
        __syncthreads(); /* this buffer is refilled by the next iteration */
    }
    cp_wait<0>(); /* no tile at all: K and V still land before the block ends */
    size_t ldo = (size_t)K * D;
#pragma unroll
    for (int n = 0; n < NO; n++) {
        int c = 8 * n + 2 * t;
        if (c >= D) continue;
        for (int half = 0; half < 2; half++) {
            int key = half ? kb : ka;
            if (key >= nk) continue;
            *(float2 *)(dk + (size_t)key * ldo + kvh * D + c) =
                make_float2(scale * dka[n][2 * half], scale * dka[n][2 * half + 1]);
            *(float2 *)(dv + (size_t)key * ldo + kvh * D + c) =
                make_float2(dva[n][2 * half], dva[n][2 * half + 1]);
        }
    }
}

/* ---- the bf16 copies ---- */
/* dst (rows, DP) = src (rows, D) rounded to bf16, zero past D. */
__global__ static void to_bf16_pad_k(uint16_t *dst, const float *src, long long rows, int D,
                                     int DP)
{
    long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= rows * DP) return;
    long long r = e / DP;
    int d = (int)(e % DP);
    dst[e] = d < D ? f32_to_bf16_rne(src[r * D + d]) : (uint16_t)0;
}

#endif
