/*
 * Rank 0's checks of a run against its device and model, made before anything is
 * written (the start of a run and --check-config alike): the device exists and
 * describes the model (its context, the TP degrees that shard it, the file itself),
 * the plans fit the device, the memory estimate fits the node, the prompts file is
 * usable. Messages name the config key's file:line and the model's value.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "libra/driver.h"
#include "libra/env.h"

int driver_check_plans(const struct libra_config *cfg, const struct device_info *dev, int world,
                       char *err, size_t errlen)
{
    const struct plan_config *pc = &cfg->plan;
    int sched = strcmp(pc->mode, "schedule") == 0;
    int n = sched ? pc->n_schedule : strcmp(pc->mode, "static") == 0, most = 0;
    for (int k = 0; k < n; k++) {
        const struct plan_spec *p = sched ? &pc->schedule[k] : &pc->fixed;
        if (plan_spec_workers(p) > most) most = plan_spec_workers(p);
        char at[CFG_PATH_MAX + 16];
        snprintf(at, sizeof at, p->line > 0 ? "%s:%d" : "%s", cfg->source, p->line);
        for (int i = 0; i < p->n_tp; i++)
            if (p->rollout_tp[i] > 31 || !(dev->tp_mask >> p->rollout_tp[i] & 1)) {
                snprintf(err, errlen, "%s: plan.rollout_tp: device.type = \"%s\" runs no "
                         "rollout instance of TP %d", at, dev->name, p->rollout_tp[i]);
                return -1;
            }
        int t = p->train_tp > 0 ? p->train_tp : 1;
        if (t > 31 || !(dev->train_tp_mask >> t & 1)) {
            snprintf(err, errlen, "%s: plan.train_tp: device.type = \"%s\" runs no training "
                     "replica of TP %d", at, dev->name, t);
            return -1;
        }
    }
    /* the planner chooses training replicas of TP 1 .. max_train_tp */
    for (int t = 1; strcmp(pc->mode, "grp") == 0 && t <= pc->max_train_tp; t *= 2)
        if (t > 31 || !(dev->train_tp_mask >> t & 1)) {
            snprintf(err, errlen, "%s: plan.max_train_tp: %d, but device.type = \"%s\" runs "
                     "no training replica of TP %d (lower plan.max_train_tp)",
                     CONFIG_WHERE(cfg, "plan.max_train_tp"), pc->max_train_tp, dev->name, t);
            return -1;
        }
    /* a real device's rank without a role holds a model copy and only waits */
    if (n > 0 && dev->has_model && world - 1 > most) {
        snprintf(err, errlen, "%s: plan: the layout uses %d workers but the job has %d (world "
                 "size %d): start %d ranks, or give the plan the other %d (plan.n_train, "
                 "plan.rollout_tp)", cfg->source, most, world - 1, world, most + 1,
                 world - 1 - most);
        return -1;
    }
    return 0;
}

int driver_check_start(struct libra_config *cfg, struct job_inputs *in,
                       struct device_info *dev, int world, char *err, size_t errlen)
{
    const struct device_ops *ops = device_find(cfg->device.type);
    if (!ops) {
        snprintf(err, errlen, "%s: device.type: \"%s\": this build has no such device (it "
                 "has: %s)", CONFIG_WHERE(cfg, "device.type"), cfg->device.type, device_names());
        return -1;
    }
    /* the configuration refused the other devices (config.c); this guards a device
     * added later, whose workers would not know how to serve and train on one rank */
    if (cfg->train.colocate && strcmp(ops->name, "cpu") != 0 && strcmp(ops->name, "cuda") != 0 &&
        strcmp(ops->name, "emu") != 0) {
        snprintf(err, errlen, "%s: train.colocate: 1 (every GPU alternates rollout and "
                 "training) runs on device.type = \"cpu\", \"cuda\" or \"emu\", not \"%s\": "
                 "set train.colocate = 0", CONFIG_WHERE(cfg, "train.colocate"), ops->name);
        return -1;
    }
    if (ops->describe(cfg, &in->cm, dev, err, errlen) ||
        driver_check_plans(cfg, dev, world, err, errlen))
        return -1;
    double need_gb, have_gb;
    if (driver_check_memory(cfg, dev, world, &need_gb, &have_gb, err, errlen)) return -1;
    if (need_gb > 0)
        printf("libra: memory: the ranks on this node need about %.2f GB of its %.1f GB "
               "(estimate)\n", need_gb, have_gb);
    if (dev->has_model && cfg->env.prompts[0]) { /* every bad line named, once, here */
        int64_t n_ok, n_bad;
        char e[1024];
        if (env_check_prompts(cfg->env.prompts, cfg->env.max_bad_fraction, &n_ok, &n_bad, e,
                              sizeof e)) {
            snprintf(err, errlen, "%s: env.prompts: %s", CONFIG_WHERE(cfg, "env.prompts"), e);
            return -1;
        }
        printf("libra: env.prompts: %lld problems from %s%s", (long long)n_ok,
               cfg->env.prompts, n_bad ? "" : "\n");
        if (n_bad)
            printf(" (%lld lines skipped: env.max_bad_fraction = %g)\n", (long long)n_bad,
                   cfg->env.max_bad_fraction);
        int64_t held_out = env_jsonl_eval_count(n_ok);
        if (cfg->eval.size > held_out && !config_key_set(cfg, "eval.size")) {
            printf("libra: eval.size: the default %d lowered to the %lld held-out problems of "
                   "env.prompts\n", cfg->eval.size, (long long)held_out);
            cfg->eval.size = (int)held_out;
        } else if (cfg->eval.size > held_out) {
            snprintf(err, errlen, "%s: eval.size: %d is more than the %lld held-out problems "
                     "of env.prompts (the last tenth of its %lld, at most 200): lower "
                     "eval.size to %lld or less", CONFIG_WHERE(cfg, "eval.size"),
                     cfg->eval.size, (long long)held_out, (long long)n_ok, (long long)held_out);
            return -1;
        }
    }
    fflush(stdout);
    return 0;
}
