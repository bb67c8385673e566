/*
 * One replica's GRPO step on the CPU engine (include/libra/trainer.h).
 *
 * trainer_grads packs whole sequences, in order, into batches of at most max_tokens
 * tokens. A sequence of n ids gives n - 1 batch tokens: inputs ids[0..n-2], targets
 * ids[1..n-1], so batch token t of that sequence scores ids[t + 1] with mask[t + 1]
 * and logp_behav[t + 1]; targets whose mask is 0 are -1 (not scored). Per batch: a
 * forward under the current parameters gives logp_prox (= logp: one update per
 * rollout batch, so rho = 1 at the point the gradient is taken) and the entropies
 * (always, for the stats), a forward under the frozen reference gives logp_ref
 * (kl_coef > 0), grpo_token_weights turns them into w_t and e_t, and tfm_backward
 * adds the gradient into t->g. A batch whose weights are all 0 (zero-variance groups
 * without KL or entropy terms) skips the backward.
 *
 * With an engine (trainer_set_engine) the forwards and backwards run there (the
 * reference model's forward stays here). The AdamW update runs on the engine when it
 * offers one (which then holds the moments and hands back the new parameters, or
 * keeps them too if it can serve them: read_params), else on the host parameters,
 * which the engine is then given. An engine that can also
 * take a gradient's norm keeps a TP-1 trainer's gradient until it is asked for
 * (trainer_host_grads), so that the replicas' sum and the step may run there; a
 * tensor-parallel shard's partial gradients are reduced and normed here.
 *
 * All scratch is allocated by trainer_init; a step allocates nothing.
 */
#include "libra/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/hash.h"
#include "libra/log.h"
#include "libra/safetensors.h"

static void init(struct trainer *t, const struct tfm_tp *tp, const struct tfm_config *mc,
                 struct tfm_params *p, const struct adamw_config *oc, struct adamw *opt_loaded,
                 int opt_is_loaded, const struct grpo_config *gc, int max_tokens)
{
    memset(t, 0, sizeof *t);
    t->tp = tp;
    if (p->n != tfm_param_count(mc))
        FATAL("trainer_init: parameter block has %zu floats, the model config needs %zu",
              p->n, tfm_param_count(mc));
    if (max_tokens <= 0)
        FATAL("trainer_init: max_tokens = %d must be positive", max_tokens);
    t->mc = *mc;
    t->p = *p;
    memset(p, 0, sizeof *p); /* owned here now: the caller's tfm_params_free is a no-op */
    if (opt_is_loaded) {
        if (opt_loaded->n != t->p.n)
            FATAL("trainer_init: the loaded optimizer state has %zu moments per kind, the "
                  "model %zu parameters (checkpoint of another model?)",
                  opt_loaded->n, t->p.n);
        t->opt = *opt_loaded;
        memset(opt_loaded, 0, sizeof *opt_loaded);
    } else {
        adamw_init(&t->opt, oc, t->p.n);
    }
    tfm_params_alloc(&t->g, mc);
    t->gc = *gc;
    t->have_ref = gc->kl_coef > 0;
    if (t->have_ref) {
        tfm_params_alloc(&t->ref, mc);
        memcpy(t->ref.mem, t->p.mem, t->p.n * sizeof(float));
    }
    t->max_tokens = max_tokens;
    t->temperature = 1.0f;
    t->st = tp ? tfm_state_create_tp(tp, max_tokens) : tfm_state_create(mc, max_tokens);
    t->cap = (size_t)max_tokens;
    t->tok = xmalloc(t->cap * sizeof *t->tok);
    t->tgt = xmalloc(t->cap * sizeof *t->tgt);
    t->w = xmalloc(t->cap * sizeof *t->w);
    t->e = xmalloc(t->cap * sizeof *t->e);
    t->lp = xmalloc(t->cap * sizeof *t->lp);
    t->lp_ref = xmalloc(t->cap * sizeof *t->lp_ref);
    t->ent = xmalloc(t->cap * sizeof *t->ent);
    t->seq_len = xmalloc(t->cap * sizeof *t->seq_len);
}

void trainer_init(struct trainer *t, const struct tfm_config *mc, struct tfm_params *p,
                  const struct adamw_config *oc, struct adamw *opt_loaded, int opt_is_loaded,
                  const struct grpo_config *gc, int max_tokens)
{
    init(t, NULL, mc, p, oc, opt_loaded, opt_is_loaded, gc, max_tokens);
}

void trainer_init_tp(struct trainer *t, const struct tfm_tp *tp, struct tfm_params *p,
                     const struct adamw_config *oc, struct adamw *opt_loaded, int opt_is_loaded,
                     const struct grpo_config *gc, int max_tokens)
{
    init(t, tp, &tp->local, p, oc, opt_loaded, opt_is_loaded, gc, max_tokens);
}

void trainer_free(struct trainer *t)
{
    if (!t) return;
    free(t->seq_len);
    free(t->ent);
    free(t->lp_ref);
    free(t->lp);
    free(t->e);
    free(t->w);
    free(t->tgt);
    free(t->tok);
    tfm_state_free(t->st);
    if (t->have_ref) tfm_params_free(&t->ref);
    tfm_params_free(&t->g);
    adamw_free(&t->opt);
    tfm_params_free(&t->p);
    memset(t, 0, sizeof *t);
}

/* Contract checks on one sequence (FATAL with the index on a violation). */
static void check_seq(const struct trainer *t, const struct train_seq *q, int i)
{
    if (q->n < 0 || q->n > t->max_tokens)
        FATAL("trainer_grads: sequence %d has %d tokens, outside [0, %d] (keep "
              "rollout.max_tokens <= the trainer's max_tokens)", i, q->n, t->max_tokens);
    if (q->n > 0 && (!q->ids || !q->mask))
        FATAL("trainer_grads: sequence %d (%d tokens) has no ids or no loss mask", i, q->n);
    if (!q->logp_behav)
        for (int k = 1; k < q->n; k++)
            if (q->mask[k])
                FATAL("trainer_grads: sequence %d has model-generated tokens but no "
                      "behaviour log-probs", i);
}

/* Tokens sequence q contributes to a batch: its targets ids[1..n-1]. */
static int batch_tokens(const struct train_seq *q) { return q->n > 1 ? q->n - 1 : 0; }

/* Scores seqs[0..n_seq) as one packed batch (sequences of fewer than 2 ids left out)
 * and accumulates their gradient into t->g. */
static void run_batch(struct trainer *t, const struct train_seq *seqs, int n_seq,
                      double norm_tokens, struct grpo_stats *st)
{
    int T = 0, S = 0;
    for (int i = 0; i < n_seq; i++) {
        const struct train_seq *q = &seqs[i];
        int m = batch_tokens(q);
        if (m == 0) continue;
        for (int k = 0; k < m; k++) {
            t->tok[T + k] = q->ids[k];
            t->tgt[T + k] = q->mask[k + 1] ? q->ids[k + 1] : -1;
        }
        t->seq_len[S++] = m;
        T += m;
    }
    struct tfm_batch b = {.n_seq = S, .seq_len = t->seq_len, .tokens = t->tok,
                          .targets = t->tgt, .temperature = t->temperature};
    double t0 = wall_time();
    if (t->eng) {
        t->eng->forward(t->eng->ctx, &b, t->lp, t->ent);
        if (t->have_ref && t->tp) tfm_forward_tp(t->tp, &t->ref, t->st, &b, t->lp_ref, NULL);
        else if (t->have_ref) tfm_forward(&t->mc, &t->ref, t->st, &b, t->lp_ref, NULL, NULL);
    } else if (t->tp) {
        tfm_forward_tp(t->tp, &t->p, t->st, &b, t->lp, t->ent);
        if (t->have_ref) tfm_forward_tp(t->tp, &t->ref, t->st, &b, t->lp_ref, NULL);
    } else {
        tfm_forward(&t->mc, &t->p, t->st, &b, t->lp, t->ent, NULL);
        if (t->have_ref) tfm_forward(&t->mc, &t->ref, t->st, &b, t->lp_ref, NULL, NULL);
    }

    int off = 0;
    for (int i = 0; i < n_seq; i++) {
        const struct train_seq *q = &seqs[i];
        int m = batch_tokens(q);
        if (m == 0) continue;
        grpo_token_weights(&t->gc, m, t->lp + off, t->lp + off,
                           q->logp_behav ? q->logp_behav + 1 : NULL,
                           t->have_ref ? t->lp_ref + off : NULL, t->ent + off, q->advantage,
                           q->mask + 1, norm_tokens, t->w + off, t->e + off, st);
        off += m;
    }
    int any = 0; /* the same on every rank of a TP group: the weights are */
    for (int k = 0; k < T && !any; k++) any = t->w[k] != 0.0f || t->e[k] != 0.0f;
    double t1 = wall_time();
    t->fwd_s += t1 - t0;
    if (!any) return;
    b.weights = t->w;
    b.entropy_weights = t->gc.entropy_coef != 0.0 ? t->e : NULL;
    if (t->eng)
        t->eng->backward(t->eng->ctx, &b);
    else if (t->tp)
        tfm_backward_tp(t->tp, &t->p, t->st, &b, &t->g);
    else
        tfm_backward(&t->mc, &t->p, t->st, &b, &t->g);
    t->bwd_s += wall_time() - t1;
}

void trainer_grads(struct trainer *t, const struct train_seq *seqs, int n_seq,
                   double norm_tokens, struct grpo_stats *st)
{
    int on_engine = t->eng && t->eng->step && t->eng->grad_sq &&
                    (!t->tp || (t->eng->tp_reduce && t->eng->grad_sq_at));
    if (!on_engine) memset(t->g.mem, 0, t->g.n * sizeof(float));
    t->grads_on_engine = 0;
    t->fwd_s = t->bwd_s = 0;
    for (int i = 0; i < n_seq; i++) check_seq(t, &seqs[i], i);
    if (t->eng) t->eng->grads_begin(t->eng->ctx);
    /* Greedy packing in order; every sequence fits an empty batch (n <= max_tokens
     * gives n - 1 tokens), so each batch takes at least one. */
    for (int i = 0; i < n_seq;) {
        int j = i, T = 0;
        while (j < n_seq && T + batch_tokens(&seqs[j]) <= t->max_tokens)
            T += batch_tokens(&seqs[j++]);
        if (T > 0) run_batch(t, seqs + i, j - i, norm_tokens, st);
        i = j;
    }
    if (on_engine)
        t->grads_on_engine = 1;
    else if (t->eng)
        t->eng->grads_end(t->eng->ctx, t->g.mem);
}

float *trainer_host_grads(struct trainer *t)
{
    if (t->grads_on_engine) {
        t->eng->grads_end(t->eng->ctx, t->g.mem);
        t->grads_on_engine = 0;
    }
    return t->g.mem;
}

/* A TP shard's gradient on the engine: reduced there, its norm the group's sum of the
 * primary slices' squares (tfm_tp_grad_sq's terms, summed on the engine). */
static double tp_norm_on_engine(struct trainer *t)
{
    t->eng->tp_reduce(t->eng->ctx);
    int n = tfm_tp_slices(t->tp, &t->g, NULL, 0), k = 0;
    struct tfm_slice *sl = xmalloc((size_t)(n ? n : 1) * sizeof *sl);
    size_t *off = xmalloc((size_t)(n ? n : 1) * sizeof *off);
    size_t *len = xmalloc((size_t)(n ? n : 1) * sizeof *len);
    tfm_tp_slices(t->tp, &t->g, sl, n);
    for (int i = 0; i < n; i++) {
        if (!sl[i].primary) continue; /* a replica counted on its primary rank */
        size_t o = (size_t)(sl[i].local - t->g.mem), m = (size_t)(sl[i].nr * sl[i].nc);
        if (k > 0 && off[k - 1] + len[k - 1] == o) { /* adjacent: one range */
            len[k - 1] += m;
            continue;
        }
        off[k] = o;
        len[k++] = m;
    }
    double ss = t->eng->grad_sq_at(t->eng->ctx, off, len, k);
    free(sl), free(off), free(len);
    if (t->tp->t > 1) t->tp->comm->allreduce_f64(t->tp->comm->ctx, &ss, 1, TFM_RED_SUM);
    return sqrt(ss);
}

double trainer_apply_guarded(struct trainer *t, int skip, int *applied)
{
    double norm;
    if (t->tp && t->grads_on_engine) {
        norm = tp_norm_on_engine(t);
    } else if (t->tp) {
        tfm_tp_reduce_grads(t->tp, &t->g);
        norm = sqrt(tfm_tp_grad_sq(t->tp, &t->g));
    } else if (t->grads_on_engine) {
        norm = sqrt(t->eng->grad_sq(t->eng->ctx));
    } else {
        norm = adamw_grad_norm(t->g.mem, t->g.n);
    }
    *applied = !skip && isfinite(norm);
    if (!*applied) return norm; /* nothing changes: parameters, moments, step count */
    if (t->eng && t->eng->step) {
        struct adamw_scalars s;
        adamw_scalars_of(&t->opt.c, ++t->opt.step, &s);
        int keep = t->eng->read_params != NULL; /* the weights stay there */
        t->eng->step(t->eng->ctx, t->grads_on_engine ? NULL : t->g.mem,
                     adamw_clip_factor(&t->opt.c, norm), &s, keep ? NULL : t->p.mem);
        t->params_on_engine = keep;
        return norm;
    }
    adamw_step_norm(&t->opt, t->p.mem, t->g.mem, norm);
    if (t->eng) t->eng->set_params(t->eng->ctx, t->p.mem);
    return norm;
}

double trainer_apply(struct trainer *t)
{
    int applied;
    return trainer_apply_guarded(t, 0, &applied);
}

int trainer_nonfinite_grad(struct trainer *t, char *name, size_t n)
{
    trainer_host_grads(t);
    int nt = tfm_tensors(&t->mc, &t->g, NULL, 0), found = 0;
    struct tfm_tensor *ts = xmalloc((size_t)nt * sizeof *ts);
    tfm_tensors(&t->mc, &t->g, ts, nt);
    for (int i = 0; i < nt && !found; i++) {
        size_t len = (size_t)ts[i].dims[0] * (ts[i].ndim > 1 ? (size_t)ts[i].dims[1] : 1);
        for (size_t k = 0; k < len; k++)
            if (!isfinite(ts[i].data[k])) {
                snprintf(name, n, "%s", ts[i].name);
                found = 1;
                break;
            }
    }
    free(ts);
    return found;
}

void trainer_set_engine(struct trainer *t, const struct train_engine *eng)
{
    trainer_host_grads(t); /* from an engine that held them */
    trainer_fetch_moments(t);
    trainer_fetch_params(t);
    t->eng = eng;
    trainer_params_changed(t);
}

void trainer_params_changed(struct trainer *t)
{
    t->params_on_engine = 0; /* the caller wrote p: it is the truth */
    if (!t->eng) return;
    t->eng->set_params(t->eng->ctx, t->p.mem);
    if (t->eng->step) t->eng->set_moments(t->eng->ctx, t->opt.m, t->opt.v);
}

void trainer_weights_changed(struct trainer *t)
{
    t->params_on_engine = 0;
    if (t->eng) t->eng->set_params(t->eng->ctx, t->p.mem);
}

void trainer_fetch_moments(struct trainer *t)
{
    if (t->eng && t->eng->step) t->eng->get_moments(t->eng->ctx, t->opt.m, t->opt.v);
}

void trainer_fetch_params(struct trainer *t)
{
    if (!t->params_on_engine) return;
    t->eng->read_params(t->eng->ctx, 0, t->p.n, t->p.mem, NULL);
    t->params_on_engine = 0;
}

void trainer_read_params(struct trainer *t, size_t off, size_t n, float *f32, uint16_t *b16)
{
    if (off > t->p.n || n > t->p.n - off)
        FATAL("trainer_read_params: elements %zu .. %zu of %zu", off, off + n, t->p.n);
    if (t->params_on_engine) {
        t->eng->read_params(t->eng->ctx, off, n, f32, b16);
        return;
    }
    const float *x = t->p.mem + off;
    if (f32 && f32 != x) memcpy(f32, x, n * sizeof *f32);
    if (b16) st_f32_to_bf16_n(x, b16, n);
}

uint64_t trainer_params_hash(struct trainer *t)
{
    /* the engine's copy is the host's whenever it is not newer: hash it there */
    if (t->eng && t->eng->params_hash) return t->eng->params_hash(t->eng->ctx);
    return weights_sum_hash(t->p.mem, t->p.n);
}
