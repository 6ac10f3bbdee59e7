/* test_dynamic.c - the dynamic batch in the trainer: the effective batch is
 * the mathematics (any micro-batch split gives the same weights), out of
 * memory loses and repeats no sample, memory changes shrink and grow the
 * micro-batch with the samples seen unchanged, batch schedules and the
 * adaptive mode change E. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/clock.h"
#include "batch/plan.h"
#include "nn/spec.h"
#include "tdev.h"
#include "tensor/safetensors.h"
#include "train/trainer.h"
#include "tfiles.h"
#include "trun.h"

static char small[300], tiny[300];

static int setup(void **st)
{
    (void)st;
    if (tmp_setup("dyn") != 0)
        return -1;
    /* no batch norm, no dropout: the gradient cannot depend on the split */
    tmp_path(small, sizeof small, "small.cfg");
    put_text(small, "input 1x28x28\nflatten\nlinear 64\nrelu\nlinear 10\n");
    tmp_path(tiny, sizeof tiny, "tiny.cfg");
    put_text(tiny, "input 4\nlinear 8\nrelu\nlinear 3\n");
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    return tmp_teardown();
}

/* After a test that ran on the test clock, failed or not: the real one. */
static int real_clock(void **st)
{
    (void)st;
    bfit_clock_test_tick(0);
    return 0;
}

static bfit_train_cfg base(const char *model, int E, int64_t samples)
{
    bfit_train_cfg c = trun_cfg(model, E, samples, 500);
    c.lr = 0.05;
    return c;
}

/* Max |a - b| over all tensors of two weight files, and max |a|. */
static double weights_diff(const char *pa, const char *pb, double *amax)
{
    bfit_st_file *a, *b;
    double d = 0;
    assert_int_equal(bfit_st_read(pa, &a), BFIT_OK);
    assert_int_equal(bfit_st_read(pb, &b), BFIT_OK);
    assert_int_equal(bfit_st_count(a), bfit_st_count(b));
    *amax = 0;
    for (int i = 0; i < bfit_st_count(a); i++) {
        const bfit_st_tensor *ta = bfit_st_get(a, i), *tb = bfit_st_find(b, ta->name);
        const float *x = ta->data, *y;
        assert_non_null(tb);
        y = tb->data;
        for (int64_t j = 0; j < bfit_st_numel(ta); j++) {
            d = fmax(d, fabs((double)x[j] - y[j]));
            *amax = fmax(*amax, fabs((double)x[j]));
        }
    }
    bfit_st_free(a);
    bfit_st_free(b);
    return d;
}

/* 20 steps of E = 32 with m = 32, 8 and 7 (7 leaves a last micro-batch of 4).
 * The loss is normalised by E, so the splits differ only in the order float
 * sums are taken: each gradient element is a sum of ~32 products split into
 * k partial sums, an error of a few ulps (~1e-7 relative) per step. Over 20
 * steps of lr 0.05 with momentum 0.9 that moves weights of size ~0.1 by well
 * under 1e-5; 1e-5 is the bound. A different seed moves them by ~1e-1, so
 * the comparison can fail. */
static void test_split_does_not_change_weights(void **st)
{
    const int ms[] = {32, 8, 7};
    char path[3][300], other[300];
    bfit_train_result r;
    double amax, d;
    (void)st;
    for (int i = 0; i < 3; i++) {
        bfit_train_cfg c = base(small, 32, 640);
        c.micro_batch = ms[i];
        snprintf(path[i], sizeof path[i], "%s/split%d.safetensors", tmpdir, ms[i]);
        c.save = path[i];
        assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
        assert_int_equal(r.steps, 20);
        assert_int_equal(r.micro_batch, ms[i]);
    }
    for (int i = 1; i < 3; i++) {
        d = weights_diff(path[0], path[i], &amax);
        printf("  m=32 vs m=%d: max |dw| = %.3g (max |w| %.3g)\n", ms[i], d, amax);
        assert_true(d <= 1e-5);
    }
    {
        bfit_train_cfg c = base(small, 32, 640);
        c.seed = 9;
        snprintf(other, sizeof other, "%s/seed9.safetensors", tmpdir);
        c.save = other;
        assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
        d = weights_diff(path[0], other, &amax);
        printf("  another seed: max |dw| = %.3g\n", d);
        assert_true(d > 1e-3);
    }
}

/* A data set whose first feature is the sample's index, so a callback can
 * count every sample that ran. */
#define NS 480
typedef struct counts {
    int seen[NS];
    int64_t total;
} counts;

static void count_samples(void *ud, const float *x, const int32_t *y, int n)
{
    counts *c = ud;
    (void)y;
    for (int i = 0; i < n; i++) {
        int idx = (int)x[i * 4];
        assert_true(idx >= 0 && idx < NS);
        c->seen[idx]++;
        c->total++;
    }
}

static void make_indexed(bfit_dataset **tr, bfit_dataset **te)
{
    float *x = malloc(NS * 4 * sizeof *x);
    int32_t *y = malloc(NS * sizeof *y);
    for (int i = 0; i < NS; i++) {
        x[i * 4] = (float)i;
        for (int k = 1; k < 4; k++)
            x[i * 4 + k] = (float)((i * 7 + k * 13) % 11) / 11.0f;
        y[i] = i % 3;
    }
    bfit_shape s = bfit_shape_vec(4);
    assert_int_equal(bfit_dataset_from_floats(s, NS, 3, x, y, tr), BFIT_OK);
    assert_int_equal(bfit_dataset_from_floats(s, NS, 3, x, y, te), BFIT_OK);
    free(x);
    free(y);
}

/* The step of the first out-of-memory recovery (-1: none). */
static void first_oom(void *ud, const bfit_batch_decision *d, int64_t step)
{
    int64_t *at = ud;
    if (d->reason == BFIT_REASON_OOM && *at < 0)
        *at = step;
}

/* Allocation failures injected at different points of the run (during the
 * first reservation, and when the step re-reserves after a capacity change):
 * each is recovered by a smaller micro-batch; every sample is seen exactly
 * once per epoch. The run allocates parameters, gradients, the model's
 * statistics and the optimizer state (allocations 1-4), then the step's four
 * blocks at step 0 (5-8) and again after the capacity change at step 5. */
static void test_oom_loses_no_sample(void **st)
{
    const uint64_t nth[] = {5, 7, 9, 10};
    const int64_t at_step[] = {0, 0, 5, 5};
    bfit_dataset *tr, *te;
    bfit_mem_point mp[1];
    (void)st;
    make_indexed(&tr, &te);
    for (unsigned t = 0; t < sizeof nth / sizeof nth[0]; t++) {
        counts *cnt = calloc(1, sizeof *cnt);
        int64_t oom_at = -1;
        bfit_train_result r;
        bfit_train_cfg c = base(tiny, 32, 0);
        c.train_set = tr;
        c.test_set = te;
        c.normalize = 0;
        c.epochs = 2;
        c.eval_samples = 0;
        c.on_samples = count_samples;
        c.on_samples_ud = cnt;
        c.fail_nth_alloc = nth[t];
        c.on_batch_change = first_oom;
        c.cb_ud = &oom_at;
        /* a capacity "change" to the same size at step 5 makes the trainer
         * reserve again mid-epoch, where the later injections land */
        mp[0].step = 5;
        mp[0].capacity = 1ull << 30;
        c.memory = 1ull << 30;
        c.memory_schedule = mp;
        c.nmemory_schedule = 1;
        assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
        printf("  fail allocation #%llu: %d out-of-memory recovered (first at step %lld), last micro-batch %d, "
               "%lld samples\n",
               (unsigned long long)nth[t], r.ooms, (long long)oom_at, r.micro_batch, (long long)cnt->total);
        assert_true(r.ooms >= 1);
        assert_int_equal(oom_at, at_step[t]);
        assert_true(r.micro_batch < 32);
        assert_int_equal(cnt->total, 2 * NS);
        assert_int_equal(r.samples, 2 * NS);
        for (int i = 0; i < NS; i++)
            if (cnt->seen[i] != 2)
                fail_msg("sample %d seen %d times, expected 2", i, cnt->seen[i]);
        free(cnt);
    }
    bfit_dataset_free(tr);
    bfit_dataset_free(te);
}

static int log_count(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    int n = 0;
    assert_non_null(f);
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* Capacity falls at step 10 to what m = 1 needs plus a third of what the
 * next 63 samples add (about m = 22) and comes back at step 20: the micro-batch shrinks, the run sees
 * the same samples as an undisturbed run, and its weights are the same up to
 * summation order (same bound as above). Every change is logged with a reason. */
static void test_memory_schedule(void **st)
{
    uint64_t one = tdev_plan_peak(small, BFIT_OPT_SGD, 1), full = tdev_plan_peak(small, BFIT_OPT_SGD, 64);
    uint64_t third = one + (full - one) / 3;
    bfit_mem_point mp[2] = {{10, third}, {20, 1ull << 30}};
    char a[300], b[300], lg[300];
    bfit_train_result ra, rb;
    double amax, d;
    (void)st;
    snprintf(a, sizeof a, "%s/undisturbed.safetensors", tmpdir);
    snprintf(b, sizeof b, "%s/disturbed.safetensors", tmpdir);
    snprintf(lg, sizeof lg, "%s/disturbed.jsonl", tmpdir);
    {
        bfit_train_cfg c = base(small, 64, 1920);
        c.memory = 1ull << 30;
        c.margin = 0;
        c.save = a;
        assert_int_equal(bfit_train_from(&c, &ra), BFIT_OK);
    }
    {
        bfit_train_cfg c = base(small, 64, 1920);
        c.memory = 1ull << 30;
        c.margin = 0;
        c.memory_schedule = mp;
        c.nmemory_schedule = 2;
        c.save = b;
        c.log = lg;
        assert_int_equal(bfit_train_from(&c, &rb), BFIT_OK);
    }
    assert_int_equal(ra.samples, rb.samples);
    assert_int_equal(ra.steps, rb.steps);
    assert_int_equal(rb.ooms, 0); /* the controller shrank before anything failed */
    assert_true(rb.batch_changes >= 1);
    assert_int_equal(log_count(lg, "\"event\":\"memory\""), 2);
    assert_true(log_count(lg, "\"reason\":\"memory shrank\"") >= 1);
    assert_int_equal(log_count(lg, "\"event\":\"batch_change\""), rb.batch_changes);
    assert_int_equal(log_count(lg, "\"reason\":\"\""), 0);
    d = weights_diff(a, b, &amax);
    printf("  disturbed vs undisturbed: %d changes, max |dw| = %.3g, accuracy %.4f vs %.4f\n", rb.batch_changes, d,
           rb.test_acc, ra.test_acc);
    assert_true(d <= 1e-5);
    assert_true(fabs(ra.test_acc - rb.test_acc) <= 0.01);
}

/* A batch schedule by step: 10 steps of 32, then 64 until the epoch's 960
 * samples are used: 10 + 10 steps. */
static void test_batch_schedule(void **st)
{
    bfit_batch_point pts[2];
    int n;
    bfit_train_result r;
    bfit_train_cfg c = base(small, 32, 960);
    char lg[300];
    (void)st;
    assert_int_equal(bfit_batch_schedule_parse("0:32,10:64", pts, 2, &n), BFIT_OK);
    snprintf(lg, sizeof lg, "%s/sched.jsonl", tmpdir);
    c.batch_schedule = pts;
    c.nbatch_schedule = n;
    c.log = lg;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
    assert_int_equal(r.steps, 20);
    assert_int_equal(r.samples, 960);
    assert_int_equal(r.last_batch, 64);
    assert_int_equal(log_count(lg, "\"reason\":\"schedule\""), 1);
}

/* The batch instead of the decay: a step schedule (x0.5 every 5 steps) turns
 * into E doubling every 5 steps with the lr held. */
static void test_batch_instead_of_decay(void **st)
{
    bfit_train_result r;
    bfit_train_cfg c = base(small, 16, 16 * 5 + 32 * 5 + 64 * 5);
    (void)st;
    c.sched = bfit_lr_schedule_default(BFIT_SCHED_STEP);
    c.sched.step_size = 5;
    c.sched.gamma = 0.5;
    c.batch_instead_of_decay = 1;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
    assert_int_equal(r.steps, 15);
    assert_int_equal(r.last_batch, 64);
}

/* One adaptive run (E from 16, at most 256); the noise scale must be
 * estimated and E stay within its bounds. */
static void adaptive_run(int64_t samples, int micro_batch, const char *save, const char *lg, bfit_train_result *r)
{
    bfit_train_cfg c = base(small, 0, samples);
    c.adaptive = 1;
    c.batch_min = 16;
    c.batch_max = 256;
    c.batch = 16;
    c.micro_batch = micro_batch;
    c.log = lg;
    c.save = save;
    assert_int_equal(bfit_train_from(&c, r), BFIT_OK);
    printf("  adaptive, micro-batch %s: %lld steps, noise scale %.1f, last E %d, %d changes\n",
           micro_batch ? "fixed" : "auto", (long long)r->steps, r->noise_scale, r->last_batch, r->batch_changes);
    if (!(r->noise_scale > 0)) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "grep -E 'batch_change|\"step\":(1|2|3|4|5|6|50|100|101),' %s | cut -c1-300", lg);
        (void)!system(cmd);
    }
    assert_true(r->noise_scale > 0);
    assert_true(r->last_batch >= 16 && r->last_batch <= 256);
    assert_int_equal(r->samples, samples);
}

/* Adaptive E: the noise scale is measured (every step has k >= 2
 * micro-batches) and E stays within its bounds, with the micro-batch chosen
 * by the controller. Then determinism: the same seed gives the same
 * estimates, decisions and weights, bit for bit. That needs a micro-batch
 * that does not follow wall-clock measurements: in auto mode the controller
 * may switch to a micro-batch it measured faster (docs/dynamic.md,
 * "Throughput"), which changes the noise estimates. A fixed micro-batch of
 * batch_max never binds, so m is the adaptive cap ceil(E/2) throughout
 * (3200 samples: 150 steps, E changes once at step 100). */
static void test_adaptive(void **st)
{
    bfit_train_result r[3];
    char lg[300], w[2][300], *b[2];
    long n[2];
    (void)st;
    snprintf(lg, sizeof lg, "%s/adaptive.jsonl", tmpdir);
    adaptive_run(6400, 0, NULL, lg, &r[2]);
    for (int i = 0; i < 2; i++) {
        snprintf(w[i], sizeof w[i], "%s/adaptive%d.safetensors", tmpdir, i);
        adaptive_run(3200, 256, w[i], lg, &r[i]);
        assert_int_equal(r[i].micro_batch, (r[i].last_batch + 1) / 2);
    }
    assert_true(r[0].noise_scale == r[1].noise_scale);
    assert_int_equal(r[0].steps, r[1].steps);
    assert_true(r[0].batch_changes >= 1); /* E moved at step 100 */
    assert_int_equal(r[0].batch_changes, r[1].batch_changes);
    assert_int_equal(r[0].last_batch, r[1].last_batch);
    b[0] = file_bytes(w[0], &n[0]);
    b[1] = file_bytes(w[1], &n[1]);
    assert_int_equal(n[0], n[1]);
    assert_memory_equal(b[0], b[1], (size_t)n[0]);
    free(b[0]);
    free(b[1]);
}

/* What an auto run's steps did. */
typedef struct auto_seen {
    int steps, k_gt_1, min_E, max_E;
} auto_seen;

static void auto_on_step(void *ud, const bfit_step_info *si)
{
    auto_seen *a = ud;
    a->steps++;
    a->k_gt_1 += si->k > 1;
    if (!a->min_E || si->batch < a->min_E)
        a->min_E = si->batch;
    if (si->batch > a->max_E)
        a->max_E = si->batch;
}

/* --batch auto in a real run. First, the ladder leaves the model as found:
 * with E held at 32 (batch_min = batch_max) and the micro-batch fixed, an
 * auto run (whose ladder runs forward and backward at 8, 16 and 32 after 50
 * steps) ends with exactly the weights of a fixed run, batch-norm running
 * statistics included, and its cosine lr is the fixed run's at every step,
 * past an epoch's short last step too. Then a free auto run: the noise scale is estimated
 * without accumulating (a step splits only for a measured throughput gain), the ladder is in the
 * log, E stays in its bounds, every change says why, and E does not flip
 * back and forth (it never returns to a size it left). Its moves follow
 * measured time, so it runs on the test clock (base/clock.h): the same
 * moves on any machine under any load (128 -> 256 -> 512), so the checks on
 * them always have something to check. */
static void test_auto(void **st)
{
    char spec[300], w[2][300], lg[300];
    bfit_train_result r;
    auto_seen seen = {0};
    double amax, d;
    (void)st;
    tmp_path(spec, sizeof spec, "bn_auto.cfg");
    put_text(spec, "input 1x28x28\nconv 4 k=3\nbatchnorm\nrelu\nflatten\nlinear 10\n");
    for (int i = 0; i < 2; i++) {
        /* two epochs of 50 steps and a short one of 16, under cosine: auto
         * counts the short step as a whole one, as the fixed batch does */
        bfit_train_cfg c = base(spec, 32, 1616);
        c.epochs = 2;
        c.sched = bfit_lr_schedule_default(BFIT_SCHED_COSINE);
        c.micro_batch = 32;
        if (i == 1) {
            c.auto_batch = 1;
            c.batch = 0;
            c.batch_min = c.batch_max = 32;
            c.lr_ref_batch = 32;
        }
        snprintf(w[i], sizeof w[i], "%s/auto%d.safetensors", tmpdir, i);
        c.save = w[i];
        assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
        assert_int_equal(r.steps, 102);
    }
    d = weights_diff(w[0], w[1], &amax);
    printf("  fixed vs auto with one choice: max |dw| = %.3g\n", d);
    assert_true(d == 0);

    snprintf(lg, sizeof lg, "%s/auto.jsonl", tmpdir);
    {
        bfit_train_cfg c = base(small, 0, 32000);
        c.auto_batch = 1;
        c.batch_min = 16;
        c.batch_max = 1024;
        c.lr_ref_batch = 128;
        c.log = lg;
        c.on_step = auto_on_step;
        c.cb_ud = &seen;
        bfit_clock_test_tick(0.001);
        assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
        bfit_clock_test_tick(0);
    }
    printf("  auto: %lld steps, E %d..%d, %d changes, noise scale %.1f\n", (long long)r.steps, seen.min_E,
           seen.max_E, r.batch_changes, r.noise_scale);
    assert_int_equal(r.samples, 32000);
    /* the noise scale never makes it split a step; only a smaller micro-batch
     * that the ladder measured faster does (a logged throughput change) */
    assert_true(seen.k_gt_1 == 0 || log_count(lg, "\"reason\":\"throughput\"") > 0);
    assert_true(log_count(lg, "\"reason\":\"goodput\"") >= 2);
    assert_true(r.noise_scale > 0);
    assert_true(seen.min_E >= 16 && seen.max_E <= 1024);
    assert_true(log_count(lg, "\"event\":\"ladder\"") >= 2);
    assert_int_equal(log_count(lg, "\"event\":\"batch_change\""), r.batch_changes);
    assert_int_equal(log_count(lg, "\"reason\":\"goodput\"") + log_count(lg, "\"reason\":\"throughput\""),
                     r.batch_changes);
    {
        /* never back to an E it left */
        char cmd[600], line[64];
        int left[64], nleft = 0, prevE = 128; /* it starts at lr_ref_batch */
        FILE *p;
        snprintf(cmd, sizeof cmd, "grep '\"reason\":\"goodput\"' %s | sed 's/.*\"E\":\\([0-9]*\\).*/\\1/'", lg);
        p = popen(cmd, "r");
        assert_non_null(p);
        while (fgets(line, sizeof line, p)) {
            int E = atoi(line);
            for (int i = 0; i < nleft; i++)
                assert_int_not_equal(left[i], E);
            if (nleft < 64)
                left[nleft++] = prevE;
            prevE = E;
        }
        pclose(p);
        assert_true(nleft >= 2); /* a second move, checked against the E the first left */
    }
}

/* Auto's plateau move in a real run: with a constant lr too small to move
 * the loss, the loss is flat, so E doubles, 16 -> 32 (logged with reason
 * plateau), and the lr scale stays what it was; under a cosine schedule,
 * which anneals already, no plateau move. Resumed from step 1500, inside
 * the windows (one stalled window counted), the run moves at the same step
 * and ends with the same weights. */
static void test_auto_plateau_run(void **st)
{
    char lg[3][300], w[3][300], dir[300], ck[400], cmd[400], line[600], *at[2];
    bfit_train_result r[3];
    double prev = 1, amax;
    int nplateau = 0;
    FILE *p;
    (void)st;
    snprintf(dir, sizeof dir, "%s/plateau_ck", tmpdir);
    for (int i = 0; i < 3; i++) {
        bfit_train_cfg c = base(small, 0, 64000);
        c.auto_batch = 1;
        c.batch_min = 16;
        c.batch_max = 32;
        c.micro_batch = 16;
        c.auto_gain = 1e6; /* no goodput moves: they follow timings, which a loaded machine moves */
        c.lr_ref_batch = 16;
        c.lr = 1e-7;
        if (i == 1) {
            c.sched = bfit_lr_schedule_default(BFIT_SCHED_COSINE);
            c.sched.total_steps = 4000;
            c.sched.min_factor = 1; /* the same lr as the constant run, but a cosine schedule */
        }
        if (i == 0) {
            c.checkpoint = dir;
            c.checkpoint_steps = 500;
            c.checkpoint_keep = 100;
        }
        if (i == 2) {
            snprintf(ck, sizeof ck, "%s/ckpt-%012d.safetensors", dir, 1500);
            c.resume = ck;
        }
        snprintf(lg[i], sizeof lg[i], "%s/plateau%d.jsonl", tmpdir, i);
        snprintf(w[i], sizeof w[i], "%s/plateau%d.safetensors", tmpdir, i);
        c.log = lg[i];
        c.save = w[i];
        assert_int_equal(bfit_train_from(&c, &r[i]), BFIT_OK);
    }
    snprintf(cmd, sizeof cmd, "grep '\"event\":\"batch_change\"' %s", lg[0]);
    p = popen(cmd, "r");
    assert_non_null(p);
    while (fgets(line, sizeof line, p)) {
        const char *ls = strstr(line, "\"lr_scale\":");
        double scale;
        assert_non_null(ls);
        scale = atof(ls + 11);
        if (strstr(line, "\"reason\":\"plateau\"")) {
            assert_true(fabs(scale - prev) <= 1e-9 * prev);
            assert_non_null(strstr(line, "at the same lr"));
            nplateau++;
        }
        prev = scale;
    }
    pclose(p);
    printf("  plateau moves: %d of %d changes, last E %d\n", nplateau, r[0].batch_changes, r[0].last_batch);
    assert_int_equal(nplateau, 1);
    assert_int_equal(r[0].batch_changes, 1);
    assert_int_equal(r[0].last_batch, 32);
    assert_int_equal(log_count(lg[1], "\"reason\":\"plateau\""), 0);
    /* the resumed run: the move at the same step, the same weights */
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "grep -o '\"step\":[0-9]*,\"reason\":\"plateau\"' %s", lg[i ? 2 : 0]);
        p = popen(cmd, "r");
        assert_non_null(p);
        at[i] = fgets(line + i * 300, 300, p);
        pclose(p);
        assert_non_null(at[i]);
    }
    printf("  resumed at 1500: %s", at[1]);
    assert_string_equal(at[0], at[1]);
    assert_true(weights_diff(w[0], w[2], &amax) == 0);
    {
        bfit_train_cfg c = base(small, 0, 64000);
        c.auto_batch = 1;
        c.auto_gain = -0.1;
        assert_int_equal(bfit_train_from(&c, &r[0]), BFIT_EINVAL);
        assert_string_equal(bfit_errfield(), "auto_gain");
    }
}

/* Group norm depends on no other sample: E = 32 in micro-batches of 32 or 8
 * gives the same weights but for the order of float sums (the test above's
 * argument; these weights grow to ~2, so the bound is relative: 2e-5 of the
 * largest, where 7e-6 was measured), and no batch-norm warning; the same
 * model with batch norm in its place depends on the split (its statistics
 * are the micro-batch's): there the weights differ by more than their own
 * size (24.5 against 13.5 measured), so the bound of 1e-2 discriminates. */
static void test_groupnorm_split_does_not_change_weights(void **st)
{
    static const char *const norm[2] = {"groupnorm 2", "batchnorm"};
    char spec[300], path[2][2][300], lg[300], text[200];
    bfit_train_result r;
    double amax, d[2];
    (void)st;
    for (int k = 0; k < 2; k++) {
        snprintf(spec, sizeof spec, "%s/norm%d.cfg", tmpdir, k);
        snprintf(text, sizeof text, "input 1x28x28\nconv 4 k=3\n%s\nrelu\nflatten\nlinear 10\n", norm[k]);
        put_text(spec, text);
        for (int i = 0; i < 2; i++) {
            bfit_train_cfg c = base(spec, 32, 640);
            c.micro_batch = i ? 8 : 32;
            snprintf(path[k][i], sizeof path[k][i], "%s/norm%d_m%d.safetensors", tmpdir, k, c.micro_batch);
            snprintf(lg, sizeof lg, "%s/norm%d_m%d.jsonl", tmpdir, k, c.micro_batch);
            c.save = path[k][i];
            c.log = lg;
            assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
            assert_int_equal(r.steps, 20);
            assert_int_equal(r.micro_batch, c.micro_batch);
            if (k == 0)
                assert_int_equal(log_count(lg, "\"event\":\"warning\""), 0);
        }
        d[k] = weights_diff(path[k][0], path[k][1], &amax) / amax;
        printf("  %s: m=32 vs m=8: max |dw| / max |w| = %.3g (max |w| %.3g)\n", norm[k], d[k], amax);
    }
    assert_true(d[0] <= 2e-5);
    assert_true(d[1] > 1e-2);
}

/* Batch norm with m < E sees micro-batches: one warning, in the log and
 * counted once however many steps split; none when m = E. */
static void test_batchnorm_warning(void **st)
{
    char spec[300], lg[300], lg2[300];
    bfit_train_result r;
    (void)st;
    tmp_path(spec, sizeof spec, "bn.cfg");
    put_text(spec, "input 1x28x28\nconv 4 k=3\nbatchnorm\nrelu\nflatten\nlinear 10\n");
    snprintf(lg, sizeof lg, "%s/bn.jsonl", tmpdir);
    snprintf(lg2, sizeof lg2, "%s/bn2.jsonl", tmpdir);
    {
        bfit_train_cfg c = base(spec, 32, 320);
        c.micro_batch = 8;
        c.log = lg;
        assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
    }
    assert_int_equal(log_count(lg, "\"event\":\"warning\""), 1);
    assert_int_equal(log_count(lg, "batch norm sees micro-batches of 8, not the effective batch 32"), 1);
    {
        bfit_train_cfg c = base(spec, 32, 320);
        c.micro_batch = 32;
        c.log = lg2;
        assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
    }
    assert_int_equal(log_count(lg2, "\"event\":\"warning\""), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_does_not_change_weights),
        cmocka_unit_test(test_groupnorm_split_does_not_change_weights),
        cmocka_unit_test(test_oom_loses_no_sample),
        cmocka_unit_test(test_memory_schedule),
        cmocka_unit_test(test_batch_schedule),
        cmocka_unit_test(test_batch_instead_of_decay),
        cmocka_unit_test(test_adaptive),
        cmocka_unit_test_teardown(test_auto, real_clock),
        cmocka_unit_test(test_auto_plateau_run),
        cmocka_unit_test(test_batchnorm_warning),
    };
    /* CTest runs test_auto as test_dynamic_auto, test_auto_plateau_run as
     * test_dynamic_plateau, the rest as test_dynamic: each under a minute
     * under the sanitizers */
    if (getenv("BFIT_TEST_ONLY"))
        cmocka_set_test_filter(getenv("BFIT_TEST_ONLY"));
    if (getenv("BFIT_TEST_SKIP"))
        cmocka_set_skip_filter(getenv("BFIT_TEST_SKIP"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
