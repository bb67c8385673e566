/*
 * What device cuda reports about itself (cpu_internal.h, cuda_describe_measured): the
 * CPU device's model checks, TP degrees and memory estimate (cpu_describe_model), with
 * the router's rates and the planner's cost model measured by rank 0 on GPU 0 of its
 * node at start-up (seconds; rank 0 keeps a CUDA context there afterwards):
 *   peaks       the bf16 GEMM rate (n x n x n, the largest n of 1024 .. 8192 whose
 *               product takes under 20 ms) and a 256 MiB device-to-device copy's
 *               bandwidth (gpu_peak.h), and the GPU's memory
 *   decode      the GPU decode engine on pattern weights of the model's shapes, cut
 *               to a few layers: decode steps at (batch 1, 64 tokens cached), (16, 64),
 *               (1, 256) and a 128-token prefill, each timed at two depths and
 *               extrapolated per layer to the model's depth (a model of any size is
 *               timed in the memory of a few layers), then cpu_rates_fit
 *   training    a forward + backward of 256 tokens on the GPU training path with zero
 *               weights, at 1 and 2 layers, extrapolated likewise
 *   cost model  the configured profile's interconnect, this GPU's peaks and memory,
 *               the model's profile in bf16, and the efficiencies the timings imply
 *               (decode_bw_util, prefill_mfu, train_mfu), as cpu_host.c does for the
 *               CPU; optimizer state 16 bytes a parameter
 * A TP-t instance is modelled as the TP-1 time / (0.8 t), as on the CPU: one GPU cannot
 * measure it, and the planner's online calibration corrects the rates with measured
 * step times. Without memory for the training measurement the configured train_mfu
 * stays (a warning says so).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "libra/gpu_decode.h"
#include "libra/gpu_model.h"
#include "libra/gpu_peak.h"
#include "libra/gpu_train.h"
#include "libra/log.h"

/* One depth's timings, seconds. */
struct depth_times {
    double t1, t16, t256, prefill128, train256;
};

/* The median of a decode step of n slots holding ctx tokens each (one untimed step
 * first: it records the step's CUDA graph). */
static double time_steps(struct gpu_decoder *d, int n, int ctx)
{
    int32_t tok[16] = {0};
    int slots[16];
    int32_t *prompt = xcalloc((size_t)ctx, sizeof *prompt);
    for (int s = 0; s < n; s++) {
        slots[s] = s;
        gpu_decoder_truncate(d, s, 0);
        if (gpu_decoder_prefill(d, s, prompt, ctx, NULL))
            FATAL("device cuda: the start-up timing's decoder has no room (a bug)");
    }
    free(prompt);
    double t[6];
    for (int k = 0; k < 6; k++) {
        double t0 = wall_time();
        if (gpu_decoder_step(d, slots, tok, n, NULL))
            FATAL("device cuda: the start-up timing's decoder has no room (a bug)");
        t[k] = wall_time() - t0;
    }
    for (int i = 2; i < 6; i++) /* insertion sort of the 5 timed steps */
        for (int j = i; j > 1 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    return t[3];
}

/* Decode and prefill of model c (pattern weights); -1 + message without the memory. */
static int time_decode(const struct cuda_api *api, const struct tfm_config *c,
                       struct depth_times *out, char *err, size_t errlen)
{
    struct gpu_model *m = gpu_model_pattern(api, c, 1, 0.02f, err, errlen);
    if (!m) return -1;
    struct gpu_decoder *d = gpu_decoder_create(m, 16, 272, 128, 0, err, errlen);
    if (!d) {
        gpu_model_free(m);
        return -1;
    }
    out->t1 = time_steps(d, 1, 64);
    out->t16 = time_steps(d, 16, 64);
    out->t256 = time_steps(d, 1, 256);
    int32_t *prompt = xcalloc(128, sizeof *prompt);
    double best = INFINITY;
    for (int k = 0; k < 3; k++) { /* the first records the chunk's graph */
        gpu_decoder_truncate(d, 0, 0);
        double t0 = wall_time();
        if (gpu_decoder_prefill(d, 0, prompt, 128, NULL))
            FATAL("device cuda: the start-up timing's decoder has no room (a bug)");
        double t = wall_time() - t0;
        if (k > 0 && t < best) best = t;
    }
    free(prompt);
    out->prefill128 = best;
    gpu_decoder_free(d);
    gpu_model_free(m);
    return 0;
}

/* A forward + backward of 256 tokens (one sequence) of model c, best of 2 after one
 * untimed; -1 + message without the memory. */
static int time_train(const struct cuda_api *api, const struct tfm_config *c, double *out,
                      char *err, size_t errlen)
{
    enum { T = 256 };
    static const struct adamw_config ac = {1e-5f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f,
                                           LR_CONSTANT, 0, 1, 1.0f};
    struct tfm_params p;
    tfm_params_alloc(&p, c);
    struct gpu_trainer *t = gpu_trainer_create(api, c, &p, T, &ac, err, errlen);
    tfm_params_free(&p);
    if (!t) return -1;
    int len = T;
    int32_t tok[T], tgt[T];
    float w[T];
    for (int i = 0; i < T; i++) {
        tok[i] = (int32_t)(i % c->vocab_size);
        tgt[i] = (int32_t)((i + 1) % c->vocab_size);
        w[i] = 1.0f / T;
    }
    struct tfm_batch b = {1, &len, tok, tgt, w, 1.0f, NULL};
    double best = INFINITY;
    for (int k = 0; k < 3; k++) {
        double t0 = wall_time();
        gpu_trainer_backward(t, &b); /* its own forward, then the backward; synchronised */
        double s = wall_time() - t0;
        if (k > 0 && s < best) best = s;
    }
    gpu_trainer_free(t);
    *out = best;
    return 0;
}

/* x at depth L from its values at depths la < lb (linear in the layers). */
static double at_depth(double xa, double xb, int la, int lb, int L)
{
    if (la == lb) return xa;
    double per = (xb - xa) / (lb - la);
    double x = xa + per * (L - la);
    return x > xa ? x : xa; /* timing noise must not make a deeper model faster */
}

/* The bf16 GEMM peak at the largest n of 1024 .. 8192 whose product takes < 20 ms. */
static double gemm_peak(const struct cuda_api *api)
{
    int n = 1024;
    double f = gpu_gemm_flops(api, n, 3);
    while (n < 8192 && 2.0 * (2.0 * n) * (2.0 * n) * (2.0 * n) / f < 0.02) {
        n *= 2;
        f = gpu_gemm_flops(api, n, 5);
    }
    return f;
}

int cuda_describe_measured(const struct libra_config *cfg, const struct cost_model *cm,
                           struct device_info *out, char *err, size_t errlen)
{
    struct tfm_config mc;
    if (cpu_describe_model(cfg, out, &mc, err, errlen)) return -1;
    snprintf(out->name, sizeof out->name, "cuda");
    char why[1024];
    const struct cuda_api *api = gpu_open(0, why, sizeof why);
    if (!api) {
        snprintf(err, errlen, "%s: device.type = \"cuda\": rank 0: %s", cfg->source, why);
        return -1;
    }
    double t0 = wall_time();
    size_t free_b = 0, total_b = 0;
    GPU_CHECK(api, api->mem_info(&free_b, &total_b));
    double flops = gemm_peak(api);
    double bw = gpu_copy_bytes_per_s(api, (size_t)256 << 20, 5);

    /* decode at two depths (the model's own when it has 4 layers or fewer) */
    int L = mc.n_layers, la = L < 2 ? L : 2, lb = L < 4 ? L : 4;
    struct depth_times a, b;
    struct tfm_config ca = mc, cb = mc;
    ca.n_layers = la;
    cb.n_layers = lb;
    if (time_decode(api, &ca, &a, why, sizeof why) ||
        (lb != la && time_decode(api, &cb, &b, why, sizeof why))) {
        snprintf(err, errlen, "%s: device.type = \"cuda\": rank 0 cannot time the decode engine "
                 "on GPU 0 with %d layers of the model: %s", cfg->source, lb, why);
        return -1;
    }
    if (lb == la) b = a;
    double t1 = at_depth(a.t1, b.t1, la, lb, L), t16 = at_depth(a.t16, b.t16, la, lb, L);
    double t256 = at_depth(a.t256, b.t256, la, lb, L);
    double pre = at_depth(a.prefill128, b.prefill128, la, lb, L);
    cpu_rates_fit(cfg, t1, t16, t256, pre, &out->rates);

    /* training at 1 and 2 layers */
    int ta = 1, tb = L < 2 ? 1 : 2;
    double train_a = 0, train_b = 0;
    ca.n_layers = ta;
    cb.n_layers = tb;
    int trained = time_train(api, &ca, &train_a, why, sizeof why) == 0 &&
                  (tb == ta || time_train(api, &cb, &train_b, why, sizeof why) == 0);
    if (tb == ta) train_b = train_a;

    struct cost_model *c = &out->cm;
    *c = *cm; /* the configured interconnect, node size and parameters */
    snprintf(c->hw.name, sizeof c->hw.name, "cuda-measured");
    c->hw.flops_peak = flops;
    c->hw.mem_bw = bw;
    c->hw.mem_capacity = (double)total_b;
    int n_gpus = api->device_count();
    if (n_gpus > 0) c->hw.gpus_per_node = n_gpus;
    cpu_model_profile(&mc, 2, &c->model);
    double P = c->model.n_params;
    double roof = fmax(P * 2 / bw, 2 * P / flops); /* a batch-1 decode step */
    c->p.decode_bw_util = fmin(1.0, fmax(1e-3, roof / t1));
    c->p.prefill_mfu = fmin(1.0, fmax(1e-3, 2 * P * 128 / (pre * flops)));
    if (trained)
        c->p.train_mfu = fmin(1.0, fmax(1e-3, 6 * P * 256 / (at_depth(train_a, train_b, ta, tb, L) *
                                                              flops)));
    else
        LOG_W("device cuda: no memory on GPU 0 to time a training step of the model's shapes "
              "(%s): the planner keeps the configured train_mfu %.2f", why, c->p.train_mfu);
    c->p.optimizer_bytes_per_param = 16;
    LOG_I("device cuda: GPU 0 measured in %.1f s: bf16 GEMM %.3g TFLOP/s, copy %.0f GB/s, "
          "%.1f GB; decode step %.2f ms (batch 1, 64 cached), prefill %.0f tokens/s; "
          "decode %.0f %% of the bandwidth roofline, prefill MFU %.1f %%, training MFU %.1f %%",
          wall_time() - t0, flops / 1e12, bw / 1e9, total_b / 1e9, t1 * 1e3, 128 / pre,
          100 * c->p.decode_bw_util, 100 * c->p.prefill_mfu, 100 * c->p.train_mfu);
    return 0;
}
