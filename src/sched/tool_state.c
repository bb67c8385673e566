/*
 * Tool-return states (include/libra/tool_state.h): a tool return classified as
 * (tool, size class, status) and packed into one small integer code, the alphabet
 * of C-MLFQ's prefix tree (ptree.c). Sizes are in tokens and the status is the
 * one the tool reported (reference cmlfq.md §6.13). Pure functions, no state.
 */
#include "libra/tool_state.h"

#include "libra/tool_status.h"

#include <stdio.h>

static const char *const size_names[3] = {"small", "medium", "large"};
static const char *const status_names[3] = {"success", "failure", "timeout"};

int tool_state_config_check(const struct tool_state_config *c, char *err, size_t errlen)
{
    if (c->small < 0) {
        snprintf(err, errlen,
                 "sched.payload_small = %d: must be >= 0 (tool-return tokens at most for the "
                 "'small' size class)", c->small);
        return -1;
    }
    if (c->large < c->small) {
        snprintf(err, errlen,
                 "sched.payload_large = %d is below sched.payload_small = %d: the 'medium' "
                 "class is small < tokens <= large, so large must be >= small",
                 c->large, c->small);
        return -1;
    }
    return 0;
}

enum tool_size tool_state_size(const struct tool_state_config *c, int payload_tokens)
{
    if (payload_tokens <= c->small) return TOOL_SIZE_SMALL;
    if (payload_tokens <= c->large) return TOOL_SIZE_MEDIUM;
    return TOOL_SIZE_LARGE;
}

int tool_state_code(const struct tool_state_config *c, int tool, int payload_tokens, int status)
{
    if (tool < 0 || tool >= TOOL_STATE_MAX_TOOLS) return -1;
    if (status != TOOL_SUCCESS && status != TOOL_FAILURE && status != TOOL_TIMEOUT) return -1;
    int size = (int)tool_state_size(c, payload_tokens);
    return (tool * 3 + size) * 3 + (status - TOOL_SUCCESS);
}

int tool_state_decode(int code, int *tool, enum tool_size *size, int *status)
{
    if (code < 0 || code >= TOOL_STATE_MAX_CODE) return -1;
    if (tool) *tool = code / 9;
    if (size) *size = (enum tool_size)(code / 3 % 3);
    if (status) *status = TOOL_SUCCESS + code % 3;
    return 0;
}

void tool_state_name(int code, const char *const *tool_names, int n_tools, char *buf, size_t n)
{
    int tool, status;
    enum tool_size size;
    if (!buf || n == 0) return;
    if (tool_state_decode(code, &tool, &size, &status) != 0) {
        snprintf(buf, n, "invalid-state-%d", code);
        return;
    }
    const char *sz = size_names[size], *st = status_names[status - TOOL_SUCCESS];
    if (tool_names && tool < n_tools && tool_names[tool])
        snprintf(buf, n, "%s:%s:%s", tool_names[tool], sz, st);
    else
        snprintf(buf, n, "tool%d:%s:%s", tool, sz, st);
}
