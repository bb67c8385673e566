/*
 * The CUDA device module's table (include/libra/cuda_api.h): devices, memory, sync,
 * error reporting, and the kernels of cuda_kernels.cu. Built into src/libra-cuda.so
 * by ./configure --with-cuda and loaded at run time by cuda_module_load.
 */
#include "cuda_internal.h"

#include <nccl.h>
#include <stdio.h>

#include "libra/cuda_api.h"

static __thread char last_err[512]; /* per thread: what the last failed call reported */

int cu_fail(const char *what, cudaError_t e, const char *file, int line)
{
    if (e == cudaSuccess)
        snprintf(last_err, sizeof last_err, "%s (%s:%d)", what, file, line);
    else
        snprintf(last_err, sizeof last_err, "%s: %s (%s, %s:%d)", what, cudaGetErrorString(e),
                 cudaGetErrorName(e), file, line);
    return -1;
}

static const char *cu_last_error(void) { return last_err[0] ? last_err : "no error"; }

static int cu_device_count(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return cu_fail("cudaGetDeviceCount", e, __FILE__, __LINE__);
    if (n == 0) return cu_fail("cudaGetDeviceCount: no GPU", cudaSuccess, __FILE__, __LINE__);
    return n;
}

static int cu_device_describe(int i, char *out, size_t cap)
{
    struct cudaDeviceProp p;
    CU_CHECK(cudaGetDeviceProperties(&p, i));
    snprintf(out, cap, "GPU %d: %s, %.1f GiB, compute capability %d.%d, %d SMs", i, p.name,
             (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), p.major, p.minor,
             p.multiProcessorCount);
    return 0;
}

static cudaStream_t stream;
static int stream_device = -1;
/* The side stream (non-blocking: the legacy stream's copies do not wait for it) and
 * its mark, made on the stream's device at the first side_stream(1); use_side: the
 * calls go there now. */
static cudaStream_t side;
static cudaEvent_t side_ev, main_ev; /* the side stream's mark; where the kernels' stood */
static int use_side;

static cudaStream_t main_stream(void)
{
    if (stream_device < 0) { /* first use without set_device: the current device */
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaStreamCreate(&stream) != cudaSuccess)
            return 0; /* the legacy stream: launches still work, graphs will not */
        stream_device = dev;
    }
    return stream;
}

cudaStream_t cu_stream(void) { return use_side ? side : main_stream(); }

static int side_destroy(void)
{
    use_side = 0;
    if (side) CU_CHECK(cudaStreamDestroy(side));
    if (side_ev) CU_CHECK(cudaEventDestroy(side_ev));
    if (main_ev) CU_CHECK(cudaEventDestroy(main_ev));
    side = NULL;
    side_ev = main_ev = NULL;
    return 0;
}

static int cu_side_stream(int on)
{
    if (on && !side) {
        if (!main_stream())
            return cu_fail("side_stream: no stream", cudaSuccess, __FILE__, __LINE__);
        CU_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
        CU_CHECK(cudaEventCreateWithFlags(&side_ev, cudaEventDisableTiming));
        CU_CHECK(cudaEventCreateWithFlags(&main_ev, cudaEventDisableTiming));
    }
    if (on && !use_side) { /* what follows there starts after the kernels' work so far */
        CU_CHECK(cudaEventRecord(main_ev, main_stream()));
        CU_CHECK(cudaStreamWaitEvent(side, main_ev, 0));
    }
    use_side = on != 0;
    return 0;
}

static int cu_side_mark(void)
{
    if (!side) return cu_fail("side_mark: no side stream", cudaSuccess, __FILE__, __LINE__);
    CU_CHECK(cudaEventRecord(side_ev, side));
    return 0;
}

static int cu_side_done(void)
{
    if (!side) return cu_fail("side_done: no side stream", cudaSuccess, __FILE__, __LINE__);
    cudaError_t e = cudaEventQuery(side_ev);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError(); /* not sticky, but not an error either */
        return 0;
    }
    if (e != cudaSuccess) return cu_fail("cudaEventQuery", e, __FILE__, __LINE__);
    return 1;
}

static int cu_side_join(void)
{
    if (!side) return cu_fail("side_join: no side stream", cudaSuccess, __FILE__, __LINE__);
    CU_CHECK(cudaStreamWaitEvent(main_stream(), side_ev, 0));
    return 0;
}

int cu_scratch_grow(void **p, size_t *have, size_t bytes)
{
    if (bytes <= *have) return 0;
    CU_CHECK(cudaStreamSynchronize(cu_stream()));
    CU_CHECK(cudaFree(*p));
    *p = NULL;
    *have = 0;
    CU_CHECK(cudaMalloc(p, bytes));
    *have = bytes;
    return 0;
}

int cu_overlap;

/* The decoder turns it on around each forward, inside a graph's recording too: the
 * device's compute capability is asked once a device, not at every call. */
static int cu_launch_overlap(int on)
{
    static int asked_dev = -1, major;
    int dev = 0;
    if (on) {
        CU_CHECK(cudaGetDevice(&dev));
        if (dev != asked_dev) {
            CU_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
            asked_dev = dev;
        }
    }
    cu_overlap = on && major >= 9; /* programmatic dependent launch: sm_90 on */
    return cu_overlap;
}

static int cu_set_device(int i)
{
    CU_CHECK(cudaSetDevice(i));
    if (stream_device == i) return 0;
    if (side_destroy()) return -1;
    if (stream_device >= 0) CU_CHECK(cudaStreamDestroy(stream));
    stream_device = -1;
    CU_CHECK(cudaStreamCreate(&stream));
    stream_device = i;
    return 0;
}

static int cu_graph_begin(void)
{
    if (cu_gemm_prepare() || cu_attention_prepare()) return -1;
    if (!cu_stream()) return cu_fail("graph_begin: no stream", cudaSuccess, __FILE__, __LINE__);
    CU_CHECK(cudaStreamBeginCapture(cu_stream(), cudaStreamCaptureModeThreadLocal));
    return 0;
}

static int cu_graph_end(void **out)
{
    cudaGraph_t g = NULL;
    cudaGraphExec_t exec = NULL;
    *out = NULL;
    CU_CHECK(cudaStreamEndCapture(cu_stream(), &g));
    cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) return cu_fail("cudaGraphInstantiate", e, __FILE__, __LINE__);
    *out = exec;
    return 0;
}

static int cu_graph_launch(void *graph)
{
    CU_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, cu_stream()));
    return 0;
}

static int cu_graph_free(void *graph)
{
    if (graph) CU_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)graph));
    return 0;
}

static void cu_versions(int *cuda_runtime, int *nccl)
{
    *cuda_runtime = 0;
    *nccl = 0;
    (void)cudaRuntimeGetVersion(cuda_runtime);
    (void)ncclGetVersion(nccl);
}

static int cu_alloc(void **p, size_t bytes)
{
    CU_CHECK(cudaMalloc(p, bytes ? bytes : 1));
    return 0;
}

static int cu_free(void *p)
{
    if (p) CU_CHECK(cudaFree(p));
    return 0;
}

static int cu_host_alloc(void **p, size_t bytes)
{
    CU_CHECK(cudaMallocHost(p, bytes ? bytes : 1));
    return 0;
}

static int cu_host_free(void *p)
{
    if (p) CU_CHECK(cudaFreeHost(p));
    return 0;
}

/* The copies run on the current stream (the kernels' or the side stream), so a copy
 * of a weight sync's run on the side stream comes after what that stream did before
 * it; to and from the host they then wait for it. */
static int cu_to_device(void *dst, const void *src, size_t bytes)
{
    if (!bytes) return 0;
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cu_stream()));
    CU_CHECK(cudaStreamSynchronize(cu_stream()));
    return 0;
}

static int cu_to_host(void *dst, const void *src, size_t bytes)
{
    if (!bytes) return 0;
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cu_stream()));
    CU_CHECK(cudaStreamSynchronize(cu_stream()));
    return 0;
}

static int cu_to_device_async(void *dst, const void *src, size_t bytes)
{
    if (bytes) CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cu_stream()));
    return 0;
}

static int cu_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes) CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu_stream()));
    return 0;
}

static int cu_copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                     size_t height)
{
    if (width && height)
        CU_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height,
                                   cudaMemcpyDeviceToDevice, cu_stream()));
    return 0;
}

static int cu_zero(void *p, size_t bytes)
{
    if (bytes) CU_CHECK(cudaMemsetAsync(p, 0, bytes, cu_stream()));
    return 0;
}

static int cu_mem_info(size_t *free_bytes, size_t *total_bytes)
{
    CU_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
    return 0;
}

/* The current stream only: a decode step's sync must not wait for a weight sync
 * landing on the side stream (that is the side stream's point). */
static int cu_sync(void)
{
    CU_CHECK(cudaStreamSynchronize(cu_stream()));
    return cu_device_error_check();
}

static const struct cuda_api api = {
    LIBRA_CUDA_ABI,
    cu_device_count,
    cu_device_describe,
    cu_set_device,
    cu_versions,
    cu_alloc,
    cu_free,
    cu_to_device,
    cu_to_host,
    cu_copy,
    cu_zero,
    cu_mem_info,
    cu_sync,
    cu_embed_gather,
    cu_rmsnorm_fwd,
    cu_rmsnorm_fwd16,
    cu_rope_fwd,
    cu_swiglu_fwd,
    cu_swiglu_fwd16,
    cu_f32_to_bf16,
    cu_embed_scatter_add,
    cu_rmsnorm_bwd,
    cu_rope_bwd,
    cu_qk_norm_rope_fwd,
    cu_qk_norm_rope_bwd,
    cu_swiglu_bwd,
    cu_swiglu_bwd16,
    cu_linear_fwd,
    cu_linear_fwd_res,
    cu_add_bias,
    cu_linear_bwd,
    cu_bias_bwd,
    cu_gemv,
    cu_attn_fwd,
    cu_attn_bwd,
    cu_flash_fwd,
    cu_flash_bwd,
    cu_prefill_attn,
    cu_kv_append,
    cu_decode_attn,
    cu_decode_qkv,
    cu_logsoftmax_fwd,
    cu_logsoftmax_bwd,
    cu_sample,
    cu_sum_squares,
    cu_adamw_update,
    cu_graph_begin,
    cu_graph_end,
    cu_graph_launch,
    cu_graph_free,
    cu_last_error,
    cu_vocab_max,
    cu_vocab_sums,
    cu_vocab_logsoftmax_bwd,
    cu_nccl_id,
    cu_nccl_init,
    cu_nccl_allreduce,
    cu_nccl_free,
    cu_entropy_bwd,
    cu_vocab_entropy_bwd,
    cu_vocab_greedy_stats,
    cu_vocab_sample_max,
    cu_vocab_sample_sums,
    cu_vocab_sample_pick,
    cu_vocab_sample_topk,
    cu_weights_hash,
    cu_host_alloc,
    cu_host_free,
    cu_nccl_send,
    cu_nccl_recv,
    cu_nccl_group,
    cu_copy2d,
    cu_side_stream,
    cu_to_device_async,
    cu_side_mark,
    cu_side_done,
    cu_side_join,
    cu_launch_overlap,
};

extern "C" __attribute__((visibility("default"))) const struct cuda_api *libra_cuda_api(void)
{
    return &api;
}
