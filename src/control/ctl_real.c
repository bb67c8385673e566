/*
 * Rank 0 with the real model (device cpu): prompts from the environment, every
 * trajectory's tokens, rewards, GRPO advantages, the per-step figures of the batch,
 * and where a resumed run picks up (prompts to launch again, the dataset cursor).
 * Evaluation passes are in ctl_eval.c, checkpoints in ctl_ckpt.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_internal.h"
#include "libra/adamw.h"
#include "libra/env_setup.h"
#include "libra/log.h"
#include "libra/model_vocab.h"

static void grow_tokens(struct ctl_real *rl, size_t need)
{
    if (need <= rl->cap_tok) return;
    size_t cap = rl->cap_tok ? rl->cap_tok : 256;
    while (cap < need) cap *= 2;
    rl->tok = xrealloc(rl->tok, cap * sizeof *rl->tok);
    memset(rl->tok + rl->cap_tok, 0, (cap - rl->cap_tok) * sizeof *rl->tok);
    rl->cap_tok = cap;
}

static void note_trained(struct ctl_real *rl, int64_t prompt_id)
{
    XGROW(rl->trained, rl->cap_trained, (size_t)rl->n_trained + 1);
    rl->trained[rl->n_trained++] = prompt_id;
}

/* A buffered group of the checkpoint goes back into the book, complete. */
static void restore_group(struct controller *c, const struct ckpt_group *g)
{
    if (g->n != c->tt.n_samples)
        FATAL("checkpoint: a buffered group has %d trajectories, the run uses n_samples = %d",
              g->n, c->tt.n_samples);
    int64_t gid = tt_launch_group(&c->tt, g->prompt_id, 0, 0, g->launch_version, 0.0);
    const struct group *grp = &c->tt.g[gid];
    grow_tokens(&c->rl, c->tt.n_traj);
    for (int s = 0; s < g->n; s++) {
        const struct ckpt_traj *ct = &g->t[s];
        int64_t id = grp->first_traj + s;
        struct traj *t = &c->tt.t[id];
        struct traj_tokens *tk = &c->rl.tok[id];
        ttok_append(tk, ct->ids, ct->logp, ct->versions, ct->n_tokens, 0);
        memcpy(tk->mask, ct->mask, (size_t)ct->n_tokens);
        tk->correct = ct->correct;
        t->prompt_tokens = ct->prompt_tokens;
        t->gen_tokens = 0;
        for (int i = 0; i < ct->n_tokens; i++) t->gen_tokens += ct->mask[i];
        t->tool_tokens = ct->n_tokens - ct->prompt_tokens - t->gen_tokens;
        t->ctx_tokens = ct->n_tokens;
        t->version_start = ct->version_start;
        t->version_end = ct->version_end;
        t->turn = ct->turns > 0 ? ct->turns - 1 : 0;
        t->n_failures = ct->tool_failures;
        t->reward = ct->reward;
    }
    /* Take them off the dispatch queue and finish them: the group is complete. */
    int64_t id;
    size_t q = c->tt.q_len;
    for (size_t i = 0; i < q; i++) {
        tt_queue_pop(&c->tt, &id);
        if (id < grp->first_traj || id >= grp->first_traj + grp->n) tt_queue_push(&c->tt, id);
    }
    for (int s = 0; s < g->n; s++) tt_finish(&c->tt, grp->first_traj + s, 0.0);
}

void ctl_real_init(struct controller *c, const struct ckpt_state *resume, int resume_step)
{
    const struct libra_config *cfg = c->cfg;
    struct ctl_real *rl = &c->rl;
    struct env_params ep;
    char err[1024];
    env_params_from_config(cfg, &ep);
    rl->vocab = model_vocab_open(&cfg->model, err, sizeof err);
    if (!rl->vocab) FATAL("%s", err);
    printf("libra: conversation: format %s, %d token ids (model vocabulary %d)\n",
           rl->vocab->name, (int)rl->vocab->size, c->dev.vocab_size);
    ep.vocab = rl->vocab;
    if (env_init(&rl->env, &ep, err, sizeof err)) FATAL("env: %s", err);
    const struct train_config *t = &cfg->train;
    rl->gc = (struct grpo_config){t->clip_low, t->clip_high, t->is_cap, t->kl_coef,
                                  t->entropy_coef, t->adv_eps, t->baseline_decay};
    rl->ev.wanted_version = -1;
    rl->ev.first_accuracy = rl->ev.last_accuracy = NAN;
    rl->time_to_target_s = -1;
    rl->resumed_from = -1;
    ckpt_root_of(cfg, rl->ckpt_root, sizeof rl->ckpt_root);
    /* what later resumes may not change: the first segment's (a resumed run's model
     * path is its checkpoint's, so it carries the identity it resumed from) */
    if (resume && resume->identity[0])
        memcpy(rl->identity, resume->identity, sizeof rl->identity);
    else if (!config_identity(cfg, rl->identity, sizeof rl->identity))
        rl->identity[0] = '\0';
    rl->config = xmalloc(CONFIG_FLAT_MAX);
    if (!config_flat(cfg, rl->config, CONFIG_FLAT_MAX)) {
        free(rl->config);
        rl->config = NULL;
    }
    if (!resume) return;
    rl->resumed_from = resume_step;
    rl->ckpt_last = resume->step; /* complete: a stop before the next step writes none */
    c->step = resume->step;
    c->version = resume->version;
    c->rollout_version = resume->version; /* every rank loaded the checkpoint's weights */
    c->next_prompt = resume->next_prompt;
    rl->bl = (struct grpo_baseline){resume->baseline, resume->baseline_set};
    rl->elapsed_before_s = resume->elapsed_s;
    rl->time_to_target_s = resume->time_to_target_s;
    if (resume->n_relaunch > 0) {
        rl->relaunch = xmalloc((size_t)resume->n_relaunch * sizeof *rl->relaunch);
        memcpy(rl->relaunch, resume->relaunch, (size_t)resume->n_relaunch * sizeof *rl->relaunch);
        rl->n_relaunch = resume->n_relaunch;
    }
    for (int64_t i = 0; i < resume->n_trained; i++) note_trained(rl, resume->trained[i]);
    /* The staleness cap counts every group ever launched; the book starts empty. */
    c->groups_before = resume->n_trained;
    for (int64_t g = 0; g < resume->n_groups; g++) restore_group(c, &resume->groups[g]);
    LOG_I("resumed from step %d (version %d): %lld buffered groups, %lld prompts to launch "
          "again, next prompt %lld",
          c->step, c->version, (long long)resume->n_groups, (long long)resume->n_relaunch,
          (long long)c->next_prompt);
}

void ctl_real_free(struct controller *c)
{
    struct ctl_real *rl = &c->rl;
    for (size_t i = 0; i < rl->cap_tok; i++) ttok_free(&rl->tok[i]);
    free(rl->tok);
    for (int i = 0; i < rl->ev.n; i++) ttok_free(&rl->ev.tok[i]);
    free(rl->ev.tok);
    free(rl->ev.t);
    free(rl->relaunch);
    free(rl->trained);
    free(rl->config);
    env_free(&rl->env);
    model_vocab_close(rl->vocab);
    rl->vocab = NULL;
    memset(rl, 0, sizeof *rl);
}

int64_t ctl_real_next_prompt(struct controller *c)
{
    struct ctl_real *rl = &c->rl;
    if (rl->next_relaunch < rl->n_relaunch) return rl->relaunch[rl->next_relaunch++];
    return c->next_prompt++;
}

/* The prompt's tokens, into a trajectory's store. */
static void put_prompt(struct controller *c, const struct env_problem *pr, struct traj *t,
                       struct traj_tokens *tk)
{
    int cap = c->cfg->rollout.max_tokens;
    int32_t *ids = xmalloc((size_t)cap * sizeof *ids);
    int n = env_prompt_tokens(&c->rl.env, pr, ids, cap);
    if (n >= cap)
        FATAL("env: problem %lld needs %d prompt tokens, rollout.max_tokens is %d (raise it)",
              (long long)pr->index, n, cap);
    tk->n = 0;
    ttok_append(tk, ids, NULL, NULL, n, 0);
    free(ids);
    t->prompt_tokens = t->ctx_tokens = n;
}

void ctl_real_launch(struct controller *c, int64_t group_id)
{
    const struct group *g = &c->tt.g[group_id];
    struct env_problem pr;
    env_problem(&c->rl.env, ENV_TRAIN, g->prompt_id, &pr);
    grow_tokens(&c->rl, c->tt.n_traj);
    for (int s = 0; s < g->n; s++) {
        int64_t id = g->first_traj + s;
        put_prompt(c, &pr, &c->tt.t[id], &c->rl.tok[id]);
    }
}

struct traj_tokens *ctl_real_tokens(struct controller *c, int64_t traj_id)
{
    if (traj_id >= CTL_EVAL_ID0) return &c->rl.ev.tok[traj_id - CTL_EVAL_ID0];
    return &c->rl.tok[traj_id];
}

int64_t ctl_real_rng_key(const struct controller *c, const struct traj *t)
{
    if (t->id >= CTL_EVAL_ID0) return -1 - (t->id - CTL_EVAL_ID0); /* greedy anyway */
    const struct group *g = &c->tt.g[t->group_id];
    return t->prompt_id * c->tt.n_samples + (t->id - g->first_traj);
}

void ctl_real_on_turn(struct controller *c, struct traj *t, const struct wire_turn_result *r,
                      const struct wire_turn_arrays *a)
{
    struct traj_tokens *tk = ctl_real_tokens(c, t->id);
    if (r->n_tokens != r->gen_tokens)
        FATAL("turn result of trajectory %lld from rank %d carries %d tokens for %d generated",
              (long long)t->id, r->leader, r->n_tokens, r->gen_tokens);
    if (tk->n + r->n_tokens + r->n_payload > c->cfg->rollout.max_tokens + ENV_PAYLOAD_MAX + 2)
        FATAL("trajectory %lld from rank %d outgrew rollout.max_tokens (%d + %d + %d tokens)",
              (long long)t->id, r->leader, tk->n, r->n_tokens, r->n_payload);
    for (int i = 0; i < r->n_tokens; i++)
        if (a->tokens[i] < 0 || a->tokens[i] >= c->dev.vocab_size)
            FATAL("turn result of trajectory %lld from rank %d: token %d out of range",
                  (long long)t->id, r->leader, a->tokens[i]);
    ttok_append(tk, a->tokens, a->logprobs, a->versions, r->n_tokens, 1);
    if (r->partial || r->final) return;
    ttok_append(tk, a->payload, NULL, NULL, r->n_payload, 0);
    if (r->tool >= 0 && r->tool < ENV_N_TOOLS) {
        tk->tool_calls[r->tool]++;
        tk->tool_failures[r->tool] += r->tool_status != TOOL_SUCCESS;
    }
}

double ctl_real_score(struct controller *c, struct traj *t)
{
    struct env_problem pr;
    struct traj_tokens *tk = ctl_real_tokens(c, t->id);
    if (t->id >= CTL_EVAL_ID0)
        env_problem(&c->rl.env, ENV_EVAL, t->prompt_id, &pr);
    else
        env_problem(&c->rl.env, ENV_TRAIN, t->prompt_id, &pr);
    return env_reward(&c->rl.env, &pr, tk->ids, tk->mask, tk->n, &tk->correct);
}

void ctl_real_advantages(struct controller *c, const int64_t *groups, int n, double *adv)
{
    struct ctl_real *rl = &c->rl;
    struct ctl_real_batch *b = &rl->batch;
    memset(b, 0, sizeof *b);
    int ns = c->tt.n_samples, k = 0;
    double *r = xmalloc((size_t)ns * sizeof *r);
    double gen = 0, turns = 0, ok = 0;
    for (int gi = 0; gi < n; gi++) {
        const struct group *g = &c->tt.g[groups[gi]];
        for (int s = 0; s < ns; s++) {
            const struct traj *t = &c->tt.t[g->first_traj + s];
            const struct traj_tokens *tk = &rl->tok[t->id];
            r[s] = t->reward;
            gen += t->gen_tokens;
            turns += t->turn + 1;
            ok += tk->correct;
            for (int u = 0; u < ENV_N_TOOLS; u++) {
                b->tool_calls[u] += tk->tool_calls[u];
                b->tool_failures[u] += tk->tool_failures[u];
            }
        }
        b->zero_var_groups += grpo_advantages(&rl->gc, r, ns, &rl->bl, adv + k);
        k += ns;
        note_trained(rl, g->prompt_id);
    }
    free(r);
    b->success_rate = k ? ok / k : 0;
    b->gen_tokens_mean = k ? gen / k : 0;
    b->turns_mean = k ? turns / k : 0;
}

void ctl_real_step_row(struct controller *c, const struct wire_train_done *d,
                       struct metrics_step_row *row, double now)
{
    struct ctl_real *rl = &c->rl;
    const struct ctl_real_batch *b = &rl->batch;
    row->success_rate = b->success_rate;
    row->gen_tokens_mean = b->gen_tokens_mean;
    row->turns_mean = b->turns_mean;
    for (int u = 0; u < ENV_N_TOOLS && u < 2; u++) {
        row->tool_calls[u] = b->tool_calls[u];
        row->tool_failures[u] = b->tool_failures[u];
    }
    row->zero_var_groups = b->zero_var_groups;
    double tok = d->tokens > 0 ? d->tokens : 1;
    row->loss = d->loss;
    row->pg_loss = d->pg_loss;
    row->kl = d->kl / tok;
    row->entropy = d->entropy / tok;
    row->clip_frac = d->clipped / tok;
    row->is_trunc_frac = d->is_truncated / tok;
    row->grad_norm = d->grad_norm;
    row->lr = adamw_lr(&(struct adamw_config){.lr = (float)c->cfg->train.lr,
                                              .schedule = LR_CONSTANT,
                                              .warmup_steps = c->cfg->train.warmup_steps},
                       c->step);
    row->params_identical = d->params_identical;
    /* time_to_target_reward: the moving average of the batch reward */
    int w = CTL_REWARD_WINDOW;
    rl->reward_win[rl->reward_win_n % w] = row->reward_mean;
    rl->reward_win_n++;
    int m = rl->reward_win_n < w ? rl->reward_win_n : w;
    double ma = 0;
    for (int i = 0; i < m; i++) ma += rl->reward_win[i];
    ma /= m;
    if (rl->time_to_target_s < 0 && ma >= c->cfg->run.target_reward) {
        rl->time_to_target_s = rl->elapsed_before_s + now;
        char detail[128];
        snprintf(detail, sizeof detail, "moving average of reward %.3f reached run.target_reward "
                 "%.3f after %.1f s", ma, c->cfg->run.target_reward, rl->time_to_target_s);
        if (metrics_event(c->m, now, c->step, EV_TARGET_REWARD, detail))
            FATAL("metrics: cannot record an event");
        LOG_I("%s", detail);
    }
}
