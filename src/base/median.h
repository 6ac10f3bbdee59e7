/* median.h - the median of measurements (timings are noisy: a step
 * disturbed by another process moves the median little). */
#ifndef BFIT_MEDIAN_H
#define BFIT_MEDIAN_H

/* The median of v[0..n), n >= 1 (the mean of the middle two for even n);
 * sorts v in place. */
double bfit_median(double *v, int n);

#endif
