/*
 * The transformer policy (device.type = "cpu"): a decoder-only model of the Llama /
 * Qwen2 / Qwen3 family, its parameters, and the training path.
 *
 * Glossary (used in every shape comment):
 *   V vocab_size   C hidden_size   L n_layers   H n_heads   K n_kv_heads
 *   D head_dim     F intermediate_size   T tokens of a packed batch   S sequences
 *
 * Architecture (Hugging Face conventions, so imported weights work unchanged):
 *   x = embed[tokens]
 *   per layer: h = rmsnorm(x) * ln1;  q = h Wq^T (+bq), k = h Wk^T (+bk), v = h Wv^T (+bv)
 *              [qwen3: q, k RMS-normalised per head with q_norm, k_norm]
 *              rotary on q, k (rotate-half: pairs (i, i + D/2), theta rope_theta,
 *              frequencies scaled by rope_scaling: linear, llama3, yarn, as HF)
 *              causal grouped-query attention (head h reads kv head h / (H/K)),
 *              scale 1/sqrt(D), never across sequence boundaries of a packed batch
 *              x += attn Wo^T;  h = rmsnorm(x) * ln2;  x += (silu(h Wg^T) * (h Wu^T)) Wd^T
 *   logits = rmsnorm(x) * ln_f  lm_head^T   (lm_head = embed when tied)
 * rmsnorm(x) = x / sqrt(mean(x^2) + eps). Weights are stored (out, in) like
 * torch.nn.Linear, row-major. Positions restart at 0 in every sequence.
 *
 * Three structs kept apart (STYLE 2): tfm_config (hyper-parameters), tfm_params
 * (pointers carved out of ONE allocation; the same layout serves gradients and the
 * AdamW moments), tfm_state (activations and scratch of the training path).
 * Tensor parallelism over several ranks: include/libra/tfm_tp.h.
 */
#ifndef LIBRA_TFM_H
#define LIBRA_TFM_H

#include <stddef.h>
#include <stdint.h>

enum tfm_family { TFM_LLAMA = 0, TFM_QWEN2 = 1, TFM_QWEN3 = 2 };
/* config.json's model_type of a family ("llama", "qwen2", "qwen3"; "?" if out of
 * range), and the family of a model_type (-1 if none). */
const char *tfm_family_name(int family);
int tfm_family_from_name(const char *model_type);

struct tfm_config {
    int family;            /* enum tfm_family (model_type llama | qwen2 | qwen3) */
    int vocab_size;        /* V */
    int hidden_size;       /* C */
    int n_layers;          /* L */
    int n_heads;           /* H */
    int n_kv_heads;        /* K, divides H */
    int head_dim;          /* D, even */
    int intermediate_size; /* F */
    int max_position_embeddings;
    float rms_norm_eps;
    float rope_theta;
    int tie_word_embeddings; /* 1: the output head is the embedding */
    int attention_bias;      /* q/k/v projections have biases (qwen2) */
    int qk_norm;             /* per-head RMSNorm on q and k (qwen3) */
    /* config.json "rope_scaling" (all zero = none: plain rotary with rope_theta).
     * Last, so that positional initialisers of the fields above leave it unset. */
    int rope_type;             /* enum tfm_rope_type */
    float rope_factor;         /* "factor" (linear, llama3, yarn) */
    float rope_low_freq_factor, rope_high_freq_factor; /* llama3 */
    int rope_original_max_pos; /* "original_max_position_embeddings" (llama3, yarn) */
    float rope_beta_fast, rope_beta_slow; /* yarn (0 = the defaults 32 and 1) */
    float rope_attention_factor;          /* yarn "attention_factor" (0 = 0.1 ln(factor) + 1) */
};

enum tfm_rope_type { TFM_ROPE_DEFAULT = 0, TFM_ROPE_LINEAR = 1, TFM_ROPE_LLAMA3 = 2, TFM_ROPE_YARN = 3 };
/* config.json's rope_type names: "default", "linear", "llama3", "yarn"; "?" if out of
 * range. */
const char *tfm_rope_type_name(int rope_type);
/* The enum tfm_rope_type of a name above, or -1. */
int tfm_rope_type_from_name(const char *name);

/* rope (P, D), P = n_pos: row p = a cos(p w_0) .. a cos(p w_{D/2-1}), then
 * a sin(p w_0) .. a sin(p w_{D/2-1}), with w = rope_inv_freq and a its return value;
 * the angle p w_i in float32 (as HF), cos / sin in double rounded to float, times a in
 * float32. The table rope_forward / rope_backward (cpu_ops.h) and the
 * CUDA kernels rope_fwd / rope_bwd read. */
void rope_table(float *rope, int n_pos, const struct tfm_config *c);

struct tfm_params {
    float *embed;   /* (V, C)      model.embed_tokens.weight */
    float *ln1;     /* (L, C)      model.layers.i.input_layernorm.weight */
    float *wq;      /* (L, H*D, C) model.layers.i.self_attn.q_proj.weight */
    float *bq;      /* (L, H*D)    ...q_proj.bias          (attention_bias, else NULL) */
    float *wk;      /* (L, K*D, C) ...k_proj.weight */
    float *bk;      /* (L, K*D)    ...k_proj.bias          (attention_bias, else NULL) */
    float *wv;      /* (L, K*D, C) ...v_proj.weight */
    float *bv;      /* (L, K*D)    ...v_proj.bias          (attention_bias, else NULL) */
    float *q_norm;  /* (L, D)      ...self_attn.q_norm.weight (qk_norm, else NULL) */
    float *k_norm;  /* (L, D)      ...self_attn.k_norm.weight (qk_norm, else NULL) */
    float *wo;      /* (L, C, H*D) ...self_attn.o_proj.weight */
    float *ln2;     /* (L, C)      ...post_attention_layernorm.weight */
    float *w_gate;  /* (L, F, C)   ...mlp.gate_proj.weight */
    float *w_up;    /* (L, F, C)   ...mlp.up_proj.weight */
    float *w_down;  /* (L, C, F)   ...mlp.down_proj.weight */
    float *ln_f;    /* (C)         model.norm.weight */
    float *lm_head; /* (V, C)      lm_head.weight; == embed when tied */
    float *mem;     /* the one allocation all of the above point into */
    size_t n;       /* floats in mem */
};

/* Where each tensor starts in tfm_params' one block (offsets in floats from mem;
 * TFM_ABSENT for a tensor the model does not have; lm_head == embed when tied) and
 * the block's length: the layout a copy of the parameters on another device keeps.
 * Per-layer tensors are L slices of equal length, layer l at offset + l * length. */
#define TFM_ABSENT ((size_t)-1)
struct tfm_layout {
    size_t embed, ln1, wq, bq, wk, bk, wv, bv, q_norm, k_norm, wo, ln2, w_gate, w_up, w_down,
        ln_f, lm_head;
    size_t n;
};
void tfm_layout_of(const struct tfm_config *c, struct tfm_layout *o);

/* Checks the hyper-parameters (positive, K | H, D even, ..., the rope_scaling fields:
 * factor >= 1, llama3 low < high freq factor and original_max_pos > 0, fields the
 * rope_type does not read left 0); 0 or -1 + message. */
int tfm_config_check(const struct tfm_config *c, char *err, size_t errlen);
size_t tfm_param_count(const struct tfm_config *c);
/* Allocates one zeroed block of tfm_param_count floats and carves the pointers. */
void tfm_params_alloc(struct tfm_params *p, const struct tfm_config *c);
void tfm_params_free(struct tfm_params *p);
/* Initialisation for tests and fresh models: normal(0, std) for matrices and
 * embeddings, keyed by (seed, tensor, index); 1 for norm weights; 0 for biases. */
void tfm_params_init_random(struct tfm_params *p, const struct tfm_config *c, uint64_t seed,
                            float std);

/* One Hugging Face tensor: a view into tfm_params (per-layer tensors are slices). */
struct tfm_tensor {
    char name[96];   /* e.g. "model.layers.3.self_attn.q_proj.weight" */
    float *data;
    int ndim;
    int64_t dims[2];
};
/* Fills out (capacity max) with every tensor in Hugging Face order; returns the count
 * (lm_head only when untied, biases / q_norm / k_norm only when present). */
int tfm_tensors(const struct tfm_config *c, const struct tfm_params *p, struct tfm_tensor *out,
                int max);

/* A packed batch of variable-length sequences. */
struct tfm_batch {
    int n_seq;                /* S */
    const int *seq_len;       /* (S) tokens of each sequence; sum = T */
    const int32_t *tokens;    /* (T) input tokens */
    const int32_t *targets;   /* (T) next tokens to score; -1 = no target here */
    const float *weights;     /* (T) per-token objective weights; NULL = 1 where target >= 0 */
    float temperature;        /* log-probs of softmax(logits / temperature); > 0 */
    /* (T) e_t: J also includes - sum_t e_t H_t (H_t the entropy of softmax(logits_t /
     * temperature)), counted where target >= 0 like the weights; NULL = none. Last, so
     * that positional initialisers of the fields above leave it NULL. */
    const float *entropy_weights;
};

struct tfm_state; /* activations and scratch of the training path (src/model/) */

/* Sized for batches of at most max_tokens tokens, for the model c (shapes and
 * rotary settings). Keeping every layer's internals for the backward costs about
 * L x max_tokens x (4C + 2*H*D + 2*K*D + 3F) floats (formula in
 * src/model/tfm_state.h); past TFM_KEEP_ACTIVATIONS_MAX_BYTES the state recomputes
 * instead (below). Logits are processed in chunks of tokens, never T x V. */
struct tfm_state *tfm_state_create(const struct tfm_config *c, int max_tokens);
/* recompute = 1: keep only the residual stream entering each layer (L x B x C) and
 * recompute a layer's internals in backward (about 1/3 more work, far less memory);
 * 0: keep every layer's internals. tfm_state_create picks keep unless its state
 * would exceed TFM_KEEP_ACTIVATIONS_MAX_BYTES. Gradients are bitwise the same. */
#define TFM_KEEP_ACTIVATIONS_MAX_BYTES ((size_t)1 << 30)
struct tfm_state *tfm_state_create_opts(const struct tfm_config *c, int max_tokens, int recompute);
int tfm_state_recomputes(const struct tfm_state *s);
void tfm_state_free(struct tfm_state *s);
/* Bytes of activation memory the state holds (reported by the benchmarks). */
size_t tfm_state_bytes(const struct tfm_state *s);

/* Forward: logprob[t] = log softmax(logits_t / temperature)[targets[t]] (0 where no
 * target), entropy[t] of the same distribution (if entropy != NULL), logits (T, V)
 * copied out if logits != NULL. Returns sum_t w_t logprob_t. */
double tfm_forward(const struct tfm_config *c, const struct tfm_params *p, struct tfm_state *s,
                   const struct tfm_batch *b, float *logprob, float *entropy, float *logits);
/* Backward of the loss  J = - sum_t w_t logprob_t - sum_t e_t H_t  (the weights carry
 * any normalisation; e_t = entropy_weights, 0 when NULL); gradients are ADDED into g
 * (same layout as p; zero it first). Runs its own forward, then the backward
 * (3 x forward FLOPs); returns J. */
double tfm_backward(const struct tfm_config *c, const struct tfm_params *p, struct tfm_state *s,
                    const struct tfm_batch *b, struct tfm_params *g);

#endif
