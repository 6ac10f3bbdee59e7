/* layer_act.c - elementwise activations: relu, gelu (PyTorch's default
 * erf form, or its tanh approximation), clip (ReLU6 and its kin: hardtanh), sigmoid, silu (x *
 * sigmoid(x), PyTorch's SiLU), tanh, hardsigmoid and hardswish
 * (MobileNetV3's), leakyrelu, elu, softplus, selu and celu (with PyTorch's
 * parameters and defaults). Any input shape; the output has the
 * same shape. The backward
 * reads the forward's input; relu's may read its output instead, or only a
 * sign bit per element kept in its saved bytes (l->mode), whichever the
 * model keeps anyway. */
#include "base/err.h"
#include "nn/layer.h"

enum { OP_FWD, OP_BWD };

static int init(bfit_layer *l, char *err, size_t errlen)
{
    l->out = l->in[0];
    return BFIT_OK;
}

static bfit_eltwise_alg alg_of(const bfit_layer *l)
{
    switch (l->cfg.kind) {
    case BFIT_L_GELU: return l->cfg.tanh ? BFIT_ELT_GELU_TANH : BFIT_ELT_GELU_ERF;
    case BFIT_L_CLIP: return BFIT_ELT_CLIP;
    case BFIT_L_SIGMOID: return BFIT_ELT_SIGMOID;
    case BFIT_L_SILU: return BFIT_ELT_SILU;
    case BFIT_L_TANH: return BFIT_ELT_TANH;
    case BFIT_L_HARDSIGMOID: return BFIT_ELT_HARDSIGMOID;
    case BFIT_L_HARDSWISH: return BFIT_ELT_HARDSWISH;
    case BFIT_L_LEAKYRELU: return BFIT_ELT_LEAKYRELU;
    case BFIT_L_ELU: return BFIT_ELT_ELU;
    case BFIT_L_SOFTPLUS: return BFIT_ELT_SOFTPLUS;
    case BFIT_L_SELU: return BFIT_ELT_SELU;
    case BFIT_L_CELU: return BFIT_ELT_CELU;
    default: return BFIT_ELT_RELU;
    }
}

static int init_clip(bfit_layer *l, char *err, size_t errlen)
{
    if (!(l->cfg.lo < l->cfg.hi)) {
        snprintf(err, errlen, "clip needs lo < hi, got [%g, %g]", (double)l->cfg.lo, (double)l->cfg.hi);
        return BFIT_EINVAL;
    }
    return init(l, err, errlen);
}

static int init_hardsigmoid(bfit_layer *l, char *err, size_t errlen)
{
    if (!(l->cfg.alpha > 0 && l->cfg.alpha < 1e30f && l->cfg.beta > -1e30f && l->cfg.beta < 1e30f)) {
        snprintf(err, errlen, "hardsigmoid needs a positive, finite alpha and a finite beta, got alpha %g, beta %g",
                 (double)l->cfg.alpha, (double)l->cfg.beta);
        return BFIT_EINVAL;
    }
    return init(l, err, errlen);
}

/* Leaky relu's slope, elu's alpha, softplus's beta (nonzero) and threshold,
 * celu's alpha (nonzero: it divides): finite, as PyTorch's */
static int init_param(bfit_layer *l, char *err, size_t errlen)
{
    const bfit_layer_cfg *c = &l->cfg;
    int fin = c->alpha > -1e30f && c->alpha < 1e30f;

    if (c->kind == BFIT_L_LEAKYRELU && !fin) {
        snprintf(err, errlen, "leakyrelu needs a finite negative slope, got %g", (double)c->alpha);
        return BFIT_EINVAL;
    }
    if (c->kind == BFIT_L_ELU && !fin) {
        snprintf(err, errlen, "elu needs a finite alpha, got %g", (double)c->alpha);
        return BFIT_EINVAL;
    }
    if (c->kind == BFIT_L_SOFTPLUS &&
        !(c->beta > -1e30f && c->beta < 1e30f && c->beta != 0 && c->threshold > -1e30f && c->threshold < 1e30f)) {
        snprintf(err, errlen, "softplus needs a finite, nonzero beta and a finite threshold, got beta %g, threshold %g",
                 (double)c->beta, (double)c->threshold);
        return BFIT_EINVAL;
    }
    if (c->kind == BFIT_L_CELU && !(fin && c->alpha != 0)) {
        snprintf(err, errlen, "celu needs a finite, nonzero alpha, got %g", (double)c->alpha);
        return BFIT_EINVAL;
    }
    return init(l, err, errlen);
}

/* The op's two numbers: clip's bounds, or the activation's parameters. */
static void elt_params(const bfit_layer_cfg *c, float *lo, float *hi)
{
    switch (c->kind) {
    case BFIT_L_HARDSIGMOID: *lo = c->alpha, *hi = c->beta; return;
    case BFIT_L_LEAKYRELU:
    case BFIT_L_ELU:
    case BFIT_L_CELU: *lo = c->alpha, *hi = 0; return;
    case BFIT_L_SOFTPLUS: *lo = c->beta, *hi = c->threshold; return;
    case BFIT_L_SELU: *lo = BFIT_SELU_ALPHA, *hi = BFIT_SELU_SCALE; return;
    default: *lo = c->lo, *hi = c->hi; return;
    }
}

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = {.kind = BFIT_OP_ELTWISE_FWD, .dtype = l->dtype};
    int rc;

    d.u.elt.n = (int64_t)m * bfit_shape_numel(l->in[0]);
    d.u.elt.alg = alg_of(l);
    elt_params(&l->cfg, &d.u.elt.lo, &d.u.elt.hi);
    d.u.elt.bits = training && l->mode == BFIT_MODE_BITS;
    d.u.elt.use_dst = training && l->mode == BFIT_MODE_Y;
    if ((rc = bfit_layer_op_pair(l, &d, BFIT_OP_ELTWISE_BWD, training, need)) != BFIT_OK)
        return rc;
    need->saved = d.u.elt.bits ? bfit_op_saved_bytes(l->ops[OP_FWD]) : 0;
    return BFIT_OK;
}

static int forward(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};

    o.src = a->x[0];
    o.dst = a->y;
    o.saved = l->prep_training && l->mode == BFIT_MODE_BITS ? a->saved : NULL;
    o.workspace = a->ws;
    return bfit_op_run(l->ops[OP_FWD], &o);
}

static int backward(bfit_layer *l, const bfit_bwd_args *a)
{
    bfit_op_args o = {0};

    if (!a->dx[0])
        return BFIT_OK;
    o.src = l->mode == BFIT_MODE_Y ? a->y : l->mode == BFIT_MODE_BITS ? NULL : a->x[0];
    o.saved = l->mode == BFIT_MODE_BITS ? a->saved : NULL;
    o.diff_dst = a->dy;
    o.diff_src = a->dx[0];
    o.workspace = a->ws;
    return bfit_op_run(l->ops[OP_BWD], &o);
}

/* An activation whose backward reads its input only. */
#define ACT_VT_X(name, k) ACT_VT_XI(name, k, init)
#define ACT_VT_XI(name, k, initf)                                                                           \
    const bfit_layer_vt name = {.kind = k,                                                                  \
                                .nin = 1,                                                                   \
                                .modes = BFIT_MODE(BFIT_MODE_X),                                            \
                                .init = initf,                                                              \
                                .prepare = prepare,                                                         \
                                .init_params = NULL,                                                        \
                                .forward = forward,                                                         \
                                .backward = backward,                                                       \
                                .unprepare = NULL}

const bfit_layer_vt bfit_relu_vt = {
    .kind = BFIT_L_RELU,
    .nin = 1,
    .modes = BFIT_MODE(BFIT_MODE_X) | BFIT_MODE(BFIT_MODE_Y) | BFIT_MODE(BFIT_MODE_BITS),
    .init = init,
    .prepare = prepare,
    .init_params = NULL, /* no parameters */
    .forward = forward,
    .backward = backward,
    .unprepare = NULL,
};

ACT_VT_X(bfit_gelu_vt, BFIT_L_GELU);

const bfit_layer_vt bfit_clip_vt = {
    .kind = BFIT_L_CLIP,
    .nin = 1,
    .modes = BFIT_MODE(BFIT_MODE_X) | BFIT_MODE(BFIT_MODE_Y),
    .init = init_clip,
    .prepare = prepare,
    .init_params = NULL,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL,
};

ACT_VT_X(bfit_sigmoid_vt, BFIT_L_SIGMOID);
ACT_VT_X(bfit_silu_vt, BFIT_L_SILU);
ACT_VT_X(bfit_tanh_vt, BFIT_L_TANH);
ACT_VT_X(bfit_hardswish_vt, BFIT_L_HARDSWISH);

const bfit_layer_vt bfit_hardsigmoid_vt = {
    .kind = BFIT_L_HARDSIGMOID,
    .nin = 1,
    .modes = BFIT_MODE(BFIT_MODE_X),
    .init = init_hardsigmoid,
    .prepare = prepare,
    .init_params = NULL,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL,
};

/* Their backward reads x, as PyTorch's: elu's (selu's, celu's) from y
 * would round differently, softplus has none, and leaky relu's from y holds
 * only for a slope >= 0 (a kind's modes do not depend on its parameters). */
ACT_VT_XI(bfit_leakyrelu_vt, BFIT_L_LEAKYRELU, init_param);
ACT_VT_XI(bfit_elu_vt, BFIT_L_ELU, init_param);
ACT_VT_XI(bfit_softplus_vt, BFIT_L_SOFTPLUS, init_param);
ACT_VT_X(bfit_selu_vt, BFIT_L_SELU);
ACT_VT_XI(bfit_celu_vt, BFIT_L_CELU, init_param);
