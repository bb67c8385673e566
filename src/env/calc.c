/*
 * The calc environment (include/libra/env.h): seeded arithmetic word problems, the
 * calculator tool, numeric answer checking and the scripted expert's demonstrations.
 *
 * A problem is one person's count of one object changed by a chain of operations,
 * each in one fixed sentence (a small vocabulary a tiny byte-level model can learn):
 *
 *   start     "Tom has 12 apples."                             12
 *             "Tom has 3 bags of 8 apples."                    3*8      (1 step)
 *   add       "Tom buys 5 more apples." / "finds 5 more"       +5
 *   sub       "Tom gives away 4 apples." / "loses 4"           -4
 *   add bags  "Tom buys 3 bags of 6 apples."                   +3*6     (2 steps)
 *   sub bags  "Tom gives away 2 bags of 5 apples."             -2*5     (2 steps)
 *   mul       "Tom doubles the apples." / "triples"            *2, *3
 *   div       "Tom splits the apples into 4 equal piles and keeps one pile."   /4
 *   last div  "Tom shares the apples equally among 4 friends." + "How many apples
 *             does each friend get?"                           /4
 *   question  "How many apples does Tom have now?"
 *
 * Distractors (0..calc_distractors of them, at most CALC_MAX_DISTRACTORS) mention a
 * number about a different object, of another person or of the same one ("Ann buys 9
 * pens.", "Tom also has 7 cards."), so "the apples" is never ambiguous. Every
 * intermediate value is a positive integer below 10^5 (divisions are exact); steps
 * counts the operations of the canonical expression: the problem's numbers in text
 * order ("(3*8+5)*2/4"), which calc_eval evaluates to the answer.
 *
 * A problem is a pure function of (run seed, split, index); env_calc_demo regenerates
 * its structure from them (env_problem keeps only text, answer and steps). The
 * expert's policy and mistakes are described above env_calc_demo.
 */
#include "libra/env.h"

#include "demo.h"
#include "libra/log.h"
#include "libra/rng.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALC_MAX_STEPS 6
#define CALC_MAX_DISTRACTORS 8
#define CALC_VALUE_LIMIT 100000 /* intermediate values stay below */
#define CALC_SMALL_LIMIT 20     /* 1-step +/- problems below this are answered directly */
#define CALC_EXPR_CAP (ENV_CALC_EXPR_MAX + 1)
#define CALL_TEXT_CAP (ENV_CALC_EXPR_MAX + 8) /* a malformed call is a few bytes longer */

/* Purpose constants of the random streams (the fourth rng_init key). */
#define KEY_PROBLEM 0xca1c0001u
#define KEY_DEMO 0xca1c0002u

struct env_calc {
    int min_steps, max_steps; /* validated env.calc_min_steps / calc_max_steps */
    int distractors;          /* env.calc_distractors, capped at CALC_MAX_DISTRACTORS */
};

enum calc_op_kind { OP_ADD, OP_SUB, OP_ADD_BAGS, OP_SUB_BAGS, OP_MUL, OP_DIV, N_OP_KINDS };

struct calc_op {
    int kind;     /* enum calc_op_kind */
    int64_t a, b; /* the operand (bags: a bags of b); OP_MUL: 2 or 3 */
    int variant;  /* which phrasing */
};

/* A problem's structure: everything the text, the expression and the expert need. */
struct calc_plan {
    int person, object;          /* indices into names[] and objects[] */
    int64_t start_a, start_b;    /* start_b > 0: "a bags of b" */
    int n_ops;
    struct calc_op ops[CALC_MAX_STEPS];
    int steps;
    int64_t value;               /* the answer */
    char text[ENV_TEXT_MAX];
    char expr[CALC_EXPR_CAP];
};

static const char *const names[] = {"Tom", "Ann", "Sam", "Mia", "Ben", "Eva"};
static const char *const objects[] = {"apples", "pens", "cards", "coins", "books", "eggs"};
#define N_NAMES ((int)(sizeof names / sizeof names[0]))
#define N_OBJECTS ((int)(sizeof objects / sizeof objects[0]))

/* ---- lifetime ---- */

int env_calc_init(struct env *e, char *err, size_t errlen)
{
    const struct env_params *p = &e->p;
    const char *bad = NULL;
    if (p->calc_min_steps < 1 || p->calc_max_steps > CALC_MAX_STEPS ||
        p->calc_min_steps > p->calc_max_steps)
        bad = "env.calc_min_steps/calc_max_steps must satisfy 1 <= min <= max <= 6";
    else if (p->calc_distractors < 0)
        bad = "env.calc_distractors must be >= 0";
    else if (!(p->demo_mistake_rate >= 0.0 && p->demo_mistake_rate <= 1.0))
        bad = "env.demo_mistake_rate must be in [0, 1]";
    if (bad) {
        if (err && errlen) {
            snprintf(err, errlen, "%s (got min %d, max %d, distractors %d, mistake rate %g)",
                     bad, p->calc_min_steps, p->calc_max_steps, p->calc_distractors,
                     p->demo_mistake_rate);
        }
        return -1;
    }
    struct env_calc *c = xcalloc(1, sizeof *c);
    c->min_steps = p->calc_min_steps;
    c->max_steps = p->calc_max_steps;
    c->distractors =
        p->calc_distractors < CALC_MAX_DISTRACTORS ? p->calc_distractors : CALC_MAX_DISTRACTORS;
    e->calc = c;
    return 0;
}

void env_calc_free(struct env *e)
{
    if (!e) return;
    free(e->calc);
    e->calc = NULL;
}

/* ---- problem generation ---- */

static int64_t draw_range(struct rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)rng_below(r, (uint64_t)(hi - lo + 1));
}

static int64_t op_apply(const struct calc_op *op, int64_t v)
{
    switch (op->kind) {
    case OP_ADD: return v + op->a;
    case OP_SUB: return v - op->a;
    case OP_ADD_BAGS: return v + op->a * op->b;
    case OP_SUB_BAGS: return v - op->a * op->b;
    case OP_MUL: return v * op->a;
    default: return v / op->a; /* OP_DIV, exact by construction */
    }
}

static int op_steps(int kind)
{
    return kind == OP_ADD_BAGS || kind == OP_SUB_BAGS ? 2 : 1;
}

/* Draws an operation applicable to v that needs at most `left` steps; 0 if none is. */
static int draw_op(struct rng *r, int64_t v, int left, struct calc_op *op)
{
    int divisors[8], n_div = 0;
    for (int d = 2; d <= 9; d++)
        if (v % d == 0) divisors[n_div++] = d;
    double w[N_OP_KINDS] = {0};
    if (v + 99 < CALC_VALUE_LIMIT) w[OP_ADD] = 3.0;
    if (v >= 3) w[OP_SUB] = 3.0;
    if (left >= 2 && v + 9 * 12 < CALC_VALUE_LIMIT) w[OP_ADD_BAGS] = 1.0;
    if (left >= 2 && v >= 6) w[OP_SUB_BAGS] = 0.7;
    if (v * 3 < CALC_VALUE_LIMIT) w[OP_MUL] = 1.5;
    if (n_div > 0) w[OP_DIV] = 1.5;
    double total = 0;
    for (int k = 0; k < N_OP_KINDS; k++) total += w[k];
    if (total <= 0) return 0;
    op->kind = rng_categorical(r, w, N_OP_KINDS);
    op->variant = (int)rng_below(r, 2);
    op->b = 0;
    switch (op->kind) {
    case OP_ADD: op->a = draw_range(r, 2, 99); break;
    case OP_SUB: {
        /* At most about two thirds of v, so chains do not collapse to tiny values. */
        int64_t hi = v * 2 / 3 > 2 ? v * 2 / 3 : 2;
        op->a = draw_range(r, 2, hi < 99 ? hi : 99);
        break;
    }
    case OP_ADD_BAGS:
        op->a = draw_range(r, 2, 9);
        op->b = draw_range(r, 2, 12);
        break;
    case OP_SUB_BAGS: {
        int64_t lim = v * 2 / 3; /* >= 4 when this kind is drawn */
        op->a = draw_range(r, 2, lim / 2 < 9 ? lim / 2 : 9);
        op->b = draw_range(r, 2, lim / op->a < 12 ? lim / op->a : 12);
        break;
    }
    case OP_MUL: op->a = 2 + op->variant; break;
    default: op->a = divisors[rng_below(r, (uint64_t)n_div)]; break;
    }
    return 1;
}

/* A 1-step +/- problem whose numbers and result are all small (answered directly). */
static void draw_small(struct rng *r, struct calc_plan *pl)
{
    struct calc_op *op = &pl->ops[0];
    op->variant = (int)rng_below(r, 2);
    op->b = 0;
    if (rng_below(r, 2) == 0) {
        op->kind = OP_ADD;
        pl->start_a = draw_range(r, 2, CALC_SMALL_LIMIT - 3);
        op->a = draw_range(r, 2, CALC_SMALL_LIMIT - 1 - pl->start_a);
    } else {
        op->kind = OP_SUB;
        pl->start_a = draw_range(r, 3, CALC_SMALL_LIMIT - 1);
        op->a = draw_range(r, 2, pl->start_a - 1);
    }
    pl->n_ops = 1;
}

/* Draws the start and the operations of a problem of `steps` steps. */
static void draw_chain(struct rng *r, int steps, struct calc_plan *pl)
{
    pl->start_b = 0;
    pl->n_ops = 0;
    int left = steps;
    if (steps == 1 && rng_uniform(r) < 0.4) {
        draw_small(r, pl);
        return;
    }
    if (steps >= 2 && rng_uniform(r) < 0.2) {
        pl->start_a = draw_range(r, 2, 9);
        pl->start_b = draw_range(r, 2, 12);
        left--;
    } else {
        pl->start_a = draw_range(r, 2, 99);
    }
    int64_t v = pl->start_b ? pl->start_a * pl->start_b : pl->start_a;
    while (left > 0) {
        struct calc_op *op = &pl->ops[pl->n_ops];
        /* Every v >= 3 admits a subtraction and every v < 99901 an addition, so a
         * step is always available. */
        if (!draw_op(r, v, left, op)) FATAL("calc: no operation applies to %lld", (long long)v);
        v = op_apply(op, v);
        left -= op_steps(op->kind);
        pl->n_ops++;
    }
}

/* ---- text ---- */

struct text_buf {
    char *s;
    size_t cap, n;
};

static void put(struct text_buf *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text_buf *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
    va_end(ap);
    /* The caps on steps and distractors bound the text far below the buffer. */
    if (k < 0 || (size_t)k >= t->cap - t->n) FATAL("calc: problem text exceeds %zu bytes", t->cap);
    t->n += (size_t)k;
}

static int last_is_share(const struct calc_plan *pl)
{
    return pl->ops[pl->n_ops - 1].kind == OP_DIV;
}

static void put_op(struct text_buf *t, const struct calc_plan *pl, const struct calc_op *op,
                   int last)
{
    const char *who = names[pl->person], *obj = objects[pl->object];
    switch (op->kind) {
    case OP_ADD:
        put(t, " %s %s %lld more %s.", who, op->variant ? "finds" : "buys", (long long)op->a, obj);
        break;
    case OP_SUB:
        put(t, " %s %s %lld %s.", who, op->variant ? "loses" : "gives away", (long long)op->a, obj);
        break;
    case OP_ADD_BAGS:
        put(t, " %s buys %lld bags of %lld %s.", who, (long long)op->a, (long long)op->b, obj);
        break;
    case OP_SUB_BAGS:
        put(t, " %s gives away %lld bags of %lld %s.", who, (long long)op->a, (long long)op->b,
            obj);
        break;
    case OP_MUL: put(t, " %s %s the %s.", who, op->a == 2 ? "doubles" : "triples", obj); break;
    default:
        if (last)
            put(t, " %s shares the %s equally among %lld friends.", who, obj, (long long)op->a);
        else
            put(t, " %s splits the %s into %lld equal piles and keeps one pile.", who, obj,
                (long long)op->a);
        break;
    }
}

static void put_distractor(struct text_buf *t, struct rng *r, const struct calc_plan *pl)
{
    int other_obj = (pl->object + 1 + (int)rng_below(r, N_OBJECTS - 1)) % N_OBJECTS;
    long long n = (long long)draw_range(r, 2, 99);
    int kind = (int)rng_below(r, 3);
    if (kind == 2) {
        put(t, " %s also has %lld %s.", names[pl->person], n, objects[other_obj]);
        return;
    }
    int other = (pl->person + 1 + (int)rng_below(r, N_NAMES - 1)) % N_NAMES;
    put(t, " %s %s %lld %s.", names[other], kind ? "buys" : "has", n, objects[other_obj]);
}

/* The story with distractors inserted: slot s is after the start and s operations;
 * nothing goes between a final "shares ... equally" and its question. */
static void write_text(struct rng *r, int n_distract, struct calc_plan *pl)
{
    struct text_buf t = {pl->text, sizeof pl->text, 0};
    int slots = last_is_share(pl) ? pl->n_ops : pl->n_ops + 1;
    int per_slot[CALC_MAX_STEPS + 1] = {0};
    for (int k = 0; k < n_distract; k++) per_slot[rng_below(r, (uint64_t)slots)]++;
    const char *who = names[pl->person], *obj = objects[pl->object];
    if (pl->start_b)
        put(&t, "%s has %lld bags of %lld %s.", who, (long long)pl->start_a,
            (long long)pl->start_b, obj);
    else
        put(&t, "%s has %lld %s.", who, (long long)pl->start_a, obj);
    for (int s = 0; s <= pl->n_ops; s++) {
        for (int k = 0; k < per_slot[s]; k++) put_distractor(&t, r, pl);
        if (s < pl->n_ops) put_op(&t, pl, &pl->ops[s], s == pl->n_ops - 1);
    }
    if (last_is_share(pl))
        put(&t, " How many %s does each friend get?", obj);
    else
        put(&t, " How many %s does %s have now?", obj, who);
}

/* ---- canonical expression ---- */

struct expr_buf {
    char s[CALC_EXPR_CAP];
    size_t n;
    int prec; /* of the top-level operator: 1 = + -, 2 = * /, 3 = a number */
};

static void expr_put(struct expr_buf *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void expr_put(struct expr_buf *x, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(x->s + x->n, sizeof x->s - x->n, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof x->s - x->n) FATAL("calc: expression exceeds %d bytes",
                                                         ENV_CALC_EXPR_MAX);
    x->n += (size_t)k;
}

/* Parenthesises the expression so far when a * or / follows a + or -. */
static void expr_bind_tight(struct expr_buf *x)
{
    if (x->prec >= 2) return;
    if (x->n + 2 >= sizeof x->s) FATAL("calc: expression exceeds %d bytes", ENV_CALC_EXPR_MAX);
    memmove(x->s + 1, x->s, x->n);
    x->s[0] = '(';
    x->s[++x->n] = ')';
    x->s[++x->n] = '\0';
}

static void write_expr(struct calc_plan *pl)
{
    struct expr_buf x = {{0}, 0, 3};
    if (pl->start_b) {
        expr_put(&x, "%lld*%lld", (long long)pl->start_a, (long long)pl->start_b);
        x.prec = 2;
    } else {
        expr_put(&x, "%lld", (long long)pl->start_a);
    }
    for (int k = 0; k < pl->n_ops; k++) {
        const struct calc_op *op = &pl->ops[k];
        long long a = (long long)op->a, b = (long long)op->b;
        switch (op->kind) {
        case OP_ADD: expr_put(&x, "+%lld", a); x.prec = 1; break;
        case OP_SUB: expr_put(&x, "-%lld", a); x.prec = 1; break;
        case OP_ADD_BAGS: expr_put(&x, "+%lld*%lld", a, b); x.prec = 1; break;
        case OP_SUB_BAGS: expr_put(&x, "-%lld*%lld", a, b); x.prec = 1; break;
        case OP_MUL: expr_bind_tight(&x); expr_put(&x, "*%lld", a); x.prec = 2; break;
        default: expr_bind_tight(&x); expr_put(&x, "/%lld", a); x.prec = 2; break;
        }
    }
    memcpy(pl->expr, x.s, x.n + 1);
}

/* The whole problem (run seed, split, index) -> plan; a pure function. */
static void calc_plan_make(const struct env *e, int split, int64_t i, struct calc_plan *pl)
{
    const struct env_calc *c = e->calc;
    struct rng r;
    rng_init(&r, e->p.seed, (uint64_t)split, (uint64_t)i, KEY_PROBLEM);
    memset(pl, 0, sizeof *pl);
    pl->steps = (int)draw_range(&r, c->min_steps, c->max_steps);
    pl->person = (int)rng_below(&r, N_NAMES);
    pl->object = (int)rng_below(&r, N_OBJECTS);
    draw_chain(&r, pl->steps, pl);
    int64_t v = pl->start_b ? pl->start_a * pl->start_b : pl->start_a;
    for (int k = 0; k < pl->n_ops; k++) v = op_apply(&pl->ops[k], v);
    pl->value = v;
    write_text(&r, (int)rng_below(&r, (uint64_t)c->distractors + 1), pl);
    write_expr(pl);
}

void env_calc_problem(const struct env *e, int split, int64_t i, struct env_problem *out)
{
    struct calc_plan pl;
    calc_plan_make(e, split, i, &pl);
    memset(out, 0, sizeof *out);
    out->index = i;
    out->split = split;
    out->steps = pl.steps;
    memcpy(out->text, pl.text, sizeof out->text);
    snprintf(out->answer, sizeof out->answer, "%lld", (long long)pl.value);
}

/* ---- tool and answer checking ---- */

void env_calc_tool(const struct env *e, const char *call, size_t len, double deadline,
                   struct env_tool_result *out)
{
    (void)e;
    out->tool = ENV_TOOL_CALC;
    if (deadline > 0 && wall_time() > deadline) {
        out->status = TOOL_TIMEOUT;
        snprintf(out->text, sizeof out->text, "error: timeout");
    } else {
        double v = 0;
        size_t pos = 0;
        int rc = calc_eval(call, len, &v, &pos);
        if (rc == CALC_OK) {
            out->status = TOOL_SUCCESS;
            calc_format(v, out->text, sizeof out->text);
        } else {
            out->status = TOOL_FAILURE;
            if (rc == CALC_SYNTAX)
                snprintf(out->text, sizeof out->text, "error: %s at %zu", calc_err_text(rc), pos);
            else
                snprintf(out->text, sizeof out->text, "error: %s", calc_err_text(rc));
        }
    }
    out->len = (int)strlen(out->text);
}

/* A plain decimal number (optional sign, digits, optional point) surrounded by
 * spaces; 0 and the value, or -1. */
static int parse_plain_number(const char *s, double *v)
{
    if (!s) return -1;
    size_t a = 0, b = strlen(s);
    while (a < b && (s[a] == ' ' || s[a] == '\t' || s[a] == '\n' || s[a] == '\r')) a++;
    while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\n' || s[b - 1] == '\r'))
        b--;
    char tok[64];
    if (b - a == 0 || b - a >= sizeof tok) return -1;
    size_t i = a, digits = 0;
    if (s[i] == '+' || s[i] == '-') i++;
    while (i < b && s[i] >= '0' && s[i] <= '9') i++, digits++;
    if (i < b && s[i] == '.') {
        i++;
        while (i < b && s[i] >= '0' && s[i] <= '9') i++, digits++;
    }
    if (i != b || digits == 0) return -1;
    memcpy(tok, s + a, b - a);
    tok[b - a] = '\0';
    *v = strtod(tok, NULL);
    return isfinite(*v) ? 0 : -1;
}

int env_calc_correct(const char *given, const char *answer)
{
    double g, a;
    if (parse_plain_number(given, &g) != 0 || parse_plain_number(answer, &a) != 0) return 0;
    return fabs(g - a) <= 1e-6 * fmax(1.0, fabs(a));
}

/* ---- the scripted expert ---- */

/* The call turn and the real tool's response to it. */
static void calc_demo_call(struct demo_buf *d, const char *call)
{
    struct env_tool_result res;
    env_calc_tool(d->e, call, strlen(call), 0.0, &res);
    demo_call(d, call, &res);
}

/* A 1-step +/- problem with every number and the result below CALC_SMALL_LIMIT. */
static int plan_is_small(const struct calc_plan *pl)
{
    const struct calc_op *op = &pl->ops[0];
    return pl->steps == 1 && pl->n_ops == 1 && !pl->start_b &&
           (op->kind == OP_ADD || op->kind == OP_SUB) && pl->start_a < CALC_SMALL_LIMIT &&
           op->a < CALC_SMALL_LIMIT && pl->value < CALC_SMALL_LIMIT;
}

/* The answer with operation `skip` left out, if every value stays a positive integer
 * (divisions exact); else -1. */
static int64_t value_skipping(const struct calc_plan *pl, int skip)
{
    int64_t v = pl->start_b ? pl->start_a * pl->start_b : pl->start_a;
    for (int k = 0; k < pl->n_ops; k++) {
        if (k == skip) continue;
        const struct calc_op *op = &pl->ops[k];
        if (op->kind == OP_DIV && v % op->a != 0) return -1;
        v = op_apply(op, v);
        if (v <= 0) return -1;
    }
    return v;
}

/* A plausible wrong value: a forgotten operation, or a slip of a few units. */
static int64_t wrong_value(struct rng *r, const struct calc_plan *pl, int allow_skip)
{
    int64_t cand[CALC_MAX_STEPS];
    int n = 0;
    for (int k = 0; allow_skip && k < pl->n_ops; k++) {
        int64_t v = value_skipping(pl, k);
        if (v > 0 && v != pl->value) cand[n++] = v;
    }
    if (n > 0 && rng_uniform(r) < 0.6) return cand[rng_below(r, (uint64_t)n)];
    static const int64_t slips[] = {1, -1, 2, -2, 10, -10};
    int64_t d = slips[rng_below(r, allow_skip ? 6 : 4)];
    return pl->value + d > 0 ? pl->value + d : pl->value - d;
}

/* A call the tool rejects: a doubled + * or / (no unary plus, no unary *), or an
 * unbalanced parenthesis (a missing ')' or a stray one). */
static void malformed_call(struct rng *r, const char *expr, char *out, size_t cap)
{
    size_t len = strlen(expr), ops[CALC_EXPR_CAP], n_ops = 0;
    for (size_t k = 0; k < len; k++)
        if (expr[k] == '+' || expr[k] == '*' || expr[k] == '/') ops[n_ops++] = k;
    if (n_ops > 0 && rng_below(r, 2) == 0) {
        size_t at = ops[rng_below(r, n_ops)];
        snprintf(out, cap, "%.*s%c%s", (int)at, expr, expr[at], expr + at);
        return;
    }
    const char *close = strrchr(expr, ')');
    int how = (int)rng_below(r, 3);
    if (how == 0 && close)
        snprintf(out, cap, "%.*s%s", (int)(close - expr), expr, close + 1); /* missing ')' */
    else if (how <= 1)
        snprintf(out, cap, "(%s", expr); /* missing ')' */
    else
        snprintf(out, cap, "%s)", expr); /* stray ')' */
}

/*
 * The expert, for the problem (regenerated from the run seed, split and index):
 *  - a 1-step +/- problem with small numbers (all below 20): answers directly;
 *  - anything else: calls the calculator with the canonical expression and answers
 *    with its value.
 * With probability demo_mistake_rate (stream (seed, split, index)) it errs instead:
 * on a small problem by answering a slightly wrong value; otherwise with 70% a wrong
 * direct answer (a forgotten operation or a slip) and no tool, with 30% a malformed
 * call, the tool's error, the correct call and the correct answer (a recovery).
 * Returns the ids written, or -1 if they exceed cap or pr is not this generator's
 * problem (JSONL prompts have no structure for the expert to follow).
 */
int env_calc_demo(const struct env *e, const struct env_problem *pr, uint64_t seed, int32_t *ids,
                  uint8_t *mask, int cap)
{
    struct calc_plan pl;
    calc_plan_make(e, pr->split, pr->index, &pl);
    if (strcmp(pl.text, pr->text) != 0) return -1;
    char value[ENV_ANSWER_MAX];
    snprintf(value, sizeof value, "%lld", (long long)pl.value);

    struct rng r;
    rng_init(&r, seed, (uint64_t)pr->split, (uint64_t)pr->index, KEY_DEMO);
    int mistake = rng_uniform(&r) < e->p.demo_mistake_rate;
    struct demo_buf d = demo_buf_make(e, ids, mask, cap);
    char wrong[ENV_ANSWER_MAX];

    if (plan_is_small(&pl)) {
        if (mistake) {
            snprintf(wrong, sizeof wrong, "%lld", (long long)wrong_value(&r, &pl, 0));
            demo_answer(&d, wrong);
        } else {
            demo_answer(&d, value);
        }
    } else if (mistake && rng_uniform(&r) < 0.7) {
        snprintf(wrong, sizeof wrong, "%lld", (long long)wrong_value(&r, &pl, 1));
        demo_answer(&d, wrong);
    } else {
        if (mistake) {
            char bad[CALL_TEXT_CAP];
            malformed_call(&r, pl.expr, bad, sizeof bad);
            calc_demo_call(&d, bad);
        }
        calc_demo_call(&d, pl.expr);
        demo_answer(&d, value);
    }
    return demo_result(&d);
}
