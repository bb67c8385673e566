/*
 * The token vocabulary as the environments see it: the special ids of the
 * conversation format and text encoding. Implemented by the tokenizer (model layer,
 * e.g. tok_byte_vocab()); handed to env_init by the caller, so the environments
 * (same layer as the model) never call a tokenizer themselves.
 *
 * Contract, so that a BPE tokenizer can implement it as well as the byte-level one:
 *  - One text byte is not one id: code that lays out tokens sizes buffers with the
 *    counts encode returns, and turns ids back into text only through decode.
 *  - Plain text never encodes to a special id, so a special id in a sequence is
 *    always a tag the model (or the format) put there. The ten ids below are special
 *    (is_special says 1 for each); a vocabulary may have more (padding, roles).
 *  - The functions are pure: several threads call them on the same ctx at once.
 * Header only: it belongs to the core layer and names no implementation.
 */
#ifndef LIBRA_VOCAB_H
#define LIBRA_VOCAB_H

#include <stddef.h>
#include <stdint.h>

struct vocab {
    int32_t size;                       /* ids are in [0, size) */
    int32_t bos, eos, user, assistant;  /* conversation specials */
    int32_t tool_call, tool_call_end, tool_result, tool_result_end, answer, answer_end;
    void *ctx;                          /* the tokenizer behind it */
    /* Encodes len bytes of plain text (no specials parsed); writes at most cap ids,
     * returns how many the text needs. */
    size_t (*encode)(void *ctx, const char *text, size_t len, int32_t *out, size_t cap);
    /* Decodes ids to bytes (specials spelled out); writes at most cap bytes (no NUL),
     * returns how many are needed. */
    size_t (*decode)(void *ctx, const int32_t *ids, size_t n, char *out, size_t cap);
    /* 1 if id (in [0, size)) is a special token rather than text, else 0. Tool calls
     * and answers must be text only: a special inside one makes it malformed. */
    int (*is_special)(void *ctx, int32_t id);
};

#endif
