/* cuda_rope.c - ROPE_FWD/BWD on the GPU (cuda_rope.cu): a rotary position
 * embedding of the tokens of [n, T, C] in heads of d columns, in any float
 * dtype; the workspace holds the angles' cos and sin (T d floats), made at
 * every call as on the CPU (cpu_rope.c). */
#include "base/err.h"
#include "device/cuda.h"

static int run(cuda_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int fwd = d->kind == BFIT_OP_ROPE_FWD;
    const void *x = fwd ? a->src : a->diff_dst;
    void *y = fwd ? a->dst : a->diff_src;

    if (!x || !y || !a->workspace)
        return bfit_fail(BFIT_EINVAL, "rotary embedding: %s and a workspace are required",
                         fwd ? "src, dst" : "diff_dst, diff_src");
    return cuda_launched(bk_rope(cuda_dev(op)->stream, (int)d->dtype, x, y, cuda_ws(op, a), d->u.rope.n, d->u.rope.T,
                                 d->u.rope.C, d->u.rope.d, d->u.rope.theta, !fwd),
                         fwd ? "rotary embedding" : "rotary embedding backward");
}

int cuda_rope_init(cuda_op *op)
{
    const bfit_op_desc *d = &op->base.desc;

    if (!bfit_rope_ok(d))
        return bfit_fail(BFIT_EINVAL, BFIT_ROPE_BAD, BFIT_ROPE_BAD_ARGS(d));
    op->ws = (size_t)(d->u.rope.T * d->u.rope.d) * sizeof(float) + CUDA_WS_ALIGN;
    op->saved = 0;
    op->run = run;
    return BFIT_OK;
}
