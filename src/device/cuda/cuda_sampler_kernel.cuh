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
 * ceil(V / 256). scratch holds CUDA_SAMPLE_SCRATCH (3) V floats a row: the p_i, the
 * candidate ids, and room for the sort's other buffer of ids, then for the sorted p_i.
 *  - plain temperature: thread 0 walks the chunk sums, then the ids of the chunk where
 *    the draw lands.
 *  - top-k: the k-th largest p is found by radix selection on its bits (p >= 0, so the
 *    bits order as the values; four passes of 8-bit digits); the candidates are the
 *    ids above it and the lowest-id ties at it, gathered in id order.
 *  - top-p alone: the candidates are the ids with p >= (1 - top_p) / (V - 1) * sum
 *    (none of the others can be in the nucleus), or all V ids when rounding leaves
 *    those short of the target, as on the CPU.
 *  - the candidates are sorted by a radix sort over the block (4 bits of p a pass,
 *    stable, so ties keep id order; in global memory, so any count up to V), their p
 *    are gathered side by side, and thread 0 walks them for the nucleus and the draw
 *    as sampler_nucleus / sampler_draw do (the same additions in the same order).
 *    Cost: O(V) for the selection; O(8 n / 256) for the sort of n candidates -- k, or
 *    the survivors of the cutoff, which for a peaked distribution are a few hundred and
 *    for a flat one nearly all V --; the walks O(n), serial.
 *
 * At the end, the vocabulary-parallel kernels: the per-rank steps of sampler_sample_tp
 * (greedy and plain temperature) on a TP rank's columns, one block a row, the sums in
 * chunks as above; the group's all-reduces and the slots' combination are the
 * caller's (src/device/gpu/gpu_decode.c).
 *
 * Written in the C subset of CUDA (no templates, no warp intrinsics, shared memory and
 * __syncthreads only), so that tests/test_cuda_sampler_emu.c compiles this very file
 * as C11 and runs it on CPU threads, one thread per CUDA thread of a block, against
 * sampler_sample: the kernel's logic is tested on a machine without a GPU. Needs
 * before it: math.h, cuda_api.h, rng_core.h, sampler.h, cuda_device.cuh and the CUDA
 * built-ins it uses (threadIdx, blockIdx, blockDim, __syncthreads, atomicAdd, __float_as_uint,
 * __uint_as_float).
 */
#ifndef LIBRA_CUDA_SAMPLER_KERNEL_CUH
#define LIBRA_CUDA_SAMPLER_KERNEL_CUH

#define SAMP_THREADS ROW_THREADS /* 256; the block reductions of cuda_device.cuh */

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

/* c[0, n) sorted best first (the whole block): a least-significant-digit radix sort on
 * the bits of p (p >= 0, so the bits order as the values), 4 bits a pass. Each pass is a
 * stable counting sort: thread j's run of c keeps its order and lands after the runs of
 * the threads before it with the same digit, so ids of equal p keep the order they came
 * in -- id order, as every caller gathers them: ties to the lower id. A pass whose digit
 * is the same for all n moves nothing and is skipped. alt: n ints of scratch. sh:
 * SAMP_THREADS + 1 ints of shared memory. */
#define SORT_DIGITS 16
__device__ static void block_sort(const float *p, int *c, int *alt, int n, int *sh)
{
    __shared__ unsigned cnt[SORT_DIGITS * SAMP_THREADS]; /* (digit, thread), digit-major */
    __shared__ int s_skip;
    int per = (n + SAMP_THREADS - 1) / SAMP_THREADS, lo = (int)threadIdx.x * per;
    int hi = lo + per < n ? lo + per : n, total;
    int *src = c, *dst = alt;
    for (unsigned shift = 0; shift < 32; shift += 4) {
        unsigned run[SORT_DIGITS]; /* descending p: digit 15 - bits first */
        for (int d = 0; d < SORT_DIGITS; d++) run[d] = 0;
        for (int i = lo; i < hi; i++) run[15u - ((__float_as_uint(p[src[i]]) >> shift) & 15u)]++;
        for (int d = 0; d < SORT_DIGITS; d++) cnt[d * SAMP_THREADS + threadIdx.x] = run[d];
        __syncthreads();
        /* exclusive prefix of cnt in its order: thread j takes entries [16 j, 16 j + 16) */
        unsigned *mine = cnt + SORT_DIGITS * threadIdx.x;
        int own = 0;
        for (int e = 0; e < SORT_DIGITS; e++) own += (int)mine[e];
        int at = block_offset(own, sh, &total);
        for (int e = 0; e < SORT_DIGITS; e++) {
            unsigned v = mine[e];
            mine[e] = (unsigned)at;
            at += (int)v;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int skip = 0;
            for (int d = 0; d < SORT_DIGITS; d++) {
                unsigned end = d + 1 < SORT_DIGITS ? cnt[(d + 1) * SAMP_THREADS] : (unsigned)n;
                skip |= end - cnt[d * SAMP_THREADS] == (unsigned)n;
            }
            s_skip = skip;
        }
        __syncthreads();
        if (!s_skip) {
            for (int d = 0; d < SORT_DIGITS; d++) run[d] = cnt[d * SAMP_THREADS + threadIdx.x];
            for (int i = lo; i < hi; i++) {
                int id = src[i];
                dst[run[15u - ((__float_as_uint(p[id]) >> shift) & 15u)]++] = id;
            }
            int *t = src;
            src = dst;
            dst = t;
        }
        __syncthreads();
    }
    if (src != c) {
        for (int i = threadIdx.x; i < n; i += blockDim.x) c[i] = src[i];
        __syncthreads();
    }
}

/* q[j] = p[c[j]] for j < n: the sorted probabilities side by side, for the walks. */
__device__ static void gather_sorted(const float *p, const int *c, float *q, int n)
{
    for (int j = threadIdx.x; j < n; j += blockDim.x) q[j] = p[c[j]];
    __syncthreads();
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

/* The first j with cum + q[0] + ... + q[j] >= target (> target if strict), adding in
 * order in double, *cum the sum reached; n if none. Eight loads go out before their
 * additions: the sum is serial, the loads need not be. */
#define WALK_AHEAD 8
#define WALK_PAST(s, target, strict) ((strict) ? (s) > (target) : (s) >= (target))
__device__ static int walk_to(const float *q, int n, double target, int strict, double *cum)
{
    double s = *cum;
    int j = 0;
    for (; j + WALK_AHEAD <= n; j += WALK_AHEAD) {
        float v[WALK_AHEAD];
        for (int e = 0; e < WALK_AHEAD; e++) v[e] = q[j + e];
        for (int e = 0; e < WALK_AHEAD; e++) {
            s += v[e];
            if (WALK_PAST(s, target, strict)) {
                *cum = s;
                return j + e;
            }
        }
    }
    for (; j < n; j++) {
        s += q[j];
        if (WALK_PAST(s, target, strict)) break;
    }
    *cum = s;
    return j;
}

/* sampler_nucleus over the sorted probabilities q[0, n): the smallest prefix whose mass
 * >= target (0 if none), its mass in *mass. */
__device__ static int nucleus(const float *q, int n, double target, double *mass)
{
    double cum = 0.0;
    int j = walk_to(q, n, target, 0, &cum);
    *mass = cum;
    return j < n ? j + 1 : 0;
}

/* sampler_draw: the inverse CDF over the sorted c[0, n) (probabilities q) of the given
 * mass: the first j whose cumulative sum passes the draw (u < cum). */
__device__ static int draw(const float *q, const int *c, int n, double mass, uint64_t key)
{
    double u = rng_core_uniform(key, 0) * mass, cum = 0.0;
    int j = walk_to(q, n, u, 1, &cum);
    if (j < n) return c[j];
    for (j = n - 1; j > 0; j--) /* rounding: the last candidate that has mass */
        if (q[j] > 0) return c[j];
    return c[0];
}

/* The largest x_i / T of x[0, V), in double; every thread gets it. */
__device__ static double block_scaled_max(const float *x, int V, double T, double *sh)
{
    double m = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        double z = (double)x[i] / T;
        if (z > m) m = z;
    }
    return block_max_f64(m, sh);
}

/* The first id of the largest of x[0, V) (the lowest id among equals); every thread
 * gets it. sh: SAMP_THREADS ints of shared memory. */
__device__ static int block_argmax(const float *x, int V, int *sh)
{
    int best = -1;
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        if (best < 0 || x[i] > x[best]) best = i;
    sh[threadIdx.x] = best;
    __syncthreads();
    for (int k = SAMP_THREADS / 2; k > 0; k /= 2) {
        if ((int)threadIdx.x < k) {
            int a = sh[threadIdx.x], b = sh[threadIdx.x + k];
            if (a < 0 || (b >= 0 && (x[b] > x[a] || (x[b] == x[a] && b < a))))
                sh[threadIdx.x] = b;
        }
        __syncthreads();
    }
    int r = sh[0];
    __syncthreads();
    return r;
}

/* The ids [*lo, *hi) this thread owns among V: runs of c = ceil(V / SAMP_THREADS). */
__device__ static int chunk_of(int V, int *lo, int *hi)
{
    int c = (V + SAMP_THREADS - 1) / SAMP_THREADS;
    *lo = (int)threadIdx.x * c;
    *hi = *lo + c < V ? *lo + c : V;
    return c;
}

/* This thread's p_i = (float)exp(x_i / T - m) over [lo, hi), with the sums in id order
 * of the exp (*se) and of the float p_i (*cs). */
__device__ static void form_chunk(const float *x, double T, double m, float *p, int lo, int hi,
                                  double *se, double *cs)
{
    *se = 0.0;
    *cs = 0.0;
    for (int i = lo; i < hi; i++) {
        double e = exp((double)x[i] / T - m);
        float pi = (float)e;
        p[i] = pi;
        *se += e;
        *cs += pi;
    }
}

/* One thread: the inverse CDF of the draw u over p[0, V) from the cumulative sum cum,
 * walking the chunk sums csum (SAMP_THREADS of them, chunks of c ids), then the ids of
 * the chunk where the draw lands (on past it if rounding says so; then the last id
 * with mass). */
__device__ static int walk_chunks(const float *p, const double *csum, int c, int V, double u,
                                  double cum)
{
    int j = 0, t = -1;
    while (j < SAMP_THREADS - 1 && !(u < cum + csum[j])) cum += csum[j++];
    for (int i = j * c; i < V && t < 0; i++) {
        cum += p[i];
        if (u < cum) t = i;
    }
    for (int i = V - 1; t < 0; i--)
        if (p[i] > 0 || i == 0) t = i;
    return t;
}

__global__ static void sample_k(int32_t *tok, float *logprob, const float *logits, int V,
                                const int64_t *traj, const int64_t *pos, float temperature,
                                int top_k, float top_p, uint64_t seed, float *scratch)
{
    __shared__ double dsh[SAMP_THREADS];
    __shared__ double csum[SAMP_THREADS];
    __shared__ int sh[SAMP_THREADS + 1];
    __shared__ int s_n;
    __shared__ double s_sum, s_mass;
    int r = blockIdx.x;
    const float *x = logits + (size_t)r * V;
    float *p = scratch + (size_t)r * CUDA_SAMPLE_SCRATCH * V;
    int *cand = (int *)(p + V), *alt = (int *)(p + 2 * (size_t)V);
    const float *q = p + 2 * (size_t)V; /* after the sort: the sorted p */
    if (!(temperature > 0.0f)) { /* greedy: argmax, ties to the lowest id */
        int t = block_argmax(x, V, sh);
        double m = x[t], s = 0.0;
        for (int i = threadIdx.x; i < V; i += blockDim.x) s += exp((double)x[i] - m);
        s = block_sum_f64(s, dsh);
        if (threadIdx.x == 0) {
            tok[r] = t;
            if (logprob) logprob[r] = (float)-log(s);
        }
        return;
    }
    const double T = temperature;
    double m = block_scaled_max(x, V, T, dsh);
    /* Thread j forms the p_i of its ids and sums them in id order; the normaliser is the
     * chunk sums added in chunk order. */
    int lo, hi, c = chunk_of(V, &lo, &hi);
    double se, cs;
    form_chunk(x, T, m, p, lo, hi, &se, &cs);
    csum[threadIdx.x] = cs;
    const double sum_exact = block_sum_f64(se, dsh);
    if (threadIdx.x == 0) {
        double sum = 0.0;
        for (int j = 0; j < SAMP_THREADS; j++) sum += csum[j];
        s_sum = sum;
    }
    __syncthreads();
    const double sum = s_sum;
    const uint64_t key = rng_core_key(seed, (uint64_t)traj[r], (uint64_t)pos[r], SAMPLER_PURPOSE);
    const int use_k = top_k > 0 && top_k < V, use_p = top_p < 1.0f;
    int t = -1;
    if (!use_k && !use_p) {
        if (threadIdx.x != 0) return;
        t = walk_chunks(p, csum, c, V, rng_core_uniform(key, 0) * sum, 0.0);
    } else {
        int n;
        if (use_k) {
            select_top_k(p, cand, top_k, lo, hi, sh);
            n = top_k;
        } else {
            double cutoff = V > 1 ? (1.0 - (double)top_p) / (V - 1) * sum : 0.0;
            n = select_cutoff(p, cand, cutoff, lo, hi, sh);
        }
        block_sort(p, cand, alt, n, sh);
        gather_sorted(p, cand, (float *)alt, n);
        if (threadIdx.x == 0) {
            double mass = 0.0;
            if (use_k && use_p) {
                double mk = 0.0;
                for (int j = 0; j < n; j++) mk += q[j];
                int np = nucleus(q, n, (double)top_p * mk, &mass);
                if (np > 0) n = np; /* else (rounding): the whole top-k */
            } else if (use_k) {
                for (int j = 0; j < n; j++) mass += q[j];
            } else {
                int np = n > 0 ? nucleus(q, n, (double)top_p * sum, &mass) : 0;
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
            block_sort(p, cand, alt, V, sh);
            gather_sorted(p, cand, (float *)alt, V);
            if (threadIdx.x == 0) {
                double mass;
                int np = nucleus(q, V, (double)top_p * sum, &mass);
                s_n = np > 0 ? np : V; /* 0: top_p within rounding of 1, keep all */
                s_mass = mass;
            }
            __syncthreads();
            n = s_n;
        }
        if (threadIdx.x != 0) return;
        t = draw(q, cand, n, s_mass, key);
    }
    tok[r] = t;
    if (logprob) logprob[r] = (float)((double)x[t] / T - m - log(sum_exact));
}

/* ---- vocabulary-parallel rows: a TP rank's Vl columns from v0, one block a row;
 * the steps of sampler_sample_tp (include/libra/sampler.h's sampler_tp_*), the sums in
 * chunks as above. Each row's slots (3 or 2 doubles per rank, `slots` ranks) get this
 * rank's entry at `slot` and zeros elsewhere, for the group's sum all-reduce. ---- */

__global__ static void vocab_greedy_k(double *xb, const float *logits, int Vl, int v0, int slot,
                                      int slots)
{
    __shared__ int sh[SAMP_THREADS];
    __shared__ double dsh[SAMP_THREADS];
    int r = blockIdx.x;
    const float *x = logits + (size_t)r * Vl;
    int best = block_argmax(x, Vl, sh);
    double m = x[best], s = 0.0;
    if (m > -INFINITY)
        for (int i = threadIdx.x; i < Vl; i += blockDim.x) s += exp((double)x[i] - m);
    s = block_sum_f64(s, dsh);
    if (threadIdx.x == 0) {
        double *o = xb + (size_t)r * 3 * slots;
        for (int q = 0; q < 3 * slots; q++) o[q] = 0.0;
        o[3 * slot] = m;
        o[3 * slot + 1] = v0 + best;
        o[3 * slot + 2] = s;
    }
}

__global__ static void vocab_sample_max_k(double *mx, const float *logits, int Vl,
                                          float temperature)
{
    __shared__ double dsh[SAMP_THREADS];
    double m = block_scaled_max(logits + (size_t)blockIdx.x * Vl, Vl, temperature, dsh);
    if (threadIdx.x == 0) mx[blockIdx.x] = m;
}

__global__ static void vocab_sample_sums_k(double *xb, float *p_all, const float *logits,
                                           const double *mx, int Vl, float temperature, int slot,
                                           int slots)
{
    __shared__ double dsh[SAMP_THREADS];
    __shared__ double csum[SAMP_THREADS];
    int r = blockIdx.x, lo, hi;
    chunk_of(Vl, &lo, &hi);
    double se, cs;
    form_chunk(logits + (size_t)r * Vl, temperature, mx[r], p_all + (size_t)r * Vl, lo, hi, &se,
               &cs);
    csum[threadIdx.x] = cs;
    double sum_exact = block_sum_f64(se, dsh);
    if (threadIdx.x == 0) {
        double sum = 0.0, *o = xb + (size_t)r * 2 * slots;
        for (int j = 0; j < SAMP_THREADS; j++) sum += csum[j];
        for (int q = 0; q < 2 * slots; q++) o[q] = 0.0;
        o[2 * slot] = sum;
        o[2 * slot + 1] = sum_exact;
    }
}

/* plan (B, 4): whether this rank owns the row's draw, then struct sampler_tp_draw's u,
 * own_start and total_exact. res (B, 2): (v0 + the id, its log-prob) or zeros. */
__global__ static void vocab_sample_pick_k(double *res, const float *logits, const float *p_all,
                                           const double *plan, const double *mx, int Vl, int v0,
                                           float temperature)
{
    __shared__ double csum[SAMP_THREADS];
    int r = blockIdx.x, lo, hi;
    const double *pl = plan + (size_t)r * 4;
    if (pl[0] == 0.0) { /* not this rank's draw */
        if (threadIdx.x == 0) res[2 * r] = res[2 * r + 1] = 0.0;
        return;
    }
    const float *p = p_all + (size_t)r * Vl;
    int c = chunk_of(Vl, &lo, &hi);
    double cs = 0.0; /* form_chunk's sum of the float p_i, again */
    for (int i = lo; i < hi; i++) cs += p[i];
    csum[threadIdx.x] = cs;
    __syncthreads();
    if (threadIdx.x != 0) return;
    int t = walk_chunks(p, csum, c, Vl, pl[1], pl[2]);
    res[2 * r] = v0 + t;
    res[2 * r + 1] = (double)logits[(size_t)r * Vl + t] / temperature - mx[r] - log(pl[3]);
}

/* Top-k: the row's slots are t sums then 2n entries (sampler_tp_top_k_slot): this
 * rank's sum of exp(z) at [slot] and its kr most probable ids, in id order, as
 * (v0 + id, z) at slots + 2 (off + j); zeros elsewhere. scratch: 2 Vl floats a row
 * (the p_i, the candidates). */
__global__ static void vocab_sample_topk_k(double *xb, float *scratch, const float *logits,
                                           const double *mx, int Vl, int v0, float temperature,
                                           int kr, int off, int n, int slot, int slots)
{
    __shared__ double dsh[SAMP_THREADS];
    __shared__ int sh[SAMP_THREADS + 1];
    int r = blockIdx.x, lo, hi, width = slots + 2 * n;
    const float *x = logits + (size_t)r * Vl;
    float *p = scratch + (size_t)r * 2 * Vl;
    int *cand = (int *)(p + Vl);
    const double T = temperature, m = mx[r];
    chunk_of(Vl, &lo, &hi);
    double se, cs;
    form_chunk(x, T, m, p, lo, hi, &se, &cs);
    double sum_exact = block_sum_f64(se, dsh);
    select_top_k(p, cand, kr, lo, hi, sh);
    double *o = xb + (size_t)r * width;
    for (int q = threadIdx.x; q < width; q += blockDim.x) o[q] = 0.0;
    __syncthreads();
    if (threadIdx.x == 0) o[slot] = sum_exact;
    for (int j = threadIdx.x; j < kr; j += blockDim.x) {
        int i = cand[j];
        o[slots + 2 * (off + j)] = v0 + i;
        o[slots + 2 * (off + j) + 1] = (double)x[i] / T - m;
    }
}

#endif
