/*
 * The launchers of the log-softmax, its backward, their vocabulary-parallel pieces and
 * the entropy term's backward (include/libra/cuda_api.h); the kernels and what they
 * compute are in cuda_logsoftmax_kernels.cuh.
 */
#include "cuda_internal.h"

#include <math.h>

#include "cuda_logsoftmax_kernels.cuh"

extern "C" int cu_logsoftmax_fwd(float *logprob, float *entropy, float *mx, double *lsum,
                                 const float *logits, const int32_t *targets, int N, int V,
                                 float temperature)
{
    if (N <= 0) return 0;
    logsoftmax_fwd_k<<<N, LS_THREADS, 0, cu_stream()>>>(logprob, entropy, mx, lsum, logits,
                                                        targets, V, temperature);
    CU_LAUNCHED("logsoftmax_fwd");
    return 0;
}

extern "C" int cu_logsoftmax_bwd(float *dlogits, uint16_t *dl16, const float *dlogprob,
                                 const float *logits, const int32_t *targets, const float *mx,
                                 const double *lsum, int N, int V, float temperature)
{
    if (N <= 0) return 0;
    if (!mx != !lsum)
        return cu_fail("logsoftmax_bwd: mx and lsum go together", cudaSuccess, __FILE__,
                       __LINE__);
    logsoftmax_bwd_k<<<N, LS_THREADS, 0, cu_stream()>>>(dlogits, dl16, dlogprob, logits, targets,
                                                        mx, lsum, V, temperature);
    CU_LAUNCHED("logsoftmax_bwd");
    return 0;
}

extern "C" int cu_vocab_max(float *mx, const float *logits, int N, int V, float temperature)
{
    if (N <= 0) return 0;
    vocab_max_k<<<N, LS_THREADS, 0, cu_stream()>>>(mx, logits, V, temperature);
    CU_LAUNCHED("vocab_max");
    return 0;
}

extern "C" int cu_vocab_sums(double *sums, const float *logits, const float *mx,
                             const int32_t *targets, int N, int V, float temperature)
{
    if (N <= 0) return 0;
    vocab_sums_k<<<N, LS_THREADS, 0, cu_stream()>>>(sums, logits, mx, targets, V, temperature);
    CU_LAUNCHED("vocab_sums");
    return 0;
}

extern "C" int cu_vocab_logsoftmax_bwd(float *dlogits, uint16_t *dl16, const float *dlogprob,
                                       const float *logits, const int32_t *targets,
                                       const float *mx, const double *lsum, int N, int V,
                                       float temperature)
{
    if (N <= 0) return 0;
    vocab_logsoftmax_bwd_k<<<N, LS_THREADS, 0, cu_stream()>>>(dlogits, dl16, dlogprob, logits,
                                                              targets, mx, lsum, V, temperature);
    CU_LAUNCHED("vocab_logsoftmax_bwd");
    return 0;
}

extern "C" int cu_entropy_bwd(float *dlogits, double *H, const float *ew, const float *logits,
                              int N, int V, float temperature)
{
    if (N <= 0) return 0;
    entropy_bwd_k<<<N, LS_THREADS, 0, cu_stream()>>>(dlogits, H, ew, logits, V, temperature);
    CU_LAUNCHED("entropy_bwd");
    return 0;
}

extern "C" int cu_vocab_entropy_bwd(float *dlogits, const float *ew, const float *logits,
                                    const float *mx, const double *lsum, const double *H, int N,
                                    int V, float temperature)
{
    if (N <= 0) return 0;
    vocab_entropy_bwd_k<<<N, LS_THREADS, 0, cu_stream()>>>(dlogits, ew, logits, mx, lsum, H, V,
                                                            temperature);
    CU_LAUNCHED("vocab_entropy_bwd");
    return 0;
}
