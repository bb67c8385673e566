/*
 * Model files: HDF5, one dataset per tensor named and shaped like the Hugging Face
 * parameters (model.embed_tokens.weight (V, C), model.layers.0.self_attn.q_proj.weight
 * (H*D, C), ..., lm_head.weight when untied), row-major float32; the model config
 * as root attributes with the Hugging Face config.json names (model_type,
 * hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
 * head_dim, intermediate_size, vocab_size, rms_norm_eps, rope_theta,
 * tie_word_embeddings, max_position_embeddings, attention_bias) plus
 * libra_format_version; rope_scaling, when not default, as rope_type and rope_*
 * attributes (src/model/tfm_io.c; absent: plain rotary). Optionally the AdamW state
 * under /optimizer (m, v as flat datasets, step and hyper-parameters as attributes).
 *
 * Writes are atomic: a temporary file in the same directory, fsync, rename.
 * Loading checks every tensor's shape against the config and names the tensor and
 * both shapes when they disagree; it never leaves a half-loaded model behind.
 */
#ifndef LIBRA_TFM_IO_H
#define LIBRA_TFM_IO_H

#include <stddef.h>

#include "libra/adamw.h"
#include "libra/tfm.h"

#define TFM_FORMAT_VERSION 1

int tfm_save(const char *path, const struct tfm_config *c, const struct tfm_params *p,
             const struct adamw *opt, char *err, size_t errlen);
/* Reads the config and allocates + fills p; if opt != NULL and the file has an
 * optimizer group, allocates and fills it too (opt->c from the file). */
int tfm_load(const char *path, struct tfm_config *c, struct tfm_params *p, struct adamw *opt,
             char *err, size_t errlen);

#endif
