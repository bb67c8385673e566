/*
 * The configuration reference as a man page, libra.cfg(5): config_write_reference's
 * Markdown (docs/config.md) rendered into roff, so the page and the Markdown never
 * differ in content. The converter knows only the Markdown that writer emits: a
 * "# " title and a <!-- --> comment (both dropped), "## " headings, paragraphs,
 * ``` blocks, `code`, *emphasis*, [text](url) links, and tables whose first column
 * names a key (each row becomes a tagged paragraph: the key, the middle columns
 * labelled by their headers, then the last column). Like the Markdown it names no
 * build paths.
 */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/config.h"

#define MAN_COLS 8 /* the reference's tables have 4 or 5 */

/* Text of a line, roff-escaped: backslashes, a leading '.' or '\'', `code` in bold
 * (its '-' as \-), *emphasis* in italics, [text](url) as "text <url>". */
static void put_text(FILE *out, const char *s, size_t n)
{
    int code = 0;
    if (n > 0 && (s[0] == '.' || s[0] == '\'')) fputs("\\&", out);
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '`') {
            fputs((code = !code) ? "\\fB" : "\\fR", out);
        } else if (c == '\\') {
            fputs("\\e", out);
        } else if (c == '-' && code) {
            fputs("\\-", out);
        } else if (c == '*' && !code && i + 1 < n && isalnum((unsigned char)s[i + 1]) &&
                   (i == 0 || !isalnum((unsigned char)s[i - 1])) &&
                   memchr(s + i + 1, '*', n - i - 1)) {
            const char *end = memchr(s + i + 1, '*', n - i - 1);
            fputs("\\fI", out);
            put_text(out, s + i + 1, (size_t)(end - s - i - 1));
            fputs("\\fR", out);
            i = (size_t)(end - s);
        } else if (c == '[' && !code) {
            const char *mid = memchr(s + i, ']', n - i);
            const char *close = mid && mid + 1 < s + n && mid[1] == '(' ?
                                memchr(mid, ')', (size_t)(s + n - mid)) : NULL;
            if (!close) {
                fputc(c, out);
                continue;
            }
            put_text(out, s + i + 1, (size_t)(mid - s - i - 1));
            fputs(" <", out);
            fwrite(mid + 2, 1, (size_t)(close - mid - 2), out);
            fputc('>', out);
            i = (size_t)(close - s);
        } else {
            fputc(c, out);
        }
    }
    if (code) fputs("\\fR", out);
}

/* A Markdown table cell, unescaped in place (\| &lt; &gt;), without its padding. */
static char *cell_text(char *s)
{
    while (*s == ' ') s++;
    char *w = s;
    for (const char *r = s; *r; r++, w++) {
        if (r[0] == '\\' && r[1] == '|') *w = *++r;
        else if (strncmp(r, "&lt;", 4) == 0) *w = '<', r += 3;
        else if (strncmp(r, "&gt;", 4) == 0) *w = '>', r += 3;
        else *w = *r;
    }
    *w = '\0';
    while (w > s && w[-1] == ' ') *--w = '\0';
    return s;
}

/* The cells of a table line "| a | b \| c |" into cells (at most MAN_COLS). */
static int split_row(char *line, char *cells[MAN_COLS])
{
    int n = 0;
    char *p = line + 1; /* past the opening '|' */
    while (*p && n < MAN_COLS) {
        char *q = p;
        while (*q && !(*q == '|' && q[-1] != '\\')) q++;
        if (!*q) break;
        *q = '\0';
        cells[n++] = cell_text(p);
        p = q + 1;
    }
    return n;
}

static void put_str(FILE *out, const char *s) { put_text(out, s, strlen(s)); }

/* One table row: the key, the middle columns as "header: value", the last column. */
static void put_row(FILE *out, char *const head[], char *const cell[], int n)
{
    fputs(".TP\n", out);
    put_str(out, cell[0]);
    fputc('\n', out);
    for (int j = 1; j < n - 1; j++) {
        fprintf(out, "%s\\fI", j > 1 ? "; " : "");
        put_str(out, head[j]);
        fputs("\\fR: ", out);
        put_str(out, cell[j]);
    }
    if (n > 2) fputs("\n.br\n", out);
    if (n > 1) put_str(out, cell[n - 1]);
    fputc('\n', out);
}

static void convert(FILE *out, char *md)
{
    char *head[MAN_COLS], *cell[MAN_COLS];
    int comment = 0, block = 0, para = 0, cols = 0;
    for (char *line = md, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (comment) {
            comment = !strstr(line, "-->");
        } else if (strncmp(line, "```", 3) == 0) {
            fputs((block = !block) ? ".PP\n.RS 4\n.nf\n" : ".fi\n.RE\n", out);
            para = 0;
        } else if (block) {
            if (line[0] == '.' || line[0] == '\'') fputs("\\&", out);
            for (const char *c = line; *c; c++) {
                if (*c == '\\') fputs("\\e", out);
                else if (*c == '-') fputs("\\-", out);
                else fputc(*c, out);
            }
            fputc('\n', out);
        } else if (strncmp(line, "<!--", 4) == 0) {
            comment = !strstr(line, "-->");
        } else if (strncmp(line, "# ", 2) == 0) {
            /* the title: .TH and NAME say it */
        } else if (strncmp(line, "## ", 3) == 0) {
            fputs(".SS \"", out);
            put_str(out, line + 3);
            fputs("\"\n", out);
            para = 0;
        } else if (line[0] == '|') {
            if (strncmp(line, "|---", 4) == 0) continue;
            if (cols == 0) { /* the header */
                cols = split_row(line, head);
                para = 0;
                continue;
            }
            int n = split_row(line, cell);
            put_row(out, head, cell, n < cols ? n : cols);
        } else if (line[0] == '\0') {
            para = 0;
            cols = 0; /* a table ends at a blank line */
        } else {
            if (!para) fputs(".PP\n", out);
            para = 1;
            put_str(out, line);
            fputc('\n', out);
        }
    }
}

void config_write_reference_man(FILE *out, const char *version, const char *datadir)
{
    char *md = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&md, &len);
    if (!mem) {
        perror("config_write_reference_man: open_memstream");
        return;
    }
    config_write_reference(mem);
    fclose(mem);
    fprintf(out, ".\\\" Generated by config_write_reference_man (src/config/config_man.c) from the\n"
                 ".\\\" reference in docs/config.md: libra config-reference --format man\n"
                 ".TH LIBRA.CFG 5 \"\" \"libra %s\" \"File Formats\"\n"
                 ".nh\n"
                 ".SH NAME\n"
                 "libra.cfg \\- the configuration file of a libra run\n"
                 ".SH SYNOPSIS\n"
                 ".B libra\n.I CONFIG\n.br\n"
                 ".B libra\n.B \\-\\-check\\-config\n.I CONFIG\n.br\n"
                 ".B libra\\-sim\n.I CONFIG\n"
                 ".SH DESCRIPTION\n", version);
    convert(out, md);
    fputs(".SH ENVIRONMENT\n"
          ".TP\n.B LIBRA_INPUTS\n"
          "The inputs directory relative paths are tried against after the config\n"
          "file's own directory (see \\fIPaths\\fR above).\n"
          ".SH FILES\n"
          ".TP\n",
          out);
    fprintf(out, ".I %s\n", datadir);
    fputs("The installed inputs: example configs (\\fIcalc\\-quick.cfg\\fR,\n"
          "\\fIemu\\-quick.cfg\\fR, ...), \\fIhardware/\\fR and \\fImodels/\\fR profiles and\n"
          "models, \\fIworkloads/\\fR presets, \\fIexperiments/\\fR, \\fIbench/\\fR and\n"
          "\\fItraces/\\fR.\n"
          ".SH SEE ALSO\n"
          ".BR libra (1),\n"
          ".BR libra\\-sim (1)\n",
          out);
    free(md);
}
