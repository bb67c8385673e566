/*
 * A chart's data as BASE.csv (format in include/libra/plot.h): built in memory, then
 * written atomically (libra/afile.h). Fields are RFC 4180: quoted when they hold a
 * comma, a quote or a line break, quotes doubled.
 */
#define _POSIX_C_SOURCE 200809L
#include "report/plot_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/afile.h"
#include "libra/errmsg.h"
#include "libra/log.h"

static void field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void number(FILE *f, double v)
{
    if (isfinite(v)) fprintf(f, "%.10g", v);
}

/* The header row: three names, each with its fallback when NULL. */
static void header(FILE *f, const char *a, const char *a0, const char *b, const char *b0,
                   const char *y)
{
    field(f, a ? a : a0);
    fputc(',', f);
    field(f, b ? b : b0);
    fputc(',', f);
    field(f, y ? y : "y");
    fputc('\n', f);
}

static void lines_csv(FILE *f, const struct plot_chart *c)
{
    header(f, c->lb.series_name, "series", c->lb.xlabel, "x", c->lb.ylabel);
    for (int k = 0; k < c->n_series; k++) {
        char name[32];
        const char *label = plot_series_label(c, k, name);
        for (int i = 0; i < c->s[k].n; i++) {
            field(f, label);
            fputc(',', f);
            number(f, c->s[k].x[i]);
            fputc(',', f);
            number(f, c->s[k].y[i]);
            fputc('\n', f);
        }
    }
}

static void bars_csv(FILE *f, const struct plot_chart *c)
{
    header(f, c->lb.xlabel, "group", c->lb.series_name, "series", c->lb.ylabel);
    for (int g = 0; g < c->n_groups; g++)
        for (int k = 0; k < c->n_series; k++) {
            char name[32], group[32];
            snprintf(group, sizeof group, "group %d", g + 1);
            field(f, c->groups && c->groups[g] ? c->groups[g] : group);
            fputc(',', f);
            field(f, plot_series_label(c, k, name));
            fputc(',', f);
            number(f, c->values[(size_t)g * (size_t)c->n_series + (size_t)k]);
            fputc('\n', f);
        }
}

int plot_write_csv(const char *base, const struct plot_chart *c, char *err, size_t errlen)
{
    size_t n = strlen(base) + 8, len = 0;
    char *path = xmalloc(n), *buf = NULL;
    snprintf(path, n, "%s.csv", base);
    FILE *f = open_memstream(&buf, &len);
    if (!f) FATAL("%s: open_memstream failed (out of memory)", path);
    if (c->kind == PLOT_LINES) lines_csv(f, c);
    else bars_csv(f, c);
    if (fclose(f) != 0) FATAL("%s: building the CSV in memory failed (out of memory)", path);
    int rc = afile_put(path, buf, len, err, errlen);
    free(buf);
    free(path);
    return rc;
}
