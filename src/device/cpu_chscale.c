/* cpu_chscale.c - CHSCALE_FWD/BWD: each channel of an image multiplied by
 * its own scale (a squeeze-and-excitation block's gate, [n, c] against the
 * [n, c, hw] it gates), plain loops in any float dtype, one thread per
 * range of channel rows; f32 and bf16 images in a layout chain's
 * nChw8c/16c too.
 * The scales' gradient sums a row in double, in a fixed order, so that it
 * does not depend on the thread count. */
#include "base/err.h"
#include "device/cpu.h"
#include "device/half.h"

static void fwd_f32(const float *x, const float *s, float *y, int64_t rows, int64_t hw)
{
    BFIT_PAR_FOR_IF(rows * hw > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * hw;
        float *yr = y + r * hw, sr = s[r];
        for (int64_t i = 0; i < hw; i++)
            yr[i] = xr[i] * sr;
    });
}

static void fwd_any(bfit_dtype t, const void *x, const void *s, void *y, int64_t rows, int64_t hw)
{
    BFIT_PAR_FOR_IF(rows * hw > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        float sr = bfit_ld(s, t, r);
        for (int64_t i = r * hw; i < (r + 1) * hw; i++)
            bfit_st(y, t, i, bfit_ld(x, t, i) * sr);
    });
}

/* nChw{B}c: block q (= n (c / B) + the channel block) is hw positions of
 * B channels side by side, whose scales are s[q B ..] (= n c + its first
 * channel). The scales' gradient sums each channel over the positions in
 * order, in double: the plain layout's sums, so a chain changes no bit.
 * f32 and bf16 only (a chain's dtypes), each with its own loops. */
static void fwd_blk(const float *x, const float *s, float *y, int64_t n, int64_t c, int64_t hw, int64_t B)
{
    int64_t nb = n * (c / B);
    BFIT_PAR_FOR_IF(nb * hw * B > BFIT_PAR_MIN, for (int64_t q = 0; q < nb; q++) {
        const float *xr = x + q * hw * B, *sr = s + q * B;
        float *yr = y + q * hw * B;
        for (int64_t p = 0; p < hw; p++)
            for (int64_t l = 0; l < B; l++)
                yr[p * B + l] = xr[p * B + l] * sr[l];
    });
}

static void fwd_blk_bf16(const uint16_t *x, const uint16_t *s, uint16_t *y, int64_t n, int64_t c, int64_t hw,
                         int64_t B)
{
    int64_t nb = n * (c / B);
    BFIT_PAR_FOR_IF(nb * hw * B > BFIT_PAR_MIN, for (int64_t q = 0; q < nb; q++) {
        const uint16_t *xr = x + q * hw * B;
        uint16_t *yr = y + q * hw * B;
        float sr[16];
        for (int64_t l = 0; l < B; l++)
            sr[l] = bfit_bf16_to_f32(s[q * B + l]);
        for (int64_t p = 0; p < hw; p++)
            for (int64_t l = 0; l < B; l++)
                yr[p * B + l] = bfit_f32_to_bf16(bfit_bf16_to_f32(xr[p * B + l]) * sr[l]);
    });
}

static void bwd_blk(const float *x, const float *s, const float *dy, float *dx, float *ds, int64_t n, int64_t c,
                    int64_t hw, int64_t B)
{
    int64_t nb = n * (c / B);
    BFIT_PAR_FOR_IF(nb * hw * B > BFIT_PAR_MIN, for (int64_t q = 0; q < nb; q++) {
        const float *xr = x + q * hw * B, *g = dy + q * hw * B, *sr = s + q * B;
        double acc[16] = {0};
        if (dx)
            for (int64_t p = 0; p < hw; p++)
                for (int64_t l = 0; l < B; l++)
                    dx[q * hw * B + p * B + l] = g[p * B + l] * sr[l];
        if (ds) {
            for (int64_t p = 0; p < hw; p++)
                for (int64_t l = 0; l < B; l++)
                    acc[l] += (double)g[p * B + l] * (double)xr[p * B + l];
            for (int64_t l = 0; l < B; l++)
                ds[q * B + l] = (float)acc[l];
        }
    });
}

static void bwd_blk_bf16(const uint16_t *x, const uint16_t *s, const uint16_t *dy, uint16_t *dx, uint16_t *ds,
                         int64_t n, int64_t c, int64_t hw, int64_t B)
{
    int64_t nb = n * (c / B);
    BFIT_PAR_FOR_IF(nb * hw * B > BFIT_PAR_MIN, for (int64_t q = 0; q < nb; q++) {
        const uint16_t *xr = x + q * hw * B, *g = dy + q * hw * B;
        float sr[16];
        double acc[16] = {0};
        for (int64_t l = 0; l < B; l++)
            sr[l] = bfit_bf16_to_f32(s[q * B + l]);
        if (dx)
            for (int64_t p = 0; p < hw; p++)
                for (int64_t l = 0; l < B; l++)
                    dx[q * hw * B + p * B + l] = bfit_f32_to_bf16(bfit_bf16_to_f32(g[p * B + l]) * sr[l]);
        if (ds) {
            for (int64_t p = 0; p < hw; p++)
                for (int64_t l = 0; l < B; l++)
                    acc[l] += (double)bfit_bf16_to_f32(g[p * B + l]) * (double)bfit_bf16_to_f32(xr[p * B + l]);
            for (int64_t l = 0; l < B; l++)
                ds[q * B + l] = bfit_f32_to_bf16((float)acc[l]);
        }
    });
}

/* One position per row (the `mul` layer's elementwise product): plain
 * vectors; each product rounded once, as the rows' double sums of one term
 * round it. dx or ds may be dy: each element of dy is read first. */
static void prod_f32(const float *x, const float *s, float *y, int64_t n)
{
    BFIT_PAR_FOR_IF(n > BFIT_PAR_MIN, for (int64_t i = 0; i < n; i++) y[i] = x[i] * s[i];);
}

static void prod_bwd_f32(const float *x, const float *s, const float *dy, float *dx, float *ds, int64_t n)
{
    BFIT_PAR_FOR_IF(n > BFIT_PAR_MIN, for (int64_t i = 0; i < n; i++) {
        float g = dy[i], xi = x ? x[i] : 0.0f, si = s[i];
        if (dx)
            dx[i] = g * si;
        if (ds)
            ds[i] = g * xi;
    });
}

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t rows = d->u.chs.n * d->u.chs.c, hw = d->u.chs.hw;

    if (!a->src || !a->src2 || !a->dst)
        return bfit_fail(BFIT_EINVAL, "channel scaling: src, src2 (the scales) and dst are required");
    if (d->u.chs.blk && d->dtype == BFIT_F32)
        fwd_blk(a->src, a->src2, a->dst, d->u.chs.n, d->u.chs.c, hw, d->u.chs.blk);
    else if (d->u.chs.blk)
        fwd_blk_bf16(a->src, a->src2, a->dst, d->u.chs.n, d->u.chs.c, hw, d->u.chs.blk);
    else if (d->dtype == BFIT_F32 && hw == 1)
        prod_f32(a->src, a->src2, a->dst, rows);
    else if (d->dtype == BFIT_F32)
        fwd_f32(a->src, a->src2, a->dst, rows, hw);
    else
        fwd_any(d->dtype, a->src, a->src2, a->dst, rows, hw);
    return BFIT_OK;
}

/* dx = dy s (when asked); ds = sum over the row of dy x (when asked) */
static void bwd_f32(const float *x, const float *s, const float *dy, float *dx, float *ds, int64_t rows, int64_t hw)
{
    BFIT_PAR_FOR_IF(rows * hw > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * hw, *g = dy + r * hw;
        double acc = 0;
        if (dx)
            for (int64_t i = 0; i < hw; i++)
                dx[r * hw + i] = g[i] * s[r];
        if (ds) {
            for (int64_t i = 0; i < hw; i++)
                acc += (double)g[i] * (double)xr[i];
            ds[r] = (float)acc;
        }
    });
}

static void bwd_any(bfit_dtype t, const void *x, const void *s, const void *dy, void *dx, void *ds, int64_t rows,
                    int64_t hw)
{
    BFIT_PAR_FOR_IF(rows * hw > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        float sr = bfit_ld(s, t, r);
        double acc = 0;
        for (int64_t i = r * hw; i < (r + 1) * hw; i++) {
            float g = bfit_ld(dy, t, i);
            if (dx)
                bfit_st(dx, t, i, g * sr);
            if (ds)
                acc += (double)g * (double)bfit_ld(x, t, i);
        }
        if (ds)
            bfit_st(ds, t, r, (float)acc);
    });
}

static int run_bwd(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t rows = d->u.chs.n * d->u.chs.c, hw = d->u.chs.hw;

    if (!a->diff_dst || (a->diff_src && !a->src2) || (a->dst && !a->src))
        return bfit_fail(BFIT_EINVAL, "channel scaling backward: diff_dst, src2 (the scales) for diff_src and src "
                                      "for dst (the scales' gradient) are required");
    if (d->u.chs.blk && d->dtype == BFIT_F32)
        bwd_blk(a->src, a->src2, a->diff_dst, a->diff_src, a->dst, d->u.chs.n, d->u.chs.c, hw, d->u.chs.blk);
    else if (d->u.chs.blk)
        bwd_blk_bf16(a->src, a->src2, a->diff_dst, a->diff_src, a->dst, d->u.chs.n, d->u.chs.c, hw, d->u.chs.blk);
    else if (d->dtype == BFIT_F32 && hw == 1 && a->src2)
        prod_bwd_f32(a->src, a->src2, a->diff_dst, a->diff_src, a->dst, rows);
    else if (d->dtype == BFIT_F32)
        bwd_f32(a->src, a->src2, a->diff_dst, a->diff_src, a->dst, rows, hw);
    else
        bwd_any(d->dtype, a->src, a->src2, a->diff_dst, a->diff_src, a->dst, rows, hw);
    return BFIT_OK;
}

int bfit_cpu_chscale_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;

    if (d->u.chs.n < 1 || d->u.chs.c < 1 || d->u.chs.hw < 1)
        return bfit_fail(BFIT_EINVAL, "channel scaling: n %lld, c %lld and hw %lld must be positive",
                         (long long)d->u.chs.n, (long long)d->u.chs.c, (long long)d->u.chs.hw);
    if (d->u.chs.blk && ((d->u.chs.blk != 8 && d->u.chs.blk != 16) || d->u.chs.c % d->u.chs.blk ||
                         (d->dtype != BFIT_F32 && d->dtype != BFIT_BF16)))
        return bfit_fail(BFIT_EINVAL, "channel scaling: blocked data (blk %d) must be f32 or bf16 in blocks of 8 or "
                         "16 of its %lld channels", d->u.chs.blk, (long long)d->u.chs.c);
    op->ws = op->saved = 0;
    op->run = d->kind == BFIT_OP_CHSCALE_FWD ? run_fwd : run_bwd;
    return BFIT_OK;
}
