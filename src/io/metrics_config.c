/*
 * The resolved configuration as a structured group of the metrics file (include/
 * libra/metrics.h, metrics_config_group): /config/<section> holds one attribute per
 * key, typed from its value -- int64 for integers, float64 for other numbers, a 1-D
 * int64 array for integer lists (plan.rollout_tp), a string for strings (without the
 * quotes) and for anything else as libconfig writes it (plan.schedule, sched.buckets).
 * The root attribute `config` keeps the whole text; this group lets an analyst read
 * f["config/train"].attrs["lr"] instead of parsing it. Written once, at the start.
 */
#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/h5try.h"
#include "libra/log.h"
#include "libra/metrics.h"

#define LIST_MAX 1024 /* integers in one list attribute */

static const char *const path = NULL; /* H5TRY's: the messages name the metrics file's writer */

/* value as a whole integer / finite number; 1 if it is one. */
static int as_int(const char *v, long long *out)
{
    char *end;
    errno = 0;
    *out = strtoll(v, &end, 10);
    return end != v && *end == '\0' && errno == 0;
}

static int as_double(const char *v, double *out)
{
    char *end;
    *out = strtod(v, &end);
    return end != v && *end == '\0' && isfinite(*out);
}

/* "[1, 2, 4]" into out; the count, or -1 if it is not such a list. */
static int as_int_list(const char *v, long long *out, int cap)
{
    if (v[0] != '[') return -1;
    int n = 0;
    const char *p = v + 1;
    while (*p == ' ') p++;
    if (*p == ']') return p[1] == '\0' ? 0 : -1;
    for (;;) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || n == cap) return -1;
        out[n++] = x;
        p = end;
        while (*p == ' ') p++;
        if (*p == ']') return p[1] == '\0' ? n : -1;
        if (*p++ != ',') return -1;
        while (*p == ' ') p++;
    }
}

static int put_attr(hid_t g, const char *key, const char *v, char *err, size_t errlen)
{
    long long i, list[LIST_MAX];
    double d;
    int n;
    size_t len = strlen(v);
    if (as_int(v, &i)) {
        int64_t x = i;
        return h5_attr_put(g, key, H5T_STD_I64LE, H5T_NATIVE_INT64, &x, path, err, errlen);
    }
    if (as_double(v, &d))
        return h5_attr_put(g, key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &d, path, err, errlen);
    if ((n = as_int_list(v, list, LIST_MAX)) > 0) {
        int64_t x[LIST_MAX];
        for (int k = 0; k < n; k++) x[k] = list[k];
        return h5_attr_put_array(g, key, H5T_STD_I64LE, H5T_NATIVE_INT64, x, (size_t)n, path,
                                 err, errlen);
    }
    /* a string without its quotes; anything else as written */
    char *s = xstrdup(v);
    if (len >= 2 && v[0] == '"' && v[len - 1] == '"') {
        memmove(s, v + 1, len - 2);
        s[len - 2] = '\0';
    }
    int rc = h5_attr_put_string(g, key, s, path, err, errlen);
    free(s);
    return rc;
}

/* Opens /config/<section>, made the first time. */
static hid_t section_group(hid_t config, const char *section, char *err, size_t errlen)
{
    hid_t g = H5I_INVALID_HID;
    htri_t has;
    H5TRY(has = H5Lexists(config, section, H5P_DEFAULT));
    if (has) H5TRY(g = H5Gopen2(config, section, H5P_DEFAULT));
    else H5TRY(g = H5Gcreate2(config, section, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    return g;
fail:
    return H5I_INVALID_HID;
}

static int write_config(int64_t file, void *arg, char *err, size_t errlen)
{
    const char *flat = arg;
    hid_t config = H5I_INVALID_HID, g = H5I_INVALID_HID;
    H5TRY(config = H5Gcreate2((hid_t)file, "config", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    for (const char *line = flat; *line;) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        char *text = xmalloc(n + 1);
        memcpy(text, line, n);
        text[n] = '\0';
        line += n + (nl != NULL);
        char *dot = strchr(text, '.'), *eq = strstr(text, " = ");
        if (!dot || !eq || dot > eq) {
            snprintf(err, errlen, "/config: not a \"section.key = value\" line: %.200s", text);
            free(text);
            goto fail;
        }
        *dot = '\0';
        *eq = '\0';
        if ((g = section_group(config, text, err, errlen)) < 0 ||
            put_attr(g, dot + 1, eq + 3, err, errlen)) {
            free(text);
            goto fail;
        }
        free(text);
        H5TRY(H5Gclose(g));
        g = H5I_INVALID_HID;
    }
    H5TRY(H5Gclose(config));
    return 0;
fail:
    if (g >= 0) H5Gclose(g);
    if (config >= 0) H5Gclose(config);
    return -1;
}

int metrics_config_group(struct metrics *m, const char *flat)
{
    return metrics_write_with(m, write_config, (void *)flat);
}
