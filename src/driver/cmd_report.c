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

#include "libra/driver.h"
#include "libra/exp_report.h"
#include "libra/log.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: libra-sim --report DIR TITLE WORKLOAD/POLICY=FILE[,FILE...] ...\n"
            "  writes DIR/results.md (a table per workload: trajectories and tokens per\n"
            "  emulated second, ratios to sync-colocated and static-async, fraction of the\n"
            "  oracle, GPU idle fractions, p99 latency) and the charts DIR/throughput,\n"
            "  DIR/allocation-WORKLOAD, DIR/drift-WORKLOAD, each as .png, .svg and .csv (the\n"
            "  plotted data)\n"
            "  FILE: a run's metrics file, or one per seed separated by ',' (the k-th file of\n"
            "  every run is seed k; cells become the mean and [min, max]); POLICY \"oracle\":\n"
            "  libra-sim --oracle's file\n");
}

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
    if (argc >= 1 && (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc < 3 || argv[0][0] == '\0') {
        usage(stderr);
        return 2;
    }
    int n = argc - 2, rc = 0;
    struct exp_run *runs = xcalloc((size_t)n, sizeof *runs);
    char **bufs = xcalloc((size_t)n, sizeof *bufs);
    for (int i = 0; i < n && rc == 0; i++)
        if (parse_run(argv[2 + i], &bufs[i], &runs[i])) {
            fprintf(stderr, "libra-sim --report: '%s' is not WORKLOAD/POLICY=FILE\n", argv[2 + i]);
            usage(stderr);
            rc = 2;
        }
    if (rc == 0) {
        char err[2048];
        if (exp_report(argv[0], argv[1], runs, n, err, sizeof err)) {
            fprintf(stderr, "libra-sim: %s\n", err);
            rc = 1;
        } else {
            size_t len = strlen(argv[0]);
            while (len > 1 && argv[0][len - 1] == '/') len--;
            printf("%.*s/results.md\n", (int)len, argv[0]);
        }
    }
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    free(runs);
    return rc;
}
