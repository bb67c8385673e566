/*
 * Atomic plain files (the convention of libra/h5atomic.h for files that are not
 * HDF5): bytes are streamed into <path>.tmp-<pid> in the same directory, which is
 * fsync'd, renamed over path, and the directory fsync'd. A failed or abandoned write
 * removes its temporary and leaves any file already at path untouched.
 *
 *     struct afile f;
 *     if (afile_open(&f, path, err, n)) goto fail;
 *     if (afile_write(&f, buf, len, err, n)) goto fail;    (any number of times)
 *     if (afile_commit(&f, err, n)) goto fail;
 *   fail:
 *     afile_abort(&f);                                    (a no-op after commit)
 *
 * Errors are "<path>: <what>: <strerror>" (write errors name the temporary).
 */
#ifndef LIBRA_AFILE_H
#define LIBRA_AFILE_H

#include <stddef.h>
#include <stdint.h>

struct afile {
    int fd;           /* -1 when closed */
    char *path;       /* the final path */
    char *tmp;        /* <path>.tmp-<pid> */
    uint64_t written; /* bytes so far */
};

/* Creates the temporary (O_EXCL after removing a stale one of this pid). */
int afile_open(struct afile *f, const char *path, char *err, size_t errlen);
int afile_write(struct afile *f, const void *buf, size_t n, char *err, size_t errlen);
/* fsync, close, rename over path, fsync the directory; frees f either way. */
int afile_commit(struct afile *f, char *err, size_t errlen);
/* Closes and removes the temporary and frees f; a no-op on a committed or aborted f. */
void afile_abort(struct afile *f);

/* The whole file at once: afile_open + afile_write + afile_commit. */
int afile_put(const char *path, const void *buf, size_t n, char *err, size_t errlen);
/* fsync of a directory (so a rename or a new entry in it is durable); EINVAL from file
 * systems that cannot fsync a directory is not an error. */
int afile_fsync_dir(const char *dir, char *err, size_t errlen);

#endif
