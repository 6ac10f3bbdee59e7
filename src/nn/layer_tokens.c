/* layer_tokens.c - what a vision transformer does around its blocks, as
 * torchvision's VisionTransformer exports it: the patch embedding's channels
 * become tokens (reshape, then transpose [C, T] -> [T, C]), a learned class
 * token goes first, a learned position embedding is added, and the head
 * reads the class token back (select). Reshape copies (as flatten does).
 * Transpose also takes an image to channels-last and back (ConvNeXt) and
 * shuffles its channels (ShuffleNet); select also takes a range of an
 * image's channels (ShuffleNet's chunks). */
#include "base/err.h"
#include "nn/layer.h"

#include <stdio.h>
#include <string.h>

enum { OP_FWD, OP_BWD };

static size_t bytes(const bfit_layer *l, int m)
{
    return (size_t)m * (size_t)bfit_shape_numel(l->in[0]) * bfit_dtype_size(l->dtype);
}

static int none(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    (void)l, (void)m, (void)training;
    need->saved = need->ws_fwd = need->ws_bwd = 0;
    return BFIT_OK;
}

/* ---- reshape ---------------------------------------------------------------- */

static int reshape_init(bfit_layer *l, char *err, size_t errlen)
{
    char a[48], b[48];
    if (l->cfg.to.nd < 1 || bfit_shape_numel(l->cfg.to) != bfit_shape_numel(l->in[0])) {
        snprintf(err, errlen, "reshape of %s to %s: the element counts differ", bfit_shape_str(l->in[0], a, sizeof a),
                 bfit_shape_str(l->cfg.to, b, sizeof b));
        return BFIT_EINVAL;
    }
    l->out = l->cfg.to;
    return BFIT_OK;
}

static int copy_fwd(bfit_layer *l, const bfit_fwd_args *a) { return bfit_device_copy(l->dev, a->y, a->x[0], bytes(l, a->m)); }

static int copy_bwd(bfit_layer *l, const bfit_bwd_args *a)
{
    return a->dx[0] ? bfit_device_copy(l->dev, a->dx[0], a->dy, bytes(l, a->m)) : BFIT_OK;
}

const bfit_layer_vt bfit_reshape_vt = {
    .kind = BFIT_L_RESHAPE, .nin = 1, .modes = BFIT_MODE(BFIT_MODE_NONE), .init = reshape_init,
    .prepare = none, .forward = copy_fwd, .backward = copy_bwd,
};

/* ---- transpose ----------------------------------------------------------------- */

/* The matrix [a, b] of blocks of q elements each sample is transposed as:
 * a sample [a, b] itself, or an image CxHxW as [C, H*W] (to channels-last:
 * ConvNeXt's permute to [N, H, W, C], held as tokens [H*W, C]), or with
 * groups g an image as [g, C/g] blocks of H*W (ShuffleNet's channel
 * shuffle: the image keeps its shape). The output is [b, a], or the image
 * cfg.to when a sample [H*W, C] goes back to CxHxW. */
static void transpose_ab(const bfit_layer *l, int *a, int *b, int *q)
{
    const bfit_shape *x = &l->in[0];
    int g = l->cfg.groups > 1 && x->nd == 3 ? l->cfg.groups : 0;
    *a = g ? g : x->nd == 3 ? x->c : x->d[0];
    *b = g ? x->c / g : x->nd == 3 ? x->h * x->w : x->d[1];
    *q = g ? x->h * x->w : 1;
}

static int transpose_init(bfit_layer *l, char *err, size_t errlen)
{
    const bfit_shape *to = &l->cfg.to;
    char s[48], t[48];
    int a, b, q;

    if (l->in[0].nd != 2 && l->in[0].nd != 3) {
        snprintf(err, errlen, "transpose takes a sample [a, b] or an image CxHxW, got %s",
                 bfit_shape_str(l->in[0], s, sizeof s));
        return BFIT_EINVAL;
    }
    if (l->cfg.groups > 1 && (l->in[0].nd != 3 || l->in[0].c % l->cfg.groups || to->nd)) {
        snprintf(err, errlen, "a channel shuffle of %d groups takes an image of channels in whole groups, got %s",
                 l->cfg.groups, bfit_shape_str(l->in[0], s, sizeof s));
        return BFIT_EINVAL;
    }
    transpose_ab(l, &a, &b, &q);
    if (to->nd == 3 && (l->in[0].nd != 2 || to->c != b || (int64_t)to->h * to->w != a)) {
        snprintf(err, errlen, "transpose of %s to the image %s: the image wants a sample [H*W, C]",
                 bfit_shape_str(l->in[0], s, sizeof s), bfit_shape_str(*to, t, sizeof t));
        return BFIT_EINVAL;
    }
    l->out = to->nd == 3 ? *to : q > 1 || l->cfg.groups > 1 ? l->in[0] : bfit_shape_seq(b, a);
    return BFIT_OK;
}

static int transpose_prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = {.kind = BFIT_OP_TRANSPOSE, .dtype = l->dtype};
    int rc, a, b, q;
    transpose_ab(l, &a, &b, &q);
    d.u.tr.n = m;
    d.u.tr.a = a;
    d.u.tr.b = b;
    d.u.tr.inner = q;
    need->saved = need->ws_fwd = need->ws_bwd = 0;
    if ((rc = bfit_op_new(l->dev, &d, &l->ops[OP_FWD])) != BFIT_OK || !training)
        return rc;
    d.u.tr.a = b; /* the gradient goes back the other way */
    d.u.tr.b = a;
    return bfit_op_new(l->dev, &d, &l->ops[OP_BWD]);
}

static int transpose_fwd(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};
    o.src = a->x[0];
    o.dst = a->y;
    return bfit_op_run(l->ops[OP_FWD], &o);
}

static int transpose_bwd(bfit_layer *l, const bfit_bwd_args *a)
{
    bfit_op_args o = {0};
    if (!a->dx[0])
        return BFIT_OK;
    o.src = a->dy;
    o.dst = a->dx[0];
    return bfit_op_run(l->ops[OP_BWD], &o);
}

const bfit_layer_vt bfit_transpose_vt = {
    .kind = BFIT_L_TRANSPOSE, .nin = 1, .modes = BFIT_MODE(BFIT_MODE_NONE), .init = transpose_init,
    .prepare = transpose_prepare, .forward = transpose_fwd, .backward = transpose_bwd,
};

/* ---- the class token ------------------------------------------------------------- */

static int cls_init(bfit_layer *l, char *err, size_t errlen)
{
    char a[48];
    if (l->in[0].nd != 2) {
        snprintf(err, errlen, "a class token goes before tokens [T, C], got %s", bfit_shape_str(l->in[0], a, sizeof a));
        return BFIT_EINVAL;
    }
    l->out = bfit_shape_seq(l->in[0].d[0] + 1, l->in[0].d[1]);
    l->nparams = 1;
    /* PyTorch's class_token [1, 1, C]; it is copied into every sample (a compute copy under mixed precision) */
    l->params[0] = (bfit_param){.name = "token", .ndim = 3, .dim = {1, 1, l->in[0].d[1]}, .trainable = 1,
                                .multiplies = 1};
    return BFIT_OK;
}

/* Rows of the output: the token, then the sample's tokens. */
static void cls_desc(const bfit_layer *l, int m, bfit_op_desc *d)
{
    d->u.concat.rows = m;
    d->u.concat.n = 2;
    d->u.concat.cols[0] = l->in[0].d[1];
    d->u.concat.cols[1] = (int64_t)l->in[0].d[0] * l->in[0].d[1];
    d->u.concat.bcast = 1;
}

static int cls_prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = {.kind = BFIT_OP_CONCAT_FWD, .dtype = l->dtype};
    cls_desc(l, m, &d);
    return bfit_layer_op_pair(l, &d, BFIT_OP_CONCAT_BWD, training, need);
}

static void cls_init_params(bfit_layer *l, uint64_t seed, float *const *host)
{
    (void)seed;
    bfit_fill_const(host[0], bfit_param_numel(&l->params[0]), 0.0f); /* torch.zeros, as torchvision */
}

static int cls_fwd(bfit_layer *l, const bfit_fwd_args *a)
{
    const void *src[2] = {bfit_param_compute(&l->params[0]), a->x[0]};
    bfit_op_args o = {0};
    o.srcs = src;
    o.dst = a->y;
    return bfit_op_run(l->ops[OP_FWD], &o);
}

static int cls_bwd(bfit_layer *l, const bfit_bwd_args *a)
{
    void *dst[2] = {l->params[0].grad, a->dx[0]};
    bfit_op_args o = {0};
    o.diff_dst = a->dy;
    o.dsts = dst;
    o.add_mask = a->dx_add << 1; /* the token's gradient always adds (the sum of its rows) */
    return bfit_op_run(l->ops[OP_BWD], &o);
}

const bfit_layer_vt bfit_cls_vt = {
    .kind = BFIT_L_CLS, .nin = 1, .dx_add = 1, .modes = BFIT_MODE(BFIT_MODE_NONE), .init = cls_init,
    .prepare = cls_prepare, .init_params = cls_init_params, .forward = cls_fwd, .backward = cls_bwd,
};

/* ---- a learned tensor added (the position embedding) ------------------------------ */

enum { OP_ADD, OP_RED };

static int addp_init(bfit_layer *l, char *err, size_t errlen)
{
    char a[48], b[48];
    if (l->cfg.to.nd < 1 || bfit_shape_numel(l->cfg.to) != bfit_shape_numel(l->in[0])) {
        snprintf(err, errlen, "a learned %s cannot be added to samples of %s", bfit_shape_str(l->cfg.to, a, sizeof a),
                 bfit_shape_str(l->in[0], b, sizeof b));
        return BFIT_EINVAL;
    }
    l->out = l->in[0];
    l->nparams = 1;
    l->params[0] = (bfit_param){.name = "weight", .ndim = l->cfg.to.nd, .trainable = 1};
    for (int d = 0; d < l->cfg.to.nd; d++)
        l->params[0].dim[d] = l->cfg.to.d[d];
    return BFIT_OK;
}

static int addp_prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = {.kind = BFIT_OP_ADD_ROWS, .dtype = l->dtype};
    int rc;
    d.u.rows.M = m;
    d.u.rows.N = bfit_shape_numel(l->in[0]);
    need->saved = need->ws_fwd = need->ws_bwd = 0;
    if ((rc = bfit_op_new(l->dev, &d, &l->ops[OP_ADD])) != BFIT_OK || !training)
        return rc;
    d.kind = BFIT_OP_REDUCE_ROWS;
    d.accumulate = 1;
    d.u.reduce.M = m;
    d.u.reduce.N = bfit_shape_numel(l->in[0]);
    if ((rc = bfit_op_new(l->dev, &d, &l->ops[OP_RED])) != BFIT_OK)
        return rc;
    need->ws_bwd = bfit_op_workspace_bytes(l->ops[OP_RED]);
    return BFIT_OK;
}

static void addp_init_params(bfit_layer *l, uint64_t seed, float *const *host)
{
    /* torchvision draws it from N(0, 0.02); a uniform of that spread */
    bfit_fill_uniform(host[0], bfit_param_numel(&l->params[0]), 0.02f * 1.7320508f, seed);
}

static int addp_fwd(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};
    o.src = a->x[0];
    o.bias = l->params[0].data;
    o.dst = a->y;
    return bfit_op_run(l->ops[OP_ADD], &o);
}

static int addp_bwd(bfit_layer *l, const bfit_bwd_args *a)
{
    bfit_op_args o = {0};
    int rc;
    o.src = a->dy;
    o.dst = l->params[0].grad;
    o.workspace = a->ws;
    if ((rc = bfit_op_run(l->ops[OP_RED], &o)) != BFIT_OK || !a->dx[0] || a->dx[0] == a->dy)
        return rc;
    return bfit_device_copy(l->dev, a->dx[0], a->dy, bytes(l, a->m));
}

const bfit_layer_vt bfit_addp_vt = {
    .kind = BFIT_L_ADDP, .nin = 1, .modes = BFIT_MODE(BFIT_MODE_NONE), .init = addp_init,
    .prepare = addp_prepare, .init_params = addp_init_params, .forward = addp_fwd, .backward = addp_bwd,
};

/* ---- one token of the sample, or channels of an image ---------------------------- */

/* Token `units` of [T, C], or with cfg.to an image's channels [units,
 * units + to.c) (ShuffleNet's x.chunk(2, dim=1)): the columns [off, off +
 * len) of each sample. */
static void select_cols(const bfit_layer *l, int64_t *off, int64_t *len)
{
    int64_t row = l->cfg.to.nd == 3 ? (int64_t)l->in[0].h * l->in[0].w : l->in[0].d[1];
    *off = (int64_t)l->cfg.units * row;
    *len = l->cfg.to.nd == 3 ? l->cfg.to.c * row : row;
}

static int select_init(bfit_layer *l, char *err, size_t errlen)
{
    const bfit_shape *x = &l->in[0], *to = &l->cfg.to;
    char a[48];
    if (to->nd == 3 && (x->nd != 3 || to->h != x->h || to->w != x->w || l->cfg.units < 0 || to->c < 1 ||
                        l->cfg.units > x->c - to->c)) {
        snprintf(err, errlen, "select takes channels [%d, %d) of an image, got %s", l->cfg.units,
                 l->cfg.units + to->c, bfit_shape_str(*x, a, sizeof a));
        return BFIT_EINVAL;
    }
    if (to->nd != 3 && (x->nd != 2 || l->cfg.units < -1 || l->cfg.units >= x->d[0])) {
        snprintf(err, errlen, "select takes token %d of tokens [T, C], got %s", l->cfg.units,
                 bfit_shape_str(*x, a, sizeof a));
        return BFIT_EINVAL;
    }
    l->out = to->nd == 3 ? *to : bfit_shape_vec(x->d[1]);
    return BFIT_OK;
}

static int select_prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = {.kind = BFIT_OP_SLICE_FWD, .dtype = l->dtype};
    if (l->cfg.units == -1) { /* where each sequence ends: the mean op's one-token form */
        d = (bfit_op_desc){.kind = BFIT_OP_SEQMEAN_FWD, .dtype = l->dtype};
        d.u.seqm.n = m;
        d.u.seqm.T = l->in[0].d[0];
        d.u.seqm.C = l->in[0].d[1];
        d.u.seqm.last = 1;
        return bfit_layer_op_pair(l, &d, BFIT_OP_SEQMEAN_BWD, training, need);
    }
    d.u.slice.rows = m;
    d.u.slice.ld = bfit_shape_numel(l->in[0]);
    select_cols(l, &d.u.slice.off, &d.u.slice.len);
    return bfit_layer_op_pair(l, &d, BFIT_OP_SLICE_BWD, training, need);
}

static int select_fwd(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};
    o.src = a->x[0];
    o.dst = a->y;
    o.lens = a->lens;
    return bfit_op_run(l->ops[OP_FWD], &o);
}

static int select_bwd(bfit_layer *l, const bfit_bwd_args *a)
{
    bfit_op_args o = {0};
    if (!a->dx[0])
        return BFIT_OK;
    o.diff_dst = a->dy;
    o.diff_src = a->dx[0];
    o.lens = a->lens;
    return bfit_op_run(l->ops[OP_BWD], &o);
}

const bfit_layer_vt bfit_select_vt = {
    .kind = BFIT_L_SELECT, .nin = 1, .modes = BFIT_MODE(BFIT_MODE_NONE), .init = select_init,
    .prepare = select_prepare, .forward = select_fwd, .backward = select_bwd,
};
