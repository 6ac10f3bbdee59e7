/* cpu_lnorm.c - LNORM_FWD/BWD on oneDNN: layer normalisation over the cols of
 * [rows, cols] with a per-column scale and shift.
 *
 * The forward always computes the row statistics into mean/var (the caller
 * provides them: kept for backward in training, scratch in eval). oneDNN's
 * backward overwrites diff_scale/diff_shift, so accumulation goes through two
 * temporaries placed after the scratchpad in the workspace, then is added. */
#include "base/err.h"
#include "device/cpu.h"

static const_dnnl_memory_desc_t arg_md(const cpu_op *op, int arg)
{
    return dnnl_primitive_desc_query_md(op->pd[0], dnnl_query_exec_arg_md, arg);
}

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    const cpu_arg args[] = {
        {DNNL_ARG_SRC, a->src, arg_md(op, DNNL_ARG_SRC)},
        {DNNL_ARG_DST, a->dst, arg_md(op, DNNL_ARG_DST)},
        {DNNL_ARG_SCALE, a->scale, arg_md(op, DNNL_ARG_SCALE)},
        {DNNL_ARG_SHIFT, a->shift, arg_md(op, DNNL_ARG_SHIFT)},
        {DNNL_ARG_MEAN, a->mean, arg_md(op, DNNL_ARG_MEAN)},
        {DNNL_ARG_VARIANCE, a->var, arg_md(op, DNNL_ARG_VARIANCE)},
    };
    if (!a->src || !a->dst || !a->scale || !a->shift || !a->mean || !a->var)
        return bfit_fail(BFIT_EINVAL, "layer norm forward: src, dst, scale, shift, mean and var are required");
    return bfit_cpu_exec(op, 0, args, 6, a->workspace, "layer norm forward");
}

static int run_bwd(cpu_op *op, const bfit_op_args *a)
{
    int64_t cols = op->base.desc.u.lnorm.cols;
    int acc = op->base.desc.accumulate;
    /* temporaries sit after the (aligned) scratchpad; see init */
    size_t off = (size_t)(op->ws - 2 * BFIT_ALIGN_UP((size_t)cols * sizeof(float)));
    float *ds = acc ? (float *)((char *)a->workspace + off) : a->diff_scale;
    float *dh = acc ? ds + BFIT_ALIGN_UP((size_t)cols * sizeof(float)) / sizeof(float) : a->diff_shift;
    const cpu_arg args[] = {
        {DNNL_ARG_SRC, a->src, arg_md(op, DNNL_ARG_SRC)},
        {DNNL_ARG_MEAN, a->mean, arg_md(op, DNNL_ARG_MEAN)},
        {DNNL_ARG_VARIANCE, a->var, arg_md(op, DNNL_ARG_VARIANCE)},
        {DNNL_ARG_DIFF_DST, a->diff_dst, arg_md(op, DNNL_ARG_DIFF_DST)},
        {DNNL_ARG_SCALE, a->scale, arg_md(op, DNNL_ARG_SCALE)},
        /* oneDNN 2.6 refuses a use_shift backward without a shift argument,
         * though the shift does not enter any gradient: any [cols] buffer */
        {DNNL_ARG_SHIFT, a->shift ? a->shift : a->scale, arg_md(op, DNNL_ARG_SHIFT)},
        {DNNL_ARG_DIFF_SRC, a->diff_src, arg_md(op, DNNL_ARG_DIFF_SRC)},
        {DNNL_ARG_DIFF_SCALE, ds, arg_md(op, DNNL_ARG_DIFF_SCALE)},
        {DNNL_ARG_DIFF_SHIFT, dh, arg_md(op, DNNL_ARG_DIFF_SHIFT)},
    };
    float *gs = a->diff_scale, *gh = a->diff_shift;
    int rc;

    if (!a->src || !a->mean || !a->var || !a->diff_dst || !a->scale || !a->diff_src || !gs || !gh ||
        (acc && !a->workspace))
        return bfit_fail(BFIT_EINVAL, "layer norm backward: src, mean, var, diff_dst, scale, diff_src, "
                                      "diff_scale, diff_shift and a workspace are required");
    rc = bfit_cpu_exec(op, 0, args, 9, a->workspace, "layer norm backward");
    if (rc != BFIT_OK || !acc)
        return rc;
    BFIT_PAR_FOR_IF(cols > 16384, for (int64_t j = 0; j < cols; j++) {
        gs[j] += ds[j];
        gh[j] += dh[j];
    });
    return BFIT_OK;
}

int bfit_cpu_lnorm_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t dims[2] = {d->u.lnorm.rows, d->u.lnorm.cols};
    unsigned flags = dnnl_use_scale | dnnl_use_shift;
    dnnl_memory_desc_t data, stat;
    dnnl_layer_normalization_desc_t fwd, bwd;
    dnnl_primitive_attr_t attr;
    size_t ws_hint = 0;
    int rc;

    if (dims[0] < 1 || dims[1] < 1)
        return bfit_fail(BFIT_EINVAL, "layer norm: rows and cols must be positive, got %lldx%lld",
                         (long long)dims[0], (long long)dims[1]);
    if (!(d->u.lnorm.eps > 0))
        return bfit_fail(BFIT_EINVAL, "layer norm: eps must be positive, got %g", (double)d->u.lnorm.eps);
    if ((rc = bfit_cpu_md_dt(&data, 2, dims, d->dtype)) != BFIT_OK || (rc = bfit_cpu_md(&stat, 1, dims)) != BFIT_OK)
        return rc;
    CPU_TRY(dnnl_layer_normalization_forward_desc_init(&fwd, dnnl_forward_training, &data, &stat,
                                                       d->u.lnorm.eps, flags),
            "layer norm forward descriptor");
    if ((rc = bfit_cpu_attr_user_scratchpad(&attr)) != BFIT_OK)
        return rc;
    op->ws = 0;
    op->saved = 0;
    if (d->kind == BFIT_OP_LNORM_FWD) {
        rc = bfit_cpu_pd_create(op, 0, &fwd, attr, NULL, &op->ws);
        op->run = run_fwd;
    } else {
        rc = bfit_cpu_pd_create(op, 1, &fwd, attr, NULL, &ws_hint);
        if (rc == BFIT_OK && dnnl_layer_normalization_backward_desc_init(&bwd, dnnl_backward, &data, &data, &stat,
                                                                         d->u.lnorm.eps, flags) != dnnl_success)
            rc = bfit_fail(BFIT_EDEVICE, "oneDNN: layer norm backward descriptor failed");
        if (rc == BFIT_OK)
            rc = bfit_cpu_pd_create(op, 0, &bwd, attr, op->pd[1], &op->ws);
        /* workspace: [scratchpad][diff_scale temp][diff_shift temp], 64-aligned */
        if (rc == BFIT_OK && d->accumulate)
            op->ws = BFIT_ALIGN_UP(op->ws) + 2 * BFIT_ALIGN_UP((size_t)dims[1] * sizeof(float));
        op->run = run_bwd;
    }
    dnnl_primitive_attr_destroy(attr);
    if (rc != BFIT_OK)
        return rc;
    return BFIT_OK;
}
