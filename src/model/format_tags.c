/*
 * The libra tag format (include/libra/format_tags.h): the conversation format of the
 * byte-level models, every tag one special id.
 *
 * Parsing rules (what the rollout and the reward read back):
 *  - a call is the text between the LAST <tool_call> of the turn and the
 *    </tool_call> that ends it, text ids only (a special inside, or an id outside the
 *    vocabulary, makes it malformed);
 *  - the answer is the first generated <answer> followed by generated text ids up to
 *    </answer>; a prompt or payload id inside, or a special, makes it malformed.
 */
#include "libra/format_tags.h"

#include <stdio.h>
#include <string.h>

static const struct tag_format *F(void *ctx) { return ctx; }

/* A text id: in the vocabulary and not special. */
static int is_text(const struct tag_format *f, int32_t id)
{
    return id >= 0 && id < f->text.size && !f->text.is_special(f->text.ctx, id);
}

static size_t tags_encode(void *ctx, const char *text, size_t len, int32_t *out, size_t cap)
{
    const struct tag_format *f = F(ctx);
    return f->text.encode(f->text.ctx, text, len, out, cap);
}

static size_t tags_decode(void *ctx, const int32_t *ids, size_t n, char *out, size_t cap)
{
    const struct tag_format *f = F(ctx);
    return f->text.decode(f->text.ctx, ids, n, out, cap);
}

static size_t tags_encode_markup(void *ctx, const char *text, size_t len, int32_t *out,
                                 size_t cap)
{
    const struct tag_format *f = F(ctx);
    return f->text.encode_markup(f->text.ctx, text, len, out, cap);
}

static int tags_ends_text(void *ctx, int32_t id) { return id == F(ctx)->t.eos; }

static int tags_is_special(void *ctx, int32_t id)
{
    const struct tag_format *f = F(ctx);
    return f->text.is_special(f->text.ctx, id);
}

/* open + the encoded text + close, written at most cap; returns the ids needed. */
static size_t tagged(const struct tag_format *f, int32_t open, const char *text, size_t len,
                     int32_t close, int32_t *out, size_t cap)
{
    size_t room = cap > 1 ? cap - 1 : 0;
    size_t k = f->text.encode(f->text.ctx, text, len, room ? out + 1 : NULL, room);
    if (cap > 0) out[0] = open;
    if (k + 2 <= cap) out[k + 1] = close;
    return k + 2;
}

static size_t tags_prompt(void *ctx, const char *system, const struct vocab_tool *tool,
                          const char *question, size_t len, int32_t *out, size_t cap)
{
    (void)system; /* the byte-level models were trained without a system turn */
    (void)tool;
    const struct tag_format *f = F(ctx);
    size_t room = cap > 2 ? cap - 2 : 0;
    size_t text = f->text.encode(f->text.ctx, question, len, room ? out + 2 : NULL, room);
    size_t need = text + 3; /* <|bos|> <|user|> text <|assistant|> */
    if (cap > 0) out[0] = f->t.bos;
    if (cap > 1) out[1] = f->t.user;
    if (cap >= need) out[need - 1] = f->t.assistant;
    return need;
}

static int tags_ends_turn(void *ctx, int32_t id)
{
    const struct tag_format *f = F(ctx);
    return id == f->t.tool_call_end || id == f->t.answer_end || id == f->t.eos;
}

static int tags_turn_calls(void *ctx, const int32_t *turn, int n)
{
    return n > 0 && turn[n - 1] == F(ctx)->t.tool_call_end;
}

static int tags_call_text(void *ctx, const struct vocab_tool *tool, const int32_t *ids, int n,
                          char *out, size_t cap, size_t *len)
{
    (void)tool; /* the call is the argument itself */
    const struct tag_format *f = F(ctx);
    if (cap > 0) out[0] = '\0';
    if (len) *len = 0;
    int start = -1;
    for (int i = n - 1; i >= 0; i--)
        if (ids[i] == f->t.tool_call) {
            start = i + 1;
            break;
        }
    if (start < 0 || cap == 0) return -1;
    int end = start;
    while (end < n && is_text(f, ids[end])) end++;
    if (end >= n || ids[end] != f->t.tool_call_end) return -1; /* unterminated or special */
    size_t nb = f->text.decode(f->text.ctx, ids + start, (size_t)(end - start), out, cap - 1);
    if (nb + 1 > cap) {
        out[0] = '\0'; /* decode may have written a prefix */
        return -1;
    }
    out[nb] = '\0';
    if (len) *len = nb;
    return 0;
}

static size_t tags_tool_response(void *ctx, const char *text, size_t len, int32_t *out,
                                 size_t cap)
{
    const struct tag_format *f = F(ctx);
    if (cap < 2) return 0;
    size_t room = cap - 2;
    size_t k = f->text.encode(f->text.ctx, text, len, out + 1, room);
    if (k > room) k = room; /* cut: the leading ids, the closing tag still fits */
    out[0] = f->t.tool_result;
    out[k + 1] = f->t.tool_result_end;
    return k + 2;
}

static int tags_answer(void *ctx, const int32_t *ids, const uint8_t *mask, int n, char *out,
                       size_t cap)
{
    const struct tag_format *f = F(ctx);
    int i = 0;
    while (i < n && !(mask[i] && ids[i] == f->t.answer)) i++;
    if (i >= n) return 0;
    int start = i + 1;
    for (i = start;; i++) {
        if (i >= n || !mask[i]) return 0; /* unterminated, or not model text */
        if (ids[i] == f->t.answer_end) break;
        if (!is_text(f, ids[i])) return 0;
    }
    size_t len = f->text.decode(f->text.ctx, ids + start, (size_t)(i - start), out, cap - 1);
    if (len + 1 > cap) return 0;
    out[len] = '\0';
    return 1;
}

static size_t tags_write_call(void *ctx, const struct vocab_tool *tool, const char *text,
                              size_t len, int32_t *out, size_t cap)
{
    (void)tool;
    const struct tag_format *f = F(ctx);
    return tagged(f, f->t.tool_call, text, len, f->t.tool_call_end, out, cap);
}

static size_t tags_write_answer(void *ctx, const char *text, size_t len, int32_t *out,
                                size_t cap)
{
    const struct tag_format *f = F(ctx);
    return tagged(f, f->t.answer, text, len, f->t.answer_end, out, cap);
}

const struct vocab tag_format_ops = {
    .name = "libra",
    .encode = tags_encode,
    .decode = tags_decode,
    .is_special = tags_is_special,
    .encode_markup = tags_encode_markup,
    .ends_text = tags_ends_text,
    .prompt = tags_prompt,
    .ends_turn = tags_ends_turn,
    .turn_calls = tags_turn_calls,
    .call_text = tags_call_text,
    .tool_response = tags_tool_response,
    .answer = tags_answer,
    .write_call = tags_write_call,
    .write_answer = tags_write_answer,
};

int tag_format_init(struct tag_format *f, struct vocab *v, const struct vocab *base,
                    const struct tag_ids *t, char *err, size_t errlen)
{
    if (!base || base->size <= 0 || !base->encode || !base->decode || !base->is_special ||
        !base->encode_markup) {
        snprintf(err, errlen, "tag format: the text encoding needs a positive size and "
                              "encode, decode, is_special and encode_markup");
        return -1;
    }
    const struct {
        const char *name;
        int32_t id;
    } ids[] = {
        {"tool_call", t->tool_call},     {"tool_call_end", t->tool_call_end},
        {"tool_result", t->tool_result}, {"tool_result_end", t->tool_result_end},
        {"answer", t->answer},           {"answer_end", t->answer_end},
        {"bos", t->bos},                 {"eos", t->eos},
        {"user", t->user},               {"assistant", t->assistant},
    };
    enum { N_TAGS = 6 }; /* the first six: the ones the parsers tell apart */
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        if (ids[i].id < 0 || ids[i].id >= base->size) {
            snprintf(err, errlen, "tag format: %s = %d is outside [0, %d): the "
                                  "tokenizer's vocabulary is inconsistent",
                     ids[i].name, (int)ids[i].id, (int)base->size);
            return -1;
        }
        if (!base->is_special(base->ctx, ids[i].id)) {
            snprintf(err, errlen, "tag format: %s = %d is not a special token: text could "
                                  "encode to it", ids[i].name, (int)ids[i].id);
            return -1;
        }
        for (size_t j = 0; i < N_TAGS && j < i; j++)
            if (ids[j].id == ids[i].id) {
                snprintf(err, errlen, "tag format: %s and %s are both id %d: the tags must "
                                      "be distinct tokens", ids[j].name, ids[i].name,
                         (int)ids[i].id);
                return -1;
            }
    }
    f->t = *t;
    f->text = *base;
    *v = tag_format_ops;
    v->size = base->size;
    v->ctx = f;
    return 0;
}
