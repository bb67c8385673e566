/*
 * Table-driven reading of small libconfig files (hardware and model profiles,
 * workload presets): one top-level group whose keys a field table describes --
 * key, kind, place in the destination struct, allowed range, hint.
 *
 * Every error is written into the context's buffer as
 *     path:line: <prefix><key>: what is wrong (hint)
 * and the function returns -1 (NULL for cfgt_top_group); nothing here exits.
 * Limits: every key of a table is required (no defaults), numbers are int or
 * double, strings go into fixed buffers; lists and other shapes are CFGT_CUSTOM
 * fields that the caller reads itself. One top-level group per file, no @include.
 */
#ifndef LIBRA_CFG_TABLE_H
#define LIBRA_CFG_TABLE_H

#include <libconfig.h>
#include <stddef.h>

/* One load: the file named in messages and the caller's error buffer. */
struct cfgt_ctx {
    const char *path;
    char *err;
    size_t errlen;
};

enum cfgt_kind {
    CFGT_REAL,   /* double; an integer literal is accepted */
    CFGT_INT,    /* int; written without a decimal point */
    CFGT_STRING, /* char[size]: 1 to size - 1 characters */
    CFGT_CUSTOM, /* presence required; the caller reads and checks it */
};

/* One required key. Numbers must lie in [lo, hi], or (lo, hi] when lo_open. */
struct cfgt_field {
    const char *key;
    enum cfgt_kind kind;
    size_t off;  /* offset in the destination struct (unused for CFGT_CUSTOM) */
    size_t size; /* CFGT_STRING: buffer bytes including the NUL */
    double lo, hi;
    int lo_open;
    const char *hint; /* unit or meaning, appended to every message about the key */
};

#define CFGT_REAL_FIELD(T, k, lo, hi, lo_open, hint) {#k, CFGT_REAL, offsetof(T, k), 0, lo, hi, lo_open, hint}
#define CFGT_INT_FIELD(T, k, lo, hi, hint) {#k, CFGT_INT, offsetof(T, k), 0, lo, hi, 0, hint}
#define CFGT_STRING_FIELD(T, k, hint) {#k, CFGT_STRING, offsetof(T, k), sizeof(((T *)0)->k), 0, 0, 0, hint}
#define CFGT_CUSTOM_FIELD(k, hint) {#k, CFGT_CUSTOM, 0, 0, 0, 0, 0, hint}
#define CFGT_COUNT(table) (sizeof(table) / sizeof((table)[0]))

/* Writes "path:line: <prefix><key>: <fmt>" into ctx->err and returns -1. */
int cfgt_fail(const struct cfgt_ctx *ctx, int line, const char *prefix, const char *key, const char *fmt,
              ...) __attribute__((format(printf, 5, 6)));

/* "an integer", "a group", ... for a CONFIG_TYPE_* value. */
const char *cfgt_type_name(int type);

/* Source line of member key of grp (the group's own line if absent). */
int cfgt_line_of(const config_setting_t *grp, const char *key);

/* Initialises cfg and reads ctx->path into it; the caller destroys cfg either way.
 * syntax_hint follows "libconfig syntax: " in a parse error. */
int cfgt_open(const struct cfgt_ctx *ctx, config_t *cfg, const char *syntax_hint);

/* The one top-level group `name`; any other top-level setting is an error. */
const config_setting_t *cfgt_top_group(const struct cfgt_ctx *ctx, const config_t *cfg, const char *name);

/* Rejects members of grp not in fields[0..n), then reads every field into dst in
 * table order (all required; CFGT_CUSTOM ones are only checked for presence).
 * prefix goes before each key in messages, e.g. "tools[2]." or "". */
int cfgt_read_fields(const struct cfgt_ctx *ctx, const config_setting_t *grp, const char *prefix,
                     const struct cfgt_field *fields, size_t n, void *dst);

/* The caller's part of a load: cross-key rules and CFGT_CUSTOM fields of grp,
 * after the table was read into dst. Returns 0 or -1 (via cfgt_fail). */
typedef int cfgt_finish_fn(const struct cfgt_ctx *ctx, const config_setting_t *grp, void *dst);

/* A whole file: cfgt_open, cfgt_top_group(name), cfgt_read_fields with prefix "",
 * then finish (may be NULL). The parsed file lives only during the call. */
int cfgt_load(const struct cfgt_ctx *ctx, const char *syntax_hint, const char *name,
              const struct cfgt_field *fields, size_t n, void *dst, cfgt_finish_fn *finish);

#endif
