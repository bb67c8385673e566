/*
 * The planner interface: rank 0 asks for the plan of each planning epoch.
 *
 * This is the deliberately simple planner of the foundation: a static plan
 * (plan.mode = "static") or a scripted sequence (plan.mode = "schedule": epoch e
 * uses schedule[e mod n]). The global resource planner plugs in behind the same
 * call with measured inputs.
 */
#ifndef LIBRA_PLANNER_H
#define LIBRA_PLANNER_H

#include <stddef.h>

#include "libra/config.h"
#include "libra/plan.h"

struct planner {
    const struct plan_config *cfg;
    int world;
};

void planner_init(struct planner *pl, const struct plan_config *cfg, int world);
/* Fills out with the plan of epoch (starting at step); 0 or -1 with a message. */
int planner_next(struct planner *pl, int epoch, int step, struct plan *out, char *err,
                 size_t errlen);

#endif
