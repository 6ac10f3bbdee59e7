/* run_int.h - what a run holds, shared by the files of train/: setup
 * (run.c), one optimizer step (step.c, with memsched.c, memwait.c, snap.c
 * and pack.c), evaluation (eval.c), checkpoints (ckpt*.c) and the loop with
 * saving (train.c). */
#ifndef BFIT_RUN_INT_H
#define BFIT_RUN_INT_H

#include "base/atomic.h"
#include "batch/control_state.h"
#include "batch/plan.h"
#include "batch/session.h"
#include "optim/lossscale.h"
#include "optim/gradnorm.h"
#include "train/dist_run.h"
#include "train/feed.h"
#include "train/log.h"
#include "train/threads.h"
#include "train/trainer.h"

#include <stdatomic.h>

#define MAX_MICRO 4096 /* micro-batches of one step whose norms the noise scale sees */

/* The plan as the controller sees it: bytes of a training step at m,
 * memoised (layouts prepare oneDNN primitives; the controller asks often). */
#define PLAN_MEMO 512
typedef struct plan_ctx {
    bfit_model *M;
    const bfit_optim_cfg *opt;
    uint64_t extra;            /* fixed bytes the run adds (gradient norms) */
    int T;                     /* a token model's longest length: the plan is made there (0: not one) */
    int vary;                  /*   its length varies (seq_max, or cls_T): the model is put at T (or cls_T) to plan */
    int cls_T;                 /* a classifier of token ids: its T, where the plan is made (0: not one) */
    int tokens;                /* batch_tokens: m counts tokens, ceil(m / T) sequences */
    int memo_m[PLAN_MEMO];     /* by sequences (samples) */
    uint64_t memo_b[PLAN_MEMO];
    int rc;                    /* the first plan that could not be made (not one too big): why */
    char why[512];
} plan_ctx;

/* Where a run is at an optimizer-step boundary: its counters and what it
 * decided with. One struct, held once in the run (r->pos), so the snapshot
 * at a step's start, going back to it and resuming from a checkpoint each
 * copy it whole (snap.c, ckpt.c); a field added here is in all three (and
 * in a checkpoint once ckpt_state.c's table has it). */
typedef struct run_pos {
    int64_t step, samples;     /* optimizer steps and samples of the run */
    int64_t sched_units;       /* auto: the lr schedule's position, in units of E: a step adds its whole E,
                                * an epoch's short last step too, as a fixed batch's step counts one */
    int64_t taken;             /* samples of the current epoch */
    int64_t ep_count;          /* what the epoch's loss is over: samples, or tokens that count */
    int epoch;                 /* the epoch in progress (0-based) */
    int m;                     /* the micro-batch */
    int warned_bn;             /* said once: batch norm sees micro-batches, not E */
    int nmem;                  /* entries of the memory schedule applied */
    uint64_t micro;            /* micro-steps run (dropout seeds) */
    double train_time, ep_loss;
    bfit_train_result res;
    bfit_batch_decision d;     /* the current decision */
    bfit_loss_scaler ls;
    int track_stale;           /* the noise scale's copy of the last gradient is not valid (start, rollback) */
} run_pos;

/* Where a run is at a step boundary, on the host: with the device's
 * parameters and optimizer state, all a checkpoint holds (docs: ckpt.c).
 * Taken at each step's start, so an abandoned step (a stop, memory that did
 * not come back) puts the run back where it was. */
typedef struct run_snap {
    run_pos pos;
    int64_t per_epoch;         /* checked on resuming: the same data */
    bfit_controller_state ctl;
    int64_t cursor_epoch, cursor_pos; /* the training stream's */
    int64_t optim_steps;
} run_snap;

struct bfit_run {
    bfit_train_cfg cfg;
    bfit_session s;            /* device, arena, model, data, normalisation */
    bfit_session_cfg sc;       /* how it was opened */
    bfit_feed tr, te;          /* training and test samples */
    bfit_optim *opt;
    bfit_gradnorm *gn;         /* clipping, loss scaling and the noise scale's norms; NULL: none */
    int scaling;               /* dynamic loss scaling */
    double step_scale;         /* the scale this step's backward uses */
    int skipped_now;           /* this step's update was skipped (overflow) */
    double regen_share;        /* recomputed share of a step's work at the target micro-batch */
    bfit_controller *ctl;
    plan_ctx pc;
    bfit_log lg;
    int log_open;
    bfit_lr_schedule sched;
    bfit_batch_point sched_pts[BFIT_BATCH_SCHEDULE_MAX];
    /* host staging of one micro-batch, uploaded to the device */
    float *stage_x;
    int32_t *stage_y;
    int cls_T;                 /* a classifier of token ids: its T (the staged rows' length); each micro-batch
                                  runs at its longest sequence, rounded to 16 (0: not a classifier of ids) */
    int cls_sorted;            /* a classifier's step sorted by length, its micro-batches sized at it (the step
                                  spans several micro-batches; one of them all takes the step as it came) */
    int len_fixed;             /* --seq-max: the model takes only its own length (a learned position tensor
                                  added whole), so every micro-batch runs at it, padded */
    int max_take;
    double *micro_sq;          /* noise scale: per micro-batch */
    double full_sq;            /*   and of the step's mean gradient */
    int *micro_n;
    int track;                 /* norms for the noise scale (adaptive, auto) */
    double diff_sq;            /*   |G_t - G_{t-1}|^2 of a one-micro-batch step (-1: none) */
    int track_dirty;           /*   this step changed the tracked copy of the last step's gradient (an
                                  abandoned step leaves it stale: pos.track_stale) */
    double micro_secs;         /* the step's seconds in micro-steps */
    double step_data_s;        /* the step's seconds waiting for samples (the stream's take) */
    int64_t loader_made;       /* the loader threads' samples and seconds of work so far */
    double loader_busy;
    double step_loader_rate;   /* the samples/s they made at during the step (0: none measured) */
    double step_gnorm;         /* this step's global gradient norm where it was computed, else -1 */
    int64_t step_count;        /* what the step's loss is normalised by: its samples, or for a token
                                  model its tokens that count (labels >= 0) */
    int32_t *pack_x, *pack_y;  /* seq_max: a micro-batch packed at its length; the step sorted */
    int64_t *order;            /* seq_max: (length, index) of the step's sequences, to sort */
    int E0;                    /* auto: the lr schedule counts steps of E0 samples */
    int64_t epoch_units;       /* an epoch in the units of E: samples, or (batch_tokens) its tokens,
                                  expected from the data's lengths */
    int *fit_seqs;             /* seq_max or batch_tokens: sequences of a micro-batch at length L
                                  (index (L + 15) / 16) in fit_bytes (0: not yet) */
    int nfit;
    uint64_t fit_bytes;
    /* where the run is */
    run_pos pos;               /* at the last step boundary (during a step: moving from it) */
    int64_t per_epoch;         /* samples per epoch */
    int eval_m;                /* the evaluation's micro-batch */
    uint64_t base_capacity;    /* at the start, once set up (under ulimit -v the streams take room) */
    uint64_t configured;       /* what the configuration and its memory schedule allow now */
    double ep_t0;              /* when the epoch (a resumed run: its part of it) began: rate, seconds */
    int64_t ep_taken0;         /* samples of the epoch taken before ep_t0 (a resumed run's) */
    int64_t ep_count0;         /*   and their tokens that count */
    /* stopping, abandoning a step, waiting */
    atomic_int stop_req;       /* bfit_run_request_stop */
    run_snap snap;             /* the state at the step's start */
    float *stats_snap;         /* and the running statistics (batch norm) then, on the host */
    uint64_t stats_bytes;      /* their bytes (0: the model has none) */
    double waited;             /* seconds spent waiting for memory */
    double step_waited;        /*   in this step */
    double wait_until;         /* this step waits for memory until then (0: has not waited) */
    int refused_fitting;       /* this step's reservations refused though the plan fits them (the allocator) */
    uint64_t fixed_bytes;      /* the controller's fixed part */
    int broken;                /* a step failed past its update: no step or checkpoint follows */
    /* checkpoints */
    double ckpt_t;             /* when the last was written (or the run started) */
    int64_t ckpt_step;         /* and at which step (-1: none yet) */
    char ckpt_dir[4096];       /* where they go ("" none) */
    int ckpt_lock;             /* its descriptor + 1, locked while the run lives (0: none) */
    char ckpt_made[4096];      /* the directory if this run made it ("" not) */
    struct cJSON *ck_cfg;      /* resuming: the checkpoint's configuration (cfg strings point into it) */
    struct bfit_st_file *ck;   /*   and the file, until its state is put back */
    char ck_path[4200];
    int64_t log_offset;        /* resuming: where the log is cut to, -1: a new log */
    bfit_batch_point ck_bpts[BFIT_BATCH_SCHEDULE_MAX]; /* the checkpoint's schedules, when taken from it */
    bfit_mem_point ck_mpts[BFIT_MEM_SCHEDULE_MAX];
    char meta_steps[32], meta_acc[32];
    run_dist *dp;              /* data-parallel (dist_run.c); NULL: this process trains alone */
    uint64_t step_hsum, ep_hsum; /* cfg.sample_check: the samples' hashes summed, in the step and epoch */
    int64_t step_hn, ep_hn;    /*   and how many */
    int tmp_log;               /* the log is the report's temporary file: not the run's to resume */
    void *keep;                /* what the run's configuration points into (the public configuration's
                                  copy, src/api/train.c), freed with the run by keep_free */
    void (*keep_free)(void *keep);
    double mon_t;              /* the monitor's last sample (real clock; 0: none yet) */
    char mon_throttle[96];     /*   and the throttling it saw, to say when that changes */
    bfit_tgov tg;              /* --threads auto (threads.c) */
    int tg_on;
    int64_t tg_force_at;       /*   tests: halve the threads after this step (BFIT_TEST_THREADS_AT) */
    int64_t tg_pack_at;        /*   tests: pack them after this step (BFIT_TEST_THREADS_PACK_AT) */
};

/* A "monitor" event now if force or its interval has passed (monitor.c). */
void bfit_run_monitor(bfit_run *r, int force);

/* threads.c: --threads auto from setup on (a CPU of 2 threads or more),
 * and after each step the thread count kept or changed (logged). */
int bfit_run_threads_start(bfit_run *r);
int bfit_run_threads_step(bfit_run *r, double secs, int64_t samples);

/* What bfit_train writes after the run, as the configuration gives them
 * once merged with a resumed checkpoint's. */
typedef struct run_outputs {
    char save[4096], report[4096], log[4096]; /* "" when none */
    int tmp_log;               /* log is a temporary file of the report's, removed at the end */
    char tmp_base[4104];       /* REPORT.log: tmp's file, never made (the temporary's name is its) */
    bfit_atomic_file tmp;      /* locked while the run lives: a killed run's is swept by the next */
} run_outputs;

/* run.c */
/* bfit_run_new; *logged: the run opened its event log (also when it then
 * failed: the log ends with the error). o (may be NULL: no report) gets the
 * outputs; with a report and no log, the log is a temporary file. */
int bfit_run_create(const bfit_train_cfg *cfg, bfit_run **out, int *logged, run_outputs *o);
int bfit_run_plan_fits_msg(bfit_run *r, uint64_t budget);
/* Under an address-space limit, with short_by bytes missing for a step:
 * ", or lower --eval-batch: ..." in buf when the evaluation's micro-batch
 * sized the staging and the test stream beyond training's by at least that
 * much, else "". */
void bfit_run_eval_hint(const bfit_run *r, uint64_t short_by, char *buf, size_t n);
/* What a step under an address-space limit lacks besides the arena's
 * missing bytes: the part of the room kept for kernels that is not left. */
uint64_t bfit_run_headroom_short(void);
uint64_t bfit_run_plan_one(bfit_run *r); /* the plan's bytes at micro-batch 1, the run's extra included */
uint64_t bfit_run_plan_bytes(bfit_run *r, int m); /* at micro-batch m (in E's units), the extra included */
int bfit_run_plan_seqs(const bfit_run *r, int m); /* the sequences (samples) micro-batch m is planned as */
/* step.c */
void bfit_run_log_change(bfit_run *r, const bfit_batch_decision *d, int prev_m, uint64_t free_now);
/* memsched.c: the capacity as the memory schedule and the device's free
 * memory have it; what is free for a step (its own blocks count as free) */
int bfit_run_apply_memory_schedule(bfit_run *r, int64_t upto);
void bfit_run_watch_device(bfit_run *r);
uint64_t bfit_run_free_for_step(const bfit_run *r);
void bfit_run_memory_now(bfit_run *r); /* the controller told the capacity and what is free now */
/* memwait.c: not even micro-batch 1 fits: wait for memory to come back
 * (a shared device) or fail with BFIT_ENOMEM saying what is missing */
int bfit_run_wait_for_memory(bfit_run *r);
/* ... and at the start: BFIT_OK to try again, where it waited for what
 * other processes held of a shared device; else why not even micro-batch 1
 * fits */
int bfit_run_wait_to_start(bfit_run *r);
/* train.c: the metadata of a weights file (format first); bufs[0..1] are to be freed */
#define RUN_META_MAX 8
int bfit_run_weights_meta(bfit_run *r, const char **keys, const char **vals, int *n, char **bufs);
/* snap.c: the snapshot of a step boundary, and going back to it */
void bfit_run_snap_take(bfit_run *r, run_snap *s);
int bfit_run_snap_step(bfit_run *r); /* r->snap and the running statistics, at a step's start */
int bfit_run_rollback(bfit_run *r);
int bfit_run_stop_requested(bfit_run *r);
/* ckpt.c */
int bfit_run_resume_open(bfit_run *r);   /* before setup: the file, its configuration merged into r->cfg */
/* After the session opened, before the log: the state whole, the model's
 * tensors and the data's samples per epoch (the run's files untouched on
 * failure). */
int bfit_run_resume_check(bfit_run *r);
/* The training samples there are, and an epoch's of them. */
int64_t bfit_run_train_count(const bfit_run *r);
int64_t bfit_run_epoch_samples(const bfit_run *r, int64_t ntrain);
int bfit_run_resume_state(bfit_run *r);  /* after setup: the state put back */
void bfit_run_resume_close(bfit_run *r);
int bfit_run_checkpoint_due(const bfit_run *r);
/* The checkpoint directory, locked for the run's life (no other run is
 * writing there), and for a new run without another run's checkpoints. */
int bfit_run_checkpoint_dir_claim(bfit_run *r);
void bfit_run_checkpoint_dir_release(bfit_run *r);
/* ckpt_cfg.c: the configuration a checkpoint keeps */
struct cJSON *bfit_ckpt_cfg_to_json(const bfit_train_cfg *c);
int bfit_ckpt_cfg_merge(bfit_train_cfg *c, const struct cJSON *saved, const char *path, bfit_batch_point *bpts,
                   bfit_mem_point *mpts);
/* ckpt_state.c: the state as JSON */
struct cJSON *bfit_ckpt_state_to_json(const run_snap *s, const bfit_lr_schedule *sched);
int bfit_ckpt_state_from_json(const struct cJSON *j, const char *path, run_snap *s, bfit_lr_schedule *sched);
/* A data-parallel group's part ("group": the shares, every rank's own
 * state); reading fills g (its arrays of g->n) when the checkpoint's group
 * has g->n ranks, else sets g->n to its count; *found 0 when it has none. */
struct cJSON *bfit_ckpt_group_to_json(const run_group *g);
int bfit_ckpt_group_from_json(const struct cJSON *state, const char *path, run_group *g, int *found);
/* ladder.c */
/* --batch auto: time the micro-batches the controller's ladder asks for,
 * on the step's E staged samples; the model is left as found. */
int bfit_run_ladder(bfit_run *r, int E);
int bfit_run_has_batchnorm(const bfit_model *M);
/* eval.c */
int bfit_run_open_stream(bfit_run *r, const bfit_dataset *d, int shuffle, int max_take, int prefetch, int augment,
                    bfit_feed *out);

/* pack.c */
/* What a loss over n staged samples is a sum of: the labels that count, -1
 * (a token's padding, an evaluation's unreadable image) does not. */
int64_t bfit_run_counted(const bfit_model *M, const int32_t *y, int n);
/* The real tokens among n per-token labels: those not padding (pack.c). */
int64_t bfit_run_real_tokens(const int32_t *y, int64_t n);
/* The size of the micro-batch that starts at staged sample done (*want, at
 * most left): m, or for variable lengths what fits at its length. seq_max:
 * the step's E staged sequences sorted longest first; the model put at the
 * length of the micro-batch starting at done; that micro-batch packed at
 * its length (*x, *y point into the pack buffers). */
int bfit_run_micro_size(bfit_run *r, int done, int left, int *want);
void bfit_run_sort_by_length(bfit_run *r, int E);
int bfit_run_trim(bfit_run *r, int done);
void bfit_run_pack(bfit_run *r, int done, int want, const float **x, const int32_t **y);
/* A classifier of token ids (cls_T): the model put at the longest sequence of staged samples
 * [done, done + want), rounded to 16; those samples packed at it (*x into the pack buffer). Sized by
 * length (fit_seqs: one process, a step of more than one micro-batch: cls_sorted), the step's E staged
 * sequences first sorted longest first with their labels. */
void bfit_run_sort_cls(bfit_run *r, int E);
int bfit_run_trim_cls(bfit_run *r, int done, int want);
void bfit_run_pack_cls(bfit_run *r, int done, int want, const float **x);

#endif
