/* layer_flatten.c - any sample shape -> a vector of its elements. NCHW is already
 * row-major per sample, so this is a copy (a view would save the output
 * buffer; that is a later optimisation the plan must then know about). */
#include "base/err.h"
#include "nn/layer.h"

#include <stdio.h>

static int init(bfit_layer *l, char *err, size_t errlen)
{
    int64_t n = bfit_shape_numel(l->in[0]);
    if (n > 0x7fffffff) {
        snprintf(err, errlen, "flatten: %lld features do not fit a vector", (long long)n);
        return BFIT_EINVAL;
    }
    l->out = bfit_shape_vec((int)n);
    return BFIT_OK;
}

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    need->saved = need->ws_fwd = need->ws_bwd = 0;
    return BFIT_OK;
}

static size_t bytes(const bfit_layer *l, int m)
{
    return (size_t)m * (size_t)bfit_shape_numel(l->in[0]) * bfit_dtype_size(l->dtype);
}

static int forward(bfit_layer *l, const bfit_fwd_args *a)
{
    return bfit_device_copy(l->dev, a->y, a->x[0], bytes(l, a->m));
}

static int backward(bfit_layer *l, const bfit_bwd_args *a)
{
    if (!a->dx[0])
        return BFIT_OK;
    return bfit_device_copy(l->dev, a->dx[0], a->dy, bytes(l, a->m));
}

const bfit_layer_vt bfit_flatten_vt = {
    .kind = BFIT_L_FLATTEN,
    .nin = 1,
    .modes = BFIT_MODE(BFIT_MODE_NONE),
    .init = init,
    .prepare = prepare,
    .init_params = NULL,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL,
};
