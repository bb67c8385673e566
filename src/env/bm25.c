/*
 * BM25 retrieval for the search environment (src/env/search_internal.h): a string
 * table with dense ids (the index's vocabulary, also used for the knowledge base's
 * names) and an inverted index over lower-case alphanumeric word tokens.
 *
 * Scoring (Okapi BM25, k1 = 1.2, b = 0.75, Lucene's non-negative idf):
 *   score(d, q) = sum over distinct query words t in d of
 *                 idf(t) * tf(t,d) * (k1 + 1) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl))
 *   idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
 * A query word repeated counts once. Every document sharing a word with the query has
 * a positive score; the rest are not results. Ranking: score descending, then
 * document id ascending, so results are a pure function of index and query.
 *
 * Limits: document ids and term counts are int32; postings of one term are scanned in
 * full (no early termination), which at our sizes (10^4 passages) is microseconds.
 */
#include "env/search_internal.h"

#include "libra/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- string table ---- */

static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ULL;
    }
    return h ^ (h >> 29);
}

void strtab_init(struct strtab *t)
{
    memset(t, 0, sizeof *t);
    t->n_slots = 64;
    t->slots = xcalloc(t->n_slots, sizeof *t->slots);
    XGROW(t->off, t->cap_off, 1);
    t->off[0] = 0;
}

void strtab_free(struct strtab *t)
{
    if (!t) return;
    free(t->bytes);
    free(t->off);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

const char *strtab_str(const struct strtab *t, int32_t id)
{
    return t->bytes + t->off[id];
}

static int strtab_equal(const struct strtab *t, int32_t id, const char *s, size_t len)
{
    return (size_t)(t->off[id + 1] - t->off[id] - 1) == len &&
           memcmp(t->bytes + t->off[id], s, len) == 0;
}

int32_t strtab_find(const struct strtab *t, const char *s, size_t len)
{
    if (!t->slots) return -1;
    size_t mask = t->n_slots - 1;
    for (size_t i = (size_t)hash_bytes(s, len) & mask;; i = (i + 1) & mask) {
        int32_t v = t->slots[i];
        if (v == 0) return -1;
        if (strtab_equal(t, v - 1, s, len)) return v - 1;
    }
}

static void strtab_rehash(struct strtab *t)
{
    size_t n_slots = t->n_slots * 2;
    int32_t *slots = xcalloc(n_slots, sizeof *slots);
    for (int32_t id = 0; id < t->n; id++) {
        const char *s = t->bytes + t->off[id];
        size_t len = (size_t)(t->off[id + 1] - t->off[id] - 1);
        size_t i = (size_t)hash_bytes(s, len) & (n_slots - 1);
        while (slots[i]) i = (i + 1) & (n_slots - 1);
        slots[i] = id + 1;
    }
    free(t->slots);
    t->slots = slots;
    t->n_slots = n_slots;
}

int32_t strtab_intern(struct strtab *t, const char *s, size_t len, int *added)
{
    int32_t id = strtab_find(t, s, len);
    if (added) *added = id < 0;
    if (id >= 0) return id;
    if (t->n == INT32_MAX - 1) FATAL("string table full (%d strings)", (int)t->n);
    if ((size_t)(t->n + 1) * 2 > t->n_slots) strtab_rehash(t);
    id = t->n++;
    XGROW(t->bytes, t->cap_bytes, t->n_bytes + len + 1);
    memcpy(t->bytes + t->n_bytes, s, len);
    t->bytes[t->n_bytes + len] = '\0';
    t->n_bytes += len + 1;
    XGROW(t->off, t->cap_off, (size_t)t->n + 1);
    t->off[t->n] = (int64_t)t->n_bytes;
    size_t mask = t->n_slots - 1;
    size_t i = (size_t)hash_bytes(s, len) & mask;
    while (t->slots[i]) i = (i + 1) & mask;
    t->slots[i] = id + 1;
    return id;
}

/* ---- word tokens ---- */

static int is_word_byte(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

int bm25_next_word(const char *s, size_t len, size_t *pos, size_t *start, size_t *wlen)
{
    size_t i = *pos;
    while (i < len && !is_word_byte((unsigned char)s[i])) i++;
    if (i >= len) {
        *pos = len;
        return -1;
    }
    size_t j = i;
    while (j < len && is_word_byte((unsigned char)s[j])) j++;
    *start = i;
    *wlen = j - i;
    *pos = j;
    return 0;
}

static void lower_copy(char *dst, const char *src, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        dst[i] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
}

/* ---- index ---- */

struct posting_tmp {
    int32_t term, doc, tf;
};

static int cmp_int32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void bm25_build(struct bm25 *ix, const char *text, const int64_t *off, int32_t n_docs)
{
    memset(ix, 0, sizeof *ix);
    ix->n_docs = n_docs;
    strtab_init(&ix->terms);
    int32_t *doc_len = xcalloc(n_docs > 0 ? (size_t)n_docs : 1, sizeof *doc_len);
    struct posting_tmp *tmp = NULL;
    size_t n_tmp = 0, cap_tmp = 0;
    char *lower = NULL;
    size_t cap_lower = 0;
    int32_t *words = NULL;
    size_t cap_words = 0;
    int64_t total_len = 0;

    /* Pass 1: every document's word ids, sorted so equal words are adjacent (tf). */
    for (int32_t d = 0; d < n_docs; d++) {
        const char *s = text + off[d];
        size_t len = (size_t)(off[d + 1] - off[d]), pos = 0, start, wlen, nw = 0;
        XGROW(lower, cap_lower, len + 1);
        lower_copy(lower, s, len);
        while (bm25_next_word(lower, len, &pos, &start, &wlen) == 0) {
            XGROW(words, cap_words, nw + 1);
            words[nw++] = strtab_intern(&ix->terms, lower + start, wlen, NULL);
        }
        doc_len[d] = (int32_t)nw;
        total_len += (int64_t)nw;
        qsort(words, nw, sizeof *words, cmp_int32);
        for (size_t i = 0; i < nw;) {
            size_t j = i;
            while (j < nw && words[j] == words[i]) j++;
            XGROW(tmp, cap_tmp, n_tmp + 1);
            tmp[n_tmp++] = (struct posting_tmp){words[i], d, (int32_t)(j - i)};
            i = j;
        }
    }
    free(lower);
    free(words);

    /* Pass 2: counting sort by term; documents stay ascending within a term. */
    int32_t n_terms = ix->terms.n;
    ix->post_off = xcalloc((size_t)n_terms + 1, sizeof *ix->post_off);
    for (size_t i = 0; i < n_tmp; i++) ix->post_off[tmp[i].term + 1]++;
    for (int32_t t = 0; t < n_terms; t++) ix->post_off[t + 1] += ix->post_off[t];
    ix->post_doc = xmalloc((n_tmp ? n_tmp : 1) * sizeof *ix->post_doc);
    ix->post_tf = xmalloc((n_tmp ? n_tmp : 1) * sizeof *ix->post_tf);
    int64_t *fill = xmalloc(((size_t)n_terms + 1) * sizeof *fill);
    memcpy(fill, ix->post_off, ((size_t)n_terms + 1) * sizeof *fill);
    for (size_t i = 0; i < n_tmp; i++) {
        int64_t at = fill[tmp[i].term]++;
        ix->post_doc[at] = tmp[i].doc;
        ix->post_tf[at] = tmp[i].tf;
    }
    free(fill);
    free(tmp);

    ix->avgdl = n_docs > 0 ? (double)total_len / n_docs : 0.0;
    ix->doc_norm = xmalloc((n_docs > 0 ? (size_t)n_docs : 1) * sizeof *ix->doc_norm);
    for (int32_t d = 0; d < n_docs; d++) {
        double rel = ix->avgdl > 0 ? doc_len[d] / ix->avgdl : 0.0;
        ix->doc_norm[d] = BM25_K1 * (1.0 - BM25_B + BM25_B * rel);
    }
    free(doc_len);
    ix->idf = xmalloc(((size_t)n_terms + 1) * sizeof *ix->idf);
    for (int32_t t = 0; t < n_terms; t++) {
        double df = (double)(ix->post_off[t + 1] - ix->post_off[t]);
        ix->idf[t] = log1p((n_docs - df + 0.5) / (df + 0.5));
    }
}

void bm25_free(struct bm25 *ix)
{
    if (!ix) return;
    strtab_free(&ix->terms);
    free(ix->doc_norm);
    free(ix->idf);
    free(ix->post_off);
    free(ix->post_doc);
    free(ix->post_tf);
    memset(ix, 0, sizeof *ix);
}

/* a ranks before b: higher score, then lower id. */
static int hit_before(const struct bm25_hit *a, const struct bm25_hit *b)
{
    return a->score > b->score || (a->score == b->score && a->doc < b->doc);
}

static int passed(double deadline)
{
    return deadline > 0 && wall_time() > deadline;
}

int bm25_query(const struct bm25 *ix, const char *q, size_t len, int k, double deadline,
               struct bm25_hit *hits, int *n_hits)
{
    *n_hits = 0;
    if (passed(deadline)) return BM25_TIMEOUT;

    /* The query's distinct known words, ascending id (a fixed summation order). */
    char *lower = xmalloc(len + 1);
    lower_copy(lower, q ? q : "", q ? len : 0);
    int32_t *terms = xmalloc((len / 2 + 1) * sizeof *terms);
    size_t pos = 0, start, wlen, n_words = 0, n_terms = 0;
    while (bm25_next_word(lower, q ? len : 0, &pos, &start, &wlen) == 0) {
        n_words++;
        int32_t t = strtab_find(&ix->terms, lower + start, wlen);
        if (t >= 0) terms[n_terms++] = t;
    }
    free(lower);
    if (n_words == 0) {
        free(terms);
        return BM25_NO_TERMS;
    }
    qsort(terms, n_terms, sizeof *terms, cmp_int32);
    size_t n_unique = 0;
    for (size_t i = 0; i < n_terms; i++)
        if (n_unique == 0 || terms[n_unique - 1] != terms[i]) terms[n_unique++] = terms[i];
    if (n_unique == 0) {
        free(terms);
        return BM25_NO_MATCH;
    }

    double *score = xcalloc((size_t)ix->n_docs, sizeof *score);
    int32_t *touched = xmalloc((size_t)ix->n_docs * sizeof *touched);
    int32_t n_touched = 0;
    int status = BM25_OK;
    int64_t since_check = 0;
    for (size_t i = 0; i < n_unique && status == BM25_OK; i++) {
        int32_t t = terms[i];
        double idf = ix->idf[t];
        for (int64_t p = ix->post_off[t]; p < ix->post_off[t + 1]; p++) {
            if (++since_check >= BM25_DEADLINE_EVERY) {
                since_check = 0;
                if (passed(deadline)) {
                    status = BM25_TIMEOUT;
                    break;
                }
            }
            int32_t d = ix->post_doc[p];
            double tf = ix->post_tf[p];
            if (score[d] == 0.0) touched[n_touched++] = d;
            score[d] += idf * tf * (BM25_K1 + 1.0) / (tf + ix->doc_norm[d]);
        }
    }
    free(terms);

    /* Top k by insertion into a sorted array of at most k hits. */
    int n = 0;
    for (int32_t j = 0; j < n_touched && status == BM25_OK && k > 0; j++) {
        struct bm25_hit h = {touched[j], score[touched[j]]};
        if (n == k && !hit_before(&h, &hits[k - 1])) continue;
        int at = n < k ? n++ : k - 1;
        while (at > 0 && hit_before(&h, &hits[at - 1])) {
            hits[at] = hits[at - 1];
            at--;
        }
        hits[at] = h;
    }
    free(score);
    free(touched);
    if (status != BM25_OK) return status;
    if (n_touched == 0) return BM25_NO_MATCH;
    *n_hits = n;
    return BM25_OK;
}
