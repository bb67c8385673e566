/*
 * Checked HDF5 calls for the file readers and writers that name a path in their
 * messages (model files, checkpoint state, prefix trees). H5TRY needs
 * `const char *path; char *err; size_t errlen;` and a `fail:` label in scope; the
 * message comes from h5_error (h5util.h).
 */
#ifndef LIBRA_H5TRY_H
#define LIBRA_H5TRY_H

#include "libra/h5util.h"

#define H5TRY(expr)                                                 \
    do {                                                            \
        if ((expr) < 0) {                                           \
            h5_error(err, errlen, path, #expr, __FILE__, __LINE__); \
            goto fail;                                              \
        }                                                           \
    } while (0)

/* Closes id on the success path; it is marked closed first, so a close that fails
 * (a write error surfacing at close) is not retried by the fail: path. */
#define H5CLOSE(id, closer)       \
    do {                          \
        hid_t close_id_ = (id);   \
        (id) = H5I_INVALID_HID;   \
        H5TRY(closer(close_id_)); \
    } while (0)

/* The fail: path's close: closes id if open and marks it closed. */
static inline void close_id(hid_t *id, herr_t (*closer)(hid_t))
{
    if (*id >= 0) closer(*id);
    *id = H5I_INVALID_HID;
}

#endif
