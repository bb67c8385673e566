/*
 * The byte-level BPE tokenizer (include/libra/bpe.h): lookups and accessors, the
 * hash, freeing. Loading is in bpe_load.c, encoding in bpe_encode.c, decoding in
 * bpe_decode.c; the private layout is in bpe_internal.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe_internal.h"
#include "libra/log.h"

int bpe_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* A multiply-xorshift hash over 8-byte words: pre-tokens are short and hashed once
 * each, so a cheap mix is enough (the tables keep tags to skip most compares). */
uint64_t bpe_hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0x243F6A8885A308D3ULL ^ (n * 0x9E3779B97F4A7C15ULL);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    if (n) {
        uint64_t w = 0;
        memcpy(&w, s, n);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
    }
    h *= 0x94D049BB133111EBULL;
    return h ^ (h >> 29);
}

int32_t bpe_vocab_find(const struct bpe *b, const void *p, size_t n)
{
    return bpe_vocab_find_h(b, p, n, bpe_hash(p, n));
}

int32_t bpe_vocab_find_h(const struct bpe *b, const void *p, size_t n, uint64_t h)
{
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint64_t i = h;; i++) {
        const struct bpe_vslot *s = &b->vocab[i & b->vmask];
        if (s->id < 0) return -1;
        if (s->tag == tag) {
            const struct bpe_tok *t = &b->toks[s->id];
            if (t->len == n && memcmp(b->pool + t->off, p, n) == 0) return s->id;
        }
    }
}

void bpe_free(struct bpe *b)
{
    if (!b) return;
    for (int i = 0; i < b->n_re; i++) pcre2_code_free(b->re[i]);
    for (int i = 0; i < b->n_added; i++) free(b->added[i].content);
    free(b->added);
    free(b->trie);
    free(b->nfc_unstable);
    free(b->cache);
    free(b->merges);
    free(b->odd);
    free(b->vocab);
    free(b->pool);
    free(b->toks);
    free(b->file);
    free(b);
}

int32_t bpe_vocab_size(const struct bpe *b) { return b->n_ids; }

int32_t bpe_token_id(const struct bpe *b, const char *content)
{
    size_t n = strlen(content);
    for (int i = b->n_added - 1; i >= 0; i--) /* the last of equal contents, as the matcher */
        if (b->added[i].len == n && memcmp(b->added[i].content, content, n) == 0)
            return b->added[i].id;
    char small[256];
    char *raw = n <= sizeof small ? small : xmalloc(n);
    long m = bpe_spelling_bytes(content, n, raw);
    int32_t id = m >= 0 ? bpe_vocab_find(b, raw, (size_t)m) : -1;
    if (raw != small) free(raw);
    if (id >= 0) return id;
    for (int i = 0; i < b->n_odd; i++) { /* entries outside the byte-level alphabet */
        const struct bpe_tok *t = &b->toks[b->odd[i]];
        if (t->len == n && memcmp(b->pool + t->off, content, n) == 0) return b->odd[i];
    }
    return -1;
}

int bpe_is_special(const struct bpe *b, int32_t id)
{
    return id >= 0 && id < b->n_ids && (b->toks[id].flags & BPE_TOK_SPECIAL) != 0;
}

int bpe_is_added(const struct bpe *b, int32_t id)
{
    return id >= 0 && id < b->n_ids && (b->toks[id].flags & BPE_TOK_ADDED) != 0;
}

int32_t bpe_bos_id(const struct bpe *b) { return b->bos; }
int32_t bpe_eos_id(const struct bpe *b) { return b->eos; }
int32_t bpe_pad_id(const struct bpe *b) { return b->pad; }
int bpe_n_added(const struct bpe *b) { return b->n_added; }

int32_t bpe_added_id(const struct bpe *b, int i)
{
    return i >= 0 && i < b->n_added ? b->added[i].id : -1;
}

const char *bpe_added_content(const struct bpe *b, int i)
{
    return i >= 0 && i < b->n_added ? b->added[i].content : NULL;
}
