/*
 * Whole episodes in one process (include/libra/episode.h): up to ec->batch problems
 * decode together, one tfm_decoder slot each (capacity ec->max_tokens tokens).
 *
 * An episode is the prompt (env_prompt_tokens), then turns of generated tokens. A
 * turn ends where the vocabulary's format says (include/libra/vocab.h; libra tags:
 * </tool_call>, </answer>, <|eos|>). A turn that calls the tool has its call
 * extracted, the tool runs inline with no deadline, its payload is appended with
 * mask 0 and the next turn starts; any other ended turn ends the episode, as do
 * max_turns turns, a turn reaching max_tokens_per_turn generated tokens, or the
 * context reaching max_tokens. A call that env_extract_call rejects (malformed, too
 * long) is answered with the failure payload "error: malformed tool call", as a tool
 * answers bad syntax.
 *
 * Token k of an episode (absolute position k, prompt included) is sampled with
 * sampler_sample keyed by (problem index, k): the result does not depend on which
 * problems share a batch. Reward: env_reward over the whole sequence (mask 1 =
 * generated).
 *
 * Shapes: B slots, V vocabulary, N = ec->max_tokens.
 */
#include "libra/episode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "libra/tfm_decode.h"

#define EPISODE_PREFILL_CHUNK 64

/* One problem being decoded in one decoder slot. */
struct ep_slot {
    struct env_problem pr;
    int32_t *ids;   /* (N) the sequence: prompt, generated tokens, payloads */
    uint8_t *mask;  /* (N) 1 = generated */
    float *logits;  /* (V) next-token logits after ids[0 .. len-1] */
    int len;        /* tokens in ids */
    int turn_start; /* first id of the current turn */
    int turns;      /* turns begun (the first right after the prompt) */
    int active;
};

/* Everything one episode_run call allocates. */
struct ep_run {
    const struct env *e;
    const struct episode_config *ec;
    int V, B;
    struct tfm_decoder *dec;
    struct ep_slot *slot;    /* (B) */
    int32_t *ids_mem;        /* (B, N) */
    uint8_t *mask_mem;       /* (B, N) */
    float *logits_mem;       /* (B, V) */
    float *step_logits;      /* (B, V) output of one decoder step */
    float *scratch;          /* (2V) sampler scratch */
    int *step_slots;         /* (B) */
    int32_t *step_tokens;    /* (B) */
    int32_t *payload;        /* (N) payload tokens of one tool result */
    int warned_prompt;
};

static void check_config(const struct episode_config *ec, const struct env *e, int V)
{
    if (ec->max_turns < 1 || ec->max_tokens_per_turn < 1 || ec->max_tokens < 2 || ec->batch < 1)
        FATAL("episode_run: max_turns %d, max_tokens_per_turn %d, max_tokens %d, batch %d: "
              "each must be positive (max_tokens >= 2)", ec->max_turns, ec->max_tokens_per_turn,
              ec->max_tokens, ec->batch);
    if (V < e->vocab->size)
        FATAL("episode_run: the model's vocabulary (%d ids) is smaller than its tokenizer's "
              "(%s, %d ids)", V, e->vocab->name, (int)e->vocab->size);
}

static void run_init(struct ep_run *r, const struct env *e, const struct tfm_config *mc,
                     const struct tfm_params *p, const struct episode_config *ec, int n)
{
    memset(r, 0, sizeof *r);
    r->e = e;
    r->ec = ec;
    r->V = mc->vocab_size;
    r->B = ec->batch < n ? ec->batch : n;
    size_t N = (size_t)ec->max_tokens, B = (size_t)r->B, V = (size_t)r->V;
    r->dec = tfm_decoder_create(mc, p, r->B, ec->max_tokens, EPISODE_PREFILL_CHUNK);
    r->slot = xcalloc(B, sizeof *r->slot);
    r->ids_mem = xmalloc(B * N * sizeof *r->ids_mem);
    r->mask_mem = xmalloc(B * N * sizeof *r->mask_mem);
    r->logits_mem = xmalloc(B * V * sizeof *r->logits_mem);
    r->step_logits = xmalloc(B * V * sizeof *r->step_logits);
    r->scratch = xmalloc(2 * V * sizeof *r->scratch);
    r->step_slots = xmalloc(B * sizeof *r->step_slots);
    r->step_tokens = xmalloc(B * sizeof *r->step_tokens);
    r->payload = xmalloc(N * sizeof *r->payload);
    for (size_t s = 0; s < B; s++) {
        r->slot[s].ids = r->ids_mem + s * N;
        r->slot[s].mask = r->mask_mem + s * N;
        r->slot[s].logits = r->logits_mem + s * V;
    }
}

static void run_free(struct ep_run *r)
{
    tfm_decoder_free(r->dec);
    free(r->slot);
    free(r->ids_mem);
    free(r->mask_mem);
    free(r->logits_mem);
    free(r->step_logits);
    free(r->scratch);
    free(r->step_slots);
    free(r->step_tokens);
    free(r->payload);
}

/* Loads problem index into slot s and prefills its prompt. */
static void slot_start(struct ep_run *r, int s, int split, int64_t index)
{
    struct ep_slot *sl = &r->slot[s];
    int N = r->ec->max_tokens;
    env_problem(r->e, split, index, &sl->pr);
    int need = env_prompt_tokens(r->e, &sl->pr, sl->ids, N);
    tfm_decoder_truncate(r->dec, s, 0);
    sl->turns = 1;
    if (need >= N) { /* no room to generate: the episode is empty (reward 0) */
        if (!r->warned_prompt)
            LOG_W("episode: problem %lld's prompt has %d tokens, rollout.max_tokens is %d: "
                  "nothing is generated (raise rollout.max_tokens)", (long long)index, need, N);
        r->warned_prompt = 1;
        sl->len = need < N ? need : N;
        memset(sl->mask, 0, (size_t)sl->len);
        sl->turn_start = sl->len;
        sl->active = 0;
        return;
    }
    sl->len = need;
    memset(sl->mask, 0, (size_t)need);
    sl->turn_start = need;
    sl->active = 1;
    if (tfm_decoder_prefill(r->dec, s, sl->ids, need, sl->logits))
        FATAL("episode: prefill of a %d-token prompt into a %d-token slot failed", need, N);
}

/* The turn that just ended with a tool call: runs the tool; continues the episode
 * with the payload (prefilled together with the turn's pending last id) or ends it. */
static void slot_tool_turn(struct ep_run *r, int s, struct episode_stats *st)
{
    struct ep_slot *sl = &r->slot[s];
    const struct episode_config *ec = r->ec;
    char call[ENV_CALL_MAX + 1];
    struct env_tool_result res;
    int turn_len = sl->len - sl->turn_start;
    size_t call_len; /* its byte count: it may hold NULs, so not strlen(call) */
    if (env_extract_call(r->e, sl->ids + sl->turn_start, turn_len, call, sizeof call,
                         &call_len) == 0) {
        env_tool(r->e, call, call_len, 0.0, &res);
    } else {
        memset(&res, 0, sizeof res);
        res.tool = r->e->p.kind == ENV_KIND_SEARCH ? ENV_TOOL_SEARCH : ENV_TOOL_CALC;
        res.status = TOOL_FAILURE;
        res.len = snprintf(res.text, sizeof res.text, "error: malformed tool call");
    }
    st->tool_calls++;
    if (res.status != TOOL_SUCCESS) st->tool_failures++;
    if (sl->turns >= ec->max_turns) {
        sl->active = 0;
        return;
    }
    /* The payload and at least one more generated token must fit in the context. */
    int room = ec->max_tokens - sl->len - 1;
    if (room < 2) {
        sl->active = 0;
        return;
    }
    int np = env_payload_tokens(r->e, &res, r->payload, room);
    if (np < 1 || np > room) FATAL("env_payload_tokens wrote %d tokens, room for %d", np, room);
    memcpy(sl->ids + sl->len, r->payload, (size_t)np * sizeof *sl->ids);
    memset(sl->mask + sl->len, 0, (size_t)np);
    /* The decoder holds ids[0 .. len-2]; feed the turn's last id and the payload. */
    int cached = tfm_decoder_len(r->dec, s);
    sl->len += np;
    sl->turn_start = sl->len;
    sl->turns++;
    if (tfm_decoder_prefill(r->dec, s, sl->ids + cached, sl->len - cached, sl->logits))
        FATAL("episode: prefill of a tool payload failed (%d + %d tokens, slot capacity %d)",
              cached, sl->len - cached, ec->max_tokens);
}

/* Samples one token for every active slot; returns how many slots need a decode
 * step (their new token is queued in step_slots / step_tokens). */
static int sample_round(struct ep_run *r, struct episode_stats *st)
{
    const struct episode_config *ec = r->ec;
    int n_step = 0;
    for (int s = 0; s < r->B; s++) {
        struct ep_slot *sl = &r->slot[s];
        if (!sl->active) continue;
        int32_t t = sampler_sample(&ec->sampling, sl->logits, r->V, sl->pr.index, sl->len, NULL,
                                   r->scratch);
        sl->ids[sl->len] = t;
        sl->mask[sl->len] = 1;
        sl->len++;
        st->gen_tokens++;
        const struct vocab *v = r->e->vocab;
        if (v->ends_turn(v->ctx, t)) {
            int turn = sl->len - sl->turn_start;
            if (v->turn_calls(v->ctx, sl->ids + sl->turn_start, turn))
                slot_tool_turn(r, s, st);
            else
                sl->active = 0;
        } else if (sl->len - sl->turn_start >= ec->max_tokens_per_turn ||
                   sl->len >= ec->max_tokens) {
            sl->active = 0; /* a budget ends the episode */
        } else {
            r->step_slots[n_step] = s;
            r->step_tokens[n_step] = t;
            n_step++;
        }
    }
    return n_step;
}

/* 1 if the generated tokens hold a well-formed answer in the format. */
static int has_answer(const struct env *e, const struct ep_slot *sl)
{
    char text[ENV_TEXT_MAX];
    return e->vocab->answer(e->vocab->ctx, sl->ids, sl->mask, sl->len, text, sizeof text);
}

static void print_transcript(FILE *f, const struct vocab *v, const struct ep_slot *sl,
                             double reward, int correct)
{
    size_t need = v->decode(v->ctx, sl->ids, (size_t)sl->len, NULL, 0);
    char *text = xmalloc(need + 1);
    size_t n = v->decode(v->ctx, sl->ids, (size_t)sl->len, text, need);
    fprintf(f, "=== %s problem %lld: reward %.3f, %s, %d turns, %d tokens; answer: %s ===\n",
            sl->pr.split == ENV_EVAL ? "eval" : "train", (long long)sl->pr.index, reward,
            correct ? "correct" : "wrong", sl->turns, sl->len, sl->pr.answer);
    fwrite(text, 1, n, f);
    fputs("\n\n", f);
    free(text);
}

void episode_run(const struct env *e, const struct tfm_config *mc, const struct tfm_params *p,
                 const struct episode_config *ec, int split, int64_t first, int n,
                 struct episode_stats *st, void *transcripts_FILE, int n_transcripts)
{
    memset(st, 0, sizeof *st);
    if (n <= 0) return;
    check_config(ec, e, mc->vocab_size);
    FILE *tf = transcripts_FILE;
    struct ep_run r;
    run_init(&r, e, mc, p, ec, n);
    for (int b0 = 0; b0 < n; b0 += r.B) {
        int nb = n - b0 < r.B ? n - b0 : r.B;
        for (int s = 0; s < r.B; s++) r.slot[s].active = 0;
        for (int s = 0; s < nb; s++) slot_start(&r, s, split, first + b0 + s);
        for (;;) {
            int n_step = sample_round(&r, st);
            if (n_step > 0) {
                if (tfm_decoder_step(r.dec, r.step_slots, r.step_tokens, n_step, r.step_logits))
                    FATAL("episode: decode step over %d slots failed (a slot is full)", n_step);
                for (int i = 0; i < n_step; i++)
                    memcpy(r.slot[r.step_slots[i]].logits, r.step_logits + (size_t)i * r.V,
                           (size_t)r.V * sizeof *r.step_logits);
            }
            int any = 0;
            for (int s = 0; s < nb; s++) any |= r.slot[s].active;
            if (!any) break;
        }
        for (int s = 0; s < nb; s++) {
            struct ep_slot *sl = &r.slot[s];
            int correct = 0;
            double reward = env_reward(e, &sl->pr, sl->ids, sl->mask, sl->len, &correct);
            st->n++;
            st->reward_sum += reward;
            st->correct += correct != 0;
            st->answered += has_answer(r.e, sl);
            if (tf && b0 + s < n_transcripts) print_transcript(tf, e->vocab, sl, reward, correct);
        }
    }
    if (tf) fflush(tf);
    run_free(&r);
}
