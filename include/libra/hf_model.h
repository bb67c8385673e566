/*
 * Hugging Face model directories: config.json <-> struct tfm_config, and the weights
 * (safetensors, one file or shards: libra/safetensors.h) <-> struct tfm_params, whole
 * or as one tensor-parallel rank's slices.
 *
 * config.json (model_type llama | qwen2 | qwen3; architectures LlamaForCausalLM,
 * Qwen2ForCausalLM, Qwen3ForCausalLM). Required: model_type (or a known
 * architectures entry), hidden_size, num_hidden_layers, num_attention_heads,
 * intermediate_size, vocab_size. Defaults as in transformers: num_key_value_heads =
 * num_attention_heads; head_dim = hidden_size / num_attention_heads (qwen3: 128);
 * max_position_embeddings 2048 (llama) / 32768 (qwen2, qwen3); rms_norm_eps 1e-6;
 * rope_theta 10000; tie_word_embeddings false; attention_bias false (llama, qwen3) --
 * qwen2 always has q/k/v biases and ignores the key; qk_norm is qwen3's, always.
 * rope_scaling: null, or {"rope_type" (or "type"): "default" | "linear" | "llama3" |
 * "yarn", factor, low_freq_factor, high_freq_factor, original_max_position_embeddings,
 * beta_fast, beta_slow, attention_factor}; other types ("dynamic", "longrope", ...)
 * are refused. Also refused: hidden_act other than silu, mlp_bias true, a sliding
 * window in use. Unknown keys are ignored. vocab_size may exceed the tokenizer's
 * (padding rows).
 *
 * Errors name the file and the key: "DIR/config.json: num_attention_heads: missing
 * (a required integer)".
 */
#ifndef LIBRA_HF_MODEL_H
#define LIBRA_HF_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "libra/safetensors.h"
#include "libra/tfm.h"
#include "libra/tfm_tp.h"

#define HF_CONFIG_NAME "config.json"
#define HF_MAX_EOS 8

/* What config.json says beyond the architecture. */
struct hf_info {
    char torch_dtype[16];     /* "bfloat16" | "float16" | "float32" | "" (absent) */
    int bos_token_id;         /* -1: unknown */
    int n_eos;
    int eos_token_id[HF_MAX_EOS];
};

/* An hf_info with nothing known (ids -1, no dtype). */
void hf_info_init(struct hf_info *info);

/* config.json text -> config (checked with tfm_config_check) and info (may be NULL);
 * where names the file in messages. 0 or -1 with a message. */
int hf_config_parse(const char *text, size_t len, const char *where, struct tfm_config *c,
                    struct hf_info *info, char *err, size_t errlen);
/* Reads path (a config.json file, or a directory holding one). */
int hf_config_read(const char *path, struct tfm_config *c, struct hf_info *info, char *err,
                   size_t errlen);
/* config.json of c (info may be NULL: torch_dtype "bfloat16", no token ids): every
 * field, rope_scaling an object or null. malloc'ed text ending in a newline, or NULL
 * with a message when HF cannot express c (qwen2 without biases, qk_norm outside
 * qwen3, an invalid config). */
char *hf_config_dump(const struct tfm_config *c, const struct hf_info *info, char *err,
                     size_t errlen);
/* hf_config_dump written atomically to path. */
int hf_config_write(const char *path, const struct tfm_config *c, const struct hf_info *info,
                    char *err, size_t errlen);

/* bos_token_id / eos_token_id of the model in dir: from generation_config.json, else
 * config.json (into info, other fields untouched). 1 found, 0 none (or no such
 * files), -1 with a message on a file that is not JSON or holds bad ids. */
int hf_token_ids_read(const char *dir, struct hf_info *info, char *err, size_t errlen);

/* Loads the Hugging Face directory dir: config.json, then every tensor of
 * tfm_tensors() from the safetensors (shape checked against config.json; BF16, F16 or
 * F32). Tied models need no lm_head.weight (one present is ignored, as transformers
 * does); untied ones need it. Tensors libra does not use (rotary inv_freq, ...) are
 * ignored with a LOG_I note. Allocates p; on error nothing is left allocated and the
 * message names the file, the tensor, and the expected and found shapes. */
int hf_load(const char *dir, struct tfm_config *c, struct tfm_params *p, char *err,
            size_t errlen);
/* One TP rank's slices (tfm_tp_slices of tp) read from dir into p_local, which the
 * caller allocated with tfm_params_alloc(&tp->local): only the bytes of those slices
 * are read. tp->full must be the config dir's config.json gives (checked). Same
 * validation and messages as hf_load. */
int hf_load_slices(const char *dir, const struct tfm_tp *tp, struct tfm_params *p_local,
                   char *err, size_t errlen);
/* The same slices as bf16 (st_read_block_bf16: a bf16 checkpoint's bytes as they are)
 * into out, p_local.n values at p_local's offsets; p_local gives the layout only (its
 * memory is not touched). */
int hf_load_slices_bf16(const char *dir, const struct tfm_tp *tp,
                        const struct tfm_params *p_local, uint16_t *out, char *err,
                        size_t errlen);

/* Writes the model into directory dir (which must exist): the safetensors (dtype
 * ST_BF16, ST_F16 or ST_F32; shards past max_shard_bytes), config.json (torch_dtype
 * from dtype) and generation_config.json (only when info knows bos or eos ids).
 * Every file atomic. 0 or -1 with a message. */
int hf_save(const char *dir, const struct tfm_config *c, const struct tfm_params *p,
            const struct hf_info *info, enum st_dtype dtype, uint64_t max_shard_bytes,
            char *err, size_t errlen);

#endif
