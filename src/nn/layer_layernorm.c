/* layer_layernorm.c - layer normalisation with an elementwise affine (or a
 * scale alone, bias=0):
 * over the C*H*W features of an image sample (PyTorch's nn.LayerNorm([C,H,W])),
 * of a vector (nn.LayerNorm(F)), and over the F features of each token of a
 * sequence [T, F] (nn.LayerNorm(F) applied per token).
 *
 * `rmsnorm` is the same layer without the mean and the shift (LLaMA's
 * RMSNorm: x / sqrt(mean(x^2) + eps) w, over a token's features), the
 * lnorm ops' rms form; with `offset` the scale is 1 + w (Gemma's RMSNorm,
 * w starting at 0), the ops adding the 1 as they read w.
 *
 * The per-sample mean and variance the backward needs live in `saved`
 * (training); in evaluation they are scratch in the forward workspace,
 * after the op's scratchpad. */
#include "base/err.h"
#include "nn/layer.h"

#include <stdio.h>

enum { OP_FWD, OP_BWD, OP_BWD_SET };

static int64_t cols(const bfit_layer *l);

static int init(bfit_layer *l, char *err, size_t errlen)
{
    bfit_shape in = l->in[0];

    if (!(l->cfg.eps > 0)) {
        snprintf(err, errlen, "%s eps must be positive, got %g", bfit_layer_kind_name(l->cfg.kind), (double)l->cfg.eps);
        return BFIT_EINVAL;
    }
    if (l->cfg.offset && (l->cfg.kind != BFIT_L_RMSNORM || l->cfg.offset != 1)) {
        snprintf(err, errlen, "an offset of the scale is rmsnorm's, and 1 (1 + w): got %d on %s", l->cfg.offset,
                 bfit_layer_kind_name(l->cfg.kind));
        return BFIT_EINVAL;
    }
    l->out = in;
    /* bias=0: scale only (nanoGPT's LayerNorm(bias=False)); RMSNorm has no shift */
    l->nparams = l->cfg.bias && l->cfg.kind == BFIT_L_LAYERNORM ? 2 : 1;
    /* PyTorch's shapes: [F] for a vector or a token, [C,H,W] otherwise */
    l->params[0] = (bfit_param){.name = "weight", .ndim = 3, .dim = {in.c, in.h, in.w}, .trainable = 1};
    l->params[1] = (bfit_param){.name = "bias", .ndim = 3, .dim = {in.c, in.h, in.w}, .trainable = 1};
    if (bfit_shape_is_vector(in) || in.nd == 2) {
        l->params[0].ndim = l->params[1].ndim = 1;
        l->params[0].dim[0] = l->params[1].dim[0] = cols(l);
    }
    return BFIT_OK;
}

/* Normalised together: a token's features, or a whole image or vector. */
static int64_t cols(const bfit_layer *l) { return l->in[0].nd == 2 ? l->in[0].d[1] : bfit_shape_numel(l->in[0]); }
static int64_t nrows(const bfit_layer *l, int m) { return (int64_t)m * bfit_shape_numel(l->in[0]) / cols(l); }
static size_t stat_bytes(const bfit_layer *l, int m) { return BFIT_ALIGN_UP((size_t)nrows(l, m) * bfit_dtype_size(BFIT_F32)); } /* statistics are f32 */

static bfit_op_desc ln_desc(const bfit_layer *l, int m, int acc)
{
    bfit_op_desc d = {.kind = BFIT_OP_LNORM_FWD, .dtype = l->dtype, .accumulate = acc};
    d.u.lnorm.rows = nrows(l, m);
    d.u.lnorm.cols = cols(l);
    d.u.lnorm.eps = l->cfg.eps;
    d.u.lnorm.rms = l->cfg.kind == BFIT_L_RMSNORM;
    d.u.lnorm.goff = (float)l->cfg.offset;
    d.u.lnorm.noshift = l->nparams < 2;
    return d;
}

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = ln_desc(l, m, 1);
    int rc;

    /* the backward adds to the gradients (one setting them is made at its first use) */
    if ((rc = bfit_layer_op_pair(l, &d, BFIT_OP_LNORM_BWD, training, need)) != BFIT_OK)
        return rc;
    /* mean and variance per row: kept for backward, or scratch in eval */
    if (training)
        need->saved = 2 * stat_bytes(l, m);
    else
        need->ws_fwd = BFIT_ALIGN_UP(need->ws_fwd) + 2 * stat_bytes(l, m);
    return BFIT_OK;
}

static void init_params(bfit_layer *l, uint64_t seed, float *const *host)
{
    bfit_fill_const(host[0], bfit_param_numel(&l->params[0]), 1.0f - (float)l->cfg.offset); /* a scale of 1 */
    if (l->nparams > 1)
        bfit_fill_const(host[1], bfit_param_numel(&l->params[1]), 0.0f);
}

static int forward(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};
    char *mean;

    mean = bfit_layer_stats_at(l, a->saved, a->ws);
    o.src = a->x[0];
    o.dst = a->y;
    o.scale = l->params[0].data;
    o.shift = l->nparams > 1 ? l->params[1].data : NULL;
    o.mean = mean;
    o.var = mean + stat_bytes(l, a->m);
    o.workspace = a->ws;
    return bfit_op_run(l->ops[OP_FWD], &o);
}

static int backward(bfit_layer *l, const bfit_bwd_args *a)
{
    bfit_op_args o = {0};
    int rc;

    if (a->grad_set && !l->ops[OP_BWD_SET]) {
        bfit_op_desc set = ln_desc(l, a->m, 0);
        set.kind = BFIT_OP_LNORM_BWD;
        if ((rc = bfit_layer_late_op(l, OP_BWD_SET, &set)) != BFIT_OK)
            return rc;
    }
    o.src = a->x[0];
    o.mean = a->saved;
    o.var = (char *)a->saved + stat_bytes(l, a->m);
    o.diff_dst = a->dy;
    o.scale = l->params[0].data;
    /* dx not wanted (first layer): oneDNN computes it anyway, so it is
     * written in place over dy, which is dead after this call */
    o.diff_src = a->dx[0] ? a->dx[0] : (void *)a->dy;
    o.diff_scale = l->params[0].grad;
    o.diff_shift = l->nparams > 1 ? l->params[1].grad : NULL;
    o.workspace = a->ws;
    return bfit_op_run(l->ops[a->grad_set ? OP_BWD_SET : OP_BWD], &o);
}

const bfit_layer_vt bfit_layernorm_vt = {
    .kind = BFIT_L_LAYERNORM,
    .nin = 1,
    .grad_set = 1,
    .modes = BFIT_MODE(BFIT_MODE_X),
    .init = init,
    .prepare = prepare,
    .init_params = init_params,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL,
};

const bfit_layer_vt bfit_rmsnorm_vt = {
    .kind = BFIT_L_RMSNORM,
    .nin = 1,
    .grad_set = 1,
    .modes = BFIT_MODE(BFIT_MODE_X),
    .init = init,
    .prepare = prepare,
    .init_params = init_params,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL,
};
