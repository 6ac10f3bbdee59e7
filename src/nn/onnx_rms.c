/* onnx_rms.c - LLaMA's block as PyTorch users write it: RMSNorm by hand,
 * SwiGLU's product of two branches, and the casts around them.
 *
 * - RMSNorm, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w,
 *   exports (opset 17) as Pow(x, 2) (or Mul(x, x)) -> ReduceMean over the
 *   last axis, kept -> Add eps -> Sqrt -> Reciprocal or Div(1, .) -> Mul by
 *   x (or Div(x, sqrt) at once) -> Cast back (.type_as(x)) -> Mul by the
 *   weight [C] (either order): one `rmsnorm` layer, emitted at the Pow. The
 *   opset-23 RMSNormalization over the last axis is the same layer. Gemma's
 *   RMSNorm multiplies by (1.0 + weight.float()) (Cast, Add of 1): the
 *   layer's `offset`, the weight the file's (starting at 0).
 * - A Mul of two computed tensors of one shape is `mul` (SwiGLU's
 *   silu(x W1) * (x W3); the SiLU itself is the Sigmoid's, onnx_ops.c).
 * - Cast of a float tensor to float (x.float(), .type_as(x) in f32) is the
 *   tensor itself; batchfit's --precision chooses the types it computes in. */
#include "base/err.h"
#include "nn/onnx_int.h"

#include <math.h>

#define ONNX_FLOAT 1 /* TensorProto.FLOAT */
#define MAXCH 16     /* RMSNorm's nodes after the square, Casts included */

static const char *const WANT =
    "batchfit reads RMSNorm as x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight (or x divided by "
    "the square root), the mean over the last dimension, eps a constant, weight a parameter [C] (or 1.0 + "
    "weight, Gemma's)";

static int is_init(const oval *v) { return v && v->kind == OV_HOST && v->t && v->init >= 0; }

/* Node i's input k is tensor x (1), a scalar constant v (2, *c set), neither (0). */
static int operand(onnx_lower *L, int i, int k, const oval *x, double *c)
{
    const bfit_onnx_node *nd = &L->om->nodes[i];
    oval *v = k < nd->nin ? bfit_onnx_val(L, nd->in[k]) : NULL;
    if (!v)
        return 0;
    if (v == x)
        return 1;
    return v->kind != OV_DEVICE && bfit_onnx_scalar(L, v->name, c) ? 2 : 0;
}

/* ReduceMean node r takes the mean over the last of rank's axes, kept. */
static int mean_last(onnx_lower *L, int r, int rank)
{
    const bfit_onnx_node *nd = &L->om->nodes[r];
    const bfit_onnx_attr *axes = bfit_onnx_node_attr(nd, "axes"), *kd = bfit_onnx_node_attr(nd, "keepdims");
    double ax = 0;
    int keep = !kd || (kd->type == BFIT_ONNX_A_INT && kd->i == 1), have = 0;

    if (axes && axes->type == BFIT_ONNX_A_INTS && axes->nints == 1)
        ax = (double)axes->ints[0], have = 1;
    else if (!axes && nd->nin > 1) /* opset 18: the axes an input */
        have = bfit_onnx_scalar(L, nd->in[1], &ax);
    return keep && have && (ax == -1 || ax == rank - 1);
}

/* Node j is a Cast to float. */
static int float_cast(onnx_lower *L, int j)
{
    const bfit_onnx_attr *to = bfit_onnx_node_attr(&L->om->nodes[j], "to");
    return to && to->type == BFIT_ONNX_A_INT && to->i == ONNX_FLOAT;
}

/* Gemma's scale, 1.0 + weight.float(): v made by an Add of 1 to an
 * initializer or its Cast to float, each read by the next alone (the Mul
 * node mul last). The initializer, those nodes into nodes[] (*n of them),
 * or NULL. */
static oval *one_plus(onnx_lower *L, int mul, const oval *v, int *nodes, int *n)
{
    int a = v ? v->producer : -1;
    const bfit_onnx_node *nd = a >= 0 ? &L->om->nodes[a] : NULL;
    double one = 0;

    if (!nd || !bfit_onnx_streq(nd->op, "Add") || nd->nin != 2 || bfit_onnx_next(L, a, "Mul") != mul)
        return NULL;
    for (int k = 0; k < 2; k++) {
        oval *u = bfit_onnx_val(L, nd->in[k]), *w = u;
        int c = u ? u->producer : -1, cast = c >= 0 && bfit_onnx_streq(L->om->nodes[c].op, "Cast") &&
                                             float_cast(L, c) && bfit_onnx_next(L, c, "Add") == a;
        if (!u || !bfit_onnx_scalar(L, nd->in[1 - k], &one) || one != 1)
            continue;
        if (!is_init(w) && !(cast && is_init(w = bfit_onnx_val(L, L->om->nodes[c].in[0]))))
            continue;
        nodes[(*n)++] = a;
        if (w != u) /* through its Cast */
            nodes[(*n)++] = c;
        return w;
    }
    return NULL;
}

/* The weight's Mul after node i (past Casts to float): its index, *w the
 * weight (an initializer of the layer's [C]; *off 1 where the Mul is by 1 +
 * it, Gemma's, its nodes into more[], *nmore), -1 where there is none. */
static int weight_mul(onnx_lower *L, int i, oval **w, int *off, int *more, int *nmore)
{
    int j;
    while ((j = bfit_onnx_next(L, i, "Cast")) >= 0 && float_cast(L, j))
        i = j;
    if ((j = bfit_onnx_next(L, i, "Mul")) < 0)
        return -1;
    for (int k = 0; k < 2; k++) {
        oval *v = bfit_onnx_val(L, L->om->nodes[j].in[k]);
        if (v && v->producer != i && is_init(v)) {
            *w = v;
            return j;
        }
        if (v && v->producer != i && (*w = one_plus(L, j, v, more, nmore)) != NULL) {
            *off = 1;
            return j;
        }
    }
    return -1;
}

/* From Pow(x, 2) or Mul(x, x): the chain's nodes into ch[] up to the
 * Casts after the norm, its count, or 0 where this is not RMSNorm's start,
 * -1 where the mean is not over the last axis, kept, -2 where what comes
 * after it is not RMSNorm; eps set. */
static int chain(onnx_lower *L, const oval *x, int *ch, double *eps)
{
    int n = 0, i = L->ndi, sq = 0, sqrt_at;
    double c;

    if (bfit_onnx_streq(L->nd->op, "Pow"))
        sq = operand(L, i, 0, x, &c) == 1 && operand(L, i, 1, x, &c) == 2 && c == 2;
    else
        sq = operand(L, i, 0, x, &c) == 1 && operand(L, i, 1, x, &c) == 1;
    if (!sq || (i = bfit_onnx_next(L, i, "ReduceMean")) < 0)
        return 0;
    ch[n++] = i;
    if (!mean_last(L, i, x->rank))
        return -1;
    if ((i = bfit_onnx_next(L, i, "Add")) < 0)
        return -2;
    ch[n++] = i;
    if (operand(L, i, 0, x, eps) != 2 && operand(L, i, 1, x, eps) != 2)
        return -2;
    if ((i = bfit_onnx_next(L, i, "Sqrt")) < 0)
        return -2;
    ch[n++] = sqrt_at = i;
    if ((i = bfit_onnx_next(L, sqrt_at, "Div")) >= 0 && operand(L, i, 0, x, &c) == 1) {
        ch[n++] = i; /* x / sqrt(...) */
    } else {
        if (i >= 0 && !(operand(L, i, 0, x, &c) == 2 && c == 1)) /* 1 / sqrt(...) */
            return -2;
        if (i < 0 && (i = bfit_onnx_next(L, sqrt_at, "Reciprocal")) < 0)
            return -2;
        ch[n++] = i;
        if ((i = bfit_onnx_next(L, i, "Mul")) < 0 ||
            (operand(L, i, 0, x, &c) != 1 && operand(L, i, 1, x, &c) != 1))
            return -2;
        ch[n++] = i;
    }
    for (int j; n < MAXCH && (j = bfit_onnx_next(L, i, "Cast")) >= 0 && float_cast(L, j); i = j)
        ch[n++] = j; /* .type_as(x): lowered as the casts they are, float to float */
    return n;
}

/* 1 where the node being lowered starts RMSNorm's nodes (*rc set: the
 * layer emitted, or a refusal), 0 where it does not. */
static int rms_chain(onnx_lower *L, oval *x, int *rc)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_RMSNORM);
    double eps = 0;
    int ch[MAXCH], n = chain(L, x, ch, &eps), wm, off = 0, more[2], nmore = 0;
    oval *w = NULL;

    if (n == 0)
        return 0;
    if (n == -1)
        *rc = bfit_onnx_refuse(L, "this squares a tensor and takes a mean, as RMSNorm does, but not over the last "
                                  "dimension alone with keepdim: %s", WANT);
    else if (n < 0)
        *rc = bfit_onnx_refuse(L, "this squares a tensor and takes its mean over the last dimension, as RMSNorm "
                                  "does, but what follows is not RMSNorm: %s", WANT);
    else if ((wm = weight_mul(L, ch[n - 1], &w, &off, more, &nmore)) < 0)
        *rc = bfit_onnx_refuse(L, "RMSNorm without its weight (a Mul by a parameter [C] after the norm): "
                                  "batchfit's rmsnorm learns one; %s", WANT);
    else if (!(eps > 0 && eps <= 1))
        *rc = bfit_onnx_refuse(L, "RMSNorm's eps is %g: batchfit needs 0 < eps <= 1", eps);
    else if (x->shape.nd == 3)
        *rc = bfit_onnx_refuse(L, "RMSNorm over an image's last axis (W) is not supported: batchfit normalises "
                                  "the features of a token or a vector");
    else {
        c.eps = (float)eps;
        c.offset = off;
        if ((*rc = bfit_onnx_emit(L, &c, &x, 1, &w, 1)) != BFIT_OK)
            return 1;
        for (int k = 0; k < n; k++)
            L->done[ch[k]] = 1;
        for (int k = 0; k < nmore; k++) /* Gemma's 1 + w: in the layer */
            L->done[more[k]] = 1;
        L->done[wm] = 1;
        bfit_onnx_move_out(L, L->ndi, wm, "a step of RMSNorm, which batchfit computes whole");
    }
    return 1;
}

/* The opset-23 operator: RMSNormalization(X, scale) over the last axis. */
static int rms_op(onnx_lower *L, oval *x)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_RMSNORM);
    oval *w = bfit_onnx_in(L, 1);
    int64_t axis;
    float eps;
    int rc;

    if ((rc = bfit_onnx_attr_int(L, "axis", -1, &axis)) != BFIT_OK ||
        (rc = bfit_onnx_attr_float(L, "epsilon", 1e-5f, &eps)) != BFIT_OK)
        return rc;
    if ((axis != -1 && axis != x->rank - 1) || x->shape.nd == 3)
        return bfit_onnx_refuse(L, "only an RMS norm over the last dimension of tokens or vectors is supported");
    if (!is_init(w))
        return bfit_onnx_refuse(L, "the scale must be an initializer (a parameter)");
    c.eps = eps;
    return bfit_onnx_emit(L, &c, &x, 1, &w, 1);
}

/* Mul of two computed tensors of one shape: `mul`. 0 where the shapes
 * differ (a gate per channel is `scale`, onnx_ops.c), and for two vectors,
 * which `scale` has multiplied since before `mul` (the same numbers). */
static int product(onnx_lower *L, int *rc)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_MUL);
    oval *a = bfit_onnx_in(L, 0), *b = bfit_onnx_in(L, 1), *x[2];

    if (L->nd->nin != 2 || !a || !b || a->kind != OV_DEVICE || b->kind != OV_DEVICE || a == b ||
        a->rank != b->rank || !bfit_shape_eq(a->shape, b->shape) || bfit_shape_is_vector(a->shape) || a->pad[0] ||
        a->pad[1] || b->pad[0] || b->pad[1])
        return 0;
    x[0] = a, x[1] = b;
    *rc = bfit_onnx_emit(L, &c, x, 2, NULL, 0);
    return 1;
}

static int cast(onnx_lower *L, oval *x)
{
    int64_t to;
    int rc;

    if ((rc = bfit_onnx_attr_int(L, "to", 0, &to)) != BFIT_OK)
        return rc;
    if (to != ONNX_FLOAT)
        return bfit_onnx_refuse(L, "a Cast of a computed tensor to the ONNX type %lld: batchfit computes in "
                                   "float (f32, or bf16 with --precision bf16); export the model in float32",
                                (long long)to);
    bfit_onnx_alias(L, x);
    return BFIT_OK;
}

int bfit_onnx_lower_rms(onnx_lower *L, int *rc)
{
    const bfit_onnx_str op = L->nd->op;
    oval *x = bfit_onnx_in(L, 0);

    if (!x || x->kind != OV_DEVICE)
        return 0;
    if (bfit_onnx_streq(op, "Cast"))
        *rc = cast(L, x);
    else if (bfit_onnx_streq(op, "RMSNormalization"))
        *rc = rms_op(L, x);
    else if (bfit_onnx_streq(op, "Pow"))
        return rms_chain(L, x, rc);
    else if (bfit_onnx_streq(op, "Mul"))
        return rms_chain(L, x, rc) || product(L, rc);
    else
        return 0;
    return 1;
}
