/*
 * Tests of the CPU rollout engine (rollout_cpu.h) on tiny transformers and the calc
 * environment:
 *   determinism over submission order, slot count and prefill chunk; behaviour
 *   log-probs against the training path (tfm_forward); tool calls run on the pool
 *   and their payloads; the turn limit; budgets and the slot capacity; prefix reuse
 *   (normal, diverging, exact) against a fresh engine; a weight swap in the middle
 *   of turns (versions and log-probs of both models); handback; random models
 *   producing arbitrary output, with swaps and handbacks, never breaking the engine;
 *   and the admission order (fifo vs mlfq) when slots are scarce.
 *
 * Two kinds of model: random ones (tfm_params_init_random), whose output is close
 * to arbitrary bytes and special tokens, and "scripted" ones whose next token is a
 * fixed function of the current token. A scripted model has every layer's output
 * projections (wo, w_down) zero, so each layer adds nothing and the final hidden
 * state is the input token's embedding; each scripted token's embedding is a unit
 * vector of its own dimension d, and lm_head[next][d] = 20 gives the successor a
 * logit of 20 sqrt(C) ~ 113 against 0 for every other id (probability 1 in float).
 * Every other token uses dimension 0, whose successor is the default.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libra/env.h"
#include "libra/rng.h"
#include "libra/rollout_cpu.h"
#include "libra/tfm.h"
#include "libra/tokenizer.h"
#include "libra/workload.h"
#include "testutil.h"

#define CAP 256                          /* slot capacity of every engine here */
#define MAX_TURNS 4
#define CTX_MAX (2 * CAP + ENV_PAYLOAD_MAX + 8)
#define TOL 1e-4                         /* log-prob tolerance (differences seen: ~1e-6) */

static const struct tfm_config tiny = {
    .family = TFM_LLAMA, .vocab_size = TOK_VOCAB_SIZE, .hidden_size = 32, .n_layers = 2,
    .n_heads = 2, .n_kv_heads = 1, .head_dim = 16, .intermediate_size = 64,
    .max_position_embeddings = 256, .rms_norm_eps = 1e-6f, .rope_theta = 1e4f,
    .tie_word_embeddings = 0, .attention_bias = 0, .qk_norm = 0};

static struct env g_env;
static int g_env_ok;

static const struct env *calc_env(void)
{
    if (!g_env_ok) {
        struct env_params ep = {.kind = ENV_KIND_CALC, .seed = 1, .calc_min_steps = 1,
                                .calc_max_steps = 3, .calc_distractors = 1,
                                .demo_mistake_rate = 0.3, .vocab = tok_byte_vocab()};
        char err[256];
        CU_ASSERT_EQUAL_FATAL(env_init(&g_env, &ep, err, sizeof err), 0);
        g_env_ok = 1;
    }
    return &g_env;
}

static struct rollout_cpu_config engine_cfg(int n_slots, int chunk)
{
    return (struct rollout_cpu_config){.n_slots = n_slots, .slot_capacity = CAP,
                                       .prefill_chunk = chunk, .max_turns = MAX_TURNS,
                                       .temperature = 1.0f, .top_p = 0.9f, .top_k = 40,
                                       .seed = 7, .tool_threads = 2, .tool_timeout_s = 5.0};
}

static void random_model(struct tfm_params *p, uint64_t seed)
{
    tfm_params_alloc(p, &tiny);
    tfm_params_init_random(p, &tiny, seed, 0.1f);
}

/* ---- scripted models ---- */

struct rule {
    int32_t from, to;
};

static void scripted_model(struct tfm_params *p, int32_t dflt, const struct rule *rules, int n)
{
    int C = tiny.hidden_size, V = tiny.vocab_size;
    tfm_params_alloc(p, &tiny); /* zeroed: wo = w_down = 0, every layer is the identity */
    for (int i = 0; i < tiny.n_layers * C; i++) p->ln1[i] = p->ln2[i] = 1.0f;
    for (int i = 0; i < C; i++) p->ln_f[i] = 1.0f;
    for (int v = 0; v < V; v++) p->embed[(size_t)v * C] = 1.0f;
    p->lm_head[(size_t)dflt * C] = 20.0f;
    for (int k = 0; k < n; k++) {
        int d = k + 1;
        p->embed[(size_t)rules[k].from * C] = 0.0f;
        p->embed[(size_t)rules[k].from * C + d] = 1.0f;
        p->lm_head[(size_t)rules[k].to * C + d] = 20.0f;
    }
}

/* After <|assistant|> (any unscripted token): <tool_call>1+2</tool_call>; after a
 * payload: <answer>3</answer>; 'a' and 'b' alternate forever. */
static const struct rule calc_script[] = {
    {TOK_TOOL_CALL, '1'}, {'1', '+'}, {'+', '2'}, {'2', TOK_TOOL_CALL_END},
    {TOK_TOOL_RESULT_END, TOK_ANSWER}, {TOK_ANSWER, '3'}, {'3', TOK_ANSWER_END},
    {'a', 'b'}, {'b', 'a'}};
#define N_CALC_SCRIPT ((int)(sizeof calc_script / sizeof calc_script[0]))

static void calc_script_model(struct tfm_params *p)
{
    scripted_model(p, TOK_TOOL_CALL, calc_script, N_CALC_SCRIPT);
}

/* A random model in which token Z (byte 0x01) is followed by </tool_call> (greedy;
 * about 0.995 when sampled): its embedding is 100 along dimension 0, which no other
 * embedding uses, and lm_head[</tool_call>][0] = 2. */
#define Z_TOKEN 1
static void trigger_model(struct tfm_params *p, uint64_t seed)
{
    int C = tiny.hidden_size;
    random_model(p, seed);
    for (int v = 0; v < tiny.vocab_size; v++) p->embed[(size_t)v * C] = 0.0f;
    for (int i = 0; i < C; i++) p->embed[(size_t)Z_TOKEN * C + i] = 0.0f;
    p->embed[(size_t)Z_TOKEN * C] = 100.0f;
    p->lm_head[(size_t)TOK_TOOL_CALL_END * C] = 2.0f;
}

/* ---- copies of results ---- */

struct turn_rec {
    int64_t traj;
    int n_ctx; /* context length at submission */
    int turn, final, partial, n_gen, tool, status, n_payload;
    int32_t ids[CAP];
    float logp[CAP];
    int32_t ver[CAP];
    int32_t payload[ENV_PAYLOAD_MAX + 2];
};

static void copy_out(struct turn_rec *rec, const struct rollout_turn_out *o)
{
    CU_ASSERT_FATAL(o->n_gen >= 0 && o->n_gen <= CAP);
    CU_ASSERT_FATAL(o->n_payload >= 0 && o->n_payload <= ENV_PAYLOAD_MAX + 2);
    rec->traj = o->traj_id;
    rec->turn = o->turn;
    rec->final = o->final;
    rec->partial = o->partial;
    rec->n_gen = o->n_gen;
    rec->tool = o->tool;
    rec->status = o->tool_status;
    rec->n_payload = o->n_payload;
    memcpy(rec->ids, o->ids, (size_t)o->n_gen * sizeof *rec->ids);
    memcpy(rec->logp, o->logp, (size_t)o->n_gen * sizeof *rec->logp);
    memcpy(rec->ver, o->versions, (size_t)o->n_gen * sizeof *rec->ver);
    memcpy(rec->payload, o->payload, (size_t)o->n_payload * sizeof *rec->payload);
}

/* A step that did nothing while work is pending waits for a tool thread. */
static void idle_wait(void)
{
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
}

/* Runs until one result arrives (at most max_steps productive steps) and copies it. */
static int run_one(struct rollout_cpu *r, struct turn_rec *rec, int max_steps)
{
    for (int i = 0, idle = 0; i < max_steps && idle < 50000;) {
        const struct rollout_turn_out *o;
        int n = rollout_cpu_take(r, &o);
        if (n > 0) {
            CU_ASSERT_EQUAL(n, 1);
            copy_out(rec, &o[0]);
            return 1;
        }
        if (rollout_cpu_step(r)) {
            i++;
        } else {
            idle++;
            idle_wait();
        }
    }
    CU_FAIL("no result");
    return 0;
}

static void submit(struct rollout_cpu *r, int64_t traj, int64_t key, int turn, int budget,
                   int greedy, const int32_t *ctx, int n_ctx)
{
    struct rollout_turn_in in = {.traj_id = traj, .rng_key = key, .turn = turn, .budget = budget,
                                 .greedy = greedy, .n_ctx = n_ctx, .ctx = ctx};
    rollout_cpu_submit(r, &in);
}

/* ---- whole trajectories, the way a rollout worker drives the engine ---- */

struct traj {
    int64_t id, key;
    int greedy, done, n_turns;
    int n_ctx;
    int32_t ctx[CTX_MAX];
    struct turn_rec rec[MAX_TURNS];
};

/* Called after the k-th productive step of run_trajs (set_weights, handback, ...). */
typedef void (*step_hook)(struct rollout_cpu *r, int k, void *ctx);

static void traj_submit(struct rollout_cpu *r, struct traj *t, int budget)
{
    int turn = t->n_turns;
    CU_ASSERT_FATAL(turn < MAX_TURNS);
    t->rec[turn].n_ctx = t->n_ctx;
    submit(r, t->id, t->key, turn, budget, t->greedy, t->ctx, t->n_ctx);
}

/* Folds a result into its trajectory: generated ids and payload join the context.
 * A partial turn keeps its ids and is submitted again (same turn, less budget). */
static void traj_absorb(struct traj *t, const struct turn_rec *rec)
{
    CU_ASSERT_EQUAL(rec->turn, t->n_turns);
    t->rec[t->n_turns] = *rec;
    t->rec[t->n_turns].n_ctx = t->n_ctx;
    for (int i = 0; i < rec->n_gen && t->n_ctx < CTX_MAX; i++) t->ctx[t->n_ctx++] = rec->ids[i];
    for (int i = 0; i < rec->n_payload && t->n_ctx < CTX_MAX; i++)
        t->ctx[t->n_ctx++] = rec->payload[i];
    if (rec->final) t->done = 1;
    else if (!rec->partial) t->n_turns++;
}

static void init_trajs(struct traj *t, int n, int64_t first_id, int greedy_every)
{
    const struct env *e = calc_env();
    for (int i = 0; i < n; i++) {
        memset(&t[i], 0, sizeof t[i]);
        t[i].id = first_id + i;
        t[i].key = 1000 + first_id + i;
        t[i].greedy = greedy_every > 0 && i % greedy_every == 0;
        struct env_problem pr;
        env_problem(e, ENV_TRAIN, i, &pr);
        t[i].n_ctx = env_prompt_tokens(e, &pr, t[i].ctx, CTX_MAX);
        CU_ASSERT_FATAL(t[i].n_ctx > 0 && t[i].n_ctx < CAP);
    }
}

static struct traj *find_traj(struct traj *t, int n, int64_t id)
{
    for (int i = 0; i < n; i++)
        if (t[i].id == id) return &t[i];
    CU_FAIL_FATAL("a result for an unknown trajectory");
    return NULL;
}

/* Submits turn 0 of every trajectory in the given order, then runs until all are
 * final. Results are copied before the next submission (take's storage expires).
 * Returns the steps run. */
static int run_trajs(struct rollout_cpu *r, struct traj *t, int n, const int *order, int budget,
                     step_hook hook, void *hook_ctx)
{
    static struct turn_rec got[64];
    for (int i = 0; i < n; i++) traj_submit(r, &t[order ? order[i] : i], budget);
    for (int k = 0, idle = 0; k < 20000 && idle < 50000;) {
        int did = rollout_cpu_step(r);
        if (did) {
            k++;
            if (hook) hook(r, k, hook_ctx);
        }
        const struct rollout_turn_out *o;
        int m = rollout_cpu_take(r, &o);
        CU_ASSERT_FATAL(m <= 64);
        for (int j = 0; j < m; j++) copy_out(&got[j], &o[j]);
        for (int j = 0; j < m; j++) {
            struct traj *tr = find_traj(t, n, got[j].traj);
            traj_absorb(tr, &got[j]);
            int left = got[j].partial ? budget - got[j].n_gen : budget;
            if (!tr->done) traj_submit(r, tr, left > 0 ? left : 1);
        }
        if (!did && m == 0) {
            if (rollout_cpu_busy(r) == 0) return k;
            idle++;
            idle_wait();
        }
    }
    CU_FAIL("the trajectories did not finish");
    return -1;
}

/* ---- the training path ---- */

/* max |logp[i] - training log-prob| over generated tokens i in [from, to) whose
 * version is ver (ver < 0: all), for the sequence ctx + ids and temperature T. */
static double logp_gap(const struct tfm_params *p, const int32_t *ctx, int n_ctx,
                       const struct turn_rec *rec, int from, int to, int ver, float T)
{
    int n = n_ctx + rec->n_gen;
    int32_t *tok = malloc((size_t)n * sizeof *tok), *tgt = malloc((size_t)n * sizeof *tgt);
    float *lp = malloc((size_t)n * sizeof *lp);
    memcpy(tok, ctx, (size_t)n_ctx * sizeof *tok);
    memcpy(tok + n_ctx, rec->ids, (size_t)rec->n_gen * sizeof *tok);
    for (int i = 0; i < n; i++) tgt[i] = i + 1 < n ? tok[i + 1] : -1;
    struct tfm_batch b = {.n_seq = 1, .seq_len = &n, .tokens = tok, .targets = tgt,
                          .weights = NULL, .temperature = T};
    struct tfm_state *s = tfm_state_create(&tiny, n);
    tfm_forward(&tiny, p, s, &b, lp, NULL, NULL);
    double worst = 0;
    for (int i = from; i < to; i++)
        if (ver < 0 || rec->ver[i] == ver)
            worst = test_worse(worst, fabs((double)rec->logp[i] - lp[n_ctx - 1 + i]));
    tfm_state_free(s);
    free(tok);
    free(tgt);
    free(lp);
    return worst;
}

/* ---- helpers for checks ---- */

static int ids_equal(const int32_t *a, const int32_t *b, int n)
{
    return n == 0 || memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* Ids of a text with special spellings parsed. */
static int encode(const char *text, int32_t *out, int cap)
{
    return (int)tok_encode(text, strlen(text), 1, out, (size_t)cap);
}

static void fill_random_bytes(int32_t *out, int n, uint64_t key)
{
    struct rng g;
    rng_init(&g, 5, key, 0, 0);
    for (int i = 0; i < n; i++) out[i] = 32 + (int32_t)rng_below(&g, 95); /* printable */
}

/* Same turns, same tokens (ids exactly, log-probs within TOL); returns the worst
 * log-prob difference. */
static double compare_trajs(const struct traj *a, const struct traj *b, int n)
{
    double worst = 0;
    for (int i = 0; i < n; i++) {
        CU_ASSERT(a[i].done && b[i].done);
        CU_ASSERT_EQUAL(a[i].n_turns, b[i].n_turns);
        CU_ASSERT_EQUAL(a[i].n_ctx, b[i].n_ctx);
        if (a[i].n_ctx != b[i].n_ctx || a[i].n_turns != b[i].n_turns) continue;
        CU_ASSERT(ids_equal(a[i].ctx, b[i].ctx, a[i].n_ctx));
        for (int k = 0; k <= a[i].n_turns; k++) {
            const struct turn_rec *x = &a[i].rec[k], *y = &b[i].rec[k];
            CU_ASSERT_EQUAL(x->n_gen, y->n_gen);
            CU_ASSERT_EQUAL(x->final, y->final);
            CU_ASSERT_EQUAL(x->status, y->status);
            if (x->n_gen != y->n_gen) continue;
            CU_ASSERT(ids_equal(x->ids, y->ids, x->n_gen));
            CU_ASSERT(ids_equal(x->ver, y->ver, x->n_gen));
            for (int j = 0; j < x->n_gen; j++)
                worst = test_worse(worst, fabs((double)x->logp[j] - y->logp[j]));
        }
    }
    CU_ASSERT(worst <= TOL);
    return worst;
}

static int64_t total_turns(const struct traj *t, int n)
{
    int64_t s = 0;
    for (int i = 0; i < n; i++) s += t[i].n_turns + 1;
    return s;
}

/* ---- (1) determinism ---- */

static void handback_hook(struct rollout_cpu *r, int k, void *ctx)
{
    (void)ctx;
    if (k == 10) rollout_cpu_handback(r);
}

static void test_determinism(void)
{
    enum { N = 8 };
    struct tfm_params p;
    trigger_model(&p, 11);
    const struct env *e = calc_env();
    struct traj *base = calloc(N, sizeof *base), *other = calloc(N, sizeof *other);
    /* slots, prefill chunk, submission order */
    static const int slots[] = {1, 3, 8, 4};
    static const int chunks[] = {16, 5, 64, 1};
    static const int orders[][N] = {{0, 1, 2, 3, 4, 5, 6, 7}, {7, 6, 5, 4, 3, 2, 1, 0},
                                    {0, 7, 1, 6, 2, 5, 3, 4}, {3, 1, 4, 0, 5, 7, 2, 6}};
    double worst = 0;
    for (int v = 0; v < 4; v++) {
        struct traj *t = v == 0 ? base : other;
        init_trajs(t, N, 0, 2);
        for (int i = 1; i < N; i += 2) t[i].ctx[t[i].n_ctx++] = Z_TOKEN; /* a call first */
        struct rollout_cpu_config rc = engine_cfg(slots[v], chunks[v]);
        struct rollout_cpu *r = rollout_cpu_create(&tiny, p.mem, 1, e, &rc);
        CU_ASSERT(run_trajs(r, t, N, orders[v], 40, NULL, NULL) > 0);
        CU_ASSERT(total_turns(t, N) > N);
        rollout_cpu_free(r);
        if (v > 0) worst = fmax(worst, compare_trajs(base, other, N));
    }
    /* handed back in the middle and resubmitted: the same token sequences */
    init_trajs(other, N, 0, 2);
    for (int i = 1; i < N; i += 2) other[i].ctx[other[i].n_ctx++] = Z_TOKEN;
    struct rollout_cpu_config rc = engine_cfg(3, 4);
    struct rollout_cpu *r = rollout_cpu_create(&tiny, p.mem, 1, e, &rc);
    CU_ASSERT(run_trajs(r, other, N, NULL, 40, handback_hook, NULL) > 0);
    rollout_cpu_free(r);
    for (int i = 0; i < N; i++)
        CU_ASSERT(other[i].n_ctx == base[i].n_ctx &&
                  ids_equal(other[i].ctx, base[i].ctx, base[i].n_ctx));
    fprintf(stderr, "\n  determinism: %lld turns, worst |logp difference| across engines %.3g\n",
            (long long)total_turns(base, N), worst);
    free(base);
    free(other);
    tfm_params_free(&p);
}

/* ---- (2) behaviour log-probs = the training path ---- */

static void test_logprob_training_path(void)
{
    enum { N = 6 };
    struct tfm_params p;
    trigger_model(&p, 12);
    struct traj *t = calloc(N, sizeof *t);
    init_trajs(t, N, 100, 3);
    for (int i = 0; i < N; i += 2) t[i].ctx[t[i].n_ctx++] = Z_TOKEN; /* a call first */
    struct rollout_cpu_config rc = engine_cfg(4, 8);
    rc.temperature = 0.7f;
    struct rollout_cpu *r = rollout_cpu_create(&tiny, p.mem, 1, calc_env(), &rc);
    run_trajs(r, t, N, NULL, 48, NULL, NULL);
    double worst = 0;
    int64_t tokens = 0;
    for (int i = 0; i < N; i++)
        for (int k = 0; k <= t[i].n_turns; k++) {
            const struct turn_rec *x = &t[i].rec[k];
            float T = t[i].greedy ? 1.0f : rc.temperature;
            worst = fmax(worst, logp_gap(&p, t[i].ctx, x->n_ctx, x, 0, x->n_gen, -1, T));
            tokens += x->n_gen;
        }
    CU_ASSERT(tokens > 0);
    CU_ASSERT(total_turns(t, N) > N);
    CU_ASSERT(worst <= TOL);
    fprintf(stderr, "\n  %lld tokens: worst |behaviour - training logp| %.3g\n",
            (long long)tokens, worst);
    rollout_cpu_free(r);
    free(t);
    tfm_params_free(&p);
}

/* ---- (3) tool calls ---- */

static void test_tool_call(void)
{
    struct tfm_params p;
    calc_script_model(&p);
    struct rollout_cpu_config rc = engine_cfg(2, 4);
    struct rollout_cpu *r = rollout_cpu_create(&tiny, p.mem, 1, calc_env(), &rc);
    int32_t ctx[64], want[64];
    int n_ctx = encode("<|bos|><|user|>q<|assistant|>", ctx, 64);
    struct turn_rec rec;
    submit(r, 5, 55, 0, 16, 0, ctx, n_ctx);
    CU_ASSERT_EQUAL(rollout_cpu_busy(r), 1);
    CU_ASSERT_FATAL(run_one(r, &rec, 100));
    int n_want = encode("<tool_call>1+2</tool_call>", want, 64);
    CU_ASSERT_EQUAL(rec.traj, 5);
    CU_ASSERT_EQUAL(rec.n_gen, n_want);
    CU_ASSERT(rec.n_gen == n_want && ids_equal(rec.ids, want, n_want));
    CU_ASSERT(!rec.final && !rec.partial);
    CU_ASSERT_EQUAL(rec.tool, ENV_TOOL_CALC);
    CU_ASSERT_EQUAL(rec.status, TOOL_SUCCESS);
    for (int i = 0; i < rec.n_gen; i++) {
        CU_ASSERT(rec.logp[i] <= 0 && rec.logp[i] > -1e-6f);
        CU_ASSERT_EQUAL(rec.ver[i], 1);
    }
    n_want = encode("<tool_result>3</tool_result>", want, 64);
    CU_ASSERT(rec.n_payload == n_want && ids_equal(rec.payload, want, n_want));

    /* the next turn sees the payload and answers */
    memcpy(ctx + n_ctx, rec.ids, (size_t)rec.n_gen * sizeof *ctx);
    n_ctx += rec.n_gen;
    memcpy(ctx + n_ctx, rec.payload, (size_t)rec.n_payload * sizeof *ctx);
    n_ctx += rec.n_payload;
    submit(r, 5, 55, 1, 16, 0, ctx, n_ctx);
    CU_ASSERT_FATAL(run_one(r, &rec, 100));
    n_want = encode("<answer>3</answer>", want, 64);
    CU_ASSERT(rec.n_gen == n_want && ids_equal(rec.ids, want, n_want));
    CU_ASSERT(rec.final && !rec.partial);
    CU_ASSERT_EQUAL(rec.turn, 1);
    CU_ASSERT_EQUAL(rec.tool, -1);
    CU_ASSERT_EQUAL(rec.status, TOOL_NONE);
    CU_ASSERT_EQUAL(rec.n_payload, 0);
    CU_ASSERT_EQUAL(rollout_cpu_busy(r), 0);

    /* a </tool_call> without <tool_call> in the turn: no tool runs, an error payload */
    n_ctx = encode("<|bos|><|user|>+", ctx, 64);
    submit(r, 6, 66, 0, 16, 0, ctx, n_ctx);
    CU_ASSERT_FATAL(run_one(r, &rec, 100));
    n_want = encode("2</tool_call>", want, 64);
    CU_ASSERT(rec.n_gen == n_want && ids_equal(rec.ids, want, n_want));
    CU_ASSERT(!rec.final);
    CU_ASSERT_EQUAL(rec.tool, ENV_TOOL_CALC);
    CU_ASSERT_EQUAL(rec.status, TOOL_FAILURE);
    n_want = encode("<tool_result>error: malformed tool call</tool_result>", want, 64);
    CU_ASSERT(rec.n_payload == n_want && ids_equal(rec.payload, want, n_want));
    rollout_cpu_free(r);

    /* a tool past its deadline (1 ns: no thread wakes up that fast) is a timeout */
    rc.tool_timeout_s = 1e-9;
    r = rollout_cpu_create(&tiny, p.mem, 1, calc_env(), &rc);
    n_ctx = encode("<|bos|><|user|>q<|assistant|>", ctx, 64);
    submit(r, 7, 77, 0, 16, 0, ctx, n_ctx);
    CU_ASSERT_FATAL(run_one(r, &rec, 100));
    CU_ASSERT(!rec.final && rec.n_gen == 5);
    CU_ASSERT_EQUAL(rec.tool, ENV_TOOL_CALC);
    CU_ASSERT_EQUAL(rec.status, TOOL_TIMEOUT);
    n_want = encode("<tool_result>error: timeout</tool_result>", want, 64);
    CU_ASSERT(rec.n_payload == n_want && ids_equal(rec.payload, want, n_want));
    rollout_cpu_free(r);
    tfm_params_free(&p);
}

/* ---- (4) the turn limit ---- */

static void test_max_turns(void)
{
    struct tfm_params p;
    calc_script_model(&p);
    struct rollout_cpu_config rc = engine_cfg(1, 4);
    rc.max_turns = 2;
    struct rollout_cpu *r = rollout_cpu_create(&tiny, p.mem, 1, calc_env(), &rc);
    int32_t ctx[64];
    int n_ctx = encode("<|bos|><|user|>q<|assistant|>", ctx, 64);
    struct turn_rec rec;
    submit(r, 9, 9, 0, 16, 0, ctx, n_ctx);
    CU_ASSERT_FATAL(run_one(r, &rec, 100));
    CU_ASSERT(!rec.final && rec.n_payload > 0);
    /* the last allowed turn: the call ends the trajectory, no tool runs */
    submit(r, 9, 9, 1, 16, 0, ctx, n_ctx);
    CU_ASSERT_FATAL(run_one(r, &rec, 100));
    CU_ASSERT_EQUAL(rec.n_gen, 5);
    CU_ASSERT_EQUAL(rec.ids[rec.n_gen - 1], TOK_TOOL_CALL_END);
    CU_ASSERT(rec.final);
    CU_ASSERT_EQUAL(rec.tool, -1);
    CU_ASSERT_EQUAL(rec.status, TOOL_NONE);
    CU_ASSERT_EQUAL(rec.n_payload, 0);
    CU_ASSERT_EQUAL(rollout_cpu_busy(r), 0);
    rollout_cpu_free(r);
    tfm_params_free(&p);
}

/* ---- (5) budgets and capacity ---- */

static void test_budget(void)
{
    struct tfm_params p;
    calc_script_model(&p);
    struct rollout_cpu_config rc = engine_cfg(2, 32);
    struct rollout_cpu *r = rollout_cpu_create(&tiny, p.mem, 1, calc_env(), &rc);
    int32_t ctx[CAP + 16];
    ctx[0] = TOK_BOS;
    for (int i = 1; i < CAP + 16; i++) ctx[i] = 'a';
    struct turn_rec rec;
    /* budget reached: final (truncated) */
    submit(r, 1, 1, 0, 7, 0, ctx, 2);
    CU_ASSERT_FATAL(run_one(r, &rec, 100));
    CU_ASSERT(rec.final && !rec.partial && rec.n_gen == 7);
    for (int i = 0; i < rec.n_gen; i++) CU_ASSERT_EQUAL(rec.ids[i], i % 2 ? 'a' : 'b');
    CU_ASSERT_EQUAL(rec.tool, -1);
    /* the slot's capacity clamps the budget */
    submit(r, 2, 2, 0, 20, 0, ctx, CAP - 3);
    CU_ASSERT_FATAL(run_one(r, &rec, 100));
    CU_ASSERT(rec.final && rec.n_gen == 3);
    /* a context that fills the slot, one past it, and a zero budget: final at once */
    const int lens[] = {CAP, CAP + 10, 5}, budgets[] = {5, 5, 0};
    for (int k = 0; k < 3; k++) {
        submit(r, 3 + k, 3, 0, budgets[k], 0, ctx, lens[k]);
        const struct rollout_turn_out *o;
        CU_ASSERT_EQUAL_FATAL(rollout_cpu_take(r, &o), 1);
        CU_ASSERT(o[0].final && !o[0].partial && o[0].n_gen == 0 && o[0].traj_id == 3 + k);
    }
    CU_ASSERT_EQUAL(rollout_cpu_busy(r), 0);
    rollout_cpu_free(r);
    tfm_params_free(&p);
}

/* ---- (6) prefix reuse ---- */

/* Turn 0 of traj on r: ctx0 ends with the trigger, so greedy decoding emits
 * </tool_call> at once (a malformed call): the slot stays cached for traj. */
static void trigger_turn(struct rollout_cpu *r, int64_t traj, const int32_t *ctx0, int n0,
                         struct turn_rec *rec)
{
    submit(r, traj, traj, 0, 8, 1, ctx0, n0);
    CU_ASSERT_FATAL(run_one(r, rec, 100));
    CU_ASSERT_FATAL(rec->n_gen == 1 && rec->ids[0] == TOK_TOOL_CALL_END);
    CU_ASSERT(!rec->final && rec->status == TOOL_FAILURE && rec->n_payload > 2);
}

static void test_prefix_reuse(void)
{
    struct tfm_params p;
    trigger_model(&p, 21);
    struct rollout_cpu_config rc = engine_cfg(2, 8), rc1 = engine_cfg(1, 16);
    struct rollout_cpu *r = rollout_cpu_create(&tiny, p.mem, 1, calc_env(), &rc);
    struct rollout_cpu *fresh = rollout_cpu_create(&tiny, p.mem, 1, calc_env(), &rc1);
    int32_t ctx0[40], ctx1[CTX_MAX];
    int n0 = 0;
    ctx0[n0++] = TOK_BOS;
    ctx0[n0++] = TOK_USER;
    fill_random_bytes(ctx0 + n0, 24, 1);
    n0 += 24;
    ctx0[n0++] = TOK_ASSISTANT;
    ctx0[n0++] = Z_TOKEN;
    double worst = 0;
    /* case 0: the usual next turn (cache + last token + payload + user text);
     * case 1: a context that leaves the cache after 5 ids; case 2: exactly the cache */
    for (int c = 0; c < 3; c++) {
        int64_t traj = 10 + c;
        struct turn_rec rec0, rec1, ref;
        trigger_turn(r, traj, ctx0, n0, &rec0);
        int n1 = n0;
        memcpy(ctx1, ctx0, (size_t)n0 * sizeof *ctx1);
        if (c < 2) {
            ctx1[n1++] = rec0.ids[0];
            memcpy(ctx1 + n1, rec0.payload, (size_t)rec0.n_payload * sizeof *ctx1);
            n1 += rec0.n_payload;
            fill_random_bytes(ctx1 + n1, 10, 2);
            n1 += 10;
        }
        if (c == 1) ctx1[5] = ctx1[5] == 'x' ? 'y' : 'x';
        submit(r, traj, traj, 1, 30, 0, ctx1, n1);
        CU_ASSERT_FATAL(run_one(r, &rec1, 100));
        submit(fresh, traj, traj, 1, 30, 0, ctx1, n1);
        CU_ASSERT_FATAL(run_one(fresh, &ref, 100));
        CU_ASSERT_EQUAL(rec1.n_gen, ref.n_gen);
        CU_ASSERT(rec1.n_gen == ref.n_gen && ids_equal(rec1.ids, ref.ids, ref.n_gen));
        CU_ASSERT(rec1.n_gen > 1 || c == 2);
        for (int j = 0; j < rec1.n_gen && j < ref.n_gen; j++)
            worst = test_worse(worst, fabs((double)rec1.logp[j] - ref.logp[j]));
        double gap = logp_gap(&p, ctx1, n1, &rec1, 0, rec1.n_gen, -1, rc.temperature);
        CU_ASSERT(gap <= TOL);
        worst = fmax(worst, gap);
    }
    CU_ASSERT(worst <= TOL);
    fprintf(stderr, "\n  worst |logp difference| reuse vs fresh vs training: %.3g\n", worst);
    rollout_cpu_free(fresh);
    rollout_cpu_free(r);
    tfm_params_free(&p);
}

/* ---- (7) weights swapped in the middle of turns ---- */

struct swap_ctx {
    const struct tfm_params *p;
    int at, version;
};

static void swap_hook(struct rollout_cpu *r, int k, void *ctx)
{
    const struct swap_ctx *s = ctx;
    if (k == s->at) rollout_cpu_set_weights(r, s->p->mem, s->version);
}

static void test_set_weights(void)
{
    enum { N = 4 };
    struct tfm_params a, b, scripted;
    random_model(&a, 31);
    random_model(&b, 32);
    struct traj *t = calloc(N, sizeof *t);
    init_trajs(t, N, 200, 0);
    struct rollout_cpu_config rc = engine_cfg(2, 8);
    rc.top_k = 0; /* long turns: the random model rarely stops */
    rc.top_p = 1.0f;
    struct rollout_cpu *r = rollout_cpu_create(&tiny, a.mem, 1, calc_env(), &rc);
    struct swap_ctx sw = {&b, 3, 2};
    run_trajs(r, t, N, NULL, 30, swap_hook, &sw);
    int mixed = 0, only_new = 0;
    double worst = 0;
    for (int i = 0; i < N; i++)
        for (int k = 0; k <= t[i].n_turns; k++) {
            const struct turn_rec *x = &t[i].rec[k];
            int n1 = 0;
            for (int j = 0; j < x->n_gen; j++) {
                CU_ASSERT(x->ver[j] == 1 || x->ver[j] == 2);
                CU_ASSERT(j == 0 || x->ver[j] >= x->ver[j - 1]);
                n1 += x->ver[j] == 1;
            }
            mixed += n1 > 0 && n1 < x->n_gen;
            only_new += n1 == 0 && x->n_gen > 0;
            worst = fmax(worst, logp_gap(&a, t[i].ctx, x->n_ctx, x, 0, x->n_gen, 1, 1.0f));
            worst = fmax(worst, logp_gap(&b, t[i].ctx, x->n_ctx, x, 0, x->n_gen, 2, 1.0f));
        }
    CU_ASSERT(mixed >= 1);
    CU_ASSERT(only_new >= 1);
    CU_ASSERT(worst <= TOL);
    rollout_cpu_free(r);

    /* an idle cached slot built with the old weights is rebuilt with the new ones */
    calc_script_model(&scripted);
    r = rollout_cpu_create(&tiny, scripted.mem, 1, calc_env(), &rc);
    int32_t ctx[64];
    int n_ctx = encode("<|bos|><|user|>q<|assistant|>", ctx, 64);
    struct turn_rec rec;
    submit(r, 1, 1, 0, 16, 0, ctx, n_ctx);
    CU_ASSERT_FATAL(run_one(r, &rec, 100));
    CU_ASSERT_FATAL(!rec.final && rec.n_payload > 0);
    memcpy(ctx + n_ctx, rec.ids, (size_t)rec.n_gen * sizeof *ctx);
    n_ctx += rec.n_gen;
    memcpy(ctx + n_ctx, rec.payload, (size_t)rec.n_payload * sizeof *ctx);
    n_ctx += rec.n_payload;
    rollout_cpu_set_weights(r, b.mem, 7);
    submit(r, 1, 1, 1, 16, 0, ctx, n_ctx);
    CU_ASSERT_FATAL(run_one(r, &rec, 100));
    CU_ASSERT(rec.n_gen > 0);
    for (int j = 0; j < rec.n_gen; j++) CU_ASSERT_EQUAL(rec.ver[j], 7);
    double gap = logp_gap(&b, ctx, n_ctx, &rec, 0, rec.n_gen, -1, 1.0f);
    CU_ASSERT(gap <= TOL);
    fprintf(stderr, "\n  %d turns across the swap; worst |logp - training (own version)| %.3g\n",
            mixed, fmax(worst, gap));
    rollout_cpu_free(r);
    free(t);
    tfm_params_free(&scripted);
    tfm_params_free(&b);
    tfm_params_free(&a);
}

/* ---- (8) handback ---- */

static void test_handback(void)
{
    struct tfm_params p;
    calc_script_model(&p);
    struct rollout_cpu_config rc = engine_cfg(2, 4);
    struct rollout_cpu *r = rollout_cpu_create(&tiny, p.mem, 1, calc_env(), &rc);
    int32_t loop[8], call[64], loop2[8];
    int n_loop = encode("<|bos|>a", loop, 8), n_call = encode("<|bos|>q<|assistant|>", call, 64);
    encode("<|bos|>b", loop2, 8);
    submit(r, 1, 1, 0, 100, 0, loop, n_loop);  /* decodes b a b a ... */
    submit(r, 2, 2, 0, 100, 0, call, n_call);  /* a tool call after 5 tokens */
    submit(r, 3, 3, 0, 100, 0, loop2, n_loop); /* queued: both slots are taken */
    for (int k = 0; k < 4; k++) CU_ASSERT(rollout_cpu_step(r));
    const struct rollout_turn_out *o;
    CU_ASSERT_EQUAL(rollout_cpu_take(r, &o), 0);
    CU_ASSERT_EQUAL(rollout_cpu_busy(r), 3);
    rollout_cpu_handback(r);
    CU_ASSERT_EQUAL(rollout_cpu_busy(r), 0);
    int n = rollout_cpu_take(r, &o), seen = 0;
    CU_ASSERT_EQUAL_FATAL(n, 3);
    for (int i = 0; i < n; i++) {
        seen |= 1 << o[i].traj_id;
        CU_ASSERT_EQUAL(o[i].final, 0);
        if (o[i].traj_id == 1) { /* partial, with its 5 tokens */
            CU_ASSERT(o[i].partial && o[i].n_gen == 5);
            for (int j = 0; j < o[i].n_gen; j++) CU_ASSERT_EQUAL(o[i].ids[j], j % 2 ? 'a' : 'b');
            CU_ASSERT_EQUAL(o[i].tool, -1);
        } else if (o[i].traj_id == 2) { /* its tool completed */
            CU_ASSERT(!o[i].partial && o[i].n_gen == 5);
            CU_ASSERT_EQUAL(o[i].tool_status, TOOL_SUCCESS);
            CU_ASSERT_EQUAL(o[i].n_payload, 3); /* <tool_result> 3 </tool_result> */
        } else {
            CU_ASSERT(o[i].partial && o[i].n_gen == 0);
        }
    }
    CU_ASSERT_EQUAL(seen, 0xe);
    /* the engine goes on: the partial turn continues where it stopped */
    int32_t more[16];
    memcpy(more, loop, (size_t)n_loop * sizeof *more);
    const int32_t tail[5] = {'b', 'a', 'b', 'a', 'b'};
    memcpy(more + n_loop, tail, sizeof tail);
    struct turn_rec rec;
    submit(r, 1, 1, 0, 3, 0, more, n_loop + 5);
    CU_ASSERT_FATAL(run_one(r, &rec, 100));
    CU_ASSERT(rec.final && rec.n_gen == 3 && rec.ids[0] == 'a' && rec.ids[2] == 'a');
    rollout_cpu_free(r);
    tfm_params_free(&p);
}

/* ---- (9) arbitrary model output ---- */

struct chaos_ctx {
    const struct tfm_params *p[2];
};

/* Weight swaps and a handback in the middle of the run. */
static void chaos_hook(struct rollout_cpu *r, int k, void *ctx)
{
    const struct chaos_ctx *c = ctx;
    if (k == 15) rollout_cpu_set_weights(r, c->p[1]->mem, 2);
    if (k == 30) rollout_cpu_handback(r);
    if (k == 45) rollout_cpu_set_weights(r, c->p[0]->mem, 3);
}

static int is_stop(int32_t id)
{
    return id == TOK_TOOL_CALL_END || id == TOK_ANSWER_END || id == TOK_EOS;
}

static void test_arbitrary_output(void)
{
    enum { N = 32, BUDGET = 64 };
    struct tfm_params a, b;
    trigger_model(&a, 41); /* more tool turns: half the prompts end with the trigger */
    random_model(&b, 42);
    struct traj *t = calloc(N, sizeof *t);
    init_trajs(t, N, 300, 5);
    for (int i = 0; i < N; i += 2) t[i].ctx[t[i].n_ctx++] = Z_TOKEN;
    struct rollout_cpu_config rc = engine_cfg(6, 7);
    rc.temperature = 1.5f;
    rc.top_p = 1.0f;
    rc.top_k = 0;
    struct rollout_cpu *r = rollout_cpu_create(&tiny, a.mem, 1, calc_env(), &rc);
    struct chaos_ctx cc = {{&a, &b}};
    CU_ASSERT(run_trajs(r, t, N, NULL, BUDGET, chaos_hook, &cc) > 45);
    int64_t tokens = 0, calls = 0, failures = 0, finals = 0;
    for (int i = 0; i < N; i++) {
        CU_ASSERT(t[i].done);
        for (int k = 0; k <= t[i].n_turns; k++) {
            const struct turn_rec *x = &t[i].rec[k];
            CU_ASSERT(x->n_gen <= BUDGET && !x->partial);
            for (int j = 0; j < x->n_gen; j++) {
                CU_ASSERT(x->ids[j] >= 0 && x->ids[j] < TOK_VOCAB_SIZE);
                CU_ASSERT(x->logp[j] <= 0 && isfinite(x->logp[j]));
                CU_ASSERT(x->ver[j] >= 1 && x->ver[j] <= 3);
                CU_ASSERT(j == x->n_gen - 1 || !is_stop(x->ids[j]));
            }
            int ends_call = x->n_gen > 0 && x->ids[x->n_gen - 1] == TOK_TOOL_CALL_END;
            CU_ASSERT_EQUAL(x->final, k == t[i].n_turns);
            if (!x->final) {
                CU_ASSERT(ends_call && x->n_payload >= 2);
                CU_ASSERT(x->payload[0] == TOK_TOOL_RESULT &&
                          x->payload[x->n_payload - 1] == TOK_TOOL_RESULT_END);
                CU_ASSERT_EQUAL(x->tool, ENV_TOOL_CALC);
                CU_ASSERT(x->status == TOOL_SUCCESS || x->status == TOOL_FAILURE);
                calls++;
                failures += x->status == TOOL_FAILURE;
            } else {
                CU_ASSERT_EQUAL(x->n_payload, 0);
                CU_ASSERT(!ends_call || k + 1 == MAX_TURNS);
                finals++;
            }
            tokens += x->n_gen;
        }
    }
    fprintf(stderr, "\n  %lld tokens, %lld tool turns (%lld failed), %lld finals\n",
            (long long)tokens, (long long)calls, (long long)failures, (long long)finals);
    int64_t counted;
    double busy;
    rollout_cpu_take_counters(r, &counted, &busy);
    CU_ASSERT(counted >= tokens); /* handed-back tokens were generated too */
    CU_ASSERT(busy > 0);
    rollout_cpu_take_counters(r, &counted, &busy);
    CU_ASSERT(counted == 0 && busy == 0);
    rollout_cpu_free(r);
    free(t);
    tfm_params_free(&b);
    tfm_params_free(&a);
}

/* ---- (10) the instance queue ---- */

/* One slot; a long-estimate turn then a short-estimate one are queued. Returns the
 * trajectory of the first result (the first admitted: one turn at a time). */
static int64_t first_served(const struct iqueue_config *q)
{
    struct tfm_params p;
    calc_script_model(&p);
    struct rollout_cpu_config rc = engine_cfg(1, 4);
    rc.max_turns = 1; /* </tool_call> ends the trajectory: no tool runs */
    rc.queue = *q;
    struct rollout_cpu *r = rollout_cpu_create(&tiny, p.mem, 1, calc_env(), &rc);
    int32_t ctx[64];
    int n_ctx = encode("<|bos|><|user|>q<|assistant|>", ctx, 64);
    struct rollout_turn_in in = {.traj_id = 1, .rng_key = 1, .budget = 16, .n_ctx = n_ctx,
                                 .ctx = ctx, .est_remaining = 100000};
    rollout_cpu_submit(r, &in);
    in.traj_id = in.rng_key = 2;
    in.est_remaining = 10;
    rollout_cpu_submit(r, &in);
    int queued, running;
    double kv;
    rollout_cpu_queue_stats(r, &queued, &running, &kv);
    CU_ASSERT(queued == 2 && running == 0 && kv == 0.0);
    CU_ASSERT(rollout_cpu_step(r));
    rollout_cpu_queue_stats(r, &queued, &running, &kv);
    CU_ASSERT(queued == 1 && running == 1 && kv == 1.0);
    struct turn_rec a, b;
    CU_ASSERT_FATAL(run_one(r, &a, 100));
    CU_ASSERT_FATAL(run_one(r, &b, 100));
    CU_ASSERT(a.final && b.final && a.n_gen == 5 && b.n_gen == 5);
    CU_ASSERT_EQUAL(a.traj + b.traj, 3);
    CU_ASSERT_EQUAL(memcmp(a.ids, b.ids, 5 * sizeof *a.ids), 0); /* order changes no token */
    CU_ASSERT_EQUAL(rollout_cpu_busy(r), 0);
    rollout_cpu_free(r);
    tfm_params_free(&p);
    return a.traj;
}

static void test_queue_order(void)
{
    struct iqueue_config fifo = {.mlfq = 0, .n_levels = 4, .base_tokens = 1024},
                         mlfq = {.mlfq = 1, .n_levels = 4, .base_tokens = 1024};
    CU_ASSERT_EQUAL(first_served(&fifo), 1); /* arrival order */
    CU_ASSERT_EQUAL(first_served(&mlfq), 2); /* level 0 before level 3 */
}

static const struct test_case cases[] = {
    {"determinism over order, slots and chunks", test_determinism},
    {"behaviour log-probs = training path", test_logprob_training_path},
    {"tool call, payload, malformed call, timeout", test_tool_call},
    {"turn limit", test_max_turns},
    {"budget and slot capacity", test_budget},
    {"prefix reuse = fresh prefill", test_prefix_reuse},
    {"weights swapped mid-turn", test_set_weights},
    {"handback", test_handback},
    {"arbitrary model output", test_arbitrary_output},
    {"mlfq admits the short-estimate turn first", test_queue_order},
    {NULL, NULL}};

static const struct test_suite suites[] = {{"rollout_cpu", cases}, {NULL, NULL}};

int main(void)
{
    int rc = test_main(suites);
    if (g_env_ok) env_free(&g_env);
    return rc;
}
