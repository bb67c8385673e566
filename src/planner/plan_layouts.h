/*
 * Rollout layouts for the planner's search (internal to src/planner): a layout is a
 * vector counts[k] of rollout instances of TP pc_tp_of(k), k in an allowed range
 * [klo, khi], whose GPUs sum to the rollout GPU count exactly. This file counts and
 * enumerates them, and evaluates the layouts of one GPU count into a layout_set:
 * every layout when there are at most max_layouts of them, else a uniform grid of
 * the classes' GPU shares improved by local moves (plan_search.h; approx set).
 *
 * Preference between two layouts of the same GPU count (the search's last
 * tie-break): compare counts from the largest class down, more instances first.
 */
#ifndef LIBRA_PLAN_LAYOUTS_H
#define LIBRA_PLAN_LAYOUTS_H

#include <stddef.h>
#include <stdint.h>

#include "libra/plan_search.h"

/* Longest reason an evaluator may leave (longer ones are cut). */
#define PLAN_WHY_LEN 160

struct layout_val {
    int counts[PC_N_TP];
    double s;                 /* rollout_s of this layout; INFINITY when infeasible */
    int cut;                  /* s is only a lower bound (the local moves' cutoff) */
};

/* The evaluated layouts of one rollout GPU count. */
struct layout_set {
    int gpus, klo, khi;       /* GPU count and the allowed class range */
    int approx;               /* grid + local moves (more layouts than max_layouts) */
    struct layout_val *v;     /* (n) every layout evaluated, each once */
    size_t n, cap;
    int32_t *slot;            /* (n_slot) open-addressing index of v: i + 1, 0 = empty */
    size_t n_slot;
    double best_s;            /* min of v[].s; INFINITY when none is feasible */
    int has_why;              /* why: reason of the most preferred infeasible layout */
    int why_counts[PC_N_TP];
    char why[PLAN_WHY_LEN];
};

/* < 0 when a is preferred to b, 0 when equal, > 0 otherwise. */
int plan_layouts_prefer(const int a[PC_N_TP], const int b[PC_N_TP]);

/* Layouts of gpus GPUs over classes klo..khi (0 <= klo <= khi < PC_N_TP); saturates
 * at INT64_MAX. 1 for gpus == 0 (the empty layout), 0 for gpus < 0. */
int64_t plan_layouts_count(int gpus, int klo, int khi);

/* Calls fn on every layout in preference order (most preferred first) until fn
 * returns non-zero. counts is scratch owned by the enumeration. */
typedef int (*plan_layout_fn)(void *arg, const int counts[PC_N_TP]);
void plan_layouts_each(int gpus, int klo, int khi, plan_layout_fn fn, void *arg);

/* ev->rollout_s with its reason; a NaN result counts as infeasible. */
double plan_layouts_call(const struct plan_eval *ev, const int counts[PC_N_TP], char *why,
                         size_t n);

/* Where grid mode starts: the grid point (U units over m classes, u per class index
 * - klo) that was best in the last set evaluated with this hint. Only the order of
 * evaluation depends on it (its value cuts the other points' placements early),
 * never a set's values or choices. Zero-initialised means none. */
struct grid_hint {
    int units, m;
    int u[PC_N_TP];
};

/* Evaluates the layouts of gpus GPUs into ls (initialised here; free with
 * plan_layouts_free), adding the evaluator calls to *n_evals. Exact when at most
 * max_layouts layouts exist, else grid + local moves; hint (may be NULL) orders the
 * grid and is updated. */
void plan_layouts_eval(struct layout_set *ls, int gpus, int klo, int khi, int max_layouts,
                       const struct plan_eval *ev, struct grid_hint *hint, int64_t *n_evals);

/* Evaluates in full every layout of ls whose value the local moves cut off and whose
 * bound is <= limit (so that plan_layouts_pick(ls, limit) sees exact values), adding
 * the calls to *n_evals. Nothing to do for limit <= ls->best_s. */
void plan_layouts_settle(struct layout_set *ls, double limit, const struct plan_eval *ev,
                         int64_t *n_evals);

/* The most preferred evaluated layout with s <= limit, or NULL (entries cut off above
 * limit are left out correctly; plan_layouts_settle first when limit > best_s). */
const struct layout_val *plan_layouts_pick(const struct layout_set *ls, double limit);

void plan_layouts_free(struct layout_set *ls);

#endif
