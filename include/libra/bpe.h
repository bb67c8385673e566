/*
 * Byte-level BPE tokenizer loaded at run time from a Hugging Face tokenizer.json
 * (Qwen2/Qwen3, Llama 3 and other GPT-2-style byte-level BPE models). The features
 * implemented, and the ones rejected at load, are listed in docs/tokenizer.md.
 *
 * Encoding follows Hugging Face `tokenizer.encode(text, add_special_tokens=False)`:
 * added tokens are matched in the text first (leftmost, longest), the rest is
 * normalised (NFC when the file asks), split by the pre-tokenizer's regex (compiled
 * with PCRE2) and merged piece by piece. No post-processor: no BOS is added. Text
 * need not be valid UTF-8: invalid bytes are kept (one pre-token each) and
 * round-trip through bpe_decode.
 *
 * A struct bpe is read-only after bpe_load: any number of threads may encode and
 * decode with the same one at once.
 */
#ifndef LIBRA_BPE_H
#define LIBRA_BPE_H

#include <stddef.h>
#include <stdint.h>

struct bpe;

/* What bpe_encode does with added tokens ("<|im_start|>", "<think>", ...) in text. */
enum bpe_added_mode {
    BPE_ADDED_NONE = 0, /* plain text: an added token's spelling is encoded as text and
                         * no added id is ever produced (untrusted text: tool output) */
    BPE_ADDED_ALL = 1,  /* added tokens, special or not, become their ids (HF's encode) */
};

/* path: a tokenizer.json, or a directory holding one (a Hugging Face checkpoint).
 * tokenizer_config.json beside it, when present, names the bos/eos/pad tokens. On
 * any bad input returns NULL with a message naming the file and the field in err. */
struct bpe *bpe_load(const char *path, char *err, size_t errlen);
void bpe_free(struct bpe *b); /* NULL is a no-op */

/* 1 + the largest id of the vocabulary and the added tokens. */
int32_t bpe_vocab_size(const struct bpe *b);
/* The id of a token spelled as in tokenizer.json (an added token's content, or a
 * vocabulary entry in its byte-level spelling, e.g. "\xC4\xA0the" for " the");
 * -1 if there is none. */
int32_t bpe_token_id(const struct bpe *b, const char *content);
/* 1 if id is an added token marked "special": true, else 0. */
int bpe_is_special(const struct bpe *b, int32_t id);
/* 1 if id is an added token (special or not), else 0. */
int bpe_is_added(const struct bpe *b, int32_t id);
/* From tokenizer_config.json; -1 when it names none (or is absent). */
int32_t bpe_bos_id(const struct bpe *b);
int32_t bpe_eos_id(const struct bpe *b);
int32_t bpe_pad_id(const struct bpe *b);
/* The added tokens, in the file's order: i in [0, bpe_n_added). */
int bpe_n_added(const struct bpe *b);
int32_t bpe_added_id(const struct bpe *b, int i);
const char *bpe_added_content(const struct bpe *b, int i);

/* Encodes len bytes of text; writes at most cap ids to out (NULL when cap is 0)
 * and returns how many the text needs. added: enum bpe_added_mode. */
size_t bpe_encode(const struct bpe *b, const char *text, size_t len, int added, int32_t *out,
                  size_t cap);
/* Decodes n ids: the bytes each token stands for (added tokens spelled out; bytes that
 * do not form valid UTF-8 are kept as they are, the exact inverse of the byte-level
 * mapping); an id that is no token decodes as U+FFFD. Writes at most cap bytes (no
 * NUL added) and returns how many the ids need. */
size_t bpe_decode(const struct bpe *b, const int32_t *ids, size_t n, char *out, size_t cap);

#endif
