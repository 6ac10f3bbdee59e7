/* test_noise.c - the gradient noise scale estimator (McCandlish et al. 2018,
 * A.1): exact on expected norms; on synthetic per-sample gradients
 * g_i = G + noise with known G and diagonal covariance it converges to
 * tr(Sigma) / |G|^2 within a tolerance derived from the estimator's own
 * measured spread; unequal micro-batch sizes stay unbiased; bad input is
 * refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "batchfit.h"
#include "internal.h"

/* ---- a small deterministic normal generator ----------------------------- */

static uint64_t rng_state;

static uint64_t splitmix(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(void) { return ((double)(splitmix() >> 11) + 0.5) / 9007199254740992.0; }

/* Box-Muller, both outputs used */
static double normal(void)
{
    static double spare;
    static int have;
    double r, a;

    if (have) {
        have = 0;
        return spare;
    }
    r = sqrt(-2.0 * log(uniform01()));
    a = 2.0 * M_PI * uniform01();
    spare = r * sin(a);
    have = 1;
    return r * cos(a);
}

/* ---- exact on expectations ------------------------------------------------ */

static void test_exact_on_expected_norms(void **st)
{
    const double G2[] = { 1.0, 0.01, 7.5 }, S[] = { 64.0, 3.0, 1000.0 };
    (void)st;
    for (int i = 0; i < 3; i++) {
        bfit_noise nz;
        double bn;
        assert_int_equal(bfit_noise_init(&nz, 0.1), BFIT_OK);
        /* E|G_b|^2 = |G|^2 + tr(S)/b */
        assert_int_equal(bfit_noise_update(&nz, 8, G2[i] + S[i] / 8, 64, G2[i] + S[i] / 64), BFIT_OK);
        assert_true(fabs(nz.g2_last - G2[i]) < 1e-9 * (1 + G2[i]));
        assert_true(fabs(nz.s_last - S[i]) < 1e-9 * S[i]);
        assert_int_equal(bfit_noise_scale(&nz, &bn), BFIT_OK);
        assert_true(fabs(bn - S[i] / G2[i]) < 1e-6 * S[i] / G2[i]);
    }
}

static void test_step_with_unequal_sizes_exact(void **st)
{
    const int size[] = { 16, 16, 16, 5 };
    const double G2 = 2.0, S = 50.0;
    double g2[4], bn;
    bfit_noise nz;
    (void)st;
    for (int j = 0; j < 4; j++)
        g2[j] = G2 + S / size[j];
    assert_int_equal(bfit_noise_init(&nz, 1.0), BFIT_OK);
    assert_int_equal(bfit_noise_update_step(&nz, 4, g2, size, G2 + S / 53), BFIT_OK);
    assert_true(fabs(nz.g2_last - G2) < 1e-9);
    assert_true(fabs(nz.s_last - S) < 1e-9);
    assert_int_equal(bfit_noise_scale(&nz, &bn), BFIT_OK);
    assert_true(fabs(bn - 25.0) < 1e-9);
}

/* Two consecutive steps of b1 and b2 samples: exact on expected norms,
 * E|G_i|^2 = |G|^2 + S / b_i and E|G1 - G2|^2 = S / b1 + S / b2. */
static void test_pair_exact(void **st)
{
    const double G2 = 0.5, S = 40.0;
    const int b[][2] = { { 16, 16 }, { 32, 8 }, { 1, 1000 } };
    (void)st;
    for (int i = 0; i < 3; i++) {
        bfit_noise nz;
        double bn, b1 = b[i][0], b2 = b[i][1];
        assert_int_equal(bfit_noise_init(&nz, 1.0), BFIT_OK);
        assert_int_equal(bfit_noise_update_pair(&nz, b1, G2 + S / b1, b2, G2 + S / b2, S / b1 + S / b2), BFIT_OK);
        assert_true(fabs(nz.g2_last - G2) < 1e-9);
        assert_true(fabs(nz.s_last - S) < 1e-9 * S);
        assert_int_equal(bfit_noise_scale(&nz, &bn), BFIT_OK);
        assert_true(fabs(bn - S / G2) < 1e-6 * S / G2);
    }
}

static void test_ema_smooths_each_separately(void **st)
{
    bfit_noise nz;
    double bn;
    (void)st;
    assert_int_equal(bfit_noise_init(&nz, 0.5), BFIT_OK);
    /* estimates (G2, S) = (1, 10) then (3, 10): EMAs 2 and 10, ratio 5 (not
     * the mean of the two ratios, 6.67) */
    assert_int_equal(bfit_noise_update(&nz, 1, 1 + 10, 2, 1 + 5), BFIT_OK);
    assert_int_equal(bfit_noise_update(&nz, 1, 3 + 10, 2, 3 + 5), BFIT_OK);
    assert_true(fabs(nz.g2_ema - 2.0) < 1e-12 && fabs(nz.s_ema - 10.0) < 1e-12);
    assert_int_equal(bfit_noise_scale(&nz, &bn), BFIT_OK);
    assert_true(fabs(bn - 5.0) < 1e-12);
    assert_int_equal(nz.n, 2);
}

static void test_bad_input(void **st)
{
    bfit_noise nz;
    double bn, g2[2] = { 1, 1 };
    int size[2] = { 4, 0 };
    (void)st;
    assert_int_equal(bfit_noise_init(&nz, 0), BFIT_EINVAL);
    assert_int_equal(bfit_noise_init(&nz, 1.5), BFIT_EINVAL);
    assert_int_equal(bfit_noise_init(&nz, 0.1), BFIT_OK);
    assert_int_equal(bfit_noise_scale(&nz, &bn), BFIT_ESTATE);
    assert_int_equal(bfit_noise_update(&nz, 8, 1, 8, 1), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "B_small < B_big"));
    assert_int_equal(bfit_noise_update(&nz, 0, 1, 8, 1), BFIT_EINVAL);
    assert_int_equal(bfit_noise_update(&nz, 4, -1, 8, 1), BFIT_EINVAL);
    assert_int_equal(bfit_noise_update(&nz, 4, NAN, 8, 1), BFIT_EINVAL);
    assert_int_equal(bfit_noise_update_step(&nz, 1, g2, size, 1), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "at least 2"));
    assert_int_equal(bfit_noise_update_step(&nz, 2, g2, size, 1), BFIT_EINVAL);
    assert_int_equal(bfit_noise_update_pair(&nz, 0, 1, 8, 1, 0.5), BFIT_EINVAL);
    assert_int_equal(bfit_noise_update_pair(&nz, 8, 1, 8, 1, -0.5), BFIT_EINVAL);
    assert_int_equal(bfit_noise_update_pair(&nz, 8, 1, 8, INFINITY, 0.5), BFIT_EINVAL);
    assert_int_equal(nz.n, 0);
    /* a first estimate with |G|^2 <= 0 gives no scale yet */
    assert_int_equal(bfit_noise_update(&nz, 4, 1.0, 8, 0.4), BFIT_OK);
    assert_true(nz.g2_ema < 0);
    assert_int_equal(bfit_noise_scale(&nz, &bn), BFIT_ESTATE);
}

/* ---- convergence on synthetic gradients ----------------------------------- */

#define D 32

typedef struct welford {
    double n, mean, m2;
} welford;

static void wf_add(welford *w, double x)
{
    double d = x - w->mean;
    w->n += 1;
    w->mean += d / w->n;
    w->m2 += d * (x - w->mean);
}

static double wf_sd(const welford *w) { return sqrt(w->m2 / (w->n - 1)); }

typedef struct truth {
    double G[D], sd[D];
    double g2, tr;
} truth;

/* G and the per-coordinate noise sd, scaled so |G|^2 = g2 and tr(Sigma) = tr;
 * the shapes are uneven on purpose. */
static void make_truth(truth *t, double g2, double tr)
{
    double a = 0, b = 0;
    for (int d = 0; d < D; d++) {
        t->G[d] = (d % 3 == 0 ? -1.0 : 1.0) * (0.2 + 0.05 * (d % 7));
        t->sd[d] = 0.5 + 0.1 * (d % 11);
        a += t->G[d] * t->G[d];
        b += t->sd[d] * t->sd[d];
    }
    for (int d = 0; d < D; d++) {
        t->G[d] *= sqrt(g2 / a);
        t->sd[d] *= sqrt(tr / b);
    }
    t->g2 = g2;
    t->tr = tr;
}

typedef struct run_result {
    double bn;                  /* the estimator's answer */
    welford g2, s;              /* the unsmoothed per-step estimates */
} run_result;

/* steps optimizer steps of k micro-batches of the given sizes: per-sample
 * gradients drawn, micro-batch and step means formed, their squared norms
 * fed to the estimator. */
static void run(const truth *t, int k, const int *size, int steps, double alpha, uint64_t seed, run_result *r)
{
    bfit_noise nz;
    double sum_all[D], sum_j[D], g2m[16];

    rng_state = seed;
    memset(r, 0, sizeof *r);
    assert_int_equal(bfit_noise_init(&nz, alpha), BFIT_OK);
    for (int s = 0; s < steps; s++) {
        int B = 0;
        double full = 0;
        memset(sum_all, 0, sizeof sum_all);
        for (int j = 0; j < k; j++) {
            double n2 = 0;
            memset(sum_j, 0, sizeof sum_j);
            for (int i = 0; i < size[j]; i++)
                for (int d = 0; d < D; d++)
                    sum_j[d] += t->G[d] + t->sd[d] * normal();
            for (int d = 0; d < D; d++) {
                double mean = sum_j[d] / size[j];
                n2 += mean * mean;
                sum_all[d] += sum_j[d];
            }
            g2m[j] = n2;
            B += size[j];
        }
        for (int d = 0; d < D; d++)
            full += (sum_all[d] / B) * (sum_all[d] / B);
        assert_int_equal(bfit_noise_update_step(&nz, k, g2m, size, full), BFIT_OK);
        wf_add(&r->g2, nz.g2_last);
        wf_add(&r->s, nz.s_last);
    }
    assert_int_equal(bfit_noise_scale(&nz, &r->bn), BFIT_OK);
}

/* The tolerance: an EMA of weight a over independent estimates has the
 * variance of a mean of n_eff = (2 - a) / a of them. The relative standard
 * error of a ratio is at most the sum of those of its parts (correlation
 * only helps or is ignored conservatively), so |bn / truth - 1| must be
 * within 4 of those: a chance failure is below 1e-4. The spreads are the
 * estimator's own per-step ones, measured here. The test also demands the
 * tolerance be under max_tol, so it cannot pass by being vague (B_noise well
 * above B_big is the noisy regime: |G|^2 is a small difference there). */
static void check_converges(const truth *t, int k, const int *size, uint64_t seed, double max_tol)
{
    const double alpha = 0.002, n_eff = (2 - alpha) / alpha;
    run_result r;
    double want = t->tr / t->g2, rel, tol;

    run(t, k, size, 20000, alpha, seed, &r);
    rel = wf_sd(&r.s) / t->tr / sqrt(n_eff) + wf_sd(&r.g2) / t->g2 / sqrt(n_eff);
    tol = 4 * rel;
    print_message("B_noise: true %.3f, estimated %.3f (%.2f%%, tolerance %.2f%%)\n", want, r.bn,
                  100 * (r.bn / want - 1), 100 * tol);
    assert_true(tol < max_tol);
    assert_true(fabs(r.bn / want - 1) < tol);
    /* each per-step estimate is unbiased: their plain means over all steps
     * are within 4 standard errors of the truth */
    assert_true(fabs(r.s.mean - t->tr) < 4 * wf_sd(&r.s) / sqrt(r.s.n));
    assert_true(fabs(r.g2.mean - t->g2) < 4 * wf_sd(&r.g2) / sqrt(r.g2.n));
}

/* Steps of one batch each (size[s % nsize] samples), every step paired with
 * the one before, as the trainer does when a step has one micro-batch. */
static void run_pairs(const truth *t, int nsize, const int *size, int steps, double alpha, uint64_t seed,
                      run_result *r)
{
    bfit_noise nz;
    double prev[D], cur[D], prev_g2 = 0;

    rng_state = seed;
    memset(r, 0, sizeof *r);
    assert_int_equal(bfit_noise_init(&nz, alpha), BFIT_OK);
    for (int s = 0; s < steps; s++) {
        int b = size[s % nsize];
        double g2 = 0, d2 = 0;
        memset(cur, 0, sizeof cur);
        for (int i = 0; i < b; i++)
            for (int d = 0; d < D; d++)
                cur[d] += (t->G[d] + t->sd[d] * normal()) / b;
        for (int d = 0; d < D; d++) {
            g2 += cur[d] * cur[d];
            d2 += (cur[d] - prev[d]) * (cur[d] - prev[d]);
        }
        if (s > 0) {
            assert_int_equal(bfit_noise_update_pair(&nz, size[(s - 1) % nsize], prev_g2, b, g2, d2), BFIT_OK);
            wf_add(&r->g2, nz.g2_last);
            wf_add(&r->s, nz.s_last);
        }
        memcpy(prev, cur, sizeof cur);
        prev_g2 = g2;
    }
    assert_int_equal(bfit_noise_scale(&nz, &r->bn), BFIT_OK);
}

/* Consecutive pairs converge too. Each batch is in two pairs, so adjacent
 * estimates are correlated (and no others): the variance of their mean is
 * at most 3 times that of independent ones, hence sqrt(3) in the tolerance. */
static void test_converges_consecutive_pairs(void **st)
{
    const int size[2] = { 16, 24 };
    const double alpha = 0.001, n_eff = (2 - alpha) / alpha;
    truth t;
    run_result r;
    double want, rel, tol;
    (void)st;
    make_truth(&t, 1.0, 32.0); /* B_noise 32 */
    want = t.tr / t.g2;
    run_pairs(&t, 2, size, 40000, alpha, 4, &r);
    rel = sqrt(3) * (wf_sd(&r.s) / t.tr + wf_sd(&r.g2) / t.g2) / sqrt(n_eff);
    tol = 4 * rel;
    print_message("pairs: B_noise true %.3f, estimated %.3f (%.2f%%, tolerance %.2f%%)\n", want, r.bn,
                  100 * (r.bn / want - 1), 100 * tol);
    assert_true(tol < 0.15);
    assert_true(fabs(r.bn / want - 1) < tol);
    assert_true(fabs(r.s.mean - t.tr) < 4 * sqrt(3) * wf_sd(&r.s) / sqrt(r.s.n));
    assert_true(fabs(r.g2.mean - t.g2) < 4 * sqrt(3) * wf_sd(&r.g2) / sqrt(r.g2.n));
}

static void test_converges_small_noise_scale(void **st)
{
    const int size[4] = { 8, 8, 8, 8 };
    truth t;
    (void)st;
    make_truth(&t, 2.0, 16.0); /* B_noise 8 */
    check_converges(&t, 4, size, 1, 0.08);
}

static void test_converges_large_noise_scale(void **st)
{
    const int size[4] = { 16, 16, 16, 16 };
    truth t;
    (void)st;
    make_truth(&t, 0.25, 40.0); /* B_noise 160, above B_big */
    check_converges(&t, 4, size, 2, 0.2);
}

static void test_converges_unequal_sizes(void **st)
{
    const int size[4] = { 12, 12, 12, 3 };
    truth t;
    run_result r;
    double arith, hb, s_arith;
    (void)st;
    make_truth(&t, 1.0, 24.0);
    check_converges(&t, 4, size, 3, 0.1);
    /* and the harmonic mean matters: with the plain mean size instead, the
     * same norms would put tr(Sigma) far outside the error */
    run(&t, 4, size, 20000, 0.002, 3, &r);
    arith = (12 + 12 + 12 + 3) / 4.0;
    hb = 4 / (3 / 12.0 + 1 / 3.0);
    s_arith = r.s.mean * (1 / hb - 1 / 39.0) / (1 / arith - 1 / 39.0);
    assert_true(fabs(s_arith - t.tr) > 10 * wf_sd(&r.s) / sqrt(r.s.n));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_on_expected_norms),
        cmocka_unit_test(test_step_with_unequal_sizes_exact),
        cmocka_unit_test(test_pair_exact),
        cmocka_unit_test(test_ema_smooths_each_separately),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_converges_small_noise_scale),
        cmocka_unit_test(test_converges_large_noise_scale),
        cmocka_unit_test(test_converges_unequal_sizes),
        cmocka_unit_test(test_converges_consecutive_pairs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
