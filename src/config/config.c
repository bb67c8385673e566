/*
 * Loading and validating a run configuration (include/libra/config.h).
 *
 * config_load works in passes over one libconfig file, each stopping at the first
 * problem with exactly one message in err:
 *   1. read the text (missing or unreadable file), parse it (syntax errors), and
 *      scan the raw text for integer literals libconfig 1.5 silently wraps;
 *   2. names: every section and key must be in the schema (did-you-mean hints);
 *   3. values: type, range, allowed values, path resolution, row by row; a key
 *      the run does not use (its row's `when` condition, e.g. a la_mlfq key with
 *      sched.type = "cmlfq") is rejected here, so no key given is ignored;
 *      sched.buckets is read by dedicated code (a list of groups);
 *   4. the plan: the static plan or plan.schedule (dedicated code, same rows);
 *   5. cross-key rules (batch_size vs n_samples, per-turn vs total tokens, the
 *      scheduler's default bucket and payload classes).
 * The caller's struct is written only on success. Files pulled in with @include
 * are parsed but not scanned for wide integers (pass 1).
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include "libra/config.h"

#include <ctype.h>
#include <errno.h>
#include <libconfig.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_schema.h"
#include "libra/inputs.h"
#include "libra/log.h"

struct load_ctx {
    const char *path; /* the config file, as the caller named it */
    char *err;
    size_t errlen;
    char incdir[CFG_PATH_MAX]; /* directory of path ("" = the working directory) */
};

/* The file a setting (or a parse error) comes from, usable from the working
 * directory: libconfig 1.5 records an included file by the name written in the
 * @include, which is relative to incdir. */
static const char *source_path(const struct load_ctx *c, const char *f, char *buf, size_t n)
{
    if (!f || strcmp(f, c->path) == 0) return c->path;
    if (f[0] == '/' || !c->incdir[0]) return f;
    snprintf(buf, n, "%s/%s", c->incdir, f);
    return buf;
}

/* ---- messages ---------------------------------------------------------------- */

/* "file:line: name: <fmt>" into err; line and name are left out when 0 / NULL. */
static int vfail_line(const struct load_ctx *c, const char *file, unsigned line,
                      const char *name, const char *fmt, va_list ap)
{
    if (!c->err || c->errlen == 0) return -1;
    int n = line ? snprintf(c->err, c->errlen, "%s:%u: ", file, line)
                 : snprintf(c->err, c->errlen, "%s: ", file);
    if (name && n >= 0 && (size_t)n < c->errlen)
        n += snprintf(c->err + n, c->errlen - (size_t)n, "%s: ", name);
    if (n >= 0 && (size_t)n < c->errlen) vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
    return -1;
}

static int fail_line(const struct load_ctx *c, unsigned line, const char *name,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail_line(const struct load_ctx *c, unsigned line, const char *name,
                     const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail_line(c, c->path, line, name, fmt, ap);
    va_end(ap);
    return -1;
}

/* Located at setting `at` (its file and line), or at the file alone when NULL.
 * Always returns -1 so callers can `return fail(...)`. */
static int fail(const struct load_ctx *c, const config_setting_t *at, const char *name,
                const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(const struct load_ctx *c, const config_setting_t *at, const char *name,
                const char *fmt, ...)
{
    char buf[2 * CFG_PATH_MAX];
    const char *file = source_path(c, at ? config_setting_source_file(at) : NULL, buf, sizeof buf);
    va_list ap;
    va_start(ap, fmt);
    vfail_line(c, file, at ? config_setting_source_line(at) : 0, name, fmt, ap);
    va_end(ap);
    return -1;
}

/* What a setting is, for "expected X, got Y". */
static const char *kind(const config_setting_t *s)
{
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_GROUP: return "a group";
    case CONFIG_TYPE_INT: return "an integer";
    case CONFIG_TYPE_INT64: return "a 64-bit integer";
    case CONFIG_TYPE_FLOAT: return "a float";
    case CONFIG_TYPE_STRING: return "a string";
    case CONFIG_TYPE_BOOL: return "a boolean";
    case CONFIG_TYPE_ARRAY: return "an array";
    case CONFIG_TYPE_LIST: return "a list";
    }
    return "an unknown kind of value";
}

/* ---- names and did-you-mean --------------------------------------------------- */

/* Levenshtein distance; names longer than 63 characters count as far from all. */
static int edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return INT_MAX;
    int row[64];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return (int)row[lb];
}

static const struct cfg_section *find_section(const char *name)
{
    for (const struct cfg_section *s = cfg_sections; s->name; s++)
        if (strcmp(s->name, name) == 0) return s;
    return NULL;
}

static const char *closest_section(const char *name)
{
    const char *best = NULL;
    int best_d = 3; /* suggest only within distance 2 */
    for (const struct cfg_section *s = cfg_sections; s->name; s++) {
        int d = edit_distance(name, s->name);
        if (d < best_d) best_d = d, best = s->name;
    }
    return best;
}

/* Closest key of section within distance 2 (only plan-spec keys if spec_only). */
static const char *closest_key(const char *section, const char *key, int spec_only)
{
    const char *best = NULL;
    int best_d = 3;
    for (const struct cfg_key *k = cfg_schema; k->section; k++) {
        if (strcmp(k->section, section) != 0 || (spec_only && !(k->flags & CFG_SPEC))) continue;
        int d = edit_distance(key, k->key);
        if (d < best_d) best_d = d, best = k->key;
    }
    return best;
}

/* A key of that exact name in any section (for keys put in the wrong place). */
static const struct cfg_key *key_anywhere(const char *key)
{
    for (const struct cfg_key *k = cfg_schema; k->section; k++)
        if (strcmp(k->key, key) == 0) return k;
    return NULL;
}

static void list_keys(const char *section, int spec_only, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (const struct cfg_key *k = cfg_schema; k->section && len < n; k++) {
        if (strcmp(k->section, section) != 0 || (spec_only && !(k->flags & CFG_SPEC))) continue;
        len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? ", " : "", k->key);
    }
}

static void list_sections(char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (const struct cfg_section *s = cfg_sections; s->name && len < n; s++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", len ? ", " : "", s->name);
}

static int unknown_section(const struct load_ctx *c, const config_setting_t *s)
{
    const char *name = config_setting_name(s);
    const char *near = closest_section(name);
    if (near) return fail(c, s, name, "unknown section (did you mean '%s'?)", near);
    const struct cfg_key *k = key_anywhere(name);
    if (k)
        return fail(c, s, name, "unknown top-level setting (keys live inside a section: "
                                "did you mean '%s.%s'?)", k->section, k->key);
    char all[256];
    list_sections(all, sizeof all);
    return fail(c, s, name, "unknown section (the sections are %s)", all);
}

/* An unknown key in a section (spec_only: inside a plan.schedule group). */
static int unknown_key(const struct load_ctx *c, const config_setting_t *s, const char *section,
                       const char *name, int spec_only)
{
    const char *key = config_setting_name(s);
    const char *near = closest_key(section, key, spec_only);
    if (near) return fail(c, s, name, "unknown key (did you mean '%s'?)", near);
    const struct cfg_key *k = key_anywhere(key);
    if (k && !spec_only)
        return fail(c, s, name, "unknown key in section '%s' (did you mean '%s.%s'?)", section,
                    k->section, k->key);
    char all[512];
    list_keys(section, spec_only, all, sizeof all);
    return fail(c, s, name, "unknown key (%s takes %s)",
                spec_only ? "a schedule group" : section, all);
}

/* Pass 2: every top-level setting is a known section (a group) holding known keys.
 * Keys inside plan.schedule groups are checked when the schedule is read. */
static int check_names(const struct load_ctx *c, const config_setting_t *root)
{
    for (int i = 0; i < config_setting_length(root); i++) {
        const config_setting_t *sec = config_setting_get_elem(root, (unsigned)i);
        const char *sname = config_setting_name(sec);
        if (!find_section(sname)) return unknown_section(c, sec);
        if (!config_setting_is_group(sec))
            return fail(c, sec, sname, "expected a group, got %s (write %s = { key = value; };)",
                        kind(sec), sname);
        for (int j = 0; j < config_setting_length(sec); j++) {
            const config_setting_t *s = config_setting_get_elem(sec, (unsigned)j);
            char name[160];
            snprintf(name, sizeof name, "%s.%s", sname, config_setting_name(s));
            if (!cfg_schema_find(sname, config_setting_name(s)))
                return unknown_key(c, s, sname, name, 0);
        }
    }
    return 0;
}

/* ---- pass 1: reading and parsing ---------------------------------------------- */

#define CFG_TEXT_MAX (16u << 20) /* no config is this large; stops reading /dev/zero */

/* The whole file, NUL-terminated, in *text (caller frees). */
static int read_text(const struct load_ctx *c, char **text)
{
    FILE *f = fopen(c->path, "r");
    if (!f)
        return fail(c, NULL, NULL, "cannot read: %s (check the path; example configs are in "
                                   "inputs/, e.g. inputs/emu-quick.cfg)", strerror(errno));
    size_t len = 0, cap = 0;
    char *buf = NULL;
    for (;;) {
        XGROW(buf, cap, len + 4097);
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0 || len > CFG_TEXT_MAX) break;
    }
    int bad = ferror(f), e = errno;
    fclose(f);
    buf[len] = '\0';
    if (len > CFG_TEXT_MAX) {
        free(buf);
        return fail(c, NULL, NULL, "cannot read: larger than %u MiB (is this a config file?)",
                    CFG_TEXT_MAX >> 20);
    }
    if (bad) {
        free(buf);
        return fail(c, NULL, NULL, "cannot read: %s (name a libconfig file, e.g. "
                                   "inputs/emu-quick.cfg)", strerror(e));
    }
    *text = buf;
    return 0;
}

/* Every @include of text (the file `file`; nested ones followed, depth at most 10)
 * names a regular file in double quotes on its line: libconfig's scanner ends the
 * process ("input in flex scanner failed") when it opens a directory -- an @include
 * of one, or of a name it cannot take (empty, or across a line break), which it opens
 * as the include directory itself -- so those are refused here with the file and
 * line. Missing files are left to libconfig's own message. */
static int check_includes(const struct load_ctx *c, const char *file, const char *text,
                          int depth)
{
    unsigned line = 1;
    for (const char *p = text; *p; line++) {
        const char *nl = strchr(p, '\n');
        const char *q = p;
        while (*q == ' ' || *q == '\t') q++;
        if (strncmp(q, "@include", 8) == 0) {
            const char *a = strchr(q, '"'), *b = a ? strchr(a + 1, '"') : NULL;
            struct load_ctx at = *c;
            at.path = file;
            /* libconfig opens the include directory itself for a name it cannot take */
            if (!a || (nl && a > nl) || !b || (nl && b > nl))
                return fail_line(&at, line, NULL, "@include needs its file name in double "
                                 "quotes on the same line (@include \"file.cfg\")");
            if (b == a + 1)
                return fail_line(&at, line, NULL, "@include \"\": an empty file name "
                                 "(@include \"file.cfg\")");
            if (b - a - 1 < CFG_PATH_MAX) {
                char name[CFG_PATH_MAX], full[2 * CFG_PATH_MAX + 2];
                snprintf(name, sizeof name, "%.*s", (int)(b - a - 1), a + 1);
                if (name[0] == '/' || !c->incdir[0]) snprintf(full, sizeof full, "%s", name);
                else snprintf(full, sizeof full, "%s/%s", c->incdir, name);
                struct stat st;
                if (stat(full, &st) == 0 && !S_ISREG(st.st_mode))
                    return fail_line(&at, line, NULL, "@include \"%s\": not a regular file "
                                     "(a directory? @include names a config file)", name);
                if (depth >= 10)
                    return fail_line(&at, line, NULL, "@include nested more than 10 deep "
                                     "(an include cycle?)");
                FILE *f = stat(full, &st) == 0 ? fopen(full, "r") : NULL;
                if (f) {
                    size_t cap = (size_t)st.st_size + 1;
                    char *inc = xmalloc(cap);
                    size_t got = fread(inc, 1, cap - 1, f);
                    inc[got] = '\0';
                    fclose(f);
                    int rc = check_includes(c, full, inc, depth + 1);
                    free(inc);
                    if (rc) return rc;
                }
            }
        }
        if (!nl) break;
        p = nl + 1;
    }
    return 0;
}

/* @include "x.cfg" is read relative to the including file's directory, like the
 * profile paths, not relative to the working directory (libconfig's default). */
static int parse(const struct load_ctx *c, config_t *lc)
{
    if (c->incdir[0]) config_set_include_dir(lc, c->incdir);
    if (config_read_file(lc, c->path) == CONFIG_TRUE) return 0;
    if (config_error_type(lc) == CONFIG_ERR_FILE_IO)
        return fail(c, NULL, NULL, "cannot read: %s (check the path and any @include)",
                    config_error_text(lc));
    char buf[2 * CFG_PATH_MAX];
    const char *file = source_path(c, config_error_file(lc), buf, sizeof buf);
    const char *text = config_error_text(lc);
    const char *hint = "libconfig syntax is section = { key = value; }; with strings in "
                       "double quotes; a missing ';' is reported on the next line";
    if (strstr(text, "duplicate")) hint = "each key may appear once per section";
    if (strstr(text, "include")) hint = "@include paths are relative to the including file";
    struct load_ctx at = *c;
    at.path = file;
    return fail_line(&at, (unsigned)config_error_line(lc), NULL, "%s (%s)", text, hint);
}

/* Scans one numeric literal at *pp (the digits; neg if a '-' precedes them) and
 * returns 32 or 64 when it does not fit the integer type libconfig 1.5 gives it,
 * else 0. Floats are skipped. */
static int literal_too_wide(const char **pp, int neg)
{
    const char *p = *pp;
    unsigned long long v = 0;
    int big = 0, hex = p[0] == '0' && (p[1] == 'x' || p[1] == 'X');
    if (hex) p += 2;
    for (; hex ? isxdigit((unsigned char)*p) : isdigit((unsigned char)*p); p++) {
        int d = isdigit((unsigned char)*p) ? *p - '0' : tolower((unsigned char)*p) - 'a' + 10;
        if (v > (ULLONG_MAX - 15) / 16) big = 1;
        else v = v * (hex ? 16 : 10) + (unsigned)d;
    }
    if (!hex && (*p == '.' || *p == 'e' || *p == 'E')) {
        while (*p && (isdigit((unsigned char)*p) || strchr(".eE+-", *p))) p++;
        *pp = p;
        return 0;
    }
    int wide = *p == 'L';
    while (*p == 'L') p++;
    *pp = p;
    unsigned long long lim = wide ? (neg ? 1ULL << 63 : (1ULL << 63) - 1)
                                  : (neg ? 1ULL << 31 : (1ULL << 31) - 1);
    return big || v > lim ? (wide ? 64 : 32) : 0;
}

/* libconfig 1.5 reads an integer literal beyond its type by wrapping it
 * (seed = 5000000000 becomes 705032704) and says nothing. Finds the first such
 * literal in the raw text, skipping comments and strings: returns its line (0 =
 * none) and copies it into lit, its width into *bits. */
static int scan_wide_literals(const char *text, char *lit, size_t litsz, int *bits)
{
    int line = 1;
    for (const char *p = text; *p;) {
        if (*p == '\n') {
            line++, p++;
        } else if (*p == '#' || (p[0] == '/' && p[1] == '/')) {
            while (*p && *p != '\n') p++;
        } else if (p[0] == '/' && p[1] == '*') {
            for (p += 2; *p && !(p[0] == '*' && p[1] == '/'); p++) line += *p == '\n';
            if (*p) p += 2;
        } else if (*p == '"') {
            for (p++; *p && *p != '"'; p++) {
                if (*p == '\\' && p[1]) p++;
                line += *p == '\n';
            }
            if (*p) p++;
        } else if (isalpha((unsigned char)*p) || *p == '*' || *p == '_' || *p == '.') {
            /* names (which may hold digits) and the fraction of ".5" */
            for (p++; *p && (isalnum((unsigned char)*p) || strchr("_-*", *p)); p++) {}
        } else if (isdigit((unsigned char)*p)) {
            const char *start = p > text && p[-1] == '-' ? p - 1 : p;
            if ((*bits = literal_too_wide(&p, *start == '-'))) {
                snprintf(lit, litsz, "%.*s", (int)(p - start), start);
                return line;
            }
        } else {
            p++;
        }
    }
    return 0;
}

/* "section.key[i]..." of a setting. */
static void setting_path(const config_setting_t *s, char *buf, size_t n)
{
    const config_setting_t *parent = config_setting_parent(s);
    if (!parent || !config_setting_parent(parent)) {
        snprintf(buf, n, "%s", config_setting_name(s) ? config_setting_name(s) : "");
        return;
    }
    setting_path(parent, buf, n);
    size_t len = strlen(buf);
    if (len >= n) return;
    if (config_setting_name(s))
        snprintf(buf + len, n - len, ".%s", config_setting_name(s));
    else
        snprintf(buf + len, n - len, "[%d]", config_setting_index(s));
}

/* The first scalar setting on that line of the main file (path), or NULL. */
static const config_setting_t *scalar_at_line(const config_setting_t *s, const char *path,
                                              unsigned line)
{
    if (!config_setting_is_aggregate(s)) {
        const char *f = config_setting_source_file(s);
        return config_setting_source_line(s) == line && f && strcmp(f, path) == 0 ? s : NULL;
    }
    for (int i = 0; i < config_setting_length(s); i++) {
        const config_setting_t *hit =
            scalar_at_line(config_setting_get_elem(s, (unsigned)i), path, line);
        if (hit) return hit;
    }
    return NULL;
}

static int check_wide_literals(const struct load_ctx *c, const char *text,
                               const config_setting_t *root)
{
    char lit[64], name[160] = "";
    int bits = 0;
    int line = scan_wide_literals(text, lit, sizeof lit, &bits);
    if (!line) return 0;
    const config_setting_t *s = scalar_at_line(root, c->path, (unsigned)line);
    if (s) setting_path(s, name, sizeof name);
    if (bits == 64)
        return fail_line(c, (unsigned)line, s ? name : NULL,
                         "%s does not fit in a 64-bit integer (the largest is "
                         "9223372036854775807L)", lit);
    return fail_line(c, (unsigned)line, s ? name : NULL,
                     "%s does not fit in a 32-bit integer (libconfig would silently wrap it; "
                     "write %sL for a 64-bit integer)", lit, lit);
}

/* ---- pass 3: values ----------------------------------------------------------- */

static void str_set(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);
    if (n >= size) n = size - 1;
    memset(dst, 0, size);
    memcpy(dst, src, n);
}

static int get_integer(const struct load_ctx *c, const config_setting_t *s, const char *name,
                       long long *v)
{
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_INT: *v = config_setting_get_int(s); return 0;
    case CONFIG_TYPE_INT64: *v = config_setting_get_int64(s); return 0;
    case CONFIG_TYPE_FLOAT: {
        char shown[40];
        cfg_format_double(config_setting_get_float(s), shown, sizeof shown);
        return fail(c, s, name, "expected an integer, got a float (%s) (write a whole number "
                                "without a decimal point)", shown);
    }
    case CONFIG_TYPE_STRING:
        return fail(c, s, name, "expected an integer, got a string (\"%s\") (write the number "
                                "without quotes)", config_setting_get_string(s));
    }
    return fail(c, s, name, "expected an integer, got %s (write a single number)", kind(s));
}

static int check_range(const struct load_ctx *c, const struct cfg_key *k,
                       const config_setting_t *s, const char *name, double v, const char *shown)
{
    if (v >= k->min && v <= k->max) return 0;
    char range[96];
    cfg_range_text(k, range, sizeof range);
    return fail(c, s, name, "%s is out of range (allowed %s)", shown, range);
}

static int read_int(const struct load_ctx *c, const struct cfg_key *k,
                    const config_setting_t *s, void *base, const char *name)
{
    long long v;
    char shown[32];
    if (get_integer(c, s, name, &v)) return -1;
    snprintf(shown, sizeof shown, "%lld", v);
    if (check_range(c, k, s, name, (double)v, shown)) return -1;
    if (k->type == CFG_INT64)
        *(uint64_t *)((char *)base + k->offset) = (uint64_t)v;
    else
        *(int *)((char *)base + k->offset) = (int)v;
    return 0;
}

static int read_float(const struct load_ctx *c, const struct cfg_key *k,
                      const config_setting_t *s, void *base, const char *name)
{
    double v;
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_INT: v = config_setting_get_int(s); break;
    case CONFIG_TYPE_INT64: v = (double)config_setting_get_int64(s); break;
    case CONFIG_TYPE_FLOAT: v = config_setting_get_float(s); break;
    case CONFIG_TYPE_STRING:
        return fail(c, s, name, "expected a number, got a string (\"%s\") (write the number "
                                "without quotes)", config_setting_get_string(s));
    default:
        return fail(c, s, name, "expected a number, got %s (write a single number, e.g. 0.5)",
                    kind(s));
    }
    char shown[40];
    cfg_format_double(v, shown, sizeof shown);
    if (!isfinite(v))
        return fail(c, s, name, "%s is not a finite number (the literal overflows a double; "
                                "write a number of at most 1.8e308)", shown);
    if (check_range(c, k, s, name, v, shown)) return -1;
    *(double *)((char *)base + k->offset) = v;
    return 0;
}

static int check_name_chars(const struct load_ctx *c, const config_setting_t *s,
                            const char *name, const char *v)
{
    size_t bad = strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-");
    if (v[bad] == '\0') return 0;
    return fail(c, s, name, "\"%s\" has a character outside [A-Za-z0-9_.-] ('%c' at position "
                            "%zu) (the name goes into file names; use letters, digits, '_', "
                            "'.' or '-')", v, v[bad], bad + 1);
}

/* Where a relative path is tried: the directory of the file that names it, then
 * the inputs directory. Returns the number of candidates written to cand. */
static int path_candidates(const char *file, const char *value, char cand[2][2 * CFG_PATH_MAX])
{
    if (value[0] == '/') {
        snprintf(cand[0], sizeof cand[0], "%s", value);
        return 1;
    }
    const char *slash = strrchr(file, '/');
    if (slash)
        snprintf(cand[0], sizeof cand[0], "%.*s/%s", (int)(slash - file), file, value);
    else
        snprintf(cand[0], sizeof cand[0], "%s", value);
    char inputs[CFG_PATH_MAX];
    if (inputs_dir(inputs, sizeof inputs)) return 1;
    snprintf(cand[1], sizeof cand[1], "%s/%s", inputs, value);
    return strcmp(cand[0], cand[1]) == 0 ? 1 : 2;
}

/* Stores the absolute, symlink-free form of the first candidate that exists, so
 * the value means the same file from any working directory. s is the setting
 * (or, for a default, its section or NULL): messages point there. */
static int resolve_path(const struct load_ctx *c, const struct cfg_key *k,
                        const config_setting_t *s, const char *name, const char *value,
                        char *out)
{
    char buf[2 * CFG_PATH_MAX];
    if (value[0] == '\0' && k->min == 0) { /* an optional path left empty: none */
        out[0] = '\0';
        return 0;
    }
    const char *file = source_path(c, s ? config_setting_source_file(s) : NULL, buf, sizeof buf);
    char cand[2][2 * CFG_PATH_MAX];
    int n = path_candidates(file, value, cand);
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(cand[i], &st) != 0) continue;
        if (S_ISDIR(st.st_mode) && !(k->flags & CFG_DIR_OK))
            return fail(c, s, name, "\"%s\" is a directory (%s), not a file (name a file, "
                                    "e.g. \"%s\")", value, cand[i], k->def_s);
        char *real = realpath(cand[i], NULL);
        if (!real || access(real, R_OK) != 0 || strlen(real) >= k->size) {
            int e = errno;
            int too_long = real && strlen(real) >= k->size;
            free(real);
            if (too_long)
                return fail(c, s, name, "%s: resolved path is longer than %zu characters (move "
                        "the file to a shorter path)", cand[i], k->size - 1);
            return fail(c, s, name, "%s: cannot read: %s (check its permissions)", cand[i],
                        strerror(e));
        }
        str_set(out, k->size, real);
        free(real);
        return 0;
    }
    if (n == 1)
        return fail(c, s, name, "file \"%s\" not found (tried %s) (check the name; profiles "
                                "live in inputs/)", value, cand[0]);
    return fail(c, s, name, "file \"%s\" not found (tried %s and %s) (set LIBRA_INPUTS to the "
                            "inputs directory, or give an absolute path)", value, cand[0], cand[1]);
}

static int read_string(const struct load_ctx *c, const struct cfg_key *k,
                       const config_setting_t *s, void *base, const char *name)
{
    if (config_setting_type(s) != CONFIG_TYPE_STRING)
        return fail(c, s, name, "expected a string, got %s (put the value in double quotes)",
                    kind(s));
    const char *v = config_setting_get_string(s);
    char *field = (char *)base + k->offset;
    size_t len = strlen(v);
    if (k->type == CFG_ENUM) {
        if (!cfg_allowed_has(k, v))
            return fail(c, s, name, "\"%s\" is not allowed (use one of %s)", v, k->allowed);
    } else if (len < (size_t)k->min) {
        if (!k->def_s) /* a required key (inside a sched.buckets group) */
            return fail(c, s, name, "must not be empty (give %.0f to %.0f characters)", k->min,
                        k->max);
        return fail(c, s, name, "must not be empty (the default is \"%s\")", k->def_s);
    } else if (len > (size_t)k->max) {
        return fail(c, s, name, "is too long: %zu characters (at most %.0f)", len, k->max);
    }
    if (k->type == CFG_NAME && check_name_chars(c, s, name, v)) return -1;
    if (k->type == CFG_PATH) return resolve_path(c, k, s, name, v, field);
    str_set(field, k->size, v);
    return 0;
}

/* The n entries of the TP array s (its kind and length already checked) into out:
 * each an integer in k->allowed. */
static int read_tp_entries(const struct load_ctx *c, const struct cfg_key *k,
                           const config_setting_t *s, const char *name, int n, int *out)
{
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        char ename[192], shown[32];
        long long v;
        snprintf(ename, sizeof ename, "%s[%d]", name, i);
        if (get_integer(c, e, ename, &v)) return -1;
        snprintf(shown, sizeof shown, "%lld", v);
        if (!cfg_allowed_has(k, shown))
            return fail(c, e, ename, "%s is not a TP degree (use %s)", shown, k->allowed);
        out[i] = (int)v;
    }
    return 0;
}

/* An array of TP degrees, or an empty list (libconfig's "()"); else an error. */
static int check_tp_kind(const struct load_ctx *c, const config_setting_t *s, const char *name,
                         const char *example)
{
    int n = config_setting_length(s);
    if (config_setting_is_array(s) || (config_setting_is_list(s) && n == 0)) return 0;
    return fail(c, s, name, "expected an array of TP degrees, got %s (write e.g. %s)", kind(s),
                example);
}

/* rollout_tp: a non-empty array of TP degrees; fills spec->n_tp and rollout_tp. */
static int read_tp_list(const struct load_ctx *c, const struct cfg_key *k,
                        const config_setting_t *s, struct plan_spec *spec, const char *name)
{
    int n = config_setting_length(s);
    if (check_tp_kind(c, s, name, "rollout_tp = [2, 1, 1];")) return -1;
    if (n == 0)
        return fail(c, s, name, "is empty (a plan needs at least one rollout instance, e.g. "
                                "rollout_tp = [1];)");
    if (n > (int)k->max)
        return fail(c, s, name, "has %d entries, at most %.0f (merge instances into larger TP "
                                "degrees)", n, k->max);
    struct plan_spec tmp = {0};
    if (read_tp_entries(c, k, s, name, n, tmp.rollout_tp)) return -1;
    spec->n_tp = n;
    memcpy(spec->rollout_tp, tmp.rollout_tp, sizeof spec->rollout_tp);
    return 0;
}

/* ---- sched.buckets ------------------------------------------------------------ */

static int read_value(const struct load_ctx *c, const struct cfg_key *k,
                      const config_setting_t *s, void *base, const char *name);

#define BUCKET_EXAMPLE "{ name = \"short\"; tp = [1]; max_tokens = 4000; }"

/* One bucket's tp: 1 .. 4 distinct TP degrees, in order of preference. */
static int read_bucket_tp(const struct load_ctx *c, const struct cfg_key *k,
                          const config_setting_t *s, struct sched_bucket_spec *b,
                          const char *name)
{
    int n = config_setting_length(s);
    if (check_tp_kind(c, s, name, "tp = [4, 8];")) return -1;
    if (n == 0)
        return fail(c, s, name, "is empty (a bucket needs at least one TP degree, e.g. "
                                "tp = [1];)");
    if (n > (int)k->max)
        return fail(c, s, name, "has %d entries, at most %.0f (list each of %s at most once)",
                    n, k->max, k->allowed);
    int tp[4] = {0};
    if (read_tp_entries(c, k, s, name, n, tp)) return -1;
    for (int i = 1; i < n; i++)
        for (int j = 0; j < i; j++) {
            if (tp[i] != tp[j]) continue;
            char ename[192];
            snprintf(ename, sizeof ename, "%s[%d]", name, i);
            return fail(c, config_setting_get_elem(s, (unsigned)i), ename,
                        "%d repeats %s[%d] (list each TP degree once, in order of preference)",
                        tp[i], k->key, j);
        }
    b->n_tp = n;
    memcpy(b->tp, tp, sizeof b->tp);
    return 0;
}

/* An unknown key inside a bucket group, with the closest bucket key. */
static int unknown_bucket_key(const struct load_ctx *c, const config_setting_t *s,
                              const char *name)
{
    const char *key = config_setting_name(s), *best = NULL;
    int best_d = 3;
    for (const struct cfg_key *k = cfg_bucket_keys; k->section; k++) {
        int d = edit_distance(key, k->key);
        if (d < best_d) best_d = d, best = k->key;
    }
    if (best) return fail(c, s, name, "unknown key (did you mean '%s'?)", best);
    return fail(c, s, name, "unknown key (a bucket takes name, tp, max_tokens)");
}

/* One group of sched.buckets: exactly the keys of cfg_bucket_keys[], all required. */
static int read_bucket(const struct load_ctx *c, const config_setting_t *g,
                       struct sched_bucket_spec *b, const char *gname)
{
    for (int i = 0; i < config_setting_length(g); i++) {
        const config_setting_t *s = config_setting_get_elem(g, (unsigned)i);
        char name[160];
        snprintf(name, sizeof name, "%s.%s", gname, config_setting_name(s));
        int known = 0;
        for (const struct cfg_key *k = cfg_bucket_keys; k->section && !known; k++)
            known = strcmp(k->key, config_setting_name(s)) == 0;
        if (!known) return unknown_bucket_key(c, s, name);
    }
    for (const struct cfg_key *k = cfg_bucket_keys; k->section; k++) {
        const config_setting_t *s = config_setting_get_member(g, k->key);
        char name[160];
        snprintf(name, sizeof name, "%s.%s", gname, k->key);
        if (!s)
            return fail(c, g, name, "missing (every bucket needs name, tp and max_tokens, e.g. "
                                    BUCKET_EXAMPLE ")");
        int rc = k->type == CFG_TP_LIST ? read_bucket_tp(c, k, s, b, name)
                                        : read_value(c, k, s, b, name);
        if (rc) return -1;
    }
    return 0;
}

/* sched.buckets: 1 .. CFG_MAX_BUCKETS groups, names unique, max_tokens strictly
 * ascending. The list replaces the default buckets as a whole. */
static int read_buckets(const struct load_ctx *c, const struct cfg_key *k,
                        const config_setting_t *s, struct sched_config *sc, const char *name)
{
    int n = config_setting_length(s);
    if (!config_setting_is_list(s) && !(config_setting_is_array(s) && n == 0))
        return fail(c, s, name, "expected a list of groups, got %s (write buckets = ( "
                                BUCKET_EXAMPLE ", ... );)", kind(s));
    if (n < (int)k->min)
        return fail(c, s, name, "is empty (give at least one bucket, e.g. ( " BUCKET_EXAMPLE
                                " ))");
    if (n > (int)k->max)
        return fail(c, s, name, "has %d buckets, at most %.0f (merge neighbouring buckets)", n,
                    k->max);
    struct sched_bucket_spec tmp[CFG_MAX_BUCKETS];
    memset(tmp, 0, sizeof tmp);
    for (int i = 0; i < n; i++) {
        const config_setting_t *g = config_setting_get_elem(s, (unsigned)i);
        char gname[64], kname[96];
        snprintf(gname, sizeof gname, "%s[%d]", name, i);
        if (!config_setting_is_group(g))
            return fail(c, g, gname, "expected a group, got %s (write " BUCKET_EXAMPLE ")",
                        kind(g));
        if (read_bucket(c, g, &tmp[i], gname)) return -1;
        for (int j = 0; j < i; j++) {
            if (strcmp(tmp[j].name, tmp[i].name) != 0) continue;
            snprintf(kname, sizeof kname, "%s.name", gname);
            return fail(c, config_setting_get_member(g, "name"), kname,
                        "\"%s\" is also the name of %s[%d] (give each bucket its own name)",
                        tmp[i].name, name, j);
        }
        if (i > 0 && tmp[i].max_tokens <= tmp[i - 1].max_tokens) {
            snprintf(kname, sizeof kname, "%s.max_tokens", gname);
            return fail(c, config_setting_get_member(g, "max_tokens"), kname,
                        "%d (bucket \"%s\") is not above %d, the max_tokens of %s[%d] (bucket "
                        "\"%s\") (list the buckets in strictly ascending max_tokens)",
                        tmp[i].max_tokens, tmp[i].name, tmp[i - 1].max_tokens, name, i - 1,
                        tmp[i - 1].name);
        }
    }
    memcpy(sc->buckets, tmp, sizeof sc->buckets);
    sc->n_buckets = n;
    return 0;
}

/* One value of row k from setting s into base (struct libra_config, or the
 * struct plan_spec for CFG_SPEC rows). */
static int read_value(const struct load_ctx *c, const struct cfg_key *k,
                      const config_setting_t *s, void *base, const char *name)
{
    switch (k->type) {
    case CFG_INT:
    case CFG_INT64: return read_int(c, k, s, base, name);
    case CFG_FLOAT: return read_float(c, k, s, base, name);
    case CFG_STRING:
    case CFG_NAME:
    case CFG_ENUM:
    case CFG_PATH: return read_string(c, k, s, base, name);
    case CFG_TP_LIST: return read_tp_list(c, k, s, base, name);
    case CFG_SCHEDULE: return 0; /* read_schedule */
    case CFG_BUCKETS: return read_buckets(c, k, s, &((struct libra_config *)base)->sched, name);
    }
    return 0;
}

static const config_setting_t *lookup(const config_setting_t *root, const char *section,
                                      const char *key)
{
    const config_setting_t *sec = config_setting_get_member(root, section);
    return sec ? config_setting_get_member(sec, key) : NULL;
}

/* A key given that this run does not use (its row's `when` condition fails). */
static int unused_key(const struct load_ctx *c, const struct cfg_key *k,
                      const config_setting_t *s, const struct libra_config *cfg, const char *name)
{
    char vals[160];
    cfg_list_quoted(k->when_in, vals, sizeof vals);
    return fail(c, s, name, "only used with %s.%s = %s (this run uses \"%s\"; remove it)",
                k->section, k->when, vals, cfg_enum_value(cfg, k->section, k->when));
}

/* Records where schema row `row` was set (config_where). */
static void note_origin(const struct load_ctx *c, struct cfg_origin *o, size_t row,
                        const config_setting_t *s)
{
    char buf[2 * CFG_PATH_MAX];
    const char *file = source_path(c, config_setting_source_file(s), buf, sizeof buf);
    unsigned line = config_setting_source_line(s);
    if (row >= CFG_MAX_KEYS || line == 0 || line > USHRT_MAX) return;
    int f = 0;
    while (f < o->n_files && strcmp(o->files[f], file) != 0) f++;
    if (f == o->n_files) {
        if (f == CFG_MAX_FILES || strlen(file) >= CFG_PATH_MAX) return; /* then: file alone */
        str_set(o->files[f], CFG_PATH_MAX, file);
        o->n_files++;
    }
    o->line[row] = (unsigned short)line;
    o->file[row] = (unsigned char)f;
}

/* The schema row of "section.key", or CFG_MAX_KEYS. */
static size_t key_row(const char *key)
{
    const char *dot = strchr(key, '.');
    char section[64];
    const struct cfg_key *k = NULL;
    if (dot && (size_t)(dot - key) < sizeof section) {
        snprintf(section, sizeof section, "%.*s", (int)(dot - key), key);
        k = cfg_schema_find(section, dot + 1);
    }
    return k ? (size_t)(k - cfg_schema) : CFG_MAX_KEYS;
}

int config_key_set(const struct libra_config *cfg, const char *key)
{
    size_t row = key_row(key);
    return row < CFG_MAX_KEYS && cfg->origin.line[row] > 0;
}

const char *config_where(const struct libra_config *cfg, const char *key, char *buf, size_t n)
{
    size_t row = key_row(key);
    const struct cfg_origin *o = &cfg->origin;
    if (row < CFG_MAX_KEYS && o->line[row] && o->file[row] < o->n_files)
        snprintf(buf, n, "%s:%u", o->files[o->file[row]], (unsigned)o->line[row]);
    else
        snprintf(buf, n, "%s", cfg->source);
    return buf;
}

void config_locate(const struct libra_config *cfg, char *msg, size_t cap)
{
    char key[96] = "", where[CFG_PATH_MAX + 16];
    size_t n = strcspn(msg, ": ");
    if (msg[n] == ':' && n < sizeof key && memchr(msg, '.', n)) snprintf(key, sizeof key, "%.*s", (int)n, msg);
    config_where(cfg, key, where, sizeof where);
    char *copy = xstrdup(msg);
    snprintf(msg, cap, "%s: %s", where, copy);
    free(copy);
}

/* Pass 3: every row outside the plan specs, in table order. A path left at its
 * default is resolved too (located at its section, if the file has one). A row's
 * `when` key comes before it in the table, so it is read by the time it decides. */
static int read_sections(const struct load_ctx *c, const config_setting_t *root,
                         struct libra_config *cfg)
{
    for (const struct cfg_key *k = cfg_schema; k->section; k++) {
        if (k->flags & CFG_SPEC) continue;
        const config_setting_t *s = lookup(root, k->section, k->key);
        char name[96];
        snprintf(name, sizeof name, "%s.%s", k->section, k->key);
        if (s) {
            if (!cfg_key_used(k, cfg)) return unused_key(c, k, s, cfg, name);
            if (read_value(c, k, s, cfg, name)) return -1;
            note_origin(c, &cfg->origin, (size_t)(k - cfg_schema), s);
        } else if (k->type == CFG_PATH) {
            const config_setting_t *at = config_setting_get_member(root, k->section);
            if (resolve_path(c, k, at, name, k->def_s, (char *)cfg + k->offset)) return -1;
        }
    }
    return 0;
}

/* ---- pass 4: the plan --------------------------------------------------------- */

/* The static plan: plan-level n_train / n_hybrid / rollout_tp over the defaults.
 * Its line (for config_check_world) is that of the first of them given. */
static int read_static_plan(const struct load_ctx *c, const config_setting_t *plan,
                            struct plan_spec *spec)
{
    const config_setting_t *sched = config_setting_get_member(plan, "schedule");
    if (sched)
        return fail(c, sched, "plan.schedule",
                    "given with plan.mode = \"static\" (set plan.mode = \"schedule\" to use it, "
                    "or remove it)");
    spec->line = config_setting_source_line(plan);
    unsigned first = 0;
    for (const struct cfg_key *k = cfg_schema; k->section; k++) {
        if (!(k->flags & CFG_SPEC)) continue;
        const config_setting_t *s = config_setting_get_member(plan, k->key);
        char name[96];
        snprintf(name, sizeof name, "plan.%s", k->key);
        if (!s) continue;
        if (read_value(c, k, s, spec, name)) return -1;
        if (!first) first = config_setting_source_line(s);
    }
    if (first) spec->line = (int)first;
    return 0;
}

/* One plan.schedule group: only plan-spec keys; the CFG_GROUP_REQUIRED ones must
 * be there, the others start from their defaults. */
static int read_schedule_group(const struct load_ctx *c, const config_setting_t *g,
                               struct plan_spec *spec, const char *gname)
{
    memset(spec, 0, sizeof *spec);
    spec->line = config_setting_source_line(g);
    for (int i = 0; i < config_setting_length(g); i++) {
        const config_setting_t *s = config_setting_get_elem(g, (unsigned)i);
        const struct cfg_key *k = cfg_schema_find("plan", config_setting_name(s));
        char name[192];
        snprintf(name, sizeof name, "%s.%s", gname, config_setting_name(s));
        if (!k || !(k->flags & CFG_SPEC)) return unknown_key(c, s, "plan", name, 1);
    }
    for (const struct cfg_key *k = cfg_schema; k->section; k++) {
        if (!(k->flags & CFG_SPEC)) continue;
        const config_setting_t *s = config_setting_get_member(g, k->key);
        char name[192];
        snprintf(name, sizeof name, "%s.%s", gname, k->key);
        if (s) {
            if (read_value(c, k, s, spec, name)) return -1;
        } else if (k->flags & CFG_GROUP_REQUIRED) {
            return fail(c, g, name, "missing (every schedule group needs n_train and "
                                    "rollout_tp, e.g. { n_train = 2; rollout_tp = [2, 1, 1]; })");
        } else if (k->type == CFG_INT) {
            *(int *)((char *)spec + k->offset) = (int)k->def;
        }
    }
    return 0;
}

static int read_schedule(const struct load_ctx *c, const config_setting_t *sched,
                         struct plan_config *plan)
{
    const struct cfg_key *k = cfg_schema_find("plan", "schedule");
    int n = config_setting_length(sched);
    if (!config_setting_is_list(sched) && !(config_setting_is_array(sched) && n == 0))
        return fail(c, sched, "plan.schedule",
                    "expected a list of groups, got %s (write schedule = ( { n_train = 2; "
                    "rollout_tp = [2, 1, 1]; }, ... );)", kind(sched));
    if (n < (int)k->min)
        return fail(c, sched, "plan.schedule",
                    "is empty (give at least one plan group, e.g. ( { n_train = 2; "
                    "rollout_tp = [2, 1, 1]; } ))");
    if (n > (int)k->max)
        return fail(c, sched, "plan.schedule",
                    "has %d entries, at most %.0f (shorten the schedule or raise plan.interval)",
                    n, k->max);
    for (int i = 0; i < n; i++) {
        const config_setting_t *g = config_setting_get_elem(sched, (unsigned)i);
        char gname[64];
        snprintf(gname, sizeof gname, "plan.schedule[%d]", i);
        if (!config_setting_is_group(g))
            return fail(c, g, gname, "expected a group, got %s (write { n_train = 2; "
                                     "rollout_tp = [2, 1, 1]; })", kind(g));
        if (read_schedule_group(c, g, &plan->schedule[i], gname)) return -1;
    }
    plan->n_schedule = n;
    return 0;
}

/* Pass 4. plan.mode was read in pass 3; it decides which keys may appear. */
static int read_plan(const struct load_ctx *c, const config_setting_t *root,
                     struct libra_config *cfg)
{
    const config_setting_t *plan = config_setting_get_member(root, "plan");
    if (!plan) return 0;
    if (strcmp(cfg->plan.mode, "static") == 0)
        return read_static_plan(c, plan, &cfg->plan.fixed);
    int grp = strcmp(cfg->plan.mode, "grp") == 0;
    for (const struct cfg_key *k = cfg_schema; k->section; k++) {
        const config_setting_t *s = config_setting_get_member(plan, k->key);
        char name[96];
        snprintf(name, sizeof name, "plan.%s", k->key);
        if (s && (k->flags & CFG_SPEC))
            return fail(c, s, name,
                        grp ? "only used with plan.mode = \"static\" (with mode = \"grp\" the "
                              "planner chooses the split; remove %s)"
                            : "only used with plan.mode = \"static\" (with mode = \"schedule\" "
                              "give %s inside each plan.schedule group)",
                        k->key);
    }
    const config_setting_t *sched = config_setting_get_member(plan, "schedule");
    if (grp) {
        if (sched)
            return fail(c, sched, "plan.schedule",
                        "given with plan.mode = \"grp\" (the planner chooses every plan; "
                        "remove it)");
        return 0;
    }
    if (!sched)
        return fail(c, plan, "plan.schedule",
                    "missing: required with plan.mode = \"schedule\" (add schedule = ( { "
                    "n_train = 2; rollout_tp = [2, 1, 1]; } );)");
    return read_schedule(c, sched, &cfg->plan);
}

/* ---- pass 5: cross-key rules -------------------------------------------------- */

/* The divisors of b nearest to ns, below and above (0 if none). */
static void nearest_divisors(int b, int ns, int *lo, int *hi)
{
    *lo = *hi = 0;
    for (int d = ns - 1; d >= 1 && !*lo; d--)
        if (b % d == 0) *lo = d;
    for (int d = ns + 1; d <= b && !*hi; d++)
        if (b % d == 0) *hi = d;
}

static int check_batch(const struct load_ctx *c, const config_setting_t *root,
                       const struct libra_config *cfg)
{
    int b = cfg->train.batch_size, ns = cfg->rollout.n_samples;
    if (b % ns == 0) return 0;
    const config_setting_t *sb = lookup(root, "train", "batch_size");
    if (sb) {
        int lo = b / ns * ns, hi = lo + ns;
        if (lo == 0)
            return fail(c, sb, "train.batch_size",
                        "%d is not a multiple of rollout.n_samples = %d (use %d)", b, ns, hi);
        return fail(c, sb, "train.batch_size",
                    "%d is not a multiple of rollout.n_samples = %d (use %d or %d)", b, ns, lo,
                    hi);
    }
    int lo, hi;
    nearest_divisors(b, ns, &lo, &hi);
    const config_setting_t *sn = lookup(root, "rollout", "n_samples");
    char alt[64];
    if (lo && hi) snprintf(alt, sizeof alt, "%d or %d", lo, hi);
    else snprintf(alt, sizeof alt, "%d", lo ? lo : hi);
    return fail(c, sn, "rollout.n_samples",
                "%d does not divide train.batch_size = %d (use n_samples = %s, or set "
                "train.batch_size to a multiple of %d)", ns, b, alt, ns);
}

static int check_tokens(const struct load_ctx *c, const config_setting_t *root,
                        const struct libra_config *cfg)
{
    const struct rollout_config *r = &cfg->rollout;
    if (r->max_tokens_per_turn <= r->max_tokens) return 0;
    const config_setting_t *s = lookup(root, "rollout", "max_tokens_per_turn");
    if (!s) s = lookup(root, "rollout", "max_tokens");
    return fail(c, s, "rollout.max_tokens_per_turn",
                "%d exceeds rollout.max_tokens = %d (one turn cannot be longer than the whole "
                "context: lower max_tokens_per_turn or raise max_tokens)",
                r->max_tokens_per_turn, r->max_tokens);
}

/* Rollout ranks hold weights up to sync_interval - 1 versions old, so a trajectory
 * can be that stale at birth: a smaller bound could never be met (and the launch
 * cap would stall the run). */
static int check_staleness(const struct load_ctx *c, const config_setting_t *root,
                           const struct libra_config *cfg)
{
    const struct train_config *t = &cfg->train;
    if (t->max_staleness >= t->sync_interval - 1) return 0;
    const config_setting_t *s = lookup(root, "train", "max_staleness");
    if (!s) s = lookup(root, "train", "sync_interval");
    return fail(c, s, "train.max_staleness",
                "%d is below train.sync_interval - 1 = %d (rollout weights lag training by up "
                "to sync_interval - 1 versions: raise max_staleness or lower sync_interval)",
                t->max_staleness, t->sync_interval - 1);
}

/* Liveness: a limit set by hand must leave room for a few heartbeats. */
static int check_liveness(const struct load_ctx *c, const config_setting_t *root,
                          const struct libra_config *cfg)
{
    const struct run_config *r = &cfg->run;
    if (r->unresponsive_s == 0 || r->unresponsive_s >= 3 * r->heartbeat_s) return 0;
    return fail(c, lookup(root, "run", "unresponsive_s"), "run.unresponsive_s",
                "%g s is under 3 x run.heartbeat_s = %g s: a live rank could be declared "
                "unresponsive between two heartbeats (raise it, or lower heartbeat_s)",
                r->unresponsive_s, 3 * r->heartbeat_s);
}

static int is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

/* plan.mode = grp: powers of two, ordered ranges, a device with a cost model. */
static int check_grp(const struct load_ctx *c, const config_setting_t *root,
                     const struct libra_config *cfg)
{
    const struct plan_config *p = &cfg->plan;
    if (strcmp(p->mode, "grp") != 0) return 0;
    /* A real model's training replicas shard by TP only (no pipeline stages); their
     * TP may change between plans (the state is re-cut: docs/rl.md, "Layouts"), and
     * which TP degrees the device trains is its own (driver_check_plans). */
    if (strcmp(cfg->device.type, "emu") != 0 && p->max_train_pp != 1) {
        const config_setting_t *at = lookup(root, "plan", "max_train_pp");
        return fail(c, at ? at : lookup(root, "plan", "mode"), "plan.max_train_pp",
                    "%d: with device.type = \"%s\" training replicas have no pipeline "
                    "stages (set plan.max_train_pp = 1)", p->max_train_pp, cfg->device.type);
    }
    const struct { const char *key; int v; } pow2[] = {
        {"min_rollout_tp", p->min_rollout_tp}, {"max_rollout_tp", p->max_rollout_tp},
        {"max_train_tp", p->max_train_tp},     {"max_train_pp", p->max_train_pp},
        {"max_micro", p->max_micro}};
    for (size_t i = 0; i < sizeof pow2 / sizeof pow2[0]; i++)
        if (!is_pow2(pow2[i].v)) {
            char name[64];
            snprintf(name, sizeof name, "plan.%s", pow2[i].key);
            return fail(c, lookup(root, "plan", pow2[i].key), name,
                        "%d is not a power of two (use 1, 2, 4 or 8)", pow2[i].v);
        }
    if (p->min_rollout_tp > p->max_rollout_tp)
        return fail(c, lookup(root, "plan", "min_rollout_tp"), "plan.min_rollout_tp",
                    "%d exceeds plan.max_rollout_tp = %d", p->min_rollout_tp, p->max_rollout_tp);
    if (p->pool_release_ratio >= p->pool_join_ratio)
        return fail(c, lookup(root, "plan", "pool_release_ratio"), "plan.pool_release_ratio",
                    "%g must be below plan.pool_join_ratio = %g (the band between them holds)",
                    p->pool_release_ratio, p->pool_join_ratio);
    return 0;
}

/* train.colocate: the static plan's training GPUs are its rollout GPUs. The emulated
 * device (libra-sim, or libra) runs any such plan; the CPU and CUDA devices train on the
 * shard a rank serves with, so their instances must be training replicas. */
static int check_colocate(const struct load_ctx *c, const config_setting_t *root,
                          struct libra_config *cfg)
{
    if (!cfg->train.colocate) return 0;
    const config_setting_t *s = lookup(root, "train", "colocate");
    struct plan_spec *p = &cfg->plan.fixed;
    /* a real engine (cpu, cuda) trains on the shard it serves with */
    int gpus = 0, real = strcmp(cfg->device.type, "emu") != 0;
    for (int i = 0; i < p->n_tp; i++) gpus += p->rollout_tp[i];
    if (strcmp(cfg->plan.mode, "static") != 0)
        return fail(c, s, "train.colocate", "needs plan.mode = \"static\" (it is \"%s\": the "
                    "planner and the pool move GPUs between roles, colocation keeps every GPU "
                    "in both)", cfg->plan.mode);
    if (cfg->train.max_staleness != 0)
        return fail(c, s, "train.colocate", "is on-policy: set train.max_staleness = 0 (it is "
                    "%d)", cfg->train.max_staleness);
    if (p->n_train != gpus || p->n_hybrid != 0)
        return fail(c, s, "train.colocate", "every GPU both serves and trains: set plan.n_train "
                    "= %d (the GPUs of plan.rollout_tp) and no plan.n_hybrid (n_train is %d)",
                    gpus, p->n_train);
    int t = p->train_tp > 0 ? p->train_tp : 1;
    for (int i = 0; real && i < p->n_tp; i++)
        if (p->rollout_tp[i] != t)
            return fail(c, s, "train.colocate", "on device \"%s\" a rank trains on the shard "
                        "it serves with: every plan.rollout_tp entry must equal plan.train_tp "
                        "= %d (rollout_tp has %d)", cfg->device.type, t, p->rollout_tp[i]);
    p->colocate = 1;
    return 0;
}

static int check_device(const struct load_ctx *c, const config_setting_t *root,
                        const struct libra_config *cfg)
{
    int emu = strcmp(cfg->device.type, "emu") == 0;
    int env_emu = strcmp(cfg->env.name, "emu") == 0;
    const config_setting_t *s = lookup(root, "env", "name");
    if (!s) s = lookup(root, "device", "type");
    if (emu && !env_emu)
        return fail(c, s, "env.name",
                    "\"%s\" needs a real model (set device.type = \"cpu\", or env.name = \"emu\")",
                    cfg->env.name);
    if (!emu && env_emu)
        return fail(c, s, "env.name",
                    "\"emu\" works with device.type = \"emu\" only (use env.name = \"calc\" or "
                    "\"search\" with device.type = \"%s\")", cfg->device.type);
    if (cfg->env.calc_min_steps > cfg->env.calc_max_steps)
        return fail(c, lookup(root, "env", "calc_min_steps"), "env.calc_min_steps",
                    "%d exceeds env.calc_max_steps = %d (lower calc_min_steps or raise "
                    "calc_max_steps)", cfg->env.calc_min_steps,
                    cfg->env.calc_max_steps);
    return 0;
}

/* A static or scripted plan's training shape: whole replicas of train_tp ranks. (What
 * a device supports -- TP degrees, the model's heads -- is checked when the job
 * starts, against the device's description.) */
static int check_train_tp(const struct load_ctx *c, const config_setting_t *root,
                          const struct libra_config *cfg)
{
    const struct plan_config *pc = &cfg->plan;
    int sched = strcmp(pc->mode, "schedule") == 0;
    int n = sched ? pc->n_schedule : strcmp(pc->mode, "static") == 0;
    for (int i = 0; i < n; i++) {
        const struct plan_spec *p = sched ? &pc->schedule[i] : &pc->fixed;
        int t = p->train_tp > 0 ? p->train_tp : 1;
        const config_setting_t *at = lookup(root, "plan", "train_tp");
        if (!at) at = lookup(root, "plan", sched ? "schedule" : "n_train");
        if (!is_pow2(t))
            return fail(c, at, "plan.train_tp", "%d is not a power of two (1, 2, 4 or 8)", t);
        if (p->n_train % t != 0 || p->n_hybrid % t != 0)
            return fail(c, at, "plan.train_tp", "%d does not divide n_train = %d and n_hybrid = "
                        "%d (a training replica is train_tp ranks)", t, p->n_train, p->n_hybrid);
    }
    /* A real model's training state is re-cut when the replicas' TP changes between
     * entries (the old root replica hands every new training rank its shard); a lent
     * rank's join takes its partner's shard as it is, so such a schedule lends none. */
    for (int i = 1; sched && strcmp(cfg->device.type, "emu") != 0 && i < n; i++) {
        int ta = pc->schedule[i - 1].train_tp > 0 ? pc->schedule[i - 1].train_tp : 1;
        int tb = pc->schedule[i].train_tp > 0 ? pc->schedule[i].train_tp : 1;
        if (ta == tb) continue;
        for (int k = 0; k < n; k++)
            if (pc->schedule[k].n_hybrid > 0) {
                const config_setting_t *sc = lookup(root, "plan", "schedule");
                return fail(c, sc, "plan.schedule",
                            "entry %d lends %d ranks (n_hybrid) in a schedule whose training "
                            "replicas change their TP degree (entries %d and %d): on device "
                            "\"%s\" a lent rank takes its partner's shard as it is; keep "
                            "train_tp or drop n_hybrid", k, pc->schedule[k].n_hybrid, i - 1, i,
                            cfg->device.type);
            }
    }
    return 0;
}

/* The scheduler: payload classes in order, the default bucket among the buckets. */
static int check_sched(const struct load_ctx *c, const config_setting_t *root,
                       const struct libra_config *cfg)
{
    const struct sched_config *sc = &cfg->sched;
    if (sc->payload_large < sc->payload_small) {
        const config_setting_t *s = lookup(root, "sched", "payload_large");
        if (s)
            return fail(c, s, "sched.payload_large",
                        "%d is below sched.payload_small = %d (a large tool return is at least "
                        "as long as a small one: raise payload_large or lower payload_small)",
                        sc->payload_large, sc->payload_small);
        return fail(c, lookup(root, "sched", "payload_small"), "sched.payload_small",
                    "%d is above sched.payload_large = %d (a small tool return is at most as "
                    "long as a large one: lower payload_small or raise payload_large)",
                    sc->payload_small, sc->payload_large);
    }
    if (!sc->default_bucket[0]) return 0;
    for (int i = 0; i < sc->n_buckets; i++)
        if (strcmp(sc->buckets[i].name, sc->default_bucket) == 0) return 0;
    char names[CFG_MAX_BUCKETS * 34] = "", quoted[CFG_MAX_BUCKETS * 40];
    size_t len = 0;
    for (int i = 0; i < sc->n_buckets && len < sizeof names; i++)
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "",
                                sc->buckets[i].name);
    cfg_list_quoted(names, quoted, sizeof quoted);
    return fail(c, lookup(root, "sched", "default_bucket"), "sched.default_bucket",
                "\"%s\" names no bucket (use %s, or \"\" to let the tree place first turns)",
                sc->default_bucket, quoted);
}

/* ---- public ------------------------------------------------------------------- */

static void key_default(const struct cfg_key *k, void *base)
{
    void *f = (char *)base + k->offset;
    switch (k->type) {
    case CFG_INT: *(int *)f = (int)k->def; break;
    case CFG_INT64: *(uint64_t *)f = (uint64_t)k->def; break;
    case CFG_FLOAT: *(double *)f = k->def; break;
    case CFG_STRING:
    case CFG_NAME:
    case CFG_ENUM:
    case CFG_PATH: str_set(f, k->size, k->def_s); break;
    case CFG_TP_LIST: {
        struct plan_spec *spec = base;
        spec->n_tp = 0;
        for (const char *p = k->def_s; *p && spec->n_tp < CFG_MAX_TP;) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p) p++;
            else spec->rollout_tp[spec->n_tp++] = (int)v, p = end;
        }
        break;
    }
    case CFG_SCHEDULE: break; /* empty: n_schedule = 0 */
    case CFG_BUCKETS: {         /* the only CFG_BUCKETS row is sched.buckets */
        struct sched_config *sc = &((struct libra_config *)base)->sched;
        memset(sc->buckets, 0, sizeof sc->buckets);
        memcpy(sc->buckets, cfg_default_buckets,
               (size_t)cfg_n_default_buckets * sizeof cfg_default_buckets[0]);
        sc->n_buckets = cfg_n_default_buckets;
        break;
    }
    }
}

void config_defaults(struct libra_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    for (const struct cfg_key *k = cfg_schema; k->section; k++)
        key_default(k, (k->flags & CFG_SPEC) ? (void *)&cfg->plan.fixed : (void *)cfg);
}

int config_load(const char *path, struct libra_config *out, char *err, size_t errlen)
{
    struct load_ctx c = {path, err, errlen, ""};
    if (err && errlen) err[0] = '\0';
    if (strlen(path) >= CFG_PATH_MAX)
        return fail(&c, NULL, NULL, "cannot read: path longer than %d characters (use a "
                                    "shorter path)", CFG_PATH_MAX - 1);
    char shipped[CFG_PATH_MAX]; /* a relative name not here: an installed example config */
    if (inputs_find(path, shipped, sizeof shipped) == 0) c.path = path = shipped;
    const char *slash = strrchr(path, '/');
    if (slash == path) snprintf(c.incdir, sizeof c.incdir, "/");
    else if (slash) snprintf(c.incdir, sizeof c.incdir, "%.*s", (int)(slash - path), path);
    char *text = NULL;
    if (read_text(&c, &text)) return -1;
    config_t lc;
    config_init(&lc);
    struct libra_config *cfg = xmalloc(sizeof *cfg);
    int rc = -1;
    if (check_includes(&c, path, text, 0) || parse(&c, &lc)) goto done;
    const config_setting_t *root = config_root_setting(&lc);
    config_defaults(cfg);
    str_set(cfg->source, sizeof cfg->source, path);
    if (check_wide_literals(&c, text, root) || check_names(&c, root) ||
        read_sections(&c, root, cfg) || read_plan(&c, root, cfg) || check_batch(&c, root, cfg) ||
        check_tokens(&c, root, cfg) || check_staleness(&c, root, cfg) ||
        check_liveness(&c, root, cfg) ||
        check_device(&c, root, cfg) || check_train_tp(&c, root, cfg) ||
        check_grp(&c, root, cfg) || check_sched(&c, root, cfg) ||
        check_colocate(&c, root, cfg))
        goto done;
    *out = *cfg;
    rc = 0;
done:
    config_destroy(&lc);
    free(cfg);
    free(text);
    return rc;
}

int plan_spec_workers(const struct plan_spec *p)
{
    int n = (p->colocate ? 0 : p->n_train) + p->n_hybrid;
    for (int i = 0; i < p->n_tp; i++) n += p->rollout_tp[i];
    return n;
}

static int world_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int world_fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* "file:line: " of a plan (line 0: "file: "), or "" when cfg came from no file. */
static void plan_where(const struct libra_config *cfg, int line, char *buf, size_t n)
{
    if (!cfg->source[0]) buf[0] = '\0';
    else if (line > 0) snprintf(buf, n, "%s:%d: ", cfg->source, line);
    else snprintf(buf, n, "%s: ", cfg->source);
}

/* "8+1+1" */
static void tp_sum_text(const struct plan_spec *p, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int j = 0; j < p->n_tp && len < n; j++)
        len += (size_t)snprintf(buf + len, n - len, j ? "+%d" : "%d", p->rollout_tp[j]);
}

int config_check_world(const struct libra_config *cfg, int world_size, char *err, size_t errlen)
{
    if (strcmp(cfg->plan.mode, "grp") == 0) {
        const struct plan_config *p = &cfg->plan;
        int need = p->min_train + p->min_rollout;
        if (world_size - 1 >= need) return 0;
        char where[CFG_PATH_MAX + 32];
        plan_where(cfg, 0, where, sizeof where);
        return world_fail(err, errlen,
                          "%splan: the planner needs at least %d workers (plan.min_train %d + "
                          "plan.min_rollout %d) but the job has %d (world size %d; rank 0 is the "
                          "controller) (start at least %d ranks)", where, need, p->min_train,
                          p->min_rollout, world_size - 1, world_size, need + 1);
    }
    int sched = strcmp(cfg->plan.mode, "schedule") == 0;
    int n = sched ? cfg->plan.n_schedule : 1;
    const struct plan_spec *plans = sched ? cfg->plan.schedule : &cfg->plan.fixed;
    int most = 0; /* the largest plan decides the ranks to ask for */
    for (int i = 0; i < n; i++)
        if (plan_spec_workers(&plans[i]) > most) most = plan_spec_workers(&plans[i]);
    char where[CFG_PATH_MAX + 32];
    if (world_size < 2) {
        plan_where(cfg, 0, where, sizeof where);
        return world_fail(err, errlen,
                          "%sworld size %d: libra needs rank 0 (the controller) and at least "
                          "one worker (start at least %d ranks)", where, world_size, most + 1);
    }
    for (int i = 0; i < n; i++) {
        const struct plan_spec *p = &plans[i];
        int need = plan_spec_workers(p);
        if (need <= world_size - 1) continue;
        char name[48], tp[4 * CFG_MAX_TP + 8];
        if (sched) snprintf(name, sizeof name, "plan.schedule[%d]", i);
        else snprintf(name, sizeof name, "plan");
        tp_sum_text(p, tp, sizeof tp);
        plan_where(cfg, p->line, where, sizeof where);
        return world_fail(err, errlen,
                          "%s%s: needs %d workers (n_train %d + n_hybrid %d + rollout_tp %s) but "
                          "the job has %d (world size %d; rank 0 is the controller) (start at "
                          "least %d ranks or shrink the plan)", where, name, need, p->n_train,
                          p->n_hybrid, tp, world_size - 1, world_size, most + 1);
    }
    return 0;
}
