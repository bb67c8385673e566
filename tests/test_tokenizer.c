/*
 * Tests of the byte-level tokenizer: exact round trips for arbitrary byte strings
 * (seeded random, NULs and bytes >= 0x80 included), special-token parsing (longest
 * match, near misses), decoding of specials and of out-of-range ids, and the
 * "write at most cap, return the need" contract, and tok_byte_vocab (the vocabulary
 * the environments see).
 */
#include "libra/rng.h"
#include "libra/format_tags.h"
#include "libra/tokenizer.h"
#include "testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void test_special_names(void)
{
    CU_ASSERT_EQUAL(TOK_VOCAB_SIZE, 269);
    CU_ASSERT_STRING_EQUAL(tok_special_name(TOK_BOS), "<|bos|>");
    CU_ASSERT_STRING_EQUAL(tok_special_name(TOK_EOS), "<|eos|>");
    CU_ASSERT_STRING_EQUAL(tok_special_name(TOK_PAD), "<|pad|>");
    CU_ASSERT_STRING_EQUAL(tok_special_name(TOK_SYSTEM), "<|system|>");
    CU_ASSERT_STRING_EQUAL(tok_special_name(TOK_USER), "<|user|>");
    CU_ASSERT_STRING_EQUAL(tok_special_name(TOK_ASSISTANT), "<|assistant|>");
    CU_ASSERT_STRING_EQUAL(tok_special_name(TOK_TOOL), "<|tool|>");
    CU_ASSERT_STRING_EQUAL(tok_special_name(TOK_TOOL_CALL), "<tool_call>");
    CU_ASSERT_STRING_EQUAL(tok_special_name(TOK_TOOL_CALL_END), "</tool_call>");
    CU_ASSERT_STRING_EQUAL(tok_special_name(TOK_TOOL_RESULT), "<tool_result>");
    CU_ASSERT_STRING_EQUAL(tok_special_name(TOK_TOOL_RESULT_END), "</tool_result>");
    CU_ASSERT_STRING_EQUAL(tok_special_name(TOK_ANSWER), "<answer>");
    CU_ASSERT_STRING_EQUAL(tok_special_name(TOK_ANSWER_END), "</answer>");
    CU_ASSERT_PTR_NULL(tok_special_name(0));
    CU_ASSERT_PTR_NULL(tok_special_name(255));
    CU_ASSERT_PTR_NULL(tok_special_name(-1));
    CU_ASSERT_PTR_NULL(tok_special_name(TOK_VOCAB_SIZE));
    /* Every spelling encodes to exactly its own id. */
    for (int32_t id = TOK_BOS; id < TOK_VOCAB_SIZE; id++) {
        const char *s = tok_special_name(id);
        int32_t out[32];
        CU_ASSERT_EQUAL(tok_encode(s, strlen(s), 1, out, 32), 1);
        CU_ASSERT_EQUAL(out[0], id);
        CU_ASSERT_EQUAL(tok_encode(s, strlen(s), 0, out, 32), strlen(s));
    }
}

/* Random bytes over the full range, with runs of NULs, high bytes and pieces of
 * special spellings so that parsing meets near misses too. */
static size_t random_text(struct rng *r, char *buf, size_t max)
{
    size_t len = (size_t)rng_below(r, max + 1), i = 0;
    while (i < len) {
        uint64_t kind = rng_below(r, 8);
        if (kind == 0) {
            const char *s = tok_special_name((int32_t)(TOK_BOS + rng_below(r, 13)));
            size_t n = strlen(s);
            size_t take = rng_below(r, 2) ? n : (size_t)rng_below(r, n + 1); /* whole or cut */
            for (size_t k = 0; k < take && i < len; k++) buf[i++] = s[k];
        } else if (kind == 1) {
            buf[i++] = '\0';
        } else if (kind == 2) {
            buf[i++] = '<';
        } else {
            buf[i++] = (char)(unsigned char)rng_below(r, 256);
        }
    }
    return len;
}

static void test_round_trip_random(void)
{
    enum { MAX = 400, N = 2000 };
    static char text[MAX], back[MAX];
    static int32_t ids[MAX];
    struct rng r;
    rng_init(&r, 12345, 0, 0, 0);
    int saw_nul = 0, saw_high = 0, saw_special = 0;
    for (int it = 0; it < N; it++) {
        size_t len = random_text(&r, text, MAX);
        for (size_t i = 0; i < len; i++) {
            saw_nul |= text[i] == '\0';
            saw_high |= (unsigned char)text[i] >= 0x80;
        }
        /* Plain: one id per byte, all < 256, exact round trip. */
        size_t n = tok_encode(text, len, 0, ids, MAX);
        CU_ASSERT_EQUAL_FATAL(n, len);
        for (size_t i = 0; i < n; i++) {
            CU_ASSERT_FATAL(ids[i] >= 0 && ids[i] < 256);
            CU_ASSERT_FATAL(ids[i] == (int32_t)(unsigned char)text[i]);
        }
        size_t m = tok_decode(ids, n, back, MAX);
        CU_ASSERT_EQUAL_FATAL(m, len);
        CU_ASSERT_FATAL(memcmp(back, text, len) == 0);
        /* With specials: fewer or as many ids, and decoding spells them back exactly. */
        n = tok_encode(text, len, 1, ids, MAX);
        CU_ASSERT_FATAL(n <= len);
        for (size_t i = 0; i < n; i++) {
            CU_ASSERT_FATAL(ids[i] >= 0 && ids[i] < TOK_VOCAB_SIZE);
            saw_special |= ids[i] >= TOK_BOS;
        }
        m = tok_decode(ids, n, back, MAX);
        CU_ASSERT_EQUAL_FATAL(m, len);
        CU_ASSERT_FATAL(memcmp(back, text, len) == 0);
    }
    CU_ASSERT(saw_nul && saw_high && saw_special); /* the generator covered the cases */
}

static void check_encode(const char *text, size_t len, const int32_t *want, size_t nwant)
{
    int32_t ids[128];
    size_t n = tok_encode(text, len, 1, ids, 128);
    CU_ASSERT_EQUAL(n, nwant);
    if (n == nwant) CU_ASSERT(memcmp(ids, want, n * sizeof *ids) == 0);
}

static void test_parse_specials(void)
{
    const char *t1 = "<|user|>hi</answer>";
    const int32_t w1[] = {TOK_USER, 'h', 'i', TOK_ANSWER_END};
    check_encode(t1, strlen(t1), w1, 4);

    /* Near misses stay bytes; a '<' before a spelling does not hide it. */
    const char *t2 = "<|use|><<answer><tool_call";
    int32_t w2[64];
    size_t k = 0;
    for (const char *p = "<|use|><"; *p; p++) w2[k++] = (unsigned char)*p;
    w2[k++] = TOK_ANSWER;
    for (const char *p = "<tool_call"; *p; p++) w2[k++] = (unsigned char)*p;
    check_encode(t2, strlen(t2), w2, k);

    /* Embedded NUL and high bytes around specials. */
    const char t3[] = {'\0', '<', '|', 'e', 'o', 's', '|', '>', (char)0xff, '\0'};
    const int32_t w3[] = {0, TOK_EOS, 255, 0};
    check_encode(t3, sizeof t3, w3, 4);

    /* Back to back, and the whole conversation shape. */
    const char *t4 = "<|assistant|><tool_call>{}</tool_call><tool_result>x</tool_result>";
    const int32_t w4[] = {TOK_ASSISTANT, TOK_TOOL_CALL, '{', '}', TOK_TOOL_CALL_END,
                          TOK_TOOL_RESULT, 'x', TOK_TOOL_RESULT_END};
    check_encode(t4, strlen(t4), w4, 8);

    /* A spelling cut by len is not matched. */
    const int32_t w5[] = {'<', '|', 'b', 'o', 's', '|'};
    check_encode("<|bos|>", 6, w5, 6);
}

static void test_decode_specials_and_invalid(void)
{
    const int32_t ids[] = {'a', TOK_TOOL_CALL, -1, TOK_VOCAB_SIZE, INT32_MAX, INT32_MIN, 0, 'z'};
    char out[128];
    size_t n = tok_decode(ids, 8, out, sizeof out);
    const char want[] = "a<tool_call>\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\0z";
    CU_ASSERT_EQUAL(n, sizeof want - 1);
    CU_ASSERT(memcmp(out, want, sizeof want - 1) == 0);
    CU_ASSERT_EQUAL(tok_decode(ids, 0, out, sizeof out), 0);
}

static void test_cap(void)
{
    const char *text = "ab<|eos|>cd";
    /* Sizing call: no buffer. */
    CU_ASSERT_EQUAL(tok_encode(text, strlen(text), 1, NULL, 0), 5);
    CU_ASSERT_EQUAL(tok_encode(text, strlen(text), 0, NULL, 0), strlen(text));
    int32_t ids[8];
    for (int i = 0; i < 8; i++) ids[i] = -7;
    CU_ASSERT_EQUAL(tok_encode(text, strlen(text), 1, ids, 3), 5);
    CU_ASSERT_EQUAL(ids[0], 'a');
    CU_ASSERT_EQUAL(ids[1], 'b');
    CU_ASSERT_EQUAL(ids[2], TOK_EOS);
    CU_ASSERT_EQUAL(ids[3], -7); /* untouched past cap */

    const int32_t dec[] = {'x', TOK_EOS, 300};
    CU_ASSERT_EQUAL(tok_decode(dec, 3, NULL, 0), 1 + 7 + 3);
    char out[16];
    memset(out, '#', sizeof out);
    CU_ASSERT_EQUAL(tok_decode(dec, 3, out, 4), 11);
    CU_ASSERT(memcmp(out, "x<|e", 4) == 0); /* a spelling cut at cap */
    CU_ASSERT_EQUAL(out[4], '#');
    memset(out, '#', sizeof out);
    CU_ASSERT_EQUAL(tok_decode(dec, 3, out, 9), 11);
    CU_ASSERT(memcmp(out, "x<|eos|>\xEF", 9) == 0);
    CU_ASSERT_EQUAL(out[9], '#');
}

/* The byte vocabulary: the TOK_* ids, plain encoding (specials never parsed), every
 * non-byte id special. */
static void test_byte_vocab(void)
{
    const struct vocab *v = tok_byte_vocab();
    CU_ASSERT_PTR_EQUAL(v, tok_byte_vocab()); /* one static object */
    CU_ASSERT_EQUAL(v->size, TOK_VOCAB_SIZE);
    CU_ASSERT_STRING_EQUAL(v->name, "libra");
    /* The format's ids are the TOK_* tags: the prompt, the turn ends, the framing. */
    int32_t p[8];
    CU_ASSERT_EQUAL(v->prompt(v->ctx, "ignored", NULL, "hi", 2, p, 8), 5);
    const int32_t prompt[] = {TOK_BOS, TOK_USER, 'h', 'i', TOK_ASSISTANT};
    CU_ASSERT_EQUAL(memcmp(p, prompt, sizeof prompt), 0);
    for (int32_t id = 0; id < TOK_VOCAB_SIZE; id++)
        CU_ASSERT_EQUAL(v->ends_turn(v->ctx, id),
                        id == TOK_TOOL_CALL_END || id == TOK_ANSWER_END || id == TOK_EOS);
    CU_ASSERT_EQUAL(v->tool_response(v->ctx, "7", 1, p, 8), 3);
    CU_ASSERT(p[0] == TOK_TOOL_RESULT && p[1] == '7' && p[2] == TOK_TOOL_RESULT_END);
    CU_ASSERT_EQUAL(v->write_call(v->ctx, NULL, "1+2", 3, p, 8), 5);
    CU_ASSERT(p[0] == TOK_TOOL_CALL && p[4] == TOK_TOOL_CALL_END);
    CU_ASSERT_EQUAL(v->turn_calls(v->ctx, p, 5), 1);
    CU_ASSERT_EQUAL(v->write_answer(v->ctx, "3", 1, p, 8), 3);
    CU_ASSERT(p[0] == TOK_ANSWER && p[1] == '3' && p[2] == TOK_ANSWER_END);
    CU_ASSERT_EQUAL(v->turn_calls(v->ctx, p, 3), 0);
    for (int32_t id = -1; id <= TOK_VOCAB_SIZE; id++)
        CU_ASSERT_EQUAL(v->is_special(v->ctx, id), id < 0 || id >= 256);
    static const char text[] = "<answer>\0\xff";
    int32_t ids[16];
    CU_ASSERT_EQUAL(v->encode(v->ctx, text, sizeof text - 1, ids, 16), sizeof text - 1);
    CU_ASSERT_EQUAL(ids[0], '<');
    CU_ASSERT_EQUAL(v->encode(v->ctx, text, sizeof text - 1, NULL, 0), sizeof text - 1);
    char back[16];
    CU_ASSERT_EQUAL(v->decode(v->ctx, ids, sizeof text - 1, back, sizeof back), sizeof text - 1);
    CU_ASSERT_EQUAL(memcmp(back, text, sizeof text - 1), 0);
    ids[0] = TOK_ANSWER;
    CU_ASSERT_EQUAL(v->decode(v->ctx, ids, 1, back, sizeof back), 8);
    CU_ASSERT_EQUAL(memcmp(back, "<answer>", 8), 0);
}

/* tag_format_init checks the tags: in range, special, the six parsed tags distinct
 * (bos/eos may be shared). */
static void test_tag_format_checks(void)
{
    const struct vocab *byte = tok_byte_vocab();
    const struct tag_format *bf = byte->ctx;
    struct tag_format f;
    struct vocab v;
    char err[256] = "";
    struct tag_ids t = bf->t;
    t.answer_end = TOK_VOCAB_SIZE;
    CU_ASSERT_EQUAL(tag_format_init(&f, &v, &bf->text, &t, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "answer_end = 269 is outside [0, 269)"));
    t = bf->t;
    t.bos = -1;
    CU_ASSERT_EQUAL(tag_format_init(&f, &v, &bf->text, &t, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "bos = -1 is outside"));
    t = bf->t;
    t.tool_call = 'x';
    CU_ASSERT_EQUAL(tag_format_init(&f, &v, &bf->text, &t, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "not a special token"));
    t = bf->t;
    t.answer = t.tool_call_end;
    CU_ASSERT_EQUAL(tag_format_init(&f, &v, &bf->text, &t, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "tool_call_end and answer are both id 264"));
    t = bf->t;
    t.eos = t.bos; /* shared bos/eos (as in some tokenizers) is fine */
    CU_ASSERT_EQUAL(tag_format_init(&f, &v, &bf->text, &t, err, sizeof err), 0);
    CU_ASSERT_PTR_EQUAL(v.ctx, &f);
    CU_ASSERT_EQUAL(v.size, TOK_VOCAB_SIZE);
    struct vocab none = *byte;
    none.decode = NULL;
    CU_ASSERT_EQUAL(tag_format_init(&f, &v, &none, &bf->t, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "encode, decode, is_special and encode_markup"));
}

int main(void)
{
    static const struct test_case cases[] = {
        {"special ids and spellings", test_special_names},
        {"random byte strings round trip (plain and with specials)", test_round_trip_random},
        {"special parsing: longest match, near misses, NULs", test_parse_specials},
        {"decode spells specials, U+FFFD for bad ids", test_decode_specials_and_invalid},
        {"write at most cap, return the need", test_cap},
        {"tok_byte_vocab: the tag format over bytes, non-bytes special", test_byte_vocab},
        {"tag_format_init: tags in range, special, distinct", test_tag_format_checks},
        {NULL, NULL},
    };
    static const struct test_suite suites[] = {
        {"tokenizer", cases},
        {NULL, NULL},
    };
    return test_main(suites);
}
