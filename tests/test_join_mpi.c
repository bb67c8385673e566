/*
 * A lent replica's training state (src/worker/worker_train.c) on the CPU device, run
 * with mpirun -np 4 (tests/mpi_join.sh): rank 0 plays the controller's part (re-splits,
 * the messages it is sent); ranks 1..3 are workers driven by hand (worker_apply_plan,
 * wt_on_batch, wt_progress, wt_join_progress), one phase at a time, in the order rank
 * 0 would drive them:
 *   plan A   rank 1 rollout, rank 2 rollout, rank 3 the training replica
 *   step 1   rank 3 alone
 *   plan B   the pool lends rank 2 (plan_lend): it fetches its partner's snapshot
 *   step 2   rank 3 alone; the joined rank applies the step's total (no share)
 *   step 3   rank 3 and the lent rank 2 share the batch (gradient over the lane)
 *   plan C   a planner's plan with two core replicas: rank 2 (lent until now, so it
 *            keeps its state: no hand-over) and rank 3
 *   step 4   both core replicas; the root reports params_identical
 * After every step each rank holding training state reports a hash of its whole
 * state (weights, AdamW moments, step count: the device's join buffer) and rank 0
 * checks they are bitwise equal, and that the step's TRAIN_DONE says params_identical.
 *
 * Every step is clipped (train.clip_norm far below the gradient norm, as in the RL
 * runs, where the norm is above the default 1.0 at every step): the optimizer step
 * scales the gradient buffer in place, so a lent replica that is given the total
 * after its partner's step applies a gradient clipped twice -- its state drifts, and
 * once a plan makes it a core replica the replicas' parameters differ. The learning
 * rate is large (1e-2) so that a drift of the moments shows in the weights at once.
 * Every rank runs the suite (the test is collective); rank 0 prints; the exit code
 * is the worst of all ranks'.
 */
#include <cblas.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/config.h"
#include "libra/device.h"
#include "libra/hash.h"
#include "libra/log.h"
#include "libra/outbox.h"
#include "libra/wire.h"
#include "testutil.h"
#include "worker/worker_internal.h"

#define N_WORLD 4
#define N_ITEMS 4   /* trajectories per step */
#define N_TOK 12    /* tokens per trajectory: N_PROMPT prompt, the rest generated */
#define N_PROMPT 4
#define TAG_MARK 990 /* worker -> rank 0: the phase is done here (struct mark) */

static int g_rank;
static struct libra_config g_cfg;

/* A worker's state at the end of a phase. */
struct mark {
    int32_t rank, role, version, holds; /* holds: training state (train or hybrid) */
    uint64_t hash;                      /* of the whole training state */
};

/* What rank 0 was sent during a phase. */
struct phase_log {
    struct mark marks[N_WORLD];
    struct wire_train_done done;
    int n_done, n_ready;
};

/* Rank 0: every message until each worker's mark; then the phase's barrier (a worker
 * idle in a phase must not send its next mark before the others' marks of this one). */
static void ctl_phase(struct phase_log *o)
{
    memset(o, 0, sizeof *o);
    struct wire_buf b;
    memset(&b, 0, sizeof b);
    for (int got = 0; got < N_WORLD - 1;) {
        MPI_Status st;
        MPI_CHECK(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
        wire_recv(&b, &st, MPI_COMM_WORLD);
        switch (st.MPI_TAG) {
        case TAG_MARK:
            CU_ASSERT_EQUAL_FATAL(b.len, sizeof(struct mark));
            memcpy(&o->marks[st.MPI_SOURCE], b.data, sizeof(struct mark));
            got++;
            break;
        case TAG_TRAIN_DONE:
            CU_ASSERT_EQUAL_FATAL(b.len, sizeof o->done);
            memcpy(&o->done, b.data, sizeof o->done);
            o->n_done++;
            break;
        case TAG_HYBRID_READY: o->n_ready++; break;
        default: break; /* hand-backs, step times, heartbeats */
        }
    }
    wire_buf_free(&b);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

/* Worker: its outbox drained (the receivers are in their phase too), then its mark and
 * the phase's barrier. */
static void end_phase(struct worker *w)
{
    outbox_drain(&w->ob);
    int role = w->plan.ranks[w->rank].role;
    struct mark m = {g_rank, role, w->ops->version(w->dev), 0, 0};
    if (role == ROLE_TRAIN || role == ROLE_HYBRID) {
        size_t n;
        const float *state = w->ops->join_buffer(w->dev, 1, &n);
        m.holds = 1;
        m.hash = fnv1a_floats(state, n);
    }
    MPI_CHECK(MPI_Send(&m, sizeof m, MPI_BYTE, 0, TAG_MARK, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

/* Worker: progress until the step in flight is applied and the rank holds version. */
static void drive(struct worker *w, int version)
{
    while (w->tr.phase != WK_IDLE || w->join.active || w->ops->version(w->dev) < version) {
        wt_progress(w);
        wt_join_progress(w);
        outbox_progress(&w->ob);
    }
}

/* Trajectory i of step s: fixed token ids, behaviour log-probs and an advantage. */
static void item(int s, int i, int32_t *ids, float *logp, uint8_t *mask, struct wire_train_item *it)
{
    for (int k = 0; k < N_TOK; k++) {
        ids[k] = 3 + (int32_t)((s * 131u + (unsigned)i * 37u + (unsigned)k * 11u) % 97u);
        mask[k] = k >= N_PROMPT;
        logp[k] = mask[k] ? -1.0f - 0.1f * (float)((k + i) % 7) : 0.0f;
    }
    *it = (struct wire_train_item){.traj_id = s * N_ITEMS + i, .tokens = N_TOK,
                                   .gen_tokens = N_TOK - N_PROMPT,
                                   .advantage = (i % 2) ? -1.0 : 1.0, .has_data = 1};
}

/* Worker: its share of step s (replica `replica` of n_rep, hybrids of them lent), as
 * rank 0's send_batch splits it: items in turn over the replicas. */
static void take_share(struct worker *w, int s, int replica, int n_rep, int hybrids)
{
    struct wire_buf b;
    memset(&b, 0, sizeof b);
    struct wire_train_batch h = {s, s - 1, 0, n_rep, 1, hybrids, (int64_t)N_ITEMS * N_TOK,
                                 (int64_t)N_ITEMS * (N_TOK - N_PROMPT)};
    for (int i = replica; i < N_ITEMS; i += n_rep) h.n_items++;
    wire_train_batch_begin(&b, &h);
    for (int i = replica; i < N_ITEMS; i += n_rep) {
        int32_t ids[N_TOK];
        float logp[N_TOK];
        uint8_t mask[N_TOK];
        struct wire_train_item it;
        item(s, i, ids, logp, mask, &it);
        wire_train_batch_add(&b, &it, ids, logp, mask);
    }
    wt_on_batch(w, b.data, b.len);
    wire_buf_free(&b);
}

/* Rank 0's checks after step s: every rank holding training state holds exactly the
 * same one, at version s, and the training root reported the step, clipped, with its
 * replicas identical. */
static void check_step(const struct phase_log *o, int s, int holders)
{
    CU_ASSERT_EQUAL(o->n_done, 1);
    CU_ASSERT_EQUAL(o->done.step, s);
    CU_ASSERT(o->done.grad_norm > g_cfg.train.clip_norm); /* the step was clipped */
    CU_ASSERT_EQUAL(o->done.params_identical, 1);
    int n = 0;
    const struct mark *first = NULL;
    for (int r = 1; r < N_WORLD; r++) {
        const struct mark *m = &o->marks[r];
        if (!m->holds) continue;
        n++;
        CU_ASSERT_EQUAL(m->version, s);
        if (!first) {
            first = m;
            continue;
        }
        if (m->hash != first->hash)
            printf("\n  step %d: rank %d (%s) holds state %016llx, rank %d (%s) %016llx\n", s,
                   m->rank, role_name(m->role), (unsigned long long)m->hash, first->rank,
                   role_name(first->role), (unsigned long long)first->hash);
        CU_ASSERT_EQUAL(m->hash, first->hash);
    }
    CU_ASSERT_EQUAL(n, holders);
}

/* Every rank: the end of a phase (o: rank 0's log of it). */
static void phase_end(struct worker *w, struct phase_log *o)
{
    if (w)
        end_phase(w);
    else
        ctl_phase(o);
}

/* One re-split to plan p (rank 0: its side of the collective split). */
static void apply(struct worker *w, struct comms *c0, const struct plan *old, const struct plan *p)
{
    if (w)
        worker_apply_plan(w, p);
    else
        comms_rebuild(c0, old, p, 0);
}

static void test_lent_state(void)
{
    struct worker *w = NULL;
    struct comms c0;
    comms_init(&c0);
    if (g_rank > 0) {
        w = xcalloc(1, sizeof *w);
        worker_init(w, &g_cfg, NULL, NULL, g_rank, N_WORLD, 0);
    }
    struct phase_log o;
    struct plan a, b, c;
    plan_init(&a, N_WORLD);
    plan_init(&b, N_WORLD);
    plan_init(&c, N_WORLD);
    char err[256];
    struct plan_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.n_train = 1;
    spec.n_tp = 2;
    spec.rollout_tp[0] = spec.rollout_tp[1] = 1;
    if (plan_build(&spec, N_WORLD, 0, 0, "test", &a, err, sizeof err)) FATAL("%s", err);
    CU_ASSERT_FATAL(a.ranks[3].role == ROLE_TRAIN && a.ranks[2].role == ROLE_ROLLOUT);
    static const int lend[] = {0, 1}; /* rank 2's instance */
    plan_lend(&a, lend, &b);
    b.epoch = 1;
    b.step = 1;
    CU_ASSERT_FATAL(b.ranks[2].role == ROLE_HYBRID);
    spec.n_train = 2;
    spec.n_tp = 1;
    if (plan_build(&spec, N_WORLD, 2, 3, "test", &c, err, sizeof err)) FATAL("%s", err);
    CU_ASSERT_FATAL(c.ranks[2].role == ROLE_TRAIN && c.ranks[3].role == ROLE_TRAIN);

    apply(w, &c0, NULL, &a);
    /* step 1: the core replica alone */
    if (g_rank == 3) {
        take_share(w, 1, 0, 1, 0);
        drive(w, 1);
    }
    phase_end(w, &o);
    if (!w) check_step(&o, 1, 1);

    /* plan B: rank 2 is lent and joins */
    apply(w, &c0, &a, &b);
    if (g_rank == 2 || g_rank == 3) drive(w, 1);
    phase_end(w, &o);
    if (!w) CU_ASSERT_EQUAL(o.n_ready, 1);

    /* step 2: the core replica alone; the lent rank applies the total */
    if (g_rank == 3) take_share(w, 2, 0, 1, 0);
    if (g_rank == 2 || g_rank == 3) drive(w, 2);
    phase_end(w, &o);
    if (!w) check_step(&o, 2, 2);

    /* step 3: both; the lent gradient goes over the lane */
    if (g_rank == 3) take_share(w, 3, 0, 2, 1);
    if (g_rank == 2) take_share(w, 3, 1, 2, 1);
    if (g_rank == 2 || g_rank == 3) drive(w, 3);
    phase_end(w, &o);
    if (!w) check_step(&o, 3, 2);

    /* plan C: the lent rank becomes a core replica with the state it holds */
    apply(w, &c0, &b, &c);
    phase_end(w, &o);

    /* step 4: two core replicas; the root (now rank 2) checks them */
    if (g_rank == 2) take_share(w, 4, 0, 2, 0);
    if (g_rank == 3) take_share(w, 4, 1, 2, 0);
    if (g_rank == 2 || g_rank == 3) drive(w, 4);
    phase_end(w, &o);
    if (!w) check_step(&o, 4, 2);

    if (w) {
        wr_before_plan(w, NULL); /* rank 1 hands its (empty) instance back */
        end_phase(w);
        worker_free(w);
        free(w);
    } else {
        ctl_phase(&o);
    }
    comms_free(&c0);
    plan_free(&a);
    plan_free(&b);
    plan_free(&c);
}

static const struct test_case join_cases[] = {
    {"a lent replica holds its partner's exact state through a join, totals, a shared "
     "step and a plan that makes it a core replica", test_lent_state},
    {NULL, NULL},
};

static const struct test_suite suites[] = {{"lent replicas over MPI", join_cases}, {NULL, NULL}};

int main(int argc, char **argv)
{
    if ((g_rank = test_mpi_begin(&argc, &argv, "test_join_mpi", N_WORLD)) < 0) return 2;
    test_tiny_cpu_config(&g_cfg);
    g_cfg.train.lr = 1e-2;
    g_cfg.train.clip_norm = 1e-3;
    int worst = test_main_all_ranks(suites);
    MPI_CHECK(MPI_Finalize());
    return worst;
}
