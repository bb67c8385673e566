/*
 * The shard of the model a CPU rank holds (cpu_internal.h): TP degree t, index i, its
 * geometry (struct tfm_tp), its communicators and its weights. The geometry of any
 * other (t, i) -- what a weight sync needs to know of the other side -- is computed
 * without communicators and without touching memory (the parameter block of a
 * geometry-only shard is allocated zeroed and never written, so the OS maps no pages).
 */
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "libra/hf_model.h"
#include "libra/log.h"

static void refuse(void *ctx, void *x, size_t n, enum tfm_red_op op)
{
    (void)ctx;
    (void)x;
    (void)n;
    (void)op;
    FATAL("a geometry-only shard was asked for a collective (a bug)");
}
static void refuse_f32(void *c, float *x, size_t n, enum tfm_red_op op) { refuse(c, x, n, op); }
static void refuse_f64(void *c, double *x, size_t n, enum tfm_red_op op) { refuse(c, x, n, op); }
static void refuse_i32(void *c, int32_t *x, size_t n, enum tfm_red_op op) { refuse(c, x, n, op); }

void cpu_shard_geometry(const struct tfm_config *mc, int t, int i, struct tfm_tp *tp,
                        struct tfm_comm *comm, struct tfm_comm *kv)
{
    *comm = (struct tfm_comm){i, t, NULL, refuse_f32, refuse_f64, refuse_i32};
    int share = mc->n_kv_heads < t ? t / mc->n_kv_heads : 1;
    *kv = (struct tfm_comm){i % share, share, NULL, refuse_f32, refuse_f64, refuse_i32};
    tfm_tp_init(tp, mc, t, i, t > 1 ? comm : NULL, share > 1 ? kv : NULL);
}

static void to_dev_slices(const struct tfm_slice *s, int n, int copy_data,
                          struct dev_slice *out, int max)
{
    for (int k = 0; k < n && k < max; k++)
        out[k] = (struct dev_slice){.tensor = s[k].tensor,
                                    .full_rows = s[k].full_rows,
                                    .full_cols = s[k].full_cols,
                                    .r0 = s[k].r0,
                                    .nr = s[k].nr,
                                    .c0 = s[k].c0,
                                    .nc = s[k].nc,
                                    .data = copy_data ? s[k].local : NULL};
}

/* The geometry of shard (t, i), computed on first use. */
static const struct cpu_geometry *geometry(struct device *d, int t, int i)
{
    for (int k = 0; k < d->n_geo; k++)
        if (d->geo[k].t == t && d->geo[k].i == i) return &d->geo[k];
    struct tfm_tp tp;
    struct tfm_comm comm, kv;
    cpu_shard_geometry(&d->mc, t, i, &tp, &comm, &kv);
    struct tfm_params shape;
    tfm_params_alloc(&shape, &tp.local); /* zeroed, never written: no pages touched */
    int n = tfm_tp_slices(&tp, &shape, NULL, 0);
    struct tfm_slice *s = xmalloc((size_t)n * sizeof *s);
    tfm_tp_slices(&tp, &shape, s, n);
    struct cpu_geometry g = {t, i, n, xmalloc((size_t)n * sizeof *g.s)};
    to_dev_slices(s, n, 0, g.s, n);
    free(s);
    tfm_params_free(&shape);
    if (d->n_geo == (int)(sizeof d->geo / sizeof d->geo[0])) { /* full: drop the oldest */
        free(d->geo[0].s);
        memmove(d->geo, d->geo + 1, (size_t)(d->n_geo - 1) * sizeof *d->geo);
        d->n_geo--;
    }
    d->geo[d->n_geo] = g;
    return &d->geo[d->n_geo++];
}

void cpu_shard_forget_geometry(struct device *d)
{
    for (int k = 0; k < d->n_geo; k++) free(d->geo[k].s);
    d->n_geo = 0;
}

int cpu_shard_slices(struct device *d, int t, int i, const struct tfm_params *p,
                     struct dev_slice *out, int max)
{
    if (p) { /* this rank's own shard: its tp describes p */
        int n = tfm_tp_slices(&d->sh.tp, p, NULL, 0);
        struct tfm_slice *s = xmalloc((size_t)n * sizeof *s);
        tfm_tp_slices(&d->sh.tp, p, s, n);
        to_dev_slices(s, n, 1, out, max);
        free(s);
        return n;
    }
    const struct cpu_geometry *g = geometry(d, t, i);
    for (int k = 0; k < g->n && k < max; k++) out[k] = g->s[k];
    return g->n;
}

void cpu_shard_free(struct cpu_shard *sh)
{
    tfm_params_free(&sh->p);
    free(sh->stage);
    sh->stage = NULL;
    cpu_stage16_free(sh);
    cpu_comm_free_owned(&sh->kv);
    sh->t = 0;
}

/* The kv sub-group (K < t): the ranks sharing one replicated kv head. */
static void bind_kv(struct cpu_shard *sh, int n_kv_heads, MPI_Comm group)
{
    cpu_comm_free_owned(&sh->kv);
    if (n_kv_heads >= sh->t) {
        cpu_comm_bind(&sh->kv, MPI_COMM_NULL);
        return;
    }
    int share = sh->t / n_kv_heads;
    MPI_Comm kv;
    MPI_CHECK(MPI_Comm_split(group, sh->i / share, sh->i, &kv));
    cpu_comm_bind(&sh->kv, kv);
    sh->kv.owned = 1;
}

void cpu_shard_place(struct device *d, int t, int i, MPI_Comm group)
{
    struct cpu_shard *sh = &d->sh;
    char err[256];
    if (tfm_tp_check(&d->mc, t, err, sizeof err))
        FATAL("a TP-%d place on device cpu: %s", t, err);
    int same = sh->t == t && sh->i == i;
    if (!same) {
        cpu_trainer_drop(d); /* it holds the old shard's weights and optimizer */
        cpu_shard_free(sh);
        sh->t = t;
        sh->i = i;
    }
    cpu_comm_bind(&sh->comm, t > 1 ? group : MPI_COMM_NULL);
    if (t > 1 && sh->comm.tc.size != t)
        FATAL("a TP-%d shard on a communicator of %d ranks", t, sh->comm.tc.size);
    bind_kv(sh, d->mc.n_kv_heads, group);
    tfm_tp_init(&sh->tp, &d->mc, t, i, t > 1 ? &sh->comm.tc : NULL,
                sh->kv.comm != MPI_COMM_NULL ? &sh->kv.tc : NULL);
    if (same) return;
    tfm_params_alloc(&sh->p, &sh->tp.local);
    sh->stage = xmalloc(sh->p.n * sizeof *sh->stage);
    if (d->full_version >= 0 && d->full_version == d->version) {
        tfm_tp_shard(&sh->tp, &d->full, &sh->p);
    } else if (d->lazy_version >= 0 && d->lazy_version == d->version) {
        char e[1024]; /* only this shard's bytes are read */
        if (!cpu_stage16_read_hf(d, d->hf_source) &&
            hf_load_slices(d->hf_source, &sh->tp, &sh->p, e, sizeof e))
            FATAL("model.checkpoint: %s", e);
    } else {
        d->version = -1; /* until the sync that follows the plan */
    }
    d->staged_version = -1;
}
