/*
 * The GPU decode engine at tensor parallelism 2 and 4 (run with mpirun -np 4;
 * tests/mpi_gpu_tp.sh): every rank holds its shard of a bf16 model on the GPU (all
 * ranks may share one GPU: the all-reduces are host-staged over MPI), and the TP
 * decoders are compared with a TP-1 GPU decoder of the whole model on each rank, for
 * Llama- (K == t at t = 2, K < t at t = 4: replicated kv heads), Qwen2- (q/k/v biases,
 * untied) and Qwen3-shaped (q/k norm, tied) random models:
 *  - the logits of a chunked prefill and of 12 decode steps of two slots of different
 *    lengths (one forked from the other): this rank's vocabulary rows within TOL of
 *    the largest TP-1 logit (other products' shapes and an all-reduce's order of sums
 *    round activations to bf16 differently; a wrong head, shard or all-reduce gives
 *    errors of order 1); the decode steps take the gemv path, the prefill cuBLASLt;
 *  - every rank of a group samples the same tokens (sampler_sample_tp: the replicated
 *    state stays identical), and greedy TP picks TP 1's token whenever TP 1's top two
 *    logits are further apart than twice the error;
 *  - sampling on the GPU (gpu_decoder_sample, vocabulary-parallel: greedy, T = 1 and
 *    0.7, top-k 5, top-k 40 with top-p 0.9) after every step gives sampler_sample_tp's
 *    tokens from the same logits, and its log-probs within 1e-5, the same on every
 *    rank;
 *  - a host-staged group turns CUDA graphs off (they cannot hold its all-reduces);
 *  - the GPU training path of a TP shard: log-probs, entropies and J of a packed batch
 *    of two sequences within LP_TOL of TP 1's (absolute; the same on every rank), and
 *    the gradient, reduced with tfm_tp_reduce_grads, against TP 1's gradient sharded
 *    (tfm_tp_shard): cosine >= 0.999 and largest difference <= G_TOL of the largest
 *    (test_gpu_train's bounds against the CPU);
 *  - four data-parallel replicas (test_dp): the gradient summed on the GPUs equals the
 *    MPI sum, its norm the host's, and a step on it leaves the replicas identical;
 *  - a TP shard's step through the host trainer with its gradient reduced and normed on
 *    the GPU -- replicated kv heads' summed over their kv group there too -- equals the
 *    step with the gradient brought to the host (test_tp_engine);
 *  - a model that is not the rank's shard, or a group of the wrong size: NULL + message.
 * Without a GPU it runs on the host stand-in of the CUDA module (test_cuda_or_skip).
 * Every rank runs the suites (they are collective); rank 0 prints, and the exit code is
 * the worst of all ranks'.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/gpu_comm.h"
#include "libra/adamw.h"
#include "libra/gpu_decode.h"
#include "libra/gpu_train.h"
#include "libra/sampler.h"
#include "libra/trainer.h"
#include "testtp.h"

#define TOL 1e-2
#define LP_TOL 2e-2
#define G_TOL 0.1

#define SMALL(fam, H, K, D, F, tie, bias, qkn)                                                \
    .family = fam, .vocab_size = 301, .hidden_size = 64, .n_layers = 2, .n_heads = H,         \
    .n_kv_heads = K, .head_dim = D, .intermediate_size = F, .max_position_embeddings = 512,   \
    .rms_norm_eps = 1e-6f, .rope_theta = 1e4f, .tie_word_embeddings = tie,                    \
    .attention_bias = bias, .qk_norm = qkn
static const struct tfm_config cfgs[] = {
    {SMALL(TFM_LLAMA, 8, 2, 16, 96, 0, 0, 0)},
    {SMALL(TFM_QWEN2, 8, 4, 16, 80, 0, 1, 0)},
    {SMALL(TFM_QWEN3, 4, 2, 24, 96, 1, 0, 1)},
};
#define N_CFG 3

static const struct cuda_api *api;

/* max over rows of |tp - full[v0 .. v1)| / max |full|, rows of Vl and V values. */
static double shard_err(const float *tp_logits, const float *full, int rows, int v0, int Vl,
                        int V)
{
    double worst = 0, scale = 0;
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < V; j++) {
            double a = fabs(full[(size_t)r * V + j]);
            if (a > scale) scale = a;
        }
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < Vl; j++) {
            double e = fabs(tp_logits[(size_t)r * Vl + j] - full[(size_t)r * V + v0 + j]);
            if (e > worst) worst = e;
        }
    return scale > 0 ? worst / scale : worst;
}

/* The largest error over the group. */
static double group_max(const struct test_tp_group *g, double x)
{
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_MAX, g->comm.comm));
    return x;
}

/* Whether row's argmax (into *arg) leads its runner-up by more than twice the bound on
 * the error (TOL of the largest |logit|): then a TP decoder within TOL must pick it. */
static int clear_argmax(const float *row, int V, int32_t *arg)
{
    int best = 0;
    float second = -INFINITY, scale = 0;
    for (int j = 1; j < V; j++)
        if (row[j] > row[best]) best = j;
    for (int j = 0; j < V; j++) {
        if (j != best && row[j] > second) second = row[j];
        scale = fmaxf(scale, fabsf(row[j]));
    }
    *arg = best;
    return row[best] - second > 2 * TOL * scale;
}

#define PROMPT 21
#define STEPS 12

static void test_decode(void)
{
    struct sampler_config greedy = {0, 1, 0, 5};
    static const struct sampler_config on_gpu[] = {{0, 1, 0, 5},  {1, 1, 0, 5},
                                                   {0.7f, 1, 0, 6}, {1, 1, 5, 7},
                                                   {0.8f, 0.9f, 40, 8}};
    for (int k = 0; k < N_CFG; k++)
        for (int t = 2; t <= 4; t *= 2) {
            const struct tfm_config *c = &cfgs[k];
            struct test_tp_group g;
            struct tfm_params full, part;
            test_tp_model_open(&g, c, t, 31 + (uint64_t)k, 1, &full, &part);
            char err[512];
            struct gpu_model *m1 = gpu_model_upload(api, c, &full, err, sizeof err);
            struct gpu_model *mt = gpu_model_upload(api, &g.tp.local, &part, err, sizeof err);
            CU_ASSERT_FATAL(m1 && mt);
            struct gpu_comm *gc = gpu_comm_host_staged(api, &g.comm.tc);
            struct gpu_decoder *d1 = gpu_decoder_create(m1, 2, 64, 8, 0, err, sizeof err);
            struct gpu_decoder *dt = gpu_decoder_create_tp(mt, &g.tp, gc, 2, 64, 8, 0, err,
                                                           sizeof err);
            CU_ASSERT_FATAL(d1 && dt);
            CU_ASSERT_EQUAL(gpu_decoder_set_graphs(dt, 1), 0);
            int V = c->vocab_size, Vl = g.tp.v1 - g.tp.v0;
            float *l1 = malloc(2 * (size_t)V * sizeof *l1), *lt = malloc(2 * (size_t)Vl * sizeof *lt);
            size_t nscr = sampler_tp_scratch_floats(&greedy, &g.tp);
            for (size_t q = 0; q < sizeof on_gpu / sizeof on_gpu[0]; q++) {
                size_t nq = sampler_tp_scratch_floats(&on_gpu[q], &g.tp);
                nscr = nq > nscr ? nq : nscr;
            }
            float *scr = malloc(nscr * sizeof *scr);
            int32_t prompt[PROMPT];
            for (int i = 0; i < PROMPT; i++) prompt[i] = (int32_t)((i * 37 + k) % V);
            double worst = 0;
            /* slot 0: the prompt in chunks of 8; slot 1: a fork of its first 16 tokens
             * (two whole blocks), then 3 more of its own */
            CU_ASSERT_EQUAL(gpu_decoder_prefill(d1, 0, prompt, 16, NULL), 0);
            CU_ASSERT_EQUAL(gpu_decoder_prefill(dt, 0, prompt, 16, NULL), 0);
            gpu_decoder_fork(d1, 1, 0);
            gpu_decoder_fork(dt, 1, 0);
            for (int s = 0; s < 2; s++) {
                int from = 16, n = s ? 3 : PROMPT - 16;
                CU_ASSERT_EQUAL(gpu_decoder_prefill(d1, s, prompt + from, n, l1 + (size_t)s * V), 0);
                CU_ASSERT_EQUAL(gpu_decoder_prefill(dt, s, prompt + from, n, lt + (size_t)s * Vl), 0);
            }
            worst = fmax(worst, shard_err(lt, l1, 2, g.tp.v0, Vl, V));
            int slots[2] = {0, 1}, agree = 1, checked = 0, same = 1, gpu_same = 1;
            for (int step = 0; step < STEPS; step++) {
                int32_t next[2], tok_tp[2];
                for (int s = 0; s < 2; s++) {
                    int32_t want;
                    int clear = clear_argmax(l1 + (size_t)s * V, V, &want);
                    next[s] = want;
                    float lp;
                    tok_tp[s] = sampler_sample_tp(&greedy, &g.tp, lt + (size_t)s * Vl, s,
                                                  PROMPT + step, &lp, scr);
                    if (clear) {
                        checked++;
                        agree &= tok_tp[s] == want;
                    }
                }
                same &= test_tp_same_on_group(&g, tok_tp, sizeof tok_tp);
                /* both decoders take TP 1's tokens, so their contexts stay equal */
                CU_ASSERT_EQUAL(gpu_decoder_step(d1, slots, next, 2, l1), 0);
                CU_ASSERT_EQUAL(gpu_decoder_step(dt, slots, next, 2, lt), 0);
                worst = fmax(worst, shard_err(lt, l1, 2, g.tp.v0, Vl, V));
                for (size_t q = 0; q < sizeof on_gpu / sizeof on_gpu[0]; q++) {
                    int64_t traj[2] = {100, 101}, pos[2] = {PROMPT + step, PROMPT + step + 7};
                    int32_t got[2];
                    float glp[2];
                    gpu_decoder_sample(dt, 2, &on_gpu[q], traj, pos, got, glp);
                    for (int s = 0; s < 2; s++) {
                        float lp;
                        int32_t want = sampler_sample_tp(&on_gpu[q], &g.tp, lt + (size_t)s * Vl,
                                                         traj[s], pos[s], &lp, scr);
                        gpu_same &= got[s] == want &&
                                    fabsf(glp[s] - lp) <= 1e-5f * fmaxf(1.0f, fabsf(lp));
                    }
                    same &= test_tp_same_on_group(&g, got, sizeof got);
                }
            }
            worst = group_max(&g, worst);
            if (test_tp_rank == 0)
                printf("\n    %s TP %d: largest logit error %.2e of the largest logit; greedy "
                       "tokens agree on %d clear rows", k == 0 ? "llama" : k == 1 ? "qwen2" : "qwen3",
                       t, worst, checked);
            CU_ASSERT(worst <= TOL);
            CU_ASSERT(agree);
            CU_ASSERT(same);
            CU_ASSERT(gpu_same);
            free(l1);
            free(lt);
            free(scr);
            gpu_decoder_free(d1);
            gpu_decoder_free(dt);
            gpu_comm_free(gc);
            gpu_model_free(m1);
            gpu_model_free(mt);
            tfm_params_free(&full);
            tfm_params_free(&part);
            test_tp_group_close(&g);
        }
}

enum { SEQ0 = 13, SEQ1 = 20, BT = SEQ0 + SEQ1 };

/* A packed training batch of two sequences (SEQ0, SEQ1 tokens: seq_len): token i is
 * (i a + b) mod V, its target the next token (none for each sequence's last), weights
 * 1 / BT and every third -0.5 / BT (GRPO advantages of both signs). */
static struct tfm_batch train_batch(const struct tfm_config *c, int a, int b, int *seq_len,
                                    int32_t *tok, int32_t *tgt, float *w, float temperature)
{
    seq_len[0] = SEQ0;
    seq_len[1] = SEQ1;
    for (int i = 0; i < BT; i++) tok[i] = (int32_t)((i * a + b) % c->vocab_size);
    for (int i = 0; i < BT; i++) {
        tgt[i] = i == SEQ0 - 1 || i == BT - 1 ? -1 : tok[i + 1];
        w[i] = (i % 3 == 0 ? -0.5f : 1.0f) / (float)BT;
    }
    return (struct tfm_batch){2, seq_len, tok, tgt, w, temperature, NULL};
}

static void test_train(void)
{
    static const struct adamw_config adam = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.01f, 1.0f,
                                             LR_CONSTANT, 0, 100, 0.1f};
    for (int k = 0; k < N_CFG; k++)
        for (int t = 2; t <= 4; t *= 2) {
            const struct tfm_config *c = &cfgs[k];
            struct test_tp_group g;
            struct tfm_params full, part, g1, gt, g1_part;
            test_tp_model_open(&g, c, t, 41 + (uint64_t)k, 1, &full, &part);
            tfm_params_alloc(&g1, c);
            tfm_params_alloc(&gt, &g.tp.local);
            tfm_params_alloc(&g1_part, &g.tp.local);
            int seq_len[2];
            int32_t tok[BT], tgt[BT];
            float w[BT];
            struct tfm_batch b = train_batch(c, 53, 7 + k, seq_len, tok, tgt, w, 0.9f);
            char err[512];
            struct gpu_comm *gc = gpu_comm_host_staged(api, &g.comm.tc);
            struct gpu_trainer *t1 = gpu_trainer_create(api, c, &full, BT, &adam, err, sizeof err);
            struct gpu_trainer *tt = gpu_trainer_create_tp(api, &g.tp, gc, c, &part, BT, &adam,
                                                           err, sizeof err);
            CU_ASSERT_FATAL(t1 && tt);
            float lp1[BT], lpt[BT], e1[BT], et[BT];
            double j1 = gpu_trainer_forward(t1, &b, lp1, e1);
            double jt = gpu_trainer_forward(tt, &b, lpt, et);
            double lp_err = fabs(jt - j1);
            for (int i = 0; i < BT; i++) {
                lp_err = test_worse(lp_err, fabs((double)lpt[i] - lp1[i]));
                lp_err = test_worse(lp_err, fabs((double)et[i] - e1[i]));
            }
            int same = test_tp_same_on_group(&g, lpt, sizeof lpt) && test_tp_same_on_group(&g, et, sizeof et);
            /* the backward with the entropy term (rows with and without a weight) */
            float ew[BT];
            for (int i = 0; i < BT; i++) ew[i] = i % 4 == 1 ? 0.0f : 0.5f / (float)BT;
            b.entropy_weights = ew;
            double jb1 = gpu_trainer_backward(t1, &b);
            double jbt = gpu_trainer_backward(tt, &b);
            lp_err = test_worse(lp_err, fabs(jbt - jb1));
            gpu_trainer_grads(t1, &g1);
            gpu_trainer_grads(tt, &gt);
            tfm_tp_reduce_grads(&g.tp, &gt);
            tfm_tp_shard(&g.tp, &g1, &g1_part);
            double cos = test_cosine(gt.mem, g1_part.mem, gt.n);
            double g_err = test_rel_err(gt.mem, g1_part.mem, gt.n);
            lp_err = group_max(&g, lp_err);
            g_err = group_max(&g, g_err);
            cos = -group_max(&g, -cos);
            if (test_tp_rank == 0)
                printf("\n    %s TP %d training: log-probs / entropies / J %.1e, gradient cosine "
                       "%.6f, largest difference %.1e", k == 0 ? "llama" : k == 1 ? "qwen2"
                       : "qwen3", t, lp_err, cos, g_err);
            CU_ASSERT(lp_err <= LP_TOL);
            CU_ASSERT(same);
            CU_ASSERT(cos >= 0.999);
            CU_ASSERT(g_err <= G_TOL);
            gpu_trainer_free(t1);
            gpu_trainer_free(tt);
            gpu_comm_free(gc);
            tfm_params_free(&full);
            tfm_params_free(&part);
            tfm_params_free(&g1);
            tfm_params_free(&gt);
            tfm_params_free(&g1_part);
            test_tp_group_close(&g);
        }
}

/* The four ranks as four data-parallel replicas of one TP-1 model, each with a batch of
 * its own: gpu_trainer_allreduce_grads over a host-staged group gives every rank the
 * MPI sum of the four gradients (the same bits: the same MPI_Allreduce of the same
 * data), gpu_trainer_grad_sq its sum of squares (within 1e-12 of the host's ordered
 * double sum), and a step on the summed gradient in place (gpu_trainer_apply with no
 * host gradient) leaves the four replicas' weights identical. */
static void test_dp(void)
{
    static const struct adamw_config adam = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.01f, 1.0f,
                                             LR_CONSTANT, 0, 100, 0.1f};
    const struct tfm_config *c = &cfgs[2];
    struct test_tp_group g; /* the 4 ranks: only its communicator is used */
    test_tp_group_open(&g, c, 4, test_tp_rank);
    struct tfm_params full, mine, sum, p_after;
    test_bf16_params(&full, c, 77);
    tfm_params_alloc(&mine, c);
    tfm_params_alloc(&sum, c);
    tfm_params_alloc(&p_after, c);
    int seq_len[2];
    int32_t tok[BT], tgt[BT];
    float w[BT];
    struct tfm_batch b = train_batch(c, 29, 11 * test_tp_rank + 3, seq_len, tok, tgt, w, 1.0f);
    char err[512];
    struct gpu_comm *gc = gpu_comm_host_staged(api, &g.comm.tc);
    struct gpu_trainer *t = gpu_trainer_create(api, c, &full, BT, &adam, err, sizeof err);
    CU_ASSERT_FATAL(t != NULL);
    gpu_trainer_zero_grad(t);
    gpu_trainer_backward(t, &b);
    gpu_trainer_grads(t, &mine);
    MPI_CHECK(MPI_Allreduce(mine.mem, sum.mem, (int)sum.n, MPI_FLOAT, MPI_SUM, g.comm.comm));
    gpu_trainer_allreduce_grads(t, gc);
    gpu_trainer_grads(t, &mine);
    int equal = memcmp(mine.mem, sum.mem, sum.n * sizeof(float)) == 0;
    double sq = gpu_trainer_grad_sq(t), host = adamw_grad_norm(sum.mem, sum.n);
    double sq_err = fabs(sq - host * host) / (host * host);
    struct adamw_scalars sc;
    adamw_scalars_of(&adam, 1, &sc);
    gpu_trainer_apply(t, NULL, adamw_clip_factor(&adam, sqrt(sq)), &sc, p_after.mem);
    int same = test_tp_same_on_group(&g, p_after.mem, p_after.n * sizeof(float));
    double moved = test_rel_err(p_after.mem, full.mem, full.n);
    equal = (int)-group_max(&g, -(double)equal);
    sq_err = group_max(&g, sq_err);
    if (test_tp_rank == 0)
        printf("[4 replicas: the GPU sum %s the MPI sum, sum of squares %.1e from the host's, "
               "weights after the step %s, moved %.1e] ", equal ? "is" : "is NOT",
               sq_err, same ? "identical" : "DIFFER", moved);
    CU_ASSERT(equal);
    CU_ASSERT(sq_err <= 1e-12);
    CU_ASSERT(same);
    CU_ASSERT(moved > 0); /* a step was taken */
    gpu_trainer_free(t);
    gpu_comm_free(gc);
    tfm_params_free(&full);
    tfm_params_free(&mine);
    tfm_params_free(&sum);
    tfm_params_free(&p_after);
    test_tp_group_close(&g);
}

/* A TP shard's GRPO step through the host trainer (trainer.h) with the gradient kept on
 * the GPU -- the group's q/k norm sums (gpu_trainer_tp_reduce) and the norm of the
 * primary slices (gpu_trainer_grad_sq_at) there -- against the same step with the
 * gradient brought to the host (the engine's tp_reduce and grad_sq_at cleared:
 * tfm_tp_reduce_grads and tfm_tp_grad_sq): the same norm within 1e-12, the same
 * weights and moments within 1e-6 of their largest values (the clip factor's last
 * bits). Shards with replicated kv heads keep the host path (their engine has no
 * tp_reduce). */
static void test_tp_engine(void)
{
    static const struct adamw_config adam = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.01f, 1.0f,
                                             LR_CONSTANT, 0, 100, 0.1f};
    static const struct grpo_config grpo = {0.2, 0.28, 2.0, 0.0, 0.0, 1e-6, 0.9};
    enum { N0 = 29, N1 = 23 };
    int n_gpu = 0;
    for (int k = 0; k < N_CFG; k++)
        for (int t = 2; t <= 4; t *= 2) {
            const struct tfm_config *c = &cfgs[k];
            struct test_tp_group g;
            struct tfm_params full, part, pa, pb;
            test_tp_model_open(&g, c, t, 61 + (uint64_t)k, 1, &full, &part);
            tfm_params_alloc(&pa, &g.tp.local);
            tfm_params_alloc(&pb, &g.tp.local);
            memcpy(pa.mem, part.mem, part.n * sizeof *part.mem);
            memcpy(pb.mem, part.mem, part.n * sizeof *part.mem);
            char err[512];
            struct gpu_comm *gc = gpu_comm_host_staged(api, &g.comm.tc);
            struct gpu_trainer *ga = gpu_trainer_create_tp(api, &g.tp, gc, c, &pa, 64, &adam,
                                                           err, sizeof err);
            struct gpu_trainer *gb = gpu_trainer_create_tp(api, &g.tp, gc, c, &pb, 64, &adam,
                                                           err, sizeof err);
            CU_ASSERT_FATAL(ga && gb);
            /* two sequences, prompts masked; behaviour log-probs from the model itself */
            int32_t ids[N0 + N1];
            uint8_t mask[N0 + N1];
            float behav[N0 + N1];
            for (int i = 0; i < N0 + N1; i++) {
                ids[i] = (int32_t)((i * 37 + 11 * k + t) % c->vocab_size);
                mask[i] = (i < N0 ? i : i - N0) >= 4;
            }
            int n_in[2] = {N0 - 1, N1 - 1};
            int32_t in[N0 + N1], tgt[N0 + N1];
            float lp[N0 + N1];
            for (int q = 0, at = 0, o = 0; q < 2; at += q ? 0 : N0, q++)
                for (int j = 0; j < n_in[q]; j++, o++)
                    in[o] = ids[at + j], tgt[o] = ids[at + j + 1];
            struct tfm_batch b = {2, n_in, in, tgt, NULL, 1.0f, NULL};
            gpu_trainer_forward(ga, &b, lp, NULL);
            for (int q = 0, at = 0, o = 0; q < 2; at += q ? 0 : N0, q++) {
                behav[at] = 0.0f;
                for (int j = 0; j < n_in[q]; j++, o++) behav[at + j + 1] = lp[o] + 0.05f;
            }
            struct train_seq seqs[2] = {{N0, ids, mask, behav, 1.0},
                                        {N1, ids + N0, mask + N0, behav + N0, -0.8}};
            struct trainer ta, tb;
            trainer_init_tp(&ta, &g.tp, &pa, &adam, NULL, 0, &grpo, 64);
            trainer_init_tp(&tb, &g.tp, &pb, &adam, NULL, 0, &grpo, 64);
            int replicated = c->n_kv_heads < t;
            struct gpu_comm *kc = replicated ? gpu_comm_host_staged(api, g.tp.kv_comm) : NULL;
            CU_ASSERT_EQUAL(gpu_trainer_engine(gb).tp_reduce == NULL, replicated); /* no kv group */
            gpu_trainer_set_kv_comm(gb, kc);
            struct train_engine ea = gpu_trainer_engine(ga), eb = gpu_trainer_engine(gb);
            CU_ASSERT(eb.tp_reduce != NULL);
            ea.tp_reduce = NULL; /* the host's reduction and norm */
            ea.grad_sq_at = NULL;
            trainer_set_engine(&ta, &ea);
            trainer_set_engine(&tb, &eb);
            struct grpo_stats sa = {0}, sb = {0};
            trainer_grads(&ta, seqs, 2, N0 + N1, &sa);
            trainer_grads(&tb, seqs, 2, N0 + N1, &sb);
            CU_ASSERT_EQUAL(ta.grads_on_engine, 0);
            CU_ASSERT_EQUAL(tb.grads_on_engine, 1);
            n_gpu += tb.grads_on_engine;
            double na = trainer_apply(&ta), nb = trainer_apply(&tb);
            trainer_fetch_moments(&ta);
            trainer_fetch_moments(&tb);
            trainer_fetch_params(&ta); /* the engines kept the weights */
            trainer_fetch_params(&tb);
            double n_err = fabs(na - nb) / na;
            double p_err = test_rel_err(tb.p.mem, ta.p.mem, ta.p.n);
            double m_err = fmax(test_rel_err(tb.opt.m, ta.opt.m, ta.opt.n),
                                test_rel_err(tb.opt.v, ta.opt.v, ta.opt.n));
            double moved = test_rel_err(ta.p.mem, part.mem, part.n);
            n_err = group_max(&g, n_err);
            p_err = group_max(&g, p_err);
            m_err = group_max(&g, m_err);
            if (test_tp_rank == 0)
                printf("\n    %s TP %d step, gradient %s: norm %.1e, weights %.1e, moments "
                       "%.1e from the host's", k == 0 ? "llama" : k == 1 ? "qwen2" : "qwen3",
                       t, replicated ? "on the GPU, kv heads replicated" : "on the GPU",
                       n_err, p_err, m_err);
            CU_ASSERT(na > 0 && n_err <= 1e-12);
            CU_ASSERT(p_err <= 1e-6);
            CU_ASSERT(m_err <= 1e-6);
            CU_ASSERT(moved > 0); /* a step was taken */
            trainer_free(&ta);
            trainer_free(&tb);
            gpu_trainer_free(ga);
            gpu_trainer_free(gb);
            gpu_comm_free(gc);
            gpu_comm_free(kc);
            tfm_params_free(&full);
            tfm_params_free(&part);
            test_tp_group_close(&g);
        }
    CU_ASSERT(n_gpu == 2 * N_CFG); /* every shard, the replicated kv heads' included */
}

static void test_refusals(void)
{
    const struct tfm_config *c = &cfgs[0];
    struct test_tp_group g;
    test_tp_group_open(&g, c, 2, test_tp_rank);
    struct tfm_params full;
    test_bf16_params(&full, c, 5);
    char err[512] = "";
    struct gpu_model *m1 = gpu_model_upload(api, c, &full, err, sizeof err);
    CU_ASSERT_FATAL(m1 != NULL);
    struct gpu_comm *gc = gpu_comm_host_staged(api, &g.comm.tc);
    /* the whole model where the shard belongs */
    CU_ASSERT_PTR_NULL(gpu_decoder_create_tp(m1, &g.tp, gc, 2, 64, 8, 0, err, sizeof err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "is not rank"));
    /* a group that is not the TP group (world, 4 ranks) */
    struct tfm_params part;
    tfm_params_alloc(&part, &g.tp.local);
    tfm_tp_shard(&g.tp, &full, &part);
    struct gpu_model *mt = gpu_model_upload(api, &g.tp.local, &part, err, sizeof err);
    CU_ASSERT_FATAL(mt != NULL);
    struct cpu_comm world;
    cpu_comm_bind(&world, MPI_COMM_WORLD);
    struct gpu_comm *wc = gpu_comm_host_staged(api, &world.tc);
    err[0] = '\0';
    CU_ASSERT_PTR_NULL(gpu_decoder_create_tp(mt, &g.tp, wc, 2, 64, 8, 0, err, sizeof err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "needs a group of 2 ranks"));
    gpu_comm_free(wc);
    gpu_comm_free(gc);
    gpu_model_free(mt);
    gpu_model_free(m1);
    tfm_params_free(&part);
    tfm_params_free(&full);
    test_tp_group_close(&g);
}

static const struct test_case cases[] = {
    {"GPU decoder TP 2, 4 = TP 1: prefill, fork, steps; tokens alike on a group", test_decode},
    {"GPU training TP 2, 4 = TP 1: log-probs, entropies, J and reduced gradients with the "
     "entropy term", test_train},
    {"GPU training DP 4: gradients summed on the GPUs, replicas step alike", test_dp},
    {"GPU training TP 2, 4: a step with the shard's gradient on the GPU = on the host",
     test_tp_engine},
    {"GPU decoder TP: the wrong shard or group is refused", test_refusals},
    {NULL, NULL},
};

static const struct test_suite suites[] = {{"GPU tensor parallel over MPI", cases}, {NULL, NULL}};

static void open_gpu(void) { api = test_cuda_or_skip("test_gpu_tp_mpi"); }

int main(int argc, char **argv)
{
    return test_tp_main(&argc, &argv, "test_gpu_tp_mpi", open_gpu, suites);
}
