/*
 * Per-dataset checksums of libra's HDF5 model and checkpoint files: every tensor (and
 * every checkpoint-state array) carries an attribute "libra_xxh3", the 64-bit XXH3
 * hash of its bytes seeded with the hash of its path in the file. A flipped byte
 * changes the data's hash; a tensor stored under another tensor's name (a swap) fails
 * because the name is part of the seed. Files written before the checksums existed
 * have no attribute and are read unchecked.
 */
#ifndef LIBRA_H5SUM_H
#define LIBRA_H5SUM_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#define H5SUM_ATTR "libra_xxh3"

/* The checksum of a dataset named name (its absolute path in the file, "/a/b")
 * holding bytes. */
uint64_t h5sum_of(const char *name, const void *data, size_t bytes);

/* Writes the checksum attribute on dset, from the data written to it in memory order
 * (the name is the dataset's path, H5Iget_name). 0, or -1 with the error in err
 * (path: the file, for the message). */
int h5sum_put(hid_t dset, const void *data, size_t bytes, const char *path, char *err,
              size_t errlen);

/* Checks the data just read from dset (in the memory type it was written from)
 * against its checksum attribute: 0 when it matches (*checked = 1) or there is none
 * (*checked = 0); -1 with a message naming the file and the dataset when it does not,
 * or the attribute is unreadable. */
int h5sum_check(hid_t dset, const void *data, size_t bytes, int *checked, const char *path,
                char *err, size_t errlen);

/* The index of the first NaN or infinity of x[0, n), or -1. */
int64_t h5sum_first_nonfinite(const float *x, size_t n);

#endif
