/* onnx_shuffle.c - ShuffleNet's channel operations, as torchvision's
 * ShuffleNetV2 exports them (opset 17, a dynamic batch):
 *
 * - x.chunk(2, dim=1): a Slice of an image along the channels, its starts
 *   and ends computed on the host from the shape: `select` of that range;
 * - the channel shuffle, x.view(N, g, C/g, H, W).transpose(1, 2)
 *   .contiguous().view(N, C, H, W): Reshape to 5 dimensions, Transpose
 *   [0, 2, 1, 3, 4], Reshape back. No layer takes 5 dimensions, so the first
 *   two become views (OV_VIEW: the image's value and shape, and the groups)
 *   and the Reshape back is one `transpose` of the channels in g groups.
 *   A view read by anything else is refused there. */
#include "base/err.h"
#include "nn/onnx_int.h"

#include <stdint.h>

/* The Slice's one integer of input k (not depending on the batch), or def
 * where the input is left out. */
static int slice_arg(onnx_lower *L, int k, int64_t def, int64_t *out)
{
    oval *v = bfit_onnx_in(L, k);
    hval *h;
    if (!v) {
        *out = def;
        return BFIT_OK;
    }
    if (!(h = bfit_onnx_host(L, v, k)))
        return BFIT_EINVAL;
    if (h->isf || h->n != 1 || h->a[0])
        return bfit_onnx_refuse(L, "input %d must be one integer that does not depend on the batch", k + 1);
    *out = h->b[0];
    return BFIT_OK;
}

/* Slice(x, starts, ends, axes, steps) of an image along its channels. */
static int chunk(onnx_lower *L, oval *x)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_SELECT);
    int64_t s = 0, e = 0, axis = 0, step = 1, C = x->shape.c;
    int rc;

    if ((rc = slice_arg(L, 1, 0, &s)) != BFIT_OK || (rc = slice_arg(L, 2, 0, &e)) != BFIT_OK ||
        (rc = slice_arg(L, 3, 0, &axis)) != BFIT_OK || (rc = slice_arg(L, 4, 1, &step)) != BFIT_OK)
        return rc;
    if (!bfit_shape_is_image(x->shape) || x->cl[0] || (axis != 1 && axis != -3) || step != 1)
        return bfit_onnx_refuse(L, "batchfit slices an image [N,C,H,W] along its channels (axis 1, step 1: "
                                   "x.chunk(k, dim=1), x[:, a:b]), not this");
    s = s < 0 ? s + C : s, e = e < 0 ? e + C : e; /* ONNX: negative from the end, then clamped */
    s = s < 0 ? 0 : s > C ? C : s, e = e < 0 ? 0 : e > C ? C : e;
    if (e <= s)
        return bfit_onnx_refuse(L, "the slice [%lld, %lld) of %lld channels is empty", (long long)s, (long long)e,
                                (long long)C);
    if (s == 0 && e == C) {
        bfit_onnx_alias(L, x);
        return BFIT_OK;
    }
    c.units = (int)s;
    c.to = bfit_shape_chw((int)(e - s), x->shape.h, x->shape.w);
    return bfit_onnx_emit(L, &c, &x, 1, NULL, 0);
}

/* Output 0 is a view of image x as ONNX's [N, d1, d2, H, W]. */
static void view(onnx_lower *L, const oval *x, int groups, int swapped, int64_t d1, int64_t d2)
{
    oval *o = bfit_onnx_out(L, 0);
    bfit_onnx_alias(L, x);
    o->kind = OV_VIEW;
    o->shuf[0] = groups, o->shuf[1] = swapped;
    o->rank = 5;
    o->ra[0] = 1, o->rb[0] = 0;
    o->ra[1] = o->ra[2] = o->ra[3] = o->ra[4] = 0;
    o->rb[1] = d1, o->rb[2] = d2, o->rb[3] = x->shape.h, o->rb[4] = x->shape.w;
}

/* Reshape of image x to [N, g, C/g, H, W]: the shuffle's first view. */
static int split_groups(onnx_lower *L, oval *x)
{
    int64_t d[4], C = x->shape.c;
    if (bfit_onnx_reshape_target(L, x, d, 4) != 4 || d[2] != x->shape.h || d[3] != x->shape.w || x->cl[0])
        return 0;
    if (d[0] == -1 && d[1] > 0 && C % d[1] == 0)
        d[0] = C / d[1];
    if (d[1] == -1 && d[0] > 0 && C % d[0] == 0)
        d[1] = C / d[0];
    if (d[0] < 1 || d[1] < 1 || d[0] > C || C % d[0] || d[1] != C / d[0]) /* no product that overflows */
        return 0;
    view(L, x, (int)d[0], 0, d[0], d[1]);
    return 1;
}

/* Transpose [0, 2, 1, 3, 4] of the first view, then the Reshape back to
 * [N, C, H, W] of the second: the shuffle. */
static int shuffle(onnx_lower *L, oval *x)
{
    const char *want = "a channel shuffle: the 5-d view [N, g, C/g, H, W] of an image transposed by perm "
                       "[0, 2, 1, 3, 4], then reshaped to [N, C, H, W] (ShuffleNet's)";
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_TRANSPOSE);
    int64_t perm[BFIT_ONNX_MAXATTR], d[4];
    int np, rc;
    oval img;

    if (bfit_onnx_streq(L->nd->op, "Transpose")) {
        if ((rc = bfit_onnx_attr_ints(L, "perm", perm, 0, &np)) != BFIT_OK)
            return rc;
        if (x->shuf[1] || np != 5 || perm[0] != 0 || perm[1] != 2 || perm[2] != 1 || perm[3] != 3 || perm[4] != 4)
            return bfit_onnx_refuse(L, "batchfit reads a 5-d view only as %s", want);
        view(L, x, x->shuf[0], 1, x->rb[2], x->rb[1]);
        return BFIT_OK;
    }
    if (!bfit_onnx_streq(L->nd->op, "Reshape") || !x->shuf[1] || bfit_onnx_reshape_target(L, x, d, 4) != 3 ||
        !((d[0] == x->shape.c || d[0] == -1) && d[1] == x->shape.h && d[2] == x->shape.w))
        return bfit_onnx_refuse(L, "batchfit reads a 5-d view only as %s", want);
    img = *x;
    img.kind = OV_DEVICE;
    c.groups = x->shuf[0];
    return bfit_onnx_emit(L, &c, (oval *const[]){&img}, 1, NULL, 0);
}

int bfit_onnx_lower_shuffle(onnx_lower *L, int *rc)
{
    oval *x = bfit_onnx_in(L, 0);
    int dev = x && x->kind == OV_DEVICE && !x->pad[0] && !x->pad[1];

    if (x && x->kind == OV_VIEW && x->shuf[0])
        *rc = shuffle(L, x);
    else if (bfit_onnx_streq(L->nd->op, "Slice") && dev)
        *rc = chunk(L, x);
    else if (bfit_onnx_streq(L->nd->op, "Reshape") && dev && bfit_shape_is_image(x->shape) && split_groups(L, x))
        *rc = BFIT_OK;
    else
        return 0;
    return 1;
}
