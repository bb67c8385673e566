/*
 * The GPU sampler's kernel (src/device/cuda/cuda_sampler_kernel.cuh) compiled as C11
 * and run on CPU threads (tests/cuda_block_emu.h: one POSIX thread per CUDA thread of
 * a block, a barrier at every __syncthreads), against sampler_sample: the same tokens
 * and log-probs (1e-5 relative) under greedy, temperature, top-k, top-p and both.
 * This tests the kernel's own code -- its radix selection, id-ordered gathers, bitonic
 * sort and nucleus walk, and its barriers -- without a GPU; test_cuda runs the same
 * cases on the GPU itself where there is one.
 *
 * Rows (V = 151,936 unless said): a flat row (every id survives top-p's cutoff: the
 * sort over all V, ties ordered by id), logits in steps of 0.5 (ties across the k-th
 * place), 20 finite ids among -inf ones (top-k takes ids of p = 0, by id), ten ids
 * tied on top, two rows of normal logits; and vocabularies of 1,001, 50 (threads with
 * no ids) and 2.
 */
#define _POSIX_C_SOURCE 200809L /* pthread barriers */

#include <math.h>

#include "cuda_block_emu.h"
#include "libra/rng_core.h"
#include "libra/sampler.h"
#include "testutil.h"

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
    float *scratch = malloc(2 * (size_t)B * V * sizeof *scratch);
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

int main(void)
{
    static const struct test_case tc[] = {
        {"151,936 ids: flat, tied, mostly -inf, tied on top, normal rows", test_vocabulary},
        {"1,001, 50 and 2 ids", test_small},
        {NULL, NULL}};
    static const struct test_suite suites[] = {{"the CUDA sampler kernel on CPU threads", tc},
                                               {NULL, NULL}};
    return test_main(suites);
}
