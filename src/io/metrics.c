/*
 * The run's HDF5 metrics file (see include/libra/metrics.h and docs/metrics.md).
 *
 * One process (rank 0) writes it with the serial HDF5 API and default property lists.
 * Every table is a 1-D chunked dataset with an unlimited dimension and a compound type
 * whose members are named exactly like the fields of the row struct. The file type is
 * packed and made of standard little-endian types; the memory type is the C struct, so
 * HDF5 converts member by member and struct padding never reaches the file. Rows are
 * buffered per table and appended (extend + hyperslab write) only by metrics_flush()
 * and metrics_close(): HDF5 (without SWMR) makes no crash-consistency promise between
 * a write and the next H5Fflush, so confining writes to the flush keeps the window in
 * which a kill can damage the file to the flush itself. Memory is one step's rows.
 *
 * Array fields of a row (the per-tool counts of /steps, the per-reason counts of
 * /sched) are stored as flat scalar columns, one per element (calc_calls, route_sticky,
 * ...), so h5py/pandas users get plain columns; each such column maps to one element
 * of the struct's array. The /sched columns are named after the scheduler's enums,
 * which this file does not include (io does not depend on the scheduler): the names
 * below follow enum sched_reason / enum sched_via in order, and the row's filler
 * asserts the array sizes (METRICS_SCHED_N_*).
 *
 * metrics_write_with() hands the open file to another module's writer (the scheduler's
 * /tree group) between a row flush and a file flush, so its objects obey the same
 * crash-consistency rule as the tables.
 *
 * Limits and choices:
 *  - Not thread-safe; one writer. Table strings are fixed width: longer values are
 *    truncated (NUL-terminated, tail zeroed).
 *  - The default (earliest) file format on purpose: superblock v0 has no "open for
 *    write" flag, so a killed writer leaves a file that h5py/h5dump open without h5clear.
 *  - HDF5's automatic error printing is switched off only for the duration of each
 *    call into this module and restored before it returns (never left off for other
 *    HDF5 users such as checkpoints). Failures report the call, file:line and the HDF5
 *    error stack text; metrics_open() writes it to err, the others log it (LOG_E).
 */
#define _POSIX_C_SOURCE 200809L
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "libra/metrics.h"

#include "libra/errmsg.h"

#include "libra/tool_status.h" /* enum env_tool_id: the per-tool columns of /steps */
#include "libra/h5util.h"
#include "libra/log.h"

#include <assert.h>
#include <errno.h>
#include <hdf5.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

/* Bumped when a table, column or root attribute changes meaning (docs/metrics.md). */
#define METRICS_SCHEMA_VERSION 7 /* 2: /steps real-model columns, /eval;
                                    3: /sched, /migrations, /instances, /tree;
                                    4: /planner, /plans training shape and n_idle;
                                    5: /turns;
                                    6: /steps timing breakdown, /spans;
                                    7: enumerated columns as HDF5 enums */

#define EVENT_DETAIL_LEN 256

/* The /events row; callers pass its fields to metrics_event(). */
struct event_row {
    double wall_s;
    int32_t step;
    int32_t kind; /* enum metrics_event_kind */
    char detail[EVENT_DETAIL_LEN];
};

enum col_kind { COL_I32, COL_I64, COL_F64, COL_STR, COL_ENUM };

struct col {
    const char *name;  /* = the struct field name */
    size_t offset;     /* in the struct */
    size_t size;       /* bytes in the struct (string width including the NUL) */
    enum col_kind kind;
    const char *units; /* "1" dimensionless, "text" for strings */
    enum metrics_vocab vocab; /* COL_ENUM: its names (an int32_t field) */
};

#define FSIZE(s, f) sizeof(((struct s *)0)->f)
#define COL(s, f, k, u) { #f, offsetof(struct s, f), FSIZE(s, f), k, u, MV_COUNT }
/* An int32_t field holding a value of vocabulary v, stored as an HDF5 enum. */
#define COL_EN(s, f, v) { #f, offsetof(struct s, f), FSIZE(s, f), COL_ENUM, "1", v }
/* Element i of the int32 array field f, as a column of its own named name. */
#define COL_ELEM_I32(s, f, i, name, u) \
    { name, offsetof(struct s, f) + (i) * sizeof(int32_t), sizeof(int32_t), COL_I32, u, MV_COUNT }
/* The same for an int64 array field. */
#define COL_ELEM_I64(s, f, i, name, u) \
    { name, offsetof(struct s, f) + (i) * sizeof(int64_t), sizeof(int64_t), COL_I64, u, MV_COUNT }

/* The per-tool columns below name the elements of tool_calls/tool_failures by tool. */
_Static_assert(ENV_TOOL_CALC == 0 && ENV_TOOL_SEARCH == 1 && ENV_N_TOOLS == 2,
               "/steps names calc_* and search_* columns after enum env_tool_id");
_Static_assert(FSIZE(metrics_step_row, tool_calls) == ENV_N_TOOLS * sizeof(int32_t) &&
                   FSIZE(metrics_step_row, tool_failures) == ENV_N_TOOLS * sizeof(int32_t),
               "tool_calls/tool_failures must be int32_t[ENV_N_TOOLS]");

static const struct col step_cols[] = {
    COL(metrics_step_row, step, COL_I32, "1"),
    COL(metrics_step_row, wall_s, COL_F64, "s"),
    COL(metrics_step_row, step_s, COL_F64, "s"),
    COL(metrics_step_row, version, COL_I32, "1"),
    COL(metrics_step_row, n_traj, COL_I32, "trajectories"),
    COL(metrics_step_row, tokens_gen, COL_I64, "tokens"),
    COL(metrics_step_row, tokens_tool, COL_I64, "tokens"),
    COL(metrics_step_row, reward_mean, COL_F64, "1"),
    COL(metrics_step_row, reward_std, COL_F64, "1"),
    COL(metrics_step_row, staleness_mean, COL_F64, "versions"),
    COL(metrics_step_row, staleness_max, COL_I32, "versions"),
    COL(metrics_step_row, rollout_busy_frac, COL_F64, "1"),
    COL(metrics_step_row, train_busy_frac, COL_F64, "1"),
    COL(metrics_step_row, n_rollout_ranks, COL_I32, "ranks"),
    COL(metrics_step_row, n_train_ranks, COL_I32, "ranks"),
    COL(metrics_step_row, n_hybrid_ranks, COL_I32, "ranks"),
    COL(metrics_step_row, success_rate, COL_F64, "1"),
    COL(metrics_step_row, gen_tokens_mean, COL_F64, "tokens"),
    COL(metrics_step_row, turns_mean, COL_F64, "turns"),
    COL_ELEM_I32(metrics_step_row, tool_calls, ENV_TOOL_CALC, "calc_calls", "tool calls"),
    COL_ELEM_I32(metrics_step_row, tool_calls, ENV_TOOL_SEARCH, "search_calls", "tool calls"),
    COL_ELEM_I32(metrics_step_row, tool_failures, ENV_TOOL_CALC, "calc_failures",
                 "tool calls"),
    COL_ELEM_I32(metrics_step_row, tool_failures, ENV_TOOL_SEARCH, "search_failures",
                 "tool calls"),
    COL(metrics_step_row, zero_var_groups, COL_I32, "groups"),
    COL(metrics_step_row, loss, COL_F64, "1"),
    COL(metrics_step_row, pg_loss, COL_F64, "1"),
    COL(metrics_step_row, kl, COL_F64, "nats"),
    COL(metrics_step_row, entropy, COL_F64, "nats"),
    COL(metrics_step_row, clip_frac, COL_F64, "1"),
    COL(metrics_step_row, is_trunc_frac, COL_F64, "1"),
    COL(metrics_step_row, grad_norm, COL_F64, "1"),
    COL(metrics_step_row, lr, COL_F64, "1"),
    COL(metrics_step_row, params_identical, COL_I32, "1"),
    COL(metrics_step_row, rollout_wait_s, COL_F64, "s"),
    COL(metrics_step_row, train_s, COL_F64, "s"),
    COL(metrics_step_row, train_fwd_s, COL_F64, "s"),
    COL(metrics_step_row, train_bwd_s, COL_F64, "s"),
    COL(metrics_step_row, train_reduce_s, COL_F64, "s"),
    COL(metrics_step_row, train_opt_s, COL_F64, "s"),
    COL(metrics_step_row, gen_s, COL_F64, "s"),
    COL(metrics_step_row, tool_calls_n, COL_I32, "tool calls"),
    COL(metrics_step_row, tool_s, COL_F64, "s"),
    COL(metrics_step_row, n_syncs, COL_I32, "syncs"),
    COL(metrics_step_row, sync_s, COL_F64, "s"),
    COL(metrics_step_row, sync_bytes, COL_I64, "bytes"),
    COL(metrics_step_row, resplit_s, COL_F64, "s"),
    COL(metrics_step_row, ckpt_s, COL_F64, "s"),
    COL(metrics_step_row, rollout_idle_frac, COL_F64, "1"),
    COL(metrics_step_row, train_idle_frac, COL_F64, "1"),
};

static const struct col traj_cols[] = {
    COL(metrics_traj_row, traj_id, COL_I64, "1"),
    COL(metrics_traj_row, prompt_id, COL_I64, "1"),
    COL(metrics_traj_row, group_id, COL_I64, "1"),
    COL(metrics_traj_row, step_consumed, COL_I32, "1"),
    COL_EN(metrics_traj_row, fate, MV_FATE),
    COL(metrics_traj_row, version_start, COL_I32, "1"),
    COL(metrics_traj_row, version_end, COL_I32, "1"),
    COL(metrics_traj_row, prompt_tokens, COL_I32, "tokens"),
    COL(metrics_traj_row, gen_tokens, COL_I32, "tokens"),
    COL(metrics_traj_row, tool_tokens, COL_I32, "tokens"),
    COL(metrics_traj_row, turns, COL_I32, "turns"),
    COL(metrics_traj_row, tool_failures, COL_I32, "tool calls"),
    COL(metrics_traj_row, migrations, COL_I32, "migrations"),
    COL(metrics_traj_row, reward, COL_F64, "1"),
    COL(metrics_traj_row, t_start, COL_F64, "s"),
    COL(metrics_traj_row, t_end, COL_F64, "s"),
};

static const struct col event_cols[] = {
    COL(event_row, wall_s, COL_F64, "s"),
    COL(event_row, step, COL_I32, "1"),
    COL_EN(event_row, kind, MV_EVENT),
    COL(event_row, detail, COL_STR, "text"),
};

static const struct col plan_cols[] = {
    COL(metrics_plan_row, epoch, COL_I32, "1"),
    COL(metrics_plan_row, step, COL_I32, "1"),
    COL(metrics_plan_row, wall_s, COL_F64, "s"),
    COL(metrics_plan_row, n_train, COL_I32, "ranks"),
    COL(metrics_plan_row, n_rollout, COL_I32, "ranks"),
    COL(metrics_plan_row, n_hybrid, COL_I32, "ranks"),
    COL(metrics_plan_row, rollout_tp, COL_STR, "text"),
    COL(metrics_plan_row, reason, COL_STR, "text"),
    COL(metrics_plan_row, resplit_s, COL_F64, "s"),
    COL(metrics_plan_row, handed_back, COL_I32, "turns"),
    COL(metrics_plan_row, train_tp, COL_I32, "1"),
    COL(metrics_plan_row, train_pp, COL_I32, "1"),
    COL(metrics_plan_row, micro, COL_I32, "sequences"),
    COL(metrics_plan_row, n_idle, COL_I32, "ranks"),
};

static const struct col planner_cols[] = {
    COL(metrics_planner_row, step, COL_I32, "1"),
    COL(metrics_planner_row, wall_s, COL_F64, "s"),
    COL_EN(metrics_planner_row, trigger, MV_TRIGGER),
    COL_EN(metrics_planner_row, verdict, MV_VERDICT),
    COL(metrics_planner_row, applied, COL_I32, "1"),
    COL(metrics_planner_row, cand_train, COL_I32, "ranks"),
    COL(metrics_planner_row, cand_tp, COL_I32, "1"),
    COL(metrics_planner_row, cand_pp, COL_I32, "1"),
    COL(metrics_planner_row, cand_micro, COL_I32, "sequences"),
    COL(metrics_planner_row, cand_idle, COL_I32, "ranks"),
    COL(metrics_planner_row, cand_rollout_tp, COL_STR, "text"),
    COL(metrics_planner_row, cand_train_s, COL_F64, "s"),
    COL(metrics_planner_row, cand_rollout_s, COL_F64, "s"),
    COL(metrics_planner_row, cand_step_s, COL_F64, "s"),
    COL(metrics_planner_row, cur_train_s, COL_F64, "s"),
    COL(metrics_planner_row, cur_rollout_s, COL_F64, "s"),
    COL(metrics_planner_row, cur_step_s, COL_F64, "s"),
    COL(metrics_planner_row, meas_train_s, COL_F64, "s"),
    COL(metrics_planner_row, meas_rollout_s, COL_F64, "s"),
    COL(metrics_planner_row, scale_train, COL_F64, "1"),
    COL(metrics_planner_row, scale_rollout, COL_F64, "1"),
    COL(metrics_planner_row, gain_s, COL_F64, "s"),
    COL(metrics_planner_row, transition_s, COL_F64, "s"),
    COL(metrics_planner_row, net_s, COL_F64, "s"),
    COL(metrics_planner_row, horizon, COL_I32, "steps"),
    COL(metrics_planner_row, evaluations, COL_I64, "calls"),
    COL(metrics_planner_row, solve_s, COL_F64, "s"),
    COL(metrics_planner_row, history, COL_I32, "trajectories"),
};

static const struct col eval_cols[] = {
    COL(metrics_eval_row, step, COL_I32, "1"),
    COL(metrics_eval_row, version, COL_I32, "1"),
    COL(metrics_eval_row, wall_s, COL_F64, "s"),
    COL(metrics_eval_row, n, COL_I32, "problems"),
    COL(metrics_eval_row, accuracy, COL_F64, "1"),
    COL(metrics_eval_row, reward_mean, COL_F64, "1"),
    COL(metrics_eval_row, answered_frac, COL_F64, "1"),
    COL(metrics_eval_row, tool_calls_mean, COL_F64, "tool calls"),
    COL(metrics_eval_row, gen_tokens_mean, COL_F64, "tokens"),
};

/* /sched: route_* in the order of enum sched_reason, via_* in that of enum sched_via. */
_Static_assert(FSIZE(metrics_sched_row, routes) == 10 * sizeof(int64_t) &&
                   METRICS_SCHED_N_ROUTES == 10,
               "/sched names 10 route_* columns: update them with enum sched_reason");
_Static_assert(FSIZE(metrics_sched_row, via) == 3 * sizeof(int64_t) && METRICS_SCHED_N_VIA == 3,
               "/sched names 3 via_* columns: update them with enum sched_via");

#define ROUTE(i, name) COL_ELEM_I64(metrics_sched_row, routes, i, name, "decisions")
#define VIA(i, name) COL_ELEM_I64(metrics_sched_row, via, i, name, "decisions")

static const struct col sched_cols[] = {
    COL(metrics_sched_row, step, COL_I32, "1"),
    COL(metrics_sched_row, wall_s, COL_F64, "s"),
    ROUTE(0, "route_initial"),
    ROUTE(1, "route_informed"),
    ROUTE(2, "route_sticky"),
    ROUTE(3, "route_migrate"),
    ROUTE(4, "route_reroute"),
    ROUTE(5, "route_per_turn"),
    ROUTE(6, "route_history"),
    ROUTE(7, "route_scout"),
    ROUTE(8, "route_scout_follow"),
    ROUTE(9, "route_scout_timeout"),
    VIA(0, "via_preferred"),
    VIA(1, "via_fallback"),
    VIA(2, "via_global"),
    COL(metrics_sched_row, holds, COL_I64, "decisions"),
    COL(metrics_sched_row, migrations, COL_I64, "migrations"),
    COL(metrics_sched_row, declined, COL_I64, "bucket changes"),
    COL(metrics_sched_row, tool_returns, COL_I64, "tool returns"),
    COL(metrics_sched_row, finished, COL_I64, "trajectories"),
    COL(metrics_sched_row, learned, COL_I64, "trajectories"),
    COL(metrics_sched_row, tree_nodes, COL_I64, "nodes"),
    COL(metrics_sched_row, tree_prompts, COL_I64, "prompts"),
    COL(metrics_sched_row, tree_leaves, COL_I64, "nodes"),
    COL(metrics_sched_row, tree_depth, COL_I32, "tool returns"),
    COL(metrics_sched_row, decide_us_mean, COL_F64, "us"),
};

#undef ROUTE
#undef VIA

static const struct col migration_cols[] = {
    COL(metrics_migration_row, wall_s, COL_F64, "s"),
    COL(metrics_migration_row, step, COL_I32, "1"),
    COL(metrics_migration_row, traj_id, COL_I64, "1"),
    COL(metrics_migration_row, turn, COL_I32, "1"),
    COL(metrics_migration_row, from_instance, COL_I32, "1"),
    COL(metrics_migration_row, to_instance, COL_I32, "1"),
    COL(metrics_migration_row, from_tp, COL_I32, "ranks"),
    COL(metrics_migration_row, to_tp, COL_I32, "ranks"),
    COL(metrics_migration_row, from_bucket, COL_STR, "text"),
    COL(metrics_migration_row, to_bucket, COL_STR, "text"),
    COL_EN(metrics_migration_row, why, MV_MIG_WHY),
    COL(metrics_migration_row, est_remaining, COL_F64, "tokens"),
    COL(metrics_migration_row, saving_s, COL_F64, "s"),
    COL(metrics_migration_row, cost_s, COL_F64, "s"),
};

static const struct col turn_cols[] = {
    COL(metrics_turn_row, traj_id, COL_I64, "1"),
    COL(metrics_turn_row, turn, COL_I32, "1"),
    COL(metrics_turn_row, gen_tokens, COL_I32, "tokens"),
    COL(metrics_turn_row, final, COL_I32, "1"),
    COL(metrics_turn_row, tool, COL_STR, "text"),
    COL_EN(metrics_turn_row, status, MV_STATUS),
    COL(metrics_turn_row, payload_tokens, COL_I32, "tokens"),
    COL(metrics_turn_row, tool_latency_s, COL_F64, "s"),
    COL(metrics_turn_row, wall_s, COL_F64, "s"),
};

static const struct col instance_cols[] = {
    COL(metrics_instance_row, step, COL_I32, "1"),
    COL(metrics_instance_row, wall_s, COL_F64, "s"),
    COL(metrics_instance_row, instance, COL_I32, "1"),
    COL(metrics_instance_row, leader, COL_I32, "1"),
    COL(metrics_instance_row, tp, COL_I32, "ranks"),
    COL(metrics_instance_row, bucket, COL_STR, "text"),
    COL(metrics_instance_row, queued, COL_I32, "turns"),
    COL(metrics_instance_row, running, COL_I32, "turns"),
    COL(metrics_instance_row, turns_in_flight, COL_I32, "turns"),
    COL(metrics_instance_row, kv_frac, COL_F64, "1"),
    COL(metrics_instance_row, load_frac, COL_F64, "1"),
};

static const struct col span_cols[] = {
    COL(metrics_span_row, rank, COL_I32, "1"),
    COL_EN(metrics_span_row, kind, MV_SPAN),
    COL(metrics_span_row, step, COL_I32, "1"),
    COL(metrics_span_row, t_start, COL_F64, "s"),
    COL(metrics_span_row, t_end, COL_F64, "s"),
    COL(metrics_span_row, count, COL_I64, "1"),
    COL(metrics_span_row, detail, COL_STR, "text"),
};

struct table_def {
    const char *name;
    const char *description;
    const struct col *cols;
    int ncols;
    size_t rowsize;
    hsize_t chunk;           /* rows per chunk */
};

#define NCOLS(a) ((int)(sizeof(a) / sizeof((a)[0])))

enum { T_STEPS, T_TRAJ, T_EVENTS, T_PLANS, T_EVAL, T_SCHED, T_MIGRATIONS, T_INSTANCES, T_PLANNER,
       T_TURNS, T_SPANS, T_COUNT };

static const struct table_def table_defs[T_COUNT] = {
    [T_STEPS] = {"steps",
                 "one row per optimizer step, globally reduced over all ranks; wall_s is the "
                 "end of the step, seconds since the run started",
                 step_cols, NCOLS(step_cols), sizeof(struct metrics_step_row), 256},
    [T_TRAJ] = {"trajectories",
                "one row per trajectory started in the run: trained ones when their step "
                "finishes, buffered and in-flight ones at the end",
                traj_cols, NCOLS(traj_cols), sizeof(struct metrics_traj_row), 4096},
    [T_EVENTS] = {"events",
                  "timestamped run events (plans and re-splits, weight syncs, the pool's "
                  "lends, checkpoints, cancels, errors): kind says which, detail free text",
                  event_cols, NCOLS(event_cols), sizeof(struct event_row), 256},
    [T_PLANS] = {"plans",
                 "one row per planning epoch: the resource plan the planner broadcast, why, "
                 "and what the re-split cost",
                 plan_cols, NCOLS(plan_cols), sizeof(struct metrics_plan_row), 256},
    [T_EVAL] = {"eval",
                "one row per greedy evaluation on the held-out set; step is the optimizer "
                "steps done when it was launched, wall_s when it finished",
                eval_cols, NCOLS(eval_cols), sizeof(struct metrics_eval_row), 256},
    [T_SCHED] = {"sched",
                 "one row per optimizer step: the scheduler's routing decisions by reason and "
                 "by path, migrations, tool returns and finished trajectories during the step, "
                 "and cmlfq's prefix tree at its end",
                 sched_cols, NCOLS(sched_cols), sizeof(struct metrics_sched_row), 256},
    [T_MIGRATIONS] = {"migrations",
                      "one row per bucket change the scheduler took or declined at a "
                      "tool-return boundary; to_instance = from_instance when not moved",
                      migration_cols, NCOLS(migration_cols),
                      sizeof(struct metrics_migration_row), 4096},
    [T_INSTANCES] = {"instances",
                     "one row per rollout instance per optimizer step: its own last report "
                     "(queued, running, kv_frac; -1 before any) and rank 0's view "
                     "(turns_in_flight, load_frac)",
                     instance_cols, NCOLS(instance_cols), sizeof(struct metrics_instance_row),
                     1024},
    [T_PLANNER] = {"planner",
                   "one row per step of the global resource planner (plan.mode = grp): the "
                   "trigger, the best candidate, predicted (calibrated) and measured emulated "
                   "seconds per step, the gate's verdict and whether it was applied",
                   planner_cols, NCOLS(planner_cols), sizeof(struct metrics_planner_row), 256},
    [T_TURNS] = {"turns",
                 "one row per finished turn of a training trajectory, in the order rank 0 "
                 "received them: generated tokens, the tool call that ended it (none when "
                 "final), its status, payload and latency; what `libra --trace-export` turns "
                 "into a replayable trace",
                 turn_cols, NCOLS(turn_cols), sizeof(struct metrics_turn_row), 4096},
    [T_SPANS] = {"spans",
                 "what each rank was doing, t_start to t_end on rank 0's clock: decode busy "
                 "periods, tool calls, training phases, weight syncs, re-splits, checkpoints; "
                 "what `libra trace` draws",
                 span_cols, NCOLS(span_cols), sizeof(struct metrics_span_row), 4096},
};

struct table {
    const struct table_def *def;
    hid_t dset;           /* the dataset, open for the file's lifetime */
    hid_t mtype;          /* memory compound type (the C struct) */
    unsigned char *buf;   /* (cap, def->rowsize) rows not yet written */
    size_t nbuf, cap;
    hsize_t written;      /* rows already in the file */
};

struct metrics {
    char *path;
    hid_t file;
    struct table tab[T_COUNT];
    char err[1024];       /* last error of a call other than metrics_open */
};

/* ---- errors ---- */

/* Needs `char *err; size_t errlen;` and a `fail:` label in scope. */
#define H5TRY(expr)                                                    \
    do {                                                               \
        if ((expr) < 0) {                                              \
            h5_error(err, errlen, NULL, #expr, __FILE__, __LINE__);          \
            goto fail;                                                 \
        }                                                              \
    } while (0)

static void close_id(hid_t *id, herr_t (*closer)(hid_t))
{
    if (*id >= 0) closer(*id);
    *id = H5I_INVALID_HID;
}

/* ---- attributes ---- */

/* Writes a scalar attribute, replacing an existing one of the same name. */
static int attr_put(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *value,
                    char *err, size_t errlen)
{
    hid_t space = H5I_INVALID_HID, attr = H5I_INVALID_HID;
    htri_t exists;
    H5TRY(exists = H5Aexists(obj, name));
    if (exists) H5TRY(H5Adelete(obj, name));
    H5TRY(space = H5Screate(H5S_SCALAR));
    H5TRY(attr = H5Acreate2(obj, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT));
    H5TRY(H5Awrite(attr, mtype, value));
    H5TRY(H5Aclose(attr));
    H5TRY(H5Sclose(space));
    return 0;
fail:
    close_id(&attr, H5Aclose);
    close_id(&space, H5Sclose);
    return -1;
}

/* Variable-length UTF-8 string: any length (the config is KBs), read by h5py as str. */
static int attr_put_string(hid_t obj, const char *name, const char *value, char *err,
                           size_t errlen)
{
    hid_t type = H5I_INVALID_HID;
    H5TRY(type = H5Tcopy(H5T_C_S1));
    H5TRY(H5Tset_size(type, H5T_VARIABLE));
    H5TRY(H5Tset_cset(type, H5T_CSET_UTF8));
    const char *v = value ? value : "";
    if (attr_put(obj, name, type, type, &v, err, errlen) != 0) goto fail;
    H5TRY(H5Tclose(type));
    return 0;
fail:
    close_id(&type, H5Tclose);
    return -1;
}

static int attr_put_i64(hid_t obj, const char *name, int64_t value, char *err, size_t errlen)
{
    return attr_put(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value, err, errlen);
}

/* ---- tables ---- */

static hid_t string_type(size_t width, char *err, size_t errlen)
{
    hid_t t = H5I_INVALID_HID;
    H5TRY(t = H5Tcopy(H5T_C_S1));
    H5TRY(H5Tset_size(t, width));
    H5TRY(H5Tset_strpad(t, H5T_STR_NULLTERM));
    return t;
fail:
    close_id(&t, H5Tclose);
    return H5I_INVALID_HID;
}

/* Vocabulary v as an HDF5 enum over int32 (native in memory, little-endian in the file). */
static hid_t enum_type(enum metrics_vocab v, bool in_file, char *err, size_t errlen)
{
    hid_t t = H5I_INVALID_HID;
    int first, n;
    metrics_enum_range(v, &first, &n);
    H5TRY(t = H5Tenum_create(in_file ? H5T_STD_I32LE : H5T_NATIVE_INT32));
    for (int k = first; k < first + n; k++) {
        int32_t value = k;
        if (in_file) H5TRY(H5Tconvert(H5T_NATIVE_INT32, H5T_STD_I32LE, 1, &value, NULL,
                                       H5P_DEFAULT));
        H5TRY(H5Tenum_insert(t, metrics_enum_name(v, k), &value));
    }
    return t;
fail:
    close_id(&t, H5Tclose);
    return H5I_INVALID_HID;
}

/* The memory type (native, at struct offsets) or the file type (packed, little-endian). */
static hid_t compound_type(const struct table_def *d, bool in_file, char *err, size_t errlen)
{
    hid_t t = H5I_INVALID_HID, s = H5I_INVALID_HID;
    size_t packed = 0;
    for (int i = 0; i < d->ncols; i++) packed += d->cols[i].size;
    H5TRY(t = H5Tcreate(H5T_COMPOUND, in_file ? packed : d->rowsize));
    size_t off = 0;
    for (int i = 0; i < d->ncols; i++) {
        const struct col *c = &d->cols[i];
        hid_t member;
        switch (c->kind) {
        case COL_I32:
            assert(c->size == 4);
            member = in_file ? H5T_STD_I32LE : H5T_NATIVE_INT32;
            break;
        case COL_I64:
            assert(c->size == 8);
            member = in_file ? H5T_STD_I64LE : H5T_NATIVE_INT64;
            break;
        case COL_F64:
            assert(c->size == 8);
            member = in_file ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE;
            break;
        case COL_ENUM:
            assert(c->size == 4);
            if ((s = enum_type(c->vocab, in_file, err, errlen)) < 0) goto fail;
            member = s;
            break;
        default:
            if ((s = string_type(c->size, err, errlen)) < 0) goto fail;
            member = s;
            break;
        }
        H5TRY(H5Tinsert(t, c->name, in_file ? off : c->offset, member));
        close_id(&s, H5Tclose);
        off += c->size;
    }
    return t;
fail:
    close_id(&s, H5Tclose);
    close_id(&t, H5Tclose);
    return H5I_INVALID_HID;
}

static int table_create(hid_t file, struct table *t, const struct table_def *d, char *err,
                        size_t errlen)
{
    hid_t ftype = H5I_INVALID_HID, space = H5I_INVALID_HID, dcpl = H5I_INVALID_HID;
    hsize_t dims = 0, maxdims = H5S_UNLIMITED, chunk = d->chunk;
    t->def = d;
    if ((t->mtype = compound_type(d, false, err, errlen)) < 0) goto fail;
    if ((ftype = compound_type(d, true, err, errlen)) < 0) goto fail;
    H5TRY(space = H5Screate_simple(1, &dims, &maxdims));
    H5TRY(dcpl = H5Pcreate(H5P_DATASET_CREATE));
    H5TRY(H5Pset_chunk(dcpl, 1, &chunk));
    /* byte shuffle + deflate: rows of a table are alike (steps, ids, times), so the
     * file shrinks several times; readers (h5py, h5dump) decompress transparently */
    if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) {
        H5TRY(H5Pset_shuffle(dcpl));
        H5TRY(H5Pset_deflate(dcpl, 4));
    }
    H5TRY(H5Pset_obj_track_times(dcpl, 0)); /* the same run gives the same bytes */
    H5TRY(t->dset = H5Dcreate2(file, d->name, ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
    if (attr_put_string(t->dset, "description", d->description, err, errlen) != 0) goto fail;
    for (int i = 0; i < d->ncols; i++) {
        char name[128];
        snprintf(name, sizeof name, "units.%s", d->cols[i].name);
        if (attr_put_string(t->dset, name, d->cols[i].units, err, errlen) != 0) goto fail;
    }
    H5TRY(H5Pclose(dcpl));
    H5TRY(H5Sclose(space));
    H5TRY(H5Tclose(ftype));
    return 0;
fail:
    close_id(&dcpl, H5Pclose);
    close_id(&space, H5Sclose);
    close_id(&ftype, H5Tclose);
    return -1; /* t->dset and t->mtype are closed by the caller */
}

/* Appends the buffered rows to the dataset; the buffer is kept if the write fails. */
static int table_write(struct table *t, char *err, size_t errlen)
{
    hid_t fspace = H5I_INVALID_HID, mspace = H5I_INVALID_HID;
    if (t->nbuf == 0) return 0;
    hsize_t start = t->written, count = t->nbuf, total = t->written + t->nbuf;
    H5TRY(H5Dset_extent(t->dset, &total));
    H5TRY(fspace = H5Dget_space(t->dset));
    H5TRY(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, NULL, &count, NULL));
    H5TRY(mspace = H5Screate_simple(1, &count, NULL));
    H5TRY(H5Dwrite(t->dset, t->mtype, mspace, fspace, H5P_DEFAULT, t->buf));
    H5TRY(H5Sclose(mspace));
    H5TRY(H5Sclose(fspace));
    t->written = total;
    t->nbuf = 0;
    return 0;
fail:
    close_id(&mspace, H5Sclose);
    close_id(&fspace, H5Sclose);
    return -1;
}

/*
 * Copies a row field by field into a zeroed slot (padding never holds the caller's stack
 * bytes) and NUL-terminates strings. Only memory: cannot fail.
 */
static void table_append(struct table *t, const void *row)
{
    const struct table_def *d = t->def;
    xgrow_at((void **)&t->buf, &t->cap, t->nbuf + 1, d->rowsize, __FILE__, __LINE__);
    unsigned char *dst = t->buf + t->nbuf * d->rowsize;
    const unsigned char *src = row;
    memset(dst, 0, d->rowsize);
    for (int i = 0; i < d->ncols; i++) {
        const struct col *c = &d->cols[i];
        if (c->kind == COL_STR) {
            size_t n = strnlen((const char *)src + c->offset, c->size - 1);
            memcpy(dst + c->offset, src + c->offset, n);
        } else {
            memcpy(dst + c->offset, src + c->offset, c->size);
        }
    }
    t->nbuf++;
}

static void table_close(struct table *t)
{
    close_id(&t->dset, H5Dclose);
    close_id(&t->mtype, H5Tclose);
    free(t->buf);
    t->buf = NULL;
    t->nbuf = t->cap = 0;
}

/* ---- the file ---- */

/* Explains why path cannot be created, before HDF5 gives a less direct message. */
static int check_creatable(const char *path, char *err, size_t errlen)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, sizeof dir, ".");
    } else if (slash == path) {
        snprintf(dir, sizeof dir, "/");
    } else {
        if ((size_t)(slash - path) >= sizeof dir) {
            errmsg_set(err, errlen, "cannot create metrics file %s: path too long", path);
            return -1;
        }
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
    }
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            errmsg_set(err, errlen,
                       "cannot create metrics file %s: directory %s does not exist "
                       "(create it, or choose another output path)", path, dir);
        else
            errmsg_set(err, errlen, "cannot create metrics file %s: directory %s: %s", path, dir,
                       strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        errmsg_set(err, errlen, "cannot create metrics file %s: %s is not a directory", path, dir);
        return -1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        errmsg_set(err, errlen,
                   "cannot create metrics file %s: permission denied in directory %s (%s)", path,
                   dir, strerror(errno));
        return -1;
    }
    if (lstat(path, &st) == 0) {
        errmsg_set(err, errlen,
                   "cannot create metrics file %s: file exists (metrics files are never "
                   "overwritten; remove it or choose another run name)", path);
        return -1;
    }
    return 0;
}

static void iso8601_utc(char *buf, size_t n)
{
    time_t now = time(NULL);
    struct tm tm;
    if (!gmtime_r(&now, &tm) || strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, n, "unknown");
}

static void metrics_free(struct metrics *m)
{
    for (int i = 0; i < T_COUNT; i++) table_close(&m->tab[i]);
    close_id(&m->file, H5Fclose);
    free(m->path);
    free(m);
}

struct metrics *metrics_open(const char *path, const char *config_text, int world_size,
                             const char *device_type, char *err, size_t errlen)
{
    char created[32];
    iso8601_utc(created, sizeof created);
    return metrics_open_as(path, config_text, world_size, device_type, created, err, errlen);
}

struct metrics *metrics_open_as(const char *path, const char *config_text, int world_size,
                                const char *device_type, const char *created, char *err,
                                size_t errlen)
{
    if (!path || !*path) {
        errmsg_set(err, errlen, "metrics_open: empty output path");
        return NULL;
    }
    if (check_creatable(path, err, errlen) != 0) return NULL;

    struct h5quiet q;
    h5_quiet_begin(&q);
    struct metrics *m = xcalloc(1, sizeof *m);
    m->path = xstrdup(path);
    m->file = H5I_INVALID_HID;
    for (int i = 0; i < T_COUNT; i++) {
        m->tab[i].dset = H5I_INVALID_HID;
        m->tab[i].mtype = H5I_INVALID_HID;
    }
    /* EXCL: never truncate, even if the file appeared after check_creatable(). */
    H5TRY(m->file = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT));

    if (attr_put_i64(m->file, "schema_version", METRICS_SCHEMA_VERSION, err, errlen) ||
        attr_put_string(m->file, "config", config_text, err, errlen) ||
        attr_put_string(m->file, "libra_version", PACKAGE_VERSION, err, errlen) ||
        attr_put_i64(m->file, "world_size", world_size, err, errlen) ||
        attr_put_string(m->file, "device_type", device_type ? device_type : "unknown", err,
                        errlen) ||
        attr_put_string(m->file, "status", "running", err, errlen) ||
        attr_put_string(m->file, "created", created, err, errlen))
        goto fail;
    for (int i = 0; i < T_COUNT; i++)
        if (table_create(m->file, &m->tab[i], &table_defs[i], err, errlen) != 0) goto fail;
    H5TRY(H5Fflush(m->file, H5F_SCOPE_GLOBAL));
    h5_quiet_end(&q);
    return m;
fail:;
    /* A half-made file would block the retry ("exists"): remove what we created. */
    bool created_file = m->file >= 0;
    metrics_free(m);
    if (created_file) unlink(path);
    H5Eclear2(H5E_DEFAULT);
    h5_quiet_end(&q);
    return NULL;
}

/* Logs the error of a call other than metrics_open (STYLE 6: the driver decides). */
static int fail_logged(struct metrics *m, const char *what)
{
    LOG_E("metrics file %s: %s: %s", m->path, what, m->err);
    return -1;
}

/* A value outside its column's vocabulary would be stored as a number h5dump and h5py
 * cannot name: refused, nothing appended. */
static int check_enums(struct metrics *m, const struct table_def *d, const void *row)
{
    for (int i = 0; i < d->ncols; i++) {
        const struct col *c = &d->cols[i];
        int32_t v;
        if (c->kind != COL_ENUM) continue;
        memcpy(&v, (const unsigned char *)row + c->offset, sizeof v);
        if (!metrics_enum_name(c->vocab, v)) {
            snprintf(m->err, sizeof m->err, "/%s %s: %d is not one of its values", d->name,
                     c->name, (int)v);
            return fail_logged(m, "append");
        }
    }
    return 0;
}

static int append(struct metrics *m, int table, const void *row)
{
    if (!m || !row) return -1;
    if (check_enums(m, m->tab[table].def, row)) return -1;
    table_append(&m->tab[table], row);
    return 0;
}

int metrics_step(struct metrics *m, const struct metrics_step_row *row)
{
    return append(m, T_STEPS, row);
}

int metrics_traj(struct metrics *m, const struct metrics_traj_row *row)
{
    return append(m, T_TRAJ, row);
}

int metrics_plan(struct metrics *m, const struct metrics_plan_row *row)
{
    return append(m, T_PLANS, row);
}

int metrics_planner(struct metrics *m, const struct metrics_planner_row *row)
{
    return append(m, T_PLANNER, row);
}

int metrics_eval(struct metrics *m, const struct metrics_eval_row *row)
{
    return append(m, T_EVAL, row);
}

int metrics_sched(struct metrics *m, const struct metrics_sched_row *row)
{
    return append(m, T_SCHED, row);
}

int metrics_migration(struct metrics *m, const struct metrics_migration_row *row)
{
    return append(m, T_MIGRATIONS, row);
}

int metrics_turn(struct metrics *m, const struct metrics_turn_row *row)
{
    return append(m, T_TURNS, row);
}

int metrics_span(struct metrics *m, const struct metrics_span_row *row)
{
    return append(m, T_SPANS, row);
}

int metrics_instance(struct metrics *m, const struct metrics_instance_row *row)
{
    return append(m, T_INSTANCES, row);
}

int metrics_event(struct metrics *m, double wall_s, int32_t step, enum metrics_event_kind kind,
                  const char *detail)
{
    struct event_row e;
    memset(&e, 0, sizeof e);
    e.wall_s = wall_s;
    e.step = step;
    e.kind = (int32_t)kind;
    snprintf(e.detail, sizeof e.detail, "%s", detail ? detail : "");
    return append(m, T_EVENTS, &e);
}

enum attr_kind { A_F64, A_I64, A_STR };

static int attr_root(struct metrics *m, const char *name, enum attr_kind kind, double d,
                     int64_t i, const char *s)
{
    if (!m || !name) return -1;
    char *err = m->err;
    size_t errlen = sizeof m->err;
    struct h5quiet q;
    h5_quiet_begin(&q);
    int rc;
    if (kind == A_F64)
        rc = attr_put(m->file, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &d, err, errlen);
    else if (kind == A_I64)
        rc = attr_put_i64(m->file, name, i, err, errlen);
    else
        rc = attr_put_string(m->file, name, s, err, errlen);
    h5_quiet_end(&q);
    if (rc == 0) return 0;
    char what[192];
    snprintf(what, sizeof what, "writing root attribute '%s'", name);
    return fail_logged(m, what);
}

int metrics_attr_double(struct metrics *m, const char *name, double value)
{
    return attr_root(m, name, A_F64, value, 0, NULL);
}

int metrics_attr_int(struct metrics *m, const char *name, int64_t value)
{
    return attr_root(m, name, A_I64, 0.0, value, NULL);
}

int metrics_attr_string(struct metrics *m, const char *name, const char *value)
{
    return attr_root(m, name, A_STR, 0.0, 0, value);
}

static int write_all(struct metrics *m)
{
    for (int i = 0; i < T_COUNT; i++)
        if (table_write(&m->tab[i], m->err, sizeof m->err) != 0) return -1;
    return 0;
}

int metrics_flush(struct metrics *m)
{
    if (!m) return -1;
    char *err = m->err;
    size_t errlen = sizeof m->err;
    struct h5quiet q;
    h5_quiet_begin(&q);
    if (write_all(m) != 0) goto fail;
    H5TRY(H5Fflush(m->file, H5F_SCOPE_GLOBAL));
    h5_quiet_end(&q);
    return 0;
fail:
    h5_quiet_end(&q);
    return fail_logged(m, "flushing");
}

_Static_assert(sizeof(hid_t) == sizeof(int64_t), "metrics_write_with passes a hid_t as int64_t");

/*
 * The rows first, so fn's objects never reach the disk ahead of rows added before the
 * call; the file is flushed after fn whatever it returned, so a partly written group
 * is at least consistent on disk. An object fn leaves open would keep the file open
 * past metrics_close() (HDF5's weak close): it is reported, not closed here (it is
 * fn's to close).
 */
int metrics_write_with(struct metrics *m,
                       int (*fn)(int64_t file, void *arg, char *err, size_t errlen), void *arg)
{
    if (!m || !fn) return -1;
    char *err = m->err;
    size_t errlen = sizeof m->err;
    struct h5quiet q;
    h5_quiet_begin(&q);
    if (write_all(m) != 0) {
        h5_quiet_end(&q);
        return fail_logged(m, "writing buffered rows before an external writer");
    }
    ssize_t open_before = H5Fget_obj_count(m->file, H5F_OBJ_ALL);
    err[0] = '\0';
    int rc = fn((int64_t)m->file, arg, err, errlen);
    if (rc != 0) {
        if (!err[0]) snprintf(err, errlen, "(the writer gave no message)");
        H5Eclear2(H5E_DEFAULT);
        fail_logged(m, "external writer failed");
    }
    ssize_t open_after = H5Fget_obj_count(m->file, H5F_OBJ_ALL);
    if (open_before >= 0 && open_after > open_before)
        LOG_W("metrics file %s: an external writer left %zd HDF5 object(s) open (it must "
              "close what it opens; the file cannot close while they are)",
              m->path, open_after - open_before);
    H5TRY(H5Fflush(m->file, H5F_SCOPE_GLOBAL));
    h5_quiet_end(&q);
    return rc;
fail:
    h5_quiet_end(&q);
    fail_logged(m, "flushing after an external writer");
    return rc != 0 ? rc : -1;
}

/*
 * Writes what is buffered, sets status and closes. If the rows cannot be written the
 * status becomes "failed" whatever was asked, so a damaged file never reads "complete".
 * Everything is released on every path.
 */
int metrics_close(struct metrics *m, const char *status)
{
    if (!m) return 0;
    char *err = m->err;
    size_t errlen = sizeof m->err;
    const char *what = "writing buffered rows";
    int rc = 0;
    struct h5quiet q;
    h5_quiet_begin(&q);
    if (write_all(m) != 0) {
        rc = fail_logged(m, what);
        status = "failed";
    }
    what = "setting status";
    if (attr_put_string(m->file, "status", status ? status : "complete", err, errlen) != 0)
        goto fail;
    for (int i = 0; i < T_COUNT; i++) table_close(&m->tab[i]);
    what = "closing";
    hid_t file = m->file;
    m->file = H5I_INVALID_HID;
    H5TRY(H5Fclose(file));
    metrics_free(m);
    h5_quiet_end(&q);
    return rc;
fail:
    fail_logged(m, what);
    metrics_free(m);
    H5Eclear2(H5E_DEFAULT);
    h5_quiet_end(&q);
    return -1;
}

const char *metrics_path(const struct metrics *m) { return m ? m->path : NULL; }
