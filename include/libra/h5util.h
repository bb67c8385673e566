/*
 * Shared HDF5 error handling for the modules that write or read HDF5 (metrics,
 * model files): silence HDF5's automatic stderr dump around our calls, and turn
 * the library's error stack into one line for the caller's message.
 */
#ifndef LIBRA_H5UTIL_H
#define LIBRA_H5UTIL_H

#include <hdf5.h>
#include <stddef.h>

struct h5quiet {
    H5E_auto2_t fn;
    void *data;
};

/* Switches HDF5's automatic error printing off (remembering it) / back on. */
void h5_quiet_begin(struct h5quiet *q);
void h5_quiet_end(const struct h5quiet *q);
/* Writes "[<path>: ]<call> failed (file:line): <HDF5 stack text>" into err (if err
 * and errlen) and clears the HDF5 error stack. expr is the failing expression; the
 * H5 call name is taken from it. path may be NULL. */
void h5_error(char *err, size_t errlen, const char *path, const char *expr, const char *file,
              int line);
/* Reads column col of the 1-D compound dataset `table` of an open file as n elements of
 * memory type member (elem bytes each) into a malloc'd *out: HDF5's conversions, and an
 * enum column (which HDF5 1.10 converts to nothing but another enum) as its codes for a
 * number member, its value names for a string one. 0, or -1 with a message. */
int h5_read_column(hid_t file, const char *table, const char *col, hid_t member, size_t elem,
                   void **out, size_t *n, char *err, size_t errlen);
/* Reads column col of the 1-D compound dataset `table` of an open file as doubles
 * (HDF5 converts integer columns; an enum column gives its codes). *out is malloc'ed
 * (free it), *n its rows. 0, or -1 with a message naming the table and column. */
int h5_read_column_f64(hid_t file, const char *table, const char *col, double **out, size_t *n,
                       char *err, size_t errlen);
/* The same for a string column, or an enum column as its value names, as *n rows of
 * width bytes each (NUL-terminated, truncated to width - 1) in one malloc'd block. */
int h5_read_column_str(hid_t file, const char *table, const char *col, size_t width, char **out,
                       size_t *n, char *err, size_t errlen);
/* Creates the scalar attribute name on obj (file type ftype) from value (memory type
 * mtype). 0, or -1 with "<path>: ..." in err. */
int h5_attr_put(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *value,
                const char *path, char *err, size_t errlen);
/* h5_attr_put of n values as a 1-D attribute (n = 0: a scalar, as h5_attr_put). */
int h5_attr_put_array(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *value,
                      size_t n, const char *path, char *err, size_t errlen);
/* h5_attr_put of a variable-length UTF-8 string (any length; h5py reads a str). */
int h5_attr_put_string(hid_t obj, const char *name, const char *value, const char *path,
                       char *err, size_t errlen);
/* A numeric root attribute as a double; 0, or -1 when missing or unreadable. */
int h5_read_attr_f64(hid_t file, const char *name, double *out);
/* Opens path read-only without HDF5's error printout; negative if it is not a readable
 * HDF5 file (the caller says so). */
hid_t h5_open_readonly(const char *path);

#endif
