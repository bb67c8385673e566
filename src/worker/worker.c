/*
 * The worker loop (include/libra/worker.h): follow rank 0's messages, run the
 * current role on the device, apply plans (hand back, re-split), take part in
 * weight syncs and checkpoints.
 *
 * A plan is applied in this order: the step in flight is settled and a weight sync
 * in flight completed (rank 0 sends plans only at quiet points, so both are short);
 * the rollout instance quiesces (a dissolved one hands its turns back first) and the
 * hybrid lane's traffic of the ending epoch is drained; then every rank rebuilds its
 * communicators (comms_rebuild), tells the device its new place, and lent ranks start
 * their joins.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/exit_codes.h"
#include "libra/log.h"
#include "libra/mpi_wait.h"
#include "libra/watchdog.h"
#include "worker_internal.h"

/* A colocated rollout rank is told its rollout place: the device trains on the shard it
 * serves with (the configuration makes the two the same). */
static void tell_device(struct worker *w, const struct plan *old)
{
    const struct rank_assign *a = &w->plan.ranks[w->rank];
    int trains = plan_trains(&w->plan, w->rank);
    int size = plan_replica_size(&w->plan);
    struct device_epoch e = {.plan = &w->plan,
                             .role = a->role,
                             .tp = a->role == ROLE_ROLLOUT ? a->tp : trains ? w->plan.train_tp : 0,
                             .index = a->role == ROLE_ROLLOUT ? a->index
                                      : trains                ? a->index % size
                                                              : 0,
                             .instance = w->comms.instance,
                             .replica = w->comms.replica,
                             .kept = old && a->role == ROLE_ROLLOUT &&
                                     plan_instance_survives(old, &w->plan, w->rank),
                             .sync = w->comms.sync};
    w->ops->epoch(w->dev, &e);
}

static void on_plan(struct worker *w, const void *msg, size_t len)
{
    struct plan next;
    plan_init(&next, w->world);
    if (plan_unpack(msg, len, &next) || next.world != w->world)
        FATAL("malformed plan (%zu bytes) from rank 0", len);
    worker_apply_plan(w, &next);
    plan_free(&next);
}

void worker_apply_plan(struct worker *w, const struct plan *next_in)
{
    struct plan next, old;
    plan_init(&next, w->world);
    plan_copy(&next, next_in);
    wt_settle(w);
    if (w->sync.active) ws_progress(w);
    if (w->sync.active)
        FATAL("plan for epoch %d arrived while weight sync %d is in flight", next.epoch,
              w->sync.sync_id);
    wr_before_plan(w, &next);
    wt_before_plan(w, &next);
    watchdog_tick("a re-split (MPI_Comm_split of the world)");
    comms_rebuild(&w->comms, &w->plan, &next, w->rank);
    plan_init(&old, w->world);
    plan_copy(&old, &w->plan);
    plan_copy(&w->plan, &next);
    plan_free(&next);
    tell_device(w, &old);
    wr_open(w);
    wt_after_plan(w, &old);
    plan_free(&old);
    const struct rank_assign *a = &w->plan.ranks[w->rank];
    LOG_D("epoch %d: %s (instance %d, tp %d, index %d)", w->plan.epoch, role_name(a->role),
          a->instance, a->tp, a->index);
}

static void on_ckpt(struct worker *w, const void *msg, size_t len)
{
    struct wire_ckpt m;
    struct wire_ckpt_done d;
    memset(&d, 0, sizeof d);
    if (len != sizeof m) FATAL("malformed CKPT message (%zu bytes) from rank 0", len);
    memcpy(&m, msg, sizeof m);
    m.dir[sizeof m.dir - 1] = '\0';
    d.step = m.step;
    char err[512];
    /* Every rank of the root replica takes part (its shards are gathered); the root
     * writes and answers. */
    wt_settle(w);
    if (!plan_in_root_replica(&w->plan, w->rank)) {
        snprintf(d.error, sizeof d.error, "rank %d is not in the root replica", w->rank);
    } else {
        d.ok = w->ops->save(w->dev, m.dir, err, sizeof err) == 0;
        if (!d.ok) snprintf(d.error, sizeof d.error, "%s", err);
        if (plan_train_root(&w->plan) != w->rank) return;
    }
    outbox_send(&w->ob, &d, sizeof d, 0, TAG_CKPT_DONE, MPI_COMM_WORLD);
}

/* ---- the loop ---- */

static void on_message(struct worker *w, const MPI_Status *st)
{
    wire_recv(&w->msg, st, MPI_COMM_WORLD);
    size_t len = w->msg.len;
    switch (st->MPI_TAG) {
    case TAG_TURN_REQ: wr_on_turn_req(w, w->msg.data, len); break;
    case TAG_PLAN: on_plan(w, w->msg.data, len); break;
    case TAG_TRAIN_BATCH: wt_on_batch(w, w->msg.data, len); break;
    case TAG_CKPT: on_ckpt(w, w->msg.data, len); break;
    case TAG_SYNC: {
        struct wire_sync s;
        if (len != sizeof s) FATAL("malformed SYNC message (%zu bytes)", len);
        memcpy(&s, w->msg.data, sizeof s);
        ws_on_sync(w, &s);
        break;
    }
    case TAG_HEARTBEAT: break; /* rank 0 is alive: ctl_last is updated below */
    case TAG_SHUTDOWN: {
        int32_t steps;
        if (len != sizeof steps) FATAL("malformed SHUTDOWN message (%zu bytes) from rank 0", len);
        memcpy(&steps, w->msg.data, sizeof steps);
        wt_before_shutdown(w, steps);
        wr_before_plan(w, NULL);
        w->stop = 1;
        break;
    }
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
        w->ctl_last = wall_time();
        on_message(w, &st);
        n++;
    }
    return n;
}

/* The worker's side of liveness: a heartbeat to rank 0 every run.heartbeat_s, and the
 * end of the job if rank 0 has been silent longer than run.unresponsive_s (600 s when
 * automatic: rank 0 heartbeats as often, so only a stopped, hung or vanished rank 0
 * stays silent that long). */
static void liveness(struct worker *w)
{
    watchdog_tick("the worker's loop");
    double now = wall_time(), hb = w->cfg->run.heartbeat_s;
    if (now - w->hb_last >= hb) {
        outbox_send(&w->ob, &w->hb, sizeof w->hb, 0, TAG_HEARTBEAT, MPI_COMM_WORLD);
        w->hb_last = now;
    }
    double limit = w->cfg->run.unresponsive_s > 0 ? w->cfg->run.unresponsive_s : WATCHDOG_FLOOR_S;
    if (now - w->ctl_last > limit)
        FATAL_CODE(LIBRA_EXIT_UNRESPONSIVE,
                   "rank 0 (the controller) has sent nothing for %.0f s (run.unresponsive_s = "
                   "%g): it is stopped, hung or lost with its node", now - w->ctl_last, limit);
}

void worker_init(struct worker *w, const struct libra_config *cfg,
                        const struct cost_model *cm, const struct workload *wl, int rank, int world,
                        int start_version)
{
    memset(w, 0, sizeof *w);
    w->cfg = cfg;
    w->rank = rank;
    w->world = world;
    w->ops = device_find(cfg->device.type);
    if (!w->ops)
        FATAL("device.type = \"%s\": this build has no such device (%s)", cfg->device.type,
              device_names());
    struct device_args a = {.cfg = cfg,
                            .cm = cm,
                            .wl = wl,
                            .rank = rank,
                            .world = world,
                            .start_version = start_version,
                            .t0 = wall_time()};
    w->dev = w->ops->open(&a);
    plan_init(&w->plan, world);
    for (int r = 0; r < world; r++) w->plan.ranks[r].role = r ? ROLE_IDLE : ROLE_CONTROLLER;
    comms_init(&w->comms);
    outbox_init(&w->ob);
    w->ctl_last = w->hb_last = wall_time();
    w->hb_last -= cfg->run.heartbeat_s; /* the first heartbeat (with the host) goes at once */
    char host[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    if (MPI_Get_processor_name(host, &len) != MPI_SUCCESS) snprintf(host, sizeof host, "?");
    snprintf(w->hb.host, sizeof w->hb.host, "%.63s", host);
}

void worker_free(struct worker *w)
{
    if (w->inst) w->ops->inst_close(w->inst);
    w->ops->close(w->dev);
    wt_free(w);
    ws_free(w);
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
        work += wr_progress(w);
        work += wt_progress(w);
        work += wt_join_progress(w);
        liveness(w);
        outbox_progress(&w->ob);
        if (work) {
            backoff_reset(&b);
            continue;
        }
        /* Sleep to the next emulated event, but wake for messages within the back-off. */
        double wake = fmin(wr_next_wake(w), wt_next_wake(w));
        double dt = wake - wall_time();
        if (dt < b.sleep_s) {
            sleep_seconds(dt);
            continue;
        }
        backoff_sleep(&b);
    }
    while (w->sync.active) {
        ws_progress(w);
        if (w->sync.active) sleep_seconds(1e-4);
    }
    outbox_drain(&w->ob);
    worker_free(w);
    free(w);
    return 0;
}
