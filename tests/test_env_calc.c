/*
 * Tests of the calc environment: the expression evaluator on hand-computed values and
 * every error kind with its position, random well-formed expressions against a
 * directly computed value, malformed model output (seeded random bytes of any value,
 * NULs included, deep nesting, huge numbers) in exactly sized buffers so the
 * sanitizers see any overread; value formatting; the tool's payloads; the problem
 * generator (determinism, split separation, step range, integer answers, text length);
 * the expert's demonstrations (canonical call evaluates to the answer, masks, mistake
 * rate, recoveries, cap) and numeric answer checking.
 *
 * env.c is not linked: a struct env is filled by hand and env_calc_* called directly.
 */
#include "libra/env.h"
#include "libra/log.h"
#include "libra/rng.h"
#include "libra/tokenizer.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---- */

static int eval_str(const char *s, double *v, size_t *pos)
{
    return calc_eval(s, strlen(s), v, pos);
}

/* calc_eval on an exactly sized heap copy, so an overread is a sanitizer error. */
static int eval_exact(const char *bytes, size_t len, double *v, size_t *pos)
{
    char *copy = malloc(len ? len : 1);
    CU_ASSERT_FATAL(copy != NULL);
    if (len) memcpy(copy, bytes, len);
    int rc = calc_eval(copy, len, v, pos);
    free(copy);
    return rc;
}

static void make_env(struct env *e, int min_steps, int max_steps, int distractors, double rate)
{
    char err[256];
    memset(e, 0, sizeof *e);
    e->p.kind = ENV_KIND_CALC;
    e->p.seed = 1234;
    e->p.calc_min_steps = min_steps;
    e->p.calc_max_steps = max_steps;
    e->p.calc_distractors = distractors;
    e->p.demo_mistake_rate = rate;
    e->vocab = e->p.vocab = tok_byte_vocab(); /* env_init is not linked: set by hand */
    int rc = env_calc_init(e, err, sizeof err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
}

/* A demonstration split into its segments; -1 if it is not well-formed. */
#define DEMO_MAX_CALLS 4
struct demo_parts {
    int n_calls;
    char call[DEMO_MAX_CALLS][ENV_CALL_MAX + 1];
    char result[DEMO_MAX_CALLS][ENV_PAYLOAD_MAX + 1];
    char answer[ENV_ANSWER_MAX];
};

/* Bytes of ids[*i] up to the closing special `end`, all with mask m, into out. */
static int collect(const int32_t *ids, const uint8_t *mask, int n, int *i, int32_t end, uint8_t m,
                   char *out, size_t cap)
{
    size_t k = 0;
    for (; *i < n && ids[*i] != end; (*i)++) {
        if (ids[*i] < 0 || ids[*i] > 255 || mask[*i] != m || k + 1 >= cap) return -1;
        out[k++] = (char)ids[*i];
    }
    if (*i >= n || mask[*i] != m) return -1;
    (*i)++;
    out[k] = '\0';
    return 0;
}

static int demo_split(const int32_t *ids, const uint8_t *mask, int n, struct demo_parts *d)
{
    memset(d, 0, sizeof *d);
    int i = 0;
    while (i < n) {
        int32_t t = ids[i];
        if (t == TOK_TOOL_CALL && mask[i] == 1 && d->n_calls < DEMO_MAX_CALLS) {
            i++;
            if (collect(ids, mask, n, &i, TOK_TOOL_CALL_END, 1, d->call[d->n_calls],
                        sizeof d->call[0]))
                return -1;
            if (i >= n || ids[i] != TOK_TOOL_RESULT || mask[i] != 0) return -1;
            i++;
            if (collect(ids, mask, n, &i, TOK_TOOL_RESULT_END, 0, d->result[d->n_calls],
                        sizeof d->result[0]))
                return -1;
            d->n_calls++;
        } else if (t == TOK_ANSWER && mask[i] == 1) {
            i++;
            if (collect(ids, mask, n, &i, TOK_ANSWER_END, 1, d->answer, sizeof d->answer))
                return -1;
            return i == n ? 0 : -1; /* the answer ends the demonstration */
        } else {
            return -1;
        }
    }
    return -1; /* no answer */
}

/* ---- evaluator: values ---- */

static void test_eval_values(void)
{
    static const struct {
        const char *expr;
        double value;
    } cases[] = {
        {"3", 3},
        {"3.25", 3.25},
        {".5", 0.5},
        {"5.", 5},
        {"007", 7},
        {"1+2*3", 7},
        {"(1+2)*3", 9},
        {"10-4-3", 3},
        {"100/10/5", 2},
        {"2*3/4", 1.5},
        {"1 - 2 - 3", -4},
        {"-3", -3},
        {"-(2+3)", -5},
        {"--4", 4},
        {"2*-3", -6},
        {"2- -3", 5},
        {"-2*-2", 4},
        {"12--5", 17},
        {"3\xC3\x97" "4", 12},
        {"12\xC3\xB7" "4", 3},
        {"1+2\xC3\x97" "3\xC3\xB7" "4", 2.5},
        {"3x4", 12},
        {"3 X 4", 12},
        {"(2)x(3)", 6},
        {"2x3+1", 7},
        {" 7 ", 7},
        {"\t1\n+\r2", 3},
        {"((((5))))", 5},
        {"2*(3+(4-1))/3", 4},
        {"(12+3*4)/2", 12},
        {"0/5", 0},
        {"1.5*1.5", 2.25},
        {"1000000000000000", 1e15},
        {"100000000*10000000", 1e15},
        {"-1000000000000000", -1e15},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        double v = -999;
        size_t pos = 99;
        int rc = eval_str(cases[k].expr, &v, &pos);
        CU_ASSERT_EQUAL(rc, CALC_OK);
        CU_ASSERT_EQUAL(pos, 0);
        CU_ASSERT_CLOSE(v, cases[k].value, 1e-12);
        if (rc != CALC_OK || fabs(v - cases[k].value) > 1e-12 * fmax(1, fabs(cases[k].value)))
            printf("\n  value case %zu \"%s\": rc %d value %g\n", k, cases[k].expr, rc, v);
    }
    double v;
    CU_ASSERT_EQUAL(eval_str("0.1+0.2", &v, NULL), CALC_OK); /* NULL pos is allowed */
    CU_ASSERT_CLOSE(v, 0.3, 1e-12);
    CU_ASSERT_EQUAL(eval_str("6/4", NULL, NULL), CALC_OK);
}

/* ---- evaluator: errors ---- */

static void test_eval_errors(void)
{
    static const struct {
        const char *expr;
        size_t len; /* 0 = strlen */
        int err;
        size_t pos;
    } cases[] = {
        {"", 0, CALC_EMPTY, 0},
        {"   \t\n\r ", 0, CALC_EMPTY, 0},
        {"1+", 0, CALC_SYNTAX, 2},
        {"+1", 0, CALC_SYNTAX, 0},
        {"12++5", 0, CALC_SYNTAX, 3},
        {"2*/3", 0, CALC_SYNTAX, 2},
        {"3**8", 0, CALC_SYNTAX, 2},
        {"(1+2", 0, CALC_SYNTAX, 4},
        {"((1+2)*3", 0, CALC_SYNTAX, 8},
        {"1+2)", 0, CALC_SYNTAX, 3},
        {"()", 0, CALC_SYNTAX, 1},
        {"1 2", 0, CALC_SYNTAX, 2},
        {"1e400", 0, CALC_SYNTAX, 1},
        {"abc", 0, CALC_SYNTAX, 0},
        {"x3", 0, CALC_SYNTAX, 0},
        {"3x", 0, CALC_SYNTAX, 2},
        {"1..2", 0, CALC_SYNTAX, 2},
        {".", 0, CALC_SYNTAX, 0},
        {"-", 0, CALC_SYNTAX, 1},
        {"1,000", 0, CALC_SYNTAX, 1},
        {"\xC3", 0, CALC_SYNTAX, 0},
        {"2\xC3", 0, CALC_SYNTAX, 1},
        {"2\xC3\x97", 0, CALC_SYNTAX, 3},
        {"2\xC3\x98" "3", 0, CALC_SYNTAX, 1},
        {"1\0+2", 4, CALC_SYNTAX, 1},
        {"\0", 1, CALC_SYNTAX, 0},
        {"1/0 +", 0, CALC_SYNTAX, 5}, /* a syntax error wins over a division by zero */
        {"1/0", 0, CALC_DIV_ZERO, 0},
        {"0/0", 0, CALC_DIV_ZERO, 0},
        {"1/(2-2)", 0, CALC_DIV_ZERO, 0},
        {"5\xC3\xB7" "0.0", 0, CALC_DIV_ZERO, 0},
        {"99999999999999999999", 0, CALC_OVERFLOW, 0},
        {"1000000000000001", 0, CALC_OVERFLOW, 0},
        {"-1000000000000001", 0, CALC_OVERFLOW, 0},
        {"100000000*100000001", 0, CALC_OVERFLOW, 0},
        {"999999999999999+2", 0, CALC_OVERFLOW, 0},
        {"(99999999*99999999)/99999999", 0, CALC_OVERFLOW, 0}, /* intermediate */
        {"1/0.0000000000000001", 0, CALC_OVERFLOW, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        size_t len = cases[k].len ? cases[k].len : strlen(cases[k].expr);
        double v = -999;
        size_t pos = 999;
        int rc = eval_exact(cases[k].expr, len, &v, &pos);
        CU_ASSERT_EQUAL(rc, cases[k].err);
        CU_ASSERT_EQUAL(pos, cases[k].pos);
        CU_ASSERT_EQUAL(v, 0.0);
        if (rc != cases[k].err || pos != cases[k].pos)
            printf("\n  error case %zu: rc %d (want %d) pos %zu (want %zu)\n", k, rc,
                   cases[k].err, pos, cases[k].pos);
    }
    CU_ASSERT_EQUAL(calc_eval(NULL, 0, NULL, NULL), CALC_EMPTY);
}

static void test_eval_limits(void)
{
    char buf[40001];
    double v;
    size_t pos;
    /* "((((" * 10000 */
    memset(buf, '(', 40000);
    CU_ASSERT_EQUAL(eval_exact(buf, 40000, &v, &pos), CALC_TOO_LONG);
    /* Exactly the length limit is fine, one more byte is not. */
    memset(buf, 0, sizeof buf);
    for (int k = 0; k < ENV_CALC_EXPR_MAX / 2; k++) memcpy(buf + 2 * k, "1+", 2);
    buf[ENV_CALC_EXPR_MAX - 1] = '1'; /* "1+1+...+1+11" */
    CU_ASSERT_EQUAL(eval_exact(buf, ENV_CALC_EXPR_MAX, &v, &pos), CALC_OK);
    CU_ASSERT_EQUAL(v, ENV_CALC_EXPR_MAX / 2 - 1 + 11);
    buf[ENV_CALC_EXPR_MAX] = ' ';
    CU_ASSERT_EQUAL(eval_exact(buf, ENV_CALC_EXPR_MAX + 1, &v, &pos), CALC_TOO_LONG);
    memset(buf, ' ', ENV_CALC_EXPR_MAX + 1);
    CU_ASSERT_EQUAL(eval_exact(buf, ENV_CALC_EXPR_MAX + 1, &v, &pos), CALC_TOO_LONG);
    /* Nesting: ENV_CALC_DEPTH_MAX levels parse, one more is a syntax error at the '('
     * that goes too deep. */
    for (int depth = ENV_CALC_DEPTH_MAX; depth <= ENV_CALC_DEPTH_MAX + 1; depth++) {
        size_t n = 0;
        for (int k = 0; k < depth; k++) buf[n++] = '(';
        buf[n++] = '7';
        for (int k = 0; k < depth; k++) buf[n++] = ')';
        int rc = eval_exact(buf, n, &v, &pos);
        if (depth == ENV_CALC_DEPTH_MAX) {
            CU_ASSERT_EQUAL(rc, CALC_OK);
            CU_ASSERT_EQUAL(v, 7);
        } else {
            CU_ASSERT_EQUAL(rc, CALC_SYNTAX);
            CU_ASSERT_EQUAL(pos, (size_t)ENV_CALC_DEPTH_MAX);
        }
    }
    /* Unclosed parentheses at the limit, and a long chain of unary minus. */
    memset(buf, '(', ENV_CALC_EXPR_MAX);
    CU_ASSERT_EQUAL(eval_exact(buf, ENV_CALC_EXPR_MAX, &v, &pos), CALC_SYNTAX);
    CU_ASSERT_EQUAL(pos, (size_t)ENV_CALC_DEPTH_MAX);
    memset(buf, ')', ENV_CALC_EXPR_MAX);
    CU_ASSERT_EQUAL(eval_exact(buf, ENV_CALC_EXPR_MAX, &v, &pos), CALC_SYNTAX);
    CU_ASSERT_EQUAL(pos, 0);
    memset(buf, '-', ENV_CALC_EXPR_MAX - 1);
    buf[ENV_CALC_EXPR_MAX - 1] = '5';
    CU_ASSERT_EQUAL(eval_exact(buf, ENV_CALC_EXPR_MAX, &v, &pos), CALC_OK);
    CU_ASSERT_EQUAL(v, -5); /* 199 minus signs */
    /* A number as long as the limit. */
    memset(buf, '9', ENV_CALC_EXPR_MAX);
    CU_ASSERT_EQUAL(eval_exact(buf, ENV_CALC_EXPR_MAX, &v, &pos), CALC_OVERFLOW);
    memset(buf, '0', ENV_CALC_EXPR_MAX);
    buf[ENV_CALC_EXPR_MAX - 1] = '3';
    CU_ASSERT_EQUAL(eval_exact(buf, ENV_CALC_EXPR_MAX, &v, &pos), CALC_OK);
    CU_ASSERT_EQUAL(v, 3);
}

/* A random well-formed expression with its value computed directly, in the same
 * order of double operations as the parser (every binary node parenthesised). */
static double random_expr(struct rng *r, int depth, char *out, size_t cap, size_t *n)
{
    const char *space = rng_below(r, 4) == 0 ? " " : "";
    if (depth == 0 || rng_below(r, 3) == 0) {
        int64_t leaf = (int64_t)rng_below(r, 1000);
        int neg = rng_below(r, 5) == 0;
        *n += (size_t)snprintf(out + *n, cap - *n, "%s%s%lld", space, neg ? "-" : "", (long long)leaf);
        return neg ? -(double)leaf : (double)leaf;
    }
    static const char *const ops[] = {"+", "-", "*", "/", "\xC3\x97", "\xC3\xB7", "x"};
    int op = (int)rng_below(r, 7);
    *n += (size_t)snprintf(out + *n, cap - *n, "(");
    double a = random_expr(r, depth - 1, out, cap, n);
    *n += (size_t)snprintf(out + *n, cap - *n, "%s%s", space, ops[op]);
    double b = random_expr(r, depth - 1, out, cap, n);
    *n += (size_t)snprintf(out + *n, cap - *n, ")");
    switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: case 4: case 6: return a * b;
    default: return b == 0 ? NAN : a / b;
    }
}

static void test_eval_random_valid(void)
{
    struct rng r;
    rng_init(&r, 7, 0, 0, 1);
    int checked = 0;
    for (int t = 0; t < 3000; t++) {
        char buf[4096];
        size_t n = 0;
        double want = random_expr(&r, 1 + (int)rng_below(&r, 4), buf, sizeof buf, &n);
        double v;
        size_t pos;
        int rc = eval_exact(buf, n, &v, &pos);
        if (n > ENV_CALC_EXPR_MAX) {
            CU_ASSERT_EQUAL(rc, CALC_TOO_LONG);
        } else if (isnan(want)) {
            CU_ASSERT(rc == CALC_DIV_ZERO || rc == CALC_OVERFLOW);
        } else if (fabs(want) <= 1e15) {
            /* Intermediates are smaller than 1000^16, but may exceed 1e15. */
            CU_ASSERT(rc == CALC_OK || rc == CALC_OVERFLOW || rc == CALC_DIV_ZERO);
            if (rc == CALC_OK) {
                CU_ASSERT_EQUAL(v, want);
                checked++;
            }
        }
    }
    CU_ASSERT(checked > 1000);
}

/* Malformed model output: seeded random byte strings (any value, NUL included), and
 * strings over the expression alphabet that reach deep into the parser. */
static void test_eval_random_bytes(void)
{
    static const char alphabet[] = "0123456789+-*/().xX \t\xC3\x97\xB7" "e,";
    struct rng r;
    rng_init(&r, 11, 0, 0, 2);
    int n_ok = 0, n_syntax = 0;
    for (int t = 0; t < 6000; t++) {
        size_t len = (size_t)rng_below(&r, t % 10 == 0 ? 260 : 40);
        char *s = malloc(len ? len : 1);
        CU_ASSERT_FATAL(s != NULL);
        int mode = t % 3;
        for (size_t k = 0; k < len; k++) {
            if (mode == 0)
                s[k] = (char)rng_below(&r, 256);
            else
                s[k] = alphabet[rng_below(&r, sizeof alphabet - 1)];
        }
        double v = 12345;
        size_t pos = 54321;
        int rc = calc_eval(s, len, &v, &pos);
        CU_ASSERT(rc >= CALC_OK && rc <= CALC_EMPTY);
        CU_ASSERT(strlen(calc_err_text(rc)) > 0);
        if (rc == CALC_OK) {
            CU_ASSERT(isfinite(v) && fabs(v) <= 1e15);
            n_ok++;
        } else {
            CU_ASSERT_EQUAL(v, 0.0);
        }
        if (rc == CALC_SYNTAX) {
            CU_ASSERT(pos <= len);
            n_syntax++;
        } else {
            CU_ASSERT_EQUAL(pos, 0);
        }
        if (len > ENV_CALC_EXPR_MAX) CU_ASSERT_EQUAL(rc, CALC_TOO_LONG);
        free(s);
    }
    CU_ASSERT(n_ok > 100);   /* the alphabet strings do parse sometimes */
    CU_ASSERT(n_syntax > 3000);
}

static void test_format(void)
{
    static const struct {
        double v;
        const char *text;
    } cases[] = {
        {12, "12"},          {-3.5, "-3.5"},  {1.0 / 3, "0.333333"}, {2.0 / 3, "0.666667"},
        {0, "0"},            {-0.0, "0"},     {1e-9, "0"},           {-1e-9, "0"},
        {100, "100"},        {0.1, "0.1"},    {1234567.125, "1234567.125"},
        {1e15, "1000000000000000"},           {-42, "-42"},          {2.5, "2.5"},
    };
    char out[64];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        calc_format(cases[k].v, out, sizeof out);
        CU_ASSERT_STRING_EQUAL(out, cases[k].text);
    }
    calc_format(NAN, out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "nan");
    calc_format(-INFINITY, out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "-inf");
    calc_format(12345, out, 3); /* truncated, still terminated */
    CU_ASSERT_STRING_EQUAL(out, "12");
    calc_format(1e300, out, sizeof out);
    CU_ASSERT_EQUAL(strlen(out), sizeof out - 1);
    CU_ASSERT_STRING_EQUAL(calc_err_text(CALC_DIV_ZERO), "division by zero");
    CU_ASSERT_STRING_EQUAL(calc_err_text(CALC_SYNTAX), "syntax error");
    CU_ASSERT_STRING_EQUAL(calc_err_text(99), "unknown error");
}

/* ---- the tool ---- */

static void tool_text(const struct env *e, const char *call, size_t len, double deadline,
                      int status, const char *text)
{
    struct env_tool_result res;
    memset(&res, 0x5a, sizeof res);
    env_calc_tool(e, call, len, deadline, &res);
    CU_ASSERT_EQUAL(res.tool, ENV_TOOL_CALC);
    CU_ASSERT_EQUAL(res.status, status);
    CU_ASSERT_STRING_EQUAL(res.text, text);
    CU_ASSERT_EQUAL(res.len, (int)strlen(res.text));
}

static void test_tool(void)
{
    struct env e;
    make_env(&e, 1, 3, 1, 0.0);
    tool_text(&e, "(12+3*4)/2", 10, 0, TOOL_SUCCESS, "12");
    tool_text(&e, "7/2", 3, 0, TOOL_SUCCESS, "3.5");
    tool_text(&e, "1/3", 3, 0, TOOL_SUCCESS, "0.333333");
    tool_text(&e, "1/0", 3, 0, TOOL_FAILURE, "error: division by zero");
    tool_text(&e, "12++5", 5, 0, TOOL_FAILURE, "error: syntax error at 3");
    tool_text(&e, "(1+2", 4, 0, TOOL_FAILURE, "error: syntax error at 4");
    tool_text(&e, "", 0, 0, TOOL_FAILURE, "error: empty expression");
    tool_text(&e, "99999999999999999999", 20, 0, TOOL_FAILURE, "error: number too large");
    char big[300];
    memset(big, '1', sizeof big);
    tool_text(&e, big, sizeof big, 0, TOOL_FAILURE, "error: expression too long");
    tool_text(&e, "1\0002", 3, 0, TOOL_FAILURE, "error: syntax error at 1");
    /* A deadline already past is a timeout; a future one is not. */
    double now = wall_time();
    tool_text(&e, "1+1", 3, now - 1.0, TOOL_TIMEOUT, "error: timeout");
    tool_text(&e, "1+1", 3, now + 3600.0, TOOL_SUCCESS, "2");
    env_calc_free(&e);
    env_calc_free(&e); /* twice is harmless */
}

/* ---- answers ---- */

static void test_correct(void)
{
    CU_ASSERT_EQUAL(env_calc_correct("14", "14"), 1);
    CU_ASSERT_EQUAL(env_calc_correct(" 14 ", "14"), 1);
    CU_ASSERT_EQUAL(env_calc_correct("\t14\n", "14"), 1);
    CU_ASSERT_EQUAL(env_calc_correct("14.0", "14"), 1);
    CU_ASSERT_EQUAL(env_calc_correct("+14", "14"), 1);
    CU_ASSERT_EQUAL(env_calc_correct("014", "14"), 1);
    CU_ASSERT_EQUAL(env_calc_correct("14.", "14"), 1);
    CU_ASSERT_EQUAL(env_calc_correct("-2.5", "-2.5"), 1);
    CU_ASSERT_EQUAL(env_calc_correct("0.333333", "0.3333333"), 1);
    CU_ASSERT_EQUAL(env_calc_correct("1000.0005", "1000"), 1); /* relative tolerance */
    CU_ASSERT_EQUAL(env_calc_correct("1000.01", "1000"), 0);
    CU_ASSERT_EQUAL(env_calc_correct("15", "14"), 0);
    CU_ASSERT_EQUAL(env_calc_correct("14.01", "14"), 0);
    CU_ASSERT_EQUAL(env_calc_correct("-14", "14"), 0);
    CU_ASSERT_EQUAL(env_calc_correct("abc", "14"), 0);
    CU_ASSERT_EQUAL(env_calc_correct("", "14"), 0);
    CU_ASSERT_EQUAL(env_calc_correct("   ", "14"), 0);
    CU_ASSERT_EQUAL(env_calc_correct("1,000", "1000"), 0);
    CU_ASSERT_EQUAL(env_calc_correct("14 apples", "14"), 0);
    CU_ASSERT_EQUAL(env_calc_correct("1 4", "14"), 0);
    CU_ASSERT_EQUAL(env_calc_correct("7+7", "14"), 0);
    CU_ASSERT_EQUAL(env_calc_correct("1.4e1", "14"), 0);
    CU_ASSERT_EQUAL(env_calc_correct(".", "0"), 0);
    CU_ASSERT_EQUAL(env_calc_correct("-", "0"), 0);
    CU_ASSERT_EQUAL(env_calc_correct(NULL, "14"), 0);
    CU_ASSERT_EQUAL(env_calc_correct("14", "garbage"), 0);
    char huge[200];
    memset(huge, '9', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    CU_ASSERT_EQUAL(env_calc_correct(huge, "14"), 0);
}

/* ---- generator ---- */

static void test_init_validation(void)
{
    static const int bad[][3] = {{0, 3, 1}, {1, 7, 1}, {4, 3, 1}, {1, 3, -1}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        struct env e = {0};
        char err[256] = "";
        e.p.calc_min_steps = bad[k][0];
        e.p.calc_max_steps = bad[k][1];
        e.p.calc_distractors = bad[k][2];
        CU_ASSERT_EQUAL(env_calc_init(&e, err, sizeof err), -1);
        CU_ASSERT(strstr(err, "env.calc_") != NULL);
        CU_ASSERT_PTR_NULL(e.calc);
    }
    struct env e = {0};
    char err[256] = "";
    e.p.calc_min_steps = 1;
    e.p.calc_max_steps = 1;
    e.p.demo_mistake_rate = 1.5;
    CU_ASSERT_EQUAL(env_calc_init(&e, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "demo_mistake_rate") != NULL);
}

static void test_problem_determinism(void)
{
    struct env a, b;
    make_env(&a, 1, 6, 2, 0.1);
    make_env(&b, 1, 6, 2, 0.1);
    int same_split = 0, same_seed = 0;
    struct env c;
    make_env(&c, 1, 6, 2, 0.1);
    c.p.seed = 99;
    for (int64_t i = 0; i < 200; i++) {
        struct env_problem p1, p2, q, s;
        env_calc_problem(&a, ENV_TRAIN, i, &p1);
        env_calc_problem(&b, ENV_TRAIN, i, &p2);
        CU_ASSERT_EQUAL(memcmp(&p1, &p2, sizeof p1), 0); /* fully written, padding too */
        CU_ASSERT_EQUAL(p1.index, i);
        CU_ASSERT_EQUAL(p1.split, ENV_TRAIN);
        env_calc_problem(&a, ENV_EVAL, i, &q);
        CU_ASSERT_EQUAL(q.split, ENV_EVAL);
        same_split += strcmp(p1.text, q.text) == 0;
        env_calc_problem(&c, ENV_TRAIN, i, &s);
        same_seed += strcmp(p1.text, s.text) == 0;
    }
    CU_ASSERT(same_split <= 2);
    CU_ASSERT(same_seed <= 2);
    /* Large indices work. */
    struct env_problem p;
    env_calc_problem(&a, ENV_EVAL, INT64_C(1) << 40, &p);
    CU_ASSERT(strlen(p.text) > 0);
    env_calc_free(&a);
    env_calc_free(&b);
    env_calc_free(&c);
}

/* Answers are positive integers, steps within range, text short and ending in the
 * question, for several step ranges and distractor counts. */
static void test_problem_shape(void)
{
    static const int cfg[][3] = {{1, 1, 0}, {6, 6, 0}, {3, 3, 2}, {1, 6, 2}, {2, 5, 20}};
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        struct env e;
        make_env(&e, cfg[c][0], cfg[c][1], cfg[c][2], 0.0);
        int seen[7] = {0};
        for (int64_t i = 0; i < 600; i++) {
            struct env_problem p;
            env_calc_problem(&e, (int)(i % 2), i, &p);
            CU_ASSERT(p.steps >= cfg[c][0] && p.steps <= cfg[c][1]);
            if (p.steps >= 1 && p.steps <= 6) seen[p.steps]++;
            size_t n = strlen(p.answer);
            CU_ASSERT(n >= 1 && n <= 5);
            CU_ASSERT(strspn(p.answer, "0123456789") == n);
            long v = strtol(p.answer, NULL, 10);
            CU_ASSERT(v >= 1 && v < 100000);
            size_t len = strlen(p.text);
            CU_ASSERT(p.text[len - 1] == '?');
            CU_ASSERT(strstr(p.text, "How many ") != NULL);
            if (cfg[c][2] == 0 && p.steps == 1) CU_ASSERT(len >= 50 && len <= 120);
            if (cfg[c][2] <= 2) CU_ASSERT(len <= 420);
            CU_ASSERT(len < 700); /* distractors are capped */
        }
        for (int s = cfg[c][0]; s <= cfg[c][1]; s++) CU_ASSERT(seen[s] > 0);
        env_calc_free(&e);
    }
}

/* The numbers of expr appear in the text in the same order (a "*2" or "*3" may come
 * from "doubles"/"triples" instead, so it is not looked for). */
static int numbers_follow_text(const char *expr, const char *text)
{
    const char *t = text;
    for (const char *x = expr; *x;) {
        if (*x < '0' || *x > '9') {
            x++;
            continue;
        }
        char num[32];
        size_t k = strspn(x, "0123456789");
        if (k >= sizeof num - 2) return 0;
        int from_word = x > expr && x[-1] == '*' && k == 1 && (*x == '2' || *x == '3');
        snprintf(num, sizeof num, " %.*s ", (int)k, x);
        const char *hit = from_word ? NULL : strstr(t, num);
        if (hit)
            t = hit + k + 1;
        else if (!from_word)
            return 0;
        x += k;
    }
    return 1;
}

static void test_demo_canonical(void)
{
    struct env e;
    make_env(&e, 1, 6, 2, 0.0);
    int32_t ids[2048];
    uint8_t mask[2048];
    int direct = 0, tool = 0, per_step[7] = {0};
    for (int64_t i = 0; i < 1000; i++) {
        struct env_problem p;
        env_calc_problem(&e, ENV_EVAL, i, &p);
        int n = env_calc_demo(&e, &p, 5, ids, mask, 2048);
        CU_ASSERT_FATAL(n > 0);
        struct demo_parts d;
        CU_ASSERT_EQUAL_FATAL(demo_split(ids, mask, n, &d), 0);
        CU_ASSERT_STRING_EQUAL(d.answer, p.answer);
        per_step[p.steps]++;
        if (d.n_calls == 0) {
            CU_ASSERT_EQUAL(p.steps, 1); /* only small 1-step problems are answered directly */
            CU_ASSERT(atoi(p.answer) < 20);
            direct++;
            continue;
        }
        CU_ASSERT_EQUAL(d.n_calls, 1);
        tool++;
        double v;
        size_t pos;
        CU_ASSERT_EQUAL(eval_str(d.call[0], &v, &pos), CALC_OK);
        char formatted[64];
        calc_format(v, formatted, sizeof formatted);
        CU_ASSERT_STRING_EQUAL(formatted, p.answer);
        CU_ASSERT_STRING_EQUAL(d.result[0], p.answer);
        /* One operator per step (the canonical form has no unary minus). */
        int ops = 0;
        for (const char *c = d.call[0]; *c; c++) ops += strchr("+-*/", *c) != NULL;
        CU_ASSERT_EQUAL(ops, p.steps);
        CU_ASSERT(numbers_follow_text(d.call[0], p.text));
        CU_ASSERT(env_calc_correct(d.answer, p.answer));
    }
    for (int s = 1; s <= 6; s++) CU_ASSERT(per_step[s] > 100);
    CU_ASSERT(direct > 20 && direct < per_step[1]); /* some, not all, 1-step problems */
    CU_ASSERT(tool > 800);
    env_calc_free(&e);
}

/* Over 2000 demonstrations the share with a mistake (a wrong answer, or a tool error
 * followed by a repair) is close to the configured rate; recoveries end correct. */
static void test_demo_mistakes(void)
{
    struct env e;
    make_env(&e, 1, 6, 2, 0.3);
    int32_t ids[2048];
    uint8_t mask[2048];
    int mistakes = 0, recoveries = 0, wrong = 0;
    const int N = 2000;
    for (int64_t i = 0; i < N; i++) {
        struct env_problem p;
        env_calc_problem(&e, ENV_TRAIN, i, &p);
        int n = env_calc_demo(&e, &p, 77, ids, mask, 2048);
        CU_ASSERT_FATAL(n > 0);
        struct demo_parts d;
        CU_ASSERT_EQUAL_FATAL(demo_split(ids, mask, n, &d), 0);
        /* Every payload is what the real tool says about that call. */
        for (int k = 0; k < d.n_calls; k++) {
            struct env_tool_result res;
            env_calc_tool(&e, d.call[k], strlen(d.call[k]), 0, &res);
            CU_ASSERT_STRING_EQUAL(res.text, d.result[k]);
        }
        int correct = env_calc_correct(d.answer, p.answer);
        if (d.n_calls == 2) {
            CU_ASSERT(strncmp(d.result[0], "error: syntax error at ", 23) == 0);
            CU_ASSERT_STRING_EQUAL(d.result[1], p.answer);
            CU_ASSERT(correct);
            recoveries++;
            mistakes++;
        } else if (!correct) {
            CU_ASSERT_EQUAL(d.n_calls, 0); /* a wrong answer is a direct one */
            CU_ASSERT(strspn(d.answer, "0123456789") == strlen(d.answer));
            wrong++;
            mistakes++;
        } else {
            CU_ASSERT(d.n_calls <= 1);
        }
    }
    double rate = (double)mistakes / N;
    CU_ASSERT(rate > 0.25 && rate < 0.35);
    /* ~30% of the mistakes on tool problems are recoveries (small ones never are). */
    CU_ASSERT(recoveries > mistakes / 8 && recoveries < mistakes / 2);
    CU_ASSERT(wrong > mistakes / 2);
    /* Same seed, same demonstration; rate 0 and 1 are exact. */
    struct env_problem p;
    env_calc_problem(&e, ENV_TRAIN, 3, &p);
    int32_t ids2[2048];
    uint8_t mask2[2048];
    int n1 = env_calc_demo(&e, &p, 77, ids, mask, 2048);
    int n2 = env_calc_demo(&e, &p, 77, ids2, mask2, 2048);
    CU_ASSERT_EQUAL(n1, n2);
    CU_ASSERT(n1 > 0 && memcmp(ids, ids2, (size_t)n1 * sizeof ids[0]) == 0);
    for (int rate_case = 0; rate_case <= 1; rate_case++) {
        e.p.demo_mistake_rate = rate_case;
        int m = 0;
        for (int64_t i = 0; i < 200; i++) {
            env_calc_problem(&e, ENV_TRAIN, i, &p);
            int n = env_calc_demo(&e, &p, 5, ids, mask, 2048);
            struct demo_parts d;
            CU_ASSERT_EQUAL_FATAL(demo_split(ids, mask, n, &d), 0);
            m += d.n_calls == 2 || !env_calc_correct(d.answer, p.answer);
        }
        CU_ASSERT_EQUAL(m, rate_case * 200);
    }
    env_calc_free(&e);
}

static void test_demo_cap_and_foreign(void)
{
    struct env e;
    make_env(&e, 3, 3, 1, 0.0);
    struct env_problem p;
    env_calc_problem(&e, ENV_TRAIN, 0, &p);
    int32_t ids[512];
    uint8_t mask[512];
    int n = env_calc_demo(&e, &p, 1, ids, mask, 512);
    CU_ASSERT_FATAL(n > 10);
    int32_t *exact = malloc((size_t)n * sizeof *exact);
    uint8_t *exact_mask = malloc((size_t)n);
    CU_ASSERT_FATAL(exact && exact_mask);
    CU_ASSERT_EQUAL(env_calc_demo(&e, &p, 1, exact, exact_mask, n), n);
    CU_ASSERT_EQUAL(memcmp(exact, ids, (size_t)n * sizeof *exact), 0);
    CU_ASSERT_EQUAL(env_calc_demo(&e, &p, 1, exact, exact_mask, n - 1), -1);
    CU_ASSERT_EQUAL(env_calc_demo(&e, &p, 1, exact, exact_mask, 0), -1);
    free(exact);
    free(exact_mask);
    /* A problem the generator did not make (a JSONL prompt) has no demonstration. */
    struct env_problem q = p;
    snprintf(q.text, sizeof q.text, "What is 2+2?");
    CU_ASSERT_EQUAL(env_calc_demo(&e, &q, 1, ids, mask, 512), -1);
    env_calc_free(&e);
}

int main(void)
{
    static const struct test_case eval_cases[] = {
        {"values", test_eval_values},
        {"errors", test_eval_errors},
        {"limits", test_eval_limits},
        {"random_valid", test_eval_random_valid},
        {"random_bytes", test_eval_random_bytes},
        {"format", test_format},
        {NULL, NULL},
    };
    static const struct test_case env_cases[] = {
        {"tool", test_tool},
        {"correct", test_correct},
        {"init_validation", test_init_validation},
        {"problem_determinism", test_problem_determinism},
        {"problem_shape", test_problem_shape},
        {"demo_canonical", test_demo_canonical},
        {"demo_mistakes", test_demo_mistakes},
        {"demo_cap_and_foreign", test_demo_cap_and_foreign},
        {NULL, NULL},
    };
    static const struct test_suite suites[] = {
        {"calc_expr", eval_cases},
        {"env_calc", env_cases},
        {NULL, NULL},
    };
    return test_main(suites);
}
