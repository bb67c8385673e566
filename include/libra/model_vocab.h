/*
 * The vocabulary and conversation format of the configured model (model.checkpoint,
 * model.tokenizer, model.chat_format, model.enable_thinking):
 *   - a libra HDF5 model (or a fresh model without a tokenizer): the byte-level
 *     tokenizer in the libra tag format (tok_byte_vocab());
 *   - a Hugging Face checkpoint directory: its tokenizer.json (or model.tokenizer)
 *     with the chat format of its config.json model_type (qwen2 / qwen3 -> qwen3,
 *     llama -> llama3), unless model.chat_format names one;
 *   - an HDF5 model file or run checkpoint of a model imported from Hugging Face
 *     (its libra_hf_source tag, include/libra/tfm_io.h): as that directory, while it
 *     exists (else name the format and tokenizer).
 * Every rank that needs the format opens its own (rank 0 for prompts and rewards, the
 * rollout ranks for turns and tools).
 */
#ifndef LIBRA_MODEL_VOCAB_H
#define LIBRA_MODEL_VOCAB_H

#include <stddef.h>

#include "libra/config.h"
#include "libra/vocab.h"

/* NULL with a message (the file, the key, what to set) on bad input. */
const struct vocab *model_vocab_open(const struct model_config *m, char *err, size_t errlen);
void model_vocab_close(const struct vocab *v); /* NULL and tok_byte_vocab() are no-ops */

#endif
