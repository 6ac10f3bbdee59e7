/* time_to_acc.c - the batchfit side of bench/time_to_acc.py: trains a model
 * with a fixed effective batch or `auto`, evaluating on the whole test split
 * every EVAL_EVERY training samples, and reports the training time (steps
 * only: evaluation and set-up excluded) at which the test accuracy first
 * reached the target. Public API only (bfit_run_*).
 *
 *   bfit_tta MODEL.cfg BATCH|auto [key=value ...]
 *
 * keys: lr (the base lr, for a batch of lr_ref; default 0.05), lr_ref (128),
 * target (0.91), max_epochs (10), eval_every (samples, 6000), threads (2),
 * seed (1), wd (5e-4), momentum (0.9), warmup (samples of linear lr warm-up,
 * 0), batch_min (16), batch_max (4096), data (fashion-mnist), log (a JSON-lines
 * event log), sched (a batch schedule, AT:E,... as --batch takes; BATCH is
 * then its first E), rule (the lr rule as --lr-scaling takes; linear). A
 * fixed batch E trains at lr * E / lr_ref (the linear rule); auto rescales it
 * by the same rule as E changes.
 *
 * Prints an `eval` line per evaluation and one `side=batchfit` result line
 * of key=value pairs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batchfit.h"

typedef struct opts {
    const char *model, *data, *log, *sched, *rule;
    int auto_batch, batch, lr_ref, max_epochs, threads, batch_min, batch_max;
    double lr, target, wd, momentum;
    long long eval_every, warmup, seed;
} opts;

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){ .data = "fashion-mnist", .lr = 0.05, .lr_ref = 128, .target = 0.91, .max_epochs = 10,
                 .eval_every = 6000, .threads = 2, .seed = 1, .wd = 5e-4, .momentum = 0.9, .batch_min = 16,
                 .batch_max = 4096 };
    if (argc < 3)
        return -1;
    o->model = argv[1];
    o->auto_batch = !strcmp(argv[2], "auto");
    o->batch = o->auto_batch ? 0 : atoi(argv[2]);
    if (!o->auto_batch && o->batch < 1)
        return -1;
    for (int i = 3; i < argc; i++) {
        char *v = strchr(argv[i], '=');
        if (!v)
            return -1;
        *v++ = '\0';
#define KEY(name, field, conv) else if (!strcmp(argv[i], name)) o->field = conv(v)
        if (0) {
        }
        KEY("lr", lr, atof); KEY("lr_ref", lr_ref, atoi); KEY("target", target, atof);
        KEY("max_epochs", max_epochs, atoi); KEY("eval_every", eval_every, atoll); KEY("threads", threads, atoi);
        KEY("seed", seed, atoll); KEY("wd", wd, atof); KEY("momentum", momentum, atof);
        KEY("warmup", warmup, atoll); KEY("batch_min", batch_min, atoi); KEY("batch_max", batch_max, atoi);
        else if (!strcmp(argv[i], "data")) o->data = v;
        else if (!strcmp(argv[i], "log")) o->log = v;
        else if (!strcmp(argv[i], "sched")) o->sched = v;
        else if (!strcmp(argv[i], "rule")) o->rule = v;
        else return -1;
#undef KEY
    }
    return 0;
}

static bfit_batch_point sched_pts[BFIT_BATCH_SCHEDULE_MAX];

static bfit_train_cfg config(const opts *o)
{
    bfit_train_cfg c = bfit_train_cfg_default();
    c.model = o->model;
    c.data = o->data;
    c.epochs = o->max_epochs;
    c.threads = o->threads;
    c.seed = (uint64_t)o->seed;
    c.lr = o->lr;
    c.lr_ref_batch = o->lr_ref;
    c.lr_rule = BFIT_LR_LINEAR;
    c.opt = bfit_optim_cfg_default(BFIT_OPT_SGD);
    c.opt.momentum = o->momentum;
    c.opt.weight_decay = o->wd;
    c.sched = bfit_lr_schedule_default(BFIT_SCHED_CONSTANT);
    /* warm-up in samples: steps of E, or of lr_ref samples with auto */
    c.sched.warmup_steps = o->warmup / (o->auto_batch ? o->lr_ref : o->batch);
    c.log = o->log;
    if (o->auto_batch) {
        c.auto_batch = 1;
        c.batch_min = o->batch_min;
        c.batch_max = o->batch_max;
        c.batch = 0;
    } else {
        c.batch = o->batch;
    }
    return c;
}

int main(int argc, char **argv)
{
    opts o;
    bfit_train_cfg c;
    bfit_run *r;
    bfit_train_result res;
    bfit_step_info si;
    bfit_eval_info ev;
    long long samples = 0, next_eval, at_samples = 0, at_steps = 0;
    double at_time = -1, acc = 0;
    int rc = BFIT_OK;

    if (parse(argc, argv, &o)) {
        fprintf(stderr, "usage: bfit_tta MODEL.cfg BATCH|auto [key=value ...] (see the source's header)\n");
        return 2;
    }
    c = config(&o);
    if (o.sched) {
        if (bfit_batch_schedule_parse(o.sched, sched_pts, BFIT_BATCH_SCHEDULE_MAX, &c.nbatch_schedule) != BFIT_OK) {
            fprintf(stderr, "bfit_tta: sched=%s: %s\n", o.sched, bfit_errmsg());
            return 2;
        }
        c.batch_schedule = sched_pts;
    }
    if (o.rule) {
        bfit_lr_rule rule;
        if (bfit_lr_rule_parse(o.rule, &rule) != BFIT_OK) {
            fprintf(stderr, "bfit_tta: rule=%s: %s\n", o.rule, bfit_errmsg());
            return 2;
        }
        c.lr_rule = (int)rule;
    }
    next_eval = o.eval_every;
    if (bfit_run_new(&c, &r) != BFIT_OK) {
        fprintf(stderr, "bfit_tta: %s\n", bfit_errmsg());
        return 1;
    }
    while (!bfit_run_done(r) && at_time < 0) {
        if ((rc = bfit_run_step(r, &si)) != BFIT_OK)
            break;
        samples += si.batch;
        if (samples < next_eval && !si.epoch_end)
            continue;
        if (samples >= next_eval)
            next_eval += o.eval_every;
        if ((rc = bfit_run_evaluate(r, &ev)) != BFIT_OK)
            break;
        bfit_run_result(r, &res);
        acc = ev.test_acc;
        printf("eval samples=%lld steps=%lld train_s=%.3f acc=%.4f E=%d m=%d\n", samples, (long long)res.steps,
               res.seconds, acc, res.last_batch, res.micro_batch);
        fflush(stdout);
        if (acc >= o.target) {
            at_time = res.seconds;
            at_samples = samples;
            at_steps = res.steps;
        }
    }
    bfit_run_result(r, &res);
    bfit_run_finish(r, rc);
    bfit_run_free(r);
    if (rc != BFIT_OK) {
        fprintf(stderr, "bfit_tta: %s\n", bfit_errmsg());
        return 1;
    }
    printf("side=batchfit batch=%s reached=%d time_s=%.3f samples=%lld steps=%lld acc=%.4f train_s=%.3f "
           "changes=%d last_E=%d noise_scale=%.4g\n",
           o.auto_batch ? "auto" : argv[2], at_time >= 0, at_time >= 0 ? at_time : res.seconds,
           at_time >= 0 ? at_samples : samples, at_time >= 0 ? at_steps : (long long)res.steps, acc, res.seconds,
           res.batch_changes, res.last_batch, res.noise_scale);
    return 0;
}
