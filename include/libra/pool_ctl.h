/*
 * The elastic hybrid pool's controller (reference/planner.md §2.7 with the §6.9
 * fix): how many whole training replicas to borrow from the rollout side.
 *
 * Units are replicas of replica_size = tp pp GPUs; capacity = current +
 * (rollout_gpus - min_rollout_gpus) / replica_size (what is lent plus what the
 * serving side can still spare). The first matching rule decides:
 *   capacity <= 0                    -> 0        POOL_NO_CAPACITY
 *   pressure >= release_pressure     -> 0        POOL_PROTECT_ROLLOUT (immediate)
 *   ratio >= join_ratio              -> k >= current minimising the balanced step time
 *                                                POOL_TRAINING_BOTTLENECK
 *   ratio <= release_ratio           -> k <= current minimising it  POOL_ROLLOUT_BOTTLENECK
 *   otherwise                        -> current  POOL_HOLD
 * with ratio = train_s / rollout_s (measured) and current = active + joining. The
 * balanced step time of k lent replicas assumes training scales with its replicas
 * and rollout with its GPUs:
 *     T(k) = max(train_s (dp + cur) / (dp + k), rollout_s G / (G - (k - cur) r))
 * (G rollout GPUs now, r replica size, cur lent now): the reference borrowed all
 * capacity at once (bang-bang); this lends what balances the two stages.
 */
#ifndef LIBRA_POOL_CTL_H
#define LIBRA_POOL_CTL_H

enum pool_reason {
    POOL_NO_CAPACITY = 0,
    POOL_PROTECT_ROLLOUT,
    POOL_TRAINING_BOTTLENECK,
    POOL_ROLLOUT_BOTTLENECK,
    POOL_HOLD,
    POOL_N_REASONS
};

struct pool_config {
    double join_ratio;       /* 1.15 */
    double release_ratio;    /* 0.90 */
    double release_pressure; /* 0.80 */
    int min_rollout_gpus;    /* rollout GPUs never lent */
};

struct pool_input {
    int rollout_gpus;        /* GPUs serving rollouts now (lent ones excluded) */
    int replica_size;        /* tp pp of the training shape */
    int dp;                  /* core replicas */
    int active, joining;     /* lent replicas */
    double train_s, rollout_s; /* measured, per step */
    double pressure;         /* max(queue, active) pressure */
};

struct pool_decision {
    int desired;             /* lent replicas wanted */
    int current;             /* active + joining */
    int capacity;
    enum pool_reason reason;
};

void pool_decide(const struct pool_config *cfg, const struct pool_input *in,
                 struct pool_decision *out);
/* The pressure the pool protects the rollout side from: max(queue_pressure,
 * active_pressure x rollout_busy). Groups in flight count only as far as the rollout
 * GPUs are busy: when the staleness cap is full of long-tail stragglers and the
 * rollout GPUs idle, the rollout side is starved of work, not loaded, and lending
 * its idle GPUs to training is what helps (the reference's max(queue, active) read
 * that state as full pressure and never lent). busy outside [0, 1] is clamped; a
 * non-finite one counts as 1 (no measurement: the unscaled pressure). */
double pool_pressure(double queue_pressure, double active_pressure, double rollout_busy);
const char *pool_reason_name(enum pool_reason r);

#endif
