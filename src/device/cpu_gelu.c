/* cpu_gelu.c - GELU (the erf form: x Phi(x)) forward and backward in f32,
 * and backward in bf16, our own loops instead of oneDNN's eltwise: on
 * gpt-nano its f32 calls took 0.24 ms forward and 0.46 ms backward (a
 * 1024 x 512 array), 12% of the step; these take 0.15 and 0.18. Phi(x) = erfc(-x / sqrt2) / 2 by Abramowitz and Stegun
 * 7.1.26 (erfc(z) = t P(t) exp(-z^2), t = 1 / (1 + p z), z >= 0; its
 * absolute error at most 1.5e-7), and the backward's density exp(-x^2 / 2)
 * / sqrt(2 pi) takes the same exponential: one bfit_expf an element,
 * inlined into loops the compiler vectorises, a variant per instruction
 * set. A NaN in gives x's NaN out, in both variants (tests/test_cpu_isa.c
 * compares them bit for bit); tests/test_device_dense.c holds both against
 * double erf and exp. bf16's backward is this loop with its conversions in
 * registers (0.20 ms a call against oneDNN's 0.23-0.24 on gpt-nano); bf16's
 * forward stays oneDNN's, faster with this CPU's bf16 instructions (0.17
 * against this loop's 0.21). */
#include "base/err.h"
#include "device/cpu.h"
#include "device/cpu_exp.h"
#include "device/cpu_isa.h"
#include "device/half.h"

#include <math.h>

/* *phi = Phi(x), *dens = the normal density at x */
static inline __attribute__((always_inline)) void gelu_parts(float x, float *phi, float *dens)
{
    float z = fabsf(x) * 0.70710678118654752f;
    z = z < 16.0f ? z : 16.0f; /* erfc(16) is 0 in f32 already; a NaN's Phi is 1 (its NaN comes from x alone) */
    float e = bfit_expf(-z * z);
    float t = 1.0f / fmaf(0.3275911f, z, 1.0f);
    float p = fmaf(fmaf(fmaf(fmaf(1.061405429f, t, -1.453152027f), t, 1.421413741f), t, -0.284496736f), t,
                   0.254829592f);
    float h = 0.5f * t * p * e; /* erfc(z) / 2 */
    *phi = x < 0.0f ? h : 1.0f - h;
    *dens = 0.39894228040143268f * e;
}

static inline __attribute__((always_inline)) float gelu_f(float x)
{
    float phi, dens;
    gelu_parts(x, &phi, &dens);
    return x * phi;
}

static inline __attribute__((always_inline)) float gelu_g(float x, float dy)
{
    float phi, dens;
    gelu_parts(x, &phi, &dens);
    float g = fmaf(x, dens, phi), r = dy * g;
    return g != g ? g : r; /* two NaNs: x's, whichever operand order a variant's product took */
}

BFIT_CPU_VARIANTS(void, gelu_fwd_loop, (const float *x, float *y, int64_t n), {
    BFIT_PAR_FOR_IF(n > BFIT_PAR_MIN, for (int64_t i = 0; i < n; i++) y[i] = gelu_f(x[i]););
})

BFIT_CPU_VARIANTS(void, gelu_bwd_loop, (const float *x, const float *dy, float *dx, int64_t n), {
    BFIT_PAR_FOR_IF(n > BFIT_PAR_MIN, for (int64_t i = 0; i < n; i++) dx[i] = gelu_g(x[i], dy[i]););
})

BFIT_CPU_VARIANTS(void, gelu_bwd_bf16_loop, (const uint16_t *x, const uint16_t *dy, uint16_t *dx, int64_t n), {
    BFIT_PAR_FOR_IF(n > BFIT_PAR_MIN, for (int64_t i = 0; i < n; i++) dx[i] =
                                          bfit_f32_to_bf16(gelu_g(bfit_bf16_to_f32(x[i]), bfit_bf16_to_f32(dy[i]))););
})

static int run_gelu(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;

    if (d->kind == BFIT_OP_ELTWISE_FWD) {
        if (!a->src || !a->dst)
            return bfit_fail(BFIT_EINVAL, "eltwise forward: src and dst are required");
        BFIT_CPU_PICK(gelu_fwd_loop)(a->src, a->dst, d->u.elt.n);
        return BFIT_OK;
    }
    if (!a->src || !a->diff_dst || !a->diff_src)
        return bfit_fail(BFIT_EINVAL, "eltwise backward: src, diff_dst and diff_src are required");
    if (d->dtype == BFIT_BF16)
        BFIT_CPU_PICK(gelu_bwd_bf16_loop)(a->src, a->diff_dst, a->diff_src, d->u.elt.n);
    else
        BFIT_CPU_PICK(gelu_bwd_loop)(a->src, a->diff_dst, a->diff_src, d->u.elt.n);
    return BFIT_OK;
}

int bfit_cpu_gelu_init(cpu_op *op, int *done)
{
    const bfit_op_desc *d = &op->base.desc;

    *done = d->u.elt.alg == BFIT_ELT_GELU_ERF && !d->u.elt.bits && !d->u.elt.use_dst &&
            (d->dtype == BFIT_F32 || (d->dtype == BFIT_BF16 && d->kind == BFIT_OP_ELTWISE_BWD));
    if (*done) {
        op->ws = op->saved = 0;
        op->run = run_gelu;
    }
    return BFIT_OK;
}
