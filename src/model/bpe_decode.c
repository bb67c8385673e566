/*
 * bpe_decode (include/libra/bpe.h): ids -> bytes. Every token is stored as the raw
 * bytes it stands for (bpe_internal.h), so decoding copies them: the exact inverse
 * of the byte-level mapping, whether or not the bytes form valid UTF-8 (a token may
 * hold part of a character). Added tokens are spelled out; an id that is no token
 * decodes as U+FFFD.
 */
#include <string.h>

#include "bpe_internal.h"

static const char replacement[] = "\xEF\xBF\xBD";

size_t bpe_decode(const struct bpe *b, const int32_t *ids, size_t n, char *out, size_t cap)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        const char *p = replacement;
        size_t k = 3;
        if (id >= 0 && id < b->n_ids) {
            const struct bpe_tok *t = &b->toks[id];
            if (t->added >= 0) p = b->added[t->added].content, k = b->added[t->added].len;
            else if (t->flags & BPE_TOK_VOCAB) p = b->pool + t->off, k = t->len;
        }
        if (len < cap) memcpy(out + len, p, k <= cap - len ? k : cap - len);
        len += k;
    }
    return len;
}
