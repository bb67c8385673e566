/*
 * The training path's forward: one layer's forward over a packed batch, the trunk
 * (embedding + layers), tfm_forward (log-probs, entropies, optional logits) and its
 * tensor-parallel twin tfm_forward_tp. Kernels are in cpu/ops.c (tp_ops.c for the TP
 * communication), the state in tfm_state.c, the output head in tfm_head.c.
 *
 * TP (Megatron): a shard's layer is the same code on its heads and F/t MLP columns;
 * o_proj and down_proj are row-parallel, so their (T, C) outputs are partial sums,
 * all-reduced before the residual add. With tp NULL the all-reduces are no-ops.
 *
 * Limits: one batch of at most max_tokens tokens; sequences of a packed batch never
 * see each other (attention runs per sequence slice, positions restart at 0). Logits
 * are formed logit_chunk rows at a time and only for the rows asked for.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libra/cpu_ops.h"
#include "libra/log.h"
#include "tfm_state.h"
#include "tp_ops.h"

/* ---------------------------------------------------------------- layer */

/* Causal attention of every sequence of the batch over its own slice of q, k, v. */
static void attention_forward(const struct tfm_config *c, struct tfm_state *s,
                              const struct tfm_batch *b, struct tfm_acts *a)
{
    int H = c->n_heads, K = c->n_kv_heads, D = c->head_dim;
    size_t t0 = 0;
    for (int i = 0; i < b->n_seq; i++) {
        int n = b->seq_len[i];
        if (n > 0)
            attn_forward(a->att + t0 * H * D, a->q + t0 * H * D, a->k + t0 * K * D,
                         a->v + t0 * K * D, s->pos + t0, n, n, H, K, D, s->attn_scratch);
        t0 += (size_t)n;
    }
}

void tfm_layer_forward(const struct tfm_tp *tp, const struct tfm_config *c,
                       const struct tfm_params *p, struct tfm_state *s,
                       const struct tfm_batch *b, int l, int T, float *x_out)
{
    struct tfm_layer w = tfm_layer_view(c, p, l);
    struct tfm_acts *a = &s->acts[l];
    int C = c->hidden_size, H = c->n_heads, K = c->n_kv_heads, D = c->head_dim;
    int F = c->intermediate_size;
    size_t TC = (size_t)T * C;
    float eps = c->rms_norm_eps;

    rmsnorm_forward(a->h1, a->xin, w.ln1, T, C, eps);
    float *qp = c->qk_norm ? a->qlin : a->q, *kp = c->qk_norm ? a->klin : a->k;
    linear_forward(qp, a->h1, w.wq, w.bq, T, C, H * D);
    linear_forward(kp, a->h1, w.wk, w.bk, T, C, K * D);
    linear_forward(a->v, a->h1, w.wv, w.bv, T, C, K * D);
    if (c->qk_norm) {
        rmsnorm_forward(a->q, a->qlin, w.q_norm, T * H, D, eps);
        rmsnorm_forward(a->k, a->klin, w.k_norm, T * K, D, eps);
    }
    rope_forward(a->q, s->pos, T, H, D, s->rope);
    rope_forward(a->k, s->pos, T, K, D, s->rope);
    attention_forward(c, s, b, a);
    linear_forward(a->xmid, a->att, w.wo, NULL, T, H * D, C);
    tp_allreduce_sum(tp, a->xmid, TC); /* row-parallel: each rank's heads' share */
    for (size_t i = 0; i < TC; i++) a->xmid[i] += a->xin[i];

    rmsnorm_forward(a->h2, a->xmid, w.ln2, T, C, eps);
    linear_forward(a->gate, a->h2, w.w_gate, NULL, T, C, F);
    linear_forward(a->up, a->h2, w.w_up, NULL, T, C, F);
    swiglu_forward(s->act, a->sig, a->gate, a->up, (int64_t)T * F);
    linear_forward(x_out, s->act, w.w_down, NULL, T, F, C);
    tp_allreduce_sum(tp, x_out, TC); /* row-parallel: each rank's F/t columns' share */
    for (size_t i = 0; i < TC; i++) x_out[i] += a->xmid[i];
}

void tfm_trunk_forward(const struct tfm_tp *tp, const struct tfm_config *c,
                       const struct tfm_params *p, struct tfm_state *s,
                       const struct tfm_batch *b, int T)
{
    int L = c->n_layers;
    tp_embed_forward(tp, s->acts[0].xin, p->embed, b->tokens, T, c->hidden_size);
    for (int l = 0; l < L; l++)
        tfm_layer_forward(tp, c, p, s, b, l, T, l + 1 < L ? s->acts[l + 1].xin : s->x);
}

/* ---------------------------------------------------------------- forward */

double tfm_forward(const struct tfm_config *c, const struct tfm_params *p, struct tfm_state *s,
                   const struct tfm_batch *b, float *logprob, float *entropy, float *logits)
{
    int T = tfm_batch_prepare(c, s, b);
    tfm_trunk_forward(NULL, c, p, s, b, T);
    return tfm_head_forward(NULL, c, p, s, b, T, logprob, entropy, logits);
}

double tfm_forward_tp(const struct tfm_tp *tp, const struct tfm_params *p_local,
                      struct tfm_state *s, const struct tfm_batch *b, float *logprob,
                      float *entropy)
{
    const struct tfm_config *c = &tp->local;
    if (tp_parallel(tp) && (!s->tp_mx || s->vocab_full != tp->full.vocab_size))
        FATAL("tfm_forward_tp: the state was not created for this TP shard (create it with "
              "tfm_state_create_tp)");
    if (p_local->n != tfm_param_count(c))
        FATAL("tfm_forward_tp: rank %d's parameters have %zu floats, its shard %zu (allocate "
              "them with tfm_params_alloc(&tp->local))", tp->rank, p_local->n,
              tfm_param_count(c));
    int T = tfm_batch_prepare(c, s, b);
    tfm_trunk_forward(tp, c, p_local, s, b, T);
    return tfm_head_forward(tp, c, p_local, s, b, T, logprob, entropy, NULL);
}
