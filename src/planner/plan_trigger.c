/*
 * When the planner runs (reference planner.md §2.4): the ordered trigger checks of
 * plan_policy.h, the insufficient-history downgrade, and the trigger state
 * (the step of the last plan, the consumed rejected-route baseline).
 *
 * Decisions beyond the reference:
 *   - cooldown applies only after a first plan (last_plan_step >= 0), so a
 *     cooldown longer than the warmup cannot block the very first plan;
 *   - interval < 1 counts as 1 and rejected_delta < 1 as 1 (a zero threshold
 *     would fire on every step);
 *   - the rejected baseline is consumed on every call with metrics, whatever the
 *     result (warmup and cooldown included): one burst fires at most once, and a
 *     burst during the cooldown does not fire later. A counter that went
 *     backwards (a restart) just resets the baseline;
 *   - NaN metrics compare false and so never fire.
 */
#include "libra/plan_policy.h"
#include "libra/metrics_enums.h"

#include <stddef.h>

void trigger_init(struct trigger_state *s)
{
    s->last_plan_step = -1;
    s->rejected_seen = 0;
}

/* The first trigger that holds, before the history downgrade. */
static enum plan_trigger_kind first_trigger(const struct trigger_config *cfg,
                                            const struct trigger_state *s, int step,
                                            const struct runtime_metrics *m)
{
    if (step < cfg->warmup) return PT_WARMUP;
    if (s->last_plan_step >= 0 && (int64_t)step - s->last_plan_step < cfg->cooldown)
        return PT_COOLDOWN;
    int interval = cfg->interval < 1 ? 1 : cfg->interval;
    if (step % interval == 0) return PT_INTERVAL;
    if (!m) return PT_SKIP;
    if (m->queue_pressure >= cfg->queue_threshold) return PT_QUEUE_PRESSURE;
    if (m->active_pressure >= cfg->active_threshold) return PT_ACTIVE_PRESSURE;
    int64_t delta = cfg->rejected_delta < 1 ? 1 : cfg->rejected_delta;
    /* Unsigned difference: no overflow whatever the counters hold. */
    if (m->rejected > s->rejected_seen &&
        (uint64_t)m->rejected - (uint64_t)s->rejected_seen >= (uint64_t)delta)
        return PT_REJECTED_DELTA;
    if (m->train_s > 0 && m->rollout_s / m->train_s >= cfg->imbalance) return PT_IMBALANCE;
    return PT_SKIP;
}

enum plan_trigger_kind plan_trigger(const struct trigger_config *cfg, struct trigger_state *s,
                                    int step, int history, const struct runtime_metrics *m)
{
    enum plan_trigger_kind k = first_trigger(cfg, s, step, m);
    if (m) s->rejected_seen = m->rejected;
    if (plan_trigger_fires(k)) {
        if (history < cfg->min_history) return PT_INSUFFICIENT_HISTORY;
        s->last_plan_step = step;
    }
    return k;
}

int plan_trigger_fires(enum plan_trigger_kind k)
{
    return k >= PT_INTERVAL && k <= PT_IMBALANCE;
}

_Static_assert(PT_N_KINDS == METRICS_N_TRIGGERS,
               "enum plan_trigger_kind's names are the metrics file's (metrics_enums.c)");

const char *plan_trigger_name(enum plan_trigger_kind k)
{
    const char *s = metrics_enum_name(MV_TRIGGER, (int)k);
    return s ? s : "unknown";
}
