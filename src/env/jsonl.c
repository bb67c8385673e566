/*
 * JSONL problem files (src/env/jsonl.h): a small hand-written JSON parser, enough for
 * one object per line, {"prompt": "...", "answer": "..." | number}.
 *
 * Contract and limits:
 *  - Each non-blank line is exactly one JSON object (RFC 8259 grammar), whitespace
 *    around it allowed; anything after the closing brace is an error. Blank lines
 *    (spaces, tabs, CR only) are skipped. A UTF-8 byte-order mark before line 1 is
 *    ignored.
 *  - "prompt" must be a string, "answer" a string or a number (kept as the literal
 *    text, e.g. "-12.5" or "1e3"); both non-empty, at most ENV_TEXT_MAX - 1 and
 *    ENV_ANSWER_MAX - 1 bytes after unescaping. A repeated "prompt" or "answer" key
 *    is an error. Other keys are ignored, with values of any JSON type (nested
 *    objects and arrays up to JSONL_DEPTH_MAX levels) checked and skipped.
 *  - Escapes \" \\ \/ \b \f \n \r \t \uXXXX (surrogate pairs combined) become
 *    UTF-8; \u0000, lone surrogates, other escapes and raw control bytes (< 0x20) are
 *    errors. Other bytes, invalid UTF-8 included, pass through unchanged.
 *  - Never reads past the line: every input, binary files and huge lines included
 *    (getline), ends in a problem or one "file:line: what" message.
 */
#define _POSIX_C_SOURCE 200809L
#include "jsonl.h"

#include "libra/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSONL_DEPTH_MAX 64 /* nesting of skipped values; deeper is an error */
#define JSONL_KEY_MAX 16   /* bytes of a key kept for comparison ("prompt", "answer") */

struct jparser {
    const char *s;
    size_t len, pos;
    char *what;
    size_t whatlen;
};

static int jfail(struct jparser *jp, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records the message (with the 1-based byte column) and returns -1. */
static int jfail(struct jparser *jp, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(jp->what, jp->whatlen, "%s (column %zu)", msg, jp->pos + 1);
    return -1;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static void skip_ws(struct jparser *jp)
{
    while (jp->pos < jp->len && is_ws(jp->s[jp->pos])) jp->pos++;
}

/* The byte at the cursor, or -1 at the end of the line. */
static int peek(const struct jparser *jp)
{
    return jp->pos < jp->len ? (unsigned char)jp->s[jp->pos] : -1;
}

static int unexpected(struct jparser *jp, const char *expected)
{
    int c = peek(jp);
    if (c < 0) return jfail(jp, "expected %s, found the end of the line", expected);
    if (c >= 0x20 && c < 0x7f) return jfail(jp, "expected %s, found '%c'", expected, c);
    return jfail(jp, "expected %s, found byte 0x%02x", expected, (unsigned)c);
}

/* Appends one byte to dst (when it fits in cap - 1) and counts it in *n either way. */
static void put_byte(char *dst, size_t cap, size_t *n, unsigned char b)
{
    if (dst && *n + 1 < cap) dst[*n] = (char)b;
    (*n)++;
}

static void put_utf8(char *dst, size_t cap, size_t *n, unsigned cp)
{
    if (cp < 0x80) {
        put_byte(dst, cap, n, (unsigned char)cp);
    } else if (cp < 0x800) {
        put_byte(dst, cap, n, (unsigned char)(0xC0 | (cp >> 6)));
        put_byte(dst, cap, n, (unsigned char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        put_byte(dst, cap, n, (unsigned char)(0xE0 | (cp >> 12)));
        put_byte(dst, cap, n, (unsigned char)(0x80 | ((cp >> 6) & 0x3F)));
        put_byte(dst, cap, n, (unsigned char)(0x80 | (cp & 0x3F)));
    } else {
        put_byte(dst, cap, n, (unsigned char)(0xF0 | (cp >> 18)));
        put_byte(dst, cap, n, (unsigned char)(0x80 | ((cp >> 12) & 0x3F)));
        put_byte(dst, cap, n, (unsigned char)(0x80 | ((cp >> 6) & 0x3F)));
        put_byte(dst, cap, n, (unsigned char)(0x80 | (cp & 0x3F)));
    }
}

/* The 4 hex digits after "\u" (the cursor is on the 'u'); advances past them. */
static int parse_hex4(struct jparser *jp, unsigned *cp)
{
    if (jp->len - jp->pos < 5) return jfail(jp, "bad \\u escape: expected 4 hex digits");
    unsigned v = 0;
    for (size_t k = 1; k <= 4; k++) {
        char c = jp->s[jp->pos + k];
        unsigned d;
        if (c >= '0' && c <= '9') d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') d = (unsigned)(c - 'A' + 10);
        else return jfail(jp, "bad \\u escape: expected 4 hex digits");
        v = v * 16 + d;
    }
    jp->pos += 5;
    *cp = v;
    return 0;
}

/* One escape; the cursor is on the byte after the backslash. */
static int parse_escape(struct jparser *jp, char *dst, size_t cap, size_t *n)
{
    if (jp->pos >= jp->len) return jfail(jp, "unterminated string");
    char c = jp->s[jp->pos];
    const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
    const char *hit = c ? strchr(from, c) : NULL;
    if (hit) {
        put_byte(dst, cap, n, (unsigned char)to[hit - from]);
        jp->pos++;
        return 0;
    }
    if (c != 'u') {
        if (c >= 0x20 && c < 0x7f) return jfail(jp, "bad escape \\%c in a string", c);
        return jfail(jp, "bad escape (backslash then byte 0x%02x) in a string",
                     (unsigned)(unsigned char)c);
    }
    unsigned cp;
    if (parse_hex4(jp, &cp) != 0) return -1;
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return jfail(jp, "unpaired UTF-16 surrogate \\u%04X in a string", cp);
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        unsigned lo;
        if (jp->len - jp->pos < 2 || jp->s[jp->pos] != '\\' || jp->s[jp->pos + 1] != 'u')
            return jfail(jp, "unpaired UTF-16 surrogate \\u%04X in a string", cp);
        jp->pos++;
        if (parse_hex4(jp, &lo) != 0) return -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return jfail(jp, "unpaired UTF-16 surrogate \\u%04X in a string", cp);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (cp == 0) return jfail(jp, "\\u0000 (NUL) is not allowed in a string");
    put_utf8(dst, cap, n, cp);
    return 0;
}

/* A string (the cursor on its opening quote). Writes at most cap - 1 bytes and a NUL
 * to dst (NULL: only checked); *n is the full unescaped length. */
static int parse_string(struct jparser *jp, char *dst, size_t cap, size_t *n)
{
    *n = 0;
    jp->pos++; /* the opening quote */
    for (;;) {
        if (jp->pos >= jp->len) return jfail(jp, "unterminated string");
        unsigned char c = (unsigned char)jp->s[jp->pos];
        if (c == '"') {
            jp->pos++;
            break;
        }
        if (c < 0x20) return jfail(jp, "unescaped control byte 0x%02x in a string", c);
        jp->pos++;
        if (c == '\\') {
            if (parse_escape(jp, dst, cap, n) != 0) return -1;
        } else {
            put_byte(dst, cap, n, c);
        }
    }
    if (dst && cap > 0) dst[*n < cap ? *n : cap - 1] = '\0';
    return 0;
}

static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* A number (RFC 8259 grammar); its literal text is copied like a string's. */
static int parse_number(struct jparser *jp, char *dst, size_t cap, size_t *n)
{
    size_t start = jp->pos;
    if (peek(jp) == '-') jp->pos++;
    if (peek(jp) == '0') {
        jp->pos++;
    } else if (is_digit(peek(jp))) {
        while (is_digit(peek(jp))) jp->pos++;
    } else {
        return unexpected(jp, "a digit in a number");
    }
    if (peek(jp) == '.') {
        jp->pos++;
        if (!is_digit(peek(jp))) return unexpected(jp, "a digit after '.' in a number");
        while (is_digit(peek(jp))) jp->pos++;
    }
    if (peek(jp) == 'e' || peek(jp) == 'E') {
        jp->pos++;
        if (peek(jp) == '+' || peek(jp) == '-') jp->pos++;
        if (!is_digit(peek(jp))) return unexpected(jp, "a digit in a number's exponent");
        while (is_digit(peek(jp))) jp->pos++;
    }
    *n = 0;
    for (size_t k = start; k < jp->pos; k++) put_byte(dst, cap, n, (unsigned char)jp->s[k]);
    if (dst && cap > 0) dst[*n < cap ? *n : cap - 1] = '\0';
    return 0;
}

static int skip_value(struct jparser *jp, int depth);

/* The members or elements of an object or array (the cursor on '{' or '['). */
static int skip_container(struct jparser *jp, int depth)
{
    char close = jp->s[jp->pos] == '{' ? '}' : ']';
    int is_object = close == '}';
    if (depth >= JSONL_DEPTH_MAX)
        return jfail(jp, "values nested deeper than %d levels", JSONL_DEPTH_MAX);
    jp->pos++;
    skip_ws(jp);
    if (peek(jp) == close) {
        jp->pos++;
        return 0;
    }
    for (;;) {
        if (is_object) {
            size_t n;
            if (peek(jp) != '"') return unexpected(jp, "a string key");
            if (parse_string(jp, NULL, 0, &n) != 0) return -1;
            skip_ws(jp);
            if (peek(jp) != ':') return unexpected(jp, "':' after a key");
            jp->pos++;
            skip_ws(jp);
        }
        if (skip_value(jp, depth + 1) != 0) return -1;
        skip_ws(jp);
        if (peek(jp) == close) {
            jp->pos++;
            return 0;
        }
        if (peek(jp) != ',') return unexpected(jp, is_object ? "',' or '}'" : "',' or ']'");
        jp->pos++;
        skip_ws(jp);
    }
}

static int skip_literal(struct jparser *jp, const char *word)
{
    size_t n = strlen(word);
    if (jp->len - jp->pos < n || memcmp(jp->s + jp->pos, word, n) != 0)
        return unexpected(jp, "a JSON value");
    jp->pos += n;
    return 0;
}

/* Any JSON value (the cursor on its first byte), checked and skipped. */
static int skip_value(struct jparser *jp, int depth)
{
    size_t n;
    int c = peek(jp);
    if (c == '"') return parse_string(jp, NULL, 0, &n);
    if (c == '{' || c == '[') return skip_container(jp, depth);
    if (c == '-' || is_digit(c)) return parse_number(jp, NULL, 0, &n);
    if (c == 't') return skip_literal(jp, "true");
    if (c == 'f') return skip_literal(jp, "false");
    if (c == 'n') return skip_literal(jp, "null");
    return unexpected(jp, "a JSON value");
}

/* The value of "prompt" or "answer" into out (cap bytes). */
static int parse_field(struct jparser *jp, const char *key, int allow_number, char *out,
                       size_t cap)
{
    size_t n;
    size_t at = jp->pos;
    int c = peek(jp);
    if (c == '"') {
        if (parse_string(jp, out, cap, &n) != 0) return -1;
    } else if (allow_number && (c == '-' || is_digit(c))) {
        if (parse_number(jp, out, cap, &n) != 0) return -1;
    } else {
        if (c < 0) return unexpected(jp, "a value");
        return jfail(jp, "\"%s\" must be a string%s", key, allow_number ? " or a number" : "");
    }
    if (n == 0) {
        jp->pos = at;
        return jfail(jp, "\"%s\" is empty", key);
    }
    if (n > cap - 1) {
        jp->pos = at;
        return jfail(jp, "\"%s\" is %zu bytes, more than the %zu allowed", key, n, cap - 1);
    }
    return 0;
}

int jsonl_parse_line(const char *line, size_t len, struct env_problem *out, char *what,
                     size_t whatlen)
{
    struct jparser jp = {line, len, 0, what, whatlen};
    int have_prompt = 0, have_answer = 0;
    memset(out, 0, sizeof *out);
    skip_ws(&jp);
    if (jp.pos == jp.len) return 0;
    if (peek(&jp) != '{') return unexpected(&jp, "'{' (one JSON object per line)");
    jp.pos++;
    skip_ws(&jp);
    if (peek(&jp) == '}') {
        jp.pos++;
    } else {
        for (;;) {
            char key[JSONL_KEY_MAX];
            size_t klen;
            if (peek(&jp) != '"') return unexpected(&jp, "a string key");
            size_t key_at = jp.pos;
            if (parse_string(&jp, key, sizeof key, &klen) != 0) return -1;
            skip_ws(&jp);
            if (peek(&jp) != ':') return unexpected(&jp, "':' after a key");
            jp.pos++;
            skip_ws(&jp);
            int is_prompt = klen == 6 && strcmp(key, "prompt") == 0;
            int is_answer = klen == 6 && strcmp(key, "answer") == 0;
            if ((is_prompt && have_prompt) || (is_answer && have_answer)) {
                jp.pos = key_at;
                return jfail(&jp, "duplicate key \"%s\"", key);
            }
            int rc;
            if (is_prompt) {
                rc = parse_field(&jp, "prompt", 0, out->text, sizeof out->text);
                have_prompt = 1;
            } else if (is_answer) {
                rc = parse_field(&jp, "answer", 1, out->answer, sizeof out->answer);
                have_answer = 1;
            } else {
                rc = skip_value(&jp, 1);
            }
            if (rc != 0) return -1;
            skip_ws(&jp);
            if (peek(&jp) == '}') {
                jp.pos++;
                break;
            }
            if (peek(&jp) != ',') return unexpected(&jp, "',' or '}'");
            jp.pos++;
            skip_ws(&jp);
        }
    }
    skip_ws(&jp);
    if (jp.pos != jp.len) return jfail(&jp, "trailing garbage after the object");
    if (!have_prompt) {
        snprintf(what, whatlen, "missing \"prompt\" (a string)");
        return -1;
    }
    if (!have_answer) {
        snprintf(what, whatlen, "missing \"answer\" (a string or a number)");
        return -1;
    }
    return 1;
}

int env_load_jsonl(const char *path, double max_bad_fraction, int report,
                   struct env_problem **out, int64_t *n, int64_t *n_bad, char *err,
                   size_t errlen)
{
    struct env_problem *probs = NULL;
    size_t cap = 0, count = 0;
    char *line = NULL;
    size_t line_cap = 0;
    long lineno = 0, first_bad = 0;
    char what[512], first_what[512] = "";

    *out = NULL;
    *n = *n_bad = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open the prompts file: %s", path, strerror(errno));
        return -1;
    }
    for (;;) {
        errno = 0;
        ssize_t got = getline(&line, &line_cap, f);
        if (got < 0) {
            if (!feof(f)) {
                snprintf(err, errlen, "%s:%ld: read error: %s", path, lineno + 1,
                         strerror(errno ? errno : EIO));
                goto fail;
            }
            break;
        }
        lineno++;
        size_t len = (size_t)got, skip = 0;
        if (lineno == 1 && len >= 3 && memcmp(line, "\xEF\xBB\xBF", 3) == 0) skip = 3;
        if (len > skip && line[len - 1] == '\n') len--;
        XGROW(probs, cap, count + 1);
        int rc = jsonl_parse_line(line + skip, len - skip, &probs[count], what, sizeof what);
        if (rc < 0) {
            if (max_bad_fraction <= 0) {
                snprintf(err, errlen, "%s:%ld: %s", path, lineno, what);
                goto fail;
            }
            if (!first_bad) {
                first_bad = lineno;
                snprintf(first_what, sizeof first_what, "%s", what);
            }
            if (report && *n_bad < JSONL_REPORT_MAX)
                LOG_W("%s:%ld: %s (line skipped)", path, lineno, what);
            ++*n_bad;
            continue;
        }
        count += (size_t)rc;
    }
    free(line);
    line = NULL;
    if (fclose(f) != 0) {
        snprintf(err, errlen, "%s: cannot close: %s", path, strerror(errno));
        free(probs);
        return -1;
    }
    f = NULL;
    int64_t total = (int64_t)count + *n_bad;
    if (report && *n_bad > JSONL_REPORT_MAX)
        LOG_W("%s: %lld more lines skipped (%lld of %lld cannot be used)", path,
              (long long)(*n_bad - JSONL_REPORT_MAX), (long long)*n_bad, (long long)total);
    if (*n_bad > 0 && (double)*n_bad > max_bad_fraction * (double)total) {
        snprintf(err, errlen, "%s: %lld of %lld problem lines cannot be used, more than "
                 "env.max_bad_fraction = %g allows; the first, line %ld: %s", path,
                 (long long)*n_bad, (long long)total, max_bad_fraction, first_bad, first_what);
        goto fail;
    }
    *out = probs;
    *n = (int64_t)count;
    return 0;

fail:
    free(line);
    if (f) fclose(f);
    free(probs);
    return -1;
}
