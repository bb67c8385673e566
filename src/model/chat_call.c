/*
 * Tool calls in the chat formats: writing a call's body for the renderers, finding
 * the calls in a model's text, and parsing one (include/libra/chat.h).
 *
 * Both families write a call's body the same way,
 *   {"name": "<name>", "arguments": <arguments | tojson>}
 * (Qwen3 between "<tool_call>\n" and "\n</tool_call>", the name verbatim as its
 * template does; Llama 3 as a line of the assistant's content, the name as a JSON
 * string). Parsing goes through jansson with JSON.parse's reading of numbers, so the
 * compact arguments it returns render again as the same tojson text.
 */
#include "chat_internal.h"

#include <stdio.h>
#include <string.h>

int chat_put_call_body(struct chat_buf *b, const struct chat_tool_call *c, int quote_name,
                       const char *where, char *err, size_t errlen)
{
    if (!c->name) {
        chat_set_err(err, errlen, "%s: no name", where);
        return -1;
    }
    if (!c->arguments_json) {
        chat_set_err(err, errlen, "%s (%s): no arguments_json (use \"{}\" for none)", where, c->name);
        return -1;
    }
    char what[160];
    snprintf(what, sizeof what, "%s (%s): arguments_json", where, c->name);
    json_t *args = chat_json_load(c->arguments_json, strlen(c->arguments_json), what, err, errlen);
    if (!args) return -1;
    if (!json_is_object(args)) {
        chat_set_err(err, errlen, "%s is not a JSON object (it must be {\"key\": value, ...})", what);
        json_decref(args);
        return -1;
    }
    chat_buf_puts(b, "{\"name\": ");
    if (quote_name) {
        json_t *s = json_stringn_nocheck(c->name, strlen(c->name));
        chat_json_dump(b, s, 0);
        json_decref(s);
    } else {
        chat_buf_puts(b, "\"");
        chat_buf_puts(b, c->name);
        chat_buf_puts(b, "\"");
    }
    chat_buf_puts(b, ", \"arguments\": ");
    chat_json_dump(b, args, 0);
    chat_buf_puts(b, "}");
    json_decref(args);
    return 0;
}

/* The first occurrence of p in s[from..n), or n. */
static size_t find(const char *s, size_t n, size_t from, const char *p)
{
    size_t k = strlen(p);
    for (size_t i = from; i + k <= n; i++)
        if (memcmp(s + i, p, k) == 0) return i;
    return n;
}

int chat_next_tool_call(int family, const char *text, size_t len, size_t from, size_t *start,
                        size_t *end)
{
    if (!text || from >= len) return 0;
    if (family == CHAT_QWEN3) {
        size_t open = find(text, len, from, "<tool_call>");
        if (open == len) return 0;
        *start = open + strlen("<tool_call>");
        *end = find(text, len, *start, "</tool_call>");
        return 1;
    }
    if (family == CHAT_LLAMA3) {
        /* Lines from the one that holds byte from (when from starts a line, or the
         * next one otherwise: continuing from a call's end skips its line). */
        size_t i = from;
        if (i > 0 && text[i - 1] != '\n') i = find(text, len, i, "\n") + 1;
        while (i < len) {
            size_t eol = find(text, len, i, "\n");
            size_t lead = i;
            while (lead < eol && (text[lead] == ' ' || text[lead] == '\t' || text[lead] == '\r'))
                lead++;
            if (lead < eol && text[lead] == '{') {
                *start = lead;
                *end = eol;
                return 1;
            }
            i = eol + 1;
        }
    }
    return 0;
}

int chat_parse_tool_call(int family, const char *text, size_t len, char *name, size_t name_cap,
                         char *args, size_t args_cap, char *err, size_t errlen)
{
    if (family != CHAT_QWEN3 && family != CHAT_LLAMA3) {
        chat_set_err(err, errlen, "unknown chat family %d", family);
        return -1;
    }
    if (!text || !name || !args || name_cap == 0 || args_cap == 0) {
        chat_set_err(err, errlen, "tool call: NULL text or output, or a zero cap");
        return -1;
    }
    if (len > CHAT_CALL_MAX_BYTES) {
        chat_set_err(err, errlen, "tool call: %zu bytes, more than the %u allowed", len,
                     CHAT_CALL_MAX_BYTES);
        return -1;
    }
    json_t *call = chat_json_load(text, len, "tool call", err, errlen);
    if (!call) return -1;
    int rc = -1;
    struct chat_buf b = {0};
    if (!json_is_object(call)) {
        chat_set_err(err, errlen,
                     "tool call: not a JSON object (expected {\"name\": ..., \"arguments\": {...}})");
        goto fail;
    }
    json_t *n = json_object_get(call, "name");
    if (!n) {
        chat_set_err(err, errlen, "tool call: no \"name\"");
        goto fail;
    }
    if (!json_is_string(n) || json_string_length(n) == 0 ||
        strlen(json_string_value(n)) != json_string_length(n)) {
        chat_set_err(err, errlen, "tool call: \"name\" is not a non-empty string without NUL");
        goto fail;
    }
    json_t *a = json_object_get(call, "arguments");
    if (!a) {
        chat_set_err(err, errlen, "tool call %s: no \"arguments\" (use {} for none)", json_string_value(n));
        goto fail;
    }
    if (!json_is_object(a)) {
        chat_set_err(err, errlen, "tool call %s: \"arguments\" is not a JSON object", json_string_value(n));
        goto fail;
    }
    if (json_string_length(n) >= name_cap) {
        chat_set_err(err, errlen, "tool call: name of %zu bytes, longer than the %zu allowed",
                     json_string_length(n), name_cap - 1);
        goto fail;
    }
    chat_json_dump(&b, a, 1);
    if (b.len >= args_cap) {
        chat_set_err(err, errlen, "tool call %s: arguments of %zu bytes, longer than the %zu allowed",
                     json_string_value(n), b.len, args_cap - 1);
        goto fail;
    }
    memcpy(name, json_string_value(n), json_string_length(n) + 1);
    memcpy(args, b.p, b.len + 1);
    rc = 0;
fail:
    chat_buf_free(&b);
    json_decref(call);
    return rc;
}
