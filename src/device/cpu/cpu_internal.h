/*
 * Private to src/device/cpu: the CPU device's state on one worker rank, shared by
 *   cpu_device.c    lifetime, epochs (which shard the rank holds), weights, checkpoints
 *   cpu_shard.c     a shard of the model: TP degree t, index i, its communicators
 *   cpu_comm.c      the model's collectives over an MPI communicator
 *   cpu_gpu_comm.c  device cuda: the GPU collectives of the shard's group (NCCL or
 *                   host-staged), cached by membership
 *   cpu_stage16.c   device cuda: bf16 weight syncs straight to a rollout rank's GPU,
 *                   and a sender's page-locked bf16 copy
 *   cpu_gsync.c     device cuda: weight syncs from GPU to GPU (NCCL)
 *   cpu_syncbuf.c   device cuda: the sync buffer a sync lands in while decoding goes on
 *   cpu_tp_model.c  the rollout model of an instance (rollout_model.h): the leader's
 *                   decoder calls mirrored on the other ranks as a command stream
 *   cpu_rollout.c   rollout instances (the engine on that model)
 *   cpu_train.c     training shares and the optimizer
 *   cpu_rates.c     the rates the device reports; loading the configured model
 *
 * Weights: the rank holds the shard of the model its place needs -- the whole model at
 * TP 1, else the slices of tfm_tp_slices -- in `sh.p` (the trainer's once it exists:
 * it takes the shard over), plus `sh.stage`, the receive buffer of weight syncs. The
 * whole model as loaded stays in `full` until the first sync arrives, so the first
 * plan's shards are cut from it locally; a rank re-sharded later holds no weights
 * (version -1) until the sync that follows every plan.
 *
 * A colocated rank (train.colocate) serves and trains on one shard: its instance decodes
 * with the trainer's weights, which an optimizer step changes in place -- only while no
 * turn is in flight (rank 0 holds the step until then). The local sync that follows
 * stages those same weights, and the instance swaps them in as any sync (caches dropped,
 * the new version stamped): the rollout model always decodes with the trained weights.
 */
#ifndef LIBRA_DEVICE_CPU_INTERNAL_H
#define LIBRA_DEVICE_CPU_INTERNAL_H

#include "libra/adamw.h"
#include "libra/device.h"
#include "libra/device_cpu.h"
#include "libra/cuda_api.h"
#include "libra/env.h"
#include "libra/grpo.h"
#include "libra/rollout_cpu.h"
#include "libra/rollout_model.h"
#include "libra/tfm.h"
#include "libra/tfm_tp.h"
#include "libra/trainer.h"

/* struct tfm_comm over an MPI communicator (cpu_comm.c). tc.ctx points here: keep it
 * at a stable address while a tfm_tp refers to it. */
struct cpu_comm {
    struct tfm_comm tc;
    MPI_Comm comm;
    int owned;                 /* comm was made here (MPI_Comm_free it) */
};
void cpu_comm_bind(struct cpu_comm *c, MPI_Comm comm);
void cpu_comm_free_owned(struct cpu_comm *c);

/* This rank's shard of the model (cpu_shard.c). */
/* A GPU group's all-reduces (include/libra/gpu_comm.h), what it serves and the world
 * ranks it spans (cpu_gpu_comm.c). */
#define CPU_GPU_GROUP_MAX 512
#define CPU_GPU_CACHE 4
enum cpu_gpu_kind { CPU_GPU_TP, CPU_GPU_KV, CPU_GPU_DP, CPU_GPU_SYNC };
struct cpu_gpu_group {
    int kind, n, world[CPU_GPU_GROUP_MAX];
    struct gpu_comm *gc;
};

struct cpu_shard {
    int t, i;                  /* TP degree and index; t = 0: none */
    struct tfm_tp tp;          /* its geometry; refers to comm and kv */
    struct cpu_comm comm, kv;  /* the group (instance or replica) and the kv sub-group */
    struct tfm_params p;       /* the shard's weights (tp.local layout), unless the trainer has them */
    float *stage;              /* (p.n) weight-sync receive buffer */
    /* device cuda, a rank that only serves rollouts (cpu_stage16.c): bf16 syncs land in
     * land16 (p.n, stage's layout) and go to the GPU as they are; held16 holds the
     * weights installed last, which p then lags (p_lags: widened when p is read) */
    uint16_t *land16, *held16;
    const struct cuda_api *pinned; /* the module whose page-locked memory they are (NULL:
                                      pageable, when it had none to give) */
    int staged16;              /* the staged version is in land16, not in stage */
    int p_lags;                /* 1: p lags held16; 2: held16 lags the instance's GPU
                                  model too (a GPU-to-GPU sync, cpu_gsync.c) */
};

/* device cuda: GPU-to-GPU weight syncs (cpu_gsync.c) */
enum { CPU_GSYNC_OFF, CPU_GSYNC_NCCL, CPU_GSYNC_HOST };
struct cpu_gsync {
    int mode;                  /* this epoch's: NCCL, host-staged over MPI (tests), off */
    struct cpu_comm comm;      /* bound to the epoch's sync communicator */
    void *nccl;                /* its NCCL communicator (a cached GPU group's) */
    struct dev_gmsg *run;      /* a receiver's runs waiting for the safe point (n_run) */
    int n_run, cap_run;
    int pending;               /* runs waiting */
    int landed;                /* the last sync's runs are in the model */
    struct gpu_model *gm;      /* the instance's GPU model, while it exists */
    uint16_t *pack;            /* GPU: a strided run, packed or to unpack (cap_pack) */
    size_t cap_pack;
    int buffered;              /* the pending runs go through the sync buffer (sb) */
};

/* device cuda, a rank that only serves rollouts: the sync buffer (cpu_syncbuf.c) */
struct cpu_syncbuf {
    uint16_t *w;               /* GPU: bf16, the shard's layout (n values); NULL: none */
    size_t n;
    int issued;                /* weights on their way into w (side stream, marked) */
};

struct device {
    struct device_args a;
    struct device_epoch ep;
    struct tfm_config mc;      /* the whole model */
    struct tfm_params full;    /* the whole model as loaded, while full_version is current */
    int full_version;          /* -1: freed */
    int lazy_version;          /* >= 0: the Hugging Face directory hf_source holds this
                                * version; shards read their slices from it (nothing
                                * else loaded); -1: none */
    struct adamw opt;          /* a resumed optimizer state of the whole model, if opt_loaded */
    int opt_loaded;
    char hf_source[4096];      /* the Hugging Face directory the weights come from, or "":
                                * recorded in the checkpoints' model files */
    const struct vocab *vocab; /* the model's tokenizer and format (model_vocab_open) */
    struct env env;
    struct cpu_shard sh;
    uint16_t *send16;          /* device cuda: a sync sender's bf16 copy (cpu_stage16.c) */
    size_t n_send16;
    const struct cuda_api *send16_pinned; /* its module's page-locked memory, or NULL */
    struct trainer *tr;        /* training replica on sh (owns the shard's weights) */
    /* device cuda: this rank's GPU; the trainer's forwards and backwards run there
     * (gtr, as tr's engine geng; gcomm its TP group, NULL at TP 1) and so does the
     * decoder of an instance */
    const struct cuda_api *gpu;
    int gpu_index;             /* its index on the node */
    struct gpu_trainer *gtr;
    struct train_engine geng;
    struct cpu_gpu_group gcache[CPU_GPU_CACHE]; /* cpu_gpu_comm's groups, oldest first */
    int n_gcache;
    struct cpu_comm dp;        /* the data-parallel communicator of the last grad_reduce */
    struct cpu_gsync gs;
    struct cpu_syncbuf sb;
    int last_install;          /* DEV_INSTALL_*: how the last weights went in */
    int last_send;             /* DEV_SEND_*: how the last GPU-to-GPU sync was sent */
    int version;               /* of the weights held; -1 none */
    int staged_version;        /* the stage holds this version, not yet swapped in; -1 none */
    struct dev_inst *inst;     /* the instance this rank belongs to, if any */
    double stats[DEV_STAT_COUNT];
    float *join;               /* a join's weights and optimizer state */
    size_t n_join;
    /* cpu_state_whole: the replica's whole training state (weights, m, v) on its rank 0,
     * and cpu_state_cut's buffer of one shard of it */
    struct tfm_params whole[3];
    int64_t whole_step;
    int has_whole;
    float *cut;
    size_t n_cut;
    struct cpu_geometry {      /* slice geometry of (t, i) shards, computed once */
        int t, i, n;
        struct dev_slice *s;   /* (n) */
    } geo[32];
    int n_geo;
};

/* The shard's weights this rank holds right now (the trainer's once it exists), brought
 * to the host if its GPU engine kept them (trainer_fetch_params) or widened from the
 * bf16 weights its instance installed last (cpu_stage16_catch_up). */
struct tfm_params *cpu_live_params(struct device *d);
/* The same block without fetching: its layout, and values that may be stale (read them
 * through cpu_read_slices's path, or overwrite all of them). */
struct tfm_params *cpu_live_layout(struct device *d);
/* Frees the trainer (and its GPU engine), if any. */
void cpu_trainer_drop(struct device *d);
/* Device cuda: the GPU all-reduces of the shard's group (sh.comm), NULL at TP 1 or on
 * device cpu; kept by the device (cpu_gpu_comm_free_all at close). Collective over the
 * group (cpu_gpu_comm.c). */
struct gpu_comm *cpu_gpu_comm(struct device *d);
/* The same for the shard's kv sub-group (sh.kv: K < t), NULL without one. Collective
 * over the kv group. */
struct gpu_comm *cpu_gpu_comm_kv(struct device *d);
/* The same for the training replicas' data-parallel communicator dp (bound to d->dp),
 * NULL on device cpu or when dp has more than CPU_GPU_GROUP_MAX ranks (the same on
 * every rank). Collective over dp. */
struct gpu_comm *cpu_gpu_comm_dp(struct device *d, MPI_Comm dp);
void cpu_gpu_comm_free_all(struct device *d);
/* The group of the weight syncs' members (c bound to their communicator); collective
 * over it. */
struct gpu_comm *cpu_gpu_comm_sync(struct device *d, struct cpu_comm *c);

/* cpu_gsync.c: GPU-to-GPU weight syncs (device_ops.gsync_*, include/libra/device.h). */
/* This epoch's mode (collective over e->sync; off on device cpu). */
void cpu_gsync_epoch(struct device *d, const struct device_epoch *e);
int cpu_gsync_on(const struct device *d);
void cpu_gsync_send(struct device *d, const struct dev_gmsg *m, int n);
void cpu_gsync_recv(struct device *d, const struct dev_gmsg *m, int n, int version);
int cpu_gsync_landed(const struct device *d);
/* At the instance's safe point: the waiting runs received into gm (1), or 0 if none. */
int cpu_gsync_post(struct device *d, struct gpu_model *gm);
/* At a safe point, with runs pending: 1 once they are on this GPU, so that
 * cpu_gsync_post takes them in. Runs through the sync buffer are issued (on the side
 * stream) at the first call, and then polled; others are received by the post. */
int cpu_gsync_arrived(struct device *d);

/* cpu_syncbuf.c: the sync buffer of a rank that only serves rollouts
 * (rollout.sync_buffer). make: with the instance's GPU model, before the KV pool; free:
 * with it. fits: it can take the whole shard now. begin / end bracket work issued on
 * the side stream into it (end marks it: issued); from_host issues the shard from
 * page-locked host memory. arrived polls the mark; take joins the side stream and
 * copies the buffer into gm (every rank of the instance having seen it arrive); drop
 * waits for what is on its way and forgets it. */
void cpu_syncbuf_make(struct device *d);
void cpu_syncbuf_free(struct device *d);
int cpu_syncbuf_fits(const struct device *d);
void cpu_syncbuf_begin(struct device *d);
void cpu_syncbuf_end(struct device *d);
void cpu_syncbuf_from_host(struct device *d, const uint16_t *w16);
int cpu_syncbuf_arrived(struct device *d);
void cpu_syncbuf_take(struct device *d, struct gpu_model *gm);
void cpu_syncbuf_drop(struct device *d);
void cpu_gsync_free(struct device *d);

/* cpu_shard.c */
/* Makes sh the shard (t, i) of the group comm (the instance's or the replica's ranks,
 * size t): keeps the weights if the shard is unchanged, else allocates new ones -- cut
 * from full when full is current, read from the Hugging Face directory when it holds
 * the current version (only the shard's slices; version kept either way), else none
 * (version -1). */
void cpu_shard_place(struct device *d, int t, int i, MPI_Comm group);
void cpu_shard_free(struct cpu_shard *sh);
/* Frees the geometry cache. */
void cpu_shard_forget_geometry(struct device *d);
/* A tfm_tp of (t, i) for geometry only (slices, shard / unshard): its communicators
 * comm and kv refuse collectives and must outlive tp. */
void cpu_shard_geometry(const struct tfm_config *mc, int t, int i, struct tfm_tp *tp,
                        struct tfm_comm *comm, struct tfm_comm *kv);
/* The slices of shard (t, i) (tfm_tp_slices geometry), data into p if p != NULL (p is
 * then this rank's own shard). */
int cpu_shard_slices(struct device *d, int t, int i, const struct tfm_params *p,
                     struct dev_slice *out, int max);

/* cpu_stage16.c: bf16 weight syncs straight to a rollout rank's GPU (see cpu_shard). */
/* The device's stage_bf16 and weights_staged_bf16 (include/libra/device.h). */
uint16_t *cpu_stage_bf16(struct device *d, const float *at);
void cpu_stage16_staged(struct device *d);
/* The staged bf16 weights into the instance's GPU model m (the safe point's swap). */
struct gpu_model;
void cpu_stage16_install(struct device *d, struct gpu_model *m);
/* The staged bf16 weights widened into the live weights at once (a rank without an
 * instance, or one whose trainer came after the sync). */
void cpu_stage16_take(struct device *d);
/* sh.p made current if it lags the installed bf16 weights. */
void cpu_stage16_catch_up(struct device *d);
/* At a safe point, with bf16 weights staged in land16 for the GPU model: 1 once they
 * are on this GPU (a sync buffer: sent there at the first call, then polled), so that
 * cpu_stage16_install takes them in. */
int cpu_stage16_arrived(struct device *d);
/* held16 made current if it lags the instance's GPU model (p_lags 2 -> 1): before the
 * model is freed, or sh.p read. */
void cpu_stage16_fetch(struct device *d);
/* Start-up on device cuda, a rank that only serves rollouts: its shard's slices read
 * from the Hugging Face directory dir as bf16 into held16 (sh.p lags); 1, or 0 for any
 * other rank (which reads float32). A bad checkpoint ends the job. */
int cpu_stage16_read_hf(struct device *d, const char *dir);
/* The bf16 weights sh.p lags (the instance's GPU model is made from them), or NULL
 * when sh.p (or the trainer's copy) is current. */
const uint16_t *cpu_stage16_held(const struct device *d);
void cpu_stage16_free(struct cpu_shard *sh);
/* The device's send_bf16 (include/libra/device.h), and its buffer freed. */
uint16_t *cpu_send_bf16(struct device *d, size_t n);
void cpu_send16_free(struct device *d);

/* cpu_tp_model.c: the rollout model of this rank's instance. */
struct cpu_tp_model;
struct cpu_tp_model *cpu_tp_model_create(struct device *d, int leader);
void cpu_tp_model_free(struct cpu_tp_model *m);
const struct rollout_model *cpu_tp_model_ops(struct cpu_tp_model *m);
/* Leader, between engine iterations: if every rank of the instance has staged newer
 * weights, all swap them in (collective); returns 1 if they did. */
int cpu_tp_model_agree_weights(struct cpu_tp_model *m);
/* Member: runs the leader's commands that have arrived (block: until CMD_END, the
 * quiesce). A CMD_END met without blocking -- the leader quiesced before this rank saw
 * the same plan or shutdown -- stops the serving until this rank's quiesce, which then
 * returns at once. Returns how many ran. */
int cpu_tp_model_serve(struct cpu_tp_model *m, int block);
/* Leader: ends the command stream of this epoch (members' serve(block) returns). */
void cpu_tp_model_end(struct cpu_tp_model *m);

/* cpu_rollout.c */
struct dev_inst *cpu_inst_open(struct device *d, int leader);
void cpu_inst_submit(struct dev_inst *in, const struct wire_turn_req *req, const int32_t *ctx);
int cpu_inst_progress(struct dev_inst *in, struct wire_buf *pack, int *n_done);
void cpu_inst_handback(struct dev_inst *in, struct wire_buf *pack);
void cpu_inst_quiesce(struct dev_inst *in);
void cpu_inst_close(struct dev_inst *in);
double cpu_inst_next_wake(const struct dev_inst *in);

/* cpu_train.c */
/* Makes the trainer now if there is none (it takes over the shard's weights), and on
 * device cuda its GPU trainer if it has none: a colocated rank's, before its
 * instance's decoder refers to those weights. */
void cpu_train_prepare(struct device *d);
/* A rank that leaves training (a rollout place in a plan that does not colocate) gives
 * its trainer up: the weights go back to the shard as they are (fetched from the GPU
 * first), the trainer's host and GPU memory are freed -- the GPU's goes to the rollout
 * engine, and the weight syncs may go GPU to GPU again (cpu_gsync.c). Its optimizer
 * state is not needed: a rank that trains again gets the current state from the
 * training group (a join's snapshot, a handover), and cpu_train_prepare makes a new
 * trainer then. Nothing to do without one. */
void cpu_train_retire(struct device *d);
float *cpu_grad_buffer(struct device *d, size_t *n);
/* device.h's grad_reduce: on the GPU at TP 1 (device cuda), else 0. */
int cpu_grad_reduce(struct device *d, MPI_Comm dp);
double *cpu_stats_buffer(struct device *d, size_t *n);
double cpu_train_compute(struct device *d, const void *msg, size_t len);
void cpu_train_apply(struct device *d, int step, struct wire_train_done *done);
float *cpu_join_buffer(struct device *d, int sending, size_t *n);
void cpu_join_restore(struct device *d, int version);
/* device.h's state_whole and state_cut: the training state re-cut for another TP. */
int cpu_state_whole(struct device *d, int keep);
float *cpu_state_cut(struct device *d, int t, int i, size_t *n);
/* The checkpoint's model file: the root gathers the replica's shards (collective over
 * the root replica). */
int cpu_train_save(struct device *d, const char *dir, char *err, size_t errlen);

/* cpu_host.c: the planning cost model of this host for model mc (p: weights of its
 * shapes, any values), given the engine's measured batch-1 decode step and 128-token
 * prefill. */
void cpu_host_cost_model(const struct tfm_config *mc, const struct tfm_params *p,
                         double decode1_s, double prefill128_s, struct cost_model *cm);
/* The cost model's profile of model mc, its weights dtype_bytes each. */
void cpu_model_profile(const struct tfm_config *mc, int dtype_bytes, struct model_profile *m);

/* cpu_rates.c */
int cpu_describe(const struct libra_config *cfg, const struct cost_model *cm,
                 struct device_info *out, char *err, size_t errlen);
/* cpu_describe without the timing: the model's shapes (into mc), the TP degrees it
 * offers and the configured plans' degrees checked against the model, the memory
 * estimate; rates and cost model left zero. 0 or -1 + message. */
int cpu_describe_model(const struct libra_config *cfg, struct device_info *out,
                       struct tfm_config *mc, char *err, size_t errlen);
/* The router's rates from measured decode steps -- batch 1 and 16 with 64 tokens
 * cached, batch 1 with 256 -- and a 128-token prefill, in seconds (the fit of
 * cpu_rates.c's header). */
void cpu_rates_fit(const struct libra_config *cfg, double t1, double t16, double t256,
                   double prefill128, struct rates *r);

/* cuda_rates.c: device cuda's description -- cpu_describe_model's, with the rates and
 * the cost model measured on GPU 0 of rank 0's node. */
int cuda_describe_measured(const struct libra_config *cfg, const struct cost_model *cm,
                           struct device_info *out, char *err, size_t errlen);
/* The model the configuration names: its config and weights (model.checkpoint -- an
 * HDF5 model file, a run checkpoint directory or a Hugging Face directory -- or a fresh
 * seeded model), and a resumed optimizer state if the file has one. hf_source (may be
 * NULL) gets the Hugging Face directory the weights come from ("" if none is known),
 * which the checkpoints record. The model must cover the tokenizer's ids (v->size); a
 * fresh model has exactly those. lazy: a Hugging Face directory's config.json only
 * (p left empty, hf_source its directory): the shards read their slices from it.
 * 0 loaded, 1 config only, or -1 + message. */
int cpu_load_model(const struct libra_config *cfg, const struct vocab *v, int lazy,
                   struct tfm_config *mc, struct tfm_params *p, struct adamw *opt,
                   int *opt_loaded, char *hf_source, size_t hf_cap, char *err, size_t errlen);

#endif
