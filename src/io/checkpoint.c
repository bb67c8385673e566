/*
 * Checkpoint directories (include/libra/checkpoint.h): creating the temporary
 * directory, committing it (fsync, rename, completion mark), pruning old ones,
 * listing the complete ones and finding the newest that loads. The state file itself
 * is src/io/ckpt_state.c; the model file is tfm_save / tfm_load.
 *
 * Crash safety, step by step (a kill at any point leaves either the previous newest
 * complete checkpoint or the new one, never a half-written one that looks complete):
 *   - files are written into ROOT/step-N.tmp/ (never listed);
 *   - commit fsyncs each file and the directory, renames it to ROOT/step-N, fsyncs
 *     ROOT, then writes COMPLETE via COMPLETE.tmp + fsync + rename + fsync;
 *   - a directory is always deleted mark first (unlink COMPLETE, fsync), so a kill
 *     mid-delete leaves an incomplete directory, not a complete one missing files.
 * Checkpoint directories hold plain files only; anything else inside one is an error
 * (we never create subdirectories, so we never delete trees).
 *
 * Pruning keeps the newest `keep` complete checkpoints by step, and always the one just
 * committed (a rerun from an older step must not delete its own checkpoint). Failures
 * while pruning are logged (LOG_W) and do not fail the commit: the new checkpoint is
 * durable by then. Incomplete directories are never pruned (they are reported on
 * every listing, for a person to look at).
 *
 * Errors are returned as messages with the path and strerror (STYLE 6): nothing here
 * ends the job. Not thread-safe (HDF5 serial API for the model check).
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/checkpoint.h"
#include "libra/errmsg.h"

#include "libra/h5util.h"
#include "libra/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define MARK_NAME "COMPLETE"
#define MARK_TMP "COMPLETE.tmp"
#define MARK_MAX 256 /* bytes; a real mark is ~50 */

/* ---- paths ---- */

void ckpt_dir_path(const char *root, int step, int tmp, char *out, size_t cap)
{
    snprintf(out, cap, "%s/step-%08d%s", root, step, tmp ? ".tmp" : "");
}

/* dir/name into out (PATH_MAX); -1 with a message if it does not fit. */
static int join(char *out, const char *dir, const char *name, char *err, size_t errlen)
{
    int n = snprintf(out, PATH_MAX, "%s/%s", dir, name);
    if (n < 0 || n >= PATH_MAX) {
        errmsg_set(err, errlen, "%s/%s: path too long", dir, name);
        return -1;
    }
    return 0;
}

static int dir_path(char *out, const char *root, int step, int tmp, char *err, size_t errlen)
{
    char name[32];
    snprintf(name, sizeof name, "step-%08d%s", step, tmp ? ".tmp" : "");
    return join(out, root, name, err, errlen);
}

/* "step-%08d" exactly (canonical digits, nothing after): the step, else -1. With
 * *is_tmp set when the name is that followed by ".tmp". */
static int parse_dir_name(const char *name, int *is_tmp)
{
    *is_tmp = 0;
    if (strncmp(name, "step-", 5) != 0) return -1;
    const char *d = name + 5;
    size_t nd = strspn(d, "0123456789");
    if (nd < 8 || nd > 10) return -1;
    if (strcmp(d + nd, ".tmp") == 0)
        *is_tmp = 1;
    else if (d[nd] != '\0')
        return -1;
    long long v = 0;
    for (size_t i = 0; i < nd; i++) v = v * 10 + (d[i] - '0');
    if (v > INT_MAX) return -1;
    char canon[32];
    snprintf(canon, sizeof canon, "%08d", (int)v);
    if (strlen(canon) != nd || strncmp(canon, d, nd) != 0) return -1;
    return (int)v;
}

/* ---- small checked file-system helpers ---- */

/* fsync of a file or directory by path (EINVAL from a directory is tolerated: some
 * file systems cannot sync one). */
static int fsync_path(const char *path, int is_dir, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | (is_dir ? O_DIRECTORY : 0));
    if (fd < 0) {
        errmsg_set(err, errlen, "%s: cannot open for fsync: %s", path, strerror(errno));
        return -1;
    }
    if (fsync(fd) != 0 && !(is_dir && errno == EINVAL)) {
        errmsg_set(err, errlen, "%s: fsync failed: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (close(fd) != 0) {
        errmsg_set(err, errlen, "%s: close failed: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int ckpt_mkdir_p(const char *path, char *err, size_t errlen)
{
    size_t len = strlen(path);
    if (len == 0 || len >= PATH_MAX) {
        errmsg_set(err, errlen, "checkpoint root \"%s\": %s", path,
                   len ? "path too long" : "empty path");
        return -1;
    }
    char buf[PATH_MAX];
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        if (buf[i - 1] == '/') continue; /* "a//b" or a trailing '/' */
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0) {
            int e = errno;
            struct stat st;
            if (e != EEXIST) {
                errmsg_set(err, errlen, "cannot create checkpoint directory %s: %s", buf,
                           strerror(e));
                return -1;
            }
            if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) {
                errmsg_set(err, errlen, "cannot create checkpoint directory %s: %s", buf,
                           "it exists and is not a directory");
                return -1;
            }
        }
        buf[i] = c;
    }
    return 0;
}

/* Removes dir: its COMPLETE mark first (then fsync), every plain file in it, then the
 * directory. Anything that is not a plain file in it is an error. */
static int remove_dir(const char *dir, char *err, size_t errlen)
{
    char mark[PATH_MAX];
    if (join(mark, dir, MARK_NAME, err, errlen)) return -1;
    if (unlink(mark) == 0) {
        if (fsync_path(dir, 1, err, errlen)) return -1;
    } else if (errno != ENOENT) {
        errmsg_set(err, errlen, "%s: cannot remove: %s", mark, strerror(errno));
        return -1;
    }
    DIR *d = opendir(dir);
    if (!d) {
        errmsg_set(err, errlen, "%s: cannot open directory: %s", dir, strerror(errno));
        return -1;
    }
    int fd = dirfd(d), rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno) {
                errmsg_set(err, errlen, "%s: cannot read directory: %s", dir, strerror(errno));
                rc = -1;
            }
            break;
        }
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        struct stat st;
        if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            errmsg_set(err, errlen, "%s/%s: cannot stat: %s", dir, e->d_name, strerror(errno));
            rc = -1;
            break;
        }
        if (S_ISDIR(st.st_mode)) {
            errmsg_set(err, errlen, "%s/%s is a directory: checkpoint directories hold plain "
                       "files only; remove it by hand", dir, e->d_name);
            rc = -1;
            break;
        }
        if (unlinkat(fd, e->d_name, 0) != 0) {
            errmsg_set(err, errlen, "%s/%s: cannot remove: %s", dir, e->d_name,
                       strerror(errno));
            rc = -1;
            break;
        }
    }
    if (closedir(d) != 0 && rc == 0) {
        errmsg_set(err, errlen, "%s: closedir failed: %s", dir, strerror(errno));
        rc = -1;
    }
    if (rc == 0 && rmdir(dir) != 0) {
        errmsg_set(err, errlen, "%s: cannot remove directory: %s", dir, strerror(errno));
        rc = -1;
    }
    return rc;
}

/* Removes path whatever it is (a directory as above, else unlink); absent is fine. */
static int remove_any(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return 0;
        errmsg_set(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode)) return remove_dir(path, err, errlen);
    if (unlink(path) != 0) {
        errmsg_set(err, errlen, "%s: cannot remove: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* fsyncs every plain file in dir, then dir itself. */
static int fsync_dir_files(const char *dir, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d) {
        errmsg_set(err, errlen, "%s: cannot open directory: %s%s", dir, strerror(errno),
                   errno == ENOENT ? " (ckpt_begin was not called for this step?)" : "");
        return -1;
    }
    int dfd = dirfd(d), rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno) {
                errmsg_set(err, errlen, "%s: cannot read directory: %s", dir, strerror(errno));
                rc = -1;
            }
            break;
        }
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        struct stat st;
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            errmsg_set(err, errlen, "%s/%s: cannot stat: %s", dir, e->d_name, strerror(errno));
            rc = -1;
            break;
        }
        if (!S_ISREG(st.st_mode)) {
            errmsg_set(err, errlen, "%s/%s is not a plain file: checkpoint directories hold "
                       "plain files only", dir, e->d_name);
            rc = -1;
            break;
        }
        int fd = openat(dfd, e->d_name, O_RDONLY);
        if (fd < 0) {
            errmsg_set(err, errlen, "%s/%s: cannot open for fsync: %s", dir, e->d_name,
                       strerror(errno));
            rc = -1;
            break;
        }
        int bad = fsync(fd) != 0;
        int e1 = errno;
        if (close(fd) != 0 && !bad) {
            bad = 1;
            e1 = errno;
        }
        if (bad) {
            errmsg_set(err, errlen, "%s/%s: fsync failed: %s", dir, e->d_name, strerror(e1));
            rc = -1;
            break;
        }
    }
    if (rc == 0 && fsync(dfd) != 0 && errno != EINVAL) {
        errmsg_set(err, errlen, "%s: directory fsync failed: %s", dir, strerror(errno));
        rc = -1;
    }
    if (closedir(d) != 0 && rc == 0) {
        errmsg_set(err, errlen, "%s: closedir failed: %s", dir, strerror(errno));
        rc = -1;
    }
    return rc;
}

/* ---- the mark ---- */

static int write_mark(const char *dir, int step, int version, char *err, size_t errlen)
{
    char tmp[PATH_MAX], mark[PATH_MAX], text[MARK_MAX];
    if (join(tmp, dir, MARK_TMP, err, errlen) || join(mark, dir, MARK_NAME, err, errlen))
        return -1;
    int len = snprintf(text, sizeof text, "libra checkpoint\nstep %d\nversion %d\n", step,
                       version);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        errmsg_set(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        return -1;
    }
    for (int done = 0; done < len;) {
        ssize_t w = write(fd, text + done, (size_t)(len - done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            errmsg_set(err, errlen, "%s: write failed: %s", tmp,
                       w < 0 ? strerror(errno) : "no progress");
            close(fd);
            unlink(tmp);
            return -1;
        }
        done += (int)w;
    }
    if (fsync(fd) != 0) {
        errmsg_set(err, errlen, "%s: fsync failed: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return -1;
    }
    if (close(fd) != 0) {
        errmsg_set(err, errlen, "%s: close failed: %s", tmp, strerror(errno));
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, mark) != 0) {
        errmsg_set(err, errlen, "%s: cannot rename %s over it: %s", mark, tmp, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return fsync_path(dir, 1, err, errlen);
}

/* Strict decimal int at *p (optional '-', digits, in int range); advances *p. */
static int parse_int(const char **p, int *out)
{
    const char *s = *p;
    int neg = *s == '-';
    s += neg;
    size_t nd = strspn(s, "0123456789");
    if (nd == 0 || nd > 10) return -1;
    long long v = 0;
    for (size_t i = 0; i < nd; i++) v = v * 10 + (s[i] - '0');
    if (neg) v = -v;
    if (v < INT_MIN || v > INT_MAX) return -1;
    *out = (int)v;
    *p = s + nd;
    return 0;
}

/* Checks dir's mark says step; 0, or -1 with the reason (for the warning). */
static int check_mark(const char *dir, int step, char *why, size_t whylen)
{
    char mark[PATH_MAX], text[MARK_MAX + 1];
    if (join(mark, dir, MARK_NAME, why, whylen)) return -1;
    int fd = open(mark, O_RDONLY);
    if (fd < 0) {
        if (errno == ENOENT)
            errmsg_set(why, whylen, "no %s mark", MARK_NAME);
        else
            errmsg_set(why, whylen, "%s: cannot open: %s", mark, strerror(errno));
        return -1;
    }
    size_t used = 0;
    for (;;) {
        ssize_t r = read(fd, text + used, sizeof text - 1 - used);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            errmsg_set(why, whylen, "%s: read failed: %s", mark, strerror(errno));
            close(fd);
            return -1;
        }
        if (r == 0 || used + (size_t)r == sizeof text - 1) {
            used += (size_t)r;
            break;
        }
        used += (size_t)r;
    }
    if (close(fd) != 0) {
        errmsg_set(why, whylen, "%s: close failed: %s", mark, strerror(errno));
        return -1;
    }
    text[used] = '\0';
    const char *p = text;
    int n, v;
    static const char head[] = "libra checkpoint\nstep ", mid[] = "\nversion ";
    int ok = used < MARK_MAX && strlen(text) == used && strncmp(p, head, strlen(head)) == 0;
    if (ok) p += strlen(head);
    ok = ok && parse_int(&p, &n) == 0 && strncmp(p, mid, strlen(mid)) == 0;
    if (ok) p += strlen(mid);
    ok = ok && parse_int(&p, &v) == 0 && strcmp(p, "\n") == 0;
    if (!ok) {
        errmsg_set(why, whylen, "%s mark is malformed", MARK_NAME);
        return -1;
    }
    if (n != step) {
        errmsg_set(why, whylen, "%s mark says step %d", MARK_NAME, n);
        return -1;
    }
    return 0;
}

/* ---- scanning ---- */

static int cmp_desc(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x < y) - (x > y);
}

/*
 * The complete checkpoints under root, newest first, in a new array (*steps, *n;
 * free it). A missing root gives none. With warn, incomplete ones are logged.
 */
static int scan(const char *root, int warn, int **steps, int *n, char *err, size_t errlen)
{
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(root);
    if (!d) {
        if (errno == ENOENT) return 0;
        errmsg_set(err, errlen, "checkpoint root %s: cannot open: %s", root, strerror(errno));
        return -1;
    }
    size_t cap = 0;
    int rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            if (errno) {
                errmsg_set(err, errlen, "checkpoint root %s: cannot read: %s", root,
                           strerror(errno));
                rc = -1;
            }
            break;
        }
        int is_tmp, step = parse_dir_name(e->d_name, &is_tmp);
        if (step < 0) continue;
        char dir[PATH_MAX], why[PATH_MAX + 64];
        if (join(dir, root, e->d_name, why, sizeof why)) continue;
        struct stat st;
        int ok;
        if (stat(dir, &st) != 0) {
            errmsg_set(why, sizeof why, "cannot stat: %s", strerror(errno));
            ok = 0;
        } else if (!S_ISDIR(st.st_mode)) {
            errmsg_set(why, sizeof why, "not a directory");
            ok = 0;
        } else if (is_tmp) {
            errmsg_set(why, sizeof why, "an unfinished write: .tmp directory");
            ok = 0;
        } else {
            ok = check_mark(dir, step, why, sizeof why) == 0;
        }
        if (!ok) {
            if (warn) LOG_W("checkpoint %s is incomplete (%s); skipped", dir, why);
            continue;
        }
        XGROW(*steps, cap, (size_t)*n + 1);
        (*steps)[(*n)++] = step;
    }
    if (closedir(d) != 0 && rc == 0) {
        errmsg_set(err, errlen, "checkpoint root %s: closedir failed: %s", root,
                   strerror(errno));
        rc = -1;
    }
    if (rc) {
        free(*steps);
        *steps = NULL;
        *n = 0;
        return -1;
    }
    if (*n > 1) qsort(*steps, (size_t)*n, sizeof **steps, cmp_desc);
    return 0;
}

int ckpt_clean_tmp(const char *root, int *removed, char *err, size_t errlen)
{
    *removed = 0;
    DIR *d = opendir(root);
    if (!d) {
        if (errno == ENOENT) return 0;
        errmsg_set(err, errlen, "checkpoint root %s: cannot open: %s", root, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        int is_tmp;
        if (parse_dir_name(e->d_name, &is_tmp) < 0 || !is_tmp) continue;
        char dir[PATH_MAX];
        if (join(dir, root, e->d_name, err, errlen) || remove_any(dir, err, errlen))
            rc = -1;
        else
            (*removed)++;
    }
    closedir(d);
    return rc;
}

/* ---- begin / commit ---- */

int ckpt_begin(const char *root, int step, char *err, size_t errlen)
{
    if (!root || step < 0) {
        errmsg_set(err, errlen, "ckpt_begin: %s", !root ? "no root" : "negative step");
        return -1;
    }
    char tmp[PATH_MAX];
    if (ckpt_mkdir_p(root, err, errlen) || dir_path(tmp, root, step, 1, err, errlen)) return -1;
    if (remove_any(tmp, err, errlen)) return -1; /* a stale one from a killed run */
    if (mkdir(tmp, 0755) != 0) {
        errmsg_set(err, errlen, "cannot create checkpoint directory %s: %s", tmp,
                   strerror(errno));
        return -1;
    }
    return 0;
}

/* Deletes complete checkpoints beyond the newest keep, sparing `spare`. Logs failures. */
static void prune(const char *root, int keep, int spare)
{
    char err[PATH_MAX + 256];
    int *steps, n;
    if (scan(root, 0, &steps, &n, err, sizeof err)) {
        LOG_W("checkpoint pruning skipped: %s", err);
        return;
    }
    int removed = 0;
    for (int i = keep; i < n; i++) {
        char dir[PATH_MAX];
        if (steps[i] == spare) continue;
        if (dir_path(dir, root, steps[i], 0, err, sizeof err) ||
            remove_dir(dir, err, sizeof err)) {
            LOG_W("cannot delete old checkpoint: %s", err);
            continue;
        }
        removed++;
    }
    free(steps);
    if (removed && fsync_path(root, 1, err, sizeof err))
        LOG_W("checkpoint pruning: %s", err);
}

int ckpt_commit(const char *root, int step, int version, int keep, char *err, size_t errlen)
{
    if (!root || step < 0 || keep < 1) {
        errmsg_set(err, errlen, "ckpt_commit: %s", !root ? "no root"
                   : step < 0 ? "negative step" : "keep must be >= 1");
        return -1;
    }
    char tmp[PATH_MAX], final[PATH_MAX];
    if (dir_path(tmp, root, step, 1, err, errlen) || dir_path(final, root, step, 0, err, errlen))
        return -1;
    if (fsync_dir_files(tmp, err, errlen)) return -1;
    /* A rerun of this step: the old one goes (mark first) before the new one moves in. */
    if (remove_any(final, err, errlen)) return -1;
    if (rename(tmp, final) != 0) {
        errmsg_set(err, errlen, "cannot rename %s to %s: %s", tmp, final, strerror(errno));
        return -1;
    }
    if (fsync_path(root, 1, err, errlen)) return -1;
    if (write_mark(final, step, version, err, errlen)) return -1;
    prune(root, keep, step);
    return 0;
}

/* ---- listing and loading ---- */

int ckpt_list(const char *root, int *steps, int max)
{
    char err[PATH_MAX + 256];
    int *all, n;
    if (!root || max < 0 || (max > 0 && !steps)) return -1;
    if (scan(root, 1, &all, &n, err, sizeof err)) {
        LOG_W("%s", err);
        return -1;
    }
    int k = n < max ? n : max;
    if (k > 0) memcpy(steps, all, sizeof *steps * (size_t)k);
    free(all);
    return k;
}

/* A light check of model.h5: an HDF5 file with a root libra_format_version. */
static int check_model(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        errmsg_set(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    struct h5quiet q;
    h5_quiet_begin(&q);
    int rc = -1;
    hid_t file = H5I_INVALID_HID;
    if (H5Fis_hdf5(path) <= 0) {
        errmsg_set(err, errlen, "%s: not an HDF5 file (%lld bytes)", path, (long long)st.st_size);
        goto out;
    }
    file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) {
        h5_error(err, errlen, path, "H5Fopen", __FILE__, __LINE__);
        goto out;
    }
    htri_t has = H5Aexists(file, "libra_format_version");
    if (has < 0) {
        h5_error(err, errlen, path, "H5Aexists", __FILE__, __LINE__);
        goto out;
    }
    if (!has) {
        errmsg_set(err, errlen, "%s: no root attribute libra_format_version: not a libra "
                   "model file", path);
        goto out;
    }
    /* a run's checkpoint holds the AdamW moments: resuming without them would restart
     * the optimizer silently */
    has = H5Lexists(file, "optimizer", H5P_DEFAULT);
    if (has < 0) {
        h5_error(err, errlen, path, "H5Lexists", __FILE__, __LINE__);
        goto out;
    }
    if (!has) {
        errmsg_set(err, errlen, "%s: no /optimizer group: the AdamW state of a checkpoint "
                   "is missing", path);
        goto out;
    }
    rc = 0;
out:
    if (file >= 0 && H5Fclose(file) < 0 && rc == 0) {
        h5_error(err, errlen, path, "H5Fclose", __FILE__, __LINE__);
        rc = -1;
    }
    H5Eclear2(H5E_DEFAULT);
    h5_quiet_end(&q);
    return rc;
}

/* Loads checkpoint step of root into s and its model path; -1 with the reason why it
 * is damaged, -2 if model_path is too small. */
static int try_load(const char *root, int step, struct ckpt_state *s, char *model_path,
                    size_t cap, char *err, size_t errlen)
{
    char dir[PATH_MAX], state[PATH_MAX], model[PATH_MAX];
    if (dir_path(dir, root, step, 0, err, errlen) || join(state, dir, "state.h5", err, errlen) ||
        join(model, dir, "model.h5", err, errlen))
        return -1;
    if (ckpt_state_load(state, s, err, errlen)) return -1;
    if (s->step != step) {
        errmsg_set(err, errlen, "%s: the state is of step %d, not %d", state, s->step, step);
        goto fail;
    }
    if (check_model(model, err, errlen)) goto fail;
    if (strlen(model) >= cap) {
        errmsg_set(err, errlen, "ckpt_load_latest: the model path %s does not fit the caller's "
                   "buffer (%zu bytes)", model, cap);
        ckpt_state_free(s);
        return -2; /* the caller's mistake: no point trying older checkpoints */
    }
    memcpy(model_path, model, strlen(model) + 1);
    return 0;
fail:
    ckpt_state_free(s);
    return -1;
}

int ckpt_load_latest(const char *root, struct ckpt_state *s, char *model_path, size_t cap,
                     char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    if (cap) model_path[0] = '\0';
    if (!root) {
        errmsg_set(err, errlen, "ckpt_load_latest: no root");
        return -1;
    }
    int *steps, n;
    if (scan(root, 1, &steps, &n, err, errlen)) return -1;
    int damaged = 0;
    for (int i = 0; i < n; i++) {
        char why[PATH_MAX + 1024], dir[PATH_MAX];
        ckpt_dir_path(root, steps[i], 0, dir, sizeof dir);
        int rc = try_load(root, steps[i], s, model_path, cap, why, sizeof why);
        if (rc == 0) {
            int step = steps[i];
            free(steps);
            return step;
        }
        if (rc == -2) {
            errmsg_set(err, errlen, "%s", why);
            free(steps);
            if (cap) model_path[0] = '\0';
            return -1;
        }
        LOG_W("checkpoint %s is damaged: %s; trying an older one", dir, why);
        damaged++;
    }
    free(steps);
    if (damaged)
        errmsg_set(err, errlen, "no complete checkpoint in %s (%d damaged, see the warnings)",
                   root, damaged);
    else
        errmsg_set(err, errlen, "no complete checkpoint in %s", root);
    if (cap) model_path[0] = '\0';
    return -1;
}

uint64_t ckpt_estimate_bytes(int64_t n_params)
{
    return 3 * 4 * (uint64_t)(n_params > 0 ? n_params : 0) + ((uint64_t)64 << 20);
}

int ckpt_check_space(const char *root, uint64_t need, char *err, size_t errlen)
{
    struct statvfs v;
    if (statvfs(root, &v) != 0) {
        errmsg_set(err, errlen, "%s: cannot read the free space: %s", root, strerror(errno));
        return -1;
    }
    uint64_t avail = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
    if (avail >= need) return 0;
    errmsg_set(err, errlen, "%s has %.2f GB free; one checkpoint of this model needs about "
               "%.2f GB (weights and AdamW moments in float32, and the run state): free "
               "space, or choose another run.checkpoint_dir", root, avail / 1e9, need / 1e9);
    return -1;
}
