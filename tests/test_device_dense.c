/* test_device_dense.c - the CPU device's dense op families (matmul, eltwise,
 * relu with a bit mask, layer norm, and the plain loops: cast, reduce rows,
 * add, dropout, cross-entropy, scale, norms, and the SGD and AdamW updates)
 * against naive double-precision loops on random data, at odd sizes
 * including 1 and 7, with transposes and accumulation.
 *
 * Device memory is opaque: every buffer an op sees comes from the device's
 * arena (tdev); the test fills a host copy, uploads, runs, downloads and
 * checks the host copy.
 *
 * Tolerances are relative to the sum of the magnitudes of the terms that
 * make up each result (what float rounding actually scales with), with a
 * factor of a few float epsilons per term; each use says why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "device/device.h"
#include "device/half.h"
#include "tdev.h"

#define FEPS 1.1920929e-7 /* float epsilon */
/* Masks (relu's bits, dropout's) hold one bit per element, in 64-bit words. */
#define MASK_BIT(m, i) ((int)(((m)[(i) >> 6] >> ((i) & 63)) & 1u))
#define MASK_BYTES(n) ((size_t)((n) + 63) / 64 * 8)

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

/* n floats uniform in [-a, a) on the host, uploaded. */
static tbuf frand(tdev *t, int64_t n, float a)
{
    tbuf b = tbuf_new(t, (size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        TB_F(b)[i] = urand(a);
    tbuf_up(t, &b);
    return b;
}

/* A host copy of n floats (what an output held before the op ran). */
static float *fcopy(const float *x, int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    memcpy(p, x, (size_t)n * sizeof(float));
    return p;
}

/* Create an op, give it a workspace from the arena (category workspace, as
 * the trainer will), run, release. */
static int run_op(tdev *t, const bfit_op_desc *d, bfit_op_args *a)
{
    bfit_op *op;
    void *ws = NULL;
    int rc = bfit_op_new(t->dev, d, &op);
    if (rc != BFIT_OK) {
        printf("  op_new: %s\n", bfit_errmsg());
        return rc;
    }
    if (bfit_op_workspace_bytes(op))
        assert_int_equal(bfit_arena_alloc(t->arena, bfit_op_workspace_bytes(op), BFIT_MEM_WORKSPACE, &ws), BFIT_OK);
    a->workspace = ws;
    rc = bfit_op_run(op, a);
    if (rc != BFIT_OK)
        printf("  op_run: %s\n", bfit_errmsg());
    bfit_arena_release(t->arena, ws);
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

static void check_matmul(tdev *t, int64_t M, int64_t N, int64_t K, int ts, int tw, int bias, int acc)
{
    bfit_op_desc d = {.kind = BFIT_OP_MATMUL, .dtype = BFIT_F32, .accumulate = acc};
    bfit_op_args a = {0};
    tbuf tA = frand(t, M * K, 1), tB = frand(t, K * N, 1), tb = frand(t, N, 1), tC = frand(t, M * N, 1);
    const float *A = TB_F(tA), *B = TB_F(tB), *b = TB_F(tb), *C = TB_F(tC);
    float *C0 = fcopy(C, M * N);
    char what[96];

    d.u.mm.M = M;
    d.u.mm.N = N;
    d.u.mm.K = K;
    d.u.mm.trans_src = ts;
    d.u.mm.trans_weights = tw;
    d.u.mm.bias = bias;
    a.src = tA.d;
    a.weights = tB.d;
    a.bias = bias ? tb.d : NULL;
    a.dst = tC.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, &tC);
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
    tbuf_free(t, &tA);
    tbuf_free(t, &tB);
    tbuf_free(t, &tb);
    tbuf_free(t, &tC);
    free(C0);
}

static void test_matmul(void **st)
{
    /* the last above CPU_SMALL_FLOPS: made and run on the whole team */
    static const int64_t sizes[][3] = {{1, 1, 1}, {7, 5, 3},     {1, 7, 9},    {13, 1, 7},
                                       {7, 7, 1}, {37, 65, 129}, {96, 130, 67}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int flags = 0; flags < 16; flags++)
            check_matmul(*st, sizes[s][0], sizes[s][1], sizes[s][2], flags & 1, (flags >> 1) & 1, (flags >> 2) & 1,
                         (flags >> 3) & 1);
}

static void test_matmul_accumulates_twice(void **st)
{
    /* two accumulating runs from zero give exactly twice one run's sum in
     * exact arithmetic; with integer-valued data every step is exact */
    tdev *t = *st;
    bfit_op_desc d = {.kind = BFIT_OP_MATMUL, .dtype = BFIT_F32, .accumulate = 1};
    bfit_op_args a = {0};
    tbuf tA = tbuf_new(t, 3 * 7 * sizeof(float)), tB = tbuf_new(t, 7 * 5 * sizeof(float));
    tbuf tC = tbuf_new(t, 3 * 5 * sizeof(float));
    float *A = TB_F(tA), *B = TB_F(tB), *C = TB_F(tC);
    for (int i = 0; i < 21; i++)
        A[i] = (float)(i % 5 - 2);
    for (int i = 0; i < 35; i++)
        B[i] = (float)(i % 3 - 1);
    memset(C, 0, 15 * sizeof(float));
    tbuf_up(t, &tA);
    tbuf_up(t, &tB);
    tbuf_up(t, &tC);
    d.u.mm.M = 3;
    d.u.mm.N = 5;
    d.u.mm.K = 7;
    a.src = tA.d;
    a.weights = tB.d;
    a.dst = tC.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, &tC);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++) {
            double s = 0;
            for (int k = 0; k < 7; k++)
                s += A[i * 7 + k] * B[k * 5 + j];
            assert_true(C[i * 5 + j] == (float)(2 * s));
        }
    tbuf_free(t, &tA);
    tbuf_free(t, &tB);
    tbuf_free(t, &tC);
}

/* BFIT_OPTIME=1 (read when a device opens): every op, copy and fill adds
 * its time; off, the device says -1 and keeps no table. */
static void test_op_times(void **st)
{
    bfit_op_desc d = {.kind = BFIT_OP_MATMUL, .dtype = BFIT_F32};
    bfit_op_args a = {0};
    double t1, t2;
    tdev on;
    tbuf tA, tB, tC;

    assert_true(bfit_device_op_seconds(((tdev *)*st)->dev) == -1);
    setenv("BFIT_OPTIME", "1", 1);
    tdev_open(&on, 1);
    unsetenv("BFIT_OPTIME");
    assert_true(bfit_device_op_seconds(on.dev) == 0);
    tA = tbuf_new(&on, 64 * 64 * sizeof(float));
    tB = tbuf_new(&on, 64 * 64 * sizeof(float));
    tC = tbuf_new(&on, 64 * 64 * sizeof(float));
    assert_int_equal(bfit_device_fill(on.dev, tA.d, 0, 64 * 64 * sizeof(float)), BFIT_OK);
    assert_int_equal(bfit_device_fill(on.dev, tB.d, 0, 64 * 64 * sizeof(float)), BFIT_OK);
    assert_true((t1 = bfit_device_op_seconds(on.dev)) > 0);
    d.u.mm.M = d.u.mm.N = d.u.mm.K = 64;
    a.src = tA.d;
    a.weights = tB.d;
    a.dst = tC.d;
    assert_int_equal(run_op(&on, &d, &a), BFIT_OK);
    assert_int_equal(bfit_device_copy(on.dev, tA.d, tC.d, 64 * 64 * sizeof(float)), BFIT_OK);
    assert_true((t2 = bfit_device_op_seconds(on.dev)) > t1);
    tbuf_free(&on, &tA);
    tbuf_free(&on, &tB);
    tbuf_free(&on, &tC);
    tdev_close(&on); /* the table goes to stderr */
}

static void test_matmul_rejects(void **st)
{
    tdev *t = *st;
    bfit_op_desc d = {.kind = BFIT_OP_MATMUL, .dtype = BFIT_F32};
    bfit_op *op = (bfit_op *)1;
    d.u.mm.M = 0;
    d.u.mm.N = 3;
    d.u.mm.K = 3;
    assert_int_equal(bfit_op_new(t->dev, &d, &op), BFIT_EINVAL);
    assert_null(op);
    assert_non_null(strstr(bfit_errmsg(), "M=0"));
}

/* ---- ELTWISE ---- */

/* Descriptions no device runs, refused by bfit_op_new whichever device it
 * is (tdev's: the CPU, or a GPU where there is one), saying what is wrong. */
static void test_eltwise_rejects(void **st)
{
    static const struct {
        bfit_eltwise_alg alg;
        int n, use_dst, bits;
        float lo, hi;
        const char *msg;
    } bad[] = {
        {BFIT_ELT_CLIP, 8, 0, 0, 1.0f, 1.0f, "clip needs lo < hi, got [1, 1]"},
        {BFIT_ELT_SILU, 8, 1, 0, 0, 0, "only relu's and clip's backward can use the output"},
        {BFIT_ELT_TANH, 8, 0, 1, 0, 0, "relu's sign bits"},
        {BFIT_ELT_SIGMOID, 0, 0, 0, 0, 0, "need at least one element, got 0"},
        {BFIT_ELT_HARDSIGMOID, 8, 0, 0, 0, 0.5f, "hardsigmoid needs a positive, finite alpha"},
        {BFIT_ELT_LEAKYRELU, 8, 0, 0, INFINITY, 0, "leakyrelu needs a finite negative slope, got inf"},
        {BFIT_ELT_ELU, 8, 0, 0, -INFINITY, 0, "elu needs a finite alpha, got -inf"},
        {BFIT_ELT_SOFTPLUS, 8, 0, 0, 0, 20, "softplus needs a finite, nonzero beta and a finite threshold, got beta 0"},
        {BFIT_ELT_SOFTPLUS, 8, 0, 0, 1, NAN, "got beta 1, threshold nan"},
        {BFIT_ELT_SELU, 8, 0, 0, 1, INFINITY, "selu needs a finite alpha and scale, got alpha 1, scale inf"},
        {BFIT_ELT_CELU, 8, 0, 0, 0, 0, "celu needs a finite, nonzero alpha, got 0"},
        {BFIT_ELT_CELU, 8, 0, 0, NAN, 0, "celu needs a finite, nonzero alpha, got nan"},
        {BFIT_ELT_CELU, 8, 1, 0, 1, 0, "only relu's and clip's backward can use the output"},
        {BFIT_ELT_ELU, 8, 1, 0, 1, 0, "only relu's and clip's backward can use the output"},
        {(bfit_eltwise_alg)99, 8, 0, 0, 0, 0, "unknown algorithm 99"},
    };
    tdev *t = *st;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bfit_op_desc d = {.kind = BFIT_OP_ELTWISE_BWD, .dtype = BFIT_F32};
        bfit_op *op = (bfit_op *)1;
        d.u.elt = (typeof(d.u.elt)){.n = bad[i].n, .alg = bad[i].alg, .use_dst = bad[i].use_dst,
                                    .bits = bad[i].bits, .lo = bad[i].lo, .hi = bad[i].hi};
        assert_int_equal(bfit_op_new(t->dev, &d, &op), BFIT_EINVAL);
        assert_null(op);
        if (!strstr(bfit_errmsg(), bad[i].msg))
            fail_msg("case %zu: expected \"%s\" in: %s", i, bad[i].msg, bfit_errmsg());
    }
}

#define CLIP_LO -0.5f /* clip's bounds in these checks */
#define CLIP_HI 2.0f
#define HSIG_ALPHA 0.25f /* hardsigmoid's in these checks (ONNX's default is 0.2, PyTorch's 1/6) */
#define HSIG_BETA 0.375f
#define LEAKY_SLOPE -0.25f /* leaky relu's (PyTorch's default is 0.01: any slope is allowed) */
#define ELU_ALPHA 0.5f
#define SP_BETA 2.0f /* softplus's; its threshold crossed by inputs of [-4, 4] */
#define SP_THRESH 3.0f
#define SELU_ALPHA 1.6732632423543772848 /* PyTorch's SELU */
#define SELU_SCALE 1.0507009873554804934
#define CELU_ALPHA -1.5f /* celu's (any but 0) */

/* The op's lo and hi in these checks. */
static void elt_lo_hi(bfit_eltwise_alg alg, float *lo, float *hi)
{
    switch (alg) {
    case BFIT_ELT_HARDSIGMOID: *lo = HSIG_ALPHA, *hi = HSIG_BETA; return;
    case BFIT_ELT_LEAKYRELU: *lo = LEAKY_SLOPE, *hi = 0; return;
    case BFIT_ELT_ELU: *lo = ELU_ALPHA, *hi = 0; return;
    case BFIT_ELT_SOFTPLUS: *lo = SP_BETA, *hi = SP_THRESH; return;
    case BFIT_ELT_SELU: *lo = (float)SELU_ALPHA, *hi = (float)SELU_SCALE; return;
    case BFIT_ELT_CELU: *lo = CELU_ALPHA, *hi = 0; return;
    default: *lo = CLIP_LO, *hi = CLIP_HI; return;
    }
}

static double ref_elt(bfit_eltwise_alg alg, double x, double *deriv)
{
    const double c = sqrt(2.0 / M_PI), s = 1 / (1 + exp(-x));
    switch (alg) {
    case BFIT_ELT_RELU:
        *deriv = x > 0 ? 1 : 0;
        return x > 0 ? x : 0;
    case BFIT_ELT_GELU_ERF:
        *deriv = 0.5 * (1 + erf(x / M_SQRT2)) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
        return 0.5 * x * (1 + erf(x / M_SQRT2));
    case BFIT_ELT_CLIP: /* the gradient strictly inside, as PyTorch's hardtanh */
        *deriv = x > CLIP_LO && x < CLIP_HI;
        return x < CLIP_LO ? CLIP_LO : x > CLIP_HI ? CLIP_HI : x;
    case BFIT_ELT_SIGMOID:
        *deriv = s * (1 - s);
        return s;
    case BFIT_ELT_SILU:
        *deriv = s * (1 + x * (1 - s));
        return x * s;
    case BFIT_ELT_TANH:
        *deriv = 1 - tanh(x) * tanh(x);
        return tanh(x);
    case BFIT_ELT_HARDSIGMOID: { /* the gradient strictly inside the ramp, as PyTorch's */
        double t = HSIG_ALPHA * x + HSIG_BETA;
        *deriv = t > 0 && t < 1 ? HSIG_ALPHA : 0;
        return t < 0 ? 0 : t > 1 ? 1 : t;
    }
    case BFIT_ELT_HARDSWISH:
        *deriv = x <= -3 ? 0 : x >= 3 ? 1 : (2 * x + 3) / 6;
        return x <= -3 ? 0 : x >= 3 ? x : x * (x + 3) / 6;
    case BFIT_ELT_LEAKYRELU: /* PyTorch's: the slope at 0 is the left one */
        *deriv = x > 0 ? 1 : LEAKY_SLOPE;
        return x > 0 ? x : LEAKY_SLOPE * x;
    case BFIT_ELT_ELU:
        *deriv = x > 0 ? 1 : ELU_ALPHA * exp(x);
        return x > 0 ? x : ELU_ALPHA * expm1(x);
    case BFIT_ELT_SOFTPLUS: /* PyTorch's: x itself above the threshold */
        *deriv = SP_BETA * x > SP_THRESH ? 1 : 1 / (1 + exp(-SP_BETA * x));
        return SP_BETA * x > SP_THRESH ? x : log1p(exp(SP_BETA * x)) / SP_BETA;
    case BFIT_ELT_SELU: /* the slope at 0 the left one, as PyTorch's */
        *deriv = SELU_SCALE * (x > 0 ? 1 : SELU_ALPHA * exp(x));
        return SELU_SCALE * (x > 0 ? x : SELU_ALPHA * expm1(x));
    case BFIT_ELT_CELU:
        *deriv = x > 0 ? 1 : exp(x / CELU_ALPHA);
        return x > 0 ? x : CELU_ALPHA * expm1(x / CELU_ALPHA);
    default: {
        double u = c * (x + 0.044715 * x * x * x), th = tanh(u);
        *deriv = 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * c * (1 + 3 * 0.044715 * x * x);
        return 0.5 * x * (1 + th);
    }
    }
}

static void check_eltwise(tdev *t, bfit_eltwise_alg alg, int64_t n)
{
    bfit_op_desc d = {.kind = BFIT_OP_ELTWISE_FWD, .dtype = BFIT_F32};
    bfit_op_args a = {0};
    tbuf tx = frand(t, n, 4), ty = frand(t, n, 1), tdy = frand(t, n, 1), tdx = frand(t, n, 1);
    const float *x = TB_F(tx), *y = TB_F(ty), *dy = TB_F(tdy), *dx = TB_F(tdx);
    d.u.elt.n = n;
    d.u.elt.alg = alg;
    elt_lo_hi(alg, &d.u.elt.lo, &d.u.elt.hi);
    a.src = tx.d;
    a.dst = ty.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    d.kind = BFIT_OP_ELTWISE_BWD;
    a = (bfit_op_args){0};
    a.src = tx.d;
    a.diff_dst = tdy.d;
    a.diff_src = tdx.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, &ty);
    tbuf_down(t, &tdx);
    for (int64_t i = 0; i < n; i++) {
        double g, r = ref_elt(alg, x[i], &g);
        /* oneDNN evaluates erf/tanh/exp with vectorised polynomial
         * approximations accurate to a few ulp; 16 eps relative to
         * the magnitude (at least 1) allows for that and the
         * products around them */
        assert_close(y[i], r, 16 * FEPS * (1 + fabs(r)), "eltwise fwd", i);
        assert_close(dx[i], g * dy[i], 16 * FEPS * (1 + fabs(g)), "eltwise bwd", i);
    }
    tbuf_free(t, &tx);
    tbuf_free(t, &ty);
    tbuf_free(t, &tdy);
    tbuf_free(t, &tdx);
}

/* GELU (erf) is ours (cpu_gelu.c: Abramowitz and Stegun's erfc, its error
 * at most 1.5e-7): over 2^20 points of [-12, 12] and 2^16 near 0, forward
 * and backward against double erf and exp, within the bound oneDNN's had
 * (16 eps of the magnitude); and where Phi is not small (x >= -1) within 16
 * eps of the result itself, which the absolute bound does not see near 0. */
static void test_gelu_sweep(void **st)
{
    tdev *t = *st;
    const int64_t n = (1 << 20) + (1 << 16);
    bfit_op_desc d = {.kind = BFIT_OP_ELTWISE_FWD, .dtype = BFIT_F32};
    bfit_op_args a = {0};
    tbuf tx = tbuf_new(t, (size_t)n * 4), ty = tbuf_new(t, (size_t)n * 4), tdy = tbuf_new(t, (size_t)n * 4),
         tdx = tbuf_new(t, (size_t)n * 4);
    double worst = 0, worst_rel = 0;

    for (int64_t i = 0; i < n; i++) {
        TB_F(tx)[i] = i < (1 << 20) ? -12.0f + 24.0f * (float)i / (float)(1 << 20)
                                    : ldexpf((float)(i - (1 << 20)) - 32768.0f, -24);
        TB_F(tdy)[i] = 1.0f - 0.5f * (float)(i % 3);
    }
    tbuf_up(t, &tx), tbuf_up(t, &tdy);
    d.u.elt.n = n, d.u.elt.alg = BFIT_ELT_GELU_ERF;
    a.src = tx.d, a.dst = ty.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    d.kind = BFIT_OP_ELTWISE_BWD;
    a = (bfit_op_args){.src = tx.d, .diff_dst = tdy.d, .diff_src = tdx.d};
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, &ty), tbuf_down(t, &tdx);
    for (int64_t i = 0; i < n; i++) {
        double x = TB_F(tx)[i], g, r = ref_elt(BFIT_ELT_GELU_ERF, x, &g), dy = TB_F(tdy)[i];
        double e = fabs(TB_F(ty)[i] - r) / (FEPS * (1 + fabs(r))), eg = fabs(TB_F(tdx)[i] - g * dy) / (FEPS * (1 + fabs(g)));
        worst = fmax(worst, fmax(e, eg));
        assert_close(TB_F(ty)[i], r, 16 * FEPS * (1 + fabs(r)), "gelu fwd", i);
        assert_close(TB_F(tdx)[i], g * dy, 16 * FEPS * (1 + fabs(g)), "gelu bwd", i);
        if (x >= -1 && r != 0) {
            worst_rel = fmax(worst_rel, fabs(TB_F(ty)[i] - r) / (FEPS * fabs(r)));
            assert_close(TB_F(ty)[i], r, 16 * FEPS * fabs(r), "gelu fwd, relative", i);
        }
    }
    printf("  gelu: worst %.2f eps of the magnitude, %.2f eps of the result at x >= -1\n", worst, worst_rel);
    tbuf_free(t, &tx), tbuf_free(t, &ty), tbuf_free(t, &tdy), tbuf_free(t, &tdx);
}

static void test_eltwise(void **st)
{
    static const int64_t ns[] = {1, 7, 1001};
    for (int alg = BFIT_ELT_RELU; alg <= BFIT_ELT_CELU; alg++)
        for (size_t s = 0; s < 3; s++)
            check_eltwise(*st, (bfit_eltwise_alg)alg, ns[s]);
}

/* bf16 (where oneDNN has no bf16 kernels: computed in f32 in chunks of
 * 2^18 elements, src/device/cpu_eltwise.c): against the definition on the
 * bf16 inputs, within the f32 bound plus a bf16 output's rounding; n past
 * one chunk has a shorter last one. Relu's backward from its output too. */
static float widen16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void check_eltwise16(tdev *t, bfit_eltwise_alg alg, int use_dst, int64_t n)
{
    bfit_op_desc d = {.kind = BFIT_OP_ELTWISE_FWD, .dtype = BFIT_BF16};
    bfit_op_args a = {0};
    tbuf x = tbuf_new(t, (size_t)n * 2), y = tbuf_new(t, (size_t)n * 2), dy = tbuf_new(t, (size_t)n * 2),
         dx = tbuf_new(t, (size_t)n * 2);
    uint16_t *xh = x.h, *dyh = dy.h;

    for (int64_t i = 0; i < n; i++) { /* bf16 by truncation: any bf16 will do */
        float v = urand(4), g = urand(1);
        uint32_t vb, gb;
        memcpy(&vb, &v, 4), memcpy(&gb, &g, 4);
        xh[i] = (uint16_t)(vb >> 16), dyh[i] = (uint16_t)(gb >> 16);
    }
    tbuf_up(t, &x), tbuf_up(t, &dy);
    d.u.elt = (typeof(d.u.elt)){.n = n, .alg = alg, .use_dst = use_dst};
    if (alg == BFIT_ELT_HARDSIGMOID || alg >= BFIT_ELT_LEAKYRELU)
        elt_lo_hi(alg, &d.u.elt.lo, &d.u.elt.hi);
    a.src = x.d, a.dst = y.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    d.kind = BFIT_OP_ELTWISE_BWD;
    a = (bfit_op_args){0};
    a.src = use_dst ? y.d : x.d, a.diff_dst = dy.d, a.diff_src = dx.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, &y), tbuf_down(t, &dx);
    for (int64_t i = 0; i < n; i++) {
        double g, r = ref_elt(alg, widen16(xh[i]), &g), rdx = g * widen16(dyh[i]);
        assert_close(widen16(((uint16_t *)y.h)[i]), r, 16 * FEPS * (1 + fabs(r)) + fabs(r) / 256, "bf16 eltwise fwd",
                     i);
        assert_close(widen16(((uint16_t *)dx.h)[i]), rdx, 16 * FEPS * (1 + fabs(g)) + fabs(rdx) / 256,
                     "bf16 eltwise bwd", i);
    }
    tbuf_free(t, &x), tbuf_free(t, &y), tbuf_free(t, &dy), tbuf_free(t, &dx);
}

static void test_eltwise_bf16(void **st)
{
    static const int64_t ns[] = {1001, (1 << 18) + 1001};
    for (size_t s = 0; s < 2; s++) {
        check_eltwise16(*st, BFIT_ELT_GELU_ERF, 0, ns[s]);
        check_eltwise16(*st, BFIT_ELT_RELU, 1, ns[s]);
        check_eltwise16(*st, BFIT_ELT_SILU, 0, ns[s]);
        check_eltwise16(*st, BFIT_ELT_HARDSIGMOID, 0, ns[s]);
        check_eltwise16(*st, BFIT_ELT_HARDSWISH, 0, ns[s]);
        check_eltwise16(*st, BFIT_ELT_LEAKYRELU, 0, ns[s]);
        check_eltwise16(*st, BFIT_ELT_ELU, 0, ns[s]);
        check_eltwise16(*st, BFIT_ELT_SOFTPLUS, 0, ns[s]);
        check_eltwise16(*st, BFIT_ELT_SELU, 0, ns[s]);
        check_eltwise16(*st, BFIT_ELT_CELU, 0, ns[s]);
    }
}

/* ---- RELU WITH A BIT MASK ---- */

/* The bf16 of a float that is one already (its low half zero) */
static uint16_t top16(float v)
{
    uint32_t b;
    memcpy(&b, &v, 4);
    return (uint16_t)(b >> 16);
}

/* Where element i of [n, c, hw] (nchw order) lies in blocks of B channels
 * (nChw{B}c; B 0: nchw itself) */
static int64_t blk_index(int64_t i, int64_t c, int64_t hw, int64_t B)
{
    int64_t s = i / (c * hw), ch = i / hw % c, p = i % hw;
    return B ? ((s * (c / B) + ch / B) * hw + p) * B + ch % B : i;
}

/* A gate per channel (CHSCALE, squeeze-and-excitation's; the cpu device
 * only: another refuses it by name), f32 and bf16 (inputs made bf16 by
 * truncation), against the definition: y = x s, dx = dy s, ds = sum over
 * hw of dy x; the backward with only one of its outputs too. B: the image
 * tensors in nChw{B}c (a layout chain's), the scales as they are. */
static void check_chscale(tdev *t, bfit_dtype dt, int64_t n, int64_t c, int64_t hw, int B)
{
    int64_t big = n * c * hw, small = n * c;
    size_t es = bfit_dtype_size(dt);
    bfit_op_desc d = {.kind = BFIT_OP_CHSCALE_FWD, .dtype = dt, .u.chs = {n, c, hw, B}};
    bfit_op_args a = {0};
    tbuf x = tbuf_new(t, (size_t)big * es), s = tbuf_new(t, (size_t)small * es), dy = tbuf_new(t, (size_t)big * es),
         y = tbuf_new(t, (size_t)big * es), dx = tbuf_new(t, (size_t)big * es), ds = tbuf_new(t, (size_t)small * es);
    double tol = dt == BFIT_F32 ? 4 * FEPS : 1.0 / 128; /* bf16: an output's rounding, relative */
    float *xv = malloc((size_t)big * 4), *sv = malloc((size_t)small * 4), *gv = malloc((size_t)big * 4);

    for (int64_t i = 0; i < big + small; i++) {
        float v = urand(2), *to = i < big ? &xv[i] : &sv[i - big];
        uint32_t b;
        memcpy(&b, &v, 4);
        b &= dt == BFIT_F32 ? 0xffffffffu : 0xffff0000u;
        memcpy(to, &b, 4);
        if (i < big) {
            v = urand(1), memcpy(&b, &v, 4), b &= dt == BFIT_F32 ? 0xffffffffu : 0xffff0000u, memcpy(&gv[i], &b, 4);
        }
    }
    for (int64_t i = 0; i < big; i++) {
        int64_t k = blk_index(i, c, hw, B);
        if (dt == BFIT_F32)
            TB_F(x)[k] = xv[i], TB_F(dy)[k] = gv[i];
        else
            ((uint16_t *)x.h)[k] = top16(xv[i]), ((uint16_t *)dy.h)[k] = top16(gv[i]);
    }
    for (int64_t i = 0; i < small; i++) {
        if (dt == BFIT_F32)
            TB_F(s)[i] = sv[i];
        else
            ((uint16_t *)s.h)[i] = top16(sv[i]);
    }
    tbuf_up(t, &x), tbuf_up(t, &s), tbuf_up(t, &dy);
    a.src = x.d, a.src2 = s.d, a.dst = y.d;
    if (run_op(t, &d, &a) == BFIT_EDEVICE) {
        print_message("  channel scaling: not on this device (the cpu's only)\n");
    } else {
        d.kind = BFIT_OP_CHSCALE_BWD;
        a = (bfit_op_args){.src = x.d, .src2 = s.d, .diff_dst = dy.d, .diff_src = dx.d, .dst = ds.d};
        assert_int_equal(run_op(t, &d, &a), BFIT_OK);
        tbuf_down(t, &y), tbuf_down(t, &dx), tbuf_down(t, &ds);
        for (int64_t i = 0; i < big; i++) {
            int64_t k = blk_index(i, c, hw, B);
            double r = (double)xv[i] * sv[i / hw], g = (double)gv[i] * sv[i / hw];
            double yo = dt == BFIT_F32 ? TB_F(y)[k] : widen16(((uint16_t *)y.h)[k]);
            double go = dt == BFIT_F32 ? TB_F(dx)[k] : widen16(((uint16_t *)dx.h)[k]);
            assert_close(yo, r, tol * (fabs(r) + FEPS), "channel scaling fwd", i);
            assert_close(go, g, tol * (fabs(g) + FEPS), "channel scaling dx", i);
        }
        for (int64_t r = 0; r < small; r++) {
            double acc = 0, mag = 0, got = dt == BFIT_F32 ? TB_F(ds)[r] : widen16(((uint16_t *)ds.h)[r]);
            for (int64_t i = r * hw; i < (r + 1) * hw; i++)
                acc += (double)gv[i] * xv[i], mag += fabs((double)gv[i] * xv[i]);
            assert_close(got, acc, tol * (mag + FEPS), "channel scaling ds", r);
        }
        /* only ds: dx's buffer untouched */
        memset(dx.h, 0x7f, (size_t)big * es);
        tbuf_up(t, &dx);
        a = (bfit_op_args){.src = x.d, .src2 = s.d, .diff_dst = dy.d, .dst = ds.d};
        assert_int_equal(run_op(t, &d, &a), BFIT_OK);
        tbuf_down(t, &dx);
        for (int64_t i = 0; i < (int64_t)((size_t)big * es); i++)
            assert_int_equal(((unsigned char *)dx.h)[i], 0x7f);
    }
    tbuf_free(t, &x), tbuf_free(t, &s), tbuf_free(t, &dy), tbuf_free(t, &y), tbuf_free(t, &dx), tbuf_free(t, &ds);
    free(xv), free(sv), free(gv);
}

static void test_chscale(void **st)
{
    check_chscale(*st, BFIT_F32, 3, 5, 7, 0);
    check_chscale(*st, BFIT_F32, 2, 64, 1000, 0); /* past the threads' threshold */
    check_chscale(*st, BFIT_BF16, 3, 5, 7, 0);
    check_chscale(*st, BFIT_BF16, 1, 3, 1, 0);
    check_chscale(*st, BFIT_F32, 3, 16, 7, 8); /* nChw8c, two blocks */
    check_chscale(*st, BFIT_F32, 2, 32, 5, 16);
    check_chscale(*st, BFIT_F32, 2, 64, 1000, 8);
    check_chscale(*st, BFIT_BF16, 3, 16, 7, 8);
    check_chscale(*st, BFIT_BF16, 2, 32, 5, 16);
    check_chscale(*st, BFIT_BF16, 2, 64, 1000, 16);
}

/* ---- PRELU ---- */

/* One PRELU case's host data: x and dy as the op's dtype holds them (bf16
 * by truncation), zeros among x; the slopes f32, of both signs. lin: the
 * linear op (LayerScale's y = a x). */
typedef struct prelu_case {
    bfit_dtype dt;
    int64_t n, c, hw, ns;
    int B, lin;
    float *x, *g, *w;
} prelu_case;

static void prelu_put(const prelu_case *p, tbuf *b, const float *v)
{
    for (int64_t i = 0; i < p->n * p->c * p->hw; i++) {
        int64_t k = blk_index(i, p->c, p->hw, p->B);
        if (p->dt == BFIT_F32)
            TB_F(*b)[k] = v[i];
        else
            ((uint16_t *)b->h)[k] = top16(v[i]);
    }
}

static double prelu_get(const prelu_case *p, const tbuf *b, int64_t i)
{
    int64_t k = blk_index(i, p->c, p->hw, p->B);
    return p->dt == BFIT_F32 ? TB_F(*b)[k] : widen16(((const uint16_t *)b->h)[k]);
}

static bfit_op_desc prelu_desc(const prelu_case *p, bfit_op_kind kind, int acc)
{
    return (bfit_op_desc){.kind = kind, .dtype = p->dt, .accumulate = acc,
                          .u.prelu = {p->n, p->c, p->hw, p->ns == 1, p->B, p->lin}};
}

/* The backward (dx when asked; the slopes' gradient added to dw0 or set)
 * on the device; the gradient comes back in dw. want_dx 2: dx in place of
 * dy (dx's buffer holds dy). */
static void prelu_bwd(tdev *t, const prelu_case *p, int acc, int want_dx, const float *dw0, float *dw, tbuf *dx)
{
    bfit_op_desc d = prelu_desc(p, BFIT_OP_PRELU_BWD, acc);
    size_t es = bfit_dtype_size(p->dt), big = (size_t)(p->n * p->c * p->hw);
    tbuf x = tbuf_new(t, big * es), g = tbuf_new(t, big * es), w = tbuf_new(t, (size_t)p->ns * 4),
         gw = tbuf_new(t, (size_t)p->ns * 4);
    bfit_op_args a = {0};

    prelu_put(p, &x, p->x), prelu_put(p, &g, p->g);
    memcpy(w.h, p->w, (size_t)p->ns * 4), memcpy(gw.h, dw0, (size_t)p->ns * 4);
    if (want_dx == 2)
        prelu_put(p, dx, p->g);
    else
        memset(dx->h, 0x7f, big * es); /* left so where dx is not asked */
    tbuf_up(t, &x), tbuf_up(t, &g), tbuf_up(t, &w), tbuf_up(t, &gw), tbuf_up(t, dx);
    a = (bfit_op_args){.src = x.d, .weights = w.d, .diff_dst = want_dx == 2 ? dx->d : g.d,
                       .diff_src = want_dx ? dx->d : NULL, .diff_weights = gw.d};
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, &gw), tbuf_down(t, dx);
    memcpy(dw, gw.h, (size_t)p->ns * 4);
    tbuf_free(t, &x), tbuf_free(t, &g), tbuf_free(t, &w), tbuf_free(t, &gw);
}

/* The slopes' gradient against its definition: the sum of dy x where
 * x <= 0 (linear: everywhere) over the slope's elements (in double; f32
 * rounding per term of the magnitude), added to dw0 or not. */
static void prelu_check_dw(const prelu_case *p, int acc, const float *dw0, const float *dw)
{
    for (int64_t j = 0; j < p->ns; j++) {
        double s = acc ? dw0[j] : 0, mag = fabs(s);
        for (int64_t i = 0; i < p->n * p->c * p->hw; i++)
            if ((p->ns == 1 || i / p->hw % p->c == j) && (p->x[i] <= 0 || p->lin))
                s += (double)p->g[i] * p->x[i], mag += fabs((double)p->g[i] * p->x[i]);
        assert_close(dw[j], s, 4 * FEPS * (mag + FEPS), acc ? "prelu dw added" : "prelu dw set", j);
    }
}

/* The backward's workspace: a double per row, or with hw == 1 per chunk
 * of 256 samples and channel (the planner reads it) */
static void prelu_check_ws(tdev *t, const prelu_case *p)
{
    bfit_op_desc d = prelu_desc(p, BFIT_OP_PRELU_BWD, 0);
    int64_t rows = p->hw == 1 ? (p->n + 255) / 256 : p->n;
    bfit_op *op;

    assert_int_equal(bfit_op_new(t->dev, &d, &op), BFIT_OK);
    assert_int_equal(bfit_op_workspace_bytes(op), (size_t)(rows * p->c) * sizeof(double));
    bfit_op_free(op);
}

/* The backward's other forms against the full one (dx and dw0 set): without
 * dx it leaves dx's buffer alone and sets the same gradient; in place (dx
 * = dy) the same bits; in the plain layout (B) the same gradient bits. */
static void prelu_check_forms(tdev *t, prelu_case *p, tbuf *dx, const float *dw0, float *dw)
{
    size_t es = bfit_dtype_size(p->dt), big = (size_t)(p->n * p->c * p->hw);
    float *dwp = malloc((size_t)p->ns * 4);
    void *dx1 = malloc(big * es);

    prelu_bwd(t, p, 0, 1, dw0, dw, dx);
    memcpy(dx1, dx->h, big * es);
    prelu_bwd(t, p, 0, 0, dw0, dwp, dx); /* the gradient set, no dx */
    prelu_check_dw(p, 0, dw0, dwp);
    assert_memory_equal(dw, dwp, (size_t)p->ns * 4);
    for (size_t i = 0; i < big * es; i++)
        assert_int_equal(((unsigned char *)dx->h)[i], 0x7f);
    prelu_bwd(t, p, 0, 2, dw0, dwp, dx); /* in place */
    assert_memory_equal(dx->h, dx1, big * es);
    assert_memory_equal(dw, dwp, (size_t)p->ns * 4);
    if (p->B) { /* the plain layout's sums */
        int B = p->B;
        p->B = 0;
        prelu_bwd(t, p, 0, 1, dw0, dwp, dx);
        assert_memory_equal(dw, dwp, (size_t)p->ns * 4);
        p->B = B;
    }
    free(dwp), free(dx1);
}

/* PRELU on the cpu device (the GPU's against it: test_cuda_ops), f32 and bf16,
 * one slope (ns 1) or one per channel, against the definition: y = x > 0 ?
 * x : a x, dx = dy (x > 0 ? 1 : a), da = the sum of dy x where x <= 0 (f32
 * whatever the data's dtype), set or added; linear (lin): y = a x, dx = a
 * dy, da = the sum of dy x. B: the data in nChw{B}c, whose slope gradient
 * is the plain layout's bit for bit (the same sums in the same order). */
static void check_prelu(tdev *t, bfit_dtype dt, int64_t n, int64_t c, int64_t hw, int shared, int B, int lin)
{
    prelu_case p = {dt, n, c, hw, shared ? 1 : c, B, lin, NULL, NULL, NULL};
    int64_t big = n * c * hw;
    size_t es = bfit_dtype_size(dt);
    bfit_op_desc d = prelu_desc(&p, BFIT_OP_PRELU_FWD, 0);
    tbuf x = tbuf_new(t, (size_t)big * es), y = tbuf_new(t, (size_t)big * es), w = tbuf_new(t, (size_t)p.ns * 4),
         dx = tbuf_new(t, (size_t)big * es);
    double tol = dt == BFIT_F32 ? FEPS : 1.0 / 128; /* bf16: an output's rounding, relative */
    float *dw0 = malloc((size_t)p.ns * 4), *dw = malloc((size_t)p.ns * 4);
    bfit_op_args a = {0};

    p.x = malloc((size_t)big * 4), p.g = malloc((size_t)big * 4), p.w = TB_F(w);
    for (int64_t i = 0; i < big; i++) {
        float v = i % 9 == 4 ? 0.0f : urand(2), g = urand(1);
        p.x[i] = dt == BFIT_F32 ? v : (float)widen16(top16(v));
        p.g[i] = dt == BFIT_F32 ? g : (float)widen16(top16(g));
    }
    for (int64_t j = 0; j < p.ns; j++)
        p.w[j] = urand(0.5f), dw0[j] = urand(1);
    prelu_put(&p, &x, p.x);
    tbuf_up(t, &x), tbuf_up(t, &w);
    a.src = x.d, a.weights = w.d, a.dst = y.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, &y);
    prelu_bwd(t, &p, 1, 1, dw0, dw, &dx);
    prelu_check_dw(&p, 1, dw0, dw);
    for (int64_t i = 0; i < big; i++) {
        float a_i = p.w[shared ? 0 : i / hw % c];
        int pass = p.x[i] > 0 && !lin; /* the identity's side */
        double r = pass ? p.x[i] : (double)a_i * p.x[i], gr = pass ? p.g[i] : (double)a_i * p.g[i];
        assert_close(prelu_get(&p, &y, i), r, tol * (fabs(r) + FEPS), "prelu fwd", i);
        assert_close(prelu_get(&p, &dx, i), gr, tol * (fabs(gr) + FEPS), "prelu dx", i);
    }
    prelu_check_forms(t, &p, &dx, dw0, dw);
    prelu_check_ws(t, &p);
    tbuf_free(t, &x), tbuf_free(t, &y), tbuf_free(t, &w), tbuf_free(t, &dx);
    free(p.x), free(p.g), free(dw0), free(dw);
}

static void test_prelu(void **st)
{
    for (int lin = 0; lin < 2; lin++) {
        check_prelu(*st, BFIT_F32, 3, 5, 7, 0, 0, lin);
        check_prelu(*st, BFIT_F32, 3, 5, 7, 1, 0, lin);
        check_prelu(*st, BFIT_F32, 4, 1, 37, 1, 0, lin);    /* a vector's one slope: one row per sample */
        check_prelu(*st, BFIT_F32, 2, 37, 1, 0, 0, lin);    /* a vector's slope per feature */
        check_prelu(*st, BFIT_F32, 2, 64, 1000, 0, 0, lin); /* past the threads' threshold */
        check_prelu(*st, BFIT_F32, 2, 64, 1000, 1, 0, lin);
        check_prelu(*st, BFIT_BF16, 3, 5, 7, 0, 0, lin);
        check_prelu(*st, BFIT_BF16, 3, 5, 7, 1, 0, lin);
        check_prelu(*st, BFIT_F32, 3, 16, 7, 0, 8, lin); /* nChw8c, two blocks */
        check_prelu(*st, BFIT_F32, 2, 32, 5, 1, 16, lin);
        check_prelu(*st, BFIT_F32, 2, 64, 1000, 0, 16, lin);
        check_prelu(*st, BFIT_BF16, 3, 16, 7, 1, 8, lin);
        check_prelu(*st, BFIT_BF16, 2, 32, 5, 0, 16, lin);
        check_prelu(*st, BFIT_BF16, 2, 64, 1000, 0, 8, lin);
        /* hw == 1 (tokens [n, c]): chunks of 256 samples, the last partial */
        check_prelu(*st, BFIT_F32, 600, 37, 1, 0, 0, lin);
        check_prelu(*st, BFIT_F32, 513, 5, 1, 1, 0, lin);
        check_prelu(*st, BFIT_F32, 300, 200, 1, 0, 0, lin); /* threads; tiles of columns, the last partial */
        check_prelu(*st, BFIT_F32, 300, 200, 1, 1, 0, lin);
        check_prelu(*st, BFIT_F32, 256, 3, 1, 0, 0, lin);   /* one whole chunk */
        check_prelu(*st, BFIT_BF16, 600, 37, 1, 0, 0, lin);
        check_prelu(*st, BFIT_BF16, 300, 200, 1, 1, 0, lin);
        check_prelu(*st, BFIT_BF16, 257, 16, 1, 0, 8, lin); /* nChw8c with hw 1: the plain layout */
    }
}

/* Forward and backward of relu keeping 1 bit per element, f32 and bf16,
 * against the definition element by element: bits[i] = x > 0 (for 16-bit
 * floats, the bits read as a signed integer > 0: a NaN of clear sign
 * passes), y = bit ? x : +0, dx = bit ? dy : +0, the bits past n zero.
 * Sizes around the 64-element word and one large enough for the threads;
 * inputs with zeros of both signs and NaNs of both signs. */
static void check_relu_bits(tdev *t, bfit_dtype dt, int64_t n)
{
    size_t es = dt == BFIT_F32 ? 4 : 2, nb = (size_t)(n + 63) / 64 * 8;
    bfit_op_desc d = {.kind = BFIT_OP_ELTWISE_FWD, .dtype = dt};
    bfit_op_args a = {0};
    tbuf x = tbuf_new(t, (size_t)n * es), y = tbuf_new(t, (size_t)n * es), dy = tbuf_new(t, (size_t)n * es),
         dx = tbuf_new(t, (size_t)n * es), m = tbuf_new(t, nb);
    const uint64_t *bits = m.h;

    for (int64_t i = 0; i < n; i++) {
        float v = i % 11 == 3 ? 0.0f : i % 11 == 4 ? -0.0f : i % 13 == 5 ? NAN : i % 13 == 6 ? -NAN : urand(2);
        float g = urand(1);
        uint32_t vb, gb;
        memcpy(&vb, &v, 4), memcpy(&gb, &g, 4);
        if (dt == BFIT_F32) {
            TB_F(x)[i] = v, TB_F(dy)[i] = g;
        } else { /* bf16: the top half (truncation: any bf16 will do) */
            ((uint16_t *)x.h)[i] = (uint16_t)(vb >> 16), ((uint16_t *)dy.h)[i] = (uint16_t)(gb >> 16);
        }
    }
    memset(m.h, 0xa5, nb); /* garbage the op must overwrite */
    tbuf_up(t, &x), tbuf_up(t, &dy), tbuf_up(t, &m);
    d.u.elt = (typeof(d.u.elt)){.n = n, .alg = BFIT_ELT_RELU, .bits = 1};
    a.src = x.d, a.dst = y.d, a.saved = m.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    d.kind = BFIT_OP_ELTWISE_BWD;
    a = (bfit_op_args){0};
    a.diff_dst = dy.d, a.diff_src = dx.d, a.saved = m.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, &y), tbuf_down(t, &dx), tbuf_down(t, &m);
    for (int64_t i = 0; i < n; i++) {
        int on = dt == BFIT_F32 ? TB_F(x)[i] > 0.0f : ((int16_t *)x.h)[i] > 0;
        assert_int_equal(MASK_BIT(bits, i), on);
        if (dt == BFIT_F32) {
            float ry = on ? TB_F(x)[i] : 0.0f, rdx = on ? TB_F(dy)[i] : 0.0f;
            assert_memory_equal(&TB_F(y)[i], &ry, 4);
            assert_memory_equal(&TB_F(dx)[i], &rdx, 4);
        } else {
            assert_int_equal(((uint16_t *)y.h)[i], on ? ((uint16_t *)x.h)[i] : 0);
            assert_int_equal(((uint16_t *)dx.h)[i], on ? ((uint16_t *)dy.h)[i] : 0);
        }
    }
    if (n % 64)
        assert_int_equal(bits[n / 64] >> (n % 64), 0);
    tbuf_free(t, &x), tbuf_free(t, &y), tbuf_free(t, &dy), tbuf_free(t, &dx), tbuf_free(t, &m);
}

static void test_relu_bits(void **st)
{
    static const int64_t ns[] = {1, 63, 64, 65, 1000, 200003};
    for (size_t s = 0; s < sizeof ns / sizeof *ns; s++) {
        check_relu_bits(*st, BFIT_F32, ns[s]);
        check_relu_bits(*st, BFIT_BF16, ns[s]);
    }
}

/* ---- CAST ---- */

/* bf16 by definition: the nearer of the two bf16 values around x (the
 * truncation and the next one up in magnitude), a tie to the even one;
 * worked in double, independent of device/half.h's bit tricks. */
static uint16_t ref_bf16(float x)
{
    uint32_t u, lo, hi;
    float fl, fh;
    double dl, dh;
    memcpy(&u, &x, 4);
    if (isnan(x))
        return 0x7fc0; /* any NaN: compared as NaN below */
    lo = u & 0xffff0000u;
    hi = lo + 0x10000u; /* from the largest finite bf16 this is inf, which is right: it rounds to inf */
    memcpy(&fl, &lo, 4), memcpy(&fh, &hi, 4);
    if (isinf(x))
        return (uint16_t)(u >> 16);
    dl = fabs((double)x - (double)fl);
    dh = isinf(fh) ? fabs((double)x - ldexp(1.0, 128) * (x < 0 ? -1 : 1)) : fabs((double)x - (double)fh);
    if (dl < dh || (dl == dh && ((lo >> 16) & 1u) == 0))
        return (uint16_t)(lo >> 16);
    return (uint16_t)(hi >> 16);
}

/* f32 -> bf16 and back against the definition, at sizes on both sides of
 * the threads' threshold, with ties, NaNs, infinities, the largest floats
 * and subnormals among the values. */
static void check_cast(tdev *t, int64_t n)
{
    bfit_op_desc d = {.kind = BFIT_OP_CAST, .dtype = BFIT_F32};
    bfit_op_args a = {0};
    tbuf x = tbuf_new(t, (size_t)n * 4), h = tbuf_new(t, (size_t)n * 2), back = tbuf_new(t, (size_t)n * 4);
    static const float special[] = {0.0f, -0.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, NAN, -NAN, INFINITY,
                                    -INFINITY, FLT_MAX, -FLT_MAX, 1e-40f, -3e-39f};
    const int ns = (int)(sizeof special / sizeof *special);

    for (int64_t i = 0; i < n; i++) { /* ties: a value halfway between two bf16s */
        uint32_t u;
        float v = i % 5 == 0 ? special[(i / 5) % ns] : urand(100);
        memcpy(&u, &v, 4);
        if (i % 5 == 1)
            u = (u & 0xffff0000u) | 0x8000u, memcpy(&v, &u, 4);
        TB_F(x)[i] = v;
    }
    tbuf_up(t, &x);
    d.u.cast.n = n, d.u.cast.to = BFIT_BF16;
    a.src = x.d, a.dst = h.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    d.dtype = BFIT_BF16, d.u.cast.to = BFIT_F32;
    a.src = h.d, a.dst = back.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, &h), tbuf_down(t, &back);
    for (int64_t i = 0; i < n; i++) {
        uint16_t got = ((uint16_t *)h.h)[i], ref = ref_bf16(TB_F(x)[i]);
        uint32_t u = (uint32_t)got << 16;
        float widened;
        memcpy(&widened, &u, 4);
        if (isnan(TB_F(x)[i])) {
            assert_true(isnan(widened));
        } else if (got != ref) {
            printf("  cast of %a: got 0x%04x, want 0x%04x (element %lld)\n", (double)TB_F(x)[i], got, ref, (long long)i);
            fail();
        }
        assert_memory_equal(&TB_F(back)[i], &widened, 4); /* bf16 -> f32 is exact */
    }
    tbuf_free(t, &x), tbuf_free(t, &h), tbuf_free(t, &back);
}

static void test_cast(void **st)
{
    static const int64_t ns[] = {1, 7, 1001, 300007};
    for (size_t s = 0; s < sizeof ns / sizeof *ns; s++)
        check_cast(*st, ns[s]);
}

/* ---- LNORM ---- */

typedef struct ln_bufs {
    tbuf x, g, b, y, mean, var, dy, dx, dg, db;
} ln_bufs;

/* Forward then backward on the device; the outputs come back to the host.
 * noshift: no shift given or its gradient asked (LayerNorm(bias=False)). */
static void lnorm_run(tdev *t, int64_t R, int64_t C, int acc, double eps, ln_bufs *k, int noshift, int rms,
                      float goff)
{
    bfit_op_desc d = {.kind = BFIT_OP_LNORM_FWD, .dtype = BFIT_F32, .accumulate = acc};
    bfit_op_args a = {0};

    d.u.lnorm.rows = R;
    d.u.lnorm.cols = C;
    d.u.lnorm.eps = (float)eps;
    d.u.lnorm.noshift = noshift;
    d.u.lnorm.rms = rms;
    d.u.lnorm.goff = goff;
    a.src = k->x.d;
    a.dst = k->y.d;
    a.scale = k->g.d;
    a.shift = noshift ? NULL : k->b.d;
    a.mean = k->mean.d;
    a.var = k->var.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    d.kind = BFIT_OP_LNORM_BWD;
    a = (bfit_op_args){0};
    a.src = k->x.d;
    a.mean = k->mean.d;
    a.var = k->var.d;
    a.diff_dst = k->dy.d;
    a.scale = k->g.d;
    a.diff_src = k->dx.d;
    a.diff_scale = k->dg.d;
    a.diff_shift = noshift ? NULL : k->db.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, &k->y);
    tbuf_down(t, &k->mean);
    tbuf_down(t, &k->var);
    tbuf_down(t, &k->dx);
    tbuf_down(t, &k->dg);
    tbuf_down(t, &k->db);
}

/* rms (noshift too): RMSNorm, the reference without the mean; goff added
 * to every scale (Gemma's 1 + w) */
static void check_lnorm(tdev *t, int64_t R, int64_t C, int acc, int noshift, int rms, float goff)
{
    const double eps = 1e-5;
    ln_bufs k;
    k.x = frand(t, R * C, 2), k.g = frand(t, C, 1), k.b = frand(t, C, 1), k.y = frand(t, R * C, 1);
    k.mean = frand(t, R, 1), k.var = frand(t, R, 1), k.dy = frand(t, R * C, 1), k.dx = frand(t, R * C, 1);
    k.dg = frand(t, C, 1), k.db = frand(t, C, 1);
    const float *x = TB_F(k.x), *g = TB_F(k.g), *b = TB_F(k.b), *y = TB_F(k.y), *mean = TB_F(k.mean);
    const float *var = TB_F(k.var), *dy = TB_F(k.dy), *dx = TB_F(k.dx), *dg = TB_F(k.dg), *db = TB_F(k.db);
    float *dg0 = fcopy(dg, C), *db0 = fcopy(db, C);
    double *rdg = calloc((size_t)C, sizeof(double)), *rdb = calloc((size_t)C, sizeof(double));

    lnorm_run(t, R, C, acc, eps, &k, noshift, rms, goff);
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * C, *dyr = dy + r * C;
        double mu = 0, v = 0, rs, m1 = 0, m2 = 0;
        for (int64_t j = 0; j < C && !rms; j++)
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
            double xh = (xr[j] - mu) * rs, dxh = dyr[j] * ((double)g[j] + goff);
            m1 += dxh;
            m2 += dxh * xh;
            rdg[j] += dyr[j] * xh;
            rdb[j] += dyr[j];
        }
        m1 = rms ? 0 : m1 / (double)C;
        m2 /= (double)C;
        for (int64_t j = 0; j < C; j++) {
            double xh = (xr[j] - mu) * rs, ry = xh * ((double)g[j] + goff) + (noshift ? 0 : b[j]);
            double rdx = rs * (dyr[j] * ((double)g[j] + goff) - m1 - xh * m2);
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
        if (noshift) /* none asked: not written */
            assert_true(db[j] == db0[j]);
        else
            assert_close(db[j], eb, 4 * FEPS * (double)(R + 1) * (2 + fabs(eb)), "lnorm diff_shift", j);
    }
    {
        tbuf *all[] = {&k.x, &k.g, &k.b, &k.y, &k.mean, &k.var, &k.dy, &k.dx, &k.dg, &k.db};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            tbuf_free(t, all[i]);
    }
    free(dg0), free(db0), free(rdg), free(rdb);
}

static void test_lnorm(void **st)
{
    /* the last two over BFIT_PAR_MIN elements: rows on the team, backward's
     * 16 row chunks uneven (257 rows) */
    static const int64_t sizes[][2] = {{1, 7}, {7, 1}, {7, 7}, {3, 33}, {1, 1}, {5, 1000}, {257, 160}, {1030, 128}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int acc = 0; acc < 2; acc++)
            check_lnorm(*st, sizes[s][0], sizes[s][1], acc, 0, 0, 0);
    /* without a shift (nanoGPT's LayerNorm(bias=False)), and RMSNorm: one thread, the team */
    for (int acc = 0; acc < 2; acc++) {
        check_lnorm(*st, 3, 33, acc, 1, 0, 0);
        check_lnorm(*st, 1030, 128, acc, 1, 0, 0);
        check_lnorm(*st, 3, 33, acc, 1, 1, 0);
        check_lnorm(*st, 1030, 128, acc, 1, 1, 0);
        check_lnorm(*st, 1, 1, acc, 1, 1, 0);
        check_lnorm(*st, 3, 33, acc, 1, 1, 1); /* Gemma's: 1 + w */
        check_lnorm(*st, 1030, 128, acc, 1, 1, 1);
    }
}

/* ---- GNORM ---- */

typedef struct gn_case {
    int64_t n, c, hw, g, k;
    tbuf x, sc, sh, y, mean, var, dy, dx, dsc, dsh;
} gn_case;

/* The forward against double loops: each (sample, group) row's mean and
 * biased variance, then y = xhat scale + shift. The op sums in double and
 * rounds once (half an ulp of the statistics); y is float work from the
 * f32 statistics: x - mean and its product with rstd carry an ulp of |x| +
 * |mean| times rstd, then two float operations; 4 eps of those bounds.
 * Each element's error bound on xhat goes to exh for the backward. */
static void gn_check_fwd(gn_case *k, double eps, double *exh)
{
    const float *x = TB_F(k->x), *sc = TB_F(k->sc), *sh = TB_F(k->sh), *y = TB_F(k->y);
    for (int64_t r = 0; r < k->n * k->g; r++) {
        double mu = 0, v = 0, rs;
        for (int64_t i = r * k->k; i < (r + 1) * k->k; i++)
            mu += x[i];
        mu /= (double)k->k;
        for (int64_t i = r * k->k; i < (r + 1) * k->k; i++)
            v += (x[i] - mu) * (x[i] - mu);
        v /= (double)k->k;
        rs = 1 / sqrt(v + eps);
        assert_close(TB_F(k->mean)[r], mu, FEPS * fabs(mu) + 1e-12, "gnorm mean", r);
        assert_close(TB_F(k->var)[r], v, FEPS * v + 1e-12, "gnorm var", r);
        for (int64_t i = r * k->k; i < (r + 1) * k->k; i++) {
            int64_t ch = (r % k->g) * (k->c / k->g) + (i - r * k->k) / k->hw;
            double xh = (x[i] - mu) * rs, ry = xh * sc[ch] + sh[ch];
            exh[i] = 4 * FEPS * (rs * (fabs(x[i]) + fabs(mu)) + fabs(xh));
            assert_close(y[i], ry, exh[i] * fabs(sc[ch]) + 4 * FEPS * (fabs(xh * sc[ch]) + fabs(sh[ch])), "gnorm y",
                         i);
        }
    }
}

/* The backward against double loops on the f32 statistics the op reads:
 * dx = rstd (dy scale - the row's mean of dy scale - xhat m2), m2 the
 * row's mean of dy scale xhat. The op's sums are double; its xhat is float
 * work (error exh, as the forward's), so its m2 is off by up to me, the
 * row's mean of |dy scale| exh, and dx by rstd (exh |m2| + |xhat| me) and
 * a few float roundings of its terms. The scale's gradient carries the sum
 * of |dy| exh, its rounding to float and the accumulate's addition. dy:
 * the host's copy from before the op (which may have written dx over it). */
static void gn_check_bwd(gn_case *k, double eps, const double *exh, const float *dy, int dx_ok, int acc,
                         const float *p0)
{
    const float *x = TB_F(k->x), *sc = TB_F(k->sc), *dx = TB_F(k->dx);
    double *rdg = calloc((size_t)(3 * k->c), sizeof(double)), *rdb = rdg + k->c, *edg = rdb + k->c;

    for (int64_t r = 0; r < k->n * k->g; r++) {
        double mu = TB_F(k->mean)[r], rs = 1 / sqrt((double)TB_F(k->var)[r] + eps), m1 = 0, m2 = 0, me = 0;
        int64_t c0 = (r % k->g) * (k->c / k->g), at = r * k->k;
        for (int64_t i = at; i < at + k->k; i++) {
            int64_t ch = c0 + (i - at) / k->hw;
            double xh = (x[i] - mu) * rs;
            m1 += dy[i] * (double)sc[ch], m2 += dy[i] * (double)sc[ch] * xh, me += fabs(dy[i] * sc[ch]) * exh[i];
            rdg[ch] += dy[i] * xh, rdb[ch] += dy[i], edg[ch] += fabs(dy[i]) * exh[i];
        }
        m1 /= (double)k->k, m2 /= (double)k->k, me /= (double)k->k;
        for (int64_t i = at; i < at + k->k && dx_ok; i++) {
            int64_t ch = c0 + (i - at) / k->hw;
            double xh = (x[i] - mu) * rs, g = dy[i] * (double)sc[ch], rdx = rs * (g - m1 - xh * m2);
            double tol = rs * (exh[i] * fabs(m2) + fabs(xh) * me) + 4 * FEPS * fabs(rdx);
            assert_close(dx[i], rdx, tol + 4 * FEPS * rs * (fabs(g) + fabs(m1) + fabs(xh * m2)), "gnorm dx", i);
        }
    }
    for (int64_t ch = 0; ch < k->c; ch++) {
        double eg = acc ? p0[ch] + rdg[ch] : rdg[ch], eb = acc ? p0[k->c + ch] + rdb[ch] : rdb[ch];
        assert_close(TB_F(k->dsc)[ch], eg, edg[ch] + 2 * FEPS * (fabs(eg) + fabs(p0[ch])) + 1e-12, "gnorm dscale",
                     ch);
        assert_close(TB_F(k->dsh)[ch], eb, 2 * FEPS * (fabs(eb) + fabs(p0[k->c + ch])) + 1e-12, "gnorm dshift", ch);
    }
    free(rdg);
}

/* One forward and backward: v bit 0 accumulate, bit 1 no diff_src, 4 dx = dy (setting). */
static void check_gnorm(tdev *t, int64_t n, int64_t c, int64_t hw, int64_t g, int v)
{
    const double eps = 1e-5;
    const int64_t N = n * c * hw;
    gn_case k = {n, c, hw, g, c / g * hw, frand(t, N, 2), frand(t, c, 1), frand(t, c, 1), frand(t, N, 1),
                 frand(t, n * g, 1), frand(t, n * g, 1), frand(t, N, 1), frand(t, N, 1), frand(t, c, 1),
                 frand(t, c, 1)};
    bfit_op_desc d = {.kind = BFIT_OP_GNORM_FWD, .dtype = BFIT_F32, .u.gnorm = {n, c, hw, (int)g, (float)eps}};
    bfit_op_args a = {0};
    float *dy0 = fcopy(TB_F(k.dy), N), *p0 = malloc(2 * (size_t)c * sizeof(float));
    double *exh = malloc((size_t)N * sizeof(double));
    tbuf *dxb = v == 4 ? &k.dy : &k.dx;
    tbuf *all[] = {&k.x, &k.sc, &k.sh, &k.y, &k.mean, &k.var, &k.dy, &k.dx, &k.dsc, &k.dsh};

    memcpy(p0, TB_F(k.dsc), (size_t)c * sizeof(float)), memcpy(p0 + c, TB_F(k.dsh), (size_t)c * sizeof(float));
    a.src = k.x.d, a.dst = k.y.d, a.scale = k.sc.d, a.shift = k.sh.d, a.mean = k.mean.d, a.var = k.var.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, &k.y), tbuf_down(t, &k.mean), tbuf_down(t, &k.var);
    gn_check_fwd(&k, eps, exh);
    d.kind = BFIT_OP_GNORM_BWD, d.accumulate = v & 1;
    a = (bfit_op_args){0};
    a.src = k.x.d, a.mean = k.mean.d, a.var = k.var.d, a.diff_dst = k.dy.d, a.scale = k.sc.d;
    a.diff_src = v & 2 ? NULL : dxb->d, a.diff_scale = k.dsc.d, a.diff_shift = k.dsh.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, dxb), tbuf_down(t, &k.dsc), tbuf_down(t, &k.dsh);
    if (v == 4)
        memcpy(TB_F(k.dx), TB_F(k.dy), (size_t)N * sizeof(float));
    gn_check_bwd(&k, eps, exh, dy0, !(v & 2), v & 1, p0);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tbuf_free(t, all[i]);
    free(dy0), free(p0), free(exh);
}

/* groups of several channels, one (instance norm), all (layer norm), a
 * vector (hw 1), one element a row, and over BFIT_PAR_MIN elements (rows
 * on the team); setting, accumulating, without diff_src, in place */
static void test_gnorm(void **st)
{
    static const int64_t sizes[][4] = {{2, 6, 5, 3}, {3, 4, 1, 1}, {4, 12, 1, 3}, {2, 6, 7, 6},
                                       {1, 1, 1, 1}, {3, 8, 33, 2}, {8, 32, 256, 8}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int v = 0; v < 5; v++)
            check_gnorm(*st, sizes[s][0], sizes[s][1], sizes[s][2], sizes[s][3], v);
}

/* bf16 data (x, y, dy, dx; by truncation), f32 scale, shift, statistics
 * and parameter gradients: against double loops on the widened inputs.
 * y and dx carry one bf16 rounding (|r| / 256) over the f32 work; the
 * statistics and parameter gradients are f32 sums as in check_lnorm. */
static void check_lnorm16(tdev *t, int64_t R, int64_t C, int noshift, int rms, float goff)
{
    bfit_op_desc d = {.kind = BFIT_OP_LNORM_FWD, .dtype = BFIT_BF16};
    bfit_op_args a = {0};
    tbuf x = tbuf_new(t, (size_t)(R * C) * 2), y = tbuf_new(t, (size_t)(R * C) * 2), dy = tbuf_new(t, (size_t)(R * C) * 2),
         dx = tbuf_new(t, (size_t)(R * C) * 2), g = frand(t, C, 1), b = frand(t, C, 1), mean = frand(t, R, 1),
         var = frand(t, R, 1), dg = frand(t, C, 1), db = frand(t, C, 1);
    uint16_t *xh = x.h, *dyh = dy.h;
    double *rdg = calloc((size_t)C, sizeof(double)), *rdb = calloc((size_t)C, sizeof(double));

    for (int64_t i = 0; i < R * C; i++) {
        float v = urand(2), w = urand(1);
        uint32_t vb, wb;
        memcpy(&vb, &v, 4), memcpy(&wb, &w, 4);
        xh[i] = (uint16_t)(vb >> 16), dyh[i] = (uint16_t)(wb >> 16);
    }
    tbuf_up(t, &x), tbuf_up(t, &dy);
    d.u.lnorm.rows = R, d.u.lnorm.cols = C, d.u.lnorm.eps = 1e-5f, d.u.lnorm.noshift = noshift, d.u.lnorm.rms = rms;
    d.u.lnorm.goff = goff;
    a.src = x.d, a.dst = y.d, a.scale = g.d, a.shift = noshift ? NULL : b.d, a.mean = mean.d, a.var = var.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    d.kind = BFIT_OP_LNORM_BWD;
    a = (bfit_op_args){0};
    a.src = x.d, a.mean = mean.d, a.var = var.d, a.diff_dst = dy.d, a.scale = g.d, a.diff_src = dx.d;
    a.diff_scale = dg.d, a.diff_shift = noshift ? NULL : db.d;
    float *db0 = fcopy(TB_F(db), C);
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, &y), tbuf_down(t, &mean), tbuf_down(t, &var), tbuf_down(t, &dx), tbuf_down(t, &dg), tbuf_down(t, &db);
    for (int64_t r = 0; r < R; r++) {
        double mu = 0, v = 0, rs, m1 = 0, m2 = 0;
        for (int64_t j = 0; j < C && !rms; j++)
            mu += widen16(xh[r * C + j]);
        mu /= (double)C;
        for (int64_t j = 0; j < C; j++)
            v += (widen16(xh[r * C + j]) - mu) * (widen16(xh[r * C + j]) - mu);
        v /= (double)C;
        rs = 1 / sqrt(v + 1e-5);
        assert_close(TB_F(mean)[r], mu, 4 * FEPS * (sqrt((double)C) + 2) * 2, "bf16 lnorm mean", r);
        assert_close(TB_F(var)[r], v, 8 * FEPS * (sqrt((double)C) + 2) * 4, "bf16 lnorm var", r);
        for (int64_t j = 0; j < C; j++) {
            double xh_ = (widen16(xh[r * C + j]) - mu) * rs, dyv = widen16(dyh[r * C + j]);
            m1 += dyv * (TB_F(g)[j] + goff);
            m2 += dyv * (TB_F(g)[j] + goff) * xh_;
            rdg[j] += dyv * xh_;
            rdb[j] += dyv;
        }
        m1 = rms ? 0 : m1 / (double)C, m2 /= (double)C;
        for (int64_t j = 0; j < C; j++) {
            double xh_ = (widen16(xh[r * C + j]) - mu) * rs;
            double ry = xh_ * (TB_F(g)[j] + goff) + (noshift ? 0 : TB_F(b)[j]);
            double rdx = rs * (widen16(dyh[r * C + j]) * (TB_F(g)[j] + goff) - m1 - xh_ * m2);
            assert_close(widen16(((uint16_t *)y.h)[r * C + j]), ry,
                         4 * FEPS * (sqrt((double)C) + 2) * (1 + fabs(ry)) + fabs(ry) / 256, "bf16 lnorm fwd", r * C + j);
            assert_close(widen16(((uint16_t *)dx.h)[r * C + j]), rdx,
                         4 * FEPS * (sqrt((double)C) + 2) * (1 + rs * 3) + fabs(rdx) / 256, "bf16 lnorm bwd dx", r * C + j);
        }
    }
    for (int64_t j = 0; j < C; j++) {
        assert_close(TB_F(dg)[j], rdg[j], 4 * FEPS * (double)(R + sqrt((double)C) + 2) * (2 + fabs(rdg[j])),
                     "bf16 lnorm diff_scale", j);
        if (noshift) /* none asked: not written */
            assert_true(TB_F(db)[j] == db0[j]);
        else
            assert_close(TB_F(db)[j], rdb[j], 4 * FEPS * (double)(R + 1) * (2 + fabs(rdb[j])), "bf16 lnorm diff_shift",
                         j);
    }
    free(db0);
    tbuf *all[] = {&x, &y, &dy, &dx, &g, &b, &mean, &var, &dg, &db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tbuf_free(t, all[i]);
    free(rdg), free(rdb);
}

/* ---- ROPE, REPEAT ---- */

/* Rotary embeddings against double loops of Hugging Face's formula on the
 * same float angles, in f32 and bf16 (x rounded to bf16 by truncation, the
 * result one bf16 rounding off), forward and back; the backward turns a
 * forward's output back to its input (a rotation's transpose is its
 * inverse). Repeated heads: copies, and their gradients' sums. */
static void check_rope(tdev *t, bfit_dtype dt, int64_t n, int64_t T, int64_t C, int64_t d, float theta)
{
    bfit_op_desc o = {.kind = BFIT_OP_ROPE_FWD, .dtype = dt, .u.rope = {n, T, C, d, theta}};
    bfit_op_args a = {0};
    int64_t N = n * T * C, h = d / 2;
    size_t es = bfit_dtype_size(dt);
    tbuf x = tbuf_new(t, (size_t)N * es), y = tbuf_new(t, (size_t)N * es), z = tbuf_new(t, (size_t)N * es);
    double tol = dt == BFIT_F32 ? 8 * FEPS : 1.0 / 128;

    for (int64_t i = 0; i < N; i++) {
        float v = urand(2);
        uint32_t b;
        memcpy(&b, &v, 4);
        if (dt == BFIT_F32)
            ((float *)x.h)[i] = v;
        else
            ((uint16_t *)x.h)[i] = (uint16_t)(b >> 16);
    }
    tbuf_up(t, &x);
    a.src = x.d, a.dst = y.d;
    assert_int_equal(run_op(t, &o, &a), BFIT_OK);
    o.kind = BFIT_OP_ROPE_BWD;
    a = (bfit_op_args){0};
    a.diff_dst = y.d, a.diff_src = z.d;
    assert_int_equal(run_op(t, &o, &a), BFIT_OK);
    tbuf_down(t, &y), tbuf_down(t, &z);
    for (int64_t i = 0; i < N; i++) {
        int64_t tok = i / C % T, col = i % C % d, j = col % h, base = i - col;
        double an = (float)tok * (float)(1.0 / pow((double)theta, (double)(2 * j) / (double)d));
        double x1 = dt == BFIT_F32 ? ((float *)x.h)[base + j] : widen16(((uint16_t *)x.h)[base + j]);
        double x2 = dt == BFIT_F32 ? ((float *)x.h)[base + j + h] : widen16(((uint16_t *)x.h)[base + j + h]);
        double ref = col < h ? x1 * cos(an) - x2 * sin(an) : x2 * cos(an) + x1 * sin(an);
        double got = dt == BFIT_F32 ? ((float *)y.h)[i] : widen16(((uint16_t *)y.h)[i]);
        double back = dt == BFIT_F32 ? ((float *)z.h)[i] : widen16(((uint16_t *)z.h)[i]);
        double xi = col < h ? x1 : x2;
        assert_close(got, ref, tol * (1 + fabs(ref)) * 2, "rope fwd", i);
        assert_close(back, xi, tol * 4 * (1 + fabs(xi)), "rope bwd (turned back)", i);
    }
    tbuf_free(t, &x), tbuf_free(t, &y), tbuf_free(t, &z);
}

static void check_repeat(tdev *t, int64_t rows, int64_t g, int64_t r, int64_t d)
{
    bfit_op_desc o = {.kind = BFIT_OP_REPEAT_FWD, .dtype = BFIT_F32, .u.rep = {rows, g, r, d}};
    bfit_op_args a = {0};
    int64_t N = rows * g * d;
    tbuf x = frand(t, N, 1), y = frand(t, N * r, 1), dy = frand(t, N * r, 1), dx = frand(t, N, 1);

    a.src = x.d, a.dst = y.d;
    assert_int_equal(run_op(t, &o, &a), BFIT_OK);
    o.kind = BFIT_OP_REPEAT_BWD;
    a = (bfit_op_args){0};
    a.diff_dst = dy.d, a.diff_src = dx.d;
    assert_int_equal(run_op(t, &o, &a), BFIT_OK);
    tbuf_down(t, &y), tbuf_down(t, &dx);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t q = 0; q < g * r; q++)
            for (int64_t j = 0; j < d; j++)
                assert_true(TB_F(y)[(i * g * r + q) * d + j] == TB_F(x)[(i * g + q / r) * d + j]);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t q = 0; q < g; q++)
            for (int64_t j = 0; j < d; j++) {
                double s = 0;
                for (int64_t c = 0; c < r; c++)
                    s += TB_F(dy)[(i * g * r + q * r + c) * d + j];
                assert_close(TB_F(dx)[(i * g + q) * d + j], s, 4 * FEPS * (double)r * 2, "repeat bwd", j);
            }
    tbuf_free(t, &x), tbuf_free(t, &y), tbuf_free(t, &dy), tbuf_free(t, &dx);
}

static void test_rope_repeat(void **st)
{
    check_rope(*st, BFIT_F32, 3, 5, 12, 4, 10000.0f);
    check_rope(*st, BFIT_F32, 2, 300, 256, 64, 500000.0f); /* the team */
    check_rope(*st, BFIT_BF16, 3, 5, 12, 4, 10000.0f);
    check_rope(*st, BFIT_BF16, 2, 300, 256, 64, 500000.0f);
    check_repeat(*st, 7, 2, 3, 4);
    check_repeat(*st, 600, 8, 4, 64);
}

/* ---- GATHER ---- */

/* Rows gathered by hand-built indices (out of order, a negative one: zeros)
 * and their gradient put back (zeros elsewhere), exact: copies, no sums.
 * Small integers are exact in bf16 too. */
static void check_gather(tdev *t, bfit_dtype dt)
{
    enum { n = 2, T = 4, K = 3, C = 2 };
    static const int32_t idx[n * K] = {2, -1, 0, 3, 0, 1};
    bfit_op_desc o = {.kind = BFIT_OP_GATHER_FWD, .dtype = dt, .u.gat = {n, T, K, C}};
    bfit_op_args a = {0};
    size_t es = bfit_dtype_size(dt);
    tbuf x = tbuf_new(t, n * T * C * es), y = tbuf_new(t, n * K * C * es), rows = tbuf_new(t, sizeof idx);
    tbuf dy = tbuf_new(t, n * K * C * es), dx = tbuf_new(t, n * T * C * es);

    for (int i = 0; i < n * T * C; i++)
        bfit_st(x.h, dt, i, (float)(i / (T * C) * 100 + i / C % T * 10 + i % C + 1));
    for (int i = 0; i < n * K * C; i++)
        bfit_st(dy.h, dt, i, -(float)(i + 1));
    memcpy(rows.h, idx, sizeof idx);
    tbuf_up(t, &x), tbuf_up(t, &dy), tbuf_up(t, &rows);
    tbuf_up(t, &y), tbuf_up(t, &dx); /* NaN-filled: a row left unwritten shows */
    a.src = x.d, a.dst = y.d, a.rows = rows.d;
    assert_int_equal(run_op(t, &o, &a), BFIT_OK);
    o.kind = BFIT_OP_GATHER_BWD;
    a = (bfit_op_args){0};
    a.diff_dst = dy.d, a.diff_src = dx.d, a.rows = rows.d;
    assert_int_equal(run_op(t, &o, &a), BFIT_OK);
    tbuf_down(t, &y), tbuf_down(t, &dx);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < K; k++)
            for (int c = 0; c < C; c++) {
                int r = idx[i * K + k];
                float ref = r < 0 ? 0.0f : (float)(i * 100 + r * 10 + c + 1);
                assert_true(bfit_ld(y.h, dt, (i * K + k) * C + c) == ref);
            }
    for (int i = 0; i < n; i++)
        for (int r = 0; r < T; r++)
            for (int c = 0; c < C; c++) {
                float ref = 0.0f;
                for (int k = 0; k < K; k++)
                    if (idx[i * K + k] == r)
                        ref = -(float)((i * K + k) * C + c + 1);
                assert_true(bfit_ld(dx.h, dt, (i * T + r) * C + c) == ref);
            }
    tbuf_free(t, &x), tbuf_free(t, &y), tbuf_free(t, &rows), tbuf_free(t, &dy), tbuf_free(t, &dx);
}

/* An index past the sample is refused, by sample, k and index, before
 * anything is written; so is K > T when the op is made. */
static void check_gather_refused(tdev *t, bfit_op_kind kind)
{
    static const int32_t idx[2 * 2] = {1, 0, 0, 3};
    bfit_op_desc o = {.kind = kind, .dtype = BFIT_F32, .u.gat = {2, 3, 2, 4}};
    bfit_op_args a = {0};
    tbuf in = frand(t, 2 * 3 * 4, 1), out = frand(t, 2 * 3 * 4, 1), rows = tbuf_new(t, sizeof idx);
    float *was = fcopy(TB_F(out), 2 * 3 * 4);

    memcpy(rows.h, idx, sizeof idx);
    tbuf_up(t, &rows);
    a.rows = rows.d;
    if (kind == BFIT_OP_GATHER_FWD)
        a.src = in.d, a.dst = out.d;
    else
        a.diff_dst = in.d, a.diff_src = out.d;
    assert_int_equal(run_op(t, &o, &a), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "sample 1, k 1: row 3"));
    tbuf_down(t, &out);
    assert_memory_equal(TB_F(out), was, 2 * 3 * 4 * sizeof(float));
    o.u.gat.K = 4;
    assert_int_equal(run_op(t, &o, &a), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "K <= T"));
    free(was);
    tbuf_free(t, &in), tbuf_free(t, &out), tbuf_free(t, &rows);
}

static void test_gather(void **st)
{
    check_gather(*st, BFIT_F32);
    check_gather(*st, BFIT_BF16);
    check_gather_refused(*st, BFIT_OP_GATHER_FWD);
    check_gather_refused(*st, BFIT_OP_GATHER_BWD);
}

static void test_lnorm_bf16(void **st)
{
    check_lnorm16(*st, 7, 33, 0, 0, 0);      /* one thread */
    check_lnorm16(*st, 1030, 128, 0, 0, 0); /* the team, gpt-nano's rows */
    check_lnorm16(*st, 7, 33, 1, 0, 0);      /* without a shift */
    check_lnorm16(*st, 1030, 128, 1, 0, 0);
    check_lnorm16(*st, 7, 33, 1, 1, 0);      /* RMSNorm (our own bf16 loops) */
    check_lnorm16(*st, 1030, 128, 1, 1, 0);
    check_lnorm16(*st, 7, 33, 1, 1, 1);      /* Gemma's: 1 + w */
    check_lnorm16(*st, 1030, 128, 1, 1, 1);
}

/* Rows far from 0 (1e6 + [-2, 2)): the statistics' sums must not cancel
 * (a one-pass E[x^2] - mean^2 in double keeps 13 of its 53 bits here),
 * so the variance and y stay within a few eps of two-pass double loops. */
static void test_lnorm_offset(void **st)
{
    const int64_t R = 9, C = 128;
    tdev *t = *st;
    ln_bufs k;
    k.x = tbuf_new(t, (size_t)(R * C) * 4), k.g = frand(t, C, 1), k.b = frand(t, C, 1), k.y = frand(t, R * C, 1);
    k.mean = frand(t, R, 1), k.var = frand(t, R, 1), k.dy = frand(t, R * C, 1), k.dx = frand(t, R * C, 1);
    k.dg = frand(t, C, 1), k.db = frand(t, C, 1);
    for (int64_t i = 0; i < R * C; i++)
        TB_F(k.x)[i] = 1e6f + urand(2) * (float)(1 + i / C); /* row r's spread 2 (r + 1) */
    tbuf_up(t, &k.x);
    lnorm_run(t, R, C, 0, 1e-5, &k, 0, 0, 0);
    for (int64_t r = 0; r < R; r++) {
        const float *xr = TB_F(k.x) + r * C;
        double mu = 0, v = 0, rs;
        for (int64_t j = 0; j < C; j++)
            mu += xr[j];
        mu /= (double)C;
        for (int64_t j = 0; j < C; j++)
            v += (xr[j] - mu) * (xr[j] - mu);
        v /= (double)C;
        rs = 1 / sqrt(v + 1e-5);
        assert_close(TB_F(k.var)[r], v, 4 * FEPS * v, "lnorm var, offset rows", r);
        for (int64_t j = 0; j < C; j++) {
            /* x - mean in float: x's and the mean's roundings (1e6's ulp
             * is 0.0625) make |x - mean| exact to an ulp of 1e6 */
            double ry = (xr[j] - mu) * rs * TB_F(k.g)[j] + TB_F(k.b)[j];
            assert_close(TB_F(k.y)[r * C + j], ry, (0.0625 * rs + 8 * FEPS * (1 + fabs(ry))) * 2, "lnorm fwd, offset rows",
                         r * C + j);
        }
    }
    tbuf *all[] = {&k.x, &k.g, &k.b, &k.y, &k.mean, &k.var, &k.dy, &k.dx, &k.dg, &k.db};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tbuf_free(t, all[i]);
}

/* The f32 layer norm's outputs are the same bits on 1 thread as on 2 (its
 * column sums go by fixed row chunks, added in order). */
static void test_lnorm_threads_same_bits(void **st)
{
    const int64_t R = 1030, C = 128;
    float *out[2][6];
    for (int k = 0; k < 2; k++) {
        tdev t;
        ln_bufs b;
        tdev_open(&t, k + 1);
        rng_state = 7;
        b.x = frand(&t, R * C, 2), b.g = frand(&t, C, 1), b.b = frand(&t, C, 1), b.y = frand(&t, R * C, 1);
        b.mean = frand(&t, R, 1), b.var = frand(&t, R, 1), b.dy = frand(&t, R * C, 1), b.dx = frand(&t, R * C, 1);
        b.dg = frand(&t, C, 1), b.db = frand(&t, C, 1);
        lnorm_run(&t, R, C, 1, 1e-5, &b, 0, 0, 0);
        out[k][0] = fcopy(TB_F(b.y), R * C), out[k][1] = fcopy(TB_F(b.mean), R), out[k][2] = fcopy(TB_F(b.var), R);
        out[k][3] = fcopy(TB_F(b.dx), R * C), out[k][4] = fcopy(TB_F(b.dg), C), out[k][5] = fcopy(TB_F(b.db), C);
        tbuf *all[] = {&b.x, &b.g, &b.b, &b.y, &b.mean, &b.var, &b.dy, &b.dx, &b.dg, &b.db};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            tbuf_free(&t, all[i]);
        tdev_close(&t);
    }
    assert_memory_equal(out[0][0], out[1][0], (size_t)(R * C) * 4);
    assert_memory_equal(out[0][1], out[1][1], (size_t)R * 4);
    assert_memory_equal(out[0][2], out[1][2], (size_t)R * 4);
    assert_memory_equal(out[0][3], out[1][3], (size_t)(R * C) * 4);
    assert_memory_equal(out[0][4], out[1][4], (size_t)C * 4);
    assert_memory_equal(out[0][5], out[1][5], (size_t)C * 4);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 6; i++)
            free(out[k][i]);
    (void)st;
}

/* ---- REDUCE_ROWS, ADD ---- */

static void test_reduce_rows(void **st)
{
    static const int64_t sizes[][2] = {{1, 1}, {7, 1}, {1, 7}, {7, 7}, {300, 600}, {3, 257}};
    tdev *t = *st;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int acc = 0; acc < 2; acc++) {
            int64_t M = sizes[s][0], N = sizes[s][1];
            bfit_op_desc d = {.kind = BFIT_OP_REDUCE_ROWS, .dtype = BFIT_F32, .accumulate = acc};
            bfit_op_args a = {0};
            tbuf tx = frand(t, M * N, 1), ty = frand(t, N, 1);
            const float *x = TB_F(tx), *y = TB_F(ty);
            float *y0 = fcopy(y, N);
            d.u.reduce.M = M;
            d.u.reduce.N = N;
            a.src = tx.d;
            a.dst = ty.d;
            assert_int_equal(run_op(t, &d, &a), BFIT_OK);
            tbuf_down(t, &ty);
            for (int64_t j = 0; j < N; j++) {
                double s2 = acc ? y0[j] : 0;
                for (int64_t i = 0; i < M; i++)
                    s2 += x[i * N + j];
                /* summed in double, rounded once to float: 1 ulp */
                assert_close(y[j], s2, FEPS * (fabs(s2) + 1e-30), "reduce rows", j);
            }
            tbuf_free(t, &tx);
            tbuf_free(t, &ty);
            free(y0);
        }
}

static void check_add(tdev *t, int64_t n)
{
    bfit_op_desc d = {.kind = BFIT_OP_ADD, .dtype = BFIT_F32};
    bfit_op_args a = {0};
    tbuf tx = frand(t, n, 1), tx2 = frand(t, n, 1), ty = frand(t, n, 1);
    const float *x = TB_F(tx), *x2 = TB_F(tx2), *y = TB_F(ty);
    float *y0;
    d.u.add.n = n;
    a.src = tx.d;
    a.src2 = tx2.d;
    a.dst = ty.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, &ty);
    for (int64_t i = 0; i < n; i++) /* one float addition: exact comparison with the same */
        assert_true(y[i] == x[i] + x2[i]);
    /* accumulate: dst += src */
    y0 = fcopy(y, n);
    d.accumulate = 1;
    a = (bfit_op_args){0};
    a.src = tx.d;
    a.dst = ty.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, &ty);
    for (int64_t i = 0; i < n; i++)
        assert_true(y[i] == y0[i] + x[i]);
    /* dst aliasing src */
    d.accumulate = 0;
    a = (bfit_op_args){0};
    a.src = tx.d;
    a.src2 = tx2.d;
    a.dst = tx.d;
    memcpy(y0, x, (size_t)n * sizeof(float));
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, &tx);
    for (int64_t i = 0; i < n; i++)
        assert_true(x[i] == y0[i] + x2[i]);
    tbuf_free(t, &tx);
    tbuf_free(t, &tx2);
    tbuf_free(t, &ty);
    free(y0);
}

/* The same bits, or both NaN: which of two NaN operands a sum keeps
 * depends on their order, which a compiler may swap. */
static int bf16_same(uint16_t a, uint16_t b)
{
    return a == b || ((a & 0x7fffu) > 0x7f80u && (b & 0x7fffu) > 0x7f80u);
}

/* bf16: each sum of the two widened values rounded once to nearest even
 * (half.h's definition, element by element), NaNs and infinities among
 * them; overwriting and accumulating, below and above the threaded size. */
static void check_add_bf16(tdev *t, int64_t n)
{
    bfit_op_desc d = {.kind = BFIT_OP_ADD, .dtype = BFIT_BF16};
    bfit_op_args a = {0};
    tbuf tx = tbuf_new(t, (size_t)n * 2), tx2 = tbuf_new(t, (size_t)n * 2), ty = tbuf_new(t, (size_t)n * 2);
    uint16_t *x = tx.h, *x2 = tx2.h, *y = ty.h, *y0 = malloc((size_t)n * 2);
    uint32_t r = 12345;

    for (int64_t i = 0; i < n; i++) {
        r = r * 1664525u + 1013904223u, x[i] = (uint16_t)(r >> 16);
        r = r * 1664525u + 1013904223u;
        /* mostly a nearby magnitude, so the sums round; some of any bits */
        x2[i] = i % 5 ? (uint16_t)((x[i] & 0xff80u) ^ (r >> 25)) : (uint16_t)(r >> 16);
    }
    x[0] = 0x7fc1, x2[n > 1 ? 1 : 0] = 0x7f80; /* a NaN, an infinity */
    tbuf_up(t, &tx), tbuf_up(t, &tx2);
    d.u.add.n = n;
    a.src = tx.d, a.src2 = tx2.d, a.dst = ty.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, &ty);
    for (int64_t i = 0; i < n; i++)
        if (!bf16_same(y[i], bfit_f32_to_bf16(bfit_bf16_to_f32(x[i]) + bfit_bf16_to_f32(x2[i]))))
            fail_msg("bf16 add [%lld]: %#x + %#x gave %#x", (long long)i, x[i], x2[i], y[i]);
    memcpy(y0, y, (size_t)n * 2);
    d.accumulate = 1;
    a = (bfit_op_args){0};
    a.src = tx.d, a.dst = ty.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, &ty);
    for (int64_t i = 0; i < n; i++)
        if (!bf16_same(y[i], bfit_f32_to_bf16(bfit_bf16_to_f32(y0[i]) + bfit_bf16_to_f32(x[i]))))
            fail_msg("bf16 add, accumulating [%lld]: %#x + %#x gave %#x", (long long)i, y0[i], x[i], y[i]);
    tbuf_free(t, &tx), tbuf_free(t, &tx2), tbuf_free(t, &ty);
    free(y0);
}

static void test_add(void **st)
{
    static const int64_t ns[] = {1, 7, 100003};
    for (size_t s = 0; s < 3; s++)
        check_add(*st, ns[s]), check_add_bf16(*st, ns[s]);
}

/* ---- DROPOUT ---- */


/* Forward into y and mask (device), downloaded and checked; the kept count. */
static int64_t dropout_run(tdev *t, int64_t n, float p, uint64_t seed, const tbuf *x, tbuf *y, tbuf *mask)
{
    bfit_op_desc d = {.kind = BFIT_OP_DROPOUT_FWD, .dtype = BFIT_F32};
    bfit_op_args a = {0};
    const float *xh = TB_F(*x), *yh = TB_F(*y);
    const uint64_t *m = mask->h;
    int64_t kept = 0;
    d.u.drop.n = n;
    d.u.drop.p = p;
    a.src = x->d;
    a.dst = y->d;
    a.saved = mask->d;
    a.seed = seed;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, y);
    tbuf_down(t, mask);
    for (int64_t i = 0; i < n; i++) {
        int k = MASK_BIT(m, i);
        /* x * (1/(1-p)) computed in float both here and there */
        assert_true(yh[i] == (k ? xh[i] * (1.0f / (1.0f - p)) : 0.0f));
        kept += k;
    }
    /* the bits past n in the last word are zero: nothing reads garbage */
    if (n % 64)
        assert_int_equal(m[n / 64] >> (n % 64), 0);
    return kept;
}

static void test_dropout(void **st)
{
    tdev *t = *st;
    const int64_t n = 100000;
    tbuf x = frand(t, n, 1), y = frand(t, n, 1), dy = frand(t, n, 1), dx = frand(t, n, 1);
    tbuf m1 = tbuf_new(t, MASK_BYTES(n)), m2 = tbuf_new(t, MASK_BYTES(n));
    const uint64_t *h1 = m1.h, *h2 = m2.h;
    bfit_op_desc d = {.kind = BFIT_OP_DROPOUT_BWD, .dtype = BFIT_F32};
    bfit_op_args a = {0};
    bfit_op *op;
    int64_t kept, diff = 0;
    int saved_threads = omp_get_max_threads();

    /* p = 0: everything kept, y == x */
    assert_int_equal(dropout_run(t, n, 0.0f, 5, &x, &y, &m1), n);
    assert_int_equal(dropout_run(t, 1, 0.0f, 5, &x, &y, &m1), 1);
    /* p = 0.3: kept count is Binomial(n, 0.7): sd = sqrt(n p (1-p)) = 145;
     * 5 sd = 725 makes a false failure about 1 in 3 million */
    kept = dropout_run(t, n, 0.3f, 5, &x, &y, &m1);
    assert_true(llabs(kept - 70000) <= 725);
    /* reproducible from the seed, whatever the number of threads (the
     * device runs on OpenMP's setting: threads 0) */
    omp_set_num_threads(1);
    dropout_run(t, n, 0.3f, 5, &x, &y, &m2);
    omp_set_num_threads(saved_threads);
    assert_memory_equal(h1, h2, MASK_BYTES(n));
    /* another seed: another mask (agreement of two independent masks is
     * 0.58 on average; identical masks would be a broken hash) */
    dropout_run(t, n, 0.3f, 6, &x, &y, &m2);
    for (int64_t i = 0; i < n; i++)
        diff += MASK_BIT(h1, i) != MASK_BIT(h2, i);
    assert_true(diff > n / 4);
    /* backward with m1 (still on the device): dx = dy * mask / (1-p) */
    d.u.drop.n = n;
    d.u.drop.p = 0.3f;
    a.diff_dst = dy.d;
    a.diff_src = dx.d;
    a.saved = m1.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, &dx);
    for (int64_t i = 0; i < n; i++)
        assert_true(TB_F(dx)[i] == (MASK_BIT(h1, i) ? TB_F(dy)[i] * (1.0f / 0.7f) : 0.0f));
    /* p = 1 would divide by zero */
    d.u.drop.p = 1.0f;
    assert_int_equal(bfit_op_new(t->dev, &d, &op), BFIT_EINVAL);
    tbuf_free(t, &x), tbuf_free(t, &y), tbuf_free(t, &dy), tbuf_free(t, &dx), tbuf_free(t, &m1), tbuf_free(t, &m2);
}

/* ---- XENT ---- */

/* The first largest of x[0..n): the arg-max the accuracy count uses. */
static int64_t argmax_first(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t j = 1; j < n; j++)
        if (x[j] > x[best])
            best = j;
    return best;
}

/* Forward with labels and stats, then backward; probabilities, gradient and
 * stats come back to the host. The forward runs `twice` times: stats add. */
static void xent_run(tdev *t, int64_t M, int64_t N, float scale, int twice, tbuf *x, tbuf *p, tbuf *dx,
                     const tbuf *lab, tbuf *stats)
{
    bfit_op_desc d = {.kind = BFIT_OP_XENT_FWD, .dtype = BFIT_F32};
    bfit_op_args a = {0};
    d.u.xent.M = M;
    d.u.xent.N = N;
    a.src = x->d;
    a.dst = p->d;
    a.labels = lab->d;
    a.stats = stats->d;
    for (int r = 0; r < (twice ? 2 : 1); r++)
        assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    d.kind = BFIT_OP_XENT_BWD;
    a = (bfit_op_args){0};
    a.src = p->d;
    a.labels = lab->d;
    a.diff_src = dx->d;
    a.loss_scale = scale;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, p);
    tbuf_down(t, dx);
    tbuf_down(t, stats);
}

static void check_xent(tdev *t, int64_t M, int64_t N, float range, int twice)
{
    tbuf tx = frand(t, M * N, range), tp = frand(t, M * N, 1), tdx = frand(t, M * N, 1);
    tbuf tl = tbuf_new(t, (size_t)M * sizeof(int32_t)), ts = tbuf_new(t, 2 * sizeof(double));
    const float *x = TB_F(tx), *p = TB_F(tp), *dx = TB_F(tdx);
    int32_t *lab = TB_I(tl);
    double *stats = ts.h, ref = 0, hits = 0;
    const double s0 = 0.75, h0 = 3; /* what the stats held before: the op adds */
    const float scale = 0.25f;

    /* every third row labelled with its arg-max, so the accuracy count has
     * hits to count as well as misses */
    for (int64_t i = 0; i < M; i++)
        lab[i] = i % 3 == 0 ? (int32_t)argmax_first(x + i * N, N) : (int32_t)((i * 5 + 3) % N);
    stats[0] = s0;
    stats[1] = h0;
    tbuf_up(t, &tl);
    tbuf_up(t, &ts);
    xent_run(t, M, N, scale, twice, &tx, &tp, &tdx, &tl, &ts);
    for (int64_t i = 0; i < M; i++) {
        double mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < N; j++)
            mx = fmax(mx, x[i * N + j]);
        for (int64_t j = 0; j < N; j++)
            s += exp(x[i * N + j] - mx);
        ref += log(s) + mx - x[i * N + lab[i]];
        hits += argmax_first(x + i * N, N) == lab[i];
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
    /* per-row losses in double, summed in double, added to what was there:
     * far below float eps */
    ref = s0 + (twice ? 2 : 1) * ref;
    assert_close(stats[0], ref, 1e-12 * (fabs(ref) + 1), "xent loss", 0);
    /* a count: exact */
    assert_true(stats[1] == h0 + (twice ? 2 : 1) * hits);
    tbuf_free(t, &tx), tbuf_free(t, &tp), tbuf_free(t, &tdx), tbuf_free(t, &tl), tbuf_free(t, &ts);
}

static void test_xent(void **st)
{
    check_xent(*st, 1, 1, 1, 0);
    check_xent(*st, 1, 7, 3, 0);
    check_xent(*st, 7, 1, 3, 1);
    check_xent(*st, 7, 10, 3, 0);
    check_xent(*st, 64, 1000, 5, 1);
    /* logits in the thousands: a naive exp would overflow to inf/NaN */
    check_xent(*st, 7, 7, 3000, 0);
}

/* The accuracy count takes the first of tied maxima as the prediction, as
 * torch.argmax does. */
static void test_xent_ties(void **st)
{
    static const float x[6][4] = {
        {1, 3, 3, 0},     /* tie between 1 and 2: predicts 1 */
        {1, 3, 3, 0},
        {5, 5, 5, 5},     /* all equal: predicts 0 */
        {5, 5, 5, 5},
        {-1, -2, -0.5f, -3},
        {0, 0, 1, 1},     /* tie at the end: predicts 2 */
    };
    static const int32_t lab[6] = {1, 2, 0, 3, 2, 3};
    tdev *t = *st;
    tbuf tx = tbuf_new(t, sizeof x), tp = tbuf_new(t, sizeof x), tdx = tbuf_new(t, sizeof x);
    tbuf tl = tbuf_new(t, sizeof lab), ts = tbuf_new(t, 2 * sizeof(double));
    double *stats = ts.h, ref = 0;

    memcpy(tx.h, x, sizeof x);
    memcpy(tl.h, lab, sizeof lab);
    stats[0] = stats[1] = 0;
    tbuf_up(t, &tx);
    tbuf_up(t, &tl);
    tbuf_up(t, &ts);
    xent_run(t, 6, 4, 1.0f, 0, &tx, &tp, &tdx, &tl, &ts);
    for (int i = 0; i < 6; i++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < 4; j++)
            mx = fmax(mx, x[i][j]);
        for (int j = 0; j < 4; j++)
            s += exp(x[i][j] - mx);
        ref += log(s) + mx - x[i][lab[i]];
    }
    assert_true(stats[1] == 3); /* rows 0, 2 and 4 */
    assert_close(stats[0], ref, 1e-12 * (fabs(ref) + 1), "xent loss with ties", 0);
    tbuf_free(t, &tx), tbuf_free(t, &tp), tbuf_free(t, &tdx), tbuf_free(t, &tl), tbuf_free(t, &ts);
}

static void test_xent_bad_label(void **st)
{
    tdev *t = *st;
    bfit_op_desc d = {.kind = BFIT_OP_XENT_FWD, .dtype = BFIT_F32};
    bfit_op_args a = {0};
    tbuf x = tbuf_new(t, 3 * 4 * sizeof(float)), p = tbuf_new(t, 3 * 4 * sizeof(float));
    tbuf lab = tbuf_new(t, 3 * sizeof(int32_t)), stats = tbuf_new(t, 2 * sizeof(double));
    double *sh = stats.h;

    memset(x.h, 0, x.bytes);
    TB_I(lab)[0] = 1, TB_I(lab)[1] = 4, TB_I(lab)[2] = 0;
    sh[0] = 123, sh[1] = 7;
    tbuf_up(t, &x), tbuf_up(t, &lab), tbuf_up(t, &stats);
    d.u.xent.M = 3;
    d.u.xent.N = 4;
    a.src = x.d;
    a.dst = p.d;
    a.labels = lab.d;
    a.stats = stats.d;
    assert_int_equal(run_op(t, &d, &a), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "label 4 of sample 1"));
    tbuf_down(t, &stats);
    assert_true(sh[0] == 123 && sh[1] == 7); /* nothing written on a refused call */
    /* labels without stats (or stats without labels) are refused */
    a.stats = NULL;
    assert_int_equal(run_op(t, &d, &a), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "labels and stats go together"));
    TB_I(lab)[1] = -1;
    tbuf_up(t, &lab);
    d.kind = BFIT_OP_XENT_BWD;
    a = (bfit_op_args){0};
    a.src = p.d;
    a.labels = lab.d;
    a.diff_src = x.d;
    a.loss_scale = 1;
    assert_int_equal(run_op(t, &d, &a), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "label -1 of sample 1"));
    tbuf_free(t, &x), tbuf_free(t, &p), tbuf_free(t, &lab), tbuf_free(t, &stats);
}

/* ---- SCALE ---- */

static void test_scale(void **st)
{
    static const int64_t ns[] = {1, 7, 100003};
    static const float alphas[] = {0.37f, -2.0f, 0.0f};
    tdev *t = *st;
    for (size_t s = 0; s < 3; s++) {
        int64_t n = ns[s];
        bfit_op_desc d = {.kind = BFIT_OP_SCALE, .dtype = BFIT_F32};
        bfit_op_args a = {0};
        tbuf x = frand(t, n, 3);
        float *x0 = fcopy(TB_F(x), n);
        d.u.scale.n = n;
        a.dst = x.d;
        a.alpha = alphas[s];
        assert_int_equal(run_op(t, &d, &a), BFIT_OK);
        tbuf_down(t, &x);
        for (int64_t i = 0; i < n; i++) /* one float product: exact against the same */
            assert_true(TB_F(x)[i] == x0[i] * alphas[s]);
        a.dst = NULL; /* dst is the operand: required */
        assert_int_equal(run_op(t, &d, &a), BFIT_EINVAL);
        tbuf_free(t, &x);
        free(x0);
    }
}

/* ---- NORMS ---- */

/* Run NORMS over src (with prev as state0, or none) into stats; downloads
 * stats and prev. */
static void norms_run(tdev *t, int64_t n, const tbuf *src, tbuf *prev, tbuf *stats)
{
    bfit_op_desc d = {.kind = BFIT_OP_NORMS, .dtype = BFIT_F32};
    bfit_op_args a = {0};
    d.u.norms.n = n;
    a.src = src->d;
    a.state0 = prev ? prev->d : NULL;
    a.stats = stats->d;
    assert_int_equal(run_op(t, &d, &a), BFIT_OK);
    tbuf_down(t, stats);
    if (prev)
        tbuf_down(t, prev);
}

static void check_norms(tdev *t, int64_t n)
{
    tbuf g = frand(t, n, 2), prev = frand(t, n, 2), stats = tbuf_new(t, 2 * sizeof(double));
    double *sh = stats.h, sq = 0, dsq = 0, mag = 0;
    const float *gh = TB_F(g);
    float *p0 = fcopy(TB_F(prev), n);

    for (int64_t i = 0; i < n; i++) {
        double y = (double)gh[i] - p0[i];
        sq += (double)gh[i] * gh[i];
        dsq += y * y;
        mag += fabs(y) * (fabs(gh[i]) + fabs(p0[i]));
    }
    /* stats are results, not sums onto what was there */
    sh[0] = sh[1] = 1e30;
    tbuf_up(t, &stats);
    norms_run(t, n, &g, NULL, &stats);
    /* squares of floats are exact in double; a double sum of n positive
     * terms errs by at most n double epsilons of the total (Higham) */
    assert_close(sh[0], sq, (double)(n + 2) * DBL_EPSILON * sq, "norms sum of squares", n);
    norms_run(t, n, &g, &prev, &stats);
    assert_close(sh[0], sq, (double)(n + 2) * DBL_EPSILON * sq, "norms sum of squares (with state0)", n);
    /* the difference of two floats in double is exact up to one rounding of
     * its magnitude, which mag bounds */
    assert_close(sh[1], dsq, (double)(n + 4) * DBL_EPSILON * (dsq + mag), "norms sum of squared changes", n);
    /* state0 became src */
    assert_memory_equal(prev.h, gh, (size_t)n * sizeof(float));
    /* the same src again: nothing changed */
    norms_run(t, n, &g, &prev, &stats);
    assert_true(sh[1] == 0);
    tbuf_free(t, &g), tbuf_free(t, &prev), tbuf_free(t, &stats);
    free(p0);
}

static void test_norms(void **st)
{
    /* 65536 and above are summed in chunks */
    static const int64_t ns[] = {1, 7, 1001, 65535, 65536, 100003};
    for (size_t s = 0; s < sizeof ns / sizeof ns[0]; s++)
        check_norms(*st, ns[s]);
}

/* The sums do not depend on the thread count, bit for bit: a resumed run on
 * another machine clips exactly as the original did. */
static void test_norms_threads_bitwise(void **st)
{
    const int64_t n = 200003; /* chunked */
    double res[2][4];
    (void)st;
    for (int k = 0; k < 2; k++) {
        tdev t;
        bfit_device_info info;
        tbuf g, prev, stats;
        rng_state = 4242; /* the same data on both devices */
        tdev_open(&t, k + 1);
        bfit_device_info_get(t.dev, &info);
        assert_int_equal(info.threads, k + 1);
        g = frand(&t, n, 2), prev = frand(&t, n, 2), stats = tbuf_new(&t, 2 * sizeof(double));
        norms_run(&t, n, &g, NULL, &stats);
        res[k][0] = ((double *)stats.h)[0];
        norms_run(&t, n, &g, &prev, &stats);
        res[k][1] = ((double *)stats.h)[0];
        res[k][2] = ((double *)stats.h)[1];
        res[k][3] = 0;
        tbuf_free(&t, &g), tbuf_free(&t, &prev), tbuf_free(&t, &stats);
        tdev_close(&t);
    }
    assert_memory_equal(res[0], res[1], sizeof res[0]);
}

/* ---- SGD ---- */

typedef struct sgd_case {
    double lr, momentum, dampening, wd;
    int nesterov;
} sgd_case;

/* args.hyper as src/optim/optim.c lays it out for step `step` (0 = first). */
static void sgd_hyper(const sgd_case *c, int step, float *h)
{
    h[BFIT_SGD_LR_NEG] = (float)-c->lr;
    h[BFIT_SGD_WD] = (float)c->wd;
    h[BFIT_SGD_MOM] = (float)c->momentum;
    h[BFIT_SGD_DAMP1] = (float)(1.0 - c->dampening);
    h[BFIT_SGD_FIRST] = step == 0 ? 1.0f : 0.0f;
}

/* One step of torch.optim.SGD's single-tensor code in double, from the
 * float values before it (p, buf: updated in place), checked against what
 * the device made of the same (pd, bd). The coefficients are the float ones
 * PyTorch's kernels get. */
static void sgd_check_step(const sgd_case *c, const float *h, int first, int64_t n, const float *g, double *p,
                           double *buf, const float *pd, const float *bd)
{
    double lr = -(double)h[BFIT_SGD_LR_NEG], wd = h[BFIT_SGD_WD], mom = h[BFIT_SGD_MOM];
    double damp1 = h[BFIT_SGD_DAMP1];
    for (int64_t i = 0; i < n; i++) {
        double d = g[i] + wd * p[i], md = fabs(g[i]) + fabs(wd * p[i]), mb = md;
        if (c->momentum != 0) {
            buf[i] = first ? d : mom * buf[i] + damp1 * d;
            mb = first ? md : fabs(mom * buf[i]) + fabs(damp1) * md;
            /* d (one rounding), mom * buf and the fused add: 3 roundings of
             * the terms' magnitude */
            assert_close(bd[i], buf[i], 4 * FEPS * mb, "sgd momentum buffer", i);
            if (c->nesterov) {
                d = d + mom * buf[i];
                mb = md + mom * mb;
            } else {
                d = buf[i];
            }
        }
        p[i] = p[i] - lr * d;
        /* d's roundings scaled by lr, and the last fused add */
        assert_close(pd[i], p[i], 4 * FEPS * (fabs(p[i]) + lr * (fabs(d) + mb)), "sgd parameters", i);
    }
}

static void check_sgd(tdev *t, const sgd_case *c, int64_t n, int steps)
{
    bfit_op_desc d = {.kind = BFIT_OP_SGD, .dtype = BFIT_F32};
    tbuf p = frand(t, n, 1), g = tbuf_new(t, (size_t)n * sizeof(float));
    tbuf buf = tbuf_new(t, (size_t)n * sizeof(float)); /* NaN: the first step must not read it */
    double *rp = malloc((size_t)n * sizeof(double)), *rb = malloc((size_t)n * sizeof(double));
    bfit_op *op;

    d.u.sgd.n = n;
    d.u.sgd.nesterov = c->nesterov;
    d.u.sgd.momentum = c->momentum != 0;
    assert_int_equal(bfit_op_new(t->dev, &d, &op), BFIT_OK);
    assert_int_equal(bfit_op_workspace_bytes(op), 0);
    tbuf_up(t, &buf);
    for (int s = 0; s < steps; s++) {
        bfit_op_args a = {0};
        for (int64_t i = 0; i < n; i++) {
            TB_F(g)[i] = urand(1);
            rp[i] = TB_F(p)[i];
            rb[i] = TB_F(buf)[i];
        }
        tbuf_up(t, &g);
        sgd_hyper(c, s, a.hyper);
        a.dst = p.d;
        a.src = g.d;
        a.state0 = c->momentum != 0 ? buf.d : NULL;
        if (s == 0) {
            /* a buffer the op was not made for, or none when it was, is refused */
            bfit_op_args wrong = a;
            wrong.state0 = a.state0 ? NULL : buf.d;
            assert_int_equal(bfit_op_run(op, &wrong), BFIT_EINVAL);
            assert_non_null(strstr(bfit_errmsg(), "momentum buffer"));
        }
        assert_int_equal(bfit_op_run(op, &a), BFIT_OK);
        tbuf_down(t, &p);
        tbuf_down(t, &buf);
        sgd_check_step(c, a.hyper, s == 0, n, TB_F(g), rp, rb, TB_F(p), TB_F(buf));
        /* without momentum there is no buffer: it stays as it was (NaN) */
        if (c->momentum == 0)
            assert_true(isnan(TB_F(buf)[0]));
    }
    bfit_op_free(op);
    tbuf_free(t, &p), tbuf_free(t, &g), tbuf_free(t, &buf);
    free(rp), free(rb);
}

static void test_sgd(void **st)
{
    static const sgd_case cases[] = {
        {0.1, 0, 0, 0, 0},        /* plain */
        {0.05, 0, 0, 0.01, 0},    /* plain with L2 weight decay */
        {0.1, 0.9, 0, 0, 0},      /* momentum */
        {0.02, 0.9, 0.3, 0.05, 0}, /* dampening: the first step's buffer is d, not (1-damp) d */
        {0.1, 0.9, 0, 0, 1},      /* Nesterov */
        {0.03, 0.8, 0, 0.01, 1},  /* Nesterov with weight decay */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        check_sgd(*st, &cases[k], 7, 4);
        check_sgd(*st, &cases[k], 100003, 3); /* the threaded loop */
    }
}

/* ---- ADAMW ---- */

typedef struct adamw_case {
    double lr, beta1, beta2, eps, wd;
} adamw_case;

/* args.hyper as src/optim/optim.c lays it out for step t (1 = first). */
static void adamw_hyper(const adamw_case *c, int step, float *h)
{
    h[BFIT_ADAMW_DECAY_MUL] = (float)(1.0 - c->lr * c->wd);
    h[BFIT_ADAMW_B1] = (float)c->beta1;
    h[BFIT_ADAMW_C1] = (float)(1.0 - c->beta1);
    h[BFIT_ADAMW_B2] = (float)c->beta2;
    h[BFIT_ADAMW_C2] = (float)(1.0 - c->beta2);
    h[BFIT_ADAMW_STEP_NEG] = (float)-(c->lr / (1.0 - pow(c->beta1, step)));
    h[BFIT_ADAMW_BC2_SQRT] = (float)sqrt(1.0 - pow(c->beta2, step));
    h[BFIT_ADAMW_EPS] = (float)c->eps;
}

/* One step of torch.optim.AdamW's single-tensor code in double with the
 * exact coefficients, from the float values before it (p, m, v: updated in
 * place), checked against the device's (pd, md, vd). */
static void adamw_check_step(const adamw_case *c, int step, int64_t n, const float *g, double *p, double *m,
                             double *v, const float *pd, const float *md, const float *vd)
{
    double bc1 = 1 - pow(c->beta1, step), bc2 = 1 - pow(c->beta2, step), ss = c->lr / bc1;
    for (int64_t i = 0; i < n; i++) {
        double mm = fabs(c->beta1 * m[i]) + (1 - c->beta1) * fabs(g[i]), den, upd;
        p[i] *= 1 - c->lr * c->wd;
        m[i] = c->beta1 * m[i] + (1 - c->beta1) * g[i];
        v[i] = c->beta2 * v[i] + (1 - c->beta2) * (double)g[i] * g[i];
        den = sqrt(v[i]) / sqrt(bc2) + c->eps;
        upd = ss * mm / den;
        /* each moment: its float coefficients (1 rounding each), a product
         * and a fused add, on the terms' magnitude (v has no cancellation) */
        assert_close(md[i], m[i], 4 * FEPS * mm, "adamw exp_avg", i);
        assert_close(vd[i], v[i], 4 * FEPS * v[i], "adamw exp_avg_sq", i);
        p[i] -= ss * m[i] / den;
        /* the update's bound: m's error (on mm), the rounded step size,
         * sqrt, two divisions and an add through den, the product: about 8
         * roundings, 16 eps; the decay product and the final add on |p| */
        assert_close(pd[i], p[i], 4 * FEPS * fabs(p[i]) + 16 * FEPS * upd, "adamw parameters", i);
    }
}

static void check_adamw(tdev *t, const adamw_case *c, int64_t n, int steps)
{
    bfit_op_desc d = {.kind = BFIT_OP_ADAMW, .dtype = BFIT_F32};
    tbuf p = frand(t, n, 1), g = tbuf_new(t, (size_t)n * sizeof(float));
    tbuf m = tbuf_new(t, (size_t)n * sizeof(float)), v = tbuf_new(t, (size_t)n * sizeof(float));
    double *rp = malloc((size_t)n * sizeof(double)), *rm = calloc((size_t)n, sizeof(double));
    double *rv = calloc((size_t)n, sizeof(double));
    bfit_op *op;

    d.u.adamw.n = n;
    assert_int_equal(bfit_op_new(t->dev, &d, &op), BFIT_OK);
    /* the moments start at zero, as the optimizer zeroes its state */
    memset(m.h, 0, m.bytes), memset(v.h, 0, v.bytes);
    tbuf_up(t, &m), tbuf_up(t, &v);
    for (int s = 1; s <= steps; s++) {
        bfit_op_args a = {0};
        for (int64_t i = 0; i < n; i++) {
            /* gradients of varied scale: the moments see large and small */
            TB_F(g)[i] = urand(1) * (i % 3 == 0 ? 1e-3f : 1.0f);
            rp[i] = TB_F(p)[i], rm[i] = TB_F(m)[i], rv[i] = TB_F(v)[i];
        }
        tbuf_up(t, &g);
        adamw_hyper(c, s, a.hyper);
        a.dst = p.d, a.src = g.d, a.state0 = m.d, a.state1 = v.d;
        assert_int_equal(bfit_op_run(op, &a), BFIT_OK);
        tbuf_down(t, &p), tbuf_down(t, &m), tbuf_down(t, &v);
        adamw_check_step(c, s, n, TB_F(g), rp, rm, rv, TB_F(p), TB_F(m), TB_F(v));
    }
    /* the moments are required */
    {
        bfit_op_args a = {0};
        a.dst = p.d, a.src = g.d, a.state0 = m.d;
        assert_int_equal(bfit_op_run(op, &a), BFIT_EINVAL);
    }
    bfit_op_free(op);
    tbuf_free(t, &p), tbuf_free(t, &g), tbuf_free(t, &m), tbuf_free(t, &v);
    free(rp), free(rm), free(rv);
}

static void test_adamw(void **st)
{
    static const adamw_case cases[] = {
        {1e-3, 0.9, 0.999, 1e-8, 0},    /* no weight decay */
        {1e-3, 0.9, 0.999, 1e-8, 0.01}, /* PyTorch's defaults */
        {0.05, 0.8, 0.99, 1e-6, 0.1},   /* large lr and decay, other betas */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        check_adamw(*st, &cases[k], 7, 5);
        check_adamw(*st, &cases[k], 100003, 3); /* the threaded loop */
    }
}

/* The shapes of concatenations and the ops on rows are checked in
 * bfit_op_new, for every device alike: the CPU and the recorder (which
 * stands for any other here) refuse the same bad shapes with the same
 * message, naming what is wrong. */
static void test_rows_ops_reject(void **st)
{
    struct { bfit_op_desc d; const char *msg; } bad[5];
    bfit_op_needs none;
    bfit_device *devs[2];
    bfit_op *op;
    memset(bad, 0, sizeof bad);
    bad[0].d = (bfit_op_desc){.kind = BFIT_OP_CONCAT_FWD, .dtype = BFIT_F32};
    bad[0].d.u.concat.rows = 4, bad[0].d.u.concat.n = BFIT_OP_MAXCAT + 1;
    bad[0].msg = "concat: 4 rows of 33 inputs (1 to 32 inputs)";
    bad[1].d = (bfit_op_desc){.kind = BFIT_OP_CONCAT_BWD, .dtype = BFIT_F32};
    bad[1].d.u.concat.rows = 4, bad[1].d.u.concat.n = 2, bad[1].d.u.concat.cols[0] = 3;
    bad[1].msg = "concat: input 1 has 0 columns";
    bad[2].d = (bfit_op_desc){.kind = BFIT_OP_TRANSPOSE, .dtype = BFIT_F32};
    bad[2].d.u.tr.n = 2, bad[2].d.u.tr.a = 0, bad[2].d.u.tr.b = 5;
    bad[2].msg = "transpose: sizes must be positive, got n 2, 0 x 5";
    bad[3].d = (bfit_op_desc){.kind = BFIT_OP_ADD_ROWS, .dtype = BFIT_F32};
    bad[3].d.u.rows.M = -1, bad[3].d.u.rows.N = 3;
    bad[3].msg = "broadcast add: sizes must be positive, got -1 x 3";
    bad[4].d = (bfit_op_desc){.kind = BFIT_OP_SLICE_BWD, .dtype = BFIT_F32};
    bad[4].d.u.slice.rows = 2, bad[4].d.u.slice.ld = 8, bad[4].d.u.slice.off = 6, bad[4].d.u.slice.len = 3;
    bad[4].msg = "slice: columns [6, 9) of 8, 2 rows";
    devs[0] = ((tdev *)*st)->dev;
    assert_int_equal(bfit_device_recorder_new(&none, &devs[1]), BFIT_OK);
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < 5; i++) {
            assert_int_equal(bfit_op_new(devs[v], &bad[i].d, &op), BFIT_EINVAL);
            if (!strstr(bfit_errmsg(), bad[i].msg))
                fail_msg("%s, case %d: '%s', not '%s'", v ? "recorder" : "cpu", i, bfit_errmsg(), bad[i].msg);
        }
    bfit_device_free(devs[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),         cmocka_unit_test(test_matmul_accumulates_twice),
        cmocka_unit_test(test_matmul_rejects), cmocka_unit_test(test_eltwise_rejects), cmocka_unit_test(test_eltwise),
        cmocka_unit_test(test_eltwise_bf16),
        cmocka_unit_test(test_gelu_sweep),
        cmocka_unit_test(test_chscale),       cmocka_unit_test(test_prelu),
        cmocka_unit_test(test_rows_ops_reject),
        cmocka_unit_test(test_op_times),
        cmocka_unit_test(test_relu_bits),      cmocka_unit_test(test_cast),
        cmocka_unit_test(test_lnorm),          cmocka_unit_test(test_lnorm_threads_same_bits),
        cmocka_unit_test(test_lnorm_offset),      cmocka_unit_test(test_lnorm_bf16),
        cmocka_unit_test(test_rope_repeat),   cmocka_unit_test(test_gather),
        cmocka_unit_test(test_gnorm),
        cmocka_unit_test(test_reduce_rows),
        cmocka_unit_test(test_add),            cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_xent),           cmocka_unit_test(test_xent_ties),
        cmocka_unit_test(test_xent_bad_label), cmocka_unit_test(test_scale),
        cmocka_unit_test(test_norms),          cmocka_unit_test(test_norms_threads_bitwise),
        cmocka_unit_test(test_sgd),            cmocka_unit_test(test_adamw),
    };
    return cmocka_run_group_tests(tests, tdev_setup, tdev_teardown);
}
