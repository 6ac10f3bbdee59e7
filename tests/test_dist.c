/* test_dist.c - the pure parts of data-parallel training (src/dist/): how
 * E is split into shares (proportional, integers adding up to E, at least
 * one each, ties to the lower rank), when new shares are worth a change
 * (integer arithmetic, a gain threshold), the weights from measured rates;
 * and that a build without MPI refuses to train data-parallel, saying so.
 * Runs without MPI and without mpirun (tests/mpi/ runs the real group). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "device/comm.h"
#include "dist/dist.h"

static int sum(const int *v, int n)
{
    int s = 0;
    for (int i = 0; i < n; i++)
        s += v[i];
    return s;
}

static void split_proportional(void **state)
{
    (void)state;
    int64_t w[3] = {1, 1, 2};
    int s[3];

    bfit_dist_split(64, 3, w, s);
    assert_int_equal(s[0], 16);
    assert_int_equal(s[1], 16);
    assert_int_equal(s[2], 32);
    /* 10 in 1:1:1: 3.33 each, the remainder to the lowest rank on a tie */
    int64_t e[3] = {5, 5, 5};
    bfit_dist_split(10, 3, e, s);
    assert_int_equal(s[0], 4);
    assert_int_equal(s[1], 3);
    assert_int_equal(s[2], 3);
    /* largest fraction first: 7 in 1:2 is 2.33 / 4.67 -> 2 / 5 */
    int64_t f[2] = {1, 2};
    bfit_dist_split(7, 2, f, s);
    assert_int_equal(s[0], 2);
    assert_int_equal(s[1], 5);
}

static void split_sums_and_floors(void **state)
{
    (void)state;
    uint64_t x = 12345;
    for (int trial = 0; trial < 2000; trial++) {
        int n = 1 + (int)(x % 7), E, s[8];
        int64_t w[8];
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        E = 1 + (int)((x >> 33) % 5000);
        for (int r = 0; r < n; r++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            /* rates from 1 to 2^50 (1/1024 samples/s): the products need 128 bits */
            w[r] = 1 + (int64_t)((x >> 14) % ((uint64_t)1 << (10 + (x >> 60) * 3)));
        }
        bfit_dist_split(E, n, w, s);
        assert_int_equal(sum(s, n), E);
        for (int r = 0; r < n; r++)
            assert_true(s[r] >= (E >= n ? 1 : 0));
    }
}

static void split_one_each(void **state)
{
    (void)state;
    /* a rank a thousand times slower still takes a sample: every rank
     * takes part in every step when E allows */
    int64_t w[3] = {1000000, 1000000, 1};
    int s[3];
    bfit_dist_split(8, 3, w, s);
    assert_int_equal(sum(s, 3), 8);
    assert_int_equal(s[2], 1);
    /* E below the ranks: some take none */
    bfit_dist_split(2, 3, w, s);
    assert_int_equal(s[0], 1);
    assert_int_equal(s[1], 1);
    assert_int_equal(s[2], 0);
}

static void faster_needs_the_gain(void **state)
{
    (void)state;
    int64_t w[2] = {3, 1}; /* rank 0 three times as fast */
    int cur[2] = {32, 32}, next[2] = {48, 16};
    /* now: rank 1 takes 32/1, next: max(16, 16) = 16: twice as fast */
    assert_true(bfit_dist_faster(2, w, cur, next, 0.1));
    assert_false(bfit_dist_faster(2, w, next, cur, 0.1));
    /* 10% faster is not 15% faster: 33/31 vs 30/34 at w 1:1 */
    int64_t e[2] = {1, 1};
    int a[2] = {33, 31}, b[2] = {32, 32}, c[2] = {37, 27};
    assert_false(bfit_dist_faster(2, e, a, b, 0.1)); /* 33 -> 32: 3% */
    assert_true(bfit_dist_faster(2, e, c, b, 0.1));  /* 37 -> 32: 15.6% */
    assert_false(bfit_dist_faster(2, e, c, b, 0.2));
}

static void weights_from_rates(void **state)
{
    (void)state;
    int64_t rate[3] = {0, 0, 0}, w[3];
    bfit_dist_weights(3, rate, w); /* none measured: equal */
    assert_true(w[0] == 1 && w[1] == 1 && w[2] == 1);
    int64_t some[3] = {3000, 0, 1000};
    bfit_dist_weights(3, some, w); /* the unmeasured rank counts as the mean */
    assert_int_equal(w[0], 3000);
    assert_int_equal(w[1], 2000);
    assert_int_equal(w[2], 1000);
}

static void status_failures(void **state)
{
    (void)state;
    bfit_dist_word w[3];
    memset(w, 0, sizeof w);
    assert_int_equal(bfit_dist_failed(w, 3), -1);
    w[2].code = BFIT_ENOMEM;
    w[1].code = BFIT_ESTOPPED;
    assert_int_equal(bfit_dist_failed(w, 3), 1);
    w[0].check = w[1].check = 7;
    w[2].check = 8;
    assert_int_equal(bfit_dist_disagree(w, 3), 2);
    w[2].check = 7;
    assert_int_equal(bfit_dist_disagree(w, 3), -1);
}

/* Without MPI the group cannot be made, and says why; with it, a process
 * not started by a launcher is a group of one (MPI's singleton). */
static void group_or_refusal(void **state)
{
    (void)state;
    bfit_dist *d = NULL;
    int rc = bfit_dist_new(&d);
    if (!bfit_comm_available()) {
        assert_int_equal(rc, BFIT_EDEVICE);
        assert_non_null(strstr(bfit_errmsg(), "built without MPI"));
        assert_null(d);
        return;
    }
    assert_int_equal(rc, BFIT_OK);
    assert_int_equal(bfit_dist_size(d), 1);
    assert_int_equal(bfit_dist_rank(d), 0);
    bfit_dist_free(d);
    bfit_comm_finalize();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(split_proportional), cmocka_unit_test(split_sums_and_floors),
        cmocka_unit_test(split_one_each),     cmocka_unit_test(faster_needs_the_gain),
        cmocka_unit_test(weights_from_rates), cmocka_unit_test(status_failures),
        cmocka_unit_test(group_or_refusal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
