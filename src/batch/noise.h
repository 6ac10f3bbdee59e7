/* noise.h - the gradient noise scale estimator (src/batch/noise.c). */
#ifndef BFIT_NOISE_H
#define BFIT_NOISE_H

#include "batchfit.h"
#include <stdint.h>

/* ---- the gradient noise scale (McCandlish et al. 2018, appendix A.1) ----- */
/* From squared norms of mean gradients at two batch sizes b < B:
 *   |G|^2 ~ (B |G_B|^2 - b |G_b|^2) / (B - b)
 *   tr(S) ~ (|G_b|^2 - |G_B|^2) / (1/b - 1/B)
 * each smoothed by its own EMA; B_noise = tr(S)_ema / |G|^2_ema. The ratio of
 * two EMAs started together needs no bias correction. */
typedef struct bfit_noise {
    double alpha;            /* EMA weight of a new estimate */
    double g2_ema, s_ema;    /* smoothed |G|^2 and tr(Sigma) */
    double g2_last, s_last;  /* the last unsmoothed estimates */
    int64_t n;               /* estimates taken */
} bfit_noise;

/* alpha in (0, 1] (BFIT_EINVAL otherwise). */
int bfit_noise_init(bfit_noise *nz, double alpha);
/* One estimate from |G_b|^2 at b and |G_B|^2 at B; BFIT_EINVAL unless
 * 0 < b < B and both norms are finite and >= 0. */
int bfit_noise_update(bfit_noise *nz, double b_small, double g2_small, double b_big, double g2_big);
/* One estimate from a step of k >= 2 micro-batches: g2_micro[j] the squared
 * norm of micro-batch j's mean gradient over size[j] samples, g2_full that of
 * the step's mean over B = sum size[j]. Unequal sizes are exact in
 * expectation: b is their harmonic mean and |G_b|^2 the plain mean of the
 * g2_micro, since E|G_bj|^2 = |G|^2 + tr(S) / b_j. */
int bfit_noise_update_step(bfit_noise *nz, int k, const double *g2_micro, const int *size, double g2_full);
/* One estimate from two batches of b1 and b2 samples (two consecutive
 * steps): their mean gradients' squared norms g2_1, g2_2 and the squared
 * norm of their difference d2. b = the two, B = b1 + b2, whose mean gradient
 * (b1 G1 + b2 G2) / B has the squared norm
 * (b1^2 g2_1 + b2^2 g2_2 + b1 b2 (g2_1 + g2_2 - d2)) / B^2. */
int bfit_noise_update_pair(bfit_noise *nz, double b1, double g2_1, double b2, double g2_2, double d2);
/* B_noise (>= 0; a negative tr(S) estimate reads 0); BFIT_ESTATE before any
 * estimate or while the smoothed |G|^2 is not positive. */
int bfit_noise_scale(const bfit_noise *nz, double *b_noise);

#endif
