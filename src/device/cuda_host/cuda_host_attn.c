/*
 * The host module's attention kernels (include/libra/cuda_api.h):
 *   attn_fwd, attn_bwd, decode_attn   the CPU references attn_forward / attn_backward
 *                  (include/libra/cpu_ops.h), decode_attn on each sequence's keys
 *                  gathered from the paged pool;
 *   flash_fwd, flash_bwd, prefill_attn   the tensor-core kernels' arithmetic
 *                  (src/device/cuda/cuda_flash.cu): Q, K, V and dO rounded to bf16, the
 *                  scores and sums in float32, the probabilities P (and dS) rounded to
 *                  bf16 where they enter a product; the forward's keys in tiles of 64
 *                  with the running maximum per tile, as fwd_tile; prefill_attn that
 *                  forward over keys gathered from the pool;
 *   kv_append, decode_qkv   the appends (rounded to the pool's bf16), and
 *                  rmsnorm_forward / rope_forward per head.
 * The refusals (head dimensions) are the CUDA launchers'. Limits: plain loops, one
 * thread; scratch is malloc'd per call (no allocation from the memory budget).
 */
#include "cuda_host_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libra/cpu_ops.h"
#include "libra/log.h"
#include "libra/safetensors.h"

#define FLASH_KEYS 64 /* keys per tile of the tensor-core forward (FL_KEYS) */
#define FLASH_LOG2E 1.4426950408889634f

int ch_heads_check(const char *what, int H, int K, int D)
{
    if (D <= 256 && K > 0 && H % K == 0) return 0;
    return CH_FAIL("%s: head_dim %d (at most 256), heads %d, kv heads %d", what, D, H, K);
}

int ch_flash_check(const char *what, int H, int K, int D)
{
    if (cuda_flash_supports(D) && K > 0 && H % K == 0) return 0;
    return CH_FAIL("%s: head_dim %d (a multiple of 4, at most 128), heads %d, kv heads %d",
                   what, D, H, K);
}

int ch_seqs_check(const char *what, const struct cuda_seqs *sq)
{
    if (cuda_seqs_valid(sq)) return sq->nq == 0;
    return CH_FAIL("%s: a packed batch whose sizes do not hold together", what);
}

int ch_decode_qkv_check(int H, int K, int D)
{
    if (D <= 256 && D % 2 == 0 && H >= 1 && K >= 1) return 0;
    return CH_FAIL("decode_qkv: head_dim %d above 256 or odd, or no heads (%d, kv %d)", D, H, K);
}

/* ---------------------------------------------------------------- float32 attention */

int ch_attn_fwd(const void *args)
{
    const struct attn_args *a = args;
    float *scratch = xmalloc(attn_scratch_floats(a->nq, a->nk, a->H, a->K, a->D) * sizeof *scratch);
    attn_forward(a->out, a->q, a->k, a->v, a->q_pos, a->nq, a->nk, a->H, a->K, a->D, scratch);
    free(scratch);
    return 0;
}

/* The stats argument (a->scratch) is the CUDA kernels' scratch: not used here. */
int ch_attn_bwd(const void *args)
{
    const struct attn_args *a = args;
    float *scratch = xmalloc(attn_scratch_floats(a->nq, a->nk, a->H, a->K, a->D) * sizeof *scratch);
    attn_backward(a->dq, a->dk, a->dv, a->dout, a->q, a->k, a->v, a->q_pos, a->nq, a->nk, a->H,
                  a->K, a->D, scratch);
    free(scratch);
    return 0;
}

/* ---------------------------------------------------------------- tensor-core forms */

/* A copy of x (n) rounded to bf16 (xmalloc'd). */
static float *bf16_copy(const float *x, size_t n)
{
    float *y = xmalloc((n ? n : 1) * sizeof *y);
    for (size_t i = 0; i < n; i++) y[i] = ch_bf16r(x[i]);
    return y;
}

static float dot(const float *a, const float *b, int D)
{
    float s = 0.0f;
    for (int d = 0; d < D; d++) s += a[d] * b[d];
    return s;
}

/* The tensor-core forward (flash_fwd_k / flash_paged_k) of query rows q (nq, H*D) of
 * one sequence against its keys kb, vb (rows 0 .. max q_pos, K*D each, already
 * rounded to bf16): per row and head the scores of q (rounded here) in log2 units,
 * keys in tiles of FLASH_KEYS, the running maximum and the rescaling per tile, each
 * probability rounded to bf16 where it meets v while the row's sum takes it unrounded;
 * out = acc / l, and lse (nq, H) the natural log-sum-exp when lse != NULL. */
static void flash_rows(float *out, float *lse, const float *q, const float *kb, const float *vb,
                       const int32_t *q_pos, int nq, int H, int K, int D)
{
    float scale2 = FLASH_LOG2E / sqrtf((float)D), x[FLASH_KEYS];
    float *qb = xmalloc((size_t)D * sizeof *qb), *acc = xmalloc((size_t)D * sizeof *acc);
    int KD = K * D, rep = H / K;
    for (int i = 0; i < nq; i++)
        for (int h = 0; h < H; h++) {
            const float *qi = q + ((size_t)i * H + h) * D;
            for (int d = 0; d < D; d++) qb[d] = ch_bf16r(qi[d]);
            memset(acc, 0, (size_t)D * sizeof *acc);
            float m = -INFINITY, l = 0.0f;
            for (int j0 = 0; j0 <= q_pos[i]; j0 += FLASH_KEYS) {
                int j1 = j0 + FLASH_KEYS <= q_pos[i] + 1 ? j0 + FLASH_KEYS : q_pos[i] + 1;
                float tmax = -INFINITY;
                for (int j = j0; j < j1; j++) {
                    x[j - j0] = dot(qb, kb + (size_t)j * KD + (size_t)(h / rep) * D, D) * scale2;
                    tmax = fmaxf(tmax, x[j - j0]);
                }
                float mn = fmaxf(m, tmax), keep = exp2f(m - mn);
                l *= keep;
                for (int d = 0; d < D; d++) acc[d] *= keep;
                for (int j = j0; j < j1; j++) {
                    float p = exp2f(x[j - j0] - mn), pb = ch_bf16r(p);
                    const float *vj = vb + (size_t)j * KD + (size_t)(h / rep) * D;
                    l += p;
                    for (int d = 0; d < D; d++) acc[d] += pb * vj[d];
                }
                m = mn;
            }
            float *oi = out + ((size_t)i * H + h) * D;
            for (int d = 0; d < D; d++) oi[d] = acc[d] / l;
            if (lse) lse[(size_t)i * H + h] = m / FLASH_LOG2E + logf(l);
        }
    free(qb);
    free(acc);
}

/* Sequence s of a packed batch (its offsets read where the kernel runs, in stream
 * order): its first q and k rows, its rows and keys; -1 if the offsets break the
 * batch's sizes (the kernels would read outside the buffers). */
static int seq_of(const struct attn_args *a, int s, int *q0, int *nq, int *k0, int *nk)
{
    *q0 = a->q_start[s];
    *nq = a->q_start[s + 1] - *q0;
    *k0 = a->k_start[s];
    *nk = a->k_start[s + 1] - *k0;
    if (s == 0 && (*q0 != 0 || *k0 != 0)) return -1;
    if (*nq < 0 || *nk < 0 || *q0 + *nq > a->nq || *k0 + *nk > a->nk) return -1;
    if (s == a->n_seq - 1 && (*q0 + *nq != a->nq || *k0 + *nk != a->nk)) return -1;
    return 0;
}

int ch_flash_fwd(const void *args)
{
    const struct attn_args *a = args;
    size_t nke = (size_t)a->nk * a->K * a->D;
    float *kb = bf16_copy(a->k, nke), *vb = bf16_copy(a->v, nke);
    int rc = 0;
    for (int s = 0; s < a->n_seq && rc == 0; s++) {
        int q0, nq, k0, nk;
        if (seq_of(a, s, &q0, &nq, &k0, &nk)) {
            rc = CH_FAIL("flash_fwd: sequence %d's offsets outside the batch's rows", s);
            break;
        }
        size_t qo = (size_t)q0 * a->H, ko = (size_t)k0 * a->K * a->D;
        flash_rows(a->out + qo * a->D, a->lse ? a->lse + qo : NULL, a->q + qo * a->D, kb + ko,
                   vb + ko, a->q_pos + q0, nq, a->H, a->K, a->D);
    }
    free(kb);
    free(vb);
    return rc;
}

/* flash_bwd (flash_delta_k, flash_dq_k, flash_dkv_k): delta_i = dO_i . O_i in float32
 * (into the caller's scratch, as the kernels keep it); with Q, K, V, dO rounded to
 * bf16, P = exp2(scale log2e Q.K - lse log2e), dS = P (dO.V - delta); dq = scale sum_j
 * bf16(dS) K_j, dk = scale sum_i bf16(dS) Q_i, dv = sum_i bf16(P) dO_i, each sum
 * formed in float32 and then written. */
static void flash_bwd_seq(const struct attn_args *a, int q0, int nq, int k0, int nk)
{
    int H = a->H, K = a->K, D = a->D, KD = K * D, rep = H / K;
    size_t nqe = (size_t)nq * H * D, nke = (size_t)nk * KD, qo = (size_t)q0 * H * D;
    size_t ko = (size_t)k0 * KD;
    float scale = 1.0f / sqrtf((float)D), scale2 = scale * FLASH_LOG2E;
    float *delta = a->scratch + (size_t)q0 * H;
    const float *lse = a->lse_in + (size_t)q0 * H;
    const int32_t *q_pos = a->q_pos + q0;
    for (size_t r = 0; r < (size_t)nq * H; r++)
        delta[r] = dot(a->dout + qo + r * D, a->o + qo + r * D, D);
    float *qb = bf16_copy(a->q + qo, nqe), *db = bf16_copy(a->dout + qo, nqe);
    float *kb = bf16_copy(a->k + ko, nke), *vb = bf16_copy(a->v + ko, nke);
    float *dka = xcalloc(nke ? nke : 1, sizeof *dka), *dva = xcalloc(nke ? nke : 1, sizeof *dva);
    float *dqa = xmalloc((size_t)D * sizeof *dqa);
    for (int i = 0; i < nq; i++)
        for (int h = 0; h < H; h++) {
            size_t row = (size_t)i * H + h, g = (size_t)(h / rep) * D;
            const float *qi = qb + row * D, *di = db + row * D;
            float ls = lse[row] * FLASH_LOG2E;
            memset(dqa, 0, (size_t)D * sizeof *dqa);
            for (int j = 0; j <= q_pos[i]; j++) {
                const float *kj = kb + (size_t)j * KD + g, *vj = vb + (size_t)j * KD + g;
                float p = exp2f(dot(qi, kj, D) * scale2 - ls);
                float ds = ch_bf16r(p * (dot(di, vj, D) - delta[row])), pb = ch_bf16r(p);
                float *dkj = dka + (size_t)j * KD + g, *dvj = dva + (size_t)j * KD + g;
                for (int d = 0; d < D; d++) {
                    dqa[d] += ds * kj[d];
                    dkj[d] += ds * qi[d];
                    dvj[d] += pb * di[d];
                }
            }
            float *dq = a->dq + qo + row * D;
            for (int d = 0; d < D; d++) dq[d] = scale * dqa[d];
        }
    for (size_t e = 0; e < nke; e++) {
        a->dk[ko + e] = scale * dka[e];
        a->dv[ko + e] = dva[e];
    }
    float *bufs[] = {qb, db, kb, vb, dka, dva, dqa};
    for (size_t b = 0; b < sizeof bufs / sizeof bufs[0]; b++) free(bufs[b]);
}

int ch_flash_bwd(const void *args)
{
    const struct attn_args *a = args;
    for (int s = 0; s < a->n_seq; s++) {
        int q0, nq, k0, nk;
        if (seq_of(a, s, &q0, &nq, &k0, &nk))
            return CH_FAIL("flash_bwd: sequence %d's offsets outside the batch's rows", s);
        flash_bwd_seq(a, q0, nq, k0, nk);
    }
    return 0;
}

/* ---------------------------------------------------------------- the paged KV cache */

/* The pool row of token j of a sequence whose block table is tab (blocks of P). */
static size_t paged_row(const int32_t *tab, int j, int P)
{
    return (size_t)tab[j / P] * P + (size_t)(j % P);
}

/* Tokens 0 .. n - 1 of the sequence of block table tab, from the bf16 pool (rows of
 * KD) into out (n, KD), widened to float32. */
static void gather(float *out, const uint16_t *pool, const int32_t *tab, int n, int KD, int P)
{
    for (int j = 0; j < n; j++) {
        const uint16_t *src = pool + paged_row(tab, j, P) * KD;
        float *dst = out + (size_t)j * KD;
        for (int c = 0; c < KD; c++) dst[c] = st_bf16_to_f32(src[c]);
    }
}

/* Writes k and v (KD each) as token len - 1 of the sequence of block table tab,
 * rounded to bf16 (nearest even). */
static void append_row(uint16_t *k_pool, uint16_t *v_pool, const float *k, const float *v,
                       const int32_t *tab, int len, int KD, int P)
{
    size_t row = paged_row(tab, len - 1, P);
    for (int c = 0; c < KD; c++) {
        k_pool[row * KD + c] = st_f32_to_bf16(k[c]);
        v_pool[row * KD + c] = st_f32_to_bf16(v[c]);
    }
}

int ch_prefill_attn(const void *args)
{
    const struct paged_args *a = args;
    int n = 0, KD = a->K * a->D; /* keys: 0 .. the highest position */
    for (int i = 0; i < a->B; i++) n = a->pos[i] + 1 > n ? a->pos[i] + 1 : n;
    float *kb = xmalloc((size_t)n * KD * sizeof *kb), *vb = xmalloc((size_t)n * KD * sizeof *vb);
    gather(kb, a->k_pin, a->table, n, KD, a->P);
    gather(vb, a->v_pin, a->table, n, KD, a->P);
    flash_rows(a->out, NULL, a->q_in, kb, vb, a->pos, a->B, a->H, a->K, a->D);
    free(kb);
    free(vb);
    return 0;
}

int ch_kv_append(const void *args)
{
    const struct paged_args *a = args;
    int KD = a->K * a->D;
    for (int s = 0; s < a->B; s++)
        append_row(a->k_pool, a->v_pool, a->k_in + (size_t)s * KD, a->v_in + (size_t)s * KD,
                   a->table + (size_t)s * a->max_blocks, a->len[s], KD, a->P);
    return 0;
}

int ch_decode_attn(const void *args)
{
    const struct paged_args *a = args;
    int H = a->H, K = a->K, D = a->D, KD = K * D;
    for (int s = 0; s < a->B; s++) {
        int n = a->len[s], pos = n - 1;
        const int32_t *tab = a->table + (size_t)s * a->max_blocks;
        size_t nkd = (size_t)n * KD;
        float *kc = xmalloc(nkd * sizeof *kc), *vc = xmalloc(nkd * sizeof *vc);
        float *scratch = xmalloc(attn_scratch_floats(1, n, H, K, D) * sizeof *scratch);
        gather(kc, a->k_pin, tab, n, KD, a->P);
        gather(vc, a->v_pin, tab, n, KD, a->P);
        attn_forward(a->out + (size_t)s * H * D, a->q_in + (size_t)s * H * D, kc, vc, &pos, 1, n,
                     H, K, D, scratch);
        free(kc), free(vc), free(scratch);
    }
    return 0;
}

/* y (heads, D) = rope_forward(rmsnorm_forward(x) per head with w (NULL: x as it is)) at
 * position pos. */
static void norm_rope(float *y, const float *x, const float *w, int heads, int D, float eps,
                      int pos, const float *rope)
{
    if (w)
        rmsnorm_forward(y, x, w, heads, D, eps);
    else
        memcpy(y, x, (size_t)heads * D * sizeof *y);
    rope_forward(y, &pos, 1, heads, D, rope);
}

int ch_decode_qkv(const void *args)
{
    const struct paged_args *a = args;
    int H = a->H, D = a->D, KD = a->K * D;
    float *qn = a->q_norm ? ch_widen(a->q_norm, (size_t)D) : NULL;
    float *kn = a->k_norm ? ch_widen(a->k_norm, (size_t)D) : NULL;
    float *k = xmalloc((size_t)KD * sizeof *k);
    for (int r = 0; r < a->B; r++) {
        norm_rope(a->q + (size_t)r * H * D, a->q_in + (size_t)r * H * D, qn, H, D, a->eps,
                  a->pos[r], a->rope);
        norm_rope(k, a->k_in + (size_t)r * KD, kn, a->K, D, a->eps, a->pos[r], a->rope);
        append_row(a->k_pool, a->v_pool, k, a->v_in + (size_t)r * KD,
                   a->table + (size_t)r * a->max_blocks, a->len[r], KD, a->P);
    }
    free(qn), free(kn), free(k);
    return 0;
}
