/*
 * The host module's kernels of the output head and the optimizer
 * (include/libra/cuda_api.h): logsoftmax_fwd / logsoftmax_bwd (the CPU references),
 * the vocabulary-parallel vocab_max / vocab_sums / vocab_logsoftmax_bwd (the
 * arithmetic of tp_logsoftmax_forward / _backward: float z and expf, double sums),
 * entropy_bwd / vocab_entropy_bwd (the CPU references),
 * sample (sampler_sample per row: the same keyed draw, so the same tokens as the CUDA
 * sampler up to its documented rounding coincidences), vocab_greedy_stats /
 * vocab_sample_max / _sums / _pick / _topk (sampler_tp_*'s steps per row), sum_squares
 * (double, in index order), adamw_update (adamw.h's element update) and weights_hash
 * (hash.h's weights_sum_hash). sum_squares and weights_hash write a host value, so they
 * are refused inside a graph recording, as the CUDA module's (which copy) would be.
 * Limits: one thread. sample works in row r's 2V floats of the caller's scratch, as
 * the CUDA kernel does, so a scratch too small for it shows in the sanitizers and
 * valgrind here.
 */
#include "cuda_host_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libra/adamw.h"
#include "libra/cpu_ops.h"
#include "libra/hash.h"
#include "libra/log.h"
#include "libra/safetensors.h"
#include "libra/sampler.h"

int ch_logsoftmax_fwd(const void *args)
{
    const struct logsoftmax_args *a = args;
    logsoftmax_forward(a->logprob, a->entropy, a->logits, a->targets, a->N, a->V,
                       a->temperature);
    for (int i = 0; i < a->N && (a->mx || a->lsum_out); i++) {
        float mx;
        double lsum;
        logsoftmax_row_stats(a->logits + (size_t)i * a->V, a->V, a->temperature, &mx, &lsum);
        if (a->mx) a->mx[i] = mx;
        if (a->lsum_out) a->lsum_out[i] = lsum;
    }
    return 0;
}

/* The float32 terms of a backward into zeros, then rounded into a->dl16. */
static void to_bf16_rows(const struct logsoftmax_args *a, int (*bwd)(const void *))
{
    size_t n = (size_t)(a->N > 0 ? a->N : 0) * (size_t)a->V;
    struct logsoftmax_args f = *a;
    f.dl16 = NULL;
    f.dlogits = xcalloc(n ? n : 1, sizeof *f.dlogits);
    bwd(&f);
    st_f32_to_bf16_n(f.dlogits, a->dl16, n);
    free(f.dlogits);
}

int ch_logsoftmax_bwd(const void *args)
{
    const struct logsoftmax_args *a = args;
    if (a->dl16) {
        to_bf16_rows(a, ch_logsoftmax_bwd);
        return 0;
    }
    logsoftmax_backward(a->dlogits, a->dlogprob, a->logits, a->targets, a->N, a->V,
                        a->temperature);
    return 0;
}

int ch_vocab_max(const void *args)
{
    const struct logsoftmax_args *a = args;
    for (int i = 0; i < a->N; i++) {
        const float *xi = a->logits + (size_t)i * a->V;
        float m = -INFINITY;
        for (int j = 0; j < a->V; j++) {
            float z = xi[j] / a->temperature;
            m = z > m ? z : m;
        }
        a->mx[i] = m;
    }
    return 0;
}

int ch_vocab_sums(const void *args)
{
    const struct logsoftmax_args *a = args;
    for (int i = 0; i < a->N; i++) {
        const float *xi = a->logits + (size_t)i * a->V;
        float m = a->mx_in[i];
        double s = 0, e = 0;
        for (int j = 0; j < a->V; j++) {
            float zj = xi[j] / a->temperature - m;
            double ex = (double)expf(zj);
            s += ex;
            e += ex * zj;
        }
        int32_t t = a->targets[i];
        a->sums[3 * (size_t)i] = s;
        a->sums[3 * (size_t)i + 1] = e;
        a->sums[3 * (size_t)i + 2] = t >= 0 && t < a->V ? (double)(xi[t] / a->temperature - m)
                                                        : 0.0;
    }
    return 0;
}

int ch_vocab_logsoftmax_bwd(const void *args)
{
    const struct logsoftmax_args *a = args;
    if (a->dl16) {
        to_bf16_rows(a, ch_vocab_logsoftmax_bwd);
        return 0;
    }
    for (int i = 0; i < a->N; i++) {
        if (a->dlogprob[i] == 0.0f) continue;
        const float *xi = a->logits + (size_t)i * a->V;
        float *di = a->dlogits + (size_t)i * a->V;
        double c = (double)a->dlogprob[i] / a->temperature;
        for (int j = 0; j < a->V; j++)
            di[j] -= (float)(c * exp((double)(xi[j] / a->temperature - a->mx_in[i]) - a->lsum[i]));
        int32_t t = a->targets[i];
        if (t >= 0 && t < a->V) di[t] += (float)c;
    }
    return 0;
}

int ch_entropy_bwd(const void *args)
{
    const struct logsoftmax_args *a = args;
    entropy_backward(a->dlogits, a->H, a->ew, a->logits, a->N, a->V, a->temperature);
    return 0;
}

int ch_vocab_entropy_bwd(const void *args)
{
    const struct logsoftmax_args *a = args;
    vocab_entropy_backward(a->dlogits, a->ew, a->logits, a->mx_in, a->lsum, a->H_in, a->N, a->V,
                           a->temperature);
    return 0;
}

int ch_sample(const void *args)
{
    const struct sample_args *a = args;
    if (a->B <= 0) return 0;
    struct sampler_config sc = {a->temperature, a->top_p, a->top_k, a->seed};
    for (int r = 0; r < a->B; r++) {
        float lp = 0.0f;
        float *scratch = a->scratch + (size_t)r * CUDA_SAMPLE_SCRATCH * a->V;
        a->tok[r] = sampler_sample(&sc, a->logits + (size_t)r * a->V, a->V, a->traj[r],
                                   a->pos[r], &lp, scratch);
        if (a->logprob) a->logprob[r] = lp;
    }
    return 0;
}

/* The vocabulary-parallel steps: sampler_tp_*'s per row (the sums in one run over the
 * columns, where the CUDA kernels add chunk sums). */
int ch_vocab_greedy_stats(const void *args)
{
    const struct vocab_sample_args *a = args;
    for (int r = 0; r < a->B; r++) {
        double *o = a->out + (size_t)r * 3 * a->slots;
        memset(o, 0, 3 * (size_t)a->slots * sizeof *o);
        sampler_tp_greedy_stats(a->logits + (size_t)r * a->Vl, a->Vl, a->v0, o + 3 * a->slot);
    }
    return 0;
}

int ch_vocab_sample_max(const void *args)
{
    const struct vocab_sample_args *a = args;
    for (int r = 0; r < a->B; r++)
        a->out[r] = sampler_tp_local_max(a->logits + (size_t)r * a->Vl, a->Vl, a->temperature);
    return 0;
}

int ch_vocab_sample_sums(const void *args)
{
    const struct vocab_sample_args *a = args;
    for (int r = 0; r < a->B; r++) {
        double *o = a->out + (size_t)r * 2 * a->slots;
        memset(o, 0, 2 * (size_t)a->slots * sizeof *o);
        sampler_tp_sums(a->logits + (size_t)r * a->Vl, a->Vl, a->temperature, a->mx[r],
                        a->p + (size_t)r * a->Vl, o + 2 * a->slot);
    }
    return 0;
}

int ch_vocab_sample_pick(const void *args)
{
    const struct vocab_sample_args *a = args;
    for (int r = 0; r < a->B; r++) {
        const double *pl = a->plan + (size_t)r * 4;
        double *o = a->out + 2 * (size_t)r;
        o[0] = o[1] = 0;
        if (pl[0] == 0) continue;
        struct sampler_tp_draw d = {pl[1], pl[2], pl[3]};
        int t = sampler_tp_scan(a->p_in + (size_t)r * a->Vl, a->Vl, &d);
        o[0] = a->v0 + t;
        o[1] = (double)a->logits[(size_t)r * a->Vl + t] / a->temperature - a->mx[r] - log(pl[3]);
    }
    return 0;
}

int ch_vocab_sample_topk(const void *args)
{
    const struct vocab_sample_args *a = args;
    size_t w = (size_t)a->slots + 2 * (size_t)a->n;
    for (int r = 0; r < a->B; r++) {
        double *o = a->out + (size_t)r * w;
        memset(o, 0, w * sizeof *o);
        sampler_tp_top_k_entries(a->logits + (size_t)r * a->Vl, a->Vl, a->v0, a->temperature,
                                 a->mx[r], a->kr, a->off, a->slot, a->slots, o,
                                 a->p + (size_t)r * 2 * a->Vl);
    }
    return 0;
}

int ch_sum_squares(double *out, const float *x, int64_t n)
{
    if (ch_forbid_in_graph("sum_squares")) return -1;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    *out = s;
    return 0;
}

int ch_weights_hash(uint64_t *out, const float *x, int64_t n)
{
    if (ch_forbid_in_graph("weights_hash")) return -1;
    *out = weights_sum_hash(x, n > 0 ? (size_t)n : 0);
    return 0;
}

int ch_adamw_update(const void *args)
{
    const struct adamw_args *a = args;
    if (a->n <= 0) return 0;
    struct adamw_scalars s = {a->s.decay, a->s.step_size, a->s.bc2_sqrt, a->s.beta2, a->s.w1,
                              a->s.w2, a->s.eps};
    adamw_update_elems(a->params, a->m, a->v, a->grads, (size_t)a->n, &s, a->s.clip);
    if (a->w16) st_f32_to_bf16_n(a->params, a->w16, (size_t)a->n);
    return 0;
}
