/*
 * The layout of a chart and everything in it but the data (plot_internal.h), outside
 * in: the title on top; under it the legend, one row or a few centred rows of swatch +
 * label (when there are several series, so it never covers data); the y-axis label
 * (reading upward) and tick labels on the left; tick labels (or the bar groups'
 * labels) and the x-axis label below; room on the right for the lines' last values.
 * Inside the plot area: light grid lines at the ticks, and a zero line when the data
 * has values on both sides of 0. The axes are padded (lines: a
 * few per cent of the data's width on every side; bars: room for the value labels
 * above the bars, and below them when some are negative), so no data lies on the
 * frame.
 */
#include "report/plot_internal.h"

#include <math.h>
#include <stdio.h>

#define MARGIN 16.0
#define TITLE_SIZE 19.0
#define LABEL_SIZE 14.0  /* axis labels, legend */
#define TICK_SIZE 12.5
#define LEGEND_ROW 22.0
#define LEGEND_ROWS 3    /* more series than fit: "(+N more)" */
#define LEGEND_LABEL 240.0 /* widest legend label, units */
#define LINE_PAD 0.05    /* lines: padding on each side, fraction of the data's width */

static const double INK = 0.15, GRID = 0.88;

void plot_series_style(cairo_t *cr, int k, int dashed)
{
    const unsigned char *c = plot_palette[k % PLOT_PALETTE_N];
    cairo_set_source_rgb(cr, c[0] / 255.0, c[1] / 255.0, c[2] / 255.0);
    static const double dash[3][2] = {{0, 0}, {9, 4}, {2.5, 3}};
    int d = dashed ? k % 3 : 0;
    cairo_set_dash(cr, dash[d], d ? 2 : 0, 0);
    cairo_set_line_width(cr, 2.25);
}

double plot_px_x(const struct plot_frame *f, double v)
{
    return f->x0 + (v - f->x.lo) / (f->x.hi - f->x.lo) * (f->x1 - f->x0);
}

double plot_px_y(const struct plot_frame *f, double v)
{
    return f->y1 - (v - f->y.lo) / (f->y.hi - f->y.lo) * (f->y1 - f->y0);
}

/* The legend's swatch of series k at (x, y) (y: the row's middle); its width. */
static double swatch(cairo_t *cr, const struct plot_chart *c, int k, double x, double y,
                     int draw)
{
    double w = c->kind == PLOT_BARS ? 12 : 28;
    if (!draw) return w;
    cairo_save(cr);
    plot_series_style(cr, k, c->kind == PLOT_LINES);
    if (c->kind == PLOT_BARS) {
        cairo_rectangle(cr, x, y - 6, 12, 12);
        cairo_fill(cr);
    } else {
        cairo_move_to(cr, x, y);
        cairo_line_to(cr, x + w, y);
        cairo_stroke(cr);
    }
    cairo_restore(cr);
    return w;
}

/* Lays out (draw = 0) or draws the legend rows from y; returns the height used. */
static double legend(cairo_t *cr, const struct plot_chart *c, double y, int draw)
{
    if (c->n_series < 2) return 0;
    plot_font(cr, LABEL_SIZE, 0);
    double avail = PLOT_W - 2 * MARGIN, row_w = 0;
    int row = 0, first = 0;
    for (int k = 0; k <= c->n_series; k++) {
        char buf[PLOT_TEXT_MAX], name[32];
        double w = 0;
        if (k < c->n_series)
            w = swatch(cr, c, k, 0, 0, 0) + 6 +
                plot_text_width(cr, plot_text_fit(cr, buf, plot_series_label(c, k, name),
                                                  LEGEND_LABEL)) + 22;
        if (k == c->n_series || (row_w + w > avail && k > first)) {
            /* Row [first, k) is complete: centre it. */
            double x = (PLOT_W - row_w + 22) / 2, ym = y + row * LEGEND_ROW + LEGEND_ROW / 2;
            int last_row = row == LEGEND_ROWS - 1 && k < c->n_series;
            for (int j = first; draw && j < k; j++) {
                if (last_row && j == k - 1) {
                    char more[32];
                    snprintf(more, sizeof more, "(+%d more)", c->n_series - j);
                    cairo_set_source_rgb(cr, INK, INK, INK);
                    plot_text(cr, x, ym, more, LEGEND_LABEL, 0, 0);
                    break;
                }
                x += swatch(cr, c, j, x, ym, 1) + 6;
                cairo_set_source_rgb(cr, INK, INK, INK);
                plot_text(cr, x, ym, plot_series_label(c, j, name), LEGEND_LABEL, 0, 0);
                x += plot_text_width(cr, plot_text_fit(cr, buf, plot_series_label(c, j, name),
                                                       LEGEND_LABEL)) + 22;
            }
            row++;
            if (k == c->n_series || last_row) break;
            first = k;
            row_w = 0;
        }
        row_w += w;
    }
    return row * LEGEND_ROW + 6;
}

/* Padding fraction that leaves room px units free above (and, both set, below) the
 * data on an axis of length len px. */
static double room_pad(double room, double len, int both)
{
    double free_len = len - (both ? 2 : 1) * room;
    return free_len > len / 4 ? room / free_len : 3.0;
}

static double widest_tick(cairo_t *cr, const struct plot_axis *a)
{
    double w = 0;
    for (int i = 0; i < a->nticks; i++) {
        char buf[64];
        plot_fmt_tick(buf, sizeof buf, a, i);
        w = fmax(w, plot_text_width(cr, buf));
    }
    return w;
}

static void grid_and_ticks(cairo_t *cr, const struct plot_frame *f, const struct plot_chart *c)
{
    char buf[64];
    cairo_set_line_width(cr, 1);
    for (int i = 0; i < f->y.nticks; i++) {
        double y = round(plot_px_y(f, f->y.first + i * f->y.step)) + 0.5;
        cairo_set_source_rgb(cr, GRID, GRID, GRID);
        cairo_move_to(cr, f->x0, y);
        cairo_line_to(cr, f->x1, y);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, INK, INK, INK);
        cairo_move_to(cr, f->x0 - 5, y);
        cairo_line_to(cr, f->x0, y);
        cairo_stroke(cr);
        plot_fmt_tick(buf, sizeof buf, &f->y, i);
        plot_text(cr, f->x0 - 8, y, buf, f->x0, 1, 0);
    }
    for (int i = 0; c->kind == PLOT_LINES && i < f->x.nticks; i++) {
        double x = round(plot_px_x(f, f->x.first + i * f->x.step)) + 0.5;
        cairo_set_source_rgb(cr, GRID, GRID, GRID);
        cairo_move_to(cr, x, f->y0);
        cairo_line_to(cr, x, f->y1);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, INK, INK, INK);
        cairo_move_to(cr, x, f->y1);
        cairo_line_to(cr, x, f->y1 + 5);
        cairo_stroke(cr);
        plot_fmt_tick(buf, sizeof buf, &f->x, i);
        plot_text(cr, x, f->y1 + 16, buf, 120, 0.5, 0);
    }
    double gw = (f->x1 - f->x0) / c->n_groups;
    plot_font(cr, LABEL_SIZE, 0);
    for (int g = 0; c->kind == PLOT_BARS && c->groups && g < c->n_groups; g++)
        plot_text(cr, f->x0 + (g + 0.5) * gw, f->y1 + 16, c->groups[g], gw - 6, 0.5, 0);
}

int plot_frame_draw(cairo_t *cr, const struct plot_chart *c, double right_room,
                    double value_room, struct plot_frame *f, char *err, size_t errlen)
{
    double y = MARGIN;
    if (c->lb.title) y += 32;
    double legend_y = y;
    y += legend(cr, c, legend_y, 0);
    f->y0 = y + 8;
    f->y1 = PLOT_H - MARGIN - (c->lb.xlabel ? 28 : 0) - 30;
    double h = f->y1 - f->y0, pl = LINE_PAD, ph = LINE_PAD;
    if (c->kind == PLOT_BARS) {
        int neg = c->yr.lo < 0;
        ph = room_pad(value_room, h, neg);
        pl = neg ? ph : 0;
    }
    if (plot_axis_make(&f->y, c->yr, pl, ph, (int)(h / 70), "y", err, errlen) != 0) return -1;
    plot_font(cr, TICK_SIZE, 0);
    f->x0 = MARGIN + (c->lb.ylabel ? 26 : 0) + widest_tick(cr, &f->y) + 12;
    f->x1 = PLOT_W - MARGIN - right_room;
    if (c->kind == PLOT_LINES &&
        plot_axis_make(&f->x, c->xr, LINE_PAD / 2, LINE_PAD / 2, (int)((f->x1 - f->x0) / 110),
                       "x", err, errlen) != 0)
        return -1;

    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_set_source_rgb(cr, INK, INK, INK);
    plot_font(cr, TITLE_SIZE, 1);
    if (c->lb.title) plot_text(cr, PLOT_W / 2.0, MARGIN + 12, c->lb.title, PLOT_W - 2 * MARGIN,
                               0.5, 0);
    legend(cr, c, legend_y, 1);
    cairo_set_source_rgb(cr, INK, INK, INK);
    plot_font(cr, LABEL_SIZE, 0);
    double xmid = (f->x0 + f->x1) / 2;
    if (c->lb.xlabel)
        plot_text(cr, xmid, PLOT_H - MARGIN - 8, c->lb.xlabel,
                  2 * fmin(xmid - MARGIN, PLOT_W - MARGIN - xmid), 0.5, 0);
    if (c->lb.ylabel)
        plot_text(cr, MARGIN + 8, (f->y0 + f->y1) / 2, c->lb.ylabel, h, 0.5, PLOT_UPWARD);
    plot_font(cr, TICK_SIZE, 0);
    grid_and_ticks(cr, f, c);
    if (c->yr.lo < 0 && c->yr.hi > 0) { /* the zero line, under the data */
        double z = round(plot_px_y(f, 0)) + 0.5;
        cairo_set_source_rgb(cr, INK, INK, INK);
        cairo_move_to(cr, f->x0, z);
        cairo_line_to(cr, f->x1, z);
        cairo_stroke(cr);
    }
    return 0;
}

void plot_frame_axes(cairo_t *cr, const struct plot_frame *f)
{
    cairo_set_source_rgb(cr, INK, INK, INK);
    cairo_set_line_width(cr, 1);
    cairo_set_dash(cr, NULL, 0, 0);
    double l = round(f->x0) - 0.5, b = round(f->y1) + 0.5;
    cairo_move_to(cr, l, f->y0);
    cairo_line_to(cr, l, b);
    cairo_line_to(cr, f->x1, b);
    cairo_stroke(cr);
}
