/*
 * The tensor-core attention kernels (src/device/cuda/cuda_flash_kernels.cuh: flash_fwd,
 * flash_bwd's delta / dq / dk-dv passes, the paged prefill, the bf16 copies) compiled
 * as C++ and run on CPU threads (tests/cuda_block_emu.h), with the warp-level
 * primitives of cuda_mma.cuh emulated here as the PTX ISA defines them:
 *   mma16816       the warp's 32 lanes exchange their fragments (A 16 x 16, B 16 x 8,
 *                  bf16; C 16 x 8 float32); each lane forms its four outputs, C plus
 *                  the exact products summed in k order; every lane must make the
 *                  call from the same place (.aligned: no divergent code), as for
 *                  ldmatrix
 *   ldsm_x4_trans, ldsm_x4, ldsm_x2   four (two) 8 x 8 bf16 matrices from the lanes'
 *                  row addresses (16-byte aligned, checked) into each lane's registers,
 *                  transposed or not
 *   cp16, cp8 / cp_commit / cp_wait   copies queued per thread and carried out at the
 *                  wait that lets them land (a kernel reading a tile it has not waited
 *                  for reads old memory here too), or in other blocks as they are
 *                  issued (a kernel refilling a buffer others still read overwrites
 *                  it); addresses 16-byte aligned; none may be in flight when a block
 *                  ends
 *   bf16x2_rne, exp2_ftz   f32_to_bf16_rne on each of the pair; exp2f, zero below 2^-126
 * against the CPU references (attn_forward / attn_backward on bf16-rounded inputs), with
 * test_cuda's bounds: forward and prefill 1e-2 of the largest, lse 1e-4, backward 2e-2.
 * A kernel that passes here has its indexing, fragments, tiles, masks, online softmax
 * and pipelining right, with FL_WARPS and FL_LDSM as built (make check builds it once
 * with the defaults and once with -DFL_WARPS=8 -DFL_LDSM=0); its speed and the hardware's own rounding of
 * the products' sums need a GPU (test_cuda).
 */

#include <math.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_block_emu.h"
#include "cuda_emu_cxx.h"
extern "C" {
#include "libra/cpu_ops.h"
#include "libra/safetensors.h"
#include "testutil.h"
}

#include "../src/device/cuda/cuda_device.cuh"

/* ---- the primitives of cuda_mma.cuh, emulated ---- */
#define LIBRA_CUDA_MMA_CUH

static int emu_faults; /* broken rules of the primitives, counted (reported by each test) */
static void emu_fault(const char *what)
{
    if (__atomic_fetch_add(&emu_faults, 1, __ATOMIC_SEQ_CST) < 5)
        fprintf(stderr, "\nemulated primitive: %s (thread %u, block %u,%u)\n", what, threadIdx.x,
                blockIdx.x, blockIdx.y);
}

/* a warp's exchange: A fragments, B fragments, ldmatrix row addresses, and where in
 * the kernel each lane made the call */
static struct {
    uint32_t a[32][4], b[32][2];
    const uint16_t *row[32];
    void *site[32];
} emu_warp[EMU_MAX_THREADS / 32];

static void emu_warp_sync(void) { emu_warp_wait(); }

/* mma.sync and ldmatrix are .aligned: every lane of the warp must execute the same
 * instruction. A lane that makes the call from another place in the kernel (the other
 * side of a branch that divides the warp: say, each lane choosing a masked or a
 * mask-free tile by its own rows) breaks that, which no value here would show: a fault.
 * `site` is the caller's return address (the primitives are not inlined), posted before
 * the exchange's barrier and compared after it. */
static inline void emu_site_post(void *site) { emu_warp[threadIdx.x / 32].site[threadIdx.x & 31] = site; }
static inline void emu_site_check(void)
{
    auto &x = emu_warp[threadIdx.x / 32];
    if (x.site[threadIdx.x & 31] != x.site[0]) emu_fault("mma.sync / ldmatrix from divergent code");
}

static inline float half_of(uint32_t w, int hi)
{
    return bf16_to_f32((uint16_t)(hi ? w >> 16 : w & 0xffffu));
}

/* A (row r, k) lives in lane (r % 8) 4 + (k % 8) / 2, register (r / 8) + 2 (k / 8);
 * B (k, column n) in lane 4 n + (k % 8) / 2, register k / 8; the lower k in the low half. */
__attribute__((noinline)) static void mma16816(float c[4], const uint32_t a[4], uint32_t b0,
                                               uint32_t b1)
{
    emu_site_post(__builtin_return_address(0));
    unsigned lane = threadIdx.x & 31;
    auto &x = emu_warp[threadIdx.x / 32];
    for (int i = 0; i < 4; i++) x.a[lane][i] = a[i];
    x.b[lane][0] = b0;
    x.b[lane][1] = b1;
    emu_warp_sync();
    emu_site_check();
    int g = (int)lane >> 2, t = (int)lane & 3;
    float d[4];
    for (int i = 0; i < 4; i++) {
        int r = g + 8 * (i >> 1), n = 2 * t + (i & 1);
        float s = c[i];
        for (int k = 0; k < 16; k++)
            s += half_of(x.a[(r & 7) * 4 + (k & 7) / 2][(r >> 3) + 2 * (k >> 3)], k & 1) *
                 half_of(x.b[n * 4 + (k & 7) / 2][k >> 3], k & 1);
        d[i] = s;
    }
    emu_warp_sync();
    for (int i = 0; i < 4; i++) c[i] = d[i];
}

/* Matrix m's row r is the 8 values at lane 8 m + r's address; lane l gets (2 (l % 4),
 * l / 4) and (2 (l % 4) + 1, l / 4) of each. */
__attribute__((noinline, unused)) static void ldsm_x4_trans(uint32_t b[4], const uint16_t *p)
{
    emu_site_post(__builtin_return_address(0));
    unsigned lane = threadIdx.x & 31;
    auto &x = emu_warp[threadIdx.x / 32];
    if ((uintptr_t)p % 16) emu_fault("ldmatrix row address not 16-byte aligned");
    x.row[lane] = p;
    emu_warp_sync();
    emu_site_check();
    int r = 2 * (int)(lane & 3), c = (int)lane >> 2;
    for (int m = 0; m < 4; m++)
        b[m] = (uint32_t)x.row[8 * m + r][c] | (uint32_t)x.row[8 * m + r + 1][c] << 16;
    emu_warp_sync();
}

/* Without transposition: lane l gets (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of
 * each of the M matrices (rows from lanes 8m .. 8m + 7). */
template <int M>
__attribute__((noinline)) static void ldsm(uint32_t *b, const uint16_t *p, void *site)
{
    emu_site_post(site);
    unsigned lane = threadIdx.x & 31;
    auto &x = emu_warp[threadIdx.x / 32];
    if (lane < 8 * M && (uintptr_t)p % 16) emu_fault("ldmatrix row address not 16-byte aligned");
    x.row[lane] = p;
    emu_warp_sync();
    emu_site_check();
    int r = (int)lane >> 2, c = 2 * (int)(lane & 3);
    for (int m = 0; m < M; m++)
        b[m] = (uint32_t)x.row[8 * m + r][c] | (uint32_t)x.row[8 * m + r][c + 1] << 16;
    emu_warp_sync();
}
__attribute__((noinline, unused)) static void ldsm_x4(uint32_t b[4], const uint16_t *p)
{
    ldsm<4>(b, p, __builtin_return_address(0));
}
__attribute__((noinline, unused)) static void ldsm_x2(uint32_t b[2], const uint16_t *p)
{
    ldsm<2>(b, p, __builtin_return_address(0));
}

/* cp.async: each emulated thread's copies in order, and where each committed group
 * ends (per thread: the threads are fibers of one host thread). A copy lands at one of
 * the two ends of what the GPU allows: at the wait that lets it land (a kernel that
 * reads a tile before waiting for it reads old bytes) or as it is issued (a kernel
 * that refills a buffer other threads still read has overwritten it): every other pair
 * of blocks each way, shifted every other launch (emu_block_fresh), or one way for
 * all with LIBRA_EMU_COPIES=late or =early. */
enum { EMU_CP_MAX = 128, EMU_CP_GROUPS = 16 };
struct emu_cp {
    uint16_t *dst; /* NULL: landed when issued */
    const uint16_t *src;
    int valid, bytes;
};
static int emu_cp_early; /* the running block's copies land as they are issued */

static void emu_cp_land(const emu_cp *e)
{
    if (e->valid)
        memcpy(e->dst, e->src, (size_t)e->bytes);
    else
        memset(e->dst, 0, (size_t)e->bytes);
}
static struct emu_cp_queue {
    emu_cp q[EMU_CP_MAX];
    int n, end[EMU_CP_GROUPS], groups;
} emu_cpq[EMU_MAX_THREADS];

static inline void cp_bytes(uint16_t *dst, const uint16_t *src, int valid, int bytes)
{
    emu_cp_queue &c = emu_cpq[threadIdx.x];
    if ((uintptr_t)dst % bytes || (uintptr_t)src % bytes)
        emu_fault(bytes == 16 ? "cp.async address not 16-byte aligned"
                              : "cp.async address not 8-byte aligned");
    if (c.n == EMU_CP_MAX) {
        emu_fault("too many copies in flight");
        return;
    }
    emu_cp e = {dst, src, valid, bytes};
    if (emu_cp_early) {
        emu_cp_land(&e);
        e.dst = NULL;
    }
    c.q[c.n++] = e;
}
static inline void cp16(uint16_t *dst, const uint16_t *src, int valid) { cp_bytes(dst, src, valid, 16); }
static inline void cp8(uint16_t *dst, const uint16_t *src, int valid) { cp_bytes(dst, src, valid, 8); }

static inline void cp_commit(void)
{
    emu_cp_queue &c = emu_cpq[threadIdx.x];
    if (c.groups == EMU_CP_GROUPS) {
        emu_fault("too many copy groups in flight");
        return;
    }
    c.end[c.groups++] = c.n;
}

/* The oldest groups of this thread land until at most n committed groups are in
 * flight. */
template <int n>
static inline void cp_wait(void)
{
    emu_cp_queue &c = emu_cpq[threadIdx.x];
    int land = c.groups - n;
    if (land <= 0) return;
    int upto = c.end[land - 1];
    for (int i = 0; i < upto; i++)
        if (c.q[i].dst) emu_cp_land(&c.q[i]);
    memmove(c.q, c.q + upto, (size_t)(c.n - upto) * sizeof c.q[0]);
    c.n -= upto;
    for (int g = land; g < c.groups; g++) c.end[g - land] = c.end[g] - upto;
    c.groups -= land;
}

/* cvt.rn.bf16x2.f32 and ex2.approx.ftz.f32 (the host's exp2f; the GPU's own rounding of
 * it is test_cuda's) */
static inline uint32_t bf16x2_rne(float lo, float hi)
{
    return (uint32_t)f32_to_bf16_rne(lo) | (uint32_t)f32_to_bf16_rne(hi) << 16;
}
static inline float exp2_ftz(float x)
{
    float y = exp2f(x);
    return y < 0x1p-126f ? 0.0f : y;
}

/* A block's dynamic shared memory: the size its launch asks for (launch_dyn sets
 * emu_smem_bytes from the kernel's size helper, as cuda_flash.cu does), at most the
 * A800/A100's 163 KiB (the H100's is 227), ending where a page no one may touch
 * begins, and filled with 0xff bytes (bf16 NaNs) before each block. So a kernel that
 * reads or writes past what its launcher asked for faults here, and one that uses a
 * tile it has not written gets NaNs: on the GPU it would read another block's
 * leftovers. */
enum { EMU_SMEM = 163 * 1024 };
static unsigned char *emu_smem_guard; /* the first byte of the page no one may touch */
static size_t emu_smem_bytes;

/* Before each block: fresh shared memory, and when its copies land (LIBRA_EMU_COPIES,
 * read once; unset: by the block's place and the launch's parity, as cuda_block_emu.h
 * alternates the threads' order, so the four mixes of the two come round in four
 * blocks). */
static void emu_block_fresh(void)
{
    static int mode = -1; /* 0 alternate, 1 late, 2 early */
    if (mode < 0) mode = emu_env_choice("LIBRA_EMU_COPIES", "late", "early");
    memset(emu_smem_guard - EMU_SMEM, 0xff, EMU_SMEM);
    emu_cp_early = mode == 0 ? (int)((((blockIdx.x + blockIdx.y) >> 1) + emu_launch_odd) & 1)
                             : mode == 2;
}

/* Maps the region and its guard page (once, before any launch). */
static void emu_smem_map(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), span = (EMU_SMEM + page - 1) / page * page;
    void *m = mmap(NULL, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect((unsigned char *)m + span, page, PROT_NONE)) {
        perror("test_cuda_flash_emu: the emulated shared memory");
        exit(1);
    }
    emu_smem_guard = (unsigned char *)m + span;
    emu_block_start = emu_block_fresh;
}

/* The running block's dynamic shared memory (16-byte aligned, so its last bytes may
 * pad a size that is not a multiple of 16). */
static unsigned char *emu_dyn_smem(void)
{
    if (emu_smem_bytes == 0 || emu_smem_bytes > EMU_SMEM) {
        fprintf(stderr, "test_cuda_flash_emu: %zu bytes of dynamic shared memory (1 .. %d)\n",
                emu_smem_bytes, (int)EMU_SMEM);
        abort();
    }
    return emu_smem_guard - ((emu_smem_bytes + 15) & ~(size_t)15);
}
#define MMA_DYN_SMEM(name) unsigned char *name = emu_dyn_smem()

static void block_end(void)
{
    emu_cp_queue &c = emu_cpq[threadIdx.x];
    if (c.n || c.groups) emu_fault("copies still in flight at the block's end");
    c.n = c.groups = 0;
}

#pragma GCC diagnostic ignored "-Wunused-function" /* the size helpers of other passes */
#include "../src/device/cuda/cuda_flash_kernels.cuh"

/* ---- launches ---- */
struct args {
    int nq, nk, H, K, D, DP, P;
    fl_seqs sq; /* the packed batch of the training kernels */
    float *out, *lse, *delta, *dq, *dk, *dv;
    const float *fq, *fo, *fdo;
    const uint16_t *q, *k, *v, *dout, *kp, *vp;
    const int32_t *pos, *table;
    uint16_t *dst;
    const float *src;
    long long rows;
};

template <int DP>
static void fwd_body(void *p)
{
    const args *a = (const args *)p;
    flash_fwd_k<DP>(a->out, a->lse, a->q, a->k, a->v, a->pos, a->sq, a->H, a->K, a->D,
                    FL_LOG2E / sqrtf((float)a->D));
    block_end();
}
template <int DP>
static void dq_body(void *p)
{
    const args *a = (const args *)p;
    flash_dq_k<DP>(a->dq, a->dout, a->q, a->k, a->v, a->lse, a->delta, a->pos, a->sq, a->H,
                   a->K, a->D, 1.0f / sqrtf((float)a->D));
    block_end();
}
template <int DP>
static void dkv_body(void *p)
{
    const args *a = (const args *)p;
    flash_dkv_k<DP>(a->dk, a->dv, a->dout, a->q, a->k, a->v, a->lse, a->delta, a->pos, a->sq,
                    a->H, a->K, a->D, 1.0f / sqrtf((float)a->D));
    block_end();
}
template <int DP>
static void paged_body(void *p)
{
    const args *a = (const args *)p;
    flash_paged_k<DP>(a->out, a->fq, a->kp, a->vp, a->table, a->pos, a->nq, a->H, a->K, a->D,
                      a->P, FL_LOG2E / sqrtf((float)a->D));
    block_end();
}
static void delta_body(void *p)
{
    const args *a = (const args *)p;
    flash_delta_k(a->delta, a->fdo, a->fo, a->nq, a->H, a->D);
}
static void pad_body(void *p)
{
    const args *a = (const args *)p;
    to_bf16_pad_k(a->dst, a->src, a->rows, a->D, a->DP);
}

typedef void (*body_fn)(void *);
#define BY_DP(DP, fn)                                                                        \
    ((DP) == 32 ? fn<32> : (DP) == 64 ? fn<64> : (DP) == 80 ? fn<80> : fn<128>)

static unsigned blocks(long long n, int per) { return (unsigned)((n + per - 1) / per); }

/* A launch of gx x gy blocks of FL_THREADS with `smem` bytes of dynamic shared memory
 * (set here, by the launching thread, which the blocks' threads then only read). */
static void launch_dyn(unsigned gx, unsigned gy, body_fn body, size_t smem, args *a)
{
    emu_smem_bytes = smem;
    emu_launch_2d(gx, gy, FL_THREADS, body, a);
}

/* src (rows, D) float32 as (rows, DP) bf16, zero-padded, by the kernel. */
static uint16_t *padded(const float *src, long long rows, int D, int DP)
{
    uint16_t *dst = (uint16_t *)malloc((size_t)(rows * DP) * sizeof *dst);
    args a = {};
    a.dst = dst, a.src = src, a.rows = rows, a.D = D, a.DP = DP;
    emu_launch(blocks(rows * DP, 256), 256, pad_body, &a);
    return dst;
}

/* Values that bf16 holds exactly, so the reference sees the kernels' inputs. */
static void fill_bf16(float *x, size_t n, uint64_t seed, float scale)
{
    test_fill_uniform(x, n, seed, scale);
    for (size_t i = 0; i < n; i++) x[i] = st_bf16_to_f32(st_f32_to_bf16(x[i]));
}

static void expect_within(const char *what, const float *got, const float *ref, size_t n,
                          double tol)
{
    double e = test_rel_err(got, ref, n);
    printf("[%s %.1e] ", what, e);
    CU_ASSERT(e <= tol);
}

/* ---- the training kernels: forward, then the backward's three passes ---- */
/* Each launch takes a packed batch of sequences (other lengths, rows after a prefix, an
 * empty one, positions in no order), each sequence held to the references on its own. */
enum { MAX_SEQS = 4 };
struct seq_case {
    int nq, nk, shuffled, ramp; /* ramp: scores that rise with the key (ramp_scores) */
};

/* Sequence s's scores made to rise with the key (positive queries, keys with a ramp of
 * 0.02 a key in every element), so that a row's latest visible keys carry most of its
 * weight and a key a mask wrongly lets in carries more: a mask one key off moves that
 * row's output and gradients by a good part of their size, far past the bounds. */
static void ramp_scores(float *q, float *k, int q0, int nq, int k0, int nk, int H, int K, int D)
{
    for (size_t i = (size_t)q0 * H * D; i < (size_t)(q0 + nq) * H * D; i++)
        q[i] = st_bf16_to_f32(st_f32_to_bf16(0.5f + 0.25f * fabsf(q[i])));
    for (int j = 0; j < nk; j++)
        for (int e = 0; e < K * D; e++) {
            float *x = k + (size_t)(k0 + j) * K * D + e;
            *x = st_bf16_to_f32(st_f32_to_bf16(0.25f * *x + 0.02f * (float)j));
        }
}
static void test_forward_backward(void)
{
    static const struct {
        int H, K, D, n;
        seq_case seq[MAX_SEQS];
    } cases[] = {
        {4, 2, 64, 4, {{37, 37, 0, 0}, {5, 50, 0, 0}, {0, 0, 0, 0}, {20, 20, 0, 0}}},
        {2, 1, 24, 1, {{70, 70, 0, 0}}},
        {2, 2, 128, 2, {{5, 50, 0, 0}, {1, 1, 0, 0}}},
        {2, 1, 80, 2, {{29, 40, 1, 0}, {16, 16, 0, 0}}},
        {1, 1, 32, 2, {{130, 130, 0, 0}, {3, 3, 0, 0}}},
        /* the tiles that need no mask: rows after prefixes of 61 and 62 keys put a
         * warp's lowest position 1-3 keys short of a tile's last key (forward, dq) and
         * a query tile's lowest position one key short of a dk/dv warp's last key;
         * positions in no order put a warp's lowest in any lane */
        {2, 1, 64, 2, {{100, 161, 0, 1}, {90, 152, 0, 1}}},
        {1, 1, 128, 1, {{130, 200, 1, 1}}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int H = cases[c].H, K = cases[c].K, D = cases[c].D, S = cases[c].n;
        int DP = (D + 15) / 16 * 16, HD = H * D, KD = K * D, max_q = 0, max_k = 0;
        int32_t qs[MAX_SEQS + 1] = {0}, ks[MAX_SEQS + 1] = {0};
        for (int s = 0; s < S; s++) {
            qs[s + 1] = qs[s] + cases[c].seq[s].nq;
            ks[s + 1] = ks[s] + cases[c].seq[s].nk;
            max_q = cases[c].seq[s].nq > max_q ? cases[c].seq[s].nq : max_q;
            max_k = cases[c].seq[s].nk > max_k ? cases[c].seq[s].nk : max_k;
        }
        int nq = qs[S], nk = ks[S];
        size_t nqe = (size_t)nq * HD, nke = (size_t)nk * KD, nr = (size_t)nq * H;
        float *q = (float *)malloc(nqe * sizeof *q), *k = (float *)malloc(nke * sizeof *k);
        float *v = (float *)malloc(nke * sizeof *v), *dout = (float *)malloc(nqe * sizeof *dout);
        float *ref = (float *)malloc(nqe * sizeof *ref), *out = (float *)malloc(nqe * sizeof *out);
        float *lse = (float *)malloc(nr * sizeof *lse), *ref_lse = (float *)malloc(nr * sizeof *lse);
        float *delta = (float *)malloc(nr * sizeof *delta);
        float *dq = (float *)malloc(nqe * sizeof *dq), *rdq = (float *)malloc(nqe * sizeof *dq);
        float *dk = (float *)malloc(nke * sizeof *dk), *rdk = (float *)malloc(nke * sizeof *dk);
        float *dv = (float *)malloc(nke * sizeof *dv), *rdv = (float *)malloc(nke * sizeof *dv);
        float *scratch =
            (float *)malloc(attn_scratch_floats(max_q, max_k, H, K, D) * sizeof *scratch);
        int32_t *pos = (int32_t *)malloc((size_t)(nq + 1) * sizeof *pos);
        int *ipos = (int *)malloc((size_t)(nq + 1) * sizeof *ipos);
        fill_bf16(q, nqe, 10 + c, 2.0f);
        fill_bf16(k, nke, 20 + c, 2.0f);
        fill_bf16(v, nke, 30 + c, 1.0f);
        fill_bf16(dout, nqe, 40 + c, 1.0f);
        test_fill_uniform(dq, nqe, 50 + c, 0.1f); /* junk: the gradients are written */
        test_fill_uniform(dk, nke, 60 + c, 0.1f);
        test_fill_uniform(dv, nke, 70 + c, 0.1f);
        memset(rdq, 0, nqe * sizeof *dq); /* the references: added to zeros */
        memset(rdk, 0, nke * sizeof *dk);
        memset(rdv, 0, nke * sizeof *dv);
        for (int s = 0; s < S; s++)
            if (cases[c].seq[s].ramp)
                ramp_scores(q, k, qs[s], cases[c].seq[s].nq, ks[s], cases[c].seq[s].nk, H, K, D);
        for (int s = 0; s < S; s++) { /* the references, a sequence at a time */
            const seq_case &x = cases[c].seq[s];
            for (int i = 0; i < x.nq; i++)
                pos[qs[s] + i] = ipos[qs[s] + i] =
                    x.shuffled ? (int)(((long)i * 37 + 11) % x.nk) : x.nk - x.nq + i;
            size_t qo = (size_t)qs[s], ko = (size_t)ks[s];
            if (x.nq == 0) continue;
            const float *qq = q + qo * HD, *kk = k + ko * KD, *vv = v + ko * KD;
            test_attn_lse(ref_lse + qo * H, qq, kk, ipos + qo, x.nq, H, K, D);
            attn_forward(ref + qo * HD, qq, kk, vv, ipos + qo, x.nq, x.nk, H, K, D, scratch);
            attn_backward(rdq + qo * HD, rdk + ko * KD, rdv + ko * KD, dout + qo * HD, qq, kk, vv,
                          ipos + qo, x.nq, x.nk, H, K, D, scratch);
        }

        uint16_t *qb = padded(q, (long long)nq * H, D, DP), *kb = padded(k, (long long)nk * K, D, DP);
        uint16_t *vb = padded(v, (long long)nk * K, D, DP);
        uint16_t *db = padded(dout, (long long)nq * H, D, DP);
        args a = {};
        a.nq = nq, a.nk = nk, a.H = H, a.K = K, a.D = D, a.DP = DP;
        a.sq = fl_seqs{qs, ks, S};
        a.out = out, a.lse = lse, a.delta = delta, a.dq = dq, a.dk = dk, a.dv = dv;
        a.q = qb, a.k = kb, a.v = vb, a.dout = db, a.pos = pos, a.fo = out, a.fdo = dout;
        emu_faults = 0;
        /* the grids of cuda_flash.cu: S blocks a tile rank of the longest sequence */
        unsigned gq = (unsigned)S * blocks(max_q, FL_ROWS), gk = (unsigned)S * blocks(max_k, FL_ROWS);
        launch_dyn(gq, (unsigned)H, BY_DP(DP, fwd_body), BY_DP(DP, fwd_smem)(), &a);
        emu_launch(blocks((long long)nq * H, FL_WARPS), FL_THREADS, delta_body, &a);
        launch_dyn(gq, (unsigned)H, BY_DP(DP, dq_body), BY_DP(DP, dq_smem)(), &a);
        launch_dyn(gk, (unsigned)K, BY_DP(DP, dkv_body), BY_DP(DP, dkv_smem)(), &a);
        printf("\n    H %d K %d D %d, %d sequences of", H, K, D, S);
        for (int s = 0; s < S; s++)
            printf(" %d/%d%s%s", cases[c].seq[s].nq, cases[c].seq[s].nk,
                   cases[c].seq[s].shuffled ? " (positions in no order)" : "",
                   cases[c].seq[s].ramp ? " (rising scores)" : "");
        printf(" rows/keys: ");
        expect_within("out", out, ref, nqe, 1e-2);
        expect_within("lse", lse, ref_lse, nr, 1e-4);
        expect_within("dq", dq, rdq, nqe, 2e-2);
        expect_within("dk", dk, rdk, nke, 2e-2);
        expect_within("dv", dv, rdv, nke, 2e-2);
        CU_ASSERT_EQUAL(emu_faults, 0);
        float *fb[] = {q, k, v, dout, ref, out, lse, ref_lse, delta, dq, rdq, dk, rdk, dv, rdv,
                       scratch};
        for (size_t i = 0; i < sizeof fb / sizeof fb[0]; i++) free(fb[i]);
        free(qb), free(kb), free(vb), free(db), free(pos), free(ipos);
    }
}

/* ---- the prefill over a paged pool: blocks in no order, a chunk after a prefix ---- */
static void test_paged_prefill(void)
{
    enum { MAX_NB = 64, MAX_Q = 64 };
    /* blocks of P tokens: the staging steps through the block table a key at a time (D
     * 64, 24, 128: a thread's keys 8, 16 and 4 apart, past several blocks a step when
     * P = 3) or looks each key up (D 80) */
    static const struct { int nq, nk, H, K, D, P; } cases[] = {
        {20, 70, 4, 2, 64, 16}, {9, 9, 2, 1, 24, 16}, {40, 150, 2, 1, 80, 6},
        {30, 140, 2, 2, 128, 3}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int nq = cases[c].nq, nk = cases[c].nk, H = cases[c].H, K = cases[c].K, D = cases[c].D;
        int P = cases[c].P, NB = (nk + P - 1) / P + 1;
        if (NB % 5 == 0) NB++; /* the table below is a permutation when 5 is prime to NB */
        int KD = K * D, DP = (D + 15) / 16 * 16;
        size_t nqe = (size_t)nq * H * D, nke = (size_t)nk * KD, pool_n = (size_t)NB * P * KD;
        float *q = (float *)malloc(nqe * sizeof *q), *k = (float *)malloc(nke * sizeof *k);
        float *v = (float *)malloc(nke * sizeof *v), *ref = (float *)malloc(nqe * sizeof *ref);
        float *out = (float *)malloc(nqe * sizeof *out);
        float *scratch = (float *)malloc(attn_scratch_floats(nq, nk, H, K, D) * sizeof *scratch);
        uint16_t *kp = (uint16_t *)calloc(pool_n, sizeof *kp);
        uint16_t *vp = (uint16_t *)calloc(pool_n, sizeof *vp);
        int32_t table[MAX_NB], pos[MAX_Q];
        int ipos[MAX_Q];
        CU_ASSERT_FATAL(NB <= MAX_NB && nq <= MAX_Q);
        fill_bf16(q, nqe, 80 + c, 2.0f);
        fill_bf16(k, nke, 90 + c, 2.0f);
        fill_bf16(v, nke, 100 + c, 1.0f);
        for (int b = 0; b < NB; b++) table[b] = (b * 5 + 3) % NB; /* 5 is prime to 12 */
        for (int j = 0; j < nk; j++) {
            size_t row = (size_t)table[j / P] * P + (size_t)(j % P);
            for (int e = 0; e < KD; e++) {
                kp[row * KD + (size_t)e] = st_f32_to_bf16(k[(size_t)j * KD + (size_t)e]);
                vp[row * KD + (size_t)e] = st_f32_to_bf16(v[(size_t)j * KD + (size_t)e]);
            }
        }
        for (int i = 0; i < nq; i++) pos[i] = ipos[i] = nk - nq + i;
        attn_forward(ref, q, k, v, ipos, nq, nk, H, K, D, scratch);
        args a = {};
        a.nq = nq, a.H = H, a.K = K, a.D = D, a.DP = DP, a.P = P;
        a.out = out, a.fq = q, a.kp = kp, a.vp = vp, a.table = table, a.pos = pos;
        emu_faults = 0;
        launch_dyn(blocks(nq, FL_ROWS), (unsigned)H, BY_DP(DP, paged_body), BY_DP(DP, paged_smem)(),
                   &a);
        printf("\n    nq %d nk %d H %d K %d D %d P %d: ", nq, nk, H, K, D, P);
        expect_within("out", out, ref, nqe, 1e-2);
        CU_ASSERT_EQUAL(emu_faults, 0);
        free(q), free(k), free(v), free(ref), free(out), free(scratch), free(kp), free(vp);
    }
}

/* Each pass's dynamic shared memory fits the emulated block's (the A800's limit). */
static void test_shared_memory(void)
{
    CU_ASSERT(fwd_smem<128>() <= EMU_SMEM);
    CU_ASSERT(dq_smem<128>() <= EMU_SMEM);
    CU_ASSERT(dkv_smem<128>() <= EMU_SMEM);
    CU_ASSERT(paged_smem<128>() <= EMU_SMEM);
    printf("[FL_WARPS %d, FL_LDSM %d: forward %zu, dq %zu, dk/dv %zu, paged prefill %zu bytes "
           "at D 128] ",
           FL_WARPS, FL_LDSM, fwd_smem<128>(), dq_smem<128>(), dkv_smem<128>(),
           paged_smem<128>());
}

int main(void)
{
    emu_smem_map();
    static const struct test_case tc[] = {
        {"flash_fwd, flash_bwd (delta, dq, dk/dv) vs attn_forward / attn_backward",
         test_forward_backward},
        {"prefill_attn over a paged pool vs attn_forward", test_paged_prefill},
        {"shared memory within a block's", test_shared_memory},
        {NULL, NULL}};
    static const struct test_suite suites[] = {
        {"the CUDA tensor-core attention on CPU threads", tc}, {NULL, NULL}};
    return test_main(suites);
}
