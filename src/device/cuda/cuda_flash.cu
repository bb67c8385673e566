/*
 * The launchers of the tensor-core attention (include/libra/cuda_api.h: flash_fwd,
 * flash_bwd, prefill_attn): the bf16 copies of the float32 inputs in the module's
 * scratch, each kernel's dynamic shared memory raised once, the grids. The kernels and
 * their algorithm: cuda_flash_kernels.cuh.
 */
#include "cuda_internal.h"

#include <math.h>

#include "libra/cuda_api.h"

#include "cuda_flash_kernels.cuh"

/* The module's scratch for the copies, grown when a call needs more (cu_scratch_grow:
 * the training path only, never inside a graph recording). */
static void *fl_mem;
static size_t fl_bytes;

/* The scratch as bf16 elements, at least elems of them; NULL (the failure recorded) if
 * it cannot grow. */
static uint16_t *flash_scratch(size_t elems)
{
    if (cu_scratch_grow(&fl_mem, &fl_bytes, elems * sizeof(uint16_t))) return NULL;
    return (uint16_t *)fl_mem;
}

/* x (rows x heads, D) float32 into dst, as (rows x heads, DP) bf16. */
static int to_bf16(uint16_t *dst, const float *x, long long rows, int D, int DP)
{
    long long n = rows * DP;
    to_bf16_pad_k<<<EW_BLOCKS(n), EW_THREADS, 0, cu_stream()>>>(dst, x, rows, D, DP);
    CU_LAUNCHED("flash bf16 copy");
    return 0;
}

/* ---- launchers ---- */
static int flash_check(const char *what, int H, int K, int D)
{
    if (cuda_flash_supports(D) && K > 0 && H % K == 0) return 0;
    char msg[128];
    snprintf(msg, sizeof msg,
             "%s: head_dim %d (a multiple of 4, at most 128), heads %d, kv heads %d", what, D,
             H, K);
    return cu_fail(msg, cudaSuccess, __FILE__, __LINE__);
}

/* Raises a kernel's dynamic shared memory limit to what it takes (once). */
#define FL_SMEM(kernel, bytes, flag)                                                         \
    do {                                                                                     \
        if (!(flag)) {                                                                       \
            CU_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, \
                                          (int)(bytes)));                                    \
            (flag) = 1;                                                                      \
        }                                                                                    \
    } while (0)

/* The grid of a packed batch: n blocks for each tile rank (of `per` rows or keys) of
 * the longest sequence, by y. */
static dim3 seq_grid(const struct cuda_seqs *sq, int longest, int per, int y)
{
    return dim3((unsigned)(sq->n * ((longest + per - 1) / per)), (unsigned)y);
}

static struct fl_seqs fl_seqs_of(const struct cuda_seqs *sq)
{
    struct fl_seqs f = {sq->q_start, sq->k_start, sq->n};
    return f;
}

template <int DP>
static int fwd_launch(float *out, float *lse, const float *q, const float *k, const float *v,
                      const int32_t *q_pos, const struct cuda_seqs *sq, int H, int K, int D)
{
    static int attr, carveout;
    FL_SMEM(flash_fwd_k<DP>, fwd_smem<DP>(), attr);
    if (FL_FWD_MIN_BLOCKS > 2 && !carveout) { /* shared memory for that many blocks' tiles */
        CU_CHECK(cudaFuncSetAttribute(flash_fwd_k<DP>,
                                      cudaFuncAttributePreferredSharedMemoryCarveout,
                                      cudaSharedmemCarveoutMaxShared));
        carveout = 1;
    }
    size_t nqe = (size_t)sq->nq * H * DP, nke = (size_t)sq->nk * K * DP;
    uint16_t *qb = flash_scratch(nqe + 2 * nke);
    if (!qb) return -1;
    uint16_t *kb = qb + nqe, *vb = kb + nke;
    if (to_bf16(qb, q, (long long)sq->nq * H, D, DP) ||
        to_bf16(kb, k, (long long)sq->nk * K, D, DP) ||
        to_bf16(vb, v, (long long)sq->nk * K, D, DP))
        return -1;
    flash_fwd_k<DP><<<seq_grid(sq, sq->max_q, FL_ROWS, H), FL_THREADS, fwd_smem<DP>(),
                      cu_stream()>>>(out, lse, qb, kb, vb, q_pos, fl_seqs_of(sq), H, K, D,
                                     FL_LOG2E / sqrtf((float)D));
    CU_LAUNCHED("flash_fwd");
    return 0;
}

template <int DP>
static int bwd_launch(float *dq, float *dk, float *dv, const float *dout, const float *q,
                      const float *k, const float *v, const float *lse, const float *delta,
                      const int32_t *q_pos, const struct cuda_seqs *sq, int H, int K, int D)
{
    static int attr_dq, attr_dkv;
    FL_SMEM(flash_dq_k<DP>, dq_smem<DP>(), attr_dq);
    FL_SMEM(flash_dkv_k<DP>, dkv_smem<DP>(), attr_dkv);
    size_t nqe = (size_t)sq->nq * H * DP, nke = (size_t)sq->nk * K * DP;
    uint16_t *qb = flash_scratch(2 * nqe + 2 * nke);
    if (!qb) return -1;
    uint16_t *db = qb + nqe, *kb = db + nqe, *vb = kb + nke;
    if (to_bf16(qb, q, (long long)sq->nq * H, D, DP) ||
        to_bf16(db, dout, (long long)sq->nq * H, D, DP) ||
        to_bf16(kb, k, (long long)sq->nk * K, D, DP) ||
        to_bf16(vb, v, (long long)sq->nk * K, D, DP))
        return -1;
    float scale = 1.0f / sqrtf((float)D);
    flash_dq_k<DP><<<seq_grid(sq, sq->max_q, FL_ROWS, H), FL_THREADS, dq_smem<DP>(),
                     cu_stream()>>>(dq, db, qb, kb, vb, lse, delta, q_pos, fl_seqs_of(sq), H, K,
                                    D, scale);
    CU_LAUNCHED("flash_bwd dq");
    flash_dkv_k<DP><<<seq_grid(sq, sq->max_k, FL_ROWS, K), FL_THREADS, dkv_smem<DP>(),
                      cu_stream()>>>(dk, dv, db, qb, kb, vb, lse, delta, q_pos, fl_seqs_of(sq),
                                     H, K, D, scale);
    CU_LAUNCHED("flash_bwd dk dv");
    return 0;
}

template <int DP>
static int paged_launch(float *out, const float *q, const uint16_t *k_pool, const uint16_t *v_pool,
                        const int32_t *table, const int32_t *q_pos, int nq, int H, int K, int D,
                        int P)
{
    static int attr;
    FL_SMEM(flash_paged_k<DP>, paged_smem<DP>(), attr);
    dim3 grid((unsigned)((nq + FL_ROWS - 1) / FL_ROWS), (unsigned)H);
    flash_paged_k<DP><<<grid, FL_THREADS, paged_smem<DP>(), cu_stream()>>>(
        out, q, k_pool, v_pool, table, q_pos, nq, H, K, D, P, FL_LOG2E / sqrtf((float)D));
    CU_LAUNCHED("prefill_attn");
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

/* The batch's sizes, checked: 1 if it holds no rows, -1 (recorded) if they do not hold
 * together. */
static int seqs_check(const char *what, const struct cuda_seqs *sq)
{
    if (cuda_seqs_valid(sq)) return sq->nq == 0;
    char msg[128];
    snprintf(msg, sizeof msg, "%s: a packed batch whose sizes do not hold together", what);
    return cu_fail(msg, cudaSuccess, __FILE__, __LINE__);
}

extern "C" int cu_flash_fwd(float *out, float *lse, const float *q, const float *k,
                            const float *v, const int32_t *q_pos, const struct cuda_seqs *sq,
                            int H, int K, int D)
{
    if (flash_check("flash_fwd", H, K, D)) return -1;
    int e = seqs_check("flash_fwd", sq);
    if (e) return e < 0 ? -1 : 0;
    FL_BY_DP(D, fwd_launch, out, lse, q, k, v, q_pos, sq, H, K, D)
}

extern "C" int cu_flash_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                            const float *k, const float *v, const float *out, const float *lse,
                            const int32_t *q_pos, const struct cuda_seqs *sq, int H, int K,
                            int D, float *delta)
{
    if (flash_check("flash_bwd", H, K, D)) return -1;
    int e = seqs_check("flash_bwd", sq);
    if (e) return e < 0 ? -1 : 0;
    if (sq->nk == 0) return 0;
    long long rows = (long long)sq->nq * H;
    flash_delta_k<<<(unsigned)((rows + FL_WARPS - 1) / FL_WARPS), FL_THREADS, 0, cu_stream()>>>(
        delta, dout, out, sq->nq, H, D);
    CU_LAUNCHED("flash_bwd delta");
    FL_BY_DP(D, bwd_launch, dq, dk, dv, dout, q, k, v, lse, delta, q_pos, sq, H, K, D)
}

extern "C" int cu_prefill_attn(float *out, const float *q, const uint16_t *k_pool,
                               const uint16_t *v_pool, const int32_t *table, const int32_t *q_pos,
                               int nq, int H, int K, int D, int P)
{
    if (nq <= 0) return 0;
    if (flash_check("prefill_attn", H, K, D)) return -1;
    FL_BY_DP(D, paged_launch, out, q, k_pool, v_pool, table, q_pos, nq, H, K, D, P)
}
