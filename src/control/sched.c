/* Turn routing policies behind one interface (include/libra/sched.h). */
#include "libra/sched.h"

#include <stdio.h>
#include <string.h>

int sched_init(struct sched *s, const struct sched_config *cfg, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    if (strcmp(cfg->policy, "least_loaded") != 0) {
        snprintf(err, errlen, "sched.policy: unknown policy '%s' (available: least_loaded)",
                 cfg->policy);
        return -1;
    }
    snprintf(s->policy, sizeof s->policy, "%s", cfg->policy);
    return 0;
}

static double norm_load(const struct sched_instance *in)
{
    return in->capacity > 0 ? in->load / in->capacity : in->load;
}

static int least_loaded(struct sched *s, const struct sched_turn *t,
                        const struct sched_instance *inst, int n)
{
    int best = -1;
    double best_load = 0;
    /* Scan from the rotation point so ties go round-robin. */
    for (int k = 0; k < n; k++) {
        int i = (int)((s->rotate + (unsigned)k) % (unsigned)n);
        double l = norm_load(&inst[i]);
        if (best < 0 || l < best_load) {
            best = i;
            best_load = l;
        }
    }
    s->rotate = (unsigned)best + 1;
    if (t->prev >= 0 && t->prev < n && norm_load(&inst[t->prev]) <= best_load + SCHED_STICKY_MARGIN)
        return t->prev;
    return best;
}

int sched_route(struct sched *s, const struct sched_turn *t, const struct sched_instance *inst,
                int n)
{
    int i = least_loaded(s, t, inst, n);
    s->routed++;
    if (t->prev >= 0 && i != t->prev) s->migrated++;
    return i;
}
