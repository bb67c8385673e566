/*
 * The CPU device's training share (include/libra/device.h, training replica): the
 * rank's token-balanced share of a step goes through the GRPO trainer
 * (include/libra/trainer.h) into the gradient buffer, which the worker sums over the
 * replicas; every replica then takes the same AdamW step on the same sum, so the
 * parameters stay identical (the worker compares their hashes).
 */
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "libra/log.h"
#include "libra/tokenizer.h"

static void make_trainer(struct device *d)
{
    const struct train_config *t = &d->a.cfg->train;
    struct adamw_config oc = {.lr = (float)t->lr,
                              .beta1 = (float)t->beta1,
                              .beta2 = (float)t->beta2,
                              .eps = 1e-8f,
                              .weight_decay = (float)t->weight_decay,
                              .clip_norm = (float)t->clip_norm,
                              .schedule = LR_CONSTANT,
                              .warmup_steps = t->warmup_steps,
                              .total_steps = d->a.cfg->run.steps,
                              .min_lr_ratio = 1.0f};
    struct grpo_config gc = {t->clip_low, t->clip_high, t->is_cap, t->kl_coef, t->entropy_coef,
                             t->adv_eps, t->baseline_decay};
    d->tr = xcalloc(1, sizeof *d->tr);
    /* The trainer owns the parameters from now on (and a resumed optimizer state). */
    trainer_init(d->tr, &d->mc, &d->p, &oc, &d->opt, d->opt_loaded, &gc,
                 d->a.cfg->rollout.max_tokens + ENV_PAYLOAD_MAX + 2);
    if (d->opt_loaded) d->tr->opt.c = oc; /* the run's hyper-parameters, the file's moments */
    d->tr->temperature = (float)d->a.cfg->rollout.temperature; /* as the behaviour log-probs */
    d->opt_loaded = 0;
}

float *cpu_grad_buffer(struct device *d, size_t *n)
{
    if (!d->tr) make_trainer(d);
    *n = d->tr->g.n;
    return d->tr->g.mem;
}

double *cpu_stats_buffer(struct device *d, size_t *n)
{
    *n = DEV_STAT_COUNT;
    return d->stats;
}

struct share {
    struct train_seq *seqs;
    int n;
};

static void read_share(const void *msg, size_t len, struct wire_train_batch *h, struct share *s,
                       int vocab)
{
    struct wire_reader rd;
    if (wire_train_batch_read(&rd, msg, len, h))
        FATAL("malformed training batch (%zu bytes) from rank 0", len);
    s->seqs = xcalloc((size_t)h->n_items + 1, sizeof *s->seqs);
    s->n = 0;
    struct wire_train_item it;
    const int32_t *ids;
    const float *logp;
    const uint8_t *mask;
    int got;
    while ((got = wire_next_train_item(&rd, &it, &ids, &logp, &mask)) == 1) {
        if (!it.has_data) FATAL("training item %lld carries no tokens", (long long)it.traj_id);
        for (int i = 0; i < it.tokens; i++)
            if (ids[i] < 0 || ids[i] >= vocab || mask[i] > 1)
                FATAL("training item %lld: token %d is malformed", (long long)it.traj_id, i);
        s->seqs[s->n++] = (struct train_seq){it.tokens, ids, mask, logp, it.advantage};
    }
    if (got < 0 || s->n != h->n_items) FATAL("malformed training batch item (%zu bytes)", len);
}

double cpu_train_compute(struct device *d, const void *msg, size_t len)
{
    if (!d->tr) make_trainer(d);
    struct wire_train_batch h;
    struct share s;
    read_share(msg, len, &h, &s, d->mc.vocab_size);
    struct grpo_stats st;
    memset(&st, 0, sizeof st);
    trainer_grads(d->tr, s.seqs, s.n, (double)h.global_gen_tokens, &st);
    free(s.seqs);
    double *x = d->stats;
    memset(x, 0, sizeof d->stats);
    x[DEV_STAT_LOSS] = st.loss;
    x[DEV_STAT_PG_LOSS] = st.pg_loss;
    x[DEV_STAT_KL] = st.kl;
    x[DEV_STAT_ENTROPY] = st.entropy;
    x[DEV_STAT_CLIPPED] = st.clipped;
    x[DEV_STAT_IS_TRUNCATED] = st.is_truncated;
    x[DEV_STAT_RATIO_BEHAV] = st.ratio_behav;
    x[DEV_STAT_TOKENS] = st.tokens;
    return 0; /* done on return */
}

void cpu_train_apply(struct device *d, int step, struct wire_train_done *done)
{
    done->grad_norm = trainer_apply(d->tr);
    d->version = step;
    const double *r = d->stats;
    done->loss = r[DEV_STAT_LOSS];
    done->pg_loss = r[DEV_STAT_PG_LOSS];
    done->kl = r[DEV_STAT_KL];
    done->entropy = r[DEV_STAT_ENTROPY];
    done->clipped = r[DEV_STAT_CLIPPED];
    done->is_truncated = r[DEV_STAT_IS_TRUNCATED];
    done->ratio_behav = r[DEV_STAT_RATIO_BEHAV];
    done->tokens = r[DEV_STAT_TOKENS];
}

/* A join's state: the weights, the AdamW moments and the step count (as a float:
 * exact below 2^24 steps). */
float *cpu_join_buffer(struct device *d, int sending, size_t *n)
{
    if (!d->tr) make_trainer(d);
    size_t np = d->tr->p.n;
    if (!d->join) {
        d->n_join = 3 * np + 1;
        d->join = xmalloc(d->n_join * sizeof *d->join);
    }
    if (sending) {
        memcpy(d->join, d->tr->p.mem, np * sizeof(float));
        memcpy(d->join + np, d->tr->opt.m, np * sizeof(float));
        memcpy(d->join + 2 * np, d->tr->opt.v, np * sizeof(float));
        d->join[3 * np] = (float)d->tr->opt.step;
    }
    *n = d->n_join;
    return d->join;
}

void cpu_join_restore(struct device *d, int version)
{
    size_t np = d->tr->p.n;
    memcpy(d->tr->p.mem, d->join, np * sizeof(float));
    memcpy(d->tr->opt.m, d->join + np, np * sizeof(float));
    memcpy(d->tr->opt.v, d->join + 2 * np, np * sizeof(float));
    d->tr->opt.step = (int64_t)d->join[3 * np];
    d->version = version;
}
