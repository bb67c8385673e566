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
 * new hardware. Limits: one group per file, no @include. The reading itself (file,
 * group, unknown/missing keys, types, ranges) is include/libra/cfg_table.h's.
 */
#include "libra/profile.h"

#include "libra/cfg_table.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define HW_REAL(k, lo, hi, h) CFGT_REAL_FIELD(struct hw_profile, k, lo, hi, 1, h)
#define MD_REAL(k, lo, hi, h) CFGT_REAL_FIELD(struct model_profile, k, lo, hi, 1, h)
#define MD_INT(k, lo, hi, h) CFGT_INT_FIELD(struct model_profile, k, lo, hi, h)

static const struct cfgt_field hw_fields[] = {
    CFGT_STRING_FIELD(struct hw_profile, name, "a short label such as \"a800-80gb\""),
    HW_REAL(flops_peak, 1e9, 1e18, "dense bf16 FLOP/s of one GPU, e.g. 312e12 for A100"),
    HW_REAL(mem_bw, 1e9, 1e15, "HBM bytes/s of one GPU, e.g. 2.039e12"),
    HW_REAL(mem_capacity, 1e8, 1e13, "HBM of one GPU in bytes, not GB: e.g. 80e9"),
    HW_REAL(bw_intra_node, 1e8, 1e14, "NVLink bytes/s per GPU in ONE direction (half the bidirectional figure)"),
    HW_REAL(bw_inter_node, 1e6, 1e13, "network bytes/s per GPU: one 200 Gb/s NIC = 25e9 (bytes, not bits)"),
    CFGT_INT_FIELD(struct hw_profile, gpus_per_node, 1, 64, "GPUs in one node, 1..64"),
    HW_REAL(latency_intra_s, 0, 1, "seconds of one small intra-node all-reduce, e.g. 5e-6"),
    HW_REAL(latency_inter_s, 0, 1, "seconds of one inter-node message, e.g. 5e-6"),
};

static const struct cfgt_field model_fields[] = {
    CFGT_STRING_FIELD(struct model_profile, name, "a short label such as \"qwen3-14b\""),
    CFGT_STRING_FIELD(struct model_profile, family, "qwen3 | qwen3_moe | llama | qwen2"),
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

#define SYNTAX_HINT "key = value; groups in { }"

/* ---- hardware ---- */

/* Cross-key rule: the network is slower than NVLink (a bits-for-bytes guard). */
static int check_hw(const struct cfgt_ctx *ctx, const config_setting_t *g, void *dst)
{
    const struct hw_profile *hw = dst;
    if (hw->bw_inter_node > hw->bw_intra_node)
        return cfgt_fail(ctx, cfgt_line_of(g, "bw_inter_node"), "", "bw_inter_node",
                         "%g B/s exceeds bw_intra_node %g B/s "
                         "(the network is per GPU, in bytes/s, and slower than NVLink)",
                         hw->bw_inter_node, hw->bw_intra_node);
    return 0;
}

int profile_load_hw(const char *path, struct hw_profile *hw, char *err, size_t errlen)
{
    const struct cfgt_ctx ctx = {path, err, errlen};
    memset(hw, 0, sizeof *hw);
    return cfgt_load(&ctx, SYNTAX_HINT, "hardware", hw_fields, CFGT_COUNT(hw_fields), hw, check_hw);
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
static int check_count(const struct cfgt_ctx *ctx, const config_setting_t *g, const char *key, double n,
                       const struct model_profile *m, int experts)
{
    double lo = shape_params(m, experts, 0), hi = shape_params(m, experts, 1);
    if (n >= 0.95 * lo && n <= 1.05 * hi) return 0;
    return cfgt_fail(ctx, cfgt_line_of(g, key), "", key,
                     "%.4g is implausible for these shapes, which give %.4g (tied embeddings) to %.4g "
                     "(untied) (check the exponent and the shape keys)", n, lo, hi);
}

static int check_shapes(const struct cfgt_ctx *ctx, const config_setting_t *g, const struct model_profile *m)
{
    if (m->n_heads % m->n_kv_heads != 0)
        return cfgt_fail(ctx, cfgt_line_of(g, "n_kv_heads"), "", "n_kv_heads",
                         "%d does not divide n_heads = %d (each KV head serves n_heads / n_kv_heads query heads)",
                         m->n_kv_heads, m->n_heads);
    if (m->dtype_bytes == 3)
        return cfgt_fail(ctx, cfgt_line_of(g, "dtype_bytes"), "", "dtype_bytes",
                         "3 is not a weight type (1: fp8/int8, 2: bf16/fp16, 4: fp32)");
    return 0;
}

static int check_family(const struct cfgt_ctx *ctx, const config_setting_t *g, const struct model_profile *m)
{
    static const char *families[] = {"qwen3", "qwen3_moe", "llama", "qwen2"};
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (strcmp(m->family, families[i]) == 0) return 0;
    return cfgt_fail(ctx, cfgt_line_of(g, "family"), "", "family",
                     "\"%s\" is not supported (qwen3 | qwen3_moe | llama | qwen2)", m->family);
}

/* Dense families have no experts; qwen3_moe has 2+ experts and 1..E per token. */
static int check_experts(const struct cfgt_ctx *ctx, const config_setting_t *g, const struct model_profile *m)
{
    if (strcmp(m->family, "qwen3_moe") != 0) {
        if (m->n_experts != 0 || m->n_active_experts != 0)
            return cfgt_fail(ctx, cfgt_line_of(g, "n_experts"), "", "n_experts",
                             "family %s is dense: n_experts and n_active_experts must be 0 (use family qwen3_moe)",
                             m->family);
        return 0;
    }
    if (m->n_experts < 2)
        return cfgt_fail(ctx, cfgt_line_of(g, "n_experts"), "", "n_experts",
                         "%d: a qwen3_moe model has at least 2 routed experts (num_experts)", m->n_experts);
    if (m->n_active_experts < 1 || m->n_active_experts > m->n_experts)
        return cfgt_fail(ctx, cfgt_line_of(g, "n_active_experts"), "", "n_active_experts",
                         "%d must be in [1, n_experts = %d] (num_experts_per_tok)", m->n_active_experts,
                         m->n_experts);
    return 0;
}

/* Active parameters: = total for dense models, below it for MoE. */
static int check_active(const struct cfgt_ctx *ctx, const config_setting_t *g, const struct model_profile *m)
{
    int line = cfgt_line_of(g, "n_active_params");
    if (m->n_active_params > m->n_params)
        return cfgt_fail(ctx, line, "", "n_active_params",
                         "%.4g exceeds n_params %.4g (a token cannot touch more than all parameters)",
                         m->n_active_params, m->n_params);
    if (m->n_experts == 0 && fabs(m->n_active_params - m->n_params) > 1e-9 * m->n_params)
        return cfgt_fail(ctx, line, "", "n_active_params",
                         "%.4g differs from n_params %.4g, but a dense model touches every parameter",
                         m->n_active_params, m->n_params);
    if (m->n_experts > 0 && !(m->n_active_params < m->n_params))
        return cfgt_fail(ctx, line, "", "n_active_params",
                         "%.4g must be below n_params %.4g for a MoE model", m->n_active_params, m->n_params);
    return 0;
}

/* The cross-key rules, in the order a reader would fix them. */
static int check_model(const struct cfgt_ctx *ctx, const config_setting_t *g, void *dst)
{
    const struct model_profile *m = dst;
    if (check_family(ctx, g, m) != 0 || check_shapes(ctx, g, m) != 0 || check_experts(ctx, g, m) != 0) return -1;
    if (check_count(ctx, g, "n_params", m->n_params, m, m->n_experts) != 0) return -1;
    if (check_active(ctx, g, m) != 0) return -1;
    return check_count(ctx, g, "n_active_params", m->n_active_params, m, m->n_active_experts);
}

int profile_load_model(const char *path, struct model_profile *m, char *err, size_t errlen)
{
    const struct cfgt_ctx ctx = {path, err, errlen};
    memset(m, 0, sizeof *m);
    return cfgt_load(&ctx, SYNTAX_HINT, "model", model_fields, CFGT_COUNT(model_fields), m, check_model);
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
