/*
 * Charts (include/libra/plot.h; src/report/plot*.c): every chart is written to a
 * scratch directory as BASE.png, BASE.svg and BASE.csv. The PNG is checked by its
 * signature and header (960 x 600) and read back with cairo to check pixels: the
 * series in their palette colours, bar heights in the ratio of their values, and a
 * line at the data's minimum drawn clear of the x axis (the padded range). The SVG
 * must look like an SVG document; the CSV is compared byte for byte (header with the
 * units, rows, quoting, empty fields for non-finite values). Also the tick chooser,
 * the padded axis, the value format, non-finite and degenerate input, and the error
 * paths: an unwritable path is an error naming the file, never a crash, and leaves
 * no temporary.
 */
#define _POSIX_C_SOURCE 200809L
#include <cairo.h>
#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libra/plot.h"
#include "report/plot_internal.h"
#include "testutil.h"

static char g_dir[512];

/* dir/name (static buffer, one per call site use). */
static const char *at(char *buf, size_t n, const char *name)
{
    if (!g_dir[0]) {
        const char *d = test_scratch_dir("plot");
        CU_ASSERT_PTR_NOT_NULL_FATAL(d);
        snprintf(g_dir, sizeof g_dir, "%s", d);
    }
    snprintf(buf, n, "%s/%s", g_dir, name);
    return buf;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* The whole file (NUL-terminated, static buffer), or NULL. */
static const char *slurp(const char *path, size_t *len)
{
    static char buf[1 << 20];
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

/* No "<anything>.tmp-<pid>" is left in the scratch directory. */
static int no_temporaries(void)
{
    DIR *d = opendir(g_dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, ".tmp-") != NULL;
    closedir(d);
    return n == 0;
}

/* BASE.png: a PNG of the chart's size; BASE.svg: an SVG document. */
static void check_images(const char *base)
{
    char path[1100];
    size_t n = 0;
    snprintf(path, sizeof path, "%s.png", base);
    const unsigned char *p = (const unsigned char *)slurp(path, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    static const unsigned char sig[8] = {137, 'P', 'N', 'G', '\r', '\n', 26, '\n'};
    CU_ASSERT_FATAL(n > 24 && memcmp(p, sig, 8) == 0 && memcmp(p + 12, "IHDR", 4) == 0);
    uint32_t w = (uint32_t)p[16] << 24 | p[17] << 16 | p[18] << 8 | p[19];
    uint32_t h = (uint32_t)p[20] << 24 | p[21] << 16 | p[22] << 8 | p[23];
    CU_ASSERT_EQUAL(w, PLOT_W);
    CU_ASSERT_EQUAL(h, PLOT_H);
    snprintf(path, sizeof path, "%s.svg", base);
    const char *svg = slurp(path, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(svg);
    CU_ASSERT(n > 100);
    CU_ASSERT(strncmp(svg, "<?xml", 5) == 0 || strncmp(svg, "<svg", 4) == 0);
    CU_ASSERT(strstr(svg, "<svg") != NULL && strstr(svg, "</svg>") != NULL);
}

static void check_csv(const char *base, const char *want)
{
    char path[1100];
    snprintf(path, sizeof path, "%s.csv", base);
    const char *csv = slurp(path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(csv);
    CU_ASSERT_STRING_EQUAL(csv, want);
}

/* The PNG read back by cairo (RGB24: one uint32 0x00RRGGBB per pixel). */
struct img {
    cairo_surface_t *sf;
    const uint32_t *px;
    int w, h, stride; /* stride in pixels */
};

static int img_load(struct img *im, const char *base)
{
    char path[1100];
    snprintf(path, sizeof path, "%s.png", base);
    im->sf = cairo_image_surface_create_from_png(path);
    CU_ASSERT_EQUAL_FATAL(cairo_surface_status(im->sf), CAIRO_STATUS_SUCCESS);
    im->px = (const uint32_t *)cairo_image_surface_get_data(im->sf);
    im->w = cairo_image_surface_get_width(im->sf);
    im->h = cairo_image_surface_get_height(im->sf);
    im->stride = cairo_image_surface_get_stride(im->sf) / 4;
    return im->px ? 0 : -1;
}

static int is(const struct img *im, int x, int y, const unsigned char rgb[3])
{
    return (im->px[(size_t)y * im->stride + x] & 0xffffff) ==
           ((uint32_t)rgb[0] << 16 | (uint32_t)rgb[1] << 8 | rgb[2]);
}

/* Columns holding colour rgb in rows y_from.., as runs of adjacent columns: the first
 * and last column, the most pixels of rgb in one column, the lowest and highest row of
 * rgb. Returns the number of runs (at most max stored). */
struct run {
    int x0, x1, height, bottom, top;
};
static int col_runs(const struct img *im, const unsigned char rgb[3], int y_from,
                    struct run *runs, int max)
{
    int n = 0, in = 0;
    for (int x = 0; x < im->w; x++) {
        int c = 0, top = -1, bot = -1;
        for (int y = y_from; y < im->h; y++)
            if (is(im, x, y, rgb)) {
                c++;
                if (top < 0) top = y;
                bot = y;
            }
        if (c && !in && n < max) runs[n] = (struct run){x, x, c, bot, top};
        if (c && !in) n++;
        if (c && in && n <= max) {
            struct run *r = &runs[n - 1];
            r->x1 = x;
            r->height = c > r->height ? c : r->height;
            r->bottom = bot > r->bottom ? bot : r->bottom;
            r->top = top < r->top ? top : r->top;
        }
        in = c > 0;
    }
    return n;
}

/* The x axis: the row with the longest run of the axis ink (38, 38, 38). */
static int x_axis_row(const struct img *im)
{
    static const unsigned char ink[3] = {38, 38, 38};
    int best = 0, row = -1;
    for (int y = 0; y < im->h; y++)
        for (int x = 0, run = 0; x < im->w; x++) {
            run = is(im, x, y, ink) ? run + 1 : 0;
            if (run > best) best = run, row = y;
        }
    return row;
}

static void test_nice_ticks(void)
{
    static const struct {
        double lo, hi;
        int target;
        double first, step;
        int n;
    } cases[] = {
        {0, 1, 5, 0, 0.2, 6},          {0, 100, 5, 0, 20, 6},     {-3, 7, 4, -5, 2.5, 6},
        {0.13, 0.87, 5, 0, 0.2, 6},    {0.5, 0.7, 4, 0.5, 0.05, 5}, {-250, -50, 2, -300, 100, 4},
        {1e6, 1e6 + 3, 5, 1e6, 1, 4},  {0, 3, 5, 0, 1, 4},        {2e-5, 9e-5, 7, 2e-5, 1e-5, 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double first = NAN, step = NAN;
        int n = plot_nice_ticks(cases[i].lo, cases[i].hi, cases[i].target, &first, &step);
        CU_ASSERT_EQUAL(n, cases[i].n);
        CU_ASSERT_DOUBLE_EQUAL(first, cases[i].first, 1e-9 * fmax(1, fabs(cases[i].first)));
        CU_ASSERT_DOUBLE_EQUAL(step, cases[i].step, 1e-12 * fmax(1, cases[i].step));
        CU_ASSERT(first <= cases[i].lo && first + (n - 1) * step >= cases[i].hi - 1e-9);
    }
    double f, s;
    CU_ASSERT_EQUAL(plot_nice_ticks(1, 1, 5, &f, &s), -1);
    CU_ASSERT_EQUAL(plot_nice_ticks(2, 1, 5, &f, &s), -1);
    CU_ASSERT_EQUAL(plot_nice_ticks(NAN, 1, 5, &f, &s), -1);
    CU_ASSERT_EQUAL(plot_nice_ticks(0, INFINITY, 5, &f, &s), -1);
    CU_ASSERT_EQUAL(plot_nice_ticks(0, 1, 0, &f, &s), -1);
    CU_ASSERT_EQUAL(plot_nice_ticks(-DBL_MAX, DBL_MAX, 5, &f, &s), -1);
}

/* The padded axis: the data never touches the frame, the ticks stay inside it. */
static void test_axis(void)
{
    struct plot_axis a;
    struct plot_range g = {0};
    plot_range_add(&g, 0);
    plot_range_add(&g, NAN);
    plot_range_add(&g, 40);
    CU_ASSERT_EQUAL_FATAL(plot_axis_make(&a, g, 0.05, 0.05, 5, "y", NULL, 0), 0);
    CU_ASSERT_DOUBLE_EQUAL(a.lo, -2, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(a.hi, 42, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(a.first, 0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(a.step, 10, 1e-12);
    CU_ASSERT_EQUAL(a.nticks, 5); /* 0 .. 40; not -10 or 50 */
    struct plot_range flat = {5, 5, 1}, none = {0};
    CU_ASSERT_EQUAL(plot_axis_make(&a, flat, 0, 0, 5, "y", NULL, 0), 0);
    CU_ASSERT(a.lo == 2.5 && a.hi == 7.5);
    CU_ASSERT_EQUAL(plot_axis_make(&a, none, 0, 0, 5, "y", NULL, 0), 0);
    CU_ASSERT(a.lo == 0 && a.hi == 1);
    char err[128] = "", buf[32];
    struct plot_range wide = {-DBL_MAX, DBL_MAX, 1};
    CU_ASSERT_EQUAL(plot_axis_make(&a, wide, 0, 0, 5, "x", err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "x values span"));
    static const struct {
        double v;
        const char *s;
    } fmt[] = {{8, "8"}, {40, "40"}, {0, "0"}, {0.8311, "0.831"}, {3.674, "3.67"},
               {22.468, "22.5"}, {2027.4, "2027"}, {-1.5, "-1.5"}, {2e-5, "2e-05"},
               {0.5, "0.5"}, {10.04, "10"}, {-0.0001, "-0.0001"}, {-0.0004, "-0.0004"},
               {NAN, "n/a"}, {INFINITY, "n/a"}};
    for (size_t i = 0; i < sizeof fmt / sizeof fmt[0]; i++) {
        plot_fmt_value(buf, sizeof buf, fmt[i].v);
        CU_ASSERT_STRING_EQUAL(buf, fmt[i].s);
    }
}

static void test_line_chart(void)
{
    /* Two series: a step at 0 then 2 (the minimum of the data: it must be drawn clear
     * of the x axis), and a rising line to 8; the second given right to left. */
    double x[4] = {0, 1, 1, 2}, y[4] = {0, 0, 2, 2}, xr[3] = {2, 1, 0}, yr[3] = {8, 4, 1};
    struct plot_series s[2] = {{"hybrid, \"lent\"", x, y, 4}, {"rollout", xr, yr, 3}};
    struct plot_labels lb = {"GPUs per role", "time (s)", "GPUs", "role"};
    char err[512] = "", base[600];
    at(base, sizeof base, "lines");
    CU_ASSERT_EQUAL_FATAL(plot_lines(base, &lb, s, 2, 1, err, sizeof err), 0);
    check_images(base);
    check_csv(base, "role,time (s),GPUs\n"
                    "\"hybrid, \"\"lent\"\"\",0,0\n\"hybrid, \"\"lent\"\"\",1,0\n"
                    "\"hybrid, \"\"lent\"\"\",1,2\n\"hybrid, \"\"lent\"\"\",2,2\n"
                    "rollout,2,8\nrollout,1,4\nrollout,0,1\n");
    CU_ASSERT(no_temporaries());
    struct img im;
    if (img_load(&im, base) != 0) return;
    int axis = x_axis_row(&im);
    CU_ASSERT(axis > PLOT_H / 2);
    struct run r[8];
    /* Below the title and legend (the first 75 rows): series 0's line first, then
     * its end label right of the plot. */
    CU_ASSERT(col_runs(&im, plot_palette[0], 75, r, 8) >= 1);
    CU_ASSERT(r[0].bottom < axis - 8); /* the zero line is clear of the axis */
    CU_ASSERT(r[0].x1 - r[0].x0 > PLOT_W / 2);
    CU_ASSERT(col_runs(&im, plot_palette[1], 75, r, 8) >= 1);
    CU_ASSERT(r[0].top > 80); /* the maximum is inside the frame, under the legend */
    for (int x = 0; x < im.w; x++) CU_ASSERT(!is(&im, x, 1, plot_palette[2])); /* 2 series */
    cairo_surface_destroy(im.sf);
}

static void test_bar_chart(void)
{
    const char *groups[3] = {"a", "b,c", "d"}, *series[2] = {"base", "tuned"};
    double v[6] = {1, 0.5, 3, NAN, 2, 2.5}; /* group-major: (g0: 1, 0.5), (g1: 3, NaN) .. */
    struct plot_labels lb = {"Bars", "workload", "throughput (1/s)", NULL};
    char err[512] = "", base[600];
    at(base, sizeof base, "bars");
    CU_ASSERT_EQUAL_FATAL(plot_bars(base, &lb, groups, 3, series, 2, v, err, sizeof err), 0);
    check_images(base);
    check_csv(base, "workload,series,throughput (1/s)\n"
                    "a,base,1\na,tuned,0.5\n\"b,c\",base,3\n\"b,c\",tuned,\n"
                    "d,base,2\nd,tuned,2.5\n");
    struct img im;
    if (img_load(&im, base) != 0) return;
    struct run r[8];
    /* Below the title and legend: series 0's three bars, one baseline, heights in the
     * ratio of the values. */
    CU_ASSERT_EQUAL_FATAL(col_runs(&im, plot_palette[0], 75, r, 8), 3);
    int h1 = r[0].height, h3 = r[1].height, h2 = r[2].height;
    CU_ASSERT(h1 > 30 && h3 > h2 && h2 > h1);
    CU_ASSERT(abs(h3 - 3 * h1) <= 3 && abs(h2 - 2 * h1) <= 3);
    CU_ASSERT(r[0].bottom == r[1].bottom && r[1].bottom == r[2].bottom);
    CU_ASSERT(abs((r[0].x1 - r[0].x0) - (r[1].x1 - r[1].x0)) <= 1); /* equal widths */
    /* Series 1: 0.5, NaN (no bar), 2.5; with the legend swatch on top. */
    CU_ASSERT_EQUAL(col_runs(&im, plot_palette[1], 75, r, 8), 2);
    CU_ASSERT(abs(r[1].height - 5 * r[0].height) <= 3);
    CU_ASSERT_EQUAL(col_runs(&im, plot_palette[1], 0, r, 8), 3);
    cairo_surface_destroy(im.sf);
}

/* NaN/inf points break a line; all-NaN series, flat data, negative and zero bars, NULL
 * labels, unprintable and overlong text, more series than the legend holds. */
static void test_nonfinite_and_degenerate(void)
{
    double x[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    double y[9] = {5, 5, 5, 5, NAN, 5, 5, INFINITY, 5};
    double none[9] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
    struct plot_series s[2] = {{NULL, x, y, 9}, {"all NaN", x, none, 9}};
    char err[512] = "", base[600];
    at(base, sizeof base, "holes");
    CU_ASSERT_EQUAL_FATAL(plot_lines(base, NULL, s, 2, 0, err, sizeof err), 0);
    check_images(base);
    check_csv(base, "series,x,y\nseries 1,0,5\nseries 1,1,5\nseries 1,2,5\nseries 1,3,5\n"
                    "series 1,4,\nseries 1,5,5\nseries 1,6,5\nseries 1,7,\nseries 1,8,5\n"
                    "all NaN,0,\nall NaN,1,\nall NaN,2,\nall NaN,3,\nall NaN,4,\n"
                    "all NaN,5,\nall NaN,6,\nall NaN,7,\nall NaN,8,\n");
    struct plot_series empty = {"nan", x, none, 9};
    struct plot_labels lb = {"t\x01\xff", "x", "y", NULL};
    CU_ASSERT_EQUAL(plot_lines(base, &lb, &empty, 1, 1, err, sizeof err), 0);
    double neg[2] = {-1, 2}, zero[2] = {0, 0}, nan2[2] = {NAN, -INFINITY};
    CU_ASSERT_EQUAL(plot_bars(base, NULL, NULL, 2, NULL, 1, neg, err, sizeof err), 0);
    check_csv(base, "group,series,y\ngroup 1,series 1,-1\ngroup 2,series 1,2\n");
    CU_ASSERT_EQUAL(plot_bars(base, &lb, NULL, 2, NULL, 1, zero, err, sizeof err), 0);
    CU_ASSERT_EQUAL(plot_bars(base, &lb, NULL, 2, NULL, 1, nan2, err, sizeof err), 0);
    char longt[2000];
    memset(longt, 'W', sizeof longt - 1);
    longt[sizeof longt - 1] = '\0';
    const char *g[2] = {longt, longt};
    struct plot_labels lt = {longt, longt, longt, longt};
    double many[40];
    for (int i = 0; i < 40; i++) many[i] = i * 1e6;
    CU_ASSERT_EQUAL(plot_bars(base, &lt, g, 2, g, 2, many, err, sizeof err), 0);
    CU_ASSERT_EQUAL(plot_bars(base, &lt, NULL, 1, NULL, 40, many, err, sizeof err), 0);
    check_images(base);
    CU_ASSERT(no_temporaries());
}

static void test_errors(void)
{
    double x[2] = {0, 1}, y[2] = {1, 2}, v[2] = {1, 2}, huge[2] = {-DBL_MAX, DBL_MAX};
    struct plot_series s = {"s", x, y, 2};
    struct plot_labels lb = {"t", "x (s)", "y (s)", NULL};
    char err[512] = "", base[600], path[700];

    /* A directory that does not exist: an error naming the file; nothing written. */
    CU_ASSERT_EQUAL(plot_lines("/nonexistent-dir/x", &lb, &s, 1, 0, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/nonexistent-dir/x.png"));
    CU_ASSERT_EQUAL(plot_bars("/nonexistent-dir/x", &lb, NULL, 2, NULL, 1, v, err,
                              sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/nonexistent-dir/x.png"));

    /* BASE.svg (then BASE.csv) is a directory: the rename fails, the message names it,
     * the temporary is removed; the files before it were written. */
    static const char *const ext[2] = {"svg", "csv"};
    for (int i = 0; i < 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "blocked-%s", ext[i]);
        at(base, sizeof base, name);
        snprintf(path, sizeof path, "%s.%s", base, ext[i]);
        CU_ASSERT_FATAL(mkdir(path, 0755) == 0);
        err[0] = '\0';
        CU_ASSERT_EQUAL(plot_lines(base, &lb, &s, 1, 0, err, sizeof err), -1);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, path));
        if (!strstr(err, path)) fprintf(stderr, "message: %s\n", err);
        snprintf(path, sizeof path, "%s.png", base);
        CU_ASSERT(exists(path));
        CU_ASSERT(no_temporaries());
    }

    at(base, sizeof base, "never");
    struct plot_series nox = {"s", NULL, y, 2}, zero_n = {"s", x, y, 0};
    err[0] = '\0';
    CU_ASSERT_EQUAL(plot_lines(base, &lb, &s, 0, 0, err, sizeof err), -1);
    CU_ASSERT(strlen(err) > 0);
    CU_ASSERT_EQUAL(plot_lines(base, &lb, NULL, 1, 0, err, sizeof err), -1);
    CU_ASSERT_EQUAL(plot_lines(base, &lb, &nox, 1, 0, err, sizeof err), -1);
    CU_ASSERT_EQUAL(plot_lines(base, &lb, &zero_n, 1, 0, err, sizeof err), -1);
    CU_ASSERT_EQUAL(plot_lines(NULL, &lb, &s, 1, 0, NULL, 0), -1);
    CU_ASSERT_EQUAL(plot_lines("", &lb, &s, 1, 0, NULL, 0), -1);
    CU_ASSERT_EQUAL(plot_bars(base, &lb, NULL, 2, NULL, 1, NULL, err, sizeof err), -1);
    CU_ASSERT_EQUAL(plot_bars(base, &lb, NULL, 0, NULL, 1, v, err, sizeof err), -1);
    CU_ASSERT_EQUAL(plot_bars(base, &lb, NULL, 2, NULL, 0, v, err, sizeof err), -1);
    struct plot_series wide = {"s", x, huge, 2};
    err[0] = '\0';
    CU_ASSERT_EQUAL(plot_lines(base, &lb, &wide, 1, 0, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "too wide"));
    static const char *const never[3] = {"png", "svg", "csv"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s.%s", base, never[i]);
        CU_ASSERT_FALSE(exists(path));
    }
    CU_ASSERT(no_temporaries());
}

int main(void)
{
    static const struct test_case cases[] = {
        {"nice_ticks", test_nice_ticks},
        {"axis: padding, ticks inside, value format", test_axis},
        {"line chart: PNG, SVG, CSV, zero line clear of the axis", test_line_chart},
        {"bar chart: heights, NaN bar, CSV quoting", test_bar_chart},
        {"nonfinite_and_degenerate", test_nonfinite_and_degenerate},
        {"errors: unwritable paths, bad input", test_errors},
        {NULL, NULL},
    };
    static const struct test_suite suites[] = {{"plot", cases}, {NULL, NULL}};
    return test_main(suites);
}
