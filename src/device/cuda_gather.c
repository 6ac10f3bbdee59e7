/* cuda_gather.c - GATHER_FWD/BWD on the GPU (cuda_gather.cu): the rows of
 * each sample that args.rows names, and their gradient put back in place. */
#include "base/err.h"
#include "device/cuda.h"

static int run(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int back = d->kind == BFIT_OP_GATHER_BWD;
    const void *in = back ? a->diff_dst : a->src;
    void *out = back ? a->diff_src : a->dst;

    if (!in || !out || !a->rows)
        return bfit_fail(BFIT_EINVAL, "rows gather: %s and rows are required",
                         back ? "diff_dst, diff_src" : "src, dst");
    return cuda_launched(bk_gather(cuda_dev(op)->stream, (int)d->dtype, in, out, a->rows, d->u.gat.n, d->u.gat.T,
                                   d->u.gat.K, d->u.gat.C, back),
                         back ? "rows gather backward" : "rows gather");
}

int cuda_gather_init(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;

    if (d->u.gat.n < 1 || d->u.gat.T < 1 || d->u.gat.K < 1 || d->u.gat.C < 1 || d->u.gat.K > d->u.gat.T)
        return bfit_fail(BFIT_EINVAL, "rows gather: n, T, K and C must be positive, K <= T");
    op->ws = op->saved = 0;
    op->run = run;
    return BFIT_OK;
}
