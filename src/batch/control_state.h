/* control_state.h - the batch controller's state, taken out and put back:
 * what a checkpoint keeps so a resumed run decides exactly as the
 * uninterrupted one would (the configuration is the caller's to give again).
 * Every field of the controller that changes after bfit_controller_new is
 * here; a field added to the controller must be added here too. */
#ifndef BFIT_CONTROL_STATE_H
#define BFIT_CONTROL_STATE_H

#include "batchfit.h"

#define BFIT_CONTROLLER_NTPUT 32 /* micro-batches whose throughput is remembered */

typedef struct bfit_controller_tput {
    int m, n;        /* micro-batch, measurements (0: slot free) */
    double rate;     /* EMA of samples per second of compute */
    uint64_t used;   /* for replacement */
} bfit_controller_tput;

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
    bfit_controller_tput tp[BFIT_CONTROLLER_NTPUT];
    uint64_t tick;
} bfit_controller_state;

/* Copy the state out. */
void bfit_controller_state_get(const bfit_controller *c, bfit_controller_state *s);
/* Put a state back (from the same configuration): BFIT_EINVAL, the
 * controller unchanged, for a state it cannot have (m or E below 1, a
 * throughput slot or noise average that is not finite...). */
int bfit_controller_state_set(bfit_controller *c, const bfit_controller_state *s);

#endif
