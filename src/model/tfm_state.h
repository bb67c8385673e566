/*
 * Private to src/model/: the training path's state (activations and scratch, one
 * allocation) and the pieces tfm_state.c, tfm_forward.c, tfm_head.c and tfm_backward.c
 * share. Glossary as in include/libra/tfm.h; T here is max_tokens (buffers) or the
 * batch's token count.
 *
 * Tensor parallelism (include/libra/tfm_tp.h): the same code runs a TP shard. The
 * functions below take `tp` (NULL, or t == 1: the single-rank model, bitwise today's
 * arithmetic) and the shard's config (tp->local): every shape in a TP state is the
 * shard's (H/t heads, F/t, Vl = v1 - v0 vocabulary rows), tokens and targets stay
 * global ids.
 *
 * Two modes. Keep (the default while it fits TFM_KEEP_ACTIVATIONS_MAX_BYTES): every
 * layer's internals are kept from the forward for the backward, which runs no layer
 * forward again. Recompute (long sequences): only the residual stream entering each
 * layer is kept (L x B x C); the layer internals exist once, and backward re-runs
 * layer l's forward from its kept input before differentiating it -- the same
 * kernels on the same inputs, so the gradients are bitwise those of keep mode.
 *
 * Activation memory, in floats (B = max_tokens, Nc = logit chunk, +qk = qk_norm only):
 *   L*B*(4C + 2*H*D + 2*K*D + 3F)  (+qk L*B*(H*D + K*D))   residual stream and the
 *                                           internals of every layer (struct tfm_acts)
 * + B*(4C + 2*H*D + 2*K*D + 4F + D)  (+qk B*(H*D + K*D))   final norm input/output,
 *                                           swiglu output, one layer's gradients, the
 *                                           rotary table
 * + 2*Nc*(C + V) + 2*Nc                     logit chunk, gathered rows
 *   (TP: V is Vl, plus Nc floats and 5*Nc doubles of log-softmax row statistics)
 * + M*(3D + 2B), M = min(B, 32)*H/K         attention scratch (attn_scratch_floats)
 * plus B ints of positions and Nc ints of gathered targets.
 */
#ifndef LIBRA_MODEL_TFM_STATE_H
#define LIBRA_MODEL_TFM_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "libra/tfm.h"
#include "libra/tfm_tp.h"

/* One layer's internals over B rows: written by its forward, read by its backward. */
struct tfm_acts {
    float *xin;         /* (B, C) residual stream entering the layer */
    float *xmid;        /* (B, C) residual between attention and MLP */
    float *h1, *h2;     /* (B, C) input_layernorm / post_attention_layernorm outputs */
    float *qlin, *klin; /* (B, H*D), (B, K*D) projections before q/k norm (qk_norm, else NULL) */
    float *q, *k, *v;   /* (B, H*D), (B, K*D), (B, K*D) as attention reads them */
    float *att;         /* (B, H*D) attention output, input of o_proj */
    float *gate, *up;   /* (B, F) MLP projections */
    float *sig;         /* (B, F) sigmoid(gate), kept so backward needs no exp */
};

struct tfm_state {
    struct tfm_config c;
    int max_tokens;  /* B */
    int recompute;   /* 1: layer internals shared by all layers, recomputed in backward */
    int logit_chunk; /* Nc: rows of logits held at once */
    int vocab_full;  /* V of the whole model: token ids are checked against it */
    int chunk_vocab; /* the V logit chunks are sized by (TP: ceil(V/t), equal on all ranks) */
    int *pos;        /* (B) position of each token within its sequence */
    int *rows;       /* (B) token indices whose logits are needed (gather list) */
    int32_t *tgt_c;  /* (Nc) targets of the gathered chunk */
    struct tfm_acts *acts; /* (L) every layer's internals, carved out of mem */
    float *mem;      /* the one float allocation below */
    size_t n_floats;
    float *rope;     /* (B, D) rotary table of positions 0..B-1 (rope_table) */
    float *x;        /* (B, C) residual leaving the last layer */
    float *hf;       /* (B, C) final norm output */
    float *act;      /* (B, F) swiglu output of the layer at hand (re-formed in backward) */
    /* gradients of one layer */
    float *dx, *dh;           /* (B, C) */
    float *dq, *dk, *dv;      /* (B, H*D), (B, K*D), (B, K*D) */
    float *dqlin, *dklin;     /* (B, H*D), (B, K*D) (qk_norm, else NULL) */
    float *datt;              /* (B, H*D) */
    float *dgate, *dup, *dact; /* (B, F) */
    /* logits, a chunk of gathered rows at a time */
    float *hc, *dhc;          /* (Nc, C) final-norm rows of the chunk and their gradient */
    float *logits, *dlogits;  /* (Nc, V) */
    float *lp_c, *dlp_c;      /* (Nc) log-probs of the chunk, dJ/dlogprob */
    float *attn_scratch;      /* attn_scratch_floats(B, B, H, K, D) */
    /* TP states only (else NULL): row statistics of the distributed log-softmax of a
     * chunk (tp_ops.h), one allocation from tp_lsum */
    float *tp_mx;             /* (Nc) row max of logits / temperature */
    double *tp_lsum, *tp_ent; /* (Nc) log sum exp(z - max), entropy */
    double *tp_red;           /* (3 Nc) all-reduce buffer */
};

/* One layer's weights (slices of tfm_params; NULL where absent). */
struct tfm_layer {
    const float *ln1, *wq, *bq, *wk, *bk, *wv, *bv, *q_norm, *k_norm, *wo, *ln2, *w_gate,
        *w_up, *w_down;
};
/* The same slices of a gradient block (writable). */
struct tfm_layer_grad {
    float *ln1, *wq, *bq, *wk, *bk, *wv, *bv, *q_norm, *k_norm, *wo, *ln2, *w_gate, *w_up,
        *w_down;
};
struct tfm_layer tfm_layer_view(const struct tfm_config *c, const struct tfm_params *p, int l);
struct tfm_layer_grad tfm_layer_grad_view(const struct tfm_config *c, struct tfm_params *g,
                                          int l);

/* Checks the batch against the config and the state (aborts with a message on a
 * violated contract; token ids against s->vocab_full), fills s->pos; returns T. */
int tfm_batch_prepare(const struct tfm_config *c, struct tfm_state *s,
                      const struct tfm_batch *b);
/* Objective weight of token t: weights[t] (or 1) where targets[t] >= 0, else 0. */
float tfm_token_weight(const struct tfm_batch *b, int t);
/* Layer l on s->acts[l].xin (T, C): fills the layer's internals s->acts[l] and
 * writes x_out (T, C), the next layer's xin or s->x. TP: collective (two (T, C) sum
 * all-reduces, after o_proj and after down_proj). */
void tfm_layer_forward(const struct tfm_tp *tp, const struct tfm_config *c,
                       const struct tfm_params *p, struct tfm_state *s,
                       const struct tfm_batch *b, int l, int T, float *x_out);
/* Embedding and every layer: s->acts[l] holds layer l's internals, s->x the stream
 * leaving the last. TP: collective. */
void tfm_trunk_forward(const struct tfm_tp *tp, const struct tfm_config *c,
                       const struct tfm_params *p, struct tfm_state *s,
                       const struct tfm_batch *b, int T);
/* The output head of the forward (tfm_head.c): final norm of s->x, then logits
 * logit_chunk rows at a time for the rows asked for; log-probs, entropies, logits
 * (single-rank only) as tfm_forward describes; returns sum_t w_t logprob_t. TP:
 * collective, vocabulary-parallel log-softmax. */
double tfm_head_forward(const struct tfm_tp *tp, const struct tfm_config *c,
                        const struct tfm_params *p, struct tfm_state *s,
                        const struct tfm_batch *b, int T, float *logprob, float *entropy,
                        float *logits);
/* The output head and final norm of the backward (tfm_head.c): gradients of lm_head
 * and ln_f added into g, dJ/dx_L into s->dx (overwritten); returns J. TP: collective;
 * dx is the full gradient on every rank. */
double tfm_head_backward(const struct tfm_tp *tp, const struct tfm_config *c,
                         const struct tfm_params *p, struct tfm_state *s,
                         const struct tfm_batch *b, int T, struct tfm_params *g);
/* Copies the final-norm rows rows[0..n) into s->hc and their targets into s->tgt_c. */
void tfm_gather_chunk(struct tfm_state *s, const struct tfm_batch *b, const int *rows, int n);
/* For tests: rows of logits per chunk (>= 1, <= the size the state was created with). */
void tfm_state_set_logit_chunk(struct tfm_state *s, int chunk);

#endif
