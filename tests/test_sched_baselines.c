/*
 * Tests of the scheduler's shared routing machinery (src/sched/route.c) and the
 * three baseline policies (load_balance, length_aware, la_mlfq). The route.c
 * suite fills a struct sched by hand; the policy suites go through the public API
 * (sched_init with a hand-built sched_config, sched_route, sched_finish,
 * sched_step_end, sched_take_migrations). The reference behaviours of cmlfq.md §4
 * are reproduced, and several tests fail on the reference's defects: ties that
 * always take the first instance (§6.9), fallback in config order (§6.8), weights
 * ignored (§6.16), la_mlfq demotion that never re-routes and a scout identified by
 * (prompt, instance) (§6.16).
 */
#include "libra/sched.h"
#include "sched/sched_internal.h"
#include "testutil.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- fixtures ---- */

static void cfg_base(struct sched_config *c, const char *type, const char *balance)
{
    memset(c, 0, sizeof *c);
    snprintf(c->type, sizeof c->type, "%s", type);
    snprintf(c->balance, sizeof c->balance, "%s", balance);
    for (int k = 0; k < 4; k++) c->weights[k] = 1.0;
    c->fallback = 1;
    c->scout_timeout_s = 30;
    c->history_ttl = 5;
}

/* Appends a bucket: name, max_tokens, then n_tp TP degrees. */
static void cfg_bucket(struct sched_config *c, const char *name, int max_tokens, int n_tp, ...)
{
    struct sched_bucket_spec *b = &c->buckets[c->n_buckets++];
    snprintf(b->name, sizeof b->name, "%s", name);
    b->max_tokens = max_tokens;
    b->n_tp = n_tp;
    va_list ap;
    va_start(ap, n_tp);
    for (int k = 0; k < n_tp; k++) b->tp[k] = va_arg(ap, int);
    va_end(ap);
}

/* n idle instances with the given TP degrees and KV capacity 1000 each. */
static void mk_inst(struct sched_instance *in, int n, const int *tp)
{
    for (int i = 0; i < n; i++) {
        memset(&in[i], 0, sizeof in[i]);
        in[i].leader = i + 1;
        in[i].tp = tp[i];
        in[i].capacity = 1000;
        in[i].queued = in[i].running = -1;
        in[i].kv_frac = -1;
    }
}

static struct sched_turn mk_turn(int64_t traj, int64_t prompt, int turn, int ctx, int gen, int prev,
                                 int n_samples)
{
    struct sched_turn t = {.traj_id = traj, .prompt_id = prompt, .turn = turn,
                           .ctx_tokens = ctx, .gen_tokens = gen, .budget = 512, .prev = prev,
                           .sample = 0, .n_samples = n_samples, .eval = 0};
    return t;
}

static int open_sched(struct sched *s, const struct sched_config *c)
{
    char err[256] = "";
    int rc = sched_init(s, c, NULL, NULL, 0, err, sizeof err);
    if (rc != 0) fprintf(stderr, "sched_init: %s\n", err);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    return rc;
}

static struct sched_decision route(struct sched *s, struct sched_turn t, struct sched_instance *in,
                                   int n, double now)
{
    struct sched_decision d;
    sched_route(s, &t, in, n, now, &d);
    return d;
}

/* A hand-filled scheduler for route.c (no sched_init): buckets from c. */
static void hand_sched(struct sched *s, const struct sched_config *c)
{
    memset(s, 0, sizeof *s);
    s->cfg = *c;
    s->n_bucket = c->n_buckets;
    for (int b = 0; b < c->n_buckets; b++) {
        snprintf(s->bucket[b].name, sizeof s->bucket[b].name, "%s", c->buckets[b].name);
        s->bucket[b].n_tp = c->buckets[b].n_tp;
        memcpy(s->bucket[b].tp, c->buckets[b].tp, sizeof s->bucket[b].tp);
        s->bucket[b].max_tokens = c->buckets[b].max_tokens;
    }
}

/* ---- route.c ---- */

static void test_bucket_for(void)
{
    struct sched_config c;
    cfg_base(&c, "length_aware", "kv");
    cfg_bucket(&c, "short", 1000, 1, 1);
    cfg_bucket(&c, "medium", 3000, 1, 2);
    cfg_bucket(&c, "long", 6000, 1, 4);
    cfg_bucket(&c, "extra_long", 15000, 1, 8);
    struct sched s;
    hand_sched(&s, &c);
    CU_ASSERT_EQUAL(sched_bucket_for(&s, 500), 0);
    CU_ASSERT_EQUAL(sched_bucket_for(&s, 1000), 0);
    CU_ASSERT_EQUAL(sched_bucket_for(&s, 1001), 1);
    CU_ASSERT_EQUAL(sched_bucket_for(&s, 3000), 1);
    CU_ASSERT_EQUAL(sched_bucket_for(&s, 5000), 2);
    CU_ASSERT_EQUAL(sched_bucket_for(&s, 6000), 2);
    CU_ASSERT_EQUAL(sched_bucket_for(&s, 10000), 3);
    CU_ASSERT_EQUAL(sched_bucket_for(&s, 1e9), 3); /* beyond every bucket: the last */
    CU_ASSERT_EQUAL(sched_bucket_has_tp(&s, 2, 4), 1);
    CU_ASSERT_EQUAL(sched_bucket_has_tp(&s, 2, 2), 0);
    CU_ASSERT_EQUAL(sched_bucket_has_tp(&s, 7, 4), 0);
    CU_ASSERT_EQUAL(sched_bucket_has_tp(&s, -1, 4), 0);
}

/* Fallback: the nearest bucket first, the larger on a tie (§6.8: the reference gives
 * long -> [1, 2] and keeps duplicates). One instance per TP 1, 2, 4; the bucket's own
 * class over the cap. */
static void test_fallback_order(void)
{
    struct sched_config c;
    cfg_base(&c, "length_aware", "kv");
    c.max_load = 0.5;
    cfg_bucket(&c, "short", 1000, 1, 1);
    cfg_bucket(&c, "medium", 3000, 1, 2);
    cfg_bucket(&c, "long", 6000, 1, 4);
    struct sched s;
    hand_sched(&s, &c);
    const int tp[3] = {1, 2, 4};
    struct sched_instance in[3];
    int via;
    mk_inst(in, 3, tp);
    in[1].load = 900; /* medium full: long (the larger) before short on the tie */
    CU_ASSERT_EQUAL(sched_route_bucket(&s, 1, in, 3, &via), 2);
    CU_ASSERT_EQUAL(via, SCHED_VIA_FALLBACK);
    mk_inst(in, 3, tp);
    in[0].load = 900; /* short full: medium (nearest) before long */
    CU_ASSERT_EQUAL(sched_route_bucket(&s, 0, in, 3, &via), 1);
    in[1].load = 900; /* and long after it */
    CU_ASSERT_EQUAL(sched_route_bucket(&s, 0, in, 3, &via), 2);
    CU_ASSERT_EQUAL(via, SCHED_VIA_FALLBACK);
}

/* A bucket's TP classes share its turns by load: one TP-4 among three TP-8s in the
 * long bucket [4, 8] takes its share, not every turn (in order, the TP-4 took all
 * turns until half full while the TP-8s idled: the 512-GPU regression). The same for
 * a fallback bucket's classes. */
static void test_bucket_classes_share(void)
{
    struct sched_config c;
    cfg_base(&c, "length_aware", "kv");
    c.max_load = 0.5;
    cfg_bucket(&c, "short", 1000, 1, 1);
    cfg_bucket(&c, "long", 6000, 2, 4, 8);
    struct sched s;
    hand_sched(&s, &c);
    const int tp[4] = {8, 8, 4, 8};
    struct sched_instance in[4];
    mk_inst(in, 4, tp);
    int count[4] = {0}, via;
    for (int k = 0; k < 40; k++) {
        int i = sched_route_bucket(&s, 1, in, 4, &via);
        CU_ASSERT_EQUAL(via, SCHED_VIA_PREFERRED);
        count[i]++;
        in[i].load += 10; /* equal capacities: equal shares */
    }
    CU_ASSERT(count[0] == 10 && count[1] == 10 && count[2] == 10 && count[3] == 10);
    /* short's own TP1 is absent: its turns share the long bucket's classes */
    mk_inst(in, 4, tp);
    memset(count, 0, sizeof count);
    for (int k = 0; k < 40; k++) {
        int i = sched_route_bucket(&s, 0, in, 4, &via);
        CU_ASSERT_EQUAL(via, SCHED_VIA_FALLBACK);
        count[i]++;
        in[i].load += 10;
    }
    CU_ASSERT(count[0] == 10 && count[1] == 10 && count[2] == 10 && count[3] == 10);
}

static void test_pick_kv_cap(void)
{
    struct sched_config c;
    cfg_base(&c, "load_balance", "kv");
    struct sched s;
    hand_sched(&s, &c);
    const int tp[4] = {1, 1, 2, 2};
    struct sched_instance in[4];
    mk_inst(in, 4, tp);
    in[0].load = 300;
    in[1].load = 260;
    in[2].load = 900;
    in[3].capacity = 4000;
    in[3].load = 1000; /* 0.25 normalised: least loaded though the most tokens */
    CU_ASSERT_EQUAL(sched_pick(&s, in, 4, 0, 1), 3);
    CU_ASSERT_EQUAL(sched_pick(&s, in, 4, 1, 1), 1);
    CU_ASSERT_EQUAL(sched_pick(&s, in, 4, 8, 1), -1);
    s.cfg.max_load = 0.5;
    in[3].load = 3000; /* 0.75 */
    CU_ASSERT_EQUAL(sched_pick(&s, in, 4, 2, 1), -1); /* both TP2 over the cap */
    CU_ASSERT_EQUAL(sched_pick(&s, in, 4, 2, 0), 3);  /* uncapped: the lesser */
    in[1].load = 500;                                 /* exactly at the cap: excluded */
    CU_ASSERT_EQUAL(sched_pick(&s, in, 4, 1, 1), 0);
    in[0].capacity = 0; /* unknown capacity: the raw load */
    CU_ASSERT_DOUBLE_EQUAL(sched_norm_load(&in[0]), 300, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(sched_norm_load(&in[1]), 0.5, 1e-12);
}

/* Equal loads rotate over the instances for every balance (reference: the first). */
static void test_pick_rotation(void)
{
    const char *bal[3] = {"kv", "connections", "weighted"};
    for (int k = 0; k < 3; k++) {
        struct sched_config c;
        cfg_base(&c, "length_aware", bal[k]);
        struct sched s;
        hand_sched(&s, &c);
        const int tp[5] = {1, 2, 1, 2, 1};
        struct sched_instance in[5];
        mk_inst(in, 5, tp);
        CU_ASSERT_EQUAL(sched_pick(&s, in, 5, 1, 1), 0);
        CU_ASSERT_EQUAL(sched_pick(&s, in, 5, 1, 1), 2);
        CU_ASSERT_EQUAL(sched_pick(&s, in, 5, 1, 1), 4);
        CU_ASSERT_EQUAL(sched_pick(&s, in, 5, 1, 1), 0);
        CU_ASSERT_EQUAL(sched_pick(&s, in, 5, 2, 1), 1);
    }
}

/* balance = weighted: turns / weight of the TP (reference: weights never read). */
static void test_pick_weighted(void)
{
    struct sched_config c;
    cfg_base(&c, "load_balance", "weighted");
    c.weights[1] = 4.0; /* TP2 counts four times */
    struct sched s;
    hand_sched(&s, &c);
    const int tp[2] = {1, 2};
    struct sched_instance in[2];
    mk_inst(in, 2, tp);
    in[0].n_turns = 1;
    in[1].n_turns = 3; /* 0.75 < 1 */
    CU_ASSERT_EQUAL(sched_pick(&s, in, 2, 0, 1), 1);
    in[1].n_turns = 5; /* 1.25 > 1 */
    CU_ASSERT_EQUAL(sched_pick(&s, in, 2, 0, 1), 0);
    s.cfg.weights[1] = 0; /* a non-positive weight does not divide by zero */
    in[0].n_turns = 0;
    in[1].n_turns = 0;
    int i = sched_pick(&s, in, 2, 0, 1);
    CU_ASSERT(i == 0 || i == 1);
}

static void test_pick_round_robin(void)
{
    struct sched_config c;
    cfg_base(&c, "load_balance", "round_robin");
    struct sched s;
    hand_sched(&s, &c);
    const int tp[4] = {2, 2, 4, 2};
    struct sched_instance in[4];
    mk_inst(in, 4, tp);
    in[0].n_turns = 9; /* round robin ignores load */
    int seen[4] = {0};
    for (int k = 0; k < 8; k++) {
        int i = sched_pick(&s, in, 4, 0, 1);
        CU_ASSERT_EQUAL(i, k % 4);
        if (i >= 0 && i < 4) seen[i]++;
    }
    CU_ASSERT(seen[0] == 2 && seen[1] == 2 && seen[2] == 2 && seen[3] == 2);
    s.rr = 0;
    CU_ASSERT_EQUAL(sched_pick(&s, in, 4, 2, 1), 0); /* candidates 0, 1, 3 */
    CU_ASSERT_EQUAL(sched_pick(&s, in, 4, 2, 1), 1);
    CU_ASSERT_EQUAL(sched_pick(&s, in, 4, 2, 1), 3);
    s.cfg.max_load = 0.5;
    in[1].load = 800;
    s.rr = 0;
    CU_ASSERT_EQUAL(sched_pick(&s, in, 4, 2, 1), 0); /* candidates 0, 3 */
    CU_ASSERT_EQUAL(sched_pick(&s, in, 4, 2, 1), 3);
    CU_ASSERT_EQUAL(sched_pick(&s, in, 4, 8, 1), -1);
}

/* preferred -> fallback (nearest first) -> global ignoring the cap. */
static void test_route_chain(void)
{
    struct sched_config c;
    cfg_base(&c, "length_aware", "kv");
    c.max_load = 0.5;
    cfg_bucket(&c, "short", 1000, 1, 1);
    cfg_bucket(&c, "medium", 3000, 1, 2);
    cfg_bucket(&c, "long", 6000, 1, 4);
    struct sched s;
    hand_sched(&s, &c);
    const int tp[3] = {1, 2, 4};
    struct sched_instance in[3];
    mk_inst(in, 3, tp);
    int via = -1;
    CU_ASSERT_EQUAL(sched_route_bucket(&s, 2, in, 3, &via), 2);
    CU_ASSERT_EQUAL(via, SCHED_VIA_PREFERRED);
    in[2].load = 900; /* TP4 over the cap: medium's TP2 before short's TP1 */
    CU_ASSERT_EQUAL(sched_route_bucket(&s, 2, in, 3, &via), 1);
    CU_ASSERT_EQUAL(via, SCHED_VIA_FALLBACK);
    in[1].load = 600;
    CU_ASSERT_EQUAL(sched_route_bucket(&s, 2, in, 3, &via), 0);
    CU_ASSERT_EQUAL(via, SCHED_VIA_FALLBACK);
    in[0].load = 700; /* all over the cap: the least loaded anywhere */
    CU_ASSERT_EQUAL(sched_route_bucket(&s, 2, in, 3, &via), 1);
    CU_ASSERT_EQUAL(via, SCHED_VIA_GLOBAL);
    s.cfg.fallback = 0;
    in[0].load = 0; /* TP1 free, but fallback is off */
    CU_ASSERT_EQUAL(sched_route_bucket(&s, 2, in, 3, &via), 0);
    CU_ASSERT_EQUAL(via, SCHED_VIA_GLOBAL);
    CU_ASSERT_EQUAL(sched_route_bucket(&s, 99, in, 3, &via), 0); /* bad bucket: the first */
    CU_ASSERT_EQUAL(via, SCHED_VIA_PREFERRED);
}

static void test_keep_prev(void)
{
    struct sched_config c;
    cfg_base(&c, "load_balance", "kv");
    struct sched s;
    hand_sched(&s, &c);
    const int tp[2] = {1, 1};
    struct sched_instance in[2];
    mk_inst(in, 2, tp);
    in[0].load = 150;
    in[1].load = 100;
    CU_ASSERT_EQUAL(sched_keep_prev(&s, 0, 1, in, 2), 1); /* 0.15 <= 0.10 + 0.10 */
    in[0].load = 250;
    CU_ASSERT_EQUAL(sched_keep_prev(&s, 0, 1, in, 2), 0);
    CU_ASSERT_EQUAL(sched_keep_prev(&s, 0, 0, in, 2), 1);
    CU_ASSERT_EQUAL(sched_keep_prev(&s, -1, 1, in, 2), 0);
    CU_ASSERT_EQUAL(sched_keep_prev(&s, 2, 1, in, 2), 0); /* instance gone */
}

static void test_log_migration(void)
{
    struct sched_config c;
    cfg_base(&c, "cmlfq", "kv");
    struct sched s;
    hand_sched(&s, &c);
    for (int k = 0; k < 40; k++) { /* grows past the first allocation */
        struct sched_migration m = {.traj_id = k, .why = k % SCHED_MIG_COUNT};
        sched_log_migration(&s, &m);
    }
    CU_ASSERT_EQUAL(s.n_mig, 40);
    CU_ASSERT_EQUAL(s.mig[39].traj_id, 39);
    /* k % 7: causal, tokens, threshold (6 each) and return (5) move; cost, limit (6
     * each) declined; same_tp (5) neither */
    CU_ASSERT_EQUAL(s.stats.migrations, 23);
    CU_ASSERT_EQUAL(s.step.migrations, 23);
    CU_ASSERT_EQUAL(s.stats.declined, 12);
    CU_ASSERT_EQUAL(s.step.declined, 12);
    free(s.mig);
}

/* load_balance ignores buckets, but the scheduler's config always has some. */
static void lb_cfg(struct sched_config *c, const char *balance)
{
    cfg_base(c, "load_balance", balance);
    cfg_bucket(c, "short", 5000, 2, 1, 2);
    cfg_bucket(c, "long", 50000, 2, 4, 8);
}

/* ---- load_balance ---- */

static void test_lb_rotation(void)
{
    struct sched_config c;
    lb_cfg(&c, "connections");
    struct sched s;
    open_sched(&s, &c);
    const int tp[8] = {2, 2, 2, 2, 2, 2, 2, 2};
    struct sched_instance in[8];
    mk_inst(in, 8, tp);
    /* immediate completion: 0..7, 0..7 */
    for (int k = 0; k < 16; k++) {
        struct sched_decision d = route(&s, mk_turn(k, k, 0, 100, 0, -1, 1), in, 8, 0);
        CU_ASSERT_EQUAL(d.instance, k % 8);
        CU_ASSERT_EQUAL(d.bucket, -1);
        CU_ASSERT_EQUAL(d.est_remaining, -1);
        CU_ASSERT_EQUAL(d.reason, SCHED_R_INITIAL);
        CU_ASSERT_EQUAL(d.via, SCHED_VIA_PREFERRED);
        sched_finish(&s, k, 10, 1);
    }
    sched_free(&s);

    /* two concurrent waves of 4: [0..3] then [4..7] */
    open_sched(&s, &c);
    mk_inst(in, 8, tp);
    for (int k = 0; k < 8; k++) {
        struct sched_decision d = route(&s, mk_turn(100 + k, k, 0, 100, 0, -1, 1), in, 8, 0);
        CU_ASSERT_EQUAL(d.instance, k);
        if (d.instance >= 0 && d.instance < 8) in[d.instance].n_turns++;
    }
    CU_ASSERT_EQUAL(s.stats.routes[SCHED_R_INITIAL], 8);
    sched_free(&s);
}

static void test_lb_round_robin_cap(void)
{
    struct sched_config c;
    lb_cfg(&c, "round_robin");
    struct sched s;
    open_sched(&s, &c);
    const int tp[4] = {1, 2, 4, 8};
    struct sched_instance in[4];
    mk_inst(in, 4, tp);
    int seen[4] = {0};
    for (int k = 0; k < 4; k++) {
        struct sched_decision d = route(&s, mk_turn(k, k, 0, 100, 0, -1, 1), in, 4, 0);
        CU_ASSERT_FATAL(d.instance >= 0 && d.instance < 4);
        seen[d.instance]++;
        CU_ASSERT_EQUAL(d.bucket, -1);
    }
    CU_ASSERT(seen[0] == 1 && seen[1] == 1 && seen[2] == 1 && seen[3] == 1);
    sched_free(&s);

    /* every instance over the cap: the least loaded anyway, via global */
    lb_cfg(&c, "kv");
    c.max_load = 0.5;
    open_sched(&s, &c);
    for (int i = 0; i < 4; i++) in[i].load = 900 - 10 * i;
    struct sched_decision d = route(&s, mk_turn(1, 1, 0, 100, 0, -1, 1), in, 4, 0);
    CU_ASSERT_EQUAL(d.instance, 3);
    CU_ASSERT_EQUAL(d.via, SCHED_VIA_GLOBAL);
    sched_free(&s);
}

/* weights from the config decide (reference: ignored, least connections). */
static void test_lb_weighted(void)
{
    struct sched_config c;
    lb_cfg(&c, "weighted");
    c.weights[0] = 1;
    c.weights[2] = 4; /* TP4 takes four times the turns of TP1 */
    struct sched s;
    open_sched(&s, &c);
    const int tp[2] = {1, 4};
    struct sched_instance in[2];
    mk_inst(in, 2, tp);
    int on4 = 0;
    for (int k = 0; k < 10; k++) {
        struct sched_decision d = route(&s, mk_turn(k, k, 0, 100, 0, -1, 1), in, 2, 0);
        CU_ASSERT_FATAL(d.instance == 0 || d.instance == 1);
        in[d.instance].n_turns++;
        on4 += d.instance == 1;
    }
    CU_ASSERT_EQUAL(on4, 8);
    CU_ASSERT_EQUAL(in[0].n_turns, 2);
    sched_free(&s);
}

static void test_lb_affinity(void)
{
    struct sched_config c;
    lb_cfg(&c, "kv");
    c.affinity = 1;
    struct sched s;
    open_sched(&s, &c);
    const int tp[2] = {2, 2};
    struct sched_instance in[2];
    mk_inst(in, 2, tp);
    in[0].load = 50;
    in[1].load = 0;
    struct sched_decision d = route(&s, mk_turn(7, 7, 1, 500, 100, 0, 1), in, 2, 0);
    CU_ASSERT_EQUAL(d.instance, 0);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_STICKY);
    in[0].load = 300; /* 0.3 > 0 + 0.1 */
    d = route(&s, mk_turn(7, 7, 2, 800, 200, 0, 1), in, 2, 0);
    CU_ASSERT_EQUAL(d.instance, 1);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_PER_TURN);
    d = route(&s, mk_turn(7, 7, 3, 900, 300, -1, 1), in, 2, 0);
    CU_ASSERT_EQUAL(d.instance, 1);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_REROUTE);
    sched_free(&s);

    c.affinity = 0; /* no affinity: each turn on its own */
    open_sched(&s, &c);
    in[0].load = 50;
    d = route(&s, mk_turn(8, 8, 1, 500, 100, 0, 1), in, 2, 0);
    CU_ASSERT_EQUAL(d.instance, 1);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_PER_TURN);
    sched_free(&s);
}

/* ---- length_aware ---- */

static void length_cfg(struct sched_config *c)
{
    cfg_base(c, "length_aware", "connections");
    cfg_bucket(c, "short", 1000, 1, 1);
    cfg_bucket(c, "medium", 3000, 1, 2);
    cfg_bucket(c, "long", 6000, 1, 4);
    cfg_bucket(c, "extra_long", 15000, 1, 8);
}

static void test_length_categories(void)
{
    struct sched_config c;
    length_cfg(&c);
    struct sched s;
    open_sched(&s, &c);
    const int tp[4] = {1, 2, 4, 8};
    struct sched_instance in[4];
    mk_inst(in, 4, tp);
    const int ctx[7] = {500, 1000, 1001, 3000, 5000, 6000, 10000};
    const int want[7] = {0, 0, 1, 1, 2, 2, 3};
    for (int k = 0; k < 7; k++) {
        struct sched_decision d = route(&s, mk_turn(k, k, 0, ctx[k], 0, -1, 1), in, 4, 0);
        CU_ASSERT_EQUAL(d.bucket, want[k]);
        CU_ASSERT_EQUAL(d.instance, want[k]); /* short TP1, medium TP2, long TP4, xl TP8 */
        CU_ASSERT_EQUAL(d.via, SCHED_VIA_PREFERRED);
        CU_ASSERT_EQUAL(d.reason, SCHED_R_INITIAL);
        CU_ASSERT_EQUAL(d.est_remaining, -1);
    }
    /* each turn by its own context: a later, longer turn moves to a longer bucket */
    struct sched_decision d = route(&s, mk_turn(0, 0, 1, 2500, 300, 0, 1), in, 4, 0);
    CU_ASSERT_EQUAL(d.bucket, 1);
    CU_ASSERT_EQUAL(d.instance, 1);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_PER_TURN);
    sched_free(&s);
}

static void test_length_fallback(void)
{
    struct sched_config c;
    length_cfg(&c);
    struct sched s;
    open_sched(&s, &c);
    /* only a TP2 instance: a short request falls back to it */
    const int tp1[1] = {2};
    struct sched_instance one[1];
    mk_inst(one, 1, tp1);
    struct sched_decision d = route(&s, mk_turn(1, 1, 0, 300, 0, -1, 1), one, 1, 0);
    CU_ASSERT_EQUAL(d.instance, 0);
    CU_ASSERT_EQUAL(d.bucket, 0);
    CU_ASSERT_EQUAL(d.via, SCHED_VIA_FALLBACK);

    /* no TP4: long goes to medium's TP2 before short's TP1 (reference: TP1 first) */
    const int tp2[2] = {1, 2};
    struct sched_instance two[2];
    mk_inst(two, 2, tp2);
    d = route(&s, mk_turn(2, 2, 0, 5000, 0, -1, 1), two, 2, 0);
    CU_ASSERT_EQUAL(d.bucket, 2);
    CU_ASSERT_EQUAL(d.instance, 1);
    CU_ASSERT_EQUAL(d.via, SCHED_VIA_FALLBACK);
    sched_free(&s);

    /* fallback off: the global choice */
    c.fallback = 0;
    open_sched(&s, &c);
    d = route(&s, mk_turn(3, 3, 0, 300, 0, -1, 1), one, 1, 0);
    CU_ASSERT_EQUAL(d.instance, 0);
    CU_ASSERT_EQUAL(d.via, SCHED_VIA_GLOBAL);
    sched_free(&s);
}

/* Two short requests go to two TP1 instances, with or without the load counted
 * (reference: ties always take the first instance). */
static void test_length_rotation(void)
{
    struct sched_config c;
    length_cfg(&c);
    const char *bal[2] = {"kv", "connections"};
    for (int k = 0; k < 2; k++) {
        snprintf(c.balance, sizeof c.balance, "%s", bal[k]);
        struct sched s;
        open_sched(&s, &c);
        const int tp[3] = {1, 2, 1};
        struct sched_instance in[3];
        mk_inst(in, 3, tp);
        struct sched_decision a = route(&s, mk_turn(1, 1, 0, 300, 0, -1, 1), in, 3, 0);
        struct sched_decision b = route(&s, mk_turn(2, 2, 0, 300, 0, -1, 1), in, 3, 0);
        CU_ASSERT_EQUAL(a.instance, 0);
        CU_ASSERT_EQUAL(b.instance, 2);
        struct sched_decision e = route(&s, mk_turn(3, 3, 0, 300, 0, -1, 1), in, 3, 0);
        CU_ASSERT_EQUAL(e.instance, 0);
        sched_free(&s);
    }
}

static void test_length_affinity(void)
{
    struct sched_config c;
    length_cfg(&c);
    snprintf(c.balance, sizeof c.balance, "kv");
    c.affinity = 1;
    struct sched s;
    open_sched(&s, &c);
    const int tp[3] = {1, 1, 2};
    struct sched_instance in[3];
    mk_inst(in, 3, tp);
    in[0].load = 50;
    /* still short, prev TP1 within the margin: stays */
    struct sched_decision d = route(&s, mk_turn(1, 1, 1, 800, 100, 0, 1), in, 3, 0);
    CU_ASSERT_EQUAL(d.instance, 0);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_STICKY);
    CU_ASSERT_EQUAL(d.bucket, 0);
    /* now medium: TP1 is not medium's, so it moves despite the affinity */
    d = route(&s, mk_turn(1, 1, 2, 2000, 200, 0, 1), in, 3, 0);
    CU_ASSERT_EQUAL(d.instance, 2);
    CU_ASSERT_EQUAL(d.bucket, 1);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_PER_TURN);
    sched_free(&s);
}

/* ---- la_mlfq ---- */

/* short [1] up to 3000 generated tokens, long [4]; instances TP1, TP1, TP4. */
static void lam_cfg(struct sched_config *c)
{
    cfg_base(c, "la_mlfq", "connections");
    cfg_bucket(c, "short", 3000, 1, 1);
    cfg_bucket(c, "long", 50000, 1, 4);
}
static const int lam_tp[3] = {1, 1, 4};

/* HistoryTable: ttl 3, recorded at step 1, valid through step 4, gone at 5. */
static void test_lam_history_ttl(void)
{
    struct sched_config c;
    lam_cfg(&c);
    c.history_ttl = 3;
    struct sched s;
    open_sched(&s, &c);
    struct sched_instance in[3];
    mk_inst(in, 3, lam_tp);
    sched_step_end(&s, 1);
    struct sched_decision d = route(&s, mk_turn(1, 7, 0, 100, 0, -1, 1), in, 3, 0);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_INITIAL);
    CU_ASSERT_EQUAL(d.bucket, 0);
    sched_finish(&s, 1, 20000, 1); /* observed long */
    for (int step = 2; step <= 5; step++) {
        sched_step_end(&s, step);
        d = route(&s, mk_turn(10 + step, 7, 0, 100, 0, -1, 1), in, 3, 0);
        if (step <= 4) {
            CU_ASSERT_EQUAL(d.reason, SCHED_R_HISTORY);
            CU_ASSERT_EQUAL(d.bucket, 1);
            CU_ASSERT_EQUAL(d.instance, 2);
        } else {
            CU_ASSERT_EQUAL(d.reason, SCHED_R_INITIAL);
            CU_ASSERT_EQUAL(d.bucket, 0);
        }
        sched_finish(&s, 10 + step, 100, 0); /* not learned: history unchanged */
    }
    sched_free(&s);
}

/* LA-MLFQ lifecycle: ttl 2, p1 recorded at 0 expires at step 3; history keeps the
 * observed length (a trajectory routed short that ran long is recorded long). */
static void test_lam_epochs(void)
{
    struct sched_config c;
    lam_cfg(&c);
    c.history_ttl = 2;
    struct sched s;
    open_sched(&s, &c);
    struct sched_instance in[3];
    mk_inst(in, 3, lam_tp);
    struct sched_decision d = route(&s, mk_turn(1, 1, 0, 100, 0, -1, 1), in, 3, 0);
    CU_ASSERT_EQUAL(d.bucket, 0);
    sched_finish(&s, 1, 2500, 1); /* short */
    d = route(&s, mk_turn(2, 2, 0, 100, 0, -1, 1), in, 3, 0);
    sched_finish(&s, 2, 4000, 1); /* routed short, observed long */
    for (int step = 1; step <= 3; step++) {
        sched_step_end(&s, step);
        d = route(&s, mk_turn(10 * step, 1, 0, 100, 0, -1, 1), in, 3, 0);
        CU_ASSERT_EQUAL(d.reason, step <= 2 ? SCHED_R_HISTORY : SCHED_R_INITIAL);
        CU_ASSERT_EQUAL(d.bucket, 0);
        d = route(&s, mk_turn(10 * step + 1, 2, 0, 100, 0, -1, 1), in, 3, 0);
        CU_ASSERT_EQUAL(d.reason, step <= 2 ? SCHED_R_HISTORY : SCHED_R_INITIAL);
        CU_ASSERT_EQUAL(d.bucket, step <= 2 ? 1 : 0);
        sched_finish(&s, 10 * step, 100, 0);
        sched_finish(&s, 10 * step + 1, 100, 0);
    }
    sched_free(&s);
}

/* The first of a group scouts in short, the second is held, and after the scout
 * finishes short a third follows it; a held one times out to the default route. */
static void test_lam_scout_flow(void)
{
    struct sched_config c;
    lam_cfg(&c);
    c.scout_timeout_s = 30;
    struct sched s;
    open_sched(&s, &c);
    struct sched_instance in[3];
    mk_inst(in, 3, lam_tp);
    struct sched_decision d = route(&s, mk_turn(100, 5, 0, 100, 0, -1, 4), in, 3, 0);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_SCOUT);
    CU_ASSERT_EQUAL(d.bucket, 0);
    CU_ASSERT(d.instance == 0 || d.instance == 1);
    d = route(&s, mk_turn(101, 5, 0, 100, 0, -1, 4), in, 3, 1.0);
    CU_ASSERT_EQUAL(d.instance, -1);
    CU_ASSERT_EQUAL(s.stats.holds, 1);
    d = route(&s, mk_turn(102, 5, 0, 100, 0, -1, 4), in, 3, 2.0);
    CU_ASSERT_EQUAL(d.instance, -1);
    /* still waiting at 30.9 s after its first hold; released at 31 s */
    d = route(&s, mk_turn(101, 5, 0, 100, 0, -1, 4), in, 3, 30.9);
    CU_ASSERT_EQUAL(d.instance, -1);
    d = route(&s, mk_turn(101, 5, 0, 100, 0, -1, 4), in, 3, 31.0);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_SCOUT_TIMEOUT);
    CU_ASSERT_EQUAL(d.bucket, 0);
    CU_ASSERT(d.instance == 0 || d.instance == 1);
    sched_finish(&s, 100, 1500, 1); /* the scout finishes short */
    d = route(&s, mk_turn(102, 5, 0, 100, 0, -1, 4), in, 3, 31.5);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_HISTORY); /* learned: the history decides */
    CU_ASSERT_EQUAL(d.bucket, 0);
    sched_free(&s);

    /* the same without learning: the completed scout decides */
    open_sched(&s, &c);
    d = route(&s, mk_turn(200, 6, 0, 100, 0, -1, 4), in, 3, 0);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_SCOUT);
    d = route(&s, mk_turn(201, 6, 0, 100, 0, -1, 4), in, 3, 0);
    CU_ASSERT_EQUAL(d.instance, -1);
    sched_finish(&s, 200, 9000, 0);
    d = route(&s, mk_turn(201, 6, 0, 100, 0, -1, 4), in, 3, 1);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_SCOUT_FOLLOW);
    CU_ASSERT_EQUAL(d.bucket, 1); /* the scout's observed length */
    CU_ASSERT_EQUAL(d.instance, 2);
    d = route(&s, mk_turn(202, 6, 0, 100, 0, -1, 4), in, 3, 1);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_SCOUT_FOLLOW);
    CU_ASSERT_EQUAL(d.bucket, 1);
    /* a lone trajectory neither scouts nor waits */
    d = route(&s, mk_turn(300, 8, 0, 100, 0, -1, 1), in, 3, 1);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_INITIAL);
    sched_free(&s);
}

/* MigrationController (threshold short 3000): 1000 stays, 5000 moves to long and
 * is re-routed to the TP4 instance (reference: relabelled, never re-routed); in
 * long, 50000 does not move; a scout moving releases its held sibling to long. */
static void test_lam_demotion(void)
{
    struct sched_config c;
    lam_cfg(&c);
    struct sched s;
    open_sched(&s, &c);
    struct sched_instance in[3];
    mk_inst(in, 3, lam_tp);
    struct sched_decision d = route(&s, mk_turn(100, 5, 0, 100, 0, -1, 2), in, 3, 0);
    CU_ASSERT_EQUAL_FATAL(d.reason, SCHED_R_SCOUT);
    int scout_inst = d.instance;
    d = route(&s, mk_turn(101, 5, 0, 100, 0, -1, 2), in, 3, 0);
    CU_ASSERT_EQUAL(d.instance, -1);
    d = route(&s, mk_turn(100, 5, 1, 1500, 1000, scout_inst, 2), in, 3, 1);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_STICKY);
    CU_ASSERT_EQUAL(d.instance, scout_inst);
    CU_ASSERT_EQUAL(d.bucket, 0);
    d = route(&s, mk_turn(101, 5, 0, 100, 0, -1, 2), in, 3, 1);
    CU_ASSERT_EQUAL(d.instance, -1); /* the scout has not moved: still held */

    const struct sched_migration *m;
    CU_ASSERT_EQUAL(sched_take_migrations(&s, &m), 0);
    d = route(&s, mk_turn(100, 5, 2, 6000, 5000, scout_inst, 2), in, 3, 2);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_MIGRATE);
    CU_ASSERT_EQUAL(d.bucket, 1);
    CU_ASSERT_EQUAL(d.instance, 2);
    CU_ASSERT_EQUAL(sched_take_migrations(&s, &m), 1);
    CU_ASSERT_EQUAL(m[0].traj_id, 100);
    CU_ASSERT_EQUAL(m[0].why, SCHED_MIG_THRESHOLD);
    CU_ASSERT_EQUAL(m[0].from_instance, scout_inst);
    CU_ASSERT_EQUAL(m[0].to_instance, 2);
    CU_ASSERT_EQUAL(m[0].from_bucket, 0);
    CU_ASSERT_EQUAL(m[0].to_bucket, 1);
    CU_ASSERT_EQUAL(s.stats.migrations, 1);
    d = route(&s, mk_turn(101, 5, 0, 100, 0, -1, 2), in, 3, 2);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_SCOUT_FOLLOW);
    CU_ASSERT_EQUAL(d.bucket, 1);
    CU_ASSERT_EQUAL(d.instance, 2);
    d = route(&s, mk_turn(100, 5, 3, 60000, 50000, 2, 2), in, 3, 3);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_STICKY); /* the last bucket never demotes */
    CU_ASSERT_EQUAL(d.instance, 2);
    CU_ASSERT_EQUAL(sched_take_migrations(&s, &m), 0);
    /* its instance gone after a re-split: re-routed within its bucket */
    d = route(&s, mk_turn(100, 5, 4, 61000, 50500, -1, 2), in, 3, 4);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_REROUTE);
    CU_ASSERT_EQUAL(d.bucket, 1);
    CU_ASSERT_EQUAL(d.instance, 2);
    sched_free(&s);
}

/* A bucket change onto a TP the instance already has is a relabel, not a move. */
static void test_lam_same_tp(void)
{
    struct sched_config c;
    cfg_base(&c, "la_mlfq", "kv");
    cfg_bucket(&c, "short", 3000, 1, 2);
    cfg_bucket(&c, "medium", 6000, 1, 2);
    cfg_bucket(&c, "long", 32768, 1, 4);
    struct sched s;
    open_sched(&s, &c);
    const int tp[2] = {2, 4};
    struct sched_instance in[2];
    mk_inst(in, 2, tp);
    struct sched_decision d = route(&s, mk_turn(1, 1, 0, 100, 0, -1, 1), in, 2, 0);
    CU_ASSERT_EQUAL(d.instance, 0);
    d = route(&s, mk_turn(1, 1, 1, 4000, 4000, 0, 1), in, 2, 0);
    CU_ASSERT_EQUAL(d.instance, 0);
    CU_ASSERT_EQUAL(d.bucket, 1);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_STICKY);
    const struct sched_migration *m;
    CU_ASSERT_EQUAL_FATAL(sched_take_migrations(&s, &m), 1);
    CU_ASSERT_EQUAL(m[0].why, SCHED_MIG_SAME_TP);
    CU_ASSERT_EQUAL(m[0].to_instance, 0);
    CU_ASSERT_EQUAL(s.stats.migrations, 0);
    /* straight to the bucket that holds its length: medium skipped */
    d = route(&s, mk_turn(2, 2, 0, 100, 0, -1, 1), in, 2, 0);
    CU_ASSERT_EQUAL(d.instance, 0);
    d = route(&s, mk_turn(2, 2, 1, 9000, 9000, 0, 1), in, 2, 0);
    CU_ASSERT_EQUAL(d.bucket, 2);
    CU_ASSERT_EQUAL(d.instance, 1);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_MIGRATE);
    CU_ASSERT_EQUAL(s.stats.migrations, 1);
    sched_free(&s);
}

/* The scout is its trajectory id: a sibling that timed out onto the scout's
 * instance and finishes there does not complete the scout (the reference matched
 * (prompt, instance) and would release the group on the sibling's length). */
static void test_lam_scout_identity(void)
{
    struct sched_config c;
    lam_cfg(&c);
    c.scout_timeout_s = 5;
    struct sched s;
    open_sched(&s, &c);
    const int tp[2] = {1, 4};
    struct sched_instance in[2];
    mk_inst(in, 2, tp);
    struct sched_decision d = route(&s, mk_turn(100, 9, 0, 100, 0, -1, 3), in, 2, 0);
    CU_ASSERT_EQUAL_FATAL(d.reason, SCHED_R_SCOUT);
    CU_ASSERT_EQUAL(d.instance, 0);
    d = route(&s, mk_turn(101, 9, 0, 100, 0, -1, 3), in, 2, 0);
    CU_ASSERT_EQUAL(d.instance, -1);
    d = route(&s, mk_turn(101, 9, 0, 100, 0, -1, 3), in, 2, 6);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_SCOUT_TIMEOUT);
    CU_ASSERT_EQUAL(d.instance, 0); /* the scout's instance */
    sched_finish(&s, 101, 20000, 0); /* the sibling ends long; not learned */
    d = route(&s, mk_turn(102, 9, 0, 100, 0, -1, 3), in, 2, 7);
    CU_ASSERT_EQUAL(d.instance, -1); /* the scout still runs: held */
    /* running scouts survive the step end (reference: reset every epoch) */
    sched_step_end(&s, 1);
    sched_step_end(&s, 2);
    d = route(&s, mk_turn(102, 9, 0, 100, 0, -1, 3), in, 2, 8);
    CU_ASSERT_EQUAL(d.instance, -1);
    sched_finish(&s, 100, 1000, 0);
    d = route(&s, mk_turn(102, 9, 0, 100, 0, -1, 3), in, 2, 9);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_SCOUT_FOLLOW);
    CU_ASSERT_EQUAL(d.bucket, 0);
    /* a completed scout is forgotten after the ttl: a new group scouts again */
    for (int step = 3; step <= 3 + c.history_ttl + 1; step++) sched_step_end(&s, step);
    d = route(&s, mk_turn(200, 9, 0, 100, 0, -1, 3), in, 2, 10);
    CU_ASSERT_EQUAL(d.reason, SCHED_R_SCOUT);
    sched_free(&s);
}

/* The bucket policies cannot start without buckets. */
static void test_policy_init_errors(void)
{
    struct sched_config c;
    char err[256] = "";
    struct sched s;
    cfg_base(&c, "length_aware", "kv"); /* no buckets */
    CU_ASSERT_EQUAL(sched_init(&s, &c, NULL, NULL, 0, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "bucket") != NULL);
    cfg_base(&c, "la_mlfq", "kv");
    err[0] = 0;
    CU_ASSERT_EQUAL(sched_init(&s, &c, NULL, NULL, 0, err, sizeof err), -1);
    CU_ASSERT(strstr(err, "bucket") != NULL);
}

static const struct test_case route_cases[] = {
    {"bucket_for", test_bucket_for},
    {"fallback_order", test_fallback_order},
        {"bucket_classes_share", test_bucket_classes_share},
    {"pick_kv_cap", test_pick_kv_cap},
    {"pick_rotation", test_pick_rotation},
    {"pick_weighted", test_pick_weighted},
    {"pick_round_robin", test_pick_round_robin},
    {"route_chain", test_route_chain},
    {"keep_prev", test_keep_prev},
    {"log_migration", test_log_migration},
    {NULL, NULL},
};
static const struct test_case lb_cases[] = {
    {"rotation", test_lb_rotation},
    {"round_robin_cap", test_lb_round_robin_cap},
    {"weighted", test_lb_weighted},
    {"affinity", test_lb_affinity},
    {NULL, NULL},
};
static const struct test_case length_cases[] = {
    {"categories", test_length_categories},
    {"fallback", test_length_fallback},
    {"rotation", test_length_rotation},
    {"affinity", test_length_affinity},
    {NULL, NULL},
};
static const struct test_case lam_cases[] = {
    {"history_ttl", test_lam_history_ttl},
    {"epochs", test_lam_epochs},
    {"scout_flow", test_lam_scout_flow},
    {"demotion", test_lam_demotion},
    {"same_tp", test_lam_same_tp},
    {"scout_identity", test_lam_scout_identity},
    {"no_buckets", test_policy_init_errors},
    {NULL, NULL},
};
static const struct test_suite suites[] = {
    {"sched_route", route_cases},
    {"sched_load_balance", lb_cases},
    {"sched_length_aware", length_cases},
    {"sched_la_mlfq", lam_cases},
    {NULL, NULL},
};

int main(void)
{
    return test_main(suites);
}
