/*
 * The host module's elementwise, normalisation, rotary and matrix-product kernels
 * (include/libra/cuda_api.h), each its CPU reference (include/libra/cpu_ops.h) on the
 * operands widened from bf16: embedding gather and scatter-add, RMSNorm, rotary,
 * SwiGLU, the bf16 conversion, linear_fwd / linear_bwd (bf16 operands widened exactly,
 * float32 sums: linear_forward / linear_backward), add_bias, bias_bwd, and gemv (x
 * rounded to bf16 as it is read, after the folded RMSNorm -- rmsnorm_fwd's bits, so
 * the fused product is the unfused one). A row's result depends only on that row up
 * to 8 rows (linear_forward's sgemv per row), as gemv's does on the GPU.
 * Limits: a matrix is widened to float32 at every call (a copy per product): fine for
 * test models, slow for real ones; the pointers are not checked against alloc's blocks.
 */
#include "cuda_host_internal.h"

#include <stdlib.h>
#include <string.h>

#include "libra/cpu_ops.h"
#include "libra/log.h"
#include "libra/safetensors.h"

float *ch_widen(const uint16_t *x, size_t n)
{
    float *y = xmalloc((n ? n : 1) * sizeof *y);
    st_bf16_to_f32_n(x, y, n);
    return y;
}

float ch_bf16r(float x) { return st_bf16_to_f32(st_f32_to_bf16(x)); }

/* ---------------------------------------------------------------- embedding */

/* A token of -1 gets a zero row (another rank's part of a vocabulary-parallel
 * embedding); any other token outside [0, V) is reported by the next sync. */
int ch_embed_gather(const void *args)
{
    const struct embed_args *a = args;
    for (int r = 0; r < a->N; r++) {
        float *xr = a->x + (size_t)r * a->C;
        int32_t t = a->tokens[r];
        if (t == -1) {
            memset(xr, 0, (size_t)a->C * sizeof *xr);
            continue;
        }
        if (t < 0 || t >= a->V) {
            ch_raise_bad_token(t);
            continue;
        }
        const uint16_t *e = a->embed + (size_t)t * a->C;
        for (int j = 0; j < a->C; j++) xr[j] = st_bf16_to_f32(e[j]);
    }
    return 0;
}

/* A token of -1 adds nothing (another rank's row); any other token outside [0, V)
 * adds nothing and is reported by the next sync. */
int ch_embed_scatter_add(const void *args)
{
    const struct embed_args *a = args;
    for (int r = 0; r < a->N; r++) {
        if (a->tokens[r] == -1) continue;
        if (a->tokens[r] < 0 || a->tokens[r] >= a->V) {
            ch_raise_bad_token(a->tokens[r]);
            continue;
        }
        embed_backward(a->x, a->in + (size_t)r * a->C, a->tokens + r, 1, a->C);
    }
    return 0;
}

/* ---------------------------------------------------------------- elementwise */

int ch_rmsnorm_fwd(const void *args)
{
    const struct rmsnorm_args *a = args;
    if (a->N <= 0) return 0;
    float *w = ch_widen(a->w16, (size_t)a->C);
    size_t n = (size_t)a->N * a->C;
    float *y = a->y16 ? xmalloc(n * sizeof *y) : a->y; /* rmsnorm_fwd16: then rounded */
    rmsnorm_forward(y, a->x, w, a->N, a->C, a->eps);
    if (a->y16) st_f32_to_bf16_n(y, a->y16, n);
    if (y != a->y) free(y);
    free(w);
    return 0;
}

/* rstd is the CUDA kernels' scratch: not used here; y16: the new dx in bf16. */
int ch_rmsnorm_bwd(const void *args)
{
    const struct rmsnorm_args *a = args;
    if (a->N <= 0) return 0;
    rmsnorm_backward(a->dx, a->dw, a->dy, a->x, a->w, a->N, a->C, a->eps);
    if (a->dx && a->y16) st_f32_to_bf16_n(a->dx, a->y16, (size_t)a->N * a->C);
    return 0;
}

int ch_rope_fwd(const void *args)
{
    const struct rope_args *a = args;
    rope_forward(a->x, a->pos, a->N, a->n_heads, a->D, a->rope);
    return 0;
}

int ch_rope_bwd(const void *args)
{
    const struct rope_args *a = args;
    rope_backward(a->x, a->pos, a->N, a->n_heads, a->D, a->rope);
    return 0;
}

/* The (row, head) rows of a qk_norm_rope call; -1 (failed) for a head size the CUDA
 * kernels refuse. */
static int qk_rows(const struct qk_args *a, const char *what)
{
    int rows = a->N * a->n_heads;
    if (rows > 0 && (a->D < 2 || a->D % 2 || a->D > 256))
        return CH_FAIL("%s: head_dim %d odd or above 256", what, a->D);
    return rows;
}

/* rmsnorm_forward over each head's D values, then rope_forward. */
int ch_qk_norm_rope_fwd(const void *args)
{
    const struct qk_args *a = args;
    int rows = qk_rows(a, "qk_norm_rope_fwd");
    if (rows <= 0) return rows < 0 ? -1 : 0;
    float *w = ch_widen(a->w16, (size_t)a->D);
    rmsnorm_forward(a->y, a->x, w, rows, a->D, a->eps);
    rope_forward(a->y, a->pos, a->N, a->n_heads, a->D, a->rope);
    free(w);
    return 0;
}

/* rope_backward on dy in place, then rmsnorm_backward into a zeroed dx. */
int ch_qk_norm_rope_bwd(const void *args)
{
    const struct qk_args *a = args;
    int rows = qk_rows(a, "qk_norm_rope_bwd");
    if (rows <= 0) return rows < 0 ? -1 : 0;
    rope_backward(a->dy, a->pos, a->N, a->n_heads, a->D, a->rope);
    memset(a->dx, 0, (size_t)rows * a->D * sizeof *a->dx);
    rmsnorm_backward(a->dx, a->dw, a->dy, a->x, a->w, rows, a->D, a->eps);
    return 0;
}

int ch_swiglu_fwd(const void *args)
{
    const struct swiglu_args *a = args;
    swiglu_forward(a->y, a->sig, a->g, a->u, a->n);
    return 0;
}

/* The backward's sigmoid: sig_in, or (NULL) swiglu_forward's formed here into *own
 * (free it). */
static const float *sig_of(const struct swiglu_args *a, float **own)
{
    *own = NULL;
    if (a->sig_in) return a->sig_in;
    size_t n = (size_t)a->n;
    float *y = xmalloc(n * sizeof *y);
    *own = xmalloc(n * sizeof **own);
    swiglu_forward(y, *own, a->g, a->u, a->n);
    free(y);
    return *own;
}

int ch_swiglu_bwd(const void *args)
{
    const struct swiglu_args *a = args;
    if (a->n <= 0) return 0;
    float *own;
    swiglu_backward(a->dg, a->du, a->dy, a->g, a->u, sig_of(a, &own), a->n);
    free(own);
    return 0;
}

/* swiglu_forward's y, rounded to bf16. */
int ch_swiglu_fwd16(const void *args)
{
    const struct swiglu_args *a = args;
    if (a->n <= 0) return 0;
    float *y = xmalloc((size_t)a->n * sizeof *y);
    swiglu_forward(y, a->sig, a->g, a->u, a->n);
    st_f32_to_bf16_n(y, a->y16, (size_t)a->n);
    free(y);
    return 0;
}

/* swiglu_backward's terms (added to zeros: the terms themselves), rounded to bf16. */
int ch_swiglu_bwd16(const void *args)
{
    const struct swiglu_args *a = args;
    if (a->n <= 0) return 0;
    size_t n = (size_t)a->n;
    float *dg = a->dg16 ? xcalloc(n, sizeof *dg) : NULL;
    float *du = a->du16 ? xcalloc(n, sizeof *du) : NULL, *own;
    swiglu_backward(dg, du, a->dy, a->g, a->u, sig_of(a, &own), a->n);
    if (dg) st_f32_to_bf16_n(dg, a->dg16, n);
    if (du) st_f32_to_bf16_n(du, a->du16, n);
    free(dg), free(du), free(own);
    return 0;
}

int ch_f32_to_bf16(const void *args)
{
    const struct convert_args *a = args;
    st_f32_to_bf16_n(a->x, a->y, a->n > 0 ? (size_t)a->n : 0);
    return 0;
}

/* ---------------------------------------------------------------- products */

/* y (N, out) = x W^T (+ b), or y += x W^T with accumulate (the product formed first,
 * then added, as cuBLASLt's beta = 1 and gemv's accumulate do); x float32 (N, in), W
 * bf16 (out, in). */
static void product(float *y, const float *x, const uint16_t *w16, const float *b, int N,
                    int in, int out, int accumulate)
{
    if (N <= 0 || out <= 0) return;
    float *w = ch_widen(w16, (size_t)out * in);
    size_t ny = (size_t)N * out;
    float *t = accumulate ? xmalloc(ny * sizeof *t) : y;
    linear_forward(t, x, w, b, N, in, out);
    if (accumulate) {
        for (size_t i = 0; i < ny; i++) y[i] += t[i];
        free(t);
    }
    free(w);
}

int ch_linear_fwd(const void *args)
{
    const struct linear_args *a = args;
    if (a->N <= 0 || a->out <= 0) return 0;
    if (a->res && a->res != a->y) /* linear_fwd_res: y = res, then accumulated into */
        memcpy(a->y, a->res, (size_t)a->N * a->out * sizeof *a->y);
    float *x = ch_widen(a->x, (size_t)a->N * a->in);
    product(a->y, x, a->w, NULL, a->N, a->in, a->out, a->accumulate || a->res);
    free(x);
    return 0;
}

int ch_add_bias(const void *args)
{
    const struct linear_args *a = args;
    for (int i = 0; i < a->N; i++) {
        float *yi = a->y + (size_t)i * a->out;
        for (int o = 0; o < a->out; o++) yi[o] += a->b[o];
    }
    return 0;
}

int ch_linear_bwd(const void *args)
{
    const struct linear_args *a = args;
    if (a->N <= 0) return 0;
    float *dy = ch_widen(a->dy, (size_t)a->N * a->out);
    float *x = a->dw ? ch_widen(a->x, (size_t)a->N * a->in) : NULL;
    float *w = a->dx ? ch_widen(a->w, (size_t)a->out * a->in) : NULL;
    if (a->dx && !a->accumulate) memset(a->dx, 0, (size_t)a->N * a->in * sizeof *a->dx);
    linear_backward(a->dx, a->dw, NULL, dy, x, w, a->N, a->in, a->out);
    free(dy), free(x), free(w);
    return 0;
}

int ch_bias_bwd(const void *args)
{
    const struct linear_args *a = args;
    linear_backward(NULL, NULL, a->y, a->dyf, NULL, NULL, a->N, 0, a->out);
    return 0;
}

/* ---------------------------------------------------------------- gemv */

int ch_gemv_check(const struct cuda_gemv *g)
{
    const char *why = cuda_gemv_refusal(g);
    return why ? CH_FAIL("gemv: %s", why) : 0;
}

int ch_gemv(const void *args)
{
    const struct cuda_gemv *g = &((const struct gemv_args *)args)->g;
    size_t nx = (size_t)g->N * g->in;
    float *x = xmalloc(nx * sizeof *x);
    if (g->norm) {
        float *w = ch_widen(g->norm, (size_t)g->in);
        rmsnorm_forward(x, g->x, w, g->N, g->in, g->eps);
        free(w);
    } else {
        memcpy(x, g->x, nx * sizeof *x);
    }
    for (size_t i = 0; i < nx; i++) x[i] = ch_bf16r(x[i]);
    if (g->swiglu) { /* y_0 = swiglu_fwd's (g sig) u of the two products */
        size_t ny = (size_t)g->N * g->m[0].out;
        float *gate = xmalloc(ny * sizeof *gate), *up = xmalloc(ny * sizeof *up);
        product(gate, x, g->m[0].w, NULL, g->N, g->in, g->m[0].out, 0);
        product(up, x, g->m[1].w, NULL, g->N, g->in, g->m[1].out, 0);
        swiglu_forward(g->m[0].y, NULL, gate, up, (int64_t)ny);
        free(gate), free(up);
    } else {
        for (int i = 0; i < g->n_mats; i++)
            product(g->m[i].y, x, g->m[i].w, g->m[i].b, g->N, g->in, g->m[i].out,
                    g->accumulate);
    }
    free(x);
    return 0;
}
