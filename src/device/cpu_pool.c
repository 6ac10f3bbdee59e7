/* cpu_pool.c - 2-d max and average pooling on oneDNN, forward and backward,
 * plain nchw layout; 2x2 max pools of stride 2 are our own (cpu_maxpool.c).
 *
 * Training max pooling keeps oneDNN's workspace (argmax indices) from forward
 * to backward: that is the op's `saved` buffer. Average pooling counts the
 * zero padding in the divisor like PyTorch's default (count_include_pad), so
 * it is oneDNN's avg_include_padding. The backward pd needs the forward pd as
 * a hint: it sits in pd[0] (no primitive), the backward one in pd[1]. */
#include "base/err.h"
#include "device/cpu.h"

enum { P_FWD = 0, P_BWD = 1 };

static const dnnl_memory_desc_t *qmd(const_dnnl_primitive_desc_t pd, dnnl_query_t what)
{
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    dnnl_primitive_desc_t pd = op->pd[P_FWD];
    cpu_arg args[] = {
        {DNNL_ARG_SRC, a->src, qmd(pd, dnnl_query_src_md)},
        {DNNL_ARG_DST, a->dst, qmd(pd, dnnl_query_dst_md)},
        {DNNL_ARG_WORKSPACE, op->saved ? a->saved : NULL, qmd(pd, dnnl_query_workspace_md)},
    };
    if (!a->src || !a->dst || (op->saved && !a->saved))
        return bfit_fail(BFIT_EINVAL, "pool forward: src, dst (and saved for training max) are required");
    return bfit_cpu_exec(op, P_FWD, args, 3, a->workspace, "pooling forward");
}

static int run_bwd(cpu_op *op, const bfit_op_args *a)
{
    dnnl_primitive_desc_t pd = op->pd[P_BWD];
    cpu_arg args[] = {
        {DNNL_ARG_DIFF_DST, a->diff_dst, qmd(pd, dnnl_query_diff_dst_md)},
        {DNNL_ARG_DIFF_SRC, a->diff_src, qmd(pd, dnnl_query_diff_src_md)},
        /* the forward pd's workspace md: the indices forward wrote */
        {DNNL_ARG_WORKSPACE, op->saved ? a->saved : NULL, qmd(op->pd[P_FWD], dnnl_query_workspace_md)},
    };
    if (!a->diff_dst || !a->diff_src || (op->saved && !a->saved))
        return bfit_fail(BFIT_EINVAL, "pool backward: diff_dst, diff_src (and saved for max) are required");
    return bfit_cpu_exec(op, P_BWD, args, 3, a->workspace, "pooling backward");
}

static int check_desc(const bfit_op_desc *d)
{
    int64_t ih = d->u.pool.ih, iw = d->u.pool.iw, kh = d->u.pool.kh, kw = d->u.pool.kw;
    int64_t sh = d->u.pool.sh, sw = d->u.pool.sw, ph = d->u.pool.ph, pw = d->u.pool.pw;

    if (d->u.pool.n < 1 || d->u.pool.c < 1 || ih < 1 || iw < 1 || kh < 1 || kw < 1 || sh < 1 || sw < 1 ||
        ph < 0 || pw < 0 || ph >= kh || pw >= kw)
        return bfit_fail(BFIT_EINVAL, "cpu pool: bad sizes (input %lldx%lld kernel %lldx%lld stride %lldx%lld "
                         "padding %lldx%lld; padding must be below the kernel)",
                         (long long)ih, (long long)iw, (long long)kh, (long long)kw, (long long)sh,
                         (long long)sw, (long long)ph, (long long)pw);
    if (ih + 2 * ph < kh || iw + 2 * pw < kw || d->u.pool.oh != (ih + 2 * ph - kh) / sh + 1 ||
        d->u.pool.ow != (iw + 2 * pw - kw) / sw + 1)
        return bfit_fail(BFIT_EINVAL, "cpu pool: output %lldx%lld does not match input %lldx%lld, kernel %lldx%lld, "
                         "stride %lldx%lld, padding %lldx%lld",
                         (long long)d->u.pool.oh, (long long)d->u.pool.ow, (long long)ih, (long long)iw,
                         (long long)kh, (long long)kw, (long long)sh, (long long)sw, (long long)ph,
                         (long long)pw);
    return BFIT_OK;
}

int bfit_cpu_pool_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t sd[4] = {d->u.pool.n, d->u.pool.c, d->u.pool.ih, d->u.pool.iw};
    int64_t dd[4] = {d->u.pool.n, d->u.pool.c, d->u.pool.oh, d->u.pool.ow};
    dnnl_dims_t strides = {d->u.pool.sh, d->u.pool.sw}, kernel = {d->u.pool.kh, d->u.pool.kw};
    dnnl_dims_t pad = {d->u.pool.ph, d->u.pool.pw};
    dnnl_alg_kind_t alg = d->u.pool.max ? dnnl_pooling_max : dnnl_pooling_avg_include_padding;
    /* the backward pd's hint must be a training forward; an eval forward
     * keeps no indices */
    int train = d->kind == BFIT_OP_POOL_BWD || d->u.pool.training;
    dnnl_memory_desc_t src, dst;
    dnnl_pooling_desc_t fd, bd;
    dnnl_primitive_attr_t attr;
    const dnnl_memory_desc_t *wsmd;
    dnnl_status_t s;
    size_t hint_ws = 0, ws = 0;
    int rc, own;

    rc = check_desc(d);
    if (rc == BFIT_OK)
        rc = bfit_cpu_md_dt(&src, 4, sd, d->dtype);
    if (rc == BFIT_OK)
        rc = bfit_cpu_md_dt(&dst, 4, dd, d->dtype);
    if (rc != BFIT_OK)
        return rc;
    if (d->kind != BFIT_OP_POOL_FWD && d->kind != BFIT_OP_POOL_BWD)
        return bfit_fail(BFIT_EINVAL, "cpu pool: op kind %d is not a pooling", (int)d->kind);
    if ((rc = bfit_cpu_maxpool2_init(op, &own)) != BFIT_OK || own)
        return rc;
    /* padding_r = padding_l: oneDNN checks the output size with the same
     * floor division as PyTorch */
    CPU_TRY(dnnl_pooling_forward_desc_init(&fd, train ? dnnl_forward_training : dnnl_forward_inference, alg, &src,
                                           &dst, strides, kernel, pad, pad),
            "pooling forward descriptor");
    rc = bfit_cpu_attr_user_scratchpad(&attr);
    if (rc != BFIT_OK)
        return rc;
    rc = bfit_cpu_pd_create(op, P_FWD, &fd, attr, NULL,
                       d->kind == BFIT_OP_POOL_FWD ? &ws : &hint_ws);
    if (rc != BFIT_OK)
        goto free_attr;
    wsmd = qmd(op->pd[P_FWD], dnnl_query_workspace_md);
    op->saved = wsmd ? dnnl_memory_desc_get_size(wsmd) : 0;
    if (d->kind == BFIT_OP_POOL_FWD) {
        op->run = run_fwd;
    } else {
        s = dnnl_pooling_backward_desc_init(&bd, alg, &src, &dst, strides, kernel, pad, pad);
        if (s != dnnl_success) {
            rc = bfit_cpu_dnnl_check(s, "pooling backward descriptor");
            goto free_attr;
        }
        rc = bfit_cpu_pd_create(op, P_BWD, &bd, attr, op->pd[P_FWD], &ws);
        if (rc != BFIT_OK)
            goto free_attr;
        op->run = run_bwd;
    }
    op->ws = ws;
free_attr:
    dnnl_primitive_attr_destroy(attr);
    return rc;
}
