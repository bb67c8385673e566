/*
 * The launchers of the attention kernels (include/libra/cuda_api.h): causal attention
 * of one sequence for prefill and training, and decode over the paged KV cache. The
 * kernels and what they compute are in cuda_attention_kernels.cuh.
 */
#include "cuda_internal.h"

#include <math.h>

#include "cuda_attention_kernels.cuh"

extern "C" int cu_kv_append(uint16_t *k_pool, uint16_t *v_pool, const float *k_new, const float *v_new,
                            const int32_t *table, int max_blocks, const int32_t *len, int B,
                            int K, int D, int P)
{
    long long n = (long long)B * K * D;
    if (n <= 0) return 0;
    kv_append_k<<<EW_BLOCKS(n), EW_THREADS, 0, cu_stream()>>>(k_pool, v_pool, k_new, v_new,
                                                             table, max_blocks, len, B, K * D,
                                                             P);
    CU_LAUNCHED("kv_append");
    return 0;
}

static int check_heads(const char *what, int H, int K, int D)
{
    if (D <= 32 * ATT_MAX_PER_LANE && K > 0 && H % K == 0) return 0;
    char msg[128];
    snprintf(msg, sizeof msg, "%s: head_dim %d (at most %d), heads %d, kv heads %d", what, D,
             32 * ATT_MAX_PER_LANE, H, K);
    return cu_fail(msg, cudaSuccess, __FILE__, __LINE__);
}

/* The key splits' scratch, sized for the most partial states a launch can ask for
 * (splits, at most DEC_SPLIT_MAX, are used only while the blocks without them number
 * at most DEC_SPLIT_FILL x the SMs), made before a graph is recorded
 * (cu_attention_prepare). */
#define DEC_SPLIT_FILL 2 /* aim: this many blocks per SM */
static float *dec_part;
static size_t dec_part_floats;
static int dec_sms;

int cu_attention_prepare(void)
{
    if (dec_part) return 0;
    int dev = 0;
    CU_CHECK(cudaGetDevice(&dev));
    CU_CHECK(cudaDeviceGetAttribute(&dec_sms, cudaDevAttrMultiProcessorCount, dev));
    /* blocks x S <= DEC_SPLIT_FILL x SMs, each block holding up to DEC_GMAX rows of
     * (D + 2) <= 32 * ATT_MAX_PER_LANE + 2 floats */
    dec_part_floats = (size_t)DEC_SPLIT_FILL * dec_sms * DEC_GMAX * (32 * ATT_MAX_PER_LANE + 2);
    CU_CHECK(cudaMalloc(&dec_part, dec_part_floats * sizeof(float)));
    return 0;
}

extern "C" int cu_decode_attn(float *out, const float *q, const uint16_t *k_pool,
                              const uint16_t *v_pool, const int32_t *table, int max_blocks,
                              const int32_t *len, int B, int H, int K, int D, int P)
{
    if (B <= 0) return 0;
    if (check_heads("decode_attn", H, K, D)) return -1;
    if (D > DEC_MAX_D || (DEC_KEY_LANES < 32 && D % 8)) { /* a build with fewer lanes a
                                                              key (DEC_KEY_LANES) */
        char msg[112];
        snprintf(msg, sizeof msg,
                 "decode_attn: head_dim %d (at most %d, a multiple of %d, in this build)", D,
                 DEC_MAX_D, DEC_KEY_LANES < 32 ? 8 : 4);
        return cu_fail(msg, cudaSuccess, __FILE__, __LINE__);
    }
    if (cu_attention_prepare()) return -1;
    int G = H / K, chunks = (G + DEC_GMAX - 1) / DEC_GMAX;
    long long blocks = (long long)B * K * chunks;
    if (blocks > 0x7fffffffLL)
        return cu_fail("decode_attn: too many rows", cudaSuccess, __FILE__, __LINE__);
    long long S = (long long)DEC_SPLIT_FILL * dec_sms / blocks;
    S = S < 1 ? 1 : S > DEC_SPLIT_MAX ? DEC_SPLIT_MAX : S;
    if (S > 1 && (size_t)B * H * S * (D + 2) > dec_part_floats)
        return cu_fail("decode_attn: split scratch too small", cudaSuccess, __FILE__, __LINE__);
    dim3 grid((unsigned)blocks, (unsigned)S);
    CU_CHECK(cu_launch_overlapped(DEC_ATTN_FOR(D, S), grid, dim3(32 * DEC_WARPS), out, q, k_pool,
                                  v_pool, table, max_blocks, len, H, K, D, P, chunks,
                                  1.0f / sqrtf((float)D), dec_part));
    if (S > 1)
        CU_CHECK(cu_launch_overlapped(decode_merge_k, dim3((unsigned)(B * H)), dim3((unsigned)D),
                                      out, (const float *)dec_part, D, (int)S));
    return 0;
}

extern "C" int cu_attn_fwd(float *out, const float *q, const float *k, const float *v,
                           const int32_t *q_pos, int nq, int nk, int H, int K, int D)
{
    (void)nk; /* q_pos < nk is the caller's contract, as for attn_forward */
    if (nq <= 0) return 0;
    if (check_heads("attn_fwd", H, K, D)) return -1;
    long long tasks = (long long)nq * H;
    unsigned blocks = (unsigned)((tasks + ATT_WARPS - 1) / ATT_WARPS);
    attn_fwd_k<<<blocks, 32 * ATT_WARPS, 0, cu_stream()>>>(out, q, k, v, q_pos, nq, H, K, D,
                                            1.0f / sqrtf((float)D));
    CU_LAUNCHED("attn_fwd");
    return 0;
}

extern "C" int cu_attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const int32_t *q_pos, int nq, int nk,
                           int H, int K, int D, float *stats)
{
    if (nq <= 0 || nk <= 0) return 0;
    if (check_heads("attn_bwd", H, K, D)) return -1;
    float scale = 1.0f / sqrtf((float)D);
    long long rows = (long long)nq * H, keys = (long long)nk * K;
    attn_bwd_rows_k<<<(unsigned)((rows + ATT_WARPS - 1) / ATT_WARPS), 32 * ATT_WARPS, 0,
                      cu_stream()>>>(dq, stats, dout, q, k, v, q_pos, nq, H, K, D, scale);
    CU_LAUNCHED("attn_bwd rows");
    attn_bwd_keys_k<<<(unsigned)((keys + ATT_WARPS - 1) / ATT_WARPS), 32 * ATT_WARPS, 0,
                      cu_stream()>>>(dk, dv, stats, dout, q, k, v, q_pos, nq, nk, H, K, D,
                                     scale);
    CU_LAUNCHED("attn_bwd keys");
    return 0;
}

extern "C" int cu_decode_qkv(float *q, uint16_t *k_pool, uint16_t *v_pool, const float *qlin,
                             const float *klin, const float *v, const uint16_t *q_norm,
                             const uint16_t *k_norm, float eps, const int32_t *pos,
                             const float *rope, const int32_t *table, int max_blocks,
                             const int32_t *len, int B, int H, int K, int D, int P)
{
    if (B <= 0) return 0;
    if (D > ROW_THREADS || D % 2 || H < 1 || K < 1)
        return cu_fail("decode_qkv: head_dim above 256 or odd, or no heads", cudaSuccess,
                       __FILE__, __LINE__);
    dim3 grid((unsigned)B, (unsigned)(H + K));
    CU_CHECK(cu_launch_overlapped(decode_qkv_k, grid, dim3(ROW_THREADS), q, k_pool, v_pool, qlin,
                                  klin, v, q_norm, k_norm, eps, pos, rope, table, max_blocks,
                                  len, H, K, D, P));
    return 0;
}
