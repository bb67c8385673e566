/*
 * The training path's state (tfm_state.h): lifetime and carving of the one float
 * allocation, the single-rank and tensor-parallel constructors, logit chunking, the
 * per-layer weight views and the batch checks shared by tfm_forward.c, tfm_head.c and
 * tfm_backward.c. Glossary as in include/libra/tfm.h.
 *
 * A TP state (tfm_state_create_tp) is the single-rank state of the shard's shapes
 * (tp->local) plus the row statistics of the distributed log-softmax; its token checks
 * use the full vocabulary (batches hold global ids), and its logit chunk is the same
 * on every rank of the group (a function of ceil(V/t), not of this rank's Vl), so that
 * the ranks' per-chunk all-reduces line up.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libra/cpu_ops.h"
#include "libra/log.h"
#include "rope.h"
#include "tfm_state.h"
#include "tp_ops.h"

/* ---------------------------------------------------------------- state */

/* Rows of logits per chunk: 8 Mi floats (32 MiB) per logits buffer -- two are held,
 * logits and their gradient -- and at most 256 rows. */
static int default_logit_chunk(int V, int max_tokens)
{
    int n = (int)((8u << 20) / (unsigned)V);
    n = n < 1 ? 1 : n > 256 ? 256 : n;
    return n < max_tokens ? n : max_tokens;
}

/* Carves the float block (or, with s->mem NULL, only counts it into s->n_floats). */
static void state_carve(struct tfm_state *s)
{
    const struct tfm_config *c = &s->c;
    size_t B = (size_t)s->max_tokens, Nc = (size_t)s->logit_chunk, C = (size_t)c->hidden_size;
    size_t V = (size_t)c->vocab_size, F = (size_t)c->intermediate_size, D = (size_t)c->head_dim;
    size_t HD = (size_t)c->n_heads * D, KD = (size_t)c->n_kv_heads * D;
    size_t off = 0;
    float *base = s->mem;
#define CARVE(field, count)                                   \
    do {                                                      \
        (field) = base ? base + off : NULL;                   \
        off += (count);                                       \
    } while (0)
    for (int l = 0; l < c->n_layers; l++) {
        struct tfm_acts *a = &s->acts[l];
        if (s->recompute && l > 0) {
            /* only the residual stream is per layer; the internals are layer 0's
             * buffers, refilled by recomputing the layer in backward */
            float *xin;
            CARVE(xin, B * C);
            *a = s->acts[0];
            a->xin = xin;
            continue;
        }
        CARVE(a->xin, B * C);
        CARVE(a->xmid, B * C);
        CARVE(a->h1, B * C);
        CARVE(a->h2, B * C);
        CARVE(a->q, B * HD);
        CARVE(a->k, B * KD);
        CARVE(a->v, B * KD);
        CARVE(a->att, B * HD);
        CARVE(a->gate, B * F);
        CARVE(a->up, B * F);
        CARVE(a->sig, B * F);
        if (c->qk_norm) {
            CARVE(a->qlin, B * HD);
            CARVE(a->klin, B * KD);
        } else {
            a->qlin = a->klin = NULL;
        }
    }
    CARVE(s->rope, B * D);
    CARVE(s->x, B * C);
    CARVE(s->hf, B * C);
    CARVE(s->act, B * F);
    CARVE(s->dx, B * C);
    CARVE(s->dh, B * C);
    CARVE(s->dq, B * HD);
    CARVE(s->dk, B * KD);
    CARVE(s->dv, B * KD);
    CARVE(s->datt, B * HD);
    CARVE(s->dgate, B * F);
    CARVE(s->dup, B * F);
    CARVE(s->dact, B * F);
    if (c->qk_norm) {
        CARVE(s->dqlin, B * HD);
        CARVE(s->dklin, B * KD);
    } else {
        s->dqlin = s->dklin = NULL;
    }
    CARVE(s->hc, Nc * C);
    CARVE(s->dhc, Nc * C);
    CARVE(s->logits, Nc * V);
    CARVE(s->dlogits, Nc * V);
    CARVE(s->lp_c, Nc);
    CARVE(s->dlp_c, Nc);
    CARVE(s->attn_scratch, attn_scratch_floats((int)B, (int)B, c->n_heads, c->n_kv_heads,
                                               c->head_dim));
#undef CARVE
    s->n_floats = off;
}

struct tfm_state *tfm_state_create(const struct tfm_config *c, int max_tokens)
{
    /* Keep every layer's internals unless that would exceed the budget. */
    struct tfm_state *s = tfm_state_create_opts(c, max_tokens, 0);
    if (tfm_state_bytes(s) <= TFM_KEEP_ACTIVATIONS_MAX_BYTES) return s;
    tfm_state_free(s);
    return tfm_state_create_opts(c, max_tokens, 1);
}

/* The state of model c (the whole model, or a TP shard's shapes): token ids are
 * checked against vocab_full, logit chunks sized for rows of chunk_vocab floats;
 * with_tp_stats adds the distributed log-softmax's row statistics. */
static struct tfm_state *state_new(const struct tfm_config *c, int max_tokens, int recompute,
                                   int vocab_full, int chunk_vocab, int with_tp_stats)
{
    char err[256];
    if (tfm_config_check(c, err, sizeof err) != 0) FATAL("tfm_state_create: %s", err);
    if (max_tokens <= 0) FATAL("tfm_state_create: max_tokens = %d must be positive", max_tokens);
    struct tfm_state *s = xcalloc(1, sizeof *s);
    s->c = *c;
    s->max_tokens = max_tokens;
    s->recompute = recompute;
    s->vocab_full = vocab_full;
    s->chunk_vocab = chunk_vocab;
    s->logit_chunk = default_logit_chunk(chunk_vocab, max_tokens);
    s->acts = xcalloc((size_t)c->n_layers, sizeof *s->acts);
    state_carve(s); /* count */
    s->mem = xcalloc(s->n_floats, sizeof(float));
    state_carve(s); /* carve */
    rope_table(s->rope, max_tokens, c);
    s->pos = xcalloc((size_t)max_tokens, sizeof(int));
    s->rows = xcalloc((size_t)max_tokens, sizeof(int));
    s->tgt_c = xcalloc((size_t)s->logit_chunk, sizeof(int32_t));
    if (with_tp_stats) {
        /* sized for the largest chunk tfm_state_set_logit_chunk allows */
        size_t Nc = (size_t)s->logit_chunk;
        s->tp_mx = xcalloc(Nc, sizeof(float));
        s->tp_lsum = xcalloc(5 * Nc, sizeof(double));
        s->tp_ent = s->tp_lsum + Nc;
        s->tp_red = s->tp_ent + Nc; /* 3 Nc */
    }
    return s;
}

struct tfm_state *tfm_state_create_opts(const struct tfm_config *c, int max_tokens, int recompute)
{
    return state_new(c, max_tokens, recompute, c->vocab_size, c->vocab_size, 0);
}

struct tfm_state *tfm_state_create_tp_opts(const struct tfm_tp *tp, int max_tokens,
                                           int recompute)
{
    if (!tp_parallel(tp)) return tfm_state_create_opts(&tp->local, max_tokens, recompute);
    /* the largest vocabulary slice of the balanced split: the same on every rank */
    int vmax = (tp->full.vocab_size + tp->t - 1) / tp->t;
    return state_new(&tp->local, max_tokens, recompute, tp->full.vocab_size, vmax, 1);
}

struct tfm_state *tfm_state_create_tp(const struct tfm_tp *tp, int max_tokens)
{
    if (!tp_parallel(tp)) return tfm_state_create(&tp->local, max_tokens);
    struct tfm_state *s = tfm_state_create_tp_opts(tp, max_tokens, 0);
    /* Keep or recompute must be the same on every rank (recompute re-runs the layer
     * forwards, and their all-reduces, in backward): judge by the rank with the
     * largest vocabulary slice, the only shape that differs between ranks. */
    size_t extra = 2 * (size_t)s->logit_chunk *
                   (size_t)(s->chunk_vocab - tp->local.vocab_size) * sizeof(float);
    if (tfm_state_bytes(s) + extra <= TFM_KEEP_ACTIVATIONS_MAX_BYTES) return s;
    tfm_state_free(s);
    return tfm_state_create_tp_opts(tp, max_tokens, 1);
}

void tfm_state_free(struct tfm_state *s)
{
    if (!s) return;
    free(s->tp_lsum);
    free(s->tp_mx);
    free(s->tgt_c);
    free(s->rows);
    free(s->pos);
    free(s->mem);
    free(s->acts);
    free(s);
}

int tfm_state_recomputes(const struct tfm_state *s) { return s->recompute; }

size_t tfm_state_bytes(const struct tfm_state *s)
{
    return s->n_floats * sizeof(float) + 2 * (size_t)s->max_tokens * sizeof(int) +
           (size_t)s->logit_chunk * sizeof(int32_t) + (size_t)s->c.n_layers * sizeof *s->acts +
           (s->tp_mx ? (size_t)s->logit_chunk * (sizeof(float) + 5 * sizeof(double)) : 0);
}

void tfm_state_set_logit_chunk(struct tfm_state *s, int chunk)
{
    int cap = default_logit_chunk(s->chunk_vocab, s->max_tokens);
    s->logit_chunk = chunk < 1 ? 1 : chunk > cap ? cap : chunk;
}

void tfm_gather_chunk(struct tfm_state *s, const struct tfm_batch *b, const int *rows, int n)
{
    size_t C = (size_t)s->c.hidden_size;
    for (int i = 0; i < n; i++) {
        memcpy(s->hc + (size_t)i * C, s->hf + (size_t)rows[i] * C, C * sizeof(float));
        s->tgt_c[i] = b->targets[rows[i]];
    }
}

/* ---------------------------------------------------------------- views */

struct tfm_layer tfm_layer_view(const struct tfm_config *c, const struct tfm_params *p, int l)
{
    size_t C = (size_t)c->hidden_size, D = (size_t)c->head_dim, F = (size_t)c->intermediate_size;
    size_t HD = (size_t)c->n_heads * D, KD = (size_t)c->n_kv_heads * D, L = (size_t)l;
    return (struct tfm_layer){
        .ln1 = p->ln1 + L * C,
        .wq = p->wq + L * HD * C,
        .bq = p->bq ? p->bq + L * HD : NULL,
        .wk = p->wk + L * KD * C,
        .bk = p->bk ? p->bk + L * KD : NULL,
        .wv = p->wv + L * KD * C,
        .bv = p->bv ? p->bv + L * KD : NULL,
        .q_norm = p->q_norm ? p->q_norm + L * D : NULL,
        .k_norm = p->k_norm ? p->k_norm + L * D : NULL,
        .wo = p->wo + L * C * HD,
        .ln2 = p->ln2 + L * C,
        .w_gate = p->w_gate + L * F * C,
        .w_up = p->w_up + L * F * C,
        .w_down = p->w_down + L * C * F,
    };
}

struct tfm_layer_grad tfm_layer_grad_view(const struct tfm_config *c, struct tfm_params *g,
                                          int l)
{
    struct tfm_layer v = tfm_layer_view(c, g, l);
    /* the views point into g's own (writable) block */
    return (struct tfm_layer_grad){
        (float *)v.ln1,    (float *)v.wq,     (float *)v.bq,     (float *)v.wk,
        (float *)v.bk,     (float *)v.wv,     (float *)v.bv,     (float *)v.q_norm,
        (float *)v.k_norm, (float *)v.wo,     (float *)v.ln2,    (float *)v.w_gate,
        (float *)v.w_up,   (float *)v.w_down};
}

/* ---------------------------------------------------------------- batch */

int tfm_batch_prepare(const struct tfm_config *c, struct tfm_state *s,
                      const struct tfm_batch *b)
{
    const struct tfm_config *sc = &s->c;
    if (c->vocab_size != sc->vocab_size || c->hidden_size != sc->hidden_size ||
        c->n_layers != sc->n_layers || c->n_heads != sc->n_heads ||
        c->n_kv_heads != sc->n_kv_heads || c->head_dim != sc->head_dim ||
        c->intermediate_size != sc->intermediate_size || c->qk_norm != sc->qk_norm ||
        !rope_same(c, sc))
        FATAL("tfm: the state was created for another model (hidden %d vs %d, layers %d vs "
              "%d, vocab %d vs %d, rope_theta %g vs %g, rope_type %s vs %s, rope_factor %g vs "
              "%g, or another rope_scaling field); create one state per model",
              sc->hidden_size, c->hidden_size, sc->n_layers, c->n_layers, sc->vocab_size,
              c->vocab_size, (double)sc->rope_theta, (double)c->rope_theta,
              tfm_rope_type_name(sc->rope_type), tfm_rope_type_name(c->rope_type),
              (double)sc->rope_factor, (double)c->rope_factor);
    if (b->n_seq < 0) FATAL("tfm batch: n_seq = %d is negative", b->n_seq);
    if (!(b->temperature > 0) || !isfinite(b->temperature))
        FATAL("tfm batch: temperature = %g must be positive and finite", (double)b->temperature);
    int64_t T = 0;
    for (int i = 0; i < b->n_seq; i++) {
        if (b->seq_len[i] < 0) FATAL("tfm batch: seq_len[%d] = %d is negative", i, b->seq_len[i]);
        T += b->seq_len[i];
    }
    if (T > s->max_tokens)
        FATAL("tfm batch: %lld tokens exceed the state's max_tokens = %d (create the state "
              "with a larger max_tokens or split the batch)", (long long)T, s->max_tokens);
    int t = 0;
    for (int i = 0; i < b->n_seq; i++)
        for (int j = 0; j < b->seq_len[i]; j++) s->pos[t++] = j;
    for (t = 0; t < (int)T; t++) {
        /* global ids: a TP shard's c holds only its vocabulary slice */
        if (b->tokens[t] < 0 || b->tokens[t] >= s->vocab_full)
            FATAL("tfm batch: tokens[%d] = %d outside [0, %d)", t, b->tokens[t], s->vocab_full);
        if (b->targets[t] < -1 || b->targets[t] >= s->vocab_full)
            FATAL("tfm batch: targets[%d] = %d outside [-1, %d)", t, b->targets[t],
                  s->vocab_full);
    }
    return (int)T;
}

float tfm_token_weight(const struct tfm_batch *b, int t)
{
    if (b->targets[t] < 0) return 0.0f;
    return b->weights ? b->weights[t] : 1.0f;
}

