/*
 * libra-sim's command line: reads the same configuration file as `libra` (device
 * emu), simulates the job (job_sim.h) on the world size mpirun would be given, and
 * writes the same metrics file.
 *
 *   libra-sim CONFIG [--np N] [--out FILE] [--tick S] [--oracle]
 *   libra-sim --report ...     (cmd_report.c)
 *
 * --np N is the job's rank count (1 controller + N-1 GPUs); without it a static or
 * scheduled plan's size is used, and a planner (grp) config must say it. Options are
 * read long-only: -np N is --np N, as mpirun spells it.
 */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/cli.h"
#include "libra/config.h"
#include "libra/driver.h"
#include "libra/job_sim.h"
#include "libra/log.h"
#include "libra/metrics.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

#define TICK_STR_(x) #x
#define TICK_STR(x) TICK_STR_(x)

static const struct option sim_opts[] = {
    {"np", required_argument, NULL, 'n'},
    {"out", required_argument, NULL, 'o'},
    {"tick", required_argument, NULL, 't'},
    {"oracle", no_argument, NULL, 'O'},
    {0}};
static const struct cli_cmd sim_cmd = {
    "libra-sim",
    "libra-sim CONFIG [--np N] [--out FILE] [--tick S] [--oracle]\n"
    "       libra-sim --report DIR TITLE WORKLOAD/POLICY=FILE[,FILE...] ...",
    "Simulates the job CONFIG would run as `mpirun -np N libra CONFIG` (device.type =\n"
    "\"emu\"), in virtual time on one core, and writes the same metrics file\n"
    "(deterministic: the same config and N give a bitwise-identical file).\n"
    "  --np N     ranks (1 controller + N-1 GPUs), 2 .. 1000000; default: the static\n"
    "             plan's size (a plan.mode = \"grp\" config must say it)\n"
    "  --out FILE the metrics file (default: output.file, else output.dir/...)\n"
    "  --tick S   controller reaction time, emulated seconds in (0, 10] (default "
    TICK_STR(JOB_SIM_DEFAULT_TICK_S) ")\n"
    "  --oracle   write the clairvoyant throughput bound of CONFIG instead\n"
    "  --report   the experiment report of the runs' metrics files (results.md, charts) in\n"
    "             DIR; first on the line (libra-sim --report --help)\n",
    sim_opts, "CONFIG", 1, 1, 1};

struct sim_fatal {
    struct metrics *m;
};

static void record_fatal(void *ctx, const char *msg)
{
    struct sim_fatal *f = ctx;
    metrics_event(f->m, -1, -1, EV_ERROR, msg);
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
    if (argc > 1 && strcmp(argv[1], "--report") == 0) return cmd_sim_report(argc - 1, argv + 1);
    const char *out_arg = NULL;
    int world = 0, oracle = 0, ch;
    double tick = 0;
    struct cli cli;
    cli_begin(&cli, &sim_cmd, argc, argv);
    while ((ch = cli_next(&cli)) > 0) {
        if (ch == 'O') oracle = 1;
        else if (ch == 'o') out_arg = cli.arg;
        else if (ch == 'n' ? cli_int(&cli, 2, 1000000, &world)
                           : cli_double_open(&cli, 0, 10, &tick))
            return cli.rc;
    }
    if (ch == CLI_EXIT) return cli.rc;
    const char *path = cli.args[0];
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
