/* cpu_avgpool_g.c - global average pools of our own: the window the whole
 * map, no padding, one output per channel (a classifier's head, and every
 * squeeze-and-excitation block of MobileNetV3 and EfficientNet), f32 and
 * bf16, nchw or in a layout chain's nChw8c/16c.
 *
 * oneDNN 2.6 runs them on its `simple_nchw` pooling, a loop per output
 * with the call's overhead around it: 0.3 ms a call forward and backward
 * on 32x576x2x2, 6.6% of MobileNetV3-Small's step in 70 small calls. Here
 * a row of the map is summed in double and divided once (forward), and
 * each input's gradient is dy / (h w) (backward: oneDNN's and PyTorch's
 * count_include_pad with no padding); bf16 computed in f32, rounded once. */
#include "base/err.h"
#include "base/par.h"
#include "device/cpu.h"
#include "device/half.h"

#include <stdint.h>

static inline float ld(const void *p, int bf16, int64_t i)
{
    return bf16 ? bfit_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static inline void st(void *p, int bf16, int64_t i, float v)
{
    if (bf16)
        ((uint16_t *)p)[i] = bfit_f32_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

/* Element (row r = n c + channel, position 0) of the input and the step
 * between its positions: nchw, or a layout chain's nChw{B}c (blk_src) */
static inline int64_t row_at(const bfit_op_desc *d, int64_t r, int64_t hw, int64_t *step)
{
    int64_t B = d->u.pool.blk_src, c = d->u.pool.c;
    *step = B ? B : 1;
    return B ? ((r / c * (c / B) + r % c / B) * hw) * B + r % c % B : r * hw;
}

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    const int64_t rows = d->u.pool.n * d->u.pool.c, hw = d->u.pool.ih * d->u.pool.iw;
    const int bf16 = d->dtype == BFIT_BF16;

    if (!a->src || !a->dst)
        return bfit_fail(BFIT_EINVAL, "pool forward: src and dst are required");
    BFIT_PAR_FOR_IF(rows * hw > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        int64_t step, at = row_at(d, r, hw, &step);
        for (int64_t p = 0; p < hw; p++)
            s += ld(a->src, bf16, at + p * step);
        st(a->dst, bf16, r, (float)(s / (double)hw));
    });
    return BFIT_OK;
}

static int run_bwd(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    const int64_t rows = d->u.pool.n * d->u.pool.c, hw = d->u.pool.ih * d->u.pool.iw;
    const int bf16 = d->dtype == BFIT_BF16;

    if (!a->diff_dst || !a->diff_src)
        return bfit_fail(BFIT_EINVAL, "pool backward: diff_dst and diff_src are required");
    BFIT_PAR_FOR_IF(rows * hw > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        float g = ld(a->diff_dst, bf16, r) / (float)hw;
        int64_t step, at = row_at(d, r, hw, &step);
        for (int64_t p = 0; p < hw; p++)
            st(a->diff_src, bf16, at + p * step, g);
    });
    return BFIT_OK;
}

int bfit_cpu_avgpool_g_init(cpu_op *op, int *done)
{
    const bfit_op_desc *d = &op->base.desc;

    /* the output, one value per channel, is the same bytes in nchw and in
     * blocks: blk_dst changes nothing */
    *done = !d->u.pool.max && d->u.pool.oh == 1 && d->u.pool.ow == 1 &&
            d->u.pool.kh == d->u.pool.ih && d->u.pool.kw == d->u.pool.iw && d->u.pool.ph == 0 &&
            d->u.pool.pw == 0 && (d->dtype == BFIT_F32 || d->dtype == BFIT_BF16);
    if (!*done)
        return BFIT_OK;
    op->ws = op->saved = 0;
    op->run = d->kind == BFIT_OP_POOL_FWD ? run_fwd : run_bwd;
    return BFIT_OK;
}
