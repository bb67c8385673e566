/*
 * Tensor-parallel kernels (contracts in tp_ops.h): activation all-reduce, the
 * vocabulary-parallel embedding and the vocabulary-parallel log-softmax with its
 * backward. The log-softmax mirrors cpu/ops.c's (float z and exp, double sums, the
 * same expressions) so that a TP run differs from the single-rank one only by the
 * order in which the partial sums of the ranks are added.
 *
 * Limits: plain loops on one core; the all-reduces are the caller's (tfm_comm).
 */
#include "tp_ops.h"

#include <math.h>
#include <string.h>

#include "libra/cpu_ops.h"

void tp_allreduce_sum(const struct tfm_tp *tp, float *x, size_t n)
{
    if (!tp_parallel(tp) || n == 0) return;
    tp->comm->allreduce_f32(tp->comm->ctx, x, n, TFM_RED_SUM);
}

void tp_embed_forward(const struct tfm_tp *tp, float *x, const float *embed,
                      const int32_t *tokens, int N, int C)
{
    if (!tp_parallel(tp)) {
        embed_forward(x, embed, tokens, N, C);
        return;
    }
    for (int i = 0; i < N; i++) {
        float *xi = x + (size_t)i * C;
        if (tokens[i] >= tp->v0 && tokens[i] < tp->v1)
            memcpy(xi, embed + (size_t)(tokens[i] - tp->v0) * C, (size_t)C * sizeof(float));
        else
            memset(xi, 0, (size_t)C * sizeof(float));
    }
    tp_allreduce_sum(tp, x, (size_t)N * C);
}

void tp_embed_backward(const struct tfm_tp *tp, float *dembed, const float *dx,
                       const int32_t *tokens, int N, int C)
{
    if (!tp_parallel(tp)) {
        embed_backward(dembed, dx, tokens, N, C);
        return;
    }
    for (int i = 0; i < N; i++) {
        if (tokens[i] < tp->v0 || tokens[i] >= tp->v1) continue;
        float *de = dembed + (size_t)(tokens[i] - tp->v0) * C;
        const float *dxi = dx + (size_t)i * C;
        for (int j = 0; j < C; j++) de[j] += dxi[j];
    }
}

void tp_logsoftmax_forward(const struct tfm_tp *tp, float *logprob, float *mx, double *lsum,
                           double *entropy, double *red, const float *x,
                           const int32_t *targets, int N, float temperature)
{
    const struct tfm_comm *cm = tp->comm;
    int Vl = tp->v1 - tp->v0, v0 = tp->v0, w = entropy ? 3 : 2;
    if (N <= 0) return;
    /* 1. the row max of z over the whole vocabulary */
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * Vl;
        float m = xi[0] / temperature;
        for (int j = 1; j < Vl; j++) {
            float z = xi[j] / temperature;
            m = z > m ? z : m;
        }
        mx[i] = m;
    }
    cm->allreduce_f32(cm->ctx, mx, (size_t)N, TFM_RED_MAX);
    /* 2. per row (w doubles): sum exp(z - mx), the target's z - mx (from the rank that
     * holds the target, 0 elsewhere: the sum is exact), and for the entropy
     * sum exp(z - mx) (z - mx) */
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * Vl;
        double sum = 0, ez = 0;
        for (int j = 0; j < Vl; j++) sum += expf(xi[j] / temperature - mx[i]);
        if (entropy)
            for (int j = 0; j < Vl; j++) {
                float zj = xi[j] / temperature - mx[i];
                ez += (double)expf(zj) * zj;
            }
        int tg = targets[i];
        double *ri = red + (size_t)w * i;
        ri[0] = sum;
        ri[1] = tg >= v0 && tg < v0 + Vl ? (double)(xi[tg - v0] / temperature - mx[i]) : 0.0;
        if (entropy) ri[2] = ez;
    }
    cm->allreduce_f64(cm->ctx, red, (size_t)w * N, TFM_RED_SUM);
    for (int i = 0; i < N; i++) {
        const double *ri = red + (size_t)w * i;
        lsum[i] = log(ri[0]);
        logprob[i] = targets[i] < 0 ? 0.0f : (float)(ri[1] - lsum[i]);
        if (entropy) entropy[i] = lsum[i] - ri[2] / ri[0];
    }
}

void tp_logsoftmax_backward(const struct tfm_tp *tp, float *dx, const float *dlogprob,
                            const float *x, const int32_t *targets, const float *mx,
                            const double *lsum, int N, float temperature)
{
    int Vl = tp->v1 - tp->v0, v0 = tp->v0;
    for (int i = 0; i < N; i++) {
        if (targets[i] < 0 || dlogprob[i] == 0.0f) continue;
        const float *xi = x + (size_t)i * Vl;
        float *di = dx + (size_t)i * Vl;
        double c = (double)dlogprob[i] / temperature;
        /* p_j = exp(z_j - max - log(sum)) */
        for (int j = 0; j < Vl; j++)
            di[j] -= (float)(c * exp((double)(xi[j] / temperature - mx[i]) - lsum[i]));
        if (targets[i] >= v0 && targets[i] < v0 + Vl) di[targets[i] - v0] += (float)c;
    }
}
