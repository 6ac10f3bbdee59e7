/* cuda_repeat.c - REPEAT_FWD/BWD on the GPU (cuda_repeat.cu): grouped-query
 * attention's key and value heads repeated, and their gradients summed. */
#include "base/err.h"
#include "device/cuda.h"

static int run(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int back = d->kind == BFIT_OP_REPEAT_BWD;
    const void *in = back ? a->diff_dst : a->src;
    void *out = back ? a->diff_src : a->dst;

    if (!in || !out)
        return bfit_fail(BFIT_EINVAL, "head repeat: %s are required", back ? "diff_dst and diff_src" : "src and dst");
    return cuda_launched(bk_repeat(cuda_dev(op)->stream, (int)d->dtype, in, out, d->u.rep.rows, d->u.rep.g,
                                   d->u.rep.r, d->u.rep.d, back),
                         back ? "head repeat backward" : "head repeat");
}

int cuda_repeat_init(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;

    if (d->u.rep.rows < 1 || d->u.rep.g < 1 || d->u.rep.r < 1 || d->u.rep.d < 1)
        return bfit_fail(BFIT_EINVAL, "head repeat: rows, heads, copies and head size must be positive");
    op->ws = op->saved = 0;
    op->run = run;
    return BFIT_OK;
}
