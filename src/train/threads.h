/* threads.h - the CPU threads a run trains with, and the cores they run
 * on, chosen while it runs: under --threads auto both, otherwise (unless
 * --no-pack) the cores only, since packing keeps the count and so the
 * results to the bit. On a machine another job keeps
 * busy, threads that meet at every barrier lose more than the CPU they are
 * denied: the one a barrier waits for is often off its core, and the other
 * gives up its own share meanwhile (docs/performance.md, "A loaded
 * machine"). So when the run's threads get well under their cores (CPU
 * time over wall time), it tries for a window all of them packed onto half
 * the cores (src/device/cpu_pin.c: threads sharing a core never wait for a
 * sibling that is off its own, and the kernel moves the other job to the
 * rest), then, if that lost, half the threads; each is kept only if it
 * trained more samples per second. From either it tries all the threads on
 * all the cores again, at once when they would get their cores back, else
 * after a wait that doubles at each try lost. Every choice is a
 * measurement: which wins depends on the model and the load.
 *
 * The decisions are a pure function of what they are given (the clock, the
 * process's CPU time, the samples), so tests drive them with made-up
 * figures; src/train/run.c gives them the real ones. */
#ifndef BFIT_TRAIN_THREADS_H
#define BFIT_TRAIN_THREADS_H

#include <stddef.h>
#include <stdint.h>

#define BFIT_TGOV_WINDOW_S 2.0 /* a measurement: at least this long ... */
#define BFIT_TGOV_WINDOW_STEPS 4 /* ... and this many steps (the first after a change not counted) */
#define BFIT_TGOV_BUSY 0.6     /* threads short of their cores: CPU / (wall x threads) under this */
#define BFIT_TGOV_GAIN 1.03    /* a try is kept when it is this much faster */
#define BFIT_TGOV_WAIT_S 20.0  /* first wait before trying again; doubles, up to ... */
#define BFIT_TGOV_WAIT_MAX_S 320.0

typedef enum { BFIT_TGOV_SETTLED = 0, BFIT_TGOV_TRYING } bfit_tgov_state;

/* A setting: the threads the ops run on, and the CPUs those run on. */
typedef struct bfit_tgov_set {
    int threads, cpus;
} bfit_tgov_set;

typedef struct bfit_tgov {
    int max, top_cpus;       /* all the threads, and the CPUs they spread over */
    int can_pack;            /* they may be packed onto half of those */
    int keep_count;          /* the count stays: packing is the only try */
    bfit_tgov_set cur;       /* the setting now */
    bfit_tgov_state state;
    bfit_tgov_set from;      /* trying: the setting tried against */
    double from_rate;        /*   and its samples/s */
    int pack_next;           /* the next try down packs the threads (else halves them) */
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
    char why[256];           /* what the last step decided, "" when nothing */
} bfit_tgov;

/* Start at max threads (>= 1) spread over their CPUs, at clock now, with
 * cpu the process's CPU seconds and idle the machine's idle core-seconds
 * (-1: unknown); cpus is how many CPUs the threads may run on where they
 * may be packed (0: they may not). */
void bfit_tgov_init(bfit_tgov *g, int max, int cpus, double now, double cpu, double idle);
/* The count stays max from now: packing is the only try down, and one
 * lost waits (doubling) as a lost halving does, instead of halving. */
void bfit_tgov_keep_count(bfit_tgov *g);
/* A step took secs of training for samples; now, cpu and idle as above.
 * Returns the setting to run on from now (g->cur: no change); g->why says
 * what was decided ("" when nothing). The caller makes a change and then
 * calls bfit_tgov_changed, or bfit_tgov_no_pack where packing failed. */
bfit_tgov_set bfit_tgov_step(bfit_tgov *g, double secs, int64_t samples, double now, double cpu, double idle);
/* The two tries down from the top: packed, and half the threads. */
bfit_tgov_set bfit_tgov_packed(const bfit_tgov *g);
bfit_tgov_set bfit_tgov_halved(const bfit_tgov *g);
bfit_tgov_set bfit_tgov_top(const bfit_tgov *g);
int bfit_tgov_same(bfit_tgov_set a, bfit_tgov_set b);
/* "2 threads", "2 threads on 1 core" */
void bfit_tgov_name(const bfit_tgov *g, bfit_tgov_set s, char *buf, size_t n);
/* Whether the next bfit_tgov_step at clock now starts or closes a window,
 * the only steps that read cpu and idle (the others may pass anything):
 * the caller reads the process's CPU time and /proc/stat only then. */
int bfit_tgov_needs_readings(const bfit_tgov *g, double now);
/* The change to s was made at now: a new window starts (its first step,
 * which makes the ops again, not counted). */
void bfit_tgov_changed(bfit_tgov *g, bfit_tgov_set s, double now, double cpu, double idle);
/* Packing the threads failed (the system refused): no packing from now,
 * the setting stays g->cur. */
void bfit_tgov_no_pack(bfit_tgov *g);

#endif
