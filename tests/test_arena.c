/* test_arena.c - the arena: accounting, capacity, OOM as a returned error
 * with nothing changed, fault injection, capacity changes; size parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "base/err.h"

static void test_alloc_accounts_aligned(void **st)
{
    bfit_arena *a = bfit_arena_new(1 << 20, NULL);
    bfit_arena_stats s;
    void *p, *q;
    (void)st;
    assert_non_null(a);
    assert_int_equal(bfit_arena_alloc(a, 100, BFIT_MEM_PARAMS, &p), BFIT_OK);
    assert_int_equal((uintptr_t)p % 64, 0);
    assert_int_equal(bfit_arena_alloc(a, 64, BFIT_MEM_ACTIVATIONS, &q), BFIT_OK);
    assert_int_equal((uintptr_t)q % 64, 0);
    memset(p, 1, 100);
    memset(q, 2, 64);
    bfit_arena_stats_get(a, &s);
    assert_int_equal(s.current, 128 + 64);
    assert_int_equal(s.cur[BFIT_MEM_PARAMS], 128);
    assert_int_equal(s.cur[BFIT_MEM_ACTIVATIONS], 64);
    bfit_arena_release(a, p);
    bfit_arena_stats_get(a, &s);
    assert_int_equal(s.current, 64);
    assert_int_equal(s.peak, 192);
    assert_int_equal(s.peak_cat[BFIT_MEM_PARAMS], 128);
    assert_int_equal(s.cur[BFIT_MEM_PARAMS], 0);
    bfit_arena_release(a, q);
    bfit_arena_free(a);
}

static void test_oom_leaves_arena_unchanged(void **st)
{
    bfit_arena *a = bfit_arena_new(1000, NULL);
    bfit_arena_stats before, after;
    void *p, *q = (void *)1;
    (void)st;
    assert_int_equal(bfit_arena_alloc(a, 900, BFIT_MEM_INPUT, &p), BFIT_OK);
    bfit_arena_stats_get(a, &before);
    assert_int_equal(bfit_arena_alloc(a, 200, BFIT_MEM_INPUT, &q), BFIT_ENOMEM);
    assert_null(q);
    assert_non_null(strstr(bfit_errmsg(), "out of memory"));
    bfit_arena_stats_get(a, &after);
    assert_int_equal(after.current, before.current);
    assert_int_equal(after.peak, before.peak);
    assert_int_equal(after.nalloc, before.nalloc);
    assert_int_equal(after.nfail, before.nfail + 1);
    assert_memory_equal(after.cur, before.cur, sizeof before.cur);
    /* exactly the remaining capacity still fits: 1000 - 960 = 40 -> 64 does not */
    assert_int_equal(bfit_arena_alloc(a, 1, BFIT_MEM_INPUT, &q), BFIT_ENOMEM);
    bfit_arena_release(a, p);
    assert_int_equal(bfit_arena_alloc(a, 960, BFIT_MEM_INPUT, &p), BFIT_OK);
    bfit_arena_release(a, p);
    bfit_arena_free(a);
}

static void test_fail_nth(void **st)
{
    bfit_arena *a = bfit_arena_new(1 << 20, NULL);
    void *p[4];
    (void)st;
    bfit_arena_fail_nth(a, 3);
    assert_int_equal(bfit_arena_alloc(a, 10, BFIT_MEM_OTHER, &p[0]), BFIT_OK);
    assert_int_equal(bfit_arena_alloc(a, 10, BFIT_MEM_OTHER, &p[1]), BFIT_OK);
    assert_int_equal(bfit_arena_alloc(a, 10, BFIT_MEM_OTHER, &p[2]), BFIT_ENOMEM);
    assert_non_null(strstr(bfit_errmsg(), "injected"));
    assert_int_equal(bfit_arena_alloc(a, 10, BFIT_MEM_OTHER, &p[3]), BFIT_OK); /* one-shot */
    bfit_arena_release(a, p[0]);
    bfit_arena_release(a, p[1]);
    bfit_arena_release(a, p[3]);
    bfit_arena_free(a);
}

/* A block source that refuses: shortage (BFIT_ENOMEM, the trainer may
 * retry smaller) or a device failure (its own code and message, which the
 * arena passes on: no retry would help). */
static int refusing_alloc(void *ud, size_t n, void **out)
{
    int code = *(int *)ud;
    (void)n;
    *out = NULL;
    if (code == BFIT_EDEVICE)
        return bfit_fail(BFIT_EDEVICE, "the GPU fell off the bus");
    return code;
}

static void refusing_free(void *ud, void *p, size_t n)
{
    (void)ud, (void)p, (void)n;
}

static void test_block_source_failures(void **st)
{
    int code = BFIT_ENOMEM;
    bfit_block_source src = {refusing_alloc, refusing_free, NULL, &code, 0};
    bfit_arena *a = bfit_arena_new(1 << 20, &src);
    bfit_arena_stats s;
    void *p = (void *)1;
    (void)st;
    assert_int_equal(bfit_arena_alloc(a, 100, BFIT_MEM_PARAMS, &p), BFIT_ENOMEM);
    assert_null(p);
    assert_non_null(strstr(bfit_errmsg(), "refused a block"));
    code = BFIT_EDEVICE;
    assert_int_equal(bfit_arena_alloc(a, 100, BFIT_MEM_PARAMS, &p), BFIT_EDEVICE);
    assert_non_null(strstr(bfit_errmsg(), "arena: getting a block for params: the GPU fell off the bus"));
    bfit_arena_stats_get(a, &s);
    assert_int_equal(s.nfail, 2);
    assert_int_equal(s.current, 0);
    assert_int_equal(s.reserved, 0);
    bfit_arena_free(a);
}

static void test_capacity_changes(void **st)
{
    bfit_arena *a = bfit_arena_new(4096, NULL);
    void *p, *q;
    (void)st;
    assert_int_equal(bfit_arena_alloc(a, 2048, BFIT_MEM_ACTIVATIONS, &p), BFIT_OK);
    bfit_arena_set_capacity(a, 1024); /* below holdings: kept, nothing new */
    assert_int_equal(bfit_arena_available(a), 0);
    assert_int_equal(bfit_arena_alloc(a, 1, BFIT_MEM_ACTIVATIONS, &q), BFIT_ENOMEM);
    bfit_arena_set_capacity(a, 8192);
    assert_int_equal(bfit_arena_available(a), 8192 - 2048);
    assert_int_equal(bfit_arena_alloc(a, 6144, BFIT_MEM_ACTIVATIONS, &q), BFIT_OK);
    bfit_arena_release(a, p);
    bfit_arena_release(a, q);
    bfit_arena_free(a);
}

static void test_parse_size_good(void **st)
{
    uint64_t v;
    (void)st;
    assert_int_equal(bfit_parse_size("512MiB", &v), BFIT_OK);
    assert_int_equal(v, 512ull << 20);
    assert_int_equal(bfit_parse_size("1.5GiB", &v), BFIT_OK);
    assert_int_equal(v, 3ull << 29);
    assert_int_equal(bfit_parse_size("8GB", &v), BFIT_OK);
    assert_int_equal(v, 8000000000ull);
    assert_int_equal(bfit_parse_size("4096", &v), BFIT_OK);
    assert_int_equal(v, 4096);
    assert_int_equal(bfit_parse_size("11GiB", &v), BFIT_OK);
    assert_int_equal(v, 11ull << 30);
    assert_int_equal(bfit_parse_size("100kB", &v), BFIT_OK);
    assert_int_equal(v, 100000);
}

static void test_parse_size_bad(void **st)
{
    uint64_t v = 77;
    (void)st;
    assert_int_equal(bfit_parse_size("12XB", &v), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "unknown unit 'XB'"));
    assert_int_equal(bfit_parse_size("-1", &v), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "negative"));
    assert_int_equal(bfit_parse_size("", &v), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "empty"));
    assert_int_equal(bfit_parse_size("99999999999TiB", &v), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "too large"));
    assert_int_equal(bfit_parse_size("GiB", &v), BFIT_EINVAL);
    assert_int_equal(bfit_parse_size("0.5", &v), BFIT_EINVAL);
    assert_int_equal(v, 77); /* untouched on error */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_accounts_aligned),
        cmocka_unit_test(test_oom_leaves_arena_unchanged),
        cmocka_unit_test(test_fail_nth),
        cmocka_unit_test(test_block_source_failures),
        cmocka_unit_test(test_capacity_changes),
        cmocka_unit_test(test_parse_size_good),
        cmocka_unit_test(test_parse_size_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
