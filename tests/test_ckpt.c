/* test_ckpt.c - checkpoints through the library: memory that goes away on a
 * device shared with another process (waited for, then a checkpoint and
 * BFIT_ENOMEM saying what was missing; or memory that comes back in time),
 * and damaged checkpoints: every single-byte change of a checkpoint's header
 * and of sampled bytes of its tensors, and every truncation, is refused
 * naming the file, and a resume from it never starts. The command line's
 * side (real processes killed and resumed) is tests/cli/ckpt_*.sh. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "internal.h"
#include <cjson/cJSON.h>

#include "base/clock.h"
#include "data/data.h"
#include "device/device.h"
#include "tensor/safetensors.h"
#include "train/log.h"
#include "train/trainer.h"
#include "tfiles.h"
#include "tshared.h"

#define MiB ((uint64_t)1 << 20)
#define NS 512 /* samples of the synthetic data set */
#define NF 16  /* features */

static char spec[300];
static bfit_dataset *train_set;

/* Four classes, each a noisy direction in 16 features. */
static int setup(void **st)
{
    float *x = malloc(sizeof *x * NS * NF);
    int32_t y[NS];
    uint64_t s = 12345;
    int rc;
    (void)st;
    if (!x || tmp_setup("ckpt") != 0)
        return -1;
    for (int i = 0; i < NS; i++) {
        y[i] = i % 4;
        for (int j = 0; j < NF; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[i * NF + j] = (float)((s >> 40) % 1000) / 1000.0f - 0.5f + (j % 4 == y[i] ? 1.0f : 0.0f);
        }
    }
    rc = bfit_dataset_from_floats(bfit_shape_vec(NF), NS, 4, x, y, &train_set);
    free(x);
    if (rc != BFIT_OK)
        return -1;
    tmp_path(spec, sizeof spec, "small.cfg");
    put_text(spec, "input 16\nlinear 32\nrelu\nlinear 4\n");
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    bfit_dataset_free(train_set);
    return tmp_teardown();
}

/* 4 epochs of 512 samples in steps of 32, at a fixed micro-batch (no
 * decision on measured time), one thread. */
static bfit_train_cfg small_run(void)
{
    bfit_train_cfg c = bfit_train_cfg_default();
    c.device_name = "cpu"; /* the CPU is meant: --device auto could take a GPU */
    c.model = spec;
    c.train_set = train_set;
    c.test_set = train_set;
    c.batch = 32;
    c.micro_batch = 32;
    c.epochs = 4;
    c.threads = 1;
    c.prefetch = 0;
    c.lr = 0.1;
    return c;
}

/* The weights of the undisturbed run. */
static void reference(const char *path)
{
    bfit_train_cfg c = small_run();
    bfit_train_result r;
    c.save = path;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
}

/* ---- a device shared with another process, simulated on the CPU ------------ */

static int polls, back_after;      /* memory comes back after this many readings (0: never) */
static int stop_after;             /* a stop is requested after this many readings while it is gone */
static volatile sig_atomic_t stop_flag;

static void cotenant_polled(void)
{
    if (tshared_free < MiB && back_after && ++polls >= back_after)
        tshared_free = 1ull << 30;
    if (tshared_free < MiB && stop_after && ++polls >= stop_after)
        stop_flag = 1; /* as the command line's signal handler does */
}

/* After step 18 the co-tenant takes all the free memory. The run holds its
 * blocks (what it holds stays its capacity) until the memory schedule's
 * point at step 20, which lets them go (at the capacity it had: only the
 * release is simulated); then not even micro-batch 1 fits. */
static void cotenant(void *ud, const bfit_step_info *s)
{
    (void)ud;
    if (s->step == 18)
        tshared_free = 0;
}

static const bfit_mem_point release[1] = {{20, 1ull << 30}};

static bfit_device *shared_device(void)
{
    bfit_device *dev = tshared_new(1);
    tshared_on_read = cotenant_polled;
    polls = 0;
    return dev;
}

/* The names of the events of a log, in order, one letter each. */
static void event_letters(const char *path, char *out, size_t n)
{
    long len;
    char *b = file_bytes(path, &len), *line = b;
    size_t k = 0;
    b[len] = '\0';
    while (line && *line && k + 1 < n) {
        cJSON *e = cJSON_Parse(line), *v = cJSON_GetObjectItemCaseSensitive(e, "event");
        const char *name = cJSON_IsString(v) ? v->valuestring : "?";
        out[k++] = !strcmp(name, "memory_wait") ? 'W' : !strcmp(name, "memory_back") ? 'B'
                 : !strcmp(name, "checkpoint") ? 'C' : !strcmp(name, "error") ? 'X'
                 : !strcmp(name, "resume") ? 'R' : !strcmp(name, "end") ? 'E'
                 : !strcmp(name, "memory") ? 'M' : !strcmp(name, "batch_change") ? 'b' : '.';
        cJSON_Delete(e);
        line = strchr(line, '\n');
        line = line ? line + 1 : NULL;
    }
    out[k] = '\0';
    free(b);
}

/* Memory below micro-batch 1 that does not come back: the run waits
 * wait_for_memory, writes a checkpoint of its last step boundary and fails
 * with BFIT_ENOMEM saying how much was missing, how long it waited and
 * where the state is; the log says it waited and ends with the error. The
 * resumed run (the co-tenant gone) ends with the undisturbed run's weights. */
static void test_wait_then_checkpoint(void **st)
{
    char ref[300], w[300], dir[300], lg[300], ev[512];
    bfit_device *dev = shared_device();
    bfit_train_cfg c = small_run();
    bfit_train_result r;
    double t0;
    int rc;
    (void)st;
    tmp_path(ref, sizeof ref, "ref.st");
    tmp_path(w, sizeof w, "waited.st");
    tmp_path(dir, sizeof dir, "waited");
    tmp_path(lg, sizeof lg, "waited.jsonl");
    reference(ref);

    c.device = dev;
    c.memory = 1ull << 30;
    c.on_step = cotenant;
    c.memory_schedule = release;
    c.nmemory_schedule = 1;
    c.checkpoint = dir;
    c.checkpoint_steps = 1000;
    c.wait_for_memory = 0.6;
    c.save = w;
    c.log = lg;
    t0 = bfit_clock_mono();
    rc = bfit_train_from(&c, &r);
    printf("  %s (%.2f s)\n", bfit_errmsg(), bfit_clock_mono() - t0);
    assert_int_equal(rc, BFIT_ENOMEM);
    assert_true(bfit_clock_mono() - t0 >= 0.6);
    assert_int_equal(r.stopped, BFIT_ENOMEM);
    assert_true(r.missing > 0);
    assert_int_equal(r.steps, 20);
    assert_string_equal(bfit_errfield(), "memory");
    assert_non_null(strstr(bfit_errmsg(), "not even micro-batch 1 fits at step 21"));
    assert_non_null(strstr(bfit_errmsg(), "is missing; waited"));
    assert_non_null(strstr(bfit_errmsg(), "the run's state at step 20 is in"));
    assert_non_null(strstr(r.checkpoint, "ckpt-000000000020.safetensors"));
    assert_false(fopen(w, "rb") != NULL); /* an unfinished run saves no weights */
    event_letters(lg, ev, sizeof ev);
    printf("  events: %s\n", ev);
    assert_non_null(strstr(ev, "WCX"));
    assert_int_equal(ev[strlen(ev) - 1], 'X');

    /* the co-tenant has gone: the same run, from the checkpoint */
    tshared_free = 1ull << 30;
    c.on_step = NULL;
    c.resume = dir;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
    assert_non_null(strstr(r.resumed_from, "ckpt-000000000020.safetensors"));
    assert_same_tensors(ref, w);
    event_letters(lg, ev, sizeof ev);
    printf("  events after the resume: %s\n", ev);
    assert_null(strchr(ev, 'X'));  /* the log was cut back to the checkpoint: one run */
    assert_int_equal(ev[strlen(ev) - 1], 'E');
    tshared_close(dev);
}

/* Memory that comes back while the run waits: it goes on, logs how long it
 * waited, and ends as the undisturbed run does, bit for bit. */
static void test_memory_comes_back(void **st)
{
    char ref[300], w[300], lg[300], ev[512];
    bfit_device *dev = shared_device();
    bfit_train_cfg c = small_run();
    bfit_train_result r;
    (void)st;
    tmp_path(ref, sizeof ref, "ref2.st");
    tmp_path(w, sizeof w, "back.st");
    tmp_path(lg, sizeof lg, "back.jsonl");
    reference(ref);
    back_after = 4;
    c.device = dev;
    c.memory = 1ull << 30;
    c.on_step = cotenant;
    c.memory_schedule = release;
    c.nmemory_schedule = 1;
    c.wait_for_memory = 60;
    c.save = w;
    c.log = lg;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
    back_after = 0;
    event_letters(lg, ev, sizeof ev);
    printf("  events: %s\n", ev);
    assert_non_null(strchr(ev, 'W'));            /* waited, */
    assert_non_null(strchr(strchr(ev, 'W'), 'B')); /* then the memory was back */
    assert_null(strchr(ev, 'X'));
    assert_int_equal(r.steps, 4 * NS / 32);
    assert_same_tensors(ref, w);
    tshared_close(dev);
}

/* Another process holds the shared device's memory when the run starts
 * (no --memory: the capacity is what is free, the ceiling all the device
 * has): it waits for it (W, then B before the first step), its capacity
 * grows with what comes back, and it ends as the undisturbed run does. Not
 * back within the wait, or with no wait: refused at the start, saying what
 * other processes hold, nothing saved; the log ends with the error. */
static void test_wait_to_start(void **st)
{
    char ref[300], w[300], lg[300], ev[512];
    bfit_device *dev = shared_device();
    bfit_train_cfg c = small_run();
    bfit_train_result r;
    double t0;
    FILE *f;
    (void)st;
    tmp_path(ref, sizeof ref, "ref3.st");
    tmp_path(w, sizeof w, "start.st");
    tmp_path(lg, sizeof lg, "start.jsonl");
    reference(ref);
    c.device = dev;
    c.wait_for_memory = 60;
    c.save = w;
    c.log = lg;
    tshared_free = 4096; /* micro-batch 1 needs more */
    polls = 0;
    back_after = 4; /* read at the device's opening, the set-up's watch, then twice in the wait */
    assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
    back_after = 0;
    event_letters(lg, ev, sizeof ev);
    printf("  events: %s\n", ev);
    assert_memory_equal(ev, "WMB", 3); /* waited, the capacity grew past the start's, back */
    assert_null(strchr(ev, 'X'));
    assert_int_equal(r.steps, 4 * NS / 32);
    assert_same_tensors(ref, w);
    remove(w);

    tshared_free = 4096; /* it does not come back */
    c.wait_for_memory = 0.3;
    t0 = bfit_clock_mono();
    assert_int_equal(bfit_train_from(&c, &r), BFIT_ENOMEM);
    printf("  %s (%.2f s)\n", bfit_errmsg(), bfit_clock_mono() - t0);
    assert_true(bfit_clock_mono() - t0 >= 0.3);
    assert_string_equal(bfit_errfield(), "wait_for_memory");
    assert_non_null(strstr(bfit_errmsg(), "other processes hold the rest (4.00 KiB free of 8.00 GiB); waited"));
    assert_int_equal(r.steps, 0);
    assert_null(f = fopen(w, "rb"));
    event_letters(lg, ev, sizeof ev);
    assert_string_equal(ev, "WX");

    c.wait_for_memory = 0;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_ENOMEM);
    printf("  %s\n", bfit_errmsg());
    assert_non_null(strstr(bfit_errmsg(), "free of 8.00 GiB): --wait-for-memory waits for them"));
    event_letters(lg, ev, sizeof ev);
    assert_string_equal(ev, "X");
    tshared_close(dev);
}

/* A stop requested while the run waits for memory: the wait ends at once,
 * the step is abandoned, a checkpoint of its start is written and the run
 * returns BFIT_ESTOPPED; resumed, it ends as the undisturbed run does. */
static void test_stop_while_waiting(void **st)
{
    char ref[300], w[300], dir[300];
    bfit_device *dev = shared_device();
    bfit_train_cfg c = small_run();
    bfit_train_result r;
    double t0;
    int rc;
    (void)st;
    tmp_path(ref, sizeof ref, "ref3.st");
    tmp_path(w, sizeof w, "stopped.st");
    tmp_path(dir, sizeof dir, "stopped");
    reference(ref);
    stop_after = 3;
    stop_flag = 0;
    c.device = dev;
    c.memory = 1ull << 30;
    c.on_step = cotenant;
    c.memory_schedule = release;
    c.nmemory_schedule = 1;
    c.wait_for_memory = 600;
    c.stop = &stop_flag;
    c.checkpoint = dir;
    c.save = w;
    t0 = bfit_clock_mono();
    rc = bfit_train_from(&c, &r);
    stop_after = 0;
    printf("  %s (%.2f s)\n", bfit_errmsg(), bfit_clock_mono() - t0);
    assert_int_equal(rc, BFIT_ESTOPPED);
    assert_true(bfit_clock_mono() - t0 < 60);      /* not the 600 s of waiting */
    assert_int_equal(r.stopped, BFIT_ESTOPPED);
    assert_int_equal(r.steps, 20);
    assert_non_null(strstr(bfit_errmsg(), "stopped on request while waiting for memory in step 21"));
    assert_non_null(strstr(r.checkpoint, "ckpt-000000000020.safetensors"));

    tshared_free = 1ull << 30;
    stop_flag = 0;
    c.on_step = NULL;
    c.resume = dir;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
    assert_same_tensors(ref, w);
    tshared_close(dev);
}

/* ---- what a resumed run reports, and checkpoints of older versions ------------ */

#define FIXTURES "tests/fixtures/old_ckpt" /* under BFIT_SOURCE_DIR; written by an older batchfit */

static void fixture_path(char *buf, size_t n, const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, FIXTURES "/%s", name);
    src_path(buf, n, rel);
}

/* The token-budget run of the fixtures (tok.cfg over lines.txt, variable
 * lengths, dynamic loss scaling), to the end, a checkpoint every 5 steps. */
static bfit_train_cfg token_run(char *model, char *data, size_t n)
{
    bfit_train_cfg c = bfit_train_cfg_default();
    fixture_path(model, n, "tok.cfg");
    fixture_path(data, n, "lines.txt");
    c.model = model;
    c.data = data;
    c.seq_max = 16;
    c.batch_tokens = 1;
    c.batch = 100;
    c.opt = bfit_optim_cfg_default(BFIT_OPT_ADAMW);
    c.lr = 3e-3;
    c.loss_scale = BFIT_LOSS_SCALE_DYNAMIC;
    c.epochs = 2;
    c.epoch_samples = 200;
    c.eval_samples = 40;
    c.threads = 1;
    c.prefetch = 0;
    c.device_name = "cpu";
    c.checkpoint_steps = 5;
    c.checkpoint_keep = 100;
    return c;
}

/* A resumed run's result counts the whole run, as the uninterrupted one's
 * does: the tokens trained on and computed (a checkpoint keeps them), the
 * loss scale and the steps it skipped (its loss scaler's); resumed from
 * the middle or from the end, where nothing is left to train. */
static void test_resume_keeps_totals(void **st)
{
    char model[4096], data[4096], dir[300], dir2[300], from[4200], save[300];
    bfit_train_cfg c = token_run(model, data, sizeof model);
    bfit_train_result a, b;
    (void)st;
    tmp_path(dir, sizeof dir, "totals");
    tmp_path(dir2, sizeof dir2, "totals_resumed");
    c.checkpoint = dir;
    assert_int_equal(bfit_train_from(&c, &a), BFIT_OK);
    printf("  %lld steps, %lld tokens of %lld computed, loss scale %g\n", (long long)a.steps, (long long)a.tokens,
           (long long)a.tokens_computed, a.loss_scale);
    assert_true(a.steps > 20 && a.tokens > 0 && a.tokens_computed > a.tokens && a.loss_scale > 0);
    for (int i = 0; i < 2; i++) {
        snprintf(from, sizeof from, "%s/ckpt-%012lld.safetensors", dir, i ? (long long)a.steps : 20LL);
        tmp_path(save, sizeof save, "totals.st");
        c = token_run(model, data, sizeof model);
        c.resume = from;
        c.checkpoint = dir2;
        c.save = save;
        assert_int_equal(bfit_train_from(&c, &b), BFIT_OK);
        assert_int_equal(b.steps, a.steps);
        assert_int_equal(b.samples, a.samples);
        assert_int_equal(b.tokens, a.tokens);
        assert_int_equal(b.tokens_computed, a.tokens_computed);
        assert_true(b.loss_scale == a.loss_scale);
        assert_int_equal(b.skipped_steps, a.skipped_steps);
        if (b.test_loss != a.test_loss)
            fail_msg("resumed at step %s: test loss %.17g, not %.17g", i ? "end" : "20", b.test_loss, a.test_loss);
    }
}

/* Every key of checkpoint state (or configuration) `old` is in `new` with
 * the same value, but those in skip (dotted paths). */
static void assert_json_kept(const cJSON *old, const cJSON *new, const char *at, const char *const *skip)
{
    char path[256];
    const cJSON *o;
    cJSON_ArrayForEach(o, old) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(new, o->string);
        int skipped = 0;
        snprintf(path, sizeof path, "%s%s", at, o->string);
        for (int i = 0; skip[i]; i++)
            skipped |= !strcmp(skip[i], path);
        if (skipped)
            continue;
        if (!n)
            fail_msg("\"%s\" is not written back", path);
        if (cJSON_IsObject(o)) {
            strcat(path, ".");
            assert_json_kept(o, n, path, skip);
        } else if (cJSON_IsArray(o) && cJSON_IsArray(n) && cJSON_GetArraySize(o) == cJSON_GetArraySize(n) &&
                   cJSON_IsObject(cJSON_GetArrayItem(o, 0))) {
            /* records may gain fields (a newer batchfit keeps more): each old one keeps its own */
            for (int i = 0; i < cJSON_GetArraySize(o); i++) {
                char at_i[300];
                snprintf(at_i, sizeof at_i, "%s[%d].", path, i);
                assert_json_kept(cJSON_GetArrayItem(o, i), cJSON_GetArrayItem(n, i), at_i, skip);
            }
        } else if (!cJSON_Compare(o, n, 1)) {
            char *x = cJSON_PrintUnformatted(o), *y = cJSON_PrintUnformatted(n);
            fail_msg("\"%s\" was %s, is written back as %s", path, x, y);
        }
    }
}

static cJSON *meta_json(const bfit_st_file *f, const char *key)
{
    cJSON *j = cJSON_Parse(bfit_st_meta(f, key));
    assert_non_null(j);
    return j;
}

/* A checkpoint an older batchfit wrote (tests/fixtures/old_ckpt, from its
 * directory: the paths in it are relative) resumes: its state and
 * configuration read back and, written at once as a checkpoint again, are
 * the same (but for the outputs this test gives and the result's later
 * fields; the lr schedule's position, added later, is its samples); its tensors come back bit for bit; the run then trains to its
 * end. */
static void old_checkpoint(const char *name, int64_t samples)
{
    static const char *const skip_state[] = {"log_bytes", NULL};
    static const char *const skip_cfg[] = {"save", "log", "checkpoint", "device", NULL};
    char dir[300], save[300], lg[300], from[4200], to[4200], cwd[4096];
    bfit_train_cfg c = bfit_train_cfg_default();
    bfit_train_result res;
    bfit_st_file *fa, *fb;
    bfit_run *r;
    cJSON *ja, *jb;

    fixture_path(from, sizeof from, "");
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(from), 0);
    snprintf(from, sizeof from, "%s", name);
    tmp_path(dir, sizeof dir, "old_ckpt");
    tmp_path(save, sizeof save, "old_ckpt.st");
    tmp_path(lg, sizeof lg, "old_ckpt.jsonl");
    c.resume = from;
    c.checkpoint = dir; /* the outputs are this test's, not the fixture's */
    c.save = save;
    c.log = lg;
    c.device_name = "cpu";
    if (bfit_run_new_from(&c, &r) != BFIT_OK)
        fail_msg("%s: %s", name, bfit_errmsg());
    assert_int_equal(bfit_run_checkpoint(r, to, sizeof to), BFIT_OK);
    assert_int_equal(bfit_st_read(from, &fa), BFIT_OK);
    assert_int_equal(bfit_st_read(to, &fb), BFIT_OK);
    ja = meta_json(fa, "batchfit.state");
    jb = meta_json(fb, "batchfit.state");
    assert_json_kept(ja, jb, "", skip_state);
    /* older: no schedule position, which an auto run's samples stand in for */
    assert_null(cJSON_GetObjectItemCaseSensitive(ja, "sched_units"));
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(jb, "sched_units")->valuestring,
                        cJSON_GetObjectItemCaseSensitive(ja, "samples")->valuestring);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    ja = meta_json(fa, "batchfit.config");
    jb = meta_json(fb, "batchfit.config");
    assert_json_kept(ja, jb, "", skip_cfg);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    bfit_st_free(fa);
    bfit_st_free(fb);
    assert_same_tensors(from, to);
    while (!bfit_run_done(r))
        if (bfit_run_step(r, NULL) != BFIT_OK)
            fail_msg("%s: %s", name, bfit_errmsg());
    bfit_run_result_get(r, &res);
    bfit_run_free(r);
    assert_int_equal(chdir(cwd), 0);
    printf("  %s: resumed, trained to step %lld, %lld samples\n", name, (long long)res.steps, (long long)res.samples);
    assert_int_equal(res.samples, samples);
}

static void test_old_checkpoints_resume(void **st)
{
    (void)st;
    old_checkpoint("auto/ckpt-000000000060.safetensors", 8 * 256);
    old_checkpoint("tok/ckpt-000000000040.safetensors", 2 * 200);
}

/* A checkpoint of a run on a token file alone from before token files had
 * parts (tests/fixtures/old_ckpt/bin: trained on all of tokens.bin, and
 * tested on it) resumes as that run ran, on all 5,624 windows of 16 an
 * epoch, not the train part's 5,368: its configuration lacks tokens_split,
 * which such a run had 0 (was refused: "a run with 5624 samples per epoch,
 * this data gives 5368: not the data it trained on"). A new run on the
 * file trains on its train part. */
static void test_old_token_file_checkpoint(void **st)
{
    char cwd[4096], from[4200], model[4200], save[300];
    int32_t *ids = malloc(sizeof *ids * 90000);
    bfit_train_cfg c = bfit_train_cfg_default();
    bfit_train_result res;
    long n;
    char *b;
    (void)st;
    assert_non_null(ids);
    for (int i = 0; i < 90000; i++) /* the README's tokens.bin */
        ids[i] = i * 7 % 256;
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(tmpdir), 0); /* the checkpoint's paths are relative */
    assert_int_equal(bfit_tokens_write("tokens.bin", ids, 90000, 256), BFIT_OK);
    free(ids);
    fixture_path(model, sizeof model, "tok.cfg");
    b = file_bytes(model, &n);
    put_bytes("tok.cfg", b, n);
    free(b);
    fixture_path(from, sizeof from, "bin/ckpt-000000000020.safetensors");
    tmp_path(save, sizeof save, "bin.st");
    c.resume = from;
    c.save = save;
    c.device_name = "cpu";
    if (bfit_train_from(&c, &res) != BFIT_OK)
        fail_msg("resuming %s: %s", from, bfit_errmsg());
    assert_int_equal(res.steps, 88);
    assert_int_equal(res.samples, 5624);
    c = bfit_train_cfg_default();
    c.model = "tok.cfg";
    c.data = "tokens.bin";
    c.batch = 64;
    c.eval_samples = 40;
    c.threads = 1;
    c.device_name = "cpu";
    assert_int_equal(bfit_train_from(&c, &res), BFIT_OK);
    assert_int_equal(res.samples, 5368);
    assert_int_equal(chdir(cwd), 0);
}

/* ---- damaged checkpoints ------------------------------------------------------- */

/* A resume from path must fail before the run starts, naming the file. */
static int refused(const char *path, const char *what, long at)
{
    bfit_train_cfg c = small_run();
    bfit_train_result r;
    char save[300];
    int rc;
    tmp_path(save, sizeof save, "never.st");
    c.resume = path;
    c.save = save;
    rc = bfit_train_from(&c, &r);
    if (rc == BFIT_OK)
        fail_msg("%s at byte %ld: the damaged checkpoint was resumed from", what, at);
    if (!strstr(bfit_errmsg(), path))
        fail_msg("%s at byte %ld: the error does not name the file: %s", what, at, bfit_errmsg());
    assert_int_equal(r.steps, 0);
    assert_false(fopen(save, "rb") != NULL);
    return rc;
}

/* A checkpoint of the small run in a new directory name, its bytes and its
 * header's length. */
static char *a_checkpoint(const char *name, char *path, size_t n, long *len, long *header)
{
    char dir[300];
    bfit_train_cfg c = small_run();
    bfit_train_result r;
    char *b;
    tmp_path(dir, sizeof dir, name);
    c.checkpoint = dir;
    c.max_steps = 5;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
    snprintf(path, n, "%s", r.checkpoint);
    b = file_bytes(path, len);
    memcpy(header, b, sizeof *header); /* little-endian u64, small */
    *header += 8;
    return b;
}

/* Every byte of the header changed (inverted) in turn, and 400 bytes of the
 * tensors: each damaged file is refused; the damage is found by the JSON
 * parser, the layout checks, a tensor's checksum or the metadata's. */
static void test_every_byte_flip_refused(void **st)
{
    char path[4200], bad[300];
    long len, header, n = 0;
    char *b = a_checkpoint("flip_from", path, sizeof path, &len, &header);
    uint64_t s = 99;
    (void)st;
    tmp_path(bad, sizeof bad, "flipped.safetensors");
    printf("  %ld bytes, header %ld\n", len, header);
    for (long i = 0; i < len; i++) {
        if (i >= header) { /* a sample of the tensors' bytes */
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            if ((s >> 33) % (uint64_t)(len - header) >= 400)
                continue;
        }
        b[i] = (char)~b[i];
        put_bytes(bad, b, len);
        refused(bad, "a changed byte", i);
        b[i] = (char)~b[i];
        n++;
    }
    printf("  %ld damaged files refused\n", n);
    free(b);
}

/* Every length of the header and then every 997th: a truncated checkpoint
 * is refused. */
static void test_every_truncation_refused(void **st)
{
    char path[4200], bad[300];
    long len, header, n = 0;
    char *b = a_checkpoint("truncate_from", path, sizeof path, &len, &header);
    (void)st;
    tmp_path(bad, sizeof bad, "truncated.safetensors");
    for (long cut = 0; cut < len; cut += cut < header + 64 ? 1 : 997) {
        put_bytes(bad, b, cut);
        refused(bad, "truncated", cut);
        n++;
    }
    printf("  %ld truncations refused\n", n);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wait_then_checkpoint),
        cmocka_unit_test(test_memory_comes_back),
        cmocka_unit_test(test_wait_to_start),
        cmocka_unit_test(test_stop_while_waiting),
        cmocka_unit_test(test_resume_keeps_totals),
        cmocka_unit_test(test_old_checkpoints_resume),
        cmocka_unit_test(test_old_token_file_checkpoint),
        cmocka_unit_test(test_every_byte_flip_refused),
        cmocka_unit_test(test_every_truncation_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
