/* test_device_spatial.c - the CPU device's convolution, pooling and batch
 * norm ops against naive double-precision loops on random data: odd sizes
 * (1 and 7 among them), non-square inputs and kernels, stride 2, padding,
 * and the accumulate semantics of the gradient outputs.
 *
 * Tolerances: every checked value is a sum of K products (or a few sums
 * combined); for f32 evaluation in any order the rounding error is bounded
 * by about K * u * sum|terms| (Higham, gamma_K, u = 2^-24). We allow
 * (K + 8) * FLT_EPSILON * sum|terms|, twice that bound plus a few operations
 * of slack, measured against the sum of the terms' magnitudes. A wrong index,
 * a missing term or a lost accumulation errs by the size of a term, far above
 * this for K of a few hundred at most (K * eps < 1e-4). Max pooling is exact.
 * Buffers are prefilled with NaN so an op that leaves an output unwritten,
 * or reads uninitialised workspace, fails. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "batchfit.h"
#include "device/device.h"
#include "nn/layer.h"

typedef struct env {
    bfit_arena *arena;
    bfit_device *dev;
} env;

static int setup(void **st)
{
    env *e = calloc(1, sizeof *e);
    e->arena = bfit_arena_new(1ull << 30, NULL);
    if (bfit_device_cpu_new(e->arena, 0, &e->dev) != BFIT_OK)
        return -1;
    *st = e;
    return 0;
}

static int teardown(void **st)
{
    env *e = *st;
    bfit_device_free(e->dev);
    bfit_arena_free(e->arena);
    free(e);
    return 0;
}

/* 64-byte aligned, filled with NaN (0xff bytes) so unwritten outputs show. */
static void *nanbuf(size_t n)
{
    void *p = aligned_alloc(64, BFIT_ALIGN_UP(n ? n : 1));
    memset(p, 0xff, BFIT_ALIGN_UP(n ? n : 1));
    return p;
}

static float *randbuf(int64_t n, uint64_t seed)
{
    float *p = nanbuf((size_t)n * sizeof(float));
    bfit_fill_uniform(p, n, 1.0f, seed);
    return p;
}

/* Error of got against ref relative to the allowed bound for K terms whose
 * magnitudes sum to mag; > 1 fails. */
static double ratio(double got, double ref, double mag, int64_t K)
{
    double bound = (double)(K + 8) * FLT_EPSILON * mag + 1e-30;
    if (isnan(got))
        return INFINITY;
    return fabs(got - ref) / bound;
}

static bfit_op *mkop(env *e, const bfit_op_desc *d)
{
    bfit_op *op = NULL;
    int rc = bfit_op_new(e->dev, d, &op);
    if (rc != BFIT_OK)
        fail_msg("op_new(kind %d): %s", (int)d->kind, bfit_errmsg());
    return op;
}

static void run(bfit_op *op, bfit_op_args *a)
{
    void *ws = nanbuf(bfit_op_workspace_bytes(op));
    int rc;
    a->workspace = ws;
    rc = bfit_op_run(op, a);
    free(ws);
    if (rc != BFIT_OK)
        fail_msg("op_run(kind %d): %s", (int)op->desc.kind, bfit_errmsg());
}

/* ---------------------------------------------------------------- conv */

typedef struct conv_case {
    int n, ic, ih, iw, oc, kh, kw, sh, sw, ph, pw, bias;
} conv_case;

static const conv_case conv_cases[] = {
    {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1},  /* everything 1 */
    {2, 3, 7, 5, 4, 3, 2, 1, 1, 1, 0, 1},  /* non-square input and kernel, padding in h */
    {3, 2, 8, 7, 5, 3, 3, 2, 2, 1, 1, 0},  /* stride 2, no bias */
    {7, 3, 9, 6, 2, 5, 1, 2, 1, 2, 0, 1},  /* m = 7, tall kernel, mixed strides */
    {1, 4, 8, 8, 3, 3, 3, 2, 2, 0, 0, 1},  /* (8-3)/2 rounds down: floor rule */
    {2, 5, 6, 9, 7, 1, 4, 1, 2, 0, 2, 1},  /* wide kernel, padding in w */
    {4, 16, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1}, /* a real layer's size: threaded, blocked paths */
};

static bfit_op_desc conv_desc(const conv_case *c, bfit_op_kind kind, int acc)
{
    bfit_op_desc d = {.kind = kind, .dtype = BFIT_F32, .accumulate = acc};
    d.u.conv.n = c->n, d.u.conv.ic = c->ic, d.u.conv.ih = c->ih, d.u.conv.iw = c->iw;
    d.u.conv.oc = c->oc, d.u.conv.kh = c->kh, d.u.conv.kw = c->kw;
    d.u.conv.sh = c->sh, d.u.conv.sw = c->sw, d.u.conv.ph = c->ph, d.u.conv.pw = c->pw;
    d.u.conv.oh = (c->ih + 2 * c->ph - c->kh) / c->sh + 1;
    d.u.conv.ow = (c->iw + 2 * c->pw - c->kw) / c->sw + 1;
    d.u.conv.bias = c->bias;
    return d;
}

/* Reference: for every (n, o, y, x, i, ky, kx) term call the visitor. The
 * three passes (forward, data, weights) are the same sum seen from three
 * sides, so one walk builds them all. */
typedef struct conv_ref {
    double *y, *ym, *dx, *dxm, *dw, *dwm, *db, *dbm;
} conv_ref;

static void conv_reference(const conv_case *c, const float *x, const float *w, const float *b, const float *dy,
                           conv_ref *r)
{
    int oh = (c->ih + 2 * c->ph - c->kh) / c->sh + 1, ow = (c->iw + 2 * c->pw - c->kw) / c->sw + 1;
    int64_t ny = (int64_t)c->n * c->oc * oh * ow, nx = (int64_t)c->n * c->ic * c->ih * c->iw;
    int64_t nw = (int64_t)c->oc * c->ic * c->kh * c->kw;

    r->y = calloc((size_t)ny, 8), r->ym = calloc((size_t)ny, 8);
    r->dx = calloc((size_t)nx, 8), r->dxm = calloc((size_t)nx, 8);
    r->dw = calloc((size_t)nw, 8), r->dwm = calloc((size_t)nw, 8);
    r->db = calloc((size_t)c->oc, 8), r->dbm = calloc((size_t)c->oc, 8);
    for (int n = 0; n < c->n; n++)
        for (int o = 0; o < c->oc; o++)
            for (int y = 0; y < oh; y++)
                for (int xx = 0; xx < ow; xx++) {
                    int64_t yi = (((int64_t)n * c->oc + o) * oh + y) * ow + xx;
                    double g = dy[yi];
                    if (c->bias) {
                        r->y[yi] += b[o];
                        r->ym[yi] += fabs(b[o]);
                    }
                    r->db[o] += g;
                    r->dbm[o] += fabs(g);
                    for (int i = 0; i < c->ic; i++)
                        for (int ky = 0; ky < c->kh; ky++)
                            for (int kx = 0; kx < c->kw; kx++) {
                                int iy = y * c->sh - c->ph + ky, ix = xx * c->sw - c->pw + kx;
                                int64_t xi, wi;
                                if (iy < 0 || iy >= c->ih || ix < 0 || ix >= c->iw)
                                    continue; /* zero padding */
                                xi = (((int64_t)n * c->ic + i) * c->ih + iy) * c->iw + ix;
                                wi = (((int64_t)o * c->ic + i) * c->kh + ky) * c->kw + kx;
                                r->y[yi] += (double)x[xi] * w[wi];
                                r->ym[yi] += fabs((double)x[xi] * w[wi]);
                                r->dx[xi] += g * w[wi];
                                r->dxm[xi] += fabs(g * w[wi]);
                                r->dw[wi] += g * x[xi];
                                r->dwm[wi] += fabs(g * x[xi]);
                            }
                }
}

static void conv_ref_free(conv_ref *r)
{
    free(r->y), free(r->ym), free(r->dx), free(r->dxm), free(r->dw), free(r->dwm), free(r->db), free(r->dbm);
}

static void test_conv(void **st)
{
    env *e = *st;
    double worst[4] = {0};

    for (size_t t = 0; t < sizeof conv_cases / sizeof conv_cases[0]; t++) {
        const conv_case *c = &conv_cases[t];
        bfit_op_desc fd = conv_desc(c, BFIT_OP_CONV_FWD, 0);
        int64_t ny = (int64_t)c->n * c->oc * fd.u.conv.oh * fd.u.conv.ow;
        int64_t nx = (int64_t)c->n * c->ic * c->ih * c->iw, nw = (int64_t)c->oc * c->ic * c->kh * c->kw;
        int64_t kfwd = (int64_t)c->ic * c->kh * c->kw + 1, kdx = (int64_t)c->oc * c->kh * c->kw;
        int64_t kdw = (int64_t)c->n * fd.u.conv.oh * fd.u.conv.ow;
        float *x = randbuf(nx, 10 + t), *w = randbuf(nw, 20 + t), *b = randbuf(c->oc, 30 + t);
        float *dy = randbuf(ny, 40 + t), *g0w = randbuf(nw, 50 + t), *g0b = randbuf(c->oc, 60 + t);
        float *y = nanbuf((size_t)ny * 4), *dx = nanbuf((size_t)nx * 4);
        float *dw = nanbuf((size_t)nw * 4), *db = nanbuf((size_t)c->oc * 4);
        conv_ref r;
        bfit_op *op;
        bfit_op_args a;

        conv_reference(c, x, w, b, dy, &r);

        op = mkop(e, &fd);
        assert_int_equal(bfit_op_saved_bytes(op), 0);
        memset(&a, 0, sizeof a);
        a.src = x, a.weights = w, a.bias = c->bias ? b : NULL, a.dst = y;
        run(op, &a);
        bfit_op_free(op);
        for (int64_t i = 0; i < ny; i++) {
            double q = ratio(y[i], r.y[i], r.ym[i], kfwd);
            if (q > worst[0])
                worst[0] = q;
            if (q > 1)
                fail_msg("conv case %zu forward y[%lld] = %.9g, reference %.9g", t, (long long)i, y[i], r.y[i]);
        }

        fd = conv_desc(c, BFIT_OP_CONV_BWD_DATA, 0);
        op = mkop(e, &fd);
        memset(&a, 0, sizeof a);
        a.diff_dst = dy, a.weights = w, a.diff_src = dx;
        run(op, &a);
        bfit_op_free(op);
        for (int64_t i = 0; i < nx; i++) {
            double q = ratio(dx[i], r.dx[i], r.dxm[i], kdx);
            if (q > worst[1])
                worst[1] = q;
            if (q > 1)
                fail_msg("conv case %zu backward data dx[%lld] = %.9g, reference %.9g", t, (long long)i, dx[i],
                         r.dx[i]);
        }

        /* weights, overwriting then accumulating onto g0 */
        for (int acc = 0; acc <= 1; acc++) {
            fd = conv_desc(c, BFIT_OP_CONV_BWD_WEIGHTS, acc);
            op = mkop(e, &fd);
            if (acc) {
                memcpy(dw, g0w, (size_t)nw * 4);
                memcpy(db, g0b, (size_t)c->oc * 4);
            } else {
                memset(dw, 0xff, (size_t)nw * 4);
                memset(db, 0xff, (size_t)c->oc * 4);
            }
            memset(&a, 0, sizeof a);
            a.src = x, a.diff_dst = dy, a.diff_weights = dw, a.diff_bias = c->bias ? db : NULL;
            run(op, &a);
            bfit_op_free(op);
            for (int64_t i = 0; i < nw; i++) {
                double base = acc ? g0w[i] : 0;
                double q = ratio(dw[i], base + r.dw[i], fabs(base) + r.dwm[i], kdw + acc);
                if (q > worst[2])
                    worst[2] = q;
                if (q > 1)
                    fail_msg("conv case %zu backward weights (accumulate %d) dw[%lld] = %.9g, reference %.9g", t,
                             acc, (long long)i, dw[i], base + r.dw[i]);
            }
            for (int o = 0; c->bias && o < c->oc; o++) {
                double base = acc ? g0b[o] : 0;
                double q = ratio(db[o], base + r.db[o], fabs(base) + r.dbm[o], kdw + acc);
                if (q > worst[3])
                    worst[3] = q;
                if (q > 1)
                    fail_msg("conv case %zu backward bias (accumulate %d) db[%d] = %.9g, reference %.9g", t, acc,
                             o, db[o], base + r.db[o]);
            }
            if (!c->bias && !acc)
                assert_true(isnan(db[0])); /* no bias: diff_bias untouched */
        }
        conv_ref_free(&r);
        free(x), free(w), free(b), free(dy), free(g0w), free(g0b), free(y), free(dx), free(dw), free(db);
    }
    printf("  conv worst error / bound: fwd %.3f data %.3f weights %.3f bias %.3f\n", worst[0], worst[1],
           worst[2], worst[3]);
}

static void test_conv_rejects_bad_geometry(void **st)
{
    env *e = *st;
    conv_case c = {2, 3, 7, 5, 4, 3, 2, 1, 1, 1, 0, 1};
    bfit_op_desc d = conv_desc(&c, BFIT_OP_CONV_FWD, 0);
    bfit_op *op = NULL;

    d.u.conv.oh += 1; /* not what the floor rule gives */
    assert_int_equal(bfit_op_new(e->dev, &d, &op), BFIT_EINVAL);
    assert_null(op);
    assert_non_null(strstr(bfit_errmsg(), "does not match"));
}

/* ---------------------------------------------------------------- pool */

typedef struct pool_case {
    int n, c, ih, iw, kh, kw, sh, sw, ph, pw;
} pool_case;

static const pool_case pool_cases[] = {
    {1, 1, 1, 1, 1, 1, 1, 1, 0, 0},  /* everything 1 */
    {2, 3, 7, 5, 3, 2, 2, 1, 1, 1},  /* non-square, stride 2x1, padding on both */
    {7, 2, 8, 9, 2, 2, 2, 2, 0, 0},  /* m = 7, the usual 2x2/2, odd width drops a column */
    {3, 4, 6, 7, 3, 3, 1, 1, 1, 1},  /* overlapping windows with padding */
    {2, 5, 7, 6, 7, 6, 1, 1, 0, 0},  /* global: one window over everything */
    {1, 2, 9, 4, 5, 3, 2, 2, 2, 1},  /* big padded kernel, stride 2 */
    {4, 16, 28, 28, 2, 2, 2, 2, 0, 0}, /* a real layer's size */
};

static bfit_op_desc pool_desc(const pool_case *c, bfit_op_kind kind, int max, int training)
{
    bfit_op_desc d = {.kind = kind, .dtype = BFIT_F32};
    d.u.pool.n = c->n, d.u.pool.c = c->c, d.u.pool.ih = c->ih, d.u.pool.iw = c->iw;
    d.u.pool.kh = c->kh, d.u.pool.kw = c->kw, d.u.pool.sh = c->sh, d.u.pool.sw = c->sw;
    d.u.pool.ph = c->ph, d.u.pool.pw = c->pw;
    d.u.pool.oh = (c->ih + 2 * c->ph - c->kh) / c->sh + 1;
    d.u.pool.ow = (c->iw + 2 * c->pw - c->kw) / c->sw + 1;
    d.u.pool.max = max;
    d.u.pool.training = training;
    return d;
}

/* Reference pooling: max over the window's real elements (PyTorch pads max
 * with -inf), or their sum divided by kh*kw (count_include_pad). Backward
 * routes each dy to the argmax, or spreads dy/(kh*kw) over the window. */
static void pool_reference(const pool_case *c, int max, const float *x, const float *dy, double *y, double *ym,
                           double *dx, double *dxm)
{
    int oh = (c->ih + 2 * c->ph - c->kh) / c->sh + 1, ow = (c->iw + 2 * c->pw - c->kw) / c->sw + 1;
    int64_t nx = (int64_t)c->n * c->c * c->ih * c->iw;
    memset(dx, 0, (size_t)nx * 8);
    memset(dxm, 0, (size_t)nx * 8);
    for (int n = 0; n < c->n; n++)
        for (int ch = 0; ch < c->c; ch++)
            for (int oy = 0; oy < oh; oy++)
                for (int ox = 0; ox < ow; ox++) {
                    int64_t yi = (((int64_t)n * c->c + ch) * oh + oy) * ow + ox, best = -1;
                    double s = 0, sm = 0;
                    for (int ky = 0; ky < c->kh; ky++)
                        for (int kx = 0; kx < c->kw; kx++) {
                            int iy = oy * c->sh - c->ph + ky, ix = ox * c->sw - c->pw + kx;
                            int64_t xi;
                            if (iy < 0 || iy >= c->ih || ix < 0 || ix >= c->iw)
                                continue;
                            xi = (((int64_t)n * c->c + ch) * c->ih + iy) * c->iw + ix;
                            if (best < 0 || x[xi] > x[best])
                                best = xi;
                            s += x[xi];
                            sm += fabs(x[xi]);
                            if (!max) {
                                dx[xi] += (double)dy[yi] / (c->kh * c->kw);
                                dxm[xi] += fabs((double)dy[yi] / (c->kh * c->kw));
                            }
                        }
                    if (max) {
                        y[yi] = x[best];
                        dx[best] += dy[yi];
                        dxm[best] += fabs(dy[yi]);
                    } else {
                        y[yi] = s / (c->kh * c->kw);
                        ym[yi] = sm / (c->kh * c->kw);
                    }
                }
}

static void test_pool(void **st)
{
    env *e = *st;
    double worst[4] = {0};

    for (size_t t = 0; t < sizeof pool_cases / sizeof pool_cases[0]; t++) {
        const pool_case *c = &pool_cases[t];
        for (int max = 0; max <= 1; max++) {
            bfit_op_desc fd = pool_desc(c, BFIT_OP_POOL_FWD, max, 1);
            int64_t ny = (int64_t)c->n * c->c * fd.u.pool.oh * fd.u.pool.ow;
            int64_t nx = (int64_t)c->n * c->c * c->ih * c->iw, K = (int64_t)c->kh * c->kw;
            float *x = randbuf(nx, 70 + t), *dy = randbuf(ny, 80 + t);
            float *y = nanbuf((size_t)ny * 4), *y2 = nanbuf((size_t)ny * 4), *dx = nanbuf((size_t)nx * 4);
            double *ry = calloc((size_t)ny, 8), *rym = calloc((size_t)ny, 8), *rdx = calloc((size_t)nx, 8), *rdxm = calloc((size_t)nx, 8);
            void *saved;
            bfit_op *op, *ev;
            bfit_op_args a;

            pool_reference(c, max, x, dy, ry, rym, rdx, rdxm);
            op = mkop(e, &fd);
            /* training max keeps indices; average needs nothing */
            if (max)
                assert_true(bfit_op_saved_bytes(op) > 0);
            else
                assert_int_equal(bfit_op_saved_bytes(op), 0);
            saved = nanbuf(bfit_op_saved_bytes(op));
            memset(&a, 0, sizeof a);
            a.src = x, a.dst = y, a.saved = saved;
            run(op, &a);
            bfit_op_free(op);

            fd = pool_desc(c, BFIT_OP_POOL_FWD, max, 0);
            ev = mkop(e, &fd);
            assert_int_equal(bfit_op_saved_bytes(ev), 0); /* eval keeps nothing */
            memset(&a, 0, sizeof a);
            a.src = x, a.dst = y2;
            run(ev, &a);
            bfit_op_free(ev);

            for (int64_t i = 0; i < ny; i++) {
                /* max: exact; average: a sum of at most kh*kw terms and a division */
                double q = max ? (y[i] == ry[i] ? 0 : INFINITY) : ratio(y[i], ry[i], rym[i], K + 1);
                double q2 = max ? (y2[i] == ry[i] ? 0 : INFINITY) : ratio(y2[i], ry[i], rym[i], K + 1);
                if (q > worst[max] || q2 > worst[max])
                    worst[max] = fmax(q, q2);
                if (q > 1 || q2 > 1)
                    fail_msg("pool case %zu %s forward y[%lld] = %.9g (eval %.9g), reference %.9g", t,
                             max ? "max" : "avg", (long long)i, y[i], y2[i], ry[i]);
            }

            fd = pool_desc(c, BFIT_OP_POOL_BWD, max, 1);
            op = mkop(e, &fd);
            memset(&a, 0, sizeof a);
            a.diff_dst = dy, a.diff_src = dx, a.saved = saved;
            run(op, &a);
            bfit_op_free(op);
            for (int64_t i = 0; i < nx; i++) {
                /* each dx is a sum of at most kh*kw shares (overlapping windows) */
                double q = ratio(dx[i], rdx[i], rdxm[i], K + 1);
                if (q > worst[2 + max])
                    worst[2 + max] = q;
                if (q > 1)
                    fail_msg("pool case %zu %s backward dx[%lld] = %.9g, reference %.9g", t,
                             max ? "max" : "avg", (long long)i, dx[i], rdx[i]);
            }
            free(x), free(dy), free(y), free(y2), free(dx), free(ry), free(rym), free(rdx), free(rdxm), free(saved);
        }
    }
    printf("  pool worst error / bound: avg fwd %.3f max fwd %.3f avg bwd %.3f max bwd %.3f\n", worst[0],
           worst[1], worst[2], worst[3]);
}

static void test_pool_rejects_bad_geometry(void **st)
{
    env *e = *st;
    pool_case c = {1, 1, 5, 5, 2, 2, 1, 1, 2, 0};
    bfit_op_desc d = pool_desc(&c, BFIT_OP_POOL_FWD, 1, 1);
    bfit_op *op = NULL;

    /* padding as large as the kernel: a window could hold only padding */
    assert_int_equal(bfit_op_new(e->dev, &d, &op), BFIT_EINVAL);
    assert_null(op);
}

/* ---------------------------------------------------------------- batch norm */

typedef struct bn_case {
    int n, c, h, w;
} bn_case;

static const bn_case bn_cases[] = {
    {1, 3, 5, 4},  /* one sample, non-square map */
    {7, 2, 3, 1},  /* m = 7, 3x1 map */
    {4, 5, 1, 1},  /* BatchNorm1d: features */
    {2, 1, 7, 7},  /* one channel */
    {1, 7, 1, 2},  /* two values per channel: the smallest legal batch */
    {8, 16, 14, 14}, /* a real layer's size */
};

/* Reference statistics in double: mean and biased variance per channel. */
static void bn_stats(const bn_case *c, const float *x, double *mean, double *var)
{
    int64_t hw = (int64_t)c->h * c->w, N = (int64_t)c->n * hw;
    for (int k = 0; k < c->c; k++) {
        double s = 0, v = 0;
        for (int i = 0; i < c->n; i++)
            for (int64_t j = 0; j < hw; j++)
                s += x[((int64_t)i * c->c + k) * hw + j];
        mean[k] = s / N;
        for (int i = 0; i < c->n; i++)
            for (int64_t j = 0; j < hw; j++) {
                double d = x[((int64_t)i * c->c + k) * hw + j] - mean[k];
                v += d * d;
            }
        var[k] = v / N;
    }
}

static bfit_op_desc bn_desc(const bn_case *c, bfit_op_kind kind, int training, int acc)
{
    bfit_op_desc d = {.kind = kind, .dtype = BFIT_F32, .accumulate = acc};
    d.u.bnorm.n = c->n, d.u.bnorm.c = c->c, d.u.bnorm.h = c->h, d.u.bnorm.w = c->w;
    d.u.bnorm.eps = 1e-5f;
    d.u.bnorm.training = training;
    return d;
}

static void test_bnorm_forward(void **st)
{
    env *e = *st;
    const double eps = 1e-5;
    double worst = 0;

    for (size_t t = 0; t < sizeof bn_cases / sizeof bn_cases[0]; t++) {
        const bn_case *c = &bn_cases[t];
        int64_t hw = (int64_t)c->h * c->w, N = (int64_t)c->n * hw, nx = N * c->c;
        float *x = randbuf(nx, 90 + t), *g = randbuf(c->c, 91 + t), *b = randbuf(c->c, 92 + t);
        float *y = nanbuf((size_t)nx * 4), *mean = nanbuf((size_t)c->c * 4), *var = nanbuf((size_t)c->c * 4);
        float *emean = randbuf(c->c, 93 + t), *evar = randbuf(c->c, 94 + t);
        double *rm = calloc((size_t)c->c, 8), *rv = calloc((size_t)c->c, 8);
        bfit_op_desc d = bn_desc(c, BFIT_OP_BNORM_FWD, 1, 0);
        bfit_op *op = mkop(e, &d);
        bfit_op_args a;

        /* shift the data off zero so a one-pass variance would lose digits */
        for (int64_t i = 0; i < nx; i++)
            x[i] += 3.0f;
        bn_stats(c, x, rm, rv);
        memset(&a, 0, sizeof a);
        a.src = x, a.dst = y, a.scale = g, a.shift = b, a.mean = mean, a.var = var;
        run(op, &a);
        bfit_op_free(op);
        for (int k = 0; k < c->c; k++) {
            /* mean: N terms of magnitude |x|; variance: N squares of deviations */
            double qm = ratio(mean[k], rm[k], 4.0, N);
            double qv = ratio(var[k], rv[k], rv[k], 2 * N);
            worst = fmax(worst, fmax(qm, qv));
            if (qm > 1 || qv > 1)
                fail_msg("bnorm case %zu channel %d: mean %.9g var %.9g, reference %.9g %.9g", t, k, mean[k],
                         var[k], rm[k], rv[k]);
        }
        for (int i = 0; i < c->n; i++)
            for (int k = 0; k < c->c; k++)
                for (int64_t j = 0; j < hw; j++) {
                    int64_t xi = ((int64_t)i * c->c + k) * hw + j;
                    double rstd = 1 / sqrt(rv[k] + eps), xh = (x[xi] - rm[k]) * rstd;
                    double ref = g[k] * xh + b[k];
                    /* y inherits the statistics' error: relative N-term error on xhat */
                    double q = ratio(y[xi], ref, fabs(g[k]) * (fabs(xh) + 4.0 * rstd) + fabs(b[k]), 2 * N);
                    worst = fmax(worst, q);
                    if (q > 1)
                        fail_msg("bnorm case %zu training y[%lld] = %.9g, reference %.9g", t, (long long)xi,
                                 y[xi], ref);
                }

        /* eval: uses the given statistics (variance made positive) */
        for (int k = 0; k < c->c; k++)
            evar[k] = fabsf(evar[k]) + 0.1f;
        d = bn_desc(c, BFIT_OP_BNORM_FWD, 0, 0);
        op = mkop(e, &d);
        memset(y, 0xff, (size_t)nx * 4);
        memset(&a, 0, sizeof a);
        a.src = x, a.dst = y, a.scale = g, a.shift = b, a.mean = emean, a.var = evar;
        run(op, &a);
        bfit_op_free(op);
        for (int64_t i = 0; i < nx; i++) {
            int k = (int)((i / hw) % c->c);
            double rstd = 1 / sqrt((double)evar[k] + eps), xh = (x[i] - emean[k]) * rstd;
            double ref = g[k] * xh + b[k];
            double q = ratio(y[i], ref, fabs(g[k]) * (fabs(x[i]) + fabs(emean[k])) * rstd + fabs(b[k]), 4);
            worst = fmax(worst, q);
            if (q > 1)
                fail_msg("bnorm case %zu eval y[%lld] = %.9g, reference %.9g", t, (long long)i, y[i], ref);
        }
        /* eval must not have written the statistics */
        for (int k = 0; k < c->c; k++)
            assert_true(evar[k] >= 0.1f);
        free(x), free(g), free(b), free(y), free(mean), free(var), free(emean), free(evar), free(rm), free(rv);
    }
    printf("  bnorm forward worst error / bound %.3f\n", worst);
}

static void test_bnorm_backward(void **st)
{
    env *e = *st;
    const double eps = 1e-5;
    double worst = 0;

    for (size_t t = 0; t < sizeof bn_cases / sizeof bn_cases[0]; t++) {
        const bn_case *c = &bn_cases[t];
        int64_t hw = (int64_t)c->h * c->w, N = (int64_t)c->n * hw, nx = N * c->c;
        float *x = randbuf(nx, 100 + t), *g = randbuf(c->c, 101 + t), *dy = randbuf(nx, 102 + t);
        float *g0s = randbuf(c->c, 103 + t), *g0h = randbuf(c->c, 104 + t);
        float *mean = nanbuf((size_t)c->c * 4), *var = nanbuf((size_t)c->c * 4);
        float *dx = nanbuf((size_t)nx * 4), *ds = nanbuf((size_t)c->c * 4), *dh = nanbuf((size_t)c->c * 4);
        double *rm = calloc((size_t)c->c, 8), *rv = calloc((size_t)c->c, 8);
        double *rds = calloc((size_t)c->c, 8), *rdh = calloc((size_t)c->c, 8), *mag = calloc((size_t)c->c, 8);
        bfit_op_args a;

        bn_stats(c, x, rm, rv);
        for (int k = 0; k < c->c; k++) {
            mean[k] = (float)rm[k];
            var[k] = (float)rv[k];
        }
        /* dshift = sum dy, dscale = sum dy * xhat */
        for (int i = 0; i < c->n; i++)
            for (int k = 0; k < c->c; k++)
                for (int64_t j = 0; j < hw; j++) {
                    int64_t xi = ((int64_t)i * c->c + k) * hw + j;
                    double xh = (x[xi] - rm[k]) / sqrt(rv[k] + eps);
                    rdh[k] += dy[xi];
                    rds[k] += dy[xi] * xh;
                    mag[k] += fabs(dy[xi]) * (1 + fabs(xh));
                }
        /* with diff_src (oneDNN) and without (plain loop), overwriting and accumulating */
        for (int path = 0; path < 4; path++) {
            int with_dx = path < 2, acc = path & 1;
            bfit_op_desc d = bn_desc(c, BFIT_OP_BNORM_BWD, 1, acc);
            bfit_op *op = mkop(e, &d);
            if (acc) {
                memcpy(ds, g0s, (size_t)c->c * 4);
                memcpy(dh, g0h, (size_t)c->c * 4);
            } else {
                memset(ds, 0xff, (size_t)c->c * 4);
                memset(dh, 0xff, (size_t)c->c * 4);
            }
            memset(dx, 0xff, (size_t)nx * 4);
            memset(&a, 0, sizeof a);
            a.src = x, a.diff_dst = dy, a.scale = g, a.mean = mean, a.var = var;
            a.diff_src = with_dx ? dx : NULL, a.diff_scale = ds, a.diff_shift = dh;
            run(op, &a);
            bfit_op_free(op);
            for (int k = 0; k < c->c; k++) {
                double bs = acc ? g0s[k] : 0, bh = acc ? g0h[k] : 0;
                double qs = ratio(ds[k], bs + rds[k], fabs(bs) + mag[k], N + 4);
                double qh = ratio(dh[k], bh + rdh[k], fabs(bh) + mag[k], N + 4);
                worst = fmax(worst, fmax(qs, qh));
                if (qs > 1 || qh > 1)
                    fail_msg("bnorm case %zu path %d channel %d: dscale %.9g dshift %.9g, reference %.9g %.9g", t,
                             path, k, ds[k], dh[k], bs + rds[k], bh + rdh[k]);
            }
            if (!with_dx) {
                assert_true(isnan(dx[0])); /* not wanted, not written */
                continue;
            }
            for (int i = 0; i < c->n; i++)
                for (int k = 0; k < c->c; k++)
                    for (int64_t j = 0; j < hw; j++) {
                        int64_t xi = ((int64_t)i * c->c + k) * hw + j;
                        double rstd = 1 / sqrt(rv[k] + eps), xh = (x[xi] - rm[k]) * rstd;
                        /* dx = gamma rstd (dy - (dshift + xhat dscale) / N) */
                        double ref = g[k] * rstd * (dy[xi] - (rdh[k] + xh * rds[k]) / (double)N);
                        double m = fabs(g[k]) * rstd * (fabs(dy[xi]) + (1 + fabs(xh)) * mag[k] / (double)N);
                        double q = ratio(dx[xi], ref, m, N + 8);
                        worst = fmax(worst, q);
                        if (q > 1)
                            fail_msg("bnorm case %zu backward dx[%lld] = %.9g, reference %.9g", t, (long long)xi,
                                     dx[xi], ref);
                    }
        }
        free(x), free(g), free(dy), free(g0s), free(g0h), free(mean), free(var), free(dx), free(ds), free(dh);
        free(rm), free(rv), free(rds), free(rdh), free(mag);
    }
    printf("  bnorm backward worst error / bound %.3f\n", worst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_conv_rejects_bad_geometry),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_pool_rejects_bad_geometry),
        cmocka_unit_test(test_bnorm_forward),
        cmocka_unit_test(test_bnorm_backward),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
