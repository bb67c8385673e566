/*
 * Tests of the search environment (src/env/search.c, search_kb.c, bm25.c): the
 * knowledge base (size, distinct names, passages that state their facts, determinism
 * per seed), BM25 on a tiny corpus with hand-computed scores and ranking, 1000
 * generated questions answered by following the expert's demonstration with the real
 * tool, the tool against malformed calls (seeded random bytes with NULs, huge and
 * empty calls, punctuation), the payload bound, the demonstrations' mistake share and
 * the thread safety of the tool. The struct env is filled by hand (env.c is not used).
 */
#include "env/search_internal.h"
#include "libra/env.h"
#include "libra/log.h"
#include "libra/rng.h"
#include "libra/tokenizer.h"
#include "testutil.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEMO_CAP 16384
#define MAX_CALLS 8

static void make_env(struct env *e, uint64_t seed, int entities, int top_k, double rate)
{
    char err[256] = "";
    memset(e, 0, sizeof *e);
    e->p.kind = ENV_KIND_SEARCH;
    e->p.seed = seed;
    e->p.search_entities = entities;
    e->p.search_top_k = top_k;
    e->p.search_max_hops = 3;
    e->p.demo_mistake_rate = rate;
    e->vocab = e->p.vocab = tok_byte_vocab(); /* env_init is not used: set by hand */
    int rc = env_search_init(e, err, sizeof err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_STRING_EQUAL(err, "");
}

/* ---- knowledge base ---- */

static void test_kb_size_and_names(void)
{
    struct env e;
    double t0 = wall_time();
    make_env(&e, 1, 2000, 3, 0.0);
    double built = wall_time() - t0;
    const struct kb *kb = &e.search->kb;
    int64_t n = env_search_n_passages(&e);
    printf("\n    2000 people: %lld passages, %d entities, %d index terms, built in %.3f s\n",
           (long long)n, (int)kb->n_entities, (int)e.search->index.terms.n, built);
    CU_ASSERT(n >= 5000 && n <= 20000);
    CU_ASSERT_EQUAL(n, kb->n_facts);
    CU_ASSERT_EQUAL(kb->count[KB_PERSON], 2000);
    CU_ASSERT_EQUAL(n, 4 * 2000 + kb->count[KB_CITY] + kb->count[KB_COUNTRY] +
                           kb->count[KB_COMPANY] + kb->count[KB_UNIVERSITY]);

    /* All names distinct, also in lower case, and made of letters and spaces. */
    struct strtab seen;
    strtab_init(&seen);
    int dup = 0, odd = 0;
    for (int32_t x = 0; x < kb->n_entities; x++) {
        char lower[128];
        const char *name = kb_name(kb, x);
        size_t len = strlen(name);
        CU_ASSERT_FATAL(len > 0 && len < sizeof lower);
        for (size_t i = 0; i <= len; i++) {
            char c = name[i];
            if (c && c != ' ' && !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) odd++;
            lower[i] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
        }
        int added;
        strtab_intern(&seen, lower, len, &added);
        dup += !added;
    }
    strtab_free(&seen);
    CU_ASSERT_EQUAL(dup, 0);
    CU_ASSERT_EQUAL(odd, 0);

    /* Every passage states its fact; types match the relation; capitals lie in their
     * country; every person has its four facts. */
    int wrong = 0;
    for (int32_t f = 0; f < kb->n_facts; f++) {
        const struct kb_fact *k = &kb->facts[f];
        const struct kb_rel_info *ri = &kb_rels[k->rel];
        char want[512];
        snprintf(want, sizeof want, "%s%s%s%s%s", ri->pre, kb_name(kb, k->subj), ri->mid,
                 kb_name(kb, k->obj), ri->post);
        wrong += strcmp(kb_passage(kb, f), want) != 0;
        wrong += kb_type_of(kb, k->subj) != ri->subj_type || kb_type_of(kb, k->obj) != ri->obj_type;
        wrong += kb_fact_of(kb, k->subj, k->rel) != f;
        if (k->rel == REL_CAPITAL) {
            int32_t in = kb_fact_of(kb, k->obj, REL_CITY_IN);
            wrong += in < 0 || kb->facts[in].obj != k->subj;
        }
    }
    for (int32_t p = 0; p < kb->count[KB_PERSON]; p++)
        for (int rel = REL_BORN_IN; rel <= REL_STUDIED_AT; rel++)
            wrong += kb_fact_of(kb, kb->first[KB_PERSON] + p, rel) < 0;
    CU_ASSERT_EQUAL(wrong, 0);
    env_search_free(&e);
    CU_ASSERT_PTR_NULL(e.search);
    env_search_free(&e); /* twice is harmless */
}

static void test_kb_determinism(void)
{
    struct env a, b, c;
    make_env(&a, 1, 2000, 3, 0.0);
    make_env(&b, 1, 2000, 3, 0.0);
    make_env(&c, 2, 2000, 3, 0.0);
    const struct kb *ka = &a.search->kb, *kb = &b.search->kb, *kc = &c.search->kb;
    CU_ASSERT_EQUAL_FATAL(ka->n_facts, kb->n_facts);
    CU_ASSERT(memcmp(ka->off, kb->off, ((size_t)ka->n_facts + 1) * sizeof *ka->off) == 0);
    CU_ASSERT(memcmp(ka->text, kb->text, (size_t)ka->off[ka->n_facts]) == 0);
    CU_ASSERT(strcmp(kb_name(ka, 0), kb_name(kc, 0)) != 0); /* another seed, another world */
    int same_a_b = 0, same_a_c = 0;
    for (int i = 0; i < 50; i++) {
        struct env_problem pa, pb, pc;
        env_search_problem(&a, ENV_TRAIN, i, &pa);
        env_search_problem(&b, ENV_TRAIN, i, &pb);
        env_search_problem(&c, ENV_TRAIN, i, &pc);
        same_a_b += strcmp(pa.text, pb.text) == 0 && strcmp(pa.answer, pb.answer) == 0;
        same_a_c += strcmp(pa.text, pc.text) == 0;
        struct env_tool_result ra, rb;
        env_search_tool(&a, pa.text, strlen(pa.text), 0, &ra);
        env_search_tool(&b, pb.text, strlen(pb.text), 0, &rb);
        CU_ASSERT(ra.len == rb.len && strcmp(ra.text, rb.text) == 0);
    }
    CU_ASSERT_EQUAL(same_a_b, 50);
    CU_ASSERT_EQUAL(same_a_c, 0);
    env_search_free(&a);
    env_search_free(&b);
    env_search_free(&c);
}

/* ---- BM25 ---- */

/* Builds an index over NUL-free strings. */
static void build_corpus(struct bm25 *ix, const char *const *docs, int n, char **text_out,
                         int64_t **off_out)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) total += strlen(docs[i]);
    char *text = xmalloc(total + 1);
    int64_t *off = xmalloc(((size_t)n + 1) * sizeof *off);
    off[0] = 0;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(docs[i]);
        memcpy(text + off[i], docs[i], len);
        off[i + 1] = off[i] + (int64_t)len;
    }
    bm25_build(ix, text, off, n);
    *text_out = text;
    *off_out = off;
}

/* One term's BM25 contribution, straight from the formula. */
static double ref_term(int N, int df, int tf, int dl, double avgdl)
{
    double idf = log(1.0 + (N - df + 0.5) / (df + 0.5));
    return idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * dl / avgdl));
}

static void test_bm25_tiny(void)
{
    /* Word lengths 6, 6, 3, 3, 2: avgdl = 4. */
    static const char *const docs[] = {"the cat sat on the mat", "the dog sat on the log",
                                       "cat cat cat", "a bird sang", "The Cat!"};
    struct bm25 ix;
    char *text;
    int64_t *off;
    build_corpus(&ix, docs, 5, &text, &off);
    CU_ASSERT_DOUBLE_EQUAL(ix.avgdl, 4.0, 1e-12);
    struct bm25_hit hits[8];
    int n;

    /* "cat": df 3, idf = ln(1 + 2.5/3.5) = 0.538997. By hand:
     *   doc 2 (tf 3, dl 3): 0.538997 * 3 * 2.2 / (3 + 0.975) = 0.894939
     *   doc 4 (tf 1, dl 2): 0.538997 * 2.2 / (1 + 0.75)    = 0.677596
     *   doc 0 (tf 1, dl 6): 0.538997 * 2.2 / (1 + 1.65)    = 0.447470 */
    CU_ASSERT_EQUAL_FATAL(bm25_query(&ix, "cat", 3, 8, 0, hits, &n), BM25_OK);
    CU_ASSERT_EQUAL_FATAL(n, 3);
    CU_ASSERT(hits[0].doc == 2 && hits[1].doc == 4 && hits[2].doc == 0);
    CU_ASSERT_DOUBLE_EQUAL(hits[0].score, 0.894939, 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(hits[1].score, 0.677596, 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(hits[2].score, 0.447470, 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(hits[0].score, ref_term(5, 3, 3, 3, 4.0), 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(hits[2].score, ref_term(5, 3, 1, 6, 4.0), 1e-12);

    /* Case, repetition and separators do not matter; k cuts the list. */
    static const char *const same[] = {"CAT", "cat cat", "..cat??", "Cat\tcAt"};
    for (int i = 0; i < 4; i++) {
        struct bm25_hit h2[2];
        CU_ASSERT_EQUAL(bm25_query(&ix, same[i], strlen(same[i]), 2, 0, h2, &n), BM25_OK);
        CU_ASSERT(n == 2 && h2[0].doc == 2 && h2[1].doc == 4);
        CU_ASSERT_DOUBLE_EQUAL(h2[0].score, hits[0].score, 1e-12);
    }

    /* "sat mat": doc 0 has both (1.877700), doc 1 only "sat" (0.726805). */
    CU_ASSERT_EQUAL(bm25_query(&ix, "sat mat", 7, 8, 0, hits, &n), BM25_OK);
    CU_ASSERT(n == 2 && hits[0].doc == 0 && hits[1].doc == 1);
    CU_ASSERT_DOUBLE_EQUAL(hits[0].score, 1.877700, 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(hits[1].score, 0.726805, 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(hits[0].score, ref_term(5, 2, 1, 6, 4) + ref_term(5, 1, 1, 6, 4), 1e-12);

    /* A NUL inside the query separates words like any other byte. */
    CU_ASSERT_EQUAL(bm25_query(&ix, "bird\0log", 8, 8, 0, hits, &n), BM25_OK);
    CU_ASSERT(n == 2 && hits[0].doc == 3 && hits[1].doc == 1); /* "a bird sang" is shorter */

    int dummy;
    CU_ASSERT_EQUAL(bm25_query(&ix, "", 0, 8, 0, hits, &dummy), BM25_NO_TERMS);
    CU_ASSERT_EQUAL(bm25_query(&ix, NULL, 0, 8, 0, hits, &dummy), BM25_NO_TERMS);
    CU_ASSERT_EQUAL(bm25_query(&ix, " ?!. \n", 6, 8, 0, hits, &dummy), BM25_NO_TERMS);
    CU_ASSERT_EQUAL(bm25_query(&ix, "zebra", 5, 8, 0, hits, &dummy), BM25_NO_MATCH);
    CU_ASSERT_EQUAL(dummy, 0);
    double now = wall_time();
    if (now > 2.0) {
        CU_ASSERT_EQUAL(bm25_query(&ix, "cat", 3, 8, now - 1.0, hits, &dummy), BM25_TIMEOUT);
        CU_ASSERT_EQUAL(dummy, 0);
    }
    CU_ASSERT_EQUAL(bm25_query(&ix, "cat", 3, 8, now + 3600.0, hits, &dummy), BM25_OK);
    bm25_free(&ix);
    free(text);
    free(off);

    /* Ties: equal scores in ascending document id. */
    static const char *const tied[] = {"red apple", "green apple", "red apple"};
    build_corpus(&ix, tied, 3, &text, &off);
    CU_ASSERT_EQUAL(bm25_query(&ix, "red", 3, 8, 0, hits, &n), BM25_OK);
    CU_ASSERT(n == 2 && hits[0].doc == 0 && hits[1].doc == 2);
    CU_ASSERT(hits[0].score == hits[1].score);
    CU_ASSERT_EQUAL(bm25_query(&ix, "apple", 5, 8, 0, hits, &n), BM25_OK);
    CU_ASSERT(n == 3 && hits[0].doc == 0 && hits[1].doc == 1 && hits[2].doc == 2);
    CU_ASSERT_EQUAL(bm25_query(&ix, "apple red", 9, 8, 0, hits, &n), BM25_OK);
    CU_ASSERT(n == 3 && hits[0].doc == 0 && hits[1].doc == 2 && hits[2].doc == 1);
    CU_ASSERT_EQUAL(bm25_query(&ix, "apple red", 9, 1, 0, hits, &n), BM25_OK);
    CU_ASSERT(n == 1 && hits[0].doc == 0);
    bm25_free(&ix);
    free(text);
    free(off);
}

/* ---- demonstrations ---- */

/* A demonstration read back: its calls, payloads and answer, with the structure
 * (<tool_call>..</tool_call><tool_result>..</tool_result>)* <answer>..</answer> and
 * the masks (1 but inside results) checked; ok = 0 if anything is off. */
struct demo_view {
    int ok, n_calls;
    char calls[MAX_CALLS][ENV_CALL_MAX + 1];
    char payloads[MAX_CALLS][ENV_PAYLOAD_MAX + 1];
    int payload_len[MAX_CALLS];
    char answer[ENV_ANSWER_MAX + 1];
};

/* Bytes ids[*at ..] up to the special `end` into out; mask must be m throughout. */
static int read_span(const int32_t *ids, const uint8_t *mask, int n, int *at, int32_t end,
                     uint8_t m, char *out, int cap, int *len)
{
    int k = 0;
    while (*at < n && ids[*at] < 256) {
        if (mask[*at] != m || k >= cap - 1) return -1;
        out[k++] = (char)ids[(*at)++];
    }
    out[k] = '\0';
    if (len) *len = k;
    if (*at >= n || ids[*at] != end || mask[*at] != m) return -1;
    (*at)++;
    return 0;
}

static void view_demo(const int32_t *ids, const uint8_t *mask, int n, struct demo_view *v)
{
    memset(v, 0, sizeof *v);
    int at = 0;
    while (at < n && ids[at] == TOK_TOOL_CALL && mask[at] == 1) {
        if (v->n_calls == MAX_CALLS) return;
        at++;
        if (read_span(ids, mask, n, &at, TOK_TOOL_CALL_END, 1, v->calls[v->n_calls],
                      ENV_CALL_MAX + 1, NULL))
            return;
        if (at >= n || ids[at] != TOK_TOOL_RESULT || mask[at] != 0) return;
        at++;
        if (read_span(ids, mask, n, &at, TOK_TOOL_RESULT_END, 0, v->payloads[v->n_calls],
                      ENV_PAYLOAD_MAX + 1, &v->payload_len[v->n_calls]))
            return;
        v->n_calls++;
    }
    if (at >= n || ids[at] != TOK_ANSWER || mask[at] != 1) return;
    at++;
    if (read_span(ids, mask, n, &at, TOK_ANSWER_END, 1, v->answer, ENV_ANSWER_MAX + 1, NULL))
        return;
    v->ok = at == n;
}

static int32_t g_ids[DEMO_CAP];
static uint8_t g_mask[DEMO_CAP];

static void test_questions_answerable(void)
{
    struct env e;
    make_env(&e, 1, 2000, 3, 0.0);
    const struct kb *kb = &e.search->kb;
    int per_hops[4] = {0}, bad_demo = 0, bad_answer = 0, not_shown = 0, replay = 0, calls = 0;
    int wrong_split = 0, min_payload = ENV_PAYLOAD_MAX, max_payload = 0, refined = 0;
    for (int i = 0; i < 1000; i++) {
        int split = i < 500 ? ENV_TRAIN : ENV_EVAL;
        struct env_problem pr, again;
        env_search_problem(&e, split, i, &pr);
        env_search_problem(&e, split, i, &again);
        CU_ASSERT(memcmp(&pr, &again, sizeof pr) == 0);
        CU_ASSERT_FATAL(pr.steps >= 1 && pr.steps <= 3);
        CU_ASSERT(pr.index == i && pr.split == split && pr.answer[0] && pr.text[0]);
        per_hops[pr.steps]++;
        struct search_question q;
        search_question(&e, split, i, &q);
        int idx = q.person - kb->first[KB_PERSON];
        wrong_split += (idx % 10 == 9) != (split == ENV_EVAL);
        CU_ASSERT(strstr(pr.text, kb_name(kb, q.person)) != NULL);

        int n = env_search_demo(&e, &pr, 42, g_ids, g_mask, DEMO_CAP);
        struct demo_view v;
        if (n <= 0) {
            bad_demo++;
            continue;
        }
        view_demo(g_ids, g_mask, n, &v);
        if (!v.ok || v.n_calls < pr.steps || v.n_calls > 2 * pr.steps) {
            bad_demo++;
            continue;
        }
        calls += v.n_calls;
        refined += v.n_calls > pr.steps;
        bad_answer += strcmp(v.answer, pr.answer) != 0;
        /* The answer was read off the last search, not known in advance. */
        not_shown += strstr(v.payloads[v.n_calls - 1], pr.answer) == NULL;
        for (int c = 0; c < v.n_calls; c++) {
            struct env_tool_result r;
            env_search_tool(&e, v.calls[c], strlen(v.calls[c]), 0, &r);
            replay += r.status != TOOL_SUCCESS || r.len != v.payload_len[c] ||
                      memcmp(r.text, v.payloads[c], (size_t)r.len) != 0;
            if (v.payload_len[c] < min_payload) min_payload = v.payload_len[c];
            if (v.payload_len[c] > max_payload) max_payload = v.payload_len[c];
        }
    }
    printf("\n    hops 1/2/3: %d/%d/%d, %d calls, %d refined, payload %d..%d bytes (k = 3)\n",
           per_hops[1], per_hops[2], per_hops[3], calls, refined, min_payload, max_payload);
    CU_ASSERT(per_hops[1] > 250 && per_hops[2] > 250 && per_hops[3] > 250);
    CU_ASSERT_EQUAL(bad_demo, 0);
    CU_ASSERT_EQUAL(bad_answer, 0);
    CU_ASSERT_EQUAL(not_shown, 0);
    CU_ASSERT_EQUAL(replay, 0);
    CU_ASSERT_EQUAL(wrong_split, 0);
    CU_ASSERT(max_payload <= ENV_PAYLOAD_MAX - 1);

    /* Three example demonstrations, one per hop count, for the record. */
    for (int hops = 1; hops <= 3; hops++) {
        for (int i = 0; i < 100; i++) {
            struct env_problem pr;
            env_search_problem(&e, ENV_TRAIN, i, &pr);
            if (pr.steps != hops) continue;
            int n = env_search_demo(&e, &pr, 42, g_ids, g_mask, DEMO_CAP);
            char text[DEMO_CAP * 2];
            size_t m = tok_decode(g_ids, (size_t)n, text, sizeof text - 1);
            text[m] = '\0';
            printf("    Q: %s\n    A: %s\n    %s\n", pr.text, pr.answer, text);
            break;
        }
    }
    env_search_free(&e);
}

/* A demonstration that differs from the rate-0 one made a mistake. */
static void test_demo_mistakes(void)
{
    struct env e;
    make_env(&e, 1, 2000, 3, 0.3);
    int differ = 0, wrong = 0, recovered = 0, other = 0, total = 1000;
    for (int i = 0; i < total; i++) {
        struct env_problem pr;
        env_search_problem(&e, i % 2, i, &pr);
        struct demo_view base, v;
        e.p.demo_mistake_rate = 0.0;
        int nb = env_search_demo(&e, &pr, 7, g_ids, g_mask, DEMO_CAP);
        CU_ASSERT_FATAL(nb > 0);
        view_demo(g_ids, g_mask, nb, &base);
        e.p.demo_mistake_rate = 0.3;
        int n = env_search_demo(&e, &pr, 7, g_ids, g_mask, DEMO_CAP);
        CU_ASSERT_FATAL(n > 0);
        view_demo(g_ids, g_mask, n, &v);
        CU_ASSERT_FATAL(base.ok && v.ok);
        int same = n == nb && v.n_calls == base.n_calls && strcmp(v.answer, base.answer) == 0;
        for (int c = 0; same && c < v.n_calls; c++) same = strcmp(v.calls[c], base.calls[c]) == 0;
        if (same) continue;
        differ++;
        if (strcmp(v.answer, pr.answer) != 0) {
            wrong++;
            CU_ASSERT(v.n_calls < pr.steps); /* answered after too few hops */
        } else if (v.n_calls > base.n_calls || strcmp(v.calls[0], base.calls[0]) != 0) {
            recovered++;
        } else {
            other++;
        }
    }
    double share = (double)differ / total;
    printf("\n    mistakes %.3f (rate 0.3): %d wrong answers, %d recoveries\n", share, wrong,
           recovered);
    CU_ASSERT(share > 0.24 && share < 0.36);
    CU_ASSERT(wrong > differ / 4 && recovered > differ / 4);
    CU_ASSERT_EQUAL(other, 0);

    /* Rate 1: every demonstration errs; keyed by the demo seed. */
    e.p.demo_mistake_rate = 1.0;
    int all = 0, seed_changes = 0;
    for (int i = 0; i < 100; i++) {
        struct env_problem pr;
        env_search_problem(&e, ENV_TRAIN, i, &pr);
        struct demo_view v, w;
        int n = env_search_demo(&e, &pr, 7, g_ids, g_mask, DEMO_CAP);
        view_demo(g_ids, g_mask, n, &v);
        all += v.ok && (strcmp(v.answer, pr.answer) != 0 || v.n_calls > pr.steps);
        n = env_search_demo(&e, &pr, 8, g_ids, g_mask, DEMO_CAP);
        view_demo(g_ids, g_mask, n, &w);
        seed_changes += strcmp(v.answer, w.answer) != 0 || v.n_calls != w.n_calls;
    }
    CU_ASSERT_EQUAL(all, 100);
    CU_ASSERT(seed_changes > 10);
    env_search_free(&e);
}

static void test_demo_cap_and_foreign(void)
{
    struct env e;
    make_env(&e, 1, 2000, 3, 0.0);
    struct env_problem pr;
    env_search_problem(&e, ENV_EVAL, 3, &pr);
    int n = env_search_demo(&e, &pr, 1, g_ids, g_mask, DEMO_CAP);
    CU_ASSERT_FATAL(n > 0);
    int32_t *ids = xmalloc((size_t)n * sizeof *ids);
    uint8_t *mask = xmalloc((size_t)n);
    CU_ASSERT_EQUAL(env_search_demo(&e, &pr, 1, ids, mask, n), n); /* exact fit */
    CU_ASSERT(memcmp(ids, g_ids, (size_t)n * sizeof *ids) == 0);
    CU_ASSERT_EQUAL(env_search_demo(&e, &pr, 1, ids, mask, n - 1), -1);
    CU_ASSERT_EQUAL(env_search_demo(&e, &pr, 1, ids, mask, 1), -1);
    CU_ASSERT_EQUAL(env_search_demo(&e, &pr, 1, NULL, NULL, 0), -1);
    free(ids);
    free(mask);
    /* A problem the generator did not make (a JSONL prompt): no demonstration. */
    snprintf(pr.text, sizeof pr.text, "Who wrote the song about the sea?");
    CU_ASSERT_EQUAL(env_search_demo(&e, &pr, 1, g_ids, g_mask, DEMO_CAP), -1);
    env_search_free(&e);
}

/* ---- the tool ---- */

static int is_known_error(const char *t)
{
    return strcmp(t, "error: query too long") == 0 || strcmp(t, "error: empty query") == 0 ||
           strcmp(t, "error: no results") == 0;
}

/* Success payloads are "1. passage\n2. passage..." with real passages, whole lines. */
static int payload_well_formed(const struct env *e, const struct env_tool_result *r)
{
    if (r->len < 0 || r->len > ENV_PAYLOAD_MAX - 1 || r->text[r->len] != '\0' ||
        (int)strlen(r->text) != r->len)
        return 0;
    if (r->status != TOOL_SUCCESS)
        return is_known_error(r->text) || strcmp(r->text, "error: timeout") == 0;
    const struct kb *kb = &e->search->kb;
    int line_no = 0;
    for (const char *line = r->text, *end = r->text + r->len; line <= end;) {
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol) eol = end;
        char head[16];
        int hl = snprintf(head, sizeof head, "%d. ", ++line_no);
        if (eol - line < hl || strncmp(line, head, (size_t)hl) != 0) return 0;
        size_t pl = (size_t)(eol - line - hl);
        int found = 0;
        for (int32_t f = 0; f < kb->n_facts && !found; f++) {
            const char *p = kb_passage(kb, f);
            found = strlen(p) == pl && memcmp(p, line + hl, pl) == 0;
        }
        if (!found) return 0;
        line = eol + 1;
    }
    return line_no >= 1 && line_no <= e->p.search_top_k;
}

static void test_tool_malformed(void)
{
    struct env e;
    make_env(&e, 1, 2000, 3, 0.0);
    struct env_tool_result r;
    const struct kb *kb = &e.search->kb;

    struct {
        const char *call;
        size_t len;
        const char *want;
    } cases[] = {
        {"", 0, "error: empty query"},
        {NULL, 0, "error: empty query"},
        {"     ", 5, "error: empty query"},
        {"\t\n\r ", 4, "error: empty query"},
        {"?!.,;:'\"()[]{}<>/\\|-_+=*&^%$#@~`", 33, "error: empty query"},
        {"\0\0\0", 3, "error: empty query"},
        {"\xff\xfe\x80\xc3\xa9", 5, "error: empty query"},
        {"qqqzzzx wwvvkk", 14, "error: no results"},
        {"<tool_call>", 11, "error: no results"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        env_search_tool(&e, cases[i].call, cases[i].len, 0, &r);
        CU_ASSERT_EQUAL(r.tool, ENV_TOOL_SEARCH);
        CU_ASSERT_EQUAL(r.status, TOOL_FAILURE);
        CU_ASSERT_STRING_EQUAL(r.text, cases[i].want);
        CU_ASSERT_EQUAL(r.len, (int)strlen(cases[i].want));
    }

    /* Length: ENV_CALL_MAX bytes are a query, one more is an error; so is 1 MB. */
    char *huge = xmalloc(1 << 20);
    for (size_t i = 0; i < (1 << 20); i++) huge[i] = "born in "[i % 8];
    env_search_tool(&e, huge, ENV_CALL_MAX, 0, &r);
    CU_ASSERT_EQUAL(r.status, TOOL_SUCCESS);
    CU_ASSERT(payload_well_formed(&e, &r));
    env_search_tool(&e, huge, ENV_CALL_MAX + 1, 0, &r);
    CU_ASSERT_EQUAL(r.status, TOOL_FAILURE);
    CU_ASSERT_STRING_EQUAL(r.text, "error: query too long");
    env_search_tool(&e, huge, 1 << 20, 0, &r);
    CU_ASSERT_STRING_EQUAL(r.text, "error: query too long");
    free(huge);

    /* A passed deadline is a timeout, not a failure. */
    double now = wall_time();
    if (now > 2.0) {
        env_search_tool(&e, "born", 4, now - 1.0, &r);
        CU_ASSERT_EQUAL(r.status, TOOL_TIMEOUT);
        CU_ASSERT_STRING_EQUAL(r.text, "error: timeout");
    }
    env_search_tool(&e, "born", 4, now + 3600.0, &r);
    CU_ASSERT_EQUAL(r.status, TOOL_SUCCESS);

    /* Seeded random calls: raw bytes (NULs, high bytes), and word soup mixing the base's
     * words with junk. Every result is a success or a known error, well formed. */
    struct rng g;
    rng_init(&g, 99, 1, 2, 3);
    char call[ENV_CALL_MAX + 64];
    int bad = 0, successes = 0, failures = 0;
    for (int it = 0; it < 6000; it++) {
        size_t len = (size_t)rng_below(&g, ENV_CALL_MAX + 40);
        if (it % 2 == 0) {
            for (size_t i = 0; i < len; i++) call[i] = (char)rng_below(&g, 256);
        } else {
            size_t at = 0;
            while (at < len) {
                if (rng_below(&g, 3)) {
                    const char *w = kb_name(kb, (int32_t)rng_below(&g, (uint64_t)kb->n_entities));
                    size_t wl = strlen(w);
                    if (at + wl > len) wl = len - at;
                    memcpy(call + at, w, wl);
                    at += wl;
                } else {
                    call[at++] = "\0 .,?!\n\t\xff-"[rng_below(&g, 10)];
                }
            }
        }
        env_search_tool(&e, call, len, 0, &r);
        bad += r.tool != ENV_TOOL_SEARCH || !payload_well_formed(&e, &r);
        bad += r.status == TOOL_TIMEOUT;
        bad += len > ENV_CALL_MAX && strcmp(r.text, "error: query too long") != 0;
        successes += r.status == TOOL_SUCCESS;
        failures += r.status == TOOL_FAILURE;
    }
    printf("\n    6000 random calls: %d results, %d errors\n", successes, failures);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(successes > 1000 && failures > 1000);
    env_search_free(&e);
}

static void test_payload_bound(void)
{
    /* k = 64 passages of ~40 bytes do not fit 2 KiB: whole lines, cut at the bound. */
    struct env e;
    make_env(&e, 3, 2000, SEARCH_TOP_K_MAX, 0.0);
    struct env_tool_result r;
    env_search_tool(&e, "born in the city", 16, 0, &r);
    CU_ASSERT_EQUAL(r.status, TOOL_SUCCESS);
    CU_ASSERT(r.len <= ENV_PAYLOAD_MAX - 1 && r.len > ENV_PAYLOAD_MAX - 120);
    CU_ASSERT(payload_well_formed(&e, &r));
    int lines = 1;
    for (int i = 0; i < r.len; i++) lines += r.text[i] == '\n';
    CU_ASSERT(lines < SEARCH_TOP_K_MAX);
    /* The next line would not have fitted: the same query's next passage. */
    struct bm25_hit hits[SEARCH_TOP_K_MAX];
    int n;
    CU_ASSERT_EQUAL(bm25_query(&e.search->index, "born in the city", 16, SEARCH_TOP_K_MAX, 0,
                               hits, &n),
                    BM25_OK);
    CU_ASSERT_FATAL(n > lines);
    char head[16];
    int hl = snprintf(head, sizeof head, "\n%d. ", lines + 1);
    int next_len = (int)strlen(kb_passage(&e.search->kb, hits[lines].doc));
    CU_ASSERT(r.len + hl + next_len > ENV_PAYLOAD_MAX - 1);
    env_search_free(&e);

    /* Payload sizes vary with k. */
    int len_k[3];
    for (int k = 1; k <= 3; k++) {
        make_env(&e, 1, 2000, k, 0.0);
        env_search_tool(&e, "born", 4, 0, &r);
        len_k[k - 1] = r.len;
        env_search_free(&e);
    }
    CU_ASSERT(len_k[0] < len_k[1] && len_k[1] < len_k[2]);
}

static void test_init_errors(void)
{
    struct {
        int entities, top_k, hops;
        double rate;
        const char *key;
    } bad[] = {
        {5, 3, 3, 0.0, "search_entities"},
        {KB_MAX_PEOPLE + 1, 3, 3, 0.0, "search_entities"},
        {2000, 0, 3, 0.0, "search_top_k"},
        {2000, SEARCH_TOP_K_MAX + 1, 3, 0.0, "search_top_k"},
        {2000, 3, 0, 0.0, "search_max_hops"},
        {2000, 3, 4, 0.0, "search_max_hops"},
        {2000, 3, 3, 1.5, "demo_mistake_rate"},
        {2000, 3, 3, NAN, "demo_mistake_rate"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct env e = {0};
        char err[256] = "";
        e.p.kind = ENV_KIND_SEARCH;
        e.p.seed = 1;
        e.p.search_entities = bad[i].entities;
        e.p.search_top_k = bad[i].top_k;
        e.p.search_max_hops = bad[i].hops;
        e.p.demo_mistake_rate = bad[i].rate;
        CU_ASSERT_EQUAL(env_search_init(&e, err, sizeof err), -1);
        CU_ASSERT_PTR_NULL(e.search);
        CU_ASSERT(strstr(err, bad[i].key) != NULL);
        CU_ASSERT_EQUAL(env_search_n_passages(&e), 0);
        env_search_free(&e);
    }
    /* The smallest world still asks every kind of question and answers it. */
    struct env e;
    make_env(&e, 5, KB_MIN_PEOPLE, 1, 0.0);
    int ok = 0;
    for (int i = 0; i < 200; i++) {
        struct env_problem pr;
        struct demo_view v;
        env_search_problem(&e, i % 2, i, &pr);
        int n = env_search_demo(&e, &pr, 3, g_ids, g_mask, DEMO_CAP);
        if (n <= 0) continue;
        view_demo(g_ids, g_mask, n, &v);
        ok += v.ok && strcmp(v.answer, pr.answer) == 0;
    }
    CU_ASSERT_EQUAL(ok, 200);
    env_search_free(&e);
}

/* ---- thread safety ---- */

struct thread_arg {
    const struct env *e;
    int first, mismatches;
    const struct env_tool_result *want; /* (200) */
};

static void query_of(const struct env *e, int i, char *out, size_t cap)
{
    struct env_problem pr;
    env_search_problem(e, ENV_TRAIN, i, &pr);
    snprintf(out, cap, "%s", pr.text);
}

static void *thread_main(void *p)
{
    struct thread_arg *a = p;
    for (int j = 0; j < 200; j++) {
        int i = (a->first + j) % 200;
        char q[ENV_TEXT_MAX];
        struct env_tool_result r;
        query_of(a->e, i, q, sizeof q);
        env_search_tool(a->e, q, strlen(q), 0, &r);
        a->mismatches += r.len != a->want[i].len || strcmp(r.text, a->want[i].text) != 0;
    }
    return NULL;
}

static void test_threads(void)
{
    struct env e;
    make_env(&e, 1, 2000, 3, 0.0);
    struct env_tool_result *want = xmalloc(200 * sizeof *want);
    for (int i = 0; i < 200; i++) {
        char q[ENV_TEXT_MAX];
        query_of(&e, i, q, sizeof q);
        env_search_tool(&e, q, strlen(q), 0, &want[i]);
    }
    pthread_t th[4];
    struct thread_arg args[4];
    for (int t = 0; t < 4; t++) {
        args[t] = (struct thread_arg){&e, 50 * t, 0, want};
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[t], NULL, thread_main, &args[t]), 0);
    }
    for (int t = 0; t < 4; t++) {
        CU_ASSERT_EQUAL(pthread_join(th[t], NULL), 0);
        CU_ASSERT_EQUAL(args[t].mismatches, 0);
    }
    free(want);
    env_search_free(&e);
}

int main(void)
{
    static const struct test_case cases[] = {
        {"kb: 5k..20k passages, distinct names, passages state facts", test_kb_size_and_names},
        {"kb and problems are a function of the seed", test_kb_determinism},
        {"BM25, tiny corpus: hand-computed scores, ties by id, errors", test_bm25_tiny},
        {"1000 questions answered by following the expert", test_questions_answerable},
        {"demonstration mistakes: share ~ rate, wrong answers and recoveries", test_demo_mistakes},
        {"demonstration: cap respected, foreign problems refused", test_demo_cap_and_foreign},
        {"tool: malformed, huge, empty and random calls give clear errors", test_tool_malformed},
        {"tool: payload cut to whole lines within ENV_PAYLOAD_MAX", test_payload_bound},
        {"init: bad parameters named; the smallest world works", test_init_errors},
        {"tool: same results from 4 threads", test_threads},
        {NULL, NULL},
    };
    static const struct test_suite suites[] = {
        {"env_search", cases},
        {NULL, NULL},
    };
    return test_main(suites);
}
