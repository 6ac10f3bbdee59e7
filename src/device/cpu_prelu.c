/* cpu_prelu.c - PRELU_FWD/BWD: PyTorch's PReLU, y = x where x > 0, else
 * a x, with a learned slope a per channel (or one for all), plain loops in
 * any float dtype over [n, c, hw], one thread per row (a sample's channel);
 * f32 and bf16 images in a layout chain's nChw8c/16c too.
 * The slopes' gradient sums each row in double, in order, into the
 * workspace, then a slope's rows in a fixed order: the same bits whatever
 * the thread count or the layout. */
#include "base/err.h"
#include "device/cpu.h"
#include "device/half.h"

/* Row r (= sample n, channel ch): its first element and the step between
 * its hw elements; nChw{B}c keeps B channels side by side. */
static void row_at(const bfit_op_desc *d, int64_t r, int64_t *base, int64_t *step)
{
    int64_t c = d->u.prelu.c, hw = d->u.prelu.hw, B = d->u.prelu.blk, s = r / c, ch = r % c;

    if (!B) {
        *base = r * hw, *step = 1;
        return;
    }
    *base = (s * (c / B) + ch / B) * hw * B + ch % B;
    *step = B;
}

static float slope_of(const bfit_op_desc *d, const float *w, int64_t r)
{
    return w[d->u.prelu.shared ? 0 : r % d->u.prelu.c];
}

static void fwd_row(const bfit_op_desc *d, const void *x, void *y, int64_t r, float a)
{
    int64_t base, step, hw = d->u.prelu.hw;

    row_at(d, r, &base, &step);
    if (d->dtype == BFIT_F32) {
        const float *xf = x;
        float *yf = y;
        for (int64_t p = 0, i = base; p < hw; p++, i += step)
            yf[i] = xf[i] > 0 ? xf[i] : a * xf[i];
        return;
    }
    for (int64_t p = 0, i = base; p < hw; p++, i += step) {
        float v = bfit_ld(x, d->dtype, i);
        bfit_st(y, d->dtype, i, v > 0 ? v : a * v);
    }
}

/* dx (when asked) and the row's sum of dy x where x <= 0, in double */
static double bwd_row(const bfit_op_desc *d, const void *x, const void *dy, void *dx, int64_t r, float a)
{
    int64_t base, step, hw = d->u.prelu.hw;
    double acc = 0;

    row_at(d, r, &base, &step);
    if (d->dtype == BFIT_F32) {
        const float *xf = x, *g = dy;
        float *dxf = dx;
        for (int64_t p = 0, i = base; p < hw; p++, i += step) {
            float v = xf[i], gi = g[i]; /* read before dx is written: dx may be dy */
            if (v <= 0)
                acc += (double)gi * (double)v;
            if (dxf)
                dxf[i] = v > 0 ? gi : a * gi;
        }
        return acc;
    }
    for (int64_t p = 0, i = base; p < hw; p++, i += step) {
        float v = bfit_ld(x, d->dtype, i), gi = bfit_ld(dy, d->dtype, i);
        if (v <= 0)
            acc += (double)gi * (double)v;
        if (dx)
            bfit_st(dx, d->dtype, i, v > 0 ? gi : a * gi);
    }
    return acc;
}

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t rows = d->u.prelu.n * d->u.prelu.c;
    const float *w = a->weights;

    if (!a->src || !a->weights || !a->dst)
        return bfit_fail(BFIT_EINVAL, "prelu: src, weights (the slopes) and dst are required");
    BFIT_PAR_ROWS_IF(rows * d->u.prelu.hw > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        fwd_row(d, a->src, a->dst, r, slope_of(d, w, r));
    });
    return BFIT_OK;
}

/* The slopes' gradient from the rows' sums: a slope's rows by sample, then
 * channel (all channels for a shared slope), set or added. */
static void slope_grads(const bfit_op_desc *d, const double *rs, float *dw)
{
    int64_t n = d->u.prelu.n, c = d->u.prelu.c, ns = d->u.prelu.shared ? 1 : c;

    for (int64_t j = 0; j < ns; j++) {
        int64_t lo = ns == 1 ? 0 : j, hi = ns == 1 ? c : j + 1; /* the channels slope j covers */
        double s = 0;
        for (int64_t k = 0; k < n; k++)
            for (int64_t ch = lo; ch < hi; ch++)
                s += rs[k * c + ch];
        dw[j] = d->accumulate ? dw[j] + (float)s : (float)s;
    }
}

static int run_bwd(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t rows = d->u.prelu.n * d->u.prelu.c;
    const float *w = a->weights;
    double *rs = a->diff_weights ? a->workspace : NULL;

    if (!a->src || !a->weights || !a->diff_dst || (a->diff_weights && !a->workspace))
        return bfit_fail(BFIT_EINVAL, "prelu backward: src, weights (the slopes), diff_dst and, for diff_weights, "
                                      "the workspace are required");
    BFIT_PAR_ROWS_IF(rows * d->u.prelu.hw > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        double s = bwd_row(d, a->src, a->diff_dst, a->diff_src, r, slope_of(d, w, r));
        if (rs)
            rs[r] = s;
    });
    if (rs)
        slope_grads(d, rs, a->diff_weights);
    return BFIT_OK;
}

int bfit_cpu_prelu_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t B = d->u.prelu.blk;

    if (d->u.prelu.n < 1 || d->u.prelu.c < 1 || d->u.prelu.hw < 1)
        return bfit_fail(BFIT_EINVAL, "prelu: n %lld, c %lld and hw %lld must be positive", (long long)d->u.prelu.n,
                         (long long)d->u.prelu.c, (long long)d->u.prelu.hw);
    if (B && ((B != 8 && B != 16) || d->u.prelu.c % B || (d->dtype != BFIT_F32 && d->dtype != BFIT_BF16)))
        return bfit_fail(BFIT_EINVAL, "prelu: blocked data (blk %lld) must be f32 or bf16 in blocks of 8 or 16 of its "
                         "%lld channels", (long long)B, (long long)d->u.prelu.c);
    op->saved = 0;
    op->ws = d->kind == BFIT_OP_PRELU_BWD ? (size_t)(d->u.prelu.n * d->u.prelu.c) * sizeof(double) : 0;
    op->run = d->kind == BFIT_OP_PRELU_FWD ? run_fwd : run_bwd;
    return BFIT_OK;
}
