/* test_algo_memo.c - the CUDA device's memo of convolution algorithms
 * (src/device/cuda_memo.c, plain C: compiled into this test, so it runs
 * without CUDA): a shape put is found with its choice, another is not,
 * and a full memo gives way least recently used first. */
#include "device/cuda_memo.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <cmocka.h>

static bfit_op_desc conv(bfit_op_kind kind, int64_t n, int64_t c)
{
    bfit_op_desc d = {.kind = kind, .dtype = BFIT_F32};
    d.u.conv = (typeof(d.u.conv)){.n = n, .ic = c, .ih = 14, .iw = 14, .oc = c, .oh = 14, .ow = 14, .kh = 3,
                                  .kw = 3, .sh = 1, .sw = 1, .ph = 1, .pw = 1};
    return d;
}

static cuda_memo_key key_of(bfit_op_desc d)
{
    cuda_memo_key k;
    cuda_memo_key_conv(&d, &k);
    return k;
}

static void test_found_with_its_choice(void **st)
{
    cuda_memo *m = calloc(1, sizeof *m);
    cuda_memo_key a = key_of(conv(BFIT_OP_CONV_FWD, 32, 256));
    cuda_memo_key other[4] = {key_of(conv(BFIT_OP_CONV_FWD, 33, 256)), key_of(conv(BFIT_OP_CONV_BWD_DATA, 32, 256)),
                              key_of(conv(BFIT_OP_CONV_FWD, 32, 128)), a};
    bfit_op_desc bf = conv(BFIT_OP_CONV_FWD, 32, 256);
    int algo = -1;
    size_t ws = 1;
    (void)st;
    assert_non_null(m);
    bf.dtype = BFIT_BF16;
    other[3] = key_of(bf);
    assert_int_equal(cuda_memo_find(m, &a, &algo, &ws), 0);
    cuda_memo_put(m, &a, 6, 123456);
    assert_int_equal(cuda_memo_find(m, &a, &algo, &ws), 1);
    assert_int_equal(algo, 6);
    assert_int_equal(ws, 123456);
    /* another batch, kind, width or dtype is another shape */
    for (int i = 0; i < 4; i++)
        assert_int_equal(cuda_memo_find(m, &other[i], &algo, &ws), 0);
    /* put again: replaced, not duplicated */
    cuda_memo_put(m, &a, 1, 0);
    assert_int_equal(cuda_memo_find(m, &a, &algo, &ws), 1);
    assert_int_equal(algo, 1);
    assert_int_equal(ws, 0);
    assert_int_equal(m->hits, 2);
    assert_int_equal(m->misses, 5);
    free(m);
}

/* Three times its size in shapes: the last CUDA_MEMO_WAYS put are all
 * there (each set keeps its latest), no more than CUDA_MEMO in all, and a
 * shape found after every put is never the one to give way. */
static void test_least_recently_used_gives_way(void **st)
{
    cuda_memo *m = calloc(1, sizeof *m);
    cuda_memo_key kept = key_of(conv(BFIT_OP_CONV_BWD_WEIGHTS, 7, 64));
    int algo, found = 0, total = 3 * CUDA_MEMO;
    size_t ws;
    (void)st;
    assert_non_null(m);
    cuda_memo_put(m, &kept, 2, 77);
    for (int i = 1; i <= total; i++) {
        cuda_memo_key k = key_of(conv(BFIT_OP_CONV_FWD, i, 64));
        cuda_memo_put(m, &k, i % 7, (size_t)i);
        if (!cuda_memo_find(m, &kept, &algo, &ws))
            fail_msg("the shape found after every put gave way at put %d", i);
    }
    assert_int_equal(algo, 2);
    assert_int_equal(ws, 77);
    for (int i = 1; i <= total; i++) {
        cuda_memo_key k = key_of(conv(BFIT_OP_CONV_FWD, i, 64));
        int in = cuda_memo_find(m, &k, &algo, &ws);
        if (in && (algo != i % 7 || ws != (size_t)i))
            fail_msg("shape %d found with algo %d ws %zu", i, algo, ws);
        if (i > total - CUDA_MEMO_WAYS && !in)
            fail_msg("shape %d, among the last %d put, gave way", i, CUDA_MEMO_WAYS);
        found += in;
    }
    print_message("  %d of %d shapes kept (memo of %d)\n", found, total, CUDA_MEMO);
    assert_true(found <= CUDA_MEMO - 1); /* `kept` holds one slot */
    assert_true(found >= CUDA_MEMO / 2);
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_found_with_its_choice),
        cmocka_unit_test(test_least_recently_used_gives_way),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
