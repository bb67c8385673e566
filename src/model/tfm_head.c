/*
 * The output head of the training path, forward and backward: final norm, logits of
 * the rows asked for, logit_chunk rows at a time (never T x V), log-probs, entropies
 * and their gradients. Single-rank (tp NULL, or t == 1: cpu/ops.c's log-softmax,
 * today's arithmetic bit for bit) or vocabulary-parallel (tp_ops.c): each rank forms
 * the (n, Vl) logits of its vocabulary rows and the rows' softmax statistics are
 * all-reduced once per chunk (one f32 max, one f64 sum); the backward all-reduces
 * the chunk's (n, C) input gradient, partial over the vocabulary, before the final
 * norm's backward. Glossary as in include/libra/tfm.h.
 *
 * Tied embeddings need no special case: g->lm_head == g->embed, so the output head's
 * and the embedding's gradients land in the same rows (in TP, the same Vl rows).
 */
#include <math.h>
#include <string.h>

#include "libra/cpu_ops.h"
#include "tfm_state.h"
#include "tp_ops.h"

static void zero(float *x, size_t n) { memset(x, 0, n * sizeof(float)); }

double tfm_head_forward(const struct tfm_tp *tp, const struct tfm_config *c,
                        const struct tfm_params *p, struct tfm_state *s,
                        const struct tfm_batch *b, int T, float *logprob, float *entropy,
                        float *logits)
{
    int C = c->hidden_size, V = c->vocab_size; /* TP: V is this rank's Vl */
    rmsnorm_forward(s->hf, s->x, p->ln_f, T, C, c->rms_norm_eps);

    /* rows whose logits are needed: all of them for entropies or logits, else the
     * scored ones */
    int all = entropy != NULL || logits != NULL, n_rows = 0;
    for (int t = 0; t < T; t++)
        if (all || b->targets[t] >= 0) s->rows[n_rows++] = t;
    if (logprob) memset(logprob, 0, (size_t)T * sizeof(float));

    double total = 0;
    for (int r0 = 0; r0 < n_rows; r0 += s->logit_chunk) {
        int n = n_rows - r0 < s->logit_chunk ? n_rows - r0 : s->logit_chunk;
        const int *rows = s->rows + r0;
        tfm_gather_chunk(s, b, rows, n);
        linear_forward(s->logits, s->hc, p->lm_head, NULL, n, C, V);
        if (tp_parallel(tp)) {
            tp_logsoftmax_forward(tp, s->lp_c, s->tp_mx, s->tp_lsum, entropy ? s->tp_ent : NULL,
                                  s->tp_red, s->logits, s->tgt_c, n, b->temperature);
            if (entropy)
                for (int i = 0; i < n; i++) s->dlp_c[i] = (float)s->tp_ent[i];
        } else {
            logsoftmax_forward(s->lp_c, entropy ? s->dlp_c : NULL, s->logits, s->tgt_c, n, V,
                               b->temperature);
        }
        for (int i = 0; i < n; i++) {
            int t = rows[i];
            total += (double)tfm_token_weight(b, t) * s->lp_c[i];
            if (logprob) logprob[t] = s->lp_c[i];
            if (entropy) entropy[t] = s->dlp_c[i];
            if (logits)
                memcpy(logits + (size_t)t * V, s->logits + (size_t)i * V,
                       (size_t)V * sizeof(float));
        }
    }
    return total;
}

/* Entropy weight of token t: entropy_weights[t] where targets[t] >= 0, else 0. */
static float entropy_weight(const struct tfm_batch *b, int t)
{
    return b->entropy_weights && b->targets[t] >= 0 ? b->entropy_weights[t] : 0.0f;
}

/* dJ/dlogits of a chunk (n rows, dlogits zeroed by the caller; s->dlp_c holds
 * -w_t): log-prob and entropy terms, whose J terms are added to *J one by one (the
 * single-rank order of the sum). */
static void chunk_dlogits(const struct tfm_tp *tp, int V, struct tfm_state *s,
                          const struct tfm_batch *b, const int *rows, int n, double *J)
{
    if (!tp_parallel(tp)) {
        logsoftmax_forward(s->lp_c, NULL, s->logits, s->tgt_c, n, V, b->temperature);
        for (int i = 0; i < n; i++) *J += (double)s->dlp_c[i] * s->lp_c[i];
        logsoftmax_backward(s->dlogits, s->dlp_c, s->logits, s->tgt_c, n, V, b->temperature);
        for (int i = 0; i < n; i++) {
            float e = entropy_weight(b, rows[i]);
            double H;
            if (e == 0.0f) continue;
            entropy_backward(s->dlogits + (size_t)i * V, &H, &e, s->logits + (size_t)i * V, 1, V,
                             b->temperature);
            *J -= e * H;
        }
        return;
    }
    /* vocabulary-parallel: the rows' statistics once per chunk (with entropies when
     * any row of the chunk carries an entropy weight: the same on every rank) */
    int any_e = 0;
    for (int i = 0; i < n; i++) any_e |= entropy_weight(b, rows[i]) != 0.0f;
    tp_logsoftmax_forward(tp, s->lp_c, s->tp_mx, s->tp_lsum, any_e ? s->tp_ent : NULL,
                          s->tp_red, s->logits, s->tgt_c, n, b->temperature);
    for (int i = 0; i < n; i++) *J += (double)s->dlp_c[i] * s->lp_c[i];
    tp_logsoftmax_backward(tp, s->dlogits, s->dlp_c, s->logits, s->tgt_c, s->tp_mx, s->tp_lsum,
                           n, b->temperature);
    for (int i = 0; i < n; i++) {
        float e = entropy_weight(b, rows[i]);
        if (e == 0.0f) continue;
        *J -= e * s->tp_ent[i];
        vocab_entropy_backward(s->dlogits + (size_t)i * V, &e, s->logits + (size_t)i * V,
                               &s->tp_mx[i], &s->tp_lsum[i], &s->tp_ent[i], 1, V,
                               b->temperature);
    }
}

double tfm_head_backward(const struct tfm_tp *tp, const struct tfm_config *c,
                         const struct tfm_params *p, struct tfm_state *s,
                         const struct tfm_batch *b, int T, struct tfm_params *g)
{
    int C = c->hidden_size, V = c->vocab_size; /* TP: V is this rank's Vl */
    rmsnorm_forward(s->hf, s->x, p->ln_f, T, C, c->rms_norm_eps);
    zero(s->dh, (size_t)T * C);
    int n_rows = 0;
    for (int t = 0; t < T; t++)
        if (tfm_token_weight(b, t) != 0.0f || entropy_weight(b, t) != 0.0f)
            s->rows[n_rows++] = t;

    double J = 0;
    for (int r0 = 0; r0 < n_rows; r0 += s->logit_chunk) {
        int n = n_rows - r0 < s->logit_chunk ? n_rows - r0 : s->logit_chunk;
        const int *rows = s->rows + r0;
        tfm_gather_chunk(s, b, rows, n);
        for (int i = 0; i < n; i++) s->dlp_c[i] = -tfm_token_weight(b, rows[i]);
        linear_forward(s->logits, s->hc, p->lm_head, NULL, n, C, V);
        zero(s->dlogits, (size_t)n * V);
        chunk_dlogits(tp, V, s, b, rows, n, &J);
        zero(s->dhc, (size_t)n * C);
        linear_backward(s->dhc, g->lm_head, NULL, s->dlogits, s->hc, p->lm_head, n, C, V);
        /* vocabulary-parallel: each rank's rows of lm_head give a share of dh */
        tp_allreduce_sum(tp, s->dhc, (size_t)n * C);
        for (int i = 0; i < n; i++)
            memcpy(s->dh + (size_t)rows[i] * C, s->dhc + (size_t)i * C, (size_t)C * sizeof(float));
    }
    zero(s->dx, (size_t)T * C);
    rmsnorm_backward(s->dx, g->ln_f, s->dh, s->x, p->ln_f, T, C, c->rms_norm_eps);
    return J;
}
