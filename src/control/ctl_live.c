/*
 * Liveness on rank 0 (run.heartbeat_s, run.unresponsive_s): every message from a
 * worker -- its heartbeats (TAG_HEARTBEAT, every run.heartbeat_s, with its host name)
 * and its work -- marks it alive; a worker silent longer than the limit ends the job
 * with exit status LIBRA_EXIT_UNRESPONSIVE, after rank 0's fatal hook has recorded the
 * message (rank, host, its last message and when) in the metrics file and marked it
 * "failed". Rank 0 heartbeats the workers at the same period, so they can tell a
 * stopped rank 0 from a quiet one (src/worker/worker.c).
 *
 * The automatic limit is the larger of LIVE_FLOOR_S and LIVE_STEPS x the longest step
 * seen, since a worker inside one long computation (a training step on a slow CPU)
 * cannot answer. Off in the simulator (no real ranks). A rank blocked in a call that
 * never returns runs none of this: its watchdog thread ends the job (watchdog.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_internal.h"
#include "libra/exit_codes.h"
#include "libra/log.h"
#include "libra/watchdog.h"

#define LIVE_STEPS 10.0

void ctl_live_init(struct controller *c)
{
    struct ctl_live *l = &c->live;
    l->last = xmalloc((size_t)c->world * sizeof *l->last);
    l->tag = xcalloc((size_t)c->world, sizeof *l->tag);
    l->host = xcalloc((size_t)c->world, sizeof *l->host);
    double now = wall_time();
    for (int r = 0; r < c->world; r++) {
        l->last[r] = now;
        snprintf(l->host[r], sizeof l->host[r], "?");
    }
    l->sent = now - c->cfg->run.heartbeat_s; /* the first heartbeats go at once */
}

void ctl_live_free(struct controller *c)
{
    free(c->live.last);
    free(c->live.tag);
    free(c->live.host);
}

int ctl_live_seen(struct controller *c, int source, int tag, const void *data, size_t len)
{
    struct ctl_live *l = &c->live;
    if (source <= 0 || source >= c->world) return 0;
    l->last[source] = wall_time();
    l->tag[source] = tag;
    if (tag != TAG_HEARTBEAT) return 0;
    struct wire_heartbeat hb;
    if (len != sizeof hb) FATAL("malformed HEARTBEAT (%zu bytes) from rank %d", len, source);
    memcpy(&hb, data, sizeof hb);
    hb.host[sizeof hb.host - 1] = '\0';
    snprintf(l->host[source], sizeof l->host[source], "%s", hb.host);
    return 1;
}

void ctl_live_step(struct controller *c, double step_s)
{
    if (step_s > c->live.step_max) c->live.step_max = step_s;
}

void ctl_live_check(struct controller *c)
{
    if (c->tr) return; /* the simulator: no ranks to lose */
    watchdog_tick("the controller's loop");
    struct ctl_live *l = &c->live;
    const struct run_config *run = &c->cfg->run;
    double now = wall_time();
    /* once per heartbeat period, not on every pass of the controller's loop */
    if (now - l->sent < run->heartbeat_s) return;
    struct wire_heartbeat hb;
    memset(&hb, 0, sizeof hb);
    for (int r = 1; r < c->world; r++) ctl_send(c, &hb, sizeof hb, r, TAG_HEARTBEAT);
    l->sent = now;
    double limit = run->unresponsive_s > 0 ? run->unresponsive_s
                                           : fmax(WATCHDOG_FLOOR_S, LIVE_STEPS * l->step_max);
    int worst = -1;
    for (int r = 1; r < c->world; r++)
        if (now - l->last[r] > limit && (worst < 0 || l->last[r] < l->last[worst])) worst = r;
    if (worst < 0) return;
    int others = 0;
    for (int r = 1; r < c->world; r++) others += r != worst && now - l->last[r] > limit;
    FATAL_CODE(LIBRA_EXIT_UNRESPONSIVE,
               "rank %d on host %s has sent nothing for %.0f s (run.unresponsive_s: %.0f s; its "
               "last message: %s at %.1f s into the run, during step %d)%s: it is stopped, hung "
               "(a driver call, a collective) or lost with its node",
               worst, l->host[worst], now - l->last[worst], limit,
               l->tag[worst] ? wire_tag_name(l->tag[worst]) : "none", l->last[worst] - c->t0,
               c->step + 1, others ? " -- and other ranks are silent too" : "");
}
