/* test_exp.c - bfit_expf (src/device/cpu_exp.h) against double exp, and
 * bfit_exp_d against long double exp (at the end).
 *
 * Every 97th f32 bit pattern between -87.33 and 88, and every pattern
 * within 2^16 of 0 and of each end, is compared with exp computed in double
 * and rounded to f32: at most 2 ulps apart. Below the normal range the
 * result is 0, exp(0) is 1 exactly, and a NaN stays a NaN. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "device/cpu_exp.h"

static float from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint32_t to_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* ulps between got and exp(x) rounded to f32 (both positive normals) */
static double ulps(float x)
{
    float want = (float)exp((double)x), got = bfit_expf(x);
    return fabs((double)got - want) / (nextafterf(want, INFINITY) - want);
}

/* the worst over bit patterns lo, lo + step, ... up to hi (one sign) */
static double worst_over(uint32_t lo, uint32_t hi, uint32_t step, float *at)
{
    double w = 0;
    for (uint64_t b = lo; b <= hi; b += step) {
        float x = from_bits((uint32_t)b);
        double u = x >= BFIT_EXP_MIN && x <= 88.0f ? ulps(x) : 0;
        if (u > w) {
            w = u;
            *at = x;
        }
    }
    return w;
}

static void test_within_two_ulps(void **st)
{
    uint32_t lo = to_bits(BFIT_EXP_MIN), hi = to_bits(88.0f);
    float at = 0;
    double w = 0, v;
    (void)st;
    w = fmax(w, worst_over(0x80000000u, lo, 97, &at));            /* negatives, 0 to -87.33 */
    w = fmax(w, worst_over(0, hi, 97, &at));                      /* positives */
    w = fmax(w, worst_over(lo - (1u << 16), lo, 1, &at));          /* near -87.33 */
    w = fmax(w, worst_over(hi - (1u << 16), hi, 1, &at));          /* near 88 */
    v = worst_over(0x80000000u, 0x80000000u + (1u << 16), 1, &at); /* -0 and tiny negatives */
    w = fmax(w, fmax(v, worst_over(0, 1u << 16, 1, &at)));
    printf("  bfit_expf: worst %.3f ulps (at %.9g)\n", w, (double)at);
    assert_true(w <= 2.0);
}

static void test_ends(void **st)
{
    (void)st;
    assert_true(bfit_expf(0.0f) == 1.0f);
    assert_true(bfit_expf(-0.0f) == 1.0f);
    assert_true(bfit_expf(-87.34f) == 0.0f);
    assert_true(bfit_expf(-1000.0f) == 0.0f);
    assert_true(bfit_expf(-INFINITY) == 0.0f); /* a masked score */
    assert_true(bfit_expf(BFIT_EXP_MIN) >= FLT_MIN);
    assert_true(isfinite(bfit_expf(1000.0f)));
    assert_true(bfit_expf(INFINITY) == bfit_expf(88.0f));
    assert_true(isnan(bfit_expf(NAN)));
}

/* ulps between bfit_exp_d(x) and exp(x) in long double rounded to double */
static double ulps_d(double x)
{
    double want = (double)expl((long double)x), got = bfit_exp_d(x);
    return fabs(got - want) / (nextafter(want, INFINITY) - want);
}

/* bfit_exp_d: 2^22 points evenly over [-708, 709], every double within
 * 2^16 patterns of 0 (both signs) and of each end: at most 2 ulps */
static void test_double_within_two_ulps(void **st)
{
    double w = 0, at = 0, lo = BFIT_EXP_D_MIN, hi = 709.0, step = (hi - lo) / (1 << 22), x;
    uint64_t b0;
    (void)st;
    for (int i = 0; i <= 1 << 22; i++)
        if (ulps_d(x = lo + i * step) > w)
            w = ulps_d(at = x);
    for (int e = 0; e < 4; e++) {
        double ends[4] = {0.0, -0.0, lo, hi};
        memcpy(&b0, &ends[e], sizeof b0);
        for (int64_t k = -(1 << 16); k <= 1 << 16; k++) {
            uint64_t b = b0 + (uint64_t)k;
            memcpy(&x, &b, sizeof x);
            if (!(x >= lo && x <= hi)) /* past an end, or a pattern across 0's: a NaN */
                continue;
            if (ulps_d(x) > w)
                w = ulps_d(at = x);
        }
    }
    printf("  bfit_exp_d: worst %.3f ulps (at %.17g)\n", w, at);
    assert_true(w <= 2.0);
    assert_true(bfit_exp_d(0.0) == 1.0);
    assert_true(bfit_exp_d(-709.0) == 0.0);
    assert_true(bfit_exp_d(-INFINITY) == 0.0);
    assert_true(isnan(bfit_exp_d(NAN)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_within_two_ulps),
        cmocka_unit_test(test_ends),
        cmocka_unit_test(test_double_within_two_ulps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
