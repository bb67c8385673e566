/*
 * AdamW as torch.optim.AdamW (defaults: amsgrad off, maximize off), gradient
 * clipping as torch.nn.utils.clip_grad_norm_ over all parameters, and the learning-
 * rate schedule. Element arithmetic is float32 like torch's; the bias corrections,
 * step size and the global norm are double (Python floats / a double accumulator).
 *
 * Order of one step (torch's): clip grads; p *= 1 - lr*wd; m = lerp(m, g, 1-b1);
 * v = b2 v + (1-b2) g^2; p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
 * adamw_step_norm is the same step with the global norm supplied by the caller (a
 * sharded model's norm spans ranks: tfm_tp_grad_sq).
 * Limits: one flat parameter group; plain loops (no threads), so bitwise
 * reproducible.
 */
#include "libra/adamw.h"

#include <math.h>
#include <stdlib.h>

#include "libra/log.h"

void adamw_init(struct adamw *o, const struct adamw_config *c, size_t n)
{
    o->c = *c;
    o->n = n;
    o->step = 0;
    o->m = xcalloc(2 * n + 1, sizeof(float)); /* + 1: a valid block when n == 0 */
    o->v = o->m + n;
}

void adamw_free(struct adamw *o)
{
    if (!o) return;
    free(o->m);
    o->m = o->v = NULL;
    o->n = 0;
}

float adamw_lr(const struct adamw_config *c, int64_t step)
{
    if (c->schedule != LR_COSINE) return c->lr;
    if (c->warmup_steps > 0 && step <= c->warmup_steps)
        return (float)((double)c->lr * (double)step / (double)c->warmup_steps);
    double span = (double)(c->total_steps - c->warmup_steps);
    double progress = span > 0 ? (double)(step - c->warmup_steps) / span : 1.0;
    progress = progress < 0 ? 0 : progress > 1 ? 1 : progress;
    double cosine = 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
    double ratio = c->min_lr_ratio + (1.0 - c->min_lr_ratio) * cosine;
    return (float)(c->lr * ratio);
}

/* The global L2 norm of grads (n), summed in double in index order. */
double adamw_grad_norm(const float *grads, size_t n)
{
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)grads[i] * grads[i];
    return sqrt(ss);
}

float adamw_clip_factor(const struct adamw_config *c, double norm)
{
    if (c->clip_norm <= 0) return 1.0f;
    double coef = (double)c->clip_norm / (norm + 1e-6);
    return coef < 1.0 ? (float)coef : 1.0f;
}

/* clip_grad_norm_ given the norm: scale by adamw_clip_factor. */
static void clip_grads(float *grads, size_t n, const struct adamw_config *c, double norm)
{
    float s = adamw_clip_factor(c, norm);
    if (s != 1.0f)
        for (size_t i = 0; i < n; i++) grads[i] *= s;
}

void adamw_scalars_of(const struct adamw_config *c, int64_t step, struct adamw_scalars *s)
{
    double lr = adamw_lr(c, step);
    double bc1 = 1.0 - pow(c->beta1, (double)step);
    double bc2 = 1.0 - pow(c->beta2, (double)step);
    s->decay = (float)(1.0 - lr * c->weight_decay);
    s->step_size = (float)(lr / bc1);
    s->bc2_sqrt = (float)sqrt(bc2);
    s->beta2 = c->beta2;
    s->w1 = 1.0f - c->beta1;
    s->w2 = 1.0f - c->beta2;
    s->eps = c->eps;
}

void adamw_update_elems(float *params, float *m, float *v, const float *grads, size_t n,
                        const struct adamw_scalars *s, float clip)
{
    for (size_t i = 0; i < n; i++) {
        float g = clip != 1.0f ? grads[i] * clip : grads[i];
        params[i] *= s->decay;
        m[i] += s->w1 * (g - m[i]);
        v[i] = v[i] * s->beta2 + s->w2 * g * g;
        float denom = sqrtf(v[i]) / s->bc2_sqrt + s->eps;
        params[i] -= s->step_size * m[i] / denom;
    }
}

/* The AdamW update of one step, on (already clipped) grads. */
static void update(struct adamw *o, float *params, const float *grads)
{
    struct adamw_scalars s;
    adamw_scalars_of(&o->c, ++o->step, &s);
    adamw_update_elems(params, o->m, o->v, grads, o->n, &s, 1.0f);
}

double adamw_step(struct adamw *o, float *params, float *grads)
{
    double norm = adamw_grad_norm(grads, o->n);
    clip_grads(grads, o->n, &o->c, norm);
    update(o, params, grads);
    return norm;
}

double adamw_step_norm(struct adamw *o, float *params, float *grads, double grad_norm)
{
    /* a NaN / inf norm passes through as in adamw_step (no clipping; the caller sees it) */
    if (grad_norm < 0)
        FATAL("adamw_step_norm: gradient norm %g is negative (pass sqrt of the global sum of "
              "squares)", grad_norm);
    clip_grads(grads, o->n, &o->c, grad_norm);
    update(o, params, grads);
    return grad_norm;
}
