/*
 * `libra bench-gpu [SHAPE ...] [--batch B[,B...]] [--context N] [--steps N]
 *                    [--prompt N]`: the GPU engine (include/libra/gpu_decode.h) on GPU 0,
 * each figure beside a peak measured in the same run, so the result reads as a
 * fraction that does not depend on the card's clocks that day:
 *   gemm     cuBLASLt linear_fwd, 8192 x 8192 x 8192, bf16 in, float32 out: TFLOP/s
 *            (the peak the engine's matrix products can reach)
 *   copy     a 2 GiB device-to-device copy: GB/s, bytes read + written (the peak of a
 *            memory-bound step)
 *   prefill  one slot, a prompt of --prompt tokens (default 2048) in chunks of 512, with
 *            the chunks' attention on the tensor cores and in float32: tokens/s, and the
 *            matrix-product FLOP rate as a fraction of gemm
 *   decode   --batch slots (default 1,8,32,128,256) forked from one prefilled context of
 *            --context tokens (default 512; the blocks are shared, as the samples of a
 *            GRPO group share their prompt), then --steps steps (default 32) each with
 *            on-device sampling at T = 1: tokens/s, ms a step (the forward -- as CUDA
 *            graphs, and launched kernel by kernel -- and the sampling apart), and the
 *            bytes the forward must read (weights + KV) over its time as a fraction of
 *            copy; batches that take gemv (up to --gemv-rows slots, default
 *            GPU_GEMV_ROWS) also with cuBLASLt for the matrix products instead; then
 *            the last step's rows sampled with top-k 50 and with top-p 0.95 (T = 1):
 *            ms a call, against the plain sampling's
 *   weights  the install of new weights on a rollout instance (float32 or bf16 host
 *            parameters to the GPU's bf16 copy): GB/s against a 1 GiB host-to-device
 *            copy; and with a sync buffer, the copy within the GPU decoding waits for
 *            instead, as a fraction of the page-locked install
 *   train    --train S,L (default 4,2048): the causal attention of one sequence of L
 *            tokens alone (forward, backward; tensor-core and float32 kernels), then a
 *            training step (forward, backward, AdamW) of S sequences of L tokens with
 *            each: tokens/s and model FLOPs as a fraction of gemm, and one more step's
 *            phases apart (forward alone, forward + backward, the optimizer step); then
 *            what a run's step adds after it: the replicas' fingerprint of the weights
 *            (on the GPU: gpu_trainer_hash), a weight sync's sender reading the bf16
 *            weights (gpu_trainer_read, as read_slices does for the rollout ranks) and,
 *            for comparison, the float32 weights copied back whole (what every step
 *            did before the weights stayed on the GPU; a checkpoint still does).
 *            --train-reps 0: only the step of phases (with --train-attention
 *            tensor-core: one step's kernels, for a profiler)
 * SHAPE: qwen3-0.6b (default), qwen3-4b, llama3-8b -- the shapes of those checkpoints,
 * with pattern weights (gpu_model_pattern: no host copy, no checkpoint needed).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/cli.h"
#include "libra/driver.h"
#include "libra/gpu_decode.h"
#include "libra/gpu_model.h"
#include "libra/gpu_peak.h"
#include "libra/gpu_train.h"
#include "libra/log.h"
#include "libra/safetensors.h"

static void *dev_alloc(const struct cuda_api *api, size_t bytes)
{
    void *p = NULL;
    GPU_CHECK(api, api->alloc(&p, bytes));
    return p;
}

/* TFLOP/s of an 8192^3 bf16 matrix product (mean of 10 after 3 untimed). */
static double gemm_peak(const struct cuda_api *api) { return gpu_gemm_flops(api, 8192, 10) / 1e12; }

/* GB/s (read + written) of a 2 GiB device-to-device copy (mean of 10 after 2). */
static double copy_peak(const struct cuda_api *api)
{
    return gpu_copy_bytes_per_s(api, (size_t)2 << 30, 10) / 1e9;
}

/* Weights of the layers' matrix products (what a token multiplies by). */
static double layer_matmul_params(const struct tfm_config *c)
{
    double C = c->hidden_size, HD = (double)c->n_heads * c->head_dim;
    double KD = (double)c->n_kv_heads * c->head_dim, F = c->intermediate_size;
    return c->n_layers * (2 * C * HD + 2 * C * KD + 3 * C * F);
}

static void tokens_of(int32_t *t, int n, int V)
{
    for (int i = 0; i < n; i++) t[i] = (int32_t)((i * 7919 + 13) % V);
}

static void bench_prefill(const struct gpu_model *m, int prompt, double tflops)
{
    char err[512];
    struct gpu_decoder *d = gpu_decoder_create(m, 1, prompt, 512, 0, err, sizeof err);
    if (!d) FATAL("--bench-gpu: %s", err);
    int32_t *tok = xmalloc((size_t)prompt * sizeof *tok);
    tokens_of(tok, prompt, m->c.vocab_size);
    for (int flash = cuda_flash_supports(m->c.head_dim); flash >= 0; flash--) {
        gpu_decoder_set_flash(d, flash);
        if (gpu_decoder_prefill(d, 0, tok, prompt, NULL)) FATAL("--bench-gpu: prefill failed");
        gpu_decoder_truncate(d, 0, 0);
        double t0 = wall_time();
        const int reps = 3;
        for (int r = 0; r < reps; r++) {
            if (gpu_decoder_prefill(d, 0, tok, prompt, NULL)) FATAL("--bench-gpu: prefill failed");
            gpu_decoder_truncate(d, 0, 0);
        }
        double t = (wall_time() - t0) / reps;
        double rate = prompt / t, mm = 2.0 * layer_matmul_params(&m->c) * rate / 1e12;
        printf("  prefill %5d tokens, %-11s attention   %9.0f tokens/s   matrix products %6.1f "
               "TFLOP/s = %5.1f %% of gemm\n", prompt, flash ? "tensor-core" : "float32", rate,
               mm, 100 * mm / tflops);
    }
    free(tok);
    gpu_decoder_free(d);
}

static void bench_decode(const struct gpu_model *m, int B, int context, int steps, double gbs,
                         int gemv_rows)
{
    char err[512];
    const struct tfm_config *c = &m->c;
    int cap = context + 4 * (steps + 1) + 1;
    struct gpu_decoder *d = gpu_decoder_create(m, B, cap, 512, 0, err, sizeof err);
    if (!d) {
        printf("  decode  batch %4d: %s\n", B, err);
        return;
    }
    int32_t *tok = xmalloc((size_t)(context > B ? context : B) * sizeof *tok);
    int *slots = xmalloc((size_t)B * sizeof *slots);
    int64_t *traj = xmalloc((size_t)B * sizeof *traj), *pos = xmalloc((size_t)B * sizeof *pos);
    tokens_of(tok, context, c->vocab_size);
    if (gpu_decoder_prefill(d, 0, tok, context, NULL)) FATAL("--bench-gpu: prefill failed");
    for (int s = 0; s < B; s++) {
        if (s) gpu_decoder_fork(d, s, 0);
        slots[s] = s;
        traj[s] = s;
        tok[s] = (int32_t)(s % c->vocab_size);
    }
    /* four passes, step 0 of each untimed (a pass's graphs are recorded there):
     * launched kernel by kernel; as CUDA graphs with cuBLASLt for every product (only
     * where gemv would take the step); as CUDA graphs with the default path; the same
     * with overlapped launches (where the GPU has them) */
    int gemv = B <= gpu_decoder_set_gemv(d, gemv_rows);
    int overlap = gpu_decoder_set_overlap(d, 1);
    const struct sampler_config plain = {1.0f, 1.0f, 0, 1}, top_k = {1.0f, 1.0f, 50, 1},
                                top_p = {1.0f, 0.95f, 0, 1};
    double t_plain = 0, t_lt = 0, t_step = 0, t_sample = 0, t_overlap = 0;
    for (int pass = 0; pass < 4; pass++) {
        if ((pass == 1 && !gemv) || (pass == 3 && !overlap)) continue;
        gpu_decoder_set_graphs(d, pass != 0);
        gpu_decoder_set_gemv(d, pass != 1 ? gemv_rows : 0);
        gpu_decoder_set_overlap(d, pass == 3);
        for (int i = 0; i <= steps; i++) {
            double t0 = wall_time();
            if (gpu_decoder_step(d, slots, tok, B, NULL)) FATAL("--bench-gpu: step failed");
            double t1 = wall_time();
            for (int s = 0; s < B; s++) pos[s] = context + pass * (steps + 1) + i;
            gpu_decoder_sample(d, B, &plain, traj, pos, tok, NULL);
            if (i == 0) continue;
            if (pass == 0) t_plain += t1 - t0;
            if (pass == 1) t_lt += t1 - t0;
            if (pass == 3) t_overlap += t1 - t0;
            if (pass == 2) {
                t_step += t1 - t0;
                t_sample += wall_time() - t1;
            }
        }
    }
    double t_top[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        gpu_decoder_sample(d, B, k ? &top_p : &top_k, traj, pos, tok, NULL); /* untimed */
        double t0 = wall_time();
        for (int i = 0; i < steps; i++)
            gpu_decoder_sample(d, B, k ? &top_p : &top_k, traj, pos, tok, NULL);
        t_top[k] = (wall_time() - t0) / steps;
    }
    t_lt /= steps;
    t_overlap /= steps;
    t_plain /= steps;
    t_step /= steps;
    t_sample /= steps;
    double t = t_step + t_sample;
    /* bytes a step reads at least: every weight but the embedding rows not gathered, and
     * each slot's keys and values (bf16) */
    double embed_rows = c->tie_word_embeddings ? 0 : (double)c->vocab_size * c->hidden_size;
    double w = ((double)m->at.n - embed_rows) * 2;
    double kv = (double)B * (context + steps / 2.0) * c->n_layers * 2.0 * c->n_kv_heads *
                c->head_dim * 2;
    double bw = (w + kv) / t_step / 1e9, bw_overlap = overlap ? (w + kv) / t_overlap / 1e9 : 0;
    char lt[40] = "", ov[80] = "";
    if (gemv) snprintf(lt, sizeof lt, ", %6.2f with cuBLASLt", 1e3 * t_lt);
    if (overlap)
        snprintf(ov, sizeof ov, "; overlapped launches: forward %6.2f ms = %4.1f %% of copy",
                 1e3 * t_overlap, 100 * bw_overlap / gbs);
    printf("  decode  batch %4d   %8.0f tokens/s   %6.2f ms a step (forward %6.2f [%6.2f without "
           "graphs%s], sampling %5.2f)   forward reads %6.0f GB/s = %4.1f %% of copy%s\n", B,
           B / t, 1e3 * t, 1e3 * t_step, 1e3 * t_plain, lt, 1e3 * t_sample, bw, 100 * bw / gbs,
           ov);
    printf("  sample  batch %4d   %6.2f ms plain, %6.2f top-k 50, %6.2f top-p 0.95\n", B,
           1e3 * t_sample, 1e3 * t_top[0], 1e3 * t_top[1]);
    free(tok);
    free(slots);
    free(traj);
    free(pos);
    gpu_decoder_free(d);
}

/* Pattern parameters (values in [-0.02, 0.02], a 1M-value pattern repeated; no
 * checkpoint) for a training replica or a weight install. */
static void pattern_params(struct tfm_params *p)
{
    size_t k = p->n < ((size_t)1 << 20) ? p->n : ((size_t)1 << 20);
    uint32_t h = 2463534242u;
    for (size_t i = 0; i < k; i++) {
        h ^= h << 13, h ^= h >> 17, h ^= h << 5;
        p->mem[i] = ((float)(h >> 8) / (float)(1u << 24) - 0.5f) * 0.04f;
    }
    for (size_t i = k; i < p->n; i += k)
        memcpy(p->mem + i, p->mem, (p->n - i < k ? p->n - i : k) * sizeof *p->mem);
}

/* GB/s of a host-to-device copy of 1 GiB from ordinary (pageable) memory, the path a
 * weight install takes (mean of 3 after 1). */
static double h2d_peak(const struct cuda_api *api)
{
    size_t bytes = (size_t)1 << 30;
    void *d = dev_alloc(api, bytes);
    char *h = xmalloc(bytes);
    memset(h, 1, bytes);
    GPU_CHECK(api, api->to_device(d, h, bytes));
    double t0 = wall_time();
    for (int r = 0; r < 3; r++) GPU_CHECK(api, api->to_device(d, h, bytes));
    double t = (wall_time() - t0) / 3;
    free(h);
    GPU_CHECK(api, api->free(d));
    return (double)bytes / t / 1e9;
}

/* The rollout side of a weight sync: new weights installed as the GPU model's bf16
 * block, from float32 host parameters (gpu_model_set_weights: a float32 sync) and from
 * bf16 ones (gpu_model_set_weights_bf16: a bf16 sync to a rank that only serves), as
 * GB/s of bf16 written against the host-to-device copy. */
static void bench_weights(struct gpu_model *m, double h2d)
{
    double t_pinned = 0;
    struct tfm_params p;
    tfm_params_alloc(&p, &m->c);
    pattern_params(&p);
    gpu_model_set_weights(m, &p);
    double t0 = wall_time();
    const int reps = 2;
    for (int r = 0; r < reps; r++) gpu_model_set_weights(m, &p);
    GPU_CHECK(m->api, m->api->sync());
    double t = (wall_time() - t0) / reps, gbs = (double)m->at.n * 2 / t / 1e9;
    printf("  weights install %.2f GB of bf16 from float32 host parameters: %6.3f s = %5.2f GB/s "
           "= %4.1f %% of host-to-device copy\n", (double)m->at.n * 2 / 1e9, t, gbs,
           100 * gbs / h2d);
    for (int pinned = 0; pinned < 2; pinned++) { /* a run's bf16 syncs land page-locked */
        uint16_t *w16 = NULL;
        if (!pinned)
            w16 = xmalloc(p.n * sizeof *w16);
        else if (m->api->host_alloc((void **)&w16, p.n * sizeof *w16))
            FATAL("bench-gpu: host_alloc of %zu bytes: %s", p.n * sizeof *w16,
                  m->api->last_error());
        st_f32_to_bf16_n(p.mem, w16, p.n);
        gpu_model_set_weights_bf16(m, w16);
        t0 = wall_time();
        for (int r = 0; r < reps; r++) gpu_model_set_weights_bf16(m, w16);
        t = (wall_time() - t0) / reps, gbs = (double)m->at.n * 2 / t / 1e9;
        printf("                  %.2f GB of bf16 from bf16 %s host memory: %6.3f s = %5.2f "
               "GB/s = %4.1f %% of host-to-device copy\n", (double)m->at.n * 2 / 1e9,
               pinned ? "page-locked" : "pageable   ", t, gbs, 100 * gbs / h2d);
        if (pinned) t_pinned = t;
        if (pinned)
            GPU_CHECK(m->api, m->api->host_free(w16));
        else
            free(w16);
    }
    tfm_params_free(&p);
    /* with a sync buffer (rollout.sync_buffer) the install is a copy within the GPU:
     * all that decoding waits for, the transfer having gone on beside it */
    const struct cuda_api *api = m->api;
    size_t bytes = m->at.n * sizeof *m->w;
    uint16_t *buf = NULL;
    if (api->alloc((void **)&buf, bytes)) {
        printf("                  (no GPU memory for a sync buffer of %.2f GB)\n", bytes / 1e9);
        return;
    }
    GPU_CHECK(api, api->copy(buf, m->w, bytes));
    GPU_CHECK(api, api->sync());
    t0 = wall_time();
    for (int r = 0; r < 3; r++) GPU_CHECK(api, api->copy(m->w, buf, bytes));
    GPU_CHECK(api, api->sync());
    t = (wall_time() - t0) / 3;
    printf("                  through the sync buffer: decoding waits %.2f ms for the copy on "
           "the GPU = %.3f of the page-locked install\n", t * 1e3, t / t_pinned);
    GPU_CHECK(api, api->free(buf));
}

/* Causal attention of n_seq sequences of len tokens with the shape's heads, forward
 * and backward, on the tensor cores (flash_*: the packed batch in one launch) and on
 * the float32 kernels (attn_*: a launch a sequence): TFLOP/s of the useful products
 * (forward 2 of len^2 / 2 x H x D multiply-adds a sequence, backward 5), mean of 3
 * after 1 untimed. */
static void bench_attention(const struct cuda_api *api, const struct tfm_config *c, int n_seq,
                            int len, double tflops)
{
    int H = c->n_heads, K = c->n_kv_heads, D = c->head_dim, T = n_seq * len;
    size_t nq = (size_t)T * H * D, nk = (size_t)T * K * D;
    float *q = dev_alloc(api, nq * 4), *k = dev_alloc(api, nk * 4), *v = dev_alloc(api, nk * 4);
    float *o = dev_alloc(api, nq * 4), *dout = dev_alloc(api, nq * 4), *dq = dev_alloc(api, nq * 4);
    float *dk = dev_alloc(api, nk * 4), *dv = dev_alloc(api, nk * 4);
    float *lse = dev_alloc(api, (size_t)T * H * 4), *st = dev_alloc(api, (size_t)T * H * 8);
    int32_t *pos = dev_alloc(api, (size_t)T * 4), *hp = xmalloc((size_t)(T + n_seq + 1) * 4);
    int32_t *start = dev_alloc(api, (size_t)(n_seq + 1) * 4);
    float *hx = xmalloc((nq + 16) * 4); /* k and v read it at offsets 7 and 13 */
    for (size_t i = 0; i < nq + 16; i++)
        hx[i] = (float)((i * 2654435761u >> 20) % 2001) / 1000.0f - 1.0f;
    GPU_CHECK(api, api->to_device(q, hx, nq * 4));
    GPU_CHECK(api, api->to_device(dout, hx, nq * 4));
    GPU_CHECK(api, api->to_device(k, hx + 7, nk * 4));
    GPU_CHECK(api, api->to_device(v, hx + 13, nk * 4));
    for (int i = 0; i < T; i++) hp[i] = i % len;
    GPU_CHECK(api, api->to_device(pos, hp, (size_t)T * 4));
    for (int s = 0; s <= n_seq; s++) hp[s] = s * len;
    GPU_CHECK(api, api->to_device(start, hp, (size_t)(n_seq + 1) * 4));
    struct cuda_seqs sq = {.q_start = start, .k_start = start, .n = n_seq, .nq = T, .nk = T,
                           .max_q = len, .max_k = len};
    double fwd = 2.0 * 2.0 * (double)len * (len + 1) / 2.0 * H * D * n_seq;
    for (int flash = 1; flash >= 0; flash--) {
        if (flash && !cuda_flash_supports(D)) continue;
        double t[2];
        for (int pass = 0; pass < 2; pass++) {
            double t0 = 0;
            for (int r = 0; r <= 3; r++) {
                if (r == 1) {
                    GPU_CHECK(api, api->sync());
                    t0 = wall_time();
                }
                if (pass == 0 && flash)
                    GPU_CHECK(api, api->flash_fwd(o, lse, q, k, v, pos, &sq, H, K, D));
                else if (pass == 1 && flash)
                    GPU_CHECK(api, api->flash_bwd(dq, dk, dv, dout, q, k, v, o, lse, pos, &sq, H,
                                                  K, D, st));
                for (size_t s = 0; s < (size_t)n_seq && !flash; s++) {
                    size_t a = s * len * (size_t)H * D, b = s * len * (size_t)K * D;
                    if (pass == 0)
                        GPU_CHECK(api, api->attn_fwd(o + a, q + a, k + b, v + b, pos, len, len, H,
                                                     K, D));
                    else
                        GPU_CHECK(api, api->attn_bwd(dq + a, dk + b, dv + b, dout + a, q + a,
                                                     k + b, v + b, pos, len, len, H, K, D, st));
                }
            }
            GPU_CHECK(api, api->sync());
            t[pass] = (wall_time() - t0) / 3;
        }
        double rf = fwd / t[0] / 1e12, rb = 2.5 * fwd / t[1] / 1e12;
        printf("  attention %-11s %d x %d tokens: forward %7.2f ms = %6.1f TFLOP/s (%4.1f %% of "
               "gemm)   backward %7.2f ms = %6.1f TFLOP/s (%4.1f %%)\n",
               flash ? "tensor-core" : "float32", n_seq, len, 1e3 * t[0], rf, 100 * rf / tflops,
               1e3 * t[1], rb, 100 * rb / tflops);
    }
    void *b[] = {q, k, v, o, dout, dq, dk, dv, lse, st, pos, start};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) GPU_CHECK(api, api->free(b[i]));
    free(hp), free(hx);
}

/* One training step on the GPU training path (gpu_train.h) over n_seq sequences of len
 * tokens: the forward keeping the activations, the backward, the clipped AdamW step,
 * timed over reps steps after 1 (none with reps 0). Model FLOPs: 6 per matrix-product weight and token (the
 * layers and the output head) plus the causal attention's 12 L / 2 H D per token and
 * layer, against the measured gemm peak. */
static void bench_train(const struct cuda_api *api, const struct tfm_config *c, int n_seq,
                        int len, int flash, int reps, double tflops)
{
    int T = n_seq * len;
    printf("  train   %d x %d tokens, %-11s attention  ", n_seq, len,
           flash ? "tensor-core" : "float32");
    fflush(stdout);
    struct tfm_params p;
    tfm_params_alloc(&p, c);
    pattern_params(&p);
    static const struct adamw_config ac = {1e-5f, 0.9f, 0.95f, 1e-8f, 0.01f, 1.0f,
                                           LR_CONSTANT, 0, 100, 0.1f};
    char err[512];
    struct gpu_trainer *t = gpu_trainer_create(api, c, &p, T, &ac, err, sizeof err);
    if (!t) {
        tfm_params_free(&p);
        printf("%s\n", err);
        return;
    }
    gpu_trainer_set_flash(t, flash);
    int *seq_len = xmalloc((size_t)n_seq * sizeof *seq_len);
    int32_t *tok = xmalloc((size_t)T * sizeof *tok), *tgt = xmalloc((size_t)T * sizeof *tgt);
    float *w = xmalloc((size_t)T * sizeof *w);
    tokens_of(tok, T, c->vocab_size);
    for (int i = 0; i < n_seq; i++) seq_len[i] = len;
    for (int i = 0; i < T; i++) {
        tgt[i] = (i + 1) % len ? tok[i + 1] : -1;
        w[i] = 1.0f / (float)T;
    }
    struct tfm_batch b = {n_seq, seq_len, tok, tgt, w, 1.0f, NULL};
    double t0 = 0;
    for (int r = 0; reps > 0 && r <= reps; r++) {
        if (r == 1) t0 = wall_time();
        gpu_trainer_zero_grad(t);
        gpu_trainer_backward(t, &b);
        gpu_trainer_step(t);
    }
    GPU_CHECK(api, api->sync());
    if (reps > 0) {
        double dt = (wall_time() - t0) / reps;
        double HD = (double)c->n_heads * c->head_dim;
        double fwd = 2.0 * (layer_matmul_params(c) + (double)c->hidden_size * c->vocab_size) +
                     c->n_layers * 2.0 * 2.0 * HD * (len + 1) / 2.0;
        double rate = 3.0 * fwd * T / dt / 1e12;
        printf("%9.0f tokens/s   %7.1f ms a step   %6.1f TFLOP/s = %4.1f %% of gemm (MFU)   ",
               T / dt, 1e3 * dt, rate, 100 * rate / tflops);
    }
    printf("%.1f GB on the GPU%s\n", (double)gpu_trainer_bytes(t) / 1e9,
           gpu_trainer_recomputes(t) ? " (activations recomputed: MFU counts the model's FLOPs)"
                                     : "");
    /* where a step goes: one more, its phases apart (each ends with a sync) */
    float *lp = xmalloc((size_t)T * sizeof *lp);
    double p0 = wall_time();
    gpu_trainer_forward(t, &b, lp, NULL);
    double p1 = wall_time();
    gpu_trainer_zero_grad(t);
    gpu_trainer_backward(t, &b);
    double p2 = wall_time();
    gpu_trainer_step(t);
    GPU_CHECK(api, api->sync());
    double p3 = wall_time();
    printf("          phases: forward alone %.1f ms; forward + backward %.1f ms; clipped AdamW "
           "%.1f ms\n", 1e3 * (p1 - p0), 1e3 * (p2 - p1), 1e3 * (p3 - p2));
    if (flash) { /* what a run's step adds (the replicas' check, a sync's sender) */
        uint16_t *w16 = NULL; /* page-locked, as a run's sender copy (send_bf16) */
        if (api->host_alloc((void **)&w16, p.n * sizeof *w16))
            FATAL("bench-gpu: host_alloc of %zu bytes: %s", p.n * sizeof *w16,
                  api->last_error());
        double h0 = wall_time();
        uint64_t fp = gpu_trainer_hash(t);
        double h1 = wall_time();
        gpu_trainer_read(t, 0, p.n, NULL, w16);
        double h2 = wall_time();
        gpu_trainer_params(t, &p);
        double h3 = wall_time();
        double gb = (double)p.n * sizeof *p.mem / 1e9;
        printf("          a run's step also: the fingerprint on the GPU %.1f ms (%016llx); a "
               "sync sender's bf16 weights to page-locked host memory %.1f ms (%.1f GB/s); "
               "float32 weights to pageable host memory %.1f ms (%.1f GB/s)\n",
               1e3 * (h1 - h0), (unsigned long long)fp, 1e3 * (h2 - h1), gb / 2 / (h2 - h1),
               1e3 * (h3 - h2), gb / (h3 - h2));
        GPU_CHECK(api, api->host_free(w16));
    }
    tfm_params_free(&p);
    free(lp);
    free(seq_len), free(tok), free(tgt), free(w);
    gpu_trainer_free(t);
}

static const struct option bench_gpu_opts[] = {
    {"batch", required_argument, NULL, 'b'},
    {"context", required_argument, NULL, 'c'},
    {"steps", required_argument, NULL, 's'},
    {"prompt", required_argument, NULL, 'p'},
    {"train", required_argument, NULL, 't'},
    {"gemv-rows", required_argument, NULL, 'g'},
    {"train-reps", required_argument, NULL, 'r'},
    {"train-attention", required_argument, NULL, 'a'},
    {0}};
static const struct cli_cmd bench_gpu_cmd = {
    "libra bench-gpu",
    "libra bench-gpu [SHAPE ...] [--batch B[,B...]] [--context N] [--steps N] [--prompt N]\n"
    "                [--train S,L] [--train-reps R] [--train-attention A] [--gemv-rows N]",
    "The GPU engine on GPU 0 (needs the CUDA module), each figure beside a peak measured\n"
    "in the same run. SHAPE: qwen3-0.6b (default), qwen3-4b, llama3-8b (pattern weights).\n"
    "  --batch B[,B...]  decode batch sizes, 1 .. 4096 (default 1,8,32,128,256)\n"
    "  --context N       the decode context in tokens (default 512)\n"
    "  --steps N         decode steps timed (default 32)\n"
    "  --prompt N        the prefill prompt in tokens (default 2048)\n"
    "  --train S,L       a training step of S sequences of L tokens (default 4,2048; 0: none)\n"
    "  --train-reps R    training steps timed after one (default 3); 0: only one step, its\n"
    "                    phases apart (one step's kernels, for a profiler)\n"
    "  --train-attention tensor-core|float32|both   the training steps' attention kernels\n"
    "                    (default both; tensor-core where the head dimension allows)\n"
    "  --gemv-rows N     decode steps of up to N rows through gemv, 0 .. 8 (default: the\n"
    "                    engine's, GPU_GEMV_ROWS); each such batch is timed with cuBLASLt too\n",
    bench_gpu_opts, NULL, 0, 8, 0};

int cmd_bench_gpu(int argc, char **argv)
{
    int batch[16] = {1, 8, 32, 128, 256}, n_batch = 5, context = 512, steps = 32, prompt = 2048;
    int train[2] = {4, 2048}, n_train = 2, gemv_rows = GPU_GEMV_ROWS, train_reps = 3;
    int train_att = 2; /* tensor-core, float32, both */
    const char *shapes[8];
    int n_shapes = 0, ch = 0, bad = 0;
    struct cli cli;
    cli_begin(&cli, &bench_gpu_cmd, argc, argv);
    while (!bad && (ch = cli_next(&cli)) > 0) {
        if (ch == 'b') bad = (n_batch = cli_int_list(&cli, 1, 4096, batch, 16)) < 0;
        else if (ch == 'c') bad = cli_int(&cli, 1, 1 << 20, &context);
        else if (ch == 's') bad = cli_int(&cli, 1, 1 << 20, &steps);
        else if (ch == 'p') bad = cli_int(&cli, 1, 1 << 20, &prompt);
        else if (ch == 'g') bad = cli_int(&cli, 0, CUDA_GEMV_MAX_ROWS, &gemv_rows);
        else if (ch == 'r') bad = cli_int(&cli, 0, 100, &train_reps);
        else if (ch == 'a')
            bad = (train_att = cli_choice(&cli, "tensor-core|float32|both")) < 0;
        else bad = (n_train = cli_int_list(&cli, 0, 1 << 20, train, 2)) < 0;
    }
    if (bad || ch == CLI_EXIT) return cli.rc;
    if (train[0] > 0 && (n_train != 2 || train[1] < 2 || (long long)train[0] * train[1] > 1 << 20))
        return cli_error(&cli, "--train S,L: S sequences of L >= 2 tokens, at most 2^20 in all");
    for (int i = 0; i < cli.nargs; i++) {
        if (!bench_model_shape(cli.args[i]))
            return cli_error(&cli, "no model shape '%s' (qwen3-0.6b, qwen3-4b, llama3-8b)",
                             cli.args[i]);
        shapes[n_shapes++] = cli.args[i];
    }
    if (n_shapes == 0) shapes[n_shapes++] = "qwen3-0.6b";
    char err[2048];
    const struct cuda_api *api = gpu_open(0, err, sizeof err);
    if (!api) {
        fprintf(stderr, "libra: --bench-gpu: %s\n", err);
        return 1;
    }
    char line[256];
    GPU_CHECK(api, api->device_describe(0, line, sizeof line));
    double tflops = gemm_peak(api), gbs = copy_peak(api), h2d = h2d_peak(api);
    printf("libra bench-gpu: %s\n  gemm 8192^3 bf16: %.1f TFLOP/s   copy 2 GiB: %.0f GB/s "
           "(read + written)   host-to-device 1 GiB: %.1f GB/s\n", line, tflops, gbs, h2d);
    for (int s = 0; s < n_shapes; s++) {
        const struct tfm_config *c = bench_model_shape(shapes[s]);
        struct gpu_model *m = gpu_model_pattern(api, c, 1, 0.02f, err, sizeof err);
        if (!m) {
            printf("%s: %s\n", shapes[s], err);
            continue;
        }
        printf("%s: %.2fB parameters, %.2f GB of bf16 weights on the GPU\n", shapes[s],
               (double)m->at.n / 1e9, (double)m->bytes / 1e9);
        bench_prefill(m, prompt, tflops);
        for (int b = 0; b < n_batch; b++)
            bench_decode(m, batch[b], context, steps, gbs, gemv_rows);
        bench_weights(m, h2d);
        gpu_model_free(m);
        if (train[0] > 0) {
            bench_attention(api, c, train[0], train[1], tflops);
            for (int flash = cuda_flash_supports(c->head_dim); flash >= 0; flash--)
                if (train_att == 2 || train_att == !flash)
                    bench_train(api, c, train[0], train[1], flash, train_reps, tflops);
        }
        fflush(stdout);
    }
    return 0;
}
