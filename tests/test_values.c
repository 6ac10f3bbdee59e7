/* test_values.c - one parser and one set of limits per kind of value: whole
 * numbers without overflow, capacities that are not 0, and the batch and
 * memory schedules accepting and refusing alike (and like --batch,
 * --max-steps and --memory); a configuration filled by a program obeys the
 * same limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "batchfit.h"
#include "internal.h"

static void has(const char *what, const char *words)
{
    if (!strstr(bfit_errmsg(), words))
        fail_msg("%s: message '%s' lacks '%s'", what, bfit_errmsg(), words);
}

static void test_whole_numbers(void **st)
{
    int64_t v;
    (void)st;
    assert_int_equal(bfit_parse_int("42", 1, 100, &v), BFIT_OK);
    assert_int_equal(v, 42);
    assert_int_equal(bfit_parse_int("-7", -10, 10, &v), BFIT_OK);
    assert_int_equal(v, -7);
    assert_int_equal(bfit_parse_int("+7", 0, 10, &v), BFIT_OK);
    assert_int_equal(v, 7);
    assert_int_equal(bfit_parse_int("9223372036854775807", 0, INT64_MAX, &v), BFIT_OK);
    assert_true(v == INT64_MAX);
    assert_int_equal(bfit_parse_int("-9223372036854775808", INT64_MIN, 0, &v), BFIT_OK);
    assert_true(v == INT64_MIN);
    assert_int_equal(bfit_parse_int("0", 1, 16777216, &v), BFIT_EINVAL);
    has("0", "0 is out of range: expected 1 to 16777216");
    assert_int_equal(bfit_parse_int("x1", 1, 10, &v), BFIT_EINVAL);
    has("x1", "'x1' is not a whole number");
    assert_int_equal(bfit_parse_int("", 1, 10, &v), BFIT_EINVAL);
    assert_int_equal(bfit_parse_int(" 5", 1, 10, &v), BFIT_EINVAL);
    assert_int_equal(bfit_parse_int("5 ", 1, 10, &v), BFIT_EINVAL);
    assert_int_equal(bfit_parse_int("5.0", 1, 10, &v), BFIT_EINVAL);
    assert_int_equal(bfit_parse_int("-", 1, 10, &v), BFIT_EINVAL);
    assert_int_equal(bfit_parse_int("-1", 0, 10, &v), BFIT_EINVAL);
    has("-1", "-1 is out of range");
    assert_int_equal(bfit_parse_int("-0", 0, 10, &v), BFIT_OK);
    assert_int_equal(v, 0);
    /* too long for any integer: out of range, not wrapped around */
    assert_int_equal(bfit_parse_int("99999999999999999999", 1, BFIT_COUNT_MAX, &v), BFIT_EINVAL);
    has("20 nines", "99999999999999999999 is out of range: expected 1 to 1000000000000000");
    assert_int_equal(bfit_parse_int("18446744073709551617", 0, INT64_MAX, &v), BFIT_EINVAL);
    has("2^64 + 1", "out of range");
    assert_int_equal(bfit_parse_int("-9223372036854775809", INT64_MIN, 0, &v), BFIT_EINVAL);
    assert_int_equal(bfit_parse_int("999999999999999999999999999x", 0, 10, &v), BFIT_EINVAL);
    has("digits then x", "is not a whole number");
}

static void test_capacity(void **st)
{
    uint64_t v;
    (void)st;
    assert_int_equal(bfit_parse_capacity("64MiB", &v), BFIT_OK);
    assert_int_equal(v, 64u << 20);
    assert_int_equal(bfit_parse_capacity("0", &v), BFIT_EINVAL);
    has("0", "a size of 0 bytes leaves no memory");
    assert_int_equal(bfit_parse_capacity("0MiB", &v), BFIT_EINVAL);
    assert_int_equal(bfit_parse_capacity("-1", &v), BFIT_EINVAL);
}

/* The same list syntax, the same rules for both schedules. */
static void test_schedules_agree(void **st)
{
    static const struct {
        const char *batch, *mem, *words;
    } bad[] = {
        {"0:32,,5:64", "0:6M,,5:3M", "at character 6: expected a step number"},
        {"0:32,", "0:6M,", "at character 6: expected a step number"},
        {",0:32", ",0:64MiB", "at character 1: expected a step number"},
        {"", "", "at character 1: expected a step number"},
        {"99999999999999999999:32", "99999999999999999999:64MiB",
         "at character 1: step 99999999999999999999 is out of range: expected 0 to 1000000000000000"},
        {"1000000000000001:32", "1000000000000001:64MiB", "out of range"},
        {"-1:32", "-1:64MiB", "at character 1: expected a step number"},
        {"5:32,5:64", "5:64MiB,5:32MiB", "point 2: step 5 does not come after 5"},
        {"0 32", "0 64MiB", "at character 2: expected ':' after step 0"},
        {"0:32;5:64", "0:64MiB;5:32MiB", "at character"},
    };
    bfit_batch_point bp[8];
    bfit_mem_point mp[8];
    int n;
    (void)st;
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(bfit_batch_schedule_parse(bad[i].batch, bp, 8, &n), BFIT_EINVAL);
        has(bad[i].batch, bad[i].words);
        assert_int_equal(bfit_mem_schedule_parse(bad[i].mem, mp, 8, &n), BFIT_EINVAL);
        has(bad[i].mem, bad[i].words);
    }
    /* blanks around items, in both */
    assert_int_equal(bfit_batch_schedule_parse(" 0:32 , 1000:64 ", bp, 8, &n), BFIT_OK);
    assert_int_equal(n, 2);
    assert_true(bp[1].at == 1000 && bp[1].batch == 64);
    assert_int_equal(bfit_mem_schedule_parse(" 0:64MiB , 1000:1.5GiB ", mp, 8, &n), BFIT_OK);
    assert_int_equal(n, 2);
    assert_true(mp[1].step == 1000 && mp[1].capacity == 3ull << 29);
    assert_int_equal(bfit_mem_schedule_parse("1000000000000000:1GiB", mp, 8, &n), BFIT_OK);
    /* a batch as --batch allows it, a capacity as --memory allows it */
    assert_int_equal(bfit_batch_schedule_parse("0:16777216", bp, 8, &n), BFIT_OK);
    assert_int_equal(bfit_batch_schedule_parse("0:99999999", bp, 8, &n), BFIT_EINVAL);
    has("0:99999999", "at character 3: expected a batch size from 1 to 16777216");
    assert_int_equal(bfit_batch_schedule_parse("0:0", bp, 8, &n), BFIT_EINVAL);
    assert_int_equal(bfit_mem_schedule_parse("2:0", mp, 8, &n), BFIT_EINVAL);
    has("2:0", "at character 3: a size of 0 bytes leaves no memory");
    assert_int_equal(bfit_mem_schedule_parse("2:12XB", mp, 8, &n), BFIT_EINVAL);
    has("2:12XB", "unknown unit 'XB'");
    assert_int_equal(bfit_mem_schedule_parse("0:1MiB,1:2MiB,2:3MiB", mp, 2, &n), BFIT_EINVAL);
    has("too many", "more than 2 points");
    /* epochs in the batch schedule, to the epochs' limit */
    assert_int_equal(bfit_batch_schedule_parse("e0:32,e1000000:64", bp, 8, &n), BFIT_OK);
    assert_int_equal(bfit_batch_schedule_parse("e0:32,e1000001:64", bp, 8, &n), BFIT_EINVAL);
    has("e1000001", "epoch 1000001 is out of range: expected 0 to 1000000");
}

/* A list of 100 points is longer than a message: the reason after the
 * quoted list, and the part of the list it is about, still show. */
static void test_long_schedules(void **st)
{
    static bfit_batch_point bp[BFIT_MEM_SCHEDULE_MAX];
    static bfit_mem_point mp[BFIT_MEM_SCHEDULE_MAX], big[200]; /* big: room past the limit, to reach the end */
    char mem[4096], batch[4096], bad[4096];
    size_t a = 0, b = 0;
    int n;
    (void)st;
    for (int i = 0; i < 100; i++) {
        a += (size_t)snprintf(mem + a, sizeof mem - a, "%s%d:%dMiB", i ? "," : "", 1000 + i * 10, 1000 + i);
        b += (size_t)snprintf(batch + b, sizeof batch - b, "%s%d:%d", i ? "," : "", 1000 + i * 10, 1000 + i);
    }
    assert_true(a > 1100 && b > 900);
    assert_int_equal(bfit_mem_schedule_parse(mem, mp, BFIT_MEM_SCHEDULE_MAX, &n), BFIT_EINVAL);
    has("100 memory points", "more than 64 points");
    has("100 memory points", "1640:1064MiB"); /* the 65th point, the one too many */
    assert_int_equal(bfit_batch_schedule_parse(batch, bp, BFIT_MEM_SCHEDULE_MAX, &n), BFIT_EINVAL);
    has("100 batch points", "more than 64 points");
    /* a fault at the end of a long list: its reason and its place */
    memcpy(bad, mem, a);
    strcpy(bad + a, ",5000:12XB");
    assert_int_equal(bfit_mem_schedule_parse(bad, big, 200, &n), BFIT_EINVAL);
    has("a bad unit at the end", "unknown unit 'XB'");
    has("a bad unit at the end", "1990:1099MiB,5000:12XB");
    strcpy(bad + a, ",5:1MiB");
    assert_int_equal(bfit_mem_schedule_parse(bad, big, 200, &n), BFIT_EINVAL);
    has("out of order at the end", "point 101: step 5 does not come after 1990");
    assert_true(strlen(bfit_errmsg()) < 400);
}

/* A configuration a program fills obeys the same limits. */
static void test_config_limits(void **st)
{
    bfit_train_cfg c = bfit_train_cfg_default();
    bfit_batch_point bp[1] = {{0, 0, 99999999}};
    bfit_mem_point mp[2] = {{0, 64u << 20}, {2, 0}};
    bfit_run *r;
    (void)st;
    c.device_name = "cpu"; /* the CPU is meant: --device auto could take a GPU */
    c.model = "mlp";
    c.batch = 99999999;
    assert_int_equal(bfit_run_new_from(&c, &r), BFIT_EINVAL);
    assert_string_equal(bfit_errfield(), "batch");
    has("batch", "99999999 is out of range: expected 1 to 16777216");
    c.batch = 32;
    c.max_steps = BFIT_COUNT_MAX + 1;
    assert_int_equal(bfit_run_new_from(&c, &r), BFIT_EINVAL);
    assert_string_equal(bfit_errfield(), "max_steps");
    c.max_steps = 0;
    c.batch_schedule = bp;
    c.nbatch_schedule = 1;
    assert_int_equal(bfit_run_new_from(&c, &r), BFIT_EINVAL);
    assert_string_equal(bfit_errfield(), "batch_schedule");
    c.batch_schedule = NULL;
    c.nbatch_schedule = 0;
    c.memory_schedule = mp;
    c.nmemory_schedule = 2;
    assert_int_equal(bfit_run_new_from(&c, &r), BFIT_EINVAL);
    assert_string_equal(bfit_errfield(), "memory_schedule");
    has("memory_schedule", "point 2");
}

/* Durations: seconds as a number (a fraction too) or with a unit; a bound
 * said as one, not as "not a duration". */
static void test_durations(void **st)
{
    static const struct { const char *text; double s; } ok[] = {
        {"90", 90}, {"1.5", 1.5}, {"0", 0}, {"30s", 30}, {"0.5s", 0.5}, {"5min", 300}, {"2h", 7200}, {"1000000000", 1e9}};
    static const char *const bad[] = {"", "abc", "1.5x", "-1", "s", "1e3", "1.5 s"};
    static const char *const big[] = {"1000000001", "999999999999h", "300000h"};
    double v;
    (void)st;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        assert_int_equal(bfit_parse_duration(ok[i].text, &v), BFIT_OK);
        assert_true(v == ok[i].s);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(bfit_parse_duration(bad[i], &v), BFIT_EINVAL);
        has(bad[i], "is not a duration (like 90, 1.5, 30s, 5min, 1h)");
    }
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        assert_int_equal(bfit_parse_duration(big[i], &v), BFIT_EINVAL);
        has(big[i], "is out of range: at most 1e9 seconds");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_numbers),
        cmocka_unit_test(test_capacity),
        cmocka_unit_test(test_schedules_agree),
        cmocka_unit_test(test_long_schedules),
        cmocka_unit_test(test_config_limits),
        cmocka_unit_test(test_durations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
