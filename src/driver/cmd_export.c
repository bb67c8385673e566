/*
 * `libra export CHECKPOINT OUTDIR [--dtype bf16|f16|f32] [--max-shard-size BYTES]
 *  [--tokenizer DIR]`: a run's model as a Hugging Face directory (single process).
 *
 * CHECKPOINT is a run checkpoint directory (ROOT/step-N: its model.h5), a checkpoint
 * root (ROOT, the run's run.checkpoint_dir: its newest complete checkpoint), an HDF5
 * model file (model.h5, sft.out) or a Hugging Face directory (to convert it to
 * another dtype or shard size). OUTDIR gets:
 *   model.safetensors or model-0000N-of-0000M.safetensors + index (bf16 by default;
 *   shards past --max-shard-size, default 5 GB as in transformers), config.json,
 *   generation_config.json (when bos / eos ids are known), the tokenizer files, and a
 *   README.md model card naming the run, the step, the libra version and the source.
 * Tokenizer files (tokenizer.json, tokenizer_config.json, special_tokens_map.json,
 * vocab.json, merges.txt, tokenizer.model, added_tokens.json, chat_template.jinja)
 * are copied from --tokenizer DIR, else from the Hugging Face directory the model
 * was imported from when the model file records it (tag libra_hf_source, written by
 * runs and libra sft that start from a Hugging Face directory). A model of libra's
 * byte-level vocabulary has no Hugging Face tokenizer: its bos / eos ids are written
 * and the card says so.
 *
 * OUTDIR must not exist or be an empty directory: an existing model is never
 * overwritten. Everything is written into OUTDIR.tmp-XXXXXX next to it (each file
 * fsync'd), which is renamed to OUTDIR at the end; a failure removes it.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp, realpath */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libra/afile.h"
#include "libra/checkpoint.h"
#include "libra/cli.h"
#include "libra/driver.h"
#include "libra/hf_model.h"
#include "libra/log.h"
#include "libra/model_load.h"
#include "libra/tokenizer.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0.1.0"
#endif

static const char *const tokenizer_files[] = {
    "tokenizer.json",  "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt",      "tokenizer.model",       "added_tokens.json",       "chat_template.jinja",
};
#define N_TOKENIZER_FILES (sizeof tokenizer_files / sizeof tokenizer_files[0])

static const struct option export_opts[] = {
    {"dtype", required_argument, NULL, 'd'},
    {"max-shard-size", required_argument, NULL, 's'},
    {"tokenizer", required_argument, NULL, 't'},
    {0}};
static const struct cli_cmd export_cmd = {
    "libra export",
    "libra export CHECKPOINT OUTDIR [--dtype bf16|f16|f32] [--max-shard-size BYTES]\n"
    "                    [--tokenizer DIR]",
    "Writes the model of CHECKPOINT as a Hugging Face directory OUTDIR (config.json,\n"
    "safetensors, the tokenizer's files, a README.md model card).\n"
    "  CHECKPOINT  a run checkpoint directory (ROOT/step-N), a checkpoint root (the newest\n"
    "              complete checkpoint under it), an HDF5 model file (model.h5, sft.out),\n"
    "              or a Hugging Face directory\n"
    "  OUTDIR      the Hugging Face directory to create (must not exist, or be empty)\n"
    "  --dtype     weights' dtype (default bf16, rounded to nearest even)\n"
    "  --max-shard-size  bytes per safetensors file before sharding (default 5GB; suffixes\n"
    "              KB MB GB = 10^3.., KiB MiB GiB = 2^10..)\n"
    "  --tokenizer DIR  copy the tokenizer files from DIR (default: the Hugging Face\n"
    "              directory the model was imported from, if the model file records it)\n",
    export_opts, "CHECKPOINT OUTDIR", 2, 2, 0};

struct export_opts {
    const char *in, *out, *tokenizer;
    enum st_dtype dtype;
    uint64_t max_shard;
};

/* Prints "libra: export: MESSAGE" to stderr; returns -1. */
__attribute__((format(printf, 1, 2))) static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("libra: export: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return -1;
}

/* 0, or CLI_EXIT with cli->rc the exit code (help, version, a usage error). */
static int parse_args(struct cli *cli, int argc, char **argv, struct export_opts *o)
{
    *o = (struct export_opts){NULL, NULL, NULL, ST_BF16, ST_DEFAULT_MAX_SHARD};
    static const enum st_dtype dtypes[] = {ST_BF16, ST_F16, ST_F32};
    int ch, d;
    cli_begin(cli, &export_cmd, argc, argv);
    while ((ch = cli_next(cli)) > 0) {
        if (ch == 'd') {
            if ((d = cli_choice(cli, "bf16|f16|f32")) < 0) return CLI_EXIT;
            o->dtype = dtypes[d];
        } else if (ch == 's') {
            if (cli_size(cli, &o->max_shard)) return CLI_EXIT;
        } else {
            o->tokenizer = cli->arg;
        }
    }
    if (ch == CLI_EXIT) return CLI_EXIT;
    o->in = cli->args[0];
    o->out = cli->args[1];
    return 0;
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *dir, const char *name)
{
    char p[PATH_MAX];
    struct stat st;
    int n = snprintf(p, sizeof p, "%s/%s", dir, name);
    return n > 0 && (size_t)n < sizeof p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* What the output directory holds now: 0 nothing (absent or empty), else -1 + message. */
static int check_outdir(const char *out)
{
    struct stat st;
    if (stat(out, &st) != 0) {
        if (errno == ENOENT) return 0;
        return fail("%s: %s", out, strerror(errno));
    }
    if (!S_ISDIR(st.st_mode)) return fail("%s exists and is not a directory: refusing to "
                                          "overwrite it (pick another OUTDIR)", out);
    if (exists(out, HF_CONFIG_NAME) || exists(out, ST_SINGLE_NAME) || exists(out, ST_INDEX_NAME))
        return fail("%s already holds a model: refusing to overwrite it (remove it, or "
                    "export to another OUTDIR)", out);
    DIR *d = opendir(out);
    if (!d) return fail("%s: cannot list: %s", out, strerror(errno));
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    closedir(d);
    if (n) return fail("%s is not empty (%d entries): export into a new or empty directory", out,
                       n);
    return 0;
}

/* Removes the temporary directory and the plain files in it. */
static void remove_tmp(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[PATH_MAX];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        int n = snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (n > 0 && (size_t)n < sizeof p) unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* Copies src to dst (atomic, fsync'd). */
static int copy_file(const char *src, const char *dst)
{
    int fd = open(src, O_RDONLY);
    if (fd < 0) return fail("%s: cannot read: %s", src, strerror(errno));
    struct afile f;
    char err[1024];
    if (afile_open(&f, dst, err, sizeof err)) {
        close(fd);
        return fail("%s", err);
    }
    char buf[1 << 16];
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            afile_abort(&f);
            return fail("%s: read error: %s", src, strerror(e));
        }
        if (r == 0) break;
        if (afile_write(&f, buf, (size_t)r, err, sizeof err)) {
            close(fd);
            afile_abort(&f);
            return fail("%s", err);
        }
    }
    close(fd);
    if (afile_commit(&f, err, sizeof err)) return fail("%s", err);
    return 0;
}

/* Resolves CHECKPOINT: a checkpoint root becomes its newest complete step-N; *step
 * gets N when the path is (or resolves to) a step-N directory, else -1. */
static int resolve_input(const char *in, char *out, size_t cap, int *step)
{
    *step = -1;
    snprintf(out, cap, "%s", in);
    if (is_dir(in) && !exists(in, HF_CONFIG_NAME) && !exists(in, "model.h5")) {
        int steps[1];
        int n = ckpt_list(in, steps, 1);
        if (n > 0) ckpt_dir_path(in, steps[0], 0, out, cap);
    }
    /* ROOT/step-00000120 (or ROOT/step-00000120/model.h5): the step */
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", out);
    size_t l = strlen(tmp);
    while (l > 1 && tmp[l - 1] == '/') tmp[--l] = '\0';
    if (l > 9 && strcmp(tmp + l - 9, "/model.h5") == 0) tmp[l - 9] = '\0';
    const char *base = strrchr(tmp, '/');
    base = base ? base + 1 : tmp;
    int s, used = 0;
    if (sscanf(base, "step-%d%n", &s, &used) == 1 && base[used] == '\0' && s >= 0) *step = s;
    return 0;
}

/* Which files of tokenizer_files dir has. */
static int tokenizer_count(const char *dir)
{
    int n = 0;
    for (size_t i = 0; i < N_TOKENIZER_FILES; i++) n += exists(dir, tokenizer_files[i]);
    return n;
}

static const char *family_name(int f)
{
    return f == TFM_QWEN3 ? "Qwen3" : f == TFM_QWEN2 ? "Qwen2" : "Llama";
}

static int write_readme(const char *tmp, const char *out, const struct export_opts *o,
                        const struct tfm_config *c, const struct model_source *src, int step,
                        int64_t opt_step, const char *tok_dir, const char *tok_note)
{
    char path[PATH_MAX], source[PATH_MAX], text[8192], steps[96];
    snprintf(path, sizeof path, "%s/README.md", tmp);
    if (!realpath(src->file, source)) snprintf(source, sizeof source, "%s", src->file);
    const char *name = strrchr(out, '/');
    name = name && name[1] ? name + 1 : out;
    if (step >= 0)
        snprintf(steps, sizeof steps, "step %d", step);
    else if (opt_step > 0)
        snprintf(steps, sizeof steps, "optimizer step %lld", (long long)opt_step);
    else
        snprintf(steps, sizeof steps, "an unrecorded step");
    const char *dt = o->dtype == ST_F32 ? "float32" : o->dtype == ST_F16 ? "float16" : "bfloat16";
    int n = snprintf(
        text, sizeof text,
        "---\n"
        "library_name: transformers\n"
        "tags:\n"
        "- libra\n"
        "---\n"
        "# %s\n"
        "\n"
        "Exported by libra %s from run `%s` at %s (source checkpoint `%s`).\n"
        "\n"
        "A %s model (%sForCausalLM): %zu parameters, hidden_size %d, %d layers, %d attention "
        "heads / %d key-value heads of dimension %d, intermediate_size %d, vocab_size %d%s. "
        "Weights in %s safetensors.\n"
        "\n"
        "Tokenizer: %s%s%s\n",
        name, PACKAGE_VERSION, src->run_name[0] ? src->run_name : "(not recorded)", steps,
        source, family_name(c->family), family_name(c->family), tfm_param_count(c),
        c->hidden_size, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim,
        c->intermediate_size, c->vocab_size, c->tie_word_embeddings ? ", tied embeddings" : "",
        dt, tok_dir ? "copied from `" : "", tok_dir ? tok_dir : tok_note, tok_dir ? "`." : "");
    if (n < 0 || (size_t)n >= sizeof text) return fail("README.md: text too long");
    char err[1024];
    if (afile_put(path, text, (size_t)n, err, sizeof err)) return fail("%s", err);
    return 0;
}

int cmd_export(int argc, char **argv)
{
    struct export_opts o;
    struct cli cli;
    if (parse_args(&cli, argc, argv, &o)) return cli.rc;
    if (check_outdir(o.out)) return 1;
    if (o.tokenizer && (!is_dir(o.tokenizer) || tokenizer_count(o.tokenizer) == 0)) {
        fail("--tokenizer %s: no tokenizer files there (tokenizer.json, tokenizer.model or "
             "vocab.json + merges.txt)", o.tokenizer);
        return 1;
    }

    char in[PATH_MAX], err[2048], tmp[PATH_MAX + 16];
    int step;
    resolve_input(o.in, in, sizeof in, &step);
    struct tfm_config c;
    struct tfm_params p;
    struct adamw opt;
    struct model_source *src = xcalloc(1, sizeof *src);
    int rc = 1;
    tmp[0] = '\0';
    if (model_load(in, &c, &p, &opt, src, err, sizeof err)) {
        fail("%s", err);
        if (strcmp(in, o.in) == 0 && is_dir(o.in))
            fprintf(stderr, "  (a checkpoint root with no complete checkpoint is not a model "
                    "either)\n");
        free(src);
        return 1;
    }
    int64_t opt_step = opt.n ? opt.step : 0;
    if (opt.n) adamw_free(&opt);

    /* the tokenizer: --tokenizer, else the recorded source */
    const char *tok_dir = o.tokenizer, *tok_note = "";
    struct hf_info info;
    hf_info_init(&info);
    if (!tok_dir && src->hf_dir[0]) {
        if (is_dir(src->hf_dir) && tokenizer_count(src->hf_dir) > 0) {
            tok_dir = src->hf_dir;
        } else if (src->format == MODEL_HF) {
            fprintf(stderr, "libra: export: note: %s has no tokenizer files: none copied "
                    "(pass --tokenizer DIR)\n", src->hf_dir);
            tok_note = "not included (the source directory has none).";
        } else {
            fprintf(stderr, "libra: export: note: the model was imported from %s, which has no "
                    "tokenizer files now: none copied (pass --tokenizer DIR)\n", src->hf_dir);
            tok_note = "not included: the directory the model was imported from has none "
                       "now.";
        }
    }
    if (tok_dir) {
        if (hf_token_ids_read(tok_dir, &info, err, sizeof err) < 0) {
            fail("%s", err);
            goto out;
        }
    } else if (!src->hf_dir[0] && c.vocab_size == TOK_VOCAB_SIZE) {
        info.bos_token_id = TOK_BOS;
        info.n_eos = 1;
        info.eos_token_id[0] = TOK_EOS;
        tok_note = "libra's byte-level tokenizer (ids 0-255 are bytes, 256 <|bos|>, 257 "
                   "<|eos|>, then libra's special tokens); no Hugging Face tokenizer files.";
    } else if (!tok_note[0]) {
        tok_note = "not included (pass --tokenizer DIR to libra export).";
    }
    if (src->format == MODEL_HF && hf_token_ids_read(in, &info, err, sizeof err) < 0) {
        fail("%s", err);
        goto out;
    }

    /* everything into OUTDIR.tmp-XXXXXX, then one rename */
    char outc[PATH_MAX];
    snprintf(outc, sizeof outc, "%s", o.out);
    size_t ol = strlen(outc);
    while (ol > 1 && outc[ol - 1] == '/') outc[--ol] = '\0';
    snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", outc);
    if (!mkdtemp(tmp)) {
        fail("%s.tmp-XXXXXX: cannot create the temporary directory: %s (does the parent "
             "directory exist?)", outc, strerror(errno));
        tmp[0] = '\0';
        goto out;
    }
    mode_t mask = umask(0); /* mkdtemp makes 0700; OUTDIR gets the usual mode */
    umask(mask);
    if (chmod(tmp, 0777 & ~mask) != 0) {
        fail("%s: chmod: %s", tmp, strerror(errno));
        goto out;
    }
    if (hf_save(tmp, &c, &p, &info, o.dtype, o.max_shard, err, sizeof err)) {
        fail("%s", err);
        goto out;
    }
    int copied = 0;
    for (size_t i = 0; tok_dir && i < N_TOKENIZER_FILES; i++) {
        if (!exists(tok_dir, tokenizer_files[i])) continue;
        char a[PATH_MAX + 64], b[PATH_MAX + 64];
        snprintf(a, sizeof a, "%s/%s", tok_dir, tokenizer_files[i]);
        snprintf(b, sizeof b, "%s/%s", tmp, tokenizer_files[i]);
        if (copy_file(a, b)) goto out;
        copied++;
    }
    if (write_readme(tmp, outc, &o, &c, src, step, opt_step, tok_dir, tok_note)) goto out;
    if (afile_fsync_dir(tmp, err, sizeof err)) {
        fail("%s", err);
        goto out;
    }
    if (rename(tmp, outc) != 0) {
        fail("cannot rename %s to %s: %s%s", tmp, outc, strerror(errno),
             errno == ENOTEMPTY || errno == EEXIST ? " (OUTDIR was filled meanwhile)" : "");
        goto out;
    }
    tmp[0] = '\0';
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", outc);
    char *slash = strrchr(parent, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == parent) parent[1] = '\0';
    else *slash = '\0';
    if (afile_fsync_dir(parent, err, sizeof err)) fprintf(stderr, "libra: export: %s\n", err);
    printf("libra export: %s -> %s (%s, %d tokenizer file%s)\n", in, outc,
           o.dtype == ST_F32 ? "f32" : o.dtype == ST_F16 ? "f16" : "bf16", copied,
           copied == 1 ? "" : "s");
    rc = 0;
out:
    if (tmp[0]) remove_tmp(tmp);
    tfm_params_free(&p);
    free(src);
    return rc;
}
