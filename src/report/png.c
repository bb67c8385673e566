/*
 * RGB raster and PNG writer (src/report/png.h). The PNG is assembled in memory
 * (signature, IHDR, one IDAT, IEND; each chunk is length, type, data, CRC-32 of type
 * and data, big-endian) and written through "<path>.tmp" + fsync + rename, so a reader
 * never sees a half file. Images are small (a chart is ~1 MB raw), so one compress2
 * call is enough; no streaming.
 */
#define _POSIX_C_SOURCE 200809L
#include "report/png.h"
#include "libra/errmsg.h"

#include "libra/log.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

void raster_init(struct raster *r, int w, int h)
{
    assert(w > 0 && h > 0 && w <= RASTER_MAX && h <= RASTER_MAX);
    r->w = w;
    r->h = h;
    r->px = xmalloc((size_t)w * (size_t)h * 3);
    memset(r->px, 255, (size_t)w * (size_t)h * 3);
}

void raster_free(struct raster *r)
{
    if (!r) return;
    free(r->px);
    r->px = NULL;
}

void raster_put(struct raster *r, int x, int y, const unsigned char rgb[3])
{
    if (x < 0 || y < 0 || x >= r->w || y >= r->h) return;
    memcpy(r->px + ((size_t)y * (size_t)r->w + (size_t)x) * 3, rgb, 3);
}

void raster_fill(struct raster *r, int x0, int y0, int x1, int y1, const unsigned char rgb[3])
{
    if (x0 > x1) { int t = x0; x0 = x1; x1 = t; }
    if (y0 > y1) { int t = y0; y0 = y1; y1 = t; }
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 >= r->w) x1 = r->w - 1;
    if (y1 >= r->h) y1 = r->h - 1;
    for (int y = y0; y <= y1; y++)
        for (int x = x0; x <= x1; x++)
            memcpy(r->px + ((size_t)y * (size_t)r->w + (size_t)x) * 3, rgb, 3);
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Appends chunk (type, data[len]) at out; returns the bytes written (12 + len). */
static size_t put_chunk(unsigned char *out, const char type[4], const unsigned char *data,
                        size_t len)
{
    put_be32(out, (uint32_t)len);
    memcpy(out + 4, type, 4);
    if (len) memmove(out + 8, data, len);
    uLong crc = crc32(0L, out + 4, (uInt)(len + 4));
    put_be32(out + 8 + len, (uint32_t)crc);
    return 12 + len;
}

/* buf[n] to "<path>.tmp", then renamed over path; the temporary is removed on failure. */
static int write_atomic(const char *path, const unsigned char *buf, size_t n, char *err,
                        size_t errlen)
{
    size_t plen = strlen(path);
    char *tmp = xmalloc(plen + 5);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        errmsg_set(err, errlen, "%s: cannot create: %s (does the directory exist?)", tmp,
                   strerror(errno));
        free(tmp);
        return -1;
    }
    const char *step = NULL;
    if (fwrite(buf, 1, n, f) != n) step = "write";
    else if (fflush(f) != 0) step = "flush";
    else if (fsync(fileno(f)) != 0) step = "fsync";
    int saved = errno;
    if (fclose(f) != 0 && !step) {
        step = "close";
        saved = errno;
    }
    if (!step && rename(tmp, path) != 0) {
        step = "rename to the final name";
        saved = errno;
    }
    if (step) {
        errmsg_set(err, errlen, "%s: %s failed: %s", step[0] == 'r' ? path : tmp, step,
                   strerror(saved));
        unlink(tmp);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}

int png_write_rgb(const char *path, int w, int h, const unsigned char *rgb, char *err,
                  size_t errlen)
{
    if (!path || !*path || !rgb || w <= 0 || h <= 0 || w > RASTER_MAX || h > RASTER_MAX) {
        errmsg_set(err, errlen, "png_write_rgb: bad arguments (path %s, %d x %d, pixels %s)",
                   path ? path : "NULL", w, h, rgb ? "set" : "NULL");
        return -1;
    }
    /* Scanlines: a filter byte (0, none) and then the row's RGB bytes. */
    size_t stride = (size_t)w * 3 + 1, raw_len = stride * (size_t)h;
    unsigned char *raw = xmalloc(raw_len);
    for (int y = 0; y < h; y++) {
        raw[(size_t)y * stride] = 0;
        memcpy(raw + (size_t)y * stride + 1, rgb + (size_t)y * (size_t)w * 3, (size_t)w * 3);
    }
    uLongf zlen = compressBound((uLong)raw_len);
    size_t cap = 8 + (12 + 13) + (12 + (size_t)zlen) + 12;
    unsigned char *file = xmalloc(cap);
    /* The IDAT data is compressed straight into its place in the file buffer. */
    unsigned char *idat = file + 8 + 25 + 8;
    int zrc = compress2(idat, &zlen, raw, (uLong)raw_len, 6);
    free(raw);
    if (zrc != Z_OK) {
        errmsg_set(err, errlen, "%s: zlib compress2 failed: %s", path, zError(zrc));
        free(file);
        return -1;
    }
    static const unsigned char sig[8] = {137, 'P', 'N', 'G', '\r', '\n', 26, '\n'};
    unsigned char ihdr[13];
    put_be32(ihdr, (uint32_t)w);
    put_be32(ihdr + 4, (uint32_t)h);
    ihdr[8] = 8;  /* bit depth */
    ihdr[9] = 2;  /* colour type: truecolour */
    ihdr[10] = 0; /* deflate */
    ihdr[11] = 0; /* adaptive filtering (we use filter 0 everywhere) */
    ihdr[12] = 0; /* no interlace */
    memcpy(file, sig, 8);
    size_t n = 8;
    n += put_chunk(file + n, "IHDR", ihdr, 13);
    n += put_chunk(file + n, "IDAT", idat, zlen);
    n += put_chunk(file + n, "IEND", NULL, 0);
    int rc = write_atomic(path, file, n, err, errlen);
    free(file);
    return rc;
}
