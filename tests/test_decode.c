/* The CPU decode engine against the training path: log-prob consistency (1e-5),
 * greedy decode = argmax of training logits, prefix reuse and truncation, batch
 * composition independence of a seeded trajectory, capacity. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libra/rng.h"
#include "libra/sampler.h"
#include "libra/tfm.h"
#include "libra/tfm_decode.h"
#include "testutil.h"

#define TINY(fam, K, D, F, theta, tie, bias, qkn)                                            \
    .family = fam, .vocab_size = 300, .hidden_size = 32, .n_layers = 2, .n_heads = 4,         \
    .n_kv_heads = K, .head_dim = D, .intermediate_size = F, .max_position_embeddings = 512,   \
    .rms_norm_eps = 1e-6f, .rope_theta = theta, .tie_word_embeddings = tie,                   \
    .attention_bias = bias, .qk_norm = qkn
static const struct tfm_config cfgs[] = {
    /* qwen3-style: qk norm, tied, GQA, H*D != C */
    {TINY(TFM_QWEN3, 2, 12, 48, 1e4f, 1, 0, 1)},
    /* qwen2-style: biases, untied, GQA */
    {TINY(TFM_QWEN2, 1, 8, 40, 1e6f, 0, 1, 0)},
    /* llama with Llama 3.1 rope scaling (original context 16: scaled bands at these
     * lengths), then yarn with its attention factor: decode and the training path
     * must read the same scaled table */
    {TINY(TFM_LLAMA, 2, 8, 40, 5e5f, 0, 0, 0), .rope_type = TFM_ROPE_LLAMA3,
     .rope_factor = 8, .rope_low_freq_factor = 1, .rope_high_freq_factor = 4,
     .rope_original_max_pos = 16},
    {TINY(TFM_QWEN3, 2, 12, 48, 1e4f, 0, 0, 1), .rope_type = TFM_ROPE_YARN, .rope_factor = 4,
     .rope_original_max_pos = 32},
};
#define N_CFG 4

static void random_tokens(int32_t *t, int n, int V, uint64_t key)
{
    struct rng r;
    rng_init(&r, 99, key, 0, 0);
    for (int i = 0; i < n; i++) t[i] = (int32_t)rng_below(&r, (uint64_t)V);
}

/* log softmax(logits / T)[target] in double */
static double logprob_of(const float *logits, int V, float T, int target)
{
    double m = -INFINITY, s = 0;
    for (int i = 0; i < V; i++) m = fmax(m, logits[i] / (double)T);
    for (int i = 0; i < V; i++) s += exp(logits[i] / (double)T - m);
    return logits[target] / (double)T - m - log(s);
}

static void model(const struct tfm_config *c, struct tfm_params *p, uint64_t seed)
{
    tfm_params_alloc(p, c);
    tfm_params_init_random(p, c, seed, 0.1f);
}

static void test_logprob_consistency(void)
{
    enum { N = 40, PROMPT = 13 };
    for (int k = 0; k < N_CFG; k++) {
        const struct tfm_config *c = &cfgs[k];
        struct tfm_params p;
        model(c, &p, 5 + (uint64_t)k);
        int32_t tok[N], tgt[N];
        random_tokens(tok, N, c->vocab_size, 1);
        for (int i = 0; i < N; i++) tgt[i] = i + 1 < N ? tok[i + 1] : -1;
        float lp[N];
        int n = N;
        struct tfm_batch b = {1, &n, tok, tgt, NULL, 0.7f, NULL};
        struct tfm_state *s = tfm_state_create(c, N);
        tfm_forward(c, &p, s, &b, lp, NULL, NULL);
        struct tfm_decoder *d = tfm_decoder_create(c, &p, 2, 64, 5);
        float *logits = malloc((size_t)c->vocab_size * sizeof *logits);
        CU_ASSERT_EQUAL_FATAL(tfm_decoder_prefill(d, 1, tok, PROMPT, logits), 0);
        double worst = 0;
        for (int i = PROMPT - 1; i + 1 < N; i++) {
            double got = logprob_of(logits, c->vocab_size, 0.7f, tok[i + 1]);
            worst = test_worse(worst, fabs(got - lp[i]));
            int slot = 1;
            CU_ASSERT_EQUAL_FATAL(tfm_decoder_step(d, &slot, &tok[i + 1], 1, logits), 0);
        }
        CU_ASSERT(worst <= 1e-5);
        if (worst > 1e-5) fprintf(stderr, "config %d: worst |decode - train| = %g\n", k, worst);
        CU_ASSERT_EQUAL(tfm_decoder_len(d, 1), N);
        free(logits);
        tfm_decoder_free(d);
        tfm_state_free(s);
        tfm_params_free(&p);
    }
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void test_greedy_is_training_argmax(void)
{
    enum { PROMPT = 6, NEW = 20, N = PROMPT + NEW };
    for (int k = 0; k < N_CFG; k++) {
        const struct tfm_config *c = &cfgs[k];
        int V = c->vocab_size;
        struct tfm_params p;
        model(c, &p, 11 + (uint64_t)k);
        int32_t tok[N];
        random_tokens(tok, PROMPT, V, 2);
        struct tfm_decoder *d = tfm_decoder_create(c, &p, 1, N, 4);
        float *logits = malloc((size_t)V * sizeof *logits), scratch[600];
        struct sampler_config greedy = {0.0f, 1.0f, 0, 1};
        CU_ASSERT_EQUAL_FATAL(tfm_decoder_prefill(d, 0, tok, PROMPT, logits), 0);
        for (int i = PROMPT; i < N; i++) {
            float lp;
            tok[i] = sampler_sample(&greedy, logits, V, 0, i, &lp, scratch);
            int slot = 0;
            if (i + 1 < N) CU_ASSERT_EQUAL_FATAL(tfm_decoder_step(d, &slot, &tok[i], 1, logits), 0);
        }
        int32_t tgt[N];
        for (int i = 0; i < N; i++) tgt[i] = -1;
        float lp[N];
        float *all = malloc((size_t)N * V * sizeof *all);
        int n = N;
        struct tfm_batch b = {1, &n, tok, tgt, NULL, 1.0f, NULL};
        struct tfm_state *s = tfm_state_create(c, N);
        tfm_forward(c, &p, s, &b, lp, NULL, all);
        for (int i = PROMPT - 1; i + 1 < N; i++) CU_ASSERT_EQUAL(argmax(all + (size_t)i * V, V), tok[i + 1]);
        free(all);
        free(logits);
        tfm_state_free(s);
        tfm_decoder_free(d);
        tfm_params_free(&p);
    }
}

static double max_diff(const float *a, const float *b, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++) m = test_worse(m, fabs((double)a[i] - b[i]));
    return m;
}

static void test_prefix_reuse_and_truncate(void)
{
    const struct tfm_config *c = &cfgs[0];
    int V = c->vocab_size;
    struct tfm_params p;
    model(c, &p, 21);
    int32_t a[10], bb[7], cc[5], ab[17], ac[15];
    random_tokens(a, 10, V, 3);
    random_tokens(bb, 7, V, 4);
    random_tokens(cc, 5, V, 5);
    memcpy(ab, a, sizeof a);
    memcpy(ab + 10, bb, sizeof bb);
    memcpy(ac, a, sizeof a);
    memcpy(ac + 10, cc, sizeof cc);
    struct tfm_decoder *d = tfm_decoder_create(c, &p, 3, 32, 4);
    float *l0 = malloc((size_t)V * sizeof *l0), *l1 = malloc((size_t)V * sizeof *l1);
    /* a turn kept in the cache, then the next turn's tokens = one fresh prefill */
    tfm_decoder_prefill(d, 0, ab, 17, l0);
    tfm_decoder_prefill(d, 1, a, 10, NULL);
    tfm_decoder_prefill(d, 1, bb, 7, l1);
    CU_ASSERT(max_diff(l0, l1, V) <= 1e-5);
    /* truncating to the shared prefix and continuing = a fresh prefill */
    tfm_decoder_truncate(d, 0, 10);
    CU_ASSERT_EQUAL(tfm_decoder_len(d, 0), 10);
    tfm_decoder_prefill(d, 0, cc, 5, l0);
    tfm_decoder_prefill(d, 2, ac, 15, l1);
    CU_ASSERT(max_diff(l0, l1, V) <= 1e-5);
    /* capacity: nothing is added when a prefill would not fit */
    CU_ASSERT_EQUAL(tfm_decoder_prefill(d, 2, ab, 17 + 1, NULL), -1);
    CU_ASSERT_EQUAL(tfm_decoder_len(d, 2), 15);
    free(l0);
    free(l1);
    tfm_decoder_free(d);
    tfm_params_free(&p);
}

/* A seeded trajectory sampled alone and inside a batch of other slots. */
static void sample_run(const struct tfm_config *c, const struct tfm_params *p, int n_slots,
                       int32_t *out, int n_new)
{
    int V = c->vocab_size;
    struct tfm_decoder *d = tfm_decoder_create(c, p, n_slots, 64, 8);
    float *logits = malloc((size_t)n_slots * V * sizeof *logits), *scratch = malloc(2 * (size_t)V * sizeof *scratch);
    struct sampler_config sc = {1.0f, 0.95f, 0, 42};
    int32_t prompt[8], next[8];
    int slots[8];
    for (int s = 0; s < n_slots; s++) {
        random_tokens(prompt, 8, V, s == 0 ? 77 : 100 + (uint64_t)s);
        tfm_decoder_prefill(d, s, prompt, 8, logits + (size_t)s * V);
        slots[s] = s;
    }
    for (int i = 0; i < n_new; i++) {
        for (int s = 0; s < n_slots; s++) {
            float lp;
            /* trajectory id = slot id + (slot 0 is the one compared) */
            next[s] = sampler_sample(&sc, logits + (size_t)s * V, V, 1000 + s, 8 + i, &lp, scratch);
        }
        out[i] = next[0];
        tfm_decoder_step(d, slots, next, n_slots, logits);
    }
    free(logits);
    free(scratch);
    tfm_decoder_free(d);
}

static void test_batch_composition(void)
{
    const struct tfm_config *c = &cfgs[1];
    struct tfm_params p;
    model(c, &p, 31);
    int32_t alone[24], together[24];
    sample_run(c, &p, 1, alone, 24);
    sample_run(c, &p, 5, together, 24);
    CU_ASSERT_EQUAL(memcmp(alone, together, sizeof alone), 0);
    tfm_params_free(&p);
}

int main(void)
{
    static const struct test_case cases[] = {
        {"decode log-probs = training log-probs (1e-5)", test_logprob_consistency},
        {"greedy decode = argmax of training logits", test_greedy_is_training_argmax},
        {"prefix reuse and truncation = fresh prefill", test_prefix_reuse_and_truncate},
        {"batch composition does not change a trajectory", test_batch_composition},
        {NULL, NULL}};
    static const struct test_suite suites[] = {{"decode", cases}, {NULL, NULL}};
    return test_main(suites);
}
