/*
 * Single-process commands: validate and print a configuration, describe a
 * workload preset, write the configuration reference. None of them needs mpirun.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/cli.h"
#include "libra/config.h"
#include "libra/driver.h"
#include "libra/inputs.h"
#include "libra/log.h"
#include "libra/workload.h"

static const struct cli_cmd check_config_cmd = {
    "libra check-config", "libra check-config CONFIG",
    "Validates the configuration file CONFIG (and the profiles and workload it names),\n"
    "makes the checks the start of a run makes against the device and the model (its\n"
    "context, the TP degrees that shard it, the memory estimate, the prompts file), and\n"
    "prints it resolved, every key with its value, and the rank count its plans need.\n",
    NULL, "CONFIG", 1, 1, 0};

int cmd_check_config(int argc, char **argv)
{
    struct cli cli;
    if (cli_operands(&cli, &check_config_cmd, argc, argv) == CLI_EXIT) return cli.rc;
    const char *path = cli.args[0];
    struct libra_config *cfg = xcalloc(1, sizeof *cfg);
    struct job_inputs *in = xcalloc(1, sizeof *in);
    char err[1024];
    int rc = 1;
    struct device_info *dev = xcalloc(1, sizeof *dev);
    if (config_load(path, cfg, err, sizeof err) || driver_load_inputs(cfg, in, err, sizeof err)) {
        fprintf(stderr, "libra: %s\n", err);
        goto out;
    }
    int need = plan_spec_workers(&cfg->plan.fixed);
    if (strcmp(cfg->plan.mode, "schedule") == 0) {
        need = 0;
        for (int i = 0; i < cfg->plan.n_schedule; i++)
            if (plan_spec_workers(&cfg->plan.schedule[i]) > need)
                need = plan_spec_workers(&cfg->plan.schedule[i]);
    }
    /* what the start of a run checks against the device and the model, for the
     * smallest job the plans fit */
    if (driver_check_start(cfg, in, dev, need + 1, err, sizeof err)) {
        fprintf(stderr, "libra: %s\n", err);
        goto out;
    }
    char *text = config_to_string(cfg);
    fputs(text, stdout);
    free(text);
    printf("# the plans need %d workers: run with mpirun -np %d (or more)\n", need, need + 1);
    rc = 0;
out:
    free(dev);
    free(cfg);
    free(in);
    return rc;
}

static const struct option describe_opts[] = {
    {"n", required_argument, NULL, 'n'},
    {"seed", required_argument, NULL, 's'},
    {"step", required_argument, NULL, 'k'},
    {0}};
static const struct cli_cmd describe_cmd = {
    "libra describe-workload", "libra describe-workload FILE [--n N] [--seed S] [--step K]",
    "Length, turn and tool statistics of the workload FILE (inputs/workloads/*.cfg) over N\n"
    "sampled trajectories.\n"
    "  --n N       trajectories to sample, 1 .. 10000000 (default 20000)\n"
    "  --seed S    the sampling seed (default 1)\n"
    "  --step K    the training step they are drawn at, for drifting workloads (default 0)\n",
    describe_opts, "FILE", 1, 1, 0};

int cmd_describe_workload(int argc, char **argv)
{
    int n = 20000, step = 0;
    uint64_t seed = 1;
    struct cli cli;
    int ch;
    cli_begin(&cli, &describe_cmd, argc, argv);
    while ((ch = cli_next(&cli)) > 0) {
        int bad = ch == 'n' ? cli_int(&cli, 1, 10000000, &n)
                : ch == 's' ? cli_u64(&cli, &seed)
                            : cli_int(&cli, 0, 1000000000, &step);
        if (bad) return cli.rc;
    }
    if (ch == CLI_EXIT) return cli.rc;
    struct workload *wl = xcalloc(1, sizeof *wl);
    char err[1024];
    char shipped[CFG_PATH_MAX]; /* a preset named as under inputs/: workloads/NAME.cfg */
    const char *file = inputs_find(cli.args[0], shipped, sizeof shipped) == 0 ? shipped
                                                                             : cli.args[0];
    if (workload_load(file, wl, err, sizeof err)) {
        fprintf(stderr, "libra: %s\n", err);
        free(wl);
        return 1;
    }
    workload_describe(wl, seed, n, step, stdout);
    free(wl);
    return 0;
}

#ifndef LIBRA_PKGDATADIR /* the build defines it; this keeps a bare compile working */
#define LIBRA_PKGDATADIR "/usr/local/share/libra"
#endif

static const struct option reference_opts[] = {{"format", required_argument, NULL, 'f'}, {0}};
static const struct cli_cmd reference_cmd = {
    "libra config-reference", "libra config-reference [--format markdown|man]",
    "Writes the reference of every configuration key, its type, default and range: in\n"
    "Markdown (docs/config.md is its output), or as the libra.cfg(5) man page.\n"
    "  --format F  markdown (default) or man\n",
    reference_opts, NULL, 0, 0, 0};

int cmd_config_reference(int argc, char **argv)
{
    struct cli cli;
    int ch, man = 0;
    cli_begin(&cli, &reference_cmd, argc, argv);
    while ((ch = cli_next(&cli)) > 0)
        if ((man = cli_choice(&cli, "markdown|man")) < 0) return cli.rc;
    if (ch == CLI_EXIT) return cli.rc;
    if (man) config_write_reference_man(stdout, PACKAGE_VERSION, LIBRA_PKGDATADIR);
    else config_write_reference(stdout);
    return 0;
}
