/*
 * Plain-C (+ OpenBLAS) kernels of the CPU transformer, forward and backward. The
 * training path (tfm_forward.c, tfm_backward.c) and the decode engine (tfm_decode.c)
 * call the SAME forward functions, so a token's arithmetic is the same in both.
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
 *     whose sgemm may round a row differently for different N (~1e-7 relative).
 *   - No threads of our own: all parallelism is OpenBLAS's (deterministic for a
 *     fixed thread count).
 */
#ifndef LIBRA_MODEL_CPU_OPS_H
#define LIBRA_MODEL_CPU_OPS_H

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
 * For each row r, head h, i < D/2, with a = pos[r] * theta^(-2i/D) (inv_freq and the
 * angle in float32 as HF computes them):
 *   x'[i] = x[i] cos a - x[i + D/2] sin a;   x'[i + D/2] = x[i + D/2] cos a + x[i] sin a */
/* x (N, n_heads * D) rotated in place; pos (N) positions of the rows. */
void rope_forward(float *x, const int *pos, int N, int n_heads, int D, float theta);
/* dx (N, n_heads * D): gradient w.r.t. the rotated x in, w.r.t. the input x out
 * (in place: the transpose rotation). */
void rope_backward(float *dx, const int *pos, int N, int n_heads, int D, float theta);

/* ---- causal grouped-query attention of one sequence ----
 * Query row i (position q_pos[i] in its sequence) attends key rows 0..q_pos[i] of
 * the SAME sequence: k, v hold that sequence's rows from position 0 (a packed batch
 * passes each sequence's slice; decode passes the slot's KV cache, with the new
 * rows already appended). Head h reads kv head h / (H / K); scale 1 / sqrt(D);
 * softmax in float32 with a double sum. Scores live only per query row.
 * q (nq, H*D); k, v (nk, K*D); q_pos (nq), each in [0, nk); out (nq, H*D)
 * overwritten; scratch (nk) floats. */
void attn_forward(float *out, const float *q, const float *k, const float *v, const int *q_pos,
                  int nq, int nk, int H, int K, int D, float *scratch);
/* Backward of attn_forward (recomputes the probabilities): dq (nq, H*D) += ,
 * dk, dv (nk, K*D) += ; dout (nq, H*D); scratch (2 * nk) floats. */
void attn_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
                   const float *k, const float *v, const int *q_pos, int nq, int nk, int H,
                   int K, int D, float *scratch);

/* ---- SwiGLU: y = silu(g) * u, silu(g) = g / (1 + exp(-g)) ---- */
/* y, g, u (n) elementwise; y may alias g or u. */
void swiglu_forward(float *y, const float *g, const float *u, int64_t n);
/* dg += dy * u * silu'(g); du += dy * silu(g). All (n). */
void swiglu_backward(float *dg, float *du, const float *dy, const float *g, const float *u,
                     int64_t n);

/* ---- log-softmax at a temperature ----
 * z = logits / temperature; lp = z - logsumexp(z).
 * logprob (N): lp[targets[i]], 0 where targets[i] < 0; entropy (N) or NULL:
 * -sum p lp. logits (N, V); targets (N) in [-1, V). */
void logsoftmax_forward(float *logprob, float *entropy, const float *logits,
                        const int32_t *targets, int N, int V, float temperature);
/* Given dlogprob (N) = dJ/dlogprob, dlogits (N, V) += dlogprob[i] * (onehot - p) /
 * temperature (rows with targets[i] < 0 get nothing). logits (N, V). */
void logsoftmax_backward(float *dlogits, const float *dlogprob, const float *logits,
                         const int32_t *targets, int N, int V, float temperature);

#endif
