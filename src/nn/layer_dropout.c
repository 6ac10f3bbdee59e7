/* layer_dropout.c - inverted dropout (PyTorch's nn.Dropout): in training
 * y = x * mask / (1-p) with the one-byte-per-element mask kept in `saved`
 * for backward; in evaluation the identity (a copy, no ops, no saved bytes). */
#include "base/err.h"
#include "nn/layer.h"

#include <stdio.h>

enum { OP_FWD, OP_BWD };

static int init(bfit_layer *l, char *err, size_t errlen)
{
    if (!(l->cfg.p >= 0.0f && l->cfg.p < 1.0f)) {
        snprintf(err, errlen, "dropout probability must be in [0, 1), got %g", (double)l->cfg.p);
        return BFIT_EINVAL;
    }
    l->out = l->in[0];
    return BFIT_OK;
}

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = {.kind = BFIT_OP_DROPOUT_FWD, .dtype = l->dtype};
    int rc;

    need->saved = need->ws_fwd = need->ws_bwd = 0;
    if (!training)
        return BFIT_OK;
    d.u.drop.n = (int64_t)m * bfit_shape_numel(l->in[0]);
    d.u.drop.p = l->cfg.p;
    if ((rc = bfit_layer_op_pair(l, &d, BFIT_OP_DROPOUT_BWD, 1, need)) != BFIT_OK)
        return rc;
    need->saved = bfit_op_saved_bytes(l->ops[OP_FWD]);
    return BFIT_OK;
}

static int forward(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};

    if (!a->training)
        return bfit_device_copy(l->dev, a->y, a->x[0],
                                (size_t)a->m * (size_t)bfit_shape_numel(l->in[0]) * bfit_dtype_size(l->dtype));
    o.src = a->x[0];
    o.dst = a->y;
    o.saved = a->saved;
    o.workspace = a->ws;
    o.seed = a->seed;
    return bfit_op_run(l->ops[OP_FWD], &o);
}

static int backward(bfit_layer *l, const bfit_bwd_args *a)
{
    bfit_op_args o = {0};

    if (!a->dx[0])
        return BFIT_OK;
    o.diff_dst = a->dy;
    o.diff_src = a->dx[0];
    o.saved = a->saved;
    o.workspace = a->ws;
    return bfit_op_run(l->ops[OP_BWD], &o);
}

const bfit_layer_vt bfit_dropout_vt = {
    .kind = BFIT_L_DROPOUT,
    .nin = 1,
    .modes = BFIT_MODE(BFIT_MODE_NONE),
    .init = init,
    .prepare = prepare,
    .init_params = NULL,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL,
};
