/*
 * `libra sft CONFIG`: the supervised warm start (single process, no mpirun).
 *
 * The model (model.checkpoint -- an HDF5 model file, a run checkpoint directory or a
 * Hugging Face directory -- or a fresh byte-level Llama of the model.* shapes)
 * learns the scripted expert's demonstrations (env_demo) of training problems
 * 0, 1, 2, ... of the environment env.*: step k takes the next sft.batch_size
 * problems in order. A demonstration sequence is the prompt followed by the expert's
 * conversation; the loss is the mean negative log-likelihood of the expert-written
 * tokens (mask 1) over the batch,
 *     J = - sum_t mask_t log p(x_t | x_<t) / (mask-1 tokens in the batch),
 * never of the prompt or the tool payloads. AdamW: peak sft.lr, linear warm-up of
 * sft.warmup_steps then cosine decay to 0.1 x lr at sft.steps; betas 0.9 / 0.95,
 * eps 1e-8, no weight decay, gradient-norm clip 1.0 (fixed for the warm start; the
 * train.* optimizer keys belong to the RL stage).
 *
 * Every sft.eval_interval steps and at the end: a greedy evaluation (episode_run on
 * the held-out problems 0 .. sft.eval_size-1 with the rollout.* budgets) prints
 * accuracy, answered and tool-call rates, and the model (no optimizer state) is
 * written to sft.out (atomic: tfm_save, tagged with the run name and the Hugging Face
 * directory the model came from, if any), so a crash loses at most one interval.
 * sft.out is relative to the working directory; missing directories are created.
 * A progress line (step, loss, lr, gradient norm, tokens/s, s/step, ETA) is printed
 * every run.progress_interval_s seconds. Demonstrations that do not fit the model's
 * max_position are skipped (counted, one warning).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libra/adamw.h"
#include "libra/cli.h"
#include "libra/config.h"
#include "libra/driver.h"
#include "libra/env.h"
#include "libra/env_setup.h"
#include "libra/episode.h"
#include "libra/log.h"
#include "libra/model_load.h"
#include "libra/model_vocab.h"
#include "libra/tfm.h"
#include "libra/tfm_io.h"

#define SFT_TRANSCRIPTS 2     /* eval episodes printed after the final evaluation */
#define SFT_MAX_SKIPS 1000    /* demonstrations in a row that may not fit */

/* A packed batch of demonstrations (tfm_batch arrays, grown on demand). */
struct sft_batch {
    int n_seq, n_tok;
    int64_t n_loss;         /* mask-1 targets */
    int *seq_len;           /* (S) */
    int32_t *tokens;        /* (T) seq[0 .. n-2] of each sequence */
    int32_t *targets;       /* (T) seq[1 .. n-1] */
    float *weights;         /* (T) mask of the target / n_loss */
    size_t cap_seq, cap_tokens, cap_targets, cap_weights;
};

/* Everything the command holds; freed in reverse by sft_free. */
struct sft_run {
    struct libra_config *cfg;
    const struct vocab *vocab; /* the model's tokenizer and format */
    struct env env;
    int env_ready;
    struct tfm_config mc;
    struct tfm_params p, g;
    char hf_source[4096];   /* the Hugging Face directory the model came from, or "" */
    struct adamw opt;
    struct tfm_state *state;
    int state_cap;          /* tokens the state was sized for */
    struct sft_batch b;
    int32_t *seq;           /* (max_position) one demonstration */
    uint8_t *mask;          /* (max_position) */
    int64_t next_problem;   /* data cursor: the next training problem */
    int64_t skipped;
};

/* Prints "libra: sft: MESSAGE" to stderr; returns -1. */
__attribute__((format(printf, 1, 2))) static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("libra: sft: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -1;
}

/* mkdir -p of the directory part of path, then checks a file can be written there. */
static int check_output(const char *path)
{
    char dir[CFG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    for (char *p = dir + 1;; p++) {
        char c = *p;
        if (c != '/' && c != '\0') continue;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return fail("sft.out: cannot create directory '%s': %s (fix the path or its "
                        "permissions)", dir, strerror(errno));
        *p = c;
        if (c == '\0') break;
    }
    /* A file created and removed next to it: the check that also holds for root. */
    char probe[CFG_PATH_MAX + 32];
    snprintf(probe, sizeof probe, "%s.probe-%ld", path, (long)getpid());
    FILE *f = fopen(probe, "w");
    if (!f)
        return fail("sft.out: cannot write in directory '%s': %s (set sft.out elsewhere)", dir,
                    strerror(errno));
    fclose(f);
    if (remove(probe) != 0)
        return fail("sft.out: cannot remove the probe file '%s': %s", probe, strerror(errno));
    return 0;
}

static int setup_env(struct sft_run *r)
{
    const struct libra_config *cfg = r->cfg;
    if (strcmp(cfg->env.name, "calc") != 0 && strcmp(cfg->env.name, "search") != 0)
        return fail("env.name = \"%s\": libra sft needs an environment with demonstrations "
                    "(calc or search)", cfg->env.name);
    struct env_params ep;
    env_params_from_config(cfg, &ep);
    char err[1024];
    r->vocab = model_vocab_open(&cfg->model, err, sizeof err);
    if (!r->vocab) return fail("%s", err);
    ep.vocab = r->vocab;
    if (env_init(&r->env, &ep, err, sizeof err)) return fail("env: %s", err);
    r->env_ready = 1;
    return 0;
}

static int setup_model(struct sft_run *r)
{
    const struct model_config *m = &r->cfg->model;
    char err[1024];
    if (m->checkpoint[0]) {
        struct model_source *src = xmalloc(sizeof *src);
        int rc = model_load(m->checkpoint, &r->mc, &r->p, NULL, src, err, sizeof err);
        snprintf(r->hf_source, sizeof r->hf_source, "%s", src->hf_dir);
        free(src);
        if (rc) return fail("model.checkpoint: %s", err);
        if (r->mc.vocab_size < r->vocab->size)
            return fail("model.checkpoint '%s': vocabulary %d is smaller than its tokenizer's "
                        "%d (%s format)", m->checkpoint, r->mc.vocab_size, (int)r->vocab->size,
                        r->vocab->name);
    } else {
        r->mc = (struct tfm_config){
            .family = TFM_LLAMA, .vocab_size = r->vocab->size, .hidden_size = m->hidden_size,
            .n_layers = m->n_layers, .n_heads = m->n_heads, .n_kv_heads = m->n_kv_heads,
            .head_dim = m->head_dim, .intermediate_size = m->intermediate_size,
            .max_position_embeddings = m->max_position, .rms_norm_eps = 1e-5f,
            .rope_theta = 10000.0f, .tie_word_embeddings = 0, .attention_bias = 0, .qk_norm = 0};
        if (tfm_config_check(&r->mc, err, sizeof err))
            return fail("model: %s (check the model.* shapes)", err);
        tfm_params_alloc(&r->p, &r->mc);
        tfm_params_init_random(&r->p, &r->mc, r->cfg->run.seed, (float)m->init_std);
    }
    if (r->cfg->rollout.max_tokens > r->mc.max_position_embeddings)
        return fail("rollout.max_tokens = %d exceeds the model's max_position %d (lower "
                    "rollout.max_tokens)", r->cfg->rollout.max_tokens,
                    r->mc.max_position_embeddings);
    tfm_params_alloc(&r->g, &r->mc);
    const struct sft_config *s = &r->cfg->sft;
    struct adamw_config ac = {(float)s->lr, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, LR_COSINE,
                              s->warmup_steps, s->steps, 0.1f};
    adamw_init(&r->opt, &ac, r->p.n);
    r->seq = xmalloc((size_t)r->mc.max_position_embeddings * sizeof *r->seq);
    r->mask = xmalloc((size_t)r->mc.max_position_embeddings);
    return 0;
}

/* The next demonstration that fits max_position into r->seq / r->mask; its length. */
static int next_demo(struct sft_run *r)
{
    int cap = r->mc.max_position_embeddings;
    for (int tries = 0; tries < SFT_MAX_SKIPS; tries++) {
        struct env_problem pr;
        int64_t i = r->next_problem++;
        env_problem(&r->env, ENV_TRAIN, i, &pr);
        int np = env_prompt_tokens(&r->env, &pr, r->seq, cap);
        int nd = np < cap ? env_demo(&r->env, &pr, r->cfg->run.seed, r->seq + np, r->mask + np,
                                     cap - np)
                          : -1;
        if (nd > 0 && np + nd >= 2) {
            memset(r->mask, 0, (size_t)np);
            return np + nd;
        }
        if (r->skipped++ == 0)
            LOG_W("sft: the demonstration of training problem %lld does not fit "
                  "model.max_position = %d tokens: skipped (later ones counted silently)",
                  (long long)i, cap);
    }
    FATAL_INPUT("sft: %d demonstrations in a row do not fit model.max_position = %d tokens "
                "(raise model.max_position or make the problems smaller)", SFT_MAX_SKIPS, cap);
}

/* Packs the next sft.batch_size demonstrations into r->b. */
static void build_batch(struct sft_run *r)
{
    struct sft_batch *b = &r->b;
    b->n_seq = b->n_tok = 0;
    b->n_loss = 0;
    for (int k = 0; k < r->cfg->sft.batch_size; k++) {
        int n = next_demo(r);
        XGROW(b->seq_len, b->cap_seq, (size_t)b->n_seq + 1);
        size_t need = (size_t)b->n_tok + (size_t)n - 1;
        XGROW(b->tokens, b->cap_tokens, need);
        XGROW(b->targets, b->cap_targets, need);
        XGROW(b->weights, b->cap_weights, need);
        for (int t = 0; t + 1 < n; t++) {
            b->tokens[b->n_tok + t] = r->seq[t];
            b->targets[b->n_tok + t] = r->seq[t + 1];
            b->weights[b->n_tok + t] = r->mask[t + 1];
            b->n_loss += r->mask[t + 1];
        }
        b->seq_len[b->n_seq++] = n - 1;
        b->n_tok += n - 1;
    }
    float inv = b->n_loss > 0 ? 1.0f / (float)b->n_loss : 0.0f;
    for (int t = 0; t < b->n_tok; t++) b->weights[t] *= inv;
}

/* One optimizer step on the next batch; returns the loss, sets *gnorm. */
static double train_step(struct sft_run *r, double *gnorm)
{
    build_batch(r);
    if (r->b.n_tok > r->state_cap) { /* grow the activation state to the largest batch */
        tfm_state_free(r->state);
        r->state_cap = r->b.n_tok + r->b.n_tok / 4;
        r->state = tfm_state_create(&r->mc, r->state_cap);
    }
    struct tfm_batch tb = {.n_seq = r->b.n_seq, .seq_len = r->b.seq_len, .tokens = r->b.tokens,
                           .targets = r->b.targets, .weights = r->b.weights,
                           .temperature = 1.0f, .entropy_weights = NULL};
    memset(r->g.mem, 0, r->g.n * sizeof *r->g.mem);
    double loss = tfm_backward(&r->mc, &r->p, r->state, &tb, &r->g);
    *gnorm = adamw_step(&r->opt, r->p.mem, r->g.mem);
    return loss;
}

/* Greedy evaluation on the held-out problems; prints one line (and transcripts). */
static void evaluate(struct sft_run *r, int step, int n_transcripts)
{
    const struct libra_config *cfg = r->cfg;
    if (cfg->sft.eval_size <= 0) return;
    struct episode_config ec = {cfg->rollout.max_turns, cfg->rollout.max_tokens_per_turn,
                                cfg->rollout.max_tokens,
                                {0.0f, 1.0f, 0, cfg->run.seed}, cfg->rollout.slots};
    struct episode_stats st;
    double t0 = wall_time();
    episode_run(&r->env, &r->mc, &r->p, &ec, ENV_EVAL, 0, cfg->sft.eval_size, &st,
                n_transcripts > 0 ? stdout : NULL, n_transcripts);
    double n = st.n > 0 ? st.n : 1;
    printf("sft eval step %d: accuracy %.3f (%d/%d)  answered %.3f  tool calls/episode %.2f  "
           "tool failures %.3f  reward %.3f  gen tokens/episode %.1f  (%.1f s)\n",
           step, st.correct / n, st.correct, st.n, st.answered / n, (double)st.tool_calls / n,
           st.tool_calls > 0 ? (double)st.tool_failures / (double)st.tool_calls : 0.0,
           st.reward_sum / n, (double)st.gen_tokens / n, wall_time() - t0);
    fflush(stdout);
}

static int save_model(struct sft_run *r)
{
    char err[1024];
    const struct tfm_tag tags[2] = {{TFM_TAG_HF_SOURCE, r->hf_source},
                                    {TFM_TAG_RUN_NAME, r->cfg->run.name}};
    if (tfm_save_tagged(r->cfg->sft.out, &r->mc, &r->p, NULL, tags, 2, err, sizeof err))
        return fail("sft.out: %s", err);
    printf("sft: model written to %s\n", r->cfg->sft.out);
    fflush(stdout);
    return 0;
}

static void format_eta(double s, char *out, size_t n)
{
    if (s >= 3600) snprintf(out, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else if (s >= 60) snprintf(out, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(out, n, "%.0fs", s);
}

static int train(struct sft_run *r)
{
    const struct sft_config *s = &r->cfg->sft;
    double t_start = wall_time(), t_last = t_start, loss_sum = 0, gnorm = 0;
    int64_t tok_since = 0;
    int steps_since = 0;
    for (int step = 1; step <= s->steps; step++) {
        loss_sum += train_step(r, &gnorm);
        tok_since += r->b.n_tok;
        steps_since++;
        double now = wall_time();
        if (now - t_last >= r->cfg->run.progress_interval_s || step == s->steps) {
            char eta[32];
            double per_step = (now - t_start) / step;
            format_eta(per_step * (s->steps - step), eta, sizeof eta);
            printf("sft step %d/%d  loss %.4f  lr %.3g  |g| %.3f  tokens/s %.0f  s/step %.3f  "
                   "ETA %s\n", step, s->steps, loss_sum / steps_since,
                   (double)adamw_lr(&r->opt.c, step), gnorm,
                   tok_since / (now - t_last > 0 ? now - t_last : 1e-9),
                   (now - t_last) / steps_since, eta);
            fflush(stdout);
            t_last = now;
            loss_sum = 0;
            tok_since = 0;
            steps_since = 0;
        }
        if (step % s->eval_interval == 0 || step == s->steps) {
            evaluate(r, step, step == s->steps ? SFT_TRANSCRIPTS : 0);
            if (save_model(r)) return -1;
            t_last = wall_time(); /* the next rate excludes the evaluation */
        }
    }
    if (r->skipped)
        printf("sft: %lld demonstrations skipped (longer than max_position)\n",
               (long long)r->skipped);
    printf("sft: %d steps, %lld training problems, %.1f s\n", s->steps,
           (long long)r->next_problem, wall_time() - t_start);
    return 0;
}

static void sft_free(struct sft_run *r)
{
    free(r->mask);
    free(r->seq);
    free(r->b.seq_len);
    free(r->b.tokens);
    free(r->b.targets);
    free(r->b.weights);
    tfm_state_free(r->state);
    adamw_free(&r->opt);
    tfm_params_free(&r->g);
    tfm_params_free(&r->p);
    if (r->env_ready) env_free(&r->env);
    model_vocab_close(r->vocab);
    free(r->cfg);
}

static const struct cli_cmd sft_cmd = {
    "libra sft", "libra sft CONFIG",
    "Supervised warm start: trains the CPU model of CONFIG (device.type = \"cpu\") on the\n"
    "scripted expert's demonstrations of its environment (the sft.* keys) and writes the\n"
    "model file sft.out. Single process, no mpirun.\n",
    NULL, "CONFIG", 1, 1, 0};

int cmd_sft(int argc, char **argv)
{
    struct cli cli;
    if (cli_operands(&cli, &sft_cmd, argc, argv) == CLI_EXIT) return cli.rc;
    const char *path = cli.args[0];
    struct sft_run r;
    memset(&r, 0, sizeof r);
    r.cfg = xcalloc(1, sizeof *r.cfg);
    char err[1024];
    int rc = 1;
    if (config_load(path, r.cfg, err, sizeof err)) {
        fprintf(stderr, "libra: %s\n", err);
        goto out;
    }
    int level = log_parse_level(r.cfg->run.log_level);
    if (level >= 0) log_set_level((enum log_level)level);
    if (strcmp(r.cfg->device.type, "cpu") != 0) {
        fail("%s: device.type = \"%s\": libra sft runs the CPU model (set device.type = \"cpu\")",
             path, r.cfg->device.type);
        goto out;
    }
    if (check_output(r.cfg->sft.out) || setup_env(&r) || setup_model(&r)) goto out;
    printf("sft: %s, model %zu parameters (C %d, L %d, H %d, K %d, D %d, F %d), %d steps x %d "
           "demonstrations, lr %g, output %s\n", env_kind_name(r.env.p.kind), r.p.n,
           r.mc.hidden_size, r.mc.n_layers, r.mc.n_heads, r.mc.n_kv_heads, r.mc.head_dim,
           r.mc.intermediate_size, r.cfg->sft.steps, r.cfg->sft.batch_size, r.cfg->sft.lr,
           r.cfg->sft.out);
    fflush(stdout);
    if (train(&r)) goto out;
    rc = 0;
out:
    sft_free(&r);
    return rc;
}
