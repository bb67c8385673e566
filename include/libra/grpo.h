/*
 * GRPO on token sequences (DESIGN §7): group-normalised advantages and the
 * per-token decoupled-PPO objective, expressed as per-token weights on log-probs so
 * the model's backward (tfm_backward: J = -sum w_t logp_t - sum e_t H_t) does the rest.
 *
 * Advantages (one group of n rewards):
 *   n >= 2: A_i = (r_i - mean) / (std + eps), std the unbiased (n - 1) standard
 *           deviation; a group whose std <= eps is zero-variance: every A_i = 0 and
 *           it is counted (it contributes nothing).
 *   n == 1: A = r - b with b a running baseline (exponential moving average of the
 *           singleton rewards seen before, decay baseline_decay); the first singleton
 *           group has A = 0 and sets b = r. Never the raw reward (reference §8.8).
 *
 * Per token t with loss mask m_t = 1 (a model-generated token), given the current
 * log-prob logp, the proximal log-prob logp_prox (the training weights before this
 * update), the behaviour log-prob logp_behav (what rollout sampled with) and the
 * trajectory's advantage A:
 *   w_is = min(exp(logp_prox - logp_behav), is_cap)      truncated behaviour weight
 *   rho  = exp(logp - logp_prox)                          (log-ratio clamped to +-20)
 *   pg_t = w_is * max(-A rho, -A clip(rho, 1 - clip_low, 1 + clip_high))
 *   kl_t = exp(ref - logp) - (ref - logp) - 1             k3 to a frozen reference
 *   L    = sum_t m_t (pg_t + kl_coef kl_t - entropy_coef H_t) / norm_tokens
 * with norm_tokens the model-generated tokens of the WHOLE batch (all replicas):
 * token-level normalisation. The gradient of pg_t w.r.t. logp is -A w_is rho where
 * the unclipped branch is the max (A > 0: rho <= 1 + clip_high; A < 0:
 * rho >= 1 - clip_low) and |logp - logp_prox| <= 20, else 0 (a token whose
 * gradient is removed counts as clipped when A != 0); of kl_t it is
 * 1 - exp(ref - logp). ref - logp, and logp_prox - logp_behav in w_is, are clamped
 * to +-20 as well.
 * Hence the weights: w_t = -m_t (dpg_t + kl_coef dkl_t) / norm_tokens and
 * e_t = m_t entropy_coef / norm_tokens.
 */
#ifndef LIBRA_GRPO_H
#define LIBRA_GRPO_H

#include <stdint.h>

struct grpo_config {
    double clip_low, clip_high; /* PPO clip range: [1 - clip_low, 1 + clip_high] */
    double is_cap;              /* truncation of the behaviour importance weight */
    double kl_coef;             /* 0 = no reference model */
    double entropy_coef;        /* 0 = no entropy bonus */
    double adv_eps;             /* std floor of the advantage normalisation */
    double baseline_decay;      /* running baseline of singleton groups */
};

struct grpo_baseline {
    double value;
    int set; /* 0 until the first singleton group */
};

/* Writes the n advantages; returns 1 if the group is zero-variance (n >= 2 and
 * std <= adv_eps), else 0. Updates bl for singleton groups. */
int grpo_advantages(const struct grpo_config *c, const double *rewards, int n,
                    struct grpo_baseline *bl, double *adv);

/* Sums over tokens (reduce across replicas by adding; divide by the counts). */
struct grpo_stats {
    double loss;         /* sum m_t (pg + kl_coef kl - entropy_coef H) / norm_tokens */
    double pg_loss;      /* sum m_t pg_t / norm_tokens */
    double kl;           /* sum m_t kl_t (0 without a reference; reported for any kl_coef) */
    double entropy;      /* sum m_t H_t (0 if no entropies were given) */
    double clipped;      /* tokens whose gradient the clip removed */
    double is_truncated; /* tokens whose w_is was cut to is_cap (ratio > is_cap) */
    double ratio_behav;  /* sum m_t exp(logp_prox - logp_behav) (untruncated) */
    double tokens;       /* sum m_t */
};

/* Per-token weights for one sequence of n tokens. logp_ref and entropy may be NULL
 * (then kl / entropy terms are off for this call). Writes w (n) and, if e != NULL,
 * e (n); tokens with mask 0 get 0. Stats are ADDED into st. */
void grpo_token_weights(const struct grpo_config *c, int n, const float *logp,
                        const float *logp_prox, const float *logp_behav, const float *logp_ref,
                        const float *entropy, double advantage, const uint8_t *mask,
                        double norm_tokens, float *w, float *e, struct grpo_stats *st);

#endif
