/*
 * The CPU device's planning cost model (device_info.cm): this host and the loaded
 * model, measured at start-up, in the analytic cost model's terms (include/libra/
 * cost.h), so the global resource planner plans CPU ranks as it plans GPUs.
 *
 *   flops_peak      single-precision GEMM rate of one rank (one BLAS thread: the
 *                   ranks of a node share its cores), 256^3 sgemm, best of 5
 *   mem_bw          memcpy of 64 MB, read + write bytes per second, best of 3
 *   mem_capacity    physical memory / cores (the ranks of a node share it)
 *   bw_intra_node   mem_bw / 2 (shared-memory MPI copies every byte twice), the
 *                   same between nodes (one host); latency 5 us (an assumption,
 *                   typical of shared-memory MPI)
 *   model profile   the model's own shapes; 4-byte (fp32) weights
 *   efficiencies    from the engine on those shapes: decode_bw_util = the roofline
 *                   time of a batch-1 decode step / its measured time; prefill_mfu
 *                   and train_mfu = model FLOPs / (measured time x flops_peak) of a
 *                   128-token prefill and of a 256-token forward + backward;
 *                   optimizer state 16 bytes a parameter (weights, gradients, two
 *                   AdamW moments in fp32)
 * The planner's online calibration corrects what this leaves out (bookkeeping, the
 * tools, the oversubscription of a shared machine).
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_internal.h"
#include "libra/log.h"
#include "libra/tfm_decode.h"

static double best_time(double t, double best) { return t < best ? t : best; }

static double gemm_flops(void)
{
    const int n = 256;
    float *a = xcalloc((size_t)n * n, sizeof *a), *b = xcalloc((size_t)n * n, sizeof *b);
    float *c = xcalloc((size_t)n * n, sizeof *c);
    for (size_t i = 0; i < (size_t)n * n; i++) a[i] = b[i] = (float)(i % 7) * 0.1f;
    double best = INFINITY;
    for (int k = 0; k < 5; k++) {
        double t0 = wall_time();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        best = best_time(wall_time() - t0, best);
    }
    free(a);
    free(b);
    free(c);
    return 2.0 * n * (double)n * n / best;
}

static double memcpy_bw(void)
{
    const size_t n = (size_t)64 << 20;
    char *a = xmalloc(n), *b = xmalloc(n);
    memset(a, 1, n);
    memset(b, 2, n);
    double best = INFINITY;
    for (int k = 0; k < 3; k++) {
        double t0 = wall_time();
        memcpy(b, a, n);
        best = best_time(wall_time() - t0, best);
    }
    volatile char sink = b[n / 2]; /* keep the copy */
    (void)sink;
    free(a);
    free(b);
    return 2.0 * (double)n / best;
}

/* Seconds of a forward + backward over 256 tokens (one sequence), best of 2. */
static double train_time(const struct tfm_config *mc, const struct tfm_params *p)
{
    enum { T = 256 };
    int len = T;
    int32_t tok[T], tgt[T];
    for (int i = 0; i < T; i++) {
        tok[i] = i % 256;
        tgt[i] = (i + 1) % 256;
    }
    struct tfm_batch b = {1, &len, tok, tgt, NULL, 1.0f, NULL};
    struct tfm_state *s = tfm_state_create(mc, T);
    struct tfm_params g;
    tfm_params_alloc(&g, mc);
    double best = INFINITY;
    for (int k = 0; k < 2; k++) {
        double t0 = wall_time();
        tfm_backward(mc, p, s, &b, &g);
        best = best_time(wall_time() - t0, best);
    }
    tfm_params_free(&g);
    tfm_state_free(s);
    return best;
}

void cpu_model_profile(const struct tfm_config *mc, int dtype_bytes, struct model_profile *m)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "model");
    snprintf(m->family, sizeof m->family, "%s",
             mc->family == TFM_QWEN3 ? "qwen3" : mc->family == TFM_QWEN2 ? "qwen2" : "llama");
    m->n_params = m->n_active_params = (double)tfm_param_count(mc);
    m->n_layers = mc->n_layers;
    m->hidden = mc->hidden_size;
    m->n_heads = mc->n_heads;
    m->n_kv_heads = mc->n_kv_heads;
    m->head_dim = mc->head_dim;
    m->vocab = mc->vocab_size;
    m->intermediate = mc->intermediate_size;
    m->dtype_bytes = dtype_bytes;
}

void cpu_host_cost_model(const struct tfm_config *mc, const struct tfm_params *p,
                         double decode1_s, double prefill128_s, struct cost_model *cm)
{
    memset(cm, 0, sizeof *cm);
    int threads = openblas_get_num_threads();
    openblas_set_num_threads(1); /* a rank's share of the node */
    double flops = gemm_flops(), bw = memcpy_bw(), train_s = train_time(mc, p);
    openblas_set_num_threads(threads);
    long cores = sysconf(_SC_NPROCESSORS_ONLN), pages = sysconf(_SC_PHYS_PAGES);
    long page = sysconf(_SC_PAGESIZE);
    double ram = pages > 0 && page > 0 ? (double)pages * page : 16e9;

    struct hw_profile *hw = &cm->hw;
    snprintf(hw->name, sizeof hw->name, "cpu-host");
    hw->flops_peak = flops;
    hw->mem_bw = bw;
    hw->mem_capacity = ram / (cores > 0 ? cores : 1);
    hw->bw_intra_node = hw->bw_inter_node = bw / 2;
    hw->gpus_per_node = cores > 0 ? (int)cores : 1;
    hw->latency_intra_s = hw->latency_inter_s = 5e-6;

    struct model_profile *m = &cm->model;
    cpu_model_profile(mc, 4, m);

    double P = m->n_params;
    double roof = fmax(P * 4 / bw, 2 * P / flops); /* a batch-1 decode step */
    cm->p.decode_bw_util = fmin(1.0, fmax(1e-3, roof / decode1_s));
    cm->p.prefill_mfu = fmin(1.0, fmax(1e-3, 2 * P * 128 / (prefill128_s * flops)));
    cm->p.train_mfu = fmin(1.0, fmax(1e-3, 6 * P * 256 / (train_s * flops)));
    cm->p.gpu_memory_utilization = 0.9;
    cm->p.kv_frag_rate = 0;
    cm->p.act_workspace_bytes = 0;
    cm->p.optimizer_bytes_per_param = 16;
}
