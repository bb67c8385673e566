/*
 * Shared by the CUDA module's files (src/device/cuda/): error recording and the
 * kernel launchers the table in cuda_api.cu points at.
 */
#ifndef LIBRA_CUDA_INTERNAL_H
#define LIBRA_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Records what failed for last_error(); returns -1. */
int cu_fail(const char *what, cudaError_t e, const char *file, int line);
/* Returns -1 (recording the call and file:line) if call does not give cudaSuccess. */
#define CU_CHECK(call)                                                                       \
    do {                                                                                     \
        cudaError_t cu_e_ = (call);                                                          \
        if (cu_e_ != cudaSuccess) return cu_fail(#call, cu_e_, __FILE__, __LINE__);           \
    } while (0)
/* After a launch: the launch error, if any. */
#define CU_LAUNCHED(name) CU_CHECK(cudaGetLastError())

/* Elements per thread block of the elementwise kernels, and their grid. */
#define EW_THREADS 256
#define EW_BLOCKS(n) ((unsigned)(((n) + EW_THREADS - 1) / EW_THREADS))

#include "cuda_device.cuh"

/* The stream every kernel and matrix product of the module runs on (created with
 * the current device by set_device, or at first use): a blocking stream, so the
 * runtime's synchronous copies order with it; graph_begin / graph_end record it. */
cudaStream_t cu_stream(void);
/* 1 while launch_overlap is on (a device of compute capability 9.0 or more). */
extern int cu_overlap;

/* Launches kernel k (grid, block, no dynamic shared memory) on the module's stream,
 * with programmatic dependent launch while cu_overlap is on: for kernels that call
 * grid_wait() in every block before touching what an earlier kernel writes
 * (cuda_device.cuh). The launch's error, as cudaLaunchKernelEx gives it. */
template <typename... P, typename... A>
static inline cudaError_t cu_launch_overlapped(void (*k)(P...), dim3 grid, dim3 block,
                                               A &&...args)
{
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = 0;
    cfg.stream = cu_stream();
    cfg.attrs = &at;
    cfg.numAttrs = cu_overlap ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, k, static_cast<A &&>(args)...);
}

/* cuBLASLt's handle and workspace, made before a graph is recorded (no allocation
 * may happen inside a recording). */
int cu_gemm_prepare(void);
/* A module-owned scratch *p of *have bytes grown to at least `bytes` (the old one freed
 * after the stream drains, since queued kernels may still use it); for the training
 * path only: never inside a graph recording. */
int cu_scratch_grow(void **p, size_t *have, size_t bytes);
/* The attention kernels' scratch and settings, likewise made before a recording. */
int cu_attention_prepare(void);

/* acc (C) += the column sums of dy (N, C), or of dy x rstd (row i scaled by rstd[i])
 * when x is given: deterministic for a given N (cuda_colsum.cu). */
int cu_column_sums(float *acc, const float *dy, const float *x, const float *rstd, int N,
                   int C);

/* A kernel's own finding (a token out of range): raised on the device, reported by
 * the next sync() as "what" with the first offending value. */
int cu_device_error_check(void);

extern "C" {
int cu_embed_gather(float *x, const uint16_t *embed, const int32_t *tokens, int N, int C, int V);
int cu_rmsnorm_fwd(float *y, const float *x, const uint16_t *w, int N, int C, float eps);
int cu_rmsnorm_fwd16(uint16_t *y16, const float *x, const uint16_t *w, int N, int C, float eps);
int cu_rope_fwd(float *x, const int32_t *pos, int N, int n_heads, int D, const float *rope);
int cu_swiglu_fwd(float *y, float *sig, const float *g, const float *u, int64_t n);
int cu_swiglu_fwd16(uint16_t *y16, float *sig, const float *g, const float *u, int64_t n);
int cu_f32_to_bf16(uint16_t *y, const float *x, int64_t n);
int cu_embed_scatter_add(float *dembed, const float *dx, const int32_t *tokens, int N, int C,
                         int V);
int cu_rmsnorm_bwd(float *dx, uint16_t *dx16, float *dw, const float *dy, const float *x,
                   const float *w, float *rstd, int N, int C, float eps);
int cu_rope_bwd(float *dx, const int32_t *pos, int N, int n_heads, int D, const float *rope);
int cu_qk_norm_rope_fwd(float *y, const float *x, const uint16_t *w, const int32_t *pos,
                        const float *rope, int N, int n_heads, int D, float eps);
int cu_qk_norm_rope_bwd(float *dx, float *dw, float *dy, const float *x, const float *w,
                        float *rstd, const int32_t *pos, const float *rope, int N, int n_heads,
                        int D, float eps);
int cu_swiglu_bwd(float *dg, float *du, const float *dy, const float *g, const float *u,
                  const float *sig, int64_t n);
int cu_swiglu_bwd16(uint16_t *dg16, uint16_t *du16, const float *dy, const float *g,
                    const float *u, const float *sig, int64_t n);
int cu_sum_squares(double *out, const float *x, int64_t n);
int cu_weights_hash(uint64_t *out, const float *x, int64_t n);
int cu_linear_fwd(float *y, const uint16_t *x, const uint16_t *w, int N, int in, int out,
                  int accumulate);
int cu_linear_fwd_res(float *y, const float *res, const uint16_t *x, const uint16_t *w, int N,
                      int in, int out);
int cu_add_bias(float *y, const float *b, int N, int out);
int cu_linear_bwd(float *dx, float *dw, const uint16_t *dy, const uint16_t *x, const uint16_t *w,
                  int N, int in, int out, int accumulate);
int cu_bias_bwd(float *db, const float *dy, int N, int out);
struct cuda_gemv;
int cu_gemv(const struct cuda_gemv *g);
int cu_kv_append(uint16_t *k_pool, uint16_t *v_pool, const float *k_new, const float *v_new,
                 const int32_t *table, int max_blocks, const int32_t *len, int B, int K, int D,
                 int P);
int cu_attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                const float *k, const float *v, const int32_t *q_pos, int nq, int nk, int H,
                int K, int D, float *stats);
int cu_decode_attn(float *out, const float *q, const uint16_t *k_pool, const uint16_t *v_pool,
                   const int32_t *table, int max_blocks, const int32_t *len, int B, int H,
                   int K, int D, int P);
int cu_decode_qkv(float *q, uint16_t *k_pool, uint16_t *v_pool, const float *qlin, const float *klin,
                  const float *v, const uint16_t *q_norm, const uint16_t *k_norm, float eps,
                  const int32_t *pos, const float *rope, const int32_t *table, int max_blocks,
                  const int32_t *len, int B, int H, int K, int D, int P);
int cu_sample(int32_t *tok, float *logprob, const float *logits, int B, int V,
              const int64_t *traj, const int64_t *pos, float temperature, int top_k,
              float top_p, uint64_t seed, float *scratch);
int cu_vocab_greedy_stats(double *xb, const float *logits, int B, int Vl, int v0, int slot,
                          int slots);
int cu_vocab_sample_max(double *mx, const float *logits, int B, int Vl, float temperature);
int cu_vocab_sample_sums(double *xb, float *p, const float *logits, const double *mx, int B, int Vl,
                         float temperature, int slot, int slots);
int cu_vocab_sample_topk(double *xb, float *scratch, const float *logits, const double *mx,
                         int B, int Vl, int v0, float temperature, int kr, int off, int n,
                         int slot, int slots);
int cu_vocab_sample_pick(double *res, const float *logits, const float *p, const double *plan,
                         const double *mx, int B, int Vl, int v0, float temperature);
int cu_attn_fwd(float *out, const float *q, const float *k, const float *v,
                const int32_t *q_pos, int nq, int nk, int H, int K, int D);
int cu_flash_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                 const int32_t *q_pos, const struct cuda_seqs *sq, int H, int K, int D);
int cu_flash_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                 const float *k, const float *v, const float *out, const float *lse,
                 const int32_t *q_pos, const struct cuda_seqs *sq, int H, int K, int D,
                 float *delta);
int cu_prefill_attn(float *out, const float *q, const uint16_t *k_pool, const uint16_t *v_pool,
                    const int32_t *table, const int32_t *q_pos, int nq, int H, int K, int D, int P);
int cu_logsoftmax_fwd(float *logprob, float *entropy, float *mx, double *lsum,
                      const float *logits, const int32_t *targets, int N, int V,
                      float temperature);
int cu_logsoftmax_bwd(float *dlogits, uint16_t *dl16, const float *dlogprob, const float *logits,
                      const int32_t *targets, const float *mx, const double *lsum, int N, int V,
                      float temperature);
int cu_vocab_max(float *mx, const float *logits, int N, int V, float temperature);
int cu_vocab_sums(double *sums, const float *logits, const float *mx, const int32_t *targets,
                  int N, int V, float temperature);
int cu_vocab_logsoftmax_bwd(float *dlogits, uint16_t *dl16, const float *dlogprob,
                            const float *logits, const int32_t *targets, const float *mx,
                            const double *lsum, int N, int V, float temperature);
int cu_entropy_bwd(float *dlogits, double *H, const float *ew, const float *logits, int N, int V,
                   float temperature);
int cu_vocab_entropy_bwd(float *dlogits, const float *ew, const float *logits, const float *mx,
                         const double *lsum, const double *H, int N, int V, float temperature);
int cu_nccl_id(void *id, size_t cap);
int cu_nccl_init(void **comm, const void *id, int nranks, int rank);
int cu_nccl_allreduce(void *comm, void *x, size_t n, int f64, int op);
int cu_nccl_free(void *comm);
int cu_nccl_send(void *comm, const void *buf, size_t bytes, int peer);
int cu_nccl_recv(void *comm, void *buf, size_t bytes, int peer);
int cu_nccl_group(int begin);
struct cuda_adamw;
int cu_adamw_update(float *params, float *m, float *v, uint16_t *w16, const float *grads,
                    int64_t n, const struct cuda_adamw *s);
}

#endif
