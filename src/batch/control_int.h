/* control_int.h - the batch controller's insides, shared by its files:
 * control.c (memory, micro-batch, schedules, adaptive E, next/observe),
 * control_auto.c (--batch auto's ladder, goodput and plateau moves),
 * control_cfg.c (defaults, checks, names) and control_state.c (what a
 * checkpoint keeps). The state is one struct, so taking it out and putting
 * it back copies it whole. */
#ifndef BFIT_CONTROL_INT_H
#define BFIT_CONTROL_INT_H

#include "batchfit.h"
#include "batch/control_state.h"

struct bfit_controller {
    bfit_controller_config cfg;
    bfit_batch_point *sched;   /* our copy of cfg.schedule */
    bfit_controller_state st;  /* everything that changes after bfit_controller_new */
};

/* control_cfg.c: BFIT_EINVAL naming what is wrong. */
int bfit_ctl_check_config(const bfit_controller_config *cfg);

/* control.c: the one memory predicate (docs/dynamic.md) and its solver. */
int bfit_ctl_fits(const bfit_controller *c, int m);
int bfit_ctl_largest_fit(const bfit_controller *c, int hi);
/* The micro-batch changes (the streak and the steps at it start again). */
void bfit_ctl_set_m(bfit_controller *c, int m);
/* Append to a decision's why (printf) / record its first reason. */
void bfit_ctl_say(bfit_batch_decision *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void bfit_ctl_because(bfit_batch_decision *d, bfit_batch_reason r);
/* What a step at `rate` samples/s of compute can run: no more than the
 * loader makes (docs/dynamic.md, "The loader"). */
double bfit_ctl_bound(const bfit_controller *c, double rate);
/* A change the compute alone would make (held = 1) is not made because the
 * loader bounds the speed: said in d->held (printf) when the hold starts,
 * not again while it lasts; held = 0 ends it. */
void bfit_ctl_hold(bfit_controller *c, bfit_batch_decision *d, int held, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The E the lr is for (E0, doubled by each plateau move). */
int bfit_ctl_lr_ref(const bfit_controller *c);
/* E changed at step: the lr scale moves toward rule(E / lr_ref). */
void bfit_ctl_rescale(bfit_controller *c, int64_t step);

/* control_auto.c: --batch auto's parts of next and observe. */
void bfit_ctl_auto_replan(bfit_controller *c, int64_t step, bfit_batch_decision *d);
void bfit_ctl_try_plateau(bfit_controller *c, int64_t step, bfit_batch_decision *d);
void bfit_ctl_try_goodput(bfit_controller *c, int64_t step, bfit_batch_decision *d);
void bfit_ctl_plateau_observe(bfit_controller *c, const bfit_step_stats *s);
void bfit_ctl_ladder_when(bfit_controller *c);
void bfit_ctl_observe_speed(bfit_controller *c, const bfit_step_stats *s, double compute);

#endif
