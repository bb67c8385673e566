/*
 * Length profiles and the history ring (include/libra/len_profile.h): what the
 * planner's cost model evaluates, one training batch of trajectories at a time.
 */
#include "libra/len_profile.h"

#include <stdlib.h>
#include <string.h>

#include "libra/log.h"

void lh_init(struct len_history *h, int cap)
{
    memset(h, 0, sizeof *h);
    h->cap = cap > 0 ? cap : 1;
    h->s = xcalloc((size_t)h->cap, sizeof *h->s);
}

void lh_free(struct len_history *h)
{
    free(h->s);
    memset(h, 0, sizeof *h);
}

void lh_add(struct len_history *h, const struct traj_sample *s)
{
    h->s[h->next] = *s;
    h->next = (h->next + 1) % h->cap;
    if (h->n < h->cap) h->n++;
    h->total++;
}

void lp_init(struct len_profile *p)
{
    memset(p, 0, sizeof *p);
    p->overlap = 1;
}

void lp_free(struct len_profile *p)
{
    free(p->s);
    lp_init(p);
}

static void lp_resize(struct len_profile *p, int n)
{
    free(p->s);
    p->s = xcalloc((size_t)(n > 0 ? n : 1), sizeof *p->s);
    p->n = n;
}

static int cmp_total(const void *a, const void *b)
{
    int64_t x = traj_sample_tokens(a), y = traj_sample_tokens(b);
    return (x > y) - (x < y);
}

int lp_from_history(struct len_profile *p, const struct len_history *h, int n)
{
    if (h->n == 0 || n <= 0) return -1;
    struct traj_sample *sorted = xmalloc((size_t)h->n * sizeof *sorted);
    memcpy(sorted, h->s, (size_t)h->n * sizeof *sorted);
    qsort(sorted, (size_t)h->n, sizeof *sorted, cmp_total);
    lp_resize(p, n);
    for (int i = 0; i < n; i++) {
        /* rank round(i (H - 1) / (n - 1)); n = 1 takes the longest */
        int64_t k = n == 1 ? h->n - 1 : ((int64_t)i * (h->n - 1) * 2 + (n - 1)) / (2 * (n - 1));
        p->s[i] = sorted[k];
    }
    free(sorted);
    return 0;
}

void lp_from_workload(struct len_profile *p, const struct workload *wl,
                      const struct rollout_config *ro, uint64_t seed, int step, int64_t first,
                      int n)
{
    int max_turns = ro->max_turns, max_tokens_per_turn = ro->max_tokens_per_turn;
    int max_tokens = ro->max_tokens, group = ro->n_samples > 0 ? ro->n_samples : 1;
    lp_resize(p, n);
    for (int i = 0; i < n; i++) {
        struct traj_sample *s = &p->s[i];
        int64_t id = first + i, pid = id / group;
        int prompt = workload_prompt_tokens(wl, seed, pid);
        if (prompt > max_tokens - 1) prompt = max_tokens - 1;
        struct wl_traj_state st = {.traj_id = id, .prompt_id = pid, .ctx_tokens = prompt, .step = step};
        *s = (struct traj_sample){.prompt = prompt};
        for (;;) {
            struct wl_turn t;
            workload_turn(wl, seed, &st, &t);
            int budget = max_tokens - st.ctx_tokens;
            if (budget > max_tokens_per_turn) budget = max_tokens_per_turn;
            if (t.gen_tokens > budget) t.gen_tokens = budget;
            s->turns++;
            s->gen += t.gen_tokens;
            if (t.final) break;
            s->tool += t.payload_tokens;
            s->tool_s += t.tool_latency_s;
            workload_advance(wl, &st, &t);
            if (st.turn >= max_turns || st.ctx_tokens >= max_tokens) break;
        }
    }
}

void lp_token_sums(const struct len_profile *p, double *tokens, double *sum_len_sq)
{
    double t = 0, q = 0;
    for (int i = 0; i < p->n; i++) {
        double x = (double)traj_sample_tokens(&p->s[i]);
        t += x;
        q += x * x;
    }
    *tokens = t;
    *sum_len_sq = q;
}

int64_t lp_max_tokens(const struct len_profile *p)
{
    int64_t m = 0;
    for (int i = 0; i < p->n; i++)
        if (traj_sample_tokens(&p->s[i]) > m) m = traj_sample_tokens(&p->s[i]);
    return m;
}
