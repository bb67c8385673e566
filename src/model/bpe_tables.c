/*
 * The BPE tokenizer's lookup tables, built once at load (bpe_internal.h): the token
 * array and its byte pool, the vocabulary hash table (raw bytes -> id), the merge
 * table ((left, right) -> (rank, merged id)) and the added tokens' trie. All are
 * open-addressing tables at most half full, read-only after bpe_load.
 */
#include <stdlib.h>
#include <string.h>

#include "bpe_internal.h"
#include "libra/log.h"

static uint64_t pow2_at_least(uint64_t n)
{
    uint64_t p = 16;
    while (p < n) p <<= 1;
    return p;
}

void bpe_toks_init(struct bpe *b, int32_t n_ids, size_t pool_cap)
{
    b->n_ids = n_ids;
    b->toks = xcalloc((size_t)n_ids, sizeof *b->toks);
    for (int32_t i = 0; i < n_ids; i++) b->toks[i].added = -1;
    b->pool = xmalloc(pool_cap ? pool_cap : 1);
    b->pool_len = 0;
}

void bpe_vocab_set(struct bpe *b, int32_t id, const char *p, size_t n, uint32_t flags)
{
    struct bpe_tok *t = &b->toks[id];
    t->off = (uint32_t)b->pool_len;
    t->len = (uint32_t)n;
    t->flags |= flags;
    memcpy(b->pool + b->pool_len, p, n);
    b->pool_len += n;
    if (flags & BPE_TOK_ODD) {
        b->odd = xrealloc(b->odd, (size_t)(b->n_odd + 1) * sizeof *b->odd);
        b->odd[b->n_odd++] = id;
    }
}

int bpe_vocab_index(struct bpe *b, char *err, size_t errlen)
{
    uint64_t cap = pow2_at_least(2 * (uint64_t)b->n_ids);
    b->vocab = xmalloc(cap * sizeof *b->vocab);
    b->vmask = (uint32_t)(cap - 1);
    for (uint64_t i = 0; i < cap; i++) b->vocab[i].id = -1;
    for (int32_t id = 0; id < b->n_ids; id++) {
        const struct bpe_tok *t = &b->toks[id];
        if (!(t->flags & BPE_TOK_VOCAB) || (t->flags & BPE_TOK_ODD)) continue;
        const char *p = b->pool + t->off;
        int32_t other = bpe_vocab_find(b, p, t->len);
        if (other >= 0)
            return bpe_err(err, errlen, "%s: model.vocab: ids %d and %d spell the same bytes", b->file,
                           (int)other, (int)id);
        uint64_t h = bpe_hash(p, t->len);
        uint64_t i = h;
        while (b->vocab[i & b->vmask].id >= 0) i++;
        b->vocab[i & b->vmask] = (struct bpe_vslot){.tag = (uint32_t)(h >> 32), .id = id};
    }
    return 0;
}

void bpe_merges_init(struct bpe *b, int64_t n_merges)
{
    uint64_t cap = pow2_at_least(2 * (uint64_t)(n_merges > 0 ? n_merges : 1));
    b->merges = xmalloc(cap * sizeof *b->merges);
    b->mmask = cap - 1;
    for (uint64_t i = 0; i < cap; i++) b->merges[i].key = BPE_MKEY_EMPTY;
    b->n_merges = 0;
}

void bpe_merge_add(struct bpe *b, int32_t left, int32_t right, int32_t rank, int32_t id)
{
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    uint64_t h = (key * 0x9E3779B97F4A7C15ULL) >> 17; /* as bpe_merge_find */
    for (;; h++) {
        struct bpe_mslot *s = &b->merges[h & b->mmask];
        if (s->key == key || s->key == BPE_MKEY_EMPTY) {
            if (s->key == BPE_MKEY_EMPTY) b->n_merges++;
            *s = (struct bpe_mslot){.key = key, .rank = rank, .id = id};
            return;
        }
    }
}

void bpe_trie_build(struct bpe *b)
{
    size_t total = 1;
    for (int i = 0; i < b->n_added; i++) total += b->added[i].len;
    b->trie = xmalloc(total * sizeof *b->trie);
    b->trie[0] = (struct bpe_trie_node){.child = -1, .sibling = -1, .added = -1};
    b->n_trie = 1;
    memset(b->added_first, 0, sizeof b->added_first);
    for (int i = 0; i < b->n_added; i++) {
        const uint8_t *s = (const uint8_t *)b->added[i].content;
        int32_t node = 0;
        for (size_t k = 0; k < b->added[i].len; k++) {
            int32_t c = b->trie[node].child;
            while (c >= 0 && b->trie[c].byte != s[k]) c = b->trie[c].sibling;
            if (c < 0) {
                c = b->n_trie++;
                b->trie[c] = (struct bpe_trie_node){
                    .child = -1, .sibling = b->trie[node].child, .added = -1, .byte = s[k]};
                b->trie[node].child = c;
            }
            node = c;
        }
        /* Two added tokens with the same content: the last in the file wins (as the
         * reference's content -> token map). */
        if (node != 0) b->trie[node].added = i;
        if (b->added[i].len) b->added_first[s[0]] = 1;
    }
}
