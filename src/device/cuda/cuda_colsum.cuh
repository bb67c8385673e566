/*
 * Column sums of an (N, C) float32 matrix added into acc (C): acc[j] += sum_i dy[i][j],
 * or, with x and rstd, sum_i dy[i][j] (x[i][j] rstd[i]) -- the weight gradients of
 * rmsnorm_bwd and the bias gradient of bias_bwd. Deterministic for a given N: the rows
 * are cut into chunks of CS_ROWS, each chunk summed by one block (CS_LANES row lanes in
 * order, then the lanes in order) into a scratch of partial sums, which a second kernel
 * adds in chunk order. (One thread per column walking all N rows kept a column's sum
 * on one thread: the q/k norms' N = tokens x heads rows of 128 columns ran on a
 * single block.)
 *
 * The kernels, in the C subset of CUDA (tests/test_cuda_core_emu.c runs them on CPU
 * threads); the launcher is in cuda_colsum.cu.
 */
#ifndef LIBRA_CUDA_COLSUM_CUH
#define LIBRA_CUDA_COLSUM_CUH

#define CS_ROWS 256 /* rows per chunk */
#define CS_COLS 32  /* columns per block: a warp's coalesced row segment */
#define CS_LANES 8  /* warps per block, each taking every CS_LANES-th row of the chunk */

__global__ static void colsum_part_k(float *part, const float *dy, const float *x,
                                     const float *rstd, int N, int C)
{
    __shared__ float sm[CS_LANES][CS_COLS];
    int cx = threadIdx.x % CS_COLS, ry = threadIdx.x / CS_COLS;
    int j = blockIdx.y * CS_COLS + cx, chunk = blockIdx.x;
    int i0 = chunk * CS_ROWS, i1 = i0 + CS_ROWS < N ? i0 + CS_ROWS : N;
    float s = 0.0f;
    if (j < C)
        for (int i = i0 + ry; i < i1; i += CS_LANES) {
            size_t e = (size_t)i * C + j;
            s += x ? dy[e] * (x[e] * rstd[i]) : dy[e];
        }
    sm[ry][cx] = s;
    __syncthreads();
    if (ry == 0 && j < C) {
        float t = 0.0f;
        for (int r = 0; r < CS_LANES; r++) t += sm[r][cx];
        part[(size_t)chunk * C + j] = t;
    }
}

__global__ static void colsum_final_k(float *acc, const float *part, int chunks, int C)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= C) return;
    float s = 0.0f;
    for (int c = 0; c < chunks; c++) s += part[(size_t)c * C + j];
    acc[j] += s;
}

#endif
