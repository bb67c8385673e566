/*
 * Writing a scripted expert's demonstration (env_demo) in the vocabulary's format:
 * shared by calc and search. Turns are appended with their loss mask (1 = the
 * expert's, 0 = the tool's response); anything that does not fit sets overflow and
 * stops the writing (env_demo then returns -1).
 */
#ifndef LIBRA_ENV_DEMO_H
#define LIBRA_ENV_DEMO_H

#include <stdint.h>

#include "libra/env.h"

struct demo_buf {
    const struct env *e;
    int32_t *ids;  /* (cap) */
    uint8_t *mask; /* (cap) */
    int n, cap;
    int overflow;
};

/* A buffer over ids/mask of cap entries (cap < 0 counts as 0). */
struct demo_buf demo_buf_make(const struct env *e, int32_t *ids, uint8_t *mask, int cap);
/* A call turn with the argument text (mask 1), then the tool's response to res as the
 * format frames it (mask 0). */
void demo_call(struct demo_buf *d, const char *call, const struct env_tool_result *res);
/* The final answer turn (mask 1). */
void demo_answer(struct demo_buf *d, const char *text);
/* d->n, or -1 if anything did not fit. */
int demo_result(const struct demo_buf *d);

#endif
