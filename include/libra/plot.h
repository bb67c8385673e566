/*
 * Charts as PNG files, for the experiment report (tools/experiments): no plotting
 * package needed, only zlib (which HDF5 already brings).
 *
 * A chart is drawn on an RGB raster (800 x 500 pixels, white background):
 * a title on top, axes with "nice" tick values (1, 2, 2.5 or 5 x 10^k) labelled with
 * a built-in bitmap font, axis labels, and a legend naming every series in its colour
 * (a fixed palette of distinguishable colours, cycled). The file is an 8-bit RGB PNG
 * (IHDR, one zlib-compressed IDAT, IEND, CRCs from zlib's crc32); it is written to
 * "<path>.tmp" and renamed, so a failed write never leaves a half file under path.
 *
 * Input (every function returns 0, or -1 with a message in err -- err may be NULL
 * with errlen 0):
 *   - errors (-1; path is left as it was and no "<path>.tmp" remains): path NULL
 *     or empty; no series / groups (NULL array, count <= 0); a series with n <= 0 or a
 *     NULL x or y; NULL values; a data range too wide to draw (its width overflows a
 *     double, e.g. -DBL_MAX .. DBL_MAX); the file cannot be created, written, fsynced or
 *     renamed (the message names the path and strerror).
 *   - non-finite values (NaN, +-inf) are never an error. Lines: a point whose x or y
 *     is not finite is left out and the line is broken there (no segment to or from it;
 *     a finite point with no finite neighbour is drawn as a small dot); it does not count
 *     toward the axis ranges. Bars: a non-finite value is drawn as 0 (no bar).
 *   - no finite point at all: an empty chart with axes 0 .. 1 (and the legend).
 *   - a zero-width data range on an axis (all values equal) is widened to v +- |v|/2, or +-1 when
 *     v is 0 (bars: all zero gives 0 .. 1).
 *   - NULL title / axis labels are left out; a NULL series label shows as "series N"
 *     (1-based). Text wider than its room is cut and ends in ".."; legend labels are
 *     cut at 24 characters; a legend longer than the plot height ends in "(+N more)".
 *     Only printable ASCII is drawn; other bytes show as '?'.
 * The legend is a column right of the plot area, so it never covers data.
 */
#ifndef LIBRA_PLOT_H
#define LIBRA_PLOT_H

#include <stddef.h>

/* One line of a line chart: n points (x[i], y[i]), x need not be sorted (drawn in
 * the given order). */
struct plot_series {
    const char *label;
    const double *x, *y;
    int n;
};

/* Line chart of n_series series on shared axes (the union of their finite points'
 * ranges, rounded out to nice ticks; the y axis includes 0 when ymin_zero is set).
 * Series k is drawn in palette colour k (cycled), 2 pixels wide, later series over
 * earlier ones. */
int plot_lines(const char *path, const char *title, const char *xlabel, const char *ylabel,
               const struct plot_series *s, int n_series, int ymin_zero, char *err,
               size_t errlen);

/* Grouped bar chart: n_groups groups along x (group_labels under them, cut to the
 * group's width; the array or an entry may be NULL), each with n_series bars side by side in the
 * series' colours (series_labels in the legend; may be NULL); values[g * n_series + k]
 * is group g's bar of series k. Bars grow from 0: the y axis spans 0 and every finite
 * value (negative values hang below a zero line). */
int plot_bars(const char *path, const char *title, const char *ylabel,
              const char *const *group_labels, int n_groups, const char *const *series_labels,
              int n_series, const double *values, char *err, size_t errlen);

#endif
