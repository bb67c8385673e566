/*
 * A transformer's weights on the GPU (include/libra/gpu_model.h): the upload of a
 * host model in bf16, and a pattern-filled model for benchmarks of large shapes.
 */
#include "libra/gpu_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/cuda_module.h"
#include "libra/errmsg.h"
#include "libra/log.h"
#include "libra/mpi_wait.h"
#include "libra/rng.h"
#include "libra/safetensors.h"

#define UPLOAD_CHUNK ((size_t)1 << 22) /* elements sent (and rounded on the GPU) at a time */

const struct cuda_api *gpu_open(int gpu, char *err, size_t errlen)
{
    const struct cuda_api *api = cuda_module_load(err, errlen);
    if (!api) return NULL;
    int n = api->device_count();
    if (n < 0) {
        errmsg_set(err, errlen, "no usable GPU: %s", api->last_error());
        return NULL;
    }
    if (gpu < 0 || gpu >= n) {
        errmsg_set(err, errlen, "GPU %d asked for, %d present", gpu, n);
        return NULL;
    }
    if (api->set_device(gpu)) {
        errmsg_set(err, errlen, "GPU %d: %s", gpu, api->last_error());
        return NULL;
    }
    return api;
}

void gpu_side_begin(const struct cuda_api *api) { GPU_CHECK(api, api->side_stream(1)); }

void gpu_side_end(const struct cuda_api *api)
{
    GPU_CHECK(api, api->side_stream(0));
    GPU_CHECK(api, api->side_mark());
}

void gpu_side_wait(const struct cuda_api *api)
{
    int done;
    while ((done = api->side_done()) == 0) sleep_seconds(5e-5);
    if (done < 0) FATAL("CUDA: the side stream: %s", api->last_error());
}

/* The device blocks of a model of c's shapes (weights not yet written); NULL +
 * message if the GPU's free memory cannot hold them. */
static struct gpu_model *model_alloc(const struct cuda_api *api, const struct tfm_config *c,
                                     char *err, size_t errlen)
{
    if (tfm_config_check(c, err, errlen)) return NULL;
    struct gpu_model *m = xcalloc(1, sizeof *m);
    m->api = api;
    m->c = *c;
    tfm_layout_of(c, &m->at);
    size_t L = (size_t)c->n_layers, HD = (size_t)c->n_heads * c->head_dim;
    size_t KD = (size_t)c->n_kv_heads * c->head_dim;
    size_t nb = c->attention_bias ? L * (HD + 2 * KD) : 0;
    size_t need = m->at.n * sizeof(uint16_t) + (nb + UPLOAD_CHUNK) * sizeof(float);
    size_t free_b = 0, total_b = 0;
    GPU_CHECK(api, api->mem_info(&free_b, &total_b));
    if (need > free_b) {
        errmsg_set(err, errlen, "the model's weights need %.2f GB of GPU memory, %.2f GB are "
                                "free (of %.2f GB)", need / 1e9, free_b / 1e9, total_b / 1e9);
        free(m);
        return NULL;
    }
    GPU_CHECK(api, api->alloc((void **)&m->w, m->at.n * sizeof(uint16_t)));
    GPU_CHECK(api, api->alloc((void **)&m->stage, UPLOAD_CHUNK * sizeof(float)));
    if (nb) {
        GPU_CHECK(api, api->alloc((void **)&m->bq, nb * sizeof(float)));
        m->bk = m->bq + L * HD;
        m->bv = m->bk + L * KD;
    }
    m->bytes = need;
    return m;
}

/* Writes n floats of host src as float32 at device dst. */
static void upload_f32(const struct cuda_api *api, float *dst, const float *src, size_t n)
{
    GPU_CHECK(api, api->to_device(dst, src, n * sizeof *src));
}

void gpu_model_set_weights(struct gpu_model *m, const struct tfm_params *p)
{
    const struct cuda_api *api = m->api;
    const struct tfm_config *c = &m->c;
    if (p->n != m->at.n)
        FATAL("gpu_model_set_weights: %zu parameters for a model of %zu", p->n, m->at.n);
    /* the copy is synchronous and ordered with the kernels' stream: a chunk is not
     * overwritten before its rounding has read it */
    for (size_t i0 = 0; i0 < p->n; i0 += UPLOAD_CHUNK) {
        size_t n = p->n - i0 < UPLOAD_CHUNK ? p->n - i0 : UPLOAD_CHUNK;
        GPU_CHECK(api, api->to_device(m->stage, p->mem + i0, n * sizeof *p->mem));
        GPU_CHECK(api, api->f32_to_bf16(m->w + i0, m->stage, (int64_t)n));
    }
    GPU_CHECK(api, api->sync());
    if (c->attention_bias) {
        size_t L = (size_t)c->n_layers, HD = (size_t)c->n_heads * c->head_dim;
        size_t KD = (size_t)c->n_kv_heads * c->head_dim;
        upload_f32(api, m->bq, p->bq, L * HD);
        upload_f32(api, m->bk, p->bk, L * KD);
        upload_f32(api, m->bv, p->bv, L * KD);
    }
}

/* The float32 copy of one bias tensor, widened from its bf16 values on the host. */
static void upload_bias16(const struct cuda_api *api, float *dst, const uint16_t *src, size_t n)
{
    float *f = xmalloc((n ? n : 1) * sizeof *f);
    st_bf16_to_f32_n(src, f, n);
    upload_f32(api, dst, f, n);
    free(f);
}

void gpu_model_set_weights_bf16(struct gpu_model *m, const uint16_t *w16)
{
    const struct cuda_api *api = m->api;
    const struct tfm_config *c = &m->c;
    GPU_CHECK(api, api->to_device(m->w, w16, m->at.n * sizeof *w16));
    if (c->attention_bias) {
        size_t L = (size_t)c->n_layers, HD = (size_t)c->n_heads * c->head_dim;
        size_t KD = (size_t)c->n_kv_heads * c->head_dim;
        upload_bias16(api, m->bq, w16 + m->at.bq, L * HD);
        upload_bias16(api, m->bk, w16 + m->at.bk, L * KD);
        upload_bias16(api, m->bv, w16 + m->at.bv, L * KD);
    }
    GPU_CHECK(api, api->sync());
}

void gpu_model_refresh_biases(struct gpu_model *m)
{
    const struct tfm_config *c = &m->c;
    if (!c->attention_bias) return;
    size_t L = (size_t)c->n_layers, HD = (size_t)c->n_heads * c->head_dim;
    size_t KD = (size_t)c->n_kv_heads * c->head_dim;
    struct { size_t at, n; float *to; } b[3] = {
        {m->at.bq, L * HD, m->bq}, {m->at.bk, L * KD, m->bk}, {m->at.bv, L * KD, m->bv}};
    for (int k = 0; k < 3; k++) {
        uint16_t *h = xmalloc((b[k].n ? b[k].n : 1) * sizeof *h);
        GPU_CHECK(m->api, m->api->to_host(h, m->w + b[k].at, b[k].n * sizeof *h));
        upload_bias16(m->api, b[k].to, h, b[k].n);
        free(h);
    }
    GPU_CHECK(m->api, m->api->sync());
}

struct gpu_model *gpu_model_upload(const struct cuda_api *api, const struct tfm_config *c,
                                   const struct tfm_params *p, char *err, size_t errlen)
{
    struct gpu_model *m = model_alloc(api, c, err, errlen);
    if (!m) return NULL;
    gpu_model_set_weights(m, p);
    return m;
}

struct gpu_model *gpu_model_upload_bf16(const struct cuda_api *api, const struct tfm_config *c,
                                        const uint16_t *w16, char *err, size_t errlen)
{
    struct gpu_model *m = model_alloc(api, c, err, errlen);
    if (!m) return NULL;
    gpu_model_set_weights_bf16(m, w16);
    return m;
}

/* Tiles the device bf16 w[0, n) with pattern (pattern_n elements). */
static void fill(const struct cuda_api *api, uint16_t *w, size_t n, const uint16_t *pattern,
                 size_t pattern_n)
{
    for (size_t i0 = 0; i0 < n; i0 += pattern_n) {
        size_t k = n - i0 < pattern_n ? n - i0 : pattern_n;
        GPU_CHECK(api, api->to_device(w + i0, pattern, k * sizeof *pattern));
    }
}

struct gpu_model *gpu_model_pattern(const struct cuda_api *api, const struct tfm_config *c,
                                    uint64_t seed, float std, char *err, size_t errlen)
{
    struct gpu_model *m = model_alloc(api, c, err, errlen);
    if (!m) return NULL;
    /* An odd pattern length, so that rows of every width see shifted values. */
    size_t pn = UPLOAD_CHUNK - 7;
    uint16_t *pat = xmalloc(UPLOAD_CHUNK * sizeof *pat);
    uint16_t *ones = xmalloc(UPLOAD_CHUNK * sizeof *ones);
    struct rng r;
    rng_init(&r, seed, 0x67707570u /* "gpup" */, 0, 0);
    for (size_t i = 0; i < pn; i++) pat[i] = st_f32_to_bf16((float)(std * rng_normal(&r)));
    for (size_t i = 0; i < UPLOAD_CHUNK; i++) ones[i] = st_f32_to_bf16(1.0f);
    const struct tfm_layout *a = &m->at;
    size_t L = (size_t)c->n_layers, C = (size_t)c->hidden_size, D = (size_t)c->head_dim;
    size_t HD = (size_t)c->n_heads * D, KD = (size_t)c->n_kv_heads * D;
    size_t F = (size_t)c->intermediate_size, V = (size_t)c->vocab_size;
    struct { size_t at, n; int norm; } t[] = {
        {a->embed, V * C, 0}, {a->ln1, L * C, 1}, {a->wq, L * HD * C, 0}, {a->wk, L * KD * C, 0},
        {a->wv, L * KD * C, 0}, {a->q_norm, L * D, 1}, {a->k_norm, L * D, 1},
        {a->wo, L * C * HD, 0}, {a->ln2, L * C, 1}, {a->w_gate, L * F * C, 0},
        {a->w_up, L * F * C, 0}, {a->w_down, L * C * F, 0}, {a->ln_f, C, 1},
        {c->tie_word_embeddings ? TFM_ABSENT : a->lm_head, V * C, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i].at != TFM_ABSENT)
            fill(api, m->w + t[i].at, t[i].n, t[i].norm ? ones : pat,
                 t[i].norm ? UPLOAD_CHUNK : pn);
    if (c->attention_bias) {
        size_t nb = L * (HD + 2 * KD);
        float *zero = xcalloc(nb, sizeof *zero);
        upload_f32(api, m->bq, zero, nb);
        free(zero);
    }
    free(pat);
    free(ones);
    return m;
}

void gpu_model_free(struct gpu_model *m)
{
    if (!m) return;
    GPU_CHECK(m->api, m->api->free(m->w));
    GPU_CHECK(m->api, m->api->free(m->bq));
    GPU_CHECK(m->api, m->api->free(m->stage));
    free(m);
}

const uint16_t *gpu_model_w(const struct gpu_model *m, size_t at, size_t per_layer, int l)
{
    return at == TFM_ABSENT ? NULL : m->w + at + (size_t)l * per_layer;
}
