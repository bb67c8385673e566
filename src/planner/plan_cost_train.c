/*
 * The planner's training cost (include/libra/plan_cost.h): the time of one step of a
 * tp x pp x dp training configuration (plus lent hybrid replicas) on one batch, and
 * its peak memory per GPU. docs/planner.md "Cost model" derives every term.
 *
 * Glossary: P total and Pa active parameters; b bytes per weight; S optimizer bytes
 * per parameter (cost_params.optimizer_bytes_per_param); L layers; h hidden; H query
 * heads, G KV heads, d head_dim; I_a active MLP width (k I for MoE); V vocabulary;
 * R = dp + n_hybrid replicas; m micro-batch sequences.
 *
 * Limits: TP groups sit inside one node (NVLink), pipeline stages and DP replicas
 * talk over the network; layers split evenly over stages; no sequence parallelism
 * (checkpointed layer inputs are replicated over TP, which overestimates memory a
 * little); no overlap of communication with compute (online calibration scales the
 * terms); recompute's extra forward all-reduces are not counted.
 */
#include "libra/plan_cost.h"

#include <assert.h>
#include <limits.h>
#include <math.h>

/* Reference planner.md §1.3: train_mem_frag_rate and GlobalResourcePlannerConfig's
 * memory_safety_margin. */
#define PC_TRAIN_MEM_FRAG 0.08
#define PC_TRAIN_MEM_MARGIN 2e9

double pc_logits_bytes(const struct model_profile *m, int batch, int S, int tp)
{
    assert(tp >= 1);
    if (batch < 1) batch = 1;
    if (S < 1) S = 1;
    double local_vocab = (double)((m->vocab + tp - 1) / tp);
    return (double)batch * (S - 1) * local_vocab * 4.0 * 1.5;
}

/* One ring all-reduce of `bytes` over n members with one link of bw bytes/s each:
 * 2 (n-1)/n bytes / bw + lat per hop, 2 (n-1) hops; 0 when n = 1. */
static double ring_allreduce_s(double bytes, int n, double bw, double lat)
{
    if (n <= 1) return 0;
    return 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * lat;
}

/* Activation bytes one GPU of a stage holds per token of its micro-batch, split into
 * the per-layer checkpoints (layer inputs of the stage's L / pp layers, replicated
 * over TP) and one layer's recomputed working set (norm outputs replicated; q, k, v,
 * attention output and the MLP's gate, up, gate*up sharded over TP), both in
 * gradients as well as values: the structure of cost.c's act_bytes_per_token, with
 * the fp32 logits taken out (pc_logits_bytes counts them). */
static void act_bytes(const struct model_profile *m, int tp, int pp, double *ckpt, double *layer)
{
    double b = m->dtype_bytes, h = m->hidden, d = m->head_dim;
    double ia = (double)m->intermediate * (m->n_experts > 0 ? m->n_active_experts : 1);
    double kv_heads = (double)((m->n_kv_heads + tp - 1) / tp);
    *ckpt = (double)m->n_layers / pp * h * b;
    *layer = 2.0 * b * (4.0 * h + (2.0 * m->n_heads * d + 3.0 * ia) / tp + 2.0 * kv_heads * d);
}

double pc_train_step(const struct cost_model *c, const struct train_shape *s, int n_hybrid,
                     int n_seqs, double tokens, double sum_len_sq, double max_len,
                     struct train_est *out)
{
    assert(s->tp >= 1 && s->pp >= 1 && s->dp >= 1 && s->micro >= 1 && n_hybrid >= 0);
    struct train_est local;
    if (!out) out = &local;
    const struct model_profile *m = &c->model;
    const int tp = s->tp, pp = s->pp, R = s->dp + n_hybrid;
    const double gpus = (double)tp * pp, b = m->dtype_bytes, P = m->n_params;

    /* The slowest replica's share: ceil(n / R) sequences, token sums in proportion. */
    int share = n_seqs > 0 ? (n_seqs + R - 1) / R : 0;
    double frac = n_seqs > 0 ? (double)share / n_seqs : 0;
    double share_tokens = fmax(0.0, tokens) * frac, share_sq = fmax(0.0, sum_len_sq) * frac;
    int n_micro = share > s->micro ? (share + s->micro - 1) / s->micro : 1;
    int micro_eff = share < s->micro ? (share > 1 ? share : 1) : s->micro;

    /* Compute: the replica's FLOPs over its tp pp GPUs. */
    out->compute_s = cost_train_compute_s(c, share_tokens, share_sq) / gpus;

    /* TP: 2 all-reduces per layer forward, 2 backward, each of the micro-batch's
     * activations (n_micro of them per step), over the stage's L / pp layers. */
    out->tp_comm_s = 0;
    if (tp > 1) {
        double bytes = share_tokens * m->hidden * b;
        out->tp_comm_s = 4.0 * m->n_layers / pp *
                         (2.0 * (tp - 1) / tp * bytes / c->hw.bw_intra_node + n_micro * c->hw.latency_intra_s);
    }

    /* PP (1F1B): fill and drain idle (pp-1) of n_micro + pp - 1 slots, i.e. a
     * (pp-1)/n_micro fraction of the stage's work; every slot sends one activation
     * forward and one gradient backward of a mean micro-batch over the network. */
    out->pp_bubble_s = 0;
    if (pp > 1) {
        double slots = n_micro + pp - 1.0;
        double mb_bytes = share_tokens / n_micro * m->hidden * b;
        out->pp_bubble_s = (pp - 1.0) / n_micro * (out->compute_s + out->tp_comm_s) +
                           2.0 * slots * (mb_bytes / c->hw.bw_inter_node + c->hw.latency_inter_s);
    }

    /* DP: every GPU reduces its 1 / (tp pp) shard of the bf16 gradients with its
     * peers of the other R - 1 replicas, in parallel over the shards. */
    out->dp_comm_s = ring_allreduce_s(P * b / gpus, R, c->hw.bw_inter_node, c->hw.latency_inter_s);

    /* Memory per GPU: weights and gradients sharded over tp pp; the fp32 optimizer
     * state (S - 2b per parameter) also over the core dp (distributed optimizer);
     * min(pp, n_micro) micro-batches of checkpoints in flight on the first stage;
     * one layer's working set; the log-prob logits; the fixed workspace. */
    double ckpt, layer;
    act_bytes(m, tp, pp, &ckpt, &layer);
    double mb_tokens = micro_eff * fmax(0.0, max_len);
    int in_flight = pp < n_micro ? pp : n_micro;
    int S = max_len >= INT_MAX ? INT_MAX : (int)ceil(fmax(1.0, max_len));
    double state = 2.0 * b * P / gpus + fmax(0.0, c->p.optimizer_bytes_per_param - 2.0 * b) * P / (gpus * s->dp);
    out->mem_bytes = state + mb_tokens * (in_flight * ckpt + layer) + pc_logits_bytes(m, micro_eff, S, tp) +
                     c->p.act_workspace_bytes;
    out->mem_limit = c->hw.mem_capacity * (1.0 - PC_TRAIN_MEM_FRAG) - PC_TRAIN_MEM_MARGIN;
    out->oom = out->mem_bytes > out->mem_limit;

    out->step_s = out->oom ? INFINITY : out->compute_s + out->tp_comm_s + out->pp_bubble_s + out->dp_comm_s;
    return out->step_s;
}
