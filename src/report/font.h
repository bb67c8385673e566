/*
 * A built-in 5x7 bitmap font (printable ASCII 32..126) for chart labels, drawn at an
 * integer scale (1 or 2 in practice). Each character takes FONT_ADV x FONT_H pixels
 * times the scale (5 columns of ink, 1 of spacing); characters outside 32..126 are
 * drawn as '?'. Drawing is clipped to the raster.
 */
#ifndef LIBRA_REPORT_FONT_H
#define LIBRA_REPORT_FONT_H

#include "report/png.h"

#define FONT_W 5   /* glyph ink width, pixels at scale 1 */
#define FONT_H 7   /* glyph height */
#define FONT_ADV 6 /* advance per character */

/* Width in pixels of s at scale: strlen(s) * FONT_ADV * scale (0 for NULL). */
int font_text_width(const char *s, int scale);

/* Left to right, (x, y) the top-left corner of the first character. */
void font_draw(struct raster *r, int x, int y, const char *s, int scale,
               const unsigned char rgb[3]);

/* Rotated a quarter turn counter-clockwise (reads bottom to top, as a y-axis label):
 * (x, y) is the bottom-left corner of the rotated text, which spans x .. x + FONT_H *
 * scale - 1 and upward from y by font_text_width(s, scale). */
void font_draw_up(struct raster *r, int x, int y, const char *s, int scale,
                  const unsigned char rgb[3]);

#endif
