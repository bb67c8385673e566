/*
 * Table-driven reading of small libconfig files (include/libra/cfg_table.h): the
 * file and top-level group checks, unknown and missing keys, number ranges with
 * the int-versus-float rule, bounded strings. Shared by the profile and workload
 * loaders, whose messages the tests pin down, so the wording here is fixed.
 *
 * Limits: messages are cut at 512 bytes and the known-keys list at 512 bytes
 * (then at the caller's errlen); numbers outside the int range are rejected by
 * the table's bounds, which must therefore lie within it for CFGT_INT fields.
 */
#define _POSIX_C_SOURCE 200809L /* fileno, fstat */
#include "libra/cfg_table.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int cfgt_fail(const struct cfgt_ctx *ctx, int line, const char *prefix, const char *key, const char *fmt,
              ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(ctx->err, ctx->errlen, "%s:%d: %s%s: %s", ctx->path, line, prefix, key, msg);
    return -1;
}

const char *cfgt_type_name(int type)
{
    switch (type) {
    case CONFIG_TYPE_GROUP: return "a group";
    case CONFIG_TYPE_ARRAY: return "an array";
    case CONFIG_TYPE_LIST: return "a list";
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64: return "an integer";
    case CONFIG_TYPE_FLOAT: return "a number";
    case CONFIG_TYPE_STRING: return "a string";
    case CONFIG_TYPE_BOOL: return "a boolean";
    default: return "something else";
    }
}

int cfgt_line_of(const config_setting_t *grp, const char *key)
{
    const config_setting_t *s = config_setting_get_member(grp, key);
    return config_setting_source_line(s ? s : grp);
}

int cfgt_open(const struct cfgt_ctx *ctx, config_t *cfg, const char *syntax_hint)
{
    config_init(cfg);
    FILE *fp = fopen(ctx->path, "r");
    struct stat st;
    if (fp && fstat(fileno(fp), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(fp); /* libconfig's scanner would exit() on reading a directory */
        fp = NULL;
        errno = EISDIR;
    }
    if (!fp) {
        snprintf(ctx->err, ctx->errlen, "%s: cannot read: %s", ctx->path, strerror(errno));
        return -1;
    }
    int ok = config_read(cfg, fp);
    fclose(fp);
    if (ok != CONFIG_TRUE) {
        snprintf(ctx->err, ctx->errlen, "%s:%d: cannot parse: %s (libconfig syntax: %s)", ctx->path,
                 config_error_line(cfg), config_error_text(cfg), syntax_hint);
        return -1;
    }
    return 0;
}

const config_setting_t *cfgt_top_group(const struct cfgt_ctx *ctx, const config_t *cfg, const char *name)
{
    const config_setting_t *root = config_root_setting(cfg);
    for (int i = 0; i < config_setting_length(root); i++) {
        const config_setting_t *s = config_setting_get_elem(root, (unsigned)i);
        if (strcmp(config_setting_name(s), name) != 0) {
            cfgt_fail(ctx, config_setting_source_line(s), "", config_setting_name(s),
                      "unknown top-level setting (this file holds one group: %s = { ... };)", name);
            return NULL;
        }
    }
    const config_setting_t *g = config_setting_get_member(root, name);
    if (!g) {
        cfgt_fail(ctx, 1, "", name, "missing group (expected %s = { ... };)", name);
        return NULL;
    }
    if (!config_setting_is_group(g)) {
        cfgt_fail(ctx, config_setting_source_line(g), "", name, "is %s, expected a group { ... }",
                  cfgt_type_name(config_setting_type(g)));
        return NULL;
    }
    return g;
}

/* Every member of grp must be in the table; the message lists the table's keys. */
static int reject_unknown(const struct cfgt_ctx *ctx, const config_setting_t *grp, const char *prefix,
                          const struct cfgt_field *f, size_t n)
{
    for (int i = 0; i < config_setting_length(grp); i++) {
        const config_setting_t *s = config_setting_get_elem(grp, (unsigned)i);
        const char *name = config_setting_name(s);
        int known = 0;
        for (size_t k = 0; k < n && !known; k++) known = strcmp(f[k].key, name) == 0;
        if (known) continue;
        char list[512] = "";
        for (size_t k = 0; k < n; k++) {
            strncat(list, f[k].key, sizeof list - strlen(list) - 1);
            if (k + 1 < n) strncat(list, ", ", sizeof list - strlen(list) - 1);
        }
        return cfgt_fail(ctx, config_setting_source_line(s), prefix, name, "unknown key (known keys: %s)", list);
    }
    return 0;
}

/* A string into dst[f->size]: non-empty, fits with its NUL. */
static int read_string(const struct cfgt_ctx *ctx, const config_setting_t *s, const char *prefix,
                       const struct cfgt_field *f, char *dst)
{
    int line = config_setting_source_line(s), type = config_setting_type(s);
    if (type != CONFIG_TYPE_STRING)
        return cfgt_fail(ctx, line, prefix, f->key, "is %s, expected a string in quotes (%s)",
                         cfgt_type_name(type), f->hint);
    const char *v = config_setting_get_string(s);
    if (!*v || strlen(v) >= f->size)
        return cfgt_fail(ctx, line, prefix, f->key, "\"%s\" must have 1 to %zu characters (%s)", v,
                         f->size - 1, f->hint);
    memcpy(dst, v, strlen(v) + 1);
    return 0;
}

/* A CFGT_REAL or CFGT_INT field into the int or double at dst. */
static int read_number(const struct cfgt_ctx *ctx, const config_setting_t *s, const char *prefix,
                       const struct cfgt_field *f, char *dst)
{
    int line = config_setting_source_line(s), type = config_setting_type(s);
    double v;
    if (type == CONFIG_TYPE_INT)
        v = config_setting_get_int(s);
    else if (type == CONFIG_TYPE_INT64)
        v = (double)config_setting_get_int64(s);
    else if (type == CONFIG_TYPE_FLOAT)
        v = config_setting_get_float(s);
    else
        return cfgt_fail(ctx, line, prefix, f->key, "is %s, expected a number (%s)", cfgt_type_name(type),
                         f->hint);
    if (f->kind == CFGT_INT && type == CONFIG_TYPE_FLOAT)
        return cfgt_fail(ctx, line, prefix, f->key,
                         "%g must be an integer, written without a decimal point (%s)", v, f->hint);
    int below = f->lo_open ? !(v > f->lo) : !(v >= f->lo);
    if (below || !(v <= f->hi))
        return cfgt_fail(ctx, line, prefix, f->key, "%g is out of range, must be in %s%g, %g] (%s)", v,
                         f->lo_open ? "(" : "[", f->lo, f->hi, f->hint);
    if (f->kind == CFGT_INT)
        *(int *)dst = (int)v;
    else
        *(double *)dst = v;
    return 0;
}

int cfgt_read_fields(const struct cfgt_ctx *ctx, const config_setting_t *grp, const char *prefix,
                     const struct cfgt_field *fields, size_t n, void *dst)
{
    if (reject_unknown(ctx, grp, prefix, fields, n) != 0) return -1;
    for (size_t i = 0; i < n; i++) {
        const struct cfgt_field *f = &fields[i];
        const config_setting_t *s = config_setting_get_member(grp, f->key);
        char *p = (char *)dst + f->off;
        if (!s)
            return cfgt_fail(ctx, config_setting_source_line(grp), prefix, f->key,
                             "missing (every key is required: %s)", f->hint);
        if (f->kind == CFGT_STRING && read_string(ctx, s, prefix, f, p) != 0) return -1;
        if ((f->kind == CFGT_REAL || f->kind == CFGT_INT) && read_number(ctx, s, prefix, f, p) != 0) return -1;
    }
    return 0;
}

int cfgt_load(const struct cfgt_ctx *ctx, const char *syntax_hint, const char *name,
              const struct cfgt_field *fields, size_t n, void *dst, cfgt_finish_fn *finish)
{
    config_t cfg;
    int rc = -1;
    if (cfgt_open(ctx, &cfg, syntax_hint) != 0) goto done;
    const config_setting_t *g = cfgt_top_group(ctx, &cfg, name);
    if (!g || cfgt_read_fields(ctx, g, "", fields, n, dst) != 0) goto done;
    rc = finish ? finish(ctx, g, dst) : 0;
done:
    config_destroy(&cfg);
    return rc;
}
