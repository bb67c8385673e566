/*
 * bpe_encode (include/libra/bpe.h): text -> ids.
 *
 *   1. added tokens (BPE_ADDED_ALL): the leftmost, longest added token in the text
 *      becomes its id (lstrip / rstrip take the whitespace beside it along); the text
 *      between added tokens is a section;
 *   2. each section is normalised (NFC when the file asks) and split by the
 *      pre-tokenizer's regexes, in turn (Isolated: matches and the gaps between them
 *      are pre-tokens);
 *   3. each pre-token is merged: its bytes start as the single-byte tokens, then the
 *      adjacent pair of lowest merge rank (leftmost on ties) is merged until no pair
 *      has a merge -- the order of Hugging Face's tokenizers and transformers.js. With
 *      ignore_merges (Llama 3) a pre-token found whole in the vocabulary is one id.
 *
 * Pre-tokens of up to 48 bytes (nearly all) merge in a small linked array, scanning
 * for the best pair (O(n^2) on a few bytes, no allocation), and are remembered in a
 * cache shared by all threads (bpe_cache.c); longer ones use a binary heap of
 * candidate pairs with lazy invalidation (O(n log n)). Everything else a call needs
 * is in its own struct enc: calls on one struct bpe run concurrently.
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "bpe_internal.h"
#include "libra/log.h"

enum { SHORT_WORD = BPE_CACHE_KEY }; /* bytes: array merging (and the cache) up to this length */

struct heap_ent {
    uint64_t key;         /* rank << 32 | position of the pair's left symbol */
    int32_t left, right;  /* the pair's ids when pushed (to spot stale entries) */
    int32_t merged;       /* the id they merge into */
};

/* One call's state. */
struct enc {
    const struct bpe *b;
    int mode;       /* enum bpe_added_mode */
    int32_t *out;   /* (cap) */
    size_t cap, n;  /* n: ids the text needs so far */
    pcre2_match_data *md[BPE_MAX_REGEX];
    int32_t *sym;   /* long words: id, next, prev: (3, sym_cap) */
    size_t sym_cap;
    struct heap_ent *heap; /* (heap_cap) */
    size_t heap_cap;
};

static inline void emit(struct enc *e, int32_t id)
{
    if (e->n < e->cap) e->out[e->n] = id;
    e->n++;
}

/* Merges producing an added token are skipped in BPE_ADDED_NONE (a file may list an
 * added token in the vocabulary as well; plain text must never yield it). */
static inline int32_t pair_rank(const struct enc *e, int32_t l, int32_t r, int32_t *id)
{
    int32_t rank = bpe_merge_find(e->b, l, r, id);
    if (rank >= 0 && e->mode == BPE_ADDED_NONE && (e->b->toks[*id].flags & BPE_TOK_ADDED)) return -1;
    return rank;
}

/* Symbols in a fixed array linked by nxt (SHORT_WORD: end); rank[i] / mid[i]: the
 * merge of symbol i with the next one (-1: none). Each step scans the live symbols for
 * the lowest rank (the first one on ties: the leftmost). */
static int merge_short(struct enc *e, const uint8_t *p, size_t n, int32_t *out)
{
    int32_t id[SHORT_WORD], rank[SHORT_WORD], mid[SHORT_WORD];
    uint8_t nxt[SHORT_WORD], prv[SHORT_WORD];
    for (size_t i = 0; i < n; i++) {
        id[i] = e->b->byte_id[p[i]];
        nxt[i] = (uint8_t)(i + 1 < n ? i + 1 : SHORT_WORD);
        prv[i] = (uint8_t)(i ? i - 1 : SHORT_WORD);
    }
    for (size_t i = 0; i + 1 < n; i++) rank[i] = pair_rank(e, id[i], id[i + 1], &mid[i]);
    rank[n - 1] = -1;
    for (;;) {
        unsigned best = SHORT_WORD;
        uint32_t br = UINT32_MAX;
        for (unsigned i = 0; i != SHORT_WORD; i = nxt[i])
            if ((uint32_t)rank[i] < br) br = (uint32_t)rank[i], best = i; /* -1: UINT32_MAX */
        if (best == SHORT_WORD) break;
        unsigned r = nxt[best];
        id[best] = mid[best];
        nxt[best] = nxt[r];
        if (nxt[r] != SHORT_WORD) prv[nxt[r]] = (uint8_t)best;
        if (prv[best] != SHORT_WORD) rank[prv[best]] = pair_rank(e, id[prv[best]], id[best], &mid[prv[best]]);
        rank[best] = nxt[best] != SHORT_WORD ? pair_rank(e, id[best], id[nxt[best]], &mid[best]) : -1;
    }
    int k = 0;
    for (unsigned i = 0; i != SHORT_WORD; i = nxt[i]) out[k++] = id[i];
    return k;
}

static void heap_push(struct heap_ent *h, size_t *len, struct heap_ent x)
{
    size_t i = (*len)++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (h[up].key <= x.key) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = x;
}

static struct heap_ent heap_pop(struct heap_ent *h, size_t *len)
{
    struct heap_ent top = h[0], x = h[--*len];
    size_t i = 0, n = *len;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1].key < h[c].key) c++;
        if (x.key <= h[c].key) break;
        h[i] = h[c];
        i = c;
    }
    if (n) h[i] = x;
    return top;
}

static void push_pair(struct enc *e, size_t *hn, const int32_t *id, int32_t pos, int32_t next)
{
    int32_t merged;
    int32_t rank = pair_rank(e, id[pos], id[next], &merged);
    if (rank < 0) return;
    heap_push(e->heap, hn, (struct heap_ent){
        .key = (uint64_t)rank << 32 | (uint32_t)pos, .left = id[pos], .right = id[next], .merged = merged});
}

/* Symbols live at the position of their first byte; next/prev link the live ones
 * (next == n: last). A heap entry is stale when the pair at its position is no
 * longer the one it was pushed for. */
static void merge_long(struct enc *e, const uint8_t *p, size_t n)
{
    XGROW(e->sym, e->sym_cap, 3 * n);
    XGROW(e->heap, e->heap_cap, 3 * n);
    int32_t *id = e->sym, *next = id + n, *prev = next + n;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        id[i] = e->b->byte_id[p[i]];
        next[i] = (int32_t)i + 1;
        prev[i] = (int32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < n; i++) push_pair(e, &hn, id, (int32_t)i, (int32_t)i + 1);
    while (hn) {
        struct heap_ent h = heap_pop(e->heap, &hn);
        int32_t pos = (int32_t)(uint32_t)h.key, r = next[pos];
        if (id[pos] != h.left || (size_t)r >= n || id[r] != h.right) continue;
        id[pos] = h.merged;
        id[r] = -1;
        next[pos] = next[r];
        if ((size_t)next[r] < n) prev[next[r]] = pos;
        if (prev[pos] >= 0) push_pair(e, &hn, id, prev[pos], pos);
        if ((size_t)next[pos] < n) push_pair(e, &hn, id, pos, next[pos]);
    }
    for (size_t i = 0; i < n; i = (size_t)next[i]) emit(e, id[i]);
}

/* One pre-token. */
static void encode_word(struct enc *e, const char *s, size_t n)
{
    const struct bpe *b = e->b;
    const uint8_t *p = (const uint8_t *)s;
    if (n == 0) return;
    if (n == 1) {
        emit(e, b->byte_id[p[0]]);
        return;
    }
    uint64_t h = bpe_hash(p, n);
    if (b->ignore_merges) {
        int32_t id = bpe_vocab_find_h(b, p, n, h);
        if (id >= 0 && (e->mode == BPE_ADDED_ALL || !(b->toks[id].flags & BPE_TOK_ADDED))) {
            emit(e, id);
            return;
        }
    }
    if (n > SHORT_WORD) {
        merge_long(e, p, n);
        return;
    }
    /* The cache holds BPE_ADDED_ALL's ids, the same as BPE_ADDED_NONE's unless an
     * added token is in the vocabulary. */
    int cached = (e->mode == BPE_ADDED_ALL || b->cache_mode_free);
    int32_t ids[SHORT_WORD];
    int k = cached ? bpe_cache_get(b, h, p, n, ids) : -1;
    if (k < 0) {
        k = merge_short(e, p, n, ids);
        if (cached) bpe_cache_put(b, h, p, n, ids, k);
    }
    for (int i = 0; i < k; i++) emit(e, ids[i]);
}

/* pcre2_match, falling back to the interpreter when the JIT runs out of stack.
 * Returns the match count, PCRE2_ERROR_NOMATCH, or another (negative) error. */
static int match_at(const pcre2_code *re, const char *s, size_t n, size_t pos, pcre2_match_data *md)
{
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, 0, md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_JIT, md, NULL);
    return rc;
}

/* Splits s[0, n) by regex `level` (Isolated: matches and gaps are pieces) and passes
 * each piece to the next level; past the last regex, pieces are pre-tokens. */
static void split(struct enc *e, int level, const char *s, size_t n)
{
    const struct bpe *b = e->b;
    if (n == 0) return;
    if (level == b->n_re) {
        encode_word(e, s, n);
        return;
    }
    pcre2_match_data *md = e->md[level];
    if (!md) {
        md = e->md[level] = pcre2_match_data_create_from_pattern(b->re[level], NULL);
        if (!md) FATAL("out of memory (PCRE2 match data)");
    }
    size_t pos = 0, prev = 0;
    while (pos < n) {
        int rc = match_at(b->re[level], s, n, pos, md);
        if (rc < 0) {
            /* No further match -- or a PCRE2 resource limit on a pathological text:
             * the rest is then one gap (a piece), which still round-trips. */
            if (rc != PCRE2_ERROR_NOMATCH) {
                PCRE2_UCHAR msg[128];
                pcre2_get_error_message(rc, msg, sizeof msg);
                LOG_W("%s: split regex %d: %s at byte %zu of a %zu-byte section; the rest is one piece",
                      b->file, level, (const char *)msg, pos, n);
            }
            break;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (ms > prev) split(e, level + 1, s + prev, ms - prev);
        split(e, level + 1, s + ms, me - ms);
        prev = me;
        pos = me;
        if (me == ms) /* an empty match: it ends the gap; go on one character later */
            for (pos++; pos < n && ((uint8_t)s[pos] & 0xC0) == 0x80; pos++) {}
    }
    if (prev < n) split(e, level + 1, s + prev, n - prev);
}

/* A section of plain text (no added tokens in it, or none wanted). */
static void encode_section(struct enc *e, const char *s, size_t n)
{
    if (n == 0) return;
    size_t nn = 0;
    char *norm = e->b->nfc ? bpe_nfc(e->b->nfc_unstable, s, n, &nn) : NULL;
    if (norm) split(e, 0, norm, nn);
    else split(e, 0, s, n);
    free(norm);
}

/* ---- added tokens ---- */

/* The longest added token at s[0, n): its length, its index in *a; 0 if none. */
static size_t match_added(const struct bpe *b, const uint8_t *s, size_t n, int *a)
{
    int32_t node = 0;
    size_t best = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t c = b->trie[node].child;
        while (c >= 0 && b->trie[c].byte != s[i]) c = b->trie[c].sibling;
        if (c < 0) break;
        node = c;
        if (b->trie[node].added >= 0) best = i + 1, *a = b->trie[node].added;
    }
    return best;
}

/* The code point ending at s[end) (s[0, end) is the text before), its start in *start;
 * invalid bytes come back as themselves (never space, never alphanumeric). */
static uint32_t char_before(const uint8_t *s, size_t end, size_t *start)
{
    size_t i = end - 1;
    while (i > 0 && end - i < 4 && (s[i] & 0xC0) == 0x80) i--;
    uint32_t cp;
    if (bpe_utf8_next(s + i, end - i, &cp) == end - i) return *start = i, cp;
    return *start = end - 1, 0xFFFFFFFFu;
}

static int is_alnum(uint32_t cp)
{
    if (cp > 0x10FFFF) return 0;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
           (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

/* single_word: the token must not touch a letter or digit on either side. */
static int single_word_ok(const uint8_t *s, size_t len, size_t at, size_t end)
{
    size_t st;
    uint32_t cp;
    if (at > 0 && is_alnum(char_before(s, at, &st))) return 0;
    if (end < len && bpe_utf8_next(s + end, len - end, &cp) && is_alnum(cp)) return 0;
    return 1;
}

static void encode_added(struct enc *e, const char *text, size_t len)
{
    const struct bpe *b = e->b;
    const uint8_t *s = (const uint8_t *)text;
    size_t start = 0, i = 0;
    while (i < len) {
        if (!b->added_first[s[i]]) {
            i++;
            continue;
        }
        int a = -1;
        size_t m = match_added(b, s + i, len - i, &a);
        if (!m || (b->added[a].single_word && !single_word_ok(s, len, i, i + m))) {
            i++;
            continue;
        }
        size_t end = i, st;
        if (b->added[a].lstrip)
            while (end > start && bpe_is_space(char_before(s, end, &st)) && st >= start) end = st;
        encode_section(e, text + start, end - start);
        emit(e, b->added[a].id);
        i += m;
        if (b->added[a].rstrip) {
            uint32_t cp;
            size_t k;
            while (i < len && (k = bpe_utf8_next(s + i, len - i, &cp)) && bpe_is_space(cp)) i += k;
        }
        start = i;
    }
    encode_section(e, text + start, len - start);
}

size_t bpe_encode(const struct bpe *b, const char *text, size_t len, int added, int32_t *out, size_t cap)
{
    struct enc e = {.b = b, .mode = added == BPE_ADDED_ALL ? BPE_ADDED_ALL : BPE_ADDED_NONE,
                    .out = out, .cap = out ? cap : 0};
    if (e.mode == BPE_ADDED_ALL && b->n_added) encode_added(&e, text, len);
    else encode_section(&e, text, len);
    for (int i = 0; i < BPE_MAX_REGEX; i++) pcre2_match_data_free(e.md[i]);
    free(e.sym);
    free(e.heap);
    return e.n;
}
