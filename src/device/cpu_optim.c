/* cpu_optim.c - the optimizer updates as device ops: SGD (momentum,
 * Nesterov, L2 weight decay) and AdamW, element by element as torch.optim's
 * single-tensor code does them.
 *
 * The coefficients of a step arrive in args.hyper, computed in double on the
 * host and rounded to float where PyTorch passes a Python float to a float
 * kernel (src/optim/optim.c); fmaf() stands where PyTorch's vectorised
 * add-with-alpha uses a fused multiply-add. That keeps our results within an
 * ulp or two of PyTorch's, not merely close. */
#include "base/err.h"
#include "device/cpu.h"
#include "device/cpu_isa.h"

#include <math.h>

/* The loops, a variant per instruction set (cpu_isa.h): AdamW's square
 * roots and divisions run at twice the rate on AVX-512's 16 lanes (1.5x the
 * update's time on the baseline's 8). Each lane computes what a scalar loop
 * would, so both give the same bits. */

/* PyTorch: d = g + wd*p; buf = first ? d : mom*buf + (1-damp)*d;
 * d = nesterov ? d + mom*buf : buf; p -= lr*d. */
BFIT_CPU_VARIANTS(void, sgd_loop,
                  (float *restrict p, const float *restrict g, float *restrict buf, int64_t n, int nesterov,
                   const float *h),
{
    const int first = h[BFIT_SGD_FIRST] != 0.0f;
    const float lr_neg = h[BFIT_SGD_LR_NEG], wd = h[BFIT_SGD_WD], mom = h[BFIT_SGD_MOM], damp1 = h[BFIT_SGD_DAMP1];

    if (!buf) {
        BFIT_PAR_FOR_IF(n >= BFIT_PAR_MIN, for (int64_t i = 0; i < n; i++) {
            float d = wd != 0.0f ? fmaf(p[i], wd, g[i]) : g[i];
            p[i] = fmaf(d, lr_neg, p[i]);
        });
        return;
    }
    BFIT_PAR_FOR_IF(n >= BFIT_PAR_MIN, for (int64_t i = 0; i < n; i++) {
        float d = wd != 0.0f ? fmaf(p[i], wd, g[i]) : g[i];
        float b = first ? d : fmaf(d, damp1, buf[i] * mom);
        buf[i] = b;
        d = nesterov ? fmaf(b, mom, d) : b;
        p[i] = fmaf(d, lr_neg, p[i]);
    });
})

/* PyTorch AdamW: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g
 * (one fused multiply-add, as PyTorch's addcmul compiles);
 * p += (-lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps). */
BFIT_CPU_VARIANTS(void, adamw_loop,
                  (float *restrict p, const float *restrict g, float *restrict m, float *restrict v, int64_t n,
                   const float *h),
{
    const float dm = h[BFIT_ADAMW_DECAY_MUL], b1 = h[BFIT_ADAMW_B1], c1 = h[BFIT_ADAMW_C1], b2 = h[BFIT_ADAMW_B2],
                c2 = h[BFIT_ADAMW_C2], step_neg = h[BFIT_ADAMW_STEP_NEG], bc2_sqrt = h[BFIT_ADAMW_BC2_SQRT],
                eps = h[BFIT_ADAMW_EPS];

    BFIT_PAR_FOR_IF(n >= BFIT_PAR_MIN, for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        float pi = p[i] * dm;
        float mi = fmaf(gi, c1, m[i] * b1);
        float vi = fmaf(c2 * gi, gi, v[i] * b2);
        float den = sqrtf(vi) / bc2_sqrt + eps;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi + step_neg * mi / den;
    });
})

static int run_sgd(cpu_op *op, const bfit_op_args *a)
{
    if (!a->dst || !a->src)
        return bfit_fail(BFIT_EINVAL, "sgd: dst (the parameters) and src (the gradients) are required");
    if (!a->state0 != !op->base.desc.u.sgd.momentum)
        return bfit_fail(BFIT_EINVAL, "sgd: state0 (the momentum buffer) is %s but the op was made %s momentum",
                         a->state0 ? "given" : "missing", op->base.desc.u.sgd.momentum ? "with" : "without");
    BFIT_CPU_PICK(sgd_loop)(a->dst, a->src, a->state0, op->base.desc.u.sgd.n, op->base.desc.u.sgd.nesterov, a->hyper);
    return BFIT_OK;
}

static int run_adamw(cpu_op *op, const bfit_op_args *a)
{
    if (!a->dst || !a->src || !a->state0 || !a->state1)
        return bfit_fail(BFIT_EINVAL, "adamw: dst, src, state0 and state1 are required");
    BFIT_CPU_PICK(adamw_loop)(a->dst, a->src, a->state0, a->state1, op->base.desc.u.adamw.n, a->hyper);
    return BFIT_OK;
}

int bfit_cpu_optim_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t n = d->kind == BFIT_OP_SGD ? d->u.sgd.n : d->u.adamw.n;

    if (n < 1)
        return bfit_fail(BFIT_EINVAL, "optimizer update: n must be positive, got %lld", (long long)n);
    op->ws = op->saved = 0;
    op->run = d->kind == BFIT_OP_SGD ? run_sgd : run_adamw;
    return BFIT_OK;
}
