/*
 * The environment interface (include/libra/env.h): building the environment,
 * dispatching to calc / search, JSONL problems, the conversation's token format, the
 * extraction of tool calls and the reward.
 *
 * Decisions beyond the header:
 *  - JSONL split: of n problems, the last n_eval = max(1, min(200, n / 10)) are the
 *    held-out ENV_EVAL set, the others ENV_TRAIN; fewer than 2 problems is an error.
 *  - Token ids: the conversation format (prompt, tool responses, calls, the answer)
 *    is the vocabulary's (e->vocab, include/libra/vocab.h); this file speaks text and
 *    tools. Byte limits (ENV_CALL_MAX, ENV_PAYLOAD_MAX, ENV_TEXT_MAX) apply to the
 *    decoded bytes.
 *  - env_init checks only that the vocabulary has every function; the format checks
 *    its own ids when it is built (e.g. tag_format_init).
 *  - env_reward: the answer is the format's first well-formed generated answer
 *    (libra tags: the text between the first generated <answer> and the </answer>
 *    that follows it, generated text only). It must decode to at most
 *    ENV_TEXT_MAX - 1 bytes and not be all whitespace. A malformed first answer is
 *    not retried with a later one. calc compares with env_calc_correct (surrounding
 *    whitespace trimmed); search compares normalised texts.
 *  - env_normalize_answer: ASCII letters lower-cased; apostrophes dropped ("O'Brien"
 *    -> "obrien"); a ',' between two digits dropped ("1,200" -> "1200"); a '.'
 *    between two digits kept ("3.5"); every other ASCII punctuation byte separates
 *    words ("Kestrel-Bay" -> "kestrel bay"); the words "a", "an", "the" removed;
 *    whitespace collapsed to single spaces, none at the ends; other bytes (UTF-8)
 *    kept. "The  Kestrel-Bay!" -> "kestrel bay".
 *  - env_payload_tokens: the payload is cut to ENV_PAYLOAD_MAX bytes, then the format
 *    cuts its ids to fit cap (framing kept; 0 when cap cannot hold the framing).
 */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include "libra/env.h"

#include "jsonl.h"
#include "libra/log.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSONL_EVAL_MAX 200    /* held-out JSONL problems at most */
#define JSONL_EVAL_SHARE 10   /* ... and about 1 in this many */

/* ======================================================================== */
/* Lifetime                                                                 */
/* ======================================================================== */

static int validate_params(const struct env_params *p, char *err, size_t errlen)
{
    if (p->kind == ENV_KIND_EMU) {
        snprintf(err, errlen, "env.name = emu: env emu has no tools (the emulated backend "
                              "does not build an environment); use calc or search");
        return -1;
    }
    if (p->kind != ENV_KIND_CALC && p->kind != ENV_KIND_SEARCH) {
        snprintf(err, errlen, "env kind %d: unknown (expected %d = calc or %d = search)",
                 p->kind, ENV_KIND_CALC, ENV_KIND_SEARCH);
        return -1;
    }
    if (!(p->format_bonus >= 0.0 && p->format_bonus < 1.0)) {
        snprintf(err, errlen, "env.format_bonus = %g: must be in [0, 1) so a wrong answer "
                              "earns less than a correct one", p->format_bonus);
        return -1;
    }
    if (!(p->malformed_call_penalty >= 0.0 && p->malformed_call_penalty <= 1.0)) {
        snprintf(err, errlen, "env.malformed_call_penalty = %g: must be in [0, 1]",
                 p->malformed_call_penalty);
        return -1;
    }
    if (!(p->demo_mistake_rate >= 0.0 && p->demo_mistake_rate <= 1.0)) {
        snprintf(err, errlen, "env.demo_mistake_rate = %g: must be in [0, 1]",
                 p->demo_mistake_rate);
        return -1;
    }
    if (!(p->max_bad_fraction >= 0.0 && p->max_bad_fraction <= 1.0)) {
        snprintf(err, errlen, "env.max_bad_fraction = %g: must be in [0, 1]",
                 p->max_bad_fraction);
        return -1;
    }
    if (!memchr(p->prompts, '\0', sizeof p->prompts)) {
        snprintf(err, errlen, "env.prompts: the path is longer than %zu bytes",
                 sizeof p->prompts - 1);
        return -1;
    }
    return 0;
}

/* Every function of the format set (the format checked its own ids when built). */
static int validate_vocab(const struct vocab *v, char *err, size_t errlen)
{
    if (!v) {
        snprintf(err, errlen, "env_params.vocab is NULL: the caller must hand in the "
                              "model's vocabulary and format (e.g. tok_byte_vocab())");
        return -1;
    }
    const struct {
        const char *name;
        int set;
    } fn[] = {
        {"encode", v->encode != NULL},         {"decode", v->decode != NULL},
        {"is_special", v->is_special != NULL}, {"prompt", v->prompt != NULL},
        {"encode_markup", v->encode_markup != NULL}, {"ends_text", v->ends_text != NULL},
        {"ends_turn", v->ends_turn != NULL},   {"turn_calls", v->turn_calls != NULL},
        {"call_text", v->call_text != NULL},   {"tool_response", v->tool_response != NULL},
        {"answer", v->answer != NULL},         {"write_call", v->write_call != NULL},
        {"write_answer", v->write_answer != NULL},
    };
    if (v->size <= 0) {
        snprintf(err, errlen, "vocab: size %d: a vocabulary needs a positive size", (int)v->size);
        return -1;
    }
    for (size_t i = 0; i < sizeof fn / sizeof fn[0]; i++)
        if (!fn[i].set) {
            snprintf(err, errlen, "vocab %s: %s is NULL: a format needs every function",
                     v->name ? v->name : "(unnamed)", fn[i].name);
            return -1;
        }
    return 0;
}

static int enough_problems(const char *path, int64_t n, char *err, size_t errlen)
{
    if (n >= 2) return 0;
    snprintf(err, errlen, "%s: %lld problem(s); at least 2 are needed (one to train on, one "
                          "held out for evaluation)", path, (long long)n);
    return -1;
}

int env_check_prompts(const char *path, double max_bad_fraction, int64_t *n_ok, int64_t *n_bad,
                      char *err, size_t errlen)
{
    struct env_problem *probs;
    if (env_load_jsonl(path, max_bad_fraction, 1, &probs, n_ok, n_bad, err, errlen)) return -1;
    free(probs);
    return enough_problems(path, *n_ok, err, errlen);
}

static int load_prompts(struct env *e, char *err, size_t errlen)
{
    const char *path = e->p.prompts;
    int64_t n_bad;
    if (env_load_jsonl(path, e->p.max_bad_fraction, 0, &e->jsonl, &e->n_jsonl, &n_bad, err,
                       errlen) != 0)
        return -1;
    if (enough_problems(path, e->n_jsonl, err, errlen)) return -1;
    e->n_eval = env_jsonl_eval_count(e->n_jsonl);
    return 0;
}

int64_t env_jsonl_eval_count(int64_t n)
{
    int64_t share = n / JSONL_EVAL_SHARE;
    return share < 1 ? 1 : share > JSONL_EVAL_MAX ? JSONL_EVAL_MAX : share;
}

int env_init(struct env *e, const struct env_params *p, char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    if (validate_params(p, err, errlen) != 0) return -1;
    if (validate_vocab(p->vocab, err, errlen) != 0) return -1;
    e->p = *p;
    e->vocab = p->vocab;
    int rc = p->kind == ENV_KIND_CALC ? env_calc_init(e, err, errlen)
                                      : env_search_init(e, err, errlen);
    if (rc != 0) goto fail;
    if (p->prompts[0] && load_prompts(e, err, errlen) != 0) goto fail;
    return 0;

fail:
    env_free(e);
    return -1;
}

void env_free(struct env *e)
{
    if (!e) return;
    if (e->calc) env_calc_free(e);
    if (e->search) env_search_free(e);
    free(e->jsonl);
    memset(e, 0, sizeof *e);
}

const char *env_kind_name(int kind)
{
    switch (kind) {
    case ENV_KIND_EMU: return "emu";
    case ENV_KIND_CALC: return "calc";
    case ENV_KIND_SEARCH: return "search";
    default: return "unknown";
    }
}

const char *env_tool_name(int tool)
{
    switch (tool) {
    case ENV_TOOL_CALC: return "calc";
    case ENV_TOOL_SEARCH: return "search";
    case -1: return "none";
    default: return "unknown";
    }
}

/* The tools as a chat format describes them to the model. */
static const struct vocab_tool calc_tool = {
    "calculator",
    "Evaluates an arithmetic expression exactly and returns its value.",
    "expression",
    "The expression: numbers, + - * / and parentheses, e.g. (12 + 7) * 3",
};
static const struct vocab_tool search_tool = {
    "search",
    "Searches the knowledge base and returns the best matching passages, numbered.",
    "query",
    "Search words, e.g. a person's name and the fact wanted",
};

const struct vocab_tool *env_tool_spec(const struct env *e)
{
    return e->p.kind == ENV_KIND_SEARCH ? &search_tool : &calc_tool;
}

const char *env_system_text(const struct env *e)
{
    if (e->p.kind == ENV_KIND_SEARCH)
        return "Answer the question. Use the search tool to look up facts, one hop at a "
               "time, then give the final answer as <answer>ANSWER</answer>.";
    return "Solve the arithmetic word problem. Use the calculator tool for the arithmetic, "
           "then give the final answer as <answer>NUMBER</answer>.";
}

/* ======================================================================== */
/* Problems and prompts                                                     */
/* ======================================================================== */

void env_problem(const struct env *e, int split, int64_t i, struct env_problem *out)
{
    assert(split == ENV_TRAIN || split == ENV_EVAL);
    if (e->jsonl) {
        int64_t n_train = e->n_jsonl - e->n_eval;
        int64_t size = split == ENV_EVAL ? e->n_eval : n_train;
        int64_t k = ((i % size) + size) % size;
        *out = e->jsonl[(split == ENV_EVAL ? n_train : 0) + k];
        out->index = i;
        out->split = split;
        out->steps = 0;
        return;
    }
    switch (e->p.kind) {
    case ENV_KIND_CALC: env_calc_problem(e, split, i, out); return;
    case ENV_KIND_SEARCH: env_search_problem(e, split, i, out); return;
    default:
        memset(out, 0, sizeof *out);
        out->index = i;
        out->split = split;
        return;
    }
}

int env_prompt_tokens(const struct env *e, const struct env_problem *pr, int32_t *out, int cap)
{
    const struct vocab *v = e->vocab;
    size_t len = strnlen(pr->text, sizeof pr->text);
    size_t n = v->prompt(v->ctx, env_system_text(e), env_tool_spec(e), pr->text, len, out,
                         cap > 0 ? (size_t)cap : 0);
    return (int)n;
}

/* ======================================================================== */
/* Tools                                                                    */
/* ======================================================================== */

void env_tool(const struct env *e, const char *call, size_t len, double deadline,
              struct env_tool_result *out)
{
    switch (e->p.kind) {
    case ENV_KIND_CALC: env_calc_tool(e, call, len, deadline, out); return;
    case ENV_KIND_SEARCH: env_search_tool(e, call, len, deadline, out); return;
    default:
        out->tool = -1;
        out->status = TOOL_FAILURE;
        out->len = snprintf(out->text, sizeof out->text, "error: env %s has no tools",
                            env_kind_name(e->p.kind));
        return;
    }
}

int env_payload_tokens(const struct env *e, const struct env_tool_result *r, int32_t *out,
                       int cap)
{
    const struct vocab *v = e->vocab;
    if (cap <= 0) return 0;
    int len = r->len < 0 ? 0 : r->len > ENV_PAYLOAD_MAX ? ENV_PAYLOAD_MAX : r->len;
    return (int)v->tool_response(v->ctx, r->text, (size_t)len, out, (size_t)cap);
}

int env_extract_call(const struct env *e, const int32_t *ids, int n, char *out, size_t cap,
                     size_t *len)
{
    const struct vocab *v = e->vocab;
    if (cap > ENV_CALL_MAX + 1) cap = ENV_CALL_MAX + 1; /* longer calls are an error */
    return v->call_text(v->ctx, env_tool_spec(e), ids, n, out, cap, len);
}

/* ======================================================================== */
/* Reward                                                                   */
/* ======================================================================== */

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* The format's first generated answer into out (NUL-terminated, surrounding
 * whitespace trimmed): 1 if well-formed and not blank, else 0. cap > 0. */
static int find_answer(const struct vocab *v, const int32_t *ids, const uint8_t *mask, int n,
                       char *out, size_t cap)
{
    if (!v->answer(v->ctx, ids, mask, n, out, cap)) return 0;
    size_t len = strlen(out), a = 0;
    while (a < len && is_space(out[a])) a++;
    while (len > a && is_space(out[len - 1])) len--;
    if (a == len) return 0;
    memmove(out, out + a, len - a);
    out[len - a] = '\0';
    return 1;
}

static int answer_matches(const struct env *e, const char *given, const char *answer)
{
    if (e->p.kind == ENV_KIND_CALC) return env_calc_correct(given, answer) ? 1 : 0;
    char g[ENV_TEXT_MAX], a[ENV_TEXT_MAX];
    env_normalize_answer(given, g, sizeof g);
    env_normalize_answer(answer, a, sizeof a);
    return g[0] != '\0' && strcmp(g, a) == 0;
}

int env_malformed_calls(const struct env *e, const int32_t *ids, const uint8_t *mask, int n)
{
    const struct vocab *v = e->vocab;
    char call[ENV_CALL_MAX + 1];
    int bad = 0;
    for (int i = 0; i < n;) {
        if (!mask[i]) {
            i++;
            continue;
        }
        int j = i; /* the turn: generated ids up to and with the one that ends it */
        while (j < n && mask[j] && !v->ends_turn(v->ctx, ids[j])) j++;
        int end = j < n && mask[j] ? j + 1 : j;
        if (end > i && v->turn_calls(v->ctx, ids + i, end - i) &&
            env_extract_call(e, ids + i, end - i, call, sizeof call, NULL) != 0)
            bad++;
        i = end;
    }
    return bad;
}

double env_reward(const struct env *e, const struct env_problem *pr, const int32_t *ids,
                  const uint8_t *mask, int n, int *correct)
{
    char given[ENV_TEXT_MAX];
    *correct = 0;
    double penalty = e->p.malformed_call_penalty > 0
                         ? e->p.malformed_call_penalty * env_malformed_calls(e, ids, mask, n)
                         : 0.0;
    if (!find_answer(e->vocab, ids, mask, n, given, sizeof given)) return -penalty;
    char answer[ENV_ANSWER_MAX];
    memcpy(answer, pr->answer, sizeof answer);
    answer[sizeof answer - 1] = '\0';
    if (answer_matches(e, given, answer)) {
        *correct = 1;
        return 1.0 - penalty;
    }
    return e->p.format_bonus - penalty;
}

int env_demo(const struct env *e, const struct env_problem *pr, uint64_t seed, int32_t *ids,
             uint8_t *mask, int cap)
{
    switch (e->p.kind) {
    case ENV_KIND_CALC: return env_calc_demo(e, pr, seed, ids, mask, cap);
    case ENV_KIND_SEARCH: return env_search_demo(e, pr, seed, ids, mask, cap);
    default: return -1;
    }
}

/* ======================================================================== */
/* Normalisation                                                            */
/* ======================================================================== */

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_ascii_letter(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
static int is_ascii_punct(unsigned char c)
{
    return c > 0x20 && c < 0x7f && !is_digit((char)c) && !is_ascii_letter(c);
}

static int is_article(const char *w, size_t n)
{
    return (n == 1 && w[0] == 'a') || (n == 2 && memcmp(w, "an", 2) == 0) ||
           (n == 3 && memcmp(w, "the", 3) == 0);
}

void env_normalize_answer(const char *in, char *out, size_t cap)
{
    if (cap == 0) return;
    size_t len = strlen(in), n = 0, word = 0, undo = 0;
    int in_word = 0;
    for (size_t i = 0; i <= len; i++) {
        unsigned char c = i < len ? (unsigned char)in[i] : ' ';
        int between_digits = i > 0 && i + 1 < len && is_digit(in[i - 1]) && is_digit(in[i + 1]);
        if (c == '\'' || (c == ',' && between_digits)) continue; /* dropped: joins */
        int decimal_point = c == '.' && between_digits;
        int separates = c <= 0x20 || c == 0x7f || (is_ascii_punct(c) && !decimal_point);
        if (separates) {
            if (in_word && is_article(out + word, n - word)) n = undo;
            in_word = 0;
            continue;
        }
        if (!in_word) {
            undo = n;
            if (n > 0 && n + 1 < cap) out[n++] = ' ';
            word = n;
            in_word = 1;
        }
        if (c >= 'A' && c <= 'Z') c = (unsigned char)(c - 'A' + 'a');
        if (n + 1 < cap) out[n++] = (char)c;
    }
    while (n > 0 && out[n - 1] == ' ') n--; /* a space left by truncation */
    out[n] = '\0';
}
