/*
 * calc's arithmetic evaluator (include/libra/env.h): a recursive-descent parser that
 * evaluates while it parses, over raw bytes that come straight from model output.
 *
 *   expr    := term (('+' | '-') term)*
 *   term    := unary (mulop unary)*         mulop: '*' 'x' 'X' "×" (C3 97), '/' "÷" (C3 B7)
 *   unary   := '-'* primary
 *   primary := number | '(' expr ')'
 *   number  := digits ['.' digits*] | '.' digits
 *
 * Spaces, tabs, CR and LF are skipped between tokens. There is no unary plus and no
 * exponent notation ("1e5" is a syntax error at the 'e').
 *
 * Contract and limits:
 *  - Never reads past len; NUL and any other byte are ordinary input (a syntax error
 *    where they appear).
 *  - Inputs longer than ENV_CALC_EXPR_MAX bytes are CALC_TOO_LONG before anything is
 *    parsed; parentheses nested deeper than ENV_CALC_DEPTH_MAX are CALC_SYNTAX at the
 *    '(' that goes too deep, so recursion depth is bounded by the nesting limit.
 *  - A syntax error wins over a semantic one: parsing goes on after a division by zero
 *    or an overflow (the first such is kept), and is abandoned at the first syntax
 *    error. *pos is the byte offset of the unexpected byte (len at a premature end).
 *  - Overflow: any number or intermediate result with |v| > 1e15, or non-finite.
 *  - Pure function of its arguments; thread-safe.
 */
#include "libra/env.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALC_VALUE_MAX 1e15

struct calc_parser {
    const unsigned char *s;
    size_t len, i;
    int depth;      /* open parentheses */
    int syntax;     /* set at the first syntax error; every level then returns at once */
    size_t err_pos; /* where that error is */
    int sem;        /* the first CALC_DIV_ZERO or CALC_OVERFLOW, or CALC_OK */
};

static int is_space(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static void skip_spaces(struct calc_parser *p)
{
    while (p->i < p->len && is_space(p->s[p->i])) p->i++;
}

static double syntax_error(struct calc_parser *p)
{
    if (!p->syntax) {
        p->syntax = 1;
        p->err_pos = p->i;
    }
    return 0.0;
}

static void semantic_error(struct calc_parser *p, int err)
{
    if (p->sem == CALC_OK) p->sem = err;
}

/* Flags an out-of-range value; the value travels on, the error is sticky. */
static double checked(struct calc_parser *p, double v)
{
    if (!isfinite(v) || fabs(v) > CALC_VALUE_MAX) semantic_error(p, CALC_OVERFLOW);
    return v;
}

static double parse_expr(struct calc_parser *p);

/* A validated numeric token handed to strtod (bounded copy; the input has no NUL). */
static double parse_number(struct calc_parser *p)
{
    size_t start = p->i, digits = 0;
    while (p->i < p->len && is_digit(p->s[p->i])) p->i++, digits++;
    if (p->i < p->len && p->s[p->i] == '.') {
        p->i++;
        while (p->i < p->len && is_digit(p->s[p->i])) p->i++, digits++;
    }
    if (digits == 0) {
        p->i = start;
        return syntax_error(p);
    }
    char tok[ENV_CALC_EXPR_MAX + 1];
    size_t n = p->i - start; /* <= len <= ENV_CALC_EXPR_MAX */
    memcpy(tok, p->s + start, n);
    tok[n] = '\0';
    return checked(p, strtod(tok, NULL));
}

static double parse_primary(struct calc_parser *p)
{
    skip_spaces(p);
    if (p->i >= p->len) return syntax_error(p);
    unsigned char c = p->s[p->i];
    if (c == '(') {
        if (p->depth >= ENV_CALC_DEPTH_MAX) return syntax_error(p);
        p->depth++;
        p->i++;
        double v = parse_expr(p);
        if (p->syntax) return 0.0;
        skip_spaces(p);
        if (p->i >= p->len || p->s[p->i] != ')') return syntax_error(p);
        p->i++;
        p->depth--;
        return v;
    }
    if (is_digit(c) || c == '.') return parse_number(p);
    return syntax_error(p);
}

static double parse_unary(struct calc_parser *p)
{
    int negative = 0;
    for (;;) {
        skip_spaces(p);
        if (p->i < p->len && p->s[p->i] == '-') {
            negative = !negative;
            p->i++;
        } else {
            break;
        }
    }
    double v = parse_primary(p);
    return negative ? -v : v;
}

/* The multiplicative operator at the cursor: its length in bytes (0 = none) and '*'
 * or '/' in *op. */
static size_t mul_op(const struct calc_parser *p, int *op)
{
    if (p->i >= p->len) return 0;
    unsigned char c = p->s[p->i];
    if (c == '*' || c == 'x' || c == 'X') {
        *op = '*';
        return 1;
    }
    if (c == '/') {
        *op = '/';
        return 1;
    }
    if (c == 0xC3 && p->i + 1 < p->len) {
        if (p->s[p->i + 1] == 0x97) {
            *op = '*';
            return 2;
        }
        if (p->s[p->i + 1] == 0xB7) {
            *op = '/';
            return 2;
        }
    }
    return 0;
}

static double parse_term(struct calc_parser *p)
{
    double v = parse_unary(p);
    for (;;) {
        if (p->syntax) return 0.0;
        skip_spaces(p);
        int op = 0;
        size_t n = mul_op(p, &op);
        if (n == 0) return v;
        p->i += n;
        double r = parse_unary(p);
        if (p->syntax) return 0.0;
        if (op == '*') {
            v = checked(p, v * r);
        } else if (r == 0.0) {
            semantic_error(p, CALC_DIV_ZERO);
            v = 0.0;
        } else {
            v = checked(p, v / r);
        }
    }
}

static double parse_expr(struct calc_parser *p)
{
    double v = parse_term(p);
    for (;;) {
        if (p->syntax) return 0.0;
        skip_spaces(p);
        if (p->i >= p->len || (p->s[p->i] != '+' && p->s[p->i] != '-')) return v;
        int op = p->s[p->i++];
        double r = parse_term(p);
        if (p->syntax) return 0.0;
        v = checked(p, op == '+' ? v + r : v - r);
    }
}

int calc_eval(const char *expr, size_t len, double *value, size_t *pos)
{
    if (value) *value = 0.0;
    if (pos) *pos = 0;
    if (len > ENV_CALC_EXPR_MAX) return CALC_TOO_LONG;
    if (len > 0 && !expr) return CALC_EMPTY;
    struct calc_parser p = {(const unsigned char *)expr, len, 0, 0, 0, 0, CALC_OK};
    skip_spaces(&p);
    if (p.i == len) return CALC_EMPTY;
    double v = parse_expr(&p);
    skip_spaces(&p);
    if (!p.syntax && p.i != len) syntax_error(&p); /* a stray ')' or other byte */
    if (p.syntax) {
        if (pos) *pos = p.err_pos;
        return CALC_SYNTAX;
    }
    if (p.sem != CALC_OK) return p.sem;
    if (value) *value = v;
    return CALC_OK;
}

const char *calc_err_text(int err)
{
    switch (err) {
    case CALC_OK: return "ok";
    case CALC_SYNTAX: return "syntax error";
    case CALC_DIV_ZERO: return "division by zero";
    case CALC_OVERFLOW: return "number too large";
    case CALC_TOO_LONG: return "expression too long";
    case CALC_EMPTY: return "empty expression";
    default: return "unknown error";
    }
}

void calc_format(double v, char *out, size_t cap)
{
    if (!out || cap == 0) return;
    if (!isfinite(v)) {
        snprintf(out, cap, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
        return;
    }
    /* %.6f of the largest double needs 317 bytes. */
    char buf[400];
    snprintf(buf, sizeof buf, "%.6f", v);
    size_t n = strlen(buf);
    while (n > 0 && buf[n - 1] == '0') n--;
    if (n > 0 && buf[n - 1] == '.') n--;
    buf[n] = '\0';
    if (strcmp(buf, "-0") == 0) strcpy(buf, "0"); /* -0.0, or a tiny negative value */
    snprintf(out, cap, "%s", buf);
}
