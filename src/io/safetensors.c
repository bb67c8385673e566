/*
 * safetensors files (include/libra/safetensors.h): the header parser and validator,
 * float32 reads of whole tensors and of 2-D blocks through mmap, model directories
 * (one file or shards + index.json), and the atomic writer with BF16 / F16 rounding.
 *
 * A file is mapped once and kept mapped while open; reads convert straight from the
 * map, so a TP rank reading its slice touches only the pages of its rows (a column
 * block touches every row's range, which is the least a row-major file allows).
 * Limits: little-endian hosts; at most ST_MAX_DIMS dimensions; a header of at most
 * ST_MAX_HEADER bytes; holes between tensors' bytes are tolerated (never read).
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/safetensors.h"
#include "libra/errmsg.h"

#include "libra/afile.h"
#include "libra/log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c reads and writes little-endian data in place: little-endian hosts only"
#endif

/* ---- dtypes ---- */

static const struct {
    const char *name;
    size_t size;
} dtypes[ST_DTYPE_COUNT] = {
    [ST_F32] = {"F32", 4},  [ST_F16] = {"F16", 2},   [ST_BF16] = {"BF16", 2},
    [ST_F64] = {"F64", 8},  [ST_I64] = {"I64", 8},   [ST_U64] = {"U64", 8},
    [ST_I32] = {"I32", 4},  [ST_U32] = {"U32", 4},   [ST_I16] = {"I16", 2},
    [ST_U16] = {"U16", 2},  [ST_I8] = {"I8", 1},     [ST_U8] = {"U8", 1},
    [ST_BOOL] = {"BOOL", 1}, [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *st_dtype_name(enum st_dtype d)
{
    return (int)d >= 0 && d < ST_DTYPE_COUNT ? dtypes[d].name : NULL;
}

size_t st_dtype_size(enum st_dtype d)
{
    return (int)d >= 0 && d < ST_DTYPE_COUNT ? dtypes[d].size : 0;
}

int st_dtype_parse(const char *name)
{
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (strcmp(name, dtypes[i].name) == 0) return i;
    return -1;
}

/* ---- conversions ---- */

static uint32_t f32_bits(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

static float bits_f32(uint32_t b)
{
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* bf16 is the upper half of a float32: exact. */
float st_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t st_f32_to_bf16(float x)
{
    uint32_t b = f32_bits(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) { /* NaN: keep sign and top payload bits */
        uint16_t h = (uint16_t)(b >> 16);
        return (h & 0x7f) ? h : (uint16_t)(h | 0x40); /* never let a NaN become infinity */
    }
    /* round to nearest, ties to even; a carry into the exponent is the right result
     * (up to infinity) */
    b += 0x7fffu + ((b >> 16) & 1u);
    return (uint16_t)(b >> 16);
}

void st_bf16_to_f32_n(const uint16_t *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = st_bf16_to_f32(x[i]);
}

void st_f32_to_bf16_n(const float *x, uint16_t *y, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = st_f32_to_bf16(x[i]);
}

float st_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) { /* zero or subnormal: m x 2^-24, exact in float32 */
        float v = (float)m * 0x1p-24f;
        return bits_f32(f32_bits(v) | sign);
    }
    if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13)); /* inf, NaN (payload kept) */
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t st_f32_to_f16(float x)
{
    uint32_t b = f32_bits(x), ax = b & 0x7fffffffu;
    uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
    if (ax > 0x7f800000u) /* NaN: quiet, top payload bits kept */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520 rounds past the largest half, 65504 (or is inf) */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: a subnormal half (or zero) */
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        /* the value is m x 2^(e - 150); in units of 2^-24 that is m >> (126 - e) */
        uint32_t shift = 126 - e;
        if (e == 0 || shift >= 25) return sign; /* below half the smallest subnormal */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r); /* r == 0x400 is the smallest normal: right */
    }
    uint32_t r = ((ax >> 23) - 112u) << 10 | ((ax >> 13) & 0x3ffu), rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}

/* n elements of dtype at src (little-endian, possibly unaligned) into float32. */
static void to_f32(enum st_dtype d, const unsigned char *src, float *dst, size_t n)
{
    switch (d) {
    case ST_F32:
        memcpy(dst, src, n * sizeof *dst);
        break;
    case ST_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, sizeof h);
            uint32_t b = (uint32_t)h << 16;
            memcpy(dst + i, &b, sizeof b);
        }
        break;
    case ST_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, sizeof h);
            dst[i] = st_f16_to_f32(h);
        }
        break;
    default:
        FATAL("to_f32: dtype %d is not a float type (checked by the caller)", (int)d);
    }
}

/* As to_f32, then rounded to bf16 (st_f32_to_bf16): BF16 is copied as it is. */
static void to_bf16(enum st_dtype d, const unsigned char *src, uint16_t *dst, size_t n)
{
    if (d == ST_BF16) {
        memcpy(dst, src, n * sizeof *dst);
        return;
    }
    float buf[256];
    for (size_t i0 = 0; i0 < n; i0 += 256) {
        size_t k = n - i0 < 256 ? n - i0 : 256;
        to_f32(d, src + i0 * st_dtype_size(d), buf, k);
        st_f32_to_bf16_n(buf, dst + i0, k);
    }
}

static void from_f32(enum st_dtype d, const float *src, unsigned char *dst, size_t n)
{
    switch (d) {
    case ST_F32:
        memcpy(dst, src, n * sizeof *src);
        break;
    case ST_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = st_f32_to_bf16(src[i]);
            memcpy(dst + 2 * i, &h, sizeof h);
        }
        break;
    case ST_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = st_f32_to_f16(src[i]);
            memcpy(dst + 2 * i, &h, sizeof h);
        }
        break;
    default:
        FATAL("from_f32: dtype %d is not writable (checked by the caller)", (int)d);
    }
}

/* ---- opening ---- */

int64_t st_numel(const struct st_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp(((const struct st_tensor *)a)->name, ((const struct st_tensor *)b)->name);
}

/* A tensor's bytes, for the overlap check. */
struct span {
    uint64_t begin, end;
    int idx;
};

static int cmp_span(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

void st_close(struct st_file *f)
{
    if (!f) return;
    if (f->map) munmap((void *)f->map, f->size);
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    free(f->t);
    for (int i = 0; i < 2 * f->n_meta; i++) free(f->meta[i]);
    free(f->meta);
    free(f->path);
    memset(f, 0, sizeof *f);
}

/* A JSON integer in [0, max] into *out; -1 otherwise. */
static int json_uint(const json_t *v, uint64_t max, uint64_t *out)
{
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0 || (uint64_t)x > max) return -1;
    *out = (uint64_t)x;
    return 0;
}

/* One tensor entry of the header into t (name already set). */
static int parse_entry(const char *path, const char *name, const json_t *v, uint64_t data_len,
                       struct st_tensor *t, char *err, size_t errlen)
{
    if (!json_is_object(v)) {
        errmsg_set(err, errlen, "%s: header entry \"%s\" is not an object {dtype, shape, "
                   "data_offsets}", path, name);
        return -1;
    }
    const json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
                 *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt)) {
        errmsg_set(err, errlen, "%s: tensor \"%s\": dtype is %s, expected a string such as "
                   "\"BF16\"", path, name, dt ? "not a string" : "missing");
        return -1;
    }
    int d = st_dtype_parse(json_string_value(dt));
    if (d < 0) {
        errmsg_set(err, errlen, "%s: tensor \"%s\": unknown dtype \"%s\" (libra reads BF16, "
                   "F16 and F32)", path, name, json_string_value(dt));
        return -1;
    }
    t->dtype = (enum st_dtype)d;
    if (!json_is_array(sh) || json_array_size(sh) > ST_MAX_DIMS) {
        errmsg_set(err, errlen, "%s: tensor \"%s\": shape is %s, expected an array of at most "
                   "%d non-negative integers", path, name, sh ? "not an array or too long" :
                   "missing", ST_MAX_DIMS);
        return -1;
    }
    t->ndim = (int)json_array_size(sh);
    /* the product is bounded by the data size (checked below), so cap each factor */
    uint64_t numel = 1;
    int overflow = 0;
    for (int i = 0; i < t->ndim; i++) {
        uint64_t x;
        if (json_uint(json_array_get(sh, (size_t)i), (uint64_t)INT64_MAX, &x)) {
            errmsg_set(err, errlen, "%s: tensor \"%s\": shape[%d] is not a non-negative "
                       "integer", path, name, i);
            return -1;
        }
        t->shape[i] = (int64_t)x;
        if (x && numel > UINT64_MAX / x) overflow = 1;
        else numel *= x;
    }
    uint64_t b, e;
    if (!json_is_array(off) || json_array_size(off) != 2 ||
        json_uint(json_array_get(off, 0), UINT64_MAX >> 1, &b) ||
        json_uint(json_array_get(off, 1), UINT64_MAX >> 1, &e)) {
        errmsg_set(err, errlen, "%s: tensor \"%s\": data_offsets must be [begin, end], two "
                   "non-negative integers", path, name);
        return -1;
    }
    if (b > e || e > data_len) {
        errmsg_set(err, errlen, "%s: tensor \"%s\": data_offsets [%llu, %llu] out of range: "
                   "the data area holds %llu bytes (truncated file?)", path, name,
                   (unsigned long long)b, (unsigned long long)e, (unsigned long long)data_len);
        return -1;
    }
    size_t es = st_dtype_size(t->dtype);
    if (overflow || numel > UINT64_MAX / es || numel * es != e - b) {
        char shape[160] = "";
        size_t used = 0;
        for (int i = 0; i < t->ndim && used + 1 < sizeof shape; i++) {
            int w = snprintf(shape + used, sizeof shape - used, "%s%lld", i ? ", " : "",
                             (long long)t->shape[i]);
            used += w > 0 ? (size_t)w : 0;
        }
        errmsg_set(err, errlen, "%s: tensor \"%s\": data_offsets [%llu, %llu] span %llu bytes "
                   "but shape [%s] x %s (%zu bytes) needs %s%llu", path, name,
                   (unsigned long long)b, (unsigned long long)e, (unsigned long long)(e - b),
                   shape, dtypes[t->dtype].name, es, overflow ? "more than " : "",
                   overflow ? (unsigned long long)UINT64_MAX
                           : (unsigned long long)(numel * es));
        return -1;
    }
    t->begin = b;
    t->end = e;
    return 0;
}

static int parse_metadata(struct st_file *f, const json_t *m, char *err, size_t errlen)
{
    if (json_is_null(m)) return 0;
    if (!json_is_object(m)) {
        errmsg_set(err, errlen, "%s: __metadata__ is not an object of strings", f->path);
        return -1;
    }
    f->meta = xcalloc(2 * json_object_size(m) + 1, sizeof *f->meta);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v)
    {
        if (!json_is_string(v)) {
            errmsg_set(err, errlen, "%s: __metadata__ \"%s\" is not a string", f->path, k);
            return -1;
        }
        f->meta[2 * f->n_meta] = xstrdup(k);
        f->meta[2 * f->n_meta + 1] = xstrdup(json_string_value(v));
        f->n_meta++;
    }
    return 0;
}

int st_open(struct st_file *f, const char *path, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    f->path = xstrdup(path);
    json_t *root = NULL;
    struct span *spans = NULL;
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        errmsg_set(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        errmsg_set(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        errmsg_set(err, errlen, "%s: not a regular file", path);
        goto fail;
    }
    f->size = (size_t)st.st_size;
    if (f->size < 8) {
        errmsg_set(err, errlen, "%s: %zu bytes: truncated (a safetensors file starts with an "
                   "8-byte header length)", path, f->size);
        goto fail;
    }
    void *map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        errmsg_set(err, errlen, "%s: mmap of %zu bytes failed: %s", path, f->size,
                   strerror(errno));
        goto fail;
    }
    f->map = map;
    close(fd);
    fd = -1;
    uint64_t hlen;
    memcpy(&hlen, f->map, sizeof hlen);
    if (hlen > f->size - 8) {
        errmsg_set(err, errlen, "%s: header length %llu is larger than the %zu bytes after it: "
                   "truncated, or not a safetensors file", path, (unsigned long long)hlen,
                   f->size - 8);
        goto fail;
    }
    if (hlen < 2 || hlen > ST_MAX_HEADER) {
        errmsg_set(err, errlen, "%s: header length %llu is not in [2, %llu]: not a safetensors "
                   "file", path, (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
        goto fail;
    }
    f->data = f->map + 8 + hlen;
    f->data_len = f->size - 8 - hlen;
    json_error_t je;
    root = json_loadb((const char *)f->map + 8, hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        errmsg_set(err, errlen, "%s: header is not valid JSON: %s (header byte %d)", path,
                   je.text, je.position);
        goto fail;
    }
    if (!json_is_object(root)) {
        errmsg_set(err, errlen, "%s: header is not a JSON object", path);
        goto fail;
    }
    size_t cap = json_object_size(root);
    f->t = xcalloc(cap ? cap : 1, sizeof *f->t);
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "__metadata__") == 0) {
            if (parse_metadata(f, v, err, errlen)) goto fail;
            continue;
        }
        struct st_tensor *t = &f->t[f->n];
        t->name = xstrdup(key);
        f->n++;
        if (parse_entry(path, key, v, f->data_len, t, err, errlen)) goto fail;
    }
    json_decref(root);
    root = NULL;
    /* no two tensors share bytes: sorted by begin, each starts at or after the end of
     * the previous one (empty tensors overlap nothing) */
    spans = xmalloc(sizeof *spans * (size_t)(f->n ? f->n : 1));
    int ns = 0;
    for (int i = 0; i < f->n; i++)
        if (f->t[i].end > f->t[i].begin)
            spans[ns++] = (struct span){f->t[i].begin, f->t[i].end, i};
    qsort(spans, (size_t)ns, sizeof *spans, cmp_span);
    for (int i = 1; i < ns; i++)
        if (spans[i].begin < spans[i - 1].end) {
            errmsg_set(err, errlen, "%s: tensors \"%s\" [%llu, %llu) and \"%s\" [%llu, %llu) "
                       "overlap in the data area", path, f->t[spans[i - 1].idx].name,
                       (unsigned long long)spans[i - 1].begin,
                       (unsigned long long)spans[i - 1].end, f->t[spans[i].idx].name,
                       (unsigned long long)spans[i].begin, (unsigned long long)spans[i].end);
            goto fail;
        }
    free(spans);
    qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_tensor_name);
    return 0;
fail:
    if (fd >= 0) close(fd);
    json_decref(root);
    free(spans);
    st_close(f);
    return -1;
}

const struct st_tensor *st_find(const struct st_file *f, const char *name)
{
    struct st_tensor key = {.name = (char *)name};
    return f->n ? bsearch(&key, f->t, (size_t)f->n, sizeof *f->t, cmp_tensor_name) : NULL;
}

const char *st_meta(const struct st_file *f, const char *key)
{
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[2 * i], key) == 0) return f->meta[2 * i + 1];
    return NULL;
}

/* ---- reading ---- */

static int check_float(const struct st_file *f, const struct st_tensor *t, char *err,
                       size_t errlen)
{
    if (t->dtype == ST_F32 || t->dtype == ST_F16 || t->dtype == ST_BF16) return 0;
    errmsg_set(err, errlen, "%s: tensor \"%s\" has dtype %s: libra reads BF16, F16 and F32 "
               "(convert the checkpoint, e.g. save it with torch_dtype bfloat16)", f->path,
               t->name, dtypes[t->dtype].name);
    return -1;
}

int st_read(const struct st_file *f, const struct st_tensor *t, float *out, char *err,
            size_t errlen)
{
    if (check_float(f, t, err, errlen)) return -1;
    size_t n = (size_t)st_numel(t);
    to_f32(t->dtype, f->data + t->begin, out, n);
    return 0;
}

/* st_read_block into out (float32) or out16 (bf16), whichever is not NULL. */
static int read_block(const struct st_file *f, const struct st_tensor *t, int64_t r0, int64_t nr,
                      int64_t c0, int64_t nc, float *out, uint16_t *out16, char *err,
                      size_t errlen)
{
    if (check_float(f, t, err, errlen)) return -1;
    int64_t rows = t->ndim ? t->shape[0] : 1, cols = rows ? st_numel(t) / rows : 0;
    if (r0 < 0 || nr < 0 || c0 < 0 || nc < 0 || r0 + nr > rows || c0 + nc > cols) {
        errmsg_set(err, errlen, "%s: tensor \"%s\": block rows [%lld, %lld) x columns [%lld, "
                   "%lld) is outside its (%lld, %lld)", f->path, t->name, (long long)r0,
                   (long long)(r0 + nr), (long long)c0, (long long)(c0 + nc), (long long)rows,
                   (long long)cols);
        return -1;
    }
    size_t es = st_dtype_size(t->dtype);
    const unsigned char *base = f->data + t->begin;
    int runs = c0 == 0 && nc == cols ? 1 : (int)nr; /* contiguous rows: one run */
    size_t len = runs == 1 ? (size_t)(nr * nc) : (size_t)nc;
    for (int64_t r = 0; r < runs; r++) {
        const unsigned char *from = base + (size_t)((r0 + r) * cols + c0) * es;
        if (out16)
            to_bf16(t->dtype, from, out16 + r * nc, len);
        else
            to_f32(t->dtype, from, out + r * nc, len);
    }
    return 0;
}

int st_read_block(const struct st_file *f, const struct st_tensor *t, int64_t r0, int64_t nr,
                  int64_t c0, int64_t nc, float *out, char *err, size_t errlen)
{
    return read_block(f, t, r0, nr, c0, nc, out, NULL, err, errlen);
}

int st_read_block_bf16(const struct st_file *f, const struct st_tensor *t, int64_t r0,
                       int64_t nr, int64_t c0, int64_t nc, uint16_t *out, char *err,
                       size_t errlen)
{
    return read_block(f, t, r0, nr, c0, nc, NULL, out, err, errlen);
}

/* ---- model directories ---- */

static char *join_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const struct st_entry *)a)->name, ((const struct st_entry *)b)->name);
}

void st_set_close(struct st_set *s)
{
    if (!s) return;
    for (int i = 0; i < s->n_files; i++) st_close(&s->files[i]);
    free(s->files);
    free(s->e);
    free(s->dir);
    memset(s, 0, sizeof *s);
}

/* A shard file name from the index: a plain name in the directory. */
static int plain_name(const char *s)
{
    return s[0] && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static int open_indexed(struct st_set *s, const char *index, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_load_file(index, JSON_REJECT_DUPLICATES, &je);
    const char **names = NULL;
    int rc = -1;
    if (!root) {
        errmsg_set(err, errlen, "%s: not valid JSON: %s (line %d, column %d)", index, je.text,
                   je.line, je.column);
        return -1;
    }
    const json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(wm)) {
        errmsg_set(err, errlen, "%s: \"weight_map\" is %s, expected an object {tensor name: "
                   "shard file}", index, wm ? "not an object" : "missing");
        goto out;
    }
    size_t nw = json_object_size(wm);
    names = xcalloc(nw ? nw : 1, sizeof *names);
    s->files = xcalloc(nw ? nw : 1, sizeof *s->files);
    const char *key;
    json_t *v;
    /* the distinct shard files, in order of first mention */
    json_object_foreach((json_t *)wm, key, v)
    {
        if (!json_is_string(v) || !plain_name(json_string_value(v))) {
            errmsg_set(err, errlen, "%s: weight_map[\"%s\"] must be the name of a file in the "
                       "same directory", index, key);
            goto out;
        }
        const char *fn = json_string_value(v);
        int k = 0;
        while (k < s->n_files && strcmp(names[k], fn) != 0) k++;
        if (k < s->n_files) continue;
        char *p = join_path(s->dir, fn);
        int o = st_open(&s->files[s->n_files], p, err, errlen);
        free(p);
        if (o) goto out;
        names[s->n_files++] = fn;
    }
    s->e = xmalloc(sizeof *s->e * (nw ? nw : 1));
    int total = 0;
    json_object_foreach((json_t *)wm, key, v)
    {
        const char *fn = json_string_value(v);
        int k = 0;
        while (strcmp(names[k], fn) != 0) k++;
        const struct st_tensor *t = st_find(&s->files[k], key);
        if (!t) {
            errmsg_set(err, errlen, "%s: weight_map names tensor \"%s\" in %s, which has no "
                       "such tensor", index, key, s->files[k].path);
            goto out;
        }
        s->e[s->n++] = (struct st_entry){t->name, k, t};
    }
    for (int k = 0; k < s->n_files; k++) total += s->files[k].n;
    s->n_unmapped = total - s->n;
    rc = 0;
out:
    free(names);
    json_decref(root);
    return rc;
}

int st_set_open(struct st_set *s, const char *dir, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->dir = xstrdup(dir);
    char *single = join_path(dir, ST_SINGLE_NAME), *index = join_path(dir, ST_INDEX_NAME);
    int rc = -1;
    if (access(single, F_OK) == 0) {
        s->files = xcalloc(1, sizeof *s->files);
        if (st_open(&s->files[0], single, err, errlen)) goto out;
        s->n_files = 1;
        s->n = s->files[0].n;
        s->e = xmalloc(sizeof *s->e * (size_t)(s->n ? s->n : 1));
        for (int i = 0; i < s->n; i++)
            s->e[i] = (struct st_entry){s->files[0].t[i].name, 0, &s->files[0].t[i]};
    } else if (access(index, F_OK) == 0) {
        s->sharded = 1;
        if (open_indexed(s, index, err, errlen)) goto out;
    } else {
        errmsg_set(err, errlen, "%s: no %s and no %s: not a Hugging Face safetensors "
                   "checkpoint (pytorch_model.bin is not read: convert it to safetensors)",
                   dir, ST_SINGLE_NAME, ST_INDEX_NAME);
        goto out;
    }
    qsort(s->e, (size_t)s->n, sizeof *s->e, cmp_entry);
    rc = 0;
out:
    free(single);
    free(index);
    if (rc) st_set_close(s);
    return rc;
}

const struct st_entry *st_set_find(const struct st_set *s, const char *name)
{
    struct st_entry key = {.name = name};
    return s->n ? bsearch(&key, s->e, (size_t)s->n, sizeof *s->e, cmp_entry) : NULL;
}

uint64_t st_set_bytes(const struct st_set *s)
{
    uint64_t b = 0;
    for (int i = 0; i < s->n_files; i++) b += s->files[i].size;
    return b;
}

/* ---- writing ---- */

static uint64_t src_numel(const struct st_src *t)
{
    uint64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (uint64_t)t->shape[i];
    return n;
}

static int check_writable(const char *path, const struct st_src *t, int n, enum st_dtype dtype,
                          char *err, size_t errlen)
{
    if (dtype != ST_F32 && dtype != ST_F16 && dtype != ST_BF16) {
        errmsg_set(err, errlen, "%s: cannot write dtype %s (BF16, F16 or F32)", path,
                   st_dtype_name(dtype) ? st_dtype_name(dtype) : "?");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (t[i].ndim < 0 || t[i].ndim > ST_MAX_DIMS || !t[i].name || !t[i].name[0] ||
            strcmp(t[i].name, "__metadata__") == 0) {
            errmsg_set(err, errlen, "%s: tensor %d (\"%s\"): bad name or %d dimensions", path,
                       i, t[i].name ? t[i].name : "", t[i].ndim);
            return -1;
        }
        for (int k = 0; k < i; k++)
            if (strcmp(t[k].name, t[i].name) == 0) {
                errmsg_set(err, errlen, "%s: tensor \"%s\" given twice", path, t[i].name);
                return -1;
            }
    }
    return 0;
}

/* The header (JSON, space-padded so that 8 + length is a multiple of 8); malloc'ed. */
static char *build_header(const struct st_src *t, int n, enum st_dtype dtype, size_t *len)
{
    json_t *root = json_object();
    json_object_set_new(root, "__metadata__", json_pack("{s:s}", "format", "pt"));
    uint64_t off = 0, es = st_dtype_size(dtype);
    for (int i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int k = 0; k < t[i].ndim; k++)
            json_array_append_new(shape, json_integer((json_int_t)t[i].shape[k]));
        uint64_t bytes = src_numel(&t[i]) * es;
        json_t *e = json_pack("{s:s,s:o,s:[I,I]}", "dtype", st_dtype_name(dtype), "shape",
                              shape, "data_offsets", (json_int_t)off,
                              (json_int_t)(off + bytes));
        json_object_set_new(root, t[i].name, e);
        off += bytes;
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) FATAL("safetensors: json_dumps of the header failed (out of memory?)");
    size_t l = strlen(text), padded = (l + 7) / 8 * 8;
    char *h = xmalloc(padded + 1);
    memcpy(h, text, l);
    memset(h + l, ' ', padded - l);
    h[padded] = '\0';
    free(text);
    *len = padded;
    return h;
}

int st_write(const char *path, const struct st_src *t, int n, enum st_dtype dtype, char *err,
             size_t errlen)
{
    if (check_writable(path, t, n, dtype, err, errlen)) return -1;
    size_t hlen;
    char *header = build_header(t, n, dtype, &hlen);
    enum { CHUNK = 1 << 16 }; /* elements converted per write */
    size_t es = st_dtype_size(dtype);
    unsigned char *buf = xmalloc(CHUNK * es);
    struct afile a;
    if (afile_open(&a, path, err, errlen)) goto fail_open;
    uint64_t len64 = hlen;
    if (afile_write(&a, &len64, sizeof len64, err, errlen) ||
        afile_write(&a, header, hlen, err, errlen))
        goto fail;
    for (int i = 0; i < n; i++) {
        uint64_t total = src_numel(&t[i]);
        for (uint64_t k = 0; k < total; k += CHUNK) {
            size_t m = (size_t)(total - k < CHUNK ? total - k : CHUNK);
            from_f32(dtype, t[i].data + k, buf, m);
            if (afile_write(&a, buf, m * es, err, errlen)) goto fail;
        }
    }
    free(buf);
    free(header);
    return afile_commit(&a, err, errlen);
fail:
    afile_abort(&a);
fail_open:
    free(buf);
    free(header);
    return -1;
}

int st_write_dir(const char *dir, const struct st_src *t, int n, enum st_dtype dtype,
                 uint64_t max_shard_bytes, int *n_files, char *err, size_t errlen)
{
    if (check_writable(dir, t, n, dtype, err, errlen)) return -1;
    if (max_shard_bytes == 0) {
        errmsg_set(err, errlen, "%s: the maximum shard size must be positive", dir);
        return -1;
    }
    /* shard k holds tensors [first[k], first[k + 1]) */
    int *first = xmalloc(sizeof *first * (size_t)(n + 2));
    int ns = 0;
    uint64_t cur = 0, total = 0, es = st_dtype_size(dtype);
    for (int i = 0; i < n; i++) {
        uint64_t b = src_numel(&t[i]) * es;
        if (i == 0 || (cur > 0 && cur + b > max_shard_bytes)) {
            first[ns++] = i;
            cur = 0;
        }
        cur += b;
        total += b;
    }
    if (ns == 0) first[ns++] = 0;
    first[ns] = n;
    int rc = -1;
    char *path = NULL;
    json_t *index = NULL;
    if (ns == 1) {
        path = join_path(dir, ST_SINGLE_NAME);
        rc = st_write(path, t, n, dtype, err, errlen);
        if (rc == 0) { /* an index left by an earlier sharded save would mislead readers */
            free(path);
            path = join_path(dir, ST_INDEX_NAME);
            unlink(path);
        }
        goto out;
    }
    index = json_object();
    json_t *wm = json_object();
    json_object_set_new(index, "metadata", json_pack("{s:I}", "total_size", (json_int_t)total));
    json_object_set_new(index, "weight_map", wm);
    for (int k = 0; k < ns; k++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k + 1, ns);
        free(path);
        path = join_path(dir, name);
        if (st_write(path, t + first[k], first[k + 1] - first[k], dtype, err, errlen)) goto out;
        for (int i = first[k]; i < first[k + 1]; i++)
            json_object_set_new(wm, t[i].name, json_string(name));
    }
    char *text = json_dumps(index, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!text) FATAL("safetensors: json_dumps of the index failed (out of memory?)");
    size_t tl = strlen(text);
    text = xrealloc(text, tl + 2);
    text[tl] = '\n';
    text[tl + 1] = '\0';
    free(path);
    path = join_path(dir, ST_INDEX_NAME);
    rc = afile_put(path, text, tl + 1, err, errlen);
    free(text);
    if (rc == 0) { /* a single file left by an earlier save would win over the index */
        free(path);
        path = join_path(dir, ST_SINGLE_NAME);
        unlink(path);
    }
out:
    if (rc == 0 && n_files) *n_files = ns;
    json_decref(index);
    free(path);
    free(first);
    return rc;
}
