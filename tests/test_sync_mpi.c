/*
 * Shard-matched weight syncs (src/worker/weight_sync.c) on the CPU device, run with
 * mpirun -np 10 (tests/mpi_tp.sh): rank 0 plays the controller's part of a re-split;
 * ranks 1..9 are workers driven by hand (worker_apply_plan, ws_on_sync, ws_progress).
 *
 * Plans (9 workers):
 *   A  rollout instances TP [4, 2, 1], a training replica of TP 2 (two senders)
 *   B  rollout instances TP [2, 2, 1, 1, 1, 1], one training rank of TP 1 (one sender)
 * For each, the root replica writes a pattern into its weights (every element a
 * function of its tensor and its place in the whole tensor) and syncs; then
 *  - every rollout rank's staging buffer holds exactly the pattern of its shard, bit
 *    for bit, whatever TP degrees the two sides have;
 *  - each rank received exactly its shard's bytes (replicated blocks once): a rank of
 *    a TP-t instance, t > 1, received less than the whole model; the root replica sent
 *    each block once;
 *  - rank 0 gets one SYNC_DONE per member carrying those byte counts.
 * Every rank runs the suite (the test is collective); rank 0 prints; the exit code is
 * the worst of all ranks'.
 */
#include <cblas.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/config.h"
#include "libra/device.h"
#include "libra/log.h"
#include "libra/outbox.h"
#include "testutil.h"
#include "worker/worker_internal.h"

#define N_WORLD 10
#define MAX_SL 512

static int g_rank;
static struct libra_config g_cfg;

static float pattern(int tensor, int64_t r, int64_t c, int round)
{
    uint64_t h = (uint64_t)tensor * 1315423911u + (uint64_t)r * 2654435761u + (uint64_t)c * 97u +
                 (uint64_t)round * 7919u;
    return (float)(h % 100003u) / 8.0f; /* exact in float */
}

static void fill(struct dev_slice *s, int n, int round)
{
    for (int k = 0; k < n; k++)
        for (int64_t r = 0; r < s[k].nr; r++)
            for (int64_t c = 0; c < s[k].nc; c++)
                s[k].data[r * s[k].nc + c] = pattern(s[k].tensor, s[k].r0 + r, s[k].c0 + c, round);
}

/* Mismatching elements of the slices against the pattern. */
static long long check(const struct dev_slice *s, int n, int round, long long *floats)
{
    long long bad = 0;
    *floats = 0;
    for (int k = 0; k < n; k++) {
        *floats += s[k].nr * s[k].nc;
        for (int64_t r = 0; r < s[k].nr; r++)
            for (int64_t c = 0; c < s[k].nc; c++)
                bad += s[k].data[r * s[k].nc + c] !=
                       pattern(s[k].tensor, s[k].r0 + r, s[k].c0 + c, round);
    }
    return bad;
}

static void build(struct plan *p, int n_train, int train_tp, const int *tp, int n_tp, int epoch)
{
    struct plan_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.n_train = n_train;
    spec.train_tp = train_tp;
    spec.n_tp = n_tp;
    memcpy(spec.rollout_tp, tp, (size_t)n_tp * sizeof *tp);
    char err[256];
    if (plan_build(&spec, N_WORLD, epoch, 0, "test", p, err, sizeof err)) FATAL("%s", err);
}

/* One sync under plan p (already applied); round: the pattern's variant. */
static void sync_round(struct worker *w, struct comms *c0, const struct plan *p, int round)
{
    (void)c0;
    int *members = xmalloc(N_WORLD * sizeof *members);
    int n = plan_members(p, 0, members);
    long long full_floats = 0;
    if (g_rank == 0) {
        long long bytes = 0;
        for (int k = 0; k < n; k++) { /* by source: a fast rank may be a round ahead */
            struct wire_sync_done d;
            MPI_CHECK(MPI_Recv(&d, sizeof d, MPI_BYTE, members[k], TAG_SYNC_DONE, MPI_COMM_WORLD,
                               MPI_STATUS_IGNORE));
            CU_ASSERT_EQUAL(d.version, round + 1);
            bytes += d.bytes;
        }
        CU_ASSERT(bytes > 0);
        free(members);
        return;
    }
    struct dev_slice *s = xmalloc(MAX_SL * sizeof *s);
    const struct rank_assign *a = &p->ranks[g_rank];
    int sender = plan_in_root_replica(p, g_rank), in_sync = sender || a->role == ROLE_ROLLOUT;
    if (sender) {
        int ns = w->ops->slices(w->dev, p->train_tp, a->index, DEV_SLICES_SEND, s, MAX_SL);
        fill(s, ns, round);
    }
    if (in_sync) {
        struct wire_sync msg = {round + 1, round + 1};
        ws_on_sync(w, &msg);
        while (w->sync.active) {
            ws_progress(w);
            outbox_progress(&w->ob);
        }
        outbox_drain(&w->ob);
    }
    if (a->role == ROLE_ROLLOUT) {
        int ns = w->ops->slices(w->dev, a->tp, a->index, DEV_SLICES_STAGE, s, MAX_SL);
        long long floats;
        CU_ASSERT_EQUAL(check(s, ns, round, &floats), 0);
        CU_ASSERT_EQUAL(w->sync.bytes_in, floats * (long long)sizeof(float));
        int nf = w->ops->slices(w->dev, 1, 0, DEV_SLICES_GEOMETRY, s, MAX_SL);
        for (int k = 0; k < nf; k++) full_floats += s[k].nr * s[k].nc;
        long long full_bytes = full_floats * (long long)sizeof(float);
        if (a->tp > 1) {
            CU_ASSERT(w->sync.bytes_in < full_bytes);
        } else {
            CU_ASSERT_EQUAL(w->sync.bytes_in, full_bytes);
        }
    }
    free(s);
    free(members);
}

/* Rank 0: the TAG_HANDBACK batches of n dissolved instances (empty: nothing ran). */
static void take_handbacks(int n)
{
    char buf[4096];
    for (int k = 0; k < n; k++) {
        MPI_Status st;
        MPI_CHECK(MPI_Recv(buf, sizeof buf, MPI_BYTE, MPI_ANY_SOURCE, TAG_HANDBACK, MPI_COMM_WORLD,
                           &st));
    }
}

static void test_sync(void)
{
    struct worker *w = NULL;
    struct comms c0;
    comms_init(&c0);
    if (g_rank > 0) {
        w = xcalloc(1, sizeof *w);
        worker_init(w, &g_cfg, NULL, NULL, g_rank, N_WORLD, 0);
    }
    struct plan p, old;
    plan_init(&p, N_WORLD);
    plan_init(&old, N_WORLD);
    for (int r = 0; r < N_WORLD; r++) old.ranks[r].role = r ? ROLE_IDLE : ROLE_CONTROLLER;
    static const int tp_a[] = {4, 2, 1}, tp_b[] = {2, 2, 1, 1, 1, 1};
    for (int phase = 0; phase < 2; phase++) {
        if (phase == 0)
            build(&p, 2, 2, tp_a, 3, 0);
        else
            build(&p, 1, 1, tp_b, 6, 1);
        if (g_rank == 0) {
            comms_rebuild(&c0, phase ? &old : NULL, &p, 0);
            int gone = 0;
            for (int i = 0; phase && i < old.n_instances; i++)
                gone += plan_find_instance(&p, old.inst[i].leader, old.inst[i].tp) < 0;
            take_handbacks(gone);
        } else
            worker_apply_plan(w, &p);
        plan_copy(&old, &p);
        for (int round = 0; round < 2; round++) sync_round(w, &c0, &p, 2 * phase + round);
    }
    if (w) {
        wr_before_plan(w, NULL); /* hand back; the instances' command streams end */
        outbox_drain(&w->ob);
        worker_free(w);
        free(w);
    } else {
        take_handbacks(p.n_instances);
    }
    comms_free(&c0);
    plan_free(&p);
    plan_free(&old);
}

static const struct test_case sync_cases[] = {
    {"shard-matched sync: TP [4,2,1] from a TP-2 replica, TP [2,2,1,1,1,1] from TP 1", test_sync},
    {NULL, NULL},
};

static const struct test_suite suites[] = {{"weight sync over MPI", sync_cases}, {NULL, NULL}};

int main(int argc, char **argv)
{
    if ((g_rank = test_mpi_begin(&argc, &argv, "test_sync_mpi", N_WORLD)) < 0) return 2;
    test_tiny_cpu_config(&g_cfg);
    int worst = test_main_all_ranks(suites);
    MPI_CHECK(MPI_Finalize());
    return worst;
}
