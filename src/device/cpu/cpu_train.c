/*
 * The CPU device's training share (include/libra/device.h, training replica): the
 * rank's token-balanced share of a step goes through the GRPO trainer
 * (include/libra/trainer.h) on its shard -- the whole model at TP 1, a tensor-
 * parallel shard of its replica otherwise (the trainer's calls are then collective
 * over the replica) -- into the gradient buffer, which the worker sums over the
 * replicas; every replica then takes the same AdamW step on the same sum (gradient
 * norm of the whole model), so the parameters stay identical.
 *
 * Also here: a join's state (weights + AdamW moments + step), and the checkpoint's
 * model file, which the root replica's TP ranks gather to the root.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "libra/log.h"
#include "libra/gpu_train.h"
#include "libra/tfm_io.h"
#include "libra/tokenizer.h"

/* A resumed optimizer state of the whole model, cut to this rank's shard. */
static void shard_moments(const struct device *d, const struct adamw *whole, struct adamw *out)
{
    const struct tfm_tp *tp = &d->sh.tp;
    struct tfm_params full, part;
    tfm_params_alloc(&full, &d->mc);
    tfm_params_alloc(&part, &tp->local);
    adamw_init(out, &whole->c, part.n);
    out->step = whole->step;
    const float *src[2] = {whole->m, whole->v};
    float *dst[2] = {out->m, out->v};
    for (int k = 0; k < 2; k++) {
        memcpy(full.mem, src[k], full.n * sizeof *full.mem);
        tfm_tp_shard(tp, &full, &part);
        memcpy(dst[k], part.mem, part.n * sizeof *part.mem);
    }
    tfm_params_free(&full);
    tfm_params_free(&part);
}

static void make_trainer(struct device *d)
{
    const struct train_config *t = &d->a.cfg->train;
    if (d->sh.t == 0) FATAL("rank %d trains without a shard of the model (a bug)", d->a.rank);
    if (d->version < 0)
        FATAL("rank %d trains without weights: a training replica must hold the current "
              "weights and optimizer state when its epoch starts", d->a.rank);
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
    int max_tokens = d->a.cfg->rollout.max_tokens + ENV_PAYLOAD_MAX + 2;
    cpu_stage16_catch_up(d); /* sh.p current before the trainer takes it */
    d->tr = xcalloc(1, sizeof *d->tr);
    /* The trainer owns the shard's weights from now on (and a resumed optimizer state). */
    if (d->sh.t == 1) {
        trainer_init(d->tr, &d->mc, &d->sh.p, &oc, &d->opt, d->opt_loaded, &gc, max_tokens);
    } else {
        struct adamw part;
        if (d->opt_loaded) shard_moments(d, &d->opt, &part);
        trainer_init_tp(d->tr, &d->sh.tp, &d->sh.p, &oc, &part, d->opt_loaded, &gc, max_tokens);
        if (d->opt_loaded) adamw_free(&d->opt);
    }
    if (d->opt_loaded) d->tr->opt.c = oc; /* the run's hyper-parameters, the file's moments */
    d->tr->temperature = (float)d->a.cfg->rollout.temperature; /* as the behaviour log-probs */
    d->opt_loaded = 0;
}

/* Device cuda: the trainer's forwards, backwards and AdamW on this rank's GPU, given
 * the trainer's current parameters and moments. */
static void attach_gpu(struct device *d)
{
    const struct train_config *t = &d->a.cfg->train;
    char err[1024];
    int max_tokens = d->a.cfg->rollout.max_tokens + ENV_PAYLOAD_MAX + 2;
    d->gtr = gpu_trainer_create_tp(d->gpu, &d->sh.tp, cpu_gpu_comm(d), &d->mc, &d->tr->p,
                                   max_tokens, &d->tr->opt.c, err, sizeof err);
    if (!d->gtr)
        FATAL("rank %d: the GPU training path (train.batch_size %d): %s", d->a.rank,
              t->batch_size, err);
    gpu_trainer_set_kv_comm(d->gtr, cpu_gpu_comm_kv(d)); /* replicated kv heads */
    d->geng = gpu_trainer_engine(d->gtr);
    trainer_set_engine(d->tr, &d->geng);
    LOG_D("rank %d: GPU trainer of shard (TP %d, %d): %.1f MB of GPU memory%s", d->a.rank,
          d->sh.t, d->sh.i, gpu_trainer_bytes(d->gtr) / 1e6,
          gpu_trainer_recomputes(d->gtr) ? " (recomputing activations)" : "");
}

void cpu_train_prepare(struct device *d)
{
    if (!d->tr) make_trainer(d);
    if (d->gpu && !d->gtr) attach_gpu(d);
}

void cpu_train_retire(struct device *d)
{
    if (!d->tr) return;
    if (d->gtr)
        LOG_D("rank %d: GPU trainer released (%.1f MB)", d->a.rank,
              gpu_trainer_bytes(d->gtr) / 1e6);
    trainer_fetch_params(d->tr); /* the step's weights, from the GPU where they are */
    d->sh.p = d->tr->p;          /* the shard's again (the trainer took them over) */
    memset(&d->tr->p, 0, sizeof d->tr->p);
    cpu_trainer_drop(d);
}

float *cpu_grad_buffer(struct device *d, size_t *n)
{
    cpu_train_prepare(d);
    *n = d->tr->g.n;
    return trainer_host_grads(d->tr);
}

/* Device cuda at TP 1: the gradient is still on the GPU (trainer_grads left it there),
 * so the replicas sum it there -- NCCL when each drives a GPU of its own, else staged
 * through the host -- and the step runs on the sum in place. */
int cpu_grad_reduce(struct device *d, MPI_Comm dp)
{
    int32_t here = d->gtr && d->tr && d->tr->grads_on_engine, all;
    MPI_CHECK(MPI_Allreduce(&here, &all, 1, MPI_INT32_T, MPI_MIN, dp));
    if (!all) return 0;
    int size;
    MPI_CHECK(MPI_Comm_size(dp, &size));
    if (size == 1) return 1;
    struct gpu_comm *gc = cpu_gpu_comm_dp(d, dp);
    if (!gc) return 0;
    gpu_trainer_allreduce_grads(d->gtr, gc);
    return 1;
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

/* Fault injection for the tests of train.on_nonfinite: LIBRA_TEST_NONFINITE_STEP=N
 * puts a NaN into this rank's gradient of the last layer's MLP down projection at
 * optimizer step N (as a numerical blow-up would). Unset in real runs. */
static void poison_for_test(struct device *d, int step)
{
    const char *e = getenv("LIBRA_TEST_NONFINITE_STEP");
    if (!e || atoi(e) != step) return;
    trainer_host_grads(d->tr); /* the gradient poisoned on the host from here on */
    int nt = tfm_tensors(&d->tr->mc, &d->tr->g, NULL, 0);
    struct tfm_tensor *ts = xmalloc((size_t)nt * sizeof *ts);
    tfm_tensors(&d->tr->mc, &d->tr->g, ts, nt);
    for (int i = nt - 1; i >= 0; i--)
        if (strstr(ts[i].name, "mlp.down_proj.weight")) {
            ts[i].data[0] = NAN;
            break;
        }
    free(ts);
}

double cpu_train_compute(struct device *d, const void *msg, size_t len)
{
    cpu_train_prepare(d);
    struct wire_train_batch h;
    struct share s;
    read_share(msg, len, &h, &s, d->mc.vocab_size);
    struct grpo_stats st;
    memset(&st, 0, sizeof st);
    trainer_grads(d->tr, s.seqs, s.n, (double)h.global_gen_tokens, &st);
    free(s.seqs);
    poison_for_test(d, h.step);
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
    x[DEV_STAT_FWD_S] = d->tr->fwd_s;
    x[DEV_STAT_BWD_S] = d->tr->bwd_s;
    return 0; /* done on return */
}

void cpu_train_apply(struct device *d, int step, struct wire_train_done *done)
{
    const double *r = d->stats;
    int applied;
    done->grad_norm = trainer_apply_guarded(d->tr, !isfinite(r[DEV_STAT_LOSS]), &applied);
    if (!applied) {
        done->nonfinite = 1;
        if (!trainer_nonfinite_grad(d->tr, done->bad_tensor, sizeof done->bad_tensor))
            done->bad_tensor[0] = '\0';
    }
    d->version = step; /* an unapplied step still makes a version: the same weights */
    done->loss = r[DEV_STAT_LOSS];
    done->pg_loss = r[DEV_STAT_PG_LOSS];
    done->kl = r[DEV_STAT_KL];
    done->entropy = r[DEV_STAT_ENTROPY];
    done->clipped = r[DEV_STAT_CLIPPED];
    done->is_truncated = r[DEV_STAT_IS_TRUNCATED];
    done->ratio_behav = r[DEV_STAT_RATIO_BEHAV];
    done->tokens = r[DEV_STAT_TOKENS];
}

/* A join's state: the shard's weights, its AdamW moments and the step count (as a
 * float: exact below 2^24 steps). */
float *cpu_join_buffer(struct device *d, int sending, size_t *n)
{
    /* a joining rank's snapshot overwrites everything; a partner that has not trained
     * yet (a plan that lends ranks from its first step) serves its starting state */
    if (!d->tr && d->version < 0) d->version = 0;
    cpu_train_prepare(d);
    size_t np = d->tr->p.n;
    if (!d->join || d->n_join != 3 * np + 1) {
        free(d->join);
        d->n_join = 3 * np + 1;
        d->join = xmalloc(d->n_join * sizeof *d->join);
    }
    if (sending) {
        trainer_fetch_moments(d->tr);
        trainer_fetch_params(d->tr);
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
    trainer_params_changed(d->tr);
    d->version = version;
}

/* ---- the checkpoint's model file ---- */

/* Gathers k (0: weights, 1: m, 2: v) of every TP rank of the replica into whole at
 * the replica's rank 0 (collective over the replica). */
static void gather_whole(struct device *d, const float *mine, size_t n, struct tfm_params *whole)
{
    const struct cpu_shard *sh = &d->sh;
    int t = sh->t, root = sh->comm.tc.rank == 0, n_mine = (int)n;
    int *counts = xmalloc((size_t)t * sizeof *counts), *displs = xmalloc((size_t)t * sizeof *displs);
    /* the ranks' blocks differ in size (vocabulary rows) */
    MPI_CHECK(MPI_Allgather(&n_mine, 1, MPI_INT, counts, 1, MPI_INT, sh->comm.comm));
    int total = 0;
    for (int i = 0; i < t; i++) {
        displs[i] = total;
        total += counts[i];
    }
    float *all = root ? xmalloc((size_t)total * sizeof *all) : NULL;
    MPI_CHECK(MPI_Gatherv(mine, n_mine, MPI_FLOAT, all, counts, displs, MPI_FLOAT, 0,
                          sh->comm.comm));
    for (int i = 0; root && i < t; i++) {
        struct tfm_tp geo;
        struct tfm_comm c1, c2;
        cpu_shard_geometry(&d->mc, t, i, &geo, &c1, &c2);
        struct tfm_params part;
        tfm_params_alloc(&part, &geo.local);
        if (part.n != (size_t)counts[i])
            FATAL("checkpoint: TP rank %d sent %d floats, its shard has %zu", i, counts[i], part.n);
        memcpy(part.mem, all + displs[i], part.n * sizeof *part.mem);
        tfm_tp_unshard(&geo, &part, whole);
        tfm_params_free(&part);
    }
    free(all);
    free(counts);
    free(displs);
}

/* ---- the training state cut for another TP degree (a plan that changes it) ---- */

int cpu_state_whole(struct device *d, int keep)
{
    if (d->has_whole)
        for (int k = 0; k < 3; k++) tfm_params_free(&d->whole[k]);
    d->has_whole = 0;
    free(d->cut);
    d->cut = NULL;
    d->n_cut = 0;
    if (!keep) return 0;
    /* a replica that has not trained yet has its weights and zero moments */
    const struct tfm_params *live = cpu_live_params(d);
    float *zeros = d->tr ? NULL : xcalloc(live->n ? live->n : 1, sizeof *zeros);
    if (d->tr) trainer_fetch_moments(d->tr);
    const float *mine[3] = {live->mem, d->tr ? d->tr->opt.m : zeros, d->tr ? d->tr->opt.v : zeros};
    int root = d->sh.t == 1 || d->sh.comm.tc.rank == 0;
    for (int k = 0; k < 3; k++) {
        if (root) tfm_params_alloc(&d->whole[k], &d->mc);
        if (d->sh.t == 1)
            memcpy(d->whole[k].mem, mine[k], d->whole[k].n * sizeof *mine[k]);
        else
            gather_whole(d, mine[k], live->n, root ? &d->whole[k] : NULL);
    }
    free(zeros);
    d->whole_step = d->tr ? d->tr->opt.step : 0;
    d->has_whole = root;
    return root;
}

float *cpu_state_cut(struct device *d, int t, int i, size_t *n)
{
    if (!d->has_whole) FATAL("rank %d: state_cut without the whole state (a bug)", d->a.rank);
    struct tfm_tp geo;
    struct tfm_comm c1, c2;
    cpu_shard_geometry(&d->mc, t, i, &geo, &c1, &c2);
    struct tfm_params part;
    tfm_params_alloc(&part, &geo.local);
    size_t np = part.n;
    if (d->n_cut != 3 * np + 1) {
        free(d->cut);
        d->n_cut = 3 * np + 1;
        d->cut = xmalloc(d->n_cut * sizeof *d->cut);
    }
    for (int k = 0; k < 3; k++) { /* join_buffer's layout: weights, m, v, step */
        tfm_tp_shard(&geo, &d->whole[k], &part);
        memcpy(d->cut + (size_t)k * np, part.mem, np * sizeof *part.mem);
    }
    d->cut[3 * np] = (float)d->whole_step;
    tfm_params_free(&part);
    *n = d->n_cut;
    return d->cut;
}

int cpu_train_save(struct device *d, const char *dir, char *err, size_t errlen)
{
    if (!d->tr) {
        snprintf(err, errlen, "rank %d holds no trained model", d->a.rank);
        return -1;
    }
    trainer_fetch_moments(d->tr);
    trainer_fetch_params(d->tr);
    char path[1100];
    snprintf(path, sizeof path, "%s/model.h5", dir);
    /* provenance for `libra export`: the HF directory the run started from, the run */
    const struct tfm_tag tags[2] = {{TFM_TAG_HF_SOURCE, d->hf_source},
                                    {TFM_TAG_RUN_NAME, d->a.cfg->run.name}};
    if (d->sh.t == 1)
        return tfm_save_tagged(path, &d->mc, &d->tr->p, &d->tr->opt, tags, 2, err, errlen);
    /* the whole model and its moments, gathered at the replica's rank 0 */
    int root = d->sh.comm.tc.rank == 0;
    struct tfm_params whole[3];
    const float *mine[3] = {d->tr->p.mem, d->tr->opt.m, d->tr->opt.v};
    for (int k = 0; k < 3; k++) {
        if (root) tfm_params_alloc(&whole[k], &d->mc);
        gather_whole(d, mine[k], d->tr->p.n, root ? &whole[k] : NULL);
    }
    int rc = 0;
    if (root) {
        struct adamw opt;
        adamw_init(&opt, &d->tr->opt.c, whole[0].n);
        opt.step = d->tr->opt.step;
        memcpy(opt.m, whole[1].mem, whole[1].n * sizeof *opt.m);
        memcpy(opt.v, whole[2].mem, whole[2].n * sizeof *opt.v);
        rc = tfm_save_tagged(path, &d->mc, &whole[0], &opt, tags, 2, err, errlen);
        adamw_free(&opt);
        for (int k = 0; k < 3; k++) tfm_params_free(&whole[k]);
    }
    return rc;
}
