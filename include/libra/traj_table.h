/*
 * Rank 0's book of trajectories and GRPO groups: every trajectory ever started, the
 * queue of turns waiting for dispatch, and the buffer of complete groups waiting
 * for training. Ids are dense (trajectory i is t[i], group g is g[g]).
 *
 * Staleness (DESIGN §7, reference trainer_envs.md §8.5): a trajectory's
 * version_start is the policy version of its first generated token. The step that
 * trains at version v may only take trajectories with v - version_start <= S, and
 * the bound must hold without dropping anything. The book reasons with a group's
 * launch version L (the rollout version when it was launched), a lower bound of
 * every member's version_start:
 *   - the controller launches only while groups_launched < (rollout_version + S + 1)
 *     * groups_per_batch, so at most (u + S + 1) * B groups ever have L <= u;
 *   - tt_select_batch takes complete groups in (L, id) order and forms the batch
 *     only if, afterwards, for every u the untrained groups with L <= u number at
 *     most max(0, u + S - v) * B -- i.e. the steps still allowed to train them can.
 * Taking newer groups while older ones are still generating is allowed exactly as
 * far as that invariant permits; when every group is complete the greedy choice
 * always satisfies it, so the run cannot deadlock. */
#ifndef LIBRA_TRAJ_TABLE_H
#define LIBRA_TRAJ_TABLE_H

#include <stddef.h>
#include <stdint.h>

enum traj_state {
    TS_QUEUED = 0,  /* a turn waits for dispatch */
    TS_RUNNING = 1, /* a turn is on an instance */
    TS_DONE = 2,    /* finished; its group is not complete yet */
    TS_BUFFERED = 3,/* finished; its group is complete and waits for training */
    TS_TRAINED = 4,
};

struct traj {
    int64_t id, prompt_id, group_id;
    int state;            /* enum traj_state */
    int turn;             /* index of the turn being / to be generated */
    int ctx_tokens;       /* prompt + generated + tool tokens so far */
    int prompt_tokens, gen_tokens, tool_tokens;
    int n_failures, last_failed, last_large, migrations;
    int resume_generated; /* tokens of the current turn done before a hand-back */
    int leader;           /* instance of the current / last turn, -1 none */
    int dispatched_load;  /* KV tokens the current turn adds to its instance's load */
    int step_start;       /* training step when launched (workload drift) */
    int version_start;    /* version of the first generated token, -1 until known */
    int version_end;      /* version of the last generated token */
    int step_consumed;    /* step that trained on it, -1 */
    double reward;
    double tool_s;         /* emulated tool latency, summed over its turns */
    double t_start, t_end; /* wall seconds since the run started; t_end -1 */
};

struct group {
    int64_t id, prompt_id;
    int64_t first_traj;  /* its trajectories are first_traj .. first_traj + n - 1 */
    int n, n_done;
    int trained;
    int launch_version;  /* rollout version at launch: <= every member's version_start */
};

struct traj_table {
    int n_samples;
    struct traj *t;
    size_t n_traj, cap_traj;
    struct group *g;
    size_t n_group, cap_group;
    int64_t *queue;      /* ring of trajectory ids waiting for a turn dispatch */
    size_t q_head, q_len, q_cap;
    int64_t *buffered;   /* complete, untrained group ids in completion order */
    size_t n_buffered, cap_buffered;
    int64_t groups_trained;
};

void tt_init(struct traj_table *tt, int n_samples);
void tt_free(struct traj_table *tt);
/* Starts a group of n_samples trajectories, queued for their first turn. */
int64_t tt_launch_group(struct traj_table *tt, int64_t prompt_id, int prompt_tokens, int step,
                        int launch_version, double now);
/* Ids beyond the book (the controller's evaluation episodes) may share the queue;
 * their state is then the caller's to keep. */
void tt_queue_push(struct traj_table *tt, int64_t traj_id);
/* Front push: a handed-back turn goes before new work. */
void tt_queue_push_front(struct traj_table *tt, int64_t traj_id);
int tt_queue_pop(struct traj_table *tt, int64_t *traj_id);
/* Marks a trajectory finished; returns 1 if that completed its group. */
int tt_finish(struct traj_table *tt, int64_t traj_id, double now);
/* Chooses the groups of the step that trains at version v (see above). Returns the
 * number written to out (== want) or 0 if the batch may not be formed yet. */
int tt_select_batch(struct traj_table *tt, int want, int v, int max_staleness, int64_t *out);
/* Marks the groups trained at step (removes them from the buffer). */
void tt_mark_trained(struct traj_table *tt, const int64_t *groups, int n, int step);
int64_t tt_groups_in_flight(const struct traj_table *tt);

#endif
