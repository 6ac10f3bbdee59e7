/* test_run.c - the trainer as a run object, and what the refactor added or
 * fixed: bfit_run driven step by step gives what bfit_train gives (the same
 * callbacks, the same bits); the evaluation micro-batch comes from the
 * memory actually free; the log ends with "end" or with an "error" event;
 * the weights are kept when only the last evaluation fails. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <cjson/cJSON.h>

#include "batch/plan.h"
#include "batch/session.h"
#include "device/device.h"
#include "nn/zoo.h"
#include "tensor/safetensors.h"
#include "train/trainer.h"
#include "tdev.h"
#include "tfiles.h"
#include "trun.h"
#include "tshared.h"

#define MiB ((uint64_t)1 << 20)

static char mlp[512], cnn[512];

static int setup(void **st)
{
    (void)st;
    src_path(mlp, sizeof mlp, "models/mlp.cfg");
    src_path(cnn, sizeof cnn, "models/cnn.cfg");
    return tmp_setup("run");
}

static int teardown(void **st)
{
    (void)st;
    return tmp_teardown();
}

static bfit_train_cfg quick(const char *model, int E, int64_t samples) { return trun_cfg(model, E, samples, 200); }

/* ---- what the callbacks saw ------------------------------------------------ */

#define MAXREC 128
typedef struct rec {
    int nstep, neval, nchange;
    bfit_step_info step[MAXREC];
    bfit_eval_info eval[8];
    bfit_batch_decision change[8];
    int64_t change_step[8];
} rec;

static void rec_step(void *ud, const bfit_step_info *s)
{
    rec *r = ud;
    assert_true(r->nstep < MAXREC);
    r->step[r->nstep++] = *s;
}

static void rec_eval(void *ud, const bfit_eval_info *e)
{
    rec *r = ud;
    assert_true(r->neval < 8);
    r->eval[r->neval++] = *e;
}

static void rec_change(void *ud, const bfit_batch_decision *d, int64_t step)
{
    rec *r = ud;
    assert_true(r->nchange < 8);
    r->change_step[r->nchange] = step;
    r->change[r->nchange++] = *d;
}

static void rec_attach(bfit_train_cfg *c, rec *r)
{
    memset(r, 0, sizeof *r);
    c->on_step = rec_step;
    c->on_eval = rec_eval;
    c->on_batch_change = rec_change;
    c->cb_ud = r;
}

/* ---- a JSON-lines log, every line parsed ------------------------------------ */

#define MAXEV 256
typedef struct events {
    int n;
    cJSON *ev[MAXEV];
} events;

static void events_read(const char *path, events *e)
{
    FILE *f = fopen(path, "r");
    char line[8192];
    memset(e, 0, sizeof *e);
    assert_non_null(f);
    while (fgets(line, sizeof line, f)) {
        assert_true(e->n < MAXEV);
        e->ev[e->n] = cJSON_Parse(line);
        if (!e->ev[e->n])
            fail_msg("%s: a line that is not JSON: %s", path, line);
        e->n++;
    }
    fclose(f);
    assert_true(e->n > 0);
}

static void events_free(events *e)
{
    for (int i = 0; i < e->n; i++)
        cJSON_Delete(e->ev[i]);
    e->n = 0;
}

static const char *ev_str(const cJSON *e, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
    if (!cJSON_IsString(v))
        fail_msg("event without a string \"%s\"", key);
    return v->valuestring;
}

static double ev_num(const cJSON *e, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
    if (!cJSON_IsNumber(v))
        fail_msg("event without a number \"%s\"", key);
    return v->valuedouble;
}

static int events_count(const events *e, const char *name)
{
    int n = 0;
    for (int i = 0; i < e->n; i++)
        n += !strcmp(ev_str(e->ev[i], "event"), name);
    return n;
}

static const cJSON *events_last(const events *e) { return e->ev[e->n - 1]; }

/* ---- files ------------------------------------------------------------------- */

static int file_exists(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f)
        fclose(f);
    return f != NULL;
}

/* ---- the run object ---------------------------------------------------------- */

/* bfit_train's loop written out by a caller: steps until done, an
 * evaluation at each epoch's end (and at the end), then save and finish. */
static void drive(const bfit_train_cfg *c, const char *save, bfit_train_result *res)
{
    bfit_run *r;
    bfit_step_info si = BFIT_SIZED(bfit_step_info);
    bfit_eval_info ev = BFIT_SIZED(bfit_eval_info);
    int64_t n = 0;

    if (bfit_run_new_from(c, &r) != BFIT_OK)
        fail_msg("bfit_run_new: %s", bfit_errmsg());
    while (!bfit_run_done(r)) {
        assert_int_equal(bfit_run_step(r, &si), BFIT_OK);
        assert_int_equal(si.step, n++);
        if (si.epoch_end || bfit_run_done(r))
            assert_int_equal(bfit_run_evaluate(r, &ev), BFIT_OK);
    }
    /* a step past the end is refused, and changes nothing */
    assert_int_equal(bfit_run_step(r, &si), BFIT_ESTATE);
    assert_int_equal(bfit_run_save(r, save), BFIT_OK);
    bfit_run_result_get(r, res);
    bfit_run_finish(r, BFIT_OK);
    bfit_run_free(r);
}

/* E is 32 for steps 0-3, 64 from step 4, 128 from step 12; 512 samples an
 * epoch: epoch 1 is steps 0-9 (4 x 32 + 6 x 64), epoch 2 steps 10-14
 * (2 x 64 + 3 x 128). The micro-batch is fixed at 48, so the steps
 * accumulate 1, 2 and 3 micro-batches, the last one short. (An auto
 * micro-batch may switch to a size it measured faster, a wall-clock
 * decision that would make two runs differ.) */
static const bfit_batch_point sched[] = {{0, 0, 32}, {4, 0, 64}, {12, 0, 128}};
#define SCHED_M 48

static int sched_E(int64_t step) { return step < 4 ? 32 : step < 12 ? 64 : 128; }

/* The callbacks fired once per step, evaluation and change, in order, with
 * the steps the schedule says. */
static void check_record(const rec *r)
{
    assert_int_equal(r->nstep, 15);
    for (int i = 0; i < r->nstep; i++) {
        const bfit_step_info *s = &r->step[i];
        assert_int_equal(s->step, i);
        assert_int_equal(s->epoch, i < 10 ? 0 : 1);
        assert_int_equal(s->batch, sched_E(i));
        assert_int_equal(s->epoch_end, i == 9 || i == 14);
        assert_int_equal(s->m, s->batch < SCHED_M ? s->batch : SCHED_M);
        assert_int_equal(s->k, (s->batch + s->m - 1) / s->m);
        assert_true(isfinite(s->loss) && s->loss > 0);
    }
    assert_int_equal(r->neval, 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r->eval[i].epoch, i + 1);
        assert_int_equal(r->eval[i].step, i == 0 ? 10 : 15);
        assert_int_equal(r->eval[i].samples, 200);
        assert_int_equal(r->eval[i].m, 200); /* all 200 at once: ample memory, and no larger than the samples */
        assert_true(r->eval[i].test_acc > 0 && r->eval[i].test_acc <= 1);
    }
    assert_int_equal(r->nchange, 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r->change_step[i], i == 0 ? 4 : 12);
        assert_int_equal(r->change[i].reason, BFIT_REASON_SCHEDULE);
        assert_int_equal(r->change[i].batch, i == 0 ? 64 : 128);
    }
}

/* Two records of the same run agree in everything but wall time. */
static void assert_same_record(const rec *a, const rec *b)
{
    assert_int_equal(a->nstep, b->nstep);
    for (int i = 0; i < a->nstep; i++) {
        const bfit_step_info *x = &a->step[i], *y = &b->step[i];
        assert_int_equal(x->m, y->m);
        assert_int_equal(x->k, y->k);
        assert_true(x->loss == y->loss);
        assert_true(x->lr == y->lr);
    }
    assert_int_equal(a->neval, b->neval);
    for (int i = 0; i < a->neval; i++) {
        assert_int_equal(a->eval[i].m, b->eval[i].m);
        assert_true(a->eval[i].test_loss == b->eval[i].test_loss);
        assert_true(a->eval[i].test_acc == b->eval[i].test_acc);
        assert_true(a->eval[i].train_loss == b->eval[i].train_loss);
    }
    assert_int_equal(a->nchange, b->nchange);
}

/* The log of a good run: start first, end last, one event per step,
 * evaluation and change. */
static void check_good_log(const char *path, int steps, int evals, int changes)
{
    events e;
    events_read(path, &e);
    assert_string_equal(ev_str(e.ev[0], "event"), "start");
    assert_string_equal(ev_str(events_last(&e), "event"), "end");
    assert_int_equal((int)ev_num(events_last(&e), "steps"), steps);
    assert_int_equal(events_count(&e, "step"), steps);
    assert_int_equal(events_count(&e, "eval"), evals);
    assert_int_equal(events_count(&e, "batch_change"), changes);
    assert_int_equal(events_count(&e, "error"), 0);
    events_free(&e);
}

/* bfit_run driven by hand and bfit_train, same configuration and seed: the
 * same callbacks with the same figures, the same log, the same file. */
static void test_run_object(void **st)
{
    char wa[300], wb[300], la[300], lb[300], *ba, *bb;
    long na, nb;
    bfit_train_result ra, rb;
    rec *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    bfit_train_cfg c = quick(mlp, 32, 512);
    (void)st;
    assert_non_null(a);
    assert_non_null(b);
    tmp_path(wa, sizeof wa, "driven.safetensors");
    tmp_path(wb, sizeof wb, "trained.safetensors");
    tmp_path(la, sizeof la, "driven.jsonl");
    tmp_path(lb, sizeof lb, "trained.jsonl");
    c.epochs = 2;
    c.micro_batch = SCHED_M;
    c.batch_schedule = sched;
    c.nbatch_schedule = 3;
    c.log = la;
    rec_attach(&c, a);
    drive(&c, wa, &ra);
    check_record(a);
    check_good_log(la, 15, 2, 2);

    c.log = lb;
    c.save = wb;
    rec_attach(&c, b);
    assert_int_equal(bfit_train_from(&c, &rb), BFIT_OK);
    check_record(b);
    check_good_log(lb, 15, 2, 2);
    assert_same_record(a, b);
    assert_int_equal(ra.steps, rb.steps);
    assert_int_equal(ra.samples, 1024);
    assert_int_equal(rb.samples, 1024);
    assert_int_equal(ra.epochs, 2);
    assert_int_equal(rb.batch_changes, 2);
    assert_int_equal(ra.batch_changes, 2);
    assert_int_equal(ra.last_batch, 128);
    assert_true(ra.train_loss == rb.train_loss && ra.test_acc == rb.test_acc);
    ba = file_bytes(wa, &na);
    bb = file_bytes(wb, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(ba, bb, (size_t)na);
    free(ba);
    free(bb);
    free(a);
    free(b);
}

/* ---- the evaluation micro-batch ---------------------------------------------- */

/* What evaluating at the old fixed micro-batch of 1000 would have needed
 * next to what a training run (SGD with momentum) holds: the eval plan at
 * 1000 (parameters included) plus gradients and optimizer state. */
static uint64_t eval_1000_need(const char *model)
{
    tdev t;
    bfit_graph_desc g;
    bfit_model *M;
    bfit_step_plan pe, pt;
    bfit_optim_cfg o = bfit_optim_cfg_default(BFIT_OPT_SGD);
    tdev_open(&t, 2);
    assert_int_equal(bfit_model_source_load(model, 0, &g), BFIT_OK);
    assert_int_equal(bfit_model_new(&g, t.dev, t.arena, &M), BFIT_OK);
    assert_int_equal(bfit_plan_compute(M, NULL, 1000, 0, &pe), BFIT_OK);
    assert_int_equal(bfit_plan_compute(M, &o, 1, 1, &pt), BFIT_OK);
    bfit_model_free(M);
    bfit_graph_fini(&g);
    tdev_close(&t);
    return pe.peak + pt.bytes[BFIT_MEM_GRADS] + pt.bytes[BFIT_MEM_OPTIMIZER];
}

/* One epoch in `memory`, evaluated; *eval_m gets the eval micro-batch. */
static void tight_run(bfit_train_cfg *c, const char *lg, bfit_train_result *res, int *eval_m)
{
    rec *r = calloc(1, sizeof *r);
    events e;
    assert_non_null(r);
    c->log = lg;
    rec_attach(c, r);
    if (bfit_train_from(c, res) != BFIT_OK)
        fail_msg("%s with %llu MiB: %s", c->model, (unsigned long long)(c->memory / MiB), bfit_errmsg());
    assert_int_equal(r->neval, 1);
    assert_int_equal(r->eval[0].samples, c->eval_samples);
    *eval_m = r->eval[0].m;
    /* never larger than the samples evaluated */
    assert_true(*eval_m <= c->eval_samples);
    /* the log's eval event says the same */
    events_read(lg, &e);
    for (int i = 0; i < e.n; i++)
        if (!strcmp(ev_str(e.ev[i], "event"), "eval"))
            assert_int_equal((int)ev_num(e.ev[i], "eval_batch"), *eval_m);
    assert_string_equal(ev_str(events_last(&e), "event"), "end");
    events_free(&e);
    free(r);
}

/* A run that trains in tight memory evaluates with a micro-batch that fits
 * what is free, not the fixed 1000 that would not (it failed with
 * out-of-memory after all the training). Its saved weights, evaluated again
 * with ample memory at micro-batch 1000 (bfit_evaluate), give the same
 * figures: per-sample results differ only in float rounding between
 * micro-batch sizes, so the accuracy may differ by a near-tie sample at most
 * and the mean loss by far less than 1e-5 relative. */
static void check_eval_fits(const char *model, int E, uint64_t memory, int64_t samples, int64_t eval_samples,
                            double min_acc)
{
    char lg[300], w[300];
    bfit_train_result r;
    bfit_train_cfg c = quick(model, E, samples);
    bfit_eval_cfg ec;
    double loss, acc;
    int64_t n;
    int m;

    /* 1000 does not fit the run's memory, and fits 1 GiB easily */
    assert_true(eval_1000_need(model) > memory);
    assert_true(eval_1000_need(model) < (1ull << 30) / 2);
    tmp_path(lg, sizeof lg, "tight.jsonl");
    tmp_path(w, sizeof w, "tight.safetensors");
    c.memory = memory;
    c.eval_samples = eval_samples;
    c.save = w;
    tight_run(&c, lg, &r, &m);
    printf("  %s, %llu MiB: trained at micro-batch %d, evaluated at %d: accuracy %.4f, loss %.4f\n", model,
           (unsigned long long)(memory / MiB), r.micro_batch, m, r.test_acc, r.test_loss);
    assert_true(m >= 1 && m < 1000);
    assert_int_equal(r.ooms, 0);
    assert_true(r.test_acc > min_acc);

    memset(&ec, 0, sizeof ec);
    ec.model = model;
    ec.weights = w;
    ec.data = "fashion-mnist";
    ec.samples = eval_samples;
    ec.threads = 2;
    ec.device_name = "cpu";
    ec.memory = 1ull << 30;
    ec.normalize = 1;
    if (bfit_evaluate_from(&ec, &loss, &acc, &n, NULL) != BFIT_OK)
        fail_msg("%s", bfit_errmsg());
    printf("  again at micro-batch 1000: accuracy %.4f, loss %.4f\n", acc, loss);
    assert_int_equal(n, eval_samples);
    assert_true(fabs(r.test_acc - acc) <= 1.0 / (double)eval_samples);
    assert_true(fabs(r.test_loss - loss) <= 1e-5 * loss);
}

static void test_eval_batch_mlp(void **st)
{
    (void)st;
    /* 10 steps reach about 67% on these 2000 samples; chance is 10% */
    check_eval_fits(mlp, 256, 28 * MiB, 2560, 2000, 0.5);
}

static void test_eval_batch_cnn(void **st)
{
    (void)st;
    /* 10 steps reach about 54% on these 1000 samples */
    check_eval_fits(cnn, 128, 24 * MiB, 1280, 1000, 0.4);
}

/* ---- failures ------------------------------------------------------------------ */

/* The log ends with an error event that says where and what: the step (the
 * steps taken so far), the code, the field and the message, the same as
 * bfit_errmsg(), JSON-escaped; no end event. */
static void check_error_log(const char *path, int rc, int64_t step, const char *field)
{
    events e;
    const cJSON *last;
    events_read(path, &e);
    last = events_last(&e);
    assert_string_equal(ev_str(last, "event"), "error");
    assert_int_equal((int64_t)ev_num(last, "step"), step);
    assert_string_equal(ev_str(last, "code"), bfit_strerror(rc));
    assert_string_equal(ev_str(last, "field"), field);
    assert_string_equal(ev_str(last, "message"), bfit_errmsg());
    assert_int_equal(events_count(&e, "end"), 0);
    events_free(&e);
}

/* A run whose loss diverges stops with an error naming lr, logged as the
 * last event; nothing is saved, since the training did not finish. A run
 * that cannot start (memory below the parameters) logs its error too. */
static void test_error_event(void **st)
{
    char lg[300], w[300];
    bfit_train_result r;
    bfit_train_cfg c = quick(mlp, 64, 640);
    events e;
    int rc, steps;
    (void)st;
    tmp_path(lg, sizeof lg, "diverged.jsonl");
    tmp_path(w, sizeof w, "diverged.safetensors");
    c.lr = 1e4;
    c.log = lg;
    c.save = w;
    rc = bfit_train_from(&c, &r);
    assert_int_equal(rc, BFIT_EINVAL);
    assert_string_equal(bfit_errfield(), "lr");
    assert_non_null(strstr(bfit_errmsg(), "lr: the loss became"));
    events_read(lg, &e);
    steps = events_count(&e, "step");
    events_free(&e);
    assert_true(steps < 10);
    assert_int_equal(r.steps, steps);
    check_error_log(lg, rc, steps, "lr");
    assert_false(file_exists(w));

    tmp_path(lg, sizeof lg, "nofit.jsonl");
    c = quick(mlp, 64, 640);
    c.memory = MiB;
    c.log = lg;
    rc = bfit_train_from(&c, &r);
    assert_int_equal(rc, BFIT_ENOMEM);
    check_error_log(lg, rc, 0, "memory");
}

/* All training steps ran, then the capacity fell (another tenant) so the
 * last evaluation cannot run: the weights are saved anyway, the same bits
 * as an undisturbed run's, and the error says where they are. The path has
 * a quote, which the log must escape. When an earlier evaluation fails, the
 * training did not finish: nothing is saved and nothing is claimed. */
/* Memory that goes between choosing the eval micro-batch and reserving it
 * (an injected failure of the reservation's first block) is recovered as in
 * training: a smaller micro-batch is chosen in what is free, and every
 * sample is evaluated. */
static void test_eval_oom_recovered(void **st)
{
    bfit_train_cfg c = quick(mlp, 64, 640);
    bfit_run *run = NULL;
    bfit_eval_info ev = BFIT_SIZED(bfit_eval_info);
    bfit_arena_stats s0, s1;
    (void)st;
    assert_int_equal(bfit_run_new_from(&c, &run), BFIT_OK);
    while (!bfit_run_done(run))
        assert_int_equal(bfit_run_step(run, NULL), BFIT_OK);
    bfit_arena_stats_get(bfit_run_arena(run), &s0);
    bfit_arena_fail_nth(bfit_run_arena(run), 1);
    assert_int_equal(bfit_run_evaluate(run, &ev), BFIT_OK);
    bfit_arena_stats_get(bfit_run_arena(run), &s1);
    assert_int_equal(s1.nfail, s0.nfail + 1);  /* the failure happened */
    assert_int_equal(ev.samples, 200);
    assert_true(ev.m >= 1 && ev.m < 200);      /* chosen again, smaller */
    assert_true(ev.test_acc > 0.3);
    bfit_run_finish(run, BFIT_OK);
    bfit_run_free(run);
}

/* ---- a device shared with another process, simulated on the CPU ------------ */

/* The CPU device with its table's info and memory query replaced: it says it
 * is shared, and reports as free what the test's co-tenant leaves. */
/* After step 10 the co-tenant takes all but 2 MiB; after step 30 it gives
 * it back. */
static void cotenant(void *ud, const bfit_step_info *s)
{
    rec_step(ud, s);
    if (s->step == 10)
        tshared_free = 2ull << 20;
    if (s->step == 30)
        tshared_free = 1ull << 30;
}

/* The run reads the device's free memory every step: the micro-batch shrinks
 * when another process takes memory, before any allocation fails, and grows
 * back when it is returned; every sample is still used once. The micro-batch
 * is fixed: an automatic one grows back only when measured faster, which a
 * loaded machine may not show. */
static void test_shared_device(void **st)
{
    bfit_train_cfg c = quick(mlp, 256, 256 * 96); /* growth waits 50 steps after a shrink */
    bfit_train_result res;
    bfit_device *dev = tshared_new(2);
    rec *r = calloc(1, sizeof *r);
    char lg[300];
    events e;
    int shrank = -1, grew = -1, device_events = 0;
    (void)st;
    tmp_path(lg, sizeof lg, "shared.jsonl");
    c.device = dev;
    c.memory = 1ull << 30;
    c.log = lg;
    rec_attach(&c, r);
    c.on_step = cotenant;
    c.micro_batch = 256;
    assert_int_equal(bfit_train_from(&c, &res), BFIT_OK);
    assert_int_equal(res.ooms, 0);                 /* shrunk before failing */
    assert_int_equal(res.samples, 256 * 96);
    for (int i = 0; i < r->nchange; i++) {
        printf("  step %lld: %s\n", (long long)r->change_step[i], r->change[i].why);
        if (r->change[i].reason == BFIT_REASON_MEM_SHRANK && shrank < 0)
            shrank = (int)r->change_step[i];
        if (r->change[i].reason == BFIT_REASON_MEM_FREED && shrank >= 0)
            grew = (int)r->change_step[i];
    }
    assert_true(shrank >= 11 && shrank <= 13);    /* the step after the next reading */
    assert_true(grew > 30);
    events_read(lg, &e);
    for (int i = 0; i < e.n; i++)
        if (!strcmp(ev_str(e.ev[i], "event"), "memory") && cJSON_GetObjectItem(e.ev[i], "source"))
            device_events++;
    assert_int_equal(device_events, 2);            /* taken, given back */
    events_free(&e);
    tshared_close(dev);
    free(r);
}

static void test_final_eval_failure_saves(void **st)
{
    char ok[300], w[300], lg[300], mid[300];
    bfit_mem_point drop[1] = {{10, MiB}};
    bfit_train_result r;
    bfit_train_cfg c = quick(mlp, 64, 640);
    bfit_st_file *f;
    int rc;
    (void)st;
    tmp_path(ok, sizeof ok, "undisturbed.safetensors");
    tmp_path(w, sizeof w, "last \"eval\" failed.safetensors");
    tmp_path(lg, sizeof lg, "last_eval.jsonl");
    tmp_path(mid, sizeof mid, "mid.safetensors");
    c.save = ok;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);

    c.save = w;
    c.log = lg;
    c.memory_schedule = drop;
    c.nmemory_schedule = 1;
    rc = bfit_train_from(&c, &r);
    assert_int_equal(rc, BFIT_ENOMEM);
    printf("  %s\n", bfit_errmsg());
    assert_string_equal(bfit_errfield(), "memory");
    assert_non_null(strstr(bfit_errmsg(), "the trained weights were saved to"));
    assert_non_null(strstr(bfit_errmsg(), w));
    assert_non_null(strstr(bfit_errmsg(), "evaluation at micro-batch 1 needs"));
    assert_int_equal(r.steps, 10);
    assert_int_equal(r.samples, 640);
    check_error_log(lg, rc, 10, "memory");
    assert_same_tensors(ok, w);
    assert_int_equal(bfit_st_read(w, &f), BFIT_OK);
    assert_string_equal(bfit_st_meta(f, "steps"), "10");
    assert_null(bfit_st_meta(f, "test_accuracy")); /* nothing was measured: nothing is claimed */
    assert_int_equal(r.evaluated, 0);
    bfit_st_free(f);
    assert_int_equal(bfit_st_read(ok, &f), BFIT_OK);
    assert_non_null(bfit_st_meta(f, "test_accuracy")); /* the undisturbed run's was measured */
    bfit_st_free(f);

    /* the same drop after epoch 1 of 2 */
    c.save = mid;
    c.epochs = 2;
    rc = bfit_train_from(&c, &r);
    assert_int_equal(rc, BFIT_ENOMEM);
    assert_null(strstr(bfit_errmsg(), "saved"));
    assert_non_null(strstr(bfit_errmsg(), "evaluation at micro-batch 1 needs"));
    assert_int_equal(r.steps, 10);
    check_error_log(lg, rc, 10, "memory");
    assert_false(file_exists(mid));
}

/* "synthetic" data is 512 samples unless they would pass 512 MiB a set,
 * then as many as fit in it, at least 8: 512 of 3x2048x2048 were 24 GiB a
 * set (a GPU run spent about 110 s making them). */
static void test_synthetic_count(void **st)
{
    (void)st;
    assert_int_equal(bfit_synthetic_count(bfit_shape_chw(1, 28, 28)), 512);
    assert_int_equal(bfit_synthetic_count(bfit_shape_chw(3, 224, 224)), 512); /* 294 MiB: ResNet-50's */
    assert_int_equal(bfit_synthetic_count(bfit_shape_chw(1, 1024, 256)), 512); /* 1 MiB each: the edge */
    assert_int_equal(bfit_synthetic_count(bfit_shape_chw(1, 1024, 257)), 510); /* 512 MiB / 1,052,672 B */
    assert_int_equal(bfit_synthetic_count(bfit_shape_chw(3, 2048, 2048)), 10);
    assert_int_equal(bfit_synthetic_count(bfit_shape_chw(3, 8192, 8192)), 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_object),
        cmocka_unit_test(test_synthetic_count),
        cmocka_unit_test(test_eval_batch_mlp),
        cmocka_unit_test(test_eval_batch_cnn),
        cmocka_unit_test(test_error_event),
        cmocka_unit_test(test_final_eval_failure_saves),
        cmocka_unit_test(test_eval_oom_recovered),
        cmocka_unit_test(test_shared_device),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
