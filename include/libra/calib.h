/*
 * Online calibration of the cost model (reference/planner.md §1.4 ShadowCalibrator,
 * which the reference never wired in; §6.6): one scale factor per term, measured /
 * predicted, smoothed by an exponential moving average. A change point -- a ratio
 * more than `sigma` standard deviations from the mean of the last `window` ratios,
 * once there are at least 3 -- resets the smoothing (the fast alpha), so a drifted
 * workload is followed within a step or two instead of decades of steps.
 * The planner multiplies its predictions by the scale of each term.
 */
#ifndef LIBRA_CALIB_H
#define LIBRA_CALIB_H

#define CALIB_WINDOW_MAX 64

enum calib_term { CALIB_TRAIN = 0, CALIB_ROLLOUT = 1, CALIB_N_TERMS = 2 };

struct calib_config {
    double alpha;      /* EMA weight of a new ratio (0.1) */
    double alpha_fast; /* after a change point (0.8) */
    int window;        /* ratios kept for the change-point test (20), <= CALIB_WINDOW_MAX */
    double sigma;      /* change-point threshold in standard deviations (3) */
    double min_scale, max_scale; /* a scale is clamped to this range (0.05, 20) */
};

struct calib_term_state {
    double scale;      /* current factor; 1 before any measurement */
    int n;             /* measurements taken */
    int resets;        /* change points detected */
    double last_pred, last_meas; /* the last pair fed */
    double ring[CALIB_WINDOW_MAX];
    int ring_n, ring_next;
};

struct calib {
    struct calib_config cfg;
    struct calib_term_state t[CALIB_N_TERMS];
};

void calib_init(struct calib *c, const struct calib_config *cfg);
/* Feeds one measurement of a term; ignored (returns 0) unless predicted > 0 and
 * measured > 0 and both finite. Returns 1 when taken, 2 when it was a change point. */
int calib_update(struct calib *c, enum calib_term term, double predicted, double measured);
double calib_scale(const struct calib *c, enum calib_term term);
const char *calib_term_name(enum calib_term term);

#endif
