/* cuda_seqmean.c - SEQMEAN_FWD/BWD on the GPU (cuda_seqmean.cu): the mean of
 * each sequence's real tokens (or its last one), and its gradient spread over
 * them. */
#include "base/err.h"
#include "device/cuda.h"

static int run(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int back = d->kind == BFIT_OP_SEQMEAN_BWD;
    const void *in = back ? a->diff_dst : a->src;
    void *out = back ? a->diff_src : a->dst;

    if (!in || !out)
        return bfit_fail(BFIT_EINVAL, "mean of the tokens: %s are required",
                         back ? "diff_dst and diff_src" : "src and dst");
    return cuda_launched(bk_seqmean(cuda_dev(op)->stream, (int)d->dtype, in, out, a->lens, d->u.seqm.n,
                                    d->u.seqm.T, d->u.seqm.C, d->u.seqm.last, back),
                         back ? "mean of the tokens backward" : "mean of the tokens");
}

int cuda_seqmean_init(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;

    if (d->u.seqm.n < 1 || d->u.seqm.T < 1 || d->u.seqm.C < 1)
        return bfit_fail(BFIT_EINVAL, "mean of the tokens: n, T and C must be positive");
    op->ws = op->saved = 0;
    op->run = run;
    return BFIT_OK;
}
