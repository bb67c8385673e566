/*
 * Tests of the HDF5 model files: bitwise save/load round trips (llama / qwen2 / qwen3,
 * tied and untied, with and without optimizer state, rope_scaling), the file's layout as another
 * reader sees it, a converter-style file (int32 attributes, h5py bools, float64 data),
 * and every failure path: shape mismatch, missing / unexpected datasets, missing and
 * mistyped attributes, garbage / empty / truncated / missing files, invalid saves, and
 * atomic replacement (a failed save leaves the old file intact and no temporary).
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/h5sum.h"
#include "libra/rng.h"
#include "libra/tfm_io.h"
#include "testutil.h"

#include <dirent.h>
#include <hdf5.h>
#include <math.h>
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
    const char *dir = test_scratch_dir("tfm_io");
    CU_ASSERT_FATAL(dir != NULL);
    char *out = buf[next++ % 4];
    snprintf(out, sizeof buf[0], "%s/%s", dir, name);
    return out;
}

static struct tfm_config tiny(int family, int tied)
{
    struct tfm_config c = {
        .family = family,
        .vocab_size = 37,
        .hidden_size = 16,
        .n_layers = 2,
        .n_heads = 4,
        .n_kv_heads = 2,
        .head_dim = 4,
        .intermediate_size = 24,
        .max_position_embeddings = 64,
        .rms_norm_eps = 1e-6f,
        .rope_theta = 10000.0f,
        .tie_word_embeddings = tied,
        .attention_bias = family == TFM_QWEN2,
        .qk_norm = family == TFM_QWEN3,
    };
    if (family != TFM_LLAMA) {
        c.head_dim = 8; /* H*D = 32 != C: o_proj is not square */
        c.n_kv_heads = 1;
        c.rope_theta = 1000000.0f;
        c.rms_norm_eps = 1e-5f;
    }
    return c;
}

/* Every float distinct and random (norms and biases too), so a swapped or shifted
 * tensor cannot go unnoticed. */
static void fill_params(struct tfm_params *p, const struct tfm_config *c, uint64_t seed)
{
    tfm_params_alloc(p, c);
    struct rng r;
    rng_init(&r, seed, 1, 2, 3);
    for (size_t i = 0; i < p->n; i++) p->mem[i] = (float)rng_normal(&r);
}

static void fill_opt(struct adamw *o, size_t n, uint64_t seed)
{
    memset(o, 0, sizeof *o);
    o->c = (struct adamw_config){.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                 .weight_decay = 0.1f, .clip_norm = 1.0f,
                                 .schedule = LR_COSINE, .warmup_steps = 10,
                                 .total_steps = 1000, .min_lr_ratio = 0.1f};
    o->n = n;
    o->m = malloc(sizeof(float) * 2 * n);
    o->v = o->m + n;
    o->step = 123;
    struct rng r;
    rng_init(&r, seed, 4, 5, 6);
    for (size_t i = 0; i < 2 * n; i++) o->m[i] = (float)rng_uniform(&r);
}

static int config_equal(const struct tfm_config *a, const struct tfm_config *b)
{
    return a->family == b->family && a->vocab_size == b->vocab_size &&
           a->hidden_size == b->hidden_size && a->n_layers == b->n_layers &&
           a->n_heads == b->n_heads && a->n_kv_heads == b->n_kv_heads &&
           a->head_dim == b->head_dim && a->intermediate_size == b->intermediate_size &&
           a->max_position_embeddings == b->max_position_embeddings &&
           a->rms_norm_eps == b->rms_norm_eps && a->rope_theta == b->rope_theta &&
           a->tie_word_embeddings == b->tie_word_embeddings &&
           a->attention_bias == b->attention_bias && a->qk_norm == b->qk_norm &&
           a->rope_type == b->rope_type && a->rope_factor == b->rope_factor &&
           a->rope_low_freq_factor == b->rope_low_freq_factor &&
           a->rope_high_freq_factor == b->rope_high_freq_factor &&
           a->rope_original_max_pos == b->rope_original_max_pos &&
           a->rope_beta_fast == b->rope_beta_fast && a->rope_beta_slow == b->rope_beta_slow &&
           a->rope_attention_factor == b->rope_attention_factor;
}

static int is_zero(const void *x, size_t n)
{
    const unsigned char *b = x;
    for (size_t i = 0; i < n; i++)
        if (b[i]) return 0;
    return 1;
}

/* Loads path expecting failure with want in the message; checks nothing is left. */
static void expect_load_fails(const char *path, const char *want)
{
    struct tfm_config c;
    struct tfm_params p;
    struct adamw o;
    memset(&c, 0x5a, sizeof c);
    memset(&p, 0x5a, sizeof p);
    memset(&o, 0x5a, sizeof o);
    err[0] = '\0';
    CU_ASSERT_EQUAL(tfm_load(path, &c, &p, &o, err, sizeof err), -1);
    CU_ASSERT(is_zero(&p, sizeof p));
    CU_ASSERT(is_zero(&o, sizeof o));
    CU_ASSERT(is_zero(&c, sizeof c));
    CU_ASSERT(strstr(err, path) != NULL);
    if (!want || !strstr(err, want)) {
        CU_ASSERT(want == NULL);
        fprintf(stderr, "\n  expected \"%s\" in: %s\n", want ? want : "", err);
    }
}

static int count_tmp_files(void)
{
    DIR *d = opendir(test_scratch_dir("tfm_io"));
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, ".tmp-") != NULL;
    closedir(d);
    return n;
}

static void round_trip(int family, int tied, int with_opt)
{
    struct tfm_config c = tiny(family, tied), c2;
    struct tfm_params p, p2;
    struct adamw o, o2;
    fill_params(&p, &c, (uint64_t)(family * 4 + tied * 2 + with_opt));
    if (with_opt) fill_opt(&o, p.n, 9);
    char name[64];
    snprintf(name, sizeof name, "rt-%d-%d-%d.h5", family, tied, with_opt);
    const char *path = scratch(name);
    int rc = tfm_save(path, &c, &p, with_opt ? &o : NULL, err, sizeof err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    if (rc) fprintf(stderr, "%s\n", err);

    CU_ASSERT_EQUAL_FATAL(tfm_load(path, &c2, &p2, &o2, err, sizeof err), 0);
    CU_ASSERT(config_equal(&c, &c2));
    CU_ASSERT_EQUAL_FATAL(p2.n, p.n);
    CU_ASSERT(memcmp(p.mem, p2.mem, sizeof(float) * p.n) == 0);
    CU_ASSERT((p2.lm_head == p2.embed) == (tied != 0));
    CU_ASSERT((p2.bq != NULL) == (family == TFM_QWEN2));
    CU_ASSERT((p2.q_norm != NULL) == (family == TFM_QWEN3));
    if (with_opt) {
        CU_ASSERT_EQUAL_FATAL(o2.n, p.n);
        CU_ASSERT(o2.v == o2.m + o2.n);
        CU_ASSERT(memcmp(o.m, o2.m, sizeof(float) * 2 * o.n) == 0);
        CU_ASSERT(memcmp(&o.c, &o2.c, sizeof o.c) == 0);
        CU_ASSERT_EQUAL(o2.step, 123);
        free(o2.m);
    } else {
        CU_ASSERT(is_zero(&o2, sizeof o2)); /* no group: opt stays empty */
    }
    tfm_params_free(&p2);
    /* opt = NULL is fine either way. */
    CU_ASSERT_EQUAL(tfm_load(path, &c2, &p2, NULL, err, sizeof err), 0);
    CU_ASSERT(memcmp(p.mem, p2.mem, sizeof(float) * p.n) == 0);
    tfm_params_free(&p2);
    tfm_params_free(&p);
    if (with_opt) free(o.m);
}

static void test_round_trip(void)
{
    for (int family = TFM_LLAMA; family <= TFM_QWEN3; family++)
        for (int tied = 0; tied <= 1; tied++)
            for (int with_opt = 0; with_opt <= 1; with_opt++) round_trip(family, tied, with_opt);
    CU_ASSERT_EQUAL(count_tmp_files(), 0);
}

/* ---- direct HDF5 helpers (another reader's view; editing files) ---- */

static hid_t open_rw(const char *path)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    return f;
}

static void put_attr(hid_t obj, const char *name, hid_t type, const void *v)
{
    if (H5Aexists(obj, name) > 0) CU_ASSERT_FATAL(H5Adelete(obj, name) >= 0);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, type, s, H5P_DEFAULT, H5P_DEFAULT);
    CU_ASSERT_FATAL(a >= 0);
    CU_ASSERT(H5Awrite(a, type, v) >= 0);
    H5Aclose(a);
    H5Sclose(s);
}

static void put_str_attr(hid_t obj, const char *name, const char *v)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(v) + 1);
    put_attr(obj, name, t, v);
    H5Tclose(t);
}

static void put_i64_attr(hid_t obj, const char *name, int64_t v)
{
    put_attr(obj, name, H5T_NATIVE_INT64, &v);
}

static void put_dset(hid_t loc, const char *name, hid_t type, int ndim, const hsize_t *dims,
                     const void *data)
{
    hid_t s = H5Screate_simple(ndim, dims, NULL);
    hid_t d = H5Dcreate2(loc, name, type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CU_ASSERT_FATAL(d >= 0);
    CU_ASSERT(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
    H5Dclose(d);
    H5Sclose(s);
}

static const char *save_tiny(const char *name, int family, int tied, int with_opt)
{
    struct tfm_config c = tiny(family, tied);
    struct tfm_params p;
    struct adamw o;
    fill_params(&p, &c, 77);
    if (with_opt) fill_opt(&o, p.n, 78);
    const char *path = scratch(name);
    CU_ASSERT_EQUAL_FATAL(tfm_save(path, &c, &p, with_opt ? &o : NULL, err, sizeof err), 0);
    tfm_params_free(&p);
    if (with_opt) free(o.m);
    return path;
}

static void test_layout(void)
{
    struct tfm_config c = tiny(TFM_QWEN2, 0);
    struct tfm_params p;
    fill_params(&p, &c, 5);
    const char *path = scratch("layout.h5");
    CU_ASSERT_EQUAL_FATAL(tfm_save(path, &c, &p, NULL, err, sizeof err), 0);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    /* Layer 1's k_proj: (K*D, C), float32 LE, the slice of the stacked array. */
    hid_t d = H5Dopen2(f, "model.layers.1.self_attn.k_proj.weight", H5P_DEFAULT);
    CU_ASSERT_FATAL(d >= 0);
    hid_t t = H5Dget_type(d), s = H5Dget_space(d);
    CU_ASSERT(H5Tequal(t, H5T_IEEE_F32LE) > 0);
    hsize_t dims[2];
    CU_ASSERT_EQUAL(H5Sget_simple_extent_ndims(s), 2);
    H5Sget_simple_extent_dims(s, dims, NULL);
    size_t kd = (size_t)c.n_kv_heads * c.head_dim, C = (size_t)c.hidden_size;
    CU_ASSERT(dims[0] == kd && dims[1] == C);
    float *buf = malloc(sizeof(float) * kd * C);
    CU_ASSERT(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
    CU_ASSERT(memcmp(buf, p.wk + kd * C, sizeof(float) * kd * C) == 0);
    free(buf);
    H5Tclose(t);
    H5Sclose(s);
    H5Dclose(d);
    /* The o_proj is (C, H*D); the q bias is 1-D. */
    d = H5Dopen2(f, "model.layers.0.self_attn.o_proj.weight", H5P_DEFAULT);
    s = H5Dget_space(d);
    H5Sget_simple_extent_dims(s, dims, NULL);
    CU_ASSERT(dims[0] == C && dims[1] == (hsize_t)(c.n_heads * c.head_dim));
    H5Sclose(s);
    H5Dclose(d);
    d = H5Dopen2(f, "model.layers.0.self_attn.q_proj.bias", H5P_DEFAULT);
    s = H5Dget_space(d);
    CU_ASSERT_EQUAL(H5Sget_simple_extent_ndims(s), 1);
    H5Sclose(s);
    H5Dclose(d);
    /* Attributes: the string, int64 ints, the decimal value of the float. */
    hid_t a = H5Aopen(f, "model_type", H5P_DEFAULT);
    t = H5Aget_type(a);
    CU_ASSERT(H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) > 0);
    char *mt = NULL;
    CU_ASSERT(H5Aread(a, t, &mt) >= 0);
    CU_ASSERT_STRING_EQUAL(mt, "qwen2");
    H5free_memory(mt);
    H5Tclose(t);
    H5Aclose(a);
    a = H5Aopen(f, "hidden_size", H5P_DEFAULT);
    t = H5Aget_type(a);
    CU_ASSERT(H5Tequal(t, H5T_STD_I64LE) > 0);
    H5Tclose(t);
    H5Aclose(a);
    a = H5Aopen(f, "rms_norm_eps", H5P_DEFAULT);
    t = H5Aget_type(a);
    CU_ASSERT(H5Tequal(t, H5T_IEEE_F64LE) > 0);
    double eps = 0;
    H5Aread(a, H5T_NATIVE_DOUBLE, &eps);
    CU_ASSERT_EQUAL(eps, 1e-5); /* not 9.99999974737875e-06 */
    H5Tclose(t);
    H5Aclose(a);
    int64_t version = 0;
    a = H5Aopen(f, "libra_format_version", H5P_DEFAULT);
    H5Aread(a, H5T_NATIVE_INT64, &version);
    CU_ASSERT_EQUAL(version, TFM_FORMAT_VERSION);
    H5Aclose(a);
    CU_ASSERT_EQUAL(H5Aexists(f, "qk_norm"), 0);
    CU_ASSERT(H5Fclose(f) >= 0);
    tfm_params_free(&p);
}

/* rope_scaling: saved as rope_* root attributes only when not default, read back
 * exactly (llama3, linear, yarn with and without its optional fields); files without
 * them are plain rotary; bad or missing ones are named. */
static void set_llama3(struct tfm_config *c)
{
    c->rope_type = TFM_ROPE_LLAMA3;
    c->rope_factor = 8;
    c->rope_low_freq_factor = 1;
    c->rope_high_freq_factor = 4;
    c->rope_original_max_pos = 8192;
}

static double f64_attr(hid_t f, const char *name)
{
    double v = -1;
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    CU_ASSERT_FATAL(a >= 0);
    hid_t t = H5Aget_type(a);
    CU_ASSERT(H5Tget_class(t) == H5T_FLOAT || H5Tget_class(t) == H5T_INTEGER);
    H5Aread(a, H5T_NATIVE_DOUBLE, &v);
    H5Tclose(t);
    H5Aclose(a);
    return v;
}

static void test_rope_scaling(void)
{
    struct tfm_config cs[4];
    for (int i = 0; i < 4; i++) cs[i] = tiny(i == 3 ? TFM_QWEN3 : TFM_LLAMA, i % 2);
    set_llama3(&cs[0]);
    cs[1].rope_type = TFM_ROPE_LINEAR;
    cs[1].rope_factor = 2.5f;
    cs[2].rope_type = TFM_ROPE_YARN; /* HF's defaults for everything optional */
    cs[2].rope_factor = 4;
    cs[3].rope_type = TFM_ROPE_YARN;
    cs[3].rope_factor = 4;
    cs[3].rope_original_max_pos = 32;
    cs[3].rope_beta_fast = 16;
    cs[3].rope_beta_slow = 2;
    cs[3].rope_attention_factor = 1.1f;
    for (int i = 0; i < 4; i++) {
        struct tfm_config c2;
        struct tfm_params p, p2;
        fill_params(&p, &cs[i], 40 + (uint64_t)i);
        char name[32];
        snprintf(name, sizeof name, "rope-%d.h5", i);
        const char *path = scratch(name);
        CU_ASSERT_EQUAL_FATAL(tfm_save(path, &cs[i], &p, NULL, err, sizeof err), 0);
        CU_ASSERT_EQUAL_FATAL(tfm_load(path, &c2, &p2, NULL, err, sizeof err), 0);
        CU_ASSERT(config_equal(&cs[i], &c2));
        CU_ASSERT(memcmp(p.mem, p2.mem, sizeof(float) * p.n) == 0);
        hid_t f = open_rw(path);
        CU_ASSERT_EQUAL(H5Aexists(f, "rope_original_max_position_embeddings") > 0,
                        cs[i].rope_original_max_pos > 0);
        CU_ASSERT_EQUAL(H5Aexists(f, "rope_beta_fast") > 0, i == 3);
        CU_ASSERT_EQUAL(H5Aexists(f, "rope_low_freq_factor") > 0, i == 0);
        if (i == 0) {
            CU_ASSERT_EQUAL(f64_attr(f, "rope_factor"), 8.0);
            CU_ASSERT_EQUAL(f64_attr(f, "rope_original_max_position_embeddings"), 8192.0);
        }
        if (i == 3) CU_ASSERT_EQUAL(f64_attr(f, "rope_attention_factor"), 1.1); /* decimal */
        H5Fclose(f);
        tfm_params_free(&p2);
        tfm_params_free(&p);
    }

    /* plain rotary writes no rope attribute at all */
    const char *path = save_tiny("rope-plain.h5", TFM_QWEN2, 0, 0);
    hid_t f = open_rw(path);
    CU_ASSERT_EQUAL(H5Aexists(f, "rope_type"), 0);
    CU_ASSERT_EQUAL(H5Aexists(f, "rope_factor"), 0);
    /* an explicit "default" is plain rotary too */
    put_str_attr(f, "rope_type", "default");
    H5Fclose(f);
    struct tfm_config c2;
    struct tfm_params p2;
    CU_ASSERT_EQUAL_FATAL(tfm_load(path, &c2, &p2, NULL, err, sizeof err), 0);
    CU_ASSERT_EQUAL(c2.rope_type, TFM_ROPE_DEFAULT);
    tfm_params_free(&p2);

    f = open_rw(path);
    put_str_attr(f, "rope_type", "dynamic");
    H5Fclose(f);
    expect_load_fails(path, "root attribute rope_type = \"dynamic\" is not supported");

    /* llama3 from a converter: int32 original, missing low_freq_factor */
    f = open_rw(path);
    put_str_attr(f, "rope_type", "llama3");
    double d = 8;
    put_attr(f, "rope_factor", H5T_NATIVE_DOUBLE, &d);
    d = 4;
    put_attr(f, "rope_high_freq_factor", H5T_NATIVE_DOUBLE, &d);
    int32_t orig = 8192;
    put_attr(f, "rope_original_max_position_embeddings", H5T_NATIVE_INT32, &orig);
    H5Fclose(f);
    expect_load_fails(path, "root attribute rope_low_freq_factor is missing (rope_type llama3 "
                            "needs it)");
    f = open_rw(path);
    d = 1;
    put_attr(f, "rope_low_freq_factor", H5T_NATIVE_DOUBLE, &d);
    H5Fclose(f);
    CU_ASSERT_EQUAL_FATAL(tfm_load(path, &c2, &p2, NULL, err, sizeof err), 0);
    CU_ASSERT(c2.rope_type == TFM_ROPE_LLAMA3 && c2.rope_original_max_pos == 8192 &&
              c2.rope_low_freq_factor == 1 && c2.rope_high_freq_factor == 4);
    tfm_params_free(&p2);
    f = open_rw(path);
    d = 0.5;
    put_attr(f, "rope_factor", H5T_NATIVE_DOUBLE, &d);
    H5Fclose(f);
    expect_load_fails(path, "the model config in the file is invalid: rope_scaling factor = 0.5 "
                            "(rope_type llama3) must be >= 1");
    f = open_rw(path);
    put_str_attr(f, "rope_original_max_position_embeddings", "8192");
    H5Fclose(f);
    expect_load_fails(path, "root attribute rope_original_max_position_embeddings is a string");

    /* an invalid rope config is refused before touching the disk */
    struct tfm_config bad = tiny(TFM_LLAMA, 0);
    set_llama3(&bad);
    bad.rope_high_freq_factor = 0.5f;
    struct tfm_params p;
    fill_params(&p, &bad, 3);
    path = scratch("rope-bad.h5");
    CU_ASSERT_EQUAL(tfm_save(path, &bad, &p, NULL, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "low_freq_factor = 1 must be < high_freq_factor = 0.5") != NULL);
    struct stat st;
    CU_ASSERT(stat(path, &st) != 0);
    tfm_params_free(&p);
}

/* A file written the way a Python converter would: int32 ints, h5py bools (enum),
 * a fixed-length model_type, integer rope_theta, float64 tensors. */
static void test_converter_style_file(void)
{
    struct tfm_config c = tiny(TFM_QWEN3, 1);
    struct tfm_params p;
    fill_params(&p, &c, 11);
    const char *path = scratch("converter.h5");
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    put_str_attr(f, "model_type", "qwen3");
    const struct {
        const char *name;
        int32_t v;
    } ints[] = {
        {"hidden_size", c.hidden_size},         {"num_hidden_layers", c.n_layers},
        {"num_attention_heads", c.n_heads},     {"num_key_value_heads", c.n_kv_heads},
        {"head_dim", c.head_dim},               {"intermediate_size", c.intermediate_size},
        {"vocab_size", c.vocab_size},           {"max_position_embeddings", 64},
        {"libra_format_version", 1},            {"rope_theta", 1000000},
        {"bos_token_id", 1}, /* extra config.json keys are ignored */
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        put_attr(f, ints[i].name, H5T_NATIVE_INT32, &ints[i].v);
    double eps = 1e-5;
    put_attr(f, "rms_norm_eps", H5T_NATIVE_DOUBLE, &eps);
    hid_t b = H5Tenum_create(H5T_NATIVE_INT8);
    int8_t fv = 0, tv = 1;
    H5Tenum_insert(b, "FALSE", &fv);
    H5Tenum_insert(b, "TRUE", &tv);
    put_attr(f, "tie_word_embeddings", b, &tv);
    put_attr(f, "attention_bias", b, &fv);
    H5Tclose(b);
    int nt = tfm_tensors(&c, &p, NULL, 0);
    struct tfm_tensor *t = malloc(sizeof *t * (size_t)nt);
    tfm_tensors(&c, &p, t, nt);
    for (int i = 0; i < nt; i++) {
        size_t n = (size_t)t[i].dims[0] * (size_t)(t[i].ndim > 1 ? t[i].dims[1] : 1);
        double *d = malloc(sizeof(double) * n);
        for (size_t k = 0; k < n; k++) d[k] = t[i].data[k];
        hsize_t dims[2] = {(hsize_t)t[i].dims[0], (hsize_t)t[i].dims[1]};
        put_dset(f, t[i].name, H5T_NATIVE_DOUBLE, t[i].ndim, dims, d);
        free(d);
    }
    free(t);
    CU_ASSERT(H5Fclose(f) >= 0);

    struct tfm_config c2;
    struct tfm_params p2;
    int rc = tfm_load(path, &c2, &p2, NULL, err, sizeof err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT(config_equal(&c, &c2));
    CU_ASSERT(memcmp(p.mem, p2.mem, sizeof(float) * p.n) == 0); /* float -> double exact */
    tfm_params_free(&p2);
    tfm_params_free(&p);
}

static void test_shape_mismatch(void)
{
    /* llama tiny: K = 2, D = 4, C = 16; the file claims K = 1. */
    const char *path = save_tiny("shape.h5", TFM_LLAMA, 0, 0);
    hid_t f = open_rw(path);
    put_i64_attr(f, "num_key_value_heads", 1);
    H5Fclose(f);
    expect_load_fails(path, "model.layers.0.self_attn.k_proj.weight: shape (8, 16) in the "
                            "file, (4, 16) expected from the config (num_key_value_heads 1, "
                            "head_dim 4)");
    /* A 1-D tensor stored 2-D: the rank differs. */
    path = save_tiny("rank.h5", TFM_LLAMA, 0, 0);
    f = open_rw(path);
    CU_ASSERT(H5Ldelete(f, "model.norm.weight", H5P_DEFAULT) >= 0);
    float z[16] = {0};
    hsize_t dims[2] = {1, 16};
    put_dset(f, "model.norm.weight", H5T_NATIVE_FLOAT, 2, dims, z);
    H5Fclose(f);
    expect_load_fails(path, "model.norm.weight: shape (1, 16) in the file, (16) expected from "
                            "the config (hidden_size 16)");
    /* An integer dataset. */
    path = save_tiny("inttensor.h5", TFM_LLAMA, 1, 0);
    f = open_rw(path);
    CU_ASSERT(H5Ldelete(f, "model.norm.weight", H5P_DEFAULT) >= 0);
    int32_t zi[16] = {0};
    put_dset(f, "model.norm.weight", H5T_NATIVE_INT32, 1, dims + 1, zi);
    H5Fclose(f);
    expect_load_fails(path, "model.norm.weight is an integer dataset, expected float32");
    /* Optimizer moments of the wrong length. */
    path = save_tiny("optshape.h5", TFM_QWEN2, 1, 1);
    f = open_rw(path);
    CU_ASSERT(H5Ldelete(f, "optimizer/v", H5P_DEFAULT) >= 0);
    hid_t g = H5Gopen2(f, "optimizer", H5P_DEFAULT);
    hsize_t n5 = 5;
    put_dset(g, "v", H5T_NATIVE_FLOAT, 1, &n5, z);
    H5Gclose(g);
    H5Fclose(f);
    expect_load_fails(path, "optimizer/v: shape (5) in the file");
}

static void test_missing_and_unexpected(void)
{
    const char *path = save_tiny("missing.h5", TFM_QWEN3, 0, 0);
    hid_t f = open_rw(path);
    CU_ASSERT(H5Ldelete(f, "model.layers.1.mlp.up_proj.weight", H5P_DEFAULT) >= 0);
    H5Fclose(f);
    expect_load_fails(path, "1 missing: model.layers.1.mlp.up_proj.weight");

    path = save_tiny("extra.h5", TFM_LLAMA, 1, 0);
    f = open_rw(path);
    float z[4] = {0};
    hsize_t four = 4;
    put_dset(f, "extra.weight", H5T_NATIVE_FLOAT, 1, &four, z);
    hid_t g = H5Gcreate2(f, "stuff", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(g);
    H5Fclose(f);
    expect_load_fails(path, "2 not expected: extra.weight, stuff");

    /* An untied file read as tied: lm_head.weight is unexpected. */
    path = save_tiny("tie.h5", TFM_LLAMA, 0, 0);
    f = open_rw(path);
    put_i64_attr(f, "tie_word_embeddings", 1);
    H5Fclose(f);
    expect_load_fails(path, "tie_word_embeddings 1); 1 not expected: lm_head.weight");

    /* qwen2 biases read as a llama. */
    path = save_tiny("bias.h5", TFM_QWEN2, 1, 0);
    f = open_rw(path);
    put_str_attr(f, "model_type", "llama");
    put_i64_attr(f, "attention_bias", 0);
    H5Fclose(f);
    expect_load_fails(path, "6 not expected: model.layers.0.self_attn.k_proj.bias");

    /* "optimizer" that is a dataset, not a group. */
    path = save_tiny("optds.h5", TFM_LLAMA, 1, 0);
    f = open_rw(path);
    put_dset(f, "optimizer", H5T_NATIVE_FLOAT, 1, &four, z);
    H5Fclose(f);
    expect_load_fails(path, "1 not expected: optimizer");
}

static void test_bad_attributes(void)
{
    const char *path = save_tiny("attr-str.h5", TFM_LLAMA, 0, 0);
    hid_t f = open_rw(path);
    put_str_attr(f, "hidden_size", "16");
    H5Fclose(f);
    expect_load_fails(path, "root attribute hidden_size is a string, expected an integer");

    path = save_tiny("attr-float.h5", TFM_LLAMA, 0, 0);
    f = open_rw(path);
    double d = 4.0;
    put_attr(f, "head_dim", H5T_NATIVE_DOUBLE, &d);
    H5Fclose(f);
    expect_load_fails(path, "root attribute head_dim is a float, expected an integer");

    path = save_tiny("attr-eps.h5", TFM_LLAMA, 0, 0);
    f = open_rw(path);
    put_str_attr(f, "rms_norm_eps", "1e-6");
    H5Fclose(f);
    expect_load_fails(path, "root attribute rms_norm_eps is a string, expected a number");

    path = save_tiny("attr-missing.h5", TFM_QWEN2, 0, 0);
    f = open_rw(path);
    H5Adelete(f, "rope_theta");
    H5Fclose(f);
    expect_load_fails(path, "root attribute rope_theta is missing");

    path = save_tiny("attr-type.h5", TFM_LLAMA, 0, 0);
    f = open_rw(path);
    put_str_attr(f, "model_type", "mistral");
    H5Fclose(f);
    expect_load_fails(path, "model_type \"mistral\" is not supported");

    path = save_tiny("attr-version.h5", TFM_LLAMA, 0, 0);
    f = open_rw(path);
    put_i64_attr(f, "libra_format_version", 2);
    H5Fclose(f);
    expect_load_fails(path, "libra_format_version = 2");

    path = save_tiny("attr-noversion.h5", TFM_LLAMA, 0, 0);
    f = open_rw(path);
    H5Adelete(f, "libra_format_version");
    H5Fclose(f);
    expect_load_fails(path, "not a libra model file");

    path = save_tiny("attr-bool.h5", TFM_LLAMA, 0, 0);
    f = open_rw(path);
    put_i64_attr(f, "attention_bias", 2);
    H5Fclose(f);
    expect_load_fails(path, "attention_bias = 2 must be 0 or 1");

    path = save_tiny("attr-check.h5", TFM_LLAMA, 0, 0);
    f = open_rw(path);
    put_i64_attr(f, "num_key_value_heads", 3);
    H5Fclose(f);
    expect_load_fails(path, "config in the file is invalid: num_key_value_heads = 3 must divide");

    path = save_tiny("attr-big.h5", TFM_LLAMA, 0, 0);
    f = open_rw(path);
    put_i64_attr(f, "vocab_size", 5000000000LL);
    H5Fclose(f);
    expect_load_fails(path, "vocab_size = 5000000000 does not fit a C int");

    /* Absurd but valid sizes must not be allocated. */
    path = save_tiny("attr-huge.h5", TFM_LLAMA, 0, 0);
    f = open_rw(path);
    put_i64_attr(f, "intermediate_size", 2000000000);
    put_i64_attr(f, "hidden_size", 2000000000);
    H5Fclose(f);
    expect_load_fails(path, "parameters but the file is only");

    path = save_tiny("attr-array.h5", TFM_LLAMA, 0, 0);
    f = open_rw(path);
    H5Adelete(f, "vocab_size");
    hsize_t two = 2;
    hid_t s = H5Screate_simple(1, &two, NULL);
    hid_t a = H5Acreate2(f, "vocab_size", H5T_NATIVE_INT64, s, H5P_DEFAULT, H5P_DEFAULT);
    int64_t v2[2] = {37, 37};
    H5Awrite(a, H5T_NATIVE_INT64, v2);
    H5Aclose(a);
    H5Sclose(s);
    H5Fclose(f);
    expect_load_fails(path, "root attribute vocab_size holds 2 values, expected one");

    path = save_tiny("attr-opt.h5", TFM_QWEN3, 1, 1);
    f = open_rw(path);
    hid_t g = H5Gopen2(f, "optimizer", H5P_DEFAULT);
    put_str_attr(g, "schedule", "linear");
    H5Gclose(g);
    H5Fclose(f);
    expect_load_fails(path, "/optimizer attribute schedule = \"linear\"");

    path = save_tiny("attr-opt2.h5", TFM_QWEN3, 1, 1);
    f = open_rw(path);
    g = H5Gopen2(f, "optimizer", H5P_DEFAULT);
    H5Adelete(g, "beta2");
    H5Gclose(g);
    H5Fclose(f);
    expect_load_fails(path, "/optimizer attribute beta2 is missing");
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *fp = fopen(path, "wb");
    CU_ASSERT_FATAL(fp != NULL);
    if (n) CU_ASSERT(fwrite(data, 1, n, fp) == n);
    fclose(fp);
}

static void *read_all(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    CU_ASSERT_FATAL(fp != NULL);
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    void *buf = malloc((size_t)len);
    CU_ASSERT_FATAL(fread(buf, 1, (size_t)len, fp) == (size_t)len);
    fclose(fp);
    *n = (size_t)len;
    return buf;
}

static void test_garbage_and_truncated(void)
{
    unsigned char junk[4096];
    struct rng r;
    rng_init(&r, 3, 0, 0, 0);
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)rng_below(&r, 256);
    const char *path = scratch("garbage.h5");
    write_bytes(path, junk, sizeof junk);
    expect_load_fails(path, "not an HDF5 file");
    path = scratch("empty.h5");
    write_bytes(path, junk, 0);
    expect_load_fails(path, "not an HDF5 file");
    expect_load_fails(scratch("does-not-exist.h5"), "No such file or directory");

    /* Truncated at many lengths: always a clean error. */
    const char *good = save_tiny("whole.h5", TFM_QWEN2, 0, 1);
    size_t n;
    unsigned char *all = read_all(good, &n);
    const size_t cuts[] = {8, 100, 512, 2048, n / 3, n / 2, n - 4096, n - 100, n - 1};
    path = scratch("truncated.h5");
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        write_bytes(path, all, cuts[i]);
        expect_load_fails(path, NULL == path ? "" : ""); /* any message naming the path */
    }
    /* The signature intact, the rest overwritten with noise (in a few places). */
    const size_t spots[] = {64, 600, 1500, n / 2};
    path = scratch("corrupt.h5");
    for (size_t i = 0; i < sizeof spots / sizeof spots[0]; i++) {
        unsigned char *bad = malloc(n);
        memcpy(bad, all, n);
        for (size_t k = spots[i]; k < n && k < spots[i] + 512; k++)
            bad[k] = (unsigned char)rng_below(&r, 256);
        write_bytes(path, bad, n);
        struct tfm_config c;
        struct tfm_params p;
        struct adamw o;
        /* Corrupted raw data fails its checksum, corrupted metadata HDF5's reading;
         * either way: no crash, consistent outputs (noise may also hit padding). */
        int rc = tfm_load(path, &c, &p, &o, err, sizeof err);
        if (rc == 0) {
            tfm_params_free(&p);
            free(o.m);
        } else {
            CU_ASSERT(is_zero(&p, sizeof p) && is_zero(&o, sizeof o));
            CU_ASSERT(strstr(err, path) != NULL);
        }
        free(bad);
    }
    free(all);
}

static void test_bad_saves(void)
{
    struct tfm_config c = tiny(TFM_LLAMA, 0);
    struct tfm_params p;
    fill_params(&p, &c, 1);
    const char *path = scratch("badsave.h5");
    c.qk_norm = 1; /* not representable: qk_norm comes from model_type */
    CU_ASSERT_EQUAL(tfm_save(path, &c, &p, NULL, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "qk_norm") != NULL);
    c.qk_norm = 0;
    c.n_kv_heads = 3;
    CU_ASSERT_EQUAL(tfm_save(path, &c, &p, NULL, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "num_key_value_heads") != NULL);
    c.n_kv_heads = 2;
    struct adamw o;
    fill_opt(&o, p.n - 1, 2);
    CU_ASSERT_EQUAL(tfm_save(path, &c, &p, &o, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "optimizer state does not match") != NULL);
    free(o.m);
    struct tfm_config c2 = tiny(TFM_QWEN2, 0); /* params of another config */
    CU_ASSERT_EQUAL(tfm_save(path, &c2, &p, NULL, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "do not match the config") != NULL);
    CU_ASSERT_EQUAL(access(path, F_OK), -1);
    CU_ASSERT_EQUAL(tfm_save(scratch("no/such/dir.h5"), &c, &p, NULL, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "No such file or directory") != NULL);
    tfm_params_free(&p);
    CU_ASSERT_EQUAL(count_tmp_files(), 0);
}

static void load_expect(const char *path, const struct tfm_params *want)
{
    struct tfm_config c;
    struct tfm_params p;
    CU_ASSERT_EQUAL_FATAL(tfm_load(path, &c, &p, NULL, err, sizeof err), 0);
    CU_ASSERT(p.n == want->n && memcmp(p.mem, want->mem, sizeof(float) * p.n) == 0);
    tfm_params_free(&p);
}

static void test_atomic_replace(void)
{
    struct tfm_config c = tiny(TFM_QWEN3, 0);
    struct tfm_params a, b;
    fill_params(&a, &c, 100);
    fill_params(&b, &c, 200);
    const char *path = scratch("replace.h5");
    CU_ASSERT_EQUAL_FATAL(tfm_save(path, &c, &a, NULL, err, sizeof err), 0);
    load_expect(path, &a);
    CU_ASSERT_EQUAL_FATAL(tfm_save(path, &c, &b, NULL, err, sizeof err), 0);
    load_expect(path, &b);
    CU_ASSERT_EQUAL(count_tmp_files(), 0);

    /* A save that fails half-way (the file-size limit stands in for a full disk)
     * leaves the old file as it was and no temporary behind. */
    struct rlimit old;
    CU_ASSERT_FATAL(getrlimit(RLIMIT_FSIZE, &old) == 0);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old;
    lim.rlim_cur = 4096;
    CU_ASSERT_FATAL(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    int rc = tfm_save(path, &c, &a, NULL, err, sizeof err);
    CU_ASSERT_FATAL(setrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, old_handler);
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT(strstr(err, ".tmp-") != NULL);
    load_expect(path, &b);
    CU_ASSERT_EQUAL(count_tmp_files(), 0);

    /* A read-only directory: the temporary cannot be created (root ignores the mode,
     * so the check is skipped there). */
    const char *dir = scratch("ro");
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0);
    char ro_path[1100];
    snprintf(ro_path, sizeof ro_path, "%s/model.h5", dir);
    CU_ASSERT_EQUAL_FATAL(tfm_save(ro_path, &c, &a, NULL, err, sizeof err), 0);
    CU_ASSERT_FATAL(chmod(dir, 0555) == 0);
    if (geteuid() != 0) {
        CU_ASSERT_EQUAL(tfm_save(ro_path, &c, &b, NULL, err, sizeof err), -1);
        CU_ASSERT(strstr(err, "Permission denied") != NULL);
        load_expect(ro_path, &a);
    }
    chmod(dir, 0755);
    tfm_params_free(&b);
    tfm_params_free(&a);
}

/* ---- checksums and non-finite weights ---- */

/* Flips one byte of dataset name's stored data (in place in the file). */
static void flip_data_byte(const char *path, const char *name, size_t at)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    CU_ASSERT_FATAL(d >= 0);
    haddr_t off = H5Dget_offset(d); /* contiguous data */
    CU_ASSERT_FATAL(off != HADDR_UNDEF);
    H5Dclose(d);
    H5Fclose(f);
    FILE *fp = fopen(path, "r+b");
    CU_ASSERT_FATAL(fp != NULL);
    CU_ASSERT_FATAL(fseek(fp, (long)(off + at), SEEK_SET) == 0);
    int b = fgetc(fp);
    CU_ASSERT_FATAL(fseek(fp, (long)(off + at), SEEK_SET) == 0);
    fputc(b ^ 0x10, fp);
    fclose(fp);
}

static void drop_checksum(hid_t f, const char *name)
{
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    CU_ASSERT_FATAL(d >= 0);
    CU_ASSERT(H5Adelete(d, H5SUM_ATTR) >= 0);
    H5Dclose(d);
}

static void test_checksums(void)
{
    const char *q0 = "model.layers.0.self_attn.q_proj.weight";
    const char *q1 = "model.layers.1.self_attn.q_proj.weight";
    const char *path = save_tiny("sum.h5", TFM_QWEN2, 0, 1);
    /* every dataset carries its checksum, bound to its name */
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    const char *names[] = {q0, "model.norm.weight", "optimizer/m", "optimizer/v"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        hid_t d = H5Dopen2(f, names[i], H5P_DEFAULT);
        CU_ASSERT_FATAL(d >= 0);
        CU_ASSERT(H5Aexists(d, H5SUM_ATTR) > 0);
        H5Dclose(d);
    }
    H5Fclose(f);

    /* one flipped bit in a tensor, in an optimizer moment */
    const char *flip = save_tiny("sum-flip.h5", TFM_QWEN2, 0, 1);
    flip_data_byte(flip, q1, 13);
    expect_load_fails(flip, "model.layers.1.self_attn.q_proj.weight: checksum mismatch");
    flip = save_tiny("sum-flip-opt.h5", TFM_QWEN2, 0, 1);
    flip_data_byte(flip, "optimizer/v", 101);
    expect_load_fails(flip, "optimizer/v: checksum mismatch");

    /* two tensors of one shape swapped (names exchanged): each is refused */
    const char *swap = save_tiny("sum-swap.h5", TFM_QWEN2, 0, 0);
    f = open_rw(swap);
    CU_ASSERT(H5Lmove(f, q0, f, "tmp", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    CU_ASSERT(H5Lmove(f, q1, f, q0, H5P_DEFAULT, H5P_DEFAULT) >= 0);
    CU_ASSERT(H5Lmove(f, "tmp", f, q1, H5P_DEFAULT, H5P_DEFAULT) >= 0);
    H5Fclose(f);
    expect_load_fails(swap, "checksum mismatch");

    /* without checksums (an older file or another tool's) a good file loads; NaN and
     * infinities never do */
    const char *plain = save_tiny("sum-none.h5", TFM_QWEN2, 0, 1);
    f = open_rw(plain);
    drop_checksum(f, q0);
    drop_checksum(f, "optimizer/m");
    H5Fclose(f);
    struct tfm_config c;
    struct tfm_params p;
    struct adamw o;
    CU_ASSERT_EQUAL_FATAL(tfm_load(plain, &c, &p, &o, err, sizeof err), 0);
    tfm_params_free(&p);
    free(o.m);
    const float bad[2] = {NAN, INFINITY};
    const char *want[2] = {"holds NaN at element 5", "holds an infinity at element 5"};
    for (int k = 0; k < 2; k++) {
        f = open_rw(plain);
        hid_t d = H5Dopen2(f, q0, H5P_DEFAULT);
        CU_ASSERT_FATAL(d >= 0);
        hid_t space = H5Dget_space(d);
        hsize_t dims[2];
        H5Sget_simple_extent_dims(space, dims, NULL);
        float *x = malloc(dims[0] * dims[1] * sizeof *x);
        CU_ASSERT(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0);
        x[5] = bad[k];
        CU_ASSERT(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0);
        free(x);
        H5Sclose(space);
        H5Dclose(d);
        H5Fclose(f);
        char msg[256];
        snprintf(msg, sizeof msg, "%s %s", q0, want[k]);
        expect_load_fails(plain, msg);
    }
}

int main(void)
{
    static const struct test_case io[] = {
        {"round trip: llama/qwen2/qwen3, tied/untied, +-optimizer (bitwise)", test_round_trip},
        {"layout as another reader sees it (names, shapes, types, slices)", test_layout},
        {"converter-style file: int32, h5py bools, float64 tensors", test_converter_style_file},
        {"rope_scaling attributes: round trip, plain files, errors", test_rope_scaling},
        {"shape mismatch names the tensor, both shapes and the config", test_shape_mismatch},
        {"missing and unexpected datasets are listed", test_missing_and_unexpected},
        {"missing / mistyped / invalid attributes are named", test_bad_attributes},
        {"garbage, empty, missing, truncated, corrupt files fail cleanly",
         test_garbage_and_truncated},
        {"invalid saves are refused before touching the disk", test_bad_saves},
        {"atomic replace; a failed save keeps the old file", test_atomic_replace},
        {"checksums: a flipped bit, a swap are named; NaN / inf refused", test_checksums},
        {NULL, NULL},
    };
    static const struct test_suite suites[] = {
        {"tfm_io", io},
        {NULL, NULL},
    };
    return test_main(suites);
}
