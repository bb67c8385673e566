/*
 * Hugging Face weights <-> struct tfm_params (include/libra/hf_model.h; config.json is
 * hf_config.c): the loader of a whole model, the loader of one tensor-parallel rank's
 * slices, and the writer.
 *
 * Loading validates before it allocates: the tensors config.json implies (names and
 * shapes, enumerated here from the config alone, then checked against tfm_tensors'
 * table once allocated) must all be in the safetensors with those shapes and a float
 * dtype, so a config.json that does not describe the files, or absurd sizes, end in
 * a message rather than a huge allocation. Reading converts straight from the mapped
 * files into the parameter block.
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/hf_model.h"
#include "libra/errmsg.h"

#include "libra/afile.h"
#include "libra/log.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ---- the tensors a config implies ---- */

/* Config fields behind a dimension, for shape messages. */
enum { F_V = 1, F_C = 2, F_H = 4, F_K = 8, F_D = 16, F_F = 32 };

struct want {
    char name[96];
    int ndim;
    int64_t dims[2];
    int why[2]; /* F_* masks of the fields behind each dimension */
};

static int add_want(struct want *w, int n, int64_t d0, int f0, int64_t d1, int f1,
                    const char *fmt, int layer)
{
    struct want *x = &w[n];
    snprintf(x->name, sizeof x->name, fmt, layer);
    x->ndim = d1 > 0 ? 2 : 1;
    x->dims[0] = d0;
    x->dims[1] = d1 > 0 ? d1 : 0;
    x->why[0] = f0;
    x->why[1] = f1;
    return n + 1;
}

/* Every tensor of c in tfm_tensors() order (w holds want_count(c) entries). */
static int want_count(const struct tfm_config *c)
{
    int per = 9 + (c->attention_bias ? 3 : 0) + (c->qk_norm ? 2 : 0);
    return 2 + c->n_layers * per + (c->tie_word_embeddings ? 0 : 1);
}

static int want_list(const struct tfm_config *c, struct want *w)
{
    int64_t V = c->vocab_size, C = c->hidden_size, D = c->head_dim, F = c->intermediate_size;
    int64_t HD = (int64_t)c->n_heads * D, KD = (int64_t)c->n_kv_heads * D;
    int n = 0;
    n = add_want(w, n, V, F_V, C, F_C, "model.embed_tokens.weight", 0);
    for (int l = 0; l < c->n_layers; l++) {
        n = add_want(w, n, C, F_C, 0, 0, "model.layers.%d.input_layernorm.weight", l);
        n = add_want(w, n, HD, F_H | F_D, C, F_C, "model.layers.%d.self_attn.q_proj.weight", l);
        if (c->attention_bias)
            n = add_want(w, n, HD, F_H | F_D, 0, 0, "model.layers.%d.self_attn.q_proj.bias", l);
        n = add_want(w, n, KD, F_K | F_D, C, F_C, "model.layers.%d.self_attn.k_proj.weight", l);
        if (c->attention_bias)
            n = add_want(w, n, KD, F_K | F_D, 0, 0, "model.layers.%d.self_attn.k_proj.bias", l);
        n = add_want(w, n, KD, F_K | F_D, C, F_C, "model.layers.%d.self_attn.v_proj.weight", l);
        if (c->attention_bias)
            n = add_want(w, n, KD, F_K | F_D, 0, 0, "model.layers.%d.self_attn.v_proj.bias", l);
        if (c->qk_norm) {
            n = add_want(w, n, D, F_D, 0, 0, "model.layers.%d.self_attn.q_norm.weight", l);
            n = add_want(w, n, D, F_D, 0, 0, "model.layers.%d.self_attn.k_norm.weight", l);
        }
        n = add_want(w, n, C, F_C, HD, F_H | F_D, "model.layers.%d.self_attn.o_proj.weight", l);
        n = add_want(w, n, C, F_C, 0, 0, "model.layers.%d.post_attention_layernorm.weight", l);
        n = add_want(w, n, F, F_F, C, F_C, "model.layers.%d.mlp.gate_proj.weight", l);
        n = add_want(w, n, F, F_F, C, F_C, "model.layers.%d.mlp.up_proj.weight", l);
        n = add_want(w, n, C, F_C, F, F_F, "model.layers.%d.mlp.down_proj.weight", l);
    }
    n = add_want(w, n, C, F_C, 0, 0, "model.norm.weight", 0);
    if (!c->tie_word_embeddings) n = add_want(w, n, V, F_V, C, F_C, "lm_head.weight", 0);
    return n;
}

/* The parameter count of c in double (no overflow for any ints). */
static double count_f64(const struct tfm_config *c)
{
    double V = c->vocab_size, C = c->hidden_size, L = c->n_layers, D = c->head_dim;
    double HD = (double)c->n_heads * D, KD = (double)c->n_kv_heads * D, F = c->intermediate_size;
    double layer = 2 * C + 2 * HD * C + 2 * KD * C + 3 * F * C;
    if (c->attention_bias) layer += HD + 2 * KD;
    if (c->qk_norm) layer += 2 * D;
    return V * C * (c->tie_word_embeddings ? 1 : 2) + L * layer + C;
}

/* "(num_key_value_heads 2, head_dim 16)" for the fields in mask. */
static void describe_fields(char *out, size_t n, int mask, const struct tfm_config *c)
{
    const struct {
        int bit;
        const char *name;
        int value;
    } f[] = {
        {F_V, "vocab_size", c->vocab_size},       {F_C, "hidden_size", c->hidden_size},
        {F_H, "num_attention_heads", c->n_heads}, {F_K, "num_key_value_heads", c->n_kv_heads},
        {F_D, "head_dim", c->head_dim},           {F_F, "intermediate_size", c->intermediate_size},
    };
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (!(mask & f[i].bit) || used + 1 >= n) continue;
        int w = snprintf(out + used, n - used, "%s%s %d", used ? ", " : " (", f[i].name,
                         f[i].value);
        used += w > 0 ? (size_t)w : 0;
    }
    if (used && used + 1 < n) snprintf(out + used, n - used, ")");
}

static void format_dims(char *out, size_t n, int ndim, const int64_t *dims)
{
    size_t used = 0;
    out[0] = '\0';
    used += (size_t)snprintf(out, n, "[");
    for (int i = 0; i < ndim && used + 1 < n; i++) {
        int w = snprintf(out + used, n - used, "%s%lld", i ? ", " : "", (long long)dims[i]);
        used += w > 0 ? (size_t)w : 0;
    }
    if (used + 1 < n) snprintf(out + used, n - used, "]");
}

/*
 * Checks every tensor c implies against the set: present, float dtype, shape. Returns
 * the wants (malloc'ed, *nw of them) with their entries in *found, or NULL with a
 * message. Entries of the set not wanted are reported with one LOG_I note.
 */
static struct want *check_set(const char *dir, const struct tfm_config *c,
                              const struct st_set *s, int *nw, const struct st_entry ***found,
                              char *err, size_t errlen)
{
    const char *cfgname = HF_CONFIG_NAME;
    /* absurd sizes: the list of wanted names would itself be huge; each one must be a
     * tensor of the set, so far more of them than the set holds is a config that does
     * not describe these files */
    double nwant = 2.0 + (double)c->n_layers * (9 + (c->attention_bias ? 3 : 0) +
                                                 (c->qk_norm ? 2 : 0)) + 1;
    if (nwant > (double)s->n + 100000) {
        errmsg_set(err, errlen, "%s/%s: implies %.4g tensors (num_hidden_layers %d) and %.4g "
                   "parameters, but the safetensors hold %d tensors: config.json does not "
                   "describe these weights", dir, cfgname, nwant, c->n_layers, count_f64(c),
                   s->n);
        return NULL;
    }
    int n = want_count(c);
    struct want *w = xmalloc(sizeof *w * (size_t)n);
    if (want_list(c, w) != n) FATAL("hf_load: tensor count mismatch (a bug)");
    const struct st_entry **e = xcalloc((size_t)n, sizeof *e);
    char *used = xcalloc((size_t)(s->n ? s->n : 1), 1);
    int missing = 0;
    for (int i = 0; i < n; i++) {
        e[i] = st_set_find(s, w[i].name);
        if (!e[i]) {
            missing++;
            continue;
        }
        used[e[i] - s->e] = 1;
    }
    if (missing) {
        errmsg_set(err, errlen, "%s: %d tensor%s that %s (model_type %s, num_hidden_layers %d, "
                   "attention_bias %s, tie_word_embeddings %s) implies %s missing from the "
                   "safetensors:", dir, missing, missing > 1 ? "s" : "", cfgname,
                   tfm_family_name(c->family), c->n_layers, c->attention_bias ? "true" : "false",
                   c->tie_word_embeddings ? "true" : "false", missing > 1 ? "are" : "is");
        int shown = 0;
        for (int i = 0; i < n && shown < 6; i++)
            if (!e[i]) errmsg_add(err, errlen, "%s %s", shown++ ? "," : "", w[i].name);
        if (missing > shown) errmsg_add(err, errlen, ", ...");
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        const struct st_tensor *t = e[i]->t;
        const char *file = s->files[e[i]->file].path;
        if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16) {
            errmsg_set(err, errlen, "%s: tensor \"%s\" has dtype %s: libra reads BF16, F16 and "
                       "F32", file, t->name, st_dtype_name(t->dtype));
            goto fail;
        }
        int same = t->ndim == w[i].ndim, mask = 0;
        for (int k = 0; k < w[i].ndim; k++) {
            int differs = k >= t->ndim || t->shape[k] != w[i].dims[k];
            same &= !differs;
            if (differs || t->ndim != w[i].ndim) mask |= w[i].why[k];
        }
        if (!same) {
            char fs[160], ws[64], why[200];
            format_dims(fs, sizeof fs, t->ndim, t->shape);
            format_dims(ws, sizeof ws, w[i].ndim, w[i].dims);
            describe_fields(why, sizeof why, mask, c);
            errmsg_set(err, errlen, "%s: tensor \"%s\": shape %s in the file, %s expected from "
                       "%s%s", file, t->name, fs, ws, cfgname, why);
            goto fail;
        }
    }
    int extra = 0;
    char names[256] = "";
    for (int k = 0; k < s->n; k++) {
        if (used[k]) continue;
        if (c->tie_word_embeddings && strcmp(s->e[k].name, "lm_head.weight") == 0) {
            LOG_I("%s: lm_head.weight ignored: the model is tied (tie_word_embeddings true: "
                  "the output head is the embedding)", dir);
            continue;
        }
        size_t len = strlen(names);
        if (extra < 4 && len + 1 < sizeof names)
            snprintf(names + len, sizeof names - len, "%s%s", extra ? ", " : "", s->e[k].name);
        extra++;
    }
    if (extra)
        LOG_I("%s: %d tensor%s libra does not use ignored: %s%s", dir, extra,
              extra > 1 ? "s" : "", names, extra > 4 ? ", ..." : "");
    free(used);
    *nw = n;
    *found = e;
    return w;
fail:
    free(used);
    free(e);
    free(w);
    return NULL;
}

int hf_load(const char *dir, struct tfm_config *c, struct tfm_params *p, char *err,
            size_t errlen)
{
    struct tfm_config cfg;
    struct st_set s;
    struct want *w = NULL;
    const struct st_entry **e = NULL;
    struct tfm_tensor *t = NULL;
    memset(p, 0, sizeof *p);
    memset(&s, 0, sizeof s);
    if (hf_config_read(dir, &cfg, NULL, err, errlen)) goto fail;
    if (st_set_open(&s, dir, err, errlen)) goto fail;
    int n;
    w = check_set(dir, &cfg, &s, &n, &e, err, errlen);
    if (!w) goto fail;
    tfm_params_alloc(p, &cfg);
    t = xmalloc(sizeof *t * (size_t)n);
    if (tfm_tensors(&cfg, p, t, n) != n) FATAL("hf_load: tfm_tensors disagrees (a bug)");
    for (int i = 0; i < n; i++) {
        if (strcmp(t[i].name, w[i].name) != 0 || t[i].ndim != w[i].ndim)
            FATAL("hf_load: tensor %d is %s in tfm_tensors, %s here (a bug)", i, t[i].name,
                  w[i].name);
        if (st_read(&s.files[e[i]->file], e[i]->t, t[i].data, err, errlen)) goto fail;
    }
    free(t);
    free(w);
    free(e);
    st_set_close(&s);
    *c = cfg;
    return 0;
fail:
    free(t);
    free(w);
    free(e);
    st_set_close(&s);
    tfm_params_free(p);
    memset(p, 0, sizeof *p);
    memset(c, 0, sizeof *c);
    return -1;
}

/* The fields that decide tensor names and shapes. */
static int same_model(const struct tfm_config *a, const struct tfm_config *b)
{
    return a->family == b->family && a->vocab_size == b->vocab_size &&
           a->hidden_size == b->hidden_size && a->n_layers == b->n_layers &&
           a->n_heads == b->n_heads && a->n_kv_heads == b->n_kv_heads &&
           a->head_dim == b->head_dim && a->intermediate_size == b->intermediate_size &&
           a->tie_word_embeddings == b->tie_word_embeddings &&
           a->attention_bias == b->attention_bias && a->qk_norm == b->qk_norm;
}

/* hf_load_slices into p_local's floats, or, when out16 is not NULL, into out16 at the
 * same offsets (p_local's memory untouched). */
static int load_slices(const char *dir, const struct tfm_tp *tp,
                       const struct tfm_params *p_local, uint16_t *out16, char *err,
                       size_t errlen)
{
    struct tfm_config cfg;
    struct st_set s;
    struct want *w = NULL;
    const struct st_entry **e = NULL;
    struct tfm_slice *sl = NULL;
    int rc = -1;
    memset(&s, 0, sizeof s);
    if (hf_config_read(dir, &cfg, NULL, err, errlen)) goto out;
    if (!same_model(&cfg, &tp->full)) {
        errmsg_set(err, errlen, "%s/%s describes another model than the one being sharded "
                   "(hidden_size %d vs %d, num_hidden_layers %d vs %d, vocab_size %d vs %d)",
                   dir, HF_CONFIG_NAME, cfg.hidden_size, tp->full.hidden_size, cfg.n_layers,
                   tp->full.n_layers, cfg.vocab_size, tp->full.vocab_size);
        goto out;
    }
    if (p_local->n != tfm_param_count(&tp->local)) {
        errmsg_set(err, errlen, "%s: the shard's parameter block holds %zu floats, %zu "
                   "expected (allocate it with tfm_params_alloc(&tp->local))", dir, p_local->n,
                   tfm_param_count(&tp->local));
        goto out;
    }
    if (st_set_open(&s, dir, err, errlen)) goto out;
    int nw;
    w = check_set(dir, &cfg, &s, &nw, &e, err, errlen);
    if (!w) goto out;
    int n = tfm_tp_slices(tp, p_local, NULL, 0);
    sl = xmalloc(sizeof *sl * (size_t)n);
    tfm_tp_slices(tp, p_local, sl, n);
    if (n != nw) FATAL("hf_load_slices: %d slices for %d tensors (a bug)", n, nw);
    for (int i = 0; i < n; i++) {
        if (strcmp(sl[i].name, w[i].name) != 0)
            FATAL("hf_load_slices: slice %d is %s, tensor %s (a bug)", i, sl[i].name,
                  w[i].name);
        const struct st_file *f = &s.files[e[i]->file];
        if (out16 ? st_read_block_bf16(f, e[i]->t, sl[i].r0, sl[i].nr, sl[i].c0, sl[i].nc,
                                       out16 + (sl[i].local - p_local->mem), err, errlen)
                  : st_read_block(f, e[i]->t, sl[i].r0, sl[i].nr, sl[i].c0, sl[i].nc,
                                  sl[i].local, err, errlen))
            goto out;
    }
    rc = 0;
out:
    free(sl);
    free(w);
    free(e);
    st_set_close(&s);
    return rc;
}

int hf_load_slices(const char *dir, const struct tfm_tp *tp, struct tfm_params *p_local,
                   char *err, size_t errlen)
{
    return load_slices(dir, tp, p_local, NULL, err, errlen);
}

int hf_load_slices_bf16(const char *dir, const struct tfm_tp *tp,
                        const struct tfm_params *p_local, uint16_t *out, char *err,
                        size_t errlen)
{
    return load_slices(dir, tp, p_local, out, err, errlen);
}

/* ---- writing ---- */

static const char *torch_dtype_of(enum st_dtype d)
{
    return d == ST_F32 ? "float32" : d == ST_F16 ? "float16" : "bfloat16";
}

static int write_generation_config(const char *dir, const struct hf_info *info, char *err,
                                   size_t errlen)
{
    json_t *o = json_object();
    json_object_set_new(o, "_from_model_config", json_true());
    if (info->bos_token_id >= 0)
        json_object_set_new(o, "bos_token_id", json_integer(info->bos_token_id));
    if (info->n_eos == 1) {
        json_object_set_new(o, "eos_token_id", json_integer(info->eos_token_id[0]));
    } else if (info->n_eos > 1) {
        json_t *a = json_array();
        for (int i = 0; i < info->n_eos; i++)
            json_array_append_new(a, json_integer(info->eos_token_id[i]));
        json_object_set_new(o, "eos_token_id", a);
    }
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!text) FATAL("generation_config.json: json_dumps failed (out of memory?)");
    size_t n = strlen(text);
    text = xrealloc(text, n + 2);
    text[n] = '\n';
    text[n + 1] = '\0';
    size_t pl = strlen(dir) + 32;
    char *path = xmalloc(pl);
    snprintf(path, pl, "%s/generation_config.json", dir);
    int rc = afile_put(path, text, n + 1, err, errlen);
    free(path);
    free(text);
    return rc;
}

int hf_save(const char *dir, const struct tfm_config *c, const struct tfm_params *p,
            const struct hf_info *info, enum st_dtype dtype, uint64_t max_shard_bytes,
            char *err, size_t errlen)
{
    struct hf_info meta;
    if (info) meta = *info;
    else hf_info_init(&meta);
    if (dtype != ST_F32 && dtype != ST_F16 && dtype != ST_BF16) {
        errmsg_set(err, errlen, "%s: weights can be written as bf16, f16 or f32 only", dir);
        return -1;
    }
    snprintf(meta.torch_dtype, sizeof meta.torch_dtype, "%s", torch_dtype_of(dtype));
    /* config.json first in memory: what HF cannot express fails before any write */
    char *config = hf_config_dump(c, &meta, err, errlen);
    if (!config) return -1;
    if (!p->mem || p->n != tfm_param_count(c)) {
        errmsg_set(err, errlen, "%s: the parameters (%zu floats) do not match the config (%zu)",
                   dir, p->n, tfm_param_count(c));
        free(config);
        return -1;
    }
    int n = tfm_tensors(c, p, NULL, 0);
    struct tfm_tensor *t = xmalloc(sizeof *t * (size_t)n);
    struct st_src *src = xcalloc((size_t)n, sizeof *src);
    tfm_tensors(c, p, t, n);
    for (int i = 0; i < n; i++) {
        src[i].name = t[i].name;
        src[i].data = t[i].data;
        src[i].ndim = t[i].ndim;
        src[i].shape[0] = t[i].dims[0];
        src[i].shape[1] = t[i].dims[1];
    }
    int rc = st_write_dir(dir, src, n, dtype, max_shard_bytes, NULL, err, errlen);
    if (rc == 0) {
        size_t pl = strlen(dir) + sizeof HF_CONFIG_NAME + 2;
        char *path = xmalloc(pl);
        snprintf(path, pl, "%s/%s", dir, HF_CONFIG_NAME);
        rc = afile_put(path, config, strlen(config), err, errlen);
        free(path);
    }
    if (rc == 0 && (meta.bos_token_id >= 0 || meta.n_eos > 0))
        rc = write_generation_config(dir, &meta, err, errlen);
    free(src);
    free(t);
    free(config);
    return rc;
}
