/*
 * A worker's training role with the real model (device cpu): its token-balanced
 * share of the step's trajectories goes through the GRPO trainer
 * (include/libra/trainer.h); the gradient and the loss statistics are summed over
 * the training communicator with non-blocking all-reduces; every replica then takes
 * the same AdamW step, and a hash of the parameters is compared across replicas so
 * "identical parameters everywhere" is checked, not assumed. The training root
 * reports the step to rank 0.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "libra/mpi_wait.h"
#include "libra/tokenizer.h"
#include "libra/worker.h"

static void make_trainer(struct worker *w)
{
    struct worker_cpu *wc = &w->cpu;
    const struct train_config *t = &w->cfg->train;
    struct adamw_config oc = {.lr = (float)t->lr,
                              .beta1 = (float)t->beta1,
                              .beta2 = (float)t->beta2,
                              .eps = 1e-8f,
                              .weight_decay = (float)t->weight_decay,
                              .clip_norm = (float)t->clip_norm,
                              .schedule = LR_CONSTANT,
                              .warmup_steps = t->warmup_steps,
                              .total_steps = w->cfg->run.steps,
                              .min_lr_ratio = 1.0f};
    struct grpo_config gc = {t->clip_low, t->clip_high, t->is_cap, t->kl_coef, t->entropy_coef,
                             t->adv_eps, t->baseline_decay};
    wc->tr = xcalloc(1, sizeof *wc->tr);
    /* The trainer owns the parameters from now on (and a resumed optimizer state). */
    trainer_init(wc->tr, &wc->mc, &wc->p, &oc, &wc->opt, wc->opt_loaded, &gc,
                 w->cfg->rollout.max_tokens + ENV_PAYLOAD_MAX + 2);
    if (wc->opt_loaded) wc->tr->opt.c = oc; /* the run's hyper-parameters, the file's moments */
    wc->tr->temperature = (float)w->cfg->rollout.temperature; /* as the behaviour log-probs */
    wc->opt_loaded = 0;
}

struct share {
    struct train_seq *seqs;
    int n;
};

static void read_share(const void *msg, size_t len, struct wire_train_batch *h, struct share *s)
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
            if (ids[i] < 0 || ids[i] >= TOK_VOCAB_SIZE || mask[i] > 1)
                FATAL("training item %lld: token %d is malformed", (long long)it.traj_id, i);
        s->seqs[s->n++] = (struct train_seq){it.tokens, ids, mask, logp, it.advantage};
    }
    if (got < 0 || s->n != h->n_items) FATAL("malformed training batch item (%zu bytes)", len);
}

void wtc_on_batch(struct worker *w, const void *msg, size_t len)
{
    struct worker_cpu *wc = &w->cpu;
    struct worker_train *t = &w->tr;
    int role = w->plan.ranks[w->rank].role;
    if (role != ROLE_TRAIN) FATAL("training batch reached rank %d whose role is %s", w->rank, role_name(role));
    wt_settle(w);
    if (!wc->tr) make_trainer(w);
    struct wire_train_batch h;
    struct share s;
    read_share(msg, len, &h, &s);
    double t0 = wall_time();
    memset(&wc->st, 0, sizeof wc->st);
    trainer_grads(wc->tr, s.seqs, s.n, (double)h.global_gen_tokens, &wc->st);
    free(s.seqs);
    t->step = h.step;
    t->n_replicas = h.n_replicas;
    t->compute_s = wall_time() - t0;
    const struct grpo_stats *g = &wc->st;
    double in[9] = {g->loss, g->pg_loss, g->kl, g->entropy, g->clipped, g->is_truncated,
                    g->ratio_behav, g->tokens, t->compute_s};
    memcpy(wc->reduce_in, in, sizeof in);
    t0 = wall_time();
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, wc->tr->g.mem, (int)wc->tr->g.n, MPI_FLOAT, MPI_SUM,
                             w->comms.role, &wc->req[0]));
    MPI_CHECK(MPI_Iallreduce(wc->reduce_in, wc->reduce_out, 9, MPI_DOUBLE, MPI_SUM, w->comms.role,
                             &wc->req[1]));
    wc->t_compute = t0;
    t->phase = TP_REDUCE;
}

/* FNV-1a over the parameter bytes. */
static uint64_t params_hash(const float *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n * sizeof *p; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static void finish_step(struct worker *w)
{
    struct worker_cpu *wc = &w->cpu;
    struct worker_train *t = &w->tr;
    t->comm_s = wall_time() - wc->t_compute;
    double norm = trainer_apply(wc->tr);
    w->version = t->step;
    uint64_t h = params_hash(wc->tr->p.mem, wc->tr->p.n), lo, hi;
    MPI_CHECK(MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, w->comms.role));
    MPI_CHECK(MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, w->comms.role));
    if (lo != hi)
        LOG_E("step %d: the training replicas' parameters differ (hash %016llx here)", t->step,
              (unsigned long long)h);
    t->phase = TP_IDLE;
    if (plan_train_root(&w->plan) != w->rank) return;
    const double *r = wc->reduce_out;
    struct wire_train_done d = {.step = t->step,
                                .n_replicas = t->n_replicas,
                                .compute_s = t->compute_s,
                                .comm_s = t->comm_s,
                                .busy_rank_s = r[8],
                                .grad_norm = norm,
                                .loss = r[0],
                                .pg_loss = r[1],
                                .kl = r[2],
                                .entropy = r[3],
                                .clipped = r[4],
                                .is_truncated = r[5],
                                .ratio_behav = r[6],
                                .tokens = r[7],
                                .params_identical = lo == hi};
    outbox_send(&w->ob, &d, sizeof d, 0, TAG_TRAIN_DONE, MPI_COMM_WORLD);
}

int wtc_progress(struct worker *w)
{
    struct worker_cpu *wc = &w->cpu;
    if (w->tr.phase != TP_REDUCE) return 0;
    int done = 0;
    MPI_CHECK(MPI_Testall(2, wc->req, &done, MPI_STATUSES_IGNORE));
    if (!done) return 0;
    finish_step(w);
    return 1;
}

void wtc_settle(struct worker *w)
{
    struct worker_cpu *wc = &w->cpu;
    if (w->tr.phase != TP_REDUCE) return;
    for (int i = 0; i < 2; i++) mpi_wait_backoff(&wc->req[i], NULL);
    finish_step(w);
}
