/*
 * The training path's backward: gradients of J = -sum_t w_t logprob_t - sum_t e_t H_t
 * (H_t the entropy of the token's predictive distribution, e_t the batch's optional
 * entropy weights), ADDED into a gradient block with the parameters' layout. Runs its
 * own forward, which keeps every layer's internals (tfm_state.h), so the way back is
 * the backward alone: 3 x the forward's FLOPs in all. The output head (forward and
 * backward) runs here, logit_chunk rows at a time, only for tokens with a non-zero
 * weight or entropy weight.
 *
 * Tied embeddings need no special case: g->lm_head == g->embed, so the output head's
 * and the embedding's gradients land in the same rows.
 */
#include <math.h>
#include <string.h>

#include "cpu/ops.h"
#include "libra/log.h"
#include "tfm_state.h"

static void zero(float *x, size_t n) { memset(x, 0, n * sizeof(float)); }

/* Entropy weight of token t: entropy_weights[t] where targets[t] >= 0, else 0. */
static float entropy_weight(const struct tfm_batch *b, int t)
{
    return b->entropy_weights && b->targets[t] >= 0 ? b->entropy_weights[t] : 0.0f;
}

/* The entropy term of one row of logits x (V): with p = softmax(x / temp) and
 * H = -sum p log p, dH/dx_j = -(1/temp) p_j (log p_j + H); J carries -e H, so
 * d (V) += (e / temp) p_j (log p_j + H). Returns H. Sums in double; z_j = x_j / temp
 * rounded to float as logsoftmax_forward forms it. */
static double entropy_row_backward(float *d, const float *x, int V, float temp, float e)
{
    float mx = -INFINITY;
    for (int j = 0; j < V; j++) mx = fmaxf(mx, x[j] / temp);
    double sum = 0;
    for (int j = 0; j < V; j++) sum += exp((double)(x[j] / temp - mx));
    double lsum = log(sum), H = 0;
    for (int j = 0; j < V; j++) {
        double lp = (double)(x[j] / temp - mx) - lsum;
        H -= exp(lp) * lp;
    }
    double c = (double)e / temp;
    for (int j = 0; j < V; j++) {
        double lp = (double)(x[j] / temp - mx) - lsum;
        d[j] += (float)(c * exp(lp) * (lp + H));
    }
    return H;
}

/* Output head and final norm: dJ/dx_L into s->dx (overwritten); returns J. */
static double head_backward(const struct tfm_config *c, const struct tfm_params *p,
                            struct tfm_state *s, const struct tfm_batch *b, int T,
                            struct tfm_params *g)
{
    int C = c->hidden_size, V = c->vocab_size;
    rmsnorm_forward(s->hf, s->x, p->ln_f, T, C, c->rms_norm_eps);
    zero(s->dh, (size_t)T * C);
    int n_rows = 0;
    for (int t = 0; t < T; t++)
        if (tfm_token_weight(b, t) != 0.0f || entropy_weight(b, t) != 0.0f)
            s->rows[n_rows++] = t;

    double J = 0;
    for (int r0 = 0; r0 < n_rows; r0 += s->logit_chunk) {
        int n = n_rows - r0 < s->logit_chunk ? n_rows - r0 : s->logit_chunk;
        const int *rows = s->rows + r0;
        tfm_gather_chunk(s, b, rows, n);
        for (int i = 0; i < n; i++) s->dlp_c[i] = -tfm_token_weight(b, rows[i]);
        linear_forward(s->logits, s->hc, p->lm_head, NULL, n, C, V);
        logsoftmax_forward(s->lp_c, NULL, s->logits, s->tgt_c, n, V, b->temperature);
        for (int i = 0; i < n; i++) J += (double)s->dlp_c[i] * s->lp_c[i];
        zero(s->dlogits, (size_t)n * V);
        logsoftmax_backward(s->dlogits, s->dlp_c, s->logits, s->tgt_c, n, V, b->temperature);
        for (int i = 0; i < n; i++) {
            float e = entropy_weight(b, rows[i]);
            if (e != 0.0f)
                J -= e * entropy_row_backward(s->dlogits + (size_t)i * V,
                                              s->logits + (size_t)i * V, V, b->temperature, e);
        }
        zero(s->dhc, (size_t)n * C);
        linear_backward(s->dhc, g->lm_head, NULL, s->dlogits, s->hc, p->lm_head, n, C, V);
        for (int i = 0; i < n; i++)
            memcpy(s->dh + (size_t)rows[i] * C, s->dhc + (size_t)i * C, (size_t)C * sizeof(float));
    }
    zero(s->dx, (size_t)T * C);
    rmsnorm_backward(s->dx, g->ln_f, s->dh, s->x, p->ln_f, T, C, c->rms_norm_eps);
    return J;
}

/* Attention of every sequence, backward: dq, dk, dv (zeroed here) from datt. */
static void attention_backward(const struct tfm_config *c, struct tfm_state *s,
                               const struct tfm_batch *b, const struct tfm_acts *a, int T)
{
    int H = c->n_heads, K = c->n_kv_heads, D = c->head_dim;
    zero(s->dq, (size_t)T * H * D);
    zero(s->dk, (size_t)T * K * D);
    zero(s->dv, (size_t)T * K * D);
    size_t t0 = 0;
    for (int i = 0; i < b->n_seq; i++) {
        int n = b->seq_len[i];
        if (n > 0)
            attn_backward(s->dq + t0 * H * D, s->dk + t0 * K * D, s->dv + t0 * K * D,
                          s->datt + t0 * H * D, a->q + t0 * H * D, a->k + t0 * K * D,
                          a->v + t0 * K * D, s->pos + t0, n, n, H, K, D, s->attn_scratch);
        t0 += (size_t)n;
    }
}

/* Layer l: on entry s->dx = dJ/dx_out, on exit dJ/dx_in; reads the internals the
 * forward left in s->acts[l]. */
static void layer_backward(const struct tfm_config *c, const struct tfm_params *p,
                           struct tfm_state *s, const struct tfm_batch *b, int l, int T,
                           struct tfm_params *g)
{
    const struct tfm_acts *a = &s->acts[l];
    struct tfm_layer w = tfm_layer_view(c, p, l);
    struct tfm_layer_grad dw = tfm_layer_grad_view(c, g, l);
    int C = c->hidden_size, H = c->n_heads, K = c->n_kv_heads, D = c->head_dim;
    int F = c->intermediate_size;
    size_t TC = (size_t)T * C, TF = (size_t)T * F;
    float eps = c->rms_norm_eps;

    /* MLP: x_out = xmid + act Wd^T, act = silu(h2 Wg^T) * (h2 Wu^T), h2 = norm(xmid) */
    swiglu_apply(s->act, a->gate, a->up, a->sig, (int64_t)TF); /* the forward's act */
    zero(s->dact, TF);
    linear_backward(s->dact, dw.w_down, NULL, s->dx, s->act, w.w_down, T, F, C);
    zero(s->dgate, TF);
    zero(s->dup, TF);
    swiglu_backward(s->dgate, s->dup, s->dact, a->gate, a->up, a->sig, (int64_t)TF);
    zero(s->dh, TC);
    linear_backward(s->dh, dw.w_gate, NULL, s->dgate, a->h2, w.w_gate, T, C, F);
    linear_backward(s->dh, dw.w_up, NULL, s->dup, a->h2, w.w_up, T, C, F);
    rmsnorm_backward(s->dx, dw.ln2, s->dh, a->xmid, w.ln2, T, C, eps); /* dx: dJ/dxmid */

    /* attention: xmid = x_in + att Wo^T */
    zero(s->datt, (size_t)T * H * D);
    linear_backward(s->datt, dw.wo, NULL, s->dx, a->att, w.wo, T, H * D, C);
    attention_backward(c, s, b, a, T);
    rope_backward(s->dq, s->pos, T, H, D, s->rope);
    rope_backward(s->dk, s->pos, T, K, D, s->rope);
    float *dqp = s->dq, *dkp = s->dk;
    if (c->qk_norm) {
        zero(s->dqlin, (size_t)T * H * D);
        zero(s->dklin, (size_t)T * K * D);
        rmsnorm_backward(s->dqlin, dw.q_norm, s->dq, a->qlin, w.q_norm, T * H, D, eps);
        rmsnorm_backward(s->dklin, dw.k_norm, s->dk, a->klin, w.k_norm, T * K, D, eps);
        dqp = s->dqlin;
        dkp = s->dklin;
    }
    zero(s->dh, TC);
    linear_backward(s->dh, dw.wq, dw.bq, dqp, a->h1, w.wq, T, C, H * D);
    linear_backward(s->dh, dw.wk, dw.bk, dkp, a->h1, w.wk, T, C, K * D);
    linear_backward(s->dh, dw.wv, dw.bv, s->dv, a->h1, w.wv, T, C, K * D);
    rmsnorm_backward(s->dx, dw.ln1, s->dh, a->xin, w.ln1, T, C, eps); /* dx: dJ/dx_in */
}

double tfm_backward(const struct tfm_config *c, const struct tfm_params *p, struct tfm_state *s,
                    const struct tfm_batch *b, struct tfm_params *g)
{
    if (g->n != p->n)
        FATAL("tfm_backward: gradient block has %zu floats, the parameters %zu (allocate g "
              "with tfm_params_alloc for the same config)", g->n, p->n);
    int T = tfm_batch_prepare(c, s, b);
    tfm_trunk_forward(c, p, s, b, T);
    double J = head_backward(c, p, s, b, T, g);
    for (int l = c->n_layers - 1; l >= 0; l--) {
        /* Recompute mode: the internals hold the last layer's; refill layer l's from its
         * kept input (writing the same output as the forward did, bit for bit). */
        if (s->recompute && l < c->n_layers - 1)
            tfm_layer_forward(c, p, s, b, l, T, s->acts[l + 1].xin);
        layer_backward(c, p, s, b, l, T, g);
    }
    embed_backward(g->embed, s->dx, b->tokens, T, c->hidden_size);
    return J;
}
