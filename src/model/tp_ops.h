/*
 * Private to src/model/: the tensor-parallel kernels -- the ones that talk to the TP
 * group through struct tfm_comm (include/libra/tfm_tp.h): the sum all-reduce of
 * activations, the vocabulary-parallel embedding and the vocabulary-parallel
 * log-softmax of the output head. Glossary as in include/libra/tfm.h; Vl = v1 - v0 the
 * vocabulary columns of a logit row held by this rank, N rows.
 *
 * tp == NULL or tp->t == 1 is the single-rank model: tp_allreduce_sum does nothing and
 * the embedding functions are embed_forward / embed_backward, so the shared layer code
 * gives bitwise the single-rank results. The log-softmax functions are only for t > 1
 * (the callers use cpu_ops.h's for the single-rank model).
 */
#ifndef LIBRA_MODEL_TP_OPS_H
#define LIBRA_MODEL_TP_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "libra/tfm_tp.h"

/* 1 when tp shards the model over more than one rank. */
static inline int tp_parallel(const struct tfm_tp *tp) { return tp && tp->t > 1; }

/* x (n) = the sum of x over the TP group (collective); nothing when !tp_parallel. */
void tp_allreduce_sum(const struct tfm_tp *tp, float *x, size_t n);

/* Vocabulary-parallel embedding: x (N, C) = embed[tokens] with embed this rank's rows
 * [v0, v1) (Vl, C) and tokens GLOBAL ids in [0, V): each rank copies the rows it holds,
 * zeros elsewhere, then one (N, C) sum all-reduce (exact: one non-zero term). */
void tp_embed_forward(const struct tfm_tp *tp, float *x, const float *embed,
                      const int32_t *tokens, int N, int C);
/* dembed (Vl, C) rows tokens[i] - v0 += dx[i] for the tokens held here (dx (N, C) is
 * the full gradient on every rank: no communication). */
void tp_embed_backward(const struct tfm_tp *tp, float *dembed, const float *dx,
                       const int32_t *tokens, int N, int C);

/* Vocabulary-parallel log-softmax of N logit rows, this rank's columns x (N, Vl); z =
 * x / temperature. Collective: one f32 max all-reduce of N and one f64 sum all-reduce
 * of 2N doubles (3N with entropy). Same formulas as logsoftmax_forward (float z, float
 * exp, sums in double); only the order of the sum differs (rank partial sums).
 *   logprob (N): lp[targets[i]] (GLOBAL targets in [-1, V)), 0 where target < 0;
 *   mx (N), lsum (N): row max of z and log sum exp(z - mx), for the backward;
 *   entropy (N) or NULL: -sum p lp, in double;
 *   red: 3N doubles of scratch. */
void tp_logsoftmax_forward(const struct tfm_tp *tp, float *logprob, float *mx, double *lsum,
                           double *entropy, double *red, const float *x,
                           const int32_t *targets, int N, float temperature);
/* dx (N, Vl) += dlogprob[i] (onehot - p) / temperature, from the forward's mx, lsum.
 * Local (no communication). */
void tp_logsoftmax_backward(const struct tfm_tp *tp, float *dx, const float *dlogprob,
                            const float *x, const int32_t *targets, const float *mx,
                            const double *lsum, int N, float temperature);

#endif
