/*
 * The chat module's entry points (include/libra/chat.h): families and their fixed
 * strings, checking a conversation before any family renders it, and the segments a
 * rollout appends. The family renderers are chat_qwen3.c and chat_llama3.c, the
 * shared JSON and white-space rules chat_json.c, tool calls chat_call.c.
 */
#include "chat_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static const struct chat_format qwen3_format = {
    .turn_end = "<|im_end|>",
    .conversation_end = "\n",
    .call_open = "<tool_call>\n",
    .call_close = "\n</tool_call>",
    .call_sep = "\n",
    .think_open = "<think>\n",
    .think_close = "\n</think>\n\n",
};

static const struct chat_format llama3_format = {
    .turn_end = "<|eot_id|>",
    .conversation_end = "<|start_header_id|>assistant<|end_header_id|>\n\n",
    .call_open = "",
    .call_close = "",
    .call_sep = "\n",
    .think_open = NULL,
    .think_close = NULL,
};

const struct chat_format *chat_format_of(int family)
{
    switch (family) {
    case CHAT_QWEN3: return &qwen3_format;
    case CHAT_LLAMA3: return &llama3_format;
    default: return NULL;
    }
}

const char *chat_family_name(int family)
{
    switch (family) {
    case CHAT_QWEN3: return "qwen3";
    case CHAT_LLAMA3: return "llama3";
    default: return NULL;
    }
}

int chat_family_from_name(const char *s)
{
    if (!s) return -1;
    const char *slash = strrchr(s, '/');
    if (slash) s = slash + 1;
    char low[128];
    size_t n = 0;
    for (; s[n] && n < sizeof low - 1; n++) low[n] = (char)tolower((unsigned char)s[n]);
    low[n] = '\0';
    if (strncmp(low, "qwen", 4) == 0) return CHAT_QWEN3;
    if (strstr(low, "llama")) return CHAT_LLAMA3;
    return -1;
}

static int known_role(const char *r)
{
    return r && (strcmp(r, "system") == 0 || strcmp(r, "user") == 0 ||
                 strcmp(r, "assistant") == 0 || strcmp(r, "tool") == 0);
}

/* What no family can render: checked once, so the renderers trust roles and counts. */
static int check_messages(int family, const struct chat_message *m, int n, char *err, size_t errlen)
{
    if (!chat_format_of(family)) {
        chat_set_err(err, errlen, "unknown chat family %d (CHAT_QWEN3 or CHAT_LLAMA3)", family);
        return -1;
    }
    if (n < 0 || (n > 0 && !m)) {
        chat_set_err(err, errlen, "bad message list: n = %d, m %s", n, m ? "set" : "NULL");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (!known_role(m[i].role)) {
            chat_set_err(err, errlen, "message %d: role \"%s\" (expected system, user, assistant or tool)",
                         i, m[i].role ? m[i].role : "(null)");
            return -1;
        }
        if (strcmp(m[i].role, "assistant") != 0) continue;
        if (m[i].n_tool_calls < 0 || (m[i].n_tool_calls > 0 && !m[i].tool_calls)) {
            chat_set_err(err, errlen, "message %d: bad tool calls: n_tool_calls = %d, tool_calls %s", i,
                         m[i].n_tool_calls, m[i].tool_calls ? "set" : "NULL");
            return -1;
        }
    }
    return 0;
}

/* Parses tools_json (NULL stays NULL): a JSON array of objects. */
static int load_tools(const char *tools_json, json_t **tools, char *err, size_t errlen)
{
    *tools = NULL;
    if (!tools_json) return 0;
    json_t *t = chat_json_load(tools_json, strlen(tools_json), "tools_json", err, errlen);
    if (!t) return -1;
    if (!json_is_array(t)) {
        chat_set_err(err, errlen, "tools_json is not a JSON array (expected [{\"type\": \"function\", "
                                  "\"function\": {...}}, ...])");
        json_decref(t);
        return -1;
    }
    for (size_t i = 0; i < json_array_size(t); i++)
        if (!json_is_object(json_array_get(t, i))) {
            chat_set_err(err, errlen, "tools_json: element %zu is not a JSON object", i);
            json_decref(t);
            return -1;
        }
    *tools = t;
    return 0;
}

size_t chat_render(int family, const struct chat_message *m, int n, const char *tools_json,
                   int add_generation_prompt, int enable_thinking, char *out, size_t cap,
                   char *err, size_t errlen)
{
    json_t *tools = NULL;
    struct chat_buf b = {0};
    size_t need = (size_t)-1;
    if (check_messages(family, m, n, err, errlen) != 0) return (size_t)-1;
    if (load_tools(tools_json, &tools, err, errlen) != 0) return (size_t)-1;
    int rc = family == CHAT_QWEN3
                 ? chat_qwen3_render(&b, m, n, tools, add_generation_prompt, enable_thinking, err, errlen)
                 : chat_llama3_render(&b, m, n, tools, err, errlen);
    if (rc == 0) {
        chat_buf_puts(&b, ""); /* an empty rendering still has its NUL */
        need = chat_buf_copy_out(&b, out, cap);
    }
    chat_buf_free(&b);
    json_decref(tools);
    return need;
}

size_t chat_render_assistant(int family, const struct chat_message *m, int last, char *out,
                             size_t cap, char *err, size_t errlen)
{
    if (!m) {
        chat_set_err(err, errlen, "chat_render_assistant: NULL message");
        return (size_t)-1;
    }
    if (check_messages(family, m, 1, err, errlen) != 0) return (size_t)-1;
    if (strcmp(m->role, "assistant") != 0) {
        chat_set_err(err, errlen, "chat_render_assistant: role \"%s\", not assistant", m->role);
        return (size_t)-1;
    }
    struct chat_buf b = {0};
    size_t need = (size_t)-1;
    int rc = family == CHAT_QWEN3 ? chat_qwen3_assistant(&b, m, 1, last, "assistant", err, errlen)
                                  : chat_llama3_assistant(&b, m, "assistant", err, errlen);
    if (rc == 0) {
        chat_buf_puts(&b, "");
        need = chat_buf_copy_out(&b, out, cap);
    }
    chat_buf_free(&b);
    return need;
}

size_t chat_render_tool_results(int family, const char *const *results, int n,
                                int enable_thinking, char *out, size_t cap, char *err,
                                size_t errlen)
{
    if (!chat_format_of(family)) {
        chat_set_err(err, errlen, "unknown chat family %d (CHAT_QWEN3 or CHAT_LLAMA3)", family);
        return (size_t)-1;
    }
    if (n < 1 || !results) {
        chat_set_err(err, errlen, "chat_render_tool_results: %d results%s (at least one)", n,
                     results ? "" : ", NULL list");
        return (size_t)-1;
    }
    for (int i = 0; i < n; i++)
        if (!results[i]) {
            chat_set_err(err, errlen, "chat_render_tool_results: result %d is NULL", i);
            return (size_t)-1;
        }
    struct chat_buf b = {0};
    if (family == CHAT_QWEN3) {
        /* The previous turn's "<|im_end|>" is followed by the template's "\n". */
        chat_buf_puts(&b, "\n<|im_start|>user");
        for (int i = 0; i < n; i++) {
            chat_buf_puts(&b, "\n<tool_response>\n");
            chat_buf_puts(&b, results[i]);
            chat_buf_puts(&b, "\n</tool_response>");
        }
        chat_buf_puts(&b, "<|im_end|>\n<|im_start|>assistant\n");
        if (!enable_thinking) chat_buf_puts(&b, "<think>\n\n</think>\n\n");
    } else {
        for (int i = 0; i < n; i++) {
            chat_buf_puts(&b, "<|start_header_id|>ipython<|end_header_id|>\n\n");
            chat_buf_put_trimmed(&b, results[i], strlen(results[i]), 1, 1);
            chat_buf_puts(&b, "<|eot_id|>");
        }
        chat_buf_puts(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    }
    size_t need = chat_buf_copy_out(&b, out, cap);
    chat_buf_free(&b);
    return need;
}
