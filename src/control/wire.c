/* Packing and validated unpacking of control-plane messages (include/libra/wire.h). */
#include "libra/wire.h"

#include <stdlib.h>
#include <string.h>

#include "libra/log.h"

_Static_assert(sizeof(struct wire_turn_req) == 56, "wire_turn_req has padding");
_Static_assert(sizeof(struct wire_turn_result) == 72, "wire_turn_result has padding");
_Static_assert(sizeof(struct wire_train_item) == 16, "wire_train_item has padding");
_Static_assert(sizeof(struct wire_train_batch) == 32, "wire_train_batch has padding");

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
    case TAG_SHUTDOWN: return "shutdown";
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

void wire_pack_turn_req(struct wire_buf *b, const struct wire_turn_req *h, const int32_t *tokens)
{
    wire_buf_put(b, h, sizeof *h);
    wire_buf_put(b, tokens, (size_t)h->n_tokens * sizeof(int32_t));
}

void wire_pack_turn_result(struct wire_buf *b, const struct wire_turn_result *h,
                           const int32_t *tokens, const float *logprobs)
{
    wire_buf_put(b, h, sizeof *h);
    wire_buf_put(b, tokens, (size_t)h->n_tokens * sizeof(int32_t));
    wire_buf_put(b, logprobs, (size_t)h->n_tokens * sizeof(float));
}

/* Copies a header out of msg; check_tail then checks the length it announces. */
static int unpack_head(const void *msg, size_t len, void *h, size_t hsize)
{
    if (len < hsize) return -1;
    memcpy(h, msg, hsize);
    return 0;
}

static int check_tail(size_t len, size_t hsize, int32_t count, size_t elem)
{
    if (count < 0) return -1;
    return len == hsize + (size_t)count * elem ? 0 : -1;
}

int wire_unpack_turn_req(const void *msg, size_t len, struct wire_turn_req *h,
                         const int32_t **tokens)
{
    if (unpack_head(msg, len, h, sizeof *h)) return -1;
    if (check_tail(len, sizeof *h, h->n_tokens, sizeof(int32_t))) return -1;
    if (h->turn < 0 || h->ctx_tokens < 0 || h->budget < 0 || h->resume_generated < 0) return -1;
    if (tokens) *tokens = (const int32_t *)((const char *)msg + sizeof *h);
    return 0;
}

int wire_unpack_turn_result(const void *msg, size_t len, struct wire_turn_result *h,
                            const int32_t **tokens, const float **logprobs)
{
    if (unpack_head(msg, len, h, sizeof *h)) return -1;
    if (check_tail(len, sizeof *h, h->n_tokens, sizeof(int32_t) + sizeof(float))) return -1;
    if (h->gen_tokens < 0 || h->payload_tokens < 0) return -1;
    const char *p = (const char *)msg + sizeof *h;
    if (tokens) *tokens = (const int32_t *)p;
    if (logprobs) *logprobs = (const float *)(p + (size_t)h->n_tokens * sizeof(int32_t));
    return 0;
}

int wire_unpack_handback(const void *msg, size_t len, struct wire_handback_hdr *h,
                         const struct wire_turn_result **items)
{
    if (unpack_head(msg, len, h, sizeof *h)) return -1;
    if (check_tail(len, sizeof *h, h->count, sizeof(struct wire_turn_result))) return -1;
    *items = (const struct wire_turn_result *)((const char *)msg + sizeof *h);
    return 0;
}

int wire_unpack_train_batch(const void *msg, size_t len, struct wire_train_batch *h,
                            const struct wire_train_item **items)
{
    if (unpack_head(msg, len, h, sizeof *h)) return -1;
    if (check_tail(len, sizeof *h, h->n_items, sizeof(struct wire_train_item))) return -1;
    *items = (const struct wire_train_item *)((const char *)msg + sizeof *h);
    return 0;
}
