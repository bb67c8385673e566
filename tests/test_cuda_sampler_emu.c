/*
 * The GPU sampler's kernel (src/device/cuda/cuda_sampler_kernel.cuh) compiled as C11
 * and run on the CPU (tests/cuda_block_emu.h: a fiber per CUDA thread of a block, a
 * barrier at every __syncthreads), against sampler_sample: the same tokens
 * and log-probs (1e-5 relative) under greedy, temperature, top-k, top-p and both.
 * This tests the kernel's own code -- its radix selection, id-ordered gathers, bitonic
 * sort and nucleus walk, and its barriers -- without a GPU; test_cuda runs the same
 * cases on the GPU itself where there is one.
 *
 * Rows (V = 151,936 unless said): a flat row (every id survives top-p's cutoff: the
 * sort over all V, ties ordered by id), logits in steps of 0.5 (ties across the k-th
 * place), 20 finite ids among -inf ones (top-k takes ids of p = 0, by id), ten ids
 * tied on top, two rows of normal logits; vocabularies of 1,001, 50 (threads with
 * no ids) and 2; and a row whose top-p survivors round short of top_p, so the kernel
 * redoes the nucleus over all ids (tests/top_p_short_row.h).
 */

#include <math.h>

#include "cuda_block_emu.h"
#include "libra/cuda_api.h"
#include "libra/rng.h"
#include "libra/rng_core.h"
#include "libra/sampler.h"
#include "testutil.h"
#include "top_p_short_row.h"

#include "../src/device/cuda/cuda_device.cuh"
#include "../src/device/cuda/cuda_sampler_kernel.cuh"

struct sample_call {
    int32_t *tok;
    float *logprob;
    const float *logits;
    int V;
    const int64_t *traj, *pos;
    const struct sampler_config *sc;
    float *scratch;
};

static void run_kernel(void *p)
{
    const struct sample_call *a = p;
    sample_k(a->tok, a->logprob, a->logits, a->V, a->traj, a->pos, a->sc->temperature,
             a->sc->top_k, a->sc->top_p, a->sc->seed, a->scratch);
}

static const struct sampler_config cases[] = {
    {0.0f, 1.0f, 0, 42},   {0.7f, 1.0f, 0, 42},    {1.0f, 1.0f, 0, 42},   {1.0f, 1.0f, 1, 42},
    {0.7f, 1.0f, 50, 42},  {1.0f, 1.0f, 1000, 9},  {1.0f, 0.9f, 0, 42},   {0.7f, 0.5f, 0, 9},
    {1.0f, 0.999f, 0, 42}, {1.0f, 0.8f, 50, 42},   {2.0f, 0.95f, 200, 9}, {1.0f, 0.01f, 0, 5},
    {1.0f, 0.3f, 3, 6},    {1.0f, 1.0f, 151935, 4},
};

/* Every case on the B rows of V logits; the number of rows that differ. */
static int compare(const float *logits, int B, int V)
{
    int64_t traj[8], pos[8];
    int32_t tok[8];
    float lp[8];
    float *scratch = malloc(CUDA_SAMPLE_SCRATCH * (size_t)B * V * sizeof *scratch);
    float *ref_scratch = malloc(2 * (size_t)V * sizeof *ref_scratch);
    for (int b = 0; b < B; b++) traj[b] = 1000 + 7 * b, pos[b] = 3 * b + 11;
    int bad = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const struct sampler_config *sc = &cases[c];
        struct sample_call call = {tok, lp, logits, V, traj, pos, sc, scratch};
        emu_launch((unsigned)B, SAMP_THREADS, run_kernel, &call);
        for (int b = 0; b < B; b++) {
            float ref_lp;
            int32_t want = sampler_sample(sc, logits + (size_t)b * V, V, traj[b], pos[b],
                                          &ref_lp, ref_scratch);
            if (tok[b] == want && fabsf(lp[b] - ref_lp) <= 1e-5f * fmaxf(1.0f, fabsf(ref_lp)))
                continue;
            bad++;
            fprintf(stderr, "\nV %d T %g top-k %d top-p %g row %d: token %d (%g), "
                    "sampler_sample %d (%g)\n", V, (double)sc->temperature, sc->top_k,
                    (double)sc->top_p, b, tok[b], (double)lp[b], want, (double)ref_lp);
        }
    }
    free(scratch);
    free(ref_scratch);
    return bad;
}

static float normal(uint64_t *h)
{
    double u[2];
    for (int k = 0; k < 2; k++) {
        *h ^= *h << 13, *h ^= *h >> 7, *h ^= *h << 17;
        u[k] = ((double)(*h >> 11) + 0.5) / 9007199254740992.0;
    }
    return (float)(sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]));
}

static void test_vocabulary(void)
{
    enum { B = 6, V = 151936 };
    float *x = malloc((size_t)B * V * sizeof *x);
    uint64_t h = 88172645463325252ULL;
    for (size_t i = 0; i < (size_t)B * V; i++) x[i] = 2.0f * normal(&h);
    for (int i = 0; i < V; i++) {
        x[i] = 0.25f;                                             /* flat */
        x[V + i] = 0.5f * roundf(2.0f * x[V + i]);                /* ties */
        if (i % 7597 != 3) x[2 * (size_t)V + i] = -INFINITY;      /* 20 finite ids */
        if (i % 15000 == 11) x[3 * (size_t)V + i] = 9.0f;         /* ten on top */
    }
    CU_ASSERT(compare(x, B, V) == 0);
    free(x);
}

/* ---- the vocabulary-parallel kernels: t ranks' columns of the same rows, each rank's
 * kernels run on its columns, the slots summed as the group's all-reduce would ---- */

struct vocab_call {
    int kind; /* 0 greedy stats, 1 max, 2 sums, 3 pick, 4 top-k */
    double *out;
    float *p;
    const float *logits;
    const double *mx, *plan;
    int Vl, v0, slot, slots;
    float temperature;
    int kr, off, n; /* top-k */
};

static void run_vocab(void *a_)
{
    const struct vocab_call *a = a_;
    if (a->kind == 0) vocab_greedy_k(a->out, a->logits, a->Vl, a->v0, a->slot, a->slots);
    else if (a->kind == 1) vocab_sample_max_k(a->out, a->logits, a->Vl, a->temperature);
    else if (a->kind == 2)
        vocab_sample_sums_k(a->out, a->p, a->logits, a->mx, a->Vl, a->temperature, a->slot,
                            a->slots);
    else if (a->kind == 3)
        vocab_sample_pick_k(a->out, a->logits, a->p, a->plan, a->mx, a->Vl, a->v0, a->temperature);
    else
        vocab_sample_topk_k(a->out, a->p, a->logits, a->mx, a->Vl, a->v0, a->temperature, a->kr,
                            a->off, a->n, a->slot, a->slots);
}

/* Top-k (then top-p) over t ranks' columns: each rank's max and candidates, the
 * candidates merged by sampler_tp_top_k_pick, against sampler_sample on the whole rows:
 * the number of rows that differ. */
static int compare_vocab_topk(const float *logits, int B, int V, int t,
                              const struct sampler_config *sc)
{
    enum { TMAX = 4, BMAX = 8 };
    int v0[TMAX + 1], kr[TMAX], off[TMAX], n = 0;
    for (int r = 0; r <= t; r++) v0[r] = (int)((int64_t)r * V / t);
    for (int r = 0; r < t; r++) {
        int Vl = v0[r + 1] - v0[r];
        kr[r] = sc->top_k < Vl ? sc->top_k : Vl;
        off[r] = n;
        n += kr[r];
    }
    int w = t + 2 * n;
    double *rows = calloc((size_t)B * w, sizeof *rows);
    double *part = malloc((size_t)B * w * sizeof *part), gmx[BMAX], m[BMAX];
    float *loc = malloc((size_t)B * V * sizeof *loc), *pick = malloc(2 * (size_t)n * sizeof *pick);
    float *scr = malloc(2 * (size_t)B * V * sizeof *scr);
    float *ref_scr = malloc(2 * (size_t)V * sizeof *ref_scr);
    for (int b = 0; b < B; b++) gmx[b] = -INFINITY;
    for (int pass = 1; pass <= 4; pass += 3)
        for (int r = 0; r < t; r++) {
            int Vl = v0[r + 1] - v0[r];
            for (int b = 0; b < B; b++)
                memcpy(loc + (size_t)b * Vl, logits + (size_t)b * V + v0[r], Vl * sizeof *loc);
            struct vocab_call call = {pass, pass == 1 ? m : part, scr, loc, gmx, NULL, Vl,
                                      v0[r], r, t, sc->temperature, kr[r], off[r], n};
            emu_launch((unsigned)B, SAMP_THREADS, run_vocab, &call);
            for (int b = 0; b < B; b++) {
                if (pass == 1) gmx[b] = fmax(gmx[b], m[b]); /* the max all-reduce */
                for (int q = 0; pass == 4 && q < w; q++)
                    rows[(size_t)b * w + q] += part[(size_t)b * w + q];
            }
        }
    int bad = 0;
    for (int b = 0; b < B; b++) {
        struct rng g;
        float lp, ref_lp;
        rng_init(&g, sc->seed, 1000 + 7 * b, 3 * b + 11, SAMPLER_PURPOSE);
        int32_t tok = sampler_tp_top_k_pick(sc, rows + (size_t)b * w, t, n, &g, &lp, pick);
        int32_t want = sampler_sample(sc, logits + (size_t)b * V, V, 1000 + 7 * b, 3 * b + 11,
                                      &ref_lp, ref_scr);
        if (tok == want && fabsf(lp - ref_lp) <= 1e-5f * fmaxf(1.0f, fabsf(ref_lp))) continue;
        bad++;
        fprintf(stderr, "\nV %d over %d ranks, top-k %d, row %d: token %d, sampler_sample %d\n", V,
                t, sc->top_k, b, tok, want);
    }
    free(rows), free(part), free(loc), free(scr), free(pick), free(ref_scr);
    return bad;
}

/* Rows sampled over t ranks' columns (greedy or plain temperature), against
 * sampler_sample on the whole rows: the number of rows that differ. */
static int compare_vocab(const float *logits, int B, int V, int t, const struct sampler_config *sc)
{
    enum { TMAX = 4, BMAX = 8 };
    float *loc[TMAX], *p[TMAX];
    double xb[TMAX][BMAX * 3 * TMAX], mx[TMAX][BMAX], res[TMAX][BMAX * 2], plan[TMAX][BMAX * 4];
    double slots[BMAX * 3 * TMAX] = {0}, gmx[BMAX], sum_res[BMAX * 2] = {0};
    int v0[TMAX + 1], width = sc->temperature > 0 ? 2 : 3;
    for (int r = 0; r <= t; r++) v0[r] = (int)((int64_t)r * V / t);
    for (int r = 0; r < t; r++) {
        int Vl = v0[r + 1] - v0[r];
        loc[r] = malloc((size_t)B * Vl * sizeof **loc);
        p[r] = malloc((size_t)B * Vl * sizeof **p);
        for (int b = 0; b < B; b++)
            memcpy(loc[r] + (size_t)b * Vl, logits + (size_t)b * V + v0[r], Vl * sizeof **loc);
    }
    for (int b = 0; b < B; b++) gmx[b] = -INFINITY;
    for (int pass = sc->temperature > 0 ? 1 : 0; pass < (sc->temperature > 0 ? 4 : 1); pass++)
        for (int r = 0; r < t; r++) {
            int Vl = v0[r + 1] - v0[r];
            double *out = pass == 1 ? mx[r] : pass == 3 ? res[r] : xb[r];
            struct vocab_call call = {pass, out, p[r], loc[r], gmx, plan[r], Vl, v0[r], r, t,
                                      sc->temperature, 0, 0, 0};
            emu_launch((unsigned)B, SAMP_THREADS, run_vocab, &call);
            for (int b = 0; b < B; b++) {
                if (pass == 1) gmx[b] = fmax(gmx[b], mx[r][b]); /* the max all-reduce */
                for (int q = 0; pass != 1 && pass != 3 && q < width * t; q++)
                    slots[b * width * t + q] += xb[r][b * width * t + q];
                for (int q = 0; pass == 3 && q < 2; q++) sum_res[2 * b + q] += res[r][2 * b + q];
            }
            if (pass == 2 && r == t - 1) /* every rank's plan from the summed slots */
                for (int b = 0; b < B; b++) {
                    struct rng g;
                    struct sampler_tp_draw d;
                    rng_init(&g, sc->seed, 1000 + 7 * b, 3 * b + 11, SAMPLER_PURPOSE);
                    int owner = sampler_tp_owner(slots + b * 2 * t, t, rng_uniform(&g), &d);
                    for (int q = 0; q < t; q++) {
                        double *pl = plan[q] + 4 * b;
                        pl[0] = q == owner, pl[1] = d.u, pl[2] = d.own_start, pl[3] = d.total_exact;
                    }
                }
        }
    int bad = 0;
    float *ref_scratch = malloc(2 * (size_t)V * sizeof *ref_scratch);
    for (int b = 0; b < B; b++) {
        float lp, ref_lp;
        int32_t tok = sc->temperature > 0 ? (int32_t)sum_res[2 * b]
                                          : sampler_tp_greedy_pick(slots + b * 3 * t, t, &lp);
        if (sc->temperature > 0) lp = (float)sum_res[2 * b + 1];
        int32_t want = sampler_sample(sc, logits + (size_t)b * V, V, 1000 + 7 * b, 3 * b + 11,
                                      &ref_lp, ref_scratch);
        if (tok == want && fabsf(lp - ref_lp) <= 1e-5f * fmaxf(1.0f, fabsf(ref_lp))) continue;
        bad++;
        fprintf(stderr,
                "\nV %d over %d ranks, T %g, row %d: token %d (%g), sampler_sample %d (%g)\n",
                V, t, (double)sc->temperature, b, tok, (double)lp, want, (double)ref_lp);
    }
    for (int r = 0; r < t; r++) free(loc[r]), free(p[r]);
    free(ref_scratch);
    return bad;
}

static void test_vocab_parallel(void)
{
    enum { B = 6, V = 151936 };
    float *x = malloc((size_t)B * V * sizeof *x);
    uint64_t h = 4242;
    for (size_t i = 0; i < (size_t)B * V; i++) x[i] = 2.0f * normal(&h);
    for (int i = 0; i < V; i++) {
        x[i] = 0.25f;
        x[V + i] = 0.5f * roundf(2.0f * x[V + i]);
        if (i % 7597 != 3 || i > V / 2) x[2 * (size_t)V + i] = -INFINITY; /* ranks of -inf */
        if (i % 15000 == 11) x[3 * (size_t)V + i] = 9.0f;
    }
    static const struct sampler_config sc[] = {{0.0f, 1.0f, 0, 42}, {1.0f, 1.0f, 0, 42},
                                               {0.7f, 1.0f, 0, 9}};
    for (size_t k = 0; k < sizeof sc / sizeof sc[0]; k++)
        CU_ASSERT(compare_vocab(x, B, V, 3, &sc[k]) == 0);
    static const struct sampler_config topk[] = {{1.0f, 1.0f, 5, 42}, {0.7f, 0.8f, 200, 9}};
    for (size_t k = 0; k < sizeof topk / sizeof topk[0]; k++)
        CU_ASSERT(compare_vocab_topk(x, B, V, 3, &topk[k]) == 0);
    uint64_t h2 = 99;
    float y[3 * 50];
    for (int i = 0; i < 3 * 50; i++) y[i] = normal(&h2);
    for (int t = 2; t <= 4; t += 2)
        for (size_t k = 0; k < sizeof sc / sizeof sc[0]; k++)
            CU_ASSERT(compare_vocab(y, 3, 50, t, &sc[k]) == 0);
    free(x);
}

static void test_small(void)
{
    static const int vocab[] = {1001, 50, 2};
    for (size_t k = 0; k < sizeof vocab / sizeof vocab[0]; k++) {
        int V = vocab[k], B = 3;
        float *x = malloc((size_t)B * V * sizeof *x);
        uint64_t h = 1234567 + k;
        for (int i = 0; i < B * V; i++) x[i] = 1.5f * normal(&h);
        for (int i = 0; i < V; i++) x[V + i] = 0.5f * roundf(x[V + i]); /* ties */
        CU_ASSERT(compare(x, B, V) == 0);
        free(x);
    }
}

/* Survivors short of top_p through rounding (tests/top_p_short_row.h), two rows: the
 * kernel redoes the nucleus over all ids -- its candidates come back as every id in
 * order and the sorted p beside them, where the scratch was NaN (-1 as ids) before --
 * and draws what sampler_sample draws. */
static void test_top_p_short(void)
{
    enum { B = 2, V = SHORT_ROW_V };
    float *x = malloc((size_t)B * V * sizeof *x);
    float *scratch = malloc(CUDA_SAMPLE_SCRATCH * (size_t)B * V * sizeof *scratch);
    float *ref_scratch = malloc(2 * (size_t)V * sizeof *ref_scratch);
    CU_ASSERT_FATAL(short_row_is_short());
    short_row_fill(x);
    memcpy(x + V, x, V * sizeof *x);
    memset(scratch, 0xff, CUDA_SAMPLE_SCRATCH * (size_t)B * V * sizeof *scratch);
    int64_t traj[B] = {5, 6}, pos[B] = {40, 41};
    int32_t tok[B];
    float lp[B];
    struct sample_call call = {tok, lp, x, V, traj, pos, &short_row_config, scratch};
    emu_launch(B, SAMP_THREADS, run_kernel, &call);
    for (int b = 0; b < B; b++) {
        const float *p = scratch + (size_t)b * CUDA_SAMPLE_SCRATCH * V;
        const float *q = p + 2 * (size_t)V;
        CU_ASSERT(short_row_all_ids(p + V, 0));
        CU_ASSERT(memcmp(q, p, V * sizeof *q) == 0); /* the sorted p: the ids' own */
        float ref_lp;
        CU_ASSERT_EQUAL(tok[b], sampler_sample(&short_row_config, x, V, traj[b], pos[b], &ref_lp,
                                               ref_scratch));
        CU_ASSERT(fabsf(lp[b] - ref_lp) <= 1e-5f * fmaxf(1.0f, fabsf(ref_lp)));
    }
    free(x), free(scratch), free(ref_scratch);
}

int main(void)
{
    static const struct test_case tc[] = {
        {"151,936 ids: flat, tied, mostly -inf, tied on top, normal rows", test_vocabulary},
        {"1,001, 50 and 2 ids", test_small},
        {"top-p survivors short through rounding: the nucleus over all ids", test_top_p_short},
        {"vocabulary-parallel: greedy, T and top-k over 3 ranks' columns (2 and 4 of 50 ids)",
         test_vocab_parallel},
        {NULL, NULL}};
    static const struct test_suite suites[] = {{"the CUDA sampler kernel on CPU threads", tc},
                                               {NULL, NULL}};
    return test_main(suites);
}
