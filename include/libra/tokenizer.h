/*
 * Byte-level tokenizer with special tokens. Ids 0..255 are the bytes; the special
 * tokens follow (TOK_BOS = 256 ...). Encoding plain text never produces a special
 * token, so decode(encode(bytes)) == bytes for any byte string. Encoding with
 * specials enabled turns the exact spellings below ("<tool_call>", ...) into their
 * single ids. tok_byte_vocab() presents this tokenizer to the environments
 * (include/libra/vocab.h).
 */
#ifndef LIBRA_TOKENIZER_H
#define LIBRA_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "libra/vocab.h"

enum tok_special {
    TOK_BOS = 256,        /* "<|bos|>" */
    TOK_EOS,              /* "<|eos|>" */
    TOK_PAD,              /* "<|pad|>" */
    TOK_SYSTEM,           /* "<|system|>" */
    TOK_USER,             /* "<|user|>" */
    TOK_ASSISTANT,        /* "<|assistant|>" */
    TOK_TOOL,             /* "<|tool|>" */
    TOK_TOOL_CALL,        /* "<tool_call>" */
    TOK_TOOL_CALL_END,    /* "</tool_call>" */
    TOK_TOOL_RESULT,      /* "<tool_result>" */
    TOK_TOOL_RESULT_END,  /* "</tool_result>" */
    TOK_ANSWER,           /* "<answer>" */
    TOK_ANSWER_END,       /* "</answer>" */
    TOK_VOCAB_SIZE        /* 269: the byte-level vocabulary */
};

/* The spelling of a special id, or NULL for a byte id or an id out of range. */
const char *tok_special_name(int32_t id);
/* Encodes len bytes; writes at most cap ids and returns how many the text needs. */
size_t tok_encode(const char *text, size_t len, int parse_specials, int32_t *out, size_t cap);
/* Decodes ids (specials spelled out); writes at most cap bytes (no NUL added) and
 * returns how many the ids need. Ids outside [0, TOK_VOCAB_SIZE) decode as "\xEF\xBF\xBD". */
size_t tok_decode(const int32_t *ids, size_t n, char *out, size_t cap);

/* The byte-level vocabulary as the environments see it: the libra tag format
 * (include/libra/format_tags.h) with the TOK_* tags over plain tok_encode /
 * tok_decode, size TOK_VOCAB_SIZE; every id outside 0..255 counts as special. A
 * static object built on first use: never freed, shared by all threads. */
const struct vocab *tok_byte_vocab(void);

#endif
