/*
 * CPU transformer kernels (src/model/cpu/ops.c) in isolation: every backward against
 * central finite differences of its forward, and the forwards against plain double
 * references (rotary convention, causal GQA attention, log-softmax, entropy).
 *
 * Finite differences: the objective is L = sum_i r_i y_i (r fixed random), summed in
 * double over float outputs; inputs are O(1) floats and the step is h = 1e-2 (the
 * difference is divided by the actual float perturbation). Float rounding of the <= 80
 * outputs (~1e-7 relative each) puts ~1e-6 of noise on L, i.e. ~5e-5 on a difference
 * quotient; truncation adds h^2/6 |f'''| ~ 2e-5 for these smooth ops. The tolerance
 * |fd - analytic| <= 2e-4 + 2e-3 |analytic| keeps a margin of 4x over that (the run
 * prints the worst error / tolerance), while a wrong term (a missing factor, a sign,
 * a transposed index) is off by O(|analytic|).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/model/rope.h"
#include "libra/cpu_ops.h"
#include "libra/rng.h"
#include "testutil.h"

#define FD_H 1e-2
#define FD_ATOL 2e-4
#define FD_RTOL 2e-3

static void fill(float *x, size_t n, uint64_t seed, double scale)
{
    struct rng r;
    rng_init(&r, seed, 1, 2, 3);
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * rng_normal(&r));
}

static double dotr(const float *y, const float *r, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)y[i] * r[i];
    return s;
}

/* Checks grad (n) against central differences of loss() over every element of x. */
static void fd_check(const char *what, float *x, const float *grad, size_t n,
                     double (*loss)(void *), void *ctx)
{
    double worst = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        float v = x[i], xp = (float)(v + FD_H), xm = (float)(v - FD_H);
        x[i] = xp;
        double lp = loss(ctx);
        x[i] = xm;
        double lm = loss(ctx);
        x[i] = v;
        double fd = (lp - lm) / ((double)xp - (double)xm), err = fabs(fd - grad[i]);
        double tol = FD_ATOL + FD_RTOL * fabs(grad[i]);
        if (err / tol > worst) worst = err / tol;
        if (err > tol) {
            if (bad++ < 5)
                printf("\n  %s[%zu]: analytic %.6g, finite difference %.6g", what, i,
                       (double)grad[i], fd);
        }
    }
    printf("\n  %-28s %4zu elements, worst error / tolerance %.3f", what, n, worst);
    CU_ASSERT_EQUAL(bad, 0);
}

/* ---------------------------------------------------------------- linear */

enum { LN = 3, LIN = 5, LOUT = 4 };
struct lin_ctx {
    float x[LN * LIN], w[LOUT * LIN], b[LOUT], r[LN * LOUT], y[LN * LOUT];
};

static double lin_loss(void *p)
{
    struct lin_ctx *c = p;
    linear_forward(c->y, c->x, c->w, c->b, LN, LIN, LOUT);
    return dotr(c->y, c->r, LN * LOUT);
}

static void test_linear(void)
{
    struct lin_ctx c;
    fill(c.x, LN * LIN, 1, 1);
    fill(c.w, LOUT * LIN, 2, 1);
    fill(c.b, LOUT, 3, 1);
    fill(c.r, LN * LOUT, 4, 1);
    float dx[LN * LIN] = {0}, dw[LOUT * LIN] = {0}, db[LOUT] = {0};
    lin_loss(&c);
    /* forward against the definition */
    for (int i = 0; i < LN; i++)
        for (int o = 0; o < LOUT; o++) {
            double s = c.b[o];
            for (int j = 0; j < LIN; j++) s += (double)c.x[i * LIN + j] * c.w[o * LIN + j];
            CU_ASSERT_DOUBLE_EQUAL(c.y[i * LOUT + o], s, 1e-5);
        }
    linear_backward(dx, dw, db, c.r, c.x, c.w, LN, LIN, LOUT);
    fd_check("linear dx", c.x, dx, LN * LIN, lin_loss, &c);
    fd_check("linear dW", c.w, dw, LOUT * LIN, lin_loss, &c);
    fd_check("linear db", c.b, db, LOUT, lin_loss, &c);
    /* backward adds */
    float dx2[LN * LIN];
    memcpy(dx2, dx, sizeof dx);
    linear_backward(dx2, NULL, NULL, c.r, c.x, c.w, LN, LIN, LOUT);
    CU_ASSERT_DOUBLE_EQUAL(dx2[3], 2 * dx[3], 1e-6);
}

/* ---------------------------------------------------------------- rmsnorm */

enum { RN = 4, RC = 6 };
struct rms_ctx {
    float x[RN * RC], w[RC], r[RN * RC], y[RN * RC];
};

static double rms_loss(void *p)
{
    struct rms_ctx *c = p;
    rmsnorm_forward(c->y, c->x, c->w, RN, RC, 1e-5f);
    return dotr(c->y, c->r, RN * RC);
}

static void test_rmsnorm(void)
{
    struct rms_ctx c;
    fill(c.x, RN * RC, 5, 1);
    fill(c.w, RC, 6, 0.3);
    for (int j = 0; j < RC; j++) c.w[j] += 1;
    fill(c.r, RN * RC, 7, 1);
    rms_loss(&c);
    for (int i = 0; i < RN; i++) {
        double ss = 0;
        for (int j = 0; j < RC; j++) ss += (double)c.x[i * RC + j] * c.x[i * RC + j];
        double rs = 1 / sqrt(ss / RC + 1e-5);
        for (int j = 0; j < RC; j++)
            CU_ASSERT_DOUBLE_EQUAL(c.y[i * RC + j], c.x[i * RC + j] * rs * c.w[j], 1e-5);
    }
    float dx[RN * RC] = {0}, dw[RC] = {0};
    rmsnorm_backward(dx, dw, c.r, c.x, c.w, RN, RC, 1e-5f);
    fd_check("rmsnorm dx", c.x, dx, RN * RC, rms_loss, &c);
    fd_check("rmsnorm dw", c.w, dw, RC, rms_loss, &c);
}

/* qwen3's per-head norm is the same kernel over (tokens * heads) rows of width D. */
static void test_rmsnorm_per_head(void)
{
    enum { T = 2, NH = 3, D = 4 };
    float x[T * NH * D], w[D], y[T * NH * D], y1[D];
    fill(x, T * NH * D, 8, 1);
    fill(w, D, 9, 1);
    rmsnorm_forward(y, x, w, T * NH, D, 1e-6f);
    for (int r = 0; r < T * NH; r++) {
        rmsnorm_forward(y1, x + r * D, w, 1, D, 1e-6f);
        CU_ASSERT_EQUAL(memcmp(y1, y + r * D, sizeof y1), 0);
    }
}

/* ---------------------------------------------------------------- rotary */

enum { QN = 4, QH = 2, QD = 8, QPOS = 1001 };
struct rope_ctx {
    float x[QN * QH * QD], y[QN * QH * QD], r[QN * QH * QD];
    float table[QPOS * QD]; /* rope_table of positions 0..QPOS-1 */
    int pos[QN];
};

static double rope_loss(void *p)
{
    struct rope_ctx *c = p;
    memcpy(c->y, c->x, sizeof c->x);
    rope_forward(c->y, c->pos, QN, QH, QD, c->table);
    return dotr(c->y, c->r, QN * QH * QD);
}

static void test_rope(void)
{
    static struct rope_ctx c = {.pos = {0, 3, 17, 1000}};
    struct tfm_config cf = {.head_dim = QD, .rope_theta = 10000.0f};
    rope_table(c.table, QPOS, &cf);
    fill(c.x, QN * QH * QD, 10, 1);
    fill(c.r, QN * QH * QD, 11, 1);
    rope_loss(&c);
    /* position 0 is the identity; elsewhere HF's rotate_half formula */
    CU_ASSERT_EQUAL(memcmp(c.y, c.x, QH * QD * sizeof(float)), 0);
    for (int n = 1; n < QN; n++)
        for (int h = 0; h < QH; h++)
            for (int i = 0; i < QD; i++) {
                int j = i % (QD / 2);
                double a = c.pos[n] * pow(10000.0, -2.0 * j / QD);
                const float *xh = c.x + (n * QH + h) * QD;
                double want = i < QD / 2 ? xh[i] * cos(a) - xh[i + QD / 2] * sin(a)
                                         : xh[i] * cos(a) + xh[i - QD / 2] * sin(a);
                /* float angles at position 1000: ~1e-4 absolute */
                CU_ASSERT_DOUBLE_EQUAL(c.y[(n * QH + h) * QD + i], want, 5e-4);
            }
    float dx[QN * QH * QD];
    memcpy(dx, c.r, sizeof dx);
    rope_backward(dx, c.pos, QN, QH, QD, c.table);
    fd_check("rope dx", c.x, dx, QN * QH * QD, rope_loss, &c);
}

/* ---------------------------------------------------------------- attention */

enum { AT = 5, AH = 4, AK = 2, AD = 4, ASCRATCH = 1024 /* >= attn_scratch_floats */ };
struct attn_ctx {
    float q[AT * AH * AD], k[AT * AK * AD], v[AT * AK * AD], r[AT * AH * AD], y[AT * AH * AD];
    float scratch[ASCRATCH];
    int pos[AT];
};

static double attn_loss(void *p)
{
    struct attn_ctx *c = p;
    attn_forward(c->y, c->q, c->k, c->v, c->pos, AT, AT, AH, AK, AD, c->scratch);
    return dotr(c->y, c->r, AT * AH * AD);
}

/* Plain double causal GQA attention of one row and head. */
static void attn_ref(double *out, const struct attn_ctx *c, int i, int h)
{
    double s[AT], mx = -1e300, sum = 0;
    int kh = h / (AH / AK);
    for (int j = 0; j <= i; j++) {
        s[j] = 0;
        for (int d = 0; d < AD; d++)
            s[j] += (double)c->q[(i * AH + h) * AD + d] * c->k[(j * AK + kh) * AD + d];
        s[j] /= sqrt((double)AD);
        mx = s[j] > mx ? s[j] : mx;
    }
    for (int j = 0; j <= i; j++) sum += (s[j] = exp(s[j] - mx));
    for (int d = 0; d < AD; d++) {
        out[d] = 0;
        for (int j = 0; j <= i; j++) out[d] += s[j] / sum * c->v[(j * AK + kh) * AD + d];
    }
}

static void test_attention(void)
{
    struct attn_ctx c;
    CU_ASSERT_FATAL(attn_scratch_floats(AT + 2, AT + 2, AH, AK, AD) <= ASCRATCH);
    for (int i = 0; i < AT; i++) c.pos[i] = i;
    fill(c.q, sizeof c.q / 4, 12, 1);
    fill(c.k, sizeof c.k / 4, 13, 1);
    fill(c.v, sizeof c.v / 4, 14, 1);
    fill(c.r, sizeof c.r / 4, 15, 1);
    attn_loss(&c);
    for (int i = 0; i < AT; i++)
        for (int h = 0; h < AH; h++) {
            double want[AD];
            attn_ref(want, &c, i, h);
            for (int d = 0; d < AD; d++)
                CU_ASSERT_DOUBLE_EQUAL(c.y[(i * AH + h) * AD + d], want[d], 1e-5);
        }
    float dq[AT * AH * AD] = {0}, dk[AT * AK * AD] = {0}, dv[AT * AK * AD] = {0};
    attn_backward(dq, dk, dv, c.r, c.q, c.k, c.v, c.pos, AT, AT, AH, AK, AD, c.scratch);
    fd_check("attention dq", c.q, dq, AT * AH * AD, attn_loss, &c);
    fd_check("attention dk", c.k, dk, AT * AK * AD, attn_loss, &c);
    fd_check("attention dv", c.v, dv, AT * AK * AD, attn_loss, &c);
}

/* Causality, and decode's use: new rows against a cache give the same rows as the
 * whole-sequence call -- to rounding: attention runs in sgemm tiles of query rows,
 * and where a row sits in a tile may change its last bit (~1e-7), so the check
 * allows 1e-6. The future-leak check stays exact (rows < 4 do not read key 4). */
static void test_attention_cache(void)
{
    struct attn_ctx c;
    for (int i = 0; i < AT; i++) c.pos[i] = i;
    fill(c.q, sizeof c.q / 4, 16, 1);
    fill(c.k, sizeof c.k / 4, 17, 1);
    fill(c.v, sizeof c.v / 4, 18, 1);
    attn_forward(c.y, c.q, c.k, c.v, c.pos, AT, AT, AH, AK, AD, c.scratch);
    float y2[2 * AH * AD];
    attn_forward(y2, c.q + 3 * AH * AD, c.k, c.v, c.pos + 3, 2, AT, AH, AK, AD, c.scratch);
    for (int i = 0; i < 2 * AH * AD; i++) CU_ASSERT_DOUBLE_EQUAL(y2[i], c.y[3 * AH * AD + i], 1e-6);
    /* the future does not leak: changing the last key / value leaves rows < 4 alone */
    float y3[AT * AH * AD];
    c.k[4 * AK * AD] += 3;
    c.v[4 * AK * AD + 1] -= 2;
    attn_forward(y3, c.q, c.k, c.v, c.pos, AT, AT, AH, AK, AD, c.scratch);
    CU_ASSERT_EQUAL(memcmp(y3, c.y, 4 * AH * AD * sizeof(float)), 0);
    CU_ASSERT(memcmp(y3 + 4 * AH * AD, c.y + 4 * AH * AD, AH * AD * sizeof(float)) != 0);
}

/* A packed pair of sequences: slices called separately, as the training path does. */
static void test_attention_packed(void)
{
    enum { N1 = 3, N2 = 4, N = N1 + N2 };
    float q[N * AH * AD], k[N * AK * AD], v[N * AK * AD], y[N * AH * AD], r[N * AH * AD];
    float dq[N * AH * AD] = {0}, dk[N * AK * AD] = {0}, dv[N * AK * AD] = {0}, scratch[ASCRATCH];
    int pos[N] = {0, 1, 2, 0, 1, 2, 3};
    fill(q, N * AH * AD, 19, 1);
    fill(k, N * AK * AD, 20, 1);
    fill(v, N * AK * AD, 21, 1);
    fill(r, N * AH * AD, 22, 1);
    attn_forward(y, q, k, v, pos, N1, N1, AH, AK, AD, scratch);
    attn_forward(y + N1 * AH * AD, q + N1 * AH * AD, k + N1 * AK * AD, v + N1 * AK * AD,
                 pos + N1, N2, N2, AH, AK, AD, scratch);
    attn_backward(dq, dk, dv, r, q, k, v, pos, N1, N1, AH, AK, AD, scratch);
    attn_backward(dq + N1 * AH * AD, dk + N1 * AK * AD, dv + N1 * AK * AD, r + N1 * AH * AD,
                  q + N1 * AH * AD, k + N1 * AK * AD, v + N1 * AK * AD, pos + N1, N2, N2, AH,
                  AK, AD, scratch);
    /* the second sequence's first row attends only to itself: out = its v */
    for (int h = 0; h < AH; h++)
        for (int d = 0; d < AD; d++)
            CU_ASSERT_DOUBLE_EQUAL(y[(N1 * AH + h) * AD + d],
                                   v[(N1 * AK + h / (AH / AK)) * AD + d], 1e-6);
    /* no gradient crosses the boundary: keys of sequence 1 get nothing from seq 2's
     * queries (checked by zeroing seq 1's upstream gradient) */
    float dk2[N * AK * AD] = {0};
    memset(r, 0, N1 * AH * AD * sizeof(float));
    attn_backward(NULL, dk2, NULL, r, q, k, v, pos, N1, N1, AH, AK, AD, scratch);
    for (int i = 0; i < N1 * AK * AD; i++) CU_ASSERT_EQUAL(dk2[i], 0.0f);
}

/* ---------------------------------------------------------------- swiglu */

enum { SN = 12 };
struct swiglu_ctx {
    float g[SN], u[SN], y[SN], r[SN], sig[SN];
};

static double swiglu_loss(void *p)
{
    struct swiglu_ctx *c = p;
    swiglu_forward(c->y, c->sig, c->g, c->u, SN);
    return dotr(c->y, c->r, SN);
}

static void test_swiglu(void)
{
    struct swiglu_ctx c;
    fill(c.g, SN, 23, 2);
    fill(c.u, SN, 24, 1);
    fill(c.r, SN, 25, 1);
    swiglu_loss(&c);
    for (int i = 0; i < SN; i++)
        CU_ASSERT_DOUBLE_EQUAL(c.y[i], c.g[i] / (1 + exp(-(double)c.g[i])) * c.u[i], 1e-5);
    /* without sig, and re-formed from sig: the same bits */
    float y2[SN], y3[SN];
    swiglu_forward(y2, NULL, c.g, c.u, SN);
    swiglu_apply(y3, c.g, c.u, c.sig, SN);
    CU_ASSERT_EQUAL(memcmp(y2, c.y, sizeof y2), 0);
    CU_ASSERT_EQUAL(memcmp(y3, c.y, sizeof y3), 0);
    float dg[SN] = {0}, du[SN] = {0};
    swiglu_backward(dg, du, c.r, c.g, c.u, c.sig, SN);
    fd_check("swiglu dg", c.g, dg, SN, swiglu_loss, &c);
    fd_check("swiglu du", c.u, du, SN, swiglu_loss, &c);
}

/* ---------------------------------------------------------------- log-softmax */

enum { LSN = 4, LSV = 7 };
struct ls_ctx {
    float x[LSN * LSV], lp[LSN], r[LSN], temp;
    int32_t tgt[LSN];
};

static double ls_loss(void *p)
{
    struct ls_ctx *c = p;
    logsoftmax_forward(c->lp, NULL, c->x, c->tgt, LSN, LSV, c->temp);
    return dotr(c->lp, c->r, LSN);
}

static void test_logsoftmax(void)
{
    struct ls_ctx c = {.tgt = {2, -1, 6, 0}, .temp = 0.7f};
    fill(c.x, LSN * LSV, 26, 2);
    fill(c.r, LSN, 27, 1);
    float ent[LSN];
    logsoftmax_forward(c.lp, ent, c.x, c.tgt, LSN, LSV, c.temp);
    for (int i = 0; i < LSN; i++) {
        double z[LSV], mx = -1e300, sum = 0, h = 0;
        for (int j = 0; j < LSV; j++) {
            z[j] = c.x[i * LSV + j] / (double)c.temp;
            mx = z[j] > mx ? z[j] : mx;
        }
        for (int j = 0; j < LSV; j++) sum += exp(z[j] - mx);
        double lse = mx + log(sum);
        for (int j = 0; j < LSV; j++) h -= exp(z[j] - lse) * (z[j] - lse);
        CU_ASSERT_DOUBLE_EQUAL(c.lp[i], c.tgt[i] < 0 ? 0.0 : z[c.tgt[i]] - lse, 1e-5);
        CU_ASSERT_DOUBLE_EQUAL(ent[i], h, 1e-5);
    }
    float dx[LSN * LSV] = {0};
    logsoftmax_backward(dx, c.r, c.x, c.tgt, LSN, LSV, c.temp);
    fd_check("log-softmax dlogits", c.x, dx, LSN * LSV, ls_loss, &c);
    for (int j = 0; j < LSV; j++) CU_ASSERT_EQUAL(dx[LSV + j], 0.0f); /* target -1 */
}

/* ---------------------------------------------------------------- embedding */

static void test_embed(void)
{
    float e[4 * 3], x[3 * 3], dx[3 * 3], de[4 * 3] = {0};
    int32_t tok[3] = {2, 0, 2};
    fill(e, 12, 28, 1);
    fill(dx, 9, 29, 1);
    embed_forward(x, e, tok, 3, 3);
    CU_ASSERT_EQUAL(memcmp(x, e + 6, 3 * sizeof(float)), 0);
    embed_backward(de, dx, tok, 3, 3);
    CU_ASSERT_DOUBLE_EQUAL(de[6], dx[0] + dx[6], 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(de[0], dx[3], 1e-7);
    CU_ASSERT_EQUAL(de[3], 0.0f);
}

int main(void)
{
    static const struct test_case cases[] = {
        {"linear: forward, dx dW db by finite differences", test_linear},
        {"rmsnorm: forward, dx dw by finite differences", test_rmsnorm},
        {"rmsnorm per head (qwen3 q/k norm) = row by row", test_rmsnorm_per_head},
        {"rotary: HF rotate-half convention, backward", test_rope},
        {"attention (causal, GQA): reference, dq dk dv", test_attention},
        {"attention: KV-cache rows = full rows, causality", test_attention_cache},
        {"attention: packed sequences stay apart", test_attention_packed},
        {"swiglu: forward, dg du", test_swiglu},
        {"log-softmax at a temperature: log-prob, entropy, dlogits", test_logsoftmax},
        {"embedding: gather and scatter-add", test_embed},
        {NULL, NULL}};
    static const struct test_suite suites[] = {{"tfm ops", cases}, {NULL, NULL}};
    return test_main(suites);
}
