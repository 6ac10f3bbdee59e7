/* test_data_stream.c - the sample stream: every sample exactly once per
 * epoch whatever the take sizes, retry by seeking back, seeded order, the
 * same bytes with and without prefetch, reproducible augmentation, the wait
 * on the test clock. Samples carry their own index as a feature so the test
 * can count them. */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "internal.h"

#include "base/aslimit.h"
#include "data/data.h"

#define N 1000

/* Sample i has features (i, -i) and label i % 7. */
static bfit_dataset *index_set(void)
{
    static float x[2 * N];
    static int32_t y[N];
    bfit_dataset *d = NULL;
    for (int i = 0; i < N; i++)
        x[2 * i] = (float)i, x[2 * i + 1] = (float)-i, y[i] = i % 7;
    assert_int_equal(bfit_dataset_from_floats(bfit_shape_vec(2), N, 7, x, y, &d), BFIT_OK);
    return d;
}

static bfit_stream *stream(const bfit_dataset *d, uint64_t seed, int shuffle, int prefetch, int max_take)
{
    bfit_stream_cfg cfg = {.seed = seed, .shuffle = shuffle, .prefetch = prefetch, .max_take = max_take};
    bfit_stream *s = NULL;
    assert_int_equal(bfit_stream_new(d, &cfg, &s), BFIT_OK);
    return s;
}

/* Take sizes that change all the time, as a controller might. */
static const int sizes[] = {1, 7, 128, 3, 64, 5, 200, 2, 33};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))

/* Run one epoch with the take-size pattern starting at offset; record the
 * order of sample indices in order[]. */
static void one_epoch(bfit_stream *s, int offset, int *order)
{
    float x[2 * 200 + 2];
    int32_t y[200 + 1];
    int seen = 0, got, t = offset;
    for (;;) {
        int n = sizes[t++ % NSIZES];
        int64_t rem = bfit_stream_remaining(s);
        x[2 * n] = x[2 * n + 1] = 12345.0f, y[n] = -77; /* nothing may be written past n */
        assert_int_equal(bfit_stream_take(s, n, x, y, &got), BFIT_OK);
        assert_int_equal(got, rem < n ? rem : n);
        assert_float_equal(x[2 * n], 12345.0f, 0);
        assert_float_equal(x[2 * n + 1], 12345.0f, 0);
        assert_int_equal(y[n], -77);
        if (got == 0)
            break;
        for (int k = 0; k < got; k++) {
            int i = (int)x[2 * k];
            assert_true(i >= 0 && i < N);
            assert_float_equal(x[2 * k + 1], -i, 0);
            assert_int_equal(y[k], i % 7);
            order[seen++] = i;
        }
    }
    assert_int_equal(seen, N);
    assert_int_equal(bfit_stream_remaining(s), 0);
}

static void assert_permutation(const int *order)
{
    static char hit[N];
    memset(hit, 0, sizeof hit);
    for (int k = 0; k < N; k++) {
        assert_int_equal(hit[order[k]], 0);
        hit[order[k]] = 1;
    }
}

static void test_each_sample_once_any_split(void **st)
{
    bfit_dataset *d = index_set();
    static int a[N], b[N];
    (void)st;
    for (int prefetch = 0; prefetch < 2; prefetch++) {
        bfit_stream *s = stream(d, 42, 1, prefetch, 200);
        for (int e = 0; e < 3; e++) {
            one_epoch(s, e, a);
            assert_permutation(a);
            assert_int_equal(bfit_stream_tell(s).epoch, e);
            bfit_stream_next_epoch(s);
        }
        bfit_stream_free(s);
    }
    /* the split does not change the order */
    bfit_stream *s1 = stream(d, 42, 1, 0, 200), *s2 = stream(d, 42, 1, 1, 200);
    one_epoch(s1, 0, a);
    one_epoch(s2, 4, b);
    assert_memory_equal(a, b, sizeof a);
    bfit_stream_free(s1);
    bfit_stream_free(s2);
    bfit_dataset_free(d);
}

/* An OOM retry: take m, pretend the step failed, seek back, take fewer. */
static void test_seek_back_retry(void **st)
{
    bfit_dataset *d = index_set();
    static int order[N], ref[N];
    float x[2 * 64];
    int32_t y[64];
    int seen = 0, got, m = 64, fails = 0;
    (void)st;
    bfit_stream *r = stream(d, 9, 1, 0, 200);
    one_epoch(r, 0, ref);
    bfit_stream_free(r);

    bfit_stream *s = stream(d, 9, 1, 1, 64);
    while (bfit_stream_remaining(s) > 0) {
        bfit_cursor c = bfit_stream_tell(s);
        assert_int_equal(bfit_stream_take(s, m, x, y, &got), BFIT_OK);
        if (m > 4 && (seen / 100) % 2 == 0 && fails < 6) { /* "out of memory": retry smaller */
            assert_int_equal(bfit_stream_seek(s, c), BFIT_OK);
            assert_int_equal(bfit_stream_remaining(s), N - seen);
            m /= 2;
            fails++;
            continue;
        }
        for (int k = 0; k < got; k++)
            order[seen++] = (int)x[2 * k];
        if (seen > 500)
            m = 64; /* memory came back */
    }
    assert_true(fails >= 4);
    assert_int_equal(seen, N);
    assert_memory_equal(order, ref, sizeof ref);
    /* bad cursors are refused and change nothing */
    bfit_cursor here = bfit_stream_tell(s);
    assert_int_equal(bfit_stream_seek(s, (bfit_cursor){0, N + 1}), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "out of range"));
    assert_int_equal(bfit_stream_seek(s, (bfit_cursor){-1, 0}), BFIT_EINVAL);
    assert_int_equal(bfit_stream_tell(s).epoch, here.epoch);
    assert_int_equal(bfit_stream_tell(s).pos, here.pos);
    bfit_stream_free(s);
    bfit_dataset_free(d);
}

static void test_seeded_order(void **st)
{
    bfit_dataset *d = index_set();
    static int a[N], b[N], c[N], e1[N], e3[N];
    int same = 0;
    (void)st;
    bfit_stream *s1 = stream(d, 1, 1, 0, 200), *s2 = stream(d, 1, 1, 1, 200), *s3 = stream(d, 2, 1, 0, 200);
    one_epoch(s1, 0, a);
    one_epoch(s2, 0, b);
    one_epoch(s3, 0, c);
    assert_memory_equal(a, b, sizeof a);
    for (int k = 0; k < N; k++)
        same += a[k] == c[k];
    assert_true(same < 20); /* a different seed: a different order (expect ~1 match) */
    for (int k = 0; k < N; k++)
        same += a[k] == k;
    assert_true(same < 40); /* and shuffled at all */
    /* epoch 1 differs from epoch 0; epoch 3 reached by seeking equals
     * epoch 3 reached by running through */
    bfit_stream_next_epoch(s1);
    one_epoch(s1, 0, e1);
    assert_memory_not_equal(a, e1, sizeof a);
    bfit_stream_next_epoch(s1);
    one_epoch(s1, 0, e3);
    bfit_stream_next_epoch(s1);
    one_epoch(s1, 0, e3);
    assert_int_equal(bfit_stream_seek(s2, (bfit_cursor){3, 0}), BFIT_OK);
    one_epoch(s2, 1, b);
    assert_memory_equal(e3, b, sizeof b);
    bfit_stream_free(s1);
    bfit_stream_free(s2);
    bfit_stream_free(s3);
    bfit_dataset_free(d);
}

/* Every ordering of 4 items should come out of Fisher-Yates about equally
 * often across seeds. */
static void test_shuffle_uniform(void **st)
{
    float x[4] = {0, 1, 2, 3};
    int32_t y[4] = {0, 0, 0, 0};
    int count[256] = {0}, got, distinct = 0;
    bfit_dataset *d;
    (void)st;
    assert_int_equal(bfit_dataset_from_floats(bfit_shape_vec(1), 4, 1, x, y, &d), BFIT_OK);
    for (uint64_t seed = 0; seed < 4800; seed++) {
        bfit_stream *s = stream(d, seed, 1, 0, 4);
        float o[4];
        int32_t l[4];
        assert_int_equal(bfit_stream_take(s, 4, o, l, &got), BFIT_OK);
        count[(int)o[0] * 64 + (int)o[1] * 16 + (int)o[2] * 4 + (int)o[3]]++;
        bfit_stream_free(s);
    }
    for (int k = 0; k < 256; k++)
        if (count[k]) {
            distinct++;
            assert_in_range(count[k], 140, 260); /* expected 200 each, sd ~14 */
        }
    assert_int_equal(distinct, 24);
    bfit_dataset_free(d);
}

static void test_sequential(void **st)
{
    bfit_dataset *d = index_set();
    static int a[N];
    (void)st;
    bfit_stream *s = stream(d, 5, 0, 1, 200);
    for (int e = 0; e < 2; e++) {
        one_epoch(s, e, a);
        for (int k = 0; k < N; k++)
            assert_int_equal(a[k], k);
        bfit_stream_next_epoch(s);
    }
    assert_true(bfit_stream_wait_seconds(s) > 0);
    bfit_stream_free(s);
    bfit_dataset_free(d);
}

static void test_bad_config_and_take(void **st)
{
    bfit_dataset *d = index_set();
    bfit_stream_cfg cfg = {.max_take = 0};
    bfit_stream *s = (bfit_stream *)1;
    float x[2 * 8], sd[2] = {1, 0}, mean[2] = {0, 0};
    int32_t y[8];
    int got;
    (void)st;
    assert_int_equal(bfit_stream_new(d, &cfg, &s), BFIT_EINVAL);
    assert_null(s);
    assert_non_null(strstr(bfit_errmsg(), "max_take"));
    cfg.max_take = 8;
    cfg.aug_hflip = 1;
    assert_int_equal(bfit_stream_new(d, &cfg, &s), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "needs images"));
    cfg.aug_hflip = 0;
    cfg.norm_mean = mean, cfg.norm_std = sd;
    assert_int_equal(bfit_stream_new(d, &cfg, &s), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "channel 1"));
    cfg.norm_mean = NULL, cfg.norm_std = NULL;
    cfg.prefetch = 1;
    assert_int_equal(bfit_stream_new(d, &cfg, &s), BFIT_OK);
    assert_int_equal(bfit_stream_take(s, 9, x, y, &got), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "allowed 1..8"));
    assert_int_equal(got, 0);
    assert_int_equal(bfit_stream_take(s, 0, x, y, &got), BFIT_EINVAL);
    assert_int_equal(bfit_stream_tell(s).pos, 0); /* nothing consumed */
    bfit_stream_free(s);
    bfit_dataset_free(d);
}

/* ---- images: augmentation and prefetch on the real data ------------------ */

/* 8x6 images whose pixel values are 1 + position, so a crop or flip can be
 * recognised. */
static bfit_dataset *grid_set(int count)
{
    float *x = malloc(sizeof(float) * 48 * (size_t)count);
    int32_t *y = malloc(sizeof(int32_t) * (size_t)count);
    bfit_dataset *d;
    for (int i = 0; i < count; i++) {
        y[i] = 0;
        for (int k = 0; k < 48; k++)
            x[i * 48 + k] = (float)(1000 * i + 1 + k);
    }
    assert_int_equal(bfit_dataset_from_floats(bfit_shape_chw(1, 8, 6), count, 1, x, y, &d), BFIT_OK);
    free(x);
    free(y);
    return d;
}

/* Which (dy, dx, flip) turns image i into out, or -1 if none does; the
 * reference crop: out(h, w) = in(h + dy, w' + dx) with w' = flip ? W-1-w : w,
 * zero outside. */
static int which_aug(const float *out, int i, int pad)
{
    for (int flip = 0; flip < 2; flip++)
        for (int dy = -pad; dy <= pad; dy++)
            for (int dx = -pad; dx <= pad; dx++) {
                int ok = 1;
                for (int h = 0; h < 8 && ok; h++)
                    for (int w = 0; w < 6 && ok; w++) {
                        int sy = h + dy, sx = (flip ? 5 - w : w) + dx;
                        float v = sy >= 0 && sy < 8 && sx >= 0 && sx < 6 ? (float)(1000 * i + 1 + sy * 6 + sx) : 0;
                        ok = out[h * 6 + w] == v;
                    }
                if (ok)
                    return flip * 100 + (dy + pad) * 10 + (dx + pad);
            }
    return -1;
}

static void test_augmentation(void **st)
{
    enum { M = 400 };
    bfit_dataset *d = grid_set(M);
    bfit_stream_cfg cfg = {.seed = 3, .shuffle = 1, .max_take = M, .aug_crop_pad = 2, .aug_hflip = 1};
    float *a = malloc(sizeof(float) * 48 * M), *b = malloc(sizeof(float) * 48 * M);
    int32_t y[M];
    int got, hits[200] = {0}, kinds = 0;
    bfit_stream *s1, *s2;
    (void)st;
    assert_int_equal(bfit_stream_new(d, &cfg, &s1), BFIT_OK);
    assert_int_equal(bfit_stream_take(s1, M, a, y, &got), BFIT_OK);
    for (int k = 0; k < M; k++) {
        int i = -1;
        for (int p = 0; p < 48 && i < 0; p++) /* find the sample from any unpadded pixel */
            if (a[k * 48 + p] != 0)
                i = (int)((a[k * 48 + p] - 1) / 1000);
        assert_true(i >= 0);
        int kind = which_aug(a + k * 48, i, 2);
        assert_true(kind >= 0);
        hits[kind]++;
    }
    for (int k = 0; k < 200; k++)
        kinds += hits[k] > 0;
    assert_int_equal(kinds, 50); /* 5 x 5 shifts x 2 flips, ~8 each */
    /* the same seed and epoch give the same images in another split */
    cfg.prefetch = 1;
    assert_int_equal(bfit_stream_new(d, &cfg, &s2), BFIT_OK);
    for (int at = 0, n = 1; at < M; at += got, n = n * 3 % 97 + 1)
        assert_int_equal(bfit_stream_take(s2, n, b + at * 48, y, &got), BFIT_OK);
    assert_memory_equal(a, b, sizeof(float) * 48 * M);
    /* the next epoch augments differently */
    bfit_stream_next_epoch(s2);
    assert_int_equal(bfit_stream_seek(s2, (bfit_cursor){1, 0}), BFIT_OK);
    bfit_stream_seek(s1, (bfit_cursor){0, 0});
    assert_int_equal(bfit_stream_take(s1, M, a, y, &got), BFIT_OK);
    assert_int_equal(bfit_stream_take(s2, M, b, y, &got), BFIT_OK);
    assert_memory_not_equal(a, b, sizeof(float) * 48 * M);
    bfit_stream_free(s1);
    bfit_stream_free(s2);
    free(a);
    free(b);
    bfit_dataset_free(d);
}

/* Fashion-MNIST test set, normalised and augmented: a whole epoch drawn in
 * ragged takes with prefetch equals one drawn in fixed takes without it,
 * byte for byte; a seek in the middle does not disturb it. */
static void test_prefetch_identical_fmnist(void **st)
{
    bfit_dataset *d;
    float mean, sd;
    (void)st;
    if (bfit_dataset_load("fashion-mnist", 0, NULL, &d) != BFIT_OK)
        fail_msg("%s", bfit_errmsg());
    int64_t n = bfit_dataset_count(d);
    assert_int_equal(bfit_dataset_norm_stats(d, &mean, &sd), BFIT_OK);
    bfit_stream_cfg cfg = {.seed = 11, .shuffle = 1, .max_take = 256, .aug_crop_pad = 4, .aug_hflip = 1,
                           .norm_mean = &mean, .norm_std = &sd};
    float *a = malloc(sizeof(float) * 784 * (size_t)n), *b = malloc(sizeof(float) * 784 * (size_t)n);
    int32_t *ya = malloc(sizeof(int32_t) * (size_t)n), *yb = malloc(sizeof(int32_t) * (size_t)n);
    bfit_stream *s;
    int got;
    int64_t at = 0;

    assert_int_equal(bfit_stream_new(d, &cfg, &s), BFIT_OK);
    while (at < n) {
        assert_int_equal(bfit_stream_take(s, 256, a + at * 784, ya + at, &got), BFIT_OK);
        at += got;
    }
    bfit_stream_free(s);

    cfg.prefetch = 1;
    assert_int_equal(bfit_stream_new(d, &cfg, &s), BFIT_OK);
    at = 0;
    for (int t = 0; at < n; t++) {
        int m = sizes[t % NSIZES] + 50; /* 51 .. 250, never the same twice running */
        if (t == 10) { /* retry: take, then seek back and take again */
            bfit_cursor c = bfit_stream_tell(s);
            assert_int_equal(bfit_stream_take(s, m, b + at * 784, yb + at, &got), BFIT_OK);
            assert_int_equal(bfit_stream_seek(s, c), BFIT_OK);
        }
        assert_int_equal(bfit_stream_take(s, t % 5 == 0 ? 100 : m, b + at * 784, yb + at, &got), BFIT_OK);
        at += got;
    }
    assert_int_equal(at, n);
    assert_memory_equal(a, b, sizeof(float) * 784 * (size_t)n);
    assert_memory_equal(ya, yb, sizeof(int32_t) * (size_t)n);
    /* normalised with the set's own statistics: mean ~0 before padding
     * and flips, which only move or blank pixels */
    double sum = 0;
    for (int64_t k = 0; k < 784 * n; k++)
        sum += a[k];
    assert_true(sum / (784.0 * (double)n) < 0.3 && sum / (784.0 * (double)n) > -0.5);
    assert_true(bfit_stream_wait_seconds(s) > 0);
    bfit_stream_free(s);
    free(a), free(b), free(ya), free(yb);
    bfit_dataset_free(d);
}

/* The stream's wait is read from the library's one clock, so under the test
 * clock (BFIT_TEST_CLOCK, set by main) a take waits exactly one tick,
 * whatever the load: the wait is subtracted from a step's time, and a real
 * clock here once made --batch adaptive's throughput decisions depend on
 * the machine's load (a resumed run then parted from the original). */
static void test_wait_on_test_clock(void **st)
{
    bfit_dataset *d = index_set();
    float x[2 * 64];
    int32_t y[64];
    int got;
    (void)st;
    for (int prefetch = 0; prefetch <= 1; prefetch++) {
        bfit_stream *s = stream(d, 3, 1, prefetch, 64);
        for (int i = 0; i < 10; i++)
            assert_int_equal(bfit_stream_take(s, 64, x, y, &got), BFIT_OK);
        assert_true(bfit_stream_wait_seconds(s) == 10 * 0.25);
        bfit_stream_free(s);
    }
    bfit_dataset_free(d);
}

/* What the loader threads map (their stacks; glibc's malloc arena of up to
 * 64 MiB each, made at a thread's first malloc or free) is mapped when the
 * stream is made: under ulimit -v a run reads the room left right after
 * opening its streams, and a thread that made its arena later took 64 MiB
 * the step had been promised (resnet50 at find's answer was refused a
 * kernel). 4 threads, then 8: arenas that earlier threads left free serve
 * at most half of them. On one CPU, so that they have not run when
 * bfit_stream_new returns unless it waits for them (without the wait the
 * threads were late in 4 runs of 10 with 4 threads). Freeing the stream
 * joins them (and unmaps no more than the stacks beyond glibc's cache of
 * 40 MiB, less than an arena): nothing they mapped may appear after
 * bfit_stream_new. */
static void threads_mapped_when_made(const bfit_dataset *d, int threads)
{
    bfit_stream_cfg cfg = {.seed = 1, .shuffle = 1, .prefetch = 1, .max_take = 64, .loader_threads = threads};
    bfit_stream *s = NULL;
    uint64_t made, after, res;
    float x[2 * 64];
    int32_t y[64];
    int got;

    assert_int_equal(bfit_stream_new(d, &cfg, &s), BFIT_OK);
    assert_true(bfit_statm(&made, &res));
    assert_int_equal(bfit_stream_take(s, 64, x, y, &got), BFIT_OK);
    bfit_stream_free(s);
    assert_true(bfit_statm(&after, &res));
    assert_true(after <= made);
}

static void test_threads_mapped_when_made(void **st)
{
    bfit_dataset *d = index_set();
    cpu_set_t all, one;
    (void)st;
    assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    threads_mapped_when_made(d, 4);
    threads_mapped_when_made(d, 8);
    assert_int_equal(sched_setaffinity(0, sizeof all, &all), 0);
    bfit_dataset_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_mapped_when_made),
        cmocka_unit_test(test_wait_on_test_clock),
        cmocka_unit_test(test_each_sample_once_any_split),
        cmocka_unit_test(test_seek_back_retry),
        cmocka_unit_test(test_seeded_order),
        cmocka_unit_test(test_shuffle_uniform),
        cmocka_unit_test(test_sequential),
        cmocka_unit_test(test_bad_config_and_take),
        cmocka_unit_test(test_augmentation),
        cmocka_unit_test(test_prefetch_identical_fmnist),
    };
    setenv("BFIT_TEST_CLOCK", "0.25", 1); /* before the clock's first reading */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
