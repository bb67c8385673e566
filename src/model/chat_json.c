/*
 * The helpers every chat renderer shares (src/model/chat_internal.h): the text
 * buffer, JavaScript's white space (the reference engine's strip, lstrip, rstrip and
 * trim are String.prototype.trim*, whatever argument the template passes), and JSON
 * read as JSON.parse reads it and written as @huggingface/jinja's `tojson` writes it.
 *
 * Why not json_dumps: jansson spells 1.0 "1.0" and 0.1 "0.10000000000000001", and
 * keeps keys such as "2" and "1" in insertion order, where JavaScript writes 1 and
 * 0.1 and lists array-index keys first, ascending. Everything else (escapes, UTF-8
 * kept as is, ", " and ": ") is simple enough to write here.
 *
 * Limits: a number beyond the double range ("1e400") is refused by jansson (JSON.parse
 * makes it Infinity, which tojson writes as null), and so are escaped lone surrogates
 * ("\ud800") and invalid UTF-8 -- inputs the reference cannot hold either once read
 * from a UTF-8 file.
 */
#include "chat_internal.h"

#include "libra/log.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void chat_buf_put(struct chat_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        b->p = xrealloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void chat_buf_puts(struct chat_buf *b, const char *s)
{
    chat_buf_put(b, s, strlen(s));
}

void chat_buf_free(struct chat_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

size_t chat_buf_copy_out(const struct chat_buf *b, char *out, size_t cap)
{
    if (out && cap > 0) {
        size_t n = b->len < cap - 1 ? b->len : cap - 1;
        if (n) memcpy(out, b->p, n);
        out[n] = '\0';
    }
    return b->len;
}

void chat_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- JavaScript white space ---- */

static int js_space_cp(unsigned cp)
{
    switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20:
    case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000: case 0xFEFF:
        return 1;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

/* Decodes the (well-formed, at most 3-byte: every JS space is in the BMP) sequence at
 * s[0..n); returns its length, 0 when it is not one. */
static size_t utf8_bmp(const unsigned char *s, size_t n, unsigned *cp)
{
    if (n >= 1 && s[0] < 0x80) { *cp = s[0]; return 1; }
    if (n >= 2 && s[0] >= 0xC2 && s[0] < 0xE0 && (s[1] & 0xC0) == 0x80) {
        *cp = ((unsigned)(s[0] & 0x1F) << 6) | (s[1] & 0x3Fu);
        return 2;
    }
    if (n >= 3 && (s[0] & 0xF0) == 0xE0 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80) {
        unsigned c = ((unsigned)(s[0] & 0x0F) << 12) | ((unsigned)(s[1] & 0x3F) << 6) | (s[2] & 0x3Fu);
        if (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF)) return 0;
        *cp = c;
        return 3;
    }
    return 0;
}

size_t chat_js_space_lead(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned cp;
        size_t k = utf8_bmp(u + i, n - i, &cp);
        if (k == 0 || !js_space_cp(cp)) break;
        i += k;
    }
    return i;
}

size_t chat_js_space_trail(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t end = n;
    while (end > 0) {
        /* The sequence ending at end starts at most 2 bytes earlier (BMP only). */
        size_t k = 0;
        unsigned cp = 0;
        for (size_t back = 1; back <= 3 && back <= end; back++) {
            size_t got = utf8_bmp(u + end - back, back, &cp);
            if (got == back) { k = back; break; }
            if ((u[end - back] & 0xC0) != 0x80) break; /* a lead byte that did not fit */
        }
        if (k == 0 || !js_space_cp(cp)) break;
        end -= k;
    }
    return n - end;
}

void chat_buf_put_trimmed(struct chat_buf *b, const char *s, size_t n, int lead, int trail)
{
    size_t a = lead ? chat_js_space_lead(s, n) : 0;
    size_t z = trail ? chat_js_space_trail(s + a, n - a) : 0;
    chat_buf_put(b, s + a, n - a - z);
}

/* ---- JSON ---- */

json_t *chat_json_load(const char *text, size_t len, const char *what, char *err, size_t errlen)
{
    json_error_t je;
    json_t *v = json_loadb(text, len, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, &je);
    if (!v)
        chat_set_err(err, errlen, "%s is not valid JSON: %s (line %d, column %d, byte %d)", what,
                     je.text, je.line, je.column, je.position);
    return v;
}

/* JSON.stringify of a string: \" \\ \b \f \n \r \t, other controls as \u00xx, the
 * rest (UTF-8, DEL, U+2028, '/', '<', '&', '\'') as is. */
static void dump_string(struct chat_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    chat_buf_put(b, "\"", 1);
    size_t run = 0; /* bytes copied verbatim, pending */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[7];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (c < 0x20) {
                u[0] = '\\'; u[1] = 'u'; u[2] = '0'; u[3] = '0';
                u[4] = hex[c >> 4]; u[5] = hex[c & 15]; u[6] = '\0';
                esc = u;
            }
        }
        if (!esc) { run++; continue; }
        chat_buf_put(b, s + i - run, run);
        run = 0;
        chat_buf_puts(b, esc);
    }
    chat_buf_put(b, s + n - run, run);
    chat_buf_put(b, "\"", 1);
}

/* Number::toString(10) of ECMAScript: the shortest digits that read back as x, then
 * plain notation for decimal exponents -6 < n <= 21, else d.ddde+N. */
static void dump_number(struct chat_buf *b, double x)
{
    if (!isfinite(x)) { chat_buf_puts(b, "null"); return; }
    if (x == 0) { chat_buf_puts(b, "0"); return; } /* -0 too */
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    char digits[24];
    int k = 0, neg = 0;
    const char *q = e;
    if (*q == '-') { neg = 1; q++; }
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[k++] = *q;
    while (k > 1 && digits[k - 1] == '0') k--; /* never happens at the shortest p */
    int n = atoi(q + 1) + 1;                   /* x = 0.d1d2... * 10^n */
    char s[64];
    int o = 0;
    if (neg) s[o++] = '-';
    if (k <= n && n <= 21) {
        memcpy(s + o, digits, (size_t)k); o += k;
        for (int i = k; i < n; i++) s[o++] = '0';
    } else if (0 < n && n <= 21) {
        memcpy(s + o, digits, (size_t)n); o += n;
        s[o++] = '.';
        memcpy(s + o, digits + n, (size_t)(k - n)); o += k - n;
    } else if (-6 < n && n <= 0) {
        s[o++] = '0'; s[o++] = '.';
        for (int i = 0; i < -n; i++) s[o++] = '0';
        memcpy(s + o, digits, (size_t)k); o += k;
    } else {
        s[o++] = digits[0];
        if (k > 1) {
            s[o++] = '.';
            memcpy(s + o, digits + 1, (size_t)(k - 1)); o += k - 1;
        }
        o += snprintf(s + o, sizeof s - (size_t)o, "e%c%d", n - 1 < 0 ? '-' : '+', abs(n - 1));
    }
    chat_buf_put(b, s, (size_t)o);
}

/* An array index of ECMAScript: the canonical spelling of an integer 0..2^32-2. */
static int array_index(const char *k, size_t n, unsigned long long *v)
{
    if (n == 0 || n > 10 || (n > 1 && k[0] == '0')) return 0;
    unsigned long long x = 0;
    for (size_t i = 0; i < n; i++) {
        if (k[i] < '0' || k[i] > '9') return 0;
        x = x * 10 + (unsigned long long)(k[i] - '0');
    }
    if (x > 4294967294ull) return 0;
    *v = x;
    return 1;
}

struct key_ref {
    const char *key;
    size_t len;
    unsigned long long index;
};

static int cmp_index(const void *a, const void *b)
{
    const struct key_ref *x = a, *y = b;
    return (x->index > y->index) - (x->index < y->index);
}

static void dump_value(struct chat_buf *b, const json_t *v, const char *isep, const char *ksep)
{
    switch (json_typeof(v)) {
    case JSON_NULL: chat_buf_puts(b, "null"); break;
    case JSON_TRUE: chat_buf_puts(b, "true"); break;
    case JSON_FALSE: chat_buf_puts(b, "false"); break;
    case JSON_INTEGER: dump_number(b, (double)json_integer_value(v)); break;
    case JSON_REAL: dump_number(b, json_real_value(v)); break;
    case JSON_STRING: dump_string(b, json_string_value(v), json_string_length(v)); break;
    case JSON_ARRAY:
        chat_buf_puts(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) chat_buf_puts(b, isep);
            dump_value(b, json_array_get(v, i), isep, ksep);
        }
        chat_buf_puts(b, "]");
        break;
    case JSON_OBJECT: {
        size_t n = json_object_size(v), n_idx = 0, j = 0;
        struct key_ref *keys = xmalloc((n ? n : 1) * sizeof *keys);
        const char *key;
        json_t *val;
        (void)val;
        /* Array-index keys first (sorted below), the others after them in order. */
        size_t len;
        json_object_keylen_foreach((json_t *)v, key, len, val) {
            unsigned long long idx;
            if (array_index(key, len, &idx)) {
                memmove(keys + n_idx + 1, keys + n_idx, (j - n_idx) * sizeof *keys);
                keys[n_idx++] = (struct key_ref){key, len, idx};
            } else {
                keys[j] = (struct key_ref){key, len, 0};
            }
            j++;
        }
        qsort(keys, n_idx, sizeof *keys, cmp_index);
        chat_buf_puts(b, "{");
        for (size_t i = 0; i < n; i++) {
            if (i) chat_buf_puts(b, isep);
            dump_string(b, keys[i].key, keys[i].len);
            chat_buf_puts(b, ksep);
            dump_value(b, json_object_getn(v, keys[i].key, keys[i].len), isep, ksep);
        }
        chat_buf_puts(b, "}");
        free(keys);
        break;
    }
    }
}

void chat_json_dump(struct chat_buf *b, const json_t *v, int compact)
{
    dump_value(b, v, compact ? "," : ", ", compact ? ":" : ": ");
}
