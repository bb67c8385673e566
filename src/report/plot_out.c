/*
 * A chart's image files (plot_internal.h): BASE.png from a cairo image surface
 * (RGB, PLOT_W x PLOT_H pixels) and BASE.svg from a cairo SVG surface of the same
 * size, each drawn by plot_draw and streamed into an atomic file (libra/afile.h).
 * Every cairo status that can fail is checked -- the surface, the context after
 * drawing, the PNG encoder, the SVG surface when it is finished -- and reported as
 * "<file>: <step>: <cairo's message>"; an I/O error is afile's message (the
 * temporary's path and strerror). A failure removes the temporary.
 */
#include "report/plot_internal.h"

#include <cairo-svg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/afile.h"
#include "libra/errmsg.h"
#include "libra/log.h"

/* cairo's write callback into an afile; the first failure's message stays in err. */
struct sink {
    struct afile f;
    int failed;
    char *err;
    size_t errlen;
};

static cairo_status_t sink_write(void *closure, const unsigned char *data, unsigned int len)
{
    struct sink *s = closure;
    if (s->failed || afile_write(&s->f, data, len, s->err, s->errlen) != 0) {
        s->failed = 1;
        return CAIRO_STATUS_WRITE_ERROR;
    }
    return CAIRO_STATUS_SUCCESS;
}

/* 0, or -1 with err "<path>: <step>: <cairo's message>" (or the sink's own message). */
static int cairo_check(cairo_status_t st, const struct sink *s, const char *path,
                       const char *step, char *err, size_t errlen)
{
    if (st == CAIRO_STATUS_SUCCESS) return 0;
    if (!s->failed) errmsg_set(err, errlen, "%s: %s: %s", path, step, cairo_status_to_string(st));
    return -1;
}

/* Draws the chart on surface sf (its kind named by what), checking the surface, the
 * context and the drawing. */
static int draw_on(cairo_surface_t *sf, const char *what, const struct plot_chart *c,
                   const struct sink *s, const char *path, char *err, size_t errlen)
{
    if (cairo_check(cairo_surface_status(sf), s, path, what, err, errlen)) return -1;
    cairo_t *cr = cairo_create(sf);
    int rc = cairo_check(cairo_status(cr), s, path, "cairo context", err, errlen);
    if (rc == 0) rc = plot_draw(cr, c, err, errlen);
    if (rc == 0) rc = cairo_check(cairo_status(cr), s, path, "drawing", err, errlen);
    cairo_destroy(cr);
    return rc;
}

static int write_png(const char *path, const struct plot_chart *c, char *err, size_t errlen)
{
    struct sink s = {.f = {.fd = -1}, .err = err, .errlen = errlen};
    cairo_surface_t *sf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, PLOT_W, PLOT_H);
    int rc = -1;
    if (draw_on(sf, "image surface", c, &s, path, err, errlen)) goto fail;
    cairo_surface_flush(sf);
    if (afile_open(&s.f, path, err, errlen) ||
        cairo_check(cairo_surface_write_to_png_stream(sf, sink_write, &s), &s, path,
                    "PNG encoder", err, errlen) ||
        afile_commit(&s.f, err, errlen))
        goto fail;
    rc = 0;
fail:
    afile_abort(&s.f);
    cairo_surface_destroy(sf);
    return rc;
}

static int write_svg(const char *path, const struct plot_chart *c, char *err, size_t errlen)
{
    struct sink s = {.f = {.fd = -1}, .err = err, .errlen = errlen};
    if (afile_open(&s.f, path, err, errlen)) return -1;
    cairo_surface_t *sf = cairo_svg_surface_create_for_stream(sink_write, &s, PLOT_W, PLOT_H);
    cairo_svg_surface_set_document_unit(sf, CAIRO_SVG_UNIT_PX); /* the PNG's size */
    int rc = -1;
    if (draw_on(sf, "SVG surface", c, &s, path, err, errlen)) goto fail;
    cairo_surface_finish(sf); /* writes the document through sink_write */
    if (cairo_check(cairo_surface_status(sf), &s, path, "SVG output", err, errlen) ||
        afile_commit(&s.f, err, errlen))
        goto fail;
    rc = 0;
fail:
    s.failed |= rc != 0; /* destroying an unfinished surface writes: not into err */
    cairo_surface_destroy(sf);
    afile_abort(&s.f);
    return rc;
}

int plot_write_images(const char *base, const struct plot_chart *c, char *err, size_t errlen)
{
    size_t n = strlen(base) + 8;
    char *path = xmalloc(n);
    snprintf(path, n, "%s.png", base);
    int rc = write_png(path, c, err, errlen);
    snprintf(path, n, "%s.svg", base);
    if (rc == 0) rc = write_svg(path, c, err, errlen);
    free(path);
    return rc;
}
