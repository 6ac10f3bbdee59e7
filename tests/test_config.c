/* test_config.c - the public configuration: options set by name (the
 * command line's, '-' or '_'), every value parsed once with errors that
 * name the option, read back, copied, checked per command; defaults owned
 * by the library (an embedder's auto-mode run with nothing else set); the
 * result object read by path. Public API only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <batchfit.h>
#include <math.h>

#include "tfiles.h"

static bfit_config *cfg(void)
{
    bfit_config *c = bfit_config_new();
    assert_non_null(c);
    return c;
}

static void get_is(const bfit_config *c, const char *name, const char *want)
{
    char b[128];
    assert_int_equal(bfit_config_get(c, name, b, sizeof b), BFIT_OK);
    assert_string_equal(b, want);
}

static void set_fails(bfit_config *c, const char *name, const char *value, const char *field, const char *msg)
{
    assert_int_equal(bfit_config_set(c, name, value), BFIT_EINVAL);
    assert_string_equal(bfit_errfield(), field);
    if (!strstr(bfit_errmsg(), msg))
        fail_msg("set %s=%s: message '%s' lacks '%s'", name, value ? value : "(null)", bfit_errmsg(), msg);
}

static void test_set_and_get(void **state)
{
    bfit_config *c = cfg();
    (void)state;
    get_is(c, "batch", "128");           /* the library's defaults */
    get_is(c, "lr", "0.05");
    get_is(c, "optimizer", "sgd");
    get_is(c, "augment", "no");
    get_is(c, "no-normalize", "no");
    assert_int_equal(bfit_config_set(c, "micro_batch", "16"), BFIT_OK); /* '_' spells the same option */
    get_is(c, "micro-batch", "16");
    assert_int_equal(bfit_config_set_int(c, "epochs", 3), BFIT_OK);
    get_is(c, "epochs", "3");
    assert_int_equal(bfit_config_set_double(c, "lr", 0.125), BFIT_OK);
    get_is(c, "lr", "0.125");
    assert_int_equal(bfit_config_set(c, "augment", NULL), BFIT_OK); /* a flag */
    get_is(c, "augment", "");
    assert_int_equal(bfit_config_set(c, "augment", "no"), BFIT_OK);
    get_is(c, "augment", "no");
    assert_int_equal(bfit_config_set(c, "memory", "1.5GiB"), BFIT_OK);
    get_is(c, "memory", "1.5GiB");
    bfit_config_free(c);
}

static void test_bad_values(void **state)
{
    bfit_config *c = cfg();
    (void)state;
    set_fails(c, "epoch", "3", "", "did you mean 'epochs'");
    set_fails(c, "lr-schedule", "cosine", "", "did you mean 'schedule'");
    set_fails(c, "nonsense-option-xyz", "1", "", "unknown option 'nonsense-option-xyz'");
    set_fails(c, "epochs", "0", "epochs", "0 is out of range: expected 1 to 1000000");
    set_fails(c, "epochs", "two", "epochs", "'two' is not a whole number");
    set_fails(c, "lr", "inf", "lr", "'inf' is not a finite number");
    set_fails(c, "lr", "1e309", "lr", "too large");
    set_fails(c, "lr", "1e-400", "lr", "too small to represent");
    set_fails(c, "lr", "fast", "lr", "'fast' is not a number");
    set_fails(c, "memory", "10", "memory", "has no unit");
    set_fails(c, "memory", "1e3MiB", "memory", "has an exponent");
    set_fails(c, "batch", "1,,2", "batch", "got '1,,2'");
    set_fails(c, "optimizer", "adam", "optimizer", "sgd, adamw");
    set_fails(c, "device", "gpu", "device", "expected cpu, cuda, cuda:N");
    set_fails(c, "augment", "maybe", "augment", "not yes or no");
    set_fails(c, "epochs", NULL, "epochs", "needs a value");
    set_fails(c, "batch-tokens", "auto", "batch_tokens", "not supported yet");
    get_is(c, "epochs", "1"); /* a refused value changed nothing */
    bfit_config_free(c);
}

/* Each command reads its own options and refuses one set for another. */
static void test_check_per_command(void **state)
{
    bfit_config *c = cfg();
    (void)state;
    assert_int_equal(bfit_config_check(c, "train"), BFIT_EINVAL); /* no model */
    assert_string_equal(bfit_errfield(), "model");
    assert_int_equal(bfit_config_set(c, "model", "mlp"), BFIT_OK);
    assert_int_equal(bfit_config_check(c, "train"), BFIT_OK);
    assert_int_equal(bfit_config_check(c, "plan"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "epochs", "2"), BFIT_OK);
    assert_int_equal(bfit_config_check(c, "plan"), BFIT_EINVAL);
    assert_string_equal(bfit_errfield(), "epochs");
    assert_non_null(strstr(bfit_errmsg(), "plan does not read this option"));
    assert_int_equal(bfit_config_check(c, "train"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "ways", NULL), BFIT_OK);
    assert_int_equal(bfit_config_check(c, "train"), BFIT_EINVAL);
    assert_string_equal(bfit_errfield(), "ways");
    assert_int_equal(bfit_config_check(c, "nonsense"), BFIT_EINVAL);
    bfit_config_free(c);

    c = cfg();
    assert_int_equal(bfit_config_set(c, "model", "unknown-preset-xyz"), BFIT_OK);
    assert_int_equal(bfit_config_check(c, "plan"), BFIT_EINVAL); /* names nothing */
    assert_string_equal(bfit_errfield(), "model");
    assert_int_equal(bfit_config_set(c, "model", "/no/such/model.cfg"), BFIT_OK);
    assert_int_equal(bfit_config_check(c, "train"), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "no such file"));
    bfit_config_free(c);

    c = cfg();
    assert_int_equal(bfit_config_set(c, "model", "mlp"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "batch", "1,32"), BFIT_OK);
    assert_int_equal(bfit_config_check(c, "plan"), BFIT_OK);
    assert_int_equal(bfit_config_check(c, "train"), BFIT_EINVAL); /* one effective batch */
    assert_int_equal(bfit_config_set(c, "batch", "64"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "batch-tokens", "4096"), BFIT_OK);
    assert_int_equal(bfit_config_check(c, "train"), BFIT_EINVAL); /* both give E */
    bfit_config_free(c);

    c = cfg();
    assert_int_equal(bfit_config_set(c, "model", "mlp"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "checkpoint-every", "10"), BFIT_OK);
    assert_int_equal(bfit_config_check(c, "train"), BFIT_EINVAL); /* says how often, but no directory */
    assert_string_equal(bfit_errfield(), "checkpoint_every");
    bfit_config_free(c);
}

/* A copy owns its strings: the original can go. */
static void test_copy(void **state)
{
    bfit_config *c = cfg(), *d;
    char name[32];
    (void)state;
    strcpy(name, "cnn");
    assert_int_equal(bfit_config_set(c, "model", name), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "batch-schedule", "0:32,100:64"), BFIT_OK);
    strcpy(name, "xxx");
    d = bfit_config_copy(c);
    assert_non_null(d);
    bfit_config_free(c);
    get_is(d, "model", "cnn");
    get_is(d, "batch-schedule", "0:32,100:64");
    assert_int_equal(bfit_config_check(d, "train"), BFIT_OK);
    bfit_config_free(d);
}

/* The option list: every name settable, the commands that read it. */
static void test_option_list(void **state)
{
    const char *takes, *cmds, *name;
    int n = 0, train = 0;
    (void)state;
    for (int i = 0; (name = bfit_config_option(i, &takes, &cmds)); i++, n++) {
        char b[256];
        bfit_config *c = cfg();
        assert_int_equal(bfit_config_get(c, name, b, sizeof b), BFIT_OK);
        train += strstr(cmds, "train") != NULL;
        bfit_config_free(c);
    }
    assert_true(n > 60);
    assert_true(train > 50);
    assert_null(bfit_config_option(n, NULL, NULL));
}

static int64_t steps_seen;
static double step_loss_sum; /* of the steps' mean losses */
static char last_event[64];
static int batch_events;

static void on_step(void *ud, const bfit_step_info *s)
{
    (void)ud;
    assert_true(s->size >= sizeof *s); /* the library's own struct */
    steps_seen++;
    step_loss_sum += s->loss;
}

static void on_event(void *ud, const char *json)
{
    (void)ud;
    assert_true(json[0] == '{' && json[strlen(json) - 1] == '}');
    sscanf(json, "{\"event\":\"%63[^\"]\"", last_event);
    batch_events += strstr(json, "\"event\":\"batch_change\"") != NULL;
}

/* An embedder's auto-mode run with every default left unset: batch auto,
 * nothing else but the model, a short run and quiet. The library owns
 * the bounds (batch-min 16, batch-max 4096) and auto's reference batch. */
static void test_auto_with_defaults(void **state)
{
    bfit_config *c = cfg();
    bfit_result *res = NULL;
    (void)state;
    assert_int_equal(bfit_config_set(c, "model", "mlp"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "batch", "auto"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "max-steps", "3"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "eval-samples", "200"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "device", "cpu"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "dist", "off"), BFIT_OK);
    assert_int_equal(bfit_config_set_callbacks(c, on_step, NULL, NULL, on_event, NULL), BFIT_OK);
    steps_seen = 0;
    if (bfit_train(c, &res) != BFIT_OK)
        fail_msg("train: %s", bfit_errmsg());
    assert_int_equal(steps_seen, 3);
    assert_string_equal(last_event, "end");
    assert_true(bfit_result_number(res, "steps") == 3);
    assert_true(bfit_result_number(res, "batch") == 128); /* auto starts at the lr's reference batch */
    assert_true(bfit_result_number(res, "test_accuracy") >= 0);
    assert_true(isnan(bfit_result_number(res, "no.such.path")));
    assert_null(bfit_result_string(res, "steps"));
    assert_non_null(strstr(bfit_result_json(res), "\"steps\":3"));
    bfit_result_free(res);
    bfit_config_free(c);
}

/* A run whose last evaluation cannot run (the memory falls to 1 MiB after
 * its last step): the result says the test figures were not measured (JSON
 * null, NaN by path), not 0; the run's own weights file claims no accuracy
 * either (test_run). */
static void test_train_result_unmeasured(void **state)
{
    bfit_config *c = cfg();
    bfit_result *res = NULL;
    (void)state;
    assert_int_equal(bfit_config_set(c, "model", "mlp"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "batch", "64"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "epoch-samples", "320"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "eval-samples", "100"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "memory-schedule", "5:1MiB"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "device", "cpu"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "dist", "off"), BFIT_OK);
    assert_int_equal(bfit_train(c, &res), BFIT_ENOMEM);
    assert_non_null(strstr(bfit_errmsg(), "evaluation at micro-batch 1 needs"));
    assert_non_null(res);
    assert_true(bfit_result_number(res, "steps") == 5);
    assert_true(isnan(bfit_result_number(res, "test_accuracy")));
    assert_true(isnan(bfit_result_number(res, "test_loss")));
    assert_non_null(strstr(bfit_result_json(res), "\"test_loss\":null,\"test_accuracy\":null"));
    bfit_result_free(res);
    bfit_config_free(c);
}

/* A run that --max-steps ends inside its first epoch reports the mean
 * training loss of the steps it took (it said 0: the mean was taken only
 * when an epoch ended). Three steps of 64 samples: the mean of the steps'
 * means. */
static void test_train_loss_mid_epoch(void **state)
{
    bfit_config *c = cfg();
    bfit_result *res = NULL;
    double want, got;
    (void)state;
    assert_int_equal(bfit_config_set(c, "model", "mlp"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "batch", "64"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "max-steps", "3"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "eval-samples", "100"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "device", "cpu"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "dist", "off"), BFIT_OK);
    assert_int_equal(bfit_config_set_callbacks(c, on_step, NULL, NULL, NULL, NULL), BFIT_OK);
    steps_seen = 0;
    step_loss_sum = 0;
    if (bfit_train(c, &res) != BFIT_OK)
        fail_msg("train: %s", bfit_errmsg());
    assert_int_equal(steps_seen, 3);
    want = step_loss_sum / 3;
    got = bfit_result_number(res, "train_loss");
    if (!(want > 0) || !(fabs(got - want) <= 1e-9 * want))
        fail_msg("train_loss %.17g, the steps' mean %.17g", got, want);
    bfit_result_free(res);
    bfit_config_free(c);
}

/* bfit_profile's FLOPs per sample (bench/'s share of the matmul limit) on
 * tests/fixtures/se-mini.onnx (se_mini.py), counted by hand in MACs: the
 * first conv 1->16 3x3 on 16x16 (36,864; forward and weight gradient), the
 * depthwise conv 16 groups 3x3 (36,864, not the 589,824 of a dense one),
 * the 1x1 conv 16->24 (98,304), the gates' four 1x1 convs on 1x1 (64 each)
 * and the linear 24->10 (240), the others with their input gradient:
 * 4 x 36,864 + 6 x 135,664. */
static double profile_flops(const char *file)
{
    bfit_config *c = bfit_config_new();
    bfit_result *res = NULL;
    char model[4096];
    double f;
    assert_non_null(c);
    src_path(model, sizeof model, file);
    assert_int_equal(bfit_config_set(c, "model", model), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "batch", "2"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "repeats", "1"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "warmup", "1"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "rep-seconds", "0.01"), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "device", "cpu"), BFIT_OK);
    if (bfit_profile(c, &res) != BFIT_OK)
        fail_msg("profile: %s", bfit_errmsg());
    f = bfit_result_number(res, "flops_per_sample");
    bfit_result_free(res);
    bfit_config_free(c);
    return f;
}

static void test_profile_flops_grouped(void **st)
{
    (void)st;
    assert_true(profile_flops("tests/fixtures/se-mini.onnx") == 4.0 * 36864 + 6.0 * 135664);
}

/* The same on fuzz/corpus/onnx/vit_tiny.onnx: a linear layer on tokens
 * counts every token's product (before 2026-12-05 it took the token count
 * for the input features). 3x8x8 in 4x4 patches, 5 tokens of 8: the patch
 * conv 3->8 on 2x2 (1,536 MACs, the first layer), then per token the
 * in_proj 8->24 (960 for 5 tokens), out_proj and the MLP's two 8->8 (320
 * each), and the head 8->3 on the class token (24). */
static void test_profile_flops_tokens(void **st)
{
    (void)st;
    assert_true(profile_flops("fuzz/corpus/onnx/vit_tiny.onnx") == 4.0 * 1536 + 6.0 * (960 + 3 * 320 + 24));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_and_get), cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_check_per_command), cmocka_unit_test(test_copy),
        cmocka_unit_test(test_option_list), cmocka_unit_test(test_auto_with_defaults),
        cmocka_unit_test(test_train_result_unmeasured), cmocka_unit_test(test_train_loss_mid_epoch),
        cmocka_unit_test(test_profile_flops_grouped),
        cmocka_unit_test(test_profile_flops_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
