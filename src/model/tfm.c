/*
 * The transformer's parameters: config checks, the one-allocation parameter block
 * (the same layout serves gradients and AdamW moments), random initialisation and
 * the table of Hugging Face tensors (views into the block).
 *
 * Layout of mem (floats, in this order; absent tensors take no space):
 *   embed (V, C) | ln1 (L, C) | wq (L, H*D, C) | bq (L, H*D) | wk (L, K*D, C) |
 *   bk (L, K*D) | wv (L, K*D, C) | bv (L, K*D) | q_norm (L, D) | k_norm (L, D) |
 *   wo (L, C, H*D) | ln2 (L, C) | w_gate (L, F, C) | w_up (L, F, C) | w_down (L, C, F) |
 *   ln_f (C) | lm_head (V, C) (untied only; else lm_head == embed)
 * Glossary as in include/libra/tfm.h.
 */
#include "libra/tfm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "libra/rng.h"

static const char *const family_names[] = {"llama", "qwen2", "qwen3"};

const char *tfm_family_name(int family)
{
    return family >= TFM_LLAMA && family <= TFM_QWEN3 ? family_names[family] : "?";
}

int tfm_family_from_name(const char *model_type)
{
    for (int i = TFM_LLAMA; i <= TFM_QWEN3; i++)
        if (model_type && strcmp(model_type, family_names[i]) == 0) return i;
    return -1;
}

static const char *const rope_type_names[] = {"default", "linear", "llama3", "yarn"};

const char *tfm_rope_type_name(int rope_type)
{
    return rope_type >= TFM_ROPE_DEFAULT && rope_type <= TFM_ROPE_YARN ? rope_type_names[rope_type]
                                                                       : "?";
}

int tfm_rope_type_from_name(const char *name)
{
    for (int i = TFM_ROPE_DEFAULT; i <= TFM_ROPE_YARN; i++)
        if (name && strcmp(name, rope_type_names[i]) == 0) return i;
    return -1;
}

/* The rope_scaling fields (config.json names in the messages): what each type needs,
 * and 0 in the fields it does not read, so that equal tables mean equal configs. */
static int rope_scaling_check(const struct tfm_config *c, char *err, size_t errlen)
{
#define BAD(...)                                  \
    do {                                          \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__); \
        return -1;                                \
    } while (0)
    int t = c->rope_type;
    if (t < TFM_ROPE_DEFAULT || t > TFM_ROPE_YARN)
        BAD("rope_type = %d is not default (0), linear (1), llama3 (2) or yarn (3)", t);
    const char *name = rope_type_names[t];
    const struct {
        const char *key;
        double v;
        int used; /* by this type */
    } f[] = {
        {"factor", c->rope_factor, t != TFM_ROPE_DEFAULT},
        {"low_freq_factor", c->rope_low_freq_factor, t == TFM_ROPE_LLAMA3},
        {"high_freq_factor", c->rope_high_freq_factor, t == TFM_ROPE_LLAMA3},
        {"original_max_position_embeddings", c->rope_original_max_pos,
         t == TFM_ROPE_LLAMA3 || t == TFM_ROPE_YARN},
        {"beta_fast", c->rope_beta_fast, t == TFM_ROPE_YARN},
        {"beta_slow", c->rope_beta_slow, t == TFM_ROPE_YARN},
        {"attention_factor", c->rope_attention_factor, t == TFM_ROPE_YARN},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (!f[i].used && f[i].v != 0)
            BAD("rope_scaling %s = %g is set but rope_type %s does not use it (leave it 0)",
                f[i].key, f[i].v, name);
        if (f[i].used && (!isfinite(f[i].v) || f[i].v < 0))
            BAD("rope_scaling %s = %g (rope_type %s) must be finite and >= 0", f[i].key, f[i].v,
                name);
    }
    if (t == TFM_ROPE_DEFAULT) return 0;
    if (!(c->rope_factor >= 1))
        BAD("rope_scaling factor = %g (rope_type %s) must be >= 1 (the context is stretched "
            "factor times)", (double)c->rope_factor, name);
    if (t == TFM_ROPE_LLAMA3) {
        if (!(c->rope_low_freq_factor > 0))
            BAD("rope_scaling low_freq_factor = %g (rope_type llama3) must be > 0",
                (double)c->rope_low_freq_factor);
        if (!(c->rope_high_freq_factor > c->rope_low_freq_factor))
            BAD("rope_scaling low_freq_factor = %g must be < high_freq_factor = %g (rope_type "
                "llama3; Llama 3.1 uses 1 and 4)", (double)c->rope_low_freq_factor,
                (double)c->rope_high_freq_factor);
        if (c->rope_original_max_pos <= 0)
            BAD("rope_scaling original_max_position_embeddings = %d (rope_type llama3) must be "
                "positive (Llama 3.1: 8192)", c->rope_original_max_pos);
    }
    if (t == TFM_ROPE_YARN) {
        double fast = c->rope_beta_fast > 0 ? c->rope_beta_fast : 32;
        double slow = c->rope_beta_slow > 0 ? c->rope_beta_slow : 1;
        if (!(fast >= slow))
            BAD("rope_scaling beta_fast = %g must be >= beta_slow = %g (rope_type yarn; 0 "
                "means the defaults 32 and 1)", fast, slow);
    }
    return 0;
#undef BAD
}

int tfm_config_check(const struct tfm_config *c, char *err, size_t errlen)
{
#define BAD(...)                                  \
    do {                                          \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__); \
        return -1;                                \
    } while (0)
    if (c->family < TFM_LLAMA || c->family > TFM_QWEN3)
        BAD("model family %d is not llama (0), qwen2 (1) or qwen3 (2)", c->family);
    if (c->vocab_size <= 0) BAD("vocab_size = %d must be positive", c->vocab_size);
    if (c->hidden_size <= 0) BAD("hidden_size = %d must be positive", c->hidden_size);
    if (c->n_layers <= 0) BAD("num_hidden_layers = %d must be positive", c->n_layers);
    if (c->n_heads <= 0) BAD("num_attention_heads = %d must be positive", c->n_heads);
    if (c->n_kv_heads <= 0) BAD("num_key_value_heads = %d must be positive", c->n_kv_heads);
    if (c->n_heads % c->n_kv_heads != 0)
        BAD("num_key_value_heads = %d must divide num_attention_heads = %d", c->n_kv_heads,
            c->n_heads);
    if (c->head_dim <= 0 || c->head_dim % 2 != 0)
        BAD("head_dim = %d must be positive and even (rotary pairs i, i + D/2)", c->head_dim);
    if (c->intermediate_size <= 0)
        BAD("intermediate_size = %d must be positive", c->intermediate_size);
    if (c->max_position_embeddings <= 0)
        BAD("max_position_embeddings = %d must be positive", c->max_position_embeddings);
    if (!(c->rms_norm_eps > 0) || !isfinite(c->rms_norm_eps))
        BAD("rms_norm_eps = %g must be positive and finite", (double)c->rms_norm_eps);
    if (!(c->rope_theta > 1) || !isfinite(c->rope_theta))
        BAD("rope_theta = %g must be finite and > 1", (double)c->rope_theta);
    if (c->tie_word_embeddings != 0 && c->tie_word_embeddings != 1)
        BAD("tie_word_embeddings = %d must be 0 or 1", c->tie_word_embeddings);
    if (c->attention_bias != 0 && c->attention_bias != 1)
        BAD("attention_bias = %d must be 0 or 1", c->attention_bias);
    if (c->qk_norm != 0 && c->qk_norm != 1) BAD("qk_norm = %d must be 0 or 1", c->qk_norm);
    return rope_scaling_check(c, err, errlen);
#undef BAD
}

/* Sizes of the tensor families, in layout order. */
enum {
    P_EMBED, P_LN1, P_WQ, P_BQ, P_WK, P_BK, P_WV, P_BV, P_QN, P_KN, P_WO, P_LN2, P_WG, P_WU,
    P_WD, P_LNF, P_HEAD, P_COUNT
};

static void family_sizes(const struct tfm_config *c, size_t sz[P_COUNT])
{
    size_t V = (size_t)c->vocab_size, C = (size_t)c->hidden_size, L = (size_t)c->n_layers;
    size_t HD = (size_t)c->n_heads * c->head_dim, KD = (size_t)c->n_kv_heads * c->head_dim;
    size_t D = (size_t)c->head_dim, F = (size_t)c->intermediate_size;
    int bias = c->attention_bias, qkn = c->qk_norm;
    sz[P_EMBED] = V * C;
    sz[P_LN1] = L * C;
    sz[P_WQ] = L * HD * C;
    sz[P_BQ] = bias ? L * HD : 0;
    sz[P_WK] = L * KD * C;
    sz[P_BK] = bias ? L * KD : 0;
    sz[P_WV] = L * KD * C;
    sz[P_BV] = bias ? L * KD : 0;
    sz[P_QN] = qkn ? L * D : 0;
    sz[P_KN] = qkn ? L * D : 0;
    sz[P_WO] = L * C * HD;
    sz[P_LN2] = L * C;
    sz[P_WG] = L * F * C;
    sz[P_WU] = L * F * C;
    sz[P_WD] = L * C * F;
    sz[P_LNF] = C;
    sz[P_HEAD] = c->tie_word_embeddings ? 0 : V * C;
}

size_t tfm_param_count(const struct tfm_config *c)
{
    size_t sz[P_COUNT], n = 0;
    family_sizes(c, sz);
    for (int i = 0; i < P_COUNT; i++) n += sz[i];
    return n;
}

/* The field of p for family i. */
static float **family_ptr(struct tfm_params *p, int i)
{
    float **f[P_COUNT] = {&p->embed, &p->ln1, &p->wq, &p->bq, &p->wk, &p->bk,
                          &p->wv, &p->bv, &p->q_norm, &p->k_norm, &p->wo, &p->ln2,
                          &p->w_gate, &p->w_up, &p->w_down, &p->ln_f, &p->lm_head};
    return f[i];
}

void tfm_layout_of(const struct tfm_config *c, struct tfm_layout *o)
{
    size_t sz[P_COUNT], *f[P_COUNT] = {&o->embed, &o->ln1, &o->wq, &o->bq, &o->wk, &o->bk,
                                       &o->wv, &o->bv, &o->q_norm, &o->k_norm, &o->wo, &o->ln2,
                                       &o->w_gate, &o->w_up, &o->w_down, &o->ln_f, &o->lm_head};
    family_sizes(c, sz);
    size_t off = 0;
    for (int i = 0; i < P_COUNT; i++) {
        *f[i] = sz[i] ? off : TFM_ABSENT;
        off += sz[i];
    }
    if (c->tie_word_embeddings) o->lm_head = o->embed;
    o->n = off;
}

void tfm_params_alloc(struct tfm_params *p, const struct tfm_config *c)
{
    struct tfm_layout o;
    tfm_layout_of(c, &o);
    memset(p, 0, sizeof *p);
    p->n = o.n;
    p->mem = xcalloc(p->n, sizeof(float));
    size_t off[P_COUNT] = {o.embed, o.ln1, o.wq, o.bq, o.wk, o.bk, o.wv, o.bv, o.q_norm,
                           o.k_norm, o.wo, o.ln2, o.w_gate, o.w_up, o.w_down, o.ln_f, o.lm_head};
    for (int i = 0; i < P_COUNT; i++)
        *family_ptr(p, i) = off[i] == TFM_ABSENT ? NULL : p->mem + off[i];
}

void tfm_params_free(struct tfm_params *p)
{
    if (!p) return;
    free(p->mem);
    memset(p, 0, sizeof *p);
}

void tfm_params_init_random(struct tfm_params *p, const struct tfm_config *c, uint64_t seed,
                            float std)
{
    size_t sz[P_COUNT];
    family_sizes(c, sz);
    for (int i = 0; i < P_COUNT; i++) {
        float *x = *family_ptr(p, i);
        if (!sz[i] || (i == P_HEAD && c->tie_word_embeddings)) continue;
        int is_norm = i == P_LN1 || i == P_LN2 || i == P_LNF || i == P_QN || i == P_KN;
        int is_bias = i == P_BQ || i == P_BK || i == P_BV;
        if (is_norm || is_bias) {
            for (size_t j = 0; j < sz[i]; j++) x[j] = is_norm ? 1.0f : 0.0f;
            continue;
        }
        /* One stream per (tensor family, block of 4096 floats): values do not depend
         * on anything but (seed, family, index), and streams stay short. */
        for (size_t j0 = 0; j0 < sz[i]; j0 += 4096) {
            struct rng r;
            rng_init(&r, seed, 0x746d66u /* "tfm" */, (uint64_t)i, (uint64_t)(j0 / 4096));
            size_t j1 = j0 + 4096 < sz[i] ? j0 + 4096 : sz[i];
            for (size_t j = j0; j < j1; j++) x[j] = (float)(std * rng_normal(&r));
        }
    }
}

/* Writes tensor n (if it fits) and returns n + 1. fmt has one %d (the layer) or none. */
static int add_tensor(struct tfm_tensor *out, int n, int max, float *data, int64_t d0,
                      int64_t d1, const char *fmt, int layer)
{
    if (n < max) {
        struct tfm_tensor *t = &out[n];
        snprintf(t->name, sizeof t->name, fmt, layer);
        t->data = data;
        t->ndim = d1 > 0 ? 2 : 1;
        t->dims[0] = d0;
        t->dims[1] = d1 > 0 ? d1 : 0;
    }
    return n + 1;
}

int tfm_tensors(const struct tfm_config *c, const struct tfm_params *p, struct tfm_tensor *out,
                int max)
{
    int64_t V = c->vocab_size, C = c->hidden_size, D = c->head_dim, F = c->intermediate_size;
    int64_t HD = (int64_t)c->n_heads * D, KD = (int64_t)c->n_kv_heads * D;
    int n = 0;
    n = add_tensor(out, n, max, p->embed, V, C, "model.embed_tokens.weight", 0);
    for (int l = 0; l < c->n_layers; l++) {
        /* layer l's slice of a family whose per-layer block is d0 x max(d1, 1) */
#define T(ptr, d0, d1, suffix)                                                          \
    n = add_tensor(out, n, max, (ptr) + (size_t)l * (size_t)((d0) * ((d1) > 0 ? (d1) : 1)), \
                   d0, d1, "model.layers.%d." suffix, l)
        T(p->ln1, C, 0, "input_layernorm.weight");
        T(p->wq, HD, C, "self_attn.q_proj.weight");
        if (p->bq) T(p->bq, HD, 0, "self_attn.q_proj.bias");
        T(p->wk, KD, C, "self_attn.k_proj.weight");
        if (p->bk) T(p->bk, KD, 0, "self_attn.k_proj.bias");
        T(p->wv, KD, C, "self_attn.v_proj.weight");
        if (p->bv) T(p->bv, KD, 0, "self_attn.v_proj.bias");
        if (p->q_norm) T(p->q_norm, D, 0, "self_attn.q_norm.weight");
        if (p->k_norm) T(p->k_norm, D, 0, "self_attn.k_norm.weight");
        T(p->wo, C, HD, "self_attn.o_proj.weight");
        T(p->ln2, C, 0, "post_attention_layernorm.weight");
        T(p->w_gate, F, C, "mlp.gate_proj.weight");
        T(p->w_up, F, C, "mlp.up_proj.weight");
        T(p->w_down, C, F, "mlp.down_proj.weight");
#undef T
    }
    n = add_tensor(out, n, max, p->ln_f, C, 0, "model.norm.weight", 0);
    if (!c->tie_word_embeddings)
        n = add_tensor(out, n, max, p->lm_head, V, C, "lm_head.weight", 0);
    /* like snprintf: the full count, of which only the first max were written */
    return n;
}
