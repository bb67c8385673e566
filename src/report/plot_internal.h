/*
 * Internals of the charts (include/libra/plot.h), shared by their files:
 *   plot.c        the public functions: check the input, describe the chart, write it
 *   plot_axis.c   data ranges, padded axes, "nice" ticks, number formats
 *   plot_text.c   text with cairo's font API: sanitised, measured, fitted, aligned
 *   plot_frame.c  the layout and everything but the data: title, legend, grid, ticks,
 *                 axis labels
 *   plot_draw.c   the data (lines, bars) and their value labels
 *   plot_out.c    the PNG and SVG files (cairo surfaces streamed into libra/afile.h)
 *   plot_csv.c    the CSV file of the plotted data
 * tests/test_plot.c uses the tick chooser and the palette.
 *
 * Coordinates are cairo user units: pixels of the PNG, points of the SVG; y grows
 * downward.
 */
#ifndef LIBRA_REPORT_PLOT_INTERNAL_H
#define LIBRA_REPORT_PLOT_INTERNAL_H

#include <cairo.h>
#include <stddef.h>

#include "libra/plot.h"

#define PLOT_W 960
#define PLOT_H 600
#define PLOT_UPWARD (-1.5707963267948966) /* text angle reading upward, radians */

/* Series k is drawn in plot_palette[k % PLOT_PALETTE_N] (RGB 0..255). */
#define PLOT_PALETTE_N 8
extern const unsigned char plot_palette[PLOT_PALETTE_N][3];

/* Ticks covering [lo, hi] (finite, lo < hi) in about target (>= 1) intervals: *step is
 * 1, 2, 2.5 or 5 x 10^k (the smallest of those >= (hi - lo) / target), *first =
 * floor(lo / step) * step; the ticks are first + i * step for i = 0 .. count - 1, the
 * last one >= hi. Returns count, or -1 if the arguments are out of range or the range
 * cannot be represented (hi - lo overflows, a tick is not finite). */
int plot_nice_ticks(double lo, double hi, int target, double *first, double *step);

/* Finite values seen so far (any = 0: none). */
struct plot_range {
    double lo, hi;
    int any;
};
void plot_range_add(struct plot_range *g, double v);

/* An axis: lo and hi are the values at the frame's two ends; the ticks first + i * step
 * (i < nticks) all lie in [lo, hi]. */
struct plot_axis {
    double lo, hi, first, step;
    int nticks;
};

/* The axis over data range g (none: 0 .. 1; zero width: widened, see plot.h), padded by
 * pad_lo and pad_hi times its width below and above, with about target tick intervals.
 * 0, or -1 when the range is too wide to draw (err names the axis). */
int plot_axis_make(struct plot_axis *a, struct plot_range g, double pad_lo, double pad_hi,
                   int target, const char *name, char *err, size_t errlen);
/* Label of tick i: enough decimals to tell the axis's ticks apart. */
void plot_fmt_tick(char *buf, size_t n, const struct plot_axis *a, int i);
/* A value label: 3 significant digits (whole numbers from 100 on), trailing zeros
 * dropped, no exponent between 1e-3 and 1e9; "n/a" when not finite. */
void plot_fmt_value(char *buf, size_t n, double v);

/* What plot_lines / plot_bars were asked to draw. */
enum plot_kind { PLOT_LINES, PLOT_BARS };
struct plot_chart {
    enum plot_kind kind;
    struct plot_labels lb;
    int n_series;
    const struct plot_series *s;    /* lines: (n_series) */
    const char *const *labels;      /* bars: (n_series) or NULL; entries may be NULL */
    const char *const *groups;      /* bars: (n_groups) or NULL */
    int n_groups;
    const double *values;           /* bars: (n_groups, n_series) */
    struct plot_range xr, yr;       /* finite data (bars: yr includes 0; xr unused) */
};

/* Series k's label, or "series N" (1-based) in buf when it has none. */
const char *plot_series_label(const struct plot_chart *c, int k, char buf[32]);

/* ---- plot_text.c ---- */
enum { PLOT_TEXT_MAX = 200 }; /* longest text drawn, bytes */
/* s (NULL: "") with bytes outside printable ASCII as '?', cut to PLOT_TEXT_MAX - 1. */
void plot_text_clean(char buf[PLOT_TEXT_MAX], const char *s);
/* Sets the font: size in user units, bold or not. */
void plot_font(cairo_t *cr, double size, int bold);
/* Advance width of s in the current font. */
double plot_text_width(cairo_t *cr, const char *s);
/* s cleaned and cut to at most maxw wide (ending in "..."), into buf. */
const char *plot_text_fit(cairo_t *cr, char buf[PLOT_TEXT_MAX], const char *s, double maxw);
/* Draws s (cleaned, fitted to maxw) with its anchor at (x, y): ha = 0 left, 0.5
 * centre, 1 right; the anchor's y is the middle of the text's cap height. angle in
 * radians (-pi/2: reading upward). */
void plot_text(cairo_t *cr, double x, double y, const char *s, double maxw, double ha,
               double angle);

/* ---- plot_frame.c ---- */
/* The plot area (x0 < x1, y0 < y1, y0 on top) and its axes. */
struct plot_frame {
    double x0, y0, x1, y1;
    struct plot_axis x, y;
};
/* Lays the chart out (reserving right_room units right of the plot area and
 * value_room units above the highest bar) and draws the title, legend, grid, ticks
 * and axis labels. 0, or -1 (err) if an axis cannot be drawn. */
int plot_frame_draw(cairo_t *cr, const struct plot_chart *c, double right_room,
                    double value_room, struct plot_frame *f, char *err, size_t errlen);
/* The axis lines, drawn over the data. */
void plot_frame_axes(cairo_t *cr, const struct plot_frame *f);
double plot_px_x(const struct plot_frame *f, double v);
double plot_px_y(const struct plot_frame *f, double v);
/* Colour and dash pattern of series k. */
void plot_series_style(cairo_t *cr, int k, int dashed);

/* ---- plot_draw.c ---- */
/* The whole chart on cr (PLOT_W x PLOT_H units). 0, or -1 (err). */
int plot_draw(cairo_t *cr, const struct plot_chart *c, char *err, size_t errlen);

/* ---- plot_out.c, plot_csv.c ---- */
/* BASE.png and BASE.svg. */
int plot_write_images(const char *base, const struct plot_chart *c, char *err, size_t errlen);
/* BASE.csv. */
int plot_write_csv(const char *base, const struct plot_chart *c, char *err, size_t errlen);

#endif
