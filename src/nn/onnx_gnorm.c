/* onnx_gnorm.c - nn.GroupNorm(G, C) as PyTorch 1.13 exports it (opset 17):
 * Reshape of the image to [N, G, -1], InstanceNormalization with a unit
 * scale and zero bias (constants), Reshape back to the image's shape, Mul
 * by the weight and Add of the bias (initializers, unsqueezed to [C,1,1]):
 * batchfit's groupnorm layer. The four tensors between are views of the
 * image (OV_VIEW, gn[] their stage and groups); the Add emits the layer.
 * Anything else reading a view is refused there, saying what is read: a
 * GroupNorm without its affine (affine=False) among them, since batchfit's
 * layer learns its scale and shift.
 *
 * Also nn.InstanceNorm2d(C, affine=True): an InstanceNormalization of the
 * image itself with the weight and bias as initializers [C] is groupnorm
 * with C groups. */
#include "base/err.h"
#include "nn/onnx_int.h"

#include <stdint.h>

enum { G_SPLIT = 1, G_NORM, G_BACK, G_SCALED };

static const char *const WANT =
    "batchfit reads nn.GroupNorm's export: a Reshape of the image to [N, G, -1], InstanceNormalization with "
    "scale 1 and bias 0, a Reshape back, a Mul by the weight and an Add of the bias (affine=True: batchfit's "
    "groupnorm learns them)";

/* Output 0 is a view of image x at a stage. */
static oval *gview(onnx_lower *L, const oval *x, int stage, int groups, float eps)
{
    oval *o = bfit_onnx_out(L, 0);

    bfit_onnx_alias(L, x);
    o->kind = OV_VIEW;
    o->gn[0] = stage, o->gn[1] = groups;
    o->gn_eps = eps;
    return o;
}

/* Reshape of an image to [N, G, -1] (or [N, G, K]) read by an
 * InstanceNormalization: the first view. 0 where it is not one. */
static int split(onnx_lower *L, oval *x, int *rc)
{
    int64_t C = x->shape.c, K = bfit_shape_numel(x->shape), G, d[2];
    oval *o;

    if (bfit_onnx_reshape_target(L, x, d, 2) != 2 || bfit_onnx_next(L, L->ndi, "InstanceNormalization") < 0)
        return 0;
    G = d[0];
    if (G < 1 || C % G || !(d[1] == -1 || d[1] == K / G))
        return 0;
    o = gview(L, x, G_SPLIT, (int)G, 0);
    o->rank = 3;
    o->ra[0] = 1, o->rb[0] = 0, o->ra[1] = o->ra[2] = 0, o->rb[1] = G, o->rb[2] = K / G;
    *rc = BFIT_OK;
    return 1;
}

/* Input k is host floats, n of them, all v. */
static int all_are(onnx_lower *L, int k, int64_t n, double v)
{
    hval *h = bfit_onnx_in(L, k) ? bfit_onnx_host(L, bfit_onnx_in(L, k), k) : NULL;
    if (!h || !h->isf || h->n != n)
        return 0;
    for (int64_t i = 0; i < n; i++)
        if (h->f[i] != v)
            return 0;
    return 1;
}

/* The target of the Reshape being lowered is the image's own shape. */
static int back_to_image(onnx_lower *L, const oval *v)
{
    int64_t d[3];
    int nd = v->shape.nd == 1 ? 1 : 3;

    if (bfit_onnx_reshape_target(L, v, d, 3) != nd)
        return 0;
    for (int k = 0; k < nd; k++)
        if (d[k] != v->shape.d[k])
            return 0;
    return 1;
}

/* A learned per-channel parameter of image v: an initializer of C numbers
 * ([C], [C,1,1], or an Unsqueeze of [C]) as input k; NULL if not. */
static oval *per_channel(onnx_lower *L, const oval *v, int k)
{
    oval *in = bfit_onnx_in(L, k), *p = bfit_onnx_param_init(L, in);
    return p && p->t->numel == v->shape.c ? p : NULL;
}

/* The Add of the bias: the groupnorm layer on the image. */
static int emit(onnx_lower *L, oval *v)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_GROUPNORM);
    int k = bfit_onnx_in(L, 0) == v ? 1 : 0;
    oval *b = per_channel(L, v, k), *w = bfit_onnx_val(L, v->gn_w), x = *v, *par[2] = {w, b}, *in = &x;

    if (!b || !w)
        return bfit_onnx_refuse(L, "%s", WANT);
    x.kind = OV_DEVICE;
    x.gn[0] = x.gn[1] = 0;
    c.units = v->gn[1];
    c.eps = v->gn_eps;
    return bfit_onnx_emit(L, &c, &in, 1, par, 2);
}

static int staged(onnx_lower *L, oval *v)
{
    float eps = 1e-5f;
    oval *w;
    int rc;

    if (v->gn[0] == G_SPLIT && bfit_onnx_streq(L->nd->op, "InstanceNormalization") && bfit_onnx_in(L, 0) == v) {
        if ((rc = bfit_onnx_attr_float(L, "epsilon", 1e-5f, &eps)) != BFIT_OK)
            return rc;
        if (!all_are(L, 1, v->gn[1], 1) || !all_are(L, 2, v->gn[1], 0) || !(eps > 0))
            return bfit_onnx_refuse(L, "%s", WANT);
        gview(L, v, G_NORM, v->gn[1], eps);
        return BFIT_OK;
    }
    if (v->gn[0] == G_NORM && bfit_onnx_streq(L->nd->op, "Reshape") && bfit_onnx_in(L, 0) == v && back_to_image(L, v)) {
        gview(L, v, G_BACK, v->gn[1], v->gn_eps);
        bfit_onnx_set_rank(L, bfit_onnx_out(L, 0), &v->shape);
        return BFIT_OK;
    }
    if (v->gn[0] == G_BACK && bfit_onnx_streq(L->nd->op, "Mul") && (w = per_channel(L, v, bfit_onnx_in(L, 0) == v ? 1 : 0))) {
        gview(L, v, G_SCALED, v->gn[1], v->gn_eps)->gn_w = w->name;
        return BFIT_OK;
    }
    if (v->gn[0] == G_SCALED && bfit_onnx_streq(L->nd->op, "Add"))
        return emit(L, v);
    return bfit_onnx_refuse(L, "%s", WANT);
}

/* nn.InstanceNorm2d(C, affine=True): InstanceNormalization of the image
 * with its weight and bias as initializers [C]. */
static int instance_norm(onnx_lower *L, oval *x)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_GROUPNORM);
    oval *w = per_channel(L, x, 1), *b = per_channel(L, x, 2), *par[2] = {w, b};
    int rc;

    if ((rc = bfit_onnx_attr_float(L, "epsilon", 1e-5f, &c.eps)) != BFIT_OK)
        return rc;
    if (!w || !b || x->shape.nd != 3)
        return bfit_onnx_refuse(L, "batchfit reads InstanceNormalization of an image [N,C,H,W] with a learned "
                                   "scale and bias (nn.InstanceNorm2d(C, affine=True): groupnorm with C groups); "
                                   "nn.InstanceNorm2d's default affine=False has neither: use affine=True");
    c.units = x->shape.c;
    return bfit_onnx_emit(L, &c, &x, 1, par, 2);
}

int bfit_onnx_lower_gnorm(onnx_lower *L, int *rc)
{
    oval *x = bfit_onnx_in(L, 0);

    if (bfit_onnx_streq(L->nd->op, "Shape"))
        return 0;
    for (int k = 0; k < L->nd->nin; k++) {
        oval *v = bfit_onnx_in(L, k);
        if (v && v->kind == OV_VIEW && v->gn[0]) {
            *rc = staged(L, v);
            return 1;
        }
    }
    if (!x || x->kind != OV_DEVICE || !bfit_shape_is_image(x->shape) || x->cl[0] || x->pad[0] || x->pad[1])
        return 0;
    if (bfit_onnx_streq(L->nd->op, "InstanceNormalization")) {
        *rc = instance_norm(L, x);
        return 1;
    }
    return bfit_onnx_streq(L->nd->op, "Reshape") && split(L, x, rc);
}
