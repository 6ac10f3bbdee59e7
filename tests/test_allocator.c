/* test_allocator.c - a caller's allocator (bfit_config_set_allocator, Lua's
 * lua_Alloc) takes every device block of a run and gets each back; one that
 * refuses blocks, once or from some call on, makes the run fail with
 * BFIT_ENOMEM or recover, never hang, crash or keep a block. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include "batchfit.h"
#include "tfiles.h"

enum { N = 200, F = 8 };
static float x[N * F];
static int32_t y[N];
static char spec[300];
static long calls, live, fail_at, fail_from;

static void *take(void *ud, size_t size, size_t align)
{
    void *p;
    (void)ud;
    calls++;
    if (calls == fail_at || (fail_from > 0 && calls >= fail_from))
        return NULL;
    p = aligned_alloc(align, (size + align - 1) / align * align);
    live += p != NULL;
    return p;
}

static void give(void *ud, void *p)
{
    (void)ud;
    live -= p != NULL;
    free(p);
}

/* A run of 4 steps of 32 on the arrays, through the allocator. Checking
 * mode (BFIT_DEVICE_CHECK) takes its blocks from guarded mappings of its own,
 * not the caller's allocator: the test is skipped there (labelled nocheck). */
static int run(long at, long from, bfit_result **r)
{
    const char *check = getenv("BFIT_DEVICE_CHECK");
    bfit_config *c;
    int rc;
    if (check && *check && strcmp(check, "0"))
        skip();
    c = bfit_config_new();
    calls = live = 0;
    fail_at = at, fail_from = from;
    assert_non_null(c);
    assert_int_equal(bfit_config_set(c, "model", spec), BFIT_OK);
    assert_int_equal(bfit_config_set_arrays(c, 0, x, y, N, F), BFIT_OK);
    assert_int_equal(bfit_config_set_int(c, "batch", 32), BFIT_OK);
    assert_int_equal(bfit_config_set_int(c, "max-steps", 4), BFIT_OK);
    assert_int_equal(bfit_config_set_int(c, "threads", 1), BFIT_OK);
    assert_int_equal(bfit_config_set(c, "device", "cpu"), BFIT_OK);
    assert_int_equal(bfit_config_set_allocator(c, take, give, NULL), BFIT_OK);
    rc = bfit_train(c, r);
    bfit_config_free(c);
    return rc;
}

static void test_every_block_back(void **st)
{
    bfit_result *r = NULL;
    double steps;
    (void)st;
    assert_int_equal(run(0, 0, &r), BFIT_OK);
    steps = bfit_result_number(r, "steps");
    bfit_result_free(r);
    assert_true(steps == 4);
    assert_true(calls > 0); /* the run's blocks came from here */
    assert_int_equal(live, 0);
}

/* For every call k of the clean run: refused from k on (once: at k only).
 * An error (out of memory) or a finished run, each block given back. Before
 * the fix a refusal the plan said would fit was retried for ever (a spin). */
static void sweep(int once)
{
    bfit_result *r = NULL;
    long total;
    assert_int_equal(run(0, 0, &r), BFIT_OK);
    bfit_result_free(r);
    total = calls;
    for (long k = 1; k <= total; k++) {
        int rc = run(once ? k : 0, once ? 0 : k, &r);
        if (rc != BFIT_OK && rc != BFIT_ENOMEM)
            fail_msg("refused %s call %ld: rc %d (%s)", once ? "at" : "from", k, rc, bfit_errmsg());
        assert_int_equal(live, 0);
        bfit_result_free(r);
        r = NULL;
    }
}

static void test_refused_from_any_call(void **st)
{
    (void)st;
    sweep(0);
}

static void test_refused_once(void **st)
{
    (void)st;
    sweep(1);
}

static int setup(void **st)
{
    (void)st;
    for (int i = 0; i < N; i++) {
        y[i] = i % 3;
        for (int j = 0; j < F; j++)
            x[i * F + j] = (float)(i * 7 % 13) / 13 + (j == y[i]);
    }
    if (tmp_setup("allocator"))
        return -1;
    tmp_path(spec, sizeof spec, "tiny.cfg");
    put_text(spec, "input 8\nlinear 16\nrelu\nlinear 3\n");
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    return tmp_teardown();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_block_back),
        cmocka_unit_test(test_refused_from_any_call),
        cmocka_unit_test(test_refused_once),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
