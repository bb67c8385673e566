/*
 * The local rollout model (include/libra/rollout_model.h): the whole transformer on
 * this rank -- a copy of the weights, a tfm_decoder over it, and sampler_sample on
 * each row's logits. The arithmetic is the decoder's and the sampler's, unchanged.
 */
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "libra/rollout_model.h"
#include "libra/tfm_decode.h"

struct local_model {
    struct rollout_model rm;
    struct tfm_config mc;
    struct tfm_params p;
    struct tfm_decoder *dec;
    int n_slots;
    float *logits;   /* (n_slots, V) */
    float *scratch;  /* (2V) sampler scratch */
};

static int local_len(void *m, int slot) { return tfm_decoder_len(((struct local_model *)m)->dec, slot); }

static void local_truncate(void *m, int slot, int len)
{
    tfm_decoder_truncate(((struct local_model *)m)->dec, slot, len);
}

static void sample_row(struct local_model *l, const float *logits, const struct rollout_sample *s,
                       int32_t *tok, float *lp)
{
    *tok = sampler_sample(&s->sc, logits, l->mc.vocab_size, s->key, s->position, lp, l->scratch);
}

static int local_prefill(void *m, int slot, const int32_t *tokens, int n,
                         const struct rollout_sample *s, int32_t *tok, float *lp)
{
    struct local_model *l = m;
    if (tfm_decoder_prefill(l->dec, slot, tokens, n, s ? l->logits : NULL)) return -1;
    if (s) sample_row(l, l->logits, s, tok, lp);
    return 0;
}

static int local_step(void *m, const int *slots, const int32_t *tokens, int n,
                      const struct rollout_sample *s, int32_t *tok, float *lp)
{
    struct local_model *l = m;
    if (tfm_decoder_step(l->dec, slots, tokens, n, l->logits)) return -1;
    for (int i = 0; i < n; i++)
        sample_row(l, l->logits + (size_t)i * l->mc.vocab_size, &s[i], &tok[i], &lp[i]);
    return 0;
}

static const struct rollout_model_ops local_ops = {local_len, local_truncate, local_prefill,
                                                   local_step};

struct rollout_model *rollout_model_local_create(const struct tfm_config *mc,
                                                 const float *params, int n_slots,
                                                 int slot_capacity, int prefill_chunk)
{
    struct local_model *l = xcalloc(1, sizeof *l);
    l->mc = *mc;
    l->n_slots = n_slots;
    tfm_params_alloc(&l->p, mc);
    memcpy(l->p.mem, params, l->p.n * sizeof *l->p.mem);
    l->dec = tfm_decoder_create(mc, &l->p, n_slots, slot_capacity, prefill_chunk);
    size_t V = (size_t)mc->vocab_size;
    l->logits = xmalloc((size_t)n_slots * V * sizeof *l->logits);
    l->scratch = xmalloc(2 * V * sizeof *l->scratch);
    l->rm = (struct rollout_model){&local_ops, l, mc->vocab_size};
    return &l->rm;
}

void rollout_model_local_set_weights(struct rollout_model *rm, const float *params)
{
    struct local_model *l = rm->m;
    memcpy(l->p.mem, params, l->p.n * sizeof *l->p.mem);
}

void rollout_model_local_free(struct rollout_model *rm)
{
    if (!rm) return;
    struct local_model *l = rm->m;
    tfm_decoder_free(l->dec);
    tfm_params_free(&l->p);
    free(l->logits);
    free(l->scratch);
    free(l);
}
