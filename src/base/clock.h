/* clock.h - monotonic seconds, for timing steps, probes and data waits.
 * Tests of exact resumption set BFIT_TEST_CLOCK=TICK: the clock is then a
 * counter that advances TICK seconds at each reading, so what is decided on
 * measured time (--batch auto's ladder and goodput, a faster micro-batch)
 * is the same in every run that does the same work. Every reading of time
 * that a decision can see goes through here: one real clock leaking in (the
 * data stream's wait once did) makes those decisions depend on the load. */
#ifndef BFIT_CLOCK_H
#define BFIT_CLOCK_H

double bfit_clock_mono(void);
/* Seconds for timing work done on another thread (the data loader's):
 * the real clock, or under the test clock a counter of the calling
 * thread's own that advances a tick at each reading, so such threads
 * never move the clock the decisions read (their readings would interleave
 * with it by timing). */
double bfit_clock_thread(void);
/* This process's CPU time so far, every thread's, user and system
 * (getrusage): the real figure always (what the CPU monitor reports, and
 * what --threads auto weighs against the clock), 0 if unknown. */
double bfit_clock_process_cpu(void);
/* Tests: the test clock from now on, advancing tick seconds at each reading
 * (tick 0: the real clock again), over BFIT_TEST_CLOCK. For a test program
 * whose runs differ in the clock they need; call it between runs, not
 * while one reads the clock. */
void bfit_clock_test_tick(double tick);

#endif
