/* layer_chscale.c - products of two inputs, one op (CHSCALE):
 *
 * - `scale`: each channel of an image multiplied by its own number, the
 *   sample's second input (C of them, a vector or Cx1x1): the gate of a
 *   squeeze-and-excitation block, x * sigmoid(fc(pool(x))) in MobileNetV3
 *   and EfficientNet (ONNX: a Mul of [N,C,H,W] by [N,C,1,1]);
 * - `mul`: the elementwise product of two inputs of one shape, y = a b:
 *   SwiGLU's silu(x W1) * (x W3) in LLaMA's feed-forward (a Mul of two
 *   computed tensors): the gate with one position per channel, [n, K] by
 *   [n, K], K the sample's elements.
 *
 * The backward reads both inputs: dx = dy s, ds = the sum over H and W of
 * dy x (for `mul` the one term: db = dy a); each element of dy is read
 * before the gradients' elements at its index are written. */
#include "base/err.h"
#include "nn/layer.h"

#include <stdio.h>

enum { OP_FWD, OP_BWD };

static int init(bfit_layer *l, char *err, size_t errlen)
{
    char a[48], b[48];

    if (!bfit_shape_is_image(l->in[0]) || bfit_shape_numel(l->in[1]) != l->in[0].c ||
        !(bfit_shape_is_vector(l->in[1]) || (bfit_shape_is_image(l->in[1]) && l->in[1].h == 1 && l->in[1].w == 1))) {
        snprintf(err, errlen, "scale multiplies an image CxHxW by C numbers (a vector C or Cx1x1), got %s by %s",
                 bfit_shape_str(l->in[0], a, sizeof a), bfit_shape_str(l->in[1], b, sizeof b));
        return BFIT_EINVAL;
    }
    l->out = l->in[0];
    return BFIT_OK;
}

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = {.kind = BFIT_OP_CHSCALE_FWD, .dtype = l->dtype};

    d.u.chs.n = m;
    d.u.chs.c = l->in[0].c;
    d.u.chs.hw = (int64_t)l->in[0].h * l->in[0].w;
    d.u.chs.blk = l->blk_in; /* a layout chain's block (store.c): the output's too */
    return bfit_layer_op_pair(l, &d, BFIT_OP_CHSCALE_BWD, training, need);
}

static int mul_init(bfit_layer *l, char *err, size_t errlen)
{
    char a[48], b[48];

    if (!bfit_shape_eq(l->in[0], l->in[1])) {
        snprintf(err, errlen, "mul multiplies two inputs of the same shape elementwise, got %s and %s",
                 bfit_shape_str(l->in[0], a, sizeof a), bfit_shape_str(l->in[1], b, sizeof b));
        return BFIT_EINVAL;
    }
    l->out = l->in[0];
    return BFIT_OK;
}

static int mul_prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = {.kind = BFIT_OP_CHSCALE_FWD, .dtype = l->dtype};

    d.u.chs.n = m;
    d.u.chs.c = bfit_shape_numel(l->in[0]);
    d.u.chs.hw = 1;
    return bfit_layer_op_pair(l, &d, BFIT_OP_CHSCALE_BWD, training, need);
}

static int forward(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};

    o.src = a->x[0];
    o.src2 = a->x[1];
    o.dst = a->y;
    return bfit_op_run(l->ops[OP_FWD], &o);
}

static int backward(bfit_layer *l, const bfit_bwd_args *a)
{
    bfit_op_args o = {0};

    if (!a->dx[0] && !a->dx[1])
        return BFIT_OK;
    o.src = a->x[0];
    o.src2 = a->x[1];
    o.diff_dst = a->dy;
    o.diff_src = a->dx[0];
    o.dst = a->dx[1];
    return bfit_op_run(l->ops[OP_BWD], &o);
}

const bfit_layer_vt bfit_chscale_vt = {
    .kind = BFIT_L_SCALE,
    .nin = 2,
    .modes = BFIT_MODE(BFIT_MODE_X),
    .init = init,
    .prepare = prepare,
    .init_params = NULL,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL,
};

const bfit_layer_vt bfit_mul_vt = {
    .kind = BFIT_L_MUL,
    .nin = 2,
    .modes = BFIT_MODE(BFIT_MODE_X),
    .init = mul_init,
    .prepare = mul_prepare,
    .init_params = NULL,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL,
};
