/*
 * The optimizer's kernels (include/libra/cuda_api.h): the sum of squares behind the
 * global gradient norm, the fused AdamW element update with the per-step scalars
 * of include/libra/adamw.h (adamw_scalars_of), so CPU and GPU do the same arithmetic,
 * and the weights' sum fingerprint (include/libra/hash_core.h: its includer includes
 * that first).
 *
 * The kernels, in the C subset of CUDA (tests/test_cuda_core_emu.c runs them on CPU
 * threads); their launchers are in cuda_optim.cu.
 */
#ifndef LIBRA_CUDA_OPTIM_CUH
#define LIBRA_CUDA_OPTIM_CUH

#define SS_THREADS 256

/* Thread 0 writes the tree sum of every thread's v (SS_THREADS of them, of type T) to
 * *dst: a fixed order, so the same bits on every call. */
#define SS_TREE_SUM(T, v, dst)                                                               \
    do {                                                                                     \
        __shared__ T sh_[SS_THREADS];                                                        \
        sh_[threadIdx.x] = (v);                                                              \
        __syncthreads();                                                                     \
        for (int h_ = SS_THREADS / 2; h_ > 0; h_ /= 2) {                                     \
            if ((int)threadIdx.x < h_) sh_[threadIdx.x] += sh_[threadIdx.x + h_];            \
            __syncthreads();                                                                 \
        }                                                                                    \
        if (threadIdx.x == 0) *(dst) = sh_[0];                                               \
    } while (0)

/* Per block: the sum of squares in double, into part[blockIdx.x]. */
__global__ static void sum_squares_k(double *part, const float *x, int64_t n)
{
    double s = 0.0;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x)
        s += (double)x[k] * x[k];
    SS_TREE_SUM(double, s, &part[blockIdx.x]);
}

/* One block: the nb partial sums, in a fixed order, into *out. */
__global__ static void sum_parts_k(double *out, const double *part, int nb)
{
    double s = 0.0;
    for (int k = (int)threadIdx.x; k < nb; k += SS_THREADS) s += part[k];
    SS_TREE_SUM(double, s, out);
}

/* Per block: the sum of the fingerprint's terms of its elements, into part[blockIdx.x]
 * (unsigned arithmetic wraps: the sum modulo 2^64). */
__global__ static void sum_hash_k(unsigned long long *part, const float *x, int64_t n)
{
    unsigned long long s = 0;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n;
         k += (int64_t)gridDim.x * blockDim.x)
        s += weights_sum_hash_term(__float_as_uint(x[k]), (uint64_t)k);
    SS_TREE_SUM(unsigned long long, s, &part[blockIdx.x]);
}

/* One block: the nb partial sums into *out. */
__global__ static void sum_hash_parts_k(unsigned long long *out, const unsigned long long *part,
                                        int nb)
{
    unsigned long long s = 0;
    for (int k = (int)threadIdx.x; k < nb; k += SS_THREADS) s += part[k];
    SS_TREE_SUM(unsigned long long, s, out);
}

/* The AdamW element update; with w16 the new weight rounded to bf16 there too (the
 * forward's copy, without a pass of its own over the weights). */
__global__ static void adamw_k(float *p, float *m, float *v, uint16_t *w16, const float *grads,
                               int64_t n, struct cuda_adamw s)
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
    float pn = pk - s.step_size * mk / denom;
    p[k] = pn;
    if (w16) w16[k] = f32_to_bf16_rne(pn);
}

#endif
