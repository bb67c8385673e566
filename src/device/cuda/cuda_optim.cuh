/*
 * The optimizer's kernels (include/libra/cuda_api.h): the sum of squares behind the
 * global gradient norm, and the fused AdamW element update with the per-step scalars
 * of include/libra/adamw.h (adamw_scalars_of), so CPU and GPU do the same arithmetic.
 *
 * The kernels, in the C subset of CUDA (tests/test_cuda_core_emu.c runs them on CPU
 * threads); their launchers are in cuda_optim.cu.
 */
#ifndef LIBRA_CUDA_OPTIM_CUH
#define LIBRA_CUDA_OPTIM_CUH

#define SS_THREADS 256

/* Per block: the sum of squares in double, into part[blockIdx.x]. */
__global__ static void sum_squares_k(double *part, const float *x, int64_t n)
{
    __shared__ double sh[SS_THREADS];
    double s = 0.0;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x)
        s += (double)x[k] * x[k];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int h = SS_THREADS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h) sh[threadIdx.x] += sh[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}

/* One block: the nb partial sums, in a fixed order, into *out. */
__global__ static void sum_parts_k(double *out, const double *part, int nb)
{
    __shared__ double sh[SS_THREADS];
    double s = 0.0;
    for (int k = (int)threadIdx.x; k < nb; k += SS_THREADS) s += part[k];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int h = SS_THREADS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h) sh[threadIdx.x] += sh[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = sh[0];
}

__global__ static void adamw_k(float *p, float *m, float *v, const float *grads, int64_t n,
                               struct cuda_adamw s)
{
    int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    float g = s.clip != 1.0f ? grads[k] * s.clip : grads[k];
    float pk = p[k] * s.decay;
    float mk = m[k] + s.w1 * (g - m[k]);
    float vk = v[k] * s.beta2 + s.w2 * g * g;
    float denom = sqrtf(vk) / s.bc2_sqrt + s.eps;
    m[k] = mk;
    v[k] = vk;
    p[k] = pk - s.step_size * mk / denom;
}

#endif
