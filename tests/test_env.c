/*
 * Tests of the environment interface (src/env/env.c, src/env/jsonl.c): the prompt and
 * tool-payload token formats (truncation keeps the closing tag), tool-call extraction
 * (normal, none, unterminated, specials inside, two calls, over-long), the reward
 * (correct, wrong with and without a format bonus, no answer, malformed answers, and
 * answers that appear only in the prompt or in a tool payload, which must not count),
 * answer normalisation, parameter checks, JSONL problem files (escapes, a table of bad
 * lines with their "file:line:" messages, random bytes and mutated lines that must
 * fail cleanly, the train/eval split sizes) and, end to end with the real calc and
 * search environments, problems, tools and expert demonstrations that score 1, and the
 * calc environment on a vocabulary that is not the byte-level one (shifted text ids,
 * other tag ids), which must give the same conversations in its own ids.
 */
#define _POSIX_C_SOURCE 200809L
#include "env/jsonl.h"
#include "libra/env.h"
#include "libra/format_tags.h"
#include "libra/rng.h"
#include "libra/tokenizer.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEQ_CAP 8192

/* A token sequence with its loss mask, built from text segments. */
struct seq {
    int32_t ids[SEQ_CAP];
    uint8_t mask[SEQ_CAP];
    int n;
};

/* Appends text (special spellings become their ids) with mask m. */
static void seq_add(struct seq *s, const char *text, uint8_t m)
{
    size_t k = tok_encode(text, strlen(text), 1, s->ids + s->n, (size_t)(SEQ_CAP - s->n));
    CU_ASSERT_FATAL(k <= (size_t)(SEQ_CAP - s->n));
    for (size_t j = 0; j < k; j++) s->mask[s->n + (int)j] = m;
    s->n += (int)k;
}

static void calc_params(struct env_params *p)
{
    memset(p, 0, sizeof *p);
    p->kind = ENV_KIND_CALC;
    p->seed = 1234;
    p->format_bonus = 0.1;
    p->calc_min_steps = 1;
    p->calc_max_steps = 3;
    p->calc_distractors = 1;
    p->search_entities = 40;
    p->search_top_k = 3;
    p->search_max_hops = 2;
    p->vocab = tok_byte_vocab();
}

/* A struct env with only the byte vocabulary set: the token formats read nothing else. */
static struct env byte_env(void)
{
    struct env e;
    memset(&e, 0, sizeof e);
    e.vocab = tok_byte_vocab();
    return e;
}

/* ---- scratch files ---- */

static const char *scratch(void)
{
    static char dir[1024];
    if (!dir[0]) {
        const char *d = test_scratch_dir("test_env");
        CU_ASSERT_FATAL(d != NULL);
        snprintf(dir, sizeof dir, "%s", d);
    }
    return dir;
}

/* Writes len bytes to <scratch>/name and returns the path (static, one at a time). */
static const char *write_bytes(const char *name, const void *data, size_t len)
{
    static char path[1200];
    snprintf(path, sizeof path, "%s/%s", scratch(), name);
    FILE *f = fopen(path, "wb");
    CU_ASSERT_FATAL(f != NULL);
    CU_ASSERT_FATAL(fwrite(data, 1, len, f) == len);
    CU_ASSERT_FATAL(fclose(f) == 0);
    return path;
}

static const char *write_text(const char *name, const char *text)
{
    return write_bytes(name, text, strlen(text));
}

/* env_init of a calc environment on a JSONL file; returns its rc, err filled. */
static int init_jsonl(struct env *e, const char *path, char *err, size_t errlen)
{
    struct env_params p;
    calc_params(&p);
    size_t len = strlen(path);
    CU_ASSERT_FATAL(len < sizeof p.prompts);
    memcpy(p.prompts, path, len + 1);
    return env_init(e, &p, err, errlen);
}

/* ======================================================================== */
/* Token formats                                                            */
/* ======================================================================== */

static void test_prompt_tokens(void)
{
    struct env e = byte_env();
    struct env_problem pr;
    memset(&pr, 0, sizeof pr);
    snprintf(pr.text, sizeof pr.text, "2+2? <answer>\xC3\xA9");
    const int need = 3 + (int)strlen(pr.text);
    int32_t *out = malloc((size_t)need * sizeof *out); /* exact size: sanitizers see overruns */
    CU_ASSERT_FATAL(out != NULL);
    CU_ASSERT_EQUAL(env_prompt_tokens(&e, &pr, NULL, 0), need);
    CU_ASSERT_EQUAL(env_prompt_tokens(&e, &pr, out, need), need);
    CU_ASSERT_EQUAL(out[0], TOK_BOS);
    CU_ASSERT_EQUAL(out[1], TOK_USER);
    for (int i = 0; i < need - 3; i++) /* plain bytes: no special is parsed from the text */
        CU_ASSERT_EQUAL(out[2 + i], (int32_t)(unsigned char)pr.text[i]);
    CU_ASSERT_EQUAL(out[need - 1], TOK_ASSISTANT);
    /* A short buffer is filled as far as it goes; the need is still returned. */
    for (int cap = 1; cap < need; cap++) {
        for (int i = 0; i < need; i++) out[i] = -7;
        CU_ASSERT_EQUAL(env_prompt_tokens(&e, &pr, out, cap), need);
        CU_ASSERT_EQUAL(out[0], TOK_BOS);
        if (cap < need) CU_ASSERT_NOT_EQUAL(out[cap - 1], TOK_ASSISTANT);
        for (int i = cap; i < need; i++) CU_ASSERT_EQUAL(out[i], -7);
    }
    free(out);
}

static void test_payload_tokens(void)
{
    struct env e = byte_env();
    struct env_tool_result r;
    memset(&r, 0, sizeof r);
    r.len = snprintf(r.text, sizeof r.text, "x=</tool_result>!");
    int32_t out[64];
    int n = env_payload_tokens(&e, &r, out, 64);
    CU_ASSERT_EQUAL(n, r.len + 2);
    CU_ASSERT_EQUAL(out[0], TOK_TOOL_RESULT);
    for (int i = 0; i < r.len; i++) CU_ASSERT_EQUAL(out[1 + i], (int32_t)r.text[i]);
    CU_ASSERT_EQUAL(out[n - 1], TOK_TOOL_RESULT_END);
    /* Truncation keeps both tags and the leading bytes. */
    for (int cap = 2; cap < r.len + 2; cap++) {
        int32_t *o = malloc((size_t)cap * sizeof *o);
        CU_ASSERT_FATAL(o != NULL);
        CU_ASSERT_EQUAL(env_payload_tokens(&e, &r, o, cap), cap);
        CU_ASSERT_EQUAL(o[0], TOK_TOOL_RESULT);
        CU_ASSERT_EQUAL(o[cap - 1], TOK_TOOL_RESULT_END);
        for (int i = 1; i < cap - 1; i++) CU_ASSERT_EQUAL(o[i], (int32_t)r.text[i - 1]);
        free(o);
    }
    out[0] = -7;
    CU_ASSERT_EQUAL(env_payload_tokens(&e, &r, out, 1), 0);
    CU_ASSERT_EQUAL(out[0], -7);
    CU_ASSERT_EQUAL(env_payload_tokens(&e, &r, out, 0), 0);
    /* Empty payload; a bad len is clamped to the text's size. */
    r.len = 0;
    CU_ASSERT_EQUAL(env_payload_tokens(&e, &r, out, 64), 2);
    CU_ASSERT_EQUAL(out[1], TOK_TOOL_RESULT_END);
    r.len = -5;
    CU_ASSERT_EQUAL(env_payload_tokens(&e, &r, out, 64), 2);
    static int32_t big[ENV_PAYLOAD_MAX + 100];
    memset(r.text, 'a', sizeof r.text);
    r.len = ENV_PAYLOAD_MAX + 50;
    CU_ASSERT_EQUAL(env_payload_tokens(&e, &r, big, ENV_PAYLOAD_MAX + 100), ENV_PAYLOAD_MAX + 2);
    CU_ASSERT_EQUAL(big[ENV_PAYLOAD_MAX + 1], TOK_TOOL_RESULT_END);
}

/* ======================================================================== */
/* Tool-call extraction                                                     */
/* ======================================================================== */

static int extract(const char *text, char *out, size_t cap)
{
    static struct seq s;
    struct env e = byte_env();
    s.n = 0;
    seq_add(&s, text, 1);
    size_t len = 12345;
    int rc = env_extract_call(&e, s.ids, s.n, out, cap, &len);
    CU_ASSERT_EQUAL(len, rc == 0 ? strlen(out) : 0); /* no NUL inside these calls */
    return rc;
}

static void test_extract_call(void)
{
    static const struct {
        const char *text, *call; /* call NULL: -1 expected */
    } cases[] = {
        {"Let me compute. <tool_call>2+3*4</tool_call>", "2+3*4"},
        {"<tool_call></tool_call>", ""},
        {"<tool_call> spaces kept </tool_call>", " spaces kept "},
        {"no call at all", NULL},
        {"", NULL},
        {"</tool_call> only a close", NULL},
        {"<tool_call>2+3", NULL},                              /* unterminated */
        {"<tool_call>2<answer>3</tool_call>", NULL},           /* another special inside */
        {"<tool_call>2<|eos|></tool_call>", NULL},
        {"<tool_call>a</tool_call> and <tool_call>b</tool_call>", "b"}, /* the last one */
        {"<tool_call>a</tool_call> and <tool_call>b", NULL},   /* the last is unterminated */
        {"<tool_call>a<tool_call>b</tool_call>", "b"},          /* the last opening tag */
        {"<tool_call>a</tool_call></tool_call>", "a"},
        {"<tool_call>x</tool_call><tool_result>5</tool_result>", "x"},
    };
    char out[ENV_CALL_MAX + 1];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = extract(cases[i].text, out, sizeof out);
        if (cases[i].call) {
            CU_ASSERT_EQUAL(rc, 0);
            CU_ASSERT_STRING_EQUAL(out, cases[i].call);
        } else {
            CU_ASSERT_EQUAL(rc, -1);
            CU_ASSERT_STRING_EQUAL(out, "");
        }
        if ((rc == 0) != (cases[i].call != NULL)) fprintf(stderr, "case: %s\n", cases[i].text);
    }
    /* Length limit: exactly ENV_CALL_MAX bytes pass, one more fails. */
    static char text[ENV_CALL_MAX + 64];
    for (int extra = 0; extra <= 1; extra++) {
        strcpy(text, "<tool_call>");
        size_t at = strlen(text);
        memset(text + at, '7', ENV_CALL_MAX + (size_t)extra);
        strcpy(text + at + ENV_CALL_MAX + extra, "</tool_call>");
        int rc = extract(text, out, sizeof out);
        CU_ASSERT_EQUAL(rc, extra ? -1 : 0);
        if (!extra) CU_ASSERT_EQUAL(strlen(out), ENV_CALL_MAX);
    }
    /* A buffer too small for the call and its NUL. */
    CU_ASSERT_EQUAL(extract("<tool_call>12345</tool_call>", out, 5), -1);
    CU_ASSERT_EQUAL(extract("<tool_call>12345</tool_call>", out, 6), 0);
    CU_ASSERT_STRING_EQUAL(out, "12345");
    /* Ids outside the vocabulary count as specials. */
    struct env e = byte_env();
    int32_t ids[] = {TOK_TOOL_CALL, '1', 9999, '2', TOK_TOOL_CALL_END};
    CU_ASSERT_EQUAL(env_extract_call(&e, ids, 5, out, sizeof out, NULL), -1);
    ids[2] = -1;
    CU_ASSERT_EQUAL(env_extract_call(&e, ids, 5, out, sizeof out, NULL), -1);
    ids[2] = 0xFF; /* a raw byte is fine */
    CU_ASSERT_EQUAL(env_extract_call(&e, ids, 5, out, sizeof out, NULL), 0);
    CU_ASSERT_EQUAL((unsigned char)out[1], 0xFF);
    /* A NUL byte is part of the call: *len counts it. */
    ids[2] = 0;
    size_t len = 0;
    CU_ASSERT_EQUAL(env_extract_call(&e, ids, 5, out, sizeof out, &len), 0);
    CU_ASSERT_EQUAL(len, 3);
    CU_ASSERT_EQUAL(memcmp(out, "1\0" "2", 4), 0);
}

/* ======================================================================== */
/* Reward                                                                   */
/* ======================================================================== */

/* Reward of: prompt (mask 0) + generated / payload segments; a segment starting with
 * '#' is a tool payload (mask 0), others are generated (mask 1). */
static double reward_of(const struct env *e, const struct env_problem *pr, const char *prompt,
                        const char *const *segs, int *correct)
{
    static struct seq s;
    s.n = 0;
    seq_add(&s, "<|bos|><|user|>", 0);
    seq_add(&s, prompt, 0);
    seq_add(&s, "<|assistant|>", 0);
    for (int i = 0; segs[i]; i++) {
        if (segs[i][0] == '#') seq_add(&s, segs[i] + 1, 0);
        else seq_add(&s, segs[i], 1);
    }
    *correct = -1;
    return env_reward(e, pr, s.ids, s.mask, s.n, correct);
}

static void test_reward_calc(void)
{
    struct env e;
    struct env_params p;
    char err[512];
    calc_params(&p);
    p.format_bonus = 0.1;
    CU_ASSERT_EQUAL_FATAL(env_init(&e, &p, err, sizeof err), 0);
    struct env_problem pr;
    memset(&pr, 0, sizeof pr);
    snprintf(pr.text, sizeof pr.text, "What is 40 + 2?");
    snprintf(pr.answer, sizeof pr.answer, "42");
    static const struct {
        const char *prompt;
        const char *segs[6];
        double reward;
        int correct;
    } cases[] = {
        {"q", {"<answer>42</answer>", NULL}, 1.0, 1},
        {"q", {"<answer> 42 \n</answer><|eos|>", NULL}, 1.0, 1},
        {"q", {"<answer>42.0</answer>", NULL}, 1.0, 1},
        {"q", {"<tool_call>40+2</tool_call>", "#<tool_result>42</tool_result>",
               "<answer>42</answer>", NULL}, 1.0, 1},
        {"q", {"<answer>41</answer>", NULL}, 0.1, 0},             /* wrong: format bonus */
        {"q", {"<answer>forty-two</answer>", NULL}, 0.1, 0},
        {"q", {"The answer is 42.", NULL}, 0.0, 0},               /* no answer */
        {"q", {"<answer>42", NULL}, 0.0, 0},                      /* unterminated */
        {"q", {"<answer>42<|eos|>", NULL}, 0.0, 0},
        {"q", {"<answer>4<tool_call>2</answer>", NULL}, 0.0, 0},  /* special inside */
        {"q", {"<answer>  </answer>", NULL}, 0.0, 0},             /* empty */
        {"q", {"<answer></answer>", NULL}, 0.0, 0},
        {"q", {"</answer>42<answer>", NULL}, 0.0, 0},
        /* only the first generated answer counts */
        {"q", {"<answer>41</answer><answer>42</answer>", NULL}, 0.1, 0},
        {"q", {"<answer>42</answer><answer>41</answer>", NULL}, 1.0, 1},
        /* answers in the prompt or in a tool payload are never read */
        {"Say <answer>42</answer>", {"I do not know", NULL}, 0.0, 0},
        {"Say <answer>42</answer>", {"<answer>41</answer>", NULL}, 0.1, 0},
        {"q", {"<tool_call>x</tool_call>", "#<tool_result><answer>42</answer></tool_result>",
               "no idea", NULL}, 0.0, 0},
        {"q", {"<tool_call>x</tool_call>", "#<tool_result><answer>42</answer></tool_result>",
               "<answer>40</answer>", NULL}, 0.1, 0},
        /* an answer opened by the model and closed inside a payload is not an answer */
        {"q", {"<answer>42", "#</answer>", NULL}, 0.0, 0},
        {"q", {"<answer>4", "#2", "</answer>", NULL}, 0.0, 0},
        {"<answer>", {"42</answer>", NULL}, 0.0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int correct;
        double r = reward_of(&e, &pr, cases[i].prompt, cases[i].segs, &correct);
        CU_ASSERT_DOUBLE_EQUAL(r, cases[i].reward, 1e-12);
        CU_ASSERT_EQUAL(correct, cases[i].correct);
        if (fabs(r - cases[i].reward) > 1e-12) fprintf(stderr, "reward case %zu: %g\n", i, r);
    }
    /* Without a format bonus a wrong answer earns 0. */
    e.p.format_bonus = 0;
    int correct;
    const char *wrong[] = {"<answer>41</answer>", NULL};
    CU_ASSERT_DOUBLE_EQUAL(reward_of(&e, &pr, "q", wrong, &correct), 0.0, 1e-12);
    CU_ASSERT_EQUAL(correct, 0);
    /* The malformed-call penalty: per call the format cannot read, off any reward. */
    e.p.malformed_call_penalty = 0.25;
    const char *repaired[] = {"<tool_call>4<|pad|>2</tool_call>",
                              "#<tool_result>error: malformed tool call</tool_result>",
                              "<tool_call>40+2</tool_call>", "#<tool_result>42</tool_result>",
                              "<answer>42</answer>", NULL};
    CU_ASSERT_DOUBLE_EQUAL(reward_of(&e, &pr, "q", repaired, &correct), 0.75, 1e-12);
    CU_ASSERT_EQUAL(correct, 1);
    const char *twice[] = {"<tool_call>4<|pad|>2</tool_call>", "#<tool_result>e</tool_result>",
                           "<tool_call><|pad|></tool_call>", "#<tool_result>e</tool_result>",
                           "<answer>41</answer>", NULL};
    CU_ASSERT_DOUBLE_EQUAL(reward_of(&e, &pr, "q", twice, &correct), -0.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(reward_of(&e, &pr, "q", wrong, &correct), 0.0, 1e-12);
    e.p.malformed_call_penalty = 0;
    CU_ASSERT_DOUBLE_EQUAL(reward_of(&e, &pr, "q", repaired, &correct), 1.0, 1e-12);
    /* An empty trajectory. */
    CU_ASSERT_DOUBLE_EQUAL(env_reward(&e, &pr, NULL, NULL, 0, &correct), 0.0, 1e-12);
    CU_ASSERT_EQUAL(correct, 0);
    CU_ASSERT_DOUBLE_EQUAL(env_reward(&e, &pr, NULL, NULL, -1, &correct), 0.0, 1e-12);
    CU_ASSERT_EQUAL(env_extract_call(&e, NULL, -1, NULL, 0, NULL), -1);
    env_free(&e);
}

static void test_reward_search_normalised(void)
{
    /* The reward reads only p.kind, p.format_bonus and the vocabulary: no knowledge
     * base needed. */
    struct env e = byte_env();
    e.p.kind = ENV_KIND_SEARCH;
    e.p.format_bonus = 0.25;
    struct env_problem pr;
    memset(&pr, 0, sizeof pr);
    snprintf(pr.answer, sizeof pr.answer, "Kestrel Bay");
    static const struct {
        const char *seg;
        double reward;
    } cases[] = {
        {"<answer>Kestrel Bay</answer>", 1.0},
        {"<answer>the kestrel-bay.</answer>", 1.0},
        {"<answer>  KESTREL   BAY!</answer>", 1.0},
        {"<answer>Kestrel</answer>", 0.25},
        {"<answer>KestrelBay</answer>", 0.25},
        {"<answer>the</answer>", 0.25}, /* well-formed, normalises to nothing: wrong */
        {"Kestrel Bay", 0.0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *segs[] = {cases[i].seg, NULL};
        int correct;
        double r = reward_of(&e, &pr, "Where?", segs, &correct);
        CU_ASSERT_DOUBLE_EQUAL(r, cases[i].reward, 1e-12);
        CU_ASSERT_EQUAL(correct, cases[i].reward == 1.0);
    }
}

static void test_normalize(void)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"The  Kestrel-Bay!", "kestrel bay"},
        {"Kestrel Bay", "kestrel bay"},
        {"  an Apple a day  ", "apple day"},
        {"THE A AN", ""},
        {"the", ""},
        {"", ""},
        {"Theatre Anna", "theatre anna"},   /* articles only as whole words */
        {"O'Brien's", "obriens"},          /* apostrophes join */
        {"1,200 people", "1200 people"},    /* digit grouping */
        {"3.5", "3.5"},                     /* decimal point kept */
        {"end. 3", "end 3"},
        {"a,b;c:d/e(f)g", "b c d e f g"},
        {"tab\tnew\nline\r", "tab new line"},
        {"Z\xC3\xBCrich", "z\xC3\xBCrich"}, /* UTF-8 bytes kept */
        {"-42", "42"},
        {"\"quoted\"", "quoted"},
    };
    char out[64];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        env_normalize_answer(cases[i].in, out, sizeof out);
        CU_ASSERT_STRING_EQUAL(out, cases[i].out);
        if (strcmp(out, cases[i].out) != 0)
            fprintf(stderr, "normalize \"%s\" -> \"%s\"\n", cases[i].in, out);
    }
    /* Truncation: at most cap - 1 bytes, no trailing space. */
    env_normalize_answer("hello world", out, 5);
    CU_ASSERT_STRING_EQUAL(out, "hell");
    env_normalize_answer("hello world", out, 7);
    CU_ASSERT_STRING_EQUAL(out, "hello");
    env_normalize_answer("hello world", out, 1);
    CU_ASSERT_STRING_EQUAL(out, "");
    /* Idempotent. */
    char again[64];
    env_normalize_answer("The  Kestrel-Bay!", out, sizeof out);
    env_normalize_answer(out, again, sizeof again);
    CU_ASSERT_STRING_EQUAL(out, again);
}

/* ======================================================================== */
/* Parameters and names                                                     */
/* ======================================================================== */

static void test_params(void)
{
    struct env e;
    struct env_params p;
    char err[512];
    calc_params(&p);
    p.kind = ENV_KIND_EMU;
    CU_ASSERT_EQUAL(env_init(&e, &p, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "env emu has no tools"));
    p.kind = 7;
    CU_ASSERT_EQUAL(env_init(&e, &p, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "unknown"));
    calc_params(&p);
    p.format_bonus = 1.0;
    CU_ASSERT_EQUAL(env_init(&e, &p, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "format_bonus"));
    p.format_bonus = NAN;
    CU_ASSERT_EQUAL(env_init(&e, &p, err, sizeof err), -1);
    p.format_bonus = -0.5;
    CU_ASSERT_EQUAL(env_init(&e, &p, err, sizeof err), -1);
    calc_params(&p);
    p.demo_mistake_rate = 1.5;
    CU_ASSERT_EQUAL(env_init(&e, &p, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "demo_mistake_rate"));
    calc_params(&p);
    p.malformed_call_penalty = -0.1;
    CU_ASSERT_EQUAL(env_init(&e, &p, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "malformed_call_penalty"));
    calc_params(&p);
    memset(p.prompts, 'x', sizeof p.prompts); /* not NUL-terminated */
    CU_ASSERT_EQUAL(env_init(&e, &p, err, sizeof err), -1);
    calc_params(&p);
    p.calc_min_steps = 0; /* calc's own check */
    CU_ASSERT_EQUAL(env_init(&e, &p, err, sizeof err), -1);
    CU_ASSERT(err[0] != '\0');
    /* The vocabulary: required, its format ids in range, special and (the tags)
     * distinct. */
    calc_params(&p);
    p.vocab = NULL;
    CU_ASSERT_EQUAL(env_init(&e, &p, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "env_params.vocab is NULL"));
    struct vocab bad = *tok_byte_vocab();
    p.vocab = &bad;
    bad.decode = NULL;
    CU_ASSERT_EQUAL(env_init(&e, &p, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "decode is NULL"));
    bad = *tok_byte_vocab();
    bad.call_text = NULL;
    CU_ASSERT_EQUAL(env_init(&e, &p, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "call_text is NULL"));
    bad = *tok_byte_vocab();
    bad.size = 0;
    CU_ASSERT_EQUAL(env_init(&e, &p, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "positive size"));
    bad = *tok_byte_vocab();
    CU_ASSERT_EQUAL_FATAL(env_init(&e, &p, err, sizeof err), 0);
    CU_ASSERT_PTR_EQUAL(e.vocab, &bad);
    env_free(&e);
    env_free(&e); /* a failed init leaves a freeable struct */
    env_free(NULL);

    CU_ASSERT_STRING_EQUAL(env_kind_name(ENV_KIND_EMU), "emu");
    CU_ASSERT_STRING_EQUAL(env_kind_name(ENV_KIND_CALC), "calc");
    CU_ASSERT_STRING_EQUAL(env_kind_name(ENV_KIND_SEARCH), "search");
    CU_ASSERT_STRING_EQUAL(env_kind_name(9), "unknown");
    CU_ASSERT_STRING_EQUAL(env_tool_name(ENV_TOOL_CALC), "calc");
    CU_ASSERT_STRING_EQUAL(env_tool_name(ENV_TOOL_SEARCH), "search");
    CU_ASSERT_STRING_EQUAL(env_tool_name(-1), "none");
    CU_ASSERT_STRING_EQUAL(env_tool_name(ENV_N_TOOLS), "unknown");
}

/* ======================================================================== */
/* JSONL                                                                    */
/* ======================================================================== */

static void test_jsonl_good(void)
{
    static const char text[] =
        "\xEF\xBB\xBF{\"prompt\": \"What is 6*7?\", \"answer\": 42}\n"
        "\n"
        "   \t\r\n"
        "{\"id\": {\"x\": [1, 2.5e-3, {\"y\": null}], \"z\": [true, false, \"]}\"]}, "
        "\"prompt\": \"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\\u20AC\", "
        "\"answer\": \"-1.5\", \"extra\": -0}\r\n"
        "{\"answer\":\"7\",\"prompt\":\"raw \xC3\xA9 and invalid \xFF bytes\"}\n"
        "  {\"prompt\" : \"q4\" , \"answer\" : 1E+2 }  ";
    const char *path = write_text("good.jsonl", text);
    struct env e;
    char err[512] = "";
    int rc = init_jsonl(&e, path, err, sizeof err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    if (rc != 0) fprintf(stderr, "%s\n", err);
    CU_ASSERT_EQUAL(e.n_jsonl, 4);
    CU_ASSERT_EQUAL(e.n_eval, 1);
    struct env_problem pr;
    env_problem(&e, ENV_TRAIN, 0, &pr);
    CU_ASSERT_STRING_EQUAL(pr.text, "What is 6*7?");
    CU_ASSERT_STRING_EQUAL(pr.answer, "42");
    env_problem(&e, ENV_TRAIN, 1, &pr);
    CU_ASSERT_STRING_EQUAL(pr.text, "a\"b\\c/d\b\f\n\r\t\xC3\xA9\xF0\x9F\x98\x80\xE2\x82\xAC");
    CU_ASSERT_STRING_EQUAL(pr.answer, "-1.5");
    env_problem(&e, ENV_TRAIN, 2, &pr);
    CU_ASSERT_STRING_EQUAL(pr.text, "raw \xC3\xA9 and invalid \xFF bytes");
    CU_ASSERT_STRING_EQUAL(pr.answer, "7");
    env_problem(&e, ENV_EVAL, 0, &pr);
    CU_ASSERT_STRING_EQUAL(pr.text, "q4");
    CU_ASSERT_STRING_EQUAL(pr.answer, "1E+2");
    /* The calc reward compares JSONL answers numerically. */
    env_problem(&e, ENV_TRAIN, 0, &pr);
    const char *segs[] = {"<answer>42.00</answer>", NULL};
    int correct;
    CU_ASSERT_DOUBLE_EQUAL(reward_of(&e, &pr, pr.text, segs, &correct), 1.0, 1e-12);
    CU_ASSERT_EQUAL(correct, 1);
    env_free(&e);

    /* Longest allowed prompt and answer. */
    static char line[4 * ENV_TEXT_MAX];
    char prompt[ENV_TEXT_MAX], answer[ENV_ANSWER_MAX];
    memset(prompt, 'p', sizeof prompt - 1);
    prompt[sizeof prompt - 1] = '\0';
    memset(answer, 'a', sizeof answer - 1);
    answer[sizeof answer - 1] = '\0';
    snprintf(line, sizeof line, "{\"prompt\": \"%s\", \"answer\": \"%s\"}", prompt, answer);
    char what[256];
    CU_ASSERT_EQUAL(jsonl_parse_line(line, strlen(line), &pr, what, sizeof what), 1);
    CU_ASSERT_EQUAL(strlen(pr.text), ENV_TEXT_MAX - 1);
    CU_ASSERT_EQUAL(strlen(pr.answer), ENV_ANSWER_MAX - 1);
    CU_ASSERT_EQUAL(jsonl_parse_line(" \t", 2, &pr, what, sizeof what), 0);
}

static void test_jsonl_bad_lines(void)
{
    static char long_prompt[2 * ENV_TEXT_MAX], long_answer[2 * ENV_ANSWER_MAX];
    static char deep[256];
    char p[ENV_TEXT_MAX + 1], a[ENV_ANSWER_MAX + 1];
    memset(p, 'p', ENV_TEXT_MAX);
    p[ENV_TEXT_MAX] = '\0';
    memset(a, '1', ENV_ANSWER_MAX);
    a[ENV_ANSWER_MAX] = '\0';
    snprintf(long_prompt, sizeof long_prompt, "{\"prompt\": \"%s\", \"answer\": 1}", p);
    snprintf(long_answer, sizeof long_answer, "{\"prompt\": \"q\", \"answer\": %s}", a);
    strcpy(deep, "{\"prompt\": \"q\", \"answer\": 1, \"x\": ");
    for (int i = 0; i < 70; i++) strcat(deep, "[");
    static const struct {
        const char *line, *what;
    } cases[] = {
        {"{\"answer\": \"1\"}", "missing \"prompt\""},
        {"{\"prompt\": \"q\"}", "missing \"answer\""},
        {"{}", "missing \"prompt\""},
        {"{\"prompt\": 5, \"answer\": \"1\"}", "\"prompt\" must be a string"},
        {"{\"prompt\": null, \"answer\": \"1\"}", "\"prompt\" must be a string"},
        {"{\"prompt\": \"q\", \"answer\": true}", "\"answer\" must be a string or a number"},
        {"{\"prompt\": \"q\", \"answer\": [1]}", "\"answer\" must be a string or a number"},
        {"{\"prompt\": \"q\", \"answer\": {\"v\": 1}}", "\"answer\" must be a string or a number"},
        {NULL, "\"prompt\" is 1024 bytes"},  /* long_prompt */
        {NULL, "\"answer\" is 128 bytes"},   /* long_answer */
        {"{\"prompt\": \"\", \"answer\": \"1\"}", "\"prompt\" is empty"},
        {"{\"prompt\": \"q\", \"answer\": \"\"}", "\"answer\" is empty"},
        {"{\"prompt\": \"q\", \"answer\": \"1\"} x", "trailing garbage"},
        {"{\"prompt\": \"q\", \"answer\": \"1\"}{}", "trailing garbage"},
        {"{\"prompt\": \"q\\x\", \"answer\": \"1\"}", "bad escape \\x"},
        {"{\"prompt\": \"q\\u12\", \"answer\": \"1\"}", "bad \\u escape"},
        {"{\"prompt\": \"q\\u12G4\", \"answer\": \"1\"}", "bad \\u escape"},
        {"{\"prompt\": \"\\ud800\", \"answer\": \"1\"}", "unpaired UTF-16 surrogate"},
        {"{\"prompt\": \"\\ud800\\u0041\", \"answer\": \"1\"}", "unpaired UTF-16 surrogate"},
        {"{\"prompt\": \"\\udc00x\", \"answer\": \"1\"}", "unpaired UTF-16 surrogate"},
        {"{\"prompt\": \"a\\u0000b\", \"answer\": \"1\"}", "NUL"},
        {"{\"prompt\": \"a\tb\", \"answer\": \"1\"}", "unescaped control byte 0x09"},
        {"{\"prompt\": \"q", "unterminated string"},
        {"{\"prompt\": \"q\\", "unterminated string"},
        {"{\"prompt\": \"q\", \"answer\": \"1\"", "expected ',' or '}'"},
        {"{\"prompt\": \"q\" \"answer\": \"1\"}", "expected ',' or '}'"},
        {"{\"prompt\": \"q\", \"answer\": 01}", "expected ',' or '}'"},
        {"{\"prompt\": \"q\", \"answer\": -}", "expected a digit"},
        {"{\"prompt\": \"q\", \"answer\": 1.}", "expected a digit after '.'"},
        {"{\"prompt\": \"q\", \"answer\": 1e}", "exponent"},
        {"[\"prompt\", \"q\"]", "expected '{'"},
        {"prompt: q", "expected '{'"},
        {"{prompt: \"q\"}", "expected a string key"},
        {"{\"prompt\" \"q\"}", "expected ':'"},
        {"{\"prompt\": \"q\", \"answer\": 1, \"x\": [1, 2}", "expected ',' or ']'"},
        {"{\"prompt\": \"q\", \"answer\": 1, \"x\": {\"k\" 1}}", "expected ':'"},
        {"{\"prompt\": \"q\", \"answer\": 1, \"x\": tru}", "expected a JSON value"},
        {"{\"prompt\": \"q\", \"answer\": 1, \"x\": NaN}", "expected a JSON value"},
        {"{\"prompt\": \"q\", \"answer\": 1, \"x\": }", "expected a JSON value"},
        {"{\"prompt\": \"q\", \"answer\": 1,}", "expected a string key"},
        {"{\"prompt\": \"q\", \"prompt\": \"r\", \"answer\": \"1\"}", "duplicate key \"prompt\""},
        {"{\"prompt\": \"q\", \"answer\": 1, \"answer\": 2}", "duplicate key \"answer\""},
        {NULL, "nested deeper than 64"},     /* deep */
    };
    int special = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *bad = cases[i].line;
        if (!bad) {
            const char *generated[] = {long_prompt, long_answer, deep};
            CU_ASSERT_FATAL(special < 3);
            bad = generated[special++];
        }
        /* Line 3 is bad, after a good line and a blank one. */
        char *text = malloc(strlen(bad) + 200);
        CU_ASSERT_FATAL(text != NULL);
        sprintf(text, "{\"prompt\": \"good\", \"answer\": 1}\n\n%s\n"
                      "{\"prompt\": \"g\", \"answer\": 2}\n", bad);
        char name[32];
        snprintf(name, sizeof name, "bad%zu.jsonl", i);
        const char *path = write_text(name, text);
        free(text);
        char want[1300];
        snprintf(want, sizeof want, "%s:3: ", path);
        struct env e;
        char err[1500] = "";
        CU_ASSERT_EQUAL(init_jsonl(&e, path, err, sizeof err), -1);
        int ok = strncmp(err, want, strlen(want)) == 0 && strstr(err, cases[i].what) != NULL;
        CU_ASSERT(ok);
        if (!ok) fprintf(stderr, "bad line %zu: want \"%s\", got \"%s\"\n", i, cases[i].what, err);
        CU_ASSERT_EQUAL(e.jsonl, NULL);
    }
}

/* env.max_bad_fraction: bad lines are skipped while they are at most that share of
 * the problem lines (the good ones keep their order); past it, the error counts them
 * and names the first; env_check_prompts says the same, with the counts. */
static void test_jsonl_skip_bad(void)
{
    char text[4096] = "";
    for (int i = 0; i < 10; i++) {
        char line[128];
        if (i == 3 || i == 7)
            snprintf(line, sizeof line, "{\"prompt\": \"q%d\"}\n", i); /* no answer */
        else
            snprintf(line, sizeof line, "{\"prompt\": \"q%d\", \"answer\": %d}\n", i, i);
        strcat(text, line);
    }
    const char *path = write_text("skip.jsonl", text);
    struct env_params p;
    calc_params(&p);
    snprintf(p.prompts, sizeof p.prompts, "%s", path);
    struct env e;
    char err[1500] = "";
    p.max_bad_fraction = 0.2; /* 2 of 10 */
    CU_ASSERT_EQUAL_FATAL(env_init(&e, &p, err, sizeof err), 0);
    CU_ASSERT_EQUAL(e.n_jsonl, 8);
    const char *want[8] = {"q0", "q1", "q2", "q4", "q5", "q6", "q8", "q9"};
    for (int i = 0; i < 8; i++) CU_ASSERT_STRING_EQUAL(e.jsonl[i].text, want[i]);
    env_free(&e);
    p.max_bad_fraction = 0.15;
    CU_ASSERT_EQUAL(env_init(&e, &p, err, sizeof err), -1);
    char msg[1300];
    snprintf(msg, sizeof msg, "%s: 2 of 10 problem lines cannot be used, more than "
             "env.max_bad_fraction = 0.15 allows; the first, line 4: missing \"answer\"", path);
    CU_ASSERT(strncmp(err, msg, strlen(msg)) == 0);
    int64_t ok = -1, bad = -1;
    CU_ASSERT_EQUAL(env_check_prompts(path, 0.5, &ok, &bad, err, sizeof err), 0);
    CU_ASSERT_EQUAL(ok, 8);
    CU_ASSERT_EQUAL(bad, 2);
    CU_ASSERT_EQUAL(env_check_prompts(path, 0.1, &ok, &bad, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "2 of 10 problem lines"));
    p.max_bad_fraction = NAN;
    CU_ASSERT_EQUAL(env_init(&e, &p, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "env.max_bad_fraction"));
}

static void test_jsonl_file_errors(void)
{
    struct env e;
    char err[1500];
    char want[1300];
    const char *path = write_text("one.jsonl", "{\"prompt\": \"q\", \"answer\": 1}\n\n");
    CU_ASSERT_EQUAL(init_jsonl(&e, path, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "at least 2"));
    path = write_text("empty.jsonl", "");
    CU_ASSERT_EQUAL(init_jsonl(&e, path, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "0 problem"));
    snprintf(want, sizeof want, "%s/does-not-exist.jsonl", scratch());
    CU_ASSERT_EQUAL(init_jsonl(&e, want, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cannot open"));
    CU_ASSERT_EQUAL(init_jsonl(&e, scratch(), err, sizeof err), -1); /* a directory */
    CU_ASSERT(strncmp(err, scratch(), strlen(scratch())) == 0);

    /* A huge line (read whole by getline): a prompt of 2 MiB. */
    size_t big = (size_t)2 << 20;
    char *text = malloc(big + 64);
    CU_ASSERT_FATAL(text != NULL);
    strcpy(text, "{\"prompt\": \"");
    memset(text + strlen(text), 'a', big);
    strcpy(text + 12 + big, "\", \"answer\": 1}\n");
    path = write_bytes("huge.jsonl", text, strlen(text));
    free(text);
    snprintf(want, sizeof want, "%s:1: \"prompt\" is 2097152 bytes", path);
    CU_ASSERT_EQUAL(init_jsonl(&e, path, err, sizeof err), -1);
    CU_ASSERT(strncmp(err, want, strlen(want)) == 0);
}

static void test_jsonl_random_bytes(void)
{
    /* Random files fail with a "file:..." message (never crash); files that happen to
     * parse are impossible here since no random file starts with '{' and a key. */
    struct rng r;
    enum { LEN = 4096 };
    static unsigned char buf[LEN];
    for (int k = 0; k < 20; k++) {
        rng_init(&r, 99, (uint64_t)k, 0, 0);
        for (int i = 0; i < LEN; i++) buf[i] = (unsigned char)rng_below(&r, 256);
        if (k % 4 == 0) buf[0] = '{';
        const char *path = write_bytes("random.bin", buf, LEN);
        struct env e;
        char err[1500] = "";
        CU_ASSERT_EQUAL(init_jsonl(&e, path, err, sizeof err), -1);
        CU_ASSERT(strncmp(err, path, strlen(path)) == 0 && err[strlen(path)] == ':');
    }
    /* Mutations of a good line (byte flips, truncations) through the line parser, each
     * in an exactly sized buffer: any result but never a read past the end. */
    static const char good[] =
        "{\"prompt\": \"a\\u00e9\\ud83d\\ude00 \\\"q\\\"\", \"meta\": {\"k\": [1, -2.5e3, "
        "true, null, \"s\"]}, \"answer\": 42}";
    const size_t glen = sizeof good - 1;
    int parsed = 0;
    for (int k = 0; k < 3000; k++) {
        rng_init(&r, 7, (uint64_t)k, 1, 0);
        size_t len = k % 3 == 0 ? (size_t)rng_below(&r, glen + 1) : glen;
        char *line = malloc(len ? len : 1);
        CU_ASSERT_FATAL(line != NULL);
        memcpy(line, good, len);
        if (k % 3 != 0 && len > 0) {
            int flips = 1 + (int)rng_below(&r, 3);
            for (int f = 0; f < flips; f++) line[rng_below(&r, len)] = (char)rng_below(&r, 256);
        }
        struct env_problem pr;
        char what[256] = "";
        int rc = jsonl_parse_line(line, len, &pr, what, sizeof what);
        CU_ASSERT(rc == -1 || rc == 0 || rc == 1);
        if (rc == 1) {
            parsed++;
            CU_ASSERT(strlen(pr.text) > 0 && strlen(pr.answer) > 0);
        }
        if (rc == -1) CU_ASSERT(what[0] != '\0');
        free(line);
    }
    CU_ASSERT(parsed > 0); /* the unmutated line (and harmless flips) parse */
}

static void test_jsonl_splits(void)
{
    static const struct {
        int n;
        int64_t n_eval;
    } cases[] = {{2, 1}, {9, 1}, {10, 1}, {25, 2}, {199, 19}, {2500, 200}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int n = cases[c].n;
        char *text = malloc((size_t)n * 64);
        CU_ASSERT_FATAL(text != NULL);
        size_t at = 0;
        for (int i = 0; i < n; i++)
            at += (size_t)sprintf(text + at, "{\"prompt\": \"q%d\", \"answer\": %d}\n", i, i);
        const char *path = write_bytes("split.jsonl", text, at);
        free(text);
        struct env e;
        char err[1500];
        CU_ASSERT_EQUAL_FATAL(init_jsonl(&e, path, err, sizeof err), 0);
        CU_ASSERT_EQUAL(e.n_jsonl, n);
        CU_ASSERT_EQUAL(e.n_eval, cases[c].n_eval);
        int64_t n_train = n - e.n_eval;
        struct env_problem pr;
        char want[32];
        for (int64_t i = 0; i < 2 * n + 3; i += 1 + i / 7) {
            env_problem(&e, ENV_TRAIN, i, &pr);
            snprintf(want, sizeof want, "q%d", (int)(i % n_train));
            CU_ASSERT_STRING_EQUAL(pr.text, want);
            CU_ASSERT_EQUAL(pr.index, i);
            CU_ASSERT_EQUAL(pr.split, ENV_TRAIN);
            CU_ASSERT_EQUAL(pr.steps, 0);
            env_problem(&e, ENV_EVAL, i, &pr);
            snprintf(want, sizeof want, "q%d", (int)(n_train + i % e.n_eval));
            CU_ASSERT_STRING_EQUAL(pr.text, want);
            snprintf(want, sizeof want, "%d", (int)(n_train + i % e.n_eval));
            CU_ASSERT_STRING_EQUAL(pr.answer, want);
            CU_ASSERT_EQUAL(pr.index, i);
            CU_ASSERT_EQUAL(pr.split, ENV_EVAL);
        }
        env_free(&e);
        CU_ASSERT_EQUAL(e.jsonl, NULL);
    }
}

/* ======================================================================== */
/* End to end with the real environments                                    */
/* ======================================================================== */

/* Problems of both splits: prompt format, a tool call, and the expert's demonstration
 * (no mistakes) scoring 1 when appended to the prompt. */
static void check_env_end_to_end(int kind)
{
    struct env e;
    struct env_params p;
    char err[512] = "";
    calc_params(&p);
    p.kind = kind;
    p.demo_mistake_rate = 0.0;
    int rc = env_init(&e, &p, err, sizeof err);
    if (rc != 0) fprintf(stderr, "env_init(%s): %s\n", env_kind_name(kind), err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    static struct seq s;
    for (int split = ENV_TRAIN; split <= ENV_EVAL; split++) {
        for (int64_t i = 0; i < 10; i++) {
            struct env_problem pr;
            env_problem(&e, split, i, &pr);
            CU_ASSERT_EQUAL(pr.index, i);
            CU_ASSERT_EQUAL(pr.split, split);
            CU_ASSERT(strlen(pr.text) > 0 && strlen(pr.answer) > 0);
            int np = env_prompt_tokens(&e, &pr, s.ids, SEQ_CAP);
            CU_ASSERT_FATAL(np > 3 && np < SEQ_CAP);
            memset(s.mask, 0, (size_t)np);
            int nd = env_demo(&e, &pr, 77, s.ids + np, s.mask + np, SEQ_CAP - np);
            CU_ASSERT_FATAL(nd > 0);
            int correct;
            double r = env_reward(&e, &pr, s.ids, s.mask, np + nd, &correct);
            CU_ASSERT_DOUBLE_EQUAL(r, 1.0, 1e-12);
            CU_ASSERT_EQUAL(correct, 1);
            /* The prompt alone, or the prompt followed by the demonstration's tokens
             * all marked as payload, never scores. */
            CU_ASSERT_DOUBLE_EQUAL(env_reward(&e, &pr, s.ids, s.mask, np, &correct), 0, 0);
            memset(s.mask + np, 0, (size_t)nd);
            CU_ASSERT_DOUBLE_EQUAL(env_reward(&e, &pr, s.ids, s.mask, np + nd, &correct), 0, 0);
            CU_ASSERT_EQUAL(correct, 0);
        }
    }
    /* The tool: a good call succeeds, garbage fails cleanly; both name the tool. */
    struct env_tool_result res;
    const char *good = kind == ENV_KIND_CALC ? "2+3*4" : "capital";
    env_tool(&e, good, strlen(good), 0, &res);
    CU_ASSERT_EQUAL(res.tool, kind == ENV_KIND_CALC ? ENV_TOOL_CALC : ENV_TOOL_SEARCH);
    CU_ASSERT_EQUAL(res.status, TOOL_SUCCESS);
    CU_ASSERT(res.len > 0 && res.len < ENV_PAYLOAD_MAX);
    if (kind == ENV_KIND_CALC) CU_ASSERT_STRING_EQUAL(res.text, "14");
    env_tool(&e, "\x01\xff((", 4, 0, &res);
    CU_ASSERT_EQUAL(res.status, TOOL_FAILURE);
    CU_ASSERT(strncmp(res.text, "error", 5) == 0);
    env_free(&e);
    env_free(&e); /* freeing twice is harmless */
}

static void test_calc_end_to_end(void) { check_env_end_to_end(ENV_KIND_CALC); }
static void test_search_end_to_end(void) { check_env_end_to_end(ENV_KIND_SEARCH); }

/* ======================================================================== */
/* Another vocabulary                                                       */
/* ======================================================================== */

/* A vocabulary unlike the byte-level one, to show that the environment takes every id
 * from the vocabulary it is handed: byte b is id b + shift (shift in ctx), the ten
 * format tags are ids 290..299, and every other id (0..shift-1, 256+shift..289) is a
 * special too. The byte tokenizer's TOK_* ids are plain text here, and its tags can
 * never be mistaken for these. */
enum { SHIFT_SIZE = 300, SHIFT_TAGS = 290 };
struct shift_ctx {
    int32_t shift;
};
static struct shift_ctx shift_ctx = {20};

static int shift_is_special(void *ctx, int32_t id)
{
    const struct shift_ctx *c = ctx;
    return id < c->shift || id >= c->shift + 256;
}

static size_t shift_encode(void *ctx, const char *text, size_t len, int32_t *out, size_t cap)
{
    const struct shift_ctx *c = ctx;
    for (size_t i = 0; i < len && i < cap; i++)
        out[i] = (int32_t)(unsigned char)text[i] + c->shift;
    return len;
}

/* Specials decode as '?': the environment never decodes one. */
static size_t shift_decode(void *ctx, const int32_t *ids, size_t n, char *out, size_t cap)
{
    const struct shift_ctx *c = ctx;
    for (size_t i = 0; i < n && i < cap; i++)
        out[i] = shift_is_special(ctx, ids[i]) ? '?' : (char)(unsigned char)(ids[i] - c->shift);
    return n;
}

static const struct vocab shift_text = {
    .size = SHIFT_SIZE, .name = "shifted", .ctx = &shift_ctx,
    .encode = shift_encode, .decode = shift_decode, .is_special = shift_is_special,
    .encode_markup = shift_encode,
};
static const struct tag_ids shift_tags = {
    .bos = SHIFT_TAGS + 0, .eos = SHIFT_TAGS + 1, .user = SHIFT_TAGS + 2,
    .assistant = SHIFT_TAGS + 3, .tool_call = SHIFT_TAGS + 4, .tool_call_end = SHIFT_TAGS + 5,
    .tool_result = SHIFT_TAGS + 6, .tool_result_end = SHIFT_TAGS + 7,
    .answer = SHIFT_TAGS + 8, .answer_end = SHIFT_TAGS + 9,
};

/* The byte-level id of a shift_vocab id (-1 for a special without a counterpart). */
static int32_t shift_to_byte(int32_t id)
{
    static const int32_t tags[10] = {TOK_BOS,       TOK_EOS,         TOK_USER,
                                     TOK_ASSISTANT, TOK_TOOL_CALL,   TOK_TOOL_CALL_END,
                                     TOK_TOOL_RESULT, TOK_TOOL_RESULT_END, TOK_ANSWER,
                                     TOK_ANSWER_END};
    if (id >= SHIFT_TAGS && id < SHIFT_TAGS + 10) return tags[id - SHIFT_TAGS];
    return shift_is_special(&shift_ctx, id) ? -1 : id - shift_ctx.shift;
}

static void test_other_vocab(void)
{
    struct tag_format fmt;
    struct vocab shift_vocab;
    char ferr[256] = "";
    CU_ASSERT_EQUAL_FATAL(tag_format_init(&fmt, &shift_vocab, &shift_text, &shift_tags, ferr,
                                          sizeof ferr), 0);
    const struct vocab *v = &shift_vocab;
    const struct tag_ids *tg = &shift_tags;
    struct env be, se; /* the same calc environment on the byte and the shifted vocabulary */
    struct env_params p;
    char err[512] = "";
    calc_params(&p);
    p.demo_mistake_rate = 0.5; /* demonstrations with wrong answers and repaired calls too */
    CU_ASSERT_EQUAL_FATAL(env_init(&be, &p, err, sizeof err), 0);
    p.vocab = v;
    int rc = env_init(&se, &p, err, sizeof err);
    if (rc != 0) fprintf(stderr, "env_init(shift vocab): %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);

    /* Prompts and demonstrations: the same conversations, every id translated, and the
     * same rewards. The byte-level sequence holds no tag of this vocabulary: it scores 0
     * here and holds no tool call. */
    static struct seq b, s;
    int n_correct = 0;
    for (int64_t i = 0; i < 20; i++) {
        struct env_problem pr;
        env_problem(&se, ENV_TRAIN, i, &pr);
        int nb = env_prompt_tokens(&be, &pr, b.ids, SEQ_CAP);
        int ns = env_prompt_tokens(&se, &pr, s.ids, SEQ_CAP);
        CU_ASSERT_EQUAL_FATAL(ns, nb);
        CU_ASSERT_EQUAL(s.ids[0], tg->bos);
        CU_ASSERT_EQUAL(s.ids[1], tg->user);
        CU_ASSERT_EQUAL(s.ids[2], (int32_t)(unsigned char)pr.text[0] + shift_ctx.shift);
        CU_ASSERT_EQUAL(s.ids[ns - 1], tg->assistant);
        memset(b.mask, 0, (size_t)nb);
        memset(s.mask, 0, (size_t)ns);
        int db = env_demo(&be, &pr, 5, b.ids + nb, b.mask + nb, SEQ_CAP - nb);
        int ds = env_demo(&se, &pr, 5, s.ids + ns, s.mask + ns, SEQ_CAP - ns);
        CU_ASSERT_FATAL(db > 0);
        CU_ASSERT_EQUAL_FATAL(ds, db);
        int same = 1;
        for (int k = 0; k < ns + ds; k++)
            same &= shift_to_byte(s.ids[k]) == b.ids[k] && s.mask[k] == b.mask[k];
        CU_ASSERT(same);
        int cb, cs;
        double rb = env_reward(&be, &pr, b.ids, b.mask, nb + db, &cb);
        double rs = env_reward(&se, &pr, s.ids, s.mask, ns + ds, &cs);
        CU_ASSERT_DOUBLE_EQUAL(rs, rb, 0);
        CU_ASSERT_EQUAL(cs, cb);
        n_correct += cs;
        CU_ASSERT_DOUBLE_EQUAL(env_reward(&se, &pr, b.ids, b.mask, nb + db, &cs), 0, 0);
        CU_ASSERT_EQUAL(cs, 0);
        char call[ENV_CALL_MAX + 1];
        CU_ASSERT_EQUAL(env_extract_call(&se, b.ids, nb + db, call, sizeof call, NULL), -1);
    }
    CU_ASSERT(n_correct > 0 && n_correct < 20); /* both kinds of demonstration were seen */

    /* Payload: this vocabulary's tags around the shifted bytes, cut keeping the close. */
    struct env_tool_result r;
    memset(&r, 0, sizeof r);
    r.len = snprintf(r.text, sizeof r.text, "14");
    int32_t out[8];
    CU_ASSERT_EQUAL(env_payload_tokens(&se, &r, out, 8), 4);
    CU_ASSERT(out[0] == tg->tool_result && out[1] == '1' + 20 && out[2] == '4' + 20 &&
              out[3] == tg->tool_result_end);
    CU_ASSERT_EQUAL(env_payload_tokens(&se, &r, out, 3), 3);
    CU_ASSERT(out[0] == tg->tool_result && out[1] == '1' + 20 && out[2] == tg->tool_result_end);

    /* Tool calls: decoded through the vocabulary; the byte tags are text here, and an id
     * special here (though a byte in the byte vocabulary) or out of range is refused. */
    int32_t ids[] = {tg->tool_call, '2' + 20, '+' + 20, '3' + 20, tg->tool_call_end};
    char call[ENV_CALL_MAX + 1];
    size_t len = 0;
    CU_ASSERT_EQUAL(env_extract_call(&se, ids, 5, call, sizeof call, &len), 0);
    CU_ASSERT_STRING_EQUAL(call, "2+3");
    CU_ASSERT_EQUAL(len, 3);
    const int32_t byte_ids[] = {TOK_TOOL_CALL, '2', '+', '3', TOK_TOOL_CALL_END};
    CU_ASSERT_EQUAL(env_extract_call(&se, byte_ids, 5, call, sizeof call, NULL), -1);
    ids[2] = '\t'; /* id 9 */
    CU_ASSERT_EQUAL(env_extract_call(&se, ids, 5, call, sizeof call, NULL), -1);
    ids[2] = SHIFT_SIZE;
    CU_ASSERT_EQUAL(env_extract_call(&se, ids, 5, call, sizeof call, NULL), -1);

    /* Reward of a hand-made answer in this vocabulary, and of the byte-level one. */
    struct env_problem pr;
    memset(&pr, 0, sizeof pr);
    snprintf(pr.answer, sizeof pr.answer, "42");
    const int32_t ans[] = {tg->answer, '4' + 20, '2' + 20, tg->answer_end};
    const int32_t byte_ans[] = {TOK_ANSWER, '4', '2', TOK_ANSWER_END};
    const uint8_t gen[] = {1, 1, 1, 1};
    int correct;
    CU_ASSERT_DOUBLE_EQUAL(env_reward(&se, &pr, ans, gen, 4, &correct), 1.0, 0);
    CU_ASSERT_EQUAL(correct, 1);
    CU_ASSERT_DOUBLE_EQUAL(env_reward(&se, &pr, byte_ans, gen, 4, &correct), 0.0, 0);
    CU_ASSERT_EQUAL(correct, 0);
    env_free(&se);
    env_free(&be);
}

int main(void)
{
    static const struct test_case format_cases[] = {
        {"prompt tokens: <|bos|><|user|>bytes<|assistant|>, cap", test_prompt_tokens},
        {"payload tokens: tags, truncation keeps </tool_result>", test_payload_tokens},
        {"extract_call: normal, none, unterminated, specials, last, long", test_extract_call},
        {NULL, NULL},
    };
    static const struct test_case reward_cases[] = {
        {"calc reward: correct, wrong, bonus, malformed, prompt/payload", test_reward_calc},
        {"search reward compares normalised answers", test_reward_search_normalised},
        {"answer normalisation", test_normalize},
        {"parameter checks and names", test_params},
        {NULL, NULL},
    };
    static const struct test_case jsonl_cases[] = {
        {"a good file: escapes, skipped keys, BOM, CRLF, blank lines", test_jsonl_good},
        {"bad lines give file:line: messages", test_jsonl_bad_lines},
        {"bad lines skipped up to env.max_bad_fraction", test_jsonl_skip_bad},
        {"missing, empty, one-line, huge-line files", test_jsonl_file_errors},
        {"random bytes and mutated lines fail cleanly", test_jsonl_random_bytes},
        {"train/eval split sizes and indexing", test_jsonl_splits},
        {NULL, NULL},
    };
    static const struct test_case e2e_cases[] = {
        {"calc: problems, tool, demonstrations score 1", test_calc_end_to_end},
        {"search: problems, tool, demonstrations score 1", test_search_end_to_end},
        {"calc on another vocabulary: every id is the vocabulary's", test_other_vocab},
        {NULL, NULL},
    };
    static const struct test_suite suites[] = {
        {"env formats", format_cases},
        {"env reward", reward_cases},
        {"env jsonl", jsonl_cases},
        {"env end to end", e2e_cases},
        {NULL, NULL},
    };
    return test_main(suites);
}
