/* Shared CUnit driver (see testutil.h). */
#define _POSIX_C_SOURCE 200809L
#include "testutil.h"

#include "libra/config.h"
#include "libra/cuda_host.h"
#include "libra/cuda_module.h"
#include "libra/log.h"
#include "libra/rng.h"
#include "libra/safetensors.h"
#include "libra/tfm.h"

#include <CUnit/Basic.h>
#include <cblas.h>
#include <mpi.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* LIBRA_TEST_ONLY=A,B,...: whether a test's name holds one of them (every test when
 * it is unset or empty). */
static int test_selected(const char *name)
{
    const char *only = getenv("LIBRA_TEST_ONLY");
    if (!only || !*only) return 1;
    for (const char *p = only; *p;) {
        size_t n = strcspn(p, ",");
        for (const char *at = name; n && *at; at++)
            if (strncmp(at, p, n) == 0) return 1;
        p += n + (p[n] == ',');
    }
    return 0;
}

int test_main(const struct test_suite *suites)
{
    if (CU_initialize_registry() != CUE_SUCCESS) {
        fprintf(stderr, "CUnit: %s\n", CU_get_error_msg());
        return 2;
    }
    for (const struct test_suite *s = suites; s->name; s++) {
        CU_pSuite suite = CU_add_suite(s->name, NULL, NULL);
        if (!suite) goto fail;
        for (const struct test_case *c = s->cases; c->name; c++)
            if (test_selected(c->name) && !CU_add_test(suite, c->name, c->fn)) goto fail;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    if (CU_basic_run_tests() != CUE_SUCCESS) goto fail;
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
fail:
    fprintf(stderr, "CUnit: %s\n", CU_get_error_msg());
    CU_cleanup_registry();
    return 2;
}

int test_main_all_ranks(const struct test_suite *suites)
{
    int rank = 0, rc, worst = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *all = getenv("LIBRA_TEST_ALL_RANKS");
    if (rank != 0 && !(all && *all == '1') && !freopen("/dev/null", "w", stdout)) return 2;
    rc = test_main(suites);
    if (MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS) return 2;
    return worst;
}

void test_random_params(struct tfm_params *p, const struct tfm_config *c, uint64_t seed)
{
    tfm_params_alloc(p, c);
    tfm_params_init_random(p, c, seed, 0.2f);
    struct rng r;
    rng_init(&r, seed, 7, 0, 0);
    for (size_t i = 0; i < p->n; i++) p->mem[i] += (float)(0.05 * rng_normal(&r));
}

void test_bf16_params(struct tfm_params *p, const struct tfm_config *c, uint64_t seed)
{
    test_random_params(p, c, seed); /* allocates p */
    for (size_t i = 0; i < p->n; i++) p->mem[i] = st_bf16_to_f32(st_f32_to_bf16(p->mem[i]));
}

double test_rel_err(const float *a, const float *b, size_t n)
{
    double d = 0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(b[i])) m = fmax(m, fabs((double)b[i]));
        if (a[i] == b[i] || (isnan(a[i]) && isnan(b[i]))) continue; /* equal infinities too */
        d = test_worse(d, fabs((double)a[i] - b[i]));
    }
    return d / m;
}

void test_expect_close(const char *what, const float *got, const float *ref, size_t n, double tol)
{
    double e = test_rel_err(got, ref, n);
    printf("[%s %.1e] ", what, e);
    CU_ASSERT(e <= tol);
}

void test_fill_uniform(float *x, size_t n, uint64_t seed, float scale)
{
    struct rng r;
    rng_init(&r, seed, 0, 0, 0);
    for (size_t i = 0; i < n; i++) x[i] = scale * (float)(2.0 * rng_uniform(&r) - 1.0);
}

double test_cosine(const float *a, const float *b, size_t n)
{
    double dot = 0, na = 0, nb = 0;
    for (size_t i = 0; i < n; i++) {
        dot += (double)a[i] * b[i];
        na += (double)a[i] * a[i];
        nb += (double)b[i] * b[i];
    }
    return na > 0 && nb > 0 ? dot / sqrt(na * nb) : 0.0;
}

void test_attn_lse(float *lse, const float *q, const float *k, const int *pos, int nq, int H,
                   int K, int D)
{
    for (int i = 0; i < nq; i++)
        for (int h = 0; h < H; h++) {
            const float *qi = q + ((size_t)i * H + h) * D;
            double *sc = xmalloc((size_t)(pos[i] + 1) * sizeof *sc), m = -INFINITY, sum = 0.0;
            for (int j = 0; j <= pos[i]; j++) {
                const float *kj = k + ((size_t)j * K + h / (H / K)) * D;
                double dot = 0.0;
                for (int d = 0; d < D; d++) dot += (double)qi[d] * kj[d];
                sc[j] = dot / sqrt((double)D);
                m = sc[j] > m ? sc[j] : m;
            }
            for (int j = 0; j <= pos[i]; j++) sum += exp(sc[j] - m);
            lse[(size_t)i * H + h] = (float)(m + log(sum));
            free(sc);
        }
}

int test_mpi_begin(int *argc, char ***argv, const char *name, int world)
{
    int rank = 0, size = 0;
    if (MPI_Init(argc, argv) != MPI_SUCCESS ||
        MPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS ||
        MPI_Comm_size(MPI_COMM_WORLD, &size) != MPI_SUCCESS) {
        fprintf(stderr, "%s: MPI_Init failed\n", name);
        exit(2);
    }
    log_set_rank(rank);
    if (size != world) {
        if (rank == 0) fprintf(stderr, "%s: run with mpirun -np %d\n", name, world);
        MPI_Finalize();
        return -1;
    }
    openblas_set_num_threads(1);
    return rank;
}

void test_tiny_cpu_config(struct libra_config *cfg)
{
    config_defaults(cfg);
    snprintf(cfg->device.type, sizeof cfg->device.type, "cpu");
    snprintf(cfg->env.name, sizeof cfg->env.name, "calc");
    cfg->model.hidden_size = 32;
    cfg->model.n_layers = 2;
    cfg->model.n_heads = 4;
    cfg->model.n_kv_heads = 2;
    cfg->model.head_dim = 8;
    cfg->model.intermediate_size = 64;
    cfg->model.max_position = 256;
    cfg->rollout.max_tokens = 128;
    cfg->rollout.slots = 2;
}

const struct cuda_api *test_cuda_or_skip(const char *name)
{
    char err[2048];
    const struct cuda_api *api = cuda_module_load(err, sizeof err);
    if (api && api != cuda_host_api() && api->device_count() < 1) {
        snprintf(err, sizeof err, "the CUDA device module loaded, but there is no usable GPU: %s",
                 api->last_error());
        api = NULL;
    }
    if (!api) {
        printf("%s: no GPU (%s): on the host stand-in of the CUDA module\n", name, err);
        api = cuda_host_api();
    }
    const char *need = getenv("LIBRA_TEST_NEED_GPU");
    if (api == cuda_host_api() && need && strcmp(need, "1") == 0) {
        printf("%s: LIBRA_TEST_NEED_GPU=1: the host stand-in does not count\n", name);
        exit(1);
    }
    char line[256];
    if (api->device_count() < 1 || api->set_device(0) != 0 ||
        api->device_describe(0, line, sizeof line) != 0) {
        printf("%s: device 0: %s\n", name, api->last_error());
        exit(1);
    }
    printf("%s: %s\n", name, line);
    return api;
}

/* dir/rel in the next of a ring of buffers, so a few results can be held at once. */
static const char *ring_join(const char *dir, const char *rel)
{
    static char buf[8][1024];
    static int next;
    char *out = buf[next++ % 8];
    snprintf(out, sizeof buf[0], "%s/%s", dir, rel);
    return out;
}

const char *test_path(const char *rel)
{
    const char *top = getenv("top_srcdir");
    if (!top || !*top) top = LIBRA_SRCDIR;
    return ring_join(top, rel);
}

const char *test_npm_path(const char *rel)
{
    const char *npm = getenv("LIBRA_TEST_NPM");
    return npm && *npm ? ring_join(npm, rel) : ring_join(test_path("tests/npm"), rel);
}

const char *test_scratch_dir(const char *name)
{
    static char buf[1024];
    const char *top = getenv("top_builddir");
    if (!top || !*top) top = ".";
    snprintf(buf, sizeof buf, "%s/tests", top);
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return NULL;
    snprintf(buf, sizeof buf, "%s/tests/out", top);
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return NULL;
    snprintf(buf, sizeof buf, "%s/tests/out/%s-%ld", top, name, (long)getpid());
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return NULL;
    return buf;
}

const char *test_write_file(const char *subdir, const char *name, const char *text)
{
    static char path[1024];
    const char *dir = test_scratch_dir(subdir);
    CU_ASSERT_FATAL(dir != NULL);
    snprintf(path, sizeof path, "%s/%s.cfg", dir, name);
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs(text, f);
    fclose(f);
    return path;
}

void test_edit_config(char *out, size_t n, const char *base, const char *key, const char *repl)
{
    char line[1024], pat[64];
    out[0] = '\0';
    snprintf(pat, sizeof pat, "  %s =", key ? key : "");
    for (const char *p = base; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) + 1 : strlen(p);
        snprintf(line, sizeof line, "%.*s", (int)len, p);
        if (key && strncmp(line, pat, strlen(pat)) == 0) {
            strncat(out, repl, n - strlen(out) - 1);
        } else {
            if (!key && strcmp(line, "};\n") == 0) strncat(out, repl, n - strlen(out) - 1);
            strncat(out, line, n - strlen(out) - 1);
        }
        p += len;
    }
}

const struct cost_params test_cost_params = {
    .decode_bw_util = 0.85,
    .prefill_mfu = 0.55,
    .train_mfu = 0.4,
    .gpu_memory_utilization = 0.9,
    .kv_frag_rate = 0.04,
    .act_workspace_bytes = 1e9,
    .optimizer_bytes_per_param = 16,
};

void test_cost_model(struct cost_model *c, const char *hw, const char *model)
{
    char path[256], err[1024];
    snprintf(path, sizeof path, "inputs/hardware/%s.cfg", hw);
    int rc = profile_load_hw(test_path(path), &c->hw, err, sizeof err);
    if (rc != 0) fprintf(stderr, "%s\n", err);
    CU_ASSERT_FATAL(rc == 0);
    snprintf(path, sizeof path, "inputs/models/%s.cfg", model);
    rc = profile_load_model(test_path(path), &c->model, err, sizeof err);
    if (rc != 0) fprintf(stderr, "%s\n", err);
    CU_ASSERT_FATAL(rc == 0);
    c->p = test_cost_params;
}
