/*
 * The workload model of the emulated backend (include/libra/workload.h): preset
 * loading, the per-turn draws, the reward and the `describe` summary.
 *
 * Every draw comes from its own counter-based stream keyed by
 * (seed, trajectory id, turn, purpose) -- or (seed, prompt id, 0, PURPOSE_PROMPT) --
 * so a turn is a pure function of the key and the state passed in; no rank, call
 * order or other trajectory can change it (STYLE 10). Each quantity has its own
 * purpose, so changing one distribution (or the drift step) leaves the other draws
 * of the same turn as they were (common random numbers across steps).
 *
 * Turn k of a trajectory (docs/emulation.md has the derivation):
 *   gen      = clamp(round(LN(ln(gen_median g(step)), gen_sigma)), 1, gen_max),
 *              g(step) = (1 + drift_gen_per_step)^min(step, drift_max_steps)
 *   final    = k >= max_turns - 1                      (always final)
 *              else k < min_turns - 1                  (always continue)
 *              else U >= p, p = clamp(p_continue + drift_continue_per_step min(step, S)
 *                               + last_failed fail_bonus + last_large large_bonus, 0, 0.98)
 *   tool     (not final) by weight; status failure / timeout / success with p_fail,
 *              p_timeout; payload LN(ln(payload_median), sigma) clamped [1, payload_max]
 *              on success, the same around payload_median / 10 on failure (an error
 *              message), WL_TIMEOUT_PAYLOAD tokens on timeout; latency LN(ln(median),
 *              sigma) capped at timeout_s, or timeout_s on timeout.
 * The continue decision of turn k uses the state before turn k's own tool, so a
 * failure or a large payload raises the chance of the turns that follow it.
 */
#include "libra/workload.h"

#include "libra/cfg_table.h"
#include "libra/log.h"
#include "libra/rng.h"
#include "libra/wl_trace.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Stream purposes: the last component of every key. */
enum wl_purpose {
    PURPOSE_PROMPT = 1,
    PURPOSE_GEN = 2,
    PURPOSE_CONTINUE = 3,
    PURPOSE_TOOL = 4,
    PURPOSE_STATUS = 5,
    PURPOSE_PAYLOAD = 6,
    PURPOSE_LATENCY = 7,
    PURPOSE_REWARD = 8,
    PURPOSE_DIFFICULTY = 9,
};
#define TURN_END 0xffffffffULL /* the "turn" of per-trajectory draws made at the end */
#define WL_TIMEOUT_PAYLOAD 8   /* tokens of a "tool timed out" message */
#define WL_FAIL_PAYLOAD_DIV 10 /* an error message is ~1/10 of a normal payload */
#define WL_P_CONTINUE_MAX 0.98 /* no turn continues surely once the floor is passed */

/* ======================================================================== */
/* Loading                                                                  */
/* ======================================================================== */

#define W_REAL(k, lo, hi, open, h) CFGT_REAL_FIELD(struct workload, k, lo, hi, open, h)
#define W_INT(k, lo, hi, h) CFGT_INT_FIELD(struct workload, k, lo, hi, h)
#define T_REAL(k, lo, hi, open, h) CFGT_REAL_FIELD(struct wl_tool, k, lo, hi, open, h)

static const struct cfgt_field wl_fields[] = {
    CFGT_STRING_FIELD(struct workload, name, "a short label such as \"r2e-gym\""),
    W_REAL(prompt_median, 0, 1e7, 1, "median prompt tokens"),
    W_REAL(prompt_sigma, 0, 5, 0, "lognormal sigma of the prompt length, 0 = fixed"),
    W_INT(prompt_min, 1, 1e8, "shortest prompt, tokens"),
    W_INT(prompt_max, 1, 1e8, "longest prompt, tokens"),
    W_REAL(gen_median, 0, 1e7, 1, "median tokens generated per turn at step 0"),
    W_REAL(gen_sigma, 0, 5, 0, "lognormal sigma of the tokens per turn"),
    W_INT(gen_max, 1, 1e8, "cap on tokens generated per turn"),
    W_INT(min_turns, 1, 1000, "turns every trajectory has at least"),
    W_INT(max_turns, 1, 1000, "turns a trajectory has at most"),
    W_REAL(p_continue, 0, 1, 0, "base probability that a turn ends in a tool call"),
    W_REAL(p_continue_fail_bonus, 0, 1, 0, "added to p_continue after a failed or timed-out tool"),
    W_REAL(p_continue_large_bonus, 0, 1, 0, "added to p_continue after a payload >= large_payload"),
    W_INT(large_payload, 1, 1e8, "payload tokens that count as large"),
    CFGT_CUSTOM_FIELD(tools, "a list of tool groups: tools = ( { name = \"...\"; ... }, ... );"),
    W_REAL(drift_gen_per_step, -0.5, 0.5, 0, "relative growth of gen_median per step, e.g. 0.002"),
    W_REAL(drift_continue_per_step, -1, 1, 0, "added to p_continue per step"),
    W_INT(drift_max_steps, 0, 1e7, "steps after which the drift stops"),
    W_REAL(reward_base, 0, 1, 0, "P(reward = 1) at step 0 without failures"),
    W_REAL(reward_per_step, -1, 1, 0, "added to P(reward = 1) per step"),
    W_REAL(reward_per_failure, 0, 1, 0, "subtracted from P(reward = 1) per failed tool"),
    W_REAL(difficulty_gen_sigma, 0, 3, 0,
           "per-prompt log-sd of the generation median, shared by a group (0 = none)"),
    W_REAL(difficulty_continue, -1, 1, 0, "added to p_continue per sd of prompt difficulty"),
    W_REAL(difficulty_reward, 0, 1, 0, "subtracted from P(reward = 1) per sd of prompt difficulty"),
    W_REAL(gen_per_failure, 0, 5, 0,
           "each failed tool return so far multiplies later turns' generation median by 1 + this"),
};

static const struct cfgt_field tool_fields[] = {
    CFGT_STRING_FIELD(struct wl_tool, name, "the tool's name, e.g. \"run_tests\""),
    T_REAL(weight, 0, 1e9, 1, "relative frequency among tool calls"),
    T_REAL(payload_median, 0, 1e7, 1, "median tokens a successful call returns"),
    T_REAL(payload_sigma, 0, 5, 0, "lognormal sigma of the payload"),
    CFGT_INT_FIELD(struct wl_tool, payload_max, 1, 1e8, "cap on payload tokens"),
    T_REAL(latency_median_s, 0, 86400, 1, "median seconds a call takes"),
    T_REAL(latency_sigma, 0, 5, 0, "lognormal sigma of the latency"),
    T_REAL(p_fail, 0, 1, 0, "probability a call fails"),
    T_REAL(p_timeout, 0, 1, 0, "probability a call times out"),
    T_REAL(timeout_s, 0, 86400, 1, "seconds a timed-out call takes"),
};

static int read_tool(const struct cfgt_ctx *ctx, const config_setting_t *g, int idx, struct wl_tool *t)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "tools[%d].", idx);
    if (!config_setting_is_group(g)) {
        prefix[strlen(prefix) - 1] = '\0'; /* "tools[i]" names the element itself */
        return cfgt_fail(ctx, config_setting_source_line(g), "", prefix,
                         "is %s, expected a group { name = \"...\"; weight = ...; ... }",
                         cfgt_type_name(config_setting_type(g)));
    }
    if (cfgt_read_fields(ctx, g, prefix, tool_fields, CFGT_COUNT(tool_fields), t) != 0) return -1;
    if (t->p_fail + t->p_timeout > 1.0)
        return cfgt_fail(ctx, cfgt_line_of(g, "p_timeout"), prefix, "p_timeout",
                         "p_fail %g + p_timeout %g exceeds 1 (they are exclusive outcomes of one call)",
                         t->p_fail, t->p_timeout);
    if (t->latency_median_s > t->timeout_s)
        return cfgt_fail(ctx, cfgt_line_of(g, "latency_median_s"), prefix, "latency_median_s",
                         "%g s exceeds timeout_s %g s (calls that do not time out are capped at timeout_s)",
                         t->latency_median_s, t->timeout_s);
    return 0;
}

static int read_tools(const struct cfgt_ctx *ctx, const config_setting_t *grp, struct workload *wl)
{
    const config_setting_t *l = config_setting_get_member(grp, "tools");
    int line = config_setting_source_line(l);
    if (!config_setting_is_list(l))
        return cfgt_fail(ctx, line, "", "tools", "is %s, expected a list ( { ... }, { ... } )",
                         cfgt_type_name(config_setting_type(l)));
    int n = config_setting_length(l);
    if (n > WL_MAX_TOOLS)
        return cfgt_fail(ctx, line, "", "tools", "%d tools, at most %d are supported", n, WL_MAX_TOOLS);
    if (n == 0 && wl->max_turns > 1)
        return cfgt_fail(ctx, line, "", "tools", "empty, but max_turns = %d needs a tool between turns "
                         "(add a tool or set max_turns = 1)", wl->max_turns);
    for (int i = 0; i < n; i++) {
        if (read_tool(ctx, config_setting_get_elem(l, (unsigned)i), i, &wl->tools[i]) != 0) return -1;
        for (int j = 0; j < i; j++) {
            if (strcmp(wl->tools[j].name, wl->tools[i].name) != 0) continue;
            char prefix[32];
            snprintf(prefix, sizeof prefix, "tools[%d].", i);
            return cfgt_fail(ctx, cfgt_line_of(config_setting_get_elem(l, (unsigned)i), "name"), prefix, "name",
                             "\"%s\" is also the name of tools[%d] (tool names must be unique)",
                             wl->tools[i].name, j);
        }
    }
    wl->n_tools = n;
    return 0;
}

/* Cross-key rules of the workload group, then its tools list. */
static int check_workload(const struct cfgt_ctx *ctx, const config_setting_t *g, void *dst)
{
    struct workload *wl = dst;
    if (wl->prompt_min > wl->prompt_max)
        return cfgt_fail(ctx, cfgt_line_of(g, "prompt_max"), "", "prompt_max", "%d is below prompt_min %d",
                         wl->prompt_max, wl->prompt_min);
    if (wl->prompt_median < wl->prompt_min || wl->prompt_median > wl->prompt_max)
        return cfgt_fail(ctx, cfgt_line_of(g, "prompt_median"), "", "prompt_median",
                         "%g lies outside [prompt_min %d, prompt_max %d]", wl->prompt_median,
                         wl->prompt_min, wl->prompt_max);
    if (wl->gen_median > wl->gen_max)
        return cfgt_fail(ctx, cfgt_line_of(g, "gen_median"), "", "gen_median", "%g exceeds gen_max %d",
                         wl->gen_median, wl->gen_max);
    if (wl->min_turns > wl->max_turns)
        return cfgt_fail(ctx, cfgt_line_of(g, "min_turns"), "", "min_turns", "%d exceeds max_turns %d",
                         wl->min_turns, wl->max_turns);
    return read_tools(ctx, g, wl);
}

int workload_load(const char *path, struct workload *wl, char *err, size_t errlen)
{
    const struct cfgt_ctx ctx = {path, err, errlen};
    memset(wl, 0, sizeof *wl);
    return cfgt_load(&ctx, "key = value; groups in { }, lists in ( )", "workload", wl_fields,
                     CFGT_COUNT(wl_fields), wl, check_workload);
}

/* ======================================================================== */
/* Draws                                                                    */
/* ======================================================================== */

/* round(x) clamped to [lo, hi]; clamps first so huge draws cannot overflow. */
static int clamp_round(double x, int lo, int hi)
{
    if (!(x >= lo)) return lo;
    if (x >= hi) return hi;
    int v = (int)lround(x);
    return v < lo ? lo : v > hi ? hi : v;
}

static double clamp01(double x, double hi)
{
    return x < 0 ? 0 : x > hi ? hi : x;
}

static int drift_steps(const struct workload *wl, int step)
{
    if (step < 0) return 0;
    return step < wl->drift_max_steps ? step : wl->drift_max_steps;
}

static void stream(struct rng *r, uint64_t seed, int64_t id, uint64_t turn, enum wl_purpose p)
{
    rng_init(r, seed, (uint64_t)id, turn, (uint64_t)p);
}

int workload_prompt_tokens(const struct workload *wl, uint64_t seed, int64_t prompt_id)
{
    if (wl->trace) return wl_trace_pick(wl->trace, prompt_id, 0)->prompt_tokens;
    struct rng r;
    stream(&r, seed, prompt_id, 0, PURPOSE_PROMPT);
    double x = rng_lognormal(&r, log(wl->prompt_median), wl->prompt_sigma);
    return clamp_round(x, wl->prompt_min, wl->prompt_max);
}

double workload_difficulty(uint64_t seed, int64_t prompt_id)
{
    struct rng r;
    stream(&r, seed, prompt_id, 0, PURPOSE_DIFFICULTY);
    return rng_normal(&r);
}

/* Probability that turn st->turn ends in a tool call (ignoring the turn limits). */
static double p_continue(const struct workload *wl, uint64_t seed, const struct wl_traj_state *st)
{
    double p = wl->p_continue + wl->drift_continue_per_step * drift_steps(wl, st->step);
    if (wl->difficulty_continue != 0)
        p += wl->difficulty_continue * workload_difficulty(seed, st->prompt_id);
    if (st->last_failed) p += wl->p_continue_fail_bonus;
    if (st->last_large) p += wl->p_continue_large_bonus;
    return clamp01(p, WL_P_CONTINUE_MAX);
}

static int turn_is_final(const struct workload *wl, uint64_t seed, const struct wl_traj_state *st)
{
    if (st->turn >= wl->max_turns - 1) return 1;
    if (st->turn < wl->min_turns - 1) return 0;
    struct rng r;
    stream(&r, seed, st->traj_id, (uint64_t)st->turn, PURPOSE_CONTINUE);
    return !(rng_uniform(&r) < p_continue(wl, seed, st));
}

/* Type, status, payload and latency of the tool call ending turn st->turn. */
static void draw_tool(const struct workload *wl, uint64_t seed, const struct wl_traj_state *st,
                      struct wl_turn *out)
{
    uint64_t k = (uint64_t)st->turn;
    double w[WL_MAX_TOOLS];
    struct rng r;
    for (int i = 0; i < wl->n_tools; i++) w[i] = wl->tools[i].weight;
    stream(&r, seed, st->traj_id, k, PURPOSE_TOOL);
    out->tool = rng_categorical(&r, w, wl->n_tools);
    const struct wl_tool *t = &wl->tools[out->tool];

    stream(&r, seed, st->traj_id, k, PURPOSE_STATUS);
    double u = rng_uniform(&r);
    out->status = u < t->p_fail ? TOOL_FAILURE : u < t->p_fail + t->p_timeout ? TOOL_TIMEOUT : TOOL_SUCCESS;

    stream(&r, seed, st->traj_id, k, PURPOSE_PAYLOAD);
    double med = out->status == TOOL_FAILURE ? fmax(1.0, t->payload_median / WL_FAIL_PAYLOAD_DIV)
                                             : t->payload_median;
    double x = rng_lognormal(&r, log(med), t->payload_sigma);
    out->payload_tokens = out->status == TOOL_TIMEOUT
                              ? (WL_TIMEOUT_PAYLOAD < t->payload_max ? WL_TIMEOUT_PAYLOAD : t->payload_max)
                              : clamp_round(x, 1, t->payload_max);

    stream(&r, seed, st->traj_id, k, PURPOSE_LATENCY);
    double lat = rng_lognormal(&r, log(t->latency_median_s), t->latency_sigma);
    out->tool_latency_s = out->status == TOOL_TIMEOUT ? t->timeout_s : fmin(lat, t->timeout_s);
}

/* Turn st->turn of the trace trajectory st replays; the last recorded turn is final
 * (and any turn after it, which only a caller ignoring final could ask for). */
static void trace_turn(const struct wl_trace *tr, const struct wl_traj_state *st, struct wl_turn *out)
{
    const struct wl_trace_traj *t = wl_trace_pick(tr, st->prompt_id, st->traj_id);
    int k = st->turn < t->n_turns - 1 ? st->turn : t->n_turns - 1;
    const struct wl_trace_turn *u = &tr->turn[t->first_turn + k];
    *out = (struct wl_turn){.gen_tokens = u->gen, .final = k == t->n_turns - 1, .tool = -1,
                            .status = TOOL_NONE};
    if (!out->final) {
        out->tool = u->tool;
        out->status = (enum tool_status)u->status;
        out->payload_tokens = u->payload;
        out->tool_latency_s = u->latency_s;
    }
}

void workload_turn(const struct workload *wl, uint64_t seed, const struct wl_traj_state *st,
                   struct wl_turn *out)
{
    if (wl->trace) {
        trace_turn(wl->trace, st, out);
        return;
    }
    struct rng r;
    double median = wl->gen_median * pow(1.0 + wl->drift_gen_per_step, drift_steps(wl, st->step));
    if (wl->difficulty_gen_sigma > 0)
        median *= exp(wl->difficulty_gen_sigma * workload_difficulty(seed, st->prompt_id));
    if (wl->gen_per_failure > 0 && st->n_failures > 0)
        median *= pow(1.0 + wl->gen_per_failure, st->n_failures);
    stream(&r, seed, st->traj_id, (uint64_t)st->turn, PURPOSE_GEN);
    out->gen_tokens = clamp_round(rng_lognormal(&r, log(median), wl->gen_sigma), 1, wl->gen_max);
    out->final = wl->n_tools == 0 || turn_is_final(wl, seed, st);
    out->tool = -1;
    out->status = TOOL_NONE;
    out->payload_tokens = 0;
    out->tool_latency_s = 0;
    if (!out->final) draw_tool(wl, seed, st, out);
}

void workload_advance(const struct workload *wl, struct wl_traj_state *st, const struct wl_turn *t)
{
    int failed = t->status == TOOL_FAILURE || t->status == TOOL_TIMEOUT;
    st->turn++;
    st->ctx_tokens += t->gen_tokens + t->payload_tokens;
    st->n_failures += failed;
    st->last_failed = failed;
    st->last_large = t->tool >= 0 && t->payload_tokens >= wl->large_payload;
}

double workload_reward(const struct workload *wl, uint64_t seed, const struct wl_traj_state *st)
{
    if (wl->trace) {
        double r = wl_trace_pick(wl->trace, st->prompt_id, st->traj_id)->reward;
        if (!isnan(r)) return r;
    }
    double p = wl->reward_base + wl->reward_per_step * drift_steps(wl, st->step) -
               wl->reward_per_failure * st->n_failures;
    if (wl->difficulty_reward > 0) p -= wl->difficulty_reward * workload_difficulty(seed, st->prompt_id);
    struct rng r;
    stream(&r, seed, st->traj_id, TURN_END, PURPOSE_REWARD);
    return rng_uniform(&r) < clamp01(p, 1.0) ? 1.0 : 0.0;
}

void workload_run(const struct workload *wl, uint64_t seed, int64_t traj_id, int64_t prompt_id,
                  int step, struct wl_traj_summary *out)
{
    struct wl_traj_state st = {.traj_id = traj_id, .prompt_id = prompt_id, .step = step};
    struct wl_turn t;
    memset(out, 0, sizeof *out);
    out->prompt = workload_prompt_tokens(wl, seed, prompt_id);
    st.ctx_tokens = out->prompt;
    do {
        workload_turn(wl, seed, &st, &t);
        out->gen += t.gen_tokens;
        if (!t.final) {
            out->payload += t.payload_tokens;
            out->tool_s += t.tool_latency_s;
        }
        workload_advance(wl, &st, &t);
    } while (!t.final);
    out->turns = st.turn;
    out->failures = st.n_failures;
    out->reward = workload_reward(wl, seed, &st);
}

/* ======================================================================== */
/* describe                                                                 */
/* ======================================================================== */

/* Statistics of n simulated trajectories at one step. */
struct wl_stats {
    int step;
    double tot[5];   /* total tokens: mean, p50, p90, p99, max */
    double turns[3]; /* mean, p50, p99 */
    double prompt_mean, gen_turn_mean, payload_mean, tool_lat_mean, reward_mean;
    long turns_sum, calls, calls_by[WL_MAX_TOOLS], fail_by[WL_MAX_TOOLS], tmo_by[WL_MAX_TOOLS];
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Quantile q of sorted v[0..n) by linear interpolation between order statistics. */
static double quantile(const double *v, int n, double q)
{
    double pos = q * (n - 1);
    int i = (int)pos;
    if (i >= n - 1) return v[n - 1];
    return v[i] + (pos - i) * (v[i + 1] - v[i]);
}

static void summarise(double *v, int n, double *out, int with_p90)
{
    double sum = 0;
    for (int i = 0; i < n; i++) sum += v[i];
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    out[0] = sum / n;
    out[1] = quantile(v, n, 0.5);
    if (with_p90) {
        out[2] = quantile(v, n, 0.9);
        out[3] = quantile(v, n, 0.99);
        out[4] = v[n - 1];
    } else {
        out[2] = quantile(v, n, 0.99);
    }
}

/* Runs trajectory traj_id (prompt group traj_id / 4) to its end; adds to s and
 * returns its total tokens (prompt + generated + tool payloads). */
static double run_one(const struct workload *wl, uint64_t seed, int64_t traj_id, int step,
                      struct wl_stats *s, int *turns)
{
    struct wl_traj_state st = {.traj_id = traj_id, .prompt_id = traj_id / 4, .step = step};
    struct wl_turn t;
    int prompt = workload_prompt_tokens(wl, seed, traj_id / 4);
    double gen = 0, payload = 0;
    st.ctx_tokens = prompt;
    do {
        workload_turn(wl, seed, &st, &t);
        gen += t.gen_tokens;
        if (!t.final) {
            payload += t.payload_tokens;
            s->calls++;
            s->calls_by[t.tool]++;
            s->fail_by[t.tool] += t.status == TOOL_FAILURE;
            s->tmo_by[t.tool] += t.status == TOOL_TIMEOUT;
            s->tool_lat_mean += t.tool_latency_s;
        }
        workload_advance(wl, &st, &t);
    } while (!t.final);
    *turns = st.turn;
    s->prompt_mean += prompt;
    s->gen_turn_mean += gen;
    s->payload_mean += payload;
    s->turns_sum += st.turn;
    s->reward_mean += workload_reward(wl, seed, &st);
    return prompt + gen + payload;
}

static void simulate(const struct workload *wl, uint64_t seed, int n, int step, struct wl_stats *s)
{
    double *tot = xmalloc((size_t)n * sizeof *tot);
    double *turns = xmalloc((size_t)n * sizeof *turns);
    memset(s, 0, sizeof *s);
    s->step = step;
    for (int i = 0; i < n; i++) {
        int k;
        tot[i] = run_one(wl, seed, i, step, s, &k);
        turns[i] = k;
    }
    summarise(tot, n, s->tot, 1);
    summarise(turns, n, s->turns, 0);
    s->gen_turn_mean /= (double)s->turns_sum;
    s->payload_mean = s->calls ? s->payload_mean / s->calls : 0;
    s->tool_lat_mean = s->calls ? s->tool_lat_mean / s->calls : 0;
    s->prompt_mean /= n;
    s->reward_mean /= n;
    free(tot);
    free(turns);
}

/* One line: a label and the value at each simulated step, in 24-wide columns. */
static void row(FILE *out, const char *label, int ns, double v0, double v1, const char *fmt)
{
    fprintf(out, "  %-24s", label);
    fprintf(out, fmt, v0);
    if (ns > 1) fprintf(out, fmt, v1);
    fputc('\n', out);
}

#define ROW(label, field, fmt) row(out, label, ns, s[0].field, s[ns - 1].field, fmt)

static void print_tools(const struct workload *wl, const struct wl_stats *s, int ns, FILE *out)
{
    fprintf(out, "  tool mix (share of calls / failed / timed out)\n");
    for (int i = 0; i < wl->n_tools; i++) {
        fprintf(out, "    %-22s", wl->tools[i].name);
        for (int j = 0; j < ns; j++) {
            double c = (double)(s[j].calls_by[i] ? s[j].calls_by[i] : 1);
            fprintf(out, "    %5.1f%% %5.1f%% %5.1f%%", 100.0 * s[j].calls_by[i] / fmax(1.0, (double)s[j].calls),
                    100.0 * s[j].fail_by[i] / c, 100.0 * s[j].tmo_by[i] / c);
        }
        fputc('\n', out);
    }
}

void workload_describe(const struct workload *wl, uint64_t seed, int n, int step, FILE *out)
{
    if (n <= 0) return;
    struct wl_stats s[2];
    int ns = step < wl->drift_max_steps ? 2 : 1;
    simulate(wl, seed, n, step, &s[0]);
    if (ns > 1) simulate(wl, seed, n, wl->drift_max_steps, &s[1]);
    double ratio[2] = {s[0].tot[3] / s[0].tot[1], s[ns - 1].tot[3] / s[ns - 1].tot[1]};
    double calls[2] = {(double)s[0].calls / n, (double)s[ns - 1].calls / n};

    fprintf(out, "workload %s: %d trajectories, seed %llu\n", wl->name, n, (unsigned long long)seed);
    fprintf(out, "  %-24s", "");
    for (int j = 0; j < ns; j++) {
        char head[32];
        snprintf(head, sizeof head, "step %d", s[j].step);
        fprintf(out, "%24s", head);
    }
    fputc('\n', out);
    fprintf(out, "  total tokens / trajectory\n");
    ROW("  mean", tot[0], "%24.0f");
    ROW("  p50", tot[1], "%24.0f");
    ROW("  p90", tot[2], "%24.0f");
    ROW("  p99", tot[3], "%24.0f");
    ROW("  max", tot[4], "%24.0f");
    row(out, "  p99 / p50", ns, ratio[0], ratio[1], "%24.2f");
    fprintf(out, "  turns / trajectory\n");
    ROW("  mean", turns[0], "%24.2f");
    ROW("  p50", turns[1], "%24.0f");
    ROW("  p99", turns[2], "%24.0f");
    ROW("prompt tokens, mean", prompt_mean, "%24.0f");
    ROW("gen tokens / turn, mean", gen_turn_mean, "%24.0f");
    row(out, "tool calls / trajectory", ns, calls[0], calls[1], "%24.2f");
    ROW("payload / call, mean", payload_mean, "%24.0f");
    ROW("tool latency, mean (s)", tool_lat_mean, "%24.2f");
    ROW("reward, mean", reward_mean, "%24.3f");
    struct wl_structure st[2];
    for (int j = 0; j < ns; j++) workload_structure(wl, seed, n / 8 > 1 ? n / 8 : 2, 8, s[j].step, &st[j]);
    row(out, "group length correlation", ns, st[0].icc, st[ns - 1].icc, "%24.2f");
    row(out, "tail share (last 10 %)", ns, st[0].tail_share, st[ns - 1].tail_share, "%24.2f");
    print_tools(wl, s, ns, out);
}
