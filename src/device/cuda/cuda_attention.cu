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
 */
#include "cuda_internal.h"

#include <math.h>

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

extern "C" int cu_attn_fwd(float *out, const float *q, const float *k, const float *v,
                           const int32_t *q_pos, int nq, int nk, int H, int K, int D)
{
    (void)nk; /* q_pos < nk is the caller's contract, as for attn_forward */
    if (nq <= 0) return 0;
    if (D > 32 * ATT_MAX_PER_LANE || K <= 0 || H % K != 0) {
        char what[128];
        snprintf(what, sizeof what, "attn_fwd: head_dim %d (at most %d), heads %d, kv heads %d",
                 D, 32 * ATT_MAX_PER_LANE, H, K);
        return cu_fail(what, cudaSuccess, __FILE__, __LINE__);
    }
    long long tasks = (long long)nq * H;
    unsigned blocks = (unsigned)((tasks + ATT_WARPS - 1) / ATT_WARPS);
    attn_fwd_k<<<blocks, 32 * ATT_WARPS>>>(out, q, k, v, q_pos, nq, H, K, D,
                                            1.0f / sqrtf((float)D));
    CU_LAUNCHED("attn_fwd");
    return 0;
}
