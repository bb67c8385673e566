/*
 * Atomic plain files (include/libra/afile.h): temporary, fsync, rename, directory
 * fsync. Used for the Hugging Face files (safetensors, config.json, ...) that are
 * streamed to disk rather than built in memory like the HDF5 files.
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/afile.h"
#include "libra/errmsg.h"

#include "libra/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void afile_release(struct afile *f)
{
    free(f->path);
    free(f->tmp);
    f->path = f->tmp = NULL;
    f->fd = -1;
}

int afile_open(struct afile *f, const char *path, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    size_t n = strlen(path) + 32;
    f->path = xstrdup(path);
    f->tmp = xmalloc(n);
    snprintf(f->tmp, n, "%s.tmp-%ld", path, (long)getpid());
    unlink(f->tmp); /* a stale one of a crashed process with our pid */
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (f->fd < 0) {
        errmsg_set(err, errlen, "%s: cannot create: %s", f->tmp, strerror(errno));
        afile_release(f);
        return -1;
    }
    return 0;
}

int afile_write(struct afile *f, const void *buf, size_t n, char *err, size_t errlen)
{
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t w = write(f->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            errmsg_set(err, errlen, "%s: write failed after %llu bytes: %s", f->tmp,
                       (unsigned long long)f->written, w < 0 ? strerror(errno) : "no progress");
            return -1;
        }
        p += w;
        n -= (size_t)w;
        f->written += (uint64_t)w;
    }
    return 0;
}

int afile_fsync_dir(const char *dir, char *err, size_t errlen)
{
    int fd = open(dir, O_RDONLY);
    if (fd < 0) {
        errmsg_set(err, errlen, "%s: cannot open the directory for fsync: %s", dir,
                   strerror(errno));
        return -1;
    }
    if (fsync(fd) != 0 && errno != EINVAL) {
        errmsg_set(err, errlen, "%s: directory fsync failed: %s", dir, strerror(errno));
        close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

int afile_commit(struct afile *f, char *err, size_t errlen)
{
    if (fsync(f->fd) != 0) {
        errmsg_set(err, errlen, "%s: fsync failed: %s", f->tmp, strerror(errno));
        goto fail;
    }
    int rc = close(f->fd);
    f->fd = -1;
    if (rc != 0) {
        errmsg_set(err, errlen, "%s: close failed: %s", f->tmp, strerror(errno));
        goto fail;
    }
    if (rename(f->tmp, f->path) != 0) {
        errmsg_set(err, errlen, "%s: cannot rename %s over it: %s", f->path, f->tmp,
                   strerror(errno));
        goto fail;
    }
    char *dir = xstrdup(f->path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, 2, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    rc = afile_fsync_dir(dir, err, errlen);
    free(dir);
    afile_release(f);
    return rc; /* the new file is in place either way */
fail:
    afile_abort(f);
    return -1;
}

void afile_abort(struct afile *f)
{
    if (!f->tmp) return;
    if (f->fd >= 0) close(f->fd);
    unlink(f->tmp);
    afile_release(f);
}

int afile_put(const char *path, const void *buf, size_t n, char *err, size_t errlen)
{
    struct afile f;
    if (afile_open(&f, path, err, errlen)) return -1;
    if (afile_write(&f, buf, n, err, errlen)) {
        afile_abort(&f);
        return -1;
    }
    return afile_commit(&f, err, errlen);
}
