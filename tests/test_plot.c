/*
 * PNG charts (src/report/plot.c, png.c, font.c). Every chart written is read back by
 * an independent minimal PNG reader (signature, chunk order, every CRC, IHDR fields,
 * zlib-inflated IDAT, filter bytes) and then checked by its pixels: white background,
 * series drawn in their palette colours, lines going the right way, bar heights in the
 * ratio of their values. Also the nice-tick chooser, the font's fallback and scaling,
 * non-finite and degenerate input, and the error paths (nothing left behind).
 */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "libra/plot.h"
#include "report/font.h"
#include "report/plot_internal.h"
#include "report/png.h"
#include "testutil.h"

static const unsigned char WHITE[3] = {255, 255, 255};

struct img {
    int w, h;
    unsigned char *rgb; /* (h, w, 3) */
};

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads an 8-bit RGB, non-interlaced PNG, checking its structure; 0 or -1. */
static int read_png(const char *path, struct img *im)
{
    memset(im, 0, sizeof *im);
    FILE *f = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static unsigned char file[4 << 20];
    size_t size = fread(file, 1, sizeof file, f);
    fclose(f);
    static const unsigned char sig[8] = {137, 'P', 'N', 'G', '\r', '\n', 26, '\n'};
    CU_ASSERT_FATAL(size > 8 && size < sizeof file);
    CU_ASSERT_FATAL(memcmp(file, sig, 8) == 0);
    unsigned char *idat = malloc(size);
    size_t idat_len = 0, pos = 8;
    int nchunk = 0, seen_iend = 0;
    while (pos + 12 <= size && !seen_iend) {
        uint32_t len = be32(file + pos);
        if (len > size - pos - 12) break;
        const unsigned char *type = file + pos + 4, *data = file + pos + 8;
        uint32_t crc = (uint32_t)crc32(0L, type, len + 4);
        CU_ASSERT_EQUAL(crc, be32(data + len));
        if (nchunk == 0) {
            CU_ASSERT(memcmp(type, "IHDR", 4) == 0 && len == 13);
            im->w = (int)be32(data);
            im->h = (int)be32(data + 4);
            CU_ASSERT_EQUAL(data[8], 8);  /* bit depth */
            CU_ASSERT_EQUAL(data[9], 2);  /* truecolour */
            CU_ASSERT_EQUAL(data[12], 0); /* not interlaced */
        } else if (memcmp(type, "IDAT", 4) == 0) {
            memcpy(idat + idat_len, data, len);
            idat_len += len;
        } else if (memcmp(type, "IEND", 4) == 0) {
            CU_ASSERT_EQUAL(len, 0);
            seen_iend = 1;
        }
        pos += 12 + len;
        nchunk++;
    }
    CU_ASSERT(seen_iend && pos == size); /* IEND is last, nothing trails it */
    CU_ASSERT(im->w > 0 && im->w <= 4096 && im->h > 0 && im->h <= 4096);
    if (!seen_iend || im->w <= 0 || im->w > 4096 || im->h <= 0 || im->h > 4096) {
        free(idat);
        return -1;
    }
    size_t stride = (size_t)im->w * 3 + 1;
    uLongf raw_len = (uLongf)(stride * (size_t)im->h);
    unsigned char *raw = malloc(raw_len + 1);
    uLongf got = raw_len + 1;
    int zrc = uncompress(raw, &got, idat, (uLong)idat_len);
    free(idat);
    CU_ASSERT_EQUAL(zrc, Z_OK);
    CU_ASSERT_EQUAL(got, raw_len);
    int bad_filter = 0;
    im->rgb = malloc(raw_len);
    for (int y = 0; zrc == Z_OK && got == raw_len && y < im->h; y++) {
        bad_filter += raw[(size_t)y * stride] != 0; /* the writer uses filter 0 only */
        memcpy(im->rgb + (size_t)y * im->w * 3, raw + (size_t)y * stride + 1, stride - 1);
    }
    free(raw);
    CU_ASSERT_EQUAL(bad_filter, 0);
    return zrc == Z_OK && got == raw_len && !bad_filter ? 0 : -1;
}

static int is(const struct img *im, int x, int y, const unsigned char rgb[3])
{
    return memcmp(im->rgb + ((size_t)y * im->w + x) * 3, rgb, 3) == 0;
}

static long count(const struct img *im, const unsigned char rgb[3])
{
    long n = 0;
    for (int y = 0; y < im->h; y++)
        for (int x = 0; x < im->w; x++) n += is(im, x, y, rgb);
    return n;
}

/* Runs of adjacent columns holding colour rgb, left to right: first/last column, the
 * most pixels of rgb in one column, and the top/bottom rows of rgb in the first and last
 * columns. Returns the number of runs (at most max are stored). */
struct run {
    int x0, x1, height, top0, bot0, top1, bot1;
};
static int col_runs(const struct img *im, const unsigned char rgb[3], struct run *runs, int max)
{
    int n = 0, in = 0;
    for (int x = 0; x < im->w; x++) {
        int c = 0, top = -1, bot = -1;
        for (int y = 0; y < im->h; y++)
            if (is(im, x, y, rgb)) {
                c++;
                if (top < 0) top = y;
                bot = y;
            }
        if (c && !in && n < max) runs[n] = (struct run){x, x, c, top, bot, top, bot};
        if (c && !in) n++;
        if (c && in && n <= max) {
            struct run *r = &runs[n - 1];
            r->x1 = x;
            r->height = c > r->height ? c : r->height;
            r->top1 = top;
            r->bot1 = bot;
        }
        in = c > 0;
    }
    return n;
}

/* Length of the longest vertical run of dark pixels: the y axis line (text is shorter,
 * and no palette colour is dark). */
static int y_axis_len(const struct img *im)
{
    int best = 0;
    for (int x = 0; x < im->w; x++)
        for (int y = 0, run = 0; y < im->h; y++) {
            const unsigned char *p = im->rgb + ((size_t)y * im->w + x) * 3;
            run = p[0] < 100 && p[1] < 100 && p[2] < 100 ? run + 1 : 0;
            best = run > best ? run : best;
        }
    return best;
}

static char path_buf[1024];
static const char *out_path(const char *name)
{
    const char *dir = test_scratch_dir("plot");
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
    return path_buf;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
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

/* Unprintable characters draw as '?'; scale 2 draws four times the ink. */
static void test_font(void)
{
    static const unsigned char black[3] = {0, 0, 0};
    struct raster a, b;
    raster_init(&a, 40, 20);
    raster_init(&b, 40, 20);
    font_draw(&a, 1, 1, "?\x01", 1, black);
    font_draw(&b, 1, 1, "??", 1, black);
    CU_ASSERT(memcmp(a.px, b.px, 40 * 20 * 3) == 0);
    CU_ASSERT_EQUAL(font_text_width("abc", 2), 3 * FONT_ADV * 2);
    struct img ia = {40, 20, a.px};
    long ink1 = count(&ia, black);
    raster_free(&b);
    raster_init(&b, 40, 20);
    font_draw(&b, 1, 1, "?\x01", 2, black);
    struct img ib = {40, 20, b.px};
    CU_ASSERT(ink1 > 10);
    CU_ASSERT_EQUAL(count(&ib, black), 4 * ink1);
    raster_free(&a);
    raster_free(&b);
    raster_free(&b); /* twice: no-op */
}

static void test_line_chart(void)
{
    /* Two curves that do not cross (the second would hide the first where they do);
     * the second one given right to left. */
    double x[21], up[21], xr[21], down[21];
    for (int i = 0; i <= 20; i++) {
        x[i] = i;
        up[i] = i * i / 2.0;          /* 0 .. 200 */
        xr[i] = 20 - i;
        down[i] = 250 + i * i * 0.375; /* at x = 20 - i: 400 .. 250 */
    }
    struct plot_series s[2] = {{"reward (mean)", x, up, 21}, {"loss", xr, down, 21}};
    char err[256] = "";
    const char *path = out_path("lines.png");
    CU_ASSERT_EQUAL_FATAL(plot_lines(path, "Training: 1/2 + 3%", "step", "value", s, 2, 1,
                                     err, sizeof err), 0);
    CU_ASSERT_FALSE(exists(strcat(strcpy(err, path), ".tmp")));
    struct img im;
    if (read_png(path, &im) != 0) return;
    CU_ASSERT_EQUAL(im.w, 800);
    CU_ASSERT_EQUAL(im.h, 500);
    CU_ASSERT(is(&im, 0, 0, WHITE) && is(&im, im.w - 1, im.h - 1, WHITE));
    CU_ASSERT(count(&im, WHITE) > (long)im.w * im.h * 3 / 4);
    struct run r[8];
    /* First run: the data (a continuous line across the plot); then the legend swatch. */
    CU_ASSERT_EQUAL(col_runs(&im, plot_palette[0], r, 8), 2);
    CU_ASSERT(r[0].x1 - r[0].x0 > 400);
    CU_ASSERT(r[0].bot0 - r[0].top1 > 180);     /* rises from bottom left to top right */
    CU_ASSERT(r[0].top1 > 200);                 /* to half the height */
    CU_ASSERT(r[1].x0 > r[0].x1 && r[1].x1 - r[1].x0 < 20);
    CU_ASSERT_EQUAL(col_runs(&im, plot_palette[1], r, 8), 2);
    CU_ASSERT(r[0].x1 - r[0].x0 > 400);
    CU_ASSERT(r[0].bot1 - r[0].top0 > 130 && r[0].top0 < 60); /* falls from the top */
    CU_ASSERT(count(&im, plot_palette[2]) == 0); /* only two series */
    free(im.rgb);
}

static void test_bar_chart(void)
{
    const char *groups[3] = {"a", "b", "c"}, *series[2] = {"base", "tuned"};
    double v[6] = {1, 0.5, 3, NAN, 2, 2.5}; /* group-major: (g0: 1, 0.5), (g1: 3, NaN) .. */
    char err[256] = "";
    const char *path = out_path("bars.png");
    CU_ASSERT_EQUAL_FATAL(plot_bars(path, "Bars", "count", groups, 3, series, 2, v, err,
                                    sizeof err), 0);
    struct img im;
    if (read_png(path, &im) != 0) return;
    CU_ASSERT(is(&im, 0, 0, WHITE) && is(&im, im.w - 1, 0, WHITE));
    struct run r[8];
    CU_ASSERT_EQUAL_FATAL(col_runs(&im, plot_palette[0], r, 8), 4); /* 3 bars + legend */
    int h1 = r[0].height, h3 = r[1].height, h2 = r[2].height;
    CU_ASSERT(h1 > 20 && h3 > h2 && h2 > h1);
    CU_ASSERT(abs(h3 - 3 * h1) <= 3 && abs(h2 - 2 * h1) <= 3);
    CU_ASSERT(abs(h3 - (y_axis_len(&im) - 1)) <= 2); /* 3 is the top tick: full height */
    CU_ASSERT(r[0].bot0 == r[1].bot0 && r[1].bot0 == r[2].bot0); /* one baseline */
    CU_ASSERT(abs((r[0].x1 - r[0].x0) - (r[1].x1 - r[1].x0)) <= 1); /* equal widths */
    /* Series 1: 0.5, NaN (drawn as 0: no bar), 2.5, then the legend. */
    CU_ASSERT_EQUAL_FATAL(col_runs(&im, plot_palette[1], r, 8), 3);
    CU_ASSERT(abs(r[1].height - 5 * r[0].height) <= 3);
    CU_ASSERT(abs(r[1].height - (5 * h1) / 2) <= 3);
    free(im.rgb);
}

/* NaN/inf points break a line; all-NaN series, flat data, negative bars, NULL labels. */
static void test_nonfinite_and_degenerate(void)
{
    double x[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    double y[9] = {5, 5, 5, 5, NAN, 5, 5, INFINITY, 5}; /* flat, with holes */
    double none[9] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
    struct plot_series s[2] = {{NULL, x, y, 9}, {"all NaN", x, none, 9}};
    char err[256] = "";
    const char *path = out_path("holes.png");
    CU_ASSERT_EQUAL_FATAL(plot_lines(path, NULL, NULL, NULL, s, 2, 0, err, sizeof err), 0);
    struct img im;
    if (read_png(path, &im) == 0) {
        struct run r[8];
        /* x 0..3 and 5..6 as lines, x 8 as a dot, then the legend swatch. */
        CU_ASSERT_EQUAL(col_runs(&im, plot_palette[0], r, 8), 4);
        CU_ASSERT(r[0].top0 == r[0].top1 && r[0].top0 == r[1].top1); /* flat */
        CU_ASSERT(r[0].top0 > 100 && r[0].top0 < 400);               /* 5 mid-axis */
        CU_ASSERT_EQUAL(col_runs(&im, plot_palette[1], r, 8), 1);    /* legend only */
        free(im.rgb);
    }
    struct plot_series empty = {"nan", x, none, 9};
    CU_ASSERT_EQUAL(plot_lines(path, "t", "x", "y", &empty, 1, 1, err, sizeof err), 0);
    double neg[2] = {-1, 2}, zero[2] = {0, 0}, nan2[2] = {NAN, -INFINITY};
    CU_ASSERT_EQUAL(plot_bars(path, NULL, NULL, NULL, 2, NULL, 1, neg, err, sizeof err), 0);
    if (read_png(path, &im) == 0) {
        struct run r[4];
        CU_ASSERT_EQUAL(col_runs(&im, plot_palette[0], r, 4), 3);
        CU_ASSERT(r[0].top0 > r[1].bot0); /* -1 hangs below the baseline, 2 stands on it */
        /* (the axis lines cover a row at each end) */
        CU_ASSERT(abs(2 * (r[0].bot0 - r[0].top0) - (r[1].bot0 - r[1].top0)) <= 5);
        free(im.rgb);
    }
    CU_ASSERT_EQUAL(plot_bars(path, "z", "y", NULL, 2, NULL, 1, zero, err, sizeof err), 0);
    CU_ASSERT_EQUAL(plot_bars(path, "n", "y", NULL, 2, NULL, 1, nan2, err, sizeof err), 0);
    /* A title much longer than the chart is clipped, not a crash. */
    char longt[2000];
    memset(longt, 'W', sizeof longt - 1);
    longt[sizeof longt - 1] = '\0';
    const char *g[2] = {longt, longt};
    double four[4] = {1, 2, 3, 4};
    CU_ASSERT_EQUAL(plot_bars(path, longt, longt, g, 2, g, 2, four, err, sizeof err), 0);
}

static void test_errors(void)
{
    double x[2] = {0, 1}, y[2] = {1, 2}, v[2] = {1, 2}, huge[2] = {-DBL_MAX, DBL_MAX};
    struct plot_series s = {"s", x, y, 2};
    char err[256] = "";

    CU_ASSERT_EQUAL(plot_lines("/nonexistent-dir/x.png", "t", "x", "y", &s, 1, 0, err,
                               sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/nonexistent-dir/x.png"));
    CU_ASSERT_FALSE(exists("/nonexistent-dir/x.png"));

    /* The final path is a directory: the rename fails and the temporary is removed. */
    const char *dir = out_path("a-directory.png");
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0 || exists(dir));
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    err[0] = '\0';
    CU_ASSERT_EQUAL(plot_bars(dir, "t", "y", NULL, 2, NULL, 1, v, err, sizeof err), -1);
    CU_ASSERT(strlen(err) > 0);
    CU_ASSERT_FALSE(exists(tmp));

    const char *path = out_path("never.png");
    struct plot_series nox = {"s", NULL, y, 2}, zero_n = {"s", x, y, 0};
    err[0] = '\0';
    CU_ASSERT_EQUAL(plot_lines(path, "t", "x", "y", &s, 0, 0, err, sizeof err), -1);
    CU_ASSERT(strlen(err) > 0);
    CU_ASSERT_EQUAL(plot_lines(path, "t", "x", "y", NULL, 1, 0, err, sizeof err), -1);
    CU_ASSERT_EQUAL(plot_lines(path, "t", "x", "y", &nox, 1, 0, err, sizeof err), -1);
    CU_ASSERT_EQUAL(plot_lines(path, "t", "x", "y", &zero_n, 1, 0, err, sizeof err), -1);
    CU_ASSERT_EQUAL(plot_lines(NULL, "t", "x", "y", &s, 1, 0, NULL, 0), -1);
    CU_ASSERT_EQUAL(plot_bars(path, "t", "y", NULL, 2, NULL, 1, NULL, err, sizeof err), -1);
    CU_ASSERT_EQUAL(plot_bars(path, "t", "y", NULL, 0, NULL, 1, v, err, sizeof err), -1);
    CU_ASSERT_EQUAL(plot_bars(path, "t", "y", NULL, 2, NULL, 0, v, err, sizeof err), -1);
    struct plot_series wide = {"s", x, huge, 2};
    err[0] = '\0';
    CU_ASSERT_EQUAL(plot_lines(path, "t", "x", "y", &wide, 1, 0, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "too wide"));
    CU_ASSERT_FALSE(exists(path));
    CU_ASSERT_EQUAL(png_write_rgb(path, 0, 10, (const unsigned char *)"", err, sizeof err), -1);
}

int main(void)
{
    static const struct test_case cases[] = {
        {"nice_ticks", test_nice_ticks},
        {"font", test_font},
        {"line_chart", test_line_chart},
        {"bar_chart", test_bar_chart},
        {"nonfinite_and_degenerate", test_nonfinite_and_degenerate},
        {"errors", test_errors},
        {NULL, NULL},
    };
    static const struct test_suite suites[] = {{"plot", cases}, {NULL, NULL}};
    return test_main(suites);
}
