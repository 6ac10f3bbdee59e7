/* cuda_chscale.c - CHSCALE_FWD/BWD on the GPU (cuda_chscale.cu): each
 * channel of an image times its own scale (a squeeze-and-excitation gate,
 * [n, c] against [n, c, hw]), in any float dtype, the scales and their
 * gradient in the data's dtype as on the CPU (cpu_chscale.c). No workspace:
 * the backward's sum over a channel row is one warp's. Plain nchw only: the
 * GPU asks for no blocked layout (bfit_device_layout_block is 0 here), so a
 * blocked op is a caller's error, refused. */
#include "base/err.h"
#include "device/cuda.h"

static int run_fwd(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    if (!a->src || !a->src2 || !a->dst)
        return bfit_fail(BFIT_EINVAL, "channel scaling: src, src2 (the scales) and dst are required");
    return cuda_launched(bk_chs_fwd(cuda_dev(op)->stream, (int)d->dtype, a->src, a->src2, a->dst,
                                    d->u.chs.n * d->u.chs.c, d->u.chs.hw),
                         "channel scaling");
}

/* diff_src NULL: the scales' gradient only; dst NULL: the input's only */
static int run_bwd(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    if (!a->diff_dst || (a->diff_src && !a->src2) || (a->dst && !a->src))
        return bfit_fail(BFIT_EINVAL, "channel scaling backward: diff_dst, src2 (the scales) for diff_src and src "
                                      "for dst (the scales' gradient) are required");
    if (!a->diff_src && !a->dst)
        return BFIT_OK;
    return cuda_launched(bk_chs_bwd(cuda_dev(op)->stream, (int)d->dtype, a->src, a->src2, a->diff_dst, a->diff_src,
                                    a->dst, d->u.chs.n * d->u.chs.c, d->u.chs.hw),
                         "channel scaling backward");
}

int cuda_chscale_init(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;

    op->ws = op->saved = 0;
    if (d->u.chs.n < 1 || d->u.chs.c < 1 || d->u.chs.hw < 1)
        return bfit_fail(BFIT_EINVAL, "channel scaling: n %lld, c %lld and hw %lld must be positive",
                         (long long)d->u.chs.n, (long long)d->u.chs.c, (long long)d->u.chs.hw);
    if (d->u.chs.blk)
        return bfit_fail(BFIT_EINVAL, "cuda channel scaling: nChw%dc data is the cpu's layout; the GPU's is nchw",
                         d->u.chs.blk);
    op->run = d->kind == BFIT_OP_CHSCALE_FWD ? run_fwd : run_bwd;
    return BFIT_OK;
}
