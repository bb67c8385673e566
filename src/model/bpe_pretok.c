/*
 * What the BPE tokenizer does to text before merging (bpe_internal.h): the GPT-2
 * byte-level alphabet (every byte stands for one printable code point, so a
 * vocabulary entry is a string), UTF-8 decoding, the NFC normaliser (utf8proc, with
 * a quick check that skips text already in NFC) and the split regexes (PCRE2).
 *
 * Regex semantics: the patterns come from tokenizer.json, written for Oniguruma (the
 * Rust tokenizers) and run by PCRE2 with UTF and UCP: \p{L}, \p{N}, lookahead and
 * case-insensitive groups behave the same. \s does not quite: Oniguruma's is Unicode
 * White_Space, PCRE2's adds U+180E; so \s and \S are spelled out as White_Space
 * before compiling (bpe_regex_spaces). Invalid UTF-8 never matches
 * (PCRE2_MATCH_INVALID_UTF), so such bytes end up in the gaps between matches, which
 * are pre-tokens too. See docs/tokenizer.md for the differences that remain.
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "bpe_internal.h"
#include "libra/log.h"

const char bpe_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Bytes that stand for themselves: the printable ones of Latin-1 but the soft hyphen. */
static int byte_is_printable(unsigned x)
{
    return (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
}

/* The others, in byte order, stand for 256, 257, ...: 0x00-0x20 (33 of them),
 * 0x7F-0xA0 (34) and 0xAD. */
uint32_t bpe_byte_char(uint8_t x)
{
    if (byte_is_printable(x)) return x;
    if (x <= 0x20) return 256u + x;
    if (x <= 0xA0) return 256u + 33 + (x - 0x7Fu);
    return 256u + 67; /* 0xAD */
}

int bpe_char_byte(uint32_t cp)
{
    if (cp < 256) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp <= 256 + 32) return (int)(cp - 256);
    if (cp <= 256 + 66) return (int)(cp - 256 - 33 + 0x7F);
    if (cp == 256 + 67) return 0xAD;
    return -1;
}

size_t bpe_utf8_next(const uint8_t *s, size_t n, uint32_t *cp)
{
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) return *cp = c, 1;
    size_t len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) len = 2, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, v = c & 0x07, min = 0x10000;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    return *cp = v, len;
}

long bpe_spelling_bytes(const char *s, size_t n, char *out)
{
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0, m = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = bpe_utf8_next(u + i, n - i, &cp);
        int x = k ? bpe_char_byte(cp) : -1;
        if (x < 0) return -1;
        out[m++] = (char)x;
        i += k;
    }
    return (long)m;
}

int bpe_is_space(uint32_t cp)
{
    switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
        return 1;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

/* Unicode White_Space, spelled for a PCRE2 character class. */
static const char white_space[] =
    "\\t-\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

static void append(char **out, size_t *len, size_t *cap, const char *s, size_t n)
{
    XGROW(*out, *cap, *len + n + 1);
    memcpy(*out + *len, s, n);
    *len += n;
    (*out)[*len] = '\0';
}

char *bpe_regex_spaces(const char *pattern)
{
    size_t n = strlen(pattern), len = 0, cap = 0;
    char *out = NULL;
    int in_class = 0, quoted = 0;
    append(&out, &len, &cap, "", 0);
    for (size_t i = 0; i < n;) {
        char c = pattern[i];
        size_t take = 1;
        if (quoted) { /* \Q...\E: literal */
            if (c == '\\' && pattern[i + 1] == 'E') quoted = 0, take = 2;
        } else if (c == '\\' && i + 1 < n) {
            char e = pattern[i + 1];
            take = 2;
            if (e == 'Q') quoted = 1;
            if (e == 's' || (e == 'S' && !in_class)) {
                const char *open = in_class ? "" : e == 's' ? "[" : "[^";
                append(&out, &len, &cap, open, strlen(open));
                append(&out, &len, &cap, white_space, strlen(white_space));
                if (!in_class) append(&out, &len, &cap, "]", 1);
                i += 2;
                continue;
            }
        } else if (c == '[' && !in_class) {
            in_class = 1; /* in "[]..." and "[^]...", that ']' is a member */
            if (pattern[i + take] == '^') take++;
            if (pattern[i + take] == ']') take++;
        } else if (c == '[' && pattern[i + 1] == ':') { /* [:alpha:] inside a class */
            const char *end = strstr(pattern + i + 2, ":]");
            if (end) take = (size_t)(end + 2 - (pattern + i));
        } else if (c == ']') {
            in_class = 0;
        }
        append(&out, &len, &cap, pattern + i, take);
        i += take;
    }
    return out;
}

static pcre2_code *compile(const char *pattern, int *code, PCRE2_SIZE *off)
{
    return pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, code, off, NULL);
}

pcre2_code *bpe_regex_compile(const char *pattern, char *err, size_t errlen)
{
    int code;
    PCRE2_SIZE off;
    /* The file's pattern first, so that an error's offset is the file's. */
    pcre2_code *re = compile(pattern, &code, &off);
    if (re) {
        pcre2_code_free(re);
        char *spaces = bpe_regex_spaces(pattern);
        re = compile(spaces, &code, &off);
        free(spaces);
    }
    if (!re) {
        PCRE2_UCHAR msg[256];
        if (pcre2_get_error_message(code, msg, sizeof msg) < 0) strcpy((char *)msg, "unknown error");
        bpe_err(err, errlen, "PCRE2 error at offset %zu: %s", (size_t)off, (const char *)msg);
        return NULL;
    }
    /* JIT when the library has it; without, pcre2_match interprets (same results). */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

/* Code points NFC leaves alone whatever surrounds them (the quick check's "yes" with
 * combining class 0): not a combining mark, never the second of a composition pair
 * (Hangul vowel and trailing jamo compose algorithmically), and either without a
 * canonical decomposition or composed back to themselves (\u00e9, \u304c). */
static int nfc_stable(uint32_t cp)
{
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
    if (p->combining_class != 0) return 0;
    if (p->comb_index != UINT16_MAX && (p->comb_index & 0x8000)) return 0;
    if (cp >= 0x1161 && cp <= 0x11C2) return 0;
    if (p->decomp_seqindex == UINT16_MAX || p->decomp_type != 0) return 1;
    utf8proc_uint8_t in[8], *out = NULL;
    utf8proc_ssize_t n = utf8proc_encode_char((utf8proc_int32_t)cp, in);
    utf8proc_ssize_t m = utf8proc_map(in, n, &out, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    int same = m == n && memcmp(in, out, (size_t)n) == 0;
    free(out);
    return same;
}

uint8_t *bpe_nfc_table(void)
{
    uint8_t *bits = xcalloc(BPE_NFC_TABLE_BYTES, 1);
    for (uint32_t cp = 0x80; cp <= 0x10FFFF; cp++)
        if (!nfc_stable(cp)) bits[cp >> 3] |= (uint8_t)(1u << (cp & 7));
    return bits;
}

/* NFC of one run of valid UTF-8, appended to *out (grown as needed). */
static void nfc_run(const char *s, size_t n, char **out, size_t *len, size_t *cap)
{
    utf8proc_uint8_t *r = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &r,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (m < 0) { /* cannot happen on valid UTF-8 but for lack of memory: keep the run */
        free(r);
        r = NULL;
        m = (utf8proc_ssize_t)n;
    }
    XGROW(*out, *cap, *len + (size_t)m);
    memcpy(*out + *len, r ? (const char *)r : s, (size_t)m);
    *len += (size_t)m;
    free(r);
}

char *bpe_nfc(const uint8_t *unstable, const char *s, size_t n, size_t *out_n)
{
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t k = bpe_utf8_next(u + i, n - i, &cp);
        if (!k) {
            i++;
            continue;
        }
        if (unstable[cp >> 3] & (1u << (cp & 7))) break;
        i += k;
    }
    if (i >= n) return NULL;
    /* Normalise maximal runs of valid UTF-8; invalid bytes pass through. Composition
     * never crosses an invalid byte (the reference never sees invalid text at all). */
    char *out = NULL;
    size_t len = 0, cap = 0, run = 0;
    i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = u[i] < 0x80 ? 1 : bpe_utf8_next(u + i, n - i, &cp);
        if (k) {
            i += k;
            continue;
        }
        if (i > run) nfc_run(s + run, i - run, &out, &len, &cap);
        XGROW(out, cap, len + 1);
        out[len++] = s[i++];
        run = i;
    }
    if (n > run) nfc_run(s + run, n - run, &out, &len, &cap);
    *out_n = len;
    return out;
}
