/*
 * The names of the metrics file's enumerations (include/libra/metrics_enums.h): what
 * h5dump prints and h5py finds in a column's dtype. Changing one changes the file
 * format (METRICS_SCHEMA_VERSION, docs/metrics.md).
 */
#include "libra/metrics_enums.h"

#include "libra/metrics.h"
#include "libra/tool_status.h"

#include <string.h>

static const char *const event_names[METRICS_N_EVENT_KINDS] = {
    [EV_PLAN] = "plan",
    [EV_RESPLIT] = "resplit",
    [EV_ROLE_CHANGE] = "role_change",
    [EV_WEIGHT_SYNC] = "weight_sync",
    [EV_PLANNER] = "planner",
    [EV_POOL_LEND] = "pool_lend",
    [EV_POOL_RELEASE] = "pool_release",
    [EV_POOL_READY] = "pool_ready",
    [EV_POOL_JOIN_TIMEOUT] = "pool_join_timeout",
    [EV_POOL_STALE_READY] = "pool_stale_ready",
    [EV_CHECKPOINT] = "checkpoint",
    [EV_TARGET_REWARD] = "target_reward",
    [EV_CANCEL] = "cancel",
    [EV_CONFIG_CHANGE] = "config_change",
    [EV_NONFINITE] = "nonfinite",
    [EV_ERROR] = "error",
};

static const char *const span_names[SPAN_KIND_COUNT] = {
    [SPAN_DECODE] = "decode",
    [SPAN_TOOL] = "tool",
    [SPAN_TRAIN_FWD] = "train_fwd",
    [SPAN_TRAIN_BWD] = "train_bwd",
    [SPAN_TRAIN_REDUCE] = "train_reduce",
    [SPAN_TRAIN_OPT] = "train_opt",
    [SPAN_WEIGHT_SYNC] = "weight_sync",
    [SPAN_RESPLIT] = "resplit",
    [SPAN_CHECKPOINT] = "checkpoint",
};

_Static_assert(TRAJ_TRAINED == 0 && TRAJ_BUFFERED == 1 && TRAJ_IN_FLIGHT == 2,
               "fate_names follows enum traj_fate");
static const char *const fate_names[] = {"trained", "buffered", "in_flight"};

_Static_assert(TOOL_NONE == 0 && TOOL_SUCCESS == 1 && TOOL_FAILURE == 2 && TOOL_TIMEOUT == 3,
               "status_names follows enum tool_status");
static const char *const status_names[] = {"none", "success", "failure", "timeout"};

/* In the order of enum plan_trigger_kind (the planner asserts the count). */
static const char *const trigger_names[METRICS_N_TRIGGERS] = {
    "warmup", "cooldown", "interval_skip", "insufficient_history", "interval",
    "queue_pressure", "active_rollout_pressure", "rejected_rollout_delta",
    "rollout_train_imbalance"};

/* "none" (-1), then enum gate_verdict's order. */
static const char *const verdict_names[METRICS_N_VERDICTS + 1] = {
    "none", "apply", "same_plan", "no_gain", "gain_below_ratio", "not_amortised"};

/* In the order of enum sched_mig_why (the scheduler asserts the count). */
static const char *const mig_why_names[METRICS_N_MIG_WHY] = {
    "causal", "tokens", "threshold", "declined_cost", "declined_limit", "same_tp", "return"};

#define VOCAB(a, first) { a, (int)(sizeof(a) / sizeof((a)[0])), first }

static const struct vocab {
    const char *const *names;
    int n, first;
} vocabs[MV_COUNT] = {
    [MV_EVENT] = VOCAB(event_names, 0),     [MV_SPAN] = VOCAB(span_names, 0),
    [MV_FATE] = VOCAB(fate_names, 0),       [MV_STATUS] = VOCAB(status_names, 0),
    [MV_TRIGGER] = VOCAB(trigger_names, 0), [MV_VERDICT] = VOCAB(verdict_names, -1),
    [MV_MIG_WHY] = VOCAB(mig_why_names, 0),
};

const char *metrics_enum_name(enum metrics_vocab voc, int v)
{
    if ((int)voc < 0 || voc >= MV_COUNT) return NULL;
    const struct vocab *w = &vocabs[voc];
    return v >= w->first && v - w->first < w->n ? w->names[v - w->first] : NULL;
}

void metrics_enum_range(enum metrics_vocab voc, int *first, int *n)
{
    int ok = (int)voc >= 0 && voc < MV_COUNT;
    *first = ok ? vocabs[voc].first : 0;
    *n = ok ? vocabs[voc].n : 0;
}

int metrics_enum_value(enum metrics_vocab voc, const char *name)
{
    int first, n;
    metrics_enum_range(voc, &first, &n);
    for (int i = 0; name && i < n; i++)
        if (strcmp(vocabs[voc].names[i], name) == 0) return first + i;
    return first - 1;
}
