/*
 * The training path on a GPU: a training replica's model (TP 1) with float32 master
 * weights, their bf16 working copy for the matrix products, a float32 gradient block
 * and the AdamW moments, all in tfm_params' layout (include/libra/tfm.h,
 * tfm_layout_of) on the GPU; the forward of a packed batch keeping every layer's
 * internals, and the backward of the training path's objective
 *     J = - sum_t w_t logprob_t
 * (include/libra/tfm.h, tfm_backward) chained from the CUDA module's kernels.
 *
 * Precision (mixed, as is usual for bf16 training): matrix products take bf16
 * operands (weights from the working copy; activations and output gradients rounded
 * where they enter) and accumulate in float32; norms, rotary, attention, SwiGLU,
 * log-softmax and every gradient accumulate in float32; the update is the CPU's AdamW
 * arithmetic (adamw_scalars_of) on the float32 masters, after which the working copy
 * is refreshed. docs/cuda.md gives the measured distance to the CPU's gradients.
 *
 * Tensor parallelism (gpu_trainer_create_tp): a TP-t replica's rank holds its shard
 * (include/libra/tfm_tp.h) and computes tfm_forward_tp / tfm_backward_tp's results
 * with 2 L + 1 all-reduces of (T, C) floats in the forward, 2 L + 1 more in the
 * backward, and per logit chunk a max and a sum all-reduce of a few values a row
 * (struct gpu_comm). Every rank of the group makes the same calls with the same batch
 * (global token ids) and gets the same log-probs and J.
 *
 * Activations: every layer's internals are kept from the forward for the backward
 * when they fit in the GPU's free memory; when they do not, each layer keeps only its
 * input and the backward runs the layer's forward again first (recomputation: one
 * more forward per step, about a third more arithmetic, for 1 / L of the activation
 * memory and one layer's internals). LIBRA_GPU_RECOMPUTE=1 or 0 in the environment
 * forces either.
 *
 * The entropy term (tfm_batch.entropy_weights, train.entropy_coef): its gradient is
 * formed in the head's logit chunks on the GPU (entropy_bwd, or vocab_entropy_bwd from
 * the group's statistics under TP); J counts - sum e_t H_t.
 * Errors: a failed CUDA call ends the job (FATAL naming the call).
 */
#ifndef LIBRA_GPU_TRAIN_H
#define LIBRA_GPU_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "libra/adamw.h"
#include "libra/cuda_api.h"
#include "libra/gpu_comm.h"
#include "libra/tfm.h"
#include "libra/trainer.h"

struct gpu_trainer;

/* The model c with parameters p on the current GPU, for batches of at most max_tokens
 * tokens (sequences of at most max_tokens each), AdamW with ac. NULL + message if it
 * does not fit in the GPU's free memory. */
struct gpu_trainer *gpu_trainer_create(const struct cuda_api *api, const struct tfm_config *c,
                                       const struct tfm_params *p, int max_tokens,
                                       const struct adamw_config *ac, char *err, size_t errlen);
/* gpu_trainer_create for rank tp->rank of a TP-t replica: c is ignored (tp->local is
 * the shard's config), p holds the shard's weights (tfm_tp_shard), comm the group
 * (size t, rank tp->rank; may be NULL at t == 1; it must outlive the trainer). tp NULL:
 * gpu_trainer_create. The gradients it leaves are tfm_backward_tp's: the q/k norms'
 * and replicated kv heads' are partial sums until tfm_tp_reduce_grads (on the host) or
 * gpu_trainer_tp_reduce (on the GPU; with replicated kv heads once the kv group is set:
 * gpu_trainer_set_kv_comm); gpu_trainer_step refuses t > 1 (the host trainer steps a
 * TP replica). */
struct gpu_trainer *gpu_trainer_create_tp(const struct cuda_api *api, const struct tfm_tp *tp,
                                          struct gpu_comm *comm, const struct tfm_config *c,
                                          const struct tfm_params *p, int max_tokens,
                                          const struct adamw_config *ac, char *err,
                                          size_t errlen);
void gpu_trainer_free(struct gpu_trainer *t);
/* Whether t recomputes each layer's internals in the backward (see above). */
int gpu_trainer_recomputes(const struct gpu_trainer *t);
/* Attention on the tensor cores (flash_fwd / flash_bwd: bf16 probabilities) when on and
 * the head dimension allows (cuda_flash_supports), else the float32 kernels; on by
 * default. Returns the previous setting. */
int gpu_trainer_set_flash(struct gpu_trainer *t, int on);
/* logprob (T, host) of each target under the current weights (0 where target < 0) and,
 * if entropy != NULL, the entropy (T) of each token's distribution; returns
 * sum_t w_t logprob_t (tfm_forward's contract without logits). */
double gpu_trainer_forward(struct gpu_trainer *t, const struct tfm_batch *b, float *logprob,
                           float *entropy);
/* Adds the gradients of J for batch b into the gradient block; returns J. */
double gpu_trainer_backward(struct gpu_trainer *t, const struct tfm_batch *b);
void gpu_trainer_zero_grad(struct gpu_trainer *t);
/* The gradient block into g (host, tfm_params_alloc of the same config). */
void gpu_trainer_grads(struct gpu_trainer *t, struct tfm_params *g);
/* One AdamW step on the master weights: clip by the global gradient norm (computed on
 * the GPU, in double), update, refresh the bf16 copy. Returns the norm before clipping. */
double gpu_trainer_step(struct gpu_trainer *t);
/* One AdamW update from the host's figures (any TP degree: the host trainer reduced
 * the shard's gradient and took the group's norm): g (host) becomes the gradient
 * block unless NULL (the block as it is), clip its factor, s the step's scalars
 * (adamw_scalars_of); the new master weights are copied to p (host) unless p is NULL.
 * The moments stay on the GPU. */
void gpu_trainer_apply(struct gpu_trainer *t, const float *g, float clip,
                       const struct adamw_scalars *s, float *p);
/* The gradient block's sum of squares (double; the same bits every call). */
double gpu_trainer_grad_sq(struct gpu_trainer *t);
/* The kv group of a shard whose kv heads are replicated (K < t: the t/K ranks holding
 * the same kv head, tfm_tp's kv_comm; it must outlive the trainer), so that
 * gpu_trainer_tp_reduce sums their gradients on the GPU; NULL: on the host. Set it
 * before gpu_trainer_engine. */
void gpu_trainer_set_kv_comm(struct gpu_trainer *t, struct gpu_comm *kv);
/* A TP > 1 shard's gradient reduced as tfm_tp_reduce_grads does, in place on the GPU:
 * the q/k norms' partial sums over the group, and with replicated kv heads the span
 * wk | bk | wv | bv over the kv group (collective over both; it refuses replicated kv
 * heads without a kv group). */
void gpu_trainer_tp_reduce(struct gpu_trainer *t);
/* The sum of squares of the gradient's elements [off[i], off[i] + len[i]), i < n. */
double gpu_trainer_grad_sq_at(struct gpu_trainer *t, const size_t *off, const size_t *len, int n);
/* The gradient block becomes its sum over c's ranks (the training replicas: every
 * rank of c calls it; c's contract gives every rank the same bits). */
void gpu_trainer_allreduce_grads(struct gpu_trainer *t, struct gpu_comm *c);
/* The AdamW moments to (host) m and v, or from them. */
void gpu_trainer_moments(struct gpu_trainer *t, float *m, float *v);
void gpu_trainer_set_moments(struct gpu_trainer *t, const float *m, const float *v);
/* New master weights from the host p (the bf16 copy refreshed). */
void gpu_trainer_set_params(struct gpu_trainer *t, const float *p);
/* The trainer as a train_engine (include/libra/trainer.h): a CPU trainer then runs its
 * forwards, backwards and AdamW updates here (gpu_trainer_apply; the engine holds the
 * moments, and the gradient until it is asked for -- at TP > 1 too, the group's
 * reduction and norm on the GPU, unless the shard's kv heads are replicated, whose
 * gradients the host sums -- and the weights its steps make: read_params and
 * params_hash serve them where they are). To step on the host instead, clear the engine's step,
 * get_moments, set_moments and grad_sq; to reduce a TP shard's gradient on the host,
 * clear tp_reduce and grad_sq_at. */
struct train_engine gpu_trainer_engine(struct gpu_trainer *t);
/* The master weights into p (host). */
void gpu_trainer_params(struct gpu_trainer *t, struct tfm_params *p);
/* Elements [off, off + n) of the master weights to the host: float32 into f32 and their
 * bf16 copy (st_f32_to_bf16's rounding, bit for bit) into b16, each unless NULL. */
void gpu_trainer_read(struct gpu_trainer *t, size_t off, size_t n, float *f32, uint16_t *b16);
/* The device bf16 copy of the weights (the layout's n values), which every optimizer
 * step refreshes on the module's stream: a weight sync sends from it. */
const uint16_t *gpu_trainer_weights16(const struct gpu_trainer *t);
/* Work issued on the module's side stream, up to its last mark, reads that copy (a
 * weight sync's sends, while the next step's forward and backward run): the trainer
 * waits for it before it writes the copy again (the step's update, set_params) or
 * frees it. */
void gpu_trainer_lend_weights16(struct gpu_trainer *t);
/* weights_sum_hash (include/libra/hash.h) of the master weights, computed on the GPU. */
uint64_t gpu_trainer_hash(struct gpu_trainer *t);
/* Bytes of GPU memory held. */
size_t gpu_trainer_bytes(const struct gpu_trainer *t);

#endif
