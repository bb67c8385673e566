/*
 * Tests of the HDF5 metrics writer (src/io/metrics.c) and of tests/check_run.
 *
 * The writer is checked by reading its files back with the plain HDF5 API, through
 * memory types built here from the header's structs (so a renamed column or a changed
 * layout fails): every column of every row, the column names in order, the units and
 * description attributes, the root attributes. The per-tool arrays of a /steps row are
 * read back as flat columns (calc_calls, search_failures, ...), by name, and so are the
 * per-reason and per-path counts of a /sched row (route_sticky, via_global, ...). The
 * scheduler's tables (/sched, /migrations, /instances), the global resource planner's
 * /planner (NaN times of a pass without a search included) and metrics_write_with() (a
 * /tree group written by a callback, its errors, a callback that leaks an object) are
 * checked the same way. A forked child that is SIGKILLed after metrics_flush() proves
 * that a killed run leaves a readable file, scheduler and planner tables and /tree
 * included.
 *
 * check_run is exercised on one consistent synthetic run and on a series of broken ones
 * (each must fail with the expected message). The binary is $CHECK_RUN, else
 * $top_builddir/tests/check_run; without either that part is skipped with a notice.
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/metrics.h"

#include "libra/h5util.h"
#include "libra/log.h"
#include "libra/plan_policy.h"
#include "libra/sched.h"
#include "testutil.h"

#include <hdf5.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ---- */

static const char *scratch(const char *file)
{
    static char dir[1024];
    static char buf[8][1200];
    static int next;
    if (!dir[0]) {
        const char *d = test_scratch_dir("metrics");
        if (!d) {
            fprintf(stderr, "test_metrics: cannot create a scratch directory under "
                            "$top_builddir/tests/out (is top_builddir right?)\n");
            exit(2);
        }
        snprintf(dir, sizeof dir, "%s", d);
    }
    char *out = buf[next++ % 8];
    snprintf(out, sizeof buf[0], "%s/%s", dir, file);
    unlink(out); /* a rerun in the same pid is impossible, but be explicit */
    return out;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return xstrdup("");
    size_t cap = 4096, n = 0;
    char *s = xmalloc(cap);
    size_t got;
    while ((got = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) s = xrealloc(s, cap *= 2);
    }
    s[n] = '\0';
    fclose(f);
    return s;
}

/* Row i of each table: every field a different function of i, strings included. */
static struct metrics_step_row make_step(int i)
{
    struct metrics_step_row r;
    memset(&r, 0xA5, sizeof r); /* padding garbage must not matter */
    r.step = i + 1;
    r.wall_s = 1.5 * i + 0.25;
    r.step_s = 0.125 + i;
    r.version = i + 1;
    r.n_traj = 8 + i % 3;
    r.tokens_gen = 1000000000LL * 5 + i; /* needs 64 bits */
    r.tokens_tool = 77LL * i;
    r.reward_mean = 0.5 / (i + 1);
    r.reward_std = 0.1 * i;
    r.staleness_mean = 0.3 * (i % 4);
    r.staleness_max = i % 4;
    r.rollout_busy_frac = 0.9 - 0.001 * i;
    r.train_busy_frac = 0.4 + 0.001 * i;
    r.n_rollout_ranks = 5 + i % 2;
    r.n_train_ranks = 2;
    r.n_hybrid_ranks = i % 3;
    r.success_rate = 0.125 * (i % 9);
    r.gen_tokens_mean = 200.5 + i;
    r.turns_mean = 1.0 + 0.25 * (i % 5);
    r.tool_calls[0] = 10 * i + 1; /* calc */
    r.tool_calls[1] = 10 * i + 2; /* search */
    r.tool_failures[0] = 10 * i + 3;
    r.tool_failures[1] = 10 * i + 4;
    r.zero_var_groups = i % 4;
    r.loss = -0.01 * i;
    r.pg_loss = -0.02 * i + 0.001;
    r.kl = 1e-4 * i;
    r.entropy = 2.5 - 0.001 * i;
    r.clip_frac = 0.001 * (i % 50);
    r.is_trunc_frac = 0.0005 * (i % 7);
    r.grad_norm = 3.0 + 0.01 * i;
    r.lr = 1e-5 * (1 + i % 3);
    r.params_identical = i % 2;
    /* the timing breakdown, consistent as check_run wants it */
    r.rollout_wait_s = 0.25 * r.step_s;
    r.train_s = r.step_s - r.rollout_wait_s;
    r.train_fwd_s = 0.2 * r.train_s;
    r.train_bwd_s = 0.4 * r.train_s;
    r.train_reduce_s = 0.1 * r.train_s;
    r.train_opt_s = 0.05 * r.train_s;
    r.gen_s = 0.5 * r.step_s;
    r.tool_calls_n = i % 5;
    r.tool_s = 1.5 * (i % 5);
    r.n_syncs = 1 + i % 2;
    r.sync_s = 0.01 * r.n_syncs;
    r.sync_bytes = 3000000000LL + i; /* needs 64 bits */
    r.resplit_s = 0;
    r.ckpt_s = 0.001 * (i % 3);
    r.rollout_idle_frac = 0.1 + 0.001 * (i % 100);
    r.train_idle_frac = r.rollout_wait_s / r.step_s;
    return r;
}

static struct metrics_eval_row make_eval(int i)
{
    struct metrics_eval_row r;
    memset(&r, 0x3C, sizeof r);
    r.step = 5 * i;
    r.version = 5 * i + i % 2;
    r.wall_s = 60.0 * i + 0.5;
    r.n = 100 + i;
    r.accuracy = 0.01 * i;
    r.reward_mean = 0.02 * i - 0.5;
    r.answered_frac = 1.0 - 0.03 * i;
    r.tool_calls_mean = 1.5 + 0.1 * i;
    r.gen_tokens_mean = 300.25 + i;
    return r;
}

static struct metrics_traj_row make_traj(int i)
{
    struct metrics_traj_row r;
    memset(&r, 0x5A, sizeof r);
    r.traj_id = i;
    r.prompt_id = 3000000000LL + i / 4;
    r.group_id = i / 4;
    r.step_consumed = i % 5 == 0 ? -1 : 1 + i / 10;
    r.fate = i % 5 == 0 ? 1 + i % 2 : 0;
    r.version_start = i / 10;
    r.version_end = i / 10 + i % 2;
    r.prompt_tokens = 100 + i % 50;
    r.gen_tokens = 2000 + i;
    r.tool_tokens = 300 + i % 7;
    r.turns = 1 + i % 6;
    r.tool_failures = i % 3;
    r.migrations = i % 2;
    r.reward = (i % 3) * 0.5 - 0.25;
    r.t_start = 0.01 * i;
    r.t_end = i % 5 == 0 ? -1.0 : 0.01 * i + 3.0;
    return r;
}

static struct metrics_plan_row make_plan(int i)
{
    struct metrics_plan_row r;
    memset(&r, 0x33, sizeof r);
    r.epoch = i;
    r.step = 10 * i;
    r.wall_s = 100.0 * i;
    r.n_train = 2 + i % 2;
    r.n_rollout = 5 - i % 2;
    r.n_hybrid = i % 3;
    snprintf(r.rollout_tp, sizeof r.rollout_tp, "%d,2,1", 4 - i % 2);
    snprintf(r.reason, sizeof r.reason, i == 0 ? "initial" : "rollout-bound %d", i);
    r.resplit_s = 0.002 * i;
    r.handed_back = 3 * i;
    r.train_tp = 1 << (i % 4);
    r.train_pp = 1 + i % 3;
    r.micro = 1 << (i % 5);
    r.n_idle = i % 2 ? 0 : 1 + i % 4;
    return r;
}

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

/*
 * The enumerations' names as docs/metrics.md gives them, written out here (not taken
 * from the writer's tables) so that the file's enum types are checked against the
 * document: a reader's memory type built from these converts the file's by name.
 */
static const char *const event_kinds[] = {
    "plan", "resplit", "role_change", "weight_sync", "planner", "pool_lend", "pool_release",
    "pool_ready", "pool_join_timeout", "pool_stale_ready", "checkpoint", "target_reward",
    "cancel", "config_change", "nonfinite", "error"};
static const char *const span_kinds[] = {"decode", "tool", "train_fwd", "train_bwd",
                                         "train_reduce", "train_opt", "weight_sync", "resplit",
                                         "checkpoint"};
static const char *const fates[] = {"trained", "buffered", "in_flight"};
static const char *const statuses[] = {"none", "success", "failure", "timeout"};
/* The names the planner writes (plan_trigger_name, plan_gate_name), in enum order. */
static const char *const planner_triggers[] = {
    "warmup", "cooldown", "interval_skip", "insufficient_history", "interval", "queue_pressure",
    "active_rollout_pressure", "rejected_rollout_delta", "rollout_train_imbalance"};
/* "none" is -1: a pass that ran no search. */
static const char *const planner_verdicts[] = {"none", "apply", "same_plan", "no_gain",
                                               "gain_below_ratio", "not_amortised"};
static const char *const mig_whys[] = {"causal", "tokens", "threshold", "declined_cost",
                                       "declined_limit", "same_tp", "return"};

/*
 * A planner pass: the first four triggers do not plan (no search: verdict -1, the
 * candidate's and the current plan's times NaN, as the controller writes them), the
 * other five search and get a verdict.
 */
static struct metrics_planner_row make_planner(int i)
{
    struct metrics_planner_row r;
    memset(&r, 0x71, sizeof r);
    int t = i % 9;
    bool searched = t >= 4;
    r.step = i + 1;
    r.wall_s = 4.0 * i + 0.375;
    r.trigger = t;
    r.verdict = searched ? i % 5 : -1;
    r.applied = searched && i % 5 == 0;
    r.cand_train = searched ? 4 + i % 5 : 0;
    r.cand_tp = searched ? 1 << (i % 4) : 0;
    r.cand_pp = searched ? 1 + i % 2 : 0;
    r.cand_micro = searched ? 1 << (i % 4) : 0;
    r.cand_idle = searched ? i % 3 : 0;
    if (searched)
        snprintf(r.cand_rollout_tp, sizeof r.cand_rollout_tp, "4x%d,2x%d,1x1", 1 + i % 3, i % 4);
    else
        r.cand_rollout_tp[0] = '\0';
    r.cand_train_s = searched ? 10.0 + 0.5 * i : NAN;
    r.cand_rollout_s = searched ? 12.0 + 0.25 * i : NAN;
    r.cand_step_s = searched ? fmax(r.cand_train_s, r.cand_rollout_s) : NAN;
    r.cur_train_s = searched ? 11.0 + 0.125 * i : NAN;
    r.cur_rollout_s = searched ? 14.0 + 0.0625 * i : NAN;
    r.cur_step_s = searched ? fmax(r.cur_train_s, r.cur_rollout_s) : NAN;
    r.meas_train_s = 10.5 + 0.01 * i;
    r.meas_rollout_s = 13.5 - 0.01 * i;
    r.scale_train = 1.0 + 0.001 * i;
    r.scale_rollout = 0.9 + 0.002 * i;
    r.gain_s = searched ? r.cur_step_s - r.cand_step_s : 0.0;
    r.transition_s = searched ? 3.0 + 0.1 * (i % 7) : 0.0;
    r.horizon = searched ? 5 + i % 3 : 0;
    r.net_s = r.gain_s * r.horizon - r.transition_s;
    r.evaluations = searched ? 6000000000LL + 13LL * i : 0; /* needs 64 bits */
    r.solve_s = searched ? 0.0001 * (i + 1) : 0.0;
    r.history = 32 * i;
    return r;
}

static struct metrics_sched_row make_sched(int i)
{
    struct metrics_sched_row r;
    memset(&r, 0x6B, sizeof r);
    r.step = i + 1;
    r.wall_s = 2.5 * i + 0.75;
    for (int k = 0; k < METRICS_SCHED_N_ROUTES; k++)
        r.routes[k] = 4000000000LL * (k + 1) + i; /* needs 64 bits; a swap shows */
    for (int k = 0; k < METRICS_SCHED_N_VIA; k++) r.via[k] = 100LL * i + 7 * k + 1;
    r.holds = 3LL * i;
    r.migrations = i % 5;
    r.declined = i % 3;
    r.tool_returns = 50LL + i;
    r.finished = 8LL + i % 4;
    r.learned = 8LL + i % 4 - (i % 2);
    r.tree_nodes = 5000000000LL + 11 * i;
    r.tree_prompts = 40LL + i;
    r.tree_leaves = 900LL + 5 * i;
    r.tree_depth = i % 9;
    r.decide_us_mean = 1.25 + 0.5 * i;
    return r;
}

static struct metrics_migration_row make_migration(int i)
{
    struct metrics_migration_row r;
    memset(&r, 0x4D, sizeof r);
    r.wall_s = 0.01 * i + 0.5;
    r.step = 1 + i / 100;
    r.traj_id = 7000000000LL + i;
    r.turn = 1 + i % 6;
    r.from_instance = i % 4;
    r.to_instance = i % 3 == 0 ? i % 4 : (i + 1) % 4;
    r.from_tp = 1 << (i % 3);
    r.to_tp = 1 << ((i + 1) % 3);
    snprintf(r.from_bucket, sizeof r.from_bucket, "b%d_short", i % 3);
    snprintf(r.to_bucket, sizeof r.to_bucket, "b%d_long", (i + 1) % 3);
    r.why = i % 6;
    r.est_remaining = 1000.5 + i;
    r.saving_s = 0.002 * i;
    r.cost_s = 0.001 * (i % 17);
    return r;
}

static struct metrics_instance_row make_instance(int i)
{
    struct metrics_instance_row r;
    memset(&r, 0x1F, sizeof r);
    r.step = 1 + i / 5;
    r.wall_s = 3.0 * (i / 5) + 0.125;
    r.instance = i % 5;
    r.leader = 2 + 4 * (i % 5);
    r.tp = 1 << (i % 3);
    snprintf(r.bucket, sizeof r.bucket, "bucket-%d", i % 3);
    r.queued = i < 5 ? -1 : i % 7;
    r.running = i < 5 ? -1 : i % 11;
    r.turns_in_flight = i % 13;
    r.kv_frac = i < 5 ? -1.0 : 0.01 * (i % 100);
    r.load_frac = 0.005 * (i % 200);
    return r;
}

static void make_event(int i, double *wall_s, int32_t *step, int32_t *kind, char *detail)
{
    *wall_s = 2.0 * i + 0.5;
    *step = i / 2;
    *kind = i % NELEM(event_kinds);
    snprintf(detail, 256, "event %d: ranks 3->%d", i, i % 7);
}

/* Memory types built here from the header's structs, independently of the writer. */
#define INS(t, s, f, ty) H5Tinsert(t, #f, offsetof(struct s, f), ty)

/* A native int32 enum with names[i] = first + i. */
static hid_t enum_mtype(const char *const *names, int n, int first)
{
    hid_t t = H5Tenum_create(H5T_NATIVE_INT32);
    for (int i = 0; i < n; i++) {
        int32_t v = first + i;
        H5Tenum_insert(t, names[i], &v);
    }
    return t;
}
#define ENUM_MTYPE(names, first) enum_mtype(names, NELEM(names), first)
/* Inserts enumerated field f of struct s, names[0] standing for first. */
#define INS_ENUM(t, s, f, names, first)         \
    do {                                        \
        hid_t e_ = ENUM_MTYPE(names, first);    \
        INS(t, s, f, e_);                       \
        H5Tclose(e_);                           \
    } while (0)

static hid_t step_mtype(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct metrics_step_row));
    INS(t, metrics_step_row, step, H5T_NATIVE_INT32);
    INS(t, metrics_step_row, wall_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, step_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, version, H5T_NATIVE_INT32);
    INS(t, metrics_step_row, n_traj, H5T_NATIVE_INT32);
    INS(t, metrics_step_row, tokens_gen, H5T_NATIVE_INT64);
    INS(t, metrics_step_row, tokens_tool, H5T_NATIVE_INT64);
    INS(t, metrics_step_row, reward_mean, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, reward_std, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, staleness_mean, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, staleness_max, H5T_NATIVE_INT32);
    INS(t, metrics_step_row, rollout_busy_frac, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, train_busy_frac, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, n_rollout_ranks, H5T_NATIVE_INT32);
    INS(t, metrics_step_row, n_train_ranks, H5T_NATIVE_INT32);
    INS(t, metrics_step_row, n_hybrid_ranks, H5T_NATIVE_INT32);
    INS(t, metrics_step_row, success_rate, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, gen_tokens_mean, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, turns_mean, H5T_NATIVE_DOUBLE);
    size_t calls = offsetof(struct metrics_step_row, tool_calls);
    size_t fails = offsetof(struct metrics_step_row, tool_failures);
    H5Tinsert(t, "calc_calls", calls, H5T_NATIVE_INT32);
    H5Tinsert(t, "search_calls", calls + sizeof(int32_t), H5T_NATIVE_INT32);
    H5Tinsert(t, "calc_failures", fails, H5T_NATIVE_INT32);
    H5Tinsert(t, "search_failures", fails + sizeof(int32_t), H5T_NATIVE_INT32);
    INS(t, metrics_step_row, zero_var_groups, H5T_NATIVE_INT32);
    INS(t, metrics_step_row, loss, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, pg_loss, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, kl, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, entropy, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, clip_frac, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, is_trunc_frac, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, grad_norm, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, lr, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, params_identical, H5T_NATIVE_INT32);
    INS(t, metrics_step_row, rollout_wait_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, train_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, train_fwd_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, train_bwd_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, train_reduce_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, train_opt_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, gen_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, tool_calls_n, H5T_NATIVE_INT32);
    INS(t, metrics_step_row, tool_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, n_syncs, H5T_NATIVE_INT32);
    INS(t, metrics_step_row, sync_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, sync_bytes, H5T_NATIVE_INT64);
    INS(t, metrics_step_row, resplit_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, ckpt_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, rollout_idle_frac, H5T_NATIVE_DOUBLE);
    INS(t, metrics_step_row, train_idle_frac, H5T_NATIVE_DOUBLE);
    return t;
}

static hid_t span_mtype(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct metrics_span_row));
    INS(t, metrics_span_row, rank, H5T_NATIVE_INT32);
    INS_ENUM(t, metrics_span_row, kind, span_kinds, 0);
    INS(t, metrics_span_row, step, H5T_NATIVE_INT32);
    INS(t, metrics_span_row, t_start, H5T_NATIVE_DOUBLE);
    INS(t, metrics_span_row, t_end, H5T_NATIVE_DOUBLE);
    INS(t, metrics_span_row, count, H5T_NATIVE_INT64);
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, METRICS_SPAN_DETAIL_LEN);
    H5Tinsert(t, "detail", offsetof(struct metrics_span_row, detail), str);
    H5Tclose(str);
    return t;
}

static hid_t eval_mtype(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct metrics_eval_row));
    INS(t, metrics_eval_row, step, H5T_NATIVE_INT32);
    INS(t, metrics_eval_row, version, H5T_NATIVE_INT32);
    INS(t, metrics_eval_row, wall_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_eval_row, n, H5T_NATIVE_INT32);
    INS(t, metrics_eval_row, accuracy, H5T_NATIVE_DOUBLE);
    INS(t, metrics_eval_row, reward_mean, H5T_NATIVE_DOUBLE);
    INS(t, metrics_eval_row, answered_frac, H5T_NATIVE_DOUBLE);
    INS(t, metrics_eval_row, tool_calls_mean, H5T_NATIVE_DOUBLE);
    INS(t, metrics_eval_row, gen_tokens_mean, H5T_NATIVE_DOUBLE);
    return t;
}

static hid_t traj_mtype(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct metrics_traj_row));
    INS(t, metrics_traj_row, traj_id, H5T_NATIVE_INT64);
    INS(t, metrics_traj_row, prompt_id, H5T_NATIVE_INT64);
    INS(t, metrics_traj_row, group_id, H5T_NATIVE_INT64);
    INS(t, metrics_traj_row, step_consumed, H5T_NATIVE_INT32);
    INS_ENUM(t, metrics_traj_row, fate, fates, 0);
    INS(t, metrics_traj_row, version_start, H5T_NATIVE_INT32);
    INS(t, metrics_traj_row, version_end, H5T_NATIVE_INT32);
    INS(t, metrics_traj_row, prompt_tokens, H5T_NATIVE_INT32);
    INS(t, metrics_traj_row, gen_tokens, H5T_NATIVE_INT32);
    INS(t, metrics_traj_row, tool_tokens, H5T_NATIVE_INT32);
    INS(t, metrics_traj_row, turns, H5T_NATIVE_INT32);
    INS(t, metrics_traj_row, tool_failures, H5T_NATIVE_INT32);
    INS(t, metrics_traj_row, migrations, H5T_NATIVE_INT32);
    INS(t, metrics_traj_row, reward, H5T_NATIVE_DOUBLE);
    INS(t, metrics_traj_row, t_start, H5T_NATIVE_DOUBLE);
    INS(t, metrics_traj_row, t_end, H5T_NATIVE_DOUBLE);
    return t;
}

static hid_t str_type(size_t n)
{
    hid_t s = H5Tcopy(H5T_C_S1);
    H5Tset_size(s, n);
    H5Tset_strpad(s, H5T_STR_NULLTERM);
    return s;
}

static hid_t plan_mtype(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct metrics_plan_row));
    hid_t tp = str_type(128), reason = str_type(64);
    INS(t, metrics_plan_row, epoch, H5T_NATIVE_INT32);
    INS(t, metrics_plan_row, step, H5T_NATIVE_INT32);
    INS(t, metrics_plan_row, wall_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_plan_row, n_train, H5T_NATIVE_INT32);
    INS(t, metrics_plan_row, n_rollout, H5T_NATIVE_INT32);
    INS(t, metrics_plan_row, n_hybrid, H5T_NATIVE_INT32);
    INS(t, metrics_plan_row, rollout_tp, tp);
    INS(t, metrics_plan_row, reason, reason);
    INS(t, metrics_plan_row, resplit_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_plan_row, handed_back, H5T_NATIVE_INT32);
    INS(t, metrics_plan_row, train_tp, H5T_NATIVE_INT32);
    INS(t, metrics_plan_row, train_pp, H5T_NATIVE_INT32);
    INS(t, metrics_plan_row, micro, H5T_NATIVE_INT32);
    INS(t, metrics_plan_row, n_idle, H5T_NATIVE_INT32);
    H5Tclose(tp);
    H5Tclose(reason);
    return t;
}

static hid_t planner_mtype(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct metrics_planner_row));
    hid_t tp = str_type(128);
    INS(t, metrics_planner_row, step, H5T_NATIVE_INT32);
    INS(t, metrics_planner_row, wall_s, H5T_NATIVE_DOUBLE);
    INS_ENUM(t, metrics_planner_row, trigger, planner_triggers, 0);
    INS_ENUM(t, metrics_planner_row, verdict, planner_verdicts, -1);
    INS(t, metrics_planner_row, applied, H5T_NATIVE_INT32);
    INS(t, metrics_planner_row, cand_train, H5T_NATIVE_INT32);
    INS(t, metrics_planner_row, cand_tp, H5T_NATIVE_INT32);
    INS(t, metrics_planner_row, cand_pp, H5T_NATIVE_INT32);
    INS(t, metrics_planner_row, cand_micro, H5T_NATIVE_INT32);
    INS(t, metrics_planner_row, cand_idle, H5T_NATIVE_INT32);
    INS(t, metrics_planner_row, cand_rollout_tp, tp);
    INS(t, metrics_planner_row, cand_train_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_planner_row, cand_rollout_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_planner_row, cand_step_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_planner_row, cur_train_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_planner_row, cur_rollout_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_planner_row, cur_step_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_planner_row, meas_train_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_planner_row, meas_rollout_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_planner_row, scale_train, H5T_NATIVE_DOUBLE);
    INS(t, metrics_planner_row, scale_rollout, H5T_NATIVE_DOUBLE);
    INS(t, metrics_planner_row, gain_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_planner_row, transition_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_planner_row, net_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_planner_row, horizon, H5T_NATIVE_INT32);
    INS(t, metrics_planner_row, evaluations, H5T_NATIVE_INT64);
    INS(t, metrics_planner_row, solve_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_planner_row, history, H5T_NATIVE_INT32);
    H5Tclose(tp);
    return t;
}

static const char *const route_cols[] = {
    "route_initial", "route_informed", "route_sticky", "route_migrate", "route_reroute",
    "route_per_turn", "route_history", "route_scout", "route_scout_follow",
    "route_scout_timeout"};
static const char *const via_cols[] = {"via_preferred", "via_fallback", "via_global"};
_Static_assert(sizeof route_cols / sizeof route_cols[0] == METRICS_SCHED_N_ROUTES &&
                   sizeof via_cols / sizeof via_cols[0] == METRICS_SCHED_N_VIA,
               "one column name per element");

static hid_t sched_mtype(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct metrics_sched_row));
    size_t routes = offsetof(struct metrics_sched_row, routes);
    size_t via = offsetof(struct metrics_sched_row, via);
    INS(t, metrics_sched_row, step, H5T_NATIVE_INT32);
    INS(t, metrics_sched_row, wall_s, H5T_NATIVE_DOUBLE);
    for (int k = 0; k < METRICS_SCHED_N_ROUTES; k++)
        H5Tinsert(t, route_cols[k], routes + (size_t)k * sizeof(int64_t), H5T_NATIVE_INT64);
    for (int k = 0; k < METRICS_SCHED_N_VIA; k++)
        H5Tinsert(t, via_cols[k], via + (size_t)k * sizeof(int64_t), H5T_NATIVE_INT64);
    INS(t, metrics_sched_row, holds, H5T_NATIVE_INT64);
    INS(t, metrics_sched_row, migrations, H5T_NATIVE_INT64);
    INS(t, metrics_sched_row, declined, H5T_NATIVE_INT64);
    INS(t, metrics_sched_row, tool_returns, H5T_NATIVE_INT64);
    INS(t, metrics_sched_row, finished, H5T_NATIVE_INT64);
    INS(t, metrics_sched_row, learned, H5T_NATIVE_INT64);
    INS(t, metrics_sched_row, tree_nodes, H5T_NATIVE_INT64);
    INS(t, metrics_sched_row, tree_prompts, H5T_NATIVE_INT64);
    INS(t, metrics_sched_row, tree_leaves, H5T_NATIVE_INT64);
    INS(t, metrics_sched_row, tree_depth, H5T_NATIVE_INT32);
    INS(t, metrics_sched_row, decide_us_mean, H5T_NATIVE_DOUBLE);
    return t;
}

static hid_t migration_mtype(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct metrics_migration_row));
    hid_t b = str_type(METRICS_BUCKET_LEN);
    INS(t, metrics_migration_row, wall_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_migration_row, step, H5T_NATIVE_INT32);
    INS(t, metrics_migration_row, traj_id, H5T_NATIVE_INT64);
    INS(t, metrics_migration_row, turn, H5T_NATIVE_INT32);
    INS(t, metrics_migration_row, from_instance, H5T_NATIVE_INT32);
    INS(t, metrics_migration_row, to_instance, H5T_NATIVE_INT32);
    INS(t, metrics_migration_row, from_tp, H5T_NATIVE_INT32);
    INS(t, metrics_migration_row, to_tp, H5T_NATIVE_INT32);
    INS(t, metrics_migration_row, from_bucket, b);
    INS(t, metrics_migration_row, to_bucket, b);
    INS_ENUM(t, metrics_migration_row, why, mig_whys, 0);
    INS(t, metrics_migration_row, est_remaining, H5T_NATIVE_DOUBLE);
    INS(t, metrics_migration_row, saving_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_migration_row, cost_s, H5T_NATIVE_DOUBLE);
    H5Tclose(b);
    return t;
}

static hid_t instance_mtype(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct metrics_instance_row));
    hid_t b = str_type(METRICS_BUCKET_LEN);
    INS(t, metrics_instance_row, step, H5T_NATIVE_INT32);
    INS(t, metrics_instance_row, wall_s, H5T_NATIVE_DOUBLE);
    INS(t, metrics_instance_row, instance, H5T_NATIVE_INT32);
    INS(t, metrics_instance_row, leader, H5T_NATIVE_INT32);
    INS(t, metrics_instance_row, tp, H5T_NATIVE_INT32);
    INS(t, metrics_instance_row, bucket, b);
    INS(t, metrics_instance_row, queued, H5T_NATIVE_INT32);
    INS(t, metrics_instance_row, running, H5T_NATIVE_INT32);
    INS(t, metrics_instance_row, turns_in_flight, H5T_NATIVE_INT32);
    INS(t, metrics_instance_row, kv_frac, H5T_NATIVE_DOUBLE);
    INS(t, metrics_instance_row, load_frac, H5T_NATIVE_DOUBLE);
    H5Tclose(b);
    return t;
}

struct event_read {
    double wall_s;
    int32_t step;
    int32_t kind;
    char detail[256];
};

static hid_t event_mtype(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(struct event_read));
    hid_t d = str_type(256);
    INS(t, event_read, wall_s, H5T_NATIVE_DOUBLE);
    INS(t, event_read, step, H5T_NATIVE_INT32);
    INS_ENUM(t, event_read, kind, event_kinds, 0);
    INS(t, event_read, detail, d);
    H5Tclose(d);
    return t;
}

/* Reads a whole table (poisoned first, so an unread column shows); NULL if unreadable. */
static void *read_table(hid_t file, const char *name, hid_t mtype, size_t rowsize, size_t *n)
{
    *n = 0;
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    if (d < 0) return NULL;
    hid_t sp = H5Dget_space(d);
    hssize_t rows = H5Sget_simple_extent_npoints(sp);
    void *buf = xmalloc(((size_t)rows + 1) * rowsize);
    memset(buf, 0xEE, ((size_t)rows + 1) * rowsize);
    if (rows > 0 && H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
        free(buf);
        buf = NULL;
    } else {
        *n = (size_t)rows;
    }
    H5Sclose(sp);
    H5Dclose(d);
    return buf;
}

static bool attr_string(hid_t obj, const char *name, char *out, size_t n)
{
    out[0] = '\0';
    if (H5Aexists(obj, name) <= 0) return false;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t ft = H5Aget_type(a);
    hid_t mt = H5Tcopy(H5T_C_S1);
    bool ok = false;
    H5Tset_cset(mt, H5Tget_cset(ft));
    if (H5Tis_variable_str(ft) > 0) {
        char *s = NULL;
        H5Tset_size(mt, H5T_VARIABLE);
        if (H5Aread(a, mt, &s) >= 0 && s) {
            snprintf(out, n, "%s", s);
            H5free_memory(s);
            ok = true;
        }
    }
    H5Tclose(mt);
    H5Tclose(ft);
    H5Aclose(a);
    return ok;
}

static bool attr_num(hid_t obj, const char *name, hid_t mtype, void *out)
{
    if (H5Aexists(obj, name) <= 0) return false;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    bool ok = H5Aread(a, mtype, out) >= 0;
    H5Aclose(a);
    return ok;
}

/* The file's column names, in order, and units.<column> on the dataset. */
static void check_columns(hid_t file, const char *table, const char *const *names,
                          const char *const *units, int n)
{
    hid_t d = H5Dopen2(file, table, H5P_DEFAULT);
    CU_ASSERT_FATAL(d >= 0);
    hid_t t = H5Dget_type(d);
    CU_ASSERT_EQUAL(H5Tget_nmembers(t), n);
    for (int i = 0; i < n && i < H5Tget_nmembers(t); i++) {
        char *m = H5Tget_member_name(t, (unsigned)i);
        CU_ASSERT_STRING_EQUAL(m, names[i]);
        H5free_memory(m);
        char an[128], val[64];
        snprintf(an, sizeof an, "units.%s", names[i]);
        CU_ASSERT(attr_string(d, an, val, sizeof val));
        CU_ASSERT_STRING_EQUAL(val, units[i]);
    }
    char desc[512];
    CU_ASSERT(attr_string(d, "description", desc, sizeof desc));
    CU_ASSERT(strlen(desc) > 20);
    hid_t dcpl = H5Dget_create_plist(d);
    CU_ASSERT_EQUAL(H5Pget_layout(dcpl), H5D_CHUNKED);
    hid_t sp = H5Dget_space(d);
    hsize_t dims, maxdims;
    H5Sget_simple_extent_dims(sp, &dims, &maxdims);
    CU_ASSERT_EQUAL(maxdims, H5S_UNLIMITED);
    H5Sclose(sp);
    H5Pclose(dcpl);
    H5Tclose(t);
    H5Dclose(d);
}

/* ---- round trip ---- */

enum {
    N_STEPS = 300, N_TRAJ = 9000, N_EVENTS = 40, N_PLANS = 12, N_EVALS = 7, N_SCHED = 60,
    N_MIGRATIONS = 5000, N_INSTANCES = 5 * N_SCHED, N_PLANNER = 45, N_SPANS = 5000
};


static const char *const step_names[] = {
    "step", "wall_s", "step_s", "version", "n_traj", "tokens_gen", "tokens_tool", "reward_mean",
    "reward_std", "staleness_mean", "staleness_max", "rollout_busy_frac", "train_busy_frac",
    "n_rollout_ranks", "n_train_ranks", "n_hybrid_ranks", "success_rate", "gen_tokens_mean",
    "turns_mean", "calc_calls", "search_calls", "calc_failures", "search_failures",
    "zero_var_groups", "loss", "pg_loss", "kl", "entropy", "clip_frac", "is_trunc_frac",
    "grad_norm", "lr", "params_identical", "rollout_wait_s", "train_s", "train_fwd_s",
    "train_bwd_s", "train_reduce_s", "train_opt_s", "gen_s", "tool_calls_n", "tool_s",
    "n_syncs", "sync_s", "sync_bytes", "resplit_s", "ckpt_s", "rollout_idle_frac",
    "train_idle_frac"};
static const char *const step_units[] = {
    "1", "s", "s", "1", "trajectories", "tokens", "tokens", "1", "1", "versions", "versions",
    "1", "1", "ranks", "ranks", "ranks", "1", "tokens", "turns", "tool calls", "tool calls",
    "tool calls", "tool calls", "groups", "1", "1", "nats", "nats", "1", "1", "1", "1", "1",
    "s", "s", "s", "s", "s", "s", "s", "tool calls", "s", "syncs", "s", "bytes", "s", "s",
    "1", "1"};
_Static_assert(NELEM(step_names) == 49 && NELEM(step_units) == NELEM(step_names),
               "one unit per /steps column");
static const char *const span_names[] = {"rank", "kind", "step", "t_start", "t_end", "count",
                                         "detail"};
static const char *const span_units[] = {"1", "1", "1", "s", "s", "1", "text"};
static const char *const traj_names[] = {
    "traj_id", "prompt_id", "group_id", "step_consumed", "fate", "version_start", "version_end",
    "prompt_tokens", "gen_tokens", "tool_tokens", "turns", "tool_failures", "migrations",
    "reward", "t_start", "t_end"};
static const char *const traj_units[] = {
    "1", "1", "1", "1", "1", "1", "1", "tokens", "tokens", "tokens", "turns", "tool calls",
    "migrations", "1", "s", "s"};
static const char *const event_names[] = {"wall_s", "step", "kind", "detail"};
static const char *const event_units[] = {"s", "1", "1", "text"};
static const char *const plan_names_full[] = {
    "epoch", "step", "wall_s", "n_train", "n_rollout", "n_hybrid", "rollout_tp", "reason",
    "resplit_s", "handed_back", "train_tp", "train_pp", "micro", "n_idle"};
static const char *const plan_units[] = {"1", "1", "s", "ranks", "ranks", "ranks", "text",
                                         "text", "s", "turns", "1", "1", "sequences", "ranks"};
_Static_assert(NELEM(plan_names_full) == 14 && NELEM(plan_units) == NELEM(plan_names_full),
               "one unit per /plans column");
static const char *const planner_names[] = {
    "step", "wall_s", "trigger", "verdict", "applied", "cand_train", "cand_tp", "cand_pp",
    "cand_micro", "cand_idle", "cand_rollout_tp", "cand_train_s", "cand_rollout_s",
    "cand_step_s", "cur_train_s", "cur_rollout_s", "cur_step_s", "meas_train_s",
    "meas_rollout_s", "scale_train", "scale_rollout", "gain_s", "transition_s", "net_s",
    "horizon", "evaluations", "solve_s", "history"};
static const char *const planner_units[] = {
    "1", "s", "1", "1", "1", "ranks", "1", "1", "sequences", "ranks", "text", "s", "s",
    "s", "s", "s", "s", "s", "s", "1", "1", "s", "s", "s", "steps", "calls", "s",
    "trajectories"};
_Static_assert(NELEM(planner_names) == 28 && NELEM(planner_units) == NELEM(planner_names),
               "one unit per /planner column");
static const char *const eval_names[] = {"step", "version", "wall_s", "n", "accuracy",
                                         "reward_mean", "answered_frac", "tool_calls_mean",
                                         "gen_tokens_mean"};
static const char *const eval_units[] = {"1", "1", "s", "problems", "1", "1", "1",
                                         "tool calls", "tokens"};
_Static_assert(NELEM(eval_names) == 9 && NELEM(eval_units) == NELEM(eval_names),
               "one unit per /eval column");
static const char *const sched_names[] = {
    "step", "wall_s", "route_initial", "route_informed", "route_sticky", "route_migrate",
    "route_reroute", "route_per_turn", "route_history", "route_scout", "route_scout_follow",
    "route_scout_timeout", "via_preferred", "via_fallback", "via_global", "holds",
    "migrations", "declined", "tool_returns", "finished", "learned", "tree_nodes",
    "tree_prompts", "tree_leaves", "tree_depth", "decide_us_mean"};
static const char *const sched_units[] = {
    "1", "s", "decisions", "decisions", "decisions", "decisions", "decisions", "decisions",
    "decisions", "decisions", "decisions", "decisions", "decisions", "decisions", "decisions",
    "decisions", "migrations", "bucket changes", "tool returns", "trajectories",
    "trajectories", "nodes", "prompts", "nodes", "tool returns", "us"};
_Static_assert(NELEM(sched_names) == 26 && NELEM(sched_units) == NELEM(sched_names),
               "one unit per /sched column");
static const char *const migration_names[] = {
    "wall_s", "step", "traj_id", "turn", "from_instance", "to_instance", "from_tp", "to_tp",
    "from_bucket", "to_bucket", "why", "est_remaining", "saving_s", "cost_s"};
static const char *const migration_units[] = {"s", "1", "1", "1", "1", "1", "ranks", "ranks",
                                              "text", "text", "1", "tokens", "s", "s"};
_Static_assert(NELEM(migration_names) == 14 && NELEM(migration_units) == NELEM(migration_names),
               "one unit per /migrations column");
static const char *const instance_names[] = {
    "step", "wall_s", "instance", "leader", "tp", "bucket", "queued", "running",
    "turns_in_flight", "kv_frac", "load_frac"};
static const char *const instance_units[] = {"1", "s", "1", "1", "ranks", "text", "turns",
                                             "turns", "turns", "1", "1"};
_Static_assert(NELEM(instance_names) == 11 && NELEM(instance_units) == NELEM(instance_names),
               "one unit per /instances column");

static void check_steps(hid_t f, size_t expect)
{
    hid_t mt = step_mtype();
    size_t n;
    struct metrics_step_row *rows = read_table(f, "steps", mt, sizeof *rows, &n);
    H5Tclose(mt);
    CU_ASSERT_FATAL(rows != NULL);
    CU_ASSERT_EQUAL(n, expect);
    for (size_t i = 0; i < n && i < expect; i++) {
        struct metrics_step_row e = make_step((int)i), *g = &rows[i];
        CU_ASSERT_EQUAL(g->step, e.step);
        CU_ASSERT_EQUAL(g->wall_s, e.wall_s);
        CU_ASSERT_EQUAL(g->step_s, e.step_s);
        CU_ASSERT_EQUAL(g->version, e.version);
        CU_ASSERT_EQUAL(g->n_traj, e.n_traj);
        CU_ASSERT_EQUAL(g->tokens_gen, e.tokens_gen);
        CU_ASSERT_EQUAL(g->tokens_tool, e.tokens_tool);
        CU_ASSERT_EQUAL(g->reward_mean, e.reward_mean);
        CU_ASSERT_EQUAL(g->reward_std, e.reward_std);
        CU_ASSERT_EQUAL(g->staleness_mean, e.staleness_mean);
        CU_ASSERT_EQUAL(g->staleness_max, e.staleness_max);
        CU_ASSERT_EQUAL(g->rollout_busy_frac, e.rollout_busy_frac);
        CU_ASSERT_EQUAL(g->train_busy_frac, e.train_busy_frac);
        CU_ASSERT_EQUAL(g->n_rollout_ranks, e.n_rollout_ranks);
        CU_ASSERT_EQUAL(g->n_train_ranks, e.n_train_ranks);
        CU_ASSERT_EQUAL(g->n_hybrid_ranks, e.n_hybrid_ranks);
        CU_ASSERT_EQUAL(g->success_rate, e.success_rate);
        CU_ASSERT_EQUAL(g->gen_tokens_mean, e.gen_tokens_mean);
        CU_ASSERT_EQUAL(g->turns_mean, e.turns_mean);
        CU_ASSERT_EQUAL(g->tool_calls[0], e.tool_calls[0]);
        CU_ASSERT_EQUAL(g->tool_calls[1], e.tool_calls[1]);
        CU_ASSERT_EQUAL(g->tool_failures[0], e.tool_failures[0]);
        CU_ASSERT_EQUAL(g->tool_failures[1], e.tool_failures[1]);
        CU_ASSERT_EQUAL(g->zero_var_groups, e.zero_var_groups);
        CU_ASSERT_EQUAL(g->loss, e.loss);
        CU_ASSERT_EQUAL(g->pg_loss, e.pg_loss);
        CU_ASSERT_EQUAL(g->kl, e.kl);
        CU_ASSERT_EQUAL(g->entropy, e.entropy);
        CU_ASSERT_EQUAL(g->clip_frac, e.clip_frac);
        CU_ASSERT_EQUAL(g->is_trunc_frac, e.is_trunc_frac);
        CU_ASSERT_EQUAL(g->grad_norm, e.grad_norm);
        CU_ASSERT_EQUAL(g->lr, e.lr);
        CU_ASSERT_EQUAL(g->params_identical, e.params_identical);
        CU_ASSERT_EQUAL(g->rollout_wait_s, e.rollout_wait_s);
        CU_ASSERT_EQUAL(g->train_s, e.train_s);
        CU_ASSERT_EQUAL(g->train_fwd_s, e.train_fwd_s);
        CU_ASSERT_EQUAL(g->train_bwd_s, e.train_bwd_s);
        CU_ASSERT_EQUAL(g->train_reduce_s, e.train_reduce_s);
        CU_ASSERT_EQUAL(g->train_opt_s, e.train_opt_s);
        CU_ASSERT_EQUAL(g->gen_s, e.gen_s);
        CU_ASSERT_EQUAL(g->tool_calls_n, e.tool_calls_n);
        CU_ASSERT_EQUAL(g->tool_s, e.tool_s);
        CU_ASSERT_EQUAL(g->n_syncs, e.n_syncs);
        CU_ASSERT_EQUAL(g->sync_s, e.sync_s);
        CU_ASSERT_EQUAL(g->sync_bytes, e.sync_bytes);
        CU_ASSERT_EQUAL(g->resplit_s, e.resplit_s);
        CU_ASSERT_EQUAL(g->ckpt_s, e.ckpt_s);
        CU_ASSERT_EQUAL(g->rollout_idle_frac, e.rollout_idle_frac);
        CU_ASSERT_EQUAL(g->train_idle_frac, e.train_idle_frac);
    }
    free(rows);
}

static struct metrics_span_row make_span(int i)
{
    struct metrics_span_row r;
    memset(&r, 0xA5, sizeof r);
    r.rank = i % 7;
    r.kind = i % SPAN_KIND_COUNT;
    r.step = 1 + i / 10;
    r.t_start = 0.5 * i;
    r.t_end = 0.5 * i + 0.25;
    r.count = 5000000000LL + i; /* needs 64 bits */
    snprintf(r.detail, sizeof r.detail, "span %d", i);
    return r;
}

static void check_spans(hid_t f, size_t expect)
{
    hid_t mt = span_mtype();
    size_t n;
    struct metrics_span_row *rows = read_table(f, "spans", mt, sizeof *rows, &n);
    H5Tclose(mt);
    CU_ASSERT_FATAL(rows != NULL);
    CU_ASSERT_EQUAL(n, expect);
    for (size_t i = 0; i < n && i < expect; i++) {
        struct metrics_span_row e = make_span((int)i), *g = &rows[i];
        CU_ASSERT_EQUAL(g->rank, e.rank);
        CU_ASSERT_EQUAL(g->kind, e.kind);
        CU_ASSERT_EQUAL(g->step, e.step);
        CU_ASSERT_EQUAL(g->t_start, e.t_start);
        CU_ASSERT_EQUAL(g->t_end, e.t_end);
        CU_ASSERT_EQUAL(g->count, e.count);
        CU_ASSERT_STRING_EQUAL(g->detail, e.detail);
    }
    free(rows);
}

/*
 * The per-tool columns one by one, as h5py/pandas users read them: each name is a plain
 * int32 column holding the right element of the struct's array (a swap shows).
 */
static void check_tool_columns(hid_t f, size_t expect)
{
    static const char *const names[] = {"calc_calls", "search_calls", "calc_failures",
                                        "search_failures"};
    for (int c = 0; c < NELEM(names); c++) {
        hid_t mt = H5Tcreate(H5T_COMPOUND, sizeof(int32_t));
        H5Tinsert(mt, names[c], 0, H5T_NATIVE_INT32);
        size_t n;
        int32_t *col = read_table(f, "steps", mt, sizeof *col, &n);
        H5Tclose(mt);
        CU_ASSERT_FATAL(col != NULL);
        CU_ASSERT_EQUAL(n, expect);
        for (size_t i = 0; i < n && i < expect; i++) {
            struct metrics_step_row e = make_step((int)i);
            int32_t want = c < 2 ? e.tool_calls[c] : e.tool_failures[c - 2];
            CU_ASSERT_EQUAL(col[i], want);
        }
        free(col);
    }
    /* The file type: four scalar <i4 members, no array member. */
    hid_t d = H5Dopen2(f, "steps", H5P_DEFAULT);
    hid_t t = H5Dget_type(d);
    for (int c = 0; c < NELEM(names); c++) {
        int idx = H5Tget_member_index(t, names[c]);
        CU_ASSERT_FATAL(idx >= 0);
        hid_t mt = H5Tget_member_type(t, (unsigned)idx);
        CU_ASSERT_EQUAL(H5Tget_class(mt), H5T_INTEGER);
        CU_ASSERT_EQUAL(H5Tget_size(mt), 4);
        H5Tclose(mt);
    }
    CU_ASSERT(H5Tget_member_index(t, "tool_calls") < 0);
    H5Tclose(t);
    H5Dclose(d);
}

static void check_sched(hid_t f, size_t expect)
{
    hid_t mt = sched_mtype();
    size_t n;
    struct metrics_sched_row *rows = read_table(f, "sched", mt, sizeof *rows, &n);
    H5Tclose(mt);
    CU_ASSERT_FATAL(rows != NULL);
    CU_ASSERT_EQUAL(n, expect);
    for (size_t i = 0; i < n && i < expect; i++) {
        struct metrics_sched_row e = make_sched((int)i), *g = &rows[i];
        CU_ASSERT_EQUAL(g->step, e.step);
        CU_ASSERT_EQUAL(g->wall_s, e.wall_s);
        for (int k = 0; k < METRICS_SCHED_N_ROUTES; k++)
            CU_ASSERT_EQUAL(g->routes[k], e.routes[k]);
        for (int k = 0; k < METRICS_SCHED_N_VIA; k++) CU_ASSERT_EQUAL(g->via[k], e.via[k]);
        CU_ASSERT_EQUAL(g->holds, e.holds);
        CU_ASSERT_EQUAL(g->migrations, e.migrations);
        CU_ASSERT_EQUAL(g->declined, e.declined);
        CU_ASSERT_EQUAL(g->tool_returns, e.tool_returns);
        CU_ASSERT_EQUAL(g->finished, e.finished);
        CU_ASSERT_EQUAL(g->learned, e.learned);
        CU_ASSERT_EQUAL(g->tree_nodes, e.tree_nodes);
        CU_ASSERT_EQUAL(g->tree_prompts, e.tree_prompts);
        CU_ASSERT_EQUAL(g->tree_leaves, e.tree_leaves);
        CU_ASSERT_EQUAL(g->tree_depth, e.tree_depth);
        CU_ASSERT_EQUAL(g->decide_us_mean, e.decide_us_mean);
    }
    free(rows);
}

/*
 * The route_* and via_* columns one by one, as h5py/pandas users read them: each is a
 * plain <i8 column holding its element of routes[] / via[] (enum order; a swap shows).
 */
static void check_sched_columns(hid_t f, size_t expect)
{
    for (int c = 0; c < METRICS_SCHED_N_ROUTES + METRICS_SCHED_N_VIA; c++) {
        bool is_route = c < METRICS_SCHED_N_ROUTES;
        int k = is_route ? c : c - METRICS_SCHED_N_ROUTES;
        const char *name = is_route ? route_cols[k] : via_cols[k];
        hid_t mt = H5Tcreate(H5T_COMPOUND, sizeof(int64_t));
        H5Tinsert(mt, name, 0, H5T_NATIVE_INT64);
        size_t n;
        int64_t *col = read_table(f, "sched", mt, sizeof *col, &n);
        H5Tclose(mt);
        CU_ASSERT_FATAL(col != NULL);
        CU_ASSERT_EQUAL(n, expect);
        for (size_t i = 0; i < n && i < expect; i++) {
            struct metrics_sched_row e = make_sched((int)i);
            CU_ASSERT_EQUAL(col[i], is_route ? e.routes[k] : e.via[k]);
        }
        free(col);
    }
    hid_t d = H5Dopen2(f, "sched", H5P_DEFAULT);
    hid_t t = H5Dget_type(d);
    for (int c = 0; c < METRICS_SCHED_N_ROUTES; c++) {
        int idx = H5Tget_member_index(t, route_cols[c]);
        CU_ASSERT_FATAL(idx >= 0);
        hid_t mt = H5Tget_member_type(t, (unsigned)idx);
        CU_ASSERT_EQUAL(H5Tget_class(mt), H5T_INTEGER);
        CU_ASSERT_EQUAL(H5Tget_size(mt), 8);
        H5Tclose(mt);
    }
    CU_ASSERT(H5Tget_member_index(t, "routes") < 0);
    CU_ASSERT(H5Tget_member_index(t, "via") < 0);
    H5Tclose(t);
    H5Dclose(d);
}

static void check_migrations(hid_t f, size_t expect)
{
    hid_t mt = migration_mtype();
    size_t n;
    struct metrics_migration_row *rows = read_table(f, "migrations", mt, sizeof *rows, &n);
    H5Tclose(mt);
    CU_ASSERT_FATAL(rows != NULL);
    CU_ASSERT_EQUAL(n, expect);
    for (size_t i = 0; i < n && i < expect; i++) {
        struct metrics_migration_row e = make_migration((int)i), *g = &rows[i];
        CU_ASSERT_EQUAL(g->wall_s, e.wall_s);
        CU_ASSERT_EQUAL(g->step, e.step);
        CU_ASSERT_EQUAL(g->traj_id, e.traj_id);
        CU_ASSERT_EQUAL(g->turn, e.turn);
        CU_ASSERT_EQUAL(g->from_instance, e.from_instance);
        CU_ASSERT_EQUAL(g->to_instance, e.to_instance);
        CU_ASSERT_EQUAL(g->from_tp, e.from_tp);
        CU_ASSERT_EQUAL(g->to_tp, e.to_tp);
        CU_ASSERT_STRING_EQUAL(g->from_bucket, e.from_bucket);
        CU_ASSERT_STRING_EQUAL(g->to_bucket, e.to_bucket);
        CU_ASSERT_EQUAL(g->why, e.why);
        CU_ASSERT_EQUAL(g->est_remaining, e.est_remaining);
        CU_ASSERT_EQUAL(g->saving_s, e.saving_s);
        CU_ASSERT_EQUAL(g->cost_s, e.cost_s);
    }
    free(rows);
}

static void check_instances(hid_t f, size_t expect)
{
    hid_t mt = instance_mtype();
    size_t n;
    struct metrics_instance_row *rows = read_table(f, "instances", mt, sizeof *rows, &n);
    H5Tclose(mt);
    CU_ASSERT_FATAL(rows != NULL);
    CU_ASSERT_EQUAL(n, expect);
    for (size_t i = 0; i < n && i < expect; i++) {
        struct metrics_instance_row e = make_instance((int)i), *g = &rows[i];
        CU_ASSERT_EQUAL(g->step, e.step);
        CU_ASSERT_EQUAL(g->wall_s, e.wall_s);
        CU_ASSERT_EQUAL(g->instance, e.instance);
        CU_ASSERT_EQUAL(g->leader, e.leader);
        CU_ASSERT_EQUAL(g->tp, e.tp);
        CU_ASSERT_STRING_EQUAL(g->bucket, e.bucket);
        CU_ASSERT_EQUAL(g->queued, e.queued);
        CU_ASSERT_EQUAL(g->running, e.running);
        CU_ASSERT_EQUAL(g->turns_in_flight, e.turns_in_flight);
        CU_ASSERT_EQUAL(g->kv_frac, e.kv_frac);
        CU_ASSERT_EQUAL(g->load_frac, e.load_frac);
    }
    free(rows);
}

static void check_evals(hid_t f, size_t expect)
{
    hid_t mt = eval_mtype();
    size_t n;
    struct metrics_eval_row *rows = read_table(f, "eval", mt, sizeof *rows, &n);
    H5Tclose(mt);
    CU_ASSERT_FATAL(rows != NULL);
    CU_ASSERT_EQUAL(n, expect);
    for (size_t i = 0; i < n && i < expect; i++) {
        struct metrics_eval_row e = make_eval((int)i), *g = &rows[i];
        CU_ASSERT_EQUAL(g->step, e.step);
        CU_ASSERT_EQUAL(g->version, e.version);
        CU_ASSERT_EQUAL(g->wall_s, e.wall_s);
        CU_ASSERT_EQUAL(g->n, e.n);
        CU_ASSERT_EQUAL(g->accuracy, e.accuracy);
        CU_ASSERT_EQUAL(g->reward_mean, e.reward_mean);
        CU_ASSERT_EQUAL(g->answered_frac, e.answered_frac);
        CU_ASSERT_EQUAL(g->tool_calls_mean, e.tool_calls_mean);
        CU_ASSERT_EQUAL(g->gen_tokens_mean, e.gen_tokens_mean);
    }
    free(rows);
}

static void check_trajs(hid_t f, size_t expect)
{
    hid_t mt = traj_mtype();
    size_t n;
    struct metrics_traj_row *rows = read_table(f, "trajectories", mt, sizeof *rows, &n);
    H5Tclose(mt);
    CU_ASSERT_FATAL(rows != NULL);
    CU_ASSERT_EQUAL(n, expect);
    for (size_t i = 0; i < n && i < expect; i++) {
        struct metrics_traj_row e = make_traj((int)i), *g = &rows[i];
        CU_ASSERT_EQUAL(g->traj_id, e.traj_id);
        CU_ASSERT_EQUAL(g->prompt_id, e.prompt_id);
        CU_ASSERT_EQUAL(g->group_id, e.group_id);
        CU_ASSERT_EQUAL(g->step_consumed, e.step_consumed);
        CU_ASSERT_EQUAL(g->fate, e.fate);
        CU_ASSERT_EQUAL(g->version_start, e.version_start);
        CU_ASSERT_EQUAL(g->version_end, e.version_end);
        CU_ASSERT_EQUAL(g->prompt_tokens, e.prompt_tokens);
        CU_ASSERT_EQUAL(g->gen_tokens, e.gen_tokens);
        CU_ASSERT_EQUAL(g->tool_tokens, e.tool_tokens);
        CU_ASSERT_EQUAL(g->turns, e.turns);
        CU_ASSERT_EQUAL(g->tool_failures, e.tool_failures);
        CU_ASSERT_EQUAL(g->migrations, e.migrations);
        CU_ASSERT_EQUAL(g->reward, e.reward);
        CU_ASSERT_EQUAL(g->t_start, e.t_start);
        CU_ASSERT_EQUAL(g->t_end, e.t_end);
    }
    free(rows);
}

/*
 * Column col of table is an HDF5 enum over a 4-byte little-endian integer whose
 * members are exactly names[i] = first + i, in that order (what h5dump prints and h5py
 * reads into the dtype).
 */
static void check_enum_column(hid_t f, const char *table, const char *col,
                              const char *const *names, int n, int first)
{
    hid_t d = H5Dopen2(f, table, H5P_DEFAULT);
    CU_ASSERT_FATAL(d >= 0);
    hid_t t = H5Dget_type(d);
    int idx = H5Tget_member_index(t, col);
    CU_ASSERT_FATAL(idx >= 0);
    hid_t et = H5Tget_member_type(t, (unsigned)idx);
    CU_ASSERT_EQUAL(H5Tget_class(et), H5T_ENUM);
    CU_ASSERT_EQUAL(H5Tget_size(et), 4);
    CU_ASSERT_EQUAL(H5Tget_order(et), H5T_ORDER_LE);
    CU_ASSERT_EQUAL(H5Tget_nmembers(et), n);
    for (int i = 0; i < n && H5Tget_class(et) == H5T_ENUM; i++) {
        char *name = H5Tget_member_name(et, (unsigned)i);
        int32_t v = 0;
        H5Tget_member_value(et, (unsigned)i, &v);
        CU_ASSERT_STRING_EQUAL(name ? name : "", names[i]);
        CU_ASSERT_EQUAL(v, first + i);
        H5free_memory(name);
    }
    H5Tclose(et);
    H5Tclose(t);
    H5Dclose(d);
}

static void check_events(hid_t f, size_t expect)
{
    hid_t mt = event_mtype();
    size_t n;
    struct event_read *rows = read_table(f, "events", mt, sizeof *rows, &n);
    H5Tclose(mt);
    CU_ASSERT_FATAL(rows != NULL);
    CU_ASSERT_EQUAL(n, expect);
    for (size_t i = 0; i < n && i < expect; i++) {
        double w;
        int32_t s, kind;
        char detail[256];
        make_event((int)i, &w, &s, &kind, detail);
        CU_ASSERT_EQUAL(rows[i].wall_s, w);
        CU_ASSERT_EQUAL(rows[i].step, s);
        CU_ASSERT_EQUAL(rows[i].kind, kind);
        CU_ASSERT_STRING_EQUAL(rows[i].detail, detail);
    }
    free(rows);
}

static void check_plans(hid_t f, size_t expect)
{
    hid_t mt = plan_mtype();
    size_t n;
    struct metrics_plan_row *rows = read_table(f, "plans", mt, sizeof *rows, &n);
    H5Tclose(mt);
    CU_ASSERT_FATAL(rows != NULL);
    CU_ASSERT_EQUAL(n, expect);
    for (size_t i = 0; i < n && i < expect; i++) {
        struct metrics_plan_row e = make_plan((int)i), *g = &rows[i];
        CU_ASSERT_EQUAL(g->epoch, e.epoch);
        CU_ASSERT_EQUAL(g->step, e.step);
        CU_ASSERT_EQUAL(g->wall_s, e.wall_s);
        CU_ASSERT_EQUAL(g->n_train, e.n_train);
        CU_ASSERT_EQUAL(g->n_rollout, e.n_rollout);
        CU_ASSERT_EQUAL(g->n_hybrid, e.n_hybrid);
        CU_ASSERT_STRING_EQUAL(g->rollout_tp, e.rollout_tp);
        CU_ASSERT_STRING_EQUAL(g->reason, e.reason);
        CU_ASSERT_EQUAL(g->resplit_s, e.resplit_s);
        CU_ASSERT_EQUAL(g->handed_back, e.handed_back);
        CU_ASSERT_EQUAL(g->train_tp, e.train_tp);
        CU_ASSERT_EQUAL(g->train_pp, e.train_pp);
        CU_ASSERT_EQUAL(g->micro, e.micro);
        CU_ASSERT_EQUAL(g->n_idle, e.n_idle);
    }
    free(rows);
}

/* Equal, or both NaN (a pass without a search stores NaN times). */
static bool same_f64(double a, double b)
{
    return (isnan(a) && isnan(b)) || a == b;
}

static void check_planner(hid_t f, size_t expect)
{
    hid_t mt = planner_mtype();
    size_t n;
    struct metrics_planner_row *rows = read_table(f, "planner", mt, sizeof *rows, &n);
    H5Tclose(mt);
    CU_ASSERT_FATAL(rows != NULL);
    CU_ASSERT_EQUAL(n, expect);
    for (size_t i = 0; i < n && i < expect; i++) {
        struct metrics_planner_row e = make_planner((int)i), *g = &rows[i];
        CU_ASSERT_EQUAL(g->step, e.step);
        CU_ASSERT_EQUAL(g->wall_s, e.wall_s);
        CU_ASSERT_EQUAL(g->trigger, e.trigger);
        CU_ASSERT_EQUAL(g->verdict, e.verdict);
        CU_ASSERT_EQUAL(g->applied, e.applied);
        CU_ASSERT_EQUAL(g->cand_train, e.cand_train);
        CU_ASSERT_EQUAL(g->cand_tp, e.cand_tp);
        CU_ASSERT_EQUAL(g->cand_pp, e.cand_pp);
        CU_ASSERT_EQUAL(g->cand_micro, e.cand_micro);
        CU_ASSERT_EQUAL(g->cand_idle, e.cand_idle);
        CU_ASSERT_STRING_EQUAL(g->cand_rollout_tp, e.cand_rollout_tp);
        CU_ASSERT(same_f64(g->cand_train_s, e.cand_train_s));
        CU_ASSERT(same_f64(g->cand_rollout_s, e.cand_rollout_s));
        CU_ASSERT(same_f64(g->cand_step_s, e.cand_step_s));
        CU_ASSERT(same_f64(g->cur_train_s, e.cur_train_s));
        CU_ASSERT(same_f64(g->cur_rollout_s, e.cur_rollout_s));
        CU_ASSERT(same_f64(g->cur_step_s, e.cur_step_s));
        CU_ASSERT_EQUAL(g->meas_train_s, e.meas_train_s);
        CU_ASSERT_EQUAL(g->meas_rollout_s, e.meas_rollout_s);
        CU_ASSERT_EQUAL(g->scale_train, e.scale_train);
        CU_ASSERT_EQUAL(g->scale_rollout, e.scale_rollout);
        CU_ASSERT_EQUAL(g->gain_s, e.gain_s);
        CU_ASSERT_EQUAL(g->transition_s, e.transition_s);
        CU_ASSERT_EQUAL(g->net_s, e.net_s);
        CU_ASSERT_EQUAL(g->horizon, e.horizon);
        CU_ASSERT_EQUAL(g->evaluations, e.evaluations);
        CU_ASSERT_EQUAL(g->solve_s, e.solve_s);
        CU_ASSERT_EQUAL(g->history, e.history);
    }
    free(rows);
}

/* A config text larger than the 64 KiB object-header limit for compact attributes. */
static char *big_config(void)
{
    size_t n = 100000;
    char *s = xmalloc(n + 1);
    size_t off = 0;
    for (int i = 0; off + 64 < n; i++)
        off += (size_t)snprintf(s + off, n - off, "key_%d = %d; # comment line\n", i, i * 7);
    s[off] = '\0';
    return s;
}

static void test_round_trip(void)
{
    const char *path = scratch("roundtrip.h5");
    char err[512] = "";
    char *config = big_config();
    struct metrics *m = metrics_open(path, config, 9, "emulated-h100", err, sizeof err);
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT_STRING_EQUAL(metrics_path(m), path);

    /* Half the rows, flush (a partial trajectory chunk on disk), then the rest, some of
     * which only reach the file at close. */
    for (int i = 0; i < N_STEPS / 2; i++) {
        struct metrics_step_row r = make_step(i);
        CU_ASSERT_EQUAL(metrics_step(m, &r), 0);
    }
    for (int i = 0; i < 1000; i++) {
        struct metrics_traj_row r = make_traj(i);
        CU_ASSERT_EQUAL(metrics_traj(m, &r), 0);
    }
    for (int i = 0; i < N_EVALS / 2; i++) {
        struct metrics_eval_row r = make_eval(i);
        CU_ASSERT_EQUAL(metrics_eval(m, &r), 0);
    }
    for (int i = 0; i < N_SCHED / 2; i++) {
        struct metrics_sched_row r = make_sched(i);
        CU_ASSERT_EQUAL(metrics_sched(m, &r), 0);
    }
    for (int i = 0; i < N_MIGRATIONS / 2; i++) {
        struct metrics_migration_row r = make_migration(i);
        CU_ASSERT_EQUAL(metrics_migration(m, &r), 0);
    }
    for (int i = 0; i < N_INSTANCES / 2; i++) {
        struct metrics_instance_row r = make_instance(i);
        CU_ASSERT_EQUAL(metrics_instance(m, &r), 0);
    }
    for (int i = 0; i < N_PLANNER / 2; i++) {
        struct metrics_planner_row r = make_planner(i);
        CU_ASSERT_EQUAL(metrics_planner(m, &r), 0);
    }
    CU_ASSERT_EQUAL(metrics_flush(m), 0);
    for (int i = N_PLANNER / 2; i < N_PLANNER; i++) {
        struct metrics_planner_row r = make_planner(i);
        CU_ASSERT_EQUAL(metrics_planner(m, &r), 0);
    }
    for (int i = N_SCHED / 2; i < N_SCHED; i++) {
        struct metrics_sched_row r = make_sched(i);
        CU_ASSERT_EQUAL(metrics_sched(m, &r), 0);
    }
    for (int i = N_MIGRATIONS / 2; i < N_MIGRATIONS; i++) {
        struct metrics_migration_row r = make_migration(i);
        CU_ASSERT_EQUAL(metrics_migration(m, &r), 0);
    }
    for (int i = N_INSTANCES / 2; i < N_INSTANCES; i++) {
        struct metrics_instance_row r = make_instance(i);
        CU_ASSERT_EQUAL(metrics_instance(m, &r), 0);
    }
    for (int i = N_EVALS / 2; i < N_EVALS; i++) {
        struct metrics_eval_row r = make_eval(i);
        CU_ASSERT_EQUAL(metrics_eval(m, &r), 0);
    }
    for (int i = N_STEPS / 2; i < N_STEPS; i++) {
        struct metrics_step_row r = make_step(i);
        CU_ASSERT_EQUAL(metrics_step(m, &r), 0);
    }
    for (int i = 1000; i < N_TRAJ; i++) {
        struct metrics_traj_row r = make_traj(i);
        CU_ASSERT_EQUAL(metrics_traj(m, &r), 0);
    }
    for (int i = 0; i < N_EVENTS; i++) {
        double w;
        int32_t s, kind;
        char detail[256];
        make_event(i, &w, &s, &kind, detail);
        CU_ASSERT_EQUAL(metrics_event(m, w, s, (enum metrics_event_kind)kind, detail), 0);
    }
    for (int i = 0; i < N_PLANS; i++) {
        struct metrics_plan_row r = make_plan(i);
        CU_ASSERT_EQUAL(metrics_plan(m, &r), 0);
    }
    for (int i = 0; i < N_SPANS; i++) {
        struct metrics_span_row r = make_span(i);
        CU_ASSERT_EQUAL(metrics_span(m, &r), 0);
    }
    CU_ASSERT_EQUAL(metrics_attr_int(m, "steps_requested", N_STEPS), 0);
    CU_ASSERT_EQUAL(metrics_attr_double(m, "throughput", 1.25), 0);
    CU_ASSERT_EQUAL(metrics_attr_string(m, "note", "first"), 0);
    CU_ASSERT_EQUAL(metrics_attr_int(m, "steps_requested", 2 * N_STEPS), 0); /* overwrite */
    CU_ASSERT_EQUAL(metrics_attr_string(m, "note", "second, longer value"), 0);
    CU_ASSERT_EQUAL(metrics_close(m, "complete"), 0);

    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    check_columns(f, "steps", step_names, step_units, NELEM(step_names));
    check_columns(f, "trajectories", traj_names, traj_units, 16);
    check_columns(f, "events", event_names, event_units, 4);
    check_columns(f, "plans", plan_names_full, plan_units, NELEM(plan_names_full));
    check_columns(f, "planner", planner_names, planner_units, NELEM(planner_names));
    check_columns(f, "eval", eval_names, eval_units, NELEM(eval_names));
    check_columns(f, "sched", sched_names, sched_units, NELEM(sched_names));
    check_columns(f, "migrations", migration_names, migration_units, NELEM(migration_names));
    check_columns(f, "instances", instance_names, instance_units, NELEM(instance_names));
    check_columns(f, "spans", span_names, span_units, NELEM(span_names));
    check_steps(f, N_STEPS);
    check_spans(f, N_SPANS);
    check_trajs(f, N_TRAJ);
    check_events(f, N_EVENTS);
    check_plans(f, N_PLANS);
    check_tool_columns(f, N_STEPS);
    check_evals(f, N_EVALS);
    check_sched(f, N_SCHED);
    check_sched_columns(f, N_SCHED);
    check_migrations(f, N_MIGRATIONS);
    check_instances(f, N_INSTANCES);
    check_planner(f, N_PLANNER);

    check_enum_column(f, "events", "kind", event_kinds, NELEM(event_kinds), 0);
    check_enum_column(f, "spans", "kind", span_kinds, NELEM(span_kinds), 0);
    check_enum_column(f, "trajectories", "fate", fates, NELEM(fates), 0);
    check_enum_column(f, "planner", "trigger", planner_triggers, NELEM(planner_triggers), 0);
    check_enum_column(f, "planner", "verdict", planner_verdicts, NELEM(planner_verdicts), -1);
    check_enum_column(f, "migrations", "why", mig_whys, NELEM(mig_whys), 0);

    hid_t d = H5Dopen2(f, "trajectories", H5P_DEFAULT);
    hid_t dcpl = H5Dget_create_plist(d);
    hsize_t chunk = 0;
    H5Pget_chunk(dcpl, 1, &chunk);
    CU_ASSERT(chunk > 0 && N_TRAJ > 2 * chunk); /* the table spans several chunks */
    H5Pclose(dcpl);
    H5Dclose(d);

    char s[128];
    int64_t v = 0;
    double x = 0;
    char *cfg = xcalloc(200000, 1);
    CU_ASSERT(attr_string(f, "config", cfg, 200000));
    CU_ASSERT_STRING_EQUAL(cfg, config);
    free(cfg);
    CU_ASSERT(attr_string(f, "status", s, sizeof s));
    CU_ASSERT_STRING_EQUAL(s, "complete");
    CU_ASSERT(attr_string(f, "device_type", s, sizeof s));
    CU_ASSERT_STRING_EQUAL(s, "emulated-h100");
    CU_ASSERT(attr_string(f, "libra_version", s, sizeof s));
    CU_ASSERT(strlen(s) >= 5 && strchr(s, '.') != NULL);
    CU_ASSERT(attr_string(f, "created", s, sizeof s));
    CU_ASSERT(strlen(s) == 20 && s[4] == '-' && s[10] == 'T' && s[19] == 'Z');
    CU_ASSERT(attr_num(f, "world_size", H5T_NATIVE_INT64, &v));
    CU_ASSERT_EQUAL(v, 9);
    CU_ASSERT(attr_num(f, "schema_version", H5T_NATIVE_INT64, &v));
    CU_ASSERT_EQUAL(v, 7);
    CU_ASSERT(attr_num(f, "steps_requested", H5T_NATIVE_INT64, &v));
    CU_ASSERT_EQUAL(v, 2 * N_STEPS);
    CU_ASSERT(attr_num(f, "throughput", H5T_NATIVE_DOUBLE, &x));
    CU_ASSERT_EQUAL(x, 1.25);
    CU_ASSERT(attr_string(f, "note", s, sizeof s));
    CU_ASSERT_STRING_EQUAL(s, "second, longer value");
    CU_ASSERT_EQUAL(H5Fget_obj_count(f, H5F_OBJ_ALL), 1); /* only the file: nothing leaked */
    /* tables are stored shuffled and deflated (when this HDF5 has zlib) */
    if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) {
        hid_t d = H5Dopen2(f, "steps", H5P_DEFAULT), pl = H5Dget_create_plist(d);
        int nf = H5Pget_nfilters(pl), shuffle = 0, deflate = 0;
        for (int i = 0; i < nf; i++) {
            unsigned flags, cd[4];
            size_t ncd = 4;
            H5Z_filter_t id = H5Pget_filter2(pl, (unsigned)i, &flags, &ncd, cd, 0, NULL, NULL);
            shuffle |= id == H5Z_FILTER_SHUFFLE;
            deflate |= id == H5Z_FILTER_DEFLATE;
        }
        CU_ASSERT(shuffle && deflate);
        H5Pclose(pl);
        H5Dclose(d);
    }
    H5Fclose(f);
    free(config);
}

/* Every vocabulary names exactly the values the document lists, the owners' name
 * functions agree, and names map back to values. */
static void test_enum_names(void)
{
    static const struct {
        enum metrics_vocab v;
        const char *const *names;
        int n, first;
    } want[] = {
        {MV_EVENT, event_kinds, NELEM(event_kinds), 0},
        {MV_SPAN, span_kinds, NELEM(span_kinds), 0},
        {MV_FATE, fates, NELEM(fates), 0},
        {MV_STATUS, statuses, NELEM(statuses), 0},
        {MV_TRIGGER, planner_triggers, NELEM(planner_triggers), 0},
        {MV_VERDICT, planner_verdicts, NELEM(planner_verdicts), -1},
        {MV_MIG_WHY, mig_whys, NELEM(mig_whys), 0},
    };
    CU_ASSERT_EQUAL(NELEM(want), MV_COUNT);
    for (int k = 0; k < NELEM(want); k++) {
        int first, n;
        metrics_enum_range(want[k].v, &first, &n);
        CU_ASSERT_EQUAL(first, want[k].first);
        CU_ASSERT_EQUAL(n, want[k].n);
        for (int i = 0; i < want[k].n; i++) {
            const char *got = metrics_enum_name(want[k].v, first + i);
            CU_ASSERT_STRING_EQUAL(got ? got : "(null)", want[k].names[i]);
            CU_ASSERT_EQUAL(metrics_enum_value(want[k].v, want[k].names[i]), first + i);
        }
        CU_ASSERT_PTR_NULL(metrics_enum_name(want[k].v, first - 1));
        CU_ASSERT_PTR_NULL(metrics_enum_name(want[k].v, first + n));
        CU_ASSERT_EQUAL(metrics_enum_value(want[k].v, "no such name"), first - 1);
        CU_ASSERT_EQUAL(metrics_enum_value(want[k].v, NULL), first - 1);
    }
    CU_ASSERT_PTR_NULL(metrics_enum_name(MV_COUNT, 0));
    for (int t = 0; t < PT_N_KINDS; t++)
        CU_ASSERT_STRING_EQUAL(plan_trigger_name((enum plan_trigger_kind)t), planner_triggers[t]);
    CU_ASSERT_STRING_EQUAL(plan_trigger_name(PT_N_KINDS), "unknown");
    for (int v = GATE_APPLY; v <= GATE_NOT_AMORTISED; v++)
        CU_ASSERT_STRING_EQUAL(plan_gate_name((enum gate_verdict)v), planner_verdicts[v + 1]);
    CU_ASSERT_STRING_EQUAL(plan_gate_name((enum gate_verdict)-1), "unknown");
    CU_ASSERT_EQUAL(SCHED_MIG_COUNT, NELEM(mig_whys));
    CU_ASSERT_STRING_EQUAL(metrics_enum_name(MV_MIG_WHY, SCHED_MIG_DECLINED_LIMIT),
                           "declined_limit");
}

/* /turns: every column back as written (numbers through h5_read_column_f64, the tool
 * name through h5_read_column_str), names and units as documented. */
static void test_turns_table(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/turns.h5", scratch(""));
    char err[1024];
    struct metrics *m = metrics_open(path, "test", 9, "emu", err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    enum { N = 5000 }; /* more than one chunk */
    for (int i = 0; i < N; i++) {
        struct metrics_turn_row r = {.traj_id = i / 3, .turn = i % 3, .gen_tokens = 10 + i,
                                     .final = i % 3 == 2, .status = i % 3 == 2 ? 0 : 1 + i % 3,
                                     .payload_tokens = i % 3 == 2 ? 0 : i % 97,
                                     .tool_latency_s = 0.25 * (i % 5), .wall_s = 0.5 * i};
        if (!r.final) snprintf(r.tool, sizeof r.tool, "tool-%d", i % 7);
        CU_ASSERT_EQUAL(metrics_turn(m, &r), 0);
    }
    CU_ASSERT_EQUAL(metrics_close(m, "complete"), 0);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    static const char *const names[] = {"traj_id", "turn", "gen_tokens", "final", "tool",
                                        "status", "payload_tokens", "tool_latency_s", "wall_s"};
    static const char *const units[] = {"1", "1", "tokens", "1", "text", "1", "tokens", "s", "s"};
    check_columns(f, "turns", names, units, NELEM(names));
    double *v[8];
    size_t n;
    static const char *const num[] = {"traj_id", "turn", "gen_tokens", "final", "status",
                                      "payload_tokens", "tool_latency_s", "wall_s"};
    for (int c = 0; c < 8; c++) {
        CU_ASSERT_EQUAL_FATAL(h5_read_column_f64(f, "turns", num[c], &v[c], &n, err, sizeof err), 0);
        CU_ASSERT_EQUAL(n, (size_t)N);
    }
    char *tools = NULL;
    CU_ASSERT_EQUAL_FATAL(h5_read_column_str(f, "turns", "tool", 24, &tools, &n, err, sizeof err), 0);
    CU_ASSERT_EQUAL(n, (size_t)N);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        int fin = i % 3 == 2;
        char want[24] = "";
        if (!fin) snprintf(want, sizeof want, "tool-%d", i % 7);
        bad += v[0][i] != i / 3 || v[1][i] != i % 3 || v[2][i] != 10 + i || v[3][i] != fin ||
               v[4][i] != (fin ? 0 : 1 + i % 3) || v[5][i] != (fin ? 0 : i % 97) ||
               v[6][i] != 0.25 * (i % 5) || v[7][i] != 0.5 * i || strcmp(tools + 24 * (size_t)i, want) != 0;
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* a numeric column asked as text, and a missing column */
    char *x = NULL;
    CU_ASSERT_EQUAL(h5_read_column_str(f, "turns", "turn", 24, &x, &n, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "/turns has no text or enum column turn") != NULL);
    /* the enum column status: its codes above, its names as text */
    check_enum_column(f, "turns", "status", statuses, NELEM(statuses), 0);
    char *st = NULL;
    CU_ASSERT_EQUAL_FATAL(h5_read_column_str(f, "turns", "status", 8, &st, &n, err, sizeof err), 0);
    CU_ASSERT_EQUAL(n, (size_t)N);
    for (int i = 0, bad_st = 0; i < N; i++) {
        bad_st += strcmp(st + 8 * (size_t)i, i % 3 == 2 ? "none" : i % 3 == 0 ? "success"
                                                                              : "failure") != 0;
        if (i == N - 1) CU_ASSERT_EQUAL(bad_st, 0);
    }
    CU_ASSERT_STRING_EQUAL(st + 8, "failure");
    free(st);
    CU_ASSERT_EQUAL(h5_read_column_str(f, "turns", "nope", 24, &x, &n, err, sizeof err), -1);
    CU_ASSERT_EQUAL(h5_read_column_str(f, "none", "tool", 24, &x, &n, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "no table /none") != NULL);
    for (int c = 0; c < 8; c++) free(v[c]);
    free(tools);
    H5Fclose(f);
}

/* Empty tables, NULL strings, over-long strings, values outside a vocabulary, "failed". */
static void test_edge_values(void)
{
    const char *path = scratch("edge.h5");
    char err[512] = "";
    struct metrics *m = metrics_open(path, NULL, 1, NULL, err, sizeof err);
    CU_ASSERT_FATAL(m != NULL);
    char longtext[600];
    memset(longtext, 'x', sizeof longtext - 1);
    longtext[sizeof longtext - 1] = '\0';
    CU_ASSERT_EQUAL(metrics_event(m, 1.0, 2, EV_ERROR, longtext), 0);
    CU_ASSERT_EQUAL(metrics_event(m, 2.0, 3, EV_PLAN, NULL), 0);
    /* a value outside its column's vocabulary is refused and nothing is appended */
    CU_ASSERT_EQUAL(metrics_event(m, 3.0, 4, METRICS_N_EVENT_KINDS, "x"), -1);
    CU_ASSERT_EQUAL(metrics_event(m, 3.0, 4, (enum metrics_event_kind)-1, "x"), -1);
    struct metrics_traj_row tr = make_traj(1);
    tr.fate = TRAJ_IN_FLIGHT + 1;
    CU_ASSERT_EQUAL(metrics_traj(m, &tr), -1);
    struct metrics_span_row spr = make_span(1);
    spr.kind = SPAN_KIND_COUNT;
    CU_ASSERT_EQUAL(metrics_span(m, &spr), -1);
    struct metrics_turn_row tu = {.status = 4};
    CU_ASSERT_EQUAL(metrics_turn(m, &tu), -1);
    struct metrics_plan_row p = make_plan(0);
    memset(p.rollout_tp, '7', sizeof p.rollout_tp); /* not terminated: must be cut */
    CU_ASSERT_EQUAL(metrics_plan(m, &p), 0);
    struct metrics_migration_row mg = make_migration(0); /* none terminated: all cut */
    memset(mg.from_bucket, 'f', sizeof mg.from_bucket);
    memset(mg.to_bucket, 't', sizeof mg.to_bucket);
    mg.why = METRICS_N_MIG_WHY;
    CU_ASSERT_EQUAL(metrics_migration(m, &mg), -1);
    mg.why = METRICS_N_MIG_WHY - 1;
    CU_ASSERT_EQUAL(metrics_migration(m, &mg), 0);
    struct metrics_instance_row in = make_instance(0);
    memset(in.bucket, 'b', sizeof in.bucket);
    CU_ASSERT_EQUAL(metrics_instance(m, &in), 0);
    struct metrics_planner_row pr = make_planner(4); /* none terminated: all cut */
    memset(pr.cand_rollout_tp, '8', sizeof pr.cand_rollout_tp);
    pr.trigger = METRICS_N_TRIGGERS;
    CU_ASSERT_EQUAL(metrics_planner(m, &pr), -1);
    pr.trigger = METRICS_N_TRIGGERS - 1;
    pr.verdict = -2;
    CU_ASSERT_EQUAL(metrics_planner(m, &pr), -1);
    pr.verdict = METRICS_N_VERDICTS;
    CU_ASSERT_EQUAL(metrics_planner(m, &pr), -1);
    pr.verdict = -1;
    CU_ASSERT_EQUAL(metrics_planner(m, &pr), 0);
    CU_ASSERT_EQUAL(metrics_close(m, "failed"), 0);

    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    char s[64];
    CU_ASSERT(attr_string(f, "status", s, sizeof s));
    CU_ASSERT_STRING_EQUAL(s, "failed");
    CU_ASSERT(attr_string(f, "device_type", s, sizeof s));
    CU_ASSERT_STRING_EQUAL(s, "unknown");
    CU_ASSERT(attr_string(f, "config", s, sizeof s));
    CU_ASSERT_STRING_EQUAL(s, "");
    size_t n;
    hid_t mt = step_mtype();
    void *rows = read_table(f, "steps", mt, sizeof(struct metrics_step_row), &n);
    CU_ASSERT(rows != NULL);
    CU_ASSERT_EQUAL(n, 0);
    free(rows);
    H5Tclose(mt);
    mt = event_mtype();
    struct event_read *ev = read_table(f, "events", mt, sizeof *ev, &n);
    H5Tclose(mt);
    CU_ASSERT_FATAL(ev != NULL);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(ev[0].kind, EV_ERROR);
    CU_ASSERT_EQUAL(strlen(ev[0].detail), 255);
    CU_ASSERT_EQUAL(ev[1].kind, EV_PLAN);
    CU_ASSERT_STRING_EQUAL(ev[1].detail, "");
    free(ev);
    mt = plan_mtype();
    struct metrics_plan_row *pl = read_table(f, "plans", mt, sizeof *pl, &n);
    H5Tclose(mt);
    CU_ASSERT_FATAL(pl != NULL);
    CU_ASSERT_EQUAL(strlen(pl[0].rollout_tp), 127);
    free(pl);
    mt = migration_mtype();
    struct metrics_migration_row *mr = read_table(f, "migrations", mt, sizeof *mr, &n);
    H5Tclose(mt);
    CU_ASSERT_FATAL(mr != NULL);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(strlen(mr[0].from_bucket), METRICS_BUCKET_LEN - 1);
    CU_ASSERT_EQUAL(strlen(mr[0].to_bucket), METRICS_BUCKET_LEN - 1);
    CU_ASSERT_EQUAL(mr[0].why, METRICS_N_MIG_WHY - 1);
    CU_ASSERT_EQUAL(mr[0].to_bucket[0], 't');
    CU_ASSERT_EQUAL(mr[0].traj_id, make_migration(0).traj_id);
    free(mr);
    mt = instance_mtype();
    struct metrics_instance_row *ir = read_table(f, "instances", mt, sizeof *ir, &n);
    H5Tclose(mt);
    CU_ASSERT_FATAL(ir != NULL);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(strlen(ir[0].bucket), METRICS_BUCKET_LEN - 1);
    CU_ASSERT_EQUAL(ir[0].queued, -1);
    free(ir);
    mt = planner_mtype();
    struct metrics_planner_row *prr = read_table(f, "planner", mt, sizeof *prr, &n);
    H5Tclose(mt);
    CU_ASSERT_FATAL(prr != NULL);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(prr[0].trigger, METRICS_N_TRIGGERS - 1);
    CU_ASSERT_EQUAL(prr[0].verdict, -1);
    CU_ASSERT_EQUAL(strlen(prr[0].cand_rollout_tp), sizeof pr.cand_rollout_tp - 1);
    CU_ASSERT_EQUAL(prr[0].evaluations, make_planner(4).evaluations);
    CU_ASSERT_EQUAL(prr[0].history, make_planner(4).history);
    free(prr);
    mt = sched_mtype();
    rows = read_table(f, "sched", mt, sizeof(struct metrics_sched_row), &n);
    H5Tclose(mt);
    CU_ASSERT(rows != NULL);
    CU_ASSERT_EQUAL(n, 0);
    free(rows);
    static const char *const refused[] = {"trajectories", "spans", "turns"};
    for (int k = 0; k < NELEM(refused); k++) { /* only refused rows were offered */
        hid_t d = H5Dopen2(f, refused[k], H5P_DEFAULT), sp = H5Dget_space(d);
        CU_ASSERT_EQUAL(H5Sget_simple_extent_npoints(sp), 0);
        H5Sclose(sp);
        H5Dclose(d);
    }
    mt = eval_mtype();
    rows = read_table(f, "eval", mt, sizeof(struct metrics_eval_row), &n);
    H5Tclose(mt);
    CU_ASSERT(rows != NULL);
    CU_ASSERT_EQUAL(n, 0);
    free(rows);
    H5Fclose(f);

    CU_ASSERT_EQUAL(metrics_close(NULL, "complete"), 0);
    CU_ASSERT_PTR_NULL(metrics_path(NULL));
    CU_ASSERT_EQUAL(metrics_flush(NULL), -1);
    CU_ASSERT_EQUAL(metrics_step(NULL, NULL), -1);
    struct metrics_eval_row ev0 = make_eval(0);
    CU_ASSERT_EQUAL(metrics_eval(NULL, &ev0), -1);
    struct metrics_sched_row sr = make_sched(0);
    CU_ASSERT_EQUAL(metrics_sched(NULL, &sr), -1);
    CU_ASSERT_EQUAL(metrics_migration(NULL, &mg), -1);
    CU_ASSERT_EQUAL(metrics_instance(NULL, &in), -1);
    CU_ASSERT_EQUAL(metrics_planner(NULL, &pr), -1);
    CU_ASSERT_EQUAL(metrics_plan(NULL, &p), -1);
}

static void test_open_existing_fails(void)
{
    const char *path = scratch("exists.h5");
    FILE *fp = fopen(path, "w");
    CU_ASSERT_FATAL(fp != NULL);
    fputs("precious", fp);
    fclose(fp);
    char err[512] = "";
    struct metrics *m = metrics_open(path, "x", 1, "cpu", err, sizeof err);
    CU_ASSERT_PTR_NULL(m);
    metrics_close(m, "failed");
    CU_ASSERT(strstr(err, "exists") != NULL);
    CU_ASSERT(strstr(err, path) != NULL);
    char *content = slurp(path);
    CU_ASSERT_STRING_EQUAL(content, "precious"); /* never truncated */
    free(content);

    /* A metrics file from an earlier run is not overwritten either. */
    const char *again = scratch("again.h5");
    m = metrics_open(again, "x", 1, "cpu", err, sizeof err);
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT_EQUAL(metrics_close(m, "complete"), 0);
    err[0] = '\0';
    CU_ASSERT_PTR_NULL(metrics_open(again, "x", 1, "cpu", err, sizeof err));
    CU_ASSERT(strstr(err, "exists") != NULL);
}

static void test_open_missing_dir_fails(void)
{
    char path[1300];
    snprintf(path, sizeof path, "%s/no-such-dir/run.h5", scratch(""));
    char err[512] = "";
    CU_ASSERT_PTR_NULL(metrics_open(path, "x", 1, "cpu", err, sizeof err));
    CU_ASSERT(strstr(err, "does not exist") != NULL);
    CU_ASSERT(strstr(err, "no-such-dir") != NULL);

    const char *file = scratch("plainfile");
    FILE *fp = fopen(file, "w");
    CU_ASSERT_FATAL(fp != NULL);
    fclose(fp);
    snprintf(path, sizeof path, "%s/run.h5", file);
    err[0] = '\0';
    CU_ASSERT_PTR_NULL(metrics_open(path, "x", 1, "cpu", err, sizeof err));
    CU_ASSERT(strstr(err, "not a directory") != NULL);

    err[0] = '\0';
    CU_ASSERT_PTR_NULL(metrics_open("", "x", 1, "cpu", err, sizeof err));
    CU_ASSERT(err[0] != '\0');
}

/* An HDF5 failure after open is reported (logged) with the call and HDF5's reason. */
static void test_hdf5_error_message(void)
{
    const char *path = scratch("h5err.h5");
    const char *log = scratch("h5err.log");
    char err[512] = "";
    struct metrics *m = metrics_open(path, "x", 1, "cpu", err, sizeof err);
    CU_ASSERT_FATAL(m != NULL);
    fflush(stderr);
    int saved = dup(2);
    FILE *lf = fopen(log, "w");
    CU_ASSERT_FATAL(lf != NULL && saved >= 0);
    dup2(fileno(lf), 2);
    int rc = metrics_attr_int(m, "", 1); /* HDF5 rejects an empty attribute name */
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(lf);
    CU_ASSERT_EQUAL(rc, -1);
    char *text = slurp(log);
    CU_ASSERT(strstr(text, "H5A") != NULL);        /* names the call */
    CU_ASSERT(strstr(text, "attribute name") != NULL); /* HDF5's own reason */
    CU_ASSERT(strstr(text, path) != NULL);
    CU_ASSERT(strstr(text, "HDF5-DIAG") == NULL);  /* HDF5's auto printing was off */
    free(text);
    /* The writer still works after a failed call. */
    struct metrics_step_row r = make_step(0);
    CU_ASSERT_EQUAL(metrics_step(m, &r), 0);
    CU_ASSERT_EQUAL(metrics_close(m, "complete"), 0);
    /* ...and HDF5's automatic printing is back on for other code. */
    H5E_auto2_t fn = NULL;
    void *data = NULL;
    H5Eget_auto2(H5E_DEFAULT, &fn, &data);
    CU_ASSERT(fn != NULL);
}

/* ---- metrics_write_with ---- */

enum { TREE_N = 5 };

/* What the /tree writer below saw and did. */
struct tree_arg {
    hsize_t sched_rows_on_disk; /* /sched's extent when the writer ran */
    int calls;
    int fail_with;              /* 0: write the group; else return this with a message */
    bool hdf5_error;            /* provoke an HDF5 error (group exists) and report it */
    hid_t leak;                 /* an object deliberately left open, closed by the test */
};

/* A miniature of the scheduler's /tree: a group, a dataset, attributes. */
static int write_tree(int64_t file, void *varg, char *err, size_t errlen)
{
    struct tree_arg *a = varg;
    hid_t fid = (hid_t)file;
    a->calls++;
    hid_t d = H5Dopen2(fid, "sched", H5P_DEFAULT);
    if (d >= 0) {
        hid_t sp = H5Dget_space(d);
        H5Sget_simple_extent_dims(sp, &a->sched_rows_on_disk, NULL);
        H5Sclose(sp);
        H5Dclose(d);
    }
    if (a->fail_with) {
        snprintf(err, errlen, "tree writer: boom %d", a->fail_with);
        return a->fail_with;
    }
    if (a->hdf5_error) {
        hid_t g = H5Gcreate2(fid, "tree", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (g >= 0) {
            H5Gclose(g);
            return 0;
        }
        snprintf(err, errlen, "tree writer: H5Gcreate2(/tree) failed");
        return -1;
    }
    hid_t g = H5Gcreate2(fid, "tree", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) {
        snprintf(err, errlen, "tree writer: cannot create /tree");
        return -1;
    }
    hsize_t dims = TREE_N;
    float rem[TREE_N] = {1.5f, 2.5f, 3.5f, 4.5f, 5.5f};
    hid_t sp = H5Screate_simple(1, &dims, NULL);
    hid_t ds = H5Dcreate2(g, "rem", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t w = H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, rem);
    H5Dclose(ds);
    H5Sclose(sp);
    hid_t as = H5Screate(H5S_SCALAR);
    int64_t version = 1;
    hid_t at = H5Acreate2(g, "version", H5T_STD_I64LE, as, H5P_DEFAULT, H5P_DEFAULT);
    herr_t wa = H5Awrite(at, H5T_NATIVE_INT64, &version);
    H5Aclose(at);
    H5Sclose(as);
    H5Gclose(g);
    if (w < 0 || wa < 0) {
        snprintf(err, errlen, "tree writer: write failed");
        return -1;
    }
    return 0;
}

/* Leaves a group open on purpose (the test closes it through a->leak). */
static int leaky_writer(int64_t file, void *varg, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct tree_arg *a = varg;
    a->leak = H5Gcreate2((hid_t)file, "leaky", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    return a->leak >= 0 ? 0 : -1;
}

/* Runs metrics_write_with with stderr captured into log; returns its result. */
static int write_with_captured(struct metrics *m,
                               int (*fn)(int64_t, void *, char *, size_t), void *arg,
                               const char *log, char **text)
{
    fflush(stderr);
    int saved = dup(2);
    FILE *lf = fopen(log, "w");
    CU_ASSERT_FATAL(lf != NULL && saved >= 0);
    dup2(fileno(lf), 2);
    int rc = metrics_write_with(m, fn, arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(lf);
    *text = slurp(log);
    return rc;
}

static void test_write_with(void)
{
    const char *path = scratch("tree.h5");
    const char *log = scratch("tree.log");
    char err[512] = "";
    struct metrics *m = metrics_open(path, "x", 2, "cpu", err, sizeof err);
    CU_ASSERT_FATAL(m != NULL);
    for (int i = 0; i < 4; i++) { /* buffered: must reach the file before the writer runs */
        struct metrics_sched_row r = make_sched(i);
        CU_ASSERT_EQUAL(metrics_sched(m, &r), 0);
    }
    struct tree_arg a = {0};
    a.leak = H5I_INVALID_HID;
    char *text = NULL;
    CU_ASSERT_EQUAL(write_with_captured(m, write_tree, &a, log, &text), 0);
    CU_ASSERT_EQUAL(a.calls, 1);
    CU_ASSERT_EQUAL(a.sched_rows_on_disk, 4);
    CU_ASSERT_STRING_EQUAL(text, ""); /* nothing logged on success */
    free(text);

    /* The writer's own failure: its result comes back, its message is logged. */
    a.fail_with = 7;
    CU_ASSERT_EQUAL(write_with_captured(m, write_tree, &a, log, &text), 7);
    CU_ASSERT(strstr(text, "boom 7") != NULL);
    CU_ASSERT(strstr(text, path) != NULL);
    free(text);

    /* An HDF5 error inside the writer (/tree exists): reported by the writer, HDF5's
     * automatic printing off, the error stack cleared. */
    a.fail_with = 0;
    a.hdf5_error = true;
    CU_ASSERT_EQUAL(write_with_captured(m, write_tree, &a, log, &text), -1);
    CU_ASSERT(strstr(text, "H5Gcreate2(/tree) failed") != NULL);
    CU_ASSERT(strstr(text, "HDF5-DIAG") == NULL);
    free(text);

    /* A writer that leaves an object open is warned about. */
    CU_ASSERT_EQUAL(write_with_captured(m, leaky_writer, &a, log, &text), 0);
    CU_ASSERT(strstr(text, "left 1 HDF5 object") != NULL);
    free(text);
    CU_ASSERT(a.leak >= 0);
    if (a.leak >= 0) H5Gclose(a.leak);

    CU_ASSERT_EQUAL(metrics_write_with(NULL, write_tree, &a), -1);
    CU_ASSERT_EQUAL(metrics_write_with(m, NULL, &a), -1);
    CU_ASSERT_EQUAL(a.calls, 3);
    struct metrics_sched_row r = make_sched(4); /* rows still work after the writer */
    CU_ASSERT_EQUAL(metrics_sched(m, &r), 0);
    CU_ASSERT_EQUAL(metrics_close(m, "complete"), 0);
    H5E_auto2_t fn = NULL;
    void *data = NULL;
    H5Eget_auto2(H5E_DEFAULT, &fn, &data);
    CU_ASSERT(fn != NULL); /* HDF5's automatic printing is back on */

    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    check_sched(f, 5);
    hid_t g = H5Gopen2(f, "tree", H5P_DEFAULT);
    CU_ASSERT_FATAL(g >= 0);
    int64_t version = 0;
    CU_ASSERT(attr_num(g, "version", H5T_NATIVE_INT64, &version));
    CU_ASSERT_EQUAL(version, 1);
    float rem[TREE_N + 1] = {0};
    hid_t ds = H5Dopen2(g, "rem", H5P_DEFAULT);
    CU_ASSERT_FATAL(ds >= 0);
    hid_t sp = H5Dget_space(ds);
    CU_ASSERT_EQUAL(H5Sget_simple_extent_npoints(sp), TREE_N);
    H5Sclose(sp);
    CU_ASSERT(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, rem) >= 0);
    CU_ASSERT_EQUAL(rem[0], 1.5f);
    CU_ASSERT_EQUAL(rem[TREE_N - 1], 5.5f);
    H5Dclose(ds);
    H5Gclose(g);
    CU_ASSERT(H5Lexists(f, "leaky", H5P_DEFAULT) > 0);
    char s[64];
    CU_ASSERT(attr_string(f, "status", s, sizeof s));
    CU_ASSERT_STRING_EQUAL(s, "complete");
    H5Fclose(f);
}

/* A run killed after metrics_flush(): its file opens, has the flushed rows, reads "running". */
static void test_killed_run_readable(void)
{
    const char *path = scratch("killed.h5");
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        char err[512];
        struct metrics *m = metrics_open(path, "cfg", 4, "cpu", err, sizeof err);
        if (!m) _exit(3);
        for (int i = 0; i < 3; i++) {
            struct metrics_step_row r = make_step(i);
            struct metrics_traj_row t = make_traj(i);
            if (metrics_step(m, &r) || metrics_traj(m, &t)) _exit(4);
        }
        for (int i = 0; i < 3; i++) {
            struct metrics_sched_row s = make_sched(i);
            struct metrics_migration_row g = make_migration(i);
            struct metrics_instance_row n = make_instance(i);
            struct metrics_planner_row p = make_planner(i);
            if (metrics_sched(m, &s) || metrics_migration(m, &g) || metrics_instance(m, &n) ||
                metrics_planner(m, &p))
                _exit(7);
        }
        struct tree_arg a = {0};
        a.leak = H5I_INVALID_HID;
        if (metrics_write_with(m, write_tree, &a) != 0 || a.sched_rows_on_disk != 3) _exit(8);
        struct metrics_eval_row ev = make_eval(0);
        if (metrics_eval(m, &ev) || metrics_event(m, 1.0, 3, EV_RESPLIT, "before kill") ||
            metrics_flush(m))
            _exit(5);
        struct metrics_step_row r = make_step(3); /* buffered, never flushed: lost */
        metrics_step(m, &r);
        struct metrics_migration_row g = make_migration(3);
        metrics_migration(m, &g);
        struct metrics_planner_row p = make_planner(3);
        metrics_planner(m, &p);
        raise(SIGKILL);
        _exit(6);
    }
    int status = 0;
    CU_ASSERT_FATAL(waitpid(pid, &status, 0) == pid);
    CU_ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    if (WIFEXITED(status)) fprintf(stderr, "child exited with %d\n", WEXITSTATUS(status));

    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    check_steps(f, 3);
    check_trajs(f, 3);
    check_evals(f, 1);
    check_sched(f, 3);
    check_migrations(f, 3);
    check_instances(f, 3);
    check_planner(f, 3);
    hid_t g = H5Gopen2(f, "tree", H5P_DEFAULT);
    CU_ASSERT(g >= 0);
    int64_t version = 0;
    CU_ASSERT(g >= 0 && attr_num(g, "version", H5T_NATIVE_INT64, &version) && version == 1);
    if (g >= 0) H5Gclose(g);
    char s[64];
    CU_ASSERT(attr_string(f, "status", s, sizeof s));
    CU_ASSERT_STRING_EQUAL(s, "running");
    H5Fclose(f);
}

/* ---- check_run ---- */

enum corrupt {
    C_NONE, C_STATUS, C_NO_ATTR, C_STEPS_REQUESTED, C_STEP_GAP, C_VERSION, C_STEP_STALE,
    C_ZERO_NTRAJ, C_LOST_TRAJ, C_DUP_TRAJ, C_BAD_FATE, C_TRAJ_STALE, C_VERSION_END,
    C_UNTRAINED_STEP, C_PER_STEP, C_EPOCH, C_NO_RESPLIT, C_NO_MOVES, C_UNCLOSED, C_BREAKDOWN,
    C_SPLIT
};

/*
 * A consistent run: steps 1..n_steps, per_step trajectories each, staleness up to
 * max_staleness, then buffered and in-flight leftovers; plans every 3 steps, moving
 * ranks between train and rollout; a resplit event per plan change. c breaks one thing.
 */
static int fake_rows(struct metrics *m, enum corrupt c)
{
    const int n_steps = 12, per_step = 6, max_stale = 2, n_plans = 4;
    int64_t id = 0;
    for (int k = 1; k <= n_steps; k++) {
        int smax = 0;
        int n = per_step + (c == C_PER_STEP && k == 5 ? -1 : 0);
        for (int j = 0; j < n; j++) {
            struct metrics_traj_row t = make_traj((int)id);
            t.traj_id = c == C_DUP_TRAJ && id == 7 ? 3 : id;
            id++;
            t.fate = TRAJ_TRAINED; /* C_BAD_FATE: poke_fate after the file is closed */
            t.step_consumed = k;
            int stale = j % (max_stale + 1);
            if (c == C_TRAJ_STALE && k == 9 && j == 1) stale = max_stale + 2;
            t.version_start = k - 1 - stale < 0 ? 0 : k - 1 - stale;
            t.version_end = c == C_VERSION_END && k == 4 && j == 0 ? t.version_start - 1
                                                                     : t.version_start;
            if (k - 1 - t.version_start > smax) smax = k - 1 - t.version_start;
            metrics_traj(m, &t);
        }
        if (c == C_PER_STEP && k == 6) { /* the one missing from step 5, filed under 6 */
            struct metrics_traj_row t = make_traj((int)id);
            t.traj_id = id++;
            t.fate = TRAJ_TRAINED;
            t.step_consumed = k;
            t.version_start = t.version_end = k - 1;
            metrics_traj(m, &t);
        }
        struct metrics_step_row s = make_step(k - 1);
        s.step = c == C_STEP_GAP && k >= 7 ? k + 1 : k;
        s.version = c == C_VERSION && k == 10 ? k - 1 : k;
        s.n_traj = c == C_ZERO_NTRAJ && k == 3 ? 0 : per_step;
        s.staleness_max = c == C_STEP_STALE && k == 8 ? max_stale + 1 : smax;
        s.n_syncs = 0; /* the fake run has no weight_sync events */
        s.sync_s = 0;
        s.sync_bytes = 0;
        if (c == C_BREAKDOWN && k == 4) s.train_fwd_s = s.train_s;
        if (c == C_SPLIT && k == 5) s.rollout_wait_s += 0.5;
        metrics_step(m, &s);
        if (k % 3 == 0 && k / 3 < n_plans) {
            struct metrics_plan_row p = make_plan(k / 3);
            p.epoch = c == C_EPOCH && k / 3 == 2 ? 1 : k / 3;
            if (c == C_NO_MOVES) {
                struct metrics_plan_row p0 = make_plan(0);
                p.n_train = p0.n_train;
                p.n_rollout = p0.n_rollout;
                p.n_hybrid = p0.n_hybrid;
                memcpy(p.rollout_tp, p0.rollout_tp, sizeof p.rollout_tp);
            }
            metrics_plan(m, &p);
            if (c != C_NO_RESPLIT) metrics_event(m, p.wall_s, k, EV_RESPLIT, "moved ranks");
        }
        if (k == 1) {
            struct metrics_plan_row p = make_plan(0);
            metrics_plan(m, &p);
        }
        metrics_event(m, k, k, EV_NONFINITE, "step skipped: loss nan");
        if (metrics_flush(m) != 0) return -1;
    }
    for (int j = 0; j < 5; j++) { /* leftovers: buffered, in flight */
        struct metrics_traj_row t = make_traj((int)id);
        t.traj_id = id++;
        t.fate = j < 3 ? TRAJ_BUFFERED : TRAJ_IN_FLIGHT;
        t.step_consumed = c == C_UNTRAINED_STEP && j == 0 ? 4 : -1;
        t.version_start = t.version_end = n_steps;
        metrics_traj(m, &t);
    }
    metrics_attr_int(m, "steps_requested", c == C_STEPS_REQUESTED ? n_steps + 1 : n_steps);
    if (c != C_NO_ATTR) metrics_attr_int(m, "max_staleness", max_stale);
    metrics_attr_int(m, "n_traj_started", c == C_LOST_TRAJ ? id + 1 : id);
    return 0;
}

/*
 * Stores value in the fate of row `row` of /trajectories bypassing the writer, which
 * refuses values outside the enum: written with the file's own enum type, so HDF5
 * converts nothing, as a foreign or damaged file could hold it.
 */
static int poke_fate(const char *path, hsize_t row, int32_t value)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = f >= 0 ? H5Dopen2(f, "trajectories", H5P_DEFAULT) : -1;
    hid_t ft = d >= 0 ? H5Dget_type(d) : -1;
    int idx = ft >= 0 ? H5Tget_member_index(ft, "fate") : -1;
    hid_t et = idx >= 0 ? H5Tget_member_type(ft, (unsigned)idx) : -1;
    hid_t mt = et >= 0 ? H5Tcreate(H5T_COMPOUND, sizeof value) : -1;
    hid_t fs = d >= 0 ? H5Dget_space(d) : -1;
    hsize_t one = 1;
    hid_t ms = H5Screate_simple(1, &one, NULL);
    int ok = mt >= 0 && fs >= 0 && H5Tinsert(mt, "fate", 0, et) >= 0 &&
             H5Sselect_elements(fs, H5S_SELECT_SET, 1, &row) >= 0 &&
             H5Dwrite(d, mt, ms, fs, H5P_DEFAULT, &value) >= 0; /* little-endian host */
    H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (mt >= 0) H5Tclose(mt);
    if (et >= 0) H5Tclose(et);
    if (ft >= 0) H5Tclose(ft);
    if (d >= 0) H5Dclose(d);
    if (f >= 0) H5Fclose(f);
    return ok ? 0 : -1;
}

/* Writes the fake run to path; C_UNCLOSED is written by a child SIGKILLed before close. */
static int write_fake_run(const char *path, enum corrupt c)
{
    char err[512];
    pid_t pid = c == C_UNCLOSED ? fork() : 0;
    if (pid < 0) return -1;
    if (pid > 0) {
        int st = 0;
        waitpid(pid, &st, 0);
        return WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? 0 : -1;
    }
    struct metrics *m = metrics_open(path, "fake = true;", 8, "cpu", err, sizeof err);
    if (!m) {
        fprintf(stderr, "%s\n", err);
        if (c == C_UNCLOSED) _exit(3);
        return -1;
    }
    int rc = fake_rows(m, c);
    if (c == C_UNCLOSED) {
        if (rc == 0 && metrics_flush(m) == 0) raise(SIGKILL);
        _exit(4);
    }
    if (metrics_close(m, c == C_STATUS ? "failed" : "complete") != 0) rc = -1;
    if (rc == 0 && c == C_BAD_FATE) rc = poke_fate(path, 6, 7);
    return rc;
}

static const char *check_run_binary(void)
{
    static char buf[1024];
    const char *env = getenv("CHECK_RUN");
    if (env && *env) return env;
    const char *top = getenv("top_builddir");
    snprintf(buf, sizeof buf, "%s/tests/check_run", top && *top ? top : ".");
    return access(buf, X_OK) == 0 ? buf : NULL;
}

/* Runs check_run; returns its exit code and its output in *out (caller frees). */
static int run_check(const char *bin, const char *file, const char *args, char **out)
{
    const char *log = scratch("check_run.out");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' '%s' %s > '%s' 2>&1", bin, file, args, log);
    int st = system(cmd);
    *out = slurp(log);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_check_run(void)
{
    const char *bin = check_run_binary();
    if (!bin) {
        printf("\n    check_run binary not found: set CHECK_RUN=/path/to/check_run (skipped) ");
        return;
    }
    static const struct {
        enum corrupt c;
        const char *args;
        const char *expect; /* in a FAIL line */
    } cases[] = {
        {C_STATUS, "", "status (\"complete\" vs failed)"},
        {C_UNCLOSED, "", "status (\"complete\" vs running)"},
        {C_NO_ATTR, "", "max_staleness (int) (present vs missing)"},
        {C_STEPS_REQUESTED, "", "/steps rows == steps_requested (13 vs 12)"},
        {C_NONE, "--min-steps 20", "--min-steps (20 vs 12)"},
        {C_STEP_GAP, "", "row 6: step (7 vs 8)"},
        {C_VERSION, "", "version = previous + 1 (10 vs 9)"},
        {C_STEP_STALE, "", "staleness_max <= max_staleness (<= 2 vs 3)"},
        {C_ZERO_NTRAJ, "", "n_traj > 0 (> 0 vs 0)"},
        {C_LOST_TRAJ, "", "(lost) (present vs missing)"},
        {C_DUP_TRAJ, "", "traj_id 3 unique (occurrences) (1 vs 2)"},
        {C_BAD_FATE, "", "fate (0, 1 or 2 vs 7)"},
        {C_TRAJ_STALE, "", "version_start (<= 2 vs 4)"},
        {C_VERSION_END, "", "version_end >= version_start"},
        {C_UNTRAINED_STEP, "", "step_consumed (-1 vs 4)"},
        {C_PER_STEP, "", "step_consumed == 5 == /steps n_traj (6 vs 5)"},
        {C_EPOCH, "", "/plans row 2: epoch (at least the row before's + 1) (2 vs 1)"},
        {C_NONE, "--min-plans 9", "--min-plans (9 vs 4)"},
        {C_NO_RESPLIT, "", "\"resplit\" row"},
        {C_NO_MOVES, "--expect-moves", "--expect-moves"},
        {C_BREAKDOWN, "", "train_opt_s <= train_s (step 4)"},
        {C_SPLIT, "", "rollout_wait_s + train_s == step_s (step 5)"},
    };
    char *out = NULL;
    const char *good = scratch("good.h5");
    CU_ASSERT_FATAL(write_fake_run(good, C_NONE) == 0);
    CU_ASSERT_EQUAL(run_check(bin, good, "--min-steps 12 --min-plans 4 --expect-moves", &out), 0);
    CU_ASSERT(strstr(out, "check_run: OK: ") != NULL);
    CU_ASSERT(strstr(out, "FAIL") == NULL);
    if (!strstr(out, "check_run: OK: ")) printf("\n%s", out);
    free(out);
    /* The moveless run is fine without --expect-moves. */
    const char *still = scratch("still.h5");
    CU_ASSERT_FATAL(write_fake_run(still, C_NO_MOVES) == 0);
    CU_ASSERT_EQUAL(run_check(bin, still, "", &out), 0);
    free(out);

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "bad%zu.h5", i);
        const char *bad = scratch(name);
        CU_ASSERT_FATAL(write_fake_run(bad, cases[i].c) == 0);
        int rc = run_check(bin, bad, cases[i].args, &out);
        bool ok = rc == 1 && strstr(out, "check_run: FAIL: ") && strstr(out, cases[i].expect) &&
                  !strstr(out, "check_run: OK");
        CU_ASSERT(ok);
        if (!ok) printf("\n  case %zu (expect '%s', rc %d):\n%s", i, cases[i].expect, rc, out);
        free(out);
    }
    /* Not an HDF5 file, missing file, bad usage. */
    const char *junk = scratch("junk.h5");
    FILE *fp = fopen(junk, "w");
    CU_ASSERT_FATAL(fp != NULL);
    fputs("not hdf5", fp);
    fclose(fp);
    CU_ASSERT_EQUAL(run_check(bin, junk, "", &out), 1);
    CU_ASSERT(strstr(out, "not an HDF5 file") != NULL);
    free(out);
    CU_ASSERT_EQUAL(run_check(bin, scratch("missing.h5"), "", &out), 1);
    CU_ASSERT(strstr(out, "No such file") != NULL);
    free(out);
    CU_ASSERT_EQUAL(run_check(bin, good, "--min-steps x", &out), 2);
    CU_ASSERT(strstr(out, "usage") != NULL);
    free(out);
}

int main(void)
{
    static const struct test_case writer[] = {
        {"round trip: every column of every table, attributes", test_round_trip},
        {"/turns round trip; string columns read back", test_turns_table},
        {"enumerations: names, values, the owners' names", test_enum_names},
        {"edge values: empty table, long/NULL strings, failed", test_edge_values},
        {"open refuses an existing file (exists)", test_open_existing_fails},
        {"open in a missing directory fails clearly", test_open_missing_dir_fails},
        {"HDF5 errors name the call and the reason", test_hdf5_error_message},
        {"metrics_write_with: a /tree group, errors, leaks", test_write_with},
        {"a run killed after flush leaves a readable file", test_killed_run_readable},
        {NULL, NULL},
    };
    static const struct test_case checker[] = {
        {"check_run accepts a good run, rejects broken ones", test_check_run},
        {NULL, NULL},
    };
    static const struct test_suite suites[] = {
        {"metrics writer", writer},
        {"check_run", checker},
        {NULL, NULL},
    };
    return test_main(suites);
}
