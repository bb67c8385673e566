/*
 * Text of the charts (plot_internal.h) with cairo's own font API: a sans-serif face
 * found by fontconfig, antialiased. Labels come from users (workload and policy
 * names), so every string is cleaned to printable ASCII first: cairo refuses invalid
 * UTF-8 with an error that would otherwise fail the whole chart.
 */
#include "report/plot_internal.h"

#include <string.h>

void plot_text_clean(char buf[PLOT_TEXT_MAX], const char *s)
{
    size_t n = 0;
    for (; s && s[n] && n < PLOT_TEXT_MAX - 1; n++)
        buf[n] = s[n] >= 0x20 && s[n] < 0x7f ? s[n] : '?';
    buf[n] = '\0';
}

void plot_font(cairo_t *cr, double size, int bold)
{
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

double plot_text_width(cairo_t *cr, const char *s)
{
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    return e.x_advance;
}

const char *plot_text_fit(cairo_t *cr, char buf[PLOT_TEXT_MAX], const char *s, double maxw)
{
    plot_text_clean(buf, s);
    size_t n = strlen(buf);
    if (plot_text_width(cr, buf) <= maxw) return buf;
    /* One glyph at a time: labels are short. The "..." and its terminator must fit
     * the buffer, so the cut starts at most 4 bytes before its end. */
    if (n > PLOT_TEXT_MAX - 3) n = PLOT_TEXT_MAX - 3;
    while (n > 0) {
        n--;
        memcpy(buf + n, "...", 4);
        if (plot_text_width(cr, buf) <= maxw) return buf;
    }
    buf[0] = '\0';
    return buf;
}

void plot_text(cairo_t *cr, double x, double y, const char *s, double maxw, double ha,
               double angle)
{
    char buf[PLOT_TEXT_MAX];
    plot_text_fit(cr, buf, s, maxw);
    if (!buf[0]) return;
    cairo_text_extents_t cap;
    cairo_text_extents(cr, "H", &cap);
    cairo_save(cr);
    cairo_translate(cr, x, y);
    cairo_rotate(cr, angle);
    cairo_move_to(cr, -ha * plot_text_width(cr, buf), cap.height / 2);
    cairo_show_text(cr, buf);
    cairo_restore(cr);
}
