/*
 * The scheduler: rank 0 decides which rollout instance runs each turn of each
 * trajectory (DESIGN §5, reference cmlfq.md). One interface, four policies
 * (sched.type):
 *
 *   cmlfq         C-MLFQ: buckets of instances by TP degree; informed initial
 *                 placement from the prompt's history (causal prefix tree roots) and
 *                 the input length; sticky turns; at each tool-return boundary the
 *                 tree's estimate of the remaining decode work may move the
 *                 trajectory to another bucket, but only when the expected decode-time
 *                 saving beats the re-prefill cost (with hysteresis and a per-
 *                 trajectory limit); the tree learns from every finished trajectory.
 *   load_balance  every instance is a candidate (reference §2.3).
 *   length_aware  bucket by the context length of each turn (reference §2.1).
 *   la_mlfq       a scout per prompt group, a history of observed lengths, threshold
 *                 demotion that really re-routes (reference §2.2, fixed).
 *
 * Shared machinery (src/sched/route.c): a bucket's TP classes (together: the least
 * loaded instance of any of them), then the other buckets nearest in size first
 * (larger first on a tie), then the least loaded instance anywhere ignoring the cap
 * ("global fallback"); among candidates the choice follows sched.balance (kv: KV tokens normalised by the instance's KV
 * capacity; connections: turns in flight; round_robin; weighted: turns / weight of
 * the TP), ties rotating so equally loaded instances share work (reference §6.9).
 *
 * The controller tells the scheduler what happened (sched_tool_return,
 * sched_finish) and asks where a turn goes (sched_route). Instance indices are
 * those of the current plan; after a re-split a trajectory's previous instance is
 * passed as -1. Evaluation episodes are routed but never learned from.
 */
#ifndef LIBRA_SCHED_H
#define LIBRA_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "libra/config.h"
#include "libra/rates.h"
#include "libra/ptree.h"
#include "libra/tool_state.h"

/* load_balance / length_aware affinity: a trajectory stays on its instance unless
 * that one is more than this much (normalised load) above the best candidate. */
#define SCHED_STICKY_MARGIN 0.10

struct sched_instance {
    int leader;       /* world rank of the instance leader */
    int tp;
    double capacity;  /* KV tokens */
    double load;      /* KV tokens of turns dispatched and not yet returned */
    int n_turns;      /* turns dispatched and not yet returned */
    /* the instance's last report (wire_turn_result.inst_*); -1 before the first */
    int queued, running;
    double kv_frac;
};

/* What the controller knows about a turn to route. */
struct sched_turn {
    int64_t traj_id, prompt_id;
    int turn;
    int ctx_tokens;   /* context before this turn */
    int gen_tokens;   /* decode tokens of the trajectory so far */
    int budget;       /* tokens this turn may generate */
    int prev;         /* instance of the previous turn; -1: first turn, instance gone, or handed back */
    int sample;       /* index in its group, 0 .. n_samples - 1 */
    int n_samples;
    int eval;         /* evaluation episode: never learned from */
};

enum sched_reason {
    SCHED_R_INITIAL = 0,   /* first turn: default bucket */
    SCHED_R_INFORMED,      /* first turn: bucket from the prompt's history or input length */
    SCHED_R_STICKY,        /* stays on the instance that holds its KV cache */
    SCHED_R_MIGRATE,       /* moved to another bucket at a tool-return boundary */
    SCHED_R_REROUTE,       /* its instance is gone (re-split) or it was handed back */
    SCHED_R_PER_TURN,      /* routed on its own (length_aware, load_balance without affinity) */
    SCHED_R_HISTORY,       /* la_mlfq: the prompt's recorded length decided */
    SCHED_R_SCOUT,         /* la_mlfq: the first trajectory of a group */
    SCHED_R_SCOUT_FOLLOW,  /* la_mlfq: follows its group's scout */
    SCHED_R_SCOUT_TIMEOUT, /* la_mlfq: waited sched.scout_timeout_s; default route */
    SCHED_R_COUNT
};
enum sched_via { SCHED_VIA_PREFERRED = 0, SCHED_VIA_FALLBACK, SCHED_VIA_GLOBAL, SCHED_VIA_COUNT };

extern const char *const sched_reason_names[SCHED_R_COUNT]; /* "initial", "informed", ... */
extern const char *const sched_via_names[SCHED_VIA_COUNT];  /* "preferred", "fallback", "global" */

struct sched_decision {
    int instance;          /* index; -1: hold the turn and ask again later (la_mlfq) */
    int reason;            /* enum sched_reason */
    int via;               /* enum sched_via */
    int bucket;            /* -1 for load_balance */
    int32_t est_remaining; /* remaining decode tokens, for the instance queue; -1 unknown */
};

enum sched_mig_why {
    SCHED_MIG_CAUSAL = 0,  /* cmlfq: the tree moved it and the saving beat the cost */
    SCHED_MIG_TOKENS,      /* cmlfq: no trusted tree node; its token count outgrew the bucket */
    SCHED_MIG_THRESHOLD,   /* la_mlfq: generated tokens passed the bucket's threshold */
    SCHED_MIG_DECLINED_COST,  /* wanted, but the saving did not beat the re-prefill cost */
    SCHED_MIG_DECLINED_LIMIT, /* wanted, but sched.max_migrations was reached */
    SCHED_MIG_SAME_TP,     /* new bucket shares the instance's TP: relabelled, not moved */
    SCHED_MIG_RETURN,      /* cmlfq: back to its own bucket from a fallback instance */
    SCHED_MIG_COUNT
};
/* Named by metrics_enum_name(MV_MIG_WHY, why) (metrics_enums.h). */

/* A bucket change, taken or declined (the /migrations table). */
struct sched_migration {
    int64_t traj_id;
    int turn;
    int from_instance, to_instance; /* to = from when not moved */
    int from_bucket, to_bucket;
    int why;                        /* enum sched_mig_why */
    double est_remaining;           /* decode tokens */
    double saving_s, cost_s;        /* economics (cmlfq), 0 otherwise */
};

struct sched_stats {
    int64_t routes[SCHED_R_COUNT];  /* decisions by reason (holds excluded) */
    int64_t via[SCHED_VIA_COUNT];
    int64_t holds;                  /* decisions that held a turn */
    int64_t migrations;             /* turns that moved to another bucket's instance */
    int64_t declined;               /* bucket changes refused (cost or limit) */
    int64_t tool_returns;
    int64_t finished;               /* trajectories finished */
    int64_t learned;                /* of them, recorded in the tree / history */
};

struct sched_traj;    /* per live trajectory (sched_internal.h) */
struct sched_ops;
struct sched_bucket { /* a bucket as routed (from struct sched_bucket_spec) */
    char name[32];
    int n_tp;
    int tp[4];
    int max_tokens;
};

struct sched {
    struct sched_config cfg;
    struct rates rates;              /* the device's rates: cmlfq's migration economics,
                                        balance = "time"; unset (NULL ops) = none */
    const struct sched_ops *ops;
    void *priv;                      /* the policy's state */
    struct tool_state_config ts;
    const char *const *tool_names;   /* (n_tools), for tree keys */
    int n_tools;
    int n_bucket;
    struct sched_bucket bucket[CFG_MAX_BUCKETS]; /* ascending max_tokens */
    unsigned rotate;                 /* tie-break rotation */
    unsigned rr;                     /* round_robin counter */
    /* live trajectories: open addressing on traj_id */
    struct sched_traj *traj;         /* (traj_cap) */
    size_t traj_cap, n_traj;
    struct sched_stats stats;        /* whole run */
    struct sched_stats step;         /* since the last sched_take_step */
    struct sched_migration *mig;     /* (n_mig) since the last sched_take_migrations */
    int n_mig, cap_mig;
    int cur_step;                    /* last step passed to sched_step_end */
    double now;                      /* seconds, as passed to sched_route */
};

/* tool_names: names of the tool indices that tool returns carry (emu: workload
 * tools; cpu: env tools). 0, or -1 with err (unknown type, bad bucket, unreadable
 * sched.tree_in ...). */
int sched_init(struct sched *s, const struct sched_config *cfg, const struct rates *rates,
               const char *const *tool_names, int n_tools, char *err, size_t errlen);
void sched_free(struct sched *s);
/* Where the turn goes. n >= 1 instances. now: seconds since the run started (the
 * la_mlfq scout timeout). A trajectory is registered at its first route. */
void sched_route(struct sched *s, const struct sched_turn *t, const struct sched_instance *inst,
                 int n, double now, struct sched_decision *d);
/* Turn turn of the trajectory ended with a tool return; gen_tokens: its decode
 * tokens so far (the position). Unknown trajectories are ignored. */
void sched_tool_return(struct sched *s, int64_t traj_id, int tool, int status, int payload_tokens,
                       int gen_tokens);
/* The trajectory finished with gen_tokens decode tokens; learn = 0 for evaluation
 * episodes. Its state is released. */
void sched_finish(struct sched *s, int64_t traj_id, int gen_tokens, int learn);
/* Training step `step` finished: periodic tree rebuild, history expiry. */
void sched_step_end(struct sched *s, int step);
/* Counters since the last call (then reset). */
void sched_take_step(struct sched *s, struct sched_stats *out);
/* Migrations since the last call: *out points into s (valid until the next route). */
int sched_take_migrations(struct sched *s, const struct sched_migration **out);
/* cmlfq's tree (NULL for the other policies). */
const struct ptree *sched_tree(const struct sched *s);
/* Index of the bucket named name, -1 if none. */
int sched_bucket_index(const struct sched *s, const char *name);

#endif
