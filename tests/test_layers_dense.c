/* test_layers_dense.c - the dense layers (linear, relu, gelu, flatten,
 * dropout, layernorm, add, xent) through the layer API: finite-difference
 * gradient checks at several shapes (m = 1 and 7, odd feature counts, token
 * sequences for linear and layernorm), forward values against naive double
 * loops, accumulation of parameter gradients over two backwards, eval mode,
 * error messages, and the bytes bfit_layer_memory reports per category.
 *
 * Layers get device buffers only (tdev.h): the host side of each tbuf is
 * filled, uploaded, and the results downloaded before any check, so the
 * file also passes with BFIT_DEVICE_CHECK=1. */
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
#include "tdev.h"

#define FEPS 1.1920929e-7

static bfit_shape V(int c) { return bfit_shape_vec(c); }
static bfit_shape S(int c, int h, int w) { return bfit_shape_chw(c, h, w); }
static bfit_shape Q(int t, int f) { return bfit_shape_seq(t, f); }

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
    c.bias = 1;
    c.wt = 1; /* transformers' Conv1D: the weight [in, out] */
    gc("linear 9->13 weight [in, out] m=7", c, V(9), 7);
    gc("linear 6->13 weight [in, out] on tokens m=2", c, bfit_shape_seq(5, 6), 2);
}

/* Sequences [T, F]: linear and layernorm act on each token's F features.
 * The same tolerance argument holds (a token is a row of the same ops). A
 * layer that mixed tokens (weights over T*F, statistics over the sample)
 * would be off by O(1), as would one that ignored tokens past the first. */
static void test_gc_sequences(void **st)
{
    bfit_layer_cfg c = cfg_of(BFIT_L_LINEAR), n = cfg_of(BFIT_L_LAYERNORM);
    (void)st;
    c.units = 4;
    gc("linear seq 1x7->4 m=1", c, Q(1, 7), 1);
    gc("linear seq 5x7->4 m=3", c, Q(5, 7), 3);
    gc("linear seq 5x3->6 m=1", c, Q(5, 3), 1);
    c.units = 9;
    c.bias = 0;
    gc("linear seq 1x6->9 no bias m=3", c, Q(1, 6), 3);
    gc("linear seq 5x7->9 no bias m=3", c, Q(5, 7), 3);
    gc("layernorm seq 1x7 m=1", n, Q(1, 7), 1);
    gc("layernorm seq 5x7 m=3", n, Q(5, 7), 3);
    gc("layernorm seq 5x3 m=1", n, Q(5, 3), 1);
    gc("layernorm seq 1x13 m=3", n, Q(1, 13), 3);
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
    g.tanh = 1; /* nn.GELU(approximate='tanh') */
    gc("gelu tanh=1 7 m=1", g, V(7), 1);
    gc("gelu tanh=1 2x3x3 m=7", g, S(2, 3, 3), 7);
    g.tanh = 0;
    gc("sigmoid 7 m=1", cfg_of(BFIT_L_SIGMOID), V(7), 1);
    gc("sigmoid 2x3x3 m=7", cfg_of(BFIT_L_SIGMOID), S(2, 3, 3), 7);
    gc("silu 7 m=1", cfg_of(BFIT_L_SILU), V(7), 1);
    gc("silu 2x3x3 m=7", cfg_of(BFIT_L_SILU), S(2, 3, 3), 7);
    gc("tanh 7 m=1", cfg_of(BFIT_L_TANH), V(7), 1);
    gc("tanh 2x3x3 m=7", cfg_of(BFIT_L_TANH), S(2, 3, 3), 7);
    gc("hardsigmoid 7 m=1", cfg_of(BFIT_L_HARDSIGMOID), V(7), 1);
    gc("hardsigmoid 2x3x3 m=7", cfg_of(BFIT_L_HARDSIGMOID), S(2, 3, 3), 7);
    gc("hardswish 7 m=1", cfg_of(BFIT_L_HARDSWISH), V(7), 1);
    gc("hardswish 2x3x3 m=7", cfg_of(BFIT_L_HARDSWISH), S(2, 3, 3), 7);
}

/* leakyrelu, elu (alpha != 1) and selu have a kink at 0, skipped as
 * relu's; softplus's threshold (20 / beta) lies outside the inputs drawn;
 * celu's slope is 1 on both sides of 0, whatever its alpha */
static void test_gc_act_param(void **st)
{
    bfit_layer_cfg lr = cfg_of(BFIT_L_LEAKYRELU), e = cfg_of(BFIT_L_ELU), sp = cfg_of(BFIT_L_SOFTPLUS);
    gc_case c = {.label = "leakyrelu 0.2 3x5x5 m=7", .nin = 1, .in = {S(3, 5, 5)}, .m = 7, .kink_gap = 0.02};
    (void)st;
    lr.alpha = 0.2f;
    c.cfg = lr;
    gc_assert(&c);
    c.label = "leakyrelu -0.5 7 m=1";
    c.cfg.alpha = -0.5f;
    c.in[0] = V(7);
    c.m = 1;
    gc_assert(&c);
    e.alpha = 0.5f;
    c.label = "elu 0.5 2x3x3 m=7";
    c.cfg = e;
    c.in[0] = S(2, 3, 3);
    c.m = 7;
    gc_assert(&c);
    gc("elu 7 m=1", cfg_of(BFIT_L_ELU), V(7), 1);
    gc("softplus 7 m=1", sp, V(7), 1);
    sp.beta = 2.0f;
    gc("softplus beta 2 2x3x3 m=7", sp, S(2, 3, 3), 7);
    sp.beta = -1.5f;
    gc("softplus beta -1.5 7 m=5", sp, V(7), 5);
    c.label = "selu 2x3x3 m=7";
    c.cfg = cfg_of(BFIT_L_SELU);
    gc_assert(&c);
    gc("celu 7 m=1", cfg_of(BFIT_L_CELU), V(7), 1);
    e = cfg_of(BFIT_L_CELU);
    e.alpha = 0.5f;
    gc("celu 0.5 2x3x3 m=7", e, S(2, 3, 3), 7);
    e.alpha = -2.0f;
    gc("celu -2 7 m=5", e, V(7), 5);
}

/* prelu: the input's and the slopes' gradients, one slope or one per
 * channel (feature of a vector), its kink at 0 skipped as relu's; the
 * slopes' gradient is linear in them (exact central differences) */
static void test_gc_prelu(void **st)
{
    bfit_layer_cfg p = cfg_of(BFIT_L_PRELU);
    gc_case c = {.label = "prelu 3x5x5 m=7", .cfg = p, .nin = 1, .in = {S(3, 5, 5)}, .m = 7, .kink_gap = 0.02};
    (void)st;
    gc_assert(&c);
    c.label = "prelu channels=3 slope=-0.3 3x5x5 m=7";
    c.cfg.units = 3;
    c.cfg.alpha = -0.3f;
    gc_assert(&c);
    c.label = "prelu channels=7 7 m=1";
    c.cfg.units = 7;
    c.in[0] = V(7);
    c.m = 1;
    gc_assert(&c);
    c.label = "prelu 7 m=5";
    c.cfg = p;
    c.m = 5;
    gc_assert(&c);
    c.label = "prelu seq 5x3 m=3";
    c.in[0] = Q(5, 3);
    c.m = 3;
    gc_assert(&c);
}

/* layerscale: the input's and the scales' gradients, one scale per channel
 * of an image, feature of a vector or feature of a sequence's tokens (both
 * gradients linear: exact central differences) */
static void test_gc_layerscale(void **st)
{
    bfit_layer_cfg p = cfg_of(BFIT_L_LAYERSCALE);
    gc_case c = {.label = "layerscale 3x5x5 m=7", .cfg = p, .nin = 1, .in = {S(3, 5, 5)}, .m = 7};
    (void)st;
    c.cfg.alpha = -0.7f;
    gc_assert(&c);
    c.label = "layerscale 7 m=1 init=1";
    c.cfg.alpha = 1.0f;
    c.in[0] = V(7);
    c.m = 1;
    gc_assert(&c);
    c.label = "layerscale seq 5x3 m=3";
    c.cfg = p;
    c.in[0] = Q(5, 3);
    c.m = 3;
    gc_assert(&c);
    c.label = "layerscale channels=1 seq 5x3 m=3 (one scale)";
    c.cfg.units = 1;
    c.cfg.alpha = 0.6f;
    gc_assert(&c);
    c.label = "layerscale channels=1 3x4x4 m=2";
    c.in[0] = S(3, 4, 4);
    c.m = 2;
    gc_assert(&c);
}

/* groupnorm: the input's, scale's and shift's gradients, groups of one,
 * several and all channels, on images and a vector */
static void test_gc_groupnorm(void **st)
{
    bfit_layer_cfg g = cfg_of(BFIT_L_GROUPNORM);
    gc_case c = {.label = "groupnorm 2 4x3x3 m=3", .cfg = g, .nin = 1, .in = {S(4, 3, 3)}, .m = 3};
    (void)st;
    c.cfg.units = 2;
    gc_assert(&c);
    c.label = "groupnorm 4 4x3x3 m=2 (instance norm)";
    c.cfg.units = 4;
    c.m = 2;
    gc_assert(&c);
    c.label = "groupnorm 1 6x2x2 m=2 eps=0.1";
    c.cfg.units = 1;
    c.cfg.eps = 0.1f;
    c.in[0] = S(6, 2, 2);
    gc_assert(&c);
    c.label = "groupnorm 3 6 m=4 (a vector)";
    c.cfg = g;
    c.cfg.units = 3;
    c.in[0] = V(6);
    c.m = 4;
    gc_assert(&c);
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
    c.bias = 0; /* a scale alone: nanoGPT's LayerNorm(bias=False) */
    gc("layernorm bias=0 7 m=7", c, V(7), 7);
    gc("layernorm bias=0 3x4x5 m=2", c, S(3, 4, 5), 2);
}

/* LLaMA's RMSNorm: over a vector, an image's features and each token's;
 * Gemma's (offset: the scale 1 + w). */
static void test_gc_rmsnorm(void **st)
{
    bfit_layer_cfg c = cfg_of(BFIT_L_RMSNORM);
    (void)st;
    gc("rmsnorm 7 m=1", c, V(7), 1);
    gc("rmsnorm 7 m=7", c, V(7), 7);
    gc("rmsnorm 3x4x5 m=2", c, S(3, 4, 5), 2);
    gc("rmsnorm seq 5x7 m=3", c, Q(5, 7), 3);
    gc("rmsnorm seq 1x13 m=1", c, Q(1, 13), 1);
    c.offset = 1;
    gc("rmsnorm offset=1 7 m=7", c, V(7), 7);
    gc("rmsnorm offset=1 seq 5x7 m=3", c, Q(5, 7), 3);
}

/* The product of two tensors (SwiGLU's): both inputs' gradients. */
static void test_gc_mul(void **st)
{
    gc_case c = {.label = "mul 3x2x2 m=7", .cfg = cfg_of(BFIT_L_MUL), .nin = 2, .in = {S(3, 2, 2), S(3, 2, 2)},
                 .m = 7};
    (void)st;
    gc_assert(&c);
    c.label = "mul seq 5x7 m=3";
    c.in[0] = c.in[1] = Q(5, 7);
    c.m = 3;
    gc_assert(&c);
}

/* Rotary embeddings: heads of 4 and of 2 columns; a linear map, so the
 * differences are exact but for rounding. */
static void test_gc_rope(void **st)
{
    bfit_layer_cfg c = cfg_of(BFIT_L_ROPE);
    (void)st;
    c.units = 4;
    gc("rope seq 5x8 d=4 m=2", c, Q(5, 8), 2);
    c.units = 2;
    c.theta = 500000.0f;
    gc("rope seq 3x6 d=2 m=3 base 5e5", c, Q(3, 6), 3);
}

/* Repeated heads (grouped-query attention): each input feeds r outputs,
 * whose gradients its own sums. */
static void test_gc_repeat(void **st)
{
    bfit_layer_cfg c = cfg_of(BFIT_L_REPEAT);
    (void)st;
    c.units = 4, c.groups = 3;
    gc("repeat seq 5x8 d=4 r=3 m=2", c, Q(5, 8), 2);
    c.units = 2, c.groups = 2;
    gc("repeat seq 3x2 d=2 r=2 m=3", c, Q(3, 2), 3);
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

/* A gate per channel: both inputs' gradients, by a vector or Cx1x1. */
static void test_gc_scale(void **st)
{
    gc_case c = {.label = "scale 3x2x2 by 3x1x1 m=7", .cfg = cfg_of(BFIT_L_SCALE), .nin = 2,
                 .in = {S(3, 2, 2), S(3, 1, 1)}, .m = 7};
    (void)st;
    gc_assert(&c);
    c.label = "scale 4x3x1 by 4 m=1";
    c.in[0] = S(4, 3, 1);
    c.in[1] = V(4);
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

/* ---- a rig: one layer with its buffers, like the model gives them ----
 * Every buffer is a tbuf: the host side holds what was uploaded or, after
 * rig_forward/rig_backward succeed, what the device computed. */

typedef struct rig {
    tdev t;
    bfit_layer *l;
    int m, training;
    tbuf x[2], dx[2], y, dy, labels, stats;
    tbuf pd[BFIT_LAYER_MAXP], pg[BFIT_LAYER_MAXP];
    void *saved, *ws_f, *ws_b;
} rig;

static void *zalloc(size_t n)
{
    void *p = aligned_alloc(64, BFIT_ALIGN_UP(n ? n : 1));
    memset(p, 0, BFIT_ALIGN_UP(n ? n : 1));
    return p;
}

/* a device buffer of n floats, uniform(-a, a) from seed, uploaded */
static tbuf frand(tdev *t, int64_t n, float a, uint64_t seed)
{
    tbuf b = tbuf_new(t, (size_t)n * sizeof(float));
    bfit_fill_uniform(TB_F(b), n, a, seed);
    tbuf_up(t, &b);
    return b;
}

static void zero_up(tdev *t, tbuf *b)
{
    memset(b->h, 0, b->bytes);
    tbuf_up(t, b);
}

/* Parameters: init_params fills the host sides, which go up; gradients
 * start at zero on the device. */
static void rig_params(rig *r)
{
    float *host[BFIT_LAYER_MAXP];
    for (int i = 0; i < r->l->nparams; i++) {
        bfit_param *p = &r->l->params[i];
        r->pd[i] = tbuf_new(&r->t, bfit_param_bytes(p));
        p->data = r->pd[i].d;
        host[i] = TB_F(r->pd[i]);
        if (p->trainable) {
            r->pg[i] = tbuf_new(&r->t, bfit_param_bytes(p));
            zero_up(&r->t, &r->pg[i]);
            p->grad = r->pg[i].d;
        }
    }
    if (r->l->vt->init_params)
        r->l->vt->init_params(r->l, 77, host);
    for (int i = 0; i < r->l->nparams; i++)
        tbuf_up(&r->t, &r->pd[i]);
}

static void rig_new(rig *r, bfit_layer_cfg cfg, const bfit_shape *in, int nin, int m, int training)
{
    char err[256];
    int64_t ny;
    memset(r, 0, sizeof *r);
    r->m = m;
    r->training = training;
    tdev_open(&r->t, 0);
    if (bfit_layer_new(&cfg, r->t.dev, in, nin, &r->l, err, sizeof err) != BFIT_OK)
        fail_msg("layer: %s", err);
    rig_params(r);
    assert_int_equal(bfit_layer_prepare(r->l, m, training), BFIT_OK);
    for (int i = 0; i < nin; i++) {
        int64_t n = (int64_t)m * bfit_shape_numel(in[i]);
        r->x[i] = frand(&r->t, n, 2, 300 + (uint64_t)i);
        r->dx[i] = frand(&r->t, n, 1, 400 + (uint64_t)i); /* garbage: backward must overwrite */
    }
    ny = (int64_t)m * bfit_shape_numel(r->l->out);
    r->y = tbuf_new(&r->t, (size_t)ny * sizeof(float));
    zero_up(&r->t, &r->y);
    r->dy = frand(&r->t, ny, 1, 500);
    r->saved = tdev_alloc(&r->t, r->l->need.saved);
    r->ws_f = tdev_alloc(&r->t, r->l->need.ws_fwd);
    r->ws_b = tdev_alloc(&r->t, r->l->need.ws_bwd);
    r->labels = tbuf_new(&r->t, (size_t)m * sizeof(int32_t));
    for (int i = 0; i < m; i++)
        TB_I(r->labels)[i] = (int32_t)((i * 3 + 1) % bfit_shape_last(r->l->out));
    tbuf_up(&r->t, &r->labels);
    r->stats = tbuf_new(&r->t, 2 * sizeof(double));
    zero_up(&r->t, &r->stats);
}

/* On success y and the statistics come back to the host. */
static int rig_forward(rig *r)
{
    bfit_fwd_args a = {.m = r->m, .training = r->training, .x = {r->x[0].d, r->x[1].d}, .y = r->y.d,
                       .saved = r->saved, .ws = r->ws_f, .seed = 9};
    int rc;
    if (r->l->cfg.kind == BFIT_L_XENT) {
        a.labels = r->labels.d;
        a.stats = r->stats.d;
    }
    rc = bfit_layer_forward(r->l, &a);
    if (rc == BFIT_OK) {
        tbuf_down(&r->t, &r->y);
        tbuf_down(&r->t, &r->stats);
    }
    return rc;
}

/* On success dx and the parameter gradients come back to the host. */
static int rig_backward(rig *r, float loss_scale)
{
    bfit_bwd_args b = {.m = r->m, .x = {r->x[0].d, r->x[1].d}, .y = r->y.d, .dy = r->dy.d,
                       .dx = {r->dx[0].d, r->dx[1].d}, .saved = r->saved, .ws = r->ws_b, .labels = r->labels.d,
                       .loss_scale = loss_scale};
    int rc = bfit_layer_backward(r->l, &b);
    if (rc != BFIT_OK)
        return rc;
    for (int i = 0; i < 2; i++)
        if (r->dx[i].d)
            tbuf_down(&r->t, &r->dx[i]);
    for (int i = 0; i < r->l->nparams; i++)
        if (r->pg[i].d)
            tbuf_down(&r->t, &r->pg[i]);
    return BFIT_OK;
}

static void rig_free(rig *r)
{
    for (int i = 0; i < 2; i++) {
        if (r->x[i].d)
            tbuf_free(&r->t, &r->x[i]);
        if (r->dx[i].d)
            tbuf_free(&r->t, &r->dx[i]);
    }
    for (int i = 0; i < BFIT_LAYER_MAXP; i++) {
        if (r->pd[i].d)
            tbuf_free(&r->t, &r->pd[i]);
        if (r->pg[i].d)
            tbuf_free(&r->t, &r->pg[i]);
    }
    tbuf_free(&r->t, &r->y);
    tbuf_free(&r->t, &r->dy);
    tbuf_free(&r->t, &r->labels);
    tbuf_free(&r->t, &r->stats);
    bfit_layer_free(r->l);
    tdev_close(&r->t); /* releases saved and the workspaces */
}

static void close_to(double got, double ref, double tol, const char *what, int64_t i)
{
    if (!(fabs(got - ref) <= tol))
        fail_msg("%s[%lld]: got %.9g, reference %.9g (tol %.3g)", what, (long long)i, got, ref, tol);
}

/* ---- forward values against naive loops ---- */

/* A linear layer's initial weights: PyTorch's U(+-1/sqrt(in)) by default;
 * with std (GPT-2, BERT) a spread of std and zero biases. */
static void test_linear_init(void **st)
{
    static const float stds[] = {0, 0.02f, 0.0070710678f};
    bfit_shape in = bfit_shape_seq(4, 96);
    (void)st;
    for (int k = 0; k < 3; k++) {
        bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_LINEAR);
        rig r;
        const float *w, *b;
        double bound, sum = 0, sq = 0, want;
        int64_t n;
        c.units = 384;
        c.std = stds[k];
        rig_new(&r, c, &in, 1, 1, 1);
        w = TB_F(r.pd[0]);
        b = TB_F(r.pd[1]);
        n = bfit_param_numel(&r.l->params[0]);
        bound = stds[k] > 0 ? stds[k] * sqrt(3.0) : 1.0 / sqrt(96.0);
        for (int64_t i = 0; i < n; i++) {
            assert_true(fabs(w[i]) <= bound * (1 + 1e-6));
            sum += w[i];
            sq += (double)w[i] * w[i];
        }
        /* 36,864 uniform draws: the spread within 2% (its own error is 0.4%) */
        want = stds[k] > 0 ? stds[k] : bound / sqrt(3.0);
        assert_true(fabs(sqrt(sq / (double)n - (sum / (double)n) * (sum / (double)n)) / want - 1) < 0.02);
        for (int i = 0; i < 384; i++)
            if (stds[k] > 0)
                assert_true(b[i] == 0.0f);
            else
                assert_true(fabs(b[i]) <= bound * (1 + 1e-6));
        if (stds[k] == 0) { /* PyTorch's biases are not zero */
            int nonzero = 0;
            for (int i = 0; i < 384; i++)
                nonzero += b[i] != 0.0f;
            assert_true(nonzero > 300);
        }
        rig_free(&r);
    }
}

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
        const float *v = TB_F(r.pd[i]); /* what init_params gave and the layer got */
        float lo = 1, hi = -1;
        for (int64_t j = 0; j < bfit_param_numel(&r.l->params[i]); j++) {
            assert_true(fabsf(v[j]) <= 1.0f / 3.0f);
            lo = fminf(lo, v[j]);
            hi = fmaxf(hi, v[j]);
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
            double s = TB_F(r.pd[1])[o], mag = fabs(s);
            for (int k = 0; k < 9; k++) {
                s += (double)TB_F(r.x[0])[i * 9 + k] * TB_F(r.pd[0])[o * 9 + k];
                mag += fabs((double)TB_F(r.x[0])[i * 9 + k] * TB_F(r.pd[0])[o * 9 + k]);
            }
            /* float dot product of 10 terms: 4 eps per term on the magnitude */
            close_to(TB_F(r.y)[i * 7 + o], s, 4 * FEPS * 10 * mag, "linear y", i * 7 + o);
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
        assert_true(TB_F(r.y)[i] == (TB_F(r.x[0])[i] > 0 ? TB_F(r.x[0])[i] : 0.0f));
    rig_free(&r);

    rig_new(&r, cfg_of(BFIT_L_GELU), in, 1, 7, 1);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    for (int64_t i = 0; i < n; i++) {
        double x = TB_F(r.x[0])[i], ref = 0.5 * x * (1 + erf(x / M_SQRT2)); /* PyTorch's default gelu */
        /* oneDNN's vectorised erf is accurate to a few ulp: 16 eps */
        close_to(TB_F(r.y)[i], ref, 16 * FEPS * (1 + fabs(ref)), "gelu y", i);
    }
    rig_free(&r);

    {
        bfit_layer_cfg t = cfg_of(BFIT_L_GELU);
        t.tanh = 1;
        rig_new(&r, t, in, 1, 7, 1);
        assert_int_equal(rig_forward(&r), BFIT_OK);
        for (int64_t i = 0; i < n; i++) { /* PyTorch's approximate='tanh' */
            double x = TB_F(r.x[0])[i], ref = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
            close_to(TB_F(r.y)[i], ref, 16 * FEPS * (1 + fabs(ref)), "gelu tanh=1 y", i);
        }
        rig_free(&r);
    }

    rig_new(&r, cfg_of(BFIT_L_FLATTEN), in, 1, 7, 1);
    assert_true(bfit_shape_eq(r.l->out, V(75)));
    assert_int_equal(rig_forward(&r), BFIT_OK);
    assert_memory_equal(r.y.h, r.x[0].h, (size_t)n * sizeof(float));
    assert_int_equal(rig_backward(&r, 1), BFIT_OK);
    assert_memory_equal(r.dx[0].h, r.dy.h, (size_t)n * sizeof(float));
    rig_free(&r);

    rig_new(&r, cfg_of(BFIT_L_ADD), in, 2, 7, 1);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    for (int64_t i = 0; i < n; i++)
        assert_true(TB_F(r.y)[i] == TB_F(r.x[0])[i] + TB_F(r.x[1])[i]);
    assert_int_equal(rig_backward(&r, 1), BFIT_OK);
    assert_memory_equal(r.dx[0].h, r.dy.h, (size_t)n * sizeof(float));
    assert_memory_equal(r.dx[1].h, r.dy.h, (size_t)n * sizeof(float));
    /* either gradient may be unwanted */
    {
        bfit_bwd_args b = {.m = 7, .x = {r.x[0].d, r.x[1].d}, .y = r.y.d, .dy = r.dy.d, .dx = {NULL, r.dx[1].d}};
        zero_up(&r.t, &r.dx[1]);
        assert_int_equal(bfit_layer_backward(r.l, &b), BFIT_OK);
        tbuf_down(&r.t, &r.dx[1]);
        assert_memory_equal(r.dx[1].h, r.dy.h, (size_t)n * sizeof(float));
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
    assert_memory_equal(r.y.h, r.x[0].h, (size_t)n * sizeof(float));
    assert_int_equal(rig_backward(&r, 1), BFIT_ESTATE);
    rig_free(&r);
    /* training: one mask bit per element (in 64-bit words), kept ones
     * scaled by 1/(1-p) */
    rig_new(&r, c, &in, 1, m, 1);
    assert_int_equal(r.l->need.saved, (size_t)(n + 63) / 64 * 8);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    for (int64_t i = 0; i < n; i++) {
        if (TB_F(r.y)[i] != 0.0f) {
            kept++;
            assert_true(TB_F(r.y)[i] == TB_F(r.x[0])[i] * (1.0f / 0.75f));
        }
    }
    /* Binomial(50000, 0.75): sd 97; 5 sd = 485 */
    assert_true(llabs(kept - 37500) <= 485);
    assert_int_equal(rig_backward(&r, 1), BFIT_OK);
    for (int64_t i = 0; i < n; i++)
        assert_true(TB_F(r.dx[0])[i] == (TB_F(r.y)[i] != 0.0f ? TB_F(r.dy)[i] * (1.0f / 0.75f) : 0.0f));
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

/* gamma and beta moved off their init (so they count), uploaded */
static void rig_set_params(rig *r, int64_t F)
{
    bfit_fill_uniform(TB_F(r->pd[0]), F, 1.0f, 5);
    bfit_fill_uniform(TB_F(r->pd[1]), F, 1.0f, 6);
    tbuf_up(&r->t, &r->pd[0]);
    tbuf_up(&r->t, &r->pd[1]);
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
    assert_true(TB_F(r.pd[0])[17] == 1.0f && TB_F(r.pd[1])[17] == 0.0f);
    assert_int_equal(r.l->params[0].decay, 0);
    rig_set_params(&r, F);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    ref_layernorm(TB_F(r.x[0]), TB_F(r.pd[0]), TB_F(r.pd[1]), m, F, ref);
    for (int i = 0; i < m * F; i++) /* see test_device_dense: statistics carry ~sqrt(F) eps */
        close_to(TB_F(r.y)[i], ref[i], 4 * FEPS * (sqrt(F) + 2) * (1 + fabs(ref[i])), "layernorm y", i);
    memcpy(y_train, r.y.h, (size_t)m * F * sizeof(float));
    /* a training-prepared layer also evaluates (stats go to saved) */
    r.training = 0;
    zero_up(&r.t, &r.y);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    assert_memory_equal(r.y.h, y_train, (size_t)m * F * sizeof(float));
    rig_free(&r);
    /* eval-prepared: the same numbers, statistics in the workspace */
    rig_new(&r, cfg_of(BFIT_L_LAYERNORM), &in, 1, m, 0);
    assert_int_equal(r.l->need.saved, 0);
    assert_true(r.l->need.ws_fwd >= 2 * BFIT_ALIGN_UP(m * sizeof(float)));
    assert_null(r.l->ops[1]);
    rig_set_params(&r, F);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    assert_memory_equal(r.y.h, y_train, (size_t)m * F * sizeof(float));
    assert_int_equal(rig_backward(&r, 1), BFIT_ESTATE);
    rig_free(&r);
    free(ref);
    free(y_train);
}

static void test_fwd_xent(void **st)
{
    bfit_shape in = V(10);
    const int m = 7, N = 10;
    double ref_loss = 0, ref_right = 0, *stats;
    rig r;
    (void)st;
    rig_new(&r, cfg_of(BFIT_L_XENT), &in, 1, m, 1);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    stats = r.stats.h;
    for (int i = 0; i < m; i++) {
        double mx = -INFINITY, s = 0;
        int best = 0;
        for (int j = 0; j < N; j++) {
            if (TB_F(r.x[0])[i * N + j] > mx)
                best = j;
            mx = fmax(mx, TB_F(r.x[0])[i * N + j]);
        }
        ref_right += best == TB_I(r.labels)[i];
        for (int j = 0; j < N; j++)
            s += exp(TB_F(r.x[0])[i * N + j] - mx);
        for (int j = 0; j < N; j++) /* softmax in double, one rounding */
            close_to(TB_F(r.y)[i * N + j], exp(TB_F(r.x[0])[i * N + j] - mx) / s, 2 * FEPS, "xent p", i * N + j);
        ref_loss += log(s) + mx - TB_F(r.x[0])[i * N + TB_I(r.labels)[i]];
    }
    close_to(stats[0], ref_loss, 1e-12 * ref_loss, "xent loss", 0); /* all in double */
    assert_true(stats[1] == ref_right); /* samples whose arg-max is the label */
    /* the statistics are added to: a second forward doubles them exactly
     * (the same per-row values summed in the same order) */
    {
        double first[2] = {stats[0], stats[1]};
        assert_int_equal(rig_forward(&r), BFIT_OK);
        assert_true(stats[0] == 2 * first[0] && stats[1] == 2 * first[1]);
    }
    /* backward: (p - onehot) * scale, overwriting dx */
    assert_int_equal(rig_backward(&r, 0.5f), BFIT_OK);
    for (int i = 0; i < m * N; i++) {
        double e = ((double)TB_F(r.y)[i] - (i % N == TB_I(r.labels)[i / N])) * 0.5;
        close_to(TB_F(r.dx[0])[i], e, 2 * FEPS, "xent dx", i); /* two float roundings of values <= 1 */
    }
    /* a label outside [0, N) names itself */
    TB_I(r.labels)[3] = 10;
    tbuf_up(&r.t, &r.labels);
    assert_int_equal(rig_forward(&r), BFIT_EINVAL);
    assert_non_null(strstr(bfit_errmsg(), "label 10 of sample 3"));
    {
        /* and a refused forward adds nothing */
        double before[2] = {stats[0], stats[1]};
        tbuf_down(&r.t, &r.stats);
        assert_true(stats[0] == before[0] && stats[1] == before[1]);
    }
    rig_free(&r);
}

/* Sequences [T, F]: linear and layernorm per token, against the same naive
 * loops with the m*T tokens as rows (tolerances as above). */
static void test_fwd_sequences(void **st)
{
    bfit_layer_cfg c = cfg_of(BFIT_L_LINEAR);
    const int m = 3, T = 5, F = 7, U = 4, R = m * T;
    bfit_shape in = Q(T, F);
    double *ref = calloc((size_t)R * F, sizeof(double));
    rig r;
    (void)st;
    c.units = U;
    rig_new(&r, c, &in, 1, m, 0);
    assert_true(r.l->out.nd == 2 && bfit_shape_eq(r.l->out, Q(T, U)));
    assert_int_equal(r.l->params[0].dim[0], U);
    assert_int_equal(r.l->params[0].dim[1], F);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    for (int i = 0; i < R; i++)
        for (int o = 0; o < U; o++) {
            double s = TB_F(r.pd[1])[o], mag = fabs(s);
            for (int k = 0; k < F; k++) {
                s += (double)TB_F(r.x[0])[i * F + k] * TB_F(r.pd[0])[o * F + k];
                mag += fabs((double)TB_F(r.x[0])[i * F + k] * TB_F(r.pd[0])[o * F + k]);
            }
            close_to(TB_F(r.y)[i * U + o], s, 4 * FEPS * (F + 1) * mag, "linear seq y", i * U + o);
        }
    rig_free(&r);

    rig_new(&r, cfg_of(BFIT_L_LAYERNORM), &in, 1, m, 1);
    /* nn.LayerNorm(F): weight/bias [F], shared by every token */
    assert_true(r.l->out.nd == 2 && bfit_shape_eq(r.l->out, in));
    assert_int_equal(r.l->params[0].ndim, 1);
    assert_int_equal(r.l->params[0].dim[0], F);
    rig_set_params(&r, F);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    ref_layernorm(TB_F(r.x[0]), TB_F(r.pd[0]), TB_F(r.pd[1]), R, F, ref);
    for (int i = 0; i < R * F; i++)
        close_to(TB_F(r.y)[i], ref[i], 4 * FEPS * (sqrt(F) + 2) * (1 + fabs(ref[i])), "layernorm seq y", i);
    rig_free(&r);
    free(ref);
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
        memcpy(g1[i], r.pg[i].h, (size_t)n * sizeof(float));
    }
    assert_int_equal(rig_backward(&r, 1), BFIT_OK);
    for (int i = 0; i < r.l->nparams; i++) {
        int64_t n = bfit_param_numel(&r.l->params[i]);
        float nz = 0;
        for (int64_t j = 0; j < n; j++) {
            /* the second backward computes the same g bit for bit (same
             * inputs, same kernels), and g + g = 2g exactly in float */
            assert_true(TB_F(r.pg[i])[j] == 2 * g1[i][j]);
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
    bfit_fill_uniform(TB_F(r.pd[0]), F, 1.0f, 5);
    tbuf_up(&r.t, &r.pd[0]);
    assert_int_equal(rig_forward(&r), BFIT_OK);
    assert_int_equal(rig_backward(&r, 1), BFIT_OK);
    for (int i = 0; i < 2; i++) {
        g[i] = zalloc((size_t)F * sizeof(float));
        memcpy(g[i], r.pg[i].h, (size_t)F * sizeof(float));
        zero_up(&r.t, &r.pg[i]);
    }
    {
        bfit_bwd_args b = {.m = 7, .x = {r.x[0].d}, .y = r.y.d, .dy = r.dy.d, .dx = {NULL}, .saved = r.saved,
                           .ws = r.ws_b};
        assert_int_equal(bfit_layer_backward(r.l, &b), BFIT_OK);
    }
    for (int i = 0; i < 2; i++) {
        tbuf_down(&r.t, &r.pg[i]);
        assert_memory_equal(g[i], r.pg[i].h, (size_t)F * sizeof(float));
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
    check_accumulates(c, Q(5, 9));
    check_accumulates(cfg_of(BFIT_L_LAYERNORM), Q(5, 6));
}

/* ---- memory answers ---- */

/* Sequences: activations are T tokens per sample; layernorm keeps a mean
 * and a variance per token (m*T of each), not per sample. */
static void test_memory_sequences(bfit_device *dev)
{
    bfit_layer *l;
    bfit_layer_cfg c = cfg_of(BFIT_L_LINEAR);
    bfit_shape in = Q(20, 7);
    uint64_t b[BFIT_MEM_NCAT];
    char err[256];

    /* linear 7 -> 4 per token: weight 28 floats = 112 -> 128, bias 16 -> 64 */
    c.units = 4;
    assert_int_equal(bfit_layer_new(&c, dev, &in, 1, &l, err, sizeof err), BFIT_OK);
    assert_int_equal(bfit_layer_memory(l, 3, 1, b), BFIT_OK);
    assert_int_equal(b[BFIT_MEM_PARAMS], 128 + 64);
    assert_int_equal(b[BFIT_MEM_ACTIVATIONS], BFIT_ALIGN_UP(3 * 20 * 4 * 4));
    assert_int_equal(b[BFIT_MEM_ACT_GRADS], BFIT_ALIGN_UP(3 * 20 * 4 * 4));
    bfit_layer_free(l);

    /* layernorm over 7 features: params [7] each; 60 tokens' statistics */
    c = cfg_of(BFIT_L_LAYERNORM);
    assert_int_equal(bfit_layer_new(&c, dev, &in, 1, &l, err, sizeof err), BFIT_OK);
    assert_int_equal(bfit_layer_memory(l, 3, 1, b), BFIT_OK);
    assert_int_equal(b[BFIT_MEM_PARAMS], 2 * BFIT_ALIGN_UP(7 * 4));
    assert_int_equal(b[BFIT_MEM_ACTIVATIONS], BFIT_ALIGN_UP(3 * 20 * 7 * 4) + 2 * BFIT_ALIGN_UP(60 * 4));
    bfit_layer_free(l);
}

static void test_memory(void **st)
{
    bfit_device *dev;
    bfit_layer *l;
    bfit_layer_cfg c = cfg_of(BFIT_L_LINEAR);
    bfit_shape in = V(9), img = S(3, 5, 5);
    uint64_t b[BFIT_MEM_NCAT];
    char err[256];
    (void)st;
    /* layers only answer here: a device without an arena is enough */
    assert_int_equal(bfit_device_cpu_new(NULL, &dev), BFIT_OK);

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

    /* dropout: the mask is one bit per element, saved for backward */
    c = cfg_of(BFIT_L_DROPOUT);
    assert_int_equal(bfit_layer_new(&c, dev, &img, 1, &l, err, sizeof err), BFIT_OK);
    assert_int_equal(bfit_layer_prepare(l, 7, 1), BFIT_OK);
    assert_int_equal(bfit_layer_memory(l, 3, 1, b), BFIT_OK);
    assert_int_equal(b[BFIT_MEM_PARAMS], 0);
    assert_int_equal(b[BFIT_MEM_ACTIVATIONS], BFIT_ALIGN_UP(3 * 75 * 4) + BFIT_ALIGN_UP((3 * 75 + 63) / 64 * 8));
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

    /* xent: per-sample losses (f64) and right/wrong flags (a byte each) in
     * the forward workspace, summed into the statistics in a fixed order */
    c = cfg_of(BFIT_L_XENT);
    in = V(10);
    assert_int_equal(bfit_layer_new(&c, dev, &in, 1, &l, err, sizeof err), BFIT_OK);
    assert_int_equal(bfit_layer_memory(l, 7, 1, b), BFIT_OK);
    assert_int_equal(b[BFIT_MEM_WORKSPACE], BFIT_ALIGN_UP(7 * sizeof(double)) + BFIT_ALIGN_UP(7));
    assert_int_equal(b[BFIT_MEM_ACTIVATIONS], BFIT_ALIGN_UP(7 * 10 * 4));
    bfit_layer_free(l);

    test_memory_sequences(dev);
    bfit_device_free(dev);
}

/* ---- shape errors say what would be right ---- */

static void test_errors(void **st)
{
    bfit_device *dev;
    bfit_layer *l = (bfit_layer *)1;
    bfit_layer_cfg c = cfg_of(BFIT_L_LINEAR);
    bfit_shape in[2] = {S(32, 7, 7), S(32, 7, 5)};
    char err[256];
    (void)st;
    assert_int_equal(bfit_device_cpu_new(NULL, &dev), BFIT_OK);
    c.units = 10;
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_null(l);
    assert_string_equal(err, "linear expects a vector or a sequence, got 32x7x7: add `flatten` before it");
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
    /* the activations' parameters as the spec and ONNX import check them,
       for a cfg made otherwise (the library's callers) */
    in[0] = V(4);
    c = cfg_of(BFIT_L_LEAKYRELU);
    c.alpha = INFINITY;
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_string_equal(err, "leakyrelu needs a finite negative slope, got inf");
    c = cfg_of(BFIT_L_ELU);
    c.alpha = NAN;
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_string_equal(err, "elu needs a finite alpha, got nan");
    c = cfg_of(BFIT_L_SOFTPLUS);
    c.beta = 0;
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_string_equal(err, "softplus needs a finite, nonzero beta and a finite threshold, got beta 0, threshold 20");
    c.beta = 1, c.threshold = -INFINITY;
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_non_null(strstr(err, "got beta 1, threshold -inf"));
    c = cfg_of(BFIT_L_CELU);
    c.alpha = 0; /* celu divides by it, as PyTorch's refuses */
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_string_equal(err, "celu needs a finite, nonzero alpha, got 0");
    c.alpha = -INFINITY;
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_string_equal(err, "celu needs a finite, nonzero alpha, got -inf");
    c.alpha = NAN;
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_string_equal(err, "celu needs a finite, nonzero alpha, got nan");
    /* prelu: one slope, or one per channel of an image or feature of a vector */
    c = cfg_of(BFIT_L_PRELU);
    c.units = 3;
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_string_equal(err, "prelu has one slope, or one per channel of an image CxHxW or feature of a vector: "
                             "channels=3 does not fit the input 4");
    in[0] = Q(5, 3);
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_non_null(strstr(err, "channels=3 does not fit the input 5x3 (a sequence: one slope only)"));
    c.units = 1, c.alpha = NAN;
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_string_equal(err, "prelu needs a finite initial slope, got nan");
    assert_null(l);
    /* layerscale: its count is the input's channels (features), taken from it when 0 */
    c = cfg_of(BFIT_L_LAYERSCALE);
    c.units = 4;
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_string_equal(err, "layerscale has one scale per channel of an image CxHxW or feature of a vector or of "
                             "a sequence [T, C], or one for all (channels=1): 4 scales do not fit the input 5x3");
    c.units = 0;
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_OK);
    assert_int_equal(l->params[0].ndim, 1);
    assert_int_equal(l->params[0].dim[0], 3);
    assert_true(bfit_shape_eq(l->out, Q(5, 3)));
    bfit_layer_free(l);
    c.alpha = INFINITY;
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_EINVAL);
    assert_string_equal(err, "layerscale needs a finite initial scale, got inf");
    assert_null(l);
    /* a sequence is scored per token (token models, issue 15): one row of
     * class scores per token, the output (probabilities) shaped alike */
    c = cfg_of(BFIT_L_XENT);
    in[0] = Q(5, 10);
    assert_int_equal(bfit_layer_new(&c, dev, in, 1, &l, err, sizeof err), BFIT_OK);
    assert_true(bfit_shape_eq(l->out, Q(5, 10)));
    bfit_layer_free(l);
    bfit_device_free(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gc_linear),     cmocka_unit_test(test_gc_sequences),
        cmocka_unit_test(test_gc_act),
        cmocka_unit_test(test_gc_act_param),  cmocka_unit_test(test_gc_prelu),
        cmocka_unit_test(test_gc_layerscale), cmocka_unit_test(test_gc_groupnorm),
        cmocka_unit_test(test_gc_flatten_dropout), cmocka_unit_test(test_gc_layernorm),
        cmocka_unit_test(test_gc_scale),      cmocka_unit_test(test_gc_rmsnorm),
        cmocka_unit_test(test_gc_mul),        cmocka_unit_test(test_gc_rope),
        cmocka_unit_test(test_gc_repeat),
        cmocka_unit_test(test_gc_add),        cmocka_unit_test(test_gc_xent),
        cmocka_unit_test(test_fwd_linear),    cmocka_unit_test(test_fwd_act_flatten_add),
        cmocka_unit_test(test_linear_init),
        cmocka_unit_test(test_fwd_dropout),   cmocka_unit_test(test_fwd_layernorm),
        cmocka_unit_test(test_fwd_xent),      cmocka_unit_test(test_accumulation),
        cmocka_unit_test(test_fwd_sequences), cmocka_unit_test(test_layernorm_no_dx),
        cmocka_unit_test(test_memory),        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
