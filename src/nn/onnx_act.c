/* onnx_act.c - the activations with a parameter onto batchfit's layers:
 * LeakyRelu (nn.LeakyReLU), Elu (nn.ELU), Softplus (nn.Softplus), Selu
 * (nn.SELU), Celu (nn.CELU) and PRelu (nn.PReLU, its slopes learned), and
 * the pattern PyTorch exports nn.Softplus(beta) with beta != 1 as: Mul(x,
 * beta), Softplus, Div(beta). */
#include "base/err.h"
#include "base/text.h"
#include "nn/onnx_int.h"

/* LeakyRelu(alpha), ONNX's default 0.01; Elu(alpha), ONNX's default 1.0:
 * PyTorch's LeakyReLU(negative_slope) and ELU(alpha). */
static int with_alpha(onnx_lower *L, bfit_layer_kind kind, float dflt)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(kind);
    oval *x;
    int rc;

    if ((rc = bfit_onnx_dev_in(L, 0, &x)) != BFIT_OK || (rc = bfit_onnx_attr_float(L, "alpha", dflt, &c.alpha)))
        return rc;
    if (!(c.alpha > -1e30f && c.alpha < 1e30f))
        return bfit_onnx_refuse(L, "alpha %g: batchfit needs a finite alpha", (double)c.alpha);
    return bfit_onnx_emit(L, &c, &x, 1, NULL, 0);
}

/* Selu(alpha, gamma): the selu layer computes PyTorch's nn.SELU, whose
 * constants are ONNX's defaults (as float); torch.onnx writes neither. */
static int selu(onnx_lower *L)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_SELU);
    float al, ga;
    oval *x;
    int rc;

    if ((rc = bfit_onnx_dev_in(L, 0, &x)) != BFIT_OK ||
        (rc = bfit_onnx_attr_float(L, "alpha", BFIT_SELU_ALPHA, &al)) != BFIT_OK ||
        (rc = bfit_onnx_attr_float(L, "gamma", BFIT_SELU_SCALE, &ga)) != BFIT_OK)
        return rc;
    if (al != BFIT_SELU_ALPHA || ga != BFIT_SELU_SCALE)
        return bfit_onnx_refuse(L, "alpha %.9g, gamma %.9g: batchfit reads only nn.SELU's (ONNX's defaults, "
                                   "%.9g and %.9g)",
                                (double)al, (double)ga, (double)BFIT_SELU_ALPHA, (double)BFIT_SELU_SCALE);
    return bfit_onnx_emit(L, &c, &x, 1, NULL, 0);
}

/* Celu(alpha), default 1: nn.CELU(alpha); alpha 0 divides by 0 (PyTorch
 * refuses it too). */
static int celu(onnx_lower *L)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_CELU);
    oval *x;
    int rc;

    if ((rc = bfit_onnx_dev_in(L, 0, &x)) != BFIT_OK || (rc = bfit_onnx_attr_float(L, "alpha", 1.0f, &c.alpha)))
        return rc;
    if (!(c.alpha > -1e30f && c.alpha < 1e30f && c.alpha != 0))
        return bfit_onnx_refuse(L, "alpha %g: batchfit needs a finite, nonzero alpha", (double)c.alpha);
    return bfit_onnx_emit(L, &c, &x, 1, NULL, 0);
}

/* Softplus(x) = log(1 + e^x): ONNX's has no threshold, PyTorch's default
 * (20) computes the same in f32: above 20, log(1 + e^x) - x < 2.1e-9, under
 * half of x's last place, and sigmoid(x) rounds to 1. */
static int softplus(onnx_lower *L)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_SOFTPLUS);
    oval *x;
    int rc = bfit_onnx_dev_in(L, 0, &x);
    return rc != BFIT_OK ? rc : bfit_onnx_emit(L, &c, &x, 1, NULL, 0);
}

/* Mul(x, b) (either order), Softplus, Div(b): softplus with beta b, as
 * torch.onnx exports nn.Softplus(beta=b) (its threshold is not exported:
 * PyTorch's default, 20, is taken). 1 if the node being lowered is such a
 * Mul (rc set), 0 if not. */
static int softplus_beta(onnx_lower *L, int *rc)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_SOFTPLUS);
    int sp = bfit_onnx_next(L, L->ndi, "Softplus"), dv = sp >= 0 ? bfit_onnx_next(L, sp, "Div") : -1, k;
    const bfit_onnx_node *d = dv >= 0 ? &L->om->nodes[dv] : NULL;
    double b, b2;
    oval *x;

    if (sp < 0 || L->nd->nin != 2)
        return 0;
    for (k = 0; k < 2 && !bfit_onnx_scalar(L, L->nd->in[1 - k], &b); k++)
        ;
    if (k == 2)
        return 0;
    if (!d || d->nin != 2 || bfit_onnx_val(L, d->in[0]) != bfit_onnx_val(L, L->om->nodes[sp].out[0]) ||
        !bfit_onnx_scalar(L, d->in[1], &b2) || b2 != b) {
        *rc = bfit_onnx_refuse(L, "this Mul by %g feeds a Softplus, but the Softplus's output is not then divided "
                                  "by %g alone: batchfit reads softplus(b x) / b (nn.Softplus(beta=b)'s export)",
                               b, b);
        return 1;
    }
    if (!(b != 0 && b > -1e30 && b < 1e30)) {
        *rc = bfit_onnx_refuse(L, "softplus's beta %g: batchfit needs a finite, nonzero beta", b);
        return 1;
    }
    if ((*rc = bfit_onnx_dev_in(L, k, &x)) != BFIT_OK)
        return 1;
    c.beta = (float)b;
    if ((*rc = bfit_onnx_emit(L, &c, &x, 1, NULL, 0)) != BFIT_OK)
        return 1;
    L->done[sp] = L->done[dv] = 1;
    bfit_onnx_move_out(L, L->ndi, dv, "a part of Softplus(beta), which batchfit computes whole");
    return 1;
}

oval *bfit_onnx_param_init(onnx_lower *L, oval *s)
{
    const bfit_onnx_node *u;
    oval *src;

    if (!s || s->kind != OV_HOST)
        return NULL;
    if (s->t && s->init >= 0)
        return s;
    if (s->t || s->producer < 0)
        return NULL;
    u = &L->om->nodes[s->producer];
    if (!bfit_onnx_streq(u->op, "Unsqueeze") || u->nin < 1 || !(src = bfit_onnx_val(L, u->in[0])))
        return NULL;
    return src->kind == OV_HOST && src->t && src->init >= 0 ? src : NULL;
}

/* How many slopes ONNX's broadcast of a slope of dims d (nd of them) over
 * x gives the prelu layer: 1 for a single number, the channels for one per
 * channel (dimension 1 of an image [N,C,H,W] or vector [N,C]: d right-aligned
 * to x puts C there and 1 elsewhere); 0 for anything else. */
static int slopes_of(const oval *x, const int64_t *d, int nd)
{
    int64_t n = 1;
    int at = nd - (x->rank - 1), per_channel = bfit_shape_is_image(x->shape) && at >= 0 && nd <= x->rank;

    for (int k = 0; k < nd; k++) {
        n *= d[k];
        per_channel = per_channel && (k == at ? d[k] == x->shape.c : d[k] == 1);
    }
    return n == 1 && nd <= x->rank ? 1 : per_channel ? x->shape.c : 0;
}

/* PRelu(x, slope): the prelu layer, its slopes the file's initializer
 * (named as the module's state_dict has it, act.weight [C] or [1]). */
static int prelu(onnx_lower *L)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_PRELU);
    oval *x, *s = bfit_onnx_in(L, 1), *w = bfit_onnx_param_init(L, s);
    const int64_t *d;
    char sh[64];
    int nd, rc;

    if ((rc = bfit_onnx_dev_in(L, 0, &x)) != BFIT_OK)
        return rc;
    if (!w)
        return bfit_onnx_refuse(L, "the slope must be an initializer, or an Unsqueeze of one (nn.PReLU's export): "
                                   "batchfit learns it as the layer's weight");
    d = s->t ? s->t->dim : s->h->dim;
    nd = s->t ? s->t->ndim : s->h->nd;
    if (!(c.units = slopes_of(x, d, nd)))
        return bfit_onnx_refuse(L, "the slope's shape %s broadcasts over the input otherwise than batchfit's "
                                   "prelu: one slope, or one per channel of an image [N,C,H,W] ([C,1,1]) or of a "
                                   "vector [N,C] ([C]), as nn.PReLU(C) applies along dimension 1",
                                bfit_dims_str(d, nd, ",", sh, sizeof sh));
    return bfit_onnx_emit(L, &c, &x, 1, &w, 1);
}

int bfit_onnx_lower_act(onnx_lower *L, int *rc)
{
    const bfit_onnx_str op = L->nd->op;

    if (bfit_onnx_streq(op, "LeakyRelu"))
        *rc = with_alpha(L, BFIT_L_LEAKYRELU, 0.01f);
    else if (bfit_onnx_streq(op, "Elu"))
        *rc = with_alpha(L, BFIT_L_ELU, 1.0f);
    else if (bfit_onnx_streq(op, "Softplus"))
        *rc = softplus(L);
    else if (bfit_onnx_streq(op, "Selu"))
        *rc = selu(L);
    else if (bfit_onnx_streq(op, "Celu"))
        *rc = celu(L);
    else if (bfit_onnx_streq(op, "PRelu"))
        *rc = prelu(L);
    else if (bfit_onnx_streq(op, "Mul"))
        return softplus_beta(L, rc);
    else
        return 0;
    return 1;
}
