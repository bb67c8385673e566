/*
 * The linear layers' GEMMs through cuBLASLt (include/libra/cuda_api.h), bf16 operands
 * (W (out, in) row-major, as torch.nn.Linear and the checkpoints store it), float32
 * accumulation and float32 results -- the GPU forms of linear_forward and
 * linear_backward (src/model/cpu/ops.c) on bf16-rounded operands.
 *
 * cuBLASLt is column-major; a row-major (r, c) matrix is a column-major (c, r) one:
 *   forward  y = x W^T     y^T (out, N)  = op_T(W: (in, out), ld in) x^T (in, N)
 *   dx       dx = dy W     dx^T (in, N)  = W (in, out) dy^T (out, N)
 *   dw       dw = dy^T x   dw^T (in, out) = x^T (in, N) op_T(dy: (out, N), ld out)
 * The algorithm for a shape is asked of cuBLASLt's heuristic once and kept (a small
 * table; a process runs a handful of shapes), with a fixed 32 MiB workspace.
 * One handle per process, created at the first call; not thread-safe (one rank, one
 * thread drives the GPU).
 */
#include "cuda_internal.h"

#include <cublasLt.h>
#include <string.h>

#define GEMM_WORKSPACE ((size_t)32 << 20)
#define GEMM_SHAPES 64

struct gemm_shape {
    int m, n, k, ta, tb, accumulate; /* ta, tb: operand A / B transposed */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
};

static cublasLtHandle_t lt;
static void *workspace;
static struct gemm_shape shapes[GEMM_SHAPES];
static int n_shapes;

static int lt_fail(const char *what, cublasStatus_t st, const char *file, int line)
{
    char msg[160];
    snprintf(msg, sizeof msg, "%s: cuBLASLt status %d", what, (int)st);
    return cu_fail(msg, cudaSuccess, file, line);
}
#define LT_CHECK(call)                                                                       \
    do {                                                                                     \
        cublasStatus_t lt_s_ = (call);                                                       \
        if (lt_s_ != CUBLAS_STATUS_SUCCESS) return lt_fail(#call, lt_s_, __FILE__, __LINE__); \
    } while (0)

/* Descriptors and the heuristic's algorithm for D (m, n) = op(A) op(B), inner size k,
 * A stored (k, m) if ta else (m, k), B stored (n, k) if tb else (k, n), all packed
 * column-major; s is filled. */
static int shape_init(struct gemm_shape *s, int m, int n, int k, int ta, int tb, int accumulate)
{
    memset(s, 0, sizeof *s);
    s->m = m, s->n = n, s->k = k, s->ta = ta, s->tb = tb, s->accumulate = accumulate;
    LT_CHECK(cublasLtMatmulDescCreate(&s->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT_CHECK(cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    LT_CHECK(cublasLtMatrixLayoutCreate(&s->a, CUDA_R_16BF, ta ? k : m, ta ? m : k, ta ? k : m));
    LT_CHECK(cublasLtMatrixLayoutCreate(&s->b, CUDA_R_16BF, tb ? n : k, tb ? k : n, tb ? n : k));
    LT_CHECK(cublasLtMatrixLayoutCreate(&s->d, CUDA_R_32F, m, n, m));
    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = GEMM_WORKSPACE;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(lt, s->op, s->a, s->b, s->d, s->d, pref, 1, &res,
                                            &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS)
        return lt_fail("cublasLtMatmulAlgoGetHeuristic", st, __FILE__, __LINE__);
    if (found < 1) {
        char what[128];
        snprintf(what, sizeof what, "linear_fwd: cuBLASLt has no algorithm for m %d n %d k %d",
                 m, n, k);
        return cu_fail(what, cudaSuccess, __FILE__, __LINE__);
    }
    s->algo = res.algo;
    return 0;
}

int cu_gemm_prepare(void)
{
    if (!lt) {
        LT_CHECK(cublasLtCreate(&lt));
        CU_CHECK(cudaMalloc(&workspace, GEMM_WORKSPACE));
    }
    return 0;
}

static int shape_of(int m, int n, int k, int ta, int tb, int accumulate,
                    struct gemm_shape **out)
{
    if (cu_gemm_prepare()) return -1;
    for (int i = 0; i < n_shapes; i++)
        if (shapes[i].m == m && shapes[i].n == n && shapes[i].k == k && shapes[i].ta == ta &&
            shapes[i].tb == tb && shapes[i].accumulate == accumulate) {
            *out = &shapes[i];
            return 0;
        }
    struct gemm_shape *s = &shapes[n_shapes < GEMM_SHAPES ? n_shapes : GEMM_SHAPES - 1];
    if (n_shapes == GEMM_SHAPES) { /* full: reuse the last entry */
        cublasLtMatmulDescDestroy(s->op);
        cublasLtMatrixLayoutDestroy(s->a);
        cublasLtMatrixLayoutDestroy(s->b);
        cublasLtMatrixLayoutDestroy(s->d);
    } else {
        n_shapes++;
    }
    if (shape_init(s, m, n, k, ta, tb, accumulate)) {
        s->m = -1; /* never matched */
        return -1;
    }
    *out = s;
    return 0;
}

/* D (m, n) = C + op(A) op(B) (see shape_init), or without C (NULL) the product
 * alone; C (m, n) may be D (accumulating in place) or another matrix of its shape
 * (cuBLASLt's out-of-place form: the same algorithm, no copy first). */
static int gemm(float *d, const float *c, const uint16_t *a, const uint16_t *b, int m, int n,
                int k, int ta, int tb)
{
    if (m <= 0 || n <= 0) return 0;
    struct gemm_shape *s = NULL;
    if (shape_of(m, n, k, ta, tb, c != NULL, &s)) return -1;
    float alpha = 1.0f, beta = c ? 1.0f : 0.0f;
    LT_CHECK(cublasLtMatmul(lt, s->op, &alpha, a, s->a, b, s->b, &beta, c ? c : d, s->d, d,
                            s->d, &s->algo, workspace, GEMM_WORKSPACE, cu_stream()));
    return 0;
}

extern "C" int cu_linear_fwd(float *y, const uint16_t *x, const uint16_t *w, int N, int in,
                             int out, int accumulate)
{
    return gemm(y, accumulate ? y : NULL, w, x, out, N, in, 1, 0);
}

extern "C" int cu_linear_fwd_res(float *y, const float *res, const uint16_t *x,
                                 const uint16_t *w, int N, int in, int out)
{
    return gemm(y, res, w, x, out, N, in, 1, 0);
}

extern "C" int cu_linear_bwd(float *dx, float *dw, const uint16_t *dy, const uint16_t *x,
                             const uint16_t *w, int N, int in, int out, int accumulate)
{
    if (dx && gemm(dx, accumulate ? dx : NULL, w, dy, in, N, out, 0, 0)) return -1;
    if (dw && gemm(dw, dw, x, dy, in, out, N, 0, 1)) return -1;
    return 0;
}

/* y (N, out) += b (out) on every row. */
__global__ static void add_bias_k(float *y, const float *b, int64_t n, int out)
{
    int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) y[k] += b[k % out];
}

extern "C" int cu_add_bias(float *y, const float *b, int N, int out)
{
    int64_t n = (int64_t)N * out;
    if (n <= 0) return 0;
    add_bias_k<<<EW_BLOCKS(n), EW_THREADS, 0, cu_stream()>>>(y, b, n, out);
    CU_LAUNCHED("add_bias");
    return 0;
}

/* db (out) += sum over the N rows of dy (deterministic chunks: cuda_colsum.cu). */
extern "C" int cu_bias_bwd(float *db, const float *dy, int N, int out)
{
    if (N <= 0 || out <= 0) return 0;
    return cu_column_sums(db, dy, NULL, NULL, N, out); /* cuda_colsum.cu */
}
