/* threads.h - --threads auto: the CPU thread count a run trains with,
 * chosen while it runs. On a machine another job keeps busy, threads that
 * meet at every barrier lose more than the CPU they are denied: the one a
 * barrier waits for is often off its core, and the other gives up its own
 * share meanwhile (docs/performance.md, "A loaded machine"). So when the
 * run's threads get well under their cores (CPU time over wall time), it
 * tries half the threads for a window and keeps whichever trained more
 * samples per second; from fewer threads it tries all of them again, at
 * once when they would get their cores back, else after a wait that
 * doubles at each try lost. Every choice is a measurement: gpt-nano's large
 * matrix products keep 2 threads faster even beside busy loops.
 *
 * The decisions are a pure function of what they are given (the clock, the
 * process's CPU time, the samples), so tests drive them with made-up
 * figures; src/train/run.c gives them the real ones. */
#ifndef BFIT_TRAIN_THREADS_H
#define BFIT_TRAIN_THREADS_H

#include <stdint.h>

#define BFIT_TGOV_WINDOW_S 2.0 /* a measurement: at least this long ... */
#define BFIT_TGOV_WINDOW_STEPS 4 /* ... and this many steps (the first after a change not counted) */
#define BFIT_TGOV_BUSY 0.6     /* threads short of their cores: CPU / (wall x threads) under this */
#define BFIT_TGOV_GAIN 1.03    /* a try is kept when it is this much faster */
#define BFIT_TGOV_WAIT_S 20.0  /* first wait before trying again; doubles, up to ... */
#define BFIT_TGOV_WAIT_MAX_S 320.0

typedef enum { BFIT_TGOV_SETTLED = 0, BFIT_TGOV_TRYING } bfit_tgov_state;

typedef struct bfit_tgov {
    int max, cur;            /* all the threads, and those the ops run on now */
    bfit_tgov_state state;
    int from;                /* trying: the count tried against */
    double from_rate;        /*   and its samples/s */
    /* the window in progress */
    int skip;                /* steps still to leave out (after a change: ops made again) */
    int steps;
    double t0, cpu0, secs;   /* its start (clock, CPU), and its steps' training seconds */
    int64_t samples;
    double idle0;            /* the machine's idle core-seconds at its start (-1: unknown) */
    double last_rate, last_busy; /* the last window's samples/s and CPU use per thread */
    /* when to try again, and the wait after a lost try, per direction */
    double next_down, next_up, wait_down, wait_up;
    int up_idle;             /* the try up was for idle cores ... */
    int idle_lied;           /*   which turned out not to be ours (another cgroup's): ignored since */
    int changes;             /* thread changes made */
    char why[200];           /* what the last step decided, "" when nothing */
} bfit_tgov;

/* Start at max threads (>= 1) at clock now, with cpu the process's CPU
 * seconds and idle the machine's idle core-seconds (-1: unknown). */
void bfit_tgov_init(bfit_tgov *g, int max, double now, double cpu, double idle);
/* A step took secs of training for samples; now, cpu and idle as above.
 * Returns the thread count to run on from now (g->cur: no change); g->why
 * says what was decided ("" when nothing). The caller makes a change and
 * then calls bfit_tgov_changed. */
int bfit_tgov_step(bfit_tgov *g, double secs, int64_t samples, double now, double cpu, double idle);
/* Whether the next bfit_tgov_step at clock now starts or closes a window,
 * the only steps that read cpu and idle (the others may pass anything):
 * the caller reads the process's CPU time and /proc/stat only then. */
int bfit_tgov_needs_readings(const bfit_tgov *g, double now);
/* The change to t was made at now: a new window starts (its first step,
 * which makes the ops again, not counted). */
void bfit_tgov_changed(bfit_tgov *g, int t, double now, double cpu, double idle);

#endif
