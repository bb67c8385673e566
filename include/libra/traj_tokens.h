/*
 * Rank 0's copy of a trajectory's tokens (device cpu): the whole sequence -- prompt,
 * generated turns, tool payloads -- with loss mask (1 = model-generated), the
 * behaviour log-prob and the policy version of every generated token (0 / -1 for
 * prompt and tool tokens). The context of the next turn, the reward's input and the
 * training item are all read from here.
 */
#ifndef LIBRA_TRAJ_TOKENS_H
#define LIBRA_TRAJ_TOKENS_H

#include <stddef.h>
#include <stdint.h>

struct traj_tokens {
    int32_t *ids;
    uint8_t *mask;
    float *logp;
    int32_t *versions;
    int n, cap;
    int correct;           /* the answer was right (set when scored) */
    int tool_calls[2], tool_failures[2]; /* per tool (enum env_tool_id) */
};

/* Appends n tokens. logp / versions may be NULL (then 0 / -1); mask is 0 or 1. */
void ttok_append(struct traj_tokens *t, const int32_t *ids, const float *logp,
                 const int32_t *versions, int n, int mask);
void ttok_free(struct traj_tokens *t);

#endif
