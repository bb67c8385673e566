/*
 * Byte-level tokenizer (include/libra/tokenizer.h): ids 0..255 are the bytes, ids
 * 256..TOK_VOCAB_SIZE-1 the special tokens spelled in the header.
 *
 * Contract and limits:
 *  - Plain encoding (parse_specials = 0) maps every byte to its own id, so
 *    decode(encode(s)) == s for any byte string, NULs and bytes >= 0x80 included.
 *  - With parse_specials, at every '<' the LONGEST special spelling that matches the
 *    text exactly becomes its id; anything else (a near miss, a truncated spelling at
 *    the end) stays bytes. No spelling is a prefix of another today; longest-match
 *    keeps that true if one is added.
 *  - Decoding spells specials out and turns ids outside [0, TOK_VOCAB_SIZE) into
 *    U+FFFD (EF BF BD). Both directions write at most cap elements (a spelling may be
 *    cut at cap) and return the full count, so callers can size a buffer with cap 0.
 *  - Pure functions of their arguments; no state, thread-safe. tok_byte_vocab() is
 *    the libra tag format (include/libra/format_tags.h) over them, built once.
 */
#include "libra/tokenizer.h"

#include <pthread.h>
#include <string.h>

#include "libra/format_tags.h"
#include "libra/log.h"

#define N_SPECIAL (TOK_VOCAB_SIZE - TOK_BOS)

/* Indexed by id - TOK_BOS; must follow enum tok_special. */
static const char *const special_names[N_SPECIAL] = {
    "<|bos|>",       "<|eos|>",        "<|pad|>",       "<|system|>",     "<|user|>",
    "<|assistant|>", "<|tool|>",       "<tool_call>",   "</tool_call>",   "<tool_result>",
    "</tool_result>", "<answer>",      "</answer>",
};

_Static_assert(sizeof special_names / sizeof special_names[0] == N_SPECIAL,
               "one spelling per special token");

static const char replacement[3] = {'\xEF', '\xBF', '\xBD'}; /* U+FFFD in UTF-8 */

const char *tok_special_name(int32_t id)
{
    if (id < TOK_BOS || id >= TOK_VOCAB_SIZE) return NULL;
    return special_names[id - TOK_BOS];
}

/* The id of the longest spelling that starts at text (which begins with '<'), and its
 * length in *mlen; -1 if none matches. */
static int32_t match_special(const char *text, size_t len, size_t *mlen)
{
    int32_t best = -1;
    size_t best_len = 0;
    for (int i = 0; i < N_SPECIAL; i++) {
        size_t n = strlen(special_names[i]);
        if (n <= len && n > best_len && memcmp(text, special_names[i], n) == 0) {
            best = TOK_BOS + i;
            best_len = n;
        }
    }
    *mlen = best_len;
    return best;
}

size_t tok_encode(const char *text, size_t len, int parse_specials, int32_t *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        int32_t id = -1;
        size_t step = 1;
        if (parse_specials && text[i] == '<') id = match_special(text + i, len - i, &step);
        if (id < 0) {
            id = (int32_t)(unsigned char)text[i];
            step = 1;
        }
        if (n < cap) out[n] = id;
        n++;
        i += step;
    }
    return n;
}

static size_t put_bytes(char *out, size_t cap, size_t at, const char *src, size_t n)
{
    if (at < cap) memcpy(out + at, src, at + n <= cap ? n : cap - at);
    return at + n;
}

size_t tok_decode(const int32_t *ids, size_t n, char *out, size_t cap)
{
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id >= 0 && id < TOK_BOS) {
            char b = (char)(unsigned char)id;
            at = put_bytes(out, cap, at, &b, 1);
        } else if (id >= TOK_BOS && id < TOK_VOCAB_SIZE) {
            const char *s = special_names[id - TOK_BOS];
            at = put_bytes(out, cap, at, s, strlen(s));
        } else {
            at = put_bytes(out, cap, at, replacement, sizeof replacement);
        }
    }
    return at;
}

/* ---- the vocabulary the environments see (include/libra/vocab.h) ---- */

static size_t vocab_encode(void *ctx, const char *text, size_t len, int32_t *out, size_t cap)
{
    (void)ctx;
    return tok_encode(text, len, 0, out, cap);
}

static size_t vocab_encode_markup(void *ctx, const char *text, size_t len, int32_t *out,
                                  size_t cap)
{
    (void)ctx;
    return tok_encode(text, len, 1, out, cap);
}

static size_t vocab_decode(void *ctx, const int32_t *ids, size_t n, char *out, size_t cap)
{
    (void)ctx;
    return tok_decode(ids, n, out, cap);
}

/* Every non-byte id, <|pad|>, <|system|> and <|tool|> included: none of them may
 * appear inside a tool call or an answer. */
static int vocab_is_special(void *ctx, int32_t id)
{
    (void)ctx;
    return id < 0 || id >= TOK_BOS;
}

static const struct vocab byte_text = {
    .size = TOK_VOCAB_SIZE,
    .name = "bytes",
    .encode = vocab_encode,
    .encode_markup = vocab_encode_markup,
    .decode = vocab_decode,
    .is_special = vocab_is_special,
};

static const struct tag_ids byte_tags = {
    .bos = TOK_BOS, .eos = TOK_EOS, .user = TOK_USER, .assistant = TOK_ASSISTANT,
    .tool_call = TOK_TOOL_CALL, .tool_call_end = TOK_TOOL_CALL_END,
    .tool_result = TOK_TOOL_RESULT, .tool_result_end = TOK_TOOL_RESULT_END,
    .answer = TOK_ANSWER, .answer_end = TOK_ANSWER_END,
};

static struct tag_format byte_format;
static struct vocab byte_vocab;
static pthread_once_t byte_once = PTHREAD_ONCE_INIT;

static void byte_vocab_init(void)
{
    char err[256];
    if (tag_format_init(&byte_format, &byte_vocab, &byte_text, &byte_tags, err, sizeof err))
        FATAL("byte-level vocabulary: %s", err); /* the constants above disagree */
}

const struct vocab *tok_byte_vocab(void)
{
    pthread_once(&byte_once, byte_vocab_init);
    return &byte_vocab;
}
