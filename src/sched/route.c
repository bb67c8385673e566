/*
 * The routing machinery every scheduling policy shares (sched_internal.h):
 * bucket lookup by tokens, the choice of an instance among TP classes
 * (sched.balance), the bucket chain
 * preferred -> fallback -> global, the affinity test, and the migration log.
 *
 * Differences from the reference (cmlfq.md §1.1, §1.4, §6.8, §6.9):
 *  - A bucket's fallback is the other buckets nearest in bucket order first (the
 *    larger bucket first on a tie); the reference concatenates every other bucket's
 *    TP degrees in config order, duplicates included.
 *  - Ties within a TP class rotate over the instance list (the reference's
 *    LoadBalance rotation) for every policy; the reference's other policies always
 *    take the first registered instance.
 *  - Load is KV tokens normalised by the instance's KV capacity (balance = kv), and
 *    the cap sched.max_load is on that normalised load.
 *  - A bucket's TP degrees share its turns: the least-loaded instance of any of them
 *    takes a turn (and of any of a fallback bucket's); the reference tried them one
 *    class after another. In order, a class with few instances in a plan
 *    of many others (one TP-4 among sixty TP-8s in the long bucket [4, 8], or the
 *    nearest fallback of a bucket whose own class the plan lacks) took every turn
 *    until its KV cache was half full while the rest idled: at 512 GPUs that left
 *    three quarters of the rollout instances empty and cost libra 16-43 %.
 */
#include "sched_internal.h"

#include <string.h>

#include "libra/log.h"

enum balance { BAL_KV = 0, BAL_CONNECTIONS, BAL_ROUND_ROBIN, BAL_WEIGHTED, BAL_TIME };

/* Config validation rejects other names; anything unknown balances by KV load. */
static enum balance balance_of(const struct sched *s)
{
    if (strcmp(s->cfg.balance, "connections") == 0) return BAL_CONNECTIONS;
    if (strcmp(s->cfg.balance, "round_robin") == 0) return BAL_ROUND_ROBIN;
    if (strcmp(s->cfg.balance, "weighted") == 0) return BAL_WEIGHTED;
    if (strcmp(s->cfg.balance, "time") == 0 && rates_valid(&s->rates)) return BAL_TIME;
    return BAL_KV;
}

double sched_norm_load(const struct sched_instance *in)
{
    return in->capacity > 0 ? in->load / in->capacity : in->load;
}

int sched_bucket_for(const struct sched *s, double tokens)
{
    for (int b = 0; b < s->n_bucket; b++)
        if (tokens <= s->bucket[b].max_tokens) return b;
    return s->n_bucket - 1;
}

int sched_bucket_has_tp(const struct sched *s, int b, int tp)
{
    if (b < 0 || b >= s->n_bucket) return 0;
    for (int k = 0; k < s->bucket[b].n_tp; k++)
        if (s->bucket[b].tp[k] == tp) return 1;
    return 0;
}

/* balance = weighted: weight of the TP degree (1, 2, 4, 8 -> weights[0..3]); other
 * degrees and non-positive weights count as a small positive weight so the division
 * stays defined (the reference's max(weight, 0.01)). */
static double tp_weight(const struct sched *s, int tp)
{
    int idx = tp == 1 ? 0 : tp == 2 ? 1 : tp == 4 ? 2 : tp == 8 ? 3 : -1;
    double w = idx >= 0 ? s->cfg.weights[idx] : 1.0;
    return w > 0.01 ? w : 0.01;
}

static double load_key(const struct sched *s, enum balance bal, const struct sched_instance *in)
{
    switch (bal) {
    case BAL_CONNECTIONS: return in->n_turns;
    case BAL_WEIGHTED: return in->n_turns / tp_weight(s, in->tp);
    /* The decode time per token a newcomer would see: instances of different TP
     * compare by speed, not by occupancy. */
    case BAL_TIME: return s->rates.decode_step_s(&s->rates, in->tp, in->n_turns + 1, in->load);
    default: return sched_norm_load(in);
    }
}

/* tps[0 .. n_tps): the TP degrees allowed (n_tps 0: any). */
static int eligible(const struct sched *s, const struct sched_instance *in, const int *tps,
                    int n_tps, int capped)
{
    int ok = n_tps == 0;
    for (int k = 0; k < n_tps && !ok; k++) ok = in->tp == tps[k];
    if (!ok) return 0;
    if (capped && s->cfg.max_load > 0 && !(sched_norm_load(in) < s->cfg.max_load)) return 0;
    return 1;
}

/* Keys closer than this are a tie (normalised loads are ratios of token counts). */
#define TIE_EPS 1e-12

/* The instance sched.balance chooses among those of the TP degrees tps. */
static int pick_among(struct sched *s, const struct sched_instance *inst, int n, const int *tps,
                      int n_tps, int capped)
{
    if (n <= 0) return -1;
    enum balance bal = balance_of(s);
    if (bal == BAL_ROUND_ROBIN) {
        int n_cand = 0;
        for (int i = 0; i < n; i++) n_cand += eligible(s, &inst[i], tps, n_tps, capped);
        if (n_cand == 0) return -1;
        int want = (int)(s->rr % (unsigned)n_cand);
        s->rr++;
        for (int i = 0; i < n; i++)
            if (eligible(s, &inst[i], tps, n_tps, capped) && want-- == 0) return i;
        return -1; /* not reached: want < n_cand */
    }
    double best = 0;
    int found = 0;
    for (int i = 0; i < n; i++) {
        if (!eligible(s, &inst[i], tps, n_tps, capped)) continue;
        double k = load_key(s, bal, &inst[i]);
        if (!found || k < best) best = k;
        found = 1;
    }
    if (!found) return -1;
    /* The tie set rotates: scan from the rotation point, take the first tied one. */
    unsigned start = s->rotate % (unsigned)n;
    for (int step = 0; step < n; step++) {
        int i = (int)((start + (unsigned)step) % (unsigned)n);
        if (!eligible(s, &inst[i], tps, n_tps, capped)) continue;
        if (load_key(s, bal, &inst[i]) <= best + TIE_EPS) {
            s->rotate = (unsigned)i + 1;
            return i;
        }
    }
    return -1; /* not reached: the minimum is a candidate */
}

int sched_pick(struct sched *s, const struct sched_instance *inst, int n, int tp, int capped)
{
    return pick_among(s, inst, n, &tp, tp > 0 ? 1 : 0, capped);
}

int sched_route_bucket(struct sched *s, int bucket, const struct sched_instance *inst, int n,
                       int *via)
{
    if (s->n_bucket > 0) {
        if (bucket < 0 || bucket >= s->n_bucket) bucket = 0;
        const struct sched_bucket *bk = &s->bucket[bucket];
        int i = bk->n_tp > 0 ? pick_among(s, inst, n, bk->tp, bk->n_tp, 1) : -1;
        if (i >= 0) {
            *via = SCHED_VIA_PREFERRED;
            return i;
        }
        /* the other buckets nearest first, the larger on a tie, each pooled */
        for (int d = 1; s->cfg.fallback && d < s->n_bucket; d++)
            for (int side = 0; side < 2; side++) {
                int j = side == 0 ? bucket + d : bucket - d;
                if (j < 0 || j >= s->n_bucket) continue;
                i = pick_among(s, inst, n, s->bucket[j].tp, s->bucket[j].n_tp, 1);
                if (i >= 0) {
                    *via = SCHED_VIA_FALLBACK;
                    return i;
                }
            }
    }
    *via = SCHED_VIA_GLOBAL;
    return sched_pick(s, inst, n, 0, 0);
}

int sched_keep_prev(const struct sched *s, int prev, int chosen, const struct sched_instance *inst,
                    int n)
{
    (void)s;
    if (prev < 0 || prev >= n) return 0;
    if (chosen < 0 || chosen >= n || chosen == prev) return 1;
    return sched_norm_load(&inst[prev]) <= sched_norm_load(&inst[chosen]) + SCHED_STICKY_MARGIN;
}

static void count_migration(struct sched_stats *st, int why)
{
    if (why == SCHED_MIG_CAUSAL || why == SCHED_MIG_TOKENS || why == SCHED_MIG_THRESHOLD ||
        why == SCHED_MIG_RETURN)
        st->migrations++;
    else if (why == SCHED_MIG_DECLINED_COST || why == SCHED_MIG_DECLINED_LIMIT)
        st->declined++;
}

void sched_log_migration(struct sched *s, const struct sched_migration *m)
{
    if (s->n_mig == s->cap_mig) {
        int cap = s->cap_mig > 0 ? 2 * s->cap_mig : 16;
        s->mig = xrealloc(s->mig, (size_t)cap * sizeof *s->mig);
        s->cap_mig = cap;
    }
    s->mig[s->n_mig++] = *m;
    count_migration(&s->stats, m->why);
    count_migration(&s->step, m->why);
}
