/* run_int.h - what a run holds, shared by the files of train/: setup
 * (run.c), one optimizer step (step.c), evaluation (eval.c) and the loop
 * with saving (train.c). */
#ifndef BFIT_RUN_INT_H
#define BFIT_RUN_INT_H

#include "batch/plan.h"
#include "batch/session.h"
#include "optim/gradnorm.h"
#include "train/feed.h"
#include "train/log.h"
#include "train/trainer.h"

#define MAX_MICRO 4096 /* micro-batches of one step whose norms the noise scale sees */

/* The plan as the controller sees it: bytes of a training step at m,
 * memoised (layouts prepare oneDNN primitives; the controller asks often). */
#define PLAN_MEMO 512
typedef struct plan_ctx {
    bfit_model *M;
    const bfit_optim_cfg *opt;
    uint64_t extra;            /* fixed bytes the run adds (gradient norms) */
    int memo_m[PLAN_MEMO];
    uint64_t memo_b[PLAN_MEMO];
} plan_ctx;

struct bfit_run {
    bfit_train_cfg cfg;
    bfit_session s;            /* device, arena, model, data, normalisation */
    bfit_session_cfg sc;       /* how it was opened */
    bfit_feed tr, te;          /* training and test samples */
    bfit_optim *opt;
    bfit_gradnorm *gn;         /* clipping and the noise scale's norms; NULL: neither */
    bfit_controller *ctl;
    plan_ctx pc;
    bfit_log lg;
    int log_open;
    bfit_lr_schedule sched;
    bfit_batch_point sched_pts[BFIT_BATCH_SCHEDULE_MAX];
    bfit_batch_decision d;     /* the current decision */
    /* host staging of one micro-batch, uploaded to the device */
    float *stage_x;
    int32_t *stage_y;
    int max_take;
    double *micro_sq;          /* noise scale: per micro-batch */
    double full_sq;            /*   and of the step's mean gradient */
    int *micro_n;
    int track;                 /* norms for the noise scale (adaptive, auto) */
    double diff_sq;            /*   |G_t - G_{t-1}|^2 of a one-micro-batch step (-1: none) */
    double micro_secs;         /* the step's seconds in micro-steps */
    int E0;                    /* auto: the lr schedule counts steps of E0 samples */
    /* where the run is */
    int64_t per_epoch;         /* samples per epoch */
    int64_t step, samples, taken; /* taken: samples of the current epoch */
    int epoch;                 /* the epoch in progress (0-based) */
    uint64_t micro;            /* micro-steps run (dropout seeds) */
    int m, warned_bn, nmem, eval_m;
    uint64_t base_capacity;    /* at the start */
    uint64_t configured;       /* what the configuration and its memory schedule allow now */
    double train_time, ep_loss, ep_t0;
    int64_t ep_count;
    bfit_train_result res;
};

/* run.c */
/* bfit_run_new; *logged: the run opened its event log (also when it then
 * failed: the log ends with the error). */
int run_new(const bfit_train_cfg *cfg, bfit_run **out, int *logged);
int run_plan_fits_msg(bfit_run *r, uint64_t budget);
/* step.c */
void run_log_change(bfit_run *r, const bfit_batch_decision *d, int prev_m, uint64_t free_now);
int run_apply_memory_schedule(bfit_run *r, int64_t upto);
void run_watch_device(bfit_run *r);
/* ladder.c */
/* --batch auto: time the micro-batches the controller's ladder asks for,
 * on the step's E staged samples; the model is left as found. */
int run_ladder(bfit_run *r, int E);
int run_has_batchnorm(const bfit_model *M);
/* eval.c */
int run_open_stream(bfit_run *r, const bfit_dataset *d, int shuffle, int max_take, int prefetch, int augment,
                    bfit_feed *out);

#endif
