/*
 * config.json <-> struct tfm_config (include/libra/hf_model.h) for the llama, qwen2
 * and qwen3 families, with transformers' defaults for absent keys and a refusal, with
 * the key named, for anything that would change the model's math that libra does not
 * implement (another activation, MLP biases, sliding-window attention, rope types
 * other than default / linear / llama3 / yarn).
 *
 * Newer transformers releases write "dtype" for "torch_dtype" and may move rope_theta
 * and the scaling into "rope_parameters"; both spellings are read, the classic ones
 * written. Floats are written as the shortest decimal that reads back as the same
 * float32 (1e-06, not 9.99999997e-07).
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/hf_model.h"
#include "libra/errmsg.h"

#include "libra/afile.h"
#include "libra/log.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct family {
    const char *model_type, *architecture;
    int max_position; /* transformers' default max_position_embeddings */
    int head_dim;     /* default head_dim; 0: hidden_size / num_attention_heads */
} families[] = {
    [TFM_LLAMA] = {"llama", "LlamaForCausalLM", 2048, 0},
    [TFM_QWEN2] = {"qwen2", "Qwen2ForCausalLM", 32768, 0},
    [TFM_QWEN3] = {"qwen3", "Qwen3ForCausalLM", 32768, 128},
};
#define N_FAMILIES ((int)(sizeof families / sizeof families[0]))

static const char *const rope_names[] = {
    [TFM_ROPE_DEFAULT] = "default", [TFM_ROPE_LINEAR] = "linear",
    [TFM_ROPE_LLAMA3] = "llama3", [TFM_ROPE_YARN] = "yarn"};

void hf_info_init(struct hf_info *info)
{
    memset(info, 0, sizeof *info);
    info->bos_token_id = -1;
}

/* ---- typed getters: absent or null -> the default (or an error when required) ---- */

struct ctx {
    const char *where; /* the file */
    const char *group; /* "" or "rope_scaling." */
    char *err;
    size_t errlen;
};

static const json_t *get(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static int get_int(const struct ctx *x, const json_t *o, const char *key, int required, int def,
                   int *out)
{
    const json_t *v = get(o, key);
    if (!v) {
        if (required) {
            errmsg_set(x->err, x->errlen, "%s: %s%s: missing (a required integer)", x->where,
                       x->group, key);
            return -1;
        }
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < INT_MIN ||
        json_integer_value(v) > INT_MAX) {
        errmsg_set(x->err, x->errlen, "%s: %s%s: is %s, expected an integer", x->where, x->group,
                   key, json_is_integer(v) ? "an integer too large" : json_kind(v));
        return -1;
    }
    *out = (int)json_integer_value(v);
    return 0;
}

static int get_float(const struct ctx *x, const json_t *o, const char *key, int required,
                     float def, float *out)
{
    const json_t *v = get(o, key);
    if (!v) {
        if (required) {
            errmsg_set(x->err, x->errlen, "%s: %s%s: missing (a required number)", x->where,
                       x->group, key);
            return -1;
        }
        *out = def;
        return 0;
    }
    if (!json_is_number(v)) {
        errmsg_set(x->err, x->errlen, "%s: %s%s: is %s, expected a number", x->where, x->group,
                   key, json_kind(v));
        return -1;
    }
    double d = json_number_value(v);
    if (!isfinite(d) || fabs(d) > 3.4e38) {
        errmsg_set(x->err, x->errlen, "%s: %s%s: %g does not fit a float", x->where, x->group,
                   key, d);
        return -1;
    }
    *out = (float)d;
    return 0;
}

static int get_bool(const struct ctx *x, const json_t *o, const char *key, int def, int *out)
{
    const json_t *v = get(o, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) {
        errmsg_set(x->err, x->errlen, "%s: %s%s: is %s, expected true or false", x->where,
                   x->group, key, json_kind(v));
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

/* A string or absent (NULL); anything else is an error. */
static int get_string(const struct ctx *x, const json_t *o, const char *key, const char **out)
{
    const json_t *v = get(o, key);
    *out = NULL;
    if (!v) return 0;
    if (!json_is_string(v)) {
        errmsg_set(x->err, x->errlen, "%s: %s%s: is %s, expected a string", x->where, x->group,
                   key, json_kind(v));
        return -1;
    }
    *out = json_string_value(v);
    return 0;
}

/* ---- parsing ---- */

static int parse_family(const struct ctx *x, const json_t *root, int *family)
{
    const char *mt;
    if (get_string(x, root, "model_type", &mt)) return -1;
    if (mt) {
        for (int i = 0; i < N_FAMILIES; i++)
            if (strcmp(mt, families[i].model_type) == 0) return *family = i, 0;
        errmsg_set(x->err, x->errlen, "%s: model_type: \"%s\" is not supported (llama, qwen2, "
                   "qwen3)", x->where, mt);
        return -1;
    }
    const json_t *arch = get(root, "architectures");
    if (json_is_array(arch))
        for (size_t k = 0; k < json_array_size(arch); k++) {
            const char *a = json_string_value(json_array_get(arch, k));
            for (int i = 0; a && i < N_FAMILIES; i++)
                if (strcmp(a, families[i].architecture) == 0) return *family = i, 0;
        }
    errmsg_set(x->err, x->errlen, "%s: model_type: missing, and architectures names none of "
               "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM", x->where);
    return -1;
}

static int positive(const struct ctx *x, const char *key, float v)
{
    if (v > 0) return 0;
    errmsg_set(x->err, x->errlen, "%s: %s%s: %g must be positive", x->where, x->group, key,
               (double)v);
    return -1;
}

/* rope_scaling (or rope_parameters) into c; r is an object. */
static int parse_rope(struct ctx x, const json_t *r, const char *group, struct tfm_config *c)
{
    x.group = group;
    const char *type, *old;
    if (get_string(&x, r, "rope_type", &type) || get_string(&x, r, "type", &old)) return -1;
    if (!type) type = old;
    if (!type) {
        errmsg_set(x.err, x.errlen, "%s: %srope_type: missing (\"linear\", \"llama3\" or "
                   "\"yarn\"; or rope_scaling null)", x.where, group);
        return -1;
    }
    int rt = -1;
    for (int i = 0; i < (int)(sizeof rope_names / sizeof rope_names[0]); i++)
        if (strcmp(type, rope_names[i]) == 0) rt = i;
    if (rt < 0) {
        errmsg_set(x.err, x.errlen, "%s: %srope_type: \"%s\" is not supported (default, linear, "
                   "llama3, yarn)", x.where, group, type);
        return -1;
    }
    c->rope_type = rt;
    if (rt == TFM_ROPE_DEFAULT) return 0;
    if (get_float(&x, r, "factor", 1, 0, &c->rope_factor) ||
        positive(&x, "factor", c->rope_factor))
        return -1;
    if (rt == TFM_ROPE_LLAMA3) {
        if (get_float(&x, r, "low_freq_factor", 1, 0, &c->rope_low_freq_factor) ||
            get_float(&x, r, "high_freq_factor", 1, 0, &c->rope_high_freq_factor) ||
            get_int(&x, r, "original_max_position_embeddings", 1, 0,
                    &c->rope_original_max_pos))
            return -1;
        if (positive(&x, "low_freq_factor", c->rope_low_freq_factor) ||
            positive(&x, "original_max_position_embeddings", (float)c->rope_original_max_pos))
            return -1;
        if (!(c->rope_high_freq_factor > c->rope_low_freq_factor)) {
            errmsg_set(x.err, x.errlen, "%s: %shigh_freq_factor = %g must exceed "
                       "low_freq_factor = %g", x.where, group, (double)c->rope_high_freq_factor,
                       (double)c->rope_low_freq_factor);
            return -1;
        }
    } else if (rt == TFM_ROPE_YARN) {
        static const char *const refused[] = {"mscale", "mscale_all_dim"};
        for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
            if (get(r, refused[i])) {
                errmsg_set(x.err, x.errlen, "%s: %s%s: not supported (libra's yarn has no "
                           "mscale terms)", x.where, group, refused[i]);
                return -1;
            }
        if (get_int(&x, r, "original_max_position_embeddings", 0, 0,
                    &c->rope_original_max_pos) ||
            get_float(&x, r, "beta_fast", 0, 0, &c->rope_beta_fast) ||
            get_float(&x, r, "beta_slow", 0, 0, &c->rope_beta_slow) ||
            get_float(&x, r, "attention_factor", 0, 0, &c->rope_attention_factor))
            return -1;
        if (c->rope_original_max_pos < 0 || c->rope_beta_fast < 0 || c->rope_beta_slow < 0 ||
            c->rope_attention_factor < 0) {
            errmsg_set(x.err, x.errlen, "%s: %s: original_max_position_embeddings, beta_fast, "
                       "beta_slow and attention_factor must not be negative", x.where, group);
            return -1;
        }
    }
    return 0;
}

static int parse_token_ids(const struct ctx *x, const json_t *root, struct hf_info *info)
{
    if (get_int(x, root, "bos_token_id", 0, -1, &info->bos_token_id)) return -1;
    const json_t *e = get(root, "eos_token_id");
    info->n_eos = 0;
    if (!e) return 0;
    if (json_is_integer(e)) {
        return get_int(x, root, "eos_token_id", 0, -1, &info->eos_token_id[info->n_eos++]);
    }
    if (!json_is_array(e)) {
        errmsg_set(x->err, x->errlen, "%s: eos_token_id: is %s, expected an integer or a list "
                   "of integers", x->where, json_kind(e));
        return -1;
    }
    for (size_t k = 0; k < json_array_size(e) && info->n_eos < HF_MAX_EOS; k++) {
        const json_t *v = json_array_get(e, k);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > INT_MAX) {
            errmsg_set(x->err, x->errlen, "%s: eos_token_id[%zu]: not a token id", x->where, k);
            return -1;
        }
        info->eos_token_id[info->n_eos++] = (int)json_integer_value(v);
    }
    return 0;
}

static int parse_root(const struct ctx *x, const json_t *root, struct tfm_config *c,
                      struct hf_info *info)
{
    memset(c, 0, sizeof *c);
    if (!json_is_object(root)) {
        errmsg_set(x->err, x->errlen, "%s: not a JSON object", x->where);
        return -1;
    }
    if (parse_family(x, root, &c->family)) return -1;
    const struct family *f = &families[c->family];
    if (get_int(x, root, "hidden_size", 1, 0, &c->hidden_size) ||
        get_int(x, root, "num_hidden_layers", 1, 0, &c->n_layers) ||
        get_int(x, root, "num_attention_heads", 1, 0, &c->n_heads) ||
        get_int(x, root, "intermediate_size", 1, 0, &c->intermediate_size) ||
        get_int(x, root, "vocab_size", 1, 0, &c->vocab_size) ||
        get_int(x, root, "num_key_value_heads", 0, c->n_heads, &c->n_kv_heads) ||
        get_int(x, root, "max_position_embeddings", 0, f->max_position,
                &c->max_position_embeddings) ||
        get_float(x, root, "rms_norm_eps", 0, 1e-6f, &c->rms_norm_eps) ||
        get_bool(x, root, "tie_word_embeddings", 0, &c->tie_word_embeddings))
        return -1;
    if (c->n_heads <= 0) {
        errmsg_set(x->err, x->errlen, "%s: num_attention_heads: %d must be positive", x->where,
                   c->n_heads);
        return -1;
    }
    int hd_def = f->head_dim ? f->head_dim : c->hidden_size / c->n_heads;
    if (get_int(x, root, "head_dim", 0, hd_def, &c->head_dim)) return -1;
    /* attention biases: a key of llama and qwen3; qwen2 has them always */
    if (c->family == TFM_QWEN2) c->attention_bias = 1;
    else if (get_bool(x, root, "attention_bias", 0, &c->attention_bias)) return -1;
    c->qk_norm = c->family == TFM_QWEN3;

    /* what would change the math and is not implemented */
    const char *act;
    int mlp_bias, sliding;
    if (get_string(x, root, "hidden_act", &act)) return -1;
    if (act && strcmp(act, "silu") != 0) {
        errmsg_set(x->err, x->errlen, "%s: hidden_act: \"%s\" is not supported (silu)", x->where,
                   act);
        return -1;
    }
    if (get_bool(x, root, "mlp_bias", 0, &mlp_bias)) return -1;
    if (mlp_bias) {
        errmsg_set(x->err, x->errlen, "%s: mlp_bias: true is not supported (the MLP has no "
                   "biases)", x->where);
        return -1;
    }
    if (get_bool(x, root, "use_sliding_window", 0, &sliding)) return -1;
    if (sliding) {
        errmsg_set(x->err, x->errlen, "%s: use_sliding_window: true is not supported (full "
                   "causal attention only)", x->where);
        return -1;
    }

    /* rotary: rope_theta + rope_scaling, or the newer rope_parameters */
    const json_t *rs = get(root, "rope_scaling"), *rp = get(root, "rope_parameters");
    struct ctx rx = *x;
    if (get_float(x, root, "rope_theta", 0, 10000.0f, &c->rope_theta)) return -1;
    if (!get(root, "rope_theta") && json_is_object(rp)) {
        rx.group = "rope_parameters.";
        if (get_float(&rx, rp, "rope_theta", 0, 10000.0f, &c->rope_theta)) return -1;
    }
    if (!rs && json_is_object(rp)) {
        if (parse_rope(*x, rp, "rope_parameters.", c)) return -1;
    } else if (rs) {
        if (!json_is_object(rs)) {
            errmsg_set(x->err, x->errlen, "%s: rope_scaling: is %s, expected an object or null",
                       x->where, json_kind(rs));
            return -1;
        }
        if (parse_rope(*x, rs, "rope_scaling.", c)) return -1;
    }

    char msg[512];
    if (tfm_config_check(c, msg, sizeof msg)) {
        errmsg_set(x->err, x->errlen, "%s: %s", x->where, msg);
        return -1;
    }
    struct hf_info scratch;
    if (!info) info = &scratch; /* parsed (and checked) even when the caller does not ask */
    {
        hf_info_init(info);
        const char *dt, *dt2;
        if (get_string(x, root, "torch_dtype", &dt) || get_string(x, root, "dtype", &dt2))
            return -1;
        if (!dt) dt = dt2;
        if (dt) snprintf(info->torch_dtype, sizeof info->torch_dtype, "%s", dt);
        if (parse_token_ids(x, root, info)) return -1;
    }
    return 0;
}

int hf_config_parse(const char *text, size_t len, const char *where, struct tfm_config *c,
                    struct hf_info *info, char *err, size_t errlen)
{
    struct ctx x = {where, "", err, errlen};
    json_error_t je;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        errmsg_set(err, errlen, "%s: not valid JSON: %s (line %d, column %d)", where, je.text,
                   je.line, je.column);
        memset(c, 0, sizeof *c);
        return -1;
    }
    int rc = parse_root(&x, root, c, info);
    json_decref(root);
    if (rc) memset(c, 0, sizeof *c);
    return rc;
}

int hf_config_read(const char *path, struct tfm_config *c, struct hf_info *info, char *err,
                   size_t errlen)
{
    struct stat st;
    char *file = NULL, *text = NULL;
    int rc = -1;
    memset(c, 0, sizeof *c);
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        size_t n = strlen(path) + sizeof HF_CONFIG_NAME + 1;
        file = xmalloc(n);
        snprintf(file, n, "%s/%s", path, HF_CONFIG_NAME);
    } else {
        file = xstrdup(path);
    }
    FILE *f = fopen(file, "rb");
    if (!f) {
        errmsg_set(err, errlen, "%s: cannot read: %s", file, strerror(errno));
        goto out;
    }
    size_t cap = 0, len = 0;
    for (;;) {
        XGROW(text, cap, len + 65536);
        size_t r = fread(text + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
        if (len > ((size_t)16 << 20)) {
            errmsg_set(err, errlen, "%s: larger than 16 MiB: not a config.json", file);
            fclose(f);
            goto out;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        errmsg_set(err, errlen, "%s: read error", file);
        goto out;
    }
    rc = hf_config_parse(text, len, file, c, info, err, errlen);
out:
    free(text);
    free(file);
    return rc;
}

/* ---- writing ---- */

/* The shortest decimal that reads back as the same float, as a double. */
static double short_double(float x)
{
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)x);
        double d = strtod(buf, NULL);
        if ((float)d == x) return d;
    }
    return (double)x;
}

static json_t *real(float x) { return json_real(short_double(x)); }

static json_t *rope_json(const struct tfm_config *c)
{
    if (c->rope_type == TFM_ROPE_DEFAULT) return json_null();
    json_t *r = json_object();
    json_object_set_new(r, "rope_type", json_string(rope_names[c->rope_type]));
    json_object_set_new(r, "factor", real(c->rope_factor));
    if (c->rope_type == TFM_ROPE_LLAMA3) {
        json_object_set_new(r, "low_freq_factor", real(c->rope_low_freq_factor));
        json_object_set_new(r, "high_freq_factor", real(c->rope_high_freq_factor));
    }
    if (c->rope_original_max_pos > 0)
        json_object_set_new(r, "original_max_position_embeddings",
                            json_integer(c->rope_original_max_pos));
    if (c->rope_type == TFM_ROPE_YARN) {
        if (c->rope_beta_fast > 0) json_object_set_new(r, "beta_fast", real(c->rope_beta_fast));
        if (c->rope_beta_slow > 0) json_object_set_new(r, "beta_slow", real(c->rope_beta_slow));
        if (c->rope_attention_factor > 0)
            json_object_set_new(r, "attention_factor", real(c->rope_attention_factor));
    }
    return r;
}

char *hf_config_dump(const struct tfm_config *c, const struct hf_info *info, char *err,
                     size_t errlen)
{
    char msg[512];
    if (tfm_config_check(c, msg, sizeof msg)) {
        errmsg_set(err, errlen, "config.json: cannot write an invalid config: %s", msg);
        return NULL;
    }
    if (c->family == TFM_QWEN2 && !c->attention_bias) {
        errmsg_set(err, errlen, "config.json: a qwen2 model always has q/k/v biases in "
                   "transformers; this one has none (save it as llama)");
        return NULL;
    }
    if (c->qk_norm != (c->family == TFM_QWEN3)) {
        errmsg_set(err, errlen, "config.json: qk_norm = %d cannot be expressed for model_type "
                   "%s (transformers: on for qwen3 only)", c->qk_norm,
                   families[c->family].model_type);
        return NULL;
    }
    if (c->rope_type < TFM_ROPE_DEFAULT || c->rope_type > TFM_ROPE_YARN) {
        errmsg_set(err, errlen, "config.json: rope_type %d is not default, linear, llama3 or "
                   "yarn", c->rope_type);
        return NULL;
    }
    const struct family *f = &families[c->family];
    json_t *o = json_object();
    json_object_set_new(o, "architectures", json_pack("[s]", f->architecture));
    json_object_set_new(o, "model_type", json_string(f->model_type));
    if (c->family != TFM_QWEN2)
        json_object_set_new(o, "attention_bias", json_boolean(c->attention_bias));
    json_object_set_new(o, "attention_dropout", json_real(0.0));
    if (info && info->bos_token_id >= 0)
        json_object_set_new(o, "bos_token_id", json_integer(info->bos_token_id));
    if (info && info->n_eos == 1)
        json_object_set_new(o, "eos_token_id", json_integer(info->eos_token_id[0]));
    else if (info && info->n_eos > 1) {
        json_t *a = json_array();
        for (int i = 0; i < info->n_eos; i++)
            json_array_append_new(a, json_integer(info->eos_token_id[i]));
        json_object_set_new(o, "eos_token_id", a);
    }
    json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    json_object_set_new(o, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(o, "initializer_range", json_real(0.02));
    json_object_set_new(o, "intermediate_size", json_integer(c->intermediate_size));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_position_embeddings));
    if (c->family == TFM_LLAMA) json_object_set_new(o, "mlp_bias", json_false());
    json_object_set_new(o, "num_attention_heads", json_integer(c->n_heads));
    json_object_set_new(o, "num_hidden_layers", json_integer(c->n_layers));
    json_object_set_new(o, "num_key_value_heads", json_integer(c->n_kv_heads));
    json_object_set_new(o, "rms_norm_eps", real(c->rms_norm_eps));
    json_object_set_new(o, "rope_scaling", rope_json(c));
    json_object_set_new(o, "rope_theta", real(c->rope_theta));
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    json_object_set_new(o, "torch_dtype",
                        json_string(info && info->torch_dtype[0] ? info->torch_dtype
                                                                 : "bfloat16"));
    json_object_set_new(o, "use_cache", json_true());
    if (c->family != TFM_LLAMA) json_object_set_new(o, "use_sliding_window", json_false());
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (!text) FATAL("config.json: json_dumps failed (out of memory?)");
    size_t n = strlen(text);
    text = xrealloc(text, n + 2);
    text[n] = '\n';
    text[n + 1] = '\0';
    return text;
}

int hf_config_write(const char *path, const struct tfm_config *c, const struct hf_info *info,
                    char *err, size_t errlen)
{
    char msg[512];
    char *text = hf_config_dump(c, info, msg, sizeof msg);
    if (!text) {
        errmsg_set(err, errlen, "%s: %s", path, msg);
        return -1;
    }
    int rc = afile_put(path, text, strlen(text), err, errlen);
    free(text);
    return rc;
}

int hf_token_ids_read(const char *dir, struct hf_info *info, char *err, size_t errlen)
{
    static const char *const files[] = {"generation_config.json", HF_CONFIG_NAME};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        size_t n = strlen(dir) + strlen(files[i]) + 2;
        char *path = xmalloc(n);
        snprintf(path, n, "%s/%s", dir, files[i]);
        struct stat st;
        if (stat(path, &st) != 0) {
            free(path);
            continue;
        }
        json_error_t je;
        json_t *root = json_load_file(path, 0, &je);
        int rc = -1;
        struct ctx x = {path, "", err, errlen};
        if (!root)
            errmsg_set(err, errlen, "%s: not valid JSON: %s (line %d, column %d)", path, je.text,
                       je.line, je.column);
        else if (!json_is_object(root))
            errmsg_set(err, errlen, "%s: not a JSON object", path);
        else if (parse_token_ids(&x, root, info) == 0)
            rc = info->bos_token_id >= 0 || info->n_eos > 0;
        json_decref(root);
        free(path);
        if (rc != 0) return rc; /* found ids, or an error */
    }
    return 0;
}
