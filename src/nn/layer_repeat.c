/* layer_repeat.c - `repeat`: a sequence [T, g d] whose tokens are g heads of
 * d = units columns, each head repeated r = groups times: [T, g r d], head
 * q of the output head q / r of the input. Grouped-query attention's keys
 * and values (Hugging Face's repeat_kv: fewer key and value heads than
 * query heads), before the attention layer reads q, k and v of one width.
 * Only from ONNX. The backward sums each head's r gradients; it reads
 * nothing the forward kept. */
#include "base/err.h"
#include "nn/layer.h"

#include <stdio.h>

static int init(bfit_layer *l, char *err, size_t errlen)
{
    bfit_shape in = l->in[0];
    int d = l->cfg.units, r = l->cfg.groups;
    char a[48];

    if (in.nd != 2 || d < 1 || r < 1 || in.d[1] % d || (int64_t)in.d[1] * r > 0x7fffffff) {
        snprintf(err, errlen, "repeat takes a sequence [T, g d] in heads of d columns, each repeated r times, got "
                              "%s, d %d, r %d", bfit_shape_str(in, a, sizeof a), d, r);
        return BFIT_EINVAL;
    }
    l->out = in;
    l->out.d[1] = in.d[1] * r;
    return BFIT_OK;
}

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = {.kind = BFIT_OP_REPEAT_FWD, .dtype = l->dtype};

    d.u.rep.rows = (int64_t)m * l->in[0].d[0];
    d.u.rep.g = l->in[0].d[1] / l->cfg.units;
    d.u.rep.r = l->cfg.groups;
    d.u.rep.d = l->cfg.units;
    return bfit_layer_op_pair(l, &d, BFIT_OP_REPEAT_BWD, training, need);
}

const bfit_layer_vt bfit_repeat_vt = {
    .kind = BFIT_L_REPEAT,
    .nin = 1,
    .modes = BFIT_MODE(BFIT_MODE_NONE),
    .init = init,
    .prepare = prepare,
    .init_params = NULL,
    .forward = bfit_layer_fwd1,
    .backward = bfit_layer_bwd1,
    .unprepare = NULL,
};
