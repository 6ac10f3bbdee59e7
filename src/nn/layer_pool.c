/* layer_pool.c - pooling layers: max (nn.MaxPool2d), average (nn.AvgPool2d
 * with count_include_pad) and global average (CxHxW -> C, nn.AdaptiveAvgPool2d(1)
 * then flatten; on a sequence TxC -> C, the mean of its real tokens: a
 * sentence classifier's pooling, the padding left out).
 *
 * One oneDNN pooling op forward and one backward. Training max pooling keeps
 * the argmax indices from forward to backward: that is the layer's `saved`. */
#include "base/err.h"
#include "nn/layer.h"

#include <stdio.h>

enum { OP_FWD, OP_BWD };

/* Kernel, stride and padding: from cfg, or the whole input for gap. A stride
 * of 0 means the kernel (PyTorch's default). */
static void geometry(const bfit_layer *l, int g[6])
{
    const bfit_layer_cfg *c = &l->cfg;
    if (l->vt->kind == BFIT_L_GAP) {
        g[0] = l->in[0].h, g[1] = l->in[0].w, g[2] = 1, g[3] = 1, g[4] = 0, g[5] = 0;
        return;
    }
    g[0] = c->kh, g[1] = c->kw, g[2] = c->sh > 0 ? c->sh : c->kh, g[3] = c->sw > 0 ? c->sw : c->kw;
    g[4] = c->ph, g[5] = c->pw;
}

static int init(bfit_layer *l, char *err, size_t errlen)
{
    const char *name = bfit_layer_kind_name(l->vt->kind);
    bfit_shape in = l->in[0];
    char buf[48];
    int g[6];

    if (l->vt->kind == BFIT_L_GAP && in.nd == 2) { /* tokens [T, C]: their mean */
        l->out = bfit_shape_vec(in.d[1]);
        return BFIT_OK;
    }
    if (!bfit_shape_is_image(in)) {
        snprintf(err, errlen, "%s expects an image CxHxW, got the sequence %s", name, bfit_shape_str(in, buf, sizeof buf));
        return BFIT_EINVAL;
    }
    geometry(l, g);
    if (l->vt->kind == BFIT_L_GAP) {
        l->out = bfit_shape_vec(in.c);
        return BFIT_OK;
    }
    if (g[0] < 1 || g[1] < 1 || g[2] < 1 || g[3] < 1 || g[4] < 0 || g[5] < 0) {
        snprintf(err, errlen, "%s kernel %dx%d and stride %dx%d must be positive and padding %dx%d not negative",
                 name, g[0], g[1], g[2], g[3], g[4], g[5]);
        return BFIT_EINVAL;
    }
    if (2 * g[4] > g[0] || 2 * g[5] > g[1]) {
        /* PyTorch's rule; it also keeps every max window on real input */
        snprintf(err, errlen, "%s padding %dx%d is more than half the kernel %dx%d: use padding of at most %dx%d",
                 name, g[4], g[5], g[0], g[1], g[0] / 2, g[1] / 2);
        return BFIT_EINVAL;
    }
    if (in.h + 2 * g[4] < g[0] || in.w + 2 * g[5] < g[1]) {
        snprintf(err, errlen,
                 "%s kernel %dx%d is larger than the input %s padded by %dx%d (%dx%d): use a kernel of at most "
                 "%dx%d",
                 name, g[0], g[1], bfit_shape_str(in, buf, sizeof buf), g[4], g[5], in.h + 2 * g[4],
                 in.w + 2 * g[5], in.h + 2 * g[4], in.w + 2 * g[5]);
        return BFIT_EINVAL;
    }
    if (l->cfg.ceil && l->vt->kind != BFIT_L_MAXPOOL) {
        /* PyTorch divides a ceil window by its part in the input and padding, batchfit by the kernel */
        snprintf(err, errlen, "%s: ceil_mode is for max pooling only", name);
        return BFIT_EINVAL;
    }
    l->out = bfit_shape_chw(in.c, (int)bfit_pool_out(in.h, g[0], g[2], g[4], l->cfg.ceil),
                            (int)bfit_pool_out(in.w, g[1], g[3], g[5], l->cfg.ceil));
    return BFIT_OK;
}

static int new_op(bfit_layer *l, int slot, bfit_op_kind kind, int m, int training)
{
    bfit_op_desc d = {.kind = kind, .dtype = l->dtype};
    int g[6];

    geometry(l, g);
    d.u.pool.n = m;
    d.u.pool.c = l->in[0].c;
    d.u.pool.ih = l->in[0].h;
    d.u.pool.iw = l->in[0].w;
    d.u.pool.oh = l->out.h;
    d.u.pool.ow = l->out.w;
    d.u.pool.kh = g[0];
    d.u.pool.kw = g[1];
    d.u.pool.sh = g[2];
    d.u.pool.sw = g[3];
    d.u.pool.ph = g[4];
    d.u.pool.pw = g[5];
    d.u.pool.max = l->vt->kind == BFIT_L_MAXPOOL;
    d.u.pool.training = training;
    d.u.pool.blk_src = l->blk_in;
    d.u.pool.blk_dst = l->blk_out;
    return bfit_op_new(l->dev, &d, &l->ops[slot]);
}

/* A sequence's mean over its real tokens (a->lens). */
static int seq_prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = {.kind = BFIT_OP_SEQMEAN_FWD, .dtype = l->dtype};
    d.u.seqm.n = m;
    d.u.seqm.T = l->in[0].d[0];
    d.u.seqm.C = l->in[0].d[1];
    return bfit_layer_op_pair(l, &d, BFIT_OP_SEQMEAN_BWD, training, need);
}

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    int rc;

    if (l->in[0].nd == 2)
        return seq_prepare(l, m, training, need);
    if ((rc = new_op(l, OP_FWD, BFIT_OP_POOL_FWD, m, training)) != BFIT_OK)
        return rc;
    need->saved = training ? bfit_op_saved_bytes(l->ops[OP_FWD]) : 0;
    need->ws_fwd = bfit_op_workspace_bytes(l->ops[OP_FWD]);
    need->ws_bwd = 0;
    if (!training)
        return BFIT_OK;
    if ((rc = new_op(l, OP_BWD, BFIT_OP_POOL_BWD, m, 1)) != BFIT_OK)
        return rc;
    need->ws_bwd = bfit_op_workspace_bytes(l->ops[OP_BWD]);
    return BFIT_OK;
}

static int forward(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};

    o.src = a->x[0];
    o.dst = a->y;
    o.saved = a->saved;
    o.workspace = a->ws;
    o.lens = a->lens;
    return bfit_op_run(l->ops[OP_FWD], &o);
}

static int backward(bfit_layer *l, const bfit_bwd_args *a)
{
    bfit_op_args o = {0};

    if (!a->dx[0])
        return BFIT_OK; /* no parameters: nothing else to compute */
    o.diff_dst = a->dy;
    o.diff_src = a->dx[0];
    o.saved = a->saved;
    o.workspace = a->ws;
    o.lens = a->lens;
    return bfit_op_run(l->ops[OP_BWD], &o);
}

#define POOL_VT(var, k)                                                                            \
    const bfit_layer_vt var = {                                                                    \
        .kind = k,                                                                                 \
        .nin = 1,                                                                                  \
        .modes = BFIT_MODE(BFIT_MODE_NONE),                                                        \
        .init = init,                                                                              \
        .prepare = prepare,                                                                        \
        .init_params = NULL,                                                                       \
        .forward = forward,                                                                        \
        .backward = backward,                                                                      \
        .unprepare = NULL,                                                                         \
    }

POOL_VT(bfit_maxpool_vt, BFIT_L_MAXPOOL);
POOL_VT(bfit_avgpool_vt, BFIT_L_AVGPOOL);
POOL_VT(bfit_gap_vt, BFIT_L_GAP);
