/*
 * The inputs directory (include/libra/inputs.h): $LIBRA_INPUTS, the installed data
 * directory beside the running program, the source tree's inputs/, the configured
 * $(pkgdatadir). The program's own directory comes from /proc/self/exe (Linux);
 * where that cannot be read, rule 2 is skipped.
 */
#define _XOPEN_SOURCE 700 /* realpath, readlink */
#include "libra/inputs.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The build defines these (Makefile.am); the defaults keep a bare compile working. */
#ifndef LIBRA_SRCDIR
#define LIBRA_SRCDIR "."
#endif
#ifndef LIBRA_BINDIR
#define LIBRA_BINDIR "/usr/local/bin"
#endif
#ifndef LIBRA_PKGDATADIR
#define LIBRA_PKGDATADIR "/usr/local/share/libra"
#endif

static int copy_str(char *out, size_t n, const char *s)
{
    if (strlen(s) >= n) return -1;
    memcpy(out, s, strlen(s) + 1);
    return 0;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The next component of the path at *p, "" and "." skipped: its start (length in
 * *len), *p moved past it; NULL at the end. */
static const char *next_comp(const char **p, size_t *len)
{
    for (;;) {
        const char *s = *p;
        while (*s == '/') s++;
        *p = s;
        if (*s == '\0') return NULL;
        size_t l = strcspn(s, "/");
        *p = s + l;
        if (l == 1 && s[0] == '.') continue;
        *len = l;
        return s;
    }
}

static int has_dotdot(const char *path)
{
    size_t l;
    for (const char *c; (c = next_comp(&path, &l));)
        if (l == 2 && c[0] == '.' && c[1] == '.') return 1;
    return 0;
}

static int append(char *out, size_t n, size_t *len, const char *s, size_t l)
{
    if (*len + l + 1 > n) return -1;
    memcpy(out + *len, s, l);
    *len += l;
    out[*len] = '\0';
    return 0;
}

int inputs_relpath(const char *from, const char *to, char *out, size_t n)
{
    if (n == 0 || from[0] != '/' || to[0] != '/' || has_dotdot(from) || has_dotdot(to))
        return -1;
    for (;;) { /* past the components both share */
        const char *f = from, *t = to;
        size_t fl, tl;
        const char *fc = next_comp(&f, &fl), *tc = next_comp(&t, &tl);
        if (!fc || !tc || fl != tl || memcmp(fc, tc, fl) != 0) break;
        from = f;
        to = t;
    }
    size_t len = 0, l;
    out[0] = '\0';
    while (next_comp(&from, &l))
        if (append(out, n, &len, "../", 3)) return -1;
    for (const char *c; (c = next_comp(&to, &l));)
        if (append(out, n, &len, c, l) || append(out, n, &len, "/", 1)) return -1;
    if (len == 0) return copy_str(out, n, ".");
    out[len - 1] = '\0'; /* the last '/' */
    return 0;
}

int inputs_dir_for(const char *env, const char *exe_dir, char *out, size_t n)
{
    if (env && *env) return copy_str(out, n, env);
    char rel[PATH_MAX], cand[2 * PATH_MAX];
    if (exe_dir && inputs_relpath(LIBRA_BINDIR, LIBRA_PKGDATADIR, rel, sizeof rel) == 0) {
        snprintf(cand, sizeof cand, "%s/%s", exe_dir, rel);
        char *real = is_dir(cand) ? realpath(cand, NULL) : NULL;
        if (real) {
            int rc = copy_str(out, n, real);
            free(real);
            return rc;
        }
    }
    if (is_dir(LIBRA_SRCDIR "/inputs")) return copy_str(out, n, LIBRA_SRCDIR "/inputs");
    return copy_str(out, n, LIBRA_PKGDATADIR);
}

int inputs_dir(char *out, size_t n)
{
    char exe[PATH_MAX];
    ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char *slash = NULL;
    if (l > 0) {
        exe[l] = '\0';
        slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
    }
    return inputs_dir_for(getenv("LIBRA_INPUTS"), slash && slash > exe ? exe : NULL, out, n);
}

int inputs_find(const char *path, char *out, size_t n)
{
    char dir[PATH_MAX], cand[2 * PATH_MAX];
    if (!path || path[0] == '\0' || path[0] == '/' || access(path, F_OK) == 0) return -1;
    if (inputs_dir(dir, sizeof dir)) return -1;
    snprintf(cand, sizeof cand, "%s/%s", dir, path);
    if (access(cand, F_OK) != 0) return -1;
    return copy_str(out, n, cand);
}
