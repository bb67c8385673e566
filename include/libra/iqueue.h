/*
 * The queue discipline inside one rollout instance (C-MLFQ's "multi-level queue",
 * reference cmlfq.md §6.1: the reference has none -- every instance is FIFO).
 *
 * A turn waiting for admission, or running, has a level; lower levels are served
 * first. Admission still takes turns only while their KV tokens fit (the engine's
 * rule); the level only decides who goes first, and which running turn is preempted
 * first when KV runs out (the highest level, newest among equals).
 *
 *   work     = est_remaining - generated  when the router sent an estimate
 *              (est_remaining >= 0: the trajectory's remaining decode tokens when
 *              the turn was dispatched) that the turn has not outrun, else
 *              generated: a turn without an estimate -- e.g. a trajectory that never
 *              called a tool -- or past its estimate starts at level 0 and is demoted
 *              as its token count grows (classic MLFQ quanta);
 *   level    = the number of thresholds base * 4^l (l = 0 .. n_levels - 2) that
 *              work exceeds, so 0 .. n_levels - 1;
 *   aging    = a turn rises one level per age_s seconds it has waited since it was
 *              queued (floor at 0), so nothing starves behind a stream of short work.
 *
 * mlfq = 0 is FIFO (arrival order, newest preempted first): the reference's vLLM.
 */
#ifndef LIBRA_IQUEUE_H
#define LIBRA_IQUEUE_H

#include "libra/config.h"

#define IQ_MAX_LEVELS 8

struct iqueue_config {
    int mlfq;        /* 0: FIFO; 1: multi-level */
    int n_levels;    /* 1 .. IQ_MAX_LEVELS */
    int base_tokens; /* first threshold (>= 1) */
    double age_s;    /* seconds of waiting per level risen; 0 = no aging */
};

/* q from the sched section: instance_queue "mlfq" -> mlfq = 1, "fifo" or "" (unset)
 * -> 0, anything else FATAL; queue_levels, queue_base_tokens, queue_age_s copied.
 * Out-of-range values are not errors here: iq_level treats n_levels <= 1 as one
 * level (FIFO order), clamps it to IQ_MAX_LEVELS, and a base below 1 as 1. */
void iq_config_from_sched(struct iqueue_config *q, const struct sched_config *s);

/* Level of a turn (0 with mlfq = 0). waited_s: seconds since it was queued (0 for a
 * running turn when choosing whom to preempt). */
int iq_level(const struct iqueue_config *c, int est_remaining, int generated, double waited_s);
/* Service order of two waiting turns: < 0 if a goes first. Lower level first, then
 * earlier arrival (FIFO: arrival only). */
int iq_compare(int level_a, double arrival_a, int level_b, double arrival_b);

#endif
