/*
 * `libra bench-sched --sweep`: cmlfq's bucket thresholds (the short and medium
 * buckets' max_tokens) and sched.max_load over a grid, on the benchmark's layout
 * [1,1,2,4] x 2 with the default instance queue, each point's tokens/s as a ratio to
 * load_balance on TP2 x 8 of the same seed, mean [min, max] over --seeds, best
 * first. It is how the defaults are chosen: on seeds the benchmark does not report
 * (tools/bench-sched --sweep uses 1, 2, 3; the benchmark reports 4, 5, 6).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/exp_report.h"
#include "libra/log.h"

#include "bench_sched.h"

static const int sweep_short[] = {250, 500, 1000};
static const int sweep_medium[] = {1000, 2000, 4000};
static const double sweep_load[] = {0.1, 0.2, 0.3, 0.5, 0.8};
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define SWEEP_MAX (N_OF(sweep_short) * N_OF(sweep_medium) * N_OF(sweep_load))

struct point {
    int short_max, medium_max;
    double max_load;
    double mean, lo, hi;
};

static int by_mean_desc(const void *a, const void *b)
{
    const struct point *x = a, *y = b;
    return (x->mean < y->mean) - (x->mean > y->mean);
}

int bench_sched_sweep(const struct bench_opts *o)
{
    static const int base_tp[] = {2, 2, 2, 2, 2, 2, 2, 2}, mix_tp[] = {1, 1, 2, 4, 1, 1, 2, 4};
    struct libra_config cfg;
    struct job_inputs in;
    if (bench_sched_inputs(o, &cfg, &in)) return 1;
    if (cfg.sched.n_buckets < 3) {
        fprintf(stderr, "libra bench-sched --sweep: the default sched config has %d buckets "
                        "(the sweep moves the first two thresholds of three)\n",
                cfg.sched.n_buckets);
        return 1;
    }
    uint64_t one = o->seed;
    const uint64_t *seeds = o->n_seeds > 0 ? o->seeds : &one;
    int n_seeds = o->n_seeds > 0 ? o->n_seeds : 1;
    printf("libra bench-sched --sweep: workload %s, cmlfq on [1,1,2,4] x 2 (queue %s) vs "
           "load_balance on TP2 x 8, %d groups x %d samples, %d steps (%d warm-up), seeds",
           in.wl.name, cfg.sched.instance_queue, o->groups, o->samples, o->steps, o->warmup);
    for (int i = 0; i < n_seeds; i++) printf("%s%llu", i ? "," : " ", (unsigned long long)seeds[i]);
    printf("\n\n");
    char err[1024];
    double base[BENCH_MAX_SEEDS];
    for (int i = 0; i < n_seeds; i++) {
        struct sched_config sc = cfg.sched;
        snprintf(sc.type, sizeof sc.type, "load_balance");
        snprintf(sc.instance_queue, sizeof sc.instance_queue, "fifo");
        struct rsim_totals t;
        if (bench_sched_run(o, seeds[i], &in, &cfg, &sc, 8, base_tp, &t, err, sizeof err)) {
            fprintf(stderr, "libra bench-sched --sweep: load_balance: %s\n", err);
            return 1;
        }
        base[i] = t.tokens_per_s;
    }
    struct point pts[SWEEP_MAX];
    int n = 0;
    for (int a = 0; a < N_OF(sweep_short); a++)
        for (int b = 0; b < N_OF(sweep_medium); b++) {
            if (sweep_short[a] >= sweep_medium[b]) continue;
            for (int c = 0; c < N_OF(sweep_load); c++) {
                struct sched_config sc = cfg.sched;
                snprintf(sc.type, sizeof sc.type, "cmlfq");
                sc.buckets[0].max_tokens = sweep_short[a];
                sc.buckets[1].max_tokens = sweep_medium[b];
                sc.max_load = sweep_load[c];
                double r[BENCH_MAX_SEEDS];
                for (int i = 0; i < n_seeds; i++) {
                    struct rsim_totals t;
                    if (bench_sched_run(o, seeds[i], &in, &cfg, &sc, 8, mix_tp, &t, err,
                                        sizeof err)) {
                        fprintf(stderr, "libra bench-sched --sweep: cmlfq %d/%d/%.2f: %s\n",
                                sweep_short[a], sweep_medium[b], sweep_load[c], err);
                        return 1;
                    }
                    r[i] = t.tokens_per_s / base[i];
                }
                struct point *p = &pts[n++];
                *p = (struct point){sweep_short[a], sweep_medium[b], sweep_load[c], 0, 0, 0};
                exp_spread(r, n_seeds, &p->mean, &p->lo, &p->hi);
            }
        }
    qsort(pts, (size_t)n, sizeof *pts, by_mean_desc);
    printf("| rank | short <= | medium <= | max_load | tokens/s vs base |\n|---:|---:|---:|---:|---|\n");
    for (int k = 0; k < n; k++) {
        const struct point *p = &pts[k];
        int is_default = p->short_max == cfg.sched.buckets[0].max_tokens &&
                         p->medium_max == cfg.sched.buckets[1].max_tokens &&
                         p->max_load == cfg.sched.max_load;
        printf("| %d | %d | %d | %.2f | %.3f [%.3f, %.3f]%s |\n", k + 1, p->short_max,
               p->medium_max, p->max_load, p->mean, p->lo, p->hi,
               is_default ? " (the defaults)" : "");
    }
    return 0;
}
