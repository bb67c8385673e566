/*
 * The elastic hybrid pool's controller (reference planner.md §2.7 with the §6.9
 * fix): how many whole training replicas to borrow from the rollout side. The
 * rules and the balanced step time T(k) are those of pool_ctl.h.
 *
 * Decisions beyond the header:
 *   - the search ranges are capped by capacity: training-bound k in
 *     [min(cur, cap), cap], rollout-bound k in [0, min(cur, cap)]; so when the
 *     rollout side shrank below what is lent, the answer never exceeds capacity;
 *   - ties (within a relative 1e-9) go to the smallest k: lend no more than helps;
 *   - a k that leaves no rollout GPU (G - (k - cur) r <= 0) or no training replica
 *     (dp + k <= 0) is infeasible; if none is feasible the current count is kept;
 *   - without both measurements (train_s, rollout_s finite and > 0) the rule is
 *     hold: min(current, capacity);
 *   - replica_size < 1 means no capacity; negative counts read as 0.
 */
#include "libra/pool_ctl.h"

#include <limits.h>
#include <math.h>

#define POOL_TIE_REL 1e-9

static int nonneg(int v) { return v > 0 ? v : 0; }

/* Step time with k replicas lent, or INFINITY if k is infeasible. */
static double balanced_time(const struct pool_input *in, int cur, int k)
{
    double dp = nonneg(in->dp);
    double g_left = (double)in->rollout_gpus - ((double)k - cur) * in->replica_size;
    if (dp + k <= 0 || g_left <= 0) return INFINITY;
    double train = in->train_s * (dp + cur) / (dp + k);
    double rollout = in->rollout_s * in->rollout_gpus / g_left;
    return fmax(train, rollout);
}

/* The k in [lo, hi] with the smallest T(k) (smallest k on ties); fallback if none. */
static int argmin_time(const struct pool_input *in, int cur, int lo, int hi, int fallback)
{
    int best = -1;
    double best_t = INFINITY;
    for (long long k = lo; k <= hi; k++) { /* long long: hi may be INT_MAX */
        double t = balanced_time(in, cur, (int)k);
        if (!isfinite(t)) continue;
        if (best < 0 || t < best_t * (1 - POOL_TIE_REL)) {
            best = (int)k;
            best_t = t;
        }
    }
    return best < 0 ? fallback : best;
}

void pool_decide(const struct pool_config *cfg, const struct pool_input *in,
                 struct pool_decision *out)
{
    /* long long: no overflow whatever the counts hold. */
    long long cur_ll = (long long)nonneg(in->active) + nonneg(in->joining);
    int cur = cur_ll > INT_MAX ? INT_MAX : (int)cur_ll;
    int cap = 0;
    if (in->replica_size >= 1) {
        /* what is lent already, plus what the rollout side can still spare (minus
         * what it lacks when it is below its reserve; floor division) */
        long long spare = (long long)in->rollout_gpus - nonneg(cfg->min_rollout_gpus);
        long long r = in->replica_size;
        long long c = cur_ll + (spare >= 0 ? spare / r : -((-spare + r - 1) / r));
        cap = c > INT_MAX ? INT_MAX : c < 0 ? 0 : (int)c;
    }
    int held = cur < cap ? cur : cap;
    out->current = cur;
    out->capacity = cap;

    if (cap <= 0) {
        out->desired = 0;
        out->reason = POOL_NO_CAPACITY;
        return;
    }
    if (in->pressure >= cfg->release_pressure) {
        out->desired = 0;
        out->reason = POOL_PROTECT_ROLLOUT;
        return;
    }
    int measured = isfinite(in->train_s) && isfinite(in->rollout_s) && in->train_s > 0 &&
                   in->rollout_s > 0;
    double ratio = measured ? in->train_s / in->rollout_s : 1.0;
    if (measured && ratio >= cfg->join_ratio) {
        out->desired = argmin_time(in, cur, held, cap, held);
        out->reason = POOL_TRAINING_BOTTLENECK;
    } else if (measured && ratio <= cfg->release_ratio) {
        out->desired = argmin_time(in, cur, 0, held, held);
        out->reason = POOL_ROLLOUT_BOTTLENECK;
    } else {
        out->desired = held;
        out->reason = POOL_HOLD;
    }
}

double pool_pressure(double queue_pressure, double active_pressure, double rollout_busy)
{
    double busy = isfinite(rollout_busy) ? fmin(1.0, fmax(0.0, rollout_busy)) : 1.0;
    return fmax(queue_pressure, active_pressure * busy);
}

const char *pool_reason_name(enum pool_reason r)
{
    switch (r) {
    case POOL_NO_CAPACITY: return "no_complete_replica_capacity";
    case POOL_PROTECT_ROLLOUT: return "protect_rollout_capacity";
    case POOL_TRAINING_BOTTLENECK: return "training_bottleneck";
    case POOL_ROLLOUT_BOTTLENECK: return "rollout_bottleneck";
    case POOL_HOLD: return "hysteresis_hold";
    default: return "unknown";
    }
}
