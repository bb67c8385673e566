/*
 * The program's entry points, kept out of main.c: the command line (driver_main), the
 * MPI job (driver_run_job) and the commands. Each command takes its own command line
 * from argv[0] = its word ("generate", "--check-config"), parses it with cli.h and
 * returns the process exit code (include/libra/exit_codes.h).
 */
#ifndef LIBRA_DRIVER_H
#define LIBRA_DRIVER_H

#include "libra/config.h"
#include "libra/cost.h"
#include "libra/device.h"
#include "libra/workload.h"

/* Everything a rank needs besides the config: loaded once by rank 0, broadcast. */
struct job_inputs {
    struct cost_model cm;
    struct workload wl;
};

/* libra_main.c: `libra`'s whole command line (argv[0] the program) */
int driver_main(int argc, char **argv);
/* run.c: `libra [run] CONFIG [--resume]` */
int driver_run_job(int argc, char **argv);
/* commands.c, cmd_trace.c, devices.c */
int cmd_check_config(int argc, char **argv);
int cmd_describe_workload(int argc, char **argv);
int cmd_trace_export(int argc, char **argv);
/* cmd_phase_trace.c: libra trace RUN.h5 [OUT.json], the run's phases as a Perfetto trace */
int cmd_trace(int argc, char **argv);
int cmd_config_reference(int argc, char **argv);
int cmd_devices(int argc, char **argv);
/* cmd_model.c: commands on a model file */
int cmd_score(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_generate(int argc, char **argv);
/* cmd_export.c: libra export CHECKPOINT OUTDIR, a Hugging Face directory */
int cmd_export(int argc, char **argv);
/* bench_load.c: --write-random-hf DIR, --bench-load DIR (tools/bench-load) */
int cmd_write_random_hf(int argc, char **argv);
int cmd_bench_load(int argc, char **argv);
/* cmd_sft.c: libra sft CONFIG, the supervised warm start */
int cmd_sft(int argc, char **argv);
/* bench_engine.c */
int cmd_bench_engine(int argc, char **argv);
struct tfm_config;
/* The benchmark model shapes "tiny", "small", "100m" (byte-level vocabulary); NULL
 * for another name. */
const struct tfm_config *bench_model_shape(const char *name);
/* bench_tp.c (under mpirun) */
int cmd_bench_tp(int argc, char **argv);
/* bench_gpu.c: the GPU engine's throughput (needs the CUDA module and a GPU) */
int cmd_bench_gpu(int argc, char **argv);
/* bench_sync.c (under mpirun) */
int cmd_bench_sync(int argc, char **argv);
/* bench_sched.c: the scheduler benchmark on the rollout-cluster simulator */
int cmd_bench_sched(int argc, char **argv);
/* bench_planner.c: the planner's solve time at several GPU counts */
int cmd_bench_planner_solve(int argc, char **argv);
int cmd_bench_planner_report(int argc, char **argv);
/* bench_tokenizer.c: the BPE tokenizer's encode / decode throughput, one thread */
int cmd_bench_tokenizer(int argc, char **argv);
/* launch.c, before MPI_Init. driver_launch_check: -1 with a message when srun started
 * the tasks without PMIx (--mpi=pmi2, none) and this MPI is Open MPI, which then cannot
 * join them into one job; else 0. driver_launch_tune: under srun, when a node runs more
 * of the step's tasks than it has CPUs (SLURM_CPUS_ON_NODE where fewer), sets
 * OMPI_MCA_mpi_yield_when_idle=1 unless set, as mpirun does when oversubscribed, and
 * returns 1 with the node's most tasks and its CPUs; else 0. */
int driver_launch_check(char *err, size_t errlen);
int driver_launch_tune(int *tasks, int *cpus);
/* Loads the profiles and workload a config names; 0 or -1 with a message. */
int driver_load_inputs(const struct libra_config *cfg, struct job_inputs *in, char *err,
                       size_t errlen);
/* The metrics file of a run: output.file, else output.dir/<run.name>-<time>[-job<id>].h5
 * (output.dir created); 0 or -1 with a message. */
int driver_output_path(const struct libra_config *cfg, char *out, size_t len, char *err,
                       size_t errlen);
/* The static or scripted plans against what the device runs -- TP degrees, and, for a
 * device with a model, no rank of the world left without a role -- (0, or -1 with a
 * "file: plan.key: ..." message). */
int driver_check_plans(const struct libra_config *cfg, const struct device_info *dev, int world,
                       char *err, size_t errlen);
/* start_check.c: rank 0's checks of a run against its device and model before anything
 * is written -- the device, its description of the model (context, TP shards, the file),
 * driver_check_plans, driver_check_memory (the estimate printed), the prompts file
 * (its count printed; eval.size checked against its held-out problems, a default
 * lowered to them) -- for a world of `world` ranks. 0, or -1 with one message that
 * names the config key's file:line and the model's value. */
int driver_check_start(struct libra_config *cfg, struct job_inputs *in,
                       struct device_info *dev, int world, char *err, size_t errlen);
/* mem_check.c: the memory the ranks on rank 0's node need for the configured plans
 * (device_info's per-rank estimates; under the planner every worker may train) against
 * the node's physical memory: 0 with both in GB, or -1 with a message giving the
 * figures when it cannot fit. Devices without a model are not checked. */
int driver_check_memory(const struct libra_config *cfg, const struct device_info *dev,
                        int world, double *need_gb, double *have_gb, char *err, size_t errlen);
/* The tasks of node `node` in Slurm's compressed per-node list spec (e.g.
 * SLURM_STEP_TASKS_PER_NODE "9,8(x5)": node 0 runs 9, nodes 1-5 run 8); 0 for a node
 * past the list or a spec that is not one. */
int driver_slurm_tasks_on_node(const char *spec, int node);
/* sim_run.c: libra-sim's whole command line (src/sim_main.c; argv[0] the program). */
int driver_run_sim(int argc, char **argv);
/* cmd_report.c: libra-sim --report DIR TITLE WORKLOAD/POLICY=FILE ... */
int cmd_sim_report(int argc, char **argv);

#endif
