/*
 * Online calibration of the cost model: per term (training, rollout) one scale
 * factor, an exponential moving average of measured / predicted (reference
 * planner.md §1.4 ShadowCalibrator, wired in per §6.6).
 *
 * One update, with ratio r = measured / predicted:
 *   - the first ratio of a term sets the scale to r;
 *   - with >= 3 ratios in the window, |r - mean| > sigma std is a change point:
 *     the update uses alpha_fast, counts a reset and clears the window, so the
 *     new regime builds its own statistics (the old regime's spread must not hide
 *     or fake the next change);
 *   - while the window holds fewer than 3 ratios (at the start and right after a
 *     change point) there are no statistics to smooth against and alpha_fast is
 *     used too; afterwards alpha. So a step change is followed within two updates
 *     (1 -> 3 gives 2.6, 2.92) instead of the ~18 that alpha 0.1 alone needs.
 * std has a floor of 1e-3 |mean|: after a constant series any real jump counts.
 * The scale is clamped to [min_scale, max_scale]; the window keeps raw ratios.
 * Limits: no decay of the window by age, only by count.
 */
#include "libra/calib.h"

#include <math.h>
#include <string.h>

#define CALIB_MIN_STATS 3        /* ratios needed before the change-point test */
#define CALIB_STD_FLOOR_REL 1e-3 /* std floor, relative to |mean| */

static double clamp01(double a)
{
    if (!(a >= 0)) return 0; /* also NaN */
    return a > 1 ? 1 : a;
}

void calib_init(struct calib *c, const struct calib_config *cfg)
{
    memset(c, 0, sizeof *c);
    c->cfg = *cfg;
    /* The window indexes a fixed ring and must leave room for the test. */
    if (c->cfg.window < CALIB_MIN_STATS) c->cfg.window = CALIB_MIN_STATS;
    if (c->cfg.window > CALIB_WINDOW_MAX) c->cfg.window = CALIB_WINDOW_MAX;
    c->cfg.alpha = clamp01(c->cfg.alpha);
    c->cfg.alpha_fast = clamp01(c->cfg.alpha_fast);
    for (int i = 0; i < CALIB_N_TERMS; i++) c->t[i].scale = 1.0;
}

static void ring_push(struct calib_term_state *t, int window, double r)
{
    t->ring[t->ring_next] = r;
    t->ring_next = (t->ring_next + 1) % window;
    if (t->ring_n < window) t->ring_n++;
}

/* 1 if r lies more than sigma standard deviations from the window's mean. */
static int is_change_point(const struct calib_term_state *t, double sigma, double r)
{
    double mean = 0, var = 0;
    for (int i = 0; i < t->ring_n; i++) mean += t->ring[i];
    mean /= t->ring_n;
    for (int i = 0; i < t->ring_n; i++) var += (t->ring[i] - mean) * (t->ring[i] - mean);
    double std = sqrt(var / t->ring_n);
    std = fmax(std, CALIB_STD_FLOOR_REL * fabs(mean));
    return fabs(r - mean) > sigma * std;
}

int calib_update(struct calib *c, enum calib_term term, double predicted, double measured)
{
    if ((int)term < 0 || term >= CALIB_N_TERMS) return 0;
    if (!isfinite(predicted) || !isfinite(measured) || predicted <= 0 || measured <= 0)
        return 0;
    double r = measured / predicted;
    if (!isfinite(r) || r <= 0) return 0; /* over- or underflow */

    struct calib_term_state *t = &c->t[term];
    const struct calib_config *cfg = &c->cfg;
    int taken = 1;
    double s;
    if (t->n == 0) {
        s = r;
    } else if (t->ring_n >= CALIB_MIN_STATS && is_change_point(t, cfg->sigma, r)) {
        s = (1 - cfg->alpha_fast) * t->scale + cfg->alpha_fast * r;
        t->resets++;
        t->ring_n = 0;
        t->ring_next = 0;
        taken = 2;
    } else {
        double a = t->ring_n < CALIB_MIN_STATS ? cfg->alpha_fast : cfg->alpha;
        s = (1 - a) * t->scale + a * r;
    }
    t->scale = fmin(fmax(s, cfg->min_scale), cfg->max_scale);
    ring_push(t, cfg->window, r);
    t->n++;
    t->last_pred = predicted;
    t->last_meas = measured;
    return taken;
}

double calib_scale(const struct calib *c, enum calib_term term)
{
    if ((int)term < 0 || term >= CALIB_N_TERMS) return 1.0;
    return c->t[term].scale;
}

const char *calib_term_name(enum calib_term term)
{
    switch (term) {
    case CALIB_TRAIN: return "train";
    case CALIB_ROLLOUT: return "rollout";
    default: return "unknown";
    }
}
