/*
 * A minimal RGB raster and its PNG writer, for the charts of src/report/plot.c.
 *
 * The raster is w x h pixels, 3 bytes each (R, G, B), rows top to bottom: px is
 * (h, w, 3). Pixel writes outside the raster are dropped (clipping), so drawing code
 * need not check bounds.
 */
#ifndef LIBRA_REPORT_PNG_H
#define LIBRA_REPORT_PNG_H

#include <stddef.h>

struct raster {
    int w, h;
    unsigned char *px; /* (h, w, 3) */
};

/* A w x h raster filled with white; w, h in 1..RASTER_MAX (asserted). */
#define RASTER_MAX 16384
void raster_init(struct raster *r, int w, int h);
void raster_free(struct raster *r); /* NULL or freed twice: no-op */

/* Pixel (x, y) set to rgb; ignored outside the raster. */
void raster_put(struct raster *r, int x, int y, const unsigned char rgb[3]);
/* The rectangle [x0, x1] x [y0, y1] (inclusive, either order), clipped. */
void raster_fill(struct raster *r, int x0, int y0, int x1, int y1, const unsigned char rgb[3]);

/* Writes the w x h RGB image rgb ((h, w, 3)) as an 8-bit truecolour PNG: IHDR, one
 * IDAT (zlib compress2, filter 0 on every row), IEND, CRCs by zlib's crc32. The file
 * is written to "<path>.tmp", fsynced and renamed over path; on any failure the
 * temporary file is removed, path is untouched, and -1 is returned with a message
 * (the path and the reason) in err. Returns 0 on success. */
int png_write_rgb(const char *path, int w, int h, const unsigned char *rgb, char *err,
                  size_t errlen);

#endif
