/*
 * A small pool of threads that run tool calls for a rollout rank, so a slow tool
 * never stalls the decode loop (DESIGN §2 step 3). The decode loop submits a call
 * and polls for finished ones between decode iterations; nothing blocks.
 *
 * Time limits: every job has a deadline (submit time + timeout). The tool function
 * receives it and should stop when it passes (the environment's tools check it);
 * independently, a job still running at its deadline is reported at once with
 * status TOOL_TIMEOUT and its late result is discarded when it arrives, so even a
 * tool that ignores its deadline cannot hold a trajectory past the limit.
 *
 * Results come back in completion order, each with the caller's tag.
 */
#ifndef LIBRA_TOOL_POOL_H
#define LIBRA_TOOL_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "libra/env.h"

/* The work a job does: fills out (tool, status, text) from the call text. */
typedef void (*tool_fn)(void *ctx, const char *call, size_t len, double deadline,
                        struct env_tool_result *out);

struct tool_job_done {
    int64_t tag;                  /* the caller's tag (e.g. trajectory id) */
    double latency_s;             /* submit to completion (or to the deadline) */
    struct env_tool_result res;
};

struct tool_pool; /* opaque: threads, job slots, a mutex and a condition */

/* n_threads >= 1 worker threads; timeout_s > 0 per job. FATAL on thread errors. */
struct tool_pool *tool_pool_create(int n_threads, double timeout_s, tool_fn fn, void *ctx);
/* Stops the threads (waits for running jobs to return) and frees everything. */
void tool_pool_free(struct tool_pool *p);
/* Queues a call (the text is copied; at most ENV_CALL_MAX bytes are kept, longer
 * calls are passed as ENV_CALL_MAX + 1 bytes so the tool reports "too long"). */
void tool_pool_submit(struct tool_pool *p, int64_t tag, const char *call, size_t len);
/* Moves up to max finished jobs into out (timed-out ones included); returns how many. */
int tool_pool_poll(struct tool_pool *p, struct tool_job_done *out, int max);
/* Jobs submitted and not yet returned by tool_pool_poll. */
int tool_pool_pending(const struct tool_pool *p);
/* Forgets the job with this tag (its result, if it comes, is dropped); 1 if found. */
int tool_pool_cancel(struct tool_pool *p, int64_t tag);

#endif
