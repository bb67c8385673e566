/* Plans, communicator colors, the scripted planner, the scheduler and the staleness
 * rule of the trajectory book. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/config.h"
#include "libra/log.h"
#include "libra/plan.h"
#include "libra/planner.h"
#include "libra/sched.h"
#include "libra/traj_table.h"
#include "testutil.h"

static struct plan_spec spec(int n_train, int n_hybrid, int n_tp, const int *tp)
{
    struct plan_spec s = {.n_train = n_train, .n_hybrid = n_hybrid, .n_tp = n_tp};
    memcpy(s.rollout_tp, tp, (size_t)n_tp * sizeof(int));
    return s;
}

static void test_build_placement(void)
{
    int tp[] = {1, 4, 2, 1};
    struct plan_spec s = spec(3, 1, 4, tp);
    struct plan p;
    char err[256];
    plan_init(&p, 13);
    CU_ASSERT_EQUAL_FATAL(plan_build(&s, 13, 2, 10, "test", &p, err, sizeof err), 0);
    /* instances largest TP first, consecutive, aligned to their TP */
    CU_ASSERT_EQUAL(p.n_instances, 4);
    int want_tp[] = {4, 2, 1, 1}, want_leader[] = {1, 5, 7, 8};
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(p.inst[i].tp, want_tp[i]);
        CU_ASSERT_EQUAL(p.inst[i].leader, want_leader[i]);
        CU_ASSERT_EQUAL((p.inst[i].leader - 1) % p.inst[i].tp, 0);
    }
    CU_ASSERT_EQUAL(p.n_rollout_ranks, 8);
    CU_ASSERT_EQUAL(p.ranks[0].role, ROLE_CONTROLLER);
    CU_ASSERT_EQUAL(p.ranks[6].role, ROLE_ROLLOUT);
    CU_ASSERT_EQUAL(p.ranks[6].instance, 1);
    CU_ASSERT_EQUAL(p.ranks[6].index, 1);
    CU_ASSERT_EQUAL(p.ranks[9].role, ROLE_HYBRID);
    for (int r = 10; r <= 12; r++) {
        CU_ASSERT_EQUAL(p.ranks[r].role, ROLE_TRAIN);
        CU_ASSERT_EQUAL(p.ranks[r].index, r - 10);
    }
    CU_ASSERT_EQUAL(plan_train_root(&p), 10);
    CU_ASSERT_EQUAL(p.n_idle, 0);
    char buf[64];
    plan_format_tp(&p, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "4,2,1,1");
    plan_free(&p);
}

static void test_build_idle_and_too_big(void)
{
    int tp[] = {2};
    struct plan_spec s = spec(1, 0, 1, tp);
    struct plan p;
    char err[256];
    plan_init(&p, 6);
    CU_ASSERT_EQUAL(plan_build(&s, 6, 0, 0, "", &p, err, sizeof err), 0);
    CU_ASSERT_EQUAL(p.n_idle, 2);
    CU_ASSERT_EQUAL(p.ranks[4].role, ROLE_IDLE);
    CU_ASSERT_EQUAL(p.ranks[5].role, ROLE_IDLE);
    CU_ASSERT_EQUAL(plan_build(&s, 3, 0, 0, "", &p, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "needs 3 workers but the job has 2"));
    plan_free(&p);
}

static void test_colors(void)
{
    int tp[] = {2, 1};
    struct plan_spec s = spec(2, 1, 2, tp);
    struct plan p;
    char err[256];
    plan_init(&p, 7);
    CU_ASSERT_EQUAL_FATAL(plan_build(&s, 7, 0, 0, "", &p, err, sizeof err), 0);
    /* ranks: 1,2 tp2 | 3 tp1 | 4 hybrid | 5,6 train (root 5) */
    struct plan_colors c;
    plan_colors(&p, 0, &c);
    CU_ASSERT_EQUAL(c.role, MPI_UNDEFINED);
    CU_ASSERT_EQUAL(c.sync, MPI_UNDEFINED);
    CU_ASSERT_EQUAL(c.hybrid_lane, MPI_UNDEFINED);
    plan_colors(&p, 2, &c);
    CU_ASSERT_EQUAL(c.role, ROLE_ROLLOUT);
    CU_ASSERT_EQUAL(c.instance, 0);
    CU_ASSERT_EQUAL(c.sync, 0);
    CU_ASSERT_EQUAL(c.hybrid_lane, MPI_UNDEFINED);
    plan_colors(&p, 3, &c);
    CU_ASSERT_EQUAL(c.instance, 1);
    plan_colors(&p, 4, &c);
    CU_ASSERT_EQUAL(c.role, ROLE_HYBRID);
    CU_ASSERT_EQUAL(c.instance, MPI_UNDEFINED);
    CU_ASSERT_EQUAL(c.sync, MPI_UNDEFINED);
    CU_ASSERT_EQUAL(c.hybrid_lane, 0);
    plan_colors(&p, 5, &c); /* training root: in sync and hybrid lane, first */
    CU_ASSERT_EQUAL(c.role, ROLE_TRAIN);
    CU_ASSERT_EQUAL(c.sync, 0);
    CU_ASSERT_EQUAL(c.hybrid_lane, 0);
    CU_ASSERT_EQUAL(c.key, 0);
    plan_colors(&p, 6, &c);
    CU_ASSERT_EQUAL(c.sync, MPI_UNDEFINED);
    CU_ASSERT_EQUAL(c.hybrid_lane, MPI_UNDEFINED);
    CU_ASSERT_EQUAL(c.key, 6);
    plan_free(&p);
}

/* train.colocate: the rollout ranks are the training ranks, indexed in rank order
 * (ctl_replicas' order), the root replica the first train_tp of them. */
static void test_colocated(void)
{
    int tp[] = {2, 2};
    struct plan_spec s = spec(4, 0, 2, tp);
    s.train_tp = 2;
    s.colocate = 1;
    struct plan p, q;
    char err[256];
    plan_init(&p, 6);
    plan_init(&q, 1);
    CU_ASSERT_EQUAL(plan_spec_workers(&s), 4);
    CU_ASSERT_EQUAL_FATAL(plan_build(&s, 6, 0, 0, "", &p, err, sizeof err), 0);
    /* ranks: 1,2 instance 0 | 3,4 instance 1 | 5 idle; none has the training role */
    CU_ASSERT_EQUAL(p.colocated, 1);
    CU_ASSERT_EQUAL(p.n_idle, 1);
    for (int r = 1; r <= 4; r++) {
        CU_ASSERT_EQUAL(p.ranks[r].role, ROLE_ROLLOUT);
        CU_ASSERT_EQUAL(plan_train_index(&p, r), r - 1);
        CU_ASSERT(plan_trains(&p, r));
        CU_ASSERT_EQUAL(plan_in_root_replica(&p, r), r <= 2);
        struct plan_colors c;
        plan_colors(&p, r, &c);
        CU_ASSERT_EQUAL(c.role, ROLE_ROLLOUT);
        CU_ASSERT_EQUAL(c.instance, (r - 1) / 2);
        CU_ASSERT_EQUAL(c.replica, (r - 1) / 2); /* instance k is replica k */
        CU_ASSERT_EQUAL(c.dp, (r - 1) % 2);
        CU_ASSERT_EQUAL(c.sync, 0);
        CU_ASSERT_EQUAL(c.hybrid_lane, r <= 2 ? 0 : MPI_UNDEFINED);
    }
    CU_ASSERT_EQUAL(plan_train_index(&p, 5), -1);
    CU_ASSERT(!plan_trains(&p, 5));
    CU_ASSERT(!plan_in_root_replica(&p, 5));
    CU_ASSERT_EQUAL(plan_train_index(&p, 0), -1);
    CU_ASSERT_EQUAL(plan_train_root(&p), 1);
    int m[6];
    CU_ASSERT_EQUAL(plan_members(&p, 0, m), 4); /* the root replica, then the others */
    for (int k = 0; k < 4; k++) CU_ASSERT_EQUAL(m[k], k + 1);
    CU_ASSERT_EQUAL(plan_members(&p, 1, m), 2);
    /* the flag travels with the plan */
    size_t len = plan_packed_size(&p);
    char *buf = xmalloc(len);
    plan_pack(&p, buf);
    CU_ASSERT_EQUAL_FATAL(plan_unpack(buf, len, &q), 0);
    CU_ASSERT_EQUAL(q.colocated, 1);
    CU_ASSERT_EQUAL(plan_train_index(&q, 4), 3);
    free(buf);
    /* the same layout without colocation: rollout ranks do not train */
    s.colocate = 0;
    s.n_train = 0;
    CU_ASSERT_EQUAL_FATAL(plan_build(&s, 6, 0, 0, "", &p, err, sizeof err), 0);
    CU_ASSERT_EQUAL(plan_train_index(&p, 1), -1);
    CU_ASSERT(!plan_in_root_replica(&p, 1));
    plan_free(&p);
    plan_free(&q);
}

static void test_pack_roundtrip_and_survival(void)
{
    int tp1[] = {2, 1, 1}, tp2[] = {2, 2};
    struct plan_spec s1 = spec(2, 0, 3, tp1), s2 = spec(2, 0, 2, tp2);
    struct plan a, b, c;
    char err[256];
    plan_init(&a, 7);
    plan_init(&b, 7);
    plan_init(&c, 1);
    CU_ASSERT_EQUAL_FATAL(plan_build(&s1, 7, 3, 9, "schedule[1]", &a, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(plan_build(&s2, 7, 4, 12, "x", &b, err, sizeof err), 0);
    size_t n = plan_packed_size(&a);
    char buf[4096];
    plan_pack(&a, buf);
    CU_ASSERT_EQUAL_FATAL(plan_unpack(buf, n, &c), 0);
    CU_ASSERT_EQUAL(c.world, 7);
    CU_ASSERT_EQUAL(c.epoch, 3);
    CU_ASSERT_EQUAL(c.step, 9);
    CU_ASSERT_STRING_EQUAL(c.reason, "schedule[1]");
    CU_ASSERT_EQUAL(memcmp(c.ranks, a.ranks, 7 * sizeof *a.ranks), 0);
    CU_ASSERT_EQUAL(memcmp(c.inst, a.inst, 3 * sizeof *a.inst), 0);
    CU_ASSERT_EQUAL(plan_unpack(buf, n - 1, &c), -1);
    CU_ASSERT_EQUAL(plan_unpack(buf, n + 4, &c), -1);
    /* a: [1,2]=tp2 3=tp1 4=tp1; b: [1,2]=tp2 [3,4]=tp2 */
    CU_ASSERT_EQUAL(plan_instance_survives(&a, &b, 1), 1);
    CU_ASSERT_EQUAL(plan_instance_survives(&a, &b, 3), 0);
    CU_ASSERT_EQUAL(plan_instance_survives(&a, &b, 4), 0);
    CU_ASSERT_EQUAL(plan_instance_survives(&a, &b, 5), 0); /* training rank */
    /* the same roles with another training shape is another plan (a schedule that
     * changes only train_tp was kept as it was) */
    plan_copy(&c, &a);
    CU_ASSERT_EQUAL(plan_same_roles(&a, &c), 1);
    c.train_tp = 2;
    CU_ASSERT_EQUAL(plan_same_roles(&a, &c), 0);
    c.train_tp = a.train_tp;
    c.train_pp = 2;
    CU_ASSERT_EQUAL(plan_same_roles(&a, &c), 0);
    c.train_pp = a.train_pp;
    c.micro = a.micro + 1;
    CU_ASSERT_EQUAL(plan_same_roles(&a, &c), 0);
    c.micro = a.micro;
    c.colocated = !a.colocated;
    CU_ASSERT_EQUAL(plan_same_roles(&a, &c), 0);
    plan_free(&a);
    plan_free(&b);
    plan_free(&c);
}

static void test_planner_schedule_cycles(void)
{
    struct libra_config cfg;
    config_defaults(&cfg);
    struct plan_config pc = cfg.plan;
    strcpy(pc.mode, "schedule");
    pc.interval = 2;
    pc.n_schedule = 2;
    int t1[] = {1, 1}, t2[] = {2};
    pc.schedule[0] = spec(2, 0, 2, t1);
    pc.schedule[1] = spec(1, 1, 1, t2);
    cfg.plan = pc;
    struct planner pl;
    planner_init(&pl, &cfg, NULL, NULL, 5);
    struct plan p;
    char err[256];
    plan_init(&p, 5);
    for (int e = 0; e < 5; e++) {
        CU_ASSERT_EQUAL_FATAL(planner_next(&pl, e, 2 * e, &p, err, sizeof err), 0);
        CU_ASSERT_EQUAL(p.epoch, e);
        CU_ASSERT_EQUAL(p.n_train, e % 2 ? 1 : 2);
        CU_ASSERT_EQUAL(p.n_hybrid, e % 2 ? 1 : 0);
        CU_ASSERT_STRING_EQUAL(p.reason, e % 2 ? "schedule[1]" : "schedule[0]");
    }
    planner_free(&pl);
    plan_free(&p);
}

/* load_balance with KV balance and affinity (what least_loaded was before C-MLFQ):
 * the least normalised KV load wins, a trajectory stays within the margin, ties
 * rotate. (The policies' own suites are test_cmlfq and test_sched_baselines.) */
static int route_lb(struct sched *s, const struct sched_turn *t, const struct sched_instance *in,
                    int n)
{
    struct sched_decision d;
    sched_route(s, t, in, n, 0, &d);
    return d.instance;
}

static void test_sched_load_balance(void)
{
    struct libra_config cfg;
    config_defaults(&cfg);
    snprintf(cfg.sched.type, sizeof cfg.sched.type, "load_balance");
    struct sched s;
    char err[256];
    CU_ASSERT_EQUAL_FATAL(sched_init(&s, &cfg.sched, NULL, NULL, 0, err, sizeof err), 0);
    struct sched_instance in[3] = {{1, 1, 1000, 500, 1, -1, -1, -1},
                                   {2, 4, 8000, 2000, 1, -1, -1, -1},
                                   {6, 1, 1000, 100, 1, -1, -1, -1}};
    struct sched_turn t = {.traj_id = 7, .ctx_tokens = 100, .budget = 100, .prev = -1};
    /* normalised loads 0.5, 0.25, 0.1 */
    CU_ASSERT_EQUAL(route_lb(&s, &t, in, 3), 2);
    /* sticky: previous instance within the margin keeps the trajectory */
    in[2].load = 300; /* 0.3 vs 0.25 */
    t.prev = 2;
    t.turn = 1;
    CU_ASSERT_EQUAL(route_lb(&s, &t, in, 3), 2);
    /* beyond the margin it moves */
    in[2].load = 400; /* 0.4 */
    CU_ASSERT_EQUAL(route_lb(&s, &t, in, 3), 1);
    /* ties rotate */
    struct sched_instance eq[4] = {{1, 1, 10, 0, 0, -1, -1, -1}, {2, 1, 10, 0, 0, -1, -1, -1},
                                   {3, 1, 10, 0, 0, -1, -1, -1}, {4, 1, 10, 0, 0, -1, -1, -1}};
    t.prev = -1;
    int seen[4] = {0};
    for (int k = 0; k < 4; k++) {
        t.traj_id = 100 + k;
        seen[route_lb(&s, &t, eq, 4)]++;
    }
    for (int k = 0; k < 4; k++) CU_ASSERT_EQUAL(seen[k], 1);
    sched_free(&s);
}

/* Finishes every trajectory of group g, their first tokens at version v. */
static void finish_group(struct traj_table *tt, int64_t g, int v)
{
    for (int s = 0; s < tt->g[g].n; s++) {
        int64_t id = tt->g[g].first_traj + s;
        tt->t[id].version_start = v;
        tt_finish(tt, id, 1.0);
    }
}

static void drain_queue(struct traj_table *tt)
{
    int64_t q;
    while (tt_queue_pop(tt, &q)) {}
}

static void test_staleness_must_go(void)
{
    struct traj_table tt;
    int64_t out[2];
    tt_init(&tt, 2);
    tt_launch_group(&tt, 0, 10, 0, 0, 0.0); /* A, L = 0 */
    tt_launch_group(&tt, 1, 10, 0, 0, 0.0); /* B, L = 0 */
    drain_queue(&tt);
    finish_group(&tt, 1, 0);
    /* v = 0, S = 1: A may still wait one step */
    CU_ASSERT_EQUAL_FATAL(tt_select_batch(&tt, 1, 0, 1, out), 1);
    CU_ASSERT_EQUAL(out[0], 1);
    tt_mark_trained(&tt, out, 1, 1);
    CU_ASSERT_EQUAL(tt.t[2].state, TS_TRAINED);
    CU_ASSERT_EQUAL(tt.t[2].step_consumed, 1);
    tt_launch_group(&tt, 2, 10, 1, 1, 0.0); /* C, L = 1 */
    drain_queue(&tt);
    finish_group(&tt, 2, 1);
    /* v = 1: A (L = 0) is due now and incomplete; C must not take its slot */
    CU_ASSERT_EQUAL(tt_select_batch(&tt, 1, 1, 1, out), 0);
    finish_group(&tt, 0, 0);
    CU_ASSERT_EQUAL_FATAL(tt_select_batch(&tt, 1, 1, 1, out), 1);
    CU_ASSERT_EQUAL(out[0], 0); /* oldest launch version first */
    tt_mark_trained(&tt, out, 1, 2);
    CU_ASSERT_EQUAL(tt.n_buffered, 1);
    CU_ASSERT_EQUAL_FATAL(tt_select_batch(&tt, 1, 2, 1, out), 1);
    CU_ASSERT_EQUAL(out[0], 2);
    tt_free(&tt);
}

/* The deadlock the first version of the rule had (found by tools/bench-control):
 * newer groups overtook older incomplete ones until more than one batch of groups
 * was due at once. The rule must refuse the overtaking step instead. */
static void test_staleness_no_overtaking_deadlock(void)
{
    struct traj_table tt;
    int64_t out[1];
    tt_init(&tt, 1);
    for (int g = 0; g < 3; g++) tt_launch_group(&tt, g, 10, 0, 0, 0.0); /* cap (0+2+1)*1 */
    drain_queue(&tt);
    finish_group(&tt, 1, 0);
    CU_ASSERT_EQUAL_FATAL(tt_select_batch(&tt, 1, 0, 2, out), 1); /* S = 2: G0, G2 can wait */
    tt_mark_trained(&tt, out, 1, 1);
    tt_launch_group(&tt, 3, 10, 1, 1, 0.0);
    drain_queue(&tt);
    finish_group(&tt, 3, 1);
    /* v = 1: taking G3 would leave G0 and G2 (L = 0) for the single step v = 2 */
    CU_ASSERT_EQUAL(tt_select_batch(&tt, 1, 1, 2, out), 0);
    finish_group(&tt, 2, 0);
    CU_ASSERT_EQUAL_FATAL(tt_select_batch(&tt, 1, 1, 2, out), 1);
    CU_ASSERT_EQUAL(out[0], 2);
    tt_mark_trained(&tt, out, 1, 2);
    /* v = 2: G0 is due and incomplete: wait; then it goes */
    CU_ASSERT_EQUAL(tt_select_batch(&tt, 1, 2, 2, out), 0);
    finish_group(&tt, 0, 0);
    CU_ASSERT_EQUAL_FATAL(tt_select_batch(&tt, 1, 2, 2, out), 1);
    CU_ASSERT_EQUAL(out[0], 0);
    tt_free(&tt);
}

/* Randomised: launch under the cap, complete in random order, train whenever a
 * batch may form. Every trained group must satisfy the bound, and once everything
 * is complete a batch must always form (no deadlock). */
static void test_staleness_random(void)
{
    for (int seed = 1; seed <= 20; seed++) {
        struct traj_table tt;
        const int B = 3, S = seed % 3, steps = 40;
        int64_t out[3];
        unsigned x = (unsigned)seed * 2654435761u;
        tt_init(&tt, 1);
        int v = 0;
        while (v < steps) {
            while ((int64_t)tt.n_group < (int64_t)(v + S + 1) * B)
                tt_launch_group(&tt, (int64_t)tt.n_group, 10, v, v, 0.0);
            drain_queue(&tt);
            /* finish a random incomplete group (first tokens at its launch version) */
            int open = 0;
            for (size_t g = 0; g < tt.n_group; g++) open += tt.g[g].n_done < tt.g[g].n;
            if (open > 0 && (x = x * 1103515245u + 12345u) % 3 != 0) {
                int k = (int)((x >> 8) % (unsigned)open);
                for (size_t g = 0; g < tt.n_group; g++)
                    if (tt.g[g].n_done < tt.g[g].n && k-- == 0) {
                        finish_group(&tt, (int64_t)g, tt.g[g].launch_version);
                        break;
                    }
            }
            int n = tt_select_batch(&tt, B, v, S, out);
            if (n == 0) {
                CU_ASSERT_FATAL(open > 0); /* all complete, yet no batch: deadlock */
                continue;
            }
            for (int i = 0; i < n; i++) CU_ASSERT(v - tt.g[out[i]].launch_version <= S);
            tt_mark_trained(&tt, out, n, v + 1);
            v++;
        }
        tt_free(&tt);
    }
}

static void test_queue_order(void)
{
    struct traj_table tt;
    tt_init(&tt, 1);
    for (int g = 0; g < 300; g++) tt_launch_group(&tt, g, 10, 0, 0, 0.0);
    int64_t id;
    for (int i = 0; i < 300; i++) {
        CU_ASSERT_EQUAL(tt_queue_pop(&tt, &id), 1);
        CU_ASSERT_EQUAL(id, i);
    }
    tt_queue_push(&tt, 5);
    tt_queue_push_front(&tt, 7);
    CU_ASSERT_EQUAL(tt_queue_pop(&tt, &id), 1);
    CU_ASSERT_EQUAL(id, 7);
    CU_ASSERT_EQUAL(tt_queue_pop(&tt, &id), 1);
    CU_ASSERT_EQUAL(id, 5);
    CU_ASSERT_EQUAL(tt_queue_pop(&tt, &id), 0);
    tt_free(&tt);
}

int main(void)
{
    static const struct test_case plan_cases[] = {
        {"placement: largest TP first, aligned, roles", test_build_placement},
        {"idle ranks and a plan too big for the job", test_build_idle_and_too_big},
        {"plan -> communicator colors", test_colors},
        {"colocated: rollout ranks train, their indices and colors", test_colocated},
        {"wire round trip, instance survival", test_pack_roundtrip_and_survival},
        {"scripted planner cycles the schedule", test_planner_schedule_cycles},
        {NULL, NULL}};
    static const struct test_case sched_cases[] = {
        {"load_balance: normalised, sticky, rotating", test_sched_load_balance}, {NULL, NULL}};
    static const struct test_case tt_cases[] = {
        {"staleness: due groups go first, oldest first", test_staleness_must_go},
        {"staleness: no overtaking into a deadlock", test_staleness_no_overtaking_deadlock},
        {"staleness: randomised completion order", test_staleness_random},
        {"dispatch queue order", test_queue_order},
        {NULL, NULL}};
    static const struct test_suite suites[] = {
        {"plan", plan_cases}, {"sched", sched_cases}, {"traj_table", tt_cases}, {NULL, NULL}};
    return test_main(suites);
}
