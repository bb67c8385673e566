/*
 * Inside the scheduler: the per-trajectory record, the policy table, and the
 * routing machinery every policy shares (route.c). Policies: cmlfq.c,
 * load_balance.c, length_aware.c, la_mlfq.c; the interface and bookkeeping: sched.c.
 */
#ifndef LIBRA_SCHED_INTERNAL_H
#define LIBRA_SCHED_INTERNAL_H

#include "libra/sched.h"

/* One live trajectory. Tool returns are kept in order (the causal signal). */
struct sched_traj {
    int64_t id;          /* SCHED_TRAJ_EMPTY: free slot */
    int64_t prompt_id;
    int bucket;          /* current bucket, -1 none */
    int migrations;      /* moves to another bucket's instance */
    int n_ret, cap_ret;  /* tool returns so far */
    int32_t *states;     /* (cap_ret) state codes (tool_state.h) */
    int32_t *pos;        /* (cap_ret) decode tokens generated when each returned */
    int decided;         /* tool returns a routing decision has already considered */
    int eval;
    /* policy scratch (la_mlfq: scout role; time the turn was first held) */
    int role;
    double held_since;   /* < 0: not held */
};
#define SCHED_TRAJ_EMPTY INT64_MIN

struct sched_ops {
    const char *name;
    int (*init)(struct sched *s, char *err, size_t errlen); /* may be NULL */
    void (*free)(struct sched *s);                          /* may be NULL */
    /* Fill d (instance, reason, via, bucket, est_remaining). tr is the trajectory's
     * record (tr->bucket -1 before its first decision). */
    void (*route)(struct sched *s, const struct sched_turn *t, struct sched_traj *tr,
                  const struct sched_instance *inst, int n, struct sched_decision *d);
    /* Finished (tr still valid; released afterwards). May be NULL. */
    void (*finish)(struct sched *s, struct sched_traj *tr, int gen_tokens, int learn);
    void (*step_end)(struct sched *s, int step); /* may be NULL */
};

extern const struct sched_ops sched_cmlfq_ops, sched_load_balance_ops, sched_length_aware_ops,
    sched_la_mlfq_ops;
/* cmlfq.c: the policy's tree (s->ops must be &sched_cmlfq_ops). */
const struct ptree *sched_cmlfq_tree(const struct sched *s);

/* ---- route.c ---- */

/* load / capacity (load when the capacity is unknown). */
double sched_norm_load(const struct sched_instance *in);
/* First bucket (ascending max_tokens) with tokens <= max_tokens, else the last. */
int sched_bucket_for(const struct sched *s, double tokens);
/* The best instance among those whose TP is tp (tp <= 0: any TP), by cfg.balance,
 * ties rotating; with capped, only instances below cfg.max_load (normalised KV load;
 * max_load <= 0: no cap). -1 if none qualifies. */
int sched_pick(struct sched *s, const struct sched_instance *inst, int n, int tp, int capped);
/* The bucket chain: the bucket's TP classes together, then (when cfg.fallback) the
 * other buckets nearest first (the larger on a tie), each bucket's classes together,
 * then the global least-loaded ignoring the cap. Sets *via. n >= 1, so the result
 * is a valid index. */
int sched_route_bucket(struct sched *s, int bucket, const struct sched_instance *inst, int n,
                       int *via);
/* Affinity (cfg.affinity): 1 if a trajectory whose previous instance is prev should
 * stay there rather than go to chosen -- prev is valid and its normalised load is at
 * most SCHED_STICKY_MARGIN above chosen's. */
int sched_keep_prev(const struct sched *s, int prev, int chosen, const struct sched_instance *inst,
                    int n);
/* 1 if bucket b lists TP degree tp. */
int sched_bucket_has_tp(const struct sched *s, int b, int tp);
/* Appends to the migration log (sched_take_migrations) and counts it. */
void sched_log_migration(struct sched *s, const struct sched_migration *m);

#endif
