/*
 * Axes of the charts (plot_internal.h): data ranges, the padded axis over a range,
 * "nice" ticks inside it, and the number formats of tick and value labels. Pure
 * arithmetic: no cairo.
 */
#include "report/plot_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "libra/errmsg.h"

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

void plot_range_add(struct plot_range *g, double v)
{
    if (!isfinite(v)) return;
    if (!g->any) g->lo = g->hi = v;
    g->lo = fmin(g->lo, v);
    g->hi = fmax(g->hi, v);
    g->any = 1;
}

int plot_axis_make(struct plot_axis *a, struct plot_range g, double pad_lo, double pad_hi,
                   int target, const char *name, char *err, size_t errlen)
{
    double lo = g.any ? g.lo : 0, hi = g.any ? g.hi : 1;
    if (hi - lo <= 1e-12 * fmax(fabs(lo), fabs(hi))) {
        double mid = 0.5 * lo + 0.5 * hi, d = mid == 0 ? 1 : fabs(mid) / 2;
        lo = mid - d;
        hi = mid + d;
    }
    double w = hi - lo, first, step;
    a->lo = lo - pad_lo * w;
    a->hi = hi + pad_hi * w;
    if (!isfinite(w) || plot_nice_ticks(a->lo, a->hi, target < 1 ? 1 : target, &first,
                                        &step) < 0) {
        errmsg_set(err, errlen, "%s values span [%g, %g], too wide to draw", name, lo, hi);
        return -1;
    }
    /* Only the ticks inside the padded range: none sits beyond the frame. */
    double ia = ceil(a->lo / step - 1e-9), ib = floor(a->hi / step + 1e-9);
    a->first = ia * step;
    a->step = step;
    a->nticks = ib >= ia ? (int)(ib - ia) + 1 : 0;
    return 0;
}

/* %g on axes reaching 1e6 or with steps under 1e-4 (the same format for every tick of
 * an axis); otherwise as many decimals as the step needs. */
void plot_fmt_tick(char *buf, size_t n, const struct plot_axis *a, int i)
{
    double v = a->first + i * a->step, step = a->step;
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

void plot_fmt_value(char *buf, size_t n, double v)
{
    double m = fabs(v);
    if (!isfinite(v)) {
        snprintf(buf, n, "n/a");
        return;
    }
    if (m >= 1e9 || (m < 1e-3 && m > 0)) {
        snprintf(buf, n, "%.3g", v);
        return;
    }
    snprintf(buf, n, "%.*f", m >= 100 ? 0 : m >= 10 ? 1 : m >= 1 ? 2 : 3, v);
    /* "2.50" -> "2.5", "8.00" -> "8": labels of one chart then agree in precision. */
    char *dot = strchr(buf, '.');
    if (!dot) return;
    char *end = buf + strlen(buf);
    while (end > dot && (end[-1] == '0' || end[-1] == '.')) *--end = '\0';
    if (strcmp(buf, "-0") == 0) snprintf(buf, n, "0");
}
