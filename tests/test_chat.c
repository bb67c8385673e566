/*
 * Tests of the native chat formats (include/libra/chat.h):
 *   - every conversation of tests/golden/chat/conversations.json and random.json
 *     (seeded random ones), in both families,
 *     with add_generation_prompt false / true and enable_thinking true / false,
 *     renders to exactly the string @huggingface/jinja made from the official
 *     template (tests/golden/chat/{qwen3,llama3}.json, tools/chat-goldens);
 *   - the segment identity: prompt + assistant texts + turn ends + tool-result
 *     segments == the whole conversation rendered at once (and, for Qwen3 with
 *     enable_thinking false, exactly the difference the template makes);
 *   - tool calls: finding them in a model's text, parsing good and bad ones, a round
 *     trip through rendering, and seeded random / mutated bytes (0 or -1, never a
 *     crash; run under ASan and valgrind);
 *   - bad input (tools_json, arguments_json, roles, families) and the snprintf-style
 *     size contract.
 */
#include "libra/chat.h"
#include "libra/rng.h"
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the conversations file, as chat_message arrays ---- */

struct conv {
    const char *name;
    char *tools_json; /* NULL: no tools key */
    struct chat_message *m;
    int n;
};

struct convs {
    json_t *root, *random;
    struct conv *c;
    int n;
    /* every string the messages point into that the test made */
    char **owned;
    int n_owned;
};

static json_t *load_json(const char *rel)
{
    json_error_t je;
    json_t *j = json_load_file(test_path(rel), JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, &je);
    if (!j)
        fprintf(stderr, "test_chat: %s: %s (line %d) -- run tools/chat-goldens?\n", rel, je.text, je.line);
    return j;
}

static char *own(struct convs *cs, char *s)
{
    cs->owned = realloc(cs->owned, (size_t)(cs->n_owned + 1) * sizeof *cs->owned);
    cs->owned[cs->n_owned++] = s;
    return s;
}

static const char *str_or_null(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Appends the conversations of one file (tool sets: the main file's). */
static int add_convs(struct convs *cs, json_t *file, json_t *sets)
{
    json_t *list = json_object_get(file, "conversations");
    int base = cs->n;
    cs->n += (int)json_array_size(list);
    cs->c = realloc(cs->c, (size_t)cs->n * sizeof *cs->c);
    for (int i = base; i < cs->n; i++) {
        json_t *c = json_array_get(list, (size_t)(i - base));
        struct conv *v = &cs->c[i];
        memset(v, 0, sizeof *v);
        v->name = str_or_null(c, "name");
        json_t *tools = json_object_get(c, "tools");
        if (json_is_string(tools)) tools = json_object_get(sets, json_string_value(tools));
        /* Pretty-printed for some, compact for others: any spacing is input. */
        if (tools) v->tools_json = own(cs, json_dumps(tools, i % 2 ? JSON_INDENT(2) : JSON_COMPACT));
        json_t *msgs = json_object_get(c, "messages");
        v->n = (int)json_array_size(msgs);
        v->m = calloc((size_t)(v->n ? v->n : 1), sizeof *v->m);
        for (int k = 0; k < v->n; k++) {
            json_t *mj = json_array_get(msgs, k);
            struct chat_message *m = &v->m[k];
            m->role = str_or_null(mj, "role");
            m->content = str_or_null(mj, "content");
            m->reasoning = str_or_null(mj, "reasoning_content");
            json_t *calls = json_object_get(mj, "tool_calls");
            m->n_tool_calls = (int)json_array_size(calls);
            if (m->n_tool_calls == 0) continue;
            struct chat_tool_call *tc = calloc((size_t)m->n_tool_calls, sizeof *tc);
            own(cs, (char *)tc);
            for (int t = 0; t < m->n_tool_calls; t++) {
                json_t *f = json_object_get(json_array_get(calls, t), "function");
                tc[t].name = str_or_null(f, "name");
                tc[t].arguments_json = own(cs, json_dumps(json_object_get(f, "arguments"),
                                                          (k + t) % 2 ? JSON_INDENT(3) : JSON_COMPACT));
            }
            m->tool_calls = tc;
        }
    }
    return 0;
}

/* conversations.json, then random.json (both written for tools/chat-goldens). */
static int load_convs(struct convs *cs)
{
    memset(cs, 0, sizeof *cs);
    cs->root = load_json("tests/golden/chat/conversations.json");
    cs->random = load_json("tests/golden/chat/random.json");
    if (!cs->root || !cs->random) return -1;
    json_t *sets = json_object_get(cs->root, "tool_sets");
    add_convs(cs, cs->root, sets);
    add_convs(cs, cs->random, sets);
    return 0;
}

static void free_convs(struct convs *cs)
{
    for (int i = 0; i < cs->n; i++) free(cs->c[i].m);
    free(cs->c);
    for (int i = 0; i < cs->n_owned; i++) free(cs->owned[i]);
    free(cs->owned);
    json_decref(cs->root);
    json_decref(cs->random);
}

static const struct conv *find_conv(const struct convs *cs, const char *name)
{
    for (int i = 0; i < cs->n; i++)
        if (cs->c[i].name && strcmp(cs->c[i].name, name) == 0) return &cs->c[i];
    return NULL;
}

/* chat_render into a fresh buffer (NULL on error, the reason printed). */
static char *render(int family, const struct chat_message *m, int n, const char *tools, int agp,
                    int thinking)
{
    char err[256] = "";
    size_t need = chat_render(family, m, n, tools, agp, thinking, NULL, 0, err, sizeof err);
    if (need == (size_t)-1) {
        fprintf(stderr, "chat_render: %s\n", err);
        return NULL;
    }
    char *out = malloc(need + 1);
    size_t again = chat_render(family, m, n, tools, agp, thinking, out, need + 1, err, sizeof err);
    CU_ASSERT_EQUAL(again, need);
    CU_ASSERT_EQUAL(strlen(out), need);
    return out;
}

/* Equal, or a message with the first differing byte and the text around it. */
static int same_text(const char *what, const char *got, const char *want)
{
    if (got && strcmp(got, want) == 0) return 1;
    if (!got) {
        fprintf(stderr, "\n  %s: render failed\n", what);
        return 0;
    }
    size_t i = 0;
    while (got[i] && got[i] == want[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr,
            "\n  %s: differs at byte %zu (lengths %zu, %zu)\n    got : \"%.80s\"\n    want: \"%.80s\"\n",
            what, i, strlen(got), strlen(want), got + from, want + from);
    return 0;
}

/* ---- goldens ---- */

static void check_goldens(int family, const char *rel)
{
    struct convs cs;
    CU_ASSERT_FATAL(load_convs(&cs) == 0);
    json_t *g = load_json(rel);
    CU_ASSERT_FATAL(g != NULL);
    json_t *renders = json_object_get(g, "renders");
    CU_ASSERT_EQUAL(json_array_size(renders), (size_t)cs.n * 4);
    int bad = 0;
    for (size_t i = 0; i < json_array_size(renders); i++) {
        json_t *r = json_array_get(renders, i);
        const struct conv *c = find_conv(&cs, str_or_null(r, "name"));
        CU_ASSERT_FATAL(c != NULL);
        int agp = json_is_true(json_object_get(r, "add_generation_prompt"));
        int thinking = json_is_true(json_object_get(r, "enable_thinking"));
        json_t *want = json_object_get(r, "text");
        CU_ASSERT_EQUAL_FATAL(strlen(json_string_value(want)), json_string_length(want));
        char *got = render(family, c->m, c->n, c->tools_json, agp, thinking);
        char what[160];
        snprintf(what, sizeof what, "%s %s agp=%d thinking=%d", chat_family_name(family), c->name, agp,
                 thinking);
        if (!same_text(what, got, json_string_value(want))) bad++;
        free(got);
    }
    CU_ASSERT_EQUAL(bad, 0);
    json_decref(g);
    free_convs(&cs);
}

static void test_golden_qwen3(void)
{
    check_goldens(CHAT_QWEN3, "tests/golden/chat/qwen3.json");
}

static void test_golden_llama3(void)
{
    check_goldens(CHAT_LLAMA3, "tests/golden/chat/llama3.json");
}

/* ---- the segment identity ---- */

static void put(char **buf, size_t *len, const char *s)
{
    size_t n = strlen(s);
    *buf = realloc(*buf, *len + n + 1);
    memcpy(*buf + *len, s, n + 1);
    *len += n;
}

/* Append chat_render_assistant's / chat_render_tool_results' text, sized first with
 * cap 0 as a caller would. */
static void put_assistant(char **buf, size_t *len, int family, const struct chat_message *m, int last)
{
    char err[256] = "";
    size_t need = chat_render_assistant(family, m, last, NULL, 0, err, sizeof err);
    CU_ASSERT_FATAL(need != (size_t)-1);
    char *t = malloc(need + 1);
    CU_ASSERT_EQUAL(chat_render_assistant(family, m, last, t, need + 1, err, sizeof err), need);
    put(buf, len, t);
    free(t);
}

static void put_results(char **buf, size_t *len, int family, const char *const *r, int n, int thinking)
{
    char err[256] = "";
    size_t need = chat_render_tool_results(family, r, n, thinking, NULL, 0, err, sizeof err);
    CU_ASSERT_FATAL(need != (size_t)-1);
    char *t = malloc(need + 1);
    CU_ASSERT_EQUAL(chat_render_tool_results(family, r, n, thinking, t, need + 1, err, sizeof err), need);
    put(buf, len, t);
    free(t);
}

/* What a rollout assembles: the prompt up to the first assistant message with its
 * generation prompt, then per assistant turn its text and turn_end, then the tool
 * results that answer it; conversation_end after the last turn. A conversation that
 * ends with tool results ends with their segment's generation prompt instead (*agp). */
static char *assemble(int family, const struct conv *c, int thinking, int *agp)
{
    const struct chat_format *f = chat_format_of(family);
    int k = 0;
    while (k < c->n && strcmp(c->m[k].role, "assistant") != 0) k++;
    char *buf = render(family, c->m, k, c->tools_json, 1, thinking);
    size_t len = strlen(buf);
    for (int i = k; i < c->n;) {
        CU_ASSERT_STRING_EQUAL_FATAL(c->m[i].role, "assistant");
        put_assistant(&buf, &len, family, &c->m[i], i == c->n - 1);
        put(&buf, &len, f->turn_end);
        i++;
        const char *results[8];
        int nr = 0;
        while (i < c->n && strcmp(c->m[i].role, "tool") == 0 && nr < 8) results[nr++] = c->m[i++].content;
        if (nr > 0) put_results(&buf, &len, family, results, nr, thinking);
    }
    *agp = c->n > k && strcmp(c->m[c->n - 1].role, "tool") == 0;
    if (!*agp) put(&buf, &len, f->conversation_end);
    return buf;
}

/* s with every occurrence of p removed (in place). */
static void remove_all(char *s, const char *p)
{
    size_t n = strlen(p);
    char *hit;
    while ((hit = strstr(s, p))) memmove(hit, hit + n, strlen(hit + n) + 1);
}

static void test_segment_identity(void)
{
    struct convs cs;
    CU_ASSERT_FATAL(load_convs(&cs) == 0);
    static const char *const names[] = {"tools-two-calls", "tools-two-calls-reasoning", "tools-one-call",
                                        "unicode", "whitespace", "call-content-newline"};
    static const int families[] = {CHAT_QWEN3, CHAT_LLAMA3};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const struct conv *c = find_conv(&cs, names[i]);
        CU_ASSERT_FATAL(c != NULL);
        for (int fi = 0; fi < 2; fi++) {
            int family = families[fi];
            for (int thinking = 1; thinking >= 0; thinking--) {
                int agp;
                char *parts = assemble(family, c, thinking, &agp);
                char *whole = render(family, c->m, c->n, c->tools_json, agp, thinking);
                char what[160];
                snprintf(what, sizeof what, "identity %s %s thinking=%d", chat_family_name(family),
                         names[i], thinking);
                if (family == CHAT_QWEN3 && !thinking) {
                    /* The template's own exception (chat.h): the generation prompt's
                     * empty think block stays in the assembled turns, a re-rendering
                     * keeps it in the last turn only. Nothing else differs. */
                    static const char empty_think[] = "<think>\n\n</think>\n\n";
                    CU_ASSERT(strlen(parts) > strlen(whole));
                    remove_all(whole, empty_think);
                    remove_all(parts, empty_think);
                }
                CU_ASSERT(same_text(what, parts, whole));
                free(whole);
                free(parts);
            }
        }
    }
    free_convs(&cs);
}

/* The segments spelled out once, so the documented strings are pinned too. */
static void test_segments_spelled(void)
{
    const char *r[] = {"A", " B "};
    char out[512], err[128];
    CU_ASSERT_EQUAL(chat_render_tool_results(CHAT_QWEN3, r, 2, 1, out, sizeof out, err, sizeof err),
                    strlen(out));
    CU_ASSERT_STRING_EQUAL(out,
                           "\n<|im_start|>user\n<tool_response>\nA\n</tool_response>\n<tool_response>\n B \n"
                           "</tool_response><|im_end|>\n<|im_start|>assistant\n");
    chat_render_tool_results(CHAT_QWEN3, r, 1, 0, out, sizeof out, err, sizeof err);
    CU_ASSERT_STRING_EQUAL(out, "\n<|im_start|>user\n<tool_response>\nA\n</tool_response><|im_end|>\n"
                                "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    chat_render_tool_results(CHAT_LLAMA3, r, 2, 0, out, sizeof out, err, sizeof err);
    CU_ASSERT_STRING_EQUAL(out, "<|start_header_id|>ipython<|end_header_id|>\n\nA<|eot_id|>"
                                "<|start_header_id|>ipython<|end_header_id|>\n\nB<|eot_id|>"
                                "<|start_header_id|>assistant<|end_header_id|>\n\n");
    CU_ASSERT_EQUAL(chat_render_tool_results(CHAT_QWEN3, r, 0, 1, out, sizeof out, err, sizeof err),
                    (size_t)-1);
    CU_ASSERT_EQUAL(chat_render_tool_results(CHAT_QWEN3, NULL, 1, 1, out, sizeof out, err, sizeof err),
                    (size_t)-1);
    CU_ASSERT_EQUAL(chat_render_tool_results(7, r, 1, 1, out, sizeof out, err, sizeof err), (size_t)-1);

    const struct chat_format *q = chat_format_of(CHAT_QWEN3), *l = chat_format_of(CHAT_LLAMA3);
    CU_ASSERT_STRING_EQUAL(q->turn_end, "<|im_end|>");
    CU_ASSERT_STRING_EQUAL(l->turn_end, "<|eot_id|>");
    CU_ASSERT_STRING_EQUAL(q->call_open, "<tool_call>\n");
    CU_ASSERT_STRING_EQUAL(q->call_close, "\n</tool_call>");
    CU_ASSERT_PTR_NULL(l->think_open);
    CU_ASSERT_PTR_NULL(chat_format_of(0));

    /* An assistant turn is call_open + body + call_close, joined by call_sep. */
    struct chat_tool_call tc = {"f", "{\"a\": [1, 2.0]}"};
    struct chat_message a = {.role = "assistant", .content = "x", .tool_calls = &tc, .n_tool_calls = 1};
    chat_render_assistant(CHAT_QWEN3, &a, 0, out, sizeof out, err, sizeof err);
    CU_ASSERT_STRING_EQUAL(out,
                           "x\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}\n</tool_call>");
    chat_render_assistant(CHAT_QWEN3, &a, 1, out, sizeof out, err, sizeof err);
    CU_ASSERT_STRING_EQUAL(out,
                           "<think>\n\n</think>\n\nx\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": "
                           "[1, 2]}}\n</tool_call>");
    chat_render_assistant(CHAT_LLAMA3, &a, 1, out, sizeof out, err, sizeof err);
    CU_ASSERT_STRING_EQUAL(out, "x\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}");
    struct chat_message u = {.role = "user", .content = "x"};
    CU_ASSERT_EQUAL(chat_render_assistant(CHAT_QWEN3, &u, 0, out, sizeof out, err, sizeof err), (size_t)-1);
}

/* ---- tool calls ---- */

struct good_call {
    const char *text, *name, *args;
};

static const struct good_call good_calls[] = {
    { "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", "get_weather",
      "{\"city\":\"Paris\"}" },
    { "\n  {\"name\":\"f\",\"arguments\":{}}  \n", "f", "{}" },
    { "{\"name\": \"f\", \"arguments\": {}}\n", "f", "{}" },
    { "\t{ \"arguments\" : { \"a\" : [ 1 , 2.50 , { \"b\" : null } ] } , \"name\" : \"g\" }\r\n", "g",
      "{\"a\":[1,2.5,{\"b\":null}]}" },
    { "{\"name\": \"nest\", \"arguments\": {\"a\": {\"b\": {\"c\": {\"d\": [[], {}, [true, false]]}}}}}",
      "nest", "{\"a\":{\"b\":{\"c\":{\"d\":[[],{},[true,false]]}}}}" },
    { "{\"name\": \"天气\", \"arguments\": {\"city\": \"Zürich\", \"e\": \"\\ud83d\\ude00\", \"raw\": "
      "\"😀\"}}",
      "天气", "{\"city\":\"Zürich\",\"e\":\"😀\",\"raw\":\"😀\"}" },
    { "{\"name\": \"k\", \"arguments\": {\"b\": 1, \"2\": 2, \"1\": 1.0, \"x\": 1e21, \"y\": 1E-7}}", "k",
      "{\"1\":1,\"2\":2,\"b\":1,\"x\":1e+21,\"y\":1e-7}" },
    { "{\"name\": \"esc\", \"arguments\": {\"s\": \"a\\\"b\\\\c\\n\\u0001\\/<>&'\\u0000\"}}", "esc",
      "{\"s\":\"a\\\"b\\\\c\\n\\u0001/<>&'\\u0000\"}" },
    { "{\"name\": \"f\", \"arguments\": {}, \"id\": \"call_1\"}", "f", "{}" },
    { "{\"name\": \"dup\", \"arguments\": {\"a\": 1, \"b\": 0, \"a\": 2}}", "dup",
      "{\"a\":2,\"b\":0}" }, /* JSON.parse's */
};

static const char *const bad_calls[] = {
    "",
    "   ",
    "{",
    "{\"name\": \"f\", \"arguments\": {\"a\": 1}",
    "{\"name\": \"f\", \"arguments\": {\"a\": 1}}}",
    "{\"arguments\": {}}",
    "{\"name\": 5, \"arguments\": {}}",
    "{\"name\": null, \"arguments\": {}}",
    "{\"name\": \"\", \"arguments\": {}}",
    "{\"name\": \"f\\u0000g\", \"arguments\": {}}",
    "{\"name\": \"f\"}",
    "{\"name\": \"f\", \"arguments\": [1, 2]}",
    "{\"name\": \"f\", \"arguments\": \"{}\"}",
    "{\"name\": \"f\", \"arguments\": null}",
    "{\"name\": \"f\", \"arguments\": {}} and some text",
    "{\"name\": \"f\", \"arguments\": {}}</tool_call>",
    "{\"name\": \"f\", \"arguments\": {}}{\"name\": \"g\", \"arguments\": {}}",
    "[{\"name\": \"f\", \"arguments\": {}}]",
    "\"f\"",
    "42",
    "{\"name\": \"f\", \"arguments\": {\"x\": NaN}}",
    "{\"name\": \"f\", \"arguments\": {\"x\": 1e400}}",
    "{'name': 'f', 'arguments': {}}",
    "{\"name\": \"f\", \"arguments\": {\"s\": \"\xff\xfe\"}}",
    "{\"name\": \"f\", \"arguments\": {\"s\": \"\\ud800\"}}",
};

static void test_parse_good(void)
{
    for (size_t i = 0; i < sizeof good_calls / sizeof good_calls[0]; i++) {
        const struct good_call *g = &good_calls[i];
        char name[64], args[256], err[256] = "";
        int rc = chat_parse_tool_call(CHAT_QWEN3, g->text, strlen(g->text), name, sizeof name, args,
                                      sizeof args, err, sizeof err);
        if (rc != 0) fprintf(stderr, "\n  good call %zu refused: %s\n", i, err);
        CU_ASSERT_EQUAL(rc, 0);
        if (rc != 0) continue;
        CU_ASSERT_STRING_EQUAL(name, g->name);
        if (strcmp(args, g->args) != 0)
            fprintf(stderr, "\n  good call %zu: args %s, want %s\n", i, args, g->args);
        CU_ASSERT_STRING_EQUAL(args, g->args);
        /* Llama 3 parses the same body. */
        CU_ASSERT_EQUAL(chat_parse_tool_call(CHAT_LLAMA3, g->text, strlen(g->text), name, sizeof name, args,
                                             sizeof args, err, sizeof err), 0);
    }
}

static void test_parse_bad(void)
{
    for (size_t i = 0; i < sizeof bad_calls / sizeof bad_calls[0]; i++) {
        char name[64], args[256], err[256] = "";
        int rc = chat_parse_tool_call(CHAT_QWEN3, bad_calls[i], strlen(bad_calls[i]), name, sizeof name,
                                      args, sizeof args, err, sizeof err);
        if (rc != -1) fprintf(stderr, "\n  bad call %zu accepted: %s\n", i, bad_calls[i]);
        CU_ASSERT_EQUAL(rc, -1);
        CU_ASSERT(err[0] != '\0');
    }
    char name[64], args[256], err[256];
    /* NUL inside the given length: refused, not read as a shorter text. */
    static const char nul[] = "{\"name\": \"f\", \"arguments\": {}}\0x";
    CU_ASSERT_EQUAL(chat_parse_tool_call(CHAT_QWEN3, nul, sizeof nul - 1, name, sizeof name, args,
                                         sizeof args, err, sizeof err),
                    -1);
    /* Caps: a name or arguments that do not fit are refused, not cut. */
    static const char ok[] = "{\"name\": \"abcdef\", \"arguments\": {\"k\": \"0123456789\"}}";
    CU_ASSERT_EQUAL(
        chat_parse_tool_call(CHAT_QWEN3, ok, strlen(ok), name, 6, args, sizeof args, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "name") != NULL);
    CU_ASSERT_EQUAL(chat_parse_tool_call(CHAT_QWEN3, ok, strlen(ok), name, 7, args, 18, err, sizeof err), -1);
    CU_ASSERT_EQUAL(chat_parse_tool_call(CHAT_QWEN3, ok, strlen(ok), name, 7, args, 19, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(args, "{\"k\":\"0123456789\"}");
    CU_ASSERT_EQUAL(chat_parse_tool_call(9, ok, strlen(ok), name, 7, args, 22, err, sizeof err), -1);
    CU_ASSERT_EQUAL(chat_parse_tool_call(CHAT_QWEN3, NULL, 0, name, 7, args, 22, err, sizeof err), -1);
}

/* 10 kB inputs: a valid call with a long argument (accepted when the cap allows,
 * refused when not), deep nesting, and garbage; over CHAT_CALL_MAX_BYTES refused. */
static void test_parse_long(void)
{
    size_t n = 10000;
    char *t = malloc(n + 64);
    int o = sprintf(t, "{\"name\": \"long\", \"arguments\": {\"s\": \"");
    size_t n_x = n - (size_t)o;
    while ((size_t)o < n) t[o++] = 'x';
    o += sprintf(t + o, "\"}}");
    char name[32], err[256];
    char *args = malloc(n + 64);
    CU_ASSERT_EQUAL(
        chat_parse_tool_call(CHAT_QWEN3, t, (size_t)o, name, sizeof name, args, n + 64, err, sizeof err), 0);
    CU_ASSERT_EQUAL(strlen(args), n_x + strlen("{\"s\":\"\"}"));
    CU_ASSERT_EQUAL(
        chat_parse_tool_call(CHAT_QWEN3, t, (size_t)o, name, sizeof name, args, 1000, err, sizeof err), -1);
    /* Deep nesting: jansson's depth limit, an error either way. */
    o = sprintf(t, "{\"name\": \"deep\", \"arguments\": ");
    while ((size_t)o < n) t[o++] = '[';
    CU_ASSERT_EQUAL(
        chat_parse_tool_call(CHAT_QWEN3, t, (size_t)o, name, sizeof name, args, n, err, sizeof err), -1);
    memset(t, '{', n);
    CU_ASSERT_EQUAL(chat_parse_tool_call(CHAT_QWEN3, t, n, name, sizeof name, args, n, err, sizeof err), -1);
    free(t);
    size_t big = CHAT_CALL_MAX_BYTES + 1;
    t = malloc(big);
    memset(t, ' ', big);
    memcpy(t, "{\"name\": \"f\", \"arguments\": {}}", 30);
    CU_ASSERT_EQUAL(chat_parse_tool_call(CHAT_QWEN3, t, big, name, sizeof name, args, n, err, sizeof err),
                    -1);
    CU_ASSERT(strstr(err, "allowed") != NULL);
    free(t);
    free(args);
}

/* Seeded random bytes and mutations of good calls: 0 or -1; when 0, a non-empty name
 * and arguments that parse again to themselves. */
static void test_parse_fuzz(void)
{
    static const char alphabet[] =
        "{}[]\":,\\ \n\tnameargumentsu0123456789.-+eEtrufalsenul\x01\x7f\xc3\xa9\xff";
    struct rng r;
    int accepted = 0;
    for (int it = 0; it < 6000; it++) {
        rng_init(&r, 20240517, (uint64_t)it, 0, 0);
        char buf[512];
        size_t len;
        if (it % 2 == 0) {
            len = (size_t)rng_below(&r, sizeof buf);
            for (size_t i = 0; i < len; i++)
                buf[i] =
                    it % 4 == 0 ? (char)rng_below(&r, 256) : alphabet[rng_below(&r, sizeof alphabet - 1)];
        } else {
            const char *g = good_calls[rng_below(&r, sizeof good_calls / sizeof good_calls[0])].text;
            len = strlen(g);
            memcpy(buf, g, len);
            int edits = 1 + (int)rng_below(&r, 4);
            for (int e = 0; e < edits && len > 0; e++) {
                size_t at = (size_t)rng_below(&r, len);
                switch (rng_below(&r, 4)) {
                case 0: buf[at] = (char)rng_below(&r, 256); break; /* flip */
                case 1: memmove(buf + at, buf + at + 1, len - at - 1); len--; break; /* delete */
                case 2: /* insert */
                    if (len < sizeof buf) {
                        memmove(buf + at + 1, buf + at, len - at);
                        buf[at] = alphabet[rng_below(&r, sizeof alphabet - 1)];
                        len++;
                    }
                    break;
                default: len = at; break; /* truncate */
                }
            }
        }
        char name[64], args[512], err[256];
        int rc = chat_parse_tool_call(it % 3 ? CHAT_QWEN3 : CHAT_LLAMA3, buf, len, name, sizeof name, args,
                                      sizeof args, err, sizeof err);
        CU_ASSERT(rc == 0 || rc == -1);
        if (rc != 0) continue;
        accepted++;
        CU_ASSERT(name[0] != '\0');
        char again[700], name2[64], args2[512];
        int n = snprintf(again, sizeof again, "{\"name\": \"x\", \"arguments\": %s}", args);
        CU_ASSERT_EQUAL(chat_parse_tool_call(CHAT_QWEN3, again, (size_t)n, name2, sizeof name2, args2,
                                             sizeof args2, err, sizeof err), 0);
        CU_ASSERT_STRING_EQUAL(args2, args);
    }
    CU_ASSERT(accepted > 100); /* the mutations keep many calls valid */
}

static void test_next_tool_call(void)
{
    size_t s, e;
    static const char q[] =
        "<think>\nx\n</think>\n\nok\n<tool_call>\n{\"a\": 1}\n</tool_call>\n<tool_call>\nB\n</tool_call>"
        "<tool_call>\n{unterminated";
    size_t len = strlen(q);
    CU_ASSERT_EQUAL(chat_next_tool_call(CHAT_QWEN3, q, len, 0, &s, &e), 1);
    CU_ASSERT_EQUAL(e - s, strlen("\n{\"a\": 1}\n"));
    CU_ASSERT_EQUAL(memcmp(q + s, "\n{\"a\": 1}\n", e - s), 0);
    CU_ASSERT_EQUAL(chat_next_tool_call(CHAT_QWEN3, q, len, e, &s, &e), 1);
    CU_ASSERT_EQUAL(memcmp(q + s, "\nB\n", e - s), 0);
    CU_ASSERT_EQUAL(chat_next_tool_call(CHAT_QWEN3, q, len, e, &s, &e), 1);
    CU_ASSERT_EQUAL(e, len);
    CU_ASSERT_EQUAL(memcmp(q + s, "\n{unterminated", e - s), 0);
    CU_ASSERT_EQUAL(chat_next_tool_call(CHAT_QWEN3, q, len, e, &s, &e), 0);
    CU_ASSERT_EQUAL(chat_next_tool_call(CHAT_QWEN3, "no calls", 8, 0, &s, &e), 0);

    static const char l[] = "Let me check {this}.\n  {\"name\": \"f\", \"arguments\": {}}\n{\"name\": \"g\", "
                            "\"arguments\": {\"x\": 1}}";
    len = strlen(l);
    CU_ASSERT_EQUAL(chat_next_tool_call(CHAT_LLAMA3, l, len, 0, &s, &e), 1);
    CU_ASSERT_EQUAL(memcmp(l + s, "{\"name\": \"f\", \"arguments\": {}}", e - s), 0);
    CU_ASSERT_EQUAL(chat_next_tool_call(CHAT_LLAMA3, l, len, e, &s, &e), 1);
    CU_ASSERT_EQUAL(e, len);
    CU_ASSERT_EQUAL(l[s], '{');
    CU_ASSERT_EQUAL(chat_next_tool_call(CHAT_LLAMA3, l, len, e, &s, &e), 0);
    CU_ASSERT_EQUAL(chat_next_tool_call(CHAT_LLAMA3, l, len, 3, &s, &e), 1); /* mid-line: next line */
    CU_ASSERT_EQUAL(l[s - 3], '\n');
}

/* Render an assistant turn with calls, find and parse them back: names and arguments
 * come back, and re-rendering the parsed calls gives the same text. */
static void test_call_round_trip(void)
{
    static const struct chat_tool_call calls[] = {
        {"get_weather", "{ \"city\" : \"Zürich\", \"days\": [1, 2.0, 3e0], \"2\": {\"1\": null} }"},
        {"search", "{\"q\": \"a \\\"quoted\\\" <b>&</b> \\n line\"}"},
    };
    static const int families[] = {CHAT_QWEN3, CHAT_LLAMA3};
    for (int fi = 0; fi < 2; fi++) {
        int family = families[fi];
        struct chat_message m = {
            .role = "assistant", .content = "Two calls.", .tool_calls = calls, .n_tool_calls = 2
        };
        char text[1024], err[256];
        size_t len = chat_render_assistant(family, &m, 0, text, sizeof text, err, sizeof err);
        CU_ASSERT_FATAL(len < sizeof text);
        struct chat_tool_call back[2];
        char names[2][64], args[2][256];
        size_t s, e = 0;
        int k = 0;
        while (k < 2 && chat_next_tool_call(family, text, len, e, &s, &e)) {
            CU_ASSERT_EQUAL(
                chat_parse_tool_call(family, text + s, e - s, names[k], 64, args[k], 256, err, sizeof err),
                0);
            back[k] = (struct chat_tool_call){names[k], args[k]};
            k++;
        }
        CU_ASSERT_EQUAL_FATAL(k, 2);
        CU_ASSERT_STRING_EQUAL(names[0], "get_weather");
        CU_ASSERT_STRING_EQUAL(args[0], "{\"2\":{\"1\":null},\"city\":\"Zürich\",\"days\":[1,2,3]}");
        CU_ASSERT_STRING_EQUAL(names[1], "search");
        m.tool_calls = back;
        char text2[1024];
        CU_ASSERT_EQUAL(chat_render_assistant(family, &m, 0, text2, sizeof text2, err, sizeof err), len);
        CU_ASSERT_STRING_EQUAL(text2, text);
    }
}

/* ---- bad input, sizes, names ---- */

static void test_bad_input(void)
{
    struct chat_tool_call tc = {"f", "{}"};
    struct chat_message m[2] = {{.role = "user", .content = "hi"},
                                {.role = "assistant", .content = "", .tool_calls = &tc, .n_tool_calls = 1}};
    static const char *const bad_tools[] = { "{}", "not json", "[1]", "[{\"a\": 1}, \"x\"]",
                                             "[",  "[] x",     "null" };
    static const int families[] = {CHAT_QWEN3, CHAT_LLAMA3};
    char out[256], err[256];
    for (int fi = 0; fi < 2; fi++) {
        int f = families[fi];
        for (size_t i = 0; i < sizeof bad_tools / sizeof bad_tools[0]; i++) {
            err[0] = '\0';
            CU_ASSERT_EQUAL(chat_render(f, m, 2, bad_tools[i], 1, 1, out, sizeof out, err, sizeof err),
                            (size_t)-1);
            CU_ASSERT(strstr(err, "tools_json") != NULL);
        }
        CU_ASSERT(chat_render(f, m, 2, "[]", 1, 1, out, sizeof out, err, sizeof err) != (size_t)-1);
        static const char *const bad_args[] = {"[1]", "{bad", "", "\"s\"", "{} {}", "1"};
        for (size_t i = 0; i < sizeof bad_args / sizeof bad_args[0]; i++) {
            tc.arguments_json = bad_args[i];
            err[0] = '\0';
            CU_ASSERT_EQUAL(chat_render(f, m, 2, NULL, 1, 1, out, sizeof out, err, sizeof err), (size_t)-1);
            CU_ASSERT(strstr(err, "message 1, tool call 0 (f): arguments_json") != NULL);
        }
        tc.arguments_json = NULL;
        CU_ASSERT_EQUAL(chat_render(f, m, 2, NULL, 1, 1, out, sizeof out, err, sizeof err), (size_t)-1);
        tc.arguments_json = "{}";
        tc.name = NULL;
        CU_ASSERT_EQUAL(chat_render(f, m, 2, NULL, 1, 1, out, sizeof out, err, sizeof err), (size_t)-1);
        tc.name = "f";
        m[1].n_tool_calls = -1;
        CU_ASSERT_EQUAL(chat_render(f, m, 2, NULL, 1, 1, out, sizeof out, err, sizeof err), (size_t)-1);
        m[1].n_tool_calls = 1;
        m[0].role = "ipython";
        CU_ASSERT_EQUAL(chat_render(f, m, 2, NULL, 1, 1, out, sizeof out, err, sizeof err), (size_t)-1);
        CU_ASSERT(strstr(err, "ipython") != NULL);
        m[0].role = NULL;
        CU_ASSERT_EQUAL(chat_render(f, m, 2, NULL, 1, 1, out, sizeof out, err, sizeof err), (size_t)-1);
        m[0].role = "user";
        CU_ASSERT_EQUAL(chat_render(f, m, -1, NULL, 1, 1, out, sizeof out, err, sizeof err), (size_t)-1);
        CU_ASSERT_EQUAL(chat_render(f, NULL, 1, NULL, 1, 1, out, sizeof out, err, sizeof err), (size_t)-1);
        CU_ASSERT(chat_render(f, m, 2, NULL, 1, 1, out, sizeof out, NULL, 0) != (size_t)-1);
    }
    CU_ASSERT_EQUAL(chat_render(3, m, 2, NULL, 1, 1, out, sizeof out, err, sizeof err), (size_t)-1);
    CU_ASSERT_EQUAL(chat_render(0, m, 2, NULL, 1, 1, out, sizeof out, NULL, 0), (size_t)-1);
}

static void test_sizes(void)
{
    struct chat_message m = {.role = "user", .content = "hello"};
    static const char want[] = "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n";
    size_t n = strlen(want);
    CU_ASSERT_EQUAL(chat_render(CHAT_QWEN3, &m, 1, NULL, 1, 1, NULL, 0, NULL, 0), n);
    char out[128];
    memset(out, '#', sizeof out);
    CU_ASSERT_EQUAL(chat_render(CHAT_QWEN3, &m, 1, NULL, 1, 1, out, 10, NULL, 0), n);
    CU_ASSERT_EQUAL(strlen(out), 9);
    CU_ASSERT_EQUAL(memcmp(out, want, 9), 0);
    CU_ASSERT_EQUAL(out[10], '#');
    CU_ASSERT_EQUAL(chat_render(CHAT_QWEN3, &m, 1, NULL, 1, 1, out, n, NULL, 0), n); /* one short */
    CU_ASSERT_EQUAL(strlen(out), n - 1);
    CU_ASSERT_EQUAL(chat_render(CHAT_QWEN3, &m, 1, NULL, 1, 1, out, n + 1, NULL, 0), n);
    CU_ASSERT_STRING_EQUAL(out, want);
    out[0] = 'x';
    CU_ASSERT_EQUAL(chat_render(CHAT_QWEN3, &m, 0, NULL, 0, 1, out, sizeof out, NULL, 0), 0);
    CU_ASSERT_STRING_EQUAL(out, "");
}

static void test_family_names(void)
{
    static const struct {
        const char *name;
        int family;
    } t[] = {
        { "qwen3", CHAT_QWEN3 },
        { "qwen2", CHAT_QWEN3 },
        { "qwen3_moe", CHAT_QWEN3 },
        { "Qwen/Qwen3-8B", CHAT_QWEN3 },
        { "QWEN3", CHAT_QWEN3 },
        { "llama", CHAT_LLAMA3 },
        { "meta-llama/Meta-Llama-3-8B-Instruct", CHAT_LLAMA3 },
        { "Llama-3.2-1B", CHAT_LLAMA3 },
        { "mistral", -1 },
        { "", -1 },
        { "gpt2", -1 },
        { "org/qwen-like/llama", CHAT_LLAMA3 },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        CU_ASSERT_EQUAL(chat_family_from_name(t[i].name), t[i].family);
    CU_ASSERT_EQUAL(chat_family_from_name(NULL), -1);
    CU_ASSERT_STRING_EQUAL(chat_family_name(CHAT_QWEN3), "qwen3");
    CU_ASSERT_STRING_EQUAL(chat_family_name(CHAT_LLAMA3), "llama3");
    CU_ASSERT_PTR_NULL(chat_family_name(0));
}

int main(void)
{
    static const struct test_case golden[] = {
        {"qwen3: every conversation equals the template's rendering", test_golden_qwen3},
        {"llama3: every conversation equals the template's rendering", test_golden_llama3},
        {NULL, NULL},
    };
    static const struct test_case segments[] = {
        {"prompt + turns + tool segments == the whole conversation", test_segment_identity},
        {"segments and formats spelled out", test_segments_spelled},
        {NULL, NULL},
    };
    static const struct test_case calls[] = {
        {"good calls: spacing, nesting, unicode, key order, numbers", test_parse_good},
        {"bad calls refused with a reason", test_parse_bad},
        {"10 kB and oversized inputs", test_parse_long},
        {"random and mutated bytes: 0 or -1, stable when accepted", test_parse_fuzz},
        {"finding calls in a model's text", test_next_tool_call},
        {"render, find, parse, render again", test_call_round_trip},
        {NULL, NULL},
    };
    static const struct test_case api[] = {
        {"bad tools_json, arguments, roles, families", test_bad_input},
        {"snprintf-style sizes", test_sizes},
        {"family names", test_family_names},
        {NULL, NULL},
    };
    static const struct test_suite suites[] = {
        {"chat goldens", golden},
        {"chat segments", segments},
        {"chat tool calls", calls},
        {"chat api", api},
        {NULL, NULL},
    };
    return test_main(suites);
}
