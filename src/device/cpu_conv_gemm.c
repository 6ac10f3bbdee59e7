/* cpu_conv_gemm.c - a convolution's weight gradient as one matrix product
 * over the samples, f32 nchw, where oneDNN would take its gemm fallback.
 *
 * oneDNN 2.6's direct AVX2 kernels decline some weight gradients (maps
 * smaller than the window: ResNet-18's last stage at 64x64 inputs, 512
 * channels on 2x2 with 3x3), and its gemm fallback multiplies per sample,
 * with the sample's output positions (4 there) as the product's inner
 * dimension: 25 ms a call at batch 32, 24 GFLOP/s. Here the samples'
 * columns lie side by side, so one product
 *   dW[oc][ic kh kw] = dY[oc][n p] col[ic kh kw][n p]^T
 * has n p as its inner dimension. The samples go in chunks that keep the
 * two packed matrices within GEMM_BYTES: they are the op's workspace. The
 * bias's gradient sums dy per channel in double. x and dy may each be nchw
 * or a layout chain's nChw8c / nChw16c (blk_src, blk_dst): the packing
 * reads either. */
#include "base/err.h"
#include "base/par.h"
#include "base/testctl.h"
#include "device/cpu.h"

#include <stdint.h>
#include <string.h>

#define GEMM_BYTES ((size_t)8 << 20)

/* Samples a chunk and the two packed matrices' bytes (dY's first). */
static int64_t chunk(const bfit_op_desc *d, size_t *a_bytes, size_t *b_bytes)
{
    int64_t P = d->u.conv.oh * d->u.conv.ow, K = d->u.conv.ic * d->u.conv.kh * d->u.conv.kw;
    size_t per = (size_t)(d->u.conv.oc + K) * (size_t)P * sizeof(float);
    int64_t c = (int64_t)(GEMM_BYTES / (per ? per : 1));

    c = c < 1 ? 1 : c > d->u.conv.n ? d->u.conv.n : c;
    *a_bytes = BFIT_ALIGN_UP((size_t)d->u.conv.oc * (size_t)(c * P) * sizeof(float));
    *b_bytes = BFIT_ALIGN_UP((size_t)K * (size_t)(c * P) * sizeof(float));
    return c;
}

/* Element (n, ch, pos) of a [N, C, hw] tensor: nchw (B 0) or nChw{B}c. */
static inline int64_t at(int64_t n, int64_t ch, int64_t pos, int64_t C, int64_t hw, int64_t B)
{
    return B ? ((n * (C / B) + ch / B) * hw + pos) * B + ch % B : (n * C + ch) * hw + pos;
}

/* Row r = (i, ky, kx) of col for samples [n0, n0 + c): the input under
 * window position (ky, kx) of channel i at each output position, 0 in the
 * padding (an index never computed there: at() of a padded position would
 * leave the sample). */
static void pack_col_row(const bfit_op_desc *d, const float *x, float *row, int64_t r, int64_t n0, int64_t c)
{
    const int64_t ih = d->u.conv.ih, iw = d->u.conv.iw, oh = d->u.conv.oh, ow = d->u.conv.ow;
    const int64_t kh = d->u.conv.kh, kw = d->u.conv.kw, sh = d->u.conv.sh, sw = d->u.conv.sw;
    const int64_t i = r / (kh * kw), ky = r / kw % kh, kx = r % kw, B = d->u.conv.blk_src;
    int64_t y0, y1, x0, x1;

    bfit_cpu_conv_span(ky, sh, d->u.conv.ph, ih, oh, &y0, &y1);
    bfit_cpu_conv_span(kx, sw, d->u.conv.pw, iw, ow, &x0, &x1);
    for (int64_t j = 0; j < c; j++) {
        float *o = row + j * oh * ow;
        for (int64_t oy = 0; oy < oh; oy++, o += ow) {
            const int64_t iy = oy * sh - d->u.conv.ph + ky;
            if (oy < y0 || oy >= y1 || x0 >= x1) {
                memset(o, 0, (size_t)ow * sizeof *o);
                continue;
            }
            for (int64_t ox = 0; ox < x0; ox++)
                o[ox] = 0;
            if (!B && sw == 1) /* a plain row: one copy */
                memcpy(o + x0, x + at(n0 + j, i, iy * iw + x0 * sw - d->u.conv.pw + kx, d->u.conv.ic, ih * iw, 0),
                       (size_t)(x1 - x0) * sizeof *o);
            else
                for (int64_t ox = x0; ox < x1; ox++)
                    o[ox] = x[at(n0 + j, i, iy * iw + ox * sw - d->u.conv.pw + kx, d->u.conv.ic, ih * iw, B)];
            for (int64_t ox = x1; ox < ow; ox++)
                o[ox] = 0;
        }
    }
}

/* dY's rows for samples [n0, n0 + c): a[oc][j P + p] = dy[n0 + j][oc][p]. */
static void pack_dy(const bfit_op_desc *d, const float *dy, float *a, int64_t n0, int64_t c)
{
    const int64_t oc = d->u.conv.oc, P = d->u.conv.oh * d->u.conv.ow, B = d->u.conv.blk_dst;
    BFIT_PAR_FOR_IF(oc * c * P > BFIT_PAR_MIN, for (int64_t o = 0; o < oc; o++) for (int64_t j = 0; j < c; j++) {
        float *r = a + (o * c + j) * P;
        if (!B)
            memcpy(r, dy + at(n0 + j, o, 0, oc, P, 0), (size_t)P * sizeof(float));
        else
            for (int64_t p = 0; p < P; p++)
                r[p] = dy[at(n0 + j, o, p, oc, P, B)];
    });
}

static void bias_grad(const bfit_op_desc *d, const float *dy, float *db)
{
    const int64_t oc = d->u.conv.oc, P = d->u.conv.oh * d->u.conv.ow;
    BFIT_PAR_FOR_IF(d->u.conv.n * oc * P > BFIT_PAR_MIN, for (int64_t o = 0; o < oc; o++) {
        double s = 0;
        for (int64_t n = 0; n < d->u.conv.n; n++)
            for (int64_t p = 0; p < P; p++)
                s += dy[at(n, o, p, oc, P, d->u.conv.blk_dst)];
        db[o] = (float)(d->accumulate ? db[o] + s : s);
    });
}

static int run(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    const int64_t P = d->u.conv.oh * d->u.conv.ow, K = d->u.conv.ic * d->u.conv.kh * d->u.conv.kw;
    size_t ab, bb;
    int64_t c = chunk(d, &ab, &bb);
    float *A = a->workspace, *B = (float *)((char *)a->workspace + ab);

    if (!a->src || !a->diff_dst || !a->diff_weights || (d->u.conv.bias && !a->diff_bias))
        return bfit_fail(BFIT_EINVAL,
                         "conv backward weights: src, diff_dst, diff_weights (and diff_bias) are required");
    if (!a->workspace)
        return bfit_fail(BFIT_EINVAL, "conv backward weights: the workspace is required");
    for (int64_t n0 = 0; n0 < d->u.conv.n; n0 += c) {
        int64_t cc = n0 + c <= d->u.conv.n ? c : d->u.conv.n - n0;
        float beta = n0 == 0 && !d->accumulate ? 0.0f : 1.0f;
        pack_dy(d, a->diff_dst, A, n0, cc);
        BFIT_PAR_FOR_IF(K * cc * P > BFIT_PAR_MIN,
                        for (int64_t r = 0; r < K; r++) pack_col_row(d, a->src, B + r * cc * P, r, n0, cc););
        if (dnnl_sgemm('N', 'T', d->u.conv.oc, K, cc * P, 1.0f, A, cc * P, B, cc * P, beta, a->diff_weights, K) !=
            dnnl_success)
            return bfit_fail(BFIT_EDEVICE, "conv backward weights: oneDNN's sgemm failed (%lld x %lld x %lld)",
                             (long long)d->u.conv.oc, (long long)K, (long long)(cc * P));
    }
    if (d->u.conv.bias)
        bias_grad(d, a->diff_dst, a->diff_bias);
    return BFIT_OK;
}

int bfit_cpu_conv_gemm_take(cpu_op *op, int onednn_gemm, size_t *ws)
{
    const bfit_op_desc *d = &op->base.desc;
    size_t ab, bb;

    if (d->kind != BFIT_OP_CONV_BWD_WEIGHTS || d->dtype != BFIT_F32 || d->u.conv.groups > 1 ||
        !(onednn_gemm || bfit_test_value(BFIT_TC_CONV_GEMM)))
        return 0; /* oneDNN's direct kernel, or not this case */
    chunk(d, &ab, &bb);
    *ws = ab + bb;
    op->run = run;
    return 1;
}
