/* layer_prelu.c - a learned number per channel that multiplies x, one op
 * (PRELU_FWD/BWD) for both layers:
 * - `prelu`: PyTorch's nn.PReLU, y = x where x > 0, else a x: one slope for
 *   the whole input (units 1, nn.PReLU()), or one per channel of an image
 *   CxHxW or feature of a vector (units C, nn.PReLU(C), which PyTorch
 *   applies along dimension 1); starting at alpha (PyTorch's 0.25);
 * - `layerscale`: timm's LayerScale, the original ConvNeXt's gamma, y = a x
 *   everywhere, one scale per channel of an image, feature of a vector or
 *   feature (last dimension) of a sequence [T, C], or one for all
 *   (channels=1: a learned scalar); starting at alpha (timm's 1e-5).
 * Neither takes weight decay, as biases and norms do not (PyTorch's
 * documentation advises none for PReLU; timm leaves 1-d parameters out).
 * The backward reads x: the slopes' gradient is the sum of dy x (prelu's
 * where x <= 0). The slopes stay f32 under mixed precision, as a norm's
 * scale. */
#include "base/err.h"
#include "nn/layer.h"

#include <stdio.h>

enum { OP_FWD, OP_BWD, OP_BWD_SET };

static int init_common(bfit_layer *l, char *err, size_t errlen)
{
    const char *name = bfit_layer_kind_name(l->cfg.kind);

    if (!(l->cfg.alpha > -1e30f && l->cfg.alpha < 1e30f)) {
        snprintf(err, errlen, "%s needs a finite initial %s, got %g", name,
                 l->cfg.kind == BFIT_L_PRELU ? "slope" : "scale", (double)l->cfg.alpha);
        return BFIT_EINVAL;
    }
    l->out = l->in[0];
    l->nparams = 1;
    l->params[0] = (bfit_param){.name = "weight", .ndim = 1, .dim = {l->cfg.units}, .trainable = 1};
    return BFIT_OK;
}

static int init(bfit_layer *l, char *err, size_t errlen)
{
    bfit_shape in = l->in[0];
    char buf[48];

    if (l->cfg.units != 1 && !(bfit_shape_is_image(in) && l->cfg.units == in.c)) {
        snprintf(err, errlen, "prelu has one slope, or one per channel of an image CxHxW or feature of a vector: "
                 "channels=%d does not fit the input %s%s", l->cfg.units, bfit_shape_str(in, buf, sizeof buf),
                 bfit_shape_is_image(in) ? "" : " (a sequence: one slope only)");
        return BFIT_EINVAL;
    }
    return init_common(l, err, errlen);
}

/* A layer scale's count is the input's channels (features): a sequence's
 * last dimension; units 0 takes it from the input; units 1 is one scale
 * for the whole input (a learned scalar: ReZero's alpha, SAGAN's gamma). */
static int init_layerscale(bfit_layer *l, char *err, size_t errlen)
{
    bfit_shape in = l->in[0];
    int c = in.nd == 2 ? in.d[1] : in.c;
    char buf[48];

    if (in.nd < 1 || in.nd > 3 || (l->cfg.units && l->cfg.units != 1 && l->cfg.units != c)) {
        snprintf(err, errlen, "layerscale has one scale per channel of an image CxHxW or feature of a vector or of "
                 "a sequence [T, C], or one for all (channels=1): %d scales do not fit the input %s", l->cfg.units,
                 bfit_shape_str(in, buf, sizeof buf));
        return BFIT_EINVAL;
    }
    if (!l->cfg.units)
        l->cfg.units = c;
    return init_common(l, err, errlen);
}

/* An image's rows are its channels even for one slope, so that a layout
 * chain's blocks (store.c) sum them in the plain layout's order; a vector's
 * or sequence's elements are one row per sample for one slope; a
 * sequence's scales per feature see [m T, C, 1], its tokens as samples. */
static bfit_op_desc prelu_desc(const bfit_layer *l, bfit_op_kind kind, int m, int accumulate)
{
    bfit_op_desc d = {.kind = kind, .dtype = l->dtype, .accumulate = accumulate};
    bfit_shape in = l->in[0];
    int rows_are_channels = in.nd == 3 || l->cfg.units > 1, seq = in.nd == 2 && rows_are_channels;

    d.u.prelu.n = seq ? (int64_t)m * in.d[0] : m;
    d.u.prelu.c = seq ? in.d[1] : rows_are_channels ? in.c : 1;
    d.u.prelu.hw = seq ? 1 : rows_are_channels ? (int64_t)in.h * in.w : bfit_shape_numel(in);
    d.u.prelu.shared = l->cfg.units == 1;
    d.u.prelu.linear = l->cfg.kind == BFIT_L_LAYERSCALE;
    d.u.prelu.blk = l->blk_in; /* a layout chain's block (store.c): the output's too */
    return d;
}

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    /* the slopes' gradient added (an op setting it is made at its first use) */
    bfit_op_desc d = prelu_desc(l, BFIT_OP_PRELU_FWD, m, 1);
    return bfit_layer_op_pair(l, &d, BFIT_OP_PRELU_BWD, training, need);
}

static void init_params(bfit_layer *l, uint64_t seed, float *const *host)
{
    (void)seed;
    bfit_fill_const(host[0], l->cfg.units, l->cfg.alpha);
}

static int forward(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};

    o.src = a->x[0];
    o.weights = l->params[0].data;
    o.dst = a->y;
    return bfit_op_run(l->ops[OP_FWD], &o);
}

static int backward(bfit_layer *l, const bfit_bwd_args *a)
{
    bfit_op_args o = {0};
    int rc;

    if (a->grad_set && !l->ops[OP_BWD_SET]) {
        bfit_op_desc set = prelu_desc(l, BFIT_OP_PRELU_BWD, a->m, 0);
        if ((rc = bfit_layer_late_op(l, OP_BWD_SET, &set)) != BFIT_OK)
            return rc;
    }
    o.src = a->x[0];
    o.weights = l->params[0].data;
    o.diff_dst = a->dy;
    o.diff_src = a->dx[0]; /* NULL: the slopes' gradient only */
    o.diff_weights = l->params[0].grad;
    o.workspace = a->ws;
    return bfit_op_run(l->ops[a->grad_set ? OP_BWD_SET : OP_BWD], &o);
}

const bfit_layer_vt bfit_prelu_vt = {
    .kind = BFIT_L_PRELU,
    .nin = 1,
    .grad_set = 1,
    .modes = BFIT_MODE(BFIT_MODE_X),
    .init = init,
    .prepare = prepare,
    .init_params = init_params,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL, /* ops are freed generically */
};

const bfit_layer_vt bfit_layerscale_vt = {
    .kind = BFIT_L_LAYERSCALE,
    .nin = 1,
    .grad_set = 1,
    .modes = BFIT_MODE(BFIT_MODE_X),
    .init = init_layerscale,
    .prepare = prepare,
    .init_params = init_params,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL,
};
