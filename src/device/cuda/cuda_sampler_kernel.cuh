/*
 * The GPU sampler's kernel (launched by cuda_sampler.cu; include/libra/cuda_api.h):
 * greedy, temperature, top-k and top-p with the decisions of sampler_sample
 * (src/model/sampler.c) -- the same stream key (seed, trajectory, position,
 * SAMPLER_PURPOSE) and the same uniform draw through include/libra/rng_core.h, the
 * same p_i = (float)exp(logit / T - max) in double, the same candidate order (more
 * probable first, ties to the lower id) and the same nucleus and inverse-CDF walks in
 * double -- with one difference in the order of the
 * additions: the normaliser (and top-p's target and cutoff, which scale it) is the
 * sum of 256 chunk sums (each in id order, the chunks in id order) where the CPU adds
 * all V in one run. The token is sampler_sample's except where that rounds a draw or
 * the nucleus' edge across a boundary (a measure-zero coincidence, as for
 * sampler_sample_tp's per-rank sums), and a last-bit difference of the device's double
 * exp from the host's could do the same. Greedy and top-k alone pick exactly.
 *
 * One block of 256 threads per row; thread j owns the ids [j c, (j + 1) c), c =
 * ceil(V / 256). scratch holds 2V floats a row: the p_i, then the candidate ids.
 *  - plain temperature: thread 0 walks the chunk sums, then the ids of the chunk where
 *    the draw lands.
 *  - top-k: the k-th largest p is found by radix selection on its bits (p >= 0, so the
 *    bits order as the values; four passes of 8-bit digits); the candidates are the
 *    ids above it and the lowest-id ties at it, gathered in id order.
 *  - top-p alone: the candidates are the ids with p >= (1 - top_p) / (V - 1) * sum
 *    (none of the others can be in the nucleus), or all V ids when rounding leaves
 *    those short of the target, as on the CPU.
 *  - the candidates are sorted by a bitonic network over the block (in global memory,
 *    so any count up to V), and thread 0 walks them for the nucleus and the draw as
 *    sampler_nucleus / sampler_draw do. Cost: O(V) for the selection; the sort is
 *    O(n log^2 n / 256) for n candidates -- k, or the survivors of the cutoff, which
 *    for a peaked distribution are a few hundred and for a flat one all V.
 *
 * Written in the C subset of CUDA (no templates, no warp intrinsics, shared memory and
 * __syncthreads only), so that tests/test_cuda_sampler_emu.c compiles this very file
 * as C11 and runs it on CPU threads, one thread per CUDA thread of a block, against
 * sampler_sample: the kernel's logic is tested on a machine without a GPU. Needs
 * before it: math.h, rng_core.h, sampler.h and the CUDA built-ins it uses
 * (threadIdx, blockIdx, blockDim, __syncthreads, atomicAdd, __float_as_uint,
 * __uint_as_float).
 */
#ifndef LIBRA_CUDA_SAMPLER_KERNEL_CUH
#define LIBRA_CUDA_SAMPLER_KERNEL_CUH

#define SAMP_THREADS 256

/* a ranks strictly before b: more probable, or as probable with a lower id. */
__device__ static bool ranks_before(const float *p, int a, int b)
{
    float pa = p[a], pb = p[b];
    return pa > pb || (pa == pb && a < b);
}

/* The block's exclusive prefix of each thread's count (thread order); *total the sum.
 * sh: SAMP_THREADS + 1 ints of shared memory. */
__device__ static int block_offset(int count, int *sh, int *total)
{
    sh[threadIdx.x] = count;
    __syncthreads();
    if (threadIdx.x == 0) {
        int run = 0;
        for (int j = 0; j < SAMP_THREADS; j++) {
            int n = sh[j];
            sh[j] = run;
            run += n;
        }
        sh[SAMP_THREADS] = run;
    }
    __syncthreads();
    int off = sh[threadIdx.x];
    *total = sh[SAMP_THREADS];
    __syncthreads();
    return off;
}

/* c[0, n) sorted best first (the whole block): a bitonic network over the next power
 * of two, every comparator putting the better id at its lower index. Positions >= n
 * stand for ids ranked after all others, so no comparator could move them and the
 * ones that reach them are skipped. */
__device__ static void block_sort(const float *p, int *c, int n)
{
    int N = 1;
    while (N < n) N <<= 1;
    for (int size = 2; size <= N; size <<= 1)
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            for (int t = threadIdx.x; t < N / 2; t += blockDim.x) {
                int a, b;
                if (stride == size / 2) { /* the first merge step compares mirror images */
                    int base = (t / stride) * size, off = t % stride;
                    a = base + off;
                    b = base + size - 1 - off;
                } else {
                    a = (t / stride) * 2 * stride + t % stride;
                    b = a + stride;
                }
                if (b < n && ranks_before(p, c[b], c[a])) {
                    int x = c[a];
                    c[a] = c[b];
                    c[b] = x;
                }
            }
            __syncthreads();
        }
}

/* The k most probable ids (ties to the lower id) into c[0, k), in id order. */
__device__ static void select_top_k(const float *p, int *c, int k, int lo, int hi, int *sh)
{
    __shared__ unsigned hist[256];
    __shared__ unsigned s_digit;
    __shared__ int s_rank;
    unsigned prefix = 0, mask = 0;
    int rank = k; /* the wanted id's rank among those matching prefix under mask */
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        for (int i = lo; i < hi; i++) {
            unsigned u = __float_as_uint(p[i]);
            if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned d = 255;
            while (d > 0 && (int)hist[d] < rank) rank -= (int)hist[d--];
            s_digit = d;
            s_rank = rank;
        }
        __syncthreads();
        prefix |= s_digit << shift;
        mask |= 255u << shift;
        rank = s_rank;
        __syncthreads();
    }
    /* tau is the k-th largest p: every id above it, and the first `rank` of its ties */
    float tau = __uint_as_float(prefix);
    int above = 0, ties = 0, total;
    for (int i = lo; i < hi; i++) {
        above += p[i] > tau;
        ties += p[i] == tau;
    }
    int before = block_offset(ties, sh, &total);
    int take = rank - before < 0 ? 0 : rank - before > ties ? ties : rank - before;
    int at = block_offset(above + take, sh, &total);
    for (int i = lo; i < hi; i++)
        if (p[i] > tau || (p[i] == tau && take-- > 0)) c[at++] = i;
    __syncthreads();
}

/* The ids with p >= cutoff into c, in id order; their count. */
__device__ static int select_cutoff(const float *p, int *c, double cutoff, int lo, int hi, int *sh)
{
    int n = 0, total;
    for (int i = lo; i < hi; i++) n += (double)p[i] >= cutoff;
    int at = block_offset(n, sh, &total);
    for (int i = lo; i < hi; i++)
        if ((double)p[i] >= cutoff) c[at++] = i;
    __syncthreads();
    return total;
}

/* sampler_nucleus: the smallest prefix of the sorted c whose mass >= target (0 if none). */
__device__ static int nucleus(const float *p, const int *c, int n, double target, double *mass)
{
    double cum = 0.0;
    for (int j = 0; j < n; j++) {
        cum += p[c[j]];
        if (cum >= target) {
            *mass = cum;
            return j + 1;
        }
    }
    *mass = cum;
    return 0;
}

/* sampler_draw: the inverse CDF over the sorted c[0, n) of the given mass. */
__device__ static int draw(const float *p, const int *c, int n, double mass, uint64_t key)
{
    double u = rng_core_uniform(key, 0) * mass, cum = 0.0;
    for (int j = 0; j < n; j++) {
        cum += p[c[j]];
        if (u < cum) return c[j];
    }
    for (int j = n - 1; j > 0; j--) /* rounding: the last candidate that has mass */
        if (p[c[j]] > 0) return c[j];
    return c[0];
}

__device__ static void sample_greedy(int32_t *tok, float *logprob, const float *x, int V, int r)
{
    __shared__ double dpart[SAMP_THREADS];
    __shared__ int ipart[SAMP_THREADS];
    int best = -1;
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        if (best < 0 || x[i] > x[best]) best = i;
    ipart[threadIdx.x] = best;
    __syncthreads();
    for (int k = SAMP_THREADS / 2; k > 0; k /= 2) {
        if ((int)threadIdx.x < k) {
            int a = ipart[threadIdx.x], b = ipart[threadIdx.x + k];
            if (a < 0 || (b >= 0 && (x[b] > x[a] || (x[b] == x[a] && b < a))))
                ipart[threadIdx.x] = b;
        }
        __syncthreads();
    }
    int t = ipart[0];
    double m = x[t], s = 0.0;
    for (int i = threadIdx.x; i < V; i += blockDim.x) s += exp((double)x[i] - m);
    dpart[threadIdx.x] = s;
    __syncthreads();
    for (int k = SAMP_THREADS / 2; k > 0; k /= 2) {
        if ((int)threadIdx.x < k) dpart[threadIdx.x] += dpart[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        tok[r] = t;
        if (logprob) logprob[r] = (float)-log(dpart[0]);
    }
}

__global__ static void sample_k(int32_t *tok, float *logprob, const float *logits, int V,
                                const int64_t *traj, const int64_t *pos, float temperature,
                                int top_k, float top_p, uint64_t seed, float *scratch)
{
    __shared__ double dpart[SAMP_THREADS];
    __shared__ double csum[SAMP_THREADS];
    __shared__ int sh[SAMP_THREADS + 1];
    __shared__ int s_n;
    __shared__ double s_sum, s_mass;
    int r = blockIdx.x;
    const float *x = logits + (size_t)r * V;
    float *p = scratch + (size_t)r * 2 * V;
    int *cand = (int *)(p + V);
    if (!(temperature > 0.0f)) { /* greedy: argmax, ties to the lowest id */
        sample_greedy(tok, logprob, x, V, r);
        return;
    }
    const double T = temperature;
    double m = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        double z = (double)x[i] / T;
        if (z > m) m = z;
    }
    dpart[threadIdx.x] = m;
    __syncthreads();
    for (int k = SAMP_THREADS / 2; k > 0; k /= 2) {
        if ((int)threadIdx.x < k && dpart[threadIdx.x + k] > dpart[threadIdx.x])
            dpart[threadIdx.x] = dpart[threadIdx.x + k];
        __syncthreads();
    }
    m = dpart[0];
    __syncthreads();
    /* Thread j forms the p_i of its ids and sums them in id order; the normaliser is the
     * chunk sums added in chunk order. */
    int c = (V + SAMP_THREADS - 1) / SAMP_THREADS;
    int lo = (int)threadIdx.x * c, hi = lo + c < V ? lo + c : V;
    double se = 0.0, cs = 0.0;
    for (int i = lo; i < hi; i++) {
        double e = exp((double)x[i] / T - m);
        float pi = (float)e;
        p[i] = pi;
        se += e;
        cs += pi;
    }
    dpart[threadIdx.x] = se;
    csum[threadIdx.x] = cs;
    __syncthreads();
    for (int k = SAMP_THREADS / 2; k > 0; k /= 2) {
        if ((int)threadIdx.x < k) dpart[threadIdx.x] += dpart[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        double sum = 0.0;
        for (int j = 0; j < SAMP_THREADS; j++) sum += csum[j];
        s_sum = sum;
    }
    __syncthreads();
    const double sum_exact = dpart[0], sum = s_sum;
    const uint64_t key = rng_core_key(seed, (uint64_t)traj[r], (uint64_t)pos[r], SAMPLER_PURPOSE);
    const int use_k = top_k > 0 && top_k < V, use_p = top_p < 1.0f;
    int t = -1;
    if (!use_k && !use_p) {
        if (threadIdx.x != 0) return;
        /* the chunk sums, then the ids of the chunk where the draw lands */
        double u = rng_core_uniform(key, 0) * sum, cum = 0.0;
        int j = 0;
        while (j < SAMP_THREADS - 1 && !(u < cum + csum[j])) cum += csum[j++];
        for (int i = j * c; i < V && t < 0; i++) { /* on past the chunk if rounding says so */
            cum += p[i];
            if (u < cum) t = i;
        }
        for (int i = V - 1; t < 0; i--) /* rounding: the last id that has mass */
            if (p[i] > 0 || i == 0) t = i;
    } else {
        int n;
        if (use_k) {
            select_top_k(p, cand, top_k, lo, hi, sh);
            n = top_k;
        } else {
            double cutoff = V > 1 ? (1.0 - (double)top_p) / (V - 1) * sum : 0.0;
            n = select_cutoff(p, cand, cutoff, lo, hi, sh);
        }
        block_sort(p, cand, n);
        if (threadIdx.x == 0) {
            double mass = 0.0;
            if (use_k && use_p) {
                double mk = 0.0;
                for (int j = 0; j < n; j++) mk += p[cand[j]];
                int np = nucleus(p, cand, n, (double)top_p * mk, &mass);
                if (np > 0) n = np; /* else (rounding): the whole top-k */
            } else if (use_k) {
                for (int j = 0; j < n; j++) mass += p[cand[j]];
            } else {
                int np = n > 0 ? nucleus(p, cand, n, (double)top_p * sum, &mass) : 0;
                n = np; /* 0: survivors short of top_p through rounding */
            }
            s_n = n;
            s_mass = mass;
        }
        __syncthreads();
        n = s_n;
        if (!use_k && n == 0) { /* all ids, as sampler_sample then takes */
            for (int i = threadIdx.x; i < V; i += blockDim.x) cand[i] = i;
            __syncthreads();
            block_sort(p, cand, V);
            if (threadIdx.x == 0) {
                double mass;
                int np = nucleus(p, cand, V, (double)top_p * sum, &mass);
                s_n = np > 0 ? np : V; /* 0: top_p within rounding of 1, keep all */
                s_mass = mass;
            }
            __syncthreads();
            n = s_n;
        }
        if (threadIdx.x != 0) return;
        t = draw(p, cand, n, s_mass, key);
    }
    tok[r] = t;
    if (logprob) logprob[r] = (float)((double)x[t] / T - m - log(sum_exact));
}

#endif
