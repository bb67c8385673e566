/*
 * The rotary table (rope.h): Hugging Face's inverse frequencies for the rope_scaling
 * types of config.json that libra supports, then cos / sin of every position.
 *
 * The formulas are those of transformers' ROPE_INIT_FUNCTIONS (modeling_rope_utils.py),
 * written again from their definitions; theta = rope_theta, D = head_dim, i < D/2:
 *
 *   default  w_i = 1 / theta^(2i/D)                                        a = 1
 *   linear   w_i = default w_i / factor                                    a = 1
 *   llama3   with L = original_max_position_embeddings, lambda_i = 2 pi / w_i (the
 *            wavelength), lambda_lo = L / low_freq_factor, lambda_hi = L / high_freq_factor:
 *              lambda_i < lambda_hi (high frequency):  w_i unchanged
 *              lambda_i > lambda_lo (low frequency):   w_i / factor
 *              otherwise, s = (L / lambda_i - low) / (high - low):
 *                                         (1 - s) w_i / factor + s w_i     a = 1
 *   yarn     with L = original_max_position_embeddings (0: max_position_embeddings, as
 *            HF when the key is absent), beta_fast / beta_slow (0: 32 / 1),
 *            d(r) = D ln(L / (2 pi r)) / (2 ln theta)  (the pair that turns r times over L),
 *            lo = max(floor(d(beta_fast)), 0), hi = min(ceil(d(beta_slow)), D - 1)
 *            (hi += 0.001 when lo == hi), ramp_i = clamp((i - lo) / (hi - lo), 0, 1),
 *            e_i = 1 - ramp_i:
 *              w_i = (1 / (factor p_i)) (1 - e_i) + (1 / p_i) e_i,  p_i = theta^(2i/D)
 *            a = attention_factor, or 0.1 ln(factor) + 1 when unset (1 for factor 1).
 *            The factor is rope_factor as given (HF's current rule; transformers
 *            4.50-4.5x briefly replaced it by max_position_embeddings / L when L was
 *            set, and before 4.50 ignored L and used max_position_embeddings).
 *   Table    angle p w_i; cos and sin both multiplied by a (HF: cos = emb.cos() * a).
 *
 * Float32, in HF's order: transformers computes w in float32 tensors with Python
 * doubles as scalars (cast to float32 by the kernels), so every step below is the
 * same float32 operation torch does: x / y where torch divides, (1 / x) * y where it
 * writes y / x with a tensor x (torch's __rtruediv__ is reciprocal() * y), the
 * correction range in double as Python does. Then the angle p * w_i is one float32
 * product, as HF's float32 matmul of inv_freq and positions. Two known differences:
 * powf may differ from torch's vectorised pow (SLEEF, 1 ulp) in the last bit of a few
 * theta^(2i/D) (seen once: theta 1e6, D 128, i 37, where powf is the correctly
 * rounded one), a 1e-7 relative change of that w_i; and cos / sin here are double
 * rounded to float, torch's float32 ones may differ by 1 ulp. tests/test_rope.c holds
 * the table against values torch computed this way (tests/golden/rope.txt).
 *
 * Limits: no dynamic, longrope or llama4 types, no partial_rotary_factor, no yarn
 * mscale / mscale_all_dim / truncate = false (a loader must refuse those).
 */
#include "rope.h"

#include <math.h>
#include <stdlib.h>

#include "libra/log.h"

static const double PI = 3.14159265358979323846; /* Python's math.pi */

/* theta^(2i/D) as torch: the exponent is float32 2i / D, the power float32. */
static float pos_freq(float theta, int i, int D)
{
    return powf(theta, (float)(2 * i) / (float)D);
}

static void scale_llama3(float *w, int half, const struct tfm_config *c)
{
    float factor = c->rope_factor, low = c->rope_low_freq_factor, high = c->rope_high_freq_factor;
    double L = (double)c->rope_original_max_pos;
    /* Python doubles, cast to float32 where they meet the tensors */
    float lambda_lo = (float)(L / (double)low), lambda_hi = (float)(L / (double)high);
    float two_pi = (float)(2.0 * PI), Lf = (float)L;
    float span = (float)((double)high - (double)low);
    for (int i = 0; i < half; i++) {
        float lambda = (1.0f / w[i]) * two_pi; /* 2 pi / w: reciprocal, then times */
        float v = lambda > lambda_lo ? w[i] / factor : w[i];
        if (!(lambda < lambda_hi) && !(lambda > lambda_lo)) {
            float s = ((1.0f / lambda) * Lf - low) / span; /* (L / lambda - low) / span */
            v = (1.0f - s) * v / factor + s * v;
        }
        w[i] = v;
    }
}

/* d(r): the pair index whose wavelength fits r turns into L positions (double). */
static double yarn_dim(double r, int D, double theta, double L)
{
    return ((double)D * log(L / (r * 2.0 * PI))) / (2.0 * log(theta));
}

static void yarn(float *w, int half, const struct tfm_config *c)
{
    int D = c->head_dim;
    double L = c->rope_original_max_pos > 0 ? c->rope_original_max_pos
                                            : c->max_position_embeddings;
    double beta_fast = c->rope_beta_fast > 0 ? c->rope_beta_fast : 32.0;
    double beta_slow = c->rope_beta_slow > 0 ? c->rope_beta_slow : 1.0;
    double lo = floor(yarn_dim(beta_fast, D, c->rope_theta, L));
    double hi = ceil(yarn_dim(beta_slow, D, c->rope_theta, L));
    if (lo < 0) lo = 0;
    if (hi > D - 1) hi = D - 1;
    if (lo == hi) hi += 0.001; /* HF: no division by zero */
    float lof = (float)lo, span = (float)(hi - lo), factor = c->rope_factor;
    for (int i = 0; i < half; i++) {
        float p = pos_freq(c->rope_theta, i, D);
        float extrap = 1.0f / p, interp = 1.0f / (factor * p);
        float ramp = ((float)i - lof) / span;
        ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
        float e = 1.0f - ramp;
        w[i] = interp * (1.0f - e) + extrap * e;
    }
}

float rope_inv_freq(float *inv_freq, const struct tfm_config *c)
{
    int D = c->head_dim, half = D / 2;
    if (c->rope_type == TFM_ROPE_YARN) {
        yarn(inv_freq, half, c);
        double f = c->rope_factor;
        double a = c->rope_attention_factor > 0 ? c->rope_attention_factor
                   : f <= 1.0                    ? 1.0
                                                 : 0.1 * log(f) + 1.0;
        return (float)a;
    }
    for (int i = 0; i < half; i++) inv_freq[i] = 1.0f / pos_freq(c->rope_theta, i, D);
    if (c->rope_type == TFM_ROPE_LINEAR)
        for (int i = 0; i < half; i++) inv_freq[i] /= c->rope_factor;
    else if (c->rope_type == TFM_ROPE_LLAMA3)
        scale_llama3(inv_freq, half, c);
    return 1.0f;
}

void rope_table(float *rope, int n_pos, const struct tfm_config *c)
{
    int D = c->head_dim, half = D / 2;
    float *w = xmalloc(sizeof(float) * (size_t)(half > 0 ? half : 1));
    float a = rope_inv_freq(w, c);
    for (int i = 0; i < half; i++) {
        for (int pos = 0; pos < n_pos; pos++) {
            float ang = (float)pos * w[i];
            rope[(size_t)pos * D + i] = (float)cos((double)ang) * a;
            rope[(size_t)pos * D + half + i] = (float)sin((double)ang) * a;
        }
    }
    free(w);
}

int rope_same(const struct tfm_config *a, const struct tfm_config *b)
{
    int same = a->head_dim == b->head_dim && a->rope_theta == b->rope_theta &&
               a->rope_type == b->rope_type && a->rope_factor == b->rope_factor &&
               a->rope_low_freq_factor == b->rope_low_freq_factor &&
               a->rope_high_freq_factor == b->rope_high_freq_factor &&
               a->rope_original_max_pos == b->rope_original_max_pos &&
               a->rope_beta_fast == b->rope_beta_fast && a->rope_beta_slow == b->rope_beta_slow &&
               a->rope_attention_factor == b->rope_attention_factor;
    /* yarn without original_max_position_embeddings reads max_position_embeddings */
    if (same && a->rope_type == TFM_ROPE_YARN && a->rope_original_max_pos <= 0)
        same = a->max_position_embeddings == b->max_position_embeddings;
    return same;
}
