/*
 * The rollout model of a CPU instance (include/libra/rollout_model.h) on this rank's
 * shard: a tensor-parallel decoder (tfm_decoder_create_tp) and distributed sampling
 * (sampler_sample_tp). At TP 1 it is the local model's arithmetic, bit for bit.
 *
 * The leader runs the engine; each of its model calls is a command to the other ranks
 * of the instance -- sent (MPI_Send on the instance communicator, tag CMD_TAG) and then
 * run by every rank together, since the decoder's and the sampler's all-reduces are
 * collective. A member serves the commands between its own loop's work
 * (cpu_tp_model_serve). Commands:
 *   PREFILL   slot, tokens, and optionally how to sample the token after them
 *   STEP      slots, tokens, how to sample each row
 *   TRUNCATE  slot, length
 *   WEIGHTS   every rank reports the version it has staged (MIN all-reduce); if all
 *             have weights newer than the decoder's they swap them in together and
 *             drop every cache
 *   END       the epoch's stream is over: the instance is dissolved or its
 *             communicator is rebuilt (cpu_tp_model_end / serve(block))
 * Every rank draws the same token (same key, same all-reduced figures), so a member's
 * decoder stays in step with the leader's without any token travelling.
 *
 * Deadlock freedom: the leader never waits on a member except inside a command the
 * member will serve; a member waits on the leader only in serve(block), which a plan
 * or the run's end makes the leader answer with END.
 *
 * On device cuda the decoder is the GPU engine (include/libra/gpu_decode.h) over a bf16
 * copy of the shard's live weights, re-uploaded when new weights are swapped in; its
 * all-reduces are the shard group's (cpu_gpu_comm: NCCL, or host-staged over MPI).
 * At TP 1, rows are sampled on the GPU when they share plain temperature sampling (the
 * rollout case); else (and always at TP > 1) their logits come back and
 * sampler_sample_tp draws them here, as on the CPU.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "libra/log.h"
#include "libra/mpi_wait.h"
#include "libra/gpu_decode.h"
#include "libra/tfm_decode.h"

#define CMD_TAG 401

enum cmd_op { CMD_PREFILL = 1, CMD_STEP, CMD_TRUNCATE, CMD_WEIGHTS, CMD_END };

struct cmd_hdr {
    int32_t op, slot, n, len; /* len: TRUNCATE's length */
    int32_t sample;           /* PREFILL: a sample follows */
    int32_t pad_;
};

struct cpu_tp_model {
    struct rollout_model rm;
    struct device *d;
    int leader;
    int n_slots;
    struct tfm_decoder *dec;     /* the CPU's decoder, or NULL on the GPU: */
    struct gpu_model *gm;        /* device cuda: the weights on the GPU */
    struct gpu_decoder *gd;      /* ... and its decoder */
    struct gpu_comm *gc;         /* ... and its TP group (cpu_gpu_comm's; NULL at TP 1) */
    int64_t *keys, *positions;   /* (rows) the GPU sampler's per-row keys */
    float *logits;            /* (n_slots, v1 - v0) */
    float *scratch;           /* sampler_sample_tp scratch */
    struct wire_buf msg;      /* a command's bytes */
    /* scratch of one command */
    int *slots;
    int32_t *tokens, *tok;
    float *lp;
    struct rollout_sample *smp;
    int max_tokens;
    int version; /* of the weights the decoder's caches were computed with: the device's
                  * own version may be ahead of it on a colocated rank, whose trainer
                  * steps the weights it decodes with (no turn in flight then) and whose
                  * local sync then stages that same version */
    int ended; /* member: the leader's CMD_END arrived while serving without blocking (the
                * leader quiesced before this rank saw the plan or shutdown that made it):
                * nothing more is served until this rank's own quiesce takes it */
};

static MPI_Comm group(const struct cpu_tp_model *m) { return m->d->sh.comm.comm; }
static int members(const struct cpu_tp_model *m) { return m->d->sh.t - 1; }

/* ---- running a command (every rank) ---- */

static void draw(struct cpu_tp_model *m, const float *logits, const struct rollout_sample *s,
                 int32_t *tok, float *lp)
{
    const struct tfm_tp *tp = &m->d->sh.tp;
    *tok = sampler_sample_tp(&s->sc, tp, logits, s->key, s->position, lp, m->scratch);
}

/* ---- the decoder, on the CPU or the GPU ---- */

static int dec_len(const struct cpu_tp_model *m, int slot)
{
    return m->gd ? gpu_decoder_len(m->gd, slot) : tfm_decoder_len(m->dec, slot);
}

static void dec_truncate(struct cpu_tp_model *m, int slot, int len)
{
    if (m->gd) gpu_decoder_truncate(m->gd, slot, len);
    else tfm_decoder_truncate(m->dec, slot, len);
}

/* The GPU's n rows of logits drawn per s: on the GPU when every row samples with the
 * same settings (temperature, top-k, top-p, seed) and the decoder samples those there
 * (TP 1: any; TP > 1: greedy or plain temperature, vocabulary-parallel), else on the
 * host (a batch mixing greedy evaluation rows with sampled ones; top-k / top-p at
 * TP > 1). Collective at TP > 1: every rank of the group has the same rows. */
static void gpu_draw(struct cpu_tp_model *m, int n, const struct rollout_sample *s, int32_t *tok,
                     float *lp)
{
    int same = gpu_decoder_samples_on_gpu(m->gd, &s[0].sc);
    for (int k = 0; k < n; k++) {
        same &= s[k].sc.temperature == s[0].sc.temperature && s[k].sc.seed == s[0].sc.seed &&
                s[k].sc.top_k == s[0].sc.top_k && s[k].sc.top_p == s[0].sc.top_p;
        m->keys[k] = s[k].key;
        m->positions[k] = s[k].position;
    }
    if (same) {
        gpu_decoder_sample(m->gd, n, &s[0].sc, m->keys, m->positions, tok, lp);
        return;
    }
    gpu_decoder_logits(m->gd, m->logits);
    size_t Vl = (size_t)(m->d->sh.tp.v1 - m->d->sh.tp.v0);
    for (int k = 0; k < n; k++) draw(m, m->logits + (size_t)k * Vl, &s[k], &tok[k], &lp[k]);
}

static int run_prefill(struct cpu_tp_model *m, int slot, const int32_t *tokens, int n,
                       const struct rollout_sample *s, int32_t *tok, float *lp)
{
    if (m->gd) {
        if (gpu_decoder_prefill(m->gd, slot, tokens, n, NULL)) return -1;
        if (s) gpu_draw(m, 1, s, tok, lp);
        return 0;
    }
    if (tfm_decoder_prefill(m->dec, slot, tokens, n, s ? m->logits : NULL)) return -1;
    if (s) draw(m, m->logits, s, tok, lp);
    return 0;
}

static int run_step(struct cpu_tp_model *m, const int *slots, const int32_t *tokens, int n,
                    const struct rollout_sample *s, int32_t *tok, float *lp)
{
    if (m->gd) {
        if (gpu_decoder_step(m->gd, slots, tokens, n, NULL)) return -1;
        gpu_draw(m, n, s, tok, lp);
        return 0;
    }
    if (tfm_decoder_step(m->dec, slots, tokens, n, m->logits)) return -1;
    size_t Vl = (size_t)(m->d->sh.tp.v1 - m->d->sh.tp.v0);
    for (int k = 0; k < n; k++) draw(m, m->logits + (size_t)k * Vl, &s[k], &tok[k], &lp[k]);
    return 0;
}

/* Whether staged bf16 weights go to this rank's GPU model as they are (cpu_stage16.c). */
static int bf16_to_gpu(const struct cpu_tp_model *m)
{
    return m->d->sh.staged16 && m->gm && !m->d->tr;
}

/* All ranks: the lowest staged version; if newer than what they hold, swap it in. */
static int run_weights(struct cpu_tp_model *m)
{
    struct device *d = m->d;
    int32_t v = d->staged_version;
    /* a sync through the sync buffer: still on its way here (cpu_syncbuf.c) */
    if (d->gs.pending && !cpu_gsync_arrived(d)) v = -1;
    else if (bf16_to_gpu(m) && v > m->version && !cpu_stage16_arrived(d)) v = -1;
    if (d->sh.t > 1) MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT32_T, MPI_MIN, group(m)));
    if (v >= 0 && d->gs.pending) {
        /* a GPU-to-GPU sync (every rank of the group has one), on every rank's GPU
         * (the sync buffer) or received into the model now, even one of the version it
         * holds -- its sender waits for the receives */
        if (!m->gm) FATAL("rank %d: a GPU weight sync without a GPU model (a bug)", d->a.rank);
        cpu_gsync_post(d, m->gm);
        d->staged_version = -1;
        if (v <= m->version) return 0; /* the same weights */
        d->version = v;
        m->version = v;
        for (int s = 0; s < m->n_slots; s++) dec_truncate(m, s, 0);
        return 1;
    }
    if (v < 0 || v <= m->version) return 0;
    d->version = v;
    m->version = v;
    d->staged_version = -1;
    struct tfm_params *p = cpu_live_layout(d); /* all of it overwritten */
    if (bf16_to_gpu(m)) { /* bf16 straight to the GPU; sh.p lags */
        cpu_stage16_install(d, m->gm);
        for (int s = 0; s < m->n_slots; s++) dec_truncate(m, s, 0);
        return 1;
    }
    if (d->gpu) cpu_syncbuf_drop(d); /* a trainer appeared since: nothing goes there */
    if (d->sh.staged16) /* ... and its float32 copy takes them */
        cpu_stage16_take(d);
    else
        memcpy(p->mem, d->sh.stage, p->n * sizeof *p->mem);
    d->sh.p_lags = 0;
    if (m->gm) {
        gpu_model_set_weights(m->gm, p);
        d->last_install = DEV_INSTALL_STRAIGHT;
    }
    /* a colocated rank's stage is its trainer's own weights (nothing changed there);
     * any other rank's trainer engine, if it has one, takes the new weights */
    if (d->tr && !d->ep.plan->colocated) trainer_weights_changed(d->tr);
    for (int s = 0; s < m->n_slots; s++) dec_truncate(m, s, 0);
    return 1;
}

/* ---- the leader's side: send, then run ---- */

static void send_cmd(struct cpu_tp_model *m, const struct cmd_hdr *h, const void *a, size_t na,
                     const void *b, size_t nb, const void *c, size_t nc)
{
    if (!m->leader || members(m) == 0) return;
    wire_buf_reset(&m->msg);
    wire_buf_put(&m->msg, h, sizeof *h);
    if (na) wire_buf_put(&m->msg, a, na);
    if (nb) wire_buf_put(&m->msg, b, nb);
    if (nc) wire_buf_put(&m->msg, c, nc);
    for (int r = 1; r <= members(m); r++)
        MPI_CHECK(MPI_Send(m->msg.data, (int)m->msg.len, MPI_BYTE, r, CMD_TAG, group(m)));
}

static int op_len(void *mm, int slot) { return dec_len(mm, slot); }

static void op_truncate(void *mm, int slot, int len)
{
    struct cpu_tp_model *m = mm;
    struct cmd_hdr h = {CMD_TRUNCATE, slot, 0, len, 0, 0};
    send_cmd(m, &h, NULL, 0, NULL, 0, NULL, 0);
    dec_truncate(m, slot, len);
}

static int op_prefill(void *mm, int slot, const int32_t *tokens, int n,
                      const struct rollout_sample *s, int32_t *tok, float *lp)
{
    struct cpu_tp_model *m = mm;
    if (n < 0 || dec_len(m, slot) + n > m->max_tokens) return -1; /* no command */
    struct cmd_hdr h = {CMD_PREFILL, slot, n, 0, s != NULL, 0};
    send_cmd(m, &h, tokens, (size_t)n * sizeof *tokens, s, s ? sizeof *s : 0, NULL, 0);
    return run_prefill(m, slot, tokens, n, s, tok, lp);
}

static int op_step(void *mm, const int *slots, const int32_t *tokens, int n,
                   const struct rollout_sample *s, int32_t *tok, float *lp)
{
    struct cpu_tp_model *m = mm;
    for (int k = 0; k < n; k++)
        if (dec_len(m, slots[k]) >= m->max_tokens) return -1; /* no command */
    struct cmd_hdr h = {CMD_STEP, 0, n, 0, 1, 0};
    send_cmd(m, &h, slots, (size_t)n * sizeof *slots, tokens, (size_t)n * sizeof *tokens, s,
             (size_t)n * sizeof *s);
    return run_step(m, slots, tokens, n, s, tok, lp);
}

static const struct rollout_model_ops tp_ops = {op_len, op_truncate, op_prefill, op_step};

int cpu_tp_model_agree_weights(struct cpu_tp_model *m)
{
    if (m->d->staged_version <= m->version && !m->d->gs.pending) return 0;
    struct cmd_hdr h = {CMD_WEIGHTS, 0, 0, 0, 0, 0};
    send_cmd(m, &h, NULL, 0, NULL, 0, NULL, 0);
    return run_weights(m);
}

void cpu_tp_model_end(struct cpu_tp_model *m)
{
    struct cmd_hdr h = {CMD_END, 0, 0, 0, 0, 0};
    send_cmd(m, &h, NULL, 0, NULL, 0, NULL, 0);
}

/* ---- a member's side: receive and run ---- */

/* Runs one received command; returns its op. */
static int serve_one(struct cpu_tp_model *m, const MPI_Status *st)
{
    wire_recv(&m->msg, st, group(m));
    struct cmd_hdr h;
    if (m->msg.len < sizeof h) FATAL("TP instance: malformed command (%zu bytes)", m->msg.len);
    memcpy(&h, m->msg.data, sizeof h);
    const char *p = m->msg.data + sizeof h;
    size_t left = m->msg.len - sizeof h;
    if (h.n < 0 || h.n > m->max_tokens)
        FATAL("TP instance: command %d with %d rows (at most %d)", h.op, h.n, m->max_tokens);
    size_t need = 0;
    switch (h.op) {
    case CMD_PREFILL:
        need = (size_t)h.n * sizeof(int32_t) + (h.sample ? sizeof(struct rollout_sample) : 0);
        if (left != need) break;
        memcpy(m->tokens, p, (size_t)h.n * sizeof *m->tokens);
        if (h.sample) memcpy(m->smp, p + (size_t)h.n * sizeof(int32_t), sizeof *m->smp);
        if (run_prefill(m, h.slot, m->tokens, h.n, h.sample ? m->smp : NULL, m->tok, m->lp))
            FATAL("TP instance: slot %d overflows on a member but not on the leader", h.slot);
        return h.op;
    case CMD_STEP:
        need = (size_t)h.n * (sizeof(int) + sizeof(int32_t) + sizeof(struct rollout_sample));
        if (left != need || h.n > m->n_slots) break;
        memcpy(m->slots, p, (size_t)h.n * sizeof *m->slots);
        memcpy(m->tokens, p + (size_t)h.n * sizeof(int), (size_t)h.n * sizeof *m->tokens);
        memcpy(m->smp, p + (size_t)h.n * (sizeof(int) + sizeof(int32_t)),
               (size_t)h.n * sizeof *m->smp);
        if (run_step(m, m->slots, m->tokens, h.n, m->smp, m->tok, m->lp))
            FATAL("TP instance: a slot overflows on a member but not on the leader");
        return h.op;
    case CMD_TRUNCATE:
        if (left != 0) break;
        dec_truncate(m, h.slot, h.len);
        return h.op;
    case CMD_WEIGHTS:
        if (left != 0) break;
        run_weights(m);
        return h.op;
    case CMD_END:
        if (left != 0) break;
        return h.op;
    default: break;
    }
    FATAL("TP instance: malformed command %d (%zu bytes of arguments)", h.op, left);
}

int cpu_tp_model_serve(struct cpu_tp_model *m, int block)
{
    if (m->leader || members(m) == 0) return 0;
    if (m->ended) { /* the quiesce (block) takes the CMD_END already served */
        if (block) m->ended = 0;
        return 0;
    }
    int n = 0;
    for (;;) {
        MPI_Status st;
        int flag = 0;
        if (block) {
            mpi_probe_backoff(0, CMD_TAG, group(m), &st);
            flag = 1;
        } else {
            MPI_CHECK(MPI_Iprobe(0, CMD_TAG, group(m), &flag, &st));
        }
        if (!flag) return n;
        n++;
        if (serve_one(m, &st) == CMD_END) {
            m->ended = !block;
            return n;
        }
    }
}

/* ---- lifetime ---- */

struct cpu_tp_model *cpu_tp_model_create(struct device *d, int leader)
{
    const struct rollout_config *r = &d->a.cfg->rollout;
    struct cpu_tp_model *m = xcalloc(1, sizeof *m);
    m->d = d;
    m->leader = leader;
    m->n_slots = r->slots;
    m->max_tokens = r->max_tokens;
    m->version = d->version;
    const struct tfm_tp *tp = &d->sh.tp;
    size_t rows = (size_t)(r->max_tokens > r->slots ? r->max_tokens : r->slots);
    if (d->gpu) {
        char err[1024];
        m->gc = cpu_gpu_comm(d);
        const uint16_t *held = cpu_stage16_held(d); /* bf16 weights sh.p lags */
        m->gm = held ? gpu_model_upload_bf16(d->gpu, &tp->local, held, err, sizeof err)
                     : gpu_model_upload(d->gpu, &tp->local, cpu_live_params(d), err, sizeof err);
        d->gs.gm = m->gm; /* GPU-to-GPU syncs land there (cpu_gsync.c) */
        if (m->gm) cpu_syncbuf_make(d); /* before the KV pool takes the free memory */
        if (m->gm)
            m->gd = gpu_decoder_create_tp(m->gm, tp, m->gc, r->slots, r->max_tokens, 128, 0, err,
                                          sizeof err);
        if (!m->gd) FATAL("rank %d: the GPU rollout engine: %s", d->a.rank, err);
        LOG_D("rank %d: GPU rollout engine of shard (TP %d, %d): %.1f MB of GPU memory",
              d->a.rank, tp->t, tp->rank, (double)gpu_decoder_bytes(m->gd) / 1e6);
        m->keys = xmalloc(rows * sizeof *m->keys);
        m->positions = xmalloc(rows * sizeof *m->positions);
    } else {
        m->dec = tfm_decoder_create_tp(tp, cpu_live_params(d), r->slots, r->max_tokens, 128);
    }
    size_t Vl = (size_t)(tp->v1 - tp->v0);
    m->logits = xmalloc((size_t)r->slots * Vl * sizeof *m->logits);
    /* the sampler's scratch for any mode (sampler.h: at most 2 Vl + 6 V + 6 t + 1) */
    size_t scratch = 2 * Vl + 6 * (size_t)tp->full.vocab_size + 6 * (size_t)tp->t + 1;
    m->scratch = xmalloc(scratch * sizeof *m->scratch);
    m->slots = xmalloc(rows * sizeof *m->slots);
    m->tokens = xmalloc(rows * sizeof *m->tokens);
    m->tok = xmalloc(rows * sizeof *m->tok);
    m->lp = xmalloc(rows * sizeof *m->lp);
    m->smp = xmalloc(rows * sizeof *m->smp);
    m->rm = (struct rollout_model){&tp_ops, m, d->mc.vocab_size};
    return m;
}

const struct rollout_model *cpu_tp_model_ops(struct cpu_tp_model *m) { return &m->rm; }

void cpu_tp_model_free(struct cpu_tp_model *m)
{
    if (!m) return;
    if (m->dec) tfm_decoder_free(m->dec);
    gpu_decoder_free(m->gd);
    if (m->gm && m->d->gs.gm == m->gm) {
        cpu_stage16_fetch(m->d); /* a GPU-to-GPU sync's weights, home before they go */
        cpu_syncbuf_free(m->d);
        m->d->gs.gm = NULL;
    }
    gpu_model_free(m->gm);
    free(m->keys);
    free(m->positions);
    free(m->logits);
    free(m->scratch);
    free(m->slots);
    free(m->tokens);
    free(m->tok);
    free(m->lp);
    free(m->smp);
    wire_buf_free(&m->msg);
    free(m);
}
