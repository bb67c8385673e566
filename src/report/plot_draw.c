/*
 * The data of a chart and its value labels (plot_internal.h), over the frame of
 * plot_frame.c:
 *   lines  one path per series (broken at non-finite points, a dot for a lone point),
 *          clipped to the plot area; the right end of every series (its finite
 *          point of the largest x) marked and its value written right of the plot
 *          at its height, in the series' colour (labels that would overlap are
 *          pushed apart vertically);
 *   bars   the middle 80 % of each group's slot split among its bars; every bar's
 *          value above it (below a negative one), turned to read upward when the
 *          number is wider than the bar; a non-finite value is "n/a" on the baseline.
 */
#include "report/plot_internal.h"

#include <math.h>
#include <stdlib.h>

#include "libra/log.h"

#define VALUE_SIZE 12.0
#define LABEL_GAP 15.0 /* least distance between two end labels' middles */

static int ok_point(const struct plot_series *s, int i)
{
    return i >= 0 && i < s->n && isfinite(s->x[i]) && isfinite(s->y[i]);
}

/* The series' right end: its finite point of the largest x (the last such one). */
static int last_point(const struct plot_series *s)
{
    int best = -1;
    for (int i = 0; i < s->n; i++)
        if (ok_point(s, i) && (best < 0 || s->x[i] >= s->x[best])) best = i;
    return best;
}

static void draw_series(cairo_t *cr, const struct plot_frame *f, const struct plot_series *s,
                        int k)
{
    plot_series_style(cr, k, 1);
    for (int i = 0; i < s->n; i++) {
        if (!ok_point(s, i)) continue;
        double x = plot_px_x(f, s->x[i]), y = plot_px_y(f, s->y[i]);
        if (ok_point(s, i - 1)) {
            cairo_line_to(cr, x, y);
        } else if (ok_point(s, i + 1)) {
            cairo_move_to(cr, x, y);
        } else { /* a lone point: a dot */
            cairo_stroke(cr);
            cairo_arc(cr, x, y, 2.5, 0, 2 * 3.14159265358979);
            cairo_fill(cr);
        }
    }
    cairo_stroke(cr);
}

struct end_label {
    double y;
    int k;
};

static int by_y(const void *a, const void *b)
{
    double d = ((const struct end_label *)a)->y - ((const struct end_label *)b)->y;
    return (d > 0) - (d < 0);
}

/* Marks and labels the last point of every series. */
static void end_labels(cairo_t *cr, const struct plot_chart *c, const struct plot_frame *f)
{
    struct end_label *l = xcalloc((size_t)c->n_series, sizeof *l);
    int n = 0;
    for (int k = 0; k < c->n_series; k++) {
        int i = last_point(&c->s[k]);
        if (i < 0) continue;
        plot_series_style(cr, k, 0);
        cairo_arc(cr, plot_px_x(f, c->s[k].x[i]), plot_px_y(f, c->s[k].y[i]), 3.5, 0,
                  2 * 3.14159265358979);
        cairo_fill(cr);
        l[n++] = (struct end_label){plot_px_y(f, c->s[k].y[i]), k};
    }
    qsort(l, (size_t)n, sizeof *l, by_y);
    for (int j = 1; j < n; j++) l[j].y = fmax(l[j].y, l[j - 1].y + LABEL_GAP);
    if (n > 0) l[n - 1].y = fmin(l[n - 1].y, f->y1);
    for (int j = n - 2; j >= 0; j--) l[j].y = fmin(l[j].y, l[j + 1].y - LABEL_GAP);
    plot_font(cr, VALUE_SIZE, 1);
    for (int j = 0; j < n; j++) {
        char buf[64];
        const struct plot_series *s = &c->s[l[j].k];
        plot_fmt_value(buf, sizeof buf, s->y[last_point(s)]);
        plot_series_style(cr, l[j].k, 0);
        plot_text(cr, f->x1 + 10, l[j].y, buf, PLOT_W, 0, 0);
    }
    free(l);
}

/* Width the lines' end labels need right of the plot. */
static double end_room(cairo_t *cr, const struct plot_chart *c)
{
    double w = 0;
    plot_font(cr, VALUE_SIZE, 1);
    for (int k = 0; k < c->n_series; k++) {
        int i = last_point(&c->s[k]);
        char buf[64];
        if (i < 0) continue;
        plot_fmt_value(buf, sizeof buf, c->s[k].y[i]);
        w = fmax(w, plot_text_width(cr, buf));
    }
    return w > 0 ? w + 18 : 8;
}

static int draw_lines(cairo_t *cr, const struct plot_chart *c, char *err, size_t errlen)
{
    struct plot_frame f;
    if (plot_frame_draw(cr, c, end_room(cr, c), 0, &f, err, errlen) != 0) return -1;
    cairo_save(cr);
    cairo_rectangle(cr, f.x0, f.y0, f.x1 - f.x0, f.y1 - f.y0);
    cairo_clip(cr);
    for (int k = 0; k < c->n_series; k++) draw_series(cr, &f, &c->s[k], k);
    cairo_restore(cr);
    plot_frame_axes(cr, &f);
    end_labels(cr, c, &f);
    return 0;
}

/* Bar k of group g spans [*xa, *xb] (whole units). */
static void bar_span(const struct plot_frame *f, const struct plot_chart *c, int g, int k,
                     double *xa, double *xb)
{
    double gw = (f->x1 - f->x0) / c->n_groups, bw = 0.8 * gw / c->n_series;
    double gap = bw >= 6 ? 2 : bw >= 3 ? 1 : 0;
    *xa = round(f->x0 + g * gw + 0.1 * gw + k * bw);
    *xb = fmax(*xa + 1, round(f->x0 + g * gw + 0.1 * gw + (k + 1) * bw) - gap);
}

/* Widest value label; *turn set when it is wider than a bar (estimated before the
 * layout from the widest the y tick labels can make the left margin). */
static double value_room(cairo_t *cr, const struct plot_chart *c, int *turn)
{
    size_t nv = (size_t)c->n_groups * (size_t)c->n_series;
    double w = 0, bw = 0.8 * (PLOT_W - 150.0) / c->n_groups / c->n_series;
    plot_font(cr, VALUE_SIZE, 0);
    for (size_t i = 0; i < nv; i++) {
        char buf[64];
        plot_fmt_value(buf, sizeof buf, c->values[i]);
        w = fmax(w, plot_text_width(cr, buf));
    }
    *turn = w > bw - 2;
    return *turn ? w + 8 : 2 * VALUE_SIZE;
}

static int draw_bars(cairo_t *cr, const struct plot_chart *c, char *err, size_t errlen)
{
    struct plot_frame f;
    int turn;
    if (plot_frame_draw(cr, c, 8, value_room(cr, c, &turn), &f, err, errlen) != 0) return -1;
    double y0 = round(plot_px_y(&f, 0));
    plot_font(cr, VALUE_SIZE, 0);
    for (int g = 0; g < c->n_groups; g++)
        for (int k = 0; k < c->n_series; k++) {
            double v = c->values[(size_t)g * (size_t)c->n_series + (size_t)k], xa, xb;
            char buf[64];
            bar_span(&f, c, g, k, &xa, &xb);
            plot_fmt_value(buf, sizeof buf, v);
            double mid = (xa + xb) / 2, yv = isfinite(v) ? round(plot_px_y(&f, v)) : y0;
            plot_series_style(cr, k, 0);
            cairo_rectangle(cr, xa, fmin(y0, yv), xb - xa, fabs(yv - y0));
            cairo_fill(cr);
            if (!isfinite(v)) cairo_set_source_rgb(cr, 0.55, 0.55, 0.55);
            else cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
            int below = isfinite(v) && v < 0;
            if (turn)
                plot_text(cr, mid, below ? yv + 4 : yv - 4, buf, PLOT_H, below ? 1 : 0,
                          PLOT_UPWARD);
            else
                plot_text(cr, mid, below ? yv + 9 : yv - 9, buf, PLOT_W, 0.5, 0);
        }
    plot_frame_axes(cr, &f);
    return 0;
}

int plot_draw(cairo_t *cr, const struct plot_chart *c, char *err, size_t errlen)
{
    return c->kind == PLOT_LINES ? draw_lines(cr, c, err, errlen)
                                 : draw_bars(cr, c, err, errlen);
}
