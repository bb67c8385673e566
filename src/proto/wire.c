/* Packing and validated unpacking of control-plane messages (include/libra/wire.h). */
#include "libra/wire.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"

_Static_assert(sizeof(struct wire_turn_req) == 72, "wire_turn_req has padding");
_Static_assert(sizeof(struct wire_turn_result) == 88, "wire_turn_result has padding");
_Static_assert(sizeof(struct wire_train_item) == 32, "wire_train_item has padding");
_Static_assert(sizeof(struct wire_train_batch) == 40, "wire_train_batch has padding");
_Static_assert(sizeof(struct wire_train_times) == 64, "wire_train_times has padding");

const char *wire_tag_name(int tag)
{
    switch (tag) {
    case TAG_TURN_REQ: return "turn_req";
    case TAG_TURN_RESULT: return "turn_result";
    case TAG_HANDBACK: return "handback";
    case TAG_PLAN: return "plan";
    case TAG_SYNC: return "sync";
    case TAG_SYNC_DONE: return "sync_done";
    case TAG_TRAIN_BATCH: return "train_batch";
    case TAG_TRAIN_DONE: return "train_done";
    case TAG_HYBRID_GRAD: return "hybrid_grad";
    case TAG_HYBRID_READY: return "hybrid_ready";
    case TAG_TRAIN_STATE: return "train_state";
    case TAG_SHUTDOWN: return "shutdown";
    case TAG_CKPT: return "ckpt";
    case TAG_CKPT_DONE: return "ckpt_done";
    case TAG_HEARTBEAT: return "heartbeat";
    case TAG_TRAIN_TIMES: return "train_times";
    default: return "unknown";
    }
}

void wire_buf_reset(struct wire_buf *b) { b->len = 0; }

void wire_buf_put(struct wire_buf *b, const void *p, size_t n)
{
    XGROW(b->data, b->cap, b->len + n);
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
}

void wire_buf_free(struct wire_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void wire_recv(struct wire_buf *b, const MPI_Status *st, MPI_Comm comm)
{
    int len = 0;
    MPI_CHECK(MPI_Get_count(st, MPI_BYTE, &len));
    XGROW(b->data, b->cap, (size_t)len + 1);
    MPI_CHECK(MPI_Recv(b->data, len, MPI_BYTE, st->MPI_SOURCE, st->MPI_TAG, comm, MPI_STATUS_IGNORE));
    b->len = (size_t)len;
}

void wire_batch_begin(struct wire_buf *b, int32_t sender)
{
    struct wire_batch_hdr h = {0, sender};
    wire_buf_reset(b);
    wire_buf_put(b, &h, sizeof h);
}

int32_t wire_batch_count(const struct wire_buf *b)
{
    struct wire_batch_hdr h;
    memcpy(&h, b->data, sizeof h);
    return h.count;
}

static void batch_bump(struct wire_buf *b)
{
    struct wire_batch_hdr h;
    memcpy(&h, b->data, sizeof h);
    h.count++;
    memcpy(b->data, &h, sizeof h);
}

void wire_batch_add_turn_req(struct wire_buf *b, const struct wire_turn_req *h,
                             const int32_t *tokens)
{
    wire_buf_put(b, h, sizeof *h);
    wire_buf_put(b, tokens, (size_t)h->n_tokens * sizeof(int32_t));
    batch_bump(b);
}

void wire_batch_add_turn_result(struct wire_buf *b, const struct wire_turn_result *h,
                                const int32_t *tokens, const float *logprobs,
                                const int32_t *versions, const int32_t *payload)
{
    size_t n = (size_t)h->n_tokens;
    wire_buf_put(b, h, sizeof *h);
    wire_buf_put(b, tokens, n * sizeof(int32_t));
    wire_buf_put(b, logprobs, n * sizeof(float));
    wire_buf_put(b, versions, n * sizeof(int32_t));
    wire_buf_put(b, payload, (size_t)h->n_payload * sizeof(int32_t));
    batch_bump(b);
}

int wire_reader_init(struct wire_reader *r, const void *msg, size_t len)
{
    struct wire_batch_hdr h;
    if (len < sizeof h) return -1;
    memcpy(&h, msg, sizeof h);
    if (h.count < 0) return -1;
    r->p = (const char *)msg + sizeof h;
    r->left = len - sizeof h;
    r->remaining = h.count;
    r->sender = h.sender;
    return h.count;
}

/* Takes one item: hsize header bytes (copied to h), then n * elem array bytes, n
 * being the int32 at count_off in the header. Returns the arrays' start or NULL. */
static const char *take(struct wire_reader *r, void *h, size_t hsize, size_t count_off,
                        size_t elem)
{
    if (r->left < hsize) return NULL;
    memcpy(h, r->p, hsize);
    int32_t n;
    memcpy(&n, (const char *)h + count_off, sizeof n);
    if (n < 0 || (size_t)n > (r->left - hsize) / elem) return NULL;
    const char *arrays = r->p + hsize;
    r->p += hsize + (size_t)n * elem;
    r->left -= hsize + (size_t)n * elem;
    r->remaining--;
    return arrays;
}

int wire_next_turn_req(struct wire_reader *r, struct wire_turn_req *h, const int32_t **tokens)
{
    if (r->remaining == 0) return r->left == 0 ? 0 : -1;
    const char *a = take(r, h, sizeof *h, offsetof(struct wire_turn_req, n_tokens),
                         sizeof(int32_t));
    if (!a) return -1;
    if (h->turn < 0 || h->ctx_tokens < 0 || h->budget < 0 || h->resume_generated < 0) return -1;
    if (tokens) *tokens = (const int32_t *)a;
    return 1;
}

int wire_next_turn_result(struct wire_reader *r, struct wire_turn_result *h,
                          struct wire_turn_arrays *arr)
{
    if (r->remaining == 0) return r->left == 0 ? 0 : -1;
    if (r->left < sizeof *h) return -1;
    memcpy(h, r->p, sizeof *h);
    size_t left = r->left - sizeof *h;
    if (h->n_tokens < 0 || h->n_payload < 0 || h->gen_tokens < 0 || h->payload_tokens < 0)
        return -1;
    size_t n = (size_t)h->n_tokens, np = (size_t)h->n_payload;
    if (n > left / 12 || np > (left - n * 12) / 4) return -1;
    const char *a = r->p + sizeof *h;
    if (arr) {
        arr->tokens = (const int32_t *)a;
        arr->logprobs = (const float *)(a + n * 4);
        arr->versions = (const int32_t *)(a + n * 8);
        arr->payload = (const int32_t *)(a + n * 12);
    }
    size_t used = sizeof *h + n * 12 + np * 4;
    r->p += used;
    r->left -= used;
    r->remaining--;
    return 1;
}

static size_t mask_bytes(int32_t tokens) { return ((size_t)tokens + 7) / 8 * 8; }

void wire_train_batch_begin(struct wire_buf *b, const struct wire_train_batch *h)
{
    wire_buf_reset(b);
    wire_buf_put(b, h, sizeof *h);
}

void wire_train_batch_add(struct wire_buf *b, const struct wire_train_item *it,
                          const int32_t *ids, const float *logp, const uint8_t *mask)
{
    static const uint8_t zeros[8];
    wire_buf_put(b, it, sizeof *it);
    if (!it->has_data) return;
    size_t n = (size_t)it->tokens;
    wire_buf_put(b, ids, n * sizeof(int32_t));
    wire_buf_put(b, logp, n * sizeof(float));
    wire_buf_put(b, mask, n);
    wire_buf_put(b, zeros, mask_bytes(it->tokens) - n);
}

int wire_train_batch_read(struct wire_reader *r, const void *msg, size_t len,
                          struct wire_train_batch *h)
{
    if (len < sizeof *h) return -1;
    memcpy(h, msg, sizeof *h);
    if (h->n_items < 0 || h->n_replicas < 1) return -1;
    r->p = (const char *)msg + sizeof *h;
    r->left = len - sizeof *h;
    r->remaining = h->n_items;
    r->sender = 0;
    return 0;
}

int wire_next_train_item(struct wire_reader *r, struct wire_train_item *it, const int32_t **ids,
                         const float **logp, const uint8_t **mask)
{
    if (r->remaining == 0) return r->left == 0 ? 0 : -1;
    if (r->left < sizeof *it) return -1;
    memcpy(it, r->p, sizeof *it);
    if (it->tokens < 0 || it->gen_tokens < 0 || it->gen_tokens > it->tokens) return -1;
    size_t used = sizeof *it;
    *ids = NULL;
    *logp = NULL;
    *mask = NULL;
    if (it->has_data) {
        size_t n = (size_t)it->tokens;
        if (n > (r->left - used) / 9 || n * 8 + mask_bytes(it->tokens) > r->left - used) return -1;
        const char *a = r->p + used;
        *ids = (const int32_t *)a;
        *logp = (const float *)(a + n * 4);
        *mask = (const uint8_t *)(a + n * 8);
        used += n * 8 + mask_bytes(it->tokens);
    }
    r->p += used;
    r->left -= used;
    r->remaining--;
    return 1;
}
