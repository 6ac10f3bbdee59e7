/* cuda_gnorm.c - GNORM_FWD/BWD on the GPU (cuda_gnorm.cu): PyTorch's
 * GroupNorm over [n, c, hw] in g groups, as cpu_gnorm.c: each (sample,
 * group) row normalised by its mean and biased variance (double sums, two
 * passes), then each channel scaled and shifted (f32 scale and shift, any
 * float dtype of data). The backward's workspace holds the (sample,
 * channel) parts of the scale's and shift's gradients as the CPU's does,
 * plus three doubles per row for the input's gradient, so that every step
 * is a kernel of its own with no atomics: the results repeat bit for bit.
 * Plain nchw only (the GPU asks for no blocked layout). */
#include "base/err.h"
#include "device/cuda.h"

static bk_gnorm geom(const cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    return bk_gn_geom(d->u.gnorm.n, d->u.gnorm.c, d->u.gnorm.hw, d->u.gnorm.groups, d->u.gnorm.eps, (int)d->dtype);
}

static int run_fwd(cuda_op *op, const bfit_op_args *a)
{
    bk_gnorm q = geom(op);
    if (!a->src || !a->dst || !a->scale || !a->shift || !a->mean || !a->var)
        return bfit_fail(BFIT_EINVAL, "group norm: src, dst, scale, shift, mean and var are required");
    return cuda_launched(bk_gnorm_fwd(cuda_dev(op)->stream, &q, a->src, a->scale, a->shift, a->dst, a->mean, a->var),
                         "group norm");
}

/* diff_src NULL: the scale's and shift's gradients only */
static int run_bwd(cuda_op *op, const bfit_op_args *a)
{
    bk_gnorm q = geom(op);
    double *ws = cuda_ws(op, a);

    if (!a->src || !a->diff_dst || !a->scale || !a->mean || !a->var || !a->diff_scale || !a->diff_shift || !ws)
        return bfit_fail(BFIT_EINVAL, "group norm backward: src, diff_dst, scale, mean, var, diff_scale, diff_shift "
                                      "and the workspace are required");
    return cuda_launched(bk_gnorm_bwd(cuda_dev(op)->stream, &q, a->src, a->mean, a->var, a->diff_dst, a->scale,
                                      a->diff_src, a->diff_scale, a->diff_shift, op->base.desc.accumulate, ws),
                         "group norm backward");
}

int cuda_gnorm_init(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t n = d->u.gnorm.n, c = d->u.gnorm.c, hw = d->u.gnorm.hw, g = d->u.gnorm.groups;

    op->ws = op->saved = 0;
    if (n < 1 || c < 1 || hw < 1 || g < 1 || c % g)
        return bfit_fail(BFIT_EINVAL, "group norm: n %lld, c %lld, hw %lld must be positive and the groups %lld "
                         "must divide the channels", (long long)n, (long long)c, (long long)hw, (long long)g);
    if (!(d->u.gnorm.eps > 0))
        return bfit_fail(BFIT_EINVAL, "group norm: eps must be positive, got %g", (double)d->u.gnorm.eps);
    /* declared here, so that the plan counts it; aligned by cuda_ws within the slack */
    if (d->kind == BFIT_OP_GNORM_BWD) {
        bk_gnorm q = geom(op);
        op->ws = (size_t)bk_gn_ws_doubles(&q) * sizeof(double) + CUDA_WS_ALIGN;
    }
    op->run = d->kind == BFIT_OP_GNORM_FWD ? run_fwd : run_bwd;
    return BFIT_OK;
}
