/*
 * `libra trace RUN.h5 [OUT.json]`: a run's phases as a Chrome / Perfetto trace (the
 * trace-event JSON format, object form: {"traceEvents": [...], "displayTimeUnit":
 * "ms"}), from its metrics file's /spans and /events tables; open it in
 * ui.perfetto.dev or chrome://tracing.
 *
 * The job is one process (pid 1); each rank is a thread (tid 8 x rank + lane) named
 * after the roles it had ("rank 3 (rollout TP-2 leader, train)"). A rank's spans are
 * "X" (complete) events, ts and dur in microseconds since the run started. Events of
 * one thread must nest, so spans that overlap on one rank (a tool call during decode,
 * a weight sync during the next training step) go to further lanes of the rank (tid
 * + 1 ...): decode and training spans prefer lane 0, tool calls lane 1, weight syncs
 * lane 2, re-splits and checkpoints lane 3 (rank 0's spans all lane 0); a span whose
 * lane is taken goes to a free one of lanes 4-7 (then any), and one that finds none
 * of the 8 free is cut to start where its lane's last span ended. Every /events row
 * is an "i" (instant) event on rank 0's track, of global scope for plan changes
 * (plan, resplit, planner, pool_lend, pool_release). Events are written in time order
 * (timestamps are whole nanoseconds) and streamed: memory holds the tables, not the
 * JSON.
 *
 * Exit status: 0 written; 1 the file could not be read (not HDF5, no /spans: written
 * by libra before metrics schema 6) or the output not written; 2 bad arguments.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <hdf5.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/afile.h"
#include "libra/cli.h"
#include "libra/driver.h"
#include "libra/h5util.h"
#include "libra/log.h"
#include "libra/metrics.h"

#define LANES 8
#define EV_KIND_W 32
#define EV_DETAIL_W 256

enum { SP_RANK, SP_KIND, SP_STEP, SP_T0, SP_T1, SP_COUNT, SP_COLS };
enum { EV_WALL, EV_STEP, EV_COLS };

struct tables {
    double *sp[SP_COLS];
    char *sp_detail;            /* (n_sp, METRICS_SPAN_DETAIL_LEN) */
    size_t n_sp;
    double *ev[EV_COLS];
    char *ev_kind, *ev_detail;  /* (n_ev, EV_KIND_W), (n_ev, EV_DETAIL_W) */
    size_t n_ev;
};

/* One event to write: a span (row >= 0) or an /events row (row < 0: -1 - index). */
struct item {
    int64_t ts, dur;            /* nanoseconds */
    int tid;
    long row;
};

/* What a rank was: its roles in order of appearance (from its spans). */
struct rank_info {
    char roles[160];
    int lane_kind[LANES];       /* kind of the first span of each lane, -1 unused */
    int64_t lane_end[LANES];
};

/* Output: a temporary beside OUT.json (committed at the end), or stdout. */
struct sink {
    struct afile f;
    int to_file;
    int failed;
    char err[512];
};

static void sink_put(struct sink *s, const char *text)
{
    size_t n = strlen(text);
    if (s->failed) return;
    if (s->to_file) {
        if (afile_write(&s->f, text, n, s->err, sizeof s->err)) s->failed = 1;
    } else if (fwrite(text, 1, n, stdout) != n) {
        snprintf(s->err, sizeof s->err, "stdout: %s", strerror(errno));
        s->failed = 1;
    }
}

/* Writes v (then frees it), comma-separated from the previous event. */
static void sink_event(struct sink *s, json_t *v, long *n)
{
    char *text = v ? json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(v);
    if (!text) {
        if (!s->failed) snprintf(s->err, sizeof s->err, "cannot encode an event as JSON");
        s->failed = 1;
        return;
    }
    sink_put(s, *n ? ",\n" : "\n");
    sink_put(s, text);
    free(text);
    (*n)++;
}

static void tables_free(struct tables *t)
{
    for (int i = 0; i < SP_COLS; i++) free(t->sp[i]);
    for (int i = 0; i < EV_COLS; i++) free(t->ev[i]);
    free(t->sp_detail);
    free(t->ev_kind);
    free(t->ev_detail);
}

static int read_tables(hid_t file, const char *in, struct tables *t, char *err, size_t errlen)
{
    static const char *const sp_cols[SP_COLS] = {"rank", "kind", "step", "t_start", "t_end", "count"};
    static const char *const ev_cols[EV_COLS] = {"wall_s", "step"};
    size_t m;
    if (H5Lexists(file, "spans", H5P_DEFAULT) <= 0) {
        double v = 0;
        if (h5_read_attr_f64(file, "schema_version", &v)) {
            snprintf(err, errlen, "%s: not a libra metrics file (no schema_version attribute)", in);
            return -1;
        }
        snprintf(err, errlen, "%s: no /spans table: the file is of metrics schema %.0f, and "
                 "libra records spans from schema 6 on (run it again with this libra)", in, v);
        return -1;
    }
    for (int i = 0; i < SP_COLS; i++) {
        if (h5_read_column_f64(file, "spans", sp_cols[i], &t->sp[i], &m, err, errlen)) return -1;
        t->n_sp = m;
    }
    if (h5_read_column_str(file, "spans", "detail", METRICS_SPAN_DETAIL_LEN, &t->sp_detail, &m,
                           err, errlen))
        return -1;
    for (int i = 0; i < EV_COLS; i++) {
        if (h5_read_column_f64(file, "events", ev_cols[i], &t->ev[i], &m, err, errlen)) return -1;
        t->n_ev = m;
    }
    if (h5_read_column_str(file, "events", "kind", EV_KIND_W, &t->ev_kind, &m, err, errlen) ||
        h5_read_column_str(file, "events", "detail", EV_DETAIL_W, &t->ev_detail, &m, err, errlen))
        return -1;
    return 0;
}

static int cmp_item(const void *a, const void *b)
{
    const struct item *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    if (x->dur != y->dur) return x->dur > y->dur ? -1 : 1; /* the enclosing span first */
    return (x->row > y->row) - (x->row < y->row);
}

static int64_t to_ns(double s) { return isfinite(s) ? (int64_t)llround(s * 1e9) : 0; }

static int preferred_lane(int kind)
{
    switch (kind) {
    case SPAN_TOOL: return 1;
    case SPAN_WEIGHT_SYNC: return 2;
    case SPAN_RESPLIT:
    case SPAN_CHECKPOINT: return 3;
    default: return 0;
    }
}

/* Adds role to the rank's list unless it is there. */
static void add_role(struct rank_info *ri, const char *role)
{
    size_t n = strlen(ri->roles), k = strlen(role);
    for (const char *p = ri->roles; (p = strstr(p, role)) != NULL; p += k)
        if ((p == ri->roles || p[-1] == ' ') && (p[k] == ',' || p[k] == '\0')) return;
    if (n + k + 3 < sizeof ri->roles)
        snprintf(ri->roles + n, sizeof ri->roles - n, "%s%s", n ? ", " : "", role);
}

static void note_role(struct rank_info *ri, int rank, int kind, const char *detail)
{
    char role[64];
    int leader, tp;
    if (kind == SPAN_DECODE && sscanf(detail, "instance led by %d, tp %d", &leader, &tp) == 2) {
        snprintf(role, sizeof role, "rollout TP-%d%s", tp, rank == leader ? " leader" : "");
        add_role(ri, role);
    } else if (kind >= SPAN_TRAIN_FWD && kind <= SPAN_TRAIN_OPT) {
        add_role(ri, strncmp(detail, "lent", 4) == 0 ? "lent train" : "train");
    }
}

/* Places the spans: items[0 .. n_sp) get their tid; returns the ranks' count. */
static int place_spans(const struct tables *t, struct item *items, struct rank_info **out)
{
    int world = 1;
    for (size_t i = 0; i < t->n_sp; i++)
        if (t->sp[SP_RANK][i] + 1 > world) world = (int)t->sp[SP_RANK][i] + 1;
    struct rank_info *ri = xcalloc((size_t)world, sizeof *ri);
    for (int r = 0; r < world; r++)
        for (int l = 0; l < LANES; l++) ri[r].lane_kind[l] = -1, ri[r].lane_end[l] = INT64_MIN;
    for (size_t i = 0; i < t->n_sp; i++) {
        int64_t a = to_ns(t->sp[SP_T0][i]), b = to_ns(t->sp[SP_T1][i]);
        items[i] = (struct item){a, b > a ? b - a : 0, (int)t->sp[SP_RANK][i], (long)i};
    }
    /* in time order: a lane is free once its last span has ended */
    qsort(items, t->n_sp, sizeof *items, cmp_item);
    for (size_t i = 0; i < t->n_sp; i++) {
        struct item *it = &items[i];
        int rank = it->tid < 0 ? 0 : it->tid, kind = (int)t->sp[SP_KIND][it->row];
        struct rank_info *r = &ri[rank];
        note_role(r, rank, kind, t->sp_detail + (size_t)it->row * METRICS_SPAN_DETAIL_LEN);
        int lane = rank == 0 ? 0 : preferred_lane(kind); /* rank 0 has one kind of work */
        for (int k = 4; k < 4 + LANES && r->lane_end[lane] > it->ts; k++)
            if (r->lane_end[k % LANES] <= it->ts) lane = k % LANES; /* the spare lanes first */
        if (r->lane_end[lane] > it->ts) { /* no lane free: cut its start */
            int64_t end = it->ts + it->dur;
            it->ts = r->lane_end[lane];
            it->dur = end > it->ts ? end - it->ts : 0;
        }
        r->lane_end[lane] = it->ts + it->dur;
        if (r->lane_kind[lane] < 0) r->lane_kind[lane] = kind;
        it->tid = LANES * rank + lane;
    }
    *out = ri;
    return world;
}

static int plan_change(const char *kind)
{
    static const char *const k[] = {"plan", "resplit", "planner", "pool_lend", "pool_release"};
    for (size_t i = 0; i < sizeof k / sizeof *k; i++)
        if (strcmp(kind, k[i]) == 0) return 1;
    return 0;
}

static void write_metadata(struct sink *s, const char *in, const struct rank_info *ri, int world,
                           long *n)
{
    sink_event(s, json_pack("{s:s,s:s,s:i,s:i,s:{s:s}}", "name", "process_name", "ph", "M",
                            "pid", 1, "tid", 0, "args", "name", in), n);
    for (int r = 0; r < world; r++)
        for (int l = 0; l < LANES; l++) {
            if (l > 0 && ri[r].lane_kind[l] < 0) continue;
            char name[256];
            if (l > 0)
                snprintf(name, sizeof name, "rank %d: %s", r,
                         metrics_enum_name(MV_SPAN, ri[r].lane_kind[l]));
            else if (r == 0)
                snprintf(name, sizeof name, "rank 0 (controller)");
            else
                snprintf(name, sizeof name, "rank %d (%s)", r, ri[r].roles[0] ? ri[r].roles : "idle");
            int tid = LANES * r + l;
            sink_event(s, json_pack("{s:s,s:s,s:i,s:i,s:{s:s}}", "name", "thread_name", "ph", "M",
                                    "pid", 1, "tid", tid, "args", "name", name), n);
            sink_event(s, json_pack("{s:s,s:s,s:i,s:i,s:{s:i}}", "name", "thread_sort_index",
                                    "ph", "M", "pid", 1, "tid", tid, "args", "sort_index", tid), n);
        }
}

static json_t *span_event(const struct tables *t, const struct item *it)
{
    size_t i = (size_t)it->row;
    int kind = (int)t->sp[SP_KIND][i];
    const char *name = metrics_enum_name(MV_SPAN, kind);
    return json_pack("{s:s,s:s,s:s,s:f,s:f,s:i,s:i,s:{s:i,s:I,s:s}}", "name", name ? name : "span",
                     "cat", kind == SPAN_DECODE || kind == SPAN_TOOL ? "rollout"
                            : kind <= SPAN_TRAIN_OPT                ? "train"
                                                                    : "control",
                     "ph", "X", "ts", (double)it->ts / 1e3, "dur", (double)it->dur / 1e3, "pid", 1,
                     "tid", it->tid, "args", "step", (int)t->sp[SP_STEP][i], "count",
                     (json_int_t)t->sp[SP_COUNT][i], "detail",
                     t->sp_detail + i * METRICS_SPAN_DETAIL_LEN);
}

static json_t *instant_event(const struct tables *t, const struct item *it)
{
    size_t i = (size_t)(-1 - it->row);
    const char *kind = t->ev_kind + i * EV_KIND_W;
    json_t *detail = json_string(t->ev_detail + i * EV_DETAIL_W); /* NULL if not UTF-8 */
    return json_pack("{s:s,s:s,s:s,s:f,s:i,s:i,s:s,s:{s:i,s:o}}", "name", kind, "cat", "event",
                     "ph", "i", "ts", (double)it->ts / 1e3, "pid", 1, "tid", 0, "s",
                     plan_change(kind) ? "g" : "t", "args", "step", (int)t->ev[EV_STEP][i],
                     "detail", detail ? detail : json_string("?"));
}

static int write_trace(const struct tables *t, const char *in, struct sink *s, long *n_spans)
{
    size_t n = t->n_sp + t->n_ev;
    struct item *items = xmalloc((n ? n : 1) * sizeof *items);
    struct rank_info *ri = NULL;
    int world = place_spans(t, items, &ri);
    for (size_t i = 0; i < t->n_ev; i++)
        items[t->n_sp + i] = (struct item){to_ns(t->ev[EV_WALL][i]), 0, 0, -1 - (long)i};
    qsort(items, n, sizeof *items, cmp_item); /* time order */
    long count = 0;
    sink_put(s, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [");
    write_metadata(s, in, ri, world, &count);
    for (size_t i = 0; i < n && !s->failed; i++)
        sink_event(s, items[i].row >= 0 ? span_event(t, &items[i]) : instant_event(t, &items[i]),
                   &count);
    sink_put(s, "\n]}\n");
    *n_spans = (long)t->n_sp;
    free(items);
    free(ri);
    return s->failed ? -1 : 0;
}

static const struct cli_cmd trace_cmd = {
    "libra trace", "libra trace RUN.h5 [OUT.json]",
    "Writes the run's phases as a Chrome / Perfetto trace (trace-event JSON) to OUT.json\n"
    "or stdout: one track per rank, spans for decode, tool calls, training phases, weight\n"
    "syncs, re-splits and checkpoints, the run's events (plan changes ...) as instants.\n"
    "Open it in ui.perfetto.dev. RUN.h5: a run's metrics file (schema 6 or later).\n",
    NULL, "RUN.h5", 1, 2, 0};

int cmd_trace(int argc, char **argv)
{
    struct cli cli;
    if (cli_operands(&cli, &trace_cmd, argc, argv) == CLI_EXIT) return cli.rc;
    const char *run = cli.args[0], *dest = cli.nargs == 2 ? cli.args[1] : NULL;
    char err[1024];
    hid_t file = h5_open_readonly(run);
    if (file < 0) {
        fprintf(stderr, "libra trace: %s: not a readable HDF5 file (give a run's metrics file)\n", run);
        return 1;
    }
    struct tables t;
    memset(&t, 0, sizeof t);
    int rc = read_tables(file, run, &t, err, sizeof err);
    H5Fclose(file);
    if (rc) {
        fprintf(stderr, "libra trace: %s\n", err);
        tables_free(&t);
        return 1;
    }
    struct sink s;
    memset(&s, 0, sizeof s);
    s.to_file = dest != NULL;
    if (dest && afile_open(&s.f, dest, s.err, sizeof s.err)) {
        fprintf(stderr, "libra trace: %s\n", s.err);
        tables_free(&t);
        return 1;
    }
    long n_spans = 0;
    rc = write_trace(&t, run, &s, &n_spans);
    tables_free(&t);
    if (dest) {
        if (rc == 0 && afile_commit(&s.f, s.err, sizeof s.err)) rc = -1;
        afile_abort(&s.f);
    } else if (rc == 0 && fflush(stdout) != 0) {
        snprintf(s.err, sizeof s.err, "stdout: %s", strerror(errno));
        rc = -1;
    }
    if (rc) {
        fprintf(stderr, "libra trace: %s\n", s.err);
        return 1;
    }
    fprintf(stderr, "libra trace: %ld spans, %zu events%s%s\n", n_spans, t.n_ev,
            dest ? " -> " : "", dest ? dest : "");
    return 0;
}
