/*
 * Demonstrations in the vocabulary's format (src/env/demo.h). A tool response that
 * fills the rest of the buffer exactly counts as not fitting: the format may have cut
 * it, and the answer that must follow would not fit anyway.
 */
#include "demo.h"

#include <string.h>

struct demo_buf demo_buf_make(const struct env *e, int32_t *ids, uint8_t *mask, int cap)
{
    return (struct demo_buf){e, ids, mask, 0, cap < 0 ? 0 : cap, 0};
}

/* Marks the k ids just written with mask m; overflow if more were needed than fit. */
static void demo_take(struct demo_buf *d, size_t k, uint8_t m)
{
    size_t room = (size_t)(d->cap - d->n);
    if (k > room) {
        d->overflow = 1;
        return;
    }
    memset(d->mask + d->n, m, k);
    d->n += (int)k;
}

void demo_call(struct demo_buf *d, const char *call, const struct env_tool_result *res)
{
    const struct vocab *v = d->e->vocab;
    if (d->overflow) return;
    size_t room = (size_t)(d->cap - d->n);
    demo_take(d, v->write_call(v->ctx, env_tool_spec(d->e), call, strlen(call), d->ids + d->n,
                               room), 1);
    if (d->overflow) return;
    room = (size_t)(d->cap - d->n);
    int len = res->len < 0 ? 0 : res->len > ENV_PAYLOAD_MAX ? ENV_PAYLOAD_MAX : res->len;
    size_t k = v->tool_response(v->ctx, res->text, (size_t)len, d->ids + d->n, room);
    if (k == 0 || k >= room) {
        d->overflow = 1;
        return;
    }
    demo_take(d, k, 0);
}

void demo_answer(struct demo_buf *d, const char *text)
{
    const struct vocab *v = d->e->vocab;
    if (d->overflow) return;
    size_t room = (size_t)(d->cap - d->n);
    demo_take(d, v->write_answer(v->ctx, text, strlen(text), d->ids + d->n, room), 1);
}

int demo_result(const struct demo_buf *d) { return d->overflow ? -1 : d->n; }
