/*
 * Tool-return states (src/sched/tool_state.c) and C-MLFQ's causal prefix tree
 * (src/sched/ptree.c, ptree_io.c). With window 200, min_samples 1 and shrink 0 the
 * tree reproduces the reference's numbers (cmlfq.md §4, "Prefix tree"); the tests
 * marked FIX pin the behaviours that deliberately differ from the reference
 * (§6.3, §6.4): deepest match across both trees, no root as a remaining length,
 * progress subtracted, one window for mean and p90, shrinkage, min_samples. The
 * damaged-file tests edit a saved file with HDF5 directly.
 */
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "libra/ptree.h"
#include "libra/tool_state.h"
#include "libra/workload.h"
#include "testutil.h"

static const struct tool_state_config TS = {500, 5000};
static const char *const TOOLS[] = {"calc", "search"};

/* State codes used below (500/5000 thresholds). */
#define S1 tool_state_code(&TS, 0, 10, TOOL_SUCCESS)
#define S2 tool_state_code(&TS, 1, 6000, TOOL_SUCCESS)
#define S3 tool_state_code(&TS, 1, 100, TOOL_FAILURE)
#define S9 tool_state_code(&TS, 2, 700, TOOL_TIMEOUT)

static void make_tree(struct ptree *t, int window, int min_samples, double shrink)
{
    struct ptree_config c = {window, min_samples, shrink};
    char err[256];
    int rc = ptree_init(t, &c, err, sizeof err);
    CU_ASSERT_FATAL(rc == 0);
}

/* One trajectory with a single tool return. */
static void insert1(struct ptree *t, int64_t pid, int32_t s, int32_t pos, int32_t total)
{
    ptree_insert(t, pid, &s, &pos, 1, total);
}

/* The k-th oldest sample of a node's window. */
static float sample_rem(const struct ptree_node *nd, int k)
{
    return nd->rem[(nd->head - nd->n + k + nd->cap) % nd->cap];
}

/* ---- tool states ---- */

static void test_state_sizes(void)
{
    CU_ASSERT_EQUAL(tool_state_size(&TS, 0), TOOL_SIZE_SMALL);
    CU_ASSERT_EQUAL(tool_state_size(&TS, 500), TOOL_SIZE_SMALL);
    CU_ASSERT_EQUAL(tool_state_size(&TS, 501), TOOL_SIZE_MEDIUM);
    CU_ASSERT_EQUAL(tool_state_size(&TS, 5000), TOOL_SIZE_MEDIUM);
    CU_ASSERT_EQUAL(tool_state_size(&TS, 5001), TOOL_SIZE_LARGE);
    struct tool_state_config c4b = {400, 1600};
    CU_ASSERT_EQUAL(tool_state_size(&c4b, 400), TOOL_SIZE_SMALL);
    CU_ASSERT_EQUAL(tool_state_size(&c4b, 401), TOOL_SIZE_MEDIUM);
    CU_ASSERT_EQUAL(tool_state_size(&c4b, 1600), TOOL_SIZE_MEDIUM);
    CU_ASSERT_EQUAL(tool_state_size(&c4b, 1601), TOOL_SIZE_LARGE);
    struct tool_state_config zero = {0, 0};
    CU_ASSERT_EQUAL(tool_state_size(&zero, 0), TOOL_SIZE_SMALL);
    CU_ASSERT_EQUAL(tool_state_size(&zero, 1), TOOL_SIZE_LARGE);
}

static void test_state_codes(void)
{
    static const int statuses[3] = {TOOL_SUCCESS, TOOL_FAILURE, TOOL_TIMEOUT};
    static const int tokens[3] = {1, 501, 5001};
    unsigned char seen[TOOL_STATE_MAX_CODE] = {0};
    for (int tool = 0; tool < TOOL_STATE_MAX_TOOLS; tool++)
        for (int s = 0; s < 3; s++)
            for (int st = 0; st < 3; st++) {
                int code = tool_state_code(&TS, tool, tokens[s], statuses[st]);
                CU_ASSERT_FATAL(code >= 0 && code < TOOL_STATE_MAX_CODE);
                CU_ASSERT_EQUAL(seen[code], 0);
                seen[code] = 1;
                int t2 = -1, st2 = -1;
                enum tool_size s2 = TOOL_SIZE_LARGE;
                CU_ASSERT_EQUAL(tool_state_decode(code, &t2, &s2, &st2), 0);
                CU_ASSERT_EQUAL(t2, tool);
                CU_ASSERT_EQUAL((int)s2, s);
                CU_ASSERT_EQUAL(st2, statuses[st]);
            }
    CU_ASSERT_EQUAL(tool_state_code(&TS, 1, 6000, TOOL_SUCCESS), (1 * 3 + 2) * 3 + 0);
    CU_ASSERT_EQUAL(tool_state_code(&TS, 0, 10, TOOL_TIMEOUT), 2);
    CU_ASSERT_EQUAL(tool_state_code(&TS, -1, 10, TOOL_SUCCESS), -1);
    CU_ASSERT_EQUAL(tool_state_code(&TS, TOOL_STATE_MAX_TOOLS, 10, TOOL_SUCCESS), -1);
    CU_ASSERT_EQUAL(tool_state_code(&TS, 0, 10, TOOL_NONE), -1);
    CU_ASSERT_EQUAL(tool_state_code(&TS, 0, 10, 4), -1);
    CU_ASSERT_EQUAL(tool_state_decode(-1, NULL, NULL, NULL), -1);
    CU_ASSERT_EQUAL(tool_state_decode(TOOL_STATE_MAX_CODE, NULL, NULL, NULL), -1);
}

static void test_state_names(void)
{
    char buf[64];
    tool_state_name(tool_state_code(&TS, 1, 6000, TOOL_SUCCESS), TOOLS, 2, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "search:large:success");
    tool_state_name(tool_state_code(&TS, 0, 501, TOOL_FAILURE), TOOLS, 2, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "calc:medium:failure");
    tool_state_name(tool_state_code(&TS, 5, 0, TOOL_TIMEOUT), TOOLS, 2, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "tool5:small:timeout");
    tool_state_name(tool_state_code(&TS, 1, 0, TOOL_SUCCESS), NULL, 0, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "tool1:small:success");
    tool_state_name(TOOL_STATE_MAX_CODE, TOOLS, 2, buf, sizeof buf);
    CU_ASSERT(strstr(buf, "invalid") != NULL);
}

static void test_state_config_check(void)
{
    char err[256] = "";
    struct tool_state_config c = {500, 5000};
    CU_ASSERT_EQUAL(tool_state_config_check(&c, err, sizeof err), 0);
    c = (struct tool_state_config){0, 0};
    CU_ASSERT_EQUAL(tool_state_config_check(&c, err, sizeof err), 0);
    c = (struct tool_state_config){-1, 5000};
    CU_ASSERT_EQUAL(tool_state_config_check(&c, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "payload_small") != NULL);
    c = (struct tool_state_config){500, 499};
    err[0] = '\0';
    CU_ASSERT_EQUAL(tool_state_config_check(&c, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "payload_large") != NULL);
}

/* ---- tree: reference behaviours ---- */

static void test_config_check(void)
{
    struct ptree t;
    char err[256];
    struct ptree_config bad[] = {{0, 1, 0}, {200, 0, 0}, {200, 1, -1}, {200, 1, NAN}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        CU_ASSERT_EQUAL(ptree_init(&t, &bad[i], err, sizeof err), -1);
        CU_ASSERT(strlen(err) > 0);
        ptree_free(&t); /* safe after a failed init */
    }
}

static void test_lookup_depths(void)
{
    struct ptree t;
    make_tree(&t, 200, 1, 0);
    int32_t s[2] = {S1, S2}, pos[2] = {100, 300};
    ptree_insert(&t, 7, s, pos, 2, 1000);
    const struct ptree_node *n0 = ptree_lookup(&t, 7, s, 0);
    const struct ptree_node *n1 = ptree_lookup(&t, 7, s, 1);
    const struct ptree_node *n2 = ptree_lookup(&t, 7, s, 2);
    CU_ASSERT_FATAL(n0 && n1 && n2);
    CU_ASSERT_EQUAL(n0->depth, 0);
    CU_ASSERT_EQUAL(n1->depth, 1);
    CU_ASSERT_EQUAL(n2->depth, 2);
    CU_ASSERT_EQUAL(n0->prompt_id, 7);
    CU_ASSERT_DOUBLE_EQUAL(n0->mean, 1000, 1e-9); /* a root holds totals */
    CU_ASSERT_DOUBLE_EQUAL(n1->mean, 900, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(n2->mean, 700, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(n2->mean_pos, 300, 1e-9);
    CU_ASSERT_PTR_NULL(ptree_lookup(&t, 8, s, 0));
    CU_ASSERT_PTR_NULL(ptree_lookup(&t, 7, &s[1], 1));
    const struct ptree_node *g = ptree_lookup(&t, PTREE_GLOBAL, s, 2);
    CU_ASSERT_FATAL(g != NULL);
    CU_ASSERT_EQUAL(g->prompt_id, PTREE_GLOBAL);
    CU_ASSERT_EQUAL(g->depth, 2);
    CU_ASSERT_EQUAL(t.insertions, 1);
    ptree_free(&t);
}

static void test_unseen_prompt_global(void)
{
    struct ptree t;
    make_tree(&t, 200, 1, 0);
    insert1(&t, 1, S2, 2000, 10000); /* remaining 8000 after the return */
    struct ptree_estimate e;
    int32_t s = S2, pos = 2000;
    CU_ASSERT_FATAL(ptree_estimate_remaining(&t, 99, &s, &pos, 1, &e) == 1);
    CU_ASSERT_EQUAL(e.depth, 1);
    CU_ASSERT_EQUAL(e.from_prompt, 0);
    CU_ASSERT_DOUBLE_EQUAL(e.mean, 8000, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(e.p90, 8000, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(e.support, 1, 1e-12);
    CU_ASSERT_EQUAL(e.trusted, 1);
    /* the known prompt itself: its own node (a tie in depth goes to the prompt) */
    CU_ASSERT_FATAL(ptree_estimate_remaining(&t, 1, &s, &pos, 1, &e) == 1);
    CU_ASSERT_EQUAL(e.from_prompt, 1);
    CU_ASSERT_DOUBLE_EQUAL(e.mean, 8000, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(e.support, 2, 1e-12); /* its node + the global counterpart */
    ptree_free(&t);
}

static void test_p90_numpy(void)
{
    struct ptree t;
    make_tree(&t, 200, 1, 0);
    /* totals 1..10 in scrambled order: numpy.percentile(range(1, 11), 90) = 9.1 */
    static const int order[10] = {7, 3, 10, 1, 5, 9, 2, 8, 4, 6};
    for (int i = 0; i < 10; i++) ptree_insert(&t, 1, NULL, NULL, 0, order[i]);
    const struct ptree_node *r = ptree_lookup(&t, 1, NULL, 0);
    CU_ASSERT_FATAL(r != NULL);
    CU_ASSERT_EQUAL(r->n, 10);
    CU_ASSERT_DOUBLE_EQUAL(r->p90, 9.1, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(r->mean, 5.5, 1e-9);
    /* [0, 10] -> 9.0; [5] -> 5; [1, 2, 3, 4] -> 3.7 */
    ptree_insert(&t, 2, NULL, NULL, 0, 10);
    ptree_insert(&t, 2, NULL, NULL, 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(ptree_lookup(&t, 2, NULL, 0)->p90, 9.0, 1e-9);
    ptree_insert(&t, 3, NULL, NULL, 0, 5);
    CU_ASSERT_DOUBLE_EQUAL(ptree_lookup(&t, 3, NULL, 0)->p90, 5.0, 1e-9);
    for (int v = 4; v >= 1; v--) ptree_insert(&t, 4, NULL, NULL, 0, v);
    CU_ASSERT_DOUBLE_EQUAL(ptree_lookup(&t, 4, NULL, 0)->p90, 3.7, 1e-9);
    ptree_free(&t);
}

static void test_rebuild_prompts(void)
{
    struct ptree t;
    make_tree(&t, 200, 1, 0);
    for (int p = 0; p < 3; p++) insert1(&t, 100 + p, S1, 10, 100);
    ptree_clear(&t);
    struct ptree_shape sh;
    ptree_shape(&t, &sh);
    CU_ASSERT_EQUAL(sh.nodes, 1);
    CU_ASSERT_EQUAL(sh.prompts, 0);
    CU_ASSERT_EQUAL(sh.insertions, 0);
    struct ptree_estimate e;
    CU_ASSERT_EQUAL(ptree_estimate_total(&t, 100, &e), 0); /* nothing anywhere */
    for (int p = 0; p < 10; p++) insert1(&t, p, S1, 10, 100 + p);
    ptree_shape(&t, &sh);
    CU_ASSERT_EQUAL(sh.prompts, 10);
    CU_ASSERT_EQUAL(sh.nodes, 22);      /* 10 x (root + child) + global root + child */
    CU_ASSERT_EQUAL(sh.global_nodes, 2);
    CU_ASSERT_EQUAL(sh.leaves, 11);
    CU_ASSERT_EQUAL(sh.max_depth, 1);
    CU_ASSERT_EQUAL(sh.insertions, 10);
    CU_ASSERT_PTR_NULL(ptree_lookup(&t, 100, NULL, 0));
    ptree_free(&t);
}

/* Many prompts: the prompt map grows and every root stays reachable. */
static void test_many_prompts(void)
{
    struct ptree t;
    make_tree(&t, 4, 1, 0);
    for (int64_t p = 0; p < 3000; p++) insert1(&t, p * 7919 - 1000000, S1, 0, (int32_t)p);
    CU_ASSERT_EQUAL(t.n_prompts, 3000);
    CU_ASSERT(t.n_prompts * 10 <= t.map_cap * 7);
    int ok = 1;
    for (int64_t p = 0; p < 3000; p++) {
        const struct ptree_node *r = ptree_lookup(&t, p * 7919 - 1000000, NULL, 0);
        ok &= r && r->mean == (double)p && r->parent == -1;
    }
    CU_ASSERT(ok);
    const struct ptree_node *g = ptree_lookup(&t, PTREE_GLOBAL, NULL, 0);
    CU_ASSERT_EQUAL(g->visits, 3000);
    CU_ASSERT_EQUAL(g->n, 4); /* window */
    ptree_free(&t);
}

/* ---- tree: the fixes ---- */

/* FIX §6.4: the prompt's path diverges, the global tree has a deeper match. */
static void test_fix_deeper_global(void)
{
    struct ptree t;
    make_tree(&t, 200, 1, 0);
    int32_t s[2] = {S1, S2}, pos[2] = {100, 200};
    ptree_insert(&t, 1, s, pos, 2, 1000);
    insert1(&t, 2, S3, 50, 500);
    struct ptree_estimate e;
    CU_ASSERT_FATAL(ptree_estimate_remaining(&t, 2, s, pos, 2, &e) == 1);
    CU_ASSERT_EQUAL(e.from_prompt, 0); /* the reference returned prompt 2's root: 500 */
    CU_ASSERT_EQUAL(e.depth, 2);
    CU_ASSERT_DOUBLE_EQUAL(e.mean, 800, 1e-9);
    ptree_free(&t);
}

/* FIX §6.4: a root's total is never a remaining length. */
static void test_fix_no_root(void)
{
    struct ptree t;
    make_tree(&t, 200, 1, 0);
    insert1(&t, 1, S1, 100, 1000);
    struct ptree_estimate e;
    int32_t s = S9, pos = 100;
    CU_ASSERT_EQUAL(ptree_estimate_remaining(&t, 1, &s, &pos, 1, &e), 0);
    CU_ASSERT_EQUAL(ptree_estimate_remaining(&t, 99, &s, &pos, 1, &e), 0);
    CU_ASSERT_EQUAL(ptree_estimate_remaining(&t, 1, &s, &pos, 0, &e), 0);
    /* the total is the root's business */
    CU_ASSERT_FATAL(ptree_estimate_total(&t, 1, &e) == 1);
    CU_ASSERT_EQUAL(e.depth, 0);
    CU_ASSERT_EQUAL(e.from_prompt, 1);
    CU_ASSERT_DOUBLE_EQUAL(e.mean, 1000, 1e-9);
    CU_ASSERT_FATAL(ptree_estimate_total(&t, 42, &e) == 1); /* unseen: the global root */
    CU_ASSERT_EQUAL(e.from_prompt, 0);
    CU_ASSERT_DOUBLE_EQUAL(e.mean, 1000, 1e-9);
    ptree_free(&t);
}

/* FIX §6.4: a partial match subtracts the tokens generated since its depth. */
static void test_fix_progress(void)
{
    struct ptree t;
    make_tree(&t, 200, 1, 0);
    int32_t s[2] = {S1, S2}, pos[2] = {100, 200};
    ptree_insert(&t, 1, s, pos, 2, 1000);
    int32_t q[2] = {S1, S3}, qpos[2] = {100, 400};
    struct ptree_estimate e;
    CU_ASSERT_FATAL(ptree_estimate_remaining(&t, 1, q, qpos, 2, &e) == 1);
    CU_ASSERT_EQUAL(e.depth, 1);
    CU_ASSERT_EQUAL(e.from_prompt, 1);
    CU_ASSERT_DOUBLE_EQUAL(e.mean, 900 - 300, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(e.p90, 900 - 300, 1e-9);
    qpos[1] = 5000; /* more progress than the estimate: floored at 0 */
    CU_ASSERT_FATAL(ptree_estimate_remaining(&t, 1, q, qpos, 2, &e) == 1);
    CU_ASSERT_DOUBLE_EQUAL(e.mean, 0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(e.p90, 0, 1e-12);
    ptree_free(&t);
}

/* FIX §6.3: mean and p90 cover the same window (the reference's mean was all-time). */
static void test_fix_one_window(void)
{
    struct ptree t;
    make_tree(&t, 200, 1, 0);
    for (int i = 1; i <= 300; i++) insert1(&t, 1, S1, 0, i);
    int32_t s = S1;
    const struct ptree_node *nd = ptree_lookup(&t, 1, &s, 1);
    CU_ASSERT_FATAL(nd != NULL);
    CU_ASSERT_EQUAL(nd->n, 200);
    CU_ASSERT_EQUAL(nd->cap, 200);
    CU_ASSERT_EQUAL(nd->visits, 300);
    CU_ASSERT_DOUBLE_EQUAL(nd->mean, 200.5, 1e-9);  /* mean of 101..300, not 150.5 */
    CU_ASSERT_DOUBLE_EQUAL(nd->p90, 280.1, 1e-9);   /* numpy: percentile(101..300, 90) */
    CU_ASSERT_DOUBLE_EQUAL(sample_rem(nd, 0), 101, 0);
    CU_ASSERT_DOUBLE_EQUAL(sample_rem(nd, 199), 300, 0);
    ptree_free(&t);
}

/*
 * FIX §6.3: shrinkage, K = 2. Prompt 1: one return at pos 100, total 1100 (rem 1000);
 * prompts 2..4: pos 400, total 3400 (rem 3000).
 *   global root: totals {1100, 3400 x3}: mean 2825, p90 3400 (numpy)
 *   global S1: rem {1000, 3000 x3}: mean 2500, p90 3000; mean_pos 325
 *     prior = root moved by 325: (2500, 3075) -> est ((4*2500 + 2*2500)/6, (4*3000 +
 *     2*3075)/6) = (2500, 3025)
 *   prompt 1's S1: n = 1, raw (1000, 1000), prior = the global S1's estimate:
 *     ((1000 + 2*2500)/3, (1000 + 2*3025)/3) = (2000, 2350); support 1 + 4
 *   prompt 1's root: ((1100 + 2*2825)/3, (1100 + 2*3400)/3) = (2250, 7900/3)
 */
static void test_fix_shrinkage(void)
{
    struct ptree t;
    make_tree(&t, 200, 1, 2.0);
    insert1(&t, 1, S1, 100, 1100);
    for (int p = 2; p <= 4; p++) insert1(&t, p, S1, 400, 3400);
    int32_t s = S1, pos = 100;
    struct ptree_estimate e;
    CU_ASSERT_FATAL(ptree_estimate_remaining(&t, 1, &s, &pos, 1, &e) == 1);
    CU_ASSERT_EQUAL(e.from_prompt, 1);
    CU_ASSERT_DOUBLE_EQUAL(e.mean, 2000, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(e.p90, 2350, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(e.support, 5, 1e-12);
    CU_ASSERT_FATAL(ptree_estimate_remaining(&t, 99, &s, &pos, 1, &e) == 1);
    CU_ASSERT_EQUAL(e.from_prompt, 0);
    CU_ASSERT_DOUBLE_EQUAL(e.mean, 2500, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(e.p90, 3025, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(e.support, 4, 1e-12);
    CU_ASSERT_FATAL(ptree_estimate_total(&t, 1, &e) == 1);
    CU_ASSERT_DOUBLE_EQUAL(e.mean, 2250, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(e.p90, 7900.0 / 3, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(e.support, 5, 1e-12);
    CU_ASSERT_FATAL(ptree_estimate_total(&t, 99, &e) == 1);
    CU_ASSERT_DOUBLE_EQUAL(e.mean, 2825, 1e-9); /* the global root: raw */
    ptree_free(&t);

    /* K = 0: raw statistics of the prompt's own node */
    make_tree(&t, 200, 1, 0.0);
    insert1(&t, 1, S1, 100, 1100);
    for (int p = 2; p <= 4; p++) insert1(&t, p, S1, 400, 3400);
    CU_ASSERT_FATAL(ptree_estimate_remaining(&t, 1, &s, &pos, 1, &e) == 1);
    CU_ASSERT_DOUBLE_EQUAL(e.mean, 1000, 1e-9);
    ptree_free(&t);
}

/* FIX §6.3: an estimate is trusted only with min_samples behind it. */
static void test_fix_min_samples(void)
{
    struct ptree t;
    make_tree(&t, 200, 3, 0);
    int32_t s = S1, pos = 0;
    struct ptree_estimate e;
    insert1(&t, 1, S1, 0, 100);
    CU_ASSERT_FATAL(ptree_estimate_remaining(&t, 99, &s, &pos, 1, &e) == 1);
    CU_ASSERT_DOUBLE_EQUAL(e.support, 1, 1e-12);
    CU_ASSERT_EQUAL(e.trusted, 0);
    insert1(&t, 2, S1, 0, 100);
    CU_ASSERT_FATAL(ptree_estimate_remaining(&t, 99, &s, &pos, 1, &e) == 1);
    CU_ASSERT_EQUAL(e.trusted, 0);
    CU_ASSERT_FATAL(ptree_estimate_remaining(&t, 1, &s, &pos, 1, &e) == 1);
    CU_ASSERT_DOUBLE_EQUAL(e.support, 3, 1e-12); /* 1 own + 2 global */
    CU_ASSERT_EQUAL(e.trusted, 1);
    insert1(&t, 3, S1, 0, 100);
    CU_ASSERT_FATAL(ptree_estimate_remaining(&t, 99, &s, &pos, 1, &e) == 1);
    CU_ASSERT_DOUBLE_EQUAL(e.support, 3, 1e-12);
    CU_ASSERT_EQUAL(e.trusted, 1);
    ptree_free(&t);
}

/* ---- merge ---- */

static void test_merge_reference(void)
{
    struct ptree a, b;
    make_tree(&a, 200, 1, 0);
    make_tree(&b, 200, 1, 0);
    insert1(&a, 1, S1, 500, 1500); /* remaining [1000], total 1500 */
    insert1(&b, 1, S1, 500, 3500); /* remaining [3000], total 3500 */
    insert1(&b, 2, S2, 10, 20);    /* only in b: copied */
    ptree_merge(&a, &b);
    const struct ptree_node *r = ptree_lookup(&a, 1, NULL, 0);
    CU_ASSERT_FATAL(r != NULL);
    CU_ASSERT_EQUAL(r->visits, 2);
    CU_ASSERT_DOUBLE_EQUAL(r->mean, 2500, 1e-9);
    CU_ASSERT_EQUAL(a.insertions, 3);
    int32_t s = S1;
    const struct ptree_node *n1 = ptree_lookup(&a, 1, &s, 1);
    CU_ASSERT_EQUAL(n1->visits, 2);
    CU_ASSERT_DOUBLE_EQUAL(n1->mean, 2000, 1e-9);
    CU_ASSERT_EQUAL(ptree_lookup(&a, PTREE_GLOBAL, NULL, 0)->visits, 3);
    s = S2;
    const struct ptree_node *n2 = ptree_lookup(&a, 2, &s, 1);
    CU_ASSERT_FATAL(n2 != NULL);
    CU_ASSERT_DOUBLE_EQUAL(n2->mean, 10, 1e-9);
    struct ptree_shape sh;
    ptree_shape(&a, &sh);
    CU_ASSERT_EQUAL(sh.prompts, 2);
    CU_ASSERT_EQUAL(sh.nodes, 7);
    ptree_free(&a);
    ptree_free(&b);

    /* The reference test itself: two one-trajectory trees, insertions 2. */
    make_tree(&a, 200, 1, 0);
    make_tree(&b, 200, 1, 0);
    insert1(&a, 1, S1, 500, 1500);
    insert1(&b, 1, S1, 500, 3500);
    ptree_merge(&a, &b);
    CU_ASSERT_EQUAL(ptree_lookup(&a, 1, NULL, 0)->visits, 2);
    CU_ASSERT_DOUBLE_EQUAL(ptree_lookup(&a, 1, NULL, 0)->mean, 2500, 1e-9);
    CU_ASSERT_EQUAL(a.insertions, 2);
    ptree_free(&a);
    ptree_free(&b);
}

/*
 * Window 10. a's root: 30 visits, window 121..130; b's (window 200): 10 visits,
 * 201..210. a's share ceil(10 * 30/40) = 8 newest: 123..130; b's 2: 209, 210,
 * interleaved 123 209 124 125 126 127 210 128 129 130; mean 143.1. One more insert
 * evicts the oldest (123).
 */
static void test_merge_window_shares(void)
{
    struct ptree a, b;
    make_tree(&a, 10, 1, 0);
    make_tree(&b, 200, 1, 0);
    for (int i = 1; i <= 30; i++) ptree_insert(&a, 1, NULL, NULL, 0, 100 + i);
    for (int i = 1; i <= 10; i++) ptree_insert(&b, 1, NULL, NULL, 0, 200 + i);
    ptree_merge(&a, &b);
    const struct ptree_node *r = ptree_lookup(&a, 1, NULL, 0);
    CU_ASSERT_EQUAL(r->visits, 40);
    CU_ASSERT_EQUAL(r->n, 10);
    CU_ASSERT_DOUBLE_EQUAL(r->mean, 143.1, 1e-9);
    static const float want[10] = {123, 209, 124, 125, 126, 127, 210, 128, 129, 130};
    for (int k = 0; k < 10; k++) CU_ASSERT_DOUBLE_EQUAL(sample_rem(r, k), want[k], 0);
    ptree_insert(&a, 1, NULL, NULL, 0, 1000);
    r = ptree_lookup(&a, 1, NULL, 0);
    CU_ASSERT_DOUBLE_EQUAL(r->mean, 230.8, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(sample_rem(r, 0), 209, 0);
    CU_ASSERT_DOUBLE_EQUAL(sample_rem(r, 9), 1000, 0);
    ptree_free(&a);
    ptree_free(&b);
}

/* ---- persistence ---- */

static const char *scratch(const char *name)
{
    static char buf[1024];
    const char *dir = test_scratch_dir("ptree");
    CU_ASSERT_FATAL(dir != NULL);
    snprintf(buf, sizeof buf, "%s/%s", dir, name);
    return buf;
}

static int no_temp_files(void)
{
    DIR *d = opendir(test_scratch_dir("ptree"));
    if (!d) return 0;
    int ok = 1;
    struct dirent *de;
    while ((de = readdir(d))) ok &= strstr(de->d_name, ".tmp-") == NULL;
    closedir(d);
    return ok;
}

static void test_save_load(void)
{
    char path[1024], err[1024] = "";
    snprintf(path, sizeof path, "%s", scratch("tree.h5"));
    struct ptree t, u;
    make_tree(&t, 200, 1, 0);
    insert1(&t, 5, S2, 1000, 6000); /* remaining [5000] */
    int32_t s2[2] = {S1, S3}, p2[2] = {10, 20};
    for (int i = 0; i < 250; i++) ptree_insert(&t, 6, s2, p2, 2, 100 + i); /* ring wrapped */
    ptree_insert(&t, INT64_MAX, NULL, NULL, 0, 7);
    CU_ASSERT_EQUAL_FATAL(ptree_save(&t, path, &TS, TOOLS, 2, err, sizeof err), 0);
    CU_ASSERT(no_temp_files());
    make_tree(&u, 200, 1, 0);
    insert1(&u, 77, S1, 0, 1); /* replaced by the load */
    int rc = ptree_load(&u, path, &TS, err, sizeof err);
    if (rc) fprintf(stderr, "\n%s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    int32_t s = S2;
    const struct ptree_node *a = ptree_lookup(&u, 5, &s, 1);
    const struct ptree_node *g = ptree_lookup(&u, PTREE_GLOBAL, &s, 1);
    CU_ASSERT_FATAL(a && g);
    CU_ASSERT_EQUAL(a->n, 1);
    CU_ASSERT_DOUBLE_EQUAL(sample_rem(a, 0), 5000, 0);
    CU_ASSERT_EQUAL(g->n, 1);
    CU_ASSERT_DOUBLE_EQUAL(sample_rem(g, 0), 5000, 0);
    CU_ASSERT_PTR_NULL(ptree_lookup(&u, 77, NULL, 0));
    struct ptree_shape st, su;
    ptree_shape(&t, &st);
    ptree_shape(&u, &su);
    CU_ASSERT(memcmp(&st, &su, sizeof st) == 0);
    const struct ptree_node *x = ptree_lookup(&t, 6, s2, 2), *y = ptree_lookup(&u, 6, s2, 2);
    CU_ASSERT_FATAL(x && y);
    CU_ASSERT_EQUAL(y->visits, 250);
    CU_ASSERT_EQUAL(y->n, 200);
    CU_ASSERT_DOUBLE_EQUAL(y->mean, x->mean, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(y->p90, x->p90, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(y->mean_pos, 20, 1e-9);
    int same = 1;
    for (int k = 0; k < 200; k++) same &= sample_rem(x, k) == sample_rem(y, k);
    CU_ASSERT(same);
    CU_ASSERT_PTR_NOT_NULL(ptree_lookup(&u, INT64_MAX, NULL, 0));
    CU_ASSERT_EQUAL(u.insertions, t.insertions);
    struct ptree_estimate e1, e2;
    CU_ASSERT(ptree_estimate_remaining(&t, 6, s2, p2, 2, &e1) == 1);
    CU_ASSERT(ptree_estimate_remaining(&u, 6, s2, p2, 2, &e2) == 1);
    CU_ASSERT_DOUBLE_EQUAL(e1.mean, e2.mean, 1e-9);
    /* saved again over the old file, then read into a smaller window: newest kept */
    CU_ASSERT_EQUAL(ptree_save(&u, path, &TS, TOOLS, 2, err, sizeof err), 0);
    ptree_free(&u);
    make_tree(&u, 50, 1, 0);
    CU_ASSERT_EQUAL_FATAL(ptree_load(&u, path, &TS, err, sizeof err), 0);
    y = ptree_lookup(&u, 6, s2, 2);
    CU_ASSERT_EQUAL(y->n, 50);
    CU_ASSERT_EQUAL(y->visits, 250);
    CU_ASSERT_DOUBLE_EQUAL(y->mean, (280 + 329) / 2.0, 1e-9); /* totals 300..349, minus 20 */
    ptree_free(&u);
    ptree_free(&t);
}

/* Edits of a saved file through HDF5. */
enum damage { D_FORMAT, D_PARENT, D_NAN, D_VERSION, D_N, D_VISITS, D_DUP_ROOT, D_MISSING_POS };

static void damage_file(const char *path, enum damage what)
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    hid_t g = H5Gopen2(f, "tree", H5P_DEFAULT);
    CU_ASSERT_FATAL(g >= 0);
    if (what == D_FORMAT || what == D_VERSION) {
        const char *name = what == D_FORMAT ? "format" : "version";
        CU_ASSERT_FATAL(H5Adelete(g, name) >= 0);
        hid_t sp = H5Screate(H5S_SCALAR);
        if (what == D_FORMAT) {
            hid_t ty = H5Tcopy(H5T_C_S1);
            H5Tset_size(ty, H5T_VARIABLE);
            const char *v = "something-else";
            hid_t a = H5Acreate2(g, name, ty, sp, H5P_DEFAULT, H5P_DEFAULT);
            CU_ASSERT(H5Awrite(a, ty, &v) >= 0);
            H5Aclose(a);
            H5Tclose(ty);
        } else {
            int64_t v = 99;
            hid_t a = H5Acreate2(g, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
            CU_ASSERT(H5Awrite(a, H5T_NATIVE_INT64, &v) >= 0);
            H5Aclose(a);
        }
        H5Sclose(sp);
    } else if (what == D_PARENT || what == D_N || what == D_VISITS || what == D_DUP_ROOT) {
        /* read-modify-write one column through a one-member memory type */
        const char *col = what == D_PARENT ? "parent"
                          : what == D_N    ? "n"
                          : what == D_VISITS ? "visits"
                                             : "prompt_id";
        hid_t d = H5Dopen2(g, "nodes", H5P_DEFAULT);
        hid_t mt = H5Tcreate(H5T_COMPOUND, sizeof(int64_t));
        H5Tinsert(mt, col, 0, H5T_NATIVE_INT64);
        hid_t sp = H5Dget_space(d);
        hsize_t n;
        H5Sget_simple_extent_dims(sp, &n, NULL);
        int64_t *v = calloc(n, sizeof *v);
        CU_ASSERT_FATAL(H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
        if (what == D_PARENT)
            v[n - 1] = (int64_t)n + 5; /* the last row's parent: out of range */
        else if (what == D_N)
            v[n - 1] -= 1; /* leaves a sample no row claims */
        else if (what == D_VISITS)
            v[n - 1] = INT64_MAX; /* more visits than insertions */
        else
            for (hsize_t i = 0; i < n; i++)
                if (v[i] == 6) v[i] = 5; /* prompt 6's rows become a second prompt 5 */
        CU_ASSERT(H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
        free(v);
        H5Sclose(sp);
        H5Tclose(mt);
        H5Dclose(d);
    } else if (what == D_NAN) {
        hid_t d = H5Dopen2(g, "rem", H5P_DEFAULT);
        hid_t sp = H5Dget_space(d);
        hsize_t n;
        H5Sget_simple_extent_dims(sp, &n, NULL);
        float *v = calloc(n, sizeof *v);
        CU_ASSERT_FATAL(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
        v[n / 2] = NAN;
        CU_ASSERT(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
        free(v);
        H5Sclose(sp);
        H5Dclose(d);
    } else if (what == D_MISSING_POS) {
        CU_ASSERT(H5Ldelete(g, "pos", H5P_DEFAULT) >= 0);
    }
    H5Gclose(g);
    H5Fclose(f);
}

/* Saves a small tree at path. */
static void save_small(const char *path)
{
    struct ptree t;
    char err[512];
    make_tree(&t, 200, 1, 0);
    insert1(&t, 5, S2, 1000, 6000);
    int32_t s2[2] = {S1, S3}, p2[2] = {10, 20};
    for (int i = 0; i < 3; i++) ptree_insert(&t, 6, s2, p2, 2, 100 + i);
    CU_ASSERT_EQUAL_FATAL(ptree_save(&t, path, &TS, TOOLS, 2, err, sizeof err), 0);
    ptree_free(&t);
}

/* Loads path into a tree holding one trajectory of prompt 77: -1, a message naming
 * the file and containing want, and the tree unchanged. */
static void expect_refused(const char *path, const struct tool_state_config *ts,
                           const char *want)
{
    struct ptree u;
    char err[1024] = "";
    make_tree(&u, 200, 1, 0);
    insert1(&u, 77, S1, 0, 1);
    CU_ASSERT_EQUAL(ptree_load(&u, path, ts, err, sizeof err), -1);
    CU_ASSERT(strstr(err, path) != NULL);
    int found = strstr(err, want) != NULL;
    CU_ASSERT(found);
    if (!found) fprintf(stderr, "\nexpected [%.200s] in: %s\n", want, err);
    CU_ASSERT_PTR_NOT_NULL(ptree_lookup(&u, 77, NULL, 0));
    CU_ASSERT_EQUAL(u.insertions, 1);
    ptree_free(&u);
}

static void test_load_damaged(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s", scratch("small.h5"));

    save_small(path); /* wrong thresholds */
    struct tool_state_config other = {400, 1600};
    expect_refused(path, &other, "tree built with payload thresholds 500/5000, this run uses "
                                 "400/1600");

    static const struct {
        enum damage what;
        const char *want;
    } cases[] = {
        {D_FORMAT, "format is 'something-else'"},
        {D_VERSION, "version 99"},
        {D_PARENT, "is not an earlier row"},
        {D_NAN, "must be finite"},
        {D_N, "samples in all"},
        {D_VISITS, "n <= visits <= insertions"},
        {D_DUP_ROOT, "repeats a prompt's root"},
        {D_MISSING_POS, "/tree/pos is missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        save_small(path);
        damage_file(path, cases[i].what);
        expect_refused(path, &TS, cases[i].want);
    }

    /* truncated: the first half of a valid file */
    save_small(path);
    char cut[1024];
    snprintf(cut, sizeof cut, "%s", scratch("cut.h5"));
    FILE *in = fopen(path, "rb"), *out = fopen(cut, "wb");
    CU_ASSERT_FATAL(in && out);
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf, in);
    CU_ASSERT_FATAL(n > 1000 && n < sizeof buf);
    CU_ASSERT(fwrite(buf, 1, n / 2, out) == n / 2);
    fclose(in);
    fclose(out);
    expect_refused(cut, &TS, "");

    /* not HDF5 at all, and a missing file */
    out = fopen(cut, "wb");
    fputs("{\"version\": 2}\n", out);
    fclose(out);
    expect_refused(cut, &TS, "");
    unlink(cut);
    expect_refused(cut, &TS, "No such file");
}

static void test_save_failures(void)
{
    char path[1024], err[1024] = "";
    snprintf(path, sizeof path, "%s", scratch("keep.h5"));
    save_small(path);
    struct stat before, after;
    CU_ASSERT_FATAL(stat(path, &before) == 0);
    struct ptree t;
    make_tree(&t, 200, 1, 0);
    insert1(&t, 1, S1, 0, 10);
    struct tool_state_config bad = {500, 10};
    /* a save that fails leaves the existing file and no temporary */
    CU_ASSERT_EQUAL(ptree_save(&t, path, &bad, TOOLS, 2, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "payload_large") != NULL);
    CU_ASSERT(no_temp_files());
    CU_ASSERT_FATAL(stat(path, &after) == 0);
    CU_ASSERT_EQUAL(before.st_ino, after.st_ino);
    CU_ASSERT_EQUAL(before.st_size, after.st_size);
    struct ptree u;
    make_tree(&u, 200, 1, 0);
    CU_ASSERT_EQUAL(ptree_load(&u, path, &TS, err, sizeof err), 0);
    CU_ASSERT_PTR_NOT_NULL(ptree_lookup(&u, 6, NULL, 0));
    ptree_free(&u);
    /* a directory that does not exist */
    char nodir[1100];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir/tree.h5", test_scratch_dir("ptree"));
    err[0] = '\0';
    CU_ASSERT_EQUAL(ptree_save(&t, nodir, &TS, TOOLS, 2, err, sizeof err), -1);
    CU_ASSERT(strlen(err) > 0);
    ptree_free(&t);
}

/* ptree_write_h5 into a caller's file, next to other content. */
static void test_write_group(void)
{
    char path[1024], err[1024] = "";
    snprintf(path, sizeof path, "%s", scratch("group.h5"));
    struct ptree t;
    make_tree(&t, 200, 1, 0);
    insert1(&t, 3, S1, 10, 30);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CU_ASSERT_FATAL(f >= 0);
    CU_ASSERT_EQUAL(ptree_write_h5(&t, f, "sched_tree", &TS, TOOLS, 2, err, sizeof err), 0);
    CU_ASSERT_EQUAL(ptree_write_h5(&t, f, "sched_tree", &TS, TOOLS, 2, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "exists") != NULL);
    /* the key column */
    hid_t d = H5Dopen2(f, "sched_tree/nodes", H5P_DEFAULT);
    CU_ASSERT_FATAL(d >= 0);
    hid_t st = H5Tcopy(H5T_C_S1);
    H5Tset_size(st, 64);
    hid_t mt = H5Tcreate(H5T_COMPOUND, 64);
    H5Tinsert(mt, "key", 0, st);
    char keys[5][64];
    CU_ASSERT_EQUAL(H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, keys), 0);
    CU_ASSERT_STRING_EQUAL(keys[0], "root");
    CU_ASSERT_STRING_EQUAL(keys[2], "calc:small:success");
    H5Tclose(mt);
    H5Tclose(st);
    H5Dclose(d);
    H5Fclose(f);
    ptree_free(&t);
}

int main(void)
{
    static const struct test_case states[] = {
        {"size classes at the thresholds (500/5000, 400/1600)", test_state_sizes},
        {"codes: unique, decode round trip, invalid -> -1", test_state_codes},
        {"names tool:size:status", test_state_names},
        {"config check rejects small < 0 and large < small", test_state_config_check},
        {NULL, NULL}};
    static const struct test_case tree[] = {
        {"config check", test_config_check},
        {"lookup depths 0/1/2, unknown prompt", test_lookup_depths},
        {"unseen prompt: global depth-1 node, mean 8000", test_unseen_prompt_global},
        {"p90 = numpy linear percentile", test_p90_numpy},
        {"clear then 10 prompts: shape", test_rebuild_prompts},
        {"3000 prompts: map growth", test_many_prompts},
        {"FIX deeper global match beats a diverged prompt", test_fix_deeper_global},
        {"FIX a root is never a remaining length", test_fix_no_root},
        {"FIX progress since the matched depth subtracted", test_fix_progress},
        {"FIX mean and p90 over one window", test_fix_one_window},
        {"FIX shrinkage toward global / parent", test_fix_shrinkage},
        {"FIX trusted only at min_samples", test_fix_min_samples},
        {"merge: reference numbers, copied prompts", test_merge_reference},
        {"merge: window shares by visits", test_merge_window_shares},
        {NULL, NULL}};
    static const struct test_case io[] = {
        {"save/load round trip", test_save_load},
        {"damaged files refused with a message", test_load_damaged},
        {"failed save keeps the old file", test_save_failures},
        {"write into a caller's file", test_write_group},
        {NULL, NULL}};
    static const struct test_suite suites[] = {
        {"tool_state", states}, {"ptree", tree}, {"ptree_io", io}, {NULL, NULL}};
    return test_main(suites);
}
