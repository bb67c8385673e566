/*
 * A recorded rollout trace that the emulated device and libra-sim replay instead of
 * the workload model's draws (workload.trace in the config; docs/emulation.md §4.5
 * has the format and how to convert traces from other systems).
 *
 * The file is JSONL, one trajectory per line:
 *   {"prompt": 17, "prompt_tokens": 412, "reward": 1,
 *    "turns": [{"gen": 380, "tool": "run_tests", "status": "failure", "payload": 95,
 *               "latency_s": 5.2},
 *              {"gen": 120}]}
 * "prompt" (integer >= 0) names the GRPO group: the samples of one prompt are on
 * consecutive lines. Every turn but the last ends in a tool call (tool name,
 * "success" | "failure" | "timeout", payload tokens, seconds); the last turn has
 * none. "reward" (0..1) is optional; other keys (such as "traj", the recording
 * run's trajectory id, which `libra --trace-export` writes) are ignored. Blank lines
 * are skipped; anything else that does not fit is an error naming the file, the line
 * and the field.
 *
 * Replay: trajectory t of prompt p in the run replays trace trajectory t mod m of
 * trace group p mod G (m samples in that group, G groups in file order), turn by
 * turn; so a run walks through the trace in order and its drift replays too.
 */
#ifndef LIBRA_WL_TRACE_H
#define LIBRA_WL_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "libra/tool_status.h"

#define WL_TRACE_MAX_TURNS 1000

struct wl_trace_turn {
    int32_t gen, payload;
    int32_t tool;             /* index into the workload's tools, -1 on the last turn */
    int32_t status;           /* enum tool_status, TOOL_NONE on the last turn */
    double latency_s;
};

struct wl_trace_traj {
    int32_t prompt_tokens, n_turns;
    int64_t first_turn;       /* its turns are turn[first_turn .. + n_turns) */
    double reward;            /* NaN when the trace has none */
};

struct wl_trace_group {
    int64_t prompt;           /* the file's prompt id */
    int64_t first_traj;
    int32_t n;
};

struct wl_trace {
    struct wl_trace_group *group;
    struct wl_trace_traj *traj;
    struct wl_trace_turn *turn;
    int64_t n_groups, n_traj, n_turns;
};

struct workload;

/* Reads path into *tr. Tool names are matched to wl's tools by name; a name the
 * preset lacks is added to wl (at most WL_MAX_TOOLS in all). 0, or -1 with
 * "path:line: field: what" in err (and *tr empty). */
int wl_trace_load(const char *path, struct workload *wl, struct wl_trace *tr, char *err,
                  size_t errlen);
void wl_trace_free(struct wl_trace *tr);
/* The trace trajectory that trajectory traj_id of prompt prompt_id replays. */
const struct wl_trace_traj *wl_trace_pick(const struct wl_trace *tr, int64_t prompt_id,
                                          int64_t traj_id);

#endif
