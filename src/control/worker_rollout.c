/*
 * A worker's rollout role: the instance leader runs the emulated engine, takes turn
 * requests, reports finished turns (with the instance's busy time) and hands its
 * in-flight turns back when its instance is dissolved or the run ends. Other members
 * of a TP group take part in the instance's collectives only (weight sync).
 */
#include <math.h>
#include <string.h>

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
    struct engine_config ec = {a->tp, w->rank, w->cfg->rollout.max_turns,
                               w->cfg->rollout.max_tokens, 256, w->cfg->run.seed};
    engine_init(&w->eng, &ec, w->cm, w->wl);
    w->eng.vnow = wr_virtual_now(w);
    w->eng.version = -1; /* decode waits for the weight sync that follows every plan */
    w->have_engine = 1;
}

void wr_on_turn_req(struct worker *w, const void *msg, size_t len)
{
    struct wire_turn_req req;
    if (wire_unpack_turn_req(msg, len, &req, NULL))
        FATAL("malformed turn request (%zu bytes) from rank 0", len);
    if (!w->have_engine)
        FATAL("turn request for trajectory %lld reached rank %d, which leads no rollout instance "
              "(role %s)",
              (long long)req.traj_id, w->rank, role_name(w->plan.ranks[w->rank].role));
    engine_advance(&w->eng, wr_virtual_now(w), &w->res, &w->n_res, &w->cap_res);
    engine_submit(&w->eng, &req);
}

/* Sends the collected results; busy time goes with the first. */
static void send_results(struct worker *w)
{
    for (int i = 0; i < w->n_res; i++) {
        struct wire_turn_result *r = &w->res[i];
        r->busy_rank_s = i == 0 ? engine_take_busy(&w->eng) / w->time_scale : 0;
        wire_buf_reset(&w->pack);
        wire_pack_turn_result(&w->pack, r, NULL, NULL);
        outbox_send(&w->ob, w->pack.data, w->pack.len, 0, TAG_TURN_RESULT, MPI_COMM_WORLD);
    }
    w->n_res = 0;
}

int wr_progress(struct worker *w)
{
    if (!w->have_engine) return 0;
    engine_advance(&w->eng, wr_virtual_now(w), &w->res, &w->n_res, &w->cap_res);
    int n = w->n_res;
    send_results(w);
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
    send_results(w);
    engine_handback(&w->eng, &w->res, &w->n_res, &w->cap_res);
    struct wire_handback_hdr h = {w->n_res, w->rank};
    double busy = engine_take_busy(&w->eng) / w->time_scale;
    if (w->n_res > 0) w->res[0].busy_rank_s = busy;
    wire_buf_reset(&w->pack);
    wire_buf_put(&w->pack, &h, sizeof h);
    wire_buf_put(&w->pack, w->res, (size_t)w->n_res * sizeof *w->res);
    outbox_send(&w->ob, w->pack.data, w->pack.len, 0, TAG_HANDBACK, MPI_COMM_WORLD);
    w->n_res = 0;
    engine_free(&w->eng);
    w->have_engine = 0;
}
