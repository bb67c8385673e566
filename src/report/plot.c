/*
 * Line and grouped bar charts as PNG files (include/libra/plot.h), drawn on a
 * CHART_W x CHART_H raster (src/report/png.h) with the 5x7 font (src/report/font.h).
 *
 * Layout, outside in: title (font x2) on top; the legend in a column right of the plot
 * area (so it never covers data; labels clipped to LEGEND_CHARS); y-axis label
 * (rotated) and tick labels on the left; x tick labels (or group labels) and the x-axis
 * label below. Inside the plot area: light grid lines at the ticks, then the data, then
 * the axis lines. Axis ranges are the data range rounded out to nice ticks
 * (plot_nice_ticks), so every drawn point lies inside the plot area.
 */
#include "libra/plot.h"
#include "libra/errmsg.h"

#include "libra/log.h"
#include "report/font.h"
#include "report/plot_internal.h"
#include "report/png.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHART_W 800
#define CHART_H 500
#define LEGEND_CHARS 24 /* longest legend label drawn, characters */
#define TEXT_MAX 160    /* longest string drawn (> CHART_W / FONT_ADV) */
#define TICK_PX 90      /* about one tick per this many pixels */

const unsigned char plot_palette[PLOT_PALETTE_N][3] = {
    {31, 119, 180}, {255, 127, 14}, {44, 160, 44},  {214, 39, 40},
    {148, 103, 189}, {140, 86, 75}, {227, 119, 194}, {23, 190, 207},
};
static const unsigned char INK[3] = {30, 30, 30}, GRID[3] = {228, 228, 228};

struct axis {
    double lo, hi, step; /* lo, hi: the first and last tick */
    int nticks;
};

struct chart {
    struct raster r;
    int x0, y0, x1, y1; /* plot area, inclusive; y0 is the top row */
    struct axis x, y;
};

/* Finite values seen so far (any = 0: none). */
struct range {
    double lo, hi;
    int any;
};

int plot_nice_ticks(double lo, double hi, int target, double *first, double *step)
{
    if (!isfinite(lo) || !isfinite(hi) || !(lo < hi) || target < 1) return -1;
    double raw = (hi - lo) / target;
    if (!isfinite(raw) || raw <= 0) return -1;
    double mag = pow(10.0, floor(log10(raw))), norm = raw / mag;
    /* 1e-9 slack: raw = 0.2 must give step 0.2, not 0.25 from rounding noise. */
    double m = norm <= 1 + 1e-9 ? 1 : norm <= 2 + 1e-9 ? 2 : norm <= 2.5 + 1e-9 ? 2.5
             : norm <= 5 + 1e-9 ? 5 : 10;
    double s = m * mag, a = floor(lo / s + 1e-9), b = ceil(hi / s - 1e-9);
    if (!isfinite(a * s) || !isfinite(b * s) || b - a < 1 || b - a > 4.0 * target + 4)
        return -1;
    *first = a * s;
    *step = s;
    return (int)(b - a) + 1;
}

static void range_add(struct range *g, double v)
{
    if (!isfinite(v)) return;
    if (!g->any) g->lo = g->hi = v;
    g->lo = fmin(g->lo, v);
    g->hi = fmax(g->hi, v);
    g->any = 1;
}

/* Axis over range g with about `pixels / TICK_PX` intervals: no values -> [0, 1]; a zero
 * (or negligible) width is widened to +-1 around 0, else +-|v|/2 around v. */
static int axis_make(struct axis *a, struct range g, int pixels, const char *name, char *err,
                     size_t errlen)
{
    double lo = g.any ? g.lo : 0, hi = g.any ? g.hi : 1;
    if (hi - lo <= 1e-12 * fmax(fabs(lo), fabs(hi))) {
        double mid = 0.5 * lo + 0.5 * hi, d = mid == 0 ? 1 : fabs(mid) / 2;
        lo = mid - d;
        hi = mid + d;
    }
    int target = pixels / TICK_PX < 2 ? 2 : pixels / TICK_PX;
    a->nticks = plot_nice_ticks(lo, hi, target, &a->lo, &a->step);
    if (a->nticks < 0) {
        errmsg_set(err, errlen, "%s values span [%g, %g], too wide to draw", name, lo, hi);
        return -1;
    }
    a->hi = a->lo + (a->nticks - 1) * a->step;
    return 0;
}

/* Label of tick i: enough decimals to tell ticks apart; %g on axes reaching 1e6 or with
 * steps under 1e-4 (the same format for every tick of an axis). */
static void fmt_tick(char *buf, size_t n, const struct axis *a, int i)
{
    double v = a->lo + i * a->step, step = a->step;
    if (fabs(v) < step * 1e-6) v = 0; /* no "-0" or 1e-17 */
    if (fmax(fabs(a->lo), fabs(a->hi)) >= 1e6 || step < 1e-4) {
        snprintf(buf, n, "%.4g", v);
        return;
    }
    int d = (int)ceil(-log10(step) - 1e-9);
    if (d < 0) d = 0;
    if (fabs(step * pow(10, d) - round(step * pow(10, d))) > 1e-6) d++; /* 2.5, 0.25 */
    snprintf(buf, n, "%.*f", d, v);
}

/* s cut to at most maxw pixels at scale into buf[TEXT_MAX], ending in ".." when cut;
 * returns buf. */
static const char *fit(char *buf, const char *s, int maxw, int scale)
{
    size_t n = s ? strlen(s) : 0, cap = maxw > 0 ? (size_t)(maxw / (FONT_ADV * scale)) : 0;
    if (cap > TEXT_MAX - 1) cap = TEXT_MAX - 1;
    int cut = n > cap;
    if (cut) n = cap;
    if (n) memcpy(buf, s, n);
    if (cut && n >= 3) memcpy(buf + n - 2, "..", 2);
    buf[n] = '\0';
    return buf;
}

/* Text fitted to maxw, with x its left edge (align 0), centre (1) or right edge (2). */
static void text(struct raster *r, int x, int y, const char *s, int scale, int maxw, int align)
{
    char buf[TEXT_MAX];
    fit(buf, s, maxw, scale);
    font_draw(r, x - align * font_text_width(buf, scale) / 2, y, buf, scale, INK);
}

/* Data -> pixel; values are clamped far outside the raster before the int conversion. */
static int to_px(double v)
{
    return v < -1e6 ? -1000000 : v > 1e6 ? 1000000 : (int)lround(v);
}
static int px_x(const struct chart *c, double v)
{
    return c->x0 + to_px((v - c->x.lo) / (c->x.hi - c->x.lo) * (c->x1 - c->x0));
}
static int px_y(const struct chart *c, double v)
{
    return c->y1 - to_px((v - c->y.lo) / (c->y.hi - c->y.lo) * (c->y1 - c->y0));
}

static const char *series_label(char buf[32], const char *label, int k)
{
    if (label) return label;
    snprintf(buf, 32, "series %d", k + 1);
    return buf;
}

/* Raster, layout, y axis (and the x axis when xr is set): title, axis labels, tick labels
 * and grid. legend_chars sizes the legend column. */
static int chart_begin(struct chart *c, const char *title, const char *xlabel,
                       const char *ylabel, int legend_chars, const struct range *xr,
                       struct range yr, char *err, size_t errlen)
{
    char buf[TEXT_MAX];
    memset(c, 0, sizeof *c);
    c->y0 = title ? 44 : 16;
    c->y1 = CHART_H - 1 - (xlabel ? 42 : 26);
    if (axis_make(&c->y, yr, c->y1 - c->y0, "y", err, errlen) != 0) return -1;
    int ylw = 0;
    for (int i = 0; i < c->y.nticks; i++) {
        fmt_tick(buf, sizeof buf, &c->y, i);
        int w = font_text_width(buf, 1);
        ylw = w > ylw ? w : ylw;
    }
    c->x0 = 10 + (ylabel ? FONT_H + 10 : 0) + ylw + 8;
    c->x1 = CHART_W - 1 - 16 - (FONT_ADV * legend_chars + 24);
    if (xr && axis_make(&c->x, *xr, c->x1 - c->x0, "x", err, errlen) != 0) return -1;

    raster_init(&c->r, CHART_W, CHART_H);
    text(&c->r, CHART_W / 2, 12, title, 2, CHART_W - 20, 1);
    text(&c->r, (c->x0 + c->x1) / 2, c->y1 + 26, xlabel, 1, CHART_W - 20, 1);
    font_draw_up(&c->r, 10, (c->y0 + c->y1) / 2 + font_text_width(fit(buf, ylabel,
                 c->y1 - c->y0, 1), 1) / 2, buf, 1, INK);
    for (int i = 0; i < c->y.nticks; i++) {
        double v = c->y.lo + i * c->y.step;
        int y = px_y(c, v);
        if (i > 0) raster_fill(&c->r, c->x0 + 1, y, c->x1, y, GRID);
        raster_fill(&c->r, c->x0 - 4, y, c->x0 - 1, y, INK);
        fmt_tick(buf, sizeof buf, &c->y, i);
        text(&c->r, c->x0 - 7, y - FONT_H / 2, buf, 1, c->x0, 2);
    }
    for (int i = 0; xr && i < c->x.nticks; i++) {
        double v = c->x.lo + i * c->x.step;
        int x = px_x(c, v);
        if (i > 0) raster_fill(&c->r, x, c->y0, x, c->y1 - 1, GRID);
        raster_fill(&c->r, x, c->y1 + 1, x, c->y1 + 4, INK);
        fmt_tick(buf, sizeof buf, &c->x, i);
        text(&c->r, x, c->y1 + 8, buf, 1, TICK_PX, 1);
    }
    return 0;
}

/* Axis lines (over the data), the zero line if the y range crosses 0, and the legend;
 * then the file. bars selects square swatches instead of line ones. */
static int chart_end(struct chart *c, const char *path, const char *const *labels, int n,
                     int bars, char *err, size_t errlen)
{
    int yz = px_y(c, 0);
    if (c->y.lo < 0 && c->y.hi > 0) raster_fill(&c->r, c->x0, yz, c->x1, yz, INK);
    raster_fill(&c->r, c->x0, c->y0, c->x0, c->y1, INK);
    raster_fill(&c->r, c->x0, c->y1, c->x1, c->y1, INK);
    int lx = c->x1 + 16, fits = (c->y1 - c->y0) / 16;
    for (int k = 0; k < n; k++) {
        int y = c->y0 + 16 * k;
        char buf[32], more[32];
        if (k == fits - 1 && n > fits) {
            snprintf(more, sizeof more, "(+%d more)", n - k);
            text(&c->r, lx, y, more, 1, LEGEND_CHARS * FONT_ADV, 0);
            break;
        }
        const unsigned char *col = plot_palette[k % PLOT_PALETTE_N];
        if (bars) raster_fill(&c->r, lx, y - 1, lx + 9, y + 8, col);
        else raster_fill(&c->r, lx - 2, y + 2, lx + 11, y + 4, col);
        text(&c->r, lx + 18, y, series_label(buf, labels[k], k), 1, LEGEND_CHARS * FONT_ADV, 0);
    }
    int rc = png_write_rgb(path, c->r.w, c->r.h, c->r.px, err, errlen);
    raster_free(&c->r);
    return rc;
}

/* Legend column width in characters for these labels (NULL ones are "series N"). */
static int legend_chars(const char *const *labels, int n)
{
    int w = 0;
    for (int k = 0; k < n; k++) {
        int len = labels[k] ? (int)strlen(labels[k]) : 10;
        w = len > w ? len : w;
    }
    return w > LEGEND_CHARS ? LEGEND_CHARS : w;
}

/* A 2-pixel-wide segment (Bresenham, each step a 2x2 block). */
static void thick_line(struct raster *r, int xa, int ya, int xb, int yb,
                       const unsigned char rgb[3])
{
    int dx = abs(xb - xa), sx = xa < xb ? 1 : -1, dy = -abs(yb - ya), sy = ya < yb ? 1 : -1;
    for (int e = dx + dy;;) {
        raster_fill(r, xa, ya, xa + 1, ya + 1, rgb);
        if (xa == xb && ya == yb) break;
        int e2 = 2 * e;
        if (e2 >= dy) {
            e += dy;
            xa += sx;
        }
        if (e2 <= dx) {
            e += dx;
            ya += sy;
        }
    }
}

static int ok_point(const struct plot_series *s, int i)
{
    return i >= 0 && i < s->n && isfinite(s->x[i]) && isfinite(s->y[i]);
}

int plot_lines(const char *path, const char *title, const char *xlabel, const char *ylabel,
               const struct plot_series *s, int n_series, int ymin_zero, char *err,
               size_t errlen)
{
    if (!path || !*path || !s || n_series <= 0) {
        errmsg_set(err, errlen, "plot_lines %s: no path or no series (n_series %d)",
                   path ? path : "NULL", n_series);
        return -1;
    }
    struct range xr = {0}, yr = {0};
    if (ymin_zero) range_add(&yr, 0);
    const char **labels = xmalloc(sizeof *labels * (size_t)n_series);
    for (int k = 0; k < n_series; k++) {
        labels[k] = s[k].label;
        if (s[k].n <= 0 || !s[k].x || !s[k].y) {
            errmsg_set(err, errlen, "plot_lines %s: series %d (%s) has no data (n %d)", path,
                       k, s[k].label ? s[k].label : "unnamed", s[k].n);
            free(labels);
            return -1;
        }
        for (int i = 0; i < s[k].n; i++) {
            if (!ok_point(&s[k], i)) continue;
            range_add(&xr, s[k].x[i]);
            range_add(&yr, s[k].y[i]);
        }
    }
    struct chart c;
    if (chart_begin(&c, title, xlabel, ylabel, legend_chars(labels, n_series), &xr, yr, err,
                    errlen) != 0) {
        free(labels);
        return -1;
    }
    for (int k = 0; k < n_series; k++) {
        const unsigned char *col = plot_palette[k % PLOT_PALETTE_N];
        for (int i = 0; i < s[k].n; i++) {
            if (!ok_point(&s[k], i)) continue;
            int x = px_x(&c, s[k].x[i]), y = px_y(&c, s[k].y[i]);
            if (ok_point(&s[k], i - 1))
                thick_line(&c.r, px_x(&c, s[k].x[i - 1]), px_y(&c, s[k].y[i - 1]), x, y, col);
            else if (!ok_point(&s[k], i + 1)) /* isolated point: a dot */
                raster_fill(&c.r, x - 1, y - 1, x + 2, y + 2, col);
        }
    }
    int rc = chart_end(&c, path, labels, n_series, 0, err, errlen);
    free(labels);
    return rc;
}

int plot_bars(const char *path, const char *title, const char *ylabel,
              const char *const *group_labels, int n_groups, const char *const *series_labels,
              int n_series, const double *values, char *err, size_t errlen)
{
    if (!path || !*path || n_groups <= 0 || n_series <= 0 || !values) {
        errmsg_set(err, errlen, "plot_bars %s: no path or no data (%d groups, %d series%s)",
                   path ? path : "NULL", n_groups, n_series, values ? "" : ", values NULL");
        return -1;
    }
    size_t nv = (size_t)n_groups * (size_t)n_series;
    struct range yr = {0};
    range_add(&yr, 0);
    for (size_t i = 0; i < nv; i++) range_add(&yr, values[i]);
    if (yr.hi == 0 && yr.lo == 0) yr.hi = 1; /* all zero: the axis still starts at 0 */
    const char **labels = xcalloc((size_t)n_series, sizeof *labels);
    for (int k = 0; series_labels && k < n_series; k++) labels[k] = series_labels[k];
    struct chart c;
    if (chart_begin(&c, title, NULL, ylabel, legend_chars(labels, n_series), NULL, yr, err,
                    errlen) != 0) {
        free(labels);
        return -1;
    }
    /* Bars fill the middle 80% of each group's slot, a 1-2 px gap between them. */
    double gw = (double)(c.x1 - c.x0) / n_groups, bw = 0.8 * gw / n_series;
    int gap = bw >= 6 ? 2 : bw >= 3 ? 1 : 0, yz = px_y(&c, 0);
    for (int g = 0; g < n_groups; g++) {
        for (int k = 0; k < n_series; k++) {
            double v = values[(size_t)g * (size_t)n_series + (size_t)k];
            int xa = c.x0 + to_px(g * gw + 0.1 * gw + k * bw);
            int xb = c.x0 + to_px(g * gw + 0.1 * gw + (k + 1) * bw) - gap;
            int yv = px_y(&c, isfinite(v) ? v : 0);
            if (yv != yz) raster_fill(&c.r, xa, yz, xb < xa ? xa : xb, yv,
                                      plot_palette[k % PLOT_PALETTE_N]);
        }
        if (group_labels)
            text(&c.r, c.x0 + to_px((g + 0.5) * gw), c.y1 + 8, group_labels[g], 1,
                 (int)gw - 4, 1);
    }
    int rc = chart_end(&c, path, labels, n_series, 1, err, errlen);
    free(labels);
    return rc;
}
