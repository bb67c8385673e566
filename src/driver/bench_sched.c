/*
 * `libra bench-sched` (also --bench-sched): the scheduler benchmark (not a timed test;
 * it only prints).
 *
 * Throughput (default): 16 A800 GPUs serving Qwen3-14B rollouts of a workload preset
 * (inputs/workloads/<name>.cfg), simulated in virtual time by the rollout-cluster
 * simulator (rollout_sim.h) in synchronous steps: each step launches G groups x S
 * samples at once and ends when the last trajectory does. Every row runs the same
 * seed, so the same trajectories; the first W steps warm the scheduler up (C-MLFQ's
 * tree learns) and are not measured. Rows:
 *   load_balance  TP2 x 8          FIFO instance queue   (the baseline, ratio 1.00)
 *   load_balance  TP4 x 4          FIFO  (what all-large instances give without routing)
 *   load_balance  [1,1,2,4] x 2    FIFO
 *   length_aware  [1,1,2,4] x 2    FIFO
 *   la_mlfq       [1,1,2,4] x 2    FIFO
 *   cmlfq         [1,1,2,4] x 2    FIFO  (routing alone)
 *   cmlfq         [1,1,2,4] x 2    MLFQ  (the default: routing + instance queue)
 * Baselines use FIFO like the reference's vLLM. Everything else is config_defaults()
 * (cost-model knobs, buckets, rollout limits) with the overrides printed. --seeds
 * runs every row on each seed and prints, per row, the mean and range over seeds of
 * its ratios to the base row of the same seed.
 *
 * --latency: C-MLFQ's routing decision latency with a prefix tree of >= 100,000
 * nodes on one core: the tree is grown through the public API (sched_route,
 * sched_tool_return, sched_finish on synthetic trajectories over three tools), then
 * 200,000 decisions at tool-return boundaries are timed one by one with
 * CLOCK_MONOTONIC (sched_tool_return + sched_route, and sched_route alone).
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libra/cli.h"
#include "libra/driver.h"
#include "libra/exp_report.h"
#include "libra/inputs.h"
#include "libra/log.h"
#include "libra/ptree.h"
#include "libra/rng.h"
#include "libra/rollout_sim.h"
#include "libra/sched.h"

#include "bench_sched.h"

static const struct option bench_sched_opts[] = {
    {"workload", required_argument, NULL, 'w'},
    {"steps", required_argument, NULL, 'n'},
    {"warmup", required_argument, NULL, 'W'},
    {"groups", required_argument, NULL, 'g'},
    {"samples", required_argument, NULL, 'S'},
    {"seed", required_argument, NULL, 's'},
    {"seeds", required_argument, NULL, 'E'},
    {"tick", required_argument, NULL, 't'},
    {"latency", no_argument, NULL, 'l'},
    {"sweep", no_argument, NULL, 'P'},
    {"decisions", required_argument, NULL, 'd'},
    {"tree-nodes", required_argument, NULL, 'T'},
    {0}};
static const struct cli_cmd bench_sched_cmd = {
    "libra bench-sched",
    "libra bench-sched [--workload NAME] [--steps N] [--warmup N] [--groups G]\n"
    "                         [--samples S] [--seed S | --seeds S,S,...] [--tick SECONDS]\n"
    "       libra bench-sched --sweep [--workload NAME] [--seeds S,S,...] [...]\n"
    "       libra bench-sched --latency [--seed S] [--decisions N] [--tree-nodes N]",
    "The scheduler benchmark: 16 simulated A800 GPUs serving Qwen3-14B rollouts of a\n"
    "workload preset, one row per scheduler; --sweep: cmlfq's bucket thresholds and\n"
    "max_load over a grid; --latency: C-MLFQ's routing decision latency.\n"
    "  --workload NAME    a preset in inputs/workloads/ (r2e-gym, search-r1, ...; default\n"
    "                     r2e-gym)\n"
    "  --steps N          synchronous steps, 1 .. 100000 (default 12)\n"
    "  --warmup N         steps not measured, below --steps (default 4)\n"
    "  --groups G         groups a step, 1 .. 1000000 (default 32)\n"
    "  --samples S        samples a group, 1 .. 1024 (default 8)\n"
    "  --seed S           the seed (default 1)\n"
    "  --seeds S,S,...    up to 16 seeds: each row's mean and range of ratios\n"
    "  --tick SECONDS     the controller's reaction time, (0, 10]\n"
    "  --sweep            sweep cmlfq's thresholds and max_load (choose them on seeds\n"
    "                     you do not report)\n"
    "  --latency          time routing decisions instead\n"
    "  --decisions N      --latency: decisions timed (default 200000)\n"
    "  --tree-nodes N     --latency: prefix-tree nodes grown first (default 100000)\n",
    bench_sched_opts, NULL, 0, 0, 0};

/* 0, or CLI_EXIT with cli->rc the exit code (help, version, a usage error). */
static int parse_opts(struct cli *cli, int argc, char **argv, struct bench_opts *o)
{
    *o = (struct bench_opts){.workload = "r2e-gym", .steps = 12, .warmup = 4, .groups = 32,
                             .samples = 8, .seed = 1, .tick_s = RSIM_DEFAULT_TICK_S,
                             .decisions = 200000, .tree_nodes = 100000};
    int ch = 0, bad = 0;
    cli_begin(cli, &bench_sched_cmd, argc, argv);
    while (!bad && (ch = cli_next(cli)) > 0) {
        const char *v = cli->arg;
        switch (ch) {
        case 'l': o->latency = 1; break;
        case 'P': o->sweep = 1; break;
        case 'n': bad = cli_int(cli, 1, 100000, &o->steps); break;
        case 'W': bad = cli_int(cli, 0, 100000, &o->warmup); break;
        case 'g': bad = cli_int(cli, 1, 1000000, &o->groups); break;
        case 'S': bad = cli_int(cli, 1, 1024, &o->samples); break;
        case 'd': bad = cli_int(cli, 1, 100000000, &o->decisions); break;
        case 'T': bad = cli_int(cli, 1, 100000000, &o->tree_nodes); break;
        case 's': bad = cli_u64(cli, &o->seed); break;
        case 't': bad = cli_double_open(cli, 0, 10, &o->tick_s); break;
        case 'E':
            bad = (o->n_seeds = cli_u64_list(cli, o->seeds, BENCH_MAX_SEEDS)) < 0;
            o->seed = o->seeds[0];
            break;
        default: /* 'w': a preset name, never a path */
            bad = strlen(v) == 0 || strlen(v) >= sizeof o->workload;
            for (const char *p = v; *p; p++)
                if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_') bad = 1;
            if (bad)
                return cli_error(cli, "--workload '%s': a preset name from inputs/workloads/ "
                                      "(letters, digits, '-', '_')", v), CLI_EXIT;
            snprintf(o->workload, sizeof o->workload, "%s", v);
        }
    }
    if (bad || ch == CLI_EXIT) return CLI_EXIT;
    if (!o->latency && o->warmup >= o->steps)
        return cli_error(cli, "--warmup %d must be below --steps %d", o->warmup, o->steps),
               CLI_EXIT;
    return 0;
}

/* The config every row starts from: defaults, A800 + Qwen3-14B, the workload preset. */
int bench_sched_inputs(const struct bench_opts *o, struct libra_config *cfg,
                       struct job_inputs *in)
{
    config_defaults(cfg);
    char dir[CFG_PATH_MAX];
    if (inputs_dir(dir, sizeof dir)) {
        fprintf(stderr, "libra --bench-sched: the inputs directory's path is too long (set "
                        "LIBRA_INPUTS to a shorter one)\n");
        return -1;
    }
    int n = snprintf(cfg->device.hardware, CFG_PATH_MAX, "%s/hardware/a800.cfg", dir);
    n |= snprintf(cfg->model.profile, CFG_PATH_MAX, "%s/models/qwen3-14b.cfg", dir);
    n |= snprintf(cfg->workload.preset, CFG_PATH_MAX, "%s/workloads/%s.cfg", dir, o->workload);
    if (n >= CFG_PATH_MAX) {
        fprintf(stderr, "libra --bench-sched: inputs directory '%s' is too long\n", dir);
        return -1;
    }
    cfg->run.seed = o->seed;
    cfg->rollout.n_samples = o->samples;
    char err[1024];
    if (driver_load_inputs(cfg, in, err, sizeof err)) {
        fprintf(stderr, "libra --bench-sched: %s\n", err);
        return -1;
    }
    return 0;
}

/* ---- throughput ---- */

struct bench_row {
    const char *policy;
    const char *layout;
    const char *queue;
    int n_inst;
    int tp[CFG_MAX_TP];
};

static const struct bench_row rows[] = {
    {"load_balance", "TP2 x 8", "fifo", 8, {2, 2, 2, 2, 2, 2, 2, 2}},
    {"load_balance", "TP4 x 4", "fifo", 4, {4, 4, 4, 4}},
    {"load_balance", "[1,1,2,4] x 2", "fifo", 8, {1, 1, 2, 4, 1, 1, 2, 4}},
    {"length_aware", "[1,1,2,4] x 2", "fifo", 8, {1, 1, 2, 4, 1, 1, 2, 4}},
    {"la_mlfq", "[1,1,2,4] x 2", "fifo", 8, {1, 1, 2, 4, 1, 1, 2, 4}},
    {"cmlfq", "[1,1,2,4] x 2", "fifo", 8, {1, 1, 2, 4, 1, 1, 2, 4}},
    {"cmlfq", "[1,1,2,4] x 2", "mlfq", 8, {1, 1, 2, 4, 1, 1, 2, 4}},
};
#define N_ROWS ((int)(sizeof rows / sizeof rows[0]))

static void print_setup(const struct bench_opts *o, const struct libra_config *cfg,
                        const struct job_inputs *in)
{
    const struct rollout_config *ro = &cfg->rollout;
    const struct sched_config *sc = &cfg->sched;
    printf("libra bench-sched: workload %s, %s, %s, 16 GPUs, seed %llu%s\n", in->wl.name,
           in->cm.hw.name, in->cm.model.name, (unsigned long long)o->seed,
           o->n_seeds > 1 ? " (and the others of --seeds)" : "");
    printf("  steps %d (first %d warm-up, not measured), %d groups x %d samples = %d "
           "trajectories a step, synchronous (a step ends with its last trajectory)\n",
           o->steps, o->warmup, o->groups, o->samples, o->groups * o->samples);
    printf("  rollout: max_turns %d, max_tokens_per_turn %d, max_tokens %d; engine max_batch "
           "%d; controller tick %.3f s (virtual)\n",
           ro->max_turns, ro->max_tokens_per_turn, ro->max_tokens, RSIM_DEFAULT_MAX_BATCH,
           o->tick_s);
    printf("  KV capacity (tokens): TP1 %.0f, TP2 %.0f, TP4 %.0f\n",
           cost_kv_capacity_tokens(&in->cm, 1), cost_kv_capacity_tokens(&in->cm, 2),
           cost_kv_capacity_tokens(&in->cm, 4));
    printf("  sched defaults: balance %s, max_load %.2f, buckets", sc->balance, sc->max_load);
    for (int b = 0; b < sc->n_buckets; b++) {
        const struct sched_bucket_spec *bs = &sc->buckets[b];
        printf(" %s(<=%d: TP", bs->name, bs->max_tokens);
        for (int k = 0; k < bs->n_tp; k++) printf("%s%d", k ? "," : "", bs->tp[k]);
        printf(")");
    }
    printf("; mlfq queue %d levels from %d tokens\n\n", sc->queue_levels, sc->queue_base_tokens);
}

int bench_sched_run(const struct bench_opts *o, uint64_t seed, const struct job_inputs *in,
                    const struct libra_config *cfg, const struct sched_config *sc, int n_inst,
                    const int *tp, struct rsim_totals *tot, char *err, size_t errlen)
{
    struct rsim_sync_config sync = {.groups_per_step = o->groups,
                                    .steps = o->steps,
                                    .warmup_steps = o->warmup,
                                    .step0 = 0};
    struct rsim_config c = {.cm = &in->cm,
                            .wl = &in->wl,
                            .sched = sc,
                            .rollout = &cfg->rollout,
                            .n_inst = n_inst,
                            .seed = seed,
                            .tick_s = o->tick_s};
    memcpy(c.tp, tp, (size_t)n_inst * sizeof *tp);
    return rsim_run_sync(&c, &sync, NULL, tot, err, errlen);
}

/* Every row on one seed: tot[k] and the simulation's wall time wall[k]. */
static int run_rows(const struct bench_opts *o, uint64_t seed, struct libra_config *cfg,
                    const struct job_inputs *in, struct rsim_totals *tot, double *wall)
{
    for (int k = 0; k < N_ROWS; k++) {
        struct sched_config sc = cfg->sched;
        snprintf(sc.type, sizeof sc.type, "%s", rows[k].policy);
        snprintf(sc.instance_queue, sizeof sc.instance_queue, "%s", rows[k].queue);
        char err[1024];
        double t0 = wall_time();
        if (bench_sched_run(o, seed, in, cfg, &sc, rows[k].n_inst, rows[k].tp, &tot[k], err,
                            sizeof err)) {
            fprintf(stderr, "libra --bench-sched: %s on %s: %s\n", rows[k].policy, rows[k].layout,
                    err);
            return 1;
        }
        wall[k] = wall_time() - t0;
    }
    return 0;
}

static void decode_shares(const struct rsim_totals *t, double pct[3])
{
    for (int j = 0; j < 3; j++)
        pct[j] = t->decode_tokens ? 100.0 * (double)t->decode_by_tp[j] / (double)t->decode_tokens : 0;
}

/* Where a row's time went, beside its decode shares: the prefix cache's hit rate
 * (context tokens admissions found cached / all they needed), preemptions per
 * trajectory, the share of admissions that waited in an instance queue, and the mean
 * wait of an admission (virtual s). */
struct breakdown {
    double kv_hit, preempt, waited, wait_s;
};

static struct breakdown breakdown_of(const struct rsim_totals *t)
{
    struct breakdown b = {0};
    int64_t ctx = t->cache_hit_tokens + t->prefill_tokens;
    if (ctx > 0) b.kv_hit = (double)t->cache_hit_tokens / (double)ctx;
    if (t->trajectories > 0) b.preempt = (double)t->preemptions / (double)t->trajectories;
    if (t->admissions > 0) {
        b.waited = (double)t->waited / (double)t->admissions;
        b.wait_s = t->queue_wait_s / (double)t->admissions;
    }
    return b;
}

static void print_table(const struct rsim_totals *tot, const double *wall)
{
    const struct rsim_totals *b = &tot[0];
    double wall_all = 0;
    printf("| policy | layout | queue | makespan (s) | vs base | tokens/s | vs base | "
           "p99 latency (s) | vs base | migrations/traj | busy | decode on TP1/2/4 (%%) | "
           "KV hit (%%) | preemptions/traj | admissions waited (%%) | mean wait (s) | "
           "sim wall (s) | events/s |\n");
    printf("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
           "---:|---:|\n");
    for (int k = 0; k < N_ROWS; k++) {
        const struct rsim_totals *t = &tot[k];
        double pct[3];
        decode_shares(t, pct);
        struct breakdown bd = breakdown_of(t);
        wall_all += wall[k];
        printf("| %s | %s | %s | %.1f | %.2f | %.0f | %.2f | %.1f | %.2f | %.3f | %.2f | "
               "%.0f/%.0f/%.0f | %.1f | %.3f | %.1f | %.3f | %.2f | %.0f |\n",
               rows[k].policy, rows[k].layout, rows[k].queue, t->mean_makespan_s,
               t->mean_makespan_s / b->mean_makespan_s, t->tokens_per_s,
               t->tokens_per_s / b->tokens_per_s, t->p99_latency_s,
               t->p99_latency_s / b->p99_latency_s,
               (double)t->migrations / (double)t->trajectories, t->busy_frac, pct[0], pct[1],
               pct[2], 100 * bd.kv_hit, bd.preempt, 100 * bd.waited, bd.wait_s, wall[k],
               wall[k] > 0 ? (double)t->sim.iterations / wall[k] : 0);
    }
    printf("\nmakespan: mean over measured steps (virtual s); tokens/s: decode tokens / sum of "
           "makespans; p99 latency: trajectory finish - step start over every measured "
           "trajectory; busy: GPU-seconds prefilling or decoding / (16 x makespan); decode on "
           "TP1/2/4: share of decode tokens by the TP of the instance; KV hit: context tokens "
           "found in the instance's prefix cache / all an admission needed; admissions "
           "waited: admitted later than queued (KV or batch full, or behind another's "
           "prefill); events: simulator stops "
           "(%lld for the last row, %lld turn results). Simulation wall time %.2f s in all.\n",
           (long long)tot[N_ROWS - 1].sim.iterations, (long long)tot[N_ROWS - 1].sim.results,
           wall_all);
}

/* Several seeds: per row the mean [min, max] over seeds of each ratio to the base row
 * of the same seed, and the mean migrations and decode shares. */
static void print_summary(const struct bench_opts *o, const struct rsim_totals (*tot)[N_ROWS])
{
    int n = o->n_seeds;
    printf("seeds");
    for (int i = 0; i < n; i++) printf("%s%llu", i ? "," : " ", (unsigned long long)o->seeds[i]);
    printf(": mean [min, max] over seeds of each ratio to load_balance on TP2 x 8 of the same seed\n\n");
    printf("| policy | layout | queue | tokens/s vs base | makespan vs base | p99 latency vs base | "
           "tokens/s (mean) | migrations/traj | decode on TP1/2/4 (%%) | KV hit (%%) | "
           "preemptions/traj | admissions waited (%%) | mean wait (s) |\n");
    printf("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int k = 0; k < N_ROWS; k++) {
        double r_tok[BENCH_MAX_SEEDS], r_ms[BENCH_MAX_SEEDS], r_p99[BENCH_MAX_SEEDS];
        double tok = 0, mig = 0, pct[3] = {0};
        struct breakdown bd = {0};
        for (int i = 0; i < n; i++) {
            const struct rsim_totals *t = &tot[i][k], *b = &tot[i][0];
            r_tok[i] = t->tokens_per_s / b->tokens_per_s;
            r_ms[i] = t->mean_makespan_s / b->mean_makespan_s;
            r_p99[i] = t->p99_latency_s / b->p99_latency_s;
            tok += t->tokens_per_s / n;
            mig += (double)t->migrations / (double)t->trajectories / n;
            double p[3];
            decode_shares(t, p);
            for (int j = 0; j < 3; j++) pct[j] += p[j] / n;
            struct breakdown b1 = breakdown_of(t);
            bd.kv_hit += b1.kv_hit / n;
            bd.preempt += b1.preempt / n;
            bd.waited += b1.waited / n;
            bd.wait_s += b1.wait_s / n;
        }
        double m[3], lo[3], hi[3];
        exp_spread(r_tok, n, &m[0], &lo[0], &hi[0]);
        exp_spread(r_ms, n, &m[1], &lo[1], &hi[1]);
        exp_spread(r_p99, n, &m[2], &lo[2], &hi[2]);
        printf("| %s | %s | %s | %.2f [%.2f, %.2f] | %.2f [%.2f, %.2f] | %.2f [%.2f, %.2f] | %.0f | "
               "%.3f | %.0f/%.0f/%.0f | %.1f | %.3f | %.1f | %.3f |\n",
               rows[k].policy, rows[k].layout, rows[k].queue, m[0], lo[0], hi[0], m[1], lo[1],
               hi[1], m[2], lo[2], hi[2], tok, mig, pct[0], pct[1], pct[2], 100 * bd.kv_hit,
               bd.preempt, 100 * bd.waited, bd.wait_s);
    }
}

static int bench_throughput(const struct bench_opts *o)
{
    struct libra_config cfg;
    struct job_inputs in;
    if (bench_sched_inputs(o, &cfg, &in)) return 1;
    print_setup(o, &cfg, &in);
    struct rsim_totals tot[N_ROWS];
    double wall[N_ROWS];
    if (o->n_seeds <= 1) {
        if (run_rows(o, o->seed, &cfg, &in, tot, wall)) return 1;
        print_table(tot, wall);
        return 0;
    }
    struct rsim_totals (*all)[N_ROWS] = xcalloc((size_t)o->n_seeds, sizeof *all);
    int rc = 0;
    for (int i = 0; i < o->n_seeds && rc == 0; i++) rc = run_rows(o, o->seeds[i], &cfg, &in, all[i], wall);
    if (rc == 0) print_summary(o, (const struct rsim_totals (*)[N_ROWS])all);
    free(all);
    return rc;
}

/* ---- routing latency ---- */

enum { LAT_TOOLS = 3, LAT_MAX_RETURNS = 8 };
static const char *const lat_tools[LAT_TOOLS] = {"run_tests", "edit", "search"};

/* One synthetic trajectory in flight. */
struct lat_traj {
    int64_t id, prompt_id;
    int returns, target;  /* tool returns so far, and before it finishes */
    int ctx, gen;
    int inst, load;       /* instance of its turn in flight and the load it added */
};

struct lat_ctx {
    struct sched s;
    struct sched_instance inst[8];
    struct rng r;
    int64_t next_id;
    int n_prompts;
};

static void lat_route(struct lat_ctx *c, struct lat_traj *t)
{
    int budget = 4096;
    struct sched_turn st = {.traj_id = t->id, .prompt_id = t->prompt_id, .turn = t->returns,
                            .ctx_tokens = t->ctx, .gen_tokens = t->gen, .budget = budget,
                            .prev = t->inst, .sample = (int)(t->id % 8), .n_samples = 8};
    struct sched_decision d;
    sched_route(&c->s, &st, c->inst, 8, 0, &d);
    if (d.instance < 0 || d.instance >= 8) FATAL("cmlfq held or misrouted a turn (%d)", d.instance);
    t->inst = d.instance;
    t->load = t->ctx + budget;
    c->inst[t->inst].load += t->load;
    c->inst[t->inst].n_turns++;
}

static void lat_start(struct lat_ctx *c, struct lat_traj *t)
{
    *t = (struct lat_traj){.id = c->next_id++,
                           .prompt_id = (int64_t)rng_below(&c->r, (uint64_t)c->n_prompts),
                           .target = 1 + (int)rng_below(&c->r, LAT_MAX_RETURNS),
                           .ctx = 200 + (int)rng_below(&c->r, 1800),
                           .inst = -1};
    lat_route(c, t);
}

/* The turn in flight ends with a tool return (tool, status, payload drawn). */
static void lat_tool_return(struct lat_ctx *c, struct lat_traj *t)
{
    c->inst[t->inst].load -= t->load;
    c->inst[t->inst].n_turns--;
    int gen = 50 + (int)rng_lognormal(&c->r, log(400.0), 1.0);
    int tool = (int)rng_below(&c->r, LAT_TOOLS);
    double u = rng_uniform(&c->r);
    int status = u < 0.7 ? TOOL_SUCCESS : u < 0.93 ? TOOL_FAILURE : TOOL_TIMEOUT;
    int payload = (int)rng_lognormal(&c->r, log(600.0), 1.5);
    t->gen += gen;
    t->ctx += gen + payload;
    t->returns++;
    sched_tool_return(&c->s, t->id, tool, status, payload, t->gen);
}

/* learn = 0 keeps the tree at the size being measured. */
static void lat_finish(struct lat_ctx *c, struct lat_traj *t, int learn)
{
    c->inst[t->inst].load -= t->load;
    c->inst[t->inst].n_turns--;
    t->gen += 50 + (int)rng_lognormal(&c->r, log(400.0), 1.0);
    sched_finish(&c->s, t->id, t->gen, learn);
}

static int64_t tree_nodes(const struct sched *s)
{
    struct ptree_shape sh;
    ptree_shape(sched_tree(s), &sh);
    return sh.nodes;
}

static double mono_s(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts)) FATAL("clock_gettime(CLOCK_MONOTONIC) failed");
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void print_dist(const char *what, double *us, int n)
{
    double med = rsim_percentile(us, n, 0.5), p90 = rsim_percentile(us, n, 0.9);
    double p99 = rsim_percentile(us, n, 0.99), max = us[n - 1];
    printf("| %s | %.2f | %.2f | %.2f | %.1f |\n", what, med, p90, p99, max);
}

static int bench_latency(const struct bench_opts *o)
{
    struct libra_config cfg;
    struct job_inputs in;
    if (bench_sched_inputs(o, &cfg, &in)) return 1;
    struct lat_ctx *c = xcalloc(1, sizeof *c);
    struct sched_config sc = cfg.sched;
    snprintf(sc.type, sizeof sc.type, "cmlfq");
    sc.rebuild_interval = 0; /* no step ends here; the tree only grows */
    char err[1024];
    struct rates rates;
    cost_rates(&in.cm, &rates);
    if (sched_init(&c->s, &sc, &rates, lat_tools, LAT_TOOLS, err, sizeof err)) {
        fprintf(stderr, "libra --bench-sched: %s\n", err);
        free(c);
        return 1;
    }
    static const int tp[8] = {1, 1, 2, 4, 1, 1, 2, 4};
    for (int i = 0; i < 8; i++)
        c->inst[i] = (struct sched_instance){.leader = i, .tp = tp[i],
                                             .capacity = cost_kv_capacity_tokens(&in.cm, tp[i]),
                                             .queued = 0, .running = 0, .kv_frac = 0};
    rng_init(&c->r, o->seed, 0x5c4ed, 0, 0);
    c->n_prompts = o->tree_nodes / 20 > 1 ? o->tree_nodes / 20 : 1;
    /* grow the tree: whole trajectories, one after another */
    double t0 = wall_time();
    int64_t built = 0;
    while (tree_nodes(&c->s) < o->tree_nodes) {
        for (int k = 0; k < 256; k++, built++) {
            struct lat_traj t;
            lat_start(c, &t);
            while (t.returns < t.target) {
                lat_tool_return(c, &t);
                lat_route(c, &t);
            }
            lat_finish(c, &t, 1);
        }
    }
    double build_s = wall_time() - t0;
    struct ptree_shape sh0;
    ptree_shape(sched_tree(&c->s), &sh0);
    printf("libra bench-sched --latency: cmlfq routing on one core, 8 instances [1,1,2,4] x 2\n");
    printf("  tree: %lld nodes (%lld global, %lld prompts, depth <= %d) from %lld synthetic "
           "trajectories over %d tools, built in %.1f s\n",
           (long long)sh0.nodes, (long long)sh0.global_nodes, (long long)sh0.prompts,
           sh0.max_depth, (long long)built, LAT_TOOLS, build_s);
    /* time decisions: a pool of live trajectories at tool-return boundaries */
    enum { LIVE = 512 };
    struct lat_traj *live = xmalloc(LIVE * sizeof *live);
    for (int k = 0; k < LIVE; k++) lat_start(c, &live[k]);
    int n = o->decisions;
    double *dec_us = xmalloc((size_t)n * sizeof *dec_us);
    double *route_us = xmalloc((size_t)n * sizeof *route_us);
    int64_t migrations0 = c->s.stats.migrations;
    double t_all = mono_s();
    for (int k = 0; k < n; k++) {
        struct lat_traj *t = &live[k % LIVE];
        double a = mono_s();
        lat_tool_return(c, t);
        double b = mono_s();
        lat_route(c, t);
        double e = mono_s();
        dec_us[k] = (e - a) * 1e6;
        route_us[k] = (e - b) * 1e6;
        if (t->returns >= t->target) {
            lat_finish(c, t, 0);
            lat_start(c, t);
        }
    }
    t_all = mono_s() - t_all;
    printf("  %d decisions of %d live trajectories timed one by one (CLOCK_MONOTONIC; %.0f "
           "decisions/s with the bookkeeping), %lld migrations; finished trajectories are not "
           "learned, so the tree stays at %lld nodes\n\n",
           n, (int)LIVE, n / t_all, (long long)(c->s.stats.migrations - migrations0),
           (long long)tree_nodes(&c->s));
    printf("| microseconds | median | p90 | p99 | max |\n|---|---:|---:|---:|---:|\n");
    print_dist("tool return + route", dec_us, n);
    print_dist("route alone", route_us, n);
    free(dec_us);
    free(route_us);
    free(live);
    sched_free(&c->s);
    free(c);
    return 0;
}

int cmd_bench_sched(int argc, char **argv)
{
    struct bench_opts o;
    struct cli cli;
    if (parse_opts(&cli, argc, argv, &o)) return cli.rc;
    if (o.sweep) return bench_sched_sweep(&o);
    return o.latency ? bench_latency(&o) : bench_throughput(&o);
}
