/*
 * `libra trace-export RUN.h5 [OUT.jsonl]` (also --trace-export): a run's rollouts as
 * a replayable trace (include/libra/wl_trace.h, docs/emulation.md §4.5), from its metrics file's
 * /turns and /trajectories tables. Every finished trajectory with all its turns
 * recorded becomes one line, grouped by GRPO group ("prompt" is the recording's
 * group id; groups in launch order, a group's samples by trajectory id); a trajectory cut by a rollout budget after a
 * tool call ends at that turn, without the call. Exit status: 0 written, 1 the file
 * could not be read or written, 2 bad arguments.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <hdf5.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libra/cli.h"
#include "libra/driver.h"
#include "libra/h5util.h"
#include "libra/log.h"
#include "libra/metrics.h"
#include "libra/tool_status.h"

#define TOOL_W sizeof(((struct metrics_turn_row *)0)->tool)

enum { TU_ID, TU_TURN, TU_GEN, TU_FINAL, TU_STATUS, TU_PAYLOAD, TU_LAT, TU_COLS };
enum { TR_ID, TR_PROMPT, TR_PTOK, TR_REWARD, TR_END, TR_COLS };

struct turn_ref {
    double id, turn;
    size_t row;
};

struct traj_ref {
    double prompt, id, ptok, reward;
    size_t first, n; /* its turns in the sorted turn list */
};

static int cmp_turn(const void *a, const void *b)
{
    const struct turn_ref *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return (x->turn > y->turn) - (x->turn < y->turn);
}

/* By group (the controller numbers groups in launch order), then trajectory id. */
static int cmp_traj(const void *a, const void *b)
{
    const struct traj_ref *x = a, *y = b;
    if (x->prompt != y->prompt) return x->prompt < y->prompt ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* A non-final turn's return as the trace names it (/turns status's names). */
static const char *status_name(int s)
{
    return s == TOOL_FAILURE || s == TOOL_TIMEOUT ? metrics_enum_name(MV_STATUS, s) : "success";
}

/* Writes s as a JSON string (jansson escapes it). */
static void json_str(FILE *f, const char *s)
{
    json_t *v = json_string(s);
    char *text = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;
    fputs(text ? text : "\"tool\"", f); /* not UTF-8: the default name */
    free(text);
    json_decref(v);
}

static int export(hid_t file, const char *in, FILE *out, long *n_written, char *err, size_t errlen)
{
    static const char *const tu_cols[TU_COLS] = {"traj_id", "turn",           "gen_tokens",
                                                 "final",   "status",         "payload_tokens",
                                                 "tool_latency_s"};
    /* a trace's "prompt" is the GRPO group: the recording's group id (a prompt drawn
     * again in a later epoch is a new group) */
    static const char *const tr_cols[TR_COLS] = {"traj_id", "group_id", "prompt_tokens", "reward",
                                                 "t_end"};
    double *tu[TU_COLS] = {0}, *tr[TR_COLS] = {0};
    char *tools = NULL;
    size_t nu = 0, nr = 0, m;
    struct turn_ref *ts = NULL;
    struct traj_ref *rs = NULL;
    int rc = -1;
    for (int i = 0; i < TU_COLS; i++) {
        if (h5_read_column_f64(file, "turns", tu_cols[i], &tu[i], &m, err, errlen)) goto done;
        nu = m;
    }
    if (h5_read_column_str(file, "turns", "tool", TOOL_W, &tools, &m, err, errlen)) goto done;
    for (int i = 0; i < TR_COLS; i++) {
        if (h5_read_column_f64(file, "trajectories", tr_cols[i], &tr[i], &m, err, errlen)) goto done;
        nr = m;
    }
    ts = xmalloc((nu ? nu : 1) * sizeof *ts);
    for (size_t i = 0; i < nu; i++) ts[i] = (struct turn_ref){tu[TU_ID][i], tu[TU_TURN][i], i};
    qsort(ts, nu, sizeof *ts, cmp_turn);
    rs = xmalloc((nr ? nr : 1) * sizeof *rs);
    size_t n_rs = 0;
    for (size_t i = 0; i < nr; i++) {
        if (!(tr[TR_END][i] >= 0)) continue; /* unfinished at the end of the run */
        struct traj_ref r = {tr[TR_PROMPT][i], tr[TR_ID][i], tr[TR_PTOK][i], tr[TR_REWARD][i], 0, 0};
        /* its turns: a binary search for the first row of its id */
        size_t lo = 0, hi = nu;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (ts[mid].id < r.id) lo = mid + 1;
            else hi = mid;
        }
        r.first = lo;
        while (lo < nu && ts[lo].id == r.id) lo++;
        r.n = lo - r.first;
        /* complete: turns 0 .. n-1, each once */
        int whole = r.n > 0;
        for (size_t k = 0; k < r.n && whole; k++) whole = ts[r.first + k].turn == (double)k;
        if (whole && r.ptok >= 1) rs[n_rs++] = r;
    }
    qsort(rs, n_rs, sizeof *rs, cmp_traj);
    for (size_t i = 0; i < n_rs; i++) {
        const struct traj_ref *r = &rs[i];
        fprintf(out, "{\"prompt\": %.0f, \"traj\": %.0f, \"prompt_tokens\": %.0f", r->prompt, r->id,
                r->ptok);
        if (isfinite(r->reward) && r->reward >= 0 && r->reward <= 1)
            fprintf(out, ", \"reward\": %.17g", r->reward);
        fputs(", \"turns\": [", out);
        for (size_t k = 0; k < r->n; k++) {
            size_t row = ts[r->first + k].row;
            int last = k + 1 == r->n;
            fprintf(out, "%s{\"gen\": %.0f", k ? ", " : "", tu[TU_GEN][row]);
            if (!last) {
                fputs(", \"tool\": ", out);
                const char *name = tools + row * TOOL_W;
                json_str(out, *name ? name : "tool");
                fprintf(out, ", \"status\": \"%s\", \"payload\": %.0f, \"latency_s\": %.17g",
                        status_name((int)tu[TU_STATUS][row]), tu[TU_PAYLOAD][row],
                        tu[TU_LAT][row] >= 0 ? tu[TU_LAT][row] : 0.0);
            }
            fputc('}', out);
        }
        fputs("]}\n", out);
    }
    *n_written = (long)n_rs;
    if (n_rs == 0) {
        snprintf(err, errlen, "%s: no finished trajectory with all its turns in /turns (a "
                 "metrics file of schema 5 or later records them)", in);
        goto done;
    }
    rc = 0;
done:
    for (int i = 0; i < TU_COLS; i++) free(tu[i]);
    for (int i = 0; i < TR_COLS; i++) free(tr[i]);
    free(tools);
    free(ts);
    free(rs);
    return rc;
}

static const struct cli_cmd trace_export_cmd = {
    "libra trace-export", "libra trace-export RUN.h5 [OUT.jsonl]",
    "Writes the run's finished trajectories, turn by turn, as a trace that workload.trace\n"
    "replays (JSON lines; to stdout without OUT.jsonl). RUN.h5: a run's metrics file.\n",
    NULL, "RUN.h5", 1, 2, 0};

int cmd_trace_export(int argc, char **argv)
{
    struct cli cli;
    if (cli_operands(&cli, &trace_export_cmd, argc, argv) == CLI_EXIT) return cli.rc;
    const char *run = cli.args[0], *dest = cli.nargs == 2 ? cli.args[1] : NULL;
    char err[1024];
    hid_t file = h5_open_readonly(run);
    if (file < 0) {
        fprintf(stderr, "libra --trace-export: %s: not a readable HDF5 file\n", run);
        return 1;
    }
    FILE *out = stdout;
    char *tmp = NULL;
    if (dest) {
        tmp = xmalloc(strlen(dest) + 5);
        sprintf(tmp, "%s.tmp", dest);
        out = fopen(tmp, "w");
        if (!out) {
            fprintf(stderr, "libra --trace-export: %s: cannot create: %s\n", tmp, strerror(errno));
            free(tmp);
            H5Fclose(file);
            return 1;
        }
    }
    long n = 0;
    int rc = export(file, run, out, &n, err, sizeof err);
    H5Fclose(file);
    if (rc) fprintf(stderr, "libra --trace-export: %s\n", err);
    if (dest) {
        int bad = ferror(out) != 0;
        bad |= fclose(out) != 0;
        if (rc == 0 && bad) {
            fprintf(stderr, "libra --trace-export: %s: write failed: %s\n", tmp, strerror(errno));
            rc = -1;
        }
        if (rc == 0 && rename(tmp, dest) != 0) {
            fprintf(stderr, "libra --trace-export: %s: %s\n", dest, strerror(errno));
            rc = -1;
        }
        if (rc) unlink(tmp);
        free(tmp);
    } else if (fflush(stdout) != 0) {
        rc = -1;
    }
    if (rc == 0) fprintf(stderr, "libra --trace-export: %ld trajectories\n", n);
    return rc ? 1 : 0;
}
