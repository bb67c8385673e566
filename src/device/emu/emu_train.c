/*
 * The emulated device's training share, result packing and starting weights
 * (include/libra/device_emu.h): the pieces libra-sim runs too, so the simulator and
 * the MPI job charge the same times for the same work.
 */
#include <string.h>

#include "libra/device_emu.h"
#include "libra/plan_cost.h"
#include "libra/rng.h"

void emu_pack_results(struct wire_buf *pack, int leader, struct engine *e,
                      struct wire_turn_result *res, int n, double time_scale)
{
    int queued, running;
    double kv_frac;
    engine_queue_stats(e, &queued, &running, &kv_frac);
    wire_batch_begin(pack, leader);
    for (int i = 0; i < n; i++) {
        struct wire_turn_result *r = &res[i];
        r->busy_rank_s = i == 0 ? engine_take_busy(e) / time_scale : 0;
        r->inst_queued = i == 0 ? queued : -1;
        r->inst_running = i == 0 ? running : -1;
        r->inst_kv_frac = i == 0 ? kv_frac : -1.0;
        wire_batch_add_turn_result(pack, r, NULL, NULL, NULL, NULL);
    }
}

/* The emulated per-trajectory gradient direction, keyed by (seed, trajectory). */
static void item_gradient(uint64_t seed, int64_t traj_id, double weight, float *g)
{
    struct rng r;
    rng_init(&r, seed, (uint64_t)traj_id, 0x6772616400ULL, 0);
    for (int i = 0; i < EMU_PARAMS; i++) g[i] += (float)(weight * (2.0 * rng_uniform(&r) - 1.0));
}

int emu_read_share(const void *msg, size_t len, uint64_t seed, struct wire_train_batch *h,
                   struct emu_share *s, float *grad)
{
    struct wire_reader rd;
    if (wire_train_batch_read(&rd, msg, len, h)) return -1;
    memset(s, 0, sizeof *s);
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
        if (grad) item_gradient(seed, it.traj_id, (double)it.tokens / (double)h->global_tokens, grad);
    }
    return got < 0 ? -1 : 0;
}

double emu_share_compute_s(const struct cost_model *cm, const struct plan *p,
                           const struct emu_share *s)
{
    struct train_shape shape = {p->train_tp, p->train_pp, 1, p->micro};
    struct train_est est;
    pc_train_step(cm, &shape, 0, s->n_items, s->tokens, s->sum_sq, s->max_len, &est);
    return est.compute_s + est.tp_comm_s + est.pp_bubble_s;
}

double emu_reduce_s(const struct cost_model *cm, const struct plan *p, int n_replicas)
{
    return cost_grad_allreduce_s(cm, n_replicas) / plan_replica_size(p);
}

void emu_initial_params(uint64_t seed, float *params)
{
    struct rng r;
    rng_init(&r, seed, 0, 0x7061726dULL, 0);
    for (int i = 0; i < EMU_PARAMS; i++) params[i] = (float)rng_normal(&r);
}
