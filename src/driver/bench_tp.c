/*
 * `mpirun -np N libra bench-tp [tiny|small|100m]` (also --bench-tp): decode of a
 * tensor-parallel CPU
 * instance at TP 1, 2, 4 ... (every power of two up to N), the ranks of the instance
 * being the first t ranks of the job (the others wait). It is what a rollout instance
 * of the CPU device runs: tfm_decoder_create_tp on each rank's shard, the device's MPI
 * all-reduces (src/device/cpu/cpu_comm.c), and sampler_sample_tp (greedy) for every
 * row, so the figures include the distributed sampling.
 *
 * Per TP degree: decode latency per token at batch 1 and tokens/s at batch 32, both
 * after a 64-token prompt, 32 steps, best of 3 (every repetition from the same cache
 * length), with the ratio to TP 1; and the time of one all-reduce of a (1, C) and a
 * (32, C) float row block on the group -- a decode step makes 2 L + 1 of them plus
 * the sampler's -- so the share of a step spent in communication can be read off.
 * Run each rank single-threaded (OPENBLAS_NUM_THREADS=1) on its own core: with fewer
 * cores than ranks the figures measure the oversubscription, not TP.
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libra/cli.h"
#include "libra/device_cpu.h"
#include "libra/driver.h"
#include "libra/log.h"
#include "libra/mpi_wait.h"
#include "libra/sampler.h"
#include "libra/tfm_decode.h"
#include "libra/tfm_tp.h"

enum { PROMPT = 64, STEPS = 32, REPS = 3, BATCH = 32 };

struct tp_result {
    double lat_s;      /* per token at batch 1 */
    double tok_s;      /* tokens/s at batch 32 */
    double ar1_s, ar32_s; /* one all-reduce of (1, C) and (32, C) floats */
};

/* Seconds of `steps` decode steps of n slots (tokens sampled greedily), best of REPS. */
static double time_decode(struct tfm_decoder *d, const struct tfm_tp *tp, int n, MPI_Comm comm)
{
    int Vl = tp->v1 - tp->v0;
    float *logits = xmalloc((size_t)n * Vl * sizeof *logits);
    struct sampler_config sc = {0, 1, 0, 1};
    float *scratch = xmalloc(sampler_tp_scratch_floats(&sc, tp) * sizeof *scratch);
    int32_t prompt[PROMPT], next[BATCH];
    int slots[BATCH];
    for (int i = 0; i < PROMPT; i++) prompt[i] = (i * 7) % 256;
    for (int s = 0; s < n; s++) {
        tfm_decoder_truncate(d, s, 0);
        tfm_decoder_prefill(d, s, prompt, PROMPT, NULL);
        slots[s] = s;
    }
    double best = INFINITY;
    for (int rep = 0; rep < REPS; rep++) {
        for (int s = 0; s < n; s++) {
            tfm_decoder_truncate(d, s, PROMPT);
            next[s] = prompt[s % PROMPT];
        }
        MPI_CHECK(MPI_Barrier(comm));
        double t0 = wall_time();
        for (int step = 0; step < STEPS; step++) {
            tfm_decoder_step(d, slots, next, n, logits);
            for (int s = 0; s < n; s++)
                next[s] = sampler_sample_tp(&sc, tp, logits + (size_t)s * Vl, s, PROMPT + step,
                                            NULL, scratch);
        }
        double dt = wall_time() - t0;
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, comm));
        if (dt < best) best = dt;
    }
    free(logits);
    free(scratch);
    return best;
}

static double time_allreduce(const struct tfm_comm *tc, int n)
{
    float *x = xcalloc((size_t)n, sizeof *x);
    double best = INFINITY;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = wall_time();
        for (int k = 0; k < 100; k++) tc->allreduce_f32(tc->ctx, x, (size_t)n, TFM_RED_SUM);
        double dt = (wall_time() - t0) / 100;
        if (dt < best) best = dt;
    }
    free(x);
    return best;
}

/* The first t ranks decode as one TP-t instance; the others wait. */
static int run_tp(const struct tfm_config *c, int t, int rank, struct tp_result *out)
{
    MPI_Comm group;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, rank < t ? 0 : MPI_UNDEFINED, rank, &group));
    if (group == MPI_COMM_NULL) return 0;
    struct tfm_comm *tc = device_cpu_comm_create(group), *kv = NULL;
    MPI_Comm kv_comm = MPI_COMM_NULL;
    if (c->n_kv_heads < t) {
        int share = t / c->n_kv_heads;
        MPI_CHECK(MPI_Comm_split(group, rank / share, rank, &kv_comm));
        kv = device_cpu_comm_create(kv_comm);
    }
    struct tfm_tp tp;
    tfm_tp_init(&tp, c, t, rank, t > 1 ? tc : NULL, kv);
    struct tfm_params p;
    tfm_params_alloc(&p, &tp.local); /* zero weights: decode time does not depend on them */
    struct tfm_decoder *d = tfm_decoder_create_tp(&tp, &p, BATCH, PROMPT + STEPS + 8, 64);
    out->lat_s = time_decode(d, &tp, 1, group) / STEPS;
    out->tok_s = (double)BATCH * STEPS / time_decode(d, &tp, BATCH, group);
    out->ar1_s = t > 1 ? time_allreduce(tc, c->hidden_size) : 0;
    out->ar32_s = t > 1 ? time_allreduce(tc, BATCH * c->hidden_size) : 0;
    tfm_decoder_free(d);
    tfm_params_free(&p);
    if (kv) device_cpu_comm_free(kv);
    if (kv_comm != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&kv_comm));
    device_cpu_comm_free(tc);
    MPI_CHECK(MPI_Comm_free(&group));
    return 1;
}

static const struct cli_cmd bench_tp_cmd = {
    "libra bench-tp", "mpirun -np N libra bench-tp [tiny|small|100m]",
    "Decode of a tensor-parallel CPU instance at TP 1, 2, 4 ... up to N: latency at batch 1,\n"
    "tokens/s at batch 32 and all-reduce times, for a model size (default 100m). Run each\n"
    "rank single-threaded (OPENBLAS_NUM_THREADS=1) on its own core.\n",
    NULL, NULL, 0, 1, 0};

int cmd_bench_tp(int argc, char **argv)
{
    struct cli cli;
    if (cli_operands(&cli, &bench_tp_cmd, argc, argv) == CLI_EXIT) return cli.rc;
    const char *want = cli.nargs > 0 ? cli.args[0] : "100m";
    const struct tfm_config *c = bench_model_shape(want);
    if (!c) return cli_error(&cli, "no model size '%s' (tiny, small, 100m)", want);
    int rank = 0, world = 1;
    MPI_CHECK(MPI_Init(NULL, NULL));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
    log_set_rank(rank);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (rank == 0) {
        printf("libra bench-tp: %s (%.1fM parameters, C %d, L %d, H %d, K %d, F %d); %d ranks, "
               "%d BLAS thread(s) a rank, %ld cores\n", want, tfm_param_count(c) / 1e6,
               c->hidden_size, c->n_layers, c->n_heads, c->n_kv_heads, c->intermediate_size,
               world, openblas_get_num_threads(), cores);
        if (cores < world)
            printf("note: %d ranks share %ld cores: TP degrees above %ld measure the "
                   "oversubscription, not the engine\n", world, cores, cores);
        printf("  TP  decode ms/token (batch 1)  speed-up   tokens/s (batch 32)  speed-up   "
               "all-reduce us (1 x C / 32 x C)\n");
    }
    struct tp_result base = {0}, r;
    for (int t = 1; t <= world; t *= 2) {
        char err[256];
        if (tfm_tp_check(c, t, err, sizeof err)) {
            if (rank == 0) printf("  %2d  (%s)\n", t, err);
            continue;
        }
        memset(&r, 0, sizeof r);
        run_tp(c, t, rank, &r);
        if (t == 1) base = r;
        if (rank == 0)
            printf("  %2d  %22.2f  %8.2fx  %19.1f  %8.2fx   %8.1f / %.1f\n", t, 1e3 * r.lat_s,
                   base.lat_s / r.lat_s, r.tok_s, r.tok_s / base.tok_s, 1e6 * r.ar1_s,
                   1e6 * r.ar32_s);
        fflush(stdout);
        /* the ranks outside the instance wait without spinning (they share cores) */
        MPI_Request req;
        MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &req));
        mpi_wait_backoff(&req, NULL);
    }
    MPI_CHECK(MPI_Finalize());
    return 0;
}
