/* img_resample.c - PIL's bilinear resampling (Pillow's Resample.c), bit for
 * bit, for 8-bit images of 1 or 3 channels.
 *
 * torchvision's Resize and RandomResizedCrop on PIL images call
 * Image.resize(size, BILINEAR, box), so reproducing it exactly makes our
 * samples equal to torchvision's, not merely close. The filter is the
 * triangle of support 1, widened by the scale when reducing (antialiasing);
 * each output pixel's weights are normalised to sum 1, then rounded to
 * 22-bit fixed point; the horizontal pass writes an 8-bit image of the rows
 * the vertical pass needs.
 */
#include "data/img.h"
#include "base/err.h"

#include <math.h>
#include <string.h>

#define PRECISION_BITS (32 - 8 - 2)

static double triangle(double x)
{
    if (x < 0.0)
        x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

static inline uint8_t clip8(int v)
{
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Coefficients of one axis: PIL's precompute_coeffs and
 * normalize_coeffs_8bpc. ik gets out * ksize weights, bounds out pairs of
 * (first input pixel, count). Returns ksize. */
static int coeffs(int in_size, float in0, float in1, int out_size, double *kk, int32_t *ik, int *bounds)
{
    double scale = (double)(in1 - in0) / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;

    for (int xx = 0; xx < out_size; xx++) {
        double center = in0 + (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5), x;
        double *k = kk + (size_t)xx * (size_t)ksize;

        if (xmin < 0)
            xmin = 0;
        if (xmax > in_size)
            xmax = in_size;
        xmax -= xmin;
        for (x = 0; x < xmax; x++) {
            k[x] = triangle((x + xmin - center + 0.5) * ss);
            ww += k[x];
        }
        for (x = 0; x < xmax; x++)
            if (ww != 0.0)
                k[x] /= ww;
        for (; x < ksize; x++)
            k[x] = 0;
        bounds[2 * xx] = xmin;
        bounds[2 * xx + 1] = xmax;
    }
    for (size_t i = 0; i < (size_t)out_size * (size_t)ksize; i++)
        ik[i] = kk[i] < 0 ? (int32_t)(-0.5 + kk[i] * (1 << PRECISION_BITS))
                          : (int32_t)(0.5 + kk[i] * (1 << PRECISION_BITS));
    return ksize;
}

/* Rows [y0, y0 + out->h) of in, resampled along x into out. */
static void horizontal(const bfit_img *in, int y0, bfit_img *out, int ksize, const int32_t *ik, const int *bounds)
{
    const int C = in->c;

    for (int yy = 0; yy < out->h; yy++) {
        const uint8_t *row = in->px + (size_t)(yy + y0) * (size_t)in->w * C;
        uint8_t *o = out->px + (size_t)yy * (size_t)out->w * C;
        for (int xx = 0; xx < out->w; xx++) {
            const int32_t *k = ik + (size_t)xx * (size_t)ksize;
            const uint8_t *p = row + (size_t)bounds[2 * xx] * C;
            for (int c = 0; c < C; c++) {
                int ss = 1 << (PRECISION_BITS - 1);
                for (int x = 0; x < bounds[2 * xx + 1]; x++)
                    ss += p[x * C + c] * k[x];
                o[xx * C + c] = clip8(ss);
            }
        }
    }
}

/* in resampled along y into out; bounds are rows of in less y0. */
static void vertical(const bfit_img *in, int y0, bfit_img *out, int ksize, const int32_t *ik, const int *bounds)
{
    const size_t stride = (size_t)in->w * (size_t)in->c, n = (size_t)out->w * (size_t)out->c;

    for (int yy = 0; yy < out->h; yy++) {
        const int32_t *k = ik + (size_t)yy * (size_t)ksize;
        const uint8_t *col = in->px + (size_t)(bounds[2 * yy] - y0) * stride;
        uint8_t *o = out->px + (size_t)yy * n;
        for (size_t xx = 0; xx < n; xx++) {
            int ss = 1 << (PRECISION_BITS - 1);
            for (int y = 0; y < bounds[2 * yy + 1]; y++)
                ss += col[(size_t)y * stride + xx] * k[y];
            o[xx] = clip8(ss);
        }
    }
}

/* Room for both axes' coefficients: kk and ik of (ow + oh) * ksize_max,
 * bounds of 2 (ow + oh). */
static int reserve_coeffs(bfit_img_scratch *s, const bfit_img *in, const float box[4], int ow, int oh)
{
    double sx = (double)(box[2] - box[0]) / ow, sy = (double)(box[3] - box[1]) / oh;
    size_t kx = (size_t)ceil(sx < 1 ? 1 : sx) * 2 + 1, ky = (size_t)ceil(sy < 1 ? 1 : sy) * 2 + 1;
    size_t n = (size_t)ow * kx + (size_t)oh * ky;
    int rc;

    (void)in;
    if ((rc = bfit_img_reserve(s, (void **)&s->kk, &s->kk_cap, n * sizeof(double))) != BFIT_OK)
        return rc;
    if ((rc = bfit_img_reserve(s, (void **)&s->ik, &s->ik_cap, n * sizeof(int32_t))) != BFIT_OK)
        return rc;
    return bfit_img_reserve(s, (void **)&s->bounds, &s->bounds_cap, 2 * ((size_t)ow + oh) * sizeof(int));
}

int bfit_img_resample_reserve(bfit_img_scratch *s, const bfit_img *in, int ow, int oh)
{
    const float box[4] = {0, 0, (float)in->w, (float)in->h};
    int rc = reserve_coeffs(s, in, box, ow, oh);
    if (rc == BFIT_OK)
        rc = bfit_img_reserve(s, (void **)&s->tmp.px, &s->tmp.cap, (size_t)ow * in->h * in->c);
    return rc;
}

int bfit_img_resample(bfit_img_scratch *s, const bfit_img *in, const float box[4], int ow, int oh, bfit_img *out)
{
    int need_h = ow != in->w || box[0] != 0 || box[2] != ow, need_v = oh != in->h || box[1] != 0 || box[3] != oh;
    int kx, ky, y_first, y_last, rc;
    int32_t *ikx, *iky;
    int *bx, *by;

    if (ow < 1 || oh < 1 || !(box[0] >= 0) || !(box[1] >= 0) || !(box[2] <= in->w) || !(box[3] <= in->h) ||
        !(box[2] > box[0]) || !(box[3] > box[1]))
        return bfit_fail(BFIT_EINVAL, "resample: box (%g, %g, %g, %g) of a %dx%d image to %dx%d", box[0], box[1],
                         box[2], box[3], in->w, in->h, ow, oh);
    if ((rc = reserve_coeffs(s, in, box, ow, oh)) != BFIT_OK)
        return rc;
    kx = coeffs(in->w, box[0], box[2], ow, s->kk, s->ik, s->bounds);
    ikx = s->ik;
    bx = s->bounds;
    iky = s->ik + (size_t)ow * (size_t)kx;
    by = s->bounds + 2 * (size_t)ow;
    ky = coeffs(in->h, box[1], box[3], oh, s->kk, iky, by);
    y_first = by[0];
    y_last = by[2 * oh - 2] + by[2 * oh - 1];
    if (!need_h && !need_v) { /* PIL copies */
        if ((rc = bfit_img_reserve(s, (void **)&out->px, &out->cap, (size_t)in->w * in->h * in->c)) != BFIT_OK)
            return rc;
        memcpy(out->px, in->px, (size_t)in->w * in->h * in->c);
        out->w = in->w, out->h = in->h, out->c = in->c;
        return BFIT_OK;
    }
    if (need_h) {
        bfit_img *t = need_v ? &s->tmp : out;
        int th = need_v ? y_last - y_first : in->h, t0 = need_v ? y_first : 0;
        if ((rc = bfit_img_reserve(s, (void **)&t->px, &t->cap, (size_t)ow * th * in->c)) != BFIT_OK)
            return rc;
        t->w = ow, t->h = th, t->c = in->c;
        horizontal(in, t0, t, kx, ikx, bx);
        if (!need_v)
            return BFIT_OK;
        in = t;
    } else
        y_first = 0;
    if ((rc = bfit_img_reserve(s, (void **)&out->px, &out->cap, (size_t)in->w * oh * in->c)) != BFIT_OK)
        return rc;
    out->w = in->w, out->h = oh, out->c = in->c;
    vertical(in, y_first, out, ky, iky, by);
    return BFIT_OK;
}
