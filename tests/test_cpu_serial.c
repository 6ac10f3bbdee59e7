/* test_cpu_serial.c - ops too small for a parallel region run on one
 * thread (device/cpu.h, CPU_SMALL_*): the command's threads sleep between
 * regions, and waking them cost more than such an op's work.
 *
 * The program counts libgomp's parallel regions itself: it defines
 * GOMP_parallel, which the dynamic linker binds oneDNN's and the library's
 * regions to (the executable comes first in the lookup), and passes each
 * on to libgomp's. A small matmul or eltwise, made and run on a device of 2
 * threads, must open none, a large one must (else the counter counts
 * nothing and the first check proves nothing), and the caller's thread
 * count must be what it was. A convolution's reorders each run on one
 * thread exactly when their blocked buffer is under CPU_SMALL_BYTES. */

#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "device/cpu.h"
#include "device/device.h"
#include "tdev.h"

static long regions;

void GOMP_parallel(void (*fn)(void *), void *data, unsigned nthreads, unsigned flags);
void GOMP_parallel(void (*fn)(void *), void *data, unsigned nthreads, unsigned flags)
{
    static void (*real)(void (*)(void *), void *, unsigned, unsigned);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "GOMP_parallel");
    __atomic_add_fetch(&regions, 1, __ATOMIC_RELAXED);
    real(fn, data, nthreads, flags);
}

/* The regions of 3 runs of the op of d after a first (which makes its
 * primitives); the buffers are zeros, what matters is the work's shape. */
static long regions_of(tdev *t, const bfit_op_desc *d, size_t in_bytes, size_t w_bytes, size_t out_bytes,
                       bfit_op **keep)
{
    bfit_op *op;
    void *ws = NULL, *x = tdev_alloc(t, in_bytes), *w = tdev_alloc(t, w_bytes), *y = tdev_alloc(t, out_bytes);
    bfit_op_args a = {0};
    int before = omp_get_max_threads();
    long n;

    assert_int_equal(bfit_device_fill(t->dev, x, 0, in_bytes), BFIT_OK);
    assert_int_equal(bfit_device_fill(t->dev, w, 0, w_bytes), BFIT_OK);
    assert_int_equal(bfit_op_new(t->dev, d, &op), BFIT_OK);
    if (bfit_op_workspace_bytes(op))
        assert_int_equal(bfit_arena_alloc(t->arena, bfit_op_workspace_bytes(op), BFIT_MEM_WORKSPACE, &ws), BFIT_OK);
    a.src = x;
    a.weights = w;
    a.dst = y;
    a.workspace = ws;
    assert_int_equal(bfit_op_run(op, &a), BFIT_OK);
    regions = 0;
    for (int i = 0; i < 3; i++)
        assert_int_equal(bfit_op_run(op, &a), BFIT_OK);
    n = regions;
    assert_int_equal(omp_get_max_threads(), before);
    bfit_arena_release(t->arena, ws);
    tdev_release(t, x), tdev_release(t, w), tdev_release(t, y);
    if (keep)
        *keep = op;
    else
        bfit_op_free(op);
    return n;
}

static long matmul_regions(tdev *t, int64_t M, int64_t N, int64_t K)
{
    bfit_op_desc d = {.kind = BFIT_OP_MATMUL, .dtype = BFIT_F32};
    d.u.mm.M = M, d.u.mm.N = N, d.u.mm.K = K;
    return regions_of(t, &d, (size_t)(M * K) * 4, (size_t)(K * N) * 4, (size_t)(M * N) * 4, NULL);
}

static long tanh_regions(tdev *t, int64_t n)
{
    bfit_op_desc d = {.kind = BFIT_OP_ELTWISE_FWD, .dtype = BFIT_F32};
    d.u.elt.n = n, d.u.elt.alg = BFIT_ELT_TANH;
    return regions_of(t, &d, (size_t)n * 4, 4, (size_t)n * 4, NULL);
}

static void test_small_ops_open_no_region(void **st)
{
    tdev t;
    tdev_open(&t, 2);
    /* cnn's last linear at batch 64: 0.16 MFLOP */
    assert_int_equal(matmul_regions(&t, 64, 10, 128), 0);
    assert_true(matmul_regions(&t, 256, 256, 256) >= 3);
    assert_int_equal(tanh_regions(&t, BFIT_PAR_MIN - 1), 0);
    assert_true(tanh_regions(&t, (int64_t)1 << 20) >= 3);
    tdev_close(&t);
    (void)st;
}

/* A convolution forward of oc x ic 3x3 weights on n x ic x 14 x 14. */
static cpu_op *conv_op(tdev *t, int64_t n, int64_t ic, int64_t oc)
{
    bfit_op_desc d = {.kind = BFIT_OP_CONV_FWD, .dtype = BFIT_F32};
    bfit_op *op;
    d.u.conv.n = n, d.u.conv.ic = ic, d.u.conv.oc = oc, d.u.conv.ih = d.u.conv.iw = 14;
    d.u.conv.oh = d.u.conv.ow = 14, d.u.conv.kh = d.u.conv.kw = 3, d.u.conv.sh = d.u.conv.sw = 1;
    d.u.conv.ph = d.u.conv.pw = 1;
    regions_of(t, &d, (size_t)(n * ic * 196) * 4, (size_t)(oc * ic * 9) * 4, (size_t)(n * oc * 196) * 4, &op);
    return (cpu_op *)op;
}

/* Each reorder (slots after the two convolution ones) is serial exactly
 * when its blocked side is small; returns the reorders seen. */
static int check_reorders(const cpu_op *op)
{
    int seen = 0;
    for (int p = 2; p < CPU_OP_MAXPRIM; p++) {
        const dnnl_memory_desc_t *src, *dst;
        size_t big;
        if (!op->pd[p])
            continue;
        src = dnnl_primitive_desc_query_md(op->pd[p], dnnl_query_src_md, 0);
        dst = dnnl_primitive_desc_query_md(op->pd[p], dnnl_query_dst_md, 0);
        big = dnnl_memory_desc_get_size(src) > dnnl_memory_desc_get_size(dst) ? dnnl_memory_desc_get_size(src)
                                                                                : dnnl_memory_desc_get_size(dst);
        assert_int_equal(op->serial >> p & 1u, big < CPU_SMALL_BYTES);
        seen++;
    }
    return seen;
}

static void test_conv_small_reorders_serial(void **st)
{
    tdev t;
    cpu_op *small, *large;
    tdev_open(&t, 2);
    small = conv_op(&t, 8, 32, 64);   /* cnn's second convolution: 72 KiB of weights */
    large = conv_op(&t, 2, 256, 256); /* 2.25 MiB of weights */
    assert_true(small->serial != CPU_SERIAL_ALL && large->serial != CPU_SERIAL_ALL);
    /* oneDNN's convolutions take blocked weights on AVX2 and AVX-512:
     * the small one's reorder is serial, the large one's none */
    assert_true(check_reorders(small) >= 1);
    assert_true(small->serial != 0);
    assert_true(check_reorders(large) >= 1);
    assert_int_equal(large->serial, 0);
    bfit_op_free(&small->base), bfit_op_free(&large->base);
    tdev_close(&t);
    (void)st;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_ops_open_no_region),
        cmocka_unit_test(test_conv_small_reorders_serial),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
