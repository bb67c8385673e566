/*
 * The model's tokens and conversation format as the environments and the rollout see
 * them. Implemented in the model layer, beside the tokenizers: the libra tag format of
 * the byte-level models (tag_format_vocab(), include/libra/format_tags.h) and the chat
 * formats of Hugging Face models (Qwen3, Llama 3: include/libra/format_chat.h). Handed
 * to env_init by the caller, so the environments (same layer as the model) never call
 * a tokenizer or render a template themselves: they speak text and tools, the format
 * speaks token ids.
 *
 * Contract, so that any tokenizer and template can implement it:
 *  - One text byte is not one id: code that lays out tokens sizes buffers with the
 *    counts the functions return, and turns ids back into text only through decode.
 *  - Plain text (encode, tool results, questions) never encodes to a special id, so a
 *    special id in a sequence is always a tag the model or the format put there.
 *  - A turn is what the model generates between two stops: it ends at an id for which
 *    ends_turn says 1. A turn that ended either calls the environment's tool
 *    (turn_calls 1: call_text extracts the argument, or reports it malformed) or ends
 *    the episode.
 *  - Every function is pure: several threads call them on the same ctx at once.
 * Header only: it belongs to the core layer and names no implementation.
 */
#ifndef LIBRA_VOCAB_H
#define LIBRA_VOCAB_H

#include <stddef.h>
#include <stdint.h>

/* The environment's one tool as the format describes it to the model (for the chat
 * formats: a JSON function schema with one required string parameter). */
struct vocab_tool {
    const char *name;              /* e.g. "calculator" */
    const char *description;
    const char *param;             /* the one string parameter, e.g. "expression" */
    const char *param_description;
};

struct vocab {
    int32_t size;    /* ids are in [0, size) */
    const char *name; /* the format: "libra", "qwen3", "llama3" */
    void *ctx;       /* the tokenizer and format behind it */

    /* ---- text ---- */
    /* Encodes len bytes of plain text (no specials parsed); writes at most cap ids,
     * returns how many the text needs. */
    size_t (*encode)(void *ctx, const char *text, size_t len, int32_t *out, size_t cap);
    /* Decodes ids to bytes (specials spelled out); writes at most cap bytes (no NUL),
     * returns how many are needed. */
    size_t (*decode)(void *ctx, const int32_t *ids, size_t n, char *out, size_t cap);
    /* 1 if id (in [0, size)) is a special token rather than text, else 0. */
    int (*is_special)(void *ctx, int32_t id);
    /* Encodes text in which the tokenizer's special spellings ("<|im_start|>",
     * "<tool_call>", ...) become their ids: for trusted text only (templates, a
     * prompt typed on the command line). Same contract as encode otherwise. */
    size_t (*encode_markup)(void *ctx, const char *text, size_t len, int32_t *out, size_t cap);
    /* 1 if the id ends free generation (end of text: <|eos|>, <|im_end|>, ...). */
    int (*ends_text)(void *ctx, int32_t id);

    /* ---- the conversation format ---- */
    /* The prompt: the conversation's opening (the system text and the tool described,
     * where the format has a system turn; either may be NULL), the question (len
     * bytes, plain text) and the assistant's generation prompt. Returns the ids
     * needed, writes at most cap. */
    size_t (*prompt)(void *ctx, const char *system, const struct vocab_tool *tool,
                     const char *question, size_t len, int32_t *out, size_t cap);
    /* 1 if the generated id ends the model's turn. */
    int (*ends_turn)(void *ctx, int32_t id);
    /* For a turn that ended (its n generated ids, the last one ending it): 1 if it
     * makes a tool call (to run, or to answer as malformed), 0 if it ends the episode. */
    int (*turn_calls)(void *ctx, const int32_t *turn, int n);
    /* The argument of the tool call in the turn's ids: 0, its bytes in out
     * (NUL-terminated, the count in *len, len may be NULL), or -1 if the call is
     * malformed (no call, not terminated, a special inside, for the chat formats bad
     * JSON, another tool's name or no string for tool->param) or does not fit cap. */
    int (*call_text)(void *ctx, const struct vocab_tool *tool, const int32_t *turn, int n,
                     char *out, size_t cap, size_t *len);
    /* The ids that answer a tool call with the result text (plain text, never parsed
     * for specials): the format's tool-response framing up to the next generation
     * prompt. The text's ids are cut to fit cap, the framing always kept; returns the
     * count written, 0 if cap cannot hold the framing. */
    size_t (*tool_response)(void *ctx, const char *text, size_t len, int32_t *out, size_t cap);
    /* The first well-formed answer among the generated ids (mask 1): 1 and its text
     * (NUL-terminated, untrimmed) in out, else 0. cap > 0. */
    int (*answer)(void *ctx, const int32_t *ids, const uint8_t *mask, int n, char *out,
                  size_t cap);
    /* A whole turn as the model writes it, for demonstrations: one tool call with the
     * argument text / the final answer. Return the ids needed, write at most cap. */
    size_t (*write_call)(void *ctx, const struct vocab_tool *tool, const char *text, size_t len,
                         int32_t *out, size_t cap);
    size_t (*write_answer)(void *ctx, const char *text, size_t len, int32_t *out, size_t cap);
};

#endif
