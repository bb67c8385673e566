/*
 * Shared by the host module's files (src/device/cuda_host/, include/libra/cuda_host.h):
 * error recording, the launch of a kernel (run now, or recorded into the graph this
 * thread is recording), and the kernels. A kernel takes its arguments as one struct
 * (a call's closure: a recording copies it), through a const void pointer so every
 * kernel has the one type a recorded call stores.
 */
#ifndef LIBRA_CUDA_HOST_INTERNAL_H
#define LIBRA_CUDA_HOST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "libra/cuda_api.h"

/* Records a message (printf-style) and the caller's file:line for last_error();
 * returns -1. */
int ch_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define CH_FAIL(...) ch_fail(__FILE__, __LINE__, __VA_ARGS__)
const char *ch_last_error(void);

/* A kernel's own finding (a token outside the vocabulary), reported by the next sync
 * as the CUDA module's device-side check reports it: the first value, once. */
void ch_raise_bad_token(long long token);

/* Runs the kernel now, or, while this thread records a graph, appends it with a copy
 * of its size bytes of arguments (0 either way unless the kernel fails). */
typedef int (*ch_kernel)(const void *args);
int ch_launch(ch_kernel run, const void *args, size_t size);
/* -1 (and the recording invalidated, as a stream capture is) when `what`, a memory or
 * host call, comes while this thread records a graph; else 0. */
int ch_forbid_in_graph(const char *what);

/* The bf16 values (uint16_t) of x (n) widened to float32, in a new xmalloc'd array. */
float *ch_widen(const uint16_t *x, size_t n);
/* x rounded to bf16 (nearest even) and back: the value a bf16 operand holds. */
float ch_bf16r(float x);

/* The devices, the memory and the graphs (cuda_host_mem.c). */
int ch_device_count(void);
int ch_device_describe(int i, char *out, size_t cap);
int ch_set_device(int i);
void ch_versions(int *cuda_runtime, int *nccl);
int ch_alloc(void **p, size_t bytes);
int ch_free(void *p);
int ch_host_alloc(void **p, size_t bytes); /* not recordable */
int ch_host_free(void *p);                 /* not recordable */
int ch_to_device(void *dst, const void *src, size_t bytes);
int ch_to_host(void *dst, const void *src, size_t bytes);
int ch_copy(void *dst, const void *src, size_t bytes);
int ch_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
              size_t height);
int ch_zero(void *p, size_t bytes);
int ch_mem_info(size_t *free_bytes, size_t *total_bytes);
int ch_sync(void);
int ch_side_stream(int on);
int ch_side_mark(void);
int ch_side_done(void); /* 0 at the first query after a mark, then 1 */
int ch_side_join(void); /* refused unless side_done said 1 since the mark */
/* -1 (refused) when `what`, writing p[0 .. bytes) on the kernels' stream, overlaps
 * memory that side-stream work not yet seen done reads; else 0. */
int ch_side_check_write(const void *p, size_t bytes, const char *what);
int ch_graph_begin(void);
int ch_graph_end(void **graph);
int ch_graph_launch(void *graph);
int ch_graph_free(void *graph);

/* ---- the kernels' arguments, as cuda_api.h's entries take them ---- */
struct embed_args { /* embed_gather (x = out), embed_scatter_add (x = dembed, in = dx) */
    float *x;
    const uint16_t *embed;
    const float *in;
    const int32_t *tokens;
    int N, C, V;
};
struct rmsnorm_args { /* rmsnorm_fwd (w16; y or y16), rmsnorm_bwd (dx, y16 its bf16 copy, dw,
                        dy, w, rstd) */
    float *y, *dx, *dw, *rstd;
    uint16_t *y16;
    const float *x, *dy, *w;
    const uint16_t *w16;
    int N, C;
    float eps;
};
struct rope_args {
    float *x;
    const int32_t *pos;
    int N, n_heads, D;
    const float *rope;
};
struct qk_args { /* qk_norm_rope_fwd (y, w16), qk_norm_rope_bwd (dx, dw, dy, w) */
    float *y, *dx, *dw, *dy;
    const float *x, *w, *rope;
    const uint16_t *w16;
    const int32_t *pos;
    int N, n_heads, D;
    float eps;
};
struct swiglu_args { /* forward: y or y16, sig; backward: dg, du or dg16, du16 from dy */
    float *y, *sig, *dg, *du;
    uint16_t *y16, *dg16, *du16;
    const float *g, *u, *dy, *sig_in;
    int64_t n;
};
struct convert_args { /* f32_to_bf16 */
    uint16_t *y;
    const float *x;
    int64_t n;
};
struct linear_args { /* linear_fwd (res: linear_fwd_res), linear_bwd, add_bias, bias_bwd */
    float *y, *dx, *dw;
    const uint16_t *x, *w, *dy;
    const float *b, *dyf, *res;
    int N, in, out, accumulate;
};
struct gemv_args {
    struct cuda_gemv g;
};
struct attn_args { /* attn_fwd / attn_bwd of one sequence; flash_fwd / flash_bwd of the
                      packed batch q_start, k_start (n_seq; nq, nk rows in all) */
    float *out, *lse, *dq, *dk, *dv, *scratch;
    const float *q, *k, *v, *dout, *o, *lse_in;
    const int32_t *q_pos, *q_start, *k_start;
    int nq, nk, H, K, D, n_seq;
};
struct paged_args { /* kv_append, decode_attn, decode_qkv, prefill_attn */
    float *out, *q;
    uint16_t *k_pool, *v_pool;       /* bf16 pools written (kv_append, decode_qkv) */
    const uint16_t *k_pin, *v_pin;   /* and read (decode_attn, prefill_attn) */
    const float *q_in, *k_in, *v_in, *rope;
    const uint16_t *q_norm, *k_norm;
    float eps;
    const int32_t *table, *len, *pos;
    int max_blocks, B, H, K, D, P;
};
struct logsoftmax_args { /* also the vocab_* kernels (mx, sums, lsum) */
    float *logprob, *entropy, *dlogits;
    uint16_t *dl16; /* the backwards' bf16 form */
    const float *logits, *dlogprob;
    const int32_t *targets;
    int N, V;
    float temperature;
    float *mx;
    const float *mx_in;
    double *sums, *lsum_out; /* lsum_out: logsoftmax_fwd's statistics, with mx */
    const double *lsum;
    const float *ew;     /* the entropy kernels: per-row weights, */
    double *H;           /* entropies out (entropy_bwd) */
    const double *H_in;  /* and in (vocab_entropy_bwd) */
};
struct sample_args {
    int32_t *tok;
    float *logprob;
    const float *logits;
    int B, V;
    const int64_t *traj, *pos;
    float temperature;
    int top_k;
    float top_p;
    uint64_t seed;
    float *scratch; /* (B, CUDA_SAMPLE_SCRATCH V): sampler_sample's 2V floats at a row's start */
};
struct vocab_sample_args { /* vocab_greedy_stats, vocab_sample_max / _sums / _pick */
    double *out;
    float *p;
    const float *p_in;
    const float *logits;
    const double *mx, *plan;
    int B, Vl, v0, slot, slots;
    int kr, off, n; /* vocab_sample_topk */
    float temperature;
};
struct adamw_args {
    float *params, *m, *v;
    uint16_t *w16;
    const float *grads;
    int64_t n;
    struct cuda_adamw s;
};

/* cuda_host_ops.c: elementwise, norms, rotary, the matrix products */
int ch_embed_gather(const void *args);
int ch_embed_scatter_add(const void *args);
int ch_rmsnorm_fwd(const void *args);
int ch_rmsnorm_bwd(const void *args);
int ch_rope_fwd(const void *args);
int ch_rope_bwd(const void *args);
int ch_qk_norm_rope_fwd(const void *args);
int ch_qk_norm_rope_bwd(const void *args);
int ch_swiglu_fwd(const void *args);
int ch_swiglu_bwd(const void *args);
int ch_swiglu_fwd16(const void *args);
int ch_swiglu_bwd16(const void *args);
int ch_f32_to_bf16(const void *args);
int ch_linear_fwd(const void *args);
int ch_add_bias(const void *args);
int ch_linear_bwd(const void *args);
int ch_bias_bwd(const void *args);
int ch_gemv_check(const struct cuda_gemv *g); /* gemv's refusals, as cu_gemv's */
int ch_gemv(const void *args);

/* cuda_host_attn.c: attention, the paged KV cache */
int ch_heads_check(const char *what, int H, int K, int D); /* D <= 256, K | H */
int ch_flash_check(const char *what, int H, int K, int D); /* cuda_flash_supports(D), K | H */
int ch_seqs_check(const char *what, const struct cuda_seqs *sq); /* 1: no rows, -1: malformed */
int ch_decode_qkv_check(int H, int K, int D);
int ch_attn_fwd(const void *args);
int ch_attn_bwd(const void *args);
int ch_flash_fwd(const void *args);
int ch_flash_bwd(const void *args);
int ch_prefill_attn(const void *args);
int ch_kv_append(const void *args);
int ch_decode_attn(const void *args);
int ch_decode_qkv(const void *args);

/* cuda_host_head.c: log-softmax, sampling, the optimizer */
int ch_logsoftmax_fwd(const void *args);
int ch_logsoftmax_bwd(const void *args);
int ch_vocab_max(const void *args);
int ch_vocab_sums(const void *args);
int ch_vocab_logsoftmax_bwd(const void *args);
int ch_entropy_bwd(const void *args);
int ch_vocab_entropy_bwd(const void *args);
int ch_vocab_greedy_stats(const void *args);
int ch_vocab_sample_max(const void *args);
int ch_vocab_sample_sums(const void *args);
int ch_vocab_sample_pick(const void *args);
int ch_vocab_sample_topk(const void *args);
int ch_sample(const void *args);
int ch_sum_squares(double *out, const float *x, int64_t n); /* not recordable */
int ch_weights_hash(uint64_t *out, const float *x, int64_t n); /* not recordable */
int ch_adamw_update(const void *args);

#endif
