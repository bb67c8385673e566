/*
 * What rollout work costs on a device, as the scheduler and the controller price it:
 * one decode iteration, a prefill, and the KV tokens an instance holds, per tensor-
 * parallel degree. The device reports them: the emulated device from the analytic
 * cost model (cost_rates, include/libra/cost.h), a real device from measurements of
 * the loaded model on this host (src/device/cpu/cpu_rates.c). Consumers never know
 * which one they hold.
 */
#ifndef LIBRA_RATES_H
#define LIBRA_RATES_H

#define RATES_COEF 8

/* A value type: copy it freely (ctx, if used, points at something long-lived). */
struct rates {
    const void *ctx;          /* the implementation's model (the cost model), or NULL */
    double coef[RATES_COEF];  /* or its fitted coefficients */
    /* One decode iteration of a TP-tp instance with batch sequences and kv_tokens
     * resident KV tokens, in seconds. */
    double (*decode_step_s)(const struct rates *r, int tp, int batch, double kv_tokens);
    /* Prefill of n new tokens appended to a context of ctx_tokens, in seconds. */
    double (*prefill_s)(const struct rates *r, int tp, double n, double ctx_tokens);
    /* KV tokens a TP-tp instance holds (0: the model does not fit). */
    double (*kv_capacity_tokens)(const struct rates *r, int tp);
};

static inline int rates_valid(const struct rates *r) { return r && r->decode_step_s; }

#endif
