/*
 * Tests of atomic HDF5 files (src/io/h5atomic.c): nothing reaches the disk before the
 * commit, a commit creates or replaces the file in one step (readable by plain HDF5,
 * with a trailer when asked, in the format version asked), and a commit that fails
 * (missing directory, a write cut short by the file-size limit, a rename that cannot
 * happen) or an abandoned build leaves any existing file byte for byte as it was and
 * no temporary behind.
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/h5atomic.h"
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char err[2048];

static const char *scratch(const char *name)
{
    static char buf[4][1024];
    static int next;
    const char *dir = test_scratch_dir("h5atomic");
    CU_ASSERT_FATAL(dir != NULL);
    char *out = buf[next++ % 4];
    snprintf(out, sizeof buf[0], "%s/%s", dir, name);
    return out;
}

static int count_tmp_files(void)
{
    DIR *d = opendir(test_scratch_dir("h5atomic"));
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, ".tmp-") != NULL;
    closedir(d);
    return n;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* The whole file (malloc'd, *n bytes), or NULL. */
static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = NULL;
    size_t cap = 0;
    *n = 0;
    for (;;) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 4096;
            buf = realloc(buf, cap);
            CU_ASSERT_FATAL(buf != NULL);
        }
        size_t got = fread(buf + *n, 1, cap - *n, f);
        *n += got;
        if (got == 0) break;
    }
    fclose(f);
    return buf;
}

/* Root attribute "tag" = tag and dataset "x" = n floats i + tag. */
static int fill(hid_t file, int64_t tag, size_t n)
{
    float *x = malloc(sizeof *x * (n ? n : 1));
    CU_ASSERT_FATAL(x != NULL);
    for (size_t i = 0; i < n; i++) x[i] = (float)i + (float)tag;
    hsize_t dims[1] = {n};
    hid_t s1 = H5Screate(H5S_SCALAR), s2 = H5Screate_simple(1, dims, NULL);
    hid_t at = H5Acreate2(file, "tag", H5T_STD_I64LE, s1, H5P_DEFAULT, H5P_DEFAULT);
    hid_t ds = H5Dcreate2(file, "x", H5T_IEEE_F32LE, s2, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int ok = s1 >= 0 && s2 >= 0 && at >= 0 && ds >= 0 &&
             H5Awrite(at, H5T_NATIVE_INT64, &tag) >= 0 &&
             H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0;
    ok &= H5Dclose(ds) >= 0 && H5Aclose(at) >= 0 && H5Sclose(s2) >= 0 && H5Sclose(s1) >= 0;
    free(x);
    return ok ? 0 : -1;
}

/* Whether path opens with plain HDF5 and holds fill(tag, n); *super gets the
 * superblock version. */
static int holds(const char *path, int64_t tag, size_t n, unsigned *super)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return 0;
    int64_t got = -1;
    float *x = calloc(n ? n : 1, sizeof *x);
    CU_ASSERT_FATAL(x != NULL);
    hid_t at = H5Aopen(f, "tag", H5P_DEFAULT), ds = H5Dopen2(f, "x", H5P_DEFAULT);
    hid_t sp = ds >= 0 ? H5Dget_space(ds) : H5I_INVALID_HID;
    int ok = at >= 0 && ds >= 0 && sp >= 0 && H5Aread(at, H5T_NATIVE_INT64, &got) >= 0 &&
             got == tag && H5Sget_simple_extent_npoints(sp) == (hssize_t)n &&
             H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0;
    for (size_t i = 0; ok && i < n; i++) ok = x[i] == (float)i + (float)tag;
    H5F_info2_t info;
    if (super) *super = H5Fget_info2(f, &info) >= 0 ? info.super.version : 99;
    if (sp >= 0) H5Sclose(sp);
    if (ds >= 0) H5Dclose(ds);
    if (at >= 0) H5Aclose(at);
    H5Fclose(f);
    free(x);
    return ok;
}

/* Builds fill(tag, n) and commits it to path; returns h5atomic_commit's result. */
static int save(const char *path, int64_t tag, size_t n)
{
    struct h5atomic a;
    hid_t file = h5atomic_create(&a, path, 0, H5F_LIBVER_EARLIEST, err, sizeof err);
    CU_ASSERT_FATAL(file >= 0);
    CU_ASSERT_FATAL(fill(file, tag, n) == 0);
    int rc = h5atomic_commit(&a, NULL, 0, err, sizeof err);
    h5atomic_free(&a);
    return rc;
}

static void test_commit_creates_and_replaces(void)
{
    const char *path = scratch("a.h5");
    struct h5atomic a;
    hid_t file = h5atomic_create(&a, path, 1 << 20, H5F_LIBVER_EARLIEST, err, sizeof err);
    CU_ASSERT_FATAL(file >= 0);
    CU_ASSERT_EQUAL(fill(file, 7, 1000), 0);
    ssize_t eoa = H5Fget_file_image(file, NULL, 0); /* the file's length, far below 1 MiB */
    CU_ASSERT_FATAL(eoa > 0);
    /* Nothing on disk until the commit: neither the file nor its temporary. */
    CU_ASSERT(!exists(path));
    CU_ASSERT_EQUAL(count_tmp_files(), 0);
    CU_ASSERT_EQUAL_FATAL(h5atomic_commit(&a, NULL, 0, err, sizeof err), 0);
    h5atomic_free(&a);
    h5atomic_free(&a); /* a second free is a no-op */
    unsigned super = 99;
    CU_ASSERT(holds(path, 7, 1000, &super));
    CU_ASSERT_EQUAL(super, 0); /* HDF5's default (earliest) format */
    struct stat st;
    CU_ASSERT_FATAL(stat(path, &st) == 0);
    CU_ASSERT_EQUAL(st.st_size, eoa); /* the file only, not the buffer's zero tail */
    CU_ASSERT_EQUAL(count_tmp_files(), 0);

    /* A second commit replaces the file. */
    CU_ASSERT_EQUAL(save(path, 8, 10), 0);
    CU_ASSERT(holds(path, 8, 10, NULL));
    CU_ASSERT(!holds(path, 7, 1000, NULL));
    CU_ASSERT_EQUAL(count_tmp_files(), 0);
}

static void test_trailer_and_format(void)
{
    const char *path = scratch("trailer.h5");
    struct h5atomic a;
    hid_t file = h5atomic_create(&a, path, 0, H5F_LIBVER_V18, err, sizeof err);
    CU_ASSERT_FATAL(file >= 0);
    CU_ASSERT_EQUAL(fill(file, 3, 50000), 0); /* grows the buffer past several steps */
    CU_ASSERT_EQUAL_FATAL(h5atomic_close_file(&a, err, sizeof err), 0);
    CU_ASSERT(a.file < 0);
    /* The closed image is a complete HDF5 file: its signature opens it. */
    CU_ASSERT_FATAL(a.image != NULL && a.size > 8);
    CU_ASSERT(memcmp(a.image, "\211HDF\r\n\032\n", 8) == 0);
    size_t image_size = a.size;
    unsigned char *copy = malloc(image_size);
    CU_ASSERT_FATAL(copy != NULL);
    memcpy(copy, a.image, image_size);
    const char trailer[] = "TRAILER-0123456789";
    CU_ASSERT_EQUAL_FATAL(h5atomic_commit(&a, trailer, sizeof trailer, err, sizeof err), 0);
    h5atomic_free(&a);

    size_t n = 0;
    unsigned char *got = slurp(path, &n);
    CU_ASSERT_FATAL(got != NULL);
    CU_ASSERT_EQUAL(n, image_size + sizeof trailer);
    if (n == image_size + sizeof trailer) {
        CU_ASSERT(memcmp(got, copy, image_size) == 0);
        CU_ASSERT(memcmp(got + image_size, trailer, sizeof trailer) == 0);
    }
    unsigned super = 0;
    CU_ASSERT(holds(path, 3, 50000, &super)); /* HDF5 ignores the bytes past its end */
    CU_ASSERT(super >= 2);                    /* the 1.8+ format asked for */
    CU_ASSERT_EQUAL(count_tmp_files(), 0);
    free(got);
    free(copy);
}

/* path holds exactly the bytes old[0..n) and no temporary is left. */
static void expect_untouched(const char *path, const unsigned char *old, size_t n)
{
    size_t m = 0;
    unsigned char *now = slurp(path, &m);
    CU_ASSERT_FATAL(now != NULL);
    CU_ASSERT(m == n && memcmp(now, old, n) == 0);
    free(now);
    CU_ASSERT_EQUAL(count_tmp_files(), 0);
}

static void test_failed_commits(void)
{
    /* A directory that does not exist: nothing is created. */
    const char *missing = scratch("no/such/dir.h5");
    err[0] = '\0';
    CU_ASSERT_EQUAL(save(missing, 1, 10), -1);
    CU_ASSERT(strstr(err, "no/such/dir.h5.tmp-") != NULL);
    CU_ASSERT(strstr(err, strerror(ENOENT)) != NULL);
    CU_ASSERT(!exists(missing));
    CU_ASSERT_EQUAL(count_tmp_files(), 0);

    /* A write cut short (the file-size limit stands in for a full disk). */
    const char *path = scratch("keep.h5");
    CU_ASSERT_EQUAL_FATAL(save(path, 5, 10), 0);
    size_t n = 0;
    unsigned char *old = slurp(path, &n);
    CU_ASSERT_FATAL(old != NULL);
    struct rlimit lim, saved;
    CU_ASSERT_FATAL(getrlimit(RLIMIT_FSIZE, &saved) == 0);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = saved;
    lim.rlim_cur = 4096;
    CU_ASSERT_FATAL(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    err[0] = '\0';
    int rc = save(path, 6, 100000);
    CU_ASSERT_FATAL(setrlimit(RLIMIT_FSIZE, &saved) == 0);
    signal(SIGXFSZ, old_handler);
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT(strstr(err, "write failed") != NULL && strstr(err, ".tmp-") != NULL);
    expect_untouched(path, old, n);
    CU_ASSERT(holds(path, 5, 10, NULL));

    /* A rename that cannot happen (the target is a directory): the written temporary
     * is removed and the directory stays. */
    const char *dir = scratch("adir");
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0);
    err[0] = '\0';
    CU_ASSERT_EQUAL(save(dir, 9, 10), -1);
    CU_ASSERT(strstr(err, "cannot rename") != NULL);
    struct stat st;
    CU_ASSERT(stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
    CU_ASSERT_EQUAL(count_tmp_files(), 0);
    free(old);
}

static void test_abandoned_build(void)
{
    /* Freed without a commit: the existing file is untouched, nothing else appears. */
    const char *path = scratch("abandon.h5");
    CU_ASSERT_EQUAL_FATAL(save(path, 11, 10), 0);
    size_t n = 0;
    unsigned char *old = slurp(path, &n);
    CU_ASSERT_FATAL(old != NULL);
    struct h5atomic a;
    hid_t file = h5atomic_create(&a, path, 0, H5F_LIBVER_EARLIEST, err, sizeof err);
    CU_ASSERT_FATAL(file >= 0);
    CU_ASSERT_EQUAL(fill(file, 12, 1000), 0);
    h5atomic_free(&a); /* the file still open: closed and dropped */
    expect_untouched(path, old, n);

    /* Closed but not committed: the image is dropped too. */
    file = h5atomic_create(&a, path, 0, H5F_LIBVER_EARLIEST, err, sizeof err);
    CU_ASSERT_FATAL(file >= 0);
    CU_ASSERT_EQUAL(fill(file, 13, 1000), 0);
    CU_ASSERT_EQUAL(h5atomic_close_file(&a, err, sizeof err), 0);
    h5atomic_free(&a);
    expect_untouched(path, old, n);
    CU_ASSERT(holds(path, 11, 10, NULL));
    free(old);
}

int main(void)
{
    static const struct test_case cases[] = {
        {"commit creates, then replaces; nothing on disk before", test_commit_creates_and_replaces},
        {"trailer after the image; 1.8+ format on request", test_trailer_and_format},
        {"failed commits keep the old file, leave no temporary", test_failed_commits},
        {"an abandoned build writes nothing", test_abandoned_build},
        {NULL, NULL}};
    static const struct test_suite suites[] = {{"h5atomic", cases}, {NULL, NULL}};
    return test_main(suites);
}
