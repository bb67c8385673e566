/*
 * Atomic HDF5 files (include/libra/h5atomic.h): the file is built in memory by HDF5's
 * core driver without a backing store, then written to <path>.tmp-<pid>, fsync'd,
 * renamed over path, and the directory fsync'd.
 *
 * Why in memory: with HDF5 1.10 a write error surfacing in H5Dclose / H5Fclose leaves
 * the file ID half-destroyed, and the library then crashes in its atexit cleanup
 * (seen with a full disk simulated by RLIMIT_FSIZE). Here HDF5 never sees a disk
 * error; the plain write() below reports it with errno.
 *
 * Why callbacks: the driver's buffer is allocated through file-image callbacks so that
 * it is ours. At H5Fclose the driver "frees" it (H5FD_FILE_IMAGE_OP_FILE_CLOSE) and we
 * keep it, with no copy. H5Fget_file_image() on a file still open is no substitute:
 * HDF5 1.10 clears the superblock's status flags in the copy without updating the
 * 1.8-format superblock's checksum (the copy then fails to open). The buffer is grown
 * in steps of the driver's increment; the file is its first H5Fget_file_image(file,
 * NULL, 0) bytes (the end of address after the final flush), taken before closing.
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/h5atomic.h"
#include "libra/errmsg.h"

#include "libra/h5util.h"
#include "libra/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define IMAGE_INCREMENT ((size_t)64 * 1024) /* the core driver's growth step */
#define WRITE_CHUNK ((size_t)1 << 30)       /* largest single write() */

/* Needs `struct h5atomic *a; char *err; size_t errlen;` and a `fail:` label in scope. */
#define H5TRY(expr)                                                      \
    do {                                                                 \
        if ((expr) < 0) {                                                \
            h5_error(err, errlen, a->path, #expr, __FILE__, __LINE__);   \
            goto fail;                                                   \
        }                                                                \
    } while (0)

/* ---- the driver's buffer ---- */

static void *image_grow(struct h5atomic *a, size_t size)
{
    if (size > a->cap) {
        size_t cap = a->cap + a->cap / 2;
        if (cap < a->hint) cap = a->hint;
        if (cap < size) cap = size;
        a->image = xrealloc(a->image, cap);
        a->cap = cap;
    }
    a->size = size;
    return a->image;
}

static void *image_malloc(size_t size, H5FD_file_image_op_t op, void *udata)
{
    if (op == H5FD_FILE_IMAGE_OP_FILE_OPEN || op == H5FD_FILE_IMAGE_OP_FILE_RESIZE)
        return image_grow(udata, size);
    return xmalloc(size ? size : 1);
}

static void *image_memcpy(void *dest, const void *src, size_t size, H5FD_file_image_op_t op,
                          void *udata)
{
    (void)op;
    (void)udata;
    return memcpy(dest, src, size);
}

static void *image_realloc(void *ptr, size_t size, H5FD_file_image_op_t op, void *udata)
{
    struct h5atomic *a = udata;
    if (op == H5FD_FILE_IMAGE_OP_FILE_RESIZE && (ptr == NULL || ptr == a->image))
        return image_grow(a, size);
    return xrealloc(ptr, size ? size : 1);
}

static herr_t image_free(void *ptr, H5FD_file_image_op_t op, void *udata)
{
    struct h5atomic *a = udata;
    if (ptr && ptr == a->image) {
        a->released = op == H5FD_FILE_IMAGE_OP_FILE_CLOSE;
        return 0; /* kept: h5atomic_commit writes it, h5atomic_free frees it */
    }
    free(ptr);
    return 0;
}

static void *image_udata_copy(void *udata) { return udata; }
static herr_t image_udata_free(void *udata)
{
    (void)udata;
    return 0;
}

/* ---- building ---- */

hid_t h5atomic_create(struct h5atomic *a, const char *path, size_t size_hint, H5F_libver_t low,
                      char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    a->file = H5I_INVALID_HID;
    a->hint = size_hint;
    a->path = xstrdup(path);
    size_t n = strlen(path) + 32;
    a->tmp = xmalloc(n);
    snprintf(a->tmp, n, "%s.tmp-%ld", path, (long)getpid());
    hid_t fapl = H5I_INVALID_HID;
    H5FD_file_image_callbacks_t cb = {image_malloc,     image_memcpy,     image_realloc,
                                      image_free,       image_udata_copy, image_udata_free,
                                      a};
    H5TRY(fapl = H5Pcreate(H5P_FILE_ACCESS));
    H5TRY(H5Pset_fapl_core(fapl, IMAGE_INCREMENT, 0));
    H5TRY(H5Pset_file_image_callbacks(fapl, &cb));
    H5TRY(H5Pset_libver_bounds(fapl, low, H5F_LIBVER_LATEST));
    /* Named tmp: without a backing store the driver never opens it on disk. */
    H5TRY(a->file = H5Fcreate(a->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
    H5TRY(H5Pclose(fapl));
    return a->file;
fail:
    if (fapl >= 0) H5Pclose(fapl);
    h5atomic_free(a);
    return H5I_INVALID_HID;
}

int h5atomic_close_file(struct h5atomic *a, char *err, size_t errlen)
{
    if (a->file < 0) return 0;
    ssize_t eoa = -1; /* the file's true length; the buffer may have a zero tail */
    H5TRY(H5Fflush(a->file, H5F_SCOPE_GLOBAL));
    H5TRY(eoa = H5Fget_file_image(a->file, NULL, 0));
    hid_t file = a->file;
    a->file = H5I_INVALID_HID; /* not closed again, even if this close fails */
    H5TRY(H5Fclose(file));
    if (!a->released || !a->image || (size_t)eoa > a->size) {
        errmsg_set(err, errlen,
                   "%s: HDF5 did not hand back the in-memory file image (%zd bytes of %zu)",
                   a->path, eoa, a->size);
        return -1;
    }
    a->size = (size_t)eoa;
    return 0;
fail:
    if (a->file >= 0) H5Fclose(a->file);
    a->file = H5I_INVALID_HID;
    H5Eclear2(H5E_DEFAULT);
    return -1;
}

/* ---- writing ---- */

/* Writes n bytes of buf to fd; *done counts the bytes of the whole file written. */
static int write_all(int fd, const unsigned char *buf, size_t n, size_t *done, size_t total,
                     const char *name, char *err, size_t errlen)
{
    for (size_t off = 0; off < n;) {
        size_t chunk = n - off < WRITE_CHUNK ? n - off : WRITE_CHUNK;
        ssize_t w = write(fd, buf + off, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            errmsg_set(err, errlen, "%s: write failed after %zu of %zu bytes: %s", name, *done,
                       total, w < 0 ? strerror(errno) : "no progress");
            return -1;
        }
        off += (size_t)w;
        *done += (size_t)w;
    }
    return 0;
}

/* Creates (or truncates) tmp with the image and the trailer, fsyncs and closes it. */
static int write_tmp(const struct h5atomic *a, const void *trailer, size_t tlen, char *err,
                     size_t errlen)
{
    int fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd < 0) {
        errmsg_set(err, errlen, "%s: cannot create: %s", a->tmp, strerror(errno));
        return -1;
    }
    size_t done = 0, total = a->size + tlen;
    if (write_all(fd, a->image, a->size, &done, total, a->tmp, err, errlen) ||
        write_all(fd, trailer, tlen, &done, total, a->tmp, err, errlen)) {
        close(fd);
        return -1;
    }
    if (fsync(fd) != 0) {
        errmsg_set(err, errlen, "%s: fsync failed: %s", a->tmp, strerror(errno));
        close(fd);
        return -1;
    }
    if (close(fd) != 0) {
        errmsg_set(err, errlen, "%s: close failed: %s", a->tmp, strerror(errno));
        return -1;
    }
    return 0;
}

/* fsync of the directory holding path, so that a rename in it is durable. */
static int fsync_dir_of(const char *path, char *err, size_t errlen)
{
    char *dir = xstrdup(path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = '\0';
    else if (slash)
        *slash = '\0';
    const char *d = slash ? dir : ".";
    int rc = 0, fd = open(d, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        errmsg_set(err, errlen, "%s: cannot open the directory for fsync: %s", d,
                   strerror(errno));
        rc = -1;
    } else {
        /* Some file systems cannot fsync a directory (EINVAL): nothing more to do. */
        if (fsync(fd) != 0 && errno != EINVAL) {
            errmsg_set(err, errlen, "%s: directory fsync failed: %s", d, strerror(errno));
            rc = -1;
        }
        if (close(fd) != 0 && rc == 0) {
            errmsg_set(err, errlen, "%s: close failed: %s", d, strerror(errno));
            rc = -1;
        }
    }
    free(dir);
    return rc;
}

int h5atomic_commit(struct h5atomic *a, const void *trailer, size_t tlen, char *err,
                    size_t errlen)
{
    if (!a->tmp) {
        errmsg_set(err, errlen, "h5atomic_commit: no file being built");
        return -1;
    }
    if (h5atomic_close_file(a, err, errlen)) return -1;
    if (write_tmp(a, trailer, tlen, err, errlen)) {
        unlink(a->tmp);
        return -1;
    }
    if (rename(a->tmp, a->path) != 0) {
        errmsg_set(err, errlen, "%s: cannot rename %s over it: %s", a->path, a->tmp,
                   strerror(errno));
        unlink(a->tmp);
        return -1;
    }
    return fsync_dir_of(a->path, err, errlen); /* the new file is in place either way */
}

void h5atomic_free(struct h5atomic *a)
{
    if (!a) return;
    if (a->file >= 0) {
        H5Fclose(a->file);
        H5Eclear2(H5E_DEFAULT);
    }
    if (a->released) free(a->image); /* else the driver may still hold it */
    free(a->path);
    free(a->tmp);
    memset(a, 0, sizeof *a);
    a->file = H5I_INVALID_HID;
}
