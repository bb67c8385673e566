/*
 * Private to src/device/cpu: the CPU device's state on one worker rank, shared by
 * cpu_device.c (lifetime, epochs, weights, checkpoints), cpu_rollout.c (rollout
 * instances), cpu_train.c (training shares and the optimizer) and cpu_rates.c (the
 * rates the device reports).
 *
 * Weights: the rank holds one copy of the model's parameters, `p` -- the trainer's
 * once it exists (it takes them over), else the loaded ones -- plus `stage`, the
 * receive buffer of weight syncs, swapped in between decode iterations.
 */
#ifndef LIBRA_DEVICE_CPU_INTERNAL_H
#define LIBRA_DEVICE_CPU_INTERNAL_H

#include "libra/adamw.h"
#include "libra/device.h"
#include "libra/device_cpu.h"
#include "libra/env.h"
#include "libra/grpo.h"
#include "libra/rollout_cpu.h"
#include "libra/tfm.h"
#include "libra/trainer.h"

struct device {
    struct device_args a;
    struct device_epoch ep;
    struct tfm_config mc;
    struct tfm_params p;       /* the weights this rank holds (until the trainer takes them) */
    struct adamw opt;          /* a resumed optimizer state, if opt_loaded */
    int opt_loaded;
    struct env env;
    struct trainer *tr;        /* training replica (owns the parameters from its first batch) */
    float *stage;              /* (p.n) weight-sync receive buffer */
    int version;               /* of the weights held; -1 none */
    int staged_version;        /* the stage holds this version, not yet swapped in; -1 none */
    struct dev_inst *inst;     /* the instance this rank belongs to, if any */
    double stats[DEV_STAT_COUNT];
    float *join;               /* (2 n + ...) a join's weights and optimizer state */
    size_t n_join;
};

/* The parameters this rank holds right now (the trainer's once it exists). */
struct tfm_params *cpu_live_params(struct device *d);

/* cpu_rollout.c */
struct dev_inst *cpu_inst_open(struct device *d, int leader);
void cpu_inst_submit(struct dev_inst *in, const struct wire_turn_req *req, const int32_t *ctx);
int cpu_inst_progress(struct dev_inst *in, struct wire_buf *pack, int *n_done);
void cpu_inst_handback(struct dev_inst *in, struct wire_buf *pack);
void cpu_inst_quiesce(struct dev_inst *in);
void cpu_inst_close(struct dev_inst *in);
double cpu_inst_next_wake(const struct dev_inst *in);
/* The staged weights become the instance's at its next iteration. */
void cpu_inst_weights(struct dev_inst *in, const float *params, int version);

/* cpu_train.c */
float *cpu_grad_buffer(struct device *d, size_t *n);
double *cpu_stats_buffer(struct device *d, size_t *n);
double cpu_train_compute(struct device *d, const void *msg, size_t len);
void cpu_train_apply(struct device *d, int step, struct wire_train_done *done);
float *cpu_join_buffer(struct device *d, int sending, size_t *n);
void cpu_join_restore(struct device *d, int version);

/* cpu_rates.c */
int cpu_describe(const struct libra_config *cfg, const struct cost_model *cm,
                 struct device_info *out, char *err, size_t errlen);
/* The model the configuration names: its config and weights (model.checkpoint, or a
 * fresh seeded model), and a resumed optimizer state if the file has one. 0 or -1 +
 * message. */
int cpu_load_model(const struct libra_config *cfg, struct tfm_config *mc, struct tfm_params *p,
                   struct adamw *opt, int *opt_loaded, char *err, size_t errlen);

#endif
