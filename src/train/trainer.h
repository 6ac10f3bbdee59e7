/* trainer.h - the training run's internal face: its configuration as one
 * struct, its result, the run made from them, and evaluation. The public
 * API (bfit_config, bfit_run_*, bfit_train, bfit_evaluate) is in
 * batchfit.h and resolves the options into these (src/api/); the library's
 * own tests use them directly. */
#ifndef BFIT_TRAINER_H
#define BFIT_TRAINER_H

#include <stdio.h>

#include "batch/memsched.h"
#include "data/data.h"
#include "optim/optim.h"
#include "optim/schedule.h"
#include "nn/model.h"
#include "base/values.h"
#include "mem/arena.h"

/* Data-parallel training over MPI (docs/distributed.md). */
typedef enum {
    BFIT_DIST_OFF = 0,  /* this process trains alone */
    BFIT_DIST_ON,       /* with every process of the MPI job (alone in a job of one) */
    BFIT_DIST_AUTO      /* on when a launcher (mpirun, srun) started several processes */
} bfit_dist_mode;

/* "off", "on", "auto". */
int bfit_dist_mode_parse(const char *name, bfit_dist_mode *out);

/* ---- training ---------------------------------------------------------------- */
/* An optimizer step consumes exactly E samples (the last of an epoch may
 * have fewer) in micro-batches of m; the loss is normalised by the samples
 * in the optimizer step, so the gradient does not depend on the split.
 * Every micro-step reserves its memory before it computes (OOM-atomic); on
 * an out-of-memory the micro-batch shrinks to what the plan says fits now
 * and the same samples are taken again. Messages name configuration fields
 * (see bfit_errfield). */

typedef struct bfit_train_cfg {
    const char *model;         /* spec file, preset, or ONNX file */
    int init_random;           /* 1: draw every parameter, ignoring the starting weights a model file gives
                                  (an ONNX model's initializers); 0: the file's, where it has them */
    const char *init_weights;  /* start from these saved weights (train --save's safetensors), the optimizer
                                  state and the schedule afresh; NULL: init_random's */
    const char *data;          /* data set name or path */
    const char *test_data;     /* evaluate on this instead of data's test split (NULL: that) */
    bfit_csv_header csv_header;/* a CSV file's first row (auto) */
    int batch;                 /* effective batch E (adaptive: the initial E, 0 = batch_min) */
    int batch_tokens;          /* token models: batch, micro_batch, batch_min, batch_max, lr_ref_batch and
                                  the batch schedule count tokens that have a label, not sequences. A step
                                  takes whole sequences until their tokens reach E; a micro-batch of m
                                  tokens is planned as ceil(m / T) sequences of the longest length T, and
                                  one of shorter sequences takes as many as fit in the same bytes at their
                                  length (docs/train.md, "Token budgets"). Not with auto. */
    int micro_batch;           /* 0: the plan chooses (largest that fits, at most E) */
    int adaptive;              /* --batch adaptive: E follows the gradient noise scale */
    int auto_batch;            /* --batch auto: E and m chosen for goodput (docs/dynamic.md) */
    int batch_min, batch_max;  /* adaptive and auto bounds */
    int lr_ref_batch;          /* the E that lr is given for (0: the first E); auto counts the lr
                                  schedule (warm-up, decay) in steps of this many samples */
    double auto_gain;          /* auto: the predicted goodput gain a change of E needs (0: 10%); library
                                  only, not kept in checkpoints (give it again on resuming) */
    const bfit_batch_point *batch_schedule; /* E by step or epoch; NULL: constant */
    int nbatch_schedule;
    int batch_instead_of_decay;/* a step lr schedule becomes batch increases by 1/gamma */
    int lr_rule;               /* bfit_lr_rule; -1: linear for SGD, sqrt for AdamW */
    int64_t rewarmup_steps;    /* lr re-warmup after E rises (default 100) */
    const bfit_mem_point *memory_schedule; /* capacity changes at steps; NULL: none */
    int nmemory_schedule;
    const bfit_dataset *train_set, *test_set; /* given data sets instead of `data` */
    const bfit_source *train_source, *test_source; /* samples from the caller instead (no normalisation) */
    /* called with the samples of every micro-batch that ran (tests count them) */
    void (*on_samples)(void *ud, const float *x, const int32_t *y, int n);
    void *on_samples_ud;
    /* called after every optimizer step, evaluation and batch change (ud: cb_ud) */
    void (*on_step)(void *ud, const struct bfit_step_info *s);
    void (*on_eval)(void *ud, const struct bfit_eval_info *e);
    void (*on_batch_change)(void *ud, const bfit_batch_decision *d, int64_t step);
    void (*on_event)(void *ud, const char *json); /* each event of the log as one JSON line (ud: cb_ud) */
    const char *options_json;  /* the options the caller gave, a JSON object: logged at the start (NULL: none) */
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
    int threads_auto;          /* 1: start at threads (or all) and change the count, or the cores they
                                  run on, while training where that trains faster, as on a machine
                                  another job keeps busy (src/train/threads.h); results then depend on
                                  the load */
    int pack;                  /* 1 (the default): the threads may be packed onto half their cores
                                  while that trains faster, as beside another CPU-bound job; without
                                  threads_auto the count stays, so the results do too. 0: spread */
    bfit_device *device;       /* train on this device (not owned); NULL: open device_name */
    const char *device_name;   /* "cpu", "cuda", "cuda:N", "auto"; NULL: auto */
    bfit_conv_algo conv_algo;  /* GPU convolution algorithms (fastest default) */
    int precision_auto;        /* --precision auto: storage.precision was chosen for the device (the
                                  API's precision.c: bf16 where it is native) */
    bfit_storage storage;      /* precision, lean, recomputation (auto: for the target micro-batch:
                                  micro_batch, else batch, else batch_max) */
    int loss_scale;            /* BFIT_LOSS_SCALE_*: dynamic loss scaling (default: for f16 only) */
    double loss_scale_init;    /* the first scale (0: 65536) */
    int64_t loss_scale_interval; /* clean steps before the scale doubles (0: 2000) */
    int64_t poison_step;       /* tests: the gradients of this step (1-based) are made NaN, as an
                                  overflow would make them (0: off) */
    const bfit_host_alloc *host; /* CPU device blocks from here; NULL: aligned_alloc */
    uint64_t memory;           /* arena capacity; 0: what the device has free */
    double margin;             /* fraction of memory kept free when choosing m (default 0.1) */
    int augment;               /* images: random crop (pad 2) and horizontal flip */
    int prefetch;              /* background loading */
    int seq_max;               /* token models: samples are the data's lines (documents), cut into pieces of at
                                  most seq_max tokens (the model's length becomes seq_max), of varying length;
                                  each micro-batch runs at the length of its longest sequence (the step's
                                  sequences sorted by length, so padding stays small); 0: windows of the
                                  model's length */
    int seq;                   /* token models: windows of seq tokens (the model's length, at most its
                                  positions); 0: the model's. Not with seq_max, which sets the length too */
    int attention;             /* BFIT_ATTN_* (nn/zoo.h): every attention layer stored or lean (0: the
                                  model's) */
    bfit_mlm mlm;              /* token data: BERT's masked-LM labels (mlm.p > 0; mask_id -1: not given, its
                                  vocab the model's) instead of the next tokens */
    int tokens_split;          /* a token file as data: trained on its train part, tested on its test part
                                  (1, the default); 0: all of it for both, as a run before 2026-12-04 did
                                  (a checkpoint from then lacks the field, so it resumes so) */
    int normalize;             /* per-channel mean/std from the training set */
    bfit_img_opts img;         /* image folders: transforms, loader threads, bad files (docs/data.md) */
    const char *save;          /* weights file (safetensors) or NULL */
    const char *log;           /* JSON-lines log or NULL */
    const char *report;        /* HTML run report written at the end, also after a failure once the
                                  log was open (bfit_report_write); NULL: none. Without a log, the
                                  events go to a temporary file beside it. */
    FILE *human;               /* progress and summary lines; NULL: quiet */
    double progress_interval;  /* seconds between plain progress lines when not a terminal */
    /* checkpoints and resuming (docs/train.md) */
    const char *checkpoint;    /* directory of checkpoints (NULL: none) */
    int64_t checkpoint_steps;  /* one every this many optimizer steps (0: by time) */
    double checkpoint_seconds; /* one every this many seconds (0: by steps; both 0: 600) */
    int checkpoint_keep;       /* the newest this many are kept (default 3) */
    const char *resume;        /* continue from this checkpoint, or the newest in this directory */
    const char *const *resume_set; /* the configuration fields the caller set (the command line's options),
                                  compared with the checkpoint's; the others are taken from it. NULL: the
                                  fields that differ from bfit_train_cfg_default() count as set */
    int nresume_set;
    double wait_for_memory;    /* seconds to wait, polling, when not even micro-batch 1 fits (default 300;
                                  0: fail at once) */
    volatile sig_atomic_t *stop; /* non-zero: stop at the next micro-step boundary (a signal handler sets
                                  it); the step is abandoned, the run stays at its last step boundary */
    void (*on_checkpoint_write)(void *ud, const char *tmp_path); /* tests: a checkpoint is half written */
    /* data-parallel training over MPI (docs/distributed.md): every process of the job trains with its
       own device on its share of each step's E samples; rank 0 writes the log, report, weights and
       checkpoints, the others are quiet */
    bfit_dist_mode dist;       /* off (default), on, or auto: on when a launcher started several */
    int memory_schedule_rank;  /* the simulated memory events (memory_schedule, fail_nth_alloc) happen on
                                  this rank only (-1 default: on every rank) */
    int sample_check;          /* tests: log each epoch's count and checksum of the samples trained on
                                  (every rank's): the sum mod 2^64 of each sample's FNV-1a 64 hash of
                                  its floats' bytes, then its label's (int32, little-endian) */
    double monitor_seconds;    /* a "monitor" event (the device's use, this and other processes' memory,
                                  clocks and their throttling; the CPU's use and resident memory) at the
                                  first step boundary past every this many seconds, and at the start and
                                  end (default 10); 0: none */
} bfit_train_cfg;

/* Defaults: data fashion-mnist, E 128, auto micro-batch, 1 epoch, SGD momentum 0.9, lr 0.05,
 * constant schedule, seed 1, margin 0.1, prefetch and normalisation on, 3 checkpoints kept,
 * 300 s of waiting for memory. */
bfit_train_cfg bfit_train_cfg_default(void);

typedef struct bfit_train_result {
    int64_t steps;              /* optimizer steps */
    int64_t samples;            /* training samples consumed */
    int epochs;
    double train_loss;          /* mean over the last epoch (so far, if the run stopped inside it) */
    double test_loss, test_acc; /* after the last epoch */
    int evaluated;              /* test_loss and test_acc are of the weights as they are now: an evaluation
                                   finished after the last step (0: none did, and they mean nothing) */
    double seconds;             /* training wall time, evaluation excluded */
    int micro_batch;            /* the last micro-batch used */
    int ooms;                   /* out-of-memory events recovered from */
    int batch_changes;          /* decisions that changed m or E */
    int last_batch;             /* the last effective batch */
    double noise_scale;         /* the last gradient noise scale estimate (0: none) */
    int64_t skipped_steps;      /* loss scaling: steps skipped for inf/NaN gradients */
    double loss_scale;          /* loss scaling: the scale at the end (0: none) */
    uint64_t peak_bytes;        /* the arena's high-water mark */
    int64_t images_skipped;     /* --skip-bad-images: unreadable images replaced (training and evaluation) */
    int report_written;         /* the report was written (also when training failed) */
    char report[4200];          /* where: cfg.report, or the resumed checkpoint's ("" if none) */
    int stopped;                /* the run stopped early: BFIT_ESTOPPED (a request) or BFIT_ENOMEM (memory
                                   did not come back in time); 0 otherwise */
    int stop_flag;              /* BFIT_ESTOPPED: the stop flag's value (the command line's: the signal),
                                   data-parallel that of the rank that was stopped; 0: bfit_run_request_stop */
    int stop_rank;              /* data-parallel BFIT_ESTOPPED: the rank that was stopped (-1: not known) */
    uint64_t missing;           /* BFIT_ENOMEM stop: bytes micro-batch 1 lacked */
    int64_t tokens, tokens_computed; /* token models: label tokens trained on, and token positions the
                                  micro-batches computed (the rest, padding) */
    char checkpoint[4200];      /* the last checkpoint written ("" if none) */
    char resumed_from[4200];    /* the checkpoint the run resumed from ("" if none) */
    int dist_alone;             /* data-parallel: a failure of this process that the others have not
                                   learnt of (they would wait for it): end the job (bfit_dist_abort) */
} bfit_train_result;


/* The run from a configuration struct (bfit_run_new's work once the
 * options are resolved; tests call it directly). */
int bfit_run_new_from(const bfit_train_cfg *cfg, bfit_run **out);
/* The figures so far. */
void bfit_run_result_get(const bfit_run *r, bfit_train_result *res);
/* The whole run (bfit_train's work): steps, an evaluation after each epoch,
 * checkpoints, the weights saved. Stopped on request (BFIT_ESTOPPED) or by
 * memory that did not come back (BFIT_ENOMEM, res->stopped set), it writes a
 * checkpoint first when cfg.checkpoint is set (res->checkpoint). */
int bfit_train_from(const bfit_train_cfg *cfg, bfit_train_result *res);

/* What a token model's accuracy counts: "next-token", "masked-token" (a
 * masked LM) or "token" (a token classifier's tags). */
const char *bfit_token_acc_name(const bfit_mlm *mlm, int tags);

/* Evaluate a model's saved weights on a data set's test split. */
typedef struct bfit_eval_cfg {
    const char *model, *weights, *data;
    const char *test_data;      /* score this file instead of data's test split (a text read whole) */
    const bfit_dataset *given_test; /* score this set (the caller's arrays) instead of data's test split */
    int batch;                  /* 0: 1000 */
    int seq_max;                /* token models: score a text's lines of at most this many tokens (0: windows) */
    int seq;                    /* token models: windows of this many tokens (0: the model's length) */
    bfit_mlm mlm;               /* token models: scored on masked-LM labels (mlm.p > 0) */
    int64_t samples;            /* 0: all */
    int threads;
    bfit_device *device;        /* NULL: open device_name (NULL: auto) */
    const char *device_name;
    bfit_conv_algo conv_algo;
    uint64_t memory;
    int normalize;              /* 0: none. 1: the statistics saved with the weights, or
                                   for older files those of data's training split */
    bfit_csv_header csv_header; /* a CSV file's first row (auto) */
    bfit_img_opts img;          /* image folders (evaluation transform, loader threads) */
    FILE *human;                /* notes for people (what a CSV's first row was taken as); NULL: none */
} bfit_eval_cfg;

/* *n the samples scored (a token model's: sequences), *skipped (NULL: not
 * wanted) the unreadable images left out (--skip-bad-images). */
int bfit_evaluate_from(const bfit_eval_cfg *cfg, double *loss, double *acc, int64_t *n, int64_t *skipped);
/* ", N unreadable image(s) skipped: not scored" in buf when N > 0, else "". */
const char *bfit_eval_skipped_str(int64_t skipped, char *buf, size_t n);

/* The run's arena, so a test can inject a fault or change the capacity at a
 * chosen moment. */
bfit_arena *bfit_run_arena(bfit_run *r);

#endif
