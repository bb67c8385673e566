/*
 * libra-sim's simulated ranks: what every worker rank of the job would do with rank
 * 0's messages (src/control/worker*.c, emulated device), in virtual time. Rollout
 * leaders run the emulated engine; training ranks take the emulated worker's
 * timing; the other members of an instance or replica have nothing of their own to
 * simulate.
 */
#include "sim_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "libra/plan_cost.h"

void sim_ranks_init(struct sim *s)
{
    int world = s->c->world;
    plan_init(&s->plan, world);
    plan_init(&s->next, world);
    for (int r = 0; r < world; r++) s->plan.ranks[r].role = r ? ROLE_IDLE : ROLE_CONTROLLER;
    s->eng = xcalloc((size_t)world, sizeof *s->eng);
    s->have_eng = xcalloc((size_t)world, 1);
    s->next_ev = xcalloc((size_t)world, sizeof *s->next_ev);
    s->dirty = xcalloc((size_t)world, 1);
    s->leaders = xcalloc((size_t)world, sizeof *s->leaders);
}

void sim_ranks_free(struct sim *s)
{
    for (int r = 0; r < s->c->world; r++)
        if (s->have_eng[r]) engine_free(&s->eng[r]);
    free(s->eng);
    free(s->have_eng);
    free(s->next_ev);
    free(s->dirty);
    free(s->leaders);
    free(s->res);
    wire_buf_free(&s->pack);
    plan_free(&s->plan);
    plan_free(&s->next);
}

static void list_leaders(struct sim *s)
{
    s->n_leaders = 0;
    for (int r = 1; r < s->c->world; r++)
        if (s->have_eng[r]) s->leaders[s->n_leaders++] = r;
}

/* ---- rollout leaders ---- */

static void post_results(struct sim *s, int r, int tag)
{
    if (s->n_res == 0 && tag != TAG_HANDBACK) return;
    emu_pack_results(&s->pack, r, &s->eng[r], s->res, s->n_res, s->ts);
    sim_post(s, tag, r, s->pack.data, s->pack.len);
    s->n_res = 0;
}

/* Runs rank r's engine to v and posts what it finished. */
static void advance_engine(struct sim *s, int r, double v)
{
    s->n_res = 0;
    engine_advance(&s->eng[r], v, &s->res, &s->n_res, &s->cap_res);
    s->dirty[r] = 1;
    s->st.engine_advances++;
    post_results(s, r, TAG_TURN_RESULT);
}

static void start_engine(struct sim *s, int r)
{
    const struct libra_config *cfg = s->c->cfg;
    const struct rank_assign *a = &s->plan.ranks[r];
    struct engine_config ec = {.tp = a->tp,
                               .leader = r,
                               .max_turns = cfg->rollout.max_turns,
                               .max_tokens = cfg->rollout.max_tokens,
                               .max_batch = 256, /* the emulated worker's */
                               .seed = cfg->run.seed};
    iq_config_from_sched(&ec.queue, &cfg->sched);
    engine_init(&s->eng[r], &ec, s->c->cm, s->c->wl);
    s->eng[r].vnow = s->now;
    s->eng[r].version = -1; /* decode waits for the weight sync that follows every plan */
    s->have_eng[r] = 1;
    s->dirty[r] = 1;
}

static void handback(struct sim *s, int r)
{
    advance_engine(s, r, s->now);
    s->n_res = 0;
    engine_handback(&s->eng[r], &s->res, &s->n_res, &s->cap_res);
    post_results(s, r, TAG_HANDBACK);
    engine_free(&s->eng[r]);
    s->have_eng[r] = 0;
}

static void on_turn_req(struct sim *s, int r, const void *msg, size_t len)
{
    if (!s->have_eng[r]) FATAL("libra-sim: turn requests reached rank %d, which leads no instance", r);
    advance_engine(s, r, s->now);
    struct wire_reader rd;
    struct wire_turn_req req;
    int got = wire_reader_init(&rd, msg, len) < 0 ? -1 : 1;
    while (got == 1 && (got = wire_next_turn_req(&rd, &req, NULL)) == 1) engine_submit(&s->eng[r], &req);
    if (got < 0) FATAL("libra-sim: malformed turn requests (%zu bytes) for rank %d", len, r);
}

double sim_ranks_next_event(struct sim *s)
{
    double first = INFINITY;
    for (int k = 0; k < s->n_leaders; k++) {
        int r = s->leaders[k];
        if (!s->have_eng[r]) continue;
        if (s->dirty[r]) s->next_ev[r] = engine_next_event(&s->eng[r]);
        s->dirty[r] = 0;
        if (s->next_ev[r] < first) first = s->next_ev[r];
    }
    return first;
}

void sim_ranks_advance(struct sim *s, double v)
{
    for (int k = 0; k < s->n_leaders; k++) {
        int r = s->leaders[k];
        if (!s->have_eng[r]) continue;
        if (s->dirty[r]) s->next_ev[r] = engine_next_event(&s->eng[r]);
        s->dirty[r] = 0;
        if (s->next_ev[r] <= v) advance_engine(s, r, v);
    }
}

/* ---- weight syncs and plans ---- */

static void on_sync(struct sim *s, int r, const void *msg, size_t len)
{
    struct wire_sync y;
    if (len != sizeof y) FATAL("libra-sim: malformed SYNC message (%zu bytes)", len);
    memcpy(&y, msg, sizeof y);
    if (s->have_eng[r]) {
        advance_engine(s, r, s->now);
        engine_set_version(&s->eng[r], y.version, cost_weight_sync_s(s->c->cm));
    }
    struct wire_sync_done d = {y.version, y.sync_id, 0};
    sim_post(s, TAG_SYNC_DONE, r, &d, sizeof d);
}

/* Rank 0 sends the plan to ranks 1 .. world-1 in order: the first copy is read, every
 * rank does its part (hand back a dissolved instance, start or drop a join), and the
 * last one makes it the plan in force and starts the new instances' engines. */
static void on_plan(struct sim *s, int r, const void *msg, size_t len)
{
    int world = s->c->world;
    if (r == 1 && (plan_unpack(msg, len, &s->next) || s->next.world != world))
        FATAL("libra-sim: malformed plan (%zu bytes)", len);
    if (s->have_eng[r] && !plan_instance_survives(&s->plan, &s->next, r)) handback(s, r);
    int was_hybrid = s->plan.ranks[r].role == ROLE_HYBRID;
    int is_hybrid = s->next.ranks[r].role == ROLE_HYBRID;
    if (!is_hybrid) {
        sim_cancel(s, TAG_HYBRID_READY, r);
    } else if (!was_hybrid) {
        int dp = s->next.n_train / plan_replica_size(&s->next);
        struct wire_hybrid_ready ready = {s->next.epoch, r};
        sim_post_at(s, s->now + pc_join_fetch_s(s->c->cm, dp), TAG_HYBRID_READY, r, &ready,
                    sizeof ready);
    }
    if (r != world - 1) return;
    plan_copy(&s->plan, &s->next);
    for (int q = 1; q < world; q++) {
        const struct rank_assign *a = &s->plan.ranks[q];
        if (a->role == ROLE_ROLLOUT && a->index == 0 && !s->have_eng[q]) start_engine(s, q);
    }
    list_leaders(s);
}

/* ---- training ---- */

/* One rank's share of a step. When every rank of every replica has its share, the
 * step's end is set: the core replicas reduce once the slowest has computed, the
 * root then waits for the lent replicas' gradients (worker_train.c). */
static void on_train_batch(struct sim *s, int r, const void *msg, size_t len)
{
    struct wire_train_batch h;
    struct emu_share share;
    struct sim_train *t = &s->tr;
    if (t->msgs == 0) memset(t, 0, sizeof *t);
    /* every rank of a replica holds its share's gradient: count each replica once */
    int first_of_replica = plan_train_index(&s->plan, r) % plan_replica_size(&s->plan) == 0;
    if (emu_read_share(msg, len, s->c->cfg->run.seed, &h, &share, first_of_replica ? t->grad : NULL))
        FATAL("libra-sim: malformed training batch (%zu bytes) for rank %d", len, r);
    double compute = emu_share_compute_s(s->c->cm, &s->plan, &share);
    if (s->plan.ranks[r].role == ROLE_HYBRID)
        t->hybrid_s = fmax(t->hybrid_s, compute);
    else
        t->core_s = fmax(t->core_s, compute);
    t->busy_s += compute;
    t->step = h.step;
    if (++t->msgs < h.n_replicas * h.replica_size) return;
    double reduce = emu_reduce_s(s->c->cm, &s->plan, h.n_replicas);
    double norm = 0;
    for (int i = 0; i < EMU_PARAMS; i++) norm += (double)t->grad[i] * t->grad[i];
    struct wire_train_done d = {.step = t->step,
                                .n_replicas = h.n_replicas,
                                .compute_s = t->core_s / s->ts,
                                .comm_s = reduce / s->ts,
                                /* the emulated device's split (emu_device.c) */
                                .fwd_s = t->core_s / 3.0 / s->ts,
                                .bwd_s = (t->core_s - t->core_s / 3.0) / s->ts,
                                .busy_rank_s = t->busy_s / s->ts,
                                .grad_norm = sqrt(norm)};
    sim_post_at(s, s->now + fmax(t->core_s + reduce, t->hybrid_s), TAG_TRAIN_DONE,
                plan_train_root(&s->plan), &d,
                sizeof d);
    t->msgs = 0;
}

void sim_rank_receive(struct sim *s, int dest, int tag, const void *buf, size_t len)
{
    if (dest < 1 || dest >= s->c->world) FATAL("libra-sim: message for rank %d of %d", dest, s->c->world);
    switch (tag) {
    case TAG_TURN_REQ: on_turn_req(s, dest, buf, len); break;
    case TAG_PLAN: on_plan(s, dest, buf, len); break;
    case TAG_SYNC: on_sync(s, dest, buf, len); break;
    case TAG_TRAIN_BATCH: on_train_batch(s, dest, buf, len); break;
    case TAG_SHUTDOWN:
        if (s->have_eng[dest]) handback(s, dest);
        if (dest == s->c->world - 1) list_leaders(s);
        break;
    default:
        FATAL("libra-sim: rank %d cannot simulate message tag %d (%s)", dest, tag,
              wire_tag_name(tag));
    }
}
