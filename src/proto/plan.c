/* Plans: placement of roles on ranks, communicator colors, wire form (plan.h). */
#include "libra/plan.h"

#include <assert.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libra/log.h"

void plan_init(struct plan *p, int world)
{
    memset(p, 0, sizeof *p);
    p->world = world;
    p->ranks = xcalloc((size_t)world, sizeof *p->ranks);
    p->inst = xcalloc((size_t)world, sizeof *p->inst);
}

void plan_free(struct plan *p)
{
    if (!p) return;
    free(p->ranks);
    free(p->inst);
    p->ranks = NULL;
    p->inst = NULL;
}

void plan_copy(struct plan *dst, const struct plan *src)
{
    if (dst->world != src->world) {
        plan_free(dst);
        plan_init(dst, src->world);
    }
    struct rank_assign *r = dst->ranks;
    struct instance_desc *in = dst->inst;
    *dst = *src;
    dst->ranks = r;
    dst->inst = in;
    memcpy(r, src->ranks, (size_t)src->world * sizeof *r);
    memcpy(in, src->inst, (size_t)src->n_instances * sizeof *in);
}

static int cmp_desc(const void *a, const void *b)
{
    return *(const int *)b - *(const int *)a;
}

int plan_build(const struct plan_spec *spec, int world, int epoch, int step, const char *reason,
               struct plan *out, char *err, size_t errlen)
{
    int need = plan_spec_workers(spec);
    if (need > world - 1) {
        snprintf(err, errlen, "plan needs %d workers but the job has %d (world size %d)", need,
                 world - 1, world);
        return -1;
    }
    if (out->world != world) {
        plan_free(out);
        plan_init(out, world);
    }
    int tps[CFG_MAX_TP];
    memcpy(tps, spec->rollout_tp, (size_t)spec->n_tp * sizeof(int));
    qsort(tps, (size_t)spec->n_tp, sizeof(int), cmp_desc);

    out->epoch = epoch;
    out->step = step;
    out->n_train = spec->n_train;
    out->n_hybrid = spec->n_hybrid;
    out->train_tp = spec->train_tp > 0 ? spec->train_tp : 1;
    out->train_pp = spec->train_pp > 0 ? spec->train_pp : 1;
    out->micro = spec->micro > 0 ? spec->micro : 1;
    out->colocated = spec->colocate;
    out->n_instances = spec->n_tp;
    out->n_rollout_ranks = 0;
    snprintf(out->reason, sizeof out->reason, "%s", reason ? reason : "");
    out->ranks[0] = (struct rank_assign){ROLE_CONTROLLER, -1, 0, 0};
    int r = 1;
    for (int i = 0; i < spec->n_tp; i++) {
        out->inst[i] = (struct instance_desc){r, tps[i]};
        for (int k = 0; k < tps[i]; k++, r++)
            out->ranks[r] = (struct rank_assign){ROLE_ROLLOUT, i, tps[i], k};
        out->n_rollout_ranks += tps[i];
    }
    for (int k = 0; k < spec->n_hybrid; k++, r++)
        out->ranks[r] = (struct rank_assign){ROLE_HYBRID, -1, 0, k};
    for (int k = 0; k < (spec->colocate ? 0 : spec->n_train); k++, r++)
        out->ranks[r] = (struct rank_assign){ROLE_TRAIN, -1, 0, k};
    out->n_idle = world - r;
    for (; r < world; r++) out->ranks[r] = (struct rank_assign){ROLE_IDLE, -1, 0, 0};
    return 0;
}

void plan_lend(const struct plan *base, const int *lend, struct plan *out)
{
    plan_copy(out, base);
    int *renum = xmalloc((size_t)(base->n_instances + 1) * sizeof *renum);
    int n = 0;
    for (int i = 0; i < base->n_instances; i++) {
        renum[i] = lend[i] ? -1 : n;
        if (!lend[i]) out->inst[n++] = base->inst[i];
    }
    for (int r = 1; r < base->world; r++) {
        struct rank_assign *a = &out->ranks[r];
        if (a->role != ROLE_ROLLOUT) continue;
        if (renum[a->instance] >= 0) {
            a->instance = renum[a->instance];
            continue;
        }
        assert(a->tp % plan_replica_size(base) == 0);
        out->n_rollout_ranks--;
        *a = (struct rank_assign){ROLE_HYBRID, -1, 0, 0};
    }
    out->n_instances = n;
    /* hybrid indices in rank order: a replica is index / replica size, consecutive
     * ranks of one lent instance */
    int k = 0;
    for (int r = 1; r < base->world; r++)
        if (out->ranks[r].role == ROLE_HYBRID) out->ranks[r].index = k++;
    out->n_hybrid = k;
    free(renum);
}

int plan_replica_size(const struct plan *p)
{
    int r = (p->train_tp > 0 ? p->train_tp : 1) * (p->train_pp > 0 ? p->train_pp : 1);
    return r;
}

int plan_train_same(const struct plan *a, const struct plan *b)
{
    if (a->world != b->world || a->n_train != b->n_train || a->train_tp != b->train_tp ||
        a->train_pp != b->train_pp)
        return 0;
    for (int r = 1; r < a->world; r++) {
        int ta = a->ranks[r].role == ROLE_TRAIN, tb = b->ranks[r].role == ROLE_TRAIN;
        if (ta != tb || (ta && a->ranks[r].index != b->ranks[r].index)) return 0;
    }
    return 1;
}

int plan_same_roles(const struct plan *a, const struct plan *b)
{
    return a->world == b->world && a->n_instances == b->n_instances &&
           a->train_tp == b->train_tp && a->train_pp == b->train_pp && a->micro == b->micro &&
           a->colocated == b->colocated &&
           memcmp(a->ranks, b->ranks, (size_t)a->world * sizeof *a->ranks) == 0 &&
           memcmp(a->inst, b->inst, (size_t)a->n_instances * sizeof *a->inst) == 0;
}

int plan_train_root(const struct plan *p)
{
    if (p->colocated) return p->n_rollout_ranks > 0 ? p->inst[0].leader : -1;
    for (int r = 1; r < p->world; r++)
        if (p->ranks[r].role == ROLE_TRAIN && p->ranks[r].index == 0) return r;
    return -1;
}

int plan_train_index(const struct plan *p, int rank)
{
    const struct rank_assign *a = &p->ranks[rank];
    if (a->role == ROLE_TRAIN || a->role == ROLE_HYBRID) return a->index;
    if (!p->colocated || a->role != ROLE_ROLLOUT) return -1;
    int k = 0; /* the rollout ranks below it: ctl_replicas' order */
    for (int r = 1; r < rank; r++) k += p->ranks[r].role == ROLE_ROLLOUT;
    return k;
}

int plan_trains(const struct plan *p, int rank) { return plan_train_index(p, rank) >= 0; }

int plan_in_root_replica(const struct plan *p, int rank)
{
    const struct rank_assign *a = &p->ranks[rank];
    int size = plan_replica_size(p);
    if (!p->colocated) return a->role == ROLE_TRAIN && a->index < size;
    if (a->role != ROLE_ROLLOUT) return 0;
    /* the first `size` rollout ranks (the scan stops there: cheap at any world size) */
    for (int r = 1, below = 0; r < rank; r++)
        if (p->ranks[r].role == ROLE_ROLLOUT && ++below >= size) return 0;
    return 1;
}

void plan_colors(const struct plan *p, int rank, struct plan_colors *c)
{
    const struct rank_assign *a = &p->ranks[rank];
    int size = plan_replica_size(p), root_rep = plan_in_root_replica(p, rank);
    int index = plan_train_index(p, rank), trains = index >= 0;
    c->role = (a->role == ROLE_ROLLOUT || trains) ? a->role : MPI_UNDEFINED;
    c->instance = a->role == ROLE_ROLLOUT ? a->instance : MPI_UNDEFINED;
    c->replica = trains ? index / size : MPI_UNDEFINED;
    c->dp = trains ? index % size : MPI_UNDEFINED;
    c->sync = (a->role == ROLE_ROLLOUT || root_rep) ? 0 : MPI_UNDEFINED;
    c->hybrid_lane = (a->role == ROLE_HYBRID || root_rep) ? 0 : MPI_UNDEFINED;
    c->key = root_rep ? index : rank;
}

int plan_members(const struct plan *p, int lane, int *out)
{
    int n = 0, size = plan_replica_size(p);
    /* the root replica first, in its index order, then the others by rank */
    for (int k = 0; k < size; k++)
        for (int r = 1; r < p->world; r++)
            if (plan_in_root_replica(p, r) && plan_train_index(p, r) == k) {
                out[n++] = r;
                break;
            }
    for (int r = 1; r < p->world; r++) {
        int role = p->ranks[r].role;
        if (!plan_in_root_replica(p, r) && role == (lane ? ROLE_HYBRID : ROLE_ROLLOUT))
            out[n++] = r;
    }
    return n;
}

int plan_find_instance(const struct plan *p, int leader, int tp)
{
    for (int i = 0; i < p->n_instances; i++)
        if (p->inst[i].leader == leader && p->inst[i].tp == tp) return i;
    return -1;
}

int plan_instance_survives(const struct plan *old, const struct plan *new_plan, int rank)
{
    const struct rank_assign *a = &old->ranks[rank];
    if (a->role != ROLE_ROLLOUT) return 0;
    return plan_find_instance(new_plan, old->inst[a->instance].leader, a->tp) >= 0;
}

void plan_format_tp(const struct plan *p, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < p->n_instances && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, i ? ",%d" : "%d", p->inst[i].tp);
}

const char *role_name(int role)
{
    static const char *names[] = {"controller", "rollout", "train", "hybrid", "idle"};
    return role >= 0 && role <= ROLE_IDLE ? names[role] : "?";
}

/* Wire header: the scalar fields of struct plan, fixed size. */
struct plan_wire_hdr {
    int32_t epoch, step, world, n_train, n_hybrid, n_rollout_ranks, n_instances, n_idle;
    int32_t train_tp, train_pp, micro, colocated;
    char reason[64];
};

size_t plan_packed_size(const struct plan *p)
{
    return sizeof(struct plan_wire_hdr) + (size_t)p->world * sizeof(struct rank_assign) +
           (size_t)p->n_instances * sizeof(struct instance_desc);
}

void plan_pack(const struct plan *p, void *buf)
{
    struct plan_wire_hdr h = {p->epoch,    p->step,     p->world,           p->n_train,
                              p->n_hybrid,  p->n_rollout_ranks, p->n_instances, p->n_idle,
                              p->train_tp,  p->train_pp, p->micro,          p->colocated,
                              {0}};
    memcpy(h.reason, p->reason, sizeof h.reason);
    char *o = buf;
    memcpy(o, &h, sizeof h);
    o += sizeof h;
    memcpy(o, p->ranks, (size_t)p->world * sizeof *p->ranks);
    o += (size_t)p->world * sizeof *p->ranks;
    memcpy(o, p->inst, (size_t)p->n_instances * sizeof *p->inst);
}

int plan_unpack(const void *buf, size_t len, struct plan *p)
{
    struct plan_wire_hdr h;
    if (len < sizeof h) return -1;
    memcpy(&h, buf, sizeof h);
    if (h.world < 1 || h.n_instances < 0 || h.n_instances > h.world) return -1;
    size_t need = sizeof h + (size_t)h.world * sizeof(struct rank_assign) +
                  (size_t)h.n_instances * sizeof(struct instance_desc);
    if (len != need) return -1;
    if (p->world != h.world) {
        plan_free(p);
        plan_init(p, h.world);
    }
    p->epoch = h.epoch;
    p->step = h.step;
    p->n_train = h.n_train;
    p->n_hybrid = h.n_hybrid;
    p->n_rollout_ranks = h.n_rollout_ranks;
    p->n_instances = h.n_instances;
    p->n_idle = h.n_idle;
    p->train_tp = h.train_tp;
    p->train_pp = h.train_pp;
    p->micro = h.micro;
    p->colocated = h.colocated;
    memcpy(p->reason, h.reason, sizeof p->reason);
    p->reason[sizeof p->reason - 1] = '\0';
    const char *i = (const char *)buf + sizeof h;
    memcpy(p->ranks, i, (size_t)h.world * sizeof *p->ranks);
    memcpy(p->inst, i + (size_t)h.world * sizeof *p->ranks,
           (size_t)h.n_instances * sizeof *p->inst);
    return 0;
}
