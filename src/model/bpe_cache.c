/*
 * The pre-token cache (bpe_internal.h): short pre-tokens and their ids, so a word
 * seen before costs one probe instead of its merges. The struct bpe is otherwise
 * read-only and shared by every thread that encodes; the cache is the one part they
 * write, so each slot is a sequence lock:
 *
 *   writer: seq even -> CAS to odd (or give up: another writer has it), store the
 *           words, seq + 2 (release);
 *   reader: seq (acquire), load the words, fence, seq again: a hit only if both are
 *           the same even value and the key matches; otherwise a miss (never a wait).
 *
 * Every word is an atomic (relaxed), so racing readers and writers are well defined
 * in C11. Direct-mapped: a new entry replaces the slot's old one. Keys of up to
 * BPE_CACHE_KEY bytes with up to BPE_CACHE_IDS ids fit; longer words are merged each
 * time (they are rare, and their merging is a smaller share of the work).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "bpe_internal.h"
#include "libra/log.h"

enum { CACHE_SLOTS = 1 << 15 }; /* x 128 bytes: 4 MiB */

void bpe_cache_init(struct bpe *b)
{
    void *p = NULL;
    if (posix_memalign(&p, 128, CACHE_SLOTS * sizeof(struct bpe_cslot)) != 0)
        FATAL("out of memory (BPE cache, %zu bytes)", CACHE_SLOTS * sizeof(struct bpe_cslot));
    b->cache = p;
    b->cache_mask = CACHE_SLOTS - 1;
    for (size_t i = 0; i < CACHE_SLOTS; i++) {
        atomic_init(&b->cache[i].seq, 0);
        for (int k = 0; k < BPE_CACHE_WORDS; k++) atomic_init(&b->cache[i].w[k], 0);
    }
}

/* The slot's words for key p[0, n) (n <= BPE_CACHE_KEY) with k ids. */
static void pack(uint64_t w[BPE_CACHE_WORDS], uint64_t h, const uint8_t *p, size_t n, const int32_t *ids, int k)
{
    memset(w, 0, BPE_CACHE_WORDS * sizeof *w);
    w[0] = h;
    w[1] = (uint64_t)n | (uint64_t)k << 8;
    memcpy(&w[2], p, n);
    memcpy(&w[2 + BPE_CACHE_KEY / 8], ids, (size_t)k * sizeof *ids);
}

int bpe_cache_get(const struct bpe *b, uint64_t h, const uint8_t *p, size_t n, int32_t *ids)
{
    struct bpe_cslot *s = &b->cache[h & b->cache_mask];
    uint32_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
    if (seq & 1) return -1;
    uint64_t w[BPE_CACHE_WORDS];
    w[0] = atomic_load_explicit(&s->w[0], memory_order_relaxed);
    w[1] = atomic_load_explicit(&s->w[1], memory_order_relaxed);
    size_t k = (size_t)(w[1] >> 8 & 0xFF);
    if (w[0] != h || (w[1] & 0xFF) != n || k > BPE_CACHE_IDS) return -1;
    /* only the words this entry uses: its key, its ids */
    size_t key_end = 2 + (n + 7) / 8, ids0 = 2 + BPE_CACHE_KEY / 8;
    for (size_t i = 2; i < key_end; i++) w[i] = atomic_load_explicit(&s->w[i], memory_order_relaxed);
    for (size_t i = ids0; i < ids0 + (k + 1) / 2; i++) w[i] = atomic_load_explicit(&s->w[i], memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&s->seq, memory_order_relaxed) != seq) return -1;
    if (memcmp(&w[2], p, n) != 0) return -1;
    memcpy(ids, &w[ids0], k * sizeof *ids);
    return (int)k;
}

void bpe_cache_put(const struct bpe *b, uint64_t h, const uint8_t *p, size_t n, const int32_t *ids, int k)
{
    if (n > BPE_CACHE_KEY || k > BPE_CACHE_IDS) return;
    struct bpe_cslot *s = &b->cache[h & b->cache_mask];
    uint32_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    if ((seq & 1) || !atomic_compare_exchange_strong_explicit(&s->seq, &seq, seq + 1, memory_order_relaxed,
                                                              memory_order_relaxed))
        return;
    atomic_thread_fence(memory_order_release);
    uint64_t w[BPE_CACHE_WORDS];
    pack(w, h, p, n, ids, k);
    for (int i = 0; i < BPE_CACHE_WORDS; i++) atomic_store_explicit(&s->w[i], w[i], memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq + 2, memory_order_release);
}
