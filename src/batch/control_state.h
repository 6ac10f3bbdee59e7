/* control_state.h - the batch controller's state, taken out and put back:
 * what a checkpoint keeps so a resumed run decides exactly as the
 * uninterrupted one would (the configuration is the caller's to give again).
 * It is the controller's whole state: struct bfit_controller holds one
 * (control_int.h), so nothing can be left out of a copy. */
#ifndef BFIT_CONTROL_STATE_H
#define BFIT_CONTROL_STATE_H

#include "batchfit.h"
#include "batch/goodput.h"
#include "batch/noise.h"

#define BFIT_CONTROLLER_NTPUT 32 /* micro-batches whose throughput is remembered */

typedef struct bfit_controller_tput {
    int m, n;        /* micro-batch, measurements (0: slot free) */
    double rate;     /* EMA of samples per second of compute */
    uint64_t used;   /* for replacement */
    double var;      /* exponentially weighted variance of the measurements (their spread) */
} bfit_controller_tput;

/* Consecutive steps' norms (the noise scale without accumulation) and
 * --batch auto's ladder and goodput bookkeeping. */
typedef struct bfit_controller_auto {
    int prev_norms, prev_b;    /* the previous step's norms are held; its samples */
    double prev_g2;            /*   and its mean gradient's squared norm */
    gp_ladder lad;
    double speed;              /* EMA of ladder-predicted / measured micro-step seconds (0: none) */
    double overhead;           /* EMA of a step's seconds outside its micro-steps and data */
    int64_t seen;              /* samples observed */
    int64_t change_seen;       /* samples seen at the last E change */
    int64_t ramp_seen;         /* samples seen when the lr ramp started */
    int pending_E, pending_n;  /* the better E and the steps in a row it has won */
    int64_t nobs;              /* steps observed */
    int ladders;               /* ladders begun */
    int64_t ladder_seen;       /* samples seen when the last ladder ended */
    int ladder_ran;            /* the step being observed ran a ladder (its time is not the step's) */
    /* the plateau check: the training loss in windows of auto_interval samples */
    double plat_sum;           /* loss x samples in the open window */
    int64_t plat_n;            /*   and its samples */
    double plat_best;          /* the lowest window mean since the last E change */
    int plat_windows;          /* windows closed since the last E change */
    int plat_stalls;           /* windows in a row without auto_plateau of progress */
    int lr_ref;                /* the E the lr is for now: E0 doubled by each plateau move (0: E0) */
} bfit_controller_auto;

typedef struct bfit_controller_state {
    uint64_t capacity, free;   /* the last observed memory */
    int m, E, E0;
    bfit_noise noise;          /* the noise scale's averages */
    int started, decided, observed, oom_step;
    int64_t step;              /* the step last decided */
    bfit_batch_decision d;     /* and its decision */
    double scale, ramp_from, ramp_to; /* lr scale and the re-warmup ramp */
    int64_t ramp_start;
    int streak, at_m;          /* hysteresis */
    int64_t hold_until, holdoff, last_grow, last_E_change;
    int prev_m;                /* the micro-batch before the last change of m (0: none) */
    int64_t m_changed;         /* the step of that change */
    uint64_t free_at_shrink;   /* free memory when m last shrank: growth is "memory freed" only above it */
    bfit_controller_tput tp[BFIT_CONTROLLER_NTPUT];
    uint64_t tick;
    bfit_controller_auto au;
    double loader_rate;        /* EMA of the loader's observed samples/s (0: not known) */
    int loader_held;           /* a hold by the loader was said and still holds */
} bfit_controller_state;

/* Copy the state out. */
void bfit_controller_state_get(const bfit_controller *c, bfit_controller_state *s);
/* Put a state back (from the same configuration): BFIT_EINVAL, the
 * controller unchanged, for a state it cannot have (m or E below 1, a
 * throughput slot or noise average that is not finite...). */
int bfit_controller_state_set(bfit_controller *c, const bfit_controller_state *s);
/* The memory there is now (the capacity, and what is free for a step),
 * told before the first decision or between steps: the controller learns
 * it otherwise only from a step it observed. */
void bfit_controller_set_memory(bfit_controller *c, uint64_t capacity, uint64_t free_bytes);

#endif
