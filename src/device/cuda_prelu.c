/* cuda_prelu.c - PRELU_FWD/BWD on the GPU (cuda_prelu.cu): PyTorch's
 * PReLU, y = x where x > 0, else a x (linear: a x everywhere, LayerScale),
 * with f32 slopes (one per channel or one for all) over [n, c, hw] in any
 * float dtype, as cpu_prelu.c. The backward's workspace holds a double per
 * row (sample, channel): the rows' sums of dy x where x <= 0 (linear:
 * everywhere), which one thread per slope then adds in the CPU's order;
 * with hw == 1 a double per part (chunk of BK_PRELU_CH samples, channel),
 * summed as the CPU sums them: the same bits. Plain nchw only: the GPU
 * asks for no blocked layout (bfit_device_layout_block is 0 here), so a
 * blocked op is a caller's error, refused. */
#include "base/err.h"
#include "device/cuda.h"

static bk_prelu geom(const cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    bk_prelu p = {d->u.prelu.n, d->u.prelu.c, d->u.prelu.hw, d->u.prelu.shared, (int)d->dtype, d->u.prelu.linear};
    return p;
}

static int run_fwd(cuda_op *op, const bfit_op_args *a)
{
    bk_prelu p = geom(op);
    if (!a->src || !a->weights || !a->dst)
        return bfit_fail(BFIT_EINVAL, "prelu: src, weights (the slopes) and dst are required");
    return cuda_launched(bk_prelu_fwd(cuda_dev(op)->stream, &p, a->src, a->weights, a->dst), "prelu");
}

/* diff_src NULL: the slopes' gradient only; diff_weights NULL: the input's
 * only (the workspace then unused) */
static int run_bwd(cuda_op *op, const bfit_op_args *a)
{
    bk_prelu p = geom(op);
    if (!a->src || !a->weights || !a->diff_dst || (a->diff_weights && !a->workspace))
        return bfit_fail(BFIT_EINVAL, "prelu backward: src, weights (the slopes), diff_dst and, for diff_weights, "
                                      "the workspace are required");
    if (!a->diff_src && !a->diff_weights)
        return BFIT_OK;
    return cuda_launched(bk_prelu_bwd(cuda_dev(op)->stream, &p, a->src, a->weights, a->diff_dst, a->diff_src,
                                      a->diff_weights, op->base.desc.accumulate, cuda_ws(op, a)),
                         "prelu backward");
}

int cuda_prelu_init(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;

    op->ws = op->saved = 0;
    if (d->u.prelu.n < 1 || d->u.prelu.c < 1 || d->u.prelu.hw < 1)
        return bfit_fail(BFIT_EINVAL, "prelu: n %lld, c %lld and hw %lld must be positive", (long long)d->u.prelu.n,
                         (long long)d->u.prelu.c, (long long)d->u.prelu.hw);
    if (d->u.prelu.blk)
        return bfit_fail(BFIT_EINVAL, "cuda prelu: nChw%dc data is the cpu's layout; the GPU's is nchw",
                         d->u.prelu.blk);
    /* the rows' (hw == 1: the parts') double sums, aligned by cuda_ws within the slack */
    if (d->kind == BFIT_OP_PRELU_BWD) {
        bk_prelu p = geom(op);
        op->ws = (size_t)((p.hw == 1 ? bk_prelu_chunks(&p) : p.n) * p.c) * sizeof(double) + CUDA_WS_ALIGN;
    }
    op->run = d->kind == BFIT_OP_PRELU_FWD ? run_fwd : run_bwd;
    return BFIT_OK;
}
