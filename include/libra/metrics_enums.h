/*
 * The enumerations of the metrics file (docs/metrics.md, "Enumerations"): every column
 * that takes one of a fixed set of values is stored as an HDF5 enum type over int32, so
 * h5dump prints the names and h5py reads the codes with the names in the column's dtype
 * (h5py.check_enum_dtype). The names are part of the file format and live here, with it;
 * the layers that own an enumeration (the planner's triggers and verdicts, the
 * scheduler's migration reasons) take their names from here and _Static_assert that
 * their counts equal the METRICS_N_* below, so a value added on one side and not the
 * other does not compile.
 */
#ifndef LIBRA_METRICS_ENUMS_H
#define LIBRA_METRICS_ENUMS_H

/* One vocabulary per enumerated column. */
enum metrics_vocab {
    MV_EVENT,   /* /events kind: enum metrics_event_kind */
    MV_SPAN,    /* /spans kind: enum metrics_span_kind (metrics.h) */
    MV_FATE,    /* /trajectories fate: enum traj_fate (metrics.h) */
    MV_STATUS,  /* /turns status: enum tool_status (tool_status.h) */
    MV_TRIGGER, /* /planner trigger: enum plan_trigger_kind (plan_policy.h) */
    MV_VERDICT, /* /planner verdict: enum gate_verdict (plan_policy.h), or -1 "none" when
                   the pass ran no search */
    MV_MIG_WHY, /* /migrations why: enum sched_mig_why (sched.h) */
    MV_COUNT
};

/* /events kind: what happened (docs/metrics.md, /events). */
enum metrics_event_kind {
    EV_PLAN = 0,        /* the first plan (epoch 0) */
    EV_RESPLIT,         /* a new plan applied */
    EV_ROLE_CHANGE,     /* one rank changed role in it */
    EV_WEIGHT_SYNC,     /* a weight sync started */
    EV_PLANNER,         /* the global resource planner applied a plan */
    EV_POOL_LEND,       /* the hybrid pool lent rollout ranks to training */
    EV_POOL_RELEASE,    /* ... or gave them back */
    EV_POOL_READY,      /* a lent rank joined training */
    EV_POOL_JOIN_TIMEOUT, /* a lent rank did not join in time */
    EV_POOL_STALE_READY, /* a join report for a lend already undone */
    EV_CHECKPOINT,      /* a checkpoint committed */
    EV_TARGET_REWARD,   /* the batch reward first reached run.target_reward */
    EV_CANCEL,          /* a signal asked the run to stop */
    EV_CONFIG_CHANGE,   /* a resumed run changed settings against its checkpoint */
    EV_NONFINITE,       /* a step with a non-finite loss or gradient was not applied */
    EV_ERROR,           /* the fatal message the job ended with */
    METRICS_N_EVENT_KINDS
};

#define METRICS_N_TRIGGERS 9 /* = PT_N_KINDS */
#define METRICS_N_VERDICTS 5 /* enum gate_verdict; -1 "none" besides */
#define METRICS_N_MIG_WHY 7  /* = SCHED_MIG_COUNT */

/* The name of value v in vocabulary voc, or NULL when v is not one of its values. */
const char *metrics_enum_name(enum metrics_vocab voc, int v);
/* Its values are first .. first + n - 1. */
void metrics_enum_range(enum metrics_vocab voc, int *first, int *n);
/* The value named name, or first - 1 when there is none. */
int metrics_enum_value(enum metrics_vocab voc, const char *name);

#endif
