/*
 * One training replica's share of a GRPO step on the CPU engine: for each sequence
 * a no-grad forward gives the proximal log-probs (and entropies), grpo_token_weights
 * turns them into per-token weights, and tfm_backward accumulates the gradient. The
 * replica's gradient (and stats) are then summed across replicas by the caller (MPI)
 * and every replica applies the same AdamW step, so parameters stay identical.
 *
 * Sequences are packed into forward/backward batches of at most max_tokens tokens.
 * With kl_coef > 0 the trainer keeps a frozen copy of the initial parameters (the
 * reference model) and scores every sequence under it too.
 */
#ifndef LIBRA_TRAINER_H
#define LIBRA_TRAINER_H

#include <stdint.h>

#include "libra/adamw.h"
#include "libra/grpo.h"
#include "libra/tfm.h"
#include "libra/tfm_tp.h"

/* One trajectory of a share: its whole token sequence with loss mask and behaviour
 * log-probs (logp_behav[t] = log-prob of ids[t] at sampling time where mask[t] = 1).
 * Position t > 0 is predicted from ids[0..t-1]; mask[0] is ignored (nothing predicts
 * the first token). logp_behav may be NULL only if no mask[t] = 1 for t > 0. */
struct train_seq {
    int n;
    const int32_t *ids;
    const uint8_t *mask;
    const float *logp_behav;
    double advantage;
};

/* Where a trainer's forward and backward run when not on this rank's CPU (the GPU's
 * training path, src/device/gpu/). The host parameters t->p are the truth after every
 * step unless the engine keeps its steps' weights (read_params: then they are current
 * after trainer_fetch_params); the engine's gradients land in t->g, which the caller
 * reduces over the replicas. The optimizer step runs on the engine when it has one (step: the engine
 * then keeps the AdamW moments, and t->opt's are current only after
 * trainer_fetch_moments), else on the host, which hands the engine the new parameters
 * (set_params). The reference model (kl_coef > 0) is scored on the CPU. */
struct train_engine {
    void *ctx;
    /* logprob (T) and entropy (T) of batch b under the current parameters */
    void (*forward)(void *ctx, const struct tfm_batch *b, float *logprob, float *entropy);
    /* the gradient: begin zeroes it, backward adds batch b's, end writes it to g (host) */
    void (*grads_begin)(void *ctx);
    void (*backward)(void *ctx, const struct tfm_batch *b);
    void (*grads_end)(void *ctx, float *g);
    /* the host parameters p changed (an optimizer step, restored weights) */
    void (*set_params)(void *ctx, const float *p);
    /* Optional (NULL: the host steps). One AdamW update with the host's figures: g
     * (host) the reduced gradient, or NULL for the engine's own gradient block, clip
     * its factor (adamw_clip_factor of the global norm), s the step's scalars; the
     * engine updates its weights and moments and writes the new weights to p (host). */
    void (*step)(void *ctx, const float *g, float clip, const struct adamw_scalars *s,
                 float *p);
    /* With step: the engine's AdamW moments to (get) or from (set) the host's m, v. */
    void (*get_moments)(void *ctx, float *m, float *v);
    void (*set_moments)(void *ctx, const float *m, const float *v);
    /* Optional, with step: the sum of squares of the engine's gradient block (the same
     * bits on every call). An engine with it keeps a TP-1 trainer's gradient at home
     * (trainer_grads does not call grads_end): see trainer_host_grads. */
    double (*grad_sq)(void *ctx);
    /* Optional, with step and grad_sq: a TP > 1 shard's gradient stays at home too.
     * tp_reduce does tfm_tp_reduce_grads' work on the engine's block (collective over
     * the shard's group); grad_sq_at is the sum of squares of the block's elements
     * [off[i], off[i] + len[i]), i < n (the primary slices: tfm_tp_grad_sq's terms). */
    void (*tp_reduce)(void *ctx);
    double (*grad_sq_at)(void *ctx, const size_t *off, const size_t *len, int n);
    /* Optional, with step: the engine keeps the weights its steps make (step is given
     * p = NULL, and the trainer's p is stale until trainer_fetch_params): read_params
     * copies elements [off, off + n) of them to the host, float32 into f32 and rounded
     * to bf16 (st_f32_to_bf16) into b16, each unless NULL; params_hash is their
     * weights_sum_hash (include/libra/hash.h). */
    void (*read_params)(void *ctx, size_t off, size_t n, float *f32, uint16_t *b16);
    uint64_t (*params_hash)(void *ctx);
};

struct trainer {
    const struct train_engine *eng; /* NULL: tfm_forward / tfm_backward on this CPU */
    const struct tfm_tp *tp;    /* tensor parallel: this rank's shard of a TP group (NULL: the
                                   whole model here); mc is then the shard's tp->local */
    struct tfm_config mc;
    struct tfm_params p, g;     /* parameters and gradient (same layout) */
    struct tfm_params ref;      /* frozen reference (kl_coef > 0), else unallocated */
    int have_ref;
    struct adamw opt;
    struct grpo_config gc;
    struct tfm_state *st;
    int max_tokens;
    /* Scoring temperature: log-probs are of softmax(logits / temperature). trainer_init
     * sets 1; a caller whose rollouts sample at T != 1 sets it to T so that logp_prox
     * and the behaviour log-probs (sampler.h: at T) describe the same distribution. */
    float temperature;
    /* scratch of one packed batch, allocated once by trainer_init (cap = max_tokens) */
    int32_t *tok, *tgt;                   /* (cap) inputs ids[0..n-2], targets ids[1..n-1] */
    float *w, *e, *lp, *lp_ref, *ent;     /* (cap) per target token */
    int *seq_len;                         /* (cap) tokens of each packed sequence */
    size_t cap;
    double fwd_s, bwd_s;  /* wall seconds of the last trainer_grads' forwards (scoring,
                             reference, token weights) and backwards */
    int grads_on_engine;  /* the gradient is the engine's block; g is stale until
                             trainer_host_grads */
    int params_on_engine; /* the engine's weights are newer than p (its last step's):
                             p is stale until trainer_fetch_params */
};

/* Takes ownership of p (the parameters) and of opt if opt_loaded (a resumed
 * optimizer state), else initialises AdamW from oc. */
void trainer_init(struct trainer *t, const struct tfm_config *mc, struct tfm_params *p,
                  const struct adamw_config *oc, struct adamw *opt_loaded, int opt_is_loaded,
                  const struct grpo_config *gc, int max_tokens);
void trainer_free(struct trainer *t);
/* Zeroes t->g, then accumulates this replica's gradient of the GRPO loss over its
 * sequences (norm_tokens = model-generated tokens of the whole batch). Stats added
 * into st. Sequences longer than max_tokens are a FATAL error (the config check
 * keeps rollout.max_tokens <= the trainer's max_tokens). On an engine with grad_sq
 * (TP 1) the gradient stays on the engine (t->grads_on_engine): the caller may sum it
 * over the replicas there and step it there, or ask for it with trainer_host_grads. */
void trainer_grads(struct trainer *t, const struct train_seq *seqs, int n_seq,
                   double norm_tokens, struct grpo_stats *st);
/* t->g.mem, holding the gradient (copied from the engine if it was there; the host's
 * copy is the gradient from then on, until the next trainer_grads). */
float *trainer_host_grads(struct trainer *t);
/* Applies AdamW with the (already reduced) gradient in t->g; returns the grad norm. A
 * step whose gradient norm is not finite is not applied (parameters, moments and the
 * step count stay as they were); neither is one with skip set (the caller found the
 * loss not finite). *applied says which. Collective over a TP group. */
double trainer_apply_guarded(struct trainer *t, int skip, int *applied);
/* trainer_apply_guarded(t, 0, &ignored). */
double trainer_apply(struct trainer *t);
/* The name of the first tensor (Hugging Face order; this rank's shard) whose gradient
 * holds a NaN or an infinity, in name (n bytes): 1, or 0 if every gradient is finite. */
int trainer_nonfinite_grad(struct trainer *t, char *name, size_t n);
/* Runs the forwards and backwards on eng from now on (a TP shard's engine takes the
 * shard's batch as tfm_backward would, entropy weights included); it is given the
 * current parameters. */
void trainer_set_engine(struct trainer *t, const struct train_engine *eng);
/* The caller changed t->p and t->opt (restored weights, a join's state): the engine, if
 * any, is given both. */
void trainer_params_changed(struct trainer *t);
/* The caller changed t->p only (a weight sync swapped in): the engine, if any, is given
 * the weights and keeps its moments (which may be newer than t->opt's). */
void trainer_weights_changed(struct trainer *t);
/* t->opt.m and t->opt.v become the current moments (an engine that steps holds them;
 * call before reading them: a checkpoint, a join's snapshot). */
void trainer_fetch_moments(struct trainer *t);
/* t->p becomes the current weights (an engine with read_params keeps its steps'; call
 * before reading p). */
void trainer_fetch_params(struct trainer *t);
/* Elements [off, off + n) of the current weights, wherever they are, to the host:
 * float32 into f32 and rounded to bf16 (st_f32_to_bf16) into b16, each unless NULL --
 * a weight sync's sender reads its slices so, without bringing the whole model home. */
void trainer_read_params(struct trainer *t, size_t off, size_t n, float *f32, uint16_t *b16);
/* weights_sum_hash (include/libra/hash.h) of the current weights, computed on the
 * engine when it offers params_hash (its copy is never older than p), else here. */
uint64_t trainer_params_hash(struct trainer *t);
/* A trainer of this rank's shard of a TP group (p: tp->local's layout, taken over like
 * trainer_init's). trainer_grads and trainer_apply are then collective over the group
 * (every rank passes the same sequences); the gradient norm is the whole model's. */
void trainer_init_tp(struct trainer *t, const struct tfm_tp *tp, struct tfm_params *p,
                     const struct adamw_config *oc, struct adamw *opt_loaded, int opt_is_loaded,
                     const struct grpo_config *gc, int max_tokens);

#endif
