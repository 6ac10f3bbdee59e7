/* solve.h - the one solver for "the largest micro-batch that fits", and the
 * budget a capacity leaves under a safety margin. The plan's solver and the
 * controller both use it, each with its own predicate. */
#ifndef BFIT_SOLVE_H
#define BFIT_SOLVE_H

#include <stdint.h>

/* Sizes above the bisection's answer that are also tried. */
#define BFIT_SOLVE_PROBE 8
/* Secant steps bfit_largest_under takes before it bisects. */
#define BFIT_SOLVE_SECANT 8

/* Does micro-batch m fit? (1: yes.) */
typedef int (*bfit_fits_fn)(void *ud, int m);

/* The largest m in [1, hi] with fits(m), 0 if none. The step's bytes grow
 * with m but for oneDNN's scratchpads, which can be smaller at some m than
 * at m - 1: this bisects as if they grew, then tries the BFIT_SOLVE_PROBE
 * sizes above its answer, and one that fits restarts the bisection above
 * it. Whatever it returns fits. */
int bfit_largest_fit(bfit_fits_fn fits, void *ud, int hi);

/* The bytes m needs; UINT64_MAX where it cannot be made (does not fit). */
typedef uint64_t (*bfit_need_fn)(void *ud, int m);

/* The largest m in [1, hi] with need(m) <= budget, with bfit_largest_fit's
 * guarantee (m fits; m + 1 and the probes above it do not), but starting
 * from m0, known to need n0 <= budget, with secant steps on the bytes:
 * where need is nearly affine in m (a training step's is), a few plans
 * instead of twenty. Without such an m0, it is bfit_largest_fit. */
int bfit_largest_under(bfit_need_fn need, void *ud, uint64_t budget, int hi, int m0, uint64_t n0);

/* What a capacity allows after a safety margin in [0, 1): capacity * (1 -
 * margin), rounded down. The margin leaves room for what the plan cannot see
 * (a co-tenant, allocator slack on other devices). */
uint64_t bfit_budget(uint64_t capacity, double margin);
/* The smallest capacity whose budget under margin holds need bytes (what to
 * tell a user to ask for). */
uint64_t bfit_capacity_for(uint64_t need, double margin);
/* The largest margin in whole percent whose budget of capacity holds need
 * bytes; -1 when none, not even 0 (what to tell a user whose margin is
 * what stops a run). */
int bfit_margin_for(uint64_t need, uint64_t capacity);

#endif
