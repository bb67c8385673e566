/*
 * The CUDA output-head kernels (src/device/cuda/cuda_logsoftmax_kernels.cuh) compiled
 * as C11 and run on CPU threads (tests/cuda_block_emu.h), against the CPU references
 * of include/libra/cpu_ops.h, rows of 3,001 ids at T = 0.8, targets of -1 and at both
 * ends of the row, a row whose dlogprob is 0 and one whose entropy weight is 0:
 *   logsoftmax_fwd / _bwd        logsoftmax_forward / _backward: 2e-6 / 1e-6 of the
 *                                largest; the forward's row statistics
 *                                logsoftmax_row_stats' (max exact, log-sum 1e-12), and
 *                                the backward from them the bits of the one without
 *   vocab_max, vocab_sums, vocab_logsoftmax_bwd   3 ranks' columns combined as the
 *                                group's all-reduces would: log-probs and entropies
 *                                1e-5, the backward 1e-6 of the largest
 *   entropy_bwd, vocab_entropy_bwd   entropy_backward: 1e-6 of the largest, H 1e-9
 *   the backwards' bf16 form     the float32 form's terms (added to zeros) rounded by
 *                                st_f32_to_bf16, bit for bit, written over old values
 *   the target's term last       both backwards: the bits of the row's own terms, then
 *                                the target's added (check_target_last)
 * The kernels' own code, where there is no GPU; test_cuda runs them on the GPU.
 */

#include <math.h>

#include "cuda_block_emu.h"
#include "libra/cpu_ops.h"
#include "libra/rng.h"
#include "libra/safetensors.h"
#include "testutil.h"

#include "../src/device/cuda/cuda_device.cuh"
#include "../src/device/cuda/cuda_logsoftmax_kernels.cuh"

enum { N = 7, V = 3001, S = 3 };
static const float temp = 0.8f;
static const int32_t tgt[N] = {3, -1, 100, 3000, 0, 1500, 7};
static const float dlp[N] = {0.5f, 0.75f, -0.25f, 1.0f, 0.0f, 0.125f, 2.0f};
static const float ew[N] = {0.5f, 0.0f, -0.25f, 1.0f, 0.125f, 2.0f, 0.3f};

/* One call of any of the kernels (kind), its arguments by name. */
struct head_call {
    int kind;
    float *lp, *ent, *d, *mx_out;
    uint16_t *d16; /* the backwards' bf16 form (d NULL) */
    double *H, *sums, *lsum_out;
    const float *x, *dlp, *ew, *mx;
    const int32_t *tgt;
    const double *lsum, *H_in;
    int V;
};
enum { FWD, BWD, VMAX, VSUMS, VBWD, ENT, VENT };

static void run_head(void *p)
{
    const struct head_call *a = p;
    switch (a->kind) {
    case FWD:
        logsoftmax_fwd_k(a->lp, a->ent, a->mx_out, a->lsum_out, a->x, a->tgt, a->V, temp);
        break;
    case BWD:
        logsoftmax_bwd_k(a->d, a->d16, a->dlp, a->x, a->tgt, a->mx, a->lsum, a->V, temp);
        break;
    case VMAX: vocab_max_k(a->mx_out, a->x, a->V, temp); break;
    case VSUMS: vocab_sums_k(a->sums, a->x, a->mx, a->tgt, a->V, temp); break;
    case VBWD:
        vocab_logsoftmax_bwd_k(a->d, a->d16, a->dlp, a->x, a->tgt, a->mx, a->lsum, a->V, temp);
        break;
    case ENT: entropy_bwd_k(a->d, a->H, a->ew, a->x, a->V, temp); break;
    default: vocab_entropy_bwd_k(a->d, a->ew, a->x, a->mx, a->lsum, a->H_in, a->V, temp); break;
    }
}

static void launch(struct head_call *c) { emu_launch(N, LS_THREADS, run_head, c); }

/* A backward (kind BWD or VBWD over rows x of Vv columns, targets t, the scales dl)
 * adds the target's term after the row's own: over the same old values, every element
 * has the bits of a run whose targets are one column on, the target's plus (float) c
 * added last. Thread 0 adds it to an element another thread has just updated: without
 * the barrier between, the two updates race on a GPU, and here (the first warp running
 * ahead) the addition comes first, which the bits show. */
static void check_target_last(int kind, const float *x, int Vv, const int32_t *t,
                              const float *dl, const float *mx, const double *lsum)
{
    size_t n = (size_t)N * Vv;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    int32_t t2[N];
    for (int i = 0; i < N; i++) t2[i] = t[i] < 0 ? -1 : (t[i] + 1) % Vv;
    test_fill_uniform(a, n, 9, 1e-3f);
    memcpy(b, a, n * sizeof *a);
    struct head_call c = {.kind = kind, .d = a, .x = x, .dlp = dl, .tgt = t, .mx = mx,
                          .lsum = lsum, .V = Vv};
    launch(&c);
    c.d = b, c.tgt = t2;
    launch(&c);
    size_t bad = 0, added = 0;
    for (int i = 0; i < N; i++) {
        int live = dl[i] != 0.0f;
        for (int j = 0; j < Vv; j++) {
            float want = b[(size_t)i * Vv + j];
            if (live && j == t2[i]) continue; /* b's own target */
            if (live && j == t[i]) want += (float)((double)dl[i] / temp), added++;
            bad += memcmp(&a[(size_t)i * Vv + j], &want, sizeof want) != 0;
        }
    }
    CU_ASSERT(added >= 3);
    CU_ASSERT_EQUAL(bad, 0);
    free(a), free(b);
}

/* Rank r's columns of rows x (N, V) into xs (N, Vl); back with `back`. */
static void columns(float *xs, float *x, int r, int back)
{
    int c0 = r * V / S, Vl = (r + 1) * V / S - c0;
    for (int i = 0; i < N; i++) {
        float *row = x + (size_t)i * V + c0, *loc = xs + (size_t)i * Vl;
        memcpy(back ? row : loc, back ? loc : row, Vl * sizeof *xs);
    }
}

static void test_logsoftmax(void)
{
    size_t n = (size_t)N * V;
    float *x = malloc(n * sizeof *x), *d = malloc(n * sizeof *d), *ref = malloc(n * sizeof *ref);
    float lp[N], ent[N], ref_lp[N], ref_ent[N];
    test_fill_uniform(x, n, 1, 6.0f);
    test_fill_uniform(d, n, 2, 1e-3f);
    memcpy(ref, d, n * sizeof *d);
    logsoftmax_forward(ref_lp, ref_ent, x, tgt, N, V, temp);
    logsoftmax_backward(ref, dlp, x, tgt, N, V, temp);
    struct head_call c = {.kind = FWD, .lp = lp, .ent = ent, .x = x, .tgt = tgt, .V = V};
    launch(&c);
    test_expect_close("log-probs", lp, ref_lp, N, 2e-6);
    test_expect_close("entropies", ent, ref_ent, N, 2e-6);
    c = (struct head_call){.kind = BWD, .d = d, .x = x, .dlp = dlp, .tgt = tgt, .V = V};
    launch(&c);
    test_expect_close("backward", d, ref, n, 1e-6);
    /* the bf16 form: the float32 terms on zeros, rounded, over old values */
    uint16_t *d16 = malloc(n * 2), *want = malloc(n * 2);
    memset(d, 0, n * sizeof *d);
    launch(&c);
    st_f32_to_bf16_n(d, want, n);
    for (size_t i = 0; i < n; i++) d16[i] = 0x7fc1;
    c.d = NULL, c.d16 = d16;
    launch(&c);
    CU_ASSERT(memcmp(d16, want, n * 2) == 0);
    /* the forward's row statistics: logsoftmax_row_stats', and the backward reading them
     * gives the bits of the one that forms them, both forms */
    float mx[N], ref_mx[N];
    double lsum[N], ref_lsum[N];
    c = (struct head_call){.kind = FWD, .lp = lp, .mx_out = mx, .lsum_out = lsum, .x = x,
                           .tgt = tgt, .V = V};
    launch(&c);
    for (int i = 0; i < N; i++) {
        logsoftmax_row_stats(x + (size_t)i * V, V, temp, &ref_mx[i], &ref_lsum[i]);
        CU_ASSERT_EQUAL(mx[i], ref_mx[i]);
        CU_ASSERT(fabs(lsum[i] - ref_lsum[i]) <= 1e-12 * fabs(ref_lsum[i]));
    }
    float *d2 = calloc(n, sizeof *d2);
    c = (struct head_call){.kind = BWD, .d = d2, .x = x, .dlp = dlp, .tgt = tgt, .mx = mx,
                           .lsum = lsum, .V = V};
    launch(&c);
    CU_ASSERT(memcmp(d2, d, n * sizeof *d) == 0); /* d: the terms on zeros, above */
    for (size_t i = 0; i < n; i++) d16[i] = 0x7fc1;
    c.d = NULL, c.d16 = d16;
    launch(&c);
    CU_ASSERT(memcmp(d16, want, n * 2) == 0);
    check_target_last(BWD, x, V, tgt, dlp, NULL, NULL);
    free(x), free(d), free(ref), free(d16), free(want), free(d2);
}

static void test_vocab_parallel(void)
{
    size_t n = (size_t)N * V;
    float *x = malloc(n * sizeof *x), *d = malloc(n * sizeof *d), *ref = malloc(n * sizeof *ref);
    float *xs = malloc(n * sizeof *xs), *ds = malloc(n * sizeof *ds);
    float ref_lp[N], ref_ent[N], mx[N], m[N];
    double sums[3 * N] = {0}, s[3 * N], lsum[N];
    float vdlp[N]; /* the trainer's rule: no dlogprob without a target */
    for (int i = 0; i < N; i++) vdlp[i] = tgt[i] < 0 ? 0.0f : dlp[i];
    test_fill_uniform(x, n, 3, 6.0f);
    test_fill_uniform(d, n, 4, 1e-3f);
    memcpy(ref, d, n * sizeof *d);
    logsoftmax_forward(ref_lp, ref_ent, x, tgt, N, V, temp);
    logsoftmax_backward(ref, vdlp, x, tgt, N, V, temp);
    for (int i = 0; i < N; i++) mx[i] = -INFINITY;
    for (int pass = 0; pass < 3; pass++)
        for (int r = 0; r < S; r++) {
            int c0 = r * V / S, Vl = (r + 1) * V / S - c0;
            int32_t lt[N];
            for (int i = 0; i < N; i++) lt[i] = tgt[i] >= c0 && tgt[i] < c0 + Vl ? tgt[i] - c0 : -1;
            columns(xs, x, r, 0);
            struct head_call c = {.x = xs, .V = Vl, .tgt = lt, .mx = mx, .mx_out = m,
                                  .sums = s, .d = ds, .dlp = vdlp, .lsum = lsum};
            c.kind = pass == 0 ? VMAX : pass == 1 ? VSUMS : VBWD;
            if (pass == 2) columns(ds, d, r, 0);
            launch(&c);
            for (int i = 0; i < N; i++) {
                if (pass == 0) mx[i] = fmaxf(mx[i], m[i]);
                for (int k = 0; pass == 1 && k < 3; k++) sums[3 * i + k] += s[3 * i + k];
                if (pass == 1 && r == S - 1) lsum[i] = log(sums[3 * i]); /* the host's part */
            }
            if (pass == 2) columns(ds, d, r, 1);
        }
    double worst = 0;
    for (int i = 0; i < N; i++) {
        float lp = tgt[i] < 0 ? 0.0f : (float)(sums[3 * i + 2] - log(sums[3 * i]));
        float ent = (float)(log(sums[3 * i]) - sums[3 * i + 1] / sums[3 * i]);
        worst = test_worse(worst, fabs(lp - ref_lp[i]) + fabs(ent - ref_ent[i]));
    }
    printf("[log-probs and entropies %.1e] ", worst);
    CU_ASSERT(worst <= 1e-5);
    test_expect_close("backward", d, ref, n, 1e-6);
    /* each shard's bf16 form: its float32 terms on zeros, rounded */
    uint16_t *d16 = malloc(n * 2), *want = malloc(n * 2);
    for (int r = 0; r < S; r++) {
        int c0 = r * V / S, Vl = (r + 1) * V / S - c0;
        int32_t lt[N];
        for (int i = 0; i < N; i++) lt[i] = tgt[i] >= c0 && tgt[i] < c0 + Vl ? tgt[i] - c0 : -1;
        columns(xs, x, r, 0);
        memset(ds, 0, n * sizeof *ds);
        struct head_call c = {.kind = VBWD, .x = xs, .V = Vl, .tgt = lt, .mx = mx, .d = ds,
                              .dlp = vdlp, .lsum = lsum};
        launch(&c);
        st_f32_to_bf16_n(ds, want, (size_t)N * Vl);
        for (size_t i = 0; i < (size_t)N * Vl; i++) d16[i] = 0x7fc1;
        c.d = NULL, c.d16 = d16;
        launch(&c);
        CU_ASSERT(memcmp(d16, want, (size_t)N * Vl * 2) == 0);
        if (r == 0) check_target_last(VBWD, xs, Vl, lt, vdlp, mx, lsum);
    }
    free(x), free(d), free(ref), free(xs), free(ds), free(d16), free(want);
}

static void test_entropy(void)
{
    size_t n = (size_t)N * V;
    float *x = malloc(n * sizeof *x), *d = malloc(n * sizeof *d), *ref = malloc(n * sizeof *ref);
    float *d0 = malloc(n * sizeof *d0), *xs = malloc(n * sizeof *xs), *ds = malloc(n * sizeof *ds);
    double H[N], H_ref[N], lsum[N];
    float mx[N];
    test_fill_uniform(x, n, 5, 6.0f);
    test_fill_uniform(d0, n, 6, 1e-3f);
    memcpy(ref, d0, n * sizeof *d0);
    memcpy(d, d0, n * sizeof *d0);
    entropy_backward(ref, H_ref, ew, x, N, V, temp);
    for (int i = 0; i < N; i++) H[i] = NAN; /* every row's is written */
    struct head_call c = {.kind = ENT, .d = d, .H = H, .ew = ew, .x = x, .V = V};
    launch(&c);
    double h_err = 0;
    for (int i = 0; i < N; i++) h_err = test_worse(h_err, fabs(H[i] - H_ref[i]));
    printf("[H %.1e] ", h_err);
    CU_ASSERT(h_err <= 1e-9);
    CU_ASSERT_EQUAL(H[1], 0.0);
    test_expect_close("entropy_bwd", d, ref, n, 1e-6);
    for (int i = 0; i < N; i++) { /* the whole rows' statistics, as the group forms them */
        const float *xi = x + (size_t)i * V;
        double sum = 0;
        mx[i] = -INFINITY;
        for (int j = 0; j < V; j++) mx[i] = fmaxf(mx[i], xi[j] / temp);
        for (int j = 0; j < V; j++) sum += exp((double)(xi[j] / temp - mx[i]));
        lsum[i] = log(sum);
    }
    memcpy(d, d0, n * sizeof *d0);
    for (int r = 0; r < S; r++) {
        columns(xs, x, r, 0);
        columns(ds, d, r, 0);
        c = (struct head_call){.kind = VENT, .d = ds, .ew = ew, .x = xs, .mx = mx, .lsum = lsum,
                               .H_in = H_ref, .V = (r + 1) * V / S - r * V / S};
        launch(&c);
        columns(ds, d, r, 1);
    }
    test_expect_close("vocab_entropy_bwd", d, ref, n, 1e-6);
    free(x), free(d), free(ref), free(d0), free(xs), free(ds);
}

int main(void)
{
    static const struct test_case tc[] = {
        {"logsoftmax_fwd / _bwd vs logsoftmax_forward / _backward", test_logsoftmax},
        {"vocab_max, vocab_sums, vocab_logsoftmax_bwd over 3 ranks' columns", test_vocab_parallel},
        {"entropy_bwd and vocab_entropy_bwd vs entropy_backward", test_entropy},
        {NULL, NULL}};
    static const struct test_suite suites[] = {
        {"the CUDA output-head kernels on CPU threads", tc}, {NULL, NULL}};
    return test_main(suites);
}
