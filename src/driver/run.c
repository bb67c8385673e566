/*
 * The MPI job: rank 0 reads and validates the configuration and its inputs,
 * broadcasts them (plain structs: no shared file system needed for inputs), opens
 * the metrics file and runs the controller; every other rank runs a worker.
 *
 * Bad input ends the job with one message from rank 0 and MPI_Abort, before any
 * metrics file exists; a metrics file is only ever marked "complete" by a run that
 * finished. SIGTERM, SIGINT or SIGUSR1 stop a run early and cleanly
 * (include/libra/stop_signal.h): status "cancelled", exit LIBRA_EXIT_CANCELLED.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "libra/checkpoint.h"
#include "libra/cli.h"
#include "libra/controller.h"
#include "libra/device.h"
#include "libra/driver.h"
#include "libra/env.h"
#include "libra/log.h"
#include "libra/metrics.h"
#include "libra/mpi_wait.h"
#include "libra/ptree.h"
#include "libra/tool_state.h"
#include "libra/stop_signal.h"
#include "libra/watchdog.h"
#include "libra/wl_trace.h"
#include "libra/worker.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

int driver_load_inputs(const struct libra_config *cfg, struct job_inputs *in, char *err,
                       size_t errlen)
{
    memset(in, 0, sizeof *in);
    if (profile_load_hw(cfg->device.hardware, &in->cm.hw, err, errlen)) return -1;
    if (profile_load_model(cfg->model.profile, &in->cm.model, err, errlen)) return -1;
    if (workload_load(cfg->workload.preset, &in->wl, err, errlen)) return -1;
    if (cfg->workload.trace[0]) {
        /* Loaded once per process and kept for its lifetime (every rank replays it). */
        static struct wl_trace trace;
        static char trace_path[CFG_PATH_MAX];
        static struct wl_tool trace_tools[WL_MAX_TOOLS];
        static int trace_n_tools;
        if (strcmp(trace_path, cfg->workload.trace) != 0) {
            wl_trace_free(&trace);
            trace_path[0] = '\0';
            if (wl_trace_load(cfg->workload.trace, &in->wl, &trace, err, errlen)) return -1;
            snprintf(trace_path, sizeof trace_path, "%s", cfg->workload.trace);
            memcpy(trace_tools, in->wl.tools, sizeof trace_tools);
            trace_n_tools = in->wl.n_tools;
        } else { /* the tools the trace added to the preset's */
            memcpy(in->wl.tools, trace_tools, sizeof trace_tools);
            in->wl.n_tools = trace_n_tools;
        }
        in->wl.trace = &trace;
    }
    const struct device_config *d = &cfg->device;
    in->cm.p = (struct cost_params){d->decode_bw_util, d->prefill_mfu, d->train_mfu,
                                    d->gpu_memory_utilization, d->kv_frag_rate,
                                    d->act_workspace_gb * 1e9, 16.0};
    return 0;
}

/* mkdir -p for the output directory; 0 or -1 with a message. */
static int make_dirs(const char *dir, char *err, size_t errlen)
{
    char path[CFG_PATH_MAX];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1;; p++) {
        char c = *p;
        if (c != '/' && c != '\0') continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            snprintf(err, errlen, "output.dir: cannot create '%s': %s (check the path and its "
                     "permissions, or set output.dir)", path, strerror(errno));
            return -1;
        }
        *p = c;
        if (c == '\0') return 0;
    }
}

int driver_output_path(const struct libra_config *cfg, char *out, size_t len, char *err,
                       size_t errlen)
{
    if (cfg->output.file[0]) {
        snprintf(out, len, "%s", cfg->output.file);
        return 0;
    }
    if (make_dirs(cfg->output.dir, err, errlen)) return -1;
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    const char *job = getenv("SLURM_JOB_ID");
    int n = snprintf(out, len, "%s/%s-%s%s%s.h5", cfg->output.dir, cfg->run.name, stamp,
                     job && *job ? "-job" : "", job && *job ? job : "");
    if (n < 0 || (size_t)n >= len) {
        snprintf(err, errlen, "output.dir: the metrics file path is too long (shorten output.dir)");
        return -1;
    }
    return 0;
}

/* --resume: what the newest complete checkpoint holds. */
struct resume {
    int resume;              /* --resume was given */
    int step, version;       /* the checkpoint's, -1 / 0 for a fresh run */
    struct ckpt_state state;
    char err[1024];
    char lock_root[CFG_PATH_MAX]; /* rank 0: the checkpoint root it locked, or "" */
    char changes[4096];      /* the settings a resume changed (config_diff), or "" */
};

/* The metrics file of a resumed or restarted segment, beside the first's:
 * <out without .h5>.<tag>.h5, or <...>.<tag>-2.h5, -3, ... when that exists (a second
 * resume from the same checkpoint, after a crash before the next one). 0, or -1 when
 * the path would not fit outlen. */
static int name_beside(char *out, size_t outlen, const char *tag)
{
    size_t n = strlen(out);
    if (n > 3 && strcmp(out + n - 3, ".h5") == 0) out[n -= 3] = '\0';
    char *base = xmalloc(n + 1);
    memcpy(base, out, n + 1);
    int rc = -1;
    for (int k = 1; k < 10000; k++) {
        char extra[16] = "";
        if (k > 1) snprintf(extra, sizeof extra, "-%d", k);
        if ((size_t)snprintf(out, outlen, "%s.%s%s.h5", base, tag, extra) >= outlen) break;
        if (access(out, F_OK) != 0) {
            rc = 0;
            break;
        }
    }
    free(base);
    return rc;
}

/* The prefix tree a checkpoint saved is optional state: one that does not load (a
 * damaged file) is left out with a warning, and C-MLFQ starts with an empty tree
 * instead of refusing the resume. */
static int tree_usable(const struct libra_config *cfg, const char *path)
{
    const struct sched_config *sc = &cfg->sched;
    struct ptree_config pc = {sc->window, sc->min_samples, sc->shrink};
    struct tool_state_config ts = {sc->payload_small, sc->payload_large};
    struct ptree t;
    char why[768];
    int ok = ptree_init(&t, &pc, why, sizeof why) == 0;
    if (ok) {
        ok = ptree_load(&t, path, &ts, why, sizeof why) == 0;
        ptree_free(&t);
    }
    if (!ok)
        LOG_W("the checkpoint's scheduler tree does not load (%s): C-MLFQ starts with an "
              "empty prefix tree", why);
    return ok;
}

/* Finds the checkpoint, points model.checkpoint at its model, and names the metrics
 * file of the resumed segment "<file>.resumed-<step>.h5" (name_beside) so the first segment's file
 * is never touched. 0, or -1 with rs->err. */
static int resume_latest(struct libra_config *cfg, const struct device_info *dev,
                         struct resume *rs, char *out, size_t outlen)
{
    char root[CFG_PATH_MAX], model[CFG_PATH_MAX];
    if (!dev->has_model) {
        snprintf(rs->err, sizeof rs->err, "--resume needs a device with a model (device.type = "
                 "\"%s\" keeps no checkpoints)", cfg->device.type);
        return -1;
    }
    ckpt_root_of(cfg, root, sizeof root);
    char err[512];
    int step = ckpt_load_latest(root, &rs->state, model, sizeof model, err, sizeof err);
    if (step < 0) {
        snprintf(rs->err, sizeof rs->err, "--resume: %s (run without --resume to start afresh)", err);
        return -1;
    }
    /* what a resumed run may not change (before model.checkpoint becomes the checkpoint's) */
    char now[sizeof rs->state.identity], diff[2048];
    if (!rs->state.identity[0]) {
        printf("libra: the checkpoint of step %d records no configuration identity (written "
               "by an older libra): the configuration is not checked against it\n", step);
    } else if (config_identity(cfg, now, sizeof now) &&
               config_identity_diff(rs->state.identity, now, diff, sizeof diff)) {
        snprintf(rs->err, sizeof rs->err, "--resume: %.200s changes what a resumed run must "
                 "keep: %.600s (restore them, or run without --resume to start afresh)",
                 cfg->source, diff);
        return -1;
    }
    /* what may change and did (before the resume points the model and the tree at the
     * checkpoint's): printed, and recorded in the metrics file by the caller */
    if (rs->state.config) {
        char *flat = xmalloc(CONFIG_FLAT_MAX);
        static const char *const set_by_resume[] = {"model.checkpoint", "sched.tree_in",
                                                    "output.file", NULL};
        rs->changes[0] = '\0';
        if (config_flat(cfg, flat, CONFIG_FLAT_MAX) &&
            config_diff(rs->state.config, flat, set_by_resume, rs->changes,
                        sizeof rs->changes) > 0)
            printf("libra: resumed with changed settings: %s\n", rs->changes);
        free(flat);
    }
    rs->step = step;
    rs->version = rs->state.version;
    snprintf(cfg->model.checkpoint, sizeof cfg->model.checkpoint, "%s", model);
    /* C-MLFQ's prefix tree was saved beside the model: the run continues with it. */
    char tree[CFG_PATH_MAX + 16];
    const char *slash = strrchr(model, '/');
    int dir_len = slash ? (int)(slash - model) : 1;
    snprintf(tree, sizeof tree, "%.*s/tree.h5", dir_len, slash ? model : ".");
    if (strcmp(cfg->sched.type, "cmlfq") == 0 && access(tree, R_OK) == 0 &&
        strlen(tree) < sizeof cfg->sched.tree_in && tree_usable(cfg, tree))
        snprintf(cfg->sched.tree_in, sizeof cfg->sched.tree_in, "%s", tree);
    char tag[32];
    snprintf(tag, sizeof tag, "resumed-%d", step);
    if (name_beside(out, outlen, tag)) {
        snprintf(rs->err, sizeof rs->err, "--resume: the metrics file path is too long");
        return -1;
    }
    printf("libra: resuming from checkpoint step %d (version %d) in %s\n", step, rs->version, root);
    return 0;
}

/* A job Slurm requeued ($SLURM_RESTART_COUNT > 0: a node failure, a preemption, or
 * `scontrol requeue`) resumes by itself from its newest complete checkpoint, as with
 * --resume; without one it starts afresh, its metrics file named
 * <output>.restart-<count>.h5 so that the first attempt's file is kept. */
static void requeue(const struct libra_config *cfg, const struct device_info *dev,
                    struct resume *rs, char *out, size_t outlen)
{
    const char *rc = getenv("SLURM_RESTART_COUNT");
    int restarts = rc ? atoi(rc) : 0;
    if (rs->resume || restarts <= 0) return;
    char root[CFG_PATH_MAX];
    ckpt_root_of(cfg, root, sizeof root);
    int step;
    if (dev->has_model && cfg->run.checkpoint_interval > 0 && ckpt_list(root, &step, 1) > 0) {
        printf("libra: Slurm requeued this job (restart %d): resuming from the newest "
               "checkpoint in %s, as with --resume\n", restarts, root);
        rs->resume = 1;
        return;
    }
    char tag[32];
    snprintf(tag, sizeof tag, "restart-%d", restarts);
    if (name_beside(out, outlen, tag)) FATAL_INPUT("the metrics file path is too long");
    printf("libra: Slurm requeued this job (restart %d) and it has no checkpoint to resume "
           "from: starting afresh, metrics in %s\n", restarts, out);
}

/* A refusal after rank 0 took the checkpoint lock: the lock is released first, so the
 * next attempt finds none to take over. */
#define FATAL_LOCKED(rs, ...)                                \
    do {                                                     \
        if ((rs)->lock_root[0]) ckpt_unlock((rs)->lock_root); \
        FATAL_INPUT(__VA_ARGS__);                            \
    } while (0)

/* Rank 0: everything that can fail on bad input, before anything is written. */
static struct metrics *prepare(const char *path, int world, struct libra_config *cfg,
                               struct job_inputs *in, struct device_info *dev, struct resume *rs)
{
    char err[1024];
    if (config_load(path, cfg, err, sizeof err) || config_check_world(cfg, world, err, sizeof err) ||
        driver_load_inputs(cfg, in, err, sizeof err))
        FATAL_INPUT("%s", err);
    char out[2 * CFG_PATH_MAX];
    if (driver_output_path(cfg, out, sizeof out, err, sizeof err) ||
        driver_check_start(cfg, in, dev, world, err, sizeof err))
        FATAL_INPUT("%s", err);
    requeue(cfg, dev, rs, out, sizeof out);
    /* one job per checkpoint directory (before the resume reads it) */
    if (dev->has_model && (cfg->run.checkpoint_interval > 0 || rs->resume)) {
        int took_over = 0;
        char root[CFG_PATH_MAX];
        ckpt_root_of(cfg, root, sizeof root);
        if (ckpt_lock(root, &took_over, err, sizeof err))
            FATAL_INPUT("%s: run.checkpoint_dir: %s", CONFIG_WHERE(cfg, "run.checkpoint_dir"),
                        err);
        snprintf(rs->lock_root, sizeof rs->lock_root, "%s", root);
        if (took_over)
            printf("libra: took over the checkpoint lock of %s from a job that is gone\n",
                   rs->lock_root);
        int removed = 0;
        if (ckpt_clean_tmp(rs->lock_root, &removed, err, sizeof err)) FATAL_LOCKED(rs, "%s", err);
        if (removed)
            printf("libra: removed %d unfinished checkpoint director%s (.tmp) in %s, left by "
                   "a run that ended while writing\n", removed, removed == 1 ? "y" : "ies",
                   rs->lock_root);
        if (cfg->run.checkpoint_interval > 0 &&
            ckpt_check_space(rs->lock_root, ckpt_estimate_bytes(dev->n_params), err, sizeof err))
            FATAL_LOCKED(rs, "%s: run.checkpoint_dir: %s",
                         CONFIG_WHERE(cfg, "run.checkpoint_dir"), err);
    }
    if (rs->resume && resume_latest(cfg, dev, rs, out, sizeof out)) FATAL_LOCKED(rs, "%s", rs->err);
    const struct rates *r = &dev->rates;
    printf("libra: device %s: decode step %.3f ms at batch 1, %.3f ms at batch 32 (TP 1, 256 "
           "cached tokens each); prefill %.1f us a token (the router's rates)\n", dev->name,
           1e3 * r->decode_step_s(r, 1, 1, 256), 1e3 * r->decode_step_s(r, 1, 32, 32 * 256),
           1e6 * r->prefill_s(r, 1, 1000, 0) / 1000);
    char *text = config_to_string(cfg);
    printf("libra %s: %d ranks (1 controller + %d workers), device %s\n", PACKAGE_VERSION, world,
           world - 1, cfg->device.type);
    printf("---- resolved configuration ----\n%s--------------------------------\n", text);
    fflush(stdout);
    struct metrics *m = metrics_open(out, text, world, cfg->device.type, err, sizeof err);
    free(text);
    if (!m) FATAL_INPUT("%s", err);
    char *flat = xmalloc(CONFIG_FLAT_MAX);
    if (!config_flat(cfg, flat, CONFIG_FLAT_MAX) || metrics_config_group(m, flat))
        FATAL("metrics: cannot write the /config group");
    free(flat);
    return m;
}

/* The watchdog's expiry (watchdog.h): this rank's loop has not run for too long. */
static void on_stuck(double stuck_s, double limit_s, const char *phase, void *ctx)
{
    (void)ctx;
    FATAL_CODE(LIBRA_EXIT_UNRESPONSIVE,
               "this rank has been stuck for %.0f s in %s (its watchdog's limit: %.0f s, "
               "run.unresponsive_s): a rank it waits for is stopped or lost with its node, or "
               "a call hung", stuck_s, phase, limit_s);
}

/* Rank 0's last act on a fatal error: the message goes into /events and the file is
 * closed as "failed", so what was written survives and says why it ended. */
struct fatal_ctx {
    struct metrics *m;
    double t0;
};

static void record_fatal(void *ctx, const char *msg)
{
    struct fatal_ctx *f = ctx;
    metrics_event(f->m, wall_time() - f->t0, -1, EV_ERROR, msg);
    metrics_close(f->m, "failed");
}

/* device cpu: unless OPENBLAS_NUM_THREADS says otherwise, the ranks of one node share
 * its cores (2 cores, 4 ranks: 1 thread each) instead of each starting a thread per
 * core, which oversubscribes the node many times over. Collective over the world. */
static void share_cores(const struct libra_config *cfg)
{
    MPI_Comm node;
    int local = 1;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_size(node, &local));
    MPI_CHECK(MPI_Comm_free(&node));
    const char *env = getenv("OPENBLAS_NUM_THREADS");
    if ((strcmp(cfg->device.type, "cpu") != 0 && strcmp(cfg->device.type, "cuda") != 0) ||
        (env && *env))
        return;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cores > 0 ? (int)(cores / local) : 1;
    openblas_set_num_threads(n < 1 ? 1 : n);
}

static void bcast_bytes(void *p, size_t n)
{
    MPI_Request req;
    MPI_CHECK(MPI_Ibcast(p, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD, &req));
    mpi_wait_backoff(&req, NULL);
}

/* The replayed trace (workload.trace), loaded by rank 0, to every rank: the bytes of
 * `in` carried rank 0's pointer, so each worker receives the arrays into its own copy
 * (the file need not be readable on the other nodes). */
static void bcast_trace(int rank, struct job_inputs *in)
{
    static struct wl_trace copy;
    struct wl_trace *tr = rank == 0 ? (struct wl_trace *)in->wl.trace : &copy;
    int64_t n[3] = {0, 0, 0};
    if (rank == 0) n[0] = tr->n_groups, n[1] = tr->n_traj, n[2] = tr->n_turns;
    bcast_bytes(n, sizeof n);
    const size_t sz[3] = {sizeof *tr->group, sizeof *tr->traj, sizeof *tr->turn};
    for (int i = 0; i < 3; i++)
        if ((uint64_t)n[i] > (uint64_t)INT_MAX / sz[i])
            FATAL("workload.trace: %lld records are too many to send to the ranks (at most %zu)",
                  (long long)n[i], (size_t)INT_MAX / sz[i]);
    if (rank != 0) {
        copy = (struct wl_trace){.group = xmalloc((size_t)n[0] * sz[0] + 1),
                                 .traj = xmalloc((size_t)n[1] * sz[1] + 1),
                                 .turn = xmalloc((size_t)n[2] * sz[2] + 1),
                                 .n_groups = n[0], .n_traj = n[1], .n_turns = n[2]};
        in->wl.trace = &copy;
    }
    bcast_bytes(tr->group, (size_t)n[0] * sz[0]);
    bcast_bytes(tr->traj, (size_t)n[1] * sz[1]);
    bcast_bytes(tr->turn, (size_t)n[2] * sz[2]);
}

static const struct option job_opts[] = {{"resume", no_argument, NULL, 'r'}, {0}};
static const struct cli_cmd job_cmd = {
    "libra", "mpirun -np N libra [run] CONFIG [--resume]",
    "Runs the job CONFIG describes: rank 0 the controller, ranks 1 .. N-1 the workers\n"
    "(N >= 2; `libra check-config CONFIG` says how many its plans need). `run` may be left\n"
    "out unless CONFIG is named like a command (`libra --help` lists them).\n"
    "  --resume     continue from the newest complete checkpoint of run.checkpoint_dir\n",
    job_opts, "CONFIG", 1, 1, 0};

int driver_run_job(int argc, char **argv)
{
    struct cli cli;
    int ch, resume = 0;
    cli_begin(&cli, &job_cmd, argc, argv);
    while ((ch = cli_next(&cli)) > 0) resume = 1; /* --resume, the one option */
    if (ch == CLI_EXIT) return cli.rc;
    const char *path = cli.args[0];
    struct resume *rs = xcalloc(1, sizeof *rs);
    rs->step = -1;
    rs->resume = resume;
    int provided = 0, rank = 0, world = 0, node_tasks, node_cpus;
    char launch_err[512];
    if (driver_launch_check(launch_err, sizeof launch_err)) { /* before MPI_Init fails */
        const char *procid = getenv("SLURM_PROCID");
        if (!procid || strcmp(procid, "0") == 0) fprintf(stderr, "libra: %s\n", launch_err);
        free(rs);
        return LIBRA_EXIT_USAGE;
    }
    int yields = driver_launch_tune(&node_tasks, &node_cpus);
    MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    log_set_rank(rank);
    if (stop_signal_install()) FATAL("cannot install the handlers of SIGTERM, SIGINT, SIGUSR1 and SIGXFSZ");
    struct libra_config *cfg = xcalloc(1, sizeof *cfg);
    struct job_inputs *in = xcalloc(1, sizeof *in);
    struct metrics *m = NULL;
    struct device_info dev;
    struct fatal_ctx fatal = {NULL, 0};
    if (world < 2) { /* alone, outside mpirun: say so plainly, no job to abort */
        char err[1024];
        int bad = config_load(path, cfg, err, sizeof err) != 0;
        if (bad) fprintf(stderr, "libra: %s\n", err);
        else
            fprintf(stderr, "libra: %s: a job needs at least 2 ranks (1 controller + workers)\n"
                            "usage: %s\n(`libra check-config %s` says how many its plans "
                            "need; `libra --help` lists the commands)\n", path, job_cmd.usage,
                    path);
        free(rs);
        free(cfg);
        free(in);
        MPI_CHECK(MPI_Finalize());
        return bad ? LIBRA_EXIT_FAILED : LIBRA_EXIT_USAGE;
    }
    if (rank == 0 && yields)
        printf("libra: srun runs up to %d tasks on a node with %d CPUs: Open MPI yields the "
               "CPU while it waits (OMPI_MCA_mpi_yield_when_idle=1, as mpirun sets it)\n",
               node_tasks, node_cpus);
    if (rank == 0) {
        m = prepare(path, world, cfg, in, &dev, rs);
        if (rs->resume && metrics_attr_int(m, "resumed_from_step", rs->step))
            FATAL("metrics: cannot write an attribute");
        if (rs->resume && rs->changes[0] &&
            metrics_event(m, 0.0, rs->step, EV_CONFIG_CHANGE, rs->changes))
            FATAL("metrics: cannot record an event");
        fatal.m = m;
        fatal.t0 = wall_time();
        log_set_fatal_hook(record_fatal, &fatal);
    }
    bcast_bytes(cfg, sizeof *cfg);
    bcast_bytes(in, sizeof *in);
    if (cfg->workload.trace[0]) bcast_trace(rank, in);
    share_cores(cfg);
    int start_version = rs->resume ? rs->version : 0;
    bcast_bytes(&start_version, sizeof start_version);
    log_set_level((enum log_level)log_parse_level(cfg->run.log_level));
    if (watchdog_start(cfg->run.unresponsive_s, WATCHDOG_FLOOR_S, on_stuck, NULL))
        FATAL("cannot start the watchdog thread");
    int rc = rank == 0 ? controller_run(cfg, &in->cm, &in->wl, &dev, m, world,
                                        rs->resume ? &rs->state : NULL, rs->step)
                       : worker_run(cfg, &in->cm, &in->wl, rank, world, start_version);
    if (rank == 0 && rs->resume) ckpt_state_free(&rs->state);
    MPI_Request req;
    watchdog_tick("the final barrier (every rank ends together)");
    MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &req));
    mpi_wait_backoff(&req, NULL);
    watchdog_stop();
    if (rank == 0) {
        log_set_fatal_hook(NULL, NULL);
        if (metrics_close(m, rc == 0 ? "complete" : rc == LIBRA_EXIT_CANCELLED ? "cancelled"
                                                                              : "failed"))
            FATAL("metrics: cannot close the metrics file");
        if (rs->lock_root[0]) ckpt_unlock(rs->lock_root);
    }
    free(rs);
    free(cfg);
    free(in);
    MPI_CHECK(MPI_Finalize());
    return rc;
}
