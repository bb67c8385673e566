/*
 * Trained trajectories as text (output.sample_interval, output.samples): every
 * sample_interval steps, the first trajectory of each of the step's first `samples`
 * groups is decoded with the model's vocabulary -- the prompt, then everything after
 * it, special tokens spelled out so the turns, tool calls and tool returns show -- and
 * written to the metrics file's /samples (metrics_sample). Real-model devices only.
 */
#include <stdlib.h>

#include "ctl_internal.h"
#include "libra/log.h"

/* ids as text (NUL-terminated, caller frees). */
static char *decode(const struct vocab *v, const int32_t *ids, int n)
{
    size_t need = n > 0 ? v->decode(v->ctx, ids, (size_t)n, NULL, 0) : 0;
    char *s = xmalloc(need + 1);
    size_t got = n > 0 ? v->decode(v->ctx, ids, (size_t)n, s, need) : 0;
    s[got < need ? got : need] = '\0';
    return s;
}

void ctl_real_samples(struct controller *c, const int64_t *groups, int n_groups, int step)
{
    const struct output_config *o = &c->cfg->output;
    if (!c->real || o->sample_interval <= 0 || step % o->sample_interval != 0) return;
    const struct vocab *v = c->rl.vocab;
    for (int g = 0; g < n_groups && g < o->samples; g++) {
        const struct traj *t = &c->tt.t[c->tt.g[groups[g]].first_traj];
        const struct traj_tokens *tk = ctl_real_tokens(c, t->id);
        int np = t->prompt_tokens < tk->n ? t->prompt_tokens : tk->n;
        char *prompt = decode(v, tk->ids, np), *rest = decode(v, tk->ids + np, tk->n - np);
        struct metrics_sample_row row = {.step = step,
                                         .traj_id = t->id,
                                         .group_id = t->group_id,
                                         .reward = t->reward,
                                         .correct = tk->correct,
                                         .turns = t->turn + 1,
                                         .tool_calls = tk->tool_calls[0] + tk->tool_calls[1],
                                         .prompt = prompt,
                                         .completion = rest};
        int rc = metrics_sample(c->m, &row);
        free(prompt);
        free(rest);
        if (rc) FATAL("metrics: cannot write a /samples row of step %d", step);
    }
}
