/*
 * What the CPU device reports about itself (device_info): it runs the real model
 * (token ids, log-probs, checkpoints), rollout instances and training replicas of TP
 * 1, 2, 4 and 8 (any degree that shards the configured model: checked here against
 * the configured plans), and rates measured on this host for the model's shapes.
 *
 * Measurement (about a second for the shipped models): a decoder with zeroed weights
 * of the model's shapes -- decode time does not depend on the values -- times decode
 * steps at (batch 1, 64 tokens cached), (batch 16, 64 each) and (batch 1, 256), and
 * a 128-token prefill. The decode step is fitted as a + b*batch + c*kv_tokens (three
 * points, three unknowns); prefill as a per-token time. A TP-t instance is modelled
 * as the TP-1 time / t at 80 % scaling efficiency -- an assumption, not a
 * measurement (the planner's online calibration corrects it with measured times).
 * The KV capacity of an instance is its slots x rollout.max_tokens (every slot can
 * hold a whole trajectory), whatever its TP.
 *
 * Also here: loading the model the configuration names (cpu_load_model: an HDF5 model
 * file, a run checkpoint directory or a Hugging Face directory, libra/model_load.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "libra/log.h"
#include "libra/hf_model.h"
#include "libra/model_load.h"
#include "libra/model_vocab.h"
#include "libra/tfm_decode.h"
#include "libra/tfm_tp.h"

enum { C_A, C_B, C_C, C_PREFILL, C_EFF, C_CAPACITY };
#define CPU_TP_EFFICIENCY 0.8

/* config.json of the Hugging Face directory model.checkpoint names, and the directory
 * (PATH_MAX bytes) into dir: 1; 0 if the checkpoint is no Hugging Face directory; -1
 * on error. */
static int hf_config_only(const struct libra_config *cfg, struct tfm_config *mc, char *dir,
                          char *err, size_t errlen)
{
    char e[1024];
    if (!cfg->model.checkpoint[0] || model_probe(cfg->model.checkpoint, dir, e, sizeof e) !=
                                         MODEL_HF)
        return 0; /* model_load reports a bad path */
    if (hf_config_read(dir, mc, NULL, e, sizeof e)) {
        snprintf(err, errlen, "%s: model.checkpoint: %s", CONFIG_WHERE(cfg, "model.checkpoint"), e);
        return -1;
    }
    return 1;
}

int cpu_load_model(const struct libra_config *cfg, const struct vocab *v, int lazy,
                   struct tfm_config *mc, struct tfm_params *p, struct adamw *opt,
                   int *opt_loaded, char *hf_source, size_t hf_cap, char *err, size_t errlen)
{
    char e[1024];
    memset(opt, 0, sizeof *opt);
    memset(p, 0, sizeof *p);
    *opt_loaded = 0;
    if (hf_source && hf_cap) hf_source[0] = '\0';
    int config_only = 0;
    if (lazy) {
        char *dir = xmalloc(PATH_MAX);
        config_only = hf_config_only(cfg, mc, dir, err, errlen);
        if (config_only > 0 && hf_source && hf_cap) snprintf(hf_source, hf_cap, "%s", dir);
        free(dir);
        if (config_only < 0) return -1;
    }
    if (config_only) {
        if (mc->vocab_size < v->size) {
            snprintf(err, errlen, "%s: model.checkpoint: %s has vocab_size %d, fewer than its "
                     "tokenizer's %d ids (%s format; check model.tokenizer and "
                     "model.chat_format)", CONFIG_WHERE(cfg, "model.checkpoint"), cfg->model.checkpoint, mc->vocab_size, (int)v->size,
                     v->name);
            return -1;
        }
    } else if (cfg->model.checkpoint[0]) {
        struct model_source *src = xmalloc(sizeof *src);
        if (model_load(cfg->model.checkpoint, mc, p, opt, src, e, sizeof e)) {
            snprintf(err, errlen, "%s: model.checkpoint: %s", CONFIG_WHERE(cfg, "model.checkpoint"), e);
            free(src);
            return -1;
        }
        if (hf_source && hf_cap) snprintf(hf_source, hf_cap, "%s", src->hf_dir);
        free(src);
        *opt_loaded = opt->n > 0;
        if (mc->vocab_size < v->size) {
            snprintf(err, errlen, "%s: model.checkpoint: %s has vocab_size %d, fewer than its "
                     "tokenizer's %d ids (%s format; check model.tokenizer and "
                     "model.chat_format)", CONFIG_WHERE(cfg, "model.checkpoint"), cfg->model.checkpoint, mc->vocab_size, (int)v->size,
                     v->name);
            tfm_params_free(p);
            if (*opt_loaded) adamw_free(opt);
            return -1;
        }
    } else {
        const struct model_config *m = &cfg->model;
        *mc = (struct tfm_config){.family = TFM_LLAMA,
                                  .vocab_size = v->size,
                                  .hidden_size = m->hidden_size,
                                  .n_layers = m->n_layers,
                                  .n_heads = m->n_heads,
                                  .n_kv_heads = m->n_kv_heads,
                                  .head_dim = m->head_dim,
                                  .intermediate_size = m->intermediate_size,
                                  .max_position_embeddings = m->max_position,
                                  .rms_norm_eps = 1e-5f,
                                  .rope_theta = 10000.0f};
        if (tfm_config_check(mc, e, sizeof e)) {
            snprintf(err, errlen, "%s: model: %s", cfg->source, e);
            return -1;
        }
        tfm_params_alloc(p, mc);
        tfm_params_init_random(p, mc, cfg->run.seed, (float)m->init_std);
    }
    if (cfg->rollout.max_tokens > mc->max_position_embeddings) {
        snprintf(err, errlen, "%s: rollout.max_tokens: %d exceeds the context of the model%s%s "
                 "(max_position_embeddings = %d): lower rollout.max_tokens",
                 CONFIG_WHERE(cfg, "rollout.max_tokens"), cfg->rollout.max_tokens,
                 cfg->model.checkpoint[0] ? " " : "", cfg->model.checkpoint,
                 mc->max_position_embeddings);
        tfm_params_free(p);
        if (*opt_loaded) adamw_free(opt);
        return -1;
    }
    return config_only;
}

static double rate_decode(const struct rates *r, int tp, int batch, double kv_tokens)
{
    const double *k = r->coef;
    double t1 = k[C_A] + k[C_B] * batch + k[C_C] * kv_tokens;
    return tp <= 1 ? t1 : t1 / (tp * k[C_EFF]);
}

static double rate_prefill(const struct rates *r, int tp, double n, double ctx_tokens)
{
    (void)ctx_tokens;
    double t1 = r->coef[C_PREFILL] * n;
    return tp <= 1 ? t1 : t1 / (tp * r->coef[C_EFF]);
}

static double rate_capacity(const struct rates *r, int tp)
{
    (void)tp;
    return r->coef[C_CAPACITY];
}

/* Seconds per decode step of n slots, each holding ctx tokens (median of 5). */
static double time_steps(struct tfm_decoder *d, int n, int ctx, float *logits)
{
    int32_t tok[16] = {0}, slots[16];
    int32_t *prompt = xcalloc((size_t)ctx, sizeof *prompt);
    for (int s = 0; s < n; s++) {
        slots[s] = s;
        tfm_decoder_truncate(d, s, 0);
        tfm_decoder_prefill(d, s, prompt, ctx, NULL);
    }
    free(prompt);
    double t[5];
    for (int k = 0; k < 5; k++) {
        double t0 = wall_time();
        tfm_decoder_step(d, slots, tok, n, logits);
        t[k] = wall_time() - t0;
    }
    for (int i = 1; i < 5; i++) /* insertion sort, 5 values */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    return t[2];
}

/* What one TP-1 rank of each role holds, in float32: training -- weights, gradients,
 * the AdamW moments, and the activations of one packed batch of rollout.max_tokens
 * tokens (about 16 floats a layer per token and hidden unit, plus a chunk of logits);
 * rollout -- the weights, every slot's KV cache at rollout.max_tokens, and one row of
 * logits per slot. Against the README's measured Qwen3-0.6B-shaped run (tools/
 * bench-hf-memory: 512 tokens, 4 slots) this gives 11.34 GB for training (measured
 * 11.40) but 2.86 GB for rollout (measured 4.67: tokenizer, buffers and allocator
 * slack are not counted), so it errs low: a layout it refuses cannot fit. */
static void memory_estimate(const struct libra_config *cfg, const struct tfm_config *mc,
                            double n_params, struct device_info *out)
{
    double T = cfg->rollout.max_tokens, S = cfg->rollout.slots, L = mc->n_layers;
    double act = T * L * (16.0 * mc->hidden_size + 4.0 * mc->intermediate_size) +
                 256.0 * mc->vocab_size;
    double kv = S * T * L * 2.0 * mc->n_kv_heads * mc->head_dim;
    out->train_rank_bytes = 4.0 * (4.0 * n_params + act);
    out->rollout_rank_bytes = 4.0 * (n_params + kv + S * mc->vocab_size);
}

void cpu_rates_fit(const struct libra_config *cfg, double t1, double t16, double t256,
                   double prefill128, struct rates *r)
{
    double c = (t256 - t1) / 192.0;
    c = c > 0 ? c : 0;
    double b = (t16 - t1 - c * 15 * 64) / 15.0;
    b = b > 0 ? b : 0;
    double a = t1 - b - 64 * c;
    a = a > 1e-7 ? a : 1e-7;
    r->coef[C_A] = a;
    r->coef[C_B] = b;
    r->coef[C_C] = c;
    r->coef[C_PREFILL] = prefill128 / 128.0;
    r->coef[C_EFF] = CPU_TP_EFFICIENCY;
    r->coef[C_CAPACITY] = (double)cfg->rollout.slots * cfg->rollout.max_tokens;
    r->decode_step_s = rate_decode;
    r->prefill_s = rate_prefill;
    r->kv_capacity_tokens = rate_capacity;
}

/* Every TP degree lo, 2 lo, ... hi that the planner may choose (plan.KEY) shards the
 * model mc; else -1 and the message naming the first that does not. */
static int planner_tps_shard(const struct libra_config *cfg, const struct tfm_config *mc,
                             const char *key, const char *what, int lo, int hi, char *err,
                             size_t errlen)
{
    for (int t = lo; t <= hi; t *= 2) {
        char e[256], path[64];
        if (tfm_tp_check(mc, t, e, sizeof e) == 0) continue;
        snprintf(path, sizeof path, "plan.%s", key);
        snprintf(err, errlen, "%s: %s: the planner's %s %d (of up to %d) cannot shard the "
                 "model%s%s: %s (lower %s)", CONFIG_WHERE(cfg, path), path, what, t, hi,
                 cfg->model.checkpoint[0] ? " of " : "", cfg->model.checkpoint, e, path);
        return -1;
    }
    return 0;
}

int cpu_describe_model(const struct libra_config *cfg, struct device_info *out,
                       struct tfm_config *mc_out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "cpu");
    out->has_model = 1;
    out->tp_mask = 1u << 1 | 1u << 2 | 1u << 4 | 1u << 8;
    out->train_tp_mask = 1u << 1 | 1u << 2 | 1u << 4 | 1u << 8;
    struct tfm_config mc;
    struct tfm_params p;
    struct adamw opt;
    int opt_loaded;
    const struct vocab *v = model_vocab_open(&cfg->model, err, errlen);
    if (!v) {
        config_locate(cfg, err, errlen);
        return -1;
    }
    int rc = cpu_load_model(cfg, v, 1, &mc, &p, &opt, &opt_loaded, NULL, 0, err, errlen);
    model_vocab_close(v);
    if (rc < 0) return -1;
    if (opt_loaded) adamw_free(&opt);
    tfm_params_free(&p); /* the shapes only (nothing allocated for a lazy load) */
    out->vocab_size = mc.vocab_size;
    out->n_params = (int64_t)tfm_param_count(&mc);
    memory_estimate(cfg, &mc, (double)out->n_params, out);
    /* every TP degree the configured plans use must shard this model */
    const struct plan_config *pc = &cfg->plan;
    int sched = strcmp(pc->mode, "schedule") == 0, n = sched ? pc->n_schedule : 1;
    for (int k = 0; k < n; k++) {
        const struct plan_spec *ps = sched ? &pc->schedule[k] : &pc->fixed;
        for (int j = 0; j <= ps->n_tp; j++) {
            int t = j < ps->n_tp ? ps->rollout_tp[j] : ps->train_tp > 0 ? ps->train_tp : 1;
            char e[256];
            if (tfm_tp_check(&mc, t, e, sizeof e) == 0) continue;
            char line[16] = "";
            if (ps->line > 0) snprintf(line, sizeof line, ":%d", ps->line);
            snprintf(err, errlen, "%s%s: plan.%s: TP %d cannot shard the model%s%s: %s",
                     cfg->source, line, j < ps->n_tp ? "rollout_tp" : "train_tp", t,
                     cfg->model.checkpoint[0] ? " of " : "", cfg->model.checkpoint, e);
            return -1;
        }
    }
    /* the planner chooses training replicas of TP 1 .. max_train_tp and instances of
     * TP min_rollout_tp .. max_rollout_tp */
    if (strcmp(pc->mode, "grp") == 0 &&
        (planner_tps_shard(cfg, &mc, "max_train_tp", "training TP", 1, pc->max_train_tp, err,
                           errlen) ||
         planner_tps_shard(cfg, &mc, "max_rollout_tp", "TP", pc->min_rollout_tp,
                           pc->max_rollout_tp, err, errlen)))
        return -1;
    *mc_out = mc;
    return 0;
}

int cpu_describe(const struct libra_config *cfg, const struct cost_model *cm,
                 struct device_info *out, char *err, size_t errlen)
{
    (void)cm;
    struct tfm_config mc;
    if (cpu_describe_model(cfg, out, &mc, err, errlen)) return -1;
    struct tfm_params p;
    tfm_params_alloc(&p, &mc); /* zeroed: timing does not depend on the values */
    struct tfm_decoder *d = tfm_decoder_create(&mc, &p, 16, 272, 128);
    float *logits = xmalloc((size_t)16 * mc.vocab_size * sizeof *logits);
    double t1 = time_steps(d, 1, 64, logits), t16 = time_steps(d, 16, 64, logits);
    double t256 = time_steps(d, 1, 256, logits);
    int32_t *prompt = xcalloc(128, sizeof *prompt);
    tfm_decoder_truncate(d, 0, 0);
    double t0 = wall_time();
    tfm_decoder_prefill(d, 0, prompt, 128, logits);
    double tp = wall_time() - t0;
    free(prompt);
    free(logits);
    tfm_decoder_free(d);
    cpu_host_cost_model(&mc, &p, t1, tp, &out->cm);
    tfm_params_free(&p);
    cpu_rates_fit(cfg, t1, t16, t256, tp, &out->rates);
    return 0;
}
