/* cpu_matmul.c - MATMUL on oneDNN: dst[M,N] (+)= op(src) x op(weights) (+ bias).
 *
 * Transposition costs no copy: a transposed operand is the same row-major
 * buffer described with swapped strides. Accumulation (gradients summed over
 * micro-batches) is oneDNN's sum post-op, so dst is read and written once. */
#include "base/err.h"
#include "device/cpu.h"

/* [rows, cols] view of a row-major buffer; trans: the buffer is [cols, rows]. */
static int md_2d(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, int trans, bfit_dtype t)
{
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {cols, 1};

    if (trans) {
        strides[0] = 1;
        strides[1] = rows;
    }
    CPU_TRY(dnnl_memory_desc_init_by_strides(md, 2, dims, bfit_cpu_dt(t), strides), "matmul memory descriptor");
    return BFIT_OK;
}

static int make_attr(dnnl_primitive_attr_t *attr, int accumulate)
{
    dnnl_post_ops_t po;
    int rc = bfit_cpu_attr_user_scratchpad(attr);

    if (rc != BFIT_OK || !accumulate)
        return rc;
    if (dnnl_post_ops_create(&po) != dnnl_success)
        goto fail_attr;
    /* dst = 1.0 * dst + result */
    if (dnnl_post_ops_append_sum(po, 1.0f) != dnnl_success ||
        dnnl_primitive_attr_set_post_ops(*attr, po) != dnnl_success)
        goto fail_po;
    dnnl_post_ops_destroy(po);
    return BFIT_OK;
fail_po:
    dnnl_post_ops_destroy(po);
fail_attr:
    dnnl_primitive_attr_destroy(*attr);
    return bfit_fail(BFIT_EDEVICE, "oneDNN: cannot set up the matmul sum post-op");
}

static const_dnnl_memory_desc_t arg_md(const cpu_op *op, int arg)
{
    return dnnl_primitive_desc_query_md(op->pd[0], dnnl_query_exec_arg_md, arg);
}

static int run(cpu_op *op, const bfit_op_args *a)
{
    const cpu_arg args[] = {
        {DNNL_ARG_SRC, a->src, arg_md(op, DNNL_ARG_SRC)},
        {DNNL_ARG_WEIGHTS, a->weights, arg_md(op, DNNL_ARG_WEIGHTS)},
        {DNNL_ARG_BIAS, op->base.desc.u.mm.bias ? a->bias : NULL, arg_md(op, DNNL_ARG_BIAS)},
        {DNNL_ARG_DST, a->dst, arg_md(op, DNNL_ARG_DST)},
    };

    if (!a->src || !a->weights || !a->dst || (op->base.desc.u.mm.bias && !a->bias))
        return bfit_fail(BFIT_EINVAL, "matmul: src, weights, dst%s are required",
                         op->base.desc.u.mm.bias ? " and bias" : "");
    return bfit_cpu_exec(op, 0, args, 4, a->workspace, "matmul");
}

int bfit_cpu_matmul_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t M = d->u.mm.M, N = d->u.mm.N, K = d->u.mm.K;
    dnnl_memory_desc_t src, wei, bias, dst;
    dnnl_matmul_desc_t mm;
    dnnl_primitive_attr_t attr;
    dnnl_dims_t bias_dims = {1, N};
    int rc;

    if (M < 1 || N < 1 || K < 1)
        return bfit_fail(BFIT_EINVAL, "matmul: sizes must be positive, got M=%lld N=%lld K=%lld",
                         (long long)M, (long long)N, (long long)K);
    /* a parameter gradient: f32 whatever the inputs */
    if ((rc = md_2d(&src, M, K, d->u.mm.trans_src, d->dtype)) != BFIT_OK ||
        (rc = md_2d(&wei, K, N, d->u.mm.trans_weights, d->dtype)) != BFIT_OK ||
        (rc = md_2d(&dst, M, N, 0, bfit_mm_dst_f32(d) ? BFIT_F32 : d->dtype)) != BFIT_OK)
        return rc;
    CPU_TRY(dnnl_memory_desc_init_by_tag(&bias, 2, bias_dims, dnnl_f32, dnnl_ab), "matmul bias descriptor");
    CPU_TRY(dnnl_matmul_desc_init(&mm, &src, &wei, d->u.mm.bias ? &bias : NULL, &dst), "matmul descriptor");
    if ((rc = make_attr(&attr, d->accumulate)) != BFIT_OK)
        return rc;
    op->ws = 0;
    rc = bfit_cpu_pd_create(op, 0, &mm, attr, NULL, &op->ws);
    dnnl_primitive_attr_destroy(attr);
    if (rc != BFIT_OK)
        return rc;
    op->saved = 0;
    op->run = run;
    return BFIT_OK;
}
