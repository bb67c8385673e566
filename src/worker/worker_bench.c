/*
 * `mpirun -np N libra --bench-sync CONFIG`: weight syncs on the configuration's device
 * (cpu; or cuda, whose bf16 syncs go GPU to GPU over NCCL where every rank has a GPU of
 * its own) for its static plan (its model, its rollout TP layout, its training shape),
 * shard-matched (weight_sync.c: each rollout rank receives its own slices) against
 * the reference's full broadcast (MPI_Ibcast of the whole model from the training
 * root to every rollout rank, which then cuts its shard out of it). Rank 0 plays the
 * controller's part of the re-split; the workers are driven by hand, as in the job.
 *
 * Shard-matched syncs run twice: relayed (the job's way: the receivers of one place
 * pass the blocks down a chain, and the chains of the smallest TP degree feed the
 * places nested in theirs, sync_relay.c) and point to point (the senders send every
 * receiver its blocks).
 *
 * Per method: bytes received by the rollout ranks (in all, and by the rank that got
 * the most), bytes sent by the rank that sent the most (its link's load: what bounds
 * a sync over a network), wall time until every rank has its weights (best of 5,
 * the slowest rank each time) and, of it, the set-up in ws_on_sync (the pairs, runs
 * and MPI types of the sync; 0 for the broadcast). Then the link: MPI's bandwidth
 * from the first sender to the first receiver (one way, one message of the model's
 * float32 bytes, 256 MiB at most), against which the busiest rank's bytes (in or out)
 * per second of a sync are given as a fraction. GPU-to-GPU syncs (NCCL) are given
 * against that MPI link too: what NCCL's own link carries is not measured here.
 * Times depend on the cores the ranks get: with fewer cores than ranks they measure
 * the oversubscription as much as the transfer (and a relay copies the same bytes in
 * all as point to point does); bytes are exact.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "libra/mpi_wait.h"
#include "worker_internal.h"

#define REPS 5

struct sync_fig {
    double s;               /* wall seconds, slowest rank */
    long long bytes, most;  /* received by rollout ranks: in all, by one rank at most */
    long long sent;         /* sent by one rank at most */
    long long busiest;      /* received or sent by one rank at most (one direction of
                               its link) */
    double setup_s;         /* in ws_on_sync (the sync's plan: pairs, runs, types), slowest rank */
    long long by_tp[4];     /* received by one rank of a TP-1, 2, 4, 8 instance (the most) */
};

static int tp_slot(int tp) { return tp == 1 ? 0 : tp == 2 ? 1 : tp == 4 ? 2 : 3; }

/* The per-rank figures reduced over the job (rank: this rank's TP, -1 none; out: bytes
 * it sent, -1 unknown). */
static void reduce_fig(struct sync_fig *f, double dt, double setup, long long in, long long out,
                       int tp)
{
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Allreduce(&setup, &f->setup_s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Allreduce(&in, &f->bytes, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Allreduce(&in, &f->most, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Allreduce(&out, &f->sent, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD));
    long long dir = in > out ? in : out;
    MPI_CHECK(MPI_Allreduce(&dir, &f->busiest, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD));
    long long mine[4] = {0, 0, 0, 0};
    if (tp > 0) mine[tp_slot(tp)] = in;
    MPI_CHECK(MPI_Allreduce(mine, f->by_tp, 4, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD));
    f->s = dt;
}

/* The sync comm's size in floats of the whole model (geometry of TP 1). */
static long long model_floats(struct worker *w)
{
    int n;
    struct dev_slice *s = ws_slices(w, 1, 0, DEV_SLICES_GEOMETRY, &n);
    long long f = 0;
    for (int k = 0; k < n; k++) f += s[k].nr * s[k].nc;
    free(s);
    return f;
}

static void take_done(int n)
{
    for (int k = 0; k < n; k++) {
        struct wire_sync_done d;
        MPI_CHECK(MPI_Recv(&d, sizeof d, MPI_BYTE, MPI_ANY_SOURCE, TAG_SYNC_DONE, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
    }
}

/* This rank's instance TP, -1 if it is no rollout rank. */
static int rollout_tp(const struct worker *w, int rank)
{
    return rank > 0 && w->plan.ranks[rank].role == ROLE_ROLLOUT ? w->plan.ranks[rank].tp : -1;
}

/* One shard-matched sync, relayed or point to point, timed; rank 0 collects the
 * SYNC_DONEs. */
static void shard_sync(struct worker *w, int rank, int n_members, int id, int relayed,
                       struct sync_fig *f)
{
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = wall_time();
    long long in = 0, out = 0;
    double setup = 0;
    if (rank == 0) {
        take_done(n_members);
    } else if (w->comms.sync != MPI_COMM_NULL) {
        struct wire_sync msg = {id, id};
        w->sync.no_relay = !relayed;
        ws_on_sync(w, &msg);
        setup = wall_time() - t0;
        while (w->sync.active) {
            ws_progress(w);
            wr_progress(w); /* a GPU-to-GPU sync's receivers take it at a safe point */
            outbox_progress(&w->ob);
        }
        outbox_drain(&w->ob);
        /* until the instance has swapped the version in: its ranks agree on that at a
         * safe point together, so none may leave before the others */
        while (rollout_tp(w, rank) > 0 && w->ops->version(w->dev) != id) wr_progress(w);
        in = w->plan.ranks[rank].role == ROLE_ROLLOUT ? w->sync.bytes_in : 0;
        out = w->sync.bytes_out;
    }
    reduce_fig(f, wall_time() - t0, setup, in, out, rollout_tp(w, rank));
}

/* The reference's way: the whole model broadcast to every rollout rank. */
static void full_broadcast(struct worker *w, int rank, struct sync_fig *f)
{
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    double t0 = wall_time();
    long long in = 0;
    if (rank > 0 && w->comms.sync != MPI_COMM_NULL) {
        long long n = model_floats(w);
        float *all = xmalloc((size_t)n * sizeof *all);
        int root = plan_in_root_replica(&w->plan, rank);
        if (root) { /* the root's whole model: its slices (TP 1) */
            int ns;
            struct dev_slice *s = ws_slices(w, 1, 0, DEV_SLICES_SEND, &ns);
            long long off = 0;
            for (int k = 0; k < ns; k++) {
                memcpy(all + off, s[k].data, (size_t)(s[k].nr * s[k].nc) * sizeof *all);
                off += s[k].nr * s[k].nc;
            }
            free(s);
        }
        MPI_Request req;
        int done = 0;
        MPI_CHECK(MPI_Ibcast(all, (int)n, MPI_FLOAT, 0, w->comms.sync, &req));
        while (!done) MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE)); /* as the sync polls */
        if (!root) in = n * (long long)sizeof(float);
        free(all);
    }
    reduce_fig(f, wall_time() - t0, 0, in, -1, rollout_tp(w, rank)); /* MPI's own tree */
}

/* The link a sync's bytes cross, measured: `bytes` from world rank a to world rank b
 * over MPI (b acknowledges with one byte), best of REPS, in bytes/s (every rank
 * returns it). */
static double link_bw(int rank, int a, int b, long long bytes)
{
    char *buf = (rank == a || rank == b) ? xmalloc((size_t)bytes) : NULL;
    if (buf) memset(buf, 1, (size_t)bytes);
    double best = INFINITY;
    for (int rep = 0; rep < REPS; rep++) {
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        double t0 = wall_time();
        char ack = 0;
        if (rank == a) {
            MPI_CHECK(MPI_Send(buf, (int)bytes, MPI_BYTE, b, TAG_SYNC_DONE, MPI_COMM_WORLD));
            MPI_CHECK(MPI_Recv(&ack, 1, MPI_BYTE, b, TAG_SYNC_DONE, MPI_COMM_WORLD,
                               MPI_STATUS_IGNORE));
            best = fmin(best, wall_time() - t0);
        } else if (rank == b) {
            MPI_CHECK(MPI_Recv(buf, (int)bytes, MPI_BYTE, a, TAG_SYNC_DONE, MPI_COMM_WORLD,
                               MPI_STATUS_IGNORE));
            MPI_CHECK(MPI_Send(&ack, 1, MPI_BYTE, a, TAG_SYNC_DONE, MPI_COMM_WORLD));
        }
    }
    free(buf);
    double bw = rank == a ? (double)bytes / best : 0;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &bw, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return bw;
}

static void best_of(struct sync_fig *best, const struct sync_fig *f)
{
    if (f->s < best->s) *best = *f;
}

int worker_bench_sync(const struct libra_config *cfg, int rank, int world)
{
    struct plan p;
    plan_init(&p, world);
    char err[512];
    if (plan_build(&cfg->plan.fixed, world, 0, 0, "bench", &p, err, sizeof err))
        FATAL("--bench-sync: %s", err);
    if (p.train_tp != 1) FATAL("--bench-sync: the full broadcast needs plan.train_tp = 1");
    struct worker *w = NULL;
    struct comms c0;
    comms_init(&c0);
    if (rank > 0) {
        w = xcalloc(1, sizeof *w);
        worker_init(w, cfg, NULL, NULL, rank, world, 0);
        worker_apply_plan(w, &p);
    } else {
        comms_rebuild(&c0, NULL, &p, 0);
    }
    int *members = xmalloc((size_t)world * sizeof *members);
    int n_members = plan_members(&p, 0, members);
    struct sync_fig shard = {.s = INFINITY}, p2p = {.s = INFINITY}, full = {.s = INFINITY}, f;
    for (int rep = 0; rep < REPS; rep++) {
        shard_sync(w, rank, n_members, 2 * rep + 1, 1, &f);
        best_of(&shard, &f);
        shard_sync(w, rank, n_members, 2 * rep + 2, 0, &f);
        best_of(&p2p, &f);
        full_broadcast(w, rank, &f);
        best_of(&full, &f);
    }
    long long model = 0;
    if (rank > 0 && w) model = model_floats(w) * (long long)sizeof(float);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &model, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD));
    /* the link from the first sender to the first receiver, one message of the model's
     * float32 bytes, 256 MiB at most (enough to reach the link's bandwidth) */
    int n_send = 0;
    while (n_send < n_members && plan_in_root_replica(&p, members[n_send])) n_send++;
    long long msg = model < (256LL << 20) ? model : (256LL << 20);
    double link = n_send < n_members ? link_bw(rank, members[0], members[n_send], msg) : 0;
    if (rank == 0) {
        char tp[256];
        plan_format_tp(&p, tp, sizeof tp);
        printf("libra bench-sync: model %.1f MB, rollout TP [%s] (%d ranks) from %d training "
               "rank(s); best of %d\n", model / 1e6, tp, p.n_rollout_ranks, p.n_train, REPS);
        printf("  %-30s %12s %16s %20s %10s %10s\n", "method", "MB received", "MB by one rank",
               "MB sent by one rank", "ms", "set-up ms");
        const struct sync_fig *fig[3] = {&shard, &p2p, &full};
        static const char *name[3] = {"shard-matched, relayed", "shard-matched, point to point",
                                      "full broadcast"};
        for (int k = 0; k < 3; k++) {
            char sent[32];
            if (fig[k]->sent >= 0) snprintf(sent, sizeof sent, "%.1f", fig[k]->sent / 1e6);
            else snprintf(sent, sizeof sent, "(MPI's tree)");
            printf("  %-30s %12.1f %16.1f %20s %10.1f %10.1f\n", name[k], fig[k]->bytes / 1e6,
                   fig[k]->most / 1e6, sent, 1e3 * fig[k]->s, 1e3 * fig[k]->setup_s);
        }
        printf("  shard-matched / full broadcast: %.2f of the bytes, %.2f of the time\n",
               (double)shard.bytes / (double)full.bytes, shard.s / full.s);
        printf("  relayed / point to point: %.2f of the busiest sender's bytes, %.2f of the "
               "time\n", (double)shard.sent / (double)p2p.sent, shard.s / p2p.s);
        if (link > 0)
            printf("  link: rank %d -> rank %d over MPI, %.1f MB messages: %.2f GB/s (best of "
                   "%d); a sync's busiest rank (bytes in or out / time): relayed %.2f GB/s "
                   "(%.2f of the link), point to point %.2f GB/s (%.2f)\n",
                   members[0], members[n_send], msg / 1e6, link / 1e9, REPS,
                   shard.busiest / shard.s / 1e9, shard.busiest / shard.s / link,
                   p2p.busiest / p2p.s / 1e9, p2p.busiest / p2p.s / link);
        printf("  MB received by one rank of a TP-t instance (shard-matched / full broadcast):");
        for (int k = 0; k < 4; k++)
            if (full.by_tp[k] > 0)
                printf(" TP %d %.1f / %.1f;", 1 << k, shard.by_tp[k] / 1e6, full.by_tp[k] / 1e6);
        printf("\n");
    }
    if (w) {
        wr_before_plan(w, NULL);
        outbox_drain(&w->ob);
        worker_free(w);
        free(w);
    } else {
        for (int i = 0; i < p.n_instances; i++) { /* the instances' handbacks */
            char buf[4096];
            MPI_CHECK(MPI_Recv(buf, sizeof buf, MPI_BYTE, MPI_ANY_SOURCE, TAG_HANDBACK,
                               MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        }
    }
    free(members);
    comms_free(&c0);
    plan_free(&p);
    return 0;
}
