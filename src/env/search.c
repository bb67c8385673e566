/*
 * The search environment (include/libra/env.h): multi-hop questions about the
 * generated knowledge base (src/env/search_kb.c), the BM25 search tool over its
 * passages (src/env/bm25.c) and the scripted expert's demonstrations.
 *
 * Questions follow a chain of 1..search_max_hops relations from one person; each hop
 * needs one search, because every fact is its own passage:
 *   1 hop   "Where was Alda Voren born?"                               city
 *   2 hops  "In which country was Alda Voren born?"                    city -> country
 *   3 hops  "In which country is the company that Alda Voren works for headquartered?"
 * The hop count is uniform in 1..max_hops, then the template uniform among those with
 * that many hops. People with index % 10 == 9 appear only in ENV_EVAL questions, the
 * others only in ENV_TRAIN ones, so held-out questions ask about unseen people.
 *
 * The tool: the call text is the query (any bytes; non-alphanumeric bytes separate
 * words). Success is the top search_top_k passages as "1. passage\n2. passage",
 * whole lines only, cut to fit ENV_PAYLOAD_MAX - 1 bytes (the text is NUL-terminated).
 * Errors are TOOL_FAILURE with "error: query too long" (> ENV_CALL_MAX bytes),
 * "error: empty query" (no word) or "error: no results" (no passage shares a word);
 * a passed deadline is TOOL_TIMEOUT with "error: timeout".
 */
#include "env/search_internal.h"
#include "demo.h"

#include "libra/log.h"
#include "libra/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Purpose constants of the random streams (the fourth rng_init key). */
#define KEY_PROBLEM 0x5ea40001u
#define KEY_DEMO 0x5ea40002u

struct question_template {
    int hops;
    int rel[SEARCH_MAX_HOPS];
    const char *fmt; /* one %s: the person */
};

static const struct question_template templates[] = {
    {1, {REL_BORN_IN}, "Where was %s born?"},
    {1, {REL_LIVES_IN}, "In which city does %s live?"},
    {1, {REL_WORKS_FOR}, "Which company does %s work for?"},
    {1, {REL_STUDIED_AT}, "Which university did %s study at?"},
    {2, {REL_BORN_IN, REL_CITY_IN}, "In which country was %s born?"},
    {2, {REL_LIVES_IN, REL_CITY_IN}, "In which country does %s live?"},
    {2, {REL_WORKS_FOR, REL_HQ_IN},
     "In which city is the company that %s works for headquartered?"},
    {2, {REL_STUDIED_AT, REL_UNIV_IN}, "In which city is the university where %s studied?"},
    {3, {REL_WORKS_FOR, REL_HQ_IN, REL_CITY_IN},
     "In which country is the company that %s works for headquartered?"},
    {3, {REL_STUDIED_AT, REL_UNIV_IN, REL_CITY_IN},
     "In which country is the university where %s studied?"},
    {3, {REL_BORN_IN, REL_CITY_IN, REL_CAPITAL},
     "What is the capital of the country where %s was born?"},
};
#define N_TEMPLATES ((int)(sizeof templates / sizeof templates[0]))

/* ---- lifetime ---- */

int env_search_init(struct env *e, char *err, size_t errlen)
{
    const struct env_params *p = &e->p;
    char bad[160] = "";
    if (p->search_entities < KB_MIN_PEOPLE || p->search_entities > KB_MAX_PEOPLE)
        snprintf(bad, sizeof bad, "env.search_entities = %d: must be in [%d, %d]",
                 p->search_entities, KB_MIN_PEOPLE, KB_MAX_PEOPLE);
    else if (p->search_top_k < 1 || p->search_top_k > SEARCH_TOP_K_MAX)
        snprintf(bad, sizeof bad, "env.search_top_k = %d: must be in [1, %d]", p->search_top_k,
                 SEARCH_TOP_K_MAX);
    else if (p->search_max_hops < 1 || p->search_max_hops > SEARCH_MAX_HOPS)
        snprintf(bad, sizeof bad, "env.search_max_hops = %d: must be in [1, %d]",
                 p->search_max_hops, SEARCH_MAX_HOPS);
    else if (!(p->demo_mistake_rate >= 0.0 && p->demo_mistake_rate <= 1.0))
        snprintf(bad, sizeof bad, "env.demo_mistake_rate = %g: must be in [0, 1]",
                 p->demo_mistake_rate);
    if (bad[0]) {
        if (err && errlen) snprintf(err, errlen, "%s", bad);
        return -1;
    }
    double t0 = wall_time();
    struct env_search *s = xcalloc(1, sizeof *s);
    kb_build(&s->kb, p->seed, p->search_entities);
    bm25_build(&s->index, s->kb.text, s->kb.off, s->kb.n_facts);
    e->search = s;
    LOG_D("search: %d entities, %d passages, %d index terms, built in %.3f s",
          (int)s->kb.n_entities, (int)s->kb.n_facts, (int)s->index.terms.n, wall_time() - t0);
    return 0;
}

void env_search_free(struct env *e)
{
    if (!e || !e->search) return;
    bm25_free(&e->search->index);
    kb_free(&e->search->kb);
    free(e->search);
    e->search = NULL;
}

int64_t env_search_n_passages(const struct env *e)
{
    return e && e->search ? e->search->kb.n_facts : 0;
}

static const struct env_search *search_of(const struct env *e, const char *who)
{
    if (!e || !e->search) FATAL("%s: the search environment is not initialised", who);
    return e->search;
}

/* ---- problems ---- */

void search_question(const struct env *e, int split, int64_t i, struct search_question *q)
{
    const struct kb *kb = &search_of(e, "search_question")->kb;
    int eval = split == ENV_EVAL;
    struct rng r;
    rng_init(&r, e->p.seed, (uint64_t)eval, (uint64_t)i, KEY_PROBLEM);
    int hops = 1 + (int)rng_below(&r, (uint64_t)e->p.search_max_hops);
    int n_with = 0;
    for (int t = 0; t < N_TEMPLATES; t++) n_with += templates[t].hops == hops;
    int pick = (int)rng_below(&r, (uint64_t)n_with), t = 0;
    for (;; t++)
        if (templates[t].hops == hops && pick-- == 0) break;

    int64_t n_people = kb->count[KB_PERSON], n_eval = n_people / 10, p;
    if (eval) {
        p = 10 * (int64_t)rng_below(&r, (uint64_t)n_eval) + 9;
    } else {
        int64_t j = (int64_t)rng_below(&r, (uint64_t)(n_people - n_eval));
        p = (j / 9) * 10 + j % 9;
    }
    memset(q, 0, sizeof *q);
    q->template_id = t;
    q->hops = hops;
    q->person = kb->first[KB_PERSON] + (int32_t)p;
    q->chain[0] = q->person;
    for (int h = 0; h < hops; h++) {
        q->rel[h] = templates[t].rel[h];
        int32_t f = kb_fact_of(kb, q->chain[h], q->rel[h]);
        if (f < 0) FATAL("search_question: entity %d has no fact %d", (int)q->chain[h], q->rel[h]);
        q->chain[h + 1] = kb->facts[f].obj;
    }
}

static void render_question(const struct kb *kb, const struct search_question *q, char *out,
                            size_t cap)
{
    snprintf(out, cap, templates[q->template_id].fmt, kb_name(kb, q->person));
}

void env_search_problem(const struct env *e, int split, int64_t i, struct env_problem *out)
{
    const struct kb *kb = &search_of(e, "env_search_problem")->kb;
    struct search_question q;
    search_question(e, split, i, &q);
    memset(out, 0, sizeof *out);
    out->index = i;
    out->split = split;
    out->steps = q.hops;
    render_question(kb, &q, out->text, sizeof out->text);
    snprintf(out->answer, sizeof out->answer, "%s", kb_name(kb, q.chain[q.hops]));
}

/* ---- the tool ---- */

static void tool_error(struct env_tool_result *out, int status, const char *msg)
{
    out->status = status;
    out->len = snprintf(out->text, sizeof out->text, "%s", msg);
}

void env_search_tool(const struct env *e, const char *call, size_t len, double deadline,
                     struct env_tool_result *out)
{
    const struct env_search *s = search_of(e, "env_search_tool");
    out->tool = ENV_TOOL_SEARCH;
    out->text[0] = '\0';
    out->len = 0;
    if (len > ENV_CALL_MAX) {
        tool_error(out, TOOL_FAILURE, "error: query too long");
        return;
    }
    struct bm25_hit hits[SEARCH_TOP_K_MAX];
    int n = 0;
    int k = e->p.search_top_k < SEARCH_TOP_K_MAX ? e->p.search_top_k : SEARCH_TOP_K_MAX;
    switch (bm25_query(&s->index, call, call ? len : 0, k, deadline, hits, &n)) {
    case BM25_OK: break;
    case BM25_NO_TERMS: tool_error(out, TOOL_FAILURE, "error: empty query"); return;
    case BM25_NO_MATCH: tool_error(out, TOOL_FAILURE, "error: no results"); return;
    default: tool_error(out, TOOL_TIMEOUT, "error: timeout"); return;
    }
    /* Whole lines while they fit; a first line longer than the payload is cut. */
    size_t used = 0, room = sizeof out->text - 1;
    for (int j = 0; j < n; j++) {
        const char *passage = kb_passage(&s->kb, hits[j].doc);
        char head[16];
        int hl = snprintf(head, sizeof head, "%s%d. ", j ? "\n" : "", j + 1);
        size_t pl = strlen(passage);
        if (used + (size_t)hl + pl > room) {
            if (j > 0) break;
            pl = room - (size_t)hl;
        }
        memcpy(out->text + used, head, (size_t)hl);
        memcpy(out->text + used + hl, passage, pl);
        used += (size_t)hl + pl;
    }
    out->text[used] = '\0';
    out->len = (int)used;
    out->status = TOOL_SUCCESS;
}

/* ---- the scripted expert ---- */

/* The search call turn, the real tool's response to it; the result in *res. */
static void search_demo_call(struct demo_buf *d, const char *query, struct env_tool_result *res)
{
    env_search_tool(d->e, query, strlen(query), 0.0, res);
    demo_call(d, query, res);
}

/* Reads the object of relation rel about subj off a successful payload: a line
 * "N. " pre subj mid OBJECT post. Returns 0 and the object in obj, or -1. */
static int read_fact(const struct env_tool_result *res, int rel, const char *subj, char *obj,
                     size_t cap)
{
    if (res->status != TOOL_SUCCESS) return -1;
    const struct kb_rel_info *ri = &kb_rels[rel];
    char head[ENV_ANSWER_MAX + 64];
    int hl = snprintf(head, sizeof head, "%s%s%s", ri->pre, subj, ri->mid);
    if (hl < 0 || (size_t)hl >= sizeof head) return -1;
    size_t post = strlen(ri->post);
    const char *line = res->text, *end = res->text + res->len;
    while (line < end) {
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol) eol = end;
        const char *p = line;
        while (p < eol && *p >= '0' && *p <= '9') p++;
        if (p > line && eol - p >= 2 && p[0] == '.' && p[1] == ' ') {
            p += 2;
            size_t n = (size_t)(eol - p);
            if (n > (size_t)hl + post && memcmp(p, head, (size_t)hl) == 0 &&
                memcmp(eol - post, ri->post, post) == 0) {
                size_t on = n - (size_t)hl - post;
                if (on < cap) {
                    memcpy(obj, p + hl, on);
                    obj[on] = '\0';
                    return 0;
                }
            }
        }
        line = eol + 1;
    }
    return -1;
}

/* One hop: the query "SUBJECT keyword"; if the fact is not among the results, once
 * more with the passage's own wording ("SUBJECT was born in"). Returns 0 with the
 * object in obj, or -1 if neither search showed the fact. */
static int expert_hop(struct demo_buf *d, int rel, const char *subj, char *obj, size_t cap)
{
    const struct kb_rel_info *ri = &kb_rels[rel];
    char query[ENV_CALL_MAX + 1];
    struct env_tool_result res;
    snprintf(query, sizeof query, "%s %s", subj, ri->keyword);
    search_demo_call(d, query, &res);
    if (read_fact(&res, rel, subj, obj, cap) == 0) return 0;
    snprintf(query, sizeof query, "%s%s%s", ri->pre, subj, ri->mid);
    size_t n = strlen(query);
    while (n > 0 && query[n - 1] == ' ') query[--n] = '\0';
    search_demo_call(d, query, &res);
    return read_fact(&res, rel, subj, obj, cap);
}

/* A useless first query (a realistic slip the expert recovers from): punctuation only
 * (the tool's "empty query" error), the relation word alone, or the name misspelt. */
static void useless_query(struct rng *r, const char *subj, int rel, char *out, size_t cap)
{
    static const char *const junk[] = {"?", "...", "\"\"", "--", "( )"};
    const char *kw = kb_rels[rel].keyword;
    switch (rng_below(r, 3)) {
    case 0: snprintf(out, cap, "%s", junk[rng_below(r, 5)]); break;
    case 1: snprintf(out, cap, "%s", kw); break;
    default: { /* drop one letter (not the first) of the name's last word */
        const char *last = strrchr(subj, ' ');
        size_t at = last ? (size_t)(last - subj) + 2 : 1, n = strlen(subj);
        if (at >= n) at = n - 1;
        at += rng_below(r, n - at);
        snprintf(out, cap, "%.*s%s %s", (int)at, subj, subj + at + 1, kw);
    }
    }
}

/*
 * The expert, for the problem (regenerated from the run seed, split and index): per
 * hop the query "ENTITY keyword" ("Alda Voren born"), the object read off the
 * returned passage (a refined query if it was not returned), the next hop about that
 * object, and finally <answer>OBJECT</answer>. It only uses what the tool returned.
 * With probability demo_mistake_rate (stream (seed, split, index)) it errs, half the
 * time each way:
 *  - too few hops: it answers after h < hops hops with the entity it holds (the city
 *    instead of the country), or with h = 0 a guessed entity of the right kind;
 *    always a wrong answer;
 *  - a useless first query (useless_query), then, whatever it returned, the right
 *    queries and the right answer (a recovery).
 * Returns the ids written, or -1 if they exceed cap or pr is not this generator's
 * problem (JSONL prompts have no structure for the expert to follow).
 */
int env_search_demo(const struct env *e, const struct env_problem *pr, uint64_t seed,
                    int32_t *ids, uint8_t *mask, int cap)
{
    const struct kb *kb = &search_of(e, "env_search_demo")->kb;
    struct search_question q;
    char text[ENV_TEXT_MAX];
    search_question(e, pr->split, pr->index, &q);
    render_question(kb, &q, text, sizeof text);
    if (strcmp(text, pr->text) != 0) return -1;
    const char *answer = kb_name(kb, q.chain[q.hops]);

    struct rng r;
    rng_init(&r, seed, (uint64_t)pr->split, (uint64_t)pr->index, KEY_DEMO);
    int mistake = rng_uniform(&r) < e->p.demo_mistake_rate;
    int too_few = mistake && rng_below(&r, 2) == 0;
    int hops = q.hops;
    struct demo_buf d = demo_buf_make(e, ids, mask, cap);

    if (too_few) {
        /* Stop after `stop` hops, where the entity held is not the answer (the city of
         * birth can be the capital asked for); 0 hops always qualifies. */
        int stop = (int)rng_below(&r, (uint64_t)hops);
        while (stop > 0 && strcmp(kb_name(kb, q.chain[stop]), answer) == 0) stop--;
        if (stop == 0) {
            int t = kb_type_of(kb, q.chain[hops]);
            int32_t other = q.chain[hops];
            while (other == q.chain[hops])
                other = kb->first[t] + (int32_t)rng_below(&r, (uint64_t)kb->count[t]);
            demo_answer(&d, kb_name(kb, other));
            return demo_result(&d);
        }
        hops = stop;
    }

    char cur[ENV_ANSWER_MAX], next[ENV_ANSWER_MAX];
    snprintf(cur, sizeof cur, "%s", kb_name(kb, q.person));
    for (int h = 0; h < hops; h++) {
        if (mistake && !too_few && h == 0) {
            /* The slip is noticed whatever came back: the proper query follows. */
            char query[ENV_CALL_MAX + 1];
            struct env_tool_result res;
            useless_query(&r, cur, q.rel[0], query, sizeof query);
            search_demo_call(&d, query, &res);
        }
        if (expert_hop(&d, q.rel[h], cur, next, sizeof next) != 0)
            break; /* neither search showed the fact: answers with what it holds */
        memcpy(cur, next, sizeof cur);
    }
    demo_answer(&d, cur);
    return demo_result(&d);
}
