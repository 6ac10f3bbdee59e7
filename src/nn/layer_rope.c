/* layer_rope.c - `rope`: a rotary position embedding of a sequence [T, C]
 * whose tokens are heads of d = units columns (q or k of self-attention):
 * in each head columns j and j + d/2 of token t turn by the angle
 * t theta^(-2j/d), as Hugging Face's LLaMA applies cos and sin with
 * rotate_half (device.h's ROPE ops). Only from ONNX, where q and k of an
 * attention are rotated before their scores.
 *
 * A rotation by fixed angles is linear: its backward turns dy back and
 * reads nothing the forward kept. */
#include "base/err.h"
#include "nn/layer.h"

#include <stdio.h>

static int init(bfit_layer *l, char *err, size_t errlen)
{
    bfit_shape in = l->in[0];
    int d = l->cfg.units;
    char a[48];

    if (in.nd != 2 || d < 2 || d % 2 || d > 8192 || in.d[1] % d || !(l->cfg.theta > 0)) {
        snprintf(err, errlen, "rope turns a sequence [T, C] in heads of d columns (d even, at most 8192, dividing "
                              "C) with a positive base, got %s, d %d, base %g", bfit_shape_str(in, a, sizeof a), d,
                 (double)l->cfg.theta);
        return BFIT_EINVAL;
    }
    l->out = in;
    return BFIT_OK;
}

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = {.kind = BFIT_OP_ROPE_FWD, .dtype = l->dtype};

    d.u.rope.n = m;
    d.u.rope.T = l->in[0].d[0];
    d.u.rope.C = l->in[0].d[1];
    d.u.rope.d = l->cfg.units;
    d.u.rope.theta = l->cfg.theta;
    return bfit_layer_op_pair(l, &d, BFIT_OP_ROPE_BWD, training, need);
}

const bfit_layer_vt bfit_rope_vt = {
    .kind = BFIT_L_ROPE,
    .nin = 1,
    .modes = BFIT_MODE(BFIT_MODE_NONE),
    .init = init,
    .prepare = prepare,
    .init_params = NULL,
    .forward = bfit_layer_fwd1,
    .backward = bfit_layer_bwd1,
    .unprepare = NULL,
};
