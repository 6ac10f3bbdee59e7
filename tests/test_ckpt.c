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
#include <cmocka.h>
#include <cjson/cJSON.h>

#include "base/clock.h"
#include "data/data.h"
#include "device/device.h"
#include "tensor/safetensors.h"
#include "train/log.h"
#include "train/trainer.h"

#define MiB ((uint64_t)1 << 20)
#define NS 512 /* samples of the synthetic data set */
#define NF 16  /* features */

static char tmpdir[256], spec[300];
static bfit_dataset *train_set;

/* Four classes, each a noisy direction in 16 features. */
static int setup(void **st)
{
    float *x = malloc(sizeof *x * NS * NF);
    int32_t y[NS];
    uint64_t s = 12345;
    FILE *f;
    int rc;
    (void)st;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bfit_ckpt_XXXXXX");
    if (!x || !mkdtemp(tmpdir))
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
    snprintf(spec, sizeof spec, "%s/small.cfg", tmpdir);
    if (rc != BFIT_OK || !(f = fopen(spec, "w")))
        return -1;
    fputs("input 16\nlinear 32\nrelu\nlinear 4\n", f);
    fclose(f);
    return 0;
}

static int teardown(void **st)
{
    char cmd[300];
    (void)st;
    bfit_dataset_free(train_set);
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd);
}

static void tmp_path(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", tmpdir, name); }

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

static char *file_bytes(const char *path, long *n)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)*n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)*n, f), (size_t)*n);
    fclose(f);
    return buf;
}

static void put_bytes(const char *path, const char *b, long n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
}

/* Every tensor of two weight files the same, bit for bit (their metadata,
 * the steps and accuracy, may differ in how they were reached). */
static void assert_same_tensors(const char *pa, const char *pb)
{
    bfit_st_file *a, *b;
    assert_int_equal(bfit_st_read(pa, &a), BFIT_OK);
    assert_int_equal(bfit_st_read(pb, &b), BFIT_OK);
    assert_int_equal(bfit_st_count(a), bfit_st_count(b));
    for (int i = 0; i < bfit_st_count(a); i++) {
        const bfit_st_tensor *ta = bfit_st_get(a, i), *tb = bfit_st_find(b, ta->name);
        assert_non_null(tb);
        assert_int_equal(ta->nbytes, tb->nbytes);
        assert_memory_equal(ta->data, tb->data, ta->nbytes);
    }
    bfit_st_free(a);
    bfit_st_free(b);
}

/* The weights of the undisturbed run. */
static void reference(const char *path)
{
    bfit_train_cfg c = small_run();
    bfit_train_result r;
    c.save = path;
    assert_int_equal(bfit_train(&c, &r), BFIT_OK);
}

/* ---- a device shared with another process, simulated on the CPU ------------ */

static const bfit_device_vt *cpu_table;
static bfit_device_vt shared_table;
static uint64_t cotenant_free;     /* what the co-tenant leaves free */
static int polls, back_after;      /* memory comes back after this many readings (0: never) */
static int stop_after;             /* a stop is requested after this many readings while it is gone */
static volatile sig_atomic_t stop_flag;

static void shared_info(const bfit_device *d, bfit_device_info *out)
{
    cpu_table->info(d, out);
    out->shared = 1;
}

static int shared_memory(bfit_device *d, uint64_t *free_b, uint64_t *total)
{
    (void)d;
    if (cotenant_free < MiB && back_after && ++polls >= back_after)
        cotenant_free = 1ull << 30;
    if (cotenant_free < MiB && stop_after && ++polls >= stop_after)
        stop_flag = 1; /* as the command line's signal handler does */
    *free_b = cotenant_free;
    *total = 8ull << 30;
    return BFIT_OK;
}

/* After step 18 the co-tenant takes all the free memory. The run holds its
 * blocks (what it holds stays its capacity) until the memory schedule's
 * point at step 20, which lets them go (at the capacity it had: only the
 * release is simulated); then not even micro-batch 1 fits. */
static void cotenant(void *ud, const bfit_step_info *s)
{
    (void)ud;
    if (s->step == 18)
        cotenant_free = 0;
}

static const bfit_mem_point release[1] = {{20, 1ull << 30}};

static bfit_device *shared_device(void)
{
    bfit_device_cfg cc = bfit_device_cfg_default();
    bfit_device *dev;
    cc.threads = 1;
    assert_int_equal(bfit_device_cpu_new(&cc, &dev), BFIT_OK);
    cpu_table = dev->vt;
    shared_table = *dev->vt;
    shared_table.info = shared_info;
    shared_table.mem_info = shared_memory;
    dev->vt = &shared_table;
    cotenant_free = 1ull << 30;
    polls = 0;
    return dev;
}

static void close_shared(bfit_device *dev)
{
    dev->vt = cpu_table;
    bfit_device_free(dev);
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
    rc = bfit_train(&c, &r);
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
    cotenant_free = 1ull << 30;
    c.on_step = NULL;
    c.resume = dir;
    assert_int_equal(bfit_train(&c, &r), BFIT_OK);
    assert_non_null(strstr(r.resumed_from, "ckpt-000000000020.safetensors"));
    assert_same_tensors(ref, w);
    event_letters(lg, ev, sizeof ev);
    printf("  events after the resume: %s\n", ev);
    assert_null(strchr(ev, 'X'));  /* the log was cut back to the checkpoint: one run */
    assert_int_equal(ev[strlen(ev) - 1], 'E');
    close_shared(dev);
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
    assert_int_equal(bfit_train(&c, &r), BFIT_OK);
    back_after = 0;
    event_letters(lg, ev, sizeof ev);
    printf("  events: %s\n", ev);
    assert_non_null(strchr(ev, 'W'));            /* waited, */
    assert_non_null(strchr(strchr(ev, 'W'), 'B')); /* then the memory was back */
    assert_null(strchr(ev, 'X'));
    assert_int_equal(r.steps, 4 * NS / 32);
    assert_same_tensors(ref, w);
    close_shared(dev);
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
    rc = bfit_train(&c, &r);
    stop_after = 0;
    printf("  %s (%.2f s)\n", bfit_errmsg(), bfit_clock_mono() - t0);
    assert_int_equal(rc, BFIT_ESTOPPED);
    assert_true(bfit_clock_mono() - t0 < 60);      /* not the 600 s of waiting */
    assert_int_equal(r.stopped, BFIT_ESTOPPED);
    assert_int_equal(r.steps, 20);
    assert_non_null(strstr(bfit_errmsg(), "stopped on request while waiting for memory in step 21"));
    assert_non_null(strstr(r.checkpoint, "ckpt-000000000020.safetensors"));

    cotenant_free = 1ull << 30;
    stop_flag = 0;
    c.on_step = NULL;
    c.resume = dir;
    assert_int_equal(bfit_train(&c, &r), BFIT_OK);
    assert_same_tensors(ref, w);
    close_shared(dev);
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
    rc = bfit_train(&c, &r);
    if (rc == BFIT_OK)
        fail_msg("%s at byte %ld: the damaged checkpoint was resumed from", what, at);
    if (!strstr(bfit_errmsg(), path))
        fail_msg("%s at byte %ld: the error does not name the file: %s", what, at, bfit_errmsg());
    assert_int_equal(r.steps, 0);
    assert_false(fopen(save, "rb") != NULL);
    return rc;
}

/* A checkpoint of the small run, its bytes and its header's length. */
static char *a_checkpoint(char *path, size_t n, long *len, long *header)
{
    char dir[300];
    bfit_train_cfg c = small_run();
    bfit_train_result r;
    char *b;
    tmp_path(dir, sizeof dir, "damaged");
    c.checkpoint = dir;
    c.max_steps = 5;
    assert_int_equal(bfit_train(&c, &r), BFIT_OK);
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
    char *b = a_checkpoint(path, sizeof path, &len, &header);
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
    char *b = a_checkpoint(path, sizeof path, &len, &header);
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
        cmocka_unit_test(test_stop_while_waiting),
        cmocka_unit_test(test_every_byte_flip_refused),
        cmocka_unit_test(test_every_truncation_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
