/*
 * The CPU transformer's rollout decode engine (include/libra/tfm_decode.h).
 *
 * Rows: a prefill chunk of one slot, or one new token of each of n slots. A layer
 * runs the training path's kernels in the training path's order (tfm_forward.c,
 * tfm_layer_forward) on those rows; the only difference is where keys and values
 * live: each row's K/V are appended to its slot's cache, and attention reads the
 * slot's cache (attn_forward only ever reads keys 0..position, exactly as in
 * training). Logits come from the same final norm and lm_head product.
 *
 * Tensor parallelism (tfm_decoder_create_tp): the same code on a shard (H/t heads, the
 * local kv heads in the cache, F/t MLP columns, Vl vocabulary rows), with the
 * training path's communication: the vocabulary-parallel embedding, a (rows, C) sum
 * all-reduce after o_proj and after down_proj; logits stay local (rows, Vl). Every
 * rank must call prefill / step with the same arguments (they are collective).
 *
 * Memory: KV caches 2 x n_slots x L x capacity x K*D floats, plus scratch for
 * max(prefill_chunk, n_slots) rows. Single-threaded apart from OpenBLAS.
 */
#include "libra/tfm_decode.h"

#include <stdlib.h>
#include <string.h>

#include "libra/cpu_ops.h"
#include "libra/log.h"
#include "rope.h"
#include "tfm_state.h"
#include "tp_ops.h"

struct tfm_decoder {
    struct tfm_config c;        /* the model, or the TP shard's shapes (tp->local) */
    const struct tfm_params *p;
    const struct tfm_tp *tp;    /* NULL: the single-rank model */
    int vocab_full;             /* V of the whole model: token ids are checked against it */
    int n_slots, cap, chunk, max_rows;
    int *len;        /* (n_slots) tokens in each slot's cache */
    float *kc, *vc;  /* (n_slots, L, cap, K*D) */
    /* scratch for max_rows rows */
    float *x, *xmid, *h1, *h2;  /* (R, C) */
    float *qlin, *klin;         /* (R, H*D), (R, K*D) before q/k norm (qk_norm) */
    float *q, *k, *v, *att;     /* (R, H*D), (R, K*D), (R, K*D), (R, H*D) */
    float *gate, *up, *act;     /* (R, F) */
    float *attn_scratch;        /* attn_scratch_floats(R, cap, H, K, D) */
    float *rope;                /* (cap, D) rotary table of positions 0..cap-1 */
    int *pos, *slot_of;         /* (R) */
    float *mem;
    size_t n_floats;
};

static float *kv_row(const struct tfm_decoder *d, float *cache, int slot, int l, int pos)
{
    size_t KD = (size_t)d->c.n_kv_heads * d->c.head_dim;
    return cache + (((size_t)slot * d->c.n_layers + (size_t)l) * (size_t)d->cap + (size_t)pos) * KD;
}

struct tfm_decoder *tfm_decoder_create(const struct tfm_config *c, const struct tfm_params *p,
                                       int n_slots, int slot_capacity, int prefill_chunk)
{
    char err[256];
    if (tfm_config_check(c, err, sizeof err)) FATAL("tfm_decoder_create: %s", err);
    if (n_slots < 1 || slot_capacity < 1 || prefill_chunk < 1)
        FATAL("tfm_decoder_create: n_slots %d, capacity %d, chunk %d must be positive", n_slots,
              slot_capacity, prefill_chunk);
    struct tfm_decoder *d = xcalloc(1, sizeof *d);
    d->c = *c;
    d->p = p;
    d->vocab_full = c->vocab_size;
    d->n_slots = n_slots;
    d->cap = slot_capacity;
    d->chunk = prefill_chunk;
    d->max_rows = prefill_chunk > n_slots ? prefill_chunk : n_slots;
    size_t R = (size_t)d->max_rows, C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size;
    size_t HD = (size_t)c->n_heads * c->head_dim, KD = (size_t)c->n_kv_heads * c->head_dim;
    size_t kv = (size_t)n_slots * c->n_layers * (size_t)slot_capacity * KD;
    size_t sizes[] = {kv, kv, R * C, R * C, R * C, R * C, R * HD, R * KD, R * HD, R * KD,
                      R * KD, R * HD, R * F, R * F, R * F,
                      attn_scratch_floats(d->max_rows, slot_capacity, c->n_heads, c->n_kv_heads,
                                          c->head_dim),
                      (size_t)slot_capacity * c->head_dim};
    float **fields[] = {&d->kc,   &d->vc, &d->x, &d->xmid, &d->h1,   &d->h2,  &d->qlin, &d->klin,
                        &d->q,    &d->k,  &d->v, &d->att,  &d->gate, &d->up,  &d->act,
                        &d->attn_scratch, &d->rope};
    size_t n = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) n += sizes[i];
    d->mem = xcalloc(n, sizeof(float));
    d->n_floats = n;
    size_t off = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *fields[i] = d->mem + off;
        off += sizes[i];
    }
    rope_table(d->rope, slot_capacity, c);
    d->len = xcalloc((size_t)n_slots, sizeof *d->len);
    d->pos = xcalloc(R, sizeof *d->pos);
    d->slot_of = xcalloc(R, sizeof *d->slot_of);
    return d;
}

struct tfm_decoder *tfm_decoder_create_tp(const struct tfm_tp *tp, const struct tfm_params *p_local,
                                          int n_slots, int slot_capacity, int prefill_chunk)
{
    if (p_local->n != tfm_param_count(&tp->local))
        FATAL("tfm_decoder_create_tp: rank %d's parameters have %zu floats, its shard %zu "
              "(allocate them with tfm_params_alloc(&tp->local))", tp->rank, p_local->n,
              tfm_param_count(&tp->local));
    struct tfm_decoder *d =
        tfm_decoder_create(&tp->local, p_local, n_slots, slot_capacity, prefill_chunk);
    if (tp_parallel(tp)) {
        d->tp = tp;
        d->vocab_full = tp->full.vocab_size;
    }
    return d;
}

void tfm_decoder_free(struct tfm_decoder *d)
{
    if (!d) return;
    free(d->mem);
    free(d->len);
    free(d->pos);
    free(d->slot_of);
    free(d);
}

int tfm_decoder_len(const struct tfm_decoder *d, int slot) { return d->len[slot]; }

void tfm_decoder_truncate(struct tfm_decoder *d, int slot, int len)
{
    if (slot < 0 || slot >= d->n_slots || len < 0 || len > d->len[slot])
        FATAL("tfm_decoder_truncate: slot %d to %d tokens (it holds %d)", slot, len,
              slot >= 0 && slot < d->n_slots ? d->len[slot] : -1);
    d->len[slot] = len;
}

size_t tfm_decoder_bytes(const struct tfm_decoder *d)
{
    return d->n_floats * sizeof(float) + (size_t)d->n_slots * sizeof(int) +
           2 * (size_t)d->max_rows * sizeof(int);
}

/* Attention of rows [r0, r1) -- all of one slot -- over that slot's cache. */
static void attend_slot_rows(struct tfm_decoder *d, int l, int r0, int r1)
{
    const struct tfm_config *c = &d->c;
    int H = c->n_heads, K = c->n_kv_heads, D = c->head_dim, slot = d->slot_of[r0];
    int nk = d->pos[r1 - 1] + 1;
    attn_forward(d->att + (size_t)r0 * H * D, d->q + (size_t)r0 * H * D,
                 kv_row(d, d->kc, slot, l, 0), kv_row(d, d->vc, slot, l, 0), d->pos + r0, r1 - r0,
                 nk, H, K, D, d->attn_scratch);
}

/* One layer over the R rows in d->x (in place). */
static void layer_rows(struct tfm_decoder *d, int l, int R)
{
    const struct tfm_config *c = &d->c;
    struct tfm_layer w = tfm_layer_view(c, d->p, l);
    int C = c->hidden_size, H = c->n_heads, K = c->n_kv_heads, D = c->head_dim;
    int F = c->intermediate_size;
    float eps = c->rms_norm_eps;
    size_t RC = (size_t)R * C;

    rmsnorm_forward(d->h1, d->x, w.ln1, R, C, eps);
    float *qp = c->qk_norm ? d->qlin : d->q, *kp = c->qk_norm ? d->klin : d->k;
    linear_forward(qp, d->h1, w.wq, w.bq, R, C, H * D);
    linear_forward(kp, d->h1, w.wk, w.bk, R, C, K * D);
    linear_forward(d->v, d->h1, w.wv, w.bv, R, C, K * D);
    if (c->qk_norm) {
        rmsnorm_forward(d->q, d->qlin, w.q_norm, R * H, D, eps);
        rmsnorm_forward(d->k, d->klin, w.k_norm, R * K, D, eps);
    }
    rope_forward(d->q, d->pos, R, H, D, d->rope);
    rope_forward(d->k, d->pos, R, K, D, d->rope);
    size_t KD = (size_t)K * D;
    for (int r = 0; r < R; r++) {
        memcpy(kv_row(d, d->kc, d->slot_of[r], l, d->pos[r]), d->k + r * KD, KD * sizeof(float));
        memcpy(kv_row(d, d->vc, d->slot_of[r], l, d->pos[r]), d->v + r * KD, KD * sizeof(float));
    }
    /* runs of consecutive rows of one slot attend together */
    for (int r0 = 0, r1; r0 < R; r0 = r1) {
        for (r1 = r0 + 1; r1 < R && d->slot_of[r1] == d->slot_of[r0]; r1++) {}
        attend_slot_rows(d, l, r0, r1);
    }
    linear_forward(d->xmid, d->att, w.wo, NULL, R, H * D, C);
    tp_allreduce_sum(d->tp, d->xmid, RC); /* row-parallel o_proj: each rank's heads' share */
    for (size_t i = 0; i < RC; i++) d->xmid[i] += d->x[i];

    rmsnorm_forward(d->h2, d->xmid, w.ln2, R, C, eps);
    linear_forward(d->gate, d->h2, w.w_gate, NULL, R, C, F);
    linear_forward(d->up, d->h2, w.w_up, NULL, R, C, F);
    swiglu_forward(d->act, NULL, d->gate, d->up, (int64_t)R * F);
    linear_forward(d->x, d->act, w.w_down, NULL, R, F, C);
    tp_allreduce_sum(d->tp, d->x, RC); /* row-parallel down_proj */
    for (size_t i = 0; i < RC; i++) d->x[i] += d->xmid[i];
}

/* Runs rows (tokens with slot_of/pos set) through the model; logits of the rows
 * [first, R) to logits (R - first, V) if logits != NULL (TP: V is Vl, this rank's
 * vocabulary columns). */
static void run_rows(struct tfm_decoder *d, const int32_t *tokens, int R, int first, float *logits)
{
    const struct tfm_config *c = &d->c;
    int C = c->hidden_size;
    tp_embed_forward(d->tp, d->x, d->p->embed, tokens, R, C);
    for (int l = 0; l < c->n_layers; l++) layer_rows(d, l, R);
    for (int r = 0; r < R; r++) d->len[d->slot_of[r]] = d->pos[r] + 1;
    if (!logits) return;
    int n = R - first;
    rmsnorm_forward(d->h1, d->x + (size_t)first * C, d->p->ln_f, n, C, c->rms_norm_eps);
    linear_forward(logits, d->h1, d->p->lm_head, NULL, n, C, c->vocab_size);
}

int tfm_decoder_prefill(struct tfm_decoder *d, int slot, const int32_t *tokens, int n,
                        float *last_logits)
{
    if (slot < 0 || slot >= d->n_slots) FATAL("tfm_decoder_prefill: no slot %d", slot);
    if (n < 0 || d->len[slot] + n > d->cap) return -1;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= d->vocab_full)
            FATAL("tfm_decoder_prefill: token %d outside [0, %d)", tokens[i], d->vocab_full);
    for (int done = 0; done < n;) {
        int m = n - done < d->chunk ? n - done : d->chunk;
        for (int r = 0; r < m; r++) {
            d->slot_of[r] = slot;
            d->pos[r] = d->len[slot] + r;
        }
        int last = done + m == n;
        run_rows(d, tokens + done, m, m - 1, last ? last_logits : NULL);
        done += m;
    }
    return 0;
}

int tfm_decoder_step(struct tfm_decoder *d, const int *slots, const int32_t *tokens, int n,
                     float *logits)
{
    if (n < 0 || n > d->n_slots) FATAL("tfm_decoder_step: %d rows for %d slots", n, d->n_slots);
    for (int i = 0; i < n; i++) {
        if (slots[i] < 0 || slots[i] >= d->n_slots) FATAL("tfm_decoder_step: no slot %d", slots[i]);
        if (tokens[i] < 0 || tokens[i] >= d->vocab_full)
            FATAL("tfm_decoder_step: token %d outside [0, %d)", tokens[i], d->vocab_full);
        for (int j = 0; j < i; j++)
            if (slots[j] == slots[i]) FATAL("tfm_decoder_step: slot %d given twice", slots[i]);
        if (d->len[slots[i]] >= d->cap) return -1;
    }
    for (int i = 0; i < n; i++) {
        d->slot_of[i] = slots[i];
        d->pos[i] = d->len[slots[i]];
    }
    run_rows(d, tokens, n, 0, logits);
    return 0;
}
