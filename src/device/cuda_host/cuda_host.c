/*
 * The host module's table (include/libra/cuda_host.h): each kernel entry of
 * include/libra/cuda_api.h packs its arguments into the kernel's argument struct and
 * launches it (ch_launch: run now, or recorded into the graph being recorded). The
 * refusals a CUDA launcher makes before it launches (gemv's shapes, the attention
 * kernels' head dimensions) are made here, at the call, recording or not.
 */
#include "libra/cuda_host.h"

#include "cuda_host_internal.h"

#define LAUNCH(kernel, args) ch_launch(kernel, &(args), sizeof(args))

static int embed_gather(float *x, const uint16_t *embed, const int32_t *tokens, int N, int C,
                        int V)
{
    struct embed_args a = {.x = x, .embed = embed, .tokens = tokens, .N = N, .C = C, .V = V};
    return LAUNCH(ch_embed_gather, a);
}

static int embed_scatter_add(float *dembed, const float *dx, const int32_t *tokens, int N,
                             int C, int V)
{
    struct embed_args a = {.x = dembed, .in = dx, .tokens = tokens, .N = N, .C = C, .V = V};
    return LAUNCH(ch_embed_scatter_add, a);
}

static int rmsnorm_fwd(float *y, const float *x, const uint16_t *w, int N, int C, float eps)
{
    struct rmsnorm_args a = {.y = y, .x = x, .w16 = w, .N = N, .C = C, .eps = eps};
    return LAUNCH(ch_rmsnorm_fwd, a);
}

static int rmsnorm_fwd16(uint16_t *y16, const float *x, const uint16_t *w, int N, int C,
                         float eps)
{
    struct rmsnorm_args a = {.y16 = y16, .x = x, .w16 = w, .N = N, .C = C, .eps = eps};
    return LAUNCH(ch_rmsnorm_fwd, a);
}

static int rmsnorm_bwd(float *dx, uint16_t *dx16, float *dw, const float *dy, const float *x,
                       const float *w, float *rstd, int N, int C, float eps)
{
    struct rmsnorm_args a = {.dx = dx, .y16 = dx16, .dw = dw, .dy = dy, .x = x, .w = w,
                             .rstd = rstd, .N = N, .C = C, .eps = eps};
    return LAUNCH(ch_rmsnorm_bwd, a);
}

static int rope_fwd(float *x, const int32_t *pos, int N, int n_heads, int D, const float *rope)
{
    struct rope_args a = {x, pos, N, n_heads, D, rope};
    return LAUNCH(ch_rope_fwd, a);
}

static int rope_bwd(float *dx, const int32_t *pos, int N, int n_heads, int D, const float *rope)
{
    struct rope_args a = {dx, pos, N, n_heads, D, rope};
    return LAUNCH(ch_rope_bwd, a);
}

static int qk_norm_rope_fwd(float *y, const float *x, const uint16_t *w, const int32_t *pos,
                            const float *rope, int N, int n_heads, int D, float eps)
{
    struct qk_args a = {.y = y, .x = x, .w16 = w, .pos = pos, .rope = rope, .N = N,
                        .n_heads = n_heads, .D = D, .eps = eps};
    return LAUNCH(ch_qk_norm_rope_fwd, a);
}

/* rstd is the CUDA kernel's scratch: not used here. */
static int qk_norm_rope_bwd(float *dx, float *dw, float *dy, const float *x, const float *w,
                            float *rstd, const int32_t *pos, const float *rope, int N,
                            int n_heads, int D, float eps)
{
    (void)rstd;
    struct qk_args a = {.dx = dx, .dw = dw, .dy = dy, .x = x, .w = w, .pos = pos,
                        .rope = rope, .N = N, .n_heads = n_heads, .D = D, .eps = eps};
    return LAUNCH(ch_qk_norm_rope_bwd, a);
}

static int swiglu_fwd(float *y, float *sig, const float *g, const float *u, int64_t n)
{
    struct swiglu_args a = {.y = y, .sig = sig, .g = g, .u = u, .n = n};
    return LAUNCH(ch_swiglu_fwd, a);
}

static int swiglu_bwd(float *dg, float *du, const float *dy, const float *g, const float *u,
                      const float *sig, int64_t n)
{
    struct swiglu_args a = {.dg = dg, .du = du, .dy = dy, .g = g, .u = u, .sig_in = sig, .n = n};
    return LAUNCH(ch_swiglu_bwd, a);
}

static int swiglu_fwd16(uint16_t *y16, float *sig, const float *g, const float *u, int64_t n)
{
    struct swiglu_args a = {.y16 = y16, .sig = sig, .g = g, .u = u, .n = n};
    return LAUNCH(ch_swiglu_fwd16, a);
}

static int swiglu_bwd16(uint16_t *dg16, uint16_t *du16, const float *dy, const float *g,
                        const float *u, const float *sig, int64_t n)
{
    struct swiglu_args a = {.dg16 = dg16, .du16 = du16, .dy = dy, .g = g, .u = u,
                            .sig_in = sig, .n = n};
    return LAUNCH(ch_swiglu_bwd16, a);
}

static int f32_to_bf16(uint16_t *y, const float *x, int64_t n)
{
    if (ch_side_check_write(y, (size_t)(n > 0 ? n : 0) * sizeof *y, "f32_to_bf16")) return -1;
    struct convert_args a = {y, x, n};
    return LAUNCH(ch_f32_to_bf16, a);
}

static int linear_fwd(float *y, const uint16_t *x, const uint16_t *w, int N, int in, int out,
                      int accumulate)
{
    struct linear_args a = {.y = y, .x = x, .w = w, .N = N, .in = in, .out = out,
                            .accumulate = accumulate};
    return LAUNCH(ch_linear_fwd, a);
}

static int linear_fwd_res(float *y, const float *res, const uint16_t *x, const uint16_t *w,
                          int N, int in, int out)
{
    struct linear_args a = {.y = y, .res = res, .x = x, .w = w, .N = N, .in = in, .out = out};
    return LAUNCH(ch_linear_fwd, a);
}

static int add_bias(float *y, const float *b, int N, int out)
{
    struct linear_args a = {.y = y, .b = b, .N = N, .out = out};
    return LAUNCH(ch_add_bias, a);
}

static int linear_bwd(float *dx, float *dw, const uint16_t *dy, const uint16_t *x,
                      const uint16_t *w, int N, int in, int out, int accumulate)
{
    struct linear_args a = {.dx = dx, .dw = dw, .dy = dy, .x = x, .w = w, .N = N, .in = in,
                            .out = out, .accumulate = accumulate};
    return LAUNCH(ch_linear_bwd, a);
}

static int bias_bwd(float *db, const float *dy, int N, int out)
{
    struct linear_args a = {.y = db, .dyf = dy, .N = N, .out = out};
    return LAUNCH(ch_bias_bwd, a);
}

static int gemv(const struct cuda_gemv *g)
{
    if (ch_gemv_check(g)) return -1;
    struct gemv_args a = {*g};
    return LAUNCH(ch_gemv, a);
}

static int attn_fwd(float *out, const float *q, const float *k, const float *v,
                    const int32_t *q_pos, int nq, int nk, int H, int K, int D)
{
    if (nq <= 0) return 0;
    if (ch_heads_check("attn_fwd", H, K, D)) return -1;
    struct attn_args a = {.out = out, .q = q, .k = k, .v = v, .q_pos = q_pos, .nq = nq,
                          .nk = nk, .H = H, .K = K, .D = D};
    return LAUNCH(ch_attn_fwd, a);
}

static int attn_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                    const float *k, const float *v, const int32_t *q_pos, int nq, int nk, int H,
                    int K, int D, float *stats)
{
    if (nq <= 0 || nk <= 0) return 0;
    if (ch_heads_check("attn_bwd", H, K, D)) return -1;
    struct attn_args a = {.dq = dq, .dk = dk, .dv = dv, .dout = dout, .q = q, .k = k, .v = v,
                          .q_pos = q_pos, .nq = nq, .nk = nk, .H = H, .K = K, .D = D,
                          .scratch = stats};
    return LAUNCH(ch_attn_bwd, a);
}

static int flash_fwd(float *out, float *lse, const float *q, const float *k, const float *v,
                     const int32_t *q_pos, const struct cuda_seqs *sq, int H, int K, int D)
{
    if (ch_flash_check("flash_fwd", H, K, D)) return -1;
    int e = ch_seqs_check("flash_fwd", sq);
    if (e) return e < 0 ? -1 : 0;
    struct attn_args a = {.out = out, .lse = lse, .q = q, .k = k, .v = v, .q_pos = q_pos,
                          .q_start = sq->q_start, .k_start = sq->k_start, .n_seq = sq->n,
                          .nq = sq->nq, .nk = sq->nk, .H = H, .K = K, .D = D};
    return LAUNCH(ch_flash_fwd, a);
}

static int flash_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q,
                     const float *k, const float *v, const float *out, const float *lse,
                     const int32_t *q_pos, const struct cuda_seqs *sq, int H, int K, int D,
                     float *delta)
{
    if (ch_flash_check("flash_bwd", H, K, D)) return -1;
    int e = ch_seqs_check("flash_bwd", sq);
    if (e) return e < 0 ? -1 : 0;
    struct attn_args a = {.dq = dq, .dk = dk, .dv = dv, .dout = dout, .q = q, .k = k, .v = v,
                          .o = out, .lse_in = lse, .q_pos = q_pos, .q_start = sq->q_start,
                          .k_start = sq->k_start, .n_seq = sq->n, .nq = sq->nq, .nk = sq->nk,
                          .H = H, .K = K, .D = D, .scratch = delta};
    return LAUNCH(ch_flash_bwd, a);
}

static int prefill_attn(float *out, const float *q, const uint16_t *k_pool, const uint16_t *v_pool,
                        const int32_t *table, const int32_t *q_pos, int nq, int H, int K, int D,
                        int P)
{
    if (nq <= 0) return 0;
    if (ch_flash_check("prefill_attn", H, K, D)) return -1;
    struct paged_args a = {.out = out, .q_in = q, .k_pin = k_pool, .v_pin = v_pool,
                           .table = table, .pos = q_pos, .B = nq, .H = H, .K = K, .D = D,
                           .P = P};
    return LAUNCH(ch_prefill_attn, a);
}

static int kv_append(uint16_t *k_pool, uint16_t *v_pool, const float *k_new, const float *v_new,
                     const int32_t *table, int max_blocks, const int32_t *len, int B, int K,
                     int D, int P)
{
    struct paged_args a = {.k_pool = k_pool, .v_pool = v_pool, .k_in = k_new, .v_in = v_new,
                           .table = table, .max_blocks = max_blocks, .len = len, .B = B,
                           .K = K, .D = D, .P = P};
    return LAUNCH(ch_kv_append, a);
}

static int decode_attn(float *out, const float *q, const uint16_t *k_pool, const uint16_t *v_pool,
                       const int32_t *table, int max_blocks, const int32_t *len, int B, int H,
                       int K, int D, int P)
{
    if (B <= 0) return 0;
    if (ch_heads_check("decode_attn", H, K, D)) return -1;
    struct paged_args a = {.out = out, .q_in = q, .k_pin = k_pool, .v_pin = v_pool,
                           .table = table, .max_blocks = max_blocks, .len = len, .B = B,
                           .H = H, .K = K, .D = D, .P = P};
    return LAUNCH(ch_decode_attn, a);
}

static int decode_qkv(float *q, uint16_t *k_pool, uint16_t *v_pool, const float *qlin,
                      const float *klin, const float *v, const uint16_t *q_norm,
                      const uint16_t *k_norm, float eps, const int32_t *pos, const float *rope,
                      const int32_t *table, int max_blocks, const int32_t *len, int B, int H,
                      int K, int D, int P)
{
    if (B <= 0) return 0;
    if (ch_decode_qkv_check(H, K, D)) return -1;
    struct paged_args a = {.q = q, .k_pool = k_pool, .v_pool = v_pool, .q_in = qlin,
                           .k_in = klin, .v_in = v, .q_norm = q_norm, .k_norm = k_norm,
                           .eps = eps, .pos = pos, .rope = rope, .table = table,
                           .max_blocks = max_blocks, .len = len, .B = B, .H = H, .K = K,
                           .D = D, .P = P};
    return LAUNCH(ch_decode_qkv, a);
}

static int logsoftmax_fwd(float *logprob, float *entropy, float *mx, double *lsum,
                          const float *logits, const int32_t *targets, int N, int V,
                          float temperature)
{
    struct logsoftmax_args a = {.logprob = logprob, .entropy = entropy, .mx = mx,
                                .lsum_out = lsum, .logits = logits, .targets = targets, .N = N,
                                .V = V, .temperature = temperature};
    return LAUNCH(ch_logsoftmax_fwd, a);
}

/* The statistics, when given, are the ones logsoftmax_backward forms again here. */
static int logsoftmax_bwd(float *dlogits, uint16_t *dl16, const float *dlogprob,
                          const float *logits, const int32_t *targets, const float *mx,
                          const double *lsum, int N, int V, float temperature)
{
    if (!mx != !lsum) return CH_FAIL("logsoftmax_bwd: mx and lsum go together");
    struct logsoftmax_args a = {.dlogits = dlogits, .dl16 = dl16, .dlogprob = dlogprob,
                                .logits = logits, .targets = targets, .N = N, .V = V,
                                .temperature = temperature};
    return LAUNCH(ch_logsoftmax_bwd, a);
}

static int vocab_max(float *mx, const float *logits, int N, int V, float temperature)
{
    struct logsoftmax_args a = {.mx = mx, .logits = logits, .N = N, .V = V,
                                .temperature = temperature};
    return LAUNCH(ch_vocab_max, a);
}

static int vocab_sums(double *sums, const float *logits, const float *mx, const int32_t *targets,
                      int N, int V, float temperature)
{
    struct logsoftmax_args a = {.sums = sums, .logits = logits, .mx_in = mx, .targets = targets,
                                .N = N, .V = V, .temperature = temperature};
    return LAUNCH(ch_vocab_sums, a);
}

static int vocab_logsoftmax_bwd(float *dlogits, uint16_t *dl16, const float *dlogprob,
                                const float *logits, const int32_t *targets, const float *mx,
                                const double *lsum, int N, int V, float temperature)
{
    struct logsoftmax_args a = {.dlogits = dlogits, .dl16 = dl16, .dlogprob = dlogprob,
                                .logits = logits, .targets = targets, .mx_in = mx, .lsum = lsum,
                                .N = N, .V = V, .temperature = temperature};
    return LAUNCH(ch_vocab_logsoftmax_bwd, a);
}

static int entropy_bwd(float *dlogits, double *H, const float *ew, const float *logits, int N,
                       int V, float temperature)
{
    struct logsoftmax_args a = {.dlogits = dlogits, .H = H, .ew = ew, .logits = logits, .N = N,
                                .V = V, .temperature = temperature};
    return LAUNCH(ch_entropy_bwd, a);
}

static int vocab_entropy_bwd(float *dlogits, const float *ew, const float *logits,
                             const float *mx, const double *lsum, const double *H, int N, int V,
                             float temperature)
{
    struct logsoftmax_args a = {.dlogits = dlogits, .ew = ew, .logits = logits, .mx_in = mx,
                                .lsum = lsum, .H_in = H, .N = N, .V = V,
                                .temperature = temperature};
    return LAUNCH(ch_vocab_entropy_bwd, a);
}

static int vocab_greedy_stats(double *xb, const float *logits, int B, int Vl, int v0, int slot,
                              int slots)
{
    struct vocab_sample_args a = {.out = xb, .logits = logits, .B = B, .Vl = Vl, .v0 = v0,
                                  .slot = slot, .slots = slots};
    return LAUNCH(ch_vocab_greedy_stats, a);
}

static int vocab_sample_max(double *mx, const float *logits, int B, int Vl, float temperature)
{
    struct vocab_sample_args a = {.out = mx, .logits = logits, .B = B, .Vl = Vl,
                                  .temperature = temperature};
    return LAUNCH(ch_vocab_sample_max, a);
}

static int vocab_sample_sums(double *xb, float *p, const float *logits, const double *mx, int B,
                             int Vl, float temperature, int slot, int slots)
{
    struct vocab_sample_args a = {.out = xb, .p = p, .logits = logits, .mx = mx, .B = B,
                                  .Vl = Vl, .temperature = temperature, .slot = slot,
                                  .slots = slots};
    return LAUNCH(ch_vocab_sample_sums, a);
}

static int vocab_sample_pick(double *res, const float *logits, const float *p, const double *plan,
                             const double *mx, int B, int Vl, int v0, float temperature)
{
    struct vocab_sample_args a = {.out = res, .p_in = p, .logits = logits, .plan = plan,
                                  .mx = mx, .B = B, .Vl = Vl, .v0 = v0,
                                  .temperature = temperature};
    return LAUNCH(ch_vocab_sample_pick, a);
}

static int vocab_sample_topk(double *xb, float *scratch, const float *logits, const double *mx,
                             int B, int Vl, int v0, float temperature, int kr, int off, int n,
                             int slot, int slots)
{
    struct vocab_sample_args a = {.out = xb, .p = scratch, .logits = logits, .mx = mx, .B = B,
                                  .Vl = Vl, .v0 = v0, .temperature = temperature, .kr = kr,
                                  .off = off, .n = n, .slot = slot, .slots = slots};
    return LAUNCH(ch_vocab_sample_topk, a);
}

static int sample(int32_t *tok, float *logprob, const float *logits, int B, int V,
                  const int64_t *traj, const int64_t *pos, float temperature, int top_k,
                  float top_p, uint64_t seed, float *scratch)
{
    struct sample_args a = {.tok = tok, .logprob = logprob, .logits = logits, .B = B, .V = V,
                            .traj = traj, .pos = pos, .temperature = temperature,
                            .top_k = top_k, .top_p = top_p, .seed = seed, .scratch = scratch};
    return LAUNCH(ch_sample, a);
}

static int adamw_update(float *params, float *m, float *v, uint16_t *w16, const float *grads,
                        int64_t n, const struct cuda_adamw *s)
{
    struct adamw_args a = {params, m, v, w16, grads, n, *s};
    return LAUNCH(ch_adamw_update, a);
}

/* Every call runs to its end before the next starts here, which is all an overlapped
 * launch promises: on whenever asked. */
static int launch_overlap(int on) { return on != 0; }

static const struct cuda_api api = {
    .abi = LIBRA_CUDA_ABI, .device_count = ch_device_count,
    .device_describe = ch_device_describe, .set_device = ch_set_device, .versions = ch_versions,
    .alloc = ch_alloc, .free = ch_free, .to_device = ch_to_device, .to_host = ch_to_host,
    .copy = ch_copy, .zero = ch_zero, .mem_info = ch_mem_info, .sync = ch_sync,
    .embed_gather = embed_gather, .rmsnorm_fwd = rmsnorm_fwd,
    .rmsnorm_fwd16 = rmsnorm_fwd16, .rope_fwd = rope_fwd,
    .swiglu_fwd = swiglu_fwd, .swiglu_fwd16 = swiglu_fwd16, .f32_to_bf16 = f32_to_bf16,
    .embed_scatter_add = embed_scatter_add, .rmsnorm_bwd = rmsnorm_bwd, .rope_bwd = rope_bwd,
    .qk_norm_rope_fwd = qk_norm_rope_fwd, .qk_norm_rope_bwd = qk_norm_rope_bwd,
    .swiglu_bwd = swiglu_bwd, .swiglu_bwd16 = swiglu_bwd16, .linear_fwd = linear_fwd,
    .linear_fwd_res = linear_fwd_res, .add_bias = add_bias,
    .linear_bwd = linear_bwd, .bias_bwd = bias_bwd, .gemv = gemv, .attn_fwd = attn_fwd,
    .attn_bwd = attn_bwd, .flash_fwd = flash_fwd, .flash_bwd = flash_bwd,
    .prefill_attn = prefill_attn, .kv_append = kv_append, .decode_attn = decode_attn,
    .decode_qkv = decode_qkv, .logsoftmax_fwd = logsoftmax_fwd,
    .logsoftmax_bwd = logsoftmax_bwd, .sample = sample, .sum_squares = ch_sum_squares,
    .adamw_update = adamw_update, .graph_begin = ch_graph_begin, .graph_end = ch_graph_end,
    .graph_launch = ch_graph_launch, .graph_free = ch_graph_free, .last_error = ch_last_error,
    .vocab_max = vocab_max, .vocab_sums = vocab_sums,
    .vocab_logsoftmax_bwd = vocab_logsoftmax_bwd,
    /* no NCCL: a TP group's all-reduces are host-staged (gpu_comm.h) */
    .entropy_bwd = entropy_bwd, .vocab_entropy_bwd = vocab_entropy_bwd,
    .vocab_greedy_stats = vocab_greedy_stats, .vocab_sample_max = vocab_sample_max,
    .vocab_sample_sums = vocab_sample_sums, .vocab_sample_pick = vocab_sample_pick,
    .vocab_sample_topk = vocab_sample_topk, .weights_hash = ch_weights_hash,
    .host_alloc = ch_host_alloc, .host_free = ch_host_free,
    /* no NCCL: nccl_send, nccl_recv and nccl_group NULL (weight syncs go through MPI) */
    .copy2d = ch_copy2d, .side_stream = ch_side_stream,
    .to_device_async = ch_to_device, .side_mark = ch_side_mark,
    .side_done = ch_side_done, .side_join = ch_side_join, .launch_overlap = launch_overlap,
};

const struct cuda_api *cuda_host_api(void) { return &api; }
