/*
 * The command-line conventions (include/libra/cli.h): getopt_long over a command's
 * table plus --help and --version, operands collected in order, usage errors with
 * the usage line, strict numbers. GNU getopt: optind = 0 re-initialises it for a new
 * argv, and an optstring starting with '-' returns operands in place (code 1) even
 * under POSIXLY_CORRECT, so options may follow operands ("libra export IN OUT --dtype
 * f32").
 */
#include "config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/cli.h"
#include "libra/exit_codes.h"

#define OPT_HELP 'h'
#define OPT_VERSION 0x7fff0001

void cli_begin(struct cli *c, const struct cli_cmd *cmd, int argc, char **argv)
{
    memset(c, 0, sizeof *c);
    c->cmd = cmd;
    c->argc = argc;
    c->argv = argv;
    int n = 0;
    for (const struct option *o = cmd->opts; o && o->name; o++) {
        assert(n < CLI_MAX_OPTS && o->val > 1 && o->val != OPT_HELP && !o->flag);
        c->opts[n++] = *o;
    }
    c->opts[n++] = (struct option){"help", no_argument, NULL, OPT_HELP};
    c->opts[n++] = (struct option){"version", no_argument, NULL, OPT_VERSION};
    c->opts[n] = (struct option){0};
    optind = 0; /* GNU: a full re-initialisation, whatever was parsed before */
    opterr = 0; /* the messages are ours */
}

int cli_error(struct cli *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", c->cmd->name);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: %s\nTry '%s --help' for more information.\n", c->cmd->usage,
            c->cmd->name);
    return c->rc = LIBRA_EXIT_USAGE;
}

static void print_help(const struct cli_cmd *cmd)
{
    printf("usage: %s\n%s", cmd->usage, cmd->help ? cmd->help : "");
    printf("  -h, --help   this help\n"
           "  --version    the version\n");
}

/* "--t" that several options begin with: the first two of them, else NULL. */
static int ambiguous(const struct cli *c, const char *tok, const char **a, const char **b)
{
    while (*tok == '-') tok++;
    size_t len = strcspn(tok, "=");
    *a = *b = NULL;
    for (const struct option *o = c->opts; o->name && len > 0; o++)
        if (strncmp(o->name, tok, len) == 0) {
            if (!*a) *a = o->name;
            else if (!*b) *b = o->name;
        }
    return *b != NULL;
}

/* The message of getopt's '?' or ':' for the token just read. */
static int bad_option(struct cli *c, int ch)
{
    const char *tok = optind >= 1 && optind <= c->argc ? c->argv[optind - 1] : "";
    int is_long = tok[0] == '-' && (tok[1] == '-' || c->cmd->long_only);
    if (ch == ':') return cli_error(c, "option '%s' needs a value", tok);
    if (optopt && !is_long) return cli_error(c, "unknown option '-%c'", optopt);
    if (optopt) return cli_error(c, "option '%.*s' takes no value", (int)strcspn(tok, "="), tok);
    const char *a, *b;
    if (ambiguous(c, tok, &a, &b))
        return cli_error(c, "ambiguous option '%s' (--%s, --%s, ...)", tok, a, b);
    return cli_error(c, "unknown option '%s'", tok);
}

static int add_operand(struct cli *c, const char *s)
{
    if (c->cmd->max_args >= 0 && c->nargs >= c->cmd->max_args) {
        cli_error(c, "unexpected argument '%s'", s);
        return -1;
    }
    if (c->nargs == CLI_MAX_ARGS) {
        cli_error(c, "more than %d arguments", CLI_MAX_ARGS);
        return -1;
    }
    c->args[c->nargs++] = s;
    return 0;
}

int cli_next(struct cli *c)
{
    for (;;) {
        int idx = -1;
        optopt = 0;
        int ch = c->cmd->long_only ? getopt_long_only(c->argc, c->argv, "-:h", c->opts, &idx)
                                   : getopt_long(c->argc, c->argv, "-:h", c->opts, &idx);
        if (ch == 1) {
            if (add_operand(c, optarg)) return CLI_EXIT;
            continue;
        }
        if (ch == -1) { /* the end, or "--": what follows is operands */
            for (; optind < c->argc; optind++)
                if (add_operand(c, c->argv[optind])) return CLI_EXIT;
            if (c->nargs < c->cmd->min_args) {
                const char *want = c->cmd->args ? c->cmd->args : "more arguments";
                if (c->nargs == 0) cli_error(c, "missing %s", want);
                else cli_error(c, "missing an argument: expected %s, got %d", want, c->nargs);
                return CLI_EXIT;
            }
            return CLI_DONE;
        }
        if (ch == '?' || ch == ':') {
            bad_option(c, ch);
            return CLI_EXIT;
        }
        c->arg = optarg;
        c->opt = NULL;
        if (idx >= 0) c->opt = c->opts[idx].name;
        for (const struct option *o = c->opts; !c->opt && o->name; o++)
            if (o->val == ch) c->opt = o->name;
        if (ch == OPT_HELP) {
            print_help(c->cmd);
            c->rc = 0;
            return CLI_EXIT;
        }
        if (ch == OPT_VERSION) {
            printf("%.*s %s\n", (int)strcspn(c->cmd->name, " "), c->cmd->name, PACKAGE_VERSION);
            c->rc = 0;
            return CLI_EXIT;
        }
        return ch;
    }
}

int cli_operands(struct cli *c, const struct cli_cmd *cmd, int argc, char **argv)
{
    cli_begin(c, cmd, argc, argv);
    int ch = cli_next(c);
    return ch == CLI_DONE ? CLI_DONE : CLI_EXIT; /* without options there is no option code */
}

int cli_parse_long(const char *s, long lo, long hi, long *out)
{
    if (!s || !*s || isspace((unsigned char)*s)) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cli_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)*s)) return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > UINT64_MAX) return -1;
    *out = (uint64_t)v;
    return 0;
}

int cli_parse_double(const char *s, double *out)
{
    if (!s || !*s || isspace((unsigned char)*s)) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || !isfinite(v) || (errno == ERANGE && v != 0)) return -1;
    *out = v;
    return 0;
}

int cli_parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *suffix;
        uint64_t mul;
    } units[] = {{"", 1},          {"B", 1},
                 {"KB", 1000},     {"MB", 1000000}, {"GB", 1000000000},
                 {"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}};
    if (!s || !isdigit((unsigned char)*s)) return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(end, units[i].suffix) == 0) {
            if (v == 0 || v > UINT64_MAX / units[i].mul) return -1;
            *out = v * units[i].mul;
            return 0;
        }
    return -1;
}

int cli_int(struct cli *c, long lo, long hi, int *out)
{
    long v;
    if (cli_parse_long(c->arg, lo, hi, &v))
        return cli_error(c, "--%s '%s': need an integer in [%ld, %ld]", c->opt, c->arg, lo, hi),
               -1;
    *out = (int)v;
    return 0;
}

int cli_u64(struct cli *c, uint64_t *out)
{
    if (cli_parse_u64(c->arg, out))
        return cli_error(c, "--%s '%s': need an unsigned integer", c->opt, c->arg), -1;
    return 0;
}

int cli_size(struct cli *c, uint64_t *out)
{
    if (cli_parse_size(c->arg, out))
        return cli_error(c, "--%s %s: expected a positive size in bytes (e.g. 5GB, 500MB, "
                            "1073741824)", c->opt, c->arg), -1;
    return 0;
}

static int real_in(struct cli *c, double lo, double hi, int lo_open, double *out)
{
    double v;
    if (cli_parse_double(c->arg, &v) || v > hi || v < lo || (lo_open && v == lo))
        return cli_error(c, "--%s '%s': need a number in %c%g, %g]", c->opt, c->arg,
                         lo_open ? '(' : '[', lo, hi), -1;
    *out = v;
    return 0;
}

int cli_double(struct cli *c, double lo, double hi, double *out)
{
    return real_in(c, lo, hi, 0, out);
}

int cli_double_open(struct cli *c, double lo, double hi, double *out)
{
    return real_in(c, lo, hi, 1, out);
}

/* Calls parse on each comma-separated piece of s (at most max): the count, or -1. */
static int each_piece(const char *s, int max, int (*parse)(const char *, void *, int), void *ctx)
{
    int n = 0;
    for (const char *p = s;; n++) {
        size_t len = strcspn(p, ",");
        char piece[64];
        if (n == max || len == 0 || len >= sizeof piece) return -1;
        memcpy(piece, p, len);
        piece[len] = '\0';
        if (parse(piece, ctx, n)) return -1;
        if (p[len] == '\0') return n + 1;
        p += len + 1;
    }
}

struct int_range {
    long lo, hi;
    int *out;
};

static int parse_int_piece(const char *s, void *ctx, int i)
{
    struct int_range *r = ctx;
    long v;
    if (cli_parse_long(s, r->lo, r->hi, &v)) return -1;
    r->out[i] = (int)v;
    return 0;
}

static int parse_u64_piece(const char *s, void *ctx, int i)
{
    return cli_parse_u64(s, (uint64_t *)ctx + i);
}

int cli_int_list(struct cli *c, long lo, long hi, int *out, int max)
{
    struct int_range r = {lo, hi, out};
    int n = each_piece(c->arg, max, parse_int_piece, &r);
    if (n < 0)
        cli_error(c, "--%s '%s': need up to %d integers in [%ld, %ld], comma-separated", c->opt,
                  c->arg, max, lo, hi);
    return n;
}

int cli_u64_list(struct cli *c, uint64_t *out, int max)
{
    int n = each_piece(c->arg, max, parse_u64_piece, out);
    if (n < 0)
        cli_error(c, "--%s '%s': need up to %d unsigned integers, comma-separated", c->opt,
                  c->arg, max);
    return n;
}

int cli_choice(struct cli *c, const char *choices)
{
    size_t len = strlen(c->arg);
    int i = 0;
    for (const char *p = choices; *p; i++) {
        size_t w = strcspn(p, "|");
        if (w == len && strncmp(p, c->arg, len) == 0) return i;
        p += w + (p[w] == '|');
    }
    /* "a|b|c" -> "expected a, b or c" */
    char list[256];
    size_t o = 0;
    int k = 0;
    for (const char *p = choices; *p && o + 1 < sizeof list; k++) {
        size_t w = strcspn(p, "|");
        const char *sep = k == 0 ? "" : p[w] ? ", " : " or ";
        int m = snprintf(list + o, sizeof list - o, "%s%.*s", sep, (int)w, p);
        o += m > 0 ? (size_t)m : 0;
        p += w + (p[w] == '|');
    }
    cli_error(c, "--%s %s: expected %s", c->opt, c->arg, list);
    return -1;
}
