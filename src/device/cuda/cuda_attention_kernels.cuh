/*
 * Causal grouped-query attention of one sequence for prefill and training
 * (include/libra/cuda_api.h): the GPU form of attn_forward (src/model/cpu/ops.c).
 * One warp per (query row, head): the lanes split the head dimension, each key's
 * score is a warp-shuffle sum, and the softmax is online (running max, running sum,
 * rescaled accumulator), so no score matrix is ever formed, whatever the length.
 * Keys are visited in order, one at a time: simple and exact first; tiling keys
 * through shared memory comes with the performance work.
 * Shapes: q (nq, H*D), k and v (nk, K*D), q_pos (nq) in [0, nk); head h reads kv head
 * h / (H / K); D <= 32 * ATT_MAX_PER_LANE.
 *
 * Decode over a paged KV cache: the pools hold blocks of P tokens, block b's token t
 * of kv head g at ((b P + t) K + g) D; sequence s's token j lives in block
 * table[s][j / P] at slot j % P, so trajectories of one prompt can share their prefix
 * blocks. kv_append writes each sequence's new token, decode_attn attends it over the
 * sequence's len[s] tokens (the new one included) -- the same online softmax, the keys
 * split between the warps of a block and the group's query heads sharing each load.
 *
 * decode_qkv (a decode step's q, k and v after their projections: the q/k norms, the
 * rotation and the append, in one launch) is here too, beside the pool it writes.
 *
 * The kernels, in the C subset of CUDA (warp shuffles, shared memory, __syncthreads);
 * their launchers are in cuda_attention.cu. tests/test_cuda_decode_emu.c compiles this
 * file as C11 and runs the decode kernels on CPU threads against the CPU references.
 */
#ifndef LIBRA_CUDA_ATTENTION_KERNELS_CUH
#define LIBRA_CUDA_ATTENTION_KERNELS_CUH

#define ATT_MAX_PER_LANE 8 /* head dimension up to 256 */
#define ATT_WARPS 4        /* warps (query rows x heads) per block */

__global__ static void attn_fwd_k(float *out, const float *q, const float *k, const float *v,
                                  const int32_t *q_pos, int nq, int H, int K, int D,
                                  float scale)
{
    int lane = threadIdx.x & 31;
    long long task = (long long)blockIdx.x * ATT_WARPS + (threadIdx.x >> 5);
    if (task >= (long long)nq * H) return; /* the whole warp */
    int i = (int)(task / H), h = (int)(task % H), g = h / (H / K);
    const float *qi = q + (size_t)i * H * D + (size_t)h * D;
    float qr[ATT_MAX_PER_LANE], acc[ATT_MAX_PER_LANE];
    for (int e = 0; e < ATT_MAX_PER_LANE; e++) {
        int d = lane + 32 * e;
        qr[e] = d < D ? qi[d] : 0.0f;
        acc[e] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j <= q_pos[i]; j++) {
        const float *kj = k + (size_t)j * K * D + (size_t)g * D;
        float s = 0.0f;
        for (int e = 0; e < ATT_MAX_PER_LANE; e++) {
            int d = lane + 32 * e;
            if (d < D) s += qr[e] * kj[d];
        }
        for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
        s *= scale;
        float m_new = s > m ? s : m;
        float keep = expf(m - m_new), p = expf(s - m_new);
        l = l * keep + p;
        const float *vj = v + (size_t)j * K * D + (size_t)g * D;
        for (int e = 0; e < ATT_MAX_PER_LANE; e++) {
            int d = lane + 32 * e;
            if (d < D) acc[e] = acc[e] * keep + p * vj[d];
        }
        m = m_new;
    }
    float *oi = out + (size_t)i * H * D + (size_t)h * D;
    for (int e = 0; e < ATT_MAX_PER_LANE; e++) {
        int d = lane + 32 * e;
        if (d < D) oi[d] = acc[e] / l;
    }
}

/* ---- attention backward (training): two passes that recompute the probabilities,
 * no atomics, deterministic.
 * Row pass, one warp per (query row i, head h): the softmax statistics of the row
 * (online max and sum: lse_i = m + log l) and its output O_i, then
 * delta_i = dO_i . O_i (= sum_j p_ij dp_ij), then dq_i += scale sum_j ds_ij k_j with
 * p_ij = exp(s_ij - lse_i), dp_ij = dO_i . v_j, ds_ij = p_ij (dp_ij - delta_i).
 * Key pass, one warp per (key j, kv head g): dk_j += scale sum_{h in g, i: j <= pos_i}
 * ds_ij q_i and dv_j += sum p_ij dO_i, from the row pass's lse and delta. */
__device__ static float warp_sum(float x)
{
    for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

__global__ static void attn_bwd_rows_k(float *dq, float *stats, const float *dout,
                                       const float *q, const float *k, const float *v,
                                       const int32_t *q_pos, int nq, int H, int K, int D,
                                       float scale)
{
    int lane = threadIdx.x & 31;
    long long task = (long long)blockIdx.x * ATT_WARPS + (threadIdx.x >> 5);
    if (task >= (long long)nq * H) return;
    int i = (int)(task / H), h = (int)(task % H), g = h / (H / K);
    const float *qi = q + (size_t)i * H * D + (size_t)h * D;
    const float *doi = dout + (size_t)i * H * D + (size_t)h * D;
    float qr[ATT_MAX_PER_LANE], dor[ATT_MAX_PER_LANE], acc[ATT_MAX_PER_LANE];
    for (int e = 0; e < ATT_MAX_PER_LANE; e++) {
        int d = lane + 32 * e;
        qr[e] = d < D ? qi[d] : 0.0f;
        dor[e] = d < D ? doi[d] : 0.0f;
        acc[e] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j <= q_pos[i]; j++) {
        const float *kj = k + (size_t)j * K * D + (size_t)g * D;
        const float *vj = v + (size_t)j * K * D + (size_t)g * D;
        float sc = 0.0f;
        for (int e = 0; e < ATT_MAX_PER_LANE; e++) {
            int d = lane + 32 * e;
            if (d < D) sc += qr[e] * kj[d];
        }
        sc = warp_sum(sc) * scale;
        float m_new = sc > m ? sc : m, keep = expf(m - m_new), p = expf(sc - m_new);
        l = l * keep + p;
        for (int e = 0; e < ATT_MAX_PER_LANE; e++) {
            int d = lane + 32 * e;
            if (d < D) acc[e] = acc[e] * keep + p * vj[d];
        }
        m = m_new;
    }
    float lse = m + logf(l), delta = 0.0f;
    for (int e = 0; e < ATT_MAX_PER_LANE; e++) delta += dor[e] * (acc[e] / l);
    delta = warp_sum(delta);
    if (lane == 0) {
        stats[2 * task] = lse;
        stats[2 * task + 1] = delta;
    }
    float dqr[ATT_MAX_PER_LANE] = {0};
    for (int j = 0; j <= q_pos[i]; j++) {
        const float *kj = k + (size_t)j * K * D + (size_t)g * D;
        const float *vj = v + (size_t)j * K * D + (size_t)g * D;
        float sc = 0.0f, dp = 0.0f;
        for (int e = 0; e < ATT_MAX_PER_LANE; e++) {
            int d = lane + 32 * e;
            if (d < D) {
                sc += qr[e] * kj[d];
                dp += dor[e] * vj[d];
            }
        }
        sc = warp_sum(sc) * scale;
        dp = warp_sum(dp);
        float p = expf(sc - lse), ds = p * (dp - delta);
        for (int e = 0; e < ATT_MAX_PER_LANE; e++) {
            int d = lane + 32 * e;
            if (d < D) dqr[e] += scale * ds * kj[d];
        }
    }
    float *dqi = dq + (size_t)i * H * D + (size_t)h * D;
    for (int e = 0; e < ATT_MAX_PER_LANE; e++) {
        int d = lane + 32 * e;
        if (d < D) dqi[d] += dqr[e];
    }
}

__global__ static void attn_bwd_keys_k(float *dk, float *dv, const float *stats,
                                       const float *dout, const float *q, const float *k,
                                       const float *v, const int32_t *q_pos, int nq, int nk,
                                       int H, int K, int D, float scale)
{
    int lane = threadIdx.x & 31;
    long long task = (long long)blockIdx.x * ATT_WARPS + (threadIdx.x >> 5);
    if (task >= (long long)nk * K) return;
    int j = (int)(task / K), g = (int)(task % K), rep = H / K;
    const float *kj = k + (size_t)j * K * D + (size_t)g * D;
    const float *vj = v + (size_t)j * K * D + (size_t)g * D;
    float kr[ATT_MAX_PER_LANE], vr[ATT_MAX_PER_LANE];
    float dkr[ATT_MAX_PER_LANE] = {0}, dvr[ATT_MAX_PER_LANE] = {0};
    for (int e = 0; e < ATT_MAX_PER_LANE; e++) {
        int d = lane + 32 * e;
        kr[e] = d < D ? kj[d] : 0.0f;
        vr[e] = d < D ? vj[d] : 0.0f;
    }
    for (int i = 0; i < nq; i++) {
        if (q_pos[i] < j) continue; /* the same for the whole warp */
        for (int r = 0; r < rep; r++) {
            int h = g * rep + r;
            const float *qi = q + (size_t)i * H * D + (size_t)h * D;
            const float *doi = dout + (size_t)i * H * D + (size_t)h * D;
            float sc = 0.0f, dp = 0.0f;
            for (int e = 0; e < ATT_MAX_PER_LANE; e++) {
                int d = lane + 32 * e;
                if (d < D) {
                    sc += qi[d] * kr[e];
                    dp += doi[d] * vr[e];
                }
            }
            sc = warp_sum(sc) * scale;
            dp = warp_sum(dp);
            size_t st = 2 * ((size_t)i * H + (size_t)h);
            float p = expf(sc - stats[st]), ds = p * (dp - stats[st + 1]);
            for (int e = 0; e < ATT_MAX_PER_LANE; e++) {
                int d = lane + 32 * e;
                if (d < D) {
                    dkr[e] += scale * ds * qi[d];
                    dvr[e] += p * doi[d];
                }
            }
        }
    }
    float *dkj = dk + (size_t)j * K * D + (size_t)g * D;
    float *dvj = dv + (size_t)j * K * D + (size_t)g * D;
    for (int e = 0; e < ATT_MAX_PER_LANE; e++) {
        int d = lane + 32 * e;
        if (d < D) {
            dkj[d] += dkr[e];
            dvj[d] += dvr[e];
        }
    }
}

/* The pool row of token j of a sequence whose block table is tab. */
__device__ static size_t paged_row(const int32_t *tab, int j, int P)
{
    return (size_t)tab[j / P] * P + (size_t)(j % P);
}

__global__ static void kv_append_k(uint16_t *k_pool, uint16_t *v_pool, const float *k_new,
                                   const float *v_new, const int32_t *table, int max_blocks,
                                   const int32_t *len, int B, int KD, int P)
{
    long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long long)B * KD) return;
    int s = (int)(e / KD), c = (int)(e % KD);
    size_t row = paged_row(table + (size_t)s * max_blocks, len[s] - 1, P);
    k_pool[row * KD + c] = f32_to_bf16_rne(k_new[(size_t)s * KD + c]);
    v_pool[row * KD + c] = f32_to_bf16_rne(v_new[(size_t)s * KD + c]);
}

/* decode_attn: one block per (sequence, kv head, chunk of DEC_GMAX of its query heads,
 * split of the keys). The block's DEC_WARPS warps split its keys (warp w takes keys w,
 * w + DEC_WARPS, ...), each keeping an online softmax per query head; every key and
 * value row is read once for all the group's heads (grouped-query attention). The
 * warps' partial states (m, l, acc) are then merged in shared memory: the same
 * arithmetic as attn_forward up to the order of the float32 sums.
 * With few sequences there are too few such blocks to fill the GPU (batch 1 of a model
 * with 8 kv heads: 8 blocks): then the keys of a sequence are split S ways between
 * blocks (gridDim.y), each writing its partial state (m, l, unnormalised acc) to the
 * module's scratch, and decode_merge_k combines the S states in split order.
 * decode_attn_k, decode_merge_k and decode_qkv_k may be launched overlapped (the
 * decode step's kernels, cuda_device.cuh): each begins with grid_release, grid_wait. */
#define DEC_WARPS 8
#define DEC_GMAX 4
#define DEC_SPLIT_MAX 16 /* splits of a sequence's keys, at most */
/* Lanes that share a key: 32 as built (a warp takes one key at a time, its lanes
 * splitting the head dimension, a five-step shuffle sum a score); a variant build
 * (-DDEC_KEY_LANES=8, tools/gpu-bundle --variants) gives each key a group of 8 lanes,
 * so a warp has 4 keys in flight and a score takes three shuffle steps; the groups'
 * states are merged at the end as the warps' are. Every lane of a group keeps the
 * group's softmax state. */
#ifndef DEC_KEY_LANES
#define DEC_KEY_LANES 32
#endif
#define DEC_KEY_GROUPS (32 / DEC_KEY_LANES)      /* keys a warp has in flight */
/* the head dimensions decode_attn takes: the variant holds at most 16 a lane (D <= 128,
 * every Qwen3 and Llama shape), since a lane keeps q and the sums of DEC_GMAX heads */
#define DEC_MAX_D (DEC_KEY_LANES == 32 ? 32 * ATT_MAX_PER_LANE : 16 * DEC_KEY_LANES)
#define DEC_PER_LANE (DEC_MAX_D / DEC_KEY_LANES) /* dimensions a lane holds */
#define DEC_STATES (DEC_WARPS * DEC_KEY_GROUPS)  /* partial states of a block */
/* Dimension e of lane `sub`'s share of `per`: as built, lane sub holds sub, sub + 32,
 * ... (a warp's loads of a row are 64 contiguous bytes); with fewer lanes a key, lane
 * sub holds per sub .. per sub + per - 1, read 16 bytes at a time (D % 8 == 0, which
 * that build's launcher requires). */
#if DEC_KEY_LANES == 32
#define DEC_DIM(sub, e, per) ((sub) + 32 * (e))
#else
#define DEC_DIM(sub, e, per) ((sub) * (per) + (e))
#endif

/* Key j's rows (k, v) of kv head g, the lane's PER dimensions of each widened to
 * float32, or zeros for a key at or past j1 (32 lanes a key). */
__device__ static __forceinline__ void dec_load_rows(float *kr, float *vr,
                                                     const uint16_t *k_pool,
                                                     const uint16_t *v_pool,
                                                     const int32_t *tab, int j, int j1, int P,
                                                     int K, int g, int D, int sub,
                                                     const int PER)
{
    int live = j < j1;
    size_t off = live ? (paged_row(tab, j, P) * K + g) * D : 0;
    for (int e = 0; e < PER; e++) {
        int d = DEC_DIM(sub, e, PER);
        kr[e] = live && d < D ? bf16_to_f32(k_pool[off + d]) : 0.0f;
        vr[e] = live && d < D ? bf16_to_f32(v_pool[off + d]) : 0.0f;
    }
}

/* The kernel's body for a lane share of PER dimensions (a constant in each kernel
 * below, so the loops over them unroll to that many and no register holds a dimension
 * past the head's). With PF (also a constant; 32 lanes a key only) the next round's
 * key and value rows are loaded while this round's are used: for launches with key
 * splits (few sequences), where a warp has a few keys and each waited for its own
 * loads; without splits the kernel is bound by instruction issue, and the prefetch
 * costs some 20 instructions a key (the next row's address, the copies). */
__device__ static __forceinline__ void decode_attn_body(float *out, const float *q,
                                                        const uint16_t *k_pool,
                                                        const uint16_t *v_pool,
                                                        const int32_t *table, int max_blocks,
                                                        const int32_t *len, int H, int K, int D,
                                                        int P, int chunks, float scale,
                                                        float *part, const int PER,
                                                        const int PF)
{
    __shared__ float s_acc[DEC_STATES][DEC_MAX_D];
    __shared__ float s_m[DEC_STATES], s_l[DEC_STATES];
    (void)PF; /* a build of fewer lanes a key has no prefetch */
    grid_release();
    grid_wait();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, S = gridDim.y, split = blockIdx.y;
    int grp = lane / DEC_KEY_LANES, sub = lane % DEC_KEY_LANES, state = warp * DEC_KEY_GROUPS + grp;
    int G = H / K, b = blockIdx.x;
    int s = b / (K * chunks), g = (b / chunks) % K, h0 = g * G + (b % chunks) * DEC_GMAX;
    int nh = g * G + G - h0 < DEC_GMAX ? g * G + G - h0 : DEC_GMAX;
    const int32_t *tab = table + (size_t)s * max_blocks;
    float qr[DEC_GMAX][DEC_PER_LANE], acc[DEC_GMAX][DEC_PER_LANE];
    float m[DEC_GMAX], l[DEC_GMAX];
#pragma unroll
    for (int hh = 0; hh < DEC_GMAX; hh++) {
        const float *qs = q + (size_t)s * H * D + (size_t)(h0 + hh) * D;
        for (int e = 0; e < PER; e++) {
            int d = DEC_DIM(sub, e, PER);
            qr[hh][e] = hh < nh && d < D ? qs[d] : 0.0f;
            acc[hh][e] = 0.0f;
        }
        m[hh] = -INFINITY;
        l[hh] = 0.0f;
    }
    int n = len[s], span = (n + S - 1) / S, j0 = split * span;
    int j1 = j0 + span < n ? j0 + span : n;
    /* a round: key j0 + (round's base) + grp for each group of each warp; every lane
     * takes part in the shuffles, a group past j1 with zeros */
    const int ROUND = DEC_WARPS * DEC_KEY_GROUPS;
    float kr[DEC_PER_LANE], vr[DEC_PER_LANE];
#if DEC_KEY_LANES == 32
    float kn[DEC_PER_LANE], vn[DEC_PER_LANE]; /* PF: the next round's rows */
    if (PF)
        dec_load_rows(kn, vn, k_pool, v_pool, tab, j0 + warp, j1, P, K, g, D, sub, PER);
#endif
    for (int base = j0 + warp * DEC_KEY_GROUPS; base < j1; base += ROUND) {
        int j = base + grp, live = j < j1;
#if DEC_KEY_LANES == 32
        if (PF) {
            for (int e = 0; e < PER; e++) kr[e] = kn[e], vr[e] = vn[e];
            dec_load_rows(kn, vn, k_pool, v_pool, tab, j + ROUND, j1, P, K, g, D, sub, PER);
        } else {
            dec_load_rows(kr, vr, k_pool, v_pool, tab, j, j1, P, K, g, D, sub, PER);
        }
#else
        size_t off = live ? (paged_row(tab, j, P) * K + g) * D : 0;
        for (int e = 0; e < PER; e += 8) { /* D % 8 == 0: whole pieces */
            int d = DEC_DIM(sub, e, PER);
            uint4 kp = {0u, 0u, 0u, 0u}, vp = {0u, 0u, 0u, 0u};
            if (live && d < D) {
                kp = *(const uint4 *)(k_pool + off + d);
                vp = *(const uint4 *)(v_pool + off + d);
            }
            bf16x8_to_f32(kp, kr + e);
            bf16x8_to_f32(vp, vr + e);
        }
#endif
        /* the group's heads side by side, each dimension's product for every head in
         * turn (a head's score still sums its dimensions in order) */
        float sc[DEC_GMAX], keep[DEC_GMAX], p[DEC_GMAX];
#pragma unroll
        for (int hh = 0; hh < DEC_GMAX; hh++) sc[hh] = 0.0f;
        for (int e = 0; e < PER; e++)
#pragma unroll
            for (int hh = 0; hh < DEC_GMAX; hh++) sc[hh] += qr[hh][e] * kr[e];
        /* the online softmax: a score above the head's maximum becomes the maximum (its
         * p is exp(0) = 1, the sums scaled by keep), any other leaves it (keep is 1):
         * one exponential a head, and the sums rescaled only when some group of the warp
         * has a new maximum -- the same bits as scaling by 1 */
        int grow = 0;
#pragma unroll
        for (int hh = 0; hh < DEC_GMAX; hh++) {
            keep[hh] = 1.0f, p[hh] = 0.0f; /* a group past j1: nothing changes */
            if (hh >= nh) continue; /* uniform in the block */
            for (int o = DEC_KEY_LANES / 2; o > 0; o /= 2)
                sc[hh] += __shfl_xor_sync(0xffffffffu, sc[hh], o);
            if (!live) continue;
            float x = sc[hh] * scale;
            if (x > m[hh]) {
                keep[hh] = expf(m[hh] - x), p[hh] = 1.0f;
                m[hh] = x;
                grow = 1;
            } else {
                p[hh] = expf(x - m[hh]);
            }
            l[hh] = l[hh] * keep[hh] + p[hh];
        }
        if (__any_sync(0xffffffffu, grow)) {
            for (int e = 0; e < PER; e++)
#pragma unroll
                for (int hh = 0; hh < DEC_GMAX; hh++)
                    if (hh < nh) acc[hh][e] = fmaf(p[hh], vr[e], acc[hh][e] * keep[hh]);
        } else {
            for (int e = 0; e < PER; e++)
#pragma unroll
                for (int hh = 0; hh < DEC_GMAX; hh++)
                    if (hh < nh) acc[hh][e] = fmaf(p[hh], vr[e], acc[hh][e]);
        }
    }
#pragma unroll
    for (int hh = 0; hh < DEC_GMAX; hh++) {
        if (hh >= nh) continue; /* uniform in the block: the barriers below are safe */
        if (sub == 0) {
            s_m[state] = m[hh];
            s_l[state] = l[hh];
        }
        for (int e = 0; e < PER; e++) {
            int d = DEC_DIM(sub, e, PER);
            if (d < DEC_MAX_D) s_acc[state][d] = acc[hh][e];
        }
        __syncthreads();
        int d = threadIdx.x;
        if (d < D) {
            float M = -INFINITY;
            for (int w = 0; w < DEC_STATES; w++) M = s_m[w] > M ? s_m[w] : M;
            float sum = 0.0f, o = 0.0f;
            for (int w = 0; w < DEC_STATES; w++) {
                if (s_m[w] == -INFINITY) continue; /* a state that saw no key */
                float f = expf(s_m[w] - M);
                sum += s_l[w] * f;
                o += s_acc[w][d] * f;
            }
            if (S == 1) {
                out[(size_t)s * H * D + (size_t)(h0 + hh) * D + d] = o / sum;
            } else { /* (m, l, acc[D]) of this split; m = -inf, l = 0: no key */
                float *ps = part + (((size_t)s * H + h0 + hh) * S + split) * (D + 2);
                if (d == 0) ps[0] = M, ps[1] = sum;
                ps[2 + d] = o;
            }
        }
        __syncthreads();
    }
}

/* decode_attn's kernels: lanes holding a quarter, a half or all of DEC_PER_LANE
 * dimensions (as built 2, 4, 8: head dimensions up to 64, 128, 256; the 8-lane
 * variant 8, 8, 16, since it reads its dimensions 8 at a time), each with and without
 * the prefetch (_pf); DEC_ATTN_FOR(D, S) is the narrowest that holds D, prefetching
 * when the keys are split (S > 1) in a build of 32 lanes a key. */
#define DEC_ATTN_PARAMS                                                                      \
    float *out, const float *q, const uint16_t *k_pool, const uint16_t *v_pool,              \
        const int32_t *table, int max_blocks, const int32_t *len, int H, int K, int D, int P, \
        int chunks, float scale, float *part
#define DEC_ATTN_KERNEL(name, per, pf)                                                       \
    __global__ static void name(DEC_ATTN_PARAMS)                                             \
    {                                                                                        \
        decode_attn_body(out, q, k_pool, v_pool, table, max_blocks, len, H, K, D, P, chunks,  \
                         scale, part, per, pf);                                              \
    }
#define DEC_PER_QUARTER (DEC_KEY_LANES == 32 ? DEC_PER_LANE / 4 : DEC_PER_LANE / 2)
DEC_ATTN_KERNEL(decode_attn_k, DEC_PER_LANE, 0)
DEC_ATTN_KERNEL(decode_attn_half_k, DEC_PER_LANE / 2, 0)
DEC_ATTN_KERNEL(decode_attn_quarter_k, DEC_PER_QUARTER, 0)
#if DEC_KEY_LANES == 32
DEC_ATTN_KERNEL(decode_attn_pf_k, DEC_PER_LANE, 1)
DEC_ATTN_KERNEL(decode_attn_half_pf_k, DEC_PER_LANE / 2, 1)
DEC_ATTN_KERNEL(decode_attn_quarter_pf_k, DEC_PER_QUARTER, 1)
#define DEC_ATTN_FOR(D, S)                                                                   \
    ((D) <= DEC_KEY_LANES * DEC_PER_QUARTER                                                  \
         ? ((S) > 1 ? decode_attn_quarter_pf_k : decode_attn_quarter_k)                      \
     : (D) <= DEC_KEY_LANES * (DEC_PER_LANE / 2)                                             \
         ? ((S) > 1 ? decode_attn_half_pf_k : decode_attn_half_k)                            \
         : ((S) > 1 ? decode_attn_pf_k : decode_attn_k))
#else
#define DEC_ATTN_FOR(D, S)                                                                   \
    ((D) <= DEC_KEY_LANES * DEC_PER_QUARTER        ? decode_attn_quarter_k                   \
     : (D) <= DEC_KEY_LANES * (DEC_PER_LANE / 2) ? decode_attn_half_k                        \
                                                 : decode_attn_k)
#endif

/* out of row (s, h) from its S (<= DEC_SPLIT_MAX) partial states, in split order: one
 * block per row, a thread per dimension. Every split's three values are loaded first,
 * all in flight together (at batch 1 the loop that loaded them as it went waited a
 * round trip to L2 per split); splits past S count as having seen no key. */
__global__ static void decode_merge_k(float *out, const float *part, int D, int S)
{
    grid_release();
    grid_wait();
    int row = blockIdx.x, d = threadIdx.x;
    if (d >= D) return;
    const float *pr = part + (size_t)row * S * (D + 2);
    float pm[DEC_SPLIT_MAX], pl[DEC_SPLIT_MAX], po[DEC_SPLIT_MAX];
#pragma unroll
    for (int i = 0; i < DEC_SPLIT_MAX; i++) {
        const float *ps = pr + (size_t)i * (D + 2);
        pm[i] = i < S ? ps[0] : -INFINITY;
        pl[i] = i < S ? ps[1] : 0.0f;
        po[i] = i < S ? ps[2 + d] : 0.0f;
    }
    float M = -INFINITY;
#pragma unroll
    for (int i = 0; i < DEC_SPLIT_MAX; i++) M = pm[i] > M ? pm[i] : M;
    float sum = 0.0f, o = 0.0f;
#pragma unroll
    for (int i = 0; i < DEC_SPLIT_MAX; i++) {
        if (pm[i] == -INFINITY) continue; /* a split that saw no key */
        float f = expf(pm[i] - M);
        sum += pl[i] * f;
        o += po[i] * f;
    }
    out[(size_t)row * D + d] = o / sum;
}

/* ---- a decode step's q, k and v after their projections, in one launch: per (row,
 * head) the q/k norm over D (rmsnorm_fwd's sum and expression), the rotation
 * (rope_fwd's), and for the kv heads the append of k and v to the paged pools
 * (kv_append's row). A block of ROW_THREADS per (row, head of q or kv head), a thread
 * per dimension (D <= ROW_THREADS). ---- */
__global__ static void decode_qkv_k(float *q, uint16_t *k_pool, uint16_t *v_pool, const float *qlin,
                                    const float *klin, const float *v, const uint16_t *q_norm,
                                    const uint16_t *k_norm, float eps, const int32_t *pos,
                                    const float *rope, const int32_t *table, int max_blocks,
                                    const int32_t *len, int H, int K, int D, int P)
{
    __shared__ float part[ROW_THREADS], xs[ROW_THREADS];
    grid_release();
    grid_wait();
    int r = blockIdx.x, is_q = (int)blockIdx.y < H, h = is_q ? blockIdx.y : blockIdx.y - H;
    int j = threadIdx.x, half = D / 2;
    const float *src = is_q ? qlin + ((size_t)r * H + h) * D : klin + ((size_t)r * K + h) * D;
    const uint16_t *w = is_q ? q_norm : k_norm;
    float x = j < D ? src[j] : 0.0f;
    if (w) { /* the same for the whole block */
        float rr = 1.0f / sqrtf(block_sum(x * x, part) / (float)D + eps);
        if (j < D) x = (x * rr) * bf16_to_f32(w[j]);
    }
    xs[j] = x;
    __syncthreads();
    if (j >= D) return;
    const float *cs = rope + (size_t)pos[r] * D;
    int i = j < half ? j : j - half;
    float y0, y1;
    rope_pair(cs, i, half, 1.0f, xs[i], xs[half + i], &y0, &y1);
    float y = j < half ? y0 : y1;
    if (is_q) {
        q[((size_t)r * H + h) * D + j] = y;
        return;
    }
    size_t row = paged_row(table + (size_t)r * max_blocks, len[r] - 1, P);
    size_t at = row * (size_t)K * D + (size_t)h * D + j;
    k_pool[at] = f32_to_bf16_rne(y);
    v_pool[at] = f32_to_bf16_rne(v[((size_t)r * K + h) * D + j]);
}

#endif
