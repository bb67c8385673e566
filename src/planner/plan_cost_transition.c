/*
 * The planner's transition costs (include/libra/plan_cost.h): the one-off seconds a
 * change of plan costs (re-split, weights and optimizer state to the ranks that change
 * role, re-prefill of the KV cache of dissolved rollout instances), and what a lent
 * hybrid replica fetches before it contributes. docs/planner.md "Cost model" derives
 * them. The planner amortises these over the horizon a plan is kept.
 *
 * Glossary: P parameters, b bytes per weight, S optimizer bytes per parameter (the
 * fp32 state is S - 2b of them: master copy and Adam moments; gradients are not
 * moved), dp the core data-parallel degree.
 *
 * Limits: a joiner is taken to fetch whole-model weights and a 1 / dp share of the
 * whole state (the struct does not carry its TP / PP shard, so this is an upper bound
 * for TP > 1); all transfers ride the per-GPU network link.
 */
#include "libra/plan_cost.h"

#include <assert.h>
#include <math.h>

/* The lost KV is re-prefilled as sequences of this many tokens: the struct carries
 * only the token total, and one sequence of all of them would make the attention term
 * quadratic in the total (1M lost tokens would cost ~15x their linear FLOPs). A
 * typical agentic context; longer ones raise the attention share modestly. */
#define PC_REPREFILL_SEQ_TOKENS 8192.0

/* Bytes of fp32 optimizer state per parameter (master copy, Adam m and v). */
static double state_bytes_per_param(const struct cost_model *c)
{
    return fmax(0.0, c->p.optimizer_bytes_per_param - 2.0 * c->model.dtype_bytes);
}

/* One point-to-point fetch of `bytes` over the network. */
static double fetch_s(const struct cost_model *c, double bytes)
{
    return bytes / c->hw.bw_inter_node + c->hw.latency_inter_s;
}

double pc_join_fetch_s(const struct cost_model *c, int dp_core)
{
    if (dp_core < 1) dp_core = 1; /* a core has at least one replica */
    double P = c->model.n_params;
    return fetch_s(c, c->model.dtype_bytes * P + state_bytes_per_param(c) * P / (dp_core + 1.0));
}

/* Prefill of `tokens` lost KV tokens at TP 1 as sequences of PC_REPREFILL_SEQ_TOKENS
 * (fewer tokens: one sequence of them); increasing in tokens. */
static double reprefill_s(const struct cost_model *c, double tokens)
{
    if (!(tokens > 0)) return 0;
    double seq = fmin(tokens, PC_REPREFILL_SEQ_TOKENS);
    return tokens / seq * cost_prefill_s(c, 1, seq, 0);
}

double pc_transition_s(const struct cost_model *c, const struct transition *t)
{
    double P = c->model.n_params, b = c->model.dtype_bytes;
    int dp = t->dp_after > 1 ? t->dp_after : 1;
    double move = 0;
    if (t->to_rollout > 0) move = fmax(move, cost_weight_sync_s(c));
    if (t->to_train > 0) move = fmax(move, fetch_s(c, b * P + state_bytes_per_param(c) * P / dp));
    if (t->to_hybrid > 0) move = fmax(move, pc_join_fetch_s(c, dp));
    int gpus = t->rollout_gpus_after > 1 ? t->rollout_gpus_after : 1;
    return fmax(0.0, t->resplit_s) + move + reprefill_s(c, t->kv_lost_tokens) / gpus;
}
