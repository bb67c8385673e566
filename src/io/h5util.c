/* HDF5 error handling shared by the HDF5 writers and readers (libra/h5util.h). */
#include "libra/h5util.h"
#include "libra/h5try.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void h5_quiet_begin(struct h5quiet *q)
{
    q->fn = NULL;
    q->data = NULL;
    H5Eget_auto2(H5E_DEFAULT, &q->fn, &q->data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void h5_quiet_end(const struct h5quiet *q) { H5Eset_auto2(H5E_DEFAULT, q->fn, q->data); }

struct h5walk {
    char inner[512]; /* where the error was detected (most specific) */
    char outer[256]; /* the API call's own message */
    unsigned depth;
};

static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *data)
{
    struct h5walk *w = data;
    char minor[128] = "";
    if (H5Eget_msg(e->min_num, NULL, minor, sizeof minor) < 0) minor[0] = '\0';
    if (n == 0)
        snprintf(w->inner, sizeof w->inner, "%s (%s, in %s)", e->desc ? e->desc : "?", minor,
                 e->func_name ? e->func_name : "?");
    else
        snprintf(w->outer, sizeof w->outer, "%s", e->desc ? e->desc : "?");
    w->depth = n + 1;
    return 0;
}

void h5_error(char *err, size_t errlen, const char *path, const char *expr, const char *file,
              int line)
{
    /* "x = H5Fcreate(path, ...)" -> "H5Fcreate" */
    char call[64];
    const char *c = strstr(expr, "H5");
    c = c ? c : expr;
    size_t n = strcspn(c, "(");
    snprintf(call, sizeof call, "%.*s", (int)(n < sizeof call ? n : sizeof call - 1), c);
    struct h5walk w = {"", "", 0};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, &w);
    if (err && errlen) {
        char pre[600] = "";
        if (path) snprintf(pre, sizeof pre, "%s: ", path);
        if (w.depth == 0)
            snprintf(err, errlen, "%s%s failed (%s:%d): no HDF5 error stack", pre, call, file,
                     line);
        else if (w.depth == 1)
            snprintf(err, errlen, "%s%s failed (%s:%d): %s", pre, call, file, line, w.inner);
        else
            snprintf(err, errlen, "%s%s failed (%s:%d): %s: %s", pre, call, file, line, w.outer,
                     w.inner);
    }
    H5Eclear2(H5E_DEFAULT);
}

/* Opens table's column col (of class want) for reading: *d, *ft, *sp and *rows, or -1
 * with a message (what is open stays in the ids for the caller to close). */
static int open_column(hid_t file, const char *table, const char *col, H5T_class_t want, hid_t *d,
                       hid_t *ft, hid_t *sp, hssize_t *rows, char *err, size_t errlen)
{
    if (H5Lexists(file, table, H5P_DEFAULT) <= 0 || (*d = H5Dopen2(file, table, H5P_DEFAULT)) < 0) {
        snprintf(err, errlen, "no table /%s", table);
        return -1;
    }
    int idx;
    if ((*ft = H5Dget_type(*d)) < 0 || H5Tget_class(*ft) != H5T_COMPOUND ||
        (idx = H5Tget_member_index(*ft, col)) < 0 ||
        (want == H5T_STRING && H5Tget_member_class(*ft, (unsigned)idx) != H5T_STRING &&
         H5Tget_member_class(*ft, (unsigned)idx) != H5T_ENUM)) {
        snprintf(err, errlen, "/%s has no %scolumn %s", table,
                 want == H5T_STRING ? "text or enum " : "", col);
        return -1;
    }
    if ((*sp = H5Dget_space(*d)) < 0 || H5Sget_simple_extent_ndims(*sp) != 1 ||
        (*rows = H5Sget_simple_extent_npoints(*sp)) < 0) {
        snprintf(err, errlen, "/%s is not a 1-D table", table);
        return -1;
    }
    return 0;
}

/* Reads the enum column col of table d (file type ft) as native int32 codes into a new
 * (rows + 1)-long array; *native is its native enum type, to name the codes. */
static int read_enum_codes(hid_t d, hid_t ft, const char *col, hssize_t rows, int32_t **codes,
                           hid_t *native)
{
    int idx = H5Tget_member_index(ft, col);
    hid_t ftm = H5I_INVALID_HID, mt = H5I_INVALID_HID;
    int32_t *buf = NULL;
    int rc = -1;
    *native = H5I_INVALID_HID;
    if (idx < 0 || (ftm = H5Tget_member_type(ft, (unsigned)idx)) < 0 ||
        (*native = H5Tget_native_type(ftm, H5T_DIR_ASCEND)) < 0 ||
        H5Tget_size(*native) != sizeof(int32_t) || !(buf = calloc((size_t)rows + 1, sizeof *buf)) ||
        (mt = H5Tcreate(H5T_COMPOUND, sizeof(int32_t))) < 0 || H5Tinsert(mt, col, 0, *native) < 0 ||
        (rows > 0 && H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0))
        goto done;
    *codes = buf;
    buf = NULL;
    rc = 0;
done:
    free(buf);
    if (mt >= 0) H5Tclose(mt);
    if (ftm >= 0) H5Tclose(ftm);
    if (rc && *native >= 0) H5Tclose(*native);
    if (rc) *native = H5I_INVALID_HID;
    return rc;
}

/* An enum column into buf as member elements: names for a string member (a code
 * without a name as its number), the codes converted for a number member. */
static int read_enum_as(hid_t d, hid_t ft, const char *col, hssize_t rows, hid_t member,
                        size_t elem, void *buf)
{
    int32_t *codes;
    hid_t native;
    if (read_enum_codes(d, ft, col, rows, &codes, &native)) return -1;
    int rc = 0;
    if (H5Tget_class(member) == H5T_STRING) {
        for (hssize_t i = 0; i < rows; i++) {
            char name[256];
            if (H5Tenum_nameof(native, &codes[i], name, sizeof name) < 0)
                snprintf(name, sizeof name, "%d", (int)codes[i]);
            snprintf((char *)buf + (size_t)i * elem, elem, "%s", name);
        }
    } else {
        /* in place: elem >= 4 bytes a row, so the codes fit before converting */
        rc = elem < sizeof(int32_t) ? -1 : 0;
        if (rc == 0) memcpy(buf, codes, (size_t)rows * sizeof *codes);
        if (rc == 0 && rows > 0 &&
            H5Tconvert(H5T_NATIVE_INT32, member, (size_t)rows, buf, NULL, H5P_DEFAULT) < 0)
            rc = -1;
    }
    free(codes);
    H5Tclose(native);
    return rc;
}

int h5_read_column(hid_t file, const char *table, const char *col, hid_t member, size_t elem,
                   void **out, size_t *n, char *err, size_t errlen)
{
    struct h5quiet q;
    h5_quiet_begin(&q);
    hid_t d = H5I_INVALID_HID, ft = H5I_INVALID_HID, sp = H5I_INVALID_HID, mt = H5I_INVALID_HID;
    hssize_t rows = 0;
    int rc = -1, is_text = H5Tget_class(member) == H5T_STRING;
    *out = NULL;
    *n = 0;
    if (open_column(file, table, col, is_text ? H5T_STRING : H5T_FLOAT, &d, &ft, &sp, &rows, err,
                    errlen))
        goto done;
    int idx = H5Tget_member_index(ft, col);
    char *buf = calloc((size_t)rows + 1, elem);
    int ok = buf != NULL;
    if (ok && H5Tget_member_class(ft, (unsigned)idx) == H5T_ENUM)
        ok = read_enum_as(d, ft, col, rows, member, elem, buf) == 0;
    else if (ok)
        ok = (mt = H5Tcreate(H5T_COMPOUND, elem)) >= 0 && H5Tinsert(mt, col, 0, member) >= 0 &&
             (rows == 0 || H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
    if (!ok) {
        free(buf);
        snprintf(err, errlen, "/%s column %s: cannot be read as %s", table, col,
                 is_text ? "text" : "numbers");
        goto done;
    }
    if (is_text)
        for (hssize_t i = 0; i < rows; i++) buf[(size_t)i * elem + elem - 1] = '\0';
    *out = buf;
    *n = (size_t)rows;
    rc = 0;
done:
    if (mt >= 0) H5Tclose(mt);
    if (sp >= 0) H5Sclose(sp);
    if (ft >= 0) H5Tclose(ft);
    if (d >= 0) H5Dclose(d);
    H5Eclear2(H5E_DEFAULT);
    h5_quiet_end(&q);
    return rc;
}

int h5_read_column_f64(hid_t file, const char *table, const char *col, double **out, size_t *n,
                       char *err, size_t errlen)
{
    return h5_read_column(file, table, col, H5T_NATIVE_DOUBLE, sizeof(double), (void **)out, n,
                          err, errlen);
}

int h5_read_column_str(hid_t file, const char *table, const char *col, size_t width, char **out,
                       size_t *n, char *err, size_t errlen)
{
    hid_t st = H5Tcopy(H5T_C_S1);
    int rc = -1;
    *out = NULL;
    *n = 0;
    if (st >= 0 && H5Tset_size(st, width) >= 0 && H5Tset_strpad(st, H5T_STR_NULLTERM) >= 0)
        rc = h5_read_column(file, table, col, st, width, (void **)out, n, err, errlen);
    else
        snprintf(err, errlen, "/%s column %s: cannot make a %zu-byte string type", table, col,
                 width);
    if (st >= 0) H5Tclose(st);
    return rc;
}

int h5_read_attr_f64(hid_t file, const char *name, double *out)
{
    struct h5quiet q;
    h5_quiet_begin(&q);
    int rc = -1;
    if (H5Aexists(file, name) > 0) {
        hid_t a = H5Aopen(file, name, H5P_DEFAULT);
        if (a >= 0) {
            rc = H5Aread(a, H5T_NATIVE_DOUBLE, out) < 0 ? -1 : 0;
            H5Aclose(a);
        }
    }
    H5Eclear2(H5E_DEFAULT);
    h5_quiet_end(&q);
    return rc;
}

int h5_attr_put_string(hid_t obj, const char *name, const char *value, const char *path,
                       char *err, size_t errlen)
{
    hid_t type = H5I_INVALID_HID;
    H5TRY(type = H5Tcopy(H5T_C_S1));
    H5TRY(H5Tset_size(type, H5T_VARIABLE));
    H5TRY(H5Tset_cset(type, H5T_CSET_UTF8));
    const char *v = value ? value : "";
    if (h5_attr_put(obj, name, type, type, &v, path, err, errlen)) goto fail;
    H5CLOSE(type, H5Tclose);
    return 0;
fail:
    close_id(&type, H5Tclose);
    return -1;
}

hid_t h5_open_readonly(const char *path)
{
    struct h5quiet q;
    h5_quiet_begin(&q);
    hid_t file = H5Fis_hdf5(path) > 0 ? H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT) : H5I_INVALID_HID;
    H5Eclear2(H5E_DEFAULT);
    h5_quiet_end(&q);
    return file;
}

int h5_attr_put(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *value,
                const char *path, char *err, size_t errlen)
{
    return h5_attr_put_array(obj, name, ftype, mtype, value, 0, path, err, errlen);
}

int h5_attr_put_array(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *value,
                      size_t n, const char *path, char *err, size_t errlen)
{
    hid_t space = H5I_INVALID_HID, attr = H5I_INVALID_HID;
    hsize_t dim = (hsize_t)n;
    H5TRY(space = n ? H5Screate_simple(1, &dim, NULL) : H5Screate(H5S_SCALAR));
    H5TRY(attr = H5Acreate2(obj, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT));
    H5TRY(H5Awrite(attr, mtype, value));
    H5CLOSE(attr, H5Aclose);
    H5CLOSE(space, H5Sclose);
    return 0;
fail:
    close_id(&attr, H5Aclose);
    close_id(&space, H5Sclose);
    return -1;
}
