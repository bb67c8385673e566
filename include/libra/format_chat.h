/*
 * The chat formats of Hugging Face models as a struct vocab (include/libra/vocab.h):
 * the model's own BPE tokenizer (include/libra/bpe.h) and its family's chat template
 * rendered natively (include/libra/chat.h).
 *
 *   prompt         the template's system turn (the task's instruction and the tool as
 *                  a JSON function schema), the user turn and the generation prompt
 *                  (Qwen3 with thinking off: the empty <think></think> block)
 *   turn end       <|im_end|> or <|endoftext|> (Qwen3), <|eot_id|> or
 *                  <|end_of_text|> (Llama 3)
 *   tool call      a turn holding a call in the family's syntax (Qwen3:
 *                  <tool_call>{"name": ..., "arguments": {...}}</tool_call>; Llama 3:
 *                  a JSON line); the first call of a turn is run. Malformed JSON,
 *                  another tool's name or no string for the tool's parameter is a
 *                  malformed call (the rollout answers it with an error).
 *   tool response  the template's tool-response turn up to the next generation prompt;
 *                  the result is plain text: an added token's spelling in it stays text
 *   answer         "<answer>ANSWER</answer>" written as text in one generated run
 *
 * Token sequences equal the Hugging Face tokenization of the rendered conversation:
 * the template's text is split at added tokens and each text chunk encoded whole,
 * the tool result included in its chunk.
 */
#ifndef LIBRA_FORMAT_CHAT_H
#define LIBRA_FORMAT_CHAT_H

#include <stddef.h>

#include "libra/vocab.h"

/* Opens the tokenizer at tokenizer_path (a tokenizer.json or its directory) with the
 * chat format of family (enum chat_family, include/libra/chat.h); thinking: Qwen3's
 * enable_thinking. NULL with a message on bad input (the tokenizer's error, or a
 * tokenizer that lacks the format's tokens). */
struct vocab *format_chat_open(const char *tokenizer_path, int family, int thinking, char *err,
                               size_t errlen);
void format_chat_close(struct vocab *v); /* NULL is a no-op */

#endif
