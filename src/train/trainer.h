/* trainer.h - the step loop: samples from the stream, micro-batches on the
 * device, gradients summed over the effective batch, optimizer steps, an
 * evaluation after each epoch, weights saved at the end.
 *
 * An optimizer step consumes exactly E samples (the last of an epoch may
 * have fewer) in micro-batches of m; the loss is normalised by the samples in
 * the optimizer step, so the gradient does not depend on the split. Every
 * micro-step reserves its memory before it computes (OOM-atomic); on an
 * out-of-memory the micro-batch shrinks to what the plan says fits now and
 * the same samples are taken again. */
#ifndef BFIT_TRAINER_H
#define BFIT_TRAINER_H

#include <stdio.h>

#include "batch/memsched.h"
#include "data/data.h"
#include "optim/optim.h"
#include "optim/schedule.h"

struct bfit_step_info;
struct bfit_eval_info;

typedef struct bfit_train_cfg {
    const char *model;         /* spec file */
    const char *data;          /* data set name or path */
    const char *test_data;     /* evaluate on this instead of data's test split (NULL: that) */
    int batch;                 /* effective batch E (adaptive: the initial E, 0 = batch_min) */
    int micro_batch;           /* 0: the plan chooses (largest that fits, at most E) */
    int adaptive;              /* --batch adaptive: E follows the gradient noise scale */
    int batch_min, batch_max;  /* adaptive bounds */
    const bfit_batch_point *batch_schedule; /* E by step or epoch; NULL: constant */
    int nbatch_schedule;
    int batch_instead_of_decay;/* a step lr schedule becomes batch increases by 1/gamma */
    int lr_rule;               /* bfit_lr_rule; -1: linear for SGD, sqrt for AdamW */
    int64_t rewarmup_steps;    /* lr re-warmup after E rises (default 100) */
    const bfit_mem_point *memory_schedule; /* capacity changes at steps; NULL: none */
    int nmemory_schedule;
    const bfit_dataset *train_set, *test_set; /* given data sets instead of `data` (tests) */
    /* called with the samples of every micro-batch that ran (tests count them) */
    void (*on_samples)(void *ud, const float *x, const int32_t *y, int n);
    void *on_samples_ud;
    /* called after every optimizer step, evaluation and batch change (ud: cb_ud) */
    void (*on_step)(void *ud, const struct bfit_step_info *s);
    void (*on_eval)(void *ud, const struct bfit_eval_info *e);
    void (*on_batch_change)(void *ud, const bfit_batch_decision *d, int64_t step);
    void *cb_ud;
    uint64_t fail_nth_alloc;   /* tests: the n-th device allocation of the run fails (0: off) */
    int epochs;
    int64_t epoch_samples;     /* 0: the whole training set per epoch; else this many (shuffled) */
    int64_t eval_samples;      /* 0: the whole test set; else the first this many */
    int64_t max_steps;         /* 0: no limit */
    int eval_batch;            /* micro-batch for evaluation (0: 1000, or what fits) */
    bfit_optim_cfg opt;
    double lr;
    bfit_lr_schedule sched;
    double clip;               /* max global gradient norm; 0: off */
    uint64_t seed;
    int threads;               /* CPU threads; 0: OpenMP's setting */
    bfit_device *device;       /* train on this device (not owned); NULL: open device_name */
    const char *device_name;   /* "cpu", "cuda:N", NULL: cpu */
    const bfit_host_alloc *host; /* CPU device blocks from here; NULL: aligned_alloc */
    uint64_t memory;           /* arena capacity; 0: what the device has free */
    double margin;             /* fraction of memory kept free when choosing m (default 0.1) */
    int augment;               /* images: random crop (pad 2) and horizontal flip */
    int prefetch;              /* background loading */
    int normalize;             /* per-channel mean/std from the training set */
    const char *save;          /* weights file (safetensors) or NULL */
    const char *log;           /* JSON-lines log or NULL */
    FILE *human;               /* progress and summary lines; NULL: quiet */
    double progress_interval;  /* seconds between plain progress lines when not a terminal */
} bfit_train_cfg;

/* Defaults: data fashion-mnist, E 128, auto micro-batch, 1 epoch, SGD momentum 0.9, lr 0.05,
 * constant schedule, seed 1, margin 0.1, prefetch and normalisation on. */
bfit_train_cfg bfit_train_cfg_default(void);

typedef struct bfit_train_result {
    int64_t steps;              /* optimizer steps */
    int64_t samples;            /* training samples consumed */
    int epochs;
    double train_loss;          /* mean over the last epoch */
    double test_loss, test_acc; /* after the last epoch */
    double seconds;             /* training wall time, evaluation excluded */
    int micro_batch;            /* the last micro-batch used */
    int ooms;                   /* out-of-memory events recovered from */
    int batch_changes;          /* decisions that changed m or E */
    int last_batch;             /* the last effective batch */
    double noise_scale;         /* the last gradient noise scale estimate (0: none) */
    uint64_t peak_bytes;        /* the arena's high-water mark */
} bfit_train_result;

/* What one optimizer step did. */
typedef struct bfit_step_info {
    int64_t step;               /* 0-based, of the run */
    int epoch;                  /* 0-based */
    int batch;                  /* samples in the step (E, or what was left of the epoch) */
    int m, k;                   /* micro-batch and micro-steps */
    double loss;                /* mean over the step's samples */
    double lr;                  /* the learning rate used */
    double seconds;             /* wall time of the step */
    double noise_scale;         /* the estimate after it (0: none yet) */
    uint64_t mem, capacity;     /* arena bytes held and the capacity after it */
    int epoch_end;              /* the step finished its epoch: evaluate now if wanted */
} bfit_step_info;

typedef struct bfit_eval_info {
    int epoch;                  /* epochs finished */
    int64_t step;
    double train_loss;          /* mean over the epoch's samples */
    double test_loss, test_acc;
    int64_t samples;
    double epoch_seconds;
    int m;                      /* the evaluation micro-batch */
} bfit_eval_info;

/* A training run one optimizer step at a time; bfit_train is its loop. */
typedef struct bfit_run bfit_run;

/* Check cfg (BFIT_EINVAL naming the field), set up device, model, data,
 * optimizer and controller, and write the log's start event. */
int bfit_run_new(const bfit_train_cfg *cfg, bfit_run **out);
/* Whether the run has taken every step it will (epochs, max_steps). */
int bfit_run_done(const bfit_run *r);
/* One optimizer step: its micro-steps (reserving memory before each, and
 * on out-of-memory shrinking and retrying the same samples), accumulation,
 * clipping, the optimizer and the controller's observation. */
int bfit_run_step(bfit_run *r, bfit_step_info *info);
/* Evaluate on the test split with the micro-batch that fits what is free
 * now (the training step's blocks are released first). */
int bfit_run_evaluate(bfit_run *r, bfit_eval_info *ev);
/* Write the weights (with the normalisation statistics) to path. */
int bfit_run_save(bfit_run *r, const char *path);
/* The figures so far. */
void bfit_run_result(const bfit_run *r, bfit_train_result *res);
/* Write the log's end event (after a good run) or error event (rc the failure). */
void bfit_run_finish(bfit_run *r, int rc);
void bfit_run_free(bfit_run *r);

/* The whole run: steps, an evaluation after each epoch, the weights saved. */
int bfit_train(const bfit_train_cfg *cfg, bfit_train_result *res);

/* Evaluate a model's saved weights on a data set's test split. */
typedef struct bfit_eval_cfg {
    const char *model, *weights, *data;
    int batch;                  /* 0: 1000 */
    int64_t samples;            /* 0: all */
    int threads;
    bfit_device *device;        /* NULL: open device_name (NULL: cpu) */
    const char *device_name;
    uint64_t memory;
    int normalize;              /* 0: none. 1: the statistics saved with the weights, or
                                   for older files those of data's training split */
} bfit_eval_cfg;

int bfit_evaluate(const bfit_eval_cfg *cfg, double *loss, double *acc, int64_t *n);

#endif
