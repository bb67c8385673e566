/*
 * The GPU's measured peaks (include/libra/gpu_peak.h): a square bf16 product through
 * linear_fwd and a device-to-device copy, timed on the host clock around sync().
 */
#include "libra/gpu_peak.h"

#include <stdint.h>
#include <stdlib.h>

#include "libra/gpu_model.h"
#include "libra/log.h"

static void *dev_alloc(const struct cuda_api *api, size_t bytes)
{
    void *p = NULL;
    GPU_CHECK(api, api->alloc(&p, bytes));
    return p;
}

double gpu_gemm_flops(const struct cuda_api *api, int n, int reps)
{
    size_t nn = (size_t)n * n;
    uint16_t *x = dev_alloc(api, nn * 2), *w = dev_alloc(api, nn * 2);
    float *y = dev_alloc(api, nn * 4);
    uint16_t *host = xmalloc(nn * 2);
    for (size_t i = 0; i < nn; i++) host[i] = (uint16_t)(0x3c00u + (i * 2654435761u >> 24) % 255u);
    GPU_CHECK(api, api->to_device(x, host, nn * 2));
    GPU_CHECK(api, api->to_device(w, host, nn * 2));
    free(host);
    for (int r = 0; r < 3; r++) GPU_CHECK(api, api->linear_fwd(y, x, w, n, n, n, 0));
    GPU_CHECK(api, api->sync());
    double t0 = wall_time();
    for (int r = 0; r < reps; r++) GPU_CHECK(api, api->linear_fwd(y, x, w, n, n, n, 0));
    GPU_CHECK(api, api->sync());
    double t = (wall_time() - t0) / reps;
    GPU_CHECK(api, api->free(x));
    GPU_CHECK(api, api->free(w));
    GPU_CHECK(api, api->free(y));
    return 2.0 * n * (double)n * n / t;
}

double gpu_copy_bytes_per_s(const struct cuda_api *api, size_t bytes, int reps)
{
    void *a = dev_alloc(api, bytes), *b = dev_alloc(api, bytes);
    GPU_CHECK(api, api->zero(a, bytes));
    for (int r = 0; r < 2; r++) GPU_CHECK(api, api->copy(b, a, bytes));
    GPU_CHECK(api, api->sync());
    double t0 = wall_time();
    for (int r = 0; r < reps; r++) GPU_CHECK(api, api->copy(b, a, bytes));
    GPU_CHECK(api, api->sync());
    double t = (wall_time() - t0) / reps;
    GPU_CHECK(api, api->free(a));
    GPU_CHECK(api, api->free(b));
    return 2.0 * (double)bytes / t;
}
