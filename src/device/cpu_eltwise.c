/* cpu_eltwise.c - ELTWISE_FWD/BWD on oneDNN: relu and the two gelus over a
 * flat array of n elements (the shape does not matter elementwise). The
 * backward takes the forward's input (src), which every algorithm here
 * supports, so a layer need not keep anything else. */
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
    };
    if (!a->src || !a->dst)
        return bfit_fail(BFIT_EINVAL, "eltwise forward: src and dst are required");
    return cpu_exec(op, 0, args, 2, a->workspace, "eltwise forward");
}

static int run_bwd(cpu_op *op, const bfit_op_args *a)
{
    const cpu_arg args[] = {
        {DNNL_ARG_SRC, a->src, arg_md(op, DNNL_ARG_SRC)},
        {DNNL_ARG_DIFF_DST, a->diff_dst, arg_md(op, DNNL_ARG_DIFF_DST)},
        {DNNL_ARG_DIFF_SRC, a->diff_src, arg_md(op, DNNL_ARG_DIFF_SRC)},
    };
    if (!a->src || !a->diff_dst || !a->diff_src)
        return bfit_fail(BFIT_EINVAL, "eltwise backward: src, diff_dst and diff_src are required");
    return cpu_exec(op, 0, args, 3, a->workspace, "eltwise backward");
}

int cpu_eltwise_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t n = d->u.elt.n;
    dnnl_memory_desc_t md;
    dnnl_eltwise_desc_t fwd, bwd;
    dnnl_primitive_attr_t attr;
    dnnl_alg_kind_t alg;
    int rc;

    if (n < 1)
        return bfit_fail(BFIT_EINVAL, "eltwise: need at least one element, got %lld", (long long)n);
    switch (d->u.elt.alg) {
    case BFIT_ELT_RELU: alg = dnnl_eltwise_relu; break; /* alpha 0: plain relu */
    case BFIT_ELT_GELU_ERF: alg = dnnl_eltwise_gelu_erf; break;
    case BFIT_ELT_GELU_TANH: alg = dnnl_eltwise_gelu_tanh; break;
    default: return bfit_fail(BFIT_EINVAL, "eltwise: unknown algorithm %d", (int)d->u.elt.alg);
    }
    if ((rc = cpu_md_dt(&md, 1, &n, d->dtype)) != BFIT_OK)
        return rc;
    CPU_TRY(dnnl_eltwise_forward_desc_init(&fwd, dnnl_forward_training, alg, &md, 0.f, 0.f),
            "eltwise forward descriptor");
    if ((rc = cpu_attr_user_scratchpad(&attr)) != BFIT_OK)
        return rc;
    op->ws = 0;
    op->saved = 0;
    if (d->kind == BFIT_OP_ELTWISE_FWD) {
        rc = cpu_pd_create(&op->pd[0], &fwd, attr, cpu_dev(op)->eng, NULL, &op->ws);
        op->run = run_fwd;
    } else {
        /* the backward needs the forward's pd as a hint; it is kept in pd[1] */
        size_t ws_hint = 0;
        rc = cpu_pd_create(&op->pd[1], &fwd, attr, cpu_dev(op)->eng, NULL, &ws_hint);
        if (rc == BFIT_OK && dnnl_eltwise_backward_desc_init(&bwd, alg, &md, &md, 0.f, 0.f) != dnnl_success)
            rc = bfit_fail(BFIT_EDEVICE, "oneDNN: eltwise backward descriptor failed");
        if (rc == BFIT_OK)
            rc = cpu_pd_create(&op->pd[0], &bwd, attr, cpu_dev(op)->eng, op->pd[1], &op->ws);
        op->run = run_bwd;
    }
    dnnl_primitive_attr_destroy(attr);
    if (rc != BFIT_OK)
        return rc;
    CPU_TRY(dnnl_primitive_create(&op->prim[0], op->pd[0]), "eltwise primitive");
    return BFIT_OK;
}
