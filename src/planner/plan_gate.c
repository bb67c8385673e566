/*
 * Whether a new plan is applied (reference planner.md §2.6 with the §6.5 fix): the
 * per-step gain is amortised over the horizon the plan will run,
 *     net = (t_cur - t_new) H - transition_s,
 * instead of being compared with the one-off transition cost directly.
 *
 * Verdicts, first that holds: same plan; gain <= 0 (also a non-finite or negative
 * candidate time, or a NaN current time); gain / t_cur below min_gain_ratio; net
 * <= 0; otherwise apply. An infinite current time (the current plan does not fit)
 * with a finite candidate is a whole gain: ratio 1, net infinite.
 * horizon < 1 counts as 1; a negative or NaN transition cost as 0. With invalid
 * times the result's gain, net and ratio are 0.
 */
#include "libra/plan_policy.h"
#include "libra/metrics_enums.h"

#include <math.h>
#include <stddef.h>

enum gate_verdict plan_gate(double t_cur, double t_new, int horizon, double transition_s,
                            double min_gain_ratio, int same, struct gate_result *out)
{
    struct gate_result r = {GATE_APPLY, 0, 0, 0};
    int h = horizon < 1 ? 1 : horizon;
    double cost = transition_s > 0 ? transition_s : 0; /* also NaN -> 0 */
    int valid = isfinite(t_new) && t_new >= 0 && !isnan(t_cur);
    if (valid) {
        r.gain_s = t_cur - t_new;
        r.ratio = isinf(t_cur) ? 1.0 : r.gain_s / fmax(t_cur, 1e-6);
        r.net_s = r.gain_s * h - cost;
    }
    if (same)
        r.verdict = GATE_SAME_PLAN;
    else if (!valid || !(r.gain_s > 0))
        r.verdict = GATE_NO_GAIN;
    else if (r.ratio < min_gain_ratio)
        r.verdict = GATE_BELOW_RATIO;
    else if (!(r.net_s > 0))
        r.verdict = GATE_NOT_AMORTISED;
    if (out) *out = r;
    return r.verdict;
}

_Static_assert(GATE_NOT_AMORTISED + 1 == METRICS_N_VERDICTS,
               "enum gate_verdict's names are the metrics file's (metrics_enums.c)");

const char *plan_gate_name(enum gate_verdict v)
{
    const char *s = (int)v >= 0 ? metrics_enum_name(MV_VERDICT, (int)v) : NULL;
    return s ? s : "unknown";
}
