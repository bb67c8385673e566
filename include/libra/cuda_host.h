/*
 * The host module: the CUDA module's interface (include/libra/cuda_api.h) computed on
 * the CPU by the CPU references (include/libra/cpu_ops.h, sampler_sample, the AdamW
 * element update, the safetensors bf16 conversion), for testing and debugging device
 * cuda's engine (src/device/gpu/) without a GPU. "Device memory" is host memory from a
 * fixed budget; the kernels round to bf16 where the GPU's do, so the engine's results
 * match the GPU's within the GPU tests' tolerances; CUDA graphs are recorded and
 * replayed for real. The side stream's mark is reported "not yet" at its first
 * query, "done" after, and a join before "done" is refused, as is a write on the
 * kernels' stream (copy, zero, bf16 conversion) into memory side work reads before
 * then. Not fast: its figures say nothing of a GPU's speed, nor of the
 * real kernels' accuracy.
 *
 * Selected by LIBRA_CUDA_MODULE=host (cuda_module_load, include/libra/cuda_module.h);
 * the GPU tests fall back to it where there is no module or no GPU. One device (0);
 * LIBRA_CUDA_HOST_MEM (bytes, default 4 GiB) is its memory.
 */
#ifndef LIBRA_CUDA_HOST_H
#define LIBRA_CUDA_HOST_H

#include "libra/cuda_api.h"

/* The host module's table (constant, process-wide, thread-safe as the CUDA module's). */
const struct cuda_api *cuda_host_api(void);

#endif
