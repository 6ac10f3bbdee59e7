/* cpu_conv_dw.c - a depthwise convolution's weight gradient, x and dy f32
 * or bf16 (the gradient f32 either way, as oneDNN's), each in nchw or a
 * layout chain's nChw8c / nChw16c (the same sums in the same order), where
 * oneDNN would take its gemm fallback.
 *
 * oneDNN 2.6 takes it to its gemm fallback (im2col per channel) wherever
 * its jit_dw kernel declines (5x5 windows, stride 2, maps smaller than
 * the window: most of EfficientNet's and MobileNetV3's): 20 ms a call for
 * 32x1152x2x2 with 5x5, 0.4 GFLOP/s. Here each channel's kh kw sums (and
 * its bias's) run over the samples' rows directly, in double; in blocks,
 * a block's channels side by side as one vector (dw_block). */
#include "base/err.h"
#include "base/par.h"
#include "device/cpu.h"
#include "device/cpu_isa.h"
#include "device/half.h"

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

/* s + the sum over i < n of g[i pg] r[i rs], in double, in order (the
 * running sum's rounding, whatever the rows); bf16: both operands bf16 */
static double dot(double s, const void *g, const void *r, int64_t n, int64_t pg, int64_t rs, int bf16)
{
    if (bf16) {
        const uint16_t *a = g, *b = r;
        for (int64_t i = 0; i < n; i++)
            s += (double)bfit_bf16_to_f32(a[i * pg]) * bfit_bf16_to_f32(b[i * rs]);
    } else {
        const float *a = g, *b = r;
        for (int64_t i = 0; i < n; i++)
            s += (double)a[i * pg] * b[i * rs];
    }
    return s;
}

static double sum(double s, const void *g, int64_t n, int64_t pg, int bf16)
{
    for (int64_t i = 0; i < n; i++)
        s += bf16 ? bfit_bf16_to_f32(((const uint16_t *)g)[i * pg]) : ((const float *)g)[i * pg];
    return s;
}

/* Channel c's kh kw weight gradients (and its bias's) into dw, db (NULL):
 * set, or added to with accumulate. x and dy of the op's dtype. */
static void dw_channel(const bfit_op_desc *d, const void *x, const void *dy, float *dw, float *db, int64_t c)
{
    const int64_t C = d->u.conv.ic, ih = d->u.conv.ih, iw = d->u.conv.iw, oh = d->u.conv.oh, ow = d->u.conv.ow;
    const int64_t kh = d->u.conv.kh, kw = d->u.conv.kw, sh = d->u.conv.sh, sw = d->u.conv.sw;
    const int bx = d->u.conv.blk_src, bg = d->u.conv.blk_dst, bf16 = d->dtype == BFIT_BF16;
    const int64_t px = bx ? bx : 1, pg = bg ? bg : 1; /* a pixel's step in x, in dy */
    const int64_t es = bf16 ? 2 : 4;
    double acc[64] = {0}, bacc = 0;

    for (int64_t n = 0; n < d->u.conv.n; n++) {
        const char *xp = (const char *)x + chan_at(n, c, C, ih * iw, bx) * es,
                   *gp = (const char *)dy + chan_at(n, c, C, oh * ow, bg) * es;
        if (db)
            bacc = sum(bacc, gp, oh * ow, pg, bf16);
        for (int64_t ky = 0; ky < kh; ky++) {
            int64_t y0, y1;
            bfit_cpu_conv_span(ky, sh, d->u.conv.ph, ih, oh, &y0, &y1);
            for (int64_t kx = 0; kx < kw; kx++) {
                int64_t x0, x1;
                double s = 0;
                bfit_cpu_conv_span(kx, sw, d->u.conv.pw, iw, ow, &x0, &x1);
                for (int64_t oy = y0; oy < y1 && x1 > x0; oy++) {
                    int64_t gi = (oy * ow + x0) * pg,
                            ri = ((oy * sh - d->u.conv.ph + ky) * iw - d->u.conv.pw + kx + x0 * sw) * px;
                    s = dot(s, gp + gi * es, xp + ri * es, x1 - x0, pg, sw * px, bf16);
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

/* Both x and dy in blocks of B channels: one block's B channels at once,
 * lane l summing channel cb B + l's terms in dw_channel's order (so the
 * same bits), its B lanes side by side in memory: the loop over the lanes
 * is the vector. B and bf16 are constants where it is inlined. */
#define DW_LD(p, i) (bf16 ? bfit_bf16_to_f32(((const uint16_t *)(p))[i]) : ((const float *)(p))[i])
static inline __attribute__((always_inline)) void dw_block(const bfit_op_desc *d, const void *x, const void *dy,
                                                           float *dw, float *db, int64_t cb, const int B,
                                                           const int bf16)
{
    const int64_t C = d->u.conv.ic, ih = d->u.conv.ih, iw = d->u.conv.iw, oh = d->u.conv.oh, ow = d->u.conv.ow;
    const int64_t kh = d->u.conv.kh, kw = d->u.conv.kw, sh = d->u.conv.sh, sw = d->u.conv.sw;
    double acc[64][16], bacc[16] = {0};

    for (int64_t k = 0; k < kh * kw; k++)
        for (int l = 0; l < B; l++)
            acc[k][l] = 0;
    for (int64_t n = 0; n < d->u.conv.n; n++) {
        const int64_t xo = (n * (C / B) + cb) * ih * iw * B, go = (n * (C / B) + cb) * oh * ow * B;
        for (int64_t i = 0; db && i < oh * ow; i++)
            for (int l = 0; l < B; l++)
                bacc[l] += DW_LD(dy, go + i * B + l);
        for (int64_t ky = 0; ky < kh; ky++) {
            int64_t y0, y1;
            bfit_cpu_conv_span(ky, sh, d->u.conv.ph, ih, oh, &y0, &y1);
            for (int64_t kx = 0; kx < kw; kx++) {
                int64_t x0, x1;
                double s[16] = {0};
                bfit_cpu_conv_span(kx, sw, d->u.conv.pw, iw, ow, &x0, &x1);
                for (int64_t oy = y0; oy < y1; oy++)
                    for (int64_t ox = x0; ox < x1; ox++) {
                        int64_t gi = go + (oy * ow + ox) * B,
                                ri = xo + ((oy * sh - d->u.conv.ph + ky) * iw + ox * sw - d->u.conv.pw + kx) * B;
                        for (int l = 0; l < B; l++)
                            s[l] += (double)DW_LD(dy, gi + l) * DW_LD(x, ri + l);
                    }
                for (int l = 0; l < B; l++)
                    acc[ky * kw + kx][l] += s[l];
            }
        }
    }
    for (int l = 0; l < B; l++) {
        int64_t c = cb * B + l;
        for (int64_t k = 0; k < kh * kw; k++)
            dw[c * kh * kw + k] = (float)(d->accumulate ? dw[c * kh * kw + k] + acc[k][l] : acc[k][l]);
        if (db)
            db[c] = (float)(d->accumulate ? db[c] + bacc[l] : bacc[l]);
    }
}
#undef DW_LD

BFIT_CPU_VARIANTS(void, blocks_loop, (const bfit_op_desc *d, const void *x, const void *dy, float *dw, float *db), {
    const int B = d->u.conv.blk_src, bf16 = d->dtype == BFIT_BF16;
    BFIT_PAR_FOR_IF(d->u.conv.n * d->u.conv.ic * d->u.conv.oh * d->u.conv.ow * d->u.conv.kh * d->u.conv.kw >
                        BFIT_PAR_MIN,
                    for (int64_t cb = 0; cb < d->u.conv.ic / B; cb++) {
                        if (B == 16)
                            bf16 ? dw_block(d, x, dy, dw, db, cb, 16, 1) : dw_block(d, x, dy, dw, db, cb, 16, 0);
                        else
                            bf16 ? dw_block(d, x, dy, dw, db, cb, 8, 1) : dw_block(d, x, dy, dw, db, cb, 8, 0);
                    });
})

static int run(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    float *db = d->u.conv.bias ? a->diff_bias : NULL;

    if (!a->src || !a->diff_dst || !a->diff_weights || (d->u.conv.bias && !a->diff_bias))
        return bfit_fail(BFIT_EINVAL,
                         "conv backward weights: src, diff_dst, diff_weights (and diff_bias) are required");
    if (d->u.conv.blk_src && d->u.conv.blk_src == d->u.conv.blk_dst) {
        BFIT_CPU_PICK(blocks_loop)(d, a->src, a->diff_dst, a->diff_weights, db);
        return BFIT_OK;
    }
    BFIT_PAR_FOR_IF(d->u.conv.n * d->u.conv.ic * d->u.conv.oh * d->u.conv.ow * d->u.conv.kh * d->u.conv.kw >
                        BFIT_PAR_MIN,
                    for (int64_t c = 0; c < d->u.conv.ic; c++)
                        dw_channel(d, a->src, a->diff_dst, a->diff_weights, db, c););
    return BFIT_OK;
}

int bfit_cpu_conv_dw_take(cpu_op *op, int onednn_gemm)
{
    const bfit_op_desc *d = &op->base.desc;

    if (d->kind != BFIT_OP_CONV_BWD_WEIGHTS || (d->dtype != BFIT_F32 && d->dtype != BFIT_BF16) ||
        (d->u.conv.groups > 1 ? d->u.conv.groups : 1) != d->u.conv.ic || d->u.conv.oc != d->u.conv.ic ||
        d->u.conv.kh * d->u.conv.kw > 64 || !onednn_gemm)
        return 0; /* oneDNN's jit_dw, or not this case */
    op->run = run; /* on the tensors as they are: no scratch, no reorders */
    return 1;
}
