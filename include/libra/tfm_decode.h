/*
 * The rollout decode engine of the CPU transformer: a fixed number of sequence
 * slots, each with its own KV cache of slot_capacity tokens. Prefill appends a
 * context to a slot in chunks; one decode step advances any set of slots by one
 * token with batched matrix products; a slot keeps its cache across turns (prefix
 * reuse), can be truncated to a prefix, and is reused after a reset.
 *
 * The arithmetic is the training path's (same kernels, same order within a token),
 * so a token's log-prob from decode equals the training path's within 1e-5 (fp32).
 */
#ifndef LIBRA_TFM_DECODE_H
#define LIBRA_TFM_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "libra/tfm.h"
#include "libra/tfm_tp.h"

struct tfm_decoder;

struct tfm_decoder *tfm_decoder_create(const struct tfm_config *c, const struct tfm_params *p,
                                       int n_slots, int slot_capacity, int prefill_chunk);
/* The decoder of one rank of a TP-t model (include/libra/tfm_tp.h) on its shard p_local
 * (tfm_params_alloc(&tp->local)): its KV caches hold only the local kv heads. prefill
 * and step then take GLOBAL token ids and write LOCAL logits, rows x (v1 - v0) (the
 * columns [v0, v1) of the full logits; sample them with sampler_sample_tp). prefill and
 * step are collective: every rank of the group calls them with the same arguments in
 * the same order (per layer two (rows, C) f32 sum all-reduces, plus one for the
 * embedding). len / truncate / bytes are local. t == 1: tfm_decoder_create. */
struct tfm_decoder *tfm_decoder_create_tp(const struct tfm_tp *tp, const struct tfm_params *p_local,
                                          int n_slots, int slot_capacity, int prefill_chunk);
void tfm_decoder_free(struct tfm_decoder *d);
/* Appends n tokens to the slot's context; writes the logits (V) of the last one if
 * last_logits != NULL. -1 if the slot's capacity would be exceeded (nothing added). */
int tfm_decoder_prefill(struct tfm_decoder *d, int slot, const int32_t *tokens, int n,
                        float *last_logits);
/* Appends tokens[i] to slots[i] (distinct slots) and writes logits (n, V). -1 if a
 * slot is full (nothing added). */
int tfm_decoder_step(struct tfm_decoder *d, const int *slots, const int32_t *tokens, int n,
                     float *logits);
int tfm_decoder_len(const struct tfm_decoder *d, int slot);
/* Keeps the first len tokens of the slot's cache (len <= current length). */
void tfm_decoder_truncate(struct tfm_decoder *d, int slot, int len);
/* Bytes held (KV caches + scratch). */
size_t tfm_decoder_bytes(const struct tfm_decoder *d);

#endif
