/*
 * A transformer's weights on the GPU (device.type = "cuda"), for the GPU engine of
 * src/device/gpu/: the host side of the CUDA device, which drives the kernels of the
 * CUDA module (include/libra/cuda_api.h) and links no CUDA library itself.
 *
 * Storage: the parameters keep tfm_params' layout (include/libra/tfm.h, tfm_layout_of)
 * in one bf16 block on the GPU -- matrices, embeddings and norm weights, rounded to
 * nearest even (exact for weights read from a bf16 checkpoint) -- and the q/k/v
 * biases (qwen2) once more in float32, which add_bias reads.
 *
 * Errors: a CUDA call that fails calls FATAL with the module's message (the call, the
 * CUDA error, file:line); the upload returns NULL + message only for what the caller
 * can act on (no module, no GPU, too little memory).
 */
#ifndef LIBRA_GPU_MODEL_H
#define LIBRA_GPU_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "libra/cuda_api.h"
#include "libra/log.h"
#include "libra/tfm.h"

/* A module call that fails ends the job: its message names the CUDA call, the CUDA
 * error and the module's file:line; FATAL adds the caller's. */
#define GPU_CHECK(api, call)                                                              \
    do {                                                                                  \
        if ((call) != 0) FATAL("CUDA: %s: %s", #call, (api)->last_error());               \
    } while (0)

struct gpu_model {
    const struct cuda_api *api;
    struct tfm_config c;
    struct tfm_layout at;  /* offsets into w */
    uint16_t *w;           /* device: every parameter, bf16 */
    float *bq, *bk, *bv;   /* device: (L, H*D), (L, K*D), (L, K*D) float32 (attention_bias,
                              else NULL), one allocation at bq */
    float *stage;          /* device: float32 staging of a weight install (16 MiB) */
    size_t bytes;          /* device memory held */
};

/* The CUDA module, with GPU `gpu` made current; NULL + message (no module, no driver,
 * no such GPU). */
const struct cuda_api *gpu_open(int gpu, char *err, size_t errlen);

/* The module's side stream (cuda_api.h), for weight syncs that move beside the work on
 * the kernels' stream: side_begin sends the module's calls there (after the kernels'
 * work so far), side_end sends them back and marks where the side stream stands,
 * side_wait polls until that mark is done (the host waits; the kernels' stream does
 * not: side_join for that). */
void gpu_side_begin(const struct cuda_api *api);
void gpu_side_end(const struct cuda_api *api);
void gpu_side_wait(const struct cuda_api *api);

/* Uploads p (the model c) to the current GPU. NULL + message if it does not fit. */
struct gpu_model *gpu_model_upload(const struct cuda_api *api, const struct tfm_config *c,
                                   const struct tfm_params *p, char *err, size_t errlen);
/* The same from weights already in bf16 (w16: c's layout; see gpu_model_set_weights_bf16). */
struct gpu_model *gpu_model_upload_bf16(const struct cuda_api *api, const struct tfm_config *c,
                                        const uint16_t *w16, char *err, size_t errlen);
/* A model of c's shapes with no host copy of its weights (benchmarks of large
 * shapes): matrices are a pseudo-random pattern of scale std keyed by seed, tiled;
 * norm weights 1, biases 0. NULL + message if it does not fit. */
struct gpu_model *gpu_model_pattern(const struct cuda_api *api, const struct tfm_config *c,
                                    uint64_t seed, float std, char *err, size_t errlen);
/* New weights for the model (p: its config's layout), rounded to bf16 again: the
 * float32 values are copied to the GPU a chunk at a time and rounded there
 * (f32_to_bf16, st_f32_to_bf16's rounding bit for bit). */
void gpu_model_set_weights(struct gpu_model *m, const struct tfm_params *p);
/* New weights already in bf16 (w16: the model's layout, at.n values): copied to the
 * GPU as they are, the q/k/v biases widened to their float32 copies -- what
 * gpu_model_set_weights makes of their widened float32 values, with half the bytes. */
void gpu_model_set_weights_bf16(struct gpu_model *m, const uint16_t *w16);
/* The q/k/v biases' float32 copies widened again from the bf16 block (after the block
 * was written on the GPU, e.g. by a weight sync's receives); a no-op without biases. */
void gpu_model_refresh_biases(struct gpu_model *m);
void gpu_model_free(struct gpu_model *m);

/* Device pointer to layer l's slice (per_layer elements) of the tensor at offset `at`
 * of the layout; NULL for TFM_ABSENT. */
const uint16_t *gpu_model_w(const struct gpu_model *m, size_t at, size_t per_layer, int l);

/* A global token id as a row of a vocabulary shard [v0, v0 + Vl) (embed_gather's and
 * the vocab_* kernels' convention): id - v0 when the shard holds it, else -1. */
static inline int32_t gpu_vocab_row(int32_t id, int v0, int Vl)
{
    int32_t r = id - v0;
    return id >= 0 && r >= 0 && r < Vl ? r : -1;
}

#endif
