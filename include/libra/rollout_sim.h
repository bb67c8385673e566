/*
 * The rollout-cluster simulator: rank 0's turn loop (src/control/controller.c) and a
 * set of emulated rollout instances (engine.h) in ONE process, in virtual time, with
 * no MPI. It is what the scheduler benchmark (`libra --bench-sched`) and the job
 * simulator run; it reproduces the controller's bookkeeping exactly:
 *
 *   launch     a group = n_samples trajectories of one prompt (prompt tokens from
 *              the workload, clamped to max_tokens - 1), queued in sample order;
 *   dispatch   budget = min(max_tokens_per_turn, max_tokens - ctx) (<= 0 finishes
 *              the trajectory), sched_route, instance load += ctx + budget and
 *              n_turns++, engine_submit with the decision's est_remaining;
 *   result     load and n_turns given back; gen and ctx grow by the turn's tokens; a
 *              final turn finishes it (sched_finish); otherwise ctx grows by the
 *              payload, last_failed / n_failures / last_large follow the tool
 *              return, sched_tool_return, turn + 1, and the trajectory finishes at
 *              max_turns or max_tokens, else its next turn is queued.
 *
 * Time. The loop stops at v = max(earliest engine_next_event, now + tick_s): every
 * engine with something due by v is advanced to v and its results are applied in a
 * fixed order (instance index, then result order); then every queued turn is routed
 * at v (an engine is advanced to v before a turn is submitted to it). A result is
 * thus applied at most max(tick_s, one decode step of the fastest instance) after the
 * engine produced it -- a controller loop polling that often; tool returns and idle
 * gaps are hit exactly. Stopping at every single-token decode step instead would be
 * exact but slow (and a macro-step may not fit before the next one). Turns the
 * scheduler holds (decision instance -1: la_mlfq siblings waiting for their scout)
 * are asked again every tick_s, so a scout timeout fires even when nothing else is
 * pending. The default tick (10 ms) changes the benchmark's numbers by < 1 % against
 * 1 ms.
 *
 * Determinism: results depend only on the config (seed, workload, cost model,
 * policy); nothing here reads a wall clock. Trajectory ids are 0, 1, 2 ... in launch
 * order, prompt ids likewise.
 *
 * Limits: no re-splits or hand-backs (a partial result is a bug here); every engine
 * starts at policy version 0 -- a caller may pause decode for a weight sync with
 * engine_set_version on r->eng[i].
 */
#ifndef LIBRA_ROLLOUT_SIM_H
#define LIBRA_ROLLOUT_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "libra/config.h"
#include "libra/cost.h"
#include "libra/engine.h"
#include "libra/sched.h"
#include "libra/workload.h"

#define RSIM_DEFAULT_TICK_S 0.01
#define RSIM_DEFAULT_MAX_BATCH 256 /* the emulated worker's */

struct rsim_config {
    const struct cost_model *cm;
    const struct workload *wl;
    const struct sched_config *sched;     /* policy, buckets, instance queue */
    const struct rollout_config *rollout; /* n_samples, max_turns, max_tokens(_per_turn) */
    int n_inst;                           /* 1 .. CFG_MAX_TP */
    int tp[CFG_MAX_TP];                   /* (n_inst) TP degree of each instance */
    uint64_t seed;                        /* run.seed: every workload draw */
    int max_batch;                        /* sequences one instance decodes together; 0 = default */
    double tick_s;                        /* controller reaction time (above); 0 = default */
};

enum rsim_traj_state { RSIM_QUEUED = 0, RSIM_RUNNING, RSIM_DONE };

/* One trajectory as the controller tracks it. */
struct rsim_traj {
    int64_t id, prompt_id, group;
    int sample;
    int step;              /* training step it was launched at (workload drift) */
    int state;             /* enum rsim_traj_state */
    int turn;              /* turn being generated (the last one when done) */
    int prompt_tokens, ctx_tokens, gen_tokens, tool_tokens;
    int n_failures, last_failed, last_large;
    int inst;              /* instance of the current / last turn; -1 none yet */
    int dispatched_load;   /* ctx + budget of the turn in flight */
    int migrations;        /* turns that went to another instance than the previous one */
    int held;              /* the scheduler holds its next turn */
    double t_launch, t_finish; /* virtual seconds; t_finish -1 until done */
};

/* Counters of the whole simulation. */
struct rsim_stats {
    int64_t iterations;    /* loop stops (engine advances + routing rounds) */
    int64_t results;       /* turn results applied */
    int64_t dispatches;    /* turns submitted */
    int64_t holds;         /* routing decisions that held a turn */
    int64_t migrations;    /* dispatches to another instance than the previous turn's */
    int64_t launched, finished;
};

struct rsim {
    struct rsim_config cfg;
    struct rates rates;      /* the cost model as the router sees it (cost_rates) */
    struct sched sched;
    const char *tool_names[WL_MAX_TOOLS]; /* the workload's, for the scheduler's tree keys */
    struct engine *eng;            /* (n_inst) */
    struct sched_instance *inst;   /* (n_inst) as the scheduler sees them */
    double *next_ev;               /* (n_inst) cached engine_next_event */
    unsigned char *dirty;          /* (n_inst) next_ev must be recomputed */
    double now;                    /* virtual seconds */
    struct rsim_traj *traj;        /* (n_traj) indexed by id */
    size_t n_traj, cap_traj;
    int64_t n_group, next_prompt;
    int64_t *queue;                /* (q_len) ids waiting to be routed, FIFO */
    size_t q_len, q_cap;
    int64_t *batch;                /* (b_cap) scratch: a routing pass's ids */
    size_t b_cap;
    int64_t *held;                 /* (h_cap) scratch: ids the scheduler held this round */
    size_t h_cap;
    int64_t *done;                 /* (n_done) finished since the last rsim_take_finished */
    size_t n_done, cap_done;
    int64_t in_flight;             /* launched and not finished */
    struct wire_turn_result *res;  /* scratch for engine results */
    int n_res, cap_res;
    struct rsim_stats stats;
};

/* Validates the config, builds the scheduler and one engine per instance (policy
 * version 0, the sched config's instance queue). 0, or -1 with err (nothing to free
 * then). */
int rsim_init(struct rsim *r, const struct rsim_config *c, char *err, size_t errlen);
void rsim_free(struct rsim *r);
/* Launches one group (n_samples trajectories of the next prompt id) at r->now,
 * drifting at training step `step`. Returns the group index. */
int64_t rsim_launch_group(struct rsim *r, int step);
/* Runs until virtual time `until` (INFINITY: until no trajectory is in flight).
 * r->now ends at until, or at the last event when everything finished earlier.
 * 0, or -1 with err if the simulation cannot make progress (a bug). */
int rsim_run_until(struct rsim *r, double until, char *err, size_t errlen);
/* Ids of the trajectories finished since the last call, in finishing order; *ids
 * points into r (valid until the next run). */
int64_t rsim_take_finished(struct rsim *r, const int64_t **ids);
/* Decode tokens the engines generated, all time. */
int64_t rsim_decode_tokens(const struct rsim *r);

/* ---- synchronous steps (the benchmark's measure) ----
 * Step k launches groups_per_step groups at T_k and runs until all of them
 * finished; makespan = end - T_k, a trajectory's latency = its finish - T_k; then
 * sched_step_end(k + 1). The first warmup_steps steps run (the scheduler learns)
 * but are left out of the totals. */
struct rsim_sync_config {
    int groups_per_step;
    int steps;
    int warmup_steps;
    int step0;             /* workload drift step of the first step */
};

struct rsim_step_result {
    int step;
    double makespan_s;
    int64_t trajectories, decode_tokens, tool_tokens, turns;
    double p50_latency_s, p99_latency_s, mean_latency_s;
    int64_t migrations;    /* instance changes between turns */
    double busy_frac;      /* GPU-seconds busy / (GPUs x makespan) */
    int64_t prefill_tokens, preemptions;
    int64_t cache_hit_tokens; /* context tokens admissions found in the prefix cache */
    int64_t admissions, waited; /* sequences admitted; of them, admitted after a wait */
    double queue_wait_s;   /* virtual seconds admitted sequences waited, summed */
    int64_t decode_by_tp[4];  /* decode tokens on instances of TP 1, 2, 4, 8 */
    struct sched_stats sched; /* scheduler counters of the step */
};

struct rsim_totals {
    int steps;             /* measured steps */
    int64_t trajectories, decode_tokens, migrations;
    double makespan_sum_s, mean_makespan_s;
    double tokens_per_s;   /* decode tokens / sum of makespans */
    double p50_latency_s, p99_latency_s; /* over every measured trajectory */
    double busy_frac;      /* busy GPU-seconds / (GPUs x sum of makespans) */
    int64_t decode_by_tp[4]; /* decode tokens on instances of TP 1, 2, 4, 8 */
    /* The engines' admissions (rsim_step_result), summed over the measured steps:
     * KV hit rate = cache_hit / (cache_hit + prefill). */
    int64_t prefill_tokens, cache_hit_tokens, preemptions, admissions, waited;
    double queue_wait_s;
    struct rsim_stats sim; /* the whole run, warm-up included (iterations: its cost) */
    int64_t tree_nodes;    /* cmlfq: prefix-tree nodes at the end; 0 otherwise */
};

/* per_step: (s->steps) rows, every step (warm-up included); may be NULL. 0, or -1
 * with err. */
int rsim_run_sync(const struct rsim_config *c, const struct rsim_sync_config *s,
                  struct rsim_step_result *per_step, struct rsim_totals *tot, char *err,
                  size_t errlen);
/* Linear-interpolation percentile (numpy's default) of n values, sorted in place; 0 for n = 0. */
double rsim_percentile(double *v, int64_t n, double q);

#endif
