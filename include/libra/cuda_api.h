/*
 * The CUDA device module's interface: what src/libra-cuda.so (src/device/cuda/, built
 * with ./configure --with-cuda) offers the rest of libra. The module is loaded at run
 * time (cuda_module_load, include/libra/cuda_module.h), so src/libra never links the
 * CUDA runtime, cuBLASLt or NCCL and one build runs on CPU-only nodes.
 * The module's kernels and matrix products run in order on one stream of the current
 * device (or, between side_stream(1) and side_stream(0), on a second one: below); the
 * copies to and from the host (to_device, to_host) are synchronous, and copy runs in
 * order with the kernels.
 *
 * The host module (include/libra/cuda_host.h) offers the same table computed on the
 * CPU, for the engine's tests without a GPU.
 *
 * The module exports one symbol, libra_cuda_api(), returning a constant table. Every
 * function returns 0 or -1; after -1, last_error() says what failed (the CUDA error
 * string, the call, file:line). Kernels take device pointers; sync() waits for them
 * (the current stream's work, not the other stream's) and reports an asynchronous
 * error.
 *
 * Kernels (each has a CPU reference in src/model/cpu/ops.c, which tests/test_cuda.c
 * checks it against; the tolerances are in docs/cuda.md). Weights are stored in
 * bf16 (uint16_t, the upper half of a float32), activations in float32 and every
 * reduction accumulates in float32:
 *   embed_gather   x (N, C) = float(embed[tokens])       embed (V, C) bf16; a token of
 *                  -1 gives a zero row (a vocabulary-parallel shard: the token is another
 *                  rank's), any other token outside [0, V) is reported by the next sync
 *   rmsnorm_fwd    y (N, C) = x / sqrt(mean(x^2) + eps) * float(w)   w (C) bf16;
 *                  qwen3's per-head q/k norm: N = rows * heads, C = D
 *   rmsnorm_fwd16  the same y rounded to bf16 (y16): the training path's operand of the
 *                  next matrix product, without a float32 copy
 *   rope_fwd       rotate-half rotary on x (N, heads * D) in place, table (n_pos, D)
 *                  cos | sin as rope_table builds it
 *   qk_norm_rope_fwd  y (N, heads * D) = rope_fwd(rmsnorm_fwd(x, w over D)): qwen3's
 *                  q/k norm and the rotation in one pass, the two kernels' bits; D even,
 *                  at most 256
 *   swiglu_fwd     y (n) = (g * sig) * u, sig = sigmoid(g) written too unless NULL
 *   swiglu_fwd16   the same y rounded to bf16 (y16), sig float32 as swiglu_fwd
 *   f32_to_bf16    y (n) = x rounded to bf16, round to nearest even
 * Backward (training: float32 master weights; every float32 output ACCUMULATES, +=):
 *   embed_scatter_add  dembed rows tokens[i] += dx[i] (atomic: repeated tokens add in
 *                      any order); tokens of -1 add nothing (as embed_gather)
 *   rmsnorm_bwd    dx (N, C) +=, dw (C) += (either may be NULL); w float32; rstd (N)
 *                  scratch; with dx16 the new dx rounded to bf16 there too (f32_to_bf16's
 *                  bits: the next product's operand, without a conversion pass)
 *   rope_bwd       the transpose rotation of rope_fwd, in place
 *   qk_norm_rope_bwd  qk_norm_rope_fwd's: dy (N, heads * D) rotated back IN PLACE
 *                  (rope_bwd), then rmsnorm_bwd's dx WRITTEN (=, the bits it adds to
 *                  zeros) and dw +=; rstd (N * heads) scratch
 *   swiglu_bwd     dg +=, du += from swiglu_fwd's sig, or with sig NULL the same
 *                  sigmoid formed again from g (the same bits)
 *   swiglu_bwd16   dg16 =, du16 = the same terms rounded to bf16 (written, not added:
 *                  the operands of the gate / up projections' backward products)
 * Linear layers (cuBLASLt: bf16 operands, float32 accumulation and output):
 *   linear_fwd     y (N, out) = x (N, in) W^T, or += with accumulate; x and W (out, in)
 *                  bf16; the algorithm of a shape is chosen once by the heuristic
 *   linear_fwd_res y (N, out) = res + x W^T: a residual and a product in one pass (res
 *                  float32 (N, out), read where linear_fwd's accumulate reads y; may be
 *                  y), the bits of copying res to y and accumulating
 *   add_bias       y (N, out) += b (out), b float32 (qwen2's q/k/v biases)
 *   linear_bwd     dx (N, in) = dy W, or += with accumulate; dw (out, in) += dy^T x
 *                  (either may be NULL); dy, x, W bf16, dx and dw float32
 *   bias_bwd       db (out) += the column sums of dy (N, out), float32
 * Small-batch products (decode steps, N <= CUDA_GEMV_MAX_ROWS; struct cuda_gemv):
 *   gemv           for each of up to 3 matrices W_i (out_i, in) bf16 of the same input:
 *                  y_i (N, out_i) = bf16(x) W_i^T (+ b_i), or += with accumulate, x
 *                  (N, in) float32 rounded to bf16 as it is read -- f32_to_bf16 then
 *                  linear_fwd (and add_bias) in one launch; with swiglu (W_0 the gate,
 *                  W_1 the up projection) y_0 = swiglu_fwd's (g sig) u instead; with
 *                  norm, x is rmsnorm_fwd's output first (fused). in a multiple of 8,
 *                  x and every W_i 16-byte aligned; else -1, saying why
 * Attention (one sequence; the online-softmax form, no score matrix):
 *   attn_fwd       causal grouped-query attention: out (nq, H*D) from q (nq, H*D),
 *                  k, v (nk, K*D), q_pos (nq); head h reads kv head h / (H / K);
 *                  scale 1 / sqrt(D); D <= 256
 *   attn_bwd       its backward: dq (nq, H*D) +=, dk, dv (nk, K*D) += from dout
 *                  (nq, H*D), recomputing the probabilities; stats (nq, H, 2) floats
 *                  of scratch
 * Attention on the tensor cores (the training path; bf16 operands -- Q, K, V, dO and
 * the probabilities -- float32 sums; D a multiple of 4, at most 128: cuda_flash_supports):
 *   flash_fwd      attn_fwd's out, and lse (nq, H) the natural log-sum-exp of each
 *                  row's scaled scores (NULL: not kept), for every sequence of a packed
 *                  batch (struct cuda_seqs) in one launch
 *   flash_bwd      attn_bwd's gradients from flash_fwd's out and lse, WRITTEN (dq =,
 *                  dk =, dv =: every row, no zeroing first);
 *                  delta (nq, H) floats of scratch; the same packed batch
 *   prefill_attn   the rows of one sequence (a prefill chunk: q (nq, H*D), positions
 *                  q_pos) against its keys 0 .. q_pos[i] in a paged KV pool (as
 *                  decode_attn's, one block table): flash_fwd's out
 * Decode over a paged KV cache (pools of blocks of P tokens, (n_blocks, P, K*D), bf16:
 * a key or value is rounded to nearest even where it is written and read back
 * exactly; a sequence's token j in block table[s][j / P], slot j % P; blocks may be
 * shared):
 *   kv_append      writes k_new, v_new (B, K*D) as token len[s] - 1 of each sequence
 *   decode_attn    out (B, H*D): each sequence's query q (B, H*D) over its len[s]
 *                  tokens (causal: the last is the new one)
 *   decode_qkv     from the projections qlin (B, H*D), klin and v (B, K*D): q (B, H*D)
 *                  = rope_fwd(rmsnorm_fwd(qlin, q_norm, over D)) and k likewise with
 *                  k_norm (either norm NULL: none), k and v appended as kv_append does
 *                  -- those kernels' arithmetic in one launch; D <= 256
 * Log-softmax at a temperature (one row per token, any V):
 *   logsoftmax_fwd logprob (N) of targets (0 where target < 0), entropy (N) or NULL;
 *                  mx (N) floats and lsum (N) doubles, the rows' max of z and log sum
 *                  exp(z - max), unless NULL
 *   logsoftmax_bwd dlogits (N, V) += dlogprob (onehot - p) / temperature; or, dlogits
 *                  NULL, dl16 (N, V) = those terms rounded to bf16 (written, zero rows
 *                  where there is no target or dlogprob is 0): the output head's
 *                  backward operand without a float32 pass. With logsoftmax_fwd's mx and
 *                  lsum of the same logits (both or neither) it reads them instead of
 *                  forming them again: the same bits, two passes over the rows fewer
 * The same, vocabulary-parallel (logits (N, V): a TP rank's columns of each row; targets
 * in those columns, -1 where another rank holds the row's target or it has none; z =
 * logit / temperature; the caller all-reduces mx (max) and sums (sum) over the group):
 *   vocab_max      mx (N) = the row max of z
 *   vocab_sums     sums (N, 3) doubles from the group's mx: sum expf(z - mx), sum
 *                  expf(z - mx) (z - mx), and the target's z - mx (0 without one here)
 *   vocab_logsoftmax_bwd  dlogits += dlogprob (onehot - exp(z - mx - lsum)) / temperature
 *                  with lsum (N) doubles = log of the group's first sum; rows with
 *                  dlogprob 0 untouched; or dl16 written as logsoftmax_bwd's
 * The entropy term of the loss (J = ... - sum ew_i H_i; entropy_backward and
 * vocab_entropy_backward of include/libra/cpu_ops.h):
 *   entropy_bwd    for rows with ew[i] != 0: H[i] (N doubles) = the row's entropy and
 *                  dlogits (N, V) += (ew[i] / temperature) p_j (lp_j + H[i]); H[i] = 0
 *                  on the other rows
 *   vocab_entropy_bwd  the same over a TP rank's columns from the whole rows' mx (N),
 *                  lsum (N doubles) and H (N doubles, in)
 * Sampling (the decisions of sampler_sample: the same keyed draw, include/libra/rng_core.h):
 *   sample         tok (B), logprob (B) or NULL from logits (B, V) of trajectories
 *                  traj (B) at positions pos (B); temperature <= 0 greedy; top_k
 *                  (0 off) and top_p (1 off) as struct sampler_config's; scratch
 *                  (B, CUDA_SAMPLE_SCRATCH V) floats
 * Sampling vocabulary-parallel rows (B rows of a TP rank's Vl columns from v0): the
 * steps of sampler_sample_tp's greedy and plain-temperature modes (sampler_tp_* of
 * include/libra/sampler.h), batched over the rows. Each row's slots hold `slots`
 * ranks' entries, this rank's at `slot` and zeros elsewhere, for a sum all-reduce:
 *   vocab_greedy_stats  xb (B, 3 slots): sampler_tp_greedy_stats
 *   vocab_sample_max    mx (B doubles): sampler_tp_local_max (temperature > 0)
 *   vocab_sample_sums   xb (B, 2 slots) and p (B, Vl) floats: sampler_tp_sums with the
 *                       group's max mx (B)
 *   vocab_sample_pick   res (B, 2): for each row whose plan (B, 4: 1 if this rank owns
 *                       the draw, then struct sampler_tp_draw's u, own_start,
 *                       total_exact) gives it the draw, (v0 + sampler_tp_scan's id, its
 *                       log-prob); zeros on the others. p: vocab_sample_sums'.
 *   vocab_sample_topk   xb (B, slots + 2n): sampler_tp_top_k_entries (kr this rank's
 *                       candidates, off their offset among n) with the group's max mx;
 *                       scratch (B, 2 Vl) floats
 * Optimizer:
 *   sum_squares    *out (host) = sum x^2 in double (the global gradient norm; the same
 *                  bits every call: replicas clip by it)
 *   adamw_update   the element update of include/libra/adamw.h with its per-step
 *                  scalars, on grads scaled by clip (1 = unclipped); the new params
 *                  rounded to bf16 into w16 too unless NULL (f32_to_bf16's bits)
 *   weights_hash   *out (host) = weights_sum_hash(x, n) of include/libra/hash.h (the
 *                  training replicas' fingerprint of weights that stay on the GPU)
 * Shapes: N rows, C channels, D head dimension (even), V vocabulary.
 */
#ifndef LIBRA_CUDA_API_H
#define LIBRA_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#define LIBRA_CUDA_ABI 29 /* bumped whenever struct cuda_api changes */
#define CUDA_SAMPLE_SCRATCH 3 /* sample's scratch: floats a row per id of the vocabulary */

/* gemv's matrices: up to 3 products of one input x (N rows), in one launch. */
#define CUDA_GEMV_MAX_ROWS 8
#define CUDA_GEMV_MAX_MATS 3
struct cuda_gemv {
    const float *x; /* (N, in) float32, device */
    int N, in;
    int n_mats;
    struct {
        float *y;           /* (N, out) float32 */
        const uint16_t *w;  /* (out, in) bf16 */
        const float *b;     /* (out) float32 or NULL */
        int out;
    } m[CUDA_GEMV_MAX_MATS];
    int accumulate; /* y += instead of = (no bias, no swiglu) */
    int swiglu;     /* n_mats 2, the same out: m[0].y = silu(x W_0^T) * (x W_1^T) */
    const uint16_t *norm; /* (in) bf16 or NULL: x is first RMS-normalised with these
                             weights and eps, as rmsnorm_fwd does it (the same bits) */
    float eps;
};

/* NCCL's unique id (ncclUniqueId) fits this many bytes; the reduction ops of
 * nccl_allreduce. */
#define CUDA_NCCL_ID_BYTES 128
enum { CUDA_RED_SUM, CUDA_RED_MAX, CUDA_RED_MIN };

/* Why gemv refuses g, or NULL when it takes it: its preconditions above (the CUDA module
 * and the host module, include/libra/cuda_host.h, check the same). */
static inline const char *cuda_gemv_refusal(const struct cuda_gemv *g)
{
    if (g->N < 1 || g->N > CUDA_GEMV_MAX_ROWS) return "N outside 1..CUDA_GEMV_MAX_ROWS";
    if (g->n_mats < 1 || g->n_mats > CUDA_GEMV_MAX_MATS) return "n_mats outside 1..3";
    if (g->in <= 0 || g->in % 8) return "in is not a positive multiple of 8";
    if ((uintptr_t)g->x & 15u) return "x is not 16-byte aligned";
    if (g->swiglu && (g->n_mats != 2 || g->m[0].out != g->m[1].out || g->accumulate))
        return "swiglu needs 2 matrices of the same out and no accumulate";
    long long rows = 0;
    for (int i = 0; i < g->n_mats; i++) {
        if (g->m[i].out <= 0) return "a matrix with no rows";
        if ((uintptr_t)g->m[i].w & 15u) return "a matrix that is not 16-byte aligned";
        if (g->accumulate && g->m[i].b) return "a bias with accumulate";
        if (g->swiglu && g->m[i].b) return "a bias with swiglu";
        rows += g->m[i].out;
    }
    if (rows > (1LL << 30)) return "too many rows";
    return NULL;
}

/* A packed batch of sequences for flash_fwd / flash_bwd: sequence s is the q rows
 * q_start[s] .. q_start[s + 1] - 1 against the k rows k_start[s] .. k_start[s + 1] - 1
 * (device arrays of n + 1 entries from 0; the two may be one array), its key j the k
 * row k_start[s] + j, which row i attends when j <= q_pos[i]. nq = q_start[n] and nk =
 * k_start[n] rows in all; max_q, max_k the longest sequence's rows and keys. */
struct cuda_seqs {
    const int32_t *q_start, *k_start;
    int n, nq, nk, max_q, max_k;
};

/* The sizes of a packed batch hold together (its offsets live on the device, and the
 * kernels trust them: q_start[n] = nq, k_start[n] = nk, each non-decreasing). */
static inline int cuda_seqs_valid(const struct cuda_seqs *sq)
{
    return sq && sq->n >= 0 && sq->max_q >= 0 && sq->max_k >= 0 && sq->max_q <= sq->nq &&
           sq->max_k <= sq->nk && (sq->n == 0 || (sq->q_start && sq->k_start)) &&
           (sq->n > 0 || (sq->nq == 0 && sq->nk == 0));
}

/* Head dimensions flash_fwd and flash_bwd take (float4 loads, tiles of up to 128). */
static inline int cuda_flash_supports(int D) { return D > 0 && D % 4 == 0 && D <= 128; }

/* The per-step scalars of an AdamW update (struct adamw_scalars of adamw.h). */
struct cuda_adamw {
    float decay, step_size, bc2_sqrt, beta2, w1, w2, eps;
    float clip; /* grads are multiplied by it first (1: not clipped) */
};

struct cuda_api {
    int abi; /* LIBRA_CUDA_ABI of the module */
    /* ---- devices ---- */
    /* The number of usable GPUs; -1 with the driver's reason (no driver, no GPU). */
    int (*device_count)(void);
    /* One line on GPU i (name, memory, compute capability, SMs) into out. */
    int (*device_describe)(int i, char *out, size_t cap);
    int (*set_device)(int i);
    /* CUDA runtime and NCCL versions (e.g. 13000, 22703). */
    void (*versions)(int *cuda_runtime, int *nccl);
    /* ---- memory ---- */
    int (*alloc)(void **p, size_t bytes);
    int (*free)(void *p); /* NULL is a no-op */
    int (*to_device)(void *dst, const void *src, size_t bytes);
    int (*to_host)(void *dst, const void *src, size_t bytes);
    int (*copy)(void *dst, const void *src, size_t bytes); /* device to device */
    int (*zero)(void *p, size_t bytes); /* on the kernels' stream, in order with them */
    /* The current device's free and total memory in bytes (cudaMemGetInfo). */
    int (*mem_info)(size_t *free_bytes, size_t *total_bytes);
    int (*sync)(void);
    /* ---- kernels (device pointers) ---- */
    int (*embed_gather)(float *x, const uint16_t *embed, const int32_t *tokens, int N, int C,
                        int V);
    int (*rmsnorm_fwd)(float *y, const float *x, const uint16_t *w, int N, int C, float eps);
    int (*rmsnorm_fwd16)(uint16_t *y16, const float *x, const uint16_t *w, int N, int C,
                         float eps);
    int (*rope_fwd)(float *x, const int32_t *pos, int N, int n_heads, int D,
                    const float *rope);
    int (*swiglu_fwd)(float *y, float *sig, const float *g, const float *u, int64_t n);
    int (*swiglu_fwd16)(uint16_t *y16, float *sig, const float *g, const float *u, int64_t n);
    int (*f32_to_bf16)(uint16_t *y, const float *x, int64_t n);
    int (*embed_scatter_add)(float *dembed, const float *dx, const int32_t *tokens, int N,
                             int C, int V);
    int (*rmsnorm_bwd)(float *dx, uint16_t *dx16, float *dw, const float *dy, const float *x,
                       const float *w, float *rstd, int N, int C, float eps);
    int (*rope_bwd)(float *dx, const int32_t *pos, int N, int n_heads, int D,
                    const float *rope);
    int (*qk_norm_rope_fwd)(float *y, const float *x, const uint16_t *w, const int32_t *pos,
                            const float *rope, int N, int n_heads, int D, float eps);
    int (*qk_norm_rope_bwd)(float *dx, float *dw, float *dy, const float *x, const float *w,
                            float *rstd, const int32_t *pos, const float *rope, int N,
                            int n_heads, int D, float eps);
    int (*swiglu_bwd)(float *dg, float *du, const float *dy, const float *g, const float *u,
                      const float *sig, int64_t n);
    int (*swiglu_bwd16)(uint16_t *dg16, uint16_t *du16, const float *dy, const float *g,
                        const float *u, const float *sig, int64_t n);
    int (*linear_fwd)(float *y, const uint16_t *x, const uint16_t *w, int N, int in, int out,
                      int accumulate);
    int (*linear_fwd_res)(float *y, const float *res, const uint16_t *x, const uint16_t *w,
                          int N, int in, int out);
    int (*add_bias)(float *y, const float *b, int N, int out);
    int (*linear_bwd)(float *dx, float *dw, const uint16_t *dy, const uint16_t *x,
                      const uint16_t *w, int N, int in, int out, int accumulate);
    int (*bias_bwd)(float *db, const float *dy, int N, int out);
    int (*gemv)(const struct cuda_gemv *g);
    int (*attn_fwd)(float *out, const float *q, const float *k, const float *v,
                    const int32_t *q_pos, int nq, int nk, int H, int K, int D);
    int (*attn_bwd)(float *dq, float *dk, float *dv, const float *dout, const float *q,
                    const float *k, const float *v, const int32_t *q_pos, int nq, int nk,
                    int H, int K, int D, float *stats);
    int (*flash_fwd)(float *out, float *lse, const float *q, const float *k, const float *v,
                     const int32_t *q_pos, const struct cuda_seqs *sq, int H, int K, int D);
    int (*flash_bwd)(float *dq, float *dk, float *dv, const float *dout, const float *q,
                     const float *k, const float *v, const float *out, const float *lse,
                     const int32_t *q_pos, const struct cuda_seqs *sq, int H, int K, int D,
                     float *delta);
    int (*prefill_attn)(float *out, const float *q, const uint16_t *k_pool, const uint16_t *v_pool,
                        const int32_t *table, const int32_t *q_pos, int nq, int H, int K, int D,
                        int P);
    int (*kv_append)(uint16_t *k_pool, uint16_t *v_pool, const float *k_new, const float *v_new,
                     const int32_t *table, int max_blocks, const int32_t *len, int B, int K,
                     int D, int P);
    int (*decode_attn)(float *out, const float *q, const uint16_t *k_pool, const uint16_t *v_pool,
                       const int32_t *table, int max_blocks, const int32_t *len, int B, int H,
                       int K, int D, int P);
    int (*decode_qkv)(float *q, uint16_t *k_pool, uint16_t *v_pool, const float *qlin,
                      const float *klin, const float *v, const uint16_t *q_norm,
                      const uint16_t *k_norm, float eps, const int32_t *pos, const float *rope,
                      const int32_t *table, int max_blocks, const int32_t *len, int B, int H,
                      int K, int D, int P);
    int (*logsoftmax_fwd)(float *logprob, float *entropy, float *mx, double *lsum,
                          const float *logits, const int32_t *targets, int N, int V,
                          float temperature);
    int (*logsoftmax_bwd)(float *dlogits, uint16_t *dl16, const float *dlogprob,
                          const float *logits, const int32_t *targets, const float *mx,
                          const double *lsum, int N, int V, float temperature);
    int (*sample)(int32_t *tok, float *logprob, const float *logits, int B, int V,
                  const int64_t *traj, const int64_t *pos, float temperature, int top_k,
                  float top_p, uint64_t seed, float *scratch);
    int (*sum_squares)(double *out, const float *x, int64_t n);
    int (*adamw_update)(float *params, float *m, float *v, uint16_t *w16, const float *grads,
                        int64_t n, const struct cuda_adamw *s);
    /* ---- CUDA graphs ---- */
    /* Between graph_begin and graph_end the kernels and matrix products this thread
     * asks for are recorded, not run (no memory call may come between them); the
     * graph, launched any number of times, runs them again with the same arguments
     * (the memory they point at may hold new values). */
    int (*graph_begin)(void);
    int (*graph_end)(void **graph);
    int (*graph_launch)(void *graph);
    int (*graph_free)(void *graph); /* NULL is a no-op */
    /* What the last failed call of this thread reported. */
    const char *(*last_error)(void);
    /* ---- the vocabulary-parallel log-softmax (kernels; see the list above) ---- */
    int (*vocab_max)(float *mx, const float *logits, int N, int V, float temperature);
    int (*vocab_sums)(double *sums, const float *logits, const float *mx, const int32_t *targets,
                      int N, int V, float temperature);
    int (*vocab_logsoftmax_bwd)(float *dlogits, uint16_t *dl16, const float *dlogprob,
                                const float *logits, const int32_t *targets, const float *mx,
                                const double *lsum, int N, int V, float temperature);
    /* ---- NCCL: a TP group's communicator; all-reduces on the kernels' stream (in
     * order with them, and recordable in a CUDA graph) ---- */
    /* A new unique id into id (cap >= CUDA_NCCL_ID_BYTES), on one rank of the group. */
    int (*nccl_id)(void *id, size_t cap);
    /* Rank `rank` of nranks joins the group of id (every rank calls it). */
    int (*nccl_init)(void **comm, const void *id, int nranks, int rank);
    /* x (n float32, or float64 when f64) in place: the group's sum / max / min (op a
     * CUDA_RED_*). */
    int (*nccl_allreduce)(void *comm, void *x, size_t n, int f64, int op);
    int (*nccl_free)(void *comm); /* NULL is a no-op */
    /* ---- the entropy term (kernels; see the list above) ---- */
    int (*entropy_bwd)(float *dlogits, double *H, const float *ew, const float *logits, int N,
                       int V, float temperature);
    int (*vocab_entropy_bwd)(float *dlogits, const float *ew, const float *logits,
                             const float *mx, const double *lsum, const double *H, int N, int V,
                             float temperature);
    /* ---- sampling vocabulary-parallel rows (kernels; see the list above) ---- */
    int (*vocab_greedy_stats)(double *xb, const float *logits, int B, int Vl, int v0, int slot,
                              int slots);
    int (*vocab_sample_max)(double *mx, const float *logits, int B, int Vl, float temperature);
    int (*vocab_sample_sums)(double *xb, float *p, const float *logits, const double *mx, int B,
                             int Vl, float temperature, int slot, int slots);
    int (*vocab_sample_pick)(double *res, const float *logits, const float *p,
                             const double *plan, const double *mx, int B, int Vl, int v0,
                             float temperature);
    int (*vocab_sample_topk)(double *xb, float *scratch, const float *logits, const double *mx,
                             int B, int Vl, int v0, float temperature, int kr, int off, int n,
                             int slot, int slots);
    /* ---- the weights' fingerprint (see the list above; not recordable) ---- */
    int (*weights_hash)(uint64_t *out, const float *x, int64_t n);
    /* ---- page-locked host memory: copies between it and the GPU run at the link's
     * rate, not through the driver's staging of pageable memory (not recordable) ---- */
    int (*host_alloc)(void **p, size_t bytes);
    int (*host_free)(void *p); /* NULL is a no-op; only host_alloc's pointers */
    /* ---- NCCL point to point, for weight syncs (NULL in the host module): bytes of
     * device memory to / from rank peer of comm, on the kernels' stream (in order with
     * them; a receive's later kernels see its data); the calls between nccl_group(1)
     * and nccl_group(0) are issued as one group, so they may wait on each other ---- */
    int (*nccl_send)(void *comm, const void *buf, size_t bytes, int peer);
    int (*nccl_recv)(void *comm, void *buf, size_t bytes, int peer);
    int (*nccl_group)(int begin);
    /* ---- a strided block between device buffers, on the kernels' stream (in order with
     * them): height rows of width bytes, their starts dpitch and spitch bytes apart (a
     * weight sync packs and unpacks its strided runs with it) ---- */
    int (*copy2d)(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                  size_t height);
    /* ---- a second stream, so that a weight sync moves while the kernels' stream
     * decodes or trains: after side_stream(1) the calls that run on a stream (copies,
     * copy2d, the NCCL calls, kernels, to_device_async) go to the side stream, after
     * side_stream(0) to the kernels' stream again. Switching to the side stream makes
     * its work from then on start after the kernels' stream's work issued so far (it
     * sees what that wrote); beyond that neither stream waits for the other (nor does
     * the side stream for the legacy stream's copies) except through a mark:
     * side_mark records where the side stream stands; side_done is 1 once all of it
     * before the last mark is done, 0 while not (it does not wait), -1 on an error;
     * side_join makes the kernels' stream's later work wait for the last mark. Not
     * recordable. ---- */
    int (*side_stream)(int on);
    /* bytes from page-locked host memory (host_alloc's) to the GPU on the current
     * stream, not waited for: the host memory must stay as it is until a mark after it
     * is done (from pageable memory the driver may wait) */
    int (*to_device_async)(void *dst, const void *src, size_t bytes);
    int (*side_mark)(void);
    int (*side_done)(void);
    int (*side_join)(void);
    /* ---- overlapped launches: while on, the decode step's kernels (embed_gather,
     * gemv, decode_qkv, decode_attn) are launched with programmatic dependent launch,
     * so each may start -- and load its weights -- while the kernel before it finishes;
     * it waits for that kernel before reading anything it wrote, so the results are
     * the same bits. Recorded into graphs as they are made. Returns 1 if on, 0 if off
     * (asked for off, or a GPU below compute capability 9.0), -1 on an error. ---- */
    int (*launch_overlap)(int on);
};

/* The one symbol the module exports. */
typedef const struct cuda_api *(*libra_cuda_api_fn)(void);
#define LIBRA_CUDA_API_SYMBOL "libra_cuda_api"

#endif
