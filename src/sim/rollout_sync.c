/*
 * Synchronous rollout steps on the simulator (rsim_run_sync, rollout_sim.h): each
 * step launches its groups at once and waits for every trajectory -- the simplest
 * honest measure of a rollout cluster: the step's makespan is what a synchronous
 * trainer waits, its decode tokens over the makespan the cluster's throughput.
 */
#include "libra/rollout_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "libra/ptree.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double rsim_percentile(double *v, int64_t n, double q)
{
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double pos = q * (double)(n - 1);
    int64_t lo = (int64_t)floor(pos);
    if (lo >= n - 1) return v[n - 1];
    return v[lo] + (pos - (double)lo) * (v[lo + 1] - v[lo]);
}

struct engine_totals {
    int64_t prefill, preemptions, cache_hit, admissions, waited;
    double wait_s;
    int64_t decode_by_tp[4]; /* TP 1, 2, 4, 8 */
    double busy_rank_s;
};

static int tp_class(int tp) { return tp == 1 ? 0 : tp == 2 ? 1 : tp == 4 ? 2 : 3; }

/* Engine counters since the last call (busy time is taken, the rest differenced). */
static void take_engine_totals(struct rsim *r, struct engine_totals *last, struct engine_totals *d)
{
    struct engine_totals now;
    memset(&now, 0, sizeof now);
    double busy = 0;
    for (int i = 0; i < r->cfg.n_inst; i++) {
        now.prefill += r->eng[i].stat_prefill_tokens;
        now.preemptions += r->eng[i].stat_preemptions;
        now.cache_hit += r->eng[i].stat_cache_hit_tokens;
        now.admissions += r->eng[i].stat_admissions;
        now.waited += r->eng[i].stat_waited;
        now.wait_s += r->eng[i].stat_wait_s;
        now.decode_by_tp[tp_class(r->cfg.tp[i])] += r->eng[i].stat_decode_tokens;
        busy += engine_take_busy(&r->eng[i]);
    }
    d->prefill = now.prefill - last->prefill;
    d->preemptions = now.preemptions - last->preemptions;
    d->cache_hit = now.cache_hit - last->cache_hit;
    d->admissions = now.admissions - last->admissions;
    d->waited = now.waited - last->waited;
    d->wait_s = now.wait_s - last->wait_s;
    for (int k = 0; k < 4; k++) d->decode_by_tp[k] = now.decode_by_tp[k] - last->decode_by_tp[k];
    d->busy_rank_s = busy;
    *last = now;
}

/* Runs step k and fills row; lat receives the step's trajectory latencies. */
static int run_step(struct rsim *r, const struct rsim_sync_config *s, int k,
                    struct engine_totals *eng_last, struct rsim_step_result *row, double *lat,
                    char *err, size_t errlen)
{
    memset(row, 0, sizeof *row);
    row->step = k;
    double t0 = r->now;
    size_t first = r->n_traj;
    int64_t dispatches0 = r->stats.dispatches;
    struct sched_stats discard;
    sched_take_step(&r->sched, &discard); /* counters of this step only */
    for (int g = 0; g < s->groups_per_step; g++) rsim_launch_group(r, s->step0 + k);
    if (rsim_run_until(r, INFINITY, err, errlen)) return -1;
    const int64_t *ids;
    rsim_take_finished(r, &ids); /* every one of them: nothing is left in flight */
    row->makespan_s = r->now - t0;
    double lat_sum = 0;
    for (size_t j = first; j < r->n_traj; j++) {
        const struct rsim_traj *t = &r->traj[j];
        double l = t->t_finish - t0;
        lat[j - first] = l;
        lat_sum += l;
        row->decode_tokens += t->gen_tokens;
        row->tool_tokens += t->tool_tokens;
        row->migrations += t->migrations;
    }
    row->trajectories = (int64_t)(r->n_traj - first);
    row->turns = r->stats.dispatches - dispatches0;
    row->mean_latency_s = row->trajectories ? lat_sum / (double)row->trajectories : 0;
    /* percentiles sort a copy: lat keeps trajectory order for the caller */
    double *tmp = xmalloc((size_t)(row->trajectories ? row->trajectories : 1) * sizeof *tmp);
    memcpy(tmp, lat, (size_t)row->trajectories * sizeof *tmp);
    row->p50_latency_s = rsim_percentile(tmp, row->trajectories, 0.50);
    row->p99_latency_s = rsim_percentile(tmp, row->trajectories, 0.99);
    free(tmp);
    struct engine_totals d;
    take_engine_totals(r, eng_last, &d);
    row->prefill_tokens = d.prefill;
    row->preemptions = d.preemptions;
    row->cache_hit_tokens = d.cache_hit;
    row->admissions = d.admissions;
    row->waited = d.waited;
    row->queue_wait_s = d.wait_s;
    memcpy(row->decode_by_tp, d.decode_by_tp, sizeof row->decode_by_tp);
    int gpus = 0;
    for (int i = 0; i < r->cfg.n_inst; i++) gpus += r->cfg.tp[i];
    row->busy_frac = row->makespan_s > 0 ? d.busy_rank_s / (gpus * row->makespan_s) : 0;
    sched_take_step(&r->sched, &row->sched);
    sched_step_end(&r->sched, k + 1);
    return 0;
}

int rsim_run_sync(const struct rsim_config *c, const struct rsim_sync_config *s,
                  struct rsim_step_result *per_step, struct rsim_totals *tot, char *err,
                  size_t errlen)
{
    memset(tot, 0, sizeof *tot);
    if (s->groups_per_step < 1 || s->steps < 1 || s->warmup_steps < 0 ||
        s->warmup_steps >= s->steps || s->step0 < 0) {
        snprintf(err, errlen, "rollout_sim: groups_per_step %d, steps %d, warmup_steps %d, "
                              "step0 %d (need >= 1, >= 1, 0 .. steps - 1, >= 0)",
                 s->groups_per_step, s->steps, s->warmup_steps, s->step0);
        return -1;
    }
    struct rsim r;
    if (rsim_init(&r, c, err, errlen)) return -1;
    int64_t per = (int64_t)s->groups_per_step * c->rollout->n_samples;
    int measured = s->steps - s->warmup_steps;
    double *lat_all = xmalloc((size_t)(per * measured) * sizeof *lat_all);
    struct engine_totals eng_last;
    memset(&eng_last, 0, sizeof eng_last);
    double busy_sum = 0;
    int gpus = 0, rc = -1;
    for (int i = 0; i < c->n_inst; i++) gpus += c->tp[i];
    for (int k = 0; k < s->steps; k++) {
        struct rsim_step_result row;
        int m = k - s->warmup_steps; /* measured index, < 0 during warm-up */
        double *lat = xmalloc((size_t)per * sizeof *lat);
        int bad = run_step(&r, s, k, &eng_last, &row, lat, err, errlen);
        if (!bad && m >= 0)
            memcpy(lat_all + (size_t)m * (size_t)per, lat, (size_t)per * sizeof *lat);
        free(lat);
        if (bad) goto fail;
        if (per_step) per_step[k] = row;
        if (m < 0) continue;
        tot->steps++;
        tot->trajectories += row.trajectories;
        tot->decode_tokens += row.decode_tokens;
        tot->migrations += row.migrations;
        tot->prefill_tokens += row.prefill_tokens;
        tot->cache_hit_tokens += row.cache_hit_tokens;
        tot->preemptions += row.preemptions;
        tot->admissions += row.admissions;
        tot->waited += row.waited;
        tot->queue_wait_s += row.queue_wait_s;
        for (int j = 0; j < 4; j++) tot->decode_by_tp[j] += row.decode_by_tp[j];
        tot->makespan_sum_s += row.makespan_s;
        busy_sum += row.busy_frac * gpus * row.makespan_s;
    }
    tot->mean_makespan_s = tot->makespan_sum_s / tot->steps;
    tot->tokens_per_s = tot->makespan_sum_s > 0 ? tot->decode_tokens / tot->makespan_sum_s : 0;
    tot->busy_frac = tot->makespan_sum_s > 0 ? busy_sum / (gpus * tot->makespan_sum_s) : 0;
    tot->p50_latency_s = rsim_percentile(lat_all, tot->trajectories, 0.50);
    tot->p99_latency_s = rsim_percentile(lat_all, tot->trajectories, 0.99);
    tot->sim = r.stats;
    const struct ptree *tree = sched_tree(&r.sched);
    if (tree) {
        struct ptree_shape sh;
        ptree_shape(tree, &sh);
        tot->tree_nodes = sh.nodes;
    }
    rc = 0;
fail:
    free(lat_all);
    rsim_free(&r);
    return rc;
}
