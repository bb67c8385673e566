/* HDF5 error handling shared by the HDF5 writers and readers (libra/h5util.h). */
#include "libra/h5util.h"

#include <stdio.h>
#include <string.h>

void h5_quiet_begin(struct h5quiet *q)
{
    q->fn = NULL;
    q->data = NULL;
    H5Eget_auto2(H5E_DEFAULT, &q->fn, &q->data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void h5_quiet_end(const struct h5quiet *q) { H5Eset_auto2(H5E_DEFAULT, q->fn, q->data); }

struct h5walk {
    char inner[512]; /* where the error was detected (most specific) */
    char outer[256]; /* the API call's own message */
    unsigned depth;
};

static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *data)
{
    struct h5walk *w = data;
    char minor[128] = "";
    if (H5Eget_msg(e->min_num, NULL, minor, sizeof minor) < 0) minor[0] = '\0';
    if (n == 0)
        snprintf(w->inner, sizeof w->inner, "%s (%s, in %s)", e->desc ? e->desc : "?", minor,
                 e->func_name ? e->func_name : "?");
    else
        snprintf(w->outer, sizeof w->outer, "%s", e->desc ? e->desc : "?");
    w->depth = n + 1;
    return 0;
}

void h5_error(char *err, size_t errlen, const char *path, const char *expr, const char *file,
              int line)
{
    /* "x = H5Fcreate(path, ...)" -> "H5Fcreate" */
    char call[64];
    const char *c = strstr(expr, "H5");
    c = c ? c : expr;
    size_t n = strcspn(c, "(");
    snprintf(call, sizeof call, "%.*s", (int)(n < sizeof call ? n : sizeof call - 1), c);
    struct h5walk w = {"", "", 0};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, &w);
    if (err && errlen) {
        char pre[600] = "";
        if (path) snprintf(pre, sizeof pre, "%s: ", path);
        if (w.depth == 0)
            snprintf(err, errlen, "%s%s failed (%s:%d): no HDF5 error stack", pre, call, file,
                     line);
        else if (w.depth == 1)
            snprintf(err, errlen, "%s%s failed (%s:%d): %s", pre, call, file, line, w.inner);
        else
            snprintf(err, errlen, "%s%s failed (%s:%d): %s: %s", pre, call, file, line, w.outer,
                     w.inner);
    }
    H5Eclear2(H5E_DEFAULT);
}
