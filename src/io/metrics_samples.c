/*
 * /samples: trained trajectories as text, every output.sample_interval steps (include/
 * libra/metrics.h, metrics_sample). A table of its own, kept apart from the fixed-width
 * tables of metrics.c because its two text columns are variable-length UTF-8 strings
 * (a transcript is as long as the trajectory). Each call appends one row through
 * metrics_write_with, so the row is on disk with the step's other rows.
 */
#include <hdf5.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "libra/h5try.h"
#include "libra/metrics.h"

static const char *const path = NULL; /* H5TRY's: the messages name the metrics writer */

#define SAMPLES_CHUNK 64 /* rows */

/* The memory layout (in_file = 0) or the packed little-endian file layout. */
static hid_t row_type(int in_file, hid_t str, char *err, size_t errlen)
{
    hid_t t = H5I_INVALID_HID;
    const size_t sp = sizeof(char *);
    size_t size = in_file ? 4 + 8 + 8 + 8 + 4 + 4 + 4 + 2 * sp : sizeof(struct metrics_sample_row);
    H5TRY(t = H5Tcreate(H5T_COMPOUND, size));
#define MEMBER(name, field, ftype, mtype, off)                                            \
    H5TRY(H5Tinsert(t, name, in_file ? (off) : offsetof(struct metrics_sample_row, field), \
                    in_file ? (ftype) : (mtype)))
    MEMBER("step", step, H5T_STD_I32LE, H5T_NATIVE_INT32, 0);
    MEMBER("traj_id", traj_id, H5T_STD_I64LE, H5T_NATIVE_INT64, 4);
    MEMBER("group_id", group_id, H5T_STD_I64LE, H5T_NATIVE_INT64, 12);
    MEMBER("reward", reward, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 20);
    MEMBER("correct", correct, H5T_STD_I32LE, H5T_NATIVE_INT32, 28);
    MEMBER("turns", turns, H5T_STD_I32LE, H5T_NATIVE_INT32, 32);
    MEMBER("tool_calls", tool_calls, H5T_STD_I32LE, H5T_NATIVE_INT32, 36);
    MEMBER("prompt", prompt, str, str, 40);
    MEMBER("completion", completion, str, str, 40 + sp);
#undef MEMBER
    return t;
fail:
    if (t >= 0) H5Tclose(t);
    return H5I_INVALID_HID;
}

static const char *const units[][2] = {
    {"step", "1"},         {"traj_id", "1"}, {"group_id", "1"}, {"reward", "1"},
    {"correct", "1"},      {"turns", "turns"}, {"tool_calls", "tool calls"},
    {"prompt", "text"},    {"completion", "text"}};

/* Opens /samples, made (with its description and units) the first time. */
static hid_t open_table(hid_t file, hid_t ftype, char *err, size_t errlen)
{
    hid_t d = H5I_INVALID_HID, space = H5I_INVALID_HID, dcpl = H5I_INVALID_HID;
    htri_t has;
    H5TRY(has = H5Lexists(file, "samples", H5P_DEFAULT));
    if (has) {
        H5TRY(d = H5Dopen2(file, "samples", H5P_DEFAULT));
        return d;
    }
    hsize_t zero = 0, unlimited = H5S_UNLIMITED, chunk = SAMPLES_CHUNK;
    H5TRY(space = H5Screate_simple(1, &zero, &unlimited));
    H5TRY(dcpl = H5Pcreate(H5P_DATASET_CREATE));
    H5TRY(H5Pset_chunk(dcpl, 1, &chunk));
    H5TRY(d = H5Dcreate2(file, "samples", ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
    H5TRY(H5Pclose(dcpl));
    dcpl = H5I_INVALID_HID;
    H5TRY(H5Sclose(space));
    space = H5I_INVALID_HID;
    if (h5_attr_put_string(d, "description",
                        "trained trajectories as text, output.samples of them every "
                        "output.sample_interval steps: the prompt and the completion (turns, "
                        "tool calls, tool returns; special tokens spelled out)",
                        path, err, errlen))
        goto fail;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "units.%s", units[i][0]);
        if (h5_attr_put_string(d, name, units[i][1], path, err, errlen)) goto fail;
    }
    return d;
fail:
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    if (d >= 0) H5Dclose(d);
    return H5I_INVALID_HID;
}

static int append(int64_t file, void *arg, char *err, size_t errlen)
{
    const struct metrics_sample_row *row = arg;
    hid_t str = H5I_INVALID_HID, ftype = H5I_INVALID_HID, mtype = H5I_INVALID_HID;
    hid_t d = H5I_INVALID_HID, fspace = H5I_INVALID_HID, mspace = H5I_INVALID_HID;
    H5TRY(str = H5Tcopy(H5T_C_S1));
    H5TRY(H5Tset_size(str, H5T_VARIABLE));
    H5TRY(H5Tset_cset(str, H5T_CSET_UTF8));
    if ((ftype = row_type(1, str, err, errlen)) < 0 || (mtype = row_type(0, str, err, errlen)) < 0)
        goto fail;
    if ((d = open_table((hid_t)file, ftype, err, errlen)) < 0) goto fail;
    hsize_t n, one = 1;
    H5TRY(fspace = H5Dget_space(d));
    H5TRY(H5Sget_simple_extent_dims(fspace, &n, NULL));
    H5TRY(H5Sclose(fspace));
    fspace = H5I_INVALID_HID;
    hsize_t grown = n + 1;
    H5TRY(H5Dset_extent(d, &grown));
    H5TRY(fspace = H5Dget_space(d));
    H5TRY(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &n, NULL, &one, NULL));
    H5TRY(mspace = H5Screate_simple(1, &one, NULL));
    H5TRY(H5Dwrite(d, mtype, mspace, fspace, H5P_DEFAULT, row));
    H5CLOSE(mspace, H5Sclose);
    H5CLOSE(fspace, H5Sclose);
    H5CLOSE(d, H5Dclose);
    H5CLOSE(mtype, H5Tclose);
    H5CLOSE(ftype, H5Tclose);
    H5CLOSE(str, H5Tclose);
    return 0;
fail:
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    if (d >= 0) H5Dclose(d);
    if (mtype >= 0) H5Tclose(mtype);
    if (ftype >= 0) H5Tclose(ftype);
    if (str >= 0) H5Tclose(str);
    return -1;
}

int metrics_sample(struct metrics *m, const struct metrics_sample_row *row)
{
    struct metrics_sample_row r = *row;
    if (!r.prompt) r.prompt = "";
    if (!r.completion) r.completion = "";
    return metrics_write_with(m, append, &r);
}
