/* cpu_conv_c1.c - the weight gradient of a convolution with one input
 * channel (a grayscale image's first layer), f32, its output gradient in
 * nChw8c or nChw16c (a layout chain's, device.h's blk_dst) or in nchw (the
 * same sums in the same order, so a step's gradients are the same bits in
 * either layout).
 *
 * oneDNN's direct kernels want the input in the same blocks, so it pads the
 * one channel to 8 (AVX2) and computes 8 times the work: the cnn's conv1
 * weight gradient took 6.98 ms a call at batch 128, 8 GFLOP/s, a seventh of
 * the step. Here each output-channel block's gradient is 8 lanes of FMAs:
 * a vector of dy (the block's 8 channels at one output position) times the
 * input value under each window position, broadcast; for 3x3 of stride 1,
 * 4 positions of a row at once, each input value broadcast once for the
 * windows that hold it (10.8 -> 7 ms a call at batch 512, where the 51 MB of
 * dy it reads take about 3.5). Sums per sample in f32 (at most oh ow terms),
 * over the samples in double. */
#include "base/err.h"
#include "base/par.h"
#include "device/cpu.h"

#include <immintrin.h>
#include <stdint.h>

#define C1_MAXK 25 /* window positions (5x5): accumulators in registers or near */

typedef struct c1 {
    int64_t n, oc, ih, iw, oh, ow, kh, kw, sh, sw, ph, pw;
    int B, blk; /* channels a block (the output's block, or 8 in nchw); blocked or nchw */
} c1;

static c1 geom(const bfit_op_desc *d)
{
    int blk = d->u.conv.blk_dst;
    c1 g = {d->u.conv.n,  d->u.conv.oc, d->u.conv.ih, d->u.conv.iw, d->u.conv.oh, d->u.conv.ow, d->u.conv.kh,
            d->u.conv.kw, d->u.conv.sh, d->u.conv.sw, d->u.conv.ph, d->u.conv.pw, blk ? blk : 8, blk != 0};
    return g;
}

/* t[k] += d[j] x[under window position k of position j] for 4 positions
 * of a row side by side (3x3, stride 1, xw the first window's corner):
 * each input value broadcast once for the windows that hold it (18
 * broadcasts, not 36), every sum still taking its terms in position order */
static inline __attribute__((always_inline)) void c1_four3x3(const float *xw, int64_t iw, const __m256 d[4], __m256 *t)
{
#pragma GCC unroll 3
    for (int64_t ky = 0; ky < 3; ky++)
#pragma GCC unroll 6
        for (int c = 0; c < 6; c++) {
            __m256 xb = _mm256_broadcast_ss(xw + ky * iw + c);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                if (c - j >= 0 && c - j < 3)
                    t[ky * 3 + c - j] = _mm256_fmadd_ps(d[j], xb, t[ky * 3 + c - j]);
        }
}

/* Sample n's sums for lanes [8 h, 8 h + 8) of output block ob: s[k] over
 * the output positions of x[under window position k] dy, *b of dy, the
 * positions in row-major order. Inlined with KH, KW constants (3x3) and
 * BLK (dy blocked: a vector load; nchw: a gather), the sums stay in
 * registers; a row's windows wholly inside the image (ox in [lo, hi)) take
 * no checks. */
static inline __attribute__((always_inline)) void c1_sample_k(const c1 *g, const float *x, const float *dy, int64_t n,
                                                              int64_t ob, int h, __m256 *s, __m256 *b,
                                                              const int64_t KH, const int64_t KW, const int BLK)
{
    const float *xs = x + n * g->ih * g->iw;
    int64_t ohw = g->oh * g->ow, pstep = BLK ? g->B : 1;
    const float *dyb = BLK ? dy + ((n * (g->oc / g->B) + ob) * ohw) * g->B + 8 * h : dy + (n * g->oc + ob * 8) * ohw;
    const __m256i lanes = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)ohw));
    int64_t lo = (g->pw + g->sw - 1) / g->sw, hi = g->iw - KW + g->pw < 0 ? 0 : (g->iw - KW + g->pw) / g->sw + 1;
    __m256 t[C1_MAXK], bs = _mm256_setzero_ps();

    lo = lo < g->ow ? lo : g->ow;
    hi = hi < g->ow ? hi : g->ow;
    hi = hi > lo ? hi : lo;
#pragma GCC unroll 25
    for (int64_t k = 0; k < KH * KW; k++)
        t[k] = _mm256_setzero_ps();
    for (int64_t oy = 0; oy < g->oh; oy++) {
        int64_t y0 = oy * g->sh - g->ph, in_y = y0 >= 0 && y0 + KH <= g->ih;
        const float *dyr = dyb + oy * g->ow * pstep;
        for (int64_t ox = 0; ox < g->ow; ox++) {
            int64_t x0 = ox * g->sw - g->pw;
            __m256 v;
            if (KH == 3 && KW == 3 && g->sw == 1 && in_y && ox >= lo && ox + 4 <= hi) {
                /* 4 positions at once (c1_four3x3) */
                __m256 d[4];
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    d[j] = BLK ? _mm256_loadu_ps(dyr + (ox + j) * pstep) : _mm256_i32gather_ps(dyr + ox + j, lanes, 4);
                    bs = _mm256_add_ps(bs, d[j]);
                }
                c1_four3x3(xs + y0 * g->iw + x0, g->iw, d, t);
                ox += 3;
                continue;
            }
            v = BLK ? _mm256_loadu_ps(dyr + ox * pstep) : _mm256_i32gather_ps(dyr + ox, lanes, 4);
            bs = _mm256_add_ps(bs, v);
            if (in_y && ox >= lo && ox < hi) { /* the whole window inside: no checks */
                const float *xw = xs + y0 * g->iw + x0;
#pragma GCC unroll 5
                for (int64_t ky = 0; ky < KH; ky++)
#pragma GCC unroll 5
                    for (int64_t kx = 0; kx < KW; kx++)
                        t[ky * KW + kx] = _mm256_fmadd_ps(v, _mm256_broadcast_ss(xw + ky * g->iw + kx), t[ky * KW + kx]);
                continue;
            }
#pragma GCC unroll 5
            for (int64_t ky = 0; ky < KH; ky++)
#pragma GCC unroll 5
                for (int64_t kx = 0; kx < KW; kx++) {
                    int64_t iy = y0 + ky, ix = x0 + kx;
                    if (iy >= 0 && iy < g->ih && ix >= 0 && ix < g->iw)
                        t[ky * KW + kx] = _mm256_fmadd_ps(v, _mm256_broadcast_ss(xs + iy * g->iw + ix), t[ky * KW + kx]);
                }
        }
    }
#pragma GCC unroll 25
    for (int64_t k = 0; k < KH * KW; k++)
        s[k] = t[k];
    *b = bs;
}

static void c1_sample(const c1 *g, const float *x, const float *dy, int64_t n, int64_t ob, int h, __m256 *s,
                      __m256 *b)
{
    if (g->kh == 3 && g->kw == 3 && g->blk)
        c1_sample_k(g, x, dy, n, ob, h, s, b, 3, 3, 1);
    else if (g->kh == 3 && g->kw == 3)
        c1_sample_k(g, x, dy, n, ob, h, s, b, 3, 3, 0);
    else if (g->blk)
        c1_sample_k(g, x, dy, n, ob, h, s, b, g->kh, g->kw, 1);
    else
        c1_sample_k(g, x, dy, n, ob, h, s, b, g->kh, g->kw, 0);
}

/* Output block ob's weight gradients (and its bias's): set, or added to
 * with accumulate. dw is plain [oc, 1, kh, kw]. */
static void c1_block(const bfit_op_desc *d, const float *x, const float *dy, float *dw, float *db, int64_t ob)
{
    c1 g = geom(d);
    int64_t K = g.kh * g.kw;

    for (int h = 0; h < g.B / 8; h++) {
        double acc[C1_MAXK][8] = {{0}}, bacc[8] = {0};
        for (int64_t n = 0; n < g.n; n++) {
            __m256 s[C1_MAXK], b;
            float lane[8];
            c1_sample(&g, x, dy, n, ob, h, s, &b);
            for (int64_t k = 0; k < K; k++) {
                _mm256_storeu_ps(lane, s[k]);
                for (int l = 0; l < 8; l++)
                    acc[k][l] += lane[l];
            }
            _mm256_storeu_ps(lane, b);
            for (int l = 0; l < 8; l++)
                bacc[l] += lane[l];
        }
        for (int l = 0; l < 8; l++) {
            int64_t o = ob * g.B + 8 * h + l;
            for (int64_t k = 0; k < K; k++)
                dw[o * K + k] = (float)(d->accumulate ? dw[o * K + k] + acc[k][l] : acc[k][l]);
            if (db)
                db[o] = (float)(d->accumulate ? db[o] + bacc[l] : bacc[l]);
        }
    }
}

static int run(cpu_op *op, const bfit_op_args *a)
{
    const bfit_op_desc *d = &op->base.desc;
    float *db = d->u.conv.bias ? a->diff_bias : NULL;
    int64_t blocks = d->u.conv.oc / (d->u.conv.blk_dst ? d->u.conv.blk_dst : 8);

    if (!a->src || !a->diff_dst || !a->diff_weights || (d->u.conv.bias && !a->diff_bias))
        return bfit_fail(BFIT_EINVAL,
                         "conv backward weights: src, diff_dst, diff_weights (and diff_bias) are required");
    BFIT_PAR_FOR_IF(blocks > 1, for (int64_t ob = 0; ob < blocks; ob++)
                                    c1_block(d, a->src, a->diff_dst, a->diff_weights, db, ob););
    return BFIT_OK;
}

int bfit_cpu_conv_c1_take(cpu_op *op, const dnnl_memory_desc_t *plain_src, const dnnl_memory_desc_t *chosen_src)
{
    const bfit_op_desc *d = &op->base.desc;

    if (d->kind != BFIT_OP_CONV_BWD_WEIGHTS || d->dtype != BFIT_F32 || d->u.conv.ic != 1 || d->u.conv.groups > 1 ||
        d->u.conv.blk_src || d->u.conv.oc % 8 || (d->u.conv.blk_dst && d->u.conv.blk_dst != 8 && d->u.conv.blk_dst != 16) ||
        d->u.conv.kh * d->u.conv.kw > C1_MAXK || dnnl_memory_desc_equal(plain_src, chosen_src))
        return 0; /* oneDNN's own, unpadded, or not this case */
    op->run = run;
    return 1;
}
