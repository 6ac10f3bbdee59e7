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
 * then its first E), rule (the lr rule as --lr-scaling takes; linear),
 * schedule (the lr schedule, constant or cosine over max_epochs; constant),
 * full (1: train on to max_epochs after reaching the target, and report
 * the accuracy there as final_acc: the same epoch budget for every side). A
 * fixed batch E trains at lr * E / lr_ref (the linear rule); auto rescales it
 * by the same rule as E changes.
 *
 * Prints an `eval` line per evaluation and one `side=batchfit` result line
 * of key=value pairs. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <batchfit.h>

typedef struct opts {
    const char *model, *data, *log, *sched, *rule, *schedule;
    int auto_batch, batch, lr_ref, max_epochs, threads, batch_min, batch_max, full;
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
        KEY("full", full, atoi);
        else if (!strcmp(argv[i], "schedule")) o->schedule = v;
        else if (!strcmp(argv[i], "data")) o->data = v;
        else if (!strcmp(argv[i], "log")) o->log = v;
        else if (!strcmp(argv[i], "sched")) o->sched = v;
        else if (!strcmp(argv[i], "rule")) o->rule = v;
        else return -1;
#undef KEY
    }
    return 0;
}

/* One option, formatted; 0, or -1 after saying what was wrong. */
static int set(bfit_config *c, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set(bfit_config *c, const char *name, const char *fmt, ...)
{
    char v[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    if (bfit_config_set(c, name, v) == BFIT_OK)
        return 0;
    fprintf(stderr, "bfit_tta: %s\n", bfit_errmsg());
    return -1;
}

/* The run's options from ours. */
static int config(const opts *o, bfit_config *c)
{
    int bad = set(c, "model", "%s", o->model) | set(c, "data", "%s", o->data) |
              set(c, "epochs", "%d", o->max_epochs) | set(c, "threads", "%d", o->threads) |
              set(c, "seed", "%lld", o->seed) | set(c, "lr", "%.17g", o->lr) | set(c, "lr-ref-batch", "%d", o->lr_ref) |
              set(c, "lr-scaling", "%s", o->rule ? o->rule : "linear") | set(c, "optimizer", "sgd") |
              set(c, "momentum", "%.17g", o->momentum) | set(c, "weight-decay", "%.17g", o->wd) |
              set(c, "schedule", "%s", o->schedule ? o->schedule : "constant") | set(c, "dist", "off") |
              /* warm-up in samples: steps of E, or of lr_ref samples with auto */
              set(c, "warmup", "%lld", o->warmup / (o->auto_batch ? o->lr_ref : o->batch));
    if (o->log)
        bad |= set(c, "log", "%s", o->log);
    if (o->sched)
        bad |= set(c, "batch-schedule", "%s", o->sched) | set(c, "batch", "%d", o->batch);
    else if (o->auto_batch)
        bad |= set(c, "batch", "auto") | set(c, "batch-min", "%d", o->batch_min) | set(c, "batch-max", "%d", o->batch_max);
    else
        bad |= set(c, "batch", "%d", o->batch);
    return bad;
}

int main(int argc, char **argv)
{
    opts o;
    bfit_config *c;
    bfit_run *r;
    bfit_result *res = NULL;
    bfit_step_info si = BFIT_SIZED(bfit_step_info);
    bfit_eval_info ev = BFIT_SIZED(bfit_eval_info);
    long long samples = 0, next_eval, at_samples = 0, at_steps = 0;
    double at_time = -1, acc = 0;
    int rc = BFIT_OK;

    if (parse(argc, argv, &o)) {
        fprintf(stderr, "usage: bfit_tta MODEL.cfg BATCH|auto [key=value ...] (see the source's header)\n");
        return 2;
    }
    if (!(c = bfit_config_new()) || config(&o, c)) {
        bfit_config_free(c);
        return 2;
    }
    next_eval = o.eval_every;
    rc = bfit_run_new(c, &r);
    bfit_config_free(c);
    if (rc != BFIT_OK) {
        fprintf(stderr, "bfit_tta: %s\n", bfit_errmsg());
        return 1;
    }
    while (!bfit_run_done(r) && (o.full || at_time < 0)) {
        if ((rc = bfit_run_step(r, &si)) != BFIT_OK)
            break;
        samples += si.batch;
        if (samples < next_eval && !si.epoch_end)
            continue;
        if (samples >= next_eval)
            next_eval += o.eval_every;
        if ((rc = bfit_run_evaluate(r, &ev)) != BFIT_OK || (rc = bfit_run_result(r, &res)) != BFIT_OK)
            break;
        acc = ev.test_acc;
        printf("eval samples=%lld steps=%.0f train_s=%.3f acc=%.4f E=%.0f m=%.0f\n", samples,
               bfit_result_number(res, "steps"), bfit_result_number(res, "train_seconds"), acc,
               bfit_result_number(res, "batch"), bfit_result_number(res, "micro_batch"));
        fflush(stdout);
        if (acc >= o.target && at_time < 0) {
            at_time = bfit_result_number(res, "train_seconds");
            at_samples = samples;
            at_steps = (long long)bfit_result_number(res, "steps");
        }
        bfit_result_free(res);
        res = NULL;
    }
    if (rc == BFIT_OK)
        rc = bfit_run_result(r, &res);
    bfit_run_finish(r, rc);
    bfit_run_free(r);
    if (rc != BFIT_OK) {
        fprintf(stderr, "bfit_tta: %s\n", bfit_errmsg());
        bfit_result_free(res);
        return 1;
    }
    printf("side=batchfit batch=%s reached=%d time_s=%.3f samples=%lld steps=%lld final_acc=%.4f train_s=%.3f "
           "changes=%.0f last_E=%.0f noise_scale=%.4g\n",
           o.auto_batch ? "auto" : argv[2], at_time >= 0, at_time >= 0 ? at_time : bfit_result_number(res, "train_seconds"),
           at_time >= 0 ? at_samples : samples, at_time >= 0 ? at_steps : (long long)bfit_result_number(res, "steps"), acc,
           bfit_result_number(res, "train_seconds"), bfit_result_number(res, "batch_changes"),
           bfit_result_number(res, "batch"), bfit_result_number(res, "noise_scale"));
    bfit_result_free(res);
    return 0;
}
