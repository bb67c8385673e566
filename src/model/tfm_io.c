/*
 * Model files (include/libra/tfm_io.h): the transformer's parameters, its config and
 * optionally the AdamW state in one HDF5 file that h5py and the Hugging Face names
 * make easy to produce and inspect.
 *
 * Layout (format version TFM_FORMAT_VERSION = 1):
 *   /<hf name>      one float32 (little-endian) dataset per tensor of tfm_tensors(),
 *                   contiguous, shaped (out, in) or (n); per-layer tensors are the
 *                   layer's slice of the stacked arrays in tfm_params.
 *   root attributes model_type: string "llama" | "qwen2" | "qwen3"
 *                   hidden_size, num_hidden_layers, num_attention_heads,
 *                   num_key_value_heads, head_dim, intermediate_size, vocab_size,
 *                   max_position_embeddings, libra_format_version: int64
 *                   rms_norm_eps, rope_theta: double
 *                   tie_word_embeddings, attention_bias: int64 0 / 1
 *                   rope_scaling, only when rope_type is not default (config.json's
 *                   rope_scaling keys with a rope_ prefix): rope_type: string "linear" |
 *                   "llama3" | "yarn"; rope_factor: double; llama3: rope_low_freq_factor,
 *                   rope_high_freq_factor: double, rope_original_max_position_embeddings:
 *                   int64; yarn, each only when set (absent = HF's default):
 *                   rope_original_max_position_embeddings, rope_beta_fast,
 *                   rope_beta_slow, rope_attention_factor. A file without rope_type is
 *                   plain rotary (files before rope_scaling load unchanged; readers
 *                   before it ignore these attributes, as any unknown root attribute).
 *   /optimizer      (optional) datasets m, v: float32 (n), n = tfm_param_count, the
 *                   tfm_params layout; attributes step, warmup_steps, total_steps: int64;
 *                   lr, beta1, beta2, eps, weight_decay, clip_norm, min_lr_ratio: double;
 *                   schedule: string "constant" | "cosine".
 *   every dataset   attribute libra_xxh3: uint64, the XXH3 checksum of its bytes seeded
 *                   by its path ("/model.norm.weight", "/optimizer/m"; h5sum.h), verified
 *                   on load: a flipped byte or a tensor stored under another's name is
 *                   an error naming the tensor. Files without it (written before it
 *                   existed, or by other tools) load unchecked. Loaded tensors must be
 *                   finite: a NaN or infinity is an error naming the tensor.
 * qk_norm is not stored: it is implied by model_type qwen3 (as in Hugging Face), so a
 * config whose qk_norm disagrees with its family cannot be saved.
 *
 * Reading is lenient about encodings and strict about meaning: integers may be any
 * HDF5 integer type (int32, int64, ...), floats any float or integer type, booleans
 * an integer 0 / 1 or h5py's bool enum, strings fixed or variable length; tensors any
 * float type (HDF5 converts; bitwise only for float32). Every attribute above must be
 * present with a usable type and the datasets must be exactly the config's tensors
 * with exactly its shapes (errors name the tensor, both shapes and the config fields
 * behind them); unknown datasets or groups are errors, unknown root attributes are
 * ignored (a converter may copy extra config.json keys, but none is honoured). Before
 * allocating, the parameter count the config implies is checked against the file
 * size, so a bad or truncated file cannot make us allocate absurd amounts.
 *
 * Writes are atomic (libra/h5atomic.h): the file is built in memory, written to
 * <path>.tmp-<pid> in the same directory, fsync'd, renamed over path, and the
 * directory fsync'd. A failed save removes its temporary and leaves any existing file
 * untouched. Saving needs memory for one more copy of the file (parameters, plus
 * twice that again with the optimizer moments).
 *
 * HDF5's automatic error printing is off only for the duration of each call here; any
 * failure returns -1 with "<path>: <what>" in err (HDF5 failures add the call,
 * file:line and HDF5's own message). Not thread-safe (HDF5 serial API).
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/tfm_io.h"
#include "libra/errmsg.h"

#include "libra/h5atomic.h"
#include "libra/h5sum.h"
#include "libra/h5try.h"
#include "libra/h5util.h"
#include "libra/log.h"

#include <errno.h>
#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- errors ---- */


/* ---- names ---- */

static const char *const schedule_names[] = {"constant", "cosine"};

/* Config fields behind a tensor dimension, for shape messages. */
enum { F_V = 1, F_C = 2, F_H = 4, F_K = 8, F_D = 16, F_F = 32 };

struct shape_rule {
    const char *suffix;
    int dim[2]; /* fields multiplied in each dimension */
};

static const struct shape_rule shape_rules[] = {
    {"embed_tokens.weight", {F_V, F_C}},   {"lm_head.weight", {F_V, F_C}},
    {"q_proj.weight", {F_H | F_D, F_C}},   {"q_proj.bias", {F_H | F_D, 0}},
    {"k_proj.weight", {F_K | F_D, F_C}},   {"k_proj.bias", {F_K | F_D, 0}},
    {"v_proj.weight", {F_K | F_D, F_C}},   {"v_proj.bias", {F_K | F_D, 0}},
    {"q_norm.weight", {F_D, 0}},           {"k_norm.weight", {F_D, 0}},
    {"o_proj.weight", {F_C, F_H | F_D}},   {"layernorm.weight", {F_C, 0}},
    {"model.norm.weight", {F_C, 0}},       {"gate_proj.weight", {F_F, F_C}},
    {"up_proj.weight", {F_F, F_C}},        {"down_proj.weight", {F_C, F_F}},
};

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* "(num_key_value_heads 2, head_dim 16)" for the fields in mask. */
static void describe_fields(char *out, size_t n, int mask, const struct tfm_config *c)
{
    const struct {
        int bit;
        const char *name;
        int value;
    } f[] = {
        {F_V, "vocab_size", c->vocab_size},        {F_C, "hidden_size", c->hidden_size},
        {F_H, "num_attention_heads", c->n_heads},  {F_K, "num_key_value_heads", c->n_kv_heads},
        {F_D, "head_dim", c->head_dim},            {F_F, "intermediate_size", c->intermediate_size},
    };
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (!(mask & f[i].bit) || used + 1 >= n) continue;
        int w = snprintf(out + used, n - used, "%s%s %d", used ? ", " : "(", f[i].name,
                         f[i].value);
        used += w > 0 ? (size_t)w : 0;
    }
    if (used && used + 1 < n) snprintf(out + used, n - used, ")");
}

static void format_shape(char *out, size_t n, int ndim, const hsize_t *dims)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < ndim && used + 1 < n; i++) {
        int w = snprintf(out + used, n - used, "%s%llu", i ? ", " : "(",
                         (unsigned long long)dims[i]);
        used += w > 0 ? (size_t)w : 0;
    }
    if (used + 1 < n) snprintf(out + used, n - used, ndim ? ")" : "()");
}

/* ---- writing ---- */

/* The shortest decimal that reads back as the same float, as a double: 1e-6f is
 * written as 1e-06 (what config.json says), not 9.99999997e-07. */
static double float_to_double_decimal(float x)
{
    char buf[32];
    if (!isfinite(x)) return (double)x;
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)x);
        double d = strtod(buf, NULL);
        if ((float)d == x) return d;
    }
    return (double)x;
}

static int attr_put_i64(hid_t obj, const char *name, int64_t v, const char *path, char *err,
                        size_t errlen)
{
    return h5_attr_put(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v, path, err, errlen);
}

static int attr_put_f64(hid_t obj, const char *name, float v, const char *path, char *err,
                        size_t errlen)
{
    double d = float_to_double_decimal(v);
    return h5_attr_put(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &d, path, err, errlen);
}

/* Variable-length UTF-8: h5py reads it as str. */
static int attr_put_string(hid_t obj, const char *name, const char *value, const char *path,
                           char *err, size_t errlen)
{
    hid_t type = H5I_INVALID_HID;
    H5TRY(type = H5Tcopy(H5T_C_S1));
    H5TRY(H5Tset_size(type, H5T_VARIABLE));
    H5TRY(H5Tset_cset(type, H5T_CSET_UTF8));
    if (h5_attr_put(obj, name, type, type, &value, path, err, errlen) != 0) goto fail;
    H5CLOSE(type, H5Tclose);
    return 0;
fail:
    close_id(&type, H5Tclose);
    return -1;
}

/* A float32 tensor, with its checksum (h5sum.h). */
static int dset_put(hid_t loc, const char *name, int ndim,
                    const int64_t *dims, const float *data, const char *path, char *err,
                    size_t errlen)
{
    hid_t space = H5I_INVALID_HID, dset = H5I_INVALID_HID;
    hsize_t hd[2] = {(hsize_t)dims[0], ndim > 1 ? (hsize_t)dims[1] : 0};
    size_t n = (size_t)hd[0] * (ndim > 1 ? (size_t)hd[1] : 1);
    H5TRY(space = H5Screate_simple(ndim, hd, NULL));
    H5TRY(dset = H5Dcreate2(loc, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT,
                            H5P_DEFAULT));
    H5TRY(H5Dwrite(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
    if (h5sum_put(dset, data, n * sizeof *data, path, err, errlen)) goto fail;
    H5CLOSE(dset, H5Dclose);
    H5CLOSE(space, H5Sclose);
    return 0;
fail:
    close_id(&dset, H5Dclose);
    close_id(&space, H5Sclose);
    return -1;
}

/* The rope_scaling attributes (none for plain rotary): the fields the type reads,
 * yarn's optional ones only when set (0 = HF's default), as config.json has them. */
static int write_rope_scaling(hid_t file, const struct tfm_config *c, const char *path,
                              char *err, size_t errlen)
{
    int t = c->rope_type;
    if (t == TFM_ROPE_DEFAULT) return 0;
    if (attr_put_string(file, "rope_type", tfm_rope_type_name(t), path, err, errlen) ||
        attr_put_f64(file, "rope_factor", c->rope_factor, path, err, errlen))
        return -1;
    if (t == TFM_ROPE_LLAMA3 &&
        (attr_put_f64(file, "rope_low_freq_factor", c->rope_low_freq_factor, path, err, errlen) ||
         attr_put_f64(file, "rope_high_freq_factor", c->rope_high_freq_factor, path, err,
                      errlen)))
        return -1;
    if ((t == TFM_ROPE_LLAMA3 || (t == TFM_ROPE_YARN && c->rope_original_max_pos > 0)) &&
        attr_put_i64(file, "rope_original_max_position_embeddings", c->rope_original_max_pos,
                     path, err, errlen))
        return -1;
    if (t != TFM_ROPE_YARN) return 0;
    const struct {
        const char *name;
        float v;
    } opt[] = {{"rope_beta_fast", c->rope_beta_fast},
               {"rope_beta_slow", c->rope_beta_slow},
               {"rope_attention_factor", c->rope_attention_factor}};
    for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++)
        if (opt[i].v != 0 && attr_put_f64(file, opt[i].name, opt[i].v, path, err, errlen))
            return -1;
    return 0;
}

static int write_config(hid_t file, const struct tfm_config *c, const char *path, char *err,
                        size_t errlen)
{
    const struct {
        const char *name;
        int64_t v;
    } ints[] = {
        {"hidden_size", c->hidden_size},
        {"num_hidden_layers", c->n_layers},
        {"num_attention_heads", c->n_heads},
        {"num_key_value_heads", c->n_kv_heads},
        {"head_dim", c->head_dim},
        {"intermediate_size", c->intermediate_size},
        {"vocab_size", c->vocab_size},
        {"max_position_embeddings", c->max_position_embeddings},
        {"tie_word_embeddings", c->tie_word_embeddings},
        {"attention_bias", c->attention_bias},
        {"libra_format_version", TFM_FORMAT_VERSION},
    };
    if (attr_put_string(file, "model_type", tfm_family_name(c->family), path, err, errlen))
        return -1;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (attr_put_i64(file, ints[i].name, ints[i].v, path, err, errlen)) return -1;
    if (attr_put_f64(file, "rms_norm_eps", c->rms_norm_eps, path, err, errlen)) return -1;
    if (attr_put_f64(file, "rope_theta", c->rope_theta, path, err, errlen)) return -1;
    return write_rope_scaling(file, c, path, err, errlen);
}

static int write_optimizer(hid_t file, const struct adamw *o, const char *path, char *err,
                           size_t errlen)
{
    hid_t g = H5I_INVALID_HID;
    int64_t n = (int64_t)o->n;
    H5TRY(g = H5Gcreate2(file, "optimizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    if (dset_put(g, "m", 1, &n, o->m, path, err, errlen)) goto fail;
    if (dset_put(g, "v", 1, &n, o->v, path, err, errlen)) goto fail;
    const struct {
        const char *name;
        float v;
    } fl[] = {
        {"lr", o->c.lr},       {"beta1", o->c.beta1},
        {"beta2", o->c.beta2}, {"eps", o->c.eps},
        {"weight_decay", o->c.weight_decay}, {"clip_norm", o->c.clip_norm},
        {"min_lr_ratio", o->c.min_lr_ratio},
    };
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++)
        if (attr_put_f64(g, fl[i].name, fl[i].v, path, err, errlen)) goto fail;
    if (attr_put_i64(g, "step", o->step, path, err, errlen)) goto fail;
    if (attr_put_i64(g, "warmup_steps", o->c.warmup_steps, path, err, errlen)) goto fail;
    if (attr_put_i64(g, "total_steps", o->c.total_steps, path, err, errlen)) goto fail;
    if (attr_put_string(g, "schedule", schedule_names[o->c.schedule], path, err, errlen))
        goto fail;
    H5CLOSE(g, H5Gclose);
    return 0;
fail:
    close_id(&g, H5Gclose);
    return -1;
}

int tfm_save(const char *final_path, const struct tfm_config *c, const struct tfm_params *p,
             const struct adamw *opt, char *err, size_t errlen)
{
    return tfm_save_tagged(final_path, c, p, opt, NULL, 0, err, errlen);
}

int tfm_save_tagged(const char *final_path, const struct tfm_config *c,
                    const struct tfm_params *p, const struct adamw *opt,
                    const struct tfm_tag *tags, int n_tags, char *err, size_t errlen)
{
    char msg[512];
    if (tfm_config_check(c, msg, sizeof msg) != 0) {
        errmsg_set(err, errlen, "%s: cannot save an invalid config: %s", final_path, msg);
        return -1;
    }
    if (c->qk_norm != (c->family == TFM_QWEN3)) {
        errmsg_set(err, errlen,
                   "%s: cannot save qk_norm = %d with model_type %s: the file format implies "
                   "qk_norm from model_type (on for qwen3 only)",
                   final_path, c->qk_norm, tfm_family_name(c->family));
        return -1;
    }
    if (!p->mem || p->n != tfm_param_count(c)) {
        errmsg_set(err, errlen, "%s: the parameters (%zu floats) do not match the config (%zu)",
                   final_path, p->n, tfm_param_count(c));
        return -1;
    }
    if (opt && (opt->n != p->n || !opt->m || !opt->v || opt->c.schedule < LR_CONSTANT ||
                opt->c.schedule > LR_COSINE)) {
        errmsg_set(err, errlen,
                   "%s: the optimizer state does not match the parameters (n = %zu, expected "
                   "%zu; schedule %d)",
                   final_path, opt->n, p->n, opt->c.schedule);
        return -1;
    }

    const char *path = final_path; /* for H5TRY messages */
    struct h5quiet q;
    h5_quiet_begin(&q);
    int nt = tfm_tensors(c, p, NULL, 0);
    struct tfm_tensor *t = xmalloc(sizeof *t * (size_t)nt);
    tfm_tensors(c, p, t, nt);
    /* Built in memory, then written atomically (libra/h5atomic.h): the hint is the raw
     * data + ~1 KiB of metadata per tensor. */
    struct h5atomic a;
    size_t hint = sizeof(float) * p->n * (opt ? 3 : 1) + 1024 * (size_t)(nt + 16);
    hid_t file = h5atomic_create(&a, path, hint, H5F_LIBVER_EARLIEST, err, errlen);
    if (file < 0) goto fail;
    if (write_config(file, c, path, err, errlen)) goto fail;
    for (int i = 0; i < n_tags; i++)
        if (tags[i].value && tags[i].value[0] &&
            attr_put_string(file, tags[i].key, tags[i].value, path, err, errlen))
            goto fail;
    for (int i = 0; i < nt; i++)
        if (dset_put(file, t[i].name, t[i].ndim, t[i].dims, t[i].data, path, err, errlen))
            goto fail;
    if (opt && write_optimizer(file, opt, path, err, errlen)) goto fail;
    if (h5atomic_commit(&a, NULL, 0, err, errlen)) goto fail;
    h5atomic_free(&a);
    free(t);
    h5_quiet_end(&q);
    return 0;
fail:
    h5atomic_free(&a);
    H5Eclear2(H5E_DEFAULT);
    free(t);
    h5_quiet_end(&q);
    return -1;
}

/* ---- reading ---- */

enum attr_kind { A_INT, A_FLOAT, A_BOOL, A_STRING };

static const char *class_name(H5T_class_t c)
{
    switch (c) {
    case H5T_INTEGER: return "an integer";
    case H5T_FLOAT: return "a float";
    case H5T_STRING: return "a string";
    case H5T_ENUM: return "an enum";
    case H5T_COMPOUND: return "a compound";
    case H5T_ARRAY: return "an array";
    case H5T_VLEN: return "a variable-length sequence";
    case H5T_BITFIELD: return "a bitfield";
    case H5T_OPAQUE: return "opaque";
    case H5T_REFERENCE: return "a reference";
    case H5T_TIME: return "a time";
    default: return "of an unknown type";
    }
}

static const char *kind_name(enum attr_kind k)
{
    switch (k) {
    case A_INT: return "an integer (int32 or int64)";
    case A_FLOAT: return "a number (float64)";
    case A_BOOL: return "an integer 0 / 1 (or a bool)";
    default: return "a string";
    }
}

/*
 * Reads one scalar attribute of obj (where: "root" or "/optimizer"): A_INT / A_BOOL
 * into *(int64_t *)out, A_FLOAT into *(double *)out, A_STRING into out (cap bytes).
 * 0, or -1 with a message naming the attribute (missing, wrong type, not a scalar).
 */
static int attr_get(hid_t obj, const char *where, const char *name, enum attr_kind kind,
                    void *out, size_t cap, const char *path, char *err, size_t errlen)
{
    hid_t attr = H5I_INVALID_HID, space = H5I_INVALID_HID, type = H5I_INVALID_HID;
    hid_t mtype = H5I_INVALID_HID;
    char *vstr = NULL;
    htri_t exists;
    H5TRY(exists = H5Aexists(obj, name));
    if (!exists) {
        errmsg_set(err, errlen, "%s: %s attribute %s is missing (expected %s)", path, where, name,
                   kind_name(kind));
        return -1;
    }
    H5TRY(attr = H5Aopen(obj, name, H5P_DEFAULT));
    H5TRY(space = H5Aget_space(attr));
    hssize_t npoints;
    H5TRY(npoints = H5Sget_simple_extent_npoints(space));
    if (npoints != 1) {
        errmsg_set(err, errlen, "%s: %s attribute %s holds %lld values, expected one", path,
                   where, name, (long long)npoints);
        goto fail;
    }
    H5TRY(type = H5Aget_type(attr));
    H5T_class_t cls = H5Tget_class(type);
    int ok = (kind == A_INT && cls == H5T_INTEGER) ||
             (kind == A_BOOL && (cls == H5T_INTEGER || cls == H5T_ENUM)) ||
             (kind == A_FLOAT && (cls == H5T_FLOAT || cls == H5T_INTEGER)) ||
             (kind == A_STRING && cls == H5T_STRING);
    if (!ok) {
        errmsg_set(err, errlen, "%s: %s attribute %s is %s, expected %s", path, where, name,
                   class_name(cls), kind_name(kind));
        goto fail;
    }
    if (kind == A_INT || (kind == A_BOOL && cls == H5T_INTEGER)) {
        H5TRY(H5Aread(attr, H5T_NATIVE_INT64, out));
    } else if (kind == A_BOOL) {
        /* h5py's numpy.bool_: an enum {FALSE = 0, TRUE = 1} over int8. Read it
         * unconverted and look its name up. */
        unsigned char raw[16] = {0};
        char ename[16];
        size_t sz = H5Tget_size(type);
        if (sz == 0 || sz > sizeof raw) {
            errmsg_set(err, errlen, "%s: %s attribute %s is an enum of %zu bytes, expected a bool",
                       path, where, name, sz);
            goto fail;
        }
        H5TRY(H5Aread(attr, type, raw));
        if (H5Tenum_nameof(type, raw, ename, sizeof ename) < 0) ename[0] = '\0';
        H5Eclear2(H5E_DEFAULT);
        if (strcmp(ename, "TRUE") == 0 || strcmp(ename, "FALSE") == 0) {
            *(int64_t *)out = ename[0] == 'T';
        } else {
            errmsg_set(err, errlen, "%s: %s attribute %s is an enum that is not a bool "
                       "(FALSE / TRUE)", path, where, name);
            goto fail;
        }
    } else if (kind == A_FLOAT) {
        H5TRY(H5Aread(attr, H5T_NATIVE_DOUBLE, out));
    } else {
        htri_t var;
        H5TRY(var = H5Tis_variable_str(type));
        H5TRY(mtype = H5Tcopy(H5T_C_S1));
        H5TRY(H5Tset_cset(mtype, H5Tget_cset(type)));
        if (var) {
            H5TRY(H5Tset_size(mtype, H5T_VARIABLE));
            H5TRY(H5Aread(attr, mtype, &vstr));
            snprintf(out, cap, "%s", vstr ? vstr : "");
        } else {
            size_t sz = H5Tget_size(type);
            char *buf = xcalloc(sz + 1, 1);
            H5TRY(H5Tset_size(mtype, sz + 1));
            H5TRY(H5Tset_strpad(mtype, H5T_STR_NULLTERM));
            herr_t rc = H5Aread(attr, mtype, buf);
            if (rc >= 0) snprintf(out, cap, "%s", buf);
            free(buf);
            H5TRY(rc);
        }
    }
    if (vstr) H5free_memory(vstr);
    close_id(&mtype, H5Tclose);
    close_id(&type, H5Tclose);
    close_id(&space, H5Sclose);
    close_id(&attr, H5Aclose);
    return 0;
fail:
    if (vstr) H5free_memory(vstr);
    close_id(&mtype, H5Tclose);
    close_id(&type, H5Tclose);
    close_id(&space, H5Sclose);
    close_id(&attr, H5Aclose);
    return -1;
}

/* An integer attribute that must fit an int. */
static int attr_get_int(hid_t obj, const char *where, const char *name, enum attr_kind kind,
                        int *out, const char *path, char *err, size_t errlen)
{
    int64_t v;
    if (attr_get(obj, where, name, kind, &v, 0, path, err, errlen)) return -1;
    if (v < INT_MIN || v > INT_MAX) {
        errmsg_set(err, errlen, "%s: %s attribute %s = %lld does not fit a C int", path, where,
                   name, (long long)v);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int attr_get_float(hid_t obj, const char *where, const char *name, float *out,
                          const char *path, char *err, size_t errlen)
{
    double v;
    if (attr_get(obj, where, name, A_FLOAT, &v, 0, path, err, errlen)) return -1;
    *out = (float)v;
    return 0;
}

/* The rope_scaling attributes (write_rope_scaling): none = plain rotary; with
 * rope_type, the fields that type requires must be there, the optional ones are 0
 * (HF's defaults) when absent. tfm_config_check judges the values afterwards. */
static int read_rope_scaling(hid_t file, struct tfm_config *c, const char *path, char *err,
                             size_t errlen)
{
    char type[64];
    htri_t has;
    H5TRY(has = H5Aexists(file, "rope_type"));
    if (!has) return 0;
    if (attr_get(file, "root", "rope_type", A_STRING, type, sizeof type, path, err, errlen))
        return -1;
    c->rope_type = tfm_rope_type_from_name(type);
    if (c->rope_type < 0) {
        errmsg_set(err, errlen,
                   "%s: root attribute rope_type = \"%s\" is not supported (default, linear, "
                   "llama3, yarn)", path, type);
        return -1;
    }
    int t = c->rope_type;
    const struct {
        const char *name;
        float *f; /* or */
        int *i;
        int required;
    } fields[] = {
        {"rope_factor", &c->rope_factor, NULL, t != TFM_ROPE_DEFAULT},
        {"rope_low_freq_factor", &c->rope_low_freq_factor, NULL, t == TFM_ROPE_LLAMA3},
        {"rope_high_freq_factor", &c->rope_high_freq_factor, NULL, t == TFM_ROPE_LLAMA3},
        {"rope_original_max_position_embeddings", NULL, &c->rope_original_max_pos,
         t == TFM_ROPE_LLAMA3},
        {"rope_beta_fast", &c->rope_beta_fast, NULL, 0},
        {"rope_beta_slow", &c->rope_beta_slow, NULL, 0},
        {"rope_attention_factor", &c->rope_attention_factor, NULL, 0},
    };
    for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
        H5TRY(has = H5Aexists(file, fields[k].name));
        if (!has && !fields[k].required) continue;
        if (!has) {
            errmsg_set(err, errlen, "%s: root attribute %s is missing (rope_type %s needs it)",
                       path, fields[k].name, type);
            return -1;
        }
        if (fields[k].f ? attr_get_float(file, "root", fields[k].name, fields[k].f, path, err,
                                         errlen)
                        : attr_get_int(file, "root", fields[k].name, A_INT, fields[k].i, path,
                                       err, errlen))
            return -1;
    }
    return 0;
fail:
    return -1;
}

static int read_config(hid_t file, struct tfm_config *c, const char *path, char *err,
                       size_t errlen)
{
    int64_t version;
    char type[64];
    htri_t has;
    H5TRY(has = H5Aexists(file, "libra_format_version"));
    if (!has) {
        errmsg_set(err, errlen,
                   "%s: root attribute libra_format_version is missing: not a libra model file "
                   "(write one with tfm_save or a converter that sets it to %d)",
                   path, TFM_FORMAT_VERSION);
        return -1;
    }
    if (attr_get(file, "root", "libra_format_version", A_INT, &version, 0, path, err, errlen))
        return -1;
    if (version != TFM_FORMAT_VERSION) {
        errmsg_set(err, errlen,
                   "%s: libra_format_version = %lld, this build reads version %d only%s", path,
                   (long long)version, TFM_FORMAT_VERSION,
                   version > TFM_FORMAT_VERSION ? " (written by a newer libra?)" : "");
        return -1;
    }
    if (attr_get(file, "root", "model_type", A_STRING, type, sizeof type, path, err, errlen))
        return -1;
    c->family = tfm_family_from_name(type);
    if (c->family < 0) {
        errmsg_set(err, errlen, "%s: model_type \"%s\" is not supported (llama, qwen2, qwen3)",
                   path, type);
        return -1;
    }
    const struct {
        const char *name;
        int *dst;
        enum attr_kind kind;
    } ints[] = {
        {"hidden_size", &c->hidden_size, A_INT},
        {"num_hidden_layers", &c->n_layers, A_INT},
        {"num_attention_heads", &c->n_heads, A_INT},
        {"num_key_value_heads", &c->n_kv_heads, A_INT},
        {"head_dim", &c->head_dim, A_INT},
        {"intermediate_size", &c->intermediate_size, A_INT},
        {"vocab_size", &c->vocab_size, A_INT},
        {"max_position_embeddings", &c->max_position_embeddings, A_INT},
        {"tie_word_embeddings", &c->tie_word_embeddings, A_BOOL},
        {"attention_bias", &c->attention_bias, A_BOOL},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (attr_get_int(file, "root", ints[i].name, ints[i].kind, ints[i].dst, path, err,
                         errlen))
            return -1;
    if (attr_get_float(file, "root", "rms_norm_eps", &c->rms_norm_eps, path, err, errlen))
        return -1;
    if (attr_get_float(file, "root", "rope_theta", &c->rope_theta, path, err, errlen)) return -1;
    if (read_rope_scaling(file, c, path, err, errlen)) return -1;
    c->qk_norm = c->family == TFM_QWEN3;
    char msg[512];
    if (tfm_config_check(c, msg, sizeof msg) != 0) {
        errmsg_set(err, errlen, "%s: the model config in the file is invalid: %s", path, msg);
        return -1;
    }
    return 0;
fail:
    return -1;
}

/* The parameter count the config implies, in double (no overflow for any ints). */
static double param_count_f64(const struct tfm_config *c)
{
    double V = c->vocab_size, C = c->hidden_size, L = c->n_layers, D = c->head_dim;
    double HD = (double)c->n_heads * D, KD = (double)c->n_kv_heads * D, F = c->intermediate_size;
    double layer = 2 * C + 2 * HD * C + 2 * KD * C + 3 * F * C;
    if (c->attention_bias) layer += HD + 2 * KD;
    if (c->qk_norm) layer += 2 * D;
    return V * C * (c->tie_word_embeddings ? 1 : 2) + L * layer + C;
}

/* Reads a float dataset of the expected shape into data; a mismatch names both shapes
 * (rule: the config fields behind each dimension, NULL for the optimizer moments). */
static int dset_get(hid_t loc, const char *name, const char *shown, int ndim,
                    const int64_t *dims, float *data, const struct tfm_config *c,
                    const char *path, char *err, size_t errlen)
{
    hid_t dset = H5I_INVALID_HID, space = H5I_INVALID_HID, type = H5I_INVALID_HID;
    H5TRY(dset = H5Dopen2(loc, name, H5P_DEFAULT));
    H5TRY(type = H5Dget_type(dset));
    H5T_class_t cls = H5Tget_class(type);
    if (cls != H5T_FLOAT) {
        errmsg_set(err, errlen, "%s: %s is %s dataset, expected float32", path, shown,
                   class_name(cls));
        goto fail;
    }
    H5TRY(space = H5Dget_space(dset));
    int fnd;
    H5TRY(fnd = H5Sget_simple_extent_ndims(space));
    hsize_t fd[H5S_MAX_RANK], want[2] = {(hsize_t)dims[0], ndim > 1 ? (hsize_t)dims[1] : 0};
    H5TRY(H5Sget_simple_extent_dims(space, fd, NULL));
    int same = fnd == ndim, mask = 0;
    const struct shape_rule *rule = NULL;
    if (c)
        for (size_t i = 0; i < sizeof shape_rules / sizeof shape_rules[0]; i++)
            if (ends_with(name, shape_rules[i].suffix)) rule = &shape_rules[i];
    for (int i = 0; i < ndim; i++) {
        int differs = i >= fnd || fd[i] != want[i];
        same &= !differs;
        if (rule && (differs || fnd != ndim)) mask |= rule->dim[i];
    }
    if (!same) {
        char fs[96], ws[64], why[160];
        format_shape(fs, sizeof fs, fnd, fd);
        format_shape(ws, sizeof ws, ndim, want);
        if (rule)
            describe_fields(why, sizeof why, mask, c);
        else
            snprintf(why, sizeof why, "(the parameter count)");
        errmsg_set(err, errlen, "%s: %s: shape %s in the file, %s expected from the config %s",
                   path, shown, fs, ws, why);
        goto fail;
    }
    H5TRY(H5Dread(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
    size_t n = (size_t)want[0] * (ndim > 1 ? (size_t)want[1] : 1);
    int checked;
    if (h5sum_check(dset, data, n * sizeof *data, &checked, path, err, errlen)) goto fail;
    int64_t bad = h5sum_first_nonfinite(data, n);
    if (bad >= 0) {
        errmsg_set(err, errlen, "%s: %s holds %s at element %lld: the weights are not usable",
                   path, shown, isnan(data[bad]) ? "NaN" : "an infinity", (long long)bad);
        goto fail;
    }
    close_id(&space, H5Sclose);
    close_id(&type, H5Tclose);
    close_id(&dset, H5Dclose);
    return 0;
fail:
    close_id(&space, H5Sclose);
    close_id(&type, H5Tclose);
    close_id(&dset, H5Dclose);
    return -1;
}

/*
 * The root's links must be exactly the expected tensors plus an optional group
 * "optimizer": lists what is missing and what is unexpected in one message.
 * *has_opt says whether the optimizer group is there.
 */
static int check_members(hid_t file, const struct tfm_config *c, const struct tfm_tensor *t,
                         int nt, int *has_opt, const char *path, char *err, size_t errlen)
{
    hid_t obj = H5I_INVALID_HID;
    char *seen = xcalloc((size_t)nt, 1);
    char name[256];
    int n_unexpected = 0, n_missing = 0;
    H5G_info_t info;
    *has_opt = 0;
    H5TRY(H5Gget_info(file, &info));
    char unexpected[512] = "";
    for (hsize_t i = 0; i < info.nlinks; i++) {
        ssize_t len;
        H5TRY(len = H5Lget_name_by_idx(file, ".", H5_INDEX_NAME, H5_ITER_INC, i, name,
                                       sizeof name, H5P_DEFAULT));
        int known = 0;
        if ((size_t)len < sizeof name) {
            for (int k = 0; k < nt && !known; k++)
                if (!seen[k] && strcmp(name, t[k].name) == 0) known = seen[k] = 1;
            if (!known && strcmp(name, "optimizer") == 0) {
                H5TRY(obj = H5Oopen(file, name, H5P_DEFAULT));
                known = *has_opt = H5Iget_type(obj) == H5I_GROUP;
                close_id(&obj, H5Oclose);
            }
        }
        if (!known) {
            size_t used = strlen(unexpected);
            if (used + 1 < sizeof unexpected)
                snprintf(unexpected + used, sizeof unexpected - used, "%s%s",
                         n_unexpected ? ", " : "", name);
            n_unexpected++;
        }
    }
    for (int k = 0; k < nt; k++) n_missing += !seen[k];
    if (n_missing || n_unexpected) {
        errmsg_set(err, errlen,
                   "%s: the datasets do not match the config (model_type %s, num_hidden_layers "
                   "%d, attention_bias %d, tie_word_embeddings %d)",
                   path, tfm_family_name(c->family), c->n_layers, c->attention_bias,
                   c->tie_word_embeddings);
        if (n_missing) {
            errmsg_add(err, errlen, "; %d missing:", n_missing);
            int shown = 0;
            for (int k = 0; k < nt && shown < 8; k++)
                if (!seen[k]) errmsg_add(err, errlen, "%s %s", shown++ ? "," : "", t[k].name);
            if (n_missing > shown) errmsg_add(err, errlen, ", ...");
        }
        if (n_unexpected)
            errmsg_add(err, errlen, "; %d not expected: %s", n_unexpected, unexpected);
        goto fail;
    }
    free(seen);
    return 0;
fail:
    close_id(&obj, H5Oclose);
    free(seen);
    return -1;
}

static int read_optimizer(hid_t file, struct adamw *o, size_t n, const char *path, char *err,
                          size_t errlen)
{
    hid_t g = H5I_INVALID_HID;
    const char *where = "/optimizer";
    char sched[32];
    H5TRY(g = H5Gopen2(file, "optimizer", H5P_DEFAULT));
    const struct {
        const char *name;
        float *dst;
    } fl[] = {
        {"lr", &o->c.lr},       {"beta1", &o->c.beta1},
        {"beta2", &o->c.beta2}, {"eps", &o->c.eps},
        {"weight_decay", &o->c.weight_decay}, {"clip_norm", &o->c.clip_norm},
        {"min_lr_ratio", &o->c.min_lr_ratio},
    };
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++)
        if (attr_get_float(g, where, fl[i].name, fl[i].dst, path, err, errlen)) goto fail;
    if (attr_get(g, where, "step", A_INT, &o->step, 0, path, err, errlen)) goto fail;
    if (attr_get(g, where, "warmup_steps", A_INT, &o->c.warmup_steps, 0, path, err, errlen))
        goto fail;
    if (attr_get(g, where, "total_steps", A_INT, &o->c.total_steps, 0, path, err, errlen))
        goto fail;
    if (attr_get(g, where, "schedule", A_STRING, sched, sizeof sched, path, err, errlen))
        goto fail;
    o->c.schedule = -1;
    for (int i = 0; i < 2; i++)
        if (strcmp(sched, schedule_names[i]) == 0) o->c.schedule = i;
    if (o->c.schedule < 0) {
        errmsg_set(err, errlen, "%s: /optimizer attribute schedule = \"%s\" is not constant or "
                   "cosine", path, sched);
        goto fail;
    }
    if (o->step < 0) {
        errmsg_set(err, errlen, "%s: /optimizer attribute step = %lld is negative", path,
                   (long long)o->step);
        goto fail;
    }
    /* One allocation, m then v (include/libra/adamw.h); adamw_free releases it. */
    o->n = n;
    o->m = xmalloc(sizeof(float) * 2 * (n ? n : 1));
    o->v = o->m + n;
    int64_t dims[1] = {(int64_t)n};
    if (dset_get(g, "m", "optimizer/m", 1, dims, o->m, NULL, path, err, errlen)) goto fail;
    if (dset_get(g, "v", "optimizer/v", 1, dims, o->v, NULL, path, err, errlen)) goto fail;
    H5CLOSE(g, H5Gclose);
    return 0;
fail:
    close_id(&g, H5Gclose);
    return -1;
}

int tfm_load(const char *path, struct tfm_config *c, struct tfm_params *p, struct adamw *opt,
             char *err, size_t errlen)
{
    struct h5quiet q;
    struct tfm_config cfg;
    struct tfm_tensor *t = NULL;
    hid_t file = H5I_INVALID_HID;
    memset(&cfg, 0, sizeof cfg);
    memset(p, 0, sizeof *p);
    if (opt) memset(opt, 0, sizeof *opt);
    h5_quiet_begin(&q);

    struct stat st;
    if (stat(path, &st) != 0) {
        errmsg_set(err, errlen, "%s: cannot read the model file: %s", path, strerror(errno));
        goto fail;
    }
    htri_t is_h5 = H5Fis_hdf5(path);
    if (is_h5 <= 0) {
        H5Eclear2(H5E_DEFAULT);
        errmsg_set(err, errlen, "%s: not an HDF5 file (%lld bytes; no HDF5 signature)", path,
                   (long long)st.st_size);
        goto fail;
    }
    H5TRY(file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT));
    if (read_config(file, &cfg, path, err, errlen)) goto fail;

    /* At least 2 bytes (float16) per parameter must be in the file before we allocate. */
    double need = param_count_f64(&cfg);
    if (need > (double)SIZE_MAX / 8 || need * 2 > (double)st.st_size) {
        errmsg_set(err, errlen,
                   "%s: the config (vocab_size %d, hidden_size %d, num_hidden_layers %d, "
                   "intermediate_size %d) implies %.4g parameters but the file is only %lld "
                   "bytes: truncated, or the attributes do not describe the data",
                   path, cfg.vocab_size, cfg.hidden_size, cfg.n_layers, cfg.intermediate_size,
                   need, (long long)st.st_size);
        goto fail;
    }
    tfm_params_alloc(p, &cfg);
    int nt = tfm_tensors(&cfg, p, NULL, 0);
    t = xmalloc(sizeof *t * (size_t)nt);
    tfm_tensors(&cfg, p, t, nt);
    int has_opt;
    if (check_members(file, &cfg, t, nt, &has_opt, path, err, errlen)) goto fail;
    for (int i = 0; i < nt; i++)
        if (dset_get(file, t[i].name, t[i].name, t[i].ndim, t[i].dims, t[i].data, &cfg, path,
                     err, errlen))
            goto fail;
    if (opt && has_opt && read_optimizer(file, opt, p->n, path, err, errlen)) goto fail;
    H5CLOSE(file, H5Fclose);
    free(t);
    *c = cfg;
    h5_quiet_end(&q);
    return 0;
fail:
    close_id(&file, H5Fclose);
    H5Eclear2(H5E_DEFAULT);
    free(t);
    tfm_params_free(p);
    memset(p, 0, sizeof *p);
    if (opt) {
        free(opt->m);
        memset(opt, 0, sizeof *opt);
    }
    memset(c, 0, sizeof *c);
    h5_quiet_end(&q);
    return -1;
}

int tfm_read_tag(const char *path, const char *key, char *out, size_t cap, char *err,
                 size_t errlen)
{
    struct h5quiet q;
    hid_t file = H5I_INVALID_HID;
    int rc = -1;
    h5_quiet_begin(&q);
    out[0] = '\0';
    if (H5Fis_hdf5(path) <= 0) {
        errmsg_set(err, errlen, "%s: not an HDF5 file", path);
        goto fail;
    }
    H5TRY(file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT));
    htri_t has;
    H5TRY(has = H5Aexists(file, key));
    rc = 0;
    if (has) {
        if (attr_get(file, "root", key, A_STRING, out, cap, path, err, errlen)) goto fail;
        rc = 1;
    }
    H5CLOSE(file, H5Fclose);
    h5_quiet_end(&q);
    return rc;
fail:
    close_id(&file, H5Fclose);
    H5Eclear2(H5E_DEFAULT);
    h5_quiet_end(&q);
    return -1;
}
