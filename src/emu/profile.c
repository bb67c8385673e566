/*
 * Hardware and model profiles (include/libra/profile.h): one libconfig file each,
 * holding one group ("hardware" or "model") of required keys.
 *
 * The loader is table-driven: a field table names every key, its type, its place in
 * the struct, its allowed range and a hint (unit, meaning). Unknown keys, missing
 * keys, wrong types and values out of range are all reported as
 *     file:line: key: what is wrong (hint)
 * Cross-key rules run after the table: grouped-query heads divide, MoE fields agree
 * with the family, and the parameter counts are plausible for the shapes (a typo in
 * an exponent is the most likely error in these files).
 *
 * The plausibility ranges on hardware numbers are wide (orders of magnitude); they
 * exist to catch unit mistakes such as Gb/s for B/s or GB for bytes, not to forbid
 * new hardware. Limits: one group per file, no @include.
 */
#include "libra/profile.h"

#include <errno.h>
#include <libconfig.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

enum fkind { F_REAL, F_INT, F_STR };

/* One required key: where it goes and what it may hold. Numbers must lie in
 * [lo, hi], or (lo, hi] when lo_open; strings must fit in size bytes with the NUL. */
struct field {
    const char *key;
    enum fkind kind;
    size_t off;
    size_t size;
    double lo, hi;
    int lo_open;
    const char *hint;
};

#define HW_REAL(k, lo, hi, h) {#k, F_REAL, offsetof(struct hw_profile, k), 0, lo, hi, 1, h}
#define MD_REAL(k, lo, hi, h) {#k, F_REAL, offsetof(struct model_profile, k), 0, lo, hi, 1, h}
#define MD_INT(k, lo, hi, h) {#k, F_INT, offsetof(struct model_profile, k), 0, lo, hi, 0, h}

static const struct field hw_fields[] = {
    {"name", F_STR, offsetof(struct hw_profile, name), sizeof(((struct hw_profile *)0)->name),
     0, 0, 0, "a short label such as \"a800-80gb\""},
    HW_REAL(flops_peak, 1e9, 1e18, "dense bf16 FLOP/s of one GPU, e.g. 312e12 for A100"),
    HW_REAL(mem_bw, 1e9, 1e15, "HBM bytes/s of one GPU, e.g. 2.039e12"),
    HW_REAL(mem_capacity, 1e8, 1e13, "HBM of one GPU in bytes, not GB: e.g. 80e9"),
    HW_REAL(bw_intra_node, 1e8, 1e14, "NVLink bytes/s per GPU in ONE direction (half the bidirectional figure)"),
    HW_REAL(bw_inter_node, 1e6, 1e13, "network bytes/s per GPU: one 200 Gb/s NIC = 25e9 (bytes, not bits)"),
    {"gpus_per_node", F_INT, offsetof(struct hw_profile, gpus_per_node), 0, 1, 64, 0, "GPUs in one node, 1..64"},
    HW_REAL(latency_intra_s, 0, 1, "seconds of one small intra-node all-reduce, e.g. 5e-6"),
    HW_REAL(latency_inter_s, 0, 1, "seconds of one inter-node message, e.g. 5e-6"),
};

static const struct field model_fields[] = {
    {"name", F_STR, offsetof(struct model_profile, name), sizeof(((struct model_profile *)0)->name),
     0, 0, 0, "a short label such as \"qwen3-14b\""},
    {"family", F_STR, offsetof(struct model_profile, family),
     sizeof(((struct model_profile *)0)->family), 0, 0, 0, "qwen3 | qwen3_moe | llama | qwen2"},
    MD_REAL(n_params, 1e3, 1e14, "total parameters, e.g. 14.77e9"),
    MD_REAL(n_active_params, 1e3, 1e14, "parameters one token touches; = n_params for dense models"),
    MD_INT(n_layers, 1, 1000, "transformer blocks (num_hidden_layers)"),
    MD_INT(hidden, 1, 1 << 20, "hidden_size"),
    MD_INT(n_heads, 1, 4096, "num_attention_heads"),
    MD_INT(n_kv_heads, 1, 4096, "num_key_value_heads"),
    MD_INT(head_dim, 1, 4096, "head_dim from config.json (not always hidden / n_heads)"),
    MD_INT(vocab, 1, 1 << 24, "vocab_size"),
    MD_INT(intermediate, 1, 1 << 20, "intermediate_size, or moe_intermediate_size for MoE"),
    MD_INT(n_experts, 0, 4096, "routed experts, 0 for dense models"),
    MD_INT(n_active_experts, 0, 4096, "experts per token (num_experts_per_tok), 0 for dense"),
    MD_INT(dtype_bytes, 1, 4, "bytes per weight: 1, 2 (bf16) or 4"),
};

#define N_HW_FIELDS ((int)(sizeof hw_fields / sizeof hw_fields[0]))
#define N_MODEL_FIELDS ((int)(sizeof model_fields / sizeof model_fields[0]))

/* ---- error reporting and generic reading ---- */

/* Writes "path:line: key: <fmt>" into err and returns -1. */
static int fail_at(char *err, size_t errlen, const char *path, int line, const char *key,
                   const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static int fail_at(char *err, size_t errlen, const char *path, int line, const char *key,
                   const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(err, errlen, "%s:%d: %s: %s", path, line, key, msg);
    return -1;
}

static const char *type_name(int type)
{
    switch (type) {
    case CONFIG_TYPE_GROUP: return "a group";
    case CONFIG_TYPE_ARRAY: return "an array";
    case CONFIG_TYPE_LIST: return "a list";
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64: return "an integer";
    case CONFIG_TYPE_FLOAT: return "a number";
    case CONFIG_TYPE_STRING: return "a string";
    case CONFIG_TYPE_BOOL: return "a boolean";
    default: return "something else";
    }
}

/* Reads and parses path into cfg (initialised here; the caller destroys it). */
static int open_config(const char *path, config_t *cfg, char *err, size_t errlen)
{
    config_init(cfg);
    FILE *fp = fopen(path, "r");
    if (!fp) {
        snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return -1;
    }
    int ok = config_read(cfg, fp);
    fclose(fp);
    if (ok != CONFIG_TRUE) {
        snprintf(err, errlen, "%s:%d: cannot parse: %s (libconfig syntax: key = value; groups in { })",
                 path, config_error_line(cfg), config_error_text(cfg));
        return -1;
    }
    return 0;
}

/* The one top-level group `name`; any other top-level setting is an error. */
static config_setting_t *top_group(const char *path, config_t *cfg, const char *name, char *err,
                                   size_t errlen)
{
    config_setting_t *root = config_root_setting(cfg);
    for (int i = 0; i < config_setting_length(root); i++) {
        config_setting_t *s = config_setting_get_elem(root, (unsigned)i);
        if (strcmp(config_setting_name(s), name) != 0) {
            fail_at(err, errlen, path, config_setting_source_line(s), config_setting_name(s),
                    "unknown top-level setting (this file holds one group: %s = { ... };)", name);
            return NULL;
        }
    }
    config_setting_t *g = config_setting_get_member(root, name);
    if (!g) {
        fail_at(err, errlen, path, 1, name, "missing group (expected %s = { ... };)", name);
        return NULL;
    }
    if (!config_setting_is_group(g)) {
        fail_at(err, errlen, path, config_setting_source_line(g), name, "is %s, expected a group { ... }",
                type_name(config_setting_type(g)));
        return NULL;
    }
    return g;
}

static const struct field *find_field(const struct field *f, int nf, const char *key)
{
    for (int i = 0; i < nf; i++)
        if (strcmp(f[i].key, key) == 0) return &f[i];
    return NULL;
}

/* Every member of grp must be in the table. */
static int reject_unknown(const char *path, const config_setting_t *grp, const struct field *f,
                          int nf, char *err, size_t errlen)
{
    for (int i = 0; i < config_setting_length(grp); i++) {
        const config_setting_t *s = config_setting_get_elem(grp, (unsigned)i);
        if (find_field(f, nf, config_setting_name(s))) continue;
        char known[512] = "";
        for (int k = 0; k < nf; k++) {
            strncat(known, f[k].key, sizeof known - strlen(known) - 1);
            if (k + 1 < nf) strncat(known, ", ", sizeof known - strlen(known) - 1);
        }
        return fail_at(err, errlen, path, config_setting_source_line(s), config_setting_name(s),
                       "unknown key (known keys: %s)", known);
    }
    return 0;
}

static int number_of(const config_setting_t *s, double *v)
{
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_INT: *v = config_setting_get_int(s); return 0;
    case CONFIG_TYPE_INT64: *v = (double)config_setting_get_int64(s); return 0;
    case CONFIG_TYPE_FLOAT: *v = config_setting_get_float(s); return 0;
    default: return -1;
    }
}

/* Reads one field of the table from setting s into dst. */
static int read_field(const char *path, const config_setting_t *s, const struct field *f,
                      void *dst, char *err, size_t errlen)
{
    int line = config_setting_source_line(s);
    int type = config_setting_type(s);
    char *p = (char *)dst + f->off;
    if (f->kind == F_STR) {
        if (type != CONFIG_TYPE_STRING)
            return fail_at(err, errlen, path, line, f->key, "is %s, expected a string in quotes (%s)",
                           type_name(type), f->hint);
        const char *v = config_setting_get_string(s);
        if (!*v || strlen(v) >= f->size)
            return fail_at(err, errlen, path, line, f->key, "\"%s\" must have 1 to %zu characters (%s)",
                           v, f->size - 1, f->hint);
        memcpy(p, v, strlen(v) + 1);
        return 0;
    }
    double v;
    if (number_of(s, &v) != 0)
        return fail_at(err, errlen, path, line, f->key, "is %s, expected a number (%s)",
                       type_name(type), f->hint);
    if (f->kind == F_INT && type == CONFIG_TYPE_FLOAT)
        return fail_at(err, errlen, path, line, f->key, "%g must be an integer, written without a decimal point (%s)",
                       v, f->hint);
    int below = f->lo_open ? !(v > f->lo) : !(v >= f->lo);
    if (below || !(v <= f->hi))
        return fail_at(err, errlen, path, line, f->key, "%g is out of range, must be in %s%g, %g] (%s)",
                       v, f->lo_open ? "(" : "[", f->lo, f->hi, f->hint);
    if (f->kind == F_INT)
        *(int *)p = (int)v;
    else
        *(double *)p = v;
    return 0;
}

/* Reads every field of the table from grp (all required) after rejecting unknown keys. */
static int read_fields(const char *path, const config_setting_t *grp, const struct field *f, int nf,
                       void *dst, char *err, size_t errlen)
{
    if (reject_unknown(path, grp, f, nf, err, errlen) != 0) return -1;
    for (int i = 0; i < nf; i++) {
        const config_setting_t *s = config_setting_get_member(grp, f[i].key);
        if (!s)
            return fail_at(err, errlen, path, config_setting_source_line(grp), f[i].key,
                           "missing (every key is required: %s)", f[i].hint);
        if (read_field(path, s, &f[i], dst, err, errlen) != 0) return -1;
    }
    return 0;
}

/* Source line of member key of grp (the group's own line if absent). */
static int line_of(const config_setting_t *grp, const char *key)
{
    const config_setting_t *s = config_setting_get_member(grp, key);
    return config_setting_source_line(s ? s : grp);
}

/* ---- hardware ---- */

int profile_load_hw(const char *path, struct hw_profile *hw, char *err, size_t errlen)
{
    config_t cfg;
    int rc = -1;
    memset(hw, 0, sizeof *hw);
    if (open_config(path, &cfg, err, errlen) != 0) goto done;
    const config_setting_t *g = top_group(path, &cfg, "hardware", err, errlen);
    if (!g) goto done;
    if (read_fields(path, g, hw_fields, N_HW_FIELDS, hw, err, errlen) != 0) goto done;
    if (hw->bw_inter_node > hw->bw_intra_node) {
        fail_at(err, errlen, path, line_of(g, "bw_inter_node"), "bw_inter_node",
                "%g B/s exceeds bw_intra_node %g B/s (the network is per GPU, in bytes/s, and slower than NVLink)",
                hw->bw_inter_node, hw->bw_intra_node);
        goto done;
    }
    rc = 0;
done:
    config_destroy(&cfg);
    return rc;
}

void profile_print_hw(const struct hw_profile *hw, FILE *out)
{
    fprintf(out, "hardware %s\n", hw->name);
    fprintf(out, "  %-16s %10.4g TFLOP/s (dense bf16)\n", "flops_peak", hw->flops_peak / 1e12);
    fprintf(out, "  %-16s %10.4g TB/s\n", "mem_bw", hw->mem_bw / 1e12);
    fprintf(out, "  %-16s %10.4g GB\n", "mem_capacity", hw->mem_capacity / 1e9);
    fprintf(out, "  %-16s %10.4g GB/s per direction\n", "bw_intra_node", hw->bw_intra_node / 1e9);
    fprintf(out, "  %-16s %10.4g GB/s per GPU\n", "bw_inter_node", hw->bw_inter_node / 1e9);
    fprintf(out, "  %-16s %10d\n", "gpus_per_node", hw->gpus_per_node);
    fprintf(out, "  %-16s %10.4g us\n", "latency_intra_s", hw->latency_intra_s * 1e6);
    fprintf(out, "  %-16s %10.4g us\n", "latency_inter_s", hw->latency_inter_s * 1e6);
}

/* ---- model ---- */

/* Parameters implied by the shapes of a Qwen/Llama-style decoder: per layer the
 * attention projections (q, k, v, o), the MLP (gate, up, down; for MoE `experts`
 * of them plus a router) and norms; then the embedding, counted once (tied) or
 * twice (untied output head). Biases (qwen2) are below the tolerance used. */
static double shape_params(const struct model_profile *m, int experts, int untied)
{
    double h = m->hidden, qd = (double)m->n_heads * m->head_dim;
    double kvd = (double)m->n_kv_heads * m->head_dim;
    double attn = 2.0 * h * qd + 2.0 * h * kvd;
    double mlp = 3.0 * h * m->intermediate * (experts > 0 ? experts : 1);
    double router = m->n_experts > 0 ? h * m->n_experts : 0;
    double layer = attn + mlp + router + 2.0 * h;
    return m->n_layers * layer + (untied ? 2.0 : 1.0) * (double)m->vocab * h + h;
}

/* n within [0.95 x tied, 1.05 x untied] of the shape count. */
static int check_count(const char *path, const config_setting_t *g, const char *key, double n,
                       const struct model_profile *m, int experts, char *err, size_t errlen)
{
    double lo = shape_params(m, experts, 0), hi = shape_params(m, experts, 1);
    if (n >= 0.95 * lo && n <= 1.05 * hi) return 0;
    return fail_at(err, errlen, path, line_of(g, key), key,
                   "%.4g is implausible for these shapes, which give %.4g (tied embeddings) to %.4g "
                   "(untied) (check the exponent and the shape keys)", n, lo, hi);
}

static int check_shapes(const char *path, const config_setting_t *g, const struct model_profile *m,
                       char *err, size_t errlen)
{
    if (m->n_heads % m->n_kv_heads != 0)
        return fail_at(err, errlen, path, line_of(g, "n_kv_heads"), "n_kv_heads",
                       "%d does not divide n_heads = %d (each KV head serves n_heads / n_kv_heads query heads)",
                       m->n_kv_heads, m->n_heads);
    if (m->dtype_bytes == 3)
        return fail_at(err, errlen, path, line_of(g, "dtype_bytes"), "dtype_bytes",
                       "3 is not a weight type (1: fp8/int8, 2: bf16/fp16, 4: fp32)");
    return 0;
}

static int check_family(const char *path, const config_setting_t *g, const struct model_profile *m,
                        char *err, size_t errlen)
{
    static const char *families[] = {"qwen3", "qwen3_moe", "llama", "qwen2"};
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (strcmp(m->family, families[i]) == 0) return 0;
    return fail_at(err, errlen, path, line_of(g, "family"), "family",
                   "\"%s\" is not supported (qwen3 | qwen3_moe | llama | qwen2)", m->family);
}

/* Dense families have no experts; qwen3_moe has 2+ experts and 1..E per token. */
static int check_experts(const char *path, const config_setting_t *g, const struct model_profile *m,
                         char *err, size_t errlen)
{
    if (strcmp(m->family, "qwen3_moe") != 0) {
        if (m->n_experts != 0 || m->n_active_experts != 0)
            return fail_at(err, errlen, path, line_of(g, "n_experts"), "n_experts",
                           "family %s is dense: n_experts and n_active_experts must be 0 (use family qwen3_moe)",
                           m->family);
        return 0;
    }
    if (m->n_experts < 2)
        return fail_at(err, errlen, path, line_of(g, "n_experts"), "n_experts",
                       "%d: a qwen3_moe model has at least 2 routed experts (num_experts)", m->n_experts);
    if (m->n_active_experts < 1 || m->n_active_experts > m->n_experts)
        return fail_at(err, errlen, path, line_of(g, "n_active_experts"), "n_active_experts",
                       "%d must be in [1, n_experts = %d] (num_experts_per_tok)", m->n_active_experts,
                       m->n_experts);
    return 0;
}

/* Active parameters: = total for dense models, below it for MoE. */
static int check_active(const char *path, const config_setting_t *g, const struct model_profile *m,
                        char *err, size_t errlen)
{
    int line = line_of(g, "n_active_params");
    if (m->n_active_params > m->n_params)
        return fail_at(err, errlen, path, line, "n_active_params",
                       "%.4g exceeds n_params %.4g (a token cannot touch more than all parameters)",
                       m->n_active_params, m->n_params);
    if (m->n_experts == 0 && fabs(m->n_active_params - m->n_params) > 1e-9 * m->n_params)
        return fail_at(err, errlen, path, line, "n_active_params",
                       "%.4g differs from n_params %.4g, but a dense model touches every parameter",
                       m->n_active_params, m->n_params);
    if (m->n_experts > 0 && !(m->n_active_params < m->n_params))
        return fail_at(err, errlen, path, line, "n_active_params",
                       "%.4g must be below n_params %.4g for a MoE model", m->n_active_params, m->n_params);
    return 0;
}

int profile_load_model(const char *path, struct model_profile *m, char *err, size_t errlen)
{
    config_t cfg;
    int rc = -1;
    memset(m, 0, sizeof *m);
    if (open_config(path, &cfg, err, errlen) != 0) goto done;
    const config_setting_t *g = top_group(path, &cfg, "model", err, errlen);
    if (!g) goto done;
    if (read_fields(path, g, model_fields, N_MODEL_FIELDS, m, err, errlen) != 0) goto done;
    if (check_family(path, g, m, err, errlen) != 0) goto done;
    if (check_shapes(path, g, m, err, errlen) != 0) goto done;
    if (check_experts(path, g, m, err, errlen) != 0) goto done;
    if (check_count(path, g, "n_params", m->n_params, m, m->n_experts, err, errlen) != 0) goto done;
    if (check_active(path, g, m, err, errlen) != 0) goto done;
    if (check_count(path, g, "n_active_params", m->n_active_params, m, m->n_active_experts, err,
                    errlen) != 0)
        goto done;
    rc = 0;
done:
    config_destroy(&cfg);
    return rc;
}

void profile_print_model(const struct model_profile *m, FILE *out)
{
    fprintf(out, "model %s (%s)\n", m->name, m->family);
    fprintf(out, "  %-16s %10.4g B\n", "n_params", m->n_params / 1e9);
    fprintf(out, "  %-16s %10.4g B\n", "n_active_params", m->n_active_params / 1e9);
    fprintf(out, "  %-16s %10d\n", "n_layers", m->n_layers);
    fprintf(out, "  %-16s %10d\n", "hidden", m->hidden);
    fprintf(out, "  %-16s %10d\n", "n_heads", m->n_heads);
    fprintf(out, "  %-16s %10d\n", "n_kv_heads", m->n_kv_heads);
    fprintf(out, "  %-16s %10d\n", "head_dim", m->head_dim);
    fprintf(out, "  %-16s %10d\n", "vocab", m->vocab);
    fprintf(out, "  %-16s %10d\n", "intermediate", m->intermediate);
    fprintf(out, "  %-16s %10d\n", "n_experts", m->n_experts);
    fprintf(out, "  %-16s %10d\n", "n_active_experts", m->n_active_experts);
    fprintf(out, "  %-16s %10d\n", "dtype_bytes", m->dtype_bytes);
}
