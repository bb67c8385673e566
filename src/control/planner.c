/* The static / scripted planner (include/libra/planner.h). */
#include "libra/planner.h"

#include <stdio.h>
#include <string.h>

void planner_init(struct planner *pl, const struct plan_config *cfg, int world)
{
    pl->cfg = cfg;
    pl->world = world;
}

int planner_next(struct planner *pl, int epoch, int step, struct plan *out, char *err,
                 size_t errlen)
{
    const struct plan_config *c = pl->cfg;
    char reason[64];
    const struct plan_spec *spec = &c->fixed;
    if (strcmp(c->mode, "schedule") == 0) {
        int i = epoch % c->n_schedule;
        spec = &c->schedule[i];
        snprintf(reason, sizeof reason, "schedule[%d]", i);
    } else {
        snprintf(reason, sizeof reason, "static");
    }
    return plan_build(spec, pl->world, epoch, step, reason, out, err, errlen);
}
