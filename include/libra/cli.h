/*
 * The command-line conventions of every libra program and command (src/driver/cli.c).
 * A command declares once its option table (getopt_long's struct option), its usage
 * line and its help text, in a struct cli_cmd; then
 *
 *     struct cli cli;
 *     int c;
 *     cli_begin(&cli, &my_cmd, argc, argv);        argv[0]: the command's word
 *     while ((c = cli_next(&cli)) > 0)
 *         switch (c) { case 'n': if (cli_int(&cli, 1, 100, &n)) return cli.rc; ... }
 *     if (c == CLI_EXIT) return cli.rc;
 *     ... cli.args[0 .. cli.nargs - 1], the operands in order
 *
 * Every command gets -h/--help (usage line, help text, to stdout, exit 0) and --version
 * ("PROGRAM VERSION", exit 0). A usage error -- an unknown option, a missing value, a bad
 * number, too few or too many operands -- prints "NAME: what is wrong", the usage line
 * and a pointer to --help to stderr, and the command returns LIBRA_EXIT_USAGE (2).
 * Options and operands may come in any order ("--" ends the options); operands keep
 * their order whatever POSIXLY_CORRECT says. Numbers are read whole, in range, finite.
 */
#ifndef LIBRA_CLI_H
#define LIBRA_CLI_H

#include <getopt.h>
#include <stdint.h>

#define CLI_MAX_OPTS 32  /* a command's own options */
#define CLI_MAX_ARGS 256 /* operands of one command line */

struct cli_cmd {
    const char *name;  /* prefixes messages: "libra generate"; its first word is the program */
    const char *usage; /* after "usage: "; further lines begin with 7 spaces */
    const char *help;  /* after the usage line on --help: what it does, its arguments and
                          options (-h/--help and --version are added) */
    const struct option *opts; /* its options, {0}-terminated, at most CLI_MAX_OPTS;
                                  NULL: none. Values > 1, not 'h', '?', ':' */
    const char *args;          /* the operands, for "missing" messages: "MODEL TOKENS_FILE" */
    int min_args, max_args;    /* operand count; max_args < 0: no limit */
    int long_only;             /* -opt as --opt too (libra-sim's -np N, like mpirun's) */
};

enum { CLI_DONE = 0, CLI_EXIT = -1 };

struct cli {
    const struct cli_cmd *cmd;
    int argc;
    char **argv;
    struct option opts[CLI_MAX_OPTS + 3];
    const char *arg; /* the current option's value */
    const char *opt; /* the current option's name, without dashes */
    const char *args[CLI_MAX_ARGS];
    int nargs;
    int rc; /* after CLI_EXIT: what the command returns (0 or LIBRA_EXIT_USAGE) */
};

/* Starts reading argv[1 .. argc-1] (getopt state reset: safe after another parse). */
void cli_begin(struct cli *c, const struct cli_cmd *cmd, int argc, char **argv);
/* The next option's val (> 0; its value in c->arg); CLI_DONE when the line is read and
 * the operand count checked; CLI_EXIT when the command is to return c->rc now
 * (--help, --version, or a usage error already reported). */
int cli_next(struct cli *c);
/* The whole line of a command without options of its own (cmd->opts NULL): cli_begin,
 * then CLI_DONE (operands in c->args) or CLI_EXIT (return c->rc). */
int cli_operands(struct cli *c, const struct cli_cmd *cmd, int argc, char **argv);
/* Reports a usage error ("NAME: MESSAGE", the usage line); sets and returns c->rc = 2. */
__attribute__((format(printf, 2, 3))) int cli_error(struct cli *c, const char *fmt, ...);
/* The current option's value as a number: an integer in [lo, hi], any unsigned 64-bit
 * integer, a finite real in [lo, hi] (_open: in (lo, hi]). 0, or -1 after cli_error. */
int cli_int(struct cli *c, long lo, long hi, int *out);
int cli_u64(struct cli *c, uint64_t *out);
int cli_double(struct cli *c, double lo, double hi, double *out);
int cli_double_open(struct cli *c, double lo, double hi, double *out);
/* A positive byte count with an optional suffix: KB MB GB = 10^3.., KiB MiB GiB = 2^10.. */
int cli_size(struct cli *c, uint64_t *out);
/* The current value as a comma-separated list of at most max numbers in [lo, hi]: their
 * count (>= 1), or -1 after cli_error. */
int cli_int_list(struct cli *c, long lo, long hi, int *out, int max);
int cli_u64_list(struct cli *c, uint64_t *out, int max);
/* The current value, one of the '|'-separated words of choices ("bf16|f16|f32"): its index,
 * or -1 after cli_error. */
int cli_choice(struct cli *c, const char *choices);

/* The parsers underneath, strict (the whole string, no sign on unsigned, finite): 0 / -1. */
int cli_parse_long(const char *s, long lo, long hi, long *out);
int cli_parse_u64(const char *s, uint64_t *out);
int cli_parse_double(const char *s, double *out);
int cli_parse_size(const char *s, uint64_t *out);

#endif
