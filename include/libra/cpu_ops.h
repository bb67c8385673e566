/*
 * Plain-C (+ OpenBLAS) kernels of the CPU transformer, forward and backward. The
 * training path (tfm_forward.c, tfm_backward.c) and the decode engine (tfm_decode.c)
 * call the SAME forward functions, so a token's arithmetic is the same in both; the
 * CUDA module's host stand-in (include/libra/cuda_host.h) computes its kernels with them.
 *
 * Glossary: N rows (tokens, or tokens x heads for per-head ops), C width of a row,
 * H query heads, K kv heads (K | H), D head dim (even), nk key rows, V vocab.
 * All arrays are row-major float32.
 *
 * Conventions:
 *   - Every *_backward ADDS into its gradient outputs (zero them first); a gradient
 *     output passed as NULL is skipped. rope_backward is the exception: in place.
 *   - Outputs never alias inputs unless the comment says "in place".
 *   - Reductions (norms, softmax sums) accumulate in double; results do not depend
 *     on N (row i's output is a function of row i's inputs), except through OpenBLAS,
 *     whose sgemm may round a row differently for different N or a different place
 *     in an attention tile (~1e-7 relative); linear_forward's rows are bitwise
 *     independent of N up to 8 rows (one sgemv per row).
 *   - No threads of our own: all parallelism is OpenBLAS's. Thread rule: results are
 *     bitwise reproducible run to run for a fixed OpenBLAS thread count
 *     (OPENBLAS_NUM_THREADS, default one per core); a different count may change the
 *     last bits. Small sgemv products run on 1 thread (ops.c, "BLAS thread policy"),
 *     a choice made from the shape alone.
 */
#ifndef LIBRA_CPU_OPS_H
#define LIBRA_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

/* ---- linear: y = x W^T + b (torch.nn.Linear; W is (out, in)) ---- */
/* y (N, out) overwritten; x (N, in); w (out, in); b (out) or NULL. */
void linear_forward(float *y, const float *x, const float *w, const float *b, int N, int in,
                    int out);
/* dx (N, in) += dy W; dw (out, in) += dy^T x; db (out) += sum_rows dy. Any of dx, dw,
 * db may be NULL. dy (N, out), x (N, in), w (out, in). */
void linear_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                     const float *w, int N, int in, int out);

/* ---- embedding ---- */
/* x (N, C) = embed[tokens] ; embed (V, C); tokens (N) in [0, V). */
void embed_forward(float *x, const float *embed, const int32_t *tokens, int N, int C);
/* dembed (V, C) rows tokens[i] += dx[i]; dx (N, C). */
void embed_backward(float *dembed, const float *dx, const int32_t *tokens, int N, int C);

/* ---- RMSNorm: y = x / sqrt(mean(x^2) + eps) * w, per row ---- */
/* y (N, C) overwritten (y == x allowed: in place); x (N, C); w (C). For qwen3's
 * per-head q/k norm call it with N = tokens * heads, C = D. */
void rmsnorm_forward(float *y, const float *x, const float *w, int N, int C, float eps);
/* dx (N, C) += J^T dy; dw (C) += sum_rows dy * x_hat. dy, x (N, C); w (C). Recomputes
 * the row statistics from x. dx must not alias dy. */
void rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w,
                      int N, int C, float eps);

/* ---- rotary embedding (Hugging Face rotate-half) ----
 * For each row r, head h, i < D/2, with c = rope[pos[r]][i], s = rope[pos[r]][D/2 + i]:
 *   x'[i] = x[i] c - x[i + D/2] s;   x'[i + D/2] = x[i + D/2] c + x[i] s
 * The table (n_pos, D) is built once per state by rope_table (src/model/rope.h: HF's
 * frequencies and rope_scaling; the training path: positions < max_tokens; decode:
 * < slot capacity), so both paths rotate with the same bits. */
/* x (N, n_heads * D) rotated in place; pos (N) positions of the rows, each < the
 * table's n_pos. */
void rope_forward(float *x, const int *pos, int N, int n_heads, int D, const float *rope);
/* dx (N, n_heads * D): gradient w.r.t. the rotated x in, w.r.t. the input x out
 * (in place: the transpose rotation). */
void rope_backward(float *dx, const int *pos, int N, int n_heads, int D, const float *rope);

/* ---- causal grouped-query attention of one sequence ----
 * Query row i (position q_pos[i] in its sequence) attends key rows 0..q_pos[i] of
 * the SAME sequence: k, v hold that sequence's rows from position 0 (a packed batch
 * passes each sequence's slice; decode passes the slot's KV cache, with the new
 * rows already appended). Head h reads kv head h / (H / K); scale 1 / sqrt(D);
 * softmax in float32 with a double sum. Scores are formed for tiles of query rows
 * with sgemm, for a lone row (nq = 1) with sgemv (see ops.c); a row's output depends
 * on which other rows share its call only through OpenBLAS's rounding (~1e-7
 * relative, as for linear_forward).
 * q (nq, H*D); k, v (nk, K*D); q_pos (nq), each in [0, nk); out (nq, H*D)
 * overwritten; scratch attn_scratch_floats(nq, nk, H, K, D) floats. */
void attn_forward(float *out, const float *q, const float *k, const float *v, const int *q_pos,
                  int nq, int nk, int H, int K, int D, float *scratch);
/* Backward of attn_forward (recomputes the probabilities): dq (nq, H*D) += ,
 * dk, dv (nk, K*D) += ; dout (nq, H*D); scratch as for attn_forward. */
void attn_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                   const float *k, const float *v, const int *q_pos, int nq, int nk, int H,
                   int K, int D, float *scratch);
/* Scratch floats attn_forward / attn_backward need for nq query rows and nk keys. */
size_t attn_scratch_floats(int nq, int nk, int H, int K, int D);

/* ---- SwiGLU: y = silu(g) * u, silu(g) = g * sig, sig = 1 / (1 + exp(-g)) ----
 * y is formed as (g * sig) * u in all three functions below, so the same inputs give
 * the same bits (the training path keeps sig and re-forms y in backward, no exp). */
/* y, g, u (n) elementwise; sig (n) written too unless NULL. y may alias g or u. */
void swiglu_forward(float *y, float *sig, const float *g, const float *u, int64_t n);
/* y (n) = (g * sig) * u from swiglu_forward's sig: the same y it produced. */
void swiglu_apply(float *y, const float *g, const float *u, const float *sig, int64_t n);
/* dg += dy * u * silu'(g), silu' = sig (1 + g (1 - sig)); du += dy * silu(g). All (n);
 * sig from swiglu_forward. */
void swiglu_backward(float *dg, float *du, const float *dy, const float *g, const float *u,
                     const float *sig, int64_t n);

/* ---- log-softmax at a temperature ----
 * z = logits / temperature; lp = z - logsumexp(z).
 * logprob (N): lp[targets[i]], 0 where targets[i] < 0; entropy (N) or NULL:
 * -sum p lp. logits (N, V); targets (N) in [-1, V). */
void logsoftmax_forward(float *logprob, float *entropy, const float *logits,
                        const int32_t *targets, int N, int V, float temperature);
/* The row statistics both use, of one row x (V): mx = max z (float32) and lsum = log sum
 * exp(z - mx) (the sum in double, in index order). */
void logsoftmax_row_stats(const float *x, int V, float temperature, float *mx, double *lsum);
/* Given dlogprob (N) = dJ/dlogprob, dlogits (N, V) += dlogprob[i] * (onehot - p) /
 * temperature (rows with targets[i] < 0 get nothing). logits (N, V). */
void logsoftmax_backward(float *dlogits, const float *dlogprob, const float *logits,
                         const int32_t *targets, int N, int V, float temperature);
/* The entropy term of J = ... - sum_i ew_i H_i, H_i = -sum_j p_j lp_j: for every row
 * with ew[i] != 0, dlogits (N, V) += (ew[i] / temperature) p_j (lp_j + H_i) (= -ew_i
 * dH_i/dlogits) and H[i] = H_i; H[i] = 0 on the other rows. The row's statistics in
 * double: max of z in float, sum of exp((double)(z - max)). */
void entropy_backward(float *dlogits, double *H, const float *ew, const float *logits, int N,
                      int V, float temperature);
/* The same over one TP rank's columns of each row (V of them), from the whole rows'
 * statistics (the group's max of z, log of the sum of exp(z - max), and H). */
void vocab_entropy_backward(float *dlogits, const float *ew, const float *logits,
                            const float *mx, const double *lsum, const double *H, int N, int V,
                            float temperature);

#endif
