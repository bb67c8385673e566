/*
 * CPU kernels of the transformer, forward and backward (contracts and shapes in
 * include/libra/cpu_ops.h). Matrix products go to OpenBLAS -- linear layers as one
 * sgemm (or one sgemv per row for a few rows), attention as two sgemm per tile of query
 * rows (two sgemv per head for a lone decode row) -- and everything else is plain loops.
 * No threads of our own and no state of our own; OpenBLAS's thread count is narrowed to
 * 1 around small sgemv calls (see "BLAS thread policy"). For a fixed OpenBLAS thread
 * count the results are bitwise reproducible.
 *
 * Limits: the elementwise loops (norms, rotary, softmax, SwiGLU) run on one core,
 * scalar at -O2, while the products use all cores; they are ~20-25% of a training
 * step on 2 cores. Attention computes whole tiles of 32 query rows against the keys
 * up to the tile's last row (~12% extra attention FLOPs at 256-token sequences, not
 * counted as useful by the benchmark).
 */
#include "libra/cpu_ops.h"

#include <cblas.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

/* ---------------------------------------------------------------- linear */

/* Up to this many rows, linear_forward multiplies row by row with sgemv. sgemm packs
 * (copies) the whole weight matrix on every call, which for a handful of rows costs
 * more than the product itself: decode at batch 1 ran 3-4x slower through sgemm
 * (OpenBLAS 0.3.21, Zen 3, small model). sgemv reads the weights once per row, in
 * place; past ~8 rows those repeated reads lose to sgemm's blocking. */
enum { LINEAR_GEMV_MAX_ROWS = 8 };

/* BLAS thread policy. OpenBLAS runs a product on all its threads (OPENBLAS_NUM_THREADS,
 * default one per core) unless it is small (0.3.21: sgemm below 65536 x 4
 * multiply-adds, sgemv below 9216). Measured on 2 Zen 3 cores, the sgemm cut-off is
 * right (2 threads win from ~0.5M multiply-adds up, attention tiles included), but a
 * 2-thread sgemv only wins from ~64k multiply-adds: below that the hand-off costs
 * more than it saves (tiny model decode: 1.4x faster on 1 thread). So sgemv products
 * below GEMV_1THREAD_MADDS run on 1 thread; everything else as OpenBLAS decides. The
 * choice depends only on the shape, so results stay bitwise reproducible for a fixed
 * OpenBLAS thread count (a different count may change the last bits). The setting is
 * process-wide: call the engine from one thread at a time. */
enum { GEMV_1THREAD_MADDS = 65536 };

/* Before sgemv calls of `madds` multiply-adds each: narrows OpenBLAS to 1 thread if
 * the policy says so and returns the count to restore, else 0 (gemv_threads_end). */
static int gemv_threads_begin(size_t madds)
{
    int all = openblas_get_num_threads();
    if (madds >= GEMV_1THREAD_MADDS || all <= 1) return 0;
    openblas_set_num_threads(1);
    return all;
}

static void gemv_threads_end(int restore)
{
    if (restore) openblas_set_num_threads(restore);
}

/* y (N, out) = x (N, in) w^T, w (out, in): one sgemv per row. */
static void gemv_rows(float *y, const float *w, const float *x, int N, int in, int out)
{
    int restore = gemv_threads_begin((size_t)out * in);
    for (int i = 0; i < N; i++)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, w, in, x + (size_t)i * in, 1,
                    0.0f, y + (size_t)i * out, 1);
    gemv_threads_end(restore);
}

void linear_forward(float *y, const float *x, const float *w, const float *b, int N, int in,
                    int out)
{
    if (N <= 0) return;
    if (N <= LINEAR_GEMV_MAX_ROWS)
        gemv_rows(y, w, x, N, in, out);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, in, 1.0f, x, in, w, in,
                    0.0f, y, out);
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

/* sum_j a[j] b[j] c[j] (c NULL: 1) of one row (C) in double, four partial sums so
 * the additions do not wait on each other (a row's result depends only on the row). */
static double dot3(const float *a, const float *b, const float *c, int C)
{
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int j = 0;
    if (c)
        for (; j + 4 <= C; j += 4) {
            s0 += (double)a[j] * b[j] * c[j];
            s1 += (double)a[j + 1] * b[j + 1] * c[j + 1];
            s2 += (double)a[j + 2] * b[j + 2] * c[j + 2];
            s3 += (double)a[j + 3] * b[j + 3] * c[j + 3];
        }
    else
        for (; j + 4 <= C; j += 4) {
            s0 += (double)a[j] * b[j];
            s1 += (double)a[j + 1] * b[j + 1];
            s2 += (double)a[j + 2] * b[j + 2];
            s3 += (double)a[j + 3] * b[j + 3];
        }
    for (; j < C; j++) s0 += (double)a[j] * b[j] * (c ? c[j] : 1.0f);
    return (s0 + s1) + (s2 + s3);
}

/* 1 / sqrt(mean(x^2) + eps) of one row (C). */
static float rms_rstd(const float *x, int C, float eps)
{
    return (float)(1.0 / sqrt(dot3(x, x, NULL, C) / C + eps));
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
        float m = (float)(dot3(dyi, w, xi, C) * r / C);
        if (dx) {
            float *dxi = dx + (size_t)i * C;
            for (int j = 0; j < C; j++) dxi[j] += r * (dyi[j] * w[j] - xi[j] * r * m);
        }
        if (dw)
            for (int j = 0; j < C; j++) dw[j] += dyi[j] * (xi[j] * r);
    }
}

/* ---------------------------------------------------------------- rotary */

/* Rotates pairs (i, i + D/2) of every head of one row by +angle (sign 1) or -angle;
 * cs (D) is the row's table entry (cos | sin). */
static void rope_row(float *x, const float *cs, int n_heads, int D, float sign)
{
    int half = D / 2;
    for (int h = 0; h < n_heads; h++) {
        float *xh = x + (size_t)h * D;
        for (int i = 0; i < half; i++) {
            float c = cs[i], s = sign * cs[half + i];
            float x1 = xh[i], x2 = xh[i + half];
            xh[i] = x1 * c - x2 * s;
            xh[i + half] = x2 * c + x1 * s;
        }
    }
}

void rope_forward(float *x, const int *pos, int N, int n_heads, int D, const float *rope)
{
    for (int r = 0; r < N; r++)
        rope_row(x + (size_t)r * n_heads * D, rope + (size_t)pos[r] * D, n_heads, D, 1.0f);
}

void rope_backward(float *dx, const int *pos, int N, int n_heads, int D, const float *rope)
{
    /* the rotation is orthogonal: its transpose is the rotation by -angle */
    for (int r = 0; r < N; r++)
        rope_row(dx + (size_t)r * n_heads * D, rope + (size_t)pos[r] * D, n_heads, D, -1.0f);
}

/* ---------------------------------------------------------------- attention */

/* Attention works on tiles: up to ATTN_TILE query rows of one sequence and the rep =
 * H / K query heads that share kv head g, gathered into an (M = rows * rep, D)
 * matrix, so the scores of a tile are ONE sgemm against the tile's keys and its
 * output one more -- instead of a gemv per row and head, whose call overhead made
 * attention the slowest part of training. Tile rows only pay for keys up to the
 * tile's last position; the causal mask inside that range is applied to the
 * probabilities (exact zeros). A call with a single query row (a decode step) is the
 * exception: there the gemv per head is cheaper (attn_row).
 *
 * Rounding: a row's result depends only on its own inputs, except that OpenBLAS may
 * compute an element with a different micro-kernel (main or edge) depending on where
 * the row sits in the tile, and a single row goes through sgemv; either can change
 * the last bit (~1e-7 relative). So decode's rows agree with the training path's to
 * rounding, not bit for bit; any given call is bitwise reproducible. attn_backward
 * always recomputes the probabilities with the tile path. */
enum { ATTN_TILE = 32 };

/* Rows of the largest tile of a call over nq query rows: its M. */
static size_t tile_rows_max(int nq, int rep)
{
    return (size_t)(nq < ATTN_TILE ? nq : ATTN_TILE) * (size_t)rep;
}

size_t attn_scratch_floats(int nq, int nk, int H, int K, int D)
{
    size_t M = tile_rows_max(nq, H / K);
    return 3 * M * (size_t)D + 2 * M * (size_t)nk;
}

/* Copies the rep heads of kv group g of rows [0, n) of x (n, H*D) into xg (n*rep, D),
 * row (i, r) at i*rep + r: one contiguous run of rep*D floats per row. */
static void gather_group(float *xg, const float *x, int n, int HD, int g, int rep, int D)
{
    size_t run = (size_t)rep * D;
    for (int i = 0; i < n; i++)
        memcpy(xg + (size_t)i * run, x + (size_t)i * HD + (size_t)g * run, run * sizeof(float));
}

/* The inverse of gather_group; adds into x when add, else overwrites. */
static void scatter_group(float *x, const float *xg, int n, int HD, int g, int rep, int D,
                          int add)
{
    size_t run = (size_t)rep * D;
    for (int i = 0; i < n; i++) {
        float *xi = x + (size_t)i * HD + (size_t)g * run;
        const float *gi = xg + (size_t)i * run;
        if (add)
            for (size_t j = 0; j < run; j++) xi[j] += gi[j];
        else
            memcpy(xi, gi, run * sizeof(float));
    }
}

/* s (n): the scores of one query row, of which the first len are visible (causal
 * mask); overwritten with their softmax and zeros after len. Float exp, double sum. */
static void softmax_row(float *s, int len, int n)
{
    float mx = s[0];
    for (int j = 1; j < len; j++) mx = s[j] > mx ? s[j] : mx;
    double sum = 0;
    for (int j = 0; j < len; j++) {
        s[j] = expf(s[j] - mx);
        sum += s[j];
    }
    float inv = (float)(1.0 / sum);
    for (int j = 0; j < len; j++) s[j] *= inv;
    for (int j = len; j < n; j++) s[j] = 0.0f;
}

/* Probabilities of a tile: p (M, nkt) = softmax over keys 0..q_pos[i] of the scores
 * scale * qg kg^T, exact zeros for the masked keys. qg (M, D) rows (i, r) at i*rep+r;
 * k rows at stride KD (the group's slice). Softmax in float, sum in double. */
static void attn_probs(float *p, const float *qg, const float *k, const int *q_pos, int n,
                       int rep, int nkt, int D, int KD, float scale)
{
    int M = n * rep;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, nkt, D, scale, qg, D, k, KD, 0.0f, p,
                nkt);
    for (int m = 0; m < M; m++) softmax_row(p + (size_t)m * nkt, q_pos[m / rep] + 1, nkt);
}

/* og (M, D) = p (M, nkt) v (nkt, stride KD). */
static void attn_pv(float *og, const float *p, const float *v, int M, int nkt, int D, int KD)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, D, nkt, 1.0f, p, nkt, v, KD, 0.0f,
                og, D);
}

/* Keys a tile of rows reads: 0..max(q_pos of the tile). */
static int tile_keys(const int *q_pos, int n)
{
    int mx = 0;
    for (int i = 0; i < n; i++) mx = q_pos[i] > mx ? q_pos[i] : mx;
    return mx + 1;
}

/* One query row (a decode step's): per head, scores and output by sgemv. For a single
 * row, sgemm's packing of the keys costs more than the product: decode at batch 64
 * spent ~1.5x as long in attention through the tile path. p (n) scratch. */
static void attn_row(float *out, const float *q, const float *k, const float *v, int pos,
                     int H, int K, int D, float *p)
{
    int rep = H / K, KD = K * D, n = pos + 1;
    float scale = 1.0f / sqrtf((float)D);
    int restore = gemv_threads_begin((size_t)n * D);
    for (int h = 0; h < H; h++) {
        const float *kh = k + (size_t)(h / rep) * D, *vh = v + (size_t)(h / rep) * D;
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n, D, scale, kh, KD, q + (size_t)h * D, 1,
                    0.0f, p, 1);
        softmax_row(p, n, n);
        cblas_sgemv(CblasRowMajor, CblasTrans, n, D, 1.0f, vh, KD, p, 1, 0.0f,
                    out + (size_t)h * D, 1);
    }
    gemv_threads_end(restore);
}

void attn_forward(float *out, const float *q, const float *k, const float *v, const int *q_pos,
                  int nq, int nk, int H, int K, int D, float *scratch)
{
    int rep = H / K, HD = H * D, KD = K * D;
    float scale = 1.0f / sqrtf((float)D);
    size_t MD = tile_rows_max(nq, rep) * D;
    float *qg = scratch, *og = qg + MD, *p = og + MD; /* (M, D), (M, D), (M, nk) */
    (void)nk; /* q_pos[i] < nk is the caller's contract */
    if (nq == 1) {
        attn_row(out, q, k, v, q_pos[0], H, K, D, p);
        return;
    }
    for (int i0 = 0; i0 < nq; i0 += ATTN_TILE) {
        int n = nq - i0 < ATTN_TILE ? nq - i0 : ATTN_TILE, nkt = tile_keys(q_pos + i0, n);
        const float *qt = q + (size_t)i0 * HD;
        for (int g = 0; g < K; g++) {
            gather_group(qg, qt, n, HD, g, rep, D);
            attn_probs(p, qg, k + (size_t)g * D, q_pos + i0, n, rep, nkt, D, KD, scale);
            attn_pv(og, p, v + (size_t)g * D, n * rep, nkt, D, KD);
            scatter_group(out + (size_t)i0 * HD, og, n, HD, g, rep, D, 0);
        }
    }
}

void attn_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                   const float *k, const float *v, const int *q_pos, int nq, int nk, int H,
                   int K, int D, float *scratch)
{
    int rep = H / K, HD = H * D, KD = K * D;
    float scale = 1.0f / sqrtf((float)D);
    size_t MD = tile_rows_max(nq, rep) * D, MK = tile_rows_max(nq, rep) * nk;
    /* (M, D) x 3, (M, nk) x 2 */
    float *qg = scratch, *dog = qg + MD, *dqg = dog + MD, *p = dqg + MD, *dp = p + MK;
    for (int i0 = 0; i0 < nq; i0 += ATTN_TILE) {
        int n = nq - i0 < ATTN_TILE ? nq - i0 : ATTN_TILE, nkt = tile_keys(q_pos + i0, n);
        int M = n * rep;
        for (int g = 0; g < K; g++) {
            const float *kg = k + (size_t)g * D, *vg = v + (size_t)g * D;
            gather_group(qg, q + (size_t)i0 * HD, n, HD, g, rep, D);
            gather_group(dog, dout + (size_t)i0 * HD, n, HD, g, rep, D);
            attn_probs(p, qg, kg, q_pos + i0, n, rep, nkt, D, KD, scale);
            /* dp = dout v^T;  ds_j = p_j (dp_j - sum_l p_l dp_l)  (masked: p = 0) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, nkt, D, 1.0f, dog, D, vg,
                        KD, 0.0f, dp, nkt);
            for (int m = 0; m < M; m++) {
                const float *pm = p + (size_t)m * nkt;
                float *dpm = dp + (size_t)m * nkt;
                double pdp = 0;
                for (int j = 0; j < nkt; j++) pdp += (double)pm[j] * dpm[j];
                for (int j = 0; j < nkt; j++) dpm[j] = pm[j] * (float)(dpm[j] - pdp);
            }
            if (dq) {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, D, nkt, scale, dp, nkt,
                            kg, KD, 0.0f, dqg, D);
                scatter_group(dq + (size_t)i0 * HD, dqg, n, HD, g, rep, D, 1);
            }
            if (dk)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nkt, D, M, scale, dp, nkt,
                            qg, D, 1.0f, dk + (size_t)g * D, KD);
            if (dv)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nkt, D, M, 1.0f, p, nkt, dog,
                            D, 1.0f, dv + (size_t)g * D, KD);
        }
    }
}

/* ---------------------------------------------------------------- swiglu */

void swiglu_forward(float *y, float *sig, const float *g, const float *u, int64_t n)
{
    if (sig)
        for (int64_t i = 0; i < n; i++) {
            sig[i] = 1.0f / (1.0f + expf(-g[i]));
            y[i] = g[i] * sig[i] * u[i];
        }
    else
        for (int64_t i = 0; i < n; i++) y[i] = g[i] * (1.0f / (1.0f + expf(-g[i]))) * u[i];
}

void swiglu_apply(float *y, const float *g, const float *u, const float *sig, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = g[i] * sig[i] * u[i];
}

void swiglu_backward(float *dg, float *du, const float *dy, const float *g, const float *u,
                     const float *sig, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (dg) dg[i] += dy[i] * u[i] * sig[i] * (1.0f + g[i] * (1.0f - sig[i]));
        if (du) du[i] += dy[i] * (g[i] * sig[i]);
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

void logsoftmax_row_stats(const float *x, int V, float temperature, float *mx, double *lsum)
{
    *lsum = log(lse_row(x, V, temperature, mx));
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

void vocab_entropy_backward(float *dlogits, const float *ew, const float *logits,
                            const float *mx, const double *lsum, const double *H, int N, int V,
                            float temperature)
{
    for (int i = 0; i < N; i++) {
        if (ew[i] == 0.0f) continue;
        const float *xi = logits + (size_t)i * V;
        float *di = dlogits + (size_t)i * V;
        /* dH/dx_j = -(1/temp) p_j (lp_j + H); J carries -ew H */
        double c = (double)ew[i] / temperature;
        for (int j = 0; j < V; j++) {
            double lp = (double)(xi[j] / temperature - mx[i]) - lsum[i];
            di[j] += (float)(c * exp(lp) * (lp + H[i]));
        }
    }
}

void entropy_backward(float *dlogits, double *H, const float *ew, const float *logits, int N,
                      int V, float temperature)
{
    for (int i = 0; i < N; i++) {
        H[i] = 0;
        if (ew[i] == 0.0f) continue;
        const float *xi = logits + (size_t)i * V;
        float mx = -INFINITY;
        for (int j = 0; j < V; j++) mx = fmaxf(mx, xi[j] / temperature);
        double sum = 0;
        for (int j = 0; j < V; j++) sum += exp((double)(xi[j] / temperature - mx));
        double lsum = log(sum), h = 0;
        for (int j = 0; j < V; j++) {
            double lp = (double)(xi[j] / temperature - mx) - lsum;
            h -= exp(lp) * lp;
        }
        H[i] = h;
        vocab_entropy_backward(dlogits + (size_t)i * V, ew + i, xi, &mx, &lsum, &h, 1, V,
                               temperature);
    }
}
