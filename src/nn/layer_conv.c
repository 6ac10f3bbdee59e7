/* layer_conv.c - 2-d convolution, PyTorch's nn.Conv2d (dilation 1): weight
 * [oc,ic/groups,kh,kw], optional bias [oc], zero padding, output size
 * (H + 2p - k) / s + 1 rounded down. Groups (MobileNet's depthwise
 * convolutions: groups = channels) run on the CPU device.
 *
 * Three oneDNN ops prepared per micro-batch: forward, backward weights (it
 * accumulates into the gradients itself; a second one, made at its first
 * use, sets them: bfit_bwd_args.grad_set) and backward data. No
 * state is kept between forward and backward beyond the layer's input. */
#include "base/err.h"
#include "nn/layer.h"

#include <math.h>
#include <stdio.h>

enum { OP_FWD, OP_BWD_W, OP_BWD_D, OP_BWD_W_SET };

static int init(bfit_layer *l, char *err, size_t errlen)
{
    const bfit_layer_cfg *c = &l->cfg;
    bfit_shape in = l->in[0];
    int g = c->groups > 1 ? c->groups : 1;
    char buf[48];

    if (!bfit_shape_is_image(in)) {
        snprintf(err, errlen, "conv expects an image CxHxW, got the sequence %s", bfit_shape_str(in, buf, sizeof buf));
        return BFIT_EINVAL;
    }
    if (c->units < 1) {
        snprintf(err, errlen, "conv needs a positive number of output channels, got %d", c->units);
        return BFIT_EINVAL;
    }
    if (c->kh < 1 || c->kw < 1 || c->sh < 1 || c->sw < 1 || c->ph < 0 || c->pw < 0) {
        snprintf(err, errlen, "conv kernel %dx%d and stride %dx%d must be positive and padding %dx%d not negative",
                 c->kh, c->kw, c->sh, c->sw, c->ph, c->pw);
        return BFIT_EINVAL;
    }
    if (in.h + 2 * c->ph < c->kh || in.w + 2 * c->pw < c->kw) {
        snprintf(err, errlen,
                 "conv kernel %dx%d is larger than the input %s padded by %dx%d (%dx%d): use a kernel of at most "
                 "%dx%d or more padding",
                 c->kh, c->kw, bfit_shape_str(in, buf, sizeof buf), c->ph, c->pw, in.h + 2 * c->ph,
                 in.w + 2 * c->pw, in.h + 2 * c->ph, in.w + 2 * c->pw);
        return BFIT_EINVAL;
    }
    if (c->groups < 0 || in.c % g || c->units % g) {
        snprintf(err, errlen, "conv with %d groups needs input channels (%d) and output channels (%d) that the "
                              "groups divide", g, in.c, c->units);
        return BFIT_EINVAL;
    }
    l->out = bfit_shape_chw(c->units, (in.h + 2 * c->ph - c->kh) / c->sh + 1, (in.w + 2 * c->pw - c->kw) / c->sw + 1);
    l->nparams = c->bias ? 2 : 1;
    l->params[0] = (bfit_param){.name = "weight", .ndim = 4, .dim = {c->units, in.c / g, c->kh, c->kw},
                                .trainable = 1, .decay = 1, .multiplies = 1};
    if (c->bias)
        l->params[1] = (bfit_param){.name = "bias", .ndim = 1, .dim = {c->units}, .trainable = 1};
    return BFIT_OK;
}

static bfit_op_desc conv_desc(const bfit_layer *l, int slot, bfit_op_kind kind, int m)
{
    const bfit_layer_cfg *c = &l->cfg;
    bfit_op_desc d = {.kind = kind, .dtype = l->dtype, .accumulate = slot == OP_BWD_W};

    d.u.conv.n = m;
    d.u.conv.ic = l->in[0].c;
    d.u.conv.ih = l->in[0].h;
    d.u.conv.iw = l->in[0].w;
    d.u.conv.oc = c->units;
    d.u.conv.oh = l->out.h;
    d.u.conv.ow = l->out.w;
    d.u.conv.kh = c->kh;
    d.u.conv.kw = c->kw;
    d.u.conv.sh = c->sh;
    d.u.conv.sw = c->sw;
    d.u.conv.ph = c->ph;
    d.u.conv.pw = c->pw;
    d.u.conv.bias = c->bias != 0;
    d.u.conv.groups = c->groups > 1 ? c->groups : 1;
    d.u.conv.blk_src = l->blk_in;
    d.u.conv.blk_dst = l->blk_out;
    return d;
}

static int new_op(bfit_layer *l, int slot, bfit_op_kind kind, int m)
{
    bfit_op_desc d = conv_desc(l, slot, kind, m);
    return bfit_op_new(l->dev, &d, &l->ops[slot]);
}

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    int rc;

    if ((rc = new_op(l, OP_FWD, BFIT_OP_CONV_FWD, m)) != BFIT_OK)
        return rc;
    need->saved = 0;
    need->ws_fwd = bfit_op_workspace_bytes(l->ops[OP_FWD]);
    need->ws_bwd = 0;
    if (!training)
        return BFIT_OK;
    if ((rc = new_op(l, OP_BWD_W, BFIT_OP_CONV_BWD_WEIGHTS, m)) != BFIT_OK ||
        (rc = new_op(l, OP_BWD_D, BFIT_OP_CONV_BWD_DATA, m)) != BFIT_OK)
        return rc;
    /* the two backward ops run one after the other and share the workspace */
    need->ws_bwd = bfit_op_workspace_bytes(l->ops[OP_BWD_W]);
    if (bfit_op_workspace_bytes(l->ops[OP_BWD_D]) > need->ws_bwd)
        need->ws_bwd = bfit_op_workspace_bytes(l->ops[OP_BWD_D]);
    return BFIT_OK;
}

static void init_params(bfit_layer *l, uint64_t seed, float *const *host)
{
    /* PyTorch: kaiming_uniform(a=sqrt 5) for the weight and U(+-1/sqrt(fan_in))
     * for the bias both come to U(-1/sqrt(fan_in), 1/sqrt(fan_in)) */
    float bound = 1.0f / sqrtf((float)l->params[0].dim[1] * l->cfg.kh * l->cfg.kw); /* fan-in: ic / groups */
    bfit_fill_uniform(host[0], bfit_param_numel(&l->params[0]), bound, seed * 2 + 0);
    if (l->cfg.bias)
        bfit_fill_uniform(host[1], bfit_param_numel(&l->params[1]), bound, seed * 2 + 1);
}

static int forward(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};

    o.src = a->x[0];
    o.weights = bfit_param_compute(&l->params[0]);
    o.bias = l->cfg.bias ? l->params[1].data : NULL;
    o.dst = a->y;
    o.workspace = a->ws;
    return bfit_op_run(l->ops[OP_FWD], &o);
}

static int backward(bfit_layer *l, const bfit_bwd_args *a)
{
    bfit_op_args o = {0};
    int rc;

    if (a->grad_set && !l->ops[OP_BWD_W_SET]) {
        bfit_op_desc set = conv_desc(l, OP_BWD_W_SET, BFIT_OP_CONV_BWD_WEIGHTS, a->m);
        if ((rc = bfit_layer_late_op(l, OP_BWD_W_SET, &set)) != BFIT_OK)
            return rc;
    }
    o.src = a->x[0];
    o.diff_dst = a->dy;
    o.diff_weights = l->params[0].grad;
    o.diff_bias = l->cfg.bias ? l->params[1].grad : NULL;
    o.workspace = a->ws;
    if ((rc = bfit_op_run(l->ops[a->grad_set ? OP_BWD_W_SET : OP_BWD_W], &o)) != BFIT_OK || !a->dx[0])
        return rc;
    o = (bfit_op_args){0};
    o.diff_dst = a->dy;
    o.weights = bfit_param_compute(&l->params[0]);
    o.diff_src = a->dx[0];
    o.workspace = a->ws;
    return bfit_op_run(l->ops[OP_BWD_D], &o);
}

const bfit_layer_vt bfit_conv_vt = {
    .kind = BFIT_L_CONV,
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
