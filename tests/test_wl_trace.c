/*
 * Tests of trace replay (include/libra/wl_trace.h, src/perf/wl_trace.c): a trace
 * loads into groups, trajectories and turns; the workload functions replay it turn by
 * turn (prompt tokens, generated tokens, tool, status, payload, latency, final,
 * reward) with trajectory t of prompt p taking trace trajectory t mod m of group
 * p mod G; tool names the preset lacks are added; and every malformed line gives
 * "path:line: field: what" with nothing loaded.
 */
#include "libra/wl_trace.h"
#include "libra/workload.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void preset(struct workload *wl)
{
    char err[1024];
    int rc = workload_load(test_path("inputs/workloads/r2e-gym.cfg"), wl, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    CU_ASSERT_FATAL(rc == 0);
}

static const char good[] =
    "{\"prompt\": 5, \"prompt_tokens\": 400, \"reward\": 1, \"turns\": [\n"
    "  {\"gen\": 300, \"tool\": \"run_tests\", \"status\": \"failure\", \"payload\": 90, \"latency_s\": 5.5},\n"
    "  {\"gen\": 120}]}\n"
    "{\"prompt\": 5, \"prompt_tokens\": 400, \"turns\": [{\"gen\": 77}]}\n"
    "\n"
    "{\"prompt\": 2, \"traj\": 41, \"prompt_tokens\": 50, \"reward\": 0.25, \"turns\": [\n"
    "  {\"gen\": 10, \"tool\": \"browse\", \"status\": \"timeout\", \"payload\": 8, \"latency_s\": 30},\n"
    "  {\"gen\": 20, \"tool\": \"edit\", \"status\": \"success\", \"payload\": 3, \"latency_s\": 0.2},\n"
    "  {\"gen\": 30}]}\n";

/* The JSON above is one trajectory per line once the pretty line breaks are gone. */
static const char *one_per_line(const char *text)
{
    static char buf[4096];
    size_t n = 0;
    for (const char *p = text; *p && n + 1 < sizeof buf; p++) {
        if (*p == '\n' && (p[1] == ' ' || p[-1] == ',' || p[-1] == '[')) continue;
        buf[n++] = *p;
    }
    buf[n] = '\0';
    return buf;
}

static void test_load_and_replay(void)
{
    struct workload wl;
    preset(&wl);
    int n_tools = wl.n_tools;
    struct wl_trace tr;
    char err[1024];
    const char *path = test_write_file("traces", "good", one_per_line(good));
    int rc = wl_trace_load(path, &wl, &tr, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(tr.n_groups, 2);
    CU_ASSERT_EQUAL(tr.n_traj, 3);
    CU_ASSERT_EQUAL(tr.n_turns, 6);
    CU_ASSERT_EQUAL(tr.group[0].prompt, 5);
    CU_ASSERT_EQUAL(tr.group[0].n, 2);
    CU_ASSERT_EQUAL(tr.group[1].prompt, 2);
    CU_ASSERT_EQUAL(wl.n_tools, n_tools + 1); /* "browse" added; the others are the preset's */
    CU_ASSERT_STRING_EQUAL(wl.tools[n_tools].name, "browse");
    wl.trace = &tr;

    /* Prompt 0 of the run replays group 0 (prompt 5 of the file), prompt 3 group 1. */
    CU_ASSERT_EQUAL(workload_prompt_tokens(&wl, 1, 0), 400);
    CU_ASSERT_EQUAL(workload_prompt_tokens(&wl, 1, 3), 50);
    struct wl_traj_state st = {.traj_id = 8, .prompt_id = 2}; /* group 0, sample 8 mod 2 = 0 */
    struct wl_turn t;
    workload_turn(&wl, 1, &st, &t);
    CU_ASSERT(!t.final && t.gen_tokens == 300 && t.status == TOOL_FAILURE && t.payload_tokens == 90);
    CU_ASSERT_STRING_EQUAL(wl.tools[t.tool].name, "run_tests");
    CU_ASSERT_DOUBLE_EQUAL(t.tool_latency_s, 5.5, 0);
    workload_advance(&wl, &st, &t);
    workload_turn(&wl, 1, &st, &t);
    CU_ASSERT(t.final && t.gen_tokens == 120 && t.tool == -1 && t.status == TOOL_NONE);
    CU_ASSERT_EQUAL(workload_reward(&wl, 1, &st), 1.0);
    /* Sample 1 of group 0: one final turn; no recorded reward, so the model's (0/1). */
    st = (struct wl_traj_state){.traj_id = 9, .prompt_id = 2};
    workload_turn(&wl, 1, &st, &t);
    CU_ASSERT(t.final && t.gen_tokens == 77);
    double r = workload_reward(&wl, 1, &st);
    CU_ASSERT(r == 0.0 || r == 1.0);
    /* Group 1 has one sample: every trajectory of prompt 1 replays it. */
    for (int64_t id = 0; id < 5; id++) {
        st = (struct wl_traj_state){.traj_id = id, .prompt_id = 1};
        int gens[3];
        for (int k = 0; k < 3; k++) {
            workload_turn(&wl, 1, &st, &t);
            gens[k] = t.gen_tokens;
            CU_ASSERT_EQUAL(t.final, k == 2);
            if (k == 0) CU_ASSERT(t.status == TOOL_TIMEOUT && t.payload_tokens == 8);
            workload_advance(&wl, &st, &t);
        }
        CU_ASSERT(gens[0] == 10 && gens[1] == 20 && gens[2] == 30);
        CU_ASSERT_DOUBLE_EQUAL(workload_reward(&wl, 1, &st), 0.25, 0);
    }
    wl_trace_free(&tr);
}

static const struct {
    const char *line, *want;
} bad[] = {
    {"{\"prompt\": 1, \"prompt_tokens\": 5, \"turns\": [{\"gen\": 1}]", "bad.cfg:2: not JSON:"},
    {"[1, 2]", "bad.cfg:2: not a JSON object (one trajectory per line)"},
    {"{\"prompt_tokens\": 5, \"turns\": [{\"gen\": 1}]}", "bad.cfg:2: prompt: missing"},
    {"{\"prompt\": -1, \"prompt_tokens\": 5, \"turns\": [{\"gen\": 1}]}",
     "bad.cfg:2: prompt: -1 is outside [0, "},
    {"{\"prompt\": 1.5, \"prompt_tokens\": 5, \"turns\": [{\"gen\": 1}]}", "bad.cfg:2: prompt: not an integer"},
    {"{\"prompt\": 1, \"prompt_tokens\": 0, \"turns\": [{\"gen\": 1}]}",
     "bad.cfg:2: prompt_tokens: 0 is outside [1, 10000000]"},
    {"{\"prompt\": 1, \"prompt_tokens\": 5}", "bad.cfg:2: turns: missing (a list of 1 to 1000 turns)"},
    {"{\"prompt\": 1, \"prompt_tokens\": 5, \"turns\": []}", "bad.cfg:2: turns: 0 turns; a trajectory has 1 to 1000"},
    {"{\"prompt\": 1, \"prompt_tokens\": 5, \"turns\": [7]}", "bad.cfg:2: turns[0]: not an object"},
    {"{\"prompt\": 1, \"prompt_tokens\": 5, \"turns\": [{}]}", "bad.cfg:2: turns[0].gen: missing"},
    {"{\"prompt\": 1, \"prompt_tokens\": 5, \"turns\": [{\"gen\": 1, \"payload\": 3}]}",
     "bad.cfg:2: turns[0].payload: the last turn ends the trajectory: it has no tool call"},
    {"{\"prompt\": 1, \"prompt_tokens\": 5, \"turns\": [{\"gen\": 1, \"status\": \"ok\", \"payload\": 1, "
     "\"latency_s\": 1}, {\"gen\": 1}]}",
     "bad.cfg:2: turns[0].status: \"success\", \"failure\" or \"timeout\""},
    {"{\"prompt\": 1, \"prompt_tokens\": 5, \"turns\": [{\"gen\": 1, \"status\": \"success\", \"latency_s\": 1}, "
     "{\"gen\": 1}]}",
     "bad.cfg:2: turns[0].payload: missing"},
    {"{\"prompt\": 1, \"prompt_tokens\": 5, \"turns\": [{\"gen\": 1, \"status\": \"success\", \"payload\": 1, "
     "\"latency_s\": \"x\"}, {\"gen\": 1}]}",
     "bad.cfg:2: turns[0].latency_s: not a number"},
    {"{\"prompt\": 1, \"prompt_tokens\": 5, \"turns\": [{\"gen\": 1, \"status\": \"success\", \"payload\": 1, "
     "\"latency_s\": -2}, {\"gen\": 1}]}",
     "bad.cfg:2: turns[0].latency_s: -2 is outside [0, 1e+06]"},
    {"{\"prompt\": 1, \"prompt_tokens\": 5, \"turns\": [{\"gen\": 1, \"tool\": \"\", \"status\": \"success\", "
     "\"payload\": 1, \"latency_s\": 1}, {\"gen\": 1}]}",
     "bad.cfg:2: turns[0].tool: a tool name of 1 to 31 characters"},
    {"{\"prompt\": 1, \"prompt_tokens\": 5, \"reward\": 2, \"turns\": [{\"gen\": 1}]}",
     "bad.cfg:2: reward: 2 is outside [0, 1]"},
    {"{\"prompt\": 1, \"prompt\": 2, \"prompt_tokens\": 5, \"turns\": [{\"gen\": 1}]}", "bad.cfg:2: not JSON:"},
    /* prompt 0 again after prompt 1 */
    {"{\"prompt\": 1, \"prompt_tokens\": 5, \"turns\": [{\"gen\": 1}]}\n"
     "{\"prompt\": 0, \"prompt_tokens\": 5, \"turns\": [{\"gen\": 1}]}",
     "bad.cfg:3: prompt: 0 appears again after other prompts: keep a group's samples on "
     "consecutive lines (sort the trace by prompt)"},
};

static void test_bad_lines(void)
{
    char text[2048], err[1024];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct workload wl;
        preset(&wl);
        struct wl_trace tr;
        snprintf(text, sizeof text, "{\"prompt\": 0, \"prompt_tokens\": 5, \"turns\": [{\"gen\": 1}]}\n%s\n",
                 bad[i].line);
        const char *path = test_write_file("traces", "bad", text);
        CU_ASSERT_EQUAL(wl_trace_load(path, &wl, &tr, err, sizeof err), -1);
        int ok = strstr(err, bad[i].want) != NULL && strncmp(err, path, strlen(path)) == 0;
        if (!ok) fprintf(stderr, "\n  case %zu: want \"%s\"\n  got  \"%s\"\n", i, bad[i].want, err);
        CU_ASSERT(ok);
        CU_ASSERT(tr.n_traj == 0 && tr.traj == NULL); /* nothing loaded */
    }
    /* Nine tools in all: the preset's three plus six new ones. */
    struct workload wl;
    preset(&wl);
    struct wl_trace tr;
    size_t n = 0;
    for (int i = 0; i < 6; i++)
        n += (size_t)snprintf(text + n, sizeof text - n,
                              "{\"prompt\": %d, \"prompt_tokens\": 5, \"turns\": [{\"gen\": 1, \"tool\": "
                              "\"t%d\", \"status\": \"success\", \"payload\": 1, \"latency_s\": 1}, "
                              "{\"gen\": 1}]}\n", i, i);
    const char *path = test_write_file("traces", "tools", text);
    CU_ASSERT_EQUAL(wl_trace_load(path, &wl, &tr, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "tools.cfg:6: turns[0].tool: \"t5\" would be tool 9; at most 8 tools") != NULL);
    /* Empty, missing, binary. */
    path = test_write_file("traces", "empty", "\n  \n");
    CU_ASSERT_EQUAL(wl_trace_load(path, &wl, &tr, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "empty.cfg: no trajectory in the trace") != NULL);
    CU_ASSERT_EQUAL(wl_trace_load("/no/such/trace.jsonl", &wl, &tr, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "/no/such/trace.jsonl: cannot open the trace: No such file") != NULL);
}

int main(void)
{
    static const struct test_case cases[] = {
        {"load and replay turn by turn", test_load_and_replay},
        {"malformed lines: file:line: field: what", test_bad_lines},
        {NULL, NULL},
    };
    static const struct test_suite suites[] = {{"wl_trace", cases}, {NULL, NULL}};
    return test_main(suites);
}
