/* cpu_maxpool.c - 2x2 max pooling of stride 2 without padding (the cnn's and
 * VGG's), f32 and bf16, forward and backward: our own loops.
 *
 * oneDNN 2.6 pools a plain nchw tensor by transposing it into a blocked
 * copy and back (its kernels vectorise over channels): the two pools took a
 * quarter of a bf16 cnn step's oneDNN time, at 1.3x f32's speed where the
 * bytes moved are half. Here each output row reads its two input rows
 * directly: with AVX-512 16 outputs at a time, a bf16 pair being one 32-bit
 * lane (even element: the lane shifted left 16; odd: its high half);
 * without it (cpu_isa.h decides) 8 at a time with AVX2, to the same values,
 * indices and bits.
 *
 * The saved indices are what oneDNN keeps for plain layouts, one byte per
 * output (0..3: the window's row-major position), so the plan is unchanged.
 * The first maximum wins and a NaN wins (PyTorch's rule); backward writes
 * every element of dx: dy at the index, zero elsewhere and in the row or
 * column that no window covers. */
#include "base/err.h"
#include "device/cpu.h"
#include "device/cpu_isa.h"
#include "device/half.h"

#include <immintrin.h>
#include <string.h>

typedef struct mp_geom {
    int64_t planes, oh, ow, ih, iw; /* planes: n * c */
} mp_geom;

/* ---- AVX-512: 16 outputs at a time (cpu_isa.h chooses) ---- */

/* best/idx take v (the window's position i) where v > best or v is NaN.
 * The indices are bytes from the start: Zen 4 runs the truncating stores
 * (vpmovdb, vpmovdw to memory) slowly, a third of this loop's time. */
BFIT_CPU_AVX512 static inline void mp_take(__m512 v, int i, __m512 *best, __m128i *idx)
{
    __mmask16 m = _mm512_cmp_ps_mask(v, *best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    *best = _mm512_mask_mov_ps(*best, m, v);
    *idx = _mm_mask_mov_epi8(*idx, m, _mm_set1_epi8((char)i));
}

/* lanes lo..: the first n of 32 input elements, as masks of two 16-lane halves */
BFIT_CPU_AVX512 static inline __mmask16 mp_lo(int64_t n) { return n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1); }
BFIT_CPU_AVX512 static inline __mmask16 mp_hi(int64_t n) { return n <= 16 ? 0 : (__mmask16)((1u << (n - 16)) - 1); }
BFIT_CPU_AVX512 static inline __mmask32 mp_k32(int64_t n) { return n >= 32 ? 0xffffffffu : (__mmask32)((1u << n) - 1); }

/* 16 outputs (the first m) of f32 rows r0, r1: even and odd columns by permutes */
BFIT_CPU_AVX512 static __m512 mp_fwd16_f32(const float *r0, const float *r1, int64_t m, __m128i *idx)
{
    const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    __mmask16 lo = mp_lo(2 * m), hi = mp_hi(2 * m);
    __m512 a0 = _mm512_maskz_loadu_ps(lo, r0), a1 = _mm512_maskz_loadu_ps(hi, r0 + 16);
    __m512 b0 = _mm512_maskz_loadu_ps(lo, r1), b1 = _mm512_maskz_loadu_ps(hi, r1 + 16);
    __m512 best = _mm512_permutex2var_ps(a0, ev, a1);

    *idx = _mm_setzero_si128();
    mp_take(_mm512_permutex2var_ps(a0, od, a1), 1, &best, idx);
    mp_take(_mm512_permutex2var_ps(b0, ev, b1), 2, &best, idx);
    mp_take(_mm512_permutex2var_ps(b0, od, b1), 3, &best, idx);
    return best;
}

/* the same for bf16 rows: a pair is a 32-bit lane */
BFIT_CPU_AVX512 static __m512 mp_fwd16_bf16(const uint16_t *r0, const uint16_t *r1, int64_t m, __m128i *idx)
{
    __m512i a = _mm512_maskz_loadu_epi16(mp_k32(2 * m), r0), b = _mm512_maskz_loadu_epi16(mp_k32(2 * m), r1);
    __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    __m512 best = _mm512_castsi512_ps(_mm512_slli_epi32(a, 16));

    *idx = _mm_setzero_si128();
    mp_take(_mm512_castsi512_ps(_mm512_and_si512(a, hi)), 1, &best, idx);
    mp_take(_mm512_castsi512_ps(_mm512_slli_epi32(b, 16)), 2, &best, idx);
    mp_take(_mm512_castsi512_ps(_mm512_and_si512(b, hi)), 3, &best, idx);
    return best;
}

/* One output row: y[0..ow) and its indices ix (NULL: inference) */
BFIT_CPU_AVX512 static void fwd_row_avx512(int bf16, const void *r0, const void *r1, void *y, uint8_t *ix,
                                           int64_t ow)
{
    /* the high halves of 16 lanes, packed into the low 256 bits */
    const __m512i odd16 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 31, 29, 27, 25, 23, 21,
                                           19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    for (int64_t j = 0; j < ow; j += 16) {
        int64_t m = ow - j < 16 ? ow - j : 16;
        __mmask16 k = (__mmask16)((1u << m) - 1);
        __m128i idx;
        if (bf16) {
            __m512 best = mp_fwd16_bf16((const uint16_t *)r0 + 2 * j, (const uint16_t *)r1 + 2 * j, m, &idx);
            __m512i h = _mm512_permutexvar_epi16(odd16, _mm512_castps_si512(best));
            _mm256_mask_storeu_epi16((uint16_t *)y + j, k, _mm512_castsi512_si256(h));
        } else {
            __m512 best = mp_fwd16_f32((const float *)r0 + 2 * j, (const float *)r1 + 2 * j, m, &idx);
            _mm512_mask_storeu_ps((float *)y + j, k, best);
        }
        if (ix)
            _mm_mask_storeu_epi8(ix + j, k, idx);
    }
}

/* One output row's gradient into input rows d0, d1 (2 ow elements each) */
BFIT_CPU_AVX512 static void bwd_row_avx512(int bf16, const void *dy, const uint8_t *ix, void *d0, void *d1,
                                           int64_t ow)
{
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));

    for (int64_t j = 0; j < ow; j += 16) {
        int64_t m = ow - j < 16 ? ow - j : 16;
        __mmask16 k = (__mmask16)((1u << m) - 1), e[4];
        __m128i idx = _mm_maskz_loadu_epi8(k, ix + j);
        for (int i = 0; i < 4; i++)
            e[i] = _mm_cmpeq_epi8_mask(idx, _mm_set1_epi8((char)i));
        if (bf16) {
            __m512i g = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, (const uint16_t *)dy + j));
            __m512i gs = _mm512_slli_epi32(g, 16);
            __m512i w0 = _mm512_or_si512(_mm512_maskz_mov_epi32(e[0], g), _mm512_maskz_mov_epi32(e[1], gs));
            __m512i w1 = _mm512_or_si512(_mm512_maskz_mov_epi32(e[2], g), _mm512_maskz_mov_epi32(e[3], gs));
            _mm512_mask_storeu_epi16((uint16_t *)d0 + 2 * j, mp_k32(2 * m), w0);
            _mm512_mask_storeu_epi16((uint16_t *)d1 + 2 * j, mp_k32(2 * m), w1);
        } else {
            __m512 g = _mm512_maskz_loadu_ps(k, (const float *)dy + j);
            __m512 q[4];
            __mmask16 l = mp_lo(2 * m), h = mp_hi(2 * m);
            for (int i = 0; i < 4; i++)
                q[i] = _mm512_maskz_mov_ps(e[i], g);
            _mm512_mask_storeu_ps((float *)d0 + 2 * j, l, _mm512_permutex2var_ps(q[0], lo, q[1]));
            _mm512_mask_storeu_ps((float *)d0 + 2 * j + 16, h, _mm512_permutex2var_ps(q[0], hi, q[1]));
            _mm512_mask_storeu_ps((float *)d1 + 2 * j, l, _mm512_permutex2var_ps(q[2], lo, q[3]));
            _mm512_mask_storeu_ps((float *)d1 + 2 * j + 16, h, _mm512_permutex2var_ps(q[2], hi, q[3]));
        }
    }
}

/* ---- AVX2, the baseline: 8 outputs at a time, the same values, indices
 * and bits. AVX2 masks loads and stores of 32-bit lanes only: a row's last
 * outputs go through masks of lanes (an f32 output reads two, a bf16 pair
 * is one), its index and bf16 bytes through a word. ---- */

/* the first n of 8 32-bit lanes (n may be <= 0 or > 8) */
static inline __m256i lanes8(int64_t n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n < 8 ? n : 8)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* n (<= 8) bytes to the low bytes of a word and back; 8 is one move */
static inline uint64_t ld_bytes(const void *p, int64_t n)
{
    uint64_t w = 0;
    if (n == 8)
        memcpy(&w, p, 8);
    else
        for (int64_t k = 0; k < n; k++)
            w |= (uint64_t)((const uint8_t *)p)[k] << (8 * k);
    return w;
}

static inline void st_bytes(void *p, uint64_t w, int64_t n)
{
    if (n == 8)
        memcpy(p, &w, 8);
    else
        for (int64_t k = 0; k < n; k++)
            ((uint8_t *)p)[k] = (uint8_t)(w >> (8 * k));
}

static inline void take8(__m256 v, int i, __m256 *best, __m256i *idx)
{
    __m256 m = _mm256_or_ps(_mm256_cmp_ps(v, *best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    *best = _mm256_blendv_ps(*best, v, m);
    *idx = _mm256_blendv_epi8(*idx, _mm256_set1_epi32(i), _mm256_castps_si256(m));
}

/* even (sel 0x88) or odd (0xdd) elements of a:b in order: shuffles within
 * 128-bit lanes give quarters 0, 2, 1, 3 */
#define EVEN8(a, b) _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xd8))
#define ODD8(a, b) _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8))

static inline __m256 fwd8_f32(const float *r0, const float *r1, int64_t m, __m256i *idx)
{
    __m256i lo = lanes8(2 * m), hi = lanes8(2 * m - 8);
    __m256 a0 = _mm256_maskload_ps(r0, lo), a1 = _mm256_maskload_ps(r0 + 8, hi);
    __m256 b0 = _mm256_maskload_ps(r1, lo), b1 = _mm256_maskload_ps(r1 + 8, hi);
    __m256 best = EVEN8(a0, a1);

    *idx = _mm256_setzero_si256();
    take8(ODD8(a0, a1), 1, &best, idx);
    take8(EVEN8(b0, b1), 2, &best, idx);
    take8(ODD8(b0, b1), 3, &best, idx);
    return best;
}

static inline __m256 fwd8_bf16(const uint16_t *r0, const uint16_t *r1, int64_t m, __m256i *idx)
{
    __m256i a = _mm256_maskload_epi32((const int *)r0, lanes8(m)), b = _mm256_maskload_epi32((const int *)r1, lanes8(m));
    __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    __m256 best = _mm256_castsi256_ps(_mm256_slli_epi32(a, 16));

    *idx = _mm256_setzero_si256();
    take8(_mm256_castsi256_ps(_mm256_and_si256(a, hi)), 1, &best, idx);
    take8(_mm256_castsi256_ps(_mm256_slli_epi32(b, 16)), 2, &best, idx);
    take8(_mm256_castsi256_ps(_mm256_and_si256(b, hi)), 3, &best, idx);
    return best;
}

/* the low byte (idx) or half (bf16 values) of each 32-bit lane, packed */
static inline uint64_t low_bytes8(__m256i v)
{
    __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(v, v), v); /* lane bytes 0-3: the lane's 4 values */
    return (uint32_t)_mm_cvtsi128_si32(_mm256_castsi256_si128(b)) |
           (uint64_t)(uint32_t)_mm_cvtsi128_si32(_mm256_extracti128_si256(b, 1)) << 32;
}

static inline __m128i high_halves8(__m256 v)
{
    __m256i h = _mm256_srli_epi32(_mm256_castps_si256(v), 16);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08));
}

static void fwd_row_avx2(int bf16, const void *r0, const void *r1, void *y, uint8_t *ix, int64_t ow)
{
    for (int64_t j = 0; j < ow; j += 8) {
        int64_t m = ow - j < 8 ? ow - j : 8;
        __m256i idx;
        if (bf16) {
            __m128i h = high_halves8(fwd8_bf16((const uint16_t *)r0 + 2 * j, (const uint16_t *)r1 + 2 * j, m, &idx));
            if (m == 8) {
                _mm_storeu_si128((__m128i *)((uint16_t *)y + j), h);
            } else {
                uint16_t t[8];
                _mm_storeu_si128((__m128i *)t, h);
                memcpy((uint16_t *)y + j, t, (size_t)m * 2);
            }
        } else {
            __m256 best = fwd8_f32((const float *)r0 + 2 * j, (const float *)r1 + 2 * j, m, &idx);
            _mm256_maskstore_ps((float *)y + j, lanes8(m), best);
        }
        if (ix)
            st_bytes(ix + j, low_bytes8(idx), m);
    }
}

static void bwd_row_avx2(int bf16, const void *dy, const uint8_t *ix, void *d0, void *d1, int64_t ow)
{
    for (int64_t j = 0; j < ow; j += 8) {
        int64_t m = ow - j < 8 ? ow - j : 8;
        __m256i idx = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)ld_bytes(ix + j, m))), e[4];
        for (int i = 0; i < 4; i++)
            e[i] = _mm256_cmpeq_epi32(idx, _mm256_set1_epi32(i));
        if (bf16) {
            uint16_t t[8] = {0};
            if (m == 8)
                memcpy(t, (const uint16_t *)dy + j, 16);
            else
                memcpy(t, (const uint16_t *)dy + j, (size_t)m * 2);
            __m256i g = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)t)), gs = _mm256_slli_epi32(g, 16);
            __m256i w0 = _mm256_or_si256(_mm256_and_si256(e[0], g), _mm256_and_si256(e[1], gs));
            __m256i w1 = _mm256_or_si256(_mm256_and_si256(e[2], g), _mm256_and_si256(e[3], gs));
            _mm256_maskstore_epi32((int *)((uint16_t *)d0 + 2 * j), lanes8(m), w0);
            _mm256_maskstore_epi32((int *)((uint16_t *)d1 + 2 * j), lanes8(m), w1);
        } else {
            __m256 g = _mm256_maskload_ps((const float *)dy + j, lanes8(m)), q[4];
            __m256i lo = lanes8(2 * m), hi = lanes8(2 * m - 8);
            for (int i = 0; i < 4; i++)
                q[i] = _mm256_and_ps(_mm256_castsi256_ps(e[i]), g);
            /* (q0, q1) interleaved to row 0, (q2, q3) to row 1: unpacks within
             * 128-bit lanes, then the lanes in order */
            for (int r = 0; r < 2; r++) {
                float *d = (float *)(r ? d1 : d0) + 2 * j;
                __m256 l = _mm256_unpacklo_ps(q[2 * r], q[2 * r + 1]), h = _mm256_unpackhi_ps(q[2 * r], q[2 * r + 1]);
                _mm256_maskstore_ps(d, lo, _mm256_permute2f128_ps(l, h, 0x20));
                _mm256_maskstore_ps(d + 8, hi, _mm256_permute2f128_ps(l, h, 0x31));
            }
        }
    }
}

/* Zero what no window covers below output row oy of a plane: the last
 * column of its two input rows (odd width), the last row (odd height). */
static void bwd_uncovered(const mp_geom *g, char *r0, size_t es, int64_t oy)
{
    if (g->iw > 2 * g->ow) {
        memset(r0 + (size_t)(2 * g->ow) * es, 0, es);
        memset(r0 + (size_t)(g->iw + 2 * g->ow) * es, 0, es);
    }
    if (oy == g->oh - 1 && g->ih > 2 * g->oh)
        memset(r0 + (size_t)(2 * g->iw) * es, 0, (size_t)((g->ih - 2 * g->oh) * g->iw) * es);
}

/* Plane p (one channel of one sample), its output rows in turn through a
 * row function that the variants below pass as a constant, so it is
 * inlined into each (a row is 7 or 14 outputs in the cnn: a call per row
 * would show). */
typedef void fwd_row_fn(int bf16, const void *r0, const void *r1, void *y, uint8_t *ix, int64_t ow);
typedef void bwd_row_fn(int bf16, const void *dy, const uint8_t *ix, void *d0, void *d1, int64_t ow);

static inline __attribute__((always_inline)) void fwd_plane(fwd_row_fn *row, const mp_geom *g, int bf16,
                                                              const char *x, char *y, uint8_t *ix, int64_t p)
{
    size_t es = bf16 ? 2 : 4;
    const char *r0 = x + (size_t)(p * g->ih * g->iw) * es;
    for (int64_t oy = 0, o = p * g->oh * g->ow; oy < g->oh; oy++, o += g->ow, r0 += (size_t)(2 * g->iw) * es)
        row(bf16, r0, r0 + (size_t)g->iw * es, y + (size_t)o * es, ix ? ix + o : NULL, g->ow);
}

static inline __attribute__((always_inline)) void bwd_plane(bwd_row_fn *row, const mp_geom *g, int bf16,
                                                              const char *dy, char *dx, const uint8_t *ix, int64_t p)
{
    size_t es = bf16 ? 2 : 4;
    char *r0 = dx + (size_t)(p * g->ih * g->iw) * es;
    for (int64_t oy = 0, o = p * g->oh * g->ow; oy < g->oh; oy++, o += g->ow, r0 += (size_t)(2 * g->iw) * es) {
        row(bf16, dy + (size_t)o * es, ix + o, r0, r0 + (size_t)g->iw * es, g->ow);
        bwd_uncovered(g, r0, es, oy);
    }
}

BFIT_CPU_AVX512 static void fwd_plane_avx512(const mp_geom *g, int bf16, const char *x, char *y, uint8_t *ix,
                                             int64_t p)
{
    fwd_plane(fwd_row_avx512, g, bf16, x, y, ix, p);
}

static void fwd_plane_avx2(const mp_geom *g, int bf16, const char *x, char *y, uint8_t *ix, int64_t p)
{
    fwd_plane(fwd_row_avx2, g, bf16, x, y, ix, p);
}

BFIT_CPU_AVX512 static void bwd_plane_avx512(const mp_geom *g, int bf16, const char *dy, char *dx,
                                             const uint8_t *ix, int64_t p)
{
    bwd_plane(bwd_row_avx512, g, bf16, dy, dx, ix, p);
}

static void bwd_plane_avx2(const mp_geom *g, int bf16, const char *dy, char *dx, const uint8_t *ix, int64_t p)
{
    bwd_plane(bwd_row_avx2, g, bf16, dy, dx, ix, p);
}

typedef void fwd_plane_fn(const mp_geom *g, int bf16, const char *x, char *y, uint8_t *ix, int64_t p);
typedef void bwd_plane_fn(const mp_geom *g, int bf16, const char *dy, char *dx, const uint8_t *ix, int64_t p);

static mp_geom geom(const bfit_op_desc *d)
{
    mp_geom g = {d->u.pool.n * d->u.pool.c, d->u.pool.oh, d->u.pool.ow, d->u.pool.ih, d->u.pool.iw};
    return g;
}

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    mp_geom g = geom(&op->base.desc);
    int bf16 = op->base.desc.dtype == BFIT_BF16;
    const char *x = a->src;
    char *y = a->dst;
    uint8_t *ix = op->saved ? a->saved : NULL;
    fwd_plane_fn *plane = bfit_cpu_isa_get() == BFIT_CPU_ISA_AVX512 ? fwd_plane_avx512 : fwd_plane_avx2;

    if (!x || !y || (op->saved && !ix))
        return bfit_fail(BFIT_EINVAL, "pool forward: src, dst (and saved for training max) are required");
    /* by planes: no division per row */
    BFIT_PAR_FOR_IF(g.planes * g.oh * g.ow > BFIT_PAR_MIN / 4,
                    for (int64_t p = 0; p < g.planes; p++) plane(&g, bf16, x, y, ix, p););
    return BFIT_OK;
}

static int run_bwd(cpu_op *op, const bfit_op_args *a)
{
    mp_geom g = geom(&op->base.desc);
    int bf16 = op->base.desc.dtype == BFIT_BF16;
    const char *dy = a->diff_dst;
    char *dx = a->diff_src;
    const uint8_t *ix = a->saved;
    bwd_plane_fn *plane = bfit_cpu_isa_get() == BFIT_CPU_ISA_AVX512 ? bwd_plane_avx512 : bwd_plane_avx2;

    if (!dy || !dx || !ix)
        return bfit_fail(BFIT_EINVAL, "pool backward: diff_dst, diff_src (and saved for max) are required");
    BFIT_PAR_FOR_IF(g.planes * g.oh * g.ow > BFIT_PAR_MIN / 4,
                    for (int64_t p = 0; p < g.planes; p++) plane(&g, bf16, dy, dx, ix, p););
    return BFIT_OK;
}

size_t bfit_cpu_maxpool_saved(const bfit_op_desc *d)
{
    return d->kind == BFIT_OP_POOL_BWD || d->u.pool.training
               ? (size_t)(d->u.pool.n * d->u.pool.c * d->u.pool.oh * d->u.pool.ow)
               : 0;
}

/* Take the op if it is a 2x2/2 unpadded max pool of f32 or bf16 (*done = 1)
 * whose windows lie inside the input (not a ceil_mode one of an odd size:
 * cpu_maxpool_k.c clips those). */
int bfit_cpu_maxpool2_init(cpu_op *op, int *done)
{
    const bfit_op_desc *d = &op->base.desc;

    *done = d->u.pool.max && d->u.pool.kh == 2 && d->u.pool.kw == 2 && d->u.pool.sh == 2 && d->u.pool.sw == 2 &&
            d->u.pool.ph == 0 && d->u.pool.pw == 0 && 2 * d->u.pool.oh <= d->u.pool.ih &&
            2 * d->u.pool.ow <= d->u.pool.iw && (d->dtype == BFIT_F32 || d->dtype == BFIT_BF16);
    if (!*done)
        return BFIT_OK;
    op->ws = 0;
    op->saved = bfit_cpu_maxpool_saved(d);
    if (d->u.pool.blk_src || d->u.pool.blk_dst) /* nChw8c/16c: the same sizes, cpu_maxpool_blk.c's loops */
        return bfit_cpu_maxpool_blk_init(op);
    op->run = d->kind == BFIT_OP_POOL_FWD ? run_fwd : run_bwd;
    return BFIT_OK;
}
