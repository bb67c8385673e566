/*
 * The charts' public functions (include/libra/plot.h): check the input, describe the
 * chart (struct plot_chart, with its finite data ranges), then write BASE.png and
 * BASE.svg (plot_out.c) and BASE.csv (plot_csv.c). The images are drawn before their
 * files are opened, so a chart that cannot be drawn (a range too wide) writes nothing.
 */
#include "libra/plot.h"

#include <math.h>
#include <stdio.h>

#include "libra/errmsg.h"
#include "report/plot_internal.h"

const unsigned char plot_palette[PLOT_PALETTE_N][3] = {
    {31, 119, 180}, {255, 127, 14}, {44, 160, 44},  {214, 39, 40},
    {148, 103, 189}, {140, 86, 75}, {227, 119, 194}, {23, 190, 207},
};

const char *plot_series_label(const struct plot_chart *c, int k, char buf[32])
{
    const char *l = c->kind == PLOT_LINES ? c->s[k].label : c->labels ? c->labels[k] : NULL;
    if (l) return l;
    snprintf(buf, 32, "series %d", k + 1);
    return buf;
}

static int write_chart(const char *base, const struct plot_chart *c, char *err, size_t errlen)
{
    if (plot_write_images(base, c, err, errlen) != 0) return -1;
    return plot_write_csv(base, c, err, errlen);
}

int plot_lines(const char *base, const struct plot_labels *lb, const struct plot_series *s,
               int n_series, int ymin_zero, char *err, size_t errlen)
{
    if (!base || !*base || !s || n_series <= 0) {
        errmsg_set(err, errlen, "plot_lines %s: no path or no series (n_series %d)",
                   base ? base : "NULL", n_series);
        return -1;
    }
    struct plot_chart c = {.kind = PLOT_LINES, .n_series = n_series, .s = s};
    if (lb) c.lb = *lb;
    if (ymin_zero) plot_range_add(&c.yr, 0);
    for (int k = 0; k < n_series; k++) {
        if (s[k].n <= 0 || !s[k].x || !s[k].y) {
            errmsg_set(err, errlen, "plot_lines %s: series %d (%s) has no data (n %d)", base, k,
                       s[k].label ? s[k].label : "unnamed", s[k].n);
            return -1;
        }
        for (int i = 0; i < s[k].n; i++) {
            if (!isfinite(s[k].x[i]) || !isfinite(s[k].y[i])) continue;
            plot_range_add(&c.xr, s[k].x[i]);
            plot_range_add(&c.yr, s[k].y[i]);
        }
    }
    return write_chart(base, &c, err, errlen);
}

int plot_bars(const char *base, const struct plot_labels *lb, const char *const *group_labels,
              int n_groups, const char *const *series_labels, int n_series,
              const double *values, char *err, size_t errlen)
{
    if (!base || !*base || n_groups <= 0 || n_series <= 0 || !values) {
        errmsg_set(err, errlen, "plot_bars %s: no path or no data (%d groups, %d series%s)",
                   base ? base : "NULL", n_groups, n_series, values ? "" : ", values NULL");
        return -1;
    }
    struct plot_chart c = {.kind = PLOT_BARS, .n_series = n_series, .labels = series_labels,
                           .groups = group_labels, .n_groups = n_groups, .values = values};
    if (lb) c.lb = *lb;
    plot_range_add(&c.yr, 0);
    for (size_t i = 0; i < (size_t)n_groups * (size_t)n_series; i++)
        plot_range_add(&c.yr, values[i]);
    if (c.yr.hi == 0 && c.yr.lo == 0) c.yr.hi = 1; /* all zero: the axis still starts at 0 */
    return write_chart(base, &c, err, errlen);
}
