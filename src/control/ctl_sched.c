/*
 * Rank 0's side of the scheduler (include/libra/sched.h): starting it with the run's
 * tool names, the per-step rows of /sched, /instances and /migrations, the prefix
 * tree in checkpoints and, at the end of the run, in the metrics file (/tree).
 */
#include <stdio.h>
#include <string.h>

#include "ctl_internal.h"
#include "libra/log.h"

_Static_assert(METRICS_SCHED_N_ROUTES == SCHED_R_COUNT && METRICS_SCHED_N_VIA == SCHED_VIA_COUNT,
               "/sched has one route_* column per enum sched_reason, one via_* per enum sched_via");

void ctl_sched_init(struct controller *c)
{
    int n = 0;
    if (c->real) {
        for (; n < ENV_N_TOOLS; n++) c->tool_names[n] = env_tool_name(n);
    } else {
        for (; n < c->wl->n_tools && n < WL_MAX_TOOLS; n++) c->tool_names[n] = c->wl->tools[n].name;
    }
    char err[1024];
    if (sched_init(&c->sched, &c->cfg->sched, &c->dev.rates, c->tool_names, n, err, sizeof err))
        FATAL("%s", err);
    const struct ptree *t = sched_tree(&c->sched);
    if (t && c->cfg->sched.tree_in[0]) {
        struct ptree_shape sh;
        ptree_shape(t, &sh);
        LOG_I("cmlfq: prefix tree from %s: %lld nodes, %lld prompts, %lld trajectories",
              c->cfg->sched.tree_in, (long long)sh.nodes, (long long)sh.prompts,
              (long long)sh.insertions);
    }
}

static const char *bucket_name(const struct sched *s, int b)
{
    return b >= 0 && b < s->n_bucket ? s->bucket[b].name : "";
}

static int tp_of(const struct controller *c, int i)
{
    return i >= 0 && i < c->plan.n_instances ? c->inst[i].tp : -1;
}

void ctl_sched_step_rows(struct controller *c, double now)
{
    struct sched *s = &c->sched;
    struct sched_stats st;
    sched_take_step(s, &st);
    struct metrics_sched_row r = {.step = c->step, .wall_s = now};
    memcpy(r.routes, st.routes, sizeof r.routes);
    memcpy(r.via, st.via, sizeof r.via);
    r.holds = st.holds;
    r.migrations = st.migrations;
    r.declined = st.declined;
    r.tool_returns = st.tool_returns;
    r.finished = st.finished;
    r.learned = st.learned;
    const struct ptree *t = sched_tree(s);
    if (t) {
        struct ptree_shape sh;
        ptree_shape(t, &sh);
        r.tree_nodes = sh.nodes;
        r.tree_prompts = sh.prompts;
        r.tree_leaves = sh.leaves;
        r.tree_depth = sh.max_depth;
    }
    r.decide_us_mean = c->acc.sched_n ? 1e6 * c->acc.sched_s / c->acc.sched_n : 0;
    c->acc.sched_s = 0;
    c->acc.sched_n = 0;
    if (metrics_sched(c->m, &r)) FATAL("metrics: cannot write the /sched row of step %d", c->step);

    for (int i = 0; i < c->plan.n_instances; i++) {
        const struct sched_instance *in = &c->inst[i];
        struct metrics_instance_row ir = {.step = c->step,
                                          .wall_s = now,
                                          .instance = i,
                                          .leader = in->leader,
                                          .tp = in->tp,
                                          .queued = in->queued,
                                          .running = in->running,
                                          .turns_in_flight = in->n_turns,
                                          .kv_frac = in->kv_frac,
                                          .load_frac = in->capacity > 0 ? in->load / in->capacity : 0};
        /* The buckets that prefer this TP, joined by ',' (none for load_balance). */
        size_t len = 0;
        for (int b = 0; b < s->n_bucket && strcmp(c->cfg->sched.type, "load_balance") != 0; b++)
            for (int k = 0; k < s->bucket[b].n_tp; k++)
                if (s->bucket[b].tp[k] == in->tp && len < sizeof ir.bucket)
                    len += (size_t)snprintf(ir.bucket + len, sizeof ir.bucket - len, "%s%s",
                                            len ? "," : "", s->bucket[b].name);
        if (metrics_instance(c->m, &ir)) FATAL("metrics: cannot write an /instances row");
    }

    const struct sched_migration *mig;
    int n = sched_take_migrations(s, &mig);
    for (int k = 0; k < n; k++) {
        const struct sched_migration *m = &mig[k];
        struct metrics_migration_row mr = {.wall_s = now,
                                           .step = c->step,
                                           .traj_id = m->traj_id,
                                           .turn = m->turn,
                                           .from_instance = m->from_instance,
                                           .to_instance = m->to_instance,
                                           .from_tp = tp_of(c, m->from_instance),
                                           .to_tp = tp_of(c, m->to_instance),
                                           .why = m->why,
                                           .est_remaining = m->est_remaining,
                                           .saving_s = m->saving_s,
                                           .cost_s = m->cost_s};
        snprintf(mr.from_bucket, sizeof mr.from_bucket, "%s", bucket_name(s, m->from_bucket));
        snprintf(mr.to_bucket, sizeof mr.to_bucket, "%s", bucket_name(s, m->to_bucket));
        if (metrics_migration(c->m, &mr)) FATAL("metrics: cannot write a /migrations row");
    }
}

static int write_tree(int64_t file, void *arg, char *err, size_t errlen)
{
    const struct controller *c = arg;
    return ptree_write_h5(sched_tree(&c->sched), file, "tree", &c->sched.ts, c->tool_names,
                          c->sched.n_tools, err, errlen);
}

void ctl_sched_finish_run(struct controller *c)
{
    const struct sched *s = &c->sched;
    const struct ptree *t = sched_tree(s);
    printf("libra: scheduler %s: %lld migrations, %lld declined, %lld tool returns",
           c->cfg->sched.type, (long long)s->stats.migrations, (long long)s->stats.declined,
           (long long)s->stats.tool_returns);
    if (t) {
        struct ptree_shape sh;
        ptree_shape(t, &sh);
        printf(" | prefix tree %lld nodes, %lld prompts, depth %d", (long long)sh.nodes,
               (long long)sh.prompts, sh.max_depth);
        if (metrics_write_with(c->m, write_tree, c))
            FATAL("metrics: cannot write the prefix tree to /tree");
    }
    printf("\n");
}

int ctl_sched_save_tree(const struct controller *c, const char *dir, char *err, size_t errlen)
{
    const struct ptree *t = sched_tree(&c->sched);
    if (!t) return 0;
    char path[1200];
    snprintf(path, sizeof path, "%s/tree.h5", dir);
    return ptree_save(t, path, &c->sched.ts, c->tool_names, c->sched.n_tools, err, errlen);
}
