/* cpu_maxpool_kblk.c - cpu_maxpool_k.c's max pool (any window, stride and
 * padding) where its input and output, and their gradients, are in nChw8c
 * or nChw16c: f32 and bf16, the convolutions' layout around it.
 *
 * ResNet's stem pool (3x3, stride 2, padding 1) sits between the stem's
 * batch norm and the first stage; in nchw only, it held the stem and the
 * whole first stage out of the layout chains (store.c): their batch norms
 * on oneDNN's nchw kernel and a reorder each side of every convolution.
 *
 * A block's B channels lie side by side, so each output computes its B
 * lanes at once with no transposes: the same comparisons in the same
 * order as cpu_maxpool_k.c's per channel (the first maximum wins, a NaN
 * wins, the last one in the window's row-major order), the maximum copied
 * bits and all, one index byte per output at the output's own position.
 * Backward adds each dy at its winner in the outputs' row-major order, so
 * every sum is nchw's, bit for bit. */
#include "base/err.h"
#include "base/par.h"
#include "device/cpu.h"
#include "device/half.h"

#include <stdint.h>
#include <string.h>

typedef struct mpkb {
    int64_t planes, ih, iw, oh, ow, kh, kw, sh, sw, ph, pw; /* planes: n times the blocks of channels */
    int B;
} mpkb;

static mpkb geom(const bfit_op_desc *d)
{
    int B = d->u.pool.blk_src;
    mpkb g = {d->u.pool.n * (d->u.pool.c / B), d->u.pool.ih, d->u.pool.iw, d->u.pool.oh, d->u.pool.ow,
              d->u.pool.kh, d->u.pool.kw, d->u.pool.sh, d->u.pool.sw, d->u.pool.ph, d->u.pool.pw, B};
    return g;
}

/* Lane l of the B at v, as f32 (bf16 widened exactly). */
static inline float lane(const void *v, int l, int bf16)
{
    return bf16 ? bfit_bf16_to_f32(((const uint16_t *)v)[l]) : ((const float *)v)[l];
}

/* Row oy of block plane p, B and bf16 constants where inlined so the lanes
 * vectorise. A bf16 maximum goes back as the top half of its widened bits:
 * the input's bits, NaN payloads too. */
static inline __attribute__((always_inline)) void fwd_row(const mpkb *g, const int B, const int bf16, const void *x,
                                                          void *y, uint8_t *ix, int64_t p, int64_t oy)
{
    const int64_t es = bf16 ? 2 : 4;
    int64_t y0 = oy * g->sh - g->ph, ky0 = y0 < 0 ? -y0 : 0, ky1 = y0 + g->kh > g->ih ? g->ih - y0 : g->kh;
    const char *in = (const char *)x + p * g->ih * g->iw * B * es;

    for (int64_t ox = 0; ox < g->ow; ox++) {
        int64_t x0 = ox * g->sw - g->pw, kx0 = x0 < 0 ? -x0 : 0, kx1 = x0 + g->kw > g->iw ? g->iw - x0 : g->kw;
        int64_t o = ((p * g->oh + oy) * g->ow + ox) * B;
        float best[16];
        uint8_t bk[16];
        const char *first = in + ((y0 + ky0) * g->iw + x0 + kx0) * B * es;
        for (int l = 0; l < B; l++)
            best[l] = lane(first, l, bf16), bk[l] = (uint8_t)(ky0 * g->kw + kx0);
        for (int64_t ky = ky0; ky < ky1; ky++)
            for (int64_t kx = ky == ky0 ? kx0 + 1 : kx0; kx < kx1; kx++) {
                const char *v = in + ((y0 + ky) * g->iw + x0 + kx) * B * es;
                uint8_t k = (uint8_t)(ky * g->kw + kx);
#pragma omp simd
                for (int l = 0; l < B; l++) {
                    float f = lane(v, l, bf16);
                    int m = (f > best[l]) | (f != f);
                    best[l] = m ? f : best[l];
                    bk[l] = m ? k : bk[l];
                }
            }
        if (bf16) {
            uint16_t *d = (uint16_t *)y + o;
            for (int l = 0; l < B; l++) {
                uint32_t b;
                memcpy(&b, &best[l], sizeof b);
                d[l] = (uint16_t)(b >> 16);
            }
        } else {
            memcpy((float *)y + o, best, (size_t)B * sizeof *best);
        }
        if (ix)
            memcpy(ix + o, bk, (size_t)B);
    }
}

#define FWD_ROW(name, B, bf16)                                                                                         \
    static void name(const mpkb *g, const void *x, void *y, uint8_t *ix, int64_t p, int64_t oy)                       \
    {                                                                                                                  \
        fwd_row(g, B, bf16, x, y, ix, p, oy);                                                                          \
    }
FWD_ROW(fwd_row8, 8, 0)
FWD_ROW(fwd_row16, 16, 0)
FWD_ROW(fwd_row8_bf, 8, 1)
FWD_ROW(fwd_row16_bf, 16, 1)
#undef FWD_ROW

/* bwd_plane on bf16: each tile of inputs (rows, then columns, of at most
 * STRIP values with their lanes) summed in f32 in the outputs' row-major
 * order, as cpu_maxpool_k.c's nchw bf16 backward, and rounded once. */
enum { STRIP = 4096 };
static void bwd_plane_bf(const mpkb *g, const uint16_t *dy, uint16_t *dx, const uint8_t *ix, int64_t p)
{
    const int64_t B = g->B, cols = g->iw * B <= STRIP ? g->iw : STRIP / B;
    const int64_t rows = g->iw * B <= STRIP ? STRIP / (g->iw * B) : 1;
    float acc[STRIP];

    for (int64_t r0 = 0; r0 < g->ih; r0 += rows)
        for (int64_t c0 = 0; c0 < g->iw; c0 += cols) {
            int64_t r1 = r0 + rows < g->ih ? r0 + rows : g->ih, c1 = c0 + cols < g->iw ? c0 + cols : g->iw;
            int64_t w = c1 - c0, oy0, oy1, ox0, ox1, skip;
            /* the outputs whose windows meet the tile's rows, its columns */
            bfit_cpu_pool_windows(r0, g->kh, g->sh, g->ph, g->oh, &oy0, &skip);
            bfit_cpu_pool_windows(r1 - 1, g->kh, g->sh, g->ph, g->oh, &skip, &oy1);
            bfit_cpu_pool_windows(c0, g->kw, g->sw, g->pw, g->ow, &ox0, &skip);
            bfit_cpu_pool_windows(c1 - 1, g->kw, g->sw, g->pw, g->ow, &skip, &ox1);
            memset(acc, 0, (size_t)((r1 - r0) * w * B) * sizeof *acc);
            for (int64_t oy = oy0; oy < oy1; oy++)
                for (int64_t ox = ox0; ox < ox1; ox++) {
                    int64_t o = ((p * g->oh + oy) * g->ow + ox) * B;
                    for (int64_t l = 0; l < B; l++) {
                        int k = ix[o + l];
                        int64_t iy = oy * g->sh - g->ph + k / g->kw, jx = ox * g->sw - g->pw + k % g->kw;
                        if (iy >= r0 && iy < r1 && jx >= c0 && jx < c1)
                            acc[((iy - r0) * w + jx - c0) * B + l] += bfit_bf16_to_f32(dy[o + l]);
                    }
                }
            for (int64_t r = r0; r < r1; r++)
                for (int64_t i = 0; i < w * B; i++)
                    dx[((p * g->ih + r) * g->iw + c0) * B + i] = bfit_f32_to_bf16(acc[(r - r0) * w * B + i]);
        }
}

/* Block plane p of dx zeroed, then each output's dy added at its winner,
 * lane by lane, in the outputs' row-major order. */
static void bwd_plane(const mpkb *g, const float *dy, float *dx, const uint8_t *ix, int64_t p)
{
    const int64_t B = g->B;
    float *d = dx + p * g->ih * g->iw * B;
    int64_t o = p * g->oh * g->ow * B;

    memset(d, 0, (size_t)(g->ih * g->iw * B) * sizeof *d);
    for (int64_t oy = 0; oy < g->oh; oy++)
        for (int64_t ox = 0; ox < g->ow; ox++, o += B)
            for (int64_t l = 0; l < B; l++) {
                int k = ix[o + l];
                d[((oy * g->sh - g->ph + k / g->kw) * g->iw + ox * g->sw - g->pw + k % g->kw) * B + l] += dy[o + l];
            }
}

static int run_fwd(cpu_op *op, const bfit_op_args *a)
{
    mpkb g = geom(&op->base.desc);
    void (*row)(const mpkb *, const void *, void *, uint8_t *, int64_t, int64_t) =
        op->base.desc.dtype == BFIT_BF16 ? (g.B == 16 ? fwd_row16_bf : fwd_row8_bf) : g.B == 16 ? fwd_row16 : fwd_row8;
    uint8_t *ix = op->saved ? a->saved : NULL;
    int64_t rows = g.planes * g.oh;

    if (!a->src || !a->dst || (op->saved && !ix))
        return bfit_fail(BFIT_EINVAL, "pool forward: src, dst (and saved for training max) are required");
    BFIT_PAR_FOR_IF(rows * g.ow * g.B * g.kh * g.kw > BFIT_PAR_MIN / 4,
                    for (int64_t r = 0; r < rows; r++) row(&g, a->src, a->dst, ix, r / g.oh, r % g.oh););
    return BFIT_OK;
}

static int run_bwd(cpu_op *op, const bfit_op_args *a)
{
    mpkb g = geom(&op->base.desc);

    if (!a->diff_dst || !a->diff_src || !a->saved)
        return bfit_fail(BFIT_EINVAL, "pool backward: diff_dst, diff_src (and saved for max) are required");
    BFIT_PAR_FOR_IF(g.planes * g.ih * g.iw * g.B > BFIT_PAR_MIN / 4,
                    for (int64_t p = 0; p < g.planes; p++) {
                        if (op->base.desc.dtype == BFIT_BF16)
                            bwd_plane_bf(&g, a->diff_dst, a->diff_src, a->saved, p);
                        else
                            bwd_plane(&g, a->diff_dst, a->diff_src, a->saved, p);
                    });
    return BFIT_OK;
}

/* The run of an f32 or bf16 max pool with its input and output in one block of 8
 * or 16 whole channels, or NULL; maxpool_k_init has checked the rest (a
 * window of at most 255 positions, always holding an input). */
bfit_cpu_run_fn bfit_cpu_maxpool_kblk_run(const bfit_op_desc *d)
{
    int B = d->u.pool.blk_src;

    if (!d->u.pool.max || (d->dtype != BFIT_F32 && d->dtype != BFIT_BF16) || (B != 8 && B != 16) || d->u.pool.blk_dst != B ||
        d->u.pool.c % B)
        return NULL;
    return d->kind == BFIT_OP_POOL_FWD ? run_fwd : run_bwd;
}
