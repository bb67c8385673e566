/*
 * The scheduler interface: rank 0 asks where the next turn of a trajectory runs.
 * Policies plug in behind sched_route; C-MLFQ and the baselines (length_aware,
 * la_mlfq) come in a later issue. Load is KV tokens (context + budget of the turns
 * an instance holds) normalised by the instance's KV capacity, so instances of
 * different TP compare fairly.
 *
 * least_loaded: the instance with the lowest normalised load; a trajectory stays on
 * the instance that holds its KV cache unless that one is more than
 * SCHED_STICKY_MARGIN more loaded than the least-loaded one (migration re-prefills
 * the whole context). Ties rotate so equally loaded instances share work.
 */
#ifndef LIBRA_SCHED_H
#define LIBRA_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "libra/config.h"

#define SCHED_STICKY_MARGIN 0.10

struct sched_instance {
    int leader;       /* world rank of the instance leader */
    int tp;
    double capacity;  /* KV tokens */
    double load;      /* KV tokens of turns dispatched and not yet returned */
    int n_turns;      /* turns dispatched and not yet returned */
};

struct sched_turn {
    int64_t traj_id;
    int turn;
    int ctx_tokens;
    int budget;
    int prev;         /* instance index of the previous turn, -1 if none or gone */
    int n_failures;
};

struct sched {
    char policy[32];
    unsigned rotate; /* tie-break rotation */
    int64_t routed, migrated;
};

int sched_init(struct sched *s, const struct sched_config *cfg, char *err, size_t errlen);
/* Index of the chosen instance (0 .. n-1); n > 0. */
int sched_route(struct sched *s, const struct sched_turn *t, const struct sched_instance *inst,
                int n);

#endif
