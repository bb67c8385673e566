/*
 * The launcher of the column sums (cu_column_sums, cuda_internal.h); the kernels and
 * what they compute are in cuda_colsum.cuh.
 */
#include "cuda_internal.h"

#include "cuda_colsum.cuh"

/* The partial sums' scratch, grown when a call needs more (cu_scratch_grow: these sums
 * run on the training path, never inside a graph recording). */
static void *cs_part;
static size_t cs_bytes;

int cu_column_sums(float *acc, const float *dy, const float *x, const float *rstd, int N,
                   int C)
{
    if (N <= 0 || C <= 0) return 0;
    int chunks = (N + CS_ROWS - 1) / CS_ROWS;
    if (cu_scratch_grow(&cs_part, &cs_bytes, (size_t)chunks * C * sizeof(float))) return -1;
    float *part = (float *)cs_part;
    dim3 grid((unsigned)chunks, (unsigned)((C + CS_COLS - 1) / CS_COLS));
    colsum_part_k<<<grid, CS_COLS * CS_LANES, 0, cu_stream()>>>(part, dy, x, rstd, N, C);
    CU_LAUNCHED("column sums");
    colsum_final_k<<<EW_BLOCKS(C), EW_THREADS, 0, cu_stream()>>>(acc, part, chunks, C);
    CU_LAUNCHED("column sums (chunks)");
    return 0;
}
