/*
 * The CPU device (device.type = "cpu"): the real transformer of src/model on this
 * rank, tensor parallel over MPI inside a rollout instance or a training replica.
 * Here: its lifetime (the weights every rank starts from -- the configured model
 * file, a checkpoint's when resuming, or a fresh seeded model -- and the environment
 * the rollout ranks' tools run in), its epochs (which shard the rank holds:
 * cpu_shard.c), the weight-sync data path (slices of the live weights to send, of the
 * staging buffer to receive into) and the checkpoint's model file. Rollout instances
 * are in cpu_rollout.c, training in cpu_train.c, rates in cpu_rates.c.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "libra/cuda_module.h"
#include "libra/env_setup.h"
#include "libra/gpu_model.h"
#include "libra/gpu_train.h"
#include "libra/hash.h"
#include "libra/log.h"
#include "libra/model_vocab.h"
#include "libra/safetensors.h"

struct tfm_params *cpu_live_layout(struct device *d) { return d->tr ? &d->tr->p : &d->sh.p; }

struct tfm_params *cpu_live_params(struct device *d)
{
    if (d->tr)
        trainer_fetch_params(d->tr);
    else
        cpu_stage16_catch_up(d);
    return cpu_live_layout(d);
}

void cpu_trainer_drop(struct device *d)
{
    if (!d->tr) return;
    trainer_free(d->tr); /* frees the shard's weights it took over */
    free(d->tr);
    d->tr = NULL;
    gpu_trainer_free(d->gtr);
    d->gtr = NULL;
}

/* The rank's place among the ranks of its node, as the launcher tells it (Open MPI,
 * Slurm, MPICH / Hydra, PMIx); -1 if none does. Read from the environment: a device is
 * opened by the workers alone, so no collective over the world may happen here. */
static int node_local_rank(void)
{
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID",
                          "PMIX_LOCAL_RANK", "LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        long r = v && *v ? strtol(v, &end, 10) : -1;
        if (v && *v && !*end && r >= 0 && r < 1 << 20) return (int)r;
    }
    return -1;
}

/* Device cuda: this rank's GPU, (node-local rank) mod (the node's GPUs), into *index. */
static const struct cuda_api *open_gpu(int rank, int *index)
{
    char err[2048];
    const struct cuda_api *api = cuda_module_load(err, sizeof err);
    int n = api ? api->device_count() : 0;
    if (!api || n < 1)
        FATAL("device.type = \"cuda\": rank %d: %s", rank, api ? api->last_error() : err);
    int local = node_local_rank();
    if (local < 0) {
        LOG_W("device cuda: rank %d: the launcher gives no node-local rank "
                 "(OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, ...): using GPU %d", rank,
                 rank % n);
        local = rank;
    }
    *index = local % n;
    api = gpu_open(*index, err, sizeof err);
    if (!api) FATAL("device.type = \"cuda\": rank %d: %s", rank, err);
    return api;
}

static struct device *cpu_open(const struct device_args *a)
{
    struct device *d = xcalloc(1, sizeof *d);
    d->a = *a;
    char err[1024];
    d->vocab = model_vocab_open(&a->cfg->model, err, sizeof err);
    if (!d->vocab) FATAL("%s", err);
    int rc = cpu_load_model(a->cfg, d->vocab, 1, &d->mc, &d->full, &d->opt, &d->opt_loaded,
                            d->hf_source, sizeof d->hf_source, err, sizeof err);
    if (rc < 0) FATAL("%s", err);
    struct env_params ep;
    env_params_from_config(a->cfg, &ep);
    ep.vocab = d->vocab;
    if (env_init(&d->env, &ep, err, sizeof err)) FATAL("env: %s", err);
    /* every rank loaded the same weights, or will read its slices of them */
    d->version = a->start_version;
    d->full_version = rc == 0 ? a->start_version : -1;
    d->lazy_version = rc == 1 ? a->start_version : -1;
    d->staged_version = -1;
    cpu_comm_bind(&d->sh.comm, MPI_COMM_NULL);
    cpu_comm_bind(&d->sh.kv, MPI_COMM_NULL);
    if (strcmp(a->cfg->device.type, "cuda") == 0) d->gpu = open_gpu(a->rank, &d->gpu_index);
    return d;
}

/* The loaded weights are history (trained, or replaced by a sync). */
static void drop_full(struct device *d)
{
    d->lazy_version = -1;
    if (d->full_version < 0) return;
    tfm_params_free(&d->full);
    d->full_version = -1;
}

static void cpu_close(struct device *d)
{
    if (!d) return;
    if (d->inst) cpu_inst_close(d->inst);
    cpu_trainer_drop(d);
    cpu_gpu_comm_free_all(d);
    cpu_shard_free(&d->sh);
    cpu_send16_free(d);
    cpu_gsync_free(d);
    if (d->gpu) cpu_syncbuf_free(d);
    drop_full(d);
    if (d->opt_loaded) adamw_free(&d->opt);
    free(d->join);
    cpu_state_whole(d, 0);
    cpu_shard_forget_geometry(d);
    env_free(&d->env);
    model_vocab_close(d->vocab);
    free(d);
}

/* A colocated rank trains on the shard it serves with: its rollout place must be its
 * place in the training replica (train.colocate's check on device cpu). */
static void check_colocated(const struct device *d, const struct device_epoch *e)
{
    const struct plan *p = e->plan;
    int size = plan_replica_size(p), t = p->train_tp > 0 ? p->train_tp : 1;
    if (p->train_pp > 1 || e->tp != t || plan_train_index(p, d->a.rank) % size != e->index)
        FATAL("rank %d: a colocated rank's rollout shard (TP %d, index %d) must be its "
              "training shard (TP %d x PP %d, index %d) on device cpu: give every rollout "
              "instance plan.train_tp ranks", d->a.rank, e->tp, e->index, t,
              p->train_pp > 0 ? p->train_pp : 1, plan_train_index(p, d->a.rank) % size);
}

static void cpu_epoch(struct device *d, const struct device_epoch *e)
{
    d->ep = *e;
    if (e->role == ROLE_ROLLOUT && e->plan->colocated) check_colocated(d, e);
    if (e->role == ROLE_ROLLOUT) {
        cpu_shard_place(d, e->tp, e->index, e->instance);
        /* the instance opened next decodes with the trainer's weights (they move into
         * the trainer when it is made: it must exist first); a rank that only serves
         * rollouts gives its trainer up (back from a loan), the weights back to the shard */
        if (e->plan->colocated)
            cpu_train_prepare(d);
        else
            cpu_train_retire(d);
    } else if (e->role == ROLE_TRAIN || e->role == ROLE_HYBRID) {
        if (e->plan->train_pp > 1)
            FATAL("training replicas with pipeline stages (train_pp = %d) on device cpu: "
                  "this build shards training by TP only", e->plan->train_pp);
        cpu_shard_place(d, e->tp, e->index, e->replica);
    }
    cpu_gsync_epoch(d, e); /* collective over the sync's members */
}

/* ---- weights ---- */

static int cpu_slices(struct device *d, int t, int i, int use, struct dev_slice *out, int max)
{
    if (use == DEV_SLICES_GEOMETRY) return cpu_shard_slices(d, t, i, NULL, out, max);
    if (t != d->sh.t || i != d->sh.i)
        FATAL("weight sync: rank %d holds shard (%d, %d), not (%d, %d)", d->a.rank, d->sh.t,
              d->sh.i, t, i);
    /* a sender's values come through read_slices: the GPU keeps a trainer's */
    if (use == DEV_SLICES_SEND) return cpu_shard_slices(d, t, i, cpu_live_layout(d), out, max);
    /* the staging buffer has the live weights' layout: the same offsets into it */
    const struct tfm_params *live = cpu_live_layout(d);
    struct tfm_params stage = *live;
    float **f[] = {&stage.embed, &stage.ln1, &stage.wq, &stage.bq, &stage.wk, &stage.bk,
                   &stage.wv, &stage.bv, &stage.q_norm, &stage.k_norm, &stage.wo, &stage.ln2,
                   &stage.w_gate, &stage.w_up, &stage.w_down, &stage.ln_f, &stage.lm_head};
    for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
        if (*f[k]) *f[k] = d->sh.stage + (*f[k] - live->mem);
    stage.mem = d->sh.stage;
    return cpu_shard_slices(d, t, i, &stage, out, max);
}

static void cpu_read_slices(struct device *d, const struct dev_slice *s, int n,
                            const size_t *off, float *f32, uint16_t *b16)
{
    const struct tfm_params *live = cpu_live_layout(d);
    if (!d->tr) cpu_stage16_catch_up(d); /* sh.p may lag the installed bf16 weights */
    for (int m = 0; m < n; m++) {
        size_t at = (size_t)(s[m].data - live->mem), len = (size_t)(s[m].nr * s[m].nc);
        float *to32 = f32 ? f32 + off[m] : NULL;
        uint16_t *to16 = b16 ? b16 + off[m] : NULL;
        if (d->tr) {
            trainer_read_params(d->tr, at, len, to32, to16);
            continue;
        }
        if (to32) memcpy(to32, s[m].data, len * sizeof *to32);
        if (to16) st_f32_to_bf16_n(s[m].data, to16, len);
    }
}

static void cpu_weights_staged(struct device *d, int version)
{
    d->staged_version = version; /* swapped in by the instance (every rank together) */
    d->sh.staged16 = 0;          /* in the float32 stage, this time */
    drop_full(d);
    if (!d->inst) { /* no instance to agree with: take them now */
        struct tfm_params *p = cpu_live_layout(d); /* all of it overwritten */
        memcpy(p->mem, d->sh.stage, p->n * sizeof *p->mem);
        d->sh.p_lags = 0;
        if (d->tr) trainer_weights_changed(d->tr); /* its engine's copy, if any */
        d->version = version;
        d->staged_version = -1;
    }
}

static void cpu_weights_unstage(struct device *d)
{
    if (d->gs.pending) /* its sender waits for the receives: they cannot be dropped */
        FATAL("rank %d: a weight sync arrived before the GPU-to-GPU sync of version %d "
              "was received (the controller waits for its SYNC_DONE: a bug)", d->a.rank,
              d->staged_version);
    d->staged_version = -1; /* a TP group's ranks then agree on no swap (MIN) */
    d->sh.staged16 = 0;
    if (d->gpu) cpu_syncbuf_drop(d); /* it may be reading land16, which the sync writes */
}

static void gsync_recv(struct device *d, const struct dev_gmsg *m, int n, int version)
{
    cpu_gsync_recv(d, m, n, version);
    drop_full(d);
}

static void cpu_weights_staged_bf16(struct device *d, int version)
{
    d->staged_version = version;
    cpu_stage16_staged(d);
    drop_full(d);
    if (!d->inst) { /* as cpu_weights_staged: take them now (this rank has no trainer) */
        cpu_stage16_take(d);
        d->version = version;
        d->staged_version = -1;
    }
}

static int cpu_version(const struct device *d) { return d->version; }

static int cpu_last_install(const struct device *d) { return d->last_install; }

static int cpu_last_send(const struct device *d) { return d->last_send; }

/* Device cpu: XXH3 of the host weights. Device cuda: the sum fingerprint, which a
 * trainer whose weights stay on the GPU computes there (every replica uses it). */
static uint64_t cpu_weights_hash(const struct device *d)
{
    const struct tfm_params *p = d->tr ? &d->tr->p : &d->sh.p;
    if (!d->gpu) return weights_hash_floats(p->mem, p->n);
    if (d->tr) return trainer_params_hash(d->tr);
    if (!d->sh.p_lags) return weights_sum_hash(p->mem, p->n);
    /* sh.p lags: the bf16 weights, widened -- held16, or the GPU model's after a
     * GPU-to-GPU sync */
    const uint16_t *held = d->sh.held16;
    uint16_t *tmp = NULL;
    if (d->sh.p_lags == 2) {
        tmp = xmalloc(p->n * sizeof *tmp);
        if (d->gpu->to_host(tmp, d->gs.gm->w, p->n * sizeof *tmp))
            FATAL("CUDA: the GPU model's weights to the host: %s", d->gpu->last_error());
        held = tmp;
    }
    uint64_t h = 0;
    for (size_t k = 0; k < p->n; k++) h += weights_sum_hash_term((uint32_t)held[k] << 16, k);
    free(tmp);
    return h;
}

static float *grad_buffer(struct device *d, size_t *n) { return cpu_grad_buffer(d, n); }

static void train_apply(struct device *d, int step, struct wire_train_done *done)
{
    cpu_train_apply(d, step, done);
    drop_full(d); /* the loaded weights are history now */
}

static double no_extra(struct device *d, int n)
{
    (void)d;
    (void)n;
    return 0;
}

/* Everything but the name and the description: the CPU and the CUDA device share it. */
#define HOST_SIDE_OPS                                                                     \
    .open = cpu_open, .close = cpu_close, .epoch = cpu_epoch, .inst_open = cpu_inst_open, \
    .inst_submit = cpu_inst_submit, .inst_progress = cpu_inst_progress,                   \
    .inst_handback = cpu_inst_handback, .inst_quiesce = cpu_inst_quiesce,                 \
    .inst_close = cpu_inst_close, .inst_next_wake = cpu_inst_next_wake,                   \
    .grad_buffer = grad_buffer, .stats_buffer = cpu_stats_buffer,                         \
    .train_compute = cpu_train_compute, .train_reduce_extra_s = no_extra,                 \
    .train_apply = train_apply, .join_buffer = cpu_join_buffer,                           \
    .join_restore = cpu_join_restore, .join_extra_s = no_extra, .state_whole = cpu_state_whole, \
    .state_cut = cpu_state_cut, .slices = cpu_slices, .read_slices = cpu_read_slices,     \
    .send_bf16 = cpu_send_bf16,                                                           \
    .weights_staged = cpu_weights_staged, .weights_unstage = cpu_weights_unstage,         \
    .version = cpu_version, .last_install = cpu_last_install, .last_send = cpu_last_send, \
    .stage_bf16 = cpu_stage_bf16, .weights_staged_bf16 = cpu_weights_staged_bf16,         \
    .gsync_on = cpu_gsync_on, .gsync_send = cpu_gsync_send, .gsync_recv = gsync_recv,     \
    .gsync_landed = cpu_gsync_landed,                                                     \
    .weights_hash = cpu_weights_hash, .save = cpu_train_save

const struct device_ops device_cpu = {.name = "cpu", .describe = cpu_describe, HOST_SIDE_OPS};

/* The CUDA device: the CPU device's description, TP degrees included, with rates and
 * cost model measured on GPU 0 (cuda_rates.c), after checking on rank 0 that there is
 * a GPU to run on. */
static int cuda_describe(const struct libra_config *cfg, const struct cost_model *cm,
                         struct device_info *out, char *err, size_t errlen)
{
    /* no module, no driver or no GPU: one message from rank 0 before any worker starts */
    char why[2048];
    const struct cuda_api *api = cuda_module_load(why, sizeof why);
    if (!api || api->device_count() < 1) {
        snprintf(err, errlen, "%s: device.type = \"cuda\": %s", cfg->source,
                 api ? api->last_error() : why);
        return -1;
    }
    return cuda_describe_measured(cfg, cm, out, err, errlen);
}

/* ... and the replicas' gradient summed where it lies, on the GPUs (cpu_grad_reduce). */
const struct device_ops device_cuda = {.name = "cuda", .describe = cuda_describe,
                                       .grad_reduce = cpu_grad_reduce, .sync_bf16 = 1,
                                       HOST_SIDE_OPS};
