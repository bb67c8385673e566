/*
 * The outcome of a tool call as the control plane carries it: turn results on the
 * wire, the scheduler's tool states, the environments and the workload model.
 */
#ifndef LIBRA_TOOL_STATUS_H
#define LIBRA_TOOL_STATUS_H

enum tool_status { TOOL_NONE = 0, TOOL_SUCCESS = 1, TOOL_FAILURE = 2, TOOL_TIMEOUT = 3 };

/* The environments' tool indices, as turn results and the metrics' per-tool columns
 * carry them (-1 = no tool). */
enum env_tool_id { ENV_TOOL_CALC = 0, ENV_TOOL_SEARCH = 1, ENV_N_TOOLS = 2 };

#endif
