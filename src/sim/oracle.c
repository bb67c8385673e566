/*
 * libra-sim --oracle: the clairvoyant throughput bound (include/libra/job_sim.h).
 */
#include <math.h>
#include <stdio.h>

#include "libra/job_sim.h"
#include "libra/len_profile.h"
#include "libra/log.h"
#include "libra/planner.h"

int job_sim_oracle(const struct job_sim_config *jc, struct metrics *m, char *err, size_t errlen)
{
    const struct libra_config *cfg = jc->cfg;
    const struct rollout_config *ro = &cfg->rollout;
    double ts = cfg->device.time_scale;
    struct planner pl;
    planner_init(&pl, cfg, jc->cm, jc->wl, jc->world);
    struct len_profile prof;
    lp_init(&prof);
    double wall = 0;
    int rc = 0;
    for (int k = 0; k < cfg->run.steps; k++) {
        /* step k's batch: the k-th batch_size trajectories in launch order */
        lp_from_workload(&prof, jc->wl, ro, cfg->run.seed, k,
                         (int64_t)k * cfg->train.batch_size, cfg->train.batch_size);
        prof.overlap = cfg->train.max_staleness + 1;
        prof.contention_free = 1; /* an optimistic cost: a bound on throughput */
        struct plan_choice ch;
        if (planner_search(&pl, &prof, jc->world - 1, 0, &ch)) {
            snprintf(err, errlen, "oracle: step %d: no split of %d GPUs fits: %s", k + 1,
                     jc->world - 1, ch.why);
            rc = -1;
            break;
        }
        int64_t gen = 0, tool = 0;
        for (int i = 0; i < prof.n; i++) {
            gen += prof.s[i].gen;
            tool += prof.s[i].tool;
        }
        double step_s = ch.step_s / ts;
        wall += step_s;
        struct metrics_step_row row = {
            .step = k + 1,
            .wall_s = wall,
            .step_s = step_s,
            .version = k + 1,
            .n_traj = prof.n,
            .tokens_gen = gen,
            .tokens_tool = tool,
            .rollout_busy_frac = ch.step_s > 0 ? ch.rollout_s / ch.step_s : 0,
            .train_busy_frac = ch.step_s > 0 ? ch.train_s / ch.step_s : 0,
            .n_rollout_ranks = ch.n_rollout,
            .n_train_ranks = ch.n_train};
        if (metrics_step(m, &row)) FATAL("metrics: cannot write the oracle's step %d", k + 1);
    }
    if (rc == 0 && (metrics_attr_int(m, "steps_requested", cfg->run.steps) ||
                    metrics_attr_double(m, "time_scale", ts) ||
                    metrics_attr_string(m, "oracle", "clairvoyant bound (libra-sim --oracle)") ||
                    metrics_flush(m)))
        FATAL("metrics: cannot write the oracle's attributes");
    lp_free(&prof);
    planner_free(&pl);
    return rc;
}
