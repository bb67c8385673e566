/* Rank 0's token store of one trajectory (include/libra/traj_tokens.h). */
#include "libra/traj_tokens.h"

#include <stdlib.h>
#include <string.h>

#include "libra/log.h"

static void grow(struct traj_tokens *t, int need)
{
    if (need <= t->cap) return;
    int cap = t->cap ? t->cap : 64;
    while (cap < need) cap *= 2;
    t->ids = xrealloc(t->ids, (size_t)cap * sizeof *t->ids);
    t->mask = xrealloc(t->mask, (size_t)cap * sizeof *t->mask);
    t->logp = xrealloc(t->logp, (size_t)cap * sizeof *t->logp);
    t->versions = xrealloc(t->versions, (size_t)cap * sizeof *t->versions);
    t->cap = cap;
}

void ttok_append(struct traj_tokens *t, const int32_t *ids, const float *logp,
                 const int32_t *versions, int n, int mask)
{
    if (n <= 0) return;
    grow(t, t->n + n);
    memcpy(t->ids + t->n, ids, (size_t)n * sizeof *ids);
    memset(t->mask + t->n, mask ? 1 : 0, (size_t)n);
    for (int i = 0; i < n; i++) {
        t->logp[t->n + i] = logp ? logp[i] : 0.0f;
        t->versions[t->n + i] = versions ? versions[i] : -1;
    }
    t->n += n;
}

void ttok_free(struct traj_tokens *t)
{
    free(t->ids);
    free(t->mask);
    free(t->logp);
    free(t->versions);
    memset(t, 0, sizeof *t);
}
