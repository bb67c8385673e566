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

/* Provenance tags: extra string attributes of the root (tfm_load ignores them), e.g.
 * TFM_TAG_HF_SOURCE, the Hugging Face directory the weights were first imported
 * from, which `libra export` takes the tokenizer files from. */
#define TFM_TAG_HF_SOURCE "libra_hf_source"
#define TFM_TAG_RUN_NAME "libra_run_name"
struct tfm_tag {
    const char *key, *value; /* a NULL or "" value is not written */
};
/* tfm_save plus the tags. */
int tfm_save_tagged(const char *path, const struct tfm_config *c, const struct tfm_params *p,
                    const struct adamw *opt, const struct tfm_tag *tags, int n_tags, char *err,
                    size_t errlen);
/* Reads the tag key of a model file into out: 1 found, 0 absent (out ""), -1 error. */
int tfm_read_tag(const char *path, const char *key, char *out, size_t cap, char *err,
                 size_t errlen);

#endif
