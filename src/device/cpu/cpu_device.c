/*
 * The CPU device (device.type = "cpu"): the real transformer of src/model on this
 * rank. Its lifetime (the weights every rank starts from: the configured model file,
 * a checkpoint's when resuming, or a fresh seeded model; the environment the
 * rollout ranks' tools run in), its epochs, the weight-sync data path (slices of
 * the live weights to send, a staging buffer to receive into, swapped in between
 * decode iterations) and the training root's model file for checkpoints. Rollout
 * instances are in cpu_rollout.c, training in cpu_train.c, rates in cpu_rates.c.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "libra/env_setup.h"
#include "libra/hash.h"
#include "libra/log.h"
#include "libra/tfm_io.h"
#include "libra/tokenizer.h"

struct tfm_params *cpu_live_params(struct device *d) { return d->tr ? &d->tr->p : &d->p; }

static struct device *cpu_open(const struct device_args *a)
{
    struct device *d = xcalloc(1, sizeof *d);
    d->a = *a;
    char err[512];
    if (cpu_load_model(a->cfg, &d->mc, &d->p, &d->opt, &d->opt_loaded, err, sizeof err))
        FATAL("%s", err);
    struct env_params ep;
    env_params_from_config(a->cfg, &ep);
    ep.vocab = tok_byte_vocab(); /* the model's tokenizer: byte-level is the only one */
    if (env_init(&d->env, &ep, err, sizeof err)) FATAL("env: %s", err);
    d->stage = xmalloc(d->p.n * sizeof *d->stage);
    d->version = a->start_version; /* every rank loaded the same weights */
    d->staged_version = -1;
    return d;
}

static void cpu_close(struct device *d)
{
    if (!d) return;
    if (d->inst) cpu_inst_close(d->inst);
    if (d->tr) {
        trainer_free(d->tr); /* frees the parameters it took over */
        free(d->tr);
    } else {
        tfm_params_free(&d->p);
        if (d->opt_loaded) adamw_free(&d->opt);
    }
    free(d->stage);
    free(d->join);
    env_free(&d->env);
    free(d);
}

static void cpu_epoch(struct device *d, const struct device_epoch *e)
{
    if (e->role == ROLE_ROLLOUT && e->tp != 1)
        FATAL("rollout instances of TP %d on device cpu: this build runs TP 1", e->tp);
    d->ep = *e;
}

/* ---- weights: the whole model as one block (TP 1) ---- */

static int cpu_slices(struct device *d, int t, int i, int use, struct dev_slice *out, int max)
{
    (void)t;
    (void)i;
    struct tfm_params *p = cpu_live_params(d);
    if (max > 0)
        out[0] = (struct dev_slice){.tensor = 0, .full_rows = 1, .full_cols = (int64_t)p->n,
                                    .r0 = 0, .nr = 1, .c0 = 0, .nc = (int64_t)p->n,
                                    .data = use == DEV_SLICES_SEND    ? p->mem
                                            : use == DEV_SLICES_STAGE ? d->stage
                                                                      : NULL};
    return 1;
}

static void cpu_weights_staged(struct device *d, int version)
{
    struct tfm_params *p = cpu_live_params(d);
    memcpy(p->mem, d->stage, p->n * sizeof *d->stage);
    d->version = version;
    if (d->inst) cpu_inst_weights(d->inst, d->stage, version);
}

static int cpu_version(const struct device *d) { return d->version; }

static int cpu_save(struct device *d, const char *dir, char *err, size_t errlen)
{
    if (!d->tr) {
        snprintf(err, errlen, "rank %d holds no trained model", d->a.rank);
        return -1;
    }
    char path[1100];
    snprintf(path, sizeof path, "%s/model.h5", dir);
    return tfm_save(path, &d->mc, &d->tr->p, &d->tr->opt, err, errlen);
}

static uint64_t cpu_weights_hash(const struct device *d)
{
    const struct tfm_params *p = d->tr ? &d->tr->p : &d->p;
    return fnv1a_floats(p->mem, p->n);
}

static float *grad_buffer(struct device *d, size_t *n) { return cpu_grad_buffer(d, n); }

static double no_extra(struct device *d, int n)
{
    (void)d;
    (void)n;
    return 0;
}

const struct device_ops device_cpu = {
    .name = "cpu",
    .describe = cpu_describe,
    .open = cpu_open,
    .close = cpu_close,
    .epoch = cpu_epoch,
    .inst_open = cpu_inst_open,
    .inst_submit = cpu_inst_submit,
    .inst_progress = cpu_inst_progress,
    .inst_handback = cpu_inst_handback,
    .inst_quiesce = cpu_inst_quiesce,
    .inst_close = cpu_inst_close,
    .inst_next_wake = cpu_inst_next_wake,
    .grad_buffer = grad_buffer,
    .stats_buffer = cpu_stats_buffer,
    .train_compute = cpu_train_compute,
    .train_reduce_extra_s = no_extra,
    .train_apply = cpu_train_apply,
    .join_buffer = cpu_join_buffer,
    .join_restore = cpu_join_restore,
    .join_extra_s = no_extra,
    .slices = cpu_slices,
    .weights_staged = cpu_weights_staged,
    .version = cpu_version,
    .weights_hash = cpu_weights_hash,
    .save = cpu_save,
};
