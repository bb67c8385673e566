/*
 * The CUDA attention kernels of the decode path (src/device/cuda/
 * cuda_attention_kernels.cuh) compiled as C11 and run on the CPU
 * (tests/cuda_block_emu.h: a fiber per CUDA thread, a barrier per
 * __syncthreads, a warp's barrier per shuffle), against the CPU references:
 *   kv_append    the new rows rounded as st_f32_to_bf16, exactly, nothing else written
 *   decode_attn  attn_forward of each sequence's last token over its keys widened from
 *                the bf16 pool (blocks shared between sequences, a sequence of one
 *                token and one of 300, head dimensions 40, 64 and 200, query heads
 *                per kv head 3 and 8), the keys in one split, in three and in
 *                DEC_SPLIT_MAX (decode_merge; splits that see no key): 1e-5 of the
 *                largest
 *   decode_qkv   rmsnorm_forward per head, rope_forward, the append: q 1e-6 of the
 *                largest, the pools' new rows within one bf16 ulp, v exact
 *   attn_fwd     attn_forward, causal, D 40 and 130: 1e-5 of the largest
 * This runs the kernels' own code -- their indexing, shuffles, online softmax and
 * merges -- where there is no GPU; test_cuda runs them on the GPU where there is one.
 */

#include <math.h>

#include "cuda_block_emu.h"
#include "../src/model/rope.h"
#include "libra/cpu_ops.h"
#include "libra/rng.h"
#include "libra/safetensors.h"
#include "testutil.h"

#pragma GCC diagnostic ignored "-Wunused-function" /* the training kernels */
#include "../src/device/cuda/cuda_device.cuh"
#include "../src/device/cuda/cuda_attention_kernels.cuh"

/* ---- the pool: B sequences of lengths len over blocks of P tokens ---- */
enum { B = 3, P = 4, NBLK = 9, MAXB = 4 };
static const int32_t seq_len[B] = {13, 1, 6};
/* sequence 2 shares sequence 0's first block (a prompt's prefix) */
static const int32_t table[B][MAXB] = {{0, 1, 2, 3}, {4, 8, 8, 8}, {0, 5, 8, 8}};

struct kv_call {
    uint16_t *kp, *vp;
    const float *kn, *vn;
    int KD;
};
static void run_kv_append(void *p)
{
    const struct kv_call *a = p;
    kv_append_k(a->kp, a->vp, a->kn, a->vn, &table[0][0], MAXB, seq_len, B, a->KD, P);
}

static void test_kv_append(void)
{
    enum { K = 2, D = 40, KD = K * D };
    size_t pool = (size_t)NBLK * P * KD;
    uint16_t *kp = calloc(pool, 2), *vp = calloc(pool, 2);
    float kn[B * KD], vn[B * KD];
    test_fill_uniform(kn, B * KD, 1, 3.0f);
    test_fill_uniform(vn, B * KD, 2, 3.0f);
    struct kv_call call = {kp, vp, kn, vn, KD};
    emu_launch((B * KD + 255) / 256, 256, run_kv_append, &call);
    size_t written = 0, right = 0;
    for (size_t i = 0; i < pool; i++) written += kp[i] != 0 || vp[i] != 0;
    for (int s = 0; s < B; s++) {
        size_t row = paged_row(table[s], seq_len[s] - 1, P);
        for (int c = 0; c < KD; c++)
            right += kp[row * KD + c] == st_f32_to_bf16(kn[s * KD + c]) &&
                     vp[row * KD + c] == st_f32_to_bf16(vn[s * KD + c]);
    }
    CU_ASSERT_EQUAL(right, (size_t)B * KD);
    CU_ASSERT(written <= (size_t)B * KD); /* a value may round to 0 */
    free(kp), free(vp);
}

/* a second pool for decode_attn: a sequence of 300 tokens (about 38 keys a warp, or
 * three splits of 100) and one of 7 sharing its first block */
enum { B2 = 2, MAXB2 = 75, NBLK2 = 76 };
static const int32_t seq_len2[B2] = {300, 7};
static int32_t table2[B2][MAXB2];

struct pool {
    int nseq, maxb, nblk;
    const int32_t *table, *len;
};

struct attn_call {
    float *out, *part;
    const float *q;
    const uint16_t *kp, *vp;
    const struct pool *pl;
    int H, K, D, chunks, S;
};
static void run_decode_attn(void *p)
{
    const struct attn_call *a = p;
    /* the kernel the launcher takes for this head dimension */
    DEC_ATTN_FOR(a->D, a->S)(a->out, a->q, a->kp, a->vp, a->pl->table, a->pl->maxb, a->pl->len, a->H,
                       a->K, a->D, P, a->chunks, 1.0f / sqrtf((float)a->D), a->part);
}
static void run_decode_merge(void *p)
{
    const struct attn_call *a = p;
    decode_merge_k(a->out, a->part, a->D, a->S);
}

/* decode_attn (and decode_merge after S splits) against attn_forward per sequence. */
static void decode_case(const struct pool *pl, int H, int K, int D, int S)
{
    int KD = K * D, G = H / K, chunks = (G + DEC_GMAX - 1) / DEC_GMAX, B = pl->nseq;
    size_t pool = (size_t)pl->nblk * P * KD;
    float *kf = malloc(pool * sizeof *kf), *vf = malloc(pool * sizeof *vf);
    uint16_t *kp = malloc(pool * 2), *vp = malloc(pool * 2);
    float *q = malloc((size_t)B * H * D * sizeof *q), *out = malloc((size_t)B * H * D * sizeof *out);
    float *ref = malloc((size_t)B * H * D * sizeof *ref);
    float *part = malloc((size_t)B * H * S * (D + 2) * sizeof *part);
    test_fill_uniform(kf, pool, 3 + (uint64_t)D, 2.0f);
    test_fill_uniform(vf, pool, 4 + (uint64_t)D, 1.0f);
    test_fill_uniform(q, (size_t)B * H * D, 5 + (uint64_t)D, 2.0f);
    for (size_t i = 0; i < pool; i++) {
        kf[i] = st_bf16_to_f32(kp[i] = st_f32_to_bf16(kf[i]));
        vf[i] = st_bf16_to_f32(vp[i] = st_f32_to_bf16(vf[i]));
    }
    for (int s = 0; s < B; s++) { /* the reference: the sequence's rows gathered */
        int n = pl->len[s], qp = n - 1;
        float *k = malloc((size_t)n * KD * sizeof *k), *v = malloc((size_t)n * KD * sizeof *v);
        float *scr = malloc(attn_scratch_floats(1, n, H, K, D) * sizeof *scr);
        for (int j = 0; j < n; j++) {
            size_t row = paged_row(pl->table + (size_t)s * pl->maxb, j, P);
            memcpy(k + (size_t)j * KD, kf + row * KD, KD * sizeof *k);
            memcpy(v + (size_t)j * KD, vf + row * KD, KD * sizeof *v);
        }
        attn_forward(ref + (size_t)s * H * D, q + (size_t)s * H * D, k, v, &qp, 1, n, H, K, D, scr);
        free(k), free(v), free(scr);
    }
    struct attn_call call = {out, part, q, kp, vp, pl, H, K, D, chunks, S};
    emu_launch_2d((unsigned)(B * K * chunks), (unsigned)S, 32 * DEC_WARPS, run_decode_attn, &call);
    if (S > 1) emu_launch((unsigned)(B * H), (unsigned)D, run_decode_merge, &call);
    char what[64];
    snprintf(what, sizeof what, "H %d K %d D %d, %d split%s, longest %d", H, K, D, S,
             S > 1 ? "s" : "", pl->len[0]);
    test_expect_close(what, out, ref, (size_t)B * H * D, 1e-5);
    free(kf), free(vf), free(kp), free(vp), free(q), free(out), free(ref), free(part);
}

static void test_decode_attn(void)
{
    static const int shapes[][3] = {{6, 2, 40}, {8, 1, 64}, {4, 2, 200}, {8, 2, 128}, {4, 2, 32}};
    for (int j = 0; j < MAXB2; j++) table2[0][j] = j;
    table2[1][0] = 0, table2[1][1] = NBLK2 - 1;
    const struct pool pools[2] = {{B, MAXB, NBLK, &table[0][0], seq_len},
                                  {B2, MAXB2, NBLK2, &table2[0][0], seq_len2}};
    static const int splits[] = {1, 3, DEC_SPLIT_MAX};
    for (int k = 0; k < 2; k++)
        for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
            for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
                if (shapes[c][2] > DEC_MAX_D) continue; /* not in this build (its launcher refuses) */
                decode_case(&pools[k], shapes[c][0], shapes[c][1], shapes[c][2], splits[i]);
            }
}

struct qkv_call {
    float *q;
    uint16_t *kp, *vp;
    const float *ql, *kl, *v, *rope;
    const uint16_t *qn, *kn;
    const int32_t *pos;
    int H, K, D;
};
static void run_decode_qkv(void *p)
{
    const struct qkv_call *a = p;
    decode_qkv_k(a->q, a->kp, a->vp, a->ql, a->kl, a->v, a->qn, a->kn, 1e-6f, a->pos, a->rope,
                 &table[0][0], MAXB, seq_len, a->H, a->K, a->D, P);
}

static void test_decode_qkv(void)
{
    enum { H = 4, K = 2, D = 64, NPOS = 16, KD = K * D };
    const int32_t pos[B] = {12, 0, 5};
    struct tfm_config c = {.family = TFM_QWEN3, .vocab_size = 16, .hidden_size = 64,
                           .n_layers = 1, .n_heads = H, .n_kv_heads = K, .head_dim = D,
                           .intermediate_size = 8, .max_position_embeddings = NPOS,
                           .rms_norm_eps = 1e-6f, .rope_theta = 1e6f};
    float rope[NPOS * D], ql[B * H * D], kl[B * KD], v[B * KD], qn[D], kn[D], q[B * H * D];
    float ref_q[B * H * D], ref_k[B * KD];
    uint16_t qn16[D], kn16[D];
    size_t pool = (size_t)NBLK * P * KD;
    uint16_t *kp = calloc(pool, 2), *vp = calloc(pool, 2);
    rope_table(rope, NPOS, &c);
    test_fill_uniform(ql, B * H * D, 6, 2.0f);
    test_fill_uniform(kl, B * KD, 7, 2.0f);
    test_fill_uniform(v, B * KD, 8, 1.0f);
    test_fill_uniform(qn, D, 9, 1.5f);
    test_fill_uniform(kn, D, 10, 1.5f);
    for (int i = 0; i < D; i++) {
        qn[i] = st_bf16_to_f32(qn16[i] = st_f32_to_bf16(qn[i]));
        kn[i] = st_bf16_to_f32(kn16[i] = st_f32_to_bf16(kn[i]));
    }
    for (int norm = 0; norm < 2; norm++) {
        int ipos[B * H];
        for (int i = 0; i < B * H; i++) ipos[i] = pos[i / H];
        memcpy(ref_q, ql, sizeof ql);
        memcpy(ref_k, kl, sizeof kl);
        if (norm) { /* every head a row of D */
            rmsnorm_forward(ref_q, ql, qn, B * H, D, 1e-6f);
            rmsnorm_forward(ref_k, kl, kn, B * K, D, 1e-6f);
        }
        for (int r = 0; r < B; r++) {
            rope_forward(ref_q + (size_t)r * H * D, &ipos[r * H], 1, H, D, rope);
            rope_forward(ref_k + (size_t)r * KD, &ipos[r * H], 1, K, D, rope);
        }
        struct qkv_call call = {q, kp, vp, ql, kl, v, rope, norm ? qn16 : NULL,
                                norm ? kn16 : NULL, pos, H, K, D};
        emu_launch_2d(B, H + K, ROW_THREADS, run_decode_qkv, &call);
        test_expect_close(norm ? "q, normed" : "q", q, ref_q, B * H * D, 1e-6);
        int far = 0, v_exact = 1;
        for (int s = 0; s < B; s++) {
            size_t row = paged_row(table[s], seq_len[s] - 1, P);
            for (int e = 0; e < KD; e++) {
                int d = (int)kp[row * KD + e] - (int)st_f32_to_bf16(ref_k[s * KD + e]);
                far += d > 1 || d < -1;
                v_exact &= vp[row * KD + e] == st_f32_to_bf16(v[s * KD + e]);
            }
        }
        CU_ASSERT_EQUAL(far, 0);
        CU_ASSERT(v_exact);
    }
    free(kp), free(vp);
}

struct fwd_call {
    float *out;
    const float *q, *k, *v;
    const int32_t *qpos;
    int nq, H, K, D;
};
static void run_attn_fwd(void *p)
{
    const struct fwd_call *a = p;
    attn_fwd_k(a->out, a->q, a->k, a->v, a->qpos, a->nq, a->H, a->K, a->D,
               1.0f / sqrtf((float)a->D));
}

static void test_attn_fwd(void)
{
    enum { N = 7, H = 4, K = 2 };
    static const int dims[] = {40, 130};
    for (size_t c = 0; c < sizeof dims / sizeof dims[0]; c++) {
        int D = dims[c], qpos[N];
        size_t nq = (size_t)N * H * D, nk = (size_t)N * K * D;
        float *q = malloc(nq * sizeof *q), *k = malloc(nk * sizeof *k), *v = malloc(nk * sizeof *v);
        float *out = malloc(nq * sizeof *out), *ref = malloc(nq * sizeof *ref);
        float *scr = malloc(attn_scratch_floats(N, N, H, K, D) * sizeof *scr);
        for (int i = 0; i < N; i++) qpos[i] = (i * 3) % N; /* causal, rows in any order */
        test_fill_uniform(q, nq, 11, 2.0f);
        test_fill_uniform(k, nk, 12, 2.0f);
        test_fill_uniform(v, nk, 13, 1.0f);
        attn_forward(ref, q, k, v, qpos, N, N, H, K, D, scr);
        struct fwd_call call = {out, q, k, v, qpos, N, H, K, D};
        emu_launch((N * H + ATT_WARPS - 1) / ATT_WARPS, 32 * ATT_WARPS, run_attn_fwd, &call);
        test_expect_close(D == 40 ? "D 40" : "D 130", out, ref, nq, 1e-5);
        free(q), free(k), free(v), free(out), free(ref), free(scr);
    }
}

int main(void)
{
    static const struct test_case tc[] = {
        {"kv_append: the new rows, rounded, nothing else", test_kv_append},
        {"decode_attn (+ decode_merge) vs attn_forward over the paged pool", test_decode_attn},
        {"decode_qkv vs rmsnorm_forward, rope_forward and the append", test_decode_qkv},
        {"attn_fwd vs attn_forward", test_attn_fwd},
        {NULL, NULL}};
    static const struct test_suite suites[] = {
        {"the CUDA decode kernels on CPU threads", tc}, {NULL, NULL}};
    return test_main(suites);
}
