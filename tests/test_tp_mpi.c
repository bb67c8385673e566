/*
 * Tensor parallelism over MPI (run with mpirun -np 4; tests/mpi_tp.sh): the model's
 * collectives through the CPU device's MPI communicators (src/device/cpu/cpu_comm.c)
 * give what the single-rank model gives, for Llama- (K == t at t = 2, K < t at t = 4),
 * Qwen2- (biases, untied, K > t) and Qwen3-shaped (qk norm, tied) random models:
 *  - log-probs and entropies of TP 2 and 4 = TP 1 within 1e-5 relative, and the same
 *    bits on every rank of a group;
 *  - greedy and seeded temperature / top-k decode on two slots for 24 steps: the same
 *    tokens as TP 1, log-probs within 1e-5;
 *  - one AdamW step (tfm_backward_tp, tfm_tp_reduce_grads, tfm_tp_grad_sq,
 *    adamw_step_norm) = TP 1's step within 1e-5 relative on every shard.
 * Every rank runs the suites (they are collective); rank 0 prints, and the exit code is
 * the worst of all ranks'.
 */
#include <cblas.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/adamw.h"
#include "libra/hash.h"
#include "libra/log.h"
#include "libra/rng.h"
#include "libra/sampler.h"
#include "libra/tfm_decode.h"
#include "testtp.h"

#define TINY(fam, H, K, D, F, theta, tie, bias, qkn)                                          \
    .family = fam, .vocab_size = 301, .hidden_size = 32, .n_layers = 2, .n_heads = H,         \
    .n_kv_heads = K, .head_dim = D, .intermediate_size = F, .max_position_embeddings = 512,   \
    .rms_norm_eps = 1e-6f, .rope_theta = theta, .tie_word_embeddings = tie,                   \
    .attention_bias = bias, .qk_norm = qkn
static const struct tfm_config cfgs[] = {
    {TINY(TFM_LLAMA, 8, 2, 8, 48, 1e4f, 0, 0, 0)},
    {TINY(TFM_QWEN2, 8, 4, 8, 40, 1e6f, 0, 1, 0)},
    {TINY(TFM_QWEN3, 4, 2, 12, 48, 1e4f, 1, 0, 1)},
};
#define N_CFG 3

#define BT 14
static void make_batch(struct tfm_batch *b, int *seq_len, int32_t *tok, int32_t *tgt, float *w,
                       int V)
{
    static const int len[3] = {5, 3, 6};
    struct rng r;
    rng_init(&r, 3, 1, 2, 3);
    for (int t = 0; t < BT; t++) {
        tok[t] = (int32_t)rng_below(&r, (uint64_t)V);
        tgt[t] = t % 4 == 3 ? -1 : (int32_t)rng_below(&r, (uint64_t)V);
        w[t] = (float)(0.5 + rng_uniform(&r));
    }
    memcpy(seq_len, len, sizeof len);
    *b = (struct tfm_batch){3, seq_len, tok, tgt, w, 0.8f, NULL};
}

static void test_forward(void)
{
    for (int k = 0; k < N_CFG; k++)
        for (int t = 2; t <= 4; t *= 2) {
            const struct tfm_config *c = &cfgs[k];
            struct test_tp_group g;
            struct tfm_params full, part;
            test_tp_model_open(&g, c, t, 11 + (uint64_t)k, 0, &full, &part);
            int seq_len[3];
            int32_t tok[BT], tgt[BT];
            float w[BT], lp1[BT], ent1[BT], lpt[BT], entt[BT];
            struct tfm_batch b;
            make_batch(&b, seq_len, tok, tgt, w, c->vocab_size);
            struct tfm_state *s1 = tfm_state_create(c, BT), *st = tfm_state_create_tp(&g.tp, BT);
            double j1 = tfm_forward(c, &full, s1, &b, lp1, ent1, NULL);
            double jt = tfm_forward_tp(&g.tp, &part, st, &b, lpt, entt);
            CU_ASSERT_CLOSE(jt, j1, 1e-5);
            for (int i = 0; i < BT; i++) {
                CU_ASSERT_CLOSE(lpt[i], lp1[i], 1e-5);
                CU_ASSERT_CLOSE(entt[i], ent1[i], 1e-5);
            }
            CU_ASSERT(test_tp_same_on_group(&g, lpt, sizeof lpt));
            CU_ASSERT(test_tp_same_on_group(&g, entt, sizeof entt));
            tfm_state_free(s1);
            tfm_state_free(st);
            tfm_params_free(&full);
            tfm_params_free(&part);
            test_tp_group_close(&g);
        }
}

static void test_decode(void)
{
    const struct sampler_config modes[] = {{0, 1, 0, 5}, {0.9f, 1, 0, 5}, {1.0f, 1, 7, 9}};
    for (int k = 0; k < N_CFG; k++)
        for (int t = 2; t <= 4; t *= 2)
            for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
                const struct tfm_config *c = &cfgs[k];
                struct test_tp_group g;
                struct tfm_params full, part;
                test_tp_model_open(&g, c, t, 21 + (uint64_t)k, 0, &full, &part);
                struct tfm_decoder *d1 = tfm_decoder_create(c, &full, 2, 64, 4);
                struct tfm_decoder *dt = tfm_decoder_create_tp(&g.tp, &part, 2, 64, 4);
                int V = c->vocab_size, Vl = g.tp.v1 - g.tp.v0;
                float *l1 = malloc(2 * (size_t)V * sizeof *l1), *lt = malloc(2 * (size_t)Vl * sizeof *lt);
                float *sc1 = malloc(2 * (size_t)V * sizeof *sc1);
                float *sct = malloc(sampler_tp_scratch_floats(&modes[m], &g.tp) * sizeof *sct);
                int32_t prompt[10];
                for (int i = 0; i < 10; i++) prompt[i] = (int32_t)((i * 37 + k) % V);
                int slots[2] = {0, 1};
                int32_t next1[2], nextt[2];
                int same_tokens = 1, close_lp = 1;
                for (int s = 0; s < 2; s++) {
                    tfm_decoder_prefill(d1, s, prompt, 10 - s, l1);
                    tfm_decoder_prefill(dt, s, prompt, 10 - s, lt);
                    float a, bb;
                    next1[s] = sampler_sample(&modes[m], l1, V, s, 10 - s, &a, sc1);
                    nextt[s] = sampler_sample_tp(&modes[m], &g.tp, lt, s, 10 - s, &bb, sct);
                    same_tokens &= next1[s] == nextt[s];
                    close_lp &= fabsf(a - bb) <= 1e-5f * fmaxf(1.0f, fabsf(a));
                }
                for (int step = 0; step < 24 && same_tokens; step++) {
                    tfm_decoder_step(d1, slots, next1, 2, l1);
                    tfm_decoder_step(dt, slots, nextt, 2, lt);
                    for (int s = 0; s < 2; s++) {
                        float a, bb;
                        int64_t pos = 11 - s + step;
                        next1[s] = sampler_sample(&modes[m], l1 + (size_t)s * V, V, s, pos, &a, sc1);
                        nextt[s] = sampler_sample_tp(&modes[m], &g.tp, lt + (size_t)s * Vl, s, pos,
                                                     &bb, sct);
                        same_tokens &= next1[s] == nextt[s];
                        close_lp &= fabsf(a - bb) <= 1e-5f * fmaxf(1.0f, fabsf(a));
                    }
                }
                CU_ASSERT(same_tokens);
                CU_ASSERT(close_lp);
                CU_ASSERT(test_tp_same_on_group(&g, nextt, sizeof nextt));
                free(l1);
                free(lt);
                free(sc1);
                free(sct);
                tfm_decoder_free(d1);
                tfm_decoder_free(dt);
                tfm_params_free(&full);
                tfm_params_free(&part);
                test_tp_group_close(&g);
            }
}

static void test_train_step(void)
{
    struct adamw_config oc = {1e-2f, 0.9f, 0.95f, 1e-3f, 0.01f, 0.5f, LR_CONSTANT, 0, 10, 1.0f};
    for (int k = 0; k < N_CFG; k++)
        for (int t = 2; t <= 4; t *= 2) {
            const struct tfm_config *c = &cfgs[k];
            struct test_tp_group g;
            test_tp_group_open(&g, c, t, test_tp_rank);
            struct tfm_params full, part, g1, gt, want;
            test_random_params(&full, c, 31 + (uint64_t)k);
            tfm_params_alloc(&part, &g.tp.local);
            tfm_params_alloc(&want, &g.tp.local);
            tfm_tp_shard(&g.tp, &full, &part);
            tfm_params_alloc(&g1, c);
            tfm_params_alloc(&gt, &g.tp.local);
            int seq_len[3];
            int32_t tok[BT], tgt[BT];
            float w[BT];
            struct tfm_batch b;
            make_batch(&b, seq_len, tok, tgt, w, c->vocab_size);
            struct tfm_state *s1 = tfm_state_create(c, BT), *st = tfm_state_create_tp(&g.tp, BT);
            tfm_backward(c, &full, s1, &b, &g1);
            tfm_backward_tp(&g.tp, &part, st, &b, &gt);
            tfm_tp_reduce_grads(&g.tp, &gt);
            struct adamw o1, ot;
            adamw_init(&o1, &oc, full.n);
            adamw_init(&ot, &oc, part.n);
            double n1 = adamw_step(&o1, full.mem, g1.mem);
            double nt = adamw_step_norm(&ot, part.mem, gt.mem, sqrt(tfm_tp_grad_sq(&g.tp, &gt)));
            CU_ASSERT_CLOSE(nt, n1, 1e-5);
            tfm_tp_shard(&g.tp, &full, &want);
            int ok = 1;
            for (size_t i = 0; i < part.n; i++)
                ok &= fabs((double)part.mem[i] - want.mem[i]) <= 1e-5 * fmax(1.0, fabs(want.mem[i]));
            CU_ASSERT(ok);
            adamw_free(&o1);
            adamw_free(&ot);
            tfm_state_free(s1);
            tfm_state_free(st);
            tfm_params_free(&full);
            tfm_params_free(&part);
            tfm_params_free(&want);
            tfm_params_free(&g1);
            tfm_params_free(&gt);
            test_tp_group_close(&g);
        }
}

/* A TP-2 rollout instance's command stream (cpu_tp_model.c) when the leader quiesces
 * before its member sees the same plan or shutdown: the member's non-blocking serving
 * meets the CMD_END first, and its own quiesce must then return, not wait for a second
 * one (a hang at the end of CI runs). Then the instance serves again: a prefill the
 * leader sends after the quiesce runs on the member, and a regular quiesce (member
 * blocked first) still pairs with the leader's CMD_END. */
static void test_quiesce_race(void)
{
    const struct tfm_config *c = &cfgs[0];
    struct libra_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.rollout.slots = 2;
    cfg.rollout.max_tokens = 64;
    struct device *d = xcalloc(1, sizeof *d);
    d->a.cfg = &cfg;
    d->a.rank = test_tp_rank;
    d->mc = *c;
    struct test_tp_group g;
    test_tp_group_open(&g, c, 2, test_tp_rank);
    d->sh.t = 2;
    d->sh.i = g.i;
    d->sh.comm = g.comm;
    d->sh.kv = g.kv;
    tfm_tp_init(&d->sh.tp, c, 2, g.i, &d->sh.comm.tc,
                d->sh.kv.comm != MPI_COMM_NULL ? &d->sh.kv.tc : NULL);
    struct tfm_params full;
    test_random_params(&full, c, 5);
    tfm_params_alloc(&d->sh.p, &d->sh.tp.local);
    tfm_tp_shard(&d->sh.tp, &full, &d->sh.p);
    int leader = g.i == 0;
    struct cpu_tp_model *m = cpu_tp_model_create(d, leader);
    const struct rollout_model *rm = cpu_tp_model_ops(m);
    int32_t prompt[4] = {1, 2, 3, 4}, tok;
    float lp;
    for (int round = 0; round < 2; round++) {
        if (leader) {
            cpu_tp_model_end(m); /* the leader quiesces first */
            MPI_CHECK(MPI_Barrier(d->sh.comm.comm));
            CU_ASSERT_EQUAL(rm->ops->prefill(rm->m, 0, prompt, 4, NULL, &tok, &lp), 0);
            cpu_tp_model_end(m);
        } else {
            MPI_CHECK(MPI_Barrier(d->sh.comm.comm)); /* the CMD_END is there */
            CU_ASSERT_EQUAL(cpu_tp_model_serve(m, 0), 1); /* progress meets it */
            CU_ASSERT_EQUAL(cpu_tp_model_serve(m, 0), 0); /* nothing served after it */
            CU_ASSERT_EQUAL(cpu_tp_model_serve(m, 1), 0); /* the quiesce returns at once */
            /* the prefill, then the leader's second CMD_END: a blocking quiesce */
            CU_ASSERT_EQUAL(cpu_tp_model_serve(m, 1), 2);
        }
        CU_ASSERT_EQUAL(rm->ops->len(rm->m, 0), 4 * (round + 1));
    }
    cpu_tp_model_free(m);
    tfm_params_free(&d->sh.p);
    tfm_params_free(&full);
    free(d);
    test_tp_group_close(&g);
}

static const struct test_case tp_cases[] = {
    {"log-probs and entropies of TP 2, 4 = TP 1 over MPI", test_forward},
    {"decode and sampling of TP 2, 4 = TP 1 over MPI", test_decode},
    {"one AdamW step of TP 2, 4 = TP 1 over MPI", test_train_step},
    {"TP instance: the leader's CMD_END before the member's quiesce", test_quiesce_race},
    {NULL, NULL},
};

static const struct test_suite suites[] = {{"tensor parallel over MPI", tp_cases}, {NULL, NULL}};

static void one_blas_thread(void) { openblas_set_num_threads(1); }

int main(int argc, char **argv)
{
    return test_tp_main(&argc, &argv, "test_tp_mpi", one_blas_thread, suites);
}
