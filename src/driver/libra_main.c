/*
 * `libra`'s command line (src/main.c): the table of commands, each with its one-line
 * description for `libra --help`, and the dispatch. `libra NAME ...` runs a command;
 * the commands spelled `libra --NAME` before keep that spelling. Anything else is
 * the MPI job, `libra [run] CONFIG [--resume]`. Each command parses its own options
 * (include/libra/cli.h) from argv[0] = its word on.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "libra/driver.h"
#include "libra/exit_codes.h"

struct command {
    const char *name;
    int dashed; /* also `libra --NAME`, the older spelling */
    int (*run)(int argc, char **argv);
    const char *what;
};

static const struct command commands[] = {
    {"run", 0, driver_run_job, "the job (under mpirun): rank 0 controller, N-1 workers"},
    {"sft", 0, cmd_sft, "supervised warm start on expert demonstrations"},
    {"check-config", 1, cmd_check_config, "validate a configuration, print it resolved"},
    {"config-reference", 1, cmd_config_reference, "every configuration key (Markdown)"},
    {"describe-workload", 1, cmd_describe_workload, "statistics of a workload preset"},
    {"trace", 0, cmd_trace, "a run's phases per rank as a Perfetto / Chrome trace (JSON)"},
    {"trace-export", 1, cmd_trace_export, "a run's rollouts as a trace workload.trace replays"},
    {"devices", 1, cmd_devices, "the GPUs this build can use, or why none"},
    {"score", 0, cmd_score, "log-prob of each token of a file given the ones before"},
    {"logits", 0, cmd_logits, "the logits of one sequence, to an HDF5 file"},
    {"generate", 0, cmd_generate, "continue a prompt with a model"},
    {"export", 0, cmd_export, "a run's model as a Hugging Face directory"},
    {"bench-engine", 1, cmd_bench_engine, "CPU engine throughput against the GEMM peak"},
    {"bench-tp", 1, cmd_bench_tp, "tensor-parallel decode, TP 1 .. N (under mpirun)"},
    {"bench-gpu", 1, cmd_bench_gpu, "GPU engine throughput against the GPU's peaks"},
    {"bench-sync", 1, cmd_bench_sync, "weight syncs, shard-matched vs broadcast (under mpirun)"},
    {"bench-sched", 1, cmd_bench_sched, "the scheduler on a simulated 16-GPU cluster"},
    {"bench-planner-solve", 1, cmd_bench_planner_solve, "the planner's solve time by GPU count"},
    {"bench-planner-report", 1, cmd_bench_planner_report, "a table of planner runs' throughput"},
    {"bench-tokenizer", 1, cmd_bench_tokenizer, "BPE tokenizer throughput, one thread"},
    {"write-random-hf", 1, cmd_write_random_hf, "a random Hugging Face model (tools/bench-load)"},
    {"bench-load", 1, cmd_bench_load, "model loading throughput (tools/bench-load)"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

#define USAGE                                                                                \
    "usage: mpirun -np N libra [run] CONFIG [--resume]\n"                                    \
    "       libra COMMAND [ARGUMENTS] [OPTIONS]\n"                                            \
    "       libra --help | --version\n"

static void usage(FILE *out)
{
    fprintf(out,
            "libra %s: agentic RL post-training as one MPI job\n" USAGE
            "`libra COMMAND --help` gives a command's arguments and options. The commands\n"
            "spelled `libra --COMMAND` before (libra --check-config FILE) still are.\n"
            "\ncommands:\n",
            PACKAGE_VERSION);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-22s %s\n", commands[i].name, commands[i].what);
    fprintf(out, "\nexit status: 0 done; 1 failed; 2 a usage error; 3 stopped by a signal (the "
                 "job);\n4 a rank stopped responding (the job)\n");
}

int driver_main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "libra: no command or configuration given\n");
        usage(stderr);
        return LIBRA_EXIT_USAGE;
    }
    const char *a = argv[1];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return usage(stdout), 0;
    if (strcmp(a, "--version") == 0) return printf("libra %s\n", PACKAGE_VERSION), 0;
    for (size_t i = 0; i < N_COMMANDS; i++) {
        const struct command *c = &commands[i];
        if (strcmp(a, c->name) == 0 || (c->dashed && a[0] == '-' && a[1] == '-' &&
                                         strcmp(a + 2, c->name) == 0))
            return c->run(argc - 1, argv + 1);
    }
    if (a[0] == '-' && strcmp(a, "--resume") != 0) {
        fprintf(stderr, "libra: unknown command or option '%s'\n" USAGE
                        "Try 'libra --help' for the commands.\n", a);
        return LIBRA_EXIT_USAGE;
    }
    return driver_run_job(argc, argv); /* libra CONFIG ...: argv[0] stands for "run" */
}
