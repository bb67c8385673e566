/*
 * Private to src/model/chat*.c: the growable text buffer every renderer writes into,
 * the JavaScript whitespace rules the reference engine trims with, and the JSON
 * reader and writer that reproduce @huggingface/jinja's `tojson` byte for byte.
 */
#ifndef LIBRA_CHAT_INTERNAL_H
#define LIBRA_CHAT_INTERNAL_H

#include "libra/chat.h"

#include <jansson.h>
#include <stddef.h>

/* Text under construction; grows with xrealloc (never fails), p is NUL-terminated
 * once anything was put. */
struct chat_buf {
    char *p;
    size_t len, cap;
};

void chat_buf_put(struct chat_buf *b, const char *s, size_t n);
void chat_buf_puts(struct chat_buf *b, const char *s);
void chat_buf_free(struct chat_buf *b);
/* snprintf-style copy-out: writes min(len, cap - 1) bytes and a NUL when cap > 0;
 * returns b->len. */
size_t chat_buf_copy_out(const struct chat_buf *b, char *out, size_t cap);

/* printf into err (errlen bytes, NUL-terminated); no-op when err is NULL. */
void chat_set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* JavaScript's String.prototype.trim / trimStart / trimEnd over UTF-8 text: the
 * number of bytes of leading (trailing) white space -- TAB, LF, VT, FF, CR, SPACE,
 * U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF.
 * Invalid UTF-8 is not white space. */
size_t chat_js_space_lead(const char *s, size_t n);
size_t chat_js_space_trail(const char *s, size_t n);
/* Puts s with the white space trimmed at the start (lead), the end (trail) or both. */
void chat_buf_put_trimmed(struct chat_buf *b, const char *s, size_t n, int lead, int trail);

/* Parses a JSON text the way JSON.parse sees it: every number a double
 * (JSON_DECODE_INT_AS_REAL), any value at the top, "\u0000" allowed, a repeated key
 * keeps its first place and its last value. NULL with the reason in err (what is
 * the text's role, e.g. "tools_json", in `what`). */
json_t *chat_json_load(const char *text, size_t len, const char *what, char *err, size_t errlen);
/* Writes v as @huggingface/jinja's toJSON does: JSON.stringify's strings and
 * numbers, keys in JavaScript's own-property order (array-index keys first in
 * ascending order, then the others as inserted); separators ", " and ": ", or ","
 * and ":" with compact. No indent, no ASCII escaping (the templates use neither). */
void chat_json_dump(struct chat_buf *b, const json_t *v, int compact);

/* The family renderers behind chat_render (arguments checked by the caller; tools
 * is the parsed array or NULL). Return 0, or -1 with err set. */
int chat_qwen3_render(struct chat_buf *b, const struct chat_message *m, int n, const json_t *tools,
                      int add_generation_prompt, int enable_thinking, char *err, size_t errlen);
int chat_llama3_render(struct chat_buf *b, const struct chat_message *m, int n, const json_t *tools,
                       char *err, size_t errlen);
/* The assistant turn's body (between the header and the terminator) as chat.h's
 * chat_render_assistant describes it. */
int chat_qwen3_assistant(struct chat_buf *b, const struct chat_message *m, int after_query, int last,
                         const char *where, char *err, size_t errlen);
int chat_llama3_assistant(struct chat_buf *b, const struct chat_message *m, const char *where,
                          char *err, size_t errlen);
/* The tool-call body both families write: {"name": "<name>", "arguments": <tojson>};
 * quote_name writes the name as a JSON string (Llama 3), else verbatim as the Qwen3
 * template does. */
int chat_put_call_body(struct chat_buf *b, const struct chat_tool_call *c, int quote_name,
                       const char *where, char *err, size_t errlen);

#endif
