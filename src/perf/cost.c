/*
 * The analytic cost model (include/libra/cost.h): seconds and bytes of rollout
 * (decode, prefill, KV capacity), training (FLOPs, gradient all-reduce, memory) and
 * weight sync, from a hardware profile, a model profile and efficiency parameters.
 * docs/emulation.md derives every formula and lists the reference defects fixed.
 *
 * Glossary: t TP degree of a rollout instance; B sequences in the running batch;
 * A KV tokens resident in it (sum of their contexts); P total and Pa active
 * parameters; b bytes per weight; L layers; H query heads, G KV heads, d head_dim;
 * h hidden; I MLP width (per expert for MoE); E experts, k experts per token.
 *
 * Everything is per GPU: a TP-t instance holds 1/t of the weights and 1/t of every
 * token's KV heads on each GPU (fixes reference planner.md §6.1, which divided
 * per-GPU quantities by t a second time). Rollout steps take the larger of the
 * memory time and the compute time (a roofline); both limits matter in practice
 * (small-batch decode is memory-bound, large-batch decode and prefill compute-bound).
 *
 * Limits: no pipeline parallelism, no expert parallelism (experts are TP-sharded like
 * vLLM's default), uniform expert routing, no overlap of communication with compute
 * (the exposed time is what the planner calibrates online).
 */
#include "libra/cost.h"

#include <assert.h>
#include <math.h>

/* ---- shared pieces ---- */

/* Parameters of one expert's MLP (gate, up, down) in one layer: 3 h I. */
static double expert_params(const struct model_profile *m)
{
    return 3.0 * m->hidden * m->intermediate;
}

/* Expected distinct experts a batch of n tokens routes to in one layer, for uniform
 * independent top-k routing: each expert is missed by one token with probability
 * 1 - k/E, so E (1 - (1 - k/E)^n). It is k at n = 1, below min(E, n k) always and
 * tends to E; the bound min(E, n k) would claim all 128 experts of Qwen3-30B-A3B at
 * n = 16 where only ~82 are expected. */
static double experts_touched(const struct model_profile *m, double n)
{
    double e = m->n_experts, k = m->n_active_experts;
    if (n <= 0) return 0;
    return e * (1.0 - pow(1.0 - k / e, n));
}

/* Weight bytes (whole model, before TP sharding) one forward pass over n tokens
 * reads. Dense: P b. MoE: the always-active part (attention, router, embeddings,
 * Pa - L k Pe) plus the experts the batch touches, L x touched x Pe. */
static double weight_bytes_read(const struct model_profile *m, double n)
{
    double b = m->dtype_bytes;
    if (m->n_experts == 0) return m->n_params * b;
    double pe = expert_params(m);
    double always = m->n_active_params - (double)m->n_layers * m->n_active_experts * pe;
    double bytes = (always + (double)m->n_layers * experts_touched(m, n) * pe) * b;
    return fmin(bytes, m->n_params * b);
}

/* Attention FLOPs of n query tokens over a causal context: each (query, key) pair
 * costs 4 H d per layer (2 H d for Q K^T, 2 H d for P V); n queries after ctx tokens
 * see n ctx + n^2 / 2 keys. */
static double attn_flops(const struct model_profile *m, double n, double ctx)
{
    return 4.0 * m->n_layers * m->n_heads * (double)m->head_dim * n * (ctx + n / 2.0);
}

/* Tensor-parallel communication of a forward pass over n tokens: two all-reduces
 * per layer (after attention and after the MLP) of n h b bytes; a ring all-reduce
 * moves 2 (t-1)/t of the message over each GPU's NVLink, plus one fixed latency. */
static double tp_allreduce_s(const struct cost_model *c, int t, double n)
{
    if (t <= 1) return 0;
    double bytes = n * c->model.hidden * c->model.dtype_bytes;
    double one = 2.0 * (t - 1) / t * bytes / c->hw.bw_intra_node + c->hw.latency_intra_s;
    return 2.0 * c->model.n_layers * one;
}

/* ---- rollout ---- */

/* kv(t) = 2 L ceil(G / t) d b: K and V of every layer for the KV heads one GPU holds.
 * When t > G the heads are replicated (each GPU still holds one), so kv stops falling;
 * ceil equals max(1, G/t) for the power-of-two t we use and stays right otherwise.
 * Qwen3-14B (L 40, G 8, d 128, bf16): 163840, 81920, 40960, 20480 B at t = 1, 2, 4, 8. */
double cost_kv_bytes_per_token(const struct cost_model *c, int t)
{
    assert(t >= 1);
    const struct model_profile *m = &c->model;
    int heads = (m->n_kv_heads + t - 1) / t;
    return 2.0 * m->n_layers * heads * (double)m->head_dim * m->dtype_bytes;
}

/* pool = C u - P b / t - W per GPU (C HBM, u gpu_memory_utilization, W workspace);
 * every GPU holds its kv(t) share of every token, so the instance holds
 * N(t) = floor(pool / kv(t) x (1 - frag)) tokens -- not t times that. N grows a
 * little faster than t (the weight shard shrinks too), never like t^2. */
double cost_kv_capacity_tokens(const struct cost_model *c, int t)
{
    assert(t >= 1);
    const struct model_profile *m = &c->model;
    double pool = c->hw.mem_capacity * c->p.gpu_memory_utilization -
                  m->n_params * m->dtype_bytes / t - c->p.act_workspace_bytes;
    if (pool <= 0) return 0;
    return floor(pool / cost_kv_bytes_per_token(c, t) * (1.0 - c->p.kv_frag_rate));
}

/* One decode iteration, per GPU:
 *   bytes = W(B) / t + A kv(t)     (weight shard + this GPU's share of all resident KV;
 *                                   W(B) = weight bytes a batch of B tokens reads)
 *   flops = (2 Pa B + 4 L H d A) / t
 *   time  = max(bytes / (mem_bw u_bw), flops / (peak mfu_prefill)) + TP all-reduce(B). */
double cost_decode_step_s(const struct cost_model *c, int t, int B, double A)
{
    assert(t >= 1);
    if (B <= 0) return 0;
    const struct model_profile *m = &c->model;
    double bytes = weight_bytes_read(m, B) / t + A * cost_kv_bytes_per_token(c, t);
    double mem_s = bytes / (c->hw.mem_bw * c->p.decode_bw_util);
    double flops = 2.0 * m->n_active_params * B + 4.0 * m->n_layers * m->n_heads * (double)m->head_dim * A;
    double comp_s = flops / (t * c->hw.flops_peak * c->p.prefill_mfu);
    return fmax(mem_s, comp_s) + tp_allreduce_s(c, t, B);
}

/* Prefill of n tokens after ctx cached ones:
 *   flops = 2 Pa n + 4 L H d n (ctx + n/2),   compute = flops / (t peak mfu_prefill)
 *   bytes = W(n) / t + (ctx + n) kv(t)        memory = bytes / (mem_bw u_bw)
 *   time  = max(compute, memory) + TP all-reduce(n).
 * The memory floor matters for the short re-prefills of tool returns. */
double cost_prefill_s(const struct cost_model *c, int t, double n, double ctx)
{
    assert(t >= 1);
    if (n <= 0) return 0;
    const struct model_profile *m = &c->model;
    double flops = 2.0 * m->n_active_params * n + attn_flops(m, n, ctx);
    double comp_s = flops / (t * c->hw.flops_peak * c->p.prefill_mfu);
    double bytes = weight_bytes_read(m, n) / t + (ctx + n) * cost_kv_bytes_per_token(c, t);
    double mem_s = bytes / (c->hw.mem_bw * c->p.decode_bw_util);
    return fmax(comp_s, mem_s) + tp_allreduce_s(c, t, n);
}

/* ---- training ---- */

/* One data-parallel rank (one GPU):
 *   flops = 6 Pa tokens + 12 L H d sum_len_sq / 2
 * (2 FLOPs per parameter per token forward, twice that backward; causal attention is
 * 2 L H d s^2 forward per sequence, x3 with backward), time = flops / (peak mfu_train).
 * Fixes reference §6.4, whose per-layer constants ignored the model's size. */
double cost_train_compute_s(const struct cost_model *c, double tokens, double sum_len_sq)
{
    const struct model_profile *m = &c->model;
    double flops = 6.0 * m->n_active_params * tokens +
                   12.0 * m->n_layers * m->n_heads * (double)m->head_dim * sum_len_sq / 2.0;
    return flops / (c->hw.flops_peak * c->p.train_mfu);
}

/* Ring all-reduce of the bf16 gradients (P b bytes) over dp replicas:
 *   2 (dp-1)/dp P b / bw_inter + 2 (dp-1) latency_inter,  0 at dp = 1.
 * The replicas are taken to span nodes (the training group is not guaranteed to sit
 * in one node: rank 0 shifts the packing), so the NIC is the bottleneck link. All of
 * it is counted as exposed; overlap with backward is left to online calibration. */
double cost_grad_allreduce_s(const struct cost_model *c, int dp)
{
    assert(dp >= 1);
    if (dp <= 1) return 0;
    double bytes = c->model.n_params * c->model.dtype_bytes;
    return 2.0 * (dp - 1) / dp * bytes / c->hw.bw_inter_node + 2.0 * (dp - 1) * c->hw.latency_inter_s;
}

/* Weights from the training root to the rollout ranks: P b / bw_inter + latency_inter.
 * A pipelined (chunked, tree or ring) broadcast delivers to every receiver in about
 * one message time, independent of their number. The real engines' syncs over MPI
 * are one: each place's receivers relay its blocks down a chain, and the chains of the
 * smallest TP degree feed the places nested in theirs (src/worker/sync_relay.c), so a
 * sender's link carries its part of the model once whatever the rollout layout, and
 * a TP-1 receiver's link the whole model. */
double cost_weight_sync_s(const struct cost_model *c)
{
    return c->model.n_params * c->model.dtype_bytes / c->hw.bw_inter_node + c->hw.latency_inter_s;
}

/* Activation bytes per token held at once during training, with full activation
 * checkpointing (one checkpoint per layer) and FlashAttention (no s^2 term):
 *   L h b                         the checkpointed input of every layer
 * + 2 b (4 h + 2 H d + 2 G d + 3 I_a)  one layer's recomputed activations and their
 *                                 gradients (norm outputs, q, k, v, attention output,
 *                                 gate, up, gate*up; I_a = k I for MoE)
 * + 4 V                           fp32 logits of the output head for the log-probs. */
static double act_bytes_per_token(const struct model_profile *m)
{
    double b = m->dtype_bytes, h = m->hidden, d = m->head_dim;
    double ia = (double)m->intermediate * (m->n_experts > 0 ? m->n_active_experts : 1);
    double layer = 2.0 * b * (4.0 * h + 2.0 * m->n_heads * d + 2.0 * m->n_kv_heads * d + 3.0 * ia);
    return m->n_layers * h * b + layer + 4.0 * m->vocab;
}

/* Per GPU: b P weights + b P gradients + (S - 2b) P / dp of fp32 optimizer state
 * (master copy 4 + Adam m 4 + v 4 = 12 B when S = 16), sharded over the replicas
 * (ZeRO-1 / distributed optimizer), + activations of tokens_per_gpu tokens + the
 * fixed workspace (CUDA context, NCCL buffers). Fixes reference §6.4 (2 B/param). */
double cost_train_memory_bytes(const struct cost_model *c, int dp, double tokens_per_gpu)
{
    assert(dp >= 1);
    const struct model_profile *m = &c->model;
    double b = m->dtype_bytes;
    double sharded = fmax(0.0, c->p.optimizer_bytes_per_param - 2.0 * b);
    double state = 2.0 * b * m->n_params + sharded * m->n_params / dp;
    return state + tokens_per_gpu * act_bytes_per_token(m) + c->p.act_workspace_bytes;
}

static double rate_decode(const struct rates *r, int tp, int batch, double kv_tokens)
{
    return cost_decode_step_s(r->ctx, tp, batch, kv_tokens);
}

static double rate_prefill(const struct rates *r, int tp, double n, double ctx_tokens)
{
    return cost_prefill_s(r->ctx, tp, n, ctx_tokens);
}

static double rate_capacity(const struct rates *r, int tp)
{
    return cost_kv_capacity_tokens(r->ctx, tp);
}

void cost_rates(const struct cost_model *c, struct rates *r)
{
    *r = (struct rates){.ctx = c,
                        .decode_step_s = rate_decode,
                        .prefill_s = rate_prefill,
                        .kv_capacity_tokens = rate_capacity};
}
