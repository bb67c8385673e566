/*
 * Environments: multi-turn, tool-using tasks with rewards that cannot be read off the
 * tool output (DESIGN §8). One interface, three parts used on different ranks:
 *
 *   rank 0 (controller)  env_problem   the prompt and hidden answer of problem i
 *                        env_reward    scores the model's generated text
 *   rollout ranks        env_tool      runs the tool on the text of one call
 *   libra sft            env_demo      a scripted expert's demonstration
 *
 * Every rank builds the same struct env from the same config (generators are seeded,
 * the search knowledge base and its BM25 index are rebuilt at start), so nothing but
 * token ids travels. Tools see only the call text: they never learn the answer.
 *
 * Conversation format: the vocabulary's (env_params.vocab, include/libra/vocab.h):
 * the environment speaks text and one tool (env_tool_spec: its name, description
 * and parameter, which chat formats describe to the model as a JSON schema), the
 * format lays out the ids. With the libra tag format of the byte-level models:
 *   <|bos|><|user|>QUESTION<|assistant|>            the prompt (loss mask 0)
 *   <tool_call>CALL</tool_call>                     model tokens (loss mask 1); a turn
 *                                                   ends at </tool_call>
 *   <tool_result>PAYLOAD</tool_result>              appended by the rollout rank (mask 0)
 *   ... more calls ...
 *   <answer>ANSWER</answer>                         model tokens; the episode ends at
 *                                                   </answer> (or <|eos|>, or a budget)
 * With a chat format (Qwen3, Llama 3) the prompt is the template's system turn (the
 * task's instruction, env_system_text, and the tool), the user turn and the
 * generation prompt; calls are the family's JSON tool calls, payloads its
 * tool-response turns, and the answer is "<answer>ANSWER</answer>" written as text.
 *
 * Problems are indexed: split ENV_TRAIN draws i = 0, 1, 2, ...; split ENV_EVAL is a
 * disjoint held-out stream (different generator keys), the fixed evaluation set.
 * With env.prompts set, problems come from a JSONL file instead (see env_load_jsonl).
 *
 * The environments never call a tokenizer or a template (they live in the model
 * layer, beside this one) and assume nothing of the ids: one byte of text may be any
 * number of ids.
 *
 * All functions are thread-safe on a const struct env (the tool pool calls env_tool
 * from several threads).
 */
#ifndef LIBRA_ENV_H
#define LIBRA_ENV_H

#include <stddef.h>
#include <stdint.h>

#include "libra/tool_status.h"
#include "libra/vocab.h"

#define ENV_TEXT_MAX 1024  /* prompt text bytes at most */
#define ENV_ANSWER_MAX 128 /* answer text bytes at most */
#define ENV_PAYLOAD_MAX 2048 /* tool payload bytes at most (before tokenising) */
#define ENV_CALL_MAX 256   /* tool-call text bytes at most; longer calls are an error */

enum env_kind { ENV_KIND_EMU = 0, ENV_KIND_CALC = 1, ENV_KIND_SEARCH = 2 };
enum env_split { ENV_TRAIN = 0, ENV_EVAL = 1 };

struct env_params {
    const struct vocab *vocab; /* required; not owned, must outlive the env (e.g. the
                                * byte-level tok_byte_vocab(), or a model's chat format) */
    int kind;                 /* enum env_kind */
    uint64_t seed;            /* run.seed */
    char prompts[512];        /* JSONL file of {"prompt": ..., "answer": ...}; "" = generator */
    double max_bad_fraction;  /* JSONL lines that cannot be used are skipped while they are
                               * at most this share of the problem lines; 0: none allowed
                               * (the first is the error) */
    double format_bonus;      /* reward for a well-formed <answer> that is wrong; 0 = none */
    double malformed_call_penalty; /* off the reward per malformed tool call; 0 = none */
    /* calc */
    int calc_min_steps, calc_max_steps; /* computation steps per problem, 1..6 */
    int calc_distractors;     /* irrelevant numbers mentioned per problem, at most */
    /* search */
    int search_entities;      /* entities of the generated knowledge base */
    int search_top_k;         /* passages a search returns */
    int search_max_hops;      /* 1..3 */
    /* expert demonstrations (env_demo) */
    double demo_mistake_rate; /* share of demonstrations with a realistic mistake */
};

struct env_problem {
    int64_t index;
    int split;                    /* enum env_split */
    int steps;                    /* computation steps (calc) or hops (search) */
    char text[ENV_TEXT_MAX];      /* the question, plain text */
    char answer[ENV_ANSWER_MAX];  /* the hidden answer, plain text */
};

struct env_calc;   /* src/env/calc.c */
struct env_search; /* src/env/search.c */

struct env {
    struct env_params p;
    const struct vocab *vocab; /* = p.vocab, checked by env_init */
    struct env_calc *calc;
    struct env_search *search;
    /* JSONL problems, when p.prompts is set: the last n_eval lines are the held-out
     * set, the others the training set (in file order, cycled). */
    struct env_problem *jsonl;
    int64_t n_jsonl, n_eval;
};

/* Of n JSONL problems, how many the held-out set takes (the last lines of the file):
 * about 1 in 10, at least 1, at most 200. */
int64_t env_jsonl_eval_count(int64_t n);

/* A JSONL problems file checked as a run would load it (max_bad_fraction as in
 * env_params), every line that cannot be used reported as a warning "path:line: what"
 * (the first 20; then how many more): 0 with *n_ok problems and *n_bad bad lines, or -1
 * and the message. For rank 0, before anything is written. */
int env_check_prompts(const char *path, double max_bad_fraction, int64_t *n_ok, int64_t *n_bad,
                      char *err, size_t errlen);

/* Builds the environment (the search knowledge base and index included). Returns 0,
 * or -1 with one message in err (bad JSONL line: "file:line: what"; no vocabulary, or
 * one missing a function). */
int env_init(struct env *e, const struct env_params *p, char *err, size_t errlen);
void env_free(struct env *e);
const char *env_kind_name(int kind);
const char *env_tool_name(int tool);
/* The environment's tool as the vocabulary's format describes it to the model
 * (calc: "calculator" with the string parameter "expression"; search: "search" with
 * "query"). A static object. */
const struct vocab_tool *env_tool_spec(const struct env *e);
/* The task's instruction, for formats with a system turn: what to do, that the tool
 * is there, and that the final answer goes in <answer>...</answer>. */
const char *env_system_text(const struct env *e);

/* Problem i of a split. Generators: any i >= 0. JSONL: i modulo the split's size. */
void env_problem(const struct env *e, int split, int64_t i, struct env_problem *out);
/* Prompt token ids (format above); writes at most cap, returns the count needed. */
int env_prompt_tokens(const struct env *e, const struct env_problem *pr, int32_t *out, int cap);

/* The outcome of one tool call. */
struct env_tool_result {
    int tool;                     /* enum env_tool_id */
    int status;                   /* TOOL_SUCCESS, TOOL_FAILURE (a clear error text), TOOL_TIMEOUT */
    char text[ENV_PAYLOAD_MAX];   /* the payload: a value, passages, or "error: ..." */
    int len;
};
/* Runs the environment's tool on the call text (the bytes between <tool_call> and
 * </tool_call>, any bytes at all). Never crashes on bad input: a malformed call is
 * TOOL_FAILURE with an error text. deadline is wall_time() seconds; a tool that
 * passes it stops and reports TOOL_TIMEOUT (0 = none). */
void env_tool(const struct env *e, const char *call, size_t len, double deadline,
              struct env_tool_result *out);
/* Payload token ids: the format's tool response to r (libra tags: <tool_result> + the
 * encoded text + </tool_result>), the text cut to ENV_PAYLOAD_MAX bytes and its ids
 * to fit cap (the framing always kept). Returns the count written (0 if cap cannot
 * hold the framing). */
int env_payload_tokens(const struct env *e, const struct env_tool_result *r, int32_t *out,
                       int cap);

/* The argument of the tool call in the generated ids of one turn, as the format reads
 * it (libra tags: the text of the last <tool_call> ... </tool_call>; chat formats: the
 * tool parameter's string in the call's JSON): 0, the bytes in out (NUL-terminated)
 * and their count in *len (len may be NULL; the text may hold NUL bytes), or -1 if
 * there is none or it is malformed (see include/libra/vocab.h), or it is more than
 * ENV_CALL_MAX bytes. */
int env_extract_call(const struct env *e, const int32_t *ids, int n, char *out, size_t cap,
                     size_t *len);

/* Reward of a finished trajectory: ids/mask are its whole token sequence and loss
 * mask (mask 1 = model-generated). Only generated tokens are read (never the prompt
 * or tool payloads): the format's first answer among them (<answer> ... </answer>)
 * is the answer. 1 if it matches the problem's answer (calc: numerically; search:
 * exact match after normalisation), else format_bonus if well-formed, else 0; minus
 * malformed_call_penalty for every malformed tool call (env_malformed_calls).
 * *correct is set to 1/0. */
double env_reward(const struct env *e, const struct env_problem *pr, const int32_t *ids,
                  const uint8_t *mask, int n, int *correct);
/* The model's malformed tool calls in a trajectory: its generated turns (runs of mask
 * 1, cut where the format ends a turn) that call the tool but whose call the format
 * cannot read (env_extract_call fails). */
int env_malformed_calls(const struct env *e, const int32_t *ids, const uint8_t *mask, int n);

/* A demonstration: the whole conversation after the prompt as token ids with loss
 * mask (1 = expert-written, 0 = tool payload), produced by the scripted expert with
 * the real tool. With probability demo_mistake_rate (keyed by seed, split, index) the
 * expert makes a realistic mistake (a wrong direct answer, or a malformed call it
 * then repairs after the tool's error). Returns the number of ids written (<= cap),
 * or -1 if the demonstration does not fit. */
int env_demo(const struct env *e, const struct env_problem *pr, uint64_t seed, int32_t *ids,
             uint8_t *mask, int cap);

/* Answer normalisation for exact match: lower case, ASCII punctuation and articles
 * (a, an, the) removed, whitespace collapsed. */
void env_normalize_answer(const char *in, char *out, size_t cap);

/* ---- per-environment entry points (src/env/calc.c, src/env/search.c) ---- */
int env_calc_init(struct env *e, char *err, size_t errlen);
void env_calc_free(struct env *e);
void env_calc_problem(const struct env *e, int split, int64_t i, struct env_problem *out);
void env_calc_tool(const struct env *e, const char *call, size_t len, double deadline,
                   struct env_tool_result *out);
int env_calc_correct(const char *given, const char *answer);
/* The expert's assistant text with tool calls, as segments (see env_demo). */
int env_calc_demo(const struct env *e, const struct env_problem *pr, uint64_t seed, int32_t *ids,
                  uint8_t *mask, int cap);

int env_search_init(struct env *e, char *err, size_t errlen);
void env_search_free(struct env *e);
void env_search_problem(const struct env *e, int split, int64_t i, struct env_problem *out);
void env_search_tool(const struct env *e, const char *call, size_t len, double deadline,
                     struct env_tool_result *out);
int env_search_demo(const struct env *e, const struct env_problem *pr, uint64_t seed,
                    int32_t *ids, uint8_t *mask, int cap);
/* Passages of the knowledge base (for tests and `libra --describe-env`). */
int64_t env_search_n_passages(const struct env *e);

/* ---- calc's expression evaluator (src/env/calc_expr.c) ---- */
enum calc_err {
    CALC_OK = 0, CALC_SYNTAX, CALC_DIV_ZERO, CALC_OVERFLOW, CALC_TOO_LONG, CALC_EMPTY
};
/* Evaluates an arithmetic expression: integers and decimals, + - * / (also the
 * Unicode × and ÷, and x between numbers), unary minus, parentheses, spaces. At most
 * ENV_CALC_EXPR_MAX bytes and ENV_CALC_DEPTH_MAX nesting. |values| above 1e15 are
 * CALC_OVERFLOW. Returns enum calc_err; *pos is the byte offset of a syntax error. */
#define ENV_CALC_EXPR_MAX 200
#define ENV_CALC_DEPTH_MAX 32
int calc_eval(const char *expr, size_t len, double *value, size_t *pos);
const char *calc_err_text(int err);
/* The canonical text of a value: an integer when it is one, else up to 6 decimals
 * with trailing zeros removed ("12", "-3.5", "0.333333"). */
void calc_format(double v, char *out, size_t cap);

#endif
