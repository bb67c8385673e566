/*
 * The CPU device's rollout instance (include/libra/device.h): every rank of the
 * instance holds its shard's rollout model (cpu_tp_model.c); the leader runs the CPU
 * rollout engine (include/libra/rollout_cpu.h) on it, the other ranks serve its
 * commands. Turn requests carry the trajectory's whole context; results go back with
 * the generated ids, their behaviour log-probs and policy versions, and the tool's
 * payload ids. Each progress call is one engine iteration, so rank 0's messages and
 * weight syncs are served between decode steps. The queue discipline (fifo / mlfq)
 * comes from the sched section; each result batch reports the instance's queue and
 * slot state on its first result.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "libra/iqueue.h"
#include "libra/log.h"

struct dev_inst {
    struct device *d;
    int leader;
    struct cpu_tp_model *model;
    struct rollout_cpu *eng; /* leader */
};

struct dev_inst *cpu_inst_open(struct device *d, int leader)
{
    struct dev_inst *in = xcalloc(1, sizeof *in);
    in->d = d;
    in->leader = leader;
    d->inst = in;
    in->model = cpu_tp_model_create(d, leader);
    if (!leader) return in;
    const struct rollout_config *r = &d->a.cfg->rollout;
    struct rollout_cpu_config rc = {.n_slots = r->slots,
                                    .slot_capacity = r->max_tokens,
                                    .prefill_chunk = 128,
                                    .max_turns = r->max_turns,
                                    .temperature = (float)r->temperature,
                                    .top_p = (float)r->top_p,
                                    .top_k = r->top_k,
                                    .seed = d->a.cfg->run.seed,
                                    .tool_threads = r->tool_threads,
                                    .tool_timeout_s = r->tool_timeout_s};
    iq_config_from_sched(&rc.queue, &d->a.cfg->sched);
    in->eng = rollout_cpu_create_on(cpu_tp_model_ops(in->model), d->version, &d->env, &rc);
    return in;
}

void cpu_inst_submit(struct dev_inst *in, const struct wire_turn_req *req, const int32_t *tokens)
{
    if (req->n_tokens != req->ctx_tokens)
        FATAL("turn request of trajectory %lld carries %d of its %d context tokens",
              (long long)req->traj_id, req->n_tokens, req->ctx_tokens);
    struct rollout_turn_in t = {.traj_id = req->traj_id,
                                .rng_key = req->rng_key,
                                .turn = req->turn,
                                .budget = req->budget,
                                .greedy = (req->flags & WIRE_TURN_GREEDY) != 0,
                                .n_ctx = req->n_tokens,
                                .ctx = tokens,
                                .est_remaining = req->est_remaining};
    rollout_cpu_submit(in->eng, &t);
}

/* Packs the engine's finished turns as one result batch; the first result carries
 * the busy time and the instance's queue state. Returns the count. */
static int pack_taken(struct dev_inst *in, struct wire_buf *pack, int always)
{
    const struct rollout_turn_out *out;
    int n = rollout_cpu_take(in->eng, &out);
    if (n == 0 && !always) return 0;
    int queued, running;
    double kv_frac;
    rollout_cpu_queue_stats(in->eng, &queued, &running, &kv_frac);
    int64_t tokens;
    double busy;
    rollout_cpu_take_counters(in->eng, &tokens, &busy);
    int rank = in->d->a.rank;
    wire_batch_begin(pack, rank);
    for (int i = 0; i < n; i++) {
        const struct rollout_turn_out *o = &out[i];
        struct wire_turn_result r = {.traj_id = o->traj_id,
                                     .turn = o->turn,
                                     .leader = rank,
                                     .gen_tokens = o->n_gen,
                                     .version_first = o->n_gen ? o->versions[0] : -1,
                                     .version_last = o->n_gen ? o->versions[o->n_gen - 1] : -1,
                                     .final = o->final,
                                     .partial = o->partial,
                                     .tool = o->tool,
                                     .tool_status = o->tool_status,
                                     .payload_tokens = o->n_payload,
                                     .tool_latency_s = o->tool_latency_s,
                                     /* rank-seconds: every rank of the instance was busy */
                                     .busy_rank_s = i == 0 ? busy * in->d->sh.t : 0,
                                     .n_tokens = o->n_gen,
                                     .n_payload = o->n_payload,
                                     .inst_queued = i == 0 ? queued : -1,
                                     .inst_running = i == 0 ? running : -1,
                                     .inst_kv_frac = i == 0 ? kv_frac : -1.0};
        wire_batch_add_turn_result(pack, &r, o->ids, o->logp, o->versions, o->payload);
    }
    return n;
}

int cpu_inst_progress(struct dev_inst *in, struct wire_buf *pack, int *n_done)
{
    *n_done = 0;
    if (!in->leader) return cpu_tp_model_serve(in->model, 0) > 0;
    int work = 0;
    if (cpu_tp_model_agree_weights(in->model)) {
        rollout_cpu_weights_changed(in->eng, in->d->version);
        work = 1;
    }
    work |= rollout_cpu_step(in->eng);
    *n_done = pack_taken(in, pack, 0);
    return work || *n_done;
}

void cpu_inst_handback(struct dev_inst *in, struct wire_buf *pack)
{
    rollout_cpu_handback(in->eng);
    pack_taken(in, pack, 1);
}

void cpu_inst_quiesce(struct dev_inst *in)
{
    if (in->leader)
        cpu_tp_model_end(in->model);
    else
        cpu_tp_model_serve(in->model, 1);
}

void cpu_inst_close(struct dev_inst *in)
{
    if (!in) return;
    if (in->eng) rollout_cpu_free(in->eng);
    cpu_tp_model_free(in->model);
    if (in->d->inst == in) in->d->inst = NULL;
    free(in);
}

double cpu_inst_next_wake(const struct dev_inst *in)
{
    (void)in;
    return INFINITY;
}
