/* test_abi.c - programs built against another header than the library's.
 *
 * The plain structs that cross the public boundary start with their size
 * (batchfit.h). Here they are declared as a program built against the
 * previous header had them: bfit_step_stats before auto mode's plateau
 * check added loss_known and loss, and bfit_controller_config before
 * auto_plateau_windows, auto_plateau, keep_whole and tokens. Such a program
 * must still run, with the missing fields at their defaults; and one built
 * against a newer header (a larger struct) must be refused when it sets a
 * field this library does not know, not silently half-served. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <batchfit.h>

/* ---- the previous header's layouts (copied, trailing fields removed) ---- */
typedef struct old_controller_config {
    size_t size;
    bfit_plan_fn plan_bytes;
    void *plan_ud;
    uint64_t fixed_bytes;
    uint64_t capacity;
    double margin;
    int micro_batch;
    int batch;
    const bfit_batch_point *schedule;
    int nschedule;
    int adaptive;
    int auto_batch;
    int batch_min, batch_max;
    bfit_lr_rule rule;
    int lr_ref_batch;
    int64_t rewarmup_steps;
    int grow_after;
    double grow_gain;
    int64_t shrink_holdoff;
    int64_t flap_window;
    int tput_skip;
    double tput_alpha;
    int64_t adapt_interval;
    double adapt_factor;
    double adapt_min_change;
    double noise_alpha;
    int noise_min_updates;
    double auto_gain;
    int64_t auto_interval;
    int auto_confirm;
} old_controller_config;

typedef struct old_step_stats {
    size_t size;
    int64_t step;
    int epoch;
    int samples;
    double seconds;
    double data_seconds;
    double micro_seconds;
    uint64_t free_bytes;
    uint64_t capacity;
    int nmicro;
    const double *micro_sqnorm;
    const int *micro_size;
    double full_sqnorm;
    int step_norms;
    double diff_sqnorm;
} old_step_stats;

/* the old layouts are a prefix of the new ones, field for field */
_Static_assert(offsetof(old_controller_config, auto_confirm) == offsetof(bfit_controller_config, auto_confirm),
               "the old controller configuration is a prefix of the new");
_Static_assert(offsetof(old_step_stats, diff_sqnorm) == offsetof(bfit_step_stats, diff_sqnorm),
               "the old step statistics are a prefix of the new");
_Static_assert(sizeof(old_step_stats) < sizeof(bfit_step_stats), "the new struct is larger");

static uint64_t plan(void *ud, int m)
{
    (void)ud;
    return 1000 + 100 * (uint64_t)m;
}

static old_controller_config old_cfg(void)
{
    old_controller_config c;
    /* what the old header's default gave, through the same call */
    bfit_controller_config_init((bfit_controller_config *)&c, sizeof c);
    c.plan_bytes = plan;
    c.fixed_bytes = 1000;
    c.capacity = 1000 + 100 * 64;
    c.batch = 64;
    return c;
}

/* The old program's configuration and observations run the controller as
 * the new one's do with the new fields at their defaults. */
static void test_older_program_runs(void **state)
{
    old_controller_config oc = old_cfg();
    bfit_controller_config nc;
    bfit_controller *a = NULL, *b = NULL;
    (void)state;

    assert_int_equal(oc.size, sizeof oc);
    assert_int_equal(oc.grow_after, 5); /* the defaults were written, within the old size */
    bfit_controller_config_default(&nc);
    memcpy((char *)&nc + sizeof(size_t), (char *)&oc + sizeof(size_t), sizeof oc - sizeof(size_t));
    assert_int_equal(bfit_controller_new((const bfit_controller_config *)&oc, &a), BFIT_OK);
    assert_int_equal(bfit_controller_new(&nc, &b), BFIT_OK);
    for (int64_t step = 0; step < 40; step++) {
        bfit_batch_decision da = BFIT_SIZED(bfit_batch_decision), db = BFIT_SIZED(bfit_batch_decision);
        old_step_stats so = {.size = sizeof so};
        bfit_step_stats sn = BFIT_SIZED(bfit_step_stats);
        assert_int_equal(bfit_controller_next(a, step, 0, &da), BFIT_OK);
        assert_int_equal(bfit_controller_next(b, step, 0, &db), BFIT_OK);
        assert_int_equal(da.m, db.m);
        assert_int_equal(da.batch, db.batch);
        so.step = sn.step = step;
        so.samples = sn.samples = da.batch;
        so.seconds = sn.seconds = 0.01 * (1 + step % 3);
        so.micro_seconds = sn.micro_seconds = so.seconds / 2;
        so.free_bytes = sn.free_bytes = 100 * 64;
        so.capacity = sn.capacity = oc.capacity;
        assert_int_equal(bfit_controller_observe(a, (const bfit_step_stats *)&so), BFIT_OK);
        assert_int_equal(bfit_controller_observe(b, &sn), BFIT_OK);
    }
    bfit_controller_free(a);
    bfit_controller_free(b);
}

/* A decision written into an older (smaller) struct: only its bytes. */
static void test_smaller_output_struct(void **state)
{
    old_controller_config oc = old_cfg();
    bfit_controller *c = NULL;
    struct {
        bfit_batch_decision d;
        unsigned char guard[64];
    } box;
    size_t small = offsetof(bfit_batch_decision, why); /* an older header's decision: no why, no goodput fields */
    (void)state;

    memset(&box, 0xA5, sizeof box);
    box.d.size = small;
    assert_int_equal(bfit_controller_new((const bfit_controller_config *)&oc, &c), BFIT_OK);
    assert_int_equal(bfit_controller_next(c, 0, 0, &box.d), BFIT_OK);
    assert_int_equal(box.d.size, small);
    assert_int_equal(box.d.m, 64);
    for (size_t i = small; i < sizeof box.d; i++) /* nothing past the caller's size was written */
        assert_int_equal(((unsigned char *)&box.d)[i], 0xA5);
    bfit_controller_free(c);
}

/* A newer program's larger struct: zero in the fields this library does not
 * know is fine; a set one is refused, naming the struct. */
static void test_newer_program(void **state)
{
    struct {
        bfit_controller_config c;
        int64_t future_field;
    } big;
    bfit_controller *c = NULL;
    (void)state;

    bfit_controller_config_init(&big.c, sizeof big);
    assert_int_equal(big.c.size, sizeof big);
    big.c.plan_bytes = plan;
    big.c.fixed_bytes = 1000;
    big.c.capacity = 10000;
    big.c.batch = 8;
    assert_int_equal(big.future_field, 0);
    assert_int_equal(bfit_controller_new(&big.c, &c), BFIT_OK);
    bfit_controller_free(c);
    big.future_field = 7;
    assert_int_equal(bfit_controller_new(&big.c, &c), BFIT_EINVAL);
    assert_null(c);
    assert_non_null(strstr(bfit_errmsg(), "newer batchfit"));
}

/* A struct whose size was never set is refused, saying how to set it. */
static void test_size_not_set(void **state)
{
    old_controller_config oc = old_cfg();
    bfit_controller *c = NULL;
    bfit_batch_decision d;
    (void)state;

    memset(&d, 0, sizeof d);
    assert_int_equal(bfit_controller_new((const bfit_controller_config *)&oc, &c), BFIT_OK);
    assert_int_equal(bfit_controller_next(c, 0, 0, &d), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "BFIT_SIZED"));
    bfit_controller_free(c);
}

static void test_version(void **state)
{
    (void)state;
    assert_string_equal(bfit_version(), BFIT_VERSION_STRING);
    assert_int_equal(bfit_version_number(), BFIT_VERSION_NUMBER);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_older_program_runs), cmocka_unit_test(test_smaller_output_struct),
        cmocka_unit_test(test_newer_program), cmocka_unit_test(test_size_not_set), cmocka_unit_test(test_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
