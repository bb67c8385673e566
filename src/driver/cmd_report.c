/*
 * `libra-sim --report DIR TITLE WORKLOAD/POLICY=FILE[,FILE...] ...`: the experiment suite's
 * report (exp_report.h) from the runs' metrics files: DIR/results.md and the charts
 * (PNG, SVG and their data as CSV). Each run is named by its workload and policy (split at the first '/';
 * the file follows the first '='); the policies "sync-colocated", "static-async"
 * and "oracle" are the baselines of the ratios. Prints the path of results.md.
 * Exit status: 0 written, 1 a run's file or the report could not be read / written,
 * 2 bad arguments (usage on stderr).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/cli.h"
#include "libra/driver.h"
#include "libra/exp_report.h"
#include "libra/log.h"

static const struct cli_cmd report_cmd = {
    "libra-sim --report", "libra-sim --report DIR TITLE WORKLOAD/POLICY=FILE[,FILE...] ...",
    "Writes DIR/results.md (a table per workload: trajectories and tokens per emulated\n"
    "second, ratios to sync-colocated and static-async, fraction of the oracle, GPU idle\n"
    "fractions, p99 latency) and the charts DIR/throughput, DIR/allocation-WORKLOAD,\n"
    "DIR/drift-WORKLOAD, each as .png, .svg and .csv (the plotted data).\n"
    "  FILE: a run's metrics file, or one per seed separated by ',' (the k-th file of\n"
    "  every run is seed k; cells become the mean and [min, max]); POLICY \"oracle\":\n"
    "  libra-sim --oracle's file\n",
    NULL, "DIR TITLE WORKLOAD/POLICY=FILE ...", 3, -1, 0};

/* Splits "WORKLOAD/POLICY=FILE" into a copy (*buf, free it) and run; 0 or -1. */
static int parse_run(const char *arg, char **buf, struct exp_run *run)
{
    const char *eq = strchr(arg, '=');
    const char *slash = eq ? memchr(arg, '/', (size_t)(eq - arg)) : NULL;
    if (!slash || slash == arg || slash + 1 == eq || eq[1] == '\0') return -1;
    char *c = xstrdup(arg);
    c[slash - arg] = '\0';
    c[eq - arg] = '\0';
    *run = (struct exp_run){.workload = c, .policy = c + (slash - arg) + 1,
                            .path = c + (eq - arg) + 1};
    *buf = c;
    return 0;
}

int cmd_sim_report(int argc, char **argv)
{
    struct cli cli;
    if (cli_operands(&cli, &report_cmd, argc, argv) == CLI_EXIT) return cli.rc;
    const char *dir = cli.args[0];
    if (dir[0] == '\0') return cli_error(&cli, "DIR is empty");
    int n = cli.nargs - 2, rc = 0;
    struct exp_run *runs = xcalloc((size_t)n, sizeof *runs);
    char **bufs = xcalloc((size_t)n, sizeof *bufs);
    for (int i = 0; i < n && rc == 0; i++)
        if (parse_run(cli.args[2 + i], &bufs[i], &runs[i]))
            rc = cli_error(&cli, "'%s' is not WORKLOAD/POLICY=FILE", cli.args[2 + i]);
    if (rc == 0) {
        char err[2048];
        if (exp_report(dir, cli.args[1], runs, n, err, sizeof err)) {
            fprintf(stderr, "libra-sim: %s\n", err);
            rc = 1;
        } else {
            size_t len = strlen(dir);
            while (len > 1 && dir[len - 1] == '/') len--;
            printf("%.*s/results.md\n", (int)len, dir);
        }
    }
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    free(runs);
    return rc;
}
