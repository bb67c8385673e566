/*
 * Megatron-style tensor parallelism (TP) of the CPU transformer, MPI-free: the model
 * layer reduces over a group of ranks only through struct tfm_comm, a set of
 * all-reduce callbacks the caller supplies (over MPI communicators in the device
 * layer, over threads in the tests).
 *
 * Glossary as in include/libra/tfm.h (V C L H K D F T S); t the TP degree, Vl = v1 - v0
 * the vocabulary rows a rank holds.
 *
 * Sharding of a TP-t model (rank i of t):
 *   attention heads   q heads [i H/t, (i+1) H/t): wq, bq rows, wo columns (column- then
 *                     row-parallel); kv heads [i K/t, (i+1) K/t) when K >= t, else the
 *                     ONE kv head i K/t its q heads read, replicated on t/K ranks
 *   MLP               F/t rows of w_gate, w_up, the same columns of w_down
 *   vocabulary        rows [v0, v1) of embed and lm_head, v0 = floor(i V / t)
 *   norms             ln1, ln2, ln_f, q_norm, k_norm whole on every rank
 * Communication per layer: one sum all-reduce of the (T, C) o_proj output and one of
 * the down_proj output in the forward; one of dh (the input gradient of the q/k/v and
 * of the gate/up projections) before each norm backward in the backward. The
 * embedding is one (T, C) all-reduce; the output head never gathers logits across the
 * vocabulary: a chunk of rows costs one f32 max all-reduce and one f64 sum all-reduce
 * (2 or 3 doubles a row), plus in the backward one (rows, C) all-reduce of dh.
 *
 * Every rank of a TP group must make the same calls with the same arguments in the
 * same order (batches, prefill/step, sampling): every function below that takes a tp
 * with t > 1 and says "collective" runs all-reduces on tp->comm. The all-reduce must
 * give every rank the same bits (sum in a fixed order), so that replicated values stay
 * identical across the group.
 *
 * t == 1 (comm may be NULL) is the single-rank model: every function reduces to the
 * single-rank code and gives bitwise its results.
 */
#ifndef LIBRA_TFM_TP_H
#define LIBRA_TFM_TP_H

#include <stddef.h>
#include <stdint.h>

#include "libra/tfm.h"

enum tfm_red_op { TFM_RED_SUM, TFM_RED_MAX, TFM_RED_MIN };

struct tfm_comm {               /* a group of ranks the model reduces over; supplied by the caller */
    int rank, size;
    void *ctx;
    /* in-place all-reduce of n elements over the group; every rank calls it with the
     * same n and op and gets the same bits */
    void (*allreduce_f32)(void *ctx, float *x, size_t n, enum tfm_red_op op);
    void (*allreduce_f64)(void *ctx, double *x, size_t n, enum tfm_red_op op);
    void (*allreduce_i32)(void *ctx, int32_t *x, size_t n, enum tfm_red_op op);
};

struct tfm_tp {                 /* one rank's part of a TP-t model */
    struct tfm_config full;     /* the whole model */
    struct tfm_config local;    /* this rank's shard shapes: n_heads H/t, n_kv_heads K/t (or 1 when
                                 * K < t: replicated), intermediate_size F/t, vocab_size v1 - v0 */
    int t, rank;
    int v0, v1;                 /* vocabulary rows [v0, v1) of embed and lm_head held here
                                 * (balanced split: v0 = rank*V/t floor) */
    int q_head0, kv_head0;      /* first global q head / kv head held */
    const struct tfm_comm *comm;    /* the TP group (size t, comm->rank == rank); may be NULL when t == 1 */
    const struct tfm_comm *kv_comm; /* ranks holding the same replicated kv head (K < t: size t/K,
                                     * kv_comm->rank == rank % (t/K)), else NULL */
};

/* 0, or -1 + message when t can't shard c: t in {1,2,4,8,...} must divide H and F,
 * K % t == 0 or t % K == 0, t <= V (and c must pass tfm_config_check). The message
 * names the field, e.g. "tensor parallel degree 4 does not divide
 * num_attention_heads = 6". */
int tfm_tp_check(const struct tfm_config *c, int t, char *err, size_t errlen);
/* Fills tp for rank `rank` of t. Aborts (FATAL) when tfm_tp_check fails or the
 * communicators do not match (comm: size t, rank `rank`, required when t > 1;
 * kv_comm: required exactly when K < t, size t/K, rank rank % (t/K): the ranks
 * [g t/K, (g+1) t/K) share kv head g). The comms must outlive tp, and tp everything
 * created from it (states, decoders). */
void tfm_tp_init(struct tfm_tp *tp, const struct tfm_config *c, int t, int rank,
                 const struct tfm_comm *comm, const struct tfm_comm *kv_comm);

/* One tensor's slice held by a rank: a (rows x cols) block of the full Hugging Face
 * tensor (tfm_tensors order and names; a 1-D tensor has full_cols = nc = 1), stored
 * contiguously row-major at `local`. Replicated tensors (norms) are the whole tensor. */
struct tfm_slice {
    int tensor;                 /* index in tfm_tensors(&tp->full, ...) */
    char name[96];
    int64_t full_rows, full_cols;
    int64_t r0, nr, c0, nc;
    float *local;
    int replicas;               /* ranks holding this same block: t (norms), t/K (kv heads when
                                 * K < t), else 1 */
    int primary;                /* 1 on exactly one of those ranks (the lowest): write or count
                                 * the block once from there */
};
/* Every slice this rank holds of the full model (count returned, like tfm_tensors:
 * only the first max are written; out may be NULL with max 0 to count); local points
 * into p_local (a tfm_params allocated with tfm_params_alloc(&tp->local)).
 * Column-parallel q/k/v(+bias)/gate/up and vocab-parallel embed/lm_head: row ranges;
 * row-parallel o_proj/down_proj: column ranges; norms: whole. The slices cover p_local
 * exactly once. */
int tfm_tp_slices(const struct tfm_tp *tp, const struct tfm_params *p_local,
                  struct tfm_slice *out, int max);
/* Copies this rank's slices out of the full parameters (for loading/sharding), and the
 * reverse: writes this rank's slices into a full block (the caller gathers ranks with
 * it; replicated blocks are written identically by each replica). Local only. */
void tfm_tp_shard(const struct tfm_tp *tp, const struct tfm_params *full,
                  struct tfm_params *local);
void tfm_tp_unshard(const struct tfm_tp *tp, const struct tfm_params *local,
                    struct tfm_params *full);

/* ---- training ---- */

/* A training state for this rank's shard (shapes from tp->local), like tfm_state_create
 * (keep or recompute: the same choice on every rank of the group). The TP state holds
 * per chunk of logit rows 5 doubles + 1 float a row more for the distributed log-softmax. */
struct tfm_state *tfm_state_create_tp(const struct tfm_tp *tp, int max_tokens);
struct tfm_state *tfm_state_create_tp_opts(const struct tfm_tp *tp, int max_tokens,
                                           int recompute);
/* tfm_forward of the whole model on this rank's shard (collective). The batch holds
 * GLOBAL token ids; every rank of the group passes the same batch and gets the same
 * log-probs, entropies and return value (sum_t w_t logprob_t). No logits output (they
 * are never gathered). */
double tfm_forward_tp(const struct tfm_tp *tp, const struct tfm_params *p_local,
                      struct tfm_state *s, const struct tfm_batch *b, float *logprob,
                      float *entropy);
/* tfm_backward on the shard (collective): J returned on every rank; the gradient of
 * this rank's slices is ADDED into g_local (layout of p_local). Sharded tensors get
 * their full gradient; the replicated ln1, ln2, ln_f get it identically on every rank;
 * q_norm/k_norm and replicated kv heads hold partial sums until tfm_tp_reduce_grads. */
double tfm_backward_tp(const struct tfm_tp *tp, const struct tfm_params *p_local,
                       struct tfm_state *s, const struct tfm_batch *b,
                       struct tfm_params *g_local);
/* After tfm_backward_tp (and after summing gradients over data-parallel replicas, if
 * any), sums the gradient parts that are partial on each rank: q_norm/k_norm over comm,
 * replicated kv heads (wk, wv, bk, bv) over kv_comm. Collective (at most one all-reduce
 * on comm and one on kv_comm); a no-op when t == 1. */
void tfm_tp_reduce_grads(const struct tfm_tp *tp, struct tfm_params *g_local);
/* Global squared gradient norm of the whole model (each element counted once:
 * replicated tensors only from their primary rank; one f64 all-reduce of 1 value on
 * comm). Collective; feed sqrt() of it to adamw_step_norm. */
double tfm_tp_grad_sq(const struct tfm_tp *tp, const struct tfm_params *g_local);

#endif
