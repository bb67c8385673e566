/*
 * GRPO (include/libra/grpo.h): group-normalised advantages with a running baseline
 * for singleton groups, and the decoupled-PPO objective turned into per-token
 * weights on the log-probs (w_t) and entropies (e_t) for tfm_backward.
 *
 * Fixes against the reference (trainer_envs.md §1, §8): the behaviour log-probs are
 * used (truncated importance weight w_is), KL is k3 to a frozen reference model (not
 * to the old policy), an entropy bonus exists, singleton groups get a baseline, and
 * normalisation is by the tokens of the whole batch (not per sequence).
 *
 * Clamps: both log-ratios (logp - logp_prox and logp_prox - logp_behav) are clamped
 * to [-20, 20] before exp, so no weight is ever inf; where the first clamp is active
 * the loss does not depend on logp (as torch.clamp), so that token's gradient is 0
 * and it counts as clipped. The k3 exponent ref - logp is clamped the same way.
 */
#include "libra/grpo.h"

#include <math.h>

#include "libra/log.h"

#define LOG_RATIO_MAX 20.0

static double clamp(double x, double lo, double hi) { return x < lo ? lo : x > hi ? hi : x; }

int grpo_advantages(const struct grpo_config *c, const double *rewards, int n,
                    struct grpo_baseline *bl, double *adv)
{
    if (n <= 0) return 0;
    if (n == 1) {
        /* The baseline is the average of EARLIER singleton rewards: A = r - b, then b
         * moves towards r. The first group has nothing to compare with: A = 0. */
        double r = rewards[0];
        if (!bl->set) {
            adv[0] = 0.0;
            bl->value = r;
            bl->set = 1;
        } else {
            adv[0] = r - bl->value;
            bl->value = c->baseline_decay * bl->value + (1.0 - c->baseline_decay) * r;
        }
        return 0;
    }
    double mean = 0;
    for (int i = 0; i < n; i++) mean += rewards[i];
    mean /= n;
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (rewards[i] - mean) * (rewards[i] - mean);
    double std = sqrt(ss / (n - 1));
    if (!(std > c->adv_eps)) { /* also catches a NaN reward */
        for (int i = 0; i < n; i++) adv[i] = 0.0;
        return 1;
    }
    for (int i = 0; i < n; i++) adv[i] = (rewards[i] - mean) / (std + c->adv_eps);
    return 0;
}

void grpo_token_weights(const struct grpo_config *c, int n, const float *logp,
                        const float *logp_prox, const float *logp_behav, const float *logp_ref,
                        const float *entropy, double advantage, const uint8_t *mask,
                        double norm_tokens, float *w, float *e, struct grpo_stats *st)
{
    double A = advantage, lo = 1.0 - c->clip_low, hi = 1.0 + c->clip_high;
    double kl_coef = logp_ref ? c->kl_coef : 0.0; /* kl itself is reported with a ref */
    double ent_coef = entropy ? c->entropy_coef : 0.0;
    for (int t = 0; t < n; t++) {
        w[t] = 0.0f;
        if (e) e[t] = 0.0f;
        if (!mask[t]) continue;
        if (!(norm_tokens > 0))
            FATAL("grpo_token_weights: norm_tokens = %g with a model-generated token in the "
                  "batch (pass the count of mask = 1 tokens over all replicas)", norm_tokens);

        double ratio_b = exp(clamp((double)logp_prox[t] - logp_behav[t], -LOG_RATIO_MAX,
                                   LOG_RATIO_MAX));
        double w_is = ratio_b > c->is_cap ? c->is_cap : ratio_b;
        double lr_raw = (double)logp[t] - logp_prox[t];
        double rho = exp(clamp(lr_raw, -LOG_RATIO_MAX, LOG_RATIO_MAX));
        double rho_c = clamp(rho, lo, hi);
        double unclipped = -A * rho, clipped = -A * rho_c;
        double pg = w_is * (unclipped >= clipped ? unclipped : clipped);
        /* The gradient flows where the unclipped branch is the max (A > 0: rho <= hi;
         * A < 0: rho >= lo) and the log-ratio clamp is not active. */
        int on = (A > 0 ? rho <= hi : rho >= lo) && fabs(lr_raw) <= LOG_RATIO_MAX;
        double dpg = on ? -A * w_is * rho : 0.0;

        double kl = 0, dkl = 0;
        if (logp_ref) {
            double d = clamp((double)logp_ref[t] - logp[t], -LOG_RATIO_MAX, LOG_RATIO_MAX);
            kl = exp(d) - d - 1.0;
            dkl = 1.0 - exp(d);
        }
        double H = entropy ? entropy[t] : 0.0;

        w[t] = (float)(-(dpg + kl_coef * dkl) / norm_tokens);
        if (e) e[t] = (float)(ent_coef / norm_tokens);

        st->loss += (pg + kl_coef * kl - ent_coef * H) / norm_tokens;
        st->pg_loss += pg / norm_tokens;
        st->kl += kl;
        st->entropy += H;
        st->clipped += A != 0.0 && !on;
        st->is_truncated += ratio_b > c->is_cap;
        st->ratio_behav += ratio_b;
        st->tokens += 1.0;
    }
}
