/*
 * Tool-return states: the alphabet of C-MLFQ's causal prefix tree (reference
 * cmlfq.md §1.2). A tool return is classified as (tool, size class, status) and
 * encoded as one small integer, so a trajectory's history is an int32 sequence.
 *
 * Fixes of reference §6.13: every payload is sized in tokens (never characters);
 * the status is the one the tool reported (an "error" substring in the payload never
 * overrides it); the same thresholds (sched.payload_small / payload_large) are used
 * online and by every tool that reads a saved tree, because a tree file records them.
 *
 *   size:  tokens <= small -> SMALL;  <= large -> MEDIUM;  else LARGE
 *   code:  (tool * 3 + size) * 3 + (status - TOOL_SUCCESS),   0 <= code < 9 * TOOL_STATE_MAX_TOOLS
 *   name:  "<tool name>:<small|medium|large>:<success|failure|timeout>"
 */
#ifndef LIBRA_TOOL_STATE_H
#define LIBRA_TOOL_STATE_H

#include <stddef.h>

#define TOOL_STATE_MAX_TOOLS 16
#define TOOL_STATE_MAX_CODE (9 * TOOL_STATE_MAX_TOOLS)

enum tool_size { TOOL_SIZE_SMALL = 0, TOOL_SIZE_MEDIUM = 1, TOOL_SIZE_LARGE = 2 };

struct tool_state_config {
    int small; /* payload tokens at most for "small" (>= 0) */
    int large; /* payload tokens at most for "medium" (>= small) */
};

/* 0, or -1 with a message naming the bad threshold. */
int tool_state_config_check(const struct tool_state_config *c, char *err, size_t errlen);
enum tool_size tool_state_size(const struct tool_state_config *c, int payload_tokens);
/* The state code; -1 if tool is outside [0, TOOL_STATE_MAX_TOOLS) or status is not
 * TOOL_SUCCESS, TOOL_FAILURE or TOOL_TIMEOUT (enum tool_status, tool_status.h). */
int tool_state_code(const struct tool_state_config *c, int tool, int payload_tokens, int status);
/* Decodes a code (returns -1 if out of range). */
int tool_state_decode(int code, int *tool, enum tool_size *size, int *status);
/* "<tool>:<size>:<status>"; tools without a name (index >= n_tools) print as "tool<i>". */
void tool_state_name(int code, const char *const *tool_names, int n_tools, char *buf, size_t n);

#endif
