/* test_device_dense.c - the CPU device's dense op families (matmul, eltwise,
 * layer norm, and the plain loops: reduce rows, add, dropout, cross-entropy)
 * against naive double-precision loops on random data, at odd sizes
 * including 1 and 7, with transposes and accumulation.
 *
 * Tolerances are relative to the sum of the magnitudes of the terms that
 * make up each result (what float rounding actually scales with), with a
 * factor of a few float epsilons per term; each use says why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "device/device.h"

#define FEPS 1.1920929e-7 /* float epsilon */

typedef struct env {
    bfit_arena *arena;
    bfit_device *dev;
} env;

static int setup(void **st)
{
    env *e = calloc(1, sizeof *e);
    e->arena = bfit_arena_new(1ull << 30, NULL);
    assert_int_equal(bfit_device_cpu_new(e->arena, 0, &e->dev), BFIT_OK);
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

/* splitmix64 -> uniform [-a, a) */
static uint64_t rng_state = 42;
static float urand(float a)
{
    uint64_t x = (rng_state += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    return (float)(((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0) * a);
}

static float *frand(int64_t n, float a)
{
    float *p = aligned_alloc(64, BFIT_ALIGN_UP((size_t)(n > 0 ? n : 1) * sizeof(float)));
    for (int64_t i = 0; i < n; i++)
        p[i] = urand(a);
    return p;
}

static float *fcopy(const float *x, int64_t n)
{
    float *p = frand(n, 0);
    memcpy(p, x, (size_t)n * sizeof(float));
    return p;
}

/* Create an op, give it a workspace from the arena (category workspace, as
 * the trainer will), run, release. */
static int run_op(env *e, const bfit_op_desc *d, bfit_op_args *a)
{
    bfit_op *op;
    void *ws = NULL;
    int rc = bfit_op_new(e->dev, d, &op);
    if (rc != BFIT_OK) {
        printf("  op_new: %s\n", bfit_errmsg());
        return rc;
    }
    if (bfit_op_workspace_bytes(op))
        assert_int_equal(bfit_device_alloc(e->dev, bfit_op_workspace_bytes(op), BFIT_MEM_WORKSPACE, &ws),
                         BFIT_OK);
    a->workspace = ws;
    rc = bfit_op_run(op, a);
    if (rc != BFIT_OK)
        printf("  op_run: %s\n", bfit_errmsg());
    if (ws)
        bfit_device_release(e->dev, ws);
    bfit_op_free(op);
    return rc;
}

static void assert_close(double got, double ref, double tol, const char *what, int64_t i)
{
    if (!(fabs(got - ref) <= tol))
        fail_msg("%s[%lld]: got %.9g, reference %.9g, |diff| %.3g > tol %.3g", what, (long long)i, got, ref,
                 fabs(got - ref), tol);
}

/* ---- MATMUL ---- */

static void check_matmul(env *e, int64_t M, int64_t N, int64_t K, int ts, int tw, int bias, int acc)
{
    bfit_op_desc d = {.kind = BFIT_OP_MATMUL, .dtype = BFIT_F32, .accumulate = acc};
    bfit_op_args a = {0};
    float *A = frand(M * K, 1), *B = frand(K * N, 1), *b = frand(N, 1), *C = frand(M * N, 1);
    float *C0 = fcopy(C, M * N);
    char what[96];

    d.u.mm.M = M;
    d.u.mm.N = N;
    d.u.mm.K = K;
    d.u.mm.trans_src = ts;
    d.u.mm.trans_weights = tw;
    d.u.mm.bias = bias;
    a.src = A;
    a.weights = B;
    a.bias = bias ? b : NULL;
    a.dst = C;
    assert_int_equal(run_op(e, &d, &a), BFIT_OK);
    snprintf(what, sizeof what, "matmul M%lld N%lld K%lld ts%d tw%d bias%d acc%d", (long long)M, (long long)N,
             (long long)K, ts, tw, bias, acc);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                /* op(A)[i,k]: A stored [K,M] when transposed; op(B)[k,j]: B stored [N,K] */
                double x = ts ? A[k * M + i] : A[i * K + k];
                double w = tw ? B[j * K + k] : B[k * N + j];
                s += x * w;
                mag += fabs(x * w);
            }
            if (bias) {
                s += b[j];
                mag += fabs(b[j]);
            }
            if (acc) {
                s += C0[i * N + j];
                mag += fabs(C0[i * N + j]);
            }
            /* float GEMM: each of the K+2 roundings is at most eps * the
             * running magnitude; 4 eps per term covers blocked summation
             * orders and the fused sum post-op */
            assert_close(C[i * N + j], s, 4 * FEPS * (double)(K + 2) * (mag + 1e-30), what, i * N + j);
        }
    free(A);
    free(B);
    free(b);
    free(C);
    free(C0);
}

static void test_matmul(void **st)
{
    static const int64_t sizes[][3] = {{1, 1, 1}, {7, 5, 3}, {1, 7, 9}, {13, 1, 7}, {7, 7, 1}, {37, 65, 129}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int flags = 0; flags < 16; flags++)
            check_matmul(*st, sizes[s][0], sizes[s][1], sizes[s][2], flags & 1, (flags >> 1) & 1, (flags >> 2) & 1,
                         (flags >> 3) & 1);
}

static void test_matmul_accumulates_twice(void **st)
{
    /* two accumulating runs from zero give exactly twice one run's sum in
     * exact arithmetic; with integer-valued data every step is exact */
    env *e = *st;
    bfit_op_desc d = {.kind = BFIT_OP_MATMUL, .dtype = BFIT_F32, .accumulate = 1};
    bfit_op_args a = {0};
    float A[3 * 7], B[7 * 5], C[3 * 5] = {0};
    for (int i = 0; i < 21; i++)
        A[i] = (float)(i % 5 - 2);
    for (int i = 0; i < 35; i++)
        B[i] = (float)(i % 3 - 1);
    d.u.mm.M = 3;
    d.u.mm.N = 5;
    d.u.mm.K = 7;
    a.src = A;
    a.weights = B;
    a.dst = C;
    assert_int_equal(run_op(e, &d, &a), BFIT_OK);
    assert_int_equal(run_op(e, &d, &a), BFIT_OK);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++) {
            double s = 0;
            for (int k = 0; k < 7; k++)
                s += A[i * 7 + k] * B[k * 5 + j];
            assert_true(C[i * 5 + j] == (float)(2 * s));
        }
}

static void test_matmul_rejects(void **st)
{
    env *e = *st;
    bfit_op_desc d = {.kind = BFIT_OP_MATMUL, .dtype = BFIT_F32};
    bfit_op *op = (bfit_op *)1;
    d.u.mm.M = 0;
    d.u.mm.N = 3;
    d.u.mm.K = 3;
    assert_int_equal(bfit_op_new(e->dev, &d, &op), BFIT_EINVAL);
    assert_null(op);
    assert_non_null(strstr(bfit_errmsg(), "M=0"));
}

/* ---- ELTWISE ---- */

static double ref_elt(bfit_eltwise_alg alg, double x, double *deriv)
{
    const double c = sqrt(2.0 / M_PI);
    switch (alg) {
    case BFIT_ELT_RELU:
        *deriv = x > 0 ? 1 : 0;
        return x > 0 ? x : 0;
    case BFIT_ELT_GELU_ERF:
        *deriv = 0.5 * (1 + erf(x / M_SQRT2)) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
        return 0.5 * x * (1 + erf(x / M_SQRT2));
    default: {
        double u = c * (x + 0.044715 * x * x * x), t = tanh(u);
        *deriv = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
        return 0.5 * x * (1 + t);
    }
    }
}

static void test_eltwise(void **st)
{
    static const int64_t ns[] = {1, 7, 1001};
    env *e = *st;
    for (int alg = BFIT_ELT_RELU; alg <= BFIT_ELT_GELU_TANH; alg++)
        for (size_t s = 0; s < 3; s++) {
            int64_t n = ns[s];
            bfit_op_desc d = {.kind = BFIT_OP_ELTWISE_FWD, .dtype = BFIT_F32};
            bfit_op_args a = {0};
            float *x = frand(n, 4), *y = frand(n, 1), *dy = frand(n, 1), *dx = frand(n, 1);
            d.u.elt.n = n;
            d.u.elt.alg = (bfit_eltwise_alg)alg;
            a.src = x;
            a.dst = y;
            assert_int_equal(run_op(e, &d, &a), BFIT_OK);
            d.kind = BFIT_OP_ELTWISE_BWD;
            a = (bfit_op_args){0};
            a.src = x;
            a.diff_dst = dy;
            a.diff_src = dx;
            assert_int_equal(run_op(e, &d, &a), BFIT_OK);
            for (int64_t i = 0; i < n; i++) {
                double g, r = ref_elt((bfit_eltwise_alg)alg, x[i], &g);
                /* oneDNN evaluates erf/tanh/exp with vectorised polynomial
                 * approximations accurate to a few ulp; 16 eps relative to
                 * the magnitude (at least 1) allows for that and the
                 * products around them */
                assert_close(y[i], r, 16 * FEPS * (1 + fabs(r)), "eltwise fwd", i);
                assert_close(dx[i], g * dy[i], 16 * FEPS * (1 + fabs(g)), "eltwise bwd", i);
            }
            free(x);
            free(y);
            free(dy);
            free(dx);
        }
}

/* ---- LNORM ---- */

static void check_lnorm(env *e, int64_t R, int64_t C, int acc)
{
    const double eps = 1e-5;
    bfit_op_desc d = {.kind = BFIT_OP_LNORM_FWD, .dtype = BFIT_F32, .accumulate = acc};
    bfit_op_args a = {0};
    float *x = frand(R * C, 2), *g = frand(C, 1), *b = frand(C, 1), *y = frand(R * C, 1);
    float *mean = frand(R, 1), *var = frand(R, 1), *dy = frand(R * C, 1), *dx = frand(R * C, 1);
    float *dg = frand(C, 1), *db = frand(C, 1), *dg0 = fcopy(dg, C), *db0 = fcopy(db, C);
    double *rdg = calloc((size_t)C, sizeof(double)), *rdb = calloc((size_t)C, sizeof(double));

    d.u.lnorm.rows = R;
    d.u.lnorm.cols = C;
    d.u.lnorm.eps = (float)eps;
    a.src = x;
    a.dst = y;
    a.scale = g;
    a.shift = b;
    a.mean = mean;
    a.var = var;
    assert_int_equal(run_op(e, &d, &a), BFIT_OK);
    d.kind = BFIT_OP_LNORM_BWD;
    a = (bfit_op_args){0};
    a.src = x;
    a.mean = mean;
    a.var = var;
    a.diff_dst = dy;
    a.scale = g;
    a.diff_src = dx;
    a.diff_scale = dg;
    a.diff_shift = db;
    assert_int_equal(run_op(e, &d, &a), BFIT_OK);
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * C, *dyr = dy + r * C;
        double mu = 0, v = 0, rs, m1 = 0, m2 = 0;
        for (int64_t j = 0; j < C; j++)
            mu += xr[j];
        mu /= (double)C;
        for (int64_t j = 0; j < C; j++)
            v += (xr[j] - mu) * (xr[j] - mu);
        v /= (double)C; /* biased, as PyTorch and oneDNN */
        rs = 1 / sqrt(v + eps);
        /* statistics of values in [-2,2): rounding errors of a C-term
         * float sum of random-signed terms grow like sqrt(C) eps, so
         * 4 eps (sqrt(C) + 2) on the magnitude bound (2, and 4 for the
         * squares) */
        assert_close(mean[r], mu, 4 * FEPS * (sqrt((double)C) + 2) * 2, "lnorm mean", r);
        assert_close(var[r], v, 8 * FEPS * (sqrt((double)C) + 2) * 4, "lnorm var", r);
        for (int64_t j = 0; j < C; j++) {
            double xh = (xr[j] - mu) * rs, dxh = dyr[j] * (double)g[j];
            m1 += dxh;
            m2 += dxh * xh;
            rdg[j] += dyr[j] * xh;
            rdb[j] += dyr[j];
        }
        m1 /= (double)C;
        m2 /= (double)C;
        for (int64_t j = 0; j < C; j++) {
            double xh = (xr[j] - mu) * rs, ry = xh * g[j] + b[j];
            double rdx = rs * (dyr[j] * (double)g[j] - m1 - xh * m2);
            /* xhat carries the error of the statistics (sqrt(C) eps, as
             * above) plus a few roundings; dx's terms are bounded by
             * rs * (|dy g| + means) <= 3 rs. (Measured: about 1 eps.) */
            assert_close(y[r * C + j], ry, 4 * FEPS * (sqrt((double)C) + 2) * (1 + fabs(ry)), "lnorm fwd", r * C + j);
            assert_close(dx[r * C + j], rdx, 4 * FEPS * (sqrt((double)C) + 2) * (1 + rs * 3), "lnorm bwd dx",
                         r * C + j);
        }
    }
    for (int64_t j = 0; j < C; j++) {
        double eg = acc ? dg0[j] + rdg[j] : rdg[j], eb = acc ? db0[j] + rdb[j] : rdb[j];
        /* float sums over R rows (worst case R eps) of terms of magnitude
         * up to about 2, the products carrying xhat's sqrt(C) eps, and the
         * accumulate's one addition */
        assert_close(dg[j], eg, 4 * FEPS * (double)(R + sqrt((double)C) + 2) * (2 + fabs(eg)), "lnorm diff_scale", j);
        assert_close(db[j], eb, 4 * FEPS * (double)(R + 1) * (2 + fabs(eb)), "lnorm diff_shift", j);
    }
    free(x), free(g), free(b), free(y), free(mean), free(var), free(dy), free(dx);
    free(dg), free(db), free(dg0), free(db0), free(rdg), free(rdb);
}

static void test_lnorm(void **st)
{
    static const int64_t sizes[][2] = {{1, 7}, {7, 1}, {7, 7}, {3, 33}, {1, 1}, {5, 1000}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int acc = 0; acc < 2; acc++)
            check_lnorm(*st, sizes[s][0], sizes[s][1], acc);
}

/* ---- REDUCE_ROWS, ADD ---- */

static void test_reduce_rows(void **st)
{
    static const int64_t sizes[][2] = {{1, 1}, {7, 1}, {1, 7}, {7, 7}, {300, 600}, {3, 257}};
    env *e = *st;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int acc = 0; acc < 2; acc++) {
            int64_t M = sizes[s][0], N = sizes[s][1];
            bfit_op_desc d = {.kind = BFIT_OP_REDUCE_ROWS, .dtype = BFIT_F32, .accumulate = acc};
            bfit_op_args a = {0};
            float *x = frand(M * N, 1), *y = frand(N, 1), *y0 = fcopy(y, N);
            d.u.reduce.M = M;
            d.u.reduce.N = N;
            a.src = x;
            a.dst = y;
            assert_int_equal(run_op(e, &d, &a), BFIT_OK);
            for (int64_t j = 0; j < N; j++) {
                double s2 = acc ? y0[j] : 0;
                for (int64_t i = 0; i < M; i++)
                    s2 += x[i * N + j];
                /* summed in double, rounded once to float: 1 ulp */
                assert_close(y[j], s2, FEPS * (fabs(s2) + 1e-30), "reduce rows", j);
            }
            free(x);
            free(y);
            free(y0);
        }
}

static void test_add(void **st)
{
    static const int64_t ns[] = {1, 7, 100003};
    env *e = *st;
    for (size_t s = 0; s < 3; s++) {
        int64_t n = ns[s];
        bfit_op_desc d = {.kind = BFIT_OP_ADD, .dtype = BFIT_F32};
        bfit_op_args a = {0};
        float *x = frand(n, 1), *x2 = frand(n, 1), *y = frand(n, 1), *y0;
        d.u.add.n = n;
        a.src = x;
        a.src2 = x2;
        a.dst = y;
        assert_int_equal(run_op(e, &d, &a), BFIT_OK);
        for (int64_t i = 0; i < n; i++) /* one float addition: exact comparison with the same */
            assert_true(y[i] == x[i] + x2[i]);
        /* accumulate: dst += src */
        y0 = fcopy(y, n);
        d.accumulate = 1;
        a = (bfit_op_args){0};
        a.src = x;
        a.dst = y;
        assert_int_equal(run_op(e, &d, &a), BFIT_OK);
        for (int64_t i = 0; i < n; i++)
            assert_true(y[i] == y0[i] + x[i]);
        /* dst aliasing src */
        d.accumulate = 0;
        a = (bfit_op_args){0};
        a.src = x;
        a.src2 = x2;
        a.dst = x;
        memcpy(y0, x, (size_t)n * sizeof(float));
        assert_int_equal(run_op(e, &d, &a), BFIT_OK);
        for (int64_t i = 0; i < n; i++)
            assert_true(x[i] == y0[i] + x2[i]);
        free(x);
        free(x2);
        free(y);
        free(y0);
    }
}

/* ---- DROPOUT ---- */

static int64_t dropout_run(env *e, int64_t n, float p, uint64_t seed, const float *x, float *y, uint8_t *mask)
{
    bfit_op_desc d = {.kind = BFIT_OP_DROPOUT_FWD, .dtype = BFIT_F32};
    bfit_op_args a = {0};
    int64_t kept = 0;
    d.u.drop.n = n;
    d.u.drop.p = p;
    a.src = x;
    a.dst = y;
    a.saved = mask;
    a.seed = seed;
    assert_int_equal(run_op(e, &d, &a), BFIT_OK);
    for (int64_t i = 0; i < n; i++) {
        assert_true(mask[i] == 0 || mask[i] == 1);
        /* x * (1/(1-p)) computed in float both here and there */
        assert_true(y[i] == (mask[i] ? x[i] * (1.0f / (1.0f - p)) : 0.0f));
        kept += mask[i];
    }
    return kept;
}

static void test_dropout(void **st)
{
    env *e = *st;
    const int64_t n = 100000;
    float *x = frand(n, 1), *y = frand(n, 1), *dy = frand(n, 1), *dx = frand(n, 1);
    uint8_t *m1 = malloc((size_t)n), *m2 = malloc((size_t)n);
    bfit_op_desc d = {.kind = BFIT_OP_DROPOUT_BWD, .dtype = BFIT_F32};
    bfit_op_args a = {0};
    bfit_op *op;
    int64_t kept, diff = 0;
    int saved_threads = omp_get_max_threads();

    /* p = 0: everything kept, y == x */
    assert_int_equal(dropout_run(e, n, 0.0f, 5, x, y, m1), n);
    assert_int_equal(dropout_run(e, 1, 0.0f, 5, x, y, m1), 1);
    /* p = 0.3: kept count is Binomial(n, 0.7): sd = sqrt(n p (1-p)) = 145;
     * 5 sd = 725 makes a false failure about 1 in 3 million */
    kept = dropout_run(e, n, 0.3f, 5, x, y, m1);
    assert_true(llabs(kept - 70000) <= 725);
    /* reproducible from the seed, whatever the number of threads */
    omp_set_num_threads(1);
    dropout_run(e, n, 0.3f, 5, x, y, m2);
    omp_set_num_threads(saved_threads);
    assert_memory_equal(m1, m2, (size_t)n);
    /* another seed: another mask (agreement of two independent masks is
     * 0.58 on average; identical masks would be a broken hash) */
    dropout_run(e, n, 0.3f, 6, x, y, m2);
    for (int64_t i = 0; i < n; i++)
        diff += m1[i] != m2[i];
    assert_true(diff > n / 4);
    /* backward with m1: dx = dy * mask / (1-p) */
    d.u.drop.n = n;
    d.u.drop.p = 0.3f;
    a.diff_dst = dy;
    a.diff_src = dx;
    a.saved = m1;
    assert_int_equal(run_op(e, &d, &a), BFIT_OK);
    for (int64_t i = 0; i < n; i++)
        assert_true(dx[i] == (m1[i] ? dy[i] * (1.0f / 0.7f) : 0.0f));
    /* p = 1 would divide by zero */
    d.u.drop.p = 1.0f;
    assert_int_equal(bfit_op_new(e->dev, &d, &op), BFIT_EINVAL);
    free(x), free(y), free(dy), free(dx), free(m1), free(m2);
}

/* ---- XENT ---- */

static void check_xent(env *e, int64_t M, int64_t N, float range)
{
    bfit_op_desc d = {.kind = BFIT_OP_XENT_FWD, .dtype = BFIT_F32};
    bfit_op_args a = {0};
    float *x = frand(M * N, range), *p = frand(M * N, 1), *dx = frand(M * N, 1);
    int32_t *lab = malloc((size_t)M * sizeof(int32_t));
    double loss = -1, ref = 0;
    const float scale = 0.25f;

    for (int64_t i = 0; i < M; i++)
        lab[i] = (int32_t)((i * 5 + 3) % N);
    d.u.xent.M = M;
    d.u.xent.N = N;
    a.src = x;
    a.dst = p;
    a.labels = lab;
    a.loss = &loss;
    assert_int_equal(run_op(e, &d, &a), BFIT_OK);
    d.kind = BFIT_OP_XENT_BWD;
    a = (bfit_op_args){0};
    a.src = p;
    a.labels = lab;
    a.diff_src = dx;
    a.loss_scale = scale;
    assert_int_equal(run_op(e, &d, &a), BFIT_OK);
    for (int64_t i = 0; i < M; i++) {
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < N; j++)
            mx = fmax(mx, x[i * N + j]);
        for (int64_t j = 0; j < N; j++)
            s += exp(x[i * N + j] - mx);
        ref += log(s) + mx - x[i * N + lab[i]];
        for (int64_t j = 0; j < N; j++) {
            double pr = exp(x[i * N + j] - mx) / s;
            /* probabilities computed in double, rounded once: 1 ulp, plus
             * the float-to-double of the max (exact) */
            assert_close(p[i * N + j], pr, 2 * FEPS * pr + 1e-45, "xent probs", i * N + j);
            /* (float p - 1) and * scale: two float roundings */
            assert_close(dx[i * N + j], (pr - (j == lab[i])) * scale, 4 * FEPS * (1 + pr) * scale, "xent grad",
                         i * N + j);
        }
    }
    /* per-row losses in double, summed in double: far below float eps */
    assert_close(loss, ref, 1e-12 * (fabs(ref) + 1), "xent loss", 0);
    free(x), free(p), free(dx), free(lab);
}

static void test_xent(void **st)
{
    check_xent(*st, 1, 1, 1);
    check_xent(*st, 1, 7, 3);
    check_xent(*st, 7, 1, 3);
    check_xent(*st, 7, 10, 3);
    check_xent(*st, 64, 1000, 5);
    /* logits in the thousands: a naive exp would overflow to inf/NaN */
    check_xent(*st, 7, 7, 3000);
}

static void test_xent_bad_label(void **st)
{
    env *e = *st;
    bfit_op_desc d = {.kind = BFIT_OP_XENT_FWD, .dtype = BFIT_F32};
    bfit_op_args a = {0};
    float x[3 * 4] = {0}, p[3 * 4];
    int32_t lab[3] = {1, 4, 0};
    double loss = 123;

    d.u.xent.M = 3;
    d.u.xent.N = 4;
    a.src = x;
    a.dst = p;
    a.labels = lab;
    a.loss = &loss;
    assert_int_equal(run_op(e, &d, &a), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "label 4 of sample 1"));
    assert_true(loss == 123); /* nothing written on a refused call */
    lab[1] = -1;
    d.kind = BFIT_OP_XENT_BWD;
    a = (bfit_op_args){0};
    a.src = p;
    a.labels = lab;
    a.diff_src = x;
    a.loss_scale = 1;
    assert_int_equal(run_op(e, &d, &a), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "label -1 of sample 1"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),      cmocka_unit_test(test_matmul_accumulates_twice),
        cmocka_unit_test(test_matmul_rejects), cmocka_unit_test(test_eltwise),
        cmocka_unit_test(test_lnorm),       cmocka_unit_test(test_reduce_rows),
        cmocka_unit_test(test_add),         cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_xent),        cmocka_unit_test(test_xent_bad_label),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
