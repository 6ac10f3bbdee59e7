/* onnx_ops.c - the convolutional networks' operators onto batchfit's layers:
 * what torchvision's ResNets, MobileNetV2 and V3, EfficientNets and
 * DenseNets export (opset 17).
 *
 * Conv (grouped too), BatchNormalization (trained as batch norm from the
 * file's running statistics; ONNX's momentum m is PyTorch's 1 - m), Relu,
 * Clip (ReLU6), Sigmoid (and SiLU), Tanh, HardSigmoid, HardSwish, Gelu
 * (opset 20, the exact one), MaxPool,
 * AveragePool, GlobalAveragePool (and ReduceMean over H and W), Flatten,
 * Gemm (a Linear: transB=1), Add
 * of two tensors, Mul of an image by a number per channel (a
 * squeeze-and-excitation gate), Concat, Dropout (its ratio kept), Pad of
 * zeros folded into the Conv or AveragePool after it, Identity and
 * Constant. Anything these handlers do not map exactly is refused. */
#include "base/err.h"
#include "nn/onnx_int.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* kernel_shape/strides/pads of a 2-d window op: symmetric pads only. */
typedef struct win {
    int64_t k[2], s[2], p[4];
} win;

static int window(onnx_lower *L, const int64_t *wdims, win *w)
{
    int64_t dil[2] = {1, 1}, auto_pad_none = 1;
    int got, rc;
    const bfit_onnx_attr *ap = bfit_onnx_attr_get(L, "auto_pad");

    memset(w, 0, sizeof *w);
    w->s[0] = w->s[1] = 1;
    if (ap && ap->s.n && !bfit_onnx_streq(ap->s, "NOTSET"))
        auto_pad_none = 0;
    if (!auto_pad_none)
        return bfit_onnx_refuse(L, "auto_pad %.*s is not supported: export with explicit pads (PyTorch does)",
                                (int)ap->s.n, ap->s.p);
    if ((rc = bfit_onnx_attr_ints(L, "kernel_shape", w->k, 2, &got)) != BFIT_OK)
        return rc;
    if (!got && wdims)
        w->k[0] = wdims[2], w->k[1] = wdims[3];
    else if (!got)
        return bfit_onnx_refuse(L, "kernel_shape is missing");
    if ((rc = bfit_onnx_attr_ints(L, "strides", w->s, 2, &got)) != BFIT_OK ||
        (rc = bfit_onnx_attr_ints(L, "pads", w->p, 4, &got)) != BFIT_OK ||
        (rc = bfit_onnx_attr_ints(L, "dilations", dil, 2, &got)) != BFIT_OK)
        return rc;
    if (dil[0] != 1 || dil[1] != 1)
        return bfit_onnx_refuse(L, "dilations %lldx%lld are not supported (only 1x1)", (long long)dil[0],
                                (long long)dil[1]);
    if (w->p[0] != w->p[2] || w->p[1] != w->p[3])
        return bfit_onnx_refuse(L, "pads [%lld,%lld,%lld,%lld] are not symmetric: batchfit pads both sides alike",
                                (long long)w->p[0], (long long)w->p[1], (long long)w->p[2], (long long)w->p[3]);
    for (int i = 0; i < 2; i++)
        if (w->k[i] < 1 || w->k[i] > 65536 || w->s[i] < 1 || w->s[i] > 65536 || w->p[i] < 0 || w->p[i] > 65536)
            return bfit_onnx_refuse(L, "kernel %lld, stride %lld or padding %lld is out of range", (long long)w->k[i],
                                    (long long)w->s[i], (long long)w->p[i]);
    return BFIT_OK;
}

/* ceil_mode=1 (nn.MaxPool2d(ceil_mode=True)): a max pool's output rounded
 * up as PyTorch rounds it, its last windows clipped to the input. An
 * average's only where it changes no size: PyTorch divides such a window by
 * its part in the input and padding, batchfit's average by the kernel. */
static int ceil_mode(onnx_lower *L, const oval *x, const win *g, int pad[2], int max, int *ceil)
{
    int64_t c, oh, ow, fh, fw;
    int rc = bfit_onnx_attr_int(L, "ceil_mode", 0, &c);

    *ceil = 0;
    if (rc != BFIT_OK || !c)
        return rc;
    if (x->shape.h + 2 * (g->p[0] + pad[0]) < g->k[0] || x->shape.w + 2 * (g->p[1] + pad[1]) < g->k[1])
        return BFIT_OK; /* the layer says what is wrong with the window */
    oh = bfit_pool_out(x->shape.h, g->k[0], g->s[0], g->p[0] + pad[0], 1);
    ow = bfit_pool_out(x->shape.w, g->k[1], g->s[1], g->p[1] + pad[1], 1);
    fh = bfit_pool_out(x->shape.h, g->k[0], g->s[0], g->p[0] + pad[0], 0);
    fw = bfit_pool_out(x->shape.w, g->k[1], g->s[1], g->p[1] + pad[1], 0);
    *ceil = max;
    if (max || (oh == fh && ow == fw))
        return BFIT_OK;
    return bfit_onnx_refuse(L, "ceil_mode=1 makes the output %lldx%lld (floor: %lldx%lld), and PyTorch averages "
                               "those last windows over their part inside the input and padding, where batchfit "
                               "divides by the kernel: export the AvgPool2d with ceil_mode=False, or pad the input "
                               "so that its windows fit",
                            (long long)oh, (long long)ow, (long long)fh, (long long)fw);
}

/* An image input, with the pads of a Pad before it taken over when allowed. */
static int image_in(onnx_lower *L, int take_pad, oval **x, int pad[2])
{
    oval *v = bfit_onnx_in(L, 0);
    int rc;

    pad[0] = pad[1] = 0;
    if (take_pad && v && v->kind == OV_DEVICE) {
        pad[0] = v->pad[0], pad[1] = v->pad[1];
        *x = v; /* its id and shape are what the layer reads */
    } else if ((rc = bfit_onnx_dev_in(L, 0, x)) != BFIT_OK) {
        return rc;
    }
    if ((*x)->shape.nd != 3)
        return bfit_onnx_refuse(L, "the input must be an image [N,C,H,W]");
    return BFIT_OK;
}

static int conv(onnx_lower *L)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_CONV);
    oval *x, *w = bfit_onnx_in(L, 1), *b = bfit_onnx_in(L, 2), *par[2];
    int64_t group;
    int pad[2], rc;
    win g;

    if ((rc = image_in(L, 1, &x, pad)) != BFIT_OK)
        return rc;
    if (!w || w->kind != OV_HOST || !w->t || w->t->ndim != 4 || (b && (b->kind != OV_HOST || !b->t)))
        return bfit_onnx_refuse(L, "the weights (and bias) must be initializers, the weights [M, C/group, kH, kW]: "
                                   "batchfit supports 2-d convolutions of trained weights");
    if ((rc = window(L, w->t->dim, &g)) != BFIT_OK || (rc = bfit_onnx_attr_int(L, "group", 1, &group)) != BFIT_OK)
        return rc;
    if (group < 1 || group > x->shape.c)
        return bfit_onnx_refuse(L, "group %lld is out of range for %d channels", (long long)group, x->shape.c);
    c.units = (int)w->t->dim[0];
    c.kh = (int)g.k[0], c.kw = (int)g.k[1], c.sh = (int)g.s[0], c.sw = (int)g.s[1];
    c.ph = (int)g.p[0] + pad[0], c.pw = (int)g.p[1] + pad[1];
    c.bias = b != NULL;
    c.groups = (int)group;
    par[0] = w, par[1] = b;
    return bfit_onnx_emit(L, &c, &x, 1, par, 2);
}

/* ONNX momentum m: running = m * running + (1 - m) * batch; PyTorch's is 1 - m. */
static int batchnorm(onnx_lower *L)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_BATCHNORM);
    oval *x, *par[4];
    float eps, mom;
    int rc;

    if ((rc = bfit_onnx_dev_in(L, 0, &x)) != BFIT_OK || (rc = bfit_onnx_attr_float(L, "epsilon", 1e-5f, &eps)) ||
        (rc = bfit_onnx_attr_float(L, "momentum", 0.9f, &mom)))
        return rc;
    for (int k = 0; k < 4; k++) {
        par[k] = bfit_onnx_in(L, k + 1);
        if (!par[k] || par[k]->kind != OV_HOST || !par[k]->t)
            return bfit_onnx_refuse(L, "scale, bias, mean and var must be initializers");
    }
    if (!(mom >= 0 && mom <= 1))
        return bfit_onnx_refuse(L, "momentum %g is outside [0, 1]", (double)mom);
    c.eps = eps;
    c.momentum = 1.0f - mom;
    bfit_onnx_unavail(L, 1, "a running statistic output of BatchNormalization (batchfit moves the running "
                            "statistics itself)");
    return bfit_onnx_emit(L, &c, &x, 1, par, 4);
}

static int simple(onnx_lower *L, bfit_layer_kind kind)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(kind);
    oval *x;
    int rc = bfit_onnx_dev_in(L, 0, &x);
    return rc != BFIT_OK ? rc : bfit_onnx_emit(L, &c, &x, 1, NULL, 0);
}

/* Gelu (opset 20; PyTorch 2.x exports nn.GELU() as it): the exact GELU,
 * the layer the opset-17 erf pattern becomes, or with approximate="tanh"
 * the tanh form (`gelu tanh=1`, what onnx_gelu.c reads its opset-17
 * chain as). */
static int gelu(onnx_lower *L)
{
    const bfit_onnx_attr *ap = bfit_onnx_attr_get(L, "approximate");
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_GELU);
    oval *x;
    int rc;

    if (L->om->opset && L->om->opset < 20)
        return bfit_onnx_refuse(L, "Gelu is a standard operator from opset 20 on, and the model imports opset %lld: "
                                   "export with opset_version=20, or at opset 17 (nn.GELU() is then Div, Erf, Add, "
                                   "Mul, Mul, which batchfit reads as GELU too)", (long long)L->om->opset);
    if (ap && !bfit_onnx_streq(ap->s, "none") && !bfit_onnx_streq(ap->s, "tanh"))
        return bfit_onnx_refuse(L, "approximate='%.*s' is not a GELU ONNX defines ('none', the exact one, or "
                                   "'tanh')", (int)ap->s.n, ap->s.p);
    c.tanh = ap && bfit_onnx_streq(ap->s, "tanh");
    return (rc = bfit_onnx_dev_in(L, 0, &x)) != BFIT_OK ? rc : bfit_onnx_emit(L, &c, &x, 1, NULL, 0);
}

/* Sigmoid, or with a Mul of its input by it, SiLU (nn.SiLU's export). */
static int sigmoid(onnx_lower *L)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_SIGMOID);
    int mul = bfit_onnx_next(L, L->ndi, "Mul"), rc;
    const bfit_onnx_node *m = mul >= 0 ? &L->om->nodes[mul] : NULL;
    oval *x, *a;

    if ((rc = bfit_onnx_dev_in(L, 0, &x)) != BFIT_OK)
        return rc;
    if (m && m->nin == 2 && (a = bfit_onnx_val(L, m->in[0])) != NULL &&
        bfit_onnx_val(L, m->in[a->producer == L->ndi]) == x) {
        c = bfit_layer_cfg_default(BFIT_L_SILU);
        if ((rc = bfit_onnx_emit(L, &c, &x, 1, NULL, 0)) != BFIT_OK)
            return rc;
        L->done[mul] = 1;
        bfit_onnx_move_out(L, L->ndi, mul, "a part of SiLU, which batchfit computes whole");
        return BFIT_OK;
    }
    return bfit_onnx_emit(L, &c, &x, 1, NULL, 0);
}

/* Clip(x, min, max): bounds from constant inputs (opset 11+) or attributes. */
static int clip(onnx_lower *L)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_CLIP);
    float lo = -FLT_MAX, hi = FLT_MAX, v;
    oval *x;
    int n, rc;

    if ((rc = bfit_onnx_dev_in(L, 0, &x)) != BFIT_OK || (rc = bfit_onnx_attr_float(L, "min", lo, &lo)) ||
        (rc = bfit_onnx_attr_float(L, "max", hi, &hi)))
        return rc;
    if (bfit_onnx_in(L, 1)) {
        if ((rc = bfit_onnx_host_f32(L, 1, &v, 1, &n)) != BFIT_OK)
            return rc;
        lo = n ? v : lo;
    }
    if (bfit_onnx_in(L, 2)) {
        if ((rc = bfit_onnx_host_f32(L, 2, &v, 1, &n)) != BFIT_OK)
            return rc;
        hi = n ? v : hi;
    }
    if (!(lo < hi))
        return bfit_onnx_refuse(L, "the bounds [%g, %g] are empty", (double)lo, (double)hi);
    if (lo == 0 && hi >= FLT_MAX)
        return simple(L, BFIT_L_RELU);
    c.lo = lo;
    c.hi = hi;
    return bfit_onnx_emit(L, &c, &x, 1, NULL, 0);
}

/* HardSigmoid(alpha, beta): ONNX's defaults are 0.2 and 0.5, PyTorch
 * exports 1/6 and 0.5; HardSwish has PyTorch's fixed 1/6 and 0.5. */
static int hardsigmoid(onnx_lower *L)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_HARDSIGMOID);
    oval *x;
    int rc;

    if ((rc = bfit_onnx_dev_in(L, 0, &x)) != BFIT_OK || (rc = bfit_onnx_attr_float(L, "alpha", 0.2f, &c.alpha)) ||
        (rc = bfit_onnx_attr_float(L, "beta", 0.5f, &c.beta)))
        return rc;
    if (!(c.alpha > 0))
        return bfit_onnx_refuse(L, "alpha %g: batchfit's hardsigmoid rises (alpha > 0)", (double)c.alpha);
    return bfit_onnx_emit(L, &c, &x, 1, NULL, 0);
}

/* Mul of tokens [N,T,C] (a channels-last image [N,H,W,C] among them) or a
 * vector [N,C] by a learned [C] (or [1,C], [1,1,C], ...: its last
 * dimension C, the others 1): the layerscale layer, one scale per feature
 * (timm's LayerScale, the original ConvNeXt's gamma), the initializer its
 * weight; of anything by one learned number, the layerscale of one scale. */
static int token_scale(onnx_lower *L, oval *x, oval *g)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_LAYERSCALE);
    const bfit_onnx_tensor *t = g->t;
    oval *par[1] = {g};
    int ok = x->shape.nd == 1 || x->shape.nd == 2, C = x->shape.nd == 2 ? x->shape.d[1] : x->shape.c;

    if (t->numel == 1 && t->ndim <= x->rank) { /* one learned number for all: ReZero's alpha, SAGAN's gamma */
        c.units = 1;
        return bfit_onnx_emit(L, &c, &x, 1, par, 1);
    }
    for (int d = 0; ok && d + 1 < t->ndim; d++)
        ok = t->dim[d] == 1;
    if (!ok || t->ndim < 1 || t->ndim > x->rank || t->dim[t->ndim - 1] != C)
        return bfit_onnx_refuse(L, "a Mul by a learned tensor is read as a layer scale: tokens [N,T,C] or a "
                                   "vector [N,C] times [C] (timm's LayerScale), or an image [N,C,H,W] times "
                                   "[C,1,1] (torchvision's ConvNeXt); this is not one");
    c.units = C;
    return bfit_onnx_emit(L, &c, &x, 1, par, 1);
}

/* An image times a learned [C,1,1] or [1,C,1,1] (torchvision's ConvNeXt's
 * layer scale): the layerscale layer, the initializer its weight (its C
 * numbers in the same order; files keep the initializer's shape). Until
 * 2026-12-05 a depthwise 1x1 convolution: the same gradients, but three
 * oneDNN primitives where one elementwise op serves, 9% more activation
 * bytes a sample in ConvNeXt-T's plan, and weight decay, which timm and the
 * original ConvNeXt leave off such scales; tokens and vectors go to
 * token_scale. */
static int layer_scale(onnx_lower *L, oval *g)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_LAYERSCALE);
    const bfit_onnx_tensor *t = g->t;
    oval *x, *par[1] = {g};
    int rc = bfit_onnx_dev_in(L, bfit_onnx_in(L, 0) == g ? 1 : 0, &x);

    if (rc != BFIT_OK)
        return rc;
    if (!bfit_shape_is_image(x->shape) || bfit_shape_is_vector(x->shape) || x->cl[0] || t->numel == 1)
        return token_scale(L, x, g);
    if (t->numel != x->shape.c || t->ndim < 3 || t->dim[t->ndim - 1] != 1 || t->dim[t->ndim - 2] != 1 ||
        (t->ndim == 4 && t->dim[0] != 1) || t->ndim > 4)
        return bfit_onnx_refuse(L, "a Mul by a learned tensor is read as a layer scale: an image [N,C,H,W] times "
                                   "[C,1,1] or [1,C,1,1] (ConvNeXt's); this is not one");
    c.units = x->shape.c;
    return bfit_onnx_emit(L, &c, &x, 1, par, 1);
}

/* Mul of an image [N,C,H,W] by [N,C,1,1] (either order): each channel by
 * its gate, as a squeeze-and-excitation block ends; of two [N,C] (a gated
 * vector), the same with H = W = 1. Both of one rank: ONNX broadcasts
 * [N,C] against [N,C,1,1] to something else. */
static int mul(onnx_lower *L)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_SCALE);
    oval *x[2], *t;
    int rc, end = bfit_onnx_gelu_tanh_end(L);
    char nm[128];

    if (end >= 0) /* else x * x is read as a product and a constant's Mul further on is blamed */
        return bfit_onnx_refuse(L, "this Mul starts the nodes of GELU's tanh approximation (ending at node '%s') "
                                   "but they do not compute it: batchfit reads 0.5 x (1 + tanh(sqrt(2/pi) (x + "
                                   "0.044715 x^3))) (nn.GELU(approximate='tanh')) and the exact GELU",
                                bfit_onnx_cstr(L->om->nodes[end].name, nm, sizeof nm));
    for (int k = 0; k < 2; k++)
        if ((t = bfit_onnx_in(L, k)) && t->kind == OV_HOST && t->t && t->init >= 0)
            return layer_scale(L, t);
    if ((rc = bfit_onnx_dev_in(L, 0, &x[0])) != BFIT_OK || (rc = bfit_onnx_dev_in(L, 1, &x[1])) != BFIT_OK)
        return rc;
    if (bfit_shape_is_vector(x[0]->shape) && !bfit_shape_is_vector(x[1]->shape))
        t = x[0], x[0] = x[1], x[1] = t; /* the gate second */
    if (x[0]->rank != x[1]->rank || !bfit_shape_is_image(x[0]->shape) || !bfit_shape_is_vector(x[1]->shape) ||
        bfit_shape_numel(x[1]->shape) != x[0]->shape.c)
        return bfit_onnx_refuse(L, "only an image [N,C,H,W] times [N,C,1,1] (a gate per channel, as "
                                   "squeeze-and-excitation's), or two different tensors of one shape, is supported");
    return bfit_onnx_emit(L, &c, x, 2, NULL, 0);
}

/* The mean over an image's H and W: `gap` (a vector) where the result is
 * [N,C] (keep 0) or only Flatten reads it (a classifier head), else an
 * average over the whole image, Cx1x1, as ONNX keeps it (a
 * squeeze-and-excitation block's 1x1 convolutions read it). */
static int whole_mean(onnx_lower *L, int keep)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_AVGPOOL);
    oval *o = bfit_onnx_out(L, 0), *x;
    int cons[8], n = bfit_onnx_consumers(L, L->ndi, 0, cons, 8), flat = n >= 0, rc;

    if ((rc = bfit_onnx_dev_in(L, 0, &x)) != BFIT_OK)
        return rc;
    if (!bfit_shape_is_image(x->shape)) /* what the gap layer takes, as before */
        return bfit_onnx_refuse(L, "the input must be an image [N,C,H,W]");
    for (int i = 0; i < n && flat; i++)
        flat = bfit_onnx_streq(L->om->nodes[cons[i]].op, "Flatten");
    if (!keep || flat) {
        if ((rc = simple(L, BFIT_L_GAP)) == BFIT_OK && keep) /* ONNX keeps [N, C, 1, 1] */
            o->rank = 4, o->ra[2] = o->ra[3] = 0, o->rb[2] = o->rb[3] = 1;
        return rc;
    }
    c.kh = c.sh = x->shape.h;
    c.kw = c.sw = x->shape.w;
    return bfit_onnx_emit(L, &c, &x, 1, NULL, 0);
}

static int global_pool(onnx_lower *L) { return whole_mean(L, 1); }

/* ReduceMean over H and W (x.mean((2, 3)), a hand-written
 * squeeze-and-excitation's squeeze): the axes an attribute (opset < 18)
 * or a constant input. */
/* The mean over the tokens of [N,T,C] (x.mean(dim=1): a ViT's average
 * pool, Swin's head), or over a channels-last image's H and W: the tokens
 * transposed to an image [C, T, 1], then `gap`, two layers batchfit has; in
 * a model of token ids `gap` on the tokens, the mean of the real ones. */
static int token_mean(onnx_lower *L, oval *x, const int64_t *ax, int n, int64_t keep)
{
    bfit_layer_cfg tr = bfit_layer_cfg_default(BFIT_L_TRANSPOSE), gap = bfit_layer_cfg_default(BFIT_L_GAP);
    int T = x->shape.d[0], C = x->shape.d[1], rc, ok;
    oval *o = bfit_onnx_out(L, 0), v;

    if (x->cl[0]) /* [N,H,W,C]: axes 1 and 2 */
        ok = n == 2 && ((ax[0] == 1 || ax[0] == -3) + (ax[1] == 1 || ax[1] == -3) == 1) &&
             ((ax[0] == 2 || ax[0] == -2) + (ax[1] == 2 || ax[1] == -2) == 1);
    else
        ok = n == 1 && (ax[0] == 1 || ax[0] == -2);
    if (!ok || keep)
        return bfit_onnx_refuse(L, "batchfit averages tokens [N,T,C] over T (axis 1, keepdims 0: x.mean(dim=1)), "
                                   "a channels-last image [N,H,W,C] over H and W, and an image [N,C,H,W] over H "
                                   "and W; not this");
    /* a model of token ids: the mean of each sequence's real tokens, its padding left out (batchfit pads
       and masks sequences itself, as it masks the padding's keys of an attention) */
    if (L->g->input_dtype == BFIT_I32 && !x->cl[0])
        return bfit_onnx_emit(L, &gap, &x, 1, NULL, 0);
    tr.to = bfit_shape_chw(C, T, 1);
    if ((rc = bfit_onnx_emit(L, &tr, &x, 1, NULL, 0)) != BFIT_OK)
        return rc;
    v = *o;
    x = &v;
    return bfit_onnx_emit(L, &gap, &x, 1, NULL, 0);
}

static int reduce_mean(onnx_lower *L)
{
    int64_t ax[BFIT_ONNX_MAXATTR], keep;
    int n = 0, got = 0, rc, h = 0, w = 0;
    oval *x = bfit_onnx_in(L, 0);

    if ((rc = bfit_onnx_attr_int(L, "keepdims", 1, &keep)) != BFIT_OK ||
        (rc = bfit_onnx_attr_ints(L, "axes", ax, 0, &got)) != BFIT_OK)
        return rc;
    if (!got && bfit_onnx_in(L, 1) && (rc = bfit_onnx_host_i64(L, 1, ax, 8, &got)) != BFIT_OK)
        return rc;
    if (x && x->kind == OV_DEVICE && x->shape.nd == 2)
        return token_mean(L, x, ax, got, keep);
    for (int i = 0; i < got; i++, n++)
        h += ax[i] == 2 || ax[i] == -2, w += ax[i] == 3 || ax[i] == -1;
    if (n != 2 || h != 1 || w != 1)
        return bfit_onnx_refuse(L, "only the mean over H and W of an image [N,C,H,W] (axes 2 and 3), or over the "
                                   "tokens of [N,T,C] (axis 1), is supported");
    return whole_mean(L, keep != 0);
}

static int pool(onnx_lower *L, int max)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(max ? BFIT_L_MAXPOOL : BFIT_L_AVGPOOL);
    int64_t cip = 0, order = 0;
    oval *x;
    int pad[2], rc;
    win g;

    /* a max pool pads with -inf, not the zeros a Pad gives: only average pooling takes a Pad over */
    if ((rc = image_in(L, !max, &x, pad)) != BFIT_OK || (rc = window(L, NULL, &g)) != BFIT_OK ||
        (rc = ceil_mode(L, x, &g, pad, max, &c.ceil)) != BFIT_OK ||
        (rc = bfit_onnx_attr_int(L, "count_include_pad", 0, &cip)) ||
        (rc = bfit_onnx_attr_int(L, "storage_order", 0, &order)))
        return rc;
    /* batchfit's average pooling counts the padding, as PyTorch's default */
    if (!max && !cip && (g.p[0] || g.p[1]))
        return bfit_onnx_refuse(L, "count_include_pad=0 with padding is not supported (batchfit's average counts "
                                   "the padding, as nn.AvgPool2d's default)");
    if (order)
        return bfit_onnx_refuse(L, "storage_order=1 is not supported");
    c.kh = (int)g.k[0], c.kw = (int)g.k[1], c.sh = (int)g.s[0], c.sw = (int)g.s[1];
    c.ph = (int)g.p[0] + pad[0], c.pw = (int)g.p[1] + pad[1];
    bfit_onnx_unavail(L, 1, "the indices output of MaxPool");
    return bfit_onnx_emit(L, &c, &x, 1, NULL, 0);
}

/* Flatten(axis 1): a copy into a vector, or nothing for what is one already. */
static int flatten(onnx_lower *L)
{
    int64_t axis;
    oval *x;
    int rc;

    if ((rc = bfit_onnx_dev_in(L, 0, &x)) != BFIT_OK || (rc = bfit_onnx_attr_int(L, "axis", 1, &axis)) != BFIT_OK)
        return rc;
    if (axis != 1 && axis != -x->shape.nd)
        return bfit_onnx_refuse(L, "axis %lld is not supported: only Flatten(axis=1), which keeps the batch",
                                (long long)axis);
    if (bfit_shape_is_vector(x->shape)) {
        oval *o = bfit_onnx_out(L, 0);
        bfit_onnx_alias(L, x);
        o->shape = bfit_shape_vec((int)bfit_shape_numel(x->shape));
        bfit_onnx_set_rank(L, o, &o->shape);
        return BFIT_OK;
    }
    return simple(L, BFIT_L_FLATTEN);
}

/* Gemm(A, B, C) = A B^T + C: nn.Linear's export (transB=1, alpha = beta =
 * 1); or A B + C, B [in, out] (transB=0: transformers' Conv1D, torch.addmm
 * on tokens flattened into rows, which stay rows). */
static int gemm(onnx_lower *L)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_LINEAR);
    oval *x, *w = bfit_onnx_in(L, 1), *b = bfit_onnx_in(L, 2), *par[2], *o;
    int64_t ta, tb;
    float alpha, beta;
    int rc;

    if ((rc = bfit_onnx_dev_in(L, 0, &x)) != BFIT_OK || (rc = bfit_onnx_attr_int(L, "transA", 0, &ta)) ||
        (rc = bfit_onnx_attr_int(L, "transB", 0, &tb)) || (rc = bfit_onnx_attr_float(L, "alpha", 1, &alpha)) ||
        (rc = bfit_onnx_attr_float(L, "beta", 1, &beta)))
        return rc;
    if (ta || alpha != 1 || beta != 1)
        return bfit_onnx_refuse(L, "only A B^T + C and A B + C (transA=0, alpha=beta=1: nn.Linear's export, "
                                   "transformers' Conv1D) are supported, this is transA=%lld transB=%lld alpha=%g "
                                   "beta=%g", (long long)ta, (long long)tb, (double)alpha, (double)beta);
    if (!w || w->kind != OV_HOST || !w->t || w->t->ndim != 2 || (b && (b->kind != OV_HOST || !b->t)))
        return bfit_onnx_refuse(L, "B (and C) must be initializers, B [out, in] (transB=1) or [in, out]");
    if (b && b->t->ndim != 1)
        return bfit_onnx_refuse(L, "C must be a vector [out] (a bias)");
    c.units = (int)w->t->dim[tb ? 0 : 1];
    c.wt = !tb;
    c.bias = b != NULL;
    par[0] = w, par[1] = b;
    if ((rc = bfit_onnx_emit(L, &c, &x, 1, par, 2)) != BFIT_OK || !x->rows)
        return rc;
    o = bfit_onnx_out(L, 0); /* rows in, rows out: [N*T, out] */
    bfit_onnx_set_dims(o, 2, (int64_t[]){0, c.units});
    o->ra[0] = x->ra[0], o->rows = 1;
    return BFIT_OK;
}

static int add(onnx_lower *L)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_ADD);
    oval *x[2];
    int rc;
    if ((rc = bfit_onnx_dev_in(L, 0, &x[0])) != BFIT_OK || (rc = bfit_onnx_dev_in(L, 1, &x[1])) != BFIT_OK)
        return rc;
    if (!bfit_shape_eq(x[0]->shape, x[1]->shape))
        return bfit_onnx_refuse(L, "only the sum of two tensors of one shape is supported (no broadcasting)");
    return bfit_onnx_emit(L, &c, x, 2, NULL, 0);
}

/* Concat along a dimension after the batch. */
static int concat(onnx_lower *L)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_CONCAT);
    oval *x[BFIT_LAYER_MAXIN];
    int64_t axis;
    int rc;

    if ((rc = bfit_onnx_attr_int(L, "axis", 0, &axis)) != BFIT_OK)
        return rc;
    if (L->nd->nin < 1 || L->nd->nin > BFIT_LAYER_MAXIN)
        return bfit_onnx_refuse(L, "%d inputs: batchfit concatenates 1 to %d", L->nd->nin, BFIT_LAYER_MAXIN);
    for (int k = 0; k < L->nd->nin; k++)
        if ((rc = bfit_onnx_dev_in(L, k, &x[k])) != BFIT_OK)
            return rc;
    if (axis < 0)
        axis += x[0]->shape.nd + 1;
    if (axis < 1 || axis > x[0]->shape.nd)
        return bfit_onnx_refuse(L, "axis %lld: batchfit concatenates along a dimension after the batch",
                                (long long)axis);
    if (L->nd->nin == 1) {
        bfit_onnx_alias(L, x[0]);
        return BFIT_OK;
    }
    c.axis = (int)axis - 1;
    return bfit_onnx_emit(L, &c, x, L->nd->nin, NULL, 0);
}

/* A Pad's pads and value: attributes up to opset 10 (one input), inputs
 * pads and constant_value from opset 11. */
static int pad_args(onnx_lower *L, int64_t *p, int *n, float *value)
{
    int nv = 0, rc;

    *n = 0, *value = 0;
    if (bfit_onnx_attr_get(L, "pads")) {
        if (L->nd->nin > 1)
            return bfit_onnx_refuse(L, "pads given both as an attribute (opsets 7 to 10) and as an input (opset 11 "
                                       "and later)");
        if ((rc = bfit_onnx_attr_ints(L, "pads", p, 0, n)) != BFIT_OK)
            return rc;
        return bfit_onnx_attr_float(L, "value", 0, value);
    }
    if (!bfit_onnx_in(L, 1))
        return bfit_onnx_refuse(L, "the pads are missing: neither a pads attribute (opsets 7 to 10) nor a pads "
                                   "input (opset 11 and later)");
    if (bfit_onnx_in(L, 3))
        return bfit_onnx_refuse(L, "the axes input (opset 18 on: pads for the listed axes only) is not supported: "
                                   "give the pads of every dimension, without axes");
    if ((rc = bfit_onnx_host_i64(L, 1, p, BFIT_ONNX_MAXATTR, n)) != BFIT_OK)
        return rc;
    return bfit_onnx_in(L, 2) ? bfit_onnx_host_f32(L, 2, value, 1, &nv) : BFIT_OK;
}

/* Pad(x, pads) with zeros on H and W alike on both sides: nothing, or pads
 * taken over by the Conv or AveragePool that reads it. */
static int pad(onnx_lower *L)
{
    const bfit_onnx_attr *mode = bfit_onnx_attr_get(L, "mode");
    int64_t p[BFIT_ONNX_MAXATTR];
    float value = 0;
    oval *x, *o;
    int n = 0, rc;

    if ((rc = bfit_onnx_dev_in(L, 0, &x)) != BFIT_OK)
        return rc;
    if (mode && mode->s.n && !bfit_onnx_streq(mode->s, "constant"))
        return bfit_onnx_refuse(L, "mode %.*s is not supported: batchfit pads with zeros only (mode constant, value "
                                   "0: nn.ZeroPad2d, F.pad, a Conv's zero padding), folded into the Conv or "
                                   "AveragePool after the Pad", (int)mode->s.n, mode->s.p);
    if ((rc = pad_args(L, p, &n, &value)) != BFIT_OK)
        return rc;
    if (x->shape.nd != 3 || value != 0 || n != 8)
        return bfit_onnx_refuse(L, "only zero padding of an image [N,C,H,W] is supported (pads of 8 values, the "
                                   "value 0), not %d pads of value %g", n, (double)value);
    if (p[0] || p[1] || p[4] || p[5] || p[2] != p[6] || p[3] != p[7] || p[2] < 0 || p[3] < 0 || p[2] > 65536 ||
        p[3] > 65536)
        return bfit_onnx_refuse(L, "pads [%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld] pad H by %lld above and %lld "
                                   "below, W by %lld left and %lld right: batchfit folds only zero padding of H and "
                                   "W, the same on both sides and not negative (nn.ZeroPad2d(p), F.pad(x, (w, w, h, "
                                   "h))), into the Conv or AveragePool after it",
                                (long long)p[0], (long long)p[1], (long long)p[2], (long long)p[3], (long long)p[4],
                                (long long)p[5], (long long)p[6], (long long)p[7], (long long)p[2], (long long)p[6],
                                (long long)p[3], (long long)p[7]);
    bfit_onnx_alias(L, x);
    o = bfit_onnx_out(L, 0);
    o->pad[0] = (int)p[2];
    o->pad[1] = (int)p[3];
    return BFIT_OK;
}

static int dropout(onnx_lower *L)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_DROPOUT);
    float ratio = 0.5f;
    oval *x;
    int n, rc;

    if ((rc = bfit_onnx_dev_in(L, 0, &x)) != BFIT_OK || (rc = bfit_onnx_attr_float(L, "ratio", ratio, &ratio)))
        return rc;
    if (bfit_onnx_in(L, 1) && (rc = bfit_onnx_host_f32(L, 1, &ratio, 1, &n)) != BFIT_OK)
        return rc;
    /* training_mode (input 2) says how the export ran; batchfit trains with the ratio either way */
    bfit_onnx_unavail(L, 1, "the mask output of Dropout");
    if (!(ratio >= 0 && ratio < 1))
        return bfit_onnx_refuse(L, "ratio %g is outside [0, 1)", (double)ratio);
    if (ratio == 0) {
        bfit_onnx_alias(L, x);
        return BFIT_OK;
    }
    c.p = ratio;
    return bfit_onnx_emit(L, &c, &x, 1, NULL, 0);
}

/* A Constant's value tensor (value_float(s)/value_int(s) are not read). */
static int constant(onnx_lower *L)
{
    const bfit_onnx_attr *a = bfit_onnx_attr_get(L, "value");
    oval *o = bfit_onnx_out(L, 0);
    if (!a || a->type != BFIT_ONNX_A_TENSOR || !a->t)
        return bfit_onnx_refuse(L, "only a Constant with a tensor `value` is supported");
    o->kind = OV_HOST;
    o->t = a->t;
    o->init = -1;
    return BFIT_OK;
}

static int identity(onnx_lower *L)
{
    oval *x = bfit_onnx_in(L, 0);
    if (!x)
        return bfit_onnx_refuse(L, "the input is missing");
    bfit_onnx_alias(L, x); /* a pending Pad goes along */
    return BFIT_OK;
}

int bfit_onnx_lower_cnn(onnx_lower *L, int *rc)
{
    static const struct {
        const char *op;
        int (*fn)(onnx_lower *L);
    } ops[] = {{"Conv", conv},       {"BatchNormalization", batchnorm}, {"Clip", clip},
               {"Gemm", gemm},       {"Flatten", flatten},             {"Add", add},
               {"Concat", concat},   {"Pad", pad},                     {"Dropout", dropout},
               {"Constant", constant}, {"Identity", identity}, {"Sigmoid", sigmoid},
               {"HardSigmoid", hardsigmoid}, {"Mul", mul}, {"GlobalAveragePool", global_pool},
               {"ReduceMean", reduce_mean}, {"Gelu", gelu}};

    for (unsigned i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (bfit_onnx_streq(L->nd->op, ops[i].op)) {
            *rc = ops[i].fn(L);
            return 1;
        }
    if (bfit_onnx_streq(L->nd->op, "Relu")) {
        *rc = simple(L, BFIT_L_RELU);
    } else if (bfit_onnx_streq(L->nd->op, "Tanh")) {
        *rc = simple(L, BFIT_L_TANH);
    } else if (bfit_onnx_streq(L->nd->op, "HardSwish")) {
        *rc = simple(L, BFIT_L_HARDSWISH);
    } else if (bfit_onnx_streq(L->nd->op, "MaxPool") || bfit_onnx_streq(L->nd->op, "AveragePool"))
        *rc = pool(L, bfit_onnx_streq(L->nd->op, "MaxPool"));
    else
        return 0;
    return 1;
}
