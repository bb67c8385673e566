/*
 * Internals of src/report/plot.c exposed for tests/test_plot.c: the series palette
 * and the "nice" tick chooser.
 */
#ifndef LIBRA_REPORT_PLOT_INTERNAL_H
#define LIBRA_REPORT_PLOT_INTERNAL_H

/* Series k is drawn in plot_palette[k % PLOT_PALETTE_N] (RGB). */
#define PLOT_PALETTE_N 8
extern const unsigned char plot_palette[PLOT_PALETTE_N][3];

/* Ticks covering [lo, hi] (finite, lo < hi) in about target (>= 1) intervals: *step is
 * 1, 2, 2.5 or 5 x 10^k (the smallest of those >= (hi - lo) / target), *first =
 * floor(lo / step) * step; the ticks are first + i * step for i = 0 .. count - 1, the
 * last one >= hi. Returns count, or -1 if the arguments are out of range or the range
 * cannot be represented (hi - lo overflows, a tick is not finite). */
int plot_nice_ticks(double lo, double hi, int target, double *first, double *step);

#endif
