/* layer_concat.c - torch.cat of a sample's tensors along one dimension
 * (axis 0 of CxHxW: the channels, DenseNet's concatenation). The inputs
 * agree in every other dimension. Forward copies each input into its
 * columns of the output's rows; backward hands each its columns of the
 * output's gradient, adding where another consumer of that input wrote its
 * gradient first (vt.dx_add), so DenseNet's features, each read by every
 * later concatenation of its block, need no temporary gradients. */
#include "base/err.h"
#include "nn/layer.h"

#include <stdio.h>

enum { OP_FWD, OP_BWD };

static int init(bfit_layer *l, char *err, size_t errlen)
{
    int a = l->cfg.axis, nd = l->in[0].nd;
    int64_t sum = 0;
    char x[48], y[48];

    if (l->nin > BFIT_OP_MAXCAT || a < 0 || a >= nd) {
        snprintf(err, errlen, "concat of %d inputs along dimension %d of %s: at most %d inputs, along one of its "
                              "%d dimensions", l->nin, a, bfit_shape_str(l->in[0], x, sizeof x), BFIT_OP_MAXCAT, nd);
        return BFIT_EINVAL;
    }
    for (int k = 0; k < l->nin; k++) {
        int same = l->in[k].nd == nd;
        for (int d = 0; same && d < nd; d++)
            same = d == a || l->in[k].d[d] == l->in[0].d[d];
        if (!same) {
            snprintf(err, errlen, "concat along dimension %d needs inputs equal in the others: input %d is %s, "
                                  "input 1 is %s", a, k + 1, bfit_shape_str(l->in[k], x, sizeof x),
                     bfit_shape_str(l->in[0], y, sizeof y));
            return BFIT_EINVAL;
        }
        sum += l->in[k].d[a];
    }
    if (sum > 0x7fffffff) {
        snprintf(err, errlen, "concat: %lld along dimension %d is too many", (long long)sum, a);
        return BFIT_EINVAL;
    }
    l->out = l->in[0];
    l->out.d[a] = (int)sum;
    return BFIT_OK;
}

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = {.kind = BFIT_OP_CONCAT_FWD, .dtype = l->dtype};

    d.u.concat.rows = m;
    for (int i = 0; i < l->cfg.axis; i++)
        d.u.concat.rows *= l->out.d[i];
    d.u.concat.n = l->nin;
    for (int k = 0; k < l->nin; k++) {
        d.u.concat.cols[k] = 1;
        for (int i = l->cfg.axis; i < l->in[k].nd; i++)
            d.u.concat.cols[k] *= l->in[k].d[i];
    }
    return bfit_layer_op_pair(l, &d, BFIT_OP_CONCAT_BWD, training, need);
}

static int forward(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};

    o.srcs = a->x;
    o.dst = a->y;
    return bfit_op_run(l->ops[OP_FWD], &o);
}

static int backward(bfit_layer *l, const bfit_bwd_args *a)
{
    bfit_op_args o = {0};

    o.diff_dst = a->dy;
    o.dsts = a->dx;
    o.add_mask = a->dx_add;
    return bfit_op_run(l->ops[OP_BWD], &o);
}

const bfit_layer_vt bfit_concat_vt = {
    .kind = BFIT_L_CONCAT,
    .nin = 0,
    .dx_add = 1,
    .modes = BFIT_MODE(BFIT_MODE_NONE),
    .init = init,
    .prepare = prepare,
    .init_params = NULL,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL,
};
