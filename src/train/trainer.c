/* trainer.c - the training loop and evaluation. */
#include "base/err.h"
#include "batch/plan.h"
#include "nn/spec.h"
#include "optim/clip.h"
#include "train/log.h"
#include "train/trainer.h"
#include "train/weights.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

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
    c.normalize = 1;
    c.progress_interval = 10;
    return c;
}

/* Everything a run holds, released in reverse by run_fini. */
typedef struct run {
    bfit_arena *arena;
    bfit_device *dev;
    bfit_graph_desc g;
    bfit_model *M;
    bfit_dataset *train, *test;
    bfit_stream *tr, *te;
    bfit_optim *opt;
    float *mean, *std;
} run;

static void run_fini(run *r)
{
    bfit_stream_free(r->tr);
    bfit_stream_free(r->te);
    bfit_optim_free(r->opt);
    bfit_model_free(r->M);
    bfit_graph_fini(&r->g);
    bfit_dataset_free(r->train);
    bfit_dataset_free(r->test);
    bfit_device_free(r->dev);
    bfit_arena_free(r->arena);
    free(r->mean);
    free(r->std);
}

/* Arena, device, model (no memory yet) and the data sets. */
static int run_setup(run *r, const char *model, const char *data, int need_train, uint64_t memory,
                     int threads, int normalize)
{
    int rc;
    bfit_shape ds;
    char a[32], b[32];

    memset(r, 0, sizeof *r);
    if (!memory)
        memory = bfit_host_available_memory();
    if (!memory)
        return bfit_fail(BFIT_EINVAL, "cannot tell the available memory: give --memory");
    r->arena = bfit_arena_new(memory, NULL);
    if (!r->arena)
        return BFIT_ENOMEM;
    rc = bfit_device_cpu_new(r->arena, threads, &r->dev);
    if (rc != BFIT_OK)
        return rc;
    rc = bfit_spec_parse_file(model, &r->g);
    if (rc != BFIT_OK)
        return rc;
    rc = bfit_model_new(&r->g, r->dev, &r->M);
    if (rc != BFIT_OK)
        return rc;
    /* the training split is needed for normalisation statistics even to evaluate */
    if (need_train || normalize) {
        rc = bfit_dataset_load(data, 1, NULL, &r->train);
        if (rc != BFIT_OK)
            return rc;
    }
    rc = bfit_dataset_load(data, 0, NULL, &r->test);
    if (rc != BFIT_OK && rc == BFIT_EIO && r->train && !need_train)
        return rc;
    if (rc != BFIT_OK)
        return rc;
    ds = bfit_dataset_shape(r->test);
    if (!bfit_shape_eq(ds, r->M->input))
        return bfit_fail(BFIT_EINVAL, "%s: the model takes inputs of %s but the data set %s has samples of %s", model,
                         bfit_shape_str(r->M->input, a, sizeof a), data, bfit_shape_str(ds, b, sizeof b));
    if (bfit_dataset_classes(r->test) > r->M->nclasses ||
        (r->train && bfit_dataset_classes(r->train) > r->M->nclasses))
        return bfit_fail(BFIT_EINVAL, "%s: the model has %d class scores but the data set %s has %d classes", model,
                         r->M->nclasses, data,
                         r->train ? bfit_dataset_classes(r->train) : bfit_dataset_classes(r->test));
    if (normalize) {
        r->mean = calloc((size_t)ds.c, sizeof *r->mean);
        r->std = calloc((size_t)ds.c, sizeof *r->std);
        if (!r->mean || !r->std)
            return bfit_fail(BFIT_ENOMEM, "out of host memory");
        rc = bfit_dataset_norm_stats(r->train, r->mean, r->std);
        if (rc != BFIT_OK)
            return rc;
    }
    return BFIT_OK;
}

static int open_stream(run *r, const bfit_dataset *d, int shuffle, int max_take, int prefetch, int augment,
                       uint64_t seed, bfit_stream **out)
{
    bfit_stream_cfg sc;
    memset(&sc, 0, sizeof sc);
    sc.seed = seed;
    sc.shuffle = shuffle;
    sc.max_take = max_take;
    sc.prefetch = prefetch;
    sc.aug_crop_pad = augment ? 2 : 0;
    sc.aug_hflip = augment;
    sc.norm_mean = r->mean;
    sc.norm_std = r->std;
    return bfit_stream_new(d, &sc, out);
}

/* Evaluate over the first n samples of the stream's epoch 0 (n 0: all) with
 * micro-batch m. */
static int evaluate(run *r, bfit_stream *s, int m, int64_t n, double *loss, double *acc, int64_t *count)
{
    bfit_cursor c0 = {0, 0};
    double lsum = 0;
    int64_t seen = 0, right = 0;
    int rc;

    rc = bfit_stream_seek(s, c0);
    if (rc != BFIT_OK)
        return rc;
    if (!n || n > bfit_dataset_count(r->test))
        n = bfit_dataset_count(r->test);
    while (seen < n) {
        int want = (int)(n - seen < m ? n - seen : m), got, correct;
        double l;
        rc = bfit_model_reserve(r->M, want, 0);
        if (rc != BFIT_OK)
            return bfit_fail_prefix(rc, "evaluation with micro-batch %d: ", want);
        rc = bfit_stream_take(s, want, bfit_model_input_x(r->M), bfit_model_input_labels(r->M), &got);
        if (rc != BFIT_OK)
            return rc;
        if (got != want)
            return bfit_fail(BFIT_ESTATE, "evaluation: the stream gave %d samples, expected %d", got, want);
        rc = bfit_model_forward(r->M, 0, &l, &correct);
        if (rc != BFIT_OK)
            return rc;
        lsum += l;
        right += correct;
        seen += got;
    }
    *loss = lsum / (double)seen;
    *acc = (double)right / (double)seen;
    *count = seen;
    return BFIT_OK;
}

static int choose_eval_batch(run *r, int want, uint64_t budget, int *m)
{
    int rc = bfit_plan_max_batch(r->M, NULL, 0, budget, want, m, NULL);
    if (rc == BFIT_OK && *m == 0)
        rc = bfit_fail(BFIT_ENOMEM, "evaluation does not fit in memory even with micro-batch 1");
    return rc;
}

int bfit_train(const bfit_train_cfg *cfg, bfit_train_result *res)
{
    run r;
    bfit_log lg;
    bfit_plan p1;
    int rc, m, eval_m, log_open = 0;
    int64_t step = 0, samples = 0;
    uint64_t budget, micro = 0;
    double t0, train_time = 0, ep_loss = 0;
    int64_t ep_count = 0;
    char s1[32], s2[32];

    memset(res, 0, sizeof *res);
    if (cfg->batch < 1)
        return bfit_fail(BFIT_EINVAL, "--batch must be at least 1, got %d", cfg->batch);
    if (cfg->epochs < 1)
        return bfit_fail(BFIT_EINVAL, "--epochs must be at least 1, got %d", cfg->epochs);
    if (cfg->micro_batch < 0)
        return bfit_fail(BFIT_EINVAL, "--micro-batch must be 'auto' or at least 1, got %d", cfg->micro_batch);
    if (!(cfg->lr > 0) || !isfinite(cfg->lr))
        return bfit_fail(BFIT_EINVAL, "--lr must be a positive number, got %g", cfg->lr);
    if (!(cfg->margin >= 0 && cfg->margin < 1))
        return bfit_fail(BFIT_EINVAL, "--margin must be in [0, 1), got %g", cfg->margin);
    rc = bfit_optim_cfg_check(&cfg->opt);
    if (rc != BFIT_OK)
        return rc;
    if (cfg->save) {
        /* find out now, not after hours of training, that the weights cannot be written */
        char dir[4096];
        const char *slash = strrchr(cfg->save, '/');
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - cfg->save) : 1, slash ? cfg->save : ".");
        if (!dir[0])
            snprintf(dir, sizeof dir, "/");
        if (access(dir, W_OK) != 0)
            return bfit_fail(BFIT_EIO, "--save %s: cannot write into directory '%s': %s", cfg->save, dir,
                             strerror(errno));
    }
    rc = run_setup(&r, cfg->model, cfg->data, 1, cfg->memory, cfg->threads, cfg->normalize);
    if (rc != BFIT_OK)
        goto out;
    rc = bfit_log_open(&lg, cfg->log, cfg->human, cfg->progress_interval);
    if (rc != BFIT_OK)
        goto out;
    log_open = 1;

    budget = (uint64_t)((double)bfit_arena_capacity(r.arena) * (1.0 - cfg->margin));
    /* the micro-batch: given, or the largest the plan fits (at most E) */
    if (cfg->micro_batch) {
        m = cfg->micro_batch < cfg->batch ? cfg->micro_batch : cfg->batch;
    } else {
        rc = bfit_plan_max_batch(r.M, &cfg->opt, 1, budget, cfg->batch, &m, &p1);
        if (rc != BFIT_OK)
            goto out;
        if (m == 0) {
            rc = bfit_fail(BFIT_ENOMEM, "training needs %s even at micro-batch 1, but %s is allowed (memory less the margin)",
                           bfit_format_size(p1.peak, s1, sizeof s1), bfit_format_size(budget, s2, sizeof s2));
            goto out;
        }
    }
    rc = bfit_model_alloc_params(r.M, 1);
    if (rc != BFIT_OK)
        goto out;
    bfit_model_init_params(r.M, cfg->seed);
    rc = bfit_optim_new(&cfg->opt, r.M->trainable, r.M->ntrainable, r.arena, &r.opt);
    if (rc != BFIT_OK)
        goto out;
    rc = open_stream(&r, r.train, 1, cfg->batch, cfg->prefetch, cfg->augment, cfg->seed, &r.tr);
    if (rc != BFIT_OK)
        goto out;
    eval_m = cfg->eval_batch ? cfg->eval_batch : 1000;
    rc = open_stream(&r, r.test, 0, eval_m, cfg->prefetch, 0, cfg->seed, &r.te);
    if (rc != BFIT_OK)
        goto out;

    {
        int64_t ntrain = bfit_dataset_count(r.train);
        int64_t per_epoch = cfg->epoch_samples && cfg->epoch_samples < ntrain ? cfg->epoch_samples : ntrain;
        int64_t steps_per_epoch = (per_epoch + cfg->batch - 1) / cfg->batch;
        bfit_lr_schedule sched = cfg->sched;
        if (sched.kind == BFIT_SCHED_COSINE && sched.total_steps == 0) {
            /* cosine over the whole run unless told otherwise */
            sched.total_steps = steps_per_epoch * cfg->epochs;
            if (cfg->max_steps && cfg->max_steps < sched.total_steps)
                sched.total_steps = cfg->max_steps;
            if (sched.total_steps <= sched.warmup_steps)
                sched.total_steps = sched.warmup_steps + 1;
        }
        rc = bfit_lr_schedule_check(&sched);
        if (rc != BFIT_OK)
            goto out;
        bfit_log_event(&lg, "start",
                       "\"model\":\"%s\",\"data\":\"%s\",\"params\":%lld,\"batch\":%d,\"micro_batch\":%d,"
                       "\"epochs\":%d,\"samples_per_epoch\":%lld,\"optimizer\":\"%s\",\"lr\":%g,\"seed\":%llu,"
                       "\"capacity\":%llu,\"threads\":%d",
                       cfg->model, cfg->data, (long long)bfit_model_param_count(r.M), cfg->batch, m, cfg->epochs,
                       (long long)per_epoch, bfit_optim_kind_name(cfg->opt.kind), cfg->lr,
                       (unsigned long long)cfg->seed, (unsigned long long)bfit_arena_capacity(r.arena),
                       r.dev->nthreads);
        bfit_log_say(&lg, "batchfit: training %s on %s: %lld parameters, batch %d (micro-batch %d), %d epoch(s) of %lld samples",
                     cfg->model, cfg->data, (long long)bfit_model_param_count(r.M), cfg->batch, m, cfg->epochs,
                     (long long)per_epoch);

        for (int ep = 0; ep < cfg->epochs && (!cfg->max_steps || step < cfg->max_steps); ep++) {
            int64_t taken = 0;
            double ep_t0 = bfit_now();
            ep_loss = 0;
            ep_count = 0;
            if (ep > 0)
                bfit_stream_next_epoch(r.tr);
            while (taken < per_epoch && (!cfg->max_steps || step < cfg->max_steps)) {
                int E = (int)(per_epoch - taken < cfg->batch ? per_epoch - taken : cfg->batch);
                int done = 0, k = 0;
                double lr, step_loss = 0;
                t0 = bfit_now();
                while (done < E) {
                    int want = E - done < m ? E - done : m, got;
                    double l;
                    rc = bfit_model_reserve(r.M, want, 1);
                    if (rc == BFIT_ENOMEM) {
                        /* shrink to what the plan says fits in what is free now */
                        uint64_t free_now = bfit_arena_available(r.arena);
                        bfit_plan pf;
                        int nm = 0;
                        int rc2 = bfit_plan_compute(r.M, &cfg->opt, 1, 1, &pf);
                        if (rc2 == BFIT_OK && want > 1)
                            rc2 = bfit_plan_max_batch(r.M, &cfg->opt, 1, pf.fixed + free_now, want - 1, &nm, NULL);
                        if (rc2 != BFIT_OK || nm == 0 || want == 1) {
                            rc = bfit_fail(BFIT_ENOMEM, "out of memory even at micro-batch %d (%s free)", want,
                                           bfit_format_size(free_now, s1, sizeof s1));
                            goto out;
                        }
                        bfit_log_event(&lg, "batch_change",
                                       "\"step\":%lld,\"from\":%d,\"to\":%d,\"reason\":\"out of memory\",\"free\":%llu",
                                       (long long)step, m, nm, (unsigned long long)free_now);
                        bfit_log_say(&lg, "batchfit: out of memory at micro-batch %d; continuing with %d", want, nm);
                        m = nm;
                        res->ooms++;
                        continue;
                    }
                    if (rc != BFIT_OK)
                        goto out;
                    rc = bfit_stream_take(r.tr, want, bfit_model_input_x(r.M), bfit_model_input_labels(r.M), &got);
                    if (rc != BFIT_OK)
                        goto out;
                    if (got != want) {
                        rc = bfit_fail(BFIT_ESTATE, "training stream gave %d samples, expected %d", got, want);
                        goto out;
                    }
                    rc = bfit_model_forward(r.M, cfg->seed * 1000003ull + micro++, &l, NULL);
                    if (rc == BFIT_OK)
                        rc = bfit_model_backward(r.M, 1.0f / (float)E);
                    if (rc != BFIT_OK)
                        goto out;
                    step_loss += l;
                    done += got;
                    k++;
                }
                if (cfg->clip > 0) {
                    double norm;
                    rc = bfit_clip_grad_norm(r.M->trainable, r.M->ntrainable, cfg->clip, &norm);
                    if (rc != BFIT_OK)
                        goto out;
                }
                lr = bfit_lr_at(&sched, cfg->lr, step);
                rc = bfit_optim_step(r.opt, lr);
                if (rc != BFIT_OK)
                    goto out;
                bfit_model_zero_grads(r.M);
                step++;
                taken += E;
                samples += E;
                ep_loss += step_loss;
                ep_count += E;
                train_time += bfit_now() - t0;
                if (!isfinite(step_loss)) {
                    rc = bfit_fail(BFIT_EINVAL, "the loss became %g at step %lld: lower --lr", step_loss, (long long)step);
                    goto out;
                }
                {
                    bfit_arena_stats st;
                    double el = bfit_now() - ep_t0;
                    bfit_arena_stats_get(r.arena, &st);
                    bfit_log_event(&lg, "step",
                                   "\"step\":%lld,\"epoch\":%d,\"loss\":%.6f,\"lr\":%.6g,\"samples\":%lld,\"m\":%d,"
                                   "\"k\":%d,\"E\":%d,\"mem\":%llu",
                                   (long long)step, ep + 1, step_loss / E, lr, (long long)samples, m, k, E,
                                   (unsigned long long)st.current);
                    bfit_log_progress(&lg, 0,
                                      "epoch %d/%d  step %lld/%lld  loss %.4f  %.0f samples/s  m %d x %d = %d  mem %s / %s",
                                      ep + 1, cfg->epochs, (long long)(step - ep * steps_per_epoch),
                                      (long long)steps_per_epoch, ep_loss / (double)ep_count,
                                      (double)taken / (el > 0 ? el : 1e-9), m, k, E,
                                      bfit_format_size(st.current, s1, sizeof s1),
                                      bfit_format_size(bfit_arena_capacity(r.arena), s2, sizeof s2));
                }
            }
            {
                double tl, ta, el = bfit_now() - ep_t0;
                int64_t n;
                int em;
                rc = choose_eval_batch(&r, eval_m, budget, &em);
                if (rc == BFIT_OK)
                    rc = evaluate(&r, r.te, em, cfg->eval_samples, &tl, &ta, &n);
                if (rc != BFIT_OK)
                    goto out;
                res->test_loss = tl;
                res->test_acc = ta;
                res->epochs = ep + 1;
                bfit_log_event(&lg, "eval", "\"epoch\":%d,\"step\":%lld,\"train_loss\":%.6f,\"test_loss\":%.6f,"
                                            "\"test_acc\":%.6f,\"test_samples\":%lld,\"epoch_seconds\":%.3f",
                               ep + 1, (long long)step, ep_loss / (double)ep_count, tl, ta, (long long)n, el);
                bfit_log_say(&lg, "epoch %d/%d: train loss %.4f, test loss %.4f, test accuracy %.2f%% (%lld samples), %.1f s",
                             ep + 1, cfg->epochs, ep_loss / (double)ep_count, tl, 100 * ta, (long long)n, el);
            }
        }
    }
    res->steps = step;
    res->samples = samples;
    res->train_loss = ep_count ? ep_loss / (double)ep_count : 0;
    res->seconds = train_time;
    res->micro_batch = m;
    {
        bfit_arena_stats st;
        bfit_arena_stats_get(r.arena, &st);
        res->peak_bytes = st.peak;
    }
    if (cfg->save) {
        char steps_s[32], acc_s[32];
        const char *keys[] = {"format", "model", "data", "steps", "test_accuracy"};
        const char *vals[] = {"batchfit", cfg->model, cfg->data, steps_s, acc_s};
        snprintf(steps_s, sizeof steps_s, "%lld", (long long)step);
        snprintf(acc_s, sizeof acc_s, "%.6f", res->test_acc);
        rc = bfit_weights_save(r.M, cfg->save, keys, vals, 5);
        if (rc != BFIT_OK)
            goto out;
    }
    bfit_log_event(&lg, "end", "\"steps\":%lld,\"samples\":%lld,\"test_acc\":%.6f,\"train_seconds\":%.3f,\"peak\":%llu",
                   (long long)step, (long long)samples, res->test_acc, train_time,
                   (unsigned long long)res->peak_bytes);
out:
    if (log_open)
        bfit_log_close(&lg);
    run_fini(&r);
    return rc;
}

int bfit_evaluate(const bfit_eval_cfg *cfg, double *loss, double *acc, int64_t *n)
{
    run r;
    int rc, m;
    uint64_t budget;

    rc = run_setup(&r, cfg->model, cfg->data, 0, cfg->memory, cfg->threads, cfg->normalize);
    if (rc != BFIT_OK)
        goto out;
    rc = bfit_model_alloc_params(r.M, 0);
    if (rc != BFIT_OK)
        goto out;
    rc = bfit_weights_load(r.M, cfg->weights);
    if (rc != BFIT_OK)
        goto out;
    budget = bfit_arena_available(r.arena);
    rc = choose_eval_batch(&r, cfg->batch ? cfg->batch : 1000, budget, &m);
    if (rc != BFIT_OK)
        goto out;
    rc = open_stream(&r, r.test, 0, m, 1, 0, 1, &r.te);
    if (rc != BFIT_OK)
        goto out;
    rc = evaluate(&r, r.te, m, cfg->samples, loss, acc, n);
out:
    run_fini(&r);
    return rc;
}
