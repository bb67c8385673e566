/*
 * Tensor-parallel bookkeeping (include/libra/tfm_tp.h): which degrees can shard a
 * model, a rank's shard shapes, the table of the slices it holds (Megatron layout:
 * column-parallel q/k/v/gate/up and vocabulary-parallel embed/lm_head by rows,
 * row-parallel o_proj/down_proj by columns, norms whole), copying slices between full
 * and local parameter blocks, and the gradient helpers of TP training (sum of partial
 * gradients, global squared norm). Glossary as in include/libra/tfm.h; t the degree.
 *
 * Limits: t a power of two (the device layer splits power-of-two groups); the
 * vocabulary split is balanced to within one row; kv heads are replicated when K < t
 * (t % K == 0), so each rank still holds whole heads.
 */
#include "libra/tfm_tp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "tp_ops.h"

int tfm_tp_check(const struct tfm_config *c, int t, char *err, size_t errlen)
{
#define BAD(...)                                                   \
    do {                                                           \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__);     \
        return -1;                                                 \
    } while (0)
    if (tfm_config_check(c, err, errlen) != 0) return -1;
    if (t < 1 || (t & (t - 1)) != 0)
        BAD("tensor parallel degree %d must be a power of two (1, 2, 4, 8, ...)", t);
    if (c->n_heads % t != 0)
        BAD("tensor parallel degree %d does not divide num_attention_heads = %d", t,
            c->n_heads);
    if (c->intermediate_size % t != 0)
        BAD("tensor parallel degree %d does not divide intermediate_size = %d", t,
            c->intermediate_size);
    if (c->n_kv_heads % t != 0 && t % c->n_kv_heads != 0)
        BAD("tensor parallel degree %d and num_key_value_heads = %d: one must divide the "
            "other (kv heads are split when K >= t, replicated when K < t)", t, c->n_kv_heads);
    if (t > c->vocab_size)
        BAD("tensor parallel degree %d exceeds vocab_size = %d", t, c->vocab_size);
    return 0;
#undef BAD
}

/* Checks that a caller's communicator fits (size, rank, callbacks). */
static void check_comm(const struct tfm_comm *cm, const char *what, int size, int rank)
{
    if (!cm)
        FATAL("tfm_tp_init: %s is NULL but a group of %d ranks needs one", what, size);
    if (cm->size != size || cm->rank != rank)
        FATAL("tfm_tp_init: %s has size %d and rank %d, expected size %d and rank %d", what,
              cm->size, cm->rank, size, rank);
    if (!cm->allreduce_f32 || !cm->allreduce_f64 || !cm->allreduce_i32)
        FATAL("tfm_tp_init: %s lacks an all-reduce callback (f32, f64 and i32 are needed)",
              what);
}

void tfm_tp_init(struct tfm_tp *tp, const struct tfm_config *c, int t, int rank,
                 const struct tfm_comm *comm, const struct tfm_comm *kv_comm)
{
    char err[256];
    if (tfm_tp_check(c, t, err, sizeof err) != 0) FATAL("tfm_tp_init: %s", err);
    if (rank < 0 || rank >= t) FATAL("tfm_tp_init: rank %d outside [0, %d)", rank, t);
    int H = c->n_heads, K = c->n_kv_heads, V = c->vocab_size;
    memset(tp, 0, sizeof *tp);
    tp->full = *c;
    tp->t = t;
    tp->rank = rank;
    tp->v0 = (int)((int64_t)rank * V / t);
    tp->v1 = (int)((int64_t)(rank + 1) * V / t);
    tp->q_head0 = rank * (H / t);
    /* K < t: the q heads of rank i all read kv head i K / t (t/K ranks per kv head) */
    tp->kv_head0 = K >= t ? rank * (K / t) : rank / (t / K);
    tp->local = *c;
    tp->local.n_heads = H / t;
    tp->local.n_kv_heads = K >= t ? K / t : 1;
    tp->local.intermediate_size = c->intermediate_size / t;
    tp->local.vocab_size = tp->v1 - tp->v0;
    if (t > 1) {
        check_comm(comm, "the TP communicator", t, rank);
        tp->comm = comm;
    } else {
        tp->comm = comm; /* unused */
    }
    if (K < t) {
        check_comm(kv_comm, "the kv-head communicator", t / K, rank % (t / K));
        tp->kv_comm = kv_comm;
    } else if (kv_comm) {
        FATAL("tfm_tp_init: a kv-head communicator was given but num_key_value_heads = %d >= "
              "t = %d shards the kv heads (pass NULL)", K, t);
    }
}

/* ---------------------------------------------------------------- slices */

/* How a tensor family is split. */
enum split { SPLIT_VOCAB, SPLIT_WHOLE, SPLIT_Q, SPLIT_KV, SPLIT_FF, SPLIT_O, SPLIT_DOWN };

/* The family of the local tensor at data (a view into p). */
static enum split split_of(const struct tfm_config *lc, const struct tfm_params *p,
                           const float *data)
{
    size_t L = (size_t)lc->n_layers, C = (size_t)lc->hidden_size, D = (size_t)lc->head_dim;
    size_t HD = (size_t)lc->n_heads * D, KD = (size_t)lc->n_kv_heads * D;
    size_t F = (size_t)lc->intermediate_size;
#define IN(ptr, count) ((ptr) && data >= (ptr) && data < (ptr) + (count))
    if (IN(p->embed, (size_t)lc->vocab_size * C) || IN(p->lm_head, (size_t)lc->vocab_size * C))
        return SPLIT_VOCAB;
    if (IN(p->wq, L * HD * C) || IN(p->bq, L * HD)) return SPLIT_Q;
    if (IN(p->wk, L * KD * C) || IN(p->bk, L * KD) || IN(p->wv, L * KD * C) || IN(p->bv, L * KD))
        return SPLIT_KV;
    if (IN(p->wo, L * C * HD)) return SPLIT_O;
    if (IN(p->w_gate, L * F * C) || IN(p->w_up, L * F * C)) return SPLIT_FF;
    if (IN(p->w_down, L * C * F)) return SPLIT_DOWN;
#undef IN
    return SPLIT_WHOLE; /* ln1, ln2, ln_f, q_norm, k_norm */
}

int tfm_tp_slices(const struct tfm_tp *tp, const struct tfm_params *p_local,
                  struct tfm_slice *out, int max)
{
    const struct tfm_config *lc = &tp->local;
    int n = tfm_tensors(lc, p_local, NULL, 0);
    struct tfm_tensor *lt = xmalloc((size_t)n * sizeof *lt);
    tfm_tensors(lc, p_local, lt, n);
    int64_t D = lc->head_dim, t = tp->t, K = tp->full.n_kv_heads;
    int64_t Fl = lc->intermediate_size, f0 = (int64_t)tp->rank * Fl;
    for (int i = 0; i < n && i < max; i++) {
        struct tfm_slice *s = &out[i];
        int64_t nr = lt[i].dims[0], nc = lt[i].ndim == 2 ? lt[i].dims[1] : 1;
        memset(s, 0, sizeof *s);
        s->tensor = i;
        snprintf(s->name, sizeof s->name, "%s", lt[i].name);
        s->local = lt[i].data;
        s->nr = nr;
        s->nc = nc;
        s->full_rows = nr;
        s->full_cols = nc;
        s->replicas = 1;
        switch (split_of(lc, p_local, lt[i].data)) {
        case SPLIT_VOCAB:
            s->full_rows = tp->full.vocab_size;
            s->r0 = tp->v0;
            break;
        case SPLIT_WHOLE:
            s->replicas = (int)t;
            break;
        case SPLIT_Q:
            s->full_rows = (int64_t)tp->full.n_heads * D;
            s->r0 = (int64_t)tp->q_head0 * D;
            break;
        case SPLIT_KV:
            s->full_rows = K * D;
            s->r0 = (int64_t)tp->kv_head0 * D;
            if (K < t) s->replicas = (int)(t / K);
            break;
        case SPLIT_FF:
            s->full_rows = tp->full.intermediate_size;
            s->r0 = f0;
            break;
        case SPLIT_O:
            s->full_cols = (int64_t)tp->full.n_heads * D;
            s->c0 = (int64_t)tp->q_head0 * D;
            break;
        case SPLIT_DOWN:
            s->full_cols = tp->full.intermediate_size;
            s->c0 = f0;
            break;
        }
        /* the lowest rank of the replicas: they are consecutive ranks */
        s->primary = tp->rank % s->replicas == 0;
    }
    free(lt);
    return n;
}

/* The slices of this rank and the full model's tensors (freed by the caller). */
static int slices_and_tensors(const struct tfm_tp *tp, const struct tfm_params *full,
                              const struct tfm_params *local, struct tfm_slice **sl,
                              struct tfm_tensor **ft, const char *who)
{
    if (full->n != tfm_param_count(&tp->full) || local->n != tfm_param_count(&tp->local))
        FATAL("%s: full block %zu floats (model %zu), local %zu (shard %zu): allocate them "
              "with tfm_params_alloc(&tp->full) and (&tp->local)", who, full->n,
              tfm_param_count(&tp->full), local->n, tfm_param_count(&tp->local));
    int n = tfm_tp_slices(tp, local, NULL, 0);
    *sl = xmalloc((size_t)n * sizeof **sl);
    *ft = xmalloc((size_t)n * sizeof **ft);
    tfm_tp_slices(tp, local, *sl, n);
    if (tfm_tensors(&tp->full, full, *ft, n) != n)
        FATAL("%s: the shard and the model have different tensor tables", who);
    return n;
}

/* Copies slice s between its block of the full tensor and its local storage. */
static void copy_slice(const struct tfm_slice *s, float *full_data, int to_local)
{
    for (int64_t r = 0; r < s->nr; r++) {
        float *f = full_data + (s->r0 + r) * s->full_cols + s->c0;
        float *l = s->local + r * s->nc;
        if (to_local)
            memcpy(l, f, (size_t)s->nc * sizeof(float));
        else
            memcpy(f, l, (size_t)s->nc * sizeof(float));
    }
}

void tfm_tp_shard(const struct tfm_tp *tp, const struct tfm_params *full,
                  struct tfm_params *local)
{
    struct tfm_slice *sl;
    struct tfm_tensor *ft;
    int n = slices_and_tensors(tp, full, local, &sl, &ft, "tfm_tp_shard");
    for (int i = 0; i < n; i++) copy_slice(&sl[i], ft[sl[i].tensor].data, 1);
    free(ft);
    free(sl);
}

void tfm_tp_unshard(const struct tfm_tp *tp, const struct tfm_params *local,
                    struct tfm_params *full)
{
    struct tfm_slice *sl;
    struct tfm_tensor *ft;
    int n = slices_and_tensors(tp, full, local, &sl, &ft, "tfm_tp_unshard");
    for (int i = 0; i < n; i++) copy_slice(&sl[i], ft[sl[i].tensor].data, 0);
    free(ft);
    free(sl);
}

/* ---------------------------------------------------------------- gradients */

void tfm_tp_reduce_grads(const struct tfm_tp *tp, struct tfm_params *g)
{
    if (!tp_parallel(tp)) return;
    const struct tfm_config *lc = &tp->local;
    size_t L = (size_t)lc->n_layers, D = (size_t)lc->head_dim, C = (size_t)lc->hidden_size;
    size_t KD = (size_t)lc->n_kv_heads * D;
    /* q_norm and k_norm act per head: each rank's gradient sums over its heads only.
     * They are adjacent in the layout (tfm.c): one call. */
    if (lc->qk_norm) {
        if (g->k_norm != g->q_norm + L * D)
            FATAL("tfm_tp_reduce_grads: q_norm and k_norm are not adjacent in the block");
        tp->comm->allreduce_f32(tp->comm->ctx, g->q_norm, 2 * L * D, TFM_RED_SUM);
    }
    /* A replicated kv head gets from each of its t/K ranks the share of that rank's q
     * heads. wk | bk | wv | bv are adjacent in the layout: one call. */
    if (tp->full.n_kv_heads < tp->t) {
        float *end = g->bv ? g->bv + L * KD : g->wv + L * KD * C;
        tp->kv_comm->allreduce_f32(tp->kv_comm->ctx, g->wk, (size_t)(end - g->wk), TFM_RED_SUM);
    }
}

double tfm_tp_grad_sq(const struct tfm_tp *tp, const struct tfm_params *g)
{
    int n = tfm_tp_slices(tp, g, NULL, 0);
    struct tfm_slice *sl = xmalloc((size_t)n * sizeof *sl);
    tfm_tp_slices(tp, g, sl, n);
    double ss = 0;
    for (int i = 0; i < n; i++) {
        if (!sl[i].primary) continue; /* a replica counted on its primary rank */
        size_t m = (size_t)(sl[i].nr * sl[i].nc);
        for (size_t j = 0; j < m; j++) ss += (double)sl[i].local[j] * sl[i].local[j];
    }
    free(sl);
    if (tp_parallel(tp)) tp->comm->allreduce_f64(tp->comm->ctx, &ss, 1, TFM_RED_SUM);
    return ss;
}
