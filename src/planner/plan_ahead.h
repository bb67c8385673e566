/*
 * Rollout sets made ahead (internal to src/planner): worker threads that evaluate the
 * layout sets (plan_layouts.h) of rollout GPU counts the search expects to need, while
 * the search goes on with the one it needs now. The search names its next counts in
 * order (plan_ahead_want, which replaces the jobs not started yet, so the workers
 * follow the search's latest view) and takes a set when it needs it (plan_ahead_take:
 * made, or being made -- the caller makes the next queued ones meanwhile -- or left
 * for the caller to make).
 *
 * A set's values and choices do not depend on which thread made it or on its grid's
 * hint (plan_layouts.h), so a search that takes its sets from here makes the choices
 * it would make alone; a set made and never taken costs only its evaluator calls.
 * The evaluators must be safe to call from several threads at once.
 */
#ifndef LIBRA_PLAN_AHEAD_H
#define LIBRA_PLAN_AHEAD_H

#include <stdint.h>

#include "plan_layouts.h"

struct plan_ahead;

/* threads - 1 workers (threads >= 2) for sets of up to n_gpus GPUs over classes
 * klo..khi; NULL when no worker could be started (the caller goes on alone). */
struct plan_ahead *plan_ahead_start(int threads, int n_gpus, int klo, int khi, int max_layouts,
                                    const struct plan_eval *ev);
/* The counts to make next, most wanted first (n of them; counts being made or made
 * are skipped), each grid walked from hint. */
void plan_ahead_want(struct plan_ahead *a, const int *gpus, int n, const struct grid_hint *hint);
/* The set of gpus GPUs if a worker made it or is making it (meanwhile the caller
 * makes queued sets itself, then waits), with its evaluator calls added to *n_evals;
 * NULL if none is (a job not started is dropped): the caller makes it. The caller
 * owns the set. */
struct layout_set *plan_ahead_take(struct plan_ahead *a, int gpus, int64_t *n_evals);
/* Waits until the workers have made every queued set (for tests: what the workers
 * make then does not depend on how the threads are scheduled). */
void plan_ahead_drain(struct plan_ahead *a);
/* Stops the workers (a set being made is finished first) and frees what was never
 * taken, adding its evaluator calls to *n_evals. NULL is a no-op. */
void plan_ahead_stop(struct plan_ahead *a, int64_t *n_evals);

#endif
