/*
 * The prefix tree on disk (include/libra/ptree.h): an HDF5 group that h5py can read.
 *
 * Layout of group <name> (format "libra-ptree", version PTREE_FORMAT_VERSION = 1):
 *   attributes  format: string "libra-ptree"; description: string;
 *               version, window, insertions, payload_small, payload_large: int64
 *   nodes       (N) compound, one row per node, parents before their children:
 *               prompt_id int64 (PTREE_GLOBAL = INT64_MIN for the global tree),
 *               state int32 (-1 for a root), depth int32, parent int32 (row index,
 *               -1 for a root), visits int64, n int32 (samples in the window),
 *               mean, p90, mean_pos float64 (informational), key string
 *               "<tool>:<size>:<status>" or "root" (informational)
 *   rem, pos    (sum of n) float32: every node's window, oldest first, node after
 *               node in row order
 *
 * Loading trusts nothing in the file: attributes, shapes, types, every index,
 * count and sample are checked before the tree is built, dataset sizes are checked
 * against the file's size before anything is allocated, the statistics are
 * recomputed from the samples (only visits and the samples are taken from the
 * file), and a tree built with other payload thresholds is refused (its state codes
 * mean other size classes). A failed load leaves t as it was.
 *
 * Saving is atomic: the file is built at <path>.tmp-<pid>, closed, fsync'd, renamed
 * over path and the directory fsync'd; a failure removes the temporary and leaves
 * an existing file untouched.
 *
 * HDF5's automatic error printing is off only during each call here. Not
 * thread-safe (HDF5 serial API).
 */
#define _POSIX_C_SOURCE 200809L
#include "ptree_internal.h"
#include "libra/errmsg.h"

#include "libra/h5atomic.h"
#include "libra/h5try.h"
#include "libra/h5util.h"
#include "libra/log.h"
#include "libra/tool_state.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PTREE_FORMAT "libra-ptree"
#define PTREE_FORMAT_VERSION 1
#define PTREE_MAX_WINDOW_FILE (1 << 20)
#define PTREE_MAX_INSERTIONS ((int64_t)1 << 53) /* merged counts stay far from overflow */
#define KEY_LEN 64


/* ---- errors ---- */


/* ---- writing ---- */

/* A row of "nodes" as written. */
struct node_row {
    int64_t prompt_id;
    int32_t state, depth, parent;
    int64_t visits;
    int32_t n;
    double mean, p90, mean_pos;
    char key[KEY_LEN];
};

/* The memory type (struct offsets, native) or the file type (packed, little-endian). */
static hid_t row_type(int in_file, const char *path, char *err, size_t errlen)
{
    hid_t t = H5I_INVALID_HID, s = H5I_INVALID_HID;
    struct member {
        const char *name;
        size_t off;
        hid_t mem, file;
        size_t size;
    } m[] = {
        {"prompt_id", offsetof(struct node_row, prompt_id), H5T_NATIVE_INT64, H5T_STD_I64LE, 8},
        {"state", offsetof(struct node_row, state), H5T_NATIVE_INT32, H5T_STD_I32LE, 4},
        {"depth", offsetof(struct node_row, depth), H5T_NATIVE_INT32, H5T_STD_I32LE, 4},
        {"parent", offsetof(struct node_row, parent), H5T_NATIVE_INT32, H5T_STD_I32LE, 4},
        {"visits", offsetof(struct node_row, visits), H5T_NATIVE_INT64, H5T_STD_I64LE, 8},
        {"n", offsetof(struct node_row, n), H5T_NATIVE_INT32, H5T_STD_I32LE, 4},
        {"mean", offsetof(struct node_row, mean), H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, 8},
        {"p90", offsetof(struct node_row, p90), H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, 8},
        {"mean_pos", offsetof(struct node_row, mean_pos), H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, 8},
    };
    size_t nm = sizeof m / sizeof m[0], packed = KEY_LEN;
    for (size_t i = 0; i < nm; i++) packed += m[i].size;
    H5TRY(t = H5Tcreate(H5T_COMPOUND, in_file ? packed : sizeof(struct node_row)));
    size_t off = 0;
    for (size_t i = 0; i < nm; i++) {
        H5TRY(H5Tinsert(t, m[i].name, in_file ? off : m[i].off, in_file ? m[i].file : m[i].mem));
        off += m[i].size;
    }
    H5TRY(s = H5Tcopy(H5T_C_S1));
    H5TRY(H5Tset_size(s, KEY_LEN));
    H5TRY(H5Tset_strpad(s, H5T_STR_NULLTERM));
    H5TRY(H5Tinsert(t, "key", in_file ? off : offsetof(struct node_row, key), s));
    H5CLOSE(s, H5Tclose);
    return t;
fail:
    close_id(&s, H5Tclose);
    close_id(&t, H5Tclose);
    return H5I_INVALID_HID;
}

static int attr_put_i64(hid_t obj, const char *name, int64_t v, const char *path, char *err,
                        size_t errlen)
{
    return h5_attr_put(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v, path, err, errlen);
}

/* Variable-length UTF-8 string (h5py reads it as str). */
static int attr_put_string(hid_t obj, const char *name, const char *value, const char *path,
                           char *err, size_t errlen)
{
    hid_t type = H5I_INVALID_HID;
    H5TRY(type = H5Tcopy(H5T_C_S1));
    H5TRY(H5Tset_size(type, H5T_VARIABLE));
    H5TRY(H5Tset_cset(type, H5T_CSET_UTF8));
    if (h5_attr_put(obj, name, type, type, &value, path, err, errlen)) goto fail;
    H5CLOSE(type, H5Tclose);
    return 0;
fail:
    close_id(&type, H5Tclose);
    return -1;
}

/* A 1-D dataset of n elements (n may be 0). */
static int dset_put(hid_t loc, const char *name, hid_t ftype, hid_t mtype, hsize_t n,
                    const void *data, const char *path, char *err, size_t errlen)
{
    hid_t space = H5I_INVALID_HID, dset = H5I_INVALID_HID, dcpl = H5I_INVALID_HID;
    H5TRY(space = H5Screate_simple(1, &n, NULL));
    H5TRY(dcpl = H5Pcreate(H5P_DATASET_CREATE));
    H5TRY(H5Pset_obj_track_times(dcpl, 0)); /* the same tree gives the same bytes */
    H5TRY(dset = H5Dcreate2(loc, name, ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
    if (n > 0) H5TRY(H5Dwrite(dset, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
    H5CLOSE(dset, H5Dclose);
    H5CLOSE(dcpl, H5Pclose);
    H5CLOSE(space, H5Sclose);
    return 0;
fail:
    close_id(&dset, H5Dclose);
    close_id(&dcpl, H5Pclose);
    close_id(&space, H5Sclose);
    return -1;
}

/* Writes group name under loc; path names the file or group in messages. */
static int write_group(const struct ptree *t, hid_t loc, const char *name,
                       const struct tool_state_config *ts, const char *const *tool_names,
                       int n_tools, const char *path, char *err, size_t errlen)
{
    char why[256];
    if (tool_state_config_check(ts, why, sizeof why)) {
        errmsg_set(err, errlen, "%s: cannot write the prefix tree: %s", path, why);
        return -1;
    }
    hid_t g = H5I_INVALID_HID, mtype = H5I_INVALID_HID, ftype = H5I_INVALID_HID;
    hid_t gcpl = H5I_INVALID_HID;
    struct node_row *rows = xcalloc((size_t)t->n_node, sizeof *rows);
    size_t total = 0;
    for (int32_t i = 0; i < t->n_node; i++) total += (size_t)t->node[i].n;
    float *rem = xmalloc((total ? total : 1) * sizeof *rem);
    float *pos = xmalloc((total ? total : 1) * sizeof *pos);
    size_t at = 0;
    for (int32_t i = 0; i < t->n_node; i++) {
        const struct ptree_node *nd = &t->node[i];
        struct node_row *r = &rows[i];
        r->prompt_id = nd->prompt_id;
        r->state = nd->state;
        r->depth = nd->depth;
        r->parent = nd->parent;
        r->visits = nd->visits;
        r->n = nd->n;
        r->mean = nd->mean;
        r->p90 = nd->p90;
        r->mean_pos = nd->mean_pos;
        if (nd->parent < 0)
            snprintf(r->key, sizeof r->key, "root");
        else
            tool_state_name(nd->state, tool_names, n_tools, r->key, sizeof r->key);
        for (int k = 0; k < nd->n; k++) { /* oldest first */
            int ri = (int)(((int64_t)nd->head - nd->n + k + nd->cap) % nd->cap);
            rem[at] = nd->rem[ri];
            pos[at] = nd->pos[ri];
            at++;
        }
    }
    htri_t exists;
    H5TRY(exists = H5Lexists(loc, name, H5P_DEFAULT));
    if (exists) {
        errmsg_set(err, errlen, "%s: cannot write the prefix tree: '%s' exists already", path,
                   name);
        goto fail;
    }
    H5TRY(gcpl = H5Pcreate(H5P_GROUP_CREATE));
    H5TRY(H5Pset_obj_track_times(gcpl, 0));
    H5TRY(g = H5Gcreate2(loc, name, H5P_DEFAULT, gcpl, H5P_DEFAULT));
    H5CLOSE(gcpl, H5Pclose);
    if (attr_put_string(g, "format", PTREE_FORMAT, path, err, errlen) ||
        attr_put_string(g, "description",
                        "C-MLFQ causal prefix tree: nodes lists parents before children; "
                        "rem/pos hold each node's window (remaining and generated decode "
                        "tokens), oldest first, node after node",
                        path, err, errlen) ||
        attr_put_i64(g, "version", PTREE_FORMAT_VERSION, path, err, errlen) ||
        attr_put_i64(g, "window", t->cfg.window, path, err, errlen) ||
        attr_put_i64(g, "insertions", t->insertions, path, err, errlen) ||
        attr_put_i64(g, "payload_small", ts->small, path, err, errlen) ||
        attr_put_i64(g, "payload_large", ts->large, path, err, errlen))
        goto fail;
    if ((mtype = row_type(0, path, err, errlen)) < 0) goto fail;
    if ((ftype = row_type(1, path, err, errlen)) < 0) goto fail;
    if (dset_put(g, "nodes", ftype, mtype, (hsize_t)t->n_node, rows, path, err, errlen) ||
        dset_put(g, "rem", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, total, rem, path, err, errlen) ||
        dset_put(g, "pos", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, total, pos, path, err, errlen))
        goto fail;
    H5CLOSE(ftype, H5Tclose);
    H5CLOSE(mtype, H5Tclose);
    H5CLOSE(g, H5Gclose);
    free(rows);
    free(rem);
    free(pos);
    return 0;
fail:
    close_id(&ftype, H5Tclose);
    close_id(&mtype, H5Tclose);
    close_id(&gcpl, H5Pclose);
    close_id(&g, H5Gclose);
    free(rows);
    free(rem);
    free(pos);
    return -1;
}

int ptree_write_h5(const struct ptree *t, int64_t loc, const char *name,
                   const struct tool_state_config *ts, const char *const *tool_names,
                   int n_tools, char *err, size_t errlen)
{
    struct h5quiet q;
    h5_quiet_begin(&q);
    int rc = write_group(t, (hid_t)loc, name, ts, tool_names, n_tools, name, err, errlen);
    h5_quiet_end(&q);
    return rc;
}

/* ---- atomic replacement (src/io/h5atomic.c) ---- */

int ptree_save(const struct ptree *t, const char *path, const struct tool_state_config *ts,
               const char *const *tool_names, int n_tools, char *err, size_t errlen)
{
    struct h5quiet q;
    struct h5atomic a;
    h5_quiet_begin(&q);
    hid_t file = h5atomic_create(&a, path, 0, H5F_LIBVER_EARLIEST, err, errlen);
    int rc = file < 0 || write_group(t, file, "tree", ts, tool_names, n_tools, path, err, errlen) ||
                     h5atomic_commit(&a, NULL, 0, err, errlen)
                 ? -1
                 : 0;
    h5atomic_free(&a);
    H5Eclear2(H5E_DEFAULT);
    h5_quiet_end(&q);
    return rc;
}

/* ---- reading ---- */

/* A scalar integer attribute of the tree group. */
static int attr_get_i64(hid_t g, const char *name, int64_t *out, const char *path, char *err,
                        size_t errlen)
{
    hid_t attr = H5I_INVALID_HID, space = H5I_INVALID_HID, type = H5I_INVALID_HID;
    htri_t exists;
    hssize_t npoints;
    H5TRY(exists = H5Aexists(g, name));
    if (!exists) {
        errmsg_set(err, errlen, "%s: /tree attribute %s is missing", path, name);
        return -1;
    }
    H5TRY(attr = H5Aopen(g, name, H5P_DEFAULT));
    H5TRY(space = H5Aget_space(attr));
    H5TRY(npoints = H5Sget_simple_extent_npoints(space));
    H5TRY(type = H5Aget_type(attr));
    if (npoints != 1 || H5Tget_class(type) != H5T_INTEGER) {
        errmsg_set(err, errlen, "%s: /tree attribute %s must be one integer", path, name);
        goto fail;
    }
    H5TRY(H5Aread(attr, H5T_NATIVE_INT64, out));
    close_id(&type, H5Tclose);
    close_id(&space, H5Sclose);
    close_id(&attr, H5Aclose);
    return 0;
fail:
    close_id(&type, H5Tclose);
    close_id(&space, H5Sclose);
    close_id(&attr, H5Aclose);
    return -1;
}

/* A scalar string attribute (fixed or variable length) into out (cap bytes). */
static int attr_get_string(hid_t g, const char *name, char *out, size_t cap, const char *path,
                           char *err, size_t errlen)
{
    hid_t attr = H5I_INVALID_HID, space = H5I_INVALID_HID, type = H5I_INVALID_HID;
    hid_t mtype = H5I_INVALID_HID;
    char *vstr = NULL, *buf = NULL;
    htri_t exists, var;
    hssize_t npoints;
    H5TRY(exists = H5Aexists(g, name));
    if (!exists) {
        errmsg_set(err, errlen, "%s: /tree attribute %s is missing (not a prefix tree file?)",
                   path, name);
        return -1;
    }
    H5TRY(attr = H5Aopen(g, name, H5P_DEFAULT));
    H5TRY(space = H5Aget_space(attr));
    H5TRY(npoints = H5Sget_simple_extent_npoints(space));
    H5TRY(type = H5Aget_type(attr));
    if (npoints != 1 || H5Tget_class(type) != H5T_STRING) {
        errmsg_set(err, errlen, "%s: /tree attribute %s must be one string", path, name);
        goto fail;
    }
    H5TRY(var = H5Tis_variable_str(type));
    H5TRY(mtype = H5Tcopy(H5T_C_S1));
    H5TRY(H5Tset_cset(mtype, H5Tget_cset(type)));
    if (var) {
        H5TRY(H5Tset_size(mtype, H5T_VARIABLE));
        H5TRY(H5Aread(attr, mtype, &vstr));
        snprintf(out, cap, "%s", vstr ? vstr : "");
    } else {
        size_t sz = H5Tget_size(type);
        if (sz == 0 || sz > 4096) {
            errmsg_set(err, errlen, "%s: /tree attribute %s is a string of %zu bytes", path,
                       name, sz);
            goto fail;
        }
        buf = xcalloc(sz + 1, 1);
        H5TRY(H5Tset_size(mtype, sz + 1));
        H5TRY(H5Tset_strpad(mtype, H5T_STR_NULLTERM));
        H5TRY(H5Aread(attr, mtype, buf));
        snprintf(out, cap, "%s", buf);
    }
    if (vstr) H5free_memory(vstr);
    free(buf);
    close_id(&mtype, H5Tclose);
    close_id(&type, H5Tclose);
    close_id(&space, H5Sclose);
    close_id(&attr, H5Aclose);
    return 0;
fail:
    if (vstr) H5free_memory(vstr);
    free(buf);
    close_id(&mtype, H5Tclose);
    close_id(&type, H5Tclose);
    close_id(&space, H5Sclose);
    close_id(&attr, H5Aclose);
    return -1;
}

/*
 * Opens the 1-D dataset g/name, checks its type class (and, for a compound, that
 * the named members exist as integers) and that it has at most max_len elements;
 * *len gets its length. Returns the dataset or H5I_INVALID_HID with err set.
 */
static hid_t dset_open(hid_t g, const char *name, H5T_class_t cls, const char *const *members,
                       int n_members, hsize_t max_len, hsize_t *len, const char *path, char *err,
                       size_t errlen)
{
    hid_t d = H5I_INVALID_HID, space = H5I_INVALID_HID, type = H5I_INVALID_HID;
    htri_t exists;
    int ndims;
    H5TRY(exists = H5Lexists(g, name, H5P_DEFAULT));
    if (!exists) {
        errmsg_set(err, errlen, "%s: dataset /tree/%s is missing", path, name);
        return H5I_INVALID_HID;
    }
    H5TRY(d = H5Dopen2(g, name, H5P_DEFAULT));
    H5TRY(space = H5Dget_space(d));
    H5TRY(ndims = H5Sget_simple_extent_ndims(space));
    if (ndims != 1) {
        errmsg_set(err, errlen, "%s: dataset /tree/%s has %d dimensions, expected 1", path, name,
                   ndims);
        goto fail;
    }
    H5TRY(H5Sget_simple_extent_dims(space, len, NULL));
    H5TRY(type = H5Dget_type(d));
    if (H5Tget_class(type) != cls) {
        errmsg_set(err, errlen, "%s: dataset /tree/%s has the wrong element type (expected %s)",
                   path, name, cls == H5T_COMPOUND ? "a compound" : "a float");
        goto fail;
    }
    for (int i = 0; i < n_members; i++) {
        int idx = H5Tget_member_index(type, members[i]);
        if (idx < 0 || H5Tget_member_class(type, (unsigned)idx) != H5T_INTEGER) {
            H5Eclear2(H5E_DEFAULT);
            errmsg_set(err, errlen, "%s: dataset /tree/%s has no integer column %s", path, name,
                       members[i]);
            goto fail;
        }
    }
    if (*len > max_len) {
        errmsg_set(err, errlen,
                   "%s: dataset /tree/%s claims %llu elements, more than a file of this size "
                   "can hold (damaged file?)", path, name, (unsigned long long)*len);
        goto fail;
    }
    close_id(&type, H5Tclose);
    close_id(&space, H5Sclose);
    return d;
fail:
    close_id(&type, H5Tclose);
    close_id(&space, H5Sclose);
    close_id(&d, H5Dclose);
    return H5I_INVALID_HID;
}

/* The columns of "nodes" a load uses, all read as int64 (range-checked after). */
struct load_row {
    int64_t prompt_id, state, depth, parent, visits, n;
};
static const char *const load_cols[] = {"prompt_id", "state", "depth", "parent", "visits", "n"};
#define N_LOAD_COLS 6

static hid_t load_row_type(const char *path, char *err, size_t errlen)
{
    hid_t t = H5I_INVALID_HID;
    H5TRY(t = H5Tcreate(H5T_COMPOUND, sizeof(struct load_row)));
    for (int i = 0; i < N_LOAD_COLS; i++)
        H5TRY(H5Tinsert(t, load_cols[i], (size_t)i * sizeof(int64_t), H5T_NATIVE_INT64));
    return t;
fail:
    close_id(&t, H5Tclose);
    return H5I_INVALID_HID;
}

/* Checks rows against each other and the window; *total gets the samples they claim. */
static int check_rows(const struct load_row *r, hsize_t n_rows, int64_t window,
                      int64_t insertions, int64_t *total, const char *path, char *err,
                      size_t errlen)
{
    int64_t sum = 0, n_global = 0;
    for (hsize_t i = 0; i < n_rows; i++) {
        const struct load_row *x = &r[i];
        unsigned long long row = (unsigned long long)i;
        int global = x->prompt_id == PTREE_GLOBAL;
        if (x->parent == -1) {
            if (x->state != -1 || x->depth != 0) {
                errmsg_set(err, errlen,
                           "%s: /tree/nodes row %llu is a root (parent -1) but has state %lld "
                           "and depth %lld (expected -1 and 0)",
                           path, row, (long long)x->state, (long long)x->depth);
                return -1;
            }
            n_global += global;
        } else {
            if (x->parent < 0 || (hsize_t)x->parent >= i) {
                errmsg_set(err, errlen,
                           "%s: /tree/nodes row %llu: parent %lld is not an earlier row "
                           "(parents must precede their children)",
                           path, row, (long long)x->parent);
                return -1;
            }
            const struct load_row *p = &r[x->parent];
            if (x->depth != p->depth + 1 || x->prompt_id != p->prompt_id) {
                errmsg_set(err, errlen,
                           "%s: /tree/nodes row %llu: depth %lld and prompt_id %lld do not "
                           "follow its parent row %lld (depth %lld, prompt_id %lld)",
                           path, row, (long long)x->depth, (long long)x->prompt_id,
                           (long long)x->parent, (long long)p->depth, (long long)p->prompt_id);
                return -1;
            }
            if (x->state < 0 || x->state >= TOOL_STATE_MAX_CODE) {
                errmsg_set(err, errlen,
                           "%s: /tree/nodes row %llu: state %lld outside [0, %d)", path, row,
                           (long long)x->state, TOOL_STATE_MAX_CODE);
                return -1;
            }
        }
        int64_t min_n = global && x->parent == -1 ? 0 : 1; /* only the global root may be empty */
        /* each insertion visits a node at most once */
        if (x->n < min_n || x->n > window || x->visits < x->n || x->visits > insertions) {
            errmsg_set(err, errlen,
                       "%s: /tree/nodes row %llu: n = %lld samples, visits = %lld (need %lld "
                       "<= n <= window %lld and n <= visits <= insertions %lld)",
                       path, row, (long long)x->n, (long long)x->visits, (long long)min_n,
                       (long long)window, (long long)insertions);
            return -1;
        }
        sum += x->n; /* n <= window <= 2^20 and rows < 2^31: no overflow */
    }
    if (n_global != 1) {
        errmsg_set(err, errlen, "%s: /tree/nodes has %lld global roots, expected exactly one",
                   path, (long long)n_global);
        return -1;
    }
    *total = sum;
    return 0;
}

static int read_floats(hid_t d, float *out, hsize_t n, const char *path, char *err,
                       size_t errlen)
{
    if (n > 0) H5TRY(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out));
    return 0;
fail:
    return -1;
}

int ptree_load(struct ptree *t, const char *path, const struct tool_state_config *ts,
               char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        errmsg_set(err, errlen, "%s: cannot read the prefix tree: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        errmsg_set(err, errlen, "%s: not a regular file", path);
        return -1;
    }
    /* Allocation bounds: a node row takes > 16 bytes in any valid file, a sample at
     * least 2 bytes in each of rem and pos (we write 56 + 64 and 4 + 4, uncompressed). */
    hsize_t fsize = (hsize_t)st.st_size;
    hsize_t max_rows = fsize / 16 < INT32_MAX ? fsize / 16 : INT32_MAX;

    struct h5quiet q;
    h5_quiet_begin(&q);
    hid_t file = H5I_INVALID_HID, g = H5I_INVALID_HID, dn = H5I_INVALID_HID;
    hid_t dr = H5I_INVALID_HID, dp = H5I_INVALID_HID, rtype = H5I_INVALID_HID;
    struct load_row *rows = NULL;
    int32_t *idx = NULL;
    float *rem = NULL, *pos = NULL;
    struct ptree nt;
    int built = 0;
    memset(&nt, 0, sizeof nt);

    H5TRY(file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT));
    htri_t has;
    H5TRY(has = H5Lexists(file, "tree", H5P_DEFAULT));
    if (!has) {
        errmsg_set(err, errlen, "%s: no group /tree (not a prefix tree file)", path);
        goto fail;
    }
    H5TRY(g = H5Gopen2(file, "tree", H5P_DEFAULT));

    char format[64];
    int64_t version, window, insertions, small, large;
    if (attr_get_string(g, "format", format, sizeof format, path, err, errlen)) goto fail;
    if (strcmp(format, PTREE_FORMAT) != 0) {
        errmsg_set(err, errlen, "%s: /tree format is '%s', expected '%s'", path, format,
                   PTREE_FORMAT);
        goto fail;
    }
    if (attr_get_i64(g, "version", &version, path, err, errlen)) goto fail;
    if (version != PTREE_FORMAT_VERSION) {
        errmsg_set(err, errlen, "%s: prefix tree format version %lld, this build reads %d", path,
                   (long long)version, PTREE_FORMAT_VERSION);
        goto fail;
    }
    if (attr_get_i64(g, "window", &window, path, err, errlen) ||
        attr_get_i64(g, "insertions", &insertions, path, err, errlen) ||
        attr_get_i64(g, "payload_small", &small, path, err, errlen) ||
        attr_get_i64(g, "payload_large", &large, path, err, errlen))
        goto fail;
    if (window < 1 || window > PTREE_MAX_WINDOW_FILE || insertions < 0 ||
        insertions > PTREE_MAX_INSERTIONS) {
        errmsg_set(err, errlen, "%s: /tree window = %lld (valid: [1, %d]), insertions = %lld "
                   "(valid: [0, 2^53])", path, (long long)window, PTREE_MAX_WINDOW_FILE,
                   (long long)insertions);
        goto fail;
    }
    if (small != ts->small || large != ts->large) {
        errmsg_set(err, errlen,
                   "%s: tree built with payload thresholds %lld/%lld, this run uses %d/%d "
                   "(sched.payload_small/payload_large): its states would mean other size "
                   "classes; rebuild the tree or use the thresholds it was built with",
                   path, (long long)small, (long long)large, ts->small, ts->large);
        goto fail;
    }

    hsize_t n_rows, n_rem, n_pos;
    if ((dn = dset_open(g, "nodes", H5T_COMPOUND, load_cols, N_LOAD_COLS, max_rows, &n_rows,
                        path, err, errlen)) < 0)
        goto fail;
    if (n_rows == 0) {
        errmsg_set(err, errlen, "%s: /tree/nodes is empty (a tree has a global root)", path);
        goto fail;
    }
    if ((dr = dset_open(g, "rem", H5T_FLOAT, NULL, 0, fsize / 2, &n_rem, path, err, errlen)) <
            0 ||
        (dp = dset_open(g, "pos", H5T_FLOAT, NULL, 0, fsize / 2, &n_pos, path, err, errlen)) < 0)
        goto fail;
    if ((rtype = load_row_type(path, err, errlen)) < 0) goto fail;
    rows = xmalloc((size_t)n_rows * sizeof *rows);
    H5TRY(H5Dread(dn, rtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows));
    int64_t total;
    if (check_rows(rows, n_rows, window, insertions, &total, path, err, errlen)) goto fail;
    if ((hsize_t)total != n_rem || (hsize_t)total != n_pos) {
        errmsg_set(err, errlen,
                   "%s: /tree/nodes claims %lld samples in all, but rem holds %llu and pos %llu",
                   path, (long long)total, (unsigned long long)n_rem, (unsigned long long)n_pos);
        goto fail;
    }
    rem = xmalloc((size_t)(total ? total : 1) * sizeof *rem);
    pos = xmalloc((size_t)(total ? total : 1) * sizeof *pos);
    if (read_floats(dr, rem, n_rem, path, err, errlen) ||
        read_floats(dp, pos, n_pos, path, err, errlen))
        goto fail;
    for (int64_t k = 0; k < total; k++)
        if (!isfinite(rem[k]) || rem[k] < 0 || !isfinite(pos[k]) || pos[k] < 0) {
            errmsg_set(err, errlen,
                       "%s: sample %lld is rem = %g, pos = %g: samples must be finite and >= 0",
                       path, (long long)k, rem[k], pos[k]);
            goto fail;
        }

    /* Build a new tree; t is replaced only once it is complete. */
    char why[256];
    if (ptree_init(&nt, &t->cfg, why, sizeof why)) {
        errmsg_set(err, errlen, "%s: %s", path, why);
        goto fail;
    }
    built = 1;
    idx = xmalloc((size_t)n_rows * sizeof *idx); /* row -> node index in nt */
    int64_t at = 0;
    for (hsize_t i = 0; i < n_rows; i++) {
        struct load_row x = rows[i];
        int32_t parent = x.parent >= 0 ? idx[x.parent] : -1;
        int32_t ni = ptree_io_add_node(&nt, x.prompt_id, (int32_t)x.state, parent, x.visits,
                                       rem + at, pos + at, (int)x.n);
        if (ni < 0) {
            errmsg_set(err, errlen,
                       "%s: /tree/nodes row %llu repeats %s (prompt_id %lld, state %lld)",
                       path, (unsigned long long)i,
                       x.parent < 0 ? "a prompt's root" : "a sibling's state",
                       (long long)x.prompt_id, (long long)x.state);
            goto fail;
        }
        idx[i] = ni;
        at += x.n;
    }
    nt.insertions = insertions;

    ptree_free(t);
    *t = nt;
    close_id(&rtype, H5Tclose);
    close_id(&dp, H5Dclose);
    close_id(&dr, H5Dclose);
    close_id(&dn, H5Dclose);
    close_id(&g, H5Gclose);
    close_id(&file, H5Fclose);
    free(rows);
    free(idx);
    free(rem);
    free(pos);
    h5_quiet_end(&q);
    return 0;
fail:
    if (built) ptree_free(&nt);
    close_id(&rtype, H5Tclose);
    close_id(&dp, H5Dclose);
    close_id(&dr, H5Dclose);
    close_id(&dn, H5Dclose);
    close_id(&g, H5Gclose);
    close_id(&file, H5Fclose);
    H5Eclear2(H5E_DEFAULT);
    free(rows);
    free(idx);
    free(rem);
    free(pos);
    h5_quiet_end(&q);
    return -1;
}
