/* test_api_null.c - the public functions given NULL (or a sized struct
 * whose size is garbage) return an error saying what they need, or do
 * nothing where they return nothing: never a crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include "batchfit.h"

static void says(int rc, const char *words)
{
    assert_int_equal(rc, BFIT_EINVAL);
    if (!strstr(bfit_errmsg(), words))
        fail_msg("got '%s', want '%s'", bfit_errmsg(), words);
}

static void test_run_functions(void **st)
{
    bfit_result *res = NULL;
    char path[64];
    (void)st;
    assert_int_equal(bfit_run_done(NULL), 1); /* a loop on it ends */
    says(bfit_run_step(NULL, NULL), "needs a run");
    says(bfit_run_evaluate(NULL, NULL), "needs a run");
    says(bfit_run_save(NULL, "w.safetensors"), "needs a run and a path");
    says(bfit_run_checkpoint(NULL, path, sizeof path), "needs a run");
    says(bfit_run_result(NULL, &res), "needs a run");
    bfit_run_request_stop(NULL);
    bfit_run_finish(NULL, BFIT_OK);
    bfit_run_free(NULL);
}

static void test_helpers(void **st)
{
    uint64_t b;
    bfit_lr_rule rule;
    (void)st;
    says(bfit_parse_size("1GiB", NULL), "somewhere to put");
    assert_int_equal(bfit_parse_size("1GiB", &b), BFIT_OK);
    says(bfit_lr_rule_parse("sqrt", NULL), "somewhere to put");
    assert_int_equal(bfit_lr_rule_parse("sqrt", &rule), BFIT_OK);
    says(bfit_device_memory(NULL, &b, NULL), "needs a device");
    assert_non_null(bfit_device_name(NULL));
}

/* A run's step with a struct whose size field is garbage: refused before
 * anything is written (zeroing up to that size wrote over memory). */
static void test_garbage_size(void **st)
{
    bfit_step_info info;
    bfit_eval_info ev;
    (void)st;
    memset(&info, 0xab, sizeof info);
    memset(&ev, 0xab, sizeof ev);
    info.size = (size_t)-1;
    ev.size = (size_t)1 << 40;
    says(bfit_run_step(NULL, &info), "needs a run"); /* the run is checked first */
    {
        bfit_config *c = bfit_config_new();
        bfit_run *r = NULL;
        assert_int_equal(bfit_config_set(c, "model", "mlp"), BFIT_OK);
        assert_int_equal(bfit_config_set(c, "data", "synthetic"), BFIT_OK);
        assert_int_equal(bfit_config_set(c, "max-steps", "1"), BFIT_OK);
        assert_int_equal(bfit_config_set(c, "threads", "1"), BFIT_OK);
        assert_int_equal(bfit_run_new(c, &r), BFIT_OK);
        says(bfit_run_step(r, &info), "is no struct's size");
        says(bfit_run_evaluate(r, &ev), "is no struct's size");
        assert_int_equal(bfit_run_done(r), 0); /* nothing was done */
        {
            /* a stop asked for: the step says so, and the result as bfit_train's would */
            bfit_result *res = NULL;
            bfit_run_request_stop(r);
            assert_int_equal(bfit_run_step(r, NULL), BFIT_ESTOPPED);
            assert_int_equal(bfit_run_result(r, &res), BFIT_OK);
            assert_string_equal(bfit_result_string(res, "stopped"), "request");
            bfit_result_free(res);
        }
        bfit_run_free(r);
        bfit_config_free(c);
    }
}

static int take_none(void *ud, int n, float *x, int32_t *labels, int *got)
{
    (void)ud, (void)n, (void)x, (void)labels;
    *got = 0;
    return BFIT_OK;
}

static int epoch_none(void *ud)
{
    (void)ud;
    return BFIT_OK;
}

/* A training source without test samples is refused naming test_data (it
 * was evaluated on the default data set, fashion-mnist, and failed on its
 * shape or, worse, measured the wrong samples). */
static void test_source_without_test(void **st)
{
    bfit_config *c = bfit_config_new();
    bfit_result *r = NULL;
    (void)st;
    assert_int_equal(bfit_config_set(c, "model", "mlp"), BFIT_OK);
    assert_int_equal(bfit_config_set_source(c, 0, take_none, epoch_none, epoch_none, 300, NULL), BFIT_OK);
    assert_int_equal(bfit_train(c, &r), BFIT_EINVAL);
    assert_string_equal(bfit_errfield(), "test_data");
    assert_non_null(strstr(bfit_errmsg(), "give the test samples too"));
    bfit_config_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_functions),
        cmocka_unit_test(test_helpers),
        cmocka_unit_test(test_garbage_size),
        cmocka_unit_test(test_source_without_test),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
