/* dist.h - data-parallel training's own logic, below the run and above
 * the group of processes (device/comm.h): the status word every rank
 * brings to a step boundary and the exchange that gives each rank all of
 * them; the shares of the effective batch E (pure: samples in proportion
 * to each rank's measured throughput at its own micro-batch, integers that
 * add up to E, changed only for a real gain); and the checksum that shows
 * the ranks hold the same weights. docs/distributed.md has the protocol. */
#ifndef BFIT_DIST_H
#define BFIT_DIST_H

#include <stdint.h>

#include "device/comm.h"

#define BFIT_DIST_MSG 200 /* bytes of text a status word carries */

/* What one rank brings to a step boundary. Fixed size, exchanged as bytes:
 * the ranks run the same build on the same kind of machine. */
typedef struct bfit_dist_word {
    int32_t code;             /* BFIT_OK, or the error that stops this rank (msg says what) */
    int32_t stopped;          /* a stop: BFIT_ESTOPPED (asked to) or BFIT_ENOMEM (memory did not come back) */
    int32_t m;                /* its micro-batch now */
    int32_t prev_m;           /* at the previous boundary */
    int32_t E;                /* the effective batch its controller decided */
    int32_t reason;           /* why its micro-batch changed (bfit_batch_reason; 0 none) */
    int32_t samples;          /* after the micro-steps: the samples it trained on */
    int32_t ooms;             /* out-of-memory retries in this step */
    int32_t flag;             /* a stop: the stop flag's value here (the command line's: the signal) */
    int64_t rate;             /* its samples/s at m in 1/1024ths (0: not measured yet) */
    uint64_t check;           /* a checksum the ranks compare (configuration, weights) */
    uint64_t hsum;            /* tests (sample_check): the epoch's sample hashes summed, */
    int64_t hn;               /*   and how many */
    double lr_scale;          /* its controller's lr scale */
    double loss;              /* after the micro-steps: the summed loss of its samples */
    double sq;                /* the squared norm of its local mean gradient (-1: not taken) */
    double secs;              /* its seconds of compute in the step */
    char msg[BFIT_DIST_MSG];  /* the error, or why its micro-batch changed */
} bfit_dist_word;

typedef struct bfit_dist bfit_dist;

/* Join the job's group (MPI initialised unless the program did) with the
 * arrays every step needs, allocated here: the steps allocate nothing. */
int bfit_dist_new(bfit_dist **out);
/* Open the device's collectives (the gradient sum) over the group. */
int bfit_dist_attach(bfit_dist *d, bfit_device *dev);
void bfit_dist_free(bfit_dist *d);
int bfit_dist_rank(const bfit_dist *d);
int bfit_dist_size(const bfit_dist *d);

/* Every rank's word into *all (size of them, in rank order). */
int bfit_dist_exchange(bfit_dist *d, const bfit_dist_word *mine, const bfit_dist_word **all);
/* The first rank whose word says it failed or stopped (-1: none). */
int bfit_dist_failed(const bfit_dist_word *all, int n);
/* The first rank whose check differs from rank 0's (-1: all agree). */
int bfit_dist_disagree(const bfit_dist_word *all, int n);

/* The in-place sum of count f32 of device memory over the group. */
int bfit_dist_sum(bfit_dist *d, void *buf, size_t count);

/* ---- shares (pure) -------------------------------------------------------- */

/* E samples split among n ranks in proportion to the weights w[] (> 0):
 * integers that add up to E, each at least 1 when E >= n; the remainder
 * goes to the largest fractions, the lower rank first on a tie. */
void bfit_dist_split(int E, int n, const int64_t *w, int *share);

/* 1 when the step would end at least `gain` (0.1 = 10%) sooner with shares
 * `next` than with `cur`, predicting each rank's time as share / w. Integer
 * arithmetic: every rank decides alike. */
int bfit_dist_faster(int n, const int64_t *w, const int *cur, const int *next, double gain);

/* The weights of the split from the ranks' measured rates (1/1024 samples/s;
 * 0: not measured): the rates, a rank not measured yet counting as the mean
 * of those measured; all 1 (equal shares) when none is. */
void bfit_dist_weights(int n, const int64_t *rate, int64_t *w);

/* The shares of E for the next step, given every rank's word: kept from
 * the last step unless E changed, or another split has been faster by gain
 * at `confirm` boundaries in a row. A step of step_E < E samples (an
 * epoch's last) is split alike, leaving E's. Returns 1 when E's shares
 * changed, why saying so for the log. */
int bfit_dist_plan(bfit_dist *d, int E, int step_E, const bfit_dist_word *all, double gain, int confirm, char *why,
                   size_t n);
/* This step's shares (size of them), E's shares (the same but in an
 * epoch's last step) and this rank's first sample in the step. */
const int *bfit_dist_shares(const bfit_dist *d);
const int *bfit_dist_shares_of_E(const bfit_dist *d);
int bfit_dist_offset(const bfit_dist *d);

/* The shares in force, for a checkpoint: the E they split (0: none yet),
 * E's shares (size of them) and the boundaries in a row at which another
 * split was faster. */
void bfit_dist_state_get(const bfit_dist *d, int *E, int *streak, const int **share);
/* Put them back (a run resumed with as many ranks): BFIT_EINVAL, nothing
 * changed, unless they are shares of E (each >= 0, adding up to E). */
int bfit_dist_state_set(bfit_dist *d, int E, int streak, const int *share);

/* Host memory: every rank's n bytes, in rank order, into all (size * n). */
int bfit_dist_allgather(bfit_dist *d, const void *mine, void *all, size_t n);

/* CRC-32 (zlib's) of n bytes continuing crc (start with 0). */
uint64_t bfit_dist_crc(uint64_t crc, const void *p, size_t n);

#endif
