/* layer_batchnorm.c - batch normalisation, PyTorch's nn.BatchNorm2d over the
 * channels of CxHxW, and nn.BatchNorm1d over the features of a vector
 * (F x 1 x 1: the same mathematics with H = W = 1).
 *
 * Training normalises with the micro-batch's statistics, keeps them (mean,
 * biased variance) in `saved` for backward, and moves the running statistics
 * PyTorch's way: running = (1 - momentum) * running + momentum * stat, with
 * the unbiased variance for running_var (the forward op does it). Eval uses
 * the running statistics. */
#include "base/err.h"
#include "nn/layer.h"

#include <stdio.h>

enum { OP_FWD, OP_BWD, OP_BWD_SET };
enum { P_GAMMA, P_BETA, P_RMEAN, P_RVAR };

static int init(bfit_layer *l, char *err, size_t errlen)
{
    const bfit_layer_cfg *cfg = &l->cfg;
    int c = l->in[0].c;
    char buf[48];

    if (!bfit_shape_is_image(l->in[0])) {
        snprintf(err, errlen, "batchnorm expects an image CxHxW or a vector, got the sequence %s (use layernorm)",
                 bfit_shape_str(l->in[0], buf, sizeof buf));
        return BFIT_EINVAL;
    }
    if (!(cfg->eps > 0) || !(cfg->momentum >= 0 && cfg->momentum <= 1)) {
        snprintf(err, errlen, "batchnorm needs eps > 0 and momentum in [0, 1], got eps %g momentum %g",
                 (double)cfg->eps, (double)cfg->momentum);
        return BFIT_EINVAL;
    }
    l->out = l->in[0];
    l->nparams = 4;
    l->params[P_GAMMA] = (bfit_param){.name = "weight", .ndim = 1, .dim = {c}, .trainable = 1};
    l->params[P_BETA] = (bfit_param){.name = "bias", .ndim = 1, .dim = {c}, .trainable = 1};
    l->params[P_RMEAN] = (bfit_param){.name = "running_mean", .ndim = 1, .dim = {c}};
    l->params[P_RVAR] = (bfit_param){.name = "running_var", .ndim = 1, .dim = {c}};
    return BFIT_OK;
}

static size_t stat_bytes(const bfit_layer *l) { return BFIT_ALIGN_UP((size_t)l->in[0].c * bfit_dtype_size(BFIT_F32)); } /* statistics are f32 */

static bfit_op_desc bn_desc(const bfit_layer *l, int slot, bfit_op_kind kind, int m, int training)
{
    bfit_op_desc d = {.kind = kind, .dtype = l->dtype, .accumulate = slot == OP_BWD};

    d.u.bnorm.n = m;
    d.u.bnorm.c = l->in[0].c;
    d.u.bnorm.h = l->in[0].h;
    d.u.bnorm.w = l->in[0].w;
    d.u.bnorm.eps = l->cfg.eps;
    d.u.bnorm.momentum = l->cfg.momentum;
    d.u.bnorm.training = training;
    /* backward from the output (in-place activated batch norm) where the
     * model keeps the output rather than the input */
    d.u.bnorm.use_dst = kind == BFIT_OP_BNORM_BWD && l->mode == BFIT_MODE_Y;
    d.u.bnorm.blk = l->blk_in; /* a layout chain's block (store.c): the output's too */
    return d;
}

static int new_op(bfit_layer *l, int slot, bfit_op_kind kind, int m, int training)
{
    bfit_op_desc d = bn_desc(l, slot, kind, m, training);
    return bfit_op_new(l->dev, &d, &l->ops[slot]);
}

/* One value per channel in training (a vector's features at m = 1): the
 * output is beta whatever the input, and the unbiased variance is undefined
 * (PyTorch refuses it too). Such a step cannot run, but is still planned:
 * every plan's intercept is m = 1. */
static int min_batch(const bfit_layer *l) { return (int64_t)l->in[0].h * l->in[0].w < 2 ? 2 : 1; }

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    int rc;

    if ((rc = new_op(l, OP_FWD, BFIT_OP_BNORM_FWD, m, training)) != BFIT_OK)
        return rc;
    need->saved = training ? 2 * stat_bytes(l) : 0; /* batch mean, batch variance */
    need->ws_fwd = bfit_op_workspace_bytes(l->ops[OP_FWD]);
    need->ws_bwd = 0;
    if (!training)
        return BFIT_OK;
    /* gamma's and beta's gradients added (one setting them is made at its first use) */
    if ((rc = new_op(l, OP_BWD, BFIT_OP_BNORM_BWD, m, 1)) != BFIT_OK)
        return rc;
    need->ws_bwd = bfit_op_workspace_bytes(l->ops[OP_BWD]);
    return BFIT_OK;
}

static void init_params(bfit_layer *l, uint64_t seed, float *const *host)
{
    int64_t c = l->in[0].c;
    (void)seed;
    bfit_fill_const(host[P_GAMMA], c, 1.0f);
    bfit_fill_const(host[P_BETA], c, 0.0f);
    bfit_fill_const(host[P_RMEAN], c, 0.0f);
    bfit_fill_const(host[P_RVAR], c, 1.0f);
}

static int forward(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};

    if (!l->ops[OP_FWD] || a->m != l->prep_m || a->training != l->prep_training)
        return bfit_fail(BFIT_ESTATE, "batchnorm: forward of %d samples (%s) on a layer prepared for %d (%s)", a->m,
                         a->training ? "training" : "eval", l->prep_m, l->prep_training ? "training" : "eval");
    o.src = a->x[0];
    o.dst = a->y;
    o.scale = l->params[P_GAMMA].data;
    o.shift = l->params[P_BETA].data;
    o.workspace = a->ws;
    if (!a->training) {
        /* eval only reads mean/var */
        o.mean = l->params[P_RMEAN].data;
        o.var = l->params[P_RVAR].data;
        return bfit_op_run(l->ops[OP_FWD], &o);
    }
    if (a->m < min_batch(l)) {
        char buf[48];
        return bfit_fail(BFIT_EINVAL,
                         "batchnorm over %s in training needs more than one value per channel: use a micro-batch "
                         "of at least %d",
                         bfit_shape_str(l->in[0], buf, sizeof buf), min_batch(l));
    }
    if (!a->saved)
        return bfit_fail(BFIT_EINVAL, "batchnorm: training forward needs its saved buffer");
    o.mean = a->saved;
    o.var = (char *)a->saved + stat_bytes(l);
    /* a recomputation must not move the running statistics a second time */
    o.rmean = a->regen ? NULL : l->params[P_RMEAN].data;
    o.rvar = a->regen ? NULL : l->params[P_RVAR].data;
    return bfit_op_run(l->ops[OP_FWD], &o);
}

static int backward(bfit_layer *l, const bfit_bwd_args *a)
{
    bfit_op_args o = {0};
    int rc;

    if (!a->saved)
        return bfit_fail(BFIT_EINVAL, "batchnorm: backward needs the statistics forward saved");
    if (a->grad_set && !l->ops[OP_BWD_SET]) {
        bfit_op_desc set = bn_desc(l, OP_BWD_SET, BFIT_OP_BNORM_BWD, a->m, 1);
        if ((rc = bfit_layer_late_op(l, OP_BWD_SET, &set)) != BFIT_OK)
            return rc;
    }
    o.src = l->mode == BFIT_MODE_Y ? a->y : a->x[0];
    o.shift = l->mode == BFIT_MODE_Y ? l->params[P_BETA].data : NULL;
    o.diff_dst = a->dy;
    o.scale = l->params[P_GAMMA].data;
    o.mean = a->saved;
    o.var = (char *)a->saved + stat_bytes(l);
    o.diff_src = a->dx[0]; /* NULL: the op computes only the parameter gradients */
    o.diff_scale = l->params[P_GAMMA].grad;
    o.diff_shift = l->params[P_BETA].grad;
    o.workspace = a->ws;
    return bfit_op_run(l->ops[a->grad_set ? OP_BWD_SET : OP_BWD], &o);
}

const bfit_layer_vt bfit_batchnorm_vt = {
    .kind = BFIT_L_BATCHNORM,
    .nin = 1,
    .grad_set = 1,
    .modes = BFIT_MODE(BFIT_MODE_X) | BFIT_MODE(BFIT_MODE_Y),
    .init = init,
    .prepare = prepare,
    .init_params = init_params,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL, /* ops are freed generically */
    .min_batch = min_batch,
};
