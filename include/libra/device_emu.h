/*
 * The emulated device's pieces that libra-sim shares with it (src/device/emu/): a
 * rollout instance is the event engine of include/libra/engine.h; a training share
 * costs what the cost model says for this rank's tokens; the weights are a small
 * vector (EMU_PARAMS floats) so that syncs, gradient reductions, the hybrid lane and
 * joins move real data with the real collectives.
 *
 * Loss normalisation is per token over the whole batch: each replica contributes
 * sum_{its items} tokens * g(item) / global_tokens, so the reduced gradient is the
 * same whatever the split and however many hybrids join -- the correct form of the
 * reference's 1/(DP + H) weighting (reference/planner.md §6.10). Every rank of a
 * replica holds its share's whole (emulated) gradient: the data-parallel reduction
 * runs over the ranks of one TP index, as a sharded gradient would.
 */
#ifndef LIBRA_DEVICE_EMU_H
#define LIBRA_DEVICE_EMU_H

#include <stddef.h>
#include <stdint.h>

#include "libra/cost.h"
#include "libra/device.h"
#include "libra/engine.h"
#include "libra/plan.h"
#include "libra/wire.h"

#define EMU_PARAMS 64
#define EMU_LR 1e-2f

extern const struct device_ops device_emu;

/* Packs n engine results as one result batch from leader (the simulator's too): the
 * engine's busy time since the last report (wall seconds: / time_scale) and its queue
 * state go with the first result, -1 with the others. */
void emu_pack_results(struct wire_buf *pack, int leader, struct engine *e,
                      struct wire_turn_result *res, int n, double time_scale);

/* One rank's training share: header, its token figures, and its part of the
 * emulated gradient added into grad (EMU_PARAMS); 0, or -1 if malformed. */
struct emu_share {
    int n_items;
    double tokens, sum_sq, max_len;
};
int emu_read_share(const void *msg, size_t len, uint64_t seed, struct wire_train_batch *h,
                   struct emu_share *s, float *grad);
/* The share's compute + TP + pipeline time on one replica of p's training shape, and
 * each GPU's gradient reduction over n_replicas, in emulated seconds. */
double emu_share_compute_s(const struct cost_model *cm, const struct plan *p,
                           const struct emu_share *s);
double emu_reduce_s(const struct cost_model *cm, const struct plan *p, int n_replicas);
/* Every rank's starting weights (keyed by the seed only). */
void emu_initial_params(uint64_t seed, float *params);

#endif
