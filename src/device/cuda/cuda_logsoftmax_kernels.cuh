/*
 * The log-softmax at a temperature over the vocabulary (include/libra/cuda_api.h):
 * the chosen tokens' log-probs, the entropies, and the backward into the logits --
 * the GPU forms of logsoftmax_forward / logsoftmax_backward (src/model/cpu/ops.c),
 * with the same arithmetic: z = logit / temperature in float32, the row max in
 * float32, the sums of expf(z - max) and of expf(z - max) (z - max) in double. One
 * block per row; V may be any size (the full 151,936-id vocabulary is one row). The
 * vocab_* kernels are the vocabulary-parallel pieces (a TP rank's columns of each row),
 * with the same arithmetic around the group's all-reduces. The entropy kernels are
 * entropy_backward / vocab_entropy_backward's (cpu_ops.h).
 *
 * The kernels, in the C subset of CUDA (tests/test_cuda_head_emu.c compiles this file
 * as C11 and runs them on CPU threads against the CPU references); their launchers are
 * in cuda_logsoftmax.cu.
 */
#ifndef LIBRA_CUDA_LOGSOFTMAX_KERNELS_CUH
#define LIBRA_CUDA_LOGSOFTMAX_KERNELS_CUH

#define LS_THREADS ROW_THREADS /* 256; the block reductions of cuda_device.cuh */

/* The row's max of z (every thread gets it). */
__device__ static float row_max(const float *x, int V, float temperature)
{
    __shared__ float fpart[LS_THREADS];
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float z = x[j] / temperature;
        mx = z > mx ? z : mx;
    }
    return block_max_f32(mx, fpart);
}

/* The row's sum of expf(z - mx) (and of expf(z - mx) (z - mx) when ez_out != NULL)
 * for a given mx. */
__device__ static void row_sums(const float *x, int V, float temperature, float mx,
                                double *sum_out, double *ez_out)
{
    __shared__ double dpart[LS_THREADS];
    double s = 0.0, e = 0.0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float zj = x[j] / temperature - mx;
        double ex = (double)expf(zj);
        s += ex;
        e += ex * zj;
    }
    *sum_out = block_sum_f64(s, dpart);
    if (ez_out) *ez_out = block_sum_f64(e, dpart);
}

/* The row's max of z and sum of expf(z - max) (and of expf(z - max) (z - max) when
 * ez != NULL). */
__device__ static void row_stats(const float *x, int V, float temperature, float *mx_out,
                                 double *sum_out, double *ez_out)
{
    float mx = row_max(x, V, temperature);
    *mx_out = mx;
    row_sums(x, V, temperature, mx, sum_out, ez_out);
}

/* logprob, entropy (either NULL); with mx_out / lsum_out the row's max of z and log of
 * its sum too, the statistics logsoftmax_bwd_k would form again (the same bits). */
__global__ static void logsoftmax_fwd_k(float *logprob, float *entropy, float *mx_out,
                                        double *lsum_out, const float *logits,
                                        const int32_t *targets, int V, float temperature)
{
    int i = blockIdx.x;
    const float *xi = logits + (size_t)i * V;
    float mx;
    double sum, ez;
    row_stats(xi, V, temperature, &mx, &sum, entropy ? &ez : NULL);
    if (threadIdx.x != 0) return;
    double lsum = log(sum);
    int32_t t = targets[i];
    if (logprob) logprob[i] = t < 0 ? 0.0f : (float)((double)(xi[t] / temperature - mx) - lsum);
    if (entropy) entropy[i] = (float)(lsum - ez / sum);
    if (mx_out) mx_out[i] = mx;
    if (lsum_out) lsum_out[i] = lsum;
}

/* dlogits += dlogprob (onehot - p) / temperature, rows without a target untouched. */
/* A row of zeros in bf16. */
__device__ static void bf16_zeros(uint16_t *hi, int V)
{
    for (int j = threadIdx.x; j < V; j += blockDim.x) hi[j] = 0;
}

/* A row's backward terms written in bf16: the float each would have been added to a
 * zero as (0 - c p_j, c more at the target t if 0 <= t < V), rounded -- the bits of the
 * float32 form's row converted by f32_to_bf16. */
__device__ static void bf16_terms(uint16_t *hi, const float *xi, int V, float temperature,
                                  float mx, double lsum, double c, int32_t t)
{
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float v = 0.0f - (float)(c * exp((double)(xi[j] / temperature - mx) - lsum));
        if (j == t) v += (float)c;
        hi[j] = f32_to_bf16_rne(v);
    }
}

/* dlogits (N, V) += dlogprob (onehot - p) / temperature, rows without a target or with
 * dlogprob 0 untouched; with dl16 the terms written there in bf16 instead (bf16_terms;
 * zero rows). The rows' statistics from logsoftmax_fwd_k (mx, lsum), or, NULL, formed
 * here (two passes over the row more). */
__global__ static void logsoftmax_bwd_k(float *dlogits, uint16_t *dl16, const float *dlogprob,
                                        const float *logits, const int32_t *targets,
                                        const float *mx_in, const double *lsum_in, int V,
                                        float temperature)
{
    int i = blockIdx.x;
    int32_t t = targets[i];
    uint16_t *hi = dl16 ? dl16 + (size_t)i * V : NULL;
    if (t < 0 || dlogprob[i] == 0.0f) { /* the whole block: a uniform branch */
        if (hi) bf16_zeros(hi, V);
        return;
    }
    const float *xi = logits + (size_t)i * V;
    float *di = dlogits + (size_t)i * V;
    float mx;
    double lsum;
    if (mx_in) { /* the same for the whole block */
        mx = mx_in[i];
        lsum = lsum_in[i];
    } else {
        double sum;
        row_stats(xi, V, temperature, &mx, &sum, NULL);
        lsum = log(sum);
    }
    double c = (double)dlogprob[i] / temperature;
    if (hi) {
        bf16_terms(hi, xi, V, temperature, mx, lsum, c, t);
        return;
    }
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        di[j] -= (float)(c * exp((double)(xi[j] / temperature - mx) - lsum));
    __syncthreads();
    if (threadIdx.x == 0) di[t] += (float)c;
}

/* ---- vocabulary-parallel: each TP rank holds the columns [v0, v1) of every row; the
 * caller all-reduces the row maxima (max) and then the sums (sum) over the group, and
 * forms the log-probs and entropies from the sums on the host (tfm's formulas). ---- */

/* mx (N): the row max of z = logit / temperature over this rank's columns. */
__global__ static void vocab_max_k(float *mx, const float *logits, int V, float temperature)
{
    float m = row_max(logits + (size_t)blockIdx.x * V, V, temperature);
    if (threadIdx.x == 0) mx[blockIdx.x] = m;
}

/* sums (N, 3) doubles, from the GLOBAL row max mx: sum expf(z - mx), sum expf(z - mx)
 * (z - mx), and z - mx of the row's target when this rank holds it (targets local: -1
 * none), else 0. */
__global__ static void vocab_sums_k(double *sums, const float *logits, const float *mx,
                                    const int32_t *targets, int V, float temperature)
{
    int i = blockIdx.x;
    const float *xi = logits + (size_t)i * V;
    float m = mx[i];
    double s, e;
    row_sums(xi, V, temperature, m, &s, &e);
    if (threadIdx.x != 0) return;
    int32_t t = targets[i];
    sums[3 * (size_t)i] = s;
    sums[3 * (size_t)i + 1] = e;
    sums[3 * (size_t)i + 2] = t >= 0 && t < V ? (double)(xi[t] / temperature - m) : 0.0;
}

/* dlogits (N, V) += dlogprob (onehot - p) / temperature over this rank's columns, p =
 * exp(z - mx - lsum) from the global statistics; rows with dlogprob 0 untouched, the
 * onehot term only where this rank holds the target. With dl16 those terms written
 * there in bf16 instead (bf16_terms; zero rows for dlogprob 0). */
__global__ static void vocab_logsoftmax_bwd_k(float *dlogits, uint16_t *dl16,
                                              const float *dlogprob, const float *logits,
                                              const int32_t *targets, const float *mx,
                                              const double *lsum, int V, float temperature)
{
    int i = blockIdx.x;
    uint16_t *hi = dl16 ? dl16 + (size_t)i * V : NULL;
    if (dlogprob[i] == 0.0f) { /* the whole block: a uniform branch */
        if (hi) bf16_zeros(hi, V);
        return;
    }
    const float *xi = logits + (size_t)i * V;
    float *di = dlogits + (size_t)i * V;
    float m = mx[i];
    double ls = lsum[i], c = (double)dlogprob[i] / temperature;
    if (hi) {
        bf16_terms(hi, xi, V, temperature, m, ls, c, targets[i]);
        return;
    }
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        di[j] -= (float)(c * exp((double)(xi[j] / temperature - m) - ls));
    __syncthreads();
    int32_t t = targets[i];
    if (threadIdx.x == 0 && t >= 0 && t < V) di[t] += (float)c;
}

/* ---- the entropy term: J carries -ew H, dH/dx_j = -(1/temp) p_j (lp_j + H) ---- */

/* dlogits (V) += (e / temp) p_j (lp_j + H), lp_j = (double)(z_j - mx) - lsum. */
__device__ static void entropy_row_add(float *di, const float *xi, int V, float temperature,
                                       float e, float mx, double lsum, double H)
{
    double c = (double)e / temperature;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        double lp = (double)(xi[j] / temperature - mx) - lsum;
        di[j] += (float)(c * exp(lp) * (lp + H));
    }
}

/* Whole rows: the row's max, sum of exp((double)(z - max)) and H, as entropy_backward. */
__global__ static void entropy_bwd_k(float *dlogits, double *H, const float *ew,
                                     const float *logits, int V, float temperature)
{
    __shared__ double dpart[LS_THREADS];
    int i = blockIdx.x;
    float e = ew[i];
    if (e == 0.0f) { /* the whole block: a uniform branch */
        if (threadIdx.x == 0) H[i] = 0.0;
        return;
    }
    const float *xi = logits + (size_t)i * V;
    float mx = row_max(xi, V, temperature);
    double s = 0.0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) s += exp((double)(xi[j] / temperature - mx));
    double lsum = log(block_sum_f64(s, dpart)), h = 0.0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        double lp = (double)(xi[j] / temperature - mx) - lsum;
        h -= exp(lp) * lp;
    }
    h = block_sum_f64(h, dpart);
    if (threadIdx.x == 0) H[i] = h;
    entropy_row_add(dlogits + (size_t)i * V, xi, V, temperature, e, mx, lsum, h);
}

/* A TP rank's columns, from the whole rows' statistics. */
__global__ static void vocab_entropy_bwd_k(float *dlogits, const float *ew, const float *logits,
                                           const float *mx, const double *lsum, const double *H,
                                           int V, float temperature)
{
    int i = blockIdx.x;
    if (ew[i] == 0.0f) return; /* the whole block */
    entropy_row_add(dlogits + (size_t)i * V, logits + (size_t)i * V, V, temperature, ew[i],
                    mx[i], lsum[i], H[i]);
}

#endif
