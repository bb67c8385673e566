/*
 * A worker's real model (device cpu): the weights every rank starts from (the
 * configured model file, a checkpoint's model when resuming, or a fresh seeded
 * model), the environment the rollout ranks' tools run in, the weight-sync data
 * path (the training root broadcasts its parameters; the others receive into a
 * staging buffer and swap them in between decode iterations) and the training
 * root's part of a checkpoint.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/env_setup.h"
#include "libra/log.h"
#include "libra/tfm_io.h"
#include "libra/tokenizer.h"
#include "libra/worker.h"

/* A fresh model of the configured shapes (every rank draws the same, keyed by seed). */
static void fresh_model(const struct libra_config *cfg, struct tfm_config *mc, struct tfm_params *p)
{
    const struct model_config *m = &cfg->model;
    *mc = (struct tfm_config){.family = TFM_LLAMA,
                              .vocab_size = TOK_VOCAB_SIZE,
                              .hidden_size = m->hidden_size,
                              .n_layers = m->n_layers,
                              .n_heads = m->n_heads,
                              .n_kv_heads = m->n_kv_heads,
                              .head_dim = m->head_dim,
                              .intermediate_size = m->intermediate_size,
                              .max_position_embeddings = m->max_position,
                              .rms_norm_eps = 1e-5f,
                              .rope_theta = 10000.0f};
    char err[256];
    if (tfm_config_check(mc, err, sizeof err)) FATAL("model: %s", err);
    tfm_params_alloc(p, mc);
    tfm_params_init_random(p, mc, cfg->run.seed, (float)m->init_std);
}

void wc_init(struct worker *w)
{
    struct worker_cpu *wc = &w->cpu;
    const struct libra_config *cfg = w->cfg;
    char err[512];
    if (cfg->model.checkpoint[0]) {
        if (tfm_load(cfg->model.checkpoint, &wc->mc, &wc->p, &wc->opt, err, sizeof err))
            FATAL("model.checkpoint: %s", err);
        wc->opt_loaded = wc->opt.n > 0;
        if (wc->mc.vocab_size != TOK_VOCAB_SIZE)
            FATAL("model.checkpoint: %s has vocab_size %d; the byte-level tokenizer needs %d",
                  cfg->model.checkpoint, wc->mc.vocab_size, TOK_VOCAB_SIZE);
    } else {
        fresh_model(cfg, &wc->mc, &wc->p);
    }
    if (cfg->rollout.max_tokens > wc->mc.max_position_embeddings)
        FATAL("rollout.max_tokens = %d exceeds the model's max_position_embeddings = %d",
              cfg->rollout.max_tokens, wc->mc.max_position_embeddings);
    struct env_params ep;
    env_params_from_config(cfg, &ep);
    if (env_init(&wc->env, &ep, err, sizeof err)) FATAL("env: %s", err);
    wc->stage = xmalloc(wc->p.n * sizeof *wc->stage);
}

void wc_free(struct worker *w)
{
    struct worker_cpu *wc = &w->cpu;
    if (wc->eng) rollout_cpu_free(wc->eng);
    if (wc->tr) {
        trainer_free(wc->tr); /* frees the parameters it took over */
        free(wc->tr);
    } else {
        tfm_params_free(&wc->p);
        if (wc->opt_loaded) adamw_free(&wc->opt);
    }
    free(wc->stage);
    env_free(&wc->env);
    memset(wc, 0, sizeof *wc);
}

/* The parameters this rank holds right now (the trainer's once it exists: it took
 * them over). */
static struct tfm_params *live_params(struct worker *w)
{
    return w->cpu.tr ? &w->cpu.tr->p : &w->cpu.p;
}

void wc_sync_start(struct worker *w, int root)
{
    struct worker_cpu *wc = &w->cpu;
    struct tfm_params *p = live_params(w);
    if (p->n > (size_t)0x7fffffff) FATAL("weight sync: %zu parameters exceed one MPI count", p->n);
    float *buf = root ? p->mem : wc->stage;
    MPI_CHECK(MPI_Ibcast(buf, (int)p->n, MPI_FLOAT, 0, w->comms.sync, &w->sync.req));
}

void wc_sync_apply(struct worker *w)
{
    struct worker_cpu *wc = &w->cpu;
    struct tfm_params *p = live_params(w);
    memcpy(p->mem, wc->stage, p->n * sizeof *wc->stage);
    if (wc->eng) rollout_cpu_set_weights(wc->eng, wc->stage, w->sync.version);
}

void wc_on_ckpt(struct worker *w, const void *msg, size_t len)
{
    struct wire_ckpt m;
    struct wire_ckpt_done d;
    memset(&d, 0, sizeof d);
    if (len != sizeof m) FATAL("malformed CKPT message (%zu bytes) from rank 0", len);
    memcpy(&m, msg, sizeof m);
    m.dir[sizeof m.dir - 1] = '\0';
    d.step = m.step;
    struct worker_cpu *wc = &w->cpu;
    if (plan_train_root(&w->plan) != w->rank || !wc->tr) {
        snprintf(d.error, sizeof d.error, "rank %d is not the training root with a model", w->rank);
    } else {
        char path[1100], err[512];
        snprintf(path, sizeof path, "%s/model.h5", m.dir);
        d.ok = tfm_save(path, &wc->mc, &wc->tr->p, &wc->tr->opt, err, sizeof err) == 0;
        if (!d.ok) snprintf(d.error, sizeof d.error, "%s", err);
    }
    outbox_send(&w->ob, &d, sizeof d, 0, TAG_CKPT_DONE, MPI_COMM_WORLD);
}
