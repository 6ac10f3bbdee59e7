/* test_layers_dense.c - the dense layers (linear, relu, gelu, flatten,
 * dropout, layernorm, add, xent) through the layer API: finite-difference
 * gradient checks at several shapes (m = 1 and 7, odd feature counts),
 * forward values against naive double loops, accumulation of parameter
 * gradients over two backwards, eval mode, error messages, and the bytes
 * bfit_layer_memory reports per category. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gradcheck.h"

#define FEPS 1.1920929e-7

static bfit_shape V(int c) { return (bfit_shape){c, 1, 1}; }
static bfit_shape S(int c, int h, int w) { return (bfit_shape){c, h, w}; }

static bfit_layer_cfg cfg_of(bfit_layer_kind k)
{
    return bfit_layer_cfg_default(k);
}

/* ---- gradient checks ----
 * gradcheck's defaults (h = 1e-2, max relative error 2e-2 with a 1e-2
 * floor) hold for these layers: central differences are exact for the
 * piecewise-linear ones (linear, relu away from the kink, flatten, dropout,
 * add) up to float rounding of L (~1e-7 |L| / h = ~1e-5 relative), and the
 * O(h^2) truncation for gelu, layernorm and softmax is ~1e-4 at h = 1e-2
 * with O(1) inputs. A wrong gradient (a missing term, a transposed
 * product) is off by O(1), far above 2e-2. */

static void gc(const char *label, bfit_layer_cfg cfg, bfit_shape in, int m)
{
    gc_case c = {.label = label, .cfg = cfg, .nin = 1, .in = {in}, .m = m};
    gc_assert(&c);
}

static void test_gc_linear(void **st)
{
    bfit_layer_cfg c = cfg_of(BFIT_L_LINEAR);
    (void)st;
    c.units = 5;
    gc("linear 7->5 m=1", c, V(7), 1);
    gc("linear 7->5 m=7", c, V(7), 7);
    c.units = 1;
    gc("linear 1->1 m=7", c, V(1), 7);
    gc("linear 33->1 m=3", c, V(33), 3);
    c.units = 13;
    c.bias = 0;
    gc("linear 9->13 no bias m=7", c, V(9), 7);
}

static void test_gc_act(void **st)
{
    bfit_layer_cfg r = cfg_of(BFIT_L_RELU), g = cfg_of(BFIT_L_GELU);
    /* relu: skip inputs within 2h of the kink, where a central difference
     * straddles it and measures the average of 0 and 1 */
    gc_case c = {.label = "relu 3x5x5 m=7", .cfg = r, .nin = 1, .in = {S(3, 5, 5)}, .m = 7, .kink_gap = 0.02};
    (void)st;
    gc_assert(&c);
    c.label = "relu 7 m=1";
    c.in[0] = V(7);
    c.m = 1;
    gc_assert(&c);
    gc("gelu 7 m=1", g, V(7), 1);
    gc("gelu 2x3x3 m=7", g, S(2, 3, 3), 7);
    gc("gelu 1 m=5", g, V(1), 5);
}

static void test_gc_flatten_dropout(void **st)
{
    bfit_layer_cfg d = cfg_of(BFIT_L_DROPOUT);
    (void)st;
    gc("flatten 3x4x5 m=7", cfg_of(BFIT_L_FLATTEN), S(3, 4, 5), 7);
    gc("flatten 1x1x7 m=1", cfg_of(BFIT_L_FLATTEN), S(1, 1, 7), 1);
    /* the mask is a function of the seed, so every forward of the check
     * drops the same elements and the loss is a fixed linear function */
    d.p = 0.3f;
    gc("dropout p=0.3 3x5x5 m=7", d, S(3, 5, 5), 7);
    gc("dropout p=0.3 7 m=1", d, V(7), 1);
    d.p = 0.0f;
    gc("dropout p=0 7 m=7", d, V(7), 7);
}

static void test_gc_layernorm(void **st)
{
    bfit_layer_cfg c = cfg_of(BFIT_L_LAYERNORM);
    (void)st;
    gc("layernorm 7 m=1", c, V(7), 1);
    gc("layernorm 7 m=7", c, V(7), 7);
    gc("layernorm 3x4x5 m=7", c, S(3, 4, 5), 7);
    gc("layernorm 2 m=3", c, V(2), 3);
}

static void test_gc_add(void **st)
{
    gc_case c = {.label = "add 3x2x2 m=7", .cfg = cfg_of(BFIT_L_ADD), .nin = 2, .in = {S(3, 2, 2), S(3, 2, 2)}, .m = 7};
    (void)st;
    gc_assert(&c);
    c.label = "add 1 m=1";
    c.in[0] = c.in[1] = V(1);
    c.m = 1;
    gc_assert(&c);
}

static void test_gc_xent(void **st)
{
    (void)st;
    gc("xent 10 m=7", cfg_of(BFIT_L_XENT), V(10), 7);
    gc("xent 7 m=1", cfg_of(BFIT_L_XENT), V(7), 1);
    gc("xent 3 m=7", cfg_of(BFIT_L_XENT), V(3), 7);
}

/* ---- a rig: one layer with its buffers, like the model gives them ---- */

typedef struct rig {
    bfit_arena *arena;
    bfit_device *dev;
    bfit_layer *l;
    int m, training;
    float *x[2], *y, *dy, *dx[2];
    void *saved, *ws_f, *ws_b;
    int32_t *labels;
    double loss;
} rig;

static void *zalloc(size_t n)
{
    void *p = aligned_alloc(64, BFIT_ALIGN_UP(n ? n : 1));
    memset(p, 0, BFIT_ALIGN_UP(n ? n : 1));
    return p;
}

static float *frand(int64_t n, float a, uint64_t seed)
{
    float *p = zalloc((size_t)n * sizeof(float));
    bfit_fill_uniform(p, n, a, seed);
    return p;
}

static void rig_new(rig *r, bfit_layer_cfg cfg, const bfit_shape *in, int nin, int m, int training)
{
    char err[256];
    memset(r, 0, sizeof *r);
    r->m = m;
    r->training = training;
    r->arena = bfit_arena_new(1ull << 30, NULL);
    assert_int_equal(bfit_device_cpu_new(r->arena, 0, &r->dev), BFIT_OK);
    if (bfit_layer_new(&cfg, r->dev, in, nin, &r->l, err, sizeof err) != BFIT_OK)
        fail_msg("layer: %s", err);
    for (int i = 0; i < r->l->nparams; i++) {
        bfit_param *p = &r->l->params[i];
        p->data = zalloc((size_t)bfit_param_numel(p) * sizeof(float));
        if (p->trainable)
            p->grad = zalloc((size_t)bfit_param_numel(p) * sizeof(float));
    }
    if (r->l->vt->init_params)
        r->l->vt->init_params(r->l, 77);
    assert_int_equal(bfit_layer_prepare(r->l, m, training), BFIT_OK);
    for (int i = 0; i < nin; i++) {
        int64_t n = (int64_t)m * bfit_shape_numel(in[i]);
        r->x[i] = frand(n, 2, 300 + (uint64_t)i);
        r->dx[i] = frand(n, 1, 400 + (uint64_t)i); /* garbage: backward must overwrite */
    }
    r->y = zalloc((size_t)m * (size_t)bfit_shape_numel(r->l->out) * sizeof(float));
    r->dy = frand((int64_t)m * bfit_shape_numel(r->l->out), 1, 500);
    r->saved = zalloc(r->l->need.saved);
    r->ws_f = zalloc(r->l->need.ws_fwd);
    r->ws_b = zalloc(r->l->need.ws_bwd);
    r->labels = zalloc((size_t)m * sizeof(int32_t));
    for (int i = 0; i < m; i++)
        r->labels[i] = (int32_t)((i * 3 + 1) % r->l->out.c);
}

static int rig_forward(rig *r)
{
    bfit_fwd_args a = {.m = r->m, .training = r->training, .x = {r->x[0], r->x[1]}, .y = r->y,
                       .saved = r->saved, .ws = r->ws_f, .seed = 9, .labels = r->labels, .loss = &r->loss};
    return bfit_layer_forward(r->l, &a);
}

static int rig_backward(rig *r, float loss_scale)
{
    bfit_bwd_args b = {.m = r->m, .x = {r->x[0], r->x[1]}, .y = r->y, .dy = r->dy, .dx = {r->dx[0], r->dx[1]},
                       .saved = r->saved, .ws = r->ws_b, .labels = r->labels, .loss_scale = loss_scale};
    return bfit_layer_backward(r->l, &b);
}

static void rig_free(rig *r)
{
    for (int i = 0; i < 2; i++) {
        free(r->x[i]);
        free(r->dx[i]);
    }
    for (int i = 0; i < r->l->nparams; i++) {
        free(r->l->params[i].data);
        free(r->l->params[i].grad);
    }
    free(r->y), free(r->dy), free(r->saved), free(r->ws_f), free(r->ws_b), free(r->labels);
    bfit_layer_free(r->l);
    bfit_device_free(r->dev);
    bfit_arena_free(r->arena);
}

static void close_to(double got, double ref, double tol, const char *what, int64_t i)
{
    if (!(fabs(got - ref) <= tol))
        fail_msg("%s[%lld]: got %.9g, reference %.9g (tol %.3g)", what, (long long)i, got, ref, tol);
}

/* ---- forward values against naive loops ---- */

static void test_fwd_linear(void **st)
{
    bfit_layer_cfg c = cfg_of(BFIT_L_LINEAR);
    bfit_shape in = V(9);
    rig r;
    (void)st;
    c.units = 7;
    rig_new(&r, c, &in, 1, 7, 0);
    /* PyTorch init: U(-1/sqrt(9), 1/sqrt(9)) = U(-1/3, 1/3), not all equal */
    for (int i = 0; i < 2; i++) {
        const bfit_param *p = &r.l->params[i];
        float lo = 1, hi = -1;
        for (int64_t j = 0; j < bfit_param_numel(p); j++) {
            assert_true(fabsf(p->data[j]) <= 1.0f / 3.0f);
            lo = fminf(lo, p->data[j]);
            hi = fmaxf(hi, p->data[j]);
        }
        assert_true(hi - lo > 0.1f);
    }
    assert_string_equal(r.l->params[0].name, "weight");
    assert_int_equal(r.l->params[0].dim[0], 7);
    assert_int_equal(r.l->params[0].dim[1], 9);
    assert_int_equal(r.l->params[0].decay, 1);
    assert_int_equal(r.l->params[1].decay, 0);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    for (int i = 0; i < 7; i++)
        for (int o = 0; o < 7; o++) {
            double s = r.l->params[1].data[o], mag = fabs(s);
            for (int k = 0; k < 9; k++) {
                s += (double)r.x[0][i * 9 + k] * r.l->params[0].data[o * 9 + k];
                mag += fabs((double)r.x[0][i * 9 + k] * r.l->params[0].data[o * 9 + k]);
            }
            /* float dot product of 10 terms: 4 eps per term on the magnitude */
            close_to(r.y[i * 7 + o], s, 4 * FEPS * 10 * mag, "linear y", i * 7 + o);
        }
    /* ops are sized for m = 7: another m is refused, not overrun */
    r.m = 8;
    assert_int_equal(rig_forward(&r), BFIT_ESTATE);
    assert_non_null(strstr(bfit_errmsg(), "forward of 8 samples"));
    assert_non_null(strstr(bfit_errmsg(), "prepared for 7"));
    r.m = 7;
    rig_free(&r);
}

static void test_fwd_act_flatten_add(void **st)
{
    bfit_shape in[2] = {S(3, 5, 5), S(3, 5, 5)};
    int64_t n = 7 * 75;
    rig r;
    (void)st;
    rig_new(&r, cfg_of(BFIT_L_RELU), in, 1, 7, 1);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    for (int64_t i = 0; i < n; i++) /* exact: relu is a selection */
        assert_true(r.y[i] == (r.x[0][i] > 0 ? r.x[0][i] : 0.0f));
    rig_free(&r);

    rig_new(&r, cfg_of(BFIT_L_GELU), in, 1, 7, 1);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    for (int64_t i = 0; i < n; i++) {
        double x = r.x[0][i], ref = 0.5 * x * (1 + erf(x / M_SQRT2)); /* PyTorch's default gelu */
        /* oneDNN's vectorised erf is accurate to a few ulp: 16 eps */
        close_to(r.y[i], ref, 16 * FEPS * (1 + fabs(ref)), "gelu y", i);
    }
    rig_free(&r);

    rig_new(&r, cfg_of(BFIT_L_FLATTEN), in, 1, 7, 1);
    assert_true(bfit_shape_eq(r.l->out, V(75)));
    assert_int_equal(rig_forward(&r), BFIT_OK);
    assert_memory_equal(r.y, r.x[0], (size_t)n * sizeof(float));
    assert_int_equal(rig_backward(&r, 1), BFIT_OK);
    assert_memory_equal(r.dx[0], r.dy, (size_t)n * sizeof(float));
    rig_free(&r);

    rig_new(&r, cfg_of(BFIT_L_ADD), in, 2, 7, 1);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    for (int64_t i = 0; i < n; i++)
        assert_true(r.y[i] == r.x[0][i] + r.x[1][i]);
    assert_int_equal(rig_backward(&r, 1), BFIT_OK);
    assert_memory_equal(r.dx[0], r.dy, (size_t)n * sizeof(float));
    assert_memory_equal(r.dx[1], r.dy, (size_t)n * sizeof(float));
    /* either gradient may be unwanted */
    {
        bfit_bwd_args b = {.m = 7, .x = {r.x[0], r.x[1]}, .y = r.y, .dy = r.dy, .dx = {NULL, r.dx[1]}};
        memset(r.dx[1], 0, (size_t)n * sizeof(float));
        assert_int_equal(bfit_layer_backward(r.l, &b), BFIT_OK);
        assert_memory_equal(r.dx[1], r.dy, (size_t)n * sizeof(float));
    }
    rig_free(&r);
}

static void test_fwd_dropout(void **st)
{
    bfit_layer_cfg c = cfg_of(BFIT_L_DROPOUT);
    bfit_shape in = S(4, 25, 25);
    const int m = 20;
    int64_t n = (int64_t)m * 2500, kept = 0;
    rig r;
    (void)st;
    c.p = 0.25f;
    /* eval: identity, no ops, no saved bytes */
    rig_new(&r, c, &in, 1, m, 0);
    assert_int_equal(r.l->need.saved, 0);
    assert_null(r.l->ops[0]);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    assert_memory_equal(r.y, r.x[0], (size_t)n * sizeof(float));
    assert_int_equal(rig_backward(&r, 1), BFIT_ESTATE);
    rig_free(&r);
    /* training: one mask byte per element, kept ones scaled by 1/(1-p) */
    rig_new(&r, c, &in, 1, m, 1);
    assert_int_equal(r.l->need.saved, (size_t)n);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    for (int64_t i = 0; i < n; i++) {
        if (r.y[i] != 0.0f) {
            kept++;
            assert_true(r.y[i] == r.x[0][i] * (1.0f / 0.75f));
        }
    }
    /* Binomial(50000, 0.75): sd 97; 5 sd = 485 */
    assert_true(llabs(kept - 37500) <= 485);
    assert_int_equal(rig_backward(&r, 1), BFIT_OK);
    for (int64_t i = 0; i < n; i++)
        assert_true(r.dx[0][i] == (r.y[i] != 0.0f ? r.dy[i] * (1.0f / 0.75f) : 0.0f));
    rig_free(&r);
}

static void ref_layernorm(const float *x, const float *g, const float *b, int m, int F, double *y)
{
    for (int i = 0; i < m; i++) {
        double mu = 0, v = 0;
        for (int j = 0; j < F; j++)
            mu += x[i * F + j];
        mu /= F;
        for (int j = 0; j < F; j++)
            v += (x[i * F + j] - mu) * (x[i * F + j] - mu);
        v /= F; /* biased, as PyTorch */
        for (int j = 0; j < F; j++)
            y[i * F + j] = (x[i * F + j] - mu) / sqrt(v + 1e-5) * g[j] + b[j];
    }
}

static void test_fwd_layernorm(void **st)
{
    bfit_shape in = S(3, 4, 5);
    const int m = 7, F = 60;
    double *ref = calloc((size_t)m * F, sizeof(double));
    float *y_train = zalloc((size_t)m * F * sizeof(float));
    rig r;
    (void)st;
    rig_new(&r, cfg_of(BFIT_L_LAYERNORM), &in, 1, m, 1);
    /* PyTorch's nn.LayerNorm([3,4,5]): weight/bias [3,4,5], gamma 1, beta 0 */
    assert_int_equal(r.l->params[0].ndim, 3);
    assert_int_equal(r.l->params[0].dim[2], 5);
    assert_true(r.l->params[0].data[17] == 1.0f && r.l->params[1].data[17] == 0.0f);
    assert_int_equal(r.l->params[0].decay, 0);
    bfit_fill_uniform(r.l->params[0].data, F, 1.0f, 5);
    bfit_fill_uniform(r.l->params[1].data, F, 1.0f, 6);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    ref_layernorm(r.x[0], r.l->params[0].data, r.l->params[1].data, m, F, ref);
    for (int i = 0; i < m * F; i++) /* see test_device_dense: statistics carry ~sqrt(F) eps */
        close_to(r.y[i], ref[i], 4 * FEPS * (sqrt(F) + 2) * (1 + fabs(ref[i])), "layernorm y", i);
    memcpy(y_train, r.y, (size_t)m * F * sizeof(float));
    /* a training-prepared layer also evaluates (stats go to saved) */
    r.training = 0;
    memset(r.y, 0, (size_t)m * F * sizeof(float));
    assert_int_equal(rig_forward(&r), BFIT_OK);
    assert_memory_equal(r.y, y_train, (size_t)m * F * sizeof(float));
    rig_free(&r);
    /* eval-prepared: the same numbers, statistics in the workspace */
    rig_new(&r, cfg_of(BFIT_L_LAYERNORM), &in, 1, m, 0);
    assert_int_equal(r.l->need.saved, 0);
    assert_true(r.l->need.ws_fwd >= 2 * BFIT_ALIGN_UP(m * sizeof(float)));
    assert_null(r.l->ops[1]);
    bfit_fill_uniform(r.l->params[0].data, F, 1.0f, 5);
    bfit_fill_uniform(r.l->params[1].data, F, 1.0f, 6);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    assert_memory_equal(r.y, y_train, (size_t)m * F * sizeof(float));
    assert_int_equal(rig_backward(&r, 1), BFIT_ESTATE);
    rig_free(&r);
    free(ref);
    free(y_train);
}

static void test_fwd_xent(void **st)
{
    bfit_shape in = V(10);
    const int m = 7, N = 10;
    double ref_loss = 0;
    rig r;
    (void)st;
    rig_new(&r, cfg_of(BFIT_L_XENT), &in, 1, m, 1);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    for (int i = 0; i < m; i++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < N; j++)
            mx = fmax(mx, r.x[0][i * N + j]);
        for (int j = 0; j < N; j++)
            s += exp(r.x[0][i * N + j] - mx);
        for (int j = 0; j < N; j++) /* softmax in double, one rounding */
            close_to(r.y[i * N + j], exp(r.x[0][i * N + j] - mx) / s, 2 * FEPS, "xent p", i * N + j);
        ref_loss += log(s) + mx - r.x[0][i * N + r.labels[i]];
    }
    close_to(r.loss, ref_loss, 1e-12 * ref_loss, "xent loss", 0); /* all in double */
    /* backward: (p - onehot) * scale, overwriting dx */
    assert_int_equal(rig_backward(&r, 0.5f), BFIT_OK);
    for (int i = 0; i < m * N; i++) {
        double e = ((double)r.y[i] - (i % N == r.labels[i / N])) * 0.5;
        close_to(r.dx[0][i], e, 2 * FEPS, "xent dx", i); /* two float roundings of values <= 1 */
    }
    /* a label outside [0, N) names itself */
    r.labels[3] = 10;
    assert_int_equal(rig_forward(&r), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "label 10 of sample 3"));
    rig_free(&r);
}

/* ---- accumulation: two backwards add their parameter gradients ---- */

static void check_accumulates(bfit_layer_cfg cfg, bfit_shape in)
{
    rig r;
    float *g1[BFIT_LAYER_MAXP] = {0};
    rig_new(&r, cfg, &in, 1, 7, 1);
    assert_true(r.l->nparams > 0);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    assert_int_equal(rig_backward(&r, 1), BFIT_OK);
    for (int i = 0; i < r.l->nparams; i++) {
        int64_t n = bfit_param_numel(&r.l->params[i]);
        g1[i] = zalloc((size_t)n * sizeof(float));
        memcpy(g1[i], r.l->params[i].grad, (size_t)n * sizeof(float));
    }
    assert_int_equal(rig_backward(&r, 1), BFIT_OK);
    for (int i = 0; i < r.l->nparams; i++) {
        int64_t n = bfit_param_numel(&r.l->params[i]);
        float nz = 0;
        for (int64_t j = 0; j < n; j++) {
            /* the second backward computes the same g bit for bit (same
             * inputs, same kernels), and g + g = 2g exactly in float */
            assert_true(r.l->params[i].grad[j] == 2 * g1[i][j]);
            nz = fmaxf(nz, fabsf(g1[i][j]));
        }
        assert_true(nz > 0); /* a gradient that is all zeros would pass trivially */
        free(g1[i]);
    }
    rig_free(&r);
}

/* layernorm computes dx with the parameter gradients; when dx is not
 * wanted (first layer) the parameter gradients must come out the same */
static void test_layernorm_no_dx(void **st)
{
    bfit_shape in = S(3, 2, 3);
    int64_t F = 18;
    float *g[2];
    rig r;
    (void)st;
    rig_new(&r, cfg_of(BFIT_L_LAYERNORM), &in, 1, 7, 1);
    bfit_fill_uniform(r.l->params[0].data, F, 1.0f, 5);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    assert_int_equal(rig_backward(&r, 1), BFIT_OK);
    for (int i = 0; i < 2; i++) {
        g[i] = zalloc((size_t)F * sizeof(float));
        memcpy(g[i], r.l->params[i].grad, (size_t)F * sizeof(float));
        memset(r.l->params[i].grad, 0, (size_t)F * sizeof(float));
    }
    {
        bfit_bwd_args b = {.m = 7, .x = {r.x[0]}, .y = r.y, .dy = r.dy, .dx = {NULL}, .saved = r.saved,
                           .ws = r.ws_b};
        assert_int_equal(bfit_layer_backward(r.l, &b), BFIT_OK);
    }
    for (int i = 0; i < 2; i++) {
        assert_memory_equal(g[i], r.l->params[i].grad, (size_t)F * sizeof(float));
        free(g[i]);
    }
    rig_free(&r);
}

static void test_accumulation(void **st)
{
    bfit_layer_cfg c = cfg_of(BFIT_L_LINEAR);
    (void)st;
    c.units = 5;
    check_accumulates(c, V(9));
    check_accumulates(cfg_of(BFIT_L_LAYERNORM), S(3, 2, 3));
}

/* ---- memory answers ---- */

static void test_memory(void **st)
{
    bfit_arena *arena = bfit_arena_new(1ull << 30, NULL);
    bfit_device *dev;
    bfit_layer *l;
    bfit_layer_cfg c = cfg_of(BFIT_L_LINEAR);
    bfit_shape in = V(9), img = S(3, 5, 5);
    uint64_t b[BFIT_MEM_NCAT];
    char err[256];
    (void)st;
    assert_int_equal(bfit_device_cpu_new(arena, 0, &dev), BFIT_OK);

    /* linear 9 -> 5, m = 3: weight 45 floats = 180 -> 192, bias 20 -> 64 */
    c.units = 5;
    assert_int_equal(bfit_layer_new(&c, dev, &in, 1, &l, err, sizeof err), BFIT_OK);
    assert_int_equal(bfit_layer_memory(l, 3, 1, b), BFIT_OK);
    assert_int_equal(b[BFIT_MEM_PARAMS], 192 + 64);
    assert_int_equal(b[BFIT_MEM_GRADS], 192 + 64);
    assert_int_equal(b[BFIT_MEM_ACTIVATIONS], 64); /* 3 x 5 floats, nothing saved */
    assert_int_equal(b[BFIT_MEM_ACT_GRADS], 64);
    assert_int_equal(b[BFIT_MEM_WORKSPACE] % 64, 0);
    assert_int_equal(b[BFIT_MEM_OPTIMIZER], 0);
    assert_int_equal(b[BFIT_MEM_INPUT], 0);
    assert_int_equal(bfit_layer_memory(l, 3, 0, b), BFIT_OK);
    assert_int_equal(b[BFIT_MEM_GRADS], 0);
    assert_int_equal(b[BFIT_MEM_ACT_GRADS], 0);
    /* activations grow linearly with m: 1000 x 5 floats = 20000 bytes */
    assert_int_equal(bfit_layer_memory(l, 1000, 1, b), BFIT_OK);
    assert_int_equal(b[BFIT_MEM_ACTIVATIONS], 20032);
    assert_int_equal(l->prep_m, 0); /* a query leaves an unprepared layer unprepared */
    bfit_layer_free(l);

    /* dropout: the mask is one byte per element, saved for backward */
    c = cfg_of(BFIT_L_DROPOUT);
    assert_int_equal(bfit_layer_new(&c, dev, &img, 1, &l, err, sizeof err), BFIT_OK);
    assert_int_equal(bfit_layer_prepare(l, 7, 1), BFIT_OK);
    assert_int_equal(bfit_layer_memory(l, 3, 1, b), BFIT_OK);
    assert_int_equal(b[BFIT_MEM_PARAMS], 0);
    assert_int_equal(b[BFIT_MEM_ACTIVATIONS], BFIT_ALIGN_UP(3 * 75 * 4) + BFIT_ALIGN_UP(3 * 75));
    assert_int_equal(l->prep_m, 7); /* and a prepared one prepared as it was */
    assert_int_equal(bfit_layer_memory(l, 3, 0, b), BFIT_OK);
    assert_int_equal(b[BFIT_MEM_ACTIVATIONS], BFIT_ALIGN_UP(3 * 75 * 4));
    bfit_layer_free(l);

    /* layernorm: mean and var per sample saved; params weight + bias of 75 */
    c = cfg_of(BFIT_L_LAYERNORM);
    assert_int_equal(bfit_layer_new(&c, dev, &img, 1, &l, err, sizeof err), BFIT_OK);
    assert_int_equal(bfit_layer_memory(l, 7, 1, b), BFIT_OK);
    assert_int_equal(b[BFIT_MEM_PARAMS], 2 * BFIT_ALIGN_UP(75 * 4));
    assert_int_equal(b[BFIT_MEM_ACTIVATIONS], BFIT_ALIGN_UP(7 * 75 * 4) + 2 * 64);
    bfit_layer_free(l);

    /* xent: per-sample losses in the forward workspace */
    c = cfg_of(BFIT_L_XENT);
    in = V(10);
    assert_int_equal(bfit_layer_new(&c, dev, &in, 1, &l, err, sizeof err), BFIT_OK);
    assert_int_equal(bfit_layer_memory(l, 7, 1, b), BFIT_OK);
    assert_int_equal(b[BFIT_MEM_WORKSPACE], BFIT_ALIGN_UP(7 * sizeof(double)));
    assert_int_equal(b[BFIT_MEM_ACTIVATIONS], BFIT_ALIGN_UP(7 * 10 * 4));
    bfit_layer_free(l);

    bfit_device_free(dev);
    bfit_arena_free(arena);
}

/* ---- shape errors say what would be right ---- */

static void test_errors(void **st)
{
    bfit_arena *arena = bfit_arena_new(1ull << 30, NULL);
    bfit_device *dev;
    bfit_layer *l = (bfit_layer *)1;
    bfit_layer_cfg c = cfg_of(BFIT_L_LINEAR);
    bfit_shape in[2] = {S(32, 7, 7), S(32, 7, 5)};
    char err[256];
    (void)st;
    assert_int_equal(bfit_device_cpu_new(arena, 0, &dev), BFIT_OK);
    c.units = 10;
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_null(l);
    assert_string_equal(err, "linear expects a vector, got 32x7x7: add `flatten` before it");
    c.units = 0;
    in[0] = V(4);
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_EINVAL);
    in[0] = S(32, 7, 7);
    c = cfg_of(BFIT_L_ADD);
    assert_int_equal(bfit_layer_new(&c, dev, in, 2, &l, err, sizeof err), BFIT_EINVAL);
    assert_non_null(strstr(err, "32x7x7 and 32x7x5"));
    c = cfg_of(BFIT_L_XENT);
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_non_null(strstr(err, "flatten"));
    c = cfg_of(BFIT_L_DROPOUT);
    c.p = 1.0f;
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_non_null(strstr(err, "[0, 1)"));
    bfit_device_free(dev);
    bfit_arena_free(arena);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gc_linear),     cmocka_unit_test(test_gc_act),
        cmocka_unit_test(test_gc_flatten_dropout), cmocka_unit_test(test_gc_layernorm),
        cmocka_unit_test(test_gc_add),        cmocka_unit_test(test_gc_xent),
        cmocka_unit_test(test_fwd_linear),    cmocka_unit_test(test_fwd_act_flatten_add),
        cmocka_unit_test(test_fwd_dropout),   cmocka_unit_test(test_fwd_layernorm),
        cmocka_unit_test(test_fwd_xent),      cmocka_unit_test(test_accumulation),
        cmocka_unit_test(test_layernorm_no_dx),
        cmocka_unit_test(test_memory),        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
