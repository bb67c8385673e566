/*
 * The rollout decode engine on a GPU (include/libra/gpu_decode.h): the paged KV pool's
 * bookkeeping on the host (block tables, reference counts, a free list), and the
 * forward of a set of rows through the CUDA module's kernels.
 *
 * Every row r carries its slot's block table, its position pos[r] and the length its
 * slot has once it is appended (len[r] = pos[r] + 1): kv_append writes the row's key
 * and value there and decode_attn reads keys 0 .. pos[r] -- exactly the causal
 * attention of the training path, for prefill chunks and decode steps alike.
 *
 * Device memory: the pool (2 x L x blocks x GPU_KV_BLOCK x K*D bf16) and scratch for
 * R = max(prefill_chunk, n_slots) rows: float32 (R, C) x 2, (R, H*D) x 3, (R, K*D) x 2,
 * (R, F) x 3, (R, V) logits and twice as much sampler scratch (the probabilities and
 * the top-k / top-p candidates), and bf16 (R, max(C, H*D, F)).
 */
#include "libra/gpu_decode.h"

#include <stdlib.h>
#include <string.h>

#include "libra/errmsg.h"
#include "libra/log.h"
#include "libra/rng.h"

struct gpu_decoder {
    const struct gpu_model *m;
    const struct cuda_api *api;
    struct tfm_config c;     /* this rank's shard (the whole model at TP 1) */
    /* tensor parallelism: rank tp_rank of t; vocabulary rows [v0, v0 + c.vocab_size)
     * of V_full; comm the group (NULL at TP 1) */
    int t, tp_rank, v0, V_full;
    struct tfm_tp tp;        /* the geometry at t > 1 (the top-k candidates' counts) */
    struct gpu_comm *comm;
    int n_slots, cap, chunk, max_rows;
    int max_blocks;          /* blocks per slot at full capacity */
    int n_blocks;            /* in the pool */
    /* host: the pool's bookkeeping */
    int *len;                /* (n_slots) tokens in each slot's cache */
    int32_t *table;          /* (n_slots, max_blocks) block ids; -1 past the slot's blocks */
    int *ref;                /* (n_blocks) slots holding each block */
    int *free_list, n_free;  /* blocks with ref 0 */
    /* host: a call's rows */
    int32_t *h_pos, *h_len, *h_table; /* (R), (R), (R, max_blocks) */
    int32_t *h_tok;          /* (R) the rows' tokens in this rank's vocabulary rows (-1:
                                another rank's) */
    int logit_rows;          /* rows of logits the last prefill / step left */
    int graphs;              /* 1: the forward of R rows runs as a recorded CUDA graph */
    int small_ok;            /* the model's shapes and weights suit gemv */
    int small;               /* forwards of up to this many rows take the gemv path */
    int flash;               /* prefill chunks' attention on the tensor cores (prefill_attn) */
    int one_seq;             /* the current forward's rows: one sequence's tokens in order */
    int overlap;             /* the decode kernels launched overlapped (launch_overlap) */
    void **graph;            /* (max_rows + 1) x 3 x 2: per R, logit mode and one_seq,
                                NULL until made */
    /* device */
    uint16_t *kpool, *vpool; /* (L, n_blocks, P, K*D) bf16 */
    float *x, *h, *qlin, *q, *klin, *v, *att, *gate, *up, *act, *logits, *scratch, *rope;
    uint16_t *hb;            /* bf16 operand of the matrix products */
    int32_t *d_tok, *d_pos, *d_len, *d_table, *d_out_tok;
    int64_t *d_traj, *d_spos;
    float *d_out_lp;
    double *d_samp, *h_samp; /* (R, samp_doubles(t)): the vocabulary-parallel sampler's */
    float *h_topk;           /* (2 GPU_SAMPLE_TOPK_MAX): sampler_tp_top_k_pick's scratch */
    size_t bytes;
};

static void *dev_alloc(struct gpu_decoder *d, size_t bytes)
{
    void *p = NULL;
    GPU_CHECK(d->api, d->api->alloc(&p, bytes));
    d->bytes += bytes;
    return p;
}

static size_t pool_values_per_block(const struct tfm_config *c)
{
    return (size_t)GPU_KV_BLOCK * c->n_kv_heads * c->head_dim;
}

/* Scratch bytes for R rows of model c with slots of cap tokens. */
/* Doubles a row of the vocabulary-parallel sampler exchanges at TP t: the max, the
 * slots (3t greedy, 2t at a temperature, t + 2n for top-k with n <=
 * GPU_SAMPLE_TOPK_MAX candidates), a plan of 4 and a result of 2. */
#define GPU_SAMPLE_TOPK_MAX 1024
static size_t samp_slots(int t)
{
    size_t g = 3 * (size_t)t, k = (size_t)t + 2 * GPU_SAMPLE_TOPK_MAX;
    return g > k ? g : k;
}
static size_t samp_doubles(int t) { return 1 + samp_slots(t) + 4 + 2; }

static size_t scratch_bytes(const struct tfm_config *c, int t, size_t R, size_t cap,
                            size_t max_blocks)
{
    size_t C = (size_t)c->hidden_size, HD = (size_t)c->n_heads * c->head_dim;
    size_t KD = (size_t)c->n_kv_heads * c->head_dim, F = (size_t)c->intermediate_size;
    size_t V = (size_t)c->vocab_size, widest = C > HD ? C : HD;
    widest = widest > F ? widest : F;
    size_t floats = R * (2 * C + 3 * HD + 2 * KD + 3 * F + 3 * V + 1) + cap * c->head_dim;
    size_t ints = R * (4 + max_blocks) + 2 * R * 2; /* int32 + the int64 pairs */
    return floats * sizeof(float) + ints * sizeof(int32_t) + R * widest * sizeof(uint16_t) +
           R * samp_doubles(t) * sizeof(double);
}

/* A forward can be recorded as a CUDA graph unless its all-reduces cannot be. */
static int graphs_possible(const struct gpu_decoder *d) { return !d->comm || d->comm->graph_safe; }

static int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Whether gemv can run the model's products: every input width a multiple of 8 and
 * every matrix 16-byte aligned (bf16 rows of a multiple of 8 in one block). */
static int gemv_suits(const struct gpu_model *m)
{
    const struct tfm_config *c = &m->c;
    const struct tfm_layout *a = &m->at;
    size_t C = (size_t)c->hidden_size, HD = (size_t)c->n_heads * c->head_dim;
    size_t KD = (size_t)c->n_kv_heads * c->head_dim, F = (size_t)c->intermediate_size;
    if (C % 8 || HD % 8 || F % 8) return 0;
    if (!aligned16(gpu_model_w(m, a->lm_head, 0, 0))) return 0;
    for (int l = 0; l < c->n_layers; l++) {
        const void *w[] = {gpu_model_w(m, a->wq, HD * C, l), gpu_model_w(m, a->wk, KD * C, l),
                           gpu_model_w(m, a->wv, KD * C, l), gpu_model_w(m, a->wo, C * HD, l),
                           gpu_model_w(m, a->w_gate, F * C, l), gpu_model_w(m, a->w_up, F * C, l),
                           gpu_model_w(m, a->w_down, C * F, l)};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
            if (!aligned16(w[i])) return 0;
    }
    return 1;
}

/* Whether m holds tp's shard (the whole model when tp is NULL); else a message. */
static int shard_matches(const struct gpu_model *m, const struct tfm_tp *tp,
                         const struct gpu_comm *comm, char *err, size_t errlen)
{
    if (!tp) return 0;
    const struct tfm_config *a = &m->c, *b = &tp->local;
    if (a->hidden_size != b->hidden_size || a->n_layers != b->n_layers ||
        a->n_heads != b->n_heads || a->n_kv_heads != b->n_kv_heads ||
        a->head_dim != b->head_dim || a->intermediate_size != b->intermediate_size ||
        a->vocab_size != b->vocab_size) {
        errmsg_set(err, errlen, "gpu decoder: the model on the GPU (%d heads, %d kv heads, "
                   "intermediate %d, vocabulary %d) is not rank %d's shard of TP %d (%d, %d, "
                   "%d, %d)", a->n_heads, a->n_kv_heads, a->intermediate_size, a->vocab_size,
                   tp->rank, tp->t, b->n_heads, b->n_kv_heads, b->intermediate_size,
                   b->vocab_size);
        return -1;
    }
    if (tp->t > 1 && (!comm || comm->size != tp->t || comm->rank != tp->rank)) {
        errmsg_set(err, errlen, "gpu decoder: TP %d rank %d needs a group of %d ranks in which "
                   "it is rank %d (given %d, rank %d)", tp->t, tp->rank, tp->t, tp->rank,
                   comm ? comm->size : 0, comm ? comm->rank : -1);
        return -1;
    }
    return 0;
}

struct gpu_decoder *gpu_decoder_create(const struct gpu_model *m, int n_slots, int slot_capacity,
                                       int prefill_chunk, size_t kv_bytes, char *err,
                                       size_t errlen)
{
    return gpu_decoder_create_tp(m, NULL, NULL, n_slots, slot_capacity, prefill_chunk, kv_bytes,
                                 err, errlen);
}

struct gpu_decoder *gpu_decoder_create_tp(const struct gpu_model *m, const struct tfm_tp *tp,
                                          struct gpu_comm *comm, int n_slots, int slot_capacity,
                                          int prefill_chunk, size_t kv_bytes, char *err,
                                          size_t errlen)
{
    if (n_slots < 1 || slot_capacity < 1 || prefill_chunk < 1) {
        errmsg_set(err, errlen, "gpu decoder: n_slots %d, capacity %d, chunk %d must be positive",
                   n_slots, slot_capacity, prefill_chunk);
        return NULL;
    }
    if (shard_matches(m, tp, comm, err, errlen)) return NULL;
    const struct tfm_config *c = &m->c;
    const struct cuda_api *api = m->api;
    int max_blocks = (slot_capacity + GPU_KV_BLOCK - 1) / GPU_KV_BLOCK;
    int R = prefill_chunk > n_slots ? prefill_chunk : n_slots;
    size_t block_bytes = 2 * (size_t)c->n_layers * pool_values_per_block(c) * sizeof(uint16_t);
    size_t scratch = scratch_bytes(c, tp ? tp->t : 1, (size_t)R, (size_t)slot_capacity,
                                   (size_t)max_blocks);
    size_t free_b = 0, total_b = 0;
    GPU_CHECK(api, api->mem_info(&free_b, &total_b));
    size_t usable = free_b > scratch ? (size_t)((double)(free_b - scratch) * 0.9) : 0;
    size_t want = (size_t)n_slots * (size_t)max_blocks;
    size_t blocks = kv_bytes ? kv_bytes / block_bytes : want;
    if (!kv_bytes && blocks > usable / block_bytes) blocks = usable / block_bytes;
    if (blocks < (size_t)max_blocks || blocks * block_bytes > usable) {
        errmsg_set(err, errlen, "gpu decoder: a KV pool of %zu blocks (%.2f GB) does not fit, or "
                   "cannot hold one slot of %d tokens: %.2f GB of GPU memory free, %.2f GB "
                   "of it needed for scratch", blocks, blocks * (double)block_bytes / 1e9,
                   slot_capacity, free_b / 1e9, scratch / 1e9);
        return NULL;
    }
    if (blocks > (size_t)INT32_MAX) blocks = (size_t)INT32_MAX;

    struct gpu_decoder *d = xcalloc(1, sizeof *d);
    d->m = m;
    d->api = api;
    d->c = *c;
    d->t = tp ? tp->t : 1;
    d->tp_rank = tp ? tp->rank : 0;
    d->v0 = tp ? tp->v0 : 0;
    d->V_full = tp ? tp->full.vocab_size : c->vocab_size;
    d->comm = d->t > 1 ? comm : NULL;
    if (tp) d->tp = *tp;
    d->n_slots = n_slots;
    d->cap = slot_capacity;
    d->chunk = prefill_chunk;
    d->max_rows = R;
    d->max_blocks = max_blocks;
    d->n_blocks = (int)blocks;
    d->len = xcalloc((size_t)n_slots, sizeof *d->len);
    d->table = xmalloc((size_t)n_slots * max_blocks * sizeof *d->table);
    for (size_t i = 0; i < (size_t)n_slots * max_blocks; i++) d->table[i] = -1;
    d->ref = xcalloc(blocks, sizeof *d->ref);
    d->free_list = xmalloc(blocks * sizeof *d->free_list);
    for (int b = 0; b < d->n_blocks; b++) d->free_list[b] = d->n_blocks - 1 - b;
    d->n_free = d->n_blocks;
    d->h_pos = xmalloc((size_t)R * sizeof *d->h_pos);
    d->h_len = xmalloc((size_t)R * sizeof *d->h_len);
    d->h_table = xmalloc((size_t)R * max_blocks * sizeof *d->h_table);
    d->h_tok = xmalloc((size_t)R * sizeof *d->h_tok);

    size_t Rz = (size_t)R, C = (size_t)c->hidden_size, HD = (size_t)c->n_heads * c->head_dim;
    size_t KD = (size_t)c->n_kv_heads * c->head_dim, F = (size_t)c->intermediate_size;
    size_t V = (size_t)c->vocab_size, widest = C > HD ? C : HD;
    widest = widest > F ? widest : F;
    size_t pool = (size_t)c->n_layers * blocks * pool_values_per_block(c) * sizeof(uint16_t);
    d->kpool = dev_alloc(d, pool);
    d->vpool = dev_alloc(d, pool);
    d->x = dev_alloc(d, Rz * C * sizeof(float));
    d->h = dev_alloc(d, Rz * C * sizeof(float));
    d->qlin = dev_alloc(d, Rz * HD * sizeof(float));
    d->q = dev_alloc(d, Rz * HD * sizeof(float));
    d->att = dev_alloc(d, Rz * HD * sizeof(float));
    d->klin = dev_alloc(d, Rz * KD * sizeof(float));
    d->v = dev_alloc(d, Rz * KD * sizeof(float));
    d->gate = dev_alloc(d, Rz * F * sizeof(float));
    d->up = dev_alloc(d, Rz * F * sizeof(float));
    d->act = dev_alloc(d, Rz * F * sizeof(float));
    d->logits = dev_alloc(d, Rz * V * sizeof(float));
    d->scratch = dev_alloc(d, CUDA_SAMPLE_SCRATCH * Rz * V * sizeof(float));
    d->hb = dev_alloc(d, Rz * widest * sizeof(uint16_t));
    d->d_tok = dev_alloc(d, Rz * sizeof(int32_t));
    d->d_pos = dev_alloc(d, Rz * sizeof(int32_t));
    d->d_len = dev_alloc(d, Rz * sizeof(int32_t));
    d->d_out_tok = dev_alloc(d, Rz * sizeof(int32_t));
    d->d_out_lp = dev_alloc(d, Rz * sizeof(float));
    d->d_table = dev_alloc(d, Rz * max_blocks * sizeof(int32_t));
    d->d_traj = dev_alloc(d, Rz * sizeof(int64_t));
    d->d_spos = dev_alloc(d, Rz * sizeof(int64_t));
    d->d_samp = dev_alloc(d, Rz * samp_doubles(d->t) * sizeof(double));
    d->h_samp = xmalloc(Rz * samp_doubles(d->t) * sizeof *d->h_samp);
    d->h_topk = xmalloc(2 * GPU_SAMPLE_TOPK_MAX * sizeof *d->h_topk);
    float *rope = xmalloc((size_t)slot_capacity * c->head_dim * sizeof *rope);
    rope_table(rope, slot_capacity, c);
    d->rope = dev_alloc(d, (size_t)slot_capacity * c->head_dim * sizeof(float));
    GPU_CHECK(api, api->to_device(d->rope, rope,
                                  (size_t)slot_capacity * c->head_dim * sizeof *rope));
    free(rope);
    d->graphs = graphs_possible(d);
    d->graph = xcalloc((size_t)(R + 1) * 6, sizeof *d->graph);
    d->flash = cuda_flash_supports(c->head_dim);
    d->small_ok = gemv_suits(m);
    d->small = d->small_ok ? GPU_GEMV_ROWS : 0;
    return d;
}

int gpu_decoder_set_graphs(struct gpu_decoder *d, int on)
{
    d->graphs = on && graphs_possible(d);
    return d->graphs;
}

static void graphs_drop(struct gpu_decoder *d)
{
    for (int i = 0; i < (d->max_rows + 1) * 6; i++) {
        GPU_CHECK(d->api, d->api->graph_free(d->graph[i]));
        d->graph[i] = NULL;
    }
}

int gpu_decoder_set_flash(struct gpu_decoder *d, int on)
{
    int was = d->flash, now = on && cuda_flash_supports(d->c.head_dim);
    if (now != was) graphs_drop(d); /* recorded with the other kernel */
    d->flash = now;
    return was;
}

/* The module's launch_overlap(on): 1 if on, 0 if not. */
static int overlap_set(const struct gpu_decoder *d, int on)
{
    int r = d->api->launch_overlap(on);
    if (r < 0) FATAL("CUDA: launch_overlap(%d): %s", on, d->api->last_error());
    return r;
}

int gpu_decoder_set_overlap(struct gpu_decoder *d, int on)
{
    int now = on && overlap_set(d, 1);
    overlap_set(d, 0);
    if (now != d->overlap) graphs_drop(d); /* recorded with the other launches */
    d->overlap = now;
    return now;
}

int gpu_decoder_set_gemv(struct gpu_decoder *d, int rows)
{
    int small = !d->small_ok || rows < 0 ? 0 : rows > CUDA_GEMV_MAX_ROWS ? CUDA_GEMV_MAX_ROWS : rows;
    if (small != d->small) graphs_drop(d); /* recorded with the other path */
    d->small = small;
    return small;
}

void gpu_decoder_free(struct gpu_decoder *d)
{
    if (!d) return;
    void *dev[] = {d->kpool, d->vpool, d->x, d->h, d->qlin, d->q, d->att, d->klin, d->v,
                   d->gate, d->up, d->act, d->logits, d->scratch, d->hb, d->d_tok, d->d_pos,
                   d->d_len, d->d_out_tok, d->d_out_lp, d->d_table, d->d_traj, d->d_spos,
                   d->rope, d->d_samp};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) GPU_CHECK(d->api, d->api->free(dev[i]));
    graphs_drop(d);
    free(d->graph);
    free(d->len);
    free(d->table);
    free(d->ref);
    free(d->free_list);
    free(d->h_pos);
    free(d->h_len);
    free(d->h_table);
    free(d->h_tok);
    free(d->h_samp);
    free(d->h_topk);
    free(d);
}

/* ---------------------------------------------------------------- the pool */

static int32_t *slot_table(const struct gpu_decoder *d, int slot)
{
    return d->table + (size_t)slot * d->max_blocks;
}

static void block_release(struct gpu_decoder *d, int32_t b)
{
    if (--d->ref[b] == 0) d->free_list[d->n_free++] = b;
}

static int32_t block_take(struct gpu_decoder *d)
{
    int32_t b = d->free_list[--d->n_free];
    d->ref[b] = 1;
    return b;
}

/* Blocks a slot needs from the pool to grow from its length to new_len: new blocks,
 * plus a private copy of a shared block it would write into. */
static int blocks_needed(const struct gpu_decoder *d, int slot, int new_len)
{
    int have = (d->len[slot] + GPU_KV_BLOCK - 1) / GPU_KV_BLOCK;
    int need = (new_len + GPU_KV_BLOCK - 1) / GPU_KV_BLOCK - have;
    if (d->len[slot] % GPU_KV_BLOCK && new_len > d->len[slot] &&
        d->ref[slot_table(d, slot)[have - 1]] > 1)
        need++;
    return need;
}

/* Copies block src's keys and values (every layer) into block dst. */
static void block_copy(struct gpu_decoder *d, int32_t dst, int32_t src)
{
    size_t per = pool_values_per_block(&d->c), layer = (size_t)d->n_blocks * per;
    for (int l = 0; l < d->c.n_layers; l++) {
        size_t off = (size_t)l * layer;
        GPU_CHECK(d->api, d->api->copy(d->kpool + off + (size_t)dst * per,
                                       d->kpool + off + (size_t)src * per, per * sizeof(uint16_t)));
        GPU_CHECK(d->api, d->api->copy(d->vpool + off + (size_t)dst * per,
                                       d->vpool + off + (size_t)src * per, per * sizeof(uint16_t)));
    }
}

/* Gives the slot the blocks for new_len tokens (blocks_needed of them must be free),
 * copying a shared last block first. */
static void blocks_grow(struct gpu_decoder *d, int slot, int new_len)
{
    int32_t *t = slot_table(d, slot);
    int have = (d->len[slot] + GPU_KV_BLOCK - 1) / GPU_KV_BLOCK;
    if (d->len[slot] % GPU_KV_BLOCK && new_len > d->len[slot] && d->ref[t[have - 1]] > 1) {
        int32_t own = block_take(d);
        block_copy(d, own, t[have - 1]);
        block_release(d, t[have - 1]);
        t[have - 1] = own;
    }
    for (int j = have; j < (new_len + GPU_KV_BLOCK - 1) / GPU_KV_BLOCK; j++) t[j] = block_take(d);
}

void gpu_decoder_truncate(struct gpu_decoder *d, int slot, int len)
{
    if (slot < 0 || slot >= d->n_slots || len < 0 || len > d->len[slot])
        FATAL("gpu_decoder_truncate: slot %d to %d tokens (it holds %d)", slot, len,
              slot >= 0 && slot < d->n_slots ? d->len[slot] : -1);
    int32_t *t = slot_table(d, slot);
    int keep = (len + GPU_KV_BLOCK - 1) / GPU_KV_BLOCK;
    for (int j = keep; j < d->max_blocks && t[j] >= 0; j++) {
        block_release(d, t[j]);
        t[j] = -1;
    }
    d->len[slot] = len;
}

void gpu_decoder_fork(struct gpu_decoder *d, int dst, int src)
{
    if (dst < 0 || dst >= d->n_slots || src < 0 || src >= d->n_slots)
        FATAL("gpu_decoder_fork: slots %d <- %d of %d", dst, src, d->n_slots);
    if (dst == src) return;
    gpu_decoder_truncate(d, dst, 0);
    int32_t *t = slot_table(d, dst);
    const int32_t *s = slot_table(d, src);
    for (int j = 0; j < (d->len[src] + GPU_KV_BLOCK - 1) / GPU_KV_BLOCK; j++) {
        t[j] = s[j];
        d->ref[s[j]]++;
    }
    d->len[dst] = d->len[src];
}

int gpu_decoder_len(const struct gpu_decoder *d, int slot) { return d->len[slot]; }

void gpu_decoder_blocks(const struct gpu_decoder *d, int *free_blocks, int *total_blocks)
{
    *free_blocks = d->n_free;
    *total_blocks = d->n_blocks;
}

size_t gpu_decoder_bytes(const struct gpu_decoder *d) { return d->bytes; }

/* ---------------------------------------------------------------- the forward */

/* y (N, out) = x W^T (+ b), or += without bias when accumulate. */
static void linear(const struct gpu_decoder *d, float *y, const uint16_t *x, const uint16_t *w,
                   const float *b, int N, int in, int out, int accumulate)
{
    GPU_CHECK(d->api, d->api->linear_fwd(y, x, w, N, in, out, accumulate));
    if (b) GPU_CHECK(d->api, d->api->add_bias(y, b, N, out));
}

static void to_bf16(const struct gpu_decoder *d, const float *x, int64_t n)
{
    GPU_CHECK(d->api, d->api->f32_to_bf16(d->hb, x, n));
}

/* gemv of R rows of x (in columns) through up to three matrices (NULL-terminated w),
 * x RMS-normalised first with the weights norm (NULL: not). */
static void small_linear(const struct gpu_decoder *d, const float *x, int R, int in,
                         const uint16_t *norm, float *const y[3], const uint16_t *const w[3],
                         const float *const b[3], const int out[3], int accumulate, int swiglu)
{
    struct cuda_gemv g = {.x = x, .N = R, .in = in, .accumulate = accumulate, .swiglu = swiglu,
                          .norm = norm, .eps = d->c.rms_norm_eps};
    for (int i = 0; i < CUDA_GEMV_MAX_MATS && w[i]; i++, g.n_mats++) {
        g.m[i].y = y[i];
        g.m[i].w = w[i];
        g.m[i].b = b ? b[i] : NULL;
        g.m[i].out = out[i];
    }
    GPU_CHECK(d->api, d->api->gemv(&g));
}

/* TP: the R rows of d->x summed over the group. A row-parallel product (o_proj,
 * down_proj) leaves each rank a partial sum of its output; rank 0 has added it to the
 * residual stream, the others wrote it over their copy of the stream (identical on
 * every rank), so the sum is the stream plus the whole product on every rank. Also
 * the embedding: each row is non-zero on the one rank whose vocabulary holds it. */
static void residual_sum(struct gpu_decoder *d, int R)
{
    if (d->comm)
        d->comm->allreduce_f32(d->comm->ctx, d->x, (size_t)R * d->c.hidden_size, TFM_RED_SUM);
}

/* Layer l's attention from the projections d->qlin, d->klin and d->v of the R rows:
 * the q/k norms (when the model has them), the rotation and the KV append in one
 * launch, then attention into d->att: a prefill chunk of GPU_PREFILL_FLASH_ROWS rows or
 * more on the tensor cores (prefill_attn, over the sequence's paged keys), else decode
 * attention (each row over its own sequence). */
static void layer_attention(struct gpu_decoder *d, int l, int R, uint16_t *kp, uint16_t *vp)
{
    const struct cuda_api *api = d->api;
    const struct gpu_model *m = d->m;
    const struct tfm_config *c = &d->c;
    const struct tfm_layout *a = &m->at;
    int H = c->n_heads, K = c->n_kv_heads, D = c->head_dim;
    const uint16_t *qn = c->qk_norm ? gpu_model_w(m, a->q_norm, (size_t)D, l) : NULL;
    const uint16_t *kn = c->qk_norm ? gpu_model_w(m, a->k_norm, (size_t)D, l) : NULL;
    GPU_CHECK(api, api->decode_qkv(d->q, kp, vp, d->qlin, d->klin, d->v, qn, kn, c->rms_norm_eps,
                                   d->d_pos, d->rope, d->d_table, d->max_blocks, d->d_len, R, H,
                                   K, D, GPU_KV_BLOCK));
    if (d->one_seq && d->flash && R >= GPU_PREFILL_FLASH_ROWS)
        GPU_CHECK(api, api->prefill_attn(d->att, d->q, kp, vp, d->d_table, d->d_pos, R, H, K, D,
                                         GPU_KV_BLOCK));
    else
        GPU_CHECK(api, api->decode_attn(d->att, d->q, kp, vp, d->d_table, d->max_blocks, d->d_len,
                                        R, H, K, D, GPU_KV_BLOCK));
}

/* Layer l on the R rows of d->x (in place), the rows' tables / positions / lengths
 * already on the device. Up to d->small rows (decode steps) take gemv: the RMSNorms
 * and the bf16 rounding folded into the products, q/k/v and gate/up/SwiGLU each one
 * launch (7 launches a layer); more rows (prefill chunks, large batches) RMSNorm, the
 * bf16 conversion and cuBLASLt. The same operands and operations either way; the sums
 * differ in order. */
static void layer_forward(struct gpu_decoder *d, int l, int R)
{
    const struct cuda_api *api = d->api;
    const struct gpu_model *m = d->m;
    const struct tfm_config *c = &d->c;
    const struct tfm_layout *a = &m->at;
    int C = c->hidden_size, HD = c->n_heads * c->head_dim, KD = c->n_kv_heads * c->head_dim;
    int F = c->intermediate_size;
    float eps = c->rms_norm_eps;
    size_t layer = (size_t)d->n_blocks * pool_values_per_block(c) * (size_t)l;
    uint16_t *kp = d->kpool + layer, *vp = d->vpool + layer;
    size_t Cz = (size_t)C, HDz = (size_t)HD, KDz = (size_t)KD, Fz = (size_t)F;
    const uint16_t *wq = gpu_model_w(m, a->wq, HDz * Cz, l), *wk = gpu_model_w(m, a->wk, KDz * Cz, l);
    const uint16_t *wv = gpu_model_w(m, a->wv, KDz * Cz, l), *wo = gpu_model_w(m, a->wo, Cz * HDz, l);
    const uint16_t *wg = gpu_model_w(m, a->w_gate, Fz * Cz, l);
    const uint16_t *wu = gpu_model_w(m, a->w_up, Fz * Cz, l);
    const uint16_t *wd = gpu_model_w(m, a->w_down, Cz * Fz, l);
    const uint16_t *ln1 = gpu_model_w(m, a->ln1, Cz, l), *ln2 = gpu_model_w(m, a->ln2, Cz, l);
    const float *bq = m->bq ? m->bq + l * HDz : NULL, *bk = m->bk ? m->bk + l * KDz : NULL;
    const float *bv = m->bv ? m->bv + l * KDz : NULL;

    int acc = d->tp_rank == 0; /* the residual, added once (see residual_sum) */
    if (R <= d->small) {
        small_linear(d, d->x, R, C, ln1, (float *const[3]){d->qlin, d->klin, d->v},
                     (const uint16_t *const[3]){wq, wk, wv}, (const float *const[3]){bq, bk, bv},
                     (const int[3]){HD, KD, KD}, 0, 0);
        layer_attention(d, l, R, kp, vp);
        small_linear(d, d->att, R, HD, NULL, (float *const[3]){d->x},
                     (const uint16_t *const[3]){wo}, NULL, (const int[3]){C}, acc, 0);
        residual_sum(d, R);
        small_linear(d, d->x, R, C, ln2, (float *const[3]){d->act, NULL},
                     (const uint16_t *const[3]){wg, wu}, NULL, (const int[3]){F, F}, 0, 1);
        small_linear(d, d->act, R, F, NULL, (float *const[3]){d->x},
                     (const uint16_t *const[3]){wd}, NULL, (const int[3]){C}, acc, 0);
        residual_sum(d, R);
        return;
    }
    GPU_CHECK(api, api->rmsnorm_fwd(d->h, d->x, ln1, R, C, eps));
    to_bf16(d, d->h, (int64_t)R * C);
    linear(d, d->qlin, d->hb, wq, bq, R, C, HD, 0);
    linear(d, d->klin, d->hb, wk, bk, R, C, KD, 0);
    linear(d, d->v, d->hb, wv, bv, R, C, KD, 0);
    layer_attention(d, l, R, kp, vp);
    to_bf16(d, d->att, (int64_t)R * HD);
    linear(d, d->x, d->hb, wo, NULL, R, HD, C, acc);
    residual_sum(d, R);
    GPU_CHECK(api, api->rmsnorm_fwd(d->h, d->x, ln2, R, C, eps));
    to_bf16(d, d->h, (int64_t)R * C);
    linear(d, d->gate, d->hb, wg, NULL, R, C, F, 0);
    linear(d, d->up, d->hb, wu, NULL, R, C, F, 0);
    GPU_CHECK(api, api->swiglu_fwd(d->act, NULL, d->gate, d->up, (int64_t)R * F));
    to_bf16(d, d->act, (int64_t)R * F);
    linear(d, d->x, d->hb, wd, NULL, R, F, C, acc);
    residual_sum(d, R);
}

/* The kernels of the forward of R staged rows: embedding, layers, and the logits (V)
 * of rows [first_logit, R) into d->logits (none when first_logit == R). */
static void forward_kernels(struct gpu_decoder *d, int R, int first_logit)
{
    const struct cuda_api *api = d->api;
    const struct tfm_config *c = &d->c;
    int C = c->hidden_size, V = c->vocab_size, n = R - first_logit;
    GPU_CHECK(api, api->embed_gather(d->x, gpu_model_w(d->m, d->m->at.embed, 0, 0), d->d_tok, R,
                                     C, V));
    residual_sum(d, R);
    for (int l = 0; l < c->n_layers; l++) layer_forward(d, l, R);
    if (n == 0) return;
    const uint16_t *head = gpu_model_w(d->m, d->m->at.lm_head, 0, 0);
    const uint16_t *ln_f = gpu_model_w(d->m, d->m->at.ln_f, 0, 0);
    if (n <= d->small) {
        small_linear(d, d->x + (size_t)first_logit * C, n, C, ln_f,
                     (float *const[3]){d->logits}, (const uint16_t *const[3]){head}, NULL,
                     (const int[3]){V}, 0, 0);
        return;
    }
    GPU_CHECK(api, api->rmsnorm_fwd(d->h, d->x + (size_t)first_logit * C, ln_f, n, C,
                                    c->rms_norm_eps));
    to_bf16(d, d->h, (int64_t)n * C);
    linear(d, d->logits, d->hb, head, NULL, n, C, V, 0);
}

/* forward_kernels, its decode kernels launched overlapped when d->overlap (the
 * module's setting is on for these launches only). */
static void overlapped_kernels(struct gpu_decoder *d, int R, int first_logit)
{
    if (d->overlap && !overlap_set(d, 1))
        FATAL("gpu decoder: overlapped launches, on before, are refused now");
    forward_kernels(d, R, first_logit);
    if (d->overlap) overlap_set(d, 0);
}

/* The forward of R rows whose tokens are given and whose positions, lengths and
 * tables are staged (h_pos, h_len, h_table) -- one_seq: the rows are one sequence's
 * tokens in order (a prefill chunk) --: the inputs are copied to the GPU, then the
 * kernels run -- as a CUDA graph recorded the first time this (R, first_logit,
 * one_seq) comes, when graphs are on: one launch instead of some 20 a layer. */
static void rows_forward(struct gpu_decoder *d, const int32_t *tokens, int R, int first_logit,
                         int one_seq)
{
    const struct cuda_api *api = d->api;
    int Vl = d->c.vocab_size;
    for (int r = 0; r < R; r++) {
        if (tokens[r] < 0 || tokens[r] >= d->V_full)
            FATAL("gpu decoder: token %d outside the vocabulary of %d", tokens[r], d->V_full);
        d->h_tok[r] = gpu_vocab_row(tokens[r], d->v0, Vl);
    }
    GPU_CHECK(api, api->to_device(d->d_tok, d->h_tok, (size_t)R * sizeof *d->h_tok));
    GPU_CHECK(api, api->to_device(d->d_pos, d->h_pos, (size_t)R * sizeof *d->h_pos));
    GPU_CHECK(api, api->to_device(d->d_len, d->h_len, (size_t)R * sizeof *d->h_len));
    GPU_CHECK(api, api->to_device(d->d_table, d->h_table,
                                  (size_t)R * d->max_blocks * sizeof *d->h_table));
    d->logit_rows = R - first_logit;
    d->one_seq = one_seq;
    if (!d->graphs) {
        overlapped_kernels(d, R, first_logit);
        return;
    }
    int mode = first_logit == R ? 0 : first_logit == 0 ? 1 : 2;
    void **g = &d->graph[((size_t)R * 3 + (size_t)mode) * 2 + (size_t)(one_seq != 0)];
    if (mode == 2 && first_logit != R - 1)
        FATAL("gpu decoder: logits from row %d of %d (graphs record none, all or the last)",
              first_logit, R);
    if (!*g) {
        GPU_CHECK(api, api->graph_begin());
        overlapped_kernels(d, R, first_logit);
        GPU_CHECK(api, api->graph_end(g));
    }
    GPU_CHECK(api, api->graph_launch(*g));
}

/* Stages row r as the token at position pos of slot. */
static void stage_row(struct gpu_decoder *d, int r, int slot, int pos)
{
    d->h_pos[r] = pos;
    d->h_len[r] = pos + 1;
    memcpy(d->h_table + (size_t)r * d->max_blocks, slot_table(d, slot),
           (size_t)d->max_blocks * sizeof *d->h_table);
}

int gpu_decoder_prefill(struct gpu_decoder *d, int slot, const int32_t *tokens, int n,
                        float *last_logits)
{
    if (slot < 0 || slot >= d->n_slots || n < 1)
        FATAL("gpu_decoder_prefill: slot %d of %d, %d tokens", slot, d->n_slots, n);
    int len0 = d->len[slot];
    if (len0 + n > d->cap || blocks_needed(d, slot, len0 + n) > d->n_free) return -1;
    blocks_grow(d, slot, len0 + n);
    for (int i0 = 0; i0 < n; i0 += d->chunk) {
        int R = n - i0 < d->chunk ? n - i0 : d->chunk;
        for (int r = 0; r < R; r++) stage_row(d, r, slot, len0 + i0 + r);
        rows_forward(d, tokens + i0, R, i0 + R == n ? R - 1 : R, 1);
    }
    d->len[slot] = len0 + n;
    if (last_logits)
        GPU_CHECK(d->api, d->api->to_host(last_logits, d->logits,
                                          (size_t)d->c.vocab_size * sizeof *last_logits));
    GPU_CHECK(d->api, d->api->sync());
    return 0;
}

int gpu_decoder_step(struct gpu_decoder *d, const int *slots, const int32_t *tokens, int n,
                     float *logits)
{
    if (n < 1 || n > d->n_slots) FATAL("gpu_decoder_step: %d rows, %d slots", n, d->n_slots);
    int need = 0;
    for (int i = 0; i < n; i++) {
        int s = slots[i];
        if (s < 0 || s >= d->n_slots) FATAL("gpu_decoder_step: slot %d of %d", s, d->n_slots);
        for (int j = 0; j < i; j++)
            if (slots[j] == s) FATAL("gpu_decoder_step: slot %d twice in one step", s);
        if (d->len[s] + 1 > d->cap) return -1;
        need += blocks_needed(d, s, d->len[s] + 1);
    }
    if (need > d->n_free) return -1;
    for (int i = 0; i < n; i++) {
        blocks_grow(d, slots[i], d->len[slots[i]] + 1);
        stage_row(d, i, slots[i], d->len[slots[i]]);
    }
    rows_forward(d, tokens, n, 0, 0);
    for (int i = 0; i < n; i++) d->len[slots[i]]++;
    if (logits)
        GPU_CHECK(d->api, d->api->to_host(logits, d->logits,
                                          (size_t)n * d->c.vocab_size * sizeof *logits));
    GPU_CHECK(d->api, d->api->sync());
    return 0;
}

/* A TP > 1 decoder's rows, greedy, at a plain temperature or top-k (then top-p):
 * sampler_sample_tp's steps (include/libra/sampler.h) with the per-row work on the GPU,
 * every row at once -- one exchange of the slots for greedy; at a temperature a max,
 * the slots and the owners' (id, log-prob); for top-k a max and the ranks' candidates
 * -- the slots' small combination on the host. */
static void sample_vocab_parallel(struct gpu_decoder *d, int n, const struct sampler_config *sc,
                                  const int64_t *traj, const int64_t *pos, int32_t *tok,
                                  float *logprob)
{
    const struct cuda_api *api = d->api;
    const int t = d->t, Vl = d->c.vocab_size;
    const size_t R = (size_t)d->max_rows, S = samp_slots(t);
    double *mx = d->d_samp, *xb = mx + R, *plan = xb + S * R, *res = plan + 4 * R;
    double *h_xb = d->h_samp, *h_plan = h_xb + S * R, *h_res = h_plan + 4 * R;
    if (!(sc->temperature > 0)) {
        size_t nx = (size_t)n * 3 * t;
        GPU_CHECK(api, api->vocab_greedy_stats(xb, d->logits, n, Vl, d->v0, d->tp_rank, t));
        d->comm->allreduce_f64(d->comm->ctx, xb, nx, TFM_RED_SUM);
        GPU_CHECK(api, api->to_host(h_xb, xb, nx * sizeof *h_xb));
        for (int r = 0; r < n; r++)
            tok[r] = sampler_tp_greedy_pick(h_xb + (size_t)r * 3 * t, t,
                                            logprob ? &logprob[r] : NULL);
        return;
    }
    const float T = sc->temperature;
    size_t nx = (size_t)n * 2 * t;
    GPU_CHECK(api, api->vocab_sample_max(mx, d->logits, n, Vl, T));
    d->comm->allreduce_f64(d->comm->ctx, mx, (size_t)n, TFM_RED_MAX);
    if (sc->top_k > 0 && sc->top_k < d->V_full) { /* each rank's candidates, merged here */
        int off, nc, kr = sampler_tp_top_k_slot(&d->tp, sc->top_k, d->tp_rank, &off, &nc);
        size_t w = (size_t)t + 2 * (size_t)nc;
        GPU_CHECK(api, api->vocab_sample_topk(xb, d->scratch, d->logits, mx, n, Vl, d->v0, T, kr,
                                              off, nc, d->tp_rank, t));
        d->comm->allreduce_f64(d->comm->ctx, xb, (size_t)n * w, TFM_RED_SUM);
        GPU_CHECK(api, api->to_host(h_xb, xb, (size_t)n * w * sizeof *h_xb));
        for (int r = 0; r < n; r++) {
            struct rng g;
            rng_init(&g, sc->seed, (uint64_t)traj[r], (uint64_t)pos[r], SAMPLER_PURPOSE);
            tok[r] = sampler_tp_top_k_pick(sc, h_xb + (size_t)r * w, t, nc, &g,
                                           logprob ? &logprob[r] : NULL, d->h_topk);
        }
        return;
    }
    GPU_CHECK(api, api->vocab_sample_sums(xb, d->scratch, d->logits, mx, n, Vl, T, d->tp_rank, t));
    d->comm->allreduce_f64(d->comm->ctx, xb, nx, TFM_RED_SUM);
    GPU_CHECK(api, api->to_host(h_xb, xb, nx * sizeof *h_xb));
    for (int r = 0; r < n; r++) {
        struct rng g;
        struct sampler_tp_draw dr;
        rng_init(&g, sc->seed, (uint64_t)traj[r], (uint64_t)pos[r], SAMPLER_PURPOSE);
        int owner = sampler_tp_owner(h_xb + (size_t)r * 2 * t, t, rng_uniform(&g), &dr);
        double *pl = h_plan + 4 * (size_t)r;
        pl[0] = owner == d->tp_rank;
        pl[1] = dr.u;
        pl[2] = dr.own_start;
        pl[3] = dr.total_exact;
    }
    GPU_CHECK(api, api->to_device(plan, h_plan, 4 * (size_t)n * sizeof *h_plan));
    GPU_CHECK(api, api->vocab_sample_pick(res, d->logits, d->scratch, plan, mx, n, Vl, d->v0, T));
    d->comm->allreduce_f64(d->comm->ctx, res, 2 * (size_t)n, TFM_RED_SUM);
    GPU_CHECK(api, api->to_host(h_res, res, 2 * (size_t)n * sizeof *h_res));
    for (int r = 0; r < n; r++) {
        tok[r] = (int32_t)h_res[2 * r];
        if (logprob) logprob[r] = (float)h_res[2 * r + 1];
    }
}

int gpu_decoder_samples_on_gpu(const struct gpu_decoder *d, const struct sampler_config *sc)
{
    if (d->t == 1 || !(sc->temperature > 0)) return 1;
    if (sc->top_k > 0 && sc->top_k < d->V_full) { /* top-k (then top-p): a bounded merge */
        int off, n;
        sampler_tp_top_k_slot(&d->tp, sc->top_k, d->tp_rank, &off, &n);
        return n <= GPU_SAMPLE_TOPK_MAX;
    }
    return sc->top_p >= 1.0f;
}

void gpu_decoder_sample(struct gpu_decoder *d, int n, const struct sampler_config *sc,
                        const int64_t *traj, const int64_t *pos, int32_t *tok, float *logprob)
{
    const struct cuda_api *api = d->api;
    if (!gpu_decoder_samples_on_gpu(d, sc))
        FATAL("gpu_decoder_sample: a TP-%d decoder samples top-p alone, or top-k over more "
              "than %d candidates, on the host (sample its logits with sampler_sample_tp)",
              d->t, GPU_SAMPLE_TOPK_MAX);
    if (n != d->logit_rows)
        FATAL("gpu_decoder_sample: %d rows asked for, the last call left %d", n, d->logit_rows);
    if (d->t > 1) {
        sample_vocab_parallel(d, n, sc, traj, pos, tok, logprob);
        return;
    }
    GPU_CHECK(api, api->to_device(d->d_traj, traj, (size_t)n * sizeof *traj));
    GPU_CHECK(api, api->to_device(d->d_spos, pos, (size_t)n * sizeof *pos));
    GPU_CHECK(api, api->sample(d->d_out_tok, logprob ? d->d_out_lp : NULL, d->logits, n,
                               d->c.vocab_size, d->d_traj, d->d_spos, sc->temperature,
                               sc->top_k, sc->top_p, sc->seed, d->scratch));
    GPU_CHECK(api, api->to_host(tok, d->d_out_tok, (size_t)n * sizeof *tok));
    if (logprob) GPU_CHECK(api, api->to_host(logprob, d->d_out_lp, (size_t)n * sizeof *logprob));
    GPU_CHECK(api, api->sync());
}

void gpu_decoder_logits(struct gpu_decoder *d, float *logits)
{
    GPU_CHECK(d->api, d->api->to_host(logits, d->logits,
                                      (size_t)d->logit_rows * d->c.vocab_size * sizeof *logits));
}
