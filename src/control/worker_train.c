/*
 * A worker's training role (train replica or lent hybrid replica), emulated: the
 * step's compute time comes from the cost model for this rank's token share; the
 * gradient is a real vector reduced over the training communicator (MPI) plus the
 * hybrid lane, so the data path and its synchronisation are the real ones.
 *
 * Loss normalisation is per token over the whole batch: each replica contributes
 * sum_{its items} tokens * g(item) / global_tokens, so the reduced gradient is the
 * same whatever the split and however many hybrids join -- the correct form of the
 * reference's 1/(DP + H) weighting (reference/planner.md §6.10).
 */
#include <math.h>
#include <string.h>

#include "libra/log.h"
#include "libra/mpi_wait.h"
#include "libra/plan_cost.h"
#include "libra/rng.h"
#include "libra/worker.h"

/* The emulated per-trajectory gradient direction, keyed by (seed, trajectory). */
static void item_gradient(uint64_t seed, int64_t traj_id, double weight, double *g)
{
    struct rng r;
    rng_init(&r, seed, (uint64_t)traj_id, 0x6772616400ULL, 0);
    for (int i = 0; i < WORKER_EMU_PARAMS; i++) g[i] += weight * (2.0 * rng_uniform(&r) - 1.0);
}

int wt_read_share(const void *msg, size_t len, uint64_t seed, struct wire_train_batch *h,
                  struct wt_share *s, double *grad)
{
    struct wire_reader rd;
    if (wire_train_batch_read(&rd, msg, len, h)) return -1;
    memset(s, 0, sizeof *s);
    int size = h->replica_size > 0 ? h->replica_size : 1;
    struct wire_train_item it;
    const int32_t *ids;
    const float *logp;
    const uint8_t *mask;
    int got;
    while ((got = wire_next_train_item(&rd, &it, &ids, &logp, &mask)) == 1) {
        s->n_items++;
        s->tokens += it.tokens;
        s->sum_sq += (double)it.tokens * it.tokens;
        if (it.tokens > s->max_len) s->max_len = it.tokens;
        /* each of the replica's ranks holds 1/size of its share's gradient */
        item_gradient(seed, it.traj_id, (double)it.tokens / (double)h->global_tokens / size, grad);
    }
    return got < 0 ? -1 : 0;
}

double wt_share_compute_s(const struct cost_model *cm, const struct plan *p,
                          const struct wt_share *s)
{
    struct train_shape shape = {p->train_tp, p->train_pp, 1, p->micro};
    struct train_est est;
    pc_train_step(cm, &shape, 0, s->n_items, s->tokens, s->sum_sq, s->max_len, &est);
    return est.compute_s + est.tp_comm_s + est.pp_bubble_s;
}

double wt_reduce_s(const struct cost_model *cm, const struct plan *p, int n_replicas)
{
    return cost_grad_allreduce_s(cm, n_replicas) / plan_replica_size(p);
}

void wt_on_batch(struct worker *w, const void *msg, size_t len)
{
    struct wire_train_batch h;
    int role = w->plan.ranks[w->rank].role;
    if (role != ROLE_TRAIN && role != ROLE_HYBRID)
        FATAL("training batch reached rank %d whose role is %s", w->rank, role_name(role));
    wt_settle(w);
    struct worker_train *t = &w->tr;
    memset(t->grad, 0, sizeof t->grad);
    struct wt_share share;
    if (wt_read_share(msg, len, w->cfg->run.seed, &h, &share, t->grad))
        FATAL("malformed training batch (%zu bytes) from rank 0", len);
    t->step = h.step;
    t->n_replicas = h.n_replicas;
    t->hybrid_ranks = h.hybrid_ranks;
    /* this replica's share on its tp x pp ranks: compute + TP + pipeline, no DP */
    t->compute_s = wt_share_compute_s(w->cm, &w->plan, &share) / w->time_scale;
    t->grad[WORKER_EMU_PARAMS] = t->compute_s;
    t->until = wall_time() + t->compute_s;
    t->phase = TP_COMPUTE;
}

static int is_root(const struct worker *w) { return plan_train_root(&w->plan) == w->rank; }

static void finish_step(struct worker *w)
{
    struct worker_train *t = &w->tr;
    double norm = 0;
    for (int i = 0; i < WORKER_EMU_PARAMS; i++) {
        w->params[i] -= WORKER_EMU_LR * t->sum[i];
        norm += t->sum[i] * t->sum[i];
    }
    w->version = t->step;
    struct wire_train_done d = {.step = t->step,
                                .n_replicas = t->n_replicas,
                                .compute_s = t->compute_s,
                                .comm_s = t->comm_s,
                                .busy_rank_s = t->sum[WORKER_EMU_PARAMS],
                                .grad_norm = sqrt(norm)};
    outbox_send(&w->ob, &d, sizeof d, 0, TAG_TRAIN_DONE, MPI_COMM_WORLD);
    t->phase = TP_IDLE;
}

/* Root: adds the hybrid gradients of this step as they arrive on the lane. */
static int collect_hybrids(struct worker *w)
{
    struct worker_train *t = &w->tr;
    int n = 0;
    while (t->hybrids_left > 0) {
        int flag = 0;
        MPI_Status st;
        MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, TAG_HYBRID_GRAD, w->comms.hybrid_lane, &flag, &st));
        if (!flag) break;
        struct {
            struct wire_hybrid_grad h;
            double g[WORKER_EMU_PARAMS + 1];
        } m;
        int len = 0;
        MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &len));
        if ((size_t)len != sizeof m) FATAL("malformed hybrid gradient (%d bytes)", len);
        MPI_CHECK(MPI_Recv(&m, len, MPI_BYTE, st.MPI_SOURCE, TAG_HYBRID_GRAD, w->comms.hybrid_lane,
                           MPI_STATUS_IGNORE));
        if (m.h.step != t->step)
            FATAL("hybrid gradient of step %d arrived during step %d", m.h.step, t->step);
        for (int i = 0; i <= WORKER_EMU_PARAMS; i++) t->sum[i] += m.g[i];
        t->hybrids_left--;
        n++;
    }
    if (t->hybrids_left == 0) finish_step(w);
    return n + (t->phase == TP_IDLE);
}

static void after_compute(struct worker *w)
{
    struct worker_train *t = &w->tr;
    if (w->plan.ranks[w->rank].role == ROLE_HYBRID) {
        struct {
            struct wire_hybrid_grad h;
            double g[WORKER_EMU_PARAMS + 1];
        } m;
        m.h = (struct wire_hybrid_grad){t->step, WORKER_EMU_PARAMS + 1, t->compute_s};
        memcpy(m.g, t->grad, sizeof m.g);
        outbox_send(&w->ob, &m, sizeof m, 0, TAG_HYBRID_GRAD, w->comms.hybrid_lane);
        t->phase = TP_IDLE;
        return;
    }
    MPI_CHECK(MPI_Iallreduce(t->grad, t->sum, WORKER_EMU_PARAMS + 1, MPI_DOUBLE, MPI_SUM,
                             w->comms.role, &t->req));
    t->phase = TP_REDUCE;
}

int wt_progress(struct worker *w)
{
    struct worker_train *t = &w->tr;
    switch (t->phase) {
    case TP_COMPUTE:
        if (wall_time() < t->until) return 0;
        after_compute(w);
        return 1;
    case TP_REDUCE: {
        int done = 0;
        MPI_CHECK(MPI_Test(&t->req, &done, MPI_STATUS_IGNORE));
        if (!done) return 0;
        /* each GPU reduces its 1 / (tp pp) shard of the gradient over all replicas */
        t->comm_s = wt_reduce_s(w->cm, &w->plan, t->n_replicas) / w->time_scale;
        t->until = wall_time() + t->comm_s;
        t->phase = TP_COMM_DELAY;
        return 1;
    }
    case TP_COMM_DELAY:
        if (wall_time() < t->until) return 0;
        if (!is_root(w)) {
            t->phase = TP_IDLE;
            return 1;
        }
        t->hybrids_left = t->hybrid_ranks;
        t->phase = TP_HYBRIDS;
        return collect_hybrids(w) + 1;
    case TP_HYBRIDS: return collect_hybrids(w);
    default: return 0;
    }
}

void wt_settle(struct worker *w)
{
    struct worker_train *t = &w->tr;
    if (t->phase == TP_IDLE) return;
    if (w->real) {
        wtc_settle(w);
        return;
    }
    /* Rank 0 sends a plan or the next batch only after TRAIN_DONE, so the root has
     * finished and every replica has entered the reduction: completing it here
     * cannot block for long. Anything else is a protocol error. */
    if (is_root(w) || (t->phase != TP_REDUCE && t->phase != TP_COMM_DELAY))
        FATAL("rank 0 moved on while step %d is in phase %d on rank %d", t->step, t->phase,
              w->rank);
    if (t->phase == TP_REDUCE) mpi_wait_backoff(&t->req, NULL);
    t->phase = TP_IDLE;
}
