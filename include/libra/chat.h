/*
 * Chat formats of the model families, rendered natively (no template engine):
 * Qwen3 (ChatML with <think> and <tool_call>) and Llama 3 (header ids, eot_id).
 * chat_render's output equals, string for string, what the family's official
 * chat_template renders with @huggingface/jinja 0.5.11 (tests/golden/chat/, made by
 * tools/chat-goldens); docs/chat-format.md describes the formats, the Llama 3 tool
 * convention (the Llama 3 template has no tools) and the few inputs where the native
 * renderer and the reference engine cannot agree.
 *
 * The segment functions give the pieces a rollout appends token by token, chosen so
 * that, for a conversation sys/user, a1, tools..., a2, tools..., a3:
 *   chat_render(all, add_generation_prompt 0)
 *     == chat_render(sys/user, add_generation_prompt 1)
 *      + chat_render_assistant(a1, last 0) + turn_end
 *      + chat_render_tool_results(results after a1)
 *      + chat_render_assistant(a2, last 0) + turn_end + ...
 *      + chat_render_assistant(a3, last 1) + turn_end + conversation_end
 * (Qwen3 with enable_thinking 0 is the exception the template makes: see
 * chat_render_tool_results.)
 *
 * Sizes: every function that writes text follows snprintf: out holds cap bytes, at
 * most cap - 1 bytes of text and a NUL are written (nothing when cap is 0), and the
 * return value is the text's full length without the NUL -- call with cap 0 to size
 * the buffer, then with cap = need + 1. (size_t)-1 means bad input, with the reason
 * in err (errlen bytes, NUL-terminated; err may be NULL).
 * Text is UTF-8 and NUL-terminated. All functions are pure and thread-safe.
 */
#ifndef LIBRA_CHAT_H
#define LIBRA_CHAT_H

#include <stddef.h>

enum chat_family { CHAT_QWEN3 = 1, CHAT_LLAMA3 = 2 };

/* The family of a config.json model_type or a model name, case-insensitive, the part
 * after the last '/' of a name: "qwen3", "qwen2", "qwen3_moe", "Qwen/Qwen3-8B" (any
 * name starting "qwen") -> CHAT_QWEN3; "llama", "meta-llama/Meta-Llama-3-8B-Instruct"
 * (any name containing "llama") -> CHAT_LLAMA3; anything else (NULL included) -> -1.
 * Qwen2 models get the Qwen3 format, not Qwen2.5's template. */
int chat_family_from_name(const char *model_type_or_name);
/* "qwen3" | "llama3", or NULL for an unknown family. */
const char *chat_family_name(int family);

struct chat_tool_call {
    const char *name;           /* the function's name */
    const char *arguments_json; /* a JSON object text, any spacing: rendered as tojson */
};

struct chat_message {
    const char *role;      /* "system" | "user" | "assistant" | "tool" */
    const char *content;   /* NULL renders as "" */
    const char *reasoning; /* assistant thinking (Qwen3 reasoning_content); NULL = none
                            * (Qwen3 then takes it from a "<think>...</think>" in content
                            * as its template does); ignored by Llama 3 and on other roles */
    const struct chat_tool_call *tool_calls; /* assistant only (ignored on other roles) */
    int n_tool_calls;
};

/* Renders m[0..n) as the family's chat template does with @huggingface/jinja, with
 * tools (tools_json: a JSON array text of {"type": "function", "function": {"name",
 * "description", "parameters"}} objects, or NULL; an empty array is no tools, as in
 * the templates), add_generation_prompt and enable_thinking (0 = the template's
 * enable_thinking=false; nonzero = true, the same as leaving it undefined).
 *   Qwen3: exactly its template (tools in the system turn, the last-query rule for
 *     <think> blocks, tool messages grouped in one user turn, the empty think block
 *     after the generation prompt when enable_thinking is 0).
 *   Llama 3: its template applied to messages rewritten by libra's tool convention
 *     (docs/chat-format.md): tools in the system message, tool calls as JSON lines in
 *     the assistant's content, tool results as role "ipython"; reasoning and
 *     enable_thinking are ignored. The template appends the assistant header
 *     whatever add_generation_prompt says, and so does this function.
 * n may be 0. Bad input, (size_t)-1: an unknown family or role, n < 0, m NULL with
 * n > 0, tools_json not a JSON array of objects, a tool call without a name or whose
 * arguments_json is not a JSON object, n_tool_calls < 0 or calls NULL with n > 0. */
size_t chat_render(int family, const struct chat_message *m, int n, const char *tools_json,
                   int add_generation_prompt, int enable_thinking, char *out, size_t cap,
                   char *err, size_t errlen);

/* The fixed strings of a family's format; NULL for an unknown family. */
struct chat_format {
    const char *turn_end;         /* ends every turn; what the model emits to stop an
                                   * assistant turn: "<|im_end|>" / "<|eot_id|>" */
    const char *conversation_end; /* follows the last turn_end of a rendering without a
                                   * generation prompt: "\n" / the assistant header
                                   * (the Llama 3 template always appends it) */
    const char *call_open;        /* before each call's JSON body: "<tool_call>\n" / "" */
    const char *call_close;       /* after it: "\n</tool_call>" / "" */
    const char *call_sep;         /* between the content and the first call (when there
                                   * is content) and between calls: "\n" / "\n" */
    const char *think_open;       /* "<think>\n" / NULL (no thinking) */
    const char *think_close;      /* "\n</think>\n\n" / NULL */
};
const struct chat_format *chat_format_of(int family);

/* An assistant turn as the template renders it between the turn's header (for
 * Qwen3 "<|im_start|>assistant\n", which the generation prompt ends with) and its
 * turn_end: what the model writes before it stops. Qwen3: the turn as it renders
 * after the last user query -- a think block when m->reasoning (or a <think> block in
 * the content) is non-empty, or always when last (the template's loop.last), then
 * the content and the calls; Llama 3: content and call lines, trimmed (last and
 * reasoning ignored).
 * m->role must be "assistant". Errors as chat_render. */
size_t chat_render_assistant(int family, const struct chat_message *m, int last, char *out,
                             size_t cap, char *err, size_t errlen);

/* What follows an assistant turn's turn_end when the turn's tool calls were answered
 * by results[0..n) (n >= 1, tool messages' contents in call order), up to and
 * including the next generation prompt:
 *   Qwen3: "\n<|im_start|>user" + per result "\n<tool_response>\n" R "\n</tool_response>"
 *          + "<|im_end|>\n<|im_start|>assistant\n" (the template's grouping of
 *          consecutive tool messages into one user turn), + "<think>\n\n</think>\n\n"
 *          when enable_thinking is 0, as the generation prompt does. The template
 *          keeps that empty block only in the last assistant turn, so with
 *          enable_thinking 0 the assembled text differs from a re-rendering of the
 *          whole conversation by the empty think block of every earlier turn.
 *   Llama 3: per result "<|start_header_id|>ipython<|end_header_id|>\n\n" trim(R)
 *          "<|eot_id|>", then "<|start_header_id|>assistant<|end_header_id|>\n\n".
 * Errors as chat_render (and n < 1, a NULL result). */
size_t chat_render_tool_results(int family, const char *const *results, int n,
                                int enable_thinking, char *out, size_t cap, char *err,
                                size_t errlen);

/* Finds the next tool call in an assistant's text[0..len) at or after byte from:
 * returns 1 with the call's JSON body in [*start, *end) (what chat_parse_tool_call
 * takes), 0 when there is none. Qwen3: the text between "<tool_call>" and the next
 * "</tool_call>" (to the end of the text when the close is missing); Llama 3: a line
 * whose first non-blank byte is '{' (libra's convention: one call per line). To walk
 * every call, continue from *end. */
int chat_next_tool_call(int family, const char *text, size_t len, size_t from, size_t *start,
                        size_t *end);

/* The most bytes chat_parse_tool_call reads (longer text is refused). */
#define CHAT_CALL_MAX_BYTES (1u << 20)

/* Parses one tool call body as the model writes it (both families):
 * {"name": "...", "arguments": {...}} with any JSON white space around and inside.
 * Returns 0 with the name in name (name_cap bytes with the NUL) and the arguments
 * re-serialised as compact JSON (",", ":", the key order and number spelling of
 * tojson) in args (args_cap bytes with the NUL); -1 with the reason in err: not JSON
 * (jansson's message with the column), not an object, no "name" or a name that is not
 * a non-empty string without NUL, no "arguments" or arguments not an object,
 * trailing text, longer than CHAT_CALL_MAX_BYTES, or name / arguments longer than
 * the caps. Other keys are ignored. Any bytes are safe input (NULs, invalid UTF-8). */
int chat_parse_tool_call(int family, const char *text, size_t len, char *name, size_t name_cap,
                         char *args, size_t args_cap, char *err, size_t errlen);

#endif
