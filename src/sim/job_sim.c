/*
 * libra-sim's loop and transport (include/libra/job_sim.h): rank 0's controller
 * runs unchanged; its messages go to the simulated ranks of sim_ranks.c, whose
 * answers come back through an inbox in virtual time.
 */
#include "sim_internal.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "libra/log.h"

/* ---- the inbox: messages to rank 0 due now (a FIFO), and timers (later) ---- */

void sim_post(struct sim *s, int tag, int source, const void *data, size_t len)
{
    XGROW(s->ev, s->cap_ev, s->n_ev + 1);
    XGROW(s->arena, s->cap_arena, s->len_arena + len);
    memcpy(s->arena + s->len_arena, data, len);
    s->ev[s->n_ev++] = (struct sim_event){s->now, 0, tag, source, s->len_arena, len};
    s->len_arena += len;
}

void sim_post_at(struct sim *s, double t, int tag, int source, const void *data, size_t len)
{
    if (len > sizeof s->timer[0].data) FATAL("libra-sim: timer message of %zu bytes", len);
    XGROW(s->timer, s->cap_timer, s->n_timer + 1);
    struct sim_timer *e = &s->timer[s->n_timer++];
    *e = (struct sim_timer){.t = t, .seq = s->seq++, .tag = tag, .source = source, .len = len};
    memcpy(e->data, data, len);
}

void sim_cancel(struct sim *s, int tag, int source)
{
    size_t k = 0;
    for (size_t i = 0; i < s->n_timer; i++)
        if (!(s->timer[i].tag == tag && s->timer[i].source == source)) s->timer[k++] = s->timer[i];
    s->n_timer = k;
}

static int cmp_timer(const void *a, const void *b)
{
    const struct sim_timer *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Timers due by now join the FIFO, in (time, order set) order. */
static void fire_timers(struct sim *s)
{
    if (s->n_timer == 0) return;
    qsort(s->timer, s->n_timer, sizeof *s->timer, cmp_timer);
    size_t k = 0;
    while (k < s->n_timer && s->timer[k].t <= s->now) {
        sim_post(s, s->timer[k].tag, s->timer[k].source, s->timer[k].data, s->timer[k].len);
        s->st.timers++;
        k++;
    }
    memmove(s->timer, s->timer + k, (s->n_timer - k) * sizeof *s->timer);
    s->n_timer -= k;
}

/* Delivers the FIFO (messages posted meanwhile included). Returns how many. */
static int poll(void *ctx, struct controller *c)
{
    struct sim *s = ctx;
    int n = 0;
    while (s->head < s->n_ev) {
        struct sim_event e = s->ev[s->head++];
        XGROW(s->msg, s->cap_msg, e.len + 1);
        memcpy(s->msg, s->arena + e.off, e.len);
        s->st.messages_in++;
        ctl_deliver(c, e.tag, e.source, s->msg, e.len);
        n++;
    }
    s->head = s->n_ev = 0; /* everything delivered: reuse the storage */
    s->len_arena = 0;
    return n;
}

static double clock_now(void *ctx)
{
    const struct sim *s = ctx;
    return s->now / s->ts;
}

static void send(void *ctx, struct controller *c, const void *buf, size_t len, int dest, int tag)
{
    (void)c;
    struct sim *s = ctx;
    s->st.messages_out++;
    sim_rank_receive(s, dest, tag, buf, len);
}

/* ---- the clock ---- */

/* The next instant anything can happen: see job_sim.h. INFINITY if nothing can. */
static double next_stop(struct sim *s, const struct controller *c)
{
    double first = sim_ranks_next_event(s);
    double v = first > s->now + s->tick ? first : s->now + s->tick;
    if (!isfinite(first)) v = INFINITY;
    for (size_t i = 0; i < s->n_timer; i++)
        if (s->timer[i].t < v) v = s->timer[i].t;
    struct ctl_status cs;
    ctl_status(c, &cs);
    if (cs.held > 0 && s->now + s->tick < v) v = s->now + s->tick;
    return v;
}

int job_sim_run(const struct job_sim_config *jc, struct metrics *m, struct job_sim_stats *st,
                char *err, size_t errlen)
{
    struct sim *s = xcalloc(1, sizeof *s);
    s->c = jc;
    s->ts = jc->cfg->device.time_scale;
    s->tick = jc->tick_s > 0 ? jc->tick_s : JOB_SIM_DEFAULT_TICK_S;
    sim_ranks_init(s);
    struct ctl_transport tr = {.ctx = s, .send = send, .poll = poll, .now = clock_now};
    struct device_info dev;
    if (device_emu.describe(jc->cfg, jc->cm, &dev, err, errlen)) {
        sim_ranks_free(s);
        free(s);
        return -1;
    }
    struct controller *c = ctl_create(jc->cfg, jc->cm, jc->wl, &dev, m, jc->world, &tr, NULL, 0);
    struct ctl_status cs;
    int rc = 0;
    while (ctl_running(c)) {
        if (ctl_iterate(c)) continue;
        double v = next_stop(s, c);
        if (!isfinite(v)) {
            ctl_status(c, &cs);
            snprintf(err, errlen, "libra-sim: stalled at %.3f emulated s in step %d: %zu "
                     "trajectories started, %zu queued, %zu held, training %s, but nothing is "
                     "due (a bug)", s->now, cs.step + 1, cs.n_traj, cs.queued, cs.held,
                     cs.train_inflight ? "in flight" : "idle");
            rc = -1;
            break;
        }
        s->now = v;
        s->st.stops++;
        fire_timers(s);
        sim_ranks_advance(s, v);
    }
    if (rc == 0) {
        ctl_status(c, &cs);
        s->st.planner_solve_s = cs.solve_s_sum;
        s->st.planner_solves = cs.n_solves;
        ctl_close(c);
    }
    s->st.virtual_s = s->now;
    s->st.events = s->st.messages_in + s->st.messages_out + s->st.engine_advances + s->st.timers;
    if (st) *st = s->st;
    ctl_destroy(c);
    sim_ranks_free(s);
    free(s->ev);
    free(s->timer);
    free(s->arena);
    free(s->msg);
    free(s);
    return rc;
}
