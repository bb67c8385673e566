/*
 * The queue discipline inside one rollout instance (include/libra/iqueue.h): a
 * turn's level from its remaining work (the router's estimate, else the tokens it has
 * generated), lifted by aging, and the service order of two waiting turns. Pure
 * functions; both rollout engines (src/emu/engine.c, src/rollout/rollout_slots.c)
 * call them from their admission and preemption loops.
 */
#include "libra/iqueue.h"

#include <math.h>
#include <string.h>

#include "libra/log.h"

void iq_config_from_sched(struct iqueue_config *q, const struct sched_config *s)
{
    memset(q, 0, sizeof *q);
    if (strcmp(s->instance_queue, "mlfq") == 0)
        q->mlfq = 1;
    else if (s->instance_queue[0] != '\0' && strcmp(s->instance_queue, "fifo") != 0)
        FATAL_INPUT("sched.instance_queue = \"%.16s\": expected \"fifo\" or \"mlfq\"",
                    s->instance_queue);
    q->n_levels = s->queue_levels;
    q->base_tokens = s->queue_base_tokens;
    q->age_s = s->queue_age_s;
}

int iq_level(const struct iqueue_config *c, int est_remaining, int generated, double waited_s)
{
    if (!c->mlfq) return 0;
    int n_levels = c->n_levels < IQ_MAX_LEVELS ? c->n_levels : IQ_MAX_LEVELS;
    if (n_levels <= 1) return 0;
    /* In doubles: est_remaining - generated and base * 4^l may not fit an int. */
    /* A turn that outruns its estimate was misjudged: from then on its own token
     * count is the evidence (demotion), as for a turn without an estimate. */
    double work = est_remaining >= 0 && generated <= est_remaining
                      ? (double)est_remaining - generated
                      : (double)generated;
    double threshold = c->base_tokens >= 1 ? c->base_tokens : 1;
    int level = 0;
    while (level < n_levels - 1 && work > threshold) {
        level++;
        threshold *= 4;
    }
    /* !(x > 0) also catches NaN: a clock gone wrong never lifts a level. */
    if (c->age_s > 0 && waited_s > 0) {
        double risen = floor(waited_s / c->age_s);
        level = risen >= level ? 0 : level - (int)risen;
    }
    return level;
}

int iq_compare(int level_a, double arrival_a, int level_b, double arrival_b)
{
    if (level_a != level_b) return level_a < level_b ? -1 : 1;
    if (arrival_a < arrival_b) return -1;
    return arrival_a > arrival_b;
}
