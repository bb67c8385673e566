/*
 * CPU kernels of the transformer, forward and backward (contracts and shapes in
 * ops.h). GEMMs and the per-row attention products go to OpenBLAS; everything else
 * is plain loops. No threads of our own and no state: for a fixed OpenBLAS thread
 * count the results are bitwise reproducible.
 *
 * Limits: attention is O(nq * nk * H * D) scalar-BLAS work per sequence (no tiling
 * across query rows), which is fine for the context lengths of the CPU policy.
 */
#include "ops.h"

#include <cblas.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

/* ---------------------------------------------------------------- linear */

void linear_forward(float *y, const float *x, const float *w, const float *b, int N, int in,
                    int out)
{
    if (N <= 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, in, 1.0f, x, in, w, in, 0.0f,
                y, out);
    if (!b) return;
    for (int i = 0; i < N; i++) {
        float *yi = y + (size_t)i * out;
        for (int o = 0; o < out; o++) yi[o] += b[o];
    }
}

void linear_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                     const float *w, int N, int in, int out)
{
    if (N <= 0) return;
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, out, 1.0f, dy, out, w,
                    in, 1.0f, dx, in);
    if (dw)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, N, 1.0f, dy, out, x, in,
                    1.0f, dw, in);
    if (db)
        for (int i = 0; i < N; i++) {
            const float *dyi = dy + (size_t)i * out;
            for (int o = 0; o < out; o++) db[o] += dyi[o];
        }
}

/* ---------------------------------------------------------------- embedding */

void embed_forward(float *x, const float *embed, const int32_t *tokens, int N, int C)
{
    for (int i = 0; i < N; i++)
        memcpy(x + (size_t)i * C, embed + (size_t)tokens[i] * C, (size_t)C * sizeof(float));
}

void embed_backward(float *dembed, const float *dx, const int32_t *tokens, int N, int C)
{
    for (int i = 0; i < N; i++) {
        float *de = dembed + (size_t)tokens[i] * C;
        const float *dxi = dx + (size_t)i * C;
        for (int j = 0; j < C; j++) de[j] += dxi[j];
    }
}

/* ---------------------------------------------------------------- rmsnorm */

/* 1 / sqrt(mean(x^2) + eps) of one row (C). */
static float rms_rstd(const float *x, int C, float eps)
{
    double ss = 0;
    for (int j = 0; j < C; j++) ss += (double)x[j] * x[j];
    return (float)(1.0 / sqrt(ss / C + eps));
}

void rmsnorm_forward(float *y, const float *x, const float *w, int N, int C, float eps)
{
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * C;
        float *yi = y + (size_t)i * C;
        float r = rms_rstd(xi, C, eps);
        for (int j = 0; j < C; j++) yi[j] = (xi[j] * r) * w[j];
    }
}

void rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                      int N, int C, float eps)
{
    for (int i = 0; i < N; i++) {
        const float *xi = x + (size_t)i * C, *dyi = dy + (size_t)i * C;
        float r = rms_rstd(xi, C, eps);
        /* y = xhat * w, xhat = x r:  dx = r (g - xhat mean(g xhat)),  g = dy w */
        double dot = 0;
        for (int j = 0; j < C; j++) dot += (double)dyi[j] * w[j] * ((double)xi[j] * r);
        float m = (float)(dot / C);
        if (dx) {
            float *dxi = dx + (size_t)i * C;
            for (int j = 0; j < C; j++) dxi[j] += r * (dyi[j] * w[j] - xi[j] * r * m);
        }
        if (dw)
            for (int j = 0; j < C; j++) dw[j] += dyi[j] * (xi[j] * r);
    }
}

/* ---------------------------------------------------------------- rotary */

/* Rotates pairs (i, i + D/2) of every head of one row by +angle (sign 1) or -angle. */
static void rope_row(float *x, int pos, int n_heads, int D, float theta, float sign)
{
    int half = D / 2;
    for (int i = 0; i < half; i++) {
        /* as HF: inv_freq = 1 / theta^(2i/D) and pos * inv_freq in float32 */
        float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)D);
        float a = (float)pos * inv_freq;
        float c = (float)cos((double)a), s = sign * (float)sin((double)a);
        for (int h = 0; h < n_heads; h++) {
            float *xh = x + (size_t)h * D;
            float x1 = xh[i], x2 = xh[i + half];
            xh[i] = x1 * c - x2 * s;
            xh[i + half] = x2 * c + x1 * s;
        }
    }
}

void rope_forward(float *x, const int *pos, int N, int n_heads, int D, float theta)
{
    for (int r = 0; r < N; r++)
        rope_row(x + (size_t)r * n_heads * D, pos[r], n_heads, D, theta, 1.0f);
}

void rope_backward(float *dx, const int *pos, int N, int n_heads, int D, float theta)
{
    /* the rotation is orthogonal: its transpose is the rotation by -angle */
    for (int r = 0; r < N; r++)
        rope_row(dx + (size_t)r * n_heads * D, pos[r], n_heads, D, theta, -1.0f);
}

/* ---------------------------------------------------------------- attention */

/* Softmax of the scaled scores of query row qi (D) against key rows kr (n, stride
 * ld): e (n) = exp(s - max) (unnormalised); returns their sum. */
static double attn_scores(float *e, const float *qi, const float *kr, int n, int D, int ld,
                          float scale)
{
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, D, scale, kr, ld, qi, 1, 0.0f, e, 1);
    float mx = e[0];
    for (int j = 1; j < n; j++) mx = e[j] > mx ? e[j] : mx;
    double sum = 0;
    for (int j = 0; j < n; j++) {
        e[j] = expf(e[j] - mx);
        sum += e[j];
    }
    return sum;
}

void attn_forward(float *out, const float *q, const float *k, const float *v, const int *q_pos,
                  int nq, int nk, int H, int K, int D, float *scratch)
{
    int rep = H / K, HD = H * D, KD = K * D;
    float scale = 1.0f / sqrtf((float)D);
    (void)nk; /* q_pos[i] < nk is the caller's contract */
    for (int i = 0; i < nq; i++) {
        int n = q_pos[i] + 1;
        for (int h = 0; h < H; h++) {
            const float *qi = q + (size_t)i * HD + (size_t)h * D;
            const float *kr = k + (size_t)(h / rep) * D, *vr = v + (size_t)(h / rep) * D;
            double sum = attn_scores(scratch, qi, kr, n, D, KD, scale);
            cblas_sgemv(CblasRowMajor, CblasTrans, n, D, (float)(1.0 / sum), vr, KD, scratch, 1,
                        0.0f, out + (size_t)i * HD + (size_t)h * D, 1);
        }
    }
}

void attn_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                   const float *k, const float *v, const int *q_pos, int nq, int nk, int H,
                   int K, int D, float *scratch)
{
    int rep = H / K, HD = H * D, KD = K * D;
    float scale = 1.0f / sqrtf((float)D);
    float *p = scratch, *dp = scratch + nk;
    for (int i = 0; i < nq; i++) {
        int n = q_pos[i] + 1;
        for (int h = 0; h < H; h++) {
            size_t qo = (size_t)i * HD + (size_t)h * D, ko = (size_t)(h / rep) * D;
            const float *qi = q + qo, *doi = dout + qo;
            double sum = attn_scores(p, qi, k + ko, n, D, KD, scale);
            float inv = (float)(1.0 / sum);
            for (int j = 0; j < n; j++) p[j] *= inv;
            /* dp_j = dout . v_j;  ds_j = p_j (dp_j - sum_l p_l dp_l) */
            cblas_sgemv(CblasRowMajor, CblasNoTrans, n, D, 1.0f, v + ko, KD, doi, 1, 0.0f, dp,
                        1);
            double pdp = 0;
            for (int j = 0; j < n; j++) pdp += (double)p[j] * dp[j];
            for (int j = 0; j < n; j++) dp[j] = p[j] * (float)(dp[j] - pdp);
            if (dq)
                cblas_sgemv(CblasRowMajor, CblasTrans, n, D, scale, k + ko, KD, dp, 1, 1.0f,
                            dq + qo, 1);
            if (dk) cblas_sger(CblasRowMajor, n, D, scale, dp, 1, qi, 1, dk + ko, KD);
            if (dv) cblas_sger(CblasRowMajor, n, D, 1.0f, p, 1, doi, 1, dv + ko, KD);
        }
    }
}

/* ---------------------------------------------------------------- swiglu */

void swiglu_forward(float *y, const float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void swiglu_backward(float *dg, float *du, const float *dy, const float *g, const float *u,
                     int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float sig = 1.0f / (1.0f + expf(-g[i]));
        float silu = g[i] * sig;
        if (dg) dg[i] += dy[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
        if (du) du[i] += dy[i] * silu;
    }
}

/* ---------------------------------------------------------------- log-softmax */

/* Row statistics of z = logits / temperature: max and sum exp(z - max). */
static double lse_row(const float *x, int V, float temperature, float *mx_out)
{
    float mx = x[0] / temperature;
    for (int j = 1; j < V; j++) {
        float z = x[j] / temperature;
        mx = z > mx ? z : mx;
    }
    double sum = 0;
    for (int j = 0; j < V; j++) sum += expf(x[j] / temperature - mx);
    *mx_out = mx;
    return sum;
}

void logsoftmax_forward(float *logprob, float *entropy, const float *logits,
                        const int32_t *targets, int N, int V, float temperature)
{
    for (int i = 0; i < N; i++) {
        const float *xi = logits + (size_t)i * V;
        float mx;
        double sum = lse_row(xi, V, temperature, &mx), lsum = log(sum);
        if (logprob)
            logprob[i] = targets[i] < 0
                             ? 0.0f
                             : (float)((double)(xi[targets[i]] / temperature - mx) - lsum);
        if (entropy) {
            /* H = log(sum) - sum_j e_j (z_j - max) / sum */
            double ez = 0;
            for (int j = 0; j < V; j++) {
                float zj = xi[j] / temperature - mx;
                ez += (double)expf(zj) * zj;
            }
            entropy[i] = (float)(lsum - ez / sum);
        }
    }
}

void logsoftmax_backward(float *dlogits, const float *dlogprob, const float *logits,
                         const int32_t *targets, int N, int V, float temperature)
{
    for (int i = 0; i < N; i++) {
        if (targets[i] < 0 || dlogprob[i] == 0.0f) continue;
        const float *xi = logits + (size_t)i * V;
        float *di = dlogits + (size_t)i * V;
        float mx;
        double lsum = log(lse_row(xi, V, temperature, &mx));
        double c = (double)dlogprob[i] / temperature;
        /* p_j = exp(z_j - max - log(sum)) */
        for (int j = 0; j < V; j++)
            di[j] -= (float)(c * exp((double)(xi[j] / temperature - mx) - lsum));
        di[targets[i]] += (float)c;
    }
}
