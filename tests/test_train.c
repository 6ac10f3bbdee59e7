/* test_train.c - training end to end on Fashion-MNIST (short runs): a
 * modest accuracy bar, bit-identical weights for the same seed, the saved
 * file's contents, and the loss normalised by the optimizer step's samples. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "internal.h"

#include "tensor/safetensors.h"
#include "train/trainer.h"
#include "tfiles.h"
#include "trun.h"

static char mlp[512], cnn[512];

static int setup(void **st)
{
    (void)st;
    src_path(mlp, sizeof mlp, "models/mlp.cfg");
    src_path(cnn, sizeof cnn, "models/cnn.cfg");
    return tmp_setup("train");
}

static int teardown(void **st)
{
    (void)st;
    return tmp_teardown();
}

static bfit_train_cfg quick(const char *model, int64_t samples)
{
    bfit_train_cfg c = trun_cfg(model, 64, samples, 2000);
    c.data = "fashion-mnist";
    c.epochs = 1;
    c.lr = 0.05;
    return c;
}

/* A few seconds of real training must learn: chance is 10%; the MLP reaches
 * about 80% on 2000 test samples after 6000 training samples, so 70% is a bar
 * that a broken gradient, optimizer or data path cannot clear. */
static void test_short_training_learns(void **st)
{
    bfit_train_cfg c = quick(mlp, 6000);
    bfit_train_result r;
    (void)st;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
    printf("  mlp, 6000 samples: test accuracy %.4f, loss %.4f\n", r.test_acc, r.test_loss);
    assert_int_equal(r.samples, 6000);
    assert_int_equal(r.steps, (6000 + 63) / 64);
    assert_true(r.test_acc > 0.70);
    assert_true(r.test_loss < 1.0);
}

static void test_cnn_short_training_learns(void **st)
{
    bfit_train_cfg c = quick(cnn, 4000);
    bfit_train_result r;
    (void)st;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
    printf("  cnn, 4000 samples: test accuracy %.4f, loss %.4f\n", r.test_acc, r.test_loss);
    assert_true(r.test_acc > 0.65);
}

/* Same seed, same machine: the same bits. A different seed: different
 * weights (so the comparison can fail). Augmentation and prefetch on, so
 * their determinism is covered too. */
static void test_reproducible(void **st)
{
    char a[300], b[300], c3[300], *ba = NULL, *bb = NULL, *bc = NULL;
    long na, nb, nc;
    bfit_train_result r;
    bfit_train_cfg c = quick(mlp, 1280);
    (void)st;
    c.augment = 1;
    c.eval_samples = 100;
    snprintf(a, sizeof a, "%s/a.safetensors", tmpdir);
    snprintf(b, sizeof b, "%s/b.safetensors", tmpdir);
    snprintf(c3, sizeof c3, "%s/c.safetensors", tmpdir);
    c.save = a;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
    c.save = b;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
    c.save = c3;
    c.seed = 2;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
    ba = file_bytes(a, &na);
    bb = file_bytes(b, &nb);
    bc = file_bytes(c3, &nc);
    assert_int_equal(na, nb);
    assert_memory_equal(ba, bb, (size_t)na);
    assert_int_equal(na, nc);
    assert_true(memcmp(ba, bc, (size_t)na) != 0);
    free(ba);
    free(bb);
    free(bc);
}

/* The saved file holds every parameter under "<node>.<name>" with PyTorch's
 * shapes, and the metadata says what it is. */
static void test_saved_file(void **st)
{
    char path[300];
    bfit_train_result r;
    bfit_st_file *f;
    const bfit_st_tensor *t;
    bfit_train_cfg c = quick(mlp, 640);
    (void)st;
    c.eval_samples = 100;
    snprintf(path, sizeof path, "%s/w.safetensors", tmpdir);
    c.save = path;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_OK);
    assert_int_equal(bfit_st_read(path, &f), BFIT_OK);
    assert_int_equal(bfit_st_count(f), 6);
    t = bfit_st_find(f, "1.weight");
    assert_non_null(t);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 1024);
    assert_int_equal(t->shape[1], 784);
    t = bfit_st_find(f, "5.bias");
    assert_non_null(t);
    assert_int_equal(t->shape[0], 10);
    assert_string_equal(bfit_st_meta(f, "format"), "batchfit");
    assert_string_equal(bfit_st_meta(f, "steps"), "10");
    bfit_st_free(f);
}

/* The message of a configuration error starts with the field it is about,
 * and bfit_errfield() names that field for front ends (the CLI maps it to
 * its option). */
static void expect_field(const char *field, const char *substance)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s: ", field);
    assert_string_equal(bfit_errfield(), field);
    if (strncmp(bfit_errmsg(), prefix, strlen(prefix)) != 0)
        fail_msg("message does not start with '%s': %s", prefix, bfit_errmsg());
    if (!strstr(bfit_errmsg(), substance))
        fail_msg("message lacks '%s': %s", substance, bfit_errmsg());
    /* the library's messages no longer name CLI flags */
    assert_null(strstr(bfit_errmsg(), "--"));
}

static void test_bad_config(void **st)
{
    bfit_train_result r;
    bfit_train_cfg c = quick(mlp, 640);
    (void)st;
    c.batch = 0;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_EINVAL);
    expect_field("batch", "must be at least 1, got 0");
    c = quick(mlp, 640);
    c.lr = -1;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_EINVAL);
    expect_field("lr", "must be a positive number, got -1");
    c = quick(mlp, 640);
    c.epochs = 0;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_EINVAL);
    expect_field("epochs", "must be at least 1, got 0");
    c = quick(mlp, 640);
    c.margin = 1;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_EINVAL);
    expect_field("margin", "must be in [0, 1), got 1");
    c = quick(mlp, 640);
    c.save = "/nonexistent-dir/w.safetensors";
    assert_int_equal(bfit_train_from(&c, &r), BFIT_EIO);
    expect_field("save", "cannot write into directory '/nonexistent-dir'");
    /* the optimizer's settings are checked with the rest, before anything
     * is set up (no log written), also when weights are to be saved */
    {
        char w[300], lg[300];
        FILE *f;
        snprintf(w, sizeof w, "%s/never.safetensors", tmpdir);
        snprintf(lg, sizeof lg, "%s/never.jsonl", tmpdir);
        c = quick(mlp, 640);
        c.opt.momentum = -1;
        c.save = w;
        c.log = lg;
        assert_int_equal(bfit_train_from(&c, &r), BFIT_EINVAL);
        assert_non_null(strstr(bfit_errmsg(), "momentum -1 must be finite and >= 0"));
        f = fopen(lg, "r");
        assert_null(f);
        f = fopen(w, "r");
        assert_null(f);
    }
    c = quick("/nonexistent/model.cfg", 640);
    assert_int_equal(bfit_train_from(&c, &r), BFIT_EIO);
    assert_non_null(strstr(bfit_errmsg(), "/nonexistent/model.cfg"));
    c = quick(mlp, 640);
    c.data = "/nonexistent-data-dir";
    assert_true(bfit_train_from(&c, &r) != BFIT_OK);
    assert_non_null(strstr(bfit_errmsg(), "/nonexistent-data-dir"));
    /* a capacity below the parameters alone: a clear out-of-memory about
     * the memory setting, no crash */
    c = quick(mlp, 640);
    c.memory = 1 << 20;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_ENOMEM);
    expect_field("memory", "even at micro-batch 1");
    /* room in the memory, none in its margin: the margin is named */
    c.memory = 64 << 20;
    c.margin = 0.9;
    assert_int_equal(bfit_train_from(&c, &r), BFIT_ENOMEM);
    expect_field("margin", "a margin of at most 0.");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_short_training_learns),
        cmocka_unit_test(test_cnn_short_training_learns),
        cmocka_unit_test(test_reproducible),
        cmocka_unit_test(test_saved_file),
        cmocka_unit_test(test_bad_config),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
