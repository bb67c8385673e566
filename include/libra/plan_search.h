/*
 * The planner's search (reference/planner.md §2.2-2.3, with the §6.7 fixes): the
 * split of n_gpus worker GPUs into a training group (tp x pp x dp, micro-batch) and
 * rollout instances of heterogeneous TP, minimising the steady-state step time of
 * the asynchronous pipeline, max(T_train, T_rollout, coupled), all for one training
 * batch; coupled (optional, plan_eval.coupled_s) is the latency chain the two sides
 * form through the staleness rule.
 *
 * The two stages are separable given the split, so the search computes the best
 * training shape for each training GPU count and the best rollout layout for each
 * rollout GPU count, each once (a cache per GPU count), and prunes with lower bounds
 * (a training time at or above the best step time so far; the rollout evaluator's
 * lower bound): with tolerance 0 the result is the exact optimum over the
 * candidates, the same as the brute force (plan_search_brute, used by the tests);
 * with tolerance e > 0 the search stops as soon as no candidate left can be faster
 * than (best so far) / (1 + e), so the plan's step time is within a factor 1 + e of
 * that optimum. The coupled term breaks the separation a little: the search
 * evaluates it on each GPU count's best rollout layout only (its latency chain is the
 * shortest there in practice: the layout with the fastest instance for the longest
 * trajectory), the brute force on every layout.
 *
 * Rollout layouts are counts of instances per TP class (1, 2, 4, 8), every count
 * vector whose GPUs sum to the rollout GPU count (no truncation, no largest-first
 * bias). Above max_layouts vectors for one GPU count the search instead walks a
 * uniform grid of the GPU shares of the classes and then improves the best grid
 * point by local moves (one instance's GPUs from one class to another) until none
 * helps; plan_choice.approx says so.
 *
 * Node alignment: training sits after the rollout GPUs, so with a replica of
 * r = tp pp > 1 GPUs the rollout region is rounded down to a multiple of r (the
 * remainder stays idle); every TP is a power of two no larger than gpus_per_node, so
 * instances placed largest first never straddle a node and never overlap.
 */
#ifndef LIBRA_PLAN_SEARCH_H
#define LIBRA_PLAN_SEARCH_H

#include <stddef.h>
#include <stdint.h>

#include "libra/plan_cost.h"

struct plan_limits {
    int n_gpus;          /* worker GPUs to split */
    int gpus_per_node;   /* a power of two; TP degrees never exceed it */
    int min_rollout_tp, max_rollout_tp; /* powers of two: the allowed rollout classes */
    int max_train_tp, max_train_pp;     /* powers of two: allowed training tp, pp */
    int max_micro;       /* micro-batch sizes: powers of two up to this */
    int min_train, min_rollout; /* GPUs each side keeps at least */
    int granularity;     /* training GPU counts are multiples of this */
    int batch;           /* trajectories per step: dp <= batch, micro <= batch / dp */
    int max_layouts;     /* rollout layouts enumerated exactly per GPU count */
    double tolerance;    /* >= 0: stop when nothing left can beat the plan by more than
                          * this fraction of it (0: exact) */
    int threads;         /* <= 1: one thread; else up to this many (at most
                          * PLAN_MAX_THREADS) evaluate rollout GPU counts at once, which
                          * needs evaluators safe to call concurrently; the plan is the
                          * same, only the evaluator calls may be more */
};

#define PLAN_MAX_THREADS 16

/* The evaluators the search calls (the planner wires them to plan_cost.h; tests pass
 * synthetic ones). Each returns seconds, or INFINITY when the candidate is
 * infeasible, with a short reason in why (e.g. "needs 91.2 GB per GPU of 76.8"). */
struct plan_eval {
    void *ctx;
    double (*train_s)(void *ctx, const struct train_shape *s, char *why, size_t n);
    double (*rollout_s)(void *ctx, const int counts[PC_N_TP], char *why, size_t n);
    /* optional (NULL = 0): a lower bound of rollout_s over every layout of n_gpus */
    double (*rollout_lb)(void *ctx, int n_gpus);
    /* optional (NULL = none): the pipeline's coupling of the two sides for a layout and
     * a training time. A step's batch was launched when the training of an earlier
     * step ended, so the longest trajectory's own chain and the training (and weight
     * sync) of the steps in between follow one another: over the overlap o the step
     * is at least (chain + sync + train) / o. The step is then
     *     max(train_s, rollout_s, coupled_s(counts, train_s)). */
    double (*coupled_s)(void *ctx, const int counts[PC_N_TP], double train_s);
    /* optional with coupled_s (NULL = 0): a lower bound of coupled_s over every layout
     * for a training time; it lets the search prune when the coupling binds */
    double (*coupled_lb)(void *ctx, double train_s);
    /* optional (NULL = rollout_s is called): rollout_s with a cutoff, for the local
     * moves, which only need to know that a layout is worse than the best neighbour so
     * far. Returns rollout_s exactly when that is <= cutoff or infinite, else any
     * finite value in (cutoff, rollout_s]. */
    double (*rollout_cut_s)(void *ctx, const int counts[PC_N_TP], double cutoff, char *why,
                            size_t n);
};

struct plan_choice {
    int n_train;                 /* tp pp dp */
    struct train_shape train;
    int counts[PC_N_TP];         /* rollout instances per TP class */
    int n_rollout;               /* rollout GPUs: sum of tp x count */
    int n_idle;                  /* GPUs left unused by alignment */
    double train_s, rollout_s, step_s; /* step_s = max(train_s, rollout_s, coupled) */
    double coupled_s;            /* the evaluator's coupled_s for this pair; 0 without */
    int approx;                  /* some GPU count used the grid + local search */
    int64_t n_train_evals, n_rollout_evals; /* evaluator calls */
    int64_t pruned_oom, pruned_bound;       /* training shapes out of memory; skipped */
    char why[256];               /* when no candidate is feasible: the binding constraint */
};

/* Fills out with the best split; 0, or -1 when nothing is feasible (out->why names
 * the constraint that bound: limits that leave no candidate, the memory of the
 * smallest training shape tried, or the rollout reason). Ties keep the candidate with
 * the fewest training GPUs, then the lowest tp, pp, micro, then the layout with more
 * large-TP instances. */
int plan_search(const struct plan_limits *lim, const struct plan_eval *ev, struct plan_choice *out);
/* The same optimum by trying every (training shape, layout) pair, no cache, no
 * bounds, always exact; for tests on small cases. */
int plan_search_brute(const struct plan_limits *lim, const struct plan_eval *ev,
                      struct plan_choice *out);
/* Rollout layouts of n_gpus GPUs with TP in [min_tp, max_tp] (exact enumeration). */
int64_t plan_count_layouts(int n_gpus, int min_tp, int max_tp);

#endif
