/* cpu_eltwise.c - ELTWISE_FWD/BWD on oneDNN: relu and the two gelus over a
 * flat array of n elements (the shape does not matter elementwise). The
 * backward takes the forward's input (src), which every algorithm here
 * supports; relu may instead take the forward's output (use_dst), which
 * oneDNN also supports, or keep only its sign bits (bits: our own loops), so
 * that a model keeps whichever it keeps anyway, or 1 bit per element. */
#include "base/err.h"
#include "device/cpu.h"
#include "device/half.h"

/* ---- relu with a bit mask -------------------------------------------------- */

/* 64 elements per word, one thread per word range: no two threads write a
 * word. f32 and the 16-bit floats have loops of their own (a per-element
 * dtype switch and rounding made bf16 three times slower than f32). */
static int run_bits_fwd(cpu_op *op, const bfit_op_args *a)
{
    int64_t n = op->base.desc.u.elt.n, nw = (n + 63) / 64;
    bfit_dtype t = op->base.desc.dtype;
    uint64_t *bits = a->saved;

    if (!a->src || !a->dst || !bits)
        return bfit_fail(BFIT_EINVAL, "relu forward (bits): src, dst and saved (the bits) are required");
    if (t == BFIT_F32) {
        const float *x = a->src;
        float *y = a->dst;
        BFIT_PAR_FOR_IF(n > 65536, for (int64_t w = 0; w < nw; w++) {
            uint64_t word = 0;
            int64_t lo = w * 64, hi = lo + 64 < n ? lo + 64 : n;
            for (int64_t i = lo; i < hi; i++) {
                int on = x[i] > 0.0f;
                word |= (uint64_t)on << (i - lo);
                y[i] = on ? x[i] : 0.0f;
            }
            bits[w] = word;
        });
    } else {
        /* a 16-bit float read as a signed integer is > 0 exactly when the
         * float is > 0 or a NaN of clear sign (which passes, as torch.relu's) */
        const int16_t *x = a->src;
        int16_t *y = a->dst;
        BFIT_PAR_FOR_IF(n > 65536, for (int64_t w = 0; w < nw; w++) {
            uint64_t word = 0;
            int64_t lo = w * 64, hi = lo + 64 < n ? lo + 64 : n;
            for (int64_t i = lo; i < hi; i++) {
                int on = x[i] > 0;
                word |= (uint64_t)on << (i - lo);
                y[i] = on ? x[i] : 0;
            }
            bits[w] = word;
        });
    }
    return BFIT_OK;
}

static int run_bits_bwd(cpu_op *op, const bfit_op_args *a)
{
    int64_t n = op->base.desc.u.elt.n;
    const uint64_t *bits = a->saved;

    if (!a->diff_dst || !a->diff_src || !bits)
        return bfit_fail(BFIT_EINVAL, "relu backward (bits): diff_dst, diff_src and saved (the bits) are required");
    if (op->base.desc.dtype == BFIT_F32) {
        const float *dy = a->diff_dst;
        float *dx = a->diff_src;
        BFIT_PAR_FOR_IF(n > 65536, for (int64_t i = 0; i < n; i++) {
            dx[i] = (bits[i >> 6] >> (i & 63)) & 1u ? dy[i] : 0.0f;
        });
    } else {
        const uint16_t *dy = a->diff_dst;
        uint16_t *dx = a->diff_src;
        BFIT_PAR_FOR_IF(n > 65536, for (int64_t i = 0; i < n; i++) {
            dx[i] = (bits[i >> 6] >> (i & 63)) & 1u ? dy[i] : 0;
        });
    }
    return BFIT_OK;
}

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
    int dst = op->base.desc.u.elt.use_dst;
    const cpu_arg args[] = {
        {dst ? DNNL_ARG_DST : DNNL_ARG_SRC, a->src, arg_md(op, dst ? DNNL_ARG_DST : DNNL_ARG_SRC)},
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
    if ((d->u.elt.use_dst || d->u.elt.bits) && d->u.elt.alg != BFIT_ELT_RELU)
        return bfit_fail(BFIT_EINVAL, "eltwise: only relu's backward can use the output or sign bits");
    if (d->u.elt.bits) {
        op->ws = 0;
        op->saved = (size_t)(n + 63) / 64 * 8;
        op->run = d->kind == BFIT_OP_ELTWISE_FWD ? run_bits_fwd : run_bits_bwd;
        return BFIT_OK;
    }
    switch (d->u.elt.alg) {
    case BFIT_ELT_RELU: /* alpha 0: plain relu; the dst variant computes the same, backward from dst */
        alg = d->u.elt.use_dst ? dnnl_eltwise_relu_use_dst_for_bwd : dnnl_eltwise_relu;
        break;
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
