/* cpu_maxpool_k.c - max pooling of any window, stride and padding on plain
 * nchw, f32 and bf16, forward and backward: our own loops (the 2x2/2
 * unpadded pool is cpu_maxpool.c's).
 *
 * oneDNN 2.6 pools nchw with its `simple_nchw` kernel, one output at a time
 * through its generic index arithmetic: ResNet's stem pool (3x3, stride 2,
 * padding 1) took 28 ms forward and 6-9 ms backward on 32x64x32x32 with 2
 * AVX2 threads, a twelfth of a resnet18 step at 64x64. Here a row of
 * outputs reads its window's input rows directly.
 *
 * The rules are cpu_maxpool.c's and PyTorch's: padding never wins (it is
 * -inf), the first maximum wins, a NaN wins (the last one in the window's
 * row-major order), and the maximum is copied bits and all. The saved
 * indices are one byte per output, the winner's row-major position in the
 * window (ky kw + kx), as oneDNN keeps them for windows under 256
 * positions, so the plan is unchanged. Backward adds each dy at its
 * winner in the outputs' row-major order (overlapping windows sum); for
 * bf16 each input gathers the same sum in f32, rounded once. */
#include "base/err.h"
#include "base/par.h"
#include "device/cpu.h"
#include "device/half.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct mpk {
    int64_t planes, ih, iw, oh, ow, kh, kw, sh, sw, ph, pw;
} mpk;

static mpk geom(const bfit_op_desc *d)
{
    mpk g = {d->u.pool.n * d->u.pool.c, d->u.pool.ih, d->u.pool.iw, d->u.pool.oh, d->u.pool.ow, d->u.pool.kh,
             d->u.pool.kw, d->u.pool.sh, d->u.pool.sw, d->u.pool.ph, d->u.pool.pw};
    return g;
}

static inline float ld(const void *p, int bf16, int64_t i)
{
    return bf16 ? bfit_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* Outputs [from, to) of row oy of plane p: y (and their index bytes ix,
 * NULL in eval); inlined with bf16 a constant, so each dtype's loop loads
 * plainly. */
static inline __attribute__((always_inline)) void fwd_span(const mpk *g, int bf16, const void *x, void *y,
                                                           uint8_t *ix, int64_t p, int64_t oy, int64_t from,
                                                           int64_t to)
{
    int64_t y0 = oy * g->sh - g->ph, ky0 = y0 < 0 ? -y0 : 0, ky1 = y0 + g->kh > g->ih ? g->ih - y0 : g->kh;
    int64_t in = p * g->ih * g->iw, out = (p * g->oh + oy) * g->ow;

    for (int64_t ox = from; ox < to; ox++) {
        int64_t x0 = ox * g->sw - g->pw, kx0 = x0 < 0 ? -x0 : 0, kx1 = x0 + g->kw > g->iw ? g->iw - x0 : g->kw;
        int64_t best_at = in + (y0 + ky0) * g->iw + x0 + kx0, best_k = ky0 * g->kw + kx0;
        float best = ld(x, bf16, best_at);
        for (int64_t ky = ky0; ky < ky1; ky++) {
            int64_t row = in + (y0 + ky) * g->iw + x0;
            for (int64_t kx = ky == ky0 ? kx0 + 1 : kx0; kx < kx1; kx++) {
                float v = ld(x, bf16, row + kx);
                if (v > best || isnan(v)) {
                    best = v;
                    best_at = row + kx;
                    best_k = ky * g->kw + kx;
                }
            }
        }
        if (bf16)
            ((uint16_t *)y)[out + ox] = ((const uint16_t *)x)[best_at];
        else
            ((float *)y)[out + ox] = ((const float *)x)[best_at];
        if (ix)
            ix[out + ox] = (uint8_t)best_k;
    }
}

/* 8 f32 of x from p at stride s (1 or 2); no element read past the 8th's */
static inline __m256 ld8s(const float *p, int64_t s)
{
    const __m256i seven = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, -1, 0);
    __m256 lo, hi;
    if (s == 1)
        return _mm256_loadu_ps(p);
    lo = _mm256_loadu_ps(p);
    hi = _mm256_maskload_ps(p + 8, seven); /* p[15] is not the 8th's: it may be past the tensor */
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0))),
                                                  _MM_SHUFFLE(3, 1, 2, 0)));
}

/* 8 bf16 of x from p at stride s (1 or 2) widened to f32 (exactly: the
 * bits shifted up); no element read past the 8th's */
static inline __m256 ld8s_bf16(const uint16_t *p, int64_t s)
{
    const __m256i seven = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, -1, 0);
    __m256i w;
    if (s == 1)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
    /* pairs (p[2j], p[2j+1]) as 32-bit words, 7 of them (p[15] may be past
     * the tensor), the 8th p[14] alone; the shift keeps each low half */
    w = _mm256_insert_epi32(_mm256_maskload_epi32((const int *)p, seven), p[14], 7);
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

static inline __m256 ld8(const void *p, int bf16, int64_t at, int64_t s)
{
    return bf16 ? ld8s_bf16((const uint16_t *)p + at, s) : ld8s((const float *)p + at, s);
}

/* stride 1 or 2: outputs [from, to) whose windows lie inside the row, 8 at
 * a time, to what the scalar loop gives (the same comparisons in the same
 * order, lane by lane, bf16 widened exactly as ld() does; the maximum's
 * bits copied back); returns where it stopped (from, when fewer than 8). */
static inline __attribute__((always_inline)) int64_t fwd_span8(const mpk *g, int bf16, const void *x, void *y,
                                                               uint8_t *ix, int64_t p, int64_t oy, int64_t from,
                                                               int64_t to)
{
    int64_t y0 = oy * g->sh - g->ph, ky0 = y0 < 0 ? -y0 : 0, ky1 = y0 + g->kh > g->ih ? g->ih - y0 : g->kh;
    int64_t in = p * g->ih * g->iw, out = (p * g->oh + oy) * g->ow, ox = from;

    if (to - from < 8)
        return from;
    for (;;) {
        int64_t at = in + (y0 + ky0) * g->iw + ox * g->sw - g->pw;
        __m256 best = ld8(x, bf16, at, g->sw);
        __m256i idx = _mm256_set1_epi32((int)(ky0 * g->kw));
        __m128i b16;
        for (int64_t ky = ky0; ky < ky1; ky++)
            for (int64_t kx = ky == ky0; kx < g->kw; kx++) {
                __m256 v = ld8(x, bf16, in + (y0 + ky) * g->iw + ox * g->sw - g->pw + kx, g->sw);
                __m256 m = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
                best = _mm256_blendv_ps(best, v, m);
                idx = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(idx),
                                                           _mm256_castsi256_ps(_mm256_set1_epi32((int)(ky * g->kw + kx))), m));
            }
        if (bf16) {
            __m256i h = _mm256_srli_epi32(_mm256_castps_si256(best), 16);
            _mm_storeu_si128((__m128i *)((uint16_t *)y + out + ox),
                             _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
        } else {
            _mm256_storeu_ps((float *)y + out + ox, best);
        }
        if (ix) {
            b16 = _mm_packs_epi32(_mm256_castsi256_si128(idx), _mm256_extracti128_si256(idx, 1));
            _mm_storel_epi64((__m128i *)(ix + out + ox), _mm_packus_epi16(b16, b16));
        }
        if (ox + 8 == to)
            return to;
        /* the last 8 end at `to`, overlapping those before: each lane is its own output, written alike twice */
        ox = ox + 16 <= to ? ox + 8 : to - 8;
    }
}

/* One dtype's row: the clipped ends one at a time, the middle 8 at a time. */
static inline __attribute__((always_inline)) void fwd_row(const mpk *g, int bf16, const void *x, void *y,
                                                          uint8_t *ix, int64_t p, int64_t oy)
{
    /* the outputs whose windows need no clipping of columns: x0 >= 0 and x0 + kw <= iw */
    int64_t lo = (g->pw + g->sw - 1) / g->sw, hi = g->iw + g->pw >= g->kw ? (g->iw + g->pw - g->kw) / g->sw + 1 : 0;
    hi = hi < g->ow ? hi : g->ow;
    if (g->sw > 2 || lo >= hi) {
        fwd_span(g, bf16, x, y, ix, p, oy, 0, g->ow);
        return;
    }
    fwd_span(g, bf16, x, y, ix, p, oy, 0, lo);
    lo = fwd_span8(g, bf16, x, y, ix, p, oy, lo, hi);
    fwd_span(g, bf16, x, y, ix, p, oy, lo, g->ow);
}

static void fwd_row_f32(const mpk *g, const void *x, void *y, uint8_t *ix, int64_t p, int64_t oy)
{
    fwd_row(g, 0, x, y, ix, p, oy);
}

static void fwd_row_bf16(const mpk *g, const void *x, void *y, uint8_t *ix, int64_t p, int64_t oy)
{
    fwd_row(g, 1, x, y, ix, p, oy);
}

/* f32: plane p of dx zeroed, then each output's dy added at its winner, in
 * the outputs' row-major order. */
static void bwd_plane_f32(const mpk *g, const float *dy, float *dx, const uint8_t *ix, int64_t p)
{
    float *d = dx + p * g->ih * g->iw;
    int64_t o = p * g->oh * g->ow;

    memset(d, 0, (size_t)(g->ih * g->iw) * sizeof *d);
    for (int64_t oy = 0; oy < g->oh; oy++)
        for (int64_t ox = 0; ox < g->ow; ox++, o++) {
            int k = ix[o];
            d[(oy * g->sh - g->ph + k / g->kw) * g->iw + ox * g->sw - g->pw + k % g->kw] += dy[o];
        }
}

/* cpu.h: the outputs o0 <= o < o1 whose windows (kernel k, stride s,
 * padding pad) hold input position i, clipped to [0, on); o0 is the first
 * whose window ends after i either way. */
void bfit_cpu_pool_windows(int64_t i, int64_t k, int64_t s, int64_t pad, int64_t on, int64_t *o0, int64_t *o1)
{
    int64_t lo = i + pad - k + 1, hi = (i + pad) / s + 1; /* o s - pad <= i < o s - pad + k */
    lo = lo <= 0 ? 0 : (lo + s - 1) / s;
    *o0 = lo;
    *o1 = hi < on ? hi : on;
}

/* bf16: input row iy of plane p, each dx the sum in f32 of dy over the
 * windows it won (the same order), rounded once. */
static void bwd_row_bf16(const mpk *g, const uint16_t *dy, uint16_t *dx, const uint8_t *ix, int64_t p, int64_t iy)
{
    int64_t oy0, oy1, in = (p * g->ih + iy) * g->iw, out = p * g->oh * g->ow;

    bfit_cpu_pool_windows(iy, g->kh, g->sh, g->ph, g->oh, &oy0, &oy1);
    for (int64_t jx = 0; jx < g->iw; jx++) {
        int64_t ox0, ox1;
        float s = 0;
        bfit_cpu_pool_windows(jx, g->kw, g->sw, g->pw, g->ow, &ox0, &ox1);
        for (int64_t oy = oy0; oy < oy1; oy++)
            for (int64_t ox = ox0; ox < ox1; ox++) {
                int64_t o = out + oy * g->ow + ox, k = (iy - (oy * g->sh - g->ph)) * g->kw + jx - (ox * g->sw - g->pw);
                if (ix[o] == k)
                    s += bfit_bf16_to_f32(dy[o]);
            }
        dx[in + jx] = bfit_f32_to_bf16(s);
    }
}

/* bf16: plane p's input rows a strip at a time, each input's dy sums in
 * an f32 buffer on the stack, in the outputs' row-major order (the order
 * bwd_row_bf16 gathers them in), rounded once: the same bits, without a
 * search of every window for each input. Rows wider than the buffer go to
 * bwd_row_bf16. */
#define STRIP 4096
static void bwd_plane_bf16(const mpk *g, const uint16_t *dy, uint16_t *dx, const uint8_t *ix, int64_t p)
{
    float acc[STRIP];
    int64_t rows = STRIP / g->iw;

    if (rows < 1) {
        for (int64_t iy = 0; iy < g->ih; iy++)
            bwd_row_bf16(g, dy, dx, ix, p, iy);
        return;
    }
    for (int64_t r0 = 0; r0 < g->ih; r0 += rows) {
        int64_t r1 = r0 + rows < g->ih ? r0 + rows : g->ih, oy0, oy1, oy_end;
        bfit_cpu_pool_windows(r0, g->kh, g->sh, g->ph, g->oh, &oy0, &oy1);
        bfit_cpu_pool_windows(r1 - 1, g->kh, g->sh, g->ph, g->oh, &oy1, &oy_end);
        memset(acc, 0, (size_t)((r1 - r0) * g->iw) * sizeof *acc);
        for (int64_t oy = oy0; oy < oy_end; oy++)
            for (int64_t ox = 0; ox < g->ow; ox++) {
                int64_t o = (p * g->oh + oy) * g->ow + ox, k = ix[o], iy = oy * g->sh - g->ph + k / g->kw;
                if (iy >= r0 && iy < r1)
                    acc[(iy - r0) * g->iw + ox * g->sw - g->pw + k % g->kw] += bfit_bf16_to_f32(dy[o]);
            }
        for (int64_t i = 0; i < (r1 - r0) * g->iw; i++)
            dx[(p * g->ih + r0) * g->iw + i] = bfit_f32_to_bf16(acc[i]);
    }
}
#undef STRIP

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    mpk g = geom(&op->base.desc);
    void (*row)(const mpk *, const void *, void *, uint8_t *, int64_t, int64_t) =
        op->base.desc.dtype == BFIT_BF16 ? fwd_row_bf16 : fwd_row_f32;
    uint8_t *ix = op->saved ? a->saved : NULL;
    int64_t rows = g.planes * g.oh;

    if (!a->src || !a->dst || (op->saved && !ix))
        return bfit_fail(BFIT_EINVAL, "pool forward: src, dst (and saved for training max) are required");
    BFIT_PAR_FOR_IF(rows * g.ow * g.kh * g.kw > BFIT_PAR_MIN / 4,
                    for (int64_t r = 0; r < rows; r++) row(&g, a->src, a->dst, ix, r / g.oh, r % g.oh););
    return BFIT_OK;
}

static int run_bwd(cpu_op *op, const bfit_op_args *a)
{
    mpk g = geom(&op->base.desc);
    int64_t rows = g.planes * g.ih;

    if (!a->diff_dst || !a->diff_src || !a->saved)
        return bfit_fail(BFIT_EINVAL, "pool backward: diff_dst, diff_src (and saved for max) are required");
    if (op->base.desc.dtype == BFIT_F32)
        BFIT_PAR_FOR_IF(g.planes * g.ih * g.iw > BFIT_PAR_MIN / 4,
                        for (int64_t p = 0; p < g.planes; p++)
                            bwd_plane_f32(&g, a->diff_dst, a->diff_src, a->saved, p););
    else
        BFIT_PAR_FOR_IF(rows * g.iw * g.kh * g.kw > BFIT_PAR_MIN / 4,
                        for (int64_t p = 0; p < g.planes; p++)
                            bwd_plane_bf16(&g, a->diff_dst, a->diff_src, a->saved, p););
    return BFIT_OK;
}

/* Take the op if it is a max pool of f32 or bf16 in nchw whose window has
 * at most 255 positions (*done = 1), or such an f32 one in nChw8c/16c
 * (cpu_maxpool_kblk.c); the caller has checked the geometry (a window
 * always holds an input: padding below the kernel). */
int bfit_cpu_maxpool_k_init(cpu_op *op, int *done)
{
    const bfit_op_desc *d = &op->base.desc;
    bfit_cpu_run_fn run = NULL;

    if (d->u.pool.max && d->u.pool.kh * d->u.pool.kw <= 255) {
        if (d->u.pool.blk_src || d->u.pool.blk_dst)
            run = bfit_cpu_maxpool_kblk_run(d);
        else if (d->dtype == BFIT_F32 || d->dtype == BFIT_BF16)
            run = d->kind == BFIT_OP_POOL_FWD ? run_fwd : run_bwd;
    }
    *done = run != NULL;
    if (!*done)
        return BFIT_OK;
    op->ws = 0;
    op->saved = bfit_cpu_maxpool_saved(d);
    op->run = run;
    return BFIT_OK;
}
