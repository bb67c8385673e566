/*
 * Per-dataset checksums (include/libra/h5sum.h): XXH3-64 from libxxhash, about
 * 20 GB/s, so a checkpoint's hashing costs far less than its write.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "libra/errmsg.h"
#include "libra/h5sum.h"
#include "libra/h5try.h"

uint64_t h5sum_of(const char *name, const void *data, size_t bytes)
{
    XXH64_hash_t seed = XXH3_64bits(name, strlen(name));
    return (uint64_t)XXH3_64bits_withSeed(data, bytes, seed);
}

/* The dataset's absolute path in its file, or -1 (err set). */
static int name_of(hid_t dset, char *name, size_t n, const char *path, char *err, size_t errlen)
{
    ssize_t len;
    H5TRY(len = H5Iget_name(dset, name, n));
    if (len <= 0 || (size_t)len >= n) {
        errmsg_set(err, errlen, "%s: a dataset's name is empty or longer than %zu bytes", path,
                   n - 1);
        return -1;
    }
    return 0;
fail:
    return -1;
}

int h5sum_put(hid_t dset, const void *data, size_t bytes, const char *path, char *err,
              size_t errlen)
{
    char name[512];
    if (name_of(dset, name, sizeof name, path, err, errlen)) return -1;
    uint64_t sum = h5sum_of(name, data, bytes);
    return h5_attr_put(dset, H5SUM_ATTR, H5T_STD_U64LE, H5T_NATIVE_UINT64, &sum, path, err,
                       errlen);
}

int h5sum_check(hid_t dset, const void *data, size_t bytes, int *checked, const char *path,
                char *err, size_t errlen)
{
    hid_t attr = H5I_INVALID_HID, type = H5I_INVALID_HID;
    *checked = 0;
    char name[512];
    if (name_of(dset, name, sizeof name, path, err, errlen)) return -1;
    htri_t has;
    H5TRY(has = H5Aexists(dset, H5SUM_ATTR));
    if (!has) return 0;
    H5TRY(attr = H5Aopen(dset, H5SUM_ATTR, H5P_DEFAULT));
    H5TRY(type = H5Aget_type(attr));
    if (H5Tget_class(type) != H5T_INTEGER || H5Tget_size(type) != 8) {
        errmsg_set(err, errlen, "%s: %s: attribute %s is not a 64-bit integer", path, name,
                   H5SUM_ATTR);
        goto fail;
    }
    uint64_t stored = 0;
    H5TRY(H5Aread(attr, H5T_NATIVE_UINT64, &stored));
    close_id(&type, H5Tclose);
    H5CLOSE(attr, H5Aclose);
    uint64_t now = h5sum_of(name, data, bytes);
    if (now != stored) {
        errmsg_set(err, errlen,
                   "%s: %s: checksum mismatch (stored %016llx, read %016llx): the file is "
                   "damaged, or this is not the data written under that name",
                   path, name, (unsigned long long)stored, (unsigned long long)now);
        return -1;
    }
    *checked = 1;
    return 0;
fail:
    close_id(&type, H5Tclose);
    close_id(&attr, H5Aclose);
    return -1;
}

int64_t h5sum_first_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return (int64_t)i;
    return -1;
}
