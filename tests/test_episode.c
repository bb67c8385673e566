/*
 * Tests of whole episodes (src/rollout/episode.c) on the calc environment:
 *  - teacher forcing: the expert's mistake-free demonstration, scored by env_reward
 *    as if generated, earns reward 1; with mistakes some demonstrations fail;
 *  - determinism: greedy and sampled episodes do not depend on the batch size
 *    (transcripts and statistics identical);
 *  - statistics stay within the budgets on a random model;
 *  - a tiny model that memorised a demonstration replays it through episode_run:
 *    the tool runs inline, its payload is appended, the answer earns reward 1, the
 *    counts match the demonstration exactly; the same model cut by max_turns,
 *    max_tokens_per_turn and max_tokens stops exactly where the budget says; a
 *    memorised call without <tool_call> gets the malformed-call error payload;
 *  - sampled episodes with tool calls equal a reference that recomputes the whole
 *    sequence for every token (no KV cache).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/adamw.h"
#include "libra/env.h"
#include "libra/episode.h"
#include "libra/sampler.h"
#include "libra/tfm.h"
#include "libra/tokenizer.h"
#include "testutil.h"

#define SEQ_MAX 512

static const struct tfm_config tiny = {.family = TFM_LLAMA, .vocab_size = TOK_VOCAB_SIZE,
                                       .hidden_size = 64, .n_layers = 2, .n_heads = 4,
                                       .n_kv_heads = 2, .head_dim = 16,
                                       .intermediate_size = 128,
                                       .max_position_embeddings = 512, .rms_norm_eps = 1e-5f,
                                       .rope_theta = 1e4f};

static void calc_env(struct env *e, double mistake_rate)
{
    struct env_params p;
    memset(&p, 0, sizeof p);
    p.kind = ENV_KIND_CALC;
    p.seed = 7;
    p.calc_min_steps = 1;
    p.calc_max_steps = 2;
    p.calc_distractors = 1;
    p.demo_mistake_rate = mistake_rate;
    p.vocab = tok_byte_vocab();
    char err[512];
    int rc = env_init(e, &p, err, sizeof err);
    if (rc) fprintf(stderr, "env_init: %s\n", err);
    CU_ASSERT_FATAL(rc == 0);
}

/* prompt + demonstration of problem i; returns the length, sets *n_prompt. */
static int demo_sequence(const struct env *e, int split, int64_t i, int32_t *ids, uint8_t *mask,
                         int *n_prompt)
{
    struct env_problem pr;
    env_problem(e, split, i, &pr);
    int np = env_prompt_tokens(e, &pr, ids, SEQ_MAX);
    CU_ASSERT_FATAL(np > 0 && np < SEQ_MAX);
    memset(mask, 0, (size_t)np);
    int nd = env_demo(e, &pr, 11, ids + np, mask + np, SEQ_MAX - np);
    CU_ASSERT_FATAL(nd > 0);
    *n_prompt = np;
    return np + nd;
}

static int count_id(const int32_t *ids, int n, int32_t id)
{
    int k = 0;
    for (int i = 0; i < n; i++) k += ids[i] == id;
    return k;
}

static void test_teacher_forced_reward(void)
{
    struct env e;
    calc_env(&e, 0.0);
    int32_t ids[SEQ_MAX];
    uint8_t mask[SEQ_MAX];
    int with_calls = 0;
    for (int split = 0; split < 2; split++)
        for (int64_t i = 0; i < 40; i++) {
            int np, n = demo_sequence(&e, split, i, ids, mask, &np);
            struct env_problem pr;
            env_problem(&e, split, i, &pr);
            int correct = -1;
            double r = env_reward(&e, &pr, ids, mask, n, &correct);
            CU_ASSERT_EQUAL(r, 1.0);
            CU_ASSERT_EQUAL(correct, 1);
            with_calls += count_id(ids + np, n - np, TOK_TOOL_CALL) > 0;
            /* The same tokens, none of them marked generated, earn nothing. */
            uint8_t zero[SEQ_MAX] = {0};
            CU_ASSERT_EQUAL(env_reward(&e, &pr, ids, zero, n, &correct), 0.0);
            CU_ASSERT_EQUAL(correct, 0);
        }
    CU_ASSERT(with_calls > 40); /* the expert uses the calculator */
    env_free(&e);

    /* Every demonstration with a mistake: some end wrong, some are repaired. */
    calc_env(&e, 1.0);
    int wrong = 0, right = 0;
    for (int64_t i = 0; i < 100; i++) {
        int np, n = demo_sequence(&e, ENV_TRAIN, i, ids, mask, &np);
        struct env_problem pr;
        env_problem(&e, ENV_TRAIN, i, &pr);
        int correct;
        double r = env_reward(&e, &pr, ids, mask, n, &correct);
        wrong += r == 0.0;
        right += r == 1.0;
    }
    CU_ASSERT(wrong > 0);
    CU_ASSERT(right > 0);
    CU_ASSERT_EQUAL(wrong + right, 100);
    env_free(&e);
}

/* Runs episodes and returns the transcripts of all of them (caller frees). */
static char *run_text(const struct env *e, const struct tfm_params *p,
                      const struct episode_config *ec, int split, int64_t first, int n,
                      struct episode_stats *st)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CU_ASSERT_FATAL(f != NULL);
    episode_run(e, &tiny, p, ec, split, first, n, st, f, n);
    fclose(f);
    return buf;
}

static void random_model(struct tfm_params *p, uint64_t seed)
{
    tfm_params_alloc(p, &tiny);
    tfm_params_init_random(p, &tiny, seed, 0.5f);
}

static void test_deterministic(void)
{
    struct env e;
    calc_env(&e, 0.5);
    struct tfm_params p;
    random_model(&p, 3);
    for (int sampled = 0; sampled < 2; sampled++) {
        struct episode_config ec = {3, 12, 256, {sampled ? 1.0f : 0.0f, 1.0f, 0, 5}, 10};
        struct episode_stats a, b, c;
        char *ta = run_text(&e, &p, &ec, ENV_EVAL, 4, 10, &a);
        ec.batch = 3;
        char *tb = run_text(&e, &p, &ec, ENV_EVAL, 4, 10, &b);
        ec.batch = 1;
        char *tc = run_text(&e, &p, &ec, ENV_EVAL, 4, 10, &c);
        CU_ASSERT_STRING_EQUAL(ta, tb);
        CU_ASSERT_STRING_EQUAL(ta, tc);
        CU_ASSERT(memcmp(&a, &b, sizeof a) == 0);
        CU_ASSERT(memcmp(&a, &c, sizeof a) == 0);
        CU_ASSERT(strstr(ta, "eval problem 13") != NULL);
        CU_ASSERT(strstr(ta, "eval problem 14") == NULL);
        /* A later problem alone decodes as it did inside the batch. */
        struct episode_stats one;
        char *t1 = run_text(&e, &p, &ec, ENV_EVAL, 13, 1, &one);
        CU_ASSERT(strstr(ta, t1) != NULL);
        free(ta);
        free(tb);
        free(tc);
        free(t1);
    }
    /* Sampling changes with the seed. */
    struct episode_config ec = {3, 12, 256, {1.0f, 1.0f, 0, 5}, 10};
    struct episode_stats a, b;
    char *ta = run_text(&e, &p, &ec, ENV_EVAL, 0, 4, &a);
    ec.sampling.seed = 6;
    char *tb = run_text(&e, &p, &ec, ENV_EVAL, 0, 4, &b);
    CU_ASSERT(strcmp(ta, tb) != 0);
    free(ta);
    free(tb);
    tfm_params_free(&p);
    env_free(&e);
}

static void test_stats_within_budgets(void)
{
    struct env e;
    calc_env(&e, 0.5);
    struct tfm_params p;
    random_model(&p, 4);
    enum { N = 12, TURNS = 2, PER_TURN = 6 };
    struct episode_config ec = {TURNS, PER_TURN, 300, {1.0f, 1.0f, 0, 9}, 5};
    struct episode_stats st;
    episode_run(&e, &tiny, &p, &ec, ENV_TRAIN, 100, N, &st, NULL, 0);
    CU_ASSERT_EQUAL(st.n, N);
    CU_ASSERT(st.correct >= 0 && st.correct <= st.answered && st.answered <= N);
    CU_ASSERT(st.tool_failures >= 0 && st.tool_failures <= st.tool_calls);
    CU_ASSERT(st.tool_calls <= (int64_t)N * TURNS);
    CU_ASSERT(st.gen_tokens >= N && st.gen_tokens <= (int64_t)N * TURNS * PER_TURN);
    CU_ASSERT(st.reward_sum >= 0 && st.reward_sum <= N);
    /* n = 0 leaves zeroed statistics. */
    memset(&st, 0x5a, sizeof st);
    episode_run(&e, &tiny, &p, &ec, ENV_TRAIN, 0, 0, &st, NULL, 0);
    CU_ASSERT_EQUAL(st.n, 0);
    CU_ASSERT_EQUAL(st.gen_tokens, 0);
    CU_ASSERT_EQUAL(st.reward_sum, 0.0);
    tfm_params_free(&p);
    env_free(&e);
}

/* ---- a model that memorised sequences ---- */

/* A training problem's prompt followed by a continuation; mask 1 = generated. */
struct memo_seq {
    int64_t index;
    int32_t ids[SEQ_MAX];
    uint8_t mask[SEQ_MAX];
    int n, np;
};

struct memo {
    struct env e;
    struct tfm_params p;
    /* demo: the first training problem whose demonstration calls the tool, with its
     * mistake-free demonstration; bad: the next problem, "2+3</tool_call>" (no
     * <tool_call>); good: the one after, "<tool_call>2+3</tool_call>". */
    struct memo_seq demo, bad, good;
    int ok;
};
static struct memo g_memo;

/* The prompt of training problem index + the call text (with or without the
 * opening tag) + </tool_call>. */
static void call_sequence(const struct env *e, int64_t index, int open_tag, struct memo_seq *m)
{
    struct env_problem pr;
    env_problem(e, ENV_TRAIN, index, &pr);
    m->index = index;
    m->np = env_prompt_tokens(e, &pr, m->ids, SEQ_MAX);
    CU_ASSERT_FATAL(m->np > 0 && m->np + 5 <= SEQ_MAX);
    memset(m->mask, 0, (size_t)m->np);
    m->n = m->np;
    if (open_tag) m->ids[m->n++] = TOK_TOOL_CALL;
    m->ids[m->n++] = '2';
    m->ids[m->n++] = '+';
    m->ids[m->n++] = '3';
    m->ids[m->n++] = TOK_TOOL_CALL_END;
    memset(m->mask + m->np, 1, (size_t)(m->n - m->np));
}

/* Trains the tiny model on the three sequences (loss on the generated tokens only,
 * a packed batch) until it reproduces them; returns the final loss. */
static double memorise(struct memo *m)
{
    enum { STEPS = 400, NS = 3 };
    const struct memo_seq *seqs[NS] = {&m->demo, &m->bad, &m->good};
    int lens[NS], T = 0, at = 0, n_loss = 0;
    for (int s = 0; s < NS; s++) T += lens[s] = seqs[s]->n - 1;
    int32_t *tok = malloc((size_t)T * sizeof *tok), *tgt = malloc((size_t)T * sizeof *tgt);
    float *w = malloc((size_t)T * sizeof *w);
    for (int s = 0; s < NS; s++)
        for (int t = 0; t < lens[s]; t++, at++) {
            tok[at] = seqs[s]->ids[t];
            tgt[at] = seqs[s]->ids[t + 1];
            w[at] = seqs[s]->mask[t + 1];
            n_loss += seqs[s]->mask[t + 1];
        }
    for (int t = 0; t < T; t++) w[t] /= (float)n_loss;
    struct tfm_batch b = {.n_seq = NS, .seq_len = lens, .tokens = tok, .targets = tgt,
                          .weights = w, .temperature = 1.0f, .entropy_weights = NULL};
    struct tfm_params g;
    tfm_params_alloc(&g, &tiny);
    struct adamw_config ac = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, LR_CONSTANT, 0, STEPS, 1.0f};
    struct adamw opt;
    adamw_init(&opt, &ac, m->p.n);
    struct tfm_state *st = tfm_state_create(&tiny, T);
    double loss = 0;
    for (int k = 0; k < STEPS; k++) {
        memset(g.mem, 0, g.n * sizeof *g.mem);
        loss = tfm_backward(&tiny, &m->p, st, &b, &g);
        adamw_step(&opt, m->p.mem, g.mem);
    }
    tfm_state_free(st);
    adamw_free(&opt);
    tfm_params_free(&g);
    free(tok);
    free(tgt);
    free(w);
    return loss;
}

static struct memo *memo_model(void)
{
    struct memo *m = &g_memo;
    if (m->ok) return m;
    calc_env(&m->e, 0.0);
    struct memo_seq *d = &m->demo;
    for (d->index = 0; d->index < 100; d->index++) {
        d->n = demo_sequence(&m->e, ENV_TRAIN, d->index, d->ids, d->mask, &d->np);
        if (count_id(d->ids, d->n, TOK_TOOL_CALL_END) >= 1) break;
    }
    CU_ASSERT_FATAL(d->index < 100);
    call_sequence(&m->e, d->index + 1, 0, &m->bad);
    call_sequence(&m->e, d->index + 2, 1, &m->good);
    tfm_params_alloc(&m->p, &tiny);
    tfm_params_init_random(&m->p, &tiny, 21, 0.02f);
    double loss = memorise(m);
    CU_ASSERT_FATAL(loss < 0.01);
    m->ok = 1;
    return m;
}

static void test_replay_demo(void)
{
    struct memo *m = memo_model();
    int n_calls = count_id(m->demo.ids + m->demo.np, m->demo.n - m->demo.np, TOK_TOOL_CALL_END);
    int n_gen = 0;
    for (int i = 0; i < m->demo.n; i++) n_gen += m->demo.mask[i];
    struct episode_config ec = {8, 200, SEQ_MAX, {0.0f, 1.0f, 0, 1}, 4};
    struct episode_stats st;
    char *text = run_text(&m->e, &m->p, &ec, ENV_TRAIN, m->demo.index, 1, &st);
    CU_ASSERT_EQUAL(st.n, 1);
    CU_ASSERT_EQUAL(st.correct, 1);
    CU_ASSERT_EQUAL(st.answered, 1);
    CU_ASSERT_EQUAL(st.reward_sum, 1.0);
    CU_ASSERT_EQUAL(st.tool_calls, n_calls);
    CU_ASSERT_EQUAL(st.tool_failures, 0);
    CU_ASSERT_EQUAL(st.gen_tokens, n_gen);
    /* The transcript is the demonstration itself, payloads from the real tool. */
    char want[8192];
    size_t len = tok_decode(m->demo.ids, (size_t)m->demo.n, want, sizeof want - 1);
    CU_ASSERT_FATAL(len < sizeof want);
    want[len] = '\0';
    const char *body = strchr(text, '\n');
    CU_ASSERT_FATAL(body != NULL);
    CU_ASSERT(strncmp(body + 1, want, len) == 0);
    char turns[32];
    snprintf(turns, sizeof turns, ", %d turns,", n_calls + 1);
    CU_ASSERT(strstr(text, turns) != NULL && strstr(text, turns) < body);
    free(text);
}

static void test_budgets_cut_replay(void)
{
    struct memo *m = memo_model();
    const int32_t *gen = m->demo.ids + m->demo.np;
    int first_turn = 0; /* generated tokens up to and including the first </tool_call> */
    while (gen[first_turn] != TOK_TOOL_CALL_END) first_turn++;
    first_turn++;
    struct episode_stats st;
    /* One turn: the call is made, then the episode ends unanswered. */
    struct episode_config ec = {1, 200, SEQ_MAX, {0.0f, 1.0f, 0, 1}, 2};
    episode_run(&m->e, &tiny, &m->p, &ec, ENV_TRAIN, m->demo.index, 1, &st, NULL, 0);
    CU_ASSERT_EQUAL(st.gen_tokens, first_turn);
    CU_ASSERT_EQUAL(st.tool_calls, 1);
    CU_ASSERT_EQUAL(st.correct, 0);
    CU_ASSERT_EQUAL(st.answered, 0);
    CU_ASSERT_EQUAL(st.reward_sum, 0.0);
    /* A per-turn budget shorter than the first turn. */
    ec = (struct episode_config){8, 3, SEQ_MAX, {0.0f, 1.0f, 0, 1}, 2};
    episode_run(&m->e, &tiny, &m->p, &ec, ENV_TRAIN, m->demo.index, 1, &st, NULL, 0);
    CU_ASSERT_EQUAL(st.gen_tokens, 3);
    CU_ASSERT_EQUAL(st.tool_calls, 0);
    CU_ASSERT_EQUAL(st.correct, 0);
    /* A context budget 5 tokens past the prompt. */
    ec = (struct episode_config){8, 200, m->demo.np + 5, {0.0f, 1.0f, 0, 1}, 2};
    episode_run(&m->e, &tiny, &m->p, &ec, ENV_TRAIN, m->demo.index, 1, &st, NULL, 0);
    CU_ASSERT_EQUAL(st.gen_tokens, first_turn < 5 ? first_turn : 5);
    CU_ASSERT_EQUAL(st.correct, 0);
    /* A context too small for the prompt: nothing generated, no crash. */
    ec = (struct episode_config){8, 200, m->demo.np - 1, {0.0f, 1.0f, 0, 1}, 2};
    episode_run(&m->e, &tiny, &m->p, &ec, ENV_TRAIN, m->demo.index, 1, &st, NULL, 0);
    CU_ASSERT_EQUAL(st.n, 1);
    CU_ASSERT_EQUAL(st.gen_tokens, 0);
    CU_ASSERT_EQUAL(st.correct, 0);
}

static void test_malformed_call(void)
{
    struct memo *m = memo_model();
    struct episode_config ec = {2, 8, SEQ_MAX, {0.0f, 1.0f, 0, 1}, 3};
    struct episode_stats st;
    /* Both memorised problems together: the batch must not mix them up. */
    char *text = run_text(&m->e, &m->p, &ec, ENV_TRAIN, m->demo.index, 2, &st);
    CU_ASSERT_EQUAL(st.n, 2);
    CU_ASSERT(st.tool_failures >= 1);
    char head[64];
    snprintf(head, sizeof head, "train problem %lld:", (long long)m->bad.index);
    const char *second = strstr(text, head);
    CU_ASSERT_FATAL(second != NULL);
    CU_ASSERT(strstr(second, "<|assistant|>2+3</tool_call><tool_result>error: malformed tool "
                             "call") != NULL);
    free(text);
}

/* The payload episode_run appends for a call env_extract_call rejects. */
#define MALFORMED_PAYLOAD "error: malformed tool call"

/* Reference episode without KV caches: every token sampled (same keys) from a full
 * forward over the whole sequence so far (tfm_forward), the tool run as the contract
 * says. Returns the length of ids; *calls counts the tool calls. */
static int reference_episode(const struct env *e, const struct tfm_params *p,
                             const struct episode_config *ec, int64_t index, int32_t *ids,
                             int *calls)
{
    enum { V = TOK_VOCAB_SIZE };
    struct env_problem pr;
    env_problem(e, ENV_EVAL, index, &pr);
    int cap = ec->max_tokens;
    int n = env_prompt_tokens(e, &pr, ids, cap), turn_start = n, turns = 0;
    float *logits = malloc((size_t)cap * V * sizeof *logits);
    float *lp = malloc((size_t)cap * sizeof *lp);
    float scratch[2 * V];
    int32_t *tgt = malloc((size_t)cap * sizeof *tgt);
    for (int i = 0; i < cap; i++) tgt[i] = -1;
    struct tfm_state *st = tfm_state_create(&tiny, cap);
    while (n < cap) {
        struct tfm_batch b = {.n_seq = 1, .seq_len = &n, .tokens = ids, .targets = tgt,
                              .weights = NULL, .temperature = 1.0f, .entropy_weights = NULL};
        tfm_forward(&tiny, p, st, &b, lp, NULL, logits);
        int32_t t = sampler_sample(&ec->sampling, logits + (size_t)(n - 1) * V, V, index, n,
                                   NULL, scratch);
        ids[n++] = t;
        if (t == TOK_ANSWER_END || t == TOK_EOS) break;
        if (t == TOK_TOOL_CALL_END) {
            char call[ENV_CALL_MAX + 1];
            struct env_tool_result res;
            if (env_extract_call(e, ids + turn_start, n - turn_start, call, sizeof call,
                                 NULL) == 0) {
                int open = n - 2; /* the call's bytes are the ids after <tool_call> */
                while (ids[open] != TOK_TOOL_CALL) open--;
                env_tool(e, call, (size_t)(n - 2 - open), 0.0, &res);
            } else {
                res.status = TOOL_FAILURE;
                res.len = snprintf(res.text, sizeof res.text, "%s", MALFORMED_PAYLOAD);
            }
            ++*calls;
            if (++turns >= ec->max_turns || cap - n - 1 < 2) break;
            n += env_payload_tokens(e, &res, ids + n, cap - n - 1);
            turn_start = n;
        } else if (n - turn_start >= ec->max_tokens_per_turn) {
            break;
        }
    }
    tfm_state_free(st);
    free(logits);
    free(lp);
    free(tgt);
    return n;
}

/* After a tool call the decode caches must hold the call, the payload and the new
 * turn at the right positions: a sampled episode of a random model equals the full
 * recompute token for token (the random model makes calls at temperature 1, mostly
 * malformed ones, and keeps going after the payload). */
static void test_matches_full_recompute(void)
{
    enum { N = 32, SHOWN = 4 };
    struct env e;
    calc_env(&e, 0.5);
    struct tfm_params p;
    random_model(&p, 8);
    /* A larger </tool_call> row: the model often ends a turn with a call. */
    for (int c = 0; c < tiny.hidden_size; c++)
        p.lm_head[(size_t)TOK_TOOL_CALL_END * tiny.hidden_size + c] *= 3.0f;
    struct episode_config ec = {3, 24, 200, {1.0f, 1.0f, 0, 13}, 16};
    struct episode_stats st;
    char *text = run_text(&e, &p, &ec, ENV_EVAL, 0, N, &st);
    CU_ASSERT_FATAL(st.tool_calls >= 2);
    int checked = 0;
    int32_t ids[SEQ_MAX];
    char want[8192], head[64];
    for (int64_t i = 0; i < N && checked < SHOWN; i++) {
        snprintf(head, sizeof head, "=== eval problem %lld:", (long long)i);
        const char *at = strstr(text, head);
        CU_ASSERT_FATAL(at != NULL);
        const char *body = strchr(at, '\n') + 1;
        if (!strstr(body, "<tool_result>")) continue; /* only episodes with a call */
        int calls = 0;
        int n = reference_episode(&e, &p, &ec, i, ids, &calls);
        size_t len = tok_decode(ids, (size_t)n, want, sizeof want - 1);
        CU_ASSERT_FATAL(len < sizeof want);
        want[len] = '\0';
        CU_ASSERT(strncmp(body, want, len) == 0 && body[len] == '\n');
        CU_ASSERT(calls >= 1);
        checked++;
    }
    CU_ASSERT(checked >= 2);
    free(text);
    tfm_params_free(&p);
    env_free(&e);
}

static void test_memo_free(void)
{
    if (!g_memo.ok) return;
    tfm_params_free(&g_memo.p);
    env_free(&g_memo.e);
    g_memo.ok = 0;
}

int main(void)
{
    static const struct test_case cases[] = {
        {"teacher-forced demonstrations earn reward 1 (and mistakes cost it)",
         test_teacher_forced_reward},
        {"episodes do not depend on the batch size (greedy and sampled)", test_deterministic},
        {"statistics stay within the budgets", test_stats_within_budgets},
        {"a memorised demonstration replays with the tool inline: reward 1", test_replay_demo},
        {"max_turns, max_tokens_per_turn and max_tokens cut the replay exactly",
         test_budgets_cut_replay},
        {"a call without <tool_call> gets the malformed-call payload", test_malformed_call},
        {"episodes equal a full recompute without KV caches", test_matches_full_recompute},
        {"free the memorised model", test_memo_free},
        {NULL, NULL}};
    static const struct test_suite suites[] = {{"episode", cases}, {NULL, NULL}};
    return test_main(suites);
}
