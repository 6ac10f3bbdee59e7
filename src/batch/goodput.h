/* goodput.h - the arithmetic of `--batch auto` (src/batch/goodput.c): the
 * ladder of measured micro-batch times, the time of a step of E samples in
 * micro-batches of m, the grid of effective batches tried, and the
 * statistical efficiency of E at a noise scale. Pure: the controller
 * (control.c) holds the state and decides; docs/dynamic.md states the rules. */
#ifndef BFIT_GOODPUT_H
#define BFIT_GOODPUT_H

#include <stdint.h>

#define GP_RUNGS 24   /* sizes a ladder measures at most (doubling: 2^23) */
#define GP_GRID 64    /* effective batches a grid holds at most */

/* One forward and backward per rung, timed by the trainer, in ascending m.
 * Plain data (it is part of the controller's checkpointed state). */
typedef struct gp_ladder {
    int m[GP_RUNGS];
    double secs[GP_RUNGS];
    int n;             /* rungs measured */
    int next;          /* the size to measure next; 0: done */
    int limit;         /* the largest size worth measuring */
    int stalls;        /* rungs in a row not faster than the best by the gain */
    int reach;         /* measured at least this far: the micro-batch in use */
    double best_rate;  /* samples/s of the fastest rung */
    /* A move the rungs propose is timed again before it is made (the
     * controller's, control_auto.c): the size proposed, then the size in
     * use, one after the other, so that a machine whose pace changed
     * between rungs does not move the run. */
    int confirm;         /* the size proposed, being timed again (0: not confirming) */
    int against;         /* the size in use it is timed against */
    double confirm_secs; /* confirm's time in this confirmation (0: not yet timed) */
    int rounds;          /* confirmations this ladder began */
    int allow;           /* after one: the only size a throughput move may go to (-1: none; 0: any) */
    /* A ladder extended past its limit (E moved where its sizes no longer
     * reach): its last rung timed again for the machine's pace now, the new
     * rungs put at the old ones' pace, so that the sizes already compared
     * are not compared again on new timings. */
    int ext_ref;         /* the rung timed again (0: not extending) */
    double ext_pace;     /* its old seconds over its new ones (0: not timed yet) */
} gp_ladder;

/* Start at `first` (a power of two), going up to limit, and at least to
 * reach (within limit). */
void bfit_gp_ladder_start(gp_ladder *l, int first, int limit, int reach);
/* Add the rung m (secs <= 0: it could not run, which ends the ladder) and
 * choose the next: twice m, then limit itself; done once two rungs in a row
 * are not `gain` faster than the best so far (the rate has levelled off)
 * and m has reached `reach`. */
void bfit_gp_ladder_record(gp_ladder *l, int m, double secs, double gain);
/* A ladder that ended at its limit goes on to a larger one: its last rung
 * again first (the pace), then doubling from there, each new rung's time
 * multiplied by the pace. Returns 0 (and changes nothing) unless the ladder
 * ended at its limit, below the new one. */
int bfit_gp_ladder_extend(gp_ladder *l, int limit);
/* Seconds of one forward and backward of m samples: interpolated linearly
 * in m between rungs; below the first and above the last rung at their
 * samples/s. < 0 when the ladder is empty. */
double bfit_gp_micro_seconds(const gp_ladder *l, int m);
/* Forward and backward seconds of a step of E samples in micro-batches of
 * m: (k - 1) of m and the last of E - (k - 1) m. */
double bfit_gp_step_seconds(const gp_ladder *l, int E, int m);

/* The effective batches auto mode chooses among: powers of two and 1.5
 * times them (16, 24, 32, 48, ...) within [lo, hi], with lo and hi. Sorted;
 * returns the count. */
int bfit_gp_grid(int lo, int hi, int *out, int max);

/* The statistical efficiency of E relative to E0 at noise scale B
 * (McCandlish et al. 2018: steps to a target S(E) = S_min (1 + B / E), so
 * samples E S(E) = E_min (1 + E / B)): the samples E0 needs over those E
 * needs, (B + E0) / (B + E), for E above E0; 1 at E0 and below. */
double bfit_gp_efficiency(double B, double E, double E0);

#endif
