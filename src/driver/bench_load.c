/*
 * The model-loading benchmark's two commands (tools/bench-load drives them; each also
 * spelled with a leading --):
 *
 *   libra write-random-hf DIR [--shape qwen3-0.6b|tiny] [--dtype bf16|f16|f32]
 *                         [--max-shard-size BYTES] [--seed S]
 *       a random model of that shape written as a Hugging Face directory (hf_save).
 *       qwen3-0.6b: hidden 1024, 28 layers, 16 heads / 8 kv heads of 128, intermediate
 *       3072, vocab 151936, tied, qk_norm: 596 M parameters, 1.19 GB in bf16.
 *   libra bench-load DIR [--repeat N]
 *       loads DIR (model_load: any format) into float32 parameters N times (default 5)
 *       and prints the best and median wall times and the rate over the files' bytes;
 *       for a Hugging Face directory also the two parts of a load: the first touch of
 *       a fresh float32 block of the model's size (the kernel's page faults, which a
 *       load cannot avoid and cat does not pay) and the read + conversion of every
 *       tensor into an already touched block (hf_load_slices at TP 1); and the same
 *       two as bf16, the way device cuda's rollout ranks read their shards
 *       (hf_load_slices_bf16: a bf16 checkpoint's bytes copied, no conversion).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "libra/cli.h"
#include "libra/driver.h"
#include "libra/hf_model.h"
#include "libra/log.h"
#include "libra/model_load.h"
#include "libra/safetensors.h"
#include "libra/tfm_tp.h"

static const struct option write_hf_opts[] = {
    {"shape", required_argument, NULL, 'S'},
    {"dtype", required_argument, NULL, 'd'},
    {"max-shard-size", required_argument, NULL, 'm'},
    {"seed", required_argument, NULL, 's'},
    {0}};
static const struct cli_cmd write_hf_cmd = {
    "libra write-random-hf",
    "libra write-random-hf DIR [--shape qwen3-0.6b|tiny] [--dtype bf16|f16|f32]\n"
    "                             [--max-shard-size BYTES] [--seed S]",
    "Writes a random model as a Hugging Face directory DIR (tools/bench-load's input).\n"
    "  --shape qwen3-0.6b|tiny   the shape (default qwen3-0.6b)\n"
    "  --dtype bf16|f16|f32      the weights' dtype (default bf16)\n"
    "  --max-shard-size BYTES    bytes per safetensors file (default 5GB; suffixes KB MB GB\n"
    "                            = 10^3.., KiB MiB GiB = 2^10..)\n"
    "  --seed S                  the weights' seed (default 1)\n",
    write_hf_opts, "DIR", 1, 1, 0};

int cmd_write_random_hf(int argc, char **argv)
{
    static const enum st_dtype dtypes[] = {ST_BF16, ST_F16, ST_F32};
    int shape = 0, d = 0, ch;
    uint64_t max_shard = ST_DEFAULT_MAX_SHARD, seed = 1;
    struct cli cli;
    cli_begin(&cli, &write_hf_cmd, argc, argv);
    while ((ch = cli_next(&cli)) > 0) {
        int bad = ch == 'S' ? (shape = cli_choice(&cli, "qwen3-0.6b|tiny")) < 0
                : ch == 'd' ? (d = cli_choice(&cli, "bf16|f16|f32")) < 0
                : ch == 's' ? cli_u64(&cli, &seed)
                            : cli_size(&cli, &max_shard);
        if (bad) return cli.rc;
    }
    if (ch == CLI_EXIT) return cli.rc;
    const char *dir = cli.args[0];
    enum st_dtype dtype = dtypes[d];
    struct tfm_config c;
    if (shape == 0) {
        c = *bench_model_shape("qwen3-0.6b");
    } else {
        c = (struct tfm_config){.family = TFM_QWEN3, .vocab_size = 300, .hidden_size = 64,
                                .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16,
                                .intermediate_size = 128, .max_position_embeddings = 512,
                                .rms_norm_eps = 1e-6f, .rope_theta = 1000000.0f,
                                .tie_word_embeddings = 1, .attention_bias = 0, .qk_norm = 1};
    }
    struct stat st;
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/%s", dir, HF_CONFIG_NAME);
    if (stat(probe, &st) == 0) {
        fprintf(stderr, "libra: --write-random-hf: %s already holds a model (config.json): "
                "refusing to overwrite it\n", dir);
        return 1;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "libra: --write-random-hf: cannot create %s: %s\n", dir,
                strerror(errno));
        return 1;
    }
    struct tfm_params p;
    tfm_params_alloc(&p, &c);
    double t0 = wall_time();
    tfm_params_init_random(&p, &c, seed, 0.02f);
    char err[1024];
    double t1 = wall_time();
    int rc = hf_save(dir, &c, &p, NULL, dtype, max_shard, err, sizeof err);
    double t2 = wall_time();
    tfm_params_free(&p);
    if (rc) {
        fprintf(stderr, "libra: --write-random-hf: %s\n", err);
        return 1;
    }
    printf("wrote %s: %s, %zu parameters (init %.1f s, write %.1f s)\n", dir,
           shape ? "tiny" : "qwen3-0.6b",
           tfm_param_count(&c), t1 - t0, t2 - t1);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static const struct option bench_load_opts[] = {{"repeat", required_argument, NULL, 'r'}, {0}};
static const struct cli_cmd bench_load_cmd = {
    "libra bench-load", "libra bench-load DIR [--repeat N]",
    "Loads the model DIR (any format) into float32 parameters N times and prints the best\n"
    "and median wall times and the rate over its files' bytes.\n"
    "  --repeat N   loads, 1 .. 1000 (default 5)\n",
    bench_load_opts, "DIR", 1, 1, 0};

int cmd_bench_load(int argc, char **argv)
{
    int repeat = 5, ch;
    struct cli cli;
    cli_begin(&cli, &bench_load_cmd, argc, argv);
    while ((ch = cli_next(&cli)) > 0)
        if (cli_int(&cli, 1, 1000, &repeat)) return cli.rc;
    if (ch == CLI_EXIT) return cli.rc;
    const char *dir = cli.args[0];
    char err[2048];
    uint64_t bytes = 0;
    int n_files = 0;
    struct st_set s;
    if (st_set_open(&s, dir, err, sizeof err) == 0) {
        bytes = st_set_bytes(&s);
        n_files = s.n_files;
        st_set_close(&s);
    } else {
        struct stat st;
        if (stat(dir, &st) == 0) bytes = (uint64_t)st.st_size; /* an HDF5 file */
        n_files = 1;
    }
    double *t = xmalloc(sizeof *t * (size_t)repeat);
    size_t n_params = 0;
    for (int r = 0; r < repeat; r++) {
        struct tfm_config c;
        struct tfm_params p;
        double t0 = wall_time();
        if (model_load(dir, &c, &p, NULL, NULL, err, sizeof err)) {
            fprintf(stderr, "libra: --bench-load: %s\n", err);
            free(t);
            return 1;
        }
        t[r] = wall_time() - t0;
        n_params = p.n;
        tfm_params_free(&p);
    }
    qsort(t, (size_t)repeat, sizeof *t, cmp_double);
    double best = t[0], median = t[repeat / 2];
    printf("bench-load: %s: %.3f GB in %d file%s, %zu parameters to float32\n", dir,
           (double)bytes / 1e9, n_files, n_files == 1 ? "" : "s", n_params);
    printf("bench-load: best %.3f s (%.2f GB/s of files), median %.3f s over %d loads\n", best,
           (double)bytes / 1e9 / best, median, repeat);
    struct tfm_config c;
    if (hf_config_read(dir, &c, NULL, err, sizeof err) == 0) {
        /* the parts: first touch of a fresh block, then reading into a touched one */
        double touch = 1e30, read = 1e30;
        struct tfm_tp tp;
        tfm_tp_init(&tp, &c, 1, 0, NULL, NULL);
        for (int r = 0; r < repeat; r++) {
            struct tfm_params p;
            double t0 = wall_time();
            tfm_params_alloc(&p, &c);
            memset(p.mem, 0, p.n * sizeof *p.mem);
            double t1 = wall_time();
            if (hf_load_slices(dir, &tp, &p, err, sizeof err)) {
                fprintf(stderr, "libra: --bench-load: %s\n", err);
                tfm_params_free(&p);
                free(t);
                return 1;
            }
            double t2 = wall_time();
            tfm_params_free(&p);
            if (t1 - t0 < touch) touch = t1 - t0;
            if (t2 - t1 < read) read = t2 - t1;
        }
        printf("bench-load: parts: first touch of %.3f GB of fresh float32 memory best %.3f s; "
               "read + convert into touched memory best %.3f s (%.2f GB/s of files)\n",
               (double)tfm_param_count(&c) * 4 / 1e9, touch, read, (double)bytes / 1e9 / read);
        /* device cuda's rollout ranks: the slices as bf16 (the float32 block untouched) */
        struct tfm_params layout;
        tfm_params_alloc(&layout, &c);
        size_t n = layout.n;
        double touch16 = 1e30, read16 = 1e30;
        for (int r = 0; r < repeat; r++) {
            double t0 = wall_time();
            uint16_t *w16 = xmalloc(n * sizeof *w16);
            memset(w16, 0, n * sizeof *w16);
            double t1 = wall_time();
            int rc = hf_load_slices_bf16(dir, &tp, &layout, w16, err, sizeof err);
            double t2 = wall_time();
            free(w16);
            if (rc) {
                fprintf(stderr, "libra: --bench-load: %s\n", err);
                tfm_params_free(&layout);
                free(t);
                return 1;
            }
            if (t1 - t0 < touch16) touch16 = t1 - t0;
            if (t2 - t1 < read16) read16 = t2 - t1;
        }
        tfm_params_free(&layout);
        printf("bench-load: bf16: first touch of %.3f GB of fresh bf16 memory best %.3f s; "
               "read as bf16 into touched memory best %.3f s (%.2f GB/s of files)\n",
               (double)n * 2 / 1e9, touch16, read16, (double)bytes / 1e9 / read16);
    }
    free(t);
    return 0;
}
