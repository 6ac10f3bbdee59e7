/* layer_groupnorm.c - group normalisation, PyTorch's nn.GroupNorm(G, C):
 * an image's (or vector's) C channels in G groups, each sample's group
 * normalised over its C/G channels and their H*W positions, then each
 * channel scaled and shifted (learned, starting at 1 and 0, no weight
 * decay, f32 under mixed precision as every norm's).
 *
 * Unlike batch normalisation nothing depends on the other samples: a
 * micro-batch of 8 or of 64 computes the same for each sample, so a step
 * split into micro-batches (gradient accumulation, dynamic micro-batching)
 * trains exactly as the whole batch would. The per-(sample, group) mean and
 * variance the backward reads live in `saved` (training); in evaluation
 * they are scratch in the forward's workspace. */
#include "base/err.h"
#include "nn/layer.h"

#include <stdio.h>

enum { OP_FWD, OP_BWD, OP_BWD_SET };

static int init(bfit_layer *l, char *err, size_t errlen)
{
    bfit_shape in = l->in[0];
    char buf[48];

    if (!bfit_shape_is_image(in) || l->cfg.units < 1 || in.c % l->cfg.units) {
        snprintf(err, errlen, "groupnorm takes an image CxHxW or a vector whose channels the groups divide: %d "
                 "groups do not fit the input %s", l->cfg.units, bfit_shape_str(in, buf, sizeof buf));
        return BFIT_EINVAL;
    }
    if (!(l->cfg.eps > 0)) {
        snprintf(err, errlen, "groupnorm eps must be positive, got %g", (double)l->cfg.eps);
        return BFIT_EINVAL;
    }
    l->out = in;
    l->nparams = 2;
    l->params[0] = (bfit_param){.name = "weight", .ndim = 1, .dim = {in.c}, .trainable = 1};
    l->params[1] = (bfit_param){.name = "bias", .ndim = 1, .dim = {in.c}, .trainable = 1};
    return BFIT_OK;
}

static size_t stat_bytes(const bfit_layer *l, int m)
{
    return BFIT_ALIGN_UP((size_t)m * (size_t)l->cfg.units * bfit_dtype_size(BFIT_F32)); /* f32 statistics */
}

static bfit_op_desc gn_desc(const bfit_layer *l, bfit_op_kind kind, int m, int acc)
{
    bfit_op_desc d = {.kind = kind, .dtype = l->dtype, .accumulate = acc};
    d.u.gnorm.n = m;
    d.u.gnorm.c = l->in[0].c;
    d.u.gnorm.hw = (int64_t)l->in[0].h * l->in[0].w;
    d.u.gnorm.groups = l->cfg.units;
    d.u.gnorm.eps = l->cfg.eps;
    return d;
}

static int prepare(bfit_layer *l, int m, int training, bfit_layer_need *need)
{
    bfit_op_desc d = gn_desc(l, BFIT_OP_GNORM_FWD, m, 1);
    int rc;

    /* the backward adds to the gradients (one setting them is made at its first use) */
    if ((rc = bfit_layer_op_pair(l, &d, BFIT_OP_GNORM_BWD, training, need)) != BFIT_OK)
        return rc;
    if (training)
        need->saved = 2 * stat_bytes(l, m);
    else
        need->ws_fwd = BFIT_ALIGN_UP(need->ws_fwd) + 2 * stat_bytes(l, m);
    return BFIT_OK;
}

static void init_params(bfit_layer *l, uint64_t seed, float *const *host)
{
    (void)seed;
    bfit_fill_const(host[0], l->in[0].c, 1.0f);
    bfit_fill_const(host[1], l->in[0].c, 0.0f);
}

static int forward(bfit_layer *l, const bfit_fwd_args *a)
{
    bfit_op_args o = {0};
    char *mean = bfit_layer_stats_at(l, a->saved, a->ws);

    o.src = a->x[0];
    o.dst = a->y;
    o.scale = l->params[0].data;
    o.shift = l->params[1].data;
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
        bfit_op_desc set = gn_desc(l, BFIT_OP_GNORM_BWD, a->m, 0);
        if ((rc = bfit_layer_late_op(l, OP_BWD_SET, &set)) != BFIT_OK)
            return rc;
    }
    o.src = a->x[0];
    o.mean = a->saved;
    o.var = (char *)a->saved + stat_bytes(l, a->m);
    o.diff_dst = a->dy;
    o.scale = l->params[0].data;
    o.diff_src = a->dx[0]; /* NULL: the parameters' gradients only */
    o.diff_scale = l->params[0].grad;
    o.diff_shift = l->params[1].grad;
    o.workspace = a->ws;
    return bfit_op_run(l->ops[a->grad_set ? OP_BWD_SET : OP_BWD], &o);
}

const bfit_layer_vt bfit_groupnorm_vt = {
    .kind = BFIT_L_GROUPNORM,
    .nin = 1,
    .grad_set = 1,
    .modes = BFIT_MODE(BFIT_MODE_X),
    .init = init,
    .prepare = prepare,
    .init_params = init_params,
    .forward = forward,
    .backward = backward,
    .unprepare = NULL, /* ops are freed generically */
};
