/*
 * Atomic HDF5 files: an HDF5 file is built in memory (HDF5's core driver, no backing
 * store) and only then written to <path>.tmp-<pid> in the same directory, fsync'd,
 * renamed over path and the directory fsync'd. HDF5 never touches the disk, so every
 * disk error (ENOSPC, EFBIG, EIO) is reported by us with errno, and a failed save
 * leaves any existing file at path untouched and no temporary behind. Costs one extra
 * copy of the file in memory while saving.
 *
 * Use (every call after h5atomic_create is followed by h5atomic_free, success or not):
 *
 *     struct h5atomic a;
 *     hid_t file = h5atomic_create(&a, path, size_hint, H5F_LIBVER_EARLIEST, err, n);
 *     if (file < 0) goto fail;
 *     ... write datasets / attributes into file ...
 *     if (h5atomic_commit(&a, NULL, 0, err, n)) goto fail;
 *   fail:
 *     h5atomic_free(&a);
 *
 * A format that appends bytes to the image (a trailer with a hash of the image, say)
 * calls h5atomic_close_file first, computes them from a.image / a.size, and passes
 * them to h5atomic_commit.
 *
 * HDF5 failures give "<path>: <call> failed (file:line): <HDF5 message>" in err;
 * silencing HDF5's automatic error printing around the calls (h5_quiet_begin) is the
 * caller's business. Not thread-safe (HDF5 serial API).
 */
#ifndef LIBRA_H5ATOMIC_H
#define LIBRA_H5ATOMIC_H

#include <hdf5.h>
#include <stddef.h>

/*
 * An in-memory HDF5 file being built. The core driver's callbacks hold a pointer to
 * it, so it must not move while the file is open. Fields are read-only to callers.
 */
struct h5atomic {
    hid_t file;           /* the open file, H5I_INVALID_HID once closed */
    unsigned char *image; /* the driver's buffer; after h5atomic_close_file the file */
    size_t size;          /* bytes in use; after h5atomic_close_file the file's length */
    size_t cap;           /* bytes allocated (grown geometrically, first to hint) */
    size_t hint;          /* expected file size (0: unknown) */
    int released;         /* the driver closed the file: image is ours alone */
    char *path;           /* the final path (messages name it) */
    char *tmp;            /* <path>.tmp-<pid>: the file's HDF5 name and the temporary */
};

/*
 * Starts an empty in-memory file that will become path. size_hint (bytes, 0 if
 * unknown) sizes the first allocation; low is the oldest HDF5 format version the
 * file may use (H5F_LIBVER_EARLIEST: HDF5's default; H5F_LIBVER_V18: checksummed
 * metadata). Returns the file ID (owned by a: do not close it) or H5I_INVALID_HID
 * with a message. Touches no file on disk.
 */
hid_t h5atomic_create(struct h5atomic *a, const char *path, size_t size_hint, H5F_libver_t low,
                      char *err, size_t errlen);

/*
 * Flushes and closes the file; a->image then holds the complete file, a->size bytes.
 * Returns 0, or -1 with a message (the file is closed either way).
 */
int h5atomic_close_file(struct h5atomic *a, char *err, size_t errlen);

/*
 * Closes the file if still open, then writes the image followed by trailer (tlen
 * bytes; NULL, 0 for none) to a->tmp, fsyncs it, renames it over a->path and fsyncs
 * the directory. On failure returns -1 with a message (write errors name the
 * temporary); the temporary is removed and a file already at path is untouched,
 * unless only the final directory fsync failed (the new file is then in place).
 */
int h5atomic_commit(struct h5atomic *a, const void *trailer, size_t tlen, char *err,
                    size_t errlen);

/* Closes the file if still open (abandoning it: nothing is written) and frees a;
 * a no-op on a struct that h5atomic_free already freed. */
void h5atomic_free(struct h5atomic *a);

#endif
