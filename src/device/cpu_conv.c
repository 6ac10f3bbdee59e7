/* cpu_conv.c - 2-d convolution on oneDNN: forward (optional bias), backward
 * data, backward weights (optional bias gradient), plain nchw/oihw layouts.
 *
 * oneDNN overwrites diff_weights/diff_bias; with desc.accumulate the primitive
 * writes into temporaries placed after its scratchpad in the op's workspace
 * and those are added to the caller's buffers, so gradients sum over
 * micro-batches. Backward primitives need the forward pd as a hint: it sits
 * in pd[0] (no primitive), the backward one in pd[1]/prim[1]. */
#include "base/err.h"
#include "device/cpu.h"

enum { P_FWD = 0, P_BWD = 1 };

static const dnnl_memory_desc_t *qmd(const_dnnl_primitive_desc_t pd, dnnl_query_t what, int i)
{
    return dnnl_primitive_desc_query_md(pd, what, i);
}

static size_t scratch_bytes(const_dnnl_primitive_desc_t pd)
{
    const dnnl_memory_desc_t *md = qmd(pd, dnnl_query_scratchpad_md, 0);
    return md ? dnnl_memory_desc_get_size(md) : 0;
}

/* dst[i] += src[i]; parallel only where it pays. */
static void add_into(float *dst, const float *src, int64_t n)
{
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; i++)
        dst[i] += src[i];
}

static int64_t wnumel(const bfit_op_desc *d)
{
    return d->u.conv.oc * d->u.conv.ic * d->u.conv.kh * d->u.conv.kw;
}

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    dnnl_primitive_desc_t pd = op->pd[P_FWD];
    cpu_arg args[] = {
        {DNNL_ARG_SRC, a->src, qmd(pd, dnnl_query_src_md, 0)},
        {DNNL_ARG_WEIGHTS, a->weights, qmd(pd, dnnl_query_weights_md, 0)},
        {DNNL_ARG_BIAS, op->base.desc.u.conv.bias ? a->bias : NULL, qmd(pd, dnnl_query_weights_md, 1)},
        {DNNL_ARG_DST, a->dst, qmd(pd, dnnl_query_dst_md, 0)},
    };
    if (!a->src || !a->weights || !a->dst || (op->base.desc.u.conv.bias && !a->bias))
        return bfit_fail(BFIT_EINVAL, "conv forward: src, weights, dst (and bias) are required");
    return cpu_exec(op, P_FWD, args, 4, a->workspace, "convolution forward");
}

static int run_bwd_data(cpu_op *op, const bfit_op_args *a)
{
    dnnl_primitive_desc_t pd = op->pd[P_BWD];
    cpu_arg args[] = {
        {DNNL_ARG_DIFF_DST, a->diff_dst, qmd(pd, dnnl_query_diff_dst_md, 0)},
        {DNNL_ARG_WEIGHTS, a->weights, qmd(pd, dnnl_query_weights_md, 0)},
        {DNNL_ARG_DIFF_SRC, a->diff_src, qmd(pd, dnnl_query_diff_src_md, 0)},
    };
    if (!a->diff_dst || !a->weights || !a->diff_src)
        return bfit_fail(BFIT_EINVAL, "conv backward data: diff_dst, weights, diff_src are required");
    return cpu_exec(op, P_BWD, args, 3, a->workspace, "convolution backward data");
}

static int run_bwd_weights(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    dnnl_primitive_desc_t pd = op->pd[P_BWD];
    int bias = d->u.conv.bias, rc;
    void *dw = a->diff_weights, *db = bias ? a->diff_bias : NULL;

    if (!a->src || !a->diff_dst || !dw || (bias && !db))
        return bfit_fail(BFIT_EINVAL,
                         "conv backward weights: src, diff_dst, diff_weights (and diff_bias) are required");
    if (d->accumulate) {
        /* temporaries after the scratchpad, 64-byte aligned like every carve */
        char *ws = a->workspace;
        if (!ws)
            return bfit_fail(BFIT_EINVAL, "conv backward weights: accumulate needs the workspace");
        dw = ws + BFIT_ALIGN_UP(scratch_bytes(pd));
        db = bias ? (char *)dw + BFIT_ALIGN_UP((size_t)wnumel(d) * sizeof(float)) : NULL;
    }
    {
        cpu_arg args[] = {
            {DNNL_ARG_SRC, a->src, qmd(pd, dnnl_query_src_md, 0)},
            {DNNL_ARG_DIFF_DST, a->diff_dst, qmd(pd, dnnl_query_diff_dst_md, 0)},
            {DNNL_ARG_DIFF_WEIGHTS, dw, qmd(pd, dnnl_query_diff_weights_md, 0)},
            {DNNL_ARG_DIFF_BIAS, db, qmd(pd, dnnl_query_diff_weights_md, 1)},
        };
        rc = cpu_exec(op, P_BWD, args, 4, a->workspace, "convolution backward weights");
    }
    if (rc != BFIT_OK || !d->accumulate)
        return rc;
    add_into(a->diff_weights, dw, wnumel(d));
    if (bias)
        add_into(a->diff_bias, db, d->u.conv.oc);
    return BFIT_OK;
}

/* Check the geometry: PyTorch's floor rule for the output size. */
static int check_desc(const bfit_op_desc *d)
{
    int64_t n = d->u.conv.n, ic = d->u.conv.ic, ih = d->u.conv.ih, iw = d->u.conv.iw;
    int64_t oc = d->u.conv.oc, kh = d->u.conv.kh, kw = d->u.conv.kw, sh = d->u.conv.sh, sw = d->u.conv.sw;
    int64_t ph = d->u.conv.ph, pw = d->u.conv.pw;

    if (d->dtype != BFIT_F32)
        return bfit_fail(BFIT_EINVAL, "cpu conv: only f32 for now");
    if (n < 1 || ic < 1 || ih < 1 || iw < 1 || oc < 1 || kh < 1 || kw < 1 || sh < 1 || sw < 1 ||
        ph < 0 || pw < 0)
        return bfit_fail(BFIT_EINVAL, "cpu conv: bad sizes (n %lld ic %lld %lldx%lld oc %lld k %lldx%lld s %lldx%lld)",
                         (long long)n, (long long)ic, (long long)ih, (long long)iw, (long long)oc,
                         (long long)kh, (long long)kw, (long long)sh, (long long)sw);
    if (ih + 2 * ph < kh || iw + 2 * pw < kw || d->u.conv.oh != (ih + 2 * ph - kh) / sh + 1 ||
        d->u.conv.ow != (iw + 2 * pw - kw) / sw + 1)
        return bfit_fail(BFIT_EINVAL, "cpu conv: output %lldx%lld does not match input %lldx%lld, kernel %lldx%lld, "
                         "stride %lldx%lld, padding %lldx%lld",
                         (long long)d->u.conv.oh, (long long)d->u.conv.ow, (long long)ih, (long long)iw,
                         (long long)kh, (long long)kw, (long long)sh, (long long)sw, (long long)ph,
                         (long long)pw);
    return BFIT_OK;
}

int cpu_conv_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t sd[4] = {d->u.conv.n, d->u.conv.ic, d->u.conv.ih, d->u.conv.iw};
    int64_t wd[4] = {d->u.conv.oc, d->u.conv.ic, d->u.conv.kh, d->u.conv.kw};
    int64_t dd[4] = {d->u.conv.n, d->u.conv.oc, d->u.conv.oh, d->u.conv.ow};
    int64_t bd[1] = {d->u.conv.oc};
    dnnl_dims_t strides = {d->u.conv.sh, d->u.conv.sw}, pad = {d->u.conv.ph, d->u.conv.pw};
    dnnl_memory_desc_t src, w, b, dst;
    dnnl_convolution_desc_t fd, bdesc;
    dnnl_primitive_attr_t attr;
    dnnl_status_t s;
    size_t hint_ws = 0, ws = 0;
    int bias = d->u.conv.bias, rc;

    rc = check_desc(d);
    if (rc == BFIT_OK)
        rc = cpu_md(&src, 4, sd);
    if (rc == BFIT_OK)
        rc = cpu_md(&w, 4, wd);
    if (rc == BFIT_OK)
        rc = cpu_md(&b, 1, bd);
    if (rc == BFIT_OK)
        rc = cpu_md(&dst, 4, dd);
    if (rc != BFIT_OK)
        return rc;
    /* padding_r = padding_l: oneDNN checks the output size with PyTorch's
     * floor division, and windows never reach the unused right padding */
    CPU_TRY(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &src, &w,
                                               bias ? &b : NULL, &dst, strides, pad, pad),
            "convolution forward descriptor");
    rc = cpu_attr_user_scratchpad(&attr);
    if (rc != BFIT_OK)
        return rc;
    rc = cpu_pd_create(&op->pd[P_FWD], &fd, attr, cpu_dev(op)->eng, NULL,
                       d->kind == BFIT_OP_CONV_FWD ? &ws : &hint_ws);
    if (rc != BFIT_OK)
        goto free_attr;

    switch (d->kind) {
    case BFIT_OP_CONV_FWD:
        op->run = run_fwd;
        s = dnnl_primitive_create(&op->prim[P_FWD], op->pd[P_FWD]);
        break;
    case BFIT_OP_CONV_BWD_DATA:
        s = dnnl_convolution_backward_data_desc_init(&bdesc, dnnl_convolution_direct, &src, &w, &dst, strides,
                                                     pad, pad);
        if (s != dnnl_success) {
            rc = cpu_dnnl_check(s, "convolution backward data descriptor");
            goto free_attr;
        }
        rc = cpu_pd_create(&op->pd[P_BWD], &bdesc, attr, cpu_dev(op)->eng, op->pd[P_FWD], &ws);
        if (rc != BFIT_OK)
            goto free_attr;
        op->run = run_bwd_data;
        s = dnnl_primitive_create(&op->prim[P_BWD], op->pd[P_BWD]);
        break;
    case BFIT_OP_CONV_BWD_WEIGHTS:
        s = dnnl_convolution_backward_weights_desc_init(&bdesc, dnnl_convolution_direct, &src, &w,
                                                        bias ? &b : NULL, &dst, strides, pad, pad);
        if (s != dnnl_success) {
            rc = cpu_dnnl_check(s, "convolution backward weights descriptor");
            goto free_attr;
        }
        rc = cpu_pd_create(&op->pd[P_BWD], &bdesc, attr, cpu_dev(op)->eng, op->pd[P_FWD], &ws);
        if (rc != BFIT_OK)
            goto free_attr;
        if (d->accumulate)
            ws = BFIT_ALIGN_UP(ws) + BFIT_ALIGN_UP((size_t)wnumel(d) * sizeof(float)) +
                 (bias ? BFIT_ALIGN_UP((size_t)d->u.conv.oc * sizeof(float)) : 0);
        op->run = run_bwd_weights;
        s = dnnl_primitive_create(&op->prim[P_BWD], op->pd[P_BWD]);
        break;
    default:
        rc = bfit_fail(BFIT_EINVAL, "cpu conv: op kind %d is not a convolution", (int)d->kind);
        goto free_attr;
    }
    if (s != dnnl_success) {
        rc = cpu_dnnl_check(s, "convolution primitive");
        goto free_attr;
    }
    op->ws = ws;
    op->saved = 0;
free_attr:
    dnnl_primitive_attr_destroy(attr);
    return rc;
}
