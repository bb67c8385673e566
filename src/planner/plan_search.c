/*
 * The planner's search (include/libra/plan_search.h): which training shape and which
 * rollout layout, by best-first branch and bound over training groups, and the brute
 * force the tests compare it with.
 *
 * Candidates. A training group is (n_train, tp, pp): n_train a multiple of the
 * granularity, at least min_train; tp <= min(max_train_tp, gpus_per_node) and
 * pp <= max_train_pp powers of two; dp = n_train / (tp pp) whole, 1 <= dp <= batch;
 * its shapes are the micro-batches 1, 2, 4, ... <= min(max_micro, batch / dp). Unlike
 * the reference we do not require batch % (dp micro) == 0: the trainer splits the
 * batch over replicas by tokens, so replicas need not get equal sequence counts.
 * The group's rollout GPUs are n_gpus - n_train rounded down to a multiple of tp pp
 * (alignment) and then of the smallest allowed rollout TP; the rest is idle; they must
 * be at least max(1, min_rollout).
 *
 * Separability. Given a group, the step time of (shape, layout) is max(t, rho), so
 * the group's best is max(min_micro t, min_layout rho(R)) with rho of its rollout GPU
 * count R computed once per R (a layout_set). Let S* be the optimum. The pairs that
 * reach it are exactly those with t <= S* and rho <= S*, so the tie-breaks of the
 * header resolve per level: the first group (n, tp, pp order) whose best equals S*,
 * its lowest micro with t <= S*, the most preferred layout with rho <= S*; the brute
 * force, which compares every pair, picks the same.
 *
 * Best-first. Every group starts in a min-heap keyed by (bound, group index) with the
 * bound rollout_lb(R); popped, its shapes are trained and it goes back with
 * max(min t, rho(R) if known else rollout_lb(R)); popped again, rho(R) is computed and
 * the group is final. The search stops when the smallest bound exceeds the best step
 * (or equals it for a group after the best in tie order): every group left can only
 * lose, so no training shape is evaluated unless its rollout bound allows it, and no
 * rollout GPU count unless some group that needs it could still win. With a
 * tolerance e > 0 it stops when the smallest bound times 1 + e reaches the best step:
 * whatever is left is at least best / (1 + e), so the plan is within 1 + e of the
 * optimum. This is what makes large clusters cheap: where the rollout time is
 * tail-bound it is nearly flat in R and sits a fraction of a percent above
 * rollout_lb, so an exact search must evaluate every R, and a tolerance of a few
 * tenths of a percent evaluates a handful.
 *
 * Cost. Exactness needs rho(R) for every R whose rollout_lb(R) and some training
 * time of its groups are both at or below the optimum, so the number of rollout GPU
 * counts evaluated grows with the gap between rollout_lb and the real rollout time
 * (a throughput-only bound leaves a band from the optimal R down to the R where the
 * bound reaches the optimum) and with 1 / granularity; without rollout_lb every
 * group is trained and every smaller R whose training is fast enough is evaluated.
 * Where the rollout time is flat in R (tail-bound), every such R is evaluated. No
 * monotonicity of rho in R is assumed: the search stays equal to the brute force.
 *
 * Threads (plan_limits.threads > 1, batches of PLAN_PAR_MIN_BATCH or more): workers
 * make the layout sets of the rollout GPU counts the search expects to need next
 * (plan_ahead.h); the search takes them when it reaches them and never sees them
 * before, so its bounds, order and result are those of one thread.
 *
 * Limits: n_gpus <= PLAN_MAX_GPUS; the powers-of-two limits must be powers of two.
 */
#include "libra/plan_search.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"
#include "plan_ahead.h"
#include "plan_layouts.h"

#define PLAN_MAX_GPUS (1 << 17)

/* One training group: every micro-batch of one (n_train, tp, pp). */
struct tgroup {
    int n, tp, pp, dp;        /* n = tp pp dp training GPUs */
    int rollout, idle;        /* rollout GPUs after alignment; GPUs left unused */
    int n_micro;              /* micro-batches 1, 2, ..., 2^(n_micro - 1) */
    size_t t_off;             /* first of its n_micro training times */
};

struct cands {
    struct tgroup *g;         /* (n) in tie order: n_train, tp, pp ascending */
    size_t n, cap;
    size_t n_shapes;          /* sum of n_micro */
    int klo, khi;             /* allowed rollout classes */
};

/* Why nothing was feasible; the same whatever order candidates were tried in. */
struct fail_notes {
    int train_ok;             /* some training shape fits */
    int oom_set;              /* oom: the least memory-hungry shape that did not fit */
    struct train_shape oom;
    char oom_why[PLAN_WHY_LEN];
    int roll_gpus;            /* largest rollout count (of a fitting shape) with no layout, or -1 */
    char roll_why[PLAN_WHY_LEN];
};

/* ---- limits and candidates ---- */

static int is_pow2(int x) { return x >= 1 && (x & (x - 1)) == 0; }

static int limits_valid(const struct plan_limits *l, char *why, size_t n)
{
    const struct { const char *name; int v; } p2[] = {
        {"gpus_per_node", l->gpus_per_node}, {"min_rollout_tp", l->min_rollout_tp},
        {"max_rollout_tp", l->max_rollout_tp}, {"max_train_tp", l->max_train_tp},
        {"max_train_pp", l->max_train_pp}, {"max_micro", l->max_micro},
    };
    const struct { const char *name; int v, lo; } ge[] = {
        {"granularity", l->granularity, 1}, {"batch", l->batch, 1},
        {"max_layouts", l->max_layouts, 1}, {"min_train", l->min_train, 0},
        {"min_rollout", l->min_rollout, 0},
    };
    if (l->n_gpus < 1 || l->n_gpus > PLAN_MAX_GPUS) {
        snprintf(why, n, "invalid limits: n_gpus %d is outside [1, %d]", l->n_gpus, PLAN_MAX_GPUS);
        return 0;
    }
    for (size_t i = 0; i < sizeof p2 / sizeof p2[0]; i++) {
        if (is_pow2(p2[i].v)) continue;
        snprintf(why, n, "invalid limits: %s %d is not a power of two", p2[i].name, p2[i].v);
        return 0;
    }
    for (size_t i = 0; i < sizeof ge / sizeof ge[0]; i++) {
        if (ge[i].v >= ge[i].lo) continue;
        snprintf(why, n, "invalid limits: %s %d is below %d", ge[i].name, ge[i].v, ge[i].lo);
        return 0;
    }
    if (!(l->tolerance >= 0 && l->tolerance < 1)) {
        snprintf(why, n, "invalid limits: tolerance %g is outside [0, 1)", l->tolerance);
        return 0;
    }
    return 1;
}

static void cands_push(struct cands *c, const struct tgroup *g)
{
    XGROW(c->g, c->cap, c->n + 1);
    c->g[c->n] = *g;
    c->g[c->n].t_off = c->n_shapes;
    c->n_shapes += (size_t)g->n_micro;
    c->n++;
}

/* Fills c with every training group; 0, or -1 with why when the limits leave none. */
static int cands_build(const struct plan_limits *l, struct cands *c, char *why, size_t nwhy)
{
    memset(c, 0, sizeof *c);
    int max_rtp = l->max_rollout_tp < l->gpus_per_node ? l->max_rollout_tp : l->gpus_per_node;
    c->klo = c->khi = -1;
    for (int k = 0; k < PC_N_TP; k++) {
        if (pc_tp_of(k) < l->min_rollout_tp || pc_tp_of(k) > max_rtp) continue;
        if (c->klo < 0) c->klo = k;
        c->khi = k;
    }
    if (c->klo < 0) {
        snprintf(why, nwhy,
                 "limits leave no candidate: no rollout TP of 1..%d within [min_rollout_tp %d, "
                 "min(max_rollout_tp %d, gpus_per_node %d)]",
                 pc_tp_of(PC_N_TP - 1), l->min_rollout_tp, l->max_rollout_tp, l->gpus_per_node);
        return -1;
    }
    int min_roll = l->min_rollout > 1 ? l->min_rollout : 1;
    int64_t first = l->min_train > 1 ? l->min_train : 1;
    first = (first + l->granularity - 1) / l->granularity * l->granularity;
    int last = l->n_gpus - min_roll;
    if (first > last) {
        if (first != l->min_train)
            snprintf(why, nwhy,
                     "limits leave no candidate: min_train %d (%lld at granularity %d) + "
                     "min_rollout %d > %d GPUs",
                     l->min_train, (long long)first, l->granularity, min_roll, l->n_gpus);
        else
            snprintf(why, nwhy, "limits leave no candidate: min_train %d + min_rollout %d > %d GPUs",
                     l->min_train, min_roll, l->n_gpus);
        return -1;
    }
    int max_ttp = l->max_train_tp < l->gpus_per_node ? l->max_train_tp : l->gpus_per_node;
    int unit = pc_tp_of(c->klo);
    for (int n = (int)first; n <= last; n += l->granularity) {
        for (int tp = 1; tp <= max_ttp && tp <= n; tp *= 2) {
            for (int pp = 1; pp <= l->max_train_pp && (int64_t)tp * pp <= n; pp *= 2) {
                int r = tp * pp;
                if (n % r != 0 || n / r > l->batch) continue;
                struct tgroup g = {.n = n, .tp = tp, .pp = pp, .dp = n / r};
                int free_gpus = l->n_gpus - n;
                g.rollout = free_gpus - free_gpus % r;
                g.rollout -= g.rollout % unit;
                if (g.rollout < min_roll) continue;
                g.idle = free_gpus - g.rollout;
                int mm = l->batch / g.dp < l->max_micro ? l->batch / g.dp : l->max_micro;
                for (int m = 1; m <= mm; m *= 2) {
                    g.n_micro++;
                    if (m > mm / 2) break;
                }
                cands_push(c, &g);
            }
            if (tp > max_ttp / 2) break;
        }
        if (n > last - l->granularity) break;
    }
    if (c->n == 0) {
        snprintf(why, nwhy,
                 "limits leave no candidate: no training shape with %lld..%d GPUs (granularity %d), "
                 "tp <= %d, pp <= %d, dp <= batch %d leaves at least %d rollout GPUs after "
                 "alignment to tp pp and to rollout TP %d",
                 (long long)first, last, l->granularity, max_ttp, l->max_train_pp, l->batch,
                 min_roll, unit);
        return -1;
    }
    return 0;
}

static void cands_free(struct cands *c)
{
    free(c->g);
    memset(c, 0, sizeof *c);
}

/* ---- evaluator calls and failure notes ---- */

static double call_train(const struct plan_eval *ev, const struct train_shape *s, char *why, size_t n)
{
    why[0] = '\0';
    double t = ev->train_s(ev->ctx, s, why, n);
    why[n - 1] = '\0';
    if (isnan(t)) {
        snprintf(why, n, "the training evaluator returned NaN");
        return INFINITY;
    }
    return t;
}

/* Of two shapes that did not fit, the one needing the least memory per GPU says most:
 * more model parallel, then more DP (optimizer shards), then a smaller micro-batch. */
static int oom_better(const struct train_shape *a, const struct train_shape *b)
{
    int ra = a->tp * a->pp, rb = b->tp * b->pp;
    if (ra != rb) return ra > rb;
    if (a->dp != b->dp) return a->dp > b->dp;
    if (a->micro != b->micro) return a->micro < b->micro;
    return a->tp > b->tp;
}

static void note_train(struct fail_notes *f, const struct train_shape *s, double t, const char *why)
{
    if (t < INFINITY) {
        f->train_ok = 1;
        return;
    }
    if (f->oom_set && !oom_better(s, &f->oom)) return;
    f->oom_set = 1;
    f->oom = *s;
    snprintf(f->oom_why, sizeof f->oom_why, "%s", why[0] ? why : "no reason given");
}

static void note_rollout(struct fail_notes *f, int gpus, const char *why)
{
    if (gpus <= f->roll_gpus) return;
    f->roll_gpus = gpus;
    snprintf(f->roll_why, sizeof f->roll_why, "%s", why[0] ? why : "no reason given");
}

static void fail_why(const struct fail_notes *f, char *why, size_t n)
{
    if (!f->train_ok && f->oom_set)
        snprintf(why, n, "no training shape fits in memory (tp %d pp %d dp %d micro %d: %.*s)",
                 f->oom.tp, f->oom.pp, f->oom.dp, f->oom.micro, (int)(n / 2), f->oom_why);
    else if (f->roll_gpus >= 0)
        snprintf(why, n, "no rollout layout is feasible for %d GPUs: %.*s", f->roll_gpus,
                 (int)(n / 2), f->roll_why);
    else
        snprintf(why, n, "no feasible candidate");
}

/* The coupled term of a (layout, training time) pair; 0 without the evaluator. */
static double coupled(const struct plan_eval *ev, const int counts[PC_N_TP], double t)
{
    if (ev->coupled_s == NULL || !(t < INFINITY)) return 0;
    double c = ev->coupled_s(ev->ctx, counts, t);
    return isnan(c) ? INFINITY : c;
}

/* A lower bound of the coupled term at training time t (0 without the evaluators). */
static double coupled_bound(const struct plan_eval *ev, double t)
{
    if (ev->coupled_s == NULL || ev->coupled_lb == NULL) return 0;
    double b = ev->coupled_lb(ev->ctx, t);
    return isnan(b) ? 0 : b;
}

static void fill_choice(struct plan_choice *out, const struct plan_eval *ev, const struct tgroup *g,
                        int micro, double t, const int counts[PC_N_TP], double rho)
{
    out->n_train = g->n;
    out->train = (struct train_shape){g->tp, g->pp, g->dp, micro};
    memcpy(out->counts, counts, sizeof out->counts);
    out->n_rollout = g->rollout;
    out->n_idle = g->idle;
    out->train_s = t;
    out->rollout_s = rho;
    out->coupled_s = coupled(ev, counts, t);
    out->step_s = fmax(fmax(t, rho), out->coupled_s);
    out->why[0] = '\0';
}

/* ---- best-first search ---- */

struct hnode {
    double bound;
    size_t gi;
};

enum { G_NEW, G_TRAINED, G_DONE };

struct search {
    const struct plan_limits *lim;
    const struct plan_eval *ev;
    struct plan_choice *out;
    struct cands c;
    double *t;                 /* (c.n_shapes) training times */
    double *tmin;              /* (c.n) per group */
    unsigned char *state;      /* (c.n) G_* */
    struct layout_set **sets;  /* (n_gpus + 1) by rollout GPU count; NULL until needed */
    struct plan_ahead *ahead;  /* workers making sets ahead (NULL: none); their sets are
                                * invisible to the search until rollout_set takes them, so
                                * its bounds and order are those of one thread */
    double *lb;                /* (n_gpus + 1) rollout_lb; NAN until asked */
    struct hnode *heap;        /* (n_heap) min-heap on (bound, gi) */
    size_t n_heap;
    struct fail_notes notes;
    double best_s;
    long best_g;               /* -1 until a feasible group */
    struct grid_hint hint;     /* where the next rollout set's grid starts */
};

static int hless(const struct hnode *a, const struct hnode *b)
{
    return a->bound < b->bound || (a->bound == b->bound && a->gi < b->gi);
}

static void heap_push(struct search *S, double bound, size_t gi)
{
    size_t i = S->n_heap++;
    struct hnode x = {bound, gi};
    while (i > 0 && hless(&x, &S->heap[(i - 1) / 2])) {
        S->heap[i] = S->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    S->heap[i] = x;
}

static struct hnode heap_pop(struct search *S)
{
    struct hnode top = S->heap[0], x = S->heap[--S->n_heap];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = l + 1, s = i;
        const struct hnode *smallest = &x;
        if (l < S->n_heap && hless(&S->heap[l], smallest)) { s = l; smallest = &S->heap[l]; }
        if (m < S->n_heap && hless(&S->heap[m], smallest)) s = m;
        if (s == i) break;
        S->heap[i] = S->heap[s];
        i = s;
    }
    if (S->n_heap > 0) S->heap[i] = x;
    return top;
}

static double rollout_bound(struct search *S, int gpus)
{
    if (S->ev->rollout_lb == NULL) return 0;
    if (isnan(S->lb[gpus])) {
        double b = S->ev->rollout_lb(S->ev->ctx, gpus);
        S->lb[gpus] = isnan(b) ? 0 : b;
    }
    return S->lb[gpus];
}

/* ---- rollout sets ---- */

/* The rollout GPU counts of the nodes the search would pop next (the smallest in heap
 * order) whose sets it has not got, one per count, at most k, most wanted first:
 * the counts the workers make ahead (plan_ahead.h). Returns how many. */
static int next_counts(const struct search *S, int gpus, int k, int *want)
{
    struct hnode pick[2 * PLAN_MAX_THREADS];
    int n = 0;
    for (size_t i = 0; i < S->n_heap; i++) {
        const struct hnode *x = &S->heap[i];
        int r = S->c.g[x->gi].rollout;
        if (r == gpus || S->sets[r] || S->state[x->gi] == G_DONE) continue;
        int at = -1;
        for (int q = 0; q < n; q++)
            if (S->c.g[pick[q].gi].rollout == r) at = q;
        if (at >= 0) { /* the count is picked: keep its earliest node */
            if (!hless(x, &pick[at])) continue;
            memmove(pick + at, pick + at + 1, (size_t)(n - at - 1) * sizeof *pick);
            n--;
        } else if (n == k && !hless(x, &pick[n - 1])) {
            continue;
        }
        if (n == k) n--; /* drop the last */
        int q = n++;
        while (q > 0 && hless(x, &pick[q - 1])) {
            pick[q] = pick[q - 1];
            q--;
        }
        pick[q] = *x;
    }
    for (int q = 0; q < n; q++) want[q] = S->c.g[pick[q].gi].rollout;
    return n;
}

/* Below this batch a rollout set is too quick to be worth handing to a thread: a set
 * costs some hundred placements of the batch at a few ns per sample, about a
 * microsecond per sample, and waking a thread and taking its result some. */
#define PLAN_PAR_MIN_BATCH 256

/* The set of gpus rollout GPUs: made here, or by a worker that saw it coming. With
 * workers, the counts the search expects next are named to them first (a set made
 * and never needed costs only its calls; which thread made a set and from which hint
 * changes none of its values or choices: plan_layouts.h). */
static const struct layout_set *rollout_set(struct search *S, int gpus)
{
    if (S->sets[gpus] == NULL && S->ahead) {
        int want[2 * PLAN_MAX_THREADS];
        int k = 2 * (S->lim->threads < PLAN_MAX_THREADS ? S->lim->threads : PLAN_MAX_THREADS);
        int n = next_counts(S, gpus, k, want);
        plan_ahead_want(S->ahead, want, n, &S->hint);
        S->sets[gpus] = plan_ahead_take(S->ahead, gpus, &S->out->n_rollout_evals);
    }
    if (S->sets[gpus] == NULL) {
        S->sets[gpus] = xmalloc(sizeof *S->sets[gpus]);
        plan_layouts_eval(S->sets[gpus], gpus, S->c.klo, S->c.khi, S->lim->max_layouts, S->ev,
                          &S->hint, &S->out->n_rollout_evals);
    }
    if (S->sets[gpus]->approx) S->out->approx = 1;
    return S->sets[gpus];
}

static void group_train(struct search *S, size_t gi)
{
    const struct tgroup *g = &S->c.g[gi];
    char why[PLAN_WHY_LEN];
    double m = INFINITY;
    for (int i = 0; i < g->n_micro; i++) {
        struct train_shape s = {g->tp, g->pp, g->dp, 1 << i};
        double t = call_train(S->ev, &s, why, sizeof why);
        S->out->n_train_evals++;
        if (!(t < INFINITY)) S->out->pruned_oom++;
        note_train(&S->notes, &s, t, why);
        S->t[g->t_off + (size_t)i] = t;
        m = fmin(m, t);
    }
    S->tmin[gi] = m;
}

/* A node that cannot beat (or tie ahead of) the best: neither can any after it.
 * With a tolerance e > 0, one that cannot beat it by more than the factor 1 + e. */
static int beyond_best(const struct search *S, const struct hnode *x)
{
    if (S->best_g < 0) return 0;
    if (S->lim->tolerance > 0) return x->bound * (1.0 + S->lim->tolerance) >= S->best_s;
    return x->bound > S->best_s || (x->bound == S->best_s && x->gi > (size_t)S->best_g);
}

static void search_step(struct search *S, size_t gi)
{
    const struct tgroup *g = &S->c.g[gi];
    if (S->state[gi] == G_NEW) {
        group_train(S, gi);
        if (!(S->tmin[gi] < INFINITY)) {
            S->state[gi] = G_DONE;
            return;
        }
        S->state[gi] = G_TRAINED;
        double rb = S->sets[g->rollout] ? S->sets[g->rollout]->best_s : rollout_bound(S, g->rollout);
        heap_push(S, fmax(fmax(S->tmin[gi], rb), coupled_bound(S->ev, S->tmin[gi])), gi);
        return;
    }
    const struct layout_set *ls = rollout_set(S, g->rollout);
    S->state[gi] = G_DONE;
    if (!(ls->best_s < INFINITY)) {
        note_rollout(&S->notes, g->rollout, ls->why);
        return;
    }
    double step = fmax(S->tmin[gi], ls->best_s);
    if (S->ev->coupled_s) {
        const struct layout_val *lv = plan_layouts_pick(ls, ls->best_s);
        step = fmax(step, coupled(S->ev, lv->counts, S->tmin[gi]));
    }
    if (S->best_g < 0 || step < S->best_s || (step == S->best_s && (long)gi < S->best_g)) {
        S->best_s = step;
        S->best_g = (long)gi;
    }
}

static void search_free(struct search *S)
{
    plan_ahead_stop(S->ahead, &S->out->n_rollout_evals);
    S->ahead = NULL;
    if (S->sets)
        for (int i = 0; i <= S->lim->n_gpus; i++) {
            plan_layouts_free(S->sets[i]);
            free(S->sets[i]);
        }
    free(S->sets);
    free(S->lb);
    free(S->t);
    free(S->tmin);
    free(S->state);
    free(S->heap);
    cands_free(&S->c);
}

int plan_search(const struct plan_limits *lim, const struct plan_eval *ev, struct plan_choice *out)
{
    memset(out, 0, sizeof *out);
    if (!limits_valid(lim, out->why, sizeof out->why)) return -1;
    struct search S = {.lim = lim, .ev = ev, .out = out, .best_s = INFINITY, .best_g = -1};
    S.notes.roll_gpus = -1;
    int rc = -1;
    if (cands_build(lim, &S.c, out->why, sizeof out->why) != 0) goto done;
    size_t ng = (size_t)lim->n_gpus + 1;
    S.t = xmalloc(S.c.n_shapes * sizeof *S.t);
    S.tmin = xmalloc(S.c.n * sizeof *S.tmin);
    S.state = xcalloc(S.c.n, sizeof *S.state);
    S.sets = xcalloc(ng, sizeof *S.sets);
    S.lb = xmalloc(ng * sizeof *S.lb);
    for (size_t i = 0; i < ng; i++) S.lb[i] = NAN;
    S.heap = xmalloc(S.c.n * sizeof *S.heap);
    if (lim->threads > 1 && lim->batch >= PLAN_PAR_MIN_BATCH)
        S.ahead = plan_ahead_start(lim->threads, lim->n_gpus, S.c.klo, S.c.khi, lim->max_layouts, ev);
    for (size_t gi = 0; gi < S.c.n; gi++)
        heap_push(&S, fmax(rollout_bound(&S, S.c.g[gi].rollout), coupled_bound(ev, 0)), gi);
    while (S.n_heap > 0) {
        struct hnode x = heap_pop(&S);
        if (beyond_best(&S, &x)) {
            out->pruned_bound += S.c.g[x.gi].n_micro;
            for (size_t i = 0; i < S.n_heap; i++) out->pruned_bound += S.c.g[S.heap[i].gi].n_micro;
            break;
        }
        search_step(&S, x.gi);
    }
    plan_ahead_stop(S.ahead, &out->n_rollout_evals); /* the sets needed are taken */
    S.ahead = NULL;
    if (S.best_g < 0) {
        fail_why(&S.notes, out->why, sizeof out->why);
        goto done;
    }
    const struct tgroup *g = &S.c.g[S.best_g];
    struct layout_set *ls = S.sets[g->rollout];
    if (!ev->coupled_s) plan_layouts_settle(ls, S.best_s, ev, &out->n_rollout_evals);
    /* the coupled term was taken on the best layout: pick that one then */
    const struct layout_val *lv = plan_layouts_pick(ls, ev->coupled_s ? ls->best_s : S.best_s);
    if (lv == NULL) FATAL("plan_search: no layout of %d GPUs at the best step %g", g->rollout, S.best_s);
    int mi = 0;
    while (!(S.t[g->t_off + (size_t)mi] <= S.best_s &&
             coupled(ev, lv->counts, S.t[g->t_off + (size_t)mi]) <= S.best_s))
        mi++;
    fill_choice(out, ev, g, 1 << mi, S.t[g->t_off + (size_t)mi], lv->counts, lv->s);
    rc = 0;
done:
    search_free(&S);
    return rc;
}

/* ---- brute force ---- */

struct brute {
    const struct plan_eval *ev;
    struct plan_choice *out;
    int cur_micro;             /* the shape being paired: group, micro, time */
    size_t cur_gi;
    double cur_t;
    int cur_any;               /* some layout feasible for the current shape */
    int cur_why_set;
    char cur_why[PLAN_WHY_LEN];
    int has;                   /* the best pair so far */
    double best_s, best_t, best_rho;
    size_t best_gi;
    int best_micro;
    int best_counts[PC_N_TP];
};

static int brute_layout(void *arg, const int counts[PC_N_TP])
{
    struct brute *B = arg;
    char why[PLAN_WHY_LEN];
    double rho = plan_layouts_call(B->ev, counts, why, sizeof why);
    B->out->n_rollout_evals++;
    if (!(rho < INFINITY)) {
        if (!B->cur_why_set) { /* enumeration order: the most preferred infeasible one */
            B->cur_why_set = 1;
            memcpy(B->cur_why, why, sizeof why);
        }
        return 0;
    }
    B->cur_any = 1;
    double s = fmax(fmax(B->cur_t, rho), coupled(B->ev, counts, B->cur_t));
    int better = !B->has || s < B->best_s;
    if (B->has && s == B->best_s) {
        if (B->cur_gi != B->best_gi)
            better = B->cur_gi < B->best_gi;
        else if (B->cur_micro != B->best_micro)
            better = B->cur_micro < B->best_micro;
        else
            better = plan_layouts_prefer(counts, B->best_counts) < 0;
    }
    if (better) {
        B->has = 1;
        B->best_s = s;
        B->best_t = B->cur_t;
        B->best_rho = rho;
        B->best_gi = B->cur_gi;
        B->best_micro = B->cur_micro;
        memcpy(B->best_counts, counts, sizeof B->best_counts);
    }
    return 0;
}

int plan_search_brute(const struct plan_limits *lim, const struct plan_eval *ev,
                      struct plan_choice *out)
{
    memset(out, 0, sizeof *out);
    if (!limits_valid(lim, out->why, sizeof out->why)) return -1;
    struct cands c;
    if (cands_build(lim, &c, out->why, sizeof out->why) != 0) {
        cands_free(&c);
        return -1;
    }
    struct fail_notes notes = {.roll_gpus = -1};
    struct brute B = {.ev = ev, .out = out};
    for (size_t gi = 0; gi < c.n; gi++) {
        const struct tgroup *g = &c.g[gi];
        for (int i = 0; i < g->n_micro; i++) {
            struct train_shape s = {g->tp, g->pp, g->dp, 1 << i};
            char why[PLAN_WHY_LEN];
            double t = call_train(ev, &s, why, sizeof why);
            out->n_train_evals++;
            note_train(&notes, &s, t, why);
            if (!(t < INFINITY)) {
                out->pruned_oom++;
                continue;
            }
            B.cur_gi = gi;
            B.cur_micro = 1 << i;
            B.cur_t = t;
            B.cur_any = B.cur_why_set = 0;
            plan_layouts_each(g->rollout, c.klo, c.khi, brute_layout, &B);
            if (!B.cur_any) note_rollout(&notes, g->rollout, B.cur_why_set ? B.cur_why : "");
        }
    }
    int rc = -1;
    if (B.has) {
        fill_choice(out, ev, &c.g[B.best_gi], B.best_micro, B.best_t, B.best_counts, B.best_rho);
        rc = 0;
    } else {
        fail_why(&notes, out->why, sizeof out->why);
    }
    cands_free(&c);
    return rc;
}
