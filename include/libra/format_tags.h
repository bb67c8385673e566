/*
 * The libra tag format: the conversation format of the byte-level models, over any
 * text encoding whose ten tags are special ids.
 *
 *   <|bos|><|user|>QUESTION<|assistant|>        the prompt (no system turn; the
 *                                               tool is not described)
 *   <tool_call>CALL</tool_call>                 a model turn that calls the tool: it
 *                                               ends at </tool_call>; CALL is the
 *                                               tool's argument text itself
 *   <tool_result>PAYLOAD</tool_result>          the tool's answer (no new prompt)
 *   <answer>ANSWER</answer>                     the final turn; the episode also ends
 *                                               at <|eos|>
 *
 * tok_byte_vocab() (include/libra/tokenizer.h) is this format over the byte-level
 * tokenizer; tag_format_init puts it over another encoding (tests use a shifted one).
 */
#ifndef LIBRA_FORMAT_TAGS_H
#define LIBRA_FORMAT_TAGS_H

#include <stddef.h>

#include "libra/vocab.h"

struct tag_ids {
    int32_t bos, eos, user, assistant;
    int32_t tool_call, tool_call_end, tool_result, tool_result_end, answer, answer_end;
};

/* The format's state: the tags and the text encoding (size, ctx, encode, decode and
 * is_special of base are used; its format functions are not). */
struct tag_format {
    struct tag_ids t;
    struct vocab text;
};

/* Fills *v with the tag format over base's text encoding and the tags t, keeping its
 * state in *f (v->ctx = f: f must outlive v). Checks the tags: in range, special (so no
 * text encodes to one) and the six the parsers tell apart (tool_call ... answer_end)
 * distinct; bos/eos/user/assistant may coincide. 0, or -1 with a message. */
int tag_format_init(struct tag_format *f, struct vocab *v, const struct vocab *base,
                    const struct tag_ids *t, char *err, size_t errlen);

/* The functions tag_format_init installs, for a static object (tok_byte_vocab). */
extern const struct vocab tag_format_ops;

#endif
