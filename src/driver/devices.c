/*
 * `libra --devices`: the GPUs this build can use (name, memory, compute
 * capability), or why there are none. Compiled against the CUDA runtime only when
 * configure found CUDA, cuBLAS and NCCL (HAVE_CUDA).
 */
#include "config.h"

#include <stdio.h>

#include "libra/driver.h"

#ifdef HAVE_CUDA
#include <cuda_runtime.h>
#include <nccl.h>

int cmd_devices(void)
{
    int n = 0, nccl = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    ncclGetVersion(&nccl);
    if (e != cudaSuccess) {
        printf("libra: CUDA support built (NCCL %d), but no usable GPU: %s\n", nccl,
               cudaGetErrorString(e));
        return 0;
    }
    printf("libra: %d GPU%s (NCCL %d)\n", n, n == 1 ? "" : "s", nccl);
    for (int i = 0; i < n; i++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        printf("  [%d] %s, %.1f GiB, compute capability %d.%d, %d SMs\n", i, p.name,
               (double)p.totalGlobalMem / (1024.0 * 1024 * 1024), p.major, p.minor,
               p.multiProcessorCount);
    }
    return 0;
}
#else
int cmd_devices(void)
{
    printf("libra: built without CUDA (configure found no nvcc/cuBLAS/NCCL; use --with-cuda=PATH); "
           "devices: none. The cpu and emu devices are available.\n");
    return 0;
}
#endif
