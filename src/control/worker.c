/*
 * The worker loop (include/libra/worker.h): follow rank 0's messages, run the
 * current role, apply plans (hand back, re-split), take part in weight syncs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "libra/plan_cost.h"
#include "libra/mpi_wait.h"
#include "libra/rng.h"
#include "libra/worker.h"

/* ---- weight sync: the training root broadcasts, rollout ranks receive ---- */

void ws_on_sync(struct worker *w, const struct wire_sync *s)
{
    struct worker_sync *y = &w->sync;
    if (y->active) FATAL("weight sync %d requested while sync %d is in flight", s->sync_id, y->sync_id);
    if (w->comms.sync == MPI_COMM_NULL)
        FATAL("weight sync reached rank %d, which is not in the sync communicator", w->rank);
    int root = plan_train_root(&w->plan) == w->rank;
    y->version = s->version;
    y->sync_id = s->sync_id;
    y->active = 1;
    if (w->real) {
        wc_sync_start(w, root);
        return;
    }
    if (root) {
        memcpy(y->buf, w->params, sizeof w->params);
        y->buf[WORKER_EMU_PARAMS] = s->version;
    }
    MPI_CHECK(MPI_Ibcast(y->buf, WORKER_EMU_PARAMS + 1, MPI_DOUBLE, 0, w->comms.sync, &y->req));
}

int ws_progress(struct worker *w)
{
    struct worker_sync *y = &w->sync;
    if (!y->active) return 0;
    int done = 0;
    MPI_CHECK(MPI_Test(&y->req, &done, MPI_STATUS_IGNORE));
    if (!done) return 0;
    y->active = 0;
    if (w->real) {
        if (plan_train_root(&w->plan) != w->rank) {
            wc_sync_apply(w);
            w->version = y->version;
        }
        struct wire_sync_done d = {y->version, y->sync_id};
        outbox_send(&w->ob, &d, sizeof d, 0, TAG_SYNC_DONE, MPI_COMM_WORLD);
        return 1;
    }
    if ((int)y->buf[WORKER_EMU_PARAMS] != y->version)
        FATAL("weight sync %d delivered version %d, expected %d", y->sync_id,
              (int)y->buf[WORKER_EMU_PARAMS], y->version);
    if (plan_train_root(&w->plan) != w->rank) {
        memcpy(w->params, y->buf, sizeof w->params);
        w->version = y->version;
        if (w->have_engine)
            engine_set_version(&w->eng, y->version, cost_weight_sync_s(w->cm));
    }
    struct wire_sync_done d = {y->version, y->sync_id};
    outbox_send(&w->ob, &d, sizeof d, 0, TAG_SYNC_DONE, MPI_COMM_WORLD);
    return 1;
}

/* ---- plans ---- */

/* A newly lent rank fetches the current weights and its optimizer shard in the
 * background (emulated: the transfer time of the cost model), then tells rank 0; a
 * rank no longer lent drops a fetch in progress. */
static void join_on_plan(struct worker *w, int was_hybrid)
{
    int is_hybrid = w->plan.ranks[w->rank].role == ROLE_HYBRID;
    if (!is_hybrid) {
        w->join.active = 0;
        return;
    }
    if (was_hybrid) return;
    int dp = w->plan.n_train / plan_replica_size(&w->plan);
    w->join.active = 1;
    w->join.epoch = w->plan.epoch;
    w->join.until = wall_time() + pc_join_fetch_s(w->cm, dp) / w->time_scale;
}

static int join_progress(struct worker *w)
{
    if (!w->join.active || wall_time() < w->join.until) return 0;
    struct wire_hybrid_ready r = {w->join.epoch, w->rank};
    outbox_send(&w->ob, &r, sizeof r, 0, TAG_HYBRID_READY, MPI_COMM_WORLD);
    w->join.active = 0;
    return 1;
}

static void on_plan(struct worker *w, const void *msg, size_t len)
{
    struct plan next;
    plan_init(&next, w->world);
    if (plan_unpack(msg, len, &next) || next.world != w->world)
        FATAL("malformed plan (%zu bytes) from rank 0", len);
    wt_settle(w);
    if (w->sync.active) ws_progress(w);
    if (w->sync.active)
        FATAL("plan for epoch %d arrived while weight sync %d is in flight", next.epoch,
              w->sync.sync_id);
    if (w->have_engine && !plan_instance_survives(&w->plan, &next, w->rank))
        w->real ? wrc_handback(w) : wr_handback(w);
    int was_hybrid = w->plan.ranks[w->rank].role == ROLE_HYBRID;
    comms_rebuild(&w->comms, &w->plan, &next, w->rank);
    plan_copy(&w->plan, &next);
    join_on_plan(w, was_hybrid);
    plan_free(&next);
    if (wr_is_leader(w) && !w->have_engine) w->real ? wrc_start_engine(w) : wr_start_engine(w);
    LOG_D("epoch %d: %s (instance %d, tp %d, index %d)", w->plan.epoch,
          role_name(w->plan.ranks[w->rank].role), w->plan.ranks[w->rank].instance,
          w->plan.ranks[w->rank].tp, w->plan.ranks[w->rank].index);
}

/* ---- the loop ---- */

static void on_message(struct worker *w, const MPI_Status *st)
{
    wire_recv(&w->msg, st, MPI_COMM_WORLD);
    size_t len = w->msg.len;
    switch (st->MPI_TAG) {
    case TAG_TURN_REQ:
        w->real ? wrc_on_turn_req(w, w->msg.data, len) : wr_on_turn_req(w, w->msg.data, len);
        break;
    case TAG_PLAN: on_plan(w, w->msg.data, len); break;
    case TAG_TRAIN_BATCH:
        w->real ? wtc_on_batch(w, w->msg.data, len) : wt_on_batch(w, w->msg.data, len);
        break;
    case TAG_CKPT:
        if (!w->real) FATAL("checkpoint request reached rank %d of an emulated run", w->rank);
        wc_on_ckpt(w, w->msg.data, len);
        break;
    case TAG_SYNC: {
        struct wire_sync s;
        if (len != sizeof s) FATAL("malformed SYNC message (%zu bytes)", len);
        memcpy(&s, w->msg.data, sizeof s);
        ws_on_sync(w, &s);
        break;
    }
    case TAG_SHUTDOWN:
        if (wr_is_leader(w)) w->real ? wrc_handback(w) : wr_handback(w);
        w->stop = 1;
        break;
    default:
        FATAL("unexpected message tag %d (%s) from rank 0", st->MPI_TAG, wire_tag_name(st->MPI_TAG));
    }
}

static int poll_messages(struct worker *w)
{
    int n = 0;
    while (!w->stop) {
        int flag = 0;
        MPI_Status st;
        MPI_CHECK(MPI_Iprobe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
        if (!flag) break;
        on_message(w, &st);
        n++;
    }
    return n;
}

static void worker_init(struct worker *w, const struct libra_config *cfg,
                        const struct cost_model *cm, const struct workload *wl, int rank, int world,
                        int start_version)
{
    memset(w, 0, sizeof *w);
    w->cfg = cfg;
    w->cm = cm;
    w->wl = wl;
    w->rank = rank;
    w->world = world;
    w->t0 = wall_time();
    w->time_scale = cfg->device.time_scale;
    w->version = -1;
    plan_init(&w->plan, world);
    for (int r = 0; r < world; r++) w->plan.ranks[r].role = r ? ROLE_IDLE : ROLE_CONTROLLER;
    comms_init(&w->comms);
    outbox_init(&w->ob);
    /* Every replica starts from the same emulated weights (keyed by the seed only). */
    struct rng r;
    rng_init(&r, cfg->run.seed, 0, 0x7061726dULL, 0);
    for (int i = 0; i < WORKER_EMU_PARAMS; i++) w->params[i] = rng_normal(&r);
    w->real = strcmp(cfg->device.type, "cpu") == 0;
    if (w->real) {
        wc_init(w);
        w->version = start_version; /* every rank loaded the same weights */
    }
}

static void worker_free(struct worker *w)
{
    if (w->real)
        wc_free(w);
    else if (w->have_engine)
        engine_free(&w->eng);
    free(w->res);
    outbox_free(&w->ob);
    comms_free(&w->comms);
    plan_free(&w->plan);
    wire_buf_free(&w->msg);
    wire_buf_free(&w->pack);
}

int worker_run(const struct libra_config *cfg, const struct cost_model *cm,
               const struct workload *wl, int rank, int world, int start_version)
{
    struct worker *w = xmalloc(sizeof *w);
    worker_init(w, cfg, cm, wl, rank, world, start_version);
    struct backoff b;
    backoff_reset(&b);
    while (!w->stop) {
        int work = poll_messages(w);
        if (w->stop) break;
        work += ws_progress(w);
        work += w->real ? wrc_progress(w) : wr_progress(w);
        work += w->real ? wtc_progress(w) : wt_progress(w);
        work += join_progress(w);
        outbox_progress(&w->ob);
        if (work) {
            backoff_reset(&b);
            continue;
        }
        /* Sleep to the next emulated event, but wake for messages within the back-off. */
        double wake = w->real ? INFINITY : wr_next_wake(w);
        if (w->tr.phase == TP_COMPUTE || w->tr.phase == TP_COMM_DELAY)
            wake = fmin(wake, w->tr.until);
        if (w->join.active) wake = fmin(wake, w->join.until);
        double dt = wake - wall_time();
        if (dt < b.sleep_s) {
            sleep_seconds(dt);
            continue;
        }
        backoff_sleep(&b);
    }
    if (w->sync.active) mpi_wait_backoff(&w->sync.req, NULL);
    outbox_drain(&w->ob);
    worker_free(w);
    free(w);
    return 0;
}
