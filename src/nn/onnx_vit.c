/* onnx_vit.c - a vision transformer's operators, as torchvision's
 * VisionTransformer exports them with a dynamic batch (opset 17), onto
 * batchfit's layers:
 *
 * - Reshape and Transpose of device tensors that keep the batch first (the
 *   patch embedding's channels to tokens): a reshape (a copy, or nothing
 *   when the sample's shape stays) and a transpose of each sample;
 * - Transpose of an image to channels-last [N,H,W,C] and back (ConvNeXt's
 *   permutes around its layer norms and Linear layers): tokens [H*W, C],
 *   the same bytes, which the layers over the last axis below take as they
 *   are; the value remembers H and W for the way back;
 * - MatMul by a transposed initializer (nn.Linear on tokens), with the Add
 *   of its bias folded in: a linear layer;
 * - LayerNormalization over the last axis: layernorm;
 * - x * 0.5 * (1 + Erf(x / sqrt 2)), exact GELU: gelu;
 * - Expand of the class token over the batch, then its Concat before the
 *   tokens: cls; Add of the position embedding: addp; Gather of token 0
 *   for the head: select.
 * The attention blocks are mapped whole (onnx_attn.c). Sizes come from the
 * host's shape arithmetic (onnx_host.c), which must give the batch first. */
#include "base/err.h"
#include "nn/onnx_int.h"

#include <math.h>
#include <string.h>

int bfit_onnx_scalar(onnx_lower *L, bfit_onnx_str name, double *out)
{
    oval *v = bfit_onnx_val(L, name);
    const bfit_onnx_tensor *t = NULL;
    float f;

    if (!v)
        return 0;
    if (v->kind == OV_HOST && v->h && v->h->n == 1) {
        if (!v->h->isf && v->h->a[0])
            return 0;
        *out = v->h->isf ? v->h->f[0] : (double)v->h->b[0];
        return 1;
    }
    if (v->kind == OV_HOST && v->t)
        t = v->t;
    else if (v->producer >= 0 && bfit_onnx_streq(L->om->nodes[v->producer].op, "Constant"))
        for (int i = 0; i < L->om->nodes[v->producer].nattr; i++)
            if (L->om->nodes[v->producer].attr[i].t)
                t = L->om->nodes[v->producer].attr[i].t;
    if (!t || t->numel != 1 || bfit_onnx_tensor_f32(t, &f) != BFIT_OK)
        return 0;
    *out = f;
    return 1;
}

int bfit_onnx_next(onnx_lower *L, int i, const char *op)
{
    int c;
    if (bfit_onnx_consumers(L, i, 0, &c, 1) != 1 || !bfit_onnx_streq(L->om->nodes[c].op, op))
        return -1;
    return c;
}

void bfit_onnx_move_out(onnx_lower *L, int i, int j, const char *why)
{
    oval *a = bfit_onnx_val(L, L->om->nodes[i].out[0]), *b = bfit_onnx_val(L, L->om->nodes[j].out[0]);
    bfit_onnx_str name = b->name;
    int producer = b->producer;
    *b = *a;
    b->name = name;
    b->producer = producer;
    a->kind = OV_UNAVAIL;
    a->why = why;
}

static int is_init(const oval *v) { return v && v->kind == OV_HOST && v->t && v->init >= 0; }

/* ---- shapes ------------------------------------------------------------------ */

/* Reshape of a device tensor: the target's first dimension is the batch. */
/* Tokens [N, T, C] viewed as rows [N*T, C] (-1 or T times the batch, then
 * C), or such rows viewed back as [N, T, C]: transformers' Conv1D around
 * its addmm (a Gemm, onnx_ops.c). The same bytes: no layer. 1 and rc set
 * if the Reshape is one of these, 0 if not. */
static int token_rows(onnx_lower *L, oval *x, const hval *t, int *rc)
{
    int64_t T = x->shape.nd == 2 ? x->shape.d[0] : 0, C = x->shape.nd == 2 ? x->shape.d[1] : 0;
    oval *o = bfit_onnx_out(L, 0);

    if (!x->rows && x->rank == 3 && t->n == 2 && !t->a[1] && t->b[1] == C &&
        ((!t->a[0] && t->b[0] == -1) || bfit_onnx_affine_is(L, t->a[0], t->b[0], T, 0))) {
        bfit_onnx_alias(L, x);
        bfit_onnx_set_dims(o, 2, (int64_t[]){0, C});
        o->ra[0] = T, o->rb[0] = 0, o->rows = 1;
        *rc = BFIT_OK;
        return 1;
    }
    if (!x->rows)
        return 0;
    if (t->n == 3 && (bfit_onnx_affine_is(L, t->a[0], t->b[0], 1, 0) || (!t->a[0] && t->b[0] == -1)) && !t->a[1] &&
        t->b[1] == T && !t->a[2] && t->b[2] == C) {
        bfit_onnx_alias(L, x);
        o->rows = 0;
        bfit_onnx_set_rank(L, o, &x->shape);
        *rc = BFIT_OK;
        return 1;
    }
    *rc = bfit_onnx_refuse(L, "tokens flattened into rows [N*%lld, %lld] (transformers' Conv1D) come back only as "
                              "[N, %lld, %lld]", (long long)T, (long long)C, (long long)T, (long long)C);
    return 1;
}

static int reshape(onnx_lower *L, oval *x)
{
    hval *t = bfit_onnx_host(L, bfit_onnx_in(L, 1), 1);
    int64_t pd[BFIT_ONNX_MAXD], total = bfit_shape_numel(x->shape), known = 1;
    int n = 0, infer = -1, rc;
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_RESHAPE);
    bfit_shape s;
    oval *o;

    if (!t)
        return BFIT_EINVAL;
    if (!t->isf && t->nd == 1 && token_rows(L, x, t, &rc))
        return rc;
    if (t->isf || t->nd != 1 || t->n < 2 || t->n > 4 ||
        !(bfit_onnx_affine_is(L, t->a[0], t->b[0], 1, 0) || (t->a[0] == 0 && (t->b[0] == 0 || t->b[0] == -1))))
        return bfit_onnx_refuse(L, "the target shape must keep the batch first and give the sample 1 to 3 "
                                   "dimensions");
    for (int64_t d = 1; d < t->n; d++) {
        int64_t v = t->b[d];
        if (t->a[d])
            return bfit_onnx_refuse(L, "dimension %lld of the target depends on the batch size", (long long)d);
        if (v == 0)
            v = d < x->rank ? x->rb[d] : 0;
        if (v == -1 && infer < 0)
            infer = n;
        else if (v < 1 || v > total || known > total / v) /* more than the sample has: and no overflow */
            return bfit_onnx_refuse(L, "the target has the dimension %lld, a sample has %lld elements", (long long)v,
                                    (long long)total);
        else
            known *= v;
        pd[n++] = v;
    }
    if (infer >= 0)
        pd[infer] = total / known;
    s = n == 1 ? bfit_shape_vec((int)pd[0]) : n == 2 ? bfit_shape_seq((int)pd[0], (int)pd[1])
                                                     : bfit_shape_chw((int)pd[0], (int)pd[1], (int)pd[2]);
    if (bfit_shape_numel(s) != total)
        return bfit_onnx_refuse(L, "%lld elements a sample cannot take that shape", (long long)total);
    if ((s.nd == x->shape.nd && bfit_shape_eq(s, x->shape)) ||
        (x->id == 0 && L->g->input_dtype == BFIT_I32 && n == 1)) { /* token ids [N, T] as they are: GPT-2's
                                                                      input_ids.view(-1, T) */
        bfit_onnx_alias(L, x);
    } else {
        c.to = s;
        if ((rc = bfit_onnx_emit(L, &c, &x, 1, NULL, 0)) != BFIT_OK)
            return rc;
    }
    o = bfit_onnx_out(L, 0);
    bfit_onnx_set_rank(L, o, &s);
    return BFIT_OK;
}

/* Transpose: of an initializer (nn.Linear's weight for a MatMul), or of each
 * sample's [a, b], the batch staying first. */
static int transpose(onnx_lower *L, oval *x)
{
    int64_t perm[BFIT_ONNX_MAXATTR];
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_TRANSPOSE);
    int np, rc;

    if ((rc = bfit_onnx_attr_ints(L, "perm", perm, 0, &np)) != BFIT_OK)
        return rc;
    if (is_init(x)) {
        oval *o = bfit_onnx_out(L, 0);
        if (x->t->ndim != 2 || (np && (np != 2 || perm[0] != 1)))
            return bfit_onnx_refuse(L, "only the transpose of a matrix initializer (a Linear's weight) is supported");
        o->kind = OV_WT;
        o->t = x->t;
        o->init = x->init;
        o->src = (int)(x - L->v);
        return BFIT_OK;
    }
    if (np == 3 && perm[0] == 0 && perm[1] == 2 && perm[2] == 1 && x->shape.nd == 2 && !x->cl[0])
        return bfit_onnx_emit(L, &c, &x, 1, NULL, 0);
    if (np == 4 && perm[0] == 0 && perm[1] == 2 && perm[2] == 3 && perm[3] == 1 && bfit_shape_is_image(x->shape)) {
        if ((rc = bfit_onnx_emit(L, &c, &x, 1, NULL, 0)) == BFIT_OK) /* to channels-last: tokens [H*W, C] */
            bfit_onnx_set_cl(bfit_onnx_out(L, 0), x->shape.h, x->shape.w);
        return rc;
    }
    if (np == 4 && perm[0] == 0 && perm[1] == 3 && perm[2] == 1 && perm[3] == 2 && x->cl[0]) {
        c.to = bfit_shape_chw(x->shape.d[1], x->cl[0], x->cl[1]); /* back to channels-first */
        return bfit_onnx_emit(L, &c, &x, 1, NULL, 0);
    }
    return bfit_onnx_refuse(L, "batchfit transposes the last two dimensions of [batch, a, b] (perm [0, 2, 1]), "
                               "an image [batch, C, H, W] to channels-last (perm [0, 2, 3, 1]) and back (perm "
                               "[0, 3, 1, 2]) outside attention blocks, not this");
}

/* ---- layers ------------------------------------------------------------------ */

/* MatMul(x, W^T) (+ bias): a linear layer over the last dimension. */
static int matmul(onnx_lower *L, oval *x)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_LINEAR);
    oval *w = bfit_onnx_in(L, 1), *par[2] = {NULL, NULL};
    int add = bfit_onnx_next(L, L->ndi, "Add"), rc;

    if (!w || w->kind != OV_WT)
        return bfit_onnx_refuse(L, "batchfit runs MatMul by a transposed initializer (nn.Linear's export) outside "
                                   "attention blocks, and nothing else");
    par[0] = &L->v[w->src]; /* by the name the graph reads: an exporter's alias of merged constants is another */
    c.units = (int)w->t->dim[0];
    /* a head tied to the token table (nanoGPT's lm_head.weight = wte.weight): the embed layer's, not a copy */
    if (w->init >= 0 && w->init == L->tok_table)
        c.tie = 1, par[0] = NULL;
    if (add >= 0) { /* Add(bias, x W^T) in either order: the linear's bias */
        const bfit_onnx_node *a = &L->om->nodes[add];
        oval *b = bfit_onnx_val(L, a->in[0]);
        if (b && b->producer == L->ndi)
            b = a->nin > 1 ? bfit_onnx_val(L, a->in[1]) : NULL;
        if (is_init(b) && b->t->ndim == 1 && b->t->dim[0] == c.units)
            par[1] = b;
        else
            add = -1;
    }
    c.bias = par[1] != NULL;
    if ((rc = bfit_onnx_emit(L, &c, &x, 1, par, 2)) != BFIT_OK)
        return rc;
    if (add >= 0) {
        L->done[add] = 1;
        bfit_onnx_move_out(L, L->ndi, add, "a MatMul whose bias batchfit added in its linear layer");
    }
    return BFIT_OK;
}

static int layernorm(onnx_lower *L, oval *x)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_LAYERNORM);
    oval *par[2] = {bfit_onnx_in(L, 1), bfit_onnx_in(L, 2)};
    int64_t axis;
    float eps;
    int rc;

    if ((rc = bfit_onnx_attr_int(L, "axis", -1, &axis)) != BFIT_OK || (rc = bfit_onnx_attr_float(L, "epsilon", 1e-5f, &eps)))
        return rc;
    if ((axis != -1 && axis != x->rank - 1) || x->shape.nd == 3)
        return bfit_onnx_refuse(L, "only a layer norm over the last dimension of tokens or vectors is supported");
    /* no bias: nanoGPT's LayerNorm(bias=False), F.layer_norm(x, shape, weight, None) */
    if (!is_init(par[0]) || (par[1] && !is_init(par[1])))
        return bfit_onnx_refuse(L, "the scale and the bias (if any) must be initializers");
    c.eps = eps;
    c.bias = par[1] != NULL;
    bfit_onnx_unavail(L, 1, "a statistics output of LayerNormalization");
    return bfit_onnx_emit(L, &c, &x, 1, par, c.bias ? 2 : 1);
}

/* Div(x, sqrt 2) -> Erf -> Add 1 -> Mul by x -> Mul by 0.5: the exact GELU. */
static int gelu(onnx_lower *L, oval *x)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_GELU);
    int erf = bfit_onnx_next(L, L->ndi, "Erf"), add = erf >= 0 ? bfit_onnx_next(L, erf, "Add") : -1, mul = add >= 0 ? bfit_onnx_next(L, add, "Mul") : -1;
    int half = mul >= 0 ? bfit_onnx_next(L, mul, "Mul") : -1, rc, chain[4];
    double v, one, h;
    const bfit_onnx_node *a, *m, *q;

    if (!bfit_onnx_scalar(L, L->nd->in[1], &v) || fabs(v - sqrt(2.0)) > 1e-6 || half < 0)
        return bfit_onnx_refuse(L, "batchfit runs Div of a tensor only as the start of GELU's x * 0.5 * (1 + "
                                   "erf(x / sqrt 2))");
    a = &L->om->nodes[add], m = &L->om->nodes[mul], q = &L->om->nodes[half];
    if (!bfit_onnx_scalar(L, a->in[bfit_onnx_val(L, a->in[0])->producer == erf], &one) || one != 1 ||
        !bfit_onnx_scalar(L, q->in[bfit_onnx_val(L, q->in[0])->producer == mul], &h) || h != 0.5 ||
        bfit_onnx_val(L, m->in[bfit_onnx_val(L, m->in[0])->producer == add]) != bfit_onnx_val(L, L->nd->in[0]))
        return bfit_onnx_refuse(L, "this Div starts something like GELU but not x * 0.5 * (1 + erf(x / sqrt 2))");
    if ((rc = bfit_onnx_emit(L, &c, &x, 1, NULL, 0)) != BFIT_OK)
        return rc;
    chain[0] = erf, chain[1] = add, chain[2] = mul, chain[3] = half;
    for (int i = 0; i < 4; i++)
        L->done[chain[i]] = 1;
    bfit_onnx_move_out(L, L->ndi, half, "a part of GELU, which batchfit computes whole");
    return BFIT_OK;
}

int bfit_onnx_gelu_tanh_end(onnx_lower *L)
{
    static const char *const head[] = {"Mul", "Mul", "Add", "Mul", "Tanh"}, *const tail[] = {"Add", "Mul", "Mul"};
    const oval *x = L->nd->nin == 2 ? bfit_onnx_val(L, L->nd->in[0]) : NULL;
    int i = L->ndi, j;

    if (!x || x != bfit_onnx_val(L, L->nd->in[1]))
        return -1;
    for (int k = 0; k < 5; k++)
        if ((i = bfit_onnx_next(L, i, head[k])) < 0)
            return -1;
    for (int k = 0; k < 3 && (j = bfit_onnx_next(L, i, tail[k])) >= 0; k++)
        i = j; /* as far as it goes: the refusal names where it ends */
    return i;
}

/* Expand(class token [1, 1, C], [batch, 1, C]): the token broadcast over the batch. */
static int expand(onnx_lower *L, oval *tok)
{
    hval *s = bfit_onnx_host(L, bfit_onnx_in(L, 1), 1);
    oval *o = bfit_onnx_out(L, 0);

    if (!s)
        return BFIT_EINVAL;
    if (tok->t->ndim < 2 || tok->t->dim[0] != 1 || s->isf || s->n != tok->t->ndim ||
        !bfit_onnx_affine_is(L, s->a[0], s->b[0], 1, 0))
        return bfit_onnx_refuse(L, "batchfit expands an initializer [1, ...] over the batch only");
    for (int d = 1; d < s->n; d++)
        if (s->a[d] || (s->b[d] != 1 && s->b[d] != tok->t->dim[d]))
            return bfit_onnx_refuse(L, "only the batch dimension may grow");
    o->kind = OV_BCAST;
    o->t = tok->t;
    o->init = tok->init;
    return BFIT_OK;
}

/* Concat(class token broadcast [N, 1, C], tokens [N, T, C], axis 1). */
static int cls(onnx_lower *L)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_CLS);
    oval *b = bfit_onnx_in(L, 0), *x = bfit_onnx_in(L, 1), *par[1];
    int64_t axis;
    int rc;

    if ((rc = bfit_onnx_attr_int(L, "axis", 0, &axis)) != BFIT_OK)
        return rc;
    if (L->nd->nin != 2 || !b || b->kind != OV_BCAST || !x || x->kind != OV_DEVICE || x->shape.nd != 2 ||
        (axis != 1 && axis != -2) || b->t->ndim != 3 || b->t->dim[1] != 1 || b->t->dim[2] != x->shape.d[1])
        return bfit_onnx_refuse(L, "batchfit concatenates a broadcast token [1, 1, C] before tokens [N, T, C] "
                                   "(axis 1) only");
    par[0] = bfit_onnx_val(L, b->t->name);
    return bfit_onnx_emit(L, &c, &x, 1, par, 1);
}

/* Add(x, initializer of the sample's shape, with or without a leading 1). */
static int addp(onnx_lower *L, oval *x, oval *p)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_ADDP);
    const bfit_onnx_tensor *t = p->t;
    int lead = t->ndim == x->shape.nd + 1 && t->dim[0] == 1, same = t->ndim == x->shape.nd || lead;

    for (int d = 0; same && d < x->shape.nd; d++)
        same = t->dim[d + lead] == x->shape.d[d];
    if (!same || t->ndim > BFIT_SHAPE_MAXD)
        return bfit_onnx_refuse(L, "batchfit adds an initializer of the sample's shape (broadcast over the batch) "
                                   "only");
    c.to.nd = t->ndim;
    for (int d = 0; d < t->ndim; d++)
        c.to.d[d] = (int)t->dim[d];
    return bfit_onnx_emit(L, &c, &x, 1, &p, 1);
}

/* Gather(tokens [N, T, C], a constant index, axis 1): one token. */
static int gather(onnx_lower *L, oval *x)
{
    bfit_layer_cfg c = bfit_layer_cfg_default(BFIT_L_SELECT);
    hval *ix = bfit_onnx_host(L, bfit_onnx_in(L, 1), 1);
    int64_t axis;
    int rc;

    if (!ix || (rc = bfit_onnx_attr_int(L, "axis", 0, &axis)) != BFIT_OK)
        return BFIT_EINVAL;
    if ((axis != 1 && axis != 1 - x->rank) || x->shape.nd != 2 || ix->nd != 0 || ix->isf || ix->a[0])
        return bfit_onnx_refuse(L, "batchfit gathers one token (a constant index along dimension 1 of [N, T, C]) "
                                   "only");
    c.units = (int)(ix->b[0] < 0 ? ix->b[0] + x->shape.d[0] : ix->b[0]);
    /* Token ids end in padding where a text is shorter than T: their last
     * token (h[:, -1]) is each text's last, `select last`, as PyTorch picks
     * it on the text alone (GPT-2's classifier without a pad token). */
    if (c.units == x->shape.d[0] - 1 && L->g->input_dtype == BFIT_I32 && !L->seq_first)
        c.units = -1;
    return bfit_onnx_emit(L, &c, &x, 1, NULL, 0);
}

int bfit_onnx_lower_vit(onnx_lower *L, int *rc)
{
    oval *x = bfit_onnx_in(L, 0), *y = bfit_onnx_in(L, 1);
    const bfit_onnx_str op = L->nd->op;
    int dev = x && x->kind == OV_DEVICE && !x->pad[0] && !x->pad[1];

    if (bfit_onnx_streq(op, "Transpose") && x && (dev || is_init(x)))
        *rc = transpose(L, x);
    else if (bfit_onnx_streq(op, "Reshape") && dev)
        *rc = reshape(L, x);
    else if (bfit_onnx_streq(op, "MatMul") && dev)
        *rc = matmul(L, x);
    else if (bfit_onnx_streq(op, "LayerNormalization") && dev)
        *rc = layernorm(L, x);
    else if (bfit_onnx_streq(op, "Div") && dev)
        *rc = gelu(L, x);
    else if (bfit_onnx_streq(op, "Expand") && is_init(x))
        *rc = expand(L, x);
    else if (bfit_onnx_streq(op, "Concat") && x && x->kind == OV_BCAST)
        *rc = cls(L);
    else if (bfit_onnx_streq(op, "Gather") && dev)
        *rc = gather(L, x);
    else if (bfit_onnx_streq(op, "Add") && dev && is_init(y))
        *rc = addp(L, x, y);
    else if (bfit_onnx_streq(op, "Add") && is_init(x) && y && y->kind == OV_DEVICE)
        *rc = addp(L, y, x);
    else
        return 0;
    return 1;
}
