/*
 * Chat formats of Hugging Face models as a struct vocab (include/libra/format_chat.h).
 *
 * Rendered text becomes ids as Hugging Face tokenizes it: split at added tokens, each
 * text chunk encoded whole. Template text is trusted (encode_markup: added tokens
 * matched); a tool result is not: it is encoded with BPE_ADDED_NONE together with the
 * template's text around it up to the nearest added tokens, which is the chunk the
 * Hugging Face tokenizer would see. Decisions beyond the header:
 *  - a turn's text is its generated ids before the id that ended it, decoded;
 *  - call_text runs the FIRST call of the turn (models write one call per turn for
 *    these environments; a second one is ignored, not an error);
 *  - a number given for the tool's string parameter is accepted as its JSON text
 *    ({"expression": 12} -> "12"); any other type is malformed;
 *  - Llama 3 results are trimmed, as its template trims every message's content.
 */
#include "libra/format_chat.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/bpe.h"
#include "libra/chat.h"
#include "libra/log.h"

#define CALL_TEXT_MAX 4096 /* bytes of a call's re-serialised arguments at most */

struct chat_vocab {
    struct vocab v; /* first: v.ctx points here */
    struct bpe *bpe;
    int family;
    int thinking;
    int32_t turn_end; /* <|im_end|> / <|eot_id|> */
    int32_t text_end; /* <|endoftext|> / <|end_of_text|>; -1 if the tokenizer lacks it */
};

static const struct chat_vocab *CV(void *ctx) { return ctx; }

static size_t cv_encode(void *ctx, const char *text, size_t len, int32_t *out, size_t cap)
{
    return bpe_encode(CV(ctx)->bpe, text, len, BPE_ADDED_NONE, out, cap);
}

static size_t cv_encode_markup(void *ctx, const char *text, size_t len, int32_t *out,
                               size_t cap)
{
    return bpe_encode(CV(ctx)->bpe, text, len, BPE_ADDED_ALL, out, cap);
}

static size_t cv_decode(void *ctx, const int32_t *ids, size_t n, char *out, size_t cap)
{
    return bpe_decode(CV(ctx)->bpe, ids, n, out, cap);
}

static int cv_is_special(void *ctx, int32_t id)
{
    const struct chat_vocab *c = CV(ctx);
    return id < 0 || id >= c->v.size || bpe_is_added(c->bpe, id);
}

static int cv_ends_turn(void *ctx, int32_t id)
{
    const struct chat_vocab *c = CV(ctx);
    return id == c->turn_end || (c->text_end >= 0 && id == c->text_end);
}

/* ---- ids of rendered text ---- */

/* An id buffer written at most cap, counting what is needed. */
struct idbuf {
    int32_t *out;
    size_t cap, n;
};

static void put_markup(const struct chat_vocab *c, struct idbuf *b, const char *text, size_t len)
{
    size_t room = b->n < b->cap ? b->cap - b->n : 0;
    b->n += bpe_encode(c->bpe, text, len, BPE_ADDED_ALL, room ? b->out + b->n : NULL, room);
}

/* Where the text chunk around [at, at) ends: the end of the last added token in
 * text[0..at) (dir < 0) or the start of the first one in text[at..len) (dir > 0). */
static size_t chunk_edge(const struct chat_vocab *c, const char *text, size_t len, size_t at,
                         int dir)
{
    size_t best = dir < 0 ? 0 : len;
    for (int i = 0; i < bpe_n_added(c->bpe); i++) {
        const char *a = bpe_added_content(c->bpe, i);
        size_t al = strlen(a);
        if (al == 0) continue;
        if (dir < 0) {
            for (size_t p = 0; p + al <= at; p++)
                if (memcmp(text + p, a, al) == 0 && p + al > best) best = p + al;
        } else {
            for (size_t p = at; p + al <= len && p < best; p++)
                if (memcmp(text + p, a, al) == 0) {
                    best = p;
                    break;
                }
        }
    }
    return best;
}

/* A rendered turn text whose bytes [hole, hole + hole_len) are untrusted: the template
 * text around it as markup, the chunk holding the hole as plain text. With cut, the
 * chunk's ids are cut so that the whole fits b->cap (the framing kept). */
static void put_with_hole(const struct chat_vocab *c, struct idbuf *b, const char *text,
                          size_t len, size_t hole, size_t hole_len, int cut)
{
    size_t lo = chunk_edge(c, text, len, hole, -1);
    size_t hi = chunk_edge(c, text, len, hole + hole_len, +1);
    size_t pre = bpe_encode(c->bpe, text, lo, BPE_ADDED_ALL, NULL, 0);
    size_t mid = bpe_encode(c->bpe, text + lo, hi - lo, BPE_ADDED_NONE, NULL, 0);
    size_t post = bpe_encode(c->bpe, text + hi, len - hi, BPE_ADDED_ALL, NULL, 0);
    if (cut && b->n + pre + mid + post > b->cap) {
        size_t frame = b->n + pre + post;
        if (frame > b->cap) { /* not even the framing fits: write nothing */
            b->n = b->cap + 1;
            return;
        }
        int32_t *tmp = xmalloc((mid + 1) * sizeof *tmp);
        bpe_encode(c->bpe, text + lo, hi - lo, BPE_ADDED_NONE, tmp, mid);
        put_markup(c, b, text, lo);
        size_t keep = b->cap - frame;
        memcpy(b->out + b->n, tmp, keep * sizeof *tmp);
        b->n += keep;
        free(tmp);
        put_markup(c, b, text + hi, len - hi);
        return;
    }
    put_markup(c, b, text, lo);
    size_t room = b->n < b->cap ? b->cap - b->n : 0;
    b->n += bpe_encode(c->bpe, text + lo, hi - lo, BPE_ADDED_NONE, room ? b->out + b->n : NULL,
                       room);
    put_markup(c, b, text + hi, len - hi);
}

/* The tool as the chat templates want it: a JSON array with one function schema. */
static char *tools_json(const struct vocab_tool *t)
{
    json_t *props = json_object(), *param = json_object();
    json_object_set_new(param, "type", json_string("string"));
    json_object_set_new(param, "description", json_string(t->param_description));
    json_object_set_new(props, t->param, param);
    json_t *params = json_pack("{s:s, s:o, s:[s]}", "type", "object", "properties", props,
                               "required", t->param);
    json_t *fn = json_pack("{s:s, s:s, s:o}", "name", t->name, "description", t->description,
                           "parameters", params);
    json_t *arr = json_pack("[{s:s, s:o}]", "type", "function", "function", fn);
    if (!arr) FATAL("format_chat: building the tool schema of %s failed", t->name);
    char *s = json_dumps(arr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(arr);
    if (!s) FATAL("format_chat: serialising the tool schema of %s failed", t->name);
    return s;
}

struct render_args {
    const struct chat_vocab *c;
    const struct chat_message *m;
    int n;
    const char *tools;
    int add_generation_prompt;
    const char *const *results;
    int kind; /* 0 conversation, 1 tool results, 2 assistant turn */
};

static char *render_into(void *arg, size_t cap)
{
    const struct render_args *a = arg;
    char *out = xmalloc(cap);
    char err[256];
    size_t n;
    if (a->kind == 0)
        n = chat_render(a->c->family, a->m, a->n, a->tools, a->add_generation_prompt,
                        a->c->thinking, out, cap, err, sizeof err);
    else if (a->kind == 1)
        n = chat_render_tool_results(a->c->family, a->results, a->n, a->c->thinking, out, cap,
                                     err, sizeof err);
    else
        n = chat_render_assistant(a->c->family, a->m, 0, out, cap, err, sizeof err);
    if (n == (size_t)-1 || n + 1 != cap) FATAL("format_chat: rendering failed: %s", err);
    return out;
}

/* Renders per a (the size first, then the text); FATAL on a rendering error: every
 * input here is built by libra, so an error is a bug. */
static char *render(struct render_args *a)
{
    char err[256] = "";
    size_t need;
    if (a->kind == 0)
        need = chat_render(a->c->family, a->m, a->n, a->tools, a->add_generation_prompt,
                           a->c->thinking, NULL, 0, err, sizeof err);
    else if (a->kind == 1)
        need = chat_render_tool_results(a->c->family, a->results, a->n, a->c->thinking, NULL, 0,
                                        err, sizeof err);
    else
        need = chat_render_assistant(a->c->family, a->m, 0, NULL, 0, err, sizeof err);
    if (need == (size_t)-1) FATAL("format_chat: rendering failed: %s", err);
    return render_into(a, need + 1);
}

/* ---- the format ---- */

static size_t cv_prompt(void *ctx, const char *system, const struct vocab_tool *tool,
                        const char *question, size_t len, int32_t *out, size_t cap)
{
    const struct chat_vocab *c = CV(ctx);
    char *q = xmalloc(len + 1);
    memcpy(q, question, len);
    q[len] = '\0';
    struct chat_message m[2] = {{.role = "system", .content = system}, {.role = "user", .content = q}};
    int first = system ? 0 : 1;
    char *tools = tool ? tools_json(tool) : NULL;
    struct render_args a = {c, m + first, 2 - first, tools, 1, NULL, 0};
    char *text = render(&a);
    struct idbuf b = {out, cap, 0};
    put_markup(c, &b, text, strlen(text));
    free(text);
    free(tools);
    free(q);
    return b.n;
}

/* The turn's text (the ids before the one that ended it), a fresh NUL-terminated
 * string; its length in *len. */
static char *turn_text(const struct chat_vocab *c, const int32_t *turn, int n, size_t *len)
{
    if (n > 0 && cv_ends_turn((void *)c, turn[n - 1])) n--;
    size_t k = n > 0 ? (size_t)n : 0;
    size_t need = bpe_decode(c->bpe, turn, k, NULL, 0);
    char *text = xmalloc(need + 1);
    bpe_decode(c->bpe, turn, k, text, need);
    text[need] = '\0';
    *len = need;
    return text;
}

static int cv_turn_calls(void *ctx, const int32_t *turn, int n)
{
    const struct chat_vocab *c = CV(ctx);
    size_t len, s, e;
    char *text = turn_text(c, turn, n, &len);
    int calls = chat_next_tool_call(c->family, text, len, 0, &s, &e);
    free(text);
    return calls;
}

/* The string (or number) value of param in the arguments object text args. */
static int argument_of(const char *args, const char *param, char *out, size_t cap, size_t *len)
{
    json_error_t je;
    json_t *o = json_loads(args, 0, &je);
    int rc = -1;
    json_t *v = o ? json_object_get(o, param) : NULL;
    const char *s = NULL;
    size_t n = 0;
    char *num = NULL;
    if (json_is_string(v)) {
        s = json_string_value(v);
        n = json_string_length(v);
    } else if (json_is_number(v)) {
        num = json_dumps(v, JSON_ENCODE_ANY);
        s = num;
        n = num ? strlen(num) : 0;
    }
    if (s && n + 1 <= cap) {
        memcpy(out, s, n);
        out[n] = '\0';
        if (len) *len = n;
        rc = 0;
    }
    free(num);
    json_decref(o);
    return rc;
}

static int cv_call_text(void *ctx, const struct vocab_tool *tool, const int32_t *turn, int n,
                        char *out, size_t cap, size_t *len)
{
    const struct chat_vocab *c = CV(ctx);
    if (cap > 0) out[0] = '\0';
    if (len) *len = 0;
    if (cap == 0) return -1;
    size_t tl, s, e;
    char *text = turn_text(c, turn, n, &tl), *name = xmalloc(256), *args = xmalloc(CALL_TEXT_MAX);
    int rc = -1;
    char err[256];
    if (chat_next_tool_call(c->family, text, tl, 0, &s, &e) &&
        chat_parse_tool_call(c->family, text + s, e - s, name, 256, args, CALL_TEXT_MAX, err,
                             sizeof err) == 0 &&
        strcmp(name, tool->name) == 0)
        rc = argument_of(args, tool->param, out, cap, len);
    free(text);
    free(name);
    free(args);
    return rc;
}

static size_t cv_tool_response(void *ctx, const char *text, size_t len, int32_t *out,
                               size_t cap)
{
    const struct chat_vocab *c = CV(ctx);
    if (c->family == CHAT_LLAMA3) { /* the template trims every content */
        while (len > 0 && strchr(" \t\n\r\v\f", text[0])) text++, len--;
        while (len > 0 && strchr(" \t\n\r\v\f", text[len - 1])) len--;
    }
    /* Render around a sentinel, then put the result in its place as plain text. */
    static const char sentinel[] = "\x01libra-result\x01";
    const char *results[1] = {sentinel};
    struct render_args a = {c, NULL, 1, NULL, 0, results, 1};
    char *frame = render(&a);
    char *at = strstr(frame, sentinel);
    if (!at) FATAL("format_chat: the tool-response template lost its result");
    size_t pre = (size_t)(at - frame), sl = sizeof sentinel - 1, fl = strlen(frame);
    char *full = xmalloc(fl - sl + len + 1);
    memcpy(full, frame, pre);
    memcpy(full + pre, text, len);
    memcpy(full + pre + len, at + sl, fl - pre - sl);
    size_t total = fl - sl + len;
    full[total] = '\0';
    struct idbuf b = {out, cap, 0};
    put_with_hole(c, &b, full, total, pre, len, 1);
    free(full);
    free(frame);
    return b.n <= cap ? b.n : 0;
}

/* The answer: "<answer>" ... "</answer>" within one run of generated ids. */
static int cv_answer(void *ctx, const int32_t *ids, const uint8_t *mask, int n, char *out,
                     size_t cap)
{
    const struct chat_vocab *c = CV(ctx);
    static const char open[] = "<answer>", close[] = "</answer>";
    for (int i = 0; i < n;) {
        if (!mask[i]) {
            i++;
            continue;
        }
        int j = i;
        while (j < n && mask[j]) j++;
        size_t need = bpe_decode(c->bpe, ids + i, (size_t)(j - i), NULL, 0);
        char *text = xmalloc(need + 1);
        bpe_decode(c->bpe, ids + i, (size_t)(j - i), text, need);
        text[need] = '\0';
        char *a = strstr(text, open);
        char *b = a ? strstr(a + sizeof open - 1, close) : NULL;
        if (a) {
            int ok = 0;
            if (b) {
                size_t len = (size_t)(b - (a + sizeof open - 1));
                if (len + 1 <= cap && !memchr(a, '\0', len)) {
                    memcpy(out, a + sizeof open - 1, len);
                    out[len] = '\0';
                    ok = 1;
                }
            }
            free(text);
            return ok; /* the first answer counts, well-formed or not */
        }
        free(text);
        i = j;
    }
    return 0;
}

/* An assistant turn with content and optional call, then the turn's end, as ids. */
static size_t assistant_turn(const struct chat_vocab *c, const char *content,
                             const struct chat_tool_call *call, int32_t *out, size_t cap)
{
    struct chat_message m = {.role = "assistant", .content = content, .tool_calls = call,
                             .n_tool_calls = call ? 1 : 0};
    struct render_args a = {c, &m, 1, NULL, 0, NULL, 2};
    char *text = render(&a);
    const char *end = chat_format_of(c->family)->turn_end;
    size_t tl = strlen(text), el = strlen(end);
    char *full = xmalloc(tl + el + 1);
    memcpy(full, text, tl);
    memcpy(full + tl, end, el + 1);
    struct idbuf b = {out, cap, 0};
    put_markup(c, &b, full, tl + el);
    free(full);
    free(text);
    return b.n;
}

static size_t cv_write_call(void *ctx, const struct vocab_tool *tool, const char *text,
                            size_t len, int32_t *out, size_t cap)
{
    const struct chat_vocab *c = CV(ctx);
    json_t *o = json_object();
    json_object_set_new(o, tool->param, json_stringn(text, len));
    char *args = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!args) FATAL("format_chat: a demonstration's call is not valid UTF-8");
    struct chat_tool_call call = {tool->name, args};
    size_t n = assistant_turn(c, "", &call, out, cap);
    free(args);
    return n;
}

static size_t cv_write_answer(void *ctx, const char *text, size_t len, int32_t *out, size_t cap)
{
    char *content = xmalloc(len + 32);
    snprintf(content, len + 32, "<answer>%.*s</answer>", (int)len, text);
    size_t n = assistant_turn(CV(ctx), content, NULL, out, cap);
    free(content);
    return n;
}

struct vocab *format_chat_open(const char *tokenizer_path, int family, int thinking, char *err,
                               size_t errlen)
{
    const struct chat_format *f = chat_format_of(family);
    if (!f) {
        snprintf(err, errlen, "chat format: unknown family %d", family);
        return NULL;
    }
    struct bpe *bpe = bpe_load(tokenizer_path, err, errlen);
    if (!bpe) return NULL;
    struct chat_vocab *c = xcalloc(1, sizeof *c);
    c->bpe = bpe;
    c->family = family;
    c->thinking = thinking;
    c->turn_end = bpe_token_id(bpe, f->turn_end);
    c->text_end = bpe_token_id(bpe, family == CHAT_QWEN3 ? "<|endoftext|>" : "<|end_of_text|>");
    if (c->turn_end < 0 || !bpe_is_added(bpe, c->turn_end)) {
        snprintf(err, errlen, "%s: the tokenizer has no added token \"%s\", which ends a turn "
                 "in the %s chat format (is model.chat_format right for this model?)",
                 tokenizer_path, f->turn_end, chat_family_name(family));
        format_chat_close(&c->v);
        return NULL;
    }
    c->v = (struct vocab){
        .size = bpe_vocab_size(bpe),
        .name = chat_family_name(family),
        .ctx = c,
        .encode = cv_encode,
        .decode = cv_decode,
        .is_special = cv_is_special,
        .encode_markup = cv_encode_markup,
        .ends_text = cv_ends_turn,
        .prompt = cv_prompt,
        .ends_turn = cv_ends_turn,
        .turn_calls = cv_turn_calls,
        .call_text = cv_call_text,
        .tool_response = cv_tool_response,
        .answer = cv_answer,
        .write_call = cv_write_call,
        .write_answer = cv_write_answer,
    };
    return &c->v;
}

void format_chat_close(struct vocab *v)
{
    if (!v) return;
    struct chat_vocab *c = (struct chat_vocab *)v;
    bpe_free(c->bpe);
    free(c);
}
