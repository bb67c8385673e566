/*
 * Rollout layouts of one rollout GPU count (plan_layouts.h): counting them in closed
 * form, enumerating them in preference order, and evaluating them into a layout_set.
 *
 * Exact mode evaluates every layout. Grid mode (more than max_layouts layouts):
 *   1. the grid: every composition u of U units over the m allowed classes (U the
 *      largest with C(U + m - 1, m - 1) <= min(max_layouts, PLAN_GRID_POINTS), at
 *      least 1; the cap because the local moves, not the grid, find the optimum: on
 *      smooth rollout models a 56-point grid ends within 0.05% of the exact optimum,
 *      as a 300-point one does, at a third of the evaluations); class k gets
 *      floor(u_k gpus / U) GPUs rounded down to a multiple of its TP, the leftover
 *      goes to the smallest class (always whole instances: every TP and the GPU count
 *      are multiples of the smallest TP); points that round to the same layout are
 *      evaluated once;
 *   2. local moves from the best grid point: move g GPUs from class a to class b
 *      (g / tp_a instances out, g / tp_b in, g = max(G, tp_a, tp_b)), take the best
 *      strictly improving move, repeat; when none improves halve G, from the largest
 *      power of two <= gpus / U (the grid spacing) down to 1. The last scale moves one
 *      instance of the larger class (one TP-8 <-> two TP-4, ...), so the result is a
 *      local optimum under single-instance moves.
 * Every layout is evaluated at most once per set (a hash of the counts), so the
 * set's best is the minimum over everything the grid and the moves visited.
 *
 * Order: the set's values and choices do not depend on the order of evaluation (the
 * grid's start and each move are minima with preference tie-breaks), only what the
 * cutoffs below cut does. So the grid is walked most preferred point first, after
 * the point that was best in the previous set the caller evaluated (struct
 * grid_hint), and each round of moves tries the last improving move first: good
 * values early make the cutoffs cut the rest early.
 *
 * Early cutoff (plan_eval.rollout_cut_s): a layout only matters if it can reach the
 * set's best so far (the enumeration, the grid) or the best neighbour so far (a
 * move), so it is evaluated with that as the cutoff, and a layout above it is kept as
 * a bound only (layout_val.cut). Ties are never cut (the cutoff is strict), so every
 * choice the set makes, the grid's start, each move and best_s, is bitwise the one
 * the full values give; plan_layouts_settle evaluates in full what a pick above
 * best_s may need.
 */
#include "plan_layouts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"

/* Most grid points per GPU count (U = 5 for four classes). */
#define PLAN_GRID_POINTS 56

int plan_layouts_prefer(const int a[PC_N_TP], const int b[PC_N_TP])
{
    for (int k = PC_N_TP - 1; k >= 0; k--)
        if (a[k] != b[k]) return a[k] > b[k] ? -1 : 1;
    return 0;
}

/* ---- counting ---- */

/* Layouts of x units over classes of 1, 2, 4 units: sum over c4 of (floor(x/2) - 2 c4 + 1). */
static int64_t count3(int64_t x)
{
    int64_t q = x / 4, h = x / 2;
    return (q + 1) * (h + 1) - q * (q + 1);
}

int64_t plan_layouts_count(int gpus, int klo, int khi)
{
    if (gpus < 0 || klo < 0 || khi >= PC_N_TP || klo > khi) return gpus == 0;
    int unit = pc_tp_of(klo);
    if (gpus % unit != 0) return 0;
    int64_t x = gpus / unit;
    switch (khi - klo + 1) {
    case 1: return 1;
    case 2: return x / 2 + 1;
    case 3: return count3(x);
    default: break;
    }
    /* Four classes: sum over the largest class's count, largest terms first, so a
     * total beyond INT64_MAX is seen after a few terms. */
    int64_t total = 0;
    for (int64_t c = 0; 8 * c <= x; c++) {
        int64_t t = count3(x - 8 * c);
        if (t > INT64_MAX - total) return INT64_MAX;
        total += t;
    }
    return total;
}

int64_t plan_count_layouts(int n_gpus, int min_tp, int max_tp)
{
    int klo = -1, khi = -1;
    for (int k = 0; k < PC_N_TP; k++) {
        if (pc_tp_of(k) < min_tp || pc_tp_of(k) > max_tp) continue;
        if (klo < 0) klo = k;
        khi = k;
    }
    if (klo < 0) return n_gpus == 0;
    return plan_layouts_count(n_gpus, klo, khi);
}

/* ---- enumeration ---- */

/* Class k takes c instances, largest c first; the smallest class takes the rest. */
static int each_rec(int k, int klo, int rem, int counts[PC_N_TP], plan_layout_fn fn, void *arg)
{
    int tp = pc_tp_of(k);
    if (k == klo) {
        if (rem % tp != 0) return 0;
        counts[k] = rem / tp;
        int stop = fn(arg, counts);
        counts[k] = 0;
        return stop;
    }
    for (int c = rem / tp; c >= 0; c--) {
        counts[k] = c;
        if (each_rec(k - 1, klo, rem - c * tp, counts, fn, arg)) {
            counts[k] = 0;
            return 1;
        }
    }
    counts[k] = 0;
    return 0;
}

void plan_layouts_each(int gpus, int klo, int khi, plan_layout_fn fn, void *arg)
{
    int counts[PC_N_TP] = {0};
    if (gpus < 0 || klo < 0 || khi >= PC_N_TP || klo > khi) return;
    each_rec(khi, klo, gpus, counts, fn, arg);
}

double plan_layouts_call(const struct plan_eval *ev, const int counts[PC_N_TP], char *why,
                         size_t n)
{
    why[0] = '\0';
    double s = ev->rollout_s(ev->ctx, counts, why, n);
    why[n - 1] = '\0';
    if (isnan(s)) {
        snprintf(why, n, "the rollout evaluator returned NaN");
        return INFINITY;
    }
    return s;
}

/* ---- the evaluated set ---- */

static size_t hash_counts(const int c[PC_N_TP])
{
    uint64_t h = 1469598103934665603ull;
    for (int k = 0; k < PC_N_TP; k++) h = (h ^ (uint32_t)c[k]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 31));
}

/* Index of counts in ls->v, or -1. */
static long set_find(const struct layout_set *ls, const int counts[PC_N_TP])
{
    if (ls->n_slot == 0) return -1;
    size_t mask = ls->n_slot - 1;
    for (size_t i = hash_counts(counts) & mask;; i = (i + 1) & mask) {
        int32_t s = ls->slot[i];
        if (s == 0) return -1;
        if (memcmp(ls->v[s - 1].counts, counts, sizeof ls->v[0].counts) == 0) return s - 1;
    }
}

static void slot_put(struct layout_set *ls, size_t idx)
{
    size_t mask = ls->n_slot - 1;
    size_t i = hash_counts(ls->v[idx].counts) & mask;
    while (ls->slot[i] != 0) i = (i + 1) & mask;
    ls->slot[i] = (int32_t)(idx + 1);
}

static void set_append(struct layout_set *ls, const int counts[PC_N_TP], double s)
{
    if (ls->n >= INT32_MAX - 1) FATAL("plan_layouts: more than %d layouts in one set", INT32_MAX - 1);
    XGROW(ls->v, ls->cap, ls->n + 1);
    memcpy(ls->v[ls->n].counts, counts, sizeof ls->v[0].counts);
    ls->v[ls->n].s = s;
    ls->n++;
    if (2 * ls->n > ls->n_slot) { /* keep the table at most half full */
        free(ls->slot);
        ls->n_slot = ls->n_slot ? 2 * ls->n_slot : 64;
        ls->slot = xcalloc(ls->n_slot, sizeof *ls->slot);
        for (size_t i = 0; i < ls->n; i++) slot_put(ls, i);
    } else {
        slot_put(ls, ls->n - 1);
    }
}

struct walker {
    struct layout_set *ls;
    const struct plan_eval *ev;
    int64_t *n_evals;
};

/* ev->rollout_cut_s (rollout_s without it), NaN as infeasible; *cut when the value
 * is only a bound above cutoff. */
static double call_cut(const struct plan_eval *ev, const int counts[PC_N_TP], double cutoff,
                       int *cut, char *why, size_t n)
{
    *cut = 0;
    if (ev->rollout_cut_s == NULL || !(cutoff < INFINITY))
        return plan_layouts_call(ev, counts, why, n);
    why[0] = '\0';
    double s = ev->rollout_cut_s(ev->ctx, counts, cutoff, why, n);
    why[n - 1] = '\0';
    if (isnan(s)) {
        snprintf(why, n, "the rollout evaluator returned NaN");
        return INFINITY;
    }
    *cut = s > cutoff && s < INFINITY;
    return s;
}

/* rollout_s of counts, evaluated once per set; with a finite cutoff, a value above it
 * may be a bound only (layout_val.cut), evaluated again if a later, higher cutoff
 * needs more. */
static double set_value(struct walker *w, const int counts[PC_N_TP], double cutoff)
{
    struct layout_set *ls = w->ls;
    long i = set_find(ls, counts);
    if (i >= 0 && !(ls->v[i].cut && ls->v[i].s <= cutoff)) return ls->v[i].s;
    char why[PLAN_WHY_LEN];
    int cut;
    double s = call_cut(w->ev, counts, cutoff, &cut, why, sizeof why);
    (*w->n_evals)++;
    if (i >= 0) {
        ls->v[i].s = s;
        ls->v[i].cut = cut;
    } else {
        set_append(ls, counts, s);
        ls->v[ls->n - 1].cut = cut;
    }
    if (cut) return s; /* finite and above a cutoff: neither the best nor infeasible */
    if (s < ls->best_s) ls->best_s = s;
    if (isinf(s) && s > 0 && (!ls->has_why || plan_layouts_prefer(counts, ls->why_counts) < 0)) {
        ls->has_why = 1;
        memcpy(ls->why_counts, counts, sizeof ls->why_counts);
        memcpy(ls->why, why, sizeof ls->why);
    }
    return s;
}

static int exact_visit(void *arg, const int counts[PC_N_TP])
{
    struct walker *w = arg;
    set_value(w, counts, w->ls->best_s);
    return 0;
}

/* ---- grid mode ---- */

static int64_t binom_small(int64_t n, int r) /* C(n, r), r <= 3 */
{
    int64_t v = 1;
    for (int i = 1; i <= r; i++) v = v * (n - r + i) / i;
    return v;
}

struct grid {
    struct walker *w;
    int units;          /* U */
    int u[PC_N_TP];     /* the composition being built, per class index - klo */
    int best_u[PC_N_TP]; /* the composition of the best grid point so far */
    double best_s;
};

static void grid_point(struct grid *g)
{
    const struct layout_set *ls = g->w->ls;
    int counts[PC_N_TP] = {0}, used = 0;
    for (int k = ls->klo; k <= ls->khi; k++) {
        int64_t share = (int64_t)g->u[k - ls->klo] * ls->gpus / g->units;
        counts[k] = (int)(share / pc_tp_of(k));
        used += counts[k] * pc_tp_of(k);
    }
    counts[ls->klo] += (ls->gpus - used) / pc_tp_of(ls->klo);
    double s = set_value(g->w, counts, ls->best_s);
    if (s < g->best_s && s == ls->best_s) {
        g->best_s = s;
        memcpy(g->best_u, g->u, sizeof g->u);
    }
}

/* Every composition, the largest class's share first and largest first (the most
 * preferred points first: on the planner's workloads they are near the best, so
 * their values cut the others early). */
static void grid_rec(struct grid *g, int j, int left)
{
    if (j == 0) {
        g->u[0] = left;
        grid_point(g);
        return;
    }
    for (int x = left; x >= 0; x--) {
        g->u[j] = x;
        grid_rec(g, j - 1, left - x);
    }
}

/* One local move: g GPUs from class a to class b (g = max(G, tp_a, tp_b)); 0 when
 * class a has too few instances. */
static int move_of(const int cur[PC_N_TP], int a, int b, int G, int cand[PC_N_TP])
{
    int ta = pc_tp_of(a), tb = pc_tp_of(b);
    int g = G > ta ? G : ta;
    if (tb > g) g = tb;
    if (cur[a] < g / ta) return 0;
    memcpy(cand, cur, sizeof(int) * PC_N_TP);
    cand[a] -= g / ta;
    cand[b] += g / tb;
    return 1;
}

/* The local moves from the best layout evaluated so far. Each round takes the best
 * strictly improving move (ties by preference), which does not depend on the order
 * the moves are tried in; the last improving move is tried first, as its value is
 * the likeliest cutoff for the others. */
static void climb(struct walker *w, int step0)
{
    struct layout_set *ls = w->ls;
    size_t start = ls->n;
    for (size_t i = 0; i < ls->n; i++) {
        if (!(ls->v[i].s < INFINITY)) continue;
        if (start == ls->n || ls->v[i].s < ls->v[start].s ||
            (ls->v[i].s == ls->v[start].s &&
             plan_layouts_prefer(ls->v[i].counts, ls->v[start].counts) < 0))
            start = i;
    }
    if (start == ls->n) return; /* nothing feasible to improve */
    int cur[PC_N_TP];
    memcpy(cur, ls->v[start].counts, sizeof cur);
    double cur_s = ls->v[start].s;
    int moves[PC_N_TP * PC_N_TP][2], n_moves = 0; /* (a, b), the last improving first */
    for (int a = ls->klo; a <= ls->khi; a++)
        for (int b = ls->klo; b <= ls->khi; b++)
            if (a != b) {
                moves[n_moves][0] = a;
                moves[n_moves][1] = b;
                n_moves++;
            }
    for (int G = step0;;) {
        int best[PC_N_TP], best_m = -1, moved = 0;
        double best_s = cur_s;
        for (int m = 0; m < n_moves; m++) {
            int cand[PC_N_TP];
            if (!move_of(cur, moves[m][0], moves[m][1], G, cand)) continue;
            /* only a layout at or below best_s can be taken (ties by preference) */
            double s = set_value(w, cand, best_s);
            if (s < best_s || (moved && s == best_s && plan_layouts_prefer(cand, best) < 0)) {
                memcpy(best, cand, sizeof best);
                best_s = s;
                best_m = m;
                moved = 1;
            }
        }
        if (moved) {
            memcpy(cur, best, sizeof cur);
            cur_s = best_s;
            int a = moves[best_m][0], b = moves[best_m][1]; /* to the front */
            memmove(moves[1], moves[0], (size_t)best_m * sizeof moves[0]);
            moves[0][0] = a;
            moves[0][1] = b;
        } else if (G > 1) {
            G /= 2;
        } else {
            return;
        }
    }
}

void plan_layouts_eval(struct layout_set *ls, int gpus, int klo, int khi, int max_layouts,
                       const struct plan_eval *ev, struct grid_hint *hint, int64_t *n_evals)
{
    memset(ls, 0, sizeof *ls);
    ls->gpus = gpus;
    ls->klo = klo;
    ls->khi = khi;
    ls->best_s = INFINITY;
    struct walker w = {ls, ev, n_evals};
    if (plan_layouts_count(gpus, klo, khi) <= max_layouts) {
        plan_layouts_each(gpus, klo, khi, exact_visit, &w);
        return;
    }
    /* More than max_layouts >= 1 layouts: at least two classes. */
    ls->approx = 1;
    int m = khi - klo + 1, units = 1, unit_gpus = pc_tp_of(klo);
    int points = max_layouts < PLAN_GRID_POINTS ? max_layouts : PLAN_GRID_POINTS;
    while (units < gpus / unit_gpus && binom_small(units + m, m - 1) <= points) units++;
    struct grid g = {.w = &w, .units = units, .best_s = INFINITY};
    if (hint && hint->units == units && hint->m == m) { /* last set's best point first */
        memcpy(g.u, hint->u, sizeof g.u);
        grid_point(&g);
    }
    grid_rec(&g, m - 1, units);
    if (hint && g.best_s < INFINITY) {
        hint->units = units;
        hint->m = m;
        memcpy(hint->u, g.best_u, sizeof hint->u);
    }
    int step = 1;
    while (step <= gpus / units / 2) step *= 2;
    climb(&w, step);
}

void plan_layouts_settle(struct layout_set *ls, double limit, const struct plan_eval *ev,
                         int64_t *n_evals)
{
    struct walker w = {ls, ev, n_evals};
    for (size_t i = 0; i < ls->n; i++)
        if (ls->v[i].cut && ls->v[i].s <= limit) set_value(&w, ls->v[i].counts, INFINITY);
}

const struct layout_val *plan_layouts_pick(const struct layout_set *ls, double limit)
{
    const struct layout_val *pick = NULL;
    for (size_t i = 0; i < ls->n; i++) {
        const struct layout_val *v = &ls->v[i];
        if (!(v->s <= limit) || isinf(v->s)) continue;
        if (pick == NULL || plan_layouts_prefer(v->counts, pick->counts) < 0) pick = v;
    }
    return pick;
}

void plan_layouts_free(struct layout_set *ls)
{
    if (ls == NULL) return;
    free(ls->v);
    free(ls->slot);
    memset(ls, 0, sizeof *ls);
}
