/* cpu_maxpool_blk.c - cpu_maxpool.c's 2x2/2 max pool where its input (and
 * that gradient) is in nChw8c or nChw16c, the layout of the convolutions
 * around it (device.h's blk_src), and its output (and that gradient) in the
 * same or in nchw (blk_dst: nchw before a flatten). A window of a block is
 * 4 rows of 8 or 16 channels side by side: one or two AVX2 vectors of 8
 * lanes each, no transposes (the library's baseline is x86-64-v3, AVX2).
 *
 * The same rules as cpu_maxpool.c: the first maximum wins and a NaN wins
 * (the last NaN of the window, as its masks take it), one index byte per
 * output (0..3, the window's row-major position) at the output's own
 * position, and backward writes every element of dx. Data is f32 or bf16;
 * the maximum is copied, bits and all. f32's forward is fwd_row_f32: the
 * cnn's first pool at batch 512 took 9-11 ms a call in window()'s general
 * loop, 5.5-6.5 there (the same 51 MB read in order takes about 4). */
#include "base/err.h"
#include "base/par.h"
#include "device/cpu.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

typedef struct mp_blk {
    int64_t n, cb, ih, iw, oh, ow; /* cb: blocks of B channels */
    int B, nh;                     /* B: 8 or 16 channels a block, nh = B / 8 vectors */
    int blk_dst;
} mp_blk;

static mp_blk geom(const bfit_op_desc *d)
{
    int B = d->u.pool.blk_src;
    mp_blk g = {d->u.pool.n, d->u.pool.c / B, d->u.pool.ih, d->u.pool.iw, d->u.pool.oh, d->u.pool.ow, B, B / 8,
              d->u.pool.blk_dst};
    return g;
}

/* element of lane 0 at input row y, column x of block (n, cb) */
static inline int64_t in_at(const mp_blk *g, int64_t nb, int64_t y, int64_t x) { return ((nb * g->ih + y) * g->iw + x) * g->B; }

/* output (oy, ox) of lane 0 of block nb = n cb + b, and the step between lanes */
static inline int64_t out_at(const mp_blk *g, int64_t nb, int64_t oy, int64_t ox, int64_t *lane)
{
    if (g->blk_dst) {
        *lane = 1;
        return ((nb * g->oh + oy) * g->ow + ox) * g->B;
    }
    *lane = g->oh * g->ow;
    return (nb * g->B * g->oh + oy) * g->ow + ox; /* (n C + B b) oh ow: nb B = (n cb + b) B */
}

/* 8 lanes of window position at (element index) as f32, and their raw bits
 * (bf16: the value's 16 bits shifted up, so that a blend keeps them) */
static inline __m256 ld8(const void *x, int bf16, int64_t at)
{
    if (bf16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)x + at))), 16));
    return _mm256_loadu_ps((const float *)x + at);
}

/* best, idx (8 lanes) take v (position i) where v > best or v is NaN */
static inline void take8(__m256 v, int i, __m256 *best, __m256i *idx)
{
    __m256 m = _mm256_or_ps(_mm256_cmp_ps(v, *best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    *best = _mm256_blendv_ps(*best, v, m);
    *idx = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(*idx),
                                                _mm256_castsi256_ps(_mm256_set1_epi32(i)), m));
}

/* two 8-lane int32 vectors (values 0..3) as 16 bytes in lane order */
static inline __m128i bytes16(__m256i a, __m256i b)
{
    __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), _MM_SHUFFLE(3, 1, 2, 0));
    return _mm_packs_epi16(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
}

/* the window of output (oy, ox) of block nb: the B maxima, bits and all
 * (f32 lanes, or bf16 values in the low halves of 32-bit lanes), and their
 * index bytes (the first B of 16) */
static inline void window(const mp_blk *g, int bf16, const void *x, int64_t nb, int64_t oy, int64_t ox, __m256i out[2],
                          __m128i *ix)
{
    int64_t at[4] = {in_at(g, nb, 2 * oy, 2 * ox), in_at(g, nb, 2 * oy, 2 * ox + 1), in_at(g, nb, 2 * oy + 1, 2 * ox),
                     in_at(g, nb, 2 * oy + 1, 2 * ox + 1)};
    __m256i idx[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    out[1] = idx[1];
    for (int h = 0; h < g->nh; h++) {
        __m256 best = ld8(x, bf16, at[0] + 8 * h);
        idx[h] = _mm256_setzero_si256();
        for (int i = 1; i < 4; i++)
            take8(ld8(x, bf16, at[i] + 8 * h), i, &best, &idx[h]);
        out[h] = bf16 ? _mm256_srli_epi32(_mm256_castps_si256(best), 16) : _mm256_castps_si256(best);
    }
    *ix = bytes16(idx[0], idx[1]);
}

/* one output row oy of block nb, every lane */
static void fwd_row(const mp_blk *g, int bf16, const void *x, void *y, uint8_t *ix, int64_t nb, int64_t oy)
{
    for (int64_t ox = 0; ox < g->ow; ox++) {
        int64_t step, o = out_at(g, nb, oy, ox, &step);
        __m256i v[2];
        __m128i k;
        window(g, bf16, x, nb, oy, ox, v, &k);
        if (g->blk_dst && bf16) {
            __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(v[0], v[1]), _MM_SHUFFLE(3, 1, 2, 0));
            if (g->nh == 2)
                _mm256_storeu_si256((__m256i *)((uint16_t *)y + o), p);
            else
                _mm_storeu_si128((__m128i *)((uint16_t *)y + o), _mm256_castsi256_si128(p));
        } else if (g->blk_dst) {
            _mm256_storeu_si256((__m256i *)((float *)y + o), v[0]);
            if (g->nh == 2)
                _mm256_storeu_si256((__m256i *)((float *)y + o + 8), v[1]);
        } else { /* nchw: lane l at o + l step */
            uint32_t lanes[16];
            _mm256_storeu_si256((__m256i *)lanes, v[0]);
            _mm256_storeu_si256((__m256i *)(lanes + 8), v[1]);
            for (int l = 0; l < g->B; l++) {
                if (bf16)
                    ((uint16_t *)y)[o + l * step] = (uint16_t)lanes[l];
                else
                    ((uint32_t *)y)[o + l * step] = lanes[l];
            }
        }
        if (ix && g->blk_dst && g->nh == 2) {
            _mm_storeu_si128((__m128i *)(ix + o), k);
        } else if (ix && g->blk_dst) {
            _mm_storel_epi64((__m128i *)(ix + o), k);
        } else if (ix) {
            uint8_t b[16];
            _mm_storeu_si128((__m128i *)b, k);
            for (int l = 0; l < g->B; l++)
                ix[o + l * step] = b[l];
        }
    }
}

/* the winner of (a, b) by take8's rule, b taken where its lane of *m is set:
 * a tournament, (0, 1) and (2, 3) then their winners, keeps the rule's
 * result over the 4 (the first maximum; the last NaN) on a shorter chain */
static inline __m256 duel8(__m256 a, __m256 b, __m256 *m)
{
    *m = _mm256_or_ps(_mm256_cmp_ps(b, a, _CMP_GT_OQ), _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
    return _mm256_blendv_ps(a, b, *m);
}

/* one output row of f32 (window's code specialised: no dtype or layout
 * branch per window). The duel of each window's upper pair goes first over
 * a stretch of the upper input row, then the lower row's: each thread reads
 * its rows in order (both rows at once ran 1.4x slower, the prefetchers
 * chasing two streams per thread). The index 0..3 comes from the three
 * duels' masks. */
#define FWD_SPAN 32
static void fwd_row_f32(const mp_blk *g, const float *x, float *y, uint8_t *ix, int64_t nb, int64_t oy)
{
    const float *r0 = x + in_at(g, nb, 2 * oy, 0), *r1 = r0 + g->iw * g->B;
    const __m256i one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2);
    int64_t step, o0 = out_at(g, nb, oy, 0, &step), ostep = g->blk_dst ? g->B : 1;
    __m256 up[FWD_SPAN][2], upm[FWD_SPAN][2];

    for (int64_t s = 0; s < g->ow; s += FWD_SPAN) {
        int64_t e = s + FWD_SPAN < g->ow ? s + FWD_SPAN : g->ow;
        for (int64_t ox = s; ox < e; ox++)
            for (int h = 0; h < g->nh; h++)
                up[ox - s][h] = duel8(_mm256_loadu_ps(r0 + 2 * ox * g->B + 8 * h),
                                      _mm256_loadu_ps(r0 + (2 * ox + 1) * g->B + 8 * h), &upm[ox - s][h]);
        for (int64_t ox = s; ox < e; ox++) {
            int64_t o = o0 + ox * ostep;
            __m256i k[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
            __m256 w[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
            for (int h = 0; h < g->nh; h++) {
                __m256 m2, m3, w2 = duel8(_mm256_loadu_ps(r1 + 2 * ox * g->B + 8 * h),
                                          _mm256_loadu_ps(r1 + (2 * ox + 1) * g->B + 8 * h), &m2);
                w[h] = duel8(up[ox - s][h], w2, &m3);
                k[h] = _mm256_castps_si256(_mm256_blendv_ps(
                    _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(upm[ox - s][h]), one)),
                    _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(_mm256_castps_si256(m2), one), two)), m3));
            }
            if (g->blk_dst) {
                _mm256_storeu_ps(y + o, w[0]);
                if (g->nh == 2)
                    _mm256_storeu_ps(y + o + 8, w[1]);
                if (ix && g->nh == 2)
                    _mm_storeu_si128((__m128i *)(ix + o), bytes16(k[0], k[1]));
                else if (ix)
                    _mm_storel_epi64((__m128i *)(ix + o), bytes16(k[0], k[1]));
            } else { /* nchw: lane l at o + l step */
                float lanes[16];
                uint8_t b[16];
                _mm256_storeu_ps(lanes, w[0]);
                _mm256_storeu_ps(lanes + 8, w[1]);
                _mm_storeu_si128((__m128i *)b, bytes16(k[0], k[1]));
                for (int l = 0; l < g->B; l++) {
                    y[o + l * step] = lanes[l];
                    if (ix)
                        ix[o + l * step] = b[l];
                }
            }
        }
    }
}

/* 32 bytes to p; streaming (nt) past the caches, p then 32-byte aligned */
static inline void st32(int nt, void *p, __m256i v)
{
    if (nt)
        _mm256_stream_si256((__m256i *)p, v);
    else
        _mm256_storeu_si256((__m256i *)p, v);
}

/* the same for 16 bytes (p then 16-byte aligned) */
static inline void st16(int nt, void *p, __m128i v)
{
    if (nt)
        _mm_stream_si128((__m128i *)p, v);
    else
        _mm_storeu_si128((__m128i *)p, v);
}

/* dx's row pair under output row oy of block nb: dy where the index is the
 * position, zero at the window's other positions (what no window covers is
 * zeroed before) */
static void bwd_row(const mp_blk *g, int bf16, int nt, const void *dy, void *dx, const uint8_t *ix, int64_t nb,
                    int64_t oy)
{
    for (int64_t ox = 0; ox < g->ow; ox++) {
        int64_t at[4] = {in_at(g, nb, 2 * oy, 2 * ox), in_at(g, nb, 2 * oy, 2 * ox + 1),
                         in_at(g, nb, 2 * oy + 1, 2 * ox), in_at(g, nb, 2 * oy + 1, 2 * ox + 1)};
        int64_t step, o = out_at(g, nb, oy, ox, &step);
        __m128i kb;
        __m256i d0, d1 = _mm256_setzero_si256();
        if (g->blk_dst) { /* the B lanes side by side: vector loads, no round trip through memory */
            kb = g->nh == 2 ? _mm_loadu_si128((const __m128i *)(ix + o)) : _mm_loadl_epi64((const __m128i *)(ix + o));
            if (bf16) {
                d0 = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)dy + o)));
                if (g->nh == 2)
                    d1 = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)dy + o + 8)));
            } else {
                d0 = _mm256_loadu_si256((const __m256i *)((const float *)dy + o));
                if (g->nh == 2)
                    d1 = _mm256_loadu_si256((const __m256i *)((const float *)dy + o + 8));
            }
        } else {
            uint32_t d[16] = {0};
            uint8_t k[16] = {0};
            for (int l = 0; l < g->B; l++) {
                k[l] = ix[o + l * step];
                d[l] = bf16 ? ((const uint16_t *)dy)[o + l * step] : ((const uint32_t *)dy)[o + l * step];
            }
            kb = _mm_loadu_si128((const __m128i *)k);
            d0 = _mm256_loadu_si256((const __m256i *)d);
            d1 = _mm256_loadu_si256((const __m256i *)(d + 8));
        }
        {
            __m256i k0 = _mm256_cvtepu8_epi32(kb), k1 = _mm256_cvtepu8_epi32(_mm_srli_si128(kb, 8));
            for (int i = 0; i < 4; i++) {
                __m256i s = _mm256_set1_epi32(i);
                __m256i r0 = _mm256_and_si256(d0, _mm256_cmpeq_epi32(k0, s));
                __m256i r1 = _mm256_and_si256(d1, _mm256_cmpeq_epi32(k1, s));
                if (bf16) {
                    __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r0, r1), _MM_SHUFFLE(3, 1, 2, 0));
                    if (g->nh == 2)
                        st32(nt, (uint16_t *)dx + at[i], p);
                    else
                        st16(nt, (uint16_t *)dx + at[i], _mm256_castsi256_si128(p));
                } else {
                    st32(nt, (float *)dx + at[i], r0);
                    if (g->nh == 2)
                        st32(nt, (float *)dx + at[i] + 8, r1);
                }
            }
        }
    }
}

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    mp_blk g = geom(&op->base.desc);
    int bf16 = op->base.desc.dtype == BFIT_BF16;
    uint8_t *ix = op->saved ? a->saved : NULL;
    int64_t rows = g.n * g.cb * g.oh;

    if (!a->src || !a->dst || (op->saved && !ix))
        return bfit_fail(BFIT_EINVAL, "pool forward: src, dst (and saved for training max) are required");
    if (!bf16)
        BFIT_PAR_FOR_IF(rows * g.ow * g.B > BFIT_PAR_MIN / 4, for (int64_t r = 0; r < rows; r++)
                            fwd_row_f32(&g, a->src, a->dst, ix, r / g.oh, r % g.oh););
    else
        BFIT_PAR_FOR_IF(rows * g.ow * g.B > BFIT_PAR_MIN / 4,
                        for (int64_t r = 0; r < rows; r++) fwd_row(&g, bf16, a->src, a->dst, ix, r / g.oh, r % g.oh););
    return BFIT_OK;
}

static int run_bwd(cpu_op *op, const bfit_op_args *a)
{
    mp_blk g = geom(&op->base.desc);
    int bf16 = op->base.desc.dtype == BFIT_BF16, nt;
    int64_t rows = g.n * g.cb * g.oh, chunks;

    if (!a->diff_dst || !a->diff_src || !a->saved)
        return bfit_fail(BFIT_EINVAL, "pool backward: diff_dst, diff_src (and saved for max) are required");
    if (g.ih != 2 * g.oh || g.iw != 2 * g.ow) /* an odd row or column that no window covers */
        memset(a->diff_src, 0, (size_t)(g.n * g.cb * g.B * g.ih * g.iw) * (bf16 ? 2 : 4));
    /* dx is 4 times dy's size, three quarters zeros, and written whole:
     * streaming stores skip reading its lines into the caches first (the
     * pool's backward took a third of the time it took with plain stores,
     * docs/performance.md) */
    nt = !((uintptr_t)a->diff_src & 31);
    chunks = rows < 64 ? rows : 64;
    BFIT_PAR_FOR_IF(rows * g.ow * g.B > BFIT_PAR_MIN / 4, for (int64_t c = 0; c < chunks; c++) {
        for (int64_t r = c * rows / chunks; r < (c + 1) * rows / chunks; r++)
            bwd_row(&g, bf16, nt, a->diff_dst, a->diff_src, a->saved, r / g.oh, r % g.oh);
        _mm_sfence(); /* the streamed lines are out before the thread leaves the loop */
    });
    return BFIT_OK;
}

/* op->run for a 2x2/2 max pool whose sizes cpu_maxpool.c has set */
int bfit_cpu_maxpool_blk_init(cpu_op *op)
{
    const bfit_op_desc *d = &op->base.desc;
    int B = d->u.pool.blk_src;

    if ((B != 8 && B != 16) || d->u.pool.c % B || (d->u.pool.blk_dst && d->u.pool.blk_dst != B))
        return bfit_fail(BFIT_EINVAL, "cpu pool: a blocked layout wants its input in nChw8c or nChw16c, channels in "
                         "whole blocks and the output in the same or nchw (blocks %d in, %d out; %lld channels)", B,
                         d->u.pool.blk_dst, (long long)d->u.pool.c);
    op->run = d->kind == BFIT_OP_POOL_FWD ? run_fwd : run_bwd;
    return BFIT_OK;
}
