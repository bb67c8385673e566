/*
 * libra-sim's internals, shared by its loop (job_sim.c) and its simulated ranks
 * (sim_ranks.c). Times are emulated seconds.
 */
#ifndef LIBRA_SIM_INTERNAL_H
#define LIBRA_SIM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "libra/controller.h"
#include "libra/device_emu.h"
#include "libra/engine.h"
#include "libra/job_sim.h"
#include "libra/plan.h"
#include "libra/wire.h"

struct sim_event {           /* a message to rank 0, due now */
    double t;
    int64_t pad_;
    int tag, source;
    size_t off, len;         /* in sim.arena */
};

struct sim_timer {           /* a message to rank 0 at a later time */
    double t;
    int64_t seq;             /* order of setting: breaks ties */
    int tag, source;
    size_t len;
    unsigned char data[sizeof(struct wire_train_done)];
};

struct sim_train {           /* the training step whose shares are arriving */
    int step, msgs;
    double core_s, hybrid_s; /* slowest core / lent share */
    double busy_s;           /* compute GPU-seconds */
    float grad[EMU_PARAMS];
};

struct sim {
    const struct job_sim_config *c;
    double now, ts, tick;
    struct sim_event *ev;    /* (n_ev) FIFO, delivered from head */
    size_t head, n_ev, cap_ev;
    char *arena;
    size_t len_arena, cap_arena;
    char *msg;               /* delivery scratch */
    size_t cap_msg;
    struct sim_timer *timer; /* (n_timer) unordered */
    size_t n_timer, cap_timer;
    int64_t seq;
    /* the simulated ranks */
    struct plan plan, next;  /* the plan in force; the one being applied */
    struct engine *eng;      /* (world) the engine of each rollout leader */
    unsigned char *have_eng; /* (world) */
    double *next_ev;         /* (world) engine_next_event, cached */
    unsigned char *dirty;    /* (world) next_ev must be recomputed */
    int *leaders;            /* (n_leaders) ranks with an engine, ascending */
    int n_leaders;
    struct wire_turn_result *res;
    int n_res, cap_res;
    struct wire_buf pack;
    struct sim_train tr;
    struct job_sim_stats st;
};

/* job_sim.c: a message to rank 0 now / at time t; dropping the timers of a tag and
 * source (a join cancelled by a new plan). */
void sim_post(struct sim *s, int tag, int source, const void *data, size_t len);
void sim_post_at(struct sim *s, double t, int tag, int source, const void *data, size_t len);
void sim_cancel(struct sim *s, int tag, int source);

/* sim_ranks.c */
void sim_ranks_init(struct sim *s);
void sim_ranks_free(struct sim *s);
/* A message from rank 0 to rank dest, acted on now. */
void sim_rank_receive(struct sim *s, int dest, int tag, const void *buf, size_t len);
/* The earliest engine event; INFINITY if every engine is idle. */
double sim_ranks_next_event(struct sim *s);
/* Runs every engine with an event due by v up to v and posts its results. */
void sim_ranks_advance(struct sim *s, double v);

#endif
