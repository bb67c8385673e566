/*
 * Loading and picking from a recorded rollout trace (include/libra/wl_trace.h). The
 * file is untrusted: every field is type- and range-checked and the first problem
 * ends the load with "path:line: field: what"; nothing is partly loaded.
 */
#define _POSIX_C_SOURCE 200809L
#include "libra/wl_trace.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "libra/metrics_enums.h"
#include "libra/workload.h"

#define TRACE_MAX_TOKENS 10000000 /* per turn: generated or payload */
#define TRACE_MAX_LATENCY_S 1e6

struct loader {
    const char *path;
    long line;
    char *err;
    size_t errlen;
    struct workload *wl;
    struct wl_trace *tr;
    size_t cap_group, cap_traj, cap_turn;
};

static int fail(struct loader *L, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct loader *L, const char *field, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(L->err, L->errlen, "%s:%ld: %s%s%s", L->path, L->line, field ? field : "",
             field ? ": " : "", what);
    return -1;
}

/* An integer field in [lo, hi]; required unless def is given (has_def). */
static int get_int(struct loader *L, json_t *obj, const char *key, const char *field, long long lo,
                   long long hi, int has_def, long long def, long long *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (has_def) {
            *out = def;
            return 0;
        }
        return fail(L, field, "missing (an integer in [%lld, %lld])", lo, hi);
    }
    if (!json_is_integer(v)) return fail(L, field, "not an integer");
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return fail(L, field, "%lld is outside [%lld, %lld]", x, lo, hi);
    *out = x;
    return 0;
}

static int get_real(struct loader *L, json_t *obj, const char *key, const char *field, double lo,
                    double hi, double *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v) return fail(L, field, "missing (a number in [%g, %g])", lo, hi);
    if (!json_is_number(v)) return fail(L, field, "not a number");
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return fail(L, field, "%g is outside [%g, %g]", x, lo, hi);
    *out = x;
    return 0;
}

/* The workload's index of tool name, added when the preset lacks it. */
static int tool_index(struct loader *L, const char *name, const char *field)
{
    struct workload *wl = L->wl;
    if (!*name || strlen(name) >= sizeof wl->tools[0].name)
        return fail(L, field, "a tool name of 1 to %zu characters", sizeof wl->tools[0].name - 1);
    for (int i = 0; i < wl->n_tools; i++)
        if (strcmp(wl->tools[i].name, name) == 0) return i;
    if (wl->n_tools == WL_MAX_TOOLS)
        return fail(L, field, "\"%s\" would be tool %d; at most %d tools (the preset's and the "
                    "trace's together)", name, WL_MAX_TOOLS + 1, WL_MAX_TOOLS);
    struct wl_tool *t = &wl->tools[wl->n_tools];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->weight = 1;
    return wl->n_tools++;
}

static int read_turn(struct loader *L, json_t *jt, int k, int last, struct wl_trace_turn *out)
{
    char field[64];
    if (!json_is_object(jt)) {
        snprintf(field, sizeof field, "turns[%d]", k);
        return fail(L, field, "not an object");
    }
    long long v;
    snprintf(field, sizeof field, "turns[%d].gen", k);
    if (get_int(L, jt, "gen", field, 0, TRACE_MAX_TOKENS, 0, 0, &v)) return -1;
    *out = (struct wl_trace_turn){.gen = (int32_t)v, .tool = -1, .status = TOOL_NONE};
    static const char *const call_keys[] = {"tool", "status", "payload", "latency_s"};
    if (last) {
        for (int i = 0; i < 4; i++)
            if (json_object_get(jt, call_keys[i])) {
                snprintf(field, sizeof field, "turns[%d].%s", k, call_keys[i]);
                return fail(L, field, "the last turn ends the trajectory: it has no tool call");
            }
        return 0;
    }
    snprintf(field, sizeof field, "turns[%d].tool", k);
    json_t *tool = json_object_get(jt, "tool");
    if (tool && !json_is_string(tool)) return fail(L, field, "not a string");
    int ti = tool_index(L, tool ? json_string_value(tool) : "tool", field);
    if (ti < 0) return -1;
    out->tool = ti;
    snprintf(field, sizeof field, "turns[%d].status", k);
    json_t *st = json_object_get(jt, "status");
    const char *s = st && json_is_string(st) ? json_string_value(st) : NULL;
    if (!st) return fail(L, field, "missing (\"success\", \"failure\" or \"timeout\")");
    int code = metrics_enum_value(MV_STATUS, s); /* the /turns status names */
    if (code != TOOL_SUCCESS && code != TOOL_FAILURE && code != TOOL_TIMEOUT)
        return fail(L, field, "\"success\", \"failure\" or \"timeout\"");
    out->status = code;
    snprintf(field, sizeof field, "turns[%d].payload", k);
    if (get_int(L, jt, "payload", field, 0, TRACE_MAX_TOKENS, 0, 0, &v)) return -1;
    out->payload = (int32_t)v;
    snprintf(field, sizeof field, "turns[%d].latency_s", k);
    return get_real(L, jt, "latency_s", field, 0, TRACE_MAX_LATENCY_S, &out->latency_s);
}

static int read_line(struct loader *L, const char *text, size_t len)
{
    struct wl_trace *tr = L->tr;
    json_error_t je;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!j) return fail(L, NULL, "not JSON: %s (column %d)", je.text, je.column);
    int rc = -1;
    long long prompt, ptok;
    if (!json_is_object(j)) {
        fail(L, NULL, "not a JSON object (one trajectory per line)");
        goto done;
    }
    if (get_int(L, j, "prompt", "prompt", 0, INT64_MAX, 0, 0, &prompt) ||
        get_int(L, j, "prompt_tokens", "prompt_tokens", 1, TRACE_MAX_TOKENS, 0, 0, &ptok))
        goto done;
    double reward = NAN;
    if (json_object_get(j, "reward") && get_real(L, j, "reward", "reward", 0, 1, &reward)) goto done;
    json_t *turns = json_object_get(j, "turns");
    if (!turns || !json_is_array(turns)) {
        fail(L, "turns", "%s (a list of 1 to %d turns)", turns ? "not a list" : "missing",
             WL_TRACE_MAX_TURNS);
        goto done;
    }
    size_t nt = json_array_size(turns);
    if (nt < 1 || nt > WL_TRACE_MAX_TURNS) {
        fail(L, "turns", "%zu turns; a trajectory has 1 to %d", nt, WL_TRACE_MAX_TURNS);
        goto done;
    }
    /* A new group unless this prompt continues the last one; a prompt seen before
     * another one came is an error (groups must be contiguous). */
    if (tr->n_groups == 0 || tr->group[tr->n_groups - 1].prompt != prompt) {
        for (int64_t g = 0; g < tr->n_groups; g++)
            if (tr->group[g].prompt == prompt) {
                fail(L, "prompt", "%lld appears again after other prompts: keep a group's "
                     "samples on consecutive lines (sort the trace by prompt)", prompt);
                goto done;
            }
        XGROW(tr->group, L->cap_group, (size_t)tr->n_groups + 1);
        tr->group[tr->n_groups++] = (struct wl_trace_group){prompt, tr->n_traj, 0};
    }
    XGROW(tr->turn, L->cap_turn, (size_t)tr->n_turns + nt);
    for (size_t k = 0; k < nt; k++)
        if (read_turn(L, json_array_get(turns, k), (int)k, k + 1 == nt, &tr->turn[tr->n_turns + k]))
            goto done;
    XGROW(tr->traj, L->cap_traj, (size_t)tr->n_traj + 1);
    tr->traj[tr->n_traj++] = (struct wl_trace_traj){(int32_t)ptok, (int32_t)nt, tr->n_turns, reward};
    tr->n_turns += (int64_t)nt;
    tr->group[tr->n_groups - 1].n++;
    rc = 0;
done:
    json_decref(j);
    return rc;
}

int wl_trace_load(const char *path, struct workload *wl, struct wl_trace *tr, char *err,
                  size_t errlen)
{
    memset(tr, 0, sizeof *tr);
    struct loader L = {.path = path, .err = err, .errlen = errlen, .wl = wl, .tr = tr};
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open the trace: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    while (rc == 0 && (n = getline(&line, &cap, f)) >= 0) {
        L.line++;
        size_t len = (size_t)n;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        size_t i = 0;
        while (i < len && (line[i] == ' ' || line[i] == '\t')) i++;
        if (i == len) continue;
        if (memchr(line, '\0', len)) rc = fail(&L, NULL, "a NUL byte (not a text file)");
        else rc = read_line(&L, line, len);
    }
    if (rc == 0 && ferror(f)) {
        snprintf(err, errlen, "%s: read error: %s", path, strerror(errno));
        rc = -1;
    }
    free(line);
    fclose(f);
    if (rc == 0 && tr->n_traj == 0) {
        snprintf(err, errlen, "%s: no trajectory in the trace", path);
        rc = -1;
    }
    if (rc) wl_trace_free(tr);
    return rc;
}

void wl_trace_free(struct wl_trace *tr)
{
    if (!tr) return;
    free(tr->group);
    free(tr->traj);
    free(tr->turn);
    memset(tr, 0, sizeof *tr);
}

const struct wl_trace_traj *wl_trace_pick(const struct wl_trace *tr, int64_t prompt_id,
                                          int64_t traj_id)
{
    uint64_t g = (uint64_t)prompt_id % (uint64_t)tr->n_groups;
    const struct wl_trace_group *gr = &tr->group[g];
    return &tr->traj[gr->first_traj + (int64_t)((uint64_t)traj_id % (uint64_t)gr->n)];
}
