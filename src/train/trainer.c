/* trainer.c - the training loop and evaluation. */
#include "base/err.h"
#include "base/par.h"
#include "batch/plan.h"
#include "batch/session.h"
#include "nn/spec.h"
#include "nn/zoo.h"
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
    c.lr_rule = -1;
    c.rewarmup_steps = 100;
    return c;
}

/* Everything a run holds, released in reverse by run_fini. */
typedef struct run {
    bfit_session s;   /* arena, device, model, data, normalisation */
    bfit_stream *tr, *te;
    bfit_optim *opt;
} run;

static void run_fini(run *r)
{
    bfit_stream_free(r->tr);
    bfit_stream_free(r->te);
    bfit_optim_free(r->opt);
    bfit_session_close(&r->s);
}

/* Arena, device, model (no memory yet) and the data sets. */
static int run_setup(run *r, const char *model, const char *data, const char *test_data,
                     const bfit_dataset *given_train, const bfit_dataset *given_test, int need_train, uint64_t memory,
                     int threads, int normalize, const float *mean, const float *std)
{
    bfit_session_cfg c;
    int rc;

    memset(r, 0, sizeof *r);
    memset(&c, 0, sizeof c);
    c.model = model;
    c.data = data;
    c.test_data = test_data;
    c.given_mean = mean;
    c.given_std = std;
    c.given_train = given_train;
    c.given_test = given_test;
    c.want_train = need_train;
    c.want_test = 1;
    c.memory = memory;
    c.threads = threads;
    c.normalize = normalize;
    rc = bfit_session_open_model(&r->s, &c);
    if (rc == BFIT_OK)
        rc = bfit_session_open_data(&r->s, &c);
    return rc;
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
    sc.norm_mean = r->s.mean;
    sc.norm_std = r->s.std;
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
    if (!n || n > bfit_dataset_count(r->s.test))
        n = bfit_dataset_count(r->s.test);
    while (seen < n) {
        int want = (int)(n - seen < m ? n - seen : m), got, correct;
        double l;
        rc = bfit_model_reserve(r->s.M, want, 0);
        if (rc != BFIT_OK)
            return bfit_fail_prefix(rc, "evaluation with micro-batch %d: ", want);
        rc = bfit_stream_take(s, want, bfit_model_input_x(r->s.M), bfit_model_input_labels(r->s.M), &got);
        if (rc != BFIT_OK)
            return rc;
        if (got != want)
            return bfit_fail(BFIT_ESTATE, "evaluation: the stream gave %d samples, expected %d", got, want);
        rc = bfit_model_forward(r->s.M, 0, &l, &correct);
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
    int rc = bfit_plan_max_batch(r->s.M, NULL, 0, budget, want, m, NULL);
    if (rc == BFIT_OK && *m == 0)
        rc = bfit_fail(BFIT_ENOMEM, "evaluation does not fit in memory even with micro-batch 1");
    return rc;
}

/* The plan as the controller sees it: bytes of a training step at m,
 * memoised (layouts prepare oneDNN primitives; the controller asks often). */
#define PLAN_MEMO 512
typedef struct plan_ctx {
    bfit_model *M;
    const bfit_optim_cfg *opt;
    uint64_t extra;            /* fixed bytes the trainer adds (noise-scale buffer) */
    int memo_m[PLAN_MEMO];
    uint64_t memo_b[PLAN_MEMO];
} plan_ctx;

static uint64_t plan_bytes(void *ud, int m)
{
    plan_ctx *pc = ud;
    bfit_plan p;
    unsigned h = (unsigned)m * 2654435761u % PLAN_MEMO;
    if (pc->memo_m[h] == m)
        return pc->memo_b[h];
    if (bfit_plan_compute(pc->M, pc->opt, m, 1, &p) != BFIT_OK)
        return UINT64_MAX;
    pc->memo_m[h] = m;
    pc->memo_b[h] = p.peak + pc->extra;
    return pc->memo_b[h];
}

int bfit_mem_schedule_parse(const char *text, bfit_mem_point *out, int max, int *n)
{
    char buf[4096], *save = NULL, *item;
    int k = 0;
    if (strlen(text) >= sizeof buf)
        return bfit_fail(BFIT_EINVAL, "memory schedule is too long");
    snprintf(buf, sizeof buf, "%s", text);
    for (item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(item, ':'), *end;
        long long st;
        if (!colon)
            return bfit_fail(BFIT_EINVAL, "memory schedule item %d '%s': expected STEP:SIZE, e.g. 200:150MiB", k + 1, item);
        *colon = '\0';
        st = strtoll(item, &end, 10);
        if (!*item || *end || st < 0)
            return bfit_fail(BFIT_EINVAL, "memory schedule item %d: step '%s' is not a whole number >= 0", k + 1, item);
        if (k >= max)
            return bfit_fail(BFIT_EINVAL, "memory schedule has more than %d items", max);
        if (k > 0 && st <= out[k - 1].step)
            return bfit_fail(BFIT_EINVAL, "memory schedule item %d: step %lld is not after step %lld", k + 1, st,
                             (long long)out[k - 1].step);
        if (bfit_parse_size(colon + 1, &out[k].capacity) != BFIT_OK)
            return bfit_fail_prefix(BFIT_EINVAL, "memory schedule item %d: ", k + 1);
        out[k].step = st;
        k++;
    }
    if (k == 0)
        return bfit_fail(BFIT_EINVAL, "memory schedule is empty: expected STEP:SIZE,... e.g. 200:150MiB,400:1GiB");
    *n = k;
    return BFIT_OK;
}

/* Squared L2 norm of the accumulated gradients, and of what was added since
 * prev was taken, updating prev. Host loops: the CPU device's memory is host
 * memory. */
static void grad_norms(bfit_model *M, float *prev, double *acc_sq, double *delta_sq)
{
    double a = 0, d = 0;
    int64_t off = 0;
    for (int i = 0; i < M->ntrainable; i++) {
        const float *g = M->trainable[i]->grad;
        float *q = prev + off;
        int64_t n = bfit_param_numel(M->trainable[i]);
        /* explicit branch, not if(): see base/par.h */
        if (n >= BFIT_PAR_MIN) {
            #pragma omp parallel for reduction(+ : a, d) schedule(static)
            for (int64_t j = 0; j < n; j++) {
                double x = g[j], y = x - q[j];
                a += x * x;
                d += y * y;
                q[j] = g[j];
            }
        } else {
            for (int64_t j = 0; j < n; j++) {
                double x = g[j], y = x - q[j];
                a += x * x;
                d += y * y;
                q[j] = g[j];
            }
        }
        off += n;
    }
    *acc_sq = a;
    *delta_sq = d;
}

static int model_has_batchnorm(const bfit_model *M)
{
    for (int i = 0; i < M->n; i++)
        if (M->nodes[i].l->cfg.kind == BFIT_L_BATCHNORM)
            return 1;
    return 0;
}

#define MAX_MICRO 4096

/* Apply the memory schedule's changes due by step `upto` (another tenant
 * taking or returning memory, simulated). Returns whether capacity changed;
 * the step's blocks are then handed back so the next reservation is made
 * under the new capacity. */
static int apply_memory_schedule(const bfit_train_cfg *cfg, run *r, bfit_log *lg, int *next, int64_t upto)
{
    int changed = 0;
    char s1[32];
    for (; *next < cfg->nmemory_schedule && cfg->memory_schedule[*next].step <= upto; (*next)++) {
        uint64_t c = cfg->memory_schedule[*next].capacity;
        bfit_arena_set_capacity(r->s.arena, c);
        changed = 1;
        bfit_log_event(lg, "memory", "\"step\":%lld,\"capacity\":%llu", (long long)upto, (unsigned long long)c);
        bfit_log_say(lg, "batchfit: step %lld: device capacity is now %s", (long long)upto,
                     bfit_format_size(c, s1, sizeof s1));
    }
    if (changed)
        bfit_model_unreserve(r->s.M);
    return changed;
}

int bfit_train(const bfit_train_cfg *cfg, bfit_train_result *res)
{
    run r;
    bfit_log lg;
    bfit_controller *ctl = NULL;
    bfit_controller_config cc;
    bfit_batch_decision d;
    bfit_batch_point sched_pts[BFIT_BATCH_SCHEDULE_MAX];
    plan_ctx *pc = NULL;
    float *prev = NULL;            /* noise scale: the gradients before this micro-batch */
    double *micro_sq = NULL;
    int *micro_n = NULL;
    int rc, eval_m, log_open = 0, warned_bn = 0, nmem = 0, m = 0;
    int64_t step = 0, samples = 0, ntrain, per_epoch, steps_per_epoch;
    uint64_t budget, micro = 0, base_capacity;
    double train_time = 0, ep_loss = 0;
    int64_t ep_count = 0;
    bfit_lr_schedule sched;
    char s1[32], s2[32];

    memset(res, 0, sizeof *res);
    memset(&r, 0, sizeof r);
    if (!cfg->adaptive && cfg->batch < 1)
        return bfit_fail(BFIT_EINVAL, "--batch must be at least 1, got %d", cfg->batch);
    if (cfg->epochs < 1)
        return bfit_fail(BFIT_EINVAL, "--epochs must be at least 1, got %d", cfg->epochs);
    if (cfg->micro_batch < 0)
        return bfit_fail(BFIT_EINVAL, "--micro-batch must be 'auto' or at least 1, got %d", cfg->micro_batch);
    if (!(cfg->lr > 0) || !isfinite(cfg->lr))
        return bfit_fail(BFIT_EINVAL, "--lr must be a positive number, got %g", cfg->lr);
    if (!(cfg->margin >= 0 && cfg->margin < 1))
        return bfit_fail(BFIT_EINVAL, "--margin must be in [0, 1), got %g", cfg->margin);
    if (cfg->batch_instead_of_decay && cfg->sched.kind != BFIT_SCHED_STEP)
        return bfit_fail(BFIT_EINVAL, "--batch-instead-of-decay needs a step schedule (--schedule step --step-size N --gamma X)");
    if (cfg->batch_instead_of_decay && (cfg->adaptive || cfg->batch_schedule))
        return bfit_fail(BFIT_EINVAL, "--batch-instead-of-decay cannot be combined with --batch adaptive or --batch-schedule");
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
    rc = run_setup(&r, cfg->model, cfg->data, cfg->test_data, cfg->train_set, cfg->test_set, 1, cfg->memory,
                   cfg->threads, cfg->normalize, NULL, NULL);
    if (rc != BFIT_OK)
        goto out;
    rc = bfit_log_open(&lg, cfg->log, cfg->human, cfg->progress_interval);
    if (rc != BFIT_OK)
        goto out;
    log_open = 1;
    if (cfg->fail_nth_alloc)
        bfit_arena_fail_nth(r.s.arena, cfg->fail_nth_alloc);
    if (r.s.train_own && r.s.test_own &&
        !strcmp(bfit_dataset_source(r.s.train_own), bfit_dataset_source(r.s.test_own))) {
        /* a single file has no test split: say so rather than report training accuracy as a test */
        bfit_log_event(&lg, "warning", "\"what\":\"no separate test split: evaluating on the training data\"");
        bfit_log_say(&lg, "batchfit: warning: %s has no separate test split, so \"test\" figures are on the training "
                          "data; give --test-data FILE", cfg->data);
    }
    apply_memory_schedule(cfg, &r, &lg, &nmem, 0);
    base_capacity = bfit_arena_capacity(r.s.arena);
    budget = (uint64_t)((double)base_capacity * (1.0 - cfg->margin));

    ntrain = bfit_dataset_count(r.s.train);
    per_epoch = cfg->epoch_samples && cfg->epoch_samples < ntrain ? cfg->epoch_samples : ntrain;

    /* the controller: the plan as a function, the batch policy, the lr rule */
    pc = calloc(1, sizeof *pc);
    micro_sq = calloc(MAX_MICRO, sizeof *micro_sq);
    micro_n = calloc(MAX_MICRO, sizeof *micro_n);
    if (!pc || !micro_sq || !micro_n) {
        rc = bfit_fail(BFIT_ENOMEM, "out of host memory");
        goto out;
    }
    pc->M = r.s.M;
    pc->opt = &cfg->opt;
    if (cfg->adaptive)
        pc->extra = bfit_model_grad_bytes(r.s.M); /* the copy of the gradients noise needs */
    bfit_controller_config_default(&cc);
    cc.plan_bytes = plan_bytes;
    cc.plan_ud = pc;
    cc.fixed_bytes = bfit_model_param_bytes(r.s.M) + bfit_model_grad_bytes(r.s.M) +
                     bfit_optim_state_bytes(&cfg->opt, r.s.M->trainable, r.s.M->ntrainable) + pc->extra;
    cc.capacity = base_capacity;
    cc.margin = cfg->margin;
    cc.micro_batch = cfg->micro_batch;
    cc.batch = cfg->batch;
    cc.adaptive = cfg->adaptive;
    cc.batch_min = cfg->batch_min;
    cc.batch_max = cfg->batch_max;
    cc.rule = cfg->lr_rule >= 0 ? (bfit_lr_rule)cfg->lr_rule
                                : cfg->opt.kind == BFIT_OPT_ADAMW ? BFIT_LR_SQRT : BFIT_LR_LINEAR;
    cc.rewarmup_steps = cfg->rewarmup_steps;
    sched = cfg->sched;
    if (cfg->batch_schedule) {
        cc.schedule = cfg->batch_schedule;
        cc.nschedule = cfg->nbatch_schedule;
    } else if (cfg->batch_instead_of_decay) {
        /* Smith et al. 2017: where the lr would fall by gamma, the batch grows
         * by 1/gamma instead and the lr stays (rule none for these changes) */
        int64_t at = 0;
        double e = cfg->batch;
        int n = 0, cap = cfg->batch_max > 0 ? cfg->batch_max : (int)(per_epoch < (1 << 20) ? per_epoch : 1 << 20);
        while (n < BFIT_BATCH_SCHEDULE_MAX && e <= cap) {
            sched_pts[n].at = at;
            sched_pts[n].by_epoch = 0;
            sched_pts[n].batch = (int)(e + 0.5);
            n++;
            at += sched.step_size;
            e /= sched.gamma;
        }
        cc.schedule = sched_pts;
        cc.nschedule = n;
        cc.rule = BFIT_LR_NONE;
        sched.kind = BFIT_SCHED_CONSTANT;
    }
    rc = bfit_controller_new(&cc, &ctl);
    if (rc != BFIT_OK) {
        if (rc == BFIT_ENOMEM) {
            bfit_plan p1;
            if (bfit_plan_compute(r.s.M, &cfg->opt, 1, 1, &p1) == BFIT_OK)
                rc = bfit_fail(BFIT_ENOMEM, "training needs %s even at micro-batch 1, but %s is allowed (memory less the margin)",
                               bfit_format_size(p1.peak + pc->extra, s1, sizeof s1), bfit_format_size(budget, s2, sizeof s2));
        }
        goto out;
    }
    rc = bfit_model_alloc_params(r.s.M, 1);
    if (rc != BFIT_OK)
        goto out;
    bfit_model_init_params(r.s.M, cfg->seed);
    rc = bfit_optim_new(&cfg->opt, r.s.M->trainable, r.s.M->ntrainable, r.s.arena, &r.opt);
    if (rc != BFIT_OK)
        goto out;
    if (pc->extra) {
        rc = bfit_device_alloc(r.s.dev, pc->extra, BFIT_MEM_GRADS, (void **)&prev);
        if (rc != BFIT_OK)
            goto out;
        /* the first micro-batch's increment is measured against this: the
         * gradients start at zero, so must it */
        bfit_device_zero(r.s.dev, prev, pc->extra);
    }
    {
        /* the stream's staging must hold the largest micro-batch ever taken */
        int max_take = cfg->adaptive ? (cfg->batch_max > 0 ? cfg->batch_max : 4096) : cfg->batch;
        for (int i = 0; i < cc.nschedule; i++)
            if (cc.schedule[i].batch > max_take)
                max_take = cc.schedule[i].batch;
        rc = open_stream(&r, r.s.train, 1, max_take, cfg->prefetch, cfg->augment, cfg->seed, &r.tr);
        if (rc != BFIT_OK)
            goto out;
    }
    eval_m = cfg->eval_batch ? cfg->eval_batch : 1000;
    rc = open_stream(&r, r.s.test, 0, eval_m, cfg->prefetch, 0, cfg->seed, &r.te);
    if (rc != BFIT_OK)
        goto out;

    rc = bfit_controller_next(ctl, 0, 0, &d);
    if (rc != BFIT_OK)
        goto out;
    m = d.m;
    steps_per_epoch = (per_epoch + d.batch - 1) / d.batch;
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
                   "\"epochs\":%d,\"samples_per_epoch\":%lld,\"optimizer\":\"%s\",\"lr\":%g,\"lr_rule\":\"%s\","
                   "\"seed\":%llu,\"capacity\":%llu,\"threads\":%d,\"adaptive\":%d",
                   cfg->model ? cfg->model : "(given)", cfg->data ? cfg->data : "(given)",
                   (long long)bfit_model_param_count(r.s.M), d.batch, m, cfg->epochs, (long long)per_epoch,
                   bfit_optim_kind_name(cfg->opt.kind), cfg->lr, bfit_lr_rule_name(cc.rule),
                   (unsigned long long)cfg->seed, (unsigned long long)base_capacity, r.s.dev->nthreads, cfg->adaptive);
    bfit_log_say(&lg, "batchfit: training %s on %s: %lld parameters, batch %d (micro-batch %d x %d), %d epoch(s) of %lld samples",
                 cfg->model ? cfg->model : "model", cfg->data ? cfg->data : "data",
                 (long long)bfit_model_param_count(r.s.M), d.batch, m, d.k, cfg->epochs, (long long)per_epoch);

    for (int ep = 0; ep < cfg->epochs && (!cfg->max_steps || step < cfg->max_steps); ep++) {
        int64_t taken = 0;
        double ep_t0 = bfit_now();
        ep_loss = 0;
        ep_count = 0;
        if (ep > 0)
            bfit_stream_next_epoch(r.tr);
        while (taken < per_epoch && (!cfg->max_steps || step < cfg->max_steps)) {
            int E, done = 0, k = 0;
            double lr, step_loss = 0, t0, wait0, full_sq = 0, dsq;

            rc = bfit_controller_next(ctl, step, ep, &d);
            if (rc != BFIT_OK)
                goto out;
            if (d.reason != BFIT_REASON_NONE && d.reason != BFIT_REASON_START) {
                res->batch_changes++;
                bfit_log_event(&lg, "batch_change",
                               "\"step\":%lld,\"reason\":\"%s\",\"m\":%d,\"prev_m\":%d,\"E\":%d,\"prev_E\":%d,"
                               "\"lr_scale\":%.6g,\"why\":\"%s\"",
                               (long long)step, bfit_batch_reason_name(d.reason), d.m, d.prev_m, d.batch,
                               d.prev_batch, d.lr_scale, d.why);
                bfit_log_say(&lg, "batchfit: step %lld: %s", (long long)step, d.why);
            }
            if (d.m != m)
                bfit_model_unreserve(r.s.M); /* blocks sized for the new m, not kept from the old */
            m = d.m;
            if (d.split && !warned_bn && model_has_batchnorm(r.s.M)) {
                warned_bn = 1;
                bfit_log_event(&lg, "warning", "\"step\":%lld,\"what\":\"batch norm sees micro-batches of %d, not the effective batch %d\"",
                               (long long)step, m, d.batch);
                bfit_log_say(&lg, "batchfit: warning: batch norm computes its statistics over micro-batches of %d, "
                                  "not over the effective batch of %d (see docs/dynamic.md)", m, d.batch);
            }
            E = (int)(per_epoch - taken < d.batch ? per_epoch - taken : d.batch);
            t0 = bfit_now();
            wait0 = bfit_stream_wait_seconds(r.tr);
            while (done < E) {
                int want = E - done < m ? E - done : m, got;
                double l;
                rc = bfit_model_reserve(r.s.M, want, 1);
                if (rc == BFIT_ENOMEM) {
                    /* nothing of this micro-batch ran: shrink and take the same samples */
                    uint64_t free_now = bfit_arena_available(r.s.arena);
                    rc = bfit_controller_on_oom(ctl, want, free_now, bfit_arena_capacity(r.s.arena), &d);
                    if (rc != BFIT_OK) {
                        rc = bfit_fail(BFIT_ENOMEM, "out of memory: not even a micro-batch of 1 fits in the %s free",
                                       bfit_format_size(free_now, s1, sizeof s1));
                        goto out;
                    }
                    res->ooms++;
                    res->batch_changes++;
                    bfit_log_event(&lg, "batch_change",
                                   "\"step\":%lld,\"reason\":\"%s\",\"m\":%d,\"prev_m\":%d,\"E\":%d,\"prev_E\":%d,"
                                   "\"lr_scale\":%.6g,\"free\":%llu,\"why\":\"%s\"",
                                   (long long)step, bfit_batch_reason_name(d.reason), d.m, want, d.batch, d.batch,
                                   d.lr_scale, (unsigned long long)free_now, d.why);
                    bfit_log_say(&lg, "batchfit: step %lld: %s", (long long)step, d.why);
                    m = d.m;
                    continue;
                }
                if (rc != BFIT_OK)
                    goto out;
                rc = bfit_stream_take(r.tr, want, bfit_model_input_x(r.s.M), bfit_model_input_labels(r.s.M), &got);
                if (rc != BFIT_OK)
                    goto out;
                if (got != want) {
                    rc = bfit_fail(BFIT_ESTATE, "training stream gave %d samples, expected %d", got, want);
                    goto out;
                }
                if (cfg->on_samples)
                    cfg->on_samples(cfg->on_samples_ud, bfit_model_input_x(r.s.M), bfit_model_input_labels(r.s.M), got);
                rc = bfit_model_forward(r.s.M, cfg->seed * 1000003ull + micro++, &l, NULL);
                if (rc == BFIT_OK)
                    rc = bfit_model_backward(r.s.M, 1.0f / (float)E);
                if (rc != BFIT_OK)
                    goto out;
                if (prev && k < MAX_MICRO) {
                    /* this micro-batch's mean gradient is its increment times E/got */
                    grad_norms(r.s.M, prev, &full_sq, &dsq);
                    micro_sq[k] = dsq * ((double)E / got) * ((double)E / got);
                    micro_n[k] = got;
                }
                step_loss += l;
                done += got;
                k++;
            }
            if (cfg->clip > 0) {
                double norm;
                rc = bfit_clip_grad_norm(r.s.M->trainable, r.s.M->ntrainable, cfg->clip, &norm);
                if (rc != BFIT_OK)
                    goto out;
            }
            lr = bfit_lr_at(&sched, cfg->lr, step) * d.lr_scale;
            rc = bfit_optim_step(r.opt, lr);
            if (rc != BFIT_OK)
                goto out;
            bfit_model_zero_grads(r.s.M);
            if (prev)
                bfit_device_zero(r.s.dev, prev, pc->extra);
            apply_memory_schedule(cfg, &r, &lg, &nmem, step + 1);
            {
                bfit_step_stats ss;
                memset(&ss, 0, sizeof ss);
                ss.step = step;
                ss.epoch = ep;
                ss.samples = E;
                ss.seconds = bfit_now() - t0;
                ss.data_seconds = bfit_stream_wait_seconds(r.tr) - wait0;
                ss.free_bytes = bfit_arena_available(r.s.arena) + r.s.M->block_bytes[BFIT_MEM_ACTIVATIONS] +
                                r.s.M->block_bytes[BFIT_MEM_ACT_GRADS] + r.s.M->block_bytes[BFIT_MEM_WORKSPACE] +
                                r.s.M->block_bytes[BFIT_MEM_INPUT];
                ss.capacity = bfit_arena_capacity(r.s.arena);
                if (prev && k >= 2 && k <= MAX_MICRO) {
                    ss.nmicro = k;
                    ss.micro_sqnorm = micro_sq;
                    ss.micro_size = micro_n;
                    ss.full_sqnorm = full_sq;
                }
                rc = bfit_controller_observe(ctl, &ss);
                if (rc != BFIT_OK)
                    goto out;
                train_time += ss.seconds;
            }
            step++;
            taken += E;
            samples += E;
            ep_loss += step_loss;
            ep_count += E;
            if (!isfinite(step_loss)) {
                rc = bfit_fail(BFIT_EINVAL, "the loss became %g at step %lld: lower --lr", step_loss, (long long)step);
                goto out;
            }
            {
                bfit_arena_stats st;
                double el = bfit_now() - ep_t0, bn = 0;
                int have_bn = bfit_controller_noise_scale(ctl, &bn) == BFIT_OK;
                bfit_arena_stats_get(r.s.arena, &st);
                bfit_log_event(&lg, "step",
                               "\"step\":%lld,\"epoch\":%d,\"loss\":%.6f,\"lr\":%.6g,\"samples\":%lld,\"m\":%d,"
                               "\"k\":%d,\"E\":%d,\"mem\":%llu,\"capacity\":%llu%s%.4g",
                               (long long)step, ep + 1, step_loss / E, lr, (long long)samples, m, k, E,
                               (unsigned long long)st.current, (unsigned long long)st.capacity,
                               have_bn ? ",\"noise_scale\":" : ",\"noise_scale\":", have_bn ? bn : 0.0);
                bfit_log_progress(&lg, 0,
                                  "epoch %d/%d  step %lld  loss %.4f  %.0f samples/s  m %d x %d = %d  mem %s / %s",
                                  ep + 1, cfg->epochs, (long long)step, ep_loss / (double)ep_count,
                                  (double)taken / (el > 0 ? el : 1e-9), m, k, E,
                                  bfit_format_size(st.current, s1, sizeof s1),
                                  bfit_format_size(st.capacity, s2, sizeof s2));
                if (have_bn)
                    res->noise_scale = bn;
            }
            res->last_batch = d.batch;
        }
        {
            double tl, ta, el = bfit_now() - ep_t0;
            int64_t n;
            int em;
            uint64_t eb = (uint64_t)((double)bfit_arena_capacity(r.s.arena) * (1.0 - cfg->margin));
            /* evaluation reuses the step's memory: release it first */
            bfit_model_unreserve(r.s.M);
            rc = choose_eval_batch(&r, eval_m, eb, &em);
            if (rc == BFIT_OK)
                rc = evaluate(&r, r.te, em, cfg->eval_samples, &tl, &ta, &n);
            bfit_model_unreserve(r.s.M);
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
    res->steps = step;
    res->samples = samples;
    res->train_loss = ep_count ? ep_loss / (double)ep_count : 0;
    res->seconds = train_time;
    res->micro_batch = m;
    {
        bfit_arena_stats st;
        bfit_arena_stats_get(r.s.arena, &st);
        res->peak_bytes = st.peak;
    }
    if (cfg->save) {
        static char nm[BFIT_NORM_TEXT_MAX], ns[BFIT_NORM_TEXT_MAX];
        char steps_s[32], acc_s[32];
        const char *keys[] = {"format", "model", "data", "steps", "test_accuracy", "normalize_mean", "normalize_std"};
        const char *vals[] = {"batchfit", cfg->model ? cfg->model : "", cfg->data ? cfg->data : "", steps_s, acc_s,
                              nm, ns};
        int nmeta = 5;
        snprintf(steps_s, sizeof steps_s, "%lld", (long long)step);
        snprintf(acc_s, sizeof acc_s, "%.6f", res->test_acc);
        if (r.s.mean) {
            rc = bfit_norm_to_text(r.s.mean, r.s.M->input.c, nm, sizeof nm);
            if (rc == BFIT_OK)
                rc = bfit_norm_to_text(r.s.std, r.s.M->input.c, ns, sizeof ns);
            if (rc != BFIT_OK)
                goto out;
            nmeta = 7;
        }
        rc = bfit_weights_save(r.s.M, cfg->save, keys, vals, nmeta);
        if (rc != BFIT_OK)
            goto out;
    }
    bfit_log_event(&lg, "end", "\"steps\":%lld,\"samples\":%lld,\"test_acc\":%.6f,\"train_seconds\":%.3f,\"peak\":%llu,"
                               "\"ooms\":%d,\"batch_changes\":%d",
                   (long long)step, (long long)samples, res->test_acc, train_time,
                   (unsigned long long)res->peak_bytes, res->ooms, res->batch_changes);
out:
    if (log_open)
        bfit_log_close(&lg);
    if (prev && r.s.dev)
        bfit_device_release(r.s.dev, prev);
    bfit_controller_free(ctl);
    free(pc);
    free(micro_sq);
    free(micro_n);
    run_fini(&r);
    return rc;
}

int bfit_evaluate(const bfit_eval_cfg *cfg, double *loss, double *acc, int64_t *n)
{
    run r;
    int rc, m, found = 0;
    uint64_t budget;
    float *mean = NULL, *std = NULL;
    bfit_graph_desc g;
    bfit_model *shape_only = NULL;

    memset(&r, 0, sizeof r);
    if (cfg->normalize) {
        /* the statistics training used, saved with the weights */
        rc = bfit_model_source_load(cfg->model, &g);
        if (rc == BFIT_OK) {
            rc = bfit_model_new(&g, NULL, &shape_only);
            bfit_graph_fini(&g);
        }
        if (rc != BFIT_OK)
            return rc;
        mean = calloc((size_t)shape_only->input.c, sizeof *mean);
        std = calloc((size_t)shape_only->input.c, sizeof *std);
        rc = !mean || !std ? bfit_fail(BFIT_ENOMEM, "out of host memory")
                           : bfit_weights_read_norm(cfg->weights, shape_only->input.c, mean, std, &found);
        bfit_model_free(shape_only);
        if (rc != BFIT_OK)
            goto out;
    }
    rc = run_setup(&r, cfg->model, cfg->data, NULL, NULL, NULL, 0, cfg->memory, cfg->threads, cfg->normalize,
                   found ? mean : NULL, found ? std : NULL);
    if (rc != BFIT_OK)
        goto out;
    rc = bfit_model_alloc_params(r.s.M, 0);
    if (rc != BFIT_OK)
        goto out;
    rc = bfit_weights_load(r.s.M, cfg->weights);
    if (rc != BFIT_OK)
        goto out;
    budget = bfit_arena_available(r.s.arena);
    rc = choose_eval_batch(&r, cfg->batch ? cfg->batch : 1000, budget, &m);
    if (rc != BFIT_OK)
        goto out;
    rc = open_stream(&r, r.s.test, 0, m, 1, 0, 1, &r.te);
    if (rc != BFIT_OK)
        goto out;
    rc = evaluate(&r, r.te, m, cfg->samples, loss, acc, n);
out:
    run_fini(&r);
    free(mean);
    free(std);
    return rc;
}
