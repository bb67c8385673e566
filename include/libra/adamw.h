/*
 * AdamW with bias correction (decoupled weight decay, as torch.optim.AdamW), global
 * gradient-norm clipping and a learning-rate schedule (constant, or linear warm-up
 * then cosine decay to min_lr_ratio * lr). Moments live in one allocation (m then v).
 * Weight decay applies to every parameter, as torch.optim.AdamW over model.parameters().
 */
#ifndef LIBRA_ADAMW_H
#define LIBRA_ADAMW_H

#include <stddef.h>
#include <stdint.h>

enum lr_schedule { LR_CONSTANT = 0, LR_COSINE = 1 };

struct adamw_config {
    float lr, beta1, beta2, eps, weight_decay;
    float clip_norm;        /* <= 0: no clipping */
    int schedule;           /* enum lr_schedule */
    int64_t warmup_steps, total_steps;
    float min_lr_ratio;
};

struct adamw {
    struct adamw_config c;
    float *m, *v; /* (n) each, carved from one allocation */
    size_t n;
    int64_t step; /* steps taken */
};

void adamw_init(struct adamw *o, const struct adamw_config *c, size_t n);
void adamw_free(struct adamw *o);
/* Learning rate of step (1-based). */
float adamw_lr(const struct adamw_config *c, int64_t step);
/* The L2 norm of grads (n floats), summed in double in order (what adamw_step clips
 * by). */
double adamw_grad_norm(const float *grads, size_t n);
/* The factor a gradient of global norm `norm` is scaled by before the update:
 * min(1, clip_norm / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_ (1 when
 * clip_norm <= 0; a NaN norm gives 1). */
float adamw_clip_factor(const struct adamw_config *c, double norm);
/* One step on params given grads (both n floats); grads are clipped in place.
 * Returns the global gradient norm before clipping. */
double adamw_step(struct adamw *o, float *params, float *grads);
/* adamw_step with the global gradient norm given (sharded models: the norm over every
 * rank's gradients, e.g. sqrt(tfm_tp_grad_sq)): grads (n) are clipped in place by
 * min(1, clip_norm / (grad_norm + 1e-6)) as adamw_step clips, then the same update.
 * Returns grad_norm. */
double adamw_step_norm(struct adamw *o, float *params, float *grads, double grad_norm);

/* The scalars every element's update of step `step` (1-based) uses, so that another
 * implementation (the CUDA kernel) performs the very same arithmetic:
 *   p *= decay;  m += w1 (g - m);  v = v beta2 + w2 g g;
 *   p -= step_size m / (sqrt(v) / bc2_sqrt + eps)                                    */
struct adamw_scalars {
    float decay, step_size, bc2_sqrt, beta2, w1, w2, eps;
};
void adamw_scalars_of(const struct adamw_config *c, int64_t step, struct adamw_scalars *s);
/* That update on n elements: params, m, v (n) updated in place from grads (n), each
 * gradient first multiplied by clip unless clip is 1 (as adamw_step's clipping does). */
void adamw_update_elems(float *params, float *m, float *v, const float *grads, size_t n,
                        const struct adamw_scalars *s, float clip);

#endif
