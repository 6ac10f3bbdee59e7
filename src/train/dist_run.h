/* dist_run.h - a run's data-parallel side (dist_run.c): what a run holds
 * when it trains with other processes, and the hooks its setup and its
 * step call. A run that trains alone has none of it (bfit_run.dp NULL). */
#ifndef BFIT_DIST_RUN_H
#define BFIT_DIST_RUN_H

#include "batch/control_state.h"
#include "dist/dist.h"
#include "train/trainer.h"

/* What is a rank's own at a step boundary, beside what every rank holds
 * alike: its controller (its micro-batch and its throughput records, from
 * which it reports its speed), and its micro-steps (dropout seeds). A
 * checkpoint keeps every rank's, so that a resumed group goes on as the
 * uninterrupted one would. */
typedef struct run_rank {
    int m;                     /* its micro-batch */
    int prev_m;                /* at the last step boundary */
    uint64_t micro;            /* its micro-steps run */
    bfit_batch_decision d;     /* its controller's last decision */
    bfit_controller_state ctl;
} run_rank;

/* A group's part of a checkpoint: the shares in force and each rank's own. */
typedef struct run_group {
    int n;                     /* ranks */
    int64_t step;              /* the boundary it is of */
    int E, streak;             /* bfit_dist_state_get's */
    int *share;                /* n of them */
    run_rank *ranks;           /* n of them */
} run_group;

typedef struct run_dist {
    bfit_dist *d;
    int rank, size;
    int share, off;            /* this rank's samples of the step, and where they start in it */
    int prev_m;                /* its micro-batch at the last step boundary */
    int ooms;                  /* its out-of-memory retries in this step */
    int norms;                 /* the noise scale takes the ranks' gradient norms (adaptive) */
    double loss;               /* the step's summed loss over every rank */
    double comm;               /* the step's seconds in exchanges and the gradient sum */
    double sum_secs;           /* of which the gradient sum */
    double comm_total, sum_total; /* over the run */
    int64_t steps;             /* steps that summed gradients */
    double full_sq;            /* the squared norm of the step's (global) mean gradient */
    double *sq;                /* per rank: its local mean gradient's squared norm, */
    int *n;                    /*   and its samples (ranks with none left out) */
    int k;                     /*   how many */
    const bfit_dist_word *words; /* the last exchange's */
    bfit_dist_word mine;       /* what this rank brings */
    void *host;                /* the parameters on the host, for their checksum */
    uint64_t host_bytes;
    int together;              /* a failure that every rank learnt of (an exchange carried it) */
    int peer_flag, peer_rank;  /* another rank's stop: its stop flag's value (its signal), and which */
    run_group group;           /* rank 0: every rank's state at the last checkpoint sync */
    void *gather;              /*   the sync's buffer (size of its records) */
    int resumed;               /* this rank's own state came from a checkpoint */
} run_dist;

struct bfit_run;

/* Before a run is made: whether it trains data-parallel (cfg->dist and the
 * launcher), MPI set up if so, and the outputs only rank 0 writes (log,
 * report, weights, progress) taken from the other ranks' configuration, a
 * memory schedule for one rank from the others'. *size 1: alone. */
int bfit_run_dist_prepare(bfit_train_cfg *c, int *size, int *rank);
/* The group (MPI) for a run that trains data-parallel: r->dp. */
int bfit_run_dist_new(struct bfit_run *r);
/* After the set-up (rc its outcome here; every rank calls it, also after a
 * failure, so none waits for one that gave up): the group's collectives on
 * the run's device, the ranks shown to agree on the configuration and the
 * weights. */
int bfit_run_dist_setup(struct bfit_run *r, int rc);
void bfit_run_dist_free(struct bfit_run *r);
/* The step boundary: every rank's decision (rc its own outcome) exchanged;
 * a failure anywhere fails the step everywhere; the shares of E planned. */
int bfit_run_dist_begin(struct bfit_run *r, int rc, int E);
/* This rank's slice of the step's E samples into the staging; *n its size. */
int bfit_run_dist_take(struct bfit_run *r, int E, int *n);
/* After the micro-steps (rc their outcome): the status exchanged, then the
 * gradients summed over the group. */
int bfit_run_dist_end(struct bfit_run *r, int rc, int E);
/* The controller's view of the step: this rank's samples and compute
 * seconds, the ranks' gradient norms for the noise scale. */
void bfit_run_dist_observe(struct bfit_run *r, bfit_step_stats *ss);
/* The progress line's and the step event's account of the ranks. */
void bfit_run_dist_progress(const struct bfit_run *r, char *buf, size_t n);
void bfit_run_dist_step_json(const struct bfit_run *r, char *buf, size_t n);
/* After an epoch and at the end: batch-norm running statistics averaged
 * over the ranks, then every rank shown to hold the same parameters. */
int bfit_run_dist_sync(struct bfit_run *r);
/* cfg.sample_check: every rank's sums of the epoch's sample hashes, as the
 * last exchange (bfit_run_dist_sync's) brought them. */
void bfit_run_dist_sample_sums(const struct bfit_run *r, uint64_t *sum, int64_t *n);
/* Evaluation: this rank's slice [*from, *to) of the n samples, and the
 * ranks' sums of loss, right and samples (ev holds this rank's; rc its
 * outcome: every rank calls it) into ev. */
void bfit_run_dist_eval_slice(const struct bfit_run *r, int64_t n, int64_t *from, int64_t *to);
int bfit_run_dist_eval_sums(struct bfit_run *r, int rc, bfit_eval_info *ev);
/* Where checkpoints are kept (every rank calls it at each boundary where
 * one may be written): *due, rank 0's decision, becomes every rank's, and
 * every rank's own state reaches rank 0 (r->dp->group) for it. */
int bfit_run_dist_ckpt_sync(struct bfit_run *r, int *due);
/* Resuming: the checkpoint's group (NULL: it had none) puts back the shares
 * and this rank's own state when it had as many ranks; else the shares
 * start equal, and the log says why. */
int bfit_run_dist_resume(struct bfit_run *r, const run_group *g, const char *path);
/* Rank 0 (or a run alone): it writes the outputs. */
int bfit_run_dist_writer(const struct bfit_run *r);

#endif
