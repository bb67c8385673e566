/*
 * The emulated device (include/libra/device_emu.h): a rollout instance is the event
 * engine in emulated time, run by the instance's leader (the other members have no
 * work of their own); training charges the cost model's time for the rank's token
 * share; the weights are EMU_PARAMS floats, updated by plain SGD on the reduced
 * emulated gradient, so data really moves through the syncs, reductions and joins.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "libra/device_emu.h"
#include "libra/hash.h"
#include "libra/iqueue.h"
#include "libra/log.h"
#include "libra/plan_cost.h"

struct device {
    struct device_args a;
    double time_scale;
    struct device_epoch ep;
    float params[EMU_PARAMS], stage[EMU_PARAMS], join[EMU_PARAMS];
    float grad[EMU_PARAMS];
    double stats[DEV_STAT_COUNT];
    int version;
    struct dev_inst *inst;       /* the instance this rank leads, if any */
};

struct dev_inst {
    struct device *d;
    int leader;
    struct engine eng;           /* leader only */
    struct wire_turn_result *res;
    int n_res, cap_res;
};

static int emu_describe(const struct libra_config *cfg, const struct cost_model *cm,
                        struct device_info *out, char *err, size_t errlen)
{
    (void)cfg;
    (void)err;
    (void)errlen;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "emu");
    out->has_model = 0;
    out->tp_mask = out->train_tp_mask = 1u << 1 | 1u << 2 | 1u << 4 | 1u << 8;
    cost_rates(cm, &out->rates);
    out->cm = *cm;
    return 0;
}

static struct device *emu_open(const struct device_args *a)
{
    struct device *d = xcalloc(1, sizeof *d);
    d->a = *a;
    d->time_scale = a->cfg->device.time_scale;
    d->version = -1;
    emu_initial_params(a->cfg->run.seed, d->params);
    return d;
}

static void emu_close(struct device *d) { free(d); }

static void emu_epoch(struct device *d, const struct device_epoch *e) { d->ep = *e; }

static double vnow(const struct device *d) { return (wall_time() - d->a.t0) * d->time_scale; }

/* ---- rollout instance ---- */

static struct dev_inst *emu_inst_open(struct device *d, int leader)
{
    struct dev_inst *in = xcalloc(1, sizeof *in);
    in->d = d;
    in->leader = leader;
    if (!leader) return in;
    const struct libra_config *cfg = d->a.cfg;
    struct engine_config ec = {.tp = d->ep.tp,
                               .leader = d->a.rank,
                               .max_turns = cfg->rollout.max_turns,
                               .max_tokens = cfg->rollout.max_tokens,
                               .max_batch = 256,
                               .seed = cfg->run.seed};
    iq_config_from_sched(&ec.queue, &cfg->sched);
    engine_init(&in->eng, &ec, d->a.cm, d->a.wl);
    in->eng.vnow = vnow(d);
    in->eng.version = -1; /* decode waits for the weight sync that follows every plan */
    d->inst = in;
    return in;
}

static void emu_inst_submit(struct dev_inst *in, const struct wire_turn_req *req,
                            const int32_t *ctx)
{
    (void)ctx; /* emulated turns carry counts, not tokens */
    engine_advance(&in->eng, vnow(in->d), &in->res, &in->n_res, &in->cap_res);
    engine_submit(&in->eng, req);
}

static int emu_inst_progress(struct dev_inst *in, struct wire_buf *pack, int *n_done)
{
    *n_done = 0;
    if (!in->leader) return 0;
    engine_advance(&in->eng, vnow(in->d), &in->res, &in->n_res, &in->cap_res);
    *n_done = in->n_res;
    if (in->n_res) emu_pack_results(pack, in->d->a.rank, &in->eng, in->res, in->n_res, in->d->time_scale);
    in->n_res = 0;
    return *n_done > 0;
}

static void emu_inst_handback(struct dev_inst *in, struct wire_buf *pack)
{
    engine_advance(&in->eng, vnow(in->d), &in->res, &in->n_res, &in->cap_res);
    engine_handback(&in->eng, &in->res, &in->n_res, &in->cap_res);
    emu_pack_results(pack, in->d->a.rank, &in->eng, in->res, in->n_res, in->d->time_scale);
    in->n_res = 0;
}

static void emu_inst_quiesce(struct dev_inst *in) { (void)in; }

static void emu_inst_close(struct dev_inst *in)
{
    if (!in) return;
    if (in->leader) engine_free(&in->eng);
    if (in->d->inst == in) in->d->inst = NULL;
    free(in->res);
    free(in);
}

static double emu_inst_next_wake(const struct dev_inst *in)
{
    if (!in->leader) return INFINITY;
    double v = engine_next_event(&in->eng);
    return isfinite(v) ? in->d->a.t0 + v / in->d->time_scale : INFINITY;
}

/* ---- training ---- */

static float *emu_grad_buffer(struct device *d, size_t *n)
{
    *n = EMU_PARAMS;
    return d->grad;
}

static double *emu_stats_buffer(struct device *d, size_t *n)
{
    *n = DEV_STAT_COUNT;
    return d->stats;
}

static double emu_train_compute(struct device *d, const void *msg, size_t len)
{
    struct wire_train_batch h;
    struct emu_share share;
    memset(d->grad, 0, sizeof d->grad);
    memset(d->stats, 0, sizeof d->stats);
    if (emu_read_share(msg, len, d->a.cfg->run.seed, &h, &share, d->grad))
        FATAL("malformed training batch (%zu bytes) from rank 0", len);
    d->stats[DEV_STAT_TOKENS] = share.tokens;
    /* this replica's share on its tp x pp ranks: compute + TP + pipeline, no DP; the
     * cost model counts 2 of every 6 FLOPs per token forward, 4 backward */
    double s = emu_share_compute_s(d->a.cm, d->ep.plan, &share) / d->time_scale;
    d->stats[DEV_STAT_FWD_S] = s / 3.0;
    d->stats[DEV_STAT_BWD_S] = s - s / 3.0;
    return s;
}

static double emu_train_reduce_extra_s(struct device *d, int n_replicas)
{
    /* each GPU reduces its 1 / (tp pp) shard of the gradient over all replicas */
    return emu_reduce_s(d->a.cm, d->ep.plan, n_replicas) / d->time_scale;
}

static void emu_train_apply(struct device *d, int step, struct wire_train_done *done)
{
    double norm = 0;
    for (int i = 0; i < EMU_PARAMS; i++) {
        d->params[i] -= EMU_LR * d->grad[i];
        norm += (double)d->grad[i] * d->grad[i];
    }
    d->version = step;
    done->grad_norm = sqrt(norm);
    done->tokens = d->stats[DEV_STAT_TOKENS];
    done->params_identical = 1;
}

static float *emu_join_buffer(struct device *d, int sending, size_t *n)
{
    if (sending) memcpy(d->join, d->params, sizeof d->join);
    *n = EMU_PARAMS;
    return d->join;
}

static void emu_join_restore(struct device *d, int version)
{
    memcpy(d->params, d->join, sizeof d->params);
    d->version = version;
}

static double emu_join_extra_s(struct device *d, int dp)
{
    return pc_join_fetch_s(d->a.cm, dp) / d->time_scale;
}

/* ---- weights: one replicated tensor of EMU_PARAMS floats ---- */

static int emu_slices(struct device *d, int t, int i, int use, struct dev_slice *out, int max)
{
    (void)t;
    (void)i;
    if (max > 0)
        out[0] = (struct dev_slice){.tensor = 0, .full_rows = 1, .full_cols = EMU_PARAMS,
                                    .r0 = 0, .nr = 1, .c0 = 0, .nc = EMU_PARAMS,
                                    .data = use == DEV_SLICES_SEND    ? d->params
                                            : use == DEV_SLICES_STAGE ? d->stage
                                                                      : NULL};
    return 1;
}

static void emu_weights_staged(struct device *d, int version)
{
    memcpy(d->params, d->stage, sizeof d->params);
    d->version = version;
    if (d->inst) engine_set_version(&d->inst->eng, version, cost_weight_sync_s(d->a.cm));
}

static int emu_version(const struct device *d) { return d->version; }

static uint64_t emu_weights_hash(const struct device *d)
{
    return weights_hash_floats(d->params, EMU_PARAMS);
}

static int emu_save(struct device *d, const char *dir, char *err, size_t errlen)
{
    (void)d;
    snprintf(err, errlen, "the emulated device has no model to save in %s", dir);
    return -1;
}

const struct device_ops device_emu = {
    .name = "emu",
    .describe = emu_describe,
    .open = emu_open,
    .close = emu_close,
    .epoch = emu_epoch,
    .inst_open = emu_inst_open,
    .inst_submit = emu_inst_submit,
    .inst_progress = emu_inst_progress,
    .inst_handback = emu_inst_handback,
    .inst_quiesce = emu_inst_quiesce,
    .inst_close = emu_inst_close,
    .inst_next_wake = emu_inst_next_wake,
    .grad_buffer = emu_grad_buffer,
    .stats_buffer = emu_stats_buffer,
    .train_compute = emu_train_compute,
    .train_reduce_extra_s = emu_train_reduce_extra_s,
    .train_apply = emu_train_apply,
    .join_buffer = emu_join_buffer,
    .join_restore = emu_join_restore,
    .join_extra_s = emu_join_extra_s,
    .slices = emu_slices,
    .weights_staged = emu_weights_staged,
    .version = emu_version,
    .weights_hash = emu_weights_hash,
    .save = emu_save,
};
