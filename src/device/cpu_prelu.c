/* cpu_prelu.c - PRELU_FWD/BWD: PyTorch's PReLU, y = x where x > 0, else
 * a x, with a learned slope a per channel (or one for all), plain loops in
 * any float dtype over [n, c, hw], one thread per row (a sample's channel);
 * f32 and bf16 images in a layout chain's nChw8c/16c too. With linear,
 * y = a x everywhere: a learned scale per channel (LayerScale).
 * The slopes' gradient sums each row in double, in order, into the
 * workspace, then a slope's rows in a fixed order: the same bits whatever
 * the thread count or the layout. With hw == 1 (channels innermost:
 * vectors, tokens; nChw{B}c is then the plain layout) rows of one element
 * would cost a call per element and a double per element of workspace:
 * there a sample's c elements are one contiguous loop, and the sums are
 * parts of BK_PRELU_CH samples per channel (cuda_core.h's, so that the GPU
 * gives the same bits), then a slope's parts in order. */
#include "base/err.h"
#include "device/cpu.h"
#include "device/cuda_core.h"
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
    int lin = d->u.prelu.linear;

    row_at(d, r, &base, &step);
    if (d->dtype == BFIT_F32) {
        const float *xf = x;
        float *yf = y;
        for (int64_t p = 0, i = base; p < hw; p++, i += step)
            yf[i] = xf[i] > 0 && !lin ? xf[i] : a * xf[i];
        return;
    }
    for (int64_t p = 0, i = base; p < hw; p++, i += step) {
        float v = bfit_ld(x, d->dtype, i);
        bfit_st(y, d->dtype, i, v > 0 && !lin ? v : a * v);
    }
}

/* dx (when asked) and the row's sum of dy x where x <= 0 (linear:
 * everywhere), in double */
static double bwd_row(const bfit_op_desc *d, const void *x, const void *dy, void *dx, int64_t r, float a)
{
    int64_t base, step, hw = d->u.prelu.hw;
    int lin = d->u.prelu.linear;
    double acc = 0;

    row_at(d, r, &base, &step);
    if (d->dtype == BFIT_F32) {
        const float *xf = x, *g = dy;
        float *dxf = dx;
        for (int64_t p = 0, i = base; p < hw; p++, i += step) {
            float v = xf[i], gi = g[i]; /* read before dx is written: dx may be dy */
            if (v <= 0 || lin)
                acc += (double)gi * (double)v;
            if (dxf)
                dxf[i] = v > 0 && !lin ? gi : a * gi;
        }
        return acc;
    }
    for (int64_t p = 0, i = base; p < hw; p++, i += step) {
        float v = bfit_ld(x, d->dtype, i), gi = bfit_ld(dy, d->dtype, i);
        if (v <= 0 || lin)
            acc += (double)gi * (double)v;
        if (dx)
            bfit_st(dx, d->dtype, i, v > 0 && !lin ? gi : a * gi);
    }
    return acc;
}

/* hw == 1: sample k's c elements in one loop, its slopes read in step */
static void fwd_vec(const bfit_op_desc *d, const void *x, const float *w, void *y, int64_t k)
{
    int64_t c = d->u.prelu.c, i0 = k * c, ws = d->u.prelu.shared ? 0 : 1;
    int lin = d->u.prelu.linear;

    if (d->dtype == BFIT_F32) {
        const float *xf = (const float *)x + i0;
        float *yf = (float *)y + i0;
        for (int64_t j = 0; j < c; j++)
            yf[j] = xf[j] > 0 && !lin ? xf[j] : w[j * ws] * xf[j];
        return;
    }
    for (int64_t j = 0; j < c; j++) {
        float v = bfit_ld(x, d->dtype, i0 + j);
        bfit_st(y, d->dtype, i0 + j, v > 0 && !lin ? v : w[j * ws] * v);
    }
}

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    int64_t n = d->u.prelu.n, rows = n * d->u.prelu.c;
    const float *w = a->weights;

    if (!a->src || !a->weights || !a->dst)
        return bfit_fail(BFIT_EINVAL, "prelu: src, weights (the slopes) and dst are required");
    if (d->u.prelu.hw == 1) {
        BFIT_PAR_ROWS_IF(rows > BFIT_PAR_MIN, for (int64_t k = 0; k < n; k++) { fwd_vec(d, a->src, w, a->dst, k); });
        return BFIT_OK;
    }
    BFIT_PAR_ROWS_IF(rows * d->u.prelu.hw > BFIT_PAR_MIN, for (int64_t r = 0; r < rows; r++) {
        fwd_row(d, a->src, a->dst, r, slope_of(d, w, r));
    });
    return BFIT_OK;
}

/* The slopes' gradient from the partial sums: the rows' (hw > 1) or the
 * chunks' parts (hw == 1), a slope's by sample (chunk), then channel (all
 * channels for a shared slope), set or added. */
static void slope_grads(const bfit_op_desc *d, const double *rs, float *dw)
{
    int64_t c = d->u.prelu.c, ns = d->u.prelu.shared ? 1 : c;
    int64_t nr = d->u.prelu.hw == 1 ? (d->u.prelu.n + BK_PRELU_CH - 1) / BK_PRELU_CH : d->u.prelu.n;

    for (int64_t j = 0; j < ns; j++) {
        int64_t lo = ns == 1 ? 0 : j, hi = ns == 1 ? c : j + 1; /* the channels slope j covers */
        double s = 0;
        for (int64_t k = 0; k < nr; k++)
            for (int64_t ch = lo; ch < hi; ch++)
                s += rs[k * c + ch];
        dw[j] = d->accumulate ? dw[j] + (float)s : (float)s;
    }
}

/* A tile of the hw == 1 backward: a chunk's samples [k0, k1) in channels
 * [j0, j1), read a sample's channels in one loop; dx when asked, and into
 * part[j] (NULL: not asked) the sums of dy x where x <= 0 (linear:
 * everywhere), each in sample order: cuda_core.h's bk_prelu_col_part. */
static void bwd_tile(const bfit_op_desc *d, const bfit_op_args *a, int64_t k0, int64_t k1, int64_t j0, int64_t j1,
                     double *part)
{
    int64_t c = d->u.prelu.c, ws = d->u.prelu.shared ? 0 : 1;
    int lin = d->u.prelu.linear;
    const float *w = a->weights;

    for (int64_t j = j0; part && j < j1; j++)
        part[j] = 0;
    for (int64_t k = k0; k < k1; k++) {
        if (d->dtype == BFIT_F32) {
            const float *xf = (const float *)a->src + k * c, *g = (const float *)a->diff_dst + k * c;
            float *dxf = a->diff_src ? (float *)a->diff_src + k * c : NULL;
            for (int64_t j = j0; j < j1; j++) {
                float v = xf[j], gj = g[j]; /* read before dx is written: dx may be dy */
                if (part && (v <= 0 || lin))
                    part[j] += (double)gj * (double)v;
                if (dxf)
                    dxf[j] = v > 0 && !lin ? gj : w[j * ws] * gj;
            }
            continue;
        }
        for (int64_t j = j0, i = k * c + j0; j < j1; j++, i++) {
            float v = bfit_ld(a->src, d->dtype, i), gj = bfit_ld(a->diff_dst, d->dtype, i);
            if (part && (v <= 0 || lin))
                part[j] += (double)gj * (double)v;
            if (a->diff_src)
                bfit_st(a->diff_src, d->dtype, i, v > 0 && !lin ? gj : w[j * ws] * gj);
        }
    }
}

/* The columns of a tile: enough tiles for the threads when a chunk is all
 * there is, a sample's stretch still long enough to stream */
#define TILE_COLS 128

static void run_bwd_vec(const bfit_op_desc *d, const bfit_op_args *a, double *parts)
{
    int64_t n = d->u.prelu.n, c = d->u.prelu.c, nq = (n + BK_PRELU_CH - 1) / BK_PRELU_CH;
    int64_t ncb = (c + TILE_COLS - 1) / TILE_COLS;

    BFIT_PAR_ROWS_IF(n * c > BFIT_PAR_MIN, for (int64_t t = 0; t < nq * ncb; t++) {
        int64_t q = t / ncb, j0 = t % ncb * TILE_COLS, k1 = (q + 1) * BK_PRELU_CH;
        bwd_tile(d, a, q * BK_PRELU_CH, k1 < n ? k1 : n, j0, j0 + TILE_COLS < c ? j0 + TILE_COLS : c,
                 parts ? parts + q * c : NULL);
    });
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
    if (d->u.prelu.hw == 1)
        run_bwd_vec(d, a, rs);
    else
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
    int64_t B = d->u.prelu.blk, nr;

    if (d->u.prelu.n < 1 || d->u.prelu.c < 1 || d->u.prelu.hw < 1)
        return bfit_fail(BFIT_EINVAL, "prelu: n %lld, c %lld and hw %lld must be positive", (long long)d->u.prelu.n,
                         (long long)d->u.prelu.c, (long long)d->u.prelu.hw);
    if (B && ((B != 8 && B != 16) || d->u.prelu.c % B || (d->dtype != BFIT_F32 && d->dtype != BFIT_BF16)))
        return bfit_fail(BFIT_EINVAL, "prelu: blocked data (blk %lld) must be f32 or bf16 in blocks of 8 or 16 of its "
                         "%lld channels", (long long)B, (long long)d->u.prelu.c);
    op->saved = 0;
    /* a double per row, or with hw == 1 per chunk of BK_PRELU_CH samples and channel */
    nr = d->u.prelu.hw == 1 ? (d->u.prelu.n + BK_PRELU_CH - 1) / BK_PRELU_CH : d->u.prelu.n;
    op->ws = d->kind == BFIT_OP_PRELU_BWD ? (size_t)(nr * d->u.prelu.c) * sizeof(double) : 0;
    op->run = d->kind == BFIT_OP_PRELU_FWD ? run_fwd : run_bwd;
    return BFIT_OK;
}
