/*
 * The training role (worker_internal.h has the phases of a step): core replicas
 * (ROLE_TRAIN) and lent ones (ROLE_HYBRID), on any device.
 *
 * Gradients: the device leaves each rank's gradient shard and the step's figures in
 * its buffers; the core replicas sum them over the dp communicator (one TP index
 * across replicas); the lent replicas send theirs on the hybrid lane to their
 * partner (the root replica's rank of the same index), which adds them up and
 * broadcasts the hybrid sum over dp, so every core replica ends with the same total
 * without the core communicator ever changing. The partner then sends the total to
 * its lent replicas, and every replica -- core and lent -- takes the same optimizer
 * step: parameters stay identical everywhere, and a lent replica can go back to
 * rollout with current weights, or become a core replica with the state it holds.
 * The total a lent replica gets is the optimizer step's input, taken before the
 * partner's own step: the device's step works on the gradient buffer in place (the
 * clip scales it; at TP > 1 the shares of replicated tensors are summed into it), so
 * the buffer afterwards would be clipped (summed) twice on the lent replica.
 *
 * Checked, not assumed: the core replicas compare weight hashes after every step
 * (dp); a total carries the partner's hash after the step, a lent replica compares
 * its own after applying it, and says on its next gradient whether they matched; the
 * training root reports both as params_identical.
 *
 * Colocated plans (train.colocate): the rollout ranks are the replicas (training index:
 * plan_train_index), reducing over the dp communicator like core replicas; rank 0 sends
 * their step only while no turn is in flight, and the weight sync after it is local
 * (weight_sync.c), so each rank's rollout model takes the weights it trained.
 *
 * Normalisation is per token over the whole batch (the device divides by the batch's
 * tokens), so the learning rate does not change when a replica joins or leaves.
 *
 * Joins: a rank the plan lends (it was not lent before) receives a snapshot of its
 * partner's weights and optimizer state (device join_buffer), taken at the re-split
 * (a quiet point: no step in flight), then every step's total as the core replicas
 * finish it, applied in order -- so it catches up exactly while the core keeps
 * training. Once the snapshot is in (plus the device's emulated fetch time) it tells
 * rank 0 (TAG_HYBRID_READY), which gives it a share from the next step on. Before a
 * re-split every lent rank drains the totals of the steps done so far (plan.step),
 * so nothing is left in flight on the lane it leaves.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "libra/hash.h"
#include "libra/log.h"
#include "libra/mpi_wait.h"
#include "worker_internal.h"

#define TAG_HYBRID_TOTAL 201 /* on the lane: partner -> lent rank, a step's total */
#define TAG_HYBRID_JOIN 202  /* on the lane: partner -> joining rank, the snapshot */

/* Header of a lane gradient or total; followed by the floats and then the figures. */
struct lane_hdr {
    int32_t step;
    int32_t n;           /* floats that follow */
    double compute_s;
    uint64_t hash;       /* total: the partner's weights hash after the step */
    int32_t identical;   /* gradient: the lent replica's weights matched its partner's
                            after the last total it applied (or it joined since) */
    int32_t pad_;
};

static int my_role(const struct worker *w) { return w->plan.ranks[w->rank].role; }

/* The rank's place in its replica (the TP index its dp communicator reduces). */
static int replica_index(const struct worker *w)
{
    return plan_train_index(&w->plan, w->rank) % plan_replica_size(&w->plan);
}

/* Lane rank of world rank r (plan_members order), -1 if not a member. */
static int lane_rank(const struct worker *w, int r)
{
    int *m = xmalloc((size_t)w->world * sizeof *m);
    int n = plan_members(&w->plan, 1, m), k = -1;
    for (int i = 0; i < n && k < 0; i++)
        if (m[i] == r) k = i;
    free(m);
    return k;
}

/* The lent ranks whose partner is this root-replica rank, as lane ranks: out (world
 * entries); returns the count. */
static int my_hybrids(const struct worker *w, int *out)
{
    int n = 0, size = plan_replica_size(&w->plan), j = replica_index(w);
    for (int r = 1; r < w->world; r++)
        if (w->plan.ranks[r].role == ROLE_HYBRID && w->plan.ranks[r].index % size == j)
            out[n++] = lane_rank(w, r);
    return n;
}

/* ---- lane messages: header + gradient + figures ---- */

/* Packs a lane message into w->pack (a copy: the buffers may change after). */
static void lane_pack(struct worker *w, const struct lane_hdr *h, const float *g, size_t n,
                      const double *stats)
{
    struct wire_buf *b = &w->pack;
    wire_buf_reset(b);
    wire_buf_put(b, h, sizeof *h);
    wire_buf_put(b, g, n * sizeof *g);
    wire_buf_put(b, stats, DEV_STAT_COUNT * sizeof *stats);
}

/* Sends the message in w->pack. */
static void lane_post(struct worker *w, int dest, int tag)
{
    outbox_send(&w->ob, w->pack.data, w->pack.len, dest, tag, w->comms.hybrid_lane);
}

/* Receives one lane message of tag from source (MPI_ANY_SOURCE) if there is one
 * (block: wait for it); returns 1 with its parts pointing into w->tr.msg. */
static int lane_recv(struct worker *w, int source, int tag, int block, struct lane_hdr *h,
                     const float **g, const double **stats, size_t n_expect)
{
    int flag = 0;
    MPI_Status st;
    if (block)
        mpi_probe_backoff(source, tag, w->comms.hybrid_lane, &st);
    else
        MPI_CHECK(MPI_Iprobe(source, tag, w->comms.hybrid_lane, &flag, &st));
    if (!block && !flag) return 0;
    wire_recv(&w->tr.msg, &st, w->comms.hybrid_lane);
    size_t len = w->tr.msg.len, want = sizeof *h + n_expect * sizeof **g + DEV_STAT_COUNT * sizeof **stats;
    if (len != want) FATAL("malformed hybrid-lane message (tag %d, %zu bytes, expected %zu)", tag, len, want);
    memcpy(h, w->tr.msg.data, sizeof *h);
    *g = (const float *)(w->tr.msg.data + sizeof *h);
    *stats = (const double *)(w->tr.msg.data + sizeof *h + n_expect * sizeof **g);
    return 1;
}

static int take_total(struct worker *w, int block);

/* ---- the step ---- */

void wt_on_batch(struct worker *w, const void *msg, size_t len)
{
    int role = my_role(w);
    if (!plan_trains(&w->plan, w->rank))
        FATAL("training batch reached rank %d whose role is %s", w->rank, role_name(role));
    wt_settle(w);
    if (role == ROLE_HYBRID && w->join.active && !w->join.have_snapshot)
        FATAL("training batch reached rank %d before its join completed", w->rank);
    struct wire_train_batch h;
    if (len < sizeof h) FATAL("malformed training batch (%zu bytes) from rank 0", len);
    memcpy(&h, msg, sizeof h);
    struct wk_train *t = &w->tr;
    if (role == ROLE_HYBRID) /* its weights must be those of the step before (first) */
        while (w->ops->version(w->dev) < h.step - 1) take_total(w, 1);
    t->step = h.step;
    t->n_replicas = h.n_replicas;
    t->any_hybrids = h.hybrid_ranks > 0;
    t->hybrids_expected = 0;
    t->hybrids_identical = 1;
    if (role == ROLE_TRAIN && plan_in_root_replica(&w->plan, w->rank))
        t->hybrids_expected = h.hybrid_ranks / plan_replica_size(&w->plan);
    LOG_D("step %d: share of %d items, %d replicas, %d lent ranks, version %d", h.step,
          h.n_items, h.n_replicas, h.hybrid_ranks, w->ops->version(w->dev));
    t->t0 = wall_time();
    t->had_share = 1;
    double emulated = w->ops->train_compute(w->dev, msg, len);
    t->compute_s = wall_time() - t->t0 + emulated;
    t->until = t->t0 + t->compute_s;
    t->phase = WK_COMPUTE;
}

/* The core replicas' sum: the device's own (its GPUs; not when lent replicas add to
 * the total on the host), else MPI on the host buffer; the figures always by MPI. */
static void start_reduce(struct worker *w)
{
    struct wk_train *t = &w->tr;
    size_t n, ns;
    double *s = w->ops->stats_buffer(w->dev, &ns);
    t->req[0] = MPI_REQUEST_NULL;
    if (t->any_hybrids || !w->ops->grad_reduce || !w->ops->grad_reduce(w->dev, w->comms.dp)) {
        float *g = w->ops->grad_buffer(w->dev, &n);
        if (n > 0x7fffffff) FATAL("gradient of %zu floats exceeds one MPI count", n);
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, g, (int)n, MPI_FLOAT, MPI_SUM, w->comms.dp,
                                 &t->req[0]));
    }
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, s, (int)ns, MPI_DOUBLE, MPI_SUM, w->comms.dp, &t->req[1]));
    t->phase = WK_REDUCE;
}

static void after_compute(struct worker *w)
{
    struct wk_train *t = &w->tr;
    size_t n, ns;
    double *s = w->ops->stats_buffer(w->dev, &ns);
    s[DEV_STAT_BUSY_S] = t->compute_s;
    /* this rank's own phases, before the reduction sums them over replicas */
    t->fwd_s = fmax(0.0, fmin(s[DEV_STAT_FWD_S], t->compute_s));
    t->bwd_s = fmax(0.0, fmin(s[DEV_STAT_BWD_S], t->compute_s - t->fwd_s));
    if (my_role(w) == ROLE_HYBRID) {
        /* the partner: the root replica's rank of the same index (lane rank = index) */
        float *g = w->ops->grad_buffer(w->dev, &n);
        struct lane_hdr h = {.step = t->step, .n = (int32_t)n, .compute_s = t->compute_s,
                             .identical = t->lent_identical};
        lane_pack(w, &h, g, n, s);
        lane_post(w, replica_index(w), TAG_HYBRID_GRAD);
        t->phase = WK_TOTAL;
        return;
    }
    start_reduce(w);
}

/* This rank's phases of the step it had a share of, to rank 0 (its trace spans). */
static void send_times(struct worker *w, double t_apply)
{
    struct wk_train *t = &w->tr;
    int size = plan_replica_size(&w->plan);
    struct wire_train_times m = {.step = t->step,
                                 .rank = w->rank,
                                 .hybrid = my_role(w) == ROLE_HYBRID,
                                 .replica = plan_train_index(&w->plan, w->rank) / size,
                                 .fwd_s = t->fwd_s,
                                 .bwd_s = t->bwd_s,
                                 .compute_s = t->compute_s,
                                 .reduce_s = fmax(0.0, t_apply - t->t0 - t->compute_s),
                                 .opt_s = t->opt_s,
                                 .age_s = wall_time() - t->t0};
    outbox_send(&w->ob, &m, sizeof m, 0, TAG_TRAIN_TIMES, MPI_COMM_WORLD);
    t->had_share = 0;
}

/* Every replica: the total is in the device's buffers. */
static void apply_step(struct worker *w)
{
    struct wk_train *t = &w->tr;
    struct wire_train_done d;
    memset(&d, 0, sizeof d);
    size_t n, ns;
    double *s = w->ops->stats_buffer(w->dev, &ns);
    /* The root replica's lent replicas take the step from what this one takes it from:
     * the total is packed now, before train_apply changes the buffer in place. */
    int *hy = NULL, nh = 0;
    if (my_role(w) == ROLE_TRAIN && plan_in_root_replica(&w->plan, w->rank)) {
        hy = xmalloc((size_t)w->world * sizeof *hy);
        nh = my_hybrids(w, hy);
        if (nh > 0) {
            float *g = w->ops->grad_buffer(w->dev, &n);
            struct lane_hdr lh = {.step = t->step, .n = (int32_t)n};
            lane_pack(w, &lh, g, n, s);
        }
    }
    double t_apply = wall_time();
    w->ops->train_apply(w->dev, t->step, &d);
    t->opt_s = wall_time() - t_apply;
    t->phase = WK_IDLE;
    /* a lent rank applying the total of a step it had no share of reports nothing */
    if (t->had_share) send_times(w, t_apply);
    if (my_role(w) == ROLE_HYBRID) return;

    /* "identical parameters everywhere" is checked, not assumed (core replicas) */
    uint64_t h = w->ops->weights_hash(w->dev), lo, hi;
    MPI_CHECK(MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, w->comms.dp));
    MPI_CHECK(MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, w->comms.dp));
    if (lo != hi)
        LOG_E("step %d: the training replicas' parameters differ (hash %016llx here)", t->step,
              (unsigned long long)h);
    if (nh > 0) { /* the total to the lent replicas, with the weights they must reach */
        memcpy(w->pack.data + offsetof(struct lane_hdr, hash), &h, sizeof h);
        for (int i = 0; i < nh; i++) lane_post(w, hy[i], TAG_HYBRID_TOTAL);
    }
    free(hy);
    if (!t->hybrids_identical)
        LOG_E("step %d: a lent replica's parameters differed from this rank's when it computed "
              "its share", t->step);
    if (plan_train_root(&w->plan) != w->rank) return;
    d.step = t->step;
    d.n_replicas = t->n_replicas;
    d.compute_s = t->compute_s;
    d.comm_s = fmax(0.0, t_apply - t->t0 - t->compute_s); /* reduction + lent gradients */
    d.fwd_s = t->fwd_s;
    d.bwd_s = t->bwd_s;
    d.opt_s = t->opt_s;
    d.busy_rank_s = s[DEV_STAT_BUSY_S] * plan_replica_size(&w->plan);
    d.params_identical = lo == hi && t->hybrids_identical;
    outbox_send(&w->ob, &d, sizeof d, 0, TAG_TRAIN_DONE, MPI_COMM_WORLD);
}

/* Root replica: adds the lent gradients that have arrived into hsum; block: all of
 * them. Returns how many arrived. */
static int collect_hybrids(struct worker *w, int block)
{
    struct wk_train *t = &w->tr;
    int got = 0;
    struct lane_hdr h;
    const float *hg;
    const double *hs;
    while (t->hybrids_left > 0 &&
           lane_recv(w, MPI_ANY_SOURCE, TAG_HYBRID_GRAD, block, &h, &hg, &hs, t->n_hsum)) {
        if (h.step != t->step)
            FATAL("hybrid gradient of step %d arrived during step %d", h.step, t->step);
        for (size_t i = 0; i < t->n_hsum; i++) t->hsum[i] += hg[i];
        for (int i = 0; i < DEV_STAT_COUNT; i++) t->hstats[i] += hs[i];
        t->hybrids_identical &= h.identical != 0;
        t->hybrids_left--;
        got++;
    }
    return got;
}

/* hsum (zeroed) sized for the device's gradient. */
static void reset_hsum(struct worker *w)
{
    struct wk_train *t = &w->tr;
    size_t n;
    (void)w->ops->grad_buffer(w->dev, &n);
    if (t->n_hsum != n) {
        free(t->hsum);
        t->hsum = xmalloc(n * sizeof *t->hsum);
        t->n_hsum = n;
    }
    memset(t->hsum, 0, n * sizeof *t->hsum);
    memset(t->hstats, 0, sizeof t->hstats);
}

/* The hybrid sum reaches every core replica of this TP index (dp root: the root
 * replica's rank), which adds it to its total. */
static void start_hsum(struct worker *w)
{
    struct wk_train *t = &w->tr;
    MPI_CHECK(MPI_Ibcast(t->hsum, (int)t->n_hsum, MPI_FLOAT, 0, w->comms.dp, &t->req[0]));
    MPI_CHECK(MPI_Ibcast(t->hstats, DEV_STAT_COUNT, MPI_DOUBLE, 0, w->comms.dp, &t->req[1]));
    t->phase = WK_HSUM;
}

static void add_hsum(struct worker *w)
{
    struct wk_train *t = &w->tr;
    size_t n, ns;
    float *g = w->ops->grad_buffer(w->dev, &n);
    double *s = w->ops->stats_buffer(w->dev, &ns);
    for (size_t i = 0; i < n; i++) g[i] += t->hsum[i];
    for (int i = 0; i < DEV_STAT_COUNT; i++) s[i] += t->hstats[i];
}

/* After the core reduction: the lent gradients (if any), then the optimizer step. */
static void after_reduce(struct worker *w)
{
    struct wk_train *t = &w->tr;
    if (!t->any_hybrids) {
        apply_step(w);
        return;
    }
    reset_hsum(w);
    if (plan_in_root_replica(&w->plan, w->rank)) {
        t->hybrids_left = t->hybrids_expected;
        t->phase = WK_HYBRIDS;
        collect_hybrids(w, 0);
        if (t->hybrids_left == 0) start_hsum(w);
        return;
    }
    start_hsum(w);
}

/* A lent replica: its partner's total arrived (into the device's buffers). */
static int take_total(struct worker *w, int block)
{
    struct wk_train *t = &w->tr;
    size_t n, ns;
    float *g = w->ops->grad_buffer(w->dev, &n);
    double *s = w->ops->stats_buffer(w->dev, &ns);
    struct lane_hdr h;
    const float *hg;
    const double *hs;
    if (!lane_recv(w, MPI_ANY_SOURCE, TAG_HYBRID_TOTAL, block, &h, &hg, &hs, n)) return 0;
    memcpy(g, hg, n * sizeof *g);
    memcpy(s, hs, DEV_STAT_COUNT * sizeof *s);
    if (t->phase == WK_TOTAL && h.step != t->step)
        FATAL("the total of step %d arrived while rank %d waits for step %d", h.step, w->rank,
              t->step);
    t->step = h.step;
    t->phase = WK_TOTAL;
    apply_step(w);
    uint64_t mine = w->ops->weights_hash(w->dev);
    t->lent_identical = mine == h.hash;
    if (!t->lent_identical)
        LOG_E("step %d: this lent replica's parameters differ from its partner's (hash "
              "%016llx here, %016llx there)", h.step, (unsigned long long)mine,
              (unsigned long long)h.hash);
    return 1;
}

int wt_progress(struct worker *w)
{
    struct wk_train *t = &w->tr;
    int done = 0;
    switch (t->phase) {
    case WK_COMPUTE:
        if (wall_time() < t->until) return 0;
        after_compute(w);
        return 1;
    case WK_REDUCE:
        MPI_CHECK(MPI_Testall(2, t->req, &done, MPI_STATUSES_IGNORE));
        if (!done) return 0;
        t->comm_s = wall_time() - t->t0 - t->compute_s;
        t->until = wall_time() + w->ops->train_reduce_extra_s(w->dev, t->n_replicas);
        t->phase = WK_DELAY;
        return 1;
    case WK_DELAY:
        if (wall_time() < t->until) return 0;
        t->comm_s = wall_time() - t->t0 - t->compute_s;
        after_reduce(w);
        return 1;
    case WK_HYBRIDS: {
        int got = collect_hybrids(w, 0);
        if (t->hybrids_left == 0) start_hsum(w);
        return got > 0;
    }
    case WK_HSUM:
        MPI_CHECK(MPI_Testall(2, t->req, &done, MPI_STATUSES_IGNORE));
        if (!done) return 0;
        add_hsum(w);
        apply_step(w);
        return 1;
    case WK_TOTAL: return take_total(w, 0);
    default:
        /* an idle lent rank applies the totals of steps it had no share of */
        if (my_role(w) == ROLE_HYBRID && (!w->join.active || w->join.have_snapshot))
            return take_total(w, 0);
        return 0;
    }
}

double wt_next_wake(const struct worker *w)
{
    double wake = INFINITY;
    if (w->tr.phase == WK_COMPUTE || w->tr.phase == WK_DELAY) wake = w->tr.until;
    if (w->join.active && w->join.have_snapshot) wake = fmin(wake, w->join.ready_at);
    return wake;
}

void wt_settle(struct worker *w)
{
    struct wk_train *t = &w->tr;
    /* Rank 0 sends a plan or the next batch only after TRAIN_DONE, so the root has
     * finished: the rest of the step on this rank cannot wait on anything that is
     * not already under way. */
    while (t->phase != WK_IDLE) {
        switch (t->phase) {
        case WK_COMPUTE:
        case WK_DELAY: sleep_seconds(t->until - wall_time()); break;
        case WK_REDUCE:
        case WK_HSUM:
            for (int i = 0; i < 2; i++) mpi_wait_backoff(&t->req[i], NULL);
            break;
        case WK_HYBRIDS: collect_hybrids(w, 1); break;
        case WK_TOTAL: take_total(w, 1); continue;
        default: break;
        }
        if (t->phase != WK_TOTAL) wt_progress(w);
    }
}

/* ---- joins ---- */

struct join_hdr {
    int32_t version;
    int32_t epoch;
};

static void join_start(struct worker *w)
{
    struct wk_join *j = &w->join;
    size_t n;
    float *buf = w->ops->join_buffer(w->dev, 0, &n);
    int partner = replica_index(w); /* lane rank of the root replica's rank of that index */
    j->active = 1;
    j->have_snapshot = 0;
    j->epoch = w->plan.epoch;
    j->n = n;
    MPI_CHECK(MPI_Recv(&j->version, 1, MPI_INT32_T, partner, TAG_HYBRID_JOIN,
                       w->comms.hybrid_lane, MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Irecv(buf, (int)n, MPI_FLOAT, partner, TAG_HYBRID_JOIN, w->comms.hybrid_lane,
                        &j->req));
    int dp = w->plan.n_train / plan_replica_size(&w->plan);
    j->ready_at = wall_time() + w->ops->join_extra_s(w->dev, dp);
    LOG_D("join of epoch %d: fetching %zu floats of version %d from lane rank %d", j->epoch, n,
          j->version, partner);
}

/* Partner side: a snapshot of the weights and optimizer state for each rank the
 * plan newly lends to it (it was not lent in old). */
static void join_serve(struct worker *w, const struct plan *old)
{
    if (!plan_in_root_replica(&w->plan, w->rank) || my_role(w) != ROLE_TRAIN) return;
    int *hy = xmalloc((size_t)w->world * sizeof *hy);
    int size = plan_replica_size(&w->plan), j = replica_index(w), n = 0;
    for (int r = 1; r < w->world; r++)
        if (w->plan.ranks[r].role == ROLE_HYBRID && old->ranks[r].role != ROLE_HYBRID &&
            w->plan.ranks[r].index % size == j)
            hy[n++] = lane_rank(w, r);
    if (n > 0) {
        size_t len;
        float *buf = w->ops->join_buffer(w->dev, 1, &len);
        int32_t version = w->ops->version(w->dev);
        LOG_D("join: serving %d lent rank(s) %zu floats of version %d", n, len, version);
        for (int i = 0; i < n; i++) {
            outbox_send(&w->ob, &version, sizeof version, hy[i], TAG_HYBRID_JOIN,
                        w->comms.hybrid_lane);
            outbox_send(&w->ob, buf, len * sizeof *buf, hy[i], TAG_HYBRID_JOIN,
                        w->comms.hybrid_lane);
        }
    }
    free(hy);
}

static void join_finish_snapshot(struct worker *w)
{
    LOG_D("join of epoch %d: snapshot of version %d in", w->join.epoch, w->join.version);
    w->ops->join_restore(w->dev, w->join.version);
    w->join.have_snapshot = 1;
    w->tr.lent_identical = 1; /* its partner's state, as it was */
}

int wt_join_progress(struct worker *w)
{
    struct wk_join *j = &w->join;
    if (!j->active) return 0;
    if (!j->have_snapshot) {
        int done = 0;
        MPI_CHECK(MPI_Test(&j->req, &done, MPI_STATUS_IGNORE));
        if (!done) return 0;
        join_finish_snapshot(w);
    }
    if (wall_time() < j->ready_at) return 0;
    LOG_D("join of epoch %d: ready at version %d", j->epoch, w->ops->version(w->dev));
    struct wire_hybrid_ready r = {j->epoch, w->rank};
    outbox_send(&w->ob, &r, sizeof r, 0, TAG_HYBRID_READY, MPI_COMM_WORLD);
    j->active = 0;
    return 1;
}

/* ---- core training ranks added by a plan ---- */

/* Rank r holds current training state under plan p: a core or a lent replica (a lent
 * one has caught up in wt_before_plan). */
static int holds_state(const struct plan *p, int r)
{
    return p->ranks[r].role == ROLE_TRAIN || p->ranks[r].role == ROLE_HYBRID;
}

/* The old plan's rank that hands its state to new core training rank r: the old root
 * replica's rank of r's TP index (modulo the old replica size, when the shape
 * changes: a device whose state depends on the shard refuses a state of another size
 * in handover_after). */
static int state_source(const struct plan *old, const struct plan *next, int r)
{
    int j = next->ranks[r].index % plan_replica_size(next) % plan_replica_size(old);
    for (int q = 1; q < old->world; q++)
        if (plan_in_root_replica(old, q) && old->ranks[q].index == j) return q;
    FATAL("no rank of the old root replica holds TP index %d", j);
}

/* A rank the next plan makes a core training rank without current state receives it
 * (weights + optimizer, device join_buffer) from the old root replica, point to point
 * on the world communicator, while both apply the plan -- so the core's optimizer
 * state carries over exactly when the planner grows the training group. The receiver
 * installs it after the re-split (its shard may change with its place). */
/* The state (version, then buf) for rank r, which posts handover_recv while applying
 * the same plan (blocking). */
static void handover_send(int r, int32_t version, const float *buf, size_t n)
{
    if (n > 0x7fffffff) FATAL("training state of %zu floats exceeds one MPI count", n);
    MPI_CHECK(MPI_Send(&version, 1, MPI_INT32_T, r, TAG_TRAIN_STATE, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Send(buf, (int)n, MPI_FLOAT, r, TAG_TRAIN_STATE, MPI_COMM_WORLD));
}

/* This rank's state from src, kept for handover_after. */
static void handover_recv(struct worker *w, int src)
{
    MPI_Status st;
    int count = 0;
    MPI_CHECK(MPI_Recv(&w->tr.handover_version, 1, MPI_INT32_T, src, TAG_TRAIN_STATE,
                       MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    mpi_probe_backoff(src, TAG_TRAIN_STATE, MPI_COMM_WORLD, &st);
    MPI_CHECK(MPI_Get_count(&st, MPI_FLOAT, &count));
    w->tr.handover = xmalloc((size_t)(count > 0 ? count : 1) * sizeof *w->tr.handover);
    w->tr.n_handover = (size_t)count;
    MPI_CHECK(MPI_Recv(w->tr.handover, count, MPI_FLOAT, src, TAG_TRAIN_STATE, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE));
}

/* Training ranks of another TP degree (a device whose state is the shard's: state_whole):
 * the old root replica gathers the whole training state at its rank 0, which sends each
 * rank of the next plan's training group the state cut to its new shard; every one of
 * them installs it after the re-split (handover_after), its old shard's state
 * included. */
static void handover_reshaped(struct worker *w, const struct plan *next)
{
    const struct plan *old = &w->plan;
    int root = plan_train_root(old), size = plan_replica_size(next);
    int t = next->train_tp > 0 ? next->train_tp : 1;
    if (plan_in_root_replica(old, w->rank)) w->ops->state_whole(w->dev, 1);
    int32_t version = w->ops->version(w->dev);
    for (int r = 1; r < w->world; r++) {
        if (next->ranks[r].role != ROLE_TRAIN) continue;
        if (w->rank == root) {
            size_t n;
            float *buf = w->ops->state_cut(w->dev, t, next->ranks[r].index % size, &n);
            if (r != root) {
                handover_send(r, version, buf, n);
                continue;
            }
            w->tr.handover = xmalloc(n * sizeof *w->tr.handover); /* its own new shard */
            memcpy(w->tr.handover, buf, n * sizeof *buf);
            w->tr.n_handover = n;
            w->tr.handover_version = version;
        } else if (w->rank == r) {
            handover_recv(w, root);
        }
    }
    if (w->rank == root) w->ops->state_whole(w->dev, 0);
}

static void handover_before(struct worker *w, const struct plan *next)
{
    const struct plan *old = &w->plan;
    if (plan_train_root(old) < 0) return;
    int t_old = old->train_tp > 0 ? old->train_tp : 1, t_new = next->train_tp > 0 ? next->train_tp : 1;
    if (w->ops->state_whole && plan_train_root(next) >= 0 && t_old != t_new && !old->colocated &&
        !next->colocated) {
        handover_reshaped(w, next);
        return;
    }
    for (int r = 1; r < w->world; r++) {
        if (next->ranks[r].role != ROLE_TRAIN || holds_state(old, r)) continue;
        int src = state_source(old, next, r);
        if (w->rank == src) {
            size_t n;
            float *buf = w->ops->join_buffer(w->dev, 1, &n);
            handover_send(r, w->ops->version(w->dev), buf, n);
        } else if (w->rank == r) {
            handover_recv(w, src);
        }
    }
}

static void handover_after(struct worker *w)
{
    struct wk_train *t = &w->tr;
    if (!t->handover) return;
    size_t n;
    float *buf = w->ops->join_buffer(w->dev, 0, &n);
    if (n != t->n_handover)
        FATAL("the handed-over training state has %zu floats, this rank's shard %zu: a plan "
              "that adds training ranks may not change the training replicas' TP degree on "
              "this device", t->n_handover, n);
    memcpy(buf, t->handover, n * sizeof *buf);
    w->ops->join_restore(w->dev, t->handover_version);
    free(t->handover);
    t->handover = NULL;
    LOG_D("took over the training state of version %d", t->handover_version);
}

/* A lent rank takes in its snapshot, if still in flight, and the totals of every
 * step done so far (steps: their partner sent them on this lane): nothing of its
 * partner's is left unreceived -- a large send the lent rank never takes would hold
 * the partner in its outbox forever. */
static void lent_catch_up(struct worker *w, int steps)
{
    if (my_role(w) != ROLE_HYBRID) return;
    struct wk_join *j = &w->join;
    if (j->active && !j->have_snapshot) {
        mpi_wait_backoff(&j->req, NULL);
        join_finish_snapshot(w);
    }
    while (w->ops->version(w->dev) < steps) take_total(w, 1);
}

void wt_before_plan(struct worker *w, const struct plan *next)
{
    handover_before(w, next);
    if (my_role(w) != ROLE_HYBRID) return;
    lent_catch_up(w, next->step);
    if (next->ranks[w->rank].role != ROLE_HYBRID) w->join.active = 0; /* a cancelled join */
}

void wt_before_shutdown(struct worker *w, int steps)
{
    wt_settle(w);
    lent_catch_up(w, steps);
    w->join.active = 0;
}

void wt_after_plan(struct worker *w, const struct plan *old)
{
    handover_after(w);
    if (my_role(w) == ROLE_HYBRID && old->ranks[w->rank].role != ROLE_HYBRID) join_start(w);
    if (my_role(w) == ROLE_TRAIN) join_serve(w, old);
}

void wt_free(struct worker *w)
{
    free(w->tr.handover);
    free(w->tr.hsum);
    wire_buf_free(&w->tr.msg);
}
