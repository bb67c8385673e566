/*
 * Shared CUnit driver: every suite is a table of {name, function}; test_main runs the
 * tables in basic mode (verbose), prints CUnit's run summary and returns non-zero if
 * any assertion failed. Tests find fixtures through test_path().
 */
#ifndef LIBRA_TESTUTIL_H
#define LIBRA_TESTUTIL_H

#include <CUnit/CUnit.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "libra/cost.h"

struct test_case {
    const char *name;
    void (*fn)(void);
};

struct test_suite {
    const char *name;
    const struct test_case *cases; /* terminated by {NULL, NULL} */
};

/* Runs the suites (terminated by {NULL, NULL}); returns the process exit code.
 * LIBRA_TEST_ONLY=A,B,... runs only the tests whose names hold one of those strings. */
int test_main(const struct test_suite *suites);
/* Multi-rank suites (every test collective; MPI initialised by the caller): every
 * rank runs them, rank 0 prints (LIBRA_TEST_ALL_RANKS=1: every rank), and the exit
 * code is the worst of all ranks'. */
int test_main_all_ranks(const struct test_suite *suites);
/* MPI_Init for a multi-rank suite `name` that needs exactly `world` ranks (the log
 * tagged with the rank, OpenBLAS on one thread): the rank, or -1 after MPI_Finalize,
 * rank 0 having said how to run it, when the world is another size. */
int test_mpi_begin(int *argc, char ***argv, const char *name, int world);
struct libra_config;
/* The defaults with the small CPU-device calc model the multi-rank suites drive by
 * hand: 2 layers of width 32 (4 heads, 2 kv heads of 8), 2 rollout slots of 128
 * tokens. */
void test_tiny_cpu_config(struct libra_config *cfg);

struct tfm_config;
struct tfm_params;
/* Random parameters of model c (allocated here) with norms and biases moved off 1 and
 * 0, so every tensor matters (keyed by seed). */
void test_random_params(struct tfm_params *p, const struct tfm_config *c, uint64_t seed);
/* max |a - b| / max |b| over n values (the kernels' tolerance measure). */
double test_rel_err(const float *a, const float *b, size_t n);
/* Asserts test_rel_err(got, ref, n) <= tol, printing "[what err]". */
void test_expect_close(const char *what, const float *got, const float *ref, size_t n, double tol);
/* n values uniform in [-scale, scale), keyed by seed. */
void test_fill_uniform(float *x, size_t n, uint64_t seed, float scale);
/* a . b / (|a| |b|) in double (0 when either is all zeros). */
double test_cosine(const float *a, const float *b, size_t n);
/* The worse of two errors, a NaN the worst of all (fmax would drop it: a kernel that
 * writes NaNs would pass). Every test's running maximum of differences uses it. */
static inline double test_worse(double worst, double e)
{
    return isnan(e) ? INFINITY : e > worst ? e : worst;
}
/* lse (nq, H): each query row's log-sum-exp of its scaled scores q.k / sqrt(D) over
 * keys 0 .. pos[i] of its kv head (GQA), in double: the tensor-core attention's lse. */
void test_attn_lse(float *lse, const float *q, const float *k, const int *pos, int nq, int H,
                   int K, int D);
struct cuda_api;
/* The CUDA module with GPU 0 current, for the GPU suites; without the module or a
 * usable GPU (or with LIBRA_CUDA_MODULE=host), the host module (include/libra/
 * cuda_host.h), saying so: "<name>: no GPU (<why>): on the host stand-in ...". It no
 * longer skips (the name stays): with LIBRA_TEST_NEED_GPU=1 (tools/test --cuda) the
 * host module is a failure instead, exit 1. */
const struct cuda_api *test_cuda_or_skip(const char *name);
/* test_random_params (allocated here) rounded to bf16: the weights a GPU model holds
 * exactly, for comparisons of the two devices. */
void test_bf16_params(struct tfm_params *p, const struct tfm_config *c, uint64_t seed);
/* $top_srcdir/rel (top_srcdir from the environment, else the configure-time path). */
const char *test_path(const char *rel);
/* $LIBRA_TEST_NPM/rel, else $top_srcdir/tests/npm/rel: the reference packages
 * tools/setup-test installs (make check sets LIBRA_TEST_NPM). */
const char *test_npm_path(const char *rel);
/* A fresh scratch directory under the build tree (tests/out/<name>-<pid>). */
const char *test_scratch_dir(const char *name);

/* Writes text to <scratch subdir>/<name>.cfg and returns the path (static buffer,
 * valid until the next call). Asserts (fatally) on failure. */
const char *test_write_file(const char *subdir, const char *name, const char *text);
/* A copy of a libconfig text with the line "  key = ..." replaced by repl, or, with
 * key NULL, with repl inserted before the closing "};" line. */
void test_edit_config(char *out, size_t n, const char *base, const char *key, const char *repl);

/* The cost model's default efficiency knobs (as config_defaults sets them). */
extern const struct cost_params test_cost_params;
/* A cost model from shipped profiles, e.g. ("a100", "qwen3-14b"), with
 * test_cost_params; asserts (fatally) that both load. */
void test_cost_model(struct cost_model *c, const char *hw, const char *model);

#define CU_ASSERT_CLOSE(a, b, rel)                                                     \
    CU_ASSERT(fabs((double)(a) - (double)(b)) <= (rel) * fmax(1.0, fabs((double)(b))))

#endif
