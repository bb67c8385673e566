/*
 * Rank 0's greedy evaluation passes (device cpu): the fixed held-out problems
 * 0 .. eval.size-1 of the environment's ENV_EVAL split run as ordinary trajectories
 * (ids from CTL_EVAL_ID0 on, flagged greedy) on the rollout instances, between the
 * training rollouts, so evaluation never blocks rank 0 or training. A pass starts
 * once the rollout ranks hold the version it was asked for; one row of /eval is
 * written when its last episode ends.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_internal.h"
#include "libra/log.h"

void ctl_eval_request(struct controller *c) { c->rl.ev.wanted_version = c->version; }

static void launch(struct controller *c)
{
    struct ctl_eval *ev = &c->rl.ev;
    int n = c->cfg->eval.size;
    if (ev->n != n) {
        for (int i = 0; i < ev->n; i++) ttok_free(&ev->tok[i]);
        free(ev->tok);
        free(ev->t);
        ev->t = xcalloc((size_t)n, sizeof *ev->t);
        ev->tok = xcalloc((size_t)n, sizeof *ev->tok);
        ev->n = n;
    }
    int cap = c->cfg->rollout.max_tokens;
    int32_t *ids = xmalloc((size_t)cap * sizeof *ids);
    double now = ctl_now(c);
    for (int i = 0; i < n; i++) {
        struct env_problem pr;
        env_problem(&c->rl.env, ENV_EVAL, i, &pr);
        int np = env_prompt_tokens(&c->rl.env, &pr, ids, cap);
        if (np >= cap)
            FATAL("env: held-out problem %d needs %d prompt tokens, rollout.max_tokens is %d "
                  "(raise it)", i, np, cap);
        struct traj_tokens *tk = &ev->tok[i];
        tk->n = 0;
        tk->correct = 0;
        memset(tk->tool_calls, 0, sizeof tk->tool_calls);
        memset(tk->tool_failures, 0, sizeof tk->tool_failures);
        ttok_append(tk, ids, NULL, NULL, np, 0);
        ev->t[i] = (struct traj){.id = CTL_EVAL_ID0 + i,
                                 .prompt_id = i,
                                 .group_id = -1,
                                 .state = TS_QUEUED,
                                 .ctx_tokens = np,
                                 .prompt_tokens = np,
                                 .leader = -1,
                                 .step_start = c->step,
                                 .version_start = -1,
                                 .version_end = -1,
                                 .step_consumed = -1,
                                 .t_start = now,
                                 .t_end = -1};
        tt_queue_push(&c->tt, CTL_EVAL_ID0 + i);
    }
    free(ids);
    ev->active = n;
    ev->n_done = 0;
    ev->step = c->step;
    ev->version = c->rollout_version;
    ev->wanted_version = -1;
    LOG_D("evaluation at step %d (version %d): %d held-out problems", ev->step, ev->version, n);
}

void ctl_eval_progress(struct controller *c)
{
    struct ctl_eval *ev = &c->rl.ev;
    if (ev->active || ev->wanted_version < 0 || c->rollout_version < ev->wanted_version) return;
    if (c->stopping) return;
    launch(c);
}

/* 1 if the trajectory's generated tokens hold a well-formed answer. */
static int answered(const struct vocab *v, const struct traj_tokens *tk)
{
    char text[ENV_TEXT_MAX];
    return v->answer(v->ctx, tk->ids, tk->mask, tk->n, text, sizeof text);
}

void ctl_eval_finished_traj(struct controller *c, struct traj *t)
{
    struct ctl_eval *ev = &c->rl.ev;
    t->state = TS_DONE;
    t->t_end = ctl_now(c);
    ev->n_done++;
    if (--ev->active > 0) return;
    double ok = 0, reward = 0, ans = 0, calls = 0, gen = 0;
    for (int i = 0; i < ev->n; i++) {
        const struct traj_tokens *tk = &ev->tok[i];
        ok += tk->correct;
        reward += ev->t[i].reward;
        ans += answered(c->rl.env.vocab, tk);
        for (int u = 0; u < ENV_N_TOOLS; u++) calls += tk->tool_calls[u];
        gen += ev->t[i].gen_tokens;
    }
    double n = ev->n;
    struct metrics_eval_row row = {ev->step, ev->version, ctl_now(c), ev->n, ok / n,
                                   reward / n, ans / n, calls / n, gen / n};
    if (metrics_eval(c->m, &row) || metrics_flush(c->m))
        FATAL("metrics: cannot write the evaluation of step %d", ev->step);
    if (ev->n_runs++ == 0) ev->first_accuracy = row.accuracy;
    ev->last_accuracy = row.accuracy;
    printf("eval  step %d (version %d): accuracy %.3f on %d held-out problems | answered %.2f | "
           "%.2f tool calls per episode\n",
           ev->step, ev->version, row.accuracy, ev->n, row.answered_frac, row.tool_calls_mean);
    fflush(stdout);
}
