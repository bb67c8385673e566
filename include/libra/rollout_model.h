/*
 * The model a rollout engine (rollout_cpu.h) decodes with: n_slots KV-cache slots, a
 * prefill and a batched decode step over them, and sampling of the token that
 * follows each row -- the only things the engine needs from a model. The engine is
 * written once against this; what is behind it is the device's business:
 *
 *   local   rollout_model_local_create: the whole model on this rank (tfm_decoder +
 *           sampler_sample), what rollout_cpu_create uses;
 *   TP      a device's tensor-parallel instance (src/device/cpu/cpu_tp_model.c): the
 *           leader's calls are mirrored on the instance's other ranks and run as
 *           collectives (tfm_decoder_create_tp, sampler_sample_tp).
 *
 * Sampling is keyed by (seed, key, position) (sampler.h), so a token does not depend
 * on the slot, the batch or the implementation: TP and local give the same tokens.
 */
#ifndef LIBRA_ROLLOUT_MODEL_H
#define LIBRA_ROLLOUT_MODEL_H

#include <stdint.h>

#include "libra/sampler.h"
#include "libra/tfm.h"

/* How to draw the token after a row. */
struct rollout_sample {
    struct sampler_config sc; /* temperature 0 = greedy */
    int64_t key;              /* the trajectory's stream (rng_key) */
    int64_t position;         /* absolute position of the token drawn */
};

struct rollout_model_ops {
    /* Tokens held in the slot's cache. */
    int (*len)(void *m, int slot);
    /* Keeps the first len tokens of the slot's cache (len <= its length). */
    void (*truncate)(void *m, int slot, int len);
    /* Appends n tokens to the slot; with s != NULL samples the token that follows
     * the last one into *tok, *lp. -1 if the slot would overflow (nothing added). */
    int (*prefill)(void *m, int slot, const int32_t *tokens, int n,
                   const struct rollout_sample *s, int32_t *tok, float *lp);
    /* Appends tokens[i] to slots[i] (distinct) and samples each row's next token per
     * s[i] into tok[i], lp[i]. -1 if a slot is full (nothing added). */
    int (*step)(void *m, const int *slots, const int32_t *tokens, int n,
                const struct rollout_sample *s, int32_t *tok, float *lp);
};

struct rollout_model {
    const struct rollout_model_ops *ops;
    void *m;
    int vocab_size;
};

/* The whole model on this rank: params (mc's layout) are copied. */
struct rollout_model *rollout_model_local_create(const struct tfm_config *mc,
                                                 const float *params, int n_slots,
                                                 int slot_capacity, int prefill_chunk);
/* New weights (copied); the caller drops the caches that used the old ones. */
void rollout_model_local_set_weights(struct rollout_model *rm, const float *params);
void rollout_model_local_free(struct rollout_model *rm);

#endif
