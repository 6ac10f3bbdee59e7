/* layer_add.c - residual add of two inputs of equal shape: y = x0 + x1.
 * The backward hands dy to both inputs (dx[0] = dx[1] = dy). */
#include "base/err.h"
#include "nn/layer.h"

#include <stdio.h>

static int init(bfit_layer *l, char *err, size_t errlen)
{
    char a[48], b[48];

    if (!bfit_shape_eq(l->in[0], l->in[1])) {
        snprintf(err, errlen, "add needs two inputs of the same shape, got %s and %s: make the residual "
                              "branch end in the shape it starts with",
                 bfit_shape_str(l->in[0], a, sizeof a), bfit_shape_str(l->in[1], b, sizeof b));
        return BFIT_EINVAL;
    }
    l->out = l->in[0];
    return BFIT_OK;
}

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = {.kind = BFIT_OP_ADD, .dtype = l->dtype};

    d.u.add.n = (int64_t)m * bfit_shape_numel(l->in[0]);
    need->saved = need->ws_fwd = need->ws_bwd = 0;
    return bfit_op_new(l->dev, &d, &l->ops[0]);
}

static int forward(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};

    o.src = a->x[0];
    o.src2 = a->x[1];
    o.dst = a->y;
    return bfit_op_run(l->ops[0], &o);
}

static int backward(bfit_layer *l, const bfit_bwd_args *a)
{
    size_t n = (size_t)a->m * (size_t)bfit_shape_numel(l->in[0]) * bfit_dtype_size(l->dtype);
    int rc = BFIT_OK;

    for (int i = 0; i < 2 && rc == BFIT_OK; i++)
        if (a->dx[i] && a->dx[i] != a->dy) /* the same bytes: the layout handed dy on in place */
            rc = bfit_device_copy(l->dev, a->dx[i], a->dy, n);
    return rc;
}

const bfit_layer_vt bfit_add_vt = {
    .kind = BFIT_L_ADD,
    .nin = 2,
    .modes = BFIT_MODE(BFIT_MODE_NONE),
    .init = init,
    .prepare = prepare,
    .init_params = NULL,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL,
};
