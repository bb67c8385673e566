/*
 * The training path's backward: gradients of J = -sum_t w_t logprob_t - sum_t e_t H_t
 * (H_t the entropy of the token's predictive distribution, e_t the batch's optional
 * entropy weights), ADDED into a gradient block with the parameters' layout; and its
 * tensor-parallel twin tfm_backward_tp. Runs its own forward, which keeps every
 * layer's internals (tfm_state.h), so the way back is the backward alone: 3 x the
 * forward's FLOPs in all. The output head (tfm_head.c) runs logit_chunk rows at a
 * time, only for tokens with a non-zero weight or entropy weight.
 *
 * TP (Megatron): the residual-stream gradient dx is the full one on every rank.
 * Row-parallel o_proj / down_proj need no communication (their input gradient is per
 * rank); the input gradient dh of the column-parallel q/k/v and gate/up projections is
 * a partial sum over the ranks' heads / F columns, all-reduced before the norm
 * backward (which then gives every rank the same full dln1, dln2 and dx). With tp NULL
 * the all-reduces are no-ops.
 */
#include <math.h>
#include <string.h>

#include "libra/cpu_ops.h"
#include "libra/log.h"
#include "tfm_state.h"
#include "tp_ops.h"

static void zero(float *x, size_t n) { memset(x, 0, n * sizeof(float)); }

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
static void layer_backward(const struct tfm_tp *tp, const struct tfm_config *c,
                           const struct tfm_params *p, struct tfm_state *s,
                           const struct tfm_batch *b, int l, int T, struct tfm_params *g)
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
    tp_allreduce_sum(tp, s->dh, TC); /* column-parallel: each rank's F/t columns' share */
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
    tp_allreduce_sum(tp, s->dh, TC); /* column-parallel: each rank's heads' share */
    rmsnorm_backward(s->dx, dw.ln1, s->dh, a->xin, w.ln1, T, C, eps); /* dx: dJ/dx_in */
}

/* The backward of the model c (the whole model, or tp's shard): J. */
static double backward(const struct tfm_tp *tp, const struct tfm_config *c,
                       const struct tfm_params *p, struct tfm_state *s,
                       const struct tfm_batch *b, struct tfm_params *g)
{
    int T = tfm_batch_prepare(c, s, b);
    tfm_trunk_forward(tp, c, p, s, b, T);
    double J = tfm_head_backward(tp, c, p, s, b, T, g);
    for (int l = c->n_layers - 1; l >= 0; l--) {
        /* Recompute mode: the internals hold the last layer's; refill layer l's from its
         * kept input (writing the same output as the forward did, bit for bit). */
        if (s->recompute && l < c->n_layers - 1)
            tfm_layer_forward(tp, c, p, s, b, l, T, s->acts[l + 1].xin);
        layer_backward(tp, c, p, s, b, l, T, g);
    }
    tp_embed_backward(tp, g->embed, s->dx, b->tokens, T, c->hidden_size);
    return J;
}

double tfm_backward(const struct tfm_config *c, const struct tfm_params *p, struct tfm_state *s,
                    const struct tfm_batch *b, struct tfm_params *g)
{
    if (g->n != p->n)
        FATAL("tfm_backward: gradient block has %zu floats, the parameters %zu (allocate g "
              "with tfm_params_alloc for the same config)", g->n, p->n);
    return backward(NULL, c, p, s, b, g);
}

double tfm_backward_tp(const struct tfm_tp *tp, const struct tfm_params *p_local,
                       struct tfm_state *s, const struct tfm_batch *b,
                       struct tfm_params *g_local)
{
    const struct tfm_config *c = &tp->local;
    if (tp_parallel(tp) && (!s->tp_mx || s->vocab_full != tp->full.vocab_size))
        FATAL("tfm_backward_tp: the state was not created for this TP shard (create it with "
              "tfm_state_create_tp)");
    if (p_local->n != tfm_param_count(c) || g_local->n != p_local->n)
        FATAL("tfm_backward_tp: rank %d: parameters %zu floats, gradients %zu, its shard %zu "
              "(allocate both with tfm_params_alloc(&tp->local))", tp->rank, p_local->n,
              g_local->n, tfm_param_count(c));
    return backward(tp, c, p_local, s, b, g_local);
}
