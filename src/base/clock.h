/* clock.h - monotonic seconds, for timing steps, probes and data waits
 * (train/log.c's bfit_now adds a test clock on top of it). */
#ifndef BFIT_CLOCK_H
#define BFIT_CLOCK_H

double bfit_clock_mono(void);

#endif
