/*
 * The training path's forward: state lifetime, batch checks, one layer's forward
 * over a packed batch, the trunk (embedding + layers) and tfm_forward (log-probs,
 * entropies, optional logits). Kernels are in cpu/ops.c; memory layout and the
 * activation-memory formula in tfm_state.h.
 *
 * Limits: one batch of at most max_tokens tokens; sequences of a packed batch never
 * see each other (attention runs per sequence slice, positions restart at 0). Logits
 * are formed logit_chunk rows at a time and only for the rows asked for.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/ops.h"
#include "libra/log.h"
#include "tfm_state.h"

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

struct tfm_state *tfm_state_create_opts(const struct tfm_config *c, int max_tokens, int recompute)
{
    char err[256];
    if (tfm_config_check(c, err, sizeof err) != 0) FATAL("tfm_state_create: %s", err);
    if (max_tokens <= 0) FATAL("tfm_state_create: max_tokens = %d must be positive", max_tokens);
    struct tfm_state *s = xcalloc(1, sizeof *s);
    s->c = *c;
    s->max_tokens = max_tokens;
    s->recompute = recompute;
    s->logit_chunk = default_logit_chunk(c->vocab_size, max_tokens);
    s->acts = xcalloc((size_t)c->n_layers, sizeof *s->acts);
    state_carve(s); /* count */
    s->mem = xcalloc(s->n_floats, sizeof(float));
    state_carve(s); /* carve */
    rope_table(s->rope, max_tokens, c->head_dim, c->rope_theta);
    s->pos = xcalloc((size_t)max_tokens, sizeof(int));
    s->rows = xcalloc((size_t)max_tokens, sizeof(int));
    s->tgt_c = xcalloc((size_t)s->logit_chunk, sizeof(int32_t));
    return s;
}

void tfm_state_free(struct tfm_state *s)
{
    if (!s) return;
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
           (size_t)s->logit_chunk * sizeof(int32_t) + (size_t)s->c.n_layers * sizeof *s->acts;
}

void tfm_state_set_logit_chunk(struct tfm_state *s, int chunk)
{
    int cap = default_logit_chunk(s->c.vocab_size, s->max_tokens);
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
        c->rope_theta != sc->rope_theta)
        FATAL("tfm: the state was created for another model (hidden %d vs %d, layers %d vs "
              "%d, vocab %d vs %d, rope_theta %g vs %g); create one state per model",
              sc->hidden_size, c->hidden_size, sc->n_layers, c->n_layers, sc->vocab_size,
              c->vocab_size, (double)sc->rope_theta, (double)c->rope_theta);
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
        if (b->tokens[t] < 0 || b->tokens[t] >= c->vocab_size)
            FATAL("tfm batch: tokens[%d] = %d outside [0, %d)", t, b->tokens[t], c->vocab_size);
        if (b->targets[t] < -1 || b->targets[t] >= c->vocab_size)
            FATAL("tfm batch: targets[%d] = %d outside [-1, %d)", t, b->targets[t],
                  c->vocab_size);
    }
    return (int)T;
}

float tfm_token_weight(const struct tfm_batch *b, int t)
{
    if (b->targets[t] < 0) return 0.0f;
    return b->weights ? b->weights[t] : 1.0f;
}

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

void tfm_layer_forward(const struct tfm_config *c, const struct tfm_params *p,
                       struct tfm_state *s, const struct tfm_batch *b, int l, int T,
                       float *x_out)
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
    for (size_t i = 0; i < TC; i++) a->xmid[i] += a->xin[i];

    rmsnorm_forward(a->h2, a->xmid, w.ln2, T, C, eps);
    linear_forward(a->gate, a->h2, w.w_gate, NULL, T, C, F);
    linear_forward(a->up, a->h2, w.w_up, NULL, T, C, F);
    swiglu_forward(s->act, a->sig, a->gate, a->up, (int64_t)T * F);
    linear_forward(x_out, s->act, w.w_down, NULL, T, F, C);
    for (size_t i = 0; i < TC; i++) x_out[i] += a->xmid[i];
}

void tfm_trunk_forward(const struct tfm_config *c, const struct tfm_params *p,
                       struct tfm_state *s, const struct tfm_batch *b, int T)
{
    int L = c->n_layers;
    embed_forward(s->acts[0].xin, p->embed, b->tokens, T, c->hidden_size);
    for (int l = 0; l < L; l++)
        tfm_layer_forward(c, p, s, b, l, T, l + 1 < L ? s->acts[l + 1].xin : s->x);
}

/* ---------------------------------------------------------------- forward */

double tfm_forward(const struct tfm_config *c, const struct tfm_params *p, struct tfm_state *s,
                   const struct tfm_batch *b, float *logprob, float *entropy, float *logits)
{
    int T = tfm_batch_prepare(c, s, b);
    int C = c->hidden_size, V = c->vocab_size;
    tfm_trunk_forward(c, p, s, b, T);
    rmsnorm_forward(s->hf, s->x, p->ln_f, T, C, c->rms_norm_eps);

    /* rows whose logits are needed: all of them for entropies or logits, else the
     * scored ones */
    int all = entropy != NULL || logits != NULL, n_rows = 0;
    for (int t = 0; t < T; t++)
        if (all || b->targets[t] >= 0) s->rows[n_rows++] = t;
    if (logprob) memset(logprob, 0, (size_t)T * sizeof(float));

    double total = 0;
    for (int r0 = 0; r0 < n_rows; r0 += s->logit_chunk) {
        int n = n_rows - r0 < s->logit_chunk ? n_rows - r0 : s->logit_chunk;
        const int *rows = s->rows + r0;
        tfm_gather_chunk(s, b, rows, n);
        linear_forward(s->logits, s->hc, p->lm_head, NULL, n, C, V);
        logsoftmax_forward(s->lp_c, entropy ? s->dlp_c : NULL, s->logits, s->tgt_c, n, V,
                           b->temperature);
        for (int i = 0; i < n; i++) {
            int t = rows[i];
            total += (double)tfm_token_weight(b, t) * s->lp_c[i];
            if (logprob) logprob[t] = s->lp_c[i];
            if (entropy) entropy[t] = s->dlp_c[i];
            if (logits)
                memcpy(logits + (size_t)t * V, s->logits + (size_t)i * V,
                       (size_t)V * sizeof(float));
        }
    }
    return total;
}
