/*
 * The byte-level BPE tokenizer's private state (include/libra/bpe.h), shared by
 * bpe.c (lookups, accessors), bpe_load.c (tokenizer.json, tokenizer_config.json),
 * bpe_tables.c (the vocabulary, merge and added-token tables), bpe_pretok.c
 * (byte-level alphabet, NFC, split regexes), bpe_encode.c and bpe_decode.c.
 *
 * Dimensions: V = vocabulary size (1 + the largest id of the vocabulary and the added
 * tokens), M = merges, A = added tokens, R = split regexes of the pre-tokenizer.
 *
 * Tokens are kept as the raw bytes they stand for (the byte-level spelling "Ġthe" is
 * stored as " the"), so pre-tokens are looked up without mapping them to the
 * byte-level alphabet, and decoding is a copy.
 */
#ifndef LIBRA_BPE_INTERNAL_H
#define LIBRA_BPE_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "libra/bpe.h"

#ifndef PCRE2_MATCH_INVALID_UTF
#error "libra's BPE tokenizer needs PCRE2 10.34 or newer (PCRE2_MATCH_INVALID_UTF)"
#endif

enum { BPE_MAX_REGEX = 4 }; /* R: Split steps (+ ByteLevel's own regex) */

enum bpe_tok_flags {
    BPE_TOK_VOCAB = 1,   /* in model.vocab (reachable by merges) */
    BPE_TOK_ADDED = 2,   /* in added_tokens */
    BPE_TOK_SPECIAL = 4, /* added token with "special": true */
    BPE_TOK_ODD = 8,     /* vocabulary entry outside the byte-level alphabet: its
                          * spelling is its bytes, no pre-token maps to it */
};

struct bpe_tok {
    uint32_t off, len; /* raw bytes in bpe.pool (vocabulary entries) */
    int32_t added;     /* index in bpe.added, or -1 */
    uint32_t flags;    /* enum bpe_tok_flags; 0: no token has this id */
};

struct bpe_added {
    int32_t id;
    char *content; /* NUL-terminated; len bytes */
    size_t len;
    int special, lstrip, rstrip, single_word;
};

/* Byte trie over the added tokens' contents (leftmost-longest matching): children
 * as sibling lists, node 0 the root. */
struct bpe_trie_node {
    int32_t child, sibling; /* -1: none */
    int32_t added;          /* index in bpe.added of the token ending here, or -1 */
    uint8_t byte;           /* the byte on the edge into this node */
};

/* Open-addressing slot of the vocabulary table: raw bytes -> id. */
struct bpe_vslot {
    uint32_t tag; /* high bits of the hash */
    int32_t id;   /* -1: empty */
};

/* Open-addressing slot of the merge table: (left id, right id) -> (rank, merged id). */
struct bpe_mslot {
    uint64_t key; /* (uint64_t)left << 32 | right; BPE_MKEY_EMPTY: empty */
    int32_t rank, id;
};
#define BPE_MKEY_EMPTY UINT64_MAX

/* A slot of the pre-token cache (bpe_cache.c), 128 bytes: a sequence lock and 15
 * words: the key's hash, its length | ids << 8, the key (6 words), the ids (7 words). */
enum { BPE_CACHE_KEY = 48, BPE_CACHE_IDS = 14, BPE_CACHE_WORDS = 15 };
struct bpe_cslot {
    _Atomic uint32_t seq; /* odd: being written */
    _Atomic uint64_t w[BPE_CACHE_WORDS];
};

struct bpe {
    char *file; /* the tokenizer.json read (for messages) */
    int32_t n_ids;          /* V */
    struct bpe_tok *toks;   /* (V) */
    char *pool;             /* raw bytes of the vocabulary entries */
    size_t pool_len;

    struct bpe_vslot *vocab; /* (vmask + 1) */
    uint32_t vmask;
    int32_t *odd;            /* vocabulary entries outside the byte-level alphabet */
    int n_odd;               /* (kept for decode and bpe_token_id, never produced) */
    int32_t byte_id[256];    /* the id of each single byte */

    struct bpe_mslot *merges; /* (mmask + 1) */
    uint64_t mmask;
    int64_t n_merges;         /* M */
    int ignore_merges;        /* a pre-token in the vocabulary is one id, unmerged */

    struct bpe_added *added;  /* (A) */
    int n_added;
    struct bpe_trie_node *trie; /* (n_trie) */
    int32_t n_trie;
    uint8_t added_first[256]; /* 1 if some added token starts with this byte */

    int nfc;                    /* normalizer NFC */
    uint8_t *nfc_unstable;      /* bpe_nfc_table, when nfc */
    pcre2_code *re[BPE_MAX_REGEX];
    int n_re;                   /* R; 0: a whole section is one pre-token */

    int32_t bos, eos, pad;      /* -1: none */

    /* The one part written after load (thread-safe: bpe_cache.c). */
    struct bpe_cslot *cache;    /* (cache_mask + 1) */
    uint64_t cache_mask;
    int cache_mode_free;        /* no added token is in the vocabulary: cached ids
                                 * hold for both added-token modes */
};

/* ---- bpe.c ---- */
/* snprintf into err (when err and errlen); returns -1 so a caller can `return bpe_err(...)`. */
int bpe_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
uint64_t bpe_hash(const void *p, size_t n);
/* The vocabulary id of raw bytes p[0, n), or -1. */
int32_t bpe_vocab_find(const struct bpe *b, const void *p, size_t n);
int32_t bpe_vocab_find_h(const struct bpe *b, const void *p, size_t n, uint64_t h); /* h: bpe_hash */
/* The merge of left and right: its rank and merged id (*id), or -1 when none. */
static inline int32_t bpe_merge_find(const struct bpe *b, int32_t left, int32_t right, int32_t *id)
{
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    uint64_t h = (key * 0x9E3779B97F4A7C15ULL) >> 17;
    for (;; h++) {
        const struct bpe_mslot *s = &b->merges[h & b->mmask];
        if (s->key == key) return *id = s->id, s->rank;
        if (s->key == BPE_MKEY_EMPTY) return -1;
    }
}

/* ---- bpe_cache.c ---- */
void bpe_cache_init(struct bpe *b);
/* The cached ids of pre-token p[0, n) (hash h = bpe_hash(p, n)) into ids (room for
 * BPE_CACHE_IDS): their count, or -1 on a miss. */
int bpe_cache_get(const struct bpe *b, uint64_t h, const uint8_t *p, size_t n, int32_t *ids);
/* Remembers them (if they fit; a busy slot is left alone). */
void bpe_cache_put(const struct bpe *b, uint64_t h, const uint8_t *p, size_t n, const int32_t *ids, int k);

/* ---- bpe_tables.c (load time) ---- */
/* Sizes b->toks for ids [0, n_ids) and the pool for pool_cap bytes. */
void bpe_toks_init(struct bpe *b, int32_t n_ids, size_t pool_cap);
/* Records vocabulary entry id: raw bytes p[0, n), flags BPE_TOK_VOCAB (| BPE_TOK_ODD). */
void bpe_vocab_set(struct bpe *b, int32_t id, const char *p, size_t n, uint32_t flags);
/* Builds the vocabulary hash table from b->toks (after every bpe_vocab_set); -1
 * (message) when two entries stand for the same bytes. */
int bpe_vocab_index(struct bpe *b, char *err, size_t errlen);
void bpe_merges_init(struct bpe *b, int64_t n_merges);
/* Adds merge of rank `rank`; a later duplicate of the same pair replaces it. */
void bpe_merge_add(struct bpe *b, int32_t left, int32_t right, int32_t rank, int32_t id);
/* Builds the added tokens' trie from b->added. */
void bpe_trie_build(struct bpe *b);

/* ---- bpe_pretok.c ---- */
/* The byte-level alphabet (GPT-2): the code point standing for byte x, and back
 * (-1 for a code point outside the alphabet). */
uint32_t bpe_byte_char(uint8_t x);
int bpe_char_byte(uint32_t cp);
/* Decodes one UTF-8 sequence at s[0, n) into *cp; returns its length, or 0 if the
 * bytes there are not valid UTF-8 (then *cp is undefined). */
size_t bpe_utf8_next(const uint8_t *s, size_t n, uint32_t *cp);
/* Converts a byte-level spelling (UTF-8) into the raw bytes it stands for, in out
 * (room for n bytes); returns the length, or -1 if a character is outside the
 * alphabet or the spelling is not valid UTF-8. */
long bpe_spelling_bytes(const char *s, size_t n, char *out);
/* White_Space (the Unicode property), for added tokens' lstrip / rstrip. */
int bpe_is_space(uint32_t cp);
/* The pattern with \s and \S spelled out as Unicode White_Space (Oniguruma's \s;
 * PCRE2's also matches U+180E): "[...]" / "[^...]" outside classes, the ranges inside
 * ("\S" inside a class is left alone); \Q...\E spans untouched. malloc'd. */
char *bpe_regex_spaces(const char *pattern);
/* Compiles a split regex (PCRE2, UTF + UCP, JIT when available); NULL with PCRE2's
 * message and the offset in err. */
pcre2_code *bpe_regex_compile(const char *pattern, char *err, size_t errlen);
/* The code points NFC may change or combine with what precedes them, as a bitmap
 * (bit cp of BPE_NFC_TABLE_BYTES bytes; malloc'd): the normaliser's quick check. */
#define BPE_NFC_TABLE_BYTES (0x110000 / 8)
uint8_t *bpe_nfc_table(void);
/* NFC of s[0, n) when it may differ from s: returns a malloc'd buffer and its
 * length in *out_n; NULL when s is already NFC (the caller uses s). Bytes that are
 * not valid UTF-8 are kept as they are. unstable: bpe_nfc_table. */
char *bpe_nfc(const uint8_t *unstable, const char *s, size_t n, size_t *out_n);
/* The regex of a ByteLevel pre-tokenizer with use_regex true (GPT-2's). */
extern const char bpe_gpt2_pattern[];

#endif
