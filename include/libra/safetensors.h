/*
 * safetensors files (the Hugging Face weight format), read through mmap and written
 * atomically, and the sharded checkpoints of a model directory.
 *
 * A file is: 8 bytes N (unsigned, little-endian), N bytes of JSON header, the data
 * area. The header maps each tensor name to {"dtype", "shape", "data_offsets":
 * [begin, end)} (byte offsets into the data area, row-major, little-endian) and may
 * hold "__metadata__", an object of strings.
 *
 * Validated when a file is opened (errors name the file, and the tensor and field):
 *   N >= 2, 8 + N <= file size, N <= ST_MAX_HEADER; the header is a JSON object without
 *   duplicate keys; each tensor has a known dtype, a shape of at most ST_MAX_DIMS
 *   non-negative integers, data_offsets of two integers begin <= end <= data size,
 *   end - begin = product(shape) x dtype size; no two tensors' bytes overlap.
 * Any dtype of the format is accepted at open (so a file is checked whole); only
 * BF16, F16 and F32 can be read as float32: reading another names the tensor and its
 * dtype.
 *
 * A model directory holds model.safetensors, or model.safetensors.index.json whose
 * "weight_map" maps each tensor name to a shard file in the same directory (plain
 * names only); model.safetensors wins when both are there, as in transformers.
 *
 * The writer converts float32 tensors to BF16 or F16 (round to nearest even; NaN
 * stays NaN, overflow becomes infinity, F16 keeps subnormals) or keeps F32, pads
 * the header with spaces to a multiple of 8 bytes and writes "__metadata__":
 * {"format": "pt"}. Files are atomic (libra/afile.h). Past max_shard_bytes of tensor
 * data a model is split into model-0000N-of-0000M.safetensors plus the index (a
 * tensor larger than the limit gets a shard of its own).
 *
 * Little-endian hosts only (checked at compile time). Not thread-safe per object;
 * distinct objects are independent.
 */
#ifndef LIBRA_SAFETENSORS_H
#define LIBRA_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER ((uint64_t)100 << 20) /* bytes of JSON header, as in the Rust crate */
#define ST_DEFAULT_MAX_SHARD ((uint64_t)5000000000) /* transformers' max_shard_size "5GB" */
#define ST_INDEX_NAME "model.safetensors.index.json"
#define ST_SINGLE_NAME "model.safetensors"

enum st_dtype {
    ST_F32, ST_F16, ST_BF16, /* readable as float32 */
    ST_F64, ST_I64, ST_U64, ST_I32, ST_U32, ST_I16, ST_U16, ST_I8, ST_U8, ST_BOOL,
    ST_F8_E4M3, ST_F8_E5M2,
    ST_DTYPE_COUNT
};

/* "BF16" ...; NULL out of range. */
const char *st_dtype_name(enum st_dtype d);
/* Bytes per element (0 out of range). */
size_t st_dtype_size(enum st_dtype d);
/* The dtype of a name ("BF16"), -1 if unknown. */
int st_dtype_parse(const char *name);

/* Conversions (bit patterns as uint16_t). */
float st_bf16_to_f32(uint16_t h);
uint16_t st_f32_to_bf16(float x);
float st_f16_to_f32(uint16_t h);
uint16_t st_f32_to_f16(float x);
/* The same over arrays: y[i] = conversion of x[i], i < n. */
void st_bf16_to_f32_n(const uint16_t *x, float *y, size_t n);
void st_f32_to_bf16_n(const float *x, uint16_t *y, size_t n);

struct st_tensor {
    char *name;
    enum st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end; /* bytes [begin, end) of the data area */
};

struct st_file {
    char *path;
    const unsigned char *map; /* the whole file, mapped read-only (NULL if empty) */
    size_t size;              /* file bytes */
    const unsigned char *data; /* the data area: map + 8 + header length */
    uint64_t data_len;
    int n;
    struct st_tensor *t;      /* (n) sorted by name */
    int n_meta;
    char **meta;              /* (2 n_meta) "__metadata__" keys and values */
};

/* Maps and validates path; 0, or -1 with a message (nothing left open). */
int st_open(struct st_file *f, const char *path, char *err, size_t errlen);
/* Unmaps and frees; a no-op on a zeroed or closed f. */
void st_close(struct st_file *f);
const struct st_tensor *st_find(const struct st_file *f, const char *name);
/* A "__metadata__" value, NULL if absent. */
const char *st_meta(const struct st_file *f, const char *key);
/* Elements of the tensor (product of its shape). */
int64_t st_numel(const struct st_tensor *t);

/* The whole tensor as float32 into out (st_numel floats). */
int st_read(const struct st_file *f, const struct st_tensor *t, float *out, char *err,
            size_t errlen);
/* Rows [r0, r0 + nr) and columns [c0, c0 + nc) of a tensor seen as (shape[0],
 * product of the rest) -- a 1-D tensor is (n, 1) -- into out (nr x nc, row-major).
 * Touches only the pages of those rows' ranges. Out-of-range blocks are errors. */
int st_read_block(const struct st_file *f, const struct st_tensor *t, int64_t r0, int64_t nr,
                  int64_t c0, int64_t nc, float *out, char *err, size_t errlen);
/* The same block as bf16: BF16 tensors' bytes as they are, F16 and F32 rounded to
 * nearest even (st_f32_to_bf16 of st_read_block's values) -- half the memory, and for
 * a bf16 checkpoint no conversion at all. */
int st_read_block_bf16(const struct st_file *f, const struct st_tensor *t, int64_t r0,
                       int64_t nr, int64_t c0, int64_t nc, uint16_t *out, char *err,
                       size_t errlen);

/* ---- a model directory (single file or shards) ---- */

struct st_entry {
    const char *name;          /* points into the file's tensor */
    int file;                  /* index in files */
    const struct st_tensor *t;
};

struct st_set {
    char *dir;
    int sharded;               /* 1: read through the index */
    int n_files;
    struct st_file *files;
    int n;
    struct st_entry *e;        /* (n) sorted by name */
    int n_unmapped;            /* tensors in shard files that the weight_map does not name
                                * (ignored, as transformers does) */
};

/* Opens dir/model.safetensors, else every shard dir/model.safetensors.index.json names
 * (each tensor of the weight_map must be in its shard). 0, or -1 with a message. */
int st_set_open(struct st_set *s, const char *dir, char *err, size_t errlen);
void st_set_close(struct st_set *s);
const struct st_entry *st_set_find(const struct st_set *s, const char *name);
/* Bytes of all the set's files (the benchmark's figure). */
uint64_t st_set_bytes(const struct st_set *s);

/* ---- writing ---- */

struct st_src {                /* one tensor to write */
    const char *name;
    const float *data;         /* product(shape) floats, row-major */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
};

/* One file at path with tensors t (in this order), stored as dtype (ST_F32, ST_F16
 * or ST_BF16). 0, or -1 with a message (no temporary left behind). */
int st_write(const char *path, const struct st_src *t, int n, enum st_dtype dtype, char *err,
             size_t errlen);
/* A model's tensors into directory dir (which must exist): model.safetensors when
 * their data fit max_shard_bytes, else model-%05d-of-%05d.safetensors (in order,
 * greedily filled) and model.safetensors.index.json ({"metadata": {"total_size"},
 * "weight_map"}), written last. The entry point of the other layout, if an earlier
 * save left one, is removed once the new one is complete (stale shards are not).
 * *n_files (may be NULL) gets the count of weight files. */
int st_write_dir(const char *dir, const struct st_src *t, int n, enum st_dtype dtype,
                 uint64_t max_shard_bytes, int *n_files, char *err, size_t errlen);

#endif
