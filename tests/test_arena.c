/* test_arena.c - the arena: accounting, capacity, OOM as a returned error
 * with nothing changed, fault injection, capacity changes, its host-side
 * bookkeeping (foreign pointers, long interleaved alloc/release runs, over
 * blocks of their own and over shared blocks); size parsing.
 *
 * These arenas are over host memory (a NULL block source, or a host source
 * below), so the tests may write into what they get. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "internal.h"

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

/* A shared allocation: one block, each part counted to its category and
 * given back from both; refused whole at the capacity; a bad category. */
static void test_alloc_shared_counts_parts(void **st)
{
    bfit_arena *a = bfit_arena_new(1000, NULL);
    bfit_arena_stats s;
    void *p, *q;
    (void)st;
    assert_non_null(a);
    assert_int_equal(bfit_arena_alloc_shared(a, 300, BFIT_MEM_ACTIVATIONS, 100, BFIT_MEM_ACT_GRADS, &p), BFIT_OK);
    assert_int_equal((uintptr_t)p % 64, 0);
    memset(p, 3, 320 + 128); /* all of it is ours */
    bfit_arena_stats_get(a, &s);
    assert_int_equal(s.current, 320 + 128);
    assert_int_equal(s.cur[BFIT_MEM_ACTIVATIONS], 320);
    assert_int_equal(s.cur[BFIT_MEM_ACT_GRADS], 128);
    assert_int_equal(s.peak_cat[BFIT_MEM_ACT_GRADS], 128);
    /* 448 + 576 > 1000: refused, nothing changed */
    assert_int_equal(bfit_arena_alloc_shared(a, 500, BFIT_MEM_ACTIVATIONS, 1, BFIT_MEM_ACT_GRADS, &q), BFIT_ENOMEM);
    assert_null(q);
    assert_int_equal(bfit_arena_alloc_shared(a, 8, BFIT_MEM_NCAT, 8, BFIT_MEM_ACT_GRADS, &q), BFIT_EINVAL);
    bfit_arena_stats_get(a, &s);
    assert_int_equal(s.current, 448);
    bfit_arena_release(a, p);
    bfit_arena_stats_get(a, &s);
    assert_int_equal(s.current, 0);
    assert_int_equal(s.cur[BFIT_MEM_ACTIVATIONS], 0);
    assert_int_equal(s.cur[BFIT_MEM_ACT_GRADS], 0);
    assert_int_equal(s.peak, 448);
    /* no second part: the same as bfit_arena_alloc */
    assert_int_equal(bfit_arena_alloc_shared(a, 0, BFIT_MEM_INPUT, 0, BFIT_MEM_ACT_GRADS, &p), BFIT_OK);
    bfit_arena_stats_get(a, &s);
    assert_int_equal(s.cur[BFIT_MEM_INPUT], 64);
    assert_int_equal(s.cur[BFIT_MEM_ACT_GRADS], 0);
    bfit_arena_release(a, p);
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

/* A host block source with 4 KiB granularity, so allocations share blocks. */
static int shared_alloc(void *ud, size_t n, void **out)
{
    (void)ud;
    *out = aligned_alloc(4096, n);
    return *out ? BFIT_OK : BFIT_ENOMEM;
}
static void shared_free(void *ud, void *p, size_t n)
{
    (void)ud;
    (void)n;
    free(p);
}

/* Releasing what the arena did not give (or no longer holds) changes
 * nothing: a pointer inside an allocation, one from malloc, one on the
 * stack, one released already. Over shared blocks the allocations lie in
 * address order, so a live one (q) follows each foreign pointer: an arena
 * that took "the next allocation" for it would release q. */
static void release_foreign(bfit_arena *a)
{
    bfit_arena_stats before, after;
    char *p, *z, *q, local[64];
    void *heap = malloc(64), *r;
    assert_int_equal(bfit_arena_alloc(a, 300, BFIT_MEM_PARAMS, (void **)&p), BFIT_OK);
    assert_int_equal(bfit_arena_alloc(a, 100, BFIT_MEM_GRADS, (void **)&z), BFIT_OK);
    assert_int_equal(bfit_arena_alloc(a, 100, BFIT_MEM_GRADS, (void **)&q), BFIT_OK);
    bfit_arena_release(a, z);
    bfit_arena_stats_get(a, &before);
    bfit_arena_release(a, p + 64);
    bfit_arena_release(a, p + 1);
    bfit_arena_release(a, heap);
    bfit_arena_release(a, local);
    bfit_arena_release(a, z); /* twice */
    bfit_arena_release(a, NULL);
    bfit_arena_stats_get(a, &after);
    assert_memory_equal(&after, &before, sizeof before);
    /* p and q are still held and released properly; the arena still works */
    bfit_arena_release(a, p);
    bfit_arena_release(a, q);
    assert_int_equal(bfit_arena_alloc(a, 64, BFIT_MEM_OTHER, &r), BFIT_OK);
    bfit_arena_release(a, r);
    bfit_arena_stats_get(a, &after);
    assert_int_equal(after.current, 0);
    assert_int_equal(after.reserved, 0);
    assert_int_equal(after.nfree, before.nfree + 3);
    free(heap);
}

static void test_release_foreign_ignored(void **st)
{
    bfit_block_source src = {shared_alloc, shared_free, NULL, NULL, 4096};
    bfit_arena *a = bfit_arena_new(1 << 20, NULL);
    (void)st;
    release_foreign(a);
    bfit_arena_free(a);
    a = bfit_arena_new(1 << 20, &src);
    release_foreign(a);
    bfit_arena_free(a);
}

#define NSLOT 48

/* The model of what the arena should say. */
typedef struct model {
    uint64_t cur[BFIT_MEM_NCAT], peak_cat[BFIT_MEM_NCAT], current, peak, nalloc, nfree;
} model;

static void model_check(const bfit_arena *a, const model *m, int shared)
{
    bfit_arena_stats s;
    bfit_arena_stats_get(a, &s);
    assert_int_equal(s.current, m->current);
    assert_int_equal(s.peak, m->peak);
    assert_int_equal(s.nalloc, m->nalloc);
    assert_int_equal(s.nfree, m->nfree);
    assert_memory_equal(s.cur, m->cur, sizeof m->cur);
    assert_memory_equal(s.peak_cat, m->peak_cat, sizeof m->peak_cat);
    /* each allocation its own block: reserved is current; shared blocks:
     * at least current, and none held when nothing is */
    if (!shared)
        assert_int_equal(s.reserved, s.current);
    assert_true(s.reserved >= s.current && s.reserved_peak >= s.reserved);
    if (s.current == 0)
        assert_int_equal(s.reserved, 0);
}

/* Random alloc/release, each allocation filled with its own byte; the
 * fill must be intact at release (placements never overlap). */
static void interleave(bfit_arena *a, int shared, uint64_t seed)
{
    unsigned char *p[NSLOT] = {0};
    size_t n[NSLOT];
    int cat[NSLOT];
    model m;
    memset(&m, 0, sizeof m);
    for (int step = 0; step < 4000; step++) {
        int k;
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        k = (int)((seed >> 33) % NSLOT);
        if (p[k]) {
            for (size_t i = 0; i < n[k]; i++)
                if (p[k][i] != (unsigned char)k)
                    fail_msg("step %d: allocation %d overwritten at byte %zu", step, k, i);
            bfit_arena_release(a, p[k]);
            p[k] = NULL;
            m.current -= BFIT_ALIGN_UP(n[k]);
            m.cur[cat[k]] -= BFIT_ALIGN_UP(n[k]);
            m.nfree++;
        } else {
            n[k] = 1 + (size_t)((seed >> 13) % (seed & 1 ? 300 : 9000));
            cat[k] = (int)((seed >> 7) % BFIT_MEM_NCAT);
            assert_int_equal(bfit_arena_alloc(a, n[k], (bfit_mem_cat)cat[k], (void **)&p[k]), BFIT_OK);
            assert_int_equal((uintptr_t)p[k] % 64, 0);
            memset(p[k], k, n[k]);
            m.current += BFIT_ALIGN_UP(n[k]);
            m.cur[cat[k]] += BFIT_ALIGN_UP(n[k]);
            m.nalloc++;
            if (m.current > m.peak)
                m.peak = m.current;
            if (m.cur[cat[k]] > m.peak_cat[cat[k]])
                m.peak_cat[cat[k]] = m.cur[cat[k]];
        }
        model_check(a, &m, shared);
        if (step == 2000) { /* the peaks restart from now */
            bfit_arena_reset_peak(a);
            m.peak = m.current;
            memcpy(m.peak_cat, m.cur, sizeof m.cur);
            model_check(a, &m, shared);
        }
    }
    for (int k = 0; k < NSLOT; k++)
        if (p[k]) {
            bfit_arena_release(a, p[k]);
            m.current -= BFIT_ALIGN_UP(n[k]);
            m.cur[cat[k]] -= BFIT_ALIGN_UP(n[k]);
            m.nfree++;
        }
    model_check(a, &m, shared);
}

static void test_interleaved_alloc_release(void **st)
{
    bfit_block_source src = {shared_alloc, shared_free, NULL, NULL, 4096};
    bfit_arena *a = bfit_arena_new(1ull << 30, NULL);
    (void)st;
    interleave(a, 0, 1);
    bfit_arena_free(a);
    a = bfit_arena_new(1ull << 30, &src);
    interleave(a, 1, 2);
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
        cmocka_unit_test(test_alloc_shared_counts_parts),
        cmocka_unit_test(test_oom_leaves_arena_unchanged),
        cmocka_unit_test(test_fail_nth),
        cmocka_unit_test(test_block_source_failures),
        cmocka_unit_test(test_capacity_changes),
        cmocka_unit_test(test_release_foreign_ignored),
        cmocka_unit_test(test_interleaved_alloc_release),
        cmocka_unit_test(test_parse_size_good),
        cmocka_unit_test(test_parse_size_bad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
