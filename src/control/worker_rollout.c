/*
 * A worker's rollout role: the instance leader runs the emulated engine, takes turn
 * requests, reports finished turns (with the instance's busy time) and hands its
 * in-flight turns back when its instance is dissolved or the run ends. Other members
 * of a TP group take part in the instance's collectives only (weight sync).
 * The instance's queue discipline (fifo / mlfq) comes from the sched section; each
 * result batch reports the instance's queue and KV state on its first result.
 */
#include <math.h>
#include <string.h>

#include "libra/iqueue.h"
#include "libra/log.h"
#include "libra/worker.h"

int wr_is_leader(const struct worker *w)
{
    const struct rank_assign *a = &w->plan.ranks[w->rank];
    return a->role == ROLE_ROLLOUT && a->index == 0;
}

double wr_virtual_now(const struct worker *w) { return (wall_time() - w->t0) * w->time_scale; }

void wr_start_engine(struct worker *w)
{
    const struct rank_assign *a = &w->plan.ranks[w->rank];
    struct engine_config ec = {.tp = a->tp,
                               .leader = w->rank,
                               .max_turns = w->cfg->rollout.max_turns,
                               .max_tokens = w->cfg->rollout.max_tokens,
                               .max_batch = 256,
                               .seed = w->cfg->run.seed};
    iq_config_from_sched(&ec.queue, &w->cfg->sched);
    engine_init(&w->eng, &ec, w->cm, w->wl);
    w->eng.vnow = wr_virtual_now(w);
    w->eng.version = -1; /* decode waits for the weight sync that follows every plan */
    w->have_engine = 1;
}

void wr_on_turn_req(struct worker *w, const void *msg, size_t len)
{
    struct wire_reader rd;
    struct wire_turn_req req;
    if (!w->have_engine)
        FATAL("turn requests reached rank %d, which leads no rollout instance (role %s)", w->rank,
              role_name(w->plan.ranks[w->rank].role));
    engine_advance(&w->eng, wr_virtual_now(w), &w->res, &w->n_res, &w->cap_res);
    int got = wire_reader_init(&rd, msg, len) < 0 ? -1 : 1;
    while (got == 1 && (got = wire_next_turn_req(&rd, &req, NULL)) == 1) engine_submit(&w->eng, &req);
    if (got < 0) FATAL("malformed turn requests (%zu bytes) from rank 0", len);
}

void wr_pack_results(struct wire_buf *pack, int leader, struct engine *e,
                     struct wire_turn_result *res, int n, double time_scale)
{
    int queued, running;
    double kv_frac;
    engine_queue_stats(e, &queued, &running, &kv_frac);
    wire_batch_begin(pack, leader);
    for (int i = 0; i < n; i++) {
        struct wire_turn_result *r = &res[i];
        r->busy_rank_s = i == 0 ? engine_take_busy(e) / time_scale : 0;
        r->inst_queued = i == 0 ? queued : -1;
        r->inst_running = i == 0 ? running : -1;
        r->inst_kv_frac = i == 0 ? kv_frac : -1.0;
        wire_batch_add_turn_result(pack, r, NULL, NULL, NULL, NULL);
    }
}

/* Sends the collected results as one batch (tag TAG_TURN_RESULT or TAG_HANDBACK). A
 * handback is sent even when empty: rank 0 counts them. */
static void send_results(struct worker *w, int tag)
{
    if (w->n_res == 0 && tag != TAG_HANDBACK) return;
    wr_pack_results(&w->pack, w->rank, &w->eng, w->res, w->n_res, w->time_scale);
    outbox_send(&w->ob, w->pack.data, w->pack.len, 0, tag, MPI_COMM_WORLD);
    w->n_res = 0;
}

int wr_progress(struct worker *w)
{
    if (!w->have_engine) return 0;
    engine_advance(&w->eng, wr_virtual_now(w), &w->res, &w->n_res, &w->cap_res);
    int n = w->n_res;
    send_results(w, TAG_TURN_RESULT);
    return n;
}

double wr_next_wake(const struct worker *w)
{
    if (!w->have_engine) return INFINITY;
    double v = engine_next_event(&w->eng);
    return isfinite(v) ? w->t0 + v / w->time_scale : INFINITY;
}

void wr_handback(struct worker *w)
{
    if (!w->have_engine) return;
    engine_advance(&w->eng, wr_virtual_now(w), &w->res, &w->n_res, &w->cap_res);
    send_results(w, TAG_TURN_RESULT);
    engine_handback(&w->eng, &w->res, &w->n_res, &w->cap_res);
    send_results(w, TAG_HANDBACK);
    engine_free(&w->eng);
    w->have_engine = 0;
}
