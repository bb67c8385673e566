/*
 * A worker's rollout role with the real model (device cpu): the instance leader runs
 * the CPU rollout engine (include/libra/rollout_cpu.h). Turn requests carry the
 * trajectory's whole context; results go back with the generated ids, their
 * behaviour log-probs and policy versions, and the tool's payload ids. Each call of
 * wrc_progress is one engine iteration, so messages and weight syncs are served
 * between decode steps. The instance's queue discipline (fifo / mlfq) comes from the
 * sched section; each result batch reports the instance's queue and slot state on
 * its first result.
 */
#include <string.h>

#include "libra/iqueue.h"
#include "libra/log.h"
#include "libra/worker.h"

void wrc_start_engine(struct worker *w)
{
    struct worker_cpu *wc = &w->cpu;
    const struct rollout_config *r = &w->cfg->rollout;
    struct rollout_cpu_config rc = {.n_slots = r->slots,
                                    .slot_capacity = r->max_tokens,
                                    .prefill_chunk = 128,
                                    .max_turns = r->max_turns,
                                    .temperature = (float)r->temperature,
                                    .top_p = (float)r->top_p,
                                    .top_k = r->top_k,
                                    .seed = w->cfg->run.seed,
                                    .tool_threads = r->tool_threads,
                                    .tool_timeout_s = r->tool_timeout_s};
    iq_config_from_sched(&rc.queue, &w->cfg->sched);
    const float *p = wc->tr ? wc->tr->p.mem : wc->p.mem;
    wc->eng = rollout_cpu_create(&wc->mc, p, w->version, &wc->env, &rc);
    w->have_engine = 1;
}

void wrc_on_turn_req(struct worker *w, const void *msg, size_t len)
{
    struct wire_reader rd;
    struct wire_turn_req req;
    const int32_t *tokens;
    if (!w->have_engine)
        FATAL("turn requests reached rank %d, which leads no rollout instance (role %s)", w->rank,
              role_name(w->plan.ranks[w->rank].role));
    int got = wire_reader_init(&rd, msg, len) < 0 ? -1 : 1;
    while (got == 1 && (got = wire_next_turn_req(&rd, &req, &tokens)) == 1) {
        if (req.n_tokens != req.ctx_tokens)
            FATAL("turn request of trajectory %lld carries %d of its %d context tokens",
                  (long long)req.traj_id, req.n_tokens, req.ctx_tokens);
        struct rollout_turn_in in = {.traj_id = req.traj_id,
                                     .rng_key = req.rng_key,
                                     .turn = req.turn,
                                     .budget = req.budget,
                                     .greedy = (req.flags & WIRE_TURN_GREEDY) != 0,
                                     .n_ctx = req.n_tokens,
                                     .ctx = tokens,
                                     .est_remaining = req.est_remaining};
        rollout_cpu_submit(w->cpu.eng, &in);
    }
    if (got < 0) FATAL("malformed turn requests (%zu bytes) from rank 0", len);
}

/* Packs the engine's finished turns into one message of tag (TURN_RESULT or HANDBACK);
 * the first result carries the busy time and the instance's queue state. */
static int send_taken(struct worker *w, int tag)
{
    const struct rollout_turn_out *out;
    int n = rollout_cpu_take(w->cpu.eng, &out);
    if (n == 0 && tag != TAG_HANDBACK) return 0;
    int queued, running;
    double kv_frac;
    rollout_cpu_queue_stats(w->cpu.eng, &queued, &running, &kv_frac);
    int64_t tokens;
    double busy;
    rollout_cpu_take_counters(w->cpu.eng, &tokens, &busy);
    wire_batch_begin(&w->pack, w->rank);
    for (int i = 0; i < n; i++) {
        const struct rollout_turn_out *o = &out[i];
        struct wire_turn_result r = {.traj_id = o->traj_id,
                                     .turn = o->turn,
                                     .leader = w->rank,
                                     .gen_tokens = o->n_gen,
                                     .version_first = o->n_gen ? o->versions[0] : -1,
                                     .version_last = o->n_gen ? o->versions[o->n_gen - 1] : -1,
                                     .final = o->final,
                                     .partial = o->partial,
                                     .tool = o->tool,
                                     .tool_status = o->tool_status,
                                     .payload_tokens = o->n_payload,
                                     .tool_latency_s = o->tool_latency_s,
                                     .busy_rank_s = i == 0 ? busy : 0,
                                     .n_tokens = o->n_gen,
                                     .n_payload = o->n_payload,
                                     .inst_queued = i == 0 ? queued : -1,
                                     .inst_running = i == 0 ? running : -1,
                                     .inst_kv_frac = i == 0 ? kv_frac : -1.0};
        wire_batch_add_turn_result(&w->pack, &r, o->ids, o->logp, o->versions, o->payload);
    }
    outbox_send(&w->ob, w->pack.data, w->pack.len, 0, tag, MPI_COMM_WORLD);
    return n;
}

int wrc_progress(struct worker *w)
{
    if (!w->have_engine) return 0;
    int work = rollout_cpu_step(w->cpu.eng);
    return work + send_taken(w, TAG_TURN_RESULT);
}

void wrc_handback(struct worker *w)
{
    if (!w->have_engine) return;
    send_taken(w, TAG_TURN_RESULT);
    rollout_cpu_handback(w->cpu.eng);
    send_taken(w, TAG_HANDBACK);
    rollout_cpu_free(w->cpu.eng);
    w->cpu.eng = NULL;
    w->have_engine = 0;
}
