/*
 * The analytic cost model of one GPU cluster: rollout (decode, prefill, KV
 * capacity), training (FLOP-based step time, gradient all-reduce, memory) and
 * weight sync. It is per GPU and correct in TP (fixes reference/planner.md §6.1:
 * no t^2 capacity, no 1/t^2 decode), FLOP-based for training with real optimizer
 * state (§6.4). The emulated backend sleeps these durations (scaled); the planner
 * issue reuses the same functions.
 *
 * Glossary: t = tensor-parallel degree of a rollout instance, A = KV tokens
 * resident in the running batch, B = sequences in the running batch.
 */
#ifndef LIBRA_COST_H
#define LIBRA_COST_H

#include "libra/profile.h"
#include "libra/rates.h"

struct cost_params {
    double decode_bw_util;         /* fraction of HBM bandwidth a decode step reaches */
    double prefill_mfu;            /* FLOP utilisation of prefill */
    double train_mfu;              /* FLOP utilisation of training */
    double gpu_memory_utilization; /* fraction of HBM a rollout instance may use */
    double kv_frag_rate;           /* KV capacity lost to fragmentation */
    double act_workspace_bytes;    /* per-GPU activation workspace */
    double optimizer_bytes_per_param; /* weights + grads + Adam moments + master copy (16) */
};

struct cost_model {
    struct hw_profile hw;
    struct model_profile model;
    struct cost_params p;
};

/* KV-cache bytes one token occupies on each GPU of a TP-t instance. */
double cost_kv_bytes_per_token(const struct cost_model *c, int t);
/* KV tokens a TP-t instance holds (whole instance); 0 when the weights do not fit. */
double cost_kv_capacity_tokens(const struct cost_model *c, int t);
/* One decode iteration of a TP-t instance with B sequences and A resident KV tokens. */
double cost_decode_step_s(const struct cost_model *c, int t, int B, double A);
/* Prefill of n new tokens appended to a context of ctx tokens on a TP-t instance. */
double cost_prefill_s(const struct cost_model *c, int t, double n, double ctx);
/* Forward+backward of a training shard: tokens in total, sum of squared sequence
 * lengths (attention term), on one data-parallel rank. */
double cost_train_compute_s(const struct cost_model *c, double tokens, double sum_len_sq);
/* Exposed gradient all-reduce over dp replicas (ring, bf16 gradients). */
double cost_grad_allreduce_s(const struct cost_model *c, int dp);
/* Broadcast of the full weights from the training root to the rollout ranks. */
double cost_weight_sync_s(const struct cost_model *c);
/* Training memory per GPU for dp replicas with ZeRO-style sharding of the optimizer
 * state; the planner uses it to reject plans that do not fit. */
double cost_train_memory_bytes(const struct cost_model *c, int dp, double tokens_per_gpu);

/* The cost model as struct rates (ctx = c, which must outlive r). */
void cost_rates(const struct cost_model *c, struct rates *r);

#endif
