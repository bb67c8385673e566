/*
 * Commands on a model (single process, no mpirun). MODEL is an HDF5 model file, a run
 * checkpoint directory or a Hugging Face directory (libra/model_load.h):
 *   libra score MODEL TOKENS_FILE
 *       TOKENS_FILE holds whitespace-separated token ids t0 t1 ... tn; prints one line
 *       per token from t1 on: log p(t_i | t_0 .. t_{i-1}) (natural log, temperature 1).
 *   libra logits MODEL TOKENS_FILE OUT.h5
 *       the raw logits of one sequence (TOKENS_FILE as for score) into the HDF5 file
 *       OUT.h5: /logits float32 (T, V), row t the next-token logits after t_0 .. t_t
 *       (temperature 1, the training path's forward), and /tokens int32 (T). Written
 *       atomically. For parity checks against a reference (tests/hf_parity.sh).
 *   libra generate MODEL [--prompt TEXT | --prompt-tokens FILE] [--max-new N]
 *                  [--temperature T] [--top-p P] [--top-k K] [--seed S]
 *                  [--chat] [--tokenizer DIR] [--device cpu|cuda]
 *       prints the continuation (specials spelled out); greedy when T = 0. --device
 *       cuda runs the GPU engine on GPU 0 (bf16 weights; sampling on the GPU). The model's
 *       own tokenizer (model_vocab.h; --tokenizer overrides it) encodes the prompt, its
 *       special spellings ("<|bos|>", "<|im_start|>") as their ids; with --chat the
 *       prompt is a user turn in the model's chat format. Stops at the end of text
 *       (<|eos|>, <|im_end|>, ...) or after N new tokens (default 64). No <|bos|> is
 *       added: put it in the prompt if the model expects one.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/cli.h"
#include "libra/driver.h"
#include "libra/gpu_decode.h"
#include "libra/h5atomic.h"
#include "libra/h5try.h"
#include "libra/log.h"
#include "libra/model_load.h"
#include "libra/model_vocab.h"
#include "libra/sampler.h"
#include "libra/tfm.h"
#include "libra/tfm_decode.h"

/* Reads whitespace-separated token ids in [0, V); -1 with a message on bad input. */
static int read_token_file(const char *path, int V, int32_t **out, int *n)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "libra: %s: cannot read: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 0, len = 0;
    int32_t *ids = NULL;
    char word[64];
    int rc = 0;
    while (fscanf(f, "%63s", word) == 1) {
        char *end = NULL;
        errno = 0;
        long v = strtol(word, &end, 10);
        if (*end || errno || v < 0 || v >= V) {
            fprintf(stderr, "libra: %s: token %zu: '%s' is not a token id in [0, %d)\n", path,
                    len + 1, word, V);
            rc = -1;
            break;
        }
        XGROW(ids, cap, len + 1);
        ids[len++] = (int32_t)v;
    }
    fclose(f);
    if (rc == 0 && len == 0) {
        fprintf(stderr, "libra: %s: no token ids in the file\n", path);
        rc = -1;
    }
    if (rc) {
        free(ids);
        return -1;
    }
    *out = ids;
    *n = (int)len;
    return 0;
}

static int load_model(const char *path, struct tfm_config *c, struct tfm_params *p)
{
    char err[1024];
    if (model_load(path, c, p, NULL, NULL, err, sizeof err) == 0) return 0;
    fprintf(stderr, "libra: %s\n", err);
    return -1;
}

/* The model at path and the token ids of tokens_file (within its vocabulary); on
 * failure, -1 with the message printed and nothing left allocated. */
static int load_with_tokens(const char *path, const char *tokens_file, struct tfm_config *c,
                            struct tfm_params *p, int32_t **tok, int *n)
{
    if (load_model(path, c, p)) return -1;
    if (read_token_file(tokens_file, c->vocab_size, tok, n)) {
        tfm_params_free(p);
        return -1;
    }
    return 0;
}

#define MODEL_HELP \
    "  MODEL        an HDF5 model file, a run checkpoint directory or a Hugging Face one\n" \
    "  TOKENS_FILE  token ids, separated by white space\n"

static const struct cli_cmd score_cmd = {
    "libra score", "libra score MODEL TOKENS_FILE",
    "Prints log p(t_i | t_<i) for each token of TOKENS_FILE after the first, one a line.\n"
    MODEL_HELP, NULL, "MODEL TOKENS_FILE", 2, 2, 0};

int cmd_score(int argc, char **argv)
{
    struct cli cli;
    if (cli_operands(&cli, &score_cmd, argc, argv) == CLI_EXIT) return cli.rc;
    struct tfm_config c;
    struct tfm_params p;
    int32_t *tok = NULL;
    int n = 0;
    if (load_with_tokens(cli.args[0], cli.args[1], &c, &p, &tok, &n)) return 1;
    int32_t *tgt = xmalloc((size_t)n * sizeof *tgt);
    for (int i = 0; i < n; i++) tgt[i] = i + 1 < n ? tok[i + 1] : -1;
    float *lp = xmalloc((size_t)n * sizeof *lp);
    struct tfm_batch b = {1, &n, tok, tgt, NULL, 1.0f, NULL};
    struct tfm_state *s = tfm_state_create(&c, n);
    tfm_forward(&c, &p, s, &b, lp, NULL, NULL);
    for (int i = 0; i + 1 < n; i++) printf("%.6f\n", lp[i]);
    tfm_state_free(s);
    free(lp);
    free(tgt);
    free(tok);
    tfm_params_free(&p);
    return 0;
}

/* OUT.h5 with /logits (T, V) float32 and /tokens (T) int32; 0 or -1 + message. */
static int write_logits(const char *path, const float *logits, const int32_t *tok, int T, int V,
                        char *err, size_t errlen)
{
    struct h5quiet q;
    struct h5atomic a;
    hid_t space = H5I_INVALID_HID, dset = H5I_INVALID_HID;
    int rc = -1;
    h5_quiet_begin(&q);
    hid_t file = h5atomic_create(&a, path, sizeof(float) * (size_t)T * V + 4096,
                                 H5F_LIBVER_EARLIEST, err, errlen);
    if (file < 0) goto fail;
    hsize_t dims[2] = {(hsize_t)T, (hsize_t)V};
    H5TRY(space = H5Screate_simple(2, dims, NULL));
    H5TRY(dset = H5Dcreate2(file, "logits", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT,
                            H5P_DEFAULT));
    H5TRY(H5Dwrite(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, logits));
    H5CLOSE(dset, H5Dclose);
    H5CLOSE(space, H5Sclose);
    H5TRY(space = H5Screate_simple(1, dims, NULL));
    H5TRY(dset = H5Dcreate2(file, "tokens", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT,
                            H5P_DEFAULT));
    H5TRY(H5Dwrite(dset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, tok));
    H5CLOSE(dset, H5Dclose);
    H5CLOSE(space, H5Sclose);
    if (h5atomic_commit(&a, NULL, 0, err, errlen)) goto fail;
    rc = 0;
fail:
    close_id(&dset, H5Dclose);
    close_id(&space, H5Sclose);
    h5atomic_free(&a);
    h5_quiet_end(&q);
    return rc;
}

static const struct cli_cmd logits_cmd = {
    "libra logits", "libra logits MODEL TOKENS_FILE OUT.h5",
    "Writes the logits of the sequence TOKENS_FILE to OUT.h5: /logits (T, V) float32 and\n"
    "/tokens (T).\n"
    MODEL_HELP, NULL, "MODEL TOKENS_FILE OUT.h5", 3, 3, 0};

int cmd_logits(int argc, char **argv)
{
    struct cli cli;
    if (cli_operands(&cli, &logits_cmd, argc, argv) == CLI_EXIT) return cli.rc;
    const char *model = cli.args[0], *out = cli.args[2];
    struct tfm_config c;
    struct tfm_params p;
    int32_t *tok = NULL;
    int n = 0;
    if (load_with_tokens(model, cli.args[1], &c, &p, &tok, &n)) return 1;
    int32_t *tgt = xmalloc((size_t)n * sizeof *tgt);
    for (int i = 0; i < n; i++) tgt[i] = -1; /* logits only */
    float *logits = xmalloc((size_t)n * c.vocab_size * sizeof *logits);
    float *lp = xmalloc((size_t)n * sizeof *lp);
    struct tfm_batch b = {1, &n, tok, tgt, NULL, 1.0f, NULL};
    struct tfm_state *s = tfm_state_create(&c, n);
    tfm_forward(&c, &p, s, &b, lp, NULL, logits);
    char err[1024];
    int rc = write_logits(out, logits, tok, n, c.vocab_size, err, sizeof err);
    if (rc)
        fprintf(stderr, "libra: logits: %s\n", err);
    else
        printf("%s: logits (%d, %d) of %s (rope %s)\n", out, n, c.vocab_size, model,
               tfm_rope_type_name(c.rope_type));
    tfm_state_free(s);
    free(lp);
    free(logits);
    free(tgt);
    free(tok);
    tfm_params_free(&p);
    return rc ? 1 : 0;
}

struct gen_options {
    const char *prompt, *prompt_file, *tokenizer;
    int chat;
    int cuda; /* --device cuda: the GPU engine (include/libra/gpu_decode.h) */
    int max_new;
    struct sampler_config sc;
};

static const struct option generate_opts[] = {
    {"prompt", required_argument, NULL, 'p'},
    {"prompt-tokens", required_argument, NULL, 'P'},
    {"max-new", required_argument, NULL, 'n'},
    {"temperature", required_argument, NULL, 't'},
    {"top-p", required_argument, NULL, 'u'},
    {"top-k", required_argument, NULL, 'k'},
    {"seed", required_argument, NULL, 's'},
    {"chat", no_argument, NULL, 'c'},
    {"tokenizer", required_argument, NULL, 'T'},
    {"device", required_argument, NULL, 'd'},
    {0}};
static const struct cli_cmd generate_cmd = {
    "libra generate",
    "libra generate MODEL [--prompt TEXT | --prompt-tokens FILE] [--max-new N]\n"
    "                      [--temperature T] [--top-p P] [--top-k K] [--seed S] [--chat]\n"
    "                      [--tokenizer DIR] [--device cpu|cuda]",
    "Continues a prompt with the model MODEL (an HDF5 model file, a run checkpoint\n"
    "directory or a Hugging Face directory) in its own tokenizer; prints the text.\n"
    "  --prompt TEXT         the prompt; the tokenizer's special spellings are their ids\n"
    "  --prompt-tokens FILE  the prompt as token ids\n"
    "  --max-new N           tokens to generate, 1 .. 1000000 (default 64)\n"
    "  --temperature T       0 (greedy, the default) .. 100\n"
    "  --top-p P             nucleus sampling, (0, 1] (default 1: off)\n"
    "  --top-k K             the K likeliest tokens only (default 0: off)\n"
    "  --seed S              the sampling seed (default 1)\n"
    "  --chat                the prompt as a user turn in the model's chat format\n"
    "  --tokenizer DIR       the tokenizer of DIR instead of the model's\n"
    "  --device cpu|cuda     cuda: the GPU engine on GPU 0\n",
    generate_opts, "MODEL", 1, 1, 0};

/* 0, or CLI_EXIT with cli->rc the exit code (help, version, a usage error). */
static int parse_generate(struct cli *cli, int argc, char **argv, struct gen_options *o)
{
    *o = (struct gen_options){NULL, NULL, NULL, 0, 0, 64, {0.0f, 1.0f, 0, 1}};
    double x;
    int ch = 0, bad = 0;
    cli_begin(cli, &generate_cmd, argc, argv);
    while (!bad && (ch = cli_next(cli)) > 0) {
        switch (ch) {
        case 'p': o->prompt = cli->arg; break;
        case 'P': o->prompt_file = cli->arg; break;
        case 'T': o->tokenizer = cli->arg; break;
        case 'c': o->chat = 1; break;
        case 'd': bad = (o->cuda = cli_choice(cli, "cpu|cuda")) < 0; break;
        case 'n': bad = cli_int(cli, 1, 1000000, &o->max_new); break;
        case 'k': bad = cli_int(cli, 0, 1 << 30, &o->sc.top_k); break;
        case 's': bad = cli_u64(cli, &o->sc.seed); break;
        case 't':
            bad = cli_double(cli, 0, 100, &x);
            o->sc.temperature = (float)x;
            break;
        default: /* 'u' */
            bad = cli_double_open(cli, 0, 1, &x);
            o->sc.top_p = (float)x;
            break;
        }
    }
    if (bad || ch == CLI_EXIT) return CLI_EXIT;
    if (o->prompt && o->prompt_file)
        return cli_error(cli, "--prompt and --prompt-tokens exclude each other"), CLI_EXIT;
    if (o->chat && o->prompt_file)
        return cli_error(cli, "--chat goes with --prompt, not --prompt-tokens"), CLI_EXIT;
    return 0;
}

/* The prompt's ids: the token file, the text in the model's chat format (--chat), or
 * the text with the tokenizer's special spellings as their ids. */
static int gen_prompt(const struct gen_options *o, const struct vocab *v, int V, int32_t **out,
                      int *n)
{
    if (o->prompt_file) return read_token_file(o->prompt_file, V, out, n);
    const char *text = o->prompt ? o->prompt : "";
    size_t len = strlen(text);
    size_t need = o->chat ? v->prompt(v->ctx, NULL, NULL, text, len, NULL, 0)
                          : v->encode_markup(v->ctx, text, len, NULL, 0);
    if (need == 0) {
        fprintf(stderr, "libra: generate: the prompt is empty (give --prompt TEXT; the "
                        "byte-level models start with <|bos|>)\n");
        return -1;
    }
    *out = xmalloc(need * sizeof **out);
    *n = (int)(o->chat ? v->prompt(v->ctx, NULL, NULL, text, len, *out, need)
                       : v->encode_markup(v->ctx, text, len, *out, need));
    return 0;
}

/* Prints token t's text; 1 if it ends the text. */
static int emit(const struct vocab *v, int32_t t)
{
    if (v->ends_text(v->ctx, t)) return 1;
    char buf[64];
    size_t len = v->decode(v->ctx, &t, 1, buf, sizeof buf);
    fwrite(buf, 1, len < sizeof buf ? len : sizeof buf, stdout);
    return 0;
}

static int generate_cpu(const struct gen_options *o, const struct vocab *v,
                        const struct tfm_config *c, const struct tfm_params *p,
                        const int32_t *prompt, int n)
{
    struct tfm_decoder *d = tfm_decoder_create(c, p, 1, n + o->max_new + 1, 64);
    float *logits = xmalloc((size_t)c->vocab_size * sizeof *logits);
    float *scratch = xmalloc(2 * (size_t)c->vocab_size * sizeof *scratch);
    if (tfm_decoder_prefill(d, 0, prompt, n, logits)) FATAL("prefill of %d tokens failed", n);
    for (int i = 0; i < o->max_new; i++) {
        float lp;
        int32_t t = sampler_sample(&o->sc, logits, c->vocab_size, 0, n + i, &lp, scratch);
        int slot = 0;
        if (emit(v, t) || tfm_decoder_step(d, &slot, &t, 1, logits)) break;
    }
    putchar('\n');
    free(logits);
    free(scratch);
    tfm_decoder_free(d);
    return 0;
}

/* The same on GPU 0: weights in bf16, sampling on the GPU with sampler_sample's keys
 * (the tokens can differ from the CPU's where the bf16 activations move the logits). */
static int generate_gpu(const struct gen_options *o, const struct vocab *v,
                        const struct tfm_config *c, const struct tfm_params *p,
                        const int32_t *prompt, int n)
{
    char err[2048];
    const struct cuda_api *api = gpu_open(0, err, sizeof err);
    struct gpu_model *m = api ? gpu_model_upload(api, c, p, err, sizeof err) : NULL;
    struct gpu_decoder *d = m ? gpu_decoder_create(m, 1, n + o->max_new + 1, 512, 0, err,
                                                   sizeof err) : NULL;
    if (!d) {
        fprintf(stderr, "libra: generate --device cuda: %s\n", err);
        gpu_model_free(m);
        return 1;
    }
    if (gpu_decoder_prefill(d, 0, prompt, n, NULL)) FATAL("prefill of %d tokens failed", n);
    for (int i = 0; i < o->max_new; i++) {
        int64_t traj = 0, pos = n + i;
        int32_t t;
        gpu_decoder_sample(d, 1, &o->sc, &traj, &pos, &t, NULL);
        int slot = 0;
        if (emit(v, t) || gpu_decoder_step(d, &slot, &t, 1, NULL)) break;
    }
    putchar('\n');
    gpu_decoder_free(d);
    gpu_model_free(m);
    return 0;
}

int cmd_generate(int argc, char **argv)
{
    struct gen_options o;
    struct cli cli;
    if (parse_generate(&cli, argc, argv, &o)) return cli.rc;
    const char *model = cli.args[0];
    struct model_config mcfg;
    memset(&mcfg, 0, sizeof mcfg);
    snprintf(mcfg.checkpoint, sizeof mcfg.checkpoint, "%s", model);
    snprintf(mcfg.tokenizer, sizeof mcfg.tokenizer, "%s", o.tokenizer ? o.tokenizer : "");
    snprintf(mcfg.chat_format, sizeof mcfg.chat_format, "auto");
    char err[1024];
    const struct vocab *v = model_vocab_open(&mcfg, err, sizeof err);
    if (!v) {
        fprintf(stderr, "libra: generate: %s\n", err);
        return 1;
    }
    struct tfm_config c;
    struct tfm_params p;
    int32_t *prompt = NULL;
    int n = 0, rc = 1;
    if (load_model(model, &c, &p)) {
        model_vocab_close(v);
        return 1;
    }
    if (gen_prompt(&o, v, c.vocab_size, &prompt, &n)) goto out;
    if ((int64_t)n + o.max_new > c.max_position_embeddings) {
        int room = c.max_position_embeddings - n;
        if (room < 1)
            fprintf(stderr, "libra generate: the prompt's %d tokens fill the model's context of "
                    "%d tokens (max_position_embeddings): shorten the prompt\n", n,
                    c.max_position_embeddings);
        else
            fprintf(stderr, "libra generate: --max-new %d: the prompt's %d tokens and %d new "
                    "ones exceed the model's context of %d tokens (max_position_embeddings): "
                    "use --max-new %d or less\n", o.max_new, n, o.max_new,
                    c.max_position_embeddings, room);
        rc = 2;
        goto out;
    }
    rc = o.cuda ? generate_gpu(&o, v, &c, &p, prompt, n) : generate_cpu(&o, v, &c, &p, prompt, n);
out:
    free(prompt);
    tfm_params_free(&p);
    model_vocab_close(v);
    return rc;
}
