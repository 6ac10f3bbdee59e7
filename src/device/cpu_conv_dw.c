/* cpu_conv_dw.c - a depthwise convolution's weight gradient, f32, x and dy
 * each in nchw or a layout chain's nChw8c / nChw16c (the same sums in the
 * same order), where oneDNN would take its gemm fallback.
 *
 * oneDNN 2.6 takes it to its gemm fallback (im2col per channel) wherever
 * its jit_dw kernel declines (5x5 windows, stride 2, maps smaller than
 * the window: most of EfficientNet's and MobileNetV3's): 20 ms a call for
 * 32x1152x2x2 with 5x5, 0.4 GFLOP/s. Here each channel's kh kw sums (and
 * its bias's) run over the samples' rows directly, in double. */
#include "base/err.h"
#include "base/par.h"
#include "device/cpu.h"

#include <stdint.h>

/* cpu.h */
void bfit_cpu_conv_span(int64_t k, int64_t s, int64_t p, int64_t in, int64_t on, int64_t *lo, int64_t *hi)
{
    int64_t a = p - k, b = in - 1 + p - k; /* o s in [a, b] */
    *lo = a <= 0 ? 0 : (a + s - 1) / s;
    *hi = b < 0 ? 0 : b / s + 1;
    if (*hi > on)
        *hi = on;
}

/* Element (n, c, 0, 0) of a [n, C, hw] tensor in nchw (B 0) or in blocks
 * of B channels; its pixels lie B elements apart then, else 1 */
static int64_t chan_at(int64_t n, int64_t c, int64_t C, int64_t hw, int B)
{
    return B ? ((n * (C / B) + c / B) * hw) * B + c % B : (n * C + c) * hw;
}

/* Channel c's kh kw weight gradients (and its bias's) into dw, db (NULL):
 * set, or added to with accumulate. */
static void dw_channel(const bfit_op_desc *d, const float *x, const float *dy, float *dw, float *db, int64_t c)
{
    const int64_t C = d->u.conv.ic, ih = d->u.conv.ih, iw = d->u.conv.iw, oh = d->u.conv.oh, ow = d->u.conv.ow;
    const int64_t kh = d->u.conv.kh, kw = d->u.conv.kw, sh = d->u.conv.sh, sw = d->u.conv.sw;
    const int bx = d->u.conv.blk_src, bg = d->u.conv.blk_dst;
    const int64_t px = bx ? bx : 1, pg = bg ? bg : 1; /* a pixel's step in x, in dy */
    double acc[64] = {0}, bacc = 0;

    for (int64_t n = 0; n < d->u.conv.n; n++) {
        const float *xp = x + chan_at(n, c, C, ih * iw, bx), *gp = dy + chan_at(n, c, C, oh * ow, bg);
        for (int64_t i = 0; db && i < oh * ow; i++)
            bacc += gp[i * pg];
        for (int64_t ky = 0; ky < kh; ky++) {
            int64_t y0, y1;
            bfit_cpu_conv_span(ky, sh, d->u.conv.ph, ih, oh, &y0, &y1);
            for (int64_t kx = 0; kx < kw; kx++) {
                int64_t x0, x1;
                double s = 0;
                bfit_cpu_conv_span(kx, sw, d->u.conv.pw, iw, ow, &x0, &x1);
                for (int64_t oy = y0; oy < y1; oy++) {
                    const float *g = gp + oy * ow * pg,
                                *r = xp + ((oy * sh - d->u.conv.ph + ky) * iw - d->u.conv.pw + kx) * px;
                    for (int64_t ox = x0; ox < x1; ox++)
                        s += (double)g[ox * pg] * r[ox * sw * px];
                }
                acc[ky * kw + kx] += s;
            }
        }
    }
    for (int64_t k = 0; k < kh * kw; k++)
        dw[c * kh * kw + k] = (float)(d->accumulate ? dw[c * kh * kw + k] + acc[k] : acc[k]);
    if (db)
        db[c] = (float)(d->accumulate ? db[c] + bacc : bacc);
}

static int run(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    float *db = d->u.conv.bias ? a->diff_bias : NULL;

    if (!a->src || !a->diff_dst || !a->diff_weights || (d->u.conv.bias && !a->diff_bias))
        return bfit_fail(BFIT_EINVAL,
                         "conv backward weights: src, diff_dst, diff_weights (and diff_bias) are required");
    BFIT_PAR_FOR_IF(d->u.conv.n * d->u.conv.ic * d->u.conv.oh * d->u.conv.ow * d->u.conv.kh * d->u.conv.kw >
                        BFIT_PAR_MIN,
                    for (int64_t c = 0; c < d->u.conv.ic; c++)
                        dw_channel(d, a->src, a->diff_dst, a->diff_weights, db, c););
    return BFIT_OK;
}

int bfit_cpu_conv_dw_take(cpu_op *op, int onednn_gemm)
{
    const bfit_op_desc *d = &op->base.desc;

    if (d->kind != BFIT_OP_CONV_BWD_WEIGHTS || d->dtype != BFIT_F32 ||
        (d->u.conv.groups > 1 ? d->u.conv.groups : 1) != d->u.conv.ic || d->u.conv.oc != d->u.conv.ic ||
        d->u.conv.kh * d->u.conv.kw > 64 || !onednn_gemm)
        return 0; /* oneDNN's jit_dw, or not this case */
    op->run = run; /* on the tensors as they are: no scratch, no reorders */
    return 1;
}
