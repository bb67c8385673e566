/*
 * Rank 0's side of checkpoints (device cpu; include/libra/checkpoint.h). After the
 * optimizer step N that the interval names, rank 0 opens ROOT/step-N.tmp/ and asks the
 * training root to write model.h5 (weights + AdamW) there; no new step starts until
 * it has answered. Rank 0 then writes state.h5 -- step, version, cursor, baseline,
 * the complete groups not yet trained on (with their tokens), the prompts of the
 * groups still in flight (launched again on resume) -- and commits: fsync, rename,
 * completion mark. Rollout keeps running throughout. A checkpoint that cannot be
 * written ends the run (run.checkpoint_on_error = "fail", the default: exit 1, the
 * metrics file "failed"), or, with "warn", is reported (log, an "error" event, the
 * summary and the checkpoints_failed attribute) and the run goes on; the last
 * complete checkpoint is never removed for it (ckpt_commit prunes after a commit).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_internal.h"
#include "libra/log.h"

static void report_failure(struct controller *c, const char *what, const char *err)
{
    char detail[768];
    snprintf(detail, sizeof detail, "checkpoint of step %d not written: %s: %s", c->step, what, err);
    if (strcmp(c->cfg->run.checkpoint_on_error, "warn") != 0)
        FATAL("%s (run.checkpoint_on_error = \"fail\"; \"warn\" goes on without it)", detail);
    LOG_E("%s", detail);
    c->stats.ckpt_failed++;
    if (metrics_event(c->m, ctl_now(c), c->step, EV_ERROR, detail))
        FATAL("metrics: cannot record an event");
}

void ctl_ckpt_start(struct controller *c)
{
    struct ctl_real *rl = &c->rl;
    char err[512];
    if (rl->ckpt_inflight) return;
    if (ckpt_begin(rl->ckpt_root, c->step, err, sizeof err)) {
        report_failure(c, "begin", err);
        return;
    }
    struct wire_ckpt m;
    memset(&m, 0, sizeof m);
    m.step = c->step;
    m.version = c->version;
    ckpt_dir_path(rl->ckpt_root, c->step, 1, m.dir, sizeof m.dir);
    /* every rank of the root replica: a tensor-parallel root gathers its shards */
    int *members = xmalloc((size_t)c->world * sizeof *members);
    int n = plan_members(&c->plan, 0, members);
    for (int k = 0; k < n; k++)
        if (plan_in_root_replica(&c->plan, members[k])) ctl_send(c, &m, sizeof m, members[k], TAG_CKPT);
    free(members);
    rl->ckpt_inflight = c->step;
    rl->ckpt_last = c->step;
    ctl_trace_ckpt_start(c, ctl_now(c));
}

/* A view of trajectory t as a checkpoint record (arrays borrowed from the store). */
static struct ckpt_traj traj_record(struct controller *c, const struct traj *t)
{
    struct traj_tokens *tk = ctl_real_tokens(c, t->id);
    struct ckpt_traj r = {.n_tokens = tk->n,
                          .prompt_tokens = t->prompt_tokens,
                          .version_start = t->version_start,
                          .version_end = t->version_end,
                          .turns = t->turn + 1,
                          .tool_calls = tk->tool_calls[0] + tk->tool_calls[1],
                          .tool_failures = tk->tool_failures[0] + tk->tool_failures[1],
                          .correct = tk->correct,
                          .reward = t->reward,
                          .ids = tk->ids,
                          .mask = tk->mask,
                          .logp = tk->logp,
                          .versions = tk->versions};
    return r;
}

static void build_state(struct controller *c, struct ckpt_state *s)
{
    struct ctl_real *rl = &c->rl;
    memset(s, 0, sizeof *s);
    s->step = c->step;
    s->version = c->version;
    s->seed = c->cfg->run.seed;
    memcpy(s->identity, rl->identity, sizeof s->identity);
    s->config = rl->config; /* borrowed */
    s->next_prompt = c->next_prompt;
    s->baseline = rl->bl.value;
    s->baseline_set = rl->bl.set;
    s->elapsed_s = rl->elapsed_before_s + (ctl_now(c));
    s->time_to_target_s = rl->time_to_target_s;
    s->trained = rl->trained;
    s->n_trained = rl->n_trained;
    /* prompts in flight, then those of an earlier resume not launched yet */
    size_t cap = c->tt.n_group + (size_t)(rl->n_relaunch - rl->next_relaunch) + 1;
    s->relaunch = xmalloc(cap * sizeof *s->relaunch);
    s->groups = xcalloc(c->tt.n_group + 1, sizeof *s->groups);
    for (size_t g = 0; g < c->tt.n_group; g++) {
        const struct group *grp = &c->tt.g[g];
        if (grp->trained) continue;
        if (grp->n_done < grp->n) {
            s->relaunch[s->n_relaunch++] = grp->prompt_id;
            continue;
        }
        struct ckpt_group *cg = &s->groups[s->n_groups++];
        cg->prompt_id = grp->prompt_id;
        cg->launch_version = grp->launch_version;
        cg->n = grp->n;
        cg->t = xcalloc((size_t)grp->n, sizeof *cg->t);
        for (int k = 0; k < grp->n; k++) cg->t[k] = traj_record(c, &c->tt.t[grp->first_traj + k]);
    }
    for (int64_t i = rl->next_relaunch; i < rl->n_relaunch; i++)
        s->relaunch[s->n_relaunch++] = rl->relaunch[i];
}

/* Frees what build_state allocated (the token arrays are borrowed). */
static void drop_state(struct ckpt_state *s)
{
    for (int64_t g = 0; g < s->n_groups; g++) free(s->groups[g].t);
    free(s->groups);
    free(s->relaunch);
}

/* The rest of a checkpoint once the model file is written; 1 if it was committed. */
static int finish(struct controller *c, const struct wire_ckpt_done *d)
{
    struct ctl_real *rl = &c->rl;
    if (!d->ok) {
        char e[sizeof d->error + 1];
        memcpy(e, d->error, sizeof d->error);
        e[sizeof d->error] = '\0';
        report_failure(c, "model.h5", e);
        return 0;
    }
    char dir[1024], path[1100], err[512];
    ckpt_dir_path(rl->ckpt_root, d->step, 1, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/state.h5", dir);
    struct ckpt_state s;
    build_state(c, &s);
    int rc = ckpt_state_save(path, &s, err, sizeof err);
    int64_t n_groups = s.n_groups, n_relaunch = s.n_relaunch;
    drop_state(&s);
    if (rc) {
        report_failure(c, "state.h5", err);
        return 0;
    }
    if (ctl_sched_save_tree(c, dir, err, sizeof err)) {
        report_failure(c, "tree.h5", err);
        return 0;
    }
    if (ckpt_commit(rl->ckpt_root, d->step, c->version, c->cfg->run.checkpoint_keep, err,
                    sizeof err)) {
        report_failure(c, "commit", err);
        return 0;
    }
    rl->ckpt_good = d->step;
    char detail[512];
    ckpt_dir_path(rl->ckpt_root, d->step, 0, dir, sizeof dir);
    snprintf(detail, sizeof detail, "step %d: %.400s (%lld buffered groups, %lld in flight)", d->step,
             dir, (long long)n_groups, (long long)n_relaunch);
    if (metrics_event(c->m, ctl_now(c), c->step, EV_CHECKPOINT, detail))
        FATAL("metrics: cannot record an event");
    LOG_I("checkpoint %s", detail);
    return 1;
}

void ctl_ckpt_on_done(struct controller *c, const struct wire_ckpt_done *d)
{
    struct ctl_real *rl = &c->rl;
    if (!rl->ckpt_inflight || d->step != rl->ckpt_inflight)
        FATAL("unexpected CKPT_DONE for step %d (checkpoint in flight: %d)", d->step,
              rl->ckpt_inflight);
    rl->ckpt_inflight = 0;
    int ok = finish(c, d);
    ctl_trace_ckpt_done(c, d->step, ok, ctl_now(c));
}
