/*
 * libra-sim's command line: reads the same configuration file as `libra` (device
 * emu), simulates the job (job_sim.h) on the world size mpirun would be given, and
 * writes the same metrics file.
 *
 *   libra-sim CONFIG [--np N] [--out FILE] [--tick S]
 *
 * --np N is the job's rank count (1 controller + N-1 GPUs); without it a static or
 * scheduled plan's size is used, and a planner (grp) config must say it.
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/config.h"
#include "libra/driver.h"
#include "libra/job_sim.h"
#include "libra/log.h"
#include "libra/metrics.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

static void usage(FILE *out)
{
    fprintf(out, "usage: libra-sim CONFIG [--np N] [--out FILE] [--tick S] [--oracle]\n"
                 "       libra-sim --report DIR TITLE WORKLOAD/POLICY=FILE[,FILE...] ...\n"
                 "  simulates the job CONFIG would run as `mpirun -np N libra CONFIG`, in virtual\n"
                 "  time on one core, and writes the same metrics file (deterministic: the same\n"
                 "  config and N give a bitwise-identical file)\n"
                 "  --np N     ranks (1 controller + N-1 GPUs); default: the static plan's size\n"
                 "  --out FILE the metrics file (default: output.file, else output.dir/...)\n"
                 "  --tick S   controller reaction time, emulated seconds (default %g)\n"
                 "  --oracle   write the clairvoyant throughput bound of CONFIG instead\n"
                 "  --report   the experiment report of the runs' metrics files (results.md,\n"
                 "             charts) in DIR; several files of one run are its seeds\n",
            JOB_SIM_DEFAULT_TICK_S);
}

static int parse_int(const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 2 || v > 1000000) return -1;
    *out = (int)v;
    return 0;
}

struct sim_fatal {
    struct metrics *m;
};

static void record_fatal(void *ctx, const char *msg)
{
    struct sim_fatal *f = ctx;
    metrics_event(f->m, -1, -1, "error", msg);
    metrics_close(f->m, "failed");
}

/* The world a config implies without --np: its largest static / scheduled plan. */
static int implied_world(const struct libra_config *cfg)
{
    if (strcmp(cfg->plan.mode, "grp") == 0) return 0;
    int sched = strcmp(cfg->plan.mode, "schedule") == 0;
    int n = sched ? cfg->plan.n_schedule : 1, most = 0;
    for (int i = 0; i < n; i++) {
        int w = plan_spec_workers(sched ? &cfg->plan.schedule[i] : &cfg->plan.fixed);
        if (w > most) most = w;
    }
    return most + 1;
}

int driver_run_sim(int argc, char **argv)
{
    if (argc > 0 && strcmp(argv[0], "--report") == 0) return cmd_sim_report(argc - 1, argv + 1);
    const char *path = NULL, *out_arg = NULL;
    int world = 0, oracle = 0;
    double tick = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return usage(stdout), 0;
        if (strcmp(a, "--version") == 0) return printf("libra-sim %s\n", PACKAGE_VERSION), 0;
        if (strcmp(a, "--oracle") == 0) {
            oracle = 1;
        } else if ((strcmp(a, "--np") == 0 || strcmp(a, "-np") == 0) && i + 1 < argc) {
            if (parse_int(argv[++i], &world)) {
                fprintf(stderr, "libra-sim: --np %s: need an integer of at least 2\n", argv[i]);
                return 2;
            }
        } else if (strcmp(a, "--out") == 0 && i + 1 < argc) {
            out_arg = argv[++i];
        } else if (strcmp(a, "--tick") == 0 && i + 1 < argc) {
            char *end;
            tick = strtod(argv[++i], &end);
            if (*end != '\0' || !(tick > 0) || tick > 10) {
                fprintf(stderr, "libra-sim: --tick %s: need seconds in (0, 10]\n", argv[i]);
                return 2;
            }
        } else if (a[0] == '-' || path) {
            fprintf(stderr, "libra-sim: unexpected argument '%s'\n", a);
            usage(stderr);
            return 2;
        } else {
            path = a;
        }
    }
    if (!path) return usage(stderr), 2;
    struct libra_config *cfg = xmalloc(sizeof *cfg);
    struct job_inputs *in = xmalloc(sizeof *in);
    char err[1024];
    if (config_load(path, cfg, err, sizeof err)) FATAL_INPUT("%s", err);
    if (strcmp(cfg->device.type, "emu") != 0)
        FATAL_INPUT("%s: device.type = \"%s\": libra-sim simulates the emulated device only (set "
                    "device.type = \"emu\")", path, cfg->device.type);
    if (world == 0) world = implied_world(cfg);
    if (world == 0)
        FATAL_INPUT("%s: plan.mode = \"grp\" plans for any size: give the job's rank count with "
                    "--np N (1 controller + N-1 GPUs)", path);
    if (config_check_world(cfg, world, err, sizeof err) || driver_load_inputs(cfg, in, err, sizeof err))
        FATAL_INPUT("%s", err);
    char out[2 * CFG_PATH_MAX];
    if (out_arg)
        snprintf(out, sizeof out, "%s", out_arg);
    else if (driver_output_path(cfg, out, sizeof out, err, sizeof err))
        FATAL_INPUT("%s", err);
    char *text = config_to_string(cfg);
    /* "created" is the one machine-dependent attribute of a metrics file */
    struct metrics *m =
        metrics_open_as(out, text, world, cfg->device.type, "simulated", err, sizeof err);
    free(text);
    if (!m) FATAL_INPUT("%s", err);
    if (metrics_attr_string(m, "simulator", "libra-sim " PACKAGE_VERSION))
        FATAL("metrics: cannot write the simulator attribute");
    struct sim_fatal fatal = {m};
    log_set_fatal_hook(record_fatal, &fatal);
    printf("libra-sim %s: %s as %d ranks (1 controller + %d GPUs), virtual time\n",
           PACKAGE_VERSION, path, world, world - 1);
    fflush(stdout);
    struct job_sim_config jc = {cfg, &in->cm, &in->wl, world, tick};
    struct job_sim_stats st;
    double t0 = wall_time();
    if (oracle) {
        if (job_sim_oracle(&jc, m, err, sizeof err)) FATAL("%s", err);
        log_set_fatal_hook(NULL, NULL);
        if (metrics_close(m, "complete")) FATAL("metrics: cannot close %s", out);
        printf("libra-sim: oracle bound of %d steps in %.2f wall s; metrics in %s\n",
               cfg->run.steps, wall_time() - t0, out);
        free(in);
        free(cfg);
        return 0;
    }
    if (job_sim_run(&jc, m, &st, err, sizeof err)) FATAL("%s", err);
    double wall = wall_time() - t0;
    log_set_fatal_hook(NULL, NULL);
    if (metrics_close(m, "complete")) FATAL("metrics: cannot close %s", out);
    printf("libra-sim: %.0f emulated s in %.2f wall s (%.0fx) | %lld events (%.2f M/s): %lld "
           "messages, %lld engine advances, %lld timers, %lld clock stops | planner %d searches, "
           "%.3f s\n",
           st.virtual_s, wall, wall > 0 ? st.virtual_s / wall : 0, (long long)st.events,
           wall > 0 ? st.events / wall / 1e6 : 0,
           (long long)(st.messages_in + st.messages_out), (long long)st.engine_advances,
           (long long)st.timers, (long long)st.stops, st.planner_solves, st.planner_solve_s);
    free(in);
    free(cfg);
    return 0;
}
