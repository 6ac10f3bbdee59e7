/* layer_mul.c - `mul`: the elementwise product of two inputs of one shape,
 * y = a b: SwiGLU's silu(x W1) * (x W3) in LLaMA's feed-forward, any gated
 * unit that multiplies two branches. Only from ONNX (a Mul of two
 * computed tensors), as `scale` is.
 *
 * It is the channel gate's op (CHSCALE) with one position per channel:
 * a [n, K] by [n, K], K the sample's elements, whose backward is da = dy b
 * and db = dy a (the gate's "sum over positions" of one term). */
#include "base/err.h"
#include "nn/layer.h"

#include <stdio.h>

enum { OP_FWD, OP_BWD };

static int init(bfit_layer *l, char *err, size_t errlen)
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

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
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

/* dx[0] = dy x[1] (the op's diff_src, src2 as the scale); dx[1] = dy x[0]
 * (its scales' gradient, written to dst). Each element of dy is read
 * before the two gradients' elements at its index are written. */
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

const bfit_layer_vt bfit_mul_vt = {
    .kind = BFIT_L_MUL,
    .nin = 2,
    .modes = BFIT_MODE(BFIT_MODE_X),
    .init = init,
    .prepare = prepare,
    .init_params = NULL,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL,
};
