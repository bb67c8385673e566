/*
 * Peaks of the current GPU measured through the CUDA module: the rate of its bf16
 * matrix products (cuBLASLt, float32 accumulation) and of a device-to-device copy.
 * What the engine's figures are read against (tools/bench-gpu) and what device cuda
 * reports to the planner's cost model. Each allocates what it times and frees it;
 * a failed CUDA call ends the job (FATAL).
 */
#ifndef LIBRA_GPU_PEAK_H
#define LIBRA_GPU_PEAK_H

#include <stddef.h>

#include "libra/cuda_api.h"

/* FLOP/s of an n x n x n bf16 product (linear_fwd), the mean of reps after 3 untimed. */
double gpu_gemm_flops(const struct cuda_api *api, int n, int reps);
/* Bytes/s, read + written, of a copy of `bytes` (the mean of reps after 2 untimed). */
double gpu_copy_bytes_per_s(const struct cuda_api *api, size_t bytes, int reps);

#endif
