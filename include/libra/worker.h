/*
 * Ranks 1..N-1: the workers. One loop serves whatever role the current plan gives
 * the rank (rollout instance member or leader, training replica, hybrid replica,
 * idle) and follows rank 0's messages: turns, plans, weight syncs, training batches
 * and shutdown. With the emulated device the model math is replaced by the cost
 * model (durations) and the workload model (tokens); the messages, communicators
 * and collectives are the real ones.
 *
 * Emulated weights are a small parameter vector (WORKER_EMU_PARAMS doubles) so the
 * data path is real: gradients are reduced over the training communicator and the
 * hybrid lane, the optimizer updates the root's copy, and weight syncs broadcast it
 * to every rollout rank.
 */
#ifndef LIBRA_WORKER_H
#define LIBRA_WORKER_H

#include <mpi.h>

#include "libra/comms.h"
#include "libra/config.h"
#include "libra/cost.h"
#include "libra/engine.h"
#include "libra/env.h"
#include "libra/rollout_cpu.h"
#include "libra/tfm.h"
#include "libra/trainer.h"
#include "libra/outbox.h"
#include "libra/plan.h"
#include "libra/wire.h"
#include "libra/workload.h"

#define WORKER_EMU_PARAMS 64
#define WORKER_EMU_LR 1e-2

enum train_phase { TP_IDLE = 0, TP_COMPUTE, TP_REDUCE, TP_COMM_DELAY, TP_HYBRIDS };

struct worker_train {
    int phase;               /* enum train_phase */
    int step, n_replicas;
    double until;            /* wall time the current emulated phase ends */
    double compute_s;        /* this rank's compute, wall seconds */
    double comm_s;
    double grad[WORKER_EMU_PARAMS + 1];  /* local gradient; last = compute seconds */
    double sum[WORKER_EMU_PARAMS + 1];   /* reduced */
    MPI_Request req;
    int hybrids_left;        /* root: hybrid gradients still expected */
    int hybrid_ranks;        /* lent ranks taking part in this step */
};

struct worker_sync {
    int active, version, sync_id;
    MPI_Request req;
    double buf[WORKER_EMU_PARAMS + 1]; /* params, then the version */
};

/* device cpu: the real model on this rank. */
struct worker_cpu {
    struct tfm_config mc;
    struct tfm_params p;       /* the weights this rank holds (version w->version) */
    struct adamw opt;          /* the resumed optimizer state, if opt_loaded */
    int opt_loaded;
    struct env env;
    struct rollout_cpu *eng;   /* rollout leader */
    struct trainer *tr;        /* training replica (owns p from its first batch) */
    float *stage;              /* weight-sync receive buffer (p.n floats) */
    struct grpo_stats st;      /* this replica's share, then the reduced sums */
    double reduce_in[9], reduce_out[9];
    MPI_Request req[2];
    double t_compute;
};

struct worker {
    const struct libra_config *cfg;
    const struct cost_model *cm;
    const struct workload *wl;
    int rank, world;
    double t0, time_scale;
    struct plan plan;
    struct comms comms;
    struct outbox ob;
    struct wire_buf msg, pack;

    struct engine eng;       /* rollout leader only */
    int have_engine;
    struct wire_turn_result *res;
    int n_res, cap_res;

    double params[WORKER_EMU_PARAMS];
    int version;             /* version of params, -1 none */
    struct worker_train tr;
    struct worker_sync sync;
    /* a lent (hybrid) rank fetching the weights and its optimizer shard (emulated) */
    struct {
        int active, epoch;
        double until;        /* wall time the fetch completes */
    } join;
    int stop;

    int real;                /* device cpu */
    struct worker_cpu cpu;
};

/* Runs a worker rank until shutdown; returns the process exit code. start_version:
 * the policy version of the weights every rank starts from (0, or a checkpoint's). */
int worker_run(const struct libra_config *cfg, const struct cost_model *cm,
               const struct workload *wl, int rank, int world, int start_version);

/* worker_rollout.c */
int wr_is_leader(const struct worker *w);
double wr_virtual_now(const struct worker *w);
void wr_on_turn_req(struct worker *w, const void *msg, size_t len);
/* Packs n engine results as one result batch from leader (the simulator's too): the
 * engine's busy time since the last report (wall seconds: / time_scale) and its queue
 * state go with the first result, -1 with the others. */
void wr_pack_results(struct wire_buf *pack, int leader, struct engine *e,
                     struct wire_turn_result *res, int n, double time_scale);
int wr_progress(struct worker *w);
void wr_handback(struct worker *w);
void wr_start_engine(struct worker *w);
double wr_next_wake(const struct worker *w);

/* worker_train.c */
void wt_on_batch(struct worker *w, const void *msg, size_t len);

/* The emulated training path's pieces, shared with the simulator (src/sim):
 * wt_read_share reads one rank's batch message -- header, its share's token figures,
 * and adds its part of the emulated gradient to grad (WORKER_EMU_PARAMS) -- 0 or -1
 * if malformed; wt_share_compute_s is the share's compute + TP + pipeline time on one
 * replica of p's training shape and wt_reduce_s each GPU's gradient reduction over
 * n_replicas, both in emulated seconds. */
struct wt_share {
    int n_items;
    double tokens, sum_sq, max_len;
};
int wt_read_share(const void *msg, size_t len, uint64_t seed, struct wire_train_batch *h,
                  struct wt_share *s, double *grad);
double wt_share_compute_s(const struct cost_model *cm, const struct plan *p,
                          const struct wt_share *s);
double wt_reduce_s(const struct cost_model *cm, const struct plan *p, int n_replicas);
int wt_progress(struct worker *w);
/* Before a re-split or the next batch: a non-root replica finishes the tail of its
 * last step (its reduction may still be completing locally when rank 0 already has
 * TRAIN_DONE from the root). */
void wt_settle(struct worker *w);

/* worker_cpu.c: the real model (device cpu) */
void wc_init(struct worker *w);
void wc_free(struct worker *w);
void wc_sync_start(struct worker *w, int root);
void wc_sync_apply(struct worker *w);
void wc_on_ckpt(struct worker *w, const void *msg, size_t len);
/* worker_rollout_cpu.c */
void wrc_start_engine(struct worker *w);
void wrc_on_turn_req(struct worker *w, const void *msg, size_t len);
int wrc_progress(struct worker *w);
void wrc_handback(struct worker *w);
/* worker_train_cpu.c */
void wtc_on_batch(struct worker *w, const void *msg, size_t len);
int wtc_progress(struct worker *w);
/* Completes this replica's part of the last step (see wt_settle). */
void wtc_settle(struct worker *w);

/* worker.c: weight sync (both sides) */
void ws_on_sync(struct worker *w, const struct wire_sync *s);
int ws_progress(struct worker *w);

#endif
