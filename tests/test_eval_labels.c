/* test_eval_labels.c - a sample model's label -1 (an unreadable test image
 * left out, src/data/img_sample.c): refused in a training step, and in an
 * evaluation accepted and scored as nothing: the loss and the hits of the
 * others alone, and not counted in the means' denominator. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "trig.h"
#include "train/run_int.h"

#define M_ 3

/* Three fixed samples of the mlp's input. */
static float *samples(const bfit_model *M)
{
    int64_t n = (int64_t)M_ * bfit_shape_numel(M->input);
    float *x = malloc((size_t)n * sizeof *x);
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    return x;
}

/* The summed loss and hits of an evaluation forward of x with labels y. */
static void eval_sums(bfit_model *M, const float *x, const int32_t *y, double *loss, double *hits)
{
    assert_int_equal(bfit_model_stats_reset(M), BFIT_OK);
    assert_int_equal(bfit_model_set_input(M, x, y, M_), BFIT_OK);
    assert_int_equal(bfit_model_forward(M, 0), BFIT_OK);
    assert_int_equal(bfit_model_stats_read(M, loss, hits), BFIT_OK);
}

/* The mlp with drawn weights, reserved for M_ samples (training or not);
 * *x its samples. */
static void open_mlp(trig *r, int training, float **x)
{
    trig_open(r, 1, (uint64_t)1 << 28);
    trig_load(r, "mlp");
    assert_int_equal(bfit_model_alloc_params(r->M, training), BFIT_OK);
    assert_int_equal(bfit_model_init_params(r->M, 1), BFIT_OK);
    *x = samples(r->M);
    assert_int_equal(bfit_model_reserve(r->M, M_, training), BFIT_OK);
}

static void test_left_out_in_eval(void **st)
{
    const int32_t both[M_] = {3, -1, 7}, first[M_] = {3, -1, -1}, last[M_] = {-1, -1, 7};
    double l_both, h_both, l_first, h_first, l_last, h_last;
    trig r;
    float *x;
    (void)st;

    open_mlp(&r, 0, &x);
    eval_sums(r.M, x, both, &l_both, &h_both);
    eval_sums(r.M, x, first, &l_first, &h_first);
    eval_sums(r.M, x, last, &l_last, &h_last);
    /* sample 1 adds nothing: the sums are samples 0's and 2's, to the bit */
    assert_true(l_first > 0 && l_last > 0);
    assert_true(l_both == l_first + l_last);
    assert_true(h_both == h_first + h_last);
    /* and the means are over the 2 scored */
    assert_int_equal(bfit_run_counted(r.M, both, M_), 2);
    assert_int_equal(bfit_run_counted(r.M, first, M_), 1);
    bfit_model_unreserve(r.M);
    free(x);
    trig_free(&r);
}

static void test_refused_in_training(void **st)
{
    const int32_t y[M_] = {3, -1, 7};
    trig r;
    float *x;
    (void)st;

    open_mlp(&r, 1, &x);
    assert_int_equal(bfit_model_set_input(r.M, x, y, M_), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "label -1 of sample 1 is outside [0, 10)"));
    bfit_model_unreserve(r.M);
    free(x);
    trig_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_left_out_in_eval),
        cmocka_unit_test(test_refused_in_training),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
