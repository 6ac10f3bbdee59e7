/* run.c - setting a training run up: checking the configuration, the
 * session (device, arena, model, data), the controller with the plan as its
 * memory model, parameters, optimizer, gradient norms and streams. */
#include "base/aslimit.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/outpath.h"
#include "base/text.h"
#include "batch/solve.h"
#include "nn/zoo.h"
#include "train/run_int.h"
#include "train/weights.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bfit_train_cfg bfit_train_cfg_default(void)
{
    bfit_train_cfg c;
    memset(&c, 0, sizeof c);
    c.data = "fashion-mnist";
    c.batch = 128;
    c.epochs = 1;
    c.opt = bfit_optim_cfg_default(BFIT_OPT_SGD);
    c.lr = 0.05;
    c.sched = bfit_lr_schedule_default(BFIT_SCHED_CONSTANT);
    c.seed = 1;
    c.margin = 0.1;
    c.prefetch = 1;
    c.pack = 1;
    c.monitor_seconds = 10;
    c.normalize = 1;
    c.tokens_split = 1;
    c.progress_interval = 10;
    c.lr_rule = -1;
    c.rewarmup_steps = 100;
    c.checkpoint_keep = 3;
    c.wait_for_memory = 300;
    c.storage = bfit_storage_default();
    c.memory_schedule_rank = -1;
    c.mlm.mask_id = -1;
    return c;
}

/* The limits of each kind of value (batchfit.h), as the command line and the
 * schedule parsers apply them, for callers who fill the configuration. */
static int check_limits(const bfit_train_cfg *c)
{
    const struct { const char *field; int64_t v, min, max; } f[] = {
        {"batch", c->batch, c->adaptive || c->auto_batch ? 0 : 1, BFIT_BATCH_MAX},
        {"micro_batch", c->micro_batch, 0, BFIT_BATCH_MAX},
        {"eval_batch", c->eval_batch, 0, BFIT_BATCH_MAX},
        {"batch_min", c->batch_min, 0, BFIT_BATCH_MAX},
        {"batch_max", c->batch_max, 0, BFIT_BATCH_MAX},
        {"epochs", c->epochs, 1, BFIT_EPOCHS_MAX},
        {"epoch_samples", c->epoch_samples, 0, BFIT_COUNT_MAX},
        {"eval_samples", c->eval_samples, 0, BFIT_COUNT_MAX},
        {"max_steps", c->max_steps, 0, BFIT_COUNT_MAX},
        {"rewarmup_steps", c->rewarmup_steps, 0, BFIT_COUNT_MAX},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < f[i].min || f[i].v > f[i].max)
            return bfit_fail_field(BFIT_EINVAL, f[i].field, "%lld is out of range: expected %lld to %lld",
                                   (long long)f[i].v, (long long)f[i].min, (long long)f[i].max);
    for (int i = 0; c->batch_schedule && i < c->nbatch_schedule; i++)
        if (c->batch_schedule[i].batch < 1 || c->batch_schedule[i].batch > BFIT_BATCH_MAX ||
            c->batch_schedule[i].at < 0 ||
            c->batch_schedule[i].at > (c->batch_schedule[i].by_epoch ? BFIT_EPOCHS_MAX : BFIT_COUNT_MAX))
            return bfit_fail_field(BFIT_EINVAL, "batch_schedule", "point %d (%lld:%d) is out of range: batch 1 to %d, "
                                   "step 0 to %lld or epoch 0 to %d", i + 1, (long long)c->batch_schedule[i].at,
                                   c->batch_schedule[i].batch, BFIT_BATCH_MAX, (long long)BFIT_COUNT_MAX,
                                   BFIT_EPOCHS_MAX);
    for (int i = 0; c->memory_schedule && i < c->nmemory_schedule; i++)
        if (c->memory_schedule[i].capacity == 0 || c->memory_schedule[i].step < 0 ||
            c->memory_schedule[i].step > BFIT_COUNT_MAX ||
            (i > 0 && c->memory_schedule[i].step <= c->memory_schedule[i - 1].step))
            return bfit_fail_field(BFIT_EINVAL, "memory_schedule", "point %d (step %lld, %llu bytes): steps must rise "
                                   "from 0 to at most %lld and capacities be above 0", i + 1,
                                   (long long)c->memory_schedule[i].step,
                                   (unsigned long long)c->memory_schedule[i].capacity, (long long)BFIT_COUNT_MAX);
    return BFIT_OK;
}

/* Checkpoints: a directory that is or can be made, of a run whose samples
 * can be found again (not a caller's source). */
static int check_ckpt(const bfit_train_cfg *c)
{
    struct stat st;
    if (c->train_source)
        return bfit_fail_field(BFIT_EINVAL, "checkpoint", "needs the training samples from a data set: a caller's "
                               "source (train_source) cannot be wound back to where a checkpoint was");
    if (c->checkpoint_keep < 1 || c->checkpoint_steps < 0 || c->checkpoint_steps > BFIT_COUNT_MAX ||
        !(c->checkpoint_seconds >= 0) || !(c->wait_for_memory >= 0))
        return bfit_fail_field(BFIT_EINVAL, "checkpoint", "keep %d (at least 1), every %lld steps or %g s (not "
                               "negative), wait for memory %g s (not negative)", c->checkpoint_keep,
                               (long long)c->checkpoint_steps, c->checkpoint_seconds, c->wait_for_memory);
    if (stat(c->checkpoint, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return bfit_fail_field(BFIT_EIO, "checkpoint", "%s is not a directory", c->checkpoint);
        if (access(c->checkpoint, W_OK) != 0)
            return bfit_fail_field(BFIT_EIO, "checkpoint", "%s: cannot write into it: %s", c->checkpoint,
                                   strerror(errno));
        return BFIT_OK;
    }
    return bfit_outpath_check("checkpoint", c->checkpoint); /* made at the first checkpoint */
}

/* The files the run writes: each writable now, not after hours of
 * training, and no two the same file (the last written would be all that
 * is left of both). The log is opened at the start: its own errors come
 * then. */
static int check_outputs(const bfit_train_cfg *c)
{
    const struct { const char *field, *path, *what; } o[] = {
        {"save", c->save, "the weights go"}, {"report", c->report, "the report goes"},
        {"log", c->log, "the log goes"}, {"checkpoint", c->checkpoint, "the checkpoints go"},
    };
    int rc;

    if (c->save && (rc = bfit_outpath_check("save", c->save)) != BFIT_OK)
        return rc;
    if (c->checkpoint && (rc = check_ckpt(c)) != BFIT_OK)
        return rc;
    if (c->report && (rc = bfit_outpath_check("report", c->report)) != BFIT_OK)
        return rc;
    for (size_t i = 0; i < sizeof o / sizeof o[0]; i++)
        for (size_t j = i + 1; j < sizeof o / sizeof o[0]; j++)
            if (o[i].path && o[j].path && bfit_outpath_same(o[i].path, o[j].path))
                return bfit_fail_field(BFIT_EINVAL, o[j].field, "%s is also where %s: give each output a file of "
                                       "its own", o[j].path, o[i].what);
    return BFIT_OK;
}

/* The defaults that depend on other fields, owned here so every caller
 * (the public configuration, a test's struct) gets them: the bounds of an
 * adaptive or auto batch (in tokens with a token budget), the first E,
 * and auto's reference batch (the lr is given for the default batch). */
static void fill_defaults(bfit_train_cfg *c)
{
    if (!c->adaptive && !c->auto_batch)
        return;
    if (!c->batch_min)
        c->batch_min = c->batch_tokens ? 1024 : 16;
    if (!c->batch_max)
        c->batch_max = c->batch_tokens ? 65536 : 4096;
    if (!c->batch)
        c->batch = c->batch_min;
    if (c->auto_batch && !c->lr_ref_batch)
        c->lr_ref_batch = 128;
}

static int check_cfg(const bfit_train_cfg *c)
{
    int rc;
    if ((c->adaptive || c->auto_batch) && c->batch_min > c->batch_max)
        return bfit_fail_field(BFIT_EINVAL, "batch_min", "%d is above batch_max %d", c->batch_min, c->batch_max);
    if (!c->adaptive && !c->auto_batch && c->batch < 1)
        return bfit_fail_field(BFIT_EINVAL, "batch", "must be at least 1, got %d", c->batch);
    if (c->epochs < 1)
        return bfit_fail_field(BFIT_EINVAL, "epochs", "must be at least 1, got %d", c->epochs);
    if (c->loss_scale < BFIT_LOSS_SCALE_AUTO || c->loss_scale > BFIT_LOSS_SCALE_DYNAMIC ||
        !(c->loss_scale_init >= 0 && c->loss_scale_init <= 1e30) || c->loss_scale_interval < 0)
        return bfit_fail_field(BFIT_EINVAL, "loss_scale", "mode %d (auto, none or dynamic), first scale %g (0 or a "
                               "positive number up to 1e30) and interval %lld (0 or more) are not a loss scaling",
                               c->loss_scale, c->loss_scale_init, (long long)c->loss_scale_interval);
    if (c->micro_batch < 0)
        return bfit_fail_field(BFIT_EINVAL, "micro_batch", "must be 0 (auto) or at least 1, got %d", c->micro_batch);
    if (check_limits(c) != BFIT_OK)
        return BFIT_EINVAL;
    if (!(c->lr > 0) || !isfinite(c->lr))
        return bfit_fail_field(BFIT_EINVAL, "lr", "must be a positive number, got %g", c->lr);
    if (!(c->margin >= 0 && c->margin < 1))
        return bfit_fail_field(BFIT_EINVAL, "margin", "must be in [0, 1), got %g", c->margin);
    if (c->batch_instead_of_decay && c->sched.kind != BFIT_SCHED_STEP)
        return bfit_fail_field(BFIT_EINVAL, "batch_instead_of_decay",
                               "needs a step schedule (schedule step with a step size and gamma)");
    if (c->batch_instead_of_decay && (c->adaptive || c->auto_batch || c->batch_schedule))
        return bfit_fail_field(BFIT_EINVAL, "batch_instead_of_decay",
                               "cannot be combined with an adaptive or auto batch or a batch schedule");
    if (c->auto_batch && (c->adaptive || c->batch_schedule))
        return bfit_fail_field(BFIT_EINVAL, "auto_batch", "cannot be combined with an adaptive batch or a batch "
                                                          "schedule");
    if (c->lr_rule == BFIT_LR_ADASCALE && !c->auto_batch && !c->adaptive)
        return bfit_fail_field(BFIT_EINVAL, "lr_rule", "adascale needs the noise scale: an auto or adaptive batch");
    if (c->mlm.p > 0 && c->batch_tokens)
        return bfit_fail_field(BFIT_EINVAL, "batch_tokens", "counts the tokens that have a label, and a masked LM "
                               "labels only those it masks: give the batch in sequences with mask_tokens");
    if (c->mlm.p > 0 && c->train_source)
        return bfit_fail_field(BFIT_EINVAL, "mask_tokens", "masks the token data batchfit reads; a data source "
                               "(bfit_config_set_source) gives its own labels: mask them there");
    if (c->batch_tokens && c->auto_batch)
        return bfit_fail_field(BFIT_EINVAL, "batch_tokens", "cannot be combined with an auto batch yet: give a "
                               "number of tokens, a schedule or adaptive");
    if (!(c->auto_gain >= 0 && c->auto_gain <= 1e6))
        return bfit_fail_field(BFIT_EINVAL, "auto_gain", "must be 0 (10%%) or a fraction above 0 up to 1e6, got %g",
                               c->auto_gain);
    if (c->lr_ref_batch < 0)
        return bfit_fail_field(BFIT_EINVAL, "lr_ref_batch", "must be 0 (the first batch) or at least 1, got %d",
                               c->lr_ref_batch);
    if (c->model == NULL)
        return bfit_fail_field(BFIT_EINVAL, "model", "is required: a preset name or a spec file");
    if ((rc = check_outputs(c)) != BFIT_OK)
        return rc;
    return bfit_optim_cfg_check(&c->opt);
}

static int seqs_of(const plan_ctx *pc, int m) { return pc->tokens ? (int)(((int64_t)m + pc->T - 1) / pc->T) : m; }

/* The controller's plan: the step at micro-batch m, made at the longest
 * length (an OOM retry asks while the model is at a micro-batch's length). */
static uint64_t plan_bytes(void *ud, int m)
{
    plan_ctx *pc = ud;
    bfit_step_plan p;
    int b = seqs_of(pc, m), L = pc->vary ? pc->M->input.d[0] : 0, T = pc->T ? pc->T : pc->cls_T, rc;
    unsigned h = (unsigned)b * 2654435761u % PLAN_MEMO;
    if (pc->memo_m[h] == b)
        return pc->memo_b[h];
    rc = L && L != T ? bfit_model_set_seq(pc->M, T) : BFIT_OK;
    if (rc == BFIT_OK)
        rc = bfit_plan_compute(pc->M, pc->opt, b, 1, &p);
    if (L && L != T && bfit_model_set_seq(pc->M, L) != BFIT_OK && rc == BFIT_OK)
        rc = BFIT_ESTATE;
    if (rc != BFIT_OK) {
        /* no plan: to the controller it does not fit, but the run says why */
        if (pc->rc == BFIT_OK) {
            pc->rc = rc;
            snprintf(pc->why, sizeof pc->why, "%s", bfit_errmsg());
        }
        return UINT64_MAX;
    }
    pc->memo_m[h] = b;
    pc->memo_b[h] = p.peak + pc->extra;
    return pc->memo_b[h];
}

uint64_t bfit_run_plan_bytes(bfit_run *r, int m) { return plan_bytes(&r->pc, m); }
int bfit_run_plan_seqs(const bfit_run *r, int m) { return seqs_of(&r->pc, m); }

/* Smith et al. 2017: where the lr would fall by gamma, the batch grows by
 * 1/gamma instead and the lr stays (rule none for these changes). */
static int batch_instead_of_decay(bfit_run *r, bfit_controller_config *cc)
{
    const bfit_train_cfg *c = &r->cfg;
    int64_t at = 0;
    double e = c->batch;
    int n = 0, cap = c->batch_max > 0 ? c->batch_max : (int)(r->epoch_units < (1 << 20) ? r->epoch_units : 1 << 20);
    while (n < BFIT_BATCH_SCHEDULE_MAX && e <= cap) {
        r->sched_pts[n].at = at;
        r->sched_pts[n].by_epoch = 0;
        r->sched_pts[n].batch = (int)(e + 0.5);
        n++;
        at += r->sched.step_size;
        e /= r->sched.gamma;
    }
    cc->schedule = r->sched_pts;
    cc->nschedule = n;
    cc->rule = BFIT_LR_NONE;
    r->sched.kind = BFIT_SCHED_CONSTANT;
    return n;
}

static void controller_config(bfit_run *r, bfit_controller_config *cc)
{
    const bfit_train_cfg *c = &r->cfg;
    bfit_model *M = r->s.M;

    bfit_controller_config_default(cc);
    cc->plan_bytes = plan_bytes;
    cc->plan_ud = &r->pc;
    cc->fixed_bytes = bfit_model_param_bytes(M) + bfit_model_grad_bytes(M) + BFIT_MODEL_STATS_BYTES +
                      bfit_optim_state_bytes(&c->opt, M->trainable, M->ntrainable) + r->pc.extra;
    cc->capacity = r->base_capacity;
    cc->margin = c->margin;
    cc->micro_batch = c->micro_batch;
    cc->batch = c->batch;
    cc->adaptive = c->adaptive;
    cc->auto_batch = c->auto_batch;
    cc->keep_whole = bfit_run_has_batchnorm(M); /* split only for memory: batch norm would see micro-batches */
    cc->tokens = c->batch_tokens;
    cc->lr_ref_batch = c->lr_ref_batch;
    if (c->auto_gain > 0)
        cc->auto_gain = c->auto_gain;
    cc->batch_min = c->batch_min;
    cc->batch_max = c->batch_max;
    cc->rule = c->lr_rule >= 0 ? (bfit_lr_rule)c->lr_rule
                               : c->opt.kind == BFIT_OPT_ADAMW ? BFIT_LR_SQRT : BFIT_LR_LINEAR;
    cc->rewarmup_steps = c->rewarmup_steps;
    /* auto's plateau move stands in for the lr decay a constant schedule
     * lacks; a decaying schedule anneals already, and the two together
     * over-anneal (cosine, 5 epochs of cnn: 91.47% against 91.97%) */
    if (c->sched.kind != BFIT_SCHED_CONSTANT)
        cc->auto_plateau_windows = 0;
    if (c->batch_schedule) {
        cc->schedule = c->batch_schedule;
        cc->nschedule = c->nbatch_schedule;
    } else if (c->batch_instead_of_decay) {
        batch_instead_of_decay(r, cc);
    }
}

uint64_t bfit_run_plan_one(bfit_run *r) { return plan_bytes(&r->pc, 1); }

/* The memory read from a CPU under an address-space limit: neither the
 * margin nor --memory is what to change, the limit is, by what the
 * capacity lacks (the room a rerun gets grows with the limit byte for
 * byte, measured: bfit_as_raise) and, where the capacity is 0, what the
 * room lacked of the room kept for kernels. BFIT_OK if none. */
static int limit_says(const bfit_run *r, uint64_t need, uint64_t budget)
{
    bfit_device_info di;
    uint64_t limit, room, cap;
    char s1[32], s2[32], s3[32], s4[32], s5[32], hint[256], fix[128];

    bfit_device_info_get(r->s.dev, &di);
    if (!di.limited || !bfit_as_room(&limit, &room))
        return BFIT_OK;
    cap = bfit_capacity_for(need, r->cfg.margin);
    cap = cap > r->base_capacity ? cap - r->base_capacity : 0;
    if (!r->base_capacity) /* the room was short of the room kept for kernels too (read again now: a bit less) */
        cap += bfit_run_headroom_short();
    bfit_as_raise(cap, fix, sizeof fix);
    bfit_run_eval_hint(r, cap, hint, sizeof hint);
    return bfit_fail(BFIT_ENOMEM, "out of host memory: training needs %s even at micro-batch 1, but %s is allowed "
                     "(the memory less the margin): the address-space limit (ulimit -v) of %s leaves %s unmapped, "
                     "and %s is kept beside the step for oneDNN's kernels: %s%s",
                     bfit_format_size(need, s1, sizeof s1), bfit_format_size(budget, s2, sizeof s2),
                     bfit_format_size(limit, s3, sizeof s3), bfit_format_size(room, s4, sizeof s4),
                     bfit_format_size(BFIT_AS_HEADROOM, s5, sizeof s5), fix, hint);
}

/* Say how far from fitting a model is that does not fit even m = 1. */
int bfit_run_plan_fits_msg(bfit_run *r, uint64_t budget)
{
    bfit_step_plan p1;
    char s1[32], s2[32], s3[32], s4[32];
    uint64_t need;
    int pct;
    if (r->pc.rc != BFIT_OK) /* not memory: the plan itself could not be made */
        return bfit_fail(r->pc.rc, "%s", r->pc.why);
    if (bfit_plan_compute(r->s.M, &r->cfg.opt, 1, 1, &p1) != BFIT_OK)
        return BFIT_ENOMEM;
    if (r->pos.nmem > 0) /* a point of the memory schedule at step 0 set the capacity */
        return bfit_fail_field(BFIT_ENOMEM, "memory_schedule", "its capacity from step 0, %s: training needs %s even "
                               "at micro-batch 1, but %s is allowed (the capacity less the margin)",
                               bfit_format_size(r->base_capacity, s3, sizeof s3),
                               bfit_format_size(p1.peak + r->pc.extra, s1, sizeof s1),
                               bfit_format_size(budget, s2, sizeof s2));
    need = p1.peak + r->pc.extra;
    bfit_format_size(need, s1, sizeof s1);
    bfit_format_size(budget, s2, sizeof s2);
    if (!r->cfg.memory && limit_says(r, need, budget) != BFIT_OK)
        return BFIT_ENOMEM;
    if (r->cfg.margin > 0 && need <= r->base_capacity && (pct = bfit_margin_for(need, r->base_capacity)) >= 0)
        return bfit_fail_field(BFIT_ENOMEM, "margin", "training needs %s even at micro-batch 1, but the %g%% margin "
                               "leaves %s of %s: a margin of at most %.2f trains (or a memory of at least %s)", s1,
                               100 * r->cfg.margin, s2, bfit_format_size(r->base_capacity, s3, sizeof s3), pct / 100.0,
                               bfit_format_size(bfit_capacity_for(need, r->cfg.margin), s4, sizeof s4));
    return bfit_fail_field(BFIT_ENOMEM, "memory", "training needs %s even at micro-batch 1, but %s is allowed "
                           "(memory less the margin): a memory of at least %s trains", s1, s2,
                           bfit_format_size(bfit_capacity_for(need, r->cfg.margin), s3, sizeof s3));
}

static int open_session(bfit_run *r)
{
    const bfit_train_cfg *c = &r->cfg;
    bfit_session_cfg *sc = &r->sc;
    int rc;

    memset(sc, 0, sizeof *sc);
    sc->model = c->model;
    sc->data = c->data;
    sc->test_data = c->test_data;
    sc->csv_header = c->csv_header;
    sc->given_train = c->train_set;
    sc->given_test = c->test_set;
    sc->want_train = !c->train_source;
    sc->want_test = !c->test_source;
    sc->device = c->device;
    sc->device_name = c->device_name;
    sc->conv_algo = c->conv_algo;
    sc->precision = c->storage.precision;
    sc->host = c->host;
    sc->memory = c->memory;
    sc->threads = c->threads;
    sc->normalize = c->normalize && !c->train_source;
    sc->seed = c->seed;
    sc->seq_max = c->seq_max;
    sc->seq = c->seq;
    sc->mlm = &c->mlm;
    sc->attention = c->attention;
    sc->tokens_whole = !c->tokens_split;
    sc->img = &c->img;
    rc = bfit_session_open_model(&r->s, sc);
    if (rc == BFIT_OK)
        rc = bfit_session_open_data(&r->s, sc);
    return rc;
}

/* Parameters, optimizer, gradient norms: the fixed part, in the plan's
 * order of categories. */
static int take_fixed(bfit_run *r)
{
    bfit_model *M = r->s.M;
    int rc = bfit_model_alloc_params(M, 1);
    bfit_model_set_init_random(M, r->cfg.init_random);
    if (rc == BFIT_OK)
        rc = bfit_model_init_params(M, r->cfg.seed);
    if (rc == BFIT_OK && r->cfg.init_weights && (rc = bfit_weights_load(M, r->cfg.init_weights)) != BFIT_OK)
        bfit_fail_field(rc, "weights", "%s", bfit_errmsg()); /* the option to blame; the message names the file */
    if (rc == BFIT_OK)
        rc = bfit_optim_new(&r->cfg.opt, M->trainable, M->ntrainable, r->s.dev, r->s.arena, &r->opt);
    if (rc == BFIT_OK && r->pc.extra)
        rc = bfit_gradnorm_new(M->trainable, M->ntrainable, r->track, r->s.dev, r->s.arena, &r->gn);
    return rc;
}

/* The most samples a step takes: E, or for a token budget the most
 * sequences that can reach E tokens (the shortest of the data's). */
static int max_take(bfit_run *r, const bfit_controller_config *cc, int *out)
{
    const bfit_train_cfg *c = &r->cfg;
    int64_t E = c->adaptive || c->auto_batch ? (c->batch_max > 0 ? c->batch_max : 4096) : c->batch, most;
    int rc;
    for (int i = 0; i < cc->nschedule; i++)
        if (cc->schedule[i].batch > E)
            E = cc->schedule[i].batch;
    most = E;
    if (c->batch_tokens && !c->train_source &&
        (rc = bfit_dataset_most_for_tokens(r->s.train, E, &most)) != BFIT_OK)
        return rc;
    *out = (int)(most < r->per_epoch ? most : r->per_epoch);
    return BFIT_OK;
}

/* The evaluation's micro-batch at most: --eval-batch (or 1000), never more
 * than the test samples an evaluation takes (--eval-samples), nor than the
 * eval plan fits in the most memory the run may ever have (the capacity,
 * or the memory schedule's largest): its evaluation chooses within both
 * anyway (eval.c). The staging and the test stream are sized by it: 1000
 * of resnet50's samples are 600 MB of host memory. */
static int eval_most(bfit_run *r)
{
    const bfit_train_cfg *c = &r->cfg;
    int64_t n = c->test_source ? c->test_source->samples : r->s.test ? bfit_dataset_count(r->s.test) : 0;
    int64_t m = c->eval_batch ? c->eval_batch : 1000;
    uint64_t most = r->configured;
    int fits = 0;

    if (c->eval_samples && c->eval_samples < n)
        n = c->eval_samples;
    m = n > 0 && n < m ? n : m;
    /* a variable length evaluates at another length than the plan's now */
    if (c->seq_max || c->batch_tokens)
        return (int)m;
    for (int i = 0; i < c->nmemory_schedule; i++)
        if (c->memory_schedule[i].capacity > most)
            most = c->memory_schedule[i].capacity;
    if (bfit_plan_max_batch(r->s.M, NULL, 0, most, (int)m, &fits, NULL) == BFIT_OK && fits > 0)
        m = fits;
    return (int)m;
}

uint64_t bfit_run_headroom_short(void)
{
    uint64_t limit, room;
    return bfit_as_room(&limit, &room) && room < BFIT_AS_HEADROOM ? BFIT_AS_HEADROOM - room : 0;
}

/* Only when lowering it can make up what is missing: under 350 MB the
 * CNN's streams' threads took 30 MiB more than its 5 MiB of staging, and
 * a smaller --eval-batch did not help. */
void bfit_run_eval_hint(const bfit_run *r, uint64_t short_by, char *buf, size_t n)
{
    uint64_t sample = bfit_model_sample_host_bytes(r->s.M);
    uint64_t beyond = r->eval_m > r->max_take ? (uint64_t)(r->eval_m - r->max_take) * sample * 2 : 0;
    char s1[32];

    buf[0] = '\0';
    if (beyond && beyond >= short_by)
        snprintf(buf, n, ", or lower --eval-batch: the host staging and the test stream each hold %d evaluation "
                 "samples (%s), and training takes %d at most", r->eval_m,
                 bfit_format_size((uint64_t)r->eval_m * sample, s1, sizeof s1), r->max_take);
}

static int staging_fail(const bfit_run *r, int most, size_t bytes)
{
    char s1[32];
    return bfit_fail(BFIT_ENOMEM, "out of host memory for the staging of %d samples (%s): training takes up to %d "
                     "a micro-batch, evaluation up to %d (--eval-batch, or --eval-samples if fewer)", most,
                     bfit_format_size(bytes, s1, sizeof s1), r->max_take, r->eval_m);
}

/* The staging on the host and the streams: both hold the largest
 * micro-batch ever taken, training's or evaluation's. */
static int open_streams(bfit_run *r, const bfit_controller_config *cc)
{
    const bfit_train_cfg *c = &r->cfg;
    int64_t numel = bfit_shape_numel(r->s.M->input);
    size_t bytes;
    int rc, most;

    if ((rc = max_take(r, cc, &r->max_take)) != BFIT_OK)
        return rc;
    r->eval_m = eval_most(r);
    most = r->max_take > r->eval_m ? r->max_take : r->eval_m;
    bytes = (size_t)most * (size_t)bfit_model_sample_host_bytes(r->s.M);
    r->stage_x = malloc(sizeof(float) * (size_t)most * (size_t)numel);
    r->stage_y = malloc(sizeof(int32_t) * (size_t)most * (size_t)r->s.M->labels_per_sample);
    /* a classifier of token ids: its padded sequences packed at each micro-batch's longest */
    if (r->cls_T) { /* and sorted by length, with their labels */
        r->pack_x = malloc(sizeof(int32_t) * (size_t)most * (size_t)numel);
        r->pack_y = malloc(sizeof(int32_t) * (size_t)most);
        r->order = malloc(sizeof *r->order * (size_t)most);
        bytes += (size_t)most * (sizeof(int32_t) * (size_t)(numel + 1) + sizeof *r->order);
        if (!r->pack_x || !r->pack_y || !r->order)
            return staging_fail(r, most, bytes);
    }
    if (c->seq_max) { /* sorting a step's sequences and packing a micro-batch at its length */
        r->pack_x = malloc(sizeof(int32_t) * (size_t)most * (size_t)numel);
        r->pack_y = malloc(sizeof(int32_t) * (size_t)most * (size_t)numel);
        r->order = malloc(sizeof *r->order * (size_t)most);
        bytes += (size_t)most * (2 * sizeof(int32_t) * (size_t)numel + sizeof *r->order);
        if (!r->pack_x || !r->pack_y || !r->order)
            return staging_fail(r, most, bytes);
    }
    r->micro_sq = calloc(MAX_MICRO, sizeof *r->micro_sq);
    r->micro_n = calloc(MAX_MICRO, sizeof *r->micro_n);
    if (!r->stage_x || !r->stage_y || !r->micro_sq || !r->micro_n)
        return staging_fail(r, most, bytes);
    r->tr.src = c->train_source;
    r->te.src = c->test_source;
    r->tr.numel = r->te.numel = numel;
    r->tr.nlab = r->te.nlab = r->s.M->labels_per_sample;
    /* data-parallel: each step seeks to the rank's slice and past the step,
     * which throws any prefetched samples away: made on the spot instead */
    rc = c->train_source ? BFIT_OK
                         : bfit_run_open_stream(r, r->s.train, 1, r->max_take, c->prefetch && !r->dp, c->augment, &r->tr);
    if (rc == BFIT_OK && !c->test_source)
        rc = bfit_run_open_stream(r, r->s.test, 0, r->eval_m, c->prefetch, 0, &r->te);
    return rc;
}

/* Cosine over the whole run unless told otherwise. An auto batch counts
 * the schedule in steps of E0 samples, since its E changes. */
static int finish_schedule(bfit_run *r)
{
    int per_step = r->cfg.auto_batch ? r->E0 : r->pos.d.batch;
    int64_t steps_per_epoch = (r->epoch_units + per_step - 1) / per_step;
    bfit_lr_schedule *s = &r->sched;
    if (s->kind == BFIT_SCHED_COSINE && s->total_steps == 0) {
        s->total_steps = steps_per_epoch * r->cfg.epochs;
        if (r->cfg.max_steps && r->cfg.max_steps < s->total_steps)
            s->total_steps = r->cfg.max_steps;
        if (s->total_steps <= s->warmup_steps)
            s->total_steps = s->warmup_steps + 1;
    }
    return bfit_lr_schedule_check(s);
}

/* The plan at the starting micro-batch as the inside of a JSON object:
 * "m", bytes per memory category, "peak" and the "budget" it must fit.
 * The run's gradient norms are held in "other", as the arena counts them. */
static void plan_json(bfit_run *r, char *buf, size_t n)
{
    bfit_step_plan p;
    size_t len;
    if (bfit_plan_compute(r->s.M, &r->cfg.opt, bfit_run_plan_seqs(r, r->pos.d.m), 1, &p) != BFIT_OK) {
        snprintf(buf, n, "\"m\":%d", r->pos.d.m); /* planned before, so not expected */
        return;
    }
    p.bytes[BFIT_MEM_OTHER] += r->pc.extra;
    len = (size_t)snprintf(buf, n, "\"m\":%d,", r->pos.d.m);
    if (r->cfg.batch_tokens) /* m counts tokens: the sequences of the longest length it is planned as */
        len += (size_t)snprintf(buf + len, n - len, "\"sequences\":%d,\"length\":%d,",
                                bfit_run_plan_seqs(r, r->pos.d.m), r->pc.T);
    len += (size_t)snprintf(buf + len, n - len, "\"bytes\":{");
    for (int cat = 0; cat < BFIT_MEM_NCAT && len < n; cat++)
        len += (size_t)snprintf(buf + len, n - len, "%s\"%s\":%llu", cat ? "," : "",
                                bfit_mem_cat_name((bfit_mem_cat)cat), (unsigned long long)p.bytes[cat]);
    if (len < n)
        snprintf(buf + len, n - len, "},\"peak\":%llu,\"budget\":%llu", (unsigned long long)(p.peak + r->pc.extra),
                 (unsigned long long)bfit_plan_budget(r->base_capacity, r->cfg.margin));
}

/* What the loaders decided that a person should see (a CSV's header). */
static void log_data_notes(bfit_run *r)
{
    const bfit_dataset *sets[2] = {r->s.train_own, r->s.test_own};
    for (int i = 0; i < 2; i++) {
        char src[1024], note[400];
        if (!sets[i] || !bfit_dataset_note(sets[i])[0] ||
            (i == 1 && sets[0] && !strcmp(bfit_dataset_source(sets[0]), bfit_dataset_source(sets[1]))))
            continue;
        bfit_json_escape(bfit_dataset_source(sets[i]), src, sizeof src);
        bfit_json_escape(bfit_dataset_note(sets[i]), note, sizeof note);
        bfit_log_event(&r->lg, "data", "\"split\":\"%s\",\"source\":\"%s\",\"samples\":%lld,\"note\":\"%s\"",
                       i ? "test" : "train", src, (long long)bfit_dataset_count(sets[i]), note);
        bfit_log_say(&r->lg, "batchfit: %s: %s", bfit_dataset_source(sets[i]), bfit_dataset_note(sets[i]));
    }
}

/* Memory-schedule points after the run's last step (known for a fixed
 * batch, or a step limit) would never happen: said, not silently dropped. */
static void memsched_beyond(bfit_run *r)
{
    const bfit_train_cfg *c = &r->cfg;
    int fixed = !c->auto_batch && !c->adaptive && !c->batch_tokens && !c->nbatch_schedule && !c->batch_instead_of_decay;
    int64_t last = fixed ? (r->per_epoch + c->batch - 1) / c->batch * c->epochs : 0;

    if (c->max_steps && (!last || c->max_steps < last))
        last = c->max_steps;
    for (int i = 0; last && i < c->nmemory_schedule; i++)
        if (c->memory_schedule[i].step > last) {
            bfit_log_event(&r->lg, "warning", "\"what\":\"memory_schedule: a point at step %lld, after the run's last "
                           "step %lld\"", (long long)c->memory_schedule[i].step, (long long)last);
            bfit_log_say(&r->lg, "batchfit: warning: --memory-schedule: the point at step %lld is after the run's "
                                 "last step, %lld: it will not happen", (long long)c->memory_schedule[i].step,
                         (long long)last);
            return;
        }
}

/* The run's opening line for people: what trains on what, E and its split. */
static void say_opening(bfit_run *r)
{
    const bfit_train_cfg *c = &r->cfg;
    if (c->batch_tokens)
        bfit_log_say(&r->lg, "batchfit: training %s on %s: %lld parameters, batch %d tokens (micro-batch %d tokens: "
                     "up to %d sequences of %d, more of shorter ones), %d epoch(s) of %lld sequences (about %lld "
                     "tokens)", c->model, c->data ? c->data : "data", (long long)bfit_model_param_count(r->s.M),
                     r->pos.d.batch, r->pos.d.m, bfit_run_plan_seqs(r, r->pos.d.m), r->pc.T, c->epochs,
                     (long long)r->per_epoch, (long long)r->epoch_units);
    else if (r->dp && r->dp->size > 1) { /* each rank trains its share of E: rank 0's figures */
        int share = (r->pos.d.batch + r->dp->size - 1) / r->dp->size, m = r->pos.d.m < share ? r->pos.d.m : share;
        bfit_log_say(&r->lg, "batchfit: training %s on %s: %lld parameters, batch %d over %d processes (shares of "
                     "about %d to start; rank 0's micro-batch %d x %d), %d epoch(s) of %lld samples", c->model,
                     c->data ? c->data : "data", (long long)bfit_model_param_count(r->s.M), r->pos.d.batch,
                     r->dp->size, share, m, (share + m - 1) / m, c->epochs, (long long)r->per_epoch);
    } else {
        char what[96] = "samples"; /* a token model's are sequences: of how many tokens, attended how */
        if (r->s.M->per_token)
            snprintf(what, sizeof what, "sequences of %s%d tokens%s", c->seq_max ? "up to " : "", r->pc.T,
                     c->attention == BFIT_ATTN_LEAN     ? ", attention lean"
                     : c->attention == BFIT_ATTN_STORED ? ", attention stored"
                                                        : "");
        bfit_log_say(&r->lg, "batchfit: training %s on %s: %lld parameters, batch %d (micro-batch %d x %d), %d epoch(s) "
                     "of %lld %s", c->model, c->data ? c->data : "data", (long long)bfit_model_param_count(r->s.M),
                     r->pos.d.batch, r->pos.d.m, r->pos.d.k, c->epochs, (long long)r->per_epoch, what);
    }
}

static void log_start(bfit_run *r, const bfit_controller_config *cc)
{
    const bfit_train_cfg *c = &r->cfg;
    bfit_device_info di;
    char plan[512], model[1024], data[1024], why[1100];
    bfit_device_info_get(r->s.dev, &di);
    bfit_json_escape(r->s.device_why, why, sizeof why);
    plan_json(r, plan, sizeof plan);
    log_data_notes(r);
    /* paths may hold quotes or backslashes: the log must stay JSON */
    bfit_json_escape(c->model, model, sizeof model);
    bfit_json_escape(c->data ? c->data : "(given)", data, sizeof data);
    /* synthetic's test set is another draw (seed + 1) under the same name: separate */
    if ((r->s.train_own && r->s.test_own && !(c->data && !strcmp(c->data, "synthetic")) &&
         !strcmp(bfit_dataset_source(r->s.train_own), bfit_dataset_source(r->s.test_own))) ||
        (r->s.train && r->s.train == r->s.test)) { /* a caller's set (arrays) given for both */
        /* a single file has no test split: say so rather than report training accuracy as a test */
        bfit_log_event(&r->lg, "warning", "\"what\":\"no separate test split: evaluating on the training data\"");
        bfit_log_say(&r->lg, "batchfit: warning: %s has no separate test split, so \"test\" figures are on the "
                             "training data; give a test data set", c->data);
    }
    if (r->s.test_is_data && r->s.test_own) { /* not the whole of it: said, as the user asked for it */
        char src[1024];
        bfit_json_escape(bfit_dataset_source(r->s.test_own), src, sizeof src);
        bfit_log_event(&r->lg, "data", "\"split\":\"test\",\"source\":\"%s\",\"samples\":%lld,\"note\":\"test_data "
                       "names the training data: its held-out part\"", src, (long long)bfit_dataset_count(r->s.test_own));
        bfit_log_say(&r->lg, "batchfit: --test-data names the training data: testing on its held-out part, %s",
                     bfit_dataset_source(r->s.test_own));
    }
    if (c->epoch_samples > r->per_epoch) { /* capped at the set: say so rather than train less than asked quietly */
        bfit_log_event(&r->lg, "warning", "\"what\":\"epoch_samples %lld is more than the %lld training samples: an "
                       "epoch is all of them\"", (long long)c->epoch_samples, (long long)r->per_epoch);
        bfit_log_say(&r->lg, "batchfit: warning: --epoch-samples %lld is more than the %lld training samples: an epoch "
                             "is all of them (more passes: --epochs)", (long long)c->epoch_samples,
                     (long long)r->per_epoch);
    }
    memsched_beyond(r);
    {
        int64_t tests = r->te.src ? r->te.src->samples : r->s.test ? bfit_dataset_count(r->s.test) : 0;
        if (tests > 0 && c->eval_samples > tests) { /* likewise */
            bfit_log_event(&r->lg, "warning", "\"what\":\"eval_samples %lld is more than the %lld test samples: an "
                           "evaluation is all of them\"", (long long)c->eval_samples, (long long)tests);
            bfit_log_say(&r->lg, "batchfit: warning: --eval-samples %lld is more than the %lld test samples: an "
                                 "evaluation is all of them", (long long)c->eval_samples, (long long)tests);
        }
    }
    /* a bidirectional model told to predict the next token sees it: the loss falls, nothing is learnt */
    if (r->s.M->per_token && bfit_model_vocab(r->s.M) > 0 && !bfit_model_causal(r->s.M) && r->s.M->seq_lens &&
        c->mlm.p <= 0 && !c->train_source && r->s.train && !bfit_dataset_is_tags(r->s.train)) {
        bfit_log_event(&r->lg, "warning", "\"what\":\"bidirectional attention trained on the next token\"");
        bfit_log_say(&r->lg, "batchfit: warning: %s's attention is bidirectional: each token sees the next one, "
                             "which is its label here, so it learns to copy it. Train an encoder (BERT's) as a "
                             "masked LM: --mask-tokens 0.15 --mask-id ID", c->model);
    }
    bfit_log_event(&r->lg, "start",
                   "\"model\":\"%s\",\"data\":\"%s\",\"params\":%lld,\"batch\":%d,\"micro_batch\":%d,"
                   "\"epochs\":%d,\"samples_per_epoch\":%lld,\"optimizer\":\"%s\",\"lr\":%g,\"lr_rule\":\"%s\","
                   "\"seed\":%llu,\"capacity\":%llu,\"device\":\"%s\",\"device_choice\":\"%s\",\"device_overhead\":%llu,"
                   "\"threads\":%d,\"threads_auto\":%d,\"threads_pack\":%d,"
                   "\"adaptive\":%d,\"auto\":%d,\"batch_tokens\":%d,\"precision\":\"%s\",\"lean\":%d,\"recompute\":\"%s\","
                   "\"recompute_chosen\":\"%s\",\"recomputed_share\":%.4f,\"plan\":{%s},\"version\":\"%s\","
                   "\"schedule\":\"%s\",\"warmup\":%lld,\"momentum\":%g,\"nesterov\":%d,\"weight_decay\":%g,"
                   "\"clip\":%g,\"augment\":%d,\"normalize\":%d,\"mask_tokens\":%g,\"token_accuracy\":\"%s\","
                   "\"options\":%s",
                   model, data, (long long)bfit_model_param_count(r->s.M), r->pos.d.batch,
                   r->pos.d.m, c->epochs, (long long)r->per_epoch, bfit_optim_kind_name(c->opt.kind), c->lr,
                   bfit_lr_rule_name(cc->rule), (unsigned long long)c->seed, (unsigned long long)r->base_capacity,
                   di.name, why, (unsigned long long)di.overhead, di.threads, r->tg_on && !r->tg.keep_count,
                   r->tg_on && r->tg.can_pack, c->adaptive, c->auto_batch, c->batch_tokens,
                   bfit_dtype_name(c->storage.precision), c->storage.lean, bfit_recompute_name(c->storage.recompute),
                   bfit_recompute_name(bfit_model_storage(r->s.M).recompute), r->regen_share, plan,
                   BFIT_VERSION_STRING, bfit_lr_sched_name(c->sched.kind), (long long)c->sched.warmup_steps,
                   c->opt.kind == BFIT_OPT_SGD ? c->opt.momentum : c->opt.beta1, c->opt.nesterov, c->opt.weight_decay,
                   c->clip, c->augment, c->normalize, c->mlm.p,
                   bfit_token_acc_name(&c->mlm, r->s.train && bfit_dataset_is_tags(r->s.train)),
                   c->options_json ? c->options_json : "{}");
    bfit_log_say(&r->lg, "batchfit: device %s", r->s.device_why);
    bfit_run_monitor(r, 1);
    say_opening(r);
}

/* The largest micro-batch up to target the plan fits now (0: none). */
static int fits_now(bfit_run *r, int target)
{
    uint64_t budget = bfit_plan_budget(bfit_arena_capacity(r->s.arena), r->cfg.margin);
    int m = 0;
    if (budget <= r->pc.extra ||
        bfit_plan_max_batch(r->s.M, &r->cfg.opt, 1, budget - r->pc.extra, target, &m, NULL) != BFIT_OK)
        return 0;
    return m;
}

/* conv_algo auto on a GPU: the fastest convolution algorithms, unless the
 * leanest let a larger micro-batch of the effective batch fit (one choice
 * for the whole model). */
static int resolve_conv_algo(bfit_run *r)
{
    const bfit_train_cfg *c = &r->cfg;
    int target = seqs_of(&r->pc, c->micro_batch                      ? c->micro_batch
                                 : c->adaptive || c->auto_batch ? c->batch_max
                                                                : c->batch),
        fast, lean, rc;
    bfit_conv_algo pick = BFIT_CONV_FASTEST;

    if (c->conv_algo != BFIT_CONV_AUTO || strncmp(bfit_device_name(r->s.dev), "cuda", 4) || !r->s.dev_own)
        return BFIT_OK;
    r->pc.M = r->s.M;
    fast = fits_now(r, target);
    lean = fast;
    if (fast < target) {
        if ((rc = bfit_session_reopen(&r->s, &r->sc, BFIT_CONV_LEAN)) != BFIT_OK)
            return rc;
        r->pc.M = r->s.M;
        lean = fits_now(r, target);
        pick = lean > fast ? BFIT_CONV_LEAN : BFIT_CONV_FASTEST;
        if (pick == BFIT_CONV_FASTEST && (rc = bfit_session_reopen(&r->s, &r->sc, BFIT_CONV_FASTEST)) != BFIT_OK)
            return rc;
    }
    bfit_log_event(&r->lg, "conv_algo", "\"chosen\":\"%s\",\"target\":%d,\"fastest_fits\":%d,\"lean_fits\":%d",
                   bfit_conv_algo_name(pick), target, fast, lean);
    bfit_log_say(&r->lg, "batchfit: convolution algorithms: %s (micro-batch %d of %d fits with the fastest, %d with "
                         "the leanest)", bfit_conv_algo_name(pick), fast, target, lean);
    return BFIT_OK;
}

/* Precision, lean storage and recomputation; auto for the target micro-batch
 * (the whole E in one micro-step unless told otherwise). */
static int resolve_storage(bfit_run *r)
{
    const bfit_train_cfg *c = &r->cfg;
    int target = seqs_of(&r->pc, c->micro_batch                      ? c->micro_batch
                                 : c->adaptive || c->auto_batch ? c->batch_max
                                                                : c->batch),
        rc;
    uint64_t budget = bfit_plan_budget(r->base_capacity, c->margin);
    bfit_storage st;
    bfit_step_plan p;

    budget = budget > r->pc.extra ? budget - r->pc.extra : 0;
    if ((rc = bfit_model_set_storage(r->s.M, &c->storage, &c->opt, budget, target)) != BFIT_OK)
        return rc;
    st = bfit_model_storage(r->s.M);
    if (bfit_plan_compute(r->s.M, &c->opt, target, 1, &p) != BFIT_OK)
        p.flops = p.regen_flops = 0;
    r->regen_share = p.flops > 0 ? p.regen_flops / p.flops : 0.0; /* for the start event */
    if (c->storage.recompute != BFIT_RECOMPUTE_NONE || c->storage.precision != BFIT_F32 || c->precision_auto)
        bfit_log_say(&r->lg, "batchfit: storage: %s%s%s, recompute %s%s%s: %.1f%% of a step's work is recomputed at "
                     "micro-batch %d", bfit_dtype_name(st.precision),
                     c->precision_auto ? bfit_precision_auto_note(st.precision) : "",
                     st.lean ? " lean" : "",
                     bfit_recompute_name(c->storage.recompute), c->storage.recompute == BFIT_RECOMPUTE_AUTO ? " -> " : "",
                     c->storage.recompute == BFIT_RECOMPUTE_AUTO ? bfit_recompute_name(st.recompute) : "",
                     p.flops > 0 ? 100 * p.regen_flops / p.flops : 0.0, target);
    return BFIT_OK;
}

/* A token budget: what it needs of the model and the run (the units of the
 * plan are set, and the micro-batch's sequences per length have room). */
static int token_setup(bfit_run *r)
{
    bfit_model *M = r->s.M;
    r->pc.T = M->per_token ? M->input.d[0] : 0;
    /* a classifier of token ids: its padded sequences run at each micro-batch's longest (pack.c) */
    r->cls_T = M->input_dtype == BFIT_I32 && !M->per_token && !r->cfg.seq_max ? M->input.d[0] : 0;
    r->pc.cls_T = r->cls_T;
    r->pc.vary = r->cfg.seq_max > 0 || r->cls_T;
    r->pc.tokens = r->cfg.batch_tokens;
    if (r->cfg.batch_tokens && !r->pc.T)
        return bfit_fail_field(BFIT_EINVAL, "batch_tokens", "counts tokens, and %s is not a token model (its input "
                               "is not 'input tokens=T'): give the batch in samples", r->cfg.model);
    if (r->cfg.batch_tokens && r->dp)
        return bfit_fail_field(BFIT_EINVAL, "batch_tokens", "data-parallel training of token models is not "
                               "supported yet: train them in one process");
    /* a classifier of token ids in one process is sized by length too: more of its short sequences fit */
    if (!r->cfg.seq_max && !r->cfg.batch_tokens && (!r->cls_T || r->dp))
        return BFIT_OK;
    r->nfit = (r->pc.T ? r->pc.T : r->cls_T) / 16 + 2;
    if (!(r->fit_seqs = calloc((size_t)r->nfit, sizeof *r->fit_seqs)))
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    return BFIT_OK;
}

/* An epoch in E's units: its samples, or with a token budget its tokens,
 * the samples times the data's mean length (a caller's source: T each, the
 * most it can be). */
static int64_t epoch_units(const bfit_run *r)
{
    const bfit_dataset *d = r->s.train;
    double sum = 0;
    int64_t n;
    if (!r->cfg.batch_tokens)
        return r->per_epoch;
    if (r->cfg.train_source)
        return r->per_epoch * r->pc.T;
    n = bfit_dataset_count(d);
    for (int64_t i = 0; i < n; i++)
        sum += bfit_dataset_sample_len(d, i);
    return (int64_t)llround(sum / (double)n * (double)r->per_epoch);
}

/* The host copy of the running statistics a step starts from. */
static int alloc_stats_snap(bfit_run *r)
{
    for (int i = 0; i < r->s.M->nparams; i++)
        if (!r->s.M->params[i]->trainable)
            r->stats_bytes += bfit_param_bytes(r->s.M->params[i]);
    if (r->stats_bytes && !(r->stats_snap = malloc(r->stats_bytes)))
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    return BFIT_OK;
}

int64_t bfit_run_train_count(const bfit_run *r)
{
    return r->cfg.train_source ? r->cfg.train_source->samples : bfit_dataset_count(r->s.train);
}

int64_t bfit_run_epoch_samples(const bfit_run *r, int64_t ntrain)
{
    return r->cfg.epoch_samples && r->cfg.epoch_samples < ntrain ? r->cfg.epoch_samples : ntrain;
}

/* The training samples of an epoch into *ntrain; none, or no test sample,
 * is refused (a text of blank lines under --seq-max: no line holds a token
 * with a next one; a short text: no test part). */
static int check_counts(const bfit_run *r, int64_t *ntrain)
{
    static const char lines[] = ": with --seq-max a sample is a line's tokens that have a next token, and no line "
                                "has any";
    const char *test = r->s.test ? bfit_dataset_source(r->s.test) : "";

    *ntrain = bfit_run_train_count(r);
    if (*ntrain < 1 && r->cfg.train_source)
        return bfit_fail_field(BFIT_EINVAL, "train_source", "has no samples in an epoch");
    if (*ntrain < 1)
        return bfit_fail_field(BFIT_EINVAL, "data", "%s has no training samples%s", bfit_dataset_source(r->s.train),
                               r->cfg.seq_max > 0 ? lines : "");
    if (r->s.test && bfit_dataset_count(r->s.test) < 1)
        return bfit_fail_field(BFIT_EINVAL, r->cfg.test_data ? "test_data" : "data", "%s has no test samples%s%s",
                               test, strstr(test, "(test part") ? ": a text's test part is every 20th block of 100 lines"
                               : r->cfg.seq_max > 0 ? lines : "", !strstr(test, "(test part") ? ""
                               : r->s.test_is_data ? "; --test-data names the training data, so its held-out part "
                                                     "is the test: give another text as --test-data"
                               : "; give the test text as --test-data (read whole)");
    return BFIT_OK;
}

/* The first decision, in the room the set-up left: under ulimit -v the
 * staging and the streams took room that the capacity read before them
 * still counted (resnet50 under 3 GB: its first step was planned at 34 in
 * room for less, and a kernel was then refused). */
static int first_decision(bfit_run *r)
{
    uint64_t before = r->base_capacity;
    int rc;

    bfit_run_watch_device(r);
    r->base_capacity = bfit_arena_capacity(r->s.arena); /* the start event's: what the first step gets */
    if (r->base_capacity != before)
        bfit_run_memory_now(r);
    r->pos.d.size = sizeof r->pos.d;
    rc = bfit_controller_next(r->ctl, 0, 0, &r->pos.d);
    if (rc == BFIT_ENOMEM && r->base_capacity != before) {
        /* not even micro-batch 1 fits in what is left: decided in what was
         * there, the first step's reservation is refused, and it fails as
         * any step would (the limit named, a checkpoint, the CLI's exit 3) */
        bfit_controller_set_memory(r->ctl, before, before > r->fixed_bytes ? before - r->fixed_bytes : 0);
        rc = bfit_controller_next(r->ctl, 0, 0, &r->pos.d);
    }
    return rc;
}

/* The most memory the run may have: --memory, or on a device shared with
 * other processes all of it but what this process holds outside the arena
 * (the capacity follows what is free up to this, so memory another process
 * held at the start comes back to the run); else what was free at the start. */
static uint64_t ceiling(bfit_run *r)
{
    bfit_device_info di;
    uint64_t cap = bfit_arena_capacity(r->s.arena), free_b, total;

    bfit_device_info_get(r->s.dev, &di);
    if (r->cfg.memory || !di.shared || di.limited || bfit_device_memory(r->s.dev, &free_b, &total) != BFIT_OK)
        return cap;
    return total > di.overhead && total - di.overhead > cap ? total - di.overhead : cap;
}

/* The controller, in the capacity there is; where not even micro-batch 1
 * fits, after waiting for what other processes hold of a shared device
 * (memwait.c), or refused saying why. */
static int new_controller(bfit_run *r, bfit_controller_config *cc)
{
    int rc;

    controller_config(r, cc);
    r->fixed_bytes = cc->fixed_bytes;
    while ((rc = bfit_controller_new(cc, &r->ctl)) == BFIT_ENOMEM) {
        if ((rc = bfit_run_wait_to_start(r)) != BFIT_OK)
            return rc;
        r->base_capacity = bfit_arena_capacity(r->s.arena);
        controller_config(r, cc);
    }
    return rc;
}

static int setup(bfit_run *r)
{
    bfit_controller_config cc;
    int64_t ntrain;
    int rc;

    if ((rc = open_session(r)) != BFIT_OK)
        return rc;
    /* a checkpoint this run cannot resume (another model, other data) is
     * refused before the log is opened, which would cut the run's log back */
    if (r->ck && (rc = bfit_run_resume_check(r)) != BFIT_OK)
        return rc;
    if (bfit_run_dist_writer(r)) { /* the other ranks of a group are quiet */
        rc = bfit_log_open_at(&r->lg, r->cfg.log, r->cfg.human, r->cfg.progress_interval, r->log_offset);
        if (rc != BFIT_OK)
            return rc;
        r->lg.on_event = r->cfg.on_event;
        r->lg.ud = r->cfg.cb_ud;
        r->log_open = 1;
    }
    r->configured = ceiling(r);
    bfit_run_apply_memory_schedule(r, 0);
    bfit_run_watch_device(r);
    r->base_capacity = bfit_arena_capacity(r->s.arena);
    if ((rc = check_counts(r, &ntrain)) != BFIT_OK)
        return rc;
    r->per_epoch = bfit_run_epoch_samples(r, ntrain);
    if (r->cfg.micro_batch && r->cfg.micro_batch < bfit_model_min_batch(r->s.M))
        return bfit_fail_field(BFIT_EINVAL, "micro_batch", "%d is too small: the model trains on micro-batches of at "
                               "least %d (batch norm over vectors needs two values per channel)",
                               r->cfg.micro_batch, bfit_model_min_batch(r->s.M));
    r->pc.M = r->s.M;
    r->pc.opt = &r->cfg.opt;
    if ((rc = token_setup(r)) != BFIT_OK)
        return rc;
    r->epoch_units = epoch_units(r);
    /* data-parallel: the noise scale takes the ranks' norms, not the micro-batches' */
    r->track = (r->cfg.adaptive || r->cfg.auto_batch) && !r->dp;
    r->diff_sq = -1;
    r->pos.track_stale = 1; /* the copy starts at zero, not at a step's gradient */
    r->scaling = r->cfg.loss_scale == BFIT_LOSS_SCALE_DYNAMIC ||
                 (r->cfg.loss_scale == BFIT_LOSS_SCALE_AUTO && r->cfg.storage.precision == BFIT_F16);
    bfit_loss_scaler_init(&r->pos.ls, r->cfg.loss_scale_init, r->cfg.loss_scale_interval);
    if (r->track || r->cfg.clip > 0 || r->scaling || (r->dp && r->cfg.adaptive))
        r->pc.extra = bfit_gradnorm_bytes(r->s.M->trainable, r->s.M->ntrainable, r->track);
    r->sched = r->cfg.sched;
    if ((rc = resolve_conv_algo(r)) != BFIT_OK || (rc = resolve_storage(r)) != BFIT_OK)
        return rc;
    r->pc.M = r->s.M;
    if (r->cfg.fail_nth_alloc)
        bfit_arena_fail_nth(r->s.arena, r->cfg.fail_nth_alloc);
    if ((rc = new_controller(r, &cc)) != BFIT_OK || (rc = take_fixed(r)) != BFIT_OK ||
        (rc = open_streams(r, &cc)) != BFIT_OK)
        return rc;
    if ((rc = first_decision(r)) != BFIT_OK)
        return rc;
    r->E0 = r->cfg.lr_ref_batch ? r->cfg.lr_ref_batch : r->pos.d.batch;
    if ((rc = finish_schedule(r)) != BFIT_OK || (rc = alloc_stats_snap(r)) != BFIT_OK)
        return rc;
    r->pos.m = r->pos.d.m;
    if ((rc = bfit_run_threads_start(r)) != BFIT_OK)
        return rc;
    if (r->log_offset < 0) /* a log continued from a checkpoint has its start */
        log_start(r, &cc);
    if (r->ck && (rc = bfit_run_resume_state(r)) != BFIT_OK)
        return rc;
    bfit_run_resume_close(r);
    /* rank 0 writes the checkpoints of a group */
    snprintf(r->ckpt_dir, sizeof r->ckpt_dir, "%s", r->cfg.checkpoint && bfit_run_dist_writer(r) ? r->cfg.checkpoint : "");
    r->ckpt_t = bfit_clock_mono();
    return BFIT_OK;
}

/* A report without a log of a run with checkpoints: its events go to
 * DIR/events.jsonl, a log the checkpoints record, so that a resumed run
 * continues it and its report draws the whole run. */
static int ckpt_events(bfit_train_cfg *c, run_outputs *o)
{
    struct stat st;
    if (stat(c->checkpoint, &st) != 0 && mkdir(c->checkpoint, 0777) != 0 && errno != EEXIST)
        return bfit_fail_field(BFIT_EIO, "checkpoint", "%s: cannot make the directory: %s", c->checkpoint,
                               strerror(errno));
    snprintf(o->log, sizeof o->log, "%s/events.jsonl", c->checkpoint);
    c->log = o->log;
    return BFIT_OK;
}

/* The outputs once the configuration is complete; the report's events go
 * to a temporary file beside it when there is no log (nor checkpoints). */
static int outputs(bfit_run *r, run_outputs *o)
{
    bfit_train_cfg *c = &r->cfg;

    memset(o, 0, sizeof *o);
    snprintf(o->save, sizeof o->save, "%s", c->save ? c->save : "");
    snprintf(o->report, sizeof o->report, "%s", c->report ? c->report : "");
    snprintf(o->log, sizeof o->log, "%s", c->log && strcmp(c->log, "-") ? c->log : "");
    if (!c->report || o->log[0])
        return BFIT_OK;
    if (c->checkpoint && bfit_run_dist_writer(r))
        return ckpt_events(c, o);
    snprintf(o->tmp_base, sizeof o->tmp_base, "%s.log", c->report);
    if (bfit_atomic_open(&o->tmp, o->tmp_base) != BFIT_OK)
        return bfit_fail_field(BFIT_EIO, "report", "%s: cannot create a temporary event log: %s", c->report,
                               bfit_errmsg());
    snprintf(o->log, sizeof o->log, "%s", o->tmp.tmp);
    o->tmp_log = r->tmp_log = 1;
    c->log = o->log;
    return BFIT_OK;
}

int bfit_run_create(const bfit_train_cfg *cfg, bfit_run **out, int *logged, run_outputs *o)
{
    bfit_run *r;
    int rc, on, rank;

    *out = NULL;
    *logged = 0;
    r = calloc(1, sizeof *r);
    if (!r)
        return bfit_fail(BFIT_ENOMEM, "out of host memory");
    r->cfg = *cfg;
    r->log_offset = -1;
    r->ckpt_step = -1;
    /* data-parallel: the group first, so that every later failure of one
     * rank reaches the others (bfit_run_dist_setup) */
    if ((rc = bfit_run_dist_prepare(&r->cfg, &on, &rank)) != BFIT_OK || (on && (rc = bfit_run_dist_new(r)) != BFIT_OK)) {
        bfit_run_free(r);
        return rc;
    }
    /* resuming: the checkpoint's configuration fills what the caller left
     * out (its outputs are rank 0's again) */
    if (cfg->resume && (rc = bfit_run_resume_open(r)) == BFIT_OK)
        rc = bfit_run_dist_prepare(&r->cfg, &on, &rank);
    if (rc == BFIT_OK) {
        fill_defaults(&r->cfg);
        if ((rc = check_cfg(&r->cfg)) == BFIT_OK)
            rc = bfit_run_checkpoint_dir_claim(r);
    }
    if (rc == BFIT_OK && o)
        rc = outputs(r, o);
    r->ep_t0 = bfit_clock_mono();
    if (rc == BFIT_OK)
        rc = setup(r);
    if (r->dp)
        rc = bfit_run_dist_setup(r, rc);
    *logged = r->log_open;
    if (rc != BFIT_OK) {
        bfit_run_finish(r, rc);
        bfit_run_free(r);
        return rc;
    }
    *out = r;
    return BFIT_OK;
}

int bfit_run_new_from(const bfit_train_cfg *cfg, bfit_run **out)
{
    int logged;
    return bfit_run_create(cfg, out, &logged, NULL);
}

void bfit_run_free(bfit_run *r)
{
    if (!r)
        return;
    if (r->log_open)
        bfit_log_close(&r->lg);
    bfit_feed_close(&r->tr);
    bfit_feed_close(&r->te);
    bfit_gradnorm_free(r->gn);
    bfit_optim_free(r->opt);
    bfit_controller_free(r->ctl);
    bfit_run_dist_free(r); /* the device's collectives go before the device */
    bfit_session_close(&r->s);
    free(r->stage_x);
    free(r->stage_y);
    free(r->pack_x);
    free(r->pack_y);
    free(r->order);
    free(r->fit_seqs);
    free(r->micro_sq);
    free(r->micro_n);
    free(r->stats_snap);
    bfit_run_resume_close(r);
    bfit_run_checkpoint_dir_release(r);
    cJSON_Delete(r->ck_cfg);
    if (r->keep_free)
        r->keep_free(r->keep);
    free(r);
}

bfit_arena *bfit_run_arena(bfit_run *r) { return r->s.arena; }

int bfit_run_done(const bfit_run *r)
{
    if (!r) /* no run: nothing to do (a loop on it ends) */
        return 1;
    if (r->cfg.max_steps && r->pos.step >= r->cfg.max_steps)
        return 1;
    return r->pos.epoch >= r->cfg.epochs;
}

void bfit_run_result_get(const bfit_run *r, bfit_train_result *res)
{
    bfit_arena_stats st;
    *res = r->pos.res;
    res->steps = r->pos.step;
    res->stop_rank = -1;
    if (res->stopped == BFIT_ESTOPPED && bfit_run_stop_requested((bfit_run *)r)) { /* this process's own */
        res->stop_flag = r->cfg.stop ? (int)*r->cfg.stop : 0;
        res->stop_rank = r->dp ? r->dp->rank : -1;
    } else if (res->stopped == BFIT_ESTOPPED && r->dp) { /* the rank's that stopped the group */
        res->stop_flag = r->dp->peer_flag;
        res->stop_rank = r->dp->peer_rank;
    }
    res->samples = r->pos.samples;
    res->seconds = r->pos.train_time;
    if (!res->micro_batch) /* no step yet: what the first would run */
        res->micro_batch = r->pos.m;
    bfit_arena_stats_get(r->s.arena, &st);
    res->peak_bytes = st.peak;
    res->dist_alone = r->dp && r->dp->size > 1 && !r->dp->together;
    res->images_skipped = bfit_dataset_images_skipped(r->s.train) +
                          (r->s.test != r->s.train ? bfit_dataset_images_skipped(r->s.test) : 0);
}

void bfit_run_finish(bfit_run *r, int rc)
{
    if (!r || !r->log_open)
        return;
    if (rc == BFIT_OK) {
        bfit_train_result res;
        char tok[96] = "";
        bfit_run_result_get(r, &res);
        bfit_run_monitor(r, 1);
        if (res.tokens) /* a token model's figures are per token: the report's headline says them */
            snprintf(tok, sizeof tok, ",\"tokens\":%lld,\"test_loss\":%.6f", (long long)res.tokens, res.test_loss);
        bfit_log_event(&r->lg, "end",
                       "\"steps\":%lld,\"samples\":%lld,\"test_acc\":%.6f,\"train_seconds\":%.3f,\"peak\":%llu,"
                       "\"ooms\":%d,\"batch_changes\":%d%s",
                       (long long)res.steps, (long long)res.samples, res.test_acc, res.seconds,
                       (unsigned long long)res.peak_bytes, res.ooms, res.batch_changes, tok);
        return;
    }
    {
        char esc[2048];
        bfit_json_escape(bfit_errmsg(), esc, sizeof esc);
        bfit_log_event(&r->lg, "error", "\"step\":%lld,\"epoch\":%d,\"code\":\"%s\",\"field\":\"%s\",\"message\":\"%s\"",
                       (long long)r->pos.step, r->pos.taken > 0 || r->pos.epoch == 0 ? r->pos.epoch + 1 : r->pos.epoch,
                       bfit_strerror(rc), bfit_errfield(), esc);
    }
}
