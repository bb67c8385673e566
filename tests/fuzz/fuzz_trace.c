/* Fuzz target: a rollout trace file (workload.trace; src/perf/wl_trace.c). A trace
 * that loads must be usable as loaded: every trajectory's turns inside the turn
 * array, every tool index one the workload has, the last turn without a call. */
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "libra/wl_trace.h"
#include "libra/workload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct workload wl;
    memset(&wl, 0, sizeof wl);
    snprintf(wl.tools[0].name, sizeof wl.tools[0].name, "run_tests");
    wl.n_tools = 1;
    struct wl_trace tr;
    char err[1024];
    if (wl_trace_load(fuzz_file(data, size, ".jsonl"), &wl, &tr, err, sizeof err) != 0) {
        if (!memchr(err, '\0', sizeof err) || !err[0]) __builtin_trap();
        return 0;
    }
    if (wl.n_tools < 1 || wl.n_tools > WL_MAX_TOOLS || tr.n_groups < 1) __builtin_trap();
    int64_t n = 0;
    for (int64_t g = 0; g < tr.n_groups; g++) {
        if (tr.group[g].n < 1 || tr.group[g].first_traj != n) __builtin_trap();
        n += tr.group[g].n;
    }
    if (n != tr.n_traj) __builtin_trap();
    for (int64_t i = 0; i < tr.n_traj; i++) {
        const struct wl_trace_traj *t = &tr.traj[i];
        if (t->n_turns < 1 || t->first_turn < 0 || t->first_turn + t->n_turns > tr.n_turns) __builtin_trap();
        for (int k = 0; k < t->n_turns; k++) {
            const struct wl_trace_turn *u = &tr.turn[t->first_turn + k];
            int last = k == t->n_turns - 1;
            if (last ? u->tool != -1 : u->tool < 0 || u->tool >= wl.n_tools) __builtin_trap();
        }
    }
    wl_trace_free(&tr);
    return 0;
}
