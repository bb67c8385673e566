/*
 * Tests of the Hugging Face formats: bf16 / f16 conversions (exhaustive over the
 * 16-bit patterns, rounding cases), safetensors files and model directories (f32
 * round trips bit for bit, bf16 export -> import -> export giving the same bytes,
 * shards loading like one file, TP slices equal to the slices of the full load),
 * config.json round trips (llama with llama3 / yarn / linear rope scaling, qwen2 with
 * biases, qwen3 with qk_norm and tied embeddings) and transformers' defaults,
 * model_load on every format, and every bad input with the message it must give:
 * truncated files, bad header lengths, offsets out of range / overlapping / not
 * matching shape x dtype, unknown or unreadable dtypes, shapes and tensors that do
 * not match config.json, unsupported model types and rope types, broken JSON.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include "libra/hf_model.h"
#include "libra/model_load.h"
#include "libra/safetensors.h"
#include "libra/tfm_io.h"
#include "libra/tfm_tp.h"
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char err[2048];

/* A fresh directory name under the scratch dir (created). */
static const char *newdir(const char *name)
{
    static char buf[8][1024];
    static int next;
    const char *top = test_scratch_dir("hf_io");
    CU_ASSERT_FATAL(top != NULL);
    char *out = buf[next++ % 8];
    snprintf(out, sizeof buf[0], "%s/%s", top, name);
    mkdir(out, 0755);
    return out;
}

static const char *join(const char *dir, const char *name)
{
    static char buf[8][1200];
    static int next;
    char *out = buf[next++ % 8];
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
        c.head_dim = 8; /* H*D = 32 != C */
        c.rope_theta = 1000000.0f;
    }
    return c;
}

static void random_model(struct tfm_params *p, const struct tfm_config *c, uint64_t seed)
{
    test_random_params(p, c, seed); /* allocates */
}

static int same_params(const struct tfm_params *a, const struct tfm_params *b)
{
    return a->n == b->n && memcmp(a->mem, b->mem, sizeof(float) * a->n) == 0;
}

static int file_equal(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x != y) same = 0;
        if (x == EOF || y == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

static void put_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs(text, f);
    fclose(f);
}

/* A safetensors file from a header text and data_len bytes of data (value 0x3c). */
static void put_raw(const char *path, const char *header, uint64_t hlen_field, size_t data_len)
{
    FILE *f = fopen(path, "wb");
    CU_ASSERT_FATAL(f != NULL);
    fwrite(&hlen_field, 8, 1, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < data_len; i++) fputc(0x3c, f);
    fclose(f);
}

static void put_st(const char *path, const char *header, size_t data_len)
{
    put_raw(path, header, strlen(header), data_len);
}

/* ---- conversions ---- */

static void test_bf16_exhaustive(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = st_bf16_to_f32((uint16_t)h);
        if (st_f32_to_bf16(f) != h) bad++;
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* rounding: ties to even, carries, overflow, NaN */
    CU_ASSERT_EQUAL(st_f32_to_bf16(1.0f), 0x3f80);
    CU_ASSERT_EQUAL(st_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);           /* tie -> even */
    CU_ASSERT_EQUAL(st_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);       /* tie -> even (up) */
    CU_ASSERT_EQUAL(st_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81); /* above the tie */
    CU_ASSERT_EQUAL(st_f32_to_bf16(-2.0f), 0xc000);
    CU_ASSERT_EQUAL(st_f32_to_bf16(3.4e38f), 0x7f80); /* rounds past the largest: inf */
    CU_ASSERT_EQUAL(st_f32_to_bf16(INFINITY), 0x7f80);
    float qnan_low;
    uint32_t b = 0x7f800001u; /* NaN whose payload is only in the low bits */
    memcpy(&qnan_low, &b, 4);
    uint16_t h = st_f32_to_bf16(qnan_low);
    CU_ASSERT((h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0);
    CU_ASSERT(isnan(st_bf16_to_f32(h)));
}

static void test_f16_conversions(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = st_f16_to_f32((uint16_t)h);
        int nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (nan ? !isnan(f) : st_f32_to_f16(f) != h) bad++;
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(st_f16_to_f32(0x3c00), 1.0f);
    CU_ASSERT_EQUAL(st_f16_to_f32(0x7bff), 65504.0f);
    CU_ASSERT_EQUAL(st_f16_to_f32(0x0001), 0x1p-24f);
    CU_ASSERT_EQUAL(st_f16_to_f32(0x03ff), 1023 * 0x1p-24f);
    CU_ASSERT_EQUAL(st_f16_to_f32(0x8000), -0.0f);
    CU_ASSERT(signbit(st_f16_to_f32(0x8000)));
    CU_ASSERT(isinf(st_f16_to_f32(0x7c00)) && st_f16_to_f32(0xfc00) < 0);
    CU_ASSERT(isnan(st_f16_to_f32(0x7e00)));
    CU_ASSERT_EQUAL(st_f32_to_f16(65519.0f), 0x7bff);
    CU_ASSERT_EQUAL(st_f32_to_f16(65520.0f), 0x7c00); /* the tie rounds to even: inf */
    CU_ASSERT_EQUAL(st_f32_to_f16(-1e9f), 0xfc00);
    CU_ASSERT_EQUAL(st_f32_to_f16(0x1p-25f), 0x0000);      /* tie between 0 and 1 ulp: 0 */
    CU_ASSERT_EQUAL(st_f32_to_f16(0x1.01p-25f), 0x0001);   /* just above */
    CU_ASSERT_EQUAL(st_f32_to_f16(3 * 0x1p-25f), 0x0002);  /* 1.5 ulp: to even 2 */
    CU_ASSERT_EQUAL(st_f32_to_f16(1023.5f * 0x1p-24f), 0x0400); /* up into the normals */
    CU_ASSERT_EQUAL(st_f32_to_f16(1e-30f), 0x0000);
    CU_ASSERT_EQUAL(st_f32_to_f16(-1e-30f), 0x8000);
    CU_ASSERT_EQUAL(st_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie -> even */
    CU_ASSERT_EQUAL(st_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    CU_ASSERT((st_f32_to_f16(NAN) & 0x7e00) == 0x7e00);
#if defined(__FLT16_MAX__)
    /* against the compiler's conversion (round to nearest even) on random bit patterns */
    uint64_t s = 88172645463325252ull;
    int diff = 0;
    for (int i = 0; i < 1000000; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        uint32_t bits = (uint32_t)s;
        float f;
        memcpy(&f, &bits, 4);
        if (isnan(f)) continue;
        _Float16 r = (_Float16)f;
        uint16_t want;
        memcpy(&want, &r, 2);
        if (st_f32_to_f16(f) != want) diff++;
    }
    CU_ASSERT_EQUAL(diff, 0);
#endif
}

/* ---- safetensors files ---- */

static void test_st_file(void)
{
    const char *dir = newdir("st_file");
    float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {-1.5f, 0.25f, 65504};
    struct st_src src[2] = {{"a", a, 2, {2, 3}}, {"b", b, 1, {3}}};
    const char *path = join(dir, "x.safetensors");
    CU_ASSERT_EQUAL_FATAL(st_write(path, src, 2, ST_F16, err, sizeof err), 0);
    struct st_file f;
    CU_ASSERT_EQUAL_FATAL(st_open(&f, path, err, sizeof err), 0);
    CU_ASSERT_EQUAL(f.n, 2);
    CU_ASSERT_STRING_EQUAL(st_meta(&f, "format"), "pt");
    CU_ASSERT((8 + (f.data - f.map - 8)) % 8 == 0); /* header padded to 8 bytes */
    const struct st_tensor *t = st_find(&f, "a");
    CU_ASSERT_FATAL(t != NULL);
    CU_ASSERT(t->dtype == ST_F16 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3);
    float out[6];
    CU_ASSERT_EQUAL(st_read(&f, t, out, err, sizeof err), 0);
    CU_ASSERT(memcmp(out, a, sizeof a) == 0);
    float blk[2];
    CU_ASSERT_EQUAL(st_read_block(&f, t, 0, 2, 2, 1, blk, err, sizeof err), 0);
    CU_ASSERT(blk[0] == 3 && blk[1] == 6);
    CU_ASSERT_EQUAL(st_read_block(&f, t, 1, 2, 0, 1, blk, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "outside") != NULL);
    t = st_find(&f, "b");
    CU_ASSERT_EQUAL(st_read_block(&f, t, 1, 2, 0, 1, blk, err, sizeof err), 0);
    CU_ASSERT(blk[0] == 0.25f && blk[1] == 65504);
    /* the bf16 reads: F16 values rounded (65504 is not a bf16: it rounds to 65536) */
    uint16_t b16[2];
    CU_ASSERT_EQUAL(st_read_block_bf16(&f, t, 1, 2, 0, 1, b16, err, sizeof err), 0);
    CU_ASSERT(st_bf16_to_f32(b16[0]) == 0.25f && st_bf16_to_f32(b16[1]) == 65536);
    CU_ASSERT_EQUAL(st_read_block_bf16(&f, t, 2, 2, 0, 1, b16, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "outside") != NULL);
    CU_ASSERT(st_find(&f, "c") == NULL);
    st_close(&f);
    st_close(&f); /* a no-op */
    /* no temporary left */
    DIR *d = opendir(dir);
    struct dirent *de;
    int tmp = 0;
    while ((de = readdir(d))) tmp += strstr(de->d_name, ".tmp-") != NULL;
    closedir(d);
    CU_ASSERT_EQUAL(tmp, 0);
}

/* Opening must fail with a message containing want (and the path). */
static void open_fails(const char *path, const char *want)
{
    struct st_file f;
    err[0] = '\0';
    CU_ASSERT_EQUAL(st_open(&f, path, err, sizeof err), -1);
    if (!strstr(err, want) || !strstr(err, path)) fprintf(stderr, "\n  got: %s\n", err);
    CU_ASSERT(strstr(err, want) != NULL);
    CU_ASSERT(strstr(err, path) != NULL);
}

static void test_st_bad_files(void)
{
    const char *dir = newdir("st_bad");
    const char *p = join(dir, "bad.safetensors");
    put_text(p, "abc");
    open_fails(p, "truncated");
    put_raw(p, "{}", 1000, 0);
    open_fails(p, "header length 1000 is larger");
    put_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4);
    open_fails(p, "out of range"); /* truncated data area */
    put_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", 12);
    open_fails(p, "needs 8");
    put_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12);
    open_fails(p, "overlap");
    put_st(p, "{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    open_fails(p, "unknown dtype \"Q4\"");
    put_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8);
    open_fails(p, "data_offsets must be");
    put_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8);
    open_fails(p, "shape[0]");
    put_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    open_fails(p, "not valid JSON");
    put_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]", 8);
    open_fails(p, "not valid JSON");
    put_st(p, "[1, 2]", 8);
    open_fails(p, "not a JSON object");
    put_st(p, "{\"__metadata__\":{\"format\":1}}", 0);
    open_fails(p, "__metadata__");
    /* shape overflow: the product of the dims wraps */
    put_st(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],"
              "\"data_offsets\":[0,0]}}", 0);
    open_fails(p, "needs more than");
    open_fails(join(dir, "missing.safetensors"), "cannot open");

    /* I64 passes the open (sizes check out) and is refused by the float reader */
    put_st(p, "{\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16);
    struct st_file f;
    CU_ASSERT_EQUAL_FATAL(st_open(&f, p, err, sizeof err), 0);
    float out[2];
    CU_ASSERT_EQUAL(st_read(&f, st_find(&f, "ids"), out, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "\"ids\" has dtype I64") != NULL);
    st_close(&f);
    /* an empty tensor and a hole are fine */
    put_st(p, "{\"e\":{\"dtype\":\"BF16\",\"shape\":[0,3],\"data_offsets\":[4,4]},"
              "\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]}}", 8);
    CU_ASSERT_EQUAL(st_open(&f, p, err, sizeof err), 0);
    CU_ASSERT_EQUAL(f.n, 2);
    CU_ASSERT_EQUAL(st_read(&f, st_find(&f, "a"), out, err, sizeof err), 0);
    CU_ASSERT_EQUAL(out[0], st_bf16_to_f32(0x3c3c));
    st_close(&f);
}

/* ---- model directories ---- */

static void save_load_f32(int family, int tied)
{
    struct tfm_config c = tiny(family, tied), c2;
    struct tfm_params p, q;
    random_model(&p, &c, 11 + (uint64_t)family);
    char name[32];
    snprintf(name, sizeof name, "f32-%d-%d", family, tied);
    const char *dir = newdir(name);
    CU_ASSERT_EQUAL_FATAL(hf_save(dir, &c, &p, NULL, ST_F32, ST_DEFAULT_MAX_SHARD, err,
                                  sizeof err), 0);
    CU_ASSERT(access(join(dir, "model.safetensors"), F_OK) == 0);
    CU_ASSERT(access(join(dir, "config.json"), F_OK) == 0);
    CU_ASSERT(access(join(dir, "generation_config.json"), F_OK) != 0); /* no ids known */
    if (hf_load(dir, &c2, &q, err, sizeof err)) fprintf(stderr, "\n  %s\n", err);
    CU_ASSERT_FATAL(q.mem != NULL);
    CU_ASSERT(memcmp(&c, &c2, sizeof c) == 0);
    CU_ASSERT(same_params(&p, &q));
    tfm_params_free(&q);
    tfm_params_free(&p);
}

static void test_f32_round_trip(void)
{
    save_load_f32(TFM_LLAMA, 0);
    save_load_f32(TFM_LLAMA, 1);
    save_load_f32(TFM_QWEN2, 0);
    save_load_f32(TFM_QWEN2, 1);
    save_load_f32(TFM_QWEN3, 1);
    save_load_f32(TFM_QWEN3, 0);
}

static void test_bf16_round_trip(void)
{
    struct tfm_config c = tiny(TFM_QWEN3, 1), c2;
    struct tfm_params p, q, r;
    random_model(&p, &c, 5);
    const char *a = newdir("bf16-a"), *b = newdir("bf16-b");
    struct hf_info info;
    hf_info_init(&info);
    info.bos_token_id = 1;
    info.n_eos = 2;
    info.eos_token_id[0] = 2;
    info.eos_token_id[1] = 3;
    CU_ASSERT_EQUAL_FATAL(hf_save(a, &c, &p, &info, ST_BF16, ST_DEFAULT_MAX_SHARD, err,
                                  sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(hf_load(a, &c2, &q, err, sizeof err), 0);
    /* every value is p's rounded to bf16 */
    int bad = 0;
    for (size_t i = 0; i < p.n; i++)
        if (q.mem[i] != st_bf16_to_f32(st_f32_to_bf16(p.mem[i]))) bad++;
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL_FATAL(hf_save(b, &c2, &q, &info, ST_BF16, ST_DEFAULT_MAX_SHARD, err,
                                  sizeof err), 0);
    CU_ASSERT(file_equal(join(a, "model.safetensors"), join(b, "model.safetensors")));
    CU_ASSERT(file_equal(join(a, "config.json"), join(b, "config.json")));
    CU_ASSERT(file_equal(join(a, "generation_config.json"), join(b, "generation_config.json")));
    CU_ASSERT_EQUAL_FATAL(hf_load(b, &c2, &r, err, sizeof err), 0);
    CU_ASSERT(same_params(&q, &r));
    struct tfm_config c3;
    struct hf_info i2;
    CU_ASSERT_EQUAL(hf_config_read(b, &c3, &i2, err, sizeof err), 0);
    CU_ASSERT_STRING_EQUAL(i2.torch_dtype, "bfloat16");
    CU_ASSERT(i2.bos_token_id == 1 && i2.n_eos == 2 && i2.eos_token_id[1] == 3);
    tfm_params_free(&r);
    tfm_params_free(&q);
    tfm_params_free(&p);
}

static int count_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    size_t sl = strlen(suffix);
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        n += l >= sl && strcmp(de->d_name + l - sl, suffix) == 0;
    }
    closedir(d);
    return n;
}

static void test_sharded(void)
{
    struct tfm_config c = tiny(TFM_LLAMA, 0), c2;
    struct tfm_params p, q, r;
    random_model(&p, &c, 9);
    const char *one = newdir("one"), *many = newdir("many");
    CU_ASSERT_EQUAL_FATAL(hf_save(one, &c, &p, NULL, ST_BF16, ST_DEFAULT_MAX_SHARD, err,
                                  sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(hf_save(many, &c, &p, NULL, ST_BF16, 1500, err, sizeof err), 0);
    int shards = count_files(many, ".safetensors");
    char first[64];
    snprintf(first, sizeof first, "model-00001-of-%05d.safetensors", shards);
    CU_ASSERT(shards > 2);
    CU_ASSERT(access(join(many, "model.safetensors"), F_OK) != 0);
    CU_ASSERT(access(join(many, first), F_OK) == 0);
    CU_ASSERT(access(join(many, ST_INDEX_NAME), F_OK) == 0);
    CU_ASSERT_EQUAL_FATAL(hf_load(one, &c2, &q, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(hf_load(many, &c2, &r, err, sizeof err), 0);
    CU_ASSERT(same_params(&q, &r));
    struct st_set s;
    CU_ASSERT_EQUAL_FATAL(st_set_open(&s, many, err, sizeof err), 0);
    CU_ASSERT(s.sharded && s.n_files > 2 && s.n == tfm_tensors(&c, &p, NULL, 0));
    CU_ASSERT_EQUAL(s.n_unmapped, 0);
    st_set_close(&s);
    /* saving again in the other layout replaces the entry point */
    CU_ASSERT_EQUAL(hf_save(many, &c, &p, NULL, ST_BF16, ST_DEFAULT_MAX_SHARD, err, sizeof err),
                    0);
    CU_ASSERT(access(join(many, ST_INDEX_NAME), F_OK) != 0);
    CU_ASSERT_EQUAL(hf_save(one, &c, &p, NULL, ST_BF16, 1500, err, sizeof err), 0);
    CU_ASSERT(access(join(one, ST_SINGLE_NAME), F_OK) != 0);
    CU_ASSERT_EQUAL(hf_save(many, &c, &p, NULL, ST_BF16, 1500, err, sizeof err), 0);
    /* a shard larger than the limit holds one tensor: embed is 37 x 16 x 2 = 1184 bytes */
    const char *tight = newdir("tight");
    int nf = 0;
    struct st_src one_t[2] = {{"a", p.embed, 2, {37, 16}}, {"b", p.embed, 2, {37, 16}}};
    CU_ASSERT_EQUAL(st_write_dir(tight, one_t, 2, ST_BF16, 100, &nf, err, sizeof err), 0);
    CU_ASSERT_EQUAL(nf, 2);

    /* a broken index: a shard file that is not there, a tensor not in its shard */
    const char *idx = join(many, ST_INDEX_NAME);
    put_text(idx, "{\"weight_map\": {\"model.norm.weight\": \"nope.safetensors\"}}");
    CU_ASSERT_EQUAL(st_set_open(&s, many, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "nope.safetensors") != NULL && strstr(err, "cannot open") != NULL);
    char text[256];
    snprintf(text, sizeof text, "{\"weight_map\": {\"zzz\": \"%s\"}}", first);
    put_text(idx, text);
    CU_ASSERT_EQUAL(st_set_open(&s, many, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "\"zzz\"") != NULL && strstr(err, first) != NULL);
    put_text(idx, "{\"weight_map\": {\"zzz\": \"../x.safetensors\"}}");
    CU_ASSERT_EQUAL(st_set_open(&s, many, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "same directory") != NULL);
    put_text(idx, "{\"metadata\": {}}");
    CU_ASSERT_EQUAL(st_set_open(&s, many, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "weight_map") != NULL);
    tfm_params_free(&r);
    tfm_params_free(&q);
    tfm_params_free(&p);
}

/* ---- config.json ---- */

static void config_round_trip(const struct tfm_config *c)
{
    struct tfm_config c2;
    struct hf_info info;
    char *text = hf_config_dump(c, NULL, err, sizeof err);
    CU_ASSERT_FATAL(text != NULL);
    CU_ASSERT_EQUAL(hf_config_parse(text, strlen(text), "t/config.json", &c2, &info, err,
                                    sizeof err), 0);
    CU_ASSERT(memcmp(c, &c2, sizeof c2) == 0);
    CU_ASSERT_STRING_EQUAL(info.torch_dtype, "bfloat16");
    free(text);
}

static void test_config_round_trip(void)
{
    struct tfm_config c = tiny(TFM_LLAMA, 0);
    c.rope_type = TFM_ROPE_LLAMA3;
    c.rope_factor = 8;
    c.rope_low_freq_factor = 1;
    c.rope_high_freq_factor = 4;
    c.rope_original_max_pos = 8192;
    c.rope_theta = 500000;
    c.rms_norm_eps = 1e-5f;
    config_round_trip(&c);
    char *text = hf_config_dump(&c, NULL, err, sizeof err);
    CU_ASSERT(strstr(text, "\"rms_norm_eps\": 1e-5,") != NULL); /* not 1.0000000000000001e-5 */
    CU_ASSERT(strstr(text, "\"LlamaForCausalLM\"") != NULL);
    CU_ASSERT(strstr(text, "\"rope_type\": \"llama3\"") != NULL);
    free(text);
    c.attention_bias = 1;
    config_round_trip(&c);
    c = tiny(TFM_LLAMA, 1);
    c.rope_type = TFM_ROPE_LINEAR;
    c.rope_factor = 2;
    config_round_trip(&c);
    c.rope_type = TFM_ROPE_YARN;
    c.rope_factor = 4;
    c.rope_original_max_pos = 32;
    c.rope_beta_fast = 32;
    c.rope_beta_slow = 1;
    c.rope_attention_factor = 1.25f;
    config_round_trip(&c);
    c = tiny(TFM_QWEN2, 0);
    config_round_trip(&c);
    text = hf_config_dump(&c, NULL, err, sizeof err);
    CU_ASSERT(strstr(text, "\"rope_scaling\": null") != NULL);
    CU_ASSERT(strstr(text, "\"rope_theta\": 1000000.0") != NULL);
    free(text);
    c = tiny(TFM_QWEN3, 1);
    config_round_trip(&c);
    /* what transformers cannot express */
    c = tiny(TFM_QWEN2, 0);
    c.attention_bias = 0;
    CU_ASSERT(hf_config_dump(&c, NULL, err, sizeof err) == NULL);
    CU_ASSERT(strstr(err, "qwen2") != NULL);
    c = tiny(TFM_LLAMA, 0);
    c.qk_norm = 1;
    CU_ASSERT(hf_config_dump(&c, NULL, err, sizeof err) == NULL);
    CU_ASSERT(strstr(err, "qk_norm") != NULL);
}

static int parse(const char *json, struct tfm_config *c, struct hf_info *info)
{
    err[0] = '\0';
    return hf_config_parse(json, strlen(json), "m/config.json", c, info, err, sizeof err);
}

static void parse_fails(const char *json, const char *want)
{
    struct tfm_config c;
    CU_ASSERT_EQUAL(parse(json, &c, NULL), -1);
    if (!strstr(err, want)) fprintf(stderr, "\n  want '%s', got: %s\n", want, err);
    CU_ASSERT(strstr(err, want) != NULL);
    CU_ASSERT(strstr(err, "m/config.json") != NULL);
}

#define BASE(type) "{\"model_type\": \"" type "\", \"hidden_size\": 64, " \
    "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 96, " \
    "\"vocab_size\": 300"

static void test_config_defaults(void)
{
    struct tfm_config c;
    struct hf_info info;
    CU_ASSERT_EQUAL(parse(BASE("llama") "}", &c, &info), 0);
    CU_ASSERT(c.family == TFM_LLAMA && c.n_kv_heads == 4 && c.head_dim == 16 &&
              c.max_position_embeddings == 2048 && c.rms_norm_eps == 1e-6f &&
              c.rope_theta == 10000 && !c.tie_word_embeddings && !c.attention_bias &&
              !c.qk_norm && c.rope_type == TFM_ROPE_DEFAULT);
    CU_ASSERT(info.bos_token_id == -1 && info.n_eos == 0 && info.torch_dtype[0] == '\0');
    CU_ASSERT_EQUAL(parse(BASE("qwen2") ", \"attention_bias\": false, \"eos_token_id\": 7, "
                          "\"torch_dtype\": \"float32\", \"tie_word_embeddings\": true}",
                          &c, &info), 0);
    CU_ASSERT(c.family == TFM_QWEN2 && c.attention_bias == 1 && c.tie_word_embeddings == 1 &&
              c.max_position_embeddings == 32768 && info.n_eos == 1 &&
              info.eos_token_id[0] == 7 && strcmp(info.torch_dtype, "float32") == 0);
    CU_ASSERT_EQUAL(parse(BASE("qwen3") ", \"num_key_value_heads\": 2, \"head_dim\": 32, "
                          "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}, "
                          "\"dtype\": \"bfloat16\", \"some_new_key\": [1]}", &c, &info), 0);
    CU_ASSERT(c.family == TFM_QWEN3 && c.qk_norm && c.n_kv_heads == 2 && c.head_dim == 32 &&
              c.rope_type == TFM_ROPE_LINEAR && c.rope_factor == 2 &&
              strcmp(info.torch_dtype, "bfloat16") == 0);
    CU_ASSERT_EQUAL(parse(BASE("qwen3") "}", &c, NULL), 0);
    CU_ASSERT_EQUAL(c.head_dim, 128); /* transformers' Qwen3Config default */
    /* no model_type: architectures */
    CU_ASSERT_EQUAL(parse("{\"architectures\": [\"Qwen2ForCausalLM\"], \"hidden_size\": 64, "
                          "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                          "\"intermediate_size\": 96, \"vocab_size\": 300}", &c, NULL), 0);
    CU_ASSERT_EQUAL(c.family, TFM_QWEN2);
    /* rope_parameters (newer transformers) */
    CU_ASSERT_EQUAL(parse(BASE("llama") ", \"rope_parameters\": {\"rope_type\": \"yarn\", "
                          "\"factor\": 4, \"rope_theta\": 50000}}", &c, NULL), 0);
    CU_ASSERT(c.rope_type == TFM_ROPE_YARN && c.rope_factor == 4 && c.rope_theta == 50000);
    CU_ASSERT_EQUAL(parse(BASE("llama") ", \"rope_scaling\": {\"rope_type\": \"default\"}}",
                          &c, NULL), 0);
    CU_ASSERT_EQUAL(c.rope_type, TFM_ROPE_DEFAULT);
}

static void test_config_bad(void)
{
    parse_fails("{\"model_type\": ", "not valid JSON");
    parse_fails("[1]", "not a JSON object");
    parse_fails(BASE("mistral") "}", "model_type: \"mistral\" is not supported");
    parse_fails("{\"hidden_size\": 64}", "model_type: missing");
    parse_fails("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
                "\"intermediate_size\": 96, \"vocab_size\": 300}",
                "num_attention_heads: missing");
    parse_fails(BASE("llama") ", \"num_key_value_heads\": \"2\"}",
                "num_key_value_heads: is a string, expected an integer");
    parse_fails(BASE("llama") ", \"rms_norm_eps\": true}", "rms_norm_eps: is a boolean");
    parse_fails(BASE("llama") ", \"tie_word_embeddings\": 1}", "tie_word_embeddings: is an "
                "integer, expected true or false");
    parse_fails(BASE("llama") ", \"rope_scaling\": {\"rope_type\": \"dynamic\", "
                "\"factor\": 2}}", "rope_scaling.rope_type: \"dynamic\" is not supported");
    parse_fails(BASE("llama") ", \"rope_scaling\": {\"type\": \"longrope\"}}",
                "\"longrope\" is not supported");
    parse_fails(BASE("llama") ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, "
                "\"low_freq_factor\": 1, \"high_freq_factor\": 4}}",
                "rope_scaling.original_max_position_embeddings: missing");
    parse_fails(BASE("llama") ", \"rope_scaling\": {\"rope_type\": \"linear\"}}",
                "rope_scaling.factor: missing");
    parse_fails(BASE("llama") ", \"rope_scaling\": {\"factor\": 2}}",
                "rope_scaling.rope_type: missing");
    parse_fails(BASE("llama") ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4, "
                "\"mscale\": 1}}", "mscale");
    parse_fails(BASE("llama") ", \"rope_scaling\": 3}", "rope_scaling: is an integer");
    parse_fails(BASE("llama") ", \"hidden_act\": \"gelu\"}", "hidden_act");
    parse_fails(BASE("llama") ", \"mlp_bias\": true}", "mlp_bias");
    parse_fails(BASE("qwen2") ", \"use_sliding_window\": true}", "use_sliding_window");
    parse_fails(BASE("llama") ", \"num_key_value_heads\": 3}", "must divide");
    parse_fails(BASE("llama") ", \"eos_token_id\": \"x\"}", "eos_token_id");
    parse_fails(BASE("llama") ", \"hidden_size\": 99999999999}", "hidden_size");
}

/* ---- the loader's checks against config.json ---- */

/* A good f32 directory of c (tiny llama, untied) to break. */
static const char *good_dir(const char *name, struct tfm_config *c, struct tfm_params *p)
{
    *c = tiny(TFM_LLAMA, 0);
    random_model(p, c, 3);
    const char *dir = newdir(name);
    CU_ASSERT_EQUAL_FATAL(hf_save(dir, c, p, NULL, ST_F32, ST_DEFAULT_MAX_SHARD, err,
                                  sizeof err), 0);
    return dir;
}

static void load_fails(const char *dir, const char *want)
{
    struct tfm_config c;
    struct tfm_params p;
    err[0] = '\0';
    CU_ASSERT_EQUAL(hf_load(dir, &c, &p, err, sizeof err), -1);
    CU_ASSERT(p.mem == NULL);
    if (!strstr(err, want)) fprintf(stderr, "\n  want '%s', got: %s\n", want, err);
    CU_ASSERT(strstr(err, want) != NULL);
}

/* The model's tensors except drop (NULL: all), plus extra ones, written to dir. */
static void write_tensors(const char *dir, const struct tfm_config *c,
                          const struct tfm_params *p, const char *drop,
                          const struct st_src *extra, int n_extra)
{
    int n = tfm_tensors(c, p, NULL, 0);
    struct tfm_tensor *t = malloc(sizeof *t * (size_t)n);
    struct st_src *s = calloc((size_t)(n + n_extra), sizeof *s);
    tfm_tensors(c, p, t, n);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (drop && strcmp(t[i].name, drop) == 0) continue;
        s[k++] = (struct st_src){t[i].name, t[i].data, t[i].ndim, {t[i].dims[0], t[i].dims[1]}};
    }
    for (int i = 0; i < n_extra; i++) s[k++] = extra[i];
    CU_ASSERT_EQUAL(st_write(join(dir, "model.safetensors"), s, k, ST_F32, err, sizeof err), 0);
    free(s);
    free(t);
}

static void test_load_checks(void)
{
    struct tfm_config c, c2;
    struct tfm_params p, q;
    const char *dir = good_dir("checks", &c, &p);
    const char *cfg = join(dir, "config.json");

    /* extra tensors (rotary inv_freq) are ignored; a tied model ignores lm_head */
    float inv[2] = {1, 0.5f};
    struct st_src extra = {"model.layers.0.self_attn.rotary_emb.inv_freq", inv, 1, {2}};
    write_tensors(dir, &c, &p, NULL, &extra, 1);
    CU_ASSERT_EQUAL(hf_load(dir, &c2, &q, err, sizeof err), 0);
    CU_ASSERT(same_params(&p, &q));
    tfm_params_free(&q);
    struct tfm_config tied = c;
    tied.tie_word_embeddings = 1;
    CU_ASSERT_EQUAL(hf_config_write(cfg, &tied, NULL, err, sizeof err), 0);
    CU_ASSERT_EQUAL(hf_load(dir, &c2, &q, err, sizeof err), 0);
    CU_ASSERT(c2.tie_word_embeddings == 1 && q.lm_head == q.embed);
    CU_ASSERT(memcmp(q.embed, p.embed, sizeof(float) * 37 * 16) == 0);
    tfm_params_free(&q);
    CU_ASSERT_EQUAL(hf_config_write(cfg, &c, NULL, err, sizeof err), 0);

    /* untied without lm_head; a missing layer tensor */
    write_tensors(dir, &c, &p, "lm_head.weight", NULL, 0);
    load_fails(dir, "1 tensor that config.json");
    load_fails(dir, "lm_head.weight");
    write_tensors(dir, &c, &p, "model.layers.1.mlp.up_proj.weight", NULL, 0);
    load_fails(dir, "model.layers.1.mlp.up_proj.weight");
    write_tensors(dir, &c, &p, NULL, NULL, 0);

    /* shape mismatch: config.json says 1 kv head, the file has 2 */
    struct tfm_config k1 = c;
    k1.n_kv_heads = 1;
    CU_ASSERT_EQUAL(hf_config_write(cfg, &k1, NULL, err, sizeof err), 0);
    load_fails(dir, "model.safetensors: tensor \"model.layers.0.self_attn.k_proj.weight\": "
               "shape [8, 16] in the file, [4, 16] expected from config.json "
               "(num_key_value_heads 1, head_dim 4)");
    /* more layers than the file has */
    struct tfm_config l3 = c;
    l3.n_layers = 3;
    CU_ASSERT_EQUAL(hf_config_write(cfg, &l3, NULL, err, sizeof err), 0);
    load_fails(dir, "model.layers.2.input_layernorm.weight");
    /* absurd layer counts end in a message, not an allocation */
    put_text(cfg, "{\"model_type\": \"llama\", \"hidden_size\": 16, \"num_hidden_layers\": "
                  "2000000000, \"num_attention_heads\": 4, \"intermediate_size\": 24, "
                  "\"vocab_size\": 37}");
    load_fails(dir, "does not describe these weights");
    /* a float tensor stored as I32 (same size, so the file itself is valid) */
    CU_ASSERT_EQUAL(hf_config_write(cfg, &c, NULL, err, sizeof err), 0);
    const char *st = join(dir, "model.safetensors");
    FILE *f = fopen(st, "r+b");
    CU_ASSERT_FATAL(f != NULL);
    char head[4096];
    size_t got = fread(head, 1, sizeof head, f);
    const char *pat = "\"model.norm.weight\":{\"dtype\":\"F32\"";
    char *at = NULL;
    for (size_t i = 0; !at && i + strlen(pat) <= got; i++)
        if (memcmp(head + i, pat, strlen(pat)) == 0) at = head + i;
    CU_ASSERT_FATAL(at != NULL);
    fseek(f, (long)(at - head) + (long)strlen(pat) - 4, SEEK_SET);
    fputs("I32", f);
    fclose(f);
    load_fails(dir, "\"model.norm.weight\" has dtype I32");
    /* config.json problems reach hf_load with the file named */
    write_tensors(dir, &c, &p, NULL, NULL, 0);
    put_text(cfg, "not json");
    load_fails(dir, "config.json: not valid JSON");
    put_text(cfg, BASE("gemma") "}");
    load_fails(dir, "\"gemma\" is not supported");
    unlink(cfg);
    load_fails(dir, "config.json: cannot read");
    CU_ASSERT_EQUAL(hf_config_write(cfg, &c, NULL, err, sizeof err), 0);
    unlink(st);
    load_fails(dir, "no model.safetensors");
    /* a truncated weights file */
    write_tensors(dir, &c, &p, NULL, NULL, 0);
    struct stat sb;
    CU_ASSERT_FATAL(stat(st, &sb) == 0);
    CU_ASSERT_EQUAL(truncate(st, sb.st_size - 100), 0);
    load_fails(dir, "out of range");
    tfm_params_free(&p);
}

/* ---- TP slices ---- */

static void no_f32(void *c, float *x, size_t n, enum tfm_red_op op)
{
    (void)c, (void)x, (void)n, (void)op;
    CU_FAIL("collective");
}
static void no_f64(void *c, double *x, size_t n, enum tfm_red_op op)
{
    (void)c, (void)x, (void)n, (void)op;
    CU_FAIL("collective");
}
static void no_i32(void *c, int32_t *x, size_t n, enum tfm_red_op op)
{
    (void)c, (void)x, (void)n, (void)op;
    CU_FAIL("collective");
}

static void check_slices(const char *dir, const struct tfm_config *c,
                         const struct tfm_params *full, int t)
{
    for (int i = 0; i < t; i++) {
        int share = c->n_kv_heads < t ? t / c->n_kv_heads : 1;
        struct tfm_comm comm = {i, t, NULL, no_f32, no_f64, no_i32};
        struct tfm_comm kv = {i % share, share, NULL, no_f32, no_f64, no_i32};
        struct tfm_tp tp;
        tfm_tp_init(&tp, c, t, i, t > 1 ? &comm : NULL, share > 1 ? &kv : NULL);
        struct tfm_params want, got;
        tfm_params_alloc(&want, &tp.local);
        tfm_params_alloc(&got, &tp.local);
        tfm_tp_shard(&tp, full, &want);
        CU_ASSERT_EQUAL(hf_load_slices(dir, &tp, &got, err, sizeof err), 0);
        CU_ASSERT(same_params(&want, &got));
        /* as bf16: the same values rounded, at the same offsets */
        uint16_t *got16 = malloc(want.n * sizeof *got16);
        CU_ASSERT_FATAL(got16 != NULL);
        CU_ASSERT_EQUAL(hf_load_slices_bf16(dir, &tp, &got, got16, err, sizeof err), 0);
        size_t bad = 0;
        for (size_t k = 0; k < want.n; k++) bad += got16[k] != st_f32_to_bf16(want.mem[k]);
        CU_ASSERT_EQUAL(bad, 0);
        free(got16);
        tfm_params_free(&got);
        tfm_params_free(&want);
    }
}

static void test_tp_slices(void)
{
    struct tfm_config c = tiny(TFM_QWEN2, 0), c2; /* H 4, K 2: t = 4 replicates kv heads */
    struct tfm_params p, q;
    random_model(&p, &c, 21);
    const char *dir = newdir("tp");
    CU_ASSERT_EQUAL_FATAL(hf_save(dir, &c, &p, NULL, ST_BF16, 2000, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(hf_load(dir, &c2, &q, err, sizeof err), 0);
    for (int t = 1; t <= 4; t *= 2) check_slices(dir, &c, &q, t);
    tfm_params_free(&q);
    tfm_params_free(&p);
    c = tiny(TFM_QWEN3, 1);
    c.intermediate_size = 32;
    random_model(&p, &c, 22);
    dir = newdir("tp3");
    CU_ASSERT_EQUAL_FATAL(hf_save(dir, &c, &p, NULL, ST_F16, ST_DEFAULT_MAX_SHARD, err,
                                  sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(hf_load(dir, &c2, &q, err, sizeof err), 0);
    check_slices(dir, &c, &q, 2);
    check_slices(dir, &c, &q, 4);
    tfm_params_free(&q);
    dir = newdir("tp3-f32"); /* float32 tensors: the bf16 read rounds them */
    CU_ASSERT_EQUAL_FATAL(hf_save(dir, &c, &p, NULL, ST_F32, ST_DEFAULT_MAX_SHARD, err,
                                  sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(hf_load(dir, &c2, &q, err, sizeof err), 0);
    check_slices(dir, &c, &q, 2);
    /* a tp of another model is refused */
    struct tfm_config other = c;
    other.n_layers = 3;
    struct tfm_tp tp;
    tfm_tp_init(&tp, &other, 1, 0, NULL, NULL);
    struct tfm_params loc;
    tfm_params_alloc(&loc, &tp.local);
    CU_ASSERT_EQUAL(hf_load_slices(dir, &tp, &loc, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "another model") != NULL);
    tfm_params_free(&loc);
    tfm_params_free(&q);
    tfm_params_free(&p);
}

/* ---- one loader for every format ---- */

static void test_model_load(void)
{
    struct tfm_config c = tiny(TFM_QWEN3, 1), c2;
    struct tfm_params p, q;
    struct model_source src;
    random_model(&p, &c, 31);
    const char *hf = newdir("ml-hf"), *ck = newdir("ml-ckpt");
    CU_ASSERT_EQUAL_FATAL(hf_save(hf, &c, &p, NULL, ST_F32, ST_DEFAULT_MAX_SHARD, err,
                                  sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(model_load(hf, &c2, &q, NULL, &src, err, sizeof err), 0);
    CU_ASSERT(src.format == MODEL_HF && src.hf_dir[0] == '/' && same_params(&p, &q));
    char hf_abs[PATH_MAX];
    CU_ASSERT_FATAL(realpath(hf, hf_abs) != NULL);
    CU_ASSERT_STRING_EQUAL(src.hf_dir, hf_abs);
    tfm_params_free(&q);
    CU_ASSERT_EQUAL_FATAL(model_load(join(hf, "config.json"), &c2, &q, NULL, &src, err,
                                     sizeof err), 0);
    CU_ASSERT(src.format == MODEL_HF && same_params(&p, &q));
    tfm_params_free(&q);
    /* an HDF5 model file with provenance tags, and a checkpoint directory holding it */
    struct tfm_tag tags[2] = {{TFM_TAG_HF_SOURCE, hf_abs}, {TFM_TAG_RUN_NAME, "run-x"}};
    const char *h5 = join(ck, "model.h5");
    CU_ASSERT_EQUAL_FATAL(tfm_save_tagged(h5, &c, &p, NULL, tags, 2, err, sizeof err), 0);
    struct adamw opt;
    CU_ASSERT_EQUAL_FATAL(model_load(h5, &c2, &q, &opt, &src, err, sizeof err), 0);
    CU_ASSERT(src.format == MODEL_HDF5 && same_params(&p, &q) && opt.n == 0);
    CU_ASSERT_STRING_EQUAL(src.hf_dir, hf_abs);
    CU_ASSERT_STRING_EQUAL(src.run_name, "run-x");
    tfm_params_free(&q);
    CU_ASSERT_EQUAL_FATAL(model_load(ck, &c2, &q, NULL, &src, err, sizeof err), 0);
    CU_ASSERT(src.format == MODEL_HDF5 && same_params(&p, &q));
    CU_ASSERT_STRING_EQUAL(src.file, h5);
    tfm_params_free(&q);
    char tag[64];
    CU_ASSERT_EQUAL(tfm_read_tag(h5, "libra_nothing", tag, sizeof tag, err, sizeof err), 0);
    /* neither */
    const char *empty = newdir("ml-empty");
    CU_ASSERT_EQUAL(model_load(empty, &c2, &q, NULL, &src, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "neither config.json") != NULL && q.mem == NULL);
    put_text(join(empty, "x.txt"), "hello");
    CU_ASSERT_EQUAL(model_load(join(empty, "x.txt"), &c2, &q, NULL, &src, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "not an HDF5 file") != NULL && strstr(err, "Hugging Face") != NULL);
    CU_ASSERT_EQUAL(model_load(join(empty, "nope"), &c2, &q, NULL, &src, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "No such file") != NULL);
    tfm_params_free(&p);
}

int main(void)
{
    static const struct test_case conv[] = {
        {"bf16: every pattern round trips, rounding", test_bf16_exhaustive},
        {"f16: every pattern round trips, subnormals, rounding", test_f16_conversions},
        {NULL, NULL}};
    static const struct test_case files[] = {
        {"write, open, read, blocks", test_st_file},
        {"bad files: each a clear error", test_st_bad_files},
        {NULL, NULL}};
    static const struct test_case models[] = {
        {"f32 save/load bit for bit (3 families, tied/untied)", test_f32_round_trip},
        {"bf16 export -> import -> export: same bytes", test_bf16_round_trip},
        {"sharded loads like one file; broken indexes", test_sharded},
        {"config.json round trips (rope scaling, bias, qk_norm)", test_config_round_trip},
        {"config.json defaults and spellings", test_config_defaults},
        {"config.json errors name the key", test_config_bad},
        {"loader checks against config.json", test_load_checks},
        {"TP slices equal the slices of the full load", test_tp_slices},
        {"model_load: HDF5, checkpoint dir, HF dir, neither", test_model_load},
        {NULL, NULL}};
    static const struct test_suite suites[] = {
        {"conversions", conv}, {"safetensors", files}, {"hf models", models}, {NULL, NULL}};
    return test_main(suites);
}
