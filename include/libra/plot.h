/*
 * Charts for the experiment report (tools/experiments, libra-sim --report), drawn
 * with cairo. Every chart is three files beside each other, named by a base path:
 *
 *   BASE.png   960 x 600 pixels, antialiased, white background;
 *   BASE.svg   the same drawing as vector graphics (same size, in points);
 *   BASE.csv   the plotted data, one row per point or bar, under a header row whose
 *              columns are the series name and the two axis labels (with their units):
 *                lines: "<series_name>,<xlabel>,<ylabel>" then "label,x,y" per point,
 *                       in series order and the points' order;
 *                bars:  "<xlabel>,<series_name>,<ylabel>" then "group,series,value",
 *                       group-major.
 *              Numbers as "%.10g"; a non-finite number is an empty field; a field
 *              with a comma, quote or line break is quoted ("" for a quote).
 * Each file is written to a temporary beside it, fsync'd and renamed (libra/afile.h),
 * so a failed write never leaves a half file; files written before a failure stay.
 *
 * The drawing: the title on top, a legend row under it when there are several
 * series, then the plot: grid lines at "nice" ticks (1, 2, 2.5 or 5 x 10^k) with tick
 * labels, the axis labels, and value labels where a reader needs the number -- above
 * every bar (rotated when the bar is narrower than its number; "n/a" for a non-finite
 * value), and the last value of every line right of the plot, in the line's colour.
 * Axis ranges are padded beyond the data, so a line at the data's minimum or maximum
 * (e.g. 0 GPUs) is drawn inside the frame, never on it. Series k has palette colour
 * k and (lines) dash pattern k, so lines that coincide stay distinguishable.
 *
 * Input (every function returns 0, or -1 with a message in err; err may be NULL with
 * errlen 0):
 *   - errors (-1, nothing written): base NULL or empty; no series / groups; a series
 *     with n <= 0 or a NULL x or y; NULL values; a data range too wide to draw (its
 *     width overflows a double). A file that cannot be created, written or renamed,
 *     or a cairo failure, is -1 with a message naming the file.
 *   - non-finite values are never an error: a line breaks at a point whose x or y is
 *     not finite (a finite point with no finite neighbour is a dot) and such points
 *     do not count toward the axis ranges; a non-finite bar is no bar.
 *   - no finite point: an empty chart with axes 0 .. 1; all values equal: the axis is
 *     v +- |v|/2 (+-1 around 0).
 *   - NULL title / axis labels are left out of the drawing; a NULL series label is
 *     "series N" (1-based); text wider than its room is cut and ends in "...". Only
 *     printable ASCII is drawn, other bytes as '?' (the CSV keeps the bytes).
 */
#ifndef LIBRA_PLOT_H
#define LIBRA_PLOT_H

#include <stddef.h>

/* What a chart says in words. xlabel and ylabel name their unit, e.g.
 * "time (emulated s)"; for bars xlabel names the groups (e.g. "workload").
 * series_name names what the series are (e.g. "policy"); it heads the CSV's series
 * column ("series" when NULL). */
struct plot_labels {
    const char *title, *xlabel, *ylabel, *series_name;
};

/* One line of a line chart: n points (x[i], y[i]), drawn in the given order. */
struct plot_series {
    const char *label;
    const double *x, *y;
    int n;
};

/* Line chart of n_series series on shared axes (the y axis includes 0 when ymin_zero
 * is set); writes BASE.png, BASE.svg, BASE.csv. */
int plot_lines(const char *base, const struct plot_labels *lb, const struct plot_series *s,
               int n_series, int ymin_zero, char *err, size_t errlen);

/* Grouped bar chart: n_groups groups along x (group_labels under them; the array or
 * an entry may be NULL), each with n_series bars in the series' colours
 * (series_labels in the legend; may be NULL); values[g * n_series + k] is group g's
 * bar of series k. Bars grow from 0 (negative values hang below it). Writes
 * BASE.png, BASE.svg, BASE.csv. */
int plot_bars(const char *base, const struct plot_labels *lb, const char *const *group_labels,
              int n_groups, const char *const *series_labels, int n_series,
              const double *values, char *err, size_t errlen);

#endif
