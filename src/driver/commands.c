/*
 * Single-process commands: validate and print a configuration, describe a
 * workload preset, write the configuration reference. None of them needs mpirun.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/config.h"
#include "libra/driver.h"
#include "libra/inputs.h"
#include "libra/log.h"
#include "libra/workload.h"

#ifndef LIBRA_PKGDATADIR /* the build defines it; this keeps a bare compile working */
#define LIBRA_PKGDATADIR "/usr/local/share/libra"
#endif

int cmd_check_config(const char *path)
{
    struct libra_config *cfg = xcalloc(1, sizeof *cfg);
    struct job_inputs *in = xcalloc(1, sizeof *in);
    char err[1024];
    int rc = 1;
    if (config_load(path, cfg, err, sizeof err) || driver_load_inputs(cfg, in, err, sizeof err)) {
        fprintf(stderr, "libra: %s\n", err);
        goto out;
    }
    char *text = config_to_string(cfg);
    fputs(text, stdout);
    free(text);
    int need = plan_spec_workers(&cfg->plan.fixed);
    if (strcmp(cfg->plan.mode, "schedule") == 0) {
        need = 0;
        for (int i = 0; i < cfg->plan.n_schedule; i++)
            if (plan_spec_workers(&cfg->plan.schedule[i]) > need)
                need = plan_spec_workers(&cfg->plan.schedule[i]);
    }
    printf("# the plans need %d workers: run with mpirun -np %d (or more)\n", need, need + 1);
    rc = 0;
out:
    free(cfg);
    free(in);
    return rc;
}

int cmd_describe_workload(int argc, char **argv)
{
    if (argc < 1) {
        fprintf(stderr, "usage: libra --describe-workload FILE [--n N] [--seed S] [--step K]\n");
        return 2;
    }
    long n = 20000, step = 0;
    unsigned long long seed = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        char *end = NULL;
        if (strcmp(argv[i], "--n") == 0) n = strtol(argv[i + 1], &end, 10);
        else if (strcmp(argv[i], "--seed") == 0) seed = strtoull(argv[i + 1], &end, 10);
        else if (strcmp(argv[i], "--step") == 0) step = strtol(argv[i + 1], &end, 10);
        if (!end || *end || n < 1 || n > 10000000 || step < 0) {
            fprintf(stderr, "libra: --describe-workload: bad option '%s %s' (--n 1..1e7, --seed "
                    "S >= 0, --step K >= 0)\n", argv[i], argv[i + 1]);
            return 2;
        }
    }
    struct workload *wl = xcalloc(1, sizeof *wl);
    char err[1024];
    char shipped[CFG_PATH_MAX]; /* a preset named as under inputs/: workloads/NAME.cfg */
    const char *file = inputs_find(argv[0], shipped, sizeof shipped) == 0 ? shipped : argv[0];
    if (workload_load(file, wl, err, sizeof err)) {
        fprintf(stderr, "libra: %s\n", err);
        free(wl);
        return 1;
    }
    workload_describe(wl, seed, (int)n, (int)step, stdout);
    free(wl);
    return 0;
}

int cmd_config_reference(const char *format)
{
    if (strcmp(format, "man") == 0) {
        config_write_reference_man(stdout, PACKAGE_VERSION, LIBRA_PKGDATADIR);
    } else if (strcmp(format, "markdown") == 0) {
        config_write_reference(stdout);
    } else {
        fprintf(stderr, "libra: --config-reference=%s: unknown format (markdown or man)\n", format);
        return 2;
    }
    return 0;
}
