/* libra: agentic RL post-training as one MPI job. Thin entry point (see driver.h). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "libra/driver.h"

static void usage(FILE *out)
{
    fprintf(out,
            "libra %s: agentic RL post-training as one MPI job\n"
            "usage:\n"
            "  mpirun -np N libra CONFIG [--resume]\n"
            "                                     run a job (rank 0 controller, N-1 workers);\n"
            "                                     --resume: from the newest complete checkpoint\n"
            "  libra sft CONFIG                   supervised warm start on expert demonstrations\n"
            "  libra --check-config CONFIG        validate, print the resolved configuration\n"
            "  libra --describe-workload FILE [--n N] [--seed S] [--step K]\n"
            "                                     statistics of a workload preset\n"
            "  libra --trace-export RUN.h5 [OUT.jsonl]\n"
            "                                     a run's rollouts as a trace workload.trace replays\n"
            "  libra --config-reference[=man]     every configuration key (Markdown, or the\n"
            "                                     libra.cfg(5) man page)\n"
            "  libra --devices                    GPUs this build can use\n"
            "  libra score MODEL TOKENS_FILE      log-prob of each token given the ones before\n"
            "  libra logits MODEL TOKENS_FILE OUT.h5\n"
            "                                     the logits of one sequence: /logits (T, V)\n"
            "  libra generate MODEL [--prompt TEXT | --prompt-tokens FILE] [--max-new N]\n"
            "                 [--temperature T] [--top-p P] [--top-k K] [--seed S]\n"
            "                 [--chat] [--tokenizer DIR] [--device cpu|cuda]\n"
            "                                     MODEL: an HDF5 model file, a run checkpoint\n"
            "                                     directory or a Hugging Face directory\n"
            "  libra export CHECKPOINT OUTDIR [--dtype bf16|f16|f32] [--max-shard-size BYTES]\n"
            "               [--tokenizer DIR]     a run's model as a Hugging Face directory\n"
            "  libra --bench-engine [tiny|small|100m ...]   CPU engine throughput\n"
            "  mpirun -np N libra --bench-tp [tiny|small|100m]  TP decode, TP 1 .. N\n"
            "  libra --bench-gpu [qwen3-0.6b|qwen3-4b|llama3-8b] [--batch B,...]  GPU engine\n"
            "  mpirun -np N libra --bench-sync CONFIG      weight syncs: shard-matched vs broadcast\n"
            "  libra --bench-sched [--workload NAME] [--steps N] [--seed S] [--latency]\n"
            "  libra --bench-planner-solve CONFIG [--gpus N[,N...]] [--repeat R]\n"
            "  libra --bench-planner-report LABEL=FILE[,FILE...] ...\n"
            "                                     scheduler benchmark (simulated 16-GPU cluster)\n"
            "  libra --bench-tokenizer TOKENIZER_DIR [CORPUS_FILE] [--repeat R] [--seconds S]\n"
            "                                     BPE tokenizer throughput (MB/s, one thread)\n"
            "  libra --version | --help\n",
            PACKAGE_VERSION);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *a = argv[1];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return usage(stdout), 0;
    if (strcmp(a, "--version") == 0) return printf("libra %s\n", PACKAGE_VERSION), 0;
    if (strcmp(a, "--check-config") == 0) {
        if (argc != 3) return usage(stderr), 2;
        return cmd_check_config(argv[2]);
    }
    if (strcmp(a, "--describe-workload") == 0) return cmd_describe_workload(argc - 2, argv + 2);
    if (strcmp(a, "--trace-export") == 0) return cmd_trace_export(argc - 2, argv + 2);
    if (strncmp(a, "--config-reference", 18) == 0 && (a[18] == '\0' || a[18] == '='))
        return cmd_config_reference(a[18] ? a + 19 : "markdown");
    if (strcmp(a, "--devices") == 0) return cmd_devices();
    if (strcmp(a, "score") == 0) return cmd_score(argc - 2, argv + 2);
    if (strcmp(a, "logits") == 0) return cmd_logits(argc - 2, argv + 2);
    if (strcmp(a, "generate") == 0) return cmd_generate(argc - 2, argv + 2);
    if (strcmp(a, "sft") == 0) return cmd_sft(argc - 2, argv + 2);
    if (strcmp(a, "export") == 0) return cmd_export(argc - 2, argv + 2);
    /* hidden: tools/bench-load */
    if (strcmp(a, "--write-random-hf") == 0) return cmd_write_random_hf(argc - 2, argv + 2);
    if (strcmp(a, "--bench-load") == 0) return cmd_bench_load(argc - 2, argv + 2);
    if (strcmp(a, "--bench-engine") == 0) return cmd_bench_engine(argc - 2, argv + 2);
    if (strcmp(a, "--bench-tp") == 0) return cmd_bench_tp(argc - 2, argv + 2);
    if (strcmp(a, "--bench-gpu") == 0) return cmd_bench_gpu(argc - 2, argv + 2);
    if (strcmp(a, "--bench-sync") == 0) return cmd_bench_sync(argc - 2, argv + 2);
    if (strcmp(a, "--bench-sched") == 0) return cmd_bench_sched(argc - 2, argv + 2);
    if (strcmp(a, "--bench-planner-solve") == 0) return cmd_bench_planner_solve(argc - 2, argv + 2);
    if (strcmp(a, "--bench-planner-report") == 0) return cmd_bench_planner_report(argc - 2, argv + 2);
    if (strcmp(a, "--bench-tokenizer") == 0) return cmd_bench_tokenizer(argc - 2, argv + 2);
    if (a[0] == '-') {
        fprintf(stderr, "libra: unknown option '%s'\n", a);
        usage(stderr);
        return 2;
    }
    return driver_run_job(argc, argv);
}
