/*
 * The training path on a GPU (include/libra/gpu_train.h): the order of operations of
 * src/model/tfm_forward.c, tfm_head.c and tfm_backward.c, with the CUDA module's
 * kernels. Layer l keeps, for the backward: its input xin, the residual xmid, the
 * normed inputs of its projections in bf16 (h1b, h2b: the matrix products' operands),
 * q / k after rotary (and before the q/k norm: qlin, klin), v, the attention output
 * (and its rows' log-sum-exps), gate and up. The head forms logits
 * `chunk` rows at a time. Attention runs on the tensor cores (flash_fwd / flash_bwd)
 * when the head dimension allows, else on the float32 kernels (attn_fwd / attn_bwd).
 *
 * Tensor parallelism (gpu_trainer_create_tp): the shard's arithmetic of
 * src/model/tfm_tp.c -- the residual stream replicated and summed over the group after
 * the embedding and each row-parallel product; dJ/dh summed before each norm's
 * backward; the output head vocabulary-parallel (vocab_max / vocab_sums / their
 * backward around a max and a sum all-reduce, the log-probs formed on the host with
 * tp_logsoftmax_forward's formulas). The gradients it leaves are tfm_backward_tp's:
 * q/k norms and replicated kv heads partial until tfm_tp_reduce_grads.
 *
 * Device memory: the parameters three times in float32 (master, gradient; the AdamW
 * moments twice) and once in bf16; per layer T x (3C + 2HD + 3KD (+ HD + KD) + 2F + H)
 * floats and 2 T C bf16 (recomputing: T C floats per layer and that once); scratch
 * for one layer's gradients and a logit chunk.
 */
#include "libra/gpu_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libra/errmsg.h"
#include "libra/gpu_model.h"
#include "libra/log.h"

#define TRAIN_LOGIT_CHUNK 256 /* rows of logits formed at a time */

struct layer_acts {
    float *xin, *xmid, *qlin, *klin, *q, *k, *v, *att, *gate, *up;
    float *lse; /* (T, H): the tensor-core attention's row log-sum-exps */
    uint16_t *h1b, *h2b;
};

struct gpu_trainer {
    const struct cuda_api *api;
    struct tfm_config c;    /* this rank's shard (the whole model at TP 1) */
    /* tensor parallelism: rank tp_rank of tp_t; vocabulary rows [v0, v0 + c.vocab_size)
     * of V_full; comm the group (NULL at TP 1) and the head's vocabulary-parallel
     * statistics of a logit chunk: d_sums (ch, 3) on the device, h_sums (ch, 3), h_lsum,
     * h_clp, h_cent (ch each: log-sums, log-probs, entropies) on the host; d_mx, d_lsum
     * (ch each) the chunk's row maxima and log-sums at any TP, for its backward */
    int tp_t, tp_rank, v0, V_full;
    int kv_replicated;      /* the full model has fewer kv heads than tp_t */
    struct gpu_comm *comm, *kv_comm; /* the group; the kv group (replicated kv heads) */
    float *d_mx;
    double *d_sums, *d_lsum, *h_sums, *h_lsum;
    float *h_clp, *h_cent;
    int32_t *h_tok, *h_tgt;   /* host (T): the batch in this rank's vocabulary rows */
    struct tfm_layout at;
    struct adamw_config ac;
    int64_t step;
    int max_tokens;
    int flash;              /* attention on the tensor cores (flash_fwd / flash_bwd) */
    float *p, *g, *m, *v;   /* device (n): master weights, gradients, AdamW moments */
    uint16_t *w;            /* device (n): the bf16 working copy */
    int w_lent;             /* side-stream work up to its last mark reads w
                               (gpu_trainer_lend_weights16) */
    struct layer_acts *acts; /* (L) */
    /* Recomputation (too little memory to keep every layer's internals): each layer
     * keeps only its input xin; acts[l]'s other buffers are one shared set (work),
     * which the backward refills by running layer l's forward again. */
    int recompute;
    struct layer_acts work;
    float *x, *rope, *rstd, *stats;
    float *dx, *dh, *dact, *datt, *dq, *dk, *dv, *dqlin, *dklin;
    uint16_t *dgate16, *dup16; /* (T, F): SwiGLU's backward, the gate / up operands */
    float *logits, *dlogits, *lp, *dlp, *ent;
    /* the entropy term: per-token weights e_t (0 without a target) and the entropies
     * H_t in double, on the device and the host; has_ew: the batch has some e_t != 0 */
    float *d_ew, *h_ew;
    double *d_H, *h_H;
    int has_ew;
    uint16_t *ab, *hfb;     /* bf16 operands (SwiGLU's output among them): (T, max(C, HD,
                               F)) and (T, C) */
    uint16_t *dyb;          /* bf16 output gradients: (max(T, chunk), max(C, HD, KD, F, V)) */
    int32_t *d_tok, *d_tgt, *d_pos;
    int *pos;               /* host (T) */
    int32_t *d_start, *h_start; /* (T + 1) first rows of the batch's non-empty sequences */
    struct cuda_seqs seqs;  /* the batch for flash_fwd / flash_bwd */
    float *h_lp;            /* host (T) */
    size_t bytes;
};

static void *dev(struct gpu_trainer *t, size_t bytes)
{
    void *p = NULL;
    GPU_CHECK(t->api, t->api->alloc(&p, bytes));
    t->bytes += bytes;
    return p;
}

static size_t widest(const struct tfm_config *c, int with_vocab)
{
    size_t C = (size_t)c->hidden_size, HD = (size_t)c->n_heads * c->head_dim;
    size_t F = (size_t)c->intermediate_size, V = (size_t)c->vocab_size, w = C > HD ? C : HD;
    w = w > F ? w : F;
    return with_vocab && V > w ? V : w;
}

/* Bytes gpu_trainer_create allocates (checked against the free memory first); with
 * recompute one layer's internals and every layer's input. */
static size_t trainer_bytes(const struct tfm_config *c, size_t n, size_t T, int recompute)
{
    size_t C = (size_t)c->hidden_size, HD = (size_t)c->n_heads * c->head_dim;
    size_t KD = (size_t)c->n_kv_heads * c->head_dim, F = (size_t)c->intermediate_size;
    size_t V = (size_t)c->vocab_size, L = (size_t)c->n_layers, ch = TRAIN_LOGIT_CHUNK;
    size_t qk = c->qk_norm ? HD + KD : 0;
    size_t layer = T * (3 * C + 2 * HD + 3 * KD + qk + 2 * F + (size_t)c->n_heads) * 4 +
                   2 * T * C * 2;
    size_t rows = T > ch ? T : ch;
    size_t scratch = T * (3 * C + 3 * HD + 2 * KD + qk + 2 * F + 2 * (size_t)c->n_heads + 4) * 4 +
                     2 * ch * V * 4 + T * widest(c, 0) * 2 + T * C * 2 +
                     rows * widest(c, 1) * 2 + T * (size_t)c->head_dim * 4;
    size_t acts = recompute ? layer + (L - 1) * T * C * 4 : L * layer;
    return 4 * n * 4 + n * 2 + acts + scratch;
}

/* One layer's internals, every buffer but its input xin. */
static void alloc_internals(struct gpu_trainer *t, struct layer_acts *a, size_t T)
{
    const struct tfm_config *c = &t->c;
    size_t C = (size_t)c->hidden_size, HD = (size_t)c->n_heads * c->head_dim;
    size_t KD = (size_t)c->n_kv_heads * c->head_dim, F = (size_t)c->intermediate_size;
    size_t f = sizeof(float);
    a->xmid = dev(t, T * C * f);
    a->q = dev(t, T * HD * f);
    a->k = dev(t, T * KD * f);
    a->v = dev(t, T * KD * f);
    a->att = dev(t, T * HD * f);
    a->lse = dev(t, T * (size_t)c->n_heads * f);
    a->gate = dev(t, T * F * f);
    a->up = dev(t, T * F * f);
    a->h1b = dev(t, T * C * 2);
    a->h2b = dev(t, T * C * 2);
    if (c->qk_norm) {
        a->qlin = dev(t, T * HD * f);
        a->klin = dev(t, T * KD * f);
    }
}

static void free_internals(const struct gpu_trainer *t, struct layer_acts *a)
{
    void *b[] = {a->xmid, a->qlin, a->klin, a->q, a->k, a->v, a->att, a->lse,
                 a->gate, a->up, a->h1b, a->h2b};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) GPU_CHECK(t->api, t->api->free(b[i]));
}

/* Whether to recompute: LIBRA_GPU_RECOMPUTE=1 or 0 decides; else only when keeping
 * every layer's internals would not fit in free bytes. */
static int want_recompute(const struct tfm_config *c, size_t n, size_t T, size_t free_b)
{
    const char *e = getenv("LIBRA_GPU_RECOMPUTE");
    if (e && (strcmp(e, "0") == 0 || strcmp(e, "1") == 0)) return e[0] == '1';
    return trainer_bytes(c, n, T, 0) > free_b;
}

struct gpu_trainer *gpu_trainer_create(const struct cuda_api *api, const struct tfm_config *c,
                                       const struct tfm_params *p, int max_tokens,
                                       const struct adamw_config *ac, char *err, size_t errlen)
{
    if (tfm_config_check(c, err, errlen)) return NULL;
    return gpu_trainer_create_tp(api, NULL, NULL, c, p, max_tokens, ac, err, errlen);
}

/* Allocates the TP-only buffers (t->comm set). */
static void tp_buffers(struct gpu_trainer *t)
{
    size_t ch = TRAIN_LOGIT_CHUNK, T = (size_t)t->max_tokens;
    t->d_sums = dev(t, 3 * ch * sizeof(double));
    t->h_sums = xmalloc(3 * ch * sizeof *t->h_sums);
    t->h_lsum = xmalloc(ch * sizeof *t->h_lsum);
    t->h_clp = xmalloc(ch * sizeof *t->h_clp);
    t->h_cent = xmalloc(ch * sizeof *t->h_cent);
    t->h_tok = xmalloc(T * sizeof *t->h_tok);
    t->h_tgt = xmalloc(T * sizeof *t->h_tgt);
}

struct gpu_trainer *gpu_trainer_create_tp(const struct cuda_api *api, const struct tfm_tp *tp,
                                          struct gpu_comm *comm, const struct tfm_config *c,
                                          const struct tfm_params *p, int max_tokens,
                                          const struct adamw_config *ac, char *err,
                                          size_t errlen)
{
    if (tp) {
        c = &tp->local;
        if (tp->t > 1 && (!comm || comm->size != tp->t || comm->rank != tp->rank)) {
            errmsg_set(err, errlen, "gpu trainer: TP %d rank %d needs a group of %d ranks in "
                       "which it is rank %d (given %d, rank %d)", tp->t, tp->rank, tp->t,
                       tp->rank, comm ? comm->size : 0, comm ? comm->rank : -1);
            return NULL;
        }
    }
    if (max_tokens < 1) {
        errmsg_set(err, errlen, "gpu trainer: max_tokens %d must be positive", max_tokens);
        return NULL;
    }
    struct tfm_layout at;
    tfm_layout_of(c, &at);
    if (p->n != at.n) FATAL("gpu_trainer_create: %zu parameters for a model of %zu", p->n, at.n);
    size_t free_b = 0, total_b = 0;
    GPU_CHECK(api, api->mem_info(&free_b, &total_b));
    int recompute = want_recompute(c, at.n, (size_t)max_tokens, free_b);
    size_t need = trainer_bytes(c, at.n, (size_t)max_tokens, recompute);
    if (need > free_b) {
        errmsg_set(err, errlen, "gpu trainer: %.2f GB of GPU memory needed for the model, its "
                   "optimizer and %d tokens of activations%s; %.2f GB free", need / 1e9,
                   max_tokens, recompute ? " (recomputed layer by layer)" : "", free_b / 1e9);
        return NULL;
    }
    struct gpu_trainer *t = xcalloc(1, sizeof *t);
    t->api = api;
    t->c = *c;
    t->at = at;
    t->ac = *ac;
    t->max_tokens = max_tokens;
    t->flash = cuda_flash_supports(c->head_dim);
    t->tp_t = tp ? tp->t : 1;
    t->tp_rank = tp ? tp->rank : 0;
    t->v0 = tp ? tp->v0 : 0;
    t->V_full = tp ? tp->full.vocab_size : c->vocab_size;
    t->kv_replicated = tp && tp->full.n_kv_heads < tp->t;
    t->comm = t->tp_t > 1 ? comm : NULL;
    if (t->comm) tp_buffers(t);
    t->d_mx = dev(t, TRAIN_LOGIT_CHUNK * sizeof(float)); /* a logit chunk's row statistics */
    t->d_lsum = dev(t, TRAIN_LOGIT_CHUNK * sizeof(double));
    size_t n = at.n, T = (size_t)max_tokens, C = (size_t)c->hidden_size;
    size_t HD = (size_t)c->n_heads * c->head_dim, KD = (size_t)c->n_kv_heads * c->head_dim;
    size_t F = (size_t)c->intermediate_size, V = (size_t)c->vocab_size, f = sizeof(float);
    size_t ch = TRAIN_LOGIT_CHUNK, rows = T > ch ? T : ch;
    t->p = dev(t, n * f);
    t->g = dev(t, n * f);
    t->m = dev(t, n * f);
    t->v = dev(t, n * f);
    t->w = dev(t, n * sizeof(uint16_t));
    GPU_CHECK(api, api->to_device(t->p, p->mem, n * f));
    float *zero = xcalloc(n < ((size_t)1 << 22) ? n : ((size_t)1 << 22), f);
    for (size_t i0 = 0; i0 < n; i0 += (size_t)1 << 22) {
        size_t k = n - i0 < ((size_t)1 << 22) ? n - i0 : ((size_t)1 << 22);
        GPU_CHECK(api, api->to_device(t->m + i0, zero, k * f));
        GPU_CHECK(api, api->to_device(t->v + i0, zero, k * f));
        GPU_CHECK(api, api->to_device(t->g + i0, zero, k * f));
    }
    free(zero);
    GPU_CHECK(api, api->f32_to_bf16(t->w, t->p, (int64_t)n));
    t->recompute = recompute;
    t->acts = xcalloc((size_t)c->n_layers, sizeof *t->acts);
    if (recompute) alloc_internals(t, &t->work, T);
    for (int l = 0; l < c->n_layers; l++) {
        struct layer_acts *a = &t->acts[l];
        if (recompute)
            *a = t->work; /* the shared internals */
        else
            alloc_internals(t, a, T);
        a->xin = dev(t, T * C * f);
    }
    t->x = dev(t, T * C * f);
    t->dx = dev(t, T * C * f);
    t->dh = dev(t, T * C * f);
    t->dact = dev(t, T * F * f);
    t->dgate16 = dev(t, T * F * sizeof(uint16_t));
    t->dup16 = dev(t, T * F * sizeof(uint16_t));
    t->datt = dev(t, T * HD * f);
    t->dq = dev(t, T * HD * f);
    t->dk = dev(t, T * KD * f);
    t->dv = dev(t, T * KD * f);
    if (c->qk_norm) {
        t->dqlin = dev(t, T * HD * f);
        t->dklin = dev(t, T * KD * f);
    }
    t->rstd = dev(t, T * (size_t)c->n_heads * f);
    t->stats = dev(t, 2 * T * (size_t)c->n_heads * f);
    t->logits = dev(t, ch * V * f);
    t->dlogits = dev(t, ch * V * f);
    t->lp = dev(t, T * f);
    t->dlp = dev(t, T * f);
    t->ent = dev(t, T * f);
    t->d_ew = dev(t, T * f);
    t->d_H = dev(t, T * sizeof(double));
    t->h_ew = xmalloc(T * sizeof *t->h_ew);
    t->h_H = xmalloc(T * sizeof *t->h_H);
    t->ab = dev(t, T * widest(c, 0) * 2);
    t->hfb = dev(t, T * C * 2);
    t->dyb = dev(t, rows * widest(c, 1) * 2);
    t->d_tok = dev(t, T * sizeof(int32_t));
    t->d_tgt = dev(t, T * sizeof(int32_t));
    t->d_pos = dev(t, T * sizeof(int32_t));
    t->d_start = dev(t, (T + 1) * sizeof(int32_t));
    t->h_start = xmalloc((T + 1) * sizeof *t->h_start);
    float *rope = xmalloc(T * (size_t)c->head_dim * f);
    rope_table(rope, max_tokens, c);
    t->rope = dev(t, T * (size_t)c->head_dim * f);
    GPU_CHECK(api, api->to_device(t->rope, rope, T * (size_t)c->head_dim * f));
    free(rope);
    t->pos = xmalloc(T * sizeof *t->pos);
    t->h_lp = xmalloc(T * sizeof *t->h_lp);
    return t;
}

int gpu_trainer_recomputes(const struct gpu_trainer *t) { return t->recompute; }

int gpu_trainer_set_flash(struct gpu_trainer *t, int on)
{
    int was = t->flash;
    t->flash = on && cuda_flash_supports(t->c.head_dim);
    return was;
}

/* Before w is written again (or freed): the side-stream work that reads it is done and
 * the module's stream waits for it. The host waits too -- the step's end comes with a
 * sync anyway -- and the host module's side stream wants its mark seen done first. */
static void w_back(struct gpu_trainer *t)
{
    if (!t->w_lent) return;
    gpu_side_wait(t->api);
    GPU_CHECK(t->api, t->api->side_join());
    t->w_lent = 0;
}

void gpu_trainer_lend_weights16(struct gpu_trainer *t) { t->w_lent = 1; }

void gpu_trainer_free(struct gpu_trainer *t)
{
    if (!t) return;
    w_back(t);
    const struct cuda_api *api = t->api;
    for (int l = 0; l < t->c.n_layers; l++) {
        GPU_CHECK(api, api->free(t->acts[l].xin));
        if (!t->recompute) free_internals(t, &t->acts[l]);
    }
    if (t->recompute) free_internals(t, &t->work);
    void *b[] = {t->p, t->g, t->m, t->v, t->w, t->x, t->rope, t->rstd, t->stats,
                 t->dx, t->dh, t->dact, t->dgate16, t->dup16, t->datt, t->dq, t->dk, t->dv,
                 t->dqlin, t->dklin, t->logits, t->dlogits, t->lp, t->dlp, t->ab,
                 t->hfb, t->dyb, t->d_tok, t->d_tgt, t->d_pos, t->d_start, t->ent, t->d_mx, t->d_sums,
                 t->d_lsum, t->d_ew, t->d_H};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) GPU_CHECK(api, api->free(b[i]));
    free(t->h_sums);
    free(t->h_lsum);
    free(t->h_clp);
    free(t->h_cent);
    free(t->h_ew);
    free(t->h_H);
    free(t->h_tok);
    free(t->h_tgt);
    free(t->acts);
    free(t->pos);
    free(t->h_start);
    free(t->h_lp);
    free(t);
}

size_t gpu_trainer_bytes(const struct gpu_trainer *t) { return t->bytes; }

/* ---------------------------------------------------------------- views */

/* Layer l's slice of the tensor at offset `at` (per_layer elements) in a block. */
static size_t at_layer(size_t at, size_t per_layer, int l)
{
    return at == TFM_ABSENT ? TFM_ABSENT : at + (size_t)l * per_layer;
}
static const uint16_t *W(const struct gpu_trainer *t, size_t at)
{
    return at == TFM_ABSENT ? NULL : t->w + at;
}
static float *P(const struct gpu_trainer *t, size_t at)
{
    return at == TFM_ABSENT ? NULL : t->p + at;
}
static float *G(const struct gpu_trainer *t, size_t at)
{
    return at == TFM_ABSENT ? NULL : t->g + at;
}

/* The offsets of layer l's tensors. */
struct layer_at {
    size_t ln1, wq, bq, wk, bk, wv, bv, qn, kn, wo, ln2, wg, wu, wd;
};
static struct layer_at layer_at(const struct gpu_trainer *t, int l)
{
    const struct tfm_config *c = &t->c;
    const struct tfm_layout *a = &t->at;
    size_t C = (size_t)c->hidden_size, D = (size_t)c->head_dim;
    size_t HD = (size_t)c->n_heads * D, KD = (size_t)c->n_kv_heads * D;
    size_t F = (size_t)c->intermediate_size;
    return (struct layer_at){at_layer(a->ln1, C, l),      at_layer(a->wq, HD * C, l),
                             at_layer(a->bq, HD, l),      at_layer(a->wk, KD * C, l),
                             at_layer(a->bk, KD, l),      at_layer(a->wv, KD * C, l),
                             at_layer(a->bv, KD, l),      at_layer(a->q_norm, D, l),
                             at_layer(a->k_norm, D, l),   at_layer(a->wo, C * HD, l),
                             at_layer(a->ln2, C, l),      at_layer(a->w_gate, F * C, l),
                             at_layer(a->w_up, F * C, l), at_layer(a->w_down, C * F, l)};
}

/* ---------------------------------------------------------------- forward */

static void bf16(const struct gpu_trainer *t, uint16_t *y, const float *x, size_t n)
{
    GPU_CHECK(t->api, t->api->f32_to_bf16(y, x, (int64_t)n));
}

/* y (N, out) = x W^T + b, or += (no bias) with accumulate; x bf16. */
static void linear(const struct gpu_trainer *t, float *y, const uint16_t *x, size_t w_at,
                   size_t b_at, int N, int in, int out, int accumulate)
{
    GPU_CHECK(t->api, t->api->linear_fwd(y, x, W(t, w_at), N, in, out, accumulate));
    if (b_at != TFM_ABSENT) GPU_CHECK(t->api, t->api->add_bias(y, P(t, b_at), N, out));
}

/* Checks the batch (tfm_batch_prepare's rules) and sends tokens, targets, positions. */
static int stage_batch(struct gpu_trainer *t, const struct tfm_batch *b)
{
    if (!(b->temperature > 0.0f) || !isfinite(b->temperature))
        FATAL("gpu trainer: temperature %g must be positive and finite", (double)b->temperature);
    int T = 0, n = 0, longest = 0;
    t->h_start[0] = 0;
    for (int i = 0; i < b->n_seq; i++) {
        if (b->seq_len[i] < 0) FATAL("gpu trainer: seq_len[%d] = %d", i, b->seq_len[i]);
        if (T + b->seq_len[i] > t->max_tokens)
            FATAL("gpu trainer: the batch exceeds max_tokens = %d", t->max_tokens);
        for (int j = 0; j < b->seq_len[i]; j++) t->pos[T++] = j;
        if (b->seq_len[i] > 0) t->h_start[++n] = T; /* empty ones left out: n <= T */
        if (b->seq_len[i] > longest) longest = b->seq_len[i];
    }
    t->seqs = (struct cuda_seqs){.q_start = t->d_start, .k_start = t->d_start, .n = n,
                                 .nq = T, .nk = T, .max_q = longest, .max_k = longest};
    int V = t->V_full;
    for (int i = 0; i < T; i++)
        if (b->tokens[i] < 0 || b->tokens[i] >= V || b->targets[i] < -1 || b->targets[i] >= V)
            FATAL("gpu trainer: token %d / target %d at %d outside the vocabulary of %d",
                  b->tokens[i], b->targets[i], i, V);
    if (T == 0) return 0;
    const int32_t *tok = b->tokens, *tgt = b->targets;
    if (t->comm) { /* this rank's rows of the vocabulary: -1 for another rank's */
        int Vl = t->c.vocab_size;
        for (int i = 0; i < T; i++) {
            t->h_tok[i] = gpu_vocab_row(b->tokens[i], t->v0, Vl);
            t->h_tgt[i] = gpu_vocab_row(b->targets[i], t->v0, Vl);
        }
        tok = t->h_tok;
        tgt = t->h_tgt;
    }
    GPU_CHECK(t->api, t->api->to_device(t->d_tok, tok, (size_t)T * sizeof(int32_t)));
    GPU_CHECK(t->api, t->api->to_device(t->d_tgt, tgt, (size_t)T * sizeof(int32_t)));
    GPU_CHECK(t->api, t->api->to_device(t->d_pos, t->pos, (size_t)T * sizeof(int32_t)));
    GPU_CHECK(t->api, t->api->to_device(t->d_start, t->h_start, (size_t)(n + 1) * sizeof(int32_t)));
    t->has_ew = 0;
    for (int i = 0; i < T && b->entropy_weights; i++) {
        t->h_ew[i] = b->targets[i] < 0 ? 0.0f : b->entropy_weights[i];
        t->has_ew |= t->h_ew[i] != 0.0f;
    }
    if (t->has_ew) GPU_CHECK(t->api, t->api->to_device(t->d_ew, t->h_ew, (size_t)T * sizeof(float)));
    return T;
}

/* TP: x (n floats) summed over the group; nothing at TP 1. */
static void group_sum(const struct gpu_trainer *t, float *x, size_t n)
{
    if (t->comm) t->comm->allreduce_f32(t->comm->ctx, x, n, TFM_RED_SUM);
}

/* y (T, C) = x + a W^T for a row-parallel product (a bf16 (T, in)), in one pass: at
 * TP > 1 rank 0 adds its partial product to the replicated x, the others write theirs
 * alone, and the group's sum is x plus the whole product on every rank. */
static void residual_add(const struct gpu_trainer *t, float *y, const float *x,
                         const uint16_t *a, size_t w_at, int T, int in)
{
    int C = t->c.hidden_size;
    if (t->tp_rank == 0)
        GPU_CHECK(t->api, t->api->linear_fwd_res(y, x, a, W(t, w_at), T, in, C));
    else
        linear(t, y, a, w_at, TFM_ABSENT, T, in, C, 0);
    group_sum(t, y, (size_t)T * C);
}

/* Layer l's forward from acts[l].xin into x_out. With x_out NULL (the backward's
 * recomputation) it stops at the internals layer_backward reads: gate and up, not
 * SwiGLU's output (layer_backward forms it again) nor the down projection, its
 * residual and all-reduce (nothing reads the layer's output there). */
static void layer_forward(struct gpu_trainer *t, const struct tfm_batch *b, int l, int T,
                          float *x_out)
{
    const struct cuda_api *api = t->api;
    const struct tfm_config *c = &t->c;
    struct layer_acts *a = &t->acts[l];
    struct layer_at w = layer_at(t, l);
    int C = c->hidden_size, H = c->n_heads, K = c->n_kv_heads, D = c->head_dim;
    int F = c->intermediate_size, HD = H * D, KD = K * D;
    float eps = c->rms_norm_eps;

    GPU_CHECK(api, api->rmsnorm_fwd16(a->h1b, a->xin, W(t, w.ln1), T, C, eps));
    float *qp = c->qk_norm ? a->qlin : a->q, *kp = c->qk_norm ? a->klin : a->k;
    linear(t, qp, a->h1b, w.wq, w.bq, T, C, HD, 0);
    linear(t, kp, a->h1b, w.wk, w.bk, T, C, KD, 0);
    linear(t, a->v, a->h1b, w.wv, w.bv, T, C, KD, 0);
    if (c->qk_norm) { /* the norm and the rotation in one pass */
        GPU_CHECK(api, api->qk_norm_rope_fwd(a->q, a->qlin, W(t, w.qn), t->d_pos, t->rope, T, H,
                                             D, eps));
        GPU_CHECK(api, api->qk_norm_rope_fwd(a->k, a->klin, W(t, w.kn), t->d_pos, t->rope, T, K,
                                             D, eps));
    } else {
        GPU_CHECK(api, api->rope_fwd(a->q, t->d_pos, T, H, D, t->rope));
        GPU_CHECK(api, api->rope_fwd(a->k, t->d_pos, T, K, D, t->rope));
    }
    if (t->flash) /* every sequence in one launch */
        GPU_CHECK(api, api->flash_fwd(a->att, a->lse, a->q, a->k, a->v, t->d_pos, &t->seqs, H,
                                      K, D));
    for (size_t i = 0, t0 = 0; i < (size_t)b->n_seq && !t->flash; i++) {
        int n = b->seq_len[i];
        if (n > 0)
            GPU_CHECK(api, api->attn_fwd(a->att + t0 * HD, a->q + t0 * HD, a->k + t0 * KD,
                                         a->v + t0 * KD, t->d_pos + t0, n, n, H, K, D));
        t0 += (size_t)n;
    }
    bf16(t, t->ab, a->att, (size_t)T * HD);
    residual_add(t, a->xmid, a->xin, t->ab, w.wo, T, HD);

    GPU_CHECK(api, api->rmsnorm_fwd16(a->h2b, a->xmid, W(t, w.ln2), T, C, eps));
    linear(t, a->gate, a->h2b, w.wg, TFM_ABSENT, T, C, F, 0);
    linear(t, a->up, a->h2b, w.wu, TFM_ABSENT, T, C, F, 0);
    if (!x_out) return;
    GPU_CHECK(api, api->swiglu_fwd16(t->ab, NULL, a->gate, a->up, (int64_t)T * F));
    residual_add(t, x_out, a->xmid, t->ab, w.wd, T, F);
}

/* Embedding and every layer: t->x the stream leaving the last; hfb its final norm. */
static void trunk_forward(struct gpu_trainer *t, const struct tfm_batch *b, int T)
{
    const struct tfm_config *c = &t->c;
    int L = c->n_layers, C = c->hidden_size;
    GPU_CHECK(t->api, t->api->embed_gather(t->acts[0].xin, W(t, t->at.embed), t->d_tok, T, C,
                                           c->vocab_size));
    group_sum(t, t->acts[0].xin, (size_t)T * C);
    for (int l = 0; l < L; l++) layer_forward(t, b, l, T, l + 1 < L ? t->acts[l + 1].xin : t->x);
    GPU_CHECK(t->api, t->api->rmsnorm_fwd16(t->hfb, t->x, W(t, t->at.ln_f), T, C,
                                            c->rms_norm_eps));
}

static void zero(const struct gpu_trainer *t, float *x, size_t n)
{
    GPU_CHECK(t->api, t->api->zero(x, n * sizeof(float)));
}

/* TP: the log-probs (and entropies) of the n rows of the logit chunk at row r0 over
 * the group's vocabulary: the row maxima (max all-reduce), the sums of
 * tp_logsoftmax_forward (sum all-reduce), the log-probs and entropies formed from them
 * here and sent to t->lp / t->ent, and the log-sums (t->d_lsum) the backward reads. */
static void vocab_logsoftmax(struct gpu_trainer *t, const struct tfm_batch *b, int r0, int n,
                             int entropy)
{
    const struct cuda_api *api = t->api;
    int V = t->c.vocab_size;
    GPU_CHECK(api, api->vocab_max(t->d_mx, t->logits, n, V, b->temperature));
    t->comm->allreduce_f32(t->comm->ctx, t->d_mx, (size_t)n, TFM_RED_MAX);
    GPU_CHECK(api, api->vocab_sums(t->d_sums, t->logits, t->d_mx, t->d_tgt + r0, n, V,
                                   b->temperature));
    t->comm->allreduce_f64(t->comm->ctx, t->d_sums, 3 * (size_t)n, TFM_RED_SUM);
    GPU_CHECK(api, api->to_host(t->h_sums, t->d_sums, 3 * (size_t)n * sizeof(double)));
    for (int i = 0; i < n; i++) {
        const double *si = t->h_sums + 3 * (size_t)i;
        t->h_lsum[i] = log(si[0]);
        t->h_clp[i] = b->targets[r0 + i] < 0 ? 0.0f : (float)(si[2] - t->h_lsum[i]);
        t->h_H[r0 + i] = t->h_lsum[i] - si[1] / si[0];
        t->h_cent[i] = (float)t->h_H[r0 + i];
    }
    GPU_CHECK(api, api->to_device(t->d_lsum, t->h_lsum, (size_t)n * sizeof(double)));
    GPU_CHECK(api, api->to_device(t->lp + r0, t->h_clp, (size_t)n * sizeof(float)));
    if (entropy) GPU_CHECK(api, api->to_device(t->ent + r0, t->h_cent, (size_t)n * sizeof(float)));
    if (t->has_ew)
        GPU_CHECK(api, api->to_device(t->d_H + r0, t->h_H + r0, (size_t)n * sizeof(double)));
}

/* Log-probs of every row into t->lp (0 where no target), entropies into t->ent if
 * asked; with backward (t->dlp holding
 * dJ/dlogprob), dJ/dh of the final norm's output into t->dh and the output head's
 * weight gradient into the block, with the entropy term's when the batch has entropy
 * weights (t->has_ew; the entropies in double into t->h_H). */
static void head(struct gpu_trainer *t, const struct tfm_batch *b, int T, int backward,
                 int entropy)
{
    const struct cuda_api *api = t->api;
    int C = t->c.hidden_size, V = t->c.vocab_size;
    for (int r0 = 0; r0 < T; r0 += TRAIN_LOGIT_CHUNK) {
        int n = T - r0 < TRAIN_LOGIT_CHUNK ? T - r0 : TRAIN_LOGIT_CHUNK;
        const uint16_t *hc = t->hfb + (size_t)r0 * C;
        GPU_CHECK(api, api->linear_fwd(t->logits, hc, W(t, t->at.lm_head), n, C, V, 0));
        if (t->comm)
            vocab_logsoftmax(t, b, r0, n, entropy);
        else /* with the backward, the rows' statistics kept for it */
            GPU_CHECK(api, api->logsoftmax_fwd(t->lp + r0, entropy ? t->ent + r0 : NULL,
                                               backward ? t->d_mx : NULL,
                                               backward ? t->d_lsum : NULL, t->logits,
                                               t->d_tgt + r0, n, V, b->temperature));
        if (!backward) continue;
        /* the products' bf16 operand: written straight by the log-softmax's backward,
         * or, with the entropy term's added, formed in float32 and rounded */
        float *dl = t->has_ew ? t->dlogits : NULL;
        uint16_t *dl16 = t->has_ew ? NULL : t->dyb;
        if (dl) zero(t, dl, (size_t)n * V);
        if (t->comm)
            GPU_CHECK(api, api->vocab_logsoftmax_bwd(dl, dl16, t->dlp + r0, t->logits,
                                                     t->d_tgt + r0, t->d_mx, t->d_lsum, n, V,
                                                     b->temperature));
        else
            GPU_CHECK(api, api->logsoftmax_bwd(dl, dl16, t->dlp + r0, t->logits, t->d_tgt + r0,
                                               t->d_mx, t->d_lsum, n, V, b->temperature));
        if (t->has_ew && t->comm)
            GPU_CHECK(api, api->vocab_entropy_bwd(dl, t->d_ew + r0, t->logits, t->d_mx,
                                                  t->d_lsum, t->d_H + r0, n, V, b->temperature));
        else if (t->has_ew)
            GPU_CHECK(api, api->entropy_bwd(dl, t->d_H + r0, t->d_ew + r0, t->logits, n, V,
                                            b->temperature));
        if (dl) bf16(t, t->dyb, dl, (size_t)n * V);
        GPU_CHECK(api, api->linear_bwd(t->dh + (size_t)r0 * C, G(t, t->at.lm_head), t->dyb, hc,
                                       W(t, t->at.lm_head), n, C, V, 0));
    }
    if (backward) group_sum(t, t->dh, (size_t)T * C); /* each rank's vocabulary rows' part */
}

/* sum_t w_t logprob_t from t->lp (copied to the host; logprob too if asked). */
static double weighted_sum(struct gpu_trainer *t, const struct tfm_batch *b, int T,
                           float *logprob)
{
    GPU_CHECK(t->api, t->api->to_host(t->h_lp, t->lp, (size_t)T * sizeof(float)));
    double total = 0;
    for (int i = 0; i < T; i++) {
        float w = b->targets[i] < 0 ? 0.0f : b->weights ? b->weights[i] : 1.0f;
        total += (double)w * t->h_lp[i];
        if (logprob) logprob[i] = t->h_lp[i];
    }
    return total;
}

double gpu_trainer_forward(struct gpu_trainer *t, const struct tfm_batch *b, float *logprob,
                           float *entropy)
{
    int T = stage_batch(t, b);
    if (T == 0) return 0;
    trunk_forward(t, b, T);
    head(t, b, T, 0, entropy != NULL);
    if (entropy) GPU_CHECK(t->api, t->api->to_host(entropy, t->ent, (size_t)T * sizeof(float)));
    return weighted_sum(t, b, T, logprob);
}

/* ---------------------------------------------------------------- backward */

/* dx (N, in) = dy W (+= with accumulate), dW += dy^T x: dy and x bf16. */
static void linear_back16(const struct gpu_trainer *t, float *dx, int accumulate,
                          const uint16_t *dy, const uint16_t *x, size_t w_at, int N, int in,
                          int out)
{
    GPU_CHECK(t->api, t->api->linear_bwd(dx, G(t, w_at), dy, x, W(t, w_at), N, in, out,
                                         accumulate));
}

/* The same from dy float32 (N, out), rounded to bf16 for the products, and db += its
 * column sums. */
static void linear_back(const struct gpu_trainer *t, float *dx, int accumulate, const float *dy,
                        const uint16_t *x, size_t w_at, size_t b_at, int N, int in, int out)
{
    bf16(t, t->dyb, dy, (size_t)N * out);
    linear_back16(t, dx, accumulate, t->dyb, x, w_at, N, in, out);
    if (b_at != TFM_ABSENT) GPU_CHECK(t->api, t->api->bias_bwd(G(t, b_at), dy, N, out));
}

/* Layer l: on entry t->dx = dJ/dx_out, on exit dJ/dx_in. */
static void layer_backward(struct gpu_trainer *t, const struct tfm_batch *b, int l, int T)
{
    const struct cuda_api *api = t->api;
    const struct tfm_config *c = &t->c;
    const struct layer_acts *a = &t->acts[l];
    struct layer_at w = layer_at(t, l);
    int C = c->hidden_size, H = c->n_heads, K = c->n_kv_heads, D = c->head_dim;
    int F = c->intermediate_size, HD = H * D, KD = K * D;
    size_t TC = (size_t)T * C, TF = (size_t)T * F;
    float eps = c->rms_norm_eps;

    /* MLP: x_out = xmid + act Wd^T, act = silu(h2 Wg^T) * (h2 Wu^T) formed again in
     * bf16; its backward's terms (sigmoid(gate) formed again too) go straight to bf16,
     * the operands of the gate / up products. dJ/dx_out in bf16 is in t->dyb: the norm
     * backward before (the final norm's, or layer l + 1's first) wrote it */
    GPU_CHECK(api, api->swiglu_fwd16(t->ab, NULL, a->gate, a->up, (int64_t)TF));
    linear_back16(t, t->dact, 0, t->dyb, t->ab, w.wd, T, F, C);
    GPU_CHECK(api, api->swiglu_bwd16(t->dgate16, t->dup16, t->dact, a->gate, a->up, NULL,
                                     (int64_t)TF));
    linear_back16(t, t->dh, 0, t->dgate16, a->h2b, w.wg, T, C, F);
    linear_back16(t, t->dh, 1, t->dup16, a->h2b, w.wu, T, C, F);
    group_sum(t, t->dh, TC);
    GPU_CHECK(api, api->rmsnorm_bwd(t->dx, t->dyb, G(t, w.ln2), t->dh, a->xmid, P(t, w.ln2),
                                    t->rstd, T, C, eps));

    /* attention: xmid = x_in + att Wo^T (dx in bf16 from the norm's backward) */
    bf16(t, t->ab, a->att, (size_t)T * HD);
    linear_back16(t, t->datt, 0, t->dyb, t->ab, w.wo, T, HD, C);
    if (!t->flash) { /* attn_bwd adds; flash_bwd writes */
        zero(t, t->dq, (size_t)T * HD);
        zero(t, t->dk, (size_t)T * KD);
        zero(t, t->dv, (size_t)T * KD);
    }
    if (t->flash)
        GPU_CHECK(api, api->flash_bwd(t->dq, t->dk, t->dv, t->datt, a->q, a->k, a->v, a->att,
                                      a->lse, t->d_pos, &t->seqs, H, K, D, t->stats));
    for (size_t i = 0, t0 = 0; i < (size_t)b->n_seq && !t->flash; i++) {
        int n = b->seq_len[i];
        if (n > 0)
            GPU_CHECK(api, api->attn_bwd(t->dq + t0 * HD, t->dk + t0 * KD, t->dv + t0 * KD,
                                         t->datt + t0 * HD, a->q + t0 * HD, a->k + t0 * KD,
                                         a->v + t0 * KD, t->d_pos + t0, n, n, H, K, D,
                                         t->stats));
        t0 += (size_t)n;
    }
    float *dqp = t->dq, *dkp = t->dk;
    if (c->qk_norm) { /* the rotation's and the norm's backward in one pass */
        GPU_CHECK(api, api->qk_norm_rope_bwd(t->dqlin, G(t, w.qn), t->dq, a->qlin, P(t, w.qn),
                                             t->rstd, t->d_pos, t->rope, T, H, D, eps));
        GPU_CHECK(api, api->qk_norm_rope_bwd(t->dklin, G(t, w.kn), t->dk, a->klin, P(t, w.kn),
                                             t->rstd, t->d_pos, t->rope, T, K, D, eps));
        dqp = t->dqlin;
        dkp = t->dklin;
    } else {
        GPU_CHECK(api, api->rope_bwd(t->dq, t->d_pos, T, H, D, t->rope));
        GPU_CHECK(api, api->rope_bwd(t->dk, t->d_pos, T, K, D, t->rope));
    }
    linear_back(t, t->dh, 0, dqp, a->h1b, w.wq, w.bq, T, C, HD);
    linear_back(t, t->dh, 1, dkp, a->h1b, w.wk, w.bk, T, C, KD);
    linear_back(t, t->dh, 1, t->dv, a->h1b, w.wv, w.bv, T, C, KD);
    group_sum(t, t->dh, TC);
    GPU_CHECK(api, api->rmsnorm_bwd(t->dx, l > 0 ? t->dyb : NULL, G(t, w.ln1), t->dh, a->xin,
                                    P(t, w.ln1), t->rstd, T, C, eps));
}

double gpu_trainer_backward(struct gpu_trainer *t, const struct tfm_batch *b)
{
    const struct tfm_config *c = &t->c;
    int T = stage_batch(t, b), C = c->hidden_size;
    if (T == 0) return 0;
    float *dlp = xmalloc((size_t)T * sizeof *dlp);
    for (int i = 0; i < T; i++)
        dlp[i] = b->targets[i] < 0 ? 0.0f : -(b->weights ? b->weights[i] : 1.0f);
    GPU_CHECK(t->api, t->api->to_device(t->dlp, dlp, (size_t)T * sizeof *dlp));
    free(dlp);
    trunk_forward(t, b, T);
    head(t, b, T, 1, 0);
    double J = -weighted_sum(t, b, T, NULL);
    if (t->has_ew) { /* J also carries - sum e_t H_t */
        if (!t->comm)
            GPU_CHECK(t->api, t->api->to_host(t->h_H, t->d_H, (size_t)T * sizeof(double)));
        for (int i = 0; i < T; i++)
            if (t->h_ew[i] != 0.0f) J -= t->h_ew[i] * t->h_H[i];
    }
    zero(t, t->dx, (size_t)T * C);
    GPU_CHECK(t->api, t->api->rmsnorm_bwd(t->dx, t->dyb, G(t, t->at.ln_f), t->dh, t->x,
                                          P(t, t->at.ln_f), t->rstd, T, C, c->rms_norm_eps));
    for (int l = c->n_layers - 1; l >= 0; l--) {
        /* the layer's internals again, from its kept input */
        if (t->recompute) layer_forward(t, b, l, T, NULL);
        layer_backward(t, b, l, T);
    }
    GPU_CHECK(t->api, t->api->embed_scatter_add(G(t, t->at.embed), t->dx, t->d_tok, T, C,
                                                c->vocab_size));
    GPU_CHECK(t->api, t->api->sync());
    return J;
}

void gpu_trainer_zero_grad(struct gpu_trainer *t) { zero(t, t->g, t->at.n); }

void gpu_trainer_grads(struct gpu_trainer *t, struct tfm_params *g)
{
    if (g->n != t->at.n) FATAL("gpu_trainer_grads: %zu floats for %zu", g->n, t->at.n);
    GPU_CHECK(t->api, t->api->to_host(g->mem, t->g, t->at.n * sizeof(float)));
}

void gpu_trainer_params(struct gpu_trainer *t, struct tfm_params *p)
{
    if (p->n != t->at.n) FATAL("gpu_trainer_params: %zu floats for %zu", p->n, t->at.n);
    GPU_CHECK(t->api, t->api->to_host(p->mem, t->p, t->at.n * sizeof(float)));
}

void gpu_trainer_read(struct gpu_trainer *t, size_t off, size_t n, float *f32, uint16_t *b16)
{
    if (off > t->at.n || n > t->at.n - off)
        FATAL("gpu_trainer_read: elements %zu .. %zu of %zu", off, off + n, t->at.n);
    if (f32) GPU_CHECK(t->api, t->api->to_host(f32, t->p + off, n * sizeof *f32));
    if (b16) GPU_CHECK(t->api, t->api->to_host(b16, t->w + off, n * sizeof *b16));
    GPU_CHECK(t->api, t->api->sync());
}

const uint16_t *gpu_trainer_weights16(const struct gpu_trainer *t) { return t->w; }

uint64_t gpu_trainer_hash(struct gpu_trainer *t)
{
    uint64_t h = 0;
    GPU_CHECK(t->api, t->api->weights_hash(&h, t->p, (int64_t)t->at.n));
    return h;
}

/* The AdamW update of the masters from the gradient block (scaled by clip) and the
 * bf16 copy refreshed (queued on the stream): in the same pass, or, while side-stream
 * work still reads the copy (a weight sync), after the update, which overlaps it. */
static void update(struct gpu_trainer *t, float clip, const struct adamw_scalars *s)
{
    struct cuda_adamw cs = {s->decay, s->step_size, s->bc2_sqrt, s->beta2, s->w1, s->w2, s->eps,
                            clip};
    int64_t n = (int64_t)t->at.n;
    int lent = t->w_lent;
    GPU_CHECK(t->api, t->api->adamw_update(t->p, t->m, t->v, lent ? NULL : t->w, t->g, n, &cs));
    if (!lent) return;
    w_back(t);
    GPU_CHECK(t->api, t->api->f32_to_bf16(t->w, t->p, n));
}

double gpu_trainer_step(struct gpu_trainer *t)
{
    if (t->comm)
        FATAL("gpu_trainer_step: a TP-%d shard's gradients need tfm_tp_reduce_grads and the "
              "group's norm first (step it through the host trainer)", t->tp_t);
    double sq = 0;
    GPU_CHECK(t->api, t->api->sum_squares(&sq, t->g, (int64_t)t->at.n));
    double norm = sqrt(sq);
    struct adamw_scalars s;
    adamw_scalars_of(&t->ac, ++t->step, &s);
    update(t, adamw_clip_factor(&t->ac, norm), &s);
    GPU_CHECK(t->api, t->api->sync());
    return norm;
}

void gpu_trainer_apply(struct gpu_trainer *t, const float *g, float clip,
                       const struct adamw_scalars *s, float *p)
{
    size_t bytes = t->at.n * sizeof(float);
    if (g) GPU_CHECK(t->api, t->api->to_device(t->g, g, bytes));
    update(t, clip, s);
    if (p) GPU_CHECK(t->api, t->api->to_host(p, t->p, bytes));
    GPU_CHECK(t->api, t->api->sync());
}

double gpu_trainer_grad_sq(struct gpu_trainer *t)
{
    double sq = 0;
    GPU_CHECK(t->api, t->api->sum_squares(&sq, t->g, (int64_t)t->at.n));
    return sq;
}

void gpu_trainer_set_kv_comm(struct gpu_trainer *t, struct gpu_comm *kv)
{
    t->kv_comm = t->kv_replicated ? kv : NULL;
}

void gpu_trainer_tp_reduce(struct gpu_trainer *t)
{
    if (!t->comm) return;
    if (t->kv_replicated && !t->kv_comm)
        FATAL("gpu_trainer_tp_reduce: the replicated kv heads' gradients of a TP-%d shard "
              "need its kv group (gpu_trainer_set_kv_comm), or the host's "
              "tfm_tp_reduce_grads", t->tp_t);
    size_t L = (size_t)t->c.n_layers, D = (size_t)t->c.head_dim, C = (size_t)t->c.hidden_size;
    if (t->c.qk_norm) {
        if (t->at.k_norm != t->at.q_norm + L * D)
            FATAL("gpu_trainer_tp_reduce: q_norm and k_norm are not adjacent in the block");
        t->comm->allreduce_f32(t->comm->ctx, t->g + t->at.q_norm, 2 * L * D, TFM_RED_SUM);
    }
    if (t->kv_replicated) { /* wk | bk | wv | bv, adjacent as in tfm_tp_reduce_grads */
        size_t KD = (size_t)t->c.n_kv_heads * D;
        size_t end = t->at.bv != TFM_ABSENT ? t->at.bv + L * KD : t->at.wv + L * KD * C;
        t->kv_comm->allreduce_f32(t->kv_comm->ctx, t->g + t->at.wk, end - t->at.wk,
                                  TFM_RED_SUM);
    }
    GPU_CHECK(t->api, t->api->sync());
}

double gpu_trainer_grad_sq_at(struct gpu_trainer *t, const size_t *off, const size_t *len, int n)
{
    double total = 0;
    for (int i = 0; i < n; i++) {
        if (off[i] + len[i] > t->at.n)
            FATAL("gpu_trainer_grad_sq_at: elements %zu .. %zu of a block of %zu", off[i],
                  off[i] + len[i], t->at.n);
        double sq = 0;
        GPU_CHECK(t->api, t->api->sum_squares(&sq, t->g + off[i], (int64_t)len[i]));
        total += sq;
    }
    return total;
}

void gpu_trainer_allreduce_grads(struct gpu_trainer *t, struct gpu_comm *c)
{
    c->allreduce_f32(c->ctx, t->g, t->at.n, TFM_RED_SUM);
    GPU_CHECK(t->api, t->api->sync());
}

void gpu_trainer_moments(struct gpu_trainer *t, float *m, float *v)
{
    GPU_CHECK(t->api, t->api->to_host(m, t->m, t->at.n * sizeof(float)));
    GPU_CHECK(t->api, t->api->to_host(v, t->v, t->at.n * sizeof(float)));
    GPU_CHECK(t->api, t->api->sync());
}

void gpu_trainer_set_moments(struct gpu_trainer *t, const float *m, const float *v)
{
    GPU_CHECK(t->api, t->api->to_device(t->m, m, t->at.n * sizeof(float)));
    GPU_CHECK(t->api, t->api->to_device(t->v, v, t->at.n * sizeof(float)));
    GPU_CHECK(t->api, t->api->sync());
}

void gpu_trainer_set_params(struct gpu_trainer *t, const float *p)
{
    GPU_CHECK(t->api, t->api->to_device(t->p, p, t->at.n * sizeof(float)));
    w_back(t);
    GPU_CHECK(t->api, t->api->f32_to_bf16(t->w, t->p, (int64_t)t->at.n));
    GPU_CHECK(t->api, t->api->sync());
}

/* ---------------------------------------------------------------- train_engine */

static void eng_forward(void *ctx, const struct tfm_batch *b, float *logprob, float *entropy)
{
    gpu_trainer_forward(ctx, b, logprob, entropy);
}
static void eng_grads_begin(void *ctx) { gpu_trainer_zero_grad(ctx); }
static void eng_backward(void *ctx, const struct tfm_batch *b) { gpu_trainer_backward(ctx, b); }
static void eng_grads_end(void *ctx, float *g)
{
    struct gpu_trainer *t = ctx;
    GPU_CHECK(t->api, t->api->to_host(g, t->g, t->at.n * sizeof(float)));
}
static void eng_set_params(void *ctx, const float *p) { gpu_trainer_set_params(ctx, p); }
static void eng_step(void *ctx, const float *g, float clip, const struct adamw_scalars *s,
                     float *p)
{
    gpu_trainer_apply(ctx, g, clip, s, p);
}
static void eng_get_moments(void *ctx, float *m, float *v) { gpu_trainer_moments(ctx, m, v); }
static double eng_grad_sq(void *ctx) { return gpu_trainer_grad_sq(ctx); }
static void eng_tp_reduce(void *ctx) { gpu_trainer_tp_reduce(ctx); }
static double eng_grad_sq_at(void *ctx, const size_t *off, const size_t *len, int n)
{
    return gpu_trainer_grad_sq_at(ctx, off, len, n);
}
static void eng_set_moments(void *ctx, const float *m, const float *v)
{
    gpu_trainer_set_moments(ctx, m, v);
}
static void eng_read_params(void *ctx, size_t off, size_t n, float *f32, uint16_t *b16)
{
    gpu_trainer_read(ctx, off, n, f32, b16);
}
static uint64_t eng_params_hash(void *ctx) { return gpu_trainer_hash(ctx); }

struct train_engine gpu_trainer_engine(struct gpu_trainer *t)
{
    /* a shard with replicated kv heads and no kv group sums the gradient on the host */
    int on_gpu = !t->kv_replicated || t->kv_comm;
    return (struct train_engine){t,
                                 eng_forward,
                                 eng_grads_begin,
                                 eng_backward,
                                 eng_grads_end,
                                 eng_set_params,
                                 eng_step,
                                 eng_get_moments,
                                 eng_set_moments,
                                 eng_grad_sq,
                                 on_gpu ? eng_tp_reduce : NULL,
                                 on_gpu ? eng_grad_sq_at : NULL,
                                 eng_read_params,
                                 eng_params_hash};
}
